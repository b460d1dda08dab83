//! Failure paths: LAPACK's negative `info` for bad arguments (and the recorded BLAS argument
//! errors), outputs untouched on every error, non-finite inputs, injected panics, allocation
//! failure, hidden string-length arguments, the symbol table.

use super::*;
use crate::embedded::abi::INJECT_PANIC;
use crate::embedded::{routines, symbol, take_blas_error, BlasError, INTERNAL_FAILURE_INFO};

type GemmH = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const i32,
    *const f64,
    *const f64,
    *const i32,
    *const f64,
    *const i32,
    *const f64,
    *mut f64,
    *const i32,
    usize,
    usize,
);

/// dgemm with every argument explicit; returns C and the recorded error.
#[allow(clippy::too_many_arguments)]
fn dgemm(
    ta: u8,
    tb: u8,
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
) -> (Vec<f64>, Option<BlasError>) {
    let a = vec![1.0; 64];
    let b = vec![1.0; 64];
    let mut c = vec![5.0; 64];
    let f: GemmH = sym("dgemm_");
    // SAFETY: every array holds 64 elements, more than any extent used here; the hidden length
    // arguments are passed as gfortran passes them.
    unsafe {
        f(
            &ch(ta),
            &ch(tb),
            &m,
            &n,
            &k,
            &2.0,
            a.as_ptr(),
            &lda,
            b.as_ptr(),
            &ldb,
            &0.5,
            c.as_mut_ptr(),
            &ldc,
            1,
            1,
        )
    };
    (c, take_blas_error())
}

#[test]
fn blas_argument_errors_are_recorded_and_write_nothing() {
    let cases = [
        ((b'X', b'N', 2, 2, 2, 2, 2, 2), 1),
        ((b'N', b'Q', 2, 2, 2, 2, 2, 2), 2),
        ((b'N', b'N', -1, 2, 2, 2, 2, 2), 3),
        ((b'N', b'N', 2, -1, 2, 2, 2, 2), 4),
        ((b'N', b'N', 2, 2, -1, 2, 2, 2), 5),
        ((b'N', b'N', 3, 2, 2, 2, 2, 3), 8),
        ((b'T', b'N', 2, 2, 3, 2, 3, 2), 8),
        ((b'N', b'N', 2, 2, 3, 2, 2, 2), 10),
        ((b'N', b'C', 2, 3, 2, 2, 2, 2), 10),
        ((b'N', b'N', 3, 2, 2, 3, 2, 2), 13),
    ];
    for ((ta, tb, m, n, k, lda, ldb, ldc), pos) in cases {
        let (c, err) = dgemm(ta, tb, m, n, k, lda, ldb, ldc);
        assert_eq!(
            err,
            Some(BlasError {
                routine: "dgemm".into(),
                argument: pos
            }),
            "case {:?}",
            (ta as char, tb as char, m, n, k, lda, ldb, ldc)
        );
        assert!(c.iter().all(|&x| x == 5.0), "C untouched");
    }
    // lower case is accepted (LSAME), and the hidden lengths are ignored
    let (c, err) = dgemm(b'n', b't', 2, 2, 2, 2, 2, 2);
    assert_eq!(err, None);
    assert_eq!(&c[..4], &[6.5; 4]);
    // a null scalar is a bad argument too
    let f: GemmH = sym("dgemm_");
    let (a, mut c) = (vec![1.0; 4], vec![5.0; 4]);
    // SAFETY: alpha is null (rejected before any read); the arrays hold 4 elements.
    unsafe {
        f(
            &ch(b'N'),
            &ch(b'N'),
            &2,
            &2,
            &2,
            std::ptr::null(),
            a.as_ptr(),
            &2,
            a.as_ptr(),
            &2,
            &0.5,
            c.as_mut_ptr(),
            &2,
            1,
            1,
        )
    };
    assert_eq!(take_blas_error().map(|e| e.argument), Some(6));
    assert_eq!(c, vec![5.0; 4]);
    // complex syrk has no 'C', herk no 'T'
    type Syrk = unsafe extern "C" fn(
        *const c_char,
        *const c_char,
        *const i32,
        *const i32,
        *const c64,
        *const c64,
        *const i32,
        *const c64,
        *mut c64,
        *const i32,
    );
    type Herk = unsafe extern "C" fn(
        *const c_char,
        *const c_char,
        *const i32,
        *const i32,
        *const f64,
        *const c64,
        *const i32,
        *const f64,
        *mut c64,
        *const i32,
    );
    let one = c64::new(1.0, 0.0);
    let (za, mut zc) = (vec![one; 4], vec![one; 4]);
    let s: Syrk = sym("zsyrk_");
    let h: Herk = sym("zherk_");
    // SAFETY: arrays hold 4 elements; the calls are rejected before any array access.
    unsafe {
        s(
            &ch(b'L'),
            &ch(b'C'),
            &2,
            &2,
            &one,
            za.as_ptr(),
            &2,
            &one,
            zc.as_mut_ptr(),
            &2,
        );
        assert_eq!(
            take_blas_error().map(|e| (e.routine, e.argument)),
            Some(("zsyrk".into(), 2))
        );
        h(
            &ch(b'L'),
            &ch(b'T'),
            &2,
            &2,
            &1.0,
            za.as_ptr(),
            &2,
            &1.0,
            zc.as_mut_ptr(),
            &2,
        );
        assert_eq!(
            take_blas_error().map(|e| (e.routine, e.argument)),
            Some(("zherk".into(), 2))
        );
    }
    // trsm: side, uplo, transa, diag, m, n, lda, ldb
    type Trsm = unsafe extern "C" fn(
        *const c_char,
        *const c_char,
        *const c_char,
        *const c_char,
        *const i32,
        *const i32,
        *const f64,
        *const f64,
        *const i32,
        *mut f64,
        *const i32,
    );
    let t: Trsm = sym("dtrsm_");
    let (ta, mut tb) = (vec![1.0; 16], vec![3.0; 16]);
    for (args, pos) in [
        ((b'X', b'L', b'N', b'N', 2, 2, 2, 2), 1),
        ((b'L', b'X', b'N', b'N', 2, 2, 2, 2), 2),
        ((b'L', b'L', b'X', b'N', 2, 2, 2, 2), 3),
        ((b'L', b'L', b'N', b'X', 2, 2, 2, 2), 4),
        ((b'L', b'L', b'N', b'N', -1, 2, 2, 2), 5),
        ((b'L', b'L', b'N', b'N', 2, -1, 2, 2), 6),
        ((b'R', b'L', b'N', b'N', 2, 3, 2, 2), 9),
        ((b'L', b'L', b'N', b'N', 3, 2, 3, 2), 11),
    ] {
        let (s, u, tr, d, m, n, lda, ldb) = args;
        // SAFETY: arrays hold 16 elements, more than any extent used.
        unsafe {
            t(
                &ch(s),
                &ch(u),
                &ch(tr),
                &ch(d),
                &m,
                &n,
                &1.0,
                ta.as_ptr(),
                &lda,
                tb.as_mut_ptr(),
                &ldb,
            )
        };
        assert_eq!(
            take_blas_error().map(|e| e.argument),
            Some(pos),
            "trsm {args:?}"
        );
        assert!(tb.iter().all(|&x| x == 3.0));
    }
}

