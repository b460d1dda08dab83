//! SVD launch code for every job of gesdd and gesvd, any shape.
//!
//! * **Shape**: cuSOLVER's SVDs want `m >= n`; a wide A is decomposed as its conjugate
//!   transpose `T = A^H = P S Q^H`, so `U = Q` and `VT = P^H`.
//! * **Jobs**: [`SvdPlan`] turns LAPACK's jobs into what is computed (columns of U, rows of VT)
//!   and where each goes, A included: with `'O'` the vectors LAPACK puts in A go there;
//!   otherwise LAPACK destroys A, and the GPU path writes into it the part of the vectors that
//!   `'O'` would have put there (the first `min(m,n)` columns of U, or rows of VT), or, with no
//!   vectors, A as cuSOLVER's bidiagonal reduction left it. Either way a caller that lets LAPACK
//!   overwrite A (scipy's `overwrite_a`) sees it changed, as with LAPACK.
//! * **Methods**: vectors come from the polar-decomposition SVD (`Xgesvdp`, QDWH + syevd,
//!   several times faster than QR iteration); full left vectors of a strictly tall matrix from
//!   a QR first (`Xgeqrf`, then the polar SVD of the square R, then `U = Q diag(U_R, I)` by
//!   `ormqr`); singular values alone from `Xgesvd`. If the perturbation the polar SVD reports
//!   exceeds `max(m,n) * eps * sigma_max`, the call is re-run with `Xgesvd` before anything is
//!   written ([`crate::gpu::Done::RetryQr`]).
//! * **Non-finite data**: A is checked (gesdd reports `info = -4` for a NaN entry, gesvd
//!   iterates on it: the CPU library gives that outcome), and so are s, U and VT.

use crate::call::{HostMat, Op};
use crate::gpu::exec::Exec;
use crate::gpu::fail::{cb_ok, cs_ok, cu_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{
    diag_b, dtype_s, fill_b, i, ld, ones_bytes, op_b, real_dtype_s, scalar, side_b, typed_blas,
};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::qr::{geqrf_on, geqrf_ws, ormqr_on, ormqr_ws};
use crate::gpu::workspace::{Query, WsKey};
use crate::gpu::{Done, GpuBackend};
use crate::ops::{Diag, Precision, Routine, Side, SvdJob, Trans, Uplo};
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;
use std::ffi::c_void;

/// What A's own storage receives after the SVD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AOut {
    /// The first `min(m,n)` columns of U.
    U,
    /// The first `min(m,n)` rows of VT.
    Vt,
    /// A as the bidiagonal reduction left it (no vectors computed).
    Destroyed,
}

/// LAPACK's SVD jobs turned into what is computed and where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SvdPlan {
    pub(crate) m: usize,
    pub(crate) n: usize,
    /// `min(m, n)`.
    pub(crate) k: usize,
    /// Columns of U written to the caller's `u`.
    pub(crate) u_cols: usize,
    /// Rows of VT written to the caller's `vt`.
    pub(crate) vt_rows: usize,
    /// What A receives.
    pub(crate) a_out: AOut,
    /// Columns of U computed (0, k or m).
    pub(crate) need_u: usize,
    /// Rows of VT computed (0, k or n).
    pub(crate) need_vt: usize,
}

impl SvdPlan {
    /// The plan of a gesdd (`jobu == jobvt == jobz`) or gesvd call on an `m x n` matrix.
    pub(crate) fn new(
        routine: Routine,
        jobu: SvdJob,
        jobvt: SvdJob,
        m: usize,
        n: usize,
    ) -> SvdPlan {
        let k = m.min(n);
        let to_caller = |job: SvdJob, full: usize| match job {
            SvdJob::None | SvdJob::Overwrite => 0,
            SvdJob::Thin => k,
            SvdJob::Full => full,
        };
        let (u_cols, vt_rows) = match (routine, jobu) {
            // gesdd 'O': U to A and VT to vt when m >= n; U to u and VT to A otherwise
            (Routine::Gesdd, SvdJob::Overwrite) if m >= n => (0, k),
            (Routine::Gesdd, SvdJob::Overwrite) => (k, 0),
            _ => (to_caller(jobu, m), to_caller(jobvt, n)),
        };
        let a_out = match (routine, jobu, jobvt) {
            (Routine::Gesvd, SvdJob::Overwrite, _) => AOut::U,
            (Routine::Gesvd, _, SvdJob::Overwrite) => AOut::Vt,
            (Routine::Gesdd, SvdJob::Overwrite, _) if m >= n => AOut::U,
            (Routine::Gesdd, SvdJob::Overwrite, _) => AOut::Vt,
            _ if u_cols == 0 && vt_rows == 0 => AOut::Destroyed,
            _ if u_cols > 0 && (m >= n || vt_rows == 0) => AOut::U,
            _ => AOut::Vt,
        };
        let need_u = u_cols.max(if a_out == AOut::U { k } else { 0 });
        let need_vt = vt_rows.max(if a_out == AOut::Vt { k } else { 0 });
        SvdPlan {
            m,
            n,
            k,
            u_cols,
            vt_rows,
            a_out,
            need_u,
            need_vt,
        }
    }

