//! The shim's exit hook: the end-of-run work ([`Dispatcher::finish`]: the summary, the learned
//! corrections) at the process's exit, before the CUDA libraries tear themselves down.
//!
//! `exit` runs its handlers in the reverse order of their registration, and the CUDA libraries
//! register theirs when they are loaded, which is after the shim's constructor registered the
//! hook. So the threads that load them (the GPU start-up, cuSOLVER's load) register the hook
//! again once they are done: that registration runs before the libraries' handlers, and
//! [`Dispatcher::finish`] waits for those threads to end (joins them) before anything is torn
//! down beside them. The work runs once, whichever registration comes first. Outside the shim
//! (the Rust API) nothing is registered.

use crate::dispatch::Dispatcher;
use std::sync::atomic::{AtomicBool, Ordering};

/// The shim installed the hook (only its process registers it again).
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The hook has run (or is running).
static RAN: AtomicBool = AtomicBool::new(false);

extern "C" fn at_exit() {
    if RAN.swap(true, Ordering::AcqRel) {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        if let Some(d) = Dispatcher::global_if_created() {
            d.finish();
        }
    });
}

/// Registers the hook (the shim's constructor).
pub(crate) fn install() {
    INSTALLED.store(true, Ordering::Release);
    // SAFETY: registers a plain extern "C" function that never unwinds (it catches panics).
    unsafe { libc::atexit(at_exit) };
}

/// Registers the hook again, after CUDA libraries were loaded, when the shim installed it and
/// it has not run yet.
pub(crate) fn register_again() {
    if INSTALLED.load(Ordering::Acquire) && !RAN.load(Ordering::Acquire) {
        // SAFETY: as in `install`.
        unsafe { libc::atexit(at_exit) };
    }
}
