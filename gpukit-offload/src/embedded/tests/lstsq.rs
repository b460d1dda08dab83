//! gelsd on matrices of known rank and singular values: the minimum-norm least-squares
//! solution `V diag(1/s) U^H b`, the rank by `rcond`, the residual rows numpy reads, rows of B
//! beyond m ignored on input, a zero A.

use super::*;

type Gelsd<E, R> = unsafe extern "C" fn(
    *const i32,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *const R,
    *mut i32,
    *mut E,
    *const i32,
    *mut i32,
    *mut i32,
);
type GelsdC<E, R> = unsafe extern "C" fn(
    *const i32,
    *const i32,
    *const i32,
    *mut E,
    *const i32,
    *mut E,
    *const i32,
    *mut R,
    *const R,
    *mut i32,
    *mut E,
    *const i32,
    *mut R,
    *mut i32,
    *mut i32,
);

/// Calls gelsd with the queried workspace; returns (info, s, rank).
pub(super) fn gelsd<E: T>(
    a: &mut Mat<E>,
    b: &mut Mat<E>,
    nrhs: usize,
    rcond: f64,
) -> (i32, Vec<f64>, i32)
where
    E::R: T,
{
    let (m, n) = (a.rows as i32, a.cols as i32);
    let k = a.rows.min(a.cols);
    let mut s = vec![E::R::zero(); k.max(1)];
    let rc = E::R::from_c(c64::new(rcond, 0.0));
    let mut rank = -5;
    let mut info = 99;
    let (mut wq, mut rq, mut iq) = ([E::zero()], [E::R::zero()], [0i32]);
    let mut go = |work: &mut [E],
                  lw: i32,
                  rwork: &mut [E::R],
                  iwork: &mut [i32],
                  a: &mut Mat<E>,
                  b: &mut Mat<E>,
                  info: &mut i32| {
        // SAFETY: arrays sized for the dimensions (a query writes first elements only).
        unsafe {
            if E::COMPLEX {
                let f: GelsdC<E, E::R> = sym(&name::<E>("gelsd"));
                f(
                    &m,
                    &n,
                    &(nrhs as i32),
                    a.ptr(),
                    &a.ld(),
                    b.ptr(),
                    &b.ld(),
                    s.as_mut_ptr(),
                    &rc,
                    &mut rank,
                    work.as_mut_ptr(),
                    &lw,
                    rwork.as_mut_ptr(),
                    iwork.as_mut_ptr(),
                    info,
                )
            } else {
                let f: Gelsd<E, E::R> = sym(&name::<E>("gelsd"));
                f(
                    &m,
                    &n,
                    &(nrhs as i32),
                    a.ptr(),
                    &a.ld(),
                    b.ptr(),
                    &b.ld(),
                    s.as_mut_ptr(),
                    &rc,
                    &mut rank,
                    work.as_mut_ptr(),
                    &lw,
                    iwork.as_mut_ptr(),
                    info,
                )
            }
        }
    };
    go(&mut wq, -1, &mut rq, &mut iq, a, b, &mut info);
    assert_eq!(info, 0, "query");
    let lw = wq[0].to_c().re as usize;
    let liw = iq[0] as usize;
    let lrw = if E::COMPLEX {
        rq[0].to_c().re as usize
    } else {
        1
    };
    assert!(lw >= 1 && liw >= 1 && lrw >= 1);
    let mut work = vec![E::zero(); lw];
    let mut rwork = vec![E::R::zero(); lrw];
    let mut iwork = vec![0i32; liw];
    go(
        &mut work, lw as i32, &mut rwork, &mut iwork, a, b, &mut info,
    );
    (info, s.iter().take(k).map(|v| v.to_c().re).collect(), rank)
}

