//! Elementwise operations of [`DynArray`] with NumPy's promotion and result types.
//!
//! An operand is an array or a scalar ([`Operand`]); binary operations take one on each side,
//! so `2 - a` and `a - 2` are the same call with the sides swapped. The result type is
//! [`ElementType::promote`] of two arrays or [`ElementType::with_scalar`] of an array and a
//! scalar; true division of integers gives `float64`; float-only functions compute in
//! [`ElementType::to_float`]. `bool` behaves as NumPy's: `+` / `maximum` / `|` are logical or,
//! `*` / `minimum` / `&` logical and, `^` logical xor, `-` and unary `-` are errors (NumPy
//! raises `TypeError` for them), `~` is logical not.
//!
//! In-place forms ([`arith_inplace`]) compute in the promoted type and store into the target
//! under NumPy's `same_kind` rule: `int_array += 1.5` is an error, `float32_array += float64`
//! is not.

use super::{for_type, mismatch, DynArray, ElementKind, ElementType, Scalar};
use crate::array::ops::{BinaryOp, CompareOp, LogicalOp, Predicate, UnaryOp};
use crate::custom::{ElementwiseKernel, KArg};
use crate::error::{Error, Result};

/// One side of a binary operation.
#[derive(Debug, Clone, Copy)]
pub enum Operand<'a> {
    /// An array.
    Array(&'a DynArray),
    /// A scalar (broadcast).
    Scalar(Scalar),
}

impl<'a> From<&'a DynArray> for Operand<'a> {
    fn from(a: &'a DynArray) -> Self {
        Operand::Array(a)
    }
}

impl From<Scalar> for Operand<'_> {
    fn from(s: Scalar) -> Self {
        Operand::Scalar(s)
    }
}

/// The arithmetic of NumPy's operators and ufuncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arith {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (`numpy.true_divide`: integers give `float64`)
    TrueDivide,
    /// `//` (`numpy.floor_divide`, NumPy's rounding of float quotients; integers divided by 0
    /// give 0)
    FloorDivide,
    /// `%` (`numpy.remainder`: the sign of the divisor)
    Remainder,
    /// `**`
    Power,
    /// `numpy.maximum` (NaN propagates)
    Maximum,
    /// `numpy.minimum`
    Minimum,
    /// `&`
    BitAnd,
    /// `|`
    BitOr,
    /// `^`
    BitXor,
}

impl Arith {
    /// NumPy's ufunc name.
    pub fn name(self) -> &'static str {
        match self {
            Arith::Add => "add",
            Arith::Sub => "subtract",
            Arith::Mul => "multiply",
            Arith::TrueDivide => "true_divide",
            Arith::FloorDivide => "floor_divide",
            Arith::Remainder => "remainder",
            Arith::Power => "power",
            Arith::Maximum => "maximum",
            Arith::Minimum => "minimum",
            Arith::BitAnd => "bitwise_and",
            Arith::BitOr => "bitwise_or",
            Arith::BitXor => "bitwise_xor",
        }
    }

    /// The typed layer's operation (none for floor division, which has its own kernel).
    fn binary_op(self) -> Option<BinaryOp> {
        Some(match self {
            Arith::Add => BinaryOp::Add,
            Arith::Sub => BinaryOp::Sub,
            Arith::Mul => BinaryOp::Mul,
            Arith::TrueDivide => BinaryOp::Div,
            Arith::Remainder => BinaryOp::Mod,
            Arith::Power => BinaryOp::Pow,
            Arith::Maximum => BinaryOp::Maximum,
            Arith::Minimum => BinaryOp::Minimum,
            Arith::BitAnd => BinaryOp::BitAnd,
            Arith::BitOr => BinaryOp::BitOr,
            Arith::BitXor => BinaryOp::BitXor,
            Arith::FloorDivide => return None,
        })
    }

    /// What the operation means between two `bool`s: a logical operation, or an error.
    fn on_bool(self) -> Result<LogicalOp> {
        match self {
            Arith::Add | Arith::Maximum | Arith::BitOr => Ok(LogicalOp::Or),
            Arith::Mul | Arith::Minimum | Arith::BitAnd => Ok(LogicalOp::And),
            Arith::BitXor => Ok(LogicalOp::Xor),
            // NumPy refuses it too (TypeError); the message says what to use instead
            Arith::Sub => Err(Error::UnsupportedDType {
                op: "subtract (use bitwise_xor or logical_xor for bool)".into(),
                dtype: "bool",
            }),
            _ => Err(Error::UnsupportedDType {
                op: self.name().to_string(),
                dtype: "bool",
            }),
        }
    }
}

