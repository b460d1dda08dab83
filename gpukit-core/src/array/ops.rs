//! Elementwise operations with NumPy broadcasting: arithmetic, remainder, power and bitwise
//! operations ([`BinaryOp`]), math functions and rounding ([`UnaryOp`]), `clip`, comparisons
//! ([`CompareOp`]), predicates ([`Predicate`]: `isnan`, `isinf`, `isfinite`, `logical_not`),
//! logical and / or / xor ([`LogicalOp`]) and `where`. Masks are `u8` arrays of 0 / 1.
//!
//! Every operation has three forms: `a.add(&b)?` returns a fresh array; `a.add_into(&b, &mut
//! out)?` writes into `out` (NumPy's `out=`: it must have the broadcast shape; it may be a
//! strided view, and it may be `a` or `b` themselves); `a.add_inplace(&b)?` writes into `a`.
//! An input that shares memory with the output other than element for element (a shifted or
//! broadcast view of it) is copied first, so results are always as if every input had been
//! read before anything was written. An output with repeated elements (a broadcast view) is an
//! error.

use super::GpuArray;
use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use crate::kernels::{self, binary_ops, unary_ops, KernelFile};
use crate::shape;
use gpukit_jit::KernelArg;

/// Binary operations (codes shared with `kernels/binary.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add = 0,
    /// `a - b`.
    Sub = 1,
    /// `a * b`.
    Mul = 2,
    /// `a / b`; integers truncate toward zero and give 0 for a zero divisor.
    Div = 3,
    /// Elementwise maximum (NaN propagates, as `numpy.maximum`).
    Maximum = 4,
    /// Elementwise minimum (NaN propagates).
    Minimum = 5,
    /// `a ** b`; integer powers are exact (wrapping), negative integer exponents give 0 unless
    /// `|a| == 1`.
    Pow = 6,
    /// `numpy.remainder` (`a % b` with the sign of `b`); `x % 0` is 0 for integers, NaN for
    /// floats.
    Mod = 7,
    /// Bitwise and (integers only).
    BitAnd = 8,
    /// Bitwise or (integers only).
    BitOr = 9,
    /// Bitwise xor (integers only).
    BitXor = 10,
}

impl BinaryOp {
    /// Vectors per thread of the contiguous kernel (`binary_unroll` in kernels/binary.cu).
    pub(crate) fn unroll(self) -> usize {
        if self == BinaryOp::Pow {
            kernels::EW_UNROLL_HEAVY
        } else {
            kernels::EW_UNROLL
        }
    }

    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Pow => "pow",
            BinaryOp::Mod => "remainder",
            BinaryOp::BitAnd => "bitwise_and",
            BinaryOp::BitOr => "bitwise_or",
            BinaryOp::BitXor => "bitwise_xor",
        }
    }

    /// True when the operation is defined for element types of `kind`.
    pub fn supports(self, kind: DTypeKind) -> bool {
        binary_ops(kind).contains(&(self as u32))
    }
}

/// Unary operations (codes shared with `kernels/unary.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-a` (wrapping for unsigned integers).
    Neg = 0,
    /// `|a|`.
    Abs = 1,
    /// `e^a` (floats only).
    Exp = 2,
    /// Natural logarithm (floats only).
    Log = 3,
    /// Square root (floats only).
    Sqrt = 4,
    /// Hyperbolic tangent (floats only).
    Tanh = 5,
    /// `max(a, 0)` (NaN stays NaN).
    Relu = 6,
    /// `1 / (1 + e^-a)` (floats only).
    Sigmoid = 7,
    /// Sine (floats only).
    Sin = 8,
    /// Cosine (floats only).
    Cos = 9,
    /// Round down (the identity for integers).
    Floor = 10,
    /// Round up (the identity for integers).
    Ceil = 11,
    /// Round to nearest, ties to even, as `numpy.round` (the identity for integers).
    Round = 12,
    /// Round toward zero (the identity for integers).
    Trunc = 13,
    /// Bitwise not (integers only).
    BitNot = 14,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign = 15,
}

