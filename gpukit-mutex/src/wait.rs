//! Sleeping until something in the lock directory may have changed.
//!
//! Waiters watch the lock directory with inotify for close and delete events: a releasing
//! holder unlocks and then closes its device files (a close event, also emitted by the kernel
//! when a holder dies, however it dies), removes its claim record, and a departing waiter
//! removes or closes its ticket. Waiters keep their own descriptors open, so their checks
//! generate no events. Because a dying process's close event can precede the kernel dropping its
//! `flock`, and inotify may be unavailable (per-user instance limit), waits also time out on a
//! short exponential backoff (a quarter millisecond doubling to a cap), so a release is never
//! missed for long.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};

/// First re-check delay after a wake-up.
pub const BACKOFF_START: Duration = Duration::from_micros(250);
/// Re-check cap while inotify works. Kept short: on the Firecracker VMs this was measured on,
/// a clean release was often noticed only by the timer (hand-over ~13 ms with a 50 ms cap),
/// a cause not yet found, so the timer bounds the hand-over. Each re-check costs tens of
/// microseconds of CPU.
pub const BACKOFF_CAP_INOTIFY: Duration = Duration::from_millis(2);
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

/// An inotify watch on the lock directory (or nothing, when inotify is unavailable).
#[derive(Debug)]
pub struct Watcher {
    fd: Option<OwnedFd>,
}

impl Watcher {
    /// Watches `dir`. Falls back to plain timed sleeps when inotify cannot be set up.
    pub fn new(dir: &Path) -> Result<Self> {
        // SAFETY: plain syscall with constant flags; the result is checked.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Ok(Watcher { fd: None });
        }
        // SAFETY: `fd` was just returned by inotify_init1 and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
            .map_err(|_| Error::LockDir {
                path: dir.to_path_buf(),
                reason: "path contains a NUL byte".into(),
            })?;
        let mask = libc::IN_CLOSE_WRITE
            | libc::IN_CLOSE_NOWRITE
            | libc::IN_DELETE
            | libc::IN_MOVED_FROM
            | libc::IN_ONLYDIR;
        // SAFETY: valid inotify fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return Ok(Watcher { fd: None });
        }
        Ok(Watcher { fd: Some(fd) })
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