    /// True when A itself is decomposed (`m >= n`); otherwise `T = A^H`.
    pub(crate) fn tall(&self) -> bool {
        self.m >= self.n
    }

    /// Rows of the decomposed matrix T (`max(m, n)`); it has `k` columns.
    pub(crate) fn rows(&self) -> usize {
        self.m.max(self.n)
    }

    /// Columns of T's left vectors needed (0, k or rows).
    pub(crate) fn t_left(&self) -> usize {
        if self.tall() {
            self.need_u
        } else {
            self.need_vt
        }
    }

    /// Whether T's right vectors are needed.
    pub(crate) fn t_right(&self) -> bool {
        if self.tall() {
            self.need_vt > 0
        } else {
            self.need_u > 0
        }
    }

    /// How T is decomposed (`qr`: the QR-iteration retry).
    pub(crate) fn method(&self, qr: bool) -> Method {
        let (tl, tr) = (self.t_left(), self.t_right());
        if tl == 0 && !tr {
            Method::Values
        } else if qr {
            Method::Qr
        } else if tl > self.k {
            Method::PolarFull
        } else {
            Method::Polar
        }
    }
}

/// How the decomposed matrix T is factorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// Singular values only: `Xgesvd('N', 'N')`.
    Values,
    /// Thin vectors: `Xgesvdp` (econ).
    Polar,
    /// All left vectors of a strictly tall T: `Xgeqrf`, `Xgesvdp` of R, `ormqr`.
    PolarFull,
    /// QR iteration, `Xgesvd`, with the jobs T needs (the retry after a rejected polar SVD).
    Qr,
}

/// Runs an SVD call; `qr` forces the QR-iteration SVD.
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
    let Op::Svd {
        routine,
        jobu,
        jobvt,
        m,
        n,
        a,
        s,
        u,
        vt,
    } = *op
    else {
        return Err(fail(GpuFailKind::Error, "not an SVD operation"));
    };
    let plan = SvdPlan::new(routine, jobu, jobvt, m, n);
    // SAFETY: forwarded.
    unsafe { svd(b, lane, p, &plan, qr, a, s, u, vt) }
}

/// Device and host workspace of `Xgesvdp` (economy, vectors) of a `rows x cols` matrix (the
/// lane's cache, else cuSOLVER).
pub(crate) fn gesvdp_ws(
    lane: &mut Lane,
    p: Precision,
    rows: usize,
    cols: usize,
) -> GResult<(usize, usize)> {
    lane.workspace(
        WsKey::new(Query::Gesvdp, p, &[i(rows), i(cols)], 0),
        |h, prm| {
            let (mut d, mut hw) = (0usize, 0usize);
            cs_ok(
                // SAFETY: a size query with null matrix pointers.
                unsafe {
                    cs::cusolverDnXgesvdp_bufferSize(
                        h,
                        prm,
                        cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR,
                        1,
                        i(rows),
                        i(cols),
                        dtype_s(p),
                        std::ptr::null(),
                        ld(rows),
                        real_dtype_s(p),
                        std::ptr::null(),
                        dtype_s(p),
                        std::ptr::null(),
                        ld(rows),
                        dtype_s(p),
                        std::ptr::null(),
                        ld(cols),
                        dtype_s(p),
                        &mut d,
                        &mut hw,
                    )
                },
                "cusolverDnXgesvdp_bufferSize",
            )?;
            Ok((d, hw))
        },
    )
}

