//! `gelsd`: the minimum-norm least-squares solution through the SVD, on faer's QR and SVD.
//!
//! As LAPACK (whose `gelsd` reduces A by orthogonal transformations first): for `m >= n`,
//! `A = Q R`, `B := Q^H B`, then the SVD of R solves the first n rows, and rows `n+1..m` of B
//! keep `(Q^H B)(n+1:m)`, whose column norms squared are the residual sums of squares when
//! `rank = n` (numpy's `lstsq` reads its residuals there). For `m < n`, `A^H = Q R`, the
//! minimum-norm solution of `R^H y = b` (SVD of `R^H`) gives `x = Q y`. Singular values
//! `s(i) <= rcond * s(1)` count as zero (`rcond <= 0` or `>= 1`: machine epsilon, as `dlalsd`).
//! A zero A gives `x = 0`, `rank = 0`; a non-finite A gives `info = min(m, n)` and writes
//! nothing. A, which LAPACK destroys, is left as it was.

use super::abi::{
    answer, before_write, check, lapack, need, par, read, read_ld, scratch, stack, sz, view, Buf,
    Int, Outcome, RealScalar, Scalar,
};
use super::svd::decompose;
use faer::linalg::householder::{
    apply_block_householder_sequence_on_the_left_in_place_scratch,
    apply_block_householder_sequence_on_the_left_in_place_with_conj,
    apply_block_householder_sequence_transpose_on_the_left_in_place_scratch,
    apply_block_householder_sequence_transpose_on_the_left_in_place_with_conj,
};
use faer::linalg::matmul::matmul_with_conj;
use faer::linalg::qr::no_pivoting::factor::{
    qr_in_place, qr_in_place_scratch, recommended_block_size,
};
use faer::linalg::svd::ComputeSvdVectors;
use faer::prelude::ReborrowMut;
use faer::{Accum, Conj};

/// LAPACK's `SMLSIZ` for `gelsd` (`ilaenv(9, ...)`).
const SMLSIZ: usize = 25;

/// LAPACK's documented minimum workspace sizes `(lwork, lrwork, liwork)` of `?gelsd`.
fn workspace<T: Scalar>(m: usize, n: usize, nrhs: usize) -> (usize, usize, usize) {
    let mn = m.min(n);
    if mn == 0 {
        return (1, 1, 1);
    }
    let nlvl = ((mn as f64 / (SMLSIZ + 1) as f64).log2() as i64 + 1).max(0) as usize;
    let liwork = (3 * mn * nlvl + 11 * mn).max(1);
    if T::COMPLEX {
        let lwork = 2 * mn + mn * nrhs;
        let lrwork = 10 * mn
            + 2 * mn * SMLSIZ
            + 8 * mn * nlvl
            + 3 * SMLSIZ * nrhs
            + ((SMLSIZ + 1) * (SMLSIZ + 1)).max(mn * (1 + nrhs) + 2 * nrhs);
        (lwork.max(1), lrwork, liwork)
    } else {
        let lwork = 12 * mn + 2 * mn * SMLSIZ + 8 * mn * nlvl + mn * nrhs + (SMLSIZ + 1).pow(2);
        (lwork, 1, liwork)
    }
}

/// The outputs of `gelsd` after `lwork` (complex routines have `rwork` before `iwork`).
struct Extra<T: Scalar> {
    rwork: *mut T::R,
    iwork: *mut Int,
}