/// Calls a LAPACK routine through `call` (which receives `info`) and returns `info`.
fn info_of(call: impl FnOnce(&mut i32)) -> i32 {
    let mut info = 12345;
    call(&mut info);
    info
}

type D = f64;
type P = *const i32;

#[test]
fn lapack_argument_errors() {
    let mut a = vec![1.0f64; 64];
    let a0 = a.clone();
    let mut b = vec![2.0f64; 64];
    let mut w = vec![0.0f64; 64];
    let mut iw = vec![0i32; 64];
    let mut ipiv = vec![1i32; 8];
    let mut values = vec![0.0f64; 8];
    let vp = values.as_mut_ptr();
    let ap = a.as_mut_ptr();
    let bp = b.as_mut_ptr();
    let wp = w.as_mut_ptr();
    let iwp = iw.as_mut_ptr();
    let pp = ipiv.as_mut_ptr();
    let c = |x: u8| ch(x);
    // SAFETY: (whole block) every array holds 64 (ipiv 8) elements, more than any extent used,
    // and each prototype is the routine's.
    unsafe {
        let getrf: unsafe extern "C" fn(P, P, *mut D, P, *mut i32, *mut i32) = sym("dgetrf_");
        assert_eq!(info_of(|i| getrf(&-1, &2, ap, &2, pp, i)), -1);
        assert_eq!(info_of(|i| getrf(&2, &-1, ap, &2, pp, i)), -2);
        assert_eq!(info_of(|i| getrf(&3, &2, ap, &2, pp, i)), -4);
        let getrs: unsafe extern "C" fn(*const c_char, P, P, *const D, P, P, *mut D, P, *mut i32) =
            sym("dgetrs_");
        assert_eq!(
            info_of(|i| getrs(&c(b'X'), &2, &1, ap, &2, pp, bp, &2, i)),
            -1
        );
        assert_eq!(
            info_of(|i| getrs(&c(b'N'), &-2, &1, ap, &2, pp, bp, &2, i)),
            -2
        );
        assert_eq!(
            info_of(|i| getrs(&c(b'N'), &2, &-1, ap, &2, pp, bp, &2, i)),
            -3
        );
        assert_eq!(
            info_of(|i| getrs(&c(b'N'), &3, &1, ap, &2, pp, bp, &3, i)),
            -5
        );
        assert_eq!(
            info_of(|i| getrs(&c(b'N'), &3, &1, ap, &3, pp, bp, &2, i)),
            -8
        );
        ipiv[1] = 9;
        assert_eq!(
            info_of(|i| getrs(&c(b'N'), &3, &1, ap, &3, pp, bp, &3, i)),
            -6,
            "pivot out of range"
        );
        ipiv[1] = 0;
        assert_eq!(
            info_of(|i| getrs(&c(b'T'), &3, &1, ap, &3, pp, bp, &3, i)),
            -6,
            "pivot 0"
        );
        ipiv[1] = 2;
        let gesv: unsafe extern "C" fn(P, P, *mut D, P, *mut i32, *mut D, P, *mut i32) =
            sym("dgesv_");
        assert_eq!(info_of(|i| gesv(&-1, &1, ap, &1, pp, bp, &1, i)), -1);
        assert_eq!(info_of(|i| gesv(&2, &-1, ap, &2, pp, bp, &2, i)), -2);
        assert_eq!(info_of(|i| gesv(&2, &1, ap, &1, pp, bp, &2, i)), -4);
        assert_eq!(info_of(|i| gesv(&2, &1, ap, &2, pp, bp, &1, i)), -7);
        let getri: unsafe extern "C" fn(P, *mut D, P, P, *mut D, P, *mut i32) = sym("dgetri_");
        assert_eq!(info_of(|i| getri(&-1, ap, &1, pp, wp, &1, i)), -1);
        assert_eq!(info_of(|i| getri(&3, ap, &2, pp, wp, &3, i)), -3);
        assert_eq!(info_of(|i| getri(&3, ap, &3, pp, wp, &2, i)), -6);
        let potrf: unsafe extern "C" fn(*const c_char, P, *mut D, P, *mut i32) = sym("dpotrf_");
        assert_eq!(info_of(|i| potrf(&c(b'X'), &2, ap, &2, i)), -1);
        assert_eq!(info_of(|i| potrf(&c(b'L'), &-2, ap, &2, i)), -2);
        assert_eq!(info_of(|i| potrf(&c(b'U'), &3, ap, &2, i)), -4);
        let potri: unsafe extern "C" fn(*const c_char, P, *mut D, P, *mut i32) = sym("dpotri_");
        assert_eq!(info_of(|i| potri(&c(b'U'), &3, ap, &2, i)), -4);
        let posv: unsafe extern "C" fn(*const c_char, P, P, *mut D, P, *mut D, P, *mut i32) =
            sym("dposv_");
        assert_eq!(info_of(|i| posv(&c(b'L'), &2, &-1, ap, &2, bp, &2, i)), -3);
        assert_eq!(info_of(|i| posv(&c(b'L'), &2, &1, ap, &1, bp, &2, i)), -5);
        assert_eq!(info_of(|i| posv(&c(b'L'), &2, &1, ap, &2, bp, &1, i)), -7);
        let potrs: unsafe extern "C" fn(*const c_char, P, P, *const D, P, *mut D, P, *mut i32) =
            sym("dpotrs_");
        assert_eq!(info_of(|i| potrs(&c(b'Q'), &2, &1, ap, &2, bp, &2, i)), -1);
        assert_eq!(info_of(|i| potrs(&c(b'U'), &2, &1, ap, &2, bp, &1, i)), -7);
        let trtrs: unsafe extern "C" fn(
            *const c_char,
            *const c_char,
            *const c_char,
            P,
            P,
            *const D,
            P,
            *mut D,
            P,
            *mut i32,
        ) = sym("dtrtrs_");
        assert_eq!(
            info_of(|i| trtrs(&c(b'L'), &c(b'Z'), &c(b'N'), &2, &1, ap, &2, bp, &2, i)),
            -2
        );
        assert_eq!(
            info_of(|i| trtrs(&c(b'L'), &c(b'N'), &c(b'X'), &2, &1, ap, &2, bp, &2, i)),
            -3
        );
        assert_eq!(
            info_of(|i| trtrs(&c(b'L'), &c(b'N'), &c(b'N'), &2, &-1, ap, &2, bp, &2, i)),
            -5
        );
        assert_eq!(
            info_of(|i| trtrs(&c(b'L'), &c(b'N'), &c(b'N'), &2, &1, ap, &2, bp, &1, i)),
            -9
        );
        let geqrf: unsafe extern "C" fn(P, P, *mut D, P, *mut D, *mut D, P, *mut i32) =
            sym("dgeqrf_");
        assert_eq!(info_of(|i| geqrf(&3, &3, ap, &2, bp, wp, &3, i)), -4);
        assert_eq!(info_of(|i| geqrf(&3, &3, ap, &3, bp, wp, &2, i)), -7);
        assert_eq!(info_of(|i| geqrf(&3, &3, ap, &3, bp, wp, &0, i)), -7);
        let orgqr: unsafe extern "C" fn(P, P, P, *mut D, P, *const D, *mut D, P, *mut i32) =
            sym("dorgqr_");
        assert_eq!(
            info_of(|i| orgqr(&2, &3, &1, ap, &2, bp, wp, &3, i)),
            -2,
            "n > m"
        );
        assert_eq!(
            info_of(|i| orgqr(&3, &2, &3, ap, &3, bp, wp, &3, i)),
            -3,
            "k > n"
        );
        assert_eq!(info_of(|i| orgqr(&3, &3, &3, ap, &2, bp, wp, &3, i)), -5);
        assert_eq!(info_of(|i| orgqr(&3, &3, &3, ap, &3, bp, wp, &2, i)), -8);
        let syevd: unsafe extern "C" fn(
            *const c_char,
            *const c_char,
            P,
            *mut D,
            P,
            *mut D,
            *mut D,
            P,
            *mut i32,
            P,
            *mut i32,
        ) = sym("dsyevd_");
        assert_eq!(
            info_of(|i| syevd(&c(b'X'), &c(b'L'), &3, ap, &3, vp, wp, &64, iwp, &64, i)),
            -1
        );
        assert_eq!(
            info_of(|i| syevd(&c(b'V'), &c(b'X'), &3, ap, &3, vp, wp, &64, iwp, &64, i)),
            -2
        );
        assert_eq!(
            info_of(|i| syevd(&c(b'V'), &c(b'L'), &3, ap, &2, vp, wp, &64, iwp, &64, i)),
            -5
        );
        // jobz 'V', n = 3: lwork >= 1 + 18 + 18 = 37, liwork >= 18
        assert_eq!(
            info_of(|i| syevd(&c(b'V'), &c(b'L'), &3, ap, &3, vp, wp, &36, iwp, &64, i)),
            -8
        );
        assert_eq!(
            info_of(|i| syevd(&c(b'V'), &c(b'L'), &3, ap, &3, vp, wp, &37, iwp, &17, i)),
            -10
        );
        let syev: unsafe extern "C" fn(
            *const c_char,
            *const c_char,
            P,
            *mut D,
            P,
            *mut D,
            *mut D,
            P,
            *mut i32,
        ) = sym("dsyev_");
        assert_eq!(
            info_of(|i| syev(&c(b'X'), &c(b'L'), &3, ap, &3, vp, wp, &64, i)),
            -1
        );
        assert_eq!(
            info_of(|i| syev(&c(b'V'), &c(b'X'), &3, ap, &3, vp, wp, &64, i)),
            -2
        );
        assert_eq!(
            info_of(|i| syev(&c(b'V'), &c(b'L'), &-1, ap, &3, vp, wp, &64, i)),
            -3
        );
        assert_eq!(
            info_of(|i| syev(&c(b'V'), &c(b'L'), &3, ap, &2, vp, wp, &64, i)),
            -5
        );
        // n = 3: lwork >= 3n - 1 = 8
        assert_eq!(
            info_of(|i| syev(&c(b'N'), &c(b'L'), &3, ap, &3, vp, wp, &7, i)),
            -8
        );
        type Evr = unsafe extern "C" fn(
            *const c_char,
            *const c_char,
            *const c_char,
            P,
            *mut D,
            P,
            *const D,
            *const D,
            P,
            P,
            *const D,
            *mut i32,
            *mut D,
            *mut D,
            P,
            *mut i32,
            *mut D,
            P,
            *mut i32,
            P,
            *mut i32,
        );
        let syevr: Evr = sym("dsyevr_");
        let mut m = 0;
        let mut z = vec![0.0f64; 64];
        let mut isuppz = vec![0i32; 16];
        let (zp, sp, mp) = (z.as_mut_ptr(), isuppz.as_mut_ptr(), &mut m as *mut i32);
        let evr = |jobz: u8,
                   range: u8,
                   vl: f64,
                   vu: f64,
                   il: i32,
                   iu: i32,
                   ldz: i32,
                   lwork: i32,
                   liwork: i32| {
            info_of(|i| {
                syevr(
                    &c(jobz),
                    &c(range),
                    &c(b'L'),
                    &3,
                    ap,
                    &3,
                    &vl,
                    &vu,
                    &il,
                    &iu,
                    &0.0,
                    mp,
                    vp,
                    zp,
                    &ldz,
                    sp,
                    wp,
                    &lwork,
                    iwp,
                    &liwork,
                    i,
                )
            })
        };
        assert_eq!(evr(b'V', b'X', 0.0, 1.0, 1, 1, 3, 64, 64), -2);
        assert_eq!(evr(b'V', b'V', 1.0, 1.0, 1, 1, 3, 64, 64), -8, "vu <= vl");
        assert_eq!(evr(b'V', b'I', 0.0, 0.0, 0, 1, 3, 64, 64), -9, "il < 1");
        assert_eq!(evr(b'V', b'I', 0.0, 0.0, 2, 1, 3, 64, 64), -10, "iu < il");
        assert_eq!(evr(b'V', b'I', 0.0, 0.0, 1, 4, 3, 64, 64), -10, "iu > n");
        assert_eq!(evr(b'V', b'A', 0.0, 0.0, 0, 0, 2, 64, 64), -15, "ldz < n");
        assert_eq!(
            evr(b'N', b'A', 0.0, 0.0, 0, 0, 1, 78, 64),
            0,
            "ldz = 1 without vectors"
        );
        assert_eq!(
            evr(b'V', b'A', 0.0, 0.0, 0, 0, 3, 77, 64),
            -18,
            "lwork < 26 n"
        );
        assert_eq!(
            evr(b'V', b'A', 0.0, 0.0, 0, 0, 3, 78, 29),
            -20,
            "liwork < 10 n"
        );
        let gesdd: unsafe extern "C" fn(
            *const c_char,
            P,
            P,
            *mut D,
            P,
            *mut D,
            *mut D,
            P,
            *mut D,
            P,
            *mut D,
            P,
            *mut i32,
            *mut i32,
        ) = sym("dgesdd_");
        let sdd = |jobz: u8, lda: i32, ldu: i32, ldvt: i32, lwork: i32| {
            info_of(|i| {
                gesdd(
                    &c(jobz),
                    &3,
                    &2,
                    ap,
                    &lda,
                    bp,
                    zp,
                    &ldu,
                    sp as *mut D,
                    &ldvt,
                    wp,
                    &lwork,
                    iwp,
                    i,
                )
            })
        };
        assert_eq!(sdd(b'X', 3, 3, 2, 64), -1);
        assert_eq!(sdd(b'S', 2, 3, 2, 64), -5);
        assert_eq!(sdd(b'S', 3, 2, 2, 64), -8);
        assert_eq!(sdd(b'A', 3, 3, 1, 64), -10);
        assert_eq!(sdd(b'S', 3, 3, 2, 0), -12);
        let gesvd: unsafe extern "C" fn(
            *const c_char,
            *const c_char,
            P,
            P,
            *mut D,
            P,
            *mut D,
            *mut D,
            P,
            *mut D,
            P,
            *mut D,
            P,
            *mut i32,
        ) = sym("dgesvd_");
        let svd = |ju: u8, jv: u8, ldu: i32, ldvt: i32, lwork: i32| {
            info_of(|i| {
                gesvd(
                    &c(ju),
                    &c(jv),
                    &3,
                    &2,
                    ap,
                    &3,
                    bp,
                    zp,
                    &ldu,
                    sp as *mut D,
                    &ldvt,
                    wp,
                    &lwork,
                    i,
                )
            })
        };
        assert_eq!(svd(b'X', b'N', 3, 2, 64), -1);
        assert_eq!(svd(b'O', b'O', 3, 2, 64), -2);
        assert_eq!(svd(b'A', b'N', 2, 2, 64), -9);
        assert_eq!(svd(b'N', b'A', 1, 1, 64), -11);
        assert_eq!(svd(b'N', b'N', 1, 1, 0), -13);
        let gelsd: unsafe extern "C" fn(
            P,
            P,
            P,
            *mut D,
            P,
            *mut D,
            P,
            *mut D,
            *const D,
            *mut i32,
            *mut D,
            P,
            *mut i32,
            *mut i32,
        ) = sym("dgelsd_");
        let mut rank = 0;
        let rp = &mut rank as *mut i32;
        let lsd = |m: i32, n: i32, nrhs: i32, lda: i32, ldb: i32, lwork: i32| {
            info_of(|i| {
                gelsd(
                    &m, &n, &nrhs, ap, &lda, bp, &ldb, wp, &-1.0, rp, zp, &lwork, iwp, i,
                )
            })
        };
        assert_eq!(lsd(-1, 2, 1, 1, 2, 64), -1);
        assert_eq!(lsd(2, 2, -1, 2, 2, 64), -3);
        assert_eq!(lsd(3, 2, 1, 2, 3, 64), -5);
        assert_eq!(lsd(2, 3, 1, 2, 2, 64), -7, "ldb < max(m, n)");
        assert_eq!(lsd(2, 3, 1, 2, 3, 0), -12);
    }
    assert_eq!(a, a0, "no argument error wrote A");
    assert!(b.iter().all(|&x| x == 2.0), "no argument error wrote B");
    // complex workspace arguments: heevd's lrwork and liwork, heevr's lrwork
    let mut za = vec![c64::new(1.0, 0.0); 16];
    let mut zw = vec![c64::new(0.0, 0.0); 64];
    let mut rw = vec![0.0f64; 64];
    // SAFETY: arrays larger than any extent used; prototypes are the routines'.
    unsafe {
        let heevd: unsafe extern "C" fn(
            *const c_char,
            *const c_char,
            P,
            *mut c64,
            P,
            *mut D,
            *mut c64,
            P,
            *mut D,
            P,
            *mut i32,
            P,
            *mut i32,
        ) = sym("zheevd_");
        // n = 3, 'V': lwork >= 15, lrwork >= 34, liwork >= 18
        let mut ev = |lw: i32, lrw: i32, liw: i32| {
            info_of(|i| {
                heevd(
                    &ch(b'V'),
                    &ch(b'U'),
                    &3,
                    za.as_mut_ptr(),
                    &3,
                    w.as_mut_ptr(),
                    zw.as_mut_ptr(),
                    &lw,
                    rw.as_mut_ptr(),
                    &lrw,
                    iw.as_mut_ptr(),
                    &liw,
                    i,
                )
            })
        };
        assert_eq!(ev(14, 64, 64), -8);
        assert_eq!(ev(15, 33, 64), -10);
        assert_eq!(ev(15, 34, 17), -12);
        assert_eq!(ev(15, 34, 18), 0);
    }
}

