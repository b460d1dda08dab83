//! Element types: f32, f64, f16, bf16, i32, u32, i64, u8.

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

/// An element type of a [`GpuArray`](crate::GpuArray). Implemented for exactly the eight types
/// the built-in kernels are compiled for (sealed).
pub trait DType:
    bytemuck::Pod
    + Copy
    + Send
    + Sync
    + 'static
    + std::fmt::Debug
    + PartialOrd
    + gpukit_jit::Element
    + sealed::Sealed
{
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
}

macro_rules! float_dtype {
    ($t:ty, $c:literal, $r:literal, |$x:ident| $to:expr, |$v:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl DType for $t {
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
        }
    };
}

float_dtype!(f32, "float", "f32", |x| x as f64, |v| v as f32);
float_dtype!(f64, "double", "f64", |x| x, |v| v);
float_dtype!(f16, "__half", "f16", |x| x.to_f64(), |v| f16::from_f64(v));
float_dtype!(bf16, "__nv_bfloat16", "bf16", |x| x.to_f64(), |v| {
    bf16::from_f64(v)
});

macro_rules! int_dtype {
    ($t:ty, $c:literal, $r:literal, $kind:ident) => {
        impl sealed::Sealed for $t {}
        impl DType for $t {
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
        }
    };
}

int_dtype!(i32, "int", "i32", Signed);
int_dtype!(u32, "unsigned int", "u32", Unsigned);
int_dtype!(i64, "long long", "i64", Signed);
int_dtype!(u8, "unsigned char", "u8", Unsigned);

/// The C names of all supported element types, in a fixed order.
pub const ALL_DTYPE_NAMES: [&str; 8] = [
    "float",
    "double",
    "__half",
    "__nv_bfloat16",
    "int",
    "unsigned int",
    "long long",
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
    fn scalar_args_keep_i64_exact() {
        let big = (1i64 << 60) + 1;
        assert_eq!(big.scalar_args(), (0.0, big));
        assert_eq!(2.5f32.scalar_args(), (2.5, 0));
        assert_eq!(f16::from_f64(0.5).to_f64(), 0.5);
        assert_eq!(u8::from_i64(257), 1);
    }
}
