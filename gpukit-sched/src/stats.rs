//! Live statistics of tasks, partitions and the scheduler, and the same figures as a metrics
//! snapshot in the Prometheus text exposition format (what services scrape).

use crate::ledger::PoolMemory;
use crate::plan::{PoolInfo, TaskId};
use crate::scheduler::{Inner, State, FINAL_STATES};
use crate::sm::{ComputeGrant, Mechanism, SmLayout};
use crate::spec::QosClass;
use crate::task::{Stop, Task, TaskState};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Live statistics of one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStats {
    /// Id.
    pub id: TaskId,
    /// Name.
    pub name: String,
    /// Class.
    pub qos: QosClass,
    /// Its partition (`None`: the default pool).
    pub partition: Option<String>,
    /// State.
    pub state: TaskState,
    /// The outcome was decided while its closure still runs (a stop past its grace period):
    /// its thread, memory and SM groups stay taken until the closure returns.
    pub detached: bool,
    /// Place in its queue while queued.
    pub queue_position: Option<usize>,
    /// Bytes charged to it now (also after it ended, for buffers it returned).
    pub memory_in_use: u64,
    /// Highest bytes charged.
    pub memory_peak: u64,
    /// Bytes committed (its request).
    pub memory_committed: u64,
    /// Its memory limit (u64::MAX: none).
    pub memory_limit: u64,
    /// GPU time: span between events recorded on its home stream at start and end (ms);
    /// `None` while it runs, without a device, or when the driver cannot time events.
    pub gpu_time_ms: Option<f64>,
    /// Its compute grant.
    pub compute: Option<ComputeGrant>,
    /// SMs of its own groups.
    pub granted_sms: u32,
    /// SMs it may use now (own + lent + floor), while it runs.
    pub usable_sms: u32,
    /// SMs of the stream its last kernel launch went to.
    pub sms_in_use: u32,
    /// Kernels launched through its context.
    pub kernels_launched: u64,
    /// Times a launch or safe point was delayed by pacing.
    pub throttles: u64,
    /// Milliseconds spent throttled.
    pub throttled_ms: f64,
    /// Whether it was asked to stop for memory (evicted).
    pub preempted: bool,
    /// Bytes it reported moving.
    pub reported_bytes: u64,
    /// `reported_bytes / gpu_time` in GB/s, when both are known.
    pub achieved_gbps: Option<f64>,
    /// Milliseconds from submission to start.
    pub wait_ms: f64,
    /// Milliseconds from start to end (or now).
    pub run_ms: f64,
    /// Its error, when it ended with one.
    pub error: Option<String>,
    /// Its closure returned but its GPU work did not end within the stop's grace period: its
    /// lanes, SM groups and memory commitment stay taken until the work ends (see the crate
    /// docs, "quarantine").
    pub quarantined: bool,
}

/// Partition (or default pool) statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionStats {
    /// The pool's groups, commitments and queue.
    pub pool: PoolInfo,
    /// Its memory as the ledger charges it.
    pub memory: PoolMemory,
    /// Tasks of this pool evicted so far.
    pub evictions: u64,
}

