//! A task's record inside the scheduler: its spec, its state and outcome, the stop requests
//! it has received, and the counters its context keeps.
//!
//! # One outcome per task
//! Every task ends exactly once ([`Task::resolve`]; later attempts change nothing), as the
//! first of these happens:
//! - rejected at submit or while queued ([`TaskState::Rejected`]), its deadline passed while
//!   queued ([`TaskState::Expired`]), or cancelled while queued ([`TaskState::Cancelled`]);
//! - its closure returned: `Ok` is [`TaskState::Succeeded`] even if a stop was requested
//!   meanwhile; an error that came from a safe point reporting a stop (cancellation,
//!   timeout, preemption, shutdown) is that stop's state; any other error, a panic, or a
//!   failure of the scheduler while running it is [`TaskState::Failed`];
//! - a stop was requested and the closure reached no safe point within the grace period
//!   ([`SchedulerConfig::stop_grace`](crate::SchedulerConfig::stop_grace)): the stop's state,
//!   *detached* — the handle completes, while the closure's thread, memory and SM groups stay
//!   taken (and reported as such) until it returns.

use crate::error::{CancelReason, Error};
use crate::plan::{Grant, TaskId};
use crate::sm::GroupSet;
use crate::spec::ResolvedSpec;
use gpukit_core::OwnerId;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::Waker;

use std::time::{Duration, Instant};

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Waiting for resources.
    Queued,
    /// Admitted; waiting for evicted tasks to release memory, or for its streams.
    Starting,
    /// Its closure runs.
    Running,
    /// Its closure returned `Ok`.
    Succeeded,
    /// Its closure returned an error or panicked, or the scheduler failed to run it.
    Failed,
    /// Cancelled through its handle or by shutdown.
    Cancelled,
    /// Stopped at its timeout.
    TimedOut,
    /// Rejected at admission, or while queued because its partition shrank.
    Rejected,
    /// Still queued at its start-by deadline.
    Expired,
    /// Evicted under memory pressure.
    Preempted,
}

impl TaskState {
    /// Whether the task has its outcome.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            TaskState::Queued | TaskState::Starting | TaskState::Running
        )
    }

    /// The state's name (for metrics labels).
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Starting => "starting",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::TimedOut => "timed_out",
            TaskState::Rejected => "rejected",
            TaskState::Expired => "expired",
            TaskState::Preempted => "preempted",
        }
    }
}

/// Why a running task is asked to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    Cancel(CancelReason),
    Timeout(Duration),
    Preempt(String),
}

/// A task's stop request: the first one wins.
#[derive(Debug, Default)]
pub(crate) struct Stopper {
    flag: AtomicBool,
    why: Mutex<Option<(Stop, Instant)>>,
    /// A safe point reported the stop to the closure.
    seen: AtomicBool,
}

impl Stopper {
    /// Asks the task to stop; false when a stop was already asked.
    pub(crate) fn request(&self, stop: Stop) -> bool {
        let mut w = self.why.lock();
        if w.is_some() {
            return false;
        }
        *w = Some((stop, Instant::now()));
        self.flag.store(true, Ordering::Release);
        true
    }
    pub(crate) fn requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
    pub(crate) fn get(&self) -> Option<(Stop, Instant)> {
        self.why.lock().clone()
    }
    pub(crate) fn mark_seen(&self) {
        self.seen.store(true, Ordering::Release);
    }
    pub(crate) fn seen(&self) -> bool {
        self.seen.load(Ordering::Acquire)
    }
}

/// How a task's closure ended (the typed value, if any, is in the handle's slot).
pub(crate) enum Ended {
    Ok,
    Err(Error),
    Panicked(String),
    /// Evicted for memory, it returned `Ok` still holding `bytes` of device memory: its value
    /// was dropped to free them.
    Discarded {
        bytes: u64,
    },
}

pub(crate) struct Status {
    pub state: TaskState,
    pub grant: Option<Grant>,
    pub started: Option<Instant>,
    /// When the outcome was decided.
    pub resolved_at: Option<Instant>,
    /// When the closure returned and its resources were released (None while it runs).
    pub released_at: Option<Instant>,
    pub gpu_ms: Option<f64>,
    pub mem_peak: u64,
    pub error: Option<Error>,
    pub error_text: Option<String>,
    pub resolved: bool,
    pub taken: bool,
    /// Resolved while its closure still ran (a stop past its grace).
    pub detached: bool,
    /// Its closure returned, its GPU work did not end: its lanes are quarantined.
    pub quarantined: bool,
    pub waker: Option<Waker>,
    /// Completion callbacks ([`TaskHandle::on_complete`](crate::TaskHandle::on_complete)),
    /// run once by [`Task::notify`].
    pub callbacks: Vec<Callback>,
}

