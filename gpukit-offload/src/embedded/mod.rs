//! The embedded CPU backend: BLAS/LAPACK routines in pure Rust (on [faer]), served through the
//! reference Fortran ABI so that the crate runs on a machine with no BLAS library installed.
//!
//! # Why faer, and which version
//! faer 0.24.4 (default features off; `std` for its x86 SIMD matrix-product kernels, `rayon`
//! for threads) is the maintained pure-Rust dense linear-algebra library: blocked and
//! multithreaded matrix products, triangular solves, Cholesky, Householder QR, divide-and-conquer
//! self-adjoint eigensolver and SVD, for `f32`, `f64`, `c32`, `c64`. Nothing is compiled from C
//! or Fortran and nothing is loaded at run time, so the backend is always there. It is the
//! library of last resort: a system OpenBLAS is several times faster on most routines (see the
//! `embedded_vs_openblas` example), and the shim's CPU path is always the program's own library.
//!
//! # Contract
//! [`symbol`] returns `unsafe extern "C"` functions with the reference BLAS/LAPACK interface for
//! plain Fortran names (`"dgemm_"`, `"zpotrf_"`, ...; [`routines`] lists them):
//! * LP64: every integer is an `i32`; every argument is passed by pointer; character arguments
//!   are `*const c_char` (case-insensitive, as LAPACK's `LSAME`); trailing hidden string-length
//!   arguments may be passed and are ignored; complex numbers are two reals (`re`, `im`).
//! * Column-major arrays with leading dimensions; 1-based pivots (`ipiv`).
//! * LAPACK's `info`: `-i` for a bad `i`-th argument (checked in LAPACK's order, plus null
//!   pointers to arguments that are read, and out-of-range pivots given to `getrs`/`getri`), the
//!   positive codes LAPACK defines (exactly singular `U(i,i)` of `getrf`/`gesv`/`getri`, order of
//!   the first non-positive leading minor of `potrf`/`posv`, zero diagonal of `potri`/`trtrs`,
//!   non-convergence of the eigen and SVD solvers).
//! * Workspace queries (`lwork = -1`, and `liwork`/`lrwork = -1` where the routine has them) are
//!   answered in `work[0]` (and `iwork[0]`, `rwork[0]`). This backend allocates its own
//!   workspace, so the caller's `work` arrays are never used as scratch: the answers are LAPACK's
//!   minimum sizes. Where LAPACK's minimum is one formula (`getri`, `geqrf`, `orgqr`/`ungqr`,
//!   `syev`/`heev`, `syevd`/`heevd`, `syevr`/`heevr`) a smaller `lwork` is the bad argument LAPACK reports;
//!   for `gesdd`, `gesvd` and `gelsd`, whose minimum in LAPACK depends on an internal path
//!   choice, any `lwork >= 1` is accepted (never stricter than LAPACK) and the query answers
//!   LAPACK's documented minimum.
//! * BLAS routines have no `info`: an argument error leaves every output untouched and is
//!   recorded for [`take_blas_error`] (the reference `xerbla` prints and stops the program;
//!   nothing is printed here, because a library must not write to a descriptor the program may
//!   have reused).
//! * Exact semantics: only the `uplo` triangle of a symmetric/Hermitian/triangular operand is
//!   read, and only the `uplo` triangle of `syrk`/`herk`'s C and of the factors of
//!   `potrf`/`potri` is written; a zero `beta` never reads C, a zero `alpha` never reads A or B;
//!   `jobz`/`jobu`/`jobvt` `'O'` overwrite A with the singular vectors; eigenvectors overwrite A
//!   in `syev`/`heev` and `syevd`/`heevd`; eigenvalues ascend, singular values descend.
//! * Where LAPACK says an argument's content is *destroyed* on exit (A of `syev`/`syevd`/`syevr` with
//!   `jobz = 'N'`, of `gesdd`/`gesvd` for other jobs, of `gelsd`), this backend leaves it as it
//!   was. Where a factorization stops early (`potrf`/`posv` with `info > 0`), LAPACK leaves a
//!   partial factor in A; this backend leaves A as it was (the caller may not use it either way).
//!
//! # Non-finite input
//! Matrix products and solves propagate NaN and infinity as the reference library does. The
//! factorizations report what LAPACK reports: a NaN pivot of `potrf` is a non-positive leading
//! minor. The iterative solvers check their input first: `gesdd` returns `info = -4` for a
//! non-finite A (LAPACK >= 3.10 does so for NaN); `syev`/`heev`/`syevd`/`heevd`/`syevr`/`heevr` return
//! `info = n`, `gesvd` and `gelsd` `info = min(m, n)` (non-convergence, which is what LAPACK's
//! iterations report on NaN), and write nothing.
//!
//! # Failures
//! No panic leaves an exported function: each body runs under `catch_unwind`. Every result is
//! computed into private memory (allocated fallibly) and copied to the caller's arrays only
//! after the whole computation succeeded, so a failure writes nothing. A LAPACK routine that
//! fails internally (out of memory, or a caught panic) returns
//! `info =` [`INTERNAL_FAILURE_INFO`]; a BLAS routine records it for [`take_blas_error`].
//!
//! # Threads
//! Calls of more than a few million floating-point operations run on faer's rayon pool (all
//! cores; `RAYON_NUM_THREADS` sets its size), smaller ones on the calling thread. A forked child
//! inherits the pool without its threads, so the pool is used only by the process that first
//! used it; in a forked child every call runs on the calling thread (work sent to the inherited
//! pool would never run).
//!
//! [faer]: https://crates.io/crates/faer