/// `Xgesvd`'s job characters for T's needs.
pub(crate) fn gesvd_jobs(tl: usize, rows: usize, tr: bool) -> (i8, i8) {
    let ju = match tl {
        0 => b'N',
        t if t >= rows => b'A',
        _ => b'S',
    };
    (ju as i8, if tr { b'A' as i8 } else { b'N' as i8 })
}

/// Device and host workspace of `Xgesvd` with jobs `(ju, jv)` of a `rows x cols` matrix (the
/// lane's cache, else cuSOLVER).
pub(crate) fn gesvd_ws(
    lane: &mut Lane,
    p: Precision,
    (ju, jv): (i8, i8),
    rows: usize,
    cols: usize,
) -> GResult<(usize, usize)> {
    let flags = u32::from(ju as u8) | u32::from(jv as u8) << 8;
    lane.workspace(
        WsKey::new(Query::Gesvd, p, &[i(rows), i(cols)], flags),
        |h, prm| {
            let (mut d, mut hw) = (0usize, 0usize);
            cs_ok(
                // SAFETY: a size query with null matrix pointers.
                unsafe {
                    cs::cusolverDnXgesvd_bufferSize(
                        h,
                        prm,
                        ju,
                        jv,
                        i(rows),
                        i(cols),
                        dtype_s(p),
                        std::ptr::null(),
                        ld(rows),
                        real_dtype_s(p),
                        std::ptr::null(),
                        dtype_s(p),
                        std::ptr::null(),
                        ld(rows),
                        dtype_s(p),
                        std::ptr::null(),
                        ld(cols),
                        dtype_s(p),
                        &mut d,
                        &mut hw,
                    )
                },
                "cusolverDnXgesvd_bufferSize",
            )?;
            Ok((d, hw))
        },
    )
}

/// `dst (r x c, ld ldd) = src` or, with `adjoint`, `src^H` (src then `c x r`, ld `lds`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn geam(
    x: &Exec,
    (r, c): (usize, usize),
    src: usize,
    lds: usize,
    adjoint: bool,
    dst: usize,
    ldd: usize,
) -> GResult<()> {
    let p = x.p;
    let (one, zero) = (scalar(p, 1.0), scalar(p, 0.0));
    let t = if adjoint { Trans::Conj } else { Trans::No };
    cb_ok(
        // SAFETY: both matrices lie in the arena (caller's layout); beta = 0, so B (= dst) is
        // only named, not read; the handle is bound to the compute stream.
        unsafe {
            typed_blas!(
                p,
                cublasSgeam_64,
                cublasDgeam_64,
                cublasCgeam_64,
                cublasZgeam_64,
                (
                    x.blas(),
                    op_b(t, p),
                    op_b(Trans::No, p),
                    i(r),
                    i(c),
                    one.as_ptr(),
                    x.ptr::<u8>(src),
                    ld(lds),
                    zero.as_ptr(),
                    x.ptr::<u8>(dst),
                    ld(ldd),
                    x.ptr::<u8>(dst),
                    ld(ldd)
                )
            )
        },
        "cublas geam",
    )
}

/// Zeroes `bytes` at arena offset `off` on the compute stream.
pub(crate) fn zero(x: &Exec, off: usize, bytes: usize) -> GResult<()> {
    cu_ok(
        // SAFETY: the range lies in the arena (caller's layout).
        unsafe { cu::cuMemsetD8Async(x.addr(off), 0, bytes, x.lane.compute_raw) },
        "device memset",
    )
}

/// Writes `count` ones (from the ones vector at `ones`) every `stride` elements from `off`.
pub(crate) fn ones_strided(
    x: &Exec,
    ones: usize,
    count: usize,
    off: usize,
    stride: usize,
) -> GResult<()> {
    let p = x.p;
    cb_ok(
        // SAFETY: the ones vector holds >= count elements and the strided range lies in the
        // arena (caller's layout).
        unsafe {
            typed_blas!(
                p,
                cublasScopy_v2_64,
                cublasDcopy_v2_64,
                cublasCcopy_v2_64,
                cublasZcopy_v2_64,
                (
                    x.blas(),
                    i(count),
                    x.ptr::<u8>(ones),
                    1i64,
                    x.ptr::<u8>(off),
                    i(stride)
                )
            )
        },
        "cublas copy",
    )
}

