//! The running scheduler: its shared state, submission, stop requests, statistics and
//! shutdown. Workers ([`crate::workers`]) run the tasks, the timer ([`crate::timer`]) ends
//! what expires, the ledger ([`crate::memory`]) charges memory.

use crate::bytes::ByteSize;
use crate::config::SchedulerConfig;
use crate::context::TaskContext;
use crate::entry::{EntryPoints, LoadedDriver, Timing, Without};
use crate::error::{CancelReason, Error, Result};
use crate::green::SmSplit;
use crate::handle::TaskHandle;
use crate::lanes::{Lane, LaneKey, Lanes};
use crate::ledger::EntrySpec;
use crate::memory::{Hook, Memory};
use crate::plan::{Admission, Event, Grant, Planner, PlannerConfig, Rejection, TaskId};
use crate::sm::{GroupSet, Mechanism, SmLayout};
use crate::spec::{QosClass, TaskSpec};
use crate::stats::{qos_index, Histogram, SchedulerStats, TaskStats};
use crate::task::{panic_message, Ended, Stop, Task, TaskState};
use crate::workers::{Handoff, Pending, Workers};
use gpukit_core::alloc::AllocLedger;
use gpukit_core::{Device, OwnerId};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Maps keyed by task ids (sequential numbers: a multiplicative hash suffices).
pub(crate) type IdMap<V> = HashMap<TaskId, V, std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
pub(crate) struct IdHasher(u64);

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
pub(crate) fn owner_of(id: TaskId) -> OwnerId {
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
    // Only ASCII digits and the ASCII prefix were written.
    let text = std::str::from_utf8(&buf[..PREFIX.len() + k]).unwrap_or("sched-task");
    OwnerId::new(text)
}

/// Finished tasks kept for stats.
const FINISHED_KEPT: usize = 256;
/// Evictions kept for stats.
const EVICTIONS_KEPT: usize = 256;
/// Final states, in the order of [`SchedulerStats::ended`].
pub(crate) const FINAL_STATES: [TaskState; 7] = [
    TaskState::Succeeded,
    TaskState::Failed,
    TaskState::Cancelled,
    TaskState::TimedOut,
    TaskState::Rejected,
    TaskState::Expired,
    TaskState::Preempted,
];

/// Timers of one running task.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timers {
    pub timeout_at: Option<Instant>,
    pub grace_at: Option<Instant>,
}

pub(crate) struct State {
    pub planner: Planner,
    pub live: IdMap<Arc<Task>>,
    pub queued_jobs: IdMap<Pending>,
    pub finished: VecDeque<Arc<Task>>,
    pub started_seq: u64,
    pub start_order: IdMap<u64>,
    pub evictions: VecDeque<(TaskId, String, QosClass)>,
    pub evictions_total: u64,
    pub pool_evictions: BTreeMap<Option<String>, u64>,
    pub outbox: Vec<Pending>,
    /// Jobs of tasks that ended before they ran: dropped once the lock is released (a
    /// closure's captures are user code; a dropped [`TaskHandle`] among them cancels its
    /// task, which takes this lock).
    pub dropped: Vec<Pending>,
    pub submitted: u64,
    pub ended: [u64; 7],
    pub shutting_down: bool,
    pub timers: IdMap<Timers>,
    /// When the timer thread wakes next (None: no timer pending).
    pub timer_next: Option<Instant>,
    pub timer_exit: bool,
    /// Tasks that got their outcome under the lock: their waiters are woken once it is
    /// released ([`Inner::release`]).
    pub notify: Vec<Arc<Task>>,
    /// Queue wait, run time and GPU seconds by QoS class (see [`crate::stats::QOS_ORDER`]).
    pub queue_wait: [Histogram; 3],
    pub run_time: [Histogram; 3],
    pub gpu_seconds: [f64; 3],
}

/// The device side of a scheduler.
pub(crate) struct Gpu {
    pub dev: Device,
    pub split: Option<SmSplit>,
    pub entry: EntryPoints,
    pub hook: Arc<dyn AllocLedger>,
}

