//! Level-3 BLAS: `gemm`, `symm`, `hemm`, `syrk`, `herk`, `trsm`, `trmm` on faer's matrix
//! products and triangular solves, with the reference BLAS's argument checks, quick returns
//! and its rules for `alpha = 0` / `beta = 0` (a zero `beta` never reads C, a zero `alpha` never
//! reads A or B).

use super::abi::{
    apply_op, before_write, blas, check, lower, need, op, par, read, read_char, read_ld, sz, view,
    Buf, Fail, Int, Op, Outcome, Scalar,
};
use faer::linalg::matmul::matmul_with_conj;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_solve as tsolve;
use faer::{Accum, Conj, MatMut, MatRef};
use std::ffi::c_char;

/// The output of a BLAS-3 update `C = beta C + ...` before the product is added: `beta C`
/// (not reading C when `beta` is zero).
///
/// # Safety
/// `c` is valid for the `rows x cols` extent with leading dimension `ldc`.
unsafe fn scaled_output<T: Scalar>(
    c: *const T,
    rows: usize,
    cols: usize,
    ldc: usize,
    beta: T,
) -> Outcome<Buf<T>> {
    if beta == T::zero() {
        return Buf::zeros(rows, cols);
    }
    // SAFETY: forwarded.
    let mut out = unsafe { Buf::load(c, rows, cols, ldc) }?;
    if beta != T::one() {
        out.scale(beta);
    }
    Ok(out)
}

/// `C := alpha op(A) op(B) + beta C`.
///
/// # Safety
/// The reference BLAS `?gemm` interface: every pointer valid for its argument's extent.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn gemm<T: Scalar>(
    transa: *const c_char,
    transb: *const c_char,
    m: *const Int,
    n: *const Int,
    k: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    b: *const T,
    ldb: *const Int,
    beta: *const T,
    c: *mut T,
    ldc: *const Int,
) {
    blas::<T>("gemm", || {
        // SAFETY: every pointer is the caller's argument, read or written only inside the extent
        // its (checked) dimensions describe, as the BLAS interface requires.
        unsafe {
            let ta = op(read_char(transa, 1)?, true, 1)?;
            let tb = op(read_char(transb, 2)?, true, 2)?;
            let (m, n, k) = (read(m, 3)?, read(n, 4)?, read(k, 5)?);
            check(m >= 0, 3)?;
            check(n >= 0, 4)?;
            check(k >= 0, 5)?;
            let (m, n, k) = (sz(m), sz(n), sz(k));
            let (ra, ca) = if ta == Op::N { (m, k) } else { (k, m) };
            let (rb, cb) = if tb == Op::N { (k, n) } else { (n, k) };
            let lda = read_ld(lda, ra, 8)?;
            let ldb = read_ld(ldb, rb, 10)?;
            let ldc = read_ld(ldc, m, 13)?;
            let (alpha, beta) = (read(alpha, 6)?, read(beta, 11)?);
            if m == 0 || n == 0 || ((alpha == T::zero() || k == 0) && beta == T::one()) {
                return Ok(());
            }
            need(c, m * n, 12)?;
            let mut out = scaled_output(c, m, n, ldc, beta)?;
            if alpha != T::zero() && k > 0 {
                need(a, ra * ca, 7)?;
                need(b, rb * cb, 9)?;
                let (opa, conja) = apply_op(view(a, ra, ca, lda), ta);
                let (opb, conjb) = apply_op(view(b, rb, cb, ldb), tb);
                matmul_with_conj(
                    out.mat_mut(),
                    Accum::Add,
                    opa,
                    conja,
                    opb,
                    conjb,
                    alpha,
                    par(2.0 * (m * n) as f64 * k as f64),
                );
            }
            before_write("gemm");
            out.store(c, ldc);
            Ok(())
        }
    })
}

