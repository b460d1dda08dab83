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
//! **Integer width from the library.** A `_64_` name is ILP64 by its name. An unsuffixed one
//! usually is LP64, but an ILP64 library may export unsuffixed names (MKL's ILP64 layer): the
//! width is then probed once per symbol, from the library that defines it, with its `idamax`
//! (see [`probe_width`]): a Fortran call runs with the width found; where it cannot be found
//! (no `idamax` beside the routine) the call is passed to the library untouched and counted as
//! `int-width-unknown`. (A CBLAS wrapper receives its integers by value with the width of its
//! name, so an unsuffixed CBLAS name in an ILP64 library is passed through, not parsed.)
//!
//! **A symbol that appears later.** A name no loaded object defines is looked up again when
//! the set of loaded objects has changed (the loader's add/remove counters), so a BLAS loaded
//! after the first call is used from then on.
//!
//! **A device failure during the copy out** ([`crate::Error::GpuLost`]: results partly written)
//! is reported as LAPACK reports an error: `INFO = -k` with `k` the position of `INFO` itself
//! (an argument no LAPACK check ever names, so it cannot be mistaken for one), the library's
//! own `XERBLA` called with the routine's name and `k` (numpy and scipy turn that into a Python
//! exception; the reference XERBLA stops the program), and a message. The CPU never re-runs
//! such a call: its in-place operands are no longer the caller's inputs.
//!
//! **Workspace.** A LAPACK call goes to the GPU only when its workspace (`lwork`, `lrwork`,
//! `liwork`) is at least what its library answers to a workspace query for the same
//! arguments: a smaller one (which LAPACK may reject, `getri`'s `info = -6`) runs on the
//! library, which reports it its own way. After a GPU run `WORK(1)` (and `RWORK(1)` /
//! `IWORK(1)` where the routine has their lengths) hold that optimum, as LAPACK leaves them.
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
use crate::error::Error;
use crate::ffi::cblas::Cblas;
use crate::ffi::{Marshal, Mode, Store, P};
use crate::library::LibId;
use crate::model::Backend;
use crate::ops::{OpKind, Precision};
use crate::request::Request;
use crate::stats::Reason;
use std::cell::Cell;
use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Marks a symbol no loaded library defines.
const MISSING: *mut c_void = std::ptr::dangling_mut::<c_void>();
const LIB_UNRESOLVED: u32 = u32::MAX;

/// The integer width of the library behind a symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// 32-bit integers (LP64).
    W32,
    /// 64-bit integers (ILP64).
    W64,
    /// It could not be determined.
    Unknown,
}

const WIDTH_UNPROBED: u8 = 0;

impl Width {
    fn code(self) -> u8 {
        match self {
            Width::W32 => 4,
            Width::W64 => 8,
            Width::Unknown => 1,
        }
    }
    fn from_code(c: u8) -> Width {
        match c {
            4 => Width::W32,
            8 => Width::W64,
            _ => Width::Unknown,
        }
    }
}

/// The real definition of an intercepted symbol, resolved on first use.
pub struct RealFn {
    name: &'static str,
    plain: &'static str,
    ptr: AtomicPtr<c_void>,
    lib: AtomicU32,
    width: AtomicU8,
    /// The loader's generation (objects added + removed) when the symbol was found missing.
    missing_at: AtomicU64,
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
            width: AtomicU8::new(WIDTH_UNPROBED),
            missing_at: AtomicU64::new(0),
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

    /// The name of another routine in this symbol's naming convention: `idamax` for
    /// `scipy_dgemm_64_` is `scipy_idamax_64_`, for `cblas_dgemm` `cblas_idamax`.
    pub fn sibling(&self, stem: &str) -> Option<String> {
        let own = self.plain().trim_end_matches('_');
        let name = self.name();
        let at = name.find(own)?;
        Some(format!("{}{stem}{}", &name[..at], &name[at + own.len()..]))
    }

    /// True for a CBLAS name.
    fn is_cblas(&self) -> bool {
        self.name().contains("cblas_")
    }

