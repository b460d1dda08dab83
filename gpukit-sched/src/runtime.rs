//! The running scheduler: worker pool, green-context lanes, memory enforcement through
//! gpukit-core's allocator hook, task contexts, handles and live stats.

use crate::blas::TaskBlas;
use crate::bytes::ByteSize;
use crate::error::{Error, Resource, Result};
use crate::green::{make_current, probe, GreenContext, GreenEvent, GreenStream, SmSplit};
use crate::memory::{check_allocation, plan_eviction, MemUse};
use crate::plan::{
    Decision, Event, Grant, PartitionSpec, Planner, PlannerConfig, PoolInfo, TaskId,
};
use crate::sm::{ComputeGrant, GroupSet, Mechanism, SmLayout};
use crate::spec::{QosClass, ResolvedSpec, TaskSpec};
use cudarc::driver::sys;
use gpukit_core::{Device, DeviceBuffer, OwnerId, Stream};
use gpukit_jit::{Kernel, KernelArg, LaunchConfig};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Scheduler settings.
///
/// ```
/// let c = gpukit_sched::SchedulerConfig::default().workers(4).memory_headroom("2GiB");
/// assert_eq!(c.workers, 4);
/// ```
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Worker threads = tasks running at once. Default 8.
    pub workers: usize,
    /// Device memory kept out of admission (driver, contexts, other users). Default 1 GiB.
    pub memory_headroom: ByteSize,
    /// Caps admission capacity below "free memory at start minus headroom".
    pub memory_capacity: Option<ByteSize>,
    /// Queue length before submissions are rejected. Default 1024.
    pub max_queue: usize,
    /// Jumps a queued task tolerates (see [`crate::plan`]). Default 4.
    pub max_bypass: u32,
    /// Use green contexts when the GPU has them (false: pacing only). Default true.
    pub green_contexts: bool,
    /// SMs per group (default: the driver's minimum partition, 8 on Hopper).
    pub group_size: Option<u32>,
    /// How long a worker that just finished a task polls for the next one before it sleeps
    /// (at most one worker polls at a time). A task started while one polls is handed over
    /// without a wake-up system call on the submitting thread. Default 100 us; zero: never.
    pub worker_spin: Duration,
    /// How long a starting task waits for evicted tasks to release memory. Default 30 s.
    pub eviction_timeout: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            workers: 8,
            memory_headroom: ByteSize::Bytes(1 << 30),
            memory_capacity: None,
            max_queue: 1024,
            max_bypass: 4,
            green_contexts: true,
            group_size: None,
            worker_spin: Duration::from_micros(100),
            eviction_timeout: Duration::from_secs(30),
        }
    }
}

impl SchedulerConfig {
    /// Sets the worker count.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }
    /// Sets the memory headroom.
    pub fn memory_headroom(mut self, b: impl Into<ByteSize>) -> Self {
        self.memory_headroom = b.into();
        self
    }
    /// Caps the memory capacity.
    pub fn memory_capacity(mut self, b: impl Into<ByteSize>) -> Self {
        self.memory_capacity = Some(b.into());
        self
    }
    /// Sets how long an idle worker polls before it sleeps.
    pub fn worker_spin(mut self, d: Duration) -> Self {
        self.worker_spin = d;
        self
    }
    /// Enables or disables green contexts.
    pub fn green_contexts(mut self, on: bool) -> Self {
        self.green_contexts = on;
        self
    }
}

/// A partition to create or resize: name, memory quota, compute share, priority band.
///
/// ```
/// let p = gpukit_sched::Partition::new("realtime").memory("8GiB").compute(0.25).priority_band(1);
/// assert_eq!(p.compute, 0.25);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Name.
    pub name: String,
    /// Memory quota.
    pub memory: ByteSize,
    /// Compute share (rounded to SM groups).
    pub compute: f64,
    /// Priority band.
    pub priority_band: i32,
}

impl Partition {
    /// A partition with no memory and no compute yet.
    pub fn new(name: impl Into<String>) -> Self {
        Partition {
            name: name.into(),
            memory: ByteSize::Bytes(0),
            compute: 0.0,
            priority_band: 0,
        }
    }
    /// Memory quota.
    pub fn memory(mut self, b: impl Into<ByteSize>) -> Self {
        self.memory = b.into();
        self
    }
    /// Compute share.
    pub fn compute(mut self, share: f64) -> Self {
        self.compute = share;
        self
    }
    /// Priority band.
    pub fn priority_band(mut self, band: i32) -> Self {
        self.priority_band = band;
        self
    }
    fn resolve(&self) -> Result<PartitionSpec> {
        Ok(PartitionSpec {
            name: self.name.clone(),
            memory: self.memory.resolve()?,
            compute: self.compute,
            priority_band: self.priority_band,
        })
    }
}

/// The admission result, available at once from [`TaskHandle::admission`].
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Admitted and started (or starting).
    Admitted {
        /// Its compute.
        compute: ComputeGrant,
        /// Bytes committed.
        memory_committed: u64,
    },
    /// Waiting in its pool's queue at `position` (0 = next).
    Queued {
        /// Place in the queue.
        position: usize,
    },
    /// Never admitted.
    Rejected {
        /// Which resource.
        resource: Resource,
        /// How much was asked.
        requested: u64,
        /// How much could ever be given.
        available: u64,
    },
}

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for resources.
    Queued,
    /// Started; waiting for evicted tasks to release memory.
    Starting,
    /// Its closure runs.
    Running,
    /// Finished with Ok.
    Succeeded,
    /// Finished with an error or a panic.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Rejected at admission or while queued.
    Rejected,
    /// Evicted under memory pressure.
    Preempted,
}

/// Live statistics of one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStats {
    /// Id.
    pub id: TaskId,
    /// Name.
    pub name: String,
    /// Class.
    pub qos: QosClass,
    /// State.
    pub state: TaskState,
    /// Place in its queue while queued.
    pub queue_position: Option<usize>,
    /// Bytes in use now.
    pub memory_in_use: u64,
    /// Highest bytes in use.
    pub memory_peak: u64,
    /// Bytes committed.
    pub memory_committed: u64,
    /// Its memory limit (u64::MAX: none).
    pub memory_limit: u64,
    /// GPU time: span between events recorded on its home stream at start and end (ms).
    pub gpu_time_ms: f64,
    /// Its compute grant.
    pub compute: Option<ComputeGrant>,
    /// SMs it may use now (own + lent; floor included).
    pub usable_sms: u32,
    /// Kernels launched through its context.
    pub kernels_launched: u64,
    /// Times a launch was delayed by pacing.
    pub throttles: u64,
    /// Milliseconds spent throttled.
    pub throttled_ms: f64,
    /// Times it was preempted (0 or 1).
    pub preemptions: u64,
    /// Bytes it reported moving.
    pub reported_bytes: u64,
    /// `reported_bytes / gpu_time` in GB/s, when both are known.
    pub achieved_gbps: Option<f64>,
    /// Milliseconds from submission to start.
    pub wait_ms: f64,
    /// Milliseconds from start to end (or now).
    pub run_ms: f64,
}

/// Partition (or default pool) statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionStats {
    /// The pool.
    pub pool: PoolInfo,
    /// Bytes in use by its running tasks.
    pub memory_in_use: u64,
}