/// Runs `f` on a fresh thread (so that an injected panic's unwinding state is local).
fn with_panic_in<R: Send + 'static>(
    routine: &'static str,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    std::thread::spawn(move || {
        INJECT_PANIC.with(|p| p.set(Some(routine)));
        let r = f();
        assert_eq!(
            INJECT_PANIC.with(|p| p.get()),
            None,
            "the panic point was reached"
        );
        r
    })
    .join()
    .expect("no panic may leave the routine")
}

#[test]
fn injected_panics_write_nothing() {
    // BLAS: recorded as an internal failure, C untouched
    let (c, err) = with_panic_in("gemm", || dgemm(b'N', b'N', 2, 2, 2, 2, 2, 2));
    assert_eq!(err.map(|e| e.argument), Some(INTERNAL_FAILURE_INFO));
    assert!(c.iter().all(|&x| x == 5.0));
    // LAPACK: info = INTERNAL_FAILURE_INFO, A and ipiv untouched
    let (info, a, ipiv) = with_panic_in("getrf", || {
        let mut a = Mat::<f64>::random(&mut Rng::new(1), 4, 4, 1);
        let before = a.clone();
        let (ipiv, info) = super::lu::getrf(&mut a);
        (info, a.data == before.data, ipiv)
    });
    assert_eq!(info, INTERNAL_FAILURE_INFO);
    assert!(a, "A untouched");
    assert_eq!(ipiv, vec![-7; 4], "ipiv untouched");
    let (out, same) = with_panic_in("gesdd", || {
        let (_, mut a) = super::svd::known_svd::<c64>(&mut Rng::new(2), 5, 4, 0);
        let before = a.clone();
        let out = super::svd::svd_call(true, b'O', b'O', &mut a, 0, 4, 0, None);
        (
            out.info,
            a.data == before.data && out.vt.data.iter().all(|v| *v == poison::<c64>()),
        )
    });
    assert_eq!(out, INTERNAL_FAILURE_INFO);
    assert!(same, "A and VT untouched");
    let info = with_panic_in("syevd", || {
        let (_, _, mut a) = super::eigen::hermitian::<f32>(&mut Rng::new(3), 5, 0, true);
        let mut w = vec![7.0f32; 5];
        let info = super::eigen::evd(true, true, &mut a, &mut w);
        assert!(w.iter().all(|&x| x == 7.0), "w untouched");
        info
    });
    assert_eq!(info, INTERNAL_FAILURE_INFO);
}

