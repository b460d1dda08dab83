//! `gpukit.Array`: a GPU array of any supported element type (gpukit-core's `DynArray`), with
//! NumPy's operators, result types and indexing, and host copies through the `numpy` crate.
//!
//! The object is immutable as a Python value (shape, type and memory are fixed; views share
//! memory), so it needs no lock: several Python threads may use one array at once. Work is
//! queued on the calling thread's current stream of the array's device (inside a scheduler task,
//! the task's stream). The GIL is released while a copy to or from the host, or a wait for the
//! GPU, is in progress.

use crate::convert::{self, Advanced, Key, Operand};
use crate::dtype::{numpy_dtype, DType};
use crate::errors::{index_err, CoreResult};
use gpukit_core::dynamic::ops::{self as dops, Arith};
use gpukit_core::dynamic::{DynArray, ElementType, Scalar, ScalarValue};
use gpukit_core::{CompareOp, Device, LogicalOp, Predicate, ReduceOp, ScanOp, UnaryOp};
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::basic::CompareOp as PyCompareOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The device new arrays are made on (`gpukit.set_device`).
static DEFAULT_DEVICE: AtomicUsize = AtomicUsize::new(0);

/// The device `ordinal`, or the default device.
pub fn device(ordinal: Option<usize>) -> PyResult<Device> {
    Device::open(ordinal.unwrap_or_else(|| DEFAULT_DEVICE.load(Ordering::Relaxed))).py()
}

/// Makes device `ordinal` the default for new arrays.
#[pyfunction]
pub fn set_device(ordinal: usize) -> PyResult<()> {
    device(Some(ordinal))?;
    DEFAULT_DEVICE.store(ordinal, Ordering::Relaxed);
    Ok(())
}

/// An n-dimensional array in GPU memory.
///
/// Made by ``zeros``, ``ones``, ``empty``, ``full``, ``arange``, ``asarray``, ``from_numpy``,
/// ``from_dlpack`` and by operations on arrays. Operators and functions follow NumPy:
/// broadcasting, result types (``int32 + float32`` is ``float64``; a Python number does not
/// widen an array: ``float32_array * 2.0`` stays ``float32``), views for basic indexing.
/// ``to_numpy()`` copies to the host; ``__dlpack__`` and ``__cuda_array_interface__`` share the
/// memory with PyTorch, CuPy and others without a copy.
#[pyclass(module = "gpukit", name = "Array", frozen, weakref)]
pub struct Array {
    pub(crate) a: DynArray,
}

impl Array {
    /// Wraps an array.
    pub fn new(a: DynArray) -> Array {
        Array { a }
    }
}

/// The result of an operation as a Python object.
fn out(py: Python<'_>, r: gpukit_core::Result<DynArray>) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Array::new(r.py()?))?.into_any())
}

/// Copies a host array (anything NumPy converts) to a new GPU array on `dev`, converted to
/// `dtype` when given.
pub fn upload(
    py: Python<'_>,
    host: &Bound<'_, PyAny>,
    dev: &Device,
    dtype: Option<ElementType>,
) -> PyResult<DynArray> {
    let np = py.import("numpy")?;
    // C order without numpy.ascontiguousarray, which makes 0-d arrays 1-d
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("order", "C")?;
    if let Some(t) = dtype {
        kwargs.set_item("dtype", numpy_dtype(py, t)?)?;
    }
    let arr = np.call_method("asarray", (host,), Some(&kwargs))?;
    let untyped = arr.cast::<PyUntypedArray>()?;
    let name: String = untyped.dtype().getattr("name")?.extract()?;
    let t = ElementType::parse(&name).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "NumPy arrays of {name} cannot be moved to the GPU: gpukit supports bool, uint8, \
             int32, uint32, int64, uint64, float16, bfloat16, float32, float64 (convert with \
             .astype first)"
        ))
    })?;
    if !untyped.dtype().getattr("isnative")?.extract::<bool>()? {
        return Err(PyValueError::new_err(
            "big-endian data cannot be moved to the GPU; convert with .astype(x.dtype.newbyteorder('='))",
        ));
    }
    let shape: Vec<usize> = untyped.shape().to_vec();
    macro_rules! go {
        ($T:ty) => {{
            let typed = arr.cast::<PyArrayDyn<$T>>()?.readonly();
            let data = typed
                .as_slice()
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            let bytes: &[u8] = bytes_of(data);
            let dev = dev.clone();
            py.detach(move || DynArray::from_bytes(&dev, bytes, &shape, t))
                .py()
        }};
    }
    match t {
        ElementType::Bool => go!(bool),
        ElementType::U8 => go!(u8),
        ElementType::I32 => go!(i32),
        ElementType::U32 => go!(u32),
        ElementType::I64 => go!(i64),
        ElementType::U64 => go!(u64),
        ElementType::F16 => go!(half::f16),
        ElementType::BF16 => go!(half::bf16),
        ElementType::F32 => go!(f32),
        ElementType::F64 => go!(f64),
    }
}

