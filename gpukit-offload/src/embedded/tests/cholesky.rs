//! potrf, potrs, posv, potri, trtrs: `L L^H = A` / `U^H U = A` in the referenced triangle only,
//! LAPACK's order of the failing minor, residuals of the solves, `A inv(A) = I`, trtrs's
//! singularity check.

use super::*;

pub(super) type Potrf<E> =
    unsafe extern "C" fn(*const c_char, *const i32, *mut E, *const i32, *mut i32);
pub(super) type Posv<E> = unsafe extern "C" fn(
    *const c_char,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut i32,
);
type Trtrs<E> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const E,
    *const i32,
    *mut E,
    *const i32,
    *mut i32,
);

/// A Hermitian positive definite matrix (reference) and its storage in one triangle: the other
/// triangle and the diagonal's imaginary part hold NaN (never read).
pub(super) fn hpd<E: T>(rng: &mut Rng, n: usize, pad: usize, lower: bool) -> (Ref, Mat<E>) {
    let m = Mat::<E>::random(rng, n, n, 0).to_ref();
    let full = m
        .mul(&m.h())
        .add(&Ref::identity(n).scale(c64::new(n as f64 * 0.5 + 1.0, 0.0)));
    // round through E so that the reference is exactly what is stored
    let mut a = Mat::<E>::from_ref(&full, pad);
    let full = a.to_ref().expand_triangle(lower, true);
    for j in 0..n {
        for i in 0..n {
            let stored = if lower { i >= j } else { i <= j };
            if !stored {
                a.set(i, j, nan());
            } else if i == j && E::COMPLEX {
                a.set(i, j, E::from_c(c64::new(full.at(i, i).re, f64::NAN)));
            }
        }
    }
    (full, a)
}

fn uplo(lower: bool) -> c_char {
    ch(if lower { b'L' } else { b'U' })
}

/// The factor stored in the referenced triangle as `L` (for 'U', `L = U^H`).
fn factor_as_lower(a: &Mat<impl T>, lower: bool) -> Ref {
    let r = a.to_ref().triangle(lower, false);
    let mut r = r;
    for v in &mut r.data {
        if v.re.is_nan() || v.im.is_nan() {
            *v = c64::new(0.0, 0.0);
        }
    }
    if lower {
        r
    } else {
        r.h()
    }
}

/// The unreferenced triangle still holds its NaN.
fn assert_other_triangle_untouched<E: T>(a: &Mat<E>, lower: bool) {
    for j in 0..a.cols {
        for i in 0..a.rows {
            let stored = if lower { i >= j } else { i <= j };
            if !stored {
                assert!(a.at(i, j).to_c().re.is_nan(), "({i},{j}) written");
            }
        }
    }
}

pub(super) fn potrf<E: T>(a: &mut Mat<E>, lower: bool) -> i32 {
    let f: Potrf<E> = sym(&name::<E>("potrf"));
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe { f(&uplo(lower), &(a.rows as i32), a.ptr(), &a.ld(), &mut info) };
    info
}

fn check_potrf<E: T>(lower: bool, n: usize, pad: usize, seed: u64) {
    let rng = &mut Rng::new(seed);
    let (full, mut a) = hpd::<E>(rng, n, pad, lower);
    assert_eq!(potrf(&mut a, lower), 0);
    a.assert_padding();
    assert_other_triangle_untouched(&a, lower);
    let l = factor_as_lower(&a, lower);
    for i in 0..n {
        assert!(
            l.at(i, i).re > 0.0 && l.at(i, i).im == 0.0,
            "diagonal of the factor {}",
            l.at(i, i)
        );
    }
    let tol = E::EPS * 8.0 * (n as f64 + 1.0) * (full.norm() + 1.0);
    assert_close(&l.mul(&l.h()), &full, tol, "L L^H = A");
}

per_type!(48, potrf, check_potrf, (
    lower in any::<bool>(), n in 0usize..12, pad in 0usize..3, seed in any::<u64>(),
));

/// The order of the first non-positive leading minor, at positions inside faer's blocks and
/// across them; A is left as it was.
#[test]
fn potrf_reports_the_failing_minor() {
    for (n, q) in [(1, 0), (5, 0), (5, 3), (40, 39), (150, 97), (300, 201)] {
        for lower in [true, false] {
            let rng = &mut Rng::new(n as u64 * 7 + q as u64);
            let (_, mut a) = hpd::<f64>(rng, n, 1, lower);
            a.set(q, q, -1.0e6);
            let before = a.clone();
            assert_eq!(
                potrf(&mut a, lower),
                q as i32 + 1,
                "n={n} q={q} lower={lower}"
            );
            assert_eq!(format!("{:?}", a.data), format!("{:?}", before.data));
            let (_, mut z) = hpd::<c32>(rng, n, 0, lower);
            z.set(q, q, c32::new(f32::NAN, 0.0));
            assert_eq!(potrf(&mut z, lower), q as i32 + 1, "NaN pivot n={n} q={q}");
        }
    }
}

fn solve_case<E: T>(routine: &str, lower: bool, n: usize, nrhs: usize, pad: usize, seed: u64) {
    let rng = &mut Rng::new(seed);
    let (full, mut a) = hpd::<E>(rng, n, pad, lower);
    let mut b = Mat::<E>::random(rng, n, nrhs, pad);
    let b0 = b.to_ref();
    if routine == "potrs" {
        assert_eq!(potrf(&mut a, lower), 0);
    }
    let f: Posv<E> = sym(&name::<E>(routine));
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &uplo(lower),
            &(n as i32),
            &(nrhs as i32),
            a.ptr(),
            &a.ld(),
            b.ptr(),
            &b.ld(),
            &mut info,
        )
    };
    assert_eq!(info, 0);
    a.assert_padding();
    b.assert_padding();
    assert_other_triangle_untouched(&a, lower);
    let x = b.to_ref();
    let tol = E::EPS * 16.0 * (n as f64 + 1.0) * (full.norm() * x.norm() + b0.norm());
    assert_close(&full.mul(&x), &b0, tol, &format!("{routine}: A X = B"));
    if routine == "posv" && n > 0 {
        let l = factor_as_lower(&a, lower);
        let tol = E::EPS * 8.0 * (n as f64 + 1.0) * (full.norm() + 1.0);
        assert_close(&l.mul(&l.h()), &full, tol, "posv factor");
    }
}

