//! What each routine's arguments mean, written once per routine: the shape the shim's fast path
//! compares, the parse of a call's arguments into an [`Op`], and the reverse, the arguments of
//! an [`Op`] filled from a [`Store`] (values and LAPACK workspace) for a CPU library.

use super::store::IntDir;
use super::{args, Prototype, Store, P};
use crate::call::{HostMat, Op, Piv, Scalar};
use crate::cpu::FInt;
use crate::ops::{Diag, EigRange, Precision, Shape, Side, SvdJob, Trans, Uplo};
use crate::stats::Reason;

/// A routine's argument struct: its meaning (see the module docs).
pub trait Marshal: Prototype {
    /// The sizes for the fast path, reading only the dimensions; `None` when one is negative
    /// (the library reports that its own way).
    ///
    /// # Safety
    /// The arguments follow the routine's Fortran contract with integers of type `I`.
    unsafe fn shape<I: FInt>(&self) -> Option<Shape>;

    /// The operation these arguments describe, or why the call is left to the library as
    /// passed (invalid characters or dimensions, a workspace query).
    ///
    /// # Safety
    /// As for [`Marshal::shape`].
    unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason>;

    /// LAPACK's `info` argument (null for BLAS routines).
    fn info(&self) -> P;

    /// The arguments of `op` for a library with integers of type `I`, values and workspace
    /// from `st`; `None` when `op` is another routine's.
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self>;

    /// The workspace arrays a query writes its answer into: `work`, `rwork`, `iwork` (null where
    /// the routine has none).
    fn workspace(&self) -> [P; 3] {
        [std::ptr::null_mut(); 3]
    }

    /// The workspace arguments, mutable: arrays (`work`, `rwork`, `iwork`), their length
    /// arguments (`lwork`, `lrwork`, `liwork`; `None` where the routine has none, or where
    /// the array's length is fixed by the dimensions) and `info` (the shim's workspace query
    /// on the caller's behalf redirects them).
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        None
    }

    /// Answers a workspace query with the minimum (1 element of each array): used where no
    /// library can answer it and the call will run with workspace of its own.
    ///
    /// # Safety
    /// The arguments follow the routine's Fortran contract with integers of type `I`.
    unsafe fn answer_query<I: FInt>(&self, p: Precision) {
        let [w, r, i] = self.workspace();
        // SAFETY: (whole block) a workspace query's arrays hold at least one element.
        unsafe {
            for (ptr, real) in [(w, true), (r, p.is_complex())] {
                if ptr.is_null() || !real {
                    continue;
                }
                if p.real_size() == 4 {
                    *(ptr as *mut f32) = 1.0;
                } else {
                    *(ptr as *mut f64) = 1.0;
                }
            }
            if !i.is_null() {
                *(i as *mut I) = I::from_usize(1);
            }
        }
    }
}

/// A routine's workspace arguments (see [`Marshal::workspace_mut`]).
pub struct WsMut<'a> {
    /// `work`, `rwork`, `iwork` (a field that is null in this call, such as a real call's
    /// `rwork`, stays null).
    pub arrays: [Option<&'a mut P>; 3],
    /// `lwork`, `lrwork`, `liwork`.
    pub lens: [Option<&'a mut P>; 3],
    /// `info`.
    pub info: &'a mut P,
}

#[inline(always)]
unsafe fn int<I: FInt>(p: P) -> i64 {
    // SAFETY: Fortran contract: an integer argument points to an integer of width `I`.
    unsafe { (*(p as *const I)).to_i64() }
}

/// Reads dimensions; `None` when one is negative.
#[inline(always)]
unsafe fn dims<I: FInt, const N: usize>(ps: [P; N]) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    for (o, p) in out.iter_mut().zip(ps) {
        // SAFETY: forwarded.
        let v = unsafe { int::<I>(p) };
        if v < 0 {
            return None;
        }
        *o = v as u64;
    }
    Some(out)
}

#[inline]
unsafe fn dim<I: FInt>(p: P) -> Result<usize, Reason> {
    // SAFETY: forwarded.
    let v = unsafe { int::<I>(p) };
    usize::try_from(v).map_err(|_| Reason::InvalidArgs)
}

#[inline(always)]
unsafe fn chr(p: P) -> u8 {
    // SAFETY: Fortran contract: a character argument points to at least one byte.
    unsafe { *(p as *const u8) }
}

fn bad<T>(v: Option<T>) -> Result<T, Reason> {
    v.ok_or(Reason::InvalidArgs)
}

unsafe fn trans(p: P) -> Result<Trans, Reason> {
    // SAFETY: forwarded.
    bad(Trans::from_char(unsafe { chr(p) }))
}
unsafe fn uplo(p: P) -> Result<Uplo, Reason> {
    // SAFETY: forwarded.
    bad(Uplo::from_char(unsafe { chr(p) }))
}
unsafe fn side(p: P) -> Result<Side, Reason> {
    // SAFETY: forwarded.
    bad(Side::from_char(unsafe { chr(p) }))
}
unsafe fn diag(p: P) -> Result<Diag, Reason> {
    // SAFETY: forwarded.
    bad(Diag::from_char(unsafe { chr(p) }))
}
unsafe fn job_v(p: P) -> Result<bool, Reason> {
    // SAFETY: forwarded.
    match unsafe { chr(p) }.to_ascii_uppercase() {
        b'N' => Ok(false),
        b'V' => Ok(true),
        _ => Err(Reason::InvalidArgs),
    }
}