/// The element type of an operation between `lhs` and `rhs` (at least one an array).
pub fn result_type(lhs: &Operand<'_>, rhs: &Operand<'_>) -> Result<ElementType> {
    match (lhs, rhs) {
        (Operand::Array(a), Operand::Array(b)) => Ok(ElementType::promote(a.dtype(), b.dtype())),
        (Operand::Array(a), Operand::Scalar(s)) | (Operand::Scalar(s), Operand::Array(a)) => {
            a.dtype().with_scalar(s)
        }
        (Operand::Scalar(_), Operand::Scalar(_)) => Err(Error::invalid(
            "elementwise operation",
            "needs at least one array operand",
        )),
    }
}

/// `lhs OP rhs` with NumPy's promotion, broadcasting and result type.
pub fn arith(op: Arith, lhs: Operand<'_>, rhs: Operand<'_>) -> Result<DynArray> {
    let mut t = result_type(&lhs, &rhs)?;
    if op == Arith::TrueDivide && !t.is_float() {
        t = ElementType::F64;
    }
    if t == ElementType::Bool {
        let lop = op.on_bool()?;
        return logical(lop, lhs, rhs);
    }
    if op == Arith::FloorDivide {
        return floor_divide(t, lhs, rhs);
    }
    let bop = op
        .binary_op()
        .ok_or_else(|| Error::invalid(op.name(), "no kernel"))?;
    if !bop.supports(kind_of(t)) {
        return Err(Error::UnsupportedDType {
            op: op.name().to_string(),
            dtype: t.name(),
        });
    }
    match (lhs, rhs) {
        (Operand::Array(a), Operand::Array(b)) => {
            let (a, b) = (a.to_type(t)?, b.to_type(t)?);
            same_pair(op.name(), &a, &b, bop)
        }
        (Operand::Array(a), Operand::Scalar(s)) => scalar_op(&a.to_type(t)?, bop, &s, false),
        (Operand::Scalar(s), Operand::Array(a)) => scalar_op(&a.to_type(t)?, bop, &s, true),
        (Operand::Scalar(_), Operand::Scalar(_)) => Err(Error::invalid(
            op.name(),
            "needs at least one array operand",
        )),
    }
}

/// `target OP= rhs`: computed in the promoted type and stored into `target` (through its
/// strides) when NumPy's `same_kind` rule allows the result type back into the target's.
pub fn arith_inplace(op: Arith, target: &DynArray, rhs: Operand<'_>) -> Result<()> {
    let r = arith(op, Operand::Array(target), rhs)?;
    if !same_kind(r.dtype(), target.dtype()) {
        return Err(Error::invalid(
            op.name(),
            format!(
                "cannot store the {} result in the {} array in place (NumPy's same_kind rule); \
                 write `a = a {} b` to get a new array",
                r.dtype(),
                target.dtype(),
                symbol(op)
            ),
        ));
    }
    target.assign(&r)
}

fn symbol(op: Arith) -> &'static str {
    match op {
        Arith::Add => "+",
        Arith::Sub => "-",
        Arith::Mul => "*",
        Arith::TrueDivide => "/",
        Arith::FloorDivide => "//",
        Arith::Remainder => "%",
        Arith::Power => "**",
        Arith::BitAnd => "&",
        Arith::BitOr => "|",
        Arith::BitXor => "^",
        Arith::Maximum | Arith::Minimum => "op",
    }
}

/// NumPy's `can_cast(from, to, "same_kind")`.
pub fn same_kind(from: ElementType, to: ElementType) -> bool {
    if from == to || ElementType::promote(from, to) == to {
        return true;
    }
    use ElementKind as K;
    matches!(
        (from.kind(), to.kind()),
        (K::Bool, _)
            | (K::Float, K::Float)
            | (K::Signed, K::Signed)
            | (K::Unsigned, K::Unsigned)
            | (K::Unsigned, K::Signed)
            | (K::Signed | K::Unsigned, K::Float)
    )
}

