//! Cholesky launch code: potrf, potrs, posv (cuSOLVER `Xpotrf` / `Xpotrs`), potri (the
//! legacy 32-bit `potri`: cuSOLVER has no 64-bit form).

use crate::call::{HostMat, Op};
use crate::gpu::exec::Exec;
use crate::gpu::fail::{cs_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{dtype_s, fill_s, i, i32d, ld, typed_solver};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::workspace::{Query, WsKey};
use crate::gpu::GpuBackend;
use crate::ops::{Diag, Precision, Uplo};
use cudarc::cusolver::sys as cs;
use std::ffi::c_void;

/// Runs a Cholesky call.
///
/// # Safety
/// The operands' pointers are valid for their extents (the call's contract).
pub(crate) unsafe fn run(b: &GpuBackend, lane: &mut Lane, p: Precision, op: &Op) -> GResult<()> {
    // SAFETY: forwarded.
    unsafe {
        match *op {
            Op::Potrf { uplo, n, a } => potrf(b, lane, p, uplo, n, a),
            Op::Potrs {
                uplo,
                n,
                nrhs,
                a,
                b: bm,
            } => solve(b, lane, p, false, uplo, n, nrhs, a, bm),
            Op::Posv {
                uplo,
                n,
                nrhs,
                a,
                b: bm,
            } => solve(b, lane, p, true, uplo, n, nrhs, a, bm),
            Op::Potri { uplo, n, a } => potri(b, lane, p, uplo, n, a),
            _ => Err(fail(GpuFailKind::Error, "not a Cholesky operation")),
        }
    }
}

/// Device and host workspace of `Xpotrf` of order `n` (the lane's cache, else cuSOLVER).
pub(crate) fn potrf_ws(
    lane: &mut Lane,
    p: Precision,
    uplo: Uplo,
    n: usize,
) -> GResult<(usize, usize)> {
    let key = WsKey::new(Query::Potrf, p, &[i(n)], u32::from(uplo == Uplo::Lower));
    lane.workspace(key, |h, prm| {
        let (mut d, mut hw) = (0usize, 0usize);
        cs_ok(
            // SAFETY: a size query with a null matrix pointer.
            unsafe {
                cs::cusolverDnXpotrf_bufferSize(
                    h,
                    prm,
                    fill_s(uplo),
                    i(n),
                    dtype_s(p),
                    std::ptr::null(),
                    ld(n),
                    dtype_s(p),
                    &mut d,
                    &mut hw,
                )
            },
            "cusolverDnXpotrf_bufferSize",
        )?;
        Ok((d, hw))
    })
}

/// Queues `Xpotrf` of the packed matrix at `oa` (info to status `oi`, workspace at `ow`).
pub(crate) fn potrf_on(
    x: &mut Exec,
    uplo: Uplo,
    n: usize,
    oa: usize,
    oi: usize,
    ow: usize,
    ws: (usize, usize),
) -> GResult<()> {
    let (h, prm) = x.solver()?;
    let hw = x.host_ws(ws.1);
    let p = x.p;
    cs_ok(
        // SAFETY: device pointers in the arena; host workspace of ws.1 bytes; the handle is
        // bound to the compute stream.
        unsafe {
            cs::cusolverDnXpotrf(
                h,
                prm,
                fill_s(uplo),
                i(n),
                dtype_s(p),
                x.ptr::<c_void>(oa),
                ld(n),
                dtype_s(p),
                x.ptr::<c_void>(ow),
                ws.0,
                hw,
                ws.1,
                x.status_ptr::<i32>(oi),
            )
        },
        "cusolverDnXpotrf",
    )?;
    x.info(oi, "potrf");
    Ok(())
}

unsafe fn potrf(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    uplo: Uplo,
    n: usize,
    a: HostMat,
) -> GResult<()> {
    let es = p.size();
    let ws = potrf_ws(lane, p, uplo, n)?;
    let mut lay = Layout::default();
    let (oa, ow) = (lay.dev(a.len() * es), lay.workspace(ws.0));
    let oi = lay.status(4);
    let checks = FinitePlan::inputs(
        &mut lay,
        &[Check::Symmetric {
            off: oa,
            n,
            uplo,
            hermitian: true,
            what: "A",
        }],
    );
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's matrix (contract).
    unsafe { x.upload(&a, oa)? };
    x.inputs_ready()?;
    checks.run(&mut x)?;
    potrf_on(&mut x, uplo, n, oa, oi, ow, ws)?;
    x.output_in_place(oa, a, es);
    x.finish()?;
    x.commit()
}

/// potrs (`factor` false: A holds the factor) or posv (`factor` true: factorize first).
#[allow(clippy::too_many_arguments)]
unsafe fn solve(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    factor: bool,
    uplo: Uplo,
    n: usize,
    nrhs: usize,
    a: HostMat,
    bm: HostMat,
) -> GResult<()> {
    let es = p.size();
    let ws = if factor {
        potrf_ws(lane, p, uplo, n)?
    } else {
        (0, 0)
    };
    let mut lay = Layout::default();
    let (oa, ob, ow) = (
        lay.dev(a.len() * es),
        lay.dev(bm.len() * es),
        lay.workspace(ws.0),
    );
    let (oi, oi2) = (lay.status(4), lay.status(4));
    let a_check = if factor {
        Check::Symmetric {
            off: oa,
            n,
            uplo,
            hermitian: true,
            what: "A",
        }
    } else {
        Check::Triangle {
            off: oa,
            n,
            uplo,
            diag: Diag::NonUnit,
            what: "the Cholesky factor",
        }
    };
    let b_check = Check::Dense {
        off: ob,
        rows: n,
        cols: nrhs,
        what: "B",
    };
    let check_a = FinitePlan::inputs(&mut lay, &[a_check]);
    let check_b = FinitePlan::inputs(&mut lay, &[b_check]);
    let check_ab = FinitePlan::inputs(&mut lay, &[a_check, b_check]);
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // A and B go up and are checked together (one copy, one launch) unless a large A is
    // factorized first: then B goes up meanwhile
    let together = x.small() || !factor;
    // SAFETY: the caller's operands (contract).
    unsafe { x.upload(&a, oa)? };
    if together {
        // SAFETY: as above.
        unsafe { x.upload(&bm, ob)? };
        x.inputs_ready()?;
        check_ab.run(&mut x)?;
    } else {
        x.inputs_ready()?;
        check_a.run(&mut x)?;
    }
    if factor {
        potrf_on(&mut x, uplo, n, oa, oi, ow, ws)?;
        x.output_in_place(oa, a, es);
    }
    if !together {
        // SAFETY: as above.
        unsafe { x.upload(&bm, ob)? };
        x.inputs_ready()?;
        check_b.run(&mut x)?;
    }
    let (h, prm) = x.solver()?;
    cs_ok(
        // SAFETY: device pointers in the arena; handle bound to the compute stream.
        unsafe {
            cs::cusolverDnXpotrs(
                h,
                prm,
                fill_s(uplo),
                i(n),
                i(nrhs),
                dtype_s(p),
                x.ptr::<c_void>(oa),
                ld(n),
                dtype_s(p),
                x.ptr::<c_void>(ob),
                ld(n),
                x.status_ptr::<i32>(oi2),
            )
        },
        "cusolverDnXpotrs",
    )?;
    x.info(oi2, "potrs");
    x.output_in_place(ob, bm, es);
    x.finish()?;
    x.commit()
}

/// The inverse from a Cholesky factor, into the factor's triangle (the other one is left as it
/// was, as LAPACK does).
unsafe fn potri(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    uplo: Uplo,
    n: usize,
    a: HostMat,
) -> GResult<()> {
    let es = p.size();
    let key = WsKey::new(Query::Potri, p, &[i(n)], u32::from(uplo == Uplo::Lower));
    let (wsb, _) = lane.workspace(key, |h, _| {
        let mut lwork = 0i32;
        cs_ok(
            // SAFETY: a size query; cuSOLVER does not read the (null) matrix.
            unsafe {
                typed_solver!(
                    p,
                    cusolverDnSpotri_bufferSize,
                    cusolverDnDpotri_bufferSize,
                    cusolverDnCpotri_bufferSize,
                    cusolverDnZpotri_bufferSize,
                    (
                        h,
                        fill_s(uplo),
                        i32d(n),
                        std::ptr::null_mut::<u8>(),
                        i32d(n.max(1)),
                        &mut lwork
                    )
                )
            },
            "cusolver potri_bufferSize",
        )?;
        Ok((lwork.max(0) as usize * es, 0))
    })?;
    let mut lay = Layout::default();
    let (oa, ow) = (lay.dev(a.len() * es), lay.workspace(wsb));
    let oi = lay.status(4);
    let check_in = FinitePlan::inputs(
        &mut lay,
        &[Check::Triangle {
            off: oa,
            n,
            uplo,
            diag: Diag::NonUnit,
            what: "the Cholesky factor",
        }],
    );
    let check_out = FinitePlan::results(
        &mut lay,
        &[Check::Symmetric {
            off: oa,
            n,
            uplo,
            hermitian: true,
            what: "the inverse",
        }],
    );
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's matrix (contract).
    unsafe { x.upload(&a, oa)? };
    x.inputs_ready()?;
    check_in.run(&mut x)?;
    let (h, _) = x.solver()?;
    cs_ok(
        // SAFETY: device pointers in the arena; the workspace holds `wsb` bytes; handle bound
        // to the compute stream.
        unsafe {
            typed_solver!(
                p,
                cusolverDnSpotri,
                cusolverDnDpotri,
                cusolverDnCpotri,
                cusolverDnZpotri,
                (
                    h,
                    fill_s(uplo),
                    i32d(n),
                    x.ptr::<u8>(oa),
                    i32d(n.max(1)),
                    x.ptr::<u8>(ow),
                    i32d(wsb / es),
                    x.status_ptr::<i32>(oi)
                )
            )
        },
        "cusolver potri",
    )?;
    x.info(oi, "potri");
    check_out.run(&mut x)?;
    x.output_in_place(oa, a, es);
    x.finish()?;
    x.commit()
}
