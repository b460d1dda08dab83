//! Pacing: keeping a task's measured GPU time within a fraction (its *duty*) of wall time.
//!
//! Used where SM groups cannot confine a task: in the fallback without green contexts (the
//! duty is the share its own and lent virtual groups stand for, so a task alone on an idle GPU
//! is lent everything and not paced at all), and for a limit below one SM group (paced within
//! its one group).
//!
//! GPU time is measured on the task's home stream with events. A kernel launched through
//! [`TaskContext::launch`](crate::TaskContext::launch) is bracketed by two events and charged
//! exactly. In the fallback, paced kernels of all tasks are also *serialized* by a device-wide
//! token (a launch waits until the previous paced kernel has finished): two kernels that share
//! the GPU would each measure the time they overlapped, and a task would be charged for time
//! its neighbour used. Other work on the home stream (gpukit-core operations, cuBLAS) is charged
//! at the task's next pacing point ([`check`](crate::TaskContext::check),
//! [`synchronize`](crate::TaskContext::synchronize), [`cublas`](crate::TaskContext::cublas))
//! when the stream was still busy with it there (then the interval since the previous event has
//! no idle gap); work that starts on an idle stream and is done before the next pacing point is
//! not seen. A pacing point whose task is over budget waits (in slices, so a stop request still
//! ends it promptly) until its time is back within `duty x wall time + 2 ms`; the accounting
//! window halves every second so credit from an idle spell does not pile up.

use std::time::{Duration, Instant};

/// Burst allowed above the budget before a pacing point waits (ms).
const BURST_MS: f64 = 2.0;
/// The window halves once it is this long (ms).
const WINDOW_MS: f64 = 1000.0;
/// Intervals pending (not complete) before a pacing point waits for the oldest.
const MAX_PENDING: usize = 32;

/// The budget of one paced task: pure arithmetic over measured GPU time and wall time.
#[derive(Debug, Clone)]
pub struct Budget {
    duty: f64,
    start: Instant,
    busy_ms: f64,
}

impl Budget {
    /// A budget of `duty` (fraction of wall time, clamped to (0, 1]) from `now`.
    pub fn new(duty: f64, now: Instant) -> Self {
        Budget {
            duty: clamp(duty),
            start: now,
            busy_ms: 0.0,
        }
    }

    /// The duty.
    #[cfg(test)]
    pub fn duty(&self) -> f64 {
        self.duty
    }

    /// Whether the duty leaves nothing to pace (a task lent the whole GPU).
    pub fn unlimited(&self) -> bool {
        self.duty >= 0.999
    }

    /// Changes the duty from `now` on (the time measured so far is not charged again).
    pub fn set_duty(&mut self, duty: f64, now: Instant) {
        let duty = clamp(duty);
        if (duty - self.duty).abs() > 1e-9 {
            self.duty = duty;
            self.start = now;
            self.busy_ms = 0.0;
        }
    }

    /// Charges `ms` of measured GPU time.
    pub fn charge(&mut self, ms: f64, now: Instant) {
        if ms.is_finite() && ms > 0.0 {
            self.busy_ms += ms;
        }
        let wall = now.saturating_duration_since(self.start).as_secs_f64() * 1e3;
        if wall > WINDOW_MS {
            self.busy_ms *= 0.5;
            self.start = now - Duration::from_secs_f64(wall * 0.5 / 1e3);
        }
    }

    /// How long the next pacing point must wait at `now` (zero when within budget).
    pub fn wait(&self, now: Instant) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        let wall = now.saturating_duration_since(self.start).as_secs_f64() * 1e3;
        let allowed = self.duty * wall + BURST_MS;
        if self.busy_ms <= allowed {
            return Duration::ZERO;
        }
        let need = (self.busy_ms - BURST_MS) / self.duty;
        Duration::from_secs_f64(((need - wall).max(0.0)) / 1e3)
    }
}

fn clamp(duty: f64) -> f64 {
    if duty.is_nan() {
        1.0
    } else {
        duty.clamp(1e-3, 1.0)
    }
}

/// Serializes paced kernels on a device: holds the end event of the last one, and whose it
/// is. A launch waits for it by polling (a stop request ends the wait); a task whose work is
/// quarantined (its kernel does not end) gives the token up ([`abandon`](Self::abandon)), so
/// no other task waits for that kernel.
#[derive(Default)]
pub(crate) struct Token {
    last: parking_lot::Mutex<Option<(crate::plan::TaskId, gpukit_core::Event)>>,
}

impl Token {
    /// Forgets the last paced kernel if it is `task`'s.
    pub(crate) fn abandon(&self, task: crate::plan::TaskId) {
        let mut last = self.last.lock();
        if last.as_ref().is_some_and(|(t, _)| *t == task) {
            *last = None;
        }
    }
}

/// Events of a task's pacing points, harvested into its [`Budget`].
pub(crate) struct Pacer {
    pub budget: Budget,
    /// Intervals to charge once complete.
    pairs: std::collections::VecDeque<(gpukit_core::Event, gpukit_core::Event)>,
    /// The last event recorded on the home stream.
    last: Option<gpukit_core::Event>,
    /// Kernels go through the device's token (the fallback without green contexts).
    serialize: bool,
}

impl Pacer {
    pub(crate) fn new(duty: f64, serialize: bool) -> Self {
        Pacer {
            budget: Budget::new(duty, Instant::now()),
            pairs: std::collections::VecDeque::new(),
            last: None,
            serialize,
        }
    }

