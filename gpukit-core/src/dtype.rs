//! Element types: f32, f64, f16, bf16, i32, u32, i64, u64, u8, with NumPy's result types of
//! reductions ([`DType::Sum`]: integer sums widen to 64 bits; [`DType::Float`]: integer means
//! and variances are f64).

use half::{bf16, f16};

/// The kind of an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DTypeKind {
    /// IEEE floating point (f16, bf16, f32, f64).
    Float,
    /// Signed integer.
    Signed,
    /// Unsigned integer.
    Unsigned,
}

mod sealed {
    pub trait Sealed {}
}

/// An element type of a [`GpuArray`](crate::GpuArray). Implemented for exactly the nine types
/// the built-in kernels are compiled for (sealed).
pub trait DType:
    bytemuck::Pod
    + Copy
    + Send
    + Sync
    + 'static
    + std::fmt::Debug
    + std::fmt::Display
    + PartialOrd
    + gpukit_jit::Element
    + sealed::Sealed
{
    /// The result type of `sum`, `prod` and `cumsum`, as NumPy's: i32 and i64 sum to i64, u8,
    /// u32 and u64 to u64; floats keep their type.
    type Sum: DType;
    /// The result type of `mean`, `var` and `std`: f64 for integers; floats keep their type.
    type Float: DType;
    /// The accumulator of scans (f32 for f16 / bf16, else [`Sum`](Self::Sum)).
    type ScanAcc: DType;
    /// The C type name used in kernels: `float`, `double`, `__half`, `__nv_bfloat16`, `int`,
    /// `unsigned int`, `long long`, `unsigned char`.
    const NAME: &'static str;
    /// The Rust name (`f32`, `bf16`, ...), used in messages.
    const RUST_NAME: &'static str;
    /// Float, signed or unsigned.
    const KIND: DTypeKind;
    /// Converts to f64 (exact except for i64/u64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from f64 (rounding to nearest for floats, saturating for integers).
    fn from_f64(v: f64) -> Self;
    /// Converts to i64 (truncating floats).
    fn to_i64(self) -> i64;
    /// Converts from i64 (wrapping for narrower integers).
    fn from_i64(v: i64) -> Self;
    /// Zero.
    fn zero() -> Self {
        Self::from_i64(0)
    }
    /// One.
    fn one() -> Self {
        Self::from_i64(1)
    }
    /// True for the floating-point types.
    fn is_float() -> bool {
        Self::KIND == DTypeKind::Float
    }
    /// The scalar as the pair of kernel arguments the built-in kernels take (`double`, `long
    /// long`): floats travel as f64, integers exactly as i64.
    fn scalar_args(self) -> (f64, i64) {
        if Self::is_float() {
            (self.to_f64(), 0)
        } else {
            (0.0, self.to_i64())
        }
    }
    /// Wraps an array of this type as a run-time typed
    /// [`DynArray`](crate::dynamic::DynArray) (`u8` as `uint8`).
    fn into_dyn(a: crate::GpuArray<Self>) -> crate::dynamic::DynArray;
}

macro_rules! float_dtype {
    ($t:ty, $v_:ident, $c:literal, $r:literal, $acc:ty, |$x:ident| $to:expr, |$v:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl DType for $t {
            type Sum = $t;
            type Float = $t;
            type ScanAcc = $acc;
            const NAME: &'static str = $c;
            const RUST_NAME: &'static str = $r;
            const KIND: DTypeKind = DTypeKind::Float;
            fn to_f64(self) -> f64 {
                let $x = self;
                $to
            }
            fn from_f64(v: f64) -> Self {
                let $v = v;
                $from
            }
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            fn from_i64(v: i64) -> Self {
                Self::from_f64(v as f64)
            }
            fn into_dyn(a: crate::GpuArray<Self>) -> crate::dynamic::DynArray {
                crate::dynamic::DynArray::$v_(a)
            }
        }
    };
}

float_dtype!(f32, F32, "float", "f32", f32, |x| x as f64, |v| v as f32);
float_dtype!(f64, F64, "double", "f64", f64, |x| x, |v| v);
float_dtype!(f16, F16, "__half", "f16", f32, |x| x.to_f64(), |v| {
    f16::from_f64(v)
});
float_dtype!(
    bf16,
    BF16,
    "__nv_bfloat16",
    "bf16",
    f32,
    |x| x.to_f64(),
    |v| bf16::from_f64(v)
);

