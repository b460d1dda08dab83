//! Everything gpukit-offload prints (warnings, the per-call log, the exit summary) goes through
//! [`emit`], which never panics and never harms the host program:
//!
//! * no panic on a closed or broken stderr (`eprint!` panics on `EPIPE`, which aborted host
//!   programs piped into `head`);
//! * no `SIGPIPE`: the signal is blocked on the writing thread for the write and a pending one
//!   it raised is consumed, so a program that keeps the default disposition is not killed by
//!   our summary;
//! * no write into a descriptor the program reused: the shim calls [`capture_stderr`] when it is
//!   loaded, which keeps a private duplicate of the stderr of that moment (close-on-exec, above
//!   the low numbers programs reuse) and remembers its identity; a program that closes fd 2 and
//!   opens a data file there never gets our text in its file. Before each write the duplicate is
//!   checked to still be the same file; without a stderr at load time nothing is printed.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::Relaxed};

/// The descriptor written to: 2 until [`capture_stderr`], then the private duplicate (-1: none).
static FD: AtomicI32 = AtomicI32::new(2);
/// Device and inode of the captured descriptor (0 when not captured).
static DEV: AtomicU64 = AtomicU64::new(0);
static INO: AtomicU64 = AtomicU64::new(0);

const PRIVATE_FD_MIN: i32 = 200;

fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat only writes the zeroed struct it is given.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Keeps a private duplicate of the current stderr for every later [`emit`] (see the module
/// docs). Call once, early (the shim's load); without an open stderr output is disabled.
pub fn capture_stderr() {
    // SAFETY: F_DUPFD_CLOEXEC duplicates fd 2 (if open) to the lowest free descriptor >= the
    // minimum; no memory is touched.
    let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, PRIVATE_FD_MIN) };
    match (fd >= 0).then(|| identity(fd)).flatten() {
        Some((dev, ino)) => {
            DEV.store(dev, Relaxed);
            INO.store(ino, Relaxed);
            let old = FD.swap(fd, Relaxed);
            if old > 2 {
                // SAFETY: `old` is a previous private duplicate of ours.
                unsafe { libc::close(old) };
            }
        }
        None => {
            if fd >= 0 {
                // SAFETY: closing the duplicate we just made.
                unsafe { libc::close(fd) };
            }
            FD.store(-1, Relaxed);
        }
    }
}

/// Writes `text` to the captured stderr (see the module docs); errors are ignored.
pub fn emit(text: &str) {
    let fd = FD.load(Relaxed);
    if fd < 0 || text.is_empty() {
        return;
    }
    if fd != 2 && identity(fd) != Some((DEV.load(Relaxed), INO.load(Relaxed))) {
        return;
    }
    write_no_sigpipe(fd, text.as_bytes());
}

/// Writes a line (a newline is added).
pub fn line(text: &str) {
    let mut s = String::with_capacity(text.len() + 1);
    s.push_str(text);
    s.push('\n');
    emit(&s);
}

fn write_no_sigpipe(fd: i32, mut bytes: &[u8]) {
    // SAFETY: (whole block) signal-mask calls on this thread with local, initialised sets;
    // write() reads `bytes` only; sigtimedwait with a zero timeout only dequeues a SIGPIPE that
    // our write raised (it is checked not to have been pending before).
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let mut old: libc::sigset_t = std::mem::zeroed();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old) != 0 {
            return;
        }
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        let was_pending = libc::sigismember(&pending, libc::SIGPIPE) == 1;
        let mut broke = false;
        while !bytes.is_empty() {
            let n = libc::write(fd, bytes.as_ptr() as *const libc::c_void, bytes.len());
            if n < 0 {
                let e = *libc::__errno_location();
                if e == libc::EINTR {
                    continue;
                }
                broke = e == libc::EPIPE;
                break;
            }
            bytes = &bytes[n as usize..];
        }
        if broke && !was_pending {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A closed pipe: the write fails with EPIPE, no SIGPIPE kills the test process, nothing
    /// panics.
    #[test]
    fn broken_pipe_is_silent() {
        let mut fds = [0i32; 2];
        // SAFETY: pipe() fills the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: closing our own read end.
        unsafe { libc::close(fds[0]) };
        // the default disposition would kill the process
        // SAFETY: restoring the default action for SIGPIPE in this test process.
        let prev = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        write_no_sigpipe(fds[1], b"gpukit-offload: summary\n");
        // SAFETY: restoring the previous disposition and closing the write end.
        unsafe {
            libc::signal(libc::SIGPIPE, prev);
            libc::close(fds[1]);
        }
    }
}