/// A completion callback: called once with the task's final state.
pub(crate) type Callback = Box<dyn FnOnce(TaskState) + Send + 'static>;

/// Runs `f(state)`, containing a panic; true when it panicked.
pub(crate) fn run_callback(f: Callback, state: TaskState) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || f(state))).is_err()
}

/// A task as the scheduler keeps it.
pub(crate) struct Task {
    pub id: TaskId,
    pub spec: ResolvedSpec,
    pub owner: OwnerId,
    pub submitted: Instant,
    pub stop: Stopper,
    pub status: Mutex<Status>,
    pub done: Condvar,
    /// Own and lent groups, published by the scheduler.
    pub usable: Mutex<(GroupSet, GroupSet)>,
    pub generation: AtomicU64,
    pub kernels: AtomicU64,
    pub throttles: AtomicU64,
    pub throttled_ns: AtomicU64,
    pub bytes: AtomicU64,
    /// SMs of the stream its last launch went to.
    pub sms_in_use: AtomicU32,
}

impl Task {
    pub(crate) fn new(id: TaskId, spec: ResolvedSpec, owner: OwnerId) -> Task {
        Task {
            id,
            spec,
            owner,
            submitted: Instant::now(),
            stop: Stopper::default(),
            status: Mutex::new(Status {
                state: TaskState::Queued,
                grant: None,
                started: None,
                resolved_at: None,
                released_at: None,
                gpu_ms: None,
                mem_peak: 0,
                error: None,
                error_text: None,
                resolved: false,
                taken: false,
                detached: false,
                quarantined: false,
                waker: None,
                callbacks: Vec::new(),
            }),
            done: Condvar::new(),
            usable: Mutex::new((GroupSet::EMPTY, GroupSet::EMPTY)),
            generation: AtomicU64::new(0),
            kernels: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            sms_in_use: AtomicU32::new(0),
        }
    }

    /// Sets a non-final state (Starting, Running) unless the task already has its outcome.
    pub(crate) fn set_state(&self, state: TaskState) {
        let mut s = self.status.lock();
        if !s.resolved {
            s.state = state;
            if state == TaskState::Running {
                s.started = Some(Instant::now());
            }
        }
    }

    /// Decides the task's outcome; false (and nothing changes) when it already has one.
    /// `detached`: the closure still runs. Waiters are told by [`notify`](Self::notify), which
    /// the caller runs once it holds no scheduler lock (a woken waiter submits again at once;
    /// a future's waker may run code).
    pub(crate) fn resolve(&self, state: TaskState, error: Option<Error>, detached: bool) -> bool {
        debug_assert!(state.is_final());
        let mut s = self.status.lock();
        if s.resolved {
            return false;
        }
        s.resolved = true;
        s.state = state;
        s.resolved_at = Some(Instant::now());
        s.error_text = error.as_ref().map(ToString::to_string);
        s.error = error;
        s.detached = detached;
        true
    }

    /// Wakes whoever waits for the outcome (blocking waiters and the future's waker) and runs
    /// the completion callbacks registered so far, each once, on this thread, each inside
    /// `catch_unwind`. Returns how many callbacks panicked (contained).
    pub(crate) fn notify(&self) -> u64 {
        let (waker, callbacks, state) = {
            let mut s = self.status.lock();
            (s.waker.take(), std::mem::take(&mut s.callbacks), s.state)
        };
        self.done.notify_all();
        let mut panics = 0;
        if let Some(w) = waker {
            // A waker is executor code: contained like a callback.
            panics += run_callback(Box::new(move |_| w.wake()), state) as u64;
        }
        for f in callbacks {
            panics += run_callback(f, state) as u64;
        }
        panics
    }