pub(crate) struct Inner {
    pub gpu: Option<Gpu>,
    /// The device's ordinal (a CPU-only scheduler's simulated one).
    pub ordinal: usize,
    /// This scheduler among the process's (tells its own hung work from other schedulers').
    pub id: u64,
    pub cfg: SchedulerConfig,
    epoch: Instant,
    pub state: Mutex<State>,
    /// Wakes the timer thread when it must wake earlier than planned (or exit).
    pub timer_wake: Condvar,
    /// Signalled when a task's resources are released during shutdown (which waits on it).
    pub idle: Condvar,
    pub memory: Arc<Memory>,
    pub lanes: Lanes,
    /// Serializes paced kernels in the fallback (see [`crate::pacer`]).
    pub token: crate::pacer::Token,
    pub layout: SmLayout,
    pub mechanism: String,
    pub kernels_total: AtomicU64,
    /// Completion callbacks (and wakers) that panicked; each was contained.
    pub callback_panics: AtomicU64,
    /// Timer passes that panicked (contained; the timer thread lives on).
    pub timer_panics: AtomicU64,
    /// Tasks whose GPU work did not end (see [`crate::quarantine`]).
    pub quarantine: Mutex<IdMap<crate::quarantine::Quarantined>>,
    /// A watcher thread polls the quarantine (see [`crate::quarantine`]).
    pub watching: std::sync::atomic::AtomicBool,
    /// Why the context is unusable, once a sticky error was seen (see [`crate::health`]).
    pub health: Mutex<Option<String>>,
    /// False once `health` is set (read on every submit).
    pub healthy: std::sync::atomic::AtomicBool,
    next_id: AtomicU64,
    pub handoff: Handoff,
}

/// What [`Scheduler::shutdown`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Queued tasks cancelled at once.
    pub cancelled_queued: usize,
    /// Running tasks that ended by themselves before the deadline.
    pub finished: usize,
    /// Running tasks stopped at the deadline that reached a safe point within the grace period.
    pub stopped: usize,
    /// Running tasks that reached no safe point: their handles completed (Cancelled), their
    /// threads still run and their resources stay taken (the GPU streams are then kept).
    pub detached: usize,
    /// Tasks whose GPU work had not ended (quarantined: see the crate docs); their streams
    /// are left to the driver.
    pub quarantined: usize,
    /// Those tasks with what their work keeps out of service (leaked on purpose: their lanes,
    /// streams and memory are never destroyed or freed while the work may run).
    pub quarantine: Vec<crate::QuarantinedTask>,
    /// Time the shutdown took.
    pub elapsed: Duration,
}

/// The QoS scheduler of one device. See the crate docs.
pub struct Scheduler {
    pub(crate) inner: Arc<Inner>,
    workers: Option<Workers>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("layout", &self.inner.layout)
            .field("mechanism", &self.inner.mechanism)
            .finish()
    }
}

fn fallback_text(layout: &SmLayout, why: &str, timing: Option<Timing>) -> String {
    let mut m = format!(
        "pacing by measured GPU time: {} virtual groups of {} SMs + a floor of {} ({why})",
        layout.groups, layout.group_size, layout.remainder_sms
    );
    if timing == Some(Timing::Missing) {
        m.push_str(
            "; the driver cannot time events, so compute shares are admitted but not enforced",
        );
    }
    m
}

impl Scheduler {
    /// Starts a scheduler on `dev`: finds which driver entry points exist, splits the SMs once
    /// into groups (green contexts; else the pacing fallback, with the reason in
    /// [`mechanism`](Self::mechanism)), sizes memory capacity (free memory now minus headroom,
    /// or the configured cap), installs its memory ledger in the device's allocator
    /// ([`Error::DeviceInUse`] if another scheduler has one) and starts the workers and the
    /// timer.
    pub fn new(dev: Device, cfg: SchedulerConfig) -> Result<Scheduler> {
        cfg.validate()?;
        let table = Without {
            inner: LoadedDriver,
            missing: cfg.hide_entry_points.clone(),
        };
        let entry = EntryPoints::probe(&table)?;
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
        let sms = dev.multiprocessor_count();
        let fallback = |why: String| -> Result<(Option<SmSplit>, SmLayout, String)> {
            let l = SmLayout::pacing(sms)?;
            Ok((None, l, fallback_text(&l, &why, Some(entry.timing))))
        };
        let (split, layout, mechanism) = if !cfg.green_contexts {
            fallback("green contexts disabled by configuration".into())?
        } else {
            match &entry.green {
                Err(why) if cfg.require_green_contexts => {
                    return Err(Error::Unsupported {
                        what: "green contexts".into(),
                        reason: why.clone(),
                    })
                }
                Err(why) => fallback(why.clone())?,
                Ok(()) => {
                    match SmSplit::new(&dev, cfg.group_size, &entry, cfg.ignore_split_remainder) {
                        Ok(s) => {
                            let l = s.layout();
                            let m = format!(
                            "green contexts: {} SMs split once into {} groups of {} + {} floor SMs (driver {}.{})",
                            l.total_sms, l.groups, l.group_size, l.remainder_sms,
                            entry.driver_version / 1000, entry.driver_version % 1000 / 10
                        );
                            (Some(s), l, m)
                        }
                        Err(e @ Error::InvalidSpec { .. }) => return Err(e),
                        Err(e) if cfg.require_green_contexts => return Err(e),
                        Err(e) => fallback(format!("the green-context split failed: {e}"))?,
                    }
                }
            }
        };
        let ordinal = dev.ordinal();
        Scheduler::start(
            Some((dev, split, entry)),
            ordinal,
            cfg,
            memory_capacity,
            layout,
            mechanism,
        )
    }

