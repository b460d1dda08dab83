//! BLAS/LAPACK flags and element types as cuBLAS and cuSOLVER spell them, and the small scalar
//! helpers every launch needs.

use crate::call::Scalar;
use crate::ops::{Diag, Precision, Side, Trans, Uplo};
use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;

pub(crate) fn dtype_s(p: Precision) -> cs::cudaDataType {
    match p {
        Precision::S => cs::cudaDataType::CUDA_R_32F,
        Precision::D => cs::cudaDataType::CUDA_R_64F,
        Precision::C => cs::cudaDataType::CUDA_C_32F,
        Precision::Z => cs::cudaDataType::CUDA_C_64F,
    }
}

pub(crate) fn real_dtype_s(p: Precision) -> cs::cudaDataType {
    match p {
        Precision::S | Precision::C => cs::cudaDataType::CUDA_R_32F,
        Precision::D | Precision::Z => cs::cudaDataType::CUDA_R_64F,
    }
}

pub(crate) fn dtype_b(p: Precision) -> cb::cudaDataType {
    match p {
        Precision::S => cb::cudaDataType::CUDA_R_32F,
        Precision::D => cb::cudaDataType::CUDA_R_64F,
        Precision::C => cb::cudaDataType::CUDA_C_32F,
        Precision::Z => cb::cudaDataType::CUDA_C_64F,
    }
}

pub(crate) fn compute_type(p: Precision) -> cb::cublasComputeType_t {
    match p {
        Precision::S | Precision::C => cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        Precision::D | Precision::Z => cb::cublasComputeType_t::CUBLAS_COMPUTE_64F,
    }
}

/// `'C'` means a conjugate transpose only for complex data; for real data it is `'T'`.
pub(crate) fn op_b(t: Trans, p: Precision) -> cb::cublasOperation_t {
    match (t, p.is_complex()) {
        (Trans::No, _) => cb::cublasOperation_t::CUBLAS_OP_N,
        (Trans::Trans, _) | (Trans::Conj, false) => cb::cublasOperation_t::CUBLAS_OP_T,
        (Trans::Conj, true) => cb::cublasOperation_t::CUBLAS_OP_C,
    }
}

pub(crate) fn op_s(t: Trans, p: Precision) -> cs::cublasOperation_t {
    match (t, p.is_complex()) {
        (Trans::No, _) => cs::cublasOperation_t::CUBLAS_OP_N,
        (Trans::Trans, _) | (Trans::Conj, false) => cs::cublasOperation_t::CUBLAS_OP_T,
        (Trans::Conj, true) => cs::cublasOperation_t::CUBLAS_OP_C,
    }
}

pub(crate) fn fill_b(u: Uplo) -> cb::cublasFillMode_t {
    match u {
        Uplo::Upper => cb::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
        Uplo::Lower => cb::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
    }
}

pub(crate) fn fill_s(u: Uplo) -> cs::cublasFillMode_t {
    match u {
        Uplo::Upper => cs::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
        Uplo::Lower => cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
    }
}

pub(crate) fn side_b(s: Side) -> cb::cublasSideMode_t {
    match s {
        Side::Left => cb::cublasSideMode_t::CUBLAS_SIDE_LEFT,
        Side::Right => cb::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
    }
}

pub(crate) fn side_s(s: Side) -> cs::cublasSideMode_t {
    match s {
        Side::Left => cs::cublasSideMode_t::CUBLAS_SIDE_LEFT,
        Side::Right => cs::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
    }
}

pub(crate) fn diag_b(d: Diag) -> cb::cublasDiagType_t {
    match d {
        Diag::NonUnit => cb::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
        Diag::Unit => cb::cublasDiagType_t::CUBLAS_DIAG_UNIT,
    }
}

/// A dimension as the 64-bit integer cuBLAS' `_64` and cuSOLVER's `X` functions take.
pub(crate) fn i(x: usize) -> i64 {
    x as i64
}

/// A leading dimension: at least 1, as LAPACK requires even for empty matrices.
pub(crate) fn ld(x: usize) -> i64 {
    x.max(1) as i64
}

/// A dimension for the 32-bit legacy cuSOLVER functions (orgqr, potri); callers check first
/// that it fits ([`crate::gpu::unsupported`]).
pub(crate) fn i32d(x: usize) -> i32 {
    x.min(i32::MAX as usize) as i32
}