/// Device offsets of everything an SVD uses.
struct Bufs {
    a: usize,
    t: usize,
    s: usize,
    /// T's left vectors (rows x tl, or rows x k scratch for the polar SVD).
    tu: usize,
    /// T's right vectors (k x k): V (polar) or V^H (QR iteration).
    tv: usize,
    /// Caller's U (m x need_u) and VT (need_vt x n).
    u: usize,
    vt: usize,
    /// The first k rows of VT, packed (when A gets them from a taller VT).
    avt: usize,
    /// PolarFull: R, U_R, identity, tau, ones.
    r: usize,
    ur: usize,
    id: usize,
    tau: usize,
    ones: usize,
    ws: usize,
}

/// Orders of the `PolarFull` extras and the workspace sizes of every step.
struct Sizes {
    dev_ws: usize,
    host_ws: usize,
    ormqr: usize,
    geqrf: (usize, usize),
    svd: (usize, usize),
}

#[allow(clippy::too_many_arguments)]
unsafe fn svd(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    plan: &SvdPlan,
    qr: bool,
    a: HostMat,
    s: *mut u8,
    u: HostMat,
    vt: HostMat,
) -> GResult<Done> {
    let (es, rs) = (p.size(), p.real_size());
    let (m, n, k) = (plan.m, plan.n, plan.k);
    let rows = plan.rows();
    let (tl, tr) = (plan.t_left(), plan.t_right());
    let method = plan.method(qr);
    let tall = plan.tall();
    let jobs = gesvd_jobs(tl, rows, tr);
    let sizes = {
        let (svd, geqrf, ormqr) = match method {
            Method::Values | Method::Qr => (gesvd_ws(lane, p, jobs, rows, k)?, (0, 0), 0),
            Method::Polar => (gesvdp_ws(lane, p, rows, k)?, (0, 0), 0),
            Method::PolarFull => (
                gesvdp_ws(lane, p, k, k)?,
                geqrf_ws(lane, p, rows, k)?,
                ormqr_ws(lane, p, Trans::No, (rows, rows, k))?,
            ),
        };
        Sizes {
            dev_ws: svd.0.max(geqrf.0).max(ormqr),
            host_ws: svd.1.max(geqrf.1),
            ormqr,
            geqrf,
            svd,
        }
    };

    // ---- layout
    let mut lay = Layout::default();
    let mut bf = Bufs {
        a: lay.dev(m * n * es),
        t: 0,
        s: lay.dev(k * rs),
        tu: 0,
        tv: 0,
        u: 0,
        vt: 0,
        avt: 0,
        r: 0,
        ur: 0,
        id: 0,
        tau: 0,
        ones: 0,
        ws: 0,
    };
    bf.t = if tall { bf.a } else { lay.dev(m * n * es) };
    let polar = matches!(method, Method::Polar | Method::PolarFull);
    bf.tu = match method {
        Method::Values => 0,
        Method::Polar => lay.dev(rows * k * es),
        Method::PolarFull => lay.dev(rows * rows * es),
        Method::Qr => {
            if tl > 0 {
                lay.dev(rows * tl * es)
            } else {
                0
            }
        }
    };
    bf.tv = if method != Method::Values && (polar || tr) {
        lay.dev(k * k * es)
    } else {
        0
    };
    if plan.need_u > 0 {
        // tall: U is T's left vectors; wide: U is T's V (polar) or (T's V^H)^H
        bf.u = match (tall, polar) {
            (true, _) => bf.tu,
            (false, true) => bf.tv,
            (false, false) => lay.dev(m * m * es),
        };
    }
    if plan.need_vt > 0 {
        bf.vt = match (tall, polar) {
            (true, false) => bf.tv,
            _ => lay.dev(plan.need_vt * n * es),
        };
    }
    if plan.a_out == AOut::Vt && plan.need_vt > k {
        bf.avt = lay.dev(k * n * es);
    }
    if method == Method::PolarFull {
        bf.r = lay.dev(k * k * es);
        bf.ur = lay.dev(k * k * es);
        bf.id = lay.dev(k * k * es);
        bf.tau = lay.dev(k * es);
        bf.ones = lay.dev(rows * es);
    }
    bf.ws = lay.workspace(sizes.dev_ws);
    let infos = [lay.status(4), lay.status(4), lay.status(4)];
    let smax = lay.status(8);
    let check_in = FinitePlan::inputs(
        &mut lay,
        &[Check::Dense {
            off: bf.a,
            rows: m,
            cols: n,
            what: "A",
        }],
    );
    let mut outs = vec![Check::Real {
        off: bf.s,
        count: k,
        what: "the singular values",
    }];
    if plan.need_u > 0 {
        outs.push(Check::Dense {
            off: bf.u,
            rows: m,
            cols: plan.need_u,
            what: "U",
        });
    }
    if plan.need_vt > 0 {
        outs.push(Check::Dense {
            off: bf.vt,
            rows: plan.need_vt,
            cols: n,
            what: "VT",
        });
    }
    let check_out = FinitePlan::results(&mut lay, &outs);

    // ---- run
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's matrix (contract).
    unsafe { x.upload(&a, bf.a)? };
    if method == Method::PolarFull {
        x.upload_bytes(&ones_bytes(p, rows), bf.ones)?;
    }
    x.inputs_ready()?;
    check_in.run(&mut x)?;
    if !tall {
        geam(&x, (n, m), bf.a, m, true, bf.t, n)?;
    }
    let hw = x.host_ws(sizes.host_ws);
    let mut err_sigma = 0.0f64;
    match method {
        Method::Values | Method::Qr => {
            // with job 'N' the vectors are not referenced: any arena address will do
            let ou = if tl > 0 { bf.tu } else { bf.s };
            let ov = if tr { bf.tv } else { bf.s };
            gesvd_on(
                &mut x,
                jobs,
                (rows, k),
                bf.t,
                (bf.s, ou, ov),
                (bf.ws, sizes.svd),
                hw,
                infos[0],
            )?;
        }
        Method::Polar => {
            err_sigma = gesvdp(
                &mut x,
                (rows, k),
                bf.t,
                (bf.s, bf.tu, bf.tv),
                (bf.ws, sizes.svd),
                hw,
                infos[0],
            )?;
        }
        Method::PolarFull => {
            // T = Q R; R = triu(T[:k, :k]) (a trmm by the identity reads only the triangle)
            geqrf_on(
                &mut x,
                rows,
                k,
                bf.t,
                bf.tau,
                infos[0],
                bf.ws,
                sizes.geqrf,
                hw,
            )?;
            zero(&x, bf.id, k * k * es)?;
            ones_strided(&x, bf.ones, k, bf.id, k + 1)?;
            let one = scalar(p, 1.0);
            cb_ok(
                // SAFETY: T (rows x k), I and R (k x k) lie in the arena; handle bound to the
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
                            x.ptr::<u8>(bf.t),
                            ld(rows),
                            x.ptr::<u8>(bf.id),
                            ld(k),
                            x.ptr::<u8>(bf.r),
                            ld(k)
                        )
                    )
                },
                "cublas trmm (R of the QR)",
            )?;
            // R = U_R S V_R^H
            err_sigma = gesvdp(
                &mut x,
                (k, k),
                bf.r,
                (bf.s, bf.ur, bf.tv),
                (bf.ws, sizes.svd),
                hw,
                infos[1],
            )?;
            // T's left vectors = Q [U_R 0; 0 I]
            zero(&x, bf.tu, rows * rows * es)?;
            geam(&x, (k, k), bf.ur, k, false, bf.tu, rows)?;
            ones_strided(&x, bf.ones, rows - k, bf.tu + (k * rows + k) * es, rows + 1)?;
            ormqr_on(
                &mut x,
                Trans::No,
                (rows, rows, k),
                bf.t,
                bf.tau,
                bf.tu,
                bf.ws,
                sizes.ormqr,
                infos[2],
            )?;
        }
    }
    // ---- T's vectors into the caller's U and VT
    if plan.need_u > 0 && !tall && !polar {
        // U = (T's V^H)^H
        geam(&x, (m, m), bf.tv, k, true, bf.u, m)?;
    }
    if plan.need_vt > 0 {
        match (tall, polar) {
            // VT = V^H
            (true, true) => geam(&x, (k, n), bf.tv, k, true, bf.vt, k)?,
            (true, false) => {}
            // VT = (T's left vectors)^H: need_vt x n from rows(=n) x need_vt
            (false, _) => geam(
                &x,
                (plan.need_vt, n),
                bf.tu,
                rows,
                true,
                bf.vt,
                plan.need_vt,
            )?,
        }
    }
    if bf.avt != 0 {
        geam(&x, (k, n), bf.vt, plan.need_vt, false, bf.avt, k)?;
    }
    if plan.a_out == AOut::Destroyed && !tall {
        // A gets the destroyed T back in A's shape
        geam(&x, (m, n), bf.t, n, true, bf.a, m)?;
    }
    if polar {
        cu_ok(
            // SAFETY: s[0] (one real) into the status region, both in the arena.
            unsafe {
                cu::cuMemcpyDtoDAsync_v2(
                    x.status_ptr::<u8>(smax) as usize as u64,
                    x.addr(bf.s),
                    rs,
                    x.lane.compute_raw,
                )
            },
            "copy of sigma_max",
        )?;
    }
    check_out.run(&mut x)?;

    // ---- results
    x.output(bf.s, HostMat::new(s, k, 1, k.max(1)), rs);
    if plan.u_cols > 0 {
        x.output(
            bf.u,
            HostMat {
                rows: m,
                cols: plan.u_cols,
                ..u
            },
            es,
        );
    }
    if plan.vt_rows > 0 {
        x.output(
            bf.vt,
            HostMat {
                rows: plan.vt_rows,
                cols: n,
                ..vt
            },
            es,
        );
    }
    match plan.a_out {
        AOut::U => x.output_in_place(
            bf.u,
            HostMat {
                rows: m,
                cols: k,
                ..a
            },
            es,
        ),
        AOut::Vt => x.output_in_place(
            if bf.avt != 0 { bf.avt } else { bf.vt },
            HostMat {
                rows: k,
                cols: n,
                ..a
            },
            es,
        ),
        AOut::Destroyed => x.output_in_place(bf.a, a, es),
    }
    let st = x.finish()?;
    if polar {
        let sigma_max = st.real(smax);
        if polar_rejected(err_sigma, sigma_max, rows, p) {
            return Ok(Done::RetryQr);
        }
    }
    x.commit().map(|()| Done::Ok)
}

