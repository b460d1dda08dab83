//! The CBLAS entry points of the BLAS-3 routines: their prototypes (written once, in
//! [`__offload_cblas_table!`]: integers, enums and real scalars by value, complex scalars by
//! pointer), the call-through, and the conversion of a CBLAS call into the Fortran arguments of
//! the same routine (row-major calls are the transposed column-major call, as in reference
//! CBLAS), so a CBLAS call is parsed by its routine's [`Marshal::parse`].

use super::{args, Marshal, Prototype, Store, P};
use crate::cpu::FInt;
use crate::ops::{Diag, Routine, Shape, Side, Trans, Uplo};
use crate::stats::Reason;
use std::ffi::{c_int, c_void};

/// A CBLAS scalar argument: a real by value, or a pointer to a complex value.
pub trait CScalar: Copy {
    /// The scalar as a Fortran argument (a pointer to its value).
    fn put<I: FInt>(self, st: &mut Store<I>) -> P;
}
impl CScalar for f32 {
    fn put<I: FInt>(self, st: &mut Store<I>) -> P {
        st.scalar(&crate::call::Scalar::of(self))
    }
}
impl CScalar for f64 {
    fn put<I: FInt>(self, st: &mut Store<I>) -> P {
        st.scalar(&crate::call::Scalar::of(self))
    }
}
impl CScalar for *const c_void {
    fn put<I: FInt>(self, _st: &mut Store<I>) -> P {
        self as P
    }
}

/// A CBLAS call's arguments (see the module docs).
pub trait Cblas<I: FInt>: Copy {
    /// The Fortran arguments it converts into.
    type F: Marshal;
    /// Sizes for the fast path (`None`: a negative dimension).
    fn shape(&self) -> Option<Shape>;
    /// The same call as Fortran arguments, values in `st`; `Err` for an invalid order or enum.
    fn fortran(&self, st: &mut Store<I>) -> Result<Self::F, Reason>;
    /// Calls `f`, a function of this CBLAS prototype, with these arguments.
    ///
    /// # Safety
    /// `f` must be such a function and the arguments must satisfy its contract.
    unsafe fn invoke(&self, f: P);
}

/// The CBLAS table: `{ Routine, stem, [precision letter scalar-type ...], (argument: type ...) }`
/// with `E` a CBLAS enum (`c_int`), `I` the integer, `A` the scalar type, `P` a pointer.
#[doc(hidden)]
#[macro_export]
macro_rules! __offload_cblas_table {
    ($callback:path) => {
        $callback! {
            { Gemm, gemm, [S s f32 D d f64 C c Cp Z z Cp],
              (order: E, transa: E, transb: E, m: I, n: I, k: I, alpha: A, a: P, lda: I, b: P,
               ldb: I, beta: A, c: P, ldc: I) }
            { Symm, symm, [S s f32 D d f64 C c Cp Z z Cp],
              (order: E, side: E, uplo: E, m: I, n: I, alpha: A, a: P, lda: I, b: P, ldb: I,
               beta: A, c: P, ldc: I) }
            { Hemm, hemm, [C c Cp Z z Cp],
              (order: E, side: E, uplo: E, m: I, n: I, alpha: A, a: P, lda: I, b: P, ldb: I,
               beta: A, c: P, ldc: I) }
            { Syrk, syrk, [S s f32 D d f64 C c Cp Z z Cp],
              (order: E, uplo: E, trans: E, n: I, k: I, alpha: A, a: P, lda: I, beta: A, c: P,
               ldc: I) }
            { Herk, herk, [C c f32 Z z f64],
              (order: E, uplo: E, trans: E, n: I, k: I, alpha: A, a: P, lda: I, beta: A, c: P,
               ldc: I) }
            { Trsm, trsm, [S s f32 D d f64 C c Cp Z z Cp],
              (order: E, side: E, uplo: E, transa: E, diag: E, m: I, n: I, alpha: A, a: P,
               lda: I, b: P, ldb: I) }
            { Trmm, trmm, [S s f32 D d f64 C c Cp Z z Cp],
              (order: E, side: E, uplo: E, transa: E, diag: E, m: I, n: I, alpha: A, a: P,
               lda: I, b: P, ldb: I) }
        }
    };
}