/// A cuBLAS call in one precision: `typed_blas!(p, S, D, C, Z, (args...))`.
macro_rules! typed_blas {
    ($p:expr, $s:ident, $d:ident, $c:ident, $z:ident, ($($arg:expr),* $(,)?)) => {
        match $p {
            Precision::S => cudarc::cublas::sys::$s($($arg as _),*),
            Precision::D => cudarc::cublas::sys::$d($($arg as _),*),
            Precision::C => cudarc::cublas::sys::$c($($arg as _),*),
            Precision::Z => cudarc::cublas::sys::$z($($arg as _),*),
        }
    };
}
pub(crate) use typed_blas;

/// A legacy (32-bit) cuSOLVER call in one precision.
macro_rules! typed_solver {
    ($p:expr, $s:ident, $d:ident, $c:ident, $z:ident, ($($arg:expr),* $(,)?)) => {
        match $p {
            Precision::S => cudarc::cusolver::sys::$s($($arg as _),*),
            Precision::D => cudarc::cusolver::sys::$d($($arg as _),*),
            Precision::C => cudarc::cusolver::sys::$c($($arg as _),*),
            Precision::Z => cudarc::cusolver::sys::$z($($arg as _),*),
        }
    };
}
pub(crate) use typed_solver;

/// `v` as a scalar of precision `p` (imaginary part 0 for complex).
pub(crate) fn scalar(p: Precision, v: f64) -> Scalar {
    match p {
        Precision::S => Scalar::of(v as f32),
        Precision::D => Scalar::of(v),
        Precision::C => Scalar::of([v as f32, 0.0]),
        Precision::Z => Scalar::of([v, 0.0]),
    }
}

/// The host bytes of `n` ones of precision `p`.
pub(crate) fn ones_bytes(p: Precision, n: usize) -> Vec<u8> {
    let one = scalar(p, 1.0);
    let mut v = Vec::with_capacity(n * p.size());
    for _ in 0..n {
        v.extend_from_slice(&one.0[..p.size()]);
    }
    v
}

/// The element `bytes` holds as `(re, im)` in precision `p` (`im` is 0 for real types).
pub(crate) fn element(bytes: &[u8], p: Precision) -> (f64, f64) {
    let f4 =
        |o: usize| f32::from_ne_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]) as f64;
    let f8 = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[o..o + 8]);
        f64::from_ne_bytes(b)
    };
    match p {
        Precision::S => (f4(0), 0.0),
        Precision::D => (f8(0), 0.0),
        Precision::C => (f4(0), f4(4)),
        Precision::Z => (f8(0), f8(8)),
    }
}

/// A real value (`real_size` bytes) read from `bytes`.
pub(crate) fn real_value(bytes: &[u8], p: Precision) -> f64 {
    let rp = if p.real_size() == 4 {
        Precision::S
    } else {
        Precision::D
    };
    element(bytes, rp).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conj_is_transpose_for_real_data() {
        assert_eq!(
            op_b(Trans::Conj, Precision::D),
            cb::cublasOperation_t::CUBLAS_OP_T
        );
        assert_eq!(
            op_b(Trans::Conj, Precision::Z),
            cb::cublasOperation_t::CUBLAS_OP_C
        );
        assert_eq!(
            op_s(Trans::Trans, Precision::C),
            cs::cublasOperation_t::CUBLAS_OP_T
        );
    }

    #[test]
    fn scalars_and_elements_round_trip() {
        for p in Precision::ALL {
            let s = scalar(p, -2.5);
            assert_eq!(element(&s.0, p), (-2.5, 0.0), "{p:?}");
            let ones = ones_bytes(p, 3);
            assert_eq!(ones.len(), 3 * p.size());
            assert_eq!(element(&ones[2 * p.size()..], p), (1.0, 0.0), "{p:?}");
        }
        assert!(scalar(Precision::Z, 0.0).is_zero());
        assert_eq!(real_value(&2.0f32.to_ne_bytes(), Precision::C), 2.0);
    }

    #[test]
    fn leading_dimensions_are_at_least_one() {
        assert_eq!(ld(0), 1);
        assert_eq!(ld(7), 7);
        assert_eq!(i32d(usize::MAX), i32::MAX);
    }
}