/// Whether the polar SVD's reported perturbation is too large to accept its result.
pub(crate) fn polar_rejected(err_sigma: f64, sigma_max: f64, dim: usize, p: Precision) -> bool {
    let eps = if p.real_size() == 4 {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    };
    !err_sigma.is_finite() || !sigma_max.is_finite() || err_sigma > eps * dim as f64 * sigma_max
}

/// Queues `Xgesvd` with `jobs` of the packed `rows x cols` matrix at `t` (U with `ld = rows`,
/// VT with `ld = cols`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gesvd_on(
    x: &mut Exec,
    jobs: (i8, i8),
    (rows, cols): (usize, usize),
    t: usize,
    (s, uu, vt): (usize, usize, usize),
    (ws, sz): (usize, (usize, usize)),
    hw: *mut c_void,
    info: usize,
) -> GResult<()> {
    let (h, prm) = x.solver()?;
    let p = x.p;
    cs_ok(
        // SAFETY: device pointers in the arena; `hw` holds sz.1 bytes; the handle is bound to
        // the compute stream.
        unsafe {
            cs::cusolverDnXgesvd(
                h,
                prm,
                jobs.0,
                jobs.1,
                i(rows),
                i(cols),
                dtype_s(p),
                x.ptr::<c_void>(t),
                ld(rows),
                real_dtype_s(p),
                x.ptr::<c_void>(s),
                dtype_s(p),
                x.ptr::<c_void>(uu),
                ld(rows),
                dtype_s(p),
                x.ptr::<c_void>(vt),
                ld(cols),
                dtype_s(p),
                x.ptr::<c_void>(ws),
                sz.0,
                hw,
                sz.1,
                x.status_ptr::<i32>(info),
            )
        },
        "cusolverDnXgesvd",
    )?;
    x.info(info, "gesvd");
    Ok(())
}