    /// A scheduler with no device, for benches and tests of its CPU side: the same planner,
    /// ledger, state machine, timer and workers as [`Scheduler::new`], with `layout` and
    /// `memory_capacity` given instead of probed. Tasks get a context without streams:
    /// [`TaskContext::device`] and [`TaskContext::alloc`] return [`Error::NoDevice`], while
    /// [`TaskContext::reserve_memory`] charges the ledger as on a GPU.
    pub fn cpu_only(
        layout: SmLayout,
        memory_capacity: u64,
        cfg: SchedulerConfig,
    ) -> Result<Scheduler> {
        Scheduler::simulated(0, layout, memory_capacity, cfg)
    }

    /// [`cpu_only`](Self::cpu_only) standing for device `ordinal` (simulated devices of a
    /// [`MultiScheduler`](crate::MultiScheduler)).
    pub(crate) fn simulated(
        ordinal: usize,
        layout: SmLayout,
        memory_capacity: u64,
        cfg: SchedulerConfig,
    ) -> Result<Scheduler> {
        cfg.validate()?;
        let mechanism = "none: CPU-only scheduler (no device; benches and tests)".to_string();
        Scheduler::start(None, ordinal, cfg, memory_capacity, layout, mechanism)
    }

    fn start(
        gpu: Option<(Device, Option<SmSplit>, EntryPoints)>,
        ordinal: usize,
        cfg: SchedulerConfig,
        memory_capacity: u64,
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
        let memory = Arc::new(Memory::new(memory_capacity));
        let gpu = match gpu {
            Some((dev, split, entry)) => {
                let hook: Arc<dyn AllocLedger> = Arc::new(Hook(memory.clone()));
                dev.allocator()
                    .install_ledger(hook.clone())
                    .map_err(|e| Error::DeviceInUse {
                        device: dev.ordinal(),
                        reason: e.to_string(),
                    })?;
                Some(Gpu {
                    dev,
                    split,
                    entry,
                    hook,
                })
            }
            None => None,
        };
        let lane_alloc = gpu.as_ref().map(|g| g.dev.allocator().clone());
        static NEXT_SCHEDULER: AtomicU64 = AtomicU64::new(1);
        let inner = Arc::new(Inner {
            gpu,
            ordinal,
            id: NEXT_SCHEDULER.fetch_add(1, Ordering::Relaxed),
            cfg: cfg.clone(),
            epoch: Instant::now(),
            state: Mutex::new(State {
                planner,
                live: IdMap::default(),
                queued_jobs: IdMap::default(),
                finished: VecDeque::new(),
                started_seq: 0,
                start_order: IdMap::default(),
                evictions: VecDeque::new(),
                evictions_total: 0,
                pool_evictions: BTreeMap::new(),
                outbox: Vec::new(),
                dropped: Vec::new(),
                submitted: 0,
                ended: [0; 7],
                shutting_down: false,
                timers: IdMap::default(),
                timer_next: None,
                timer_exit: false,
                notify: Vec::new(),
                queue_wait: Default::default(),
                run_time: Default::default(),
                gpu_seconds: [0.0; 3],
            }),
            timer_wake: Condvar::new(),
            idle: Condvar::new(),
            memory,
            lanes: Lanes::new(cfg.max_cached_lanes, lane_alloc, ordinal, layout),
            token: crate::pacer::Token::default(),
            layout,
            mechanism,
            kernels_total: AtomicU64::new(0),
            callback_panics: AtomicU64::new(0),
            timer_panics: AtomicU64::new(0),
            quarantine: Mutex::new(IdMap::default()),
            watching: std::sync::atomic::AtomicBool::new(false),
            health: Mutex::new(None),
            healthy: std::sync::atomic::AtomicBool::new(true),
            next_id: AtomicU64::new(1),
            handoff: Handoff::new(),
        });
        let workers = match Workers::spawn(&inner, cfg.workers) {
            Ok(w) => w,
            Err(e) => {
                inner.uninstall();
                return Err(e);
            }
        };
        // SM groups that an earlier scheduler's hung work still occupies stay out of service.
        inner.inherit_hung_work();
        Ok(Scheduler {
            inner,
            workers: Some(workers),
        })
    }