impl UnaryOp {
    /// Vectors per thread of the contiguous kernel (`unary_unroll` in kernels/unary.cu).
    pub(crate) fn unroll(self) -> usize {
        if self == UnaryOp::Log {
            kernels::EW_UNROLL_HEAVY
        } else {
            kernels::EW_UNROLL
        }
    }

    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Relu => "relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Trunc => "trunc",
            UnaryOp::BitNot => "bitwise_not",
            UnaryOp::Sign => "sign",
        }
    }

    /// True when the operation is defined for element types of `kind`.
    pub fn supports(self, kind: DTypeKind) -> bool {
        unary_ops(kind).contains(&(self as u32))
    }
}

/// Comparisons, producing a `u8` mask of 0 / 1 (codes shared with `kernels/logic.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `a == b`.
    Eq = 0,
    /// `a != b`.
    Ne = 1,
    /// `a < b`.
    Lt = 2,
    /// `a <= b`.
    Le = 3,
    /// `a > b`.
    Gt = 4,
    /// `a >= b`.
    Ge = 5,
}

impl CompareOp {
    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
        }
    }
}

/// Elementwise tests producing a `u8` mask (codes shared with `kernels/logic.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Predicate {
    /// `isnan` (false for integers).
    IsNan = 0,
    /// `isinf` (false for integers).
    IsInf = 1,
    /// `isfinite` (true for integers).
    IsFinite = 2,
    /// `logical_not`: 1 where the element is 0 (NaN counts as true, as in NumPy).
    LogicalNot = 3,
}

impl Predicate {
    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            Predicate::IsNan => "isnan",
            Predicate::IsInf => "isinf",
            Predicate::IsFinite => "isfinite",
            Predicate::LogicalNot => "logical_not",
        }
    }
}

/// Logical operations on truth values (nonzero, NaN included), producing a `u8` mask (codes
/// shared with `kernels/logic.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogicalOp {
    /// `logical_and`.
    And = 0,
    /// `logical_or`.
    Or = 1,
    /// `logical_xor`.
    Xor = 2,
}

impl LogicalOp {
    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            LogicalOp::And => "logical_and",
            LogicalOp::Or => "logical_or",
            LogicalOp::Xor => "logical_xor",
        }
    }
}

pub(crate) fn same_device<A: DType, B: DType>(
    op: &str,
    a: &GpuArray<A>,
    b: &GpuArray<B>,
) -> Result<()> {
    if a.dev != b.dev {
        return Err(Error::DeviceMismatch {
            op: op.to_string(),
            lhs: a.dev.ordinal(),
            rhs: b.dev.ordinal(),
        });
    }
    Ok(())
}

/// Checks that `out` can receive a result of `shape` computed on `dev`'s arrays: same device,
/// exactly that shape, no repeated elements.
pub(crate) fn check_out<T: DType, U: DType>(
    op: &str,
    like: &GpuArray<U>,
    out: &GpuArray<T>,
    shape: &[usize],
) -> Result<()> {
    same_device(op, like, out)?;
    if out.shape != shape {
        return Err(Error::ShapeMismatch {
            op: format!("{op} (out=)"),
            lhs: shape.to_vec(),
            rhs: out.shape.clone(),
        });
    }
    if shape::has_repeated_elements(&out.shape, &out.strides) {
        return Err(Error::invalid(
            op,
            format!(
                "the output (shape {:?}, strides {:?}) has repeated elements (a broadcast view); \
                 write into an array of its own",
                out.shape, out.strides
            ),
        ));
    }
    Ok(())
}

/// `input` itself when reading it while writing `out` is safe (disjoint memory, or the very same
/// elements in the same order), else a fresh copy of it.
pub(crate) fn unalias<T: DType, U: DType>(
    input: &GpuArray<U>,
    out: &GpuArray<T>,
) -> Result<GpuArray<U>> {
    if !input.overlaps(out) {
        return Ok(input.clone());
    }
    let same_elements = std::mem::size_of::<T>() == std::mem::size_of::<U>()
        && input.device_ptr() == out.device_ptr()
        && shape::broadcast_strides("alias", &input.shape, &input.strides, &out.shape)
            .is_ok_and(|s| s == out.strides);
    if same_elements {
        Ok(input.clone())
    } else {
        input.astype::<U>()
    }
}

