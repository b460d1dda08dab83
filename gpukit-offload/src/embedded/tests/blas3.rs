//! gemm, symm, hemm, syrk, herk, trsm, trmm against the reference, over random shapes
//! (0-sized, non-square, padded leading dimensions, every trans/side/uplo/diag), with unread
//! parts poisoned with NaN and untouched parts checked.

use super::*;

type Gemm<E> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const i32,
    *const E,
    *const E,
    *const i32,
    *const E,
    *const i32,
    *const E,
    *mut E,
    *const i32,
);
type Symm<E> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const E,
    *const E,
    *const i32,
    *const E,
    *const i32,
    *const E,
    *mut E,
    *const i32,
);
type Syrk<E, S> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const S,
    *const E,
    *const i32,
    *const S,
    *mut E,
    *const i32,
);
type Trsm<E> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const E,
    *const E,
    *const i32,
    *mut E,
    *const i32,
);

const TRANS: [u8; 3] = [b'N', b'T', b'C'];

fn magnitude(v: c64) -> f64 {
    v.norm()
}

#[allow(clippy::too_many_arguments)]
fn check_gemm<E: T>(
    ta: usize,
    tb: usize,
    m: usize,
    n: usize,
    k: usize,
    pad: usize,
    ak: u8,
    bk: u8,
    seed: u64,
) {
    let rng = &mut Rng::new(seed);
    let (ta, tb) = (TRANS[ta], TRANS[tb]);
    let (ra, ca) = if ta == b'N' { (m, k) } else { (k, m) };
    let (rb, cb) = if tb == b'N' { (k, n) } else { (n, k) };
    let alpha: E = pick(rng, ak);
    let beta: E = pick(rng, bk);
    let mut a = Mat::<E>::random(rng, ra, ca, pad);
    let mut b = Mat::<E>::random(rng, rb, cb, pad);
    let mut c = Mat::<E>::random(rng, m, n, pad);
    if alpha == E::zero() {
        a = Mat::filled(ra, ca, pad, nan());
        b = Mat::filled(rb, cb, pad, nan());
    }
    if beta == E::zero() {
        c = Mat::filled(m, n, pad, nan());
    }
    let (al, be) = (alpha.to_c(), beta.to_c());
    let cr = if beta == E::zero() {
        Ref::zeros(m, n)
    } else {
        c.to_ref().scale(be)
    };
    let want = if alpha == E::zero() {
        cr.clone()
    } else {
        a.to_ref().op(ta).mul(&b.to_ref().op(tb)).scale(al).add(&cr)
    };
    let f: Gemm<E> = sym(&name::<E>("gemm"));
    let (mi, ni, ki) = (m as i32, n as i32, k as i32);
    // SAFETY: every array is allocated for its dimensions and leading dimension.
    unsafe {
        f(
            &ch(ta),
            &ch(tb),
            &mi,
            &ni,
            &ki,
            &alpha,
            a.ptr(),
            &a.ld(),
            b.ptr(),
            &b.ld(),
            &beta,
            c.ptr(),
            &c.ld(),
        )
    };
    assert_eq!(crate::embedded::take_blas_error(), None);
    c.assert_padding();
    if m == 0 || n == 0 {
        return;
    }
    let product = if alpha == E::zero() {
        0.0
    } else {
        magnitude(al) * a.to_ref().norm() * b.to_ref().norm()
    };
    let scale = product + magnitude(be) * cr.norm() + 1.0;
    let tol = E::EPS * 4.0 * (k as f64 + 2.0) * scale;
    assert_close(
        &c.to_ref(),
        &want,
        tol,
        &format!("{}gemm {}{}", E::LETTER, ta as char, tb as char),
    );
}

per_type!(48, gemm, check_gemm, (
    ta in 0usize..3, tb in 0usize..3, m in 0usize..9, n in 0usize..9, k in 0usize..9,
    pad in 0usize..3, ak in 0u8..3, bk in 0u8..3, seed in any::<u64>(),
));

/// A triangle-stored matrix: the other triangle (and, for `hemm`, the diagonal's imaginary
/// part) hold NaN, which must never be read.
fn stored_triangle<E: T>(rng: &mut Rng, n: usize, pad: usize, lower: bool, herm: bool) -> Mat<E> {
    let mut a = Mat::<E>::random(rng, n, n, pad);
    for j in 0..n {
        for i in 0..n {
            let unread = if lower { i < j } else { i > j };
            if unread {
                a.set(i, j, nan());
            } else if i == j && herm && E::COMPLEX {
                a.set(i, j, E::from_c(c64::new(a.at(i, j).to_c().re, f64::NAN)));
            }
        }
    }
    a
}

