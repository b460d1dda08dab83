//! The one error type of gpukit-core.

use cudarc::driver::DriverError;

/// Result alias used throughout gpukit-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in gpukit-core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No CUDA driver (libcuda) could be loaded on this machine.
    #[error("no CUDA driver on this machine (libcuda could not be loaded); GPU work needs a machine with an NVIDIA GPU and driver")]
    NoDriver,
    /// Compiling, loading or launching a kernel failed, or a CUDA library is missing.
    #[error(transparent)]
    Jit(#[from] gpukit_jit::Error),
    /// The device ordinal does not exist.
    #[error("no CUDA device {ordinal}: this machine has {count} device(s)")]
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// Two shapes do not fit together (broadcasting, reshape, copy).
    #[error("{op}: shapes {lhs:?} and {rhs:?} are not compatible")]
    ShapeMismatch {
        /// The operation.
        op: String,
        /// The left (or source) shape.
        lhs: Vec<usize>,
        /// The right (or target) shape.
        rhs: Vec<usize>,
    },
    /// Two element types do not fit together.
    #[error("{op}: element types {lhs} and {rhs} differ; convert one with astype::<T>() first")]
    DTypeMismatch {
        /// The operation.
        op: String,
        /// The left element type.
        lhs: &'static str,
        /// The right element type.
        rhs: &'static str,
    },
    /// The operation is not defined for this element type (e.g. `exp` of an integer array).
    #[error("{op} is not defined for {dtype} arrays; convert with astype::<f32>() (or f64) first")]
    UnsupportedDType {
        /// The operation.
        op: String,
        /// The element type.
        dtype: &'static str,
    },
    /// An integer scalar does not fit the integer element type it must be stored as (NumPy
    /// raises `OverflowError` for `uint8_array + 300`).
    #[error(
        "the integer {value} is out of bounds for {dtype}; convert the array to a wider type first"
    )]
    ScalarOutOfRange {
        /// The value, in decimal.
        value: String,
        /// The element type's NumPy name.
        dtype: &'static str,
    },
    /// An axis does not exist.
    #[error("{op}: axis {axis} is out of range for an array of {ndim} dimension(s)")]
    AxisOutOfRange {
        /// The operation.
        op: String,
        /// The axis asked for.
        axis: usize,
        /// The array's number of dimensions.
        ndim: usize,
    },
    /// A shape or argument is invalid on its own.
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// A reduction that has no value for zero elements (max, min, argmax, mean).
    #[error("{op} of an empty array (shape {shape:?}) has no value")]
    EmptyReduction {
        /// The operation.
        op: String,
        /// The array's shape.
        shape: Vec<usize>,
    },
    /// The array lives on another device than the operation's other operand.
    #[error("{op}: operands are on device {lhs} and device {rhs}; copy one across first")]
    DeviceMismatch {
        /// The operation.
        op: String,
        /// Device of the left operand.
        lhs: usize,
        /// Device of the right operand.
        rhs: usize,
    },
    /// An allocation would pass its owner's quota.
    #[error("allocation of {requested} bytes for owner `{owner}` would exceed its quota of {quota} bytes ({in_use} bytes in use)")]
    QuotaExceeded {
        /// The owner tag charged.
        owner: String,
        /// The bytes requested (rounded to the allocator's 512-byte granularity).
        requested: usize,
        /// The owner's quota in bytes.
        quota: usize,
        /// Bytes the owner had in use before this request.
        in_use: usize,
    },
    /// The device has no room for the allocation, even after the cache was emptied.
    #[error("out of device memory: {requested} bytes requested, {free} bytes free on the device, {reserved} bytes reserved by this allocator (cached blocks were released and the allocation retried once)")]
    OutOfMemory {
        /// The bytes requested (rounded up to the allocator's segment size).
        requested: usize,
        /// Free device memory as the driver reported it after the retry.
        free: usize,
        /// Bytes this allocator still holds from the driver.
        reserved: usize,
    },
    /// An allocation hook (the scheduler's admission / preemption check) refused an allocation.
    #[error("allocation of {requested} bytes for owner `{owner}` refused: {reason}")]
    AllocationRefused {
        /// The owner tag charged.
        owner: String,
        /// The bytes requested.
        requested: usize,
        /// Why (from the hook).
        reason: String,
    },
    /// A GEMM plan ran without writing every element of C: the autotuner found it when it
    /// checked the candidate's first run on a poisoned scratch output, before any timing. The
    /// plan was not used (another candidate was, or this error was returned instead of running
    /// it).
    #[error("GEMM plan `{plan}` left C[{batch}][{row}][{col}] unwritten on a {m}x{n}x{k} product (checked on a poisoned scratch output before it could be chosen); it was not used. This is a gpukit bug: please report the shape and the plan; GPUKIT_GEMM_TF32 / GPUKIT_GEMM_FP32 select other kernel families meanwhile")]
    GemmUnwritten {
        /// The plan (configuration, K slices, operand layout, grid limit).
        plan: String,
        /// Rows of C.
        m: usize,
        /// Columns of C.
        n: usize,
        /// The inner dimension.
        k: usize,
        /// The batch entry of the element found unwritten.
        batch: usize,
        /// Its row.
        row: usize,
        /// Its column.
        col: usize,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver call failed while {action}: {source}")]
    Driver {
        /// What gpukit was doing.
        action: String,
        /// The driver error.
        #[source]
        source: DriverError,
    },
    /// A cuBLAS call failed (GEMM for f64/f16/bf16 and the cuBLAS baseline).
    #[error("cuBLAS call failed while {action}: {source}")]
    Cublas {
        /// What gpukit was doing.
        action: String,
        /// The cuBLAS status.
        #[source]
        source: cudarc::cublas::result::CublasError,
    },
    /// A cuSOLVER call failed.
    #[error("cuSOLVER call failed while {action}: {source:?}")]
    Cusolver {
        /// What gpukit was doing.
        action: String,
        /// The cuSOLVER status.
        source: cudarc::cusolver::result::CusolverError,
    },
}

impl Error {
    pub(crate) fn driver(action: impl Into<String>, source: DriverError) -> Self {
        Error::Driver {
            action: action.into(),
            source,
        }
    }

    pub(crate) fn shape(op: impl Into<String>, lhs: &[usize], rhs: &[usize]) -> Self {
        Error::ShapeMismatch {
            op: op.into(),
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
        }
    }

    pub(crate) fn invalid(op: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op: op.into(),
            reason: reason.into(),
        }
    }
}

/// Maps a driver error to [`Error::Driver`] with what gpukit was doing.
pub(crate) trait DriverContext<T> {
    fn ctx(self, action: &str) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, DriverError> {
    fn ctx(self, action: &str) -> Result<T> {
        self.map_err(|e| Error::driver(action, e))
    }
}
