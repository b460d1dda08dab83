//! syev/heev, syevd/heevd, syevr/heevr on Hermitian matrices with known eigenvalues: ascending values,
//! `A V = V diag(w)`, orthonormal V, every range (all, `(vl, vu]`, `il..=iu`), `isuppz`,
//! workspace queries with LAPACK's minimum sizes, the unread triangle.

use super::*;

type Syev<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut i32,
);
type Heev<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut R,
    *mut i32,
);
type Syevd<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut i32,
    *const i32,
    *mut i32,
);
type Heevd<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *mut E,
    *const i32,
    *mut R,
    *const i32,
    *mut i32,
    *const i32,
    *mut i32,
);
type Syevr<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const c_char,
    *const i32,
    *mut E,
    *const i32,
    *const R,
    *const R,
    *const i32,
    *const i32,
    *const R,
    *mut i32,
    *mut R,
    *mut E,
    *const i32,
    *mut i32,
    *mut E,
    *const i32,
    *mut i32,
    *const i32,
    *mut i32,
);
type Heevr<E, R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const c_char,
    *const i32,
    *mut E,
    *const i32,
    *const R,
    *const R,
    *const i32,
    *const i32,
    *const R,
    *mut i32,
    *mut R,
    *mut E,
    *const i32,
    *mut i32,
    *mut E,
    *const i32,
    *mut R,
    *const i32,
    *mut i32,
    *const i32,
    *mut i32,
);

/// A Hermitian matrix `Q diag(d) Q^H` with distinct eigenvalues `d` (ascending, spaced at
/// least `1/n`), and its storage in one triangle (NaN elsewhere, NaN imaginary diagonal).
pub(super) fn hermitian<E: T>(
    rng: &mut Rng,
    n: usize,
    pad: usize,
    lower: bool,
) -> (Vec<f64>, Ref, Mat<E>) {
    let mut d: Vec<f64> = (0..n)
        .map(|i| -2.0 + 4.0 * (i as f64 + 0.5 + 0.3 * rng.uniform()) / n as f64)
        .collect();
    d.sort_by(f64::total_cmp);
    let q = orthonormal(rng, n, n, E::COMPLEX);
    let h = q.mul(&diag(&d)).mul(&q.h());
    let mut a = Mat::<E>::from_ref(&h, pad);
    let stored = a.to_ref().expand_triangle(lower, true);
    for j in 0..n {
        for i in 0..n {
            let keep = if lower { i >= j } else { i <= j };
            if !keep {
                a.set(i, j, nan());
            } else if i == j && E::COMPLEX {
                a.set(i, j, E::from_c(c64::new(stored.at(i, i).re, f64::NAN)));
            }
        }
    }
    (d, stored, a)
}

fn uplo(lower: bool) -> c_char {
    ch(if lower { b'L' } else { b'U' })
}

/// LAPACK's minimum `(lwork, lrwork, liwork)` of `?syevd`/`?heevd`.
fn evd_sizes(n: usize, vectors: bool, complex: bool) -> (usize, usize, usize) {
    match (n <= 1, vectors, complex) {
        (true, _, _) => (1, 1, 1),
        (false, true, false) => (1 + 6 * n + 2 * n * n, 1, 3 + 5 * n),
        (false, false, false) => (2 * n + 1, 1, 1),
        (false, true, true) => (2 * n + n * n, 1 + 5 * n + 2 * n * n, 3 + 5 * n),
        (false, false, true) => (n + 1, n, 1),
    }
}

/// Calls syevd/heevd with a queried workspace of exactly the answered sizes.
pub(super) fn evd<E: T>(vectors: bool, lower: bool, a: &mut Mat<E>, w: &mut [E::R]) -> i32
where
    E::R: T,
{
    let n = a.rows;
    let jobz = ch(if vectors { b'V' } else { b'N' });
    let (mut wq, mut rq, mut iq) = ([E::zero()], [E::R::zero()], [0i32]);
    let mut info = 99;
    let call = |a: &mut Mat<E>,
                w: &mut [E::R],
                work: &mut [E],
                rwork: &mut [E::R],
                iwork: &mut [i32],
                sizes: (i32, i32, i32),
                info: &mut i32| {
        // SAFETY: arrays sized for the dimensions (a query writes the first elements only).
        unsafe {
            if E::COMPLEX {
                let f: Heevd<E, E::R> = sym(&name::<E>("heevd"));
                f(
                    &jobz,
                    &uplo(lower),
                    &(n as i32),
                    a.ptr(),
                    &a.ld(),
                    w.as_mut_ptr(),
                    work.as_mut_ptr(),
                    &sizes.0,
                    rwork.as_mut_ptr(),
                    &sizes.1,
                    iwork.as_mut_ptr(),
                    &sizes.2,
                    info,
                )
            } else {
                let f: Syevd<E, E::R> = sym(&name::<E>("syevd"));
                f(
                    &jobz,
                    &uplo(lower),
                    &(n as i32),
                    a.ptr(),
                    &a.ld(),
                    w.as_mut_ptr(),
                    work.as_mut_ptr(),
                    &sizes.0,
                    iwork.as_mut_ptr(),
                    &sizes.2,
                    info,
                )
            }
        }
    };
    call(a, w, &mut wq, &mut rq, &mut iq, (-1, -1, -1), &mut info);
    assert_eq!(info, 0);
    let (lw, lrw, liw) = evd_sizes(n, vectors, E::COMPLEX);
    assert_eq!(wq[0].to_c().re as usize, lw, "lwork answer");
    assert_eq!(iq[0] as usize, liw, "liwork answer");
    if E::COMPLEX {
        assert_eq!(rq[0].to_c().re as usize, lrw, "lrwork answer");
    }
    let mut work = vec![E::zero(); lw];
    let mut rwork = vec![E::R::zero(); lrw];
    let mut iwork = vec![0i32; liw];
    call(
        a,
        w,
        &mut work,
        &mut rwork,
        &mut iwork,
        (lw as i32, lrw as i32, liw as i32),
        &mut info,
    );
    info
}