/// Scheduler-wide statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerStats {
    /// The enforcement mechanism in force for compute and why.
    pub mechanism: String,
    /// The SM layout.
    pub layout: SmLayout,
    /// Admission memory capacity.
    pub memory_capacity: u64,
    /// Live and recently finished tasks.
    pub tasks: Vec<TaskStats>,
    /// Pools.
    pub partitions: Vec<PartitionStats>,
    /// Submissions.
    pub submitted: u64,
    /// Rejections (at submit or while queued).
    pub rejected: u64,
    /// Tasks finished with Ok.
    pub succeeded: u64,
    /// Tasks failed, panicked or cancelled.
    pub failed: u64,
    /// Tasks preempted, in order of eviction: (id, name, class).
    pub evictions: Vec<(TaskId, String, QosClass)>,
    /// Kernels launched by all tasks.
    pub kernels_launched: u64,
    /// Green contexts created (pooled and reused).
    pub green_contexts_created: u64,
}

// ---------------------------------------------------------------------------------------------

struct TaskShared {
    id: TaskId,
    spec: ResolvedSpec,
    owner: OwnerId,
    submitted: Instant,
    status: Mutex<Status>,
    done: Condvar,
    cancel: AtomicBool,
    preempt: AtomicBool,
    preempt_reason: Mutex<String>,
    generation: AtomicU64,
    usable: Mutex<(GroupSet, GroupSet)>,
    kernels: AtomicU64,
    throttles: AtomicU64,
    throttled_ns: AtomicU64,
    bytes: AtomicU64,
}

struct Status {
    state: TaskState,
    grant: Option<Grant>,
    started: Option<Instant>,
    finished: Option<Instant>,
    gpu_ms: f64,
    mem_peak: u64,
    lane_sms: u32,
    final_error: Option<String>,
}

type Job = Box<dyn FnOnce(&mut TaskContext) + Send>;

/// Maps keyed by task ids (sequential numbers: a multiplicative hash suffices).
type IdMap<V> = HashMap<TaskId, V, std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// `sched-task-{id}` without a temporary `String`.
fn owner_of(id: TaskId) -> OwnerId {
    const PREFIX: &[u8] = b"sched-task-";
    let mut buf = [0u8; PREFIX.len() + 20];
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 20];
    let (mut n, mut k) = (id, 0);
    loop {
        digits[k] = b'0' + (n % 10) as u8;
        k += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (i, d) in digits[..k].iter().rev().enumerate() {
        buf[PREFIX.len() + i] = *d;
    }
    let text = std::str::from_utf8(&buf[..PREFIX.len() + k]).expect("ASCII");
    OwnerId::new(text)
}

struct Pending {
    task: Arc<TaskShared>,
    job: Job,
}

struct State {
    planner: Planner,
    live: IdMap<Arc<TaskShared>>,
    queued_jobs: IdMap<Pending>,
    finished: VecDeque<Arc<TaskShared>>,
    started_seq: u64,
    start_order: IdMap<u64>,
    evictions: Vec<(TaskId, String, QosClass)>,
    outbox: Vec<Pending>,
    submitted: u64,
    rejected: u64,
    succeeded: u64,
    failed: u64,
    shutting_down: bool,
}

/// A stream a task can run on, with its context and ordering events.
struct Lane {
    raw: sys::CUstream,
    ctx: sys::CUcontext,
    core: Stream,
    sms: u32,
    key: LaneKey,
    marker: GreenEvent,
    t0: GreenEvent,
    t1: GreenEvent,
    _green: Option<(GreenStream, GreenContext)>,
}

// SAFETY: the raw handles are process-wide driver objects kept alive by the fields; streams and
// events may be used from any thread.
unsafe impl Send for Lane {}
// SAFETY: as above.
unsafe impl Sync for Lane {}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LaneKey {
    Green(GroupSet, bool),
    Primary,
}

struct Inner {
    /// `None` only for [`Scheduler::cpu_only`] (benches and tests of the CPU side).
    dev: Option<Device>,
    cfg: SchedulerConfig,
    epoch: Instant,
    state: Mutex<State>,
    memory_freed: Condvar,
    owners: RwLock<HashMap<OwnerId, Arc<TaskShared>>>,
    split: Option<SmSplit>,
    layout: SmLayout,
    mechanism: String,
    lanes: Mutex<HashMap<LaneKey, Vec<Lane>>>,
    lanes_created: AtomicU64,
    kernels_total: AtomicU64,
    next_id: AtomicU64,
    handoff: Handoff,
}

/// Started tasks on their way to the workers. A worker that just finished a task polls
/// `pending` for `worker_spin` before it sleeps on `ready`; a sender wakes sleeping workers
/// only for the jobs that polling workers will not take, so a task handed to a polling worker
/// costs the submitting thread no system call.
struct Handoff {
    queue: Mutex<HandoffQueue>,
    ready: Condvar,
    /// Jobs queued (a hint for the polling worker; the queue under the lock decides).
    pending: AtomicUsize,
}

struct HandoffQueue {
    jobs: VecDeque<Pending>,
    /// Workers polling: each checks the queue under the lock before it sleeps.
    polling: usize,
    closed: bool,
}

impl Handoff {
    fn new() -> Self {
        Handoff {
            queue: Mutex::new(HandoffQueue {
                jobs: VecDeque::new(),
                polling: 0,
                closed: false,
            }),
            ready: Condvar::new(),
            pending: AtomicUsize::new(0),
        }
    }

    /// Queues started tasks; after [`close`](Self::close) they are dropped.
    fn send(&self, out: Vec<Pending>) {
        let wake = {
            let mut q = self.queue.lock();
            if q.closed {
                return;
            }
            let n = out.len();
            q.jobs.extend(out);
            self.pending.store(q.jobs.len(), Ordering::Release);
            n.saturating_sub(q.polling)
        };
        // After unlocking, so a woken worker does not block on the lock. A worker that is
        // still polling took no wake-up; one that takes a job and sees more wakes another.
        for _ in 0..wake {
            self.ready.notify_one();
        }
    }

    /// Workers finish the queued jobs, then exit.
    fn close(&self) {
        self.queue.lock().closed = true;
        self.ready.notify_all();
    }

