//! The machinery of the LD_PRELOAD shim: finding the real BLAS/LAPACK functions and the library
//! that defines them, the entry points every exported wrapper calls (fast path, then dispatch),
//! and [`export_blas_symbols!`], which generates the wrappers from the routine tables of
//! [`crate::ffi`].
//!
//! **Finding the real function.** numpy and scipy wheels load their OpenBLAS privately
//! (`RTLD_LOCAL`): the extension module resolves through the global scope first, so the
//! preloaded wrapper interposes, but `dlsym(RTLD_NEXT, ...)` cannot see the private library.
//! [`RealFn`] therefore tries `RTLD_NEXT`, then walks every loaded object (`dl_iterate_phdr`),
//! re-opens it with `RTLD_NOLOAD` and looks the name up there, skipping the shim itself. The
//! result and the library it belongs to ([`LibId`]) are cached.
//!
//! **No real function.** A program without any BLAS can still find the shim's symbols
//! (`dlsym(RTLD_DEFAULT, "dgemm_64_")`, `ctypes.CDLL(None)`); calling one runs the call on the
//! dispatcher's CPU library ([`crate::cpu::CpuBackend::discover`]: a system library or the
//! embedded one), never a crash.
//!
//! **Fast path.** A wrapper reads the dimensions, computes the routine's work product and
//! compares it with the dispatcher's threshold (one relaxed atomic load); a call below it is
//! counted and forwarded. No lock, no allocation, no thread-local.
//!
//! **Never harm the host.** Everything after the fast path runs under `catch_unwind`: a panic
//! runs the real function on the untouched inputs (unless it already ran). Output goes through
//! [`crate::output`]; fork handlers keep the dispatcher's locks consistent in children.

use crate::call::Call;
use crate::cpu::FInt;
use crate::dispatch::Dispatcher;
use crate::ffi::cblas::Cblas;
use crate::ffi::{Marshal, Mode, Store, P};
use crate::library::LibId;
use crate::model::Backend;
use crate::ops::{OpKind, Precision};
use crate::request::Request;
use std::cell::Cell;
use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;

/// Marks a symbol no loaded library defines.
const MISSING: *mut c_void = std::ptr::dangling_mut::<c_void>();
const LIB_UNRESOLVED: u32 = u32::MAX;

/// The real definition of an intercepted symbol, resolved on first use.
pub struct RealFn {
    name: &'static str,
    plain: &'static str,
    ptr: AtomicPtr<c_void>,
    lib: AtomicU32,
}

impl RealFn {
    /// `name` is the exported symbol and `plain` the routine's plain Fortran name (`"dgemm_"`),
    /// both ending with a NUL byte.
    pub const fn new(name: &'static str, plain: &'static str) -> RealFn {
        RealFn {
            name,
            plain,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            lib: AtomicU32::new(LIB_UNRESOLVED),
        }
    }

    /// The symbol name without the NUL.
    pub fn name(&self) -> &str {
        self.name.trim_end_matches('\0')
    }

    /// The routine's plain Fortran name without the NUL (`dgemm_`).
    pub fn plain(&self) -> &str {
        self.plain.trim_end_matches('\0')
    }

    /// The real function's address; null when no loaded library defines the symbol.
    #[inline(always)]
    pub fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Relaxed);
        if p.is_null() {
            return self.resolve_slow();
        }
        if p == MISSING {
            std::ptr::null_mut()
        } else {
            p
        }
    }

    /// The library the real function belongs to.
    pub fn lib(&self) -> LibId {
        match self.lib.load(Ordering::Relaxed) {
            LIB_UNRESOLVED => {
                self.get();
                match self.lib.load(Ordering::Relaxed) {
                    LIB_UNRESOLVED => LibId::UNKNOWN,
                    v => LibId(v as u16),
                }
            }
            v => LibId(v as u16),
        }
    }

    #[cold]
    fn resolve_slow(&self) -> *mut c_void {
        let p = match CStr::from_bytes_with_nul(self.name.as_bytes()) {
            Ok(c) => find_real(c),
            Err(_) => std::ptr::null_mut(),
        };
        let lib = if p.is_null() {
            LibId::UNKNOWN
        } else {
            library_of(p)
        };
        self.lib.store(lib.0 as u32, Ordering::Relaxed);
        self.ptr
            .store(if p.is_null() { MISSING } else { p }, Ordering::Relaxed);
        p
    }

    /// Pre-sets the real function (tests and benches).
    pub fn set(&self, p: *mut c_void) {
        self.lib.store(library_of(p).0 as u32, Ordering::Relaxed);
        self.ptr.store(p, Ordering::Relaxed);
    }
}

