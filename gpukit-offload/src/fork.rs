//! Fork safety of the process-wide dispatcher.
//!
//! A child created by `fork()` has one thread: a lock some other thread of the parent held at
//! that moment would stay locked forever in the child (a parent with three threads doing linear
//! algebra that forks children hung that way). The handlers registered here take the
//! dispatcher's locks before the fork (so their state is consistent and no other thread holds
//! them) and release them after it, in the parent and in the child (the locks are `std`'s, which
//! a child can release: see [`crate::sync`]). The child then starts its own bookkeeping: its
//! statistics from zero (one summary per process, with its own counts), only what it learns
//! itself to save. When the parent had loaded the CUDA driver the GPU is unusable in the child
//! (a CUDA context does not survive `fork`): it runs everything on the CPU and its summary says
//! why (reason `forked`); a child of a parent that had not is a process of its own and starts
//! CUDA when its own calls pay for it. Values made once on first use are made (or waited for)
//! before the fork, as is the dispatcher itself when another thread is making it: a child
//! never inherits one half-made (`std`'s once-cells would make it wait forever).

use crate::dispatch::{Dispatcher, ForkHold};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Once;

static INSTALL: Once = Once::new();

thread_local! {
    /// The locks held across the fork, by the forking thread.
    static HOLD: RefCell<Option<ForkHold<'static>>> = const { RefCell::new(None) };
}

/// Registers the fork handlers (once per process).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        // SAFETY: registers three plain extern "C" functions that never unwind.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

/// Whether the CUDA driver was loaded in the process when it forked (read in `prepare`).
static CUDA_AT_FORK: AtomicBool = AtomicBool::new(false);

/// True when `libcuda.so.1` is loaded in this process (whoever loaded it: a CUDA context may
/// exist, and a forked child cannot use CUDA then).
pub(crate) fn cuda_driver_loaded() -> bool {
    // SAFETY: RTLD_NOLOAD only returns a handle when the object is already loaded; the handle
    // is closed at once (the object stays loaded as it was).
    unsafe {
        let h = libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY,
        );
        if h.is_null() {
            false
        } else {
            libc::dlclose(h);
            true
        }
    }
}

extern "C" fn prepare() {
    let _ = std::panic::catch_unwind(|| {
        // another thread making the dispatcher: wait for it (a child would wait forever on
        // the half-made one); the forking thread itself never does (it is not making one)
        if Dispatcher::creating_elsewhere() {
            Dispatcher::global();
        }
        if let Some(d) = Dispatcher::global_if_created() {
            CUDA_AT_FORK.store(cuda_driver_loaded(), Relaxed);
            let hold = d.fork_hold();
            HOLD.with(|h| *h.borrow_mut() = Some(hold));
        }
    });
}

extern "C" fn parent() {
    let _ = std::panic::catch_unwind(|| HOLD.with(|h| h.borrow_mut().take()));
}

extern "C" fn child() {
    let _ = std::panic::catch_unwind(|| {
        HOLD.with(|h| h.borrow_mut().take());
        if let Some(d) = Dispatcher::global_if_created() {
            d.forked_child(CUDA_AT_FORK.load(Relaxed));
        }
    });
}
