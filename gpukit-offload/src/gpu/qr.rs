//! QR launch code: geqrf (cuSOLVER `Xgeqrf`), orgqr / ungqr, and the application of Q (legacy
//! `ormqr` / `unmqr`) used by the full SVD and by gelsd. cuSOLVER has no 64-bit form of the last
//! two: their orders are bounded by [`crate::gpu::unsupported`].

use crate::call::{HostMat, Op};
use crate::gpu::exec::Exec;
use crate::gpu::fail::{cs_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{dtype_s, i, i32d, ld, op_s, side_s, typed_solver};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::workspace::{Query, WsKey};
use crate::gpu::GpuBackend;
use crate::ops::{Precision, Side, Trans};
use cudarc::cusolver::sys as cs;
use std::ffi::c_void;

/// Runs a QR call.
///
/// # Safety
/// The operands' pointers are valid for their extents (the call's contract).
pub(crate) unsafe fn run(b: &GpuBackend, lane: &mut Lane, p: Precision, op: &Op) -> GResult<()> {
    // SAFETY: forwarded.
    unsafe {
        match *op {
            Op::Geqrf { m, n, a, tau } => geqrf(b, lane, p, m, n, a, tau),
            Op::Orgqr { m, n, k, a, tau } => orgqr(b, lane, p, (m, n, k), a, tau),
            _ => Err(fail(GpuFailKind::Error, "not a QR operation")),
        }
    }
}

/// Device and host workspace of `Xgeqrf` of an `m x n` matrix (the lane's cache, else
/// cuSOLVER).
pub(crate) fn geqrf_ws(
    lane: &mut Lane,
    p: Precision,
    m: usize,
    n: usize,
) -> GResult<(usize, usize)> {
    lane.workspace(WsKey::new(Query::Geqrf, p, &[i(m), i(n)], 0), |h, prm| {
        let (mut d, mut hw) = (0usize, 0usize);
        cs_ok(
            // SAFETY: a size query with null matrix pointers.
            unsafe {
                cs::cusolverDnXgeqrf_bufferSize(
                    h,
                    prm,
                    i(m),
                    i(n),
                    dtype_s(p),
                    std::ptr::null(),
                    ld(m),
                    dtype_s(p),
                    std::ptr::null(),
                    dtype_s(p),
                    &mut d,
                    &mut hw,
                )
            },
            "cusolverDnXgeqrf_bufferSize",
        )?;
        Ok((d, hw))
    })
}

/// Queues `Xgeqrf` of the packed `m x n` matrix at `oa` (tau to `ot`, info to status `oi`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn geqrf_on(
    x: &mut Exec,
    m: usize,
    n: usize,
    oa: usize,
    ot: usize,
    oi: usize,
    ow: usize,
    ws: (usize, usize),
    hw: *mut c_void,
) -> GResult<()> {
    let (h, prm) = x.solver()?;
    let p = x.p;
    cs_ok(
        // SAFETY: device pointers in the arena; `hw` holds ws.1 bytes; the handle is bound to
        // the compute stream.
        unsafe {
            cs::cusolverDnXgeqrf(
                h,
                prm,
                i(m),
                i(n),
                dtype_s(p),
                x.ptr::<c_void>(oa),
                ld(m),
                dtype_s(p),
                x.ptr::<c_void>(ot),
                dtype_s(p),
                x.ptr::<c_void>(ow),
                ws.0,
                hw,
                ws.1,
                x.status_ptr::<i32>(oi),
            )
        },
        "cusolverDnXgeqrf",
    )?;
    x.info(oi, "geqrf");
    Ok(())
}

/// Device workspace (bytes) of applying `op(Q)` of a QR with `k` reflectors of `m` rows from
/// the left to an `m x n` matrix (the lane's cache, else cuSOLVER).
pub(crate) fn ormqr_ws(
    lane: &mut Lane,
    p: Precision,
    trans: Trans,
    (m, n, k): (usize, usize, usize),
) -> GResult<usize> {
    let key = WsKey::new(Query::Ormqr, p, &[i(m), i(n), i(k)], trans as u32);
    lane.workspace(key, |h, _| {
        let mut lwork = 0i32;
        cs_ok(
            // SAFETY: a size query; cuSOLVER does not read the (null) matrices.
            unsafe {
                typed_solver!(
                    p,
                    cusolverDnSormqr_bufferSize,
                    cusolverDnDormqr_bufferSize,
                    cusolverDnCunmqr_bufferSize,
                    cusolverDnZunmqr_bufferSize,
                    (
                        h,
                        side_s(Side::Left),
                        op_s(trans, p),
                        i32d(m),
                        i32d(n),
                        i32d(k),
                        std::ptr::null::<u8>(),
                        i32d(m.max(1)),
                        std::ptr::null::<u8>(),
                        std::ptr::null::<u8>(),
                        i32d(m.max(1)),
                        &mut lwork
                    )
                )
            },
            "cusolver ormqr_bufferSize",
        )?;
        Ok((lwork.max(0) as usize * p.size(), 0))
    })
    .map(|(d, _)| d)
}

