//! BLAS-3 launch code: gemm, symm / hemm, syrk / herk, trsm, trmm.
//!
//! Column-separable calls (gemm with `op(B) = B`, left-side symm, hemm, trsm and trmm) are
//! pipelined in
//! column blocks: block j+1 of B (and C) goes up while block j is computed. Results are written
//! to the caller after the last block (see [`crate::gpu::exec`]). BLAS-3 calls are not checked
//! for non-finite data: cuBLAS propagates NaN and infinity as the CPU BLAS does.

use crate::call::{HostMat, Op, Scalar};
use crate::gpu::exec::Exec;
use crate::gpu::fail::{cb_ok, fail, GResult, GpuFailKind};
use crate::gpu::flags::{compute_type, diag_b, dtype_b, fill_b, i, ld, op_b, side_b, typed_blas};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::GpuBackend;
use crate::ops::{Diag, Precision, Side, Trans, Uplo};
use cudarc::cublas::sys as cb;
use std::ffi::c_void;

/// Bytes of output per pipeline block (fewer blocks below it, at most 8).
const BLOCK_BYTES: usize = 48 << 20;

/// Column blocks `(j0, j1)` of an `n`-column output whose columns are `col_bytes` long: one
/// block unless the call is `chunkable`, else about one per [`BLOCK_BYTES`], at most 8.
pub(crate) fn column_blocks(n: usize, col_bytes: usize, chunkable: bool) -> Vec<(usize, usize)> {
    if n == 0 {
        return Vec::new();
    }
    let blocks = if chunkable {
        (n.saturating_mul(col_bytes) / BLOCK_BYTES)
            .clamp(1, 8)
            .min(n)
    } else {
        1
    };
    let per = n.div_ceil(blocks);
    (0..n)
        .step_by(per)
        .map(|j0| (j0, (j0 + per).min(n)))
        .collect()
}

/// Columns `j0..j1` of a host matrix.
fn cols(m: &HostMat, j0: usize, j1: usize, es: usize) -> HostMat {
    HostMat {
        // SAFETY: column j0 lies inside the matrix (j0 < cols) or the view is empty.
        ptr: unsafe { m.ptr.add(j0 * m.ld * es) },
        cols: j1 - j0,
        ..*m
    }
}