fn kind_of(t: ElementType) -> crate::dtype::DTypeKind {
    match t.kind() {
        ElementKind::Float => crate::dtype::DTypeKind::Float,
        ElementKind::Signed => crate::dtype::DTypeKind::Signed,
        _ => crate::dtype::DTypeKind::Unsigned,
    }
}

/// `a OP b` for two arrays of one element type.
fn same_pair(name: &str, a: &DynArray, b: &DynArray, op: BinaryOp) -> Result<DynArray> {
    match (a, b) {
        (DynArray::U8(x), DynArray::U8(y)) => x.binary(op, y).map(DynArray::U8),
        (DynArray::I32(x), DynArray::I32(y)) => x.binary(op, y).map(DynArray::I32),
        (DynArray::U32(x), DynArray::U32(y)) => x.binary(op, y).map(DynArray::U32),
        (DynArray::I64(x), DynArray::I64(y)) => x.binary(op, y).map(DynArray::I64),
        (DynArray::U64(x), DynArray::U64(y)) => x.binary(op, y).map(DynArray::U64),
        (DynArray::F16(x), DynArray::F16(y)) => x.binary(op, y).map(DynArray::F16),
        (DynArray::BF16(x), DynArray::BF16(y)) => x.binary(op, y).map(DynArray::BF16),
        (DynArray::F32(x), DynArray::F32(y)) => x.binary(op, y).map(DynArray::F32),
        (DynArray::F64(x), DynArray::F64(y)) => x.binary(op, y).map(DynArray::F64),
        _ => Err(mismatch(name, a, b)),
    }
}

/// `a OP s` (or `s OP a`) where `a` already has the result type.
fn scalar_op(a: &DynArray, op: BinaryOp, s: &Scalar, scalar_left: bool) -> Result<DynArray> {
    match a {
        DynArray::Bool(_) => Err(Error::UnsupportedDType {
            op: op.name().to_string(),
            dtype: "bool",
        }),
        DynArray::U8(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::U8),
        DynArray::I32(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::I32),
        DynArray::U32(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::U32),
        DynArray::I64(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::I64),
        DynArray::U64(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::U64),
        DynArray::F16(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::F16),
        DynArray::BF16(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::BF16),
        DynArray::F32(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::F32),
        DynArray::F64(x) => x.binary_scalar(op, s.to(), scalar_left).map(DynArray::F64),
    }
}

/// A 0-dimensional array holding `s` as element type `t` (for operations that take arrays
/// only).
fn scalar_array(like: &DynArray, s: &Scalar, t: ElementType) -> Result<DynArray> {
    DynArray::full(like.device(), &[], t, s)
}

/// The array operand of a pair, for the device of a scalar's array.
fn some_array<'a>(lhs: &Operand<'a>, rhs: &Operand<'a>) -> Result<&'a DynArray> {
    match (lhs, rhs) {
        (Operand::Array(a), _) | (_, Operand::Array(a)) => Ok(a),
        _ => Err(Error::invalid(
            "elementwise operation",
            "needs at least one array operand",
        )),
    }
}

/// Both operands as arrays of type `t` (scalars as 0-dimensional arrays).
fn both_arrays(
    lhs: &Operand<'_>,
    rhs: &Operand<'_>,
    t: ElementType,
) -> Result<(DynArray, DynArray)> {
    let like = some_array(lhs, rhs)?;
    let conv = |o: &Operand<'_>| -> Result<DynArray> {
        match o {
            Operand::Array(a) => a.to_type(t),
            Operand::Scalar(s) => scalar_array(like, s, t),
        }
    };
    Ok((conv(lhs)?, conv(rhs)?))
}