    /// The device; [`Error::NoDevice`] for a CPU-only scheduler ([`Scheduler::cpu_only`]).
    pub fn device(&self) -> Result<&Device> {
        self.inner.dev()
    }

    /// The device's ordinal (for a CPU-only scheduler: 0, or the simulated device's number).
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// What placement over several devices needs to know about this one, for `partition`.
    pub(crate) fn load(&self, partition: &Option<String>) -> crate::placement::DeviceLoad {
        let st = self.inner.state.lock();
        let pool = st
            .planner
            .pools()
            .into_iter()
            .find(|p| &p.name == partition)
            .map(|p| crate::placement::PoolLoad {
                memory_quota: p.memory_quota,
                memory_committed: p.memory_committed,
                groups: p.groups.len(),
                groups_free: p
                    .groups
                    .minus(p.groups_assigned)
                    .minus(p.groups_quarantined)
                    .len(),
                queued: p.queued,
            });
        crate::placement::DeviceLoad {
            ordinal: self.inner.ordinal,
            healthy: self.inner.healthy.load(Ordering::Acquire),
            pool,
            running: st.planner.running_count(),
            max_running: st.planner.config().max_running,
            layout: self.inner.layout,
        }
    }

    /// The SM layout in force.
    pub fn layout(&self) -> SmLayout {
        self.inner.layout
    }

    /// Which compute mechanism is in force, and why, in words.
    pub fn mechanism(&self) -> &str {
        &self.inner.mechanism
    }

    /// The driver entry points found at start (`None` for a CPU-only scheduler).
    pub fn entry_points(&self) -> Option<&EntryPoints> {
        self.inner.entry()
    }

    /// Memory that requests may sum to.
    pub fn memory_capacity(&self) -> u64 {
        self.inner.state.lock().planner.config().memory_capacity
    }

    /// Submits `task` with `spec`. Returns at once; the handle says whether it was admitted,
    /// queued (with its position) or rejected (resource, requested, available). A malformed
    /// or contradictory spec is an `Err` and leaves no state behind.
    ///
    /// The closure's error type is its own: any error that converts into
    /// `Box<dyn std::error::Error + Send + Sync>` (a gpukit-sched [`Error`] comes back as
    /// itself, any other as [`Error::TaskFailed`] with it as the source).
    pub fn submit<T, E, F>(&self, task: F, spec: TaskSpec) -> Result<TaskHandle<T>>
    where
        T: Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
        F: FnOnce(&mut TaskContext) -> std::result::Result<T, E> + Send + 'static,
    {
        if let Some(cause) = self.inner.unhealthy() {
            return Err(Error::Unhealthy { cause });
        }
        let spec = spec.resolve()?;
        if let Some(d) = spec.device.filter(|d| *d != self.inner.ordinal) {
            return Err(Error::invalid(
                "device",
                d,
                format!(
                    "this scheduler runs device {} (a MultiScheduler places tasks on several)",
                    self.inner.ordinal
                ),
            ));
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Task::new(id, spec.clone(), owner_of(id)));
        let value: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let slot = value.clone();
        let dropped = value.clone();
        let discard: crate::workers::Discard = Box::new(move || drop(dropped.lock().take()));
        let job: crate::workers::Job = Box::new(move |ctx: &mut TaskContext| {
            match catch_unwind(AssertUnwindSafe(|| task(ctx))) {
                Ok(Ok(v)) => {
                    *slot.lock() = Some(v);
                    Ended::Ok
                }
                Ok(Err(e)) => Ended::Err(Error::from_task(&ctx.task.spec.name, e.into())),
                Err(payload) => Ended::Panicked(panic_message(&*payload)),
            }
        });
        let now = self.inner.now();
        let mut st = self.inner.state.lock();
        if st.shutting_down {
            return Err(Error::ShutDown);
        }
        let (admission, events) = st.planner.submit(id, spec, now)?;
        st.submitted += 1;
        let pending = Pending {
            task: shared.clone(),
            job,
            discard,
        };
        match &admission {
            Admission::Admitted(g) => {
                st.live.insert(id, shared.clone());
                self.inner.dispatch(&mut st, pending, *g);
            }
            Admission::Queued { .. } => {
                st.live.insert(id, shared.clone());
                st.queued_jobs.insert(id, pending);
            }
            Admission::Rejected {
                resource,
                requested,
                available,
            } => {
                let e = Error::Rejected {
                    task: shared.spec.name.clone(),
                    resource: *resource,
                    requested: *requested,
                    available: *available,
                };
                self.inner
                    .conclude(&mut st, &shared, TaskState::Rejected, Some(e), false);
                push_finished(&mut st, shared.clone());
            }
        }
        self.inner.apply_events(&mut st, events);
        self.inner.arm_timer(&mut st);
        self.inner.release(st);
        Ok(TaskHandle {
            task: shared,
            value,
            admission,
            inner: self.inner.clone(),
            detached: false,
        })
    }

