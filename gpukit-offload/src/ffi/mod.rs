//! The Fortran and CBLAS interface of every routine, from one table.
//!
//! Each routine's Fortran prototype is written once, in [`__offload_fortran_table!`]: its
//! argument names in order, the arguments only the complex variant has (`rwork`, `lrwork`: real
//! and complex variants share the entry) and its hidden character-length arguments. Fortran
//! passes every argument by reference, so a prototype is fully described by its names: every
//! argument is a pointer, then one `usize` per character argument. From the table come
//!
//! * [`args`]: one struct per routine holding a call's arguments as passed, with
//!   [`Prototype::invoke`], the call-through to any library's function of that prototype;
//! * the shim's exported wrappers ([`crate::export_blas_symbols!`], in every naming convention);
//! * [`for_routine`], which picks a routine's argument struct at run time.
//!
//! What a routine's arguments *mean* is written once per routine as well, in [`marshal`]: the
//! shape for the shim's fast path, the parse of the arguments into a [`crate::call::Call`] (the
//! shim) and the reverse, a call's arguments filled from a [`crate::call::Call`] with workspace
//! from a [`Store`] (the CPU backend: typed API, calibration, the embedded library). The CBLAS
//! entry points ([`cblas`]) have prototypes of their own (values, not references) and are
//! converted into the Fortran arguments of the same routine, so they share its parse.

pub mod cblas;
pub mod marshal;
mod store;

pub use marshal::{Marshal, WsMut};
pub use store::{Mode, Store};

use crate::ops::Routine;
use std::ffi::c_void;

/// A Fortran argument: every one is passed by reference.
pub type P = *mut c_void;

/// What the table generates for each routine's argument struct.
pub trait Prototype: Copy {
    /// The routine.
    const ROUTINE: Routine;
    /// The number of (non-hidden) arguments of the real prototype and of the complex one:
    /// a LAPACK routine's `INFO` is the last of them (XERBLA's position for an error that is
    /// about no single argument, see [`crate::interpose`]).
    const NARGS: [usize; 2];
    /// Every pointer null and every hidden length 1 (the start of [`Marshal::fill`]).
    fn blank() -> Self;
    /// Calls `f`, a function of this routine's prototype (the complex one when `complex`),
    /// with these arguments.
    ///
    /// # Safety
    /// `f` must be such a function and the arguments must satisfy its contract.
    unsafe fn invoke(&self, f: P, complex: bool);
}

