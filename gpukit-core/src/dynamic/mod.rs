//! Arrays whose element type is chosen at run time: [`DynArray`], with NumPy's type promotion
//! ([`ElementType`], [`Scalar`]).
//!
//! `GpuArray<T>` fixes its element type at compile time, as Rust code wants. A dynamic language
//! (the Python package is this module's first user) holds arrays of any type behind one value
//! and expects NumPy's rules: `int32 + float32` is `float64`, `uint8_array * 2` stays `uint8`,
//! comparisons give `bool`, `sum` of `int32` is `int64`, `exp` of `uint8` is `float16`. Every
//! operation here promotes its operands ([`element`]), converts them when needed (one cast
//! kernel per converted operand) and runs the typed operation of [`GpuArray`]: the kernels,
//! broadcasting, views and errors are the typed layer's own.
//!
//! - [`element`]: [`ElementType`] and promotion, [`Scalar`] (weak Python scalars and strong
//!   NumPy scalars);
//! - this module: construction, host copies, views, conversion;
//! - [`ops`]: arithmetic, true and floor division, comparisons, logic, math functions, `where`,
//!   `clip`, with `bool` behaving as NumPy's (`+` is `or`, `*` is `and`, `-` is an error);
//! - [`reduce`]: reductions over any axes with `keepdims`, cumulative sums and products, and
//!   `matmul`.
//!
//! ```no_run
//! use gpukit_core::dynamic::ops::{arith, Arith, Operand};
//! use gpukit_core::dynamic::{DynArray, ElementType, Scalar};
//! use gpukit_core::Device;
//! let dev = Device::open(0)?;
//! let a = DynArray::arange(&dev, 0.0, 6.0, 1.0, ElementType::I32)?.reshape(&[2, 3])?;
//! let b = DynArray::full(&dev, &[3], ElementType::F32, &Scalar::float(0.5))?;
//! // int32 / float32 -> float64, broadcast
//! let c = arith(Arith::TrueDivide, Operand::Array(&a), Operand::Array(&b))?;
//! assert_eq!(c.dtype(), ElementType::F64);
//! let s = c.reduce(gpukit_core::ReduceOp::Sum, Some(&[1]), true, 0)?;
//! assert_eq!(s.shape(), &[2, 1]);
//! # Ok::<(), gpukit_core::Error>(())
//! ```

pub mod custom;
pub mod element;
pub mod foreign;
pub mod index;
pub mod ops;
pub mod reduce;

pub use element::{ElementKind, ElementType, Scalar, ScalarValue};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::slice::Index;
use crate::GpuArray;
use half::{bf16, f16};

/// An array of any element type (see the module docs). Cloning makes another view of the same
/// memory, as for [`GpuArray`].
#[derive(Clone, Debug)]
pub enum DynArray {
    /// `bool`: bytes holding 0 or 1.
    Bool(GpuArray<u8>),
    /// `uint8`.
    U8(GpuArray<u8>),
    /// `int32`.
    I32(GpuArray<i32>),
    /// `uint32`.
    U32(GpuArray<u32>),
    /// `int64`.
    I64(GpuArray<i64>),
    /// `uint64`.
    U64(GpuArray<u64>),
    /// `float16`.
    F16(GpuArray<f16>),
    /// `bfloat16`.
    BF16(GpuArray<bf16>),
    /// `float32`.
    F32(GpuArray<f32>),
    /// `float64`.
    F64(GpuArray<f64>),
}

/// Runs `$body` with `$x` bound to the typed array inside `$a` (a `&DynArray` or `DynArray`),
/// whatever its type; `$body` must have one type for all of them.
macro_rules! with {
    ($a:expr, $x:ident => $body:expr) => {
        match $a {
            DynArray::Bool($x) | DynArray::U8($x) => $body,
            DynArray::I32($x) => $body,
            DynArray::U32($x) => $body,
            DynArray::I64($x) => $body,
            DynArray::U64($x) => $body,
            DynArray::F16($x) => $body,
            DynArray::BF16($x) => $body,
            DynArray::F32($x) => $body,
            DynArray::F64($x) => $body,
        }
    };
}