macro_rules! define_cargs {
    ($({ $R:ident, $stem:ident, $precs:tt, ($($arg:ident : $ty:ident),*) })*) => {
        /// One struct per CBLAS routine, generic over the integer `I` and scalar `A` types.
        pub mod cargs {
            #![allow(missing_docs)]
            #[allow(unused_imports)]
            use super::{c_int, P};
            #[allow(dead_code)]
            type E = c_int;
            $(
                #[doc = concat!("The arguments of `cblas_?", stringify!($stem), "`.")]
                #[derive(Debug, Clone, Copy)]
                pub struct $R<I, A> {
                    $(pub $arg: $ty,)*
                }
                impl<I: Copy, A: Copy> $R<I, A> {
                    /// Calls `f`, a function of this prototype.
                    ///
                    /// # Safety
                    /// `f` must be such a function and the arguments satisfy its contract.
                    #[inline(always)]
                    pub unsafe fn invoke(&self, f: P) {
                        // SAFETY: the caller guarantees `f` has exactly this prototype.
                        unsafe {
                            let g: unsafe extern "C" fn($($ty),*) = std::mem::transmute(f);
                            g($(self.$arg),*)
                        }
                    }
                }
            )*
        }
    };
}

__offload_cblas_table!(define_cargs);

/// Generates the exported CBLAS wrappers of the shim: `cblas_?name` (LP64), `cblas_?name64_`
/// (ILP64), `scipy_cblas_?name` and `scipy_cblas_?name64_`.
#[doc(hidden)]
#[macro_export]
macro_rules! __offload_export_cblas {
    ($({ $R:ident, $stem:ident, [$($P:ident $letter:ident $A:ident)*], $args:tt })*) => {
        $(
            $( $crate::__offload_export_cblas!(@conv $R, $P, $letter, $A, $stem, $args); )*
        )*
    };
    (@conv $R:ident, $P:ident, $letter:ident, $A:ident, $stem:ident, $args:tt) => {
        $crate::__offload_export_cblas!(@one $R, $P, $letter, $A, $stem, i32, "cblas_", "", $args);
        $crate::__offload_export_cblas!(@one $R, $P, $letter, $A, $stem, i64, "cblas_", "64_", $args);
        $crate::__offload_export_cblas!(@one $R, $P, $letter, $A, $stem, i32, "scipy_cblas_", "", $args);
        $crate::__offload_export_cblas!(@one $R, $P, $letter, $A, $stem, i64, "scipy_cblas_", "64_", $args);
    };
    (@one $R:ident, $P:ident, $letter:ident, $Aty:ident, $stem:ident, $int:ty, $pre:literal, $suf:literal,
     ($($arg:ident : $ty:ident),*)) => {
        const _: () = {
            #[allow(dead_code)]
            type E = ::std::ffi::c_int;
            #[allow(dead_code)]
            type I = $int;
            #[allow(dead_code)]
            type P = *mut ::std::ffi::c_void;
            #[allow(dead_code)]
            type Cp = *const ::std::ffi::c_void;
            #[allow(dead_code)]
            type A = $Aty;
            static REAL: $crate::interpose::RealFn = $crate::interpose::RealFn::new(
                concat!($pre, stringify!($letter), stringify!($stem), $suf, "\0"),
                concat!(stringify!($letter), stringify!($stem), "_\0"),
            );
            #[export_name = concat!($pre, stringify!($letter), stringify!($stem), $suf)]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn wrapper($($arg: $ty),*) {
                let args = $crate::ffi::cblas::cargs::$R::<I, A> { $($arg),* };
                // SAFETY: the caller follows the CBLAS contract of this symbol.
                unsafe {
                    $crate::interpose::cblas::<_, I>(&REAL, $crate::ops::Precision::$P, args)
                }
            }
        };
    };
}

const ROW_MAJOR: c_int = 101;
const COL_MAJOR: c_int = 102;