#[doc(hidden)]
#[macro_export]
macro_rules! __offload_p {
    ($x:ident) => {
        *mut ::std::ffi::c_void
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __offload_one {
    ($x:ident) => {
        1usize
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __offload_len {
    ($x:ident) => {
        usize
    };
}

/// The table: `{ Routine, real stem, complex stem, [real precisions], [complex precisions],
/// (arguments), (complex-only arguments, placed after `lwork`), (the arguments after them),
/// (hidden lengths) }`. Expands `$callback! { entries }`.
#[doc(hidden)]
#[macro_export]
macro_rules! __offload_fortran_table {
    ($callback:path) => {
        $callback! {
            { Gemm, gemm, gemm, [S s D d], [C c Z z],
              (transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), (), (), (h1, h2) }
            { Symm, symm, symm, [S s D d], [C c Z z],
              (side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc), (), (), (h1, h2) }
            { Hemm, hemm, hemm, [], [C c Z z],
              (side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc), (), (), (h1, h2) }
            { Syrk, syrk, syrk, [S s D d], [C c Z z],
              (uplo, trans, n, k, alpha, a, lda, beta, c, ldc), (), (), (h1, h2) }
            { Herk, herk, herk, [], [C c Z z],
              (uplo, trans, n, k, alpha, a, lda, beta, c, ldc), (), (), (h1, h2) }
            { Trsm, trsm, trsm, [S s D d], [C c Z z],
              (side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb), (), (), (h1, h2, h3, h4) }
            { Trmm, trmm, trmm, [S s D d], [C c Z z],
              (side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb), (), (), (h1, h2, h3, h4) }
            { Getrf, getrf, getrf, [S s D d], [C c Z z],
              (m, n, a, lda, ipiv, info), (), (), () }
            { Getrs, getrs, getrs, [S s D d], [C c Z z],
              (trans, n, nrhs, a, lda, ipiv, b, ldb, info), (), (), (h1) }
            { Gesv, gesv, gesv, [S s D d], [C c Z z],
              (n, nrhs, a, lda, ipiv, b, ldb, info), (), (), () }
            { Getri, getri, getri, [S s D d], [C c Z z],
              (n, a, lda, ipiv, work, lwork, info), (), (), () }
            { Potrf, potrf, potrf, [S s D d], [C c Z z],
              (uplo, n, a, lda, info), (), (), (h1) }
            { Potrs, potrs, potrs, [S s D d], [C c Z z],
              (uplo, n, nrhs, a, lda, b, ldb, info), (), (), (h1) }
            { Posv, posv, posv, [S s D d], [C c Z z],
              (uplo, n, nrhs, a, lda, b, ldb, info), (), (), (h1) }
            { Potri, potri, potri, [S s D d], [C c Z z],
              (uplo, n, a, lda, info), (), (), (h1) }
            { Trtrs, trtrs, trtrs, [S s D d], [C c Z z],
              (uplo, trans, diag, n, nrhs, a, lda, b, ldb, info), (), (), (h1, h2, h3) }
            { Syev, syev, heev, [S s D d], [C c Z z],
              (jobz, uplo, n, a, lda, w, work, lwork), (rwork), (info), (h1, h2) }
            { Syevd, syevd, heevd, [S s D d], [C c Z z],
              (jobz, uplo, n, a, lda, w, work, lwork), (rwork, lrwork), (iwork, liwork, info),
              (h1, h2) }
            { Syevr, syevr, heevr, [S s D d], [C c Z z],
              (jobz, range, uplo, n, a, lda, vl, vu, il, iu, abstol, m, w, z, ldz, isuppz, work,
               lwork), (rwork, lrwork), (iwork, liwork, info), (h1, h2, h3) }
            { Gesdd, gesdd, gesdd, [S s D d], [C c Z z],
              (jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork), (rwork), (iwork, info),
              (h1) }
            { Gesvd, gesvd, gesvd, [S s D d], [C c Z z],
              (jobu, jobvt, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork), (rwork), (info),
              (h1, h2) }
            { Gelsd, gelsd, gelsd, [S s D d], [C c Z z],
              (m, n, nrhs, a, lda, b, ldb, s, rcond, rank, work, lwork), (rwork), (iwork, info),
              () }
            { Geqrf, geqrf, geqrf, [S s D d], [C c Z z],
              (m, n, a, lda, tau, work, lwork, info), (), (), () }
            { Orgqr, orgqr, ungqr, [S s D d], [C c Z z],
              (m, n, k, a, lda, tau, work, lwork, info), (), (), () }
        }
    };
}

macro_rules! define_args {
    ($({ $R:ident, $stem:ident, $cstem:ident, $real:tt, $cplx:tt,
         ($($h:ident),*), ($($c:ident),*), ($($t:ident),*), ($($l:ident),*) })*) => {
        /// One struct per routine: a call's arguments as passed (see the module docs).
        pub mod args {
            use super::{Prototype, P};
            use crate::ops::Routine;
            $(
                #[doc = concat!("The arguments of `?", stringify!($stem), "` / `?",
                    stringify!($cstem), "` (complex-only ones are null in real calls).")]
                #[derive(Debug, Clone, Copy)]
                #[allow(missing_docs)]
                pub struct $R {
                    $(pub $h: P,)*
                    $(pub $c: P,)*
                    $(pub $t: P,)*
                    $(pub $l: usize,)*
                }

                impl Prototype for $R {
                    const ROUTINE: Routine = Routine::$R;
                    const NARGS: [usize; 2] = [
                        0 $(+ $crate::__offload_one!($h))* $(+ $crate::__offload_one!($t))*,
                        0 $(+ $crate::__offload_one!($h))* $(+ $crate::__offload_one!($c))*
                            $(+ $crate::__offload_one!($t))*,
                    ];

                    fn blank() -> Self {
                        $R {
                            $($h: std::ptr::null_mut(),)*
                            $($c: std::ptr::null_mut(),)*
                            $($t: std::ptr::null_mut(),)*
                            $($l: 1,)*
                        }
                    }

                    #[inline(always)]
                    unsafe fn invoke(&self, f: P, complex: bool) {
                        if complex {
                            // SAFETY: the caller guarantees `f` has the complex prototype: these
                            // pointer arguments in this order, then the hidden lengths.
                            unsafe {
                                let g: unsafe extern "C" fn(
                                    $($crate::__offload_p!($h),)*
                                    $($crate::__offload_p!($c),)*
                                    $($crate::__offload_p!($t),)*
                                    $($crate::__offload_len!($l),)*
                                ) = std::mem::transmute(f);
                                g($(self.$h,)* $(self.$c,)* $(self.$t,)* $(self.$l,)*)
                            }
                        } else {
                            // SAFETY: as above, the real prototype (no complex-only arguments).
                            unsafe {
                                let g: unsafe extern "C" fn(
                                    $($crate::__offload_p!($h),)*
                                    $($crate::__offload_p!($t),)*
                                    $($crate::__offload_len!($l),)*
                                ) = std::mem::transmute(f);
                                g($(self.$h,)* $(self.$t,)* $(self.$l,)*)
                            }
                        }
                    }
                }
            )*
        }

        /// Something done with a routine's argument type, chosen at run time by
        /// [`for_routine`].
        pub trait Visit {
            /// The result.
            type Out;
            /// Called with the routine's argument struct as `A`.
            fn visit<A: Marshal>(self) -> Self::Out;
        }

        /// Runs `v` with the argument struct of routine `r`.
        pub fn for_routine<V: Visit>(r: Routine, v: V) -> V::Out {
            match r {
                $(Routine::$R => v.visit::<args::$R>(),)*
            }
        }
    };
}

__offload_fortran_table!(define_args);

/// Generates the exported Fortran wrappers of the shim (used by
/// [`crate::export_blas_symbols!`]): every routine in every precision, in the four naming
/// conventions `?name_` (LP64), `?name_64_` (ILP64), `scipy_?name_` (scipy's LP64 OpenBLAS) and
/// `scipy_?name_64_` (numpy's ILP64 OpenBLAS).
#[doc(hidden)]
#[macro_export]
macro_rules! __offload_export_fortran {
    ($({ $R:ident, $stem:ident, $cstem:ident, [$($rp:ident $rl:ident)*], [$($cp:ident $cl:ident)*],
         $h:tt, $c:tt, $t:tt, $l:tt })*) => {
        $(
            $( $crate::__offload_export_fortran!(@conv real $R, $rp, $rl, $stem, $h, $c, $t, $l); )*
            $( $crate::__offload_export_fortran!(@conv complex $R, $cp, $cl, $cstem, $h, $c, $t, $l); )*
        )*
    };
    (@conv $kind:ident $R:ident, $P:ident, $letter:ident, $stem:ident, $h:tt, $c:tt, $t:tt, $l:tt) => {
        $crate::__offload_export_fortran!(@one $kind $R, $P, $letter, $stem, i32, "", "_", $h, $c, $t, $l);
        $crate::__offload_export_fortran!(@one $kind $R, $P, $letter, $stem, i64, "", "_64_", $h, $c, $t, $l);
        $crate::__offload_export_fortran!(@one $kind $R, $P, $letter, $stem, i32, "scipy_", "_", $h, $c, $t, $l);
        $crate::__offload_export_fortran!(@one $kind $R, $P, $letter, $stem, i64, "scipy_", "_64_", $h, $c, $t, $l);
    };
    (@one real $R:ident, $P:ident, $letter:ident, $stem:ident, $int:ty, $pre:literal, $suf:literal,
     ($($h:ident),*), ($($c:ident),*), ($($t:ident),*), ($($l:ident),*)) => {
        const _: () = {
            static REAL: $crate::interpose::RealFn = $crate::interpose::RealFn::new(
                concat!($pre, stringify!($letter), stringify!($stem), $suf, "\0"),
                concat!(stringify!($letter), stringify!($stem), "_\0"),
            );
            #[export_name = concat!($pre, stringify!($letter), stringify!($stem), $suf)]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn wrapper($($h: *mut ::std::ffi::c_void,)* $($t: *mut ::std::ffi::c_void,)* $($l: usize),*) {
                let args = $crate::ffi::args::$R {
                    $($h,)* $($c: ::std::ptr::null_mut(),)* $($t,)* $($l,)*
                };
                // SAFETY: the caller follows the Fortran contract of this symbol.
                unsafe {
                    $crate::interpose::fortran::<$crate::ffi::args::$R, $int>(
                        &REAL, $crate::ops::Precision::$P, args)
                }
            }
        };
    };
    (@one complex $R:ident, $P:ident, $letter:ident, $stem:ident, $int:ty, $pre:literal, $suf:literal,
     ($($h:ident),*), ($($c:ident),*), ($($t:ident),*), ($($l:ident),*)) => {
        const _: () = {
            static REAL: $crate::interpose::RealFn = $crate::interpose::RealFn::new(
                concat!($pre, stringify!($letter), stringify!($stem), $suf, "\0"),
                concat!(stringify!($letter), stringify!($stem), "_\0"),
            );
            #[export_name = concat!($pre, stringify!($letter), stringify!($stem), $suf)]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn wrapper($($h: *mut ::std::ffi::c_void,)* $($c: *mut ::std::ffi::c_void,)* $($t: *mut ::std::ffi::c_void,)* $($l: usize),*) {
                let args = $crate::ffi::args::$R { $($h,)* $($c,)* $($t,)* $($l,)* };
                // SAFETY: the caller follows the Fortran contract of this symbol.
                unsafe {
                    $crate::interpose::fortran::<$crate::ffi::args::$R, $int>(
                        &REAL, $crate::ops::Precision::$P, args)
                }
            }
        };
    };
}