/// True for side `'R'` (the fast path reads it without validating: an invalid side is caught by
/// the parse, or by the library for small calls).
#[inline(always)]
unsafe fn right(p: P) -> bool {
    // SAFETY: forwarded.
    matches!(unsafe { chr(p) }, b'R' | b'r')
}

/// A real argument in the precision's real width.
unsafe fn real(p: P, prec: Precision) -> f64 {
    // SAFETY: Fortran contract: a real argument points to a real of the precision's width.
    unsafe {
        if prec.real_size() == 4 {
            *(p as *const f32) as f64
        } else {
            *(p as *const f64)
        }
    }
}

unsafe fn scalar(p: P, bytes: usize) -> Scalar {
    // SAFETY: Fortran contract: a scalar argument points to a value of `bytes` bytes.
    unsafe { Scalar::read(p as *const u8, bytes) }
}

#[inline]
fn mat(p: P, rows: usize, cols: usize, ld: i64) -> HostMat {
    HostMat::new(p as *mut u8, rows, cols, ld.max(0) as usize)
}

#[inline]
fn ints<I: FInt>(p: P) -> Piv {
    if std::mem::size_of::<I>() == 4 {
        Piv::I32(p as *mut i32)
    } else {
        Piv::I64(p as *mut i64)
    }
}

fn lwork_query<I: FInt>(ps: &[P]) -> Result<(), Reason> {
    for &p in ps {
        // SAFETY: the callers pass workspace-length arguments of the routine's contract.
        if !p.is_null() && unsafe { int::<I>(p) } == -1 {
            return Err(Reason::WorkspaceQuery);
        }
    }
    Ok(())
}

impl Marshal for args::Gemm {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [m, n, k] = unsafe { dims::<I, 3>([self.m, self.n, self.k]) }?;
        Some(Self::ROUTINE.shape(m, n, k, false))
    }
    unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason> {
        // SAFETY: (whole body) Fortran contract of ?gemm.
        unsafe {
            let (ta, tb) = (trans(self.transa)?, trans(self.transb)?);
            let (m, n, k) = (dim::<I>(self.m)?, dim::<I>(self.n)?, dim::<I>(self.k)?);
            let (ar, ac) = if ta == Trans::No { (m, k) } else { (k, m) };
            let (br, bc) = if tb == Trans::No { (k, n) } else { (n, k) };
            Ok(Op::Gemm {
                ta,
                tb,
                m,
                n,
                k,
                alpha: scalar(self.alpha, p.size()),
                a: mat(self.a, ar, ac, int::<I>(self.lda)),
                b: mat(self.b, br, bc, int::<I>(self.ldb)),
                beta: scalar(self.beta, p.size()),
                c: mat(self.c, m, n, int::<I>(self.ldc)),
            })
        }
    }
    fn info(&self) -> P {
        std::ptr::null_mut()
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Gemm {
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
        } = op
        else {
            return None;
        };
        Some(args::Gemm {
            transa: st.ch(ta.to_char()),
            transb: st.ch(tb.to_char()),
            m: st.int(*m),
            n: st.int(*n),
            k: st.int(*k),
            alpha: st.scalar(alpha),
            a: st.data(a),
            lda: st.ld(a),
            b: st.data(b),
            ldb: st.ld(b),
            beta: st.scalar(beta),
            c: st.data(c),
            ldc: st.ld(c),
            ..Self::blank()
        })
    }
}

/// symm and hemm: the same arguments.
macro_rules! sided_mm {
    ($A:ident, $V:ident) => {
        impl Marshal for args::$A {
            unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
                // SAFETY: forwarded.
                unsafe {
                    let [m, n] = dims::<I, 2>([self.m, self.n])?;
                    Some(Self::ROUTINE.shape(m, n, 0, !right(self.side)))
                }
            }
            unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason> {
                // SAFETY: (whole body) Fortran contract of the routine.
                unsafe {
                    let (sd, ul) = (side(self.side)?, uplo(self.uplo)?);
                    let (m, n) = (dim::<I>(self.m)?, dim::<I>(self.n)?);
                    let ka = if sd == Side::Left { m } else { n };
                    Ok(Op::$V {
                        side: sd,
                        uplo: ul,
                        m,
                        n,
                        alpha: scalar(self.alpha, p.size()),
                        a: mat(self.a, ka, ka, int::<I>(self.lda)),
                        b: mat(self.b, m, n, int::<I>(self.ldb)),
                        beta: scalar(self.beta, p.size()),
                        c: mat(self.c, m, n, int::<I>(self.ldc)),
                    })
                }
            }
            fn info(&self) -> P {
                std::ptr::null_mut()
            }
            fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
                let Op::$V {
                    side,
                    uplo,
                    m,
                    n,
                    alpha,
                    a,
                    b,
                    beta,
                    c,
                } = op
                else {
                    return None;
                };
                Some(args::$A {
                    side: st.ch(side.to_char()),
                    uplo: st.ch(uplo.to_char()),
                    m: st.int(*m),
                    n: st.int(*n),
                    alpha: st.scalar(alpha),
                    a: st.data(a),
                    lda: st.ld(a),
                    b: st.data(b),
                    ldb: st.ld(b),
                    beta: st.scalar(beta),
                    c: st.data(c),
                    ldc: st.ld(c),
                    ..Self::blank()
                })
            }
        }
    };
}
sided_mm!(Symm, Symm);
sided_mm!(Hemm, Hemm);