macro_rules! int_dtype {
    ($t:ty, $v_:ident, $c:literal, $r:literal, $kind:ident, $sum:ty) => {
        impl sealed::Sealed for $t {}
        impl DType for $t {
            type Sum = $sum;
            type Float = f64;
            type ScanAcc = $sum;
            const NAME: &'static str = $c;
            const RUST_NAME: &'static str = $r;
            const KIND: DTypeKind = DTypeKind::$kind;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn into_dyn(a: crate::GpuArray<Self>) -> crate::dynamic::DynArray {
                crate::dynamic::DynArray::$v_(a)
            }
        }
    };
}

int_dtype!(i32, I32, "int", "i32", Signed, i64);
int_dtype!(u32, U32, "unsigned int", "u32", Unsigned, u64);
int_dtype!(i64, I64, "long long", "i64", Signed, i64);
int_dtype!(u64, U64, "unsigned long long", "u64", Unsigned, u64);
int_dtype!(u8, U8, "unsigned char", "u8", Unsigned, u64);

/// The C names of all supported element types, in a fixed order.
pub const ALL_DTYPE_NAMES: [&str; 9] = [
    "float",
    "double",
    "__half",
    "__nv_bfloat16",
    "int",
    "unsigned int",
    "long long",
    "unsigned long long",
    "unsigned char",
];

/// Kind of the element type with this C name.
pub(crate) fn kind_of(name: &str) -> DTypeKind {
    match name {
        "float" | "double" | "__half" | "__nv_bfloat16" => DTypeKind::Float,
        "int" | "long long" => DTypeKind::Signed,
        _ => DTypeKind::Unsigned,
    }
}

/// The C name of the sum / product / scan-output type of the element type `name` (NumPy's
/// widening: see [`DType::Sum`]).
pub fn sum_name(name: &str) -> &'static str {
    match kind_of(name) {
        DTypeKind::Float => float_name(name),
        DTypeKind::Signed => "long long",
        DTypeKind::Unsigned => "unsigned long long",
    }
}

fn float_name(name: &str) -> &'static str {
    ALL_DTYPE_NAMES
        .iter()
        .find(|n| **n == name)
        .copied()
        .unwrap_or("double")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds() {
        assert_eq!(<f32 as DType>::NAME, "float");
        assert_eq!(<bf16 as DType>::NAME, "__nv_bfloat16");
        assert_eq!(<u8 as DType>::KIND, DTypeKind::Unsigned);
        assert_eq!(<i64 as DType>::KIND, DTypeKind::Signed);
        for n in ALL_DTYPE_NAMES {
            assert_eq!(
                kind_of(n) == DTypeKind::Float,
                n.contains("float") || n.contains("half") || n == "double" || n.contains("bfloat")
            );
        }
    }

    #[test]
    fn result_types_widen_as_numpy() {
        fn sum_of<T: DType>() -> &'static str {
            <T::Sum as DType>::NAME
        }
        fn float_of<T: DType>() -> &'static str {
            <T::Float as DType>::NAME
        }
        assert_eq!(sum_of::<i32>(), "long long");
        assert_eq!(sum_of::<u8>(), "unsigned long long");
        assert_eq!(sum_of::<u32>(), "unsigned long long");
        assert_eq!(sum_of::<f16>(), "__half");
        assert_eq!(float_of::<i64>(), "double");
        assert_eq!(float_of::<bf16>(), "__nv_bfloat16");
        for n in ALL_DTYPE_NAMES {
            assert!(ALL_DTYPE_NAMES.contains(&sum_name(n)), "{n}");
        }
        assert_eq!(sum_name("int"), "long long");
        assert_eq!(sum_name("__half"), "__half");
    }

    #[test]
    fn scalar_args_keep_i64_exact() {
        let big = (1i64 << 60) + 1;
        assert_eq!(big.scalar_args(), (0.0, big));
        assert_eq!(2.5f32.scalar_args(), (2.5, 0));
        assert_eq!(f16::from_f64(0.5).to_f64(), 0.5);
        assert_eq!(u8::from_i64(257), 1);
    }
}