fn c_trans(t: c_int) -> Result<Trans, Reason> {
    match t {
        111 => Ok(Trans::No),
        112 => Ok(Trans::Trans),
        113 => Ok(Trans::Conj),
        _ => Err(Reason::InvalidArgs),
    }
}
fn c_uplo(u: c_int) -> Result<Uplo, Reason> {
    match u {
        121 => Ok(Uplo::Upper),
        122 => Ok(Uplo::Lower),
        _ => Err(Reason::InvalidArgs),
    }
}
fn c_side(s: c_int) -> Result<Side, Reason> {
    match s {
        141 => Ok(Side::Left),
        142 => Ok(Side::Right),
        _ => Err(Reason::InvalidArgs),
    }
}
fn c_diag(d: c_int) -> Result<Diag, Reason> {
    match d {
        131 => Ok(Diag::NonUnit),
        132 => Ok(Diag::Unit),
        _ => Err(Reason::InvalidArgs),
    }
}
fn row_major(order: c_int) -> Result<bool, Reason> {
    match order {
        ROW_MAJOR => Ok(true),
        COL_MAJOR => Ok(false),
        _ => Err(Reason::InvalidArgs),
    }
}

fn nonneg<const N: usize>(v: [i64; N]) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    for (o, x) in out.iter_mut().zip(v) {
        *o = u64::try_from(x).ok()?;
    }
    Some(out)
}

impl<I: FInt, A: CScalar> Cblas<I> for cargs::Gemm<I, A> {
    type F = args::Gemm;
    fn shape(&self) -> Option<Shape> {
        let [m, n, k] = nonneg([self.m.to_i64(), self.n.to_i64(), self.k.to_i64()])?;
        Some(Shape::new(m, n, k))
    }
    fn fortran(&self, st: &mut Store<I>) -> Result<args::Gemm, Reason> {
        let (ta, tb) = (c_trans(self.transa)?, c_trans(self.transb)?);
        // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T
        let (ta, tb, m, n, a, lda, b, ldb) = if row_major(self.order)? {
            (tb, ta, self.n, self.m, self.b, self.ldb, self.a, self.lda)
        } else {
            (ta, tb, self.m, self.n, self.a, self.lda, self.b, self.ldb)
        };
        Ok(args::Gemm {
            transa: st.ch(ta.to_char()),
            transb: st.ch(tb.to_char()),
            m: st.int_i64(m.to_i64()),
            n: st.int_i64(n.to_i64()),
            k: st.int_i64(self.k.to_i64()),
            alpha: self.alpha.put(st),
            a,
            lda: st.int_i64(lda.to_i64()),
            b,
            ldb: st.int_i64(ldb.to_i64()),
            beta: self.beta.put(st),
            c: self.c,
            ldc: st.int_i64(self.ldc.to_i64()),
            ..args::Gemm::blank()
        })
    }
    unsafe fn invoke(&self, f: P) {
        // SAFETY: forwarded.
        unsafe { cargs::Gemm::invoke(self, f) }
    }
}

/// symm and hemm: row-major flips the side and the triangle and swaps m and n.
macro_rules! c_sided_mm {
    ($R:ident) => {
        impl<I: FInt, A: CScalar> Cblas<I> for cargs::$R<I, A> {
            type F = args::$R;
            fn shape(&self) -> Option<Shape> {
                let [m, n] = nonneg([self.m.to_i64(), self.n.to_i64()])?;
                // the order of A is m for side Left in either order
                Some(Shape::new(m, n, if self.side == 142 { n } else { m }))
            }
            fn fortran(&self, st: &mut Store<I>) -> Result<args::$R, Reason> {
                let (sd, ul) = (c_side(self.side)?, c_uplo(self.uplo)?);
                let (sd, ul, m, n) = if row_major(self.order)? {
                    (sd.flip(), ul.flip(), self.n, self.m)
                } else {
                    (sd, ul, self.m, self.n)
                };
                Ok(args::$R {
                    side: st.ch(sd.to_char()),
                    uplo: st.ch(ul.to_char()),
                    m: st.int_i64(m.to_i64()),
                    n: st.int_i64(n.to_i64()),
                    alpha: self.alpha.put(st),
                    a: self.a,
                    lda: st.int_i64(self.lda.to_i64()),
                    b: self.b,
                    ldb: st.int_i64(self.ldb.to_i64()),
                    beta: self.beta.put(st),
                    c: self.c,
                    ldc: st.int_i64(self.ldc.to_i64()),
                    ..args::$R::blank()
                })
            }
            unsafe fn invoke(&self, f: P) {
                // SAFETY: forwarded.
                unsafe { cargs::$R::invoke(self, f) }
            }
        }
    };
}
c_sided_mm!(Symm);
c_sided_mm!(Hemm);

