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
//! | `GPUMUTEX_VISIBLE_DEVICES` | `visible_devices`, `visible_device_list` | none (required) |
//! | `GPUMUTEX_NUM_DEVICES`     | `num_devices`         | 1                  |
//! | `GPUMUTEX_LOCK_DIR`        | `lock_dir`            | `/tmp/libgpumutex` |
//! | `GPUMUTEX_TIMEOUT` (secs)  | `timeout`             | wait forever       |
//! | `GPUMUTEX_BACKFILL`        | `backfill`            | off                |
//! | `GPUMUTEX_JOIN_TIMEOUT`    | `join_timeout`        | 10 seconds         |
//! | `GPUMUTEX_DEVICE_SOURCE`   | `device_source`       | `auto`             |
//! | `GPUMUTEX_ALLOW_NETWORK_FS`| `allow_network_fs`    | off                |
//! | `GPUMUTEX_JOB_ROOT`        | (see below)           | unset              |
//! |                            | `interrupt_on_signals`| off                |
//!
//! Builder values win over the environment. Devices are named in this process's CUDA numbering
//! (an inherited `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` are
//! honoured, and nothing outside them is granted), or by UUID, and locked by physical identity
//! (UUID): see [`devices`] for clusters, containers and MIG. Bad values are typed [`Error`]s
//! reported before anything is created. No timeout value can make a wait panic: a timeout too large to be a
//! deadline ([`std::time::Duration::MAX`], `GPUMUTEX_TIMEOUT=1e19`) waits without limit, and
//! `NaN`, infinities and negative numbers are refused.
//!
//! ## Threat model
//!
//! The lock is *cooperative*: it orders the processes that use it. Nothing stops a user from
//! running a program on a GPU without asking, so the guarantees below are about participants.
//!
//! * **The same user.** Trusted, but careless: stale files, crashed processes, pid reuse, a
//!   shell with a copied launcher environment, a ticket removed by hand, a forked child that
//!   unlocks what it inherited. None of these breaks exclusion or hangs a wait.
//! * **Other users** (the case this design is built for). In the lock directory they can create
//!   any name that is free (files, FIFOs, symbolic links, directories, sparse files of any size,
//!   any content), hold `flock`s and read locks on anything they can open, and, in a directory
//!   without the sticky bit or that they own, delete or rename anybody's files. Against all of
//!   this, **two participants never hold the same device at once** (unless they legitimately
//!   share one claim), **no wait outlives its timeout or ignores cancellation, and a status
//!   report never hangs**. What another user *can* do is deny service: occupy devices out of
//!   turn (write a live claim of their own, or hold the join lock), which a cooperative lock
//!   cannot prevent and which status reports show. A user can also make *their own* processes
//!   share a device out of turn, which they could achieve by ignoring the lock anyway.
//! * **Root** can do anything and is trusted. A lock directory owned by root is trusted.
//! * **Containers sharing a directory** (bind mount). Processes in other pid namespaces are
//!   invisible to `/proc`, and the kernel reports their locks without a pid: their live claims
//!   still make devices busy and their tickets still queue, but a claim is only shared within
//!   one pid namespace (ancestry and lock holders must be checked there), and records carry the
//!   boot id, so nothing from another boot (or another machine on a shared file system) is
//!   trusted.
//! * **Other machines.** The locks are the kernel's, so a lock directory on a network file
//!   system (NFS, SMB, Lustre, GPFS, CephFS, 9p, sshfs, ...) would let two machines take each
//!   other's live claims for dead: it is refused ([`Error::NetworkLockDir`]) unless the user opts
//!   in, which is only right when every participant runs on one machine.
//!
//! How each attack is met:
//!
//! | attack | defence |
//! |---|---|
//! | forged claim record (naming any process, pid 1 included) | a record is shared only when its file's owner is the uid it names, it is from this boot, the kernel names its pid as the holder of its owner lock, and that process is a true ancestor (or sibling rank); an unverified live record only makes its devices busy |
//! | lock file removed or replaced while held | there are no lock files to remove: a claim *is* its record, which only its owner may remove in a trusted directory, and the join lock is the directory itself; identities (device, inode) are re-checked after every lock and before every removal |
//! | FIFO, socket or device under a record name | opened with `O_NOFOLLOW | O_NONBLOCK` relative to the directory descriptor and ignored unless it is a regular file |
//! | huge or sparse file under a record name | sizes are checked before reading; at most 4 KiB is read |
//! | lock directory created by another user, or writable by others without the sticky bit, or a symbolic link (even as `link/`) | refused with [`Error::UntrustedLockDir`] or [`Error::LockDir`] (see below for safe choices) |
//! | timeouts such as `1e19`, `Duration::MAX`, `NaN` | no panics; bad values refused before anything is created |
//! | files planted under the names a chosen process will create next | names carry 128 random bits from `getrandom(2)`: they cannot be predicted, so nothing can be planted under them |
//! | a live ticket numbered near `u64::MAX` (once made every later number saturate, after which a chosen user starved) | ticket numbers are the boot-time clock in nanoseconds, raised above waiting tickets that are not from the future; a number from the future is not followed (see `src/tickets.rs`) |
//! | a hard link to somebody's live record under another name (possible where `protected_hardlinks` is 0; once put a waiter in the queue twice and stalled it) | every record names its own file; under any other name it does not verify (see `src/records.rs`) |
//! | somebody holds the join lock forever | every wait, the join-lock wait included, ends at its deadline, on cancellation and (signal mode) on a signal |
//! | a participant stopped (`SIGSTOP`, Ctrl-Z, a frozen cgroup, a suspended job) inside the join lock | once one process has held the join lock for `GPUMUTEX_JOIN_TIMEOUT` (10 s by default, also for waits without a timeout) the acquisition fails with [`Error::JoinLockStalled`], which names it and its state; status reports name the join lock's holder |
//! | a stopped or frozen waiter at the head of the queue | it holds up nobody while it cannot take a grant, and keeps its place (see [`queue`]) |
//! | a full file system (no space, no inodes, quota) | [`Error::LockDirFull`] at once, saying what ran out; nothing is left behind; releasing needs no space |
//! | the directory flooded with files under record names | files found dead are remembered and skipped (a moderate flood costs a pass little); beyond 65536 record names a pass refuses at once with [`Error::LockDirFlooded`], naming their owners; status reports count ignored files by owner |
//! | a daemon started by `gpumutex-run`'s command, or `gpumutex-run` killed | the runner is a subreaper that holds the devices until its whole process tree has exited, its command dies with it (`PR_SET_PDEATHSIG`), and the command holds the claim's tree lock, so whatever survives keeps the devices busy |
//!
//! ## Choosing a lock directory
//!
//! The directory and every directory on the way to it must be owned by you or by root and must
//! not be writable by others unless they have the sticky bit ([`SAFE_LOCK_DIR_ADVICE`]); a
//! symbolic link on the way is only followed from a directory that passes this check (and, in
//! a sticky directory others may write such as `/tmp`, only when you or the directory's owner
//! own the link), and the lock directory itself must not be a link:
//!
//! * **per user**: a directory of your own on a local file system, e.g.
//!   `$XDG_RUNTIME_DIR/gpumutex` (a per-user tmpfs on systemd machines; created `0700` when
//!   missing). Only your own jobs queue there. *Not* under your home directory: on most
//!   clusters home directories are network storage (NFS, GPFS, Lustre), where the kernel's locks
//!   do not reach the other machines; such a directory is refused ([`Error::NetworkLockDir`]).
//! * **per group or machine**: a directory an administrator creates once, owned by root, e.g.
//!   `install -d -o root -g gpu -m 1770 /var/lib/gpumutex` (members of group `gpu`) or
//!   `install -d -o root -g root -m 1777 /tmp/libgpumutex` (everybody; also works as a
//!   `systemd-tmpfiles` line `d /tmp/libgpumutex 1777 root root -`).
//! * the built-in default `/tmp/libgpumutex` is created `1777` by the first user who needs it;
//!   it is then owned by that user and *other users refuse it* (its owner could delete their
//!   records). On a machine with several users, have root create it as above.
//!
//! The directory must be on a local file system; network file systems are refused unless
//! `GPUMUTEX_ALLOW_NETWORK_FS=1` ([`GpuMutexBuilder::allow_network_fs`]) says that every
//! process using it runs on this one machine (see `src/lockdir.rs`).
//!
//! Keep the directory out of age-based cleaning of temporary files (the `tmpfiles` line above
//! has no age): a claim held for longer than the cleaning age would otherwise lose its record.
//!
//! ## How it works
//!
//! * **Claims.** A process that is granted devices writes a claim record naming them
//!   (`gpukit-claim.*`) and holds a process-owned write lock on it for the life of the claim:
//!   every device a live claim names is busy. The kernel drops the lock when the holder dies,
//!   however it dies; a forked child can neither keep nor release it. A second, inheritable lock
//!   (the *tree lock*) lets programs started through [`GpuGuard::hold_in`] keep the claim alive
//!   if the holder is killed. See `src/liveness.rs` and `src/claims.rs`.
//! * **Queue.** Waiters append a ticket (`gpukit-ticket.<seq>.*`, `<seq>` assigned under the join
//!   lock from the boot-time clock) kept alive the same way: a dead waiter's ticket is skipped. Grants are decided by the
//!   pure functions in [`queue`] under the join lock: FIFO among requests whose device sets
//!   overlap, all-or-nothing (nothing is held while waiting, so no deadlock), and optional
//!   backfill that only uses devices no earlier waiter could use, so it never delays the head.
//! * **Join lock.** An exclusive `flock` on the lock directory itself, held for microseconds
//!   per decision; releasing needs no join lock (removing a record is atomic for readers).
//! * **Hand-over.** Waiters sleep in `ppoll` on an inotify watch of the lock directory (a
//!   release removes a record; a holder's death closes its descriptor) plus the cancel tokens,
//!   with a backoff re-check as a fallback. Inotify instances are pooled per process (closing
//!   one costs 7-20 ms; see `src/wait.rs`). Hand-over takes a few hundred microseconds (the
//!   seed polled every 50 ms); see `benches/mutex.rs`.
//! * **Process trees.** A process shares the claim of the nearest ancestor that holds one (the
//!   kernel's `ppid` chain read from `/proc`; processes are identified by pid *and* start time),
//!   so a child with a copied or cleared environment, or after `setsid`, never queues behind its
//!   own parent; its shared claim keeps the devices busy while it lives. Ranks of a launcher
//!   (torchrun, Open MPI, MPICH, Slurm), which are siblings, share the first claim any of them
//!   takes, also under a launcher that runs as pid 1, while unrelated jobs with a copied
//!   launcher environment do not (see `src/anchors.rs`); any launcher can also export
//!   `GPUMUTEX_JOB_ROOT` ([`job_root_env_value`]). Environment variables are only hints checked
//!   against `/proc` and the kernel's lock table.
//! * **File names** start with `gpukit-`, so this crate does not interoperate with seed
//!   processes (or with gpukit-mutex before protocol version 3, whose names and records differ)
//!   in the same directory.
//!
//! ## Dependencies
//!
//! Only `thiserror` and `libc`. The locks are `fcntl(2)` record locks (process-owned and
//! open-file-description locks, for what each proves, see `src/liveness.rs`) and one `flock(2)`
//! on the directory; `std::fs::File::lock` offers neither, and `fs4` would add nothing.

