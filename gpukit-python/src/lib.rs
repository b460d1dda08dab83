//! # gpukit-python
//!
//! The Python face of gpukit, built by maturin into the wheel `gpukit` (module
//! `gpukit._native`; the Python package in `python/gpukit` re-exports it). A thin consumer of
//! the crates: every rule (type promotion, kernels, scheduling, locking, offload) lives in a
//! crate with Rust tests; this crate converts values and maps errors.
//!
//! - [`array`]: `gpukit.Array` and the functions on arrays (gpukit-core's `DynArray`);
//! - [`dtype`]: `gpukit.DType` (`gpukit.float32`, ...);
//! - [`interop`]: DLPack and the CUDA array interface, both ways, without copies;
//! - [`jit`]: `gpukit.jit`, `ElementwiseKernel`, `ReductionKernel`;
//! - [`sched`]: the scheduler and its task handles;
//! - [`mutex`]: device locks and the two command lines;
//! - [`convert`], [`errors`]: Python values in, Python exceptions out.

pub mod array;
pub mod convert;
pub mod dtype;
pub mod errors;
pub mod interop;
pub mod jit;
pub mod mutex;
pub mod sched;

use pyo3::prelude::*;

/// The native module `gpukit._native`.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    dtype::register(m)?;
    array::register(m)?;
    m.add_function(wrap_pyfunction!(interop::from_dlpack, m)?)?;
    jit::register(m)?;
    sched::register(m)?;
    mutex::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
