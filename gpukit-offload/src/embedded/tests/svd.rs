//! gesdd, gesvd on matrices with known singular values: every job (`A`, `S`, `O` into A, `N`),
//! `m < n` and `m >= n`, `A = U diag(s) VT`, orthonormal U and VT, descending values, A left
//! alone where LAPACK destroys it.

use super::*;

type Gesdd<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut i32,
    *mut i32,
);
type GesddC<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut i32,
    *mut i32,
);
type Gesvd<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut i32,
);
type GesvdC<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut i32,
);

/// `U diag(d) V^H` with descending distinct singular values `d` in `[1, 3]`.
pub(super) fn known_svd<E: T>(rng: &mut Rng, m: usize, n: usize, pad: usize) -> (Vec<f64>, Mat<E>) {
    let k = m.min(n);
    let mut d: Vec<f64> = (0..k)
        .map(|i| 3.0 - 2.0 * (i as f64 + 0.5 + 0.3 * rng.uniform()) / k as f64)
        .collect();
    d.sort_by(|a, b| b.total_cmp(a));
    let u = orthonormal(rng, m, k, E::COMPLEX);
    let v = orthonormal(rng, n, k, E::COMPLEX);
    (d.clone(), Mat::from_ref(&u.mul(&diag(&d)).mul(&v.h()), pad))
}

/// The result of one SVD call.
pub(super) struct SvdOut<E> {
    pub(super) info: i32,
    pub(super) s: Vec<f64>,
    pub(super) u: Mat<E>,
    pub(super) vt: Mat<E>,
}

/// Calls gesdd (`jobu == jobvt`, `gesdd = true`) or gesvd with a queried workspace; U is
/// `m x ucols`, VT `vtrows x n`.
#[allow(clippy::too_many_arguments)]
pub(super) fn svd_call<E: T>(
    gesdd: bool,
    jobu: u8,
    jobvt: u8,
    a: &mut Mat<E>,
    ucols: usize,
    vtrows: usize,
    pad: usize,
    lwork: Option<i32>,
) -> SvdOut<E>
where
    E::R: T,
{
    let (m, n) = (a.rows, a.cols);
    let k = m.min(n);
    let mut s = vec![E::R::zero(); k.max(1)];
    let mut u = Mat::<E>::filled(m, ucols.max(1), pad, poison());
    let mut vt = Mat::<E>::filled(vtrows, n.max(1), pad, poison());
    let mut iwork = vec![0i32; 8 * k.max(1)];
    let mut rwork = vec![E::R::zero(); 7 * k.max(1) * (k.max(1) + 2) + 5 * (m + n)];
    let mut info = 99;
    let (ldu, ldvt) = (u.ld(), vt.ld());
    let mut go = |work: &mut [E], lw: i32, a: &mut Mat<E>, info: &mut i32| {
        // SAFETY: arrays sized for the dimensions.
        unsafe {
            match (gesdd, E::COMPLEX) {
                (true, false) => {
                    let f: Gesdd<E, E::R> = sym(&name::<E>("gesdd"));
                    f(
                        &ch(jobu),
                        &(m as i32),
                        &(n as i32),
                        a.ptr(),
                        &a.ld(),
                        s.as_mut_ptr(),
                        u.ptr(),
                        &ldu,
                        vt.ptr(),
                        &ldvt,
                        work.as_mut_ptr(),
                        &lw,
                        iwork.as_mut_ptr(),
                        info,
                    )
                }
                (true, true) => {
                    let f: GesddC<E, E::R> = sym(&name::<E>("gesdd"));
                    f(
                        &ch(jobu),
                        &(m as i32),
                        &(n as i32),
                        a.ptr(),
                        &a.ld(),
                        s.as_mut_ptr(),
                        u.ptr(),
                        &ldu,
                        vt.ptr(),
                        &ldvt,
                        work.as_mut_ptr(),
                        &lw,
                        rwork.as_mut_ptr(),
                        iwork.as_mut_ptr(),
                        info,
                    )
                }
                (false, false) => {
                    let f: Gesvd<E, E::R> = sym(&name::<E>("gesvd"));
                    f(
                        &ch(jobu),
                        &ch(jobvt),
                        &(m as i32),
                        &(n as i32),
                        a.ptr(),
                        &a.ld(),
                        s.as_mut_ptr(),
                        u.ptr(),
                        &ldu,
                        vt.ptr(),
                        &ldvt,
                        work.as_mut_ptr(),
                        &lw,
                        info,
                    )
                }
                (false, true) => {
                    let f: GesvdC<E, E::R> = sym(&name::<E>("gesvd"));
                    f(
                        &ch(jobu),
                        &ch(jobvt),
                        &(m as i32),
                        &(n as i32),
                        a.ptr(),
                        &a.ld(),
                        s.as_mut_ptr(),
                        u.ptr(),
                        &ldu,
                        vt.ptr(),
                        &ldvt,
                        work.as_mut_ptr(),
                        &lw,
                        rwork.as_mut_ptr(),
                        info,
                    )
                }
            }
        }
    };
    let lw = match lwork {
        Some(l) => l,
        None => {
            let mut q = [E::zero()];
            go(&mut q, -1, a, &mut info);
            assert_eq!(info, 0, "query");
            q[0].to_c().re as i32
        }
    };
    let mut work = vec![E::zero(); lw.max(1) as usize];
    go(&mut work, lw, a, &mut info);
    SvdOut {
        info,
        s: s.iter().take(k).map(|v| v.to_c().re).collect(),
        u,
        vt,
    }
}

