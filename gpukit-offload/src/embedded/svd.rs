//! Singular value decomposition: `gesdd` and `gesvd` on faer's SVD (bidiagonalization, then
//! divide and conquer), every job: `'A'` all vectors, `'S'` the first `min(m, n)`, `'O'` the
//! first `min(m, n)` overwriting A, `'N'` none; `m < n` included.
//!
//! faer returns `V`; LAPACK's `VT = V^H` is written. Singular values descend. A non-finite A
//! gives `gesdd`'s `info = -4` (as LAPACK >= 3.10 for NaN) and `gesvd`'s `info = min(m, n)`,
//! with nothing written. A, which LAPACK destroys unless a job is `'O'`, is left as it was.

use super::abi::{
    answer, before_write, check, lapack, need, par, read, read_char, read_ld, scratch, stack, sz,
    vec_of, view, Buf, Fail, Int, Outcome, Scalar,
};
use faer::diag::DiagMut;
use faer::linalg::svd::{svd, svd_scratch, ComputeSvdVectors};
use faer::MatRef;
use std::ffi::c_char;

/// A singular-vector job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    All,
    Some,
    Overwrite,
    None,
}

fn job(c: u8, pos: i32) -> Outcome<Job> {
    match c {
        b'A' => Ok(Job::All),
        b'S' => Ok(Job::Some),
        b'O' => Ok(Job::Overwrite),
        b'N' => Ok(Job::None),
        _ => Err(Fail::Arg(pos)),
    }
}

/// What faer computes for a job.
fn compute(j: Job) -> ComputeSvdVectors {
    match j {
        Job::All => ComputeSvdVectors::Full,
        Job::Some | Job::Overwrite => ComputeSvdVectors::Thin,
        Job::None => ComputeSvdVectors::No,
    }
}

/// Singular values (descending), U and V (those asked for).
pub(crate) type Parts<T> = (Vec<<T as Scalar>::R>, Option<Buf<T>>, Option<Buf<T>>);

/// Singular values (descending) and the requested `U` and `V`; `Err(())` when faer's
/// iteration did not converge.
pub(crate) fn decompose<T: Scalar>(
    a: MatRef<'_, T>,
    ju: ComputeSvdVectors,
    jv: ComputeSvdVectors,
) -> Outcome<Result<Parts<T>, ()>> {
    let (m, n) = (a.nrows(), a.ncols());
    let k = m.min(n);
    let width = |j: ComputeSvdVectors, rows: usize| match j {
        ComputeSvdVectors::Full => Some(rows),
        ComputeSvdVectors::Thin => Some(k),
        ComputeSvdVectors::No => None,
    };
    let mut u = width(ju, m).map(|c| Buf::<T>::zeros(m, c)).transpose()?;
    let mut v = width(jv, n).map(|c| Buf::<T>::zeros(n, c)).transpose()?;
    let p = par(8.0 * (m.max(n) as f64) * (k as f64) * (k as f64));
    let mut mem = scratch(svd_scratch::<T>(m, n, ju, jv, p, Default::default()))?;
    let mut s = vec_of(k, T::zero())?;
    let r = svd(
        a,
        DiagMut::from_slice_mut(&mut s),
        u.as_mut().map(|u| u.mat_mut()),
        v.as_mut().map(|v| v.mat_mut()),
        p,
        stack(&mut mem),
        Default::default(),
    );
    if r.is_err() {
        return Ok(Err(()));
    }
    Ok(Ok((s.iter().map(|x| x.re()).collect(), u, v)))
}

/// Writes `V^H` (rows `0..rows` of it) to the caller's `vt`.
///
/// # Safety
/// `vt` is valid for the `rows x n` extent with leading dimension `ldvt`.
unsafe fn store_vt<T: Scalar>(v: &Buf<T>, rows: usize, vt: *mut T, ldvt: usize) {
    let n = v.rows();
    for j in 0..n {
        for i in 0..rows {
            // SAFETY: inside the extent by the caller's contract.
            unsafe { *vt.add(i + j * ldvt) = v.at(j, i).cj() };
        }
    }
}

/// Whether every element of the caller's matrix is finite.
fn finite<T: Scalar>(a: MatRef<'_, T>) -> bool {
    (0..a.ncols()).all(|j| (0..a.nrows()).all(|i| a[(i, j)].finite()))
}

/// Where the decomposition's parts go.
struct Dest<T: Scalar> {
    a: *mut T,
    lda: usize,
    s: *mut T::R,
    u: *mut T,
    ldu: usize,
    vt: *mut T,
    ldvt: usize,
}

