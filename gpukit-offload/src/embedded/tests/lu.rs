//! getrf, getrs, gesv, getri: `P L U = A`, LAPACK's pivot rule and swap sequence, exact-zero
//! pivots, residuals of the solves, `A inv(A) = I`.

use super::*;

pub(super) type Getrf<E> =
    unsafe extern "C" fn(*const i32, *const i32, *mut E, *const i32, *mut i32, *mut i32);
pub(super) type Getrs<E> = unsafe extern "C" fn(
    *const c_char,
    *const i32,
    *const i32,
    *const E,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut i32,
);
pub(super) type Gesv<E> = unsafe extern "C" fn(
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut i32,
    *mut E,
    *const i32,
    *mut i32,
);
pub(super) type Getri<E> =
    unsafe extern "C" fn(*const i32, *mut E, *const i32, *const i32, *mut E, *const i32, *mut i32);

/// `A` with the swaps `ipiv` (1-based, in order) applied to its rows.
fn swapped(a: &Ref, ipiv: &[i32]) -> Ref {
    let mut r = a.clone();
    for (i, &p) in ipiv.iter().enumerate() {
        let p = p as usize - 1;
        for j in 0..r.cols {
            let t = r.at(i, j);
            r.set(i, j, r.at(p, j));
            r.set(p, j, t);
        }
    }
    r
}

/// `L U` from a packed `m x n` factor.
fn lu_product(f: &Ref) -> Ref {
    let (m, n) = (f.rows, f.cols);
    let k = m.min(n);
    let l = f.cols(0, k).triangle(true, true);
    let u = f.rows(0, k).triangle(false, false);
    l.mul(&u)
}

/// Calls getrf; returns (factor, ipiv, info).
pub(super) fn getrf<E: T>(a: &mut Mat<E>) -> (Vec<i32>, i32) {
    let f: Getrf<E> = sym(&name::<E>("getrf"));
    let mut ipiv = vec![-7i32; a.rows.min(a.cols)];
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &(a.rows as i32),
            &(a.cols as i32),
            a.ptr(),
            &a.ld(),
            ipiv.as_mut_ptr(),
            &mut info,
        )
    };
    (ipiv, info)
}

fn check_getrf<E: T>(m: usize, n: usize, pad: usize, zero_col: Option<usize>, seed: u64) {
    let rng = &mut Rng::new(seed);
    let mut a = Mat::<E>::random(rng, m, n, pad);
    if let Some(z) = zero_col.filter(|&z| z < n) {
        for i in 0..m {
            a.set(i, z, E::zero());
        }
    }
    let a0 = a.to_ref();
    let (ipiv, info) = getrf(&mut a);
    a.assert_padding();
    let k = m.min(n);
    match zero_col.filter(|&z| z < k) {
        // the first zero column gives the first exactly-zero pivot
        Some(z) => assert!(
            info >= 1 && info as usize <= z + 1,
            "info {info} for zero column {z}"
        ),
        None => assert!(info >= 0, "info {info}"),
    }
    for (i, &p) in ipiv.iter().enumerate() {
        assert!(p as usize > i && p as usize <= m, "ipiv[{i}] = {p}");
    }
    let f = a.to_ref();
    if !E::COMPLEX {
        // partial pivoting: every multiplier is at most one in modulus
        for j in 0..k {
            for i in j + 1..m {
                assert!(
                    f.at(i, j).norm() <= 1.0 + 1e-6,
                    "multiplier ({i},{j}) = {}",
                    f.at(i, j)
                );
            }
        }
    }
    let tol = E::EPS * 8.0 * (k as f64 + 1.0) * (a0.norm() + 1.0);
    assert_close(&lu_product(&f), &swapped(&a0, &ipiv), tol, "P L U = A");
}

per_type!(48, getrf, check_getrf, (
    m in 0usize..12, n in 0usize..12, pad in 0usize..3,
    zero_col in proptest::option::of(0usize..12), seed in any::<u64>(),
));

