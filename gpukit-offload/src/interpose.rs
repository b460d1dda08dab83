//! The machinery of the LD_PRELOAD shim: finding the real BLAS/LAPACK functions, the per-routine
//! entry points (fast path + dispatch), and [`export_blas_symbols!`], which generates the
//! exported wrappers of a cdylib from one table.
//!
//! **Finding the real function.** numpy and scipy wheels load their OpenBLAS privately
//! (`RTLD_LOCAL`): the extension module resolves through the global scope first, so the
//! preloaded wrapper interposes, but `dlsym(RTLD_NEXT, ...)` cannot see the private library.
//! [`RealFn`] therefore tries `RTLD_NEXT`, then walks every loaded object (`dl_iterate_phdr`),
//! re-opens it with `RTLD_NOLOAD` and looks the name up there, skipping the shim itself. The
//! result is cached in an atomic pointer.
//!
//! **Fast path.** A wrapper reads the dimensions, computes the routine's work product and
//! compares it with the dispatcher's threshold (one relaxed atomic load); a call below it is
//! counted (one relaxed increment) and forwarded. No lock, no allocation, no thread-local.

use crate::call::{Call, HostMat, Op, Piv, Scalar};
use crate::cpu::FInt;
use crate::dispatch::Dispatcher;
use crate::ops::{Diag, OpKind, Precision, Routine, Shape, Side, SvdJob, Trans, Uplo};
use crate::stats::Reason;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

/// The real definition of an intercepted symbol, resolved on first use.
pub struct RealFn {
    name: &'static str,
    ptr: AtomicPtr<c_void>,
}

impl RealFn {
    /// `name` must end with a NUL byte (`"dgemm_\0"`).
    pub const fn new(name: &'static str) -> RealFn {
        RealFn {
            name,
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The symbol name without the NUL.
    pub fn name(&self) -> &str {
        self.name.trim_end_matches('\0')
    }

    /// The real function's address.
    #[inline(always)]
    pub fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            return p;
        }
        self.resolve_slow()
    }

    #[cold]
    fn resolve_slow(&self) -> *mut c_void {
        let p = match CStr::from_bytes_with_nul(self.name.as_bytes()) {
            Ok(c) => find_real(c),
            Err(_) => std::ptr::null_mut(),
        };
        if p.is_null() {
            eprintln!(
                "gpukit-offload: no library in this process defines {}; the program called a BLAS/LAPACK routine that only the offload shim provides",
                self.name()
            );
            std::process::abort();
        }
        self.ptr.store(p, Ordering::Relaxed);
        p
    }

    /// Pre-sets the real function (tests and benches).
    pub fn set(&self, p: *mut c_void) {
        self.ptr.store(p, Ordering::Relaxed);
    }
}

fn own_base() -> *mut c_void {
    let mut info: libc::Dl_info = unsafe_zeroed();
    // SAFETY: dladdr reads the address of one of our own functions and fills `info`.
    let ok = unsafe { libc::dladdr(own_base as *const c_void, &mut info) };
    if ok == 0 {
        std::ptr::null_mut()
    } else {
        info.dli_fbase
    }
}