/// The bytes of a slice of plain numbers.
fn bytes_of<T: Copy>(data: &[T]) -> &[u8] {
    // SAFETY: the element types used here (bool, integers, floats, half types) have no padding
    // and every byte of them is initialised; the byte slice covers exactly the same memory and
    // borrows it for the same lifetime.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The elements of `a` in a new NumPy array (waits for the GPU with the GIL released).
pub fn download<'py>(py: Python<'py>, a: &DynArray) -> PyResult<Bound<'py, PyAny>> {
    macro_rules! go {
        ($T:ty) => {{
            // SAFETY: the array is created uninitialised and every element is written by the
            // copy below before it is returned to Python; nothing reads it before then (it is
            // not yet visible to any other code).
            let arr = unsafe { PyArrayDyn::<$T>::new(py, a.shape().to_vec(), false) };
            {
                let mut rw = arr.readwrite();
                let slice = rw
                    .as_slice_mut()
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                // SAFETY: as in bytes_of; writing any bytes into these element types is fine
                // except for bool, whose bytes the copy fills with 0 / 1 only (the GPU array
                // of a bool holds 0 or 1).
                let bytes: &mut [u8] = unsafe {
                    std::slice::from_raw_parts_mut(
                        slice.as_mut_ptr().cast::<u8>(),
                        std::mem::size_of_val(slice),
                    )
                };
                let src = a.clone();
                py.detach(move || src.copy_to_bytes(bytes)).py()?;
            }
            Ok(arr.into_any())
        }};
    }
    match a.dtype() {
        ElementType::Bool => go!(bool),
        ElementType::U8 => go!(u8),
        ElementType::I32 => go!(i32),
        ElementType::U32 => go!(u32),
        ElementType::I64 => go!(i64),
        ElementType::U64 => go!(u64),
        ElementType::F16 => go!(half::f16),
        ElementType::BF16 => {
            // NumPy knows bfloat16 only through ml_dtypes: check first for a clear message
            numpy_dtype(py, ElementType::BF16)?;
            let _ = <half::bf16 as Element>::get_dtype(py);
            go!(half::bf16)
        }
        ElementType::F32 => go!(f32),
        ElementType::F64 => go!(f64),
    }
}

fn scalar_to_py(py: Python<'_>, s: &Scalar) -> PyResult<Py<PyAny>> {
    let t = s.dtype.unwrap_or(ElementType::F64);
    // NumPy scalars of the array's type, as NumPy's own indexing returns them
    let np = py.import("numpy")?;
    let value: Py<PyAny> = match s.value {
        ScalarValue::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        ScalarValue::Int(v) => v.into_pyobject(py)?.into_any().unbind(),
        ScalarValue::Float(v) => v.into_pyobject(py)?.into_any().unbind(),
    };
    if t == ElementType::BF16 {
        return Ok(value);
    }
    Ok(np.getattr(t.name())?.call1((value,))?.unbind())
}

fn py_arith(
    py: Python<'_>,
    op: Arith,
    lhs: &Bound<'_, PyAny>,
    rhs: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let (Some(a), Some(b)) = (convert::operand(lhs)?, convert::operand(rhs)?) else {
        return Ok(py.NotImplemented());
    };
    out(py, dops::arith(op, a.as_ref(), b.as_ref()))
}

fn py_compare(
    py: Python<'_>,
    op: CompareOp,
    lhs: &Bound<'_, PyAny>,
    rhs: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let (Some(a), Some(b)) = (convert::operand(lhs)?, convert::operand(rhs)?) else {
        return Ok(py.NotImplemented());
    };
    out(py, dops::compare(op, a.as_ref(), b.as_ref()))
}

