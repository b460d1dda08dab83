//! Elementwise operations with NumPy broadcasting, scalar forms, comparisons, `where` and the
//! `std::ops` operators on references.

use super::GpuArray;
use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use crate::kernels::{self, unary_ops, KernelFile};
use crate::shape;
use gpukit_jit::KernelArg;

/// Binary operations (codes shared with `kernels/elementwise.cu`).
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
}

impl BinaryOp {
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
        }
    }
}

/// Unary operations (codes shared with `kernels/elementwise.cu`).
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
}

impl UnaryOp {
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
        }
    }

    /// True when the operation is defined for element types of `kind`.
    pub fn supports(self, kind: DTypeKind) -> bool {
        unary_ops(kind).contains(&(self as u32))
    }
}

/// Comparisons, producing a `u8` mask of 0 / 1 (codes shared with `kernels/elementwise.cu`).
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

fn same_device<A: DType, B: DType>(op: &str, a: &GpuArray<A>, b: &GpuArray<B>) -> Result<()> {
    if a.dev != b.dev {
        return Err(Error::DeviceMismatch {
            op: op.to_string(),
            lhs: a.dev.ordinal(),
            rhs: b.dev.ordinal(),
        });
    }
    Ok(())
}

impl<T: DType> GpuArray<T> {
    /// `self OP other` with NumPy broadcasting; the error names both shapes.
    pub fn binary(&self, op: BinaryOp, other: &GpuArray<T>) -> Result<GpuArray<T>> {
        let name = op.name();
        same_device(name, self, other)?;
        let out_shape = shape::broadcast_shapes(name, &self.shape, &other.shape)?;
        let stream = self.dev.stream();
        let out = GpuArray::<T>::alloc_on(&self.dev, &out_shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        self.used_on(&stream);
        other.used_on(&stream);
        let op = op as u32;
        if self.shape == other.shape && self.is_contiguous() && other.is_contiguous() {
            let k = self.kernel(
                KernelFile::Elementwise,
                &format!("binary_contig<{}, {op}>", T::NAME),
            )?;
            let vec = 16 / std::mem::size_of::<T>();
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n.div_ceil(vec), 16),
                &[out.arg(), self.arg(), other.arg(), (n as i64).into()],
            )?;
        } else {
            let sa = shape::broadcast_strides(name, &self.shape, &self.strides, &out_shape)?;
            let sb = shape::broadcast_strides(name, &other.shape, &other.strides, &out_shape)?;
            let layout = shape::layout_bytes(name, &out_shape, &[sa, sb])?;
            let k = self.kernel(
                KernelFile::Elementwise,
                &format!("binary_strided<{}, {op}>", T::NAME),
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
            )?;
        }
        Ok(out)
    }

    /// `self OP s`, or `s OP self` when `scalar_left`.
    pub fn binary_scalar(&self, op: BinaryOp, s: T, scalar_left: bool) -> Result<GpuArray<T>> {
        let src = self.contiguous()?;
        let stream = self.dev.stream();
        let out = GpuArray::<T>::alloc_on(&self.dev, &self.shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        src.used_on(&stream);
        let (sf, si) = s.scalar_args();
        let k = self.kernel(
            KernelFile::Elementwise,
            &format!("binary_scalar<{}, {}>", T::NAME, op as u32),
        )?;
        let vec = 16 / std::mem::size_of::<T>();
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n.div_ceil(vec), 16),
            &[
                out.arg(),
                src.arg(),
                sf.into(),
                si.into(),
                (scalar_left as i32).into(),
                (n as i64).into(),
            ],
        )?;
        Ok(out)
    }

    /// Applies a unary operation; [`Error::UnsupportedDType`] for float-only operations on
    /// integer arrays.
    pub fn unary(&self, op: UnaryOp) -> Result<GpuArray<T>> {
        if !op.supports(T::KIND) {
            return Err(Error::UnsupportedDType {
                op: op.name().to_string(),
                dtype: T::RUST_NAME,
            });
        }
        let stream = self.dev.stream();
        let out = GpuArray::<T>::alloc_on(&self.dev, &self.shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        self.used_on(&stream);
        let code = op as u32;
        if self.is_contiguous() {
            let k = self.kernel(
                KernelFile::Elementwise,
                &format!("unary_contig<{}, {code}>", T::NAME),
            )?;
            let vec = 16 / std::mem::size_of::<T>();
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n.div_ceil(vec), 16),
                &[out.arg(), self.arg(), (n as i64).into()],
            )?;
        } else {
            let layout =
                shape::layout_bytes(op.name(), &self.shape, std::slice::from_ref(&self.strides))?;
            let k = self.kernel(
                KernelFile::Elementwise,
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
            )?;
        }
        Ok(out)
    }

    /// Compares elementwise with broadcasting: a `u8` mask of 0 / 1.
    pub fn compare(&self, op: CompareOp, other: &GpuArray<T>) -> Result<GpuArray<u8>> {
        let name = op.name();
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
        let code = op as u32;
        if self.shape == other.shape && self.is_contiguous() && other.is_contiguous() {
            let k = self.kernel(
                KernelFile::Elementwise,
                &format!("compare_contig<{}, {code}>", T::NAME),
            )?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n, 32),
                &[out.arg(), self.arg(), other.arg(), (n as i64).into()],
            )?;
        } else {
            let sa = shape::broadcast_strides(name, &self.shape, &self.strides, &out_shape)?;
            let sb = shape::broadcast_strides(name, &other.shape, &other.strides, &out_shape)?;
            let layout = shape::layout_bytes(name, &out_shape, &[sa, sb])?;
            let k = self.kernel(
                KernelFile::Elementwise,
                &format!("compare_strided<{}, {code}>", T::NAME),
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
            )?;
        }
        Ok(out)
    }

    /// Compares with a scalar (`self OP s`): a `u8` mask.
    pub fn compare_scalar(&self, op: CompareOp, s: T) -> Result<GpuArray<u8>> {
        let src = self.contiguous()?;
        let stream = self.dev.stream();
        let out = GpuArray::<u8>::alloc_on(&self.dev, &self.shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        src.used_on(&stream);
        let (sf, si) = s.scalar_args();
        let k = self.kernel(
            KernelFile::Elementwise,
            &format!("compare_scalar<{}, {}>", T::NAME, op as u32),
        )?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                out.arg(),
                src.arg(),
                sf.into(),
                si.into(),
                0i32.into(),
                (n as i64).into(),
            ],
        )?;
        Ok(out)
    }

    /// `mask ? self : other` elementwise, all three broadcast together.
    pub fn select(mask: &GpuArray<u8>, a: &GpuArray<T>, b: &GpuArray<T>) -> Result<GpuArray<T>> {
        same_device("where", mask, a)?;
        same_device("where", a, b)?;
        let ab = shape::broadcast_shapes("where", &a.shape, &b.shape)?;
        let out_shape = shape::broadcast_shapes("where", &mask.shape, &ab)?;
        let stream = a.dev.stream();
        let out = GpuArray::<T>::alloc_on(&a.dev, &out_shape, &stream)?;
        let n = out.len();
        if n == 0 {
            return Ok(out);
        }
        mask.used_on(&stream);
        a.used_on(&stream);
        b.used_on(&stream);
        let sm = shape::broadcast_strides("where", &mask.shape, &mask.strides, &out_shape)?;
        let sa = shape::broadcast_strides("where", &a.shape, &a.strides, &out_shape)?;
        let sb = shape::broadcast_strides("where", &b.shape, &b.strides, &out_shape)?;
        let layout = shape::layout_bytes("where", &out_shape, &[sm, sa, sb])?;
        let k = a.kernel(
            KernelFile::Elementwise,
            &format!("where_strided<{}>", T::NAME),
        )?;
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
        )?;
        Ok(out)
    }
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
    ($($name:ident, $sname:ident, $op:ident, $doc:literal;)*) => {
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
            )*
        }
    };
}

