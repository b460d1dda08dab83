//! The one error type of gpukit-sched.

/// Result alias used throughout gpukit-sched.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A resource the scheduler accounts for (named in rejections and quota errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Device memory, in bytes.
    Memory,
    /// Compute, in groups of SMs.
    Compute,
    /// Places in the wait queue.
    QueueSlots,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::Memory => "memory (bytes)",
            Resource::Compute => "compute (SM groups)",
            Resource::QueueSlots => "queue slots",
        })
    }
}

/// Everything that can go wrong in gpukit-sched.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A task specification, partition or configuration value is malformed or contradictory.
    /// Nothing was changed.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidSpec {
        /// Which field (`memory request`, `compute limit`, `qos`, ...).
        what: String,
        /// The offending value.
        value: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// A named partition does not exist.
    #[error("no partition named `{name}` (partitions: {})", if known.is_empty() { "none".to_string() } else { known.join(", ") })]
    UnknownPartition {
        /// The name asked for.
        name: String,
        /// The partitions that exist.
        known: Vec<String>,
    },
    /// A partition operation that needs the partition to be free found tasks in it.
    #[error("partition `{name}` is busy: {tasks} task(s) admitted or queued in it")]
    PartitionBusy {
        /// The partition.
        name: String,
        /// How many tasks hold or wait for it.
        tasks: usize,
    },
    /// Not enough unreserved capacity for a partition, or for a task's request ever to fit.
    #[error("not enough {resource}: requested {requested}, available {available}")]
    Insufficient {
        /// Which resource.
        resource: Resource,
        /// How much was asked for.
        requested: u64,
        /// How much could ever be given.
        available: u64,
    },
    /// An allocation would take a task past its memory limit.
    #[error("task `{task}` memory limit exceeded: {in_use} in use + {requested} requested > limit {limit} bytes")]
    QuotaExceeded {
        /// The task.
        task: String,
        /// Bytes it already holds.
        in_use: u64,
        /// Bytes of the refused allocation.
        requested: u64,
        /// Its limit.
        limit: u64,
    },
    /// An allocation above a task's request found no free memory (requests are committed,
    /// memory above them is first come, first served).
    #[error("task `{task}`: no free memory above its request: {requested} bytes asked, {available} free for bursting")]
    MemoryPressure {
        /// The task.
        task: String,
        /// Bytes of the refused allocation.
        requested: u64,
        /// Bytes free for use above requests.
        available: u64,
    },
    /// The task was preempted (evicted) to make room for a task with a stronger claim; the
    /// error surfaces at its next allocation or launch.
    #[error("task `{task}` was preempted ({qos} task evicted under memory pressure: {reason})")]
    Preempted {
        /// The task.
        task: String,
        /// Its QoS class.
        qos: String,
        /// Why.
        reason: String,
    },
    /// The task was cancelled through its handle.
    #[error("task `{task}` was cancelled")]
    Cancelled {
        /// The task.
        task: String,
    },
    /// The task was rejected at admission or while queued.
    #[error("task `{task}` rejected: {reason}")]
    Rejected {
        /// The task.
        task: String,
        /// Why (resource, requested, available; or a missed deadline).
        reason: String,
    },
    /// The task's closure panicked; everything it held was released.
    #[error("task `{task}` panicked: {message}")]
    Panicked {
        /// The task.
        task: String,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// The task's closure returned an error.
    #[error("task `{task}` failed: {message}")]
    TaskFailed {
        /// The task.
        task: String,
        /// The error, rendered.
        message: String,
    },
    /// The scheduler has no device (a CPU-only scheduler, for benches and tests).
    #[error("this scheduler has no device (Scheduler::cpu_only)")]
    NoDevice,
    /// The scheduler is shutting down or gone.
    #[error("the scheduler has shut down")]
    ShutDown,
    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed while {action}: {source}")]
    Driver {
        /// The driver entry point.
        call: &'static str,
        /// What gpukit-sched was doing.
        action: String,
        /// The driver error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// A cuBLAS call failed (or cuBLAS is missing).
    #[error("cuBLAS failed while {action}: {message}")]
    Cublas {
        /// What gpukit-sched was doing.
        action: String,
        /// cuBLAS's error.
        message: String,
    },
    /// An error from gpukit-core (allocation, streams, operations).
    #[error(transparent)]
    Core(#[from] gpukit_core::Error),
    /// An error from gpukit-jit (compile, load, launch).
    #[error(transparent)]
    Jit(#[from] gpukit_jit::Error),
}

impl Error {
    pub(crate) fn invalid(
        what: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Error::InvalidSpec {
            what: what.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}