/// The recursive path (panels wider than the leaf) on taller, wider and square shapes.
#[test]
fn getrf_recursive_shapes() {
    for (m, n) in [(70, 70), (90, 40), (40, 90), (65, 33)] {
        check_getrf::<f64>(m, n, 2, None, m as u64);
        check_getrf::<c32>(m, n, 1, Some(37), n as u64);
    }
}

/// The exact swap sequence LAPACK's pivot rule gives on a small matrix.
#[test]
fn getrf_pivots_are_lapacks() {
    // columns: [1 4 2], [2 1 5], [3 0 1]: first pivot row 2 (4), then ...
    let mut a = Mat::<f64>::filled(3, 3, 0, 0.0);
    let v = [[1.0, 2.0, 3.0], [4.0, 1.0, 0.0], [2.0, 5.0, 1.0]];
    for (i, row) in v.iter().enumerate() {
        for (j, &x) in row.iter().enumerate() {
            a.set(i, j, x);
        }
    }
    let (ipiv, info) = getrf(&mut a);
    assert_eq!(info, 0);
    // step 1: max |a(:,1)| = 4 at row 2; after the swap and elimination column 2 below the
    // diagonal is [2 - 0.5*1, 5 - 0.5... ] -> rows (2: 1.75, 3: 4.5): pivot row 3
    assert_eq!(ipiv, vec![2, 3, 3]);
    // a zero pivot is reported and the factorization continues
    let mut z = Mat::<f64>::filled(2, 2, 0, 0.0);
    z.set(0, 1, 1.0);
    z.set(1, 1, 2.0);
    let (ipiv, info) = getrf(&mut z);
    assert_eq!((ipiv, info), (vec![1, 2], 1));
    assert_eq!(z.to_ref().at(1, 1).re, 2.0);
}

/// A random matrix made safely nonsingular (diagonal shifted).
pub(super) fn nonsingular<E: T>(rng: &mut Rng, n: usize, pad: usize) -> Mat<E> {
    let mut a = Mat::<E>::random(rng, n, n, pad);
    for i in 0..n {
        a.set(
            i,
            i,
            E::from_c(a.at(i, i).to_c() + c64::new(n as f64 + 1.0, 0.0)),
        );
    }
    a
}

fn check_getrs<E: T>(t: usize, n: usize, nrhs: usize, pad: usize, seed: u64) {
    let rng = &mut Rng::new(seed);
    let trans = [b'N', b'T', b'C'][t];
    let mut a = Mat::<E>::random(rng, n, n, pad);
    let a0 = a.to_ref();
    let (ipiv, info) = getrf(&mut a);
    assert!(info >= 0);
    if info > 0 {
        return;
    }
    let mut b = Mat::<E>::random(rng, n, nrhs, pad);
    let b0 = b.to_ref();
    let f: Getrs<E> = sym(&name::<E>("getrs"));
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &ch(trans),
            &(n as i32),
            &(nrhs as i32),
            a.ptr(),
            &a.ld(),
            ipiv.as_ptr(),
            b.ptr(),
            &b.ld(),
            &mut info,
        )
    };
    assert_eq!(info, 0);
    b.assert_padding();
    let x = b.to_ref();
    let lhs = a0.op(trans).mul(&x);
    let tol = E::EPS * 16.0 * (n as f64 + 1.0) * (a0.norm() * x.norm() + b0.norm());
    assert_close(&lhs, &b0, tol, "op(A) X = B");
}

per_type!(48, getrs, check_getrs, (
    t in 0usize..3, n in 0usize..10, nrhs in 0usize..5, pad in 0usize..3, seed in any::<u64>(),
));

