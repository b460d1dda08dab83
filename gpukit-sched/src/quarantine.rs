//! What the scheduler does when the device misbehaves: hung work goes to quarantine, a
//! corrupted context makes the scheduler unhealthy.
//!
//! # Quarantine: a kernel that does not end
//! A task's end waits for its queued GPU work ([`TaskContext`](crate::TaskContext) polls;
//! no driver wait without an end). Once the task has been asked to stop — its timeout, a
//! cancellation, an eviction, shutdown — and the stop's grace period is over with its work
//! still running, the work is taken for hung: the task gets the stop's outcome, its worker is
//! free, and its lanes are *quarantined*: their streams are retired in gpukit-core's allocator
//! (their memory is never handed to another stream, which would wait for them), the task
//! keeps its own SM groups, the lent groups its work may occupy and its memory commitment
//! (so no new task is put on SMs a never-ending kernel holds), and in the pacing fallback it
//! gives up the pacing token (no other task waits for its kernel). The timer checks
//! quarantined work every [`POLL`]; when it ends after all, everything is released and the
//! lanes go back to the pool.
//!
//! # Health: a sticky error
//! See [`crate::health`]: the first sticky CUDA error a task ends with marks the scheduler
//! unhealthy; queued tasks fail and submissions are refused with
//! [`Error::Unhealthy`](crate::Error::Unhealthy), naming the task and the error.

use crate::error::Error;
use crate::lanes::Lane;
use crate::plan::TaskId;
use crate::scheduler::{push_finished, Inner};
use crate::sm::GroupSet;
use crate::task::{Task, TaskState};
use gpukit_core::{Event, OwnerId};
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the timer checks whether quarantined work has ended.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// A task whose GPU work did not end.
pub(crate) struct Quarantined {
    pub task: Arc<Task>,
    /// Never dropped while the work may run (destroying a stream waits for it): given back
    /// explicitly once `pending` completes, forgotten otherwise.
    lanes: ManuallyDrop<Vec<Lane>>,
    /// Completes when the lanes' work has ended.
    pending: Event,
    /// SM groups the work may occupy (the lanes' groups).
    pub groups: GroupSet,
    /// The lane owner whose memory (cuBLAS workspace) is charged to the task.
    bound: Option<OwnerId>,
}

impl Inner {
    /// Quarantines a task's lanes (its work did not end within the stop's grace period).
    /// The planner and the ledger follow when the task's end is processed
    /// ([`is_quarantined`](Self::is_quarantined)).
    pub(crate) fn quarantine_lanes(
        &self,
        task: &Arc<Task>,
        lanes: Vec<Lane>,
        pending: Event,
        bound: Option<OwnerId>,
    ) {
        if let Some(g) = &self.gpu {
            for l in &lanes {
                g.dev.allocator().retire_stream(&l.stream);
            }
        }
        self.token.abandon(task.id);
        let groups = lanes
            .iter()
            .fold(GroupSet::EMPTY, |acc, l| acc.union(l.key.groups()));
        task.status.lock().quarantined = true;
        self.quarantine.lock().insert(
            task.id,
            Quarantined {
                task: task.clone(),
                lanes: ManuallyDrop::new(lanes),
                pending,
                groups,
                bound,
            },
        );
    }

    /// The groups a quarantined task's work may occupy (`None`: it is not quarantined).
    pub(crate) fn is_quarantined(&self, id: TaskId) -> Option<GroupSet> {
        self.quarantine.lock().get(&id).map(|q| q.groups)
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