fn zeroed_info() -> libc::Dl_info {
    // SAFETY: Dl_info is a plain C struct of pointers, for which all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

fn own_base() -> *mut c_void {
    base_of(own_base as *const () as *mut c_void)
}

fn base_of(p: *mut c_void) -> *mut c_void {
    let mut info = zeroed_info();
    // SAFETY: dladdr only inspects the address and fills `info`.
    if unsafe { libc::dladdr(p, &mut info) } == 0 {
        std::ptr::null_mut()
    } else {
        info.dli_fbase
    }
}

/// The library (file) that defines the function at `p`.
fn library_of(p: *mut c_void) -> LibId {
    let mut info = zeroed_info();
    // SAFETY: dladdr only inspects the address; dli_fname, when set, is a NUL-terminated path
    // owned by the loader for as long as the object is loaded.
    unsafe {
        if libc::dladdr(p, &mut info) == 0 || info.dli_fname.is_null() {
            return LibId::UNKNOWN;
        }
        let path = CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned();
        if path.is_empty() {
            // the main program
            return std::fs::read_link("/proc/self/exe")
                .map(|p| LibId::of_path(&p.to_string_lossy()))
                .unwrap_or(LibId::UNKNOWN);
        }
        LibId::of_path(&path)
    }
}

/// Finds `name` in any loaded object but the one this code is in.
pub fn find_real(name: &CStr) -> *mut c_void {
    let own = own_base();
    // SAFETY: RTLD_NEXT lookup of a valid C string.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !p.is_null() && base_of(p) != own {
        return p;
    }
    let mut paths: Vec<std::ffi::CString> = Vec::new();
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; `data` is our Vec.
        unsafe {
            let paths = &mut *(data as *mut Vec<std::ffi::CString>);
            let n = (*info).dlpi_name;
            if !n.is_null() && *n != 0 {
                paths.push(CStr::from_ptr(n).to_owned());
            }
        }
        0
    }
    // SAFETY: the callback only reads the info and appends to the Vec passed as data.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut paths as *mut _ as *mut c_void) };
    for path in paths {
        // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded object (refcount +1,
        // dropped again by dlclose below).
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if h.is_null() {
            continue;
        }
        // SAFETY: live handle, valid name.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        // SAFETY: balances the dlopen above; the object stays loaded (it was loaded before).
        unsafe { libc::dlclose(h) };
        if !p.is_null() && base_of(p) != own {
            return p;
        }
    }
    std::ptr::null_mut()
}

/// The dispatcher the shim uses.
#[inline(always)]
pub fn dispatcher() -> &'static Arc<Dispatcher> {
    Dispatcher::global()
}

/// Shim start-up (the cdylib's constructor): keeps a private stderr, creates the dispatcher
/// (prints configuration problems once per process tree), installs the fork handlers and the
/// exit hook (summary, learned corrections), and starts the GPU when the policy says so. Never
/// panics.
///
/// # Safety
/// Call it once, from the shim's constructor, before the program's `main` starts threads: it
/// sets an environment variable (see [`Dispatcher::report_warnings_once`]).
pub unsafe fn init() {
    let _ = catch_unwind(|| {
        crate::output::capture_stderr();
        let d = dispatcher();
        // SAFETY: this function's contract.
        unsafe { d.report_warnings_once() };
        crate::fork::install();
        extern "C" fn at_exit() {
            let _ = catch_unwind(|| {
                if let Some(d) = Dispatcher::global_if_created() {
                    d.finish();
                }
            });
        }
        // SAFETY: registers a plain extern "C" function that never unwinds.
        unsafe { libc::atexit(at_exit) };
        d.start_if_eager();
    });
}