fn unsafe_zeroed<T>() -> T {
    // SAFETY: used only for plain C structs (Dl_info) for which all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

fn base_of(p: *mut c_void) -> *mut c_void {
    let mut info: libc::Dl_info = unsafe_zeroed();
    // SAFETY: dladdr only inspects the address.
    if unsafe { libc::dladdr(p, &mut info) } == 0 {
        std::ptr::null_mut()
    } else {
        info.dli_fbase
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

/// Shim start-up: creates the dispatcher (prints configuration problems to stderr) and registers
/// the exit hook that prints the summary and persists the learned corrections.
pub fn init() {
    let d = dispatcher();
    for w in d.warnings() {
        eprintln!("gpukit-offload: {w}");
    }
    extern "C" fn at_exit() {
        if let Some(d) = Dispatcher::global_if_created() {
            d.finish();
        }
    }
    // SAFETY: registers a plain extern "C" function.
    unsafe { libc::atexit(at_exit) };
}

#[inline(always)]
unsafe fn rd<I: FInt>(p: *const I) -> i64 {
    // SAFETY: BLAS contract: integer arguments are valid pointers.
    unsafe { (*p).to_i64() }
}

#[inline(always)]
unsafe fn ch(p: *const c_char) -> u8 {
    // SAFETY: BLAS contract: character arguments point to at least one byte.
    unsafe { *p as u8 }
}

#[inline]
fn piv<I: FInt>(p: *mut I) -> Piv {
    if std::mem::size_of::<I>() == 4 {
        Piv::I32(p as *mut i32)
    } else {
        Piv::I64(p as *mut i64)
    }
}

#[inline]
fn u(x: i64) -> usize {
    x.max(0) as usize
}

#[inline]
fn m(p: *const c_void, rows: i64, cols: i64, ld: i64) -> HostMat {
    HostMat::new(p as *mut u8, u(rows), u(cols), u(ld))
}

#[inline]
fn work(r: Routine, s: Shape) -> u64 {
    OpKind::plain(r).work(s)
}

#[inline]
fn shape(a: i64, b: i64, c: i64) -> Shape {
    Shape::new(a as u64, b as u64, c as u64)
}

/// Runs a call through the dispatcher and sets `*info = 0` when the GPU produced the result.
///
/// # Safety
/// The call's pointers are the BLAS caller's; `info` is null or valid.
unsafe fn dispatch<I: FInt>(call: Call, info: *mut I, cpu: &mut dyn FnMut() -> i64) {
    let d = dispatcher();
    let req = crate::request::Request::new(call, crate::library::LibId::UNKNOWN);
    // SAFETY: forwarded.
    let r = unsafe { d.execute(&req, &mut || Ok(cpu())) };
    if let Ok(o) = r {
        if o.backend == crate::model::Backend::Gpu && !info.is_null() {
            // SAFETY: LAPACK contract.
            unsafe { *info = I::from_i64(0) };
        }
    }
}

type P = *const c_void;
type M = *mut c_void;
type C = *const c_char;

macro_rules! real {
    ($real:expr, fn($($t:ty),* $(,)?)) => {{
        let f: unsafe extern "C" fn($($t),*) = std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($t),*)>($real.get());
        f
    }};
}

// ---------------------------------------------------------------- Fortran BLAS

/// `?gemm_` entry.
///
/// # Safety
/// Fortran BLAS contract for every argument.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_gemm<I: FInt>(
    real: &RealFn,
    p: Precision,
    ta: C,
    tb: C,
    mm: *const I,
    nn: *const I,
    kk: *const I,
    alpha: P,
    a: P,
    lda: *const I,
    b: P,
    ldb: *const I,
    beta: P,
    c: M,
    ldc: *const I,
    l1: usize,
    l2: usize,
) {
    // SAFETY: Fortran BLAS contract (whole body).
    unsafe {
        let f = real!(
            real,
            fn(
                C,
                C,
                *const I,
                *const I,
                *const I,
                P,
                P,
                *const I,
                P,
                *const I,
                P,
                M,
                *const I,
                usize,
                usize,
            )
        );
        let (m_, n_, k_) = (rd(mm), rd(nn), rd(kk));
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || k_ < 0
            || d.keep_small(Routine::Gemm, p, work(Routine::Gemm, shape(m_, n_, k_)))
        {
            return f(
                ta, tb, mm, nn, kk, alpha, a, lda, b, ldb, beta, c, ldc, l1, l2,
            );
        }
        let (Some(t1), Some(t2)) = (Trans::from_char(ch(ta)), Trans::from_char(ch(tb))) else {
            d.count_cpu(Routine::Gemm, p, Reason::InvalidArgs);
            return f(
                ta, tb, mm, nn, kk, alpha, a, lda, b, ldb, beta, c, ldc, l1, l2,
            );
        };
        let (ar, ac) = if t1 == Trans::No { (m_, k_) } else { (k_, m_) };
        let (br, bc) = if t2 == Trans::No { (k_, n_) } else { (n_, k_) };
        let es = p.size();
        let call = Call {
            prec: p,
            op: Op::Gemm {
                ta: t1,
                tb: t2,
                m: u(m_),
                n: u(n_),
                k: u(k_),
                alpha: Scalar::read(alpha as *const u8, es),
                a: m(a, ar, ac, rd(lda)),
                b: m(b, br, bc, rd(ldb)),
                beta: Scalar::read(beta as *const u8, es),
                c: m(c, m_, n_, rd(ldc)),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            f(
                ta, tb, mm, nn, kk, alpha, a, lda, b, ldb, beta, c, ldc, l1, l2,
            );
            0
        });
    }
}

/// `?symm_` entry.
///
/// # Safety
/// Fortran BLAS contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_symm<I: FInt>(
    real: &RealFn,
    p: Precision,
    side: C,
    uplo: C,
    mm: *const I,
    nn: *const I,
    alpha: P,
    a: P,
    lda: *const I,
    b: P,
    ldb: *const I,
    beta: P,
    c: M,
    ldc: *const I,
    l1: usize,
    l2: usize,
) {
    // SAFETY: Fortran BLAS contract.
    unsafe {
        let f = real!(
            real,
            fn(C, C, *const I, *const I, P, P, *const I, P, *const I, P, M, *const I, usize, usize)
        );
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        let sd = Side::from_char(ch(side));
        let ka = if sd == Some(Side::Right) { n_ } else { m_ };
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Symm, p, work(Routine::Symm, shape(m_, n_, ka)))
        {
            return f(
                side, uplo, mm, nn, alpha, a, lda, b, ldb, beta, c, ldc, l1, l2,
            );
        }
        let (Some(sd), Some(ul)) = (sd, Uplo::from_char(ch(uplo))) else {
            d.count_cpu(Routine::Symm, p, Reason::InvalidArgs);
            return f(
                side, uplo, mm, nn, alpha, a, lda, b, ldb, beta, c, ldc, l1, l2,
            );
        };
        let es = p.size();
        let call = Call {
            prec: p,
            op: Op::Symm {
                side: sd,
                uplo: ul,
                m: u(m_),
                n: u(n_),
                alpha: Scalar::read(alpha as *const u8, es),
                a: m(a, ka, ka, rd(lda)),
                b: m(b, m_, n_, rd(ldb)),
                beta: Scalar::read(beta as *const u8, es),
                c: m(c, m_, n_, rd(ldc)),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            f(
                side, uplo, mm, nn, alpha, a, lda, b, ldb, beta, c, ldc, l1, l2,
            );
            0
        });
    }
}

/// `?syrk_` entry.
///
/// # Safety
/// Fortran BLAS contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_syrk<I: FInt>(
    real: &RealFn,
    p: Precision,
    uplo: C,
    trans: C,
    nn: *const I,
    kk: *const I,
    alpha: P,
    a: P,
    lda: *const I,
    beta: P,
    c: M,
    ldc: *const I,
    l1: usize,
    l2: usize,
) {
    // SAFETY: Fortran BLAS contract.
    unsafe {
        let f = real!(
            real,
            fn(C, C, *const I, *const I, P, P, *const I, P, M, *const I, usize, usize)
        );
        let (n_, k_) = (rd(nn), rd(kk));
        let d = dispatcher();
        if n_ < 0 || k_ < 0 || d.keep_small(Routine::Syrk, p, work(Routine::Syrk, shape(1, n_, k_)))
        {
            return f(uplo, trans, nn, kk, alpha, a, lda, beta, c, ldc, l1, l2);
        }
        let (Some(ul), Some(t)) = (Uplo::from_char(ch(uplo)), Trans::from_char(ch(trans))) else {
            d.count_cpu(Routine::Syrk, p, Reason::InvalidArgs);
            return f(uplo, trans, nn, kk, alpha, a, lda, beta, c, ldc, l1, l2);
        };
        let (ar, ac) = if t == Trans::No { (n_, k_) } else { (k_, n_) };
        let es = p.size();
        let call = Call {
            prec: p,
            op: Op::Syrk {
                uplo: ul,
                trans: t,
                n: u(n_),
                k: u(k_),
                alpha: Scalar::read(alpha as *const u8, es),
                a: m(a, ar, ac, rd(lda)),
                beta: Scalar::read(beta as *const u8, es),
                c: m(c, n_, n_, rd(ldc)),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            f(uplo, trans, nn, kk, alpha, a, lda, beta, c, ldc, l1, l2);
            0
        });
    }
}

/// `?trsm_` entry.
///
/// # Safety
/// Fortran BLAS contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_trsm<I: FInt>(
    real: &RealFn,
    p: Precision,
    side: C,
    uplo: C,
    ta: C,
    diag: C,
    mm: *const I,
    nn: *const I,
    alpha: P,
    a: P,
    lda: *const I,
    b: M,
    ldb: *const I,
    l1: usize,
    l2: usize,
    l3: usize,
    l4: usize,
) {
    // SAFETY: Fortran BLAS contract.
    unsafe {
        let f = real!(
            real,
            fn(
                C,
                C,
                C,
                C,
                *const I,
                *const I,
                P,
                P,
                *const I,
                M,
                *const I,
                usize,
                usize,
                usize,
                usize,
            )
        );
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        let sd = Side::from_char(ch(side));
        let ka = if sd == Some(Side::Right) { n_ } else { m_ };
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Trsm, p, work(Routine::Trsm, shape(m_, n_, ka)))
        {
            return f(
                side, uplo, ta, diag, mm, nn, alpha, a, lda, b, ldb, l1, l2, l3, l4,
            );
        }
        let (Some(sd), Some(ul), Some(t), Some(dg)) = (
            sd,
            Uplo::from_char(ch(uplo)),
            Trans::from_char(ch(ta)),
            Diag::from_char(ch(diag)),
        ) else {
            d.count_cpu(Routine::Trsm, p, Reason::InvalidArgs);
            return f(
                side, uplo, ta, diag, mm, nn, alpha, a, lda, b, ldb, l1, l2, l3, l4,
            );
        };
        let es = p.size();
        let call = Call {
            prec: p,
            op: Op::Trsm {
                side: sd,
                uplo: ul,
                ta: t,
                diag: dg,
                m: u(m_),
                n: u(n_),
                alpha: Scalar::read(alpha as *const u8, es),
                a: m(a, ka, ka, rd(lda)),
                b: m(b, m_, n_, rd(ldb)),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            f(
                side, uplo, ta, diag, mm, nn, alpha, a, lda, b, ldb, l1, l2, l3, l4,
            );
            0
        });
    }
}