#[allow(clippy::too_many_arguments)]
fn symm_case<E: T>(
    herm: bool,
    left: bool,
    lower: bool,
    m: usize,
    n: usize,
    pad: usize,
    ak: u8,
    bk: u8,
    seed: u64,
) {
    let rng = &mut Rng::new(seed);
    let na = if left { m } else { n };
    let alpha: E = pick(rng, ak);
    let beta: E = pick(rng, bk);
    let a = stored_triangle::<E>(rng, na, pad, lower, herm);
    let mut b = Mat::<E>::random(rng, m, n, pad);
    let mut c = if beta == E::zero() {
        Mat::filled(m, n, pad, nan())
    } else {
        Mat::<E>::random(rng, m, n, pad)
    };
    let mut a_ref = a.to_ref();
    for v in &mut a_ref.data {
        if v.re.is_nan() {
            *v = c64::new(0.0, 0.0);
        }
        if v.im.is_nan() {
            *v = c64::new(v.re, 0.0);
        }
    }
    let full = a_ref.expand_triangle(lower, herm);
    let (al, be) = (alpha.to_c(), beta.to_c());
    let cr = if beta == E::zero() {
        Ref::zeros(m, n)
    } else {
        c.to_ref().scale(be)
    };
    let prod = if left {
        full.mul(&b.to_ref())
    } else {
        b.to_ref().mul(&full)
    };
    let want = if alpha == E::zero() {
        cr.clone()
    } else {
        prod.scale(al).add(&cr)
    };
    let f: Symm<E> = sym(&name::<E>(if herm { "hemm" } else { "symm" }));
    let mut a = a;
    // SAFETY: every array is allocated for its dimensions and leading dimension.
    unsafe {
        f(
            &ch(if left { b'L' } else { b'R' }),
            &ch(if lower { b'L' } else { b'U' }),
            &(m as i32),
            &(n as i32),
            &alpha,
            a.ptr(),
            &a.ld(),
            b.ptr(),
            &b.ld(),
            &beta,
            c.ptr(),
            &c.ld(),
        )
    };
    assert_eq!(crate::embedded::take_blas_error(), None);
    c.assert_padding();
    if m == 0 || n == 0 {
        return;
    }
    let tol = E::EPS
        * 4.0
        * (na as f64 + 2.0)
        * (magnitude(al) * full.norm() * b.to_ref().norm() + magnitude(be) * cr.norm() + 1.0);
    assert_close(&c.to_ref(), &want, tol, "symm/hemm");
}

#[allow(clippy::too_many_arguments)]
fn check_symm<E: T>(
    left: bool,
    lower: bool,
    m: usize,
    n: usize,
    pad: usize,
    ak: u8,
    bk: u8,
    seed: u64,
) {
    symm_case::<E>(false, left, lower, m, n, pad, ak, bk, seed)
}
per_type!(32, symm, check_symm, (
    left in any::<bool>(), lower in any::<bool>(), m in 0usize..8, n in 0usize..8,
    pad in 0usize..3, ak in 0u8..3, bk in 0u8..3, seed in any::<u64>(),
));

#[allow(clippy::too_many_arguments)]
fn check_hemm<E: T>(
    left: bool,
    lower: bool,
    m: usize,
    n: usize,
    pad: usize,
    ak: u8,
    bk: u8,
    seed: u64,
) {
    symm_case::<E>(true, left, lower, m, n, pad, ak, bk, seed)
}
complex_only!(32, hemm, check_hemm, (
    left in any::<bool>(), lower in any::<bool>(), m in 0usize..8, n in 0usize..8,
    pad in 0usize..3, ak in 0u8..3, bk in 0u8..3, seed in any::<u64>(),
));

