//! One BLAS/LAPACK call with its operands, type-erased (raw host pointers plus a [`Precision`]),
//! shared by the typed API, the CPU and GPU backends and the shim.
//!
//! A [`Call`] is built either from checked slices ([`crate::Offload`]'s methods) or from the raw
//! pointers a BLAS caller passed (the shim). [`Call::check`] applies LAPACK's argument rules;
//! everything after it may assume the dimensions are consistent.

use crate::error::{Error, Result};
use crate::ops::{Diag, OpKind, Precision, Routine, Shape, Side, SvdJob, Trans, Uplo};

/// A column-major host matrix: `rows x cols` elements, column `j` starting at `ptr + j*ld`.
#[derive(Debug, Clone, Copy)]
pub struct HostMat {
    /// First element.
    pub ptr: *mut u8,
    /// Rows used.
    pub rows: usize,
    /// Columns used.
    pub cols: usize,
    /// Leading dimension (elements between column starts).
    pub ld: usize,
}

impl HostMat {
    /// A matrix view.
    pub fn new(ptr: *mut u8, rows: usize, cols: usize, ld: usize) -> HostMat {
        HostMat {
            ptr,
            rows,
            cols,
            ld,
        }
    }

    /// A read-only matrix view (the backends never write through it).
    pub fn input(ptr: *const u8, rows: usize, cols: usize, ld: usize) -> HostMat {
        HostMat::new(ptr as *mut u8, rows, cols, ld)
    }

    /// Elements from the first to the last one touched (`ld*(cols-1)+rows`; 0 when empty).
    pub fn span(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            0
        } else {
            self.ld * (self.cols - 1) + self.rows
        }
    }

    /// Elements used.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// True when no element is used.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A pivot vector in the caller's integer width.
#[derive(Debug, Clone, Copy)]
pub enum Piv {
    /// LP64 LAPACK.
    I32(*mut i32),
    /// ILP64 LAPACK.
    I64(*mut i64),
}

/// A scalar (alpha, beta) as raw bytes of the call's precision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scalar(pub [u8; 16]);

impl Scalar {
    /// Copies `size` bytes from `p`.
    ///
    /// # Safety
    /// `p` must point to at least `size` (<= 16) readable bytes.
    pub unsafe fn read(p: *const u8, size: usize) -> Scalar {
        let mut b = [0u8; 16];
        // SAFETY: the caller guarantees `size` readable bytes at `p`; `b` holds 16.
        unsafe { std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), size.min(16)) };
        Scalar(b)
    }

    /// From a value of one of the four element types.
    pub fn of<T: Copy>(v: T) -> Scalar {
        let size = std::mem::size_of::<T>().min(16);
        // SAFETY: `v` is a live value of `size` bytes.
        unsafe { Scalar::read(&v as *const T as *const u8, size) }
    }

    /// True when every byte is zero (0.0 or 0+0i; -0.0 is not zero here, which only makes a
    /// backend read C when it would not have had to).
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }

    /// Pointer to the bytes.
    pub fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr()
    }
}

