//! # gpukit-mutex
//!
//! Fair, crash-safe, exclusive GPU device locks for shared machines: no daemon, no root, no
//! CUDA dependency. [`GpuMutex::acquire`] gives the calling process (and its whole process
//! tree) `n` devices of a visible set, in FIFO order, and the kernel releases them when the
//! holder dies, however it dies. A Rust replacement for libgpumutex (same environment
//! variables, same default lock directory), without the seed's defects.
//!
//! ```no_run
//! use std::process::Command;
//! use std::time::Duration;
//! use gpukit_mutex::GpuMutex;
//!
//! # fn main() -> Result<(), gpukit_mutex::Error> {
//! let mutex = GpuMutex::builder()
//!     .visible_devices([0, 1, 2, 3]) // else GPUMUTEX_VISIBLE_DEVICES
//!     .lock_dir("/tmp/libgpumutex") // else GPUMUTEX_LOCK_DIR, else this default
//!     .build()?;
//! let guard = mutex.acquire_timeout(2, Duration::from_secs(600))?;
//! println!("got devices {}", guard.cuda_visible_devices());
//! let status = guard.apply(&mut Command::new("python3").arg("train.py")).status();
//! drop(guard); // the next waiter starts within about a millisecond
//! # let _ = status;
//! # Ok(()) }
//! ```
//!
//! ## Configuration
//!
//! | variable                   | builder               | default            |
//! |----------------------------|-----------------------|--------------------|
//! | `GPUMUTEX_VISIBLE_DEVICES` | `visible_devices`     | none (required)    |
//! | `GPUMUTEX_NUM_DEVICES`     | `num_devices`         | 1                  |
//! | `GPUMUTEX_LOCK_DIR`        | `lock_dir`            | `/tmp/libgpumutex` |
//! | `GPUMUTEX_TIMEOUT` (secs)  | `timeout`             | wait forever       |
//! | `GPUMUTEX_BACKFILL`        | `backfill`            | off                |
//! | `GPUMUTEX_JOB_ROOT`        | (see below)           | unset              |
//!
//! Builder values win over the environment. Bad values are typed [`Error`]s reported before
//! anything is written.
//!
//! ## How it works
//!
//! * **Locks.** One lock file per device in the lock directory, held with `flock(2)` for the
//!   life of the claim. The kernel drops it when the holding descriptor closes, including on
//!   `SIGKILL`. The descriptors are close-on-exec: the claim belongs to the process holding the
//!   [`GpuGuard`]; programs it runs share it by ancestry (below), not by inherited descriptors,
//!   so a daemonizing child cannot keep a device forever, and dropping the guard really releases.
//!   (`fork` without `exec` shares the descriptors, and dropping a guard in such a child does not
//!   release the parent's claim.) Lock files are opened with `O_NOFOLLOW`.
//! * **Queue.** Waiters append a ticket file (ordered by a sequence number assigned under a
//!   global join lock) and hold an exclusive `flock` on it for as long as they live: a ticket
//!   whose lock can be taken belongs to a dead waiter and is skipped (no pid polling). Grants
//!   are decided by the pure function [`queue::decide`] under the join lock: FIFO among requests
//!   whose device sets overlap, all-or-nothing (nothing is held while waiting, so no deadlock),
//!   and optional backfill that only uses devices no earlier waiter could use, so it never
//!   delays the head of the queue.
//! * **Hand-over.** Waiters sleep in `ppoll` on an inotify watch of the lock directory (a
//!   release closes the device descriptors, which emits close events; so does a holder's death)
//!   plus a cancel pipe, with a backoff re-check as a fallback. Inotify instances are pooled
//!   per process and never closed after a wait: closing one that had a watch blocks for a
//!   kernel tick plus an RCU grace period (7-20 ms), which used to delay every contended
//!   `acquire`'s return (see `src/wait.rs`). The `/proc` ancestry walk of a waiting process
//!   runs before it takes the join lock, so its checks hold that lock briefly.
//!   Hand-over takes a few hundred microseconds, well under the 5 ms target (the seed polled
//!   every 50 ms); see `benches/mutex.rs`.
//! * **Process trees.** A process shares the claim of the nearest ancestor that holds one: the
//!   ancestry is the kernel's `ppid` chain read from `/proc`, and processes are identified by pid
//!   *and* start time (so a recycled pid is not a holder). This works with a copied or cleared
//!   environment and after `setsid`, and a child never queues behind its own parent. Sharers take
//!   a shared `flock` too, so the devices stay reserved while any participant lives. Siblings
//!   started by a launcher that holds the claim are its descendants. For launchers that never
//!   take the claim themselves (torchrun under the preload, where only the ranks call `cuInit`)
//!   there is a *job anchor*: a torchrun-style rank (`LOCAL_RANK` set, `WORLD_SIZE` > 1) takes
//!   its parent, the launcher, as anchor, and any launcher can export
//!   `GPUMUTEX_JOB_ROOT=<pid>:<start>` (see [`job_root_env_value`]). A claim records its anchor,
//!   and processes that declare the same anchor share it. Environment variables are only ever
//!   hints checked against `/proc`: an anchor that is not a true ancestor is ignored, a process
//!   that declares no anchor never joins an anchored claim, and a forged
//!   `CUDA_VISIBLE_DEVICES` or `GPUMUTEX_JOB_ROOT` grants nothing to an unrelated process. The
//!   one thing a forger can do is join the claim of its own sibling ranks.
//!   Processes re-parented away from the holder (double-fork daemons) leave the tree;
//!   `gpumutex-run` makes itself a child subreaper so such orphans stay in it.
//! * **Lock directory.** The default `/tmp/libgpumutex` is created with mode `1777` (sticky,
//!   world-writable) when this crate creates it; a directory the user names is never `chmod`ed.
//!   Symlinked directories are refused. In a sticky directory a user cannot delete another
//!   user's stale ticket; such tickets are recognised as dead by their lock and skipped.
//!   File names start with `gpukit-`, so this crate does not interoperate with seed processes
//!   that use the same directory at the same time.
//!
//! ## Dependencies
//!
//! Only `thiserror` and `libc`. File locks use `std::fs::File::{lock, try_lock, lock_shared}`
//! (stable since Rust 1.89, which is `flock(2)` on Linux), so `fs4` is not needed.

mod cancel;
pub mod config;
mod error;
mod guard;
pub mod lockdir;
mod mutex;
pub mod proc;
pub mod queue;
pub mod records;
mod status;
mod wait;

pub use cancel::CancelToken;
pub use config::{
    parse_device_list, Config, DEFAULT_LOCK_DIR, ENV_BACKFILL, ENV_JOB_ROOT, ENV_LOCK_DIR,
    ENV_NUM_DEVICES, ENV_TIMEOUT, ENV_VISIBLE_DEVICES,
};
pub use error::{Error, Result};
pub use guard::GpuGuard;
pub use mutex::{job_root_env_value, GpuMutex, GpuMutexBuilder};
pub use status::{read_status as status, DeviceStatus, HolderInfo, Status, WaiterInfo};