#[inline(always)]
unsafe fn read_info<I: FInt>(info: P) -> i64 {
    if info.is_null() {
        0
    } else {
        // SAFETY: LAPACK contract: `info` points to an integer of width `I`.
        unsafe { (*(info as *const I)).to_i64() }
    }
}

/// The entry point of every exported Fortran wrapper.
///
/// # Safety
/// The caller follows the routine's Fortran contract, with integers of type `I`.
#[inline(always)]
pub unsafe fn fortran<A: Marshal, I: FInt>(real: &RealFn, p: Precision, args: A) {
    let f = real.get();
    if f.is_null() {
        // SAFETY: forwarded.
        return unsafe { no_library::<A, I>(real, p, &args) };
    }
    let d = dispatcher();
    // SAFETY: forwarded.
    match unsafe { args.shape::<I>() } {
        Some(s) if !d.keep_small(A::ROUTINE, p, OpKind::plain(A::ROUTINE).work(s)) => {
            // SAFETY: forwarded.
            unsafe { fortran_slow::<A, I>(real, f, p, args) }
        }
        // SAFETY: forwarded; `f` is the real function of this prototype.
        _ => unsafe { args.invoke(f, p.is_complex()) },
    }
}

#[inline(never)]
unsafe fn fortran_slow<A: Marshal, I: FInt>(real: &RealFn, f: P, p: Precision, args: A) {
    let ran = Cell::new(false);
    let cpu = || {
        ran.set(true);
        // SAFETY: the caller's arguments, untouched, to the real function.
        unsafe {
            args.invoke(f, p.is_complex());
            read_info::<I>(args.info())
        }
    };
    let done = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded.
        let op = match unsafe { args.parse::<I>(p) } {
            Ok(op) => op,
            Err(reason) => {
                dispatcher().count_cpu(A::ROUTINE, p, reason);
                cpu();
                return true;
            }
        };
        // SAFETY: forwarded.
        unsafe { run::<I>(Call { prec: p, op }, real.lib(), args.info(), &cpu) }
    }));
    if !ran.get() && !matches!(done, Ok(true)) {
        cpu();
    }
}

/// Dispatches a parsed call; `cpu` runs the real function. Sets `*info = 0` when the GPU
/// produced the result. Returns false when the dispatcher could not run it at all.
unsafe fn run<I: FInt>(call: Call, lib: LibId, info: P, cpu: &dyn Fn() -> i64) -> bool {
    let req = Request::new(call, lib);
    // SAFETY: the call's pointers are the caller's (Fortran contract).
    match unsafe { dispatcher().execute(&req, &mut || Ok(cpu())) } {
        Ok(o) => {
            if o.backend == Backend::Gpu && !info.is_null() {
                // SAFETY: LAPACK contract: `info` points to an integer of width `I`.
                unsafe { *(info as *mut I) = I::from_i64(0) };
            }
            true
        }
        Err(_) => false,
    }
}

/// A wrapper called in a process where no library defines the symbol: the call runs on the
/// dispatcher's CPU library (see the module docs).
#[cold]
unsafe fn no_library<A: Marshal, I: FInt>(real: &RealFn, p: Precision, args: &A) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let d = dispatcher();
        // SAFETY: forwarded.
        let parsed = unsafe { args.parse::<I>(p) };
        let info = args.info();
        let set_info = |v: i64| {
            if !info.is_null() {
                // SAFETY: LAPACK contract.
                unsafe { *(info as *mut I) = I::from_i64(v) };
            }
        };
        let cpu = match d.cpu_backend() {
            Ok(c) => c,
            Err(e) => {
                d.warn_once(&format!(
                    "{} was called but no library in this process defines it and no CPU library could be loaded ({e}); the call did nothing",
                    real.name()
                ));
                set_info(-1);
                return;
            }
        };
        match parsed {
            Ok(op) => {
                let call = Call { prec: p, op };
                if call.check().is_err() {
                    d.warn_once(&format!(
                        "{}: invalid arguments (no library in this process defines it to report which); the call did nothing",
                        real.name()
                    ));
                    set_info(-1);
                    return;
                }
                // SAFETY: the caller's pointers (Fortran contract), checked dimensions.
                match unsafe { cpu.run(&call) } {
                    Ok(v) => set_info(v),
                    Err(e) => {
                        d.warn_once(&format!("{}: {e}", real.name()));
                        set_info(-1);
                    }
                }
            }
            Err(crate::stats::Reason::WorkspaceQuery) => {
                // the later call runs on the CPU library with workspace of its own, whatever
                // the caller allocates: the minimum is the right answer
                // SAFETY: the routine's workspace arguments (Fortran contract).
                unsafe { args.answer_query::<I>(p) };
                set_info(0);
            }
            Err(_) => {
                d.warn_once(&format!(
                    "{}: invalid arguments (no library in this process defines it to report which); the call did nothing",
                    real.name()
                ));
                set_info(-1);
            }
        }
    }));
}