/// The operation and its operands.
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub enum Op {
    /// `C = alpha op(A) op(B) + beta C`; A is `op(A): m x k`, B `op(B): k x n`, C `m x n`.
    Gemm {
        ta: Trans,
        tb: Trans,
        m: usize,
        n: usize,
        k: usize,
        alpha: Scalar,
        a: HostMat,
        b: HostMat,
        beta: Scalar,
        c: HostMat,
    },
    /// `C = alpha A B + beta C` (side L) or `alpha B A + beta C` (side R), A symmetric.
    Symm {
        side: Side,
        uplo: Uplo,
        m: usize,
        n: usize,
        alpha: Scalar,
        a: HostMat,
        b: HostMat,
        beta: Scalar,
        c: HostMat,
    },
    /// `C = alpha A A^T + beta C` (trans N) or `alpha A^T A + beta C`; C `n x n`.
    Syrk {
        uplo: Uplo,
        trans: Trans,
        n: usize,
        k: usize,
        alpha: Scalar,
        a: HostMat,
        beta: Scalar,
        c: HostMat,
    },
    /// `B = alpha op(A)^-1 B` (side L) or `alpha B op(A)^-1`.
    Trsm {
        side: Side,
        uplo: Uplo,
        ta: Trans,
        diag: Diag,
        m: usize,
        n: usize,
        alpha: Scalar,
        a: HostMat,
        b: HostMat,
    },
    /// LU of `m x n` A, pivots `min(m, n)`.
    Getrf {
        m: usize,
        n: usize,
        a: HostMat,
        ipiv: Piv,
    },
    /// Solve with an LU: A `n x n`, B `n x nrhs`.
    Getrs {
        trans: Trans,
        n: usize,
        nrhs: usize,
        a: HostMat,
        ipiv: Piv,
        b: HostMat,
    },
    /// LU and solve.
    Gesv {
        n: usize,
        nrhs: usize,
        a: HostMat,
        ipiv: Piv,
        b: HostMat,
    },
    /// Cholesky.
    Potrf { uplo: Uplo, n: usize, a: HostMat },
    /// Solve with a Cholesky factor.
    Potrs {
        uplo: Uplo,
        n: usize,
        nrhs: usize,
        a: HostMat,
        b: HostMat,
    },
    /// Cholesky and solve.
    Posv {
        uplo: Uplo,
        n: usize,
        nrhs: usize,
        a: HostMat,
        b: HostMat,
    },
    /// Eigenvalues (into `w`, `n` reals) and optionally eigenvectors (into A).
    Syevd {
        vectors: bool,
        uplo: Uplo,
        n: usize,
        a: HostMat,
        w: *mut u8,
    },
    /// SVD of `m x n` A: `s` gets `min(m, n)` reals; `u` and `vt` per the jobs.
    Svd {
        routine: Routine,
        jobu: SvdJob,
        jobvt: SvdJob,
        m: usize,
        n: usize,
        a: HostMat,
        s: *mut u8,
        u: HostMat,
        vt: HostMat,
    },
    /// QR of `m x n` A; `tau` gets `min(m, n)` elements.
    Geqrf {
        m: usize,
        n: usize,
        a: HostMat,
        tau: *mut u8,
    },
}

/// A call: an operation in a precision.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Element type.
    pub prec: Precision,
    /// Operation and operands.
    pub op: Op,
}

fn u(x: usize) -> u64 {
    x as u64
}

impl Call {
    /// The routine.
    pub fn routine(&self) -> Routine {
        match self.op {
            Op::Gemm { .. } => Routine::Gemm,
            Op::Symm { .. } => Routine::Symm,
            Op::Syrk { .. } => Routine::Syrk,
            Op::Trsm { .. } => Routine::Trsm,
            Op::Getrf { .. } => Routine::Getrf,
            Op::Getrs { .. } => Routine::Getrs,
            Op::Gesv { .. } => Routine::Gesv,
            Op::Potrf { .. } => Routine::Potrf,
            Op::Potrs { .. } => Routine::Potrs,
            Op::Posv { .. } => Routine::Posv,
            Op::Syevd { .. } => Routine::Syevd,
            Op::Svd { routine, .. } => routine,
            Op::Geqrf { .. } => Routine::Geqrf,
        }
    }

    /// The model key.
    pub fn kind(&self) -> OpKind {
        let vectors = match self.op {
            Op::Syevd { vectors, .. } => vectors,
            Op::Svd { jobu, jobvt, .. } => jobu != SvdJob::None || jobvt != SvdJob::None,
            _ => false,
        };
        OpKind {
            routine: self.routine(),
            vectors,
        }
    }

    /// LAPACK name (`dgemm`).
    pub fn name(&self) -> String {
        self.routine().name(self.prec)
    }