/// Device helpers for `floor_divide`: NumPy's rounding for floats (`npy_divmod`), floor
/// division for integers with 0 for a zero divisor and wrapping for `MIN // -1`.
const FLOOR_DIVIDE_PREAMBLE: &str = r#"
template <typename F> __device__ __forceinline__ F gk_floordiv_float(F a, F b) {
    if (b == (F)0) return a / b;
    F mod = fmod(a, b);
    F div = (a - mod) / b;
    if (mod != (F)0) {
        if ((b < (F)0) != (mod < (F)0)) div -= (F)1;
    }
    F fl;
    if (div != (F)0) {
        fl = floor(div);
        if (div - fl > (F)0.5) fl += (F)1;
    } else {
        fl = copysign((F)0, a / b);
    }
    return fl;
}
__device__ __forceinline__ float gk_floordiv(float a, float b) { return gk_floordiv_float<float>(a, b); }
__device__ __forceinline__ double gk_floordiv(double a, double b) { return gk_floordiv_float<double>(a, b); }
template <typename S, typename U> __device__ __forceinline__ S gk_floordiv_signed(S a, S b) {
    if (b == 0) return 0;
    if (b == (S)-1) return (S)((U)0 - (U)a);
    S q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
__device__ __forceinline__ int gk_floordiv(int a, int b) { return gk_floordiv_signed<int, unsigned int>(a, b); }
__device__ __forceinline__ long long gk_floordiv(long long a, long long b) { return gk_floordiv_signed<long long, unsigned long long>(a, b); }
__device__ __forceinline__ unsigned char gk_floordiv(unsigned char a, unsigned char b) { return b ? (unsigned char)(a / b) : (unsigned char)0; }
__device__ __forceinline__ unsigned int gk_floordiv(unsigned int a, unsigned int b) { return b ? a / b : 0u; }
__device__ __forceinline__ unsigned long long gk_floordiv(unsigned long long a, unsigned long long b) { return b ? a / b : 0ull; }
"#;

fn floor_divide(t: ElementType, lhs: Operand<'_>, rhs: Operand<'_>) -> Result<DynArray> {
    let k = ElementwiseKernel::new("T a, T b", "T z", "z = gk_floordiv(a, b);", "floor_divide")?
        .with_preamble(FLOOR_DIVIDE_PREAMBLE);
    let conv = |o: &Operand<'_>| -> Result<Option<DynArray>> {
        match o {
            Operand::Array(a) => a.to_type(t).map(Some),
            Operand::Scalar(_) => Ok(None),
        }
    };
    let (a, b) = (conv(&lhs)?, conv(&rhs)?);
    let scalar = |o: &Operand<'_>| -> KArg<'static> {
        match o {
            Operand::Scalar(s) => for_type!(t, T => KArg::from(s.to::<T>())),
            Operand::Array(_) => KArg::Scalar(0.0, 0),
        }
    };
    fn arg<'x>(arr: &'x Option<DynArray>, scalar: KArg<'static>) -> KArg<'x> {
        match arr {
            Some(x) => super::with!(x, y => KArg::from(y)),
            None => scalar,
        }
    }
    let args = [arg(&a, scalar(&lhs)), arg(&b, scalar(&rhs))];
    for_type!(t, T => k.call1::<T>(&args).map(DynArray::from_typed))
}

/// A comparison with promotion, giving a `bool` array. An integer scalar beyond the range of
/// an integer array's type compares exactly (in `int64`, or `float64` beyond it), as NumPy 2
/// does.
pub fn compare(op: CompareOp, lhs: Operand<'_>, rhs: Operand<'_>) -> Result<DynArray> {
    let t = match result_type(&lhs, &rhs) {
        Ok(t) => t,
        Err(Error::ScalarOutOfRange { .. }) => {
            let s = match (&lhs, &rhs) {
                (Operand::Scalar(s), _) | (_, Operand::Scalar(s)) => *s,
                _ => Scalar::int(0),
            };
            match s.value {
                super::ScalarValue::Int(v) if ElementType::I64.holds(v) => ElementType::I64,
                _ => ElementType::F64,
            }
        }
        Err(e) => return Err(e),
    };
    let (op, array, other) = match (lhs, rhs) {
        (Operand::Array(a), o) => (op, a, o),
        (Operand::Scalar(s), Operand::Array(a)) => (mirror(op), a, Operand::Scalar(s)),
        (Operand::Scalar(_), Operand::Scalar(_)) => {
            return Err(Error::invalid(
                op.name(),
                "needs at least one array operand",
            ))
        }
    };
    let a = array.to_type(t)?;
    match other {
        Operand::Array(b) => {
            let b = b.to_type(t)?;
            match (&a, &b) {
                (DynArray::Bool(x), DynArray::Bool(y)) | (DynArray::U8(x), DynArray::U8(y)) => {
                    x.compare(op, y)
                }
                (DynArray::I32(x), DynArray::I32(y)) => x.compare(op, y),
                (DynArray::U32(x), DynArray::U32(y)) => x.compare(op, y),
                (DynArray::I64(x), DynArray::I64(y)) => x.compare(op, y),
                (DynArray::U64(x), DynArray::U64(y)) => x.compare(op, y),
                (DynArray::F16(x), DynArray::F16(y)) => x.compare(op, y),
                (DynArray::BF16(x), DynArray::BF16(y)) => x.compare(op, y),
                (DynArray::F32(x), DynArray::F32(y)) => x.compare(op, y),
                (DynArray::F64(x), DynArray::F64(y)) => x.compare(op, y),
                _ => Err(mismatch(op.name(), &a, &b)),
            }
        }
        Operand::Scalar(s) => {
            if let DynArray::Bool(m) = &a {
                m.compare_scalar(op, s.truth() as u8)
            } else {
                super::with!(&a, x => x.compare_scalar(op, s.to()))
            }
        }
    }
    .map(DynArray::Bool)
}

