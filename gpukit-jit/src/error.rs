//! The one error type of gpukit-jit.

use std::path::PathBuf;

/// Result alias used throughout gpukit-jit.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while compiling, caching, loading or launching a kernel.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CUDA library could not be loaded on this machine.
    #[error("{library} could not be loaded ({hint})")]
    LibraryMissing {
        /// Which library (`libcuda`, `libnvrtc`, ...).
        library: &'static str,
        /// What to do about it.
        hint: &'static str,
    },
    /// NVRTC rejected the source.
    #[error("NVRTC failed to compile `{program}`:\n{summary}\n--- full NVRTC log ---\n{log}")]
    Compile {
        /// The program (kernel) name the source was compiled under.
        program: String,
        /// The first error with the failing source line quoted.
        summary: String,
        /// The complete NVRTC log.
        log: String,
    },
    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC call {call} failed: {message}")]
    Nvrtc {
        /// Which NVRTC entry point.
        call: &'static str,
        /// NVRTC's error string.
        message: String,
    },
    /// A kernel name is not in the module.
    #[error("kernel `{name}` is not in module `{program}`; it contains: {}", if available.is_empty() { "no extern \"C\" kernels (templated kernels need a name expression)".to_string() } else { available.join(", ") })]
    KernelNotFound {
        /// The name asked for.
        name: String,
        /// The module's program name.
        program: String,
        /// Kernels the module does contain (extern "C" names and name expressions).
        available: Vec<String>,
    },
    /// Arguments do not match the kernel's parsed signature.
    #[error("kernel `{kernel}`: {message}")]
    ArgumentMismatch {
        /// The kernel.
        kernel: String,
        /// What is wrong (which argument, what was expected, what was given).
        message: String,
    },
    /// Memory arguments of a launch overlap where the kernel may write.
    #[error("kernel `{kernel}`: {message}")]
    Aliasing {
        /// The kernel.
        kernel: String,
        /// Which arguments overlap, where, and what to do.
        message: String,
    },
    /// An option, target or environment variable is malformed.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidInput {
        /// What was being parsed (an architecture, an environment variable, an option).
        what: String,
        /// The offending value.
        value: String,
        /// What is expected instead.
        reason: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {action}: {source}")]
    Driver {
        /// What gpukit was doing.
        action: String,
        /// The driver error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// A kernel launch failed.
    #[error("launch of kernel `{kernel}` failed: {source}")]
    Launch {
        /// The kernel's name.
        kernel: String,
        /// The driver error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// The kernel cache directory cannot be used safely, or at all (see
    /// [`KernelCache::disk_problem`](crate::KernelCache::disk_problem)): a directory on the way
    /// that another user could change, a link in one, or one that cannot be created or opened.
    /// The cache then keeps to memory.
    #[error("the kernel cache directory {} is not used: {source}; set GPUKIT_CACHE_DIR to a directory of your own (mode 0700), or GPUKIT_CACHE=off", dir.display())]
    CacheDir {
        /// The directory as configured.
        dir: PathBuf,
        /// What is wrong with it (or with a directory on the way).
        #[source]
        source: gpukit_trust::Error,
    },
    /// The on-disk cache could not be used.
    #[error("kernel cache I/O error at {path}: {source}")]
    CacheIo {
        /// The file or directory concerned.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn driver(action: impl Into<String>, source: cudarc::driver::DriverError) -> Self {
        Error::Driver {
            action: action.into(),
            source,
        }
    }

    pub(crate) fn invalid(
        what: impl Into<String>,
        value: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::InvalidInput {
            what: what.into(),
            value: value.into(),
            reason: reason.into(),
        }
    }
}
