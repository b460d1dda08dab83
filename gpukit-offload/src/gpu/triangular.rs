//! Triangular solve launch code: trtrs (LAPACK's triangular solve: trsm after a singularity
//! check).
//!
//! LAPACK's trtrs returns `info = i` without touching B when `A(i, i)` is exactly zero (a
//! non-unit triangle). The GPU path copies A's diagonal into the status words beside the solve
//! and fails with [`crate::gpu::GpuFailKind::Info`] on a zero, so the CPU library answers.

use crate::call::{HostMat, Op};
use crate::gpu::exec::{first_zero, Exec};
use crate::gpu::fail::{cb_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{diag_b, fill_b, i, ld, op_b, scalar, side_b, typed_blas};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::GpuBackend;
use crate::ops::{Diag, Precision, Side, Trans, Uplo};

/// Runs a trtrs call.
///
/// # Safety
/// The operands' pointers are valid for their extents (the call's contract).
pub(crate) unsafe fn run(b: &GpuBackend, lane: &mut Lane, p: Precision, op: &Op) -> GResult<()> {
    let Op::Trtrs {
        uplo,
        trans,
        diag,
        n,
        nrhs,
        a,
        b: bm,
    } = *op
    else {
        return Err(fail(GpuFailKind::Error, "not a triangular solve"));
    };
    // SAFETY: forwarded.
    unsafe { trtrs(b, lane, p, (uplo, trans, diag), (n, nrhs), a, bm) }
}

#[allow(clippy::too_many_arguments)]
unsafe fn trtrs(
    be: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    (uplo, trans, diag): (Uplo, Trans, Diag),
    (n, nrhs): (usize, usize),
    a: HostMat,
    b: HostMat,
) -> GResult<()> {
    let es = p.size();
    let mut lay = Layout::default();
    let (oa, ob) = (lay.dev(a.len() * es), lay.dev(b.len() * es));
    let od = lay.status(n * es);
    let checks = FinitePlan::inputs(
        &mut lay,
        &[
            Check::Triangle {
                off: oa,
                n,
                uplo,
                diag,
                what: "A",
            },
            Check::Dense {
                off: ob,
                rows: n,
                cols: nrhs,
                what: "B",
            },
        ],
    );
    let mut x = Exec::begin(be, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract).
    unsafe {
        x.upload(&a, oa)?;
        x.upload(&b, ob)?;
    }
    x.inputs_ready()?;
    checks.run(&mut x)?;
    if diag == Diag::NonUnit {
        x.status_strided(oa, n, n + 1, od)?;
    }
    let one = scalar(p, 1.0);
    cb_ok(
        // SAFETY: device pointers in the arena; handle bound to the compute stream.
        unsafe {
            typed_blas!(
                p,
                cublasStrsm_v2_64,
                cublasDtrsm_v2_64,
                cublasCtrsm_v2_64,
                cublasZtrsm_v2_64,
                (
                    x.blas(),
                    side_b(Side::Left),
                    fill_b(uplo),
                    op_b(trans, p),
                    diag_b(diag),
                    i(n),
                    i(nrhs),
                    one.as_ptr(),
                    x.ptr::<u8>(oa),
                    ld(n),
                    x.ptr::<u8>(ob),
                    ld(n)
                )
            )
        },
        "cublas trsm (trtrs)",
    )?;
    x.output_in_place(ob, b, es);
    x.finish_with(|st| {
        let zero = (diag == Diag::NonUnit)
            .then(|| first_zero(st.bytes(od, n * es), p, n))
            .flatten();
        match zero {
            Some(j) => Err(fail(
                GpuFailKind::Info,
                format!("trtrs: A({j},{j}) is exactly zero (info = {j})"),
            )),
            None => Ok(()),
        }
    })?;
    x.commit()
}