    /// Live statistics: every live task and the last finished ones, pools and totals.
    pub fn stats(&self) -> SchedulerStats {
        self.inner.stats()
    }

    /// Statistics of one task (live, or among the last 256 finished).
    pub fn task_stats(&self, id: TaskId) -> Option<TaskStats> {
        let task = {
            let st = self.inner.state.lock();
            st.live
                .get(&id)
                .cloned()
                .or_else(|| st.finished.iter().find(|t| t.id == id).cloned())
        }?;
        Some(self.inner.task_stats(&task))
    }

    /// The metrics snapshot in the Prometheus text format (see
    /// [`SchedulerStats::to_prometheus`]).
    pub fn metrics(&self) -> String {
        self.stats().to_prometheus()
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

    /// Shuts down within about `timeout` + the stop grace period: stops accepting work,
    /// cancels queued tasks at once ([`CancelReason::Shutdown`]), lets running tasks finish
    /// until `timeout`, then asks the rest to stop; those that reach no safe point within the
    /// grace period are detached (their handles complete as cancelled). Then the workers are
    /// joined (unless a detached task still holds one), the timer stops, the ledger leaves the
    /// allocator and idle GPU streams are destroyed (streams that still order live buffers are
    /// kept). Quarantined work (a kernel that did not end) is not waited for: its lanes are
    /// leaked on purpose, and while it runs no lane of the device is destroyed (that waits for
    /// the device), so the shutdown ends within its bound; the report names it.
    pub fn shutdown(mut self, timeout: Duration) -> ShutdownReport {
        self.stop(timeout)
    }

    fn stop(&mut self, timeout: Duration) -> ShutdownReport {
        let t0 = Instant::now();
        let mut report = ShutdownReport::default();
        let Some(workers) = self.workers.take() else {
            return report;
        };
        let inner = &self.inner;
        let grace = inner.cfg.stop_grace;
        let running_at_start;
        {
            let mut st = inner.state.lock();
            st.shutting_down = true;
            // All queued tasks leave the queue at once, so that none starts behind another's
            // cancellation (a starving task's cancellation would start the tasks it blocked).
            for id in st.planner.drain_queue() {
                if let Some(p) = st.queued_jobs.remove(&id) {
                    st.live.remove(&id);
                    let e = Error::Cancelled {
                        task: p.task.spec.name.clone(),
                        reason: CancelReason::Shutdown,
                    };
                    inner.conclude(&mut st, &p.task, TaskState::Cancelled, Some(e), false);
                    push_finished(&mut st, p.task.clone());
                    st.dropped.push(p);
                    report.cancelled_queued += 1;
                }
            }
            debug_assert!(st.outbox.is_empty() && st.queued_jobs.is_empty());
            running_at_start = st
                .live
                .values()
                .filter(|t| !t.status.lock().quarantined)
                .count();
            inner.release(st);
        }
        inner.handoff.close();
        inner.wait_until_idle(t0.checked_add(timeout));
        let stop_at = Instant::now();
        let stopping: Vec<Arc<Task>> = inner
            .state
            .lock()
            .live
            .values()
            .filter(|t| !t.status.lock().quarantined)
            .cloned()
            .collect();
        report.finished = running_at_start.saturating_sub(stopping.len());
        for t in &stopping {
            inner.cancel(t, Stop::Cancel(CancelReason::Shutdown));
        }
        inner.wait_until_idle(stop_at.checked_add(grace));
        {
            // Whatever reached no safe point is detached now (the timer may have done so).
            let mut st = inner.state.lock();
            let (quarantined, left): (Vec<Arc<Task>>, Vec<Arc<Task>>) = st
                .live
                .values()
                .cloned()
                .partition(|t| t.status.lock().quarantined);
            report.quarantined = quarantined.len();
            report.quarantine = inner.quarantine_report();
            for t in &left {
                if let Some((stop, _)) = t.stop.get() {
                    let (state, e) = t.stop_outcome(&stop);
                    inner.conclude(&mut st, t, state, Some(e), true);
                }
            }
            report.detached = left.len();
            report.stopped = stopping.len().saturating_sub(left.len());
            st.timer_exit = true;
            inner.release(st);
        }
        inner.timer_wake.notify_all();
        if report.detached == 0 {
            // Every task has returned: the threads end at once (a bounded wait all the same).
            workers.join(Instant::now() + Duration::from_millis(500));
        }
        // Another scheduler may start on the device now, even beside a detached task (its
        // memory is outside the new one's capacity, read from the free memory then).
        inner.uninstall();
        report.elapsed = t0.elapsed();
        report
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let t = self.inner.cfg.shutdown_timeout;
        self.stop(t);
    }
}

pub(crate) fn push_finished(st: &mut State, t: Arc<Task>) {
    st.finished.push_back(t);
    while st.finished.len() > FINISHED_KEPT {
        st.finished.pop_front();
    }
}

impl Inner {
    pub(crate) fn dev(&self) -> Result<&Device> {
        self.gpu.as_ref().map(|g| &g.dev).ok_or(Error::NoDevice)
    }