/// The body of `gelsd` (real and complex).
///
/// # Safety
/// The reference LAPACK `?gelsd` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn body<T: Scalar>(
    m: *const Int,
    n: *const Int,
    nrhs: *const Int,
    a: *const T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
    s: *mut T::R,
    rcond: *const T::R,
    rank: *mut Int,
    work: *mut T,
    lwork: *const Int,
    extra: Extra<T>,
) -> Outcome<i32> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        let (m, n, nrhs) = (read(m, 1)?, read(n, 2)?, read(nrhs, 3)?);
        check(m >= 0, 1)?;
        check(n >= 0, 2)?;
        check(nrhs >= 0, 3)?;
        let (m, n, nrhs) = (sz(m), sz(n), sz(nrhs));
        let (mn, mx) = (m.min(n), m.max(n));
        let lda = read_ld(lda, m, 5)?;
        let ldb = read_ld(ldb, mx, 7)?;
        let lwork = read(lwork, 12)?;
        let query = lwork == -1;
        check(query || lwork >= 1, 12)?;
        let piw = if T::COMPLEX { 14 } else { 13 };
        need(work, 1, 11)?;
        need(extra.iwork, 1, piw)?;
        if T::COMPLEX {
            need(extra.rwork, 1, 13)?;
        }
        let (lw, lrw, liw) = workspace::<T>(m, n, nrhs);
        answer(work, T::size(lw));
        answer(extra.iwork, liw as Int);
        if T::COMPLEX {
            answer(extra.rwork, T::R::size(lrw));
        }
        if query {
            return Ok(0);
        }
        need(rank, 1, 10)?;
        if mn == 0 {
            *rank = 0;
            return Ok(0);
        }
        need(a, m * n, 4)?;
        need(s, mn, 8)?;
        need(b, mx * nrhs, 6)?;
        let rc = read(rcond, 9)?;
        let av = view(a, m, n, lda);
        let mut finite = true;
        let mut zero = true;
        for j in 0..n {
            for i in 0..m {
                let v = av[(i, j)];
                finite &= v.finite();
                zero &= v == T::zero();
            }
        }
        if !finite {
            return Ok(mn as i32);
        }
        if zero {
            let x = Buf::<T>::zeros(mx, nrhs)?;
            before_write("gelsd");
            x.store(b, ldb);
            for i in 0..mn {
                *s.add(i) = T::R::zero();
            }
            *rank = 0;
            return Ok(0);
        }
        let eps = T::R::EPS;
        let rcnd = if rc <= T::R::zero() || rc >= T::R::one() {
            eps
        } else {
            rc
        };
        let solved = if m >= n {
            tall(av, b, ldb, m, n, nrhs, rcnd)?
        } else {
            wide(av, b, ldb, m, n, nrhs, rcnd)?
        };
        let Some((x, sv, r)) = solved else {
            return Ok(mn as i32);
        };
        before_write("gelsd");
        x.store(b, ldb);
        for (i, &v) in sv.iter().enumerate() {
            *s.add(i) = v;
        }
        *rank = r as Int;
        Ok(0)
    }
}

/// `x = V diag(1/s) U^H y` over the singular values above the threshold; returns the rank.
fn pseudo_solve<T: Scalar>(
    u: &Buf<T>,
    sv: &[T::R],
    v: &Buf<T>,
    y: faer::MatRef<'_, T>,
    rcnd: T::R,
    out: faer::MatMut<'_, T>,
) -> Outcome<usize> {
    let k = sv.len();
    let nrhs = y.ncols();
    let smax = sv
        .iter()
        .fold(T::R::zero(), |a, &b| if b > a { b } else { a });
    let tol = rcnd * smax;
    let mut c = Buf::<T>::zeros(k, nrhs)?;
    let p = par(4.0 * (k * k) as f64 * nrhs as f64);
    matmul_with_conj(
        c.mat_mut(),
        Accum::Replace,
        u.mat().transpose(),
        Conj::Yes,
        y,
        Conj::No,
        T::one(),
        p,
    );
    let mut rank = 0;
    for (i, &si) in sv.iter().enumerate() {
        let inv = if si > tol {
            rank += 1;
            T::from_re(T::R::one() / si)
        } else {
            T::zero()
        };
        for j in 0..nrhs {
            c.set(i, j, c.at(i, j) * inv);
        }
    }
    matmul_with_conj(
        out,
        Accum::Replace,
        v.mat(),
        Conj::No,
        c.mat(),
        Conj::No,
        T::one(),
        p,
    );
    Ok(rank)
}

/// `m >= n`. `None`: the SVD did not converge.
///
/// # Safety
/// `b` is valid for the `m x nrhs` extent with leading dimension `ldb`.
#[allow(clippy::type_complexity)]
unsafe fn tall<T: Scalar>(
    av: faer::MatRef<'_, T>,
    b: *const T,
    ldb: usize,
    m: usize,
    n: usize,
    nrhs: usize,
    rcnd: T::R,
) -> Outcome<Option<(Buf<T>, Vec<T::R>, usize)>> {
    let p = par(2.0 * (m * n) as f64 * n as f64);
    let mut qr = Buf::<T>::zeros(m, n)?;
    qr.mat_mut().copy_from(av);
    let bs = recommended_block_size::<T>(m, n);
    let mut h = Buf::<T>::zeros(bs, n)?;
    let req = qr_in_place_scratch::<T>(m, n, bs, p, Default::default()).or(
        apply_block_householder_sequence_transpose_on_the_left_in_place_scratch::<T>(m, bs, nrhs),
    );
    let mut mem = scratch(req)?;
    qr_in_place(
        qr.mat_mut(),
        h.mat_mut(),
        p,
        stack(&mut mem),
        Default::default(),
    );
    // SAFETY: forwarded.
    let mut qb = unsafe { Buf::load(b, m, nrhs, ldb) }?;
    apply_block_householder_sequence_transpose_on_the_left_in_place_with_conj(
        qr.mat(),
        h.mat(),
        Conj::Yes,
        qb.mat_mut(),
        p,
        stack(&mut mem),
    );
    let mut r = Buf::<T>::zeros(n, n)?;
    for j in 0..n {
        for i in 0..=j {
            r.set(i, j, qr.at(i, j));
        }
    }
    let (sv, u, v) = match decompose(r.mat(), ComputeSvdVectors::Thin, ComputeSvdVectors::Thin)? {
        Ok((sv, Some(u), Some(v))) => (sv, u, v),
        _ => return Ok(None),
    };
    let mut x = Buf::<T>::zeros(n, nrhs)?;
    let rank = {
        let y = qb.mat().subrows(0, n);
        pseudo_solve(&u, &sv, &v, y, rcnd, x.mat_mut())?
    };
    // rows 0..n: the solution; rows n..m keep (Q^H B)(n..m)
    let mut out = qb;
    {
        let mut om = out.mat_mut();
        om.rb_mut().subrows_mut(0, n).copy_from(x.mat());
    }
    Ok(Some((out, sv, rank)))
}