/// Queues C = op(Q) C, Q from the `k` reflectors at `oa` (`m` rows, packed) and tau at `ot`,
/// C the packed `m x n` matrix at `oc` (info to status `oi`, `wsb` bytes of workspace at `ow`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ormqr_on(
    x: &mut Exec,
    trans: Trans,
    (m, n, k): (usize, usize, usize),
    oa: usize,
    ot: usize,
    oc: usize,
    ow: usize,
    wsb: usize,
    oi: usize,
) -> GResult<()> {
    let (h, _) = x.solver()?;
    let p = x.p;
    cs_ok(
        // SAFETY: device pointers in the arena; the workspace holds `wsb` bytes; handle bound
        // to the compute stream.
        unsafe {
            typed_solver!(
                p,
                cusolverDnSormqr,
                cusolverDnDormqr,
                cusolverDnCunmqr,
                cusolverDnZunmqr,
                (
                    h,
                    side_s(Side::Left),
                    op_s(trans, p),
                    i32d(m),
                    i32d(n),
                    i32d(k),
                    x.ptr::<u8>(oa),
                    i32d(m.max(1)),
                    x.ptr::<u8>(ot),
                    x.ptr::<u8>(oc),
                    i32d(m.max(1)),
                    x.ptr::<u8>(ow),
                    i32d(wsb / p.size()),
                    x.status_ptr::<i32>(oi)
                )
            )
        },
        "cusolver ormqr",
    )?;
    x.info(oi, "ormqr");
    Ok(())
}

#[allow(clippy::too_many_arguments)]
unsafe fn geqrf(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    m: usize,
    n: usize,
    a: HostMat,
    tau: *mut u8,
) -> GResult<()> {
    let es = p.size();
    let mn = m.min(n);
    let ws = geqrf_ws(lane, p, m, n)?;
    let mut lay = Layout::default();
    let (oa, ot, ow) = (lay.dev(a.len() * es), lay.dev(mn * es), lay.workspace(ws.0));
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
    let hw = x.host_ws(ws.1);
    geqrf_on(&mut x, m, n, oa, ot, oi, ow, ws, hw)?;
    x.output(ot, HostMat::new(tau, mn, 1, mn.max(1)), es);
    x.output_in_place(oa, a, es);
    x.finish()?;
    x.commit()
}

/// The first `n` columns of Q from `k` reflectors (legacy `orgqr` / `ungqr`).
unsafe fn orgqr(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    (m, n, k): (usize, usize, usize),
    a: HostMat,
    tau: *mut u8,
) -> GResult<()> {
    let es = p.size();
    let key = WsKey::new(Query::Orgqr, p, &[i(m), i(n), i(k)], 0);
    let (wsb, _) = lane.workspace(key, |h, _| {
        let mut lwork = 0i32;
        cs_ok(
            // SAFETY: a size query; cuSOLVER does not read the (null) matrices.
            unsafe {
                typed_solver!(
                    p,
                    cusolverDnSorgqr_bufferSize,
                    cusolverDnDorgqr_bufferSize,
                    cusolverDnCungqr_bufferSize,
                    cusolverDnZungqr_bufferSize,
                    (
                        h,
                        i32d(m),
                        i32d(n),
                        i32d(k),
                        std::ptr::null::<u8>(),
                        i32d(m.max(1)),
                        std::ptr::null::<u8>(),
                        &mut lwork
                    )
                )
            },
            "cusolver orgqr_bufferSize",
        )?;
        Ok((lwork.max(0) as usize * es, 0))
    })?;
    let mut lay = Layout::default();
    let (oa, ot, ow) = (lay.dev(a.len() * es), lay.dev(k * es), lay.workspace(wsb));
    let oi = lay.status(4);
    // orgqr reads the k reflector columns and tau (columns k.. are set to the identity's)
    let checks = FinitePlan::inputs(
        &mut lay,
        &[
            Check::Dense {
                off: oa,
                rows: m,
                cols: k,
                what: "the reflectors",
            },
            Check::Dense {
                off: ot,
                rows: k,
                cols: 1,
                what: "tau",
            },
        ],
    );
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's operands (contract): `tau` holds k elements.
    unsafe {
        x.upload(&a, oa)?;
        x.upload(&HostMat::input(tau, k, 1, k.max(1)), ot)?;
    }
    x.inputs_ready()?;
    checks.run(&mut x)?;
    let (h, _) = x.solver()?;
    cs_ok(
        // SAFETY: device pointers in the arena; the workspace holds `wsb` bytes; handle bound
        // to the compute stream.
        unsafe {
            typed_solver!(
                p,
                cusolverDnSorgqr,
                cusolverDnDorgqr,
                cusolverDnCungqr,
                cusolverDnZungqr,
                (
                    h,
                    i32d(m),
                    i32d(n),
                    i32d(k),
                    x.ptr::<u8>(oa),
                    i32d(m.max(1)),
                    x.ptr::<u8>(ot),
                    x.ptr::<u8>(ow),
                    i32d(wsb / es),
                    x.status_ptr::<i32>(oi)
                )
            )
        },
        "cusolver orgqr",
    )?;
    x.info(oi, "orgqr");
    x.output_in_place(oa, a, es);
    x.finish()?;
    x.commit()
}
