//! Where one GPU call's fixed cost goes: host time per phase, and counts of the operations
//! that cost a round trip or a launch.
//!
//! Off by default ([`crate::gpu::GpuBackend::set_phase_timing`]): a call then reads no clock.
//! On, a lane's [`Clock`] attributes the host time between its marks to the phase that ended
//! there; time not claimed by a phase (library launches, the call's own arithmetic) is
//! [`Phase::Launch`]. The totals over calls are read with
//! [`crate::gpu::GpuBackend::take_phase_times`] (the `fixed_cost` example prints them).

use std::fmt;
use std::time::Instant;

/// A phase of one GPU call, as the host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Binding the context, taking a lane and its library handles, giving them back.
    Lane,
    /// cuSOLVER workspace sizes (queries, or the lane's cache of them).
    Workspace,
    /// Device arena and pinned staging for the call.
    Alloc,
    /// Packing the caller's inputs into pinned memory and queueing the copies to the device.
    CopyIn,
    /// Queueing the non-finite checks (and their guards).
    Check,
    /// Queueing the library routines, and every other host step of the call.
    Launch,
    /// Waiting for the device: the call's synchronisations (this includes the device's own
    /// time for the copies and the routines).
    Sync,
    /// Writing the results into the caller's memory (and the copies of results too large for
    /// one staged copy).
    CopyOut,
}

impl Phase {
    /// Every phase, in call order.
    pub const ALL: [Phase; 8] = [
        Phase::Lane,
        Phase::Workspace,
        Phase::Alloc,
        Phase::CopyIn,
        Phase::Check,
        Phase::Launch,
        Phase::Sync,
        Phase::CopyOut,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Lane => "lane",
            Phase::Workspace => "workspace",
            Phase::Alloc => "alloc",
            Phase::CopyIn => "copy-in",
            Phase::Check => "check",
            Phase::Launch => "launch",
            Phase::Sync => "sync",
            Phase::CopyOut => "copy-out",
        }
    }
}

/// Totals over calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Calls counted.
    pub calls: u64,
    /// Nanoseconds per phase ([`Phase::ALL`] order).
    pub ns: [u64; 8],
    /// Synchronisations with the device (stream or event waits).
    pub syncs: u64,
    /// Host-to-device copies queued.
    pub copies_in: u64,
    /// Device-to-host copies queued.
    pub copies_out: u64,
    /// Kernels the backend launched itself (checks, guards).
    pub own_launches: u64,
    /// Workspace sizes asked of cuSOLVER (not found in the lane's cache).
    pub workspace_queries: u64,
    /// Device allocations from the allocator (calls too large for the lane's arena).
    pub allocations: u64,
}

impl PhaseTimes {
    /// Mean microseconds per call in `p`.
    pub fn per_call_us(&self, p: Phase) -> f64 {
        let i = Phase::ALL.iter().position(|&q| q == p).unwrap_or(0);
        self.ns[i] as f64 / 1e3 / self.calls.max(1) as f64
    }

    /// Mean microseconds per call over every phase.
    pub fn total_us(&self) -> f64 {
        self.ns.iter().sum::<u64>() as f64 / 1e3 / self.calls.max(1) as f64
    }

    /// Mean count per call of a counter.
    pub fn per_call(&self, count: u64) -> f64 {
        count as f64 / self.calls.max(1) as f64
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &PhaseTimes) {
        self.calls += other.calls;
        for (a, b) in self.ns.iter_mut().zip(other.ns) {
            *a += b;
        }
        self.syncs += other.syncs;
        self.copies_in += other.copies_in;
        self.copies_out += other.copies_out;
        self.own_launches += other.own_launches;
        self.workspace_queries += other.workspace_queries;
        self.allocations += other.allocations;
    }
}

impl fmt::Display for PhaseTimes {
    /// One line: microseconds per call and phase, then the counts per call.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in Phase::ALL {
            write!(f, "{}={:.1} ", p.name(), self.per_call_us(p))?;
        }
        write!(
            f,
            "| total={:.1}us syncs={:.2} copies-in={:.2} copies-out={:.2} own-launches={:.2} ws-queries={:.2} allocs={:.2}",
            self.total_us(),
            self.per_call(self.syncs),
            self.per_call(self.copies_in),
            self.per_call(self.copies_out),
            self.per_call(self.own_launches),
            self.per_call(self.workspace_queries),
            self.per_call(self.allocations),
        )
    }
}

/// One call's clock: the counts always, the times when timing is on.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    last: Option<Instant>,
    pub(crate) t: PhaseTimes,
}

impl Clock {
    /// A clock for one call; `timed` reads the time at every mark.
    pub(crate) fn new(timed: bool) -> Clock {
        Clock {
            last: timed.then(Instant::now),
            t: PhaseTimes {
                calls: 1,
                ..PhaseTimes::default()
            },
        }
    }

    /// Attributes the time since the last mark to `p`.
    pub(crate) fn mark(&mut self, p: Phase) {
        if let Some(last) = self.last {
            let now = Instant::now();
            let i = Phase::ALL.iter().position(|&q| q == p).unwrap_or(0);
            self.t.ns[i] += now.duration_since(last).as_nanos() as u64;
            self.last = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_attribute_time_to_the_phase_that_ended() {
        let mut c = Clock::new(true);
        std::thread::sleep(std::time::Duration::from_millis(3));
        c.mark(Phase::Sync);
        c.mark(Phase::CopyOut);
        let sync = c.t.per_call_us(Phase::Sync);
        assert!(sync >= 3000.0, "{sync}");
        assert!(c.t.per_call_us(Phase::CopyOut) < sync);
        assert_eq!(c.t.per_call_us(Phase::Lane), 0.0);
        // untimed: counts only, no clock read
        let mut u = Clock::new(false);
        u.mark(Phase::Sync);
        u.t.syncs += 1;
        assert_eq!(u.t.ns, [0; 8]);
        let mut all = PhaseTimes::default();
        all.add(&c.t);
        all.add(&u.t);
        assert_eq!((all.calls, all.syncs), (2, 1));
        assert!((all.total_us() - c.t.total_us() / 2.0).abs() < 1e-6);
        let line = all.to_string();
        assert!(
            line.contains("sync=") && line.contains("syncs=0.50"),
            "{line}"
        );
    }
}
