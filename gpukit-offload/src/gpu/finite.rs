//! Non-finite checks on the device: does an operand hold NaN or infinity?
//!
//! LAPACK answers non-finite data in its own ways: `gesdd` reports `info = -4` for a NaN
//! entry, `potrf` a non-positive pivot, others propagate NaN. So that the caller always gets
//! LAPACK's answer, every LAPACK routine's GPU path checks the data the routine reads (and its
//! results) and hands the call to the CPU library when one is not finite
//! ([`crate::gpu::GpuFailKind::NonFinite`]). BLAS-3 routines are not checked: cuBLAS
//! propagates NaN and infinity as the CPU BLAS does.
//!
//! A check reduces the referenced part of the operand to one number on the device, finite
//! exactly when every referenced element is finite (up to overflow of the sum, which only
//! sends a call to the CPU without need): a dense operand by `asum`; a symmetric / Hermitian
//! one by `A * ones` through `symv` / `hemv` (which read only the referenced triangle; `hemv`
//! ignores the imaginary parts of the diagonal as LAPACK's Hermitian routines do), then
//! `asum`; a triangular one by `trmv` of a ones vector (the diagonal left out for a unit
//! triangle), then `asum`.

use crate::gpu::exec::Exec;
use crate::gpu::fail::{cb_ok, GResult};
use crate::gpu::flags::{diag_b, fill_b, i, ld, ones_bytes, scalar, typed_blas};
use crate::gpu::layout::Layout;
use crate::ops::{Diag, Precision, Trans, Uplo};
use cudarc::cublas::sys as cb;

/// One operand to check (arena offsets; device matrices are packed, `ld = rows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Every element of `count` contiguous elements.
    Dense {
        off: usize,
        count: usize,
        what: &'static str,
    },
    /// `count` contiguous reals of the call's real type (eigenvalues, singular values).
    Real {
        off: usize,
        count: usize,
        what: &'static str,
    },
    /// The `uplo` triangle (with the diagonal unless `diag` is unit) of an `n x n` matrix.
    Triangle {
        off: usize,
        n: usize,
        uplo: Uplo,
        diag: Diag,
        what: &'static str,
    },
    /// The `uplo` triangle of a symmetric (or, with `hermitian`, Hermitian) `n x n` matrix.
    Symmetric {
        off: usize,
        n: usize,
        uplo: Uplo,
        hermitian: bool,
        what: &'static str,
    },
}

impl Check {
    fn order(&self) -> usize {
        match *self {
            Check::Dense { .. } | Check::Real { .. } => 0,
            Check::Triangle { n, .. } | Check::Symmetric { n, .. } => n,
        }
    }
}

/// Checks laid out for one call: the status word of each and the vectors they need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FinitePlan {
    checks: Vec<(Check, usize)>,
    /// Arena offsets of a ones vector and a work vector of `n` elements (when `n > 0`).
    ones: usize,
    y: usize,
    n: usize,
}

impl FinitePlan {
    /// Reserves the status words and vectors for `checks`.
    pub(crate) fn new(lay: &mut Layout, p: Precision, checks: &[Check]) -> FinitePlan {
        let n = checks.iter().map(Check::order).max().unwrap_or(0);
        let (ones, y) = if n > 0 {
            (lay.dev(n * p.size()), lay.dev(n * p.size()))
        } else {
            (0, 0)
        };
        FinitePlan {
            checks: checks
                .iter()
                .map(|c| (*c, lay.status(p.real_size())))
                .collect(),
            ones,
            y,
            n,
        }
    }

    /// Queues every check on the compute stream (after the data it reads) and registers its
    /// sum with the call.
    pub(crate) fn run(&self, x: &mut Exec) -> GResult<()> {
        if self.checks.is_empty() {
            return Ok(());
        }
        let p = x.p;
        if self.n > 0 {
            let v = ones_bytes(p, self.n);
            // the ones vector goes up on the compute stream, ahead of the checks
            let dst = x.addr(self.ones);
            let compute = x.lane.compute_raw;
            // SAFETY: `dst` holds n elements (reserved in `new`); `write` stages `v` before
            // returning.
            unsafe { x.lane.staging.write(&v, dst, compute)? };
        }
        for &(c, status) in &self.checks {
            let (vec_off, count, real) = match c {
                Check::Dense { off, count, .. } => (off, count, false),
                Check::Real { off, count, .. } => (off, count, true),
                Check::Triangle {
                    off, n, uplo, diag, ..
                } => {
                    self.triangle(x, off, n, uplo, diag)?;
                    (self.y, n, false)
                }
                Check::Symmetric {
                    off,
                    n,
                    uplo,
                    hermitian,
                    ..
                } => {
                    self.symmetric(x, off, n, uplo, hermitian)?;
                    (self.y, n, false)
                }
            };
            asum(x, vec_off, count, real, status)?;
            let what = match c {
                Check::Dense { what, .. }
                | Check::Real { what, .. }
                | Check::Triangle { what, .. }
                | Check::Symmetric { what, .. } => what,
            };
            x.finite_sum(status, what);
        }
        // Checks of the inputs (queued before any routine) are read before the routine runs.
        x.verify_inputs()
    }