fn check_gesv<E: T>(n: usize, nrhs: usize, pad: usize, singular: bool, seed: u64) {
    let rng = &mut Rng::new(seed);
    let mut a = Mat::<E>::random(rng, n, n, pad);
    if singular && n > 0 {
        for i in 0..n {
            a.set(i, n - 1, E::zero());
        }
    }
    let a0 = a.to_ref();
    let mut b = Mat::<E>::random(rng, n, nrhs, pad);
    let b0 = b.clone();
    let mut ipiv = vec![0i32; n];
    let mut info = 99;
    let f: Gesv<E> = sym(&name::<E>("gesv"));
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &(n as i32),
            &(nrhs as i32),
            a.ptr(),
            &a.ld(),
            ipiv.as_mut_ptr(),
            b.ptr(),
            &b.ld(),
            &mut info,
        )
    };
    a.assert_padding();
    b.assert_padding();
    if n == 0 {
        assert_eq!(info, 0);
        return;
    }
    let tol = E::EPS * 8.0 * (n as f64 + 1.0) * (a0.norm() + 1.0);
    // A holds the factors in every case
    assert_close(
        &lu_product(&a.to_ref()),
        &swapped(&a0, &ipiv),
        tol,
        "gesv factors",
    );
    if singular {
        assert!(info > 0, "singular: info {info}");
        assert_eq!(b.to_ref(), b0.to_ref(), "B untouched when singular");
        return;
    }
    assert!(info >= 0);
    if info == 0 {
        let x = b.to_ref();
        let tol = E::EPS * 16.0 * (n as f64 + 1.0) * (a0.norm() * x.norm() + b0.to_ref().norm());
        assert_close(&a0.mul(&x), &b0.to_ref(), tol, "A X = B");
    }
}

per_type!(48, gesv, check_gesv, (
    n in 0usize..10, nrhs in 0usize..5, pad in 0usize..3, singular in any::<bool>(),
    seed in any::<u64>(),
));

fn check_getri<E: T>(n: usize, pad: usize, seed: u64) {
    let rng = &mut Rng::new(seed);
    let mut a = nonsingular::<E>(rng, n, pad);
    let a0 = a.to_ref();
    let (ipiv, info) = getrf(&mut a);
    assert_eq!(info, 0);
    let f: Getri<E> = sym(&name::<E>("getri"));
    let mut work = vec![E::zero(); 1];
    let mut info = 99;
    // SAFETY: a query writes work[0] only.
    unsafe {
        f(
            &(n as i32),
            a.ptr(),
            &a.ld(),
            ipiv.as_ptr(),
            work.as_mut_ptr(),
            &-1,
            &mut info,
        )
    };
    assert_eq!(info, 0);
    let lwork = work[0].to_c().re as usize;
    assert_eq!(lwork, n.max(1));
    let mut work = vec![E::zero(); lwork];
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &(n as i32),
            a.ptr(),
            &a.ld(),
            ipiv.as_ptr(),
            work.as_mut_ptr(),
            &(lwork as i32),
            &mut info,
        )
    };
    assert_eq!(info, 0);
    a.assert_padding();
    let x = a.to_ref();
    let tol = E::EPS * 16.0 * (n as f64 + 1.0) * (a0.norm() * x.norm() + 1.0);
    assert_close(&a0.mul(&x), &Ref::identity(n), tol, "A inv(A) = I");
}

per_type!(32, getri, check_getri, (n in 0usize..10, pad in 0usize..3, seed in any::<u64>()));

#[test]
fn getri_singular_leaves_a() {
    let mut a = Mat::<f64>::random(&mut Rng::new(5), 4, 4, 1);
    for i in 0..4 {
        a.set(i, 2, 0.0);
    }
    let (ipiv, info) = getrf(&mut a);
    assert_eq!(info, 3);
    let before = a.clone();
    let f: Getri<f64> = sym("dgetri_");
    let mut work = vec![0.0; 4];
    let mut info = 99;
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &4,
            a.ptr(),
            &a.ld(),
            ipiv.as_ptr(),
            work.as_mut_ptr(),
            &4,
            &mut info,
        )
    };
    assert_eq!(info, 3);
    assert_eq!(a.to_ref(), before.to_ref());
}

/// Larger calls take the multithreaded path.
#[test]
fn large_lu_threaded() {
    check_getrf::<f64>(260, 250, 1, None, 1);
    check_gesv::<c64>(200, 3, 1, false, 2);
    check_getri::<f32>(180, 0, 3);
}
