//! Symmetric/Hermitian eigenvalue problems: `syev`/`heev`, `syevd`/`heevd` and `syevr`/`heevr` on faer's
//! self-adjoint eigensolver (tridiagonalization, then divide and conquer or QR iteration).
//!
//! `syevr`'s subsets (`range = 'V'`: eigenvalues in `(vl, vu]`; `'I'`: indices `il..=iu` of
//! the ascending order) are selected from the full decomposition; `abstol` is not needed (the
//! eigenvalues are computed to full accuracy). `isuppz` gives each returned eigenvector's first
//! and last nonzero row. A's referenced triangle, which LAPACK destroys, is left as it was
//! unless `syevd`/`heevd` return the eigenvectors there.

use super::abi::{
    answer, before_write, check, lapack, lower, need, par, read, read_char, read_ld, scratch,
    stack, sz, vec_of, Buf, Fail, Int, Outcome, Scalar,
};
use faer::diag::DiagMut;
use faer::linalg::evd::{self_adjoint_evd, self_adjoint_evd_scratch, ComputeEigenvectors};
use std::ffi::c_char;

/// Eigenvalues (ascending) and, when asked for, eigenvectors.
type Spectrum<T> = (Vec<<T as Scalar>::R>, Option<Buf<T>>);

/// Ascending eigenvalues and (optionally) the eigenvectors of the Hermitian matrix stored in
/// the `low`/upper triangle at `a`; `Err(info)` (positive) for a non-finite input or no
/// convergence.
///
/// # Safety
/// `a` is valid for the `n x n` extent with leading dimension `lda`.
unsafe fn decompose<T: Scalar>(
    a: *const T,
    n: usize,
    lda: usize,
    low: bool,
    vectors: bool,
) -> Outcome<Result<Spectrum<T>, i32>> {
    // SAFETY: forwarded.
    let l = unsafe { Buf::load_lower(a, n, lda, low) }?;
    if !l.all_finite() {
        return Ok(Err(n as i32));
    }
    let p = par(9.0 * (n as f64).powi(3));
    let job = if vectors {
        ComputeEigenvectors::Yes
    } else {
        ComputeEigenvectors::No
    };
    let mut mem = scratch(self_adjoint_evd_scratch::<T>(n, job, p, Default::default()))?;
    let mut s = vec_of(n, T::zero())?;
    let mut u = if vectors {
        Some(Buf::<T>::zeros(n, n)?)
    } else {
        None
    };
    let r = self_adjoint_evd(
        l.mat(),
        DiagMut::from_slice_mut(&mut s),
        u.as_mut().map(|u| u.mat_mut()),
        p,
        stack(&mut mem),
        Default::default(),
    );
    if r.is_err() {
        return Ok(Err(n as i32));
    }
    Ok(Ok((s.iter().map(|v| v.re()).collect(), u)))
}

/// Parses `jobz`: true for eigenvectors.
fn jobz(c: u8, pos: i32) -> Outcome<bool> {
    match c {
        b'V' => Ok(true),
        b'N' => Ok(false),
        _ => Err(Fail::Arg(pos)),
    }
}

/// The body of `syevd` (`rwork = None`) and `heevd`.
///
/// # Safety
/// The reference LAPACK `?syevd`/`?heevd` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn evd<T: Scalar>(
    jz: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    w: *mut T::R,
    work: *mut T,
    lwork: *const Int,
    rwork: Option<(*mut T::R, *const Int)>,
    iwork: *mut Int,
    liwork: *const Int,
) -> Outcome<i32> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        let wantz = jobz(read_char(jz, 1)?, 1)?;
        let low = lower(read_char(uplo, 2)?, 2)?;
        let n = read(n, 3)?;
        check(n >= 0, 3)?;
        let n = sz(n);
        let lda = read_ld(lda, n, 5)?;
        // LAPACK's minimum sizes (also the answers: this backend needs no caller workspace)
        let (lw, lrw, liw) = match (n <= 1, wantz, T::COMPLEX) {
            (true, _, _) => (1, 1, 1),
            (false, true, false) => (1 + 6 * n + 2 * n * n, 0, 3 + 5 * n),
            (false, false, false) => (2 * n + 1, 0, 1),
            (false, true, true) => (2 * n + n * n, 1 + 5 * n + 2 * n * n, 3 + 5 * n),
            (false, false, true) => (n + 1, n, 1),
        };
        let lwork = read(lwork, 8)?;
        let (rwork, lrwork, liwork, piw) = match rwork {
            Some((rw, lrw_p)) => (rw, read(lrw_p, 10)?, read(liwork, 12)?, 12),
            None => (std::ptr::null_mut(), 0, read(liwork, 10)?, 10),
        };
        let query = lwork == -1 || liwork == -1 || (T::COMPLEX && lrwork == -1);
        check(query || lwork as i64 >= lw as i64, 8)?;
        if T::COMPLEX {
            check(query || lrwork as i64 >= lrw as i64, 10)?;
        }
        check(query || liwork as i64 >= liw as i64, piw)?;
        need(work, 1, 7)?;
        need(iwork, 1, piw - 1)?;
        if T::COMPLEX {
            need(rwork, 1, 9)?;
        }
        answer(work, T::size(lw));
        answer(iwork, liw as Int);
        if T::COMPLEX {
            answer(rwork, T::R::size(lrw));
        }
        if query || n == 0 {
            return Ok(0);
        }
        solve_into(
            a,
            n,
            lda,
            low,
            wantz,
            w,
            if T::COMPLEX { "heevd" } else { "syevd" },
        )
    }
}