/// Calls syev/heev with a queried `lwork` of exactly the answered size (LAPACK's minimum,
/// `3n - 1` real, `2n - 1` complex) and `rwork` of `3n - 2` reals.
pub(super) fn ev<E: T>(vectors: bool, lower: bool, a: &mut Mat<E>, w: &mut [E::R]) -> i32
where
    E::R: T,
{
    let n = a.rows;
    let jobz = ch(if vectors { b'V' } else { b'N' });
    let mut info = 99;
    let mut rwork = vec![E::R::zero(); (3 * n).saturating_sub(2).max(1)];
    let mut call = |a: &mut Mat<E>, w: &mut [E::R], work: &mut [E], lwork: i32, info: &mut i32| {
        // SAFETY: arrays sized for the dimensions (a query writes work[0] only).
        unsafe {
            if E::COMPLEX {
                let f: Heev<E, E::R> = sym(&name::<E>("heev"));
                f(
                    &jobz,
                    &uplo(lower),
                    &(n as i32),
                    a.ptr(),
                    &a.ld(),
                    w.as_mut_ptr(),
                    work.as_mut_ptr(),
                    &lwork,
                    rwork.as_mut_ptr(),
                    info,
                )
            } else {
                let f: Syev<E, E::R> = sym(&name::<E>("syev"));
                f(
                    &jobz,
                    &uplo(lower),
                    &(n as i32),
                    a.ptr(),
                    &a.ld(),
                    w.as_mut_ptr(),
                    work.as_mut_ptr(),
                    &lwork,
                    info,
                )
            }
        }
    };
    let mut wq = [E::zero()];
    call(a, w, &mut wq, -1, &mut info);
    assert_eq!(info, 0);
    let lw = match (n <= 1, E::COMPLEX) {
        (true, _) => 1,
        (false, false) => 3 * n - 1,
        (false, true) => 2 * n - 1,
    };
    assert_eq!(wq[0].to_c().re as usize, lw, "lwork answer");
    if lw > 1 {
        // one less than the minimum is LAPACK's bad argument 8, and writes nothing
        let before = a.clone();
        let mut short = vec![E::zero(); lw - 1];
        call(a, w, &mut short, lw as i32 - 1, &mut info);
        assert_eq!(info, -8, "lwork below the minimum");
        assert_eq!(format!("{:?}", a.data), format!("{:?}", before.data));
    }
    let mut work = vec![E::zero(); lw];
    call(a, w, &mut work, lw as i32, &mut info);
    info
}

/// `simple`: the simple driver (syev/heev) instead of divide and conquer (syevd/heevd).
fn check_evd<E: T>(simple: bool, vectors: bool, lower: bool, n: usize, pad: usize, seed: u64)
where
    E::R: T,
{
    let rng = &mut Rng::new(seed);
    let (d, h, mut a) = hermitian::<E>(rng, n, pad, lower);
    let before = a.clone();
    let mut w = vec![E::R::zero(); n];
    let info = if simple {
        ev(vectors, lower, &mut a, &mut w)
    } else {
        evd(vectors, lower, &mut a, &mut w)
    };
    assert_eq!(info, 0);
    a.assert_padding();
    let w: Vec<f64> = w.iter().map(|v| v.to_c().re).collect();
    let tol = E::EPS * 32.0 * (n as f64 + 1.0) * (h.norm() + 1.0);
    for i in 0..n {
        assert!((w[i] - d[i]).abs() <= tol, "w[{i}] = {} vs {}", w[i], d[i]);
        if i > 0 {
            assert!(w[i] >= w[i - 1], "ascending");
        }
    }
    if vectors && n > 0 {
        let v = a.to_ref();
        let wd = diag(&w);
        assert_close(&h.mul(&v), &v.mul(&wd), tol, "A V = V diag(w)");
        assert_close(&v.h().mul(&v), &Ref::identity(n), tol, "V^H V = I");
    } else {
        assert_eq!(
            format!("{:?}", a.data),
            format!("{:?}", before.data),
            "A untouched"
        );
    }
}

