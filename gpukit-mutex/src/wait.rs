//! Sleeping until something in the lock directory may have changed.
//!
//! Waiters watch the lock directory with inotify for close and delete events: a releasing
//! holder unlocks and then closes its device files (a close event, also emitted by the kernel
//! when a holder dies, however it dies), removes its claim record, and a departing waiter
//! removes or closes its ticket. Waiters keep their own descriptors open, so their checks
//! generate no events. Because a dying process's close event precedes the kernel dropping its
//! `flock` (`__fput` notifies before it removes the locks), and inotify may be unavailable
//! (per-user instance limit), waits also time out on a short exponential backoff (a quarter
//! millisecond doubling to a cap), so a release is never missed for long.
//!
//! **Inotify instances are pooled per process, never closed after a wait.** Closing an inotify
//! instance that has had a watch blocks the closing thread for a kernel timer tick plus an SRCU
//! grace period (`fsnotify_destroy_group` waits for the mark reaper): 7-20 ms on the VMs this
//! was measured on. When every acquire created and closed its own instance, that close ran on
//! the waiter's thread right after the grant, before `acquire` returned, and it *was* the
//! hand-over latency (~13 ms median). A [`Watcher`] now takes an idle instance from a small
//! process-wide pool (or creates one), adds its watch, and on drop removes the watch
//! (`inotify_rm_watch`, microseconds, does not wait) and returns the instance to the pool. Idle
//! pooled instances have no watch, so they receive no events and cost no kernel work. Pool
//! entries are tagged with the pid that created them: a `fork`ed child never uses an instance
//! it inherited (it would share the parent's event queue) and just closes its copy.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};

/// First re-check delay after a wake-up.
pub const BACKOFF_START: Duration = Duration::from_micros(250);
/// Re-check cap while inotify works. Releases, deaths, departures and new claims all arrive as
/// events (a wake resets the backoff to [`BACKOFF_START`], which covers a dying holder's close
/// event preceding its `flock` removal), so the timer is only a safety net. Every re-check takes
/// the join lock for a fraction of a millisecond, so a short cap would make many waiters crowd
/// out releases and each other.
pub const BACKOFF_CAP_INOTIFY: Duration = Duration::from_millis(20);
/// Re-check cap when inotify is unavailable (pure polling).
pub const BACKOFF_CAP_POLLING: Duration = Duration::from_millis(2);

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// Something changed in the directory.
    Event,
    /// The timeout passed.
    Timeout,
    /// The cancel descriptor became readable.
    Cancelled,
}

/// Idle inotify instances of this process (see the module docs). Each slot is empty
/// ([`POOL_EMPTY`]) or holds `pid << 32 | fd`: the pid of the process that put the descriptor
/// there. Lock-free, so a `fork` in the middle of a pool operation cannot leave a lock held in
/// the child.
static POOL: [AtomicU64; POOL_SLOTS] = [const { AtomicU64::new(POOL_EMPTY) }; POOL_SLOTS];
/// Pool size: the number of threads of one process that can wait at the same time without
/// creating a new instance (more are served, just not pooled).
const POOL_SLOTS: usize = 8;
const POOL_EMPTY: u64 = u64::MAX;

/// Takes an idle instance of this process from the pool. Instances inherited over `fork` are
/// closed instead (dropping this process's reference only; the parent keeps using its own).
fn pool_take() -> Option<OwnedFd> {
    let pid = std::process::id();
    for slot in &POOL {
        let v = slot.swap(POOL_EMPTY, Ordering::AcqRel);
        if v == POOL_EMPTY {
            continue;
        }
        let raw = (v & 0xffff_ffff) as u32 as RawFd;
        // SAFETY: the pool owned this descriptor (it was put there by `pool_put` through
        // `into_raw_fd`, in this process or in a parent before `fork`, which copied it into our
        // descriptor table), and the swap above made us its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if (v >> 32) as u32 == pid {
            return Some(fd);
        }
        drop(fd);
    }
    None
}

/// Returns an idle instance (without watches) to the pool. When the pool is full the instance
/// is closed on a short-lived thread, so the caller does not wait for the kernel's teardown.
fn pool_put(fd: OwnedFd) {
    let v = (u64::from(std::process::id()) << 32) | u64::from(fd.as_raw_fd() as u32);
    for slot in &POOL {
        if slot
            .compare_exchange(POOL_EMPTY, v, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // The pool owns it now.
            let _ = fd.into_raw_fd();
            return;
        }
    }
    // If the thread cannot be started, the closure (and so the descriptor) is dropped here.
    let _ = std::thread::Builder::new()
        .name("gpukit-inotify-close".into())
        .spawn(move || drop(fd));
}

/// An inotify watch on the lock directory (or nothing, when inotify is unavailable).
#[derive(Debug)]
pub struct Watcher {
    fd: Option<OwnedFd>,
    wd: libc::c_int,
}

