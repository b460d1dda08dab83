//! Symmetric / Hermitian eigensolver launch code: syevd / heevd and syev / heev (both
//! cuSOLVER `Xsyevd`: the simple driver's contract, eigenvalues ascending and orthonormal
//! eigenvectors in A, is divide and conquer's too) and
//! syevr / heevr (scipy's default `eigh` driver: `Xsyevd` for all eigenvalues, `Xsyevdx` for a
//! value range `(vl, vu]` or an index range `il..=iu`, the same half-open and 1-based
//! conventions as LAPACK's).
//!
//! As LAPACK, syevd's eigenvectors (`jobz = 'V'`) overwrite A; otherwise A's referenced
//! triangle is destroyed, and the GPU path leaves it as cuSOLVER left it (callers that pass
//! `overwrite_a` see A changed, as with LAPACK). syevr returns the number found `m`, the first
//! `m` entries of `w` (ascending), the `n x m` eigenvectors in `Z`, and `isuppz` where LAPACK
//! defines it (all eigenvalues, or the index range `1..=n`): as documented, the first and last
//! rows (1-based) of each vector's nonzero entries in Z. (LAPACK's own values come from the
//! tridiagonal problem's vectors before the back-transformation and can be narrower than Z's
//! support: measured with OpenBLAS in single precision.) `abstol` asks LAPACK for at least that
//! accuracy; cuSOLVER's eigenvalues are as accurate as syevd's whatever it says.

use crate::call::{HostMat, Op, Piv};
use crate::gpu::exec::Exec;
use crate::gpu::fail::{cs_ok, fail, GResult, GpuFailKind};
use crate::gpu::finite::{Check, FinitePlan};
use crate::gpu::flags::{dtype_s, element, fill_s, i, ld, real_dtype_s};
use crate::gpu::lane::Lane;
use crate::gpu::layout::Layout;
use crate::gpu::svd::zero;
use crate::gpu::workspace::{Query, WsKey};
use crate::gpu::GpuBackend;
use crate::ops::{EigRange, Precision, Uplo};
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
            // syev / heev run as syevd: the same results, divide and conquer's speed
            Op::Syevd {
                vectors,
                uplo,
                n,
                a,
                w,
                ..
            } => syevd(b, lane, p, vectors, uplo, n, a, w),
            Op::Syevr {
                vectors,
                range,
                uplo,
                n,
                a,
                found,
                w,
                z,
                isuppz,
                ..
            } => syevr(
                b,
                lane,
                p,
                (vectors, range, uplo),
                n,
                a,
                (found, w, z, isuppz),
            ),
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
            rows: n,
            cols: m,
            what: "the eigenvectors",
        });
    }
    (input, out)
}