    /// The real function's address; null when no loaded library defines the symbol.
    #[inline(always)]
    pub fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Relaxed);
        if p.is_null() {
            return self.resolve_slow();
        }
        if p == MISSING {
            self.missing_slow()
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

    /// The integer width of the library that defines the real function (probed once; see
    /// [`probe_width`]); `Unknown` when nothing defines it.
    #[inline(always)]
    pub fn width(&self) -> Width {
        match self.width.load(Ordering::Relaxed) {
            WIDTH_UNPROBED => self.probe_slow(),
            c => Width::from_code(c),
        }
    }

    #[cold]
    fn probe_slow(&self) -> Width {
        let f = self.get();
        if f.is_null() {
            return Width::Unknown;
        }
        let w = self
            .sibling("idamax")
            .and_then(|n| std::ffi::CString::new(n).ok())
            .map(|n| {
                let probe = symbol_beside(f, &n);
                // SAFETY: `probe` is the library's idamax in this naming convention (CBLAS
                // prototype for a CBLAS name, Fortran otherwise), or null.
                unsafe { probe_width(probe, self.is_cblas()) }
            })
            .unwrap_or(Width::Unknown);
        self.width.store(w.code(), Ordering::Relaxed);
        w
    }

    #[cold]
    fn resolve_slow(&self) -> *mut c_void {
        let generation = loader_generation();
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
        self.missing_at.store(generation, Ordering::Relaxed);
        self.width.store(WIDTH_UNPROBED, Ordering::Relaxed);
        self.ptr
            .store(if p.is_null() { MISSING } else { p }, Ordering::Relaxed);
        p
    }

    /// A symbol found missing: looked up again once the loader has added or removed objects
    /// since (a BLAS loaded after the first call).
    #[cold]
    fn missing_slow(&self) -> *mut c_void {
        if loader_generation() == self.missing_at.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        self.resolve_slow()
    }

    /// Pre-sets the real function (tests and benches).
    pub fn set(&self, p: *mut c_void) {
        self.lib.store(library_of(p).0 as u32, Ordering::Relaxed);
        self.width.store(WIDTH_UNPROBED, Ordering::Relaxed);
        self.ptr.store(p, Ordering::Relaxed);
    }
}

/// The loader's count of objects added plus removed (glibc's `dlpi_adds` / `dlpi_subs`): it
/// changes whenever a library is loaded or unloaded.
pub fn loader_generation() -> u64 {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info of `size` bytes; the counters exist when
        // the size covers them; `data` is our u64.
        unsafe {
            let end = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs)
                + std::mem::size_of::<libc::c_ulonglong>();
            if size >= end {
                *(data as *mut u64) = (*info).dlpi_adds.wrapping_add((*info).dlpi_subs);
            }
        }
        1
    }
    let mut g = 0u64;
    // SAFETY: the callback writes only the u64 passed as data, and stops after the first object.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut g as *mut u64 as *mut c_void) };
    g
}

/// `name` in the library that defines the function at `f` (or its dependencies); null when
/// it has none.
fn symbol_beside(f: *mut c_void, name: &CStr) -> *mut c_void {
    let mut info = zeroed_info();
    // SAFETY: dladdr only inspects the address; dli_fname, when set, is a NUL-terminated path
    // owned by the loader. RTLD_NOLOAD returns a handle only for an object already loaded
    // (refcount + 1, dropped by the dlclose below; the object stays loaded as it was).
    unsafe {
        if libc::dladdr(f, &mut info) == 0 || info.dli_fname.is_null() {
            return std::ptr::null_mut();
        }
        let main = *info.dli_fname == 0;
        let h = if main {
            libc::dlopen(std::ptr::null(), libc::RTLD_LAZY)
        } else {
            libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY)
        };
        if h.is_null() {
            return std::ptr::null_mut();
        }
        let p = libc::dlsym(h, name.as_ptr());
        libc::dlclose(h);
        p
    }
}

