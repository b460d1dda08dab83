//! The CPU backend for library users: a BLAS/LAPACK shared library loaded at run time.
//!
//! Why a system library and not a pure-Rust one (faer): the shim's CPU path is, by definition,
//! the program's own BLAS/LAPACK, so the library path should give the *same* LAPACK semantics
//! (pivoting, info codes, workspace rules, eigenvector signs) and the same performance the cost
//! model was calibrated with. OpenBLAS is what numpy, scipy and most distributions ship, is
//! multithreaded and tuned per CPU; nothing has to be compiled in, and a machine without it gets
//! a clear [`Error::NoCpuLibrary`].
//!
//! Search order: `GPUKIT_OFFLOAD_CPU_LIB` (a path), `libopenblas.so.0`, `libopenblas.so`,
//! `liblapack.so.3` + `libblas.so.3`. Three symbol conventions are recognised: plain LP64
//! (`dgemm_`), the numpy/scipy wheel ILP64 one (`scipy_dgemm_64_`) and the OpenBLAS ILP64 suffix
//! (`dgemm_64_`); the integer width follows.

use crate::call::{Call, HostMat, Op, Piv};
use crate::error::{Error, Result};
use crate::library::LibId;
use crate::ops::{Precision, Routine, SvdJob};
use std::ffi::{c_char, c_void, CString};

/// The environment variable naming a CPU BLAS/LAPACK library.
pub const CPU_LIB_ENV: &str = "GPUKIT_OFFLOAD_CPU_LIB";

/// A loaded CPU BLAS/LAPACK.
pub struct CpuBackend {
    handles: Vec<*mut c_void>,
    prefix: &'static str,
    suffix: &'static str,
    ilp64: bool,
    path: String,
    lib: LibId,
}

// SAFETY: the handles are process-wide dlopen handles, never closed; symbol lookups and calls are
// thread-safe in every BLAS this loads (OpenBLAS / reference LAPACK are reentrant).
unsafe impl Send for CpuBackend {}
// SAFETY: as above; no interior state is mutated after construction.
unsafe impl Sync for CpuBackend {}

fn dlopen(path: &str) -> Option<*mut c_void> {
    let c = CString::new(path).ok()?;
    // SAFETY: `c` is a valid C string; RTLD_NOW|RTLD_LOCAL keeps the library's symbols out of the
    // global scope (so it cannot interpose on the program's own BLAS).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    (!h.is_null()).then_some(h)
}

