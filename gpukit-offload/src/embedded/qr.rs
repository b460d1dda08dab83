//! Householder QR: `geqrf` (faer's blocked QR) and `orgqr`/`ungqr` (LAPACK's blocked
//! `dorgqr` on faer's matrix products).
//!
//! Conventions: LAPACK writes `Q = H(1) H(2) ... H(k)` with `H(i) = I - tau(i) v v^H`,
//! `v(i) = 1` and `v(i+1:m)` below A's diagonal. faer's reflectors are `I - v v^H / t` with the
//! same `v` and a real `t`, so `geqrf` returns LAPACK's `tau = 1 / t` (`t` infinite, a reflector
//! that is the identity, gives `tau = 0`). `orgqr`/`ungqr` accept any `tau`, complex included, as
//! LAPACK's do: a reflector block is applied as `I - V T V^H` with LAPACK's forward `T`
//! (`dlarft`).

use super::abi::{
    answer, before_write, check, lapack, need, par, read, read_ld, scratch, stack, sz, vec_of,
    view, Buf, Int, Scalar,
};
use faer::linalg::matmul::matmul_with_conj;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::qr::no_pivoting::factor::{
    qr_in_place, qr_in_place_scratch, recommended_block_size,
};
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, Conj};

/// Reflectors per block of `orgqr`.
const BLOCK: usize = 32;

/// `?geqrf`: `A = Q R`; R above the diagonal, the reflectors below, `tau` LAPACK's.
///
/// # Safety
/// The reference LAPACK `?geqrf` interface.
pub(crate) unsafe extern "C" fn geqrf<T: Scalar>(
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    tau: *mut T,
    work: *mut T,
    lwork: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let (m, n) = (read(m, 1)?, read(n, 2)?);
            check(m >= 0, 1)?;
            check(n >= 0, 2)?;
            let (m, n) = (sz(m), sz(n));
            let lda = read_ld(lda, m, 4)?;
            let lwork = read(lwork, 7)?;
            let query = lwork == -1;
            check(
                query || (lwork > 0 && (m == 0 || lwork as usize >= n.max(1))),
                7,
            )?;
            let k = m.min(n);
            need(work, 1, 6)?;
            answer(work, T::size(if k == 0 { 1 } else { n }));
            if query || k == 0 {
                return Ok(0);
            }
            need(a, m * n, 3)?;
            need(tau, k, 5)?;
            let mut qr = Buf::load(a, m, n, lda)?;
            let bs = recommended_block_size::<T>(m, n);
            let mut h = Buf::<T>::zeros(bs, k)?;
            let p = par(2.0 * (m as f64) * (n as f64) * (k as f64));
            let mut mem = scratch(qr_in_place_scratch::<T>(m, n, bs, p, Default::default()))?;
            qr_in_place(
                qr.mat_mut(),
                h.mat_mut(),
                p,
                stack(&mut mem),
                Default::default(),
            );
            let mut taus = vec_of(k, T::zero())?;
            for (r, t) in taus.iter_mut().enumerate() {
                let f = h.at(r % bs, r).re();
                *t = if f.finite() && f != T::R::zero() {
                    T::from_re(T::R::one() / f)
                } else {
                    T::zero()
                };
            }
            before_write("geqrf");
            qr.store(a, lda);
            for (r, &t) in taus.iter().enumerate() {
                *tau.add(r) = t;
            }
            Ok(0)
        })
    }
}