impl<T: DType> GpuArray<T> {
    fn check_binary(&self, op: BinaryOp) -> Result<()> {
        if op.supports(T::KIND) {
            Ok(())
        } else {
            Err(Error::UnsupportedDType {
                op: op.name().to_string(),
                dtype: T::RUST_NAME,
            })
        }
    }

    /// `self OP other` with NumPy broadcasting; the error names both shapes.
    pub fn binary(&self, op: BinaryOp, other: &GpuArray<T>) -> Result<GpuArray<T>> {
        self.check_binary(op)?;
        same_device(op.name(), self, other)?;
        let out_shape = shape::broadcast_shapes(op.name(), &self.shape, &other.shape)?;
        let out = GpuArray::<T>::alloc_on(&self.dev, &out_shape, &self.dev.stream())?;
        self.write_binary(op, other, &out)?;
        Ok(out)
    }

    /// `out = self OP other` (NumPy's `out=`): `out` must have the broadcast shape.
    pub fn binary_into(
        &self,
        op: BinaryOp,
        other: &GpuArray<T>,
        out: &mut GpuArray<T>,
    ) -> Result<()> {
        self.check_binary(op)?;
        same_device(op.name(), self, other)?;
        let out_shape = shape::broadcast_shapes(op.name(), &self.shape, &other.shape)?;
        check_out(op.name(), self, out, &out_shape)?;
        let a = unalias(self, out)?;
        let b = unalias(other, out)?;
        a.write_binary(op, &b, out)
    }

    /// `self = self OP other` (`other` broadcast to this array's shape).
    pub fn binary_inplace(&mut self, op: BinaryOp, other: &GpuArray<T>) -> Result<()> {
        let mut out = self.clone();
        self.binary_into(op, other, &mut out)
    }

