//! What the scheduler does when the device misbehaves: hung work goes to quarantine, a
//! corrupted context makes the scheduler unhealthy.
//!
//! # Quarantine: a kernel that does not end
//! A task's end waits for its queued GPU work ([`TaskContext`](crate::TaskContext) polls;
//! no driver wait without an end). Once the task has been asked to stop — its timeout, a
//! cancellation, an eviction, shutdown — and the stop's grace period is over with its work
//! still running, the work is taken for hung: the task gets the stop's outcome, its worker is
//! free, and every lane its work used (its home lane, its lent lane, and lent lanes it moved
//! off whose work had not finished) is *quarantined*, left to the driver as it is:
//! - nothing waits for it, destroys or reuses it: no stream, context, cuBLAS handle or
//!   buffer of it is synchronised or destroyed (each would wait for the work), its streams
//!   are retired in gpukit-core's allocator (their cached memory is never given to another
//!   stream, nor released to the driver, and while any stream is retired the allocator waits
//!   for no device work at all), and while a device has hung work no lane of it is destroyed
//!   ([`device_has_hung_work`]: this holds across schedulers of the process, since a later
//!   scheduler retries the lanes an earlier one left; a detached task whose closure has not
//!   returned counts too, since the work it queued may not end either);
//! - its resources are accounted as out of service: its own SM groups and every group its
//!   lanes cover (lent groups too, also when another task has owned them since) are given to
//!   no task and lent to none ([`PoolInfo::groups_quarantined`](crate::PoolInfo)); its memory
//!   commitment, or the memory its streams keep if that is more, stays charged, and it is no
//!   eviction victim (stopping it frees nothing);
//! - in the pacing fallback it gives up the pacing token (no other task waits for its
//!   kernel);
//! - [`SchedulerStats::quarantine`](crate::SchedulerStats::quarantine) names each quarantined
//!   task with its groups, SMs, memory and streams, and the metrics count them.
//!
//! New tasks are admitted and run on the remaining groups. A watcher thread (running only
//! while something is quarantined, so that the timer thread never calls the driver and its
//! deadlines fire even if a driver call blocks) checks quarantined work every [`POLL`]; when
//! it ends after all, everything is released and the lanes go back to the pool. When the
//! scheduler goes first, the quarantined lanes are leaked on purpose (their work may still
//! run), the device stays marked as having hung work, and its idle lanes are left as orphans
//! that a later scheduler of the device adopts. A scheduler started while such work runs
//! keeps the SM groups it occupies out of service (inherited: reported in
//! [`PoolInfo::groups_quarantined`](crate::PoolInfo)) until it ends.
//!
//! # What the driver may block beside a kernel that never ends
//! Work on lanes that exist, with kernels already loaded in their contexts, goes on. Two
//! driver steps may wait for the device instead, outside the scheduler's control:
//! - loading a kernel into a context: with CUDA's lazy module loading (the default since
//!   CUDA 12.2) the first launch of a kernel in a context loads it there;
//! - making a new lane: a new green context loads the process's modules into itself (all of
//!   them under `CUDA_MODULE_LOADING=EAGER`).
//!
//! A task caught in either is bounded by its timeout, which counts from its start (lane
//! creation included): at the timeout plus the grace period it ends `TimedOut`, detached (its
//! worker stays blocked until the driver returns; its closure never runs if the block was in
//! the start). Processes that must keep running new work beside hung kernels make their
//! lanes beforehand ([`Scheduler::prewarm`](crate::Scheduler::prewarm)) and launch each kernel
//! once on them before work can hang.
//!
//! # Health: a sticky error
//! See [`crate::health`]: the first sticky CUDA error a task ends with marks the scheduler
//! unhealthy; queued tasks fail and submissions are refused with
//! [`Error::Unhealthy`](crate::Error::Unhealthy), naming the task and the error.