// ---------------------------------------------------------------- Fortran LAPACK

/// `?getrf_` entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_getrf<I: FInt>(
    real: &RealFn,
    p: Precision,
    mm: *const I,
    nn: *const I,
    a: M,
    lda: *const I,
    ipiv: *mut I,
    info: *mut I,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(real, fn(*const I, *const I, M, *const I, *mut I, *mut I));
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Getrf, p, work(Routine::Getrf, shape(m_, n_, 1)))
        {
            return f(mm, nn, a, lda, ipiv, info);
        }
        let call = Call {
            prec: p,
            op: Op::Getrf {
                m: u(m_),
                n: u(n_),
                a: m(a, m_, n_, rd(lda)),
                ipiv: piv(ipiv),
            },
        };
        dispatch::<I>(call, info, &mut || {
            f(mm, nn, a, lda, ipiv, info);
            rd(info)
        });
    }
}

/// `?getrs_` entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_getrs<I: FInt>(
    real: &RealFn,
    p: Precision,
    trans: C,
    nn: *const I,
    nrhs: *const I,
    a: P,
    lda: *const I,
    ipiv: *const I,
    b: M,
    ldb: *const I,
    info: *mut I,
    l1: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(C, *const I, *const I, P, *const I, *const I, M, *const I, *mut I, usize)
        );
        let (n_, r_) = (rd(nn), rd(nrhs));
        let d = dispatcher();
        if n_ < 0
            || r_ < 0
            || d.keep_small(Routine::Getrs, p, work(Routine::Getrs, shape(1, n_, r_)))
        {
            return f(trans, nn, nrhs, a, lda, ipiv, b, ldb, info, l1);
        }
        let Some(t) = Trans::from_char(ch(trans)) else {
            d.count_cpu(Routine::Getrs, p, Reason::InvalidArgs);
            return f(trans, nn, nrhs, a, lda, ipiv, b, ldb, info, l1);
        };
        let call = Call {
            prec: p,
            op: Op::Getrs {
                trans: t,
                n: u(n_),
                nrhs: u(r_),
                a: m(a, n_, n_, rd(lda)),
                ipiv: piv(ipiv as *mut I),
                b: m(b, n_, r_, rd(ldb)),
            },
        };
        dispatch::<I>(call, info, &mut || {
            f(trans, nn, nrhs, a, lda, ipiv, b, ldb, info, l1);
            rd(info)
        });
    }
}

/// `?gesv_` entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_gesv<I: FInt>(
    real: &RealFn,
    p: Precision,
    nn: *const I,
    nrhs: *const I,
    a: M,
    lda: *const I,
    ipiv: *mut I,
    b: M,
    ldb: *const I,
    info: *mut I,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(*const I, *const I, M, *const I, *mut I, M, *const I, *mut I)
        );
        let (n_, r_) = (rd(nn), rd(nrhs));
        let d = dispatcher();
        if n_ < 0 || r_ < 0 || d.keep_small(Routine::Gesv, p, work(Routine::Gesv, shape(1, n_, r_)))
        {
            return f(nn, nrhs, a, lda, ipiv, b, ldb, info);
        }
        let call = Call {
            prec: p,
            op: Op::Gesv {
                n: u(n_),
                nrhs: u(r_),
                a: m(a, n_, n_, rd(lda)),
                ipiv: piv(ipiv),
                b: m(b, n_, r_, rd(ldb)),
            },
        };
        dispatch::<I>(call, info, &mut || {
            f(nn, nrhs, a, lda, ipiv, b, ldb, info);
            rd(info)
        });
    }
}

/// `?potrf_` entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_potrf<I: FInt>(
    real: &RealFn,
    p: Precision,
    uplo: C,
    nn: *const I,
    a: M,
    lda: *const I,
    info: *mut I,
    l1: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(real, fn(C, *const I, M, *const I, *mut I, usize));
        let n_ = rd(nn);
        let d = dispatcher();
        if n_ < 0 || d.keep_small(Routine::Potrf, p, work(Routine::Potrf, shape(1, n_, 1))) {
            return f(uplo, nn, a, lda, info, l1);
        }
        let Some(ul) = Uplo::from_char(ch(uplo)) else {
            d.count_cpu(Routine::Potrf, p, Reason::InvalidArgs);
            return f(uplo, nn, a, lda, info, l1);
        };
        let call = Call {
            prec: p,
            op: Op::Potrf {
                uplo: ul,
                n: u(n_),
                a: m(a, n_, n_, rd(lda)),
            },
        };
        dispatch::<I>(call, info, &mut || {
            f(uplo, nn, a, lda, info, l1);
            rd(info)
        });
    }
}

/// `?potrs_` / `?posv_` entry (same prototype).
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_potrs_posv<I: FInt>(
    real: &RealFn,
    p: Precision,
    r: Routine,
    uplo: C,
    nn: *const I,
    nrhs: *const I,
    a: M,
    lda: *const I,
    b: M,
    ldb: *const I,
    info: *mut I,
    l1: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(C, *const I, *const I, M, *const I, M, *const I, *mut I, usize)
        );
        let (n_, r_) = (rd(nn), rd(nrhs));
        let d = dispatcher();
        if n_ < 0 || r_ < 0 || d.keep_small(r, p, work(r, shape(1, n_, r_))) {
            return f(uplo, nn, nrhs, a, lda, b, ldb, info, l1);
        }
        let Some(ul) = Uplo::from_char(ch(uplo)) else {
            d.count_cpu(r, p, Reason::InvalidArgs);
            return f(uplo, nn, nrhs, a, lda, b, ldb, info, l1);
        };
        let (am, bm) = (m(a, n_, n_, rd(lda)), m(b, n_, r_, rd(ldb)));
        let op = if r == Routine::Posv {
            Op::Posv {
                uplo: ul,
                n: u(n_),
                nrhs: u(r_),
                a: am,
                b: bm,
            }
        } else {
            Op::Potrs {
                uplo: ul,
                n: u(n_),
                nrhs: u(r_),
                a: am,
                b: bm,
            }
        };
        dispatch::<I>(Call { prec: p, op }, info, &mut || {
            f(uplo, nn, nrhs, a, lda, b, ldb, info, l1);
            rd(info)
        });
    }
}

