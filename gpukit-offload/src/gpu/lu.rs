//! LU launch code: getrf, getrs, gesv, getri (cuSOLVER `Xgetrf` / `Xgetrs`, 64-bit pivots).
//!
//! cuSOLVER has no getri: the inverse is the solve `A X = I` with the given LU factors
//! (`Xgetrs` on an identity made on the device). LAPACK's getri returns `info = i` when
//! `U(i, i)` is exactly zero; the GPU path reads U's diagonal beside the solve and leaves such a
//! call to the CPU library.

use crate::call::{HostMat, Op, Piv};
use crate::gpu::exec::{first_zero, i64_bytes, read_piv, Exec};
use crate::gpu::fail::{cs_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{dtype_s, i, ld, ones_bytes, op_s};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::svd::{ones_strided, zero};
use crate::gpu::workspace::{Query, WsKey};
use crate::gpu::GpuBackend;
use crate::ops::{Precision, Trans};
use cudarc::cusolver::sys as cs;
use std::ffi::c_void;

/// Runs an LU call.
///
/// # Safety
/// The operands' pointers are valid for their extents (the call's contract).
pub(crate) unsafe fn run(b: &GpuBackend, lane: &mut Lane, p: Precision, op: &Op) -> GResult<()> {
    // SAFETY: forwarded.
    unsafe {
        match *op {
            Op::Getrf { m, n, a, ipiv } => getrf(b, lane, p, m, n, a, ipiv),
            Op::Getrs {
                trans,
                n,
                nrhs,
                a,
                ipiv,
                b: bm,
            } => getrs(b, lane, p, trans, n, nrhs, a, ipiv, bm),
            Op::Gesv {
                n,
                nrhs,
                a,
                ipiv,
                b: bm,
            } => gesv(b, lane, p, n, nrhs, a, ipiv, bm),
            Op::Getri { n, a, ipiv } => getri(b, lane, p, n, a, ipiv),
            _ => Err(fail(GpuFailKind::Error, "not an LU operation")),
        }
    }
}

/// Device and host workspace of `Xgetrf` for an `m x n` matrix (the lane's cache, else
/// cuSOLVER).
pub(crate) fn getrf_ws(
    lane: &mut Lane,
    p: Precision,
    m: usize,
    n: usize,
) -> GResult<(usize, usize)> {
    lane.workspace(WsKey::new(Query::Getrf, p, &[i(m), i(n)], 0), |h, prm| {
        let (mut d, mut hw) = (0usize, 0usize);
        cs_ok(
            // SAFETY: a size query with a null matrix pointer (allowed by cuSOLVER).
            unsafe {
                cs::cusolverDnXgetrf_bufferSize(
                    h,
                    prm,
                    i(m),
                    i(n),
                    dtype_s(p),
                    std::ptr::null(),
                    ld(m),
                    dtype_s(p),
                    &mut d,
                    &mut hw,
                )
            },
            "cusolverDnXgetrf_bufferSize",
        )?;
        Ok((d, hw))
    })
}

/// Queues `Xgetrf` of the packed `m x n` matrix at `oa` (pivots to `op`, info to status `oi`,
/// device workspace at `ow`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn getrf_on(
    x: &mut Exec,
    m: usize,
    n: usize,
    oa: usize,
    op: usize,
    oi: usize,
    ow: usize,
    ws: (usize, usize),
) -> GResult<()> {
    let (h, prm) = x.solver()?;
    let hw = x.host_ws(ws.1);
    let p = x.p;
    cs_ok(
        // SAFETY: device pointers in the arena laid out for this call; host workspace of ws.1
        // bytes; the handle is bound to the compute stream.
        unsafe {
            cs::cusolverDnXgetrf(
                h,
                prm,
                i(m),
                i(n),
                dtype_s(p),
                x.ptr::<c_void>(oa),
                ld(m),
                x.ptr::<i64>(op),
                dtype_s(p),
                x.ptr::<c_void>(ow),
                ws.0,
                hw,
                ws.1,
                x.status_ptr::<i32>(oi),
            )
        },
        "cusolverDnXgetrf",
    )?;
    x.info(oi, "getrf");
    Ok(())
}

/// Queues `Xgetrs` with the LU at `oa`, pivots at `op` and the `n x nrhs` right-hand sides at
/// `ob` (info to status `oi`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn getrs_on(
    x: &mut Exec,
    trans: Trans,
    n: usize,
    nrhs: usize,
    oa: usize,
    op: usize,
    ob: usize,
    oi: usize,
) -> GResult<()> {
    let (h, prm) = x.solver()?;
    let p = x.p;
    cs_ok(
        // SAFETY: device pointers in the arena; handle bound to the compute stream.
        unsafe {
            cs::cusolverDnXgetrs(
                h,
                prm,
                op_s(trans, p),
                i(n),
                i(nrhs),
                dtype_s(p),
                x.ptr::<c_void>(oa),
                ld(n),
                x.ptr::<i64>(op),
                dtype_s(p),
                x.ptr::<c_void>(ob),
                ld(n),
                x.status_ptr::<i32>(oi),
            )
        },
        "cusolverDnXgetrs",
    )?;
    x.info(oi, "getrs");
    Ok(())
}