binary_methods! {
    add, add_scalar, Add, "a + b";
    sub, sub_scalar, Sub, "a - b";
    mul, mul_scalar, Mul, "a * b";
    div, div_scalar, Div, "a / b";
    maximum, maximum_scalar, Maximum, "maximum(a, b)";
    minimum, minimum_scalar, Minimum, "minimum(a, b)";
    pow, pow_scalar, Pow, "a ** b";
}

macro_rules! unary_methods {
    ($($name:ident, $op:ident;)*) => {
        impl<T: DType> GpuArray<T> {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` (see [`UnaryOp`]).")]
                pub fn $name(&self) -> Result<GpuArray<T>> {
                    self.unary(UnaryOp::$op)
                }
            )*
        }
    };
}

unary_methods! {
    neg, Neg; abs, Abs; exp, Exp; log, Log; sqrt, Sqrt; tanh, Tanh; relu, Relu; sigmoid, Sigmoid;
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
}

macro_rules! std_ops {
    ($($tr:ident, $m:ident, $op:ident;)*) => {$(
        impl<T: DType> std::ops::$tr<&GpuArray<T>> for &GpuArray<T> {
            type Output = Result<GpuArray<T>>;
            fn $m(self, rhs: &GpuArray<T>) -> Self::Output {
                self.binary(BinaryOp::$op, rhs)
            }
        }
        impl<T: DType> std::ops::$tr<T> for &GpuArray<T> {
            type Output = Result<GpuArray<T>>;
            fn $m(self, rhs: T) -> Self::Output {
                self.binary_scalar(BinaryOp::$op, rhs, false)
            }
        }
    )*};
}

std_ops! { Add, add, Add; Sub, sub, Sub; Mul, mul, Mul; Div, div, Div; }

impl<T: DType> std::ops::Neg for &GpuArray<T> {
    type Output = Result<GpuArray<T>>;
    fn neg(self) -> Self::Output {
        self.unary(UnaryOp::Neg)
    }
}