/// `symm` (`herm = false`) and `hemm`: `C := alpha A B + beta C` or `alpha B A + beta C`.
///
/// # Safety
/// The reference BLAS `?symm`/`?hemm` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn symm_hemm<T: Scalar>(
    herm: bool,
    side: *const c_char,
    uplo: *const c_char,
    m: *const Int,
    n: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    b: *const T,
    ldb: *const Int,
    beta: *const T,
    c: *mut T,
    ldc: *const Int,
) -> Outcome<()> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the BLAS interface requires.
    unsafe {
        let left = match read_char(side, 1)? {
            b'L' => true,
            b'R' => false,
            _ => return Err(Fail::Arg(1)),
        };
        let low = lower(read_char(uplo, 2)?, 2)?;
        let (m, n) = (read(m, 3)?, read(n, 4)?);
        check(m >= 0, 3)?;
        check(n >= 0, 4)?;
        let (m, n) = (sz(m), sz(n));
        let na = if left { m } else { n };
        let lda = read_ld(lda, na, 7)?;
        let ldb = read_ld(ldb, m, 9)?;
        let ldc = read_ld(ldc, m, 12)?;
        let (alpha, beta) = (read(alpha, 5)?, read(beta, 10)?);
        if m == 0 || n == 0 || (alpha == T::zero() && beta == T::one()) {
            return Ok(());
        }
        need(c, m * n, 11)?;
        let mut out = scaled_output(c, m, n, ldc, beta)?;
        if alpha != T::zero() {
            need(a, na * na, 6)?;
            need(b, m * n, 8)?;
            let full = Buf::load_full(a, na, lda, low, herm)?;
            let bv = view(b, m, n, ldb);
            let p = par(2.0 * (m * n) as f64 * na as f64);
            if left {
                matmul_with_conj(
                    out.mat_mut(),
                    Accum::Add,
                    full.mat(),
                    Conj::No,
                    bv,
                    Conj::No,
                    alpha,
                    p,
                );
            } else {
                matmul_with_conj(
                    out.mat_mut(),
                    Accum::Add,
                    bv,
                    Conj::No,
                    full.mat(),
                    Conj::No,
                    alpha,
                    p,
                );
            }
        }
        before_write(if herm { "hemm" } else { "symm" });
        out.store(c, ldc);
        Ok(())
    }
}

/// `?symm`: A symmetric (only its `uplo` triangle is read).
///
/// # Safety
/// The reference BLAS `?symm` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn symm<T: Scalar>(
    side: *const c_char,
    uplo: *const c_char,
    m: *const Int,
    n: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    b: *const T,
    ldb: *const Int,
    beta: *const T,
    c: *mut T,
    ldc: *const Int,
) {
    blas::<T>("symm", || {
        // SAFETY: forwarded from the caller.
        unsafe { symm_hemm(false, side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc) }
    })
}

/// `?hemm` (complex only): A Hermitian, the imaginary parts of its diagonal are not read.
///
/// # Safety
/// The reference BLAS `?hemm` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn hemm<T: Scalar>(
    side: *const c_char,
    uplo: *const c_char,
    m: *const Int,
    n: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    b: *const T,
    ldb: *const Int,
    beta: *const T,
    c: *mut T,
    ldc: *const Int,
) {
    blas::<T>("hemm", || {
        // SAFETY: forwarded from the caller.
        unsafe { symm_hemm(true, side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc) }
    })
}

/// `syrk` (`herm = false`: `C := alpha op(A) op(A)^T + beta C`) and `herk` (`A A^H`, real
/// `alpha`/`beta` of type `V` converted by `to_t`, the diagonal's imaginary part set to zero);
/// only the `uplo` triangle of C is read and written.
///
/// # Safety
/// The reference BLAS `?syrk`/`?herk` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn rank_k<T: Scalar, V: Copy>(
    herm: bool,
    uplo: *const c_char,
    trans: *const c_char,
    n: *const Int,
    k: *const Int,
    alpha: *const V,
    a: *const T,
    lda: *const Int,
    beta: *const V,
    c: *mut T,
    ldc: *const Int,
    to_t: fn(V) -> T,
) -> Outcome<()> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the BLAS interface requires.
    unsafe {
        let low = lower(read_char(uplo, 1)?, 1)?;
        let t = match (read_char(trans, 2)?, herm, T::COMPLEX) {
            (b'N', _, _) => Op::N,
            (b'T', false, _) => Op::T,
            (b'C', true, _) | (b'C', false, false) => Op::C,
            _ => return Err(Fail::Arg(2)),
        };
        let (n, k) = (read(n, 3)?, read(k, 4)?);
        check(n >= 0, 3)?;
        check(k >= 0, 4)?;
        let (n, k) = (sz(n), sz(k));
        let (ra, ca) = if t == Op::N { (n, k) } else { (k, n) };
        let lda = read_ld(lda, ra, 7)?;
        let ldc = read_ld(ldc, n, 10)?;
        let (alpha, beta) = (to_t(read(alpha, 5)?), to_t(read(beta, 8)?));
        if n == 0 || ((alpha == T::zero() || k == 0) && beta == T::one()) {
            return Ok(());
        }
        need(c, n * n, 9)?;
        let mut out = scaled_output(c, n, n, ldc, beta)?;
        if herm {
            for j in 0..n {
                out.set(j, j, T::from_re(out.at(j, j).re()));
            }
        }
        if alpha != T::zero() && k > 0 {
            need(a, ra * ca, 6)?;
            let av = view(a, ra, ca, lda);
            // herk: A A^H (N) or A^H A (C); syrk: A A^T (N) or A^T A (T, and C for reals)
            let cj = if herm { Conj::Yes } else { Conj::No };
            let (lhs, cl, rhs, cr): (MatRef<'_, T>, _, MatRef<'_, T>, _) = if t == Op::N {
                (av, Conj::No, av.transpose(), cj)
            } else {
                (av.transpose(), cj, av, Conj::No)
            };
            triangular::matmul_with_conj(
                out.mat_mut(),
                if low {
                    BlockStructure::TriangularLower
                } else {
                    BlockStructure::TriangularUpper
                },
                Accum::Add,
                lhs,
                BlockStructure::Rectangular,
                cl,
                rhs,
                BlockStructure::Rectangular,
                cr,
                alpha,
                par((n * n) as f64 * k as f64),
            );
            if herm {
                for j in 0..n {
                    out.set(j, j, T::from_re(out.at(j, j).re()));
                }
            }
        }
        before_write(if herm { "herk" } else { "syrk" });
        out.store_triangle(c, ldc, low);
        Ok(())
    }
}