fn reduce_args(axis: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<isize>>> {
    convert::axes(axis)
}

#[pymethods]
impl Array {
    /// The dimensions.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.a.shape())
    }

    /// The element type (a ``gpukit.DType``, equal to its NumPy name and dtype).
    #[getter]
    fn dtype(&self) -> DType {
        DType(self.a.dtype())
    }

    /// Number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.a.len()
    }

    /// Number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.a.ndim()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.a.itemsize()
    }

    /// Bytes of the elements (``size * itemsize``).
    #[getter]
    fn nbytes(&self) -> usize {
        self.a.len() * self.a.itemsize()
    }

    /// Strides in bytes, as NumPy's.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let s: Vec<isize> = self
            .a
            .strides()
            .iter()
            .map(|&x| x * self.a.itemsize() as isize)
            .collect();
        PyTuple::new(py, s)
    }

    /// The CUDA device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.a.device().ordinal()
    }

    /// The transpose (axes reversed; a view).
    #[getter]
    #[pyo3(name = "T")]
    fn t(&self) -> Array {
        Array::new(self.a.transpose())
    }

    /// Whether the elements are laid out densely in row-major order.
    #[getter]
    fn is_contiguous(&self) -> bool {
        self.a.is_contiguous()
    }

    /// A NumPy array with a copy of the elements.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        download(py, &self.a)
    }

    /// CuPy's name for :meth:`to_numpy`.
    fn get<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        download(py, &self.a)
    }

    /// NumPy's array protocol: ``numpy.asarray(gpu_array)`` copies to the host.
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(false) {
            return Err(PyValueError::new_err(
                "a GPU array cannot be viewed as a NumPy array without a copy",
            ));
        }
        let host = download(py, &self.a)?;
        match dtype {
            Some(d) if !d.is_none() => host.call_method1("astype", (d,)),
            _ => Ok(host),
        }
    }

    /// The elements as nested Python lists.
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        download(py, &self.a)?.call_method0("tolist")
    }

    /// The single element as a NumPy scalar.
    fn item(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let a = self.a.clone();
        let s = py.detach(move || a.item()).py()?;
        scalar_to_py(py, &s)?
            .bind(py)
            .call_method0("item")
            .map(|x| x.unbind())
    }

    /// A copy converted to ``dtype`` (with ``copy=False``, this array itself when it already
    /// has that type).
    #[pyo3(signature = (dtype, copy=true))]
    fn astype(&self, dtype: &Bound<'_, PyAny>, copy: bool) -> PyResult<Array> {
        let t = convert::element_type(Some(dtype), self.a.dtype())?;
        let r = if copy {
            self.a.astype(t)
        } else {
            self.a.to_type(t)
        };
        Ok(Array::new(r.py()?))
    }

    /// A copy on device ``device`` (a peer copy between GPUs where the hardware allows).
    fn to_device(&self, device: usize) -> PyResult<Array> {
        let dev = self::device(Some(device))?;
        Ok(Array::new(self.a.to_device(&dev).py()?))
    }

    /// A copy.
    fn copy(&self) -> PyResult<Array> {
        Ok(Array::new(self.a.copy().py()?))
    }

    /// The same elements with another shape (``-1`` infers one extent); a view when the array
    /// is contiguous.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<Array> {
        let s = if shape.len() == 1 {
            convert::shape(&shape.get_item(0)?, true)?
        } else {
            convert::shape(shape.as_any(), true)?
        };
        Ok(Array::new(self.a.reshape(&s).py()?))
    }

    /// The axes permuted (reversed without arguments); a view.
    #[pyo3(signature = (*axes))]
    fn transpose(&self, axes: &Bound<'_, PyTuple>) -> PyResult<Array> {
        if axes.is_empty() {
            return Ok(Array::new(self.a.transpose()));
        }
        let list: Vec<isize> =
            if axes.len() == 1 && !axes.get_item(0)?.is_instance_of::<pyo3::types::PyInt>() {
                axes.get_item(0)?.extract()?
            } else {
                axes.extract()?
            };
        let nd = self.a.ndim() as isize;
        let perm: Vec<usize> = list
            .iter()
            .map(|&x| if x < 0 { (x + nd) as usize } else { x as usize })
            .collect();
        Ok(Array::new(self.a.permute(&perm).py()?))
    }

    /// Two axes exchanged (a view).
    fn swapaxes(&self, axis1: isize, axis2: isize) -> PyResult<Array> {
        Ok(Array::new(self.a.swapaxes(axis1, axis2).py()?))
    }

    /// The elements as one axis (a view when contiguous).
    fn ravel(&self) -> PyResult<Array> {
        Ok(Array::new(self.a.ravel().py()?))
    }

    /// A one-dimensional copy of the elements.
    fn flatten(&self) -> PyResult<Array> {
        Ok(Array::new(self.a.ravel().and_then(|r| r.copy()).py()?))
    }

    /// Axes of length 1 removed (all, or those named).
    #[pyo3(signature = (axis=None))]
    fn squeeze(&self, axis: Option<&Bound<'_, PyAny>>) -> PyResult<Array> {
        let axes = convert::axes(axis)?;
        Ok(Array::new(self.a.squeeze(axes.as_deref()).py()?))
    }

    /// Fills the array with ``value``.
    fn fill(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let s =
            convert::scalar(value)?.ok_or_else(|| PyTypeError::new_err("fill takes a number"))?;
        self.a.fill(&s).py()
    }

    /// Sum over ``axis`` (None: all); integers widen to 64 bits.
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn sum(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Sum, axis, keepdims, 0)
    }

    /// Product over ``axis``.
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn prod(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Prod, axis, keepdims, 0)
    }

    /// Mean over ``axis`` (float64 for integers).
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn mean(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Mean, axis, keepdims, 0)
    }

    /// Maximum over ``axis`` (NaN propagates).
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn max(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Max, axis, keepdims, 0)
    }

    /// Minimum over ``axis`` (NaN propagates).
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn min(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Min, axis, keepdims, 0)
    }

    /// Whether any element is nonzero.
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn any(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Any, axis, keepdims, 0)
    }

    /// Whether every element is nonzero.
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn all(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::All, axis, keepdims, 0)
    }

    /// Variance over ``axis`` with ``ddof`` delta degrees of freedom.
    #[pyo3(signature = (axis=None, keepdims=false, ddof=0))]
    fn var(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        ddof: usize,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Var, axis, keepdims, ddof)
    }

    /// Standard deviation over ``axis``.
    #[pyo3(signature = (axis=None, keepdims=false, ddof=0))]
    fn std(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        ddof: usize,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::Std, axis, keepdims, ddof)
    }

    /// Index of the maximum (flat without ``axis``).
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn argmax(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::ArgMax, axis, keepdims, 0)
    }

    /// Index of the minimum (flat without ``axis``).
    #[pyo3(signature = (axis=None, keepdims=false))]
    fn argmin(
        &self,
        py: Python<'_>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Py<PyAny>> {
        self.reduce(py, ReduceOp::ArgMin, axis, keepdims, 0)
    }

    /// Cumulative sum along ``axis`` (None: of the flattened array).
    #[pyo3(signature = (axis=None))]
    fn cumsum(&self, axis: Option<isize>) -> PyResult<Array> {
        Ok(Array::new(self.a.scan(ScanOp::Sum, axis).py()?))
    }

    /// Cumulative product along ``axis``.
    #[pyo3(signature = (axis=None))]
    fn cumprod(&self, axis: Option<isize>) -> PyResult<Array> {
        Ok(Array::new(self.a.scan(ScanOp::Prod, axis).py()?))
    }

    /// Values limited to ``[min, max]`` (either may be None).
    #[pyo3(signature = (min=None, max=None))]
    fn clip(
        &self,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Array> {
        let bound = |o: Option<&Bound<'_, PyAny>>| -> PyResult<Option<Scalar>> {
            match o {
                None => Ok(None),
                Some(v) if v.is_none() => Ok(None),
                Some(v) => convert::scalar(v)?
                    .map(Some)
                    .ok_or_else(|| PyTypeError::new_err("clip bounds must be numbers")),
            }
        };
        Ok(Array::new(self.a.clip(bound(min)?, bound(max)?).py()?))
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        // positions out of range are IndexErrors, as in NumPy
        let r = match convert::key(key, self.a.device())? {
            Key::Basic(idx) => self.a.slice(&idx).map_err(index_err)?,
            Key::Advanced(Advanced::Mask(m)) => self.a.masked_select(&m).py()?,
            Key::Advanced(Advanced::Take(i)) => self.a.take(&i, 0).map_err(index_err)?,
        };
        Ok(Py::new(py, Array::new(r))?.into_any())
    }

    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let v = convert::required_operand(value, "setitem").or_else(|_| -> PyResult<Operand> {
            let np = value.py().import("numpy")?;
            let host = np.call_method1("asarray", (value,))?;
            Ok(Operand::Array(upload(
                value.py(),
                &host,
                self.a.device(),
                Some(self.a.dtype()),
            )?))
        })?;
        match convert::key(key, self.a.device())? {
            Key::Basic(idx) => {
                let view = self.a.slice(&idx).map_err(index_err)?;
                match v {
                    Operand::Array(src) => view.assign(&src).py(),
                    Operand::Scalar(s) => view.fill(&s).py(),
                }
            }
            Key::Advanced(Advanced::Mask(m)) => match v {
                Operand::Scalar(s) => self.a.masked_fill(&m, &s).py(),
                Operand::Array(src) => self.a.masked_assign(&m, &src).py(),
            },
            Key::Advanced(Advanced::Take(i)) => match v {
                Operand::Array(src) => self.a.put(&i, &src).py(),
                Operand::Scalar(s) => {
                    // a 0-d value broadcasts over the selected rows
                    let src = DynArray::full(self.a.device(), &[], self.a.dtype(), &s).py()?;
                    self.a.put(&i, &src).py()
                }
            },
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        self.a
            .shape()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-dimensional array"))
    }

    fn __iter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let n = slf.get().__len__()?;
        let items = (0..n)
            .map(|i| {
                slf.get()
                    .a
                    .slice(&[gpukit_core::slice::Index::At(i as isize)])
                    .map(Array::new)
            })
            .collect::<gpukit_core::Result<Vec<Array>>>()
            .py()?;
        let list = pyo3::types::PyList::new(slf.py(), items)?;
        list.call_method0("__iter__")
    }

    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        if self.a.len() != 1 {
            return Err(PyValueError::new_err(format!(
                "the truth value of an array with {} elements is ambiguous; use a.any() or a.all()",
                self.a.len()
            )));
        }
        let a = self.a.clone();
        Ok(py.detach(move || a.item()).py()?.truth())
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.one(py)?.bind(py).call_method0("__float__")?.extract()
    }

    fn __int__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.one(py)?.bind(py).call_method0("__int__")?.unbind())
    }

    fn __index__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if !(self.a.dtype().is_integer() || self.a.dtype() == ElementType::Bool) {
            return Err(PyTypeError::new_err(
                "only integer arrays with one element can be used as an index",
            ));
        }
        self.__int__(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let host = download(py, &self.a)?;
        let body: String = host.repr()?.extract()?;
        let inner = body
            .strip_prefix("array(")
            .and_then(|b| b.strip_suffix(')'))
            .unwrap_or(&body);
        Ok(format!("gpukit.Array({inner})"))
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        download(py, &self.a)?.str()?.extract()
    }

    fn __hash__(&self) -> PyResult<isize> {
        Err(PyTypeError::new_err("unhashable type: 'gpukit.Array'"))
    }

    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Add, slf.as_any(), other)
    }
    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Add, other, slf.as_any())
    }
    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Sub, slf.as_any(), other)
    }
    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Sub, other, slf.as_any())
    }
    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Mul, slf.as_any(), other)
    }
    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Mul, other, slf.as_any())
    }
    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::TrueDivide, slf.as_any(), other)
    }
    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::TrueDivide, other, slf.as_any())
    }
    fn __floordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::FloorDivide, slf.as_any(), other)
    }
    fn __rfloordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::FloorDivide, other, slf.as_any())
    }
    fn __mod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Remainder, slf.as_any(), other)
    }
    fn __rmod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::Remainder, other, slf.as_any())
    }
    fn __pow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(PyTypeError::new_err(
                "pow() with a modulus is not supported",
            ));
        }
        py_arith(slf.py(), Arith::Power, slf.as_any(), other)
    }
    fn __rpow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(PyTypeError::new_err(
                "pow() with a modulus is not supported",
            ));
        }
        py_arith(slf.py(), Arith::Power, other, slf.as_any())
    }
    fn __and__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::BitAnd, slf.as_any(), other)
    }
    fn __rand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::BitAnd, other, slf.as_any())
    }
    fn __or__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::BitOr, slf.as_any(), other)
    }
    fn __ror__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::BitOr, other, slf.as_any())
    }
    fn __xor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::BitXor, slf.as_any(), other)
    }
    fn __rxor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        py_arith(slf.py(), Arith::BitXor, other, slf.as_any())
    }
    fn __matmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        match convert::operand(other)? {
            Some(Operand::Array(b)) => out(py, slf.get().a.matmul(&b)),
            Some(Operand::Scalar(_)) => Err(PyValueError::new_err(
                "matmul: a scalar operand does not have enough dimensions (use * to scale)",
            )),
            None => Ok(py.NotImplemented()),
        }
    }
    fn __rmatmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        match convert::operand(other)? {
            Some(Operand::Array(b)) => out(py, b.matmul(&slf.get().a)),
            Some(Operand::Scalar(_)) => Err(PyValueError::new_err(
                "matmul: a scalar operand does not have enough dimensions (use * to scale)",
            )),
            None => Ok(py.NotImplemented()),
        }
    }

    fn __iadd__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::Add, other)
    }
    fn __isub__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::Sub, other)
    }
    fn __imul__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::Mul, other)
    }
    fn __itruediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::TrueDivide, other)
    }
    fn __ifloordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::FloorDivide, other)
    }
    fn __imod__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::Remainder, other)
    }
    fn __ipow__(
        &self,
        other: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.inplace(Arith::Power, other)
    }
    fn __iand__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::BitAnd, other)
    }
    fn __ior__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::BitOr, other)
    }
    fn __ixor__(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inplace(Arith::BitXor, other)
    }

    fn __richcmp__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        op: PyCompareOp,
    ) -> PyResult<Py<PyAny>> {
        let op = match op {
            PyCompareOp::Lt => CompareOp::Lt,
            PyCompareOp::Le => CompareOp::Le,
            PyCompareOp::Eq => CompareOp::Eq,
            PyCompareOp::Ne => CompareOp::Ne,
            PyCompareOp::Gt => CompareOp::Gt,
            PyCompareOp::Ge => CompareOp::Ge,
        };
        py_compare(slf.py(), op, slf.as_any(), other)
    }

    fn __neg__(&self) -> PyResult<Array> {
        Ok(Array::new(self.a.unary(UnaryOp::Neg).py()?))
    }
    fn __pos__(&self) -> PyResult<Array> {
        Ok(Array::new(self.a.copy().py()?))
    }
    fn __abs__(&self) -> PyResult<Array> {
        Ok(Array::new(self.a.unary(UnaryOp::Abs).py()?))
    }
    fn __invert__(&self) -> PyResult<Array> {
        Ok(Array::new(self.a.unary(UnaryOp::BitNot).py()?))
    }

    /// DLPack: a capsule sharing this array's memory (see ``gpukit.from_dlpack``).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        crate::interop::export_dlpack(py, &self.a, stream, max_version, dl_device, copy)
    }

    /// DLPack: ``(2, device ordinal)`` (``kDLCUDA``).
    fn __dlpack_device__(&self) -> (u32, i32) {
        (2, self.a.device().ordinal() as i32)
    }

    /// The CUDA array interface (version 3) describing this array's memory.
    #[getter]
    fn __cuda_array_interface__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        crate::interop::cuda_array_interface(py, &self.a)
    }
}

