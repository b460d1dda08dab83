//! The typed Rust API: BLAS/LAPACK on host slices, through the dispatcher.
//!
//! Matrices are column-major with LAPACK's leading dimensions: element `(i, j)` of A is
//! `a[i + j * lda]`. Every argument is validated (dimensions, leading dimensions, slice lengths,
//! pivot values) before anything runs; a bad one is [`Error::InvalidArgument`] and nothing is
//! written. A positive LAPACK `info` (singular, not positive definite, no convergence) is
//! [`Error::Lapack`]; the outputs then hold what the CPU LAPACK left there.

use crate::call::{info_meaning, Call, HostMat, Op, Piv, Scalar};
use crate::dispatch::{Config, Dispatcher, Outcome};
use crate::error::{Error, Result};
use crate::ops::{Diag, Precision, Routine, Side, SvdJob, Trans, Uplo};
use crate::request::Request;
use std::sync::Arc;

/// A complex number laid out like C's / Fortran's (`re`, `im`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Complex<T> {
    /// Real part.
    pub re: T,
    /// Imaginary part.
    pub im: T,
}

impl<T> Complex<T> {
    /// `re + i im`.
    pub fn new(re: T, im: T) -> Complex<T> {
        Complex { re, im }
    }
}

/// Complex `f32`.
#[allow(non_camel_case_types)]
pub type c32 = Complex<f32>;
/// Complex `f64`.
#[allow(non_camel_case_types)]
pub type c64 = Complex<f64>;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for super::c32 {}
    impl Sealed for super::c64 {}
}

/// The four element types: `f32`, `f64`, [`c32`], [`c64`].
pub trait Element: Copy + Send + Sync + sealed::Sealed + 'static {
    /// The LAPACK precision.
    const PREC: Precision;
    /// The matching real type (eigenvalues, singular values).
    type Real: Copy + Send + Sync + 'static;
}
impl Element for f32 {
    const PREC: Precision = Precision::S;
    type Real = f32;
}
impl Element for f64 {
    const PREC: Precision = Precision::D;
    type Real = f64;
}
impl Element for c32 {
    const PREC: Precision = Precision::C;
    type Real = f32;
}
impl Element for c64 {
    const PREC: Precision = Precision::Z;
    type Real = f64;
}

/// A handle on a dispatcher: the entry point of the typed API.
#[derive(Clone)]
pub struct Offload {
    d: Arc<Dispatcher>,
}

struct V<'a> {
    name: String,
    _p: std::marker::PhantomData<&'a ()>,
}