use crate::error::Error;
use crate::lanes::{Lane, LaneKey};
use crate::plan::TaskId;
use crate::scheduler::{push_finished, Inner};
use crate::sm::{GroupSet, SmLayout};
use crate::task::{Task, TaskState};
use gpukit_core::{Event, OwnerId};
use parking_lot::Mutex;
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the timer checks whether quarantined work has ended.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// Work that may never end.
enum Hung {
    /// Quarantined work: the event completes when it ends; the SM groups it may occupy (of
    /// the scheduler `by`, whose layout is `layout`).
    Work {
        done: Event,
        groups: GroupSet,
        layout: SmLayout,
        by: u64,
    },
    /// A detached task (its outcome decided at its stop's grace period): its closure, and the
    /// GPU work it queues, may still run until its resources are released.
    Closure(Weak<Task>),
}

impl Hung {
    /// Whether it may still run (an event that cannot be queried, in a broken context,
    /// counts as running). Never waits.
    fn running(&self) -> bool {
        match self {
            Hung::Work { done, .. } => !matches!(done.is_complete(), Ok(true)),
            Hung::Closure(t) => t
                .upgrade()
                .is_some_and(|t| t.status.lock().released_at.is_none()),
        }
    }
}

/// Work that may never end, by device ordinal. Process wide, so that what one scheduler left
/// running keeps a later scheduler of the device from destroying lanes (which waits for the
/// device) while it may still run.
static HUNG: Mutex<Vec<(usize, Hung)>> = Mutex::new(Vec::new());

/// Whether device `ordinal` has work that may never end: quarantined work that has not ended,
/// or a detached task whose closure has not returned. Never waits.
pub(crate) fn device_has_hung_work(ordinal: usize) -> bool {
    let mut h = HUNG.lock();
    h.retain(|(_, w)| w.running());
    h.iter().any(|(o, _)| *o == ordinal)
}

/// The SM groups that quarantined work of other schedulers of device `ordinal` (over the
/// same `layout`) may still occupy: a scheduler started beside it keeps them out of service
/// ([`Planner::set_inherited`](crate::plan::Planner::set_inherited)). Never waits.
pub(crate) fn inherited_groups(ordinal: usize, layout: SmLayout, own: u64) -> GroupSet {
    let mut h = HUNG.lock();
    h.retain(|(_, w)| w.running());
    h.iter()
        .filter(|(o, _)| *o == ordinal)
        .fold(GroupSet::EMPTY, |acc, (_, w)| match w {
            Hung::Work {
                groups,
                layout: l,
                by,
                ..
            } if *l == layout && *by != own => acc.union(*groups),
            _ => acc,
        })
}

/// Records that `task` of device `ordinal` was detached: until its closure returns, no lane
/// of the device is destroyed.
pub(crate) fn note_detached(ordinal: usize, task: &Arc<Task>) {
    HUNG.lock()
        .push((ordinal, Hung::Closure(Arc::downgrade(task))));
}

/// A quarantined task as the statistics report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedTask {
    /// The task's id.
    pub id: TaskId,
    /// Its name.
    pub name: String,
    /// Its partition (`None`: the default pool).
    pub partition: Option<String>,
    /// How long its work has been quarantined.
    pub since: Duration,
    /// SM groups out of service while its work runs: its own and those its lanes cover
    /// (in the pacing fallback: its own virtual groups).
    pub groups: GroupSet,
    /// Whether its work also runs on the floor SMs (a BestEffort task's), which other
    /// BestEffort work keeps sharing.
    pub floor: bool,
    /// SMs of `groups` (and of the floor when `floor`).
    pub sms: u32,
    /// Device memory kept for it: its commitment, or what its streams keep cached if more.
    pub memory_bytes: u64,
    /// Of which the allocator keeps on its retired streams (cached segments).
    pub stream_bytes: u64,
    /// Streams left to the driver (retired; never synchronised or destroyed while it runs).
    pub streams: usize,
}

/// A task whose GPU work did not end.
pub(crate) struct Quarantined {
    pub task: Arc<Task>,
    /// Never dropped while the work may run (destroying a stream waits for it): given back
    /// explicitly once `pending` completes, leaked otherwise.
    lanes: ManuallyDrop<Vec<Lane>>,
    /// Completes when the lanes' work has ended.
    pending: Event,
    /// SM groups the work may occupy: the task's own and those its lanes cover.
    pub groups: GroupSet,
    /// The lanes include the floor.
    floor: bool,
    /// The lane owner whose memory (cuBLAS workspace) is charged to the task.
    bound: Option<OwnerId>,
    /// Bytes the allocator keeps on the lanes' streams.
    stream_bytes: u64,
    since: Instant,
}

