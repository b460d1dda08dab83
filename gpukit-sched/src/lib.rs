//! # gpukit-sched
//!
//! A QoS scheduler for one GPU shared by several workloads of one process, which *enforces*
//! what it admits:
//!
//! - **Admission** in Kubernetes terms ([`TaskSpec`]: memory and compute request/limit,
//!   priority, deadline, partition; [`QosClass`] derived from the numbers). Admission sums
//!   requests, never usage; the answer is immediate: admitted, queued (with its position) or
//!   rejected (with the resource, the amount requested and the amount available).
//! - **Compute** is cut once into SM groups with CUDA green contexts (8 SMs per group on
//!   Hopper): a task's kernels run on streams of a green context that holds only its groups,
//!   so a neighbour cannot take its SMs. Idle groups are lent to Burstable and BestEffort
//!   tasks and taken back at their next kernel launch. Where green contexts are missing, or a
//!   share is below one group, launches are paced by measured GPU time instead, and
//!   [`Mechanism`] says which is in force.
//! - **Memory** is charged per task through gpukit-core's per-owner accounting: requests are
//!   committed at admission (a Guaranteed task's allocations never fail), limits are hard,
//!   memory above requests is shared, and under pressure BestEffort tasks are evicted first,
//!   then Burstable tasks above their request ([`memory`]).
//! - **Memory bandwidth is not partitioned** by green contexts (measured on an H200: a 16-SM
//!   partition copied at 1539 GB/s alone and 609 GB/s beside a streaming neighbour). gpukit-sched
//!   reports each task's achieved bandwidth when the task reports its bytes; it does not promise
//!   bandwidth.
//!
//! The decisions are pure, deterministic logic in [`plan`] and [`memory`], tested without a
//! GPU; [`green`] wraps the driver's green-context calls; [`Scheduler`] runs tasks.
//!
//! # What to know when using it
//! - On the H200 (driver 580) the split gives **15 groups of 8 SMs and 12 floor SMs** (not
//!   16 + 4): shares round to 15ths (0.25 -> 4 groups = 32 SMs, 0.75 -> 11 = 88 SMs), and
//!   the task is told what it got ([`TaskContext::compute`]).
//! - gpukit-core operations inside a task run on the task's *home* stream (its own groups, or
//!   the floor for BestEffort tasks); only kernels launched with [`TaskContext::launch`] also
//!   use groups lent to the task. A lent group comes back when the borrower's kernels already
//!   queued on it finish: within one kernel if the borrower keeps one kernel in flight.
//! - Safe points: cancellation and preemption take effect at the task's next allocation,
//!   launch or [`TaskContext::check`]; a task that never reaches one is not interrupted.
//! - GPU time in [`TaskStats`] is the span between events recorded on the home stream at the
//!   task's start and end (it includes idle gaps inside that span).
//! - One scheduler per device at a time: it installs gpukit-core's allocation hook.
//! - Measured on the H200 in one run of `examples/sched_bench.rs`: throughput ratios within
//!   0.2 % of the SM split (0.25/0.75 and 0.5/0.25/0.25), a 5 us probe at 1.16x its alone
//!   latency beside a BestEffort hog (48x without the scheduler), eviction in the documented
//!   order with no failed Guaranteed allocation. See `NOTES.md` for the table.
//!
//! ```no_run
//! use gpukit_sched::{Scheduler, SchedulerConfig, TaskSpec};
//! let dev = gpukit_core::Device::open(0)?;
//! let sched = Scheduler::new(dev, SchedulerConfig::default())?;
//! let h = sched.submit(
//!     |ctx: &mut gpukit_sched::TaskContext| -> gpukit_sched::Result<u32> { Ok(ctx.compute().sms) },
//!     TaskSpec::new("job").memory("1GiB", "1GiB").compute(0.25, 0.25),
//! )?;
//! println!("{:?}", h.admission());
//! println!("ran on {} SMs", h.wait()?);
//! # Ok::<(), gpukit_sched::Error>(())
//! ```

mod bytes;
mod config;
mod context;
pub mod entry;
mod error;
pub mod green;
mod handle;
pub mod kernels;
mod lanes;
pub mod ledger;
mod memory;
pub mod pacer;
mod partitions;
pub mod plan;
mod scheduler;
mod sm;
mod spec;
mod stats;
mod task;
mod timer;
mod workers;

pub use bytes::{format_bytes, parse_bytes, ByteSize};
pub use config::{PanicPoint, SchedulerConfig};
pub use context::{MemoryReservation, TaskContext};
pub use error::{CancelReason, Error, Resource, Result};
pub use handle::TaskHandle;
pub use ledger::PoolMemory;
pub use partitions::Partition;
pub use plan::{Admission, Grant, PoolInfo, TaskId};
pub use scheduler::{Scheduler, ShutdownReport};
pub use sm::{ComputeGrant, GroupSet, Mechanism, SmLayout};
pub use spec::{QosClass, ResolvedSpec, TaskSpec};
pub use stats::{PartitionStats, SchedulerStats, TaskStats};
pub use task::TaskState;