#[allow(clippy::too_many_arguments)]
fn check_gelsd<E: T>(m: usize, n: usize, nrhs: usize, deficit: usize, pad: usize, seed: u64)
where
    E::R: T,
{
    let rng = &mut Rng::new(seed);
    let k = m.min(n);
    let r = k.saturating_sub(deficit);
    let mut d: Vec<f64> = (0..r)
        .map(|i| 3.0 - 2.0 * (i as f64 + 0.5) / r.max(1) as f64)
        .collect();
    d.sort_by(|a, b| b.total_cmp(a));
    let u = orthonormal(rng, m, r, E::COMPLEX);
    let v = orthonormal(rng, n, r, E::COMPLEX);
    let mut a = Mat::<E>::from_ref(&u.mul(&diag(&d)).mul(&v.h()), pad);
    let ar = a.to_ref();
    let mx = m.max(n);
    let mut b = Mat::<E>::random(rng, mx, nrhs, pad);
    // rows m..max(m, n) are not input: NaN there must not matter
    for j in 0..nrhs {
        for i in m..mx {
            b.set(i, j, nan());
        }
    }
    let b0 = b.to_ref().rows(0, m);
    let a_before = a.clone();
    // a threshold between the exact zeros (rounding noise) and the smallest nonzero value
    let rcond = if deficit == 0 { -1.0 } else { 1e-3 };
    let (info, s, rank) = gelsd(&mut a, &mut b, nrhs, rcond);
    assert_eq!(info, 0);
    assert_eq!(
        format!("{:?}", a.data),
        format!("{:?}", a_before.data),
        "A untouched"
    );
    b.assert_padding();
    if k == 0 {
        assert_eq!(rank, 0);
        return;
    }
    assert_eq!(rank as usize, r, "rank");
    let tol = E::EPS * 64.0 * (mx as f64 + 1.0) * 3.0;
    for i in 0..k {
        let want = if i < r { d[i] } else { 0.0 };
        assert!((s[i] - want).abs() <= tol, "s[{i}] = {} vs {want}", s[i]);
    }
    // x = V diag(1/d) U^H b
    let dinv: Vec<f64> = d.iter().map(|x| 1.0 / x).collect();
    let want = v.mul(&diag(&dinv)).mul(&u.h()).mul(&b0);
    let x = b.to_ref().rows(0, n);
    assert_close(&x, &want, tol * (b0.norm() + 1.0), "minimum-norm solution");
    if m > n && r == n {
        // residual sums of squares in rows n..m (numpy's lstsq reads them there)
        let res = ar.mul(&x).sub(&b0);
        for j in 0..nrhs {
            let want: f64 = (0..m).map(|i| res.at(i, j).norm_sqr()).sum();
            let got: f64 = (n..m).map(|i| b.at(i, j).to_c().norm_sqr()).sum();
            assert!(
                (got - want).abs() <= tol * (b0.norm() + 1.0).powi(2),
                "residual {got} vs {want}"
            );
        }
    }
}

mod gelsd_cases {
    use super::*;
    use proptest::prelude::*;
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn s(m in 0usize..10, n in 0usize..10, nrhs in 0usize..4, deficit in 0usize..3, pad in 0usize..3, seed in any::<u64>()) { check_gelsd::<f32>(m, n, nrhs, deficit, pad, seed) }
        #[test]
        fn d(m in 0usize..10, n in 0usize..10, nrhs in 0usize..4, deficit in 0usize..3, pad in 0usize..3, seed in any::<u64>()) { check_gelsd::<f64>(m, n, nrhs, deficit, pad, seed) }
        #[test]
        fn c(m in 0usize..10, n in 0usize..10, nrhs in 0usize..4, deficit in 0usize..3, pad in 0usize..3, seed in any::<u64>()) { check_gelsd::<c32>(m, n, nrhs, deficit, pad, seed) }
        #[test]
        fn z(m in 0usize..10, n in 0usize..10, nrhs in 0usize..4, deficit in 0usize..3, pad in 0usize..3, seed in any::<u64>()) { check_gelsd::<c64>(m, n, nrhs, deficit, pad, seed) }
    }
}

#[test]
fn gelsd_zero_matrix_and_large() {
    let mut a = Mat::<f64>::filled(5, 3, 1, 0.0);
    let mut b = Mat::<f64>::random(&mut Rng::new(1), 5, 2, 0);
    let (info, s, rank) = gelsd(&mut a, &mut b, 2, -1.0);
    assert_eq!((info, rank), (0, 0));
    assert_eq!(s, vec![0.0; 3]);
    assert_eq!(b.to_ref(), Ref::zeros(5, 2), "zero A: B zeroed");
    check_gelsd::<f64>(170, 60, 3, 0, 1, 2);
    check_gelsd::<c32>(40, 130, 2, 4, 0, 3);
}