    /// Writes `self OP other` into `out` (shape checked, memory distinct or identical).
    fn write_binary(&self, op: BinaryOp, other: &GpuArray<T>, out: &GpuArray<T>) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        other.used_on(&stream);
        out.used_on(&stream);
        let code = op as u32;
        if self.shape == out.shape
            && other.shape == out.shape
            && self.is_contiguous()
            && other.is_contiguous()
            && out.is_contiguous()
        {
            let k = self.kernel(
                KernelFile::Binary,
                &format!("binary_contig<{}, {code}>", T::NAME),
            )?;
            let vec = 16 / std::mem::size_of::<T>();
            return kernels::launch(
                &k,
                &stream,
                kernels::grid_vec(&self.dev, n.div_ceil(vec), op.unroll()),
                &[out.arg(), self.arg(), other.arg(), (n as i64).into()],
            );
        }
        // Broadcasts the operators' vector kernel reads (a bias row, a column, one element):
        // the same kernel as `&a + &b` (issue 23: the named forms ran at 0.71-0.75x torch
        // through the strided kernel below, the operators at 1.0x).
        if super::expr::write_binary_vector(op, self, other, out)? {
            return Ok(());
        }
        let layout = shape::layout_bytes(
            op.name(),
            &out.shape,
            &[
                out.strides.clone(),
                self.strides_for(op.name(), &out.shape)?,
                other.strides_for(op.name(), &out.shape)?,
            ],
        )?;
        let k = self.kernel(
            KernelFile::Binary,
            &format!("binary_strided<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                out.arg(),
                self.arg(),
                other.arg(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )
    }

    /// This array's strides when read as an array of `out_shape` (broadcasting).
    pub(crate) fn strides_for(&self, op: &str, out_shape: &[usize]) -> Result<Vec<isize>> {
        shape::broadcast_strides(op, &self.shape, &self.strides, out_shape)
    }

    /// `self OP s`, or `s OP self` when `scalar_left`.
    pub fn binary_scalar(&self, op: BinaryOp, s: T, scalar_left: bool) -> Result<GpuArray<T>> {
        self.check_binary(op)?;
        let out = GpuArray::<T>::alloc_on(&self.dev, &self.shape, &self.dev.stream())?;
        self.write_binary_scalar(op, s, scalar_left, &out)?;
        Ok(out)
    }

    /// `out = self OP s` (or `s OP self`); `out` must have this array's shape.
    pub fn binary_scalar_into(
        &self,
        op: BinaryOp,
        s: T,
        scalar_left: bool,
        out: &mut GpuArray<T>,
    ) -> Result<()> {
        self.check_binary(op)?;
        check_out(op.name(), self, out, &self.shape)?;
        let a = unalias(self, out)?;
        a.write_binary_scalar(op, s, scalar_left, out)
    }

    /// `self = self OP s`.
    pub fn binary_scalar_inplace(&mut self, op: BinaryOp, s: T) -> Result<()> {
        let mut out = self.clone();
        self.binary_scalar_into(op, s, false, &mut out)
    }

    fn write_binary_scalar(
        &self,
        op: BinaryOp,
        s: T,
        scalar_left: bool,
        out: &GpuArray<T>,
    ) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        out.used_on(&stream);
        let (sf, si) = s.scalar_args();
        let code = op as u32;
        if self.is_contiguous() && out.is_contiguous() {
            let k = self.kernel(
                KernelFile::Binary,
                &format!("binary_scalar<{}, {code}>", T::NAME),
            )?;
            let vec = 16 / std::mem::size_of::<T>();
            return kernels::launch(
                &k,
                &stream,
                kernels::grid_vec(&self.dev, n.div_ceil(vec), op.unroll()),
                &[
                    out.arg(),
                    self.arg(),
                    sf.into(),
                    si.into(),
                    (scalar_left as i32).into(),
                    (n as i64).into(),
                ],
            );
        }
        let layout = shape::layout_bytes(
            op.name(),
            &out.shape,
            &[out.strides.clone(), self.strides.clone()],
        )?;
        let k = self.kernel(
            KernelFile::Binary,
            &format!("binary_scalar_strided<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                out.arg(),
                self.arg(),
                sf.into(),
                si.into(),
                (scalar_left as i32).into(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )
    }

    fn check_unary(&self, op: UnaryOp) -> Result<()> {
        if op.supports(T::KIND) {
            Ok(())
        } else {
            Err(Error::UnsupportedDType {
                op: op.name().to_string(),
                dtype: T::RUST_NAME,
            })
        }
    }

    /// Applies a unary operation; [`Error::UnsupportedDType`] for float-only operations on
    /// integer arrays (and bitwise not on floats).
    pub fn unary(&self, op: UnaryOp) -> Result<GpuArray<T>> {
        self.check_unary(op)?;
        let out = GpuArray::<T>::alloc_on(&self.dev, &self.shape, &self.dev.stream())?;
        self.write_unary(op, &out)?;
        Ok(out)
    }

    /// `out = op(self)`; `out` must have this array's shape.
    pub fn unary_into(&self, op: UnaryOp, out: &mut GpuArray<T>) -> Result<()> {
        self.check_unary(op)?;
        check_out(op.name(), self, out, &self.shape)?;
        let a = unalias(self, out)?;
        a.write_unary(op, out)
    }

    /// `self = op(self)`.
    pub fn unary_inplace(&mut self, op: UnaryOp) -> Result<()> {
        let mut out = self.clone();
        self.unary_into(op, &mut out)
    }

    fn write_unary(&self, op: UnaryOp, out: &GpuArray<T>) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        out.used_on(&stream);
        let code = op as u32;
        if self.is_contiguous() && out.is_contiguous() {
            let k = self.kernel(
                KernelFile::Unary,
                &format!("unary_contig<{}, {code}>", T::NAME),
            )?;
            let vec = 16 / std::mem::size_of::<T>();
            return kernels::launch(
                &k,
                &stream,
                kernels::grid_vec(&self.dev, n.div_ceil(vec), op.unroll()),
                &[out.arg(), self.arg(), (n as i64).into()],
            );
        }
        let layout = shape::layout_bytes(
            op.name(),
            &out.shape,
            &[out.strides.clone(), self.strides.clone()],
        )?;
        let k = self.kernel(
            KernelFile::Unary,
            &format!("unary_strided<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                out.arg(),
                self.arg(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )
    }

    /// `numpy.clip(self, lo, hi)`: `min(max(x, lo), hi)`; NaN stays NaN. `lo > hi` gives `hi`
    /// everywhere, as in NumPy.
    pub fn clip(&self, lo: T, hi: T) -> Result<GpuArray<T>> {
        let out = GpuArray::<T>::alloc_on(&self.dev, &self.shape, &self.dev.stream())?;
        self.write_clip(lo, hi, &out)?;
        Ok(out)
    }

    /// `out = clip(self, lo, hi)`.
    pub fn clip_into(&self, lo: T, hi: T, out: &mut GpuArray<T>) -> Result<()> {
        check_out("clip", self, out, &self.shape)?;
        let a = unalias(self, out)?;
        a.write_clip(lo, hi, out)
    }

    /// `self = clip(self, lo, hi)`.
    pub fn clip_inplace(&mut self, lo: T, hi: T) -> Result<()> {
        let mut out = self.clone();
        self.clip_into(lo, hi, &mut out)
    }

    fn write_clip(&self, lo: T, hi: T, out: &GpuArray<T>) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        out.used_on(&stream);
        let (lf, li) = lo.scalar_args();
        let (hf, hi_) = hi.scalar_args();
        if self.is_contiguous() && out.is_contiguous() {
            let k = self.kernel(KernelFile::Unary, &format!("clip_contig<{}>", T::NAME))?;
            let vec = 16 / std::mem::size_of::<T>();
            return kernels::launch(
                &k,
                &stream,
                kernels::grid_vec(&self.dev, n.div_ceil(vec), kernels::EW_UNROLL),
                &[
                    out.arg(),
                    self.arg(),
                    lf.into(),
                    li.into(),
                    hf.into(),
                    hi_.into(),
                    (n as i64).into(),
                ],
            );
        }
        let layout = shape::layout_bytes(
            "clip",
            &out.shape,
            &[out.strides.clone(), self.strides.clone()],
        )?;
        let k = self.kernel(KernelFile::Unary, &format!("clip_strided<{}>", T::NAME))?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                out.arg(),
                self.arg(),
                lf.into(),
                li.into(),
                hf.into(),
                hi_.into(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )
    }

    /// Compares elementwise with broadcasting: a `u8` mask.
    pub fn compare(&self, op: CompareOp, other: &GpuArray<T>) -> Result<GpuArray<u8>> {
        self.mask_binary(
            op.name(),
            other,
            &format!("compare_contig<{}, {}>", T::NAME, op as u32),
            &format!("compare_strided<{}, {}>", T::NAME, op as u32),
        )
    }

    /// Logical and / or / xor of the truth values (nonzero; NaN is true): a `u8` mask.
    pub fn logical(&self, op: LogicalOp, other: &GpuArray<T>) -> Result<GpuArray<u8>> {
        self.mask_binary(
            op.name(),
            other,
            &format!("logical_contig<{}, {}>", T::NAME, op as u32),
            &format!("logical_strided<{}, {}>", T::NAME, op as u32),
        )
    }

    fn mask_binary(
        &self,
        name: &str,
        other: &GpuArray<T>,
        contig: &str,
        strided: &str,
    ) -> Result<GpuArray<u8>> {
        same_device(name, self, other)?;
        let out_shape = shape::broadcast_shapes(name, &self.shape, &other.shape)?;
        let stream = self.dev.stream();
        let out = GpuArray::<u8>::alloc_on(&self.dev, &out_shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        self.used_on(&stream);
        other.used_on(&stream);
        if self.shape == other.shape && self.is_contiguous() && other.is_contiguous() {
            let k = self.kernel(KernelFile::Logic, contig)?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_vec(
                    &self.dev,
                    n.div_ceil(16 / std::mem::size_of::<T>()),
                    kernels::EW_UNROLL,
                ),
                &[out.arg(), self.arg(), other.arg(), (n as i64).into()],
            )?;
        } else {
            let layout = shape::layout_bytes(
                name,
                &out_shape,
                &[
                    out.strides.clone(),
                    self.strides_for(name, &out_shape)?,
                    other.strides_for(name, &out_shape)?,
                ],
            )?;
            let k = self.kernel(KernelFile::Logic, strided)?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n, 32),
                &[
                    out.arg(),
                    self.arg(),
                    other.arg(),
                    KernelArg::Bytes(layout),
                    (n as i64).into(),
                ],
            )?;
        }
        Ok(out)
    }