/// syrk and herk: row-major flips the triangle and the transpose (to 'T' for syrk, 'C' for
/// herk).
macro_rules! c_rank_k {
    ($R:ident, $other:expr) => {
        impl<I: FInt, A: CScalar> Cblas<I> for cargs::$R<I, A> {
            type F = args::$R;
            fn shape(&self) -> Option<Shape> {
                let [n, k] = nonneg([self.n.to_i64(), self.k.to_i64()])?;
                Some(Shape::new(1, n, k))
            }
            fn fortran(&self, st: &mut Store<I>) -> Result<args::$R, Reason> {
                let (ul, t) = (c_uplo(self.uplo)?, c_trans(self.trans)?);
                let (ul, t) = if row_major(self.order)? {
                    (ul.flip(), if t == Trans::No { $other } else { Trans::No })
                } else {
                    (ul, t)
                };
                Ok(args::$R {
                    uplo: st.ch(ul.to_char()),
                    trans: st.ch(t.to_char()),
                    n: st.int_i64(self.n.to_i64()),
                    k: st.int_i64(self.k.to_i64()),
                    alpha: self.alpha.put(st),
                    a: self.a,
                    lda: st.int_i64(self.lda.to_i64()),
                    beta: self.beta.put(st),
                    c: self.c,
                    ldc: st.int_i64(self.ldc.to_i64()),
                    ..args::$R::blank()
                })
            }
            unsafe fn invoke(&self, f: P) {
                // SAFETY: forwarded.
                unsafe { cargs::$R::invoke(self, f) }
            }
        }
    };
}
c_rank_k!(Syrk, Trans::Trans);
c_rank_k!(Herk, Trans::Conj);

/// trsm and trmm: row-major flips the side and the triangle and swaps m and n.
macro_rules! c_sided_tri {
    ($R:ident) => {
        impl<I: FInt, A: CScalar> Cblas<I> for cargs::$R<I, A> {
            type F = args::$R;
            fn shape(&self) -> Option<Shape> {
                let [m, n] = nonneg([self.m.to_i64(), self.n.to_i64()])?;
                Some(Shape::new(m, n, if self.side == 142 { n } else { m }))
            }
            fn fortran(&self, st: &mut Store<I>) -> Result<args::$R, Reason> {
                let (sd, ul) = (c_side(self.side)?, c_uplo(self.uplo)?);
                let (t, dg) = (c_trans(self.transa)?, c_diag(self.diag)?);
                let (sd, ul, m, n) = if row_major(self.order)? {
                    (sd.flip(), ul.flip(), self.n, self.m)
                } else {
                    (sd, ul, self.m, self.n)
                };
                Ok(args::$R {
                    side: st.ch(sd.to_char()),
                    uplo: st.ch(ul.to_char()),
                    transa: st.ch(t.to_char()),
                    diag: st.ch(dg.to_char()),
                    m: st.int_i64(m.to_i64()),
                    n: st.int_i64(n.to_i64()),
                    alpha: self.alpha.put(st),
                    a: self.a,
                    lda: st.int_i64(self.lda.to_i64()),
                    b: self.b,
                    ldb: st.int_i64(self.ldb.to_i64()),
                    ..args::$R::blank()
                })
            }
            unsafe fn invoke(&self, f: P) {
                // SAFETY: forwarded.
                unsafe { cargs::$R::invoke(self, f) }
            }
        }
    };
}
c_sided_tri!(Trsm);
c_sided_tri!(Trmm);

/// The routine of a CBLAS argument struct.
pub fn routine_of<I: FInt, C: Cblas<I>>() -> Routine {
    <C::F as Prototype>::ROUTINE
}