impl Inner {
    /// Quarantines a task's lanes (its work did not end within the stop's grace period).
    /// The planner and the ledger follow when the task's end is processed
    /// ([`is_quarantined`](Self::is_quarantined)). Makes no call that waits for the device.
    pub(crate) fn quarantine_lanes(
        self: &Arc<Self>,
        task: &Arc<Task>,
        lanes: Vec<Lane>,
        pending: Event,
        bound: Option<OwnerId>,
    ) {
        let mut stream_bytes = 0u64;
        let own = task
            .status
            .lock()
            .grant
            .map_or(GroupSet::EMPTY, |g| g.compute.groups);
        let groups = lanes.iter().fold(own, |acc, l| acc.union(l.key.groups()));
        if let Some(g) = &self.gpu {
            HUNG.lock().push((
                self.ordinal,
                Hung::Work {
                    done: pending.clone(),
                    groups,
                    layout: self.layout,
                    by: self.id,
                },
            ));
            for l in &lanes {
                g.dev.allocator().retire_stream(&l.stream);
                stream_bytes += g.dev.allocator().stream_reserved(&l.stream) as u64;
            }
        }
        self.token.abandon(task.id);
        self.memory
            .with(|l| l.quarantine(&task.owner, stream_bytes));
        let floor = lanes
            .iter()
            .any(|l| matches!(l.key, LaneKey::Green(_, true)));
        task.status.lock().quarantined = true;
        self.quarantine.lock().insert(
            task.id,
            Quarantined {
                task: task.clone(),
                lanes: ManuallyDrop::new(lanes),
                pending,
                groups,
                floor,
                bound,
                stream_bytes,
                since: Instant::now(),
            },
        );
        self.watch_quarantine();
    }

    /// Keeps the groups that other schedulers' hung work occupies out of service (see
    /// [`inherited_groups`]) and follows that work until it ends. Called when the scheduler
    /// starts.
    pub(crate) fn inherit_hung_work(self: &Arc<Self>) {
        if self.gpu.is_none() || self.refresh_inherited(true).is_empty() {
            return;
        }
        self.watch_quarantine();
    }

    /// Sets the planner's inherited groups from the registry (`first`: even when it had none).
    /// Returns them.
    fn refresh_inherited(&self, first: bool) -> GroupSet {
        let mut st = self.state.lock();
        if !first && st.planner.inherited().is_empty() {
            return GroupSet::EMPTY;
        }
        let groups = inherited_groups(self.ordinal, self.layout, self.id);
        let now = self.now();
        let events = st.planner.set_inherited(groups, now);
        self.apply_events(&mut st, events);
        self.release(st);
        groups
    }