/// Device and host workspace of `Xsyevd` of order `n` (the lane's cache, else cuSOLVER).
fn syevd_ws(
    lane: &mut Lane,
    p: Precision,
    vectors: bool,
    uplo: Uplo,
    n: usize,
) -> GResult<(usize, usize)> {
    let flags = u32::from(vectors) | u32::from(uplo == Uplo::Lower) << 1;
    lane.workspace(WsKey::new(Query::Syevd, p, &[i(n)], flags), |h, prm| {
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
        Ok((dws, hws))
    })
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
    let (dws, hws) = syevd_ws(lane, p, vectors, uplo, n)?;
    let mut lay = Layout::default();
    let (oa, ow, owk) = (lay.dev(a.len() * es), lay.dev(n * rs), lay.workspace(dws));
    let oi = lay.status(4);
    let (input, outputs) = checks(oa, ow, n, n, uplo, vectors);
    let check_in = FinitePlan::inputs(&mut lay, &[input]);
    let check_out = FinitePlan::results(&mut lay, &outputs);
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's matrix (contract).
    unsafe { x.upload(&a, oa)? };
    x.inputs_ready()?;
    check_in.run(&mut x)?;
    let hw = x.host_ws(hws);
    let (h, prm) = x.solver()?;
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

/// cuSOLVER's range and the host values `(vl, vu, il, iu)` for a LAPACK range.
fn eig_range(r: EigRange) -> (cs::cusolverEigRange_t, f64, f64, i64, i64) {
    match r {
        EigRange::All => (
            cs::cusolverEigRange_t::CUSOLVER_EIG_RANGE_ALL,
            0.0,
            0.0,
            0,
            0,
        ),
        EigRange::Values { vl, vu } => (cs::cusolverEigRange_t::CUSOLVER_EIG_RANGE_V, vl, vu, 0, 0),
        EigRange::Index { il, iu } => (
            cs::cusolverEigRange_t::CUSOLVER_EIG_RANGE_I,
            0.0,
            0.0,
            il as i64,
            iu as i64,
        ),
    }
}

/// Whether LAPACK's syevr defines `isuppz` for this range (all eigenvalues, or the index range
/// covering all of them).
pub(crate) fn isuppz_defined(r: EigRange, n: usize) -> bool {
    match r {
        EigRange::All => true,
        EigRange::Index { il, iu } => il == 1 && iu == n,
        EigRange::Values { .. } => false,
    }
}

/// The first and last (1-based) rows of a column's nonzero entries (`(0, 0)` for a zero
/// column): LAPACK's `isuppz` pair for one eigenvector.
pub(crate) fn support(col: &[u8], p: Precision, n: usize) -> (i64, i64) {
    let nz = |i: &usize| element(&col[i * p.size()..], p) != (0.0, 0.0);
    match ((0..n).find(nz), (0..n).rev().find(nz)) {
        (Some(f), Some(l)) => (f as i64 + 1, l as i64 + 1),
        _ => (0, 0),
    }
}

/// The real-typed host value `v` as cuSOLVER reads `vl` / `vu`.
fn real_arg(p: Precision, v: f64) -> [u8; 8] {
    let mut b = [0u8; 8];
    if p.real_size() == 4 {
        b[..4].copy_from_slice(&(v as f32).to_ne_bytes());
    } else {
        b.copy_from_slice(&v.to_ne_bytes());
    }
    b
}

#[allow(clippy::too_many_arguments)]
unsafe fn syevr(
    b: &GpuBackend,
    lane: &mut Lane,
    p: Precision,
    (vectors, range, uplo): (bool, EigRange, Uplo),
    n: usize,
    a: HostMat,
    (found, w, z, isuppz): (Piv, *mut u8, HostMat, Piv),
) -> GResult<()> {
    let (es, rs) = (p.size(), p.real_size());
    let (cr, vl, vu, il, iu) = eig_range(range);
    if !(vl.is_finite() && vu.is_finite()) {
        return Err(fail(
            GpuFailKind::NonFinite,
            format!("the value range ({vl}, {vu}] is not finite"),
        ));
    }
    let all = range == EigRange::All;
    let (mut vlb, mut vub) = (real_arg(p, vl), real_arg(p, vu));
    let mut meig = 0i64;
    let (dws, hws) = if all {
        syevd_ws(lane, p, vectors, uplo, n)?
    } else {
        let flags = u32::from(vectors)
            | u32::from(uplo == Uplo::Lower) << 1
            | u32::from(matches!(range, EigRange::Index { .. })) << 2;
        let dims = [i(n), il, iu, vl.to_bits() as i64, vu.to_bits() as i64];
        lane.workspace(WsKey::new(Query::Syevdx, p, &dims, flags), |h, prm| {
            let (mut dws, mut hws, mut m) = (0usize, 0usize, 0i64);
            cs_ok(
                // SAFETY: a size query with null matrix pointers; vl / vu are host reals of
                // the call's real type.
                unsafe {
                    cs::cusolverDnXsyevdx_bufferSize(
                        h,
                        prm,
                        mode(vectors),
                        cr,
                        fill_s(uplo),
                        i(n),
                        dtype_s(p),
                        std::ptr::null(),
                        ld(n),
                        vlb.as_mut_ptr() as *mut c_void,
                        vub.as_mut_ptr() as *mut c_void,
                        il,
                        iu,
                        &mut m,
                        real_dtype_s(p),
                        std::ptr::null(),
                        dtype_s(p),
                        &mut dws,
                        &mut hws,
                    )
                },
                "cusolverDnXsyevdx_bufferSize",
            )?;
            Ok((dws, hws))
        })?
    };
    let mut lay = Layout::default();
    let (oa, ow, owk) = (lay.dev(a.len() * es), lay.dev(n * rs), lay.workspace(dws));
    let oi = lay.status(4);
    let (input, outputs) = checks(oa, ow, n, n, uplo, vectors);
    let check_in = FinitePlan::inputs(&mut lay, &[input]);
    let check_out = FinitePlan::results(&mut lay, &outputs);
    let mut x = Exec::begin(b, lane, p, &lay)?;
    // SAFETY: the caller's matrix (contract).
    unsafe { x.upload(&a, oa)? };
    x.inputs_ready()?;
    check_in.run(&mut x)?;
    // eigenvalues past the number found stay 0 (the check reads all n)
    zero(&x, ow, n * rs)?;
    let hw = x.host_ws(hws);
    let (h, prm) = x.solver()?;
    let r = if all {
        meig = n as i64;
        // SAFETY: device pointers in the arena; `hw` holds hws bytes; the handle is bound to
        // the compute stream.
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
        }
    } else {
        // SAFETY: as above; vl / vu are host reals, the count a host output.
        unsafe {
            cs::cusolverDnXsyevdx(
                h,
                prm,
                mode(vectors),
                cr,
                fill_s(uplo),
                i(n),
                dtype_s(p),
                x.ptr::<c_void>(oa),
                ld(n),
                vlb.as_mut_ptr() as *mut c_void,
                vub.as_mut_ptr() as *mut c_void,
                il,
                iu,
                &mut meig,
                real_dtype_s(p),
                x.ptr::<c_void>(ow),
                dtype_s(p),
                x.ptr::<c_void>(owk),
                dws,
                hw,
                hws,
                x.status_ptr::<i32>(oi),
            )
        }
    };
    cs_ok(r, "cusolverDnXsyevd(x)")?;
    x.info(oi, "syevr");
    check_out.run(&mut x)?;
    x.output_in_place(oa, a, es);
    x.finish()?;
    // syevdx returns the count on the host; it is read once the streams are idle
    let m = usize::try_from(meig)
        .ok()
        .filter(|&m| m <= n)
        .ok_or_else(|| fail(GpuFailKind::Error, format!("syevdx found {meig} of {n}")))?;
    x.output(ow, HostMat::new(w, m, 1, m.max(1)), rs);
    if vectors && m > 0 {
        x.output(
            oa,
            HostMat {
                rows: n,
                cols: m,
                ..z
            },
            es,
        );
    }
    x.output_ints(vec![m as i64], found);
    x.commit()?;
    if vectors && m > 0 && isuppz_defined(range, n) {
        let col = n * es;
        let sup: Vec<i64> = (0..m)
            .flat_map(|j| {
                // SAFETY: column j of the caller's z, just written (n rows of `es` bytes).
                let c = unsafe { std::slice::from_raw_parts(z.ptr.add(j * z.ld * es), col) };
                let (f, l) = support(c, p, n);
                [f, l]
            })
            .collect();
        for (j, v) in sup.into_iter().enumerate() {
            // SAFETY: isuppz holds 2 * max(1, m) integers (call contract).
            unsafe {
                match isuppz {
                    Piv::I32(q) => *q.add(j) = v as i32,
                    Piv::I64(q) => *q.add(j) = v,
                }
            }
        }
    }
    Ok(())
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
        assert!(matches!(
            out[1],
            Check::Dense {
                rows: 10,
                cols: 7,
                ..
            }
        ));
        assert_eq!(checks(0, 4096, 10, 10, Uplo::Lower, false).1.len(), 1);
    }

    #[test]
    fn isuppz_is_defined_for_all_eigenvalues_only() {
        assert!(isuppz_defined(EigRange::All, 5));
        assert!(isuppz_defined(EigRange::Index { il: 1, iu: 5 }, 5));
        assert!(!isuppz_defined(EigRange::Index { il: 2, iu: 5 }, 5));
        assert!(!isuppz_defined(EigRange::Values { vl: 0.0, vu: 1.0 }, 5));
    }

    #[test]
    fn support_is_the_first_and_last_nonzero_row() {
        let col: Vec<u8> = [0.0f64, 0.0, 3.0, 0.0, -1.0, 0.0]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert_eq!(support(&col, Precision::D, 6), (3, 5));
        let zero = vec![0u8; 48];
        assert_eq!(support(&zero, Precision::D, 6), (0, 0));
        // complex: an imaginary part alone makes an entry nonzero
        let c: Vec<u8> = [0.0f32, 0.0, 0.0, 2.0]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert_eq!(support(&c, Precision::C, 2), (2, 2));
    }

    #[test]
    fn ranges_map_to_cusolver_conventions() {
        let (r, vl, vu, ..) = eig_range(EigRange::Values { vl: -1.0, vu: 2.0 });
        assert_eq!(r, cs::cusolverEigRange_t::CUSOLVER_EIG_RANGE_V);
        assert_eq!((vl, vu), (-1.0, 2.0));
        let (r, .., il, iu) = eig_range(EigRange::Index { il: 2, iu: 4 });
        assert_eq!(
            (r, il, iu),
            (cs::cusolverEigRange_t::CUSOLVER_EIG_RANGE_I, 2, 4)
        );
        assert_eq!(&real_arg(Precision::C, 1.5)[..4], &1.5f32.to_ne_bytes());
        assert_eq!(real_arg(Precision::Z, 1.5), 1.5f64.to_ne_bytes());
    }
}