#[allow(clippy::too_many_arguments)]
fn rank_k_case<E: T>(
    herm: bool,
    lower: bool,
    trans: u8,
    n: usize,
    k: usize,
    pad: usize,
    ak: u8,
    bk: u8,
    seed: u64,
) {
    let rng = &mut Rng::new(seed);
    let (ra, ca) = if trans == b'N' { (n, k) } else { (k, n) };
    let mut a = Mat::<E>::random(rng, ra, ca, pad);
    // herk's scalars are real
    let real = |v: E| E::from_c(c64::new(v.to_c().re, 0.0));
    let alpha: E = if herm {
        real(pick(rng, ak))
    } else {
        pick(rng, ak)
    };
    let beta: E = if herm {
        real(pick(rng, bk))
    } else {
        pick(rng, bk)
    };
    let mut c = Mat::<E>::random(rng, n, n, pad);
    if beta == E::zero() {
        for j in 0..n {
            for i in 0..n {
                let stored = if lower { i >= j } else { i <= j };
                if stored {
                    c.set(i, j, nan());
                }
            }
        }
    }
    let before = c.clone();
    let quick = (alpha == E::zero() || k == 0) && beta == E::one();
    let mut cr = if beta == E::zero() {
        Ref::zeros(n, n)
    } else {
        c.to_ref()
    };
    if herm && !quick {
        for j in 0..n {
            cr.set(j, j, c64::new(cr.at(j, j).re, 0.0));
        }
    }
    let cr = cr.scale(beta.to_c());
    let ar = a.to_ref();
    let prod = if trans == b'N' {
        ar.mul(&if herm { ar.h() } else { ar.t() })
    } else {
        (if herm { ar.h() } else { ar.t() }).mul(&ar)
    };
    let want = if quick {
        c.to_ref()
    } else {
        prod.scale(alpha.to_c()).add(&cr)
    };
    // SAFETY: every array is allocated for its dimensions and leading dimension; herk's real
    // scalars are passed as pointers to the real parts of `alpha`/`beta` (the first field of
    // the complex layout).
    unsafe {
        if herm {
            let f: Syrk<E, E::R> = sym(&name::<E>("herk"));
            f(
                &ch(if lower { b'L' } else { b'U' }),
                &ch(trans),
                &(n as i32),
                &(k as i32),
                &alpha as *const E as *const E::R,
                a.ptr(),
                &a.ld(),
                &beta as *const E as *const E::R,
                c.ptr(),
                &c.ld(),
            )
        } else {
            let f: Syrk<E, E> = sym(&name::<E>("syrk"));
            f(
                &ch(if lower { b'L' } else { b'U' }),
                &ch(trans),
                &(n as i32),
                &(k as i32),
                &alpha,
                a.ptr(),
                &a.ld(),
                &beta,
                c.ptr(),
                &c.ld(),
            )
        }
    };
    assert_eq!(crate::embedded::take_blas_error(), None);
    c.assert_padding();
    let tol = E::EPS
        * 4.0
        * (k as f64 + 2.0)
        * (magnitude(alpha.to_c()) * ar.norm() * ar.norm() + cr.norm() + 1.0);
    for j in 0..n {
        for i in 0..n {
            let stored = if lower { i >= j } else { i <= j };
            let got = c.at(i, j).to_c();
            if stored {
                assert!(
                    (got - want.at(i, j)).norm() <= tol,
                    "({i},{j}) {got} vs {}",
                    want.at(i, j)
                );
                if herm && i == j && !quick {
                    assert_eq!(got.im, 0.0, "herk diagonal must be real");
                }
            } else {
                assert_eq!(
                    got,
                    before.at(i, j).to_c(),
                    "other triangle written at ({i},{j})"
                );
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_syrk<E: T>(
    lower: bool,
    t: usize,
    n: usize,
    k: usize,
    pad: usize,
    ak: u8,
    bk: u8,
    seed: u64,
) {
    // complex syrk has no 'C'
    let trans = if E::COMPLEX {
        [b'N', b'T'][t % 2]
    } else {
        TRANS[t]
    };
    rank_k_case::<E>(false, lower, trans, n, k, pad, ak, bk, seed)
}
per_type!(32, syrk, check_syrk, (
    lower in any::<bool>(), t in 0usize..3, n in 0usize..8, k in 0usize..8,
    pad in 0usize..3, ak in 0u8..3, bk in 0u8..3, seed in any::<u64>(),
));

#[allow(clippy::too_many_arguments)]
fn check_herk<E: T>(
    lower: bool,
    t: usize,
    n: usize,
    k: usize,
    pad: usize,
    ak: u8,
    bk: u8,
    seed: u64,
) {
    rank_k_case::<E>(true, lower, [b'N', b'C'][t % 2], n, k, pad, ak, bk, seed)
}
complex_only!(32, herk, check_herk, (
    lower in any::<bool>(), t in 0usize..2, n in 0usize..8, k in 0usize..8,
    pad in 0usize..3, ak in 0u8..3, bk in 0u8..3, seed in any::<u64>(),
));

/// A well-conditioned triangular matrix in the `lower`/upper triangle; the other triangle is
/// NaN, and so is the diagonal when `unit` (neither may be read).
fn triangular<E: T>(rng: &mut Rng, n: usize, pad: usize, lower: bool, unit: bool) -> (Mat<E>, Ref) {
    let mut a = stored_triangle::<E>(rng, n, pad, lower, false);
    for i in 0..n {
        let d = a.at(i, i).to_c();
        let boost = if d.re >= 0.0 { 2.0 } else { -2.0 };
        a.set(i, i, E::from_c(d + c64::new(boost, 0.0)));
    }
    let mut r = a.to_ref();
    for v in &mut r.data {
        if v.re.is_nan() {
            *v = c64::new(0.0, 0.0);
        }
    }
    let r = r.triangle(lower, unit);
    if unit {
        for i in 0..n {
            a.set(i, i, nan());
        }
    }
    (a, r)
}

#[allow(clippy::too_many_arguments)]
fn tri_case<E: T>(
    mult: bool,
    left: bool,
    lower: bool,
    t: usize,
    unit: bool,
    m: usize,
    n: usize,
    pad: usize,
    ak: u8,
    seed: u64,
) {
    let rng = &mut Rng::new(seed);
    let trans = TRANS[t];
    let na = if left { m } else { n };
    let alpha: E = pick(rng, ak);
    let (mut a, tri) = triangular::<E>(rng, na, pad, lower, unit);
    let mut b = Mat::<E>::random(rng, m, n, pad);
    if alpha == E::zero() {
        a = Mat::filled(na, na, pad, nan());
        b = Mat::filled(m, n, pad, nan());
    }
    let b0 = b.to_ref();
    let f: Trsm<E> = sym(&name::<E>(if mult { "trmm" } else { "trsm" }));
    // SAFETY: every array is allocated for its dimensions and leading dimension.
    unsafe {
        f(
            &ch(if left { b'L' } else { b'R' }),
            &ch(if lower { b'L' } else { b'U' }),
            &ch(trans),
            &ch(if unit { b'U' } else { b'N' }),
            &(m as i32),
            &(n as i32),
            &alpha,
            a.ptr(),
            &a.ld(),
            b.ptr(),
            &b.ld(),
        )
    };
    assert_eq!(crate::embedded::take_blas_error(), None);
    b.assert_padding();
    if m == 0 || n == 0 {
        return;
    }
    let x = b.to_ref();
    if alpha == E::zero() {
        assert_eq!(x, Ref::zeros(m, n), "alpha = 0 gives zeros");
        return;
    }
    let t = tri.op(trans);
    let al = alpha.to_c();
    if mult {
        let want = if left { t.mul(&b0) } else { b0.mul(&t) }.scale(al);
        let tol = E::EPS * 4.0 * (na as f64 + 2.0) * (magnitude(al) * t.norm() * b0.norm() + 1.0);
        assert_close(&x, &want, tol, "trmm");
    } else {
        // residual of op(A) X = alpha B
        let lhs = if left { t.mul(&x) } else { x.mul(&t) };
        let rhs = b0.scale(al);
        let tol = E::EPS * 8.0 * (na as f64 + 2.0) * (t.norm() * x.norm() + rhs.norm() + 1.0);
        assert_close(&lhs, &rhs, tol, "trsm residual");
    }
}

#[allow(clippy::too_many_arguments)]
fn check_trsm<E: T>(
    left: bool,
    lower: bool,
    t: usize,
    unit: bool,
    m: usize,
    n: usize,
    pad: usize,
    ak: u8,
    seed: u64,
) {
    tri_case::<E>(false, left, lower, t, unit, m, n, pad, ak, seed)
}
per_type!(48, trsm, check_trsm, (
    left in any::<bool>(), lower in any::<bool>(), t in 0usize..3, unit in any::<bool>(),
    m in 0usize..8, n in 0usize..8, pad in 0usize..3, ak in 0u8..3, seed in any::<u64>(),
));

#[allow(clippy::too_many_arguments)]
fn check_trmm<E: T>(
    left: bool,
    lower: bool,
    t: usize,
    unit: bool,
    m: usize,
    n: usize,
    pad: usize,
    ak: u8,
    seed: u64,
) {
    tri_case::<E>(true, left, lower, t, unit, m, n, pad, ak, seed)
}
per_type!(48, trmm, check_trmm, (
    left in any::<bool>(), lower in any::<bool>(), t in 0usize..3, unit in any::<bool>(),
    m in 0usize..8, n in 0usize..8, pad in 0usize..3, ak in 0u8..3, seed in any::<u64>(),
));

/// Larger calls take the multithreaded path (above the sequential threshold).
#[test]
fn large_gemm_and_trsm_threaded() {
    check_gemm::<f64>(1, 0, 200, 180, 190, 3, 2, 2, 11);
    check_gemm::<c32>(2, 1, 170, 160, 150, 1, 2, 2, 12);
    check_trsm::<f64>(false, true, 2, false, 190, 170, 2, 2, 13);
    check_trmm::<c64>(true, false, 1, true, 150, 160, 1, 2, 14);
    rank_k_case::<c64>(true, true, b'C', 170, 150, 2, 2, 2, 15);
}