    /// The state and error a stop gives the task.
    pub(crate) fn stop_outcome(&self, stop: &Stop) -> (TaskState, Error) {
        let task = self.spec.name.clone();
        match stop {
            Stop::Cancel(reason) => (
                TaskState::Cancelled,
                Error::Cancelled {
                    task,
                    reason: *reason,
                },
            ),
            Stop::Timeout(timeout) => (
                TaskState::TimedOut,
                Error::TimedOut {
                    task,
                    timeout: *timeout,
                },
            ),
            Stop::Preempt(reason) => (
                TaskState::Preempted,
                Error::Preempted {
                    task,
                    qos: self.spec.qos.to_string(),
                    reason: reason.clone(),
                },
            ),
        }
    }

    /// A safe point: the stop's error if a stop was requested (and the closure is told).
    pub(crate) fn safe_point(&self) -> crate::Result<()> {
        if !self.stop.requested() {
            return Ok(());
        }
        match self.stop.get() {
            Some((stop, _)) => {
                self.stop.mark_seen();
                Err(self.stop_outcome(&stop).1)
            }
            None => Ok(()),
        }
    }

    /// The outcome of a closure that has returned (see the module docs).
    pub(crate) fn outcome_of(&self, ended: Ended) -> (TaskState, Option<Error>) {
        match ended {
            Ended::Ok => (TaskState::Succeeded, None),
            Ended::Panicked(message) => (
                TaskState::Failed,
                Some(Error::Panicked {
                    task: self.spec.name.clone(),
                    message,
                }),
            ),
            Ended::Discarded { bytes } => {
                let reason = match self.stop.get() {
                    Some((Stop::Preempt(r), _)) => r,
                    _ => "evicted under memory pressure".into(),
                };
                (
                    TaskState::Preempted,
                    Some(Error::Preempted {
                        task: self.spec.name.clone(),
                        qos: self.spec.qos.to_string(),
                        reason: format!(
                            "{reason}; it returned holding {bytes} bytes of device memory, so its \
                             result was dropped to give them back"
                        ),
                    }),
                )
            }
            Ended::Err(e) => match self.stop.get() {
                Some((stop, _)) if self.stop.seen() => {
                    let (state, err) = self.stop_outcome(&stop);
                    (state, Some(err))
                }
                _ => (TaskState::Failed, Some(e)),
            },
        }
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskSpec;

    fn task() -> Task {
        Task::new(7, TaskSpec::new("t").resolve().unwrap(), OwnerId::new("o"))
    }

    #[test]
    fn first_outcome_wins() {
        let t = task();
        assert!(t.resolve(TaskState::Succeeded, None, false));
        assert!(!t.resolve(TaskState::Failed, Some(Error::internal("x", "y")), false));
        let s = t.status.lock();
        assert_eq!((s.state, s.error.is_none()), (TaskState::Succeeded, true));
        drop(s);
        t.set_state(TaskState::Running);
        assert_eq!(t.status.lock().state, TaskState::Succeeded);
    }

    #[test]
    fn ok_after_a_stop_is_success_and_errors_are_the_stop_only_when_seen() {
        let t = task();
        assert!(t.stop.request(Stop::Cancel(CancelReason::Requested)));
        assert!(
            !t.stop.request(Stop::Timeout(Duration::from_secs(1))),
            "first wins"
        );
        assert_eq!(t.outcome_of(Ended::Ok).0, TaskState::Succeeded);
        // An unrelated error before any safe point saw the stop: that error, Failed.
        let (s, e) = t.outcome_of(Ended::Err(Error::NoDevice));
        assert!(matches!((s, e), (TaskState::Failed, Some(Error::NoDevice))));
        assert!(matches!(
            t.safe_point(),
            Err(Error::Cancelled {
                reason: CancelReason::Requested,
                ..
            })
        ));
        let (s, e) = t.outcome_of(Ended::Err(Error::NoDevice));
        assert!(matches!(
            (s, e),
            (TaskState::Cancelled, Some(Error::Cancelled { .. }))
        ));
        assert_eq!(
            t.outcome_of(Ended::Panicked("p".into())).0,
            TaskState::Failed
        );
    }

    #[test]
    fn stop_states() {
        let t = task();
        for (stop, state) in [
            (Stop::Cancel(CancelReason::Shutdown), TaskState::Cancelled),
            (Stop::Timeout(Duration::from_millis(3)), TaskState::TimedOut),
            (Stop::Preempt("r".into()), TaskState::Preempted),
        ] {
            assert_eq!(t.stop_outcome(&stop).0, state);
            assert!(state.is_final());
        }
        assert!(!TaskState::Starting.is_final());
    }
}
