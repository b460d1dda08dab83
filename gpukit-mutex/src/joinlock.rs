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
//!
//! **A holder that does not let go.** A participant stopped in the middle of a decision
//! (`SIGSTOP`, Ctrl-Z, a frozen cgroup, a suspended batch job) keeps the join lock, and every
//! acquisition waits for it. So the join-lock wait has its own limit, on by default
//! ([`crate::config::DEFAULT_JOIN_TIMEOUT`], `GPUMUTEX_JOIN_TIMEOUT`), even for acquisitions
//! that may wait forever for devices: once the *same* process has held the lock for that long,
//! the acquisition ends with [`Error::JoinLockStalled`], which names the holder and its state.
//! The holder is found in the kernel's lock table (`/proc/locks`, the `flock` on the
//! directory's device and inode); status reports name it too ([`holder`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lockdir::LockDir;
use crate::proc;
use crate::status::JoinLockHolder;
use crate::wait::Waiter;

/// How long the join lock must have been unavailable before its holder is looked up, and how
/// often it is looked up again.
const LOOK_AFTER: Duration = Duration::from_millis(100);
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// Who holds the join lock of `dir` right now, from the kernel's lock table (`None`: nobody, or
/// the table cannot be read).
pub(crate) fn holder(dir: &LockDir) -> Option<JoinLockHolder> {
    let id = dir.id();
    let raw = proc::read_bounded("/proc/locks", 16 << 20)?;
    let text = String::from_utf8_lossy(&raw);
    let (maj, min) = (libc::major(id.dev), libc::minor(id.dev));
    let pid = text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        // "<n>: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<ino> <start> <end>"; waiters have "->".
        if f.len() < 6 || f[1] == "->" || f[1] != "FLOCK" || f[3] != "WRITE" {
            return None;
        }
        let mut dev = f[5].split(':');
        let ok = dev.next().and_then(|x| u32::from_str_radix(x, 16).ok()) == Some(maj)
            && dev.next().and_then(|x| u32::from_str_radix(x, 16).ok()) == Some(min)
            && dev.next().and_then(|x| x.parse::<u64>().ok()) == Some(id.ino);
        ok.then(|| f[4].parse::<i64>().ok())
    })?;
    // The kernel reports 0 or -1 for a holder outside this pid namespace.
    let pid = pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0);
    let info = pid.and_then(proc::info);
    Some(JoinLockHolder {
        pid,
        uid: info.as_ref().and_then(|i| i.uid),
        state: info
            .as_ref()
            .map_or_else(|| "unknown".to_string(), |i| i.state.clone()),
        cmd: info.map(|i| i.cmd).unwrap_or_default(),
    })
}

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
/// from [`LockDir::reopen`]), within the limits of `waiter` and, for one holder, `limit`.
pub(crate) fn lock<'f>(
    fd: &'f OwnedFd,
    dir: &LockDir,
    waiter: &Waiter,
    limit: Duration,
) -> Result<JoinLock<'f>> {
    let started = Instant::now();
    let spin_until = started + Duration::from_millis(2);
    let mut pause = Duration::from_micros(50);
    let mut next_look = started + LOOK_AFTER;
    // The holder last seen, and since when it has held the lock (as far as we know).
    let mut seen: Option<(Option<u32>, Instant)> = None;
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
        let now = Instant::now();
        if now >= next_look {
            next_look = now + LOOK_EVERY;
            match holder(dir) {
                None => seen = None,
                Some(h) => {
                    let since = match seen {
                        Some((pid, since)) if pid == h.pid => since,
                        // The first holder seen may have held it since we started waiting.
                        None => started,
                        Some(_) => now,
                    };
                    seen = Some((h.pid, since));
                    if now.saturating_duration_since(since) >= limit {
                        return Err(Error::JoinLockStalled {
                            path: dir.path().to_path_buf(),
                            pid: h.pid,
                            holder: h.to_string(),
                            waited: started.elapsed(),
                        });
                    }
                }
            }
        }
        if now < spin_until {
            std::thread::yield_now();
        } else {
            waiter.sleep(pause, None)?;
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}