#[test]
fn allocation_failure_is_an_internal_failure() {
    let big = i32::MAX;
    let mut a = vec![1.0f64; 4];
    let mut ipiv = vec![0i32; 4];
    let getrf: unsafe extern "C" fn(P, P, *mut D, P, *mut i32, *mut i32) = sym("dgetrf_");
    // SAFETY: the private copy of a 2^31 x 2^31 matrix cannot be allocated, so nothing is read
    // beyond the first element... nor at all: the allocation comes first.
    let info =
        info_of(|i| unsafe { getrf(&big, &big, a.as_mut_ptr(), &big, ipiv.as_mut_ptr(), i) });
    assert_eq!(info, INTERNAL_FAILURE_INFO);
    assert_eq!(a, vec![1.0; 4]);
    assert_eq!(ipiv, vec![0; 4]);
    let mut c = vec![5.0f64; 4];
    let f: GemmH = sym("dgemm_");
    // SAFETY: beta = 0, so the output is allocated before anything is read; it cannot be.
    unsafe {
        f(
            &ch(b'N'),
            &ch(b'N'),
            &big,
            &big,
            &1,
            &1.0,
            a.as_ptr(),
            &big,
            a.as_ptr(),
            &1,
            &0.0,
            c.as_mut_ptr(),
            &big,
            1,
            1,
        )
    };
    assert_eq!(
        take_blas_error().map(|e| e.argument),
        Some(INTERNAL_FAILURE_INFO)
    );
    assert_eq!(c, vec![5.0; 4]);
}

