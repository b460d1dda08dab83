//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in gpukit-offload.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument of a call is invalid (checked before anything runs).
    #[error("{routine}: invalid argument {arg}: {msg}")]
    InvalidArgument {
        /// LAPACK name of the routine (`dgemm`).
        routine: String,
        /// The argument's name.
        arg: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// No CPU BLAS/LAPACK library could be loaded.
    #[error("no CPU BLAS/LAPACK library found (tried {tried}); install OpenBLAS (`apt-get install libopenblas0`) or set GPUKIT_OFFLOAD_CPU_LIB to a BLAS/LAPACK shared library")]
    NoCpuLibrary {
        /// The names and paths tried.
        tried: String,
    },
    /// The CPU library lacks a routine.
    #[error("the CPU library {library} has no symbol for {routine}")]
    MissingSymbol {
        /// The library path.
        library: String,
        /// The routine.
        routine: String,
    },
    /// LAPACK reported a numerical failure (`info > 0`): singular matrix, matrix not positive
    /// definite, or no convergence. The output buffers hold what LAPACK left there.
    #[error("{routine}: LAPACK info = {info} ({meaning})")]
    Lapack {
        /// LAPACK name of the routine.
        routine: String,
        /// LAPACK's info value.
        info: i64,
        /// What it means for this routine.
        meaning: &'static str,
    },
    /// The GPU could not be used (no driver, no device, library missing, start-up failed).
    #[error("GPU unavailable: {0}")]
    GpuUnavailable(String),
    /// A CUDA, cuBLAS or cuSOLVER call failed.
    #[error("GPU error in {what}: {detail}")]
    Gpu {
        /// What was being done.
        what: &'static str,
        /// The library's error.
        detail: String,
    },
    /// The device failed while a call's results were being copied into the caller's buffers:
    /// some operands are already overwritten, so the call can be neither re-run on the CPU nor
    /// trusted. The shim reports it as LAPACK reports an error (see
    /// [`crate::interpose`]); the typed API returns it.
    #[error("{routine}: the GPU failed while the results were copied out ({detail}); some outputs are already overwritten, so the call was not re-run: treat its results as invalid")]
    GpuLost {
        /// LAPACK name of the routine.
        routine: String,
        /// The device's error.
        detail: String,
    },
    /// The profile file could not be read, parsed or written.
    #[error("offload profile {path}: {msg}")]
    Profile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A configuration value (environment variable or option) is invalid.
    #[error("invalid setting {name}={value:?}: {msg}")]
    Config {
        /// The variable or option.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        msg: String,
    },
    /// An I/O error with context.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn arg(
        routine: impl Into<String>,
        arg: &'static str,
        msg: impl Into<String>,
    ) -> Error {
        Error::InvalidArgument {
            routine: routine.into(),
            arg,
            msg: msg.into(),
        }
    }
}
