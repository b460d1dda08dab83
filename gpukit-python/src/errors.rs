//! The one mapping from the crates' errors to
//! the exceptions Python users expect: shapes and values -> `ValueError` (the message names
//! the shapes), element types -> `TypeError`, integers out of range -> `OverflowError`, no
//! driver or no NVRTC -> `gpukit.CudaUnavailable` (a `RuntimeError`) saying what to install,
//! device memory -> `gpukit.OutOfMemoryError` (a `MemoryError`), kernel compilation ->
//! `gpukit.CompileError`, other driver failures -> `gpukit.CudaError`.

use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// The exception classes are defined once, in Python (`gpukit/_errors.py`: `AxisError` is both a
/// `ValueError` and an `IndexError`, as NumPy's); this raises one of them by name.
fn raise(name: &'static str, msg: String) -> PyErr {
    static CLASSES: [PyOnceLock<Py<PyType>>; 5] = [
        PyOnceLock::new(),
        PyOnceLock::new(),
        PyOnceLock::new(),
        PyOnceLock::new(),
        PyOnceLock::new(),
    ];
    const NAMES: [&str; 5] = [
        "CudaUnavailable",
        "CudaError",
        "CompileError",
        "OutOfMemoryError",
        "AxisError",
    ];
    Python::attach(|py| {
        let i = NAMES.iter().position(|n| *n == name).unwrap_or(1);
        match CLASSES[i].import(py, "gpukit._errors", NAMES[i]) {
            Ok(cls) => PyErr::from_type(cls.clone(), msg),
            Err(e) => e,
        }
    })
}

/// What to install when the driver is missing.
const NO_DRIVER_HINT: &str =
    "Install the NVIDIA driver (it provides libcuda.so.1) on a machine with an \
    NVIDIA GPU";

/// The Python exception for an error of gpukit-core.
pub fn core_err(e: gpukit_core::Error) -> PyErr {
    use gpukit_core::Error as E;
    let msg = e.to_string();
    match e {
        E::NoDriver => raise("CudaUnavailable", format!("{msg}. {NO_DRIVER_HINT}")),
        E::Jit(j) => jit_err(j),
        E::InvalidDevice { .. }
        | E::ShapeMismatch { .. }
        | E::InvalidArgument { .. }
        | E::EmptyReduction { .. }
        | E::DeviceMismatch { .. } => PyValueError::new_err(msg),
        E::AxisOutOfRange { .. } => raise("AxisError", msg),
        E::DTypeMismatch { .. } | E::UnsupportedDType { .. } => PyTypeError::new_err(msg),
        E::ScalarOutOfRange { .. } => PyOverflowError::new_err(msg),
        E::QuotaExceeded { .. } | E::OutOfMemory { .. } | E::AllocationRefused { .. } => {
            raise("OutOfMemoryError", msg)
        }
        _ => raise("CudaError", msg),
    }
}

/// The Python exception for an error of gpukit-jit.
pub fn jit_err(e: gpukit_jit::Error) -> PyErr {
    use gpukit_jit::Error as E;
    let msg = e.to_string();
    match e {
        E::LibraryMissing { .. } => raise(
            "CudaUnavailable",
            format!(
            "{msg}. Kernels are compiled with NVRTC: `pip install nvidia-cuda-nvrtc` (CUDA 13) \
             or install the CUDA toolkit; GPU work also needs the NVIDIA driver"
        ),
        ),
        E::Compile { .. } | E::Nvrtc { .. } => raise("CompileError", msg),
        E::KernelNotFound { .. } | E::InvalidInput { .. } => PyValueError::new_err(msg),
        E::ArgumentMismatch { .. } | E::Aliasing { .. } => PyTypeError::new_err(msg),
        _ => raise("CudaError", msg),
    }
}

/// A core error from an indexing operation: positions out of range are `IndexError`s.
pub fn index_err(e: gpukit_core::Error) -> PyErr {
    match e {
        gpukit_core::Error::InvalidArgument { .. } => PyIndexError::new_err(e.to_string()),
        other => core_err(other),
    }
}

/// A `gpukit.CudaError` with `msg`.
pub fn cuda_error(msg: String) -> PyErr {
    raise("CudaError", msg)
}

/// A `gpukit.CudaUnavailable` with `msg`.
pub fn unavailable(msg: String) -> PyErr {
    raise("CudaUnavailable", msg)
}

/// `Result<T, gpukit_core::Error>` into `PyResult<T>`.
pub trait CoreResult<T> {
    /// Maps the error with [`core_err`].
    fn py(self) -> PyResult<T>;
}

impl<T> CoreResult<T> for Result<T, gpukit_core::Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(core_err)
    }
}

impl<T> CoreResult<T> for Result<T, gpukit_jit::Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(jit_err)
    }
}