mod evd {
    use super::*;
    use proptest::prelude::*;
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn s(simple in any::<bool>(), v in any::<bool>(), l in any::<bool>(), n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_evd::<f32>(simple, v, l, n, pad, seed) }
        #[test]
        fn d(simple in any::<bool>(), v in any::<bool>(), l in any::<bool>(), n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_evd::<f64>(simple, v, l, n, pad, seed) }
        #[test]
        fn c(simple in any::<bool>(), v in any::<bool>(), l in any::<bool>(), n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_evd::<c32>(simple, v, l, n, pad, seed) }
        #[test]
        fn z(simple in any::<bool>(), v in any::<bool>(), l in any::<bool>(), n in 0usize..10, pad in 0usize..3, seed in any::<u64>()) { check_evd::<c64>(simple, v, l, n, pad, seed) }
    }
}

/// The range of a syevr call.
#[derive(Debug, Clone, Copy)]
pub(super) enum Sel {
    All,
    /// eigenvalues with (0-based) indices `a..b`, as a `(vl, vu]` interval between them
    Values(usize, usize),
    /// 1-based `il..=iu`
    Indices(usize, usize),
}

/// Calls syevr/heevr; returns (info, m, w, Z, isuppz).
#[allow(clippy::type_complexity)]
pub(super) fn evr<E: T>(
    vectors: bool,
    lower: bool,
    a: &mut Mat<E>,
    sel: Sel,
    d: &[f64],
) -> (i32, usize, Vec<f64>, Mat<E>, Vec<i32>)
where
    E::R: T,
{
    let n = a.rows;
    let jobz = ch(if vectors { b'V' } else { b'N' });
    let (range, vl, vu, il, iu) = match sel {
        Sel::All => (b'A', 0.0, 0.0, 0, 0),
        Sel::Values(lo, hi) => {
            let below = |i: usize| {
                if i == 0 {
                    d[0] - 1.0
                } else if i == n {
                    d[n - 1] + 0.5
                } else {
                    0.5 * (d[i - 1] + d[i])
                }
            };
            let vl = below(lo);
            let vu = if hi == lo {
                vl + 1e-3 / n as f64
            } else if hi == n {
                d[n - 1] + 1.0
            } else {
                0.5 * (d[hi - 1] + d[hi])
            };
            (b'V', vl, vu, 0, 0)
        }
        Sel::Indices(l, u) => (b'I', 0.0, 0.0, l as i32, u as i32),
    };
    let (vl, vu) = (
        E::R::from_c(c64::new(vl, 0.0)),
        E::R::from_c(c64::new(vu, 0.0)),
    );
    let abstol = E::R::zero();
    let mut m = -1i32;
    let mut w = vec![E::R::zero(); n.max(1)];
    let mut z = Mat::<E>::filled(n, n.max(1), 1, poison());
    let mut isuppz = vec![0i32; 2 * n.max(1)];
    let mut info = 99;
    let lw = if E::COMPLEX {
        (2 * n).max(1)
    } else {
        (26 * n).max(1)
    };
    let (lrw, liw) = ((24 * n).max(1), (10 * n).max(1));
    let mut work = vec![E::zero(); lw];
    let mut rwork = vec![E::R::zero(); lrw];
    let mut iwork = vec![0i32; liw];
    let ldz = z.ld();
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        if E::COMPLEX {
            let f: Heevr<E, E::R> = sym(&name::<E>("heevr"));
            f(
                &jobz,
                &ch(range),
                &uplo(lower),
                &(n as i32),
                a.ptr(),
                &a.ld(),
                &vl,
                &vu,
                &il,
                &iu,
                &abstol,
                &mut m,
                w.as_mut_ptr(),
                z.ptr(),
                &ldz,
                isuppz.as_mut_ptr(),
                work.as_mut_ptr(),
                &(lw as i32),
                rwork.as_mut_ptr(),
                &(lrw as i32),
                iwork.as_mut_ptr(),
                &(liw as i32),
                &mut info,
            )
        } else {
            let f: Syevr<E, E::R> = sym(&name::<E>("syevr"));
            f(
                &jobz,
                &ch(range),
                &uplo(lower),
                &(n as i32),
                a.ptr(),
                &a.ld(),
                &vl,
                &vu,
                &il,
                &iu,
                &abstol,
                &mut m,
                w.as_mut_ptr(),
                z.ptr(),
                &ldz,
                isuppz.as_mut_ptr(),
                work.as_mut_ptr(),
                &(lw as i32),
                iwork.as_mut_ptr(),
                &(liw as i32),
                &mut info,
            )
        }
    };
    let mm = m.max(0) as usize;
    let w = w.iter().take(mm).map(|v| v.to_c().re).collect();
    (info, mm, w, z, isuppz)
}