    /// y = T * ones for the triangle.
    fn triangle(&self, x: &Exec, off: usize, n: usize, uplo: Uplo, diag: Diag) -> GResult<()> {
        let (h, p) = (x.blas(), x.p);
        let (ones, y, a) = (
            x.ptr::<u8>(self.ones),
            x.ptr::<u8>(self.y),
            x.ptr::<u8>(off),
        );
        // SAFETY: the vectors hold `self.n >= n` elements and the matrix `n*n`, all in the
        // arena; the handle is bound to the compute stream.
        unsafe {
            cb_ok(
                typed_blas!(
                    p,
                    cublasScopy_v2_64,
                    cublasDcopy_v2_64,
                    cublasCcopy_v2_64,
                    cublasZcopy_v2_64,
                    (h, i(n), ones, 1i64, y, 1i64)
                ),
                "cublas copy (finite check)",
            )?;
            cb_ok(
                typed_blas!(
                    p,
                    cublasStrmv_v2_64,
                    cublasDtrmv_v2_64,
                    cublasCtrmv_v2_64,
                    cublasZtrmv_v2_64,
                    (
                        h,
                        fill_b(uplo),
                        crate::gpu::flags::op_b(Trans::No, p),
                        diag_b(diag),
                        i(n),
                        a,
                        ld(n),
                        y,
                        1i64
                    )
                ),
                "cublas trmv (finite check)",
            )
        }
    }

    /// y = A * ones through the referenced triangle.
    fn symmetric(&self, x: &Exec, off: usize, n: usize, uplo: Uplo, herm: bool) -> GResult<()> {
        let (h, p) = (x.blas(), x.p);
        let (one, zero) = (scalar(p, 1.0), scalar(p, 0.0));
        let (ones, y, a) = (
            x.ptr::<u8>(self.ones),
            x.ptr::<u8>(self.y),
            x.ptr::<u8>(off),
        );
        // SAFETY: as in `triangle`; alpha and beta are host scalars (host pointer mode).
        let r = unsafe {
            if herm && p.is_complex() {
                if p == Precision::C {
                    cb::cublasChemv_v2_64(
                        h,
                        fill_b(uplo),
                        i(n),
                        one.as_ptr() as _,
                        a as _,
                        ld(n),
                        ones as _,
                        1,
                        zero.as_ptr() as _,
                        y as _,
                        1,
                    )
                } else {
                    cb::cublasZhemv_v2_64(
                        h,
                        fill_b(uplo),
                        i(n),
                        one.as_ptr() as _,
                        a as _,
                        ld(n),
                        ones as _,
                        1,
                        zero.as_ptr() as _,
                        y as _,
                        1,
                    )
                }
            } else {
                typed_blas!(
                    p,
                    cublasSsymv_v2_64,
                    cublasDsymv_v2_64,
                    cublasCsymv_v2_64,
                    cublasZsymv_v2_64,
                    (
                        h,
                        fill_b(uplo),
                        i(n),
                        one.as_ptr(),
                        a,
                        ld(n),
                        ones,
                        1i64,
                        zero.as_ptr(),
                        y,
                        1i64
                    )
                )
            }
        };
        cb_ok(r, "cublas symv (finite check)")
    }
}

/// Sum of magnitudes of `count` elements (of the real type when `real`) at arena offset `off`
/// into status offset `status`.
fn asum(x: &Exec, off: usize, count: usize, real: bool, status: usize) -> GResult<()> {
    let h = x.blas();
    let p = match (real, x.p.real_size()) {
        (false, _) => x.p,
        (true, 4) => Precision::S,
        (true, _) => Precision::D,
    };
    let (v, out) = (x.ptr::<u8>(off), x.status_ptr::<u8>(status));
    // SAFETY: `count` elements at `v` and one real at `out`, both in the arena. The result
    // is written on the device (device pointer mode), so the stream is not synchronised; the
    // mode is set back to host for the handle's other users whatever the outcome.
    unsafe {
        cb_ok(
            cb::cublasSetPointerMode_v2(h, cb::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE),
            "cublas pointer mode",
        )?;
        let r = typed_blas!(
            p,
            cublasSasum_v2_64,
            cublasDasum_v2_64,
            cublasScasum_v2_64,
            cublasDzasum_v2_64,
            (h, i(count), v, 1i64, out)
        );
        let back =
            cb::cublasSetPointerMode_v2(h, cb::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST);
        cb_ok(r, "cublas asum (finite check)")?;
        cb_ok(back, "cublas pointer mode")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reserves_one_status_word_per_check_and_vectors_for_the_largest_order() {
        let mut lay = Layout::default();
        let a = lay.dev(100 * 100 * 16);
        let checks = [
            Check::Dense {
                off: a,
                count: 10,
                what: "B",
            },
            Check::Symmetric {
                off: a,
                n: 100,
                uplo: Uplo::Lower,
                hermitian: true,
                what: "A",
            },
            Check::Triangle {
                off: a,
                n: 40,
                uplo: Uplo::Upper,
                diag: Diag::Unit,
                what: "T",
            },
        ];
        let plan = FinitePlan::new(&mut lay, Precision::Z, &checks);
        assert_eq!(plan.n, 100);
        assert_eq!(plan.checks.len(), 3);
        assert_eq!(lay.status_len(), 3 * 16);
        // the vectors lie after the matrix and do not overlap
        assert!(plan.ones >= a + 100 * 100 * 16 && plan.y >= plan.ones + 100 * 16);
        let offs: Vec<usize> = plan.checks.iter().map(|c| c.1).collect();
        assert_eq!(offs, vec![0, 16, 32]);
        // dense checks alone need no vectors
        let mut lay2 = Layout::default();
        let p2 = FinitePlan::new(&mut lay2, Precision::S, &checks[..1]);
        assert_eq!((p2.n, lay2.total()), (0, 16));
    }
}