/// `?syevd_` (s, d) entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_syevd<I: FInt>(
    real: &RealFn,
    p: Precision,
    jobz: C,
    uplo: C,
    nn: *const I,
    a: M,
    lda: *const I,
    w: M,
    wk: M,
    lwork: *const I,
    iwork: *mut I,
    liwork: *const I,
    info: *mut I,
    l1: usize,
    l2: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(C, C, *const I, M, *const I, M, M, *const I, *mut I, *const I, *mut I, usize, usize)
        );
        let go = || {
            f(
                jobz, uplo, nn, a, lda, w, wk, lwork, iwork, liwork, info, l1, l2,
            )
        };
        let n_ = rd(nn);
        let d = dispatcher();
        if n_ < 0 || d.keep_small(Routine::Syevd, p, work(Routine::Syevd, shape(1, n_, 1))) {
            return go();
        }
        if rd(lwork) == -1 || rd(liwork) == -1 {
            d.count_cpu(Routine::Syevd, p, Reason::WorkspaceQuery);
            return go();
        }
        let (Some(ul), j) = (Uplo::from_char(ch(uplo)), ch(jobz).to_ascii_uppercase()) else {
            return go();
        };
        if j != b'N' && j != b'V' {
            d.count_cpu(Routine::Syevd, p, Reason::InvalidArgs);
            return go();
        }
        let call = Call {
            prec: p,
            op: Op::Syevd {
                vectors: j == b'V',
                uplo: ul,
                n: u(n_),
                a: m(a, n_, n_, rd(lda)),
                w: w as *mut u8,
            },
        };
        dispatch::<I>(call, info, &mut || {
            go();
            rd(info)
        });
    }
}

/// `?heevd_` (c, z) entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_heevd<I: FInt>(
    real: &RealFn,
    p: Precision,
    jobz: C,
    uplo: C,
    nn: *const I,
    a: M,
    lda: *const I,
    w: M,
    wk: M,
    lwork: *const I,
    rwork: M,
    lrwork: *const I,
    iwork: *mut I,
    liwork: *const I,
    info: *mut I,
    l1: usize,
    l2: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(
                C,
                C,
                *const I,
                M,
                *const I,
                M,
                M,
                *const I,
                M,
                *const I,
                *mut I,
                *const I,
                *mut I,
                usize,
                usize,
            )
        );
        let go = || {
            f(
                jobz, uplo, nn, a, lda, w, wk, lwork, rwork, lrwork, iwork, liwork, info, l1, l2,
            )
        };
        let n_ = rd(nn);
        let d = dispatcher();
        if n_ < 0 || d.keep_small(Routine::Syevd, p, work(Routine::Syevd, shape(1, n_, 1))) {
            return go();
        }
        if rd(lwork) == -1 || rd(lrwork) == -1 || rd(liwork) == -1 {
            d.count_cpu(Routine::Syevd, p, Reason::WorkspaceQuery);
            return go();
        }
        let (Some(ul), j) = (Uplo::from_char(ch(uplo)), ch(jobz).to_ascii_uppercase()) else {
            return go();
        };
        if j != b'N' && j != b'V' {
            d.count_cpu(Routine::Syevd, p, Reason::InvalidArgs);
            return go();
        }
        let call = Call {
            prec: p,
            op: Op::Syevd {
                vectors: j == b'V',
                uplo: ul,
                n: u(n_),
                a: m(a, n_, n_, rd(lda)),
                w: w as *mut u8,
            },
        };
        dispatch::<I>(call, info, &mut || {
            go();
            rd(info)
        });
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn svd_call<I: FInt>(
    p: Precision,
    r: Routine,
    jobu: u8,
    jobvt: u8,
    m_: i64,
    n_: i64,
    a: M,
    lda: *const I,
    s: M,
    uu: M,
    ldu: *const I,
    vt: M,
    ldvt: *const I,
) -> Option<Call> {
    let (ju, jv) = (SvdJob::from_char(jobu)?, SvdJob::from_char(jobvt)?);
    let mn = m_.min(n_);
    let ucols = match ju {
        SvdJob::Thin => mn,
        SvdJob::Full => m_,
        _ => 0,
    };
    let vtrows = match jv {
        SvdJob::Thin => mn,
        SvdJob::Full => n_,
        _ => 0,
    };
    // SAFETY: LAPACK contract: the leading dimensions are valid pointers.
    let (ldu_, ldvt_, lda_) = unsafe { (rd(ldu), rd(ldvt), rd(lda)) };
    Some(Call {
        prec: p,
        op: Op::Svd {
            routine: r,
            jobu: ju,
            jobvt: jv,
            m: u(m_),
            n: u(n_),
            a: m(a, m_, n_, lda_),
            s: s as *mut u8,
            u: m(uu, m_, ucols, ldu_),
            vt: m(vt, vtrows, n_, ldvt_),
        },
    })
}

/// `?gesdd_` (s, d) entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_gesdd<I: FInt>(
    real: &RealFn,
    p: Precision,
    jobz: C,
    mm: *const I,
    nn: *const I,
    a: M,
    lda: *const I,
    s: M,
    uu: M,
    ldu: *const I,
    vt: M,
    ldvt: *const I,
    wk: M,
    lwork: *const I,
    iwork: *mut I,
    info: *mut I,
    l1: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(
                C,
                *const I,
                *const I,
                M,
                *const I,
                M,
                M,
                *const I,
                M,
                *const I,
                M,
                *const I,
                *mut I,
                *mut I,
                usize,
            )
        );
        let go = || {
            f(
                jobz, mm, nn, a, lda, s, uu, ldu, vt, ldvt, wk, lwork, iwork, info, l1,
            )
        };
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Gesdd, p, work(Routine::Gesdd, shape(m_, n_, 1)))
        {
            return go();
        }
        if rd(lwork) == -1 {
            d.count_cpu(Routine::Gesdd, p, Reason::WorkspaceQuery);
            return go();
        }
        let j = ch(jobz);
        match svd_call::<I>(
            p,
            Routine::Gesdd,
            j,
            j,
            m_,
            n_,
            a,
            lda,
            s,
            uu,
            ldu,
            vt,
            ldvt,
        ) {
            Some(call) => dispatch::<I>(call, info, &mut || {
                go();
                rd(info)
            }),
            None => {
                d.count_cpu(Routine::Gesdd, p, Reason::InvalidArgs);
                go()
            }
        }
    }
}