    /// Starts the watcher thread unless it runs: it polls quarantined work (and the hung work
    /// of other schedulers whose groups this one keeps out of service) every [`POLL`] until
    /// none is left or the scheduler has shut down (holding the scheduler only while it
    /// polls).
    fn watch_quarantine(self: &Arc<Self>) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("gpukit-sched-quarantine".into())
            .spawn(move || loop {
                std::thread::sleep(POLL);
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                inner.recover_quarantined();
                let inherited = inner.refresh_inherited(false);
                let done = inner.state.lock().timer_exit;
                let q = inner.quarantine.lock();
                if (q.is_empty() && inherited.is_empty()) || done {
                    // Under the quarantine lock: a task quarantined from now on starts a
                    // new watcher.
                    inner.watching.store(false, Ordering::Release);
                    return;
                }
            });
        if started.is_err() {
            // No thread: the work is still left alone; it is released when the scheduler
            // next quarantines something (a new watcher) or never.
            self.watching.store(false, Ordering::Release);
        }
    }

    /// The groups a quarantined task's work may occupy (`None`: it is not quarantined).
    pub(crate) fn is_quarantined(&self, id: TaskId) -> Option<GroupSet> {
        self.quarantine.lock().get(&id).map(|q| q.groups)
    }

    /// The quarantined tasks, by id.
    pub(crate) fn quarantine_report(&self) -> Vec<QuarantinedTask> {
        let q = self.quarantine.lock();
        let mut out: Vec<QuarantinedTask> = q
            .values()
            .map(|q| {
                let groups = q.groups;
                let floor_sms = if q.floor {
                    self.layout.remainder_sms
                } else {
                    0
                };
                QuarantinedTask {
                    id: q.task.id,
                    name: q.task.spec.name.clone(),
                    partition: q.task.spec.partition.clone(),
                    since: q.since.elapsed(),
                    groups,
                    floor: q.floor,
                    sms: self.layout.sms(groups.len()) + floor_sms,
                    memory_bytes: self
                        .memory
                        .with(|l| l.quarantined(&q.task.owner))
                        .unwrap_or(q.stream_bytes),
                    stream_bytes: q.stream_bytes,
                    streams: q.lanes.len(),
                }
            })
            .collect();
        out.sort_by_key(|t| t.id);
        out
    }

    /// Releases the quarantined tasks whose work has ended (the timer calls this, with no
    /// lock held). A query that fails with a sticky error marks the scheduler unhealthy.
    pub(crate) fn recover_quarantined(&self) {
        let checked: Vec<(TaskId, Arc<Task>, gpukit_core::Result<bool>)> = self
            .quarantine
            .lock()
            .iter()
            .map(|(&id, q)| (id, q.task.clone(), q.pending.is_complete()))
            .collect();
        for (id, task, done) in checked {
            match done {
                Ok(true) => self.release_quarantined(id),
                Ok(false) => {}
                Err(e) => self.observe_error(&task, &Error::Core(e)),
            }
        }
    }

    /// A quarantined task's work has ended: its lanes, groups, commitment and memory go back.
    fn release_quarantined(&self, id: TaskId) {
        let Some(mut q) = self.quarantine.lock().remove(&id) else {
            return;
        };
        // The work has ended: the lanes may be pooled (or destroyed) again.
        let lanes = std::mem::take(&mut *q.lanes);
        if let Some(g) = &self.gpu {
            for l in &lanes {
                g.dev.allocator().restore_stream(&l.stream);
            }
        }
        if let Some(owner) = &q.bound {
            self.memory.unbind_lane(owner);
        }
        for l in lanes {
            self.checkin(l);
        }
        self.memory.close(&q.task.owner);
        {
            let mut s = q.task.status.lock();
            s.quarantined = false;
            s.released_at = Some(Instant::now());
        }
        let now = self.now();
        let mut st = self.state.lock();
        st.live.remove(&id);
        st.start_order.remove(&id);
        let events = st.planner.finish(id, now);
        self.apply_events(&mut st, events);
        if st.shutting_down {
            self.idle.notify_all();
        }
        self.release(st);
    }

    /// Records `e` if it is a sticky error: the scheduler becomes unhealthy (first cause
    /// wins), its queued tasks fail with [`Error::Unhealthy`].
    pub(crate) fn observe_error(&self, task: &Task, e: &Error) {
        let Some(sticky) = crate::health::sticky_error(e) else {
            return;
        };
        // The code's name (formatting a DriverError asks the driver for its text).
        let cause = format!(
            "task `{}` (id {}) hit {:?}",
            task.spec.name, task.id, sticky.0
        );
        {
            let mut h = self.health.lock();
            if h.is_some() {
                return;
            }
            *h = Some(cause.clone());
        }
        self.healthy.store(false, Ordering::Release);
        let mut st = self.state.lock();
        for id in st.planner.drain_queue() {
            if let Some(p) = st.queued_jobs.remove(&id) {
                st.live.remove(&id);
                let e = Error::Unhealthy {
                    cause: cause.clone(),
                };
                self.conclude(&mut st, &p.task, TaskState::Failed, Some(e), false);
                push_finished(&mut st, p.task.clone());
                st.dropped.push(p);
            }
        }
        self.release(st);
    }

    /// Why the scheduler is unhealthy (`None`: it is healthy).
    pub(crate) fn unhealthy(&self) -> Option<String> {
        if self.healthy.load(Ordering::Acquire) {
            return None;
        }
        self.health.lock().clone()
    }
}
