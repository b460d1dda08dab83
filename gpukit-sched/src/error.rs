//! The one error type of gpukit-sched.

use std::time::Duration;

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

/// Who cancelled a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// [`TaskHandle::cancel`](crate::TaskHandle::cancel).
    Requested,
    /// The scheduler shut down (queued tasks at once, running ones at the shutdown deadline).
    Shutdown,
    /// Its [`TaskHandle`](crate::TaskHandle) was dropped before the task ended (and was not
    /// [`detach`](crate::TaskHandle::detach)ed).
    HandleDropped,
}

impl std::fmt::Display for CancelReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CancelReason::Requested => "through its handle",
            CancelReason::Shutdown => "by the scheduler's shutdown",
            CancelReason::HandleDropped => "because its handle was dropped",
        })
    }
}

/// What holds memory a starting task needs ([`Error::MemoryUnavailable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HolderKind {
    /// A running task (its commitment, or what it uses above it).
    Running,
    /// A running task asked to stop (evicted, cancelled, timed out) that has not reached a
    /// safe point yet.
    Stopping,
    /// A task that has ended: buffers it returned in its result, charged until they are
    /// dropped.
    Ended,
    /// Allocations made outside any task while the scheduler runs.
    OutsideTasks,
    /// A task whose GPU work did not end (quarantined): its commitment, and the memory its
    /// streams keep, stay taken until the work ends; evicting it gives nothing back.
    Quarantined,
}

/// One holder of memory a starting task needs ([`Error::MemoryUnavailable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryHolder {
    /// The task's name (`None` for allocations outside tasks).
    pub task: Option<String>,
    /// The task's id.
    pub id: Option<u64>,
    /// Bytes it holds (a running task's commitment counts).
    pub bytes: u64,
    /// What it is.
    pub kind: HolderKind,
}

impl std::fmt::Display for MemoryHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            HolderKind::Running => "running",
            HolderKind::Stopping => "asked to stop, no safe point reached",
            HolderKind::Ended => "ended; buffers it returned",
            HolderKind::OutsideTasks => "allocations outside tasks",
            HolderKind::Quarantined => "quarantined: its GPU work did not end",
        };
        match (&self.task, self.id) {
            (Some(t), Some(id)) => write!(f, "task `{t}` (id {id}, {what}): {} bytes", self.bytes),
            _ => write!(f, "{what}: {} bytes", self.bytes),
        }
    }
}