/// `?orgqr` / `?ungqr`: the `m x n` matrix Q with orthonormal columns from `k` reflectors of
/// `geqrf`, overwriting A.
///
/// # Safety
/// The reference LAPACK `?orgqr`/`?ungqr` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn orgqr<T: Scalar>(
    m: *const Int,
    n: *const Int,
    k: *const Int,
    a: *mut T,
    lda: *const Int,
    tau: *const T,
    work: *mut T,
    lwork: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let (m, n, k) = (read(m, 1)?, read(n, 2)?, read(k, 3)?);
            check(m >= 0, 1)?;
            check(n >= 0 && n <= m, 2)?;
            check(k >= 0 && k <= n, 3)?;
            let (m, n, k) = (sz(m), sz(n), sz(k));
            let lda = read_ld(lda, m, 5)?;
            let lwork = read(lwork, 8)?;
            let query = lwork == -1;
            check(query || lwork >= n.max(1) as i32, 8)?;
            need(work, 1, 7)?;
            answer(work, T::size(n.max(1)));
            if query || n == 0 {
                return Ok(0);
            }
            need(a, m * n, 4)?;
            need(tau, k, 6)?;
            let mut q = Buf::<T>::zeros(m, n)?;
            for i in 0..n {
                q.set(i, i, T::one());
            }
            let av = view(a as *const T, m, k, lda);
            let p = par(4.0 * (m as f64) * (n as f64) * (k as f64));
            let mut b0 = if k == 0 { 0 } else { ((k - 1) / BLOCK) * BLOCK };
            loop {
                if k == 0 {
                    break;
                }
                let ib = BLOCK.min(k - b0);
                let rows = m - b0;
                // V: unit lower trapezoidal, from A's columns b0..b0+ib
                let mut v = Buf::<T>::zeros(rows, ib)?;
                for j in 0..ib {
                    v.set(j, j, T::one());
                    for i in j + 1..rows {
                        v.set(i, j, av[(b0 + i, b0 + j)]);
                    }
                }
                let taus: Vec<T> = (0..ib).map(|j| *tau.add(b0 + j)).collect();
                let t = forward_t(&v, &taus)?;
                // Q[b0.., b0..] := (I - V T V^H) Q[b0.., b0..]
                let cols = n - b0;
                let mut w = Buf::<T>::zeros(ib, cols)?;
                {
                    let mut qm = q.mat_mut();
                    let qs = qm.rb_mut().submatrix_mut(b0, b0, rows, cols);
                    matmul_with_conj(
                        w.mat_mut(),
                        Accum::Replace,
                        v.mat().transpose(),
                        Conj::Yes,
                        qs.rb(),
                        Conj::No,
                        T::one(),
                        p,
                    );
                }
                let mut tw = Buf::<T>::zeros(ib, cols)?;
                triangular::matmul_with_conj(
                    tw.mat_mut(),
                    BlockStructure::Rectangular,
                    Accum::Replace,
                    t.mat(),
                    BlockStructure::TriangularUpper,
                    Conj::No,
                    w.mat(),
                    BlockStructure::Rectangular,
                    Conj::No,
                    T::one(),
                    p,
                );
                {
                    let mut qm = q.mat_mut();
                    let qs = qm.rb_mut().submatrix_mut(b0, b0, rows, cols);
                    matmul_with_conj(
                        qs,
                        Accum::Add,
                        v.mat(),
                        Conj::No,
                        tw.mat(),
                        Conj::No,
                        -T::one(),
                        p,
                    );
                }
                if b0 == 0 {
                    break;
                }
                b0 -= BLOCK;
            }
            before_write("orgqr");
            q.store(a, lda);
            Ok(0)
        })
    }
}

/// LAPACK's `dlarft('F', 'C')`: the upper triangular T with `H(1) ... H(ib) = I - V T V^H`.
fn forward_t<T: Scalar>(v: &Buf<T>, taus: &[T]) -> super::abi::Outcome<Buf<T>> {
    let ib = taus.len();
    let mut s = Buf::<T>::zeros(ib, ib)?;
    matmul_with_conj(
        s.mat_mut(),
        Accum::Replace,
        v.mat().transpose(),
        Conj::Yes,
        v.mat(),
        Conj::No,
        T::one(),
        faer::Par::Seq,
    );
    let mut t = Buf::<T>::zeros(ib, ib)?;
    let mut col = vec_of(ib, T::zero())?;
    for (i, &ti) in taus.iter().enumerate() {
        t.set(i, i, ti);
        if ti == T::zero() {
            continue;
        }
        for (r, c) in col.iter_mut().enumerate().take(i) {
            *c = -ti * s.at(r, i);
        }
        // T(0..i, i) = T(0..i, 0..i) col, T upper triangular
        for r in 0..i {
            let mut acc = T::zero();
            for (c, &x) in col.iter().enumerate().take(i).skip(r) {
                acc += t.at(r, c) * x;
            }
            t.set(r, i, acc);
        }
    }
    Ok(t)
}
