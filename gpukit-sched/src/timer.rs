//! The timer thread: what expires ends on time, whatever else happens in the scheduler.
//!
//! - a queued task at its start-by deadline ends [`TaskState::Expired`]
//!   ([`Error::DeadlineExpired`](crate::Error::DeadlineExpired));
//! - a running task at its timeout is asked to stop ([`TaskState::TimedOut`]);
//! - a task asked to stop (cancelled, timed out, preempted, shut down) that has reached no
//!   safe point when the stop grace period ends is given its outcome anyway, *detached*.
//!
//! Each fires within a few milliseconds of its time (the thread sleeps until the earliest
//! one; submissions and stop requests wake it when they bring an earlier one). The timer
//! makes no driver call (quarantined work is polled by a watcher thread of its own), so a
//! driver call that blocks elsewhere does not keep a deadline from firing.

use crate::scheduler::Inner;
use crate::task::{Stop, TaskState};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// `d` from now, or `None` when that is past what the clock can represent: any duration is
/// accepted, and one that large never comes (no deadline, no timeout, no grace limit).
pub(crate) fn after(d: Duration) -> Option<Instant> {
    Instant::now().checked_add(d)
}

impl Inner {
    /// The timer thread's body: passes until the scheduler stops. A panic inside a pass (a
    /// bug) is contained and counted, and the next pass runs: no deadline, timeout or grace
    /// period is ever lost with the thread.
    pub(crate) fn timer_loop(&self) {
        loop {
            match catch_unwind(AssertUnwindSafe(|| self.timer_passes())) {
                Ok(()) => return,
                Err(_) => {
                    self.timer_panics
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // Whatever the pass had armed is recomputed from the state.
                    self.state.lock().timer_next = None;
                }
            }
        }
    }

    /// Runs timer passes until `timer_exit`.
    fn timer_passes(&self) {
        loop {
            let mut st = self.state.lock();
            if st.timer_exit {
                return;
            }
            let now = Instant::now();
            // Start-by deadlines of queued tasks.
            if st
                .planner
                .next_deadline()
                .is_some_and(|ns| ns <= self.now())
            {
                let ns = self.now();
                let events = st.planner.schedule(ns);
                self.apply_events(&mut st, events);
            }
            // Timeouts and grace periods of running tasks.
            let due: Vec<(u64, bool, bool)> = st
                .timers
                .iter()
                .map(|(&id, t)| {
                    (
                        id,
                        t.timeout_at.is_some_and(|at| at <= now),
                        t.grace_at.is_some_and(|at| at <= now),
                    )
                })
                .filter(|&(_, a, b)| a || b)
                .collect();
            for (id, timed_out, grace_over) in due {
                let Some(task) = st.live.get(&id).cloned() else {
                    st.timers.remove(&id);
                    continue;
                };
                if timed_out {
                    if let Some(t) = st.timers.get_mut(&id) {
                        t.timeout_at = None;
                    }
                    self.injected(crate::config::PanicPoint::Timer, &task);
                    if let Some(timeout) = task.spec.timeout {
                        self.request_stop(&mut st, &task, Stop::Timeout(timeout));
                    }
                }
                if grace_over {
                    if let Some(t) = st.timers.get_mut(&id) {
                        t.grace_at = None;
                    }
                    if let Some((stop, _)) = task.stop.get() {
                        let (state, e) = task.stop_outcome(&stop);
                        debug_assert!(state != TaskState::Succeeded);
                        self.conclude(&mut st, &task, state, Some(e), true);
                    }
                }
            }
            if !st.outbox.is_empty() || !st.notify.is_empty() || !st.dropped.is_empty() {
                self.release(st);
                continue;
            }
            st.timer_next = None;
            self.arm_timer(&mut st);
            let next = st
                .timer_next
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            self.timer_wake.wait_until(&mut st, next);
        }
    }
}