impl V<'_> {
    fn new(r: Routine, p: Precision) -> Self {
        V {
            name: r.name(p),
            _p: std::marker::PhantomData,
        }
    }
    fn dim(&self, arg: &'static str, x: usize) -> Result<()> {
        if x > i32::MAX as usize {
            return Err(Error::arg(
                &self.name,
                arg,
                format!("{x} exceeds the 32-bit LAPACK limit"),
            ));
        }
        Ok(())
    }
    /// A matrix argument: leading dimension and slice length.
    fn mat<T>(
        &self,
        arg: &'static str,
        lds: &'static str,
        s: &[T],
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Result<HostMat> {
        self.dim(lds, ld)?;
        if ld < rows.max(1) {
            return Err(Error::arg(
                &self.name,
                lds,
                format!("{lds} = {ld} is smaller than the {rows} rows of {arg}"),
            ));
        }
        let m = HostMat::input(s.as_ptr() as *const u8, rows, cols, ld);
        if s.len() < m.span() {
            return Err(Error::arg(
                &self.name,
                arg,
                format!(
                    "{arg} has {} elements; a {rows}x{cols} matrix with {lds} = {ld} needs {}",
                    s.len(),
                    m.span()
                ),
            ));
        }
        Ok(m)
    }
    fn mat_mut<T>(
        &self,
        arg: &'static str,
        lds: &'static str,
        s: &mut [T],
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Result<HostMat> {
        let m = self.mat(arg, lds, s, rows, cols, ld)?;
        Ok(HostMat::new(
            s.as_mut_ptr() as *mut u8,
            m.rows,
            m.cols,
            m.ld,
        ))
    }
    fn len<T>(&self, arg: &'static str, s: &[T], need: usize) -> Result<()> {
        if s.len() < need {
            return Err(Error::arg(
                &self.name,
                arg,
                format!("{arg} has {} elements, needs {need}", s.len()),
            ));
        }
        Ok(())
    }
}

impl Offload {
    /// The process-wide dispatcher (configured from the environment).
    pub fn global() -> Offload {
        Offload {
            d: Arc::clone(Dispatcher::global()),
        }
    }

    /// A dispatcher of its own with these settings.
    pub fn with_config(config: Config) -> Offload {
        Offload {
            d: Arc::new(Dispatcher::new(config)),
        }
    }

    /// The dispatcher.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.d
    }

    fn run(&self, call: Call) -> Result<Outcome> {
        let d = &self.d;
        call.check()?;
        let cpu = d.cpu_backend()?;
        let req = Request::new(call, cpu.lib());
        // SAFETY: every HostMat/pointer in `call` was built from a slice whose length was checked
        // against the extent the dimensions describe (the V helpers), and the slices are borrowed
        // for the duration of this call.
        let out = unsafe { d.execute(&req, &mut || cpu.run(&call))? };
        if out.info > 0 {
            return Err(Error::Lapack {
                routine: call.name(),
                info: out.info,
                meaning: info_meaning(call.routine()),
            });
        }
        if out.info < 0 {
            return Err(Error::arg(
                call.name(),
                "(LAPACK)",
                format!("LAPACK rejected argument {}", -out.info),
            ));
        }
        Ok(out)
    }

    /// `C = alpha op(A) op(B) + beta C`; `op(A)` is `m x k`, `op(B)` is `k x n`, C is `m x n`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm<T: Element>(
        &self,
        ta: Trans,
        tb: Trans,
        m: usize,
        n: usize,
        k: usize,
        alpha: T,
        a: &[T],
        lda: usize,
        b: &[T],
        ldb: usize,
        beta: T,
        c: &mut [T],
        ldc: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Gemm, T::PREC);
        for (s, x) in [("m", m), ("n", n), ("k", k)] {
            v.dim(s, x)?;
        }
        let (ar, ac) = if ta == Trans::No { (m, k) } else { (k, m) };
        let (br, bc) = if tb == Trans::No { (k, n) } else { (n, k) };
        let a = v.mat("a", "lda", a, ar, ac, lda)?;
        let b = v.mat("b", "ldb", b, br, bc, ldb)?;
        let c = v.mat_mut("c", "ldc", c, m, n, ldc)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Gemm {
                ta,
                tb,
                m,
                n,
                k,
                alpha: Scalar::of(alpha),
                a,
                b,
                beta: Scalar::of(beta),
                c,
            },
        })
    }

    /// `C = alpha A B + beta C` (side Left, A `m x m`) or `alpha B A + beta C` (Right, A `n x n`),
    /// A symmetric (only the `uplo` triangle is read).
    #[allow(clippy::too_many_arguments)]
    pub fn symm<T: Element>(
        &self,
        side: Side,
        uplo: Uplo,
        m: usize,
        n: usize,
        alpha: T,
        a: &[T],
        lda: usize,
        b: &[T],
        ldb: usize,
        beta: T,
        c: &mut [T],
        ldc: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Symm, T::PREC);
        v.dim("m", m)?;
        v.dim("n", n)?;
        let ka = if side == Side::Left { m } else { n };
        let a = v.mat("a", "lda", a, ka, ka, lda)?;
        let b = v.mat("b", "ldb", b, m, n, ldb)?;
        let c = v.mat_mut("c", "ldc", c, m, n, ldc)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Symm {
                side,
                uplo,
                m,
                n,
                alpha: Scalar::of(alpha),
                a,
                b,
                beta: Scalar::of(beta),
                c,
            },
        })
    }

    /// `C = alpha A A^T + beta C` (trans No, A `n x k`) or `alpha A^T A + beta C` (A `k x n`);
    /// only the `uplo` triangle of C is written.
    #[allow(clippy::too_many_arguments)]
    pub fn syrk<T: Element>(
        &self,
        uplo: Uplo,
        trans: Trans,
        n: usize,
        k: usize,
        alpha: T,
        a: &[T],
        lda: usize,
        beta: T,
        c: &mut [T],
        ldc: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Syrk, T::PREC);
        v.dim("n", n)?;
        v.dim("k", k)?;
        let (ar, ac) = if trans == Trans::No { (n, k) } else { (k, n) };
        let a = v.mat("a", "lda", a, ar, ac, lda)?;
        let c = v.mat_mut("c", "ldc", c, n, n, ldc)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Syrk {
                uplo,
                trans,
                n,
                k,
                alpha: Scalar::of(alpha),
                a,
                beta: Scalar::of(beta),
                c,
            },
        })
    }

    /// `B = alpha op(A)^-1 B` (side Left, A `m x m`) or `alpha B op(A)^-1` (Right, A `n x n`),
    /// A triangular; B is `m x n`.
    #[allow(clippy::too_many_arguments)]
    pub fn trsm<T: Element>(
        &self,
        side: Side,
        uplo: Uplo,
        ta: Trans,
        diag: Diag,
        m: usize,
        n: usize,
        alpha: T,
        a: &[T],
        lda: usize,
        b: &mut [T],
        ldb: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Trsm, T::PREC);
        v.dim("m", m)?;
        v.dim("n", n)?;
        let ka = if side == Side::Left { m } else { n };
        let a = v.mat("a", "lda", a, ka, ka, lda)?;
        let b = v.mat_mut("b", "ldb", b, m, n, ldb)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Trsm {
                side,
                uplo,
                ta,
                diag,
                m,
                n,
                alpha: Scalar::of(alpha),
                a,
                b,
            },
        })
    }

    /// LU factorization with partial pivoting of the `m x n` A; `ipiv` gets `min(m, n)` 1-based
    /// pivots.
    pub fn getrf<T: Element>(
        &self,
        m: usize,
        n: usize,
        a: &mut [T],
        lda: usize,
        ipiv: &mut [i32],
    ) -> Result<Outcome> {
        let v = V::new(Routine::Getrf, T::PREC);
        v.dim("m", m)?;
        v.dim("n", n)?;
        let a = v.mat_mut("a", "lda", a, m, n, lda)?;
        v.len("ipiv", ipiv, m.min(n))?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Getrf {
                m,
                n,
                a,
                ipiv: Piv::I32(ipiv.as_mut_ptr()),
            },
        })
    }

    /// Solves `op(A) X = B` with the LU factors and pivots from [`Offload::getrf`]; B (`n x nrhs`)
    /// is overwritten by X.
    #[allow(clippy::too_many_arguments)]
    pub fn getrs<T: Element>(
        &self,
        trans: Trans,
        n: usize,
        nrhs: usize,
        a: &[T],
        lda: usize,
        ipiv: &[i32],
        b: &mut [T],
        ldb: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Getrs, T::PREC);
        v.dim("n", n)?;
        v.dim("nrhs", nrhs)?;
        let a = v.mat("a", "lda", a, n, n, lda)?;
        v.len("ipiv", ipiv, n)?;
        if let Some((i, p)) = ipiv[..n]
            .iter()
            .enumerate()
            .find(|(i, p)| **p < (*i as i32 + 1) || **p > n as i32)
        {
            return Err(Error::arg(
                &v.name,
                "ipiv",
                format!("ipiv[{i}] = {p} is outside {}..={n}", i + 1),
            ));
        }
        let b = v.mat_mut("b", "ldb", b, n, nrhs, ldb)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Getrs {
                trans,
                n,
                nrhs,
                a,
                ipiv: Piv::I32(ipiv.as_ptr() as *mut i32),
                b,
            },
        })
    }

    /// Solves `A X = B` by LU; A is overwritten by its factors, B by X, `ipiv` gets the pivots.
    #[allow(clippy::too_many_arguments)]
    pub fn gesv<T: Element>(
        &self,
        n: usize,
        nrhs: usize,
        a: &mut [T],
        lda: usize,
        ipiv: &mut [i32],
        b: &mut [T],
        ldb: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Gesv, T::PREC);
        v.dim("n", n)?;
        v.dim("nrhs", nrhs)?;
        let a = v.mat_mut("a", "lda", a, n, n, lda)?;
        v.len("ipiv", ipiv, n)?;
        let b = v.mat_mut("b", "ldb", b, n, nrhs, ldb)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Gesv {
                n,
                nrhs,
                a,
                ipiv: Piv::I32(ipiv.as_mut_ptr()),
                b,
            },
        })
    }

    /// Cholesky factorization of the `n x n` positive definite A (the `uplo` triangle).
    pub fn potrf<T: Element>(
        &self,
        uplo: Uplo,
        n: usize,
        a: &mut [T],
        lda: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Potrf, T::PREC);
        v.dim("n", n)?;
        let a = v.mat_mut("a", "lda", a, n, n, lda)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Potrf { uplo, n, a },
        })
    }

    /// Solves `A X = B` with the Cholesky factor from [`Offload::potrf`].
    #[allow(clippy::too_many_arguments)]
    pub fn potrs<T: Element>(
        &self,
        uplo: Uplo,
        n: usize,
        nrhs: usize,
        a: &[T],
        lda: usize,
        b: &mut [T],
        ldb: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Potrs, T::PREC);
        v.dim("n", n)?;
        v.dim("nrhs", nrhs)?;
        let a = v.mat("a", "lda", a, n, n, lda)?;
        let b = v.mat_mut("b", "ldb", b, n, nrhs, ldb)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Potrs {
                uplo,
                n,
                nrhs,
                a,
                b,
            },
        })
    }

    /// Solves `A X = B` by Cholesky; A is overwritten by its factor, B by X.
    #[allow(clippy::too_many_arguments)]
    pub fn posv<T: Element>(
        &self,
        uplo: Uplo,
        n: usize,
        nrhs: usize,
        a: &mut [T],
        lda: usize,
        b: &mut [T],
        ldb: usize,
    ) -> Result<Outcome> {
        let v = V::new(Routine::Posv, T::PREC);
        v.dim("n", n)?;
        v.dim("nrhs", nrhs)?;
        let a = v.mat_mut("a", "lda", a, n, n, lda)?;
        let b = v.mat_mut("b", "ldb", b, n, nrhs, ldb)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Posv {
                uplo,
                n,
                nrhs,
                a,
                b,
            },
        })
    }

    /// Eigenvalues (ascending, into `w`) and, with `vectors`, eigenvectors (into A's columns) of
    /// the symmetric / Hermitian `n x n` A (`syevd` / `heevd`).
    pub fn syevd<T: Element>(
        &self,
        vectors: bool,
        uplo: Uplo,
        n: usize,
        a: &mut [T],
        lda: usize,
        w: &mut [T::Real],
    ) -> Result<Outcome> {
        let v = V::new(Routine::Syevd, T::PREC);
        v.dim("n", n)?;
        let a = v.mat_mut("a", "lda", a, n, n, lda)?;
        v.len("w", w, n)?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Syevd {
                routine: Routine::Syevd,
                vectors,
                uplo,
                n,
                a,
                w: w.as_mut_ptr() as *mut u8,
            },
        })
    }

    /// SVD by divide and conquer (`gesdd`): `s` gets the `min(m, n)` singular values
    /// (descending); with [`SvdJob::Thin`] U is `m x min(m,n)` and VT `min(m,n) x n`, with
    /// [`SvdJob::Full`] `m x m` and `n x n`; with [`SvdJob::None`] `u` and `vt` may be empty.
    /// A is destroyed.
    #[allow(clippy::too_many_arguments)]
    pub fn gesdd<T: Element>(
        &self,
        job: SvdJob,
        m: usize,
        n: usize,
        a: &mut [T],
        lda: usize,
        s: &mut [T::Real],
        u: &mut [T],
        ldu: usize,
        vt: &mut [T],
        ldvt: usize,
    ) -> Result<Outcome> {
        self.svd(Routine::Gesdd, job, job, m, n, a, lda, s, u, ldu, vt, ldvt)
    }

    /// SVD by QR iteration (`gesvd`), with separate jobs for U and VT (see [`Offload::gesdd`]).
    #[allow(clippy::too_many_arguments)]
    pub fn gesvd<T: Element>(
        &self,
        jobu: SvdJob,
        jobvt: SvdJob,
        m: usize,
        n: usize,
        a: &mut [T],
        lda: usize,
        s: &mut [T::Real],
        u: &mut [T],
        ldu: usize,
        vt: &mut [T],
        ldvt: usize,
    ) -> Result<Outcome> {
        self.svd(
            Routine::Gesvd,
            jobu,
            jobvt,
            m,
            n,
            a,
            lda,
            s,
            u,
            ldu,
            vt,
            ldvt,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn svd<T: Element>(
        &self,
        r: Routine,
        jobu: SvdJob,
        jobvt: SvdJob,
        m: usize,
        n: usize,
        a: &mut [T],
        lda: usize,
        s: &mut [T::Real],
        u: &mut [T],
        ldu: usize,
        vt: &mut [T],
        ldvt: usize,
    ) -> Result<Outcome> {
        let v = V::new(r, T::PREC);
        v.dim("m", m)?;
        v.dim("n", n)?;
        if jobu == SvdJob::Overwrite || jobvt == SvdJob::Overwrite {
            return Err(Error::arg(
                &v.name,
                "job",
                "SvdJob::Overwrite is not available in the typed API",
            ));
        }
        let mn = m.min(n);
        let a = v.mat_mut("a", "lda", a, m, n, lda)?;
        v.len("s", s, mn)?;
        let ucols = match jobu {
            SvdJob::Thin => mn,
            SvdJob::Full => m,
            _ => 0,
        };
        let vtrows = match jobvt {
            SvdJob::Thin => mn,
            SvdJob::Full => n,
            _ => 0,
        };
        let null = HostMat::new(std::ptr::null_mut(), 0, 0, 1);
        let u = if ucols > 0 {
            v.mat_mut("u", "ldu", u, m, ucols, ldu)?
        } else {
            null
        };
        let vt = if vtrows > 0 {
            v.mat_mut("vt", "ldvt", vt, vtrows, n, ldvt)?
        } else {
            null
        };
        self.run(Call {
            prec: T::PREC,
            op: Op::Svd {
                routine: r,
                jobu,
                jobvt,
                m,
                n,
                a,
                s: s.as_mut_ptr() as *mut u8,
                u,
                vt,
            },
        })
    }

    /// QR factorization of the `m x n` A (Householder form; `tau` gets `min(m, n)` scalars).
    pub fn geqrf<T: Element>(
        &self,
        m: usize,
        n: usize,
        a: &mut [T],
        lda: usize,
        tau: &mut [T],
    ) -> Result<Outcome> {
        let v = V::new(Routine::Geqrf, T::PREC);
        v.dim("m", m)?;
        v.dim("n", n)?;
        let a = v.mat_mut("a", "lda", a, m, n, lda)?;
        v.len("tau", tau, m.min(n))?;
        self.run(Call {
            prec: T::PREC,
            op: Op::Geqrf {
                m,
                n,
                a,
                tau: tau.as_mut_ptr() as *mut u8,
            },
        })
    }
}