/// The common end of `syev`/`heev` and `syevd`/`heevd` once the arguments are checked: the
/// eigenvalues into `w`, with `wantz` the eigenvectors over A; nothing written on failure.
///
/// # Safety
/// `a` is valid for the `n x n` extent with leading dimension `lda` (n >= 1), `w` for `n`
/// reals.
unsafe fn solve_into<T: Scalar>(
    a: *mut T,
    n: usize,
    lda: usize,
    low: bool,
    wantz: bool,
    w: *mut T::R,
    name: &'static str,
) -> Outcome<i32> {
    // SAFETY: the caller's contract (extents checked by the routine bodies).
    unsafe {
        need(a, n * n, 4)?;
        need(w, n, 6)?;
        if n == 1 {
            let v = (*a).re();
            before_write(name);
            *w = v;
            if wantz {
                *a = T::one();
            }
            return Ok(0);
        }
        let (vals, vecs) = match decompose(a, n, lda, low, wantz)? {
            Ok(r) => r,
            Err(info) => return Ok(info),
        };
        before_write(name);
        for (i, &v) in vals.iter().enumerate() {
            *w.add(i) = v;
        }
        if let Some(u) = vecs {
            u.store(a, lda);
        }
        Ok(0)
    }
}

/// `?syevd` (real): eigenvalues ascending in `w`; with `jobz = 'V'` the orthonormal
/// eigenvectors overwrite A.
///
/// # Safety
/// The reference LAPACK `?syevd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn syevd<T: Scalar>(
    jz: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    w: *mut T::R,
    work: *mut T,
    lwork: *const Int,
    iwork: *mut Int,
    liwork: *const Int,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            evd(jz, uplo, n, a, lda, w, work, lwork, None, iwork, liwork)
        })
    }
}

/// `?heevd` (complex).
///
/// # Safety
/// The reference LAPACK `?heevd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn heevd<T: Scalar>(
    jz: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    w: *mut T::R,
    work: *mut T,
    lwork: *const Int,
    rwork: *mut T::R,
    lrwork: *const Int,
    iwork: *mut Int,
    liwork: *const Int,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            evd(
                jz,
                uplo,
                n,
                a,
                lda,
                w,
                work,
                lwork,
                Some((rwork, lrwork)),
                iwork,
                liwork,
            )
        })
    }
}

/// The body of `syev` (`rwork = None`) and `heev`: the simple driver, answered by the same
/// decomposition as `syevd` (LAPACK's QR iteration and divide and conquer compute the same
/// eigenvalues and, up to the signs of eigenvectors of simple eigenvalues, the same vectors).
///
/// # Safety
/// The reference LAPACK `?syev`/`?heev` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn ev<T: Scalar>(
    jz: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    w: *mut T::R,
    work: *mut T,
    lwork: *const Int,
    rwork: Option<*mut T::R>,
) -> Outcome<i32> {
    let name = if T::COMPLEX { "heev" } else { "syev" };
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        let wantz = jobz(read_char(jz, 1)?, 1)?;
        let low = lower(read_char(uplo, 2)?, 2)?;
        let n = read(n, 3)?;
        check(n >= 0, 3)?;
        let n = sz(n);
        let lda = read_ld(lda, n, 5)?;
        // LAPACK's minimum lwork (also the query's answer: this backend needs no workspace)
        let lw = match (n <= 1, T::COMPLEX) {
            (true, _) => 1,
            (false, false) => 3 * n - 1,
            (false, true) => 2 * n - 1,
        };
        let lwork = read(lwork, 8)?;
        let query = lwork == -1;
        check(query || lwork as i64 >= lw as i64, 8)?;
        need(work, 1, 7)?;
        answer(work, T::size(lw));
        if query || n == 0 {
            return Ok(0);
        }
        if let Some(rw) = rwork {
            // rwork(max(1, 3n - 2)) is scratch in LAPACK: only its presence is checked
            need(rw, 1, 9)?;
        }
        solve_into(a, n, lda, low, wantz, w, name)
    }
}

