//! Cancellation of waits.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

#[derive(Debug)]
struct Inner {
    cancelled: AtomicBool,
    read: OwnedFd,
    write: OwnedFd,
}

/// Ends waits at once when cancelled. Clones share the same state.
///
/// A waiting [`crate::GpuMutex`] call sleeps in `poll(2)` on the token's pipe, so
/// [`CancelToken::cancel`] wakes it immediately (no polling interval). `cancel` is
/// async-signal-safe (an atomic store and one `write(2)`), so it may be called from a signal
/// handler, which is how `gpumutex-run` makes Ctrl-C end a wait.
///
/// ```
/// use gpukit_mutex::CancelToken;
/// let t = CancelToken::new().unwrap();
/// assert!(!t.is_cancelled());
/// t.cancel();
/// assert!(t.is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

impl CancelToken {
    /// Creates a token (a non-blocking, close-on-exec pipe).
    pub fn new() -> Result<Self> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if rc != 0 {
            return Err(Error::io(
                "pipe2",
                "(cancel token)",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(CancelToken {
            inner: Arc::new(Inner {
                cancelled: AtomicBool::new(false),
                read,
                write,
            }),
        })
    }

    /// Cancels every current and future wait that uses this token. Async-signal-safe.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let b = 1u8;
        // SAFETY: writes one byte from a valid local to an fd owned by `self`; a full pipe
        // (EAGAIN) is fine because the flag is already set and one byte is enough to wake.
        unsafe {
            libc::write(self.inner.write.as_raw_fd(), (&b as *const u8).cast(), 1);
        }
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Makes a cancelled token usable again: clears the flag and drains the pipe. Only for a
    /// token nobody waits on at the moment (the command-line runner's process-wide token,
    /// between two runs).
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub(crate) fn rearm(&self) {
        self.inner.cancelled.store(false, Ordering::SeqCst);
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reads into a valid local buffer from a non-blocking pipe owned by `self`.
            let n = unsafe {
                libc::read(
                    self.inner.read.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n <= 0 {
                if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return;
            }
        }
    }

    /// The descriptor that becomes readable on cancellation.
    pub(crate) fn poll_fd(&self) -> RawFd {
        self.inner.read.as_raw_fd()
    }
}