/// The comparison with its operands swapped (`s < a` is `a > s`).
fn mirror(op: CompareOp) -> CompareOp {
    match op {
        CompareOp::Lt => CompareOp::Gt,
        CompareOp::Le => CompareOp::Ge,
        CompareOp::Gt => CompareOp::Lt,
        CompareOp::Ge => CompareOp::Le,
        o => o,
    }
}

/// `logical_and` / `or` / `xor` on truth values, giving a `bool` array.
pub fn logical(op: LogicalOp, lhs: Operand<'_>, rhs: Operand<'_>) -> Result<DynArray> {
    let t = match result_type(&lhs, &rhs) {
        Ok(t) => t,
        // truth values only: any integer is fine
        Err(Error::ScalarOutOfRange { .. }) => ElementType::F64,
        Err(e) => return Err(e),
    };
    let (a, b) = both_arrays(&lhs, &rhs, t)?;
    match (&a, &b) {
        (DynArray::Bool(x), DynArray::Bool(y)) | (DynArray::U8(x), DynArray::U8(y)) => {
            x.logical(op, y)
        }
        (DynArray::I32(x), DynArray::I32(y)) => x.logical(op, y),
        (DynArray::U32(x), DynArray::U32(y)) => x.logical(op, y),
        (DynArray::I64(x), DynArray::I64(y)) => x.logical(op, y),
        (DynArray::U64(x), DynArray::U64(y)) => x.logical(op, y),
        (DynArray::F16(x), DynArray::F16(y)) => x.logical(op, y),
        (DynArray::BF16(x), DynArray::BF16(y)) => x.logical(op, y),
        (DynArray::F32(x), DynArray::F32(y)) => x.logical(op, y),
        (DynArray::F64(x), DynArray::F64(y)) => x.logical(op, y),
        _ => Err(mismatch(op.name(), &a, &b)),
    }
    .map(DynArray::Bool)
}

impl DynArray {
    /// A predicate (`isnan`, `isinf`, `isfinite`, `logical_not`), giving a `bool` array.
    pub fn predicate(&self, p: Predicate) -> Result<DynArray> {
        super::with!(self, a => a.predicate(p)).map(DynArray::Bool)
    }

    /// A unary function with NumPy's result type: float-only functions compute in
    /// [`ElementType::to_float`]; rounding, `abs`, `sign` and `relu` keep integer types; on
    /// `bool`, `~` is logical not, `abs` and rounding are the identity, `-` and `sign` are
    /// errors.
    pub fn unary(&self, op: UnaryOp) -> Result<DynArray> {
        let t = self.dtype();
        let float_only = matches!(
            op,
            UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Sqrt
                | UnaryOp::Tanh
                | UnaryOp::Sigmoid
                | UnaryOp::Sin
                | UnaryOp::Cos
        );
        if float_only && !t.is_float() {
            return self.astype(t.to_float())?.unary(op);
        }
        if t == ElementType::Bool {
            return match op {
                UnaryOp::BitNot => self.predicate(Predicate::LogicalNot),
                UnaryOp::Abs
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round
                | UnaryOp::Trunc
                | UnaryOp::Relu => self.copy(),
                _ => Err(Error::UnsupportedDType {
                    op: op.name().to_string(),
                    dtype: "bool",
                }),
            };
        }
        super::same!(self, a => a.unary(op))
    }