/// `?syev` (real): eigenvalues ascending in `w`; with `jobz = 'V'` the orthonormal
/// eigenvectors overwrite A.
///
/// # Safety
/// The reference LAPACK `?syev` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn syev<T: Scalar>(
    jz: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    w: *mut T::R,
    work: *mut T,
    lwork: *const Int,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe { lapack(info, || ev(jz, uplo, n, a, lda, w, work, lwork, None)) }
}

/// `?heev` (complex).
///
/// # Safety
/// The reference LAPACK `?heev` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn heev<T: Scalar>(
    jz: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    w: *mut T::R,
    work: *mut T,
    lwork: *const Int,
    rwork: *mut T::R,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            ev(jz, uplo, n, a, lda, w, work, lwork, Some(rwork))
        })
    }
}

/// The eigenvalue selection of `syevr`.
enum Range<R> {
    All,
    Values(R, R),
    Indices(usize, usize),
}

/// The arguments of `syevr`/`heevr` after `abstol` (whose positions differ by `rwork`).
struct EvrOut<T: Scalar> {
    m: *mut Int,
    w: *mut T::R,
    z: *mut T,
    ldz: *const Int,
    isuppz: *mut Int,
    work: *mut T,
    lwork: *const Int,
    rwork: Option<(*mut T::R, *const Int)>,
    iwork: *mut Int,
    liwork: *const Int,
}

/// The body of `syevr` and `heevr`.
///
/// # Safety
/// The reference LAPACK `?syevr`/`?heevr` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn evr<T: Scalar>(
    jz: *const c_char,
    range: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    vl: *const T::R,
    vu: *const T::R,
    il: *const Int,
    iu: *const Int,
    out: EvrOut<T>,
) -> Outcome<i32> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        let wantz = jobz(read_char(jz, 1)?, 1)?;
        let rc = read_char(range, 2)?;
        check(matches!(rc, b'A' | b'V' | b'I'), 2)?;
        let low = lower(read_char(uplo, 3)?, 3)?;
        let n = read(n, 4)?;
        check(n >= 0, 4)?;
        let lda = read_ld(lda, sz(n), 6)?;
        let sel = match rc {
            b'V' => {
                let (lo, hi) = (read(vl, 7)?, read(vu, 8)?);
                check(n == 0 || hi > lo, 8)?;
                Range::Values(lo, hi)
            }
            b'I' => {
                let (l, u) = (read(il, 9)?, read(iu, 10)?);
                check(l >= 1 && l <= n.max(1), 9)?;
                check(u >= n.min(l) && u <= n, 10)?;
                Range::Indices(sz(l), sz(u))
            }
            _ => Range::All,
        };
        let n = sz(n);
        let ldz = read(out.ldz, 15)?;
        check(ldz >= 1 && (!wantz || ldz as usize >= n), 15)?;
        let ldz = ldz as usize;
        let (pw, prw, piw) = if T::COMPLEX {
            (18, 20, 22)
        } else {
            (18, 0, 20)
        };
        let (lw, lrw, liw) = if T::COMPLEX {
            ((2 * n).max(1), (24 * n).max(1), (10 * n).max(1))
        } else {
            ((26 * n).max(1), 0, (10 * n).max(1))
        };
        let lwork = read(out.lwork, pw)?;
        let (rwork, lrwork) = match out.rwork {
            Some((rw, l)) => (rw, read(l, prw)?),
            None => (std::ptr::null_mut(), 0),
        };
        let liwork = read(out.liwork, piw)?;
        let query = lwork == -1 || liwork == -1 || (T::COMPLEX && lrwork == -1);
        check(query || lwork as i64 >= lw as i64, pw)?;
        if T::COMPLEX {
            check(query || lrwork as i64 >= lrw as i64, prw)?;
        }
        check(query || liwork as i64 >= liw as i64, piw)?;
        need(out.work, 1, pw - 1)?;
        need(out.iwork, 1, piw - 1)?;
        if T::COMPLEX {
            need(rwork, 1, prw - 1)?;
        }
        need(out.m, 1, 12)?;
        let name = if T::COMPLEX { "heevr" } else { "syevr" };
        answer(out.work, T::size(lw));
        answer(out.iwork, liw as Int);
        if T::COMPLEX {
            answer(rwork, T::R::size(lrw));
        }
        if query {
            return Ok(0);
        }
        if n == 0 {
            *out.m = 0;
            return Ok(0);
        }
        need(a, n * n, 5)?;
        need(out.w, n, 13)?;
        if wantz {
            need(out.z, 1, 14)?;
            need(out.isuppz, 2, 16)?;
        }
        if n == 1 {
            // LAPACK's n = 1 path: Z(1,1) = 1 even when the value is not selected
            let v = (*a).re();
            let take = match sel {
                Range::Values(lo, hi) => lo < v && hi >= v,
                _ => true,
            };
            before_write(name);
            *out.m = take as Int;
            if take {
                *out.w = v;
            }
            if wantz {
                *out.z = T::one();
                *out.isuppz = 1;
                *out.isuppz.add(1) = 1;
            }
            return Ok(0);
        }
        let (vals, vecs) = match decompose(a, n, lda, low, wantz)? {
            Ok(r) => r,
            Err(info) => return Ok(info),
        };
        let (first, count) = match sel {
            Range::All => (0, n),
            Range::Indices(l, u) => (l - 1, (u + 1).saturating_sub(l)),
            Range::Values(lo, hi) => {
                let first = vals.iter().take_while(|&&v| v <= lo).count();
                let last = vals.iter().take_while(|&&v| v <= hi).count();
                (first, last.saturating_sub(first))
            }
        };
        let mut support = vec_of(2 * count, 0 as Int)?;
        if let Some(u) = &vecs {
            for j in 0..count {
                let col = first + j;
                let nz: Vec<usize> = (0..n).filter(|&i| u.at(i, col) != T::zero()).collect();
                let (lo, hi) = match (nz.first(), nz.last()) {
                    (Some(&lo), Some(&hi)) => (lo, hi),
                    _ => (0, n - 1),
                };
                support[2 * j] = lo as Int + 1;
                support[2 * j + 1] = hi as Int + 1;
            }
        }
        before_write(name);
        *out.m = count as Int;
        for j in 0..count {
            *out.w.add(j) = vals[first + j];
        }
        if let Some(u) = vecs {
            for j in 0..count {
                for i in 0..n {
                    *out.z.add(i + j * ldz) = u.at(i, first + j);
                }
            }
            for (i, &s) in support.iter().enumerate() {
                *out.isuppz.add(i) = s;
            }
        }
        Ok(0)
    }
}