/// Queues `Xgesvdp` (economy, vectors) of the packed `rows x cols` matrix at `t`; returns the
/// perturbation it reports.
pub(crate) fn gesvdp(
    x: &mut Exec,
    (rows, cols): (usize, usize),
    t: usize,
    (s, uu, v): (usize, usize, usize),
    (ws, sz): (usize, (usize, usize)),
    hw: *mut c_void,
    info: usize,
) -> GResult<f64> {
    let (h, prm) = x.solver()?;
    let p = x.p;
    let mut err = 0.0f64;
    cs_ok(
        // SAFETY: device pointers in the arena; `hw` holds sz.1 bytes; the perturbation is a
        // host output; the handle is bound to the compute stream.
        unsafe {
            cs::cusolverDnXgesvdp(
                h,
                prm,
                cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR,
                1,
                i(rows),
                i(cols),
                dtype_s(p),
                x.ptr::<c_void>(t),
                ld(rows),
                real_dtype_s(p),
                x.ptr::<c_void>(s),
                dtype_s(p),
                x.ptr::<c_void>(uu),
                ld(rows),
                dtype_s(p),
                x.ptr::<c_void>(v),
                ld(cols),
                dtype_s(p),
                x.ptr::<c_void>(ws),
                sz.0,
                hw,
                sz.1,
                x.status_ptr::<i32>(info),
                &mut err,
            )
        },
        "cusolverDnXgesvdp",
    )?;
    x.info(info, "gesvdp");
    Ok(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use SvdJob::{Full as A, None as N, Overwrite as O, Thin as S};

    fn plan(r: Routine, ju: SvdJob, jv: SvdJob, m: usize, n: usize) -> SvdPlan {
        SvdPlan::new(r, ju, jv, m, n)
    }

    #[test]
    fn gesdd_jobs_follow_lapack() {
        let g = Routine::Gesdd;
        // 'S': thin to u and vt; A (destroyed) gets U's columns when tall, VT's rows when wide
        let p = plan(g, S, S, 50, 30);
        assert_eq!((p.u_cols, p.vt_rows, p.a_out), (30, 30, AOut::U));
        assert_eq!((p.need_u, p.need_vt), (30, 30));
        assert_eq!(plan(g, S, S, 30, 50).a_out, AOut::Vt);
        // 'A': full
        let p = plan(g, A, A, 50, 30);
        assert_eq!((p.u_cols, p.vt_rows, p.need_u, p.need_vt), (50, 30, 50, 30));
        assert_eq!(p.method(false), Method::PolarFull);
        assert_eq!(p.method(true), Method::Qr);
        // square full = thin
        assert_eq!(plan(g, A, A, 40, 40).method(false), Method::Polar);
        // 'O': m >= n -> U into A, VT into vt; m < n -> U into u, VT into A
        let p = plan(g, O, O, 50, 30);
        assert_eq!((p.u_cols, p.vt_rows, p.a_out), (0, 30, AOut::U));
        let p = plan(g, O, O, 30, 50);
        assert_eq!((p.u_cols, p.vt_rows, p.a_out), (30, 0, AOut::Vt));
        assert_eq!((p.need_u, p.need_vt), (30, 30));
        // 'N': values only, A destroyed
        let p = plan(g, N, N, 30, 50);
        assert_eq!((p.need_u, p.need_vt, p.a_out), (0, 0, AOut::Destroyed));
        assert_eq!(p.method(false), Method::Values);
    }

    #[test]
    fn gesvd_mixed_jobs_compute_only_what_goes_somewhere() {
        let g = Routine::Gesvd;
        // 'O' for U: U's columns into A, nothing into u
        let p = plan(g, O, N, 50, 30);
        assert_eq!(
            (p.u_cols, p.vt_rows, p.a_out, p.need_u),
            (0, 0, AOut::U, 30)
        );
        assert_eq!((p.t_left(), p.t_right()), (30, false));
        // 'O' for VT on a wide matrix: T's left vectors give VT
        let p = plan(g, N, O, 30, 50);
        assert_eq!(
            (p.a_out, p.need_vt, p.t_left(), p.t_right()),
            (AOut::Vt, 30, 30, false)
        );
        // 'N' for U and 'A' for VT, wide: A gets VT's first rows (from a taller VT)
        let p = plan(g, N, A, 30, 50);
        assert_eq!(
            (p.a_out, p.need_u, p.need_vt, p.vt_rows),
            (AOut::Vt, 0, 50, 50)
        );
        assert_eq!(p.t_left(), 50);
        assert_eq!(p.method(false), Method::PolarFull);
        // 'S' for U, 'N' for VT, tall: no right vectors of T beyond the polar scratch
        let p = plan(g, S, N, 50, 30);
        assert_eq!((p.t_left(), p.t_right(), p.a_out), (30, false, AOut::U));
        // 'A' for U, 'S' for VT, wide: U = T's right vectors, VT = T's thin left ones; A (of
        // VT's shape) gets VT
        let p = plan(g, A, S, 30, 50);
        assert_eq!(
            (p.need_u, p.need_vt, p.t_left(), p.t_right()),
            (30, 30, 30, true)
        );
        assert_eq!(p.a_out, AOut::Vt);
    }

    #[test]
    fn every_job_pair_keeps_its_invariants() {
        let jobs = [N, S, A, O];
        for r in [Routine::Gesdd, Routine::Gesvd] {
            for &ju in &jobs {
                for &jv in &jobs {
                    if r == Routine::Gesdd && ju != jv {
                        continue;
                    }
                    if r == Routine::Gesvd && ju == O && jv == O {
                        continue;
                    }
                    for (m, n) in [(7, 7), (9, 4), (4, 9), (1, 5), (5, 1)] {
                        let p = plan(r, ju, jv, m, n);
                        let k = m.min(n);
                        assert!(p.need_u >= p.u_cols && p.need_vt >= p.vt_rows);
                        assert!([0, k, m].contains(&p.need_u), "{p:?}");
                        assert!([0, k, n].contains(&p.need_vt), "{p:?}");
                        match p.a_out {
                            AOut::U => assert!(p.need_u >= k),
                            AOut::Vt => assert!(p.need_vt >= k),
                            AOut::Destroyed => assert_eq!((p.need_u, p.need_vt), (0, 0)),
                        }
                        // the caller's vt is always the whole computed VT
                        assert!(p.vt_rows == 0 || p.vt_rows == p.need_vt, "{p:?}");
                        assert!(p.t_left() <= p.rows());
                    }
                }
            }
        }
    }

    #[test]
    fn gesvd_jobs_for_t() {
        assert_eq!(gesvd_jobs(0, 10, false), (b'N' as i8, b'N' as i8));
        assert_eq!(gesvd_jobs(4, 10, true), (b'S' as i8, b'A' as i8));
        assert_eq!(gesvd_jobs(10, 10, false), (b'A' as i8, b'N' as i8));
    }

    #[test]
    fn the_polar_guard_rejects_large_or_non_finite_perturbations() {
        let d = Precision::D;
        assert!(!polar_rejected(0.0, 10.0, 1000, d));
        assert!(!polar_rejected(1e-12, 10.0, 1000, d));
        assert!(polar_rejected(1e-9, 10.0, 1000, d));
        assert!(polar_rejected(f64::NAN, 10.0, 1000, d));
        assert!(polar_rejected(0.0, f64::INFINITY, 1000, d));
        // single precision has its own epsilon
        assert!(!polar_rejected(1e-5, 10.0, 1000, Precision::C));
    }

    proptest::proptest! {
        /// Any shape: every job's plan computes what goes somewhere, within the shapes LAPACK
        /// allows, and the method is the values-only one exactly when nothing else is needed.
        #[test]
        fn any_shape_keeps_the_plan_invariants(m in 1usize..300, n in 1usize..300) {
            let all = [N, S, A, O];
            for r in [Routine::Gesdd, Routine::Gesvd] {
                for &ju in &all {
                    for &jv in &all {
                        if (r == Routine::Gesdd && ju != jv) || (ju == O && jv == O && r == Routine::Gesvd) {
                            continue;
                        }
                        let p = plan(r, ju, jv, m, n);
                        let k = m.min(n);
                        proptest::prop_assert!(p.need_u <= m && p.need_vt <= n);
                        proptest::prop_assert!(p.u_cols <= p.need_u && p.vt_rows <= p.need_vt);
                        proptest::prop_assert!(p.t_left() <= p.rows());
                        proptest::prop_assert_eq!(
                            p.method(false) == Method::Values,
                            p.need_u == 0 && p.need_vt == 0
                        );
                        if p.method(false) == Method::PolarFull {
                            proptest::prop_assert!(p.t_left() > k);
                        }
                    }
                }
            }
        }
    }
}
