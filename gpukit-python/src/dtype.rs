//! `gpukit.DType`: the element type objects (`gpukit.float32`, ...), equal to their NumPy name
//! and to the NumPy dtype, usable wherever NumPy takes a dtype (`numpy.dtype(gpukit.float32)`
//! reads their `dtype` attribute).

use gpukit_core::dynamic::{ElementKind, ElementType};
use pyo3::basic::CompareOp;
use pyo3::prelude::*;

/// An element type of gpukit arrays. Compares equal to its NumPy name (``"float32"``), to the
/// NumPy dtype and scalar type (``numpy.float32``) and to other ``DType`` objects of the same
/// type.
#[pyclass(module = "gpukit", name = "DType", frozen)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType(pub ElementType);

#[pymethods]
impl DType {
    /// The element type named ``name`` (anything ``numpy.dtype`` accepts, for the supported
    /// types).
    #[new]
    fn py_new(name: &Bound<'_, PyAny>) -> PyResult<Self> {
        crate::convert::element_type(Some(name), ElementType::F64).map(DType)
    }

    /// NumPy's name of the type (``"float32"``).
    #[getter]
    fn name(&self) -> &'static str {
        self.0.name()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.0.itemsize()
    }

    /// NumPy's kind character: ``"b"`` (bool), ``"u"``, ``"i"``, ``"f"``.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.0.kind() {
            ElementKind::Bool => "b",
            ElementKind::Unsigned => "u",
            ElementKind::Signed => "i",
            ElementKind::Float => "f",
        }
    }

    /// The NumPy dtype (``numpy.dtype("float32")``; ``bfloat16`` needs the ``ml_dtypes``
    /// package).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype(py, self.0)
    }

    fn __repr__(&self) -> String {
        format!("gpukit.{}", self.0.name())
    }

    fn __str__(&self) -> &'static str {
        self.0.name()
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let same = match crate::convert::element_type(Some(other), ElementType::F64) {
            Ok(t) => !other.is_none() && t == self.0,
            Err(_) => false,
        };
        match op {
            CompareOp::Eq => Ok(same.into_pyobject(py)?.to_owned().into_any().unbind()),
            CompareOp::Ne => Ok((!same).into_pyobject(py)?.to_owned().into_any().unbind()),
            _ => Ok(py.NotImplemented()),
        }
    }

    fn __hash__(&self) -> u64 {
        // equal to the hash of the name, as the objects compare equal to it
        let mut h: u64 = 0xcbf29ce484222325;
        for b in self.0.name().bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
        h
    }
}

/// The NumPy dtype of `t`.
pub fn numpy_dtype(py: Python<'_>, t: ElementType) -> PyResult<Bound<'_, PyAny>> {
    let np = py.import("numpy")?;
    if t == ElementType::BF16 {
        let ml = py.import("ml_dtypes").map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "bfloat16 has no NumPy dtype without the ml_dtypes package: pip install \
                 ml_dtypes, or convert with .astype('float32') first",
            )
        })?;
        return np.call_method1("dtype", (ml.getattr("bfloat16")?,));
    }
    np.call_method1("dtype", (t.name(),))
}

/// Registers `DType` and the type objects (`float32`, ...) on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DType>()?;
    for t in ElementType::ALL {
        m.add(t.name(), DType(t))?;
    }
    Ok(())
}