    /// The next job; `None` once closed and drained. `spin`: poll before sleeping.
    fn recv(&self, spin: Duration) -> Option<Pending> {
        let mut q = self.queue.lock();
        if spin > Duration::ZERO && q.jobs.is_empty() && !q.closed && q.polling == 0 {
            q.polling += 1;
            drop(q);
            let t = Instant::now();
            let mut i = 0u32;
            while self.pending.load(Ordering::Acquire) == 0 {
                i = i.wrapping_add(1);
                if i.is_multiple_of(64) {
                    if t.elapsed() >= spin {
                        break;
                    }
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            q = self.queue.lock();
            q.polling -= 1;
        }
        loop {
            if let Some(p) = q.jobs.pop_front() {
                self.pending.store(q.jobs.len(), Ordering::Release);
                let more = !q.jobs.is_empty();
                drop(q);
                if more {
                    self.ready.notify_one();
                }
                return Some(p);
            }
            if q.closed {
                return None;
            }
            self.ready.wait(&mut q);
        }
    }
}

/// The QoS scheduler of one device. See the crate docs.
pub struct Scheduler {
    inner: Arc<Inner>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("layout", &self.inner.layout)
            .field("mechanism", &self.inner.mechanism)
            .finish()
    }
}

impl Scheduler {
    /// Starts a scheduler on `dev`: probes and splits the SMs once into groups (green
    /// contexts), sizes memory capacity (free memory now minus headroom, or the configured
    /// cap), installs the allocation hook and starts the workers.
    pub fn new(dev: Device, cfg: SchedulerConfig) -> Result<Scheduler> {
        if cfg.workers == 0 {
            return Err(Error::invalid("workers", 0, "need at least one worker"));
        }
        let headroom = cfg.memory_headroom.resolve()?;
        let cap_cfg = cfg
            .memory_capacity
            .as_ref()
            .map(ByteSize::resolve)
            .transpose()?;
        let free = dev.free_memory()? as u64;
        let memory_capacity = free
            .saturating_sub(headroom)
            .min(cap_cfg.unwrap_or(u64::MAX));
        let (split, layout, mechanism) = if cfg.green_contexts {
            let sup = probe(&dev);
            match sup.available.then(|| SmSplit::new(&dev, cfg.group_size)) {
                Some(Ok(s)) => {
                    let l = s.layout();
                    let m = format!(
                        "green contexts: {} SMs split once into {} groups of {} + {} floor SMs (driver {}.{})",
                        l.total_sms, l.groups, l.group_size, l.remainder_sms,
                        sup.driver_version / 1000, sup.driver_version % 1000 / 10
                    );
                    (Some(s), l, m)
                }
                Some(Err(e)) => (
                    None,
                    pacing_layout(&dev)?,
                    format!("pacing by measured GPU time (green-context split failed: {e})"),
                ),
                None => (
                    None,
                    pacing_layout(&dev)?,
                    format!(
                        "pacing by measured GPU time (no green contexts: {})",
                        sup.reason
                    ),
                ),
            }
        } else {
            (
                None,
                pacing_layout(&dev)?,
                "pacing by measured GPU time (green contexts disabled by configuration)"
                    .to_string(),
            )
        };
        Scheduler::start(Some(dev), cfg, memory_capacity, split, layout, mechanism)
    }

    /// A scheduler with no device, for benches and tests of its CPU side: the same planner,
    /// state, admission and hand-off to the worker threads as [`Scheduler::new`] (so
    /// [`submit`](Self::submit) runs exactly the code it runs there), with `layout` and
    /// `memory_capacity` given instead of probed. Workers run each task's closure with a
    /// context that has no streams (a closure that touches the GPU through it panics and the
    /// task fails); [`device`](Self::device) and [`TaskContext::device`] return
    /// [`Error::NoDevice`], and [`TaskContext::alloc`] fails with it.
    #[doc(hidden)]
    pub fn cpu_only(
        layout: SmLayout,
        memory_capacity: u64,
        cfg: SchedulerConfig,
    ) -> Result<Scheduler> {
        if cfg.workers == 0 {
            return Err(Error::invalid("workers", 0, "need at least one worker"));
        }
        let mechanism = "none: CPU-only scheduler (no device; benches and tests)".to_string();
        Scheduler::start(None, cfg, memory_capacity, None, layout, mechanism)
    }