fn holders_text(holders: &[MemoryHolder]) -> String {
    if holders.is_empty() {
        return "nothing the scheduler can name (freed since)".into();
    }
    holders
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
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
    /// Not enough unreserved capacity for a partition.
    #[error("not enough {resource}: requested {requested}, available {available}")]
    Insufficient {
        /// Which resource.
        resource: Resource,
        /// How much was asked for.
        requested: u64,
        /// How much could be given.
        available: u64,
    },
    /// An allocation would take a task past its memory limit (its own limit, capped by its
    /// partition's quota).
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
        /// The task (or the allocation owner, for allocations outside tasks).
        task: String,
        /// Bytes of the refused allocation.
        requested: u64,
        /// Bytes free for use above requests.
        available: u64,
    },
    /// The task was preempted (evicted) to make room for a task with a stronger claim.
    #[error("task `{task}` was preempted ({qos} task evicted under memory pressure: {reason})")]
    Preempted {
        /// The task.
        task: String,
        /// Its QoS class.
        qos: String,
        /// Why, and for whom.
        reason: String,
    },
    /// The task was cancelled.
    #[error("task `{task}` was cancelled {reason}")]
    Cancelled {
        /// The task.
        task: String,
        /// By whom.
        reason: CancelReason,
    },
    /// The task ran longer than its timeout ([`TaskSpec::timeout`](crate::TaskSpec::timeout)).
    #[error("task `{task}` timed out after running for {timeout:?}")]
    TimedOut {
        /// The task.
        task: String,
        /// Its timeout.
        timeout: Duration,
    },
    /// The task was still queued at its start-by deadline
    /// ([`TaskSpec::deadline`](crate::TaskSpec::deadline)).
    #[error("task `{task}` did not start within its deadline of {deadline:?} (still queued)")]
    DeadlineExpired {
        /// The task.
        task: String,
        /// Its deadline, counted from submission.
        deadline: Duration,
    },
    /// The task was rejected: at admission, or while queued because its partition shrank.
    #[error("task `{task}` rejected: not enough {resource}: requested {requested}, available {available}")]
    Rejected {
        /// The task.
        task: String,
        /// Which resource.
        resource: Resource,
        /// How much it asked for.
        requested: u64,
        /// How much its pool can ever give.
        available: u64,
    },
    /// The task was admitted, but the memory it was promised did not become free within the
    /// stop grace period ([`SchedulerConfig::stop_grace`](crate::SchedulerConfig::stop_grace)):
    /// tasks evicted for it reached no safe point, or the memory is held by what cannot be
    /// evicted (buffers that ended tasks returned, allocations outside tasks). `holders` names
    /// each, with its bytes, largest first. Everything the task held was released; submit it
    /// again once they are freed.
    #[error("task `{task}`: {missing} bytes of its memory request were not free after waiting {waited:?}; held by {}", holders_text(holders))]
    MemoryUnavailable {
        /// The task.
        task: String,
        /// Bytes still missing.
        missing: u64,
        /// How long it waited (the grace period).
        waited: Duration,
        /// Who holds the memory it needs, largest first.
        holders: Vec<MemoryHolder>,
    },
    /// The task's closure panicked; everything it held was released.
    #[error("task `{task}` panicked: {message}")]
    Panicked {
        /// The task.
        task: String,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// The task's closure returned an error of its own type (the source, for
    /// [`downcast_ref`](std::error::Error)-style inspection through [`Error::task_error`]).
    #[error("task `{task}` failed: {source}")]
    TaskFailed {
        /// The task.
        task: String,
        /// The closure's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The task's result was already taken (a [`TaskHandle`](crate::TaskHandle) polled again
    /// after it completed).
    #[error("the result of task `{task}` was already taken")]
    ResultTaken {
        /// The task.
        task: String,
    },
    /// Another scheduler already manages this device's memory (one scheduler per device).
    #[error("device {device} already has a scheduler (or another memory ledger): {reason}")]
    DeviceInUse {
        /// The device ordinal.
        device: usize,
        /// What the allocator said.
        reason: String,
    },
    /// A driver feature the scheduler needs is missing (an entry point the installed driver
    /// does not export); the scheduler degrades where it can and says so.
    #[error("{what} is not available: {reason}")]
    Unsupported {
        /// The feature.
        what: String,
        /// Why (which entry point, which driver version).
        reason: String,
    },
    /// A failure inside the scheduler itself (a bug or a broken invariant), not in the task.
    #[error("internal scheduler error while {action}: {message}")]
    Internal {
        /// What the scheduler was doing.
        action: String,
        /// What went wrong.
        message: String,
    },
    /// The scheduler's device context is unusable: a task hit a sticky CUDA error (an illegal
    /// address, a trap, an uncorrectable ECC error ...), after which every call in the context
    /// fails. Queued tasks fail with this error and new submissions are refused; only a new
    /// process gets a working context.
    #[error("the scheduler's CUDA context is unusable since {cause}; no task can run in it any more: restart the process")]
    Unhealthy {
        /// The task and the sticky error that corrupted the context.
        cause: String,
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

    pub(crate) fn internal(action: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Internal {
            action: action.into(),
            message: message.into(),
        }
    }

    /// The closure's own error, when this is a [`Error::TaskFailed`] whose source is an `E`.
    ///
    /// ```
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("bad input")]
    /// struct BadInput;
    /// let e = gpukit_sched::Error::TaskFailed { task: "t".into(), source: Box::new(BadInput) };
    /// assert!(e.task_error::<BadInput>().is_some());
    /// ```
    pub fn task_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::TaskFailed { source, .. } => source.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// The closure's own error (any type), when this is a [`Error::TaskFailed`]: the very
    /// object the closure returned, for inspection or downcasting.
    pub fn task_source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            Error::TaskFailed { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }

    /// The closure's own error by value, when this is a [`Error::TaskFailed`] (else the error
    /// itself back): the very object the closure returned, e.g. to re-raise it in the caller's
    /// language after `downcast`.
    ///
    /// ```
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("bad input {0}")]
    /// struct BadInput(u32);
    /// let e = gpukit_sched::Error::TaskFailed { task: "t".into(), source: Box::new(BadInput(7)) };
    /// let mine = e.into_task_source().unwrap().downcast::<BadInput>().unwrap();
    /// assert_eq!(mine.0, 7);
    /// ```
    pub fn into_task_source(
        self,
    ) -> std::result::Result<Box<dyn std::error::Error + Send + Sync + 'static>, Error> {
        match self {
            Error::TaskFailed { source, .. } => Ok(source),
            other => Err(other),
        }
    }

    /// Turns a closure's error into the task's error: a gpukit-sched error stays itself, any
    /// other error becomes [`Error::TaskFailed`] with it as the source.
    pub(crate) fn from_task(task: &str, e: Box<dyn std::error::Error + Send + Sync>) -> Self {
        match e.downcast::<Error>() {
            Ok(own) => *own,
            Err(other) => match other.downcast::<gpukit_core::Error>() {
                Ok(core) => Error::Core(*core),
                Err(other) => Error::TaskFailed {
                    task: task.to_string(),
                    source: other,
                },
            },
        }
    }
}