/// Runs a BLAS-3 call.
///
/// # Safety
/// The operands' pointers are valid for their extents (the call's contract).
pub(crate) unsafe fn run(b: &GpuBackend, lane: &mut Lane, p: Precision, op: &Op) -> GResult<()> {
    // SAFETY: forwarded to each routine.
    unsafe {
        match *op {
            Op::Gemm {
                ta,
                tb,
                m,
                n,
                k,
                alpha,
                a,
                b: bm,
                beta,
                c,
            } => gemm(b, lane, p, (ta, tb), (m, n, k), alpha, a, bm, beta, c),
            Op::Symm {
                side,
                uplo,
                m,
                n,
                alpha,
                a,
                b: bm,
                beta,
                c,
            } => symm(
                b,
                lane,
                p,
                false,
                (side, uplo),
                (m, n),
                alpha,
                a,
                bm,
                beta,
                c,
            ),
            Op::Hemm {
                side,
                uplo,
                m,
                n,
                alpha,
                a,
                b: bm,
                beta,
                c,
            } => symm(
                b,
                lane,
                p,
                true,
                (side, uplo),
                (m, n),
                alpha,
                a,
                bm,
                beta,
                c,
            ),
            Op::Syrk {
                uplo,
                trans,
                n,
                k,
                alpha,
                a,
                beta,
                c,
            } => syrk(b, lane, p, false, (uplo, trans), (n, k), alpha, a, beta, c),
            Op::Herk {
                uplo,
                trans,
                n,
                k,
                alpha,
                a,
                beta,
                c,
            } => syrk(b, lane, p, true, (uplo, trans), (n, k), alpha, a, beta, c),
            Op::Trsm {
                side,
                uplo,
                ta,
                diag,
                m,
                n,
                alpha,
                a,
                b: bm,
            } => triangular(
                b,
                lane,
                p,
                false,
                (side, uplo, ta, diag),
                (m, n),
                alpha,
                a,
                bm,
            ),
            Op::Trmm {
                side,
                uplo,
                ta,
                diag,
                m,
                n,
                alpha,
                a,
                b: bm,
            } => triangular(
                b,
                lane,
                p,
                true,
                (side, uplo, ta, diag),
                (m, n),
                alpha,
                a,
                bm,
            ),
            _ => Err(fail(GpuFailKind::Error, "not a BLAS-3 operation")),
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn gemm(
    be: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    (ta, tb): (Trans, Trans),
    (m, n, k): (usize, usize, usize),
    alpha: Scalar,
    a: HostMat,
    b: HostMat,
    beta: Scalar,
    c: HostMat,
) -> GResult<()> {
    let es = p.size();
    let mut lay = Layout::default();
    let (oa, ob, oc) = (
        lay.dev(a.len() * es),
        lay.dev(b.len() * es),
        lay.dev(c.len() * es),
    );
    let mut x = Exec::begin(be, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract); device offsets from the layout.
    unsafe { x.upload(&a, oa)? };
    let read_c = !beta.is_zero();
    let chunkable = tb == Trans::No;
    for (j0, j1) in column_blocks(n, m * es, chunkable) {
        let boff = if chunkable { ob + j0 * b.rows * es } else { ob };
        if chunkable {
            // SAFETY: as above.
            unsafe { x.upload(&cols(&b, j0, j1, es), boff)? };
        } else if j0 == 0 {
            // SAFETY: as above.
            unsafe { x.upload(&b, ob)? };
        }
        if read_c {
            // SAFETY: as above.
            unsafe { x.upload(&cols(&c, j0, j1, es), oc + j0 * m * es)? };
        }
        x.inputs_ready()?;
        cb_ok(
            // SAFETY: every device pointer lies in the arena laid out above; the handle is
            // bound to the compute stream, which waits for the uploads.
            unsafe {
                cb::cublasGemmEx_64(
                    x.blas(),
                    op_b(ta, p),
                    op_b(tb, p),
                    i(m),
                    i(j1 - j0),
                    i(k),
                    alpha.as_ptr() as *const c_void,
                    x.ptr::<c_void>(oa),
                    dtype_b(p),
                    ld(a.rows),
                    x.ptr::<c_void>(boff),
                    dtype_b(p),
                    ld(b.rows),
                    beta.as_ptr() as *const c_void,
                    x.ptr::<c_void>(oc + j0 * m * es),
                    dtype_b(p),
                    ld(m),
                    compute_type(p),
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            },
            "cublasGemmEx",
        )?;
    }
    if read_c {
        x.output_in_place(oc, c, es);
    } else {
        x.output(oc, c, es);
    }
    x.finish()?;
    x.commit()
}

/// symm, or hemm (`herm`: A Hermitian, complex only).
#[allow(clippy::too_many_arguments)]
unsafe fn symm(
    be: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    herm: bool,
    (side, uplo): (Side, Uplo),
    (m, n): (usize, usize),
    alpha: Scalar,
    a: HostMat,
    b: HostMat,
    beta: Scalar,
    c: HostMat,
) -> GResult<()> {
    let es = p.size();
    let mut lay = Layout::default();
    let (oa, ob, oc) = (
        lay.dev(a.len() * es),
        lay.dev(b.len() * es),
        lay.dev(c.len() * es),
    );
    let mut x = Exec::begin(be, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract).
    unsafe { x.upload(&a, oa)? };
    let read_c = !beta.is_zero();
    for (j0, j1) in column_blocks(n, m * es, side == Side::Left) {
        let off = j0 * m * es;
        // SAFETY: as above.
        unsafe { x.upload(&cols(&b, j0, j1, es), ob + off)? };
        if read_c {
            // SAFETY: as above.
            unsafe { x.upload(&cols(&c, j0, j1, es), oc + off)? };
        }
        x.inputs_ready()?;
        let (h, ap, bp, cp) = (
            x.blas(),
            x.ptr::<u8>(oa),
            x.ptr::<u8>(ob + off),
            x.ptr::<u8>(oc + off),
        );
        let (sd, fl, rows, cols) = (side_b(side), fill_b(uplo), i(m), i(j1 - j0));
        // SAFETY: device pointers in the arena; handle bound to the compute stream.
        let r = unsafe {
            if herm && p.is_complex() {
                if p == Precision::C {
                    cb::cublasChemm_v2_64(
                        h,
                        sd,
                        fl,
                        rows,
                        cols,
                        alpha.as_ptr() as _,
                        ap as _,
                        ld(a.rows),
                        bp as _,
                        ld(m),
                        beta.as_ptr() as _,
                        cp as _,
                        ld(m),
                    )
                } else {
                    cb::cublasZhemm_v2_64(
                        h,
                        sd,
                        fl,
                        rows,
                        cols,
                        alpha.as_ptr() as _,
                        ap as _,
                        ld(a.rows),
                        bp as _,
                        ld(m),
                        beta.as_ptr() as _,
                        cp as _,
                        ld(m),
                    )
                }
            } else {
                typed_blas!(
                    p,
                    cublasSsymm_v2_64,
                    cublasDsymm_v2_64,
                    cublasCsymm_v2_64,
                    cublasZsymm_v2_64,
                    (
                        h,
                        sd,
                        fl,
                        rows,
                        cols,
                        alpha.as_ptr(),
                        ap,
                        ld(a.rows),
                        bp,
                        ld(m),
                        beta.as_ptr(),
                        cp,
                        ld(m)
                    )
                )
            }
        };
        cb_ok(r, if herm { "cublas hemm" } else { "cublas symm" })?;
    }
    if read_c {
        x.output_in_place(oc, c, es);
    } else {
        x.output(oc, c, es);
    }
    x.finish()?;
    x.commit()
}

/// syrk, or herk (`herm`: complex only, `alpha` and `beta` real, trans 'N' or 'C').
#[allow(clippy::too_many_arguments)]
unsafe fn syrk(
    be: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    herm: bool,
    (uplo, trans): (Uplo, Trans),
    (n, k): (usize, usize),
    alpha: Scalar,
    a: HostMat,
    beta: Scalar,
    c: HostMat,
) -> GResult<()> {
    let es = p.size();
    let mut lay = Layout::default();
    let (oa, oc) = (lay.dev(a.len() * es), lay.dev(c.len() * es));
    let mut x = Exec::begin(be, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract). C goes up whole: its other triangle must come
    // back unchanged.
    unsafe {
        x.upload(&a, oa)?;
        x.upload(&c, oc)?;
    }
    x.inputs_ready()?;
    let (h, ap, cp) = (x.blas(), x.ptr::<u8>(oa), x.ptr::<u8>(oc));
    let r = if herm && p.is_complex() {
        // herk takes 'N' or 'C' (checked by Call::check)
        let t = op_b(trans, p);
        // SAFETY: device pointers in the arena; alpha and beta are real scalars (the call's
        // contract); handle bound to the compute stream.
        unsafe {
            if p == Precision::C {
                cb::cublasCherk_v2_64(
                    h,
                    fill_b(uplo),
                    t,
                    i(n),
                    i(k),
                    alpha.as_ptr() as _,
                    ap as _,
                    ld(a.rows),
                    beta.as_ptr() as _,
                    cp as _,
                    ld(n),
                )
            } else {
                cb::cublasZherk_v2_64(
                    h,
                    fill_b(uplo),
                    t,
                    i(n),
                    i(k),
                    alpha.as_ptr() as _,
                    ap as _,
                    ld(a.rows),
                    beta.as_ptr() as _,
                    cp as _,
                    ld(n),
                )
            }
        }
    } else {
        // complex syrk takes 'N' or 'T' (checked by Call::check); real 'C' means 'T'
        let t = if trans == Trans::No {
            Trans::No
        } else {
            Trans::Trans
        };
        // SAFETY: device pointers in the arena; handle bound to the compute stream.
        unsafe {
            typed_blas!(
                p,
                cublasSsyrk_v2_64,
                cublasDsyrk_v2_64,
                cublasCsyrk_v2_64,
                cublasZsyrk_v2_64,
                (
                    h,
                    fill_b(uplo),
                    op_b(t, p),
                    i(n),
                    i(k),
                    alpha.as_ptr(),
                    ap,
                    ld(a.rows),
                    beta.as_ptr(),
                    cp,
                    ld(n)
                )
            )
        }
    };
    cb_ok(r, if herm { "cublas herk" } else { "cublas syrk" })?;
    x.output_in_place(oc, c, es);
    x.finish()?;
    x.commit()
}

/// trsm (`B = alpha op(A)^-1 B`), or trmm (`mult`: `B = alpha op(A) B`; cuBLAS' trmm is
/// out of place, given B as its output it works in place as BLAS does).
#[allow(clippy::too_many_arguments)]
unsafe fn triangular(
    be: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    mult: bool,
    (side, uplo, ta, diag): (Side, Uplo, Trans, Diag),
    (m, n): (usize, usize),
    alpha: Scalar,
    a: HostMat,
    b: HostMat,
) -> GResult<()> {
    let es = p.size();
    let mut lay = Layout::default();
    let (oa, ob) = (lay.dev(a.len() * es), lay.dev(b.len() * es));
    let mut x = Exec::begin(be, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract).
    unsafe { x.upload(&a, oa)? };
    for (j0, j1) in column_blocks(n, m * es, side == Side::Left) {
        let off = j0 * m * es;
        // SAFETY: as above.
        unsafe { x.upload(&cols(&b, j0, j1, es), ob + off)? };
        x.inputs_ready()?;
        let (h, ap, bp) = (x.blas(), x.ptr::<u8>(oa), x.ptr::<u8>(ob + off));
        let (sd, fl, op, dg) = (side_b(side), fill_b(uplo), op_b(ta, p), diag_b(diag));
        let (rows, cols) = (i(m), i(j1 - j0));
        // SAFETY: device pointers in the arena; handle bound to the compute stream.
        let r = unsafe {
            if mult {
                typed_blas!(
                    p,
                    cublasStrmm_v2_64,
                    cublasDtrmm_v2_64,
                    cublasCtrmm_v2_64,
                    cublasZtrmm_v2_64,
                    (
                        h,
                        sd,
                        fl,
                        op,
                        dg,
                        rows,
                        cols,
                        alpha.as_ptr(),
                        ap,
                        ld(a.rows),
                        bp,
                        ld(m),
                        bp,
                        ld(m)
                    )
                )
            } else {
                typed_blas!(
                    p,
                    cublasStrsm_v2_64,
                    cublasDtrsm_v2_64,
                    cublasCtrsm_v2_64,
                    cublasZtrsm_v2_64,
                    (
                        h,
                        sd,
                        fl,
                        op,
                        dg,
                        rows,
                        cols,
                        alpha.as_ptr(),
                        ap,
                        ld(a.rows),
                        bp,
                        ld(m)
                    )
                )
            }
        };
        cb_ok(r, if mult { "cublas trmm" } else { "cublas trsm" })?;
    }
    x.output_in_place(ob, b, es);
    x.finish()?;
    x.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_blocks_cover_the_output_once() {
        for (n, col, chunkable) in [
            (6000usize, 48_000usize, true),
            (6000, 48_000, false),
            (7, 100 << 20, true),
            (1, 8, true),
            (100, 8, true),
        ] {
            let bl = column_blocks(n, col, chunkable);
            assert_eq!(bl.first().unwrap().0, 0);
            assert_eq!(bl.last().unwrap().1, n);
            assert!(bl.windows(2).all(|w| w[0].1 == w[1].0));
            assert!(bl.len() <= 8);
            if !chunkable {
                assert_eq!(bl.len(), 1);
            }
        }
        // 6000 columns of 48 KB: 288 MB -> 5 blocks of 48 MiB or more
        assert_eq!(column_blocks(6000, 48_000, true).len(), 5);
        assert!(column_blocks(0, 8, true).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn any_output_is_covered_once(n in 1usize..20_000, col in 1usize..200_000, chunkable: bool) {
            let bl = column_blocks(n, col, chunkable);
            proptest::prop_assert_eq!(bl.first().map(|b| b.0), Some(0));
            proptest::prop_assert_eq!(bl.last().map(|b| b.1), Some(n));
            proptest::prop_assert!(bl.windows(2).all(|w| w[0].1 == w[1].0));
            proptest::prop_assert!(bl.len() <= 8 && bl.iter().all(|b| b.1 > b.0));
        }
    }
}