    /// Compares with a scalar (`self OP s`): a `u8` mask.
    pub fn compare_scalar(&self, op: CompareOp, s: T) -> Result<GpuArray<u8>> {
        let stream = self.dev.stream();
        let out = GpuArray::<u8>::alloc_on(&self.dev, &self.shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        self.used_on(&stream);
        let (sf, si) = s.scalar_args();
        let layout = shape::layout_bytes(
            op.name(),
            &self.shape,
            &[out.strides.clone(), self.strides.clone()],
        )?;
        let k = self.kernel(
            KernelFile::Logic,
            &format!("compare_scalar<{}, {}>", T::NAME, op as u32),
        )?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                out.arg(),
                self.arg(),
                sf.into(),
                si.into(),
                0i32.into(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )?;
        Ok(out)
    }

    /// An elementwise test ([`Predicate`]): a `u8` mask.
    pub fn predicate(&self, p: Predicate) -> Result<GpuArray<u8>> {
        let stream = self.dev.stream();
        let out = GpuArray::<u8>::alloc_on(&self.dev, &self.shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        self.used_on(&stream);
        let code = p as u32;
        if self.is_contiguous() {
            let k = self.kernel(
                KernelFile::Logic,
                &format!("predicate_contig<{}, {code}>", T::NAME),
            )?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_vec(
                    &self.dev,
                    n.div_ceil(16 / std::mem::size_of::<T>()),
                    kernels::EW_UNROLL,
                ),
                &[out.arg(), self.arg(), (n as i64).into()],
            )?;
        } else {
            let layout = shape::layout_bytes(
                p.name(),
                &self.shape,
                &[out.strides.clone(), self.strides.clone()],
            )?;
            let k = self.kernel(
                KernelFile::Logic,
                &format!("predicate_strided<{}, {code}>", T::NAME),
            )?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n, 32),
                &[
                    out.arg(),
                    self.arg(),
                    KernelArg::Bytes(layout),
                    (n as i64).into(),
                ],
            )?;
        }
        Ok(out)
    }

    /// `mask ? a : b` elementwise, all three broadcast together.
    pub fn select(mask: &GpuArray<u8>, a: &GpuArray<T>, b: &GpuArray<T>) -> Result<GpuArray<T>> {
        same_device("where", mask, a)?;
        same_device("where", a, b)?;
        let ab = shape::broadcast_shapes("where", &a.shape, &b.shape)?;
        let out_shape = shape::broadcast_shapes("where", &mask.shape, &ab)?;
        let out = GpuArray::<T>::alloc_on(&a.dev, &out_shape, &a.dev.stream())?;
        write_where(mask, a, b, &out)?;
        Ok(out)
    }
}

