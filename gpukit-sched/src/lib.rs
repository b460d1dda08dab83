//! # gpukit-sched
//!
//! A QoS scheduler for one GPU shared by several workloads of one process, which *enforces*
//! what it admits, and whose every failure path ends:
//!
//! - **Admission** in Kubernetes terms ([`TaskSpec`]: memory and compute request/limit,
//!   priority, start-by deadline, run-time timeout, partition; [`QosClass`] derived from the
//!   numbers). Admission sums requests, never usage; the answer is immediate ([`Admission`]):
//!   admitted, queued (with its position) or rejected (with the resource, the amount requested
//!   and the amount available).
//! - **Compute** is cut once into SM groups with CUDA green contexts (8 SMs per group on
//!   Hopper): a task's kernels run on streams of a green context that holds only its groups,
//!   so a neighbour cannot take its SMs. A share below one group gets one group of its own,
//!   paced within it to its limit. Idle groups are lent to Burstable and BestEffort tasks and
//!   taken back at their next kernel launch. BestEffort work runs on the *floor* (the SMs no
//!   group covers, or the last group when the split leaves none), never on a task's SMs.
//! - **Without green contexts** (an older driver, a failed split, or `green_contexts(false)`
//!   in [`SchedulerConfig`]) the groups are virtual shares of GPU time,
//!   admitted and lent by the same rules, and launches are paced by measured GPU time
//!   (module `pacer`): a BestEffort task alone on an idle GPU is lent everything and not slowed,
//!   each Guaranteed task keeps its share. [`Scheduler::mechanism`] says which is in force and
//!   why.
//! - **Memory** is a ledger (module `ledger`) installed in gpukit-core's allocator: every allocation
//!   is checked and charged in one step (concurrent allocations cannot overrun it), buffers a
//!   task returns stay charged until freed, requests are committed at admission (a Guaranteed
//!   task's allocations never fail), limits are hard, memory above requests is shared, and
//!   under pressure BestEffort tasks are evicted first, then Burstable tasks above their
//!   request — across pools when a partition was made from lent memory. cuBLAS workspace and
//!   gpukit-core operations inside a task are the task's charges.
//! - **Memory bandwidth is not partitioned** by green contexts (measured on an H200: a 16-SM
//!   partition copied at 1539 GB/s alone and 609 GB/s beside a streaming neighbour). gpukit-sched
//!   reports each task's achieved bandwidth when the task reports its bytes; it does not promise
//!   bandwidth.
//!
//! # Every failure path ends
//! - A panic in the closure ([`Error::Panicked`]) or anywhere in the scheduler's own handling
//!   of the task ([`Error::Internal`]) ends that task with everything it held released; the
//!   worker takes the next task.
//! - Driver entry points that older drivers lack are looked up before use (module `entry`,
//!   [`EntryPoints`]); the scheduler degrades (pacing fallback, older timing call) and says
//!   why.
//! - A stop — [`TaskHandle::cancel`], a timeout, an eviction, [`Scheduler::shutdown`] — takes
//!   effect at the task's next *safe point* (launch, allocation, [`TaskContext::check`],
//!   [`TaskContext::synchronize`]): the task ends in that stop's state. A closure that reaches
//!   none within [`SchedulerConfig::stop_grace`] (default 1 s) is *detached*: its handle
//!   completes with the stop's outcome at that bound while its thread and resources stay taken
//!   (and reported) until it returns. A closure that returns `Ok` first keeps its result.
//! - A starting task waits at most the grace period for evicted tasks to free its memory, then
//!   fails with [`Error::MemoryUnavailable`] naming what holds it. An evicted task cannot keep
//!   that memory by returning it in an `Ok` result: the result is dropped and the task ends
//!   [`TaskState::Preempted`]. Queued deadlines expire on a timer
//!   ([`Error::DeadlineExpired`]). Any duration is accepted (one too large for the clock
//!   never comes), and the timer thread survives a panic of its own.
//! - **A kernel that never ends** blocks nothing: the scheduler never waits in the driver
//!   without a bound (it polls; [`TaskContext::synchronize`] is a safe point while it waits,
//!   the pacing token is polled too). Once the task has been asked to stop and the grace
//!   period is over, its work is taken for hung: the task gets the stop's outcome, its worker
//!   is free, and every lane its work used is *quarantined*, left alone on purpose: no stream,
//!   context, cuBLAS handle or cached memory of it is synchronised, destroyed or reused, and
//!   while a device has such work no lane of it is destroyed at all. Its SM groups (and lent
//!   groups its work may occupy) are out of service, its memory stays charged, it is no
//!   eviction victim, and it gives up the pacing token: new tasks are admitted and run on the
//!   remaining groups. [`SchedulerStats::quarantine`] (and [`ShutdownReport::quarantine`])
//!   name each such task with its groups, SMs, memory and streams, the metrics count them; if
//!   the work ends after all, everything comes back. A wait inside the closure that the
//!   scheduler does not see (a driver `synchronize`) makes the task *detached* instead. With
//!   CUDA's lazy module loading (the default) the first launch of a kernel in a context may
//!   wait for the context's work, so beside a kernel that never ends it may never return: run
//!   with `CUDA_MODULE_LOADING=EAGER` where hung kernels must be survived (see module
//!   `quarantine`).
//! - **A sticky CUDA error** (an illegal address, a trap, an uncorrectable ECC error ...)
//!   corrupts the context for good: the first one a task ends with makes the scheduler
//!   unhealthy — queued tasks fail and submissions are refused with [`Error::Unhealthy`]
//!   naming the task and the error ([`SchedulerStats::unhealthy`], metric
//!   `gpukit_sched_healthy`). Restart the process.
//! - Dropping a [`TaskHandle`] cancels its task (a service that gives up leaks no GPU work);
//!   [`TaskHandle::detach`] is fire-and-forget.
//!
//! # A service author's API
//! [`TaskHandle`] is a [`Future`](std::future::Future) (no executor assumed) beside the blocking
//! [`wait`](TaskHandle::wait), and serves other languages' futures: completion callbacks
//! ([`on_complete`](TaskHandle::on_complete)), polling without consuming the handle
//! ([`wait_for`](TaskHandle::wait_for), [`is_done`](TaskHandle::is_done)) and taking the
//! result once ([`take_result`](TaskHandle::take_result)). The closure's error is its own type
//! (any `std::error::Error + Send + Sync`, kept as the source of [`Error::TaskFailed`] and
//! given back by value by [`Error::into_task_source`]);
//! [`Scheduler::task_stats`], [`Scheduler::stats`] and [`Scheduler::metrics`] (the Prometheus
//! text format, per task and per partition); graceful [`Scheduler::shutdown`] with a deadline.
//!
//! # Layout
//! Pure, deterministic logic tested without a GPU (private modules, tested by their unit
//! tests): `plan` (admission, queue, groups, lending), `ledger` (memory), `pacer` (budgets),
//! `entry` (which driver calls exist). The running scheduler: `scheduler` (state, submit,
//! stops, stats, shutdown), `workers` (a task's run, panic containment), `timer`, `task` (one
//! outcome per task), `handle`, `context`, `lanes` (bounded pool of green-context streams),
//! `memory` (the allocation hook and eviction), `stats`; `green` wraps the driver's
//! green-context calls.
//!
//! The internals are private; none of these compile:
//! ```compile_fail,E0603
//! use gpukit_sched::plan::Planner;
//! ```
//! ```compile_fail,E0603
//! use gpukit_sched::ledger::Ledger;
//! ```
//! ```compile_fail,E0603
//! use gpukit_sched::pacer::Budget;
//! ```
//! ```compile_fail,E0603
//! use gpukit_sched::lanes::Lanes;
//! ```
//! ```compile_fail,E0603
//! // Making a raw context current is no safe function, and not reachable at all.
//! unsafe { gpukit_sched::green::make_current(std::ptr::null_mut()) }.unwrap();
//! ```
//! ```compile_fail,E0616
//! // The scheduler's state is not reachable from a task.
//! fn f(ctx: &gpukit_sched::TaskContext) { let _ = &ctx.inner; }
//! ```
//!
//! # What to know when using it
//! - On the H200 (driver 580) the split gives **15 groups of 8 SMs and 12 floor SMs** (not
//!   16 + 4): shares round to 15ths (0.25 -> 4 groups = 32 SMs, 0.75 -> 11 = 88 SMs), and
//!   the task is told what it got ([`TaskContext::compute`]).
//! - gpukit-core operations inside a task run on the task's *home* stream (its own groups, or
//!   the floor for BestEffort tasks); only kernels launched with [`TaskContext::launch`] also
//!   use groups lent to the task. A lent group comes back when the borrower's kernels already
//!   queued on it finish: within one kernel if the borrower keeps one kernel in flight.
//! - GPU time in [`TaskStats`] is the span between events recorded on the home stream at the
//!   task's start and end (it includes idle gaps inside that span).
//! - One scheduler per device at a time ([`Error::DeviceInUse`] for a second one).
//! - Measured on the H200 before this version (one run of `examples/sched_bench.rs`):
//!   throughput ratios within 0.2 % of the SM split (0.25/0.75 and 0.5/0.25/0.25), a 5 us probe
//!   at 1.16x its alone latency beside a BestEffort hog (48x without the scheduler), eviction in
//!   the documented order with no failed Guaranteed allocation. See `NOTES.md`.
//!
//! ```no_run
//! use gpukit_sched::{Scheduler, SchedulerConfig, TaskContext, TaskSpec};
//! let dev = gpukit_core::Device::open(0)?;
//! let sched = Scheduler::new(dev, SchedulerConfig::default())?;
//! let h = sched.submit(
//!     |ctx: &mut TaskContext| -> gpukit_sched::Result<u32> { Ok(ctx.compute().sms) },
//!     TaskSpec::new("job").memory("1GiB", "1GiB").compute(0.25, 0.25),
//! )?;
//! println!("{:?}", h.admission());
//! println!("ran on {} SMs", h.wait()?);
//! print!("{}", sched.metrics());
//! # Ok::<(), gpukit_sched::Error>(())
//! ```

mod bytes;
mod config;
mod context;
mod entry;
mod error;
mod green;
mod handle;
mod health;
mod lanes;
mod ledger;
mod memory;
mod multi;
mod pacer;
mod partitions;
mod placement;
mod plan;
mod quarantine;
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
pub use entry::{EntryPoints, Timing};
pub use error::{CancelReason, Error, HolderKind, MemoryHolder, Resource, Result};
pub use handle::TaskHandle;
pub use ledger::PoolMemory;
pub use multi::MultiScheduler;
pub use partitions::Partition;
pub use plan::{Admission, Grant, PoolInfo, TaskId};
pub use quarantine::QuarantinedTask;
pub use scheduler::{Scheduler, ShutdownReport};
pub use sm::{ComputeGrant, GroupSet, Mechanism, SmLayout};
pub use spec::{QosClass, ResolvedSpec, TaskSpec};
pub use stats::{Histogram, PartitionStats, SchedulerStats, TaskStats, TIME_BUCKETS};
pub use task::TaskState;