    /// `clip(lo, hi)` (either bound may be absent) in the promoted type of the array and the
    /// bounds.
    pub fn clip(&self, lo: Option<Scalar>, hi: Option<Scalar>) -> Result<DynArray> {
        let mut t = self.dtype();
        for s in [lo, hi].iter().flatten() {
            t = t.with_scalar(s)?;
        }
        if t == ElementType::Bool {
            t = ElementType::U8;
        }
        let a = self.to_type(t)?;
        let r = for_type!(t, T => {
            let x = a.as_typed::<T>().ok_or_else(|| Error::invalid("clip", "internal type"))?;
            let lo_v: T = match lo {
                Some(s) => s.to(),
                None => lowest::<T>(),
            };
            let hi_v: T = match hi {
                Some(s) => s.to(),
                None => highest::<T>(),
            };
            x.clip(lo_v, hi_v).map(DynArray::from_typed)
        })?;
        if self.dtype() == ElementType::Bool && lo.is_none() && hi.is_none() {
            return r.astype(ElementType::Bool);
        }
        Ok(r)
    }
}

fn lowest<T: crate::DType>() -> T {
    if T::is_float() {
        T::from_f64(f64::NEG_INFINITY)
    } else {
        T::from_f64(f64::MIN)
    }
}

fn highest<T: crate::DType>() -> T {
    if T::is_float() {
        T::from_f64(f64::INFINITY)
    } else {
        T::from_f64(f64::MAX)
    }
}

/// `numpy.where(cond, x, y)`: `cond` as truth values, `x` and `y` promoted.
pub fn where_(cond: &DynArray, x: Operand<'_>, y: Operand<'_>) -> Result<DynArray> {
    let mask = match cond {
        DynArray::Bool(m) => m.clone(),
        other => match other.astype(ElementType::Bool)? {
            DynArray::Bool(m) => m,
            _ => return Err(Error::invalid("where", "condition conversion")),
        },
    };
    let t = match (x, y) {
        (Operand::Scalar(a), Operand::Scalar(b)) => {
            // two scalars: their own promotion (weak ints with floats give float64)
            let ta = a.dtype.unwrap_or(match a.value {
                super::ScalarValue::Bool(_) => ElementType::Bool,
                super::ScalarValue::Int(_) => ElementType::I64,
                super::ScalarValue::Float(_) => ElementType::F64,
            });
            ta.with_scalar(&b)?
        }
        _ => result_type(&x, &y)?,
    };
    let like = DynArray::Bool(mask.clone());
    let conv = |o: &Operand<'_>| -> Result<DynArray> {
        match o {
            Operand::Array(a) => a.to_type(t),
            Operand::Scalar(s) => scalar_array(&like, s, t),
        }
    };
    let (a, b) = (conv(&x)?, conv(&y)?);
    match (&a, &b) {
        (DynArray::Bool(p), DynArray::Bool(q)) => crate::where_(&mask, p, q).map(DynArray::Bool),
        (DynArray::U8(p), DynArray::U8(q)) => crate::where_(&mask, p, q).map(DynArray::U8),
        (DynArray::I32(p), DynArray::I32(q)) => crate::where_(&mask, p, q).map(DynArray::I32),
        (DynArray::U32(p), DynArray::U32(q)) => crate::where_(&mask, p, q).map(DynArray::U32),
        (DynArray::I64(p), DynArray::I64(q)) => crate::where_(&mask, p, q).map(DynArray::I64),
        (DynArray::U64(p), DynArray::U64(q)) => crate::where_(&mask, p, q).map(DynArray::U64),
        (DynArray::F16(p), DynArray::F16(q)) => crate::where_(&mask, p, q).map(DynArray::F16),
        (DynArray::BF16(p), DynArray::BF16(q)) => crate::where_(&mask, p, q).map(DynArray::BF16),
        (DynArray::F32(p), DynArray::F32(q)) => crate::where_(&mask, p, q).map(DynArray::F32),
        (DynArray::F64(p), DynArray::F64(q)) => crate::where_(&mask, p, q).map(DynArray::F64),
        _ => Err(mismatch("where", &a, &b)),
    }
}