/// Probes the integer width of a BLAS with its `idamax` (`probe`: the Fortran function, or the
/// CBLAS one when `cblas`): `n` is passed as a 64-bit value whose low half is 2 and whose high
/// half makes it negative. An LP64 library reads 2 and returns the index of the larger of
/// `[1, 5]` (2 in Fortran, 1 in CBLAS); an ILP64 library reads a negative `n` and returns 0.
/// Anything else, a null `probe` or a big-endian target: [`Width::Unknown`].
///
/// # Safety
/// `probe` is null or the `idamax` of a BLAS library, with the CBLAS prototype when `cblas`.
pub unsafe fn probe_width(probe: *mut c_void, cblas: bool) -> Width {
    if probe.is_null() || cfg!(target_endian = "big") {
        return Width::Unknown;
    }
    // low 32 bits 2, high 32 bits all ones: 2 as an i32, negative as an i64
    let n: i64 = (-1i64 << 32) | 2;
    let incx: i64 = 1;
    let x = [1.0f64, 5.0];
    // SAFETY: (whole block) the function has the prototype named (caller contract); an LP64
    // library reads the low halves of `n` and `incx` (2 and 1: two elements of `x`), an ILP64
    // one reads n < 0 and touches nothing. The result is read as the low 32 bits, which both
    // conventions set.
    let r = unsafe {
        if cblas {
            let g: unsafe extern "C" fn(i64, *const f64, i64) -> u64 = std::mem::transmute(probe);
            g(n, x.as_ptr(), incx) as u32
        } else {
            let g: unsafe extern "C" fn(*const i64, *const f64, *const i64) -> u64 =
                std::mem::transmute(probe);
            g(&n, x.as_ptr(), &incx) as u32
        }
    };
    match (r, cblas) {
        (2, false) | (1, true) => Width::W32,
        (0, _) => Width::W64,
        _ => Width::Unknown,
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
        // This library's own panic hook (the shim links its own copy of std, so the program's
        // hook is not touched): a panic we catch is reported through the private stderr, never
        // written to fd 2, which the program may have reused for its data.
        std::panic::set_hook(Box::new(|info| {
            crate::output::line(&format!(
                "gpukit-offload: internal error, caught (the call runs on the CPU library): {info}"
            ));
        }));
        let d = dispatcher();
        // SAFETY: this function's contract.
        unsafe { d.report_warnings_once() };
        crate::fork::install();
        crate::exit_hook::install();
        if d.config().log == crate::dispatch::LogMode::Calls {
            // SAFETY: getppid has no preconditions.
            let ppid = unsafe { libc::getppid() };
            crate::output::line(&format!(
                "gpukit-offload: process {} (parent {ppid}) start policy {}",
                std::process::id(),
                d.config().start.as_str()
            ));
        }
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
/// The caller follows the routine's Fortran contract, with integers of type `I` (or, for an
/// unsuffixed name, of the width its library uses: see the module docs).
#[inline(always)]
pub unsafe fn fortran<A: Marshal, I: FInt>(real: &RealFn, p: Precision, args: A) {
    let f = real.get();
    if f.is_null() {
        // SAFETY: forwarded.
        return unsafe { no_library::<A, I>(real, p, &args) };
    }
    if std::mem::size_of::<I>() == 4 {
        match real.width() {
            Width::W32 => {}
            // SAFETY: the library reads 64-bit integers: so does the caller that calls it.
            Width::W64 => return unsafe { fortran_on::<A, i64>(real, f, p, args) },
            Width::Unknown => {
                dispatcher().count_cpu(A::ROUTINE, p, Reason::IntWidthUnknown);
                // SAFETY: forwarded, untouched; `f` is the real function of this prototype.
                return unsafe { args.invoke(f, p.is_complex()) };
            }
        }
    }
    // SAFETY: forwarded.
    unsafe { fortran_on::<A, I>(real, f, p, args) }
}

#[inline(always)]
unsafe fn fortran_on<A: Marshal, I: FInt>(real: &RealFn, f: P, p: Precision, args: A) {
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
    let optimum: Cell<Option<Optimum>> = Cell::new(None);
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
        let mut gate = || {
            // SAFETY: the caller's arguments (Fortran contract); `f` is their function.
            let o = unsafe { workspace_check::<A, I>(f, p, &args) };
            optimum.set(o);
            o.is_some()
        };
        // SAFETY: forwarded.
        match unsafe { run(Call { prec: p, op }, real.lib(), &cpu, &mut gate) } {
            Ran::Cpu => true,
            Ran::Gpu => {
                // SAFETY: LAPACK contract: `info`, `work`, `rwork`, `iwork` of this call.
                unsafe {
                    set_int::<I>(args.info(), 0);
                    if let Some(o) = optimum.get() {
                        o.write::<A, I>(&args, p);
                    }
                }
                true
            }
            Ran::Lost(e) => {
                // SAFETY: as above.
                unsafe { report_lost::<A, I>(real, p, &args, &e) };
                ran.set(true);
                true
            }
            Ran::NotRun => false,
        }
    }));
    if !ran.get() && !matches!(done, Ok(true)) {
        cpu();
    }
}

