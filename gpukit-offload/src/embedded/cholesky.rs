//! Cholesky: `potrf`, `potrs`, `posv`, `potri` on faer's blocked `LL^H`.
//!
//! Only the `uplo` triangle is read and written; the upper form `A = U^H U` is factored as the
//! lower form of `L = U^H` (same numbers, conjugate-transposed), and a Hermitian diagonal's
//! imaginary part is ignored, as LAPACK does.

use super::abi::{
    before_write, check, lapack, lower, need, par, read, read_char, read_ld, scratch, stack, sz,
    view, Buf, Int, Op, Outcome, Scalar,
};
use super::blas3::solve_op;
use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_inverse::invert_lower_triangular;
use faer::{Accum, Conj};
use std::ffi::c_char;

/// Factors the private lower triangle `l` (`A = L L^H`) in place. `Ok(Some(i))`: the leading
/// minor of order `i` (1-based) is not positive definite (a NaN pivot counts as not positive).
pub(crate) fn factor<T: Scalar>(l: &mut Buf<T>) -> Outcome<Option<i32>> {
    let n = l.rows();
    let p = par((n * n * n) as f64 / 3.0);
    let mut mem = scratch(cholesky_in_place_scratch::<T>(n, p, Default::default()))?;
    Ok(
        match cholesky_in_place(
            l.mat_mut(),
            Default::default(),
            p,
            stack(&mut mem),
            Default::default(),
        ) {
            Ok(_) => {
                // LAPACK's factor has a real diagonal; faer's updates leave rounding in the
                // imaginary parts
                for j in 0..n {
                    l.set(j, j, T::from_re(l.at(j, j).re()));
                }
                None
            }
            Err(faer::linalg::cholesky::llt::factor::LltError::NonPositivePivot { index }) => {
                Some(index as i32 + 1)
            }
        },
    )
}

/// Solves `A X = B` in place with the lower factor `l` of `A = L L^H`.
fn solve_lower_factor<T: Scalar>(l: faer::MatRef<'_, T>, x: &mut Buf<T>) {
    solve_op(l, true, Op::N, false, true, x);
    solve_op(l, true, Op::C, false, true, x);
}

/// `?potrf`: `A = U^H U` (`uplo = 'U'`) or `L L^H`.
///
/// # Safety
/// The reference LAPACK `?potrf` interface.
pub(crate) unsafe extern "C" fn potrf<T: Scalar>(
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let low = lower(read_char(uplo, 1)?, 1)?;
            let n = read(n, 2)?;
            check(n >= 0, 2)?;
            let n = sz(n);
            let lda = read_ld(lda, n, 4)?;
            if n == 0 {
                return Ok(0);
            }
            need(a, n * n, 3)?;
            let mut l = Buf::load_lower(a, n, lda, low)?;
            if let Some(i) = factor(&mut l)? {
                return Ok(i);
            }
            before_write("potrf");
            l.store_lower_as(a, lda, low);
            Ok(0)
        })
    }
}

/// `?potrs`: solves `A X = B` with `potrf`'s factor.
///
/// # Safety
/// The reference LAPACK `?potrs` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn potrs<T: Scalar>(
    uplo: *const c_char,
    n: *const Int,
    nrhs: *const Int,
    a: *const T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let low = lower(read_char(uplo, 1)?, 1)?;
            let (n, nrhs) = (read(n, 2)?, read(nrhs, 3)?);
            check(n >= 0, 2)?;
            check(nrhs >= 0, 3)?;
            let (n, nrhs) = (sz(n), sz(nrhs));
            let lda = read_ld(lda, n, 5)?;
            let ldb = read_ld(ldb, n, 7)?;
            if n == 0 || nrhs == 0 {
                return Ok(0);
            }
            need(a, n * n, 4)?;
            need(b, n * nrhs, 6)?;
            let mut x = Buf::load(b, n, nrhs, ldb)?;
            let av = view(a, n, n, lda);
            if low {
                solve_lower_factor(av, &mut x);
            } else {
                // A = U^H U: U^H Y = B, then U X = Y
                solve_op(av, false, Op::C, false, true, &mut x);
                solve_op(av, false, Op::N, false, true, &mut x);
            }
            before_write("potrs");
            x.store(b, ldb);
            Ok(0)
        })
    }
}

