//! Least squares launch code: gelsd (numpy's and scipy's `lstsq`), the minimum-norm solution
//! through the SVD, with LAPACK's rank rule.
//!
//! * `m >= n`: `A = Q R` (`Xgeqrf`), `B := Q^H B` (`ormqr`), then the SVD of the square R, and
//!   `X = V S^+ U^H B[:n]` into the first n rows of B. Rows `n+1..m` keep `Q^H B`'s tail, as in
//!   LAPACK: with full rank their squares sum to the residual (numpy's `residuals`).
//! * `m < n`: the SVD of `T = A^H` (`A = Q S P^H` from `T = P S Q^H`) and `X = P S^+ Q^H B`.
//! * Rank: LAPACK's `dlalsd` treats `rcond <= 0` and `rcond >= 1` as machine precision and
//!   counts the singular values `> rcond * s_max` ([`rank_and_scale`]). The singular values are
//!   read back in the middle of the call to apply it. A polar SVD is used unless its reported
//!   perturbation is near that threshold (or over the guard), in which case the call is re-run
//!   with the QR-iteration SVD ([`crate::gpu::Done::RetryQr`]).
//! * A is destroyed, as LAPACK leaves it (the QR factors, or the destroyed `T` transposed
//!   back). Non-finite A or B go to the CPU library, as do non-finite results.