/// Scheduler-wide statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerStats {
    /// The enforcement mechanism in force for compute and why.
    pub mechanism: String,
    /// The device's ordinal.
    pub device: usize,
    /// The SM layout.
    pub layout: SmLayout,
    /// Admission memory capacity.
    pub memory_capacity: u64,
    /// Bytes allocated outside tasks while the scheduler runs (charged to the default pool).
    pub memory_outside_tasks: u64,
    /// Live and recently finished tasks (the last 256), by id.
    pub tasks: Vec<TaskStats>,
    /// Pools, the default one first.
    pub partitions: Vec<PartitionStats>,
    /// Submissions.
    pub submitted: u64,
    /// Tasks that ended, by final state (in [`TaskState`] order: succeeded, failed, cancelled,
    /// timed out, rejected, expired, preempted).
    pub ended: [(TaskState, u64); 7],
    /// Tasks whose outcome was decided while their closure still runs.
    pub detached_running: u64,
    /// Tasks whose closure returned while their GPU work did not end (quarantined).
    pub quarantined: u64,
    /// Each quarantined task with the resources out of service while its work runs (SM
    /// groups and SMs, memory, streams), by id.
    pub quarantine: Vec<crate::QuarantinedTask>,
    /// Why the device context is unusable (a sticky error: the task and the error), or
    /// `None` while it is healthy. Submissions are refused once it is set.
    pub unhealthy: Option<String>,
    /// The last evictions (at most 256), oldest first: (id, name, class).
    pub evictions: Vec<(TaskId, String, QosClass)>,
    /// Evictions since the start.
    pub evictions_total: u64,
    /// Kernels launched by all tasks.
    pub kernels_launched: u64,
    /// Green contexts created (pooled and reused).
    pub green_contexts_created: u64,
    /// Idle lanes cached now.
    pub lanes_cached: usize,
    /// Lanes destroyed (past
    /// [`SchedulerConfig::max_cached_lanes`](crate::SchedulerConfig::max_cached_lanes)).
    pub lanes_destroyed: u64,
    /// Lanes past the bound kept because something still references their stream (a clone of
    /// a task's stream, a buffer ordered on it, a cached library handle).
    pub lanes_held: usize,
    /// Completion callbacks ([`TaskHandle::on_complete`](crate::TaskHandle::on_complete)) and
    /// future wakers that panicked (each panic was contained).
    pub callback_panics: u64,
    /// Timer passes that panicked (a bug, contained: the timer thread lives on).
    pub timer_panics: u64,
    /// Queue wait (submission to start) of the tasks that started, by QoS class.
    pub queue_wait: Vec<(QosClass, Histogram)>,
    /// Run time (start of the closure to the release of its resources) of the tasks that ran,
    /// by QoS class.
    pub run_time: Vec<(QosClass, Histogram)>,
    /// GPU seconds of the tasks that ended, by QoS class.
    pub gpu_seconds: Vec<(QosClass, f64)>,
}

impl TaskStats {
    /// Whether the task holds scheduler resources now (starting, running, or detached until
    /// its closure returns): the tasks that have series of their own in the metrics.
    pub fn holds_resources(&self) -> bool {
        self.detached
            || self.quarantined
            || matches!(self.state, TaskState::Starting | TaskState::Running)
    }
}

/// Upper bounds (seconds) of the time histograms' buckets (`+Inf` follows).
pub const TIME_BUCKETS: [f64; 19] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 300.0,
];

/// A histogram of durations in seconds over [`TIME_BUCKETS`].
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative): `counts[i]` are those `<= TIME_BUCKETS[i]`
    /// and above the bucket before; the last entry counts those above every bound.
    pub counts: [u64; TIME_BUCKETS.len() + 1],
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: [0; TIME_BUCKETS.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }
}

impl Histogram {
    /// Records one observation of `seconds`.
    pub fn observe(&mut self, seconds: f64) {
        let i = TIME_BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(TIME_BUCKETS.len());
        self.counts[i] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}

/// QoS classes in the order of the per-class aggregates.
pub(crate) const QOS_ORDER: [QosClass; 3] = [
    QosClass::Guaranteed,
    QosClass::Burstable,
    QosClass::BestEffort,
];

pub(crate) fn qos_index(q: QosClass) -> usize {
    match q {
        QosClass::Guaranteed => 0,
        QosClass::Burstable => 1,
        QosClass::BestEffort => 2,
    }
}

impl SchedulerStats {
    /// Live tasks by state: queued, starting, running, detached (its outcome decided while its
    /// closure still runs), quarantined (its GPU work did not end); each once, zeros included.
    pub fn live_by_state(&self) -> [(&'static str, u64); 5] {
        let mut n = [
            ("queued", 0),
            ("starting", 0),
            ("running", 0),
            ("detached", 0),
            ("quarantined", 0),
        ];
        for t in &self.tasks {
            let i = if t.quarantined {
                4
            } else if t.detached {
                3
            } else {
                match t.state {
                    TaskState::Queued => 0,
                    TaskState::Starting => 1,
                    TaskState::Running => 2,
                    _ => continue,
                }
            };
            n[i].1 += 1;
        }
        n
    }

    /// Tasks that ended in `state`.
    pub fn count(&self, state: TaskState) -> u64 {
        self.ended
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n)
    }