/// Writes `v` into an integer argument of width `I` (nothing for a null pointer).
///
/// # Safety
/// `p` is null or points to a writable integer of width `I`.
unsafe fn set_int<I: FInt>(p: P, v: i64) {
    if !p.is_null() {
        // SAFETY: caller contract.
        unsafe { *(p as *mut I) = I::from_i64(v) };
    }
}

/// What a LAPACK library answers to a workspace query for a call's arguments: `WORK(1)`,
/// `RWORK(1)`, `IWORK(1)` (`None` for an array the routine lacks or whose length is fixed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Optimum {
    /// Per array (work, rwork, iwork): the optimum, where the routine has the array's length.
    pub sizes: [Option<f64>; 3],
}

impl Optimum {
    /// Writes the optimum into `WORK(1)` (a complex `WORK(1)` gets a zero imaginary part),
    /// `RWORK(1)` and `IWORK(1)` where the routine has their lengths, as LAPACK leaves them.
    ///
    /// # Safety
    /// The arguments follow the routine's Fortran contract with integers of type `I`.
    unsafe fn write<A: Marshal, I: FInt>(&self, args: &A, p: Precision) {
        let mut a = *args;
        let Some(ws) = a.workspace_mut() else {
            return;
        };
        for (k, (arr, size)) in ws.arrays.into_iter().zip(self.sizes).enumerate() {
            let (Some(arr), Some(v)) = (arr, size) else {
                continue;
            };
            if arr.is_null() {
                continue;
            }
            // SAFETY: (whole block) a workspace array holds at least one element of its type.
            unsafe {
                match k {
                    2 => *(*arr as *mut I) = I::from_i64(v as i64),
                    _ => {
                        let complex = k == 0 && p.is_complex();
                        if p.real_size() == 4 {
                            *(*arr as *mut f32) = v as f32;
                            if complex {
                                *(*arr as *mut f32).add(1) = 0.0;
                            }
                        } else {
                            *(*arr as *mut f64) = v;
                            if complex {
                                *(*arr as *mut f64).add(1) = 0.0;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Asks the library (`f`) for the optimal workspace of these arguments (a workspace query into
/// buffers of our own: the caller's arrays and `info` are not touched) and checks the caller's
/// lengths against it. `Some` (the optimum) when the call may go to the GPU: the routine has no
/// workspace, or every length is at least the optimum; `None` when one is smaller or the query
/// fails (the library then runs the call and judges its workspace itself).
///
/// # Safety
/// The arguments follow the routine's Fortran contract with integers of type `I`; `f` is the
/// routine's real function.
pub unsafe fn workspace_check<A: Marshal, I: FInt>(
    f: P,
    p: Precision,
    args: &A,
) -> Option<Optimum> {
    let mut q = *args;
    let mut caller = *args;
    let Some(given) = caller.workspace_mut() else {
        return Some(Optimum { sizes: [None; 3] });
    };
    let mut reals = [[0f64; 2]; 2];
    let mut iwork = [I::from_i64(0); 2];
    let mut query = [I::from_i64(-1); 3];
    let mut info = I::from_i64(0);
    {
        let ws = q.workspace_mut()?;
        let [w, r, i] = ws.arrays;
        if let Some(w) = w.filter(|w| !w.is_null()) {
            *w = reals[0].as_mut_ptr() as P;
        }
        if let Some(r) = r.filter(|r| !r.is_null()) {
            *r = reals[1].as_mut_ptr() as P;
        }
        if let Some(i) = i.filter(|i| !i.is_null()) {
            *i = iwork.as_mut_ptr() as P;
        }
        for (len, q) in ws.lens.into_iter().zip(query.iter_mut()) {
            if let Some(len) = len.filter(|l| !l.is_null()) {
                *len = q as *mut I as P;
            }
        }
        *ws.info = &mut info as *mut I as P;
    }
    // SAFETY: the caller's arguments with every workspace array, length and `info` replaced
    // by buffers of ours: a workspace query (length -1) writes only the first element of each
    // array and `info`.
    unsafe { q.invoke(f, p.is_complex()) };
    if info.to_i64() != 0 {
        return None;
    }
    let read_real = |b: &[f64; 2]| {
        if p.real_size() == 4 {
            // SAFETY: the buffer's first 4 bytes hold the f32 the query wrote.
            unsafe { *(b.as_ptr() as *const f32) as f64 }
        } else {
            b[0]
        }
    };
    let answers = [
        read_real(&reals[0]),
        read_real(&reals[1]),
        iwork[0].to_i64() as f64,
    ];
    let mut sizes = [None; 3];
    for (k, len) in given.lens.into_iter().enumerate() {
        let Some(len) = len.filter(|l| !l.is_null()) else {
            continue;
        };
        // SAFETY: a length argument of the routine (Fortran contract).
        let have = unsafe { (*(*len as *const I)).to_i64() } as f64;
        // LAPACK rounds an optimum up when it returns it as a real (sroundup_lwork)
        let want = answers[k].ceil();
        if !want.is_finite() || have < want {
            return None;
        }
        sizes[k] = Some(answers[k]);
    }
    Some(Optimum { sizes })
}

/// Reports a call whose results were partly written when the device failed (see the module
/// docs): `INFO = -k`, the library's `XERBLA(name, k)`, and a message; `k` is the position of
/// `INFO` (for a BLAS routine, of its last argument).
///
/// # Safety
/// The arguments follow the routine's Fortran contract with integers of type `I`.
unsafe fn report_lost<A: Marshal, I: FInt>(real: &RealFn, p: Precision, args: &A, e: &Error) {
    let k = A::NARGS[usize::from(p.is_complex())];
    // SAFETY: `info` of this call (Fortran contract).
    unsafe { set_int::<I>(args.info(), -(k as i64)) };
    crate::output::line(&format!(
        "gpukit-offload: {e}; reported as LAPACK reports an error (INFO = -{k}, XERBLA)"
    ));
    let name = A::ROUTINE.name(p).to_ascii_uppercase();
    let Some(xerbla) = real
        .sibling("xerbla")
        .and_then(|n| std::ffi::CString::new(n).ok())
        .map(|n| find_real(&n))
        .filter(|x| !x.is_null())
    else {
        return;
    };
    let pos = I::from_i64(k as i64);
    // SAFETY: XERBLA(SRNAME, INFO) with the hidden length of SRNAME, integers of the
    // library's width `I`.
    unsafe {
        let g: unsafe extern "C" fn(*const u8, *const I, usize) = std::mem::transmute(xerbla);
        g(name.as_ptr(), &pos, name.len());
    }
}

/// How a dispatched call ended.
enum Ran {
    /// On the CPU (the real function ran).
    Cpu,
    /// On the GPU: the caller's outputs hold the result.
    Gpu,
    /// The device failed while writing the results (see [`Error::GpuLost`]).
    Lost(Error),
    /// The dispatcher could not run it at all: the caller runs the real function.
    NotRun,
}

/// Dispatches a parsed call; `cpu` runs the real function, `gate` is checked before the GPU.
unsafe fn run(
    call: Call,
    lib: LibId,
    cpu: &dyn Fn() -> i64,
    gate: &mut dyn FnMut() -> bool,
) -> Ran {
    let req = Request::new(call, lib);
    // SAFETY: the call's pointers are the caller's (Fortran contract).
    match unsafe { dispatcher().execute_gated(&req, &mut || Ok(cpu()), gate) } {
        Ok(o) if o.backend == Backend::Gpu => Ran::Gpu,
        Ok(_) => Ran::Cpu,
        Err(e @ Error::GpuLost { .. }) => Ran::Lost(e),
        Err(_) => Ran::NotRun,
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
    if !f.is_null() && std::mem::size_of::<I>() == 4 && real.width() != Width::W32 {
        // an unsuffixed name in a library whose width is not LP64: its by-value integers
        // cannot be read at the width this wrapper receives them (see the module docs)
        dispatcher().count_cpu(r, p, Reason::IntWidthUnknown);
        // SAFETY: forwarded, untouched; `f` is the real function of this prototype.
        return unsafe { args.invoke(f) };
    }
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
                match unsafe { run(Call { prec: p, op }, real.lib(), &cpu, &mut || true) } {
                    Ran::Cpu | Ran::Gpu => true,
                    Ran::Lost(e) => {
                        crate::output::line(&format!("gpukit-offload: {e}"));
                        ran.set(true);
                        true
                    }
                    Ran::NotRun => false,
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::{args, Prototype};

    fn int_ptr<T>(v: &mut T) -> P {
        v as *mut T as P
    }

    /// getri with a workspace below its library's optimum never goes to the GPU (the library
    /// answers `info = -6` for one below the minimum); with the optimum it may, and `WORK(1)`
    /// is written as LAPACK writes it. The library here is the embedded one (LP64).
    #[test]
    fn getri_workspace_is_checked_against_the_librarys_query() {
        let f = crate::embedded::symbol("dgetri_").expect("embedded dgetri_") as P;
        let n: i32 = 50;
        let mut a = vec![0.0f64; 50 * 50];
        let mut ipiv: Vec<i32> = (1..=50).collect();
        let mut work = vec![0.0f64; 50 * 64];
        let (mut nn, mut lda) = (n, n);
        let pinfo: *mut i32 = Box::into_raw(Box::new(7i32));
        let (pn, plda) = (int_ptr(&mut nn), int_ptr(&mut lda));
        let mk =
            move |lwork: &mut i32, work: &mut Vec<f64>, a: &mut Vec<f64>, ipiv: &mut Vec<i32>| {
                let mut g = args::Getri::blank();
                g.n = pn;
                g.a = a.as_mut_ptr() as P;
                g.lda = plda;
                g.ipiv = ipiv.as_mut_ptr() as P;
                g.work = work.as_mut_ptr() as P;
                g.lwork = int_ptr(lwork);
                g.info = pinfo as P;
                g
            };
        // SAFETY: `pinfo` is a leaked, live i32.
        let info = || unsafe { *pinfo };
        // the library's own answer to a query
        let mut minus = -1i32;
        let q = mk(&mut minus, &mut work, &mut a, &mut ipiv);
        // SAFETY: a workspace query of the embedded dgetri_ with valid arguments.
        unsafe { q.invoke(f, false) };
        let opt = work[0];
        assert!(opt >= 50.0, "{opt}");
        work[0] = -3.0;
        // SAFETY: as above.
        unsafe { std::ptr::write(pinfo.cast::<i32>(), 7) };
        let mut short = n - 1;
        let g = mk(&mut short, &mut work, &mut a, &mut ipiv);
        // SAFETY: valid getri arguments (the caller's workspace is 50*64 long).
        let short_check = unsafe { workspace_check::<args::Getri, i32>(f, Precision::D, &g) };
        assert_eq!(short_check, None);
        let mut enough = opt as i32;
        let g = mk(&mut enough, &mut work, &mut a, &mut ipiv);
        // SAFETY: as above.
        let o = unsafe { workspace_check::<args::Getri, i32>(f, Precision::D, &g) }.unwrap();
        assert_eq!(o.sizes, [Some(opt), None, None]);
        // the check touched neither the caller's work nor its info
        assert_eq!((work[0], info()), (-3.0, 7));
        // SAFETY: as above.
        unsafe { o.write::<args::Getri, i32>(&g, Precision::D) };
        assert_eq!(work[0], opt);
        // the library itself rejects the short workspace with info = -6 (what the caller gets
        // when the call runs there)
        let mut short = 1i32;
        let g = mk(&mut short, &mut work, &mut a, &mut ipiv);
        // SAFETY: valid arguments but lwork; the library checks it before touching anything.
        unsafe { g.invoke(f, false) };
        assert_eq!(info(), -6);
        // a routine without workspace: always allowed, nothing to write
        let p = args::Potrf::blank();
        // SAFETY: potrf has no workspace; nothing is read.
        let o = unsafe { workspace_check::<args::Potrf, i32>(f, Precision::D, &p) };
        assert_eq!(o, Some(Optimum { sizes: [None; 3] }));
    }

    /// A copy-out failure: `INFO = -k` with `k` INFO's own position, never the CPU.
    #[test]
    fn a_lost_call_reports_info_as_lapack_does() {
        assert_eq!(args::Potrf::NARGS, [5, 5]);
        assert_eq!(args::Gesv::NARGS, [8, 8]);
        // zheevd has rwork and lrwork before iwork, liwork, info
        assert_eq!(args::Syevd::NARGS, [11, 13]);
        assert_eq!(args::Gemm::NARGS, [13, 13]);
        // a naming convention with no XERBLA anywhere: only INFO and the message
        static REAL: RealFn = RealFn::new("gpukit_test_zheevd_\0", "zheevd_\0");
        assert_eq!(
            REAL.sibling("xerbla").as_deref(),
            Some("gpukit_test_xerbla_")
        );
        let mut info = 0i32;
        let mut h = args::Syevd::blank();
        h.info = int_ptr(&mut info);
        let e = Error::GpuLost {
            routine: "zheevd".into(),
            detail: "injected".into(),
        };
        // SAFETY: only `info` is written (no XERBLA is found for this convention).
        unsafe { report_lost::<args::Syevd, i32>(&REAL, Precision::Z, &h, &e) };
        assert_eq!(info, -13);
        let mut info64 = 0i64;
        h.info = int_ptr(&mut info64);
        // SAFETY: as above, an ILP64 `info`.
        unsafe { report_lost::<args::Syevd, i64>(&REAL, Precision::D, &h, &e) };
        assert_eq!(info64, -11);
    }

    #[test]
    fn siblings_follow_every_naming_convention() {
        for (name, plain, want) in [
            ("dgemm_\0", "dgemm_\0", "idamax_"),
            ("dgemm_64_\0", "dgemm_\0", "idamax_64_"),
            ("scipy_zgesdd_64_\0", "zgesdd_\0", "scipy_idamax_64_"),
            ("cblas_sgemm\0", "sgemm_\0", "cblas_idamax"),
            (
                "scipy_cblas_dgemm64_\0",
                "dgemm_\0",
                "scipy_cblas_idamax64_",
            ),
        ] {
            let r = RealFn::new(
                Box::leak(name.to_string().into_boxed_str()),
                Box::leak(plain.to_string().into_boxed_str()),
            );
            assert_eq!(r.sibling("idamax").as_deref(), Some(want), "{name}");
        }
    }

    // Two idamax conventions, as an LP64 and an ILP64 library implement them (1-based index of
    // the largest |x|, 0 for n < 1).
    unsafe extern "C" fn idamax_lp64(n: *const i32, x: *const f64, incx: *const i32) -> i32 {
        // SAFETY: the probe's contract: n elements of x with stride incx.
        unsafe { idamax_body((*n) as i64, x, (*incx) as i64) as i32 }
    }
    unsafe extern "C" fn idamax_ilp64(n: *const i64, x: *const f64, incx: *const i64) -> i64 {
        // SAFETY: as above.
        unsafe { idamax_body(*n, x, *incx) }
    }
    unsafe extern "C" fn cblas_idamax_lp64(n: i32, x: *const f64, incx: i32) -> usize {
        // SAFETY: as above; CBLAS is 0-based.
        (unsafe { idamax_body(n as i64, x, incx as i64) } - 1).max(0) as usize
    }
    unsafe extern "C" fn cblas_idamax_ilp64(n: i64, x: *const f64, incx: i64) -> usize {
        // SAFETY: as above.
        (unsafe { idamax_body(n, x, incx) } - 1).max(0) as usize
    }
    unsafe fn idamax_body(n: i64, x: *const f64, incx: i64) -> i64 {
        if n < 1 || incx < 1 {
            return 0;
        }
        assert!(n <= 2, "the probe passes two elements, got n = {n}");
        let mut best = (0, -1.0f64);
        for i in 0..n {
            // SAFETY: i < n <= 2 elements with stride incx = 1.
            let v = unsafe { *x.add((i * incx) as usize) }.abs();
            if v > best.1 {
                best = (i + 1, v);
            }
        }
        best.0
    }

    /// The width probe tells an LP64 BLAS from an ILP64 one, in both calling conventions, and
    /// a missing probe symbol is `Unknown`.
    #[test]
    fn the_width_probe_tells_lp64_from_ilp64() {
        // SAFETY: each function has the prototype the probe calls it with.
        unsafe {
            assert_eq!(probe_width(idamax_lp64 as P, false), Width::W32);
            assert_eq!(probe_width(idamax_ilp64 as P, false), Width::W64);
            assert_eq!(probe_width(cblas_idamax_lp64 as P, true), Width::W32);
            assert_eq!(probe_width(cblas_idamax_ilp64 as P, true), Width::W64);
            assert_eq!(probe_width(std::ptr::null_mut(), false), Width::Unknown);
        }
        // a real library, where installed: the system OpenBLAS is LP64 under unsuffixed names
        // SAFETY: dlopen of a library name; closed below.
        let h = unsafe { libc::dlopen(c"libopenblas.so.0".as_ptr(), libc::RTLD_LAZY) };
        if h.is_null() {
            eprintln!("SKIPPED the OpenBLAS half of the_width_probe_tells_lp64_from_ilp64: no libopenblas.so.0");
            return;
        }
        // SAFETY: the library's idamax_ and cblas_idamax, with their prototypes.
        unsafe {
            let f = libc::dlsym(h, c"idamax_".as_ptr());
            assert_eq!(probe_width(f, false), Width::W32);
            let c = libc::dlsym(h, c"cblas_idamax".as_ptr());
            if !c.is_null() {
                assert_eq!(probe_width(c, true), Width::W32);
            }
        }
    }

    /// A symbol missing at the first lookup is found once a library defining it is loaded.
    #[test]
    fn a_symbol_missing_at_first_is_found_after_a_load() {
        static REAL: RealFn = RealFn::new("zlibVersion\0", "zlibVersion\0");
        if !REAL.get().is_null() {
            eprintln!("SKIPPED a_symbol_missing_at_first_is_found_after_a_load: zlib already loaded in this process");
            return;
        }
        // nothing changed: still missing (and cheap)
        assert!(REAL.get().is_null());
        // SAFETY: loads zlib (kept loaded for the rest of the process).
        let h = unsafe { libc::dlopen(c"libz.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if h.is_null() {
            eprintln!("SKIPPED a_symbol_missing_at_first_is_found_after_a_load: no libz.so.1");
            return;
        }
        assert!(
            !REAL.get().is_null(),
            "not found after the library was loaded"
        );
        assert!(REAL.lib() != LibId::UNKNOWN);
    }
}
