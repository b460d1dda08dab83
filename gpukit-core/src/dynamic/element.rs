//! Element types known at run time ([`ElementType`]), NumPy's type promotion between them, and
//! Python-style scalars ([`Scalar`]).
//!
//! The rules are NumPy 2's (NEP 50), checked against NumPy itself by the Python test suite:
//!
//! - two arrays: the smallest type that holds both ([`ElementType::promote`]): `u8 + i32` is
//!   `i32`, `u32 + i32` is `i64`, `u64 + i64` is `f64`, an integer with a float is the float
//!   wide enough for the integer (`u8 + f16` is `f16`, `i32 + f32` is `f64`), `bool` yields to
//!   everything;
//! - an array and a *weak* scalar (a Python `bool`, `int` or `float`): the array's type unless
//!   the scalar's kind is higher (an `int` with a `bool` array gives `i64`, a `float` with an
//!   integer array gives `f64`); an `int` that does not fit an integer array's type is an error
//!   ([`Error::ScalarOutOfRange`]), as NumPy raises `OverflowError`;
//! - a *strong* scalar (a NumPy scalar such as `np.float32(2)`) promotes like an array;
//! - float-only functions (`exp`, `sqrt`, ...) and true division of integers compute in the
//!   smallest float that holds the integer type ([`ElementType::to_float`]: `u8` and `bool` in
//!   `f16`, `i32` and wider in `f64`);
//! - `bfloat16` (not a NumPy type; `ml_dtypes` gives it to NumPy) promotes with `f16` to `f32`
//!   and with integers like `f16`.

use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use half::{bf16, f16};

/// An element type chosen at run time. [`Bool`](ElementType::Bool) is stored as `u8` holding
/// 0 or 1 (the masks of comparisons), and behaves as NumPy's `bool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElementType {
    /// NumPy's `bool` (one byte, 0 or 1).
    Bool,
    /// `uint8`.
    U8,
    /// `int32`.
    I32,
    /// `uint32`.
    U32,
    /// `int64`.
    I64,
    /// `uint64`.
    U64,
    /// `float16`.
    F16,
    /// `bfloat16`.
    BF16,
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

/// The kind of an [`ElementType`], in NumPy's order of promotion (`bool < unsigned, signed <
/// float`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementKind {
    /// `bool`.
    Bool,
    /// Unsigned integers.
    Unsigned,
    /// Signed integers.
    Signed,
    /// Floating point.
    Float,
}

impl ElementType {
    /// Every element type, in a fixed order.
    pub const ALL: [ElementType; 10] = [
        ElementType::Bool,
        ElementType::U8,
        ElementType::I32,
        ElementType::U32,
        ElementType::I64,
        ElementType::U64,
        ElementType::F16,
        ElementType::BF16,
        ElementType::F32,
        ElementType::F64,
    ];