    /// The metrics snapshot in the Prometheus text exposition format (version 0.0.4).
    ///
    /// Label sets are bounded, so the number of series does not grow with the tasks run:
    /// - per task, only while it holds resources (starting, running, or detached / quarantined
    ///   until it lets go; labels `id`, `task`, `qos`, `partition`): memory, granted and used
    ///   SMs, kernels, throttles and eviction. A task's series end with it; what it did is
    ///   aggregated below.
    /// - tasks by state (`gpukit_sched_tasks{state}`: queued, starting, running, detached,
    ///   quarantined) and ended tasks by final state (counter);
    /// - histograms by QoS class (label `qos`): queue wait (submission to start) and run time
    ///   (start of the closure to the release of its resources), in seconds; GPU seconds of
    ///   ended tasks (counter);
    /// - per partition (label `partition`, empty for the default pool): quota, commitments,
    ///   memory in use and held by ended tasks, SMs, running tasks, queue length, evictions;
    /// - scheduler totals and health.
    pub fn to_prometheus(&self) -> String {
        render(&[(None, self)])
    }

    /// The metrics of several devices' schedulers in one snapshot (a
    /// [`MultiScheduler`](crate::MultiScheduler)): the families of
    /// [`to_prometheus`](Self::to_prometheus), each sample with a `device` label (the
    /// ordinal).
    pub fn to_prometheus_devices(stats: &[SchedulerStats]) -> String {
        let all: Vec<(Option<usize>, &SchedulerStats)> =
            stats.iter().map(|s| (Some(s.device), s)).collect();
        render(&all)
    }
}

/// The text of the metrics of `all` (with a `device` label where one is given).
fn render(all: &[(Option<usize>, &SchedulerStats)]) -> String {
    {
        let mut out = Prometheus::default();
        let task_labels = |t: &TaskStats| {
            vec![
                ("id", t.id.to_string()),
                ("task", t.name.clone()),
                ("qos", t.qos.to_string()),
                ("partition", t.partition.clone().unwrap_or_default()),
            ]
        };
        type TaskMetric<'a> = (&'a str, &'a str, &'a str, fn(&TaskStats) -> Option<f64>);
        let task_metrics: [TaskMetric; 9] = [
            (
                "gpukit_sched_task_memory_bytes",
                "gauge",
                "Device memory charged to the task now.",
                |t| Some(t.memory_in_use as f64),
            ),
            (
                "gpukit_sched_task_memory_peak_bytes",
                "gauge",
                "Most device memory charged to the task.",
                |t| Some(t.memory_peak as f64),
            ),
            (
                "gpukit_sched_task_memory_committed_bytes",
                "gauge",
                "Device memory committed to the task (its request).",
                |t| Some(t.memory_committed as f64),
            ),
            (
                "gpukit_sched_task_granted_sms",
                "gauge",
                "SMs of the task's own groups.",
                |t| Some(t.granted_sms as f64),
            ),
            (
                "gpukit_sched_task_used_sms",
                "gauge",
                "SMs of the stream the task's last kernel ran on.",
                |t| Some(t.sms_in_use as f64),
            ),
            (
                "gpukit_sched_task_kernels_total",
                "counter",
                "Kernels launched through the task's context.",
                |t| Some(t.kernels_launched as f64),
            ),
            (
                "gpukit_sched_task_throttles_total",
                "counter",
                "Launches or safe points the pacer delayed.",
                |t| Some(t.throttles as f64),
            ),
            (
                "gpukit_sched_task_throttled_seconds_total",
                "counter",
                "Time the pacer delayed the task.",
                |t| Some(t.throttled_ms / 1e3),
            ),
            (
                "gpukit_sched_task_evicted",
                "gauge",
                "1 when the task was evicted under memory pressure.",
                |t| Some(t.preempted as u8 as f64),
            ),
        ];
        for (name, kind, help, value) in task_metrics {
            out.family(name, kind, help);
            for (dev, st) in all {
                out.device = *dev;
                for t in st.tasks.iter().filter(|t| t.holds_resources()) {
                    if let Some(v) = value(t) {
                        out.sample(name, &task_labels(t), v);
                    }
                }
            }
        }
        out.family(
            "gpukit_sched_tasks",
            "gauge",
            "Live tasks by state (detached: outcome decided while the closure still runs).",
        );
        for (dev, st) in all {
            out.device = *dev;
            for (state, n) in st.live_by_state() {
                out.sample(
                    "gpukit_sched_tasks",
                    &[("state", state.to_string())],
                    n as f64,
                );
            }
        }
        type Hists = fn(&SchedulerStats) -> &Vec<(QosClass, Histogram)>;
        let hist_families: [(&str, &str, Hists); 2] = [
            (
                "gpukit_sched_queue_wait_seconds",
                "Time from submission to start (leaving the queue), by QoS class.",
                |s| &s.queue_wait,
            ),
            (
                "gpukit_sched_run_seconds",
                "Time from the start of the closure to the release of its resources, by QoS class.",
                |s| &s.run_time,
            ),
        ];
        for (name, help, hists) in hist_families {
            out.family(name, "histogram", help);
            for (dev, st) in all {
                out.device = *dev;
                for (qos, h) in hists(st) {
                    out.histogram(name, &[("qos", qos.to_string())], h);
                }
            }
        }
        out.family(
            "gpukit_sched_gpu_seconds_total",
            "counter",
            "GPU time of ended tasks (events on their home streams), by QoS class.",
        );
        for (dev, st) in all {
            out.device = *dev;
            for (qos, s) in &st.gpu_seconds {
                out.sample(
                    "gpukit_sched_gpu_seconds_total",
                    &[("qos", qos.to_string())],
                    *s,
                );
            }
        }
        let pool_label =
            |p: &PartitionStats| vec![("partition", p.pool.name.clone().unwrap_or_default())];
        type PoolMetric<'a> = (&'a str, &'a str, &'a str, fn(&PartitionStats) -> f64);
        let pool_metrics: [PoolMetric; 10] = [
            (
                "gpukit_sched_partition_memory_quota_bytes",
                "gauge",
                "The partition's memory quota.",
                |p| p.pool.memory_quota as f64,
            ),
            (
                "gpukit_sched_partition_memory_committed_bytes",
                "gauge",
                "Requests of the partition's running tasks.",
                |p| p.pool.memory_committed as f64,
            ),
            (
                "gpukit_sched_partition_memory_bytes",
                "gauge",
                "Device memory charged in the partition now.",
                |p| p.memory.in_use as f64,
            ),
            (
                "gpukit_sched_partition_memory_orphaned_bytes",
                "gauge",
                "Memory still held by ended tasks (buffers they returned).",
                |p| p.memory.orphaned as f64,
            ),
            (
                "gpukit_sched_partition_sms",
                "gauge",
                "SMs of the partition's groups.",
                |p| p.pool.sms as f64,
            ),
            (
                "gpukit_sched_partition_sms_assigned",
                "gauge",
                "SMs of groups owned by running tasks.",
                |p| {
                    (p.pool.groups_assigned.len() as u64
                        * (p.pool.sms as u64 / p.pool.groups.len().max(1) as u64))
                        as f64
                },
            ),
            (
                "gpukit_sched_partition_sms_quarantined",
                "gauge",
                "SMs of groups out of service: quarantined work (a kernel that did not end) may occupy them.",
                |p| {
                    (p.pool.groups_quarantined.len() as u64
                        * (p.pool.sms as u64 / p.pool.groups.len().max(1) as u64))
                        as f64
                },
            ),
            (
                "gpukit_sched_partition_running_tasks",
                "gauge",
                "Tasks running in the partition.",
                |p| p.pool.running as f64,
            ),
            (
                "gpukit_sched_partition_queue_length",
                "gauge",
                "Tasks queued in the partition.",
                |p| p.pool.queued as f64,
            ),
            (
                "gpukit_sched_partition_evictions_total",
                "counter",
                "Tasks of the partition evicted under memory pressure.",
                |p| p.evictions as f64,
            ),
        ];
        for (name, kind, help, value) in pool_metrics {
            out.family(name, kind, help);
            for (dev, st) in all {
                out.device = *dev;
                for p in &st.partitions {
                    out.sample(name, &pool_label(p), value(p));
                }
            }
        }
        out.family(
            "gpukit_sched_tasks_submitted_total",
            "counter",
            "Tasks submitted.",
        );
        for (dev, st) in all {
            out.device = *dev;
            out.sample(
                "gpukit_sched_tasks_submitted_total",
                &[],
                st.submitted as f64,
            );
        }
        out.family(
            "gpukit_sched_tasks_ended_total",
            "counter",
            "Tasks that ended, by final state.",
        );
        for (dev, st) in all {
            out.device = *dev;
            for (state, n) in &st.ended {
                out.sample(
                    "gpukit_sched_tasks_ended_total",
                    &[("state", state.name().to_string())],
                    *n as f64,
                );
            }
        }
        type Total<'a> = (&'a str, &'a str, &'a str, fn(&SchedulerStats) -> f64);
        let totals: [Total; 10] = [
            (
                "gpukit_sched_quarantined_sms",
                "gauge",
                "SMs out of service because quarantined work (a kernel that did not end) may occupy them.",
                |s| {
                    let groups = s
                        .quarantine
                        .iter()
                        .fold(crate::GroupSet::EMPTY, |g, q| g.union(q.groups));
                    let floor = s.quarantine.iter().any(|q| q.floor);
                    (s.layout.sms(groups.len()) + if floor { s.layout.remainder_sms } else { 0 })
                        as f64
                },
            ),
            (
                "gpukit_sched_quarantined_memory_bytes",
                "gauge",
                "Device memory kept for quarantined tasks (commitments, or what their streams keep).",
                |s| s.quarantine.iter().map(|q| q.memory_bytes as f64).sum(),
            ),
            (
                "gpukit_sched_healthy",
                "gauge",
                "1 while the device context is usable; 0 after a sticky CUDA error (see the stats' unhealthy cause).",
                |s| s.unhealthy.is_none() as u8 as f64,
            ),
            (
                "gpukit_sched_timer_panics_total",
                "counter",
                "Timer passes that panicked (contained; the timer thread lives on).",
                |s| s.timer_panics as f64,
            ),
            (
                "gpukit_sched_callback_panics_total",
                "counter",
                "Completion callbacks and future wakers that panicked (contained).",
                |s| s.callback_panics as f64,
            ),
            (
                "gpukit_sched_tasks_detached",
                "gauge",
                "Tasks whose outcome was decided while their closure still runs.",
                |s| s.detached_running as f64,
            ),
            (
                "gpukit_sched_evictions_total",
                "counter",
                "Evictions under memory pressure.",
                |s| s.evictions_total as f64,
            ),
            (
                "gpukit_sched_memory_capacity_bytes",
                "gauge",
                "Memory that requests may sum to.",
                |s| s.memory_capacity as f64,
            ),
            (
                "gpukit_sched_memory_outside_tasks_bytes",
                "gauge",
                "Memory allocated outside tasks while the scheduler runs.",
                |s| s.memory_outside_tasks as f64,
            ),
            (
                "gpukit_sched_green_contexts_created_total",
                "counter",
                "Green contexts created.",
                |s| s.green_contexts_created as f64,
            ),
        ];
        for (name, kind, help, v) in totals {
            out.family(name, kind, help);
            for (dev, st) in all {
                out.device = *dev;
                out.sample(name, &[], v(st));
            }
        }
        out.text
    }
}