/// Writes `mask ? a : b` into `out` (shape `out.shape`, which all three broadcast to). `out` may
/// be `b` itself (element for element), which `unalias` callers guarantee.
pub(crate) fn write_where<T: DType>(
    mask: &GpuArray<u8>,
    a: &GpuArray<T>,
    b: &GpuArray<T>,
    out: &GpuArray<T>,
) -> Result<()> {
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    let stream = a.dev.stream();
    mask.used_on(&stream);
    a.used_on(&stream);
    b.used_on(&stream);
    out.used_on(&stream);
    let dense = |s: &[usize], c: bool| s == out.shape.as_slice() && c;
    if out.is_contiguous()
        && dense(&mask.shape, mask.is_contiguous())
        && dense(&a.shape, a.is_contiguous())
        && dense(&b.shape, b.is_contiguous())
    {
        let k = a.kernel(KernelFile::Logic, &format!("where_contig<{}>", T::NAME))?;
        return kernels::launch(
            &k,
            &stream,
            kernels::grid_vec(
                &a.dev,
                n.div_ceil(16 / std::mem::size_of::<T>()),
                kernels::EW_UNROLL,
            ),
            &[out.arg(), mask.arg(), a.arg(), b.arg(), (n as i64).into()],
        );
    }
    let layout = shape::layout_bytes(
        "where",
        &out.shape,
        &[
            out.strides.clone(),
            mask.strides_for("where", &out.shape)?,
            a.strides_for("where", &out.shape)?,
            b.strides_for("where", &out.shape)?,
        ],
    )?;
    let k = a.kernel(KernelFile::Logic, &format!("where_strided<{}>", T::NAME))?;
    kernels::launch(
        &k,
        &stream,
        kernels::grid_for(&a.dev, n, 32),
        &[
            out.arg(),
            mask.arg(),
            a.arg(),
            b.arg(),
            KernelArg::Bytes(layout),
            (n as i64).into(),
        ],
    )
}