/// syrk and herk: the same arguments; herk's alpha and beta are reals.
macro_rules! rank_k {
    ($A:ident, $V:ident, $real_scalars:expr) => {
        impl Marshal for args::$A {
            unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
                // SAFETY: forwarded.
                let [n, k] = unsafe { dims::<I, 2>([self.n, self.k]) }?;
                Some(Self::ROUTINE.shape(1, n, k, false))
            }
            unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason> {
                let bytes = if $real_scalars {
                    p.real_size()
                } else {
                    p.size()
                };
                // SAFETY: (whole body) Fortran contract of the routine.
                unsafe {
                    let (ul, t) = (uplo(self.uplo)?, trans(self.trans)?);
                    let (n, k) = (dim::<I>(self.n)?, dim::<I>(self.k)?);
                    let (ar, ac) = if t == Trans::No { (n, k) } else { (k, n) };
                    Ok(Op::$V {
                        uplo: ul,
                        trans: t,
                        n,
                        k,
                        alpha: scalar(self.alpha, bytes),
                        a: mat(self.a, ar, ac, int::<I>(self.lda)),
                        beta: scalar(self.beta, bytes),
                        c: mat(self.c, n, n, int::<I>(self.ldc)),
                    })
                }
            }
            fn info(&self) -> P {
                std::ptr::null_mut()
            }
            fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
                let Op::$V {
                    uplo,
                    trans,
                    n,
                    k,
                    alpha,
                    a,
                    beta,
                    c,
                } = op
                else {
                    return None;
                };
                Some(args::$A {
                    uplo: st.ch(uplo.to_char()),
                    trans: st.ch(trans.to_char()),
                    n: st.int(*n),
                    k: st.int(*k),
                    alpha: st.scalar(alpha),
                    a: st.data(a),
                    lda: st.ld(a),
                    beta: st.scalar(beta),
                    c: st.data(c),
                    ldc: st.ld(c),
                    ..Self::blank()
                })
            }
        }
    };
}
rank_k!(Syrk, Syrk, false);
rank_k!(Herk, Herk, true);

/// trsm and trmm: the same arguments.
macro_rules! sided_tri {
    ($A:ident, $V:ident) => {
        impl Marshal for args::$A {
            unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
                // SAFETY: forwarded.
                unsafe {
                    let [m, n] = dims::<I, 2>([self.m, self.n])?;
                    Some(Self::ROUTINE.shape(m, n, 0, !right(self.side)))
                }
            }
            unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason> {
                // SAFETY: (whole body) Fortran contract of the routine.
                unsafe {
                    let (sd, ul) = (side(self.side)?, uplo(self.uplo)?);
                    let (t, dg) = (trans(self.transa)?, diag(self.diag)?);
                    let (m, n) = (dim::<I>(self.m)?, dim::<I>(self.n)?);
                    let ka = if sd == Side::Left { m } else { n };
                    Ok(Op::$V {
                        side: sd,
                        uplo: ul,
                        ta: t,
                        diag: dg,
                        m,
                        n,
                        alpha: scalar(self.alpha, p.size()),
                        a: mat(self.a, ka, ka, int::<I>(self.lda)),
                        b: mat(self.b, m, n, int::<I>(self.ldb)),
                    })
                }
            }
            fn info(&self) -> P {
                std::ptr::null_mut()
            }
            fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
                let Op::$V {
                    side,
                    uplo,
                    ta,
                    diag,
                    m,
                    n,
                    alpha,
                    a,
                    b,
                } = op
                else {
                    return None;
                };
                Some(args::$A {
                    side: st.ch(side.to_char()),
                    uplo: st.ch(uplo.to_char()),
                    transa: st.ch(ta.to_char()),
                    diag: st.ch(diag.to_char()),
                    m: st.int(*m),
                    n: st.int(*n),
                    alpha: st.scalar(alpha),
                    a: st.data(a),
                    lda: st.ld(a),
                    b: st.data(b),
                    ldb: st.ld(b),
                    ..Self::blank()
                })
            }
        }
    };
}
sided_tri!(Trsm, Trsm);
sided_tri!(Trmm, Trmm);