impl Inner {
    /// Statistics of one task.
    pub(crate) fn task_stats(&self, t: &Arc<Task>) -> TaskStats {
        let st = self.state.lock();
        self.task_stats_locked(t, &st)
    }

    pub(crate) fn task_stats_locked(&self, t: &Arc<Task>, st: &State) -> TaskStats {
        let (in_use, peak) = self.memory.usage(&t.owner);
        let s = t.status.lock();
        let (own, lent) = *t.usable.lock();
        let live = st.live.contains_key(&t.id) && s.released_at.is_none();
        let running = live && matches!(s.state, TaskState::Running | TaskState::Starting);
        let usable_sms = if running || (live && s.detached && !s.quarantined) {
            match s.grant.map(|g| g.compute.mechanism) {
                Some(Mechanism::GreenContext) => self.layout.sms(own.union(lent).len()),
                Some(Mechanism::Floor) => self.layout.sms(lent.len()) + self.layout.remainder_sms,
                Some(Mechanism::Pacing) => self.layout.sms(own.union(lent).len()),
                None => 0,
            }
        } else {
            0
        };
        let bytes = t.bytes.load(Ordering::Relaxed);
        let end = s.released_at.or(s.resolved_at).unwrap_or_else(Instant::now);
        TaskStats {
            id: t.id,
            name: t.spec.name.clone(),
            qos: t.spec.qos,
            partition: t.spec.partition.clone(),
            state: s.state,
            detached: s.detached && s.released_at.is_none() && !s.quarantined,
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
            granted_sms: s.grant.map_or(0, |g| g.compute.sms),
            usable_sms,
            sms_in_use: t.sms_in_use.load(Ordering::Relaxed),
            kernels_launched: t.kernels.load(Ordering::Relaxed),
            throttles: t.throttles.load(Ordering::Relaxed),
            throttled_ms: t.throttled_ns.load(Ordering::Relaxed) as f64 / 1e6,
            preempted: matches!(t.stop.get(), Some((Stop::Preempt(_), _))),
            reported_bytes: bytes,
            achieved_gbps: match s.gpu_ms {
                Some(ms) if bytes > 0 && ms > 0.0 => Some(bytes as f64 / (ms * 1e6)),
                _ => None,
            },
            wait_ms: s
                .started
                .map(|x| x.duration_since(t.submitted).as_secs_f64() * 1e3)
                .unwrap_or(0.0),
            run_ms: s
                .started
                .map(|x| end.saturating_duration_since(x).as_secs_f64() * 1e3)
                .unwrap_or(0.0),
            error: s.error_text.clone(),
            quarantined: s.quarantined,
        }
    }