fn check_potrs<E: T>(lower: bool, n: usize, nrhs: usize, pad: usize, seed: u64) {
    solve_case::<E>("potrs", lower, n, nrhs, pad, seed)
}
per_type!(32, potrs, check_potrs, (
    lower in any::<bool>(), n in 0usize..10, nrhs in 0usize..4, pad in 0usize..3, seed in any::<u64>(),
));

fn check_posv<E: T>(lower: bool, n: usize, nrhs: usize, pad: usize, seed: u64) {
    solve_case::<E>("posv", lower, n, nrhs, pad, seed)
}
per_type!(32, posv, check_posv, (
    lower in any::<bool>(), n in 0usize..10, nrhs in 0usize..4, pad in 0usize..3, seed in any::<u64>(),
));

#[test]
fn posv_not_positive_definite_writes_nothing() {
    let rng = &mut Rng::new(3);
    let (_, mut a) = hpd::<c64>(rng, 6, 1, true);
    a.set(2, 2, c64::new(-50.0, 0.0));
    let mut b = Mat::<c64>::random(rng, 6, 2, 1);
    let (a0, b0) = (a.clone(), b.clone());
    let f: Posv<c64> = sym("zposv_");
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &uplo(true),
            &6,
            &2,
            a.ptr(),
            &a.ld(),
            b.ptr(),
            &b.ld(),
            &mut info,
        )
    };
    assert_eq!(info, 3);
    assert_eq!(format!("{:?}", a.data), format!("{:?}", a0.data));
    assert_eq!(b.data, b0.data);
}

fn check_potri<E: T>(lower: bool, n: usize, pad: usize, seed: u64) {
    let rng = &mut Rng::new(seed);
    let (full, mut a) = hpd::<E>(rng, n, pad, lower);
    assert_eq!(potrf(&mut a, lower), 0);
    let f: Potrf<E> = sym(&name::<E>("potri"));
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe { f(&uplo(lower), &(n as i32), a.ptr(), &a.ld(), &mut info) };
    assert_eq!(info, 0);
    a.assert_padding();
    assert_other_triangle_untouched(&a, lower);
    let mut stored = a.to_ref();
    for v in &mut stored.data {
        if v.re.is_nan() {
            *v = c64::new(0.0, 0.0);
        }
    }
    let inv = stored.expand_triangle(lower, true);
    let tol = E::EPS * 32.0 * (n as f64 + 1.0) * (full.norm() * inv.norm() + 1.0);
    assert_close(&full.mul(&inv), &Ref::identity(n), tol, "A inv(A) = I");
}

per_type!(32, potri, check_potri, (
    lower in any::<bool>(), n in 0usize..10, pad in 0usize..3, seed in any::<u64>(),
));

#[allow(clippy::too_many_arguments)]
fn check_trtrs<E: T>(
    lower: bool,
    t: usize,
    unit: bool,
    n: usize,
    nrhs: usize,
    pad: usize,
    zero: Option<usize>,
    seed: u64,
) {
    let rng = &mut Rng::new(seed);
    let trans = [b'N', b'T', b'C'][t];
    let mut a = Mat::<E>::random(rng, n, n, pad);
    for i in 0..n {
        a.set(i, i, E::from_c(a.at(i, i).to_c() + c64::new(2.0, 0.0)));
    }
    let zero = zero.filter(|&z| z < n);
    if let Some(z) = zero {
        a.set(z, z, E::zero());
    }
    let tri = a.to_ref().triangle(lower, unit);
    let mut b = Mat::<E>::random(rng, n, nrhs, pad);
    let b0 = b.to_ref();
    let f: Trtrs<E> = sym(&name::<E>("trtrs"));
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &uplo(lower),
            &ch(trans),
            &ch(if unit { b'U' } else { b'N' }),
            &(n as i32),
            &(nrhs as i32),
            a.ptr(),
            &a.ld(),
            b.ptr(),
            &b.ld(),
            &mut info,
        )
    };
    b.assert_padding();
    if let (Some(z), false) = (zero, unit) {
        assert_eq!(info, z as i32 + 1);
        assert_eq!(b.to_ref(), b0, "B untouched when singular");
        return;
    }
    assert_eq!(info, 0);
    let x = b.to_ref();
    let t = tri.op(trans);
    let tol = E::EPS * 16.0 * (n as f64 + 1.0) * (t.norm() * x.norm() + b0.norm());
    assert_close(&t.mul(&x), &b0, tol, "op(A) X = B");
}

per_type!(48, trtrs, check_trtrs, (
    lower in any::<bool>(), t in 0usize..3, unit in any::<bool>(), n in 0usize..10,
    nrhs in 0usize..4, pad in 0usize..3, zero in proptest::option::of(0usize..10),
    seed in any::<u64>(),
));

/// Larger calls take the multithreaded and blocked paths.
#[test]
fn large_cholesky_threaded() {
    check_potrf::<f64>(true, 260, 1, 1);
    check_posv::<c32>(false, 200, 3, 1, 2);
    check_potri::<c64>(false, 170, 0, 3);
}
