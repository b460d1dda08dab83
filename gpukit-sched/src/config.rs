//! Scheduler settings.

use crate::bytes::ByteSize;
use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::time::Duration;

/// Scheduler settings.
///
/// ```
/// use std::time::Duration;
/// let c = gpukit_sched::SchedulerConfig::default()
///     .workers(4)
///     .memory_headroom("2GiB")
///     .stop_grace(Duration::from_millis(500));
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
    /// Jumps a queued task tolerates (see the crate docs: a starving task blocks later ones). Default 4.
    pub max_bypass: u32,
    /// Use green contexts when the GPU has them (false: the pacing fallback). Default true.
    pub green_contexts: bool,
    /// Fail [`Scheduler::new`](crate::Scheduler::new) instead of falling back to pacing when
    /// green contexts are asked for but cannot be used. Default false (the fallback, with the
    /// reason in [`Scheduler::mechanism`](crate::Scheduler::mechanism)).
    pub require_green_contexts: bool,
    /// SMs per group (default: the driver's minimum partition, 8 on Hopper). A size the
    /// driver does not allow is an error at start, not a silent fallback.
    pub group_size: Option<u32>,
    /// How long a worker that just finished a task polls for the next one before it sleeps
    /// (at most one worker polls at a time). Default 100 us; zero: never.
    pub worker_spin: Duration,
    /// How long a task asked to stop (cancelled, timed out, preempted, shut down) has to
    /// reach a safe point before its handle completes anyway (the task is then *detached*:
    /// its thread and resources stay taken until its closure returns). Also how long a
    /// starting task waits for evicted tasks to release memory. Default 1 s.
    pub stop_grace: Duration,
    /// How long dropping the scheduler lets running tasks finish before stopping them
    /// (see [`Scheduler::shutdown`](crate::Scheduler::shutdown)). Default 5 s.
    pub shutdown_timeout: Duration,
    /// Idle green-context lanes kept for reuse (creating one costs about 1 ms). Default 32.
    pub max_cached_lanes: usize,
    /// Fault injection: driver entry points to treat as missing (a simulation of an older
    /// driver, for tests and the bench's missing-entry-point row). Default: none.
    pub hide_entry_points: BTreeSet<String>,
    /// Fault injection: ignore the SMs the split leaves over, as on a GPU whose split has no
    /// remainder (for the test that BestEffort work stays off task SMs then). Default false.
    pub ignore_split_remainder: bool,
    /// Fault injection: a panic in the scheduler's own code for tasks of this name (for tests
    /// and the bench's failure rows: what a missing driver symbol does inside cudarc).
    /// Default: none.
    pub inject_panic: Option<(PanicPoint, String)>,
}

/// Where [`SchedulerConfig::inject_panic`] panics (fault injection for tests and benches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicPoint {
    /// After the task's streams are set up, before its closure runs.
    BeforeClosure,
    /// After its closure returned, where the task's GPU time is read.
    AfterClosure,
    /// On the timer thread, when the task's timeout fires (the stop it would request is
    /// lost; the timer thread goes on).
    Timer,
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
            require_green_contexts: false,
            group_size: None,
            worker_spin: Duration::from_micros(100),
            stop_grace: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(5),
            max_cached_lanes: 32,
            hide_entry_points: BTreeSet::new(),
            inject_panic: None,
            ignore_split_remainder: false,
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
    /// Requires green contexts (no fallback).
    pub fn require_green_contexts(mut self, on: bool) -> Self {
        self.require_green_contexts = on;
        self
    }
    /// Sets the SM group size.
    pub fn group_size(mut self, sms: u32) -> Self {
        self.group_size = Some(sms);
        self
    }
    /// Sets the stop grace period.
    pub fn stop_grace(mut self, d: Duration) -> Self {
        self.stop_grace = d;
        self
    }
    /// Sets the time `Drop` gives running tasks.
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = d;
        self
    }
    /// Sets the queue length.
    pub fn max_queue(mut self, n: usize) -> Self {
        self.max_queue = n;
        self
    }
    /// Sets how many idle lanes are kept.
    pub fn max_cached_lanes(mut self, n: usize) -> Self {
        self.max_cached_lanes = n;
        self
    }
    /// Treats these driver entry points as missing (fault injection: simulates an older
    /// driver).
    pub fn hide_entry_points<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Self {
        self.hide_entry_points = names.into_iter().map(Into::into).collect();
        self
    }

    /// Injects a panic into the scheduler's own code for tasks named `task` (fault injection).
    pub fn inject_panic(mut self, at: PanicPoint, task: impl Into<String>) -> Self {
        self.inject_panic = Some((at, task.into()));
        self
    }

    /// Checks the values that need no device.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.workers == 0 {
            return Err(Error::invalid("workers", 0, "need at least one worker"));
        }
        if self.group_size == Some(0) {
            return Err(Error::invalid(
                "SM group size",
                0,
                "must be positive (omit it for the driver's minimum partition)",
            ));
        }
        if self.require_green_contexts && !self.green_contexts {
            return Err(Error::invalid(
                "require_green_contexts",
                true,
                "contradicts green_contexts(false)",
            ));
        }
        self.memory_headroom.resolve()?;
        if let Some(c) = &self.memory_capacity {
            c.resolve()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_errors() {
        assert!(SchedulerConfig::default().validate().is_ok());
        assert!(SchedulerConfig::default().workers(0).validate().is_err());
        assert!(SchedulerConfig::default().group_size(0).validate().is_err());
        assert!(SchedulerConfig::default()
            .memory_headroom("lots")
            .validate()
            .is_err());
        assert!(SchedulerConfig::default()
            .green_contexts(false)
            .require_green_contexts(true)
            .validate()
            .is_err());
    }
}
