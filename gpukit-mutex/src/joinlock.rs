//! The join lock: an exclusive `flock` on the lock directory itself, held for the microseconds
//! of one decision (probe, share or grant, ticket bookkeeping).
//!
//! It is the directory rather than a file in it because the directory is the one object every
//! participant trusts (see `lockdir.rs`): a file can be deleted or replaced by its owner, and a
//! lock on a deleted file no longer excludes anybody, while the directory can only be replaced
//! by somebody who may write to its parent, which the trust checks rule out. After every
//! acquisition the directory's name is checked to still refer to the locked directory.
//!
//! This is the crate's only join-lock wait. It spins briefly (the lock is held for tens of
//! microseconds; sleeping, even for microseconds, can cost a whole timer tick on VMs without
//! fine-grained timers), then backs off with short sleeps, and like every wait it ends at the
//! deadline, on cancellation and, in signal mode, on a signal (a user who holds the lock forever
//! can delay, but never hang, an acquisition). Releasing a claim does not need it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lockdir::LockDir;
use crate::wait::Waiter;

/// A held join lock; unlocks on drop.
pub(crate) struct JoinLock<'f> {
    fd: &'f OwnedFd,
}

impl Drop for JoinLock<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocks the flock this guard took on a descriptor that outlives it.
        unsafe { libc::flock(self.fd.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Takes the join lock through `fd` (a descriptor of `dir` with its own open file description,
/// from [`LockDir::reopen`]), within the limits of `waiter`.
pub(crate) fn lock<'f>(fd: &'f OwnedFd, dir: &LockDir, waiter: &Waiter) -> Result<JoinLock<'f>> {
    let spin_until = Instant::now() + Duration::from_millis(2);
    let mut pause = Duration::from_micros(50);
    loop {
        // SAFETY: plain syscall on a descriptor we own.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            let held = JoinLock { fd };
            dir.check_identity()?;
            return Ok(held);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => {}
            _ => return Err(Error::io("flock", dir.path(), e)),
        }
        waiter.check()?;
        if Instant::now() < spin_until {
            std::thread::yield_now();
        } else {
            waiter.sleep(pause, None)?;
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}
