//! LU with partial pivoting: `getrf`, `getrs`, `gesv`, `getri`.
//!
//! The factorization is LAPACK's recursive `dgetrf2` written on faer's matrix product and
//! triangular solve (faer's own LU divides by a zero pivot, where LAPACK skips the column and
//! reports it, and keeps its pivots as a permutation rather than LAPACK's sequence of swaps):
//! the pivot is the first element of largest `|re| + |im|` (`i?amax`), an exactly zero pivot
//! leaves its column unscaled, sets `info` and the factorization goes on.

use super::abi::{
    answer, before_write, check, lapack, need, op, par, read, read_char, read_ld, sz, Buf, Int, Op,
    Outcome, RealScalar, Scalar,
};
use super::blas3::solve_op;
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_inverse::invert_upper_triangular;
use faer::linalg::triangular_solve::solve_unit_lower_triangular_in_place;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, MatMut, Par};
use std::ffi::c_char;

/// Panels at most this wide are factored column by column.
const LEAF: usize = 16;

/// Factors `a = P L U` in place; `piv[j]` is the (0-based) row swapped with row `j`. Returns
/// the first exactly-zero pivot (0-based), as LAPACK's `info - 1`.
pub(crate) fn lu_in_place<T: Scalar>(a: MatMut<'_, T>, piv: &mut [usize]) -> Option<usize> {
    let (m, n) = (a.nrows(), a.ncols());
    let k = m.min(n);
    let p = par(2.0 * (m as f64) * (n as f64) * (k as f64));
    factor(a, &mut piv[..k], p)
}

fn factor<T: Scalar>(mut a: MatMut<'_, T>, piv: &mut [usize], p: Par) -> Option<usize> {
    let (m, n) = (a.nrows(), a.ncols());
    let k = m.min(n);
    if k == 0 {
        return None;
    }
    if k <= LEAF || n <= LEAF {
        return leaf(a, piv);
    }
    let n1 = k / 2;
    let (mut left, mut right) = a.rb_mut().split_at_col_mut(n1);
    let mut info = factor(left.rb_mut(), &mut piv[..n1], p);
    swap_rows(right.rb_mut(), &piv[..n1]);
    {
        let (a11, a21) = left.rb().split_at_row(n1);
        let (mut a12, a22) = right.rb_mut().split_at_row_mut(n1);
        solve_unit_lower_triangular_in_place(a11, a12.rb_mut(), p);
        matmul(a22, Accum::Add, a21, a12.rb(), -T::one(), p);
    }
    let info2 = factor(right.rb_mut().split_at_row_mut(n1).1, &mut piv[n1..k], p);
    for q in &mut piv[n1..k] {
        *q += n1;
    }
    if info.is_none() {
        info = info2.map(|i| i + n1);
    }
    swap_rows_from(left.rb_mut(), &piv[n1..k], n1);
    info
}

/// Column-by-column LU of a narrow panel (LAPACK's `dgetf2`).
fn leaf<T: Scalar>(mut a: MatMut<'_, T>, piv: &mut [usize]) -> Option<usize> {
    let (m, n) = (a.nrows(), a.ncols());
    let mut info = None;
    for j in 0..m.min(n) {
        let mut p = j;
        let mut best = a[(j, j)].abs1();
        for i in j + 1..m {
            let v = a[(i, j)].abs1();
            if v > best {
                best = v;
                p = i;
            }
        }
        piv[j] = p;
        if a[(p, j)] != T::zero() {
            if p != j {
                for c in 0..n {
                    let t = a[(j, c)];
                    a[(j, c)] = a[(p, c)];
                    a[(p, c)] = t;
                }
            }
            let d = a[(j, j)];
            if d.modulus() >= T::R::SAFE_MIN {
                let r = T::one() / d;
                for i in j + 1..m {
                    a[(i, j)] *= r;
                }
            } else {
                for i in j + 1..m {
                    a[(i, j)] /= d;
                }
            }
        } else if info.is_none() {
            info = Some(j);
        }
        for c in j + 1..n {
            let t = a[(j, c)];
            for i in j + 1..m {
                a[(i, c)] = a[(i, c)] - a[(i, j)] * t;
            }
        }
    }
    info
}

/// Applies the swaps `piv` (row `i` with row `piv[i]`, in order) to every column.
fn swap_rows<T: Scalar>(a: MatMut<'_, T>, piv: &[usize]) {
    swap_rows_from(a, piv, 0)
}

