//! `trtrs`: a triangular solve with LAPACK's singularity check (an exactly zero diagonal
//! element of a non-unit A is reported as `info` and nothing is written).

use super::abi::{
    before_write, check, lapack, lower, need, op, read, read_char, read_ld, sz, view, Buf, Fail,
    Int, Scalar,
};
use super::blas3::solve_op;
use std::ffi::c_char;

/// `?trtrs`: solves `op(A) X = B`, A triangular.
///
/// # Safety
/// The reference LAPACK `?trtrs` interface.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn trtrs<T: Scalar>(
    uplo: *const c_char,
    trans: *const c_char,
    diag: *const c_char,
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
            let o = op(read_char(trans, 2)?, true, 2)?;
            let unit = match read_char(diag, 3)? {
                b'U' => true,
                b'N' => false,
                _ => return Err(Fail::Arg(3)),
            };
            let (n, nrhs) = (read(n, 4)?, read(nrhs, 5)?);
            check(n >= 0, 4)?;
            check(nrhs >= 0, 5)?;
            let (n, nrhs) = (sz(n), sz(nrhs));
            let lda = read_ld(lda, n, 7)?;
            let ldb = read_ld(ldb, n, 9)?;
            if n == 0 {
                return Ok(0);
            }
            need(a, n * n, 6)?;
            if !unit {
                for i in 0..n {
                    if *a.add(i + i * lda) == T::zero() {
                        return Ok(i as i32 + 1);
                    }
                }
            }
            if nrhs == 0 {
                return Ok(0);
            }
            need(b, n * nrhs, 8)?;
            let mut x = Buf::load(b, n, nrhs, ldb)?;
            solve_op(view(a, n, n, lda), low, o, unit, true, &mut x);
            before_write("trtrs");
            x.store(b, ldb);
            Ok(0)
        })
    }
}