    /// Whether the budget leaves anything to pace now.
    pub(crate) fn active(&self) -> bool {
        !self.budget.unlimited()
    }

    /// Charges every completed interval; with [`MAX_PENDING`] intervals pending, first waits
    /// for the oldest (a task cannot run far ahead of what it has been charged). The wait
    /// polls and is a safe point of `task`: a stop ends it, even when a kernel never ends.
    pub(crate) fn harvest(
        &mut self,
        entry: &crate::entry::EntryPoints,
        task: &crate::task::Task,
    ) -> crate::Result<()> {
        if self.pairs.len() >= MAX_PENDING {
            if let Some((_, b)) = self.pairs.front() {
                crate::context::wait_events(std::slice::from_ref(b), || {
                    task.safe_point().map(|()| false)
                })?;
            }
        }
        while let Some((a, b)) = self.pairs.front() {
            if !b.is_complete()? {
                break;
            }
            let ms = entry.elapsed_ms(a, b)? as f64;
            self.budget.charge(ms, Instant::now());
            self.pairs.pop_front();
        }
        Ok(())
    }

    /// A pacing point without a launch: charges the interval since the last event when the
    /// stream was still busy with it (no idle gap in it), and records a new event.
    pub(crate) fn mark(&mut self, stream: &gpukit_core::Stream) -> crate::Result<()> {
        let busy = match &self.last {
            Some(e) => !e.is_complete()?,
            None => false,
        };
        let m = stream.record()?;
        if busy {
            if let Some(prev) = self.last.take() {
                self.pairs.push_back((prev, m.clone()));
            }
        }
        self.last = Some(m);
        Ok(())
    }

    /// Runs `launch` bracketed by events (and, serialized, after the previous paced kernel of
    /// any task has finished: polled, so that a stop request of `task` ends the wait, and a
    /// kernel that never ends stops being waited for once its task is quarantined).
    pub(crate) fn launch(
        &mut self,
        stream: &gpukit_core::Stream,
        token: &Token,
        task: &crate::task::Task,
        launch: impl FnOnce() -> crate::Result<()>,
    ) -> crate::Result<()> {
        let mut held = if self.serialize {
            let mut poll = crate::context::Backoff::new();
            loop {
                let mut t = token.last.lock();
                let free = match &*t {
                    None => true,
                    Some((_, prev)) => prev.is_complete()?,
                };
                if free {
                    *t = None;
                    break Some(t);
                }
                drop(t);
                task.safe_point()?;
                poll.pause();
            }
        } else {
            None
        };
        let begin = stream.record()?;
        // Work queued since the last event is charged when the stream is still busy with it.
        if let Some(prev) = self.last.take() {
            if !prev.is_complete()? {
                self.pairs.push_back((prev, begin.clone()));
            }
        }
        launch()?;
        let end = stream.record()?;
        if let Some(t) = held.as_mut() {
            **t = Some((task.id, end.clone()));
        }
        drop(held);
        self.pairs.push_back((begin, end.clone()));
        self.last = Some(end);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_duty_waits_for_four_times_its_busy_time() {
        let t0 = Instant::now();
        let mut b = Budget::new(0.25, t0);
        b.charge(52.0, t0 + Duration::from_millis(100));
        // 52 ms busy at a quarter duty needs (52 - 2) / 0.25 = 200 ms of wall time.
        let w = b.wait(t0 + Duration::from_millis(100));
        assert!((w.as_secs_f64() * 1e3 - 100.0).abs() < 1e-6);
        assert_eq!(b.wait(t0 + Duration::from_millis(200)), Duration::ZERO);
    }

    #[test]
    fn duty_changes_start_a_new_window() {
        let t0 = Instant::now();
        let mut b = Budget::new(1.0, t0);
        assert!(b.unlimited());
        b.charge(500.0, t0 + Duration::from_millis(500));
        assert_eq!(b.wait(t0 + Duration::from_millis(500)), Duration::ZERO);
        // Lent groups taken back: a quarter from now on, nothing owed for the past.
        b.set_duty(0.25, t0 + Duration::from_millis(500));
        assert_eq!(b.wait(t0 + Duration::from_millis(500)), Duration::ZERO);
        b.charge(10.0, t0 + Duration::from_millis(510));
        let w = b.wait(t0 + Duration::from_millis(510));
        assert!((w.as_secs_f64() * 1e3 - 22.0).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn long_runs_converge_to_the_duty() {
        // A task that always has work: each step it runs 1 ms of GPU time, then waits as told.
        for duty in [0.1, 0.25, 0.5, 0.9] {
            let t0 = Instant::now();
            let mut b = Budget::new(duty, t0);
            let mut now = t0;
            let mut busy = 0.0;
            while now - t0 < Duration::from_secs(20) {
                now += b.wait(now);
                now += Duration::from_millis(1);
                b.charge(1.0, now);
                busy += 1.0;
            }
            let got = busy / ((now - t0).as_secs_f64() * 1e3);
            // Within 5 %: the 2 ms burst allowance per (halving) one-second window.
            assert!((got - duty).abs() < 0.05 * duty, "duty {duty}: {got}");
        }
    }

    #[test]
    fn nonsense_duties_are_clamped() {
        let t = Instant::now();
        assert_eq!(Budget::new(f64::NAN, t).duty(), 1.0);
        assert_eq!(Budget::new(0.0, t).duty(), 1e-3);
        assert_eq!(Budget::new(7.0, t).duty(), 1.0);
    }
}