fn dlsym(h: *mut c_void, name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: `h` is a live handle from dlopen; `c` is a valid C string.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl CpuBackend {
    /// Finds a library by the search order above.
    pub fn discover() -> Result<CpuBackend> {
        let mut tried = Vec::new();
        if let Some(p) = std::env::var_os(CPU_LIB_ENV).filter(|p| !p.is_empty()) {
            let p = p.to_string_lossy().into_owned();
            return CpuBackend::open(&[p.as_str()]).map_err(|_| Error::NoCpuLibrary {
                tried: format!("{CPU_LIB_ENV}={p}"),
            });
        }
        for set in [
            &["libopenblas.so.0"][..],
            &["libopenblas.so"][..],
            &["liblapack.so.3", "libblas.so.3"][..],
        ] {
            match CpuBackend::open(set) {
                Ok(b) => return Ok(b),
                Err(_) => tried.push(set.join(" + ")),
            }
        }
        Err(Error::NoCpuLibrary {
            tried: tried.join(", "),
        })
    }

    /// Opens these libraries (later ones supply symbols the first lacks) and detects the
    /// symbol convention.
    pub fn open(paths: &[&str]) -> Result<CpuBackend> {
        let handles: Vec<_> = paths.iter().filter_map(|p| dlopen(p)).collect();
        if handles.len() != paths.len() || handles.is_empty() {
            return Err(Error::NoCpuLibrary {
                tried: paths.join(" + "),
            });
        }
        for (prefix, suffix, ilp64) in [
            ("", "_", false),
            ("scipy_", "_64_", true),
            ("", "_64_", true),
        ] {
            let b = CpuBackend {
                handles: handles.clone(),
                prefix,
                suffix,
                ilp64,
                path: paths.join(" + "),
                lib: LibId::of_path(paths[0]),
            };
            if b.sym("dgemm").is_some() && b.sym("dgetrf").is_some() {
                return Ok(b);
            }
        }
        Err(Error::NoCpuLibrary {
            tried: format!("{} (no dgemm/dgetrf symbols)", paths.join(" + ")),
        })
    }

    /// The library path(s).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The library's identity (the cost model's CPU curves are per library).
    pub fn lib(&self) -> LibId {
        self.lib
    }

    /// True for 64-bit integer (ILP64) libraries.
    pub fn ilp64(&self) -> bool {
        self.ilp64
    }

    fn sym(&self, base: &str) -> Option<*mut c_void> {
        let name = format!("{}{}{}", self.prefix, base, self.suffix);
        self.handles.iter().find_map(|h| dlsym(*h, &name))
    }

    fn need(&self, base: &str) -> Result<*mut c_void> {
        self.sym(base).ok_or_else(|| Error::MissingSymbol {
            library: self.path.clone(),
            routine: base.to_string(),
        })
    }

    /// Runs a checked call; returns LAPACK's `info` (0 for BLAS).
    ///
    /// # Safety
    /// Every pointer in `call` must be valid for the extents its dimensions describe, and
    /// [`Call::check`] must have passed.
    pub unsafe fn run(&self, call: &Call) -> Result<i64> {
        // SAFETY: forwarded from the caller.
        unsafe {
            if self.ilp64 {
                self.run_int::<i64>(call)
            } else {
                self.run_int::<i32>(call)
            }
        }
    }

    unsafe fn run_int<I: FInt>(&self, call: &Call) -> Result<i64> {
        let p = call.prec;
        let name = |r: Routine| r.name(p);
        let i = |x: usize| I::from_usize(x);
        let ch = |c: u8| c as c_char;
        let mut info = I::from_usize(0);
        let v = |m: &HostMat| m.ptr as *mut c_void;
        type P = *mut c_void;
        // SAFETY: (whole block) every transmute turns a symbol of the routine named right there
        // into its Fortran prototype; the integer width matches the library's convention; every
        // pointer comes from the checked call (caller's contract) or from a live local.
        unsafe {
            match call.op {
                Op::Gemm {
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    alpha,
                    a,
                    b,
                    beta,
                    c,
                } => {
                    let f: unsafe extern "C" fn(
                        *const c_char,
                        *const c_char,
                        *const I,
                        *const I,
                        *const I,
                        *const u8,
                        P,
                        *const I,
                        P,
                        *const I,
                        *const u8,
                        P,
                        *const I,
                        usize,
                        usize,
                    ) = std::mem::transmute(self.need(&name(Routine::Gemm))?);
                    f(
                        &ch(ta.to_char()),
                        &ch(tb.to_char()),
                        &i(m),
                        &i(n),
                        &i(k),
                        alpha.as_ptr(),
                        v(&a),
                        &i(a.ld),
                        v(&b),
                        &i(b.ld),
                        beta.as_ptr(),
                        v(&c),
                        &i(c.ld),
                        1,
                        1,
                    );
                }
                Op::Symm {
                    side,
                    uplo,
                    m,
                    n,
                    alpha,
                    a,
                    b,
                    beta,
                    c,
                } => {
                    let f: unsafe extern "C" fn(
                        *const c_char,
                        *const c_char,
                        *const I,
                        *const I,
                        *const u8,
                        P,
                        *const I,
                        P,
                        *const I,
                        *const u8,
                        P,
                        *const I,
                        usize,
                        usize,
                    ) = std::mem::transmute(self.need(&name(Routine::Symm))?);
                    f(
                        &ch(side.to_char()),
                        &ch(uplo.to_char()),
                        &i(m),
                        &i(n),
                        alpha.as_ptr(),
                        v(&a),
                        &i(a.ld),
                        v(&b),
                        &i(b.ld),
                        beta.as_ptr(),
                        v(&c),
                        &i(c.ld),
                        1,
                        1,
                    );
                }
                Op::Syrk {
                    uplo,
                    trans,
                    n,
                    k,
                    alpha,
                    a,
                    beta,
                    c,
                } => {
                    let f: unsafe extern "C" fn(
                        *const c_char,
                        *const c_char,
                        *const I,
                        *const I,
                        *const u8,
                        P,
                        *const I,
                        *const u8,
                        P,
                        *const I,
                        usize,
                        usize,
                    ) = std::mem::transmute(self.need(&name(Routine::Syrk))?);
                    f(
                        &ch(uplo.to_char()),
                        &ch(trans.to_char()),
                        &i(n),
                        &i(k),
                        alpha.as_ptr(),
                        v(&a),
                        &i(a.ld),
                        beta.as_ptr(),
                        v(&c),
                        &i(c.ld),
                        1,
                        1,
                    );
                }
                Op::Trsm {
                    side,
                    uplo,
                    ta,
                    diag,
                    m,
                    n,
                    alpha,
                    a,
                    b,
                } => {
                    let f: unsafe extern "C" fn(
                        *const c_char,
                        *const c_char,
                        *const c_char,
                        *const c_char,
                        *const I,
                        *const I,
                        *const u8,
                        P,
                        *const I,
                        P,
                        *const I,
                        usize,
                        usize,
                        usize,
                        usize,
                    ) = std::mem::transmute(self.need(&name(Routine::Trsm))?);
                    f(
                        &ch(side.to_char()),
                        &ch(uplo.to_char()),
                        &ch(ta.to_char()),
                        &ch(diag.to_char()),
                        &i(m),
                        &i(n),
                        alpha.as_ptr(),
                        v(&a),
                        &i(a.ld),
                        v(&b),
                        &i(b.ld),
                        1,
                        1,
                        1,
                        1,
                    );
                }
                Op::Getrf { m, n, a, ipiv } => {
                    let f: unsafe extern "C" fn(*const I, *const I, P, *const I, *mut I, *mut I) =
                        std::mem::transmute(self.need(&name(Routine::Getrf))?);
                    let mut piv = PivBuf::<I>::new(ipiv, m.min(n), false);
                    f(&i(m), &i(n), v(&a), &i(a.ld), piv.ptr(), &mut info);
                    piv.finish();
                }
                Op::Getrs {
                    trans,
                    n,
                    nrhs,
                    a,
                    ipiv,
                    b,
                } => {
                    let f: unsafe extern "C" fn(
                        *const c_char,
                        *const I,
                        *const I,
                        P,
                        *const I,
                        *mut I,
                        P,
                        *const I,
                        *mut I,
                        usize,
                    ) = std::mem::transmute(self.need(&name(Routine::Getrs))?);
                    let mut piv = PivBuf::<I>::new(ipiv, n, true);
                    f(
                        &ch(trans.to_char()),
                        &i(n),
                        &i(nrhs),
                        v(&a),
                        &i(a.ld),
                        piv.ptr(),
                        v(&b),
                        &i(b.ld),
                        &mut info,
                        1,
                    );
                }
                Op::Gesv {
                    n,
                    nrhs,
                    a,
                    ipiv,
                    b,
                } => {
                    let f: unsafe extern "C" fn(
                        *const I,
                        *const I,
                        P,
                        *const I,
                        *mut I,
                        P,
                        *const I,
                        *mut I,
                    ) = std::mem::transmute(self.need(&name(Routine::Gesv))?);
                    let mut piv = PivBuf::<I>::new(ipiv, n, false);
                    f(
                        &i(n),
                        &i(nrhs),
                        v(&a),
                        &i(a.ld),
                        piv.ptr(),
                        v(&b),
                        &i(b.ld),
                        &mut info,
                    );
                    piv.finish();
                }
                Op::Potrf { uplo, n, a } => {
                    let f: unsafe extern "C" fn(
                        *const c_char,
                        *const I,
                        P,
                        *const I,
                        *mut I,
                        usize,
                    ) = std::mem::transmute(self.need(&name(Routine::Potrf))?);
                    f(&ch(uplo.to_char()), &i(n), v(&a), &i(a.ld), &mut info, 1);
                }
                Op::Potrs {
                    uplo,
                    n,
                    nrhs,
                    a,
                    b,
                }
                | Op::Posv {
                    uplo,
                    n,
                    nrhs,
                    a,
                    b,
                } => {
                    let r = call.routine();
                    let f: unsafe extern "C" fn(
                        *const c_char,
                        *const I,
                        *const I,
                        P,
                        *const I,
                        P,
                        *const I,
                        *mut I,
                        usize,
                    ) = std::mem::transmute(self.need(&name(r))?);
                    f(
                        &ch(uplo.to_char()),
                        &i(n),
                        &i(nrhs),
                        v(&a),
                        &i(a.ld),
                        v(&b),
                        &i(b.ld),
                        &mut info,
                        1,
                    );
                }
                Op::Syevd {
                    vectors,
                    uplo,
                    n,
                    a,
                    w,
                } => {
                    let jobz = ch(if vectors { b'V' } else { b'N' });
                    let sym = self.need(&name(Routine::Syevd))?;
                    let mut iq = I::from_usize(0);
                    let minus1 = I::from_i64(-1);
                    let mut wq = [0f64; 2];
                    let mut rq = [0f64; 1];
                    if p.is_complex() {
                        let f: unsafe extern "C" fn(
                            *const c_char,
                            *const c_char,
                            *const I,
                            P,
                            *const I,
                            P,
                            P,
                            *const I,
                            P,
                            *const I,
                            *mut I,
                            *const I,
                            *mut I,
                            usize,
                            usize,
                        ) = std::mem::transmute(sym);
                        f(
                            &jobz,
                            &ch(uplo.to_char()),
                            &i(n),
                            v(&a),
                            &i(a.ld),
                            w as P,
                            wq.as_mut_ptr() as P,
                            &minus1,
                            rq.as_mut_ptr() as P,
                            &minus1,
                            &mut iq,
                            &minus1,
                            &mut info,
                            1,
                            1,
                        );
                        let lw = work_len(&wq, p);
                        let lr = real_len(&rq, p);
                        let mut work = vec![0u8; lw.max(1) * p.size()];
                        let mut rwork = vec![0u8; lr.max(1) * p.real_size()];
                        let mut iwork = vec![I::from_usize(0); iq.to_usize().max(1)];
                        f(
                            &jobz,
                            &ch(uplo.to_char()),
                            &i(n),
                            v(&a),
                            &i(a.ld),
                            w as P,
                            work.as_mut_ptr() as P,
                            &i(lw),
                            rwork.as_mut_ptr() as P,
                            &i(lr),
                            iwork.as_mut_ptr(),
                            &i(iwork.len()),
                            &mut info,
                            1,
                            1,
                        );
                    } else {
                        let f: unsafe extern "C" fn(
                            *const c_char,
                            *const c_char,
                            *const I,
                            P,
                            *const I,
                            P,
                            P,
                            *const I,
                            *mut I,
                            *const I,
                            *mut I,
                            usize,
                            usize,
                        ) = std::mem::transmute(sym);
                        f(
                            &jobz,
                            &ch(uplo.to_char()),
                            &i(n),
                            v(&a),
                            &i(a.ld),
                            w as P,
                            wq.as_mut_ptr() as P,
                            &minus1,
                            &mut iq,
                            &minus1,
                            &mut info,
                            1,
                            1,
                        );
                        let lw = work_len(&wq, p);
                        let mut work = vec![0u8; lw.max(1) * p.size()];
                        let mut iwork = vec![I::from_usize(0); iq.to_usize().max(1)];
                        f(
                            &jobz,
                            &ch(uplo.to_char()),
                            &i(n),
                            v(&a),
                            &i(a.ld),
                            w as P,
                            work.as_mut_ptr() as P,
                            &i(lw),
                            iwork.as_mut_ptr(),
                            &i(iwork.len()),
                            &mut info,
                            1,
                            1,
                        );
                    }
                }
                Op::Svd {
                    routine,
                    jobu,
                    jobvt,
                    m,
                    n,
                    a,
                    s,
                    u,
                    vt,
                } => {
                    let sym = self.need(&name(routine))?;
                    let mn = m.min(n);
                    let mx = m.max(n);
                    let minus1 = I::from_i64(-1);
                    let mut wq = [0f64; 2];
                    let lrwork = if routine == Routine::Gesdd {
                        if jobu == SvdJob::None {
                            7 * mn
                        } else {
                            (5 * mn * mn + 5 * mn).max(2 * mx * mn + 2 * mn * mn + mn)
                        }
                    } else {
                        5 * mn
                    }
                    .max(1);
                    let mut rwork = vec![
                        0u8;
                        if p.is_complex() {
                            lrwork * p.real_size()
                        } else {
                            0
                        }
                    ];
                    let mut iwork = vec![I::from_usize(0); 8 * mn.max(1)];
                    let (ldu, ldvt) = (u.ld.max(1), vt.ld.max(1));
                    let mut dummy = [0u8; 16];
                    let up = if u.ptr.is_null() {
                        dummy.as_mut_ptr() as P
                    } else {
                        v(&u)
                    };
                    let vtp = if vt.ptr.is_null() {
                        dummy.as_mut_ptr() as P
                    } else {
                        v(&vt)
                    };
                    let rw = rwork.as_mut_ptr() as P;
                    let iw = iwork.as_mut_ptr() as P;
                    let call_it = |work: P, lwork: &I, info: &mut I| {
                        if routine == Routine::Gesdd {
                            if p.is_complex() {
                                let f: unsafe extern "C" fn(
                                    *const c_char,
                                    *const I,
                                    *const I,
                                    P,
                                    *const I,
                                    P,
                                    P,
                                    *const I,
                                    P,
                                    *const I,
                                    P,
                                    *const I,
                                    P,
                                    P,
                                    *mut I,
                                    usize,
                                ) = std::mem::transmute(sym);
                                f(
                                    &ch(jobu.to_char()),
                                    &i(m),
                                    &i(n),
                                    v(&a),
                                    &i(a.ld),
                                    s as P,
                                    up,
                                    &i(ldu),
                                    vtp,
                                    &i(ldvt),
                                    work,
                                    lwork,
                                    rw,
                                    iw,
                                    info,
                                    1,
                                );
                            } else {
                                let f: unsafe extern "C" fn(
                                    *const c_char,
                                    *const I,
                                    *const I,
                                    P,
                                    *const I,
                                    P,
                                    P,
                                    *const I,
                                    P,
                                    *const I,
                                    P,
                                    *const I,
                                    P,
                                    *mut I,
                                    usize,
                                ) = std::mem::transmute(sym);
                                f(
                                    &ch(jobu.to_char()),
                                    &i(m),
                                    &i(n),
                                    v(&a),
                                    &i(a.ld),
                                    s as P,
                                    up,
                                    &i(ldu),
                                    vtp,
                                    &i(ldvt),
                                    work,
                                    lwork,
                                    iw,
                                    info,
                                    1,
                                );
                            }
                        } else if p.is_complex() {
                            let f: unsafe extern "C" fn(
                                *const c_char,
                                *const c_char,
                                *const I,
                                *const I,
                                P,
                                *const I,
                                P,
                                P,
                                *const I,
                                P,
                                *const I,
                                P,
                                *const I,
                                P,
                                *mut I,
                                usize,
                                usize,
                            ) = std::mem::transmute(sym);
                            f(
                                &ch(jobu.to_char()),
                                &ch(jobvt.to_char()),
                                &i(m),
                                &i(n),
                                v(&a),
                                &i(a.ld),
                                s as P,
                                up,
                                &i(ldu),
                                vtp,
                                &i(ldvt),
                                work,
                                lwork,
                                rw,
                                info,
                                1,
                                1,
                            );
                        } else {
                            let f: unsafe extern "C" fn(
                                *const c_char,
                                *const c_char,
                                *const I,
                                *const I,
                                P,
                                *const I,
                                P,
                                P,
                                *const I,
                                P,
                                *const I,
                                P,
                                *const I,
                                *mut I,
                                usize,
                                usize,
                            ) = std::mem::transmute(sym);
                            f(
                                &ch(jobu.to_char()),
                                &ch(jobvt.to_char()),
                                &i(m),
                                &i(n),
                                v(&a),
                                &i(a.ld),
                                s as P,
                                up,
                                &i(ldu),
                                vtp,
                                &i(ldvt),
                                work,
                                lwork,
                                info,
                                1,
                                1,
                            );
                        }
                    };
                    call_it(wq.as_mut_ptr() as P, &minus1, &mut info);
                    let lw = work_len(&wq, p);
                    let mut work = vec![0u8; lw.max(1) * p.size()];
                    call_it(work.as_mut_ptr() as P, &i(lw), &mut info);
                }
                // the FFI table's CPU path replaces this match (next commit)
                Op::Hemm { .. }
                | Op::Herk { .. }
                | Op::Trmm { .. }
                | Op::Getri { .. }
                | Op::Potri { .. }
                | Op::Trtrs { .. }
                | Op::Syevr { .. }
                | Op::Gelsd { .. }
                | Op::Orgqr { .. } => {
                    return Err(Error::MissingSymbol {
                        library: self.path.clone(),
                        routine: call.name(),
                    })
                }
                Op::Geqrf { m, n, a, tau } => {
                    let f: unsafe extern "C" fn(
                        *const I,
                        *const I,
                        P,
                        *const I,
                        P,
                        P,
                        *const I,
                        *mut I,
                    ) = std::mem::transmute(self.need(&name(Routine::Geqrf))?);
                    let mut wq = [0f64; 2];
                    f(
                        &i(m),
                        &i(n),
                        v(&a),
                        &i(a.ld),
                        tau as P,
                        wq.as_mut_ptr() as P,
                        &I::from_i64(-1),
                        &mut info,
                    );
                    let lw = work_len(&wq, p);
                    let mut work = vec![0u8; lw.max(1) * p.size()];
                    f(
                        &i(m),
                        &i(n),
                        v(&a),
                        &i(a.ld),
                        tau as P,
                        work.as_mut_ptr() as P,
                        &i(lw),
                        &mut info,
                    );
                }
            }
        }
        Ok(info.to_i64())
    }
}

/// The workspace size a query wrote into `work[0]` (its real part).
fn work_len(q: &[f64; 2], p: Precision) -> usize {
    let x = match p {
        Precision::S | Precision::C => {
            f32::from_ne_bytes(q[0].to_ne_bytes()[..4].try_into().unwrap_or([0; 4])) as f64
        }
        Precision::D | Precision::Z => q[0],
    };
    if x.is_finite() && x > 0.0 {
        // LAPACK rounds sizes into floats; round up a little to be safe
        (x * (1.0 + 1e-6)).ceil() as usize + 1
    } else {
        1
    }
}

fn real_len(q: &[f64; 1], p: Precision) -> usize {
    work_len(&[q[0], 0.0], p)
}

/// A Fortran integer: `i32` (LP64) or `i64` (ILP64). Implemented for those two only.
pub trait FInt: Copy + 'static {
    /// From a size (saturating).
    fn from_usize(x: usize) -> Self;
    /// From an `i64` (saturating).
    fn from_i64(x: i64) -> Self;
    /// To `i64`.
    fn to_i64(self) -> i64;
    /// To a size (negative: 0).
    #[inline]
    fn to_usize(self) -> usize {
        self.to_i64().max(0) as usize
    }
}
impl FInt for i32 {
    #[inline]
    fn from_usize(x: usize) -> i32 {
        x.min(i32::MAX as usize) as i32
    }
    #[inline]
    fn from_i64(x: i64) -> i32 {
        x.clamp(i32::MIN as i64, i32::MAX as i64) as i32
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
}
impl FInt for i64 {
    #[inline]
    fn from_usize(x: usize) -> i64 {
        x.min(i64::MAX as usize) as i64
    }
    #[inline]
    fn from_i64(x: i64) -> i64 {
        x
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self
    }
}

/// A pivot vector in the library's integer width, converted from/to the caller's.
struct PivBuf<I: FInt> {
    user: Piv,
    tmp: Vec<I>,
    direct: bool,
}

impl<I: FInt> PivBuf<I> {
    /// # Safety
    /// `user` must point to `len` integers.
    unsafe fn new(user: Piv, len: usize, input: bool) -> PivBuf<I> {
        let direct = matches!(
            (user, std::mem::size_of::<I>()),
            (Piv::I32(_), 4) | (Piv::I64(_), 8)
        );
        let mut tmp = Vec::new();
        if !direct {
            tmp = vec![I::from_usize(0); len];
            if input {
                for (j, t) in tmp.iter_mut().enumerate() {
                    // SAFETY: the caller guarantees `len` readable integers.
                    *t = I::from_i64(unsafe {
                        match user {
                            Piv::I32(p) => *p.add(j) as i64,
                            Piv::I64(p) => *p.add(j),
                        }
                    });
                }
            }
        }
        PivBuf { user, tmp, direct }
    }

    fn ptr(&mut self) -> *mut I {
        if self.direct {
            match self.user {
                Piv::I32(p) => p as *mut I,
                Piv::I64(p) => p as *mut I,
            }
        } else {
            self.tmp.as_mut_ptr()
        }
    }

    /// Copies the pivots back when a temporary was used.
    unsafe fn finish(&mut self) {
        if self.direct {
            return;
        }
        for (j, t) in self.tmp.iter().enumerate() {
            // SAFETY: `new`'s contract: `len` writable integers.
            unsafe {
                match self.user {
                    Piv::I32(p) => *p.add(j) = t.to_i64() as i32,
                    Piv::I64(p) => *p.add(j) = t.to_i64(),
                }
            }
        }
    }
}