use crate::call::{HostMat, Op, Piv};
use crate::gpu::exec::Exec;
use crate::gpu::fail::{cb_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{
    compute_type, diag_b, dtype_b, fill_b, i, ld, ones_bytes, op_b, real_value, scalar, side_b,
    typed_blas,
};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::qr::{geqrf_on, geqrf_ws, ormqr_on, ormqr_ws};
use crate::gpu::svd::{
    geam, gesvd_jobs, gesvd_on, gesvd_ws, gesvdp, gesvdp_ws, ones_strided, polar_rejected, zero,
};
use crate::gpu::{Done, GpuBackend};
use crate::ops::{Diag, Precision, Side, Trans, Uplo};
use cudarc::cublas::sys as cb;
use std::ffi::c_void;

/// LAPACK's rank rule (`dlalsd`): the effective rank, the threshold, and the factors that
/// scale `U^H B` (`1 / s_i` for the singular values above the threshold, 0 for the others).
pub fn rank_and_scale(s: &[f64], rcond: f64, p: Precision) -> (usize, f64, Vec<f64>) {
    // dlamch('E'): the unit roundoff
    let eps = if p.real_size() == 4 {
        f32::EPSILON as f64 / 2.0
    } else {
        f64::EPSILON / 2.0
    };
    let rcnd = if rcond <= 0.0 || rcond >= 1.0 || rcond.is_nan() {
        eps
    } else {
        rcond
    };
    let smax = s.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = rcnd * smax;
    let scale: Vec<f64> = s
        .iter()
        .map(|&v| if v > tol { 1.0 / v } else { 0.0 })
        .collect();
    let rank = scale.iter().filter(|&&d| d != 0.0).count();
    (rank, tol, scale)
}

/// Whether a polar SVD's perturbation `err` could move a singular value across the rank
/// threshold `tol` (then the QR-iteration SVD decides the rank).
pub(crate) fn near_threshold(s: &[f64], tol: f64, err: f64) -> bool {
    err > 0.0 && s.iter().any(|&v| (v - tol).abs() <= 4.0 * err)
}

/// Runs a gelsd call; `qr` forces the QR-iteration SVD.
///
/// # Safety
/// The operands' pointers are valid for their extents (the call's contract).
pub(crate) unsafe fn run(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    op: &Op,
    qr: bool,
) -> GResult<Done> {
    let Op::Gelsd {
        m,
        n,
        nrhs,
        a,
        b: bm,
        s,
        rcond,
        rank,
    } = *op
    else {
        return Err(fail(GpuFailKind::Error, "not a least-squares operation"));
    };
    // SAFETY: forwarded.
    unsafe { gelsd(b, lane, p, (m, n, nrhs), a, bm, s, rcond, rank, qr) }
}

/// `C (r x c) = op(A) B` on the compute stream (A with `lda`, B `ldb`, C `ldc`, inner `k`).
#[allow(clippy::too_many_arguments)]
fn gemm(
    x: &Exec,
    ta: Trans,
    (r, c, k): (usize, usize, usize),
    a: usize,
    lda: usize,
    b: usize,
    ldb: usize,
    out: usize,
    ldc: usize,
) -> GResult<()> {
    let p = x.p;
    let (one, zero) = (scalar(p, 1.0), scalar(p, 0.0));
    cb_ok(
        // SAFETY: the three matrices lie in the arena (the caller's layout); handle bound to
        // the compute stream.
        unsafe {
            cb::cublasGemmEx_64(
                x.blas(),
                op_b(ta, p),
                op_b(Trans::No, p),
                i(r),
                i(c),
                i(k),
                one.as_ptr() as *const c_void,
                x.ptr::<c_void>(a),
                dtype_b(p),
                ld(lda),
                x.ptr::<c_void>(b),
                dtype_b(p),
                ld(ldb),
                zero.as_ptr() as *const c_void,
                x.ptr::<c_void>(out),
                dtype_b(p),
                ld(ldc),
                compute_type(p),
                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        },
        "cublasGemmEx (gelsd)",
    )
}

#[allow(clippy::too_many_arguments)]
unsafe fn gelsd(
    be: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    (m, n, nrhs): (usize, usize, usize),
    a: HostMat,
    b: HostMat,
    s: *mut u8,
    rcond: f64,
    rank: Piv,
    qr: bool,
) -> GResult<Done> {
    let (es, rs) = (p.size(), p.real_size());
    let k = m.min(n);
    let rows = m.max(n);
    let tall = m >= n;
    // the SVD is of R (k x k) when tall, of T = A^H (n x m) otherwise
    let (sr, sc) = if tall { (k, k) } else { (n, m) };
    let jobs = gesvd_jobs(k, sr, true);
    let svd_ws = if qr {
        gesvd_ws(lane, p, jobs, sr, sc)?
    } else {
        gesvdp_ws(lane, p, sr, sc)?
    };
    let (geqrf, ormqr) = if tall {
        (
            geqrf_ws(lane, p, m, n)?,
            ormqr_ws(lane, p, Trans::Conj, (m, nrhs, n))?,
        )
    } else {
        ((0, 0), 0)
    };
    let dev_ws = svd_ws.0.max(geqrf.0).max(ormqr);
    let host_ws = svd_ws.1.max(geqrf.1);

    let mut lay = Layout::default();
    let oa = lay.dev(m * n * es);
    // B: tall, the m x nrhs right-hand sides, overwritten in place; wide, m x nrhs in, the
    // n x nrhs solution in its own buffer
    let ob = lay.dev(m * nrhs * es);
    let ox = if tall { ob } else { lay.dev(n * nrhs * es) };
    let ot = if tall {
        lay.dev(k * k * es)
    } else {
        lay.dev(n * m * es)
    };
    let os = lay.dev(k * rs);
    let ou = lay.dev(sr * k * es);
    let ov = lay.dev(k * k * es);
    let (otau, oid, ones) = if tall {
        (lay.dev(k * es), lay.dev(k * k * es), lay.dev(k * es))
    } else {
        (0, 0, 0)
    };
    let (oc, oc2, od) = (
        lay.dev(k * nrhs * es),
        lay.dev(k * nrhs * es),
        lay.dev(k * es),
    );
    let ow = lay.workspace(dev_ws);
    let infos = [lay.status(4), lay.status(4), lay.status(4)];
    let check_in = FinitePlan::inputs(
        &mut lay,
        &[
            Check::Dense {
                off: oa,
                rows: m,
                cols: n,
                what: "A",
            },
            Check::Dense {
                off: ob,
                rows: m,
                cols: nrhs,
                what: "B",
            },
        ],
    );
    let check_out = FinitePlan::results(
        &mut lay,
        &[
            Check::Real {
                off: os,
                count: k,
                what: "the singular values",
            },
            Check::Dense {
                off: ox,
                rows: if tall { m } else { n },
                cols: nrhs,
                what: "the solution",
            },
        ],
    );

    let mut x = Exec::begin(be, lane, p, &lay)?;
    let b_in = HostMat {
        rows: m,
        cols: nrhs,
        ..b
    };
    // SAFETY: the caller's operands (contract): B holds max(m, n) rows, the first m read.
    unsafe {
        x.upload(&a, oa)?;
        x.upload(&b_in, ob)?;
    }
    if tall {
        x.upload_bytes(&ones_bytes(p, k), ones)?;
    }
    x.inputs_ready()?;
    check_in.run(&mut x)?;
    let hw = x.host_ws(host_ws);
    let mut err = 0.0;
    // the matrix whose SVD is taken: R (tall) or T = A^H (wide)
    if tall {
        geqrf_on(&mut x, m, n, oa, otau, infos[0], ow, geqrf, hw)?;
        ormqr_on(
            &mut x,
            Trans::Conj,
            (m, nrhs, n),
            oa,
            otau,
            ob,
            ow,
            ormqr,
            infos[1],
        )?;
        zero(&x, oid, k * k * es)?;
        ones_strided(&x, ones, k, oid, k + 1)?;
        let one = scalar(p, 1.0);
        cb_ok(
            // SAFETY: A (m x n), I and R (k x k) lie in the arena; handle bound to the
            // compute stream.
            unsafe {
                typed_blas!(
                    p,
                    cublasStrmm_v2_64,
                    cublasDtrmm_v2_64,
                    cublasCtrmm_v2_64,
                    cublasZtrmm_v2_64,
                    (
                        x.blas(),
                        side_b(Side::Left),
                        fill_b(Uplo::Upper),
                        op_b(Trans::No, p),
                        diag_b(Diag::NonUnit),
                        i(k),
                        i(k),
                        one.as_ptr(),
                        x.ptr::<u8>(oa),
                        ld(m),
                        x.ptr::<u8>(oid),
                        ld(k),
                        x.ptr::<u8>(ot),
                        ld(k)
                    )
                )
            },
            "cublas trmm (R of the QR)",
        )?;
    } else {
        geam(&x, (n, m), oa, m, true, ot, n)?;
    }
    if qr {
        gesvd_on(
            &mut x,
            jobs,
            (sr, sc),
            ot,
            (os, ou, ov),
            (ow, svd_ws),
            hw,
            infos[2],
        )?;
    } else {
        err = gesvdp(
            &mut x,
            (sr, sc),
            ot,
            (os, ou, ov),
            (ow, svd_ws),
            hw,
            infos[2],
        )?;
    }
    // the rank needs the singular values on the host
    let sv: Vec<f64> = x
        .read_now(os, k * rs)?
        .chunks_exact(rs)
        .map(|c| real_value(c, p))
        .collect();
    let (rk, tol, scale) = rank_and_scale(&sv, rcond, p);
    let smax = sv.first().copied().unwrap_or(0.0);
    if !qr && (polar_rejected(err, smax, rows, p) || near_threshold(&sv, tol, err)) {
        return Ok(Done::RetryQr);
    }
    let mut d = Vec::with_capacity(k * es);
    for v in &scale {
        d.extend_from_slice(&scalar(p, *v).0[..es]);
    }
    x.upload_bytes(&d, od)?;
    x.inputs_ready()?;
    // c = U^H B[:k]: tall, U is R's left vectors and B holds Q^H B; wide, A = Q S P^H with Q
    // T's right vectors (V from the polar SVD, V^H from the QR one) and P its left ones
    let (left, ta) = match (tall, qr) {
        (true, _) => (ou, Trans::Conj),
        (false, false) => (ov, Trans::Conj),
        (false, true) => (ov, Trans::No),
    };
    gemm(&x, ta, (k, nrhs, k), left, k, ob, m, oc, k)?;
    cb_ok(
        // SAFETY: c (k x nrhs), d (k) and c2 lie in the arena; handle bound to the compute
        // stream.
        unsafe {
            typed_blas!(
                p,
                cublasSdgmm_64,
                cublasDdgmm_64,
                cublasCdgmm_64,
                cublasZdgmm_64,
                (
                    x.blas(),
                    side_b(Side::Left),
                    i(k),
                    i(nrhs),
                    x.ptr::<u8>(oc),
                    ld(k),
                    x.ptr::<u8>(od),
                    1i64,
                    x.ptr::<u8>(oc2),
                    ld(k)
                )
            )
        },
        "cublas dgmm (gelsd)",
    )?;
    if tall {
        // X = V_R c2 into B's first n rows (V from the polar SVD, V^H from the QR one)
        let tv = if qr { Trans::Conj } else { Trans::No };
        gemm(&x, tv, (n, nrhs, k), ov, k, oc2, k, ob, m)?;
    } else {
        // X = P c2, P = T's left vectors (n x m)
        gemm(&x, Trans::No, (n, nrhs, k), ou, n, oc2, k, ox, n)?;
        // A gets the destroyed T back in its own shape
        geam(&x, (m, n), ot, n, true, oa, m)?;
    }
    check_out.run(&mut x)?;
    x.output(os, HostMat::new(s, k, 1, k.max(1)), rs);
    x.output_ints(vec![rk as i64], rank);
    x.output_in_place(
        ox,
        HostMat {
            rows: if tall { m } else { n },
            cols: nrhs,
            ..b
        },
        es,
    );
    x.output_in_place(oa, a, es);
    x.finish()?;
    x.commit().map(|()| Done::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_follows_lapacks_rule() {
        let s = [10.0, 1.0, 1e-3, 1e-17, 0.0];
        let d = Precision::D;
        // rcond < 0, = 0 and >= 1: machine precision (2^-53) times s_max
        for rc in [-1.0, 0.0, 1.0, 5.0] {
            let (rank, tol, scale) = rank_and_scale(&s, rc, d);
            assert_eq!(rank, 3, "rcond {rc}");
            assert_eq!(tol, 10.0 * f64::EPSILON / 2.0);
            assert_eq!(scale, vec![0.1, 1.0, 1000.0, 0.0, 0.0]);
        }
        // singular values <= rcond * s_max count as zero (the boundary included)
        assert_eq!(rank_and_scale(&s, 1e-4, d).0, 2);
        assert_eq!(rank_and_scale(&s, 1e-1, d).0, 1);
        assert_eq!(rank_and_scale(&[2.0, 1.0], 0.5, d).0, 1);
        // single precision uses its own epsilon
        assert_eq!(rank_and_scale(&[1.0, 1e-8], -1.0, Precision::C).0, 1);
        assert_eq!(rank_and_scale(&[1.0, 1e-8], -1.0, Precision::Z).0, 2);
        // all zero: rank 0, a zero solution
        let (rank, _, scale) = rank_and_scale(&[0.0, 0.0], -1.0, d);
        assert_eq!((rank, scale), (0, vec![0.0, 0.0]));
    }

    #[test]
    fn a_perturbation_near_the_threshold_asks_for_the_qr_svd() {
        let s = [1.0, 0.5, 1e-10];
        assert!(!near_threshold(&s, 1e-6, 0.0));
        assert!(!near_threshold(&s, 1e-6, 1e-12));
        assert!(near_threshold(&s, 1e-6, 1e-6));
        assert!(near_threshold(&s, 1.1e-10, 1e-11));
    }

    proptest::proptest! {
        /// The rank counts the singular values above the threshold, and the scale inverts
        /// exactly those.
        #[test]
        fn rank_and_scale_agree(
            s in proptest::collection::vec(0.0f64..10.0, 1..30),
            rcond in -1.0f64..1.5,
        ) {
            let mut s = s;
            s.sort_by(|a, b| b.total_cmp(a));
            let (rank, tol, scale) = rank_and_scale(&s, rcond, Precision::D);
            proptest::prop_assert_eq!(rank, s.iter().filter(|&&v| v > tol).count());
            for (v, d) in s.iter().zip(&scale) {
                if *v > tol {
                    proptest::prop_assert!((d * v - 1.0).abs() < 1e-12);
                } else {
                    proptest::prop_assert_eq!(*d, 0.0);
                }
            }
        }
    }
}
