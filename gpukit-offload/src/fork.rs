//! Fork safety of the process-wide dispatcher.
//!
//! A child created by `fork()` has one thread: a lock some other thread of the parent held at
//! that moment would stay locked forever in the child (a parent with three threads doing linear
//! algebra that forks children hung that way). The handlers registered here take the
//! dispatcher's locks before the fork (so their state is consistent and no other thread holds
//! them), release them in the parent, and in the child release them and start the child's own
//! bookkeeping: its statistics from zero (one summary per process, with its own counts), its
//! learning marked unsaved-free (only what the child learns itself is persisted), and the GPU
//! unusable (a CUDA context does not survive `fork`; the child runs everything on the CPU).

use crate::dispatch::Dispatcher;
use std::sync::Once;

static INSTALL: Once = Once::new();

/// Registers the fork handlers (once per process).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        // SAFETY: registers three plain extern "C" functions that never unwind.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

extern "C" fn prepare() {
    if let Some(d) = Dispatcher::global_if_created() {
        d.fork_prepare();
    }
}

extern "C" fn parent() {
    if let Some(d) = Dispatcher::global_if_created() {
        // SAFETY: `prepare` took the locks on this thread just before the fork.
        unsafe { d.fork_parent() };
    }
}

extern "C" fn child() {
    if let Some(d) = Dispatcher::global_if_created() {
        // SAFETY: as above; the child is single-threaded now.
        unsafe { d.fork_child() };
    }
}