unsafe fn getrf(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    m: usize,
    n: usize,
    a: HostMat,
    ipiv: Piv,
) -> GResult<()> {
    let es = p.size();
    let mn = m.min(n);
    let ws = getrf_ws(lane, p, m, n)?;
    let mut lay = Layout::default();
    let (oa, op, ow) = (lay.dev(a.len() * es), lay.dev(8 * mn), lay.workspace(ws.0));
    let oi = lay.status(4);
    let checks = FinitePlan::inputs(
        &mut lay,
        &[Check::Dense {
            off: oa,
            rows: m,
            cols: n,
            what: "A",
        }],
    );
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's matrix (contract).
    unsafe { x.upload(&a, oa)? };
    x.inputs_ready()?;
    checks.run(&mut x)?;
    getrf_on(&mut x, m, n, oa, op, oi, ow, ws)?;
    x.output_in_place(oa, a, es);
    x.output_piv(op, ipiv, mn);
    x.finish()?;
    x.commit()
}

#[allow(clippy::too_many_arguments)]
unsafe fn getrs(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    trans: Trans,
    n: usize,
    nrhs: usize,
    a: HostMat,
    ipiv: Piv,
    bm: HostMat,
) -> GResult<()> {
    let es = p.size();
    let mut lay = Layout::default();
    let (oa, op, ob) = (
        lay.dev(a.len() * es),
        lay.dev(8 * n),
        lay.dev(bm.len() * es),
    );
    let oi = lay.status(4);
    let checks = FinitePlan::inputs(
        &mut lay,
        &[
            Check::Dense {
                off: oa,
                rows: n,
                cols: n,
                what: "the LU factors",
            },
            Check::Dense {
                off: ob,
                rows: n,
                cols: nrhs,
                what: "B",
            },
        ],
    );
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract): `ipiv` holds n integers.
    let piv = unsafe { read_piv(ipiv, n) };
    // SAFETY: as above.
    unsafe {
        x.upload(&a, oa)?;
        x.upload_bytes(i64_bytes(&piv), op)?;
        x.upload(&bm, ob)?;
    }
    x.inputs_ready()?;
    checks.run(&mut x)?;
    getrs_on(&mut x, trans, n, nrhs, oa, op, ob, oi)?;
    x.output_in_place(ob, bm, es);
    x.finish()?;
    x.commit()
}

#[allow(clippy::too_many_arguments)]
unsafe fn gesv(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    n: usize,
    nrhs: usize,
    a: HostMat,
    ipiv: Piv,
    bm: HostMat,
) -> GResult<()> {
    let es = p.size();
    let ws = getrf_ws(lane, p, n, n)?;
    let mut lay = Layout::default();
    let (oa, op, ob, ow) = (
        lay.dev(a.len() * es),
        lay.dev(8 * n),
        lay.dev(bm.len() * es),
        lay.workspace(ws.0),
    );
    let (oi, oi2) = (lay.status(4), lay.status(4));
    let check_a = FinitePlan::inputs(
        &mut lay,
        &[Check::Dense {
            off: oa,
            rows: n,
            cols: n,
            what: "A",
        }],
    );
    let b_check = Check::Dense {
        off: ob,
        rows: n,
        cols: nrhs,
        what: "B",
    };
    let check_b = FinitePlan::inputs(&mut lay, &[b_check]);
    let check_ab = FinitePlan::inputs(
        &mut lay,
        &[
            Check::Dense {
                off: oa,
                rows: n,
                cols: n,
                what: "A",
            },
            b_check,
        ],
    );
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // a small call uploads and checks A and B together (one copy, one launch); a large one
    // uploads B while A is being factorized
    let together = x.small();
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
    getrf_on(&mut x, n, n, oa, op, oi, ow, ws)?;
    if !together {
        // SAFETY: as above.
        unsafe { x.upload(&bm, ob)? };
        x.inputs_ready()?;
        check_b.run(&mut x)?;
    }
    getrs_on(&mut x, Trans::No, n, nrhs, oa, op, ob, oi2)?;
    x.output_in_place(oa, a, es);
    x.output_piv(op, ipiv, n);
    x.output_in_place(ob, bm, es);
    x.finish()?;
    x.commit()
}

unsafe fn getri(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    n: usize,
    a: HostMat,
    ipiv: Piv,
) -> GResult<()> {
    let es = p.size();
    let mut lay = Layout::default();
    let (oa, op, ox, ones) = (
        lay.dev(a.len() * es),
        lay.dev(8 * n),
        lay.dev(n * n * es),
        lay.dev(n * es),
    );
    let (oi, od) = (lay.status(4), lay.status(n * es));
    let check_in = FinitePlan::inputs(
        &mut lay,
        &[Check::Dense {
            off: oa,
            rows: n,
            cols: n,
            what: "the LU factors",
        }],
    );
    let check_out = FinitePlan::results(
        &mut lay,
        &[Check::Dense {
            off: ox,
            rows: n,
            cols: n,
            what: "the inverse",
        }],
    );
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract): `ipiv` holds n integers.
    let piv = unsafe { read_piv(ipiv, n) };
    // SAFETY: as above.
    unsafe { x.upload(&a, oa)? };
    x.upload_bytes(i64_bytes(&piv), op)?;
    x.upload_bytes(&ones_bytes(p, n), ones)?;
    x.inputs_ready()?;
    check_in.run(&mut x)?;
    x.status_strided(oa, n, n + 1, od)?;
    zero(&x, ox, n * n * es)?;
    ones_strided(&x, ones, n, ox, n + 1)?;
    getrs_on(&mut x, Trans::No, n, n, oa, op, ox, oi)?;
    check_out.run(&mut x)?;
    x.output_in_place(ox, a, es);
    x.finish_with(|st| match first_zero(st.bytes(od, n * es), p, n) {
        Some(j) => Err(fail(
            GpuFailKind::Info,
            format!("getri: U({j},{j}) is exactly zero (info = {j})"),
        )),
        None => Ok(()),
    })?;
    x.commit()
}