    pub(crate) fn stats(&self) -> SchedulerStats {
        let st = self.state.lock();
        let mut tasks: Vec<TaskStats> = st
            .live
            .values()
            .chain(st.finished.iter().filter(|t| !st.live.contains_key(&t.id)))
            .map(|t| self.task_stats_locked(t, &st))
            .collect();
        tasks.sort_by_key(|t| t.id);
        let partitions = st
            .planner
            .pools()
            .into_iter()
            .map(|pool| PartitionStats {
                memory: self.memory.pool(&pool.name),
                evictions: st.pool_evictions.get(&pool.name).copied().unwrap_or(0),
                pool,
            })
            .collect();
        let mut ended = [(TaskState::Succeeded, 0u64); 7];
        for (i, s) in FINAL_STATES.iter().enumerate() {
            ended[i] = (*s, st.ended[i]);
        }
        let (detached_running, quarantined) = st.live.values().fold((0, 0), |(d, q), t| {
            let s = t.status.lock();
            (
                d + (s.detached && !s.quarantined) as u64,
                q + s.quarantined as u64,
            )
        });
        SchedulerStats {
            mechanism: self.mechanism.clone(),
            device: self.ordinal,
            layout: self.layout,
            memory_capacity: st.planner.config().memory_capacity,
            memory_outside_tasks: self.memory.with(|l| l.outside()),
            tasks,
            partitions,
            submitted: st.submitted,
            ended,
            detached_running,
            quarantined,
            quarantine: self.quarantine_report(),
            unhealthy: self.unhealthy(),
            evictions: st.evictions.iter().cloned().collect(),
            evictions_total: st.evictions_total,
            kernels_launched: self.kernels_total.load(Ordering::Relaxed),
            green_contexts_created: self.lanes.created(),
            lanes_cached: self.lanes.cached(),
            lanes_destroyed: self.lanes.destroyed(),
            lanes_held: self.lanes.held(),
            callback_panics: self.callback_panics.load(Ordering::Relaxed),
            timer_panics: self.timer_panics.load(Ordering::Relaxed),
            queue_wait: QOS_ORDER
                .iter()
                .map(|q| (*q, st.queue_wait[qos_index(*q)].clone()))
                .collect(),
            run_time: QOS_ORDER
                .iter()
                .map(|q| (*q, st.run_time[qos_index(*q)].clone()))
                .collect(),
            gpu_seconds: QOS_ORDER
                .iter()
                .map(|q| (*q, st.gpu_seconds[qos_index(*q)]))
                .collect(),
        }
    }
}

#[derive(Default)]
struct Prometheus {
    text: String,
    /// The `device` label of the samples written now (several devices in one snapshot).
    device: Option<usize>,
}

impl Prometheus {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// A histogram's samples: cumulative `_bucket`s with `le` (`+Inf` last), `_sum`, `_count`.
    fn histogram(&mut self, name: &str, labels: &[(&str, String)], h: &Histogram) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0;
        for (i, n) in h.counts.iter().enumerate() {
            cumulative += n;
            let le = TIME_BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| format_value(*b));
            let mut l = labels.to_vec();
            l.push(("le", le));
            self.sample(&bucket, &l, cumulative as f64);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum);
        self.sample(&format!("{name}_count"), labels, h.count as f64);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, String)], value: f64) {
        self.text.push_str(name);
        let device = self.device.map(|d| ("device", d.to_string()));
        let labels: Vec<&(&str, String)> = device.iter().chain(labels).collect();
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.into_iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape_label(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", format_value(value));
    }
}

/// A label value with `\`, `"` and line feeds escaped, as the text format requires.
fn escape_label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// Help text with `\` and line feeds escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_escapes() {
        assert_eq!(format_value(3.0), "3");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("x\ny"), "x\\ny");
    }
}