/// `?syrk`.
///
/// # Safety
/// The reference BLAS `?syrk` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn syrk<T: Scalar>(
    uplo: *const c_char,
    trans: *const c_char,
    n: *const Int,
    k: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    beta: *const T,
    c: *mut T,
    ldc: *const Int,
) {
    blas::<T>("syrk", || {
        // SAFETY: forwarded from the caller.
        unsafe { rank_k(false, uplo, trans, n, k, alpha, a, lda, beta, c, ldc, |v| v) }
    })
}

/// `?herk` (complex only; `alpha`, `beta` real).
///
/// # Safety
/// The reference BLAS `?herk` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn herk<T: Scalar>(
    uplo: *const c_char,
    trans: *const c_char,
    n: *const Int,
    k: *const Int,
    alpha: *const T::R,
    a: *const T,
    lda: *const Int,
    beta: *const T::R,
    c: *mut T,
    ldc: *const Int,
) {
    blas::<T>("herk", || {
        // SAFETY: forwarded from the caller.
        unsafe {
            rank_k(
                true,
                uplo,
                trans,
                n,
                k,
                alpha,
                a,
                lda,
                beta,
                c,
                ldc,
                T::from_re,
            )
        }
    })
}

/// The triangle of `op(A)` for a stored triangle (`lower`) and `op`.
fn op_lower(lower: bool, op: Op) -> bool {
    lower ^ (op != Op::N)
}

/// Solves `t X = B` in place, `t` triangular (`lower`), optionally unit and conjugated.
pub(crate) fn solve_in_place<T: Scalar>(
    t: MatRef<'_, T>,
    lower: bool,
    unit: bool,
    conj: Conj,
    x: MatMut<'_, T>,
) {
    let p = par((t.nrows() * t.nrows()) as f64 * x.ncols() as f64);
    match (lower, unit) {
        (true, false) => tsolve::solve_lower_triangular_in_place_with_conj(t, conj, x, p),
        (true, true) => tsolve::solve_unit_lower_triangular_in_place_with_conj(t, conj, x, p),
        (false, false) => tsolve::solve_upper_triangular_in_place_with_conj(t, conj, x, p),
        (false, true) => tsolve::solve_unit_upper_triangular_in_place_with_conj(t, conj, x, p),
    }
}

/// Solves `op(A) X = B` (`left`) or `X op(A) = B` in place on a private copy of B.
pub(crate) fn solve_op<T: Scalar>(
    a: MatRef<'_, T>,
    low: bool,
    o: Op,
    unit: bool,
    left: bool,
    x: &mut Buf<T>,
) {
    let (t, conj) = apply_op(a, o);
    let tl = op_lower(low, o);
    if left {
        solve_in_place(t, tl, unit, conj, x.mat_mut());
    } else {
        // X op(A) = B  <=>  op(A)^T X^T = B^T
        solve_in_place(t.transpose(), !tl, unit, conj, x.mat_mut().transpose_mut());
    }
}