    /// The shape (see [`Shape`]).
    pub fn shape(&self) -> Shape {
        match self.op {
            Op::Gemm { m, n, k, .. } => Shape::new(u(m), u(n), u(k)),
            Op::Symm { side, m, n, .. } => {
                Shape::new(u(m), u(n), u(if side == Side::Left { m } else { n }))
            }
            Op::Syrk { n, k, .. } => Shape::new(1, u(n), u(k)),
            Op::Trsm { side, m, n, .. } => {
                Shape::new(u(m), u(n), u(if side == Side::Left { m } else { n }))
            }
            Op::Getrf { m, n, .. } | Op::Geqrf { m, n, .. } | Op::Svd { m, n, .. } => {
                Shape::new(u(m), u(n), 1)
            }
            Op::Getrs { n, nrhs, .. }
            | Op::Gesv { n, nrhs, .. }
            | Op::Potrs { n, nrhs, .. }
            | Op::Posv { n, nrhs, .. } => Shape::new(1, u(n), u(nrhs)),
            Op::Potrf { n, .. } | Op::Syevd { n, .. } => Shape::new(1, u(n), 1),
        }
    }

    /// The same call with every data pointer set to null: dimensions, leading dimensions,
    /// transposes, scalars and precision only. The start-up thread uses it to size the GPU
    /// buffers for a call it saw earlier (see [`crate::gpu::GpuBackend::presize`]); nothing may
    /// read or write through it.
    pub fn without_data(&self) -> Call {
        fn mat(x: &mut HostMat) {
            x.ptr = std::ptr::null_mut();
        }
        fn piv(x: &mut Piv) {
            *x = match x {
                Piv::I32(_) => Piv::I32(std::ptr::null_mut()),
                Piv::I64(_) => Piv::I64(std::ptr::null_mut()),
            };
        }
        let mut op = self.op;
        match &mut op {
            Op::Gemm { a, b, c, .. } | Op::Symm { a, b, c, .. } => {
                mat(a);
                mat(b);
                mat(c);
            }
            Op::Syrk { a, c, .. } => {
                mat(a);
                mat(c);
            }
            Op::Trsm { a, b, .. } | Op::Potrs { a, b, .. } | Op::Posv { a, b, .. } => {
                mat(a);
                mat(b);
            }
            Op::Getrf { a, ipiv, .. } => {
                mat(a);
                piv(ipiv);
            }
            Op::Getrs { a, ipiv, b, .. } | Op::Gesv { a, ipiv, b, .. } => {
                mat(a);
                piv(ipiv);
                mat(b);
            }
            Op::Potrf { a, .. } => mat(a),
            Op::Syevd { a, w, .. } => {
                mat(a);
                *w = std::ptr::null_mut();
            }
            Op::Svd { a, s, u, vt, .. } => {
                mat(a);
                mat(u);
                mat(vt);
                *s = std::ptr::null_mut();
            }
            Op::Geqrf { a, tau, .. } => {
                mat(a);
                *tau = std::ptr::null_mut();
            }
        }
        Call {
            prec: self.prec,
            op,
        }
    }

    /// Bytes of the matrix operands (rows x cols of each, the vectors left out): the measure of
    /// "largest call" for pre-sizing GPU buffers.
    pub fn footprint(&self) -> usize {
        let mats: [Option<&HostMat>; 3] = match &self.op {
            Op::Gemm { a, b, c, .. } | Op::Symm { a, b, c, .. } => [Some(a), Some(b), Some(c)],
            Op::Syrk { a, c, .. } => [Some(a), Some(c), None],
            Op::Trsm { a, b, .. }
            | Op::Potrs { a, b, .. }
            | Op::Posv { a, b, .. }
            | Op::Getrs { a, b, .. }
            | Op::Gesv { a, b, .. } => [Some(a), Some(b), None],
            Op::Getrf { a, .. }
            | Op::Potrf { a, .. }
            | Op::Syevd { a, .. }
            | Op::Geqrf { a, .. } => [Some(a), None, None],
            Op::Svd { a, u, vt, .. } => [Some(a), Some(u), Some(vt)],
        };
        mats.iter().flatten().map(|x| x.len()).sum::<usize>() * self.prec.size()
    }

    /// True when the call does no arithmetic (a zero dimension).
    pub fn is_empty(&self) -> bool {
        let s = self.shape();
        s.m == 0 || s.n == 0 || s.k == 0
    }