    /// NumPy's name (`"float32"`, `"bool"`, `"bfloat16"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::Bool => "bool",
            ElementType::U8 => "uint8",
            ElementType::I32 => "int32",
            ElementType::U32 => "uint32",
            ElementType::I64 => "int64",
            ElementType::U64 => "uint64",
            ElementType::F16 => "float16",
            ElementType::BF16 => "bfloat16",
            ElementType::F32 => "float32",
            ElementType::F64 => "float64",
        }
    }

    /// The Rust name of the storage type (`"f32"`, `"u8"` for `bool`).
    pub fn rust_name(self) -> &'static str {
        match self {
            ElementType::Bool | ElementType::U8 => "u8",
            ElementType::I32 => "i32",
            ElementType::U32 => "u32",
            ElementType::I64 => "i64",
            ElementType::U64 => "u64",
            ElementType::F16 => "f16",
            ElementType::BF16 => "bf16",
            ElementType::F32 => "f32",
            ElementType::F64 => "f64",
        }
    }

    /// The C type of the storage in kernels (`"float"`, `"unsigned char"` for `bool`).
    pub fn c_name(self) -> &'static str {
        match self {
            ElementType::Bool | ElementType::U8 => <u8 as DType>::NAME,
            ElementType::I32 => <i32 as DType>::NAME,
            ElementType::U32 => <u32 as DType>::NAME,
            ElementType::I64 => <i64 as DType>::NAME,
            ElementType::U64 => <u64 as DType>::NAME,
            ElementType::F16 => <f16 as DType>::NAME,
            ElementType::BF16 => <bf16 as DType>::NAME,
            ElementType::F32 => <f32 as DType>::NAME,
            ElementType::F64 => <f64 as DType>::NAME,
        }
    }

    /// Parses a type name: NumPy's names (`"float32"`, `"int64"`, `"bool"`, `"bfloat16"`), its
    /// one-letter codes and array-protocol strings (`"f4"`, `"<f4"`, `"|u1"`, `"?"`), the
    /// aliases `"float"` (float64), `"int"` (int64), `"half"`, `"double"`, `"single"`, and the
    /// Rust names that are not NumPy codes (`"f32"`, `"i64"`, `"bf16"`; `"u8"` is NumPy's
    /// uint64). `None` for anything else (`"int8"`, `"complex64"`, ...: types
    /// gpukit has no kernels for).
    pub fn parse(name: &str) -> Option<ElementType> {
        let s = name.trim();
        // array-protocol strings: a byte-order mark ('<' little, '|' not applicable, '=' native)
        // then a kind letter and a size; big-endian ('>') data is not what the GPU holds.
        let s = s
            .strip_prefix('<')
            .or_else(|| s.strip_prefix('|'))
            .or_else(|| s.strip_prefix('='))
            .unwrap_or(s);
        Some(match s {
            "bool" | "bool_" | "?" | "b1" => ElementType::Bool,
            "uint8" | "u1" | "B" | "ubyte" => ElementType::U8,
            "int32" | "i4" | "i32" | "intc" => ElementType::I32,
            "uint32" | "u4" | "u32" | "uintc" => ElementType::U32,
            "int64" | "i8" | "i64" | "int" | "int_" | "long" | "longlong" | "intp" | "q" | "l" => {
                ElementType::I64
            }
            // "u8" is NumPy's code for uint64 (8 bytes), not Rust's u8
            "uint64" | "u8" | "u64" | "uint" | "ulong" | "ulonglong" | "uintp" | "Q" | "L" => {
                ElementType::U64
            }
            "float16" | "f2" | "f16" | "half" | "e" => ElementType::F16,
            "bfloat16" | "bf16" => ElementType::BF16,
            "float32" | "f4" | "f32" | "single" | "f" => ElementType::F32,
            "float64" | "f8" | "f64" | "double" | "float" | "d" | "float_" => ElementType::F64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            ElementType::Bool | ElementType::U8 => 1,
            ElementType::F16 | ElementType::BF16 => 2,
            ElementType::I32 | ElementType::U32 | ElementType::F32 => 4,
            ElementType::I64 | ElementType::U64 | ElementType::F64 => 8,
        }
    }

    /// The kind.
    pub fn kind(self) -> ElementKind {
        match self {
            ElementType::Bool => ElementKind::Bool,
            ElementType::U8 | ElementType::U32 | ElementType::U64 => ElementKind::Unsigned,
            ElementType::I32 | ElementType::I64 => ElementKind::Signed,
            _ => ElementKind::Float,
        }
    }

    /// True for the float types.
    pub fn is_float(self) -> bool {
        self.kind() == ElementKind::Float
    }

    /// True for the integer types (not `bool`).
    pub fn is_integer(self) -> bool {
        matches!(self.kind(), ElementKind::Signed | ElementKind::Unsigned)
    }

    /// The element type of the static type `T` (`u8` maps to [`U8`](ElementType::U8)).
    pub fn of<T: DType>() -> ElementType {
        match (T::KIND, std::mem::size_of::<T>(), T::RUST_NAME) {
            (DTypeKind::Float, 2, "bf16") => ElementType::BF16,
            (DTypeKind::Float, 2, _) => ElementType::F16,
            (DTypeKind::Float, 4, _) => ElementType::F32,
            (DTypeKind::Float, _, _) => ElementType::F64,
            (DTypeKind::Signed, 4, _) => ElementType::I32,
            (DTypeKind::Signed, _, _) => ElementType::I64,
            (DTypeKind::Unsigned, 1, _) => ElementType::U8,
            (DTypeKind::Unsigned, 4, _) => ElementType::U32,
            (DTypeKind::Unsigned, _, _) => ElementType::U64,
        }
    }

    /// Bits of an integer type (`bool` counts as 1).
    fn int_bits(self) -> u32 {
        match self {
            ElementType::Bool => 1,
            ElementType::U8 => 8,
            ElementType::I32 | ElementType::U32 => 32,
            _ => 64,
        }
    }

    /// NumPy's result type of an operation between arrays of types `a` and `b`.
    pub fn promote(a: ElementType, b: ElementType) -> ElementType {
        use ElementKind as K;
        use ElementType as E;
        if a == b {
            return a;
        }
        match (a.kind(), b.kind()) {
            (K::Bool, _) => b,
            (_, K::Bool) => a,
            (K::Float, K::Float) => match (a, b) {
                (E::F16, E::BF16) | (E::BF16, E::F16) => E::F32,
                _ => {
                    if a.itemsize() >= b.itemsize() {
                        a
                    } else {
                        b
                    }
                }
            },
            (K::Float, _) => Self::float_holding(a, b),
            (_, K::Float) => Self::float_holding(b, a),
            (ka, kb) if ka == kb => {
                if a.int_bits() >= b.int_bits() {
                    a
                } else {
                    b
                }
            }
            _ => {
                // one signed, one unsigned: a signed type wider than the unsigned one
                let (s, u) = if a.kind() == K::Signed {
                    (a, b)
                } else {
                    (b, a)
                };
                if s.int_bits() > u.int_bits() {
                    s
                } else if u.int_bits() < 32 {
                    E::I32
                } else if u.int_bits() < 64 {
                    E::I64
                } else {
                    E::F64
                }
            }
        }
    }

    /// The float type that results from float `f` with integer (or bool) `i`.
    fn float_holding(f: ElementType, i: ElementType) -> ElementType {
        let needed = i.to_float();
        match (f, needed) {
            (ElementType::BF16, ElementType::F16) => ElementType::BF16,
            (ElementType::BF16, other) => other,
            _ => Self::promote(f, needed),
        }
    }

    /// The type float-only functions and true division compute in: floats keep their type,
    /// `bool` and `u8` give `f16`, wider integers `f64` (NumPy's smallest safe float).
    pub fn to_float(self) -> ElementType {
        match self {
            ElementType::Bool | ElementType::U8 => ElementType::F16,
            ElementType::I32 | ElementType::U32 | ElementType::I64 | ElementType::U64 => {
                ElementType::F64
            }
            f => f,
        }
    }

    /// The result type of an operation between an array of this type and `scalar`.
    pub fn with_scalar(self, scalar: &Scalar) -> Result<ElementType> {
        if let Some(strong) = scalar.dtype {
            return Ok(Self::promote(self, strong));
        }
        let t = match (scalar.value, self.kind()) {
            (ScalarValue::Bool(_), _) => self,
            (ScalarValue::Int(_), ElementKind::Bool) => ElementType::I64,
            (ScalarValue::Int(_), _) => self,
            (ScalarValue::Float(_), ElementKind::Float) => self,
            (ScalarValue::Float(_), _) => ElementType::F64,
        };
        if let (ScalarValue::Int(v), true) = (scalar.value, t.is_integer()) {
            if !t.holds(v) {
                return Err(Error::ScalarOutOfRange {
                    value: v.to_string(),
                    dtype: t.name(),
                });
            }
        }
        Ok(t)
    }

    /// Whether the integer `v` is a value of this integer type (floats and `bool` hold every
    /// integer for this purpose: they convert).
    pub fn holds(self, v: i128) -> bool {
        match self {
            ElementType::U8 => (0..=u8::MAX as i128).contains(&v),
            ElementType::I32 => (i32::MIN as i128..=i32::MAX as i128).contains(&v),
            ElementType::U32 => (0..=u32::MAX as i128).contains(&v),
            ElementType::I64 => (i64::MIN as i128..=i64::MAX as i128).contains(&v),
            ElementType::U64 => (0..=u64::MAX as i128).contains(&v),
            _ => true,
        }
    }

    /// The result type of `sum` and `prod`: integers and `bool` widen to 64 bits (signed for
    /// `bool` and signed types), floats keep their type.
    pub fn sum_type(self) -> ElementType {
        match self.kind() {
            ElementKind::Bool | ElementKind::Signed => ElementType::I64,
            ElementKind::Unsigned => ElementType::U64,
            ElementKind::Float => self,
        }
    }

    /// The result type of `mean`, `var` and `std`: `f64` for integers and `bool`.
    pub fn mean_type(self) -> ElementType {
        if self.is_float() {
            self
        } else {
            ElementType::F64
        }
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The value of a [`Scalar`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarValue {
    /// `True` / `False`.
    Bool(bool),
    /// An integer (Python's are unbounded; this range covers every `i64` and `u64`).
    Int(i128),
    /// A float.
    Float(f64),
}

/// A scalar operand: a weak Python-style value, or a strong one of a given element type (a
/// NumPy scalar), which promotes like an array.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scalar {
    /// The value.
    pub value: ScalarValue,
    /// The element type of a strong scalar; `None` for a weak one.
    pub dtype: Option<ElementType>,
}

impl Scalar {
    /// A weak `bool`.
    pub fn bool(v: bool) -> Scalar {
        Scalar {
            value: ScalarValue::Bool(v),
            dtype: None,
        }
    }
    /// A weak integer.
    pub fn int(v: i128) -> Scalar {
        Scalar {
            value: ScalarValue::Int(v),
            dtype: None,
        }
    }
    /// A weak float.
    pub fn float(v: f64) -> Scalar {
        Scalar {
            value: ScalarValue::Float(v),
            dtype: None,
        }
    }
    /// The same value, strong, of element type `t`.
    pub fn typed(self, t: ElementType) -> Scalar {
        Scalar {
            value: self.value,
            dtype: Some(t),
        }
    }

    /// The value as `f64`.
    pub fn to_f64(&self) -> f64 {
        match self.value {
            ScalarValue::Bool(b) => b as u8 as f64,
            ScalarValue::Int(v) => v as f64,
            ScalarValue::Float(v) => v,
        }
    }

    /// The value converted to `T` (integers exactly when they fit, wrapping as C does
    /// otherwise; floats to integers truncate; `bool` as 0 or 1).
    pub fn to<T: DType>(&self) -> T {
        match self.value {
            ScalarValue::Bool(b) => T::from_i64(b as i64),
            ScalarValue::Int(v) if T::is_float() => T::from_f64(v as f64),
            ScalarValue::Int(v) => T::from_i64(v as i64),
            ScalarValue::Float(v) => {
                if T::is_float() {
                    T::from_f64(v)
                } else {
                    T::from_i64(v as i64)
                }
            }
        }
    }

    /// The value as a `bool` element (nonzero, NaN included, is true).
    pub fn truth(&self) -> bool {
        match self.value {
            ScalarValue::Bool(b) => b,
            ScalarValue::Int(v) => v != 0,
            ScalarValue::Float(v) => v != 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ElementType as E;

    #[test]
    fn promotion_matches_numpy() {
        // (a, b, numpy.result_type(a, b)), read off NumPy 2.4
        let cases = [
            (E::U8, E::I32, E::I32),
            (E::U32, E::I32, E::I64),
            (E::U64, E::I64, E::F64),
            (E::U8, E::F16, E::F16),
            (E::I32, E::F16, E::F64),
            (E::I32, E::F32, E::F64),
            (E::U8, E::F32, E::F32),
            (E::I64, E::F32, E::F64),
            (E::Bool, E::U8, E::U8),
            (E::Bool, E::F16, E::F16),
            (E::F16, E::F32, E::F32),
            (E::F32, E::F64, E::F64),
            (E::U8, E::U32, E::U32),
            (E::I32, E::I64, E::I64),
            (E::U32, E::I64, E::I64),
            (E::U8, E::I64, E::I64),
            (E::F16, E::BF16, E::F32),
            (E::BF16, E::U8, E::BF16),
            (E::BF16, E::I32, E::F64),
        ];
        for (a, b, want) in cases {
            assert_eq!(E::promote(a, b), want, "{a} + {b}");
            assert_eq!(E::promote(b, a), want, "{b} + {a}");
        }
        for t in E::ALL {
            assert_eq!(E::promote(t, t), t);
        }
    }

    #[test]
    fn weak_scalars_follow_nep50() {
        assert_eq!(E::I32.with_scalar(&Scalar::float(1.5)).unwrap(), E::F64);
        assert_eq!(E::I32.with_scalar(&Scalar::int(2)).unwrap(), E::I32);
        assert_eq!(E::F16.with_scalar(&Scalar::float(2.0)).unwrap(), E::F16);
        assert_eq!(E::Bool.with_scalar(&Scalar::int(1)).unwrap(), E::I64);
        assert_eq!(E::Bool.with_scalar(&Scalar::bool(true)).unwrap(), E::Bool);
        assert_eq!(E::U8.with_scalar(&Scalar::int(255)).unwrap(), E::U8);
        let e = E::U8.with_scalar(&Scalar::int(300)).unwrap_err();
        assert!(matches!(e, Error::ScalarOutOfRange { .. }), "{e}");
        assert!(e.to_string().contains("300") && e.to_string().contains("uint8"));
        assert!(E::U64.with_scalar(&Scalar::int(-1)).is_err());
        assert!(E::U64.with_scalar(&Scalar::int(u64::MAX as i128)).is_ok());
        // strong scalars promote as arrays
        let s = Scalar::int(3).typed(E::I64);
        assert_eq!(E::U8.with_scalar(&s).unwrap(), E::I64);
        assert_eq!(
            E::F32
                .with_scalar(&Scalar::float(2.0).typed(E::F64))
                .unwrap(),
            E::F64
        );
    }

    #[test]
    fn float_and_reduction_results() {
        assert_eq!(E::U8.to_float(), E::F16);
        assert_eq!(E::Bool.to_float(), E::F16);
        assert_eq!(E::I32.to_float(), E::F64);
        assert_eq!(E::F32.to_float(), E::F32);
        assert_eq!(E::Bool.sum_type(), E::I64);
        assert_eq!(E::U8.sum_type(), E::U64);
        assert_eq!(E::I32.sum_type(), E::I64);
        assert_eq!(E::F16.sum_type(), E::F16);
        assert_eq!(E::I32.mean_type(), E::F64);
        assert_eq!(E::F16.mean_type(), E::F16);
    }

    #[test]
    fn names_parse_back() {
        for t in E::ALL {
            assert_eq!(E::parse(t.name()), Some(t));
            if t.rust_name() != "u8" {
                assert_eq!(
                    E::parse(t.rust_name()).map(|p| p.itemsize()),
                    Some(t.itemsize())
                );
            }
        }
        assert_eq!(E::parse("<f4"), Some(E::F32));
        assert_eq!(E::parse("|u1"), Some(E::U8));
        assert_eq!(E::parse("|b1"), Some(E::Bool));
        assert_eq!(E::parse("<i8"), Some(E::I64));
        assert_eq!(E::parse("<u8"), Some(E::U64));
        assert_eq!(E::parse("u8"), Some(E::U64));
        assert_eq!(E::parse("float"), Some(E::F64));
        assert_eq!(E::parse("int8"), None);
        assert_eq!(E::parse("complex64"), None);
        assert_eq!(E::parse(">f4"), None);
        assert_eq!(E::of::<f32>(), E::F32);
        assert_eq!(E::of::<bf16>(), E::BF16);
        assert_eq!(E::of::<u8>(), E::U8);
        assert_eq!(E::of::<u64>(), E::U64);
    }

    #[test]
    fn scalar_conversion() {
        assert_eq!(Scalar::int(-1).to::<u64>(), u64::MAX);
        assert_eq!(Scalar::int(u64::MAX as i128).to::<u64>(), u64::MAX);
        assert_eq!(Scalar::float(2.75).to::<i32>(), 2);
        assert_eq!(Scalar::bool(true).to::<f32>(), 1.0);
        assert!(Scalar::float(f64::NAN).truth());
        assert!(!Scalar::int(0).truth());
    }
}