/// LAPACK's documented minimum `lwork` of gesdd.
fn gesdd_lwork(jobz: u8, m: usize, n: usize, complex: bool) -> usize {
    let (mn, mx) = (m.min(n), m.max(n));
    if mn == 0 {
        return 1;
    }
    match (complex, jobz) {
        (true, b'N') => 2 * mn + mx,
        (true, b'O') => 2 * mn * mn + 2 * mn + mx,
        (true, _) => mn * mn + 2 * mn + mx,
        (false, b'N') => 3 * mn + mx.max(7 * mn),
        (false, b'O') => 3 * mn + mx.max(5 * mn * mn + 4 * mn),
        (false, b'S') => 4 * mn * mn + 7 * mn,
        (false, _) => 4 * mn * mn + 6 * mn + mx,
    }
}

/// Checks values and (where computed) vectors: `uk` (m x k) and `vtk` (k x n).
#[allow(clippy::too_many_arguments)]
fn check_parts<E: T>(
    a0: &Ref,
    d: &[f64],
    s: &[f64],
    uk: Option<Ref>,
    vtk: Option<Ref>,
    what: &str,
) {
    let (m, n) = (a0.rows, a0.cols);
    let k = m.min(n);
    let tol = E::EPS * 32.0 * (m.max(n) as f64 + 1.0) * 3.0;
    for i in 0..k {
        assert!(
            (s[i] - d[i]).abs() <= tol,
            "{what}: s[{i}] = {} vs {}",
            s[i],
            d[i]
        );
        if i > 0 {
            assert!(s[i] <= s[i - 1], "{what}: descending");
        }
    }
    if let Some(u) = &uk {
        assert_close(
            &u.h().mul(u),
            &Ref::identity(u.cols),
            tol,
            &format!("{what}: U^H U"),
        );
    }
    if let Some(vt) = &vtk {
        assert_close(
            &vt.mul(&vt.h()),
            &Ref::identity(vt.rows),
            tol,
            &format!("{what}: VT VT^H"),
        );
    }
    if let (Some(u), Some(vt)) = (uk, vtk) {
        let rec = u.cols(0, k).mul(&diag(s)).mul(&vt.rows(0, k));
        assert_close(
            &rec,
            a0,
            tol * (a0.norm() + 1.0),
            &format!("{what}: U S VT = A"),
        );
    }
}

fn check_gesdd<E: T>(j: usize, m: usize, n: usize, pad: usize, seed: u64)
where
    E::R: T,
{
    let jobz = [b'A', b'S', b'O', b'N'][j];
    let rng = &mut Rng::new(seed);
    let (d, mut a) = known_svd::<E>(rng, m, n, pad);
    let a0 = a.to_ref();
    let before = a.clone();
    let k = m.min(n);
    let (ucols, vtrows) = match jobz {
        b'A' => (m, n),
        b'S' => (k, k),
        b'O' if m >= n => (0, n),
        b'O' => (m, 0),
        _ => (0, 0),
    };
    let out = svd_call(true, jobz, jobz, &mut a, ucols, vtrows, pad, None);
    assert_eq!(out.info, 0);
    a.assert_padding();
    out.u.assert_padding();
    out.vt.assert_padding();
    if k == 0 {
        return;
    }
    let (uk, vtk) = match jobz {
        b'A' => (Some(out.u.to_ref()), Some(out.vt.to_ref())),
        b'S' => (Some(out.u.to_ref()), Some(out.vt.to_ref())),
        b'O' if m >= n => (Some(a.to_ref().cols(0, n)), Some(out.vt.to_ref())),
        b'O' => (Some(out.u.to_ref()), Some(a.to_ref().rows(0, m))),
        _ => (None, None),
    };
    if jobz != b'O' {
        assert_eq!(
            format!("{:?}", a.data),
            format!("{:?}", before.data),
            "A untouched"
        );
    }
    check_parts::<E>(&a0, &d, &out.s, uk, vtk, &format!("gesdd {}", jobz as char));
}

mod gesdd {
    use super::*;
    use proptest::prelude::*;
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn s(j in 0usize..4, m in 0usize..10, n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_gesdd::<f32>(j, m, n, pad, seed) }
        #[test]
        fn d(j in 0usize..4, m in 0usize..10, n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_gesdd::<f64>(j, m, n, pad, seed) }
        #[test]
        fn c(j in 0usize..4, m in 0usize..10, n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_gesdd::<c32>(j, m, n, pad, seed) }
        #[test]
        fn z(j in 0usize..4, m in 0usize..10, n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_gesdd::<c64>(j, m, n, pad, seed) }
    }
}

