//! One BLAS/LAPACK call with its operands, type-erased (raw host pointers plus a [`Precision`]),
//! shared by the typed API, the CPU and GPU backends and the shim.
//!
//! A [`Call`] is built either from checked slices ([`crate::Offload`]'s methods) or from the raw
//! pointers a BLAS caller passed (the shim). [`Call::check`] applies LAPACK's argument rules;
//! everything after it may assume the dimensions are consistent.

use crate::error::{Error, Result};
use crate::ops::{
    Diag, EigRange, OpKind, Precision, Routine, Shape, Side, SvdJob, Trans, Uplo, Variant,
};

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

/// Integers in the caller's width: a pivot vector, or a count LAPACK returns (`rank`, the number
/// of eigenvalues found, `isuppz`).
#[derive(Debug, Clone, Copy)]
pub enum Piv {
    /// LP64 LAPACK.
    I32(*mut i32),
    /// ILP64 LAPACK.
    I64(*mut i64),
}

/// A scalar (alpha, beta) as raw bytes of the call's precision, aligned as CUDA's
/// `cuDoubleComplex` (16 bytes): cuBLAS reads host scalars (host pointer mode) with aligned
/// vector loads, and a complex-double scalar at an address 8 mod 16 is a general-protection
/// fault, a SIGSEGV at address 0 (one of gelsd's small products, `cublasGemmEx_64` ->
/// `cublasLtZZZMatmul`, killed the GPU test process at its first complex-double case, H100,
/// 2026-12-06; with byte alignment where the scalar landed depended on the stack, so it came and
/// went with the calls made before).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(16))]
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
    /// Eigenvalues (into `w`, `n` reals) and optionally eigenvectors (into A): `syevd` /
    /// `heevd`, or `syev` / `heev` (`routine`; the same contract, a different CPU algorithm).
    Syevd {
        routine: Routine,
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
    /// `C = alpha A B + beta C` (side L) or `alpha B A + beta C` (side R), A Hermitian (c, z).
    Hemm {
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
    /// `C = alpha A A^H + beta C` (trans N) or `alpha A^H A + beta C` (trans C); C `n x n`,
    /// Hermitian; `alpha` and `beta` are *real* scalars (their bytes hold an `f32` for c, an `f64`
    /// for z).
    Herk {
        uplo: Uplo,
        trans: Trans,
        n: usize,
        k: usize,
        alpha: Scalar,
        a: HostMat,
        beta: Scalar,
        c: HostMat,
    },
    /// `B = alpha op(A) B` (side L) or `alpha B op(A)` (side R), A triangular, in place.
    Trmm {
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
    /// Inverse of A (`n x n`) from its LU factors and pivots, in place.
    Getri { n: usize, a: HostMat, ipiv: Piv },
    /// Inverse of A (`n x n`) from its Cholesky factor, in place (the `uplo` triangle).
    Potri { uplo: Uplo, n: usize, a: HostMat },
    /// `B = op(A)^-1 B`, A `n x n` triangular, B `n x nrhs`; `info = i > 0` when `A(i, i)` is
    /// exactly zero (B untouched then).
    Trtrs {
        uplo: Uplo,
        trans: Trans,
        diag: Diag,
        n: usize,
        nrhs: usize,
        a: HostMat,
        b: HostMat,
    },
    /// Eigenvalues (into `w`, `n` reals) in `range`, optionally eigenvectors into `z` (`n` rows,
    /// one column per eigenvalue found: `n` for all, `iu - il + 1` for an index range, at most
    /// `n` for a value range, where only the first `found` columns may be written). `found`
    /// gets the number of eigenvalues found, `isuppz` (`2 * max(1, found)` integers, vectors
    /// only) the support of each vector. The `uplo` triangle of A is destroyed.
    Syevr {
        vectors: bool,
        range: EigRange,
        uplo: Uplo,
        n: usize,
        a: HostMat,
        abstol: f64,
        found: Piv,
        w: *mut u8,
        z: HostMat,
        isuppz: Piv,
    },
    /// Minimum-norm solution of `min ||B - A X||` through the SVD of A (`m x n`); B holds
    /// `max(m, n) x nrhs` (the `m` right-hand sides in, the `n`-row solution out); `s` gets the
    /// `min(m, n)` singular values, `rank` the effective rank (singular values `<= rcond *
    /// s_max` count as zero; `rcond < 0`: machine precision). A is destroyed.
    Gelsd {
        m: usize,
        n: usize,
        nrhs: usize,
        a: HostMat,
        b: HostMat,
        s: *mut u8,
        rcond: f64,
        rank: Piv,
    },
    /// The first `n` columns of Q (`m x n`, `m >= n >= k`) from `k` reflectors in A and `tau`
    /// (as `geqrf` left them), in place.
    Orgqr {
        m: usize,
        n: usize,
        k: usize,
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

/// One operand of a call, as [`Op::visit_operands`] hands it out (mutable: a visitor may
/// move or clear the address).
#[derive(Debug)]
pub enum Operand<'a> {
    /// A matrix in the caller's column-major storage.
    Mat(&'a mut HostMat),
    /// A vector of the call's element or real type (`w`, `s`, `tau`): its address.
    Vector(&'a mut *mut u8),
    /// Integers in the caller's width (pivots, `rank`, the count found, `isuppz`).
    Ints(&'a mut Piv),
}

impl Op {
    /// Hands every operand of the operation to `f`, matrices first in argument order: the one
    /// list of what a call's operands are, from which [`Call::without_data`] and
    /// [`Call::footprint`] are derived.
    pub fn visit_operands(&mut self, f: &mut dyn FnMut(Operand<'_>)) {
        use Operand::{Ints, Mat, Vector};
        match self {
            Op::Gemm { a, b, c, .. } | Op::Symm { a, b, c, .. } | Op::Hemm { a, b, c, .. } => {
                f(Mat(a));
                f(Mat(b));
                f(Mat(c));
            }
            Op::Syrk { a, c, .. } | Op::Herk { a, c, .. } => {
                f(Mat(a));
                f(Mat(c));
            }
            Op::Trsm { a, b, .. }
            | Op::Trmm { a, b, .. }
            | Op::Trtrs { a, b, .. }
            | Op::Potrs { a, b, .. }
            | Op::Posv { a, b, .. } => {
                f(Mat(a));
                f(Mat(b));
            }
            Op::Getrs { a, ipiv, b, .. } | Op::Gesv { a, ipiv, b, .. } => {
                f(Mat(a));
                f(Mat(b));
                f(Ints(ipiv));
            }
            Op::Getrf { a, ipiv, .. } | Op::Getri { a, ipiv, .. } => {
                f(Mat(a));
                f(Ints(ipiv));
            }
            Op::Potrf { a, .. } | Op::Potri { a, .. } => f(Mat(a)),
            Op::Syevd { a, w, .. } => {
                f(Mat(a));
                f(Vector(w));
            }
            Op::Syevr {
                a,
                found,
                w,
                z,
                isuppz,
                ..
            } => {
                f(Mat(a));
                f(Mat(z));
                f(Vector(w));
                f(Ints(found));
                f(Ints(isuppz));
            }
            Op::Svd { a, s, u, vt, .. } => {
                f(Mat(a));
                f(Mat(u));
                f(Mat(vt));
                f(Vector(s));
            }
            Op::Geqrf { a, tau, .. } | Op::Orgqr { a, tau, .. } => {
                f(Mat(a));
                f(Vector(tau));
            }
            Op::Gelsd { a, b, s, rank, .. } => {
                f(Mat(a));
                f(Mat(b));
                f(Vector(s));
                f(Ints(rank));
            }
        }
    }

    /// The routine this operation is a call of.
    pub fn routine(&self) -> Routine {
        match *self {
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
            Op::Syevd { routine, .. } => routine,
            Op::Svd { routine, .. } => routine,
            Op::Geqrf { .. } => Routine::Geqrf,
            Op::Hemm { .. } => Routine::Hemm,
            Op::Herk { .. } => Routine::Herk,
            Op::Trmm { .. } => Routine::Trmm,
            Op::Getri { .. } => Routine::Getri,
            Op::Potri { .. } => Routine::Potri,
            Op::Trtrs { .. } => Routine::Trtrs,
            Op::Syevr { .. } => Routine::Syevr,
            Op::Gelsd { .. } => Routine::Gelsd,
            Op::Orgqr { .. } => Routine::Orgqr,
        }
    }
}

impl Call {
    /// The routine.
    pub fn routine(&self) -> Routine {
        self.op.routine()
    }

    /// The model key.
    pub fn kind(&self) -> OpKind {
        let variant = match self.op {
            Op::Syevd { vectors, .. } | Op::Syevr { vectors, .. } if vectors => Variant::Vectors,
            Op::Svd { jobu, jobvt, .. } => {
                if jobu == SvdJob::Full || jobvt == SvdJob::Full {
                    Variant::Full
                } else if jobu != SvdJob::None || jobvt != SvdJob::None {
                    Variant::Vectors
                } else {
                    Variant::Plain
                }
            }
            _ => Variant::Plain,
        };
        OpKind::new(self.routine(), variant)
    }

    /// LAPACK name (`dgemm`).
    pub fn name(&self) -> String {
        self.routine().name(self.prec)
    }

    /// The shape (see [`Shape`]).
    pub fn shape(&self) -> Shape {
        // (m, n, k, A on the left) as Routine::shape reads them
        let (m, n, k, left) = match self.op {
            Op::Gemm { m, n, k, .. } | Op::Orgqr { m, n, k, .. } => (m, n, k, false),
            Op::Symm { side, m, n, .. }
            | Op::Hemm { side, m, n, .. }
            | Op::Trsm { side, m, n, .. }
            | Op::Trmm { side, m, n, .. } => (m, n, 0, side == Side::Left),
            Op::Syrk { n, k, .. } | Op::Herk { n, k, .. } => (1, n, k, false),
            Op::Getrf { m, n, .. } | Op::Geqrf { m, n, .. } | Op::Svd { m, n, .. } => {
                (m, n, 1, false)
            }
            Op::Getrs { n, nrhs, .. }
            | Op::Gesv { n, nrhs, .. }
            | Op::Potrs { n, nrhs, .. }
            | Op::Posv { n, nrhs, .. }
            | Op::Trtrs { n, nrhs, .. } => (1, n, nrhs, false),
            Op::Potrf { n, .. }
            | Op::Syevd { n, .. }
            | Op::Getri { n, .. }
            | Op::Potri { n, .. }
            | Op::Syevr { n, .. } => (1, n, 1, false),
            Op::Gelsd { m, n, nrhs, .. } => (m, n, nrhs, false),
        };
        self.routine().shape(u(m), u(n), u(k), left)
    }

    /// The same call with every data pointer set to null: dimensions, leading dimensions,
    /// transposes, scalars and precision only. The start-up thread uses it to size the GPU
    /// buffers for a call it saw earlier (see [`crate::gpu::GpuBackend::presize`]); nothing may
    /// read or write through it.
    pub fn without_data(&self) -> Call {
        let mut op = self.op;
        op.visit_operands(&mut |o| match o {
            Operand::Mat(m) => m.ptr = std::ptr::null_mut(),
            Operand::Vector(v) => *v = std::ptr::null_mut(),
            Operand::Ints(p) => {
                *p = match p {
                    Piv::I32(_) => Piv::I32(std::ptr::null_mut()),
                    Piv::I64(_) => Piv::I64(std::ptr::null_mut()),
                }
            }
        });
        Call {
            prec: self.prec,
            op,
        }
    }

    /// Bytes of the matrix operands (rows x cols of each, the vectors left out): the measure of
    /// "largest call" for pre-sizing GPU buffers.
    pub fn footprint(&self) -> usize {
        let mut op = self.op;
        let mut elems = 0usize;
        op.visit_operands(&mut |o| {
            if let Operand::Mat(m) = o {
                elems += m.len();
            }
        });
        elems * self.prec.size()
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
            // real symmetric routines accept 'C' as 'T'; complex syrk takes 'N' / 'T' and herk
            // 'N' / 'C' only (LAPACK's rules)
            let cplx = self.prec.is_complex();
            match self.routine() {
                Routine::Syrk if cplx && t == Trans::Conj => {
                    Err(Error::arg(&name, arg, "complex syrk takes 'N' or 'T' only"))
                }
                Routine::Herk if t == Trans::Trans => {
                    Err(Error::arg(&name, arg, "herk takes 'N' or 'C' only"))
                }
                _ => Ok(()),
            }
        };
        if !self.routine().precisions().contains(&self.prec) {
            return Err(Error::arg(
                &name,
                "(precision)",
                format!(
                    "{} exists in complex precisions only",
                    self.routine().stem()
                ),
            ));
        }
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
            Op::Hemm { a, b, c, .. } => {
                ld("lda", a)?;
                ld("ldb", b)?;
                ld("ldc", c)?;
            }
            Op::Herk { trans, a, c, .. } => {
                trans_ok("trans", *trans)?;
                ld("lda", a)?;
                ld("ldc", c)?;
            }
            Op::Trmm { a, b, .. } | Op::Trtrs { a, b, .. } => {
                ld("lda", a)?;
                ld("ldb", b)?;
            }
            Op::Getri { a, .. } | Op::Potri { a, .. } => ld("lda", a)?,
            Op::Syevr {
                vectors,
                range,
                n,
                a,
                z,
                ..
            } => {
                ld("lda", a)?;
                match *range {
                    EigRange::All => {}
                    EigRange::Values { vl, vu } => {
                        if vl.partial_cmp(&vu) != Some(std::cmp::Ordering::Less) {
                            return Err(Error::arg(
                                &name,
                                "vu",
                                format!("the value range needs vl < vu (got {vl}, {vu})"),
                            ));
                        }
                    }
                    EigRange::Index { il, iu } => {
                        let ok = if *n == 0 {
                            il == 1 && iu == 0
                        } else {
                            1 <= il && il <= iu && iu <= *n
                        };
                        if !ok {
                            return Err(Error::arg(
                                &name,
                                "iu",
                                format!("the index range needs 1 <= il <= iu <= n = {n} (got {il}, {iu})"),
                            ));
                        }
                    }
                }
                if *vectors && z.ld < (*n).max(1) {
                    return Err(Error::arg(&name, "ldz", format!("ldz {} < n = {n}", z.ld)));
                }
            }
            Op::Gelsd { m, n, a, b, .. } => {
                ld("lda", a)?;
                if b.ld < (*m).max(*n).max(1) {
                    return Err(Error::arg(
                        &name,
                        "ldb",
                        format!("ldb {} < max(m, n) = {}", b.ld, (*m).max(*n)),
                    ));
                }
            }
            Op::Orgqr { m, n, k, a, .. } => {
                if !(n <= m && k <= n) {
                    return Err(Error::arg(
                        &name,
                        "n",
                        format!("orgqr needs m >= n >= k (got m = {m}, n = {n}, k = {k})"),
                    ));
                }
                ld("lda", a)?;
            }
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
}

/// The standard meaning of a positive LAPACK `info` for a routine.
pub fn info_meaning(r: Routine) -> &'static str {
    r.info().info
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::Case;
    use crate::ops::OpKind;

    /// Host scalars sit at 16-byte boundaries wherever they are kept (after a byte in a struct,
    /// in an array, in a call's operation), as cuBLAS's complex-double loads need.
    #[test]
    fn scalars_are_aligned_as_cuda_complex_double() {
        assert_eq!(std::mem::align_of::<Scalar>(), 16);
        #[repr(C)]
        struct AfterAByte {
            _b: u8,
            s: Scalar,
        }
        let one = Scalar::of([1.0f64, 0.0]);
        let held = AfterAByte { _b: 1, s: one };
        assert!((held.s.as_ptr() as usize).is_multiple_of(16));
        let many = [one; 3];
        assert!(many
            .iter()
            .all(|x| (x.as_ptr() as usize).is_multiple_of(16)));
        let boxed = Box::new((0u8, one));
        assert!((boxed.1.as_ptr() as usize).is_multiple_of(16));
        assert_eq!(held.s, one, "the bytes are unchanged");
    }

    /// Every operand of every routine is visited: a call without data has no address left,
    /// and its footprint is that of its matrices (the calibration's cases of every kind and
    /// precision).
    #[test]
    fn every_operand_is_visited() {
        for kind in OpKind::all() {
            for &p in kind.routine.precisions() {
                let mut case = Case::new(kind, p, 8.0, 2.0);
                case.reset();
                let call = case.call(kind, p, 8.0, 2.0);
                let mut op = call.without_data().op;
                let mut seen = 0;
                op.visit_operands(&mut |o| {
                    seen += 1;
                    let null = match o {
                        Operand::Mat(m) => m.ptr.is_null(),
                        Operand::Vector(v) => v.is_null(),
                        Operand::Ints(Piv::I32(q)) => q.is_null(),
                        Operand::Ints(Piv::I64(q)) => q.is_null(),
                    };
                    assert!(null, "{kind} {p:?}: an operand kept its address");
                });
                assert!(seen >= 1, "{kind}");
                // the data-free call has the same footprint and shape
                assert_eq!(call.without_data().footprint(), call.footprint(), "{kind}");
                assert_eq!(call.without_data().shape(), call.shape(), "{kind}");
                let mut mats = 0;
                let mut op = call.op;
                op.visit_operands(&mut |o| {
                    // (a matrix the job does not reference, such as syevr's z without
                    // vectors, may have no address)
                    if let Operand::Mat(m) = o {
                        mats += m.len();
                    }
                });
                assert_eq!(call.footprint(), mats * p.size());
            }
        }
        // a product's footprint is its three matrices
        let m = |r, c| HostMat::new(std::ptr::null_mut(), r, c, r);
        let g = Call {
            prec: Precision::Z,
            op: Op::Gemm {
                ta: Trans::No,
                tb: Trans::No,
                m: 3,
                n: 5,
                k: 4,
                alpha: Scalar::of([1.0f64, 0.0]),
                a: m(3, 4),
                b: m(4, 5),
                beta: Scalar::of([0.0f64, 0.0]),
                c: m(3, 5),
            },
        };
        assert_eq!(g.footprint(), (12 + 20 + 15) * 16);
    }
}
