//! The shim's exit hook: the end-of-run work ([`Dispatcher::finish`]: the summary, the learned
//! corrections, the join of the start-up threads) at the process's exit, before the CUDA
//! libraries tear themselves down.
//!
//! `exit` runs its handlers in the reverse order of their registration, and the CUDA libraries
//! register theirs (C++ static destructors, `atexit` handlers) while they are loaded, which is
//! after the shim's constructor registered the hook, on the start-up threads. A program that
//! exits while a start-up thread is still loading or starting CUDA (a short program under the
//! eager start: rc 139 without a summary, about one run in twenty on the H100, 2026-12-06) would
//! have those handlers tear the libraries down under that thread. So the shim interposes
//! `__cxa_atexit` (which `atexit` and C++ static constructors call): a handler registered *on a
//! start-up thread* is registered wrapped, and the wrapper runs the hook first (which waits for
//! the start-up threads to end, [`Dispatcher::finish`]) and then the library's handler. Every
//! teardown of a library those threads loaded thus runs after them, whatever the moment of the
//! exit. Other threads' registrations pass through untouched (a program's library that is
//! `dlclose`d runs its handlers then, not ours). The start-up threads also register the hook
//! again when done. The work runs once, whichever comes first. Outside the shim (the Rust API)
//! nothing is registered or interposed.

use crate::dispatch::Dispatcher;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// The shim installed the hook (only its process registers it again).
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The hook has run (or is running).
static RAN: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread loads and starts the CUDA libraries (a start-up thread).
    static LOADER: Cell<bool> = const { Cell::new(false) };
}

/// An exit handler's function, as `__cxa_atexit` takes it.
pub type ExitFn = unsafe extern "C" fn(*mut c_void);
type CxaAtexit = unsafe extern "C" fn(ExitFn, *mut c_void, *mut c_void) -> c_int;

/// The C library's `__cxa_atexit` (found once; null until then).
static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

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

/// Marks the calling thread as a start-up thread: the exit handlers registered on it from now
/// on run after the hook (see the module docs).
pub(crate) fn mark_loader_thread() {
    LOADER.with(|l| l.set(true));
}

/// A handler registered on a start-up thread, to run after the hook.
struct Deferred {
    func: ExitFn,
    arg: *mut c_void,
}

/// Runs the hook (once), then the deferred handler.
unsafe extern "C" fn run_deferred(p: *mut c_void) {
    // SAFETY: `p` is the `Deferred` that `cxa_atexit` leaked for this registration; the C
    // library runs each registration once, so it is reclaimed once.
    let d = unsafe { Box::from_raw(p as *mut Deferred) };
    at_exit();
    // SAFETY: the handler and argument as the library registered them.
    unsafe { (d.func)(d.arg) };
}

/// The C library's `__cxa_atexit` (the next definition after the shim's).
fn real() -> Option<CxaAtexit> {
    let mut p = REAL.load(Ordering::Acquire);
    if p.is_null() {
        // SAFETY: RTLD_NEXT lookup of a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__cxa_atexit".as_ptr()) };
        if p.is_null() {
            return None;
        }
        REAL.store(p, Ordering::Release);
    }
    // SAFETY: the C library's `__cxa_atexit` has this signature.
    Some(unsafe { std::mem::transmute::<*mut c_void, CxaAtexit>(p) })
}

/// The shim's `__cxa_atexit`: a registration on a start-up thread of the shim's process (the
/// hook not run yet) is wrapped to run after the hook; every other one goes to the C library
/// as it is. Returns the C library's answer (-1 if it cannot be found). Never panics (it is
/// called from C): an atomic load, a `dlsym`, a thread-local read that cannot fail
/// (`try_with`), and a box whose allocation failure aborts rather than unwinds.
///
/// # Safety
/// `__cxa_atexit`'s contract: `func(arg)` may be called once at exit (or when `dso` is
/// unloaded).
pub unsafe fn cxa_atexit(func: ExitFn, arg: *mut c_void, dso: *mut c_void) -> c_int {
    let Some(real) = real() else {
        return -1;
    };
    let wrap = INSTALLED.load(Ordering::Acquire)
        && !RAN.load(Ordering::Acquire)
        && LOADER.try_with(Cell::get).unwrap_or(false);
    if !wrap {
        // SAFETY: forwarded as given.
        return unsafe { real(func, arg, dso) };
    }
    let d = Box::into_raw(Box::new(Deferred { func, arg }));
    // SAFETY: `run_deferred` takes back the box it is registered with, once.
    let r = unsafe { real(run_deferred, d as *mut c_void, dso) };
    if r != 0 {
        // SAFETY: not registered: still ours.
        drop(unsafe { Box::from_raw(d) });
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    static CALLS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

    unsafe extern "C" fn record(arg: *mut c_void) {
        CALLS.lock().unwrap().push(arg as usize);
    }

    /// A wrapped registration runs the hook (marked as run) and then the handler with its own
    /// argument.
    #[test]
    fn a_deferred_handler_runs_after_the_hook_with_its_argument() {
        let d = Box::into_raw(Box::new(Deferred {
            func: record,
            arg: 42usize as *mut c_void,
        }));
        // SAFETY: a box made for run_deferred, passed once.
        unsafe { run_deferred(d as *mut c_void) };
        assert!(RAN.load(Ordering::Acquire), "the hook ran first");
        assert_eq!(*CALLS.lock().unwrap(), vec![42]);
    }

    /// The C library's `__cxa_atexit` is found (the shim cannot work without it).
    #[test]
    fn the_c_librarys_cxa_atexit_is_found() {
        assert!(real().is_some());
    }
}