/// `?gesdd_` (c, z) entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_gesdd_c<I: FInt>(
    real: &RealFn,
    p: Precision,
    jobz: C,
    mm: *const I,
    nn: *const I,
    a: M,
    lda: *const I,
    s: M,
    uu: M,
    ldu: *const I,
    vt: M,
    ldvt: *const I,
    wk: M,
    lwork: *const I,
    rwork: M,
    iwork: *mut I,
    info: *mut I,
    l1: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(
                C,
                *const I,
                *const I,
                M,
                *const I,
                M,
                M,
                *const I,
                M,
                *const I,
                M,
                *const I,
                M,
                *mut I,
                *mut I,
                usize,
            )
        );
        let go = || {
            f(
                jobz, mm, nn, a, lda, s, uu, ldu, vt, ldvt, wk, lwork, rwork, iwork, info, l1,
            )
        };
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Gesdd, p, work(Routine::Gesdd, shape(m_, n_, 1)))
        {
            return go();
        }
        if rd(lwork) == -1 {
            d.count_cpu(Routine::Gesdd, p, Reason::WorkspaceQuery);
            return go();
        }
        let j = ch(jobz);
        match svd_call::<I>(
            p,
            Routine::Gesdd,
            j,
            j,
            m_,
            n_,
            a,
            lda,
            s,
            uu,
            ldu,
            vt,
            ldvt,
        ) {
            Some(call) => dispatch::<I>(call, info, &mut || {
                go();
                rd(info)
            }),
            None => {
                d.count_cpu(Routine::Gesdd, p, Reason::InvalidArgs);
                go()
            }
        }
    }
}

/// `?gesvd_` (s, d) entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_gesvd<I: FInt>(
    real: &RealFn,
    p: Precision,
    jobu: C,
    jobvt: C,
    mm: *const I,
    nn: *const I,
    a: M,
    lda: *const I,
    s: M,
    uu: M,
    ldu: *const I,
    vt: M,
    ldvt: *const I,
    wk: M,
    lwork: *const I,
    info: *mut I,
    l1: usize,
    l2: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(
                C,
                C,
                *const I,
                *const I,
                M,
                *const I,
                M,
                M,
                *const I,
                M,
                *const I,
                M,
                *const I,
                *mut I,
                usize,
                usize,
            )
        );
        let go = || {
            f(
                jobu, jobvt, mm, nn, a, lda, s, uu, ldu, vt, ldvt, wk, lwork, info, l1, l2,
            )
        };
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Gesvd, p, work(Routine::Gesvd, shape(m_, n_, 1)))
        {
            return go();
        }
        if rd(lwork) == -1 {
            d.count_cpu(Routine::Gesvd, p, Reason::WorkspaceQuery);
            return go();
        }
        match svd_call::<I>(
            p,
            Routine::Gesvd,
            ch(jobu),
            ch(jobvt),
            m_,
            n_,
            a,
            lda,
            s,
            uu,
            ldu,
            vt,
            ldvt,
        ) {
            Some(call) => dispatch::<I>(call, info, &mut || {
                go();
                rd(info)
            }),
            None => {
                d.count_cpu(Routine::Gesvd, p, Reason::InvalidArgs);
                go()
            }
        }
    }
}

/// `?gesvd_` (c, z) entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_gesvd_c<I: FInt>(
    real: &RealFn,
    p: Precision,
    jobu: C,
    jobvt: C,
    mm: *const I,
    nn: *const I,
    a: M,
    lda: *const I,
    s: M,
    uu: M,
    ldu: *const I,
    vt: M,
    ldvt: *const I,
    wk: M,
    lwork: *const I,
    rwork: M,
    info: *mut I,
    l1: usize,
    l2: usize,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(
                C,
                C,
                *const I,
                *const I,
                M,
                *const I,
                M,
                M,
                *const I,
                M,
                *const I,
                M,
                *const I,
                M,
                *mut I,
                usize,
                usize,
            )
        );
        let go = || {
            f(
                jobu, jobvt, mm, nn, a, lda, s, uu, ldu, vt, ldvt, wk, lwork, rwork, info, l1, l2,
            )
        };
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Gesvd, p, work(Routine::Gesvd, shape(m_, n_, 1)))
        {
            return go();
        }
        if rd(lwork) == -1 {
            d.count_cpu(Routine::Gesvd, p, Reason::WorkspaceQuery);
            return go();
        }
        match svd_call::<I>(
            p,
            Routine::Gesvd,
            ch(jobu),
            ch(jobvt),
            m_,
            n_,
            a,
            lda,
            s,
            uu,
            ldu,
            vt,
            ldvt,
        ) {
            Some(call) => dispatch::<I>(call, info, &mut || {
                go();
                rd(info)
            }),
            None => {
                d.count_cpu(Routine::Gesvd, p, Reason::InvalidArgs);
                go()
            }
        }
    }
}

/// `?geqrf_` entry.
///
/// # Safety
/// LAPACK contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn f_geqrf<I: FInt>(
    real: &RealFn,
    p: Precision,
    mm: *const I,
    nn: *const I,
    a: M,
    lda: *const I,
    tau: M,
    wk: M,
    lwork: *const I,
    info: *mut I,
) {
    // SAFETY: LAPACK contract.
    unsafe {
        let f = real!(
            real,
            fn(*const I, *const I, M, *const I, M, M, *const I, *mut I)
        );
        let (m_, n_) = (rd(mm), rd(nn));
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Geqrf, p, work(Routine::Geqrf, shape(m_, n_, 1)))
        {
            return f(mm, nn, a, lda, tau, wk, lwork, info);
        }
        if rd(lwork) == -1 {
            d.count_cpu(Routine::Geqrf, p, Reason::WorkspaceQuery);
            return f(mm, nn, a, lda, tau, wk, lwork, info);
        }
        let call = Call {
            prec: p,
            op: Op::Geqrf {
                m: u(m_),
                n: u(n_),
                a: m(a, m_, n_, rd(lda)),
                tau: tau as *mut u8,
            },
        };
        dispatch::<I>(call, info, &mut || {
            f(mm, nn, a, lda, tau, wk, lwork, info);
            rd(info)
        });
    }
}

// ---------------------------------------------------------------- CBLAS

/// A CBLAS scalar argument: `f32`/`f64` by value (real routines) or a pointer (complex).
pub trait CScalar: Copy {
    /// The scalar's bytes for a precision.
    ///
    /// # Safety
    /// For pointers: points to a value of the precision.
    unsafe fn bytes(self, p: Precision) -> Scalar;
}
impl CScalar for f32 {
    unsafe fn bytes(self, _: Precision) -> Scalar {
        Scalar::of(self)
    }
}
impl CScalar for f64 {
    unsafe fn bytes(self, _: Precision) -> Scalar {
        Scalar::of(self)
    }
}
impl CScalar for *const c_void {
    unsafe fn bytes(self, p: Precision) -> Scalar {
        // SAFETY: CBLAS contract: complex scalars point to a value of the precision.
        unsafe { Scalar::read(self as *const u8, p.size()) }
    }
}