/// Like [`with!`], where `$body` gives a `Result<GpuArray<T>>` of the same `T`, re-wrapped in
/// the same variant (`bool` stays `bool`).
macro_rules! same {
    ($a:expr, $x:ident => $body:expr) => {
        match $a {
            DynArray::Bool($x) => $body.map(DynArray::Bool),
            DynArray::U8($x) => $body.map(DynArray::U8),
            DynArray::I32($x) => $body.map(DynArray::I32),
            DynArray::U32($x) => $body.map(DynArray::U32),
            DynArray::I64($x) => $body.map(DynArray::I64),
            DynArray::U64($x) => $body.map(DynArray::U64),
            DynArray::F16($x) => $body.map(DynArray::F16),
            DynArray::BF16($x) => $body.map(DynArray::BF16),
            DynArray::F32($x) => $body.map(DynArray::F32),
            DynArray::F64($x) => $body.map(DynArray::F64),
        }
    };
}

/// Runs a generic body once for the static type of `$t` (an [`ElementType`]): `$body` sees a
/// type alias `$T`.
macro_rules! for_type {
    ($t:expr, $T:ident => $body:expr) => {
        match $t {
            ElementType::Bool | ElementType::U8 => {
                type $T = u8;
                $body
            }
            ElementType::I32 => {
                type $T = i32;
                $body
            }
            ElementType::U32 => {
                type $T = u32;
                $body
            }
            ElementType::I64 => {
                type $T = i64;
                $body
            }
            ElementType::U64 => {
                type $T = u64;
                $body
            }
            ElementType::F16 => {
                type $T = half::f16;
                $body
            }
            ElementType::BF16 => {
                type $T = half::bf16;
                $body
            }
            ElementType::F32 => {
                type $T = f32;
                $body
            }
            ElementType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}

pub(crate) use {for_type, same, with};

impl DynArray {
    /// Wraps a typed array (`u8` as `uint8`; see [`DynArray::bool_mask`] for masks).
    pub fn from_typed<T: DType>(a: GpuArray<T>) -> DynArray {
        T::into_dyn(a)
    }

    /// Wraps a `u8` array of 0 / 1 values (a mask from a comparison) as `bool`.
    pub fn bool_mask(mask: GpuArray<u8>) -> DynArray {
        DynArray::Bool(mask)
    }

    /// Wraps `a` as element type `t`, which must be `a`'s own (or `bool` for `u8`).
    fn wrap_as<T: DType>(a: GpuArray<T>, t: ElementType) -> DynArray {
        match (DynArray::from_typed(a), t) {
            (DynArray::U8(m), ElementType::Bool) => DynArray::Bool(m),
            (d, _) => d,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> ElementType {
        match self {
            DynArray::Bool(_) => ElementType::Bool,
            DynArray::U8(_) => ElementType::U8,
            DynArray::I32(_) => ElementType::I32,
            DynArray::U32(_) => ElementType::U32,
            DynArray::I64(_) => ElementType::I64,
            DynArray::U64(_) => ElementType::U64,
            DynArray::F16(_) => ElementType::F16,
            DynArray::BF16(_) => ElementType::BF16,
            DynArray::F32(_) => ElementType::F32,
            DynArray::F64(_) => ElementType::F64,
        }
    }

    /// The typed array when the element type is `T` (`u8` for both `bool` and `uint8`).
    pub fn as_typed<T: DType>(&self) -> Option<&GpuArray<T>> {
        with!(self, a => (a as &dyn std::any::Any).downcast_ref::<GpuArray<T>>())
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        with!(self, a => a.shape())
    }

    /// Element strides (NumPy's strides divided by the item size).
    pub fn strides(&self) -> &[isize] {
        with!(self, a => a.strides())
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with!(self, a => a.len())
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per element.
    pub fn itemsize(&self) -> usize {
        self.dtype().itemsize()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        with!(self, a => a.device())
    }

    /// Device address of the first element.
    pub fn device_ptr(&self) -> u64 {
        with!(self, a => a.device_ptr())
    }

    /// Whether the layout is dense row-major.
    pub fn is_contiguous(&self) -> bool {
        with!(self, a => a.is_contiguous())
    }

    /// The device addresses the elements occupy.
    pub fn byte_range(&self) -> std::ops::Range<u64> {
        with!(self, a => a.byte_range())
    }

    /// Whether this array and `other` share device memory.
    pub fn overlaps(&self, other: &DynArray) -> bool {
        gpukit_jit::typed::ranges_overlap(&self.byte_range(), &other.byte_range())
    }

    /// The array as a read-only argument of a checked kernel launch (gpukit-jit's typed
    /// launch checks its element type against the kernel's parameter).
    pub fn as_arg(&self) -> gpukit_jit::Arg<'_> {
        with!(self, a => gpukit_jit::Arg::from(a))
    }

    /// The array as a written argument of a checked kernel launch.
    pub fn as_arg_mut(&mut self) -> gpukit_jit::Arg<'_> {
        with!(self, a => gpukit_jit::Arg::from(a))
    }

    /// An uninitialised array.
    pub fn empty(dev: &Device, shape: &[usize], t: ElementType) -> Result<DynArray> {
        for_type!(t, T => GpuArray::<T>::empty(dev, shape).map(|a| Self::wrap_as(a, t)))
    }

    /// An array of zeros (`False` for `bool`).
    pub fn zeros(dev: &Device, shape: &[usize], t: ElementType) -> Result<DynArray> {
        for_type!(t, T => GpuArray::<T>::zeros(dev, shape).map(|a| Self::wrap_as(a, t)))
    }

    /// An array of ones (`True` for `bool`).
    pub fn ones(dev: &Device, shape: &[usize], t: ElementType) -> Result<DynArray> {
        for_type!(t, T => GpuArray::<T>::ones(dev, shape).map(|a| Self::wrap_as(a, t)))
    }

    /// An array filled with `value` converted to `t` (an integer that `t` cannot hold is an
    /// error, as NumPy's `full` raises).
    pub fn full(dev: &Device, shape: &[usize], t: ElementType, value: &Scalar) -> Result<DynArray> {
        check_fits(value, t)?;
        if t == ElementType::Bool {
            return GpuArray::<u8>::full(dev, shape, value.truth() as u8).map(DynArray::Bool);
        }
        for_type!(t, T => GpuArray::<T>::full(dev, shape, value.to::<T>()).map(|a| Self::wrap_as(a, t)))
    }

    /// `numpy.arange(start, stop, step, dtype=t)`: computed in `t` (integers exactly).
    pub fn arange(
        dev: &Device,
        start: f64,
        stop: f64,
        step: f64,
        t: ElementType,
    ) -> Result<DynArray> {
        if t == ElementType::Bool {
            return Err(Error::UnsupportedDType {
                op: "arange".into(),
                dtype: "bool",
            });
        }
        for_type!(t, T => GpuArray::<T>::arange(dev, T::from_f64(start), T::from_f64(stop), T::from_f64(step))
            .map(|a| Self::wrap_as(a, t)))
    }

    /// An array of `shape` and type `t` from its elements' bytes in row-major order (native
    /// byte order). `bytes` needs no particular alignment.
    pub fn from_bytes(
        dev: &Device,
        bytes: &[u8],
        shape: &[usize],
        t: ElementType,
    ) -> Result<DynArray> {
        let n = crate::shape::numel("from_bytes", shape)?;
        let want = n
            .checked_mul(t.itemsize())
            .ok_or_else(|| Error::invalid("from_bytes", format!("shape {shape:?} is too large")))?;
        if bytes.len() != want {
            return Err(Error::invalid(
                "from_bytes",
                format!(
                    "{} bytes given for shape {shape:?} of {t} ({want} bytes expected)",
                    bytes.len()
                ),
            ));
        }
        for_type!(t, T => {
            let a = match bytemuck::try_cast_slice::<u8, T>(bytes) {
                Ok(data) => GpuArray::<T>::from_slice(dev, data, shape)?,
                Err(_) => {
                    let data: Vec<T> = bytemuck::pod_collect_to_vec(bytes);
                    GpuArray::<T>::from_slice(dev, &data, shape)?
                }
            };
            Ok(Self::wrap_as(a, t))
        })
    }

    /// Copies the elements (row-major, native byte order) into `out`, which must hold exactly
    /// `len() * itemsize()` bytes (any alignment). Waits for the work that produces them.
    pub fn copy_to_bytes(&self, out: &mut [u8]) -> Result<()> {
        let want = self.len() * self.itemsize();
        if out.len() != want {
            return Err(Error::invalid(
                "copy_to_bytes",
                format!(
                    "{} bytes of room for {} elements of {} ({want} bytes needed)",
                    out.len(),
                    self.len(),
                    self.dtype()
                ),
            ));
        }
        // a large fresh buffer (NumPy's allocation for to_numpy) faults 2 MiB at a time
        crate::array::advise_huge_pages(out);
        with!(self, a => match bytemuck::try_cast_slice_mut(out) {
            Ok(typed) => a.copy_to_host(typed),
            Err(_) => {
                let v = a.to_vec()?;
                out.copy_from_slice(bytemuck::cast_slice(&v));
                Ok(())
            }
        })
    }

    /// The single element of a one-element array, as a strong scalar of this array's type.
    pub fn item(&self) -> Result<Scalar> {
        let t = self.dtype();
        let s = with!(self, a => {
            let v = a.item()?;
            if t.is_float() {
                Scalar::float(v.to_f64())
            } else if t == ElementType::Bool {
                Scalar::bool(v.to_i64() != 0)
            } else if t == ElementType::U64 {
                // exact: u64 beyond i64::MAX
                Scalar::int(v.to_i64() as u64 as i128)
            } else {
                Scalar::int(v.to_i64() as i128)
            }
        });
        Ok(s.typed(t))
    }

    /// A fresh contiguous array of element type `t` (NumPy's `astype`): conversions follow C
    /// (floats to integers truncate); to `bool` gives `x != 0` (NaN is true).
    pub fn astype(&self, t: ElementType) -> Result<DynArray> {
        if t == self.dtype() {
            return self.copy();
        }
        if t == ElementType::Bool {
            return with!(self, a => a.compare_scalar(crate::CompareOp::Ne, DType::zero()))
                .map(DynArray::Bool);
        }
        // a bool array holds 0 / 1, which every type converts exactly
        with!(self, a => for_type!(t, T => a.astype::<T>().map(|x| Self::wrap_as(x, t))))
    }

    /// This array as element type `t`: itself (no copy) when it already is.
    pub fn to_type(&self, t: ElementType) -> Result<DynArray> {
        if t == self.dtype() {
            Ok(self.clone())
        } else {
            self.astype(t)
        }
    }

    /// A fresh contiguous copy.
    pub fn copy(&self) -> Result<DynArray> {
        same!(self, a => a.astype())
    }

    /// A contiguous array with the same elements (itself when already contiguous).
    pub fn contiguous(&self) -> Result<DynArray> {
        same!(self, a => a.contiguous())
    }

    /// Another shape (a view when contiguous); one extent may be `usize::MAX` (NumPy's `-1`).
    pub fn reshape(&self, shape: &[usize]) -> Result<DynArray> {
        same!(self, a => a.reshape(shape))
    }

    /// The axes reversed (a view).
    pub fn transpose(&self) -> DynArray {
        match self {
            DynArray::Bool(a) => DynArray::Bool(a.transpose()),
            DynArray::U8(a) => DynArray::U8(a.transpose()),
            DynArray::I32(a) => DynArray::I32(a.transpose()),
            DynArray::U32(a) => DynArray::U32(a.transpose()),
            DynArray::I64(a) => DynArray::I64(a.transpose()),
            DynArray::U64(a) => DynArray::U64(a.transpose()),
            DynArray::F16(a) => DynArray::F16(a.transpose()),
            DynArray::BF16(a) => DynArray::BF16(a.transpose()),
            DynArray::F32(a) => DynArray::F32(a.transpose()),
            DynArray::F64(a) => DynArray::F64(a.transpose()),
        }
    }

    /// The axes reordered (a view).
    pub fn permute(&self, perm: &[usize]) -> Result<DynArray> {
        same!(self, a => a.permute(perm))
    }

    /// Two axes exchanged (a view).
    pub fn swapaxes(&self, x: isize, y: isize) -> Result<DynArray> {
        same!(self, a => a.swapaxes(x, y))
    }

    /// NumPy's basic indexing (a view).
    pub fn slice(&self, index: &[Index]) -> Result<DynArray> {
        same!(self, a => a.slice(index))
    }

    /// Axes of length 1 removed (all, or the ones named).
    pub fn squeeze(&self, axes: Option<&[isize]>) -> Result<DynArray> {
        same!(self, a => a.squeeze(axes))
    }

    /// A new axis of length 1.
    pub fn unsqueeze(&self, axis: isize) -> Result<DynArray> {
        same!(self, a => a.unsqueeze(axis))
    }

    /// This array read as `shape` under broadcasting (a read-only view).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<DynArray> {
        same!(self, a => a.broadcast_to(shape))
    }

    /// The elements as one axis (a view when contiguous).
    pub fn ravel(&self) -> Result<DynArray> {
        same!(self, a => a.ravel())
    }

    /// Copies `src` (converted to this array's type, broadcast to its shape) into this array
    /// through its strides (NumPy's `self[...] = src`).
    pub fn assign(&self, src: &DynArray) -> Result<()> {
        let src = if src.dtype() == self.dtype() {
            src.clone()
        } else {
            src.astype(self.dtype())?
        };
        let mut dst = self.clone();
        match (&mut dst, &src) {
            (DynArray::Bool(d), DynArray::Bool(s)) | (DynArray::U8(d), DynArray::U8(s)) => {
                d.copy_from(s)
            }
            (DynArray::I32(d), DynArray::I32(s)) => d.copy_from(s),
            (DynArray::U32(d), DynArray::U32(s)) => d.copy_from(s),
            (DynArray::I64(d), DynArray::I64(s)) => d.copy_from(s),
            (DynArray::U64(d), DynArray::U64(s)) => d.copy_from(s),
            (DynArray::F16(d), DynArray::F16(s)) => d.copy_from(s),
            (DynArray::BF16(d), DynArray::BF16(s)) => d.copy_from(s),
            (DynArray::F32(d), DynArray::F32(s)) => d.copy_from(s),
            (DynArray::F64(d), DynArray::F64(s)) => d.copy_from(s),
            _ => Err(mismatch("assign", self, &src)),
        }
    }

    /// Fills this array (through its strides) with `value` converted to its type.
    pub fn fill(&self, value: &Scalar) -> Result<()> {
        let t = self.dtype();
        check_fits(value, t)?;
        let mut dst = self.clone();
        if let DynArray::Bool(m) = &mut dst {
            return m.fill(value.truth() as u8);
        }
        with!(&mut dst, a => a.fill(value.to()))
    }
}

/// The error for two operands that should have had one element type after promotion.
pub(crate) fn mismatch(op: &str, a: &DynArray, b: &DynArray) -> Error {
    Error::DTypeMismatch {
        op: op.to_string(),
        lhs: a.dtype().name(),
        rhs: b.dtype().name(),
    }
}

/// An integer scalar must fit an integer element type it is stored as.
pub(crate) fn check_fits(value: &Scalar, t: ElementType) -> Result<()> {
    if let (ScalarValue::Int(v), true) = (value.value, t.is_integer()) {
        if !t.holds(v) {
            return Err(Error::ScalarOutOfRange {
                value: v.to_string(),
                dtype: t.name(),
            });
        }
    }
    Ok(())
}