/// `?posv`: `A = U^H U` or `L L^H`, then `A X = B`. With `info > 0` (not positive definite)
/// nothing is written.
///
/// # Safety
/// The reference LAPACK `?posv` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn posv<T: Scalar>(
    uplo: *const c_char,
    n: *const Int,
    nrhs: *const Int,
    a: *mut T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let low = lower(read_char(uplo, 1)?, 1)?;
            let (n, nrhs) = (read(n, 2)?, read(nrhs, 3)?);
            check(n >= 0, 2)?;
            check(nrhs >= 0, 3)?;
            let (n, nrhs) = (sz(n), sz(nrhs));
            let lda = read_ld(lda, n, 5)?;
            let ldb = read_ld(ldb, n, 7)?;
            if n == 0 {
                return Ok(0);
            }
            need(a, n * n, 4)?;
            need(b, n * nrhs, 6)?;
            let mut l = Buf::load_lower(a, n, lda, low)?;
            if let Some(i) = factor(&mut l)? {
                return Ok(i);
            }
            let mut x = Buf::load(b, n, nrhs, ldb)?;
            solve_lower_factor(l.mat(), &mut x);
            before_write("posv");
            l.store_lower_as(a, lda, low);
            x.store(b, ldb);
            Ok(0)
        })
    }
}

/// `?potri`: `A := inv(A)` from `potrf`'s factor, in the same triangle (`info = i > 0`: the
/// factor's `(i,i)` is zero, A is left as it was).
///
/// # Safety
/// The reference LAPACK `?potri` interface.
pub(crate) unsafe extern "C" fn potri<T: Scalar>(
    uplo: *const c_char,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let low = lower(read_char(uplo, 1)?, 1)?;
            let n = read(n, 2)?;
            check(n >= 0, 2)?;
            let n = sz(n);
            let lda = read_ld(lda, n, 4)?;
            if n == 0 {
                return Ok(0);
            }
            need(a, n * n, 3)?;
            for i in 0..n {
                if *a.add(i + i * lda) == T::zero() {
                    return Ok(i as i32 + 1);
                }
            }
            // the factor as L (for 'U', L = U^H); inv(A) = inv(L)^H inv(L)
            let l = load_factor(a, n, lda, low)?;
            let p = par((n * n * n) as f64 / 3.0);
            let mut li = Buf::<T>::zeros(n, n)?;
            invert_lower_triangular(li.mat_mut(), l.mat(), p);
            let mut out = Buf::<T>::zeros(n, n)?;
            triangular::matmul_with_conj(
                out.mat_mut(),
                BlockStructure::TriangularLower,
                Accum::Replace,
                li.mat().transpose(),
                BlockStructure::TriangularUpper,
                Conj::Yes,
                li.mat(),
                BlockStructure::TriangularLower,
                Conj::No,
                T::one(),
                p,
            );
            for j in 0..n {
                out.set(j, j, T::from_re(out.at(j, j).re()));
            }
            before_write("potri");
            out.store_lower_as(a, lda, low);
            Ok(0)
        })
    }
}

/// A triangular factor as stored (`L`, or `U` read as `L = U^H`), keeping its complex diagonal.
///
/// # Safety
/// As [`Buf::load`] for an `n x n` matrix.
unsafe fn load_factor<T: Scalar>(a: *const T, n: usize, lda: usize, low: bool) -> Outcome<Buf<T>> {
    let mut l = Buf::<T>::zeros(n, n)?;
    for j in 0..n {
        for i in j..n {
            let (r, c) = if low { (i, j) } else { (j, i) };
            // SAFETY: inside the extent by the caller's contract.
            let v = unsafe { *a.add(r + c * lda) };
            l.set(i, j, if low { v } else { v.cj() });
        }
    }
    Ok(l)
}