mod anchors;
mod cancel;
mod claims;
#[cfg(feature = "cli")]
pub mod cli;
mod config;
pub mod devices;
mod error;
mod guard;
mod joinlock;
mod liveness;
mod lockdir;
mod mutex;
mod probe;
mod proc;
pub mod queue;
mod records;
mod session;
mod status;
mod tickets;
mod wait;

pub use cancel::CancelToken;
pub use config::{
    parse_device_list, parse_timeout_secs, Config, DEFAULT_JOIN_TIMEOUT, DEFAULT_LOCK_DIR,
    ENV_ALLOW_NETWORK_FS, ENV_BACKFILL, ENV_JOB_ROOT, ENV_JOIN_TIMEOUT, ENV_LOCK_DIR,
    ENV_NUM_DEVICES, ENV_TIMEOUT, ENV_VISIBLE_DEVICES, MAX_DEVICE_INDEX,
};
pub use devices::{
    parse_visible, Device, DeviceName, DeviceSource, PhysicalDevice, VisibleSpec, ENV_DEVICE_SOURCE,
};
pub use error::{Error, Result, SAFE_LOCK_DIR_ADVICE};
pub use guard::GpuGuard;
pub use mutex::{job_root_env_value, GpuMutex, GpuMutexBuilder};
pub use status::{
    read_status as status, read_status_with as status_with, DeviceStatus, HolderInfo,
    JoinLockHolder, Status, WaiterInfo,
};
