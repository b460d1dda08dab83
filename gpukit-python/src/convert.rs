//! Python values into the crates' types: element types, scalars (weak Python numbers and
//! strong NumPy scalars), operands, axes, shapes and index expressions.

use crate::array::Array;
use crate::dtype::DType;
use gpukit_core::dynamic::{DynArray, ElementType, Scalar};
use gpukit_core::slice::Index;
use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyEllipsis, PyFloat, PyInt, PySlice, PyString, PyTuple, PyType};

/// An element type from anything NumPy accepts as a dtype (`"float32"`, `gpukit.float32`,
/// `numpy.float32`, `numpy.dtype("<f4")`, `float`, ...); `None` gives `default`.
pub fn element_type(obj: Option<&Bound<'_, PyAny>>, default: ElementType) -> PyResult<ElementType> {
    let Some(obj) = obj else {
        return Ok(default);
    };
    if obj.is_none() {
        return Ok(default);
    }
    if let Ok(d) = obj.cast::<DType>() {
        return Ok(d.get().0);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let name = s.to_str()?;
        return ElementType::parse(name).ok_or_else(|| unsupported(name));
    }
    // anything else through NumPy's own dtype parsing (type objects, numpy dtypes, 'f4', ...)
    let np = obj.py().import("numpy")?;
    let dt = np.call_method1("dtype", (obj,)).map_err(|_| {
        PyTypeError::new_err(format!(
            "{} is not a data type",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    let name: String = dt.getattr("name")?.extract()?;
    ElementType::parse(&name).ok_or_else(|| unsupported(&name))
}

fn unsupported(name: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "data type {name:?} is not supported by gpukit: use one of bool, uint8, int32, uint32, \
         int64, uint64, float16, bfloat16, float32, float64"
    ))
}

/// A scalar operand, or `None` when `obj` is not a number. Python `bool` / `int` / `float` are
/// weak (the array's type wins); NumPy scalars (`numpy.float32(2)`) are strong.
pub fn scalar(obj: &Bound<'_, PyAny>) -> PyResult<Option<Scalar>> {
    if obj.is_instance_of::<PyBool>() {
        return Ok(Some(Scalar::bool(obj.extract()?)));
    }
    if obj.is_instance_of::<PyInt>() {
        let v: i128 = obj.extract().map_err(|_| {
            PyOverflowError::new_err(format!(
                "Python integer {obj} is out of bounds for every gpukit type"
            ))
        })?;
        return Ok(Some(Scalar::int(v)));
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        return Ok(Some(Scalar::float(obj.extract()?)));
    }
    // NumPy scalars (numpy.float64 is also a Python float): a dtype and a Python value
    static GENERIC: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let generic = GENERIC.import(obj.py(), "numpy", "generic")?;
    if obj.is_instance(generic)? {
        let t = element_type(Some(&obj.getattr("dtype")?), ElementType::F64)?;
        let item = obj.call_method0("item")?;
        let s = if t == ElementType::Bool {
            Scalar::bool(item.extract()?)
        } else if t.is_float() {
            Scalar::float(item.extract()?)
        } else {
            Scalar::int(item.extract()?)
        };
        return Ok(Some(s.typed(t)));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(Some(Scalar::float(obj.extract()?)));
    }
    if obj.hasattr("__complex__")? && !obj.hasattr("__float__")? {
        return Err(PyTypeError::new_err(
            "complex numbers are not supported by gpukit",
        ));
    }
    Ok(None)
}

/// One side of a binary operation, owned.
pub enum Operand {
    /// A gpukit array (or a GPU array of another library, imported without a copy).
    Array(DynArray),
    /// A scalar.
    Scalar(Scalar),
}

impl Operand {
    /// The borrowed form the crate takes.
    pub fn as_ref(&self) -> gpukit_core::dynamic::ops::Operand<'_> {
        match self {
            Operand::Array(a) => gpukit_core::dynamic::ops::Operand::Array(a),
            Operand::Scalar(s) => gpukit_core::dynamic::ops::Operand::Scalar(*s),
        }
    }
}

/// An operand from a Python value: a gpukit array, a number, or a GPU array of another library
/// (`__cuda_array_interface__` / `__dlpack__` on a CUDA device, imported without a copy). Host
/// arrays (NumPy, lists) are refused: moving them to the GPU is explicit (`gpukit.asarray`).
/// `Ok(None)` when the type is not an operand at all (so `__add__` can return
/// `NotImplemented`).
pub fn operand(obj: &Bound<'_, PyAny>) -> PyResult<Option<Operand>> {
    if let Ok(a) = obj.cast::<Array>() {
        return Ok(Some(Operand::Array(a.get().a.clone())));
    }
    if let Some(s) = scalar(obj)? {
        return Ok(Some(Operand::Scalar(s)));
    }
    if let Some(a) = crate::interop::import_device_array(obj)? {
        return Ok(Some(Operand::Array(a)));
    }
    let np = obj.py().import("numpy")?;
    if obj.is_instance(&np.getattr("ndarray")?)? {
        return Err(PyTypeError::new_err(
            "a NumPy array (host memory) cannot be combined with a gpukit array: move it to the \
             GPU first with gpukit.asarray(x)",
        ));
    }
    Ok(None)
}

/// An operand that must be an array or scalar (a `TypeError` naming the value otherwise).
pub fn required_operand(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Operand> {
    operand(obj)?.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{what}: unsupported operand type {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

/// An array from a Python value that must be a gpukit (or other GPU) array.
pub fn array(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<DynArray> {
    match required_operand(obj, what)? {
        Operand::Array(a) => Ok(a),
        Operand::Scalar(_) => Err(PyTypeError::new_err(format!(
            "{what}: expected an array, got a scalar"
        ))),
    }
}

/// `axis=` of reductions: `None`, an int or a tuple of ints.
pub fn axes(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<isize>>> {
    let Some(obj) = obj else { return Ok(None) };
    if obj.is_none() {
        return Ok(None);
    }
    if let Ok(i) = obj.extract::<isize>() {
        return Ok(Some(vec![i]));
    }
    let v: Vec<isize> = obj
        .extract()
        .map_err(|_| PyTypeError::new_err("axis must be None, an int or a tuple of ints"))?;
    Ok(Some(v))
}

/// A shape: an int or a sequence of non-negative ints. With `allow_infer`, one `-1` becomes
/// `usize::MAX` (inferred, as in `reshape`).
pub fn shape(obj: &Bound<'_, PyAny>, allow_infer: bool) -> PyResult<Vec<usize>> {
    let dims: Vec<i64> = if let Ok(i) = obj.extract::<i64>() {
        vec![i]
    } else {
        obj.extract()
            .map_err(|_| PyTypeError::new_err("a shape must be an int or a sequence of ints"))?
    };
    let mut inferred = false;
    dims.iter()
        .map(|&d| {
            if d >= 0 {
                Ok(d as usize)
            } else if d == -1 && allow_infer && !inferred {
                inferred = true;
                Ok(usize::MAX)
            } else {
                Err(PyValueError::new_err(format!(
                    "negative dimensions are not allowed (shape {dims:?})"
                )))
            }
        })
        .collect()
}

fn clamp_isize(obj: &Bound<'_, PyAny>) -> PyResult<isize> {
    if let Ok(v) = obj.extract::<isize>() {
        return Ok(v);
    }
    let v: i128 = obj
        .extract()
        .or_else(|_| obj.call_method0("__index__")?.extract())
        .map_err(|_| PyTypeError::new_err("slice indices must be integers or None"))?;
    Ok(v.clamp(isize::MIN as i128 + 1, isize::MAX as i128) as isize)
}

/// An index entry that is not basic indexing: a mask or an integer array.
pub enum Advanced {
    /// A `bool` array selecting elements.
    Mask(DynArray),
    /// Integer positions along the first axis.
    Take(DynArray),
}

/// A Python index expression: basic entries (ints, slices, `None`, `...`) as a view, or one
/// advanced entry (a boolean mask, an integer array or list).
pub enum Key {
    /// Basic indexing.
    Basic(Vec<Index>),
    /// Advanced indexing.
    Advanced(Advanced),
}

/// Parses a `__getitem__` / `__setitem__` key.
pub fn key(obj: &Bound<'_, PyAny>, dev: &gpukit_core::Device) -> PyResult<Key> {
    let items: Vec<Bound<'_, PyAny>> = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else {
        vec![obj.clone()]
    };
    let mut out = Vec::with_capacity(items.len());
    for it in &items {
        if it.is_none() {
            out.push(Index::NewAxis);
        } else if it.is_instance_of::<PyEllipsis>() {
            out.push(Index::Ellipsis);
        } else if let Ok(s) = it.cast::<PySlice>() {
            let start = s.getattr("start")?;
            let stop = s.getattr("stop")?;
            let step = s.getattr("step")?;
            let opt = |v: &Bound<'_, PyAny>| -> PyResult<Option<isize>> {
                if v.is_none() {
                    Ok(None)
                } else {
                    clamp_isize(v).map(Some)
                }
            };
            let step = opt(&step)?.unwrap_or(1);
            if step == 0 {
                return Err(PyValueError::new_err("slice step cannot be zero"));
            }
            out.push(Index::numpy(opt(&start)?, opt(&stop)?, step));
        } else if it.is_instance_of::<PyBool>() {
            return Err(PyIndexError::new_err(
                "a bool scalar is not a valid index; index with a boolean array instead",
            ));
        } else if it.is_instance_of::<PyInt>() || it.hasattr("__index__")? && scalar(it)?.is_some()
        {
            let v: i128 = it.call_method0("__index__")?.extract()?;
            let v = isize::try_from(v)
                .map_err(|_| PyIndexError::new_err(format!("index {v} is out of bounds")))?;
            out.push(Index::At(v));
        } else {
            if items.len() != 1 {
                return Err(PyIndexError::new_err(
                    "only one advanced index (a boolean mask or an integer array) is supported, \
                     without other entries",
                ));
            }
            return advanced(it, dev).map(Key::Advanced);
        }
    }
    Ok(Key::Basic(out))
}

fn advanced(obj: &Bound<'_, PyAny>, dev: &gpukit_core::Device) -> PyResult<Advanced> {
    let a = match operand(obj) {
        Ok(Some(Operand::Array(a))) => a,
        _ => {
            // a list or a NumPy array of positions or truth values: uploaded
            let np = obj.py().import("numpy")?;
            let host = np.call_method1("asarray", (obj,))?;
            crate::array::upload(obj.py(), &host, dev, None)?
        }
    };
    match a.dtype() {
        ElementType::Bool => Ok(Advanced::Mask(a)),
        t if t.is_integer() => Ok(Advanced::Take(a)),
        t => Err(PyIndexError::new_err(format!(
            "arrays used as indices must be of integer or boolean type, not {t}"
        ))),
    }
}