/// The entry point of every exported CBLAS wrapper.
///
/// # Safety
/// The caller follows the routine's CBLAS contract, with integers of type `I`.
#[inline(always)]
pub unsafe fn cblas<C: Cblas<I>, I: FInt>(real: &RealFn, p: Precision, args: C) {
    let f = real.get();
    let r = crate::ffi::cblas::routine_of::<I, C>();
    if !f.is_null() {
        let d = dispatcher();
        match args.shape() {
            Some(s) if !d.keep_small(r, p, OpKind::plain(r).work(s)) => {}
            // SAFETY: forwarded; `f` is the real function of this prototype.
            _ => return unsafe { args.invoke(f) },
        }
    }
    // SAFETY: forwarded.
    unsafe { cblas_slow::<C, I>(real, f, p, args) }
}

#[inline(never)]
unsafe fn cblas_slow<C: Cblas<I>, I: FInt>(real: &RealFn, f: P, p: Precision, args: C) {
    let ran = Cell::new(false);
    let cpu = || {
        ran.set(true);
        // SAFETY: the caller's arguments, untouched, to the real function.
        unsafe { args.invoke(f) };
        0
    };
    let done = catch_unwind(AssertUnwindSafe(|| {
        let d = dispatcher();
        let r = crate::ffi::cblas::routine_of::<I, C>();
        let mut st = Store::<I>::new(p);
        st.begin(Mode::Run);
        let fa = match args.fortran(&mut st) {
            Ok(fa) => fa,
            Err(reason) => {
                if f.is_null() {
                    d.warn_once(&format!(
                        "{}: invalid arguments and no library in this process defines it; the call did nothing",
                        real.name()
                    ));
                    ran.set(true);
                } else {
                    d.count_cpu(r, p, reason);
                    cpu();
                }
                return true;
            }
        };
        if f.is_null() {
            // SAFETY: the converted arguments follow the Fortran contract of the routine.
            unsafe { no_library::<C::F, I>(real, p, &fa) };
            ran.set(true);
            return true;
        }
        // SAFETY: as above.
        match unsafe { fa.parse::<I>(p) } {
            Ok(op) => {
                // SAFETY: the caller's pointers (CBLAS contract).
                unsafe { run::<I>(Call { prec: p, op }, real.lib(), std::ptr::null_mut(), &cpu) }
            }
            Err(reason) => {
                d.count_cpu(r, p, reason);
                cpu();
                true
            }
        }
    }));
    if !ran.get() && !matches!(done, Ok(true)) && !f.is_null() {
        cpu();
    }
}

/// Generates the exported wrappers of an LD_PRELOAD shim from the tables of [`crate::ffi`]:
/// every routine in each of its precisions, in the Fortran names (`dgemm_`, `dgemm_64_`), the
/// numpy/scipy wheel names (`scipy_dgemm_` LP64, `scipy_dgemm_64_` ILP64) and, for the BLAS-3
/// routines, the CBLAS names (`cblas_dgemm`, `cblas_dgemm64_`, `scipy_cblas_dgemm`,
/// `scipy_cblas_dgemm64_`). Expand it once, at the top level of a `cdylib` crate that depends
/// on gpukit-offload.
#[macro_export]
macro_rules! export_blas_symbols {
    () => {
        $crate::__offload_fortran_table!($crate::__offload_export_fortran);
        $crate::__offload_cblas_table!($crate::__offload_export_cblas);
    };
}