const ROW_MAJOR: c_int = 101;
const COL_MAJOR: c_int = 102;

fn c_trans(t: c_int) -> Option<Trans> {
    match t {
        111 => Some(Trans::No),
        112 => Some(Trans::Trans),
        113 => Some(Trans::Conj),
        _ => None,
    }
}
fn c_uplo(u: c_int) -> Option<Uplo> {
    match u {
        121 => Some(Uplo::Upper),
        122 => Some(Uplo::Lower),
        _ => None,
    }
}
fn c_side(s: c_int) -> Option<Side> {
    match s {
        141 => Some(Side::Left),
        142 => Some(Side::Right),
        _ => None,
    }
}
fn c_diag(d: c_int) -> Option<Diag> {
    match d {
        131 => Some(Diag::NonUnit),
        132 => Some(Diag::Unit),
        _ => None,
    }
}

/// `cblas_?gemm` entry.
///
/// # Safety
/// CBLAS contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn c_gemm<I: FInt, S: CScalar>(
    real: &RealFn,
    p: Precision,
    order: c_int,
    ta: c_int,
    tb: c_int,
    mm: I,
    nn: I,
    kk: I,
    alpha: S,
    a: P,
    lda: I,
    b: P,
    ldb: I,
    beta: S,
    c: M,
    ldc: I,
) {
    // SAFETY: CBLAS contract.
    unsafe {
        let f = real!(
            real,
            fn(c_int, c_int, c_int, I, I, I, S, P, I, P, I, S, M, I)
        );
        let (m_, n_, k_) = (mm.to_i64(), nn.to_i64(), kk.to_i64());
        let d = dispatcher();
        if m_ < 0
            || n_ < 0
            || k_ < 0
            || d.keep_small(Routine::Gemm, p, work(Routine::Gemm, shape(m_, n_, k_)))
        {
            return f(
                order, ta, tb, mm, nn, kk, alpha, a, lda, b, ldb, beta, c, ldc,
            );
        }
        let (Some(t1), Some(t2)) = (c_trans(ta), c_trans(tb)) else {
            d.count_cpu(Routine::Gemm, p, Reason::InvalidArgs);
            return f(
                order, ta, tb, mm, nn, kk, alpha, a, lda, b, ldb, beta, c, ldc,
            );
        };
        // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T (as reference CBLAS).
        let (t1, t2, m2, n2, a2, lda2, b2, ldb2) = match order {
            COL_MAJOR => (t1, t2, m_, n_, a, lda, b, ldb),
            ROW_MAJOR => (t2, t1, n_, m_, b, ldb, a, lda),
            _ => {
                d.count_cpu(Routine::Gemm, p, Reason::InvalidArgs);
                return f(
                    order, ta, tb, mm, nn, kk, alpha, a, lda, b, ldb, beta, c, ldc,
                );
            }
        };
        let (ar, ac) = if t1 == Trans::No { (m2, k_) } else { (k_, m2) };
        let (br, bc) = if t2 == Trans::No { (k_, n2) } else { (n2, k_) };
        let call = Call {
            prec: p,
            op: Op::Gemm {
                ta: t1,
                tb: t2,
                m: u(m2),
                n: u(n2),
                k: u(k_),
                alpha: alpha.bytes(p),
                a: m(a2, ar, ac, lda2.to_i64()),
                b: m(b2, br, bc, ldb2.to_i64()),
                beta: beta.bytes(p),
                c: m(c, m2, n2, ldc.to_i64()),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            f(
                order, ta, tb, mm, nn, kk, alpha, a, lda, b, ldb, beta, c, ldc,
            );
            0
        });
    }
}

/// `cblas_?symm` entry.
///
/// # Safety
/// CBLAS contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn c_symm<I: FInt, S: CScalar>(
    real: &RealFn,
    p: Precision,
    order: c_int,
    side: c_int,
    uplo: c_int,
    mm: I,
    nn: I,
    alpha: S,
    a: P,
    lda: I,
    b: P,
    ldb: I,
    beta: S,
    c: M,
    ldc: I,
) {
    // SAFETY: CBLAS contract.
    unsafe {
        let f = real!(real, fn(c_int, c_int, c_int, I, I, S, P, I, P, I, S, M, I));
        let go = || {
            f(
                order, side, uplo, mm, nn, alpha, a, lda, b, ldb, beta, c, ldc,
            )
        };
        let (m_, n_) = (mm.to_i64(), nn.to_i64());
        let d = dispatcher();
        let ka = if c_side(side) == Some(Side::Right) {
            n_
        } else {
            m_
        };
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Symm, p, work(Routine::Symm, shape(m_, n_, ka)))
        {
            return go();
        }
        let (Some(sd), Some(ul)) = (c_side(side), c_uplo(uplo)) else {
            d.count_cpu(Routine::Symm, p, Reason::InvalidArgs);
            return go();
        };
        let (sd, ul, m2, n2) = match order {
            COL_MAJOR => (sd, ul, m_, n_),
            ROW_MAJOR => (sd.flip(), ul.flip(), n_, m_),
            _ => {
                d.count_cpu(Routine::Symm, p, Reason::InvalidArgs);
                return go();
            }
        };
        let call = Call {
            prec: p,
            op: Op::Symm {
                side: sd,
                uplo: ul,
                m: u(m2),
                n: u(n2),
                alpha: alpha.bytes(p),
                a: m(a, ka, ka, lda.to_i64()),
                b: m(b, m2, n2, ldb.to_i64()),
                beta: beta.bytes(p),
                c: m(c, m2, n2, ldc.to_i64()),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            go();
            0
        });
    }
}

/// `cblas_?syrk` entry.
///
/// # Safety
/// CBLAS contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn c_syrk<I: FInt, S: CScalar>(
    real: &RealFn,
    p: Precision,
    order: c_int,
    uplo: c_int,
    trans: c_int,
    nn: I,
    kk: I,
    alpha: S,
    a: P,
    lda: I,
    beta: S,
    c: M,
    ldc: I,
) {
    // SAFETY: CBLAS contract.
    unsafe {
        let f = real!(real, fn(c_int, c_int, c_int, I, I, S, P, I, S, M, I));
        let go = || f(order, uplo, trans, nn, kk, alpha, a, lda, beta, c, ldc);
        let (n_, k_) = (nn.to_i64(), kk.to_i64());
        let d = dispatcher();
        if n_ < 0 || k_ < 0 || d.keep_small(Routine::Syrk, p, work(Routine::Syrk, shape(1, n_, k_)))
        {
            return go();
        }
        let (Some(ul), Some(t)) = (c_uplo(uplo), c_trans(trans)) else {
            d.count_cpu(Routine::Syrk, p, Reason::InvalidArgs);
            return go();
        };
        let (ul, t) = match order {
            COL_MAJOR => (ul, t),
            ROW_MAJOR => (
                ul.flip(),
                if t == Trans::No {
                    Trans::Trans
                } else {
                    Trans::No
                },
            ),
            _ => {
                d.count_cpu(Routine::Syrk, p, Reason::InvalidArgs);
                return go();
            }
        };
        let (ar, ac) = if t == Trans::No { (n_, k_) } else { (k_, n_) };
        let call = Call {
            prec: p,
            op: Op::Syrk {
                uplo: ul,
                trans: t,
                n: u(n_),
                k: u(k_),
                alpha: alpha.bytes(p),
                a: m(a, ar, ac, lda.to_i64()),
                beta: beta.bytes(p),
                c: m(c, n_, n_, ldc.to_i64()),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            go();
            0
        });
    }
}