impl Array {
    fn reduce(
        &self,
        py: Python<'_>,
        op: ReduceOp,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        ddof: usize,
    ) -> PyResult<Py<PyAny>> {
        let axes = reduce_args(axis)?;
        out(py, self.a.reduce(op, axes.as_deref(), keepdims, ddof))
    }

    fn inplace(&self, op: Arith, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = convert::required_operand(other, op.name())?;
        dops::arith_inplace(op, &self.a, b.as_ref()).map_err(|e| match e {
            gpukit_core::Error::InvalidArgument { .. } => PyTypeError::new_err(e.to_string()),
            other => crate::errors::core_err(other),
        })
    }

    fn one(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.a.len() != 1 {
            return Err(PyTypeError::new_err(format!(
                "only arrays with one element can be converted to Python scalars (size {})",
                self.a.len()
            )));
        }
        let a = self.a.clone();
        let s = py.detach(move || a.item()).py()?;
        scalar_to_py(py, &s)
    }
}

/// Functions on arrays with NumPy's semantics, registered on the module.
mod functions {
    use super::*;

    /// The arithmetic functions: each is `fn name(x1, x2)` with NumPy's semantics.
    macro_rules! arith_functions {
        ($($name:ident, $op:ident, $doc:literal;)*) => {$(
            #[doc = $doc]
            #[pyfunction]
            pub fn $name(py: Python<'_>, x1: &Bound<'_, PyAny>, x2: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                arith2(py, Arith::$op, x1, x2)
            }
        )*};
    }

