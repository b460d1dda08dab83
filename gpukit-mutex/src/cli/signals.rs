//! The runner's signal handlers: installed for one [`super::main_with_args`] call, restored
//! afterwards.
//!
//! The handlers only touch process-lifetime statics (atomics and a [`CancelToken`] that is
//! created once and re-armed for each call), so a handler that runs late, even on another
//! thread while the call returns, can never reach freed memory. What a handler does:
//! records the signal, cancels the token (which ends a wait for devices at once and wakes the
//! tree waiter: both sleep on the token's pipe), and, while the command runs, forwards SIGTERM
//! and SIGHUP to it (`kill(2)`, async-signal-safe).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

use crate::cancel::CancelToken;

/// The signals the runner handles.
pub(super) const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

static TOKEN: OnceLock<CancelToken> = OnceLock::new();
/// The last signal received (0: none yet).
static LAST: AtomicI32 = AtomicI32::new(0);
/// Signals received since the tree waiter last looked, as a bit set.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// The command's pid while it runs.
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A call is in progress (the statics above belong to it).
static RUNNING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    LAST.store(sig, Ordering::SeqCst);
    PENDING.fetch_or(1 << sig, Ordering::SeqCst);
    if let Some(t) = TOKEN.get() {
        t.cancel();
    }
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 && sig != libc::SIGINT {
        // SAFETY: kill() is async-signal-safe; `child` is our own, not yet reaped, child's pid.
        unsafe { libc::kill(child, sig) };
    }
}

/// The handlers of one call; the previous ones are restored on drop.
pub(super) struct Signals {
    old: Vec<(libc::c_int, libc::sigaction)>,
    token: CancelToken,
}

impl Signals {
    /// Installs the handlers (saving the previous ones). Fails when another call is in
    /// progress in this process or the token's pipe cannot be created.
    pub fn enter() -> Result<Signals, String> {
        if RUNNING.swap(true, Ordering::SeqCst) {
            return Err("gpumutex-run is already running in this process".into());
        }
        let token = match TOKEN.get() {
            Some(t) => t.clone(),
            None => match CancelToken::new() {
                Ok(t) => TOKEN.get_or_init(|| t).clone(),
                Err(e) => {
                    RUNNING.store(false, Ordering::SeqCst);
                    return Err(e.to_string());
                }
            },
        };
        token.rearm();
        LAST.store(0, Ordering::SeqCst);
        PENDING.store(0, Ordering::SeqCst);
        CHILD.store(0, Ordering::SeqCst);
        let mut old = Vec::with_capacity(HANDLED.len());
        for sig in HANDLED {
            // SAFETY: a zeroed sigaction is a valid starting point; the handler only calls
            // async-signal-safe functions (atomics, write(2) via CancelToken::cancel, kill(2)).
            // No SA_RESTART: a signal interrupts the waits so they can act on it at once.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                sa.sa_flags = 0;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Ok(Signals { old, token })
    }

    /// The token a signal cancels.
    pub fn token(&self) -> CancelToken {
        self.token.clone()
    }

    /// The descriptor that becomes readable when a signal arrives.
    pub fn wake_fd(&self) -> RawFd {
        self.token.poll_fd()
    }

    /// Clears the wake-up (call before looking at [`Signals::take_pending`]).
    pub fn rearm(&self) {
        self.token.rearm();
    }

    /// The signals received since the last call, as a bit set (`1 << sig`).
    pub fn take_pending(&self) -> i32 {
        PENDING.swap(0, Ordering::SeqCst)
    }

    /// The last signal received (0: none).
    pub fn last_signal(&self) -> i32 {
        LAST.load(Ordering::SeqCst)
    }

    /// The pid SIGTERM and SIGHUP are forwarded to from the handler (0: none).
    pub fn set_child(&self, pid: libc::pid_t) {
        CHILD.store(pid, Ordering::SeqCst);
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        CHILD.store(0, Ordering::SeqCst);
        for (sig, prev) in &self.old {
            // SAFETY: restores the disposition saved in `enter` for the same signal.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
        RUNNING.store(false, Ordering::SeqCst);
    }
}