/// `m < n`. `None`: the SVD did not converge.
///
/// # Safety
/// `b` is valid for the `m x nrhs` extent with leading dimension `ldb`.
#[allow(clippy::type_complexity)]
unsafe fn wide<T: Scalar>(
    av: faer::MatRef<'_, T>,
    b: *const T,
    ldb: usize,
    m: usize,
    n: usize,
    nrhs: usize,
    rcnd: T::R,
) -> Outcome<Option<(Buf<T>, Vec<T::R>, usize)>> {
    let p = par(2.0 * (m * n) as f64 * m as f64);
    // A^H = Q R (n x m), so A = R^H Q^H
    let mut qr = Buf::<T>::zeros(n, m)?;
    for j in 0..m {
        for i in 0..n {
            qr.set(i, j, av[(j, i)].cj());
        }
    }
    let bs = recommended_block_size::<T>(n, m);
    let mut h = Buf::<T>::zeros(bs, m)?;
    let req = qr_in_place_scratch::<T>(n, m, bs, p, Default::default())
        .or(apply_block_householder_sequence_on_the_left_in_place_scratch::<T>(n, bs, nrhs));
    let mut mem = scratch(req)?;
    qr_in_place(
        qr.mat_mut(),
        h.mat_mut(),
        p,
        stack(&mut mem),
        Default::default(),
    );
    // R^H (m x m, lower)
    let mut rh = Buf::<T>::zeros(m, m)?;
    for j in 0..m {
        for i in 0..=j {
            rh.set(j, i, qr.at(i, j).cj());
        }
    }
    let (sv, u, v) = match decompose(rh.mat(), ComputeSvdVectors::Thin, ComputeSvdVectors::Thin)? {
        Ok((sv, Some(u), Some(v))) => (sv, u, v),
        _ => return Ok(None),
    };
    // SAFETY: forwarded.
    let bb = unsafe { Buf::load(b, m, nrhs, ldb) }?;
    let mut x = Buf::<T>::zeros(n, nrhs)?;
    let rank = {
        let mut xm = x.mat_mut();
        pseudo_solve(&u, &sv, &v, bb.mat(), rcnd, xm.rb_mut().subrows_mut(0, m))?
    };
    apply_block_householder_sequence_on_the_left_in_place_with_conj(
        qr.mat(),
        h.mat(),
        Conj::No,
        x.mat_mut(),
        p,
        stack(&mut mem),
    );
    Ok(Some((x, sv, rank)))
}

/// `?gelsd` (real).
///
/// # Safety
/// The reference LAPACK `?gelsd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gelsd<T: Scalar>(
    m: *const Int,
    n: *const Int,
    nrhs: *const Int,
    a: *mut T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
    s: *mut T::R,
    rcond: *const T::R,
    rank: *mut Int,
    work: *mut T,
    lwork: *const Int,
    iwork: *mut Int,
    info: *mut Int,
) {
    let extra = Extra {
        rwork: std::ptr::null_mut(),
        iwork,
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            body(
                m, n, nrhs, a, lda, b, ldb, s, rcond, rank, work, lwork, extra,
            )
        })
    }
}

/// `?gelsd` (complex).
///
/// # Safety
/// The reference LAPACK `?gelsd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gelsd_complex<T: Scalar>(
    m: *const Int,
    n: *const Int,
    nrhs: *const Int,
    a: *mut T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
    s: *mut T::R,
    rcond: *const T::R,
    rank: *mut Int,
    work: *mut T,
    lwork: *const Int,
    rwork: *mut T::R,
    iwork: *mut Int,
    info: *mut Int,
) {
    let extra = Extra { rwork, iwork };
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            body(
                m, n, nrhs, a, lda, b, ldb, s, rcond, rank, work, lwork, extra,
            )
        })
    }
}