#[test]
fn non_finite_inputs() {
    let rng = &mut Rng::new(4);
    // gesdd: info = -4 for NaN or infinity, nothing written
    for bad in [f64::NAN, f64::INFINITY] {
        let (_, mut a) = super::svd::known_svd::<f64>(rng, 5, 3, 0);
        a.set(2, 1, bad);
        let before = format!("{:?}", a.data);
        let out = super::svd::svd_call(true, b'S', b'S', &mut a, 3, 3, 0, None);
        assert_eq!(out.info, -4);
        assert_eq!(format!("{:?}", a.data), before);
        assert!(
            out.u.data.iter().all(|v| *v == poison::<f64>()),
            "U untouched"
        );
        let (_, mut z) = super::svd::known_svd::<c32>(rng, 3, 6, 1);
        z.set(0, 5, c32::new(0.0, bad as f32));
        assert_eq!(
            super::svd::svd_call(true, b'A', b'A', &mut z, 3, 6, 0, None).info,
            -4
        );
        // gesvd: non-convergence (min(m, n))
        let (_, mut a) = super::svd::known_svd::<f64>(rng, 4, 6, 0);
        a.set(3, 3, bad);
        assert_eq!(
            super::svd::svd_call(false, b'S', b'O', &mut a, 4, 0, 0, None).info,
            4
        );
    }
    // syevd / heevr: info = n for a NaN in the referenced triangle
    let (_, _, mut a) = super::eigen::hermitian::<f64>(rng, 6, 0, false);
    a.set(1, 4, f64::NAN);
    let mut w = vec![0.0; 6];
    assert_eq!(super::eigen::evd(true, false, &mut a, &mut w), 6);
    // syev: the same
    assert_eq!(super::eigen::ev(false, false, &mut a, &mut w), 6);
    let (d, _, mut z) = super::eigen::hermitian::<c64>(rng, 5, 0, true);
    z.set(4, 0, c64::new(f64::NAN, 0.0));
    assert_eq!(
        super::eigen::evr(true, true, &mut z, super::eigen::Sel::All, &d).0,
        5
    );
    // gelsd: info = min(m, n)
    let mut a = Mat::<f32>::random(rng, 5, 3, 0);
    a.set(0, 0, f32::INFINITY);
    let mut b = Mat::<f32>::random(rng, 5, 1, 0);
    let b0 = b.data.clone();
    assert_eq!(super::lstsq::gelsd(&mut a, &mut b, 1, -1.0).0, 3);
    assert_eq!(b.data, b0, "B untouched");
    // potrf: a NaN pivot is a non-positive minor (LAPACK's DISNAN test)
    let (_, mut p) = super::cholesky::hpd::<f64>(rng, 4, 0, true);
    p.set(3, 1, f64::NAN);
    assert_eq!(super::cholesky::potrf(&mut p, true), 4);
    // getrf: NaN propagates, as in LAPACK (no error)
    let mut g = Mat::<f64>::random(rng, 3, 3, 0);
    g.set(1, 1, f64::NAN);
    let (_, info) = super::lu::getrf(&mut g);
    assert_eq!(info, 0);
    assert!(g.data.iter().any(|v| v.is_nan()));
    // gemm: NaN in A reaches C; a NaN C with beta = 0 does not
    let mut c = vec![f64::NAN; 4];
    let (an, bn) = (vec![f64::NAN, 1.0, 1.0, 1.0], vec![1.0; 4]);
    let f: GemmH = sym("dgemm_");
    // SAFETY: 2x2 arrays.
    unsafe {
        f(
            &ch(b'N'),
            &ch(b'N'),
            &2,
            &2,
            &2,
            &1.0,
            an.as_ptr(),
            &2,
            bn.as_ptr(),
            &2,
            &0.0,
            c.as_mut_ptr(),
            &2,
            1,
            1,
        )
    };
    assert!(c[0].is_nan() && c[2].is_nan(), "row 0 has A's NaN");
    assert_eq!(
        (c[1], c[3]),
        (2.0, 2.0),
        "row 1 is finite: C's NaN was not read"
    );
}