    /// Applies LAPACK's argument rules to dimensions and leading dimensions (not to buffer
    /// lengths, which only the typed API knows).
    pub fn check(&self) -> Result<()> {
        let name = self.name();
        let ld = |arg: &'static str, mat: &HostMat| -> Result<()> {
            if mat.ld < mat.rows.max(1) {
                return Err(Error::arg(
                    &name,
                    arg,
                    format!(
                        "leading dimension {} is smaller than the {} rows",
                        mat.ld, mat.rows
                    ),
                ));
            }
            Ok(())
        };
        let trans_ok = |arg: &'static str, t: Trans| -> Result<()> {
            // real symmetric routines accept 'C' as 'T'; complex syrk rejects it (LAPACK rule)
            if t == Trans::Conj && self.prec.is_complex() && self.routine() == Routine::Syrk {
                return Err(Error::arg(&name, arg, "complex syrk takes 'N' or 'T' only"));
            }
            Ok(())
        };
        match &self.op {
            Op::Gemm { a, b, c, .. } => {
                ld("lda", a)?;
                ld("ldb", b)?;
                ld("ldc", c)?;
            }
            Op::Symm { a, b, c, .. } => {
                ld("lda", a)?;
                ld("ldb", b)?;
                ld("ldc", c)?;
            }
            Op::Syrk { trans, a, c, .. } => {
                trans_ok("trans", *trans)?;
                ld("lda", a)?;
                ld("ldc", c)?;
            }
            Op::Trsm { a, b, .. } => {
                ld("lda", a)?;
                ld("ldb", b)?;
            }
            Op::Getrf { a, .. } | Op::Potrf { a, .. } | Op::Geqrf { a, .. } => ld("lda", a)?,
            Op::Getrs { a, b, .. }
            | Op::Gesv { a, b, .. }
            | Op::Potrs { a, b, .. }
            | Op::Posv { a, b, .. } => {
                ld("lda", a)?;
                ld("ldb", b)?;
            }
            Op::Syevd { a, .. } => ld("lda", a)?,
            Op::Svd {
                jobu,
                jobvt,
                m,
                n,
                a,
                u,
                vt,
                routine,
                ..
            } => {
                ld("lda", a)?;
                if *routine == Routine::Gesdd && jobu != jobvt {
                    return Err(Error::arg(
                        &name,
                        "jobz",
                        "gesdd takes one job for U and VT",
                    ));
                }
                if *jobu == SvdJob::Overwrite
                    && *jobvt == SvdJob::Overwrite
                    && *routine == Routine::Gesvd
                {
                    return Err(Error::arg(
                        &name,
                        "jobvt",
                        "jobu and jobvt cannot both be 'O'",
                    ));
                }
                let mn = (*m).min(*n);
                let wants_u = matches!(jobu, SvdJob::Thin | SvdJob::Full)
                    || (*jobu == SvdJob::Overwrite && *routine == Routine::Gesdd && m < n);
                if wants_u && u.ld < (*m).max(1) {
                    return Err(Error::arg(&name, "ldu", format!("ldu {} < m = {m}", u.ld)));
                }
                let vt_rows = match jobvt {
                    SvdJob::Full => *n,
                    SvdJob::Thin => mn,
                    SvdJob::Overwrite if *routine == Routine::Gesdd && m >= n => *n,
                    _ => 0,
                };
                if vt_rows > 0 && vt.ld < vt_rows.max(1) {
                    return Err(Error::arg(
                        &name,
                        "ldvt",
                        format!("ldvt {} < {vt_rows}", vt.ld),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Why the GPU path cannot run this call, if it cannot (the GPU backend decides:
    /// [`crate::gpu::unsupported`]).
    pub fn gpu_unsupported(&self) -> Option<&'static str> {
        crate::gpu::unsupported(self)
    }
}

/// The standard meaning of a positive LAPACK `info` for a routine.
pub fn info_meaning(r: Routine) -> &'static str {
    match r {
        Routine::Getrf | Routine::Gesv => "U is exactly singular",
        Routine::Potrf | Routine::Posv => "the matrix is not positive definite",
        Routine::Syevd | Routine::Gesdd | Routine::Gesvd => "the algorithm did not converge",
        _ => "numerical failure",
    }
}
