//! geqrf, orgqr/ungqr: `A = Q R` with orthonormal Q, LAPACK's reflector convention (the product
//! `H(1) ... H(k)`, `H(i) = I - tau v v^H`, for any tau), workspace queries.

use super::*;

pub(super) type Geqrf<E> = unsafe extern "C" fn(
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *mut E,
    *const i32,
    *mut i32,
);
pub(super) type Orgqr<E> = unsafe extern "C" fn(
    *const i32,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *const E,
    *mut E,
    *const i32,
    *mut i32,
);

fn orgqr_name<E: T>() -> String {
    name::<E>(if E::COMPLEX { "ungqr" } else { "orgqr" })
}

/// Calls geqrf with a queried workspace; returns tau.
pub(super) fn geqrf<E: T>(a: &mut Mat<E>) -> Vec<E> {
    let f: Geqrf<E> = sym(&name::<E>("geqrf"));
    let (m, n) = (a.rows as i32, a.cols as i32);
    let mut tau = vec![poison::<E>(); a.rows.min(a.cols)];
    let mut q = [E::zero()];
    let mut info = 99;
    // SAFETY: a query writes work[0] only.
    unsafe {
        f(
            &m,
            &n,
            a.ptr(),
            &a.ld(),
            tau.as_mut_ptr(),
            q.as_mut_ptr(),
            &-1,
            &mut info,
        )
    };
    assert_eq!(info, 0);
    let lwork = q[0].to_c().re as usize;
    assert_eq!(lwork, if m.min(n) == 0 { 1 } else { n as usize });
    let mut work = vec![E::zero(); lwork];
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &m,
            &n,
            a.ptr(),
            &a.ld(),
            tau.as_mut_ptr(),
            work.as_mut_ptr(),
            &(lwork as i32),
            &mut info,
        )
    };
    assert_eq!(info, 0);
    tau
}

/// Calls orgqr/ungqr on the first `n` columns of `a` with `k` reflectors.
pub(super) fn orgqr<E: T>(a: &mut Mat<E>, n: usize, k: usize, tau: &[E]) -> i32 {
    let f: Orgqr<E> = sym(&orgqr_name::<E>());
    let m = a.rows as i32;
    let mut q = [E::zero()];
    let mut info = 99;
    // SAFETY: a query writes work[0] only.
    unsafe {
        f(
            &m,
            &(n as i32),
            &(k as i32),
            a.ptr(),
            &a.ld(),
            tau.as_ptr(),
            q.as_mut_ptr(),
            &-1,
            &mut info,
        )
    };
    assert_eq!(info, 0);
    let lwork = q[0].to_c().re as usize;
    assert_eq!(lwork, n.max(1));
    let mut work = vec![E::zero(); lwork];
    // SAFETY: arrays sized for the dimensions.
    unsafe {
        f(
            &m,
            &(n as i32),
            &(k as i32),
            a.ptr(),
            &a.ld(),
            tau.as_ptr(),
            work.as_mut_ptr(),
            &(lwork as i32),
            &mut info,
        )
    };
    info
}

/// `H(1) ... H(k)` applied to the first `n` columns of the identity, from the reflectors stored
/// below the diagonal of `a` (reference).
fn reflector_product(a: &Ref, tau: &[c64], n: usize) -> Ref {
    let m = a.rows;
    let mut q = Ref::identity(m).cols(0, n);
    for (i, &t) in tau.iter().enumerate().rev() {
        let mut v = Ref::zeros(m, 1);
        v.set(i, 0, c64::new(1.0, 0.0));
        for r in i + 1..m {
            v.set(r, 0, a.at(r, i));
        }
        // q := (I - t v v^H) q
        let w = v.h().mul(&q);
        q = q.sub(&v.mul(&w).scale(t));
    }
    q
}

fn check_qr<E: T>(m: usize, n: usize, pad: usize, seed: u64) {
    let rng = &mut Rng::new(seed);
    let mut a = Mat::<E>::random(rng, m, n, pad);
    let a0 = a.to_ref();
    let tau = geqrf(&mut a);
    a.assert_padding();
    let k = m.min(n);
    let f = a.to_ref();
    let r = f.rows(0, k).triangle(false, false);
    // Q from the reference product of the reflectors
    let tc: Vec<c64> = tau.iter().map(|t| t.to_c()).collect();
    let q_ref = reflector_product(&f, &tc, k);
    let tol = E::EPS * 16.0 * (m.max(n) as f64 + 1.0) * (a0.norm() + 1.0);
    assert_close(&q_ref.mul(&r), &a0, tol, "geqrf: H(1)..H(k) R = A");
    // orgqr/ungqr on the factored matrix: Q with orthonormal columns, Q R = A
    let mut qa = Mat::<E>::from_ref(&f.cols(0, k), pad);
    assert_eq!(orgqr(&mut qa, k, k, &tau), 0);
    qa.assert_padding();
    let q = qa.to_ref();
    let tol_q = E::EPS * 16.0 * (m as f64 + 1.0) * (k as f64 + 1.0);
    assert_close(&q.h().mul(&q), &Ref::identity(k), tol_q, "Q^H Q = I");
    assert_close(&q.mul(&r), &a0, tol, "orgqr: Q R = A");
}

per_type!(48, qr, check_qr, (m in 0usize..12, n in 0usize..12, pad in 0usize..3, seed in any::<u64>()));

/// orgqr/ungqr follow LAPACK's convention for any tau (complex ones included), with more
/// columns than reflectors (`n > k`) and more blocks than one.
fn check_orgqr_any_tau<E: T>(m: usize, n: usize, k: usize, pad: usize, zero_tau: bool, seed: u64) {
    let (n, k) = (n.min(m), k.min(n.min(m)));
    let rng = &mut Rng::new(seed);
    let mut a = Mat::<E>::random(rng, m, n, pad);
    // arbitrary taus, scaled so that the product stays well-conditioned
    let s = 1.0 / (m as f64 + 1.0);
    let mut tau: Vec<E> = (0..k)
        .map(|_| E::from_c(E::random(rng).to_c() * s))
        .collect();
    if zero_tau && k > 0 {
        tau[k / 2] = E::zero();
    }
    let want = reflector_product(
        &a.to_ref(),
        &tau.iter().map(|t| t.to_c()).collect::<Vec<_>>(),
        n,
    );
    assert_eq!(orgqr(&mut a, n, k, &tau), 0);
    a.assert_padding();
    let tol = E::EPS * 64.0 * (m as f64 + 1.0) * (k as f64 + 1.0) * (want.norm() + 1.0);
    assert_close(&a.to_ref(), &want, tol, "orgqr = H(1)..H(k) I(:, 1:n)");
}

per_type!(32, orgqr_any_tau, check_orgqr_any_tau, (
    m in 0usize..12, n in 0usize..12, k in 0usize..12, pad in 0usize..3, zero_tau in any::<bool>(),
    seed in any::<u64>(),
));

/// Several reflector blocks (k > 32) and the threaded path.
#[test]
fn large_qr_blocks() {
    check_qr::<f64>(150, 90, 1, 1);
    check_qr::<c32>(70, 100, 0, 2);
    check_orgqr_any_tau::<c64>(120, 100, 70, 1, true, 3);
}