    pub(crate) fn split(&self) -> Option<&SmSplit> {
        self.gpu.as_ref()?.split.as_ref()
    }

    pub(crate) fn entry(&self) -> Option<&EntryPoints> {
        self.gpu.as_ref().map(|g| &g.entry)
    }

    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn at(&self, ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(ns)
    }

    pub(crate) fn kernel_launched(&self) {
        self.kernels_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Unlocks the state, then hands started tasks to the workers and wakes the waiters of
    /// tasks that ended (neither under the lock: a woken waiter often submits at once).
    pub(crate) fn release(&self, mut st: parking_lot::MutexGuard<'_, State>) {
        let out = std::mem::take(&mut st.outbox);
        let notify = std::mem::take(&mut st.notify);
        let dropped = std::mem::take(&mut st.dropped);
        drop(st);
        self.handoff.send(out);
        drop(dropped);
        for t in notify {
            self.notify(&t);
        }
    }

    /// Wakes a task's waiters and runs its completion callbacks (no lock held), counting the
    /// callbacks that panicked.
    pub(crate) fn notify(&self, task: &Task) {
        let panics = task.notify();
        if panics > 0 {
            self.callback_panics.fetch_add(panics, Ordering::Relaxed);
        }
    }

    /// Removes the ledger from the allocator (buffers charged to it still return their
    /// charges to it) and releases the idle lanes. Waits for no device work: a detached task's
    /// kernels may never end; beside quarantined work or a detached task whose closure still
    /// runs it makes no driver call at all (the lanes are left as orphans).
    fn uninstall(&self) {
        if let Some(g) = &self.gpu {
            g.dev.allocator().remove_ledger(&g.hook);
            let hung = !self.quarantine.lock().is_empty()
                || self.state.lock().live.values().any(|t| {
                    let s = t.status.lock();
                    s.detached && s.released_at.is_none()
                });
            self.lanes.drain(hung);
        }
    }

    /// Waits until no task holds resources but quarantined ones (whose work may never end),
    /// or `deadline` (`None`: no bound).
    fn wait_until_idle(&self, deadline: Option<Instant>) {
        let mut st = self.state.lock();
        while st.live.values().any(|t| !t.status.lock().quarantined) {
            match deadline {
                Some(d) => {
                    if self.idle.wait_until(&mut st, d).timed_out() {
                        break;
                    }
                }
                None => self.idle.wait(&mut st),
            }
        }
    }

    /// Decides a task's outcome and counts it (state lock held). False when it already had one.
    pub(crate) fn conclude(
        &self,
        st: &mut State,
        task: &Arc<Task>,
        state: TaskState,
        err: Option<Error>,
        detached: bool,
    ) -> bool {
        if !task.resolve(state, err, detached) {
            return false;
        }
        if detached && self.gpu.is_some() {
            crate::quarantine::note_detached(self.ordinal, task);
        }
        st.notify.push(task.clone());
        if let Some(i) = FINAL_STATES.iter().position(|s| *s == state) {
            st.ended[i] += 1;
        }
        true
    }

    /// Marks a task started: its grant, its ledger entry, and on its way to a worker.
    fn dispatch(&self, st: &mut State, p: Pending, g: Grant) {
        st.queue_wait[qos_index(p.task.spec.qos)].observe(p.task.submitted.elapsed().as_secs_f64());
        st.started_seq += 1;
        st.start_order.insert(p.task.id, st.started_seq);
        {
            let mut s = p.task.status.lock();
            if !s.resolved {
                s.state = TaskState::Starting;
            }
            s.grant = Some(g);
        }
        let spec = &p.task.spec;
        let opened = self.memory.open(
            &p.task.owner,
            EntrySpec {
                id: p.task.id,
                name: spec.name.clone(),
                pool: spec.partition.clone(),
                qos: spec.qos,
                priority: spec.priority,
                started: st.started_seq,
                request: spec.memory_request,
                limit: g.memory_limit,
            },
        );
        if let Err(e) = opened {
            // Cannot happen for fresh owners; end the task instead of running it uncharged.
            p.task.stop.request(Stop::Cancel(CancelReason::Requested));
            self.conclude(st, &p.task, TaskState::Failed, Some(e), false);
        }
        self.sync_groups(st);
        st.outbox.push(p);
    }

    /// Applies planner events: starts queued tasks, ends rejected and expired ones, and
    /// publishes the new own/lent groups of every running task.
    pub(crate) fn apply_events(&self, st: &mut State, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Started(id, g) => {
                    if let Some(p) = st.queued_jobs.remove(&id) {
                        self.dispatch(st, p, g);
                    }
                }
                Event::Rejected(id, why) => {
                    if let Some(p) = st.queued_jobs.remove(&id) {
                        st.live.remove(&id);
                        let name = p.task.spec.name.clone();
                        let (state, e) = match why {
                            Rejection::DeadlinePassed { deadline } => (
                                TaskState::Expired,
                                Error::DeadlineExpired {
                                    task: name,
                                    deadline,
                                },
                            ),
                            Rejection::PoolTooSmall {
                                resource,
                                requested,
                                available,
                            } => (
                                TaskState::Rejected,
                                Error::Rejected {
                                    task: name,
                                    resource,
                                    requested,
                                    available,
                                },
                            ),
                        };
                        self.conclude(st, &p.task, state, Some(e), false);
                        push_finished(st, p.task.clone());
                        st.dropped.push(p);
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

    /// Changes the pools (partitions) and mirrors them in the ledger.
    pub(crate) fn change_pools<R>(
        &self,
        f: impl FnOnce(&mut Planner, u64) -> Result<(R, Vec<Event>)>,
    ) -> Result<R> {
        let now = self.now();
        let mut st = self.state.lock();
        if st.shutting_down {
            return Err(Error::ShutDown);
        }
        let (r, events) = f(&mut st.planner, now)?;
        let pools: Vec<(Option<String>, u64)> = st
            .planner
            .pools()
            .into_iter()
            .map(|p| (p.name, p.memory_quota))
            .collect();
        self.memory.with(|l| l.set_pools(pools));
        self.apply_events(&mut st, events);
        self.release(st);
        Ok(r)
    }

    /// Asks a live task to stop. A queued task ends at once (cancellation only); a running one
    /// is flagged, its allocations are refused from now on, and its grace timer starts.
    pub(crate) fn cancel(&self, task: &Arc<Task>, stop: Stop) -> bool {
        let now = self.now();
        let mut st = self.state.lock();
        if !st.live.contains_key(&task.id) || task.status.lock().resolved {
            return false;
        }
        let (removed, events) = st.planner.cancel(task.id, now);
        if removed {
            if let Some(p) = st.queued_jobs.remove(&task.id) {
                st.dropped.push(p);
            }
            st.live.remove(&task.id);
            let (state, e) = task.stop_outcome(&stop);
            self.conclude(&mut st, task, state, Some(e), false);
            push_finished(&mut st, task.clone());
            self.apply_events(&mut st, events);
            self.release(st);
            return true;
        }
        let asked = self.request_stop(&mut st, task, stop);
        self.release(st);
        asked
    }

    /// Flags a running task to stop and arms its grace timer (state lock held).
    pub(crate) fn request_stop(&self, st: &mut State, task: &Arc<Task>, stop: Stop) -> bool {
        if !task.stop.request(stop) {
            return false;
        }
        self.memory.with(|l| l.stop(&task.owner));
        st.timers.entry(task.id).or_default().grace_at = crate::timer::after(self.cfg.stop_grace);
        self.arm_timer(st);
        true
    }

    /// Stops `victims` to make room for `starter` (called by a starting task's worker).
    pub(crate) fn evict(&self, starter: &Task, victims: &[TaskId]) {
        let mut st = self.state.lock();
        for v in victims {
            let Some(victim) = st.live.get(v).cloned() else {
                continue;
            };
            let reason = format!(
                "{} task `{}` evicted to make room for {} task `{}`",
                victim.spec.qos, victim.spec.name, starter.spec.qos, starter.spec.name
            );
            if self.request_stop(&mut st, &victim, Stop::Preempt(reason)) {
                st.evictions
                    .push_back((victim.id, victim.spec.name.clone(), victim.spec.qos));
                while st.evictions.len() > EVICTIONS_KEPT {
                    st.evictions.pop_front();
                }
                st.evictions_total += 1;
                *st.pool_evictions
                    .entry(victim.spec.partition.clone())
                    .or_default() += 1;
            }
        }
    }

    /// Recomputes when the timer must wake and wakes it if that is earlier than planned.
    pub(crate) fn arm_timer(&self, st: &mut State) {
        let mut next = st.planner.next_deadline().map(|ns| self.at(ns));
        for t in st.timers.values() {
            for at in [t.timeout_at, t.grace_at].into_iter().flatten() {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        if let Some(n) = next {
            if st.timer_next.is_none_or(|planned| n < planned) {
                st.timer_next = Some(n);
                self.timer_wake.notify_one();
            }
        }
    }

    /// The pace of a task with these own and lent groups (`None`: not paced).
    pub(crate) fn duty(&self, grant: &Grant, own: GroupSet, lent: GroupSet) -> Option<f64> {
        let gpu = self.gpu.as_ref()?;
        if gpu.entry.timing == Timing::Missing {
            return None;
        }
        if gpu.split.is_some() {
            return grant.compute.pace;
        }
        let l = self.layout;
        let floor = if own.is_empty() { l.remainder_sms } else { 0 };
        Some((l.sms(own.union(lent).len()) + floor) as f64 / l.total_sms.max(1) as f64)
    }

    /// The lane of a task's kernels on its own and lent groups.
    pub(crate) fn lent_key(&self, own: GroupSet, lent: GroupSet, mechanism: Mechanism) -> LaneKey {
        match (self.split(), mechanism) {
            (None, _) => LaneKey::Primary,
            (Some(_), Mechanism::GreenContext) => LaneKey::Green(own.union(lent), false),
            (Some(s), _) => LaneKey::Green(lent, s.has_remainder()),
        }
    }

    pub(crate) fn checkout(&self, key: LaneKey) -> Result<Lane> {
        self.lanes.checkout(key, || match key {
            LaneKey::Green(groups, floor) => {
                let split = self.split().ok_or_else(|| Error::Unsupported {
                    what: "green-context lanes".into(),
                    reason: self.mechanism.clone(),
                })?;
                Lane::green(split, groups, floor)
            }
            LaneKey::Primary => Lane::primary(self.dev()?),
        })
    }

    pub(crate) fn checkin(&self, lane: Lane) {
        self.lanes.checkin(lane);
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