#[test]
fn symbol_table() {
    let names = routines();
    assert_eq!(names.len(), 92);
    for name in names {
        assert!(symbol(name).is_some(), "{name}");
        assert!(name.ends_with('_'));
    }
    let unique: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    for missing in [
        "dgemm",
        "DGEMM_",
        "scipy_dgemm_",
        "dgemm_64_",
        "dsyevx_",
        "dsyev",
        "zsyev_",
        "chemm",
        "dhemm_",
        "sorgqr",
        "zorgqr_",
        "cungqr",
    ] {
        assert!(symbol(missing).is_none(), "{missing}");
    }
    for routine in [
        "gemm", "symm", "syrk", "trsm", "trmm", "getrf", "getrs", "gesv", "getri", "potrf",
        "potrs", "posv", "potri", "trtrs", "geqrf", "gesdd", "gesvd", "gelsd",
    ] {
        for p in ['s', 'd', 'c', 'z'] {
            assert!(symbol(&format!("{p}{routine}_")).is_some(), "{p}{routine}_");
        }
    }
    for (r, c) in [
        ("orgqr", "ungqr"),
        ("syev", "heev"),
        ("syevd", "heevd"),
        ("syevr", "heevr"),
        ("symm", "hemm"),
        ("syrk", "herk"),
    ] {
        for p in ['s', 'd'] {
            assert!(symbol(&format!("{p}{r}_")).is_some());
        }
        for p in ['c', 'z'] {
            assert!(symbol(&format!("{p}{c}_")).is_some());
        }
    }
}