/// As [`swap_rows`] for swaps that start at row `first` (`piv[i]` pairs row `first + i`).
fn swap_rows_from<T: Scalar>(mut a: MatMut<'_, T>, piv: &[usize], first: usize) {
    for c in 0..a.ncols() {
        for (i, &q) in piv.iter().enumerate() {
            let r = first + i;
            if q != r {
                let t = a[(r, c)];
                a[(r, c)] = a[(q, c)];
                a[(q, c)] = t;
            }
        }
    }
}

/// The caller's 1-based pivots of an order-`n` factor with `k` pivots as 0-based rows; an entry
/// outside `1..=n` is a bad argument at `pos` (LAPACK reads out of bounds there).
///
/// # Safety
/// `ipiv` is valid for `k` reads (non-null when `k > 0`).
unsafe fn pivots(ipiv: *const Int, k: usize, n: usize, pos: i32) -> Outcome<Vec<usize>> {
    need(ipiv, k, pos)?;
    let mut out = super::abi::vec_of(k, 0usize)?;
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: `i < k` readable by the caller's contract.
        let q = unsafe { *ipiv.add(i) };
        check(q >= 1 && q as usize <= n, pos)?;
        *o = q as usize - 1;
    }
    Ok(out)
}

/// Writes 0-based pivots as LAPACK's 1-based ones.
///
/// # Safety
/// `ipiv` is valid for `piv.len()` writes.
unsafe fn store_pivots(ipiv: *mut Int, piv: &[usize]) {
    for (i, &q) in piv.iter().enumerate() {
        // SAFETY: in bounds by the caller's contract; `q < n <= i32::MAX`.
        unsafe { *ipiv.add(i) = (q + 1) as Int };
    }
}

/// Solves `op(A) X = B` in place with the factors `a` (`getrf`'s output) and pivots `piv`.
fn solve_factored<T: Scalar>(a: faer::MatRef<'_, T>, piv: &[usize], o: Op, x: &mut Buf<T>) {
    if o == Op::N {
        swap_rows(x.mat_mut(), piv);
        solve_op(a, true, Op::N, true, true, x);
        solve_op(a, false, Op::N, false, true, x);
    } else {
        solve_op(a, false, o, false, true, x);
        solve_op(a, true, o, true, true, x);
        let mut xm = x.mat_mut();
        for c in 0..xm.ncols() {
            for (i, &q) in piv.iter().enumerate().rev() {
                if q != i {
                    let t = xm[(i, c)];
                    xm[(i, c)] = xm[(q, c)];
                    xm[(q, c)] = t;
                }
            }
        }
    }
}

/// `?getrf`: `A = P L U` of an `m x n` matrix; `info = i > 0`: `U(i,i)` is exactly zero.
///
/// # Safety
/// The reference LAPACK `?getrf` interface.
pub(crate) unsafe extern "C" fn getrf<T: Scalar>(
    m: *const Int,
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    ipiv: *mut Int,
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
            if m == 0 || n == 0 {
                return Ok(0);
            }
            need(a, m * n, 3)?;
            need(ipiv, m.min(n), 5)?;
            let mut lu = Buf::load(a, m, n, lda)?;
            let mut piv = super::abi::vec_of(m.min(n), 0usize)?;
            let zero = lu_in_place(lu.mat_mut(), &mut piv);
            before_write("getrf");
            lu.store(a, lda);
            store_pivots(ipiv, &piv);
            Ok(zero.map_or(0, |i| i as i32 + 1))
        })
    }
}

/// `?getrs`: solves `op(A) X = B` with `getrf`'s factors.
///
/// # Safety
/// The reference LAPACK `?getrs` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn getrs<T: Scalar>(
    trans: *const c_char,
    n: *const Int,
    nrhs: *const Int,
    a: *const T,
    lda: *const Int,
    ipiv: *const Int,
    b: *mut T,
    ldb: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let o = op(read_char(trans, 1)?, true, 1)?;
            let (n, nrhs) = (read(n, 2)?, read(nrhs, 3)?);
            check(n >= 0, 2)?;
            check(nrhs >= 0, 3)?;
            let (n, nrhs) = (sz(n), sz(nrhs));
            let lda = read_ld(lda, n, 5)?;
            let ldb = read_ld(ldb, n, 8)?;
            if n == 0 || nrhs == 0 {
                return Ok(0);
            }
            need(a, n * n, 4)?;
            let piv = pivots(ipiv, n, n, 6)?;
            need(b, n * nrhs, 7)?;
            let mut x = Buf::load(b, n, nrhs, ldb)?;
            solve_factored(super::abi::view(a, n, n, lda), &piv, o, &mut x);
            before_write("getrs");
            x.store(b, ldb);
            Ok(0)
        })
    }
}