impl Marshal for args::Getrf {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [m, n] = unsafe { dims::<I, 2>([self.m, self.n]) }?;
        Some(Self::ROUTINE.shape(m, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        // SAFETY: Fortran contract of ?getrf.
        unsafe {
            let (m, n) = (dim::<I>(self.m)?, dim::<I>(self.n)?);
            Ok(Op::Getrf {
                m,
                n,
                a: mat(self.a, m, n, int::<I>(self.lda)),
                ipiv: ints::<I>(self.ipiv),
            })
        }
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Getrf { m, n, a, ipiv } = op else {
            return None;
        };
        Some(args::Getrf {
            m: st.int(*m),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            // SAFETY: the call's contract: ipiv holds min(m, n) integers.
            ipiv: unsafe { st.ints(*ipiv, (*m).min(*n), IntDir::Out) },
            info: st.info(),
        })
    }
}

impl Marshal for args::Getrs {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n, r] = unsafe { dims::<I, 2>([self.n, self.nrhs]) }?;
        Some(Self::ROUTINE.shape(1, n, r, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        // SAFETY: Fortran contract of ?getrs.
        unsafe {
            let t = trans(self.trans)?;
            let (n, r) = (dim::<I>(self.n)?, dim::<I>(self.nrhs)?);
            Ok(Op::Getrs {
                trans: t,
                n,
                nrhs: r,
                a: mat(self.a, n, n, int::<I>(self.lda)),
                ipiv: ints::<I>(self.ipiv),
                b: mat(self.b, n, r, int::<I>(self.ldb)),
            })
        }
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Getrs {
            trans,
            n,
            nrhs,
            a,
            ipiv,
            b,
        } = op
        else {
            return None;
        };
        Some(args::Getrs {
            trans: st.ch(trans.to_char()),
            n: st.int(*n),
            nrhs: st.int(*nrhs),
            a: st.data(a),
            lda: st.ld(a),
            // SAFETY: the call's contract: ipiv holds n integers.
            ipiv: unsafe { st.ints(*ipiv, *n, IntDir::In) },
            b: st.data(b),
            ldb: st.ld(b),
            info: st.info(),
            ..Self::blank()
        })
    }
}

impl Marshal for args::Gesv {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n, r] = unsafe { dims::<I, 2>([self.n, self.nrhs]) }?;
        Some(Self::ROUTINE.shape(1, n, r, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        // SAFETY: Fortran contract of ?gesv.
        unsafe {
            let (n, r) = (dim::<I>(self.n)?, dim::<I>(self.nrhs)?);
            Ok(Op::Gesv {
                n,
                nrhs: r,
                a: mat(self.a, n, n, int::<I>(self.lda)),
                ipiv: ints::<I>(self.ipiv),
                b: mat(self.b, n, r, int::<I>(self.ldb)),
            })
        }
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Gesv {
            n,
            nrhs,
            a,
            ipiv,
            b,
        } = op
        else {
            return None;
        };
        Some(args::Gesv {
            n: st.int(*n),
            nrhs: st.int(*nrhs),
            a: st.data(a),
            lda: st.ld(a),
            // SAFETY: the call's contract: ipiv holds n integers.
            ipiv: unsafe { st.ints(*ipiv, *n, IntDir::Out) },
            b: st.data(b),
            ldb: st.ld(b),
            info: st.info(),
        })
    }
}

impl Marshal for args::Getri {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n] = unsafe { dims::<I, 1>([self.n]) }?;
        Some(Self::ROUTINE.shape(1, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        lwork_query::<I>(&[self.lwork])?;
        // SAFETY: Fortran contract of ?getri.
        unsafe {
            let n = dim::<I>(self.n)?;
            Ok(Op::Getri {
                n,
                a: mat(self.a, n, n, int::<I>(self.lda)),
                ipiv: ints::<I>(self.ipiv),
            })
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [Some(&mut self.work), None, None],
            lens: [Some(&mut self.lwork), None, None],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, std::ptr::null_mut(), std::ptr::null_mut()]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Getri { n, a, ipiv } = op else {
            return None;
        };
        let (work, lwork) = st.work();
        Some(args::Getri {
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            // SAFETY: the call's contract: ipiv holds n integers.
            ipiv: unsafe { st.ints(*ipiv, *n, IntDir::In) },
            work,
            lwork,
            info: st.info(),
        })
    }
}

impl Marshal for args::Potrf {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n] = unsafe { dims::<I, 1>([self.n]) }?;
        Some(Self::ROUTINE.shape(1, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        // SAFETY: Fortran contract of ?potrf.
        unsafe {
            let (ul, n) = (uplo(self.uplo)?, dim::<I>(self.n)?);
            Ok(Op::Potrf {
                uplo: ul,
                n,
                a: mat(self.a, n, n, int::<I>(self.lda)),
            })
        }
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Potrf { uplo, n, a } = op else {
            return None;
        };
        Some(args::Potrf {
            uplo: st.ch(uplo.to_char()),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            info: st.info(),
            ..Self::blank()
        })
    }
}

impl Marshal for args::Potri {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n] = unsafe { dims::<I, 1>([self.n]) }?;
        Some(Self::ROUTINE.shape(1, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        // SAFETY: Fortran contract of ?potri.
        unsafe {
            let (ul, n) = (uplo(self.uplo)?, dim::<I>(self.n)?);
            Ok(Op::Potri {
                uplo: ul,
                n,
                a: mat(self.a, n, n, int::<I>(self.lda)),
            })
        }
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Potri { uplo, n, a } = op else {
            return None;
        };
        Some(args::Potri {
            uplo: st.ch(uplo.to_char()),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            info: st.info(),
            ..Self::blank()
        })
    }
}

/// potrs and posv: the same arguments.
macro_rules! chol_solve {
    ($A:ident, $V:ident) => {
        impl Marshal for args::$A {
            unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
                // SAFETY: forwarded.
                let [n, r] = unsafe { dims::<I, 2>([self.n, self.nrhs]) }?;
                Some(Self::ROUTINE.shape(1, n, r, false))
            }
            unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
                // SAFETY: Fortran contract of the routine.
                unsafe {
                    let ul = uplo(self.uplo)?;
                    let (n, r) = (dim::<I>(self.n)?, dim::<I>(self.nrhs)?);
                    Ok(Op::$V {
                        uplo: ul,
                        n,
                        nrhs: r,
                        a: mat(self.a, n, n, int::<I>(self.lda)),
                        b: mat(self.b, n, r, int::<I>(self.ldb)),
                    })
                }
            }
            fn info(&self) -> P {
                self.info
            }
            fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
                let Op::$V {
                    uplo,
                    n,
                    nrhs,
                    a,
                    b,
                } = op
                else {
                    return None;
                };
                Some(args::$A {
                    uplo: st.ch(uplo.to_char()),
                    n: st.int(*n),
                    nrhs: st.int(*nrhs),
                    a: st.data(a),
                    lda: st.ld(a),
                    b: st.data(b),
                    ldb: st.ld(b),
                    info: st.info(),
                    ..Self::blank()
                })
            }
        }
    };
}
chol_solve!(Potrs, Potrs);
chol_solve!(Posv, Posv);

