//! # gpukit-trust
//!
//! Using a directory that several users of one machine can reach, without letting any of them
//! but the caller (and root) decide what the caller reads, writes or deletes there. gpukit-mutex
//! keeps its device locks in such a directory, gpukit-jit its kernel cache and gpukit-core its
//! GEMM tuning files; all go through this crate, so all apply the same rules. No CUDA, no other gpukit crate: only `libc`.
//!
//! **Trust** ([`rule`]). A directory can be trusted when it is owned by the caller or by root
//! and nobody else may write to it, unless it has the sticky bit (like `/tmp`: others may then
//! create names, but not remove or rename the caller's). Anything else lets another user remove
//! or replace the files in it.
//!
//! **The walk** ([`walk()`]). A path is resolved one component at a time from `/` without
//! letting the kernel follow a symbolic link, and every directory passed through is checked: a
//! link is only read and followed from a directory that passed the check, and in a sticky
//! directory others may write only when the caller or the directory's owner owns it (a link
//! somebody else controls could be re-pointed between two processes, sending them to two
//! different places). Missing directories can be created on the way (only inside trusted ones).
//!
//! **Entries** ([`Dir`]). Everything in a directory is reached relative to its descriptor, never
//! by path again: files are opened with `O_NOFOLLOW | O_NONBLOCK` (a link under a file's name
//! is refused, a FIFO neither blocks nor passes for a file), only regular files are handed out,
//! new files are created exclusively with unpredictable names ([`random_hex`]), and removing
//! a name first checks that it still is the file meant.
//!
//! **Own files** ([`own_file_refusal`], [`Dir::create_temp`]). A file is read as the caller's
//! own only when it is a regular file of the caller's that nobody else may write, within the
//! reader's bound; a new one is written under a fresh hidden name and renamed into place. The
//! kernel cache's entries and the GEMM tuner's files follow this one rule.
//!
//! **Reads** ([`read_bounded`]). A file is read only up to a bound, checked on its size before
//! a byte is read and again while reading (a huge sparse file, or one that grows while it is
//! read, is refused without reading it).
//!
//! Linux only (it uses `O_PATH`, `openat` and friends).
//!
//! ```no_run
//! use gpukit_trust::{walk, Walk};
//!
//! // Walk to the directory (creating missing ones, mode 0700), refusing any directory on the
//! // way that another user could change.
//! let dir = walk("/tmp/my-cache".as_ref(), Walk::CREATE_PRIVATE)?.dir;
//! dir.check_access()?;
//! if let Some((file, meta)) = dir.open_entry("entry")? {
//!     if meta.uid == gpukit_trust::euid() {
//!         let bytes = gpukit_trust::read_bounded(&file, &meta, 1 << 20)?;
//!         # let _ = bytes;
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod dir;
mod error;
mod meta;
mod own_file;
mod random;
mod read;
pub mod rule;
mod walk;

pub use dir::{Dir, Entries};
pub use error::{Error, Result};
pub use meta::{euid, fstat, lstat, FileId, Meta};
pub use own_file::own_file_refusal;
pub use random::{random_hex, RANDOM_HEX_LEN};
pub use read::read_bounded;
pub use rule::{distrust, link_distrust, Distrust};
pub use walk::{walk, OnDistrust, Walk, Walked, MAX_LINKS};