/// `?gesv`: solves `A X = B` through `A = P L U`; A and `ipiv` receive the factors (also when
/// `info > 0`, exactly singular: then B is untouched).
///
/// # Safety
/// The reference LAPACK `?gesv` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gesv<T: Scalar>(
    n: *const Int,
    nrhs: *const Int,
    a: *mut T,
    lda: *const Int,
    ipiv: *mut Int,
    b: *mut T,
    ldb: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let (n, nrhs) = (read(n, 1)?, read(nrhs, 2)?);
            check(n >= 0, 1)?;
            check(nrhs >= 0, 2)?;
            let (n, nrhs) = (sz(n), sz(nrhs));
            let lda = read_ld(lda, n, 4)?;
            let ldb = read_ld(ldb, n, 7)?;
            if n == 0 {
                return Ok(0);
            }
            need(a, n * n, 3)?;
            need(ipiv, n, 5)?;
            need(b, n * nrhs, 6)?;
            let mut lu = Buf::load(a, n, n, lda)?;
            let mut piv = super::abi::vec_of(n, 0usize)?;
            let zero = lu_in_place(lu.mat_mut(), &mut piv);
            let x = match zero {
                None if nrhs > 0 => {
                    let mut x = Buf::load(b, n, nrhs, ldb)?;
                    solve_factored(lu.mat(), &piv, Op::N, &mut x);
                    Some(x)
                }
                _ => None,
            };
            before_write("gesv");
            lu.store(a, lda);
            store_pivots(ipiv, &piv);
            if let Some(x) = x {
                x.store(b, ldb);
            }
            Ok(zero.map_or(0, |i| i as i32 + 1))
        })
    }
}

/// `?getri`: `A := inv(A)` from `getrf`'s factors (`info = i > 0`: `U(i,i)` is zero, A is left
/// as it was). `lwork >= max(1, n)`; the query answers `max(1, n)`.
///
/// # Safety
/// The reference LAPACK `?getri` interface.
pub(crate) unsafe extern "C" fn getri<T: Scalar>(
    n: *const Int,
    a: *mut T,
    lda: *const Int,
    ipiv: *const Int,
    work: *mut T,
    lwork: *const Int,
    info: *mut Int,
) {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent
    // its (checked) dimensions describe, as the LAPACK interface requires.
    unsafe {
        lapack(info, || {
            let n = read(n, 1)?;
            check(n >= 0, 1)?;
            let n = sz(n);
            let lda = read_ld(lda, n, 3)?;
            let lwork = read(lwork, 6)?;
            let lwmin = n.max(1);
            let query = lwork == -1;
            check(query || lwork >= lwmin as i32, 6)?;
            need(work, 1, 5)?;
            answer(work, T::size(lwmin));
            if query || n == 0 {
                return Ok(0);
            }
            need(a, n * n, 2)?;
            let piv = pivots(ipiv, n, n, 4)?;
            for i in 0..n {
                if *a.add(i + i * lda) == T::zero() {
                    return Ok(i as i32 + 1);
                }
            }
            let lu = Buf::load(a, n, n, lda)?;
            let mut x = Buf::<T>::zeros(n, n)?;
            invert_upper_triangular(x.mat_mut(), lu.mat(), par((n * n * n) as f64 / 3.0));
            // inv(A) L = inv(U), then undo the row swaps as column swaps in reverse order
            solve_op(lu.mat(), true, Op::N, true, false, &mut x);
            let mut xm = x.mat_mut();
            for (j, &q) in piv.iter().enumerate().rev() {
                if q != j {
                    for r in 0..n {
                        let t = xm[(r, j)];
                        xm[(r, j)] = xm[(r, q)];
                        xm[(r, q)] = t;
                    }
                }
            }
            before_write("getri");
            x.store(a, lda);
            Ok(0)
        })
    }
}