/// Computes and writes the SVD for `jobu`/`jobvt`; `nonfinite` is the `info` for a non-finite A.
///
/// # Safety
/// `d` describes the caller's checked arrays for an `m x n` A.
unsafe fn run<T: Scalar>(
    name: &'static str,
    m: usize,
    n: usize,
    ju: Job,
    jv: Job,
    d: Dest<T>,
    nonfinite: i32,
) -> Outcome<i32> {
    let k = m.min(n);
    // SAFETY: the caller's checked extent.
    let av = unsafe { view(d.a as *const T, m, n, d.lda) };
    if !finite(av) {
        return Ok(nonfinite);
    }
    let (s, u, v) = match decompose(av, compute(ju), compute(jv))? {
        Ok(r) => r,
        Err(()) => return Ok(k as i32),
    };
    before_write(name);
    // SAFETY: (whole block) the destinations were checked for these extents by the caller.
    unsafe {
        for (i, &x) in s.iter().enumerate() {
            *d.s.add(i) = x;
        }
        if let Some(u) = &u {
            match ju {
                Job::Overwrite => u.store_block(d.a, d.lda, m, k),
                Job::All | Job::Some => u.store(d.u, d.ldu),
                Job::None => {}
            }
        }
        if let Some(v) = &v {
            match jv {
                Job::Overwrite => store_vt(v, k, d.a, d.lda),
                Job::All => store_vt(v, n, d.vt, d.ldvt),
                Job::Some => store_vt(v, k, d.vt, d.ldvt),
                Job::None => {}
            }
        }
    }
    Ok(0)
}

/// The body of `gesdd` (real and complex).
///
/// # Safety
/// The reference LAPACK `?gesdd` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn gesdd_body<T: Scalar>(
    jobz: *const c_char,
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    s: *mut T::R,
    u: *mut T,
    ldu: *const Int,
    vt: *mut T,
    ldvt: *const Int,
    work: *mut T,
    lwork: *const Int,
) -> Outcome<i32> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        let jz = job(read_char(jobz, 1)?, 1)?;
        let (m, n) = (read(m, 2)?, read(n, 3)?);
        check(m >= 0, 2)?;
        check(n >= 0, 3)?;
        let (m, n) = (sz(m), sz(n));
        let (mn, mx) = (m.min(n), m.max(n));
        let lda = read_ld(lda, m, 5)?;
        let ldu = read(ldu, 8)?;
        let wants_u = matches!(jz, Job::All | Job::Some) || (jz == Job::Overwrite && m < n);
        check(ldu >= 1 && (!wants_u || ldu as usize >= m), 8)?;
        let ldvt = read(ldvt, 10)?;
        let vt_rows = match jz {
            Job::All => n,
            Job::Some => mn,
            Job::Overwrite if m >= n => n,
            _ => 0,
        };
        check(ldvt >= 1 && ldvt as usize >= vt_rows, 10)?;
        let lwork = read(lwork, 12)?;
        let query = lwork == -1;
        check(query || lwork >= 1, 12)?;
        need(work, 1, 11)?;
        let lw = if mn == 0 {
            1
        } else if T::COMPLEX {
            match jz {
                Job::None => 2 * mn + mx,
                Job::Overwrite => 2 * mn * mn + 2 * mn + mx,
                Job::Some | Job::All => mn * mn + 2 * mn + mx,
            }
        } else {
            match jz {
                Job::None => 3 * mn + mx.max(7 * mn),
                Job::Overwrite => 3 * mn + mx.max(5 * mn * mn + 4 * mn),
                Job::Some => 4 * mn * mn + 7 * mn,
                Job::All => 4 * mn * mn + 6 * mn + mx,
            }
        };
        answer(work, T::size(lw));
        if query || mn == 0 {
            return Ok(0);
        }
        need(a, m * n, 4)?;
        need(s, mn, 6)?;
        // jobz 'O': U overwrites A when m >= n, VT when m < n
        let (ju, jv) = match jz {
            Job::Overwrite if m >= n => (Job::Overwrite, Job::All),
            Job::Overwrite => (Job::All, Job::Overwrite),
            j => (j, j),
        };
        if matches!(ju, Job::All | Job::Some) {
            need(u, 1, 7)?;
        }
        if matches!(jv, Job::All | Job::Some) {
            need(vt, 1, 9)?;
        }
        let d = Dest {
            a,
            lda,
            s,
            u,
            ldu: ldu as usize,
            vt,
            ldvt: ldvt as usize,
        };
        // jobz 'O' with m >= n: VT is n x n, faer's thin V is already complete
        run("gesdd", m, n, ju, jv, d, -4)
    }
}