/// `mask ? a : b` elementwise with broadcasting (NumPy's `where`).
pub fn where_<T: DType>(
    mask: &GpuArray<u8>,
    a: &GpuArray<T>,
    b: &GpuArray<T>,
) -> Result<GpuArray<T>> {
    GpuArray::select(mask, a, b)
}

macro_rules! binary_methods {
    ($($name:ident, $sname:ident, $into:ident, $inplace:ident, $sinplace:ident, $op:ident, $doc:literal;)*) => {
        impl<T: DType> GpuArray<T> {
            $(
                #[doc = concat!("Elementwise `", $doc, "` with NumPy broadcasting.")]
                pub fn $name(&self, other: &GpuArray<T>) -> Result<GpuArray<T>> {
                    self.binary(BinaryOp::$op, other)
                }
                #[doc = concat!("Elementwise `", $doc, "` with a scalar on the right.")]
                pub fn $sname(&self, s: T) -> Result<GpuArray<T>> {
                    self.binary_scalar(BinaryOp::$op, s, false)
                }
                #[doc = concat!("`out = ", $doc, "` (NumPy's `out=`; see the module docs).")]
                pub fn $into(&self, other: &GpuArray<T>, out: &mut GpuArray<T>) -> Result<()> {
                    self.binary_into(BinaryOp::$op, other, out)
                }
                #[doc = concat!("In place: `a = ", $doc, "`.")]
                pub fn $inplace(&mut self, other: &GpuArray<T>) -> Result<()> {
                    self.binary_inplace(BinaryOp::$op, other)
                }
                #[doc = concat!("In place with a scalar `b`: `a = ", $doc, "`.")]
                pub fn $sinplace(&mut self, s: T) -> Result<()> {
                    self.binary_scalar_inplace(BinaryOp::$op, s)
                }
            )*
        }
    };
}

binary_methods! {
    add, add_scalar, add_into, add_inplace, add_scalar_inplace, Add, "a + b";
    sub, sub_scalar, sub_into, sub_inplace, sub_scalar_inplace, Sub, "a - b";
    mul, mul_scalar, mul_into, mul_inplace, mul_scalar_inplace, Mul, "a * b";
    div, div_scalar, div_into, div_inplace, div_scalar_inplace, Div, "a / b";
    maximum, maximum_scalar, maximum_into, maximum_inplace, maximum_scalar_inplace, Maximum,
        "maximum(a, b)";
    minimum, minimum_scalar, minimum_into, minimum_inplace, minimum_scalar_inplace, Minimum,
        "minimum(a, b)";
    pow, pow_scalar, pow_into, pow_inplace, pow_scalar_inplace, Pow, "a ** b";
    remainder, remainder_scalar, remainder_into, remainder_inplace, remainder_scalar_inplace,
        Mod, "a % b (sign of b)";
    bitwise_and, bitwise_and_scalar, bitwise_and_into, bitwise_and_inplace,
        bitwise_and_scalar_inplace, BitAnd, "a & b";
    bitwise_or, bitwise_or_scalar, bitwise_or_into, bitwise_or_inplace,
        bitwise_or_scalar_inplace, BitOr, "a | b";
    bitwise_xor, bitwise_xor_scalar, bitwise_xor_into, bitwise_xor_inplace,
        bitwise_xor_scalar_inplace, BitXor, "a ^ b";
}