/// The gesdd query answers LAPACK's documented minimum for each job.
#[test]
fn gesdd_query_answers() {
    for (m, n) in [(0, 3), (5, 3), (3, 5), (7, 7)] {
        for jobz in [b'A', b'S', b'O', b'N'] {
            let mut a = Mat::<f64>::filled(m, n, 0, 1.0);
            let f: Gesdd<f64, f64> = sym("dgesdd_");
            let mut work = [0.0];
            let mut info = 99;
            let (mut s, mut u, mut vt, mut iw) = ([0.0; 8], [0.0; 64], [0.0; 64], [0; 64]);
            // SAFETY: a query writes work[0] only.
            unsafe {
                f(
                    &ch(jobz),
                    &(m as i32),
                    &(n as i32),
                    a.ptr(),
                    &a.ld(),
                    s.as_mut_ptr(),
                    u.as_mut_ptr(),
                    &8,
                    vt.as_mut_ptr(),
                    &8,
                    work.as_mut_ptr(),
                    &-1,
                    iw.as_mut_ptr(),
                    &mut info,
                )
            };
            assert_eq!(info, 0);
            assert_eq!(
                work[0] as usize,
                gesdd_lwork(jobz, m, n, false),
                "{m}x{n} {}",
                jobz as char
            );
        }
    }
}

fn check_gesvd<E: T>(ju: usize, jv: usize, m: usize, n: usize, pad: usize, seed: u64)
where
    E::R: T,
{
    let (jobu, jobvt) = ([b'A', b'S', b'O', b'N'][ju], [b'A', b'S', b'O', b'N'][jv]);
    if jobu == b'O' && jobvt == b'O' {
        return;
    }
    let rng = &mut Rng::new(seed);
    let (d, mut a) = known_svd::<E>(rng, m, n, pad);
    let a0 = a.to_ref();
    let before = a.clone();
    let k = m.min(n);
    let ucols = match jobu {
        b'A' => m,
        b'S' => k,
        _ => 0,
    };
    let vtrows = match jobvt {
        b'A' => n,
        b'S' => k,
        _ => 0,
    };
    let out = svd_call(false, jobu, jobvt, &mut a, ucols, vtrows, pad, None);
    assert_eq!(out.info, 0);
    a.assert_padding();
    if k == 0 {
        return;
    }
    let uk = match jobu {
        b'A' | b'S' => Some(out.u.to_ref()),
        b'O' => Some(a.to_ref().cols(0, k)),
        _ => None,
    };
    let vtk = match jobvt {
        b'A' | b'S' => Some(out.vt.to_ref()),
        b'O' => Some(a.to_ref().rows(0, k)),
        _ => None,
    };
    if jobu != b'O' && jobvt != b'O' {
        assert_eq!(
            format!("{:?}", a.data),
            format!("{:?}", before.data),
            "A untouched"
        );
    }
    check_parts::<E>(
        &a0,
        &d,
        &out.s,
        uk,
        vtk,
        &format!("gesvd {}{}", jobu as char, jobvt as char),
    );
}

mod gesvd {
    use super::*;
    use proptest::prelude::*;
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn s(ju in 0usize..4, jv in 0usize..4, m in 0usize..9, n in 0usize..9, pad in 0usize..3, seed in any::<u64>()) { check_gesvd::<f32>(ju, jv, m, n, pad, seed) }
        #[test]
        fn d(ju in 0usize..4, jv in 0usize..4, m in 0usize..9, n in 0usize..9, pad in 0usize..3, seed in any::<u64>()) { check_gesvd::<f64>(ju, jv, m, n, pad, seed) }
        #[test]
        fn c(ju in 0usize..4, jv in 0usize..4, m in 0usize..9, n in 0usize..9, pad in 0usize..3, seed in any::<u64>()) { check_gesvd::<c32>(ju, jv, m, n, pad, seed) }
        #[test]
        fn z(ju in 0usize..4, jv in 0usize..4, m in 0usize..9, n in 0usize..9, pad in 0usize..3, seed in any::<u64>()) { check_gesvd::<c64>(ju, jv, m, n, pad, seed) }
    }
}

/// A small lwork is accepted (the backend needs no caller workspace) and larger shapes take
/// faer's QR-first and threaded paths.
#[test]
fn svd_lenient_lwork_and_large() {
    let rng = &mut Rng::new(9);
    let (d, mut a) = known_svd::<f64>(rng, 12, 5, 1);
    let a0 = a.to_ref();
    let out = svd_call(true, b'S', b'S', &mut a, 5, 5, 0, Some(1));
    assert_eq!(out.info, 0);
    check_parts::<f64>(
        &a0,
        &d,
        &out.s,
        Some(out.u.to_ref()),
        Some(out.vt.to_ref()),
        "lwork = 1",
    );
    check_gesdd::<f64>(0, 160, 60, 1, 10);
    check_gesdd::<c32>(1, 50, 140, 0, 11);
    check_gesvd::<c64>(2, 0, 130, 70, 1, 12);
}