    arith_functions! {
        add, Add, "``x1 + x2``.";
        subtract, Sub, "``x1 - x2``.";
        multiply, Mul, "``x1 * x2``.";
        divide, TrueDivide, "``x1 / x2`` (integers give float64).";
        floor_divide, FloorDivide, "``x1 // x2``.";
        remainder, Remainder, "``x1 % x2`` (the sign of ``x2``).";
        power, Power, "``x1 ** x2``.";
        maximum, Maximum, "Elementwise maximum (NaN propagates).";
        minimum, Minimum, "Elementwise minimum (NaN propagates).";
        bitwise_and, BitAnd, "Bitwise (logical for bool) and.";
        bitwise_or, BitOr, "Bitwise (logical for bool) or.";
        bitwise_xor, BitXor, "Bitwise (logical for bool) xor.";
    }

    fn arith2(
        py: Python<'_>,
        op: Arith,
        x1: &Bound<'_, PyAny>,
        x2: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let a = convert::required_operand(x1, op.name())?;
        let b = convert::required_operand(x2, op.name())?;
        out(py, dops::arith(op, a.as_ref(), b.as_ref()))
    }

    /// Compares elementwise: ``op`` is one of ``"eq" "ne" "lt" "le" "gt" "ge"``.
    #[pyfunction]
    pub fn compare(
        py: Python<'_>,
        op: &str,
        x1: &Bound<'_, PyAny>,
        x2: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let op = match op {
            "eq" => CompareOp::Eq,
            "ne" => CompareOp::Ne,
            "lt" => CompareOp::Lt,
            "le" => CompareOp::Le,
            "gt" => CompareOp::Gt,
            "ge" => CompareOp::Ge,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown comparison {other:?}"
                )))
            }
        };
        let a = convert::required_operand(x1, op.name())?;
        let b = convert::required_operand(x2, op.name())?;
        out(py, dops::compare(op, a.as_ref(), b.as_ref()))
    }

    /// Logical ``op`` (``"and" "or" "xor"``) of truth values.
    #[pyfunction]
    pub fn logical(
        py: Python<'_>,
        op: &str,
        x1: &Bound<'_, PyAny>,
        x2: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let op = match op {
            "and" => LogicalOp::And,
            "or" => LogicalOp::Or,
            "xor" => LogicalOp::Xor,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown logical operation {other:?}"
                )))
            }
        };
        let a = convert::required_operand(x1, op.name())?;
        let b = convert::required_operand(x2, op.name())?;
        out(py, dops::logical(op, a.as_ref(), b.as_ref()))
    }

    /// A unary function by name (``"exp" "log" "sqrt" "tanh" "sin" "cos" "sigmoid" "relu"
    /// "abs" "negative" "floor" "ceil" "round" "trunc" "sign" "invert" "isnan" "isinf"
    /// "isfinite" "logical_not"``).
    #[pyfunction]
    pub fn unary(py: Python<'_>, op: &str, x: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let a = convert::array(x, op)?;
        let u = match op {
            "exp" => UnaryOp::Exp,
            "log" => UnaryOp::Log,
            "sqrt" => UnaryOp::Sqrt,
            "tanh" => UnaryOp::Tanh,
            "sin" => UnaryOp::Sin,
            "cos" => UnaryOp::Cos,
            "sigmoid" => UnaryOp::Sigmoid,
            "relu" => UnaryOp::Relu,
            "abs" | "absolute" => UnaryOp::Abs,
            "negative" => UnaryOp::Neg,
            "floor" => UnaryOp::Floor,
            "ceil" => UnaryOp::Ceil,
            "round" | "rint" => UnaryOp::Round,
            "trunc" => UnaryOp::Trunc,
            "sign" => UnaryOp::Sign,
            "invert" | "bitwise_not" => UnaryOp::BitNot,
            "isnan" => return out(py, a.predicate(Predicate::IsNan)),
            "isinf" => return out(py, a.predicate(Predicate::IsInf)),
            "isfinite" => return out(py, a.predicate(Predicate::IsFinite)),
            "logical_not" => return out(py, a.predicate(Predicate::LogicalNot)),
            other => return Err(PyValueError::new_err(format!("unknown function {other:?}"))),
        };
        if op == "rint" && !a.dtype().is_float() {
            return out(py, a.astype(a.dtype().to_float()).and_then(|f| f.unary(u)));
        }
        out(py, a.unary(u))
    }

    /// ``x1 @ x2`` (NumPy's matmul: 1-D operands and batches broadcast; float types).
    #[pyfunction]
    pub fn matmul(
        py: Python<'_>,
        x1: &Bound<'_, PyAny>,
        x2: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let a = convert::array(x1, "matmul")?;
        let b = convert::array(x2, "matmul")?;
        if a.ndim() == 0 || b.ndim() == 0 {
            return Err(PyValueError::new_err(format!(
                "matmul: input operand {} does not have enough dimensions (shapes {:?} and {:?}; \
                 matmul needs at least 1-D operands)",
                if a.ndim() == 0 { 0 } else { 1 },
                a.shape(),
                b.shape()
            )));
        }
        out(py, a.matmul(&b))
    }

    /// ``numpy.where(condition, x, y)``.
    #[pyfunction]
    #[pyo3(name = "where")]
    pub fn where_(
        py: Python<'_>,
        condition: &Bound<'_, PyAny>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let c = convert::array(condition, "where")?;
        let a = convert::required_operand(x, "where")?;
        let b = convert::required_operand(y, "where")?;
        out(py, dops::where_(&c, a.as_ref(), b.as_ref()))
    }

    /// An array of ``shape`` filled with ``fill_value`` (``dtype`` None: NumPy's choice for
    /// the value: bool, int64 or float64).
    #[pyfunction]
    #[pyo3(signature = (shape, fill_value, dtype=None, device=None))]
    pub fn full(
        shape: &Bound<'_, PyAny>,
        fill_value: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Array> {
        let s = convert::scalar(fill_value)?
            .ok_or_else(|| PyTypeError::new_err("fill_value must be a number"))?;
        let default = s.dtype.unwrap_or(match s.value {
            ScalarValue::Bool(_) => ElementType::Bool,
            ScalarValue::Int(_) => ElementType::I64,
            ScalarValue::Float(_) => ElementType::F64,
        });
        let t = convert::element_type(dtype, default)?;
        let dev = super::device(device)?;
        Ok(Array::new(
            DynArray::full(&dev, &convert::shape(shape, false)?, t, &s).py()?,
        ))
    }

    /// An array of zeros (``dtype`` default float64).
    #[pyfunction]
    #[pyo3(signature = (shape, dtype=None, device=None))]
    pub fn zeros(
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Array> {
        let t = convert::element_type(dtype, ElementType::F64)?;
        let dev = super::device(device)?;
        Ok(Array::new(
            DynArray::zeros(&dev, &convert::shape(shape, false)?, t).py()?,
        ))
    }

    /// An array of ones (``dtype`` default float64).
    #[pyfunction]
    #[pyo3(signature = (shape, dtype=None, device=None))]
    pub fn ones(
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Array> {
        let t = convert::element_type(dtype, ElementType::F64)?;
        let dev = super::device(device)?;
        Ok(Array::new(
            DynArray::ones(&dev, &convert::shape(shape, false)?, t).py()?,
        ))
    }

    /// An uninitialised array (``dtype`` default float64): every element must be written
    /// before it is read.
    #[pyfunction]
    #[pyo3(signature = (shape, dtype=None, device=None))]
    pub fn empty(
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Array> {
        let t = convert::element_type(dtype, ElementType::F64)?;
        let dev = super::device(device)?;
        Ok(Array::new(
            DynArray::empty(&dev, &convert::shape(shape, false)?, t).py()?,
        ))
    }

    /// ``numpy.arange``: ``arange(stop)``, ``arange(start, stop[, step])``; ``dtype`` None:
    /// int64 for integer arguments, float64 otherwise.
    #[pyfunction]
    #[pyo3(signature = (start, stop=None, step=None, dtype=None, device=None))]
    pub fn arange(
        start: &Bound<'_, PyAny>,
        stop: Option<&Bound<'_, PyAny>>,
        step: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Array> {
        let (b, e) = match stop {
            Some(s) if !s.is_none() => (start.clone(), s.clone()),
            _ => (0i64.into_pyobject(start.py())?.into_any(), start.clone()),
        };
        let st = match step {
            Some(s) if !s.is_none() => s.clone(),
            _ => 1i64.into_pyobject(start.py())?.into_any(),
        };
        let all_int = [&b, &e, &st]
            .iter()
            .all(|v| v.is_instance_of::<pyo3::types::PyInt>());
        let default = if all_int {
            ElementType::I64
        } else {
            ElementType::F64
        };
        let t = convert::element_type(dtype, default)?;
        let f = |v: &Bound<'_, PyAny>| -> PyResult<f64> { v.extract() };
        let dev = super::device(device)?;
        Ok(Array::new(
            DynArray::arange(&dev, f(&b)?, f(&e)?, f(&st)?, t).py()?,
        ))
    }

    /// A GPU copy of a host array (NumPy array or anything ``numpy.asarray`` takes).
    #[pyfunction]
    #[pyo3(signature = (array, dtype=None, device=None))]
    pub fn from_numpy(
        py: Python<'_>,
        array: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Array> {
        let t = match dtype {
            Some(d) if !d.is_none() => Some(convert::element_type(Some(d), ElementType::F64)?),
            _ => None,
        };
        let dev = super::device(device)?;
        Ok(Array::new(super::upload(py, array, &dev, t)?))
    }

    /// An array from ``obj``: a gpukit array (itself, or converted to ``dtype``), another
    /// library's GPU array (shared without a copy through DLPack or the CUDA array interface),
    /// or host data (copied).
    #[pyfunction]
    #[pyo3(signature = (obj, dtype=None, device=None))]
    pub fn asarray(
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        let t = match dtype {
            Some(d) if !d.is_none() => Some(convert::element_type(Some(d), ElementType::F64)?),
            _ => None,
        };
        let gpu = if let Ok(a) = obj.cast::<Array>() {
            Some(a.get().a.clone())
        } else {
            crate::interop::import_device_array(obj)?
        };
        if let Some(a) = gpu {
            let a = match device {
                Some(d) if d != a.device().ordinal() => {
                    a.to_device(&super::device(Some(d))?).py()?
                }
                _ => a,
            };
            if t.is_none_or(|t| t == a.dtype()) {
                if let Ok(same) = obj.cast::<Array>() {
                    return Ok(same.clone().into_any().unbind());
                }
                return Ok(Py::new(py, Array::new(a))?.into_any());
            }
            return out(py, a.astype(t.unwrap_or(a.dtype())));
        }
        let dev = super::device(device)?;
        Ok(Py::new(py, Array::new(super::upload(py, obj, &dev, t)?))?.into_any())
    }

    /// Waits until all queued GPU work of the device has finished.
    #[pyfunction]
    #[pyo3(signature = (device=None))]
    pub fn synchronize(py: Python<'_>, device: Option<usize>) -> PyResult<()> {
        let dev = super::device(device)?;
        py.detach(move || dev.synchronize()).py()
    }

    /// Every visible GPU's identity: dicts with ``ordinal``, ``uuid``, ``pci_bus_id``, ``name``.
    #[pyfunction]
    pub fn devices(py: Python<'_>) -> PyResult<Vec<Bound<'_, pyo3::types::PyDict>>> {
        gpukit_core::topology::devices()
            .py()?
            .into_iter()
            .map(|d| {
                let x = pyo3::types::PyDict::new(py);
                x.set_item("ordinal", d.ordinal)?;
                x.set_item("uuid", d.uuid)?;
                x.set_item("pci_bus_id", d.pci_bus_id)?;
                x.set_item("name", d.name)?;
                Ok(x)
            })
            .collect()
    }

    /// The number of CUDA devices (0 without a driver).
    #[pyfunction]
    pub fn device_count() -> usize {
        Device::count().unwrap_or(0)
    }

    /// Whether a CUDA device can be used here.
    #[pyfunction]
    pub fn is_available() -> bool {
        Device::count().is_ok_and(|n| n > 0)
    }

    /// ``cumsum``/``cumprod`` of the flattened array or along ``axis``.
    #[pyfunction]
    #[pyo3(signature = (x, op, axis=None))]
    pub fn scan(x: &Bound<'_, PyAny>, op: &str, axis: Option<isize>) -> PyResult<Array> {
        let a = convert::array(x, op)?;
        let s = match op {
            "cumsum" => ScanOp::Sum,
            "cumprod" => ScanOp::Prod,
            other => return Err(PyValueError::new_err(format!("unknown scan {other:?}"))),
        };
        Ok(Array::new(a.scan(s, axis).py()?))
    }
}

/// Registers the class and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use functions::*;
    m.add_class::<Array>()?;
    m.add_function(wrap_pyfunction!(set_device, m)?)?;
    m.add_function(wrap_pyfunction!(add, m)?)?;
    m.add_function(wrap_pyfunction!(subtract, m)?)?;
    m.add_function(wrap_pyfunction!(multiply, m)?)?;
    m.add_function(wrap_pyfunction!(divide, m)?)?;
    m.add_function(wrap_pyfunction!(floor_divide, m)?)?;
    m.add_function(wrap_pyfunction!(remainder, m)?)?;
    m.add_function(wrap_pyfunction!(power, m)?)?;
    m.add_function(wrap_pyfunction!(maximum, m)?)?;
    m.add_function(wrap_pyfunction!(minimum, m)?)?;
    m.add_function(wrap_pyfunction!(bitwise_and, m)?)?;
    m.add_function(wrap_pyfunction!(bitwise_or, m)?)?;
    m.add_function(wrap_pyfunction!(bitwise_xor, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(logical, m)?)?;
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(where_, m)?)?;
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(zeros, m)?)?;
    m.add_function(wrap_pyfunction!(ones, m)?)?;
    m.add_function(wrap_pyfunction!(empty, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(from_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(asarray, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    Ok(())
}