/// A product large enough for the thread pool; returns whether C(0,0) is right.
fn pooled_gemm() -> bool {
    let n = 300usize;
    let a: Vec<f64> = (0..n * n).map(|i| (i % 7) as f64).collect();
    let b = vec![1.0f64; n * n];
    let mut c = vec![0.0f64; n * n];
    let f: GemmH = sym("dgemm_");
    let ni = n as i32;
    // SAFETY: n x n arrays.
    unsafe {
        f(
            &ch(b'N'),
            &ch(b'N'),
            &ni,
            &ni,
            &ni,
            &1.0,
            a.as_ptr(),
            &ni,
            b.as_ptr(),
            &ni,
            &0.0,
            c.as_mut_ptr(),
            &ni,
            1,
            1,
        )
    };
    let want: f64 = (0..n).map(|l| ((l * n) % 7) as f64).sum();
    c[0] == want
}

/// After a fork, the child has the parent's rayon pool without its threads: a call there must
/// still finish (it runs on the calling thread). A real forked process, watched with a timeout.
#[test]
fn forked_child_does_not_hang() {
    assert!(pooled_gemm(), "parent");
    // SAFETY: the child only runs the embedded backend (allocation and arithmetic) and leaves
    // with `_exit`, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(pooled_gemm).unwrap_or(false);
        // SAFETY: ends the child without running the parent's destructors or atexit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 3 }) };
    }
    let start = std::time::Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if start.elapsed().as_secs() > 120 {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child hung in the embedded backend");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
}