/// `trsm` (`mult = false`) and `trmm`.
///
/// # Safety
/// The reference BLAS `?trsm`/`?trmm` interface.
#[allow(clippy::too_many_arguments)]
unsafe fn triangular_op<T: Scalar>(
    mult: bool,
    side: *const c_char,
    uplo: *const c_char,
    transa: *const c_char,
    diag: *const c_char,
    m: *const Int,
    n: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
) -> Outcome<()> {
    // SAFETY: every pointer is the caller's argument, read or written only inside the extent its
    // (checked) dimensions describe, as the BLAS interface requires.
    unsafe {
        let left = match read_char(side, 1)? {
            b'L' => true,
            b'R' => false,
            _ => return Err(Fail::Arg(1)),
        };
        let low = lower(read_char(uplo, 2)?, 2)?;
        let o = op(read_char(transa, 3)?, true, 3)?;
        let unit = match read_char(diag, 4)? {
            b'U' => true,
            b'N' => false,
            _ => return Err(Fail::Arg(4)),
        };
        let (m, n) = (read(m, 5)?, read(n, 6)?);
        check(m >= 0, 5)?;
        check(n >= 0, 6)?;
        let (m, n) = (sz(m), sz(n));
        let na = if left { m } else { n };
        let lda = read_ld(lda, na, 9)?;
        let ldb = read_ld(ldb, m, 11)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let alpha = read(alpha, 7)?;
        need(b, m * n, 10)?;
        let name = if mult { "trmm" } else { "trsm" };
        if alpha == T::zero() {
            let out = Buf::<T>::zeros(m, n)?;
            before_write(name);
            out.store(b, ldb);
            return Ok(());
        }
        need(a, na * na, 8)?;
        let av = view(a, na, na, lda);
        let out = if mult {
            let (t, conj) = apply_op(av, o);
            let tl = op_lower(low, o);
            let structure = match (tl, unit) {
                (true, false) => BlockStructure::TriangularLower,
                (true, true) => BlockStructure::UnitTriangularLower,
                (false, false) => BlockStructure::TriangularUpper,
                (false, true) => BlockStructure::UnitTriangularUpper,
            };
            let bv = view(b as *const T, m, n, ldb);
            let mut out = Buf::<T>::zeros(m, n)?;
            let p = par((m * n) as f64 * na as f64);
            if left {
                triangular::matmul_with_conj(
                    out.mat_mut(),
                    BlockStructure::Rectangular,
                    Accum::Replace,
                    t,
                    structure,
                    conj,
                    bv,
                    BlockStructure::Rectangular,
                    Conj::No,
                    alpha,
                    p,
                );
            } else {
                triangular::matmul_with_conj(
                    out.mat_mut(),
                    BlockStructure::Rectangular,
                    Accum::Replace,
                    bv,
                    BlockStructure::Rectangular,
                    Conj::No,
                    t,
                    structure,
                    conj,
                    alpha,
                    p,
                );
            }
            out
        } else {
            let mut x = Buf::load(b as *const T, m, n, ldb)?;
            if alpha != T::one() {
                x.scale(alpha);
            }
            solve_op(av, low, o, unit, left, &mut x);
            x
        };
        before_write(name);
        out.store(b, ldb);
        Ok(())
    }
}

/// `?trsm`: solves `op(A) X = alpha B` or `X op(A) = alpha B`, X overwriting B.
///
/// # Safety
/// The reference BLAS `?trsm` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn trsm<T: Scalar>(
    side: *const c_char,
    uplo: *const c_char,
    transa: *const c_char,
    diag: *const c_char,
    m: *const Int,
    n: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
) {
    blas::<T>("trsm", || {
        // SAFETY: forwarded from the caller.
        unsafe { triangular_op(false, side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb) }
    })
}

/// `?trmm`: `B := alpha op(A) B` or `alpha B op(A)`.
///
/// # Safety
/// The reference BLAS `?trmm` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn trmm<T: Scalar>(
    side: *const c_char,
    uplo: *const c_char,
    transa: *const c_char,
    diag: *const c_char,
    m: *const Int,
    n: *const Int,
    alpha: *const T,
    a: *const T,
    lda: *const Int,
    b: *mut T,
    ldb: *const Int,
) {
    blas::<T>("trmm", || {
        // SAFETY: forwarded from the caller.
        unsafe { triangular_op(true, side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb) }
    })
}