impl Watcher {
    /// Watches `dir`. Falls back to plain timed sleeps when inotify cannot be set up.
    pub fn new(dir: &Path) -> Result<Self> {
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
            .map_err(|_| Error::LockDir {
                path: dir.to_path_buf(),
                reason: "path contains a NUL byte".into(),
            })?;
        let polling = Watcher { fd: None, wd: -1 };
        let fd = match pool_take() {
            Some(fd) => fd,
            None => {
                // SAFETY: plain syscall with constant flags; the result is checked.
                let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
                if fd < 0 {
                    return Ok(polling);
                }
                // SAFETY: `fd` was just returned by inotify_init1 and is owned by nobody else.
                unsafe { OwnedFd::from_raw_fd(fd) }
            }
        };
        // A pooled instance may still hold the IN_IGNORED of its previous watch.
        discard_pending(&fd);
        let mask = libc::IN_CLOSE_WRITE
            | libc::IN_CLOSE_NOWRITE
            | libc::IN_DELETE
            | libc::IN_MOVED_FROM
            | libc::IN_ONLYDIR;
        // SAFETY: valid inotify fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            pool_put(fd);
            return Ok(polling);
        }
        Ok(Watcher { fd: Some(fd), wd })
    }

    /// The backoff cap that suits this watcher.
    pub fn backoff_cap(&self) -> Duration {
        if self.fd.is_some() {
            BACKOFF_CAP_INOTIFY
        } else {
            BACKOFF_CAP_POLLING
        }
    }

    /// Sleeps until a relevant event, the timeout, or `cancel_fd` becoming readable.
    pub fn wait(&self, timeout: Duration, cancel_fd: Option<RawFd>) -> Woken {
        let until = std::time::Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Woken::Timeout;
            }
            let mut fds: [libc::pollfd; 2] = [
                libc::pollfd {
                    fd: self.fd.as_ref().map_or(-1, |f| f.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: cancel_fd.unwrap_or(-1),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let ts = libc::timespec {
                tv_sec: left.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: `fds` and `ts` are valid for the call; negative fds are ignored by ppoll.
            let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
            if rc < 0 {
                // EINTR (a signal): let the caller re-check its cancel flag and deadline.
                return Woken::Event;
            }
            if fds[1].revents != 0 {
                return Woken::Cancelled;
            }
            if rc == 0 {
                return Woken::Timeout;
            }
            if fds[0].revents != 0 && self.drain() {
                return Woken::Event;
            }
        }
    }

    /// Reads all pending events; true if any of them can change a decision. Events that only
    /// reflect somebody *reading* the directory (listing it, reading a claim or ticket record)
    /// are ignored, or every check by any waiter would wake every other waiter.
    fn drain(&self) -> bool {
        let Some(fd) = &self.fd else { return false };
        let mut relevant = false;
        // Aligned for inotify_event.
        let mut buf = [0u64; 1024];
        let hdr = std::mem::size_of::<libc::inotify_event>();
        loop {
            let bytes = std::mem::size_of_val(&buf);
            // SAFETY: reads into a valid local buffer of the stated length.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), bytes) };
            if n <= 0 {
                let e = io::Error::last_os_error();
                if n < 0 && e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return relevant;
            }
            let n = n as usize;
            // SAFETY: the kernel wrote `n` bytes of whole inotify_event records into `buf`.
            let data = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
            let mut off = 0;
            while off + hdr <= n {
                // SAFETY: `off + hdr <= n`; read_unaligned copes with any offset.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(data[off..].as_ptr().cast()) };
                let name_end = (off + hdr + ev.len as usize).min(n);
                let raw = &data[off + hdr..name_end];
                let name = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
                relevant |= is_relevant(ev.mask, name);
                off = name_end;
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            // SAFETY: valid inotify fd; `wd` is the watch this Watcher added (EINVAL if the
            // kernel already removed it, e.g. because the directory was deleted: harmless).
            unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), self.wd) };
            pool_put(fd);
        }
    }
}

/// Reads and drops whatever events are queued on a non-blocking inotify descriptor.
fn discard_pending(fd: &OwnedFd) {
    let mut buf = [0u64; 512];
    loop {
        // SAFETY: reads into a valid local buffer of the stated length.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                std::mem::size_of_val(&buf),
            )
        };
        if n > 0 {
            continue;
        }
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return;
    }
}

/// Which directory events may free a device, shorten the queue or create an inherited claim.
pub fn is_relevant(mask: u32, name: &[u8]) -> bool {
    if mask & libc::IN_Q_OVERFLOW != 0 {
        return true;
    }
    if name.starts_with(b"gpukit-dev") {
        // A holder released (unlock then close) or died.
        return mask & (libc::IN_CLOSE_WRITE | libc::IN_CLOSE_NOWRITE | libc::IN_DELETE) != 0;
    }
    if name.starts_with(b"gpukit-ticket.") || name.starts_with(b"gpukit-claim.") {
        // Removed (granted, cancelled, released) or closed by its writer (a new claim, a dead
        // waiter's descriptor); plain reads by other processes are ignored.
        return mask & (libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_CLOSE_WRITE) != 0;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::Instant;

    #[test]
    fn pooled_watcher_is_reused_and_still_sees_events() {
        let a = tempfile::tempdir().expect("tempdir");
        let b = tempfile::tempdir().expect("tempdir");
        for dir in [a.path(), b.path(), a.path()] {
            let w = Watcher::new(dir).expect("watcher");
            if w.fd.is_none() {
                // inotify unavailable here (instance limit): nothing to test.
                return;
            }
            // Nothing pending from the previous use (its watch's IN_IGNORED was discarded).
            assert_eq!(w.wait(Duration::from_millis(1), None), Woken::Timeout);
            drop(File::create(dir.join("gpukit-dev7.lock")).expect("create"));
            assert_eq!(w.wait(Duration::from_secs(5), None), Woken::Event);
        }
    }

    /// Dropping a watcher must not wait for the kernel's inotify teardown (7-20 ms per closed
    /// instance on the VMs this was measured on): it used to delay every contended `acquire`.
    #[test]
    fn dropping_a_watcher_does_not_block() {
        let t = tempfile::tempdir().expect("tempdir");
        let mut v: Vec<Duration> = (0..9)
            .map(|_| {
                let w = Watcher::new(t.path()).expect("watcher");
                let s = Instant::now();
                drop(w);
                s.elapsed()
            })
            .collect();
        v.sort();
        assert!(v[4] < Duration::from_millis(2), "median drop {:?}", v[4]);
    }
}