#[allow(clippy::too_many_arguments)]
fn check_evr<E: T>(
    vectors: bool,
    lower: bool,
    kind: u8,
    n: usize,
    pad: usize,
    x: usize,
    y: usize,
    seed: u64,
) where
    E::R: T,
{
    let rng = &mut Rng::new(seed);
    let (d, h, mut a) = hermitian::<E>(rng, n, pad, lower);
    let before = a.clone();
    let sel = match (kind, n) {
        (_, 0) | (0, _) => Sel::All,
        (1, _) => {
            let (lo, hi) = (x % (n + 1), y % (n + 1));
            Sel::Values(lo.min(hi), lo.max(hi))
        }
        _ => {
            let il = 1 + x % n;
            Sel::Indices(il, il + y % (n + 1 - il))
        }
    };
    let (first, count) = match sel {
        Sel::All => (0, n),
        Sel::Values(lo, hi) => (lo, hi - lo),
        Sel::Indices(l, u) => (l - 1, u + 1 - l),
    };
    let (info, m, w, z, isuppz) = evr(vectors, lower, &mut a, sel, &d);
    assert_eq!(info, 0, "{sel:?}");
    assert_eq!(m, count, "m for {sel:?}");
    assert_eq!(
        format!("{:?}", a.data),
        format!("{:?}", before.data),
        "A untouched"
    );
    let tol = E::EPS * 32.0 * (n as f64 + 1.0) * (h.norm() + 1.0);
    for j in 0..m {
        assert!(
            (w[j] - d[first + j]).abs() <= tol,
            "w[{j}] = {} vs {}",
            w[j],
            d[first + j]
        );
    }
    if vectors && m > 0 {
        let zr = z.to_ref().cols(0, m);
        assert_close(&h.mul(&zr), &zr.mul(&diag(&w)), tol, "A Z = Z diag(w)");
        assert_close(&zr.h().mul(&zr), &Ref::identity(m), tol, "Z^H Z = I");
        for j in 0..m {
            let (lo, hi) = (isuppz[2 * j], isuppz[2 * j + 1]);
            assert!(1 <= lo && lo <= hi && hi as usize <= n, "isuppz {lo} {hi}");
            for i in 0..n {
                if i + 1 < lo as usize || i + 1 > hi as usize {
                    assert_eq!(zr.at(i, j), c64::new(0.0, 0.0), "outside the support");
                }
            }
        }
        // columns beyond m are not written
        for j in m..z.cols {
            for i in 0..n {
                assert_eq!(z.at(i, j).to_c(), poison::<E>().to_c());
            }
        }
    }
}

mod evr {
    use super::*;
    use proptest::prelude::*;
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn s(v in any::<bool>(), l in any::<bool>(), k in 0u8..3, n in 0usize..10, pad in 0usize..3, x in 0usize..20, y in 0usize..20, seed in any::<u64>()) { check_evr::<f32>(v, l, k, n, pad, x, y, seed) }
        #[test]
        fn d(v in any::<bool>(), l in any::<bool>(), k in 0u8..3, n in 0usize..10, pad in 0usize..3, x in 0usize..20, y in 0usize..20, seed in any::<u64>()) { check_evr::<f64>(v, l, k, n, pad, x, y, seed) }
        #[test]
        fn c(v in any::<bool>(), l in any::<bool>(), k in 0u8..3, n in 0usize..10, pad in 0usize..3, x in 0usize..20, y in 0usize..20, seed in any::<u64>()) { check_evr::<c32>(v, l, k, n, pad, x, y, seed) }
        #[test]
        fn z(v in any::<bool>(), l in any::<bool>(), k in 0u8..3, n in 0usize..10, pad in 0usize..3, x in 0usize..20, y in 0usize..20, seed in any::<u64>()) { check_evr::<c64>(v, l, k, n, pad, x, y, seed) }
    }
}

/// Divide and conquer (n above faer's recursion threshold of 128) and the threaded path.
#[test]
fn large_eigen_threaded() {
    check_evd::<f64>(false, true, false, 160, 1, 1);
    check_evd::<c32>(false, true, true, 140, 0, 2);
    check_evd::<f64>(true, true, true, 150, 1, 4);
    check_evd::<c64>(true, false, false, 130, 2, 5);
    check_evr::<c64>(true, false, 2, 150, 1, 20, 70, 3);
}