impl Marshal for args::Trtrs {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n, r] = unsafe { dims::<I, 2>([self.n, self.nrhs]) }?;
        Some(Self::ROUTINE.shape(1, n, r, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        // SAFETY: Fortran contract of ?trtrs.
        unsafe {
            let (ul, t, dg) = (uplo(self.uplo)?, trans(self.trans)?, diag(self.diag)?);
            let (n, r) = (dim::<I>(self.n)?, dim::<I>(self.nrhs)?);
            Ok(Op::Trtrs {
                uplo: ul,
                trans: t,
                diag: dg,
                n,
                nrhs: r,
                a: mat(self.a, n, n, int::<I>(self.lda)),
                b: mat(self.b, n, r, int::<I>(self.ldb)),
            })
        }
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Trtrs {
            uplo,
            trans,
            diag,
            n,
            nrhs,
            a,
            b,
        } = op
        else {
            return None;
        };
        Some(args::Trtrs {
            uplo: st.ch(uplo.to_char()),
            trans: st.ch(trans.to_char()),
            diag: st.ch(diag.to_char()),
            n: st.int(*n),
            nrhs: st.int(*nrhs),
            a: st.data(a),
            lda: st.ld(a),
            b: st.data(b),
            ldb: st.ld(b),
            info: st.info(),
            ..Self::blank()
        })
    }
}

/// The [`Op::Syevd`] of a `syev`/`heev` or `syevd`/`heevd` call (`routine`): the two drivers
/// share their leading arguments.
///
/// # Safety
/// The pointers are the call's Fortran arguments (the routine's contract).
unsafe fn eigen_op<I: FInt>(
    routine: crate::ops::Routine,
    jobz: P,
    ul: P,
    n: P,
    a: P,
    lda: P,
    w: P,
) -> Result<Op, Reason> {
    // SAFETY: forwarded.
    unsafe {
        let (v, ul, n) = (job_v(jobz)?, uplo(ul)?, dim::<I>(n)?);
        Ok(Op::Syevd {
            routine,
            vectors: v,
            uplo: ul,
            n,
            a: mat(a, n, n, int::<I>(lda)),
            w: w as *mut u8,
        })
    }
}

impl Marshal for args::Syev {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n] = unsafe { dims::<I, 1>([self.n]) }?;
        Some(Self::ROUTINE.shape(1, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        // heev's rwork has a fixed length (3n - 2): only lwork can be a query
        lwork_query::<I>(&[self.lwork])?;
        // SAFETY: Fortran contract of ?syev / ?heev.
        unsafe {
            eigen_op::<I>(
                crate::ops::Routine::Syev,
                self.jobz,
                self.uplo,
                self.n,
                self.a,
                self.lda,
                self.w,
            )
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [Some(&mut self.work), Some(&mut self.rwork), None],
            lens: [Some(&mut self.lwork), None, None],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, self.rwork, std::ptr::null_mut()]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Syevd {
            routine: crate::ops::Routine::Syev,
            vectors,
            uplo,
            n,
            a,
            w,
        } = op
        else {
            return None;
        };
        let (work, lwork) = st.work();
        let rwork = if st.prec().is_complex() {
            // LAPACK: rwork of max(1, 3n - 2) reals, no query
            st.fixed((3 * *n).saturating_sub(2).max(1), st.real_size())
        } else {
            std::ptr::null_mut()
        };
        Some(args::Syev {
            jobz: st.ch(if *vectors { b'V' } else { b'N' }),
            uplo: st.ch(uplo.to_char()),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            w: st.ptr(*w),
            work,
            lwork,
            rwork,
            info: st.info(),
            ..Self::blank()
        })
    }
}