/// `cblas_?trsm` entry.
///
/// # Safety
/// CBLAS contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn c_trsm<I: FInt, S: CScalar>(
    real: &RealFn,
    p: Precision,
    order: c_int,
    side: c_int,
    uplo: c_int,
    ta: c_int,
    diag: c_int,
    mm: I,
    nn: I,
    alpha: S,
    a: P,
    lda: I,
    b: M,
    ldb: I,
) {
    // SAFETY: CBLAS contract.
    unsafe {
        let f = real!(
            real,
            fn(c_int, c_int, c_int, c_int, c_int, I, I, S, P, I, M, I)
        );
        let go = || f(order, side, uplo, ta, diag, mm, nn, alpha, a, lda, b, ldb);
        let (m_, n_) = (mm.to_i64(), nn.to_i64());
        let d = dispatcher();
        let ka = if c_side(side) == Some(Side::Right) {
            n_
        } else {
            m_
        };
        if m_ < 0
            || n_ < 0
            || d.keep_small(Routine::Trsm, p, work(Routine::Trsm, shape(m_, n_, ka)))
        {
            return go();
        }
        let (Some(sd), Some(ul), Some(t), Some(dg)) =
            (c_side(side), c_uplo(uplo), c_trans(ta), c_diag(diag))
        else {
            d.count_cpu(Routine::Trsm, p, Reason::InvalidArgs);
            return go();
        };
        let (sd, ul, m2, n2) = match order {
            COL_MAJOR => (sd, ul, m_, n_),
            ROW_MAJOR => (sd.flip(), ul.flip(), n_, m_),
            _ => {
                d.count_cpu(Routine::Trsm, p, Reason::InvalidArgs);
                return go();
            }
        };
        let call = Call {
            prec: p,
            op: Op::Trsm {
                side: sd,
                uplo: ul,
                ta: t,
                diag: dg,
                m: u(m2),
                n: u(n2),
                alpha: alpha.bytes(p),
                a: m(a, ka, ka, lda.to_i64()),
                b: m(b, m2, n2, ldb.to_i64()),
            },
        };
        dispatch::<I>(call, std::ptr::null_mut(), &mut || {
            go();
            0
        });
    }
}

