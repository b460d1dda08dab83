//! Symmetric / Hermitian eigensolver launch code: syevd / heevd (cuSOLVER `Xsyevd`).
//!
//! As LAPACK, the eigenvectors (`jobz = 'V'`) overwrite A; without vectors A's referenced
//! triangle is destroyed, and the GPU path leaves it as cuSOLVER's reduction left it (callers
//! that pass `overwrite_a` see A changed, as with LAPACK).

use crate::call::{HostMat, Op};
use crate::gpu::exec::Exec;
use crate::gpu::fail::{cs_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{dtype_s, fill_s, i, ld, real_dtype_s};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::GpuBackend;
use crate::ops::{Precision, Uplo};
use cudarc::cusolver::sys as cs;
use std::ffi::c_void;

/// Runs an eigensolver call.
///
/// # Safety
/// The operands' pointers are valid for their extents (the call's contract).
pub(crate) unsafe fn run(b: &GpuBackend, lane: &mut Lane, p: Precision, op: &Op) -> GResult<()> {
    // SAFETY: forwarded.
    unsafe {
        match *op {
            Op::Syevd {
                vectors,
                uplo,
                n,
                a,
                w,
            } => syevd(b, lane, p, vectors, uplo, n, a, w),
            _ => Err(fail(GpuFailKind::Error, "not an eigensolver operation")),
        }
    }
}

fn mode(vectors: bool) -> cs::cusolverEigMode_t {
    if vectors {
        cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR
    } else {
        cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_NOVECTOR
    }
}

/// The input check of a symmetric / Hermitian eigenproblem and the checks of its results.
pub(crate) fn checks(
    oa: usize,
    ow: usize,
    n: usize,
    m: usize,
    uplo: Uplo,
    vectors: bool,
) -> (Check, Vec<Check>) {
    let input = Check::Symmetric {
        off: oa,
        n,
        uplo,
        hermitian: true,
        what: "A",
    };
    let mut out = vec![Check::Real {
        off: ow,
        count: m,
        what: "the eigenvalues",
    }];
    if vectors {
        out.push(Check::Dense {
            off: oa,
            count: n * m,
            what: "the eigenvectors",
        });
    }
    (input, out)
}

#[allow(clippy::too_many_arguments)]
unsafe fn syevd(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    vectors: bool,
    uplo: Uplo,
    n: usize,
    a: HostMat,
    w: *mut u8,
) -> GResult<()> {
    let (es, rs) = (p.size(), p.real_size());
    let (h, prm) = b.lane_solver(lane)?;
    let (mut dws, mut hws) = (0usize, 0usize);
    cs_ok(
        // SAFETY: a size query with null matrix pointers.
        unsafe {
            cs::cusolverDnXsyevd_bufferSize(
                h,
                prm,
                mode(vectors),
                fill_s(uplo),
                i(n),
                dtype_s(p),
                std::ptr::null(),
                ld(n),
                real_dtype_s(p),
                std::ptr::null(),
                dtype_s(p),
                &mut dws,
                &mut hws,
            )
        },
        "cusolverDnXsyevd_bufferSize",
    )?;
    let mut lay = Layout::default();
    let (oa, ow, owk) = (lay.dev(a.len() * es), lay.dev(n * rs), lay.dev(dws));
    let oi = lay.status(4);
    let (input, outputs) = checks(oa, ow, n, n, uplo, vectors);
    let check_in = FinitePlan::new(&mut lay, p, &[input]);
    let check_out = FinitePlan::new(&mut lay, p, &outputs);
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's matrix (contract).
    unsafe { x.upload(&a, oa)? };
    x.inputs_ready()?;
    check_in.run(&mut x)?;
    let hw = x.host_ws(hws);
    cs_ok(
        // SAFETY: device pointers in the arena; host workspace of hws bytes; the handle is
        // bound to the compute stream.
        unsafe {
            cs::cusolverDnXsyevd(
                h,
                prm,
                mode(vectors),
                fill_s(uplo),
                i(n),
                dtype_s(p),
                x.ptr::<c_void>(oa),
                ld(n),
                real_dtype_s(p),
                x.ptr::<c_void>(ow),
                dtype_s(p),
                x.ptr::<c_void>(owk),
                dws,
                hw,
                hws,
                x.status_ptr::<i32>(oi),
            )
        },
        "cusolverDnXsyevd",
    )?;
    x.info(oi, "syevd");
    check_out.run(&mut x)?;
    x.output(ow, HostMat::new(w, n, 1, n.max(1)), rs);
    // the eigenvectors, or A as the reduction destroyed it
    x.output_in_place(oa, a, es);
    x.finish()?;
    x.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigenvectors_are_checked_only_when_computed() {
        let (input, out) = checks(0, 4096, 10, 7, Uplo::Upper, true);
        assert!(matches!(
            input,
            Check::Symmetric {
                n: 10,
                hermitian: true,
                ..
            }
        ));
        assert_eq!(out.len(), 2);
        assert!(matches!(out[0], Check::Real { count: 7, .. }));
        assert!(matches!(out[1], Check::Dense { count: 70, .. }));
        assert_eq!(checks(0, 4096, 10, 10, Uplo::Lower, false).1.len(), 1);
    }
}