impl Marshal for args::Syevd {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n] = unsafe { dims::<I, 1>([self.n]) }?;
        Some(Self::ROUTINE.shape(1, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason> {
        let lr = if p.is_complex() {
            self.lrwork
        } else {
            std::ptr::null_mut()
        };
        lwork_query::<I>(&[self.lwork, self.liwork, lr])?;
        // SAFETY: Fortran contract of ?syevd / ?heevd.
        unsafe {
            eigen_op::<I>(
                crate::ops::Routine::Syevd,
                self.jobz,
                self.uplo,
                self.n,
                self.a,
                self.lda,
                self.w,
            )
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [
                Some(&mut self.work),
                Some(&mut self.rwork),
                Some(&mut self.iwork),
            ],
            lens: [
                Some(&mut self.lwork),
                Some(&mut self.lrwork),
                Some(&mut self.liwork),
            ],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, self.rwork, self.iwork]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Syevd {
            routine: crate::ops::Routine::Syevd,
            vectors,
            uplo,
            n,
            a,
            w,
        } = op
        else {
            return None;
        };
        let (work, lwork) = st.work();
        let (rwork, lrwork) = if st.prec().is_complex() {
            st.rwork()
        } else {
            (std::ptr::null_mut(), std::ptr::null_mut())
        };
        let (iwork, liwork) = st.iwork();
        Some(args::Syevd {
            jobz: st.ch(if *vectors { b'V' } else { b'N' }),
            uplo: st.ch(uplo.to_char()),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            w: st.ptr(*w),
            work,
            lwork,
            rwork,
            lrwork,
            iwork,
            liwork,
            info: st.info(),
            ..Self::blank()
        })
    }
}

impl Marshal for args::Syevr {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [n] = unsafe { dims::<I, 1>([self.n]) }?;
        Some(Self::ROUTINE.shape(1, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason> {
        let lr = if p.is_complex() {
            self.lrwork
        } else {
            std::ptr::null_mut()
        };
        lwork_query::<I>(&[self.lwork, self.liwork, lr])?;
        // SAFETY: Fortran contract of ?syevr / ?heevr (vl/vu are read only for range 'V',
        // il/iu only for 'I', as LAPACK references them).
        unsafe {
            let (v, ul, n) = (job_v(self.jobz)?, uplo(self.uplo)?, dim::<I>(self.n)?);
            let range = match chr(self.range).to_ascii_uppercase() {
                b'A' => EigRange::All,
                b'V' => EigRange::Values {
                    vl: real(self.vl, p),
                    vu: real(self.vu, p),
                },
                b'I' => EigRange::Index {
                    il: dim::<I>(self.il)?,
                    iu: dim::<I>(self.iu)?,
                },
                _ => return Err(Reason::InvalidArgs),
            };
            let zcols = match range {
                EigRange::Index { il, iu } => (iu + 1).saturating_sub(il),
                _ => n,
            };
            let z = if v {
                mat(self.z, n, zcols, int::<I>(self.ldz))
            } else {
                mat(std::ptr::null_mut(), 0, 0, int::<I>(self.ldz))
            };
            Ok(Op::Syevr {
                vectors: v,
                range,
                uplo: ul,
                n,
                a: mat(self.a, n, n, int::<I>(self.lda)),
                abstol: real(self.abstol, p),
                found: ints::<I>(self.m),
                w: self.w as *mut u8,
                z,
                isuppz: ints::<I>(self.isuppz),
            })
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [
                Some(&mut self.work),
                Some(&mut self.rwork),
                Some(&mut self.iwork),
            ],
            lens: [
                Some(&mut self.lwork),
                Some(&mut self.lrwork),
                Some(&mut self.liwork),
            ],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, self.rwork, self.iwork]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Syevr {
            vectors,
            range,
            uplo,
            n,
            a,
            abstol,
            found,
            w,
            z,
            isuppz,
        } = op
        else {
            return None;
        };
        let (vl, vu, il, iu) = match *range {
            EigRange::All => (0.0, 0.0, 1, (*n).max(1)),
            EigRange::Values { vl, vu } => (vl, vu, 1, (*n).max(1)),
            EigRange::Index { il, iu } => (0.0, 0.0, il, iu),
        };
        let (work, lwork) = st.work();
        let (rwork, lrwork) = if st.prec().is_complex() {
            st.rwork()
        } else {
            (std::ptr::null_mut(), std::ptr::null_mut())
        };
        let (iwork, liwork) = st.iwork();
        Some(args::Syevr {
            jobz: st.ch(if *vectors { b'V' } else { b'N' }),
            range: st.ch(range.to_char()),
            uplo: st.ch(uplo.to_char()),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            vl: st.real(vl),
            vu: st.real(vu),
            il: st.int(il),
            iu: st.int(iu),
            abstol: st.real(*abstol),
            // SAFETY: the call's contract: `found` is one integer, isuppz 2 * max(1, n).
            m: unsafe { st.ints(*found, 1, IntDir::Out) },
            w: st.ptr(*w),
            z: st.data(z),
            ldz: st.ld(z),
            // SAFETY: as above.
            isuppz: unsafe { st.ints(*isuppz, 2 * (*n).max(1), IntDir::Out) },
            work,
            lwork,
            rwork,
            lrwork,
            iwork,
            liwork,
            info: st.info(),
            ..Self::blank()
        })
    }
}

/// The U and VT matrices of an SVD as the jobs define them.
fn svd_mats(
    ju: SvdJob,
    jv: SvdJob,
    m: usize,
    n: usize,
    u: (P, i64),
    vt: (P, i64),
) -> (HostMat, HostMat) {
    let mn = m.min(n);
    let ucols = match ju {
        SvdJob::Thin => mn,
        SvdJob::Full => m,
        _ => 0,
    };
    let vtrows = match jv {
        SvdJob::Thin => mn,
        SvdJob::Full => n,
        _ => 0,
    };
    (mat(u.0, m, ucols, u.1), mat(vt.0, vtrows, n, vt.1))
}

/// Length of the complex SVDs' `rwork` (LAPACK's documented minimum).
fn svd_rwork(gesdd: bool, job_none: bool, m: usize, n: usize) -> usize {
    let (mn, mx) = (m.min(n), m.max(n));
    if !gesdd {
        5 * mn
    } else if job_none {
        7 * mn
    } else {
        (5 * mn * mn + 5 * mn).max(2 * mx * mn + 2 * mn * mn + mn)
    }
}

impl Marshal for args::Gesdd {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [m, n] = unsafe { dims::<I, 2>([self.m, self.n]) }?;
        Some(Self::ROUTINE.shape(m, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        lwork_query::<I>(&[self.lwork])?;
        // SAFETY: Fortran contract of ?gesdd.
        unsafe {
            let job = bad(SvdJob::from_char(chr(self.jobz)))?;
            let (m, n) = (dim::<I>(self.m)?, dim::<I>(self.n)?);
            let (u, vt) = svd_mats(
                job,
                job,
                m,
                n,
                (self.u, int::<I>(self.ldu)),
                (self.vt, int::<I>(self.ldvt)),
            );
            Ok(Op::Svd {
                routine: crate::ops::Routine::Gesdd,
                jobu: job,
                jobvt: job,
                m,
                n,
                a: mat(self.a, m, n, int::<I>(self.lda)),
                s: self.s as *mut u8,
                u,
                vt,
            })
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [
                Some(&mut self.work),
                Some(&mut self.rwork),
                Some(&mut self.iwork),
            ],
            lens: [Some(&mut self.lwork), None, None],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, std::ptr::null_mut(), std::ptr::null_mut()]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Svd {
            routine: crate::ops::Routine::Gesdd,
            jobu,
            m,
            n,
            a,
            s,
            u,
            vt,
            ..
        } = op
        else {
            return None;
        };
        let (work, lwork) = st.work();
        let rwork = if st.prec().is_complex() {
            let len = svd_rwork(true, *jobu == SvdJob::None, *m, *n);
            st.fixed(len, st.real_size())
        } else {
            std::ptr::null_mut()
        };
        let iwork = st.fixed(8 * (*m).min(*n), st.int_size());
        Some(args::Gesdd {
            jobz: st.ch(jobu.to_char()),
            m: st.int(*m),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            s: st.ptr(*s),
            u: st.data(u),
            ldu: st.ld(u),
            vt: st.data(vt),
            ldvt: st.ld(vt),
            work,
            lwork,
            rwork,
            iwork,
            info: st.info(),
            ..Self::blank()
        })
    }
}

impl Marshal for args::Gesvd {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [m, n] = unsafe { dims::<I, 2>([self.m, self.n]) }?;
        Some(Self::ROUTINE.shape(m, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        lwork_query::<I>(&[self.lwork])?;
        // SAFETY: Fortran contract of ?gesvd.
        unsafe {
            let ju = bad(SvdJob::from_char(chr(self.jobu)))?;
            let jv = bad(SvdJob::from_char(chr(self.jobvt)))?;
            let (m, n) = (dim::<I>(self.m)?, dim::<I>(self.n)?);
            let (u, vt) = svd_mats(
                ju,
                jv,
                m,
                n,
                (self.u, int::<I>(self.ldu)),
                (self.vt, int::<I>(self.ldvt)),
            );
            Ok(Op::Svd {
                routine: crate::ops::Routine::Gesvd,
                jobu: ju,
                jobvt: jv,
                m,
                n,
                a: mat(self.a, m, n, int::<I>(self.lda)),
                s: self.s as *mut u8,
                u,
                vt,
            })
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [Some(&mut self.work), Some(&mut self.rwork), None],
            lens: [Some(&mut self.lwork), None, None],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, std::ptr::null_mut(), std::ptr::null_mut()]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Svd {
            routine: crate::ops::Routine::Gesvd,
            jobu,
            jobvt,
            m,
            n,
            a,
            s,
            u,
            vt,
        } = op
        else {
            return None;
        };
        let (work, lwork) = st.work();
        let rwork = if st.prec().is_complex() {
            st.fixed(svd_rwork(false, false, *m, *n), st.real_size())
        } else {
            std::ptr::null_mut()
        };
        Some(args::Gesvd {
            jobu: st.ch(jobu.to_char()),
            jobvt: st.ch(jobvt.to_char()),
            m: st.int(*m),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            s: st.ptr(*s),
            u: st.data(u),
            ldu: st.ld(u),
            vt: st.data(vt),
            ldvt: st.ld(vt),
            work,
            lwork,
            rwork,
            info: st.info(),
            ..Self::blank()
        })
    }
}

/// gelsd's minimum `iwork` and complex `rwork` lengths (LAPACK's formulas with SMLSIZ = 25),
/// used when the workspace query does not report them.
fn gelsd_min(m: usize, n: usize, nrhs: usize) -> (usize, usize) {
    let mn = m.min(n).max(1);
    let smlsiz = 25usize;
    let nlvl = ((mn as f64 / (smlsiz + 1) as f64).log2().floor() as i64 + 1).max(0) as usize;
    let liwork = (3 * mn * nlvl + 11 * mn).max(1);
    let lrwork = 10 * mn
        + 2 * mn * smlsiz
        + 8 * mn * nlvl
        + 3 * smlsiz * nrhs
        + ((smlsiz + 1) * (smlsiz + 1)).max(n * (1 + nrhs) + 2 * nrhs);
    (liwork, lrwork)
}

impl Marshal for args::Gelsd {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [m, n, r] = unsafe { dims::<I, 3>([self.m, self.n, self.nrhs]) }?;
        Some(Self::ROUTINE.shape(m, n, r, false))
    }
    unsafe fn parse<I: FInt>(&self, p: Precision) -> Result<Op, Reason> {
        lwork_query::<I>(&[self.lwork])?;
        // SAFETY: Fortran contract of ?gelsd.
        unsafe {
            let (m, n, r) = (dim::<I>(self.m)?, dim::<I>(self.n)?, dim::<I>(self.nrhs)?);
            Ok(Op::Gelsd {
                m,
                n,
                nrhs: r,
                a: mat(self.a, m, n, int::<I>(self.lda)),
                b: mat(self.b, m.max(n), r, int::<I>(self.ldb)),
                s: self.s as *mut u8,
                rcond: real(self.rcond, p),
                rank: ints::<I>(self.rank),
            })
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [
                Some(&mut self.work),
                Some(&mut self.rwork),
                Some(&mut self.iwork),
            ],
            lens: [Some(&mut self.lwork), None, None],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, self.rwork, self.iwork]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Gelsd {
            m,
            n,
            nrhs,
            a,
            b,
            s,
            rcond,
            rank,
        } = op
        else {
            return None;
        };
        let (liw, lrw) = gelsd_min(*m, *n, *nrhs);
        let (work, lwork) = st.work();
        let rwork = if st.prec().is_complex() {
            st.rwork_sized(lrw)
        } else {
            std::ptr::null_mut()
        };
        let iwork = st.iwork_sized(liw);
        Some(args::Gelsd {
            m: st.int(*m),
            n: st.int(*n),
            nrhs: st.int(*nrhs),
            a: st.data(a),
            lda: st.ld(a),
            b: st.data(b),
            ldb: st.ld(b),
            s: st.ptr(*s),
            rcond: st.real(*rcond),
            // SAFETY: the call's contract: rank is one integer.
            rank: unsafe { st.ints(*rank, 1, IntDir::Out) },
            work,
            lwork,
            rwork,
            iwork,
            info: st.info(),
        })
    }
}

impl Marshal for args::Geqrf {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [m, n] = unsafe { dims::<I, 2>([self.m, self.n]) }?;
        Some(Self::ROUTINE.shape(m, n, 1, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        lwork_query::<I>(&[self.lwork])?;
        // SAFETY: Fortran contract of ?geqrf.
        unsafe {
            let (m, n) = (dim::<I>(self.m)?, dim::<I>(self.n)?);
            Ok(Op::Geqrf {
                m,
                n,
                a: mat(self.a, m, n, int::<I>(self.lda)),
                tau: self.tau as *mut u8,
            })
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [Some(&mut self.work), None, None],
            lens: [Some(&mut self.lwork), None, None],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, std::ptr::null_mut(), std::ptr::null_mut()]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Geqrf { m, n, a, tau } = op else {
            return None;
        };
        let (work, lwork) = st.work();
        Some(args::Geqrf {
            m: st.int(*m),
            n: st.int(*n),
            a: st.data(a),
            lda: st.ld(a),
            tau: st.ptr(*tau),
            work,
            lwork,
            info: st.info(),
        })
    }
}

impl Marshal for args::Orgqr {
    unsafe fn shape<I: FInt>(&self) -> Option<Shape> {
        // SAFETY: forwarded.
        let [m, n, k] = unsafe { dims::<I, 3>([self.m, self.n, self.k]) }?;
        Some(Self::ROUTINE.shape(m, n, k, false))
    }
    unsafe fn parse<I: FInt>(&self, _p: Precision) -> Result<Op, Reason> {
        lwork_query::<I>(&[self.lwork])?;
        // SAFETY: Fortran contract of ?orgqr / ?ungqr.
        unsafe {
            let (m, n, k) = (dim::<I>(self.m)?, dim::<I>(self.n)?, dim::<I>(self.k)?);
            Ok(Op::Orgqr {
                m,
                n,
                k,
                a: mat(self.a, m, n, int::<I>(self.lda)),
                tau: self.tau as *mut u8,
            })
        }
    }
    fn workspace_mut(&mut self) -> Option<WsMut<'_>> {
        Some(WsMut {
            arrays: [Some(&mut self.work), None, None],
            lens: [Some(&mut self.lwork), None, None],
            info: &mut self.info,
        })
    }
    fn workspace(&self) -> [P; 3] {
        [self.work, std::ptr::null_mut(), std::ptr::null_mut()]
    }
    fn info(&self) -> P {
        self.info
    }
    fn fill<I: FInt>(op: &Op, st: &mut Store<I>) -> Option<Self> {
        let Op::Orgqr { m, n, k, a, tau } = op else {
            return None;
        };
        let (work, lwork) = st.work();
        Some(args::Orgqr {
            m: st.int(*m),
            n: st.int(*n),
            k: st.int(*k),
            a: st.data(a),
            lda: st.ld(a),
            tau: st.ptr(*tau),
            work,
            lwork,
            info: st.info(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::Case;
    use crate::call::Call;
    use crate::ffi::store::Mode;
    use crate::ffi::{for_routine, Visit};
    use crate::ops::OpKind;

    /// The shape the shim's fast path reads from a routine's Fortran arguments.
    struct FastShape<'a>(&'a Call, bool);

    impl Visit for FastShape<'_> {
        type Out = Option<Shape>;
        fn visit<A: Marshal>(self) -> Option<Shape> {
            fn with<A: Marshal, I: crate::cpu::FInt>(call: &Call) -> Option<Shape> {
                let mut st = Store::<I>::new(call.prec);
                st.begin(Mode::Query);
                let a = A::fill(&call.op, &mut st)?;
                // SAFETY: the arguments were filled from a valid call (the store holds the
                // integers and characters they point to).
                unsafe { a.shape::<I>() }
            }
            if self.1 {
                with::<A, i64>(self.0)
            } else {
                with::<A, i32>(self.0)
            }
        }
    }

    /// The fast path's shape (from the Fortran arguments, both integer widths) is the call's
    /// for every kind and precision: both read one convention per family
    /// (`Routine::shape`).
    #[test]
    fn the_fast_paths_shape_is_the_calls() {
        for kind in OpKind::all() {
            for &p in kind.routine.precisions() {
                for (x1, x2) in [(8.0, 2.0), (33.0, 5.0)] {
                    let mut case = Case::new(kind, p, x1, x2);
                    case.reset();
                    let call = case.call(kind, p, x1, x2);
                    for ilp64 in [false, true] {
                        let fast = for_routine(call.routine(), FastShape(&call, ilp64));
                        assert_eq!(
                            fast,
                            Some(call.shape()),
                            "{kind} {p:?} ({x1}, {x2}) ilp64={ilp64}"
                        );
                    }
                }
            }
        }
    }
}