/// `?gesdd` (real): `A = U S VT` by divide and conquer.
///
/// # Safety
/// The reference LAPACK `?gesdd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gesdd<T: Scalar>(
    jobz: *const c_char,
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    s: *mut T::R,
    u: *mut T,
    ldu: *const Int,
    vt: *mut T,
    ldvt: *const Int,
    work: *mut T,
    lwork: *const Int,
    _iwork: *mut Int,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            gesdd_body(jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork)
        })
    }
}

/// `?gesdd` (complex; `rwork` and `iwork` are not needed).
///
/// # Safety
/// The reference LAPACK `?gesdd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gesdd_complex<T: Scalar>(
    jobz: *const c_char,
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    s: *mut T::R,
    u: *mut T,
    ldu: *const Int,
    vt: *mut T,
    ldvt: *const Int,
    work: *mut T,
    lwork: *const Int,
    _rwork: *mut T::R,
    _iwork: *mut Int,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            gesdd_body(jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork)
        })
    }
}

/// The body of `gesvd` (real and complex).
///
/// # Safety
/// The reference LAPACK `?gesvd` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn gesvd_body<T: Scalar>(
    jobu: *const c_char,
    jobvt: *const c_char,
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    s: *mut T::R,
    u: *mut T,
    ldu: *const Int,
    vt: *mut T,
    ldvt: *const Int,
    work: *mut T,
    lwork: *const Int,
) -> Outcome<i32> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        let ju = job(read_char(jobu, 1)?, 1)?;
        let jv = job(read_char(jobvt, 2)?, 2)?;
        check(!(ju == Job::Overwrite && jv == Job::Overwrite), 2)?;
        let (m, n) = (read(m, 3)?, read(n, 4)?);
        check(m >= 0, 3)?;
        check(n >= 0, 4)?;
        let (m, n) = (sz(m), sz(n));
        let (mn, mx) = (m.min(n), m.max(n));
        let lda = read_ld(lda, m, 6)?;
        let ldu = read(ldu, 9)?;
        let u_rows = if matches!(ju, Job::All | Job::Some) {
            m
        } else {
            0
        };
        check(ldu >= 1 && ldu as usize >= u_rows, 9)?;
        let ldvt = read(ldvt, 11)?;
        let vt_rows = match jv {
            Job::All => n,
            Job::Some => mn,
            _ => 0,
        };
        check(ldvt >= 1 && ldvt as usize >= vt_rows, 11)?;
        let lwork = read(lwork, 13)?;
        let query = lwork == -1;
        check(query || lwork >= 1, 13)?;
        need(work, 1, 12)?;
        let lw = if mn == 0 {
            1
        } else if T::COMPLEX {
            2 * mn + mx
        } else {
            (3 * mn + mx).max(5 * mn)
        };
        answer(work, T::size(lw));
        if query || mn == 0 {
            return Ok(0);
        }
        need(a, m * n, 5)?;
        need(s, mn, 7)?;
        if matches!(ju, Job::All | Job::Some) {
            need(u, 1, 8)?;
        }
        if matches!(jv, Job::All | Job::Some) {
            need(vt, 1, 10)?;
        }
        let d = Dest {
            a,
            lda,
            s,
            u,
            ldu: ldu as usize,
            vt,
            ldvt: ldvt as usize,
        };
        run("gesvd", m, n, ju, jv, d, mn as i32)
    }
}

/// `?gesvd` (real).
///
/// # Safety
/// The reference LAPACK `?gesvd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gesvd<T: Scalar>(
    jobu: *const c_char,
    jobvt: *const c_char,
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    s: *mut T::R,
    u: *mut T,
    ldu: *const Int,
    vt: *mut T,
    ldvt: *const Int,
    work: *mut T,
    lwork: *const Int,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            gesvd_body(jobu, jobvt, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork)
        })
    }
}

/// `?gesvd` (complex; `rwork` is not needed).
///
/// # Safety
/// The reference LAPACK `?gesvd` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gesvd_complex<T: Scalar>(
    jobu: *const c_char,
    jobvt: *const c_char,
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    s: *mut T::R,
    u: *mut T,
    ldu: *const Int,
    vt: *mut T,
    ldvt: *const Int,
    work: *mut T,
    lwork: *const Int,
    _rwork: *mut T::R,
    info: *mut Int,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        lapack(info, || {
            gesvd_body(jobu, jobvt, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork)
        })
    }
}