    fn start(
        dev: Option<Device>,
        cfg: SchedulerConfig,
        memory_capacity: u64,
        split: Option<SmSplit>,
        layout: SmLayout,
        mechanism: String,
    ) -> Result<Scheduler> {
        let planner = Planner::new(PlannerConfig {
            memory_capacity,
            layout,
            max_running: cfg.workers,
            max_queue: cfg.max_queue,
            max_bypass: cfg.max_bypass,
        });
        let inner = Arc::new(Inner {
            dev: dev.clone(),
            cfg: cfg.clone(),
            epoch: Instant::now(),
            state: Mutex::new(State {
                planner,
                live: IdMap::default(),
                queued_jobs: IdMap::default(),
                finished: VecDeque::new(),
                started_seq: 0,
                start_order: IdMap::default(),
                evictions: Vec::new(),
                outbox: Vec::new(),
                submitted: 0,
                rejected: 0,
                succeeded: 0,
                failed: 0,
                shutting_down: false,
            }),
            memory_freed: Condvar::new(),
            owners: RwLock::new(HashMap::new()),
            split,
            layout,
            mechanism,
            lanes: Mutex::new(HashMap::new()),
            lanes_created: AtomicU64::new(0),
            kernels_total: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            handoff: Handoff::new(),
        });
        if let Some(dev) = &dev {
            let weak = Arc::downgrade(&inner);
            dev.allocator()
                .set_alloc_hook(Some(Arc::new(
                    move |owner: &OwnerId, bytes: usize| match weak.upgrade() {
                        Some(inner) => inner.alloc_hook(owner, bytes as u64),
                        None => Ok(()),
                    },
                )));
        }
        let workers = (0..cfg.workers)
            .map(|i| {
                let inner = inner.clone();
                std::thread::Builder::new()
                    .name(format!("gpukit-sched-{i}"))
                    .spawn(move || {
                        let mut spin = Duration::ZERO;
                        while let Some(p) = inner.handoff.recv(spin) {
                            inner.run_task(p);
                            spin = inner.cfg.worker_spin;
                        }
                    })
                    .map_err(|e| Error::invalid("worker thread", i, e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Scheduler { inner, workers })
    }

    /// The device; [`Error::NoDevice`] for a CPU-only scheduler ([`Scheduler::cpu_only`]).
    pub fn device(&self) -> Result<&Device> {
        self.inner.dev()
    }

    /// The SM layout in force.
    pub fn layout(&self) -> SmLayout {
        self.inner.layout
    }

    /// Which compute mechanism is in force, in words.
    pub fn mechanism(&self) -> &str {
        &self.inner.mechanism
    }

    /// Memory that requests may sum to.
    pub fn memory_capacity(&self) -> u64 {
        self.inner.state.lock().planner.config().memory_capacity
    }

    /// Submits `task` with `spec`. Returns at once; the handle says whether it was admitted,
    /// queued (with its position) or rejected (resource, requested, available). A malformed
    /// or contradictory spec is an `Err` and leaves no state behind.
    pub fn submit<T, F>(&self, task: F, spec: TaskSpec) -> Result<TaskHandle<T>>
    where
        T: Send + 'static,
        F: FnOnce(&mut TaskContext) -> Result<T> + Send + 'static,
    {
        let spec = spec.resolve()?;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let owner = owner_of(id);
        let shared = Arc::new(TaskShared {
            id,
            spec: spec.clone(),
            owner,
            submitted: Instant::now(),
            status: Mutex::new(Status {
                state: TaskState::Queued,
                grant: None,
                started: None,
                finished: None,
                gpu_ms: 0.0,
                mem_peak: 0,
                lane_sms: 0,
                final_error: None,
            }),
            done: Condvar::new(),
            cancel: AtomicBool::new(false),
            preempt: AtomicBool::new(false),
            preempt_reason: Mutex::new(String::new()),
            generation: AtomicU64::new(0),
            usable: Mutex::new((GroupSet::EMPTY, GroupSet::EMPTY)),
            kernels: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        });
        let slot: Arc<Mutex<Option<Result<T>>>> = Arc::new(Mutex::new(None));
        let slot2 = slot.clone();
        let job: Job = Box::new(move |ctx: &mut TaskContext| {
            let r = catch_unwind(AssertUnwindSafe(|| task(ctx)));
            let r = match r {
                Ok(r) => r,
                Err(payload) => Err(Error::Panicked {
                    task: ctx.task.spec.name.clone(),
                    message: panic_message(&payload),
                }),
            };
            if let Err(e) = &r {
                ctx.task.status.lock().final_error = Some(e.to_string());
            }
            *slot2.lock() = Some(r);
        });
        let now = self.inner.now();
        let mut st = self.inner.state.lock();
        if st.shutting_down {
            return Err(Error::ShutDown);
        }
        let (decision, events) = st.planner.submit(id, spec, now)?;
        st.submitted += 1;
        let admission = match decision {
            Decision::Admitted(g) => {
                st.live.insert(id, shared.clone());
                self.inner
                    .owners
                    .write()
                    .insert(shared.owner.clone(), shared.clone());
                self.inner.dispatch(
                    &mut st,
                    Pending {
                        task: shared.clone(),
                        job,
                    },
                    g,
                );
                Admission::Admitted {
                    compute: g.compute,
                    memory_committed: g.memory_committed,
                }
            }
            Decision::Queued { position } => {
                st.live.insert(id, shared.clone());
                st.queued_jobs.insert(
                    id,
                    Pending {
                        task: shared.clone(),
                        job,
                    },
                );
                Admission::Queued { position }
            }
            Decision::Rejected {
                resource,
                requested,
                available,
            } => {
                st.rejected += 1;
                let reason =
                    format!("not enough {resource}: requested {requested}, available {available}");
                *slot.lock() = Some(Err(Error::Rejected {
                    task: shared.spec.name.clone(),
                    reason: reason.clone(),
                }));
                finish_status(&shared, TaskState::Rejected, Some(reason));
                st.finished.push_back(shared.clone());
                Admission::Rejected {
                    resource,
                    requested,
                    available,
                }
            }
        };
        self.inner.apply_events(&mut st, events);
        let out = std::mem::take(&mut st.outbox);
        drop(st);
        self.inner.flush(out);
        Ok(TaskHandle {
            task: shared,
            slot,
            admission,
            inner: self.inner.clone(),
        })
    }

    /// Creates a partition out of unused default-pool memory and SM groups.
    pub fn create_partition(&self, p: &Partition) -> Result<PoolInfo> {
        let spec = p.resolve()?;
        self.inner.state.lock().planner.create_partition(&spec)
    }

    /// Resizes a partition that has no admitted or queued tasks.
    pub fn resize_partition(&self, p: &Partition) -> Result<PoolInfo> {
        let spec = p.resolve()?;
        let now = self.inner.now();
        let mut st = self.inner.state.lock();
        let (info, events) = st.planner.resize_partition(&spec, now)?;
        self.inner.apply_events(&mut st, events);
        let out = std::mem::take(&mut st.outbox);
        drop(st);
        self.inner.flush(out);
        Ok(info)
    }

    /// Removes a partition that has no admitted or queued tasks.
    pub fn remove_partition(&self, name: &str) -> Result<()> {
        let now = self.inner.now();
        let mut st = self.inner.state.lock();
        let events = st.planner.remove_partition(name, now)?;
        self.inner.apply_events(&mut st, events);
        let out = std::mem::take(&mut st.outbox);
        drop(st);
        self.inner.flush(out);
        Ok(())
    }

    /// Live statistics: every live task and the last finished ones, pools and totals.
    pub fn stats(&self) -> SchedulerStats {
        let st = self.inner.state.lock();
        let mut tasks: Vec<TaskStats> = st
            .live
            .values()
            .chain(st.finished.iter())
            .map(|t| self.inner.task_stats(t, &st))
            .collect();
        tasks.sort_by_key(|t| t.id);
        let partitions = st
            .planner
            .pools()
            .into_iter()
            .map(|pool| {
                let memory_in_use = st
                    .live
                    .values()
                    .filter(|t| t.spec.partition == pool.name)
                    .map(|t| self.inner.in_use(&t.owner))
                    .sum();
                PartitionStats {
                    pool,
                    memory_in_use,
                }
            })
            .collect();
        SchedulerStats {
            mechanism: self.inner.mechanism.clone(),
            layout: self.inner.layout,
            memory_capacity: st.planner.config().memory_capacity,
            tasks,
            partitions,
            submitted: st.submitted,
            rejected: st.rejected,
            succeeded: st.succeeded,
            failed: st.failed,
            evictions: st.evictions.clone(),
            kernels_launched: self.inner.kernels_total.load(Ordering::Relaxed),
            green_contexts_created: self.inner.lanes_created.load(Ordering::Relaxed),
        }
    }

    /// Pre-creates the green-context lanes for these group sets (creation costs about 1 ms
    /// each; the scheduler caches lanes, so this only moves that cost out of a task's start).
    pub fn prewarm(&self, sets: &[(GroupSet, bool)]) -> Result<()> {
        for &(g, floor) in sets {
            let lane = self.inner.checkout(LaneKey::Green(g, floor))?;
            self.inner.checkin(lane);
        }
        Ok(())
    }

    /// Stops accepting work, cancels queued tasks, waits for running ones, releases the
    /// green contexts and removes the allocation hook.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        {
            let mut st = self.inner.state.lock();
            if st.shutting_down {
                return;
            }
            st.shutting_down = true;
            let queued: Vec<TaskId> = st.queued_jobs.keys().copied().collect();
            for id in queued {
                if let Some(p) = st.queued_jobs.remove(&id) {
                    let now = self.inner.now();
                    st.planner.cancel(id, now);
                    st.live.remove(&id);
                    finish_status(
                        &p.task,
                        TaskState::Cancelled,
                        Some("scheduler shut down".into()),
                    );
                }
            }
        }
        self.inner.handoff.close();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        let Some(dev) = &self.inner.dev else {
            return;
        };
        dev.allocator().set_alloc_hook(None);
        let _ = dev.synchronize();
        // Cached segments ordered on our streams must go before the streams do.
        let _ = dev.allocator().empty_cache();
        // Live buffers anywhere (a task may have returned one) may be ordered on our streams.
        let in_use = dev.allocator().stats().in_use;
        let mut lanes = self.inner.lanes.lock();
        if in_use == 0 {
            lanes.clear();
        } else {
            // Buffers still held (returned from tasks) may be ordered on these streams: keep
            // the streams alive rather than risk a dangling handle.
            for (_, v) in lanes.drain() {
                std::mem::forget(v);
            }
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn pacing_layout(dev: &Device) -> Result<SmLayout> {
    let sms = dev.multiprocessor_count();
    SmLayout::with_groups(sms, sms, 1, false)
        .or_else(|_| SmLayout::with_groups(sms.max(1), sms.max(1), 1, false))
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

fn finish_status(t: &TaskShared, state: TaskState, err: Option<String>) {
    let mut s = t.status.lock();
    s.state = state;
    s.finished = Some(Instant::now());
    s.final_error = err;
    t.done.notify_all();
}

impl Inner {
    fn dev(&self) -> Result<&Device> {
        self.dev.as_ref().ok_or(Error::NoDevice)
    }

    /// Bytes `owner` has allocated now (0 without a device).
    fn in_use(&self, owner: &OwnerId) -> u64 {
        self.dev
            .as_ref()
            .map_or(0, |d| d.allocator().owner_usage(owner).in_use as u64)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Hands started tasks to the workers (call after releasing the state lock).
    fn flush(&self, out: Vec<Pending>) {
        if out.is_empty() {
            return;
        }
        self.handoff.send(out);
    }

    fn dispatch(&self, st: &mut State, p: Pending, g: Grant) {
        st.started_seq += 1;
        st.start_order.insert(p.task.id, st.started_seq);
        {
            let mut s = p.task.status.lock();
            s.state = TaskState::Starting;
            s.grant = Some(g);
        }
        self.sync_groups(st);
        // Sent by `flush` once the state lock is released, so the woken worker does not
        // block on it.
        st.outbox.push(p);
    }

    /// Applies planner events: starts queued tasks, rejects expired ones, and publishes the
    /// new own/lent groups of every running task.
    fn apply_events(&self, st: &mut State, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Started(id, g) => {
                    if let Some(p) = st.queued_jobs.remove(&id) {
                        self.owners
                            .write()
                            .insert(p.task.owner.clone(), p.task.clone());
                        self.dispatch(st, p, g);
                    }
                }
                Event::Rejected(id, reason) => {
                    if let Some(p) = st.queued_jobs.remove(&id) {
                        st.live.remove(&id);
                        st.rejected += 1;
                        finish_status(&p.task, TaskState::Rejected, Some(reason));
                        push_finished(st, p.task.clone());
                        // The job (and its result slot) is dropped: wait() reports the reason.
                    }
                }
            }
        }
        self.sync_groups(st);
    }

    /// Publishes the planner's lending changes (own + lent groups) to the running tasks.
    fn sync_groups(&self, st: &mut State) {
        for (id, _) in st.planner.take_lend_changes() {
            if let (Some(t), Some(groups)) = (st.live.get(&id), st.planner.running_groups(id)) {
                let mut u = t.usable.lock();
                if *u != groups {
                    *u = groups;
                    t.generation.fetch_add(1, Ordering::Release);
                }
            }
        }
    }

    fn pool_usage(&self, st: &State, partition: &Option<String>) -> (u64, Vec<MemUse>) {
        let cap = st
            .planner
            .pools()
            .into_iter()
            .find(|p| &p.name == partition)
            .map(|p| p.memory_quota)
            .unwrap_or(0);
        let tasks = st
            .planner
            .running_tasks()
            .into_iter()
            .filter_map(|id| st.live.get(&id))
            .filter(|t| &t.spec.partition == partition)
            .map(|t| {
                let grant = st.planner.grant(t.id);
                MemUse {
                    id: t.id,
                    name: t.spec.name.clone(),
                    qos: t.spec.qos,
                    priority: t.spec.priority,
                    started: st.start_order.get(&t.id).copied().unwrap_or(0),
                    request: t.spec.memory_request,
                    limit: grant.map(|g| g.memory_limit).unwrap_or(u64::MAX),
                    in_use: self.in_use(&t.owner),
                }
            })
            .collect();
        (cap, tasks)
    }

    fn alloc_hook(&self, owner: &OwnerId, bytes: u64) -> gpukit_core::Result<()> {
        let Some(task) = self.owners.read().get(owner).cloned() else {
            return Ok(());
        };
        let refuse = |reason: String| gpukit_core::Error::AllocationRefused {
            owner: owner.to_string(),
            requested: bytes as usize,
            reason,
        };
        if task.preempt.load(Ordering::Acquire) {
            return Err(refuse(format!("preempted: {}", task.preempt_reason.lock())));
        }
        if task.cancel.load(Ordering::Acquire) {
            return Err(refuse("cancelled".into()));
        }
        let st = self.state.lock();
        let (cap, tasks) = self.pool_usage(&st, &task.spec.partition);
        let Some(me) = tasks.iter().find(|t| t.id == task.id).cloned() else {
            return Ok(());
        };
        // Past its limit (its own, capped by its partition's quota) an allocation can never
        // succeed: the quota error, as the allocator's own check would give, before the
        // pressure check (which, in a partition whose quota is the pool's capacity, would
        // otherwise answer first with a pressure error).
        if me.in_use.saturating_add(bytes) > me.limit {
            return Err(gpukit_core::Error::QuotaExceeded {
                owner: owner.to_string(),
                requested: bytes as usize,
                quota: usize::try_from(me.limit).unwrap_or(usize::MAX),
                in_use: usize::try_from(me.in_use).unwrap_or(usize::MAX),
            });
        }
        // The limit is also the allocator's quota; below it: pressure only.
        let me = MemUse {
            limit: u64::MAX,
            ..me
        };
        check_allocation(&tasks, cap, &me, bytes).map_err(|e| refuse(e.to_string()))
    }

    /// Evicts as needed so that `task`'s commitment fits beside what others use, then waits
    /// until it does.
    fn make_room(&self, task: &Arc<TaskShared>) -> Result<()> {
        let deadline = Instant::now() + self.cfg.eviction_timeout;
        let mut st = self.state.lock();
        loop {
            let (cap, tasks) = self.pool_usage(&st, &task.spec.partition);
            let others: Vec<MemUse> = tasks.into_iter().filter(|t| t.id != task.id).collect();
            let incoming = task.spec.memory_request;
            if crate::memory::ledger_total(&others) + incoming <= cap {
                return Ok(());
            }
            for v in plan_eviction(&others, cap, incoming) {
                if let Some(victim) = st.live.get(&v).cloned() {
                    if !victim.preempt.swap(true, Ordering::AcqRel) {
                        *victim.preempt_reason.lock() = format!(
                            "{} task `{}` evicted to make room for {} task `{}`",
                            victim.spec.qos, victim.spec.name, task.spec.qos, task.spec.name
                        );
                        st.evictions
                            .push((victim.id, victim.spec.name.clone(), victim.spec.qos));
                    }
                }
            }
            if self.memory_freed.wait_until(&mut st, deadline).timed_out() {
                return Err(Error::Rejected {
                    task: task.spec.name.clone(),
                    reason: format!(
                        "memory for its request of {incoming} bytes was not released within {:?}",
                        self.cfg.eviction_timeout
                    ),
                });
            }
        }
    }

    fn checkout(&self, key: LaneKey) -> Result<Lane> {
        if let Some(l) = self.lanes.lock().get_mut(&key).and_then(Vec::pop) {
            return Ok(l);
        }
        let lane = match key {
            LaneKey::Green(groups, floor) => {
                let split = self
                    .split
                    .as_ref()
                    .ok_or_else(|| Error::invalid("lane", "green", "no green contexts"))?;
                let gc = split.create(groups, floor)?;
                let gs = gc.create_stream(0)?;
                let lane = Lane {
                    raw: gs.raw(),
                    ctx: gc.cu_ctx(),
                    core: Stream::from_cuda(gs.cuda().clone()),
                    sms: gc.sms(),
                    key,
                    marker: gc.create_event()?,
                    t0: gc.create_event()?,
                    t1: gc.create_event()?,
                    _green: None,
                };
                Lane {
                    _green: Some((gs, gc)),
                    ..lane
                }
            }
            LaneKey::Primary => {
                let dev = self.dev()?;
                let s = dev.new_stream(0)?;
                let ctx = dev.context().cu_ctx();
                Lane {
                    raw: s.cuda().cu_stream(),
                    ctx,
                    sms: dev.multiprocessor_count(),
                    key,
                    marker: GreenEvent::in_context(ctx)?,
                    t0: GreenEvent::in_context(ctx)?,
                    t1: GreenEvent::in_context(ctx)?,
                    core: s,
                    _green: None,
                }
            }
        };
        self.lanes_created.fetch_add(1, Ordering::Relaxed);
        Ok(lane)
    }

    fn checkin(&self, lane: Lane) {
        self.lanes.lock().entry(lane.key).or_default().push(lane);
    }

    fn lane_key(&self, own: GroupSet, lent: GroupSet, mechanism: Mechanism) -> LaneKey {
        match (&self.split, mechanism) {
            (None, _) => LaneKey::Primary,
            (Some(_), Mechanism::GreenContext) => LaneKey::Green(own.union(lent), false),
            (Some(s), _) => {
                if s.has_remainder() {
                    LaneKey::Green(lent, true)
                } else if !lent.is_empty() {
                    LaneKey::Green(lent, false)
                } else {
                    // No floor SMs and nothing lent: the whole GPU, paced.
                    LaneKey::Green(GroupSet::first(s.layout().groups), false)
                }
            }
        }
    }

    fn run_task(self: &Arc<Self>, p: Pending) {
        let task = p.task.clone();
        let outcome = match &self.dev {
            Some(dev) => self.run_on_device(dev, p),
            None => self.run_without_device(p),
        };
        self.complete(&task, outcome);
    }

    /// [`Scheduler::cpu_only`]: the same steps as [`run_on_device`](Self::run_on_device)
    /// minus quotas, streams and events.
    fn run_without_device(self: &Arc<Self>, p: Pending) -> Result<()> {
        let task = p.task.clone();
        self.make_room(&task)?;
        let grant = task
            .status
            .lock()
            .grant
            .ok_or_else(|| Error::invalid("task", task.id, "started without a grant"))?;
        {
            let mut s = task.status.lock();
            s.state = TaskState::Running;
            s.started = Some(Instant::now());
        }
        let mut ctx = TaskContext {
            inner: self.clone(),
            task,
            grant,
            home: None,
            lent: None,
            on_lent: false,
            seen_generation: u64::MAX,
            pacer: None,
            blas: None,
        };
        (p.job)(&mut ctx);
        Ok(())
    }

    fn run_on_device(self: &Arc<Self>, dev: &Device, p: Pending) -> Result<()> {
        let task = p.task.clone();
        (|| {
            self.make_room(&task)?;
            let grant = task
                .status
                .lock()
                .grant
                .ok_or_else(|| Error::invalid("task", task.id, "started without a grant"))?;
            dev.allocator().set_quota(
                &task.owner,
                (grant.memory_limit != u64::MAX).then_some(grant.memory_limit as usize),
            )?;
            let (own, _) = *task.usable.lock();
            let home_key = self.lane_key(own, GroupSet::EMPTY, grant.compute.mechanism);
            let home = self.checkout(home_key)?;
            let pacing = match grant.compute.mechanism {
                Mechanism::Pacing => Some(Pacer::new(
                    (grant.compute.requested_share * self.layout.total_sms as f64
                        / home.sms.max(1) as f64)
                        .min(1.0),
                )),
                Mechanism::Floor if self.split.as_ref().is_none_or(|s| !s.has_remainder()) => {
                    Some(Pacer::new(0.1))
                }
                _ => None,
            };
            {
                let mut s = task.status.lock();
                s.state = TaskState::Running;
                s.started = Some(Instant::now());
                s.lane_sms = home.sms;
            }
            let mut ctx = TaskContext {
                inner: self.clone(),
                task: task.clone(),
                grant,
                home: Some(home),
                lent: None,
                on_lent: false,
                seen_generation: u64::MAX,
                pacer: pacing,
                blas: None,
            };
            ctx.h().t0.record_on(ctx.h().raw)?;
            let owner = task.owner.clone();
            let core = ctx.h().core.clone();
            dev.with_stream(&core, || {
                dev.allocator().with_owner(&owner, || (p.job)(&mut ctx))
            });
            ctx.finish()
        })()
    }

    fn complete(&self, task: &Arc<TaskShared>, outcome: Result<()>) {
        let peak = match &self.dev {
            Some(dev) => {
                let usage = dev.allocator().owner_usage(&task.owner);
                let _ = dev.allocator().set_quota(&task.owner, None);
                usage.peak as u64
            }
            None => 0,
        };
        self.owners.write().remove(&task.owner);
        let (state, err) = if task.preempt.load(Ordering::Acquire) {
            (
                TaskState::Preempted,
                Some(task.preempt_reason.lock().clone()),
            )
        } else if let Err(e) = outcome {
            (TaskState::Failed, Some(e.to_string()))
        } else {
            let s = task.status.lock();
            match &s.final_error {
                Some(e) => (TaskState::Failed, Some(e.clone())),
                None => (TaskState::Succeeded, None),
            }
        };
        let now = self.now();
        let out = {
            let mut st = self.state.lock();
            st.live.remove(&task.id);
            st.start_order.remove(&task.id);
            let events = st.planner.finish(task.id, now);
            if state == TaskState::Succeeded {
                st.succeeded += 1;
            } else {
                st.failed += 1;
            }
            push_finished(&mut st, task.clone());
            self.apply_events(&mut st, events);
            std::mem::take(&mut st.outbox)
        };
        self.flush(out);
        self.memory_freed.notify_all();
        // Waiters wake last, after the scheduler's lock is free again.
        task.status.lock().mem_peak = peak;
        finish_status(task, state, err);
    }

    fn task_stats(&self, t: &Arc<TaskShared>, st: &State) -> TaskStats {
        let s = t.status.lock();
        let usage = self
            .dev
            .as_ref()
            .map(|d| d.allocator().owner_usage(&t.owner));
        let (in_use, peak) = usage.map_or((0, 0), |u| (u.in_use as u64, u.peak as u64));
        let (own, lent) = *t.usable.lock();
        let live = st.live.contains_key(&t.id);
        let usable_sms = if live && matches!(s.state, TaskState::Running | TaskState::Starting) {
            match s.grant.map(|g| g.compute.mechanism) {
                Some(Mechanism::GreenContext) => self.layout.sms(own.union(lent).len()),
                Some(_) if self.split.is_some() => {
                    self.layout.sms(lent.len()) + self.layout.remainder_sms
                }
                Some(_) => self.layout.total_sms,
                None => 0,
            }
        } else {
            0
        };
        let bytes = t.bytes.load(Ordering::Relaxed);
        let end = s.finished.unwrap_or_else(Instant::now);
        TaskStats {
            id: t.id,
            name: t.spec.name.clone(),
            qos: t.spec.qos,
            state: s.state,
            queue_position: if s.state == TaskState::Queued {
                st.planner.queue_position(t.id)
            } else {
                None
            },
            memory_in_use: in_use,
            memory_peak: peak.max(s.mem_peak),
            memory_committed: t.spec.memory_request,
            memory_limit: s
                .grant
                .map(|g| g.memory_limit)
                .unwrap_or(t.spec.memory_limit.unwrap_or(u64::MAX)),
            gpu_time_ms: s.gpu_ms,
            compute: s.grant.map(|g| g.compute),
            usable_sms,
            kernels_launched: t.kernels.load(Ordering::Relaxed),
            throttles: t.throttles.load(Ordering::Relaxed),
            throttled_ms: t.throttled_ns.load(Ordering::Relaxed) as f64 / 1e6,
            preemptions: t.preempt.load(Ordering::Relaxed) as u64,
            reported_bytes: bytes,
            achieved_gbps: (bytes > 0 && s.gpu_ms > 0.0).then(|| bytes as f64 / (s.gpu_ms * 1e6)),
            wait_ms: s
                .started
                .map(|x| x.duration_since(t.submitted).as_secs_f64() * 1e3)
                .unwrap_or(0.0),
            run_ms: s
                .started
                .map(|x| end.saturating_duration_since(x).as_secs_f64() * 1e3)
                .unwrap_or(0.0),
        }
    }
}

fn push_finished(st: &mut State, t: Arc<TaskShared>) {
    st.finished.push_back(t);
    while st.finished.len() > 256 {
        st.finished.pop_front();
    }
}

struct Pacer {
    share: f64,
    start: Instant,
    busy_ms: f64,
    inflight: VecDeque<(GreenEvent, GreenEvent)>,
    spare: Vec<(GreenEvent, GreenEvent)>,
}

impl Pacer {
    fn new(share: f64) -> Self {
        Pacer {
            share: share.max(1e-3),
            start: Instant::now(),
            busy_ms: 0.0,
            inflight: VecDeque::new(),
            spare: Vec::new(),
        }
    }
}

/// What a task's closure gets: its streams (on its green context), an allocator charged to
/// it, kernel launches that count and check for preemption, and its grant.
///
/// gpukit-core operations inside the task run on [`stream`](Self::stream) (the task's *home*
/// stream: its own SM groups, or the floor for BestEffort tasks) and are charged to the task.
/// Kernels launched with [`launch`](Self::launch) also use SM groups lent to the task while it
/// has them; lent groups are given up at the next launch after they are taken back.
pub struct TaskContext {
    inner: Arc<Inner>,
    task: Arc<TaskShared>,
    grant: Grant,
    home: Option<Lane>,
    lent: Option<Lane>,
    on_lent: bool,
    seen_generation: u64,
    pacer: Option<Pacer>,
    blas: Option<TaskBlas>,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("task", &self.task.spec.name)
            .field("grant", &self.grant)
            .finish()
    }
}

impl TaskContext {
    fn h(&self) -> &Lane {
        self.home
            .as_ref()
            .expect("the home lane lives as long as the context (none without a device)")
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task.id
    }
    /// The task's name.
    pub fn name(&self) -> &str {
        &self.task.spec.name
    }
    /// Its QoS class.
    pub fn qos(&self) -> QosClass {
        self.task.spec.qos
    }
    /// The compute it was given (groups, SMs, share, mechanism).
    pub fn compute(&self) -> ComputeGrant {
        self.grant.compute
    }
    /// Bytes committed to it.
    pub fn memory_committed(&self) -> u64 {
        self.grant.memory_committed
    }
    /// Its memory limit.
    pub fn memory_limit(&self) -> u64 {
        self.grant.memory_limit
    }
    /// SMs of the home stream's context.
    pub fn home_sms(&self) -> u32 {
        self.h().sms
    }
    /// SMs of the stream the next launch goes to (home, or home + lent groups).
    pub fn current_sms(&mut self) -> Result<u32> {
        self.refresh()?;
        Ok(if self.on_lent {
            self.lent.as_ref().map(|l| l.sms).unwrap_or(self.h().sms)
        } else {
            self.h().sms
        })
    }
    /// The device; [`Error::NoDevice`] in a task of a CPU-only scheduler
    /// ([`Scheduler::cpu_only`]).
    pub fn device(&self) -> Result<&Device> {
        self.inner.dev()
    }
    /// The home stream (gpukit-core operations in the task run here).
    pub fn stream(&self) -> &Stream {
        &self.h().core
    }
    /// The raw home stream and its context, for raw driver or library calls.
    pub fn raw_stream(&self) -> (sys::CUstream, sys::CUcontext) {
        (self.h().raw, self.h().ctx)
    }

    /// A safe point: `Err` if the task was cancelled or preempted.
    pub fn check(&self) -> Result<()> {
        if self.task.preempt.load(Ordering::Acquire) {
            return Err(Error::Preempted {
                task: self.task.spec.name.clone(),
                qos: self.task.spec.qos.to_string(),
                reason: self.task.preempt_reason.lock().clone(),
            });
        }
        if self.task.cancel.load(Ordering::Acquire) {
            return Err(Error::Cancelled {
                task: self.task.spec.name.clone(),
            });
        }
        Ok(())
    }

    /// Allocates `bytes` on the home stream, charged to this task (limit, commitment and
    /// eviction apply).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.check()?;
        Ok(self
            .inner
            .dev()?
            .allocator()
            .alloc_for(&self.task.owner, bytes, &self.h().core)?)
    }

    /// Records that the task moved `bytes` (for the achieved-bandwidth figure in its stats).
    pub fn report_bytes(&self, bytes: u64) {
        self.task.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A cuBLAS handle bound to the home stream in the task's green context, so cuBLAS
    /// kernels run on the task's SMs.
    pub fn cublas(&mut self) -> Result<&TaskBlas> {
        if self.blas.is_none() {
            self.blas = Some(TaskBlas::new(self.h().ctx, self.h().raw)?);
        }
        Ok(self.blas.as_ref().expect("just set"))
    }

    /// Blocks until the task's queued work is done.
    pub fn synchronize(&self) -> Result<()> {
        if let Some(l) = &self.lent {
            sync_raw(l.raw)?;
        }
        sync_raw(self.h().raw)
    }

    fn refresh(&mut self) -> Result<()> {
        let g = self.task.generation.load(Ordering::Acquire);
        if g == self.seen_generation {
            return Ok(());
        }
        self.seen_generation = g;
        let (own, lent) = *self.task.usable.lock();
        if lent.is_empty() || self.inner.split.is_none() {
            if self.on_lent {
                self.switch_to_home()?;
            }
            return Ok(());
        }
        let key = self.inner.lane_key(own, lent, self.grant.compute.mechanism);
        if self.lent.as_ref().map(|l| l.key) == Some(key) {
            if !self.on_lent {
                self.switch_to_lent()?;
            }
            return Ok(());
        }
        if self.on_lent {
            self.switch_to_home()?;
        }
        if let Some(old) = self.lent.take() {
            self.inner.checkin(old);
        }
        self.lent = Some(self.inner.checkout(key)?);
        self.switch_to_lent()
    }

    fn switch_to_lent(&mut self) -> Result<()> {
        let lane = self.lent.as_ref().expect("lent lane");
        make_current(self.h().ctx)?;
        self.h().marker.record_on(self.h().raw)?;
        self.h().marker.wait_on(lane.raw)?;
        self.on_lent = true;
        Ok(())
    }

    fn switch_to_home(&mut self) -> Result<()> {
        if let Some(lane) = &self.lent {
            lane.marker.record_on(lane.raw)?;
            lane.marker.wait_on(self.h().raw)?;
        }
        self.on_lent = false;
        Ok(())
    }

    /// Launches `kernel` at a kernel boundary of the task: checks for cancellation and
    /// preemption (the safe point), moves onto or off lent SM groups if the scheduler changed
    /// them, paces the launch when pacing is in force, and counts it.
    pub fn launch(&mut self, kernel: &Kernel, cfg: LaunchConfig, args: &[KernelArg]) -> Result<()> {
        self.check()?;
        self.refresh()?;
        if self.pacer.is_some() {
            return self.launch_paced(kernel, cfg, args);
        }
        if self.on_lent {
            // Work queued on the home stream since the last launch (core ops, copies, memsets)
            // must finish before this kernel runs on the lent groups' stream.
            let lane = self.lent.as_ref().expect("on lent");
            make_current(self.h().ctx)?;
            self.h().marker.record_on(self.h().raw)?;
            self.h().marker.wait_on(lane.raw)?;
        }
        let (raw, ctx) = match (&self.lent, self.on_lent) {
            (Some(l), true) => (l.raw, l.ctx),
            _ => (self.h().raw, self.h().ctx),
        };
        make_current(ctx)?;
        // SAFETY: `raw` is a live stream of context `ctx`, now current; gpukit-jit kernels
        // are context-independent (cuLibrary); argument pointers are the caller's device
        // memory, checked against the signature by launch_raw.
        unsafe { kernel.launch_raw(raw, cfg, args)? };
        if self.on_lent {
            // Keep the home stream (where core ops and the end-of-task event go) ordered
            // after work on lent groups.
            let l = self.lent.as_ref().expect("on lent");
            l.marker.record_on(l.raw)?;
            l.marker.wait_on(self.h().raw)?;
        }
        self.task.kernels.fetch_add(1, Ordering::Relaxed);
        self.inner.kernels_total.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn launch_paced(
        &mut self,
        kernel: &Kernel,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        let (raw, ctx) = (self.h().raw, self.h().ctx);
        let pacer = self.pacer.as_mut().expect("pacing");
        // Harvest finished kernels' GPU time.
        while let Some((a, b)) = pacer.inflight.front() {
            if !b.is_complete()? {
                if pacer.inflight.len() < 16 {
                    break;
                }
                b.synchronize()?;
            }
            pacer.busy_ms += a.elapsed_ms(b)? as f64;
            let pair = pacer.inflight.pop_front().expect("front");
            pacer.spare.push(pair);
        }
        let wall_ms = pacer.start.elapsed().as_secs_f64() * 1e3;
        let allowed = pacer.share * wall_ms + 2.0;
        if pacer.busy_ms > allowed {
            let wait =
                Duration::from_secs_f64((pacer.busy_ms / pacer.share - wall_ms).max(0.0) / 1e3);
            self.task.throttles.fetch_add(1, Ordering::Relaxed);
            self.task
                .throttled_ns
                .fetch_add(wait.as_nanos() as u64, Ordering::Relaxed);
            std::thread::sleep(wait);
        }
        let pair = match pacer.spare.pop() {
            Some(p) => p,
            None => (GreenEvent::in_context(ctx)?, GreenEvent::in_context(ctx)?),
        };
        make_current(ctx)?;
        pair.0.record_on(raw)?;
        // SAFETY: as in `launch`: live stream of the current context, context-independent
        // kernel, caller's device pointers.
        unsafe { kernel.launch_raw(raw, cfg, args)? };
        pair.1.record_on(raw)?;
        pacer.inflight.push_back(pair);
        self.task.kernels.fetch_add(1, Ordering::Relaxed);
        self.inner.kernels_total.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        self.blas = None;
        if self.on_lent {
            self.switch_to_home()?;
        }
        self.h().t1.record_on(self.h().raw)?;
        self.h().t1.synchronize()?;
        let ms = self.h().t0.elapsed_ms(&self.h().t1)? as f64;
        self.task.status.lock().gpu_ms = ms;
        Ok(())
    }
}

impl Drop for TaskContext {
    fn drop(&mut self) {
        if self.home.is_some() {
            let _ = self.synchronize();
        }
        if let Some(l) = self.lent.take() {
            self.inner.checkin(l);
        }
        if let Some(h) = self.home.take() {
            self.inner.checkin(h);
        }
    }
}

fn sync_raw(s: sys::CUstream) -> Result<()> {
    // SAFETY: `s` is a live stream held by the caller.
    let r = unsafe { sys::cuStreamSynchronize(s) };
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver {
            call: "cuStreamSynchronize",
            action: "synchronizing a task stream".into(),
            source: cudarc::driver::DriverError(r),
        })
    }
}

/// The handle of a submitted task: its admission result, its live stats, cancel and wait.
pub struct TaskHandle<T> {
    task: Arc<TaskShared>,
    slot: Arc<Mutex<Option<Result<T>>>>,
    admission: Admission,
    inner: Arc<Inner>,
}

impl<T> std::fmt::Debug for TaskHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("id", &self.task.id)
            .field("admission", &self.admission)
            .finish()
    }
}

impl<T> TaskHandle<T> {
    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task.id
    }
    /// The admission result, decided at submit.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }
    /// Live statistics.
    pub fn stats(&self) -> TaskStats {
        let st = self.inner.state.lock();
        self.inner.task_stats(&self.task, &st)
    }
    /// The state now.
    pub fn state(&self) -> TaskState {
        self.task.status.lock().state
    }
    /// Cancels the task: a queued task is removed at once; a running one ends with
    /// [`Error::Cancelled`] at its next safe point (allocation, launch or `check`). Returns
    /// false when it had already finished.
    pub fn cancel(&self) -> bool {
        let now = self.inner.now();
        let mut st = self.inner.state.lock();
        if !st.live.contains_key(&self.task.id) {
            return false;
        }
        let (removed, events) = st.planner.cancel(self.task.id, now);
        if removed {
            st.queued_jobs.remove(&self.task.id);
            st.live.remove(&self.task.id);
            st.failed += 1;
            finish_status(
                &self.task,
                TaskState::Cancelled,
                Some("cancelled while queued".into()),
            );
            push_finished(&mut st, self.task.clone());
            self.inner.apply_events(&mut st, events);
            let out = std::mem::take(&mut st.outbox);
            drop(st);
            self.inner.flush(out);
        } else {
            self.task.cancel.store(true, Ordering::Release);
        }
        true
    }
    /// Whether it has finished (any way).
    pub fn is_finished(&self) -> bool {
        self.task.status.lock().finished.is_some()
    }
    /// Blocks until the task ends and returns its result: the closure's value, its error, or
    /// why it did not run (rejected, cancelled, preempted, panicked).
    pub fn wait(self) -> Result<T> {
        {
            let mut s = self.task.status.lock();
            while s.finished.is_none() {
                self.task.done.wait(&mut s);
            }
        }
        self.take_result()
    }
    /// Like [`wait`](Self::wait) with a timeout; `Err(self)` when it has not ended.
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<Result<T>, Self> {
        let deadline = Instant::now() + timeout;
        {
            let mut s = self.task.status.lock();
            while s.finished.is_none() {
                if self.task.done.wait_until(&mut s, deadline).timed_out() && s.finished.is_none() {
                    drop(s);
                    return Err(self);
                }
            }
        }
        Ok(self.take_result())
    }

    fn take_result(&self) -> Result<T> {
        let (state, err) = {
            let s = self.task.status.lock();
            (s.state, s.final_error.clone())
        };
        let name = self.task.spec.name.clone();
        match state {
            TaskState::Preempted => {
                self.slot.lock().take();
                Err(Error::Preempted {
                    task: name,
                    qos: self.task.spec.qos.to_string(),
                    reason: err.unwrap_or_default(),
                })
            }
            TaskState::Cancelled => Err(Error::Cancelled { task: name }),
            TaskState::Rejected => match self.slot.lock().take() {
                Some(r) => r,
                None => Err(Error::Rejected {
                    task: name,
                    reason: err.unwrap_or_default(),
                }),
            },
            _ => match self.slot.lock().take() {
                Some(Err(e)) if self.task.cancel.load(Ordering::Acquire) => {
                    let _ = e;
                    Err(Error::Cancelled { task: name })
                }
                Some(r) => r,
                None => Err(Error::TaskFailed {
                    task: name,
                    message: err.unwrap_or_else(|| "no result".into()),
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_names() {
        for id in [0, 1, 9, 10, 123, u64::MAX] {
            assert_eq!(owner_of(id).as_str(), format!("sched-task-{id}"));
        }
    }
}