macro_rules! unary_methods {
    ($($name:ident, $into:ident, $inplace:ident, $op:ident;)*) => {
        impl<T: DType> GpuArray<T> {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` (see [`UnaryOp`]).")]
                pub fn $name(&self) -> Result<GpuArray<T>> {
                    self.unary(UnaryOp::$op)
                }
                #[doc = concat!("`out = ", stringify!($name), "(a)`.")]
                pub fn $into(&self, out: &mut GpuArray<T>) -> Result<()> {
                    self.unary_into(UnaryOp::$op, out)
                }
                #[doc = concat!("In place: `a = ", stringify!($name), "(a)`.")]
                pub fn $inplace(&mut self) -> Result<()> {
                    self.unary_inplace(UnaryOp::$op)
                }
            )*
        }
    };
}

unary_methods! {
    neg, neg_into, neg_inplace, Neg;
    abs, abs_into, abs_inplace, Abs;
    exp, exp_into, exp_inplace, Exp;
    log, log_into, log_inplace, Log;
    sqrt, sqrt_into, sqrt_inplace, Sqrt;
    tanh, tanh_into, tanh_inplace, Tanh;
    relu, relu_into, relu_inplace, Relu;
    sigmoid, sigmoid_into, sigmoid_inplace, Sigmoid;
    sin, sin_into, sin_inplace, Sin;
    cos, cos_into, cos_inplace, Cos;
    floor, floor_into, floor_inplace, Floor;
    ceil, ceil_into, ceil_inplace, Ceil;
    round, round_into, round_inplace, Round;
    trunc, trunc_into, trunc_inplace, Trunc;
    bitwise_not, bitwise_not_into, bitwise_not_inplace, BitNot;
    sign, sign_into, sign_inplace, Sign;
}

macro_rules! compare_methods {
    ($($name:ident, $sname:ident, $op:ident;)*) => {
        impl<T: DType> GpuArray<T> {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` comparison with broadcasting: a `u8` mask.")]
                pub fn $name(&self, other: &GpuArray<T>) -> Result<GpuArray<u8>> {
                    self.compare(CompareOp::$op, other)
                }
                #[doc = concat!("Elementwise `", stringify!($name), "` comparison with a scalar: a `u8` mask.")]
                pub fn $sname(&self, s: T) -> Result<GpuArray<u8>> {
                    self.compare_scalar(CompareOp::$op, s)
                }
            )*
        }
    };
}

compare_methods! {
    eq, eq_scalar, Eq; ne, ne_scalar, Ne; lt, lt_scalar, Lt; le, le_scalar, Le; gt, gt_scalar, Gt;
    ge, ge_scalar, Ge;
}

impl<T: DType> GpuArray<T> {
    /// `s - self`.
    pub fn rsub_scalar(&self, s: T) -> Result<GpuArray<T>> {
        self.binary_scalar(BinaryOp::Sub, s, true)
    }
    /// `s / self`.
    pub fn rdiv_scalar(&self, s: T) -> Result<GpuArray<T>> {
        self.binary_scalar(BinaryOp::Div, s, true)
    }
    /// `isnan` mask (0 for integers).
    pub fn isnan(&self) -> Result<GpuArray<u8>> {
        self.predicate(Predicate::IsNan)
    }
    /// `isinf` mask (0 for integers).
    pub fn isinf(&self) -> Result<GpuArray<u8>> {
        self.predicate(Predicate::IsInf)
    }
    /// `isfinite` mask (1 for integers).
    pub fn isfinite(&self) -> Result<GpuArray<u8>> {
        self.predicate(Predicate::IsFinite)
    }
    /// `logical_not` mask.
    pub fn logical_not(&self) -> Result<GpuArray<u8>> {
        self.predicate(Predicate::LogicalNot)
    }
    /// `logical_and` mask.
    pub fn logical_and(&self, other: &GpuArray<T>) -> Result<GpuArray<u8>> {
        self.logical(LogicalOp::And, other)
    }
    /// `logical_or` mask.
    pub fn logical_or(&self, other: &GpuArray<T>) -> Result<GpuArray<u8>> {
        self.logical(LogicalOp::Or, other)
    }
    /// `logical_xor` mask.
    pub fn logical_xor(&self, other: &GpuArray<T>) -> Result<GpuArray<u8>> {
        self.logical(LogicalOp::Xor, other)
    }
}