/// `?syevr` (real): selected eigenvalues ascending in `w(1:m)`, eigenvectors in `Z(:, 1:m)`.
///
/// # Safety
/// The reference LAPACK `?syevr` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn syevr<T: Scalar>(
    jz: *const c_char,
    range: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    vl: *const T::R,
    vu: *const T::R,
    il: *const Int,
    iu: *const Int,
    _abstol: *const T::R,
    m: *mut Int,
    w: *mut T::R,
    z: *mut T,
    ldz: *const Int,
    isuppz: *mut Int,
    work: *mut T,
    lwork: *const Int,
    iwork: *mut Int,
    liwork: *const Int,
    info: *mut Int,
) {
    let out = EvrOut {
        m,
        w,
        z,
        ldz,
        isuppz,
        work,
        lwork,
        rwork: None,
        iwork,
        liwork,
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            evr(jz, range, uplo, n, a, lda, vl, vu, il, iu, out)
        })
    }
}

/// `?heevr` (complex).
///
/// # Safety
/// The reference LAPACK `?heevr` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn heevr<T: Scalar>(
    jz: *const c_char,
    range: *const c_char,
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    vl: *const T::R,
    vu: *const T::R,
    il: *const Int,
    iu: *const Int,
    _abstol: *const T::R,
    m: *mut Int,
    w: *mut T::R,
    z: *mut T,
    ldz: *const Int,
    isuppz: *mut Int,
    work: *mut T,
    lwork: *const Int,
    rwork: *mut T::R,
    lrwork: *const Int,
    iwork: *mut Int,
    liwork: *const Int,
    info: *mut Int,
) {
    let out = EvrOut {
        m,
        w,
        z,
        ldz,
        isuppz,
        work,
        lwork,
        rwork: Some((rwork, lrwork)),
        iwork,
        liwork,
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            evr(jz, range, uplo, n, a, lda, vl, vu, il, iu, out)
        })
    }
}