/// Generates the exported wrappers of an LD_PRELOAD shim from one table: every routine in s, d,
/// c and z, in the Fortran names (`dgemm_`, `dgemm_64_`), the numpy/scipy wheel names
/// (`scipy_dgemm_` 32-bit, `scipy_dgemm_64_` ILP64) and, for the BLAS-3 routines, the CBLAS names
/// (`cblas_dgemm`, `cblas_dgemm64_`, `scipy_cblas_dgemm`, `scipy_cblas_dgemm64_`). Expand it once,
/// at the top level of a `cdylib` crate that depends on gpukit-offload.
#[macro_export]
macro_rules! export_blas_symbols {
    () => {
        $crate::__offload_table!(@fortran);
        $crate::__offload_table!(@cblas);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __offload_table {
    (@fortran) => {
        $crate::__offload_f!(f_gemm [], [sgemm S, dgemm D, cgemm C, zgemm Z], (ta: C, tb: C, m: *const I, n: *const I, k: *const I, alpha: P, a: P, lda: *const I, b: P, ldb: *const I, beta: P, c: M, ldc: *const I, l1: usize, l2: usize));
        $crate::__offload_f!(f_symm [], [ssymm S, dsymm D, csymm C, zsymm Z], (side: C, uplo: C, m: *const I, n: *const I, alpha: P, a: P, lda: *const I, b: P, ldb: *const I, beta: P, c: M, ldc: *const I, l1: usize, l2: usize));
        $crate::__offload_f!(f_syrk [], [ssyrk S, dsyrk D, csyrk C, zsyrk Z], (uplo: C, trans: C, n: *const I, k: *const I, alpha: P, a: P, lda: *const I, beta: P, c: M, ldc: *const I, l1: usize, l2: usize));
        $crate::__offload_f!(f_trsm [], [strsm S, dtrsm D, ctrsm C, ztrsm Z], (side: C, uplo: C, ta: C, diag: C, m: *const I, n: *const I, alpha: P, a: P, lda: *const I, b: M, ldb: *const I, l1: usize, l2: usize, l3: usize, l4: usize));
        $crate::__offload_f!(f_getrf [], [sgetrf S, dgetrf D, cgetrf C, zgetrf Z], (m: *const I, n: *const I, a: M, lda: *const I, ipiv: *mut I, info: *mut I));
        $crate::__offload_f!(f_getrs [], [sgetrs S, dgetrs D, cgetrs C, zgetrs Z], (trans: C, n: *const I, nrhs: *const I, a: P, lda: *const I, ipiv: *const I, b: M, ldb: *const I, info: *mut I, l1: usize));
        $crate::__offload_f!(f_gesv [], [sgesv S, dgesv D, cgesv C, zgesv Z], (n: *const I, nrhs: *const I, a: M, lda: *const I, ipiv: *mut I, b: M, ldb: *const I, info: *mut I));
        $crate::__offload_f!(f_potrf [], [spotrf S, dpotrf D, cpotrf C, zpotrf Z], (uplo: C, n: *const I, a: M, lda: *const I, info: *mut I, l1: usize));
        $crate::__offload_f!(f_potrs_posv [$crate::ops::Routine::Potrs], [spotrs S, dpotrs D, cpotrs C, zpotrs Z], (uplo: C, n: *const I, nrhs: *const I, a: M, lda: *const I, b: M, ldb: *const I, info: *mut I, l1: usize));
        $crate::__offload_f!(f_potrs_posv [$crate::ops::Routine::Posv], [sposv S, dposv D, cposv C, zposv Z], (uplo: C, n: *const I, nrhs: *const I, a: M, lda: *const I, b: M, ldb: *const I, info: *mut I, l1: usize));
        $crate::__offload_f!(f_syevd [], [ssyevd S, dsyevd D], (jobz: C, uplo: C, n: *const I, a: M, lda: *const I, w: M, work: M, lwork: *const I, iwork: *mut I, liwork: *const I, info: *mut I, l1: usize, l2: usize));
        $crate::__offload_f!(f_heevd [], [cheevd C, zheevd Z], (jobz: C, uplo: C, n: *const I, a: M, lda: *const I, w: M, work: M, lwork: *const I, rwork: M, lrwork: *const I, iwork: *mut I, liwork: *const I, info: *mut I, l1: usize, l2: usize));
        $crate::__offload_f!(f_gesdd [], [sgesdd S, dgesdd D], (jobz: C, m: *const I, n: *const I, a: M, lda: *const I, s: M, u: M, ldu: *const I, vt: M, ldvt: *const I, work: M, lwork: *const I, iwork: *mut I, info: *mut I, l1: usize));
        $crate::__offload_f!(f_gesdd_c [], [cgesdd C, zgesdd Z], (jobz: C, m: *const I, n: *const I, a: M, lda: *const I, s: M, u: M, ldu: *const I, vt: M, ldvt: *const I, work: M, lwork: *const I, rwork: M, iwork: *mut I, info: *mut I, l1: usize));
        $crate::__offload_f!(f_gesvd [], [sgesvd S, dgesvd D], (jobu: C, jobvt: C, m: *const I, n: *const I, a: M, lda: *const I, s: M, u: M, ldu: *const I, vt: M, ldvt: *const I, work: M, lwork: *const I, info: *mut I, l1: usize, l2: usize));
        $crate::__offload_f!(f_gesvd_c [], [cgesvd C, zgesvd Z], (jobu: C, jobvt: C, m: *const I, n: *const I, a: M, lda: *const I, s: M, u: M, ldu: *const I, vt: M, ldvt: *const I, work: M, lwork: *const I, rwork: M, info: *mut I, l1: usize, l2: usize));
        $crate::__offload_f!(f_geqrf [], [sgeqrf S, dgeqrf D, cgeqrf C, zgeqrf Z], (m: *const I, n: *const I, a: M, lda: *const I, tau: M, work: M, lwork: *const I, info: *mut I));
    };
    (@cblas) => {
        $crate::__offload_c!(c_gemm, [sgemm S f32, dgemm D f64, cgemm C *const ::std::ffi::c_void, zgemm Z *const ::std::ffi::c_void], (order: c_int, ta: c_int, tb: c_int, m: I, n: I, k: I, alpha: A, a: P, lda: I, b: P, ldb: I, beta: A, c: M, ldc: I));
        $crate::__offload_c!(c_symm, [ssymm S f32, dsymm D f64, csymm C *const ::std::ffi::c_void, zsymm Z *const ::std::ffi::c_void], (order: c_int, side: c_int, uplo: c_int, m: I, n: I, alpha: A, a: P, lda: I, b: P, ldb: I, beta: A, c: M, ldc: I));
        $crate::__offload_c!(c_syrk, [ssyrk S f32, dsyrk D f64, csyrk C *const ::std::ffi::c_void, zsyrk Z *const ::std::ffi::c_void], (order: c_int, uplo: c_int, trans: c_int, n: I, k: I, alpha: A, a: P, lda: I, beta: A, c: M, ldc: I));
        $crate::__offload_c!(c_trsm, [strsm S f32, dtrsm D f64, ctrsm C *const ::std::ffi::c_void, ztrsm Z *const ::std::ffi::c_void], (order: c_int, side: c_int, uplo: c_int, ta: c_int, diag: c_int, m: I, n: I, alpha: A, a: P, lda: I, b: M, ldb: I));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __offload_f {
    ($entry:ident $extra:tt, [$($name:ident $prec:ident),*], $args:tt) => {
        $(
            $crate::__offload_f!(@one $entry $extra, $name, $prec, i32, "", "_", $args);
            $crate::__offload_f!(@one $entry $extra, $name, $prec, i64, "", "_64_", $args);
            $crate::__offload_f!(@one $entry $extra, $name, $prec, i32, "scipy_", "_", $args);
            $crate::__offload_f!(@one $entry $extra, $name, $prec, i64, "scipy_", "_64_", $args);
        )*
    };
    (@one $entry:ident [$($extra:expr)?], $name:ident, $prec:ident, $int:ty, $pre:literal, $suf:literal, ($($arg:ident : $ty:ty),*)) => {
        const _: () = {
            #[allow(unused_imports)]
            use ::std::ffi::{c_char, c_int, c_void};
            #[allow(dead_code)]
            type I = $int;
            #[allow(dead_code)]
            type C = *const c_char;
            #[allow(dead_code)]
            type P = *const c_void;
            #[allow(dead_code)]
            type M = *mut c_void;
            static REAL: $crate::interpose::RealFn =
                $crate::interpose::RealFn::new(concat!($pre, stringify!($name), $suf, "\0"));
            #[export_name = concat!($pre, stringify!($name), $suf)]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn wrapper($($arg: $ty),*) {
                // SAFETY: the caller follows the BLAS/LAPACK contract of this symbol.
                unsafe {
                    $crate::interpose::$entry::<I>(&REAL, $crate::ops::Precision::$prec, $($extra,)? $($arg),*)
                }
            }
        };
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __offload_c {
    ($entry:ident, [$($name:ident $prec:ident $alpha:ty),*], $args:tt) => {
        $(
            $crate::__offload_c!(@one $entry, $name, $prec, $alpha, i32, "cblas_", "", $args);
            $crate::__offload_c!(@one $entry, $name, $prec, $alpha, i64, "cblas_", "64_", $args);
            $crate::__offload_c!(@one $entry, $name, $prec, $alpha, i32, "scipy_cblas_", "", $args);
            $crate::__offload_c!(@one $entry, $name, $prec, $alpha, i64, "scipy_cblas_", "64_", $args);
        )*
    };
    (@one $entry:ident, $name:ident, $prec:ident, $alpha:ty, $int:ty, $pre:literal, $suf:literal, ($($arg:ident : $ty:ty),*)) => {
        const _: () = {
            #[allow(unused_imports)]
            use ::std::ffi::{c_char, c_int, c_void};
            type I = $int;
            type A = $alpha;
            type P = *const c_void;
            type M = *mut c_void;
            static REAL: $crate::interpose::RealFn =
                $crate::interpose::RealFn::new(concat!($pre, stringify!($name), $suf, "\0"));
            #[export_name = concat!($pre, stringify!($name), $suf)]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn wrapper($($arg: $ty),*) {
                // SAFETY: the caller follows the CBLAS contract of this symbol.
                unsafe {
                    $crate::interpose::$entry::<I, A>(&REAL, $crate::ops::Precision::$prec, $($arg),*)
                }
            }
        };
    };
}