mod abi;
mod blas3;
mod cholesky;
mod eigen;
mod lstsq;
mod lu;
mod qr;
mod svd;
#[cfg(test)]
mod tests;
mod triangular;

pub use abi::{take_blas_error, BlasError};

use std::ffi::c_void;

/// The `info` of a LAPACK routine that failed inside this backend (out of memory for its private
/// buffers, or a panic caught at the boundary); nothing was written. No routine has 1000
/// arguments, so it cannot be mistaken for a bad-argument code.
pub const INTERNAL_FAILURE_INFO: i32 = -1000;

macro_rules! table {
    ($($name:literal => $f:expr,)*) => {
        const NAMES: &[&str] = &[$($name),*];

        fn lookup(name: &str) -> Option<*const c_void> {
            match name {
                $($name => Some($f as *const c_void),)*
                _ => None,
            }
        }
    };
}

use faer::{c32, c64};

table! {
    "sgemm_" => blas3::gemm::<f32>,
    "dgemm_" => blas3::gemm::<f64>,
    "cgemm_" => blas3::gemm::<c32>,
    "zgemm_" => blas3::gemm::<c64>,
    "ssymm_" => blas3::symm::<f32>,
    "dsymm_" => blas3::symm::<f64>,
    "csymm_" => blas3::symm::<c32>,
    "zsymm_" => blas3::symm::<c64>,
    "chemm_" => blas3::hemm::<c32>,
    "zhemm_" => blas3::hemm::<c64>,
    "ssyrk_" => blas3::syrk::<f32>,
    "dsyrk_" => blas3::syrk::<f64>,
    "csyrk_" => blas3::syrk::<c32>,
    "zsyrk_" => blas3::syrk::<c64>,
    "cherk_" => blas3::herk::<c32>,
    "zherk_" => blas3::herk::<c64>,
    "strsm_" => blas3::trsm::<f32>,
    "dtrsm_" => blas3::trsm::<f64>,
    "ctrsm_" => blas3::trsm::<c32>,
    "ztrsm_" => blas3::trsm::<c64>,
    "strmm_" => blas3::trmm::<f32>,
    "dtrmm_" => blas3::trmm::<f64>,
    "ctrmm_" => blas3::trmm::<c32>,
    "ztrmm_" => blas3::trmm::<c64>,
    "sgetrf_" => lu::getrf::<f32>,
    "dgetrf_" => lu::getrf::<f64>,
    "cgetrf_" => lu::getrf::<c32>,
    "zgetrf_" => lu::getrf::<c64>,
    "sgetrs_" => lu::getrs::<f32>,
    "dgetrs_" => lu::getrs::<f64>,
    "cgetrs_" => lu::getrs::<c32>,
    "zgetrs_" => lu::getrs::<c64>,
    "sgesv_" => lu::gesv::<f32>,
    "dgesv_" => lu::gesv::<f64>,
    "cgesv_" => lu::gesv::<c32>,
    "zgesv_" => lu::gesv::<c64>,
    "sgetri_" => lu::getri::<f32>,
    "dgetri_" => lu::getri::<f64>,
    "cgetri_" => lu::getri::<c32>,
    "zgetri_" => lu::getri::<c64>,
    "spotrf_" => cholesky::potrf::<f32>,
    "dpotrf_" => cholesky::potrf::<f64>,
    "cpotrf_" => cholesky::potrf::<c32>,
    "zpotrf_" => cholesky::potrf::<c64>,
    "spotrs_" => cholesky::potrs::<f32>,
    "dpotrs_" => cholesky::potrs::<f64>,
    "cpotrs_" => cholesky::potrs::<c32>,
    "zpotrs_" => cholesky::potrs::<c64>,
    "sposv_" => cholesky::posv::<f32>,
    "dposv_" => cholesky::posv::<f64>,
    "cposv_" => cholesky::posv::<c32>,
    "zposv_" => cholesky::posv::<c64>,
    "spotri_" => cholesky::potri::<f32>,
    "dpotri_" => cholesky::potri::<f64>,
    "cpotri_" => cholesky::potri::<c32>,
    "zpotri_" => cholesky::potri::<c64>,
    "strtrs_" => triangular::trtrs::<f32>,
    "dtrtrs_" => triangular::trtrs::<f64>,
    "ctrtrs_" => triangular::trtrs::<c32>,
    "ztrtrs_" => triangular::trtrs::<c64>,
    "sgeqrf_" => qr::geqrf::<f32>,
    "dgeqrf_" => qr::geqrf::<f64>,
    "cgeqrf_" => qr::geqrf::<c32>,
    "zgeqrf_" => qr::geqrf::<c64>,
    "sorgqr_" => qr::orgqr::<f32>,
    "dorgqr_" => qr::orgqr::<f64>,
    "cungqr_" => qr::orgqr::<c32>,
    "zungqr_" => qr::orgqr::<c64>,
    "ssyev_" => eigen::syev::<f32>,
    "dsyev_" => eigen::syev::<f64>,
    "cheev_" => eigen::heev::<c32>,
    "zheev_" => eigen::heev::<c64>,
    "ssyevd_" => eigen::syevd::<f32>,
    "dsyevd_" => eigen::syevd::<f64>,
    "cheevd_" => eigen::heevd::<c32>,
    "zheevd_" => eigen::heevd::<c64>,
    "ssyevr_" => eigen::syevr::<f32>,
    "dsyevr_" => eigen::syevr::<f64>,
    "cheevr_" => eigen::heevr::<c32>,
    "zheevr_" => eigen::heevr::<c64>,
    "sgesdd_" => svd::gesdd::<f32>,
    "dgesdd_" => svd::gesdd::<f64>,
    "cgesdd_" => svd::gesdd_complex::<c32>,
    "zgesdd_" => svd::gesdd_complex::<c64>,
    "sgesvd_" => svd::gesvd::<f32>,
    "dgesvd_" => svd::gesvd::<f64>,
    "cgesvd_" => svd::gesvd_complex::<c32>,
    "zgesvd_" => svd::gesvd_complex::<c64>,
    "sgelsd_" => lstsq::gelsd::<f32>,
    "dgelsd_" => lstsq::gelsd::<f64>,
    "cgelsd_" => lstsq::gelsd_complex::<c32>,
    "zgelsd_" => lstsq::gelsd_complex::<c64>,
}

/// The routine with this plain Fortran name (`"dgemm_"`), as an `unsafe extern "C"` function
/// of the reference BLAS/LAPACK interface (see the module docs); `None` for any other name.
/// Transmute it to the routine's Fortran prototype before calling it.
pub fn symbol(name: &str) -> Option<*const c_void> {
    lookup(name)
}

/// Every name [`symbol`] serves.
pub fn routines() -> &'static [&'static str] {
    NAMES
}
