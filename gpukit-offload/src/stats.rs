//! Per-routine statistics: calls, calls offloaded, calls kept on the CPU with the reason, time
//! spent in timed calls, predicted and measured time saved. Lock-free counters.

use crate::ops::{Precision, Routine};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Why a call ran where it ran. The `Fallback*` reasons mean the GPU path was tried and failed,
/// and the CPU ran the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Too small for the GPU ever to pay (the shim's fast path; not timed).
    BelowThreshold,
    /// The model predicts the CPU is faster at this level.
    CpuFaster,
    /// The GPU would win, but the savings missed so far do not yet pay for starting CUDA.
    StartupNotPaid,
    /// The GPU backend is being started in the background.
    GpuStarting,
    /// No usable GPU (no driver, no device, a library missing, or start-up failed).
    NoGpu,
    /// Offloading is disabled (`GPUKIT_OFFLOAD_GPU=off` or the API).
    Disabled,
    /// The GPU path does not support this call (job, shape or size).
    Unsupported,
    /// Invalid arguments: left to the CPU library, which reports them its own way.
    InvalidArgs,
    /// A periodic CPU re-check of a GPU-bound call.
    Recheck,
    /// Called from inside another intercepted call that runs on the CPU.
    Nested,
    /// A LAPACK workspace-size query (`lwork = -1`).
    WorkspaceQuery,
    /// Empty call (a zero dimension).
    Empty,
    /// The GPU ran out of memory; the CPU ran the call.
    FallbackOutOfMemory,
    /// A CUDA / cuBLAS / cuSOLVER error; the CPU ran the call.
    FallbackError,
    /// The GPU solver returned `info != 0`; the CPU ran the call.
    FallbackInfo,
    /// A failure injected for testing (`GPUKIT_OFFLOAD_INJECT_FAILURE`); the CPU ran the call.
    FallbackInjected,
    /// An operand (or a GPU result) held NaN or infinity; the CPU library ran the call, so the
    /// caller gets LAPACK's own outcome for such data.
    FallbackNonFinite,
    /// The call's CPU library has no calibrated curve and nothing was measured for this kind
    /// yet: it runs on the CPU, timed, and the time is learned.
    CpuUnmeasured,
    /// The model has no GPU curve for this kind (not calibrated).
    NoModel,
    /// This process is a `fork()` child of a process that had loaded the CUDA driver: CUDA
    /// cannot be used in such a child, so its calls run on the CPU.
    Forked,
    /// The caller's LAPACK workspace (`lwork`, `lrwork`, `liwork`) is smaller than its library's
    /// optimum: the library runs the call, and reports an undersized one as LAPACK does.
    WorkspaceShort,
    /// The integer width of the library behind an unsuffixed symbol could not be determined
    /// (no probe symbol): the call is passed through untouched.
    IntWidthUnknown,
}

impl Reason {
    /// Every reason, in counter order.
    pub const ALL: [Reason; 22] = [
        Reason::BelowThreshold,
        Reason::CpuFaster,
        Reason::StartupNotPaid,
        Reason::GpuStarting,
        Reason::NoGpu,
        Reason::Disabled,
        Reason::Unsupported,
        Reason::InvalidArgs,
        Reason::Recheck,
        Reason::Nested,
        Reason::WorkspaceQuery,
        Reason::Empty,
        Reason::FallbackOutOfMemory,
        Reason::FallbackError,
        Reason::FallbackInfo,
        Reason::FallbackInjected,
        Reason::FallbackNonFinite,
        Reason::CpuUnmeasured,
        Reason::NoModel,
        Reason::Forked,
        Reason::WorkspaceShort,
        Reason::IntWidthUnknown,
    ];

    /// A short kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BelowThreshold => "small",
            Reason::CpuFaster => "cpu-faster",
            Reason::StartupNotPaid => "startup-not-paid",
            Reason::GpuStarting => "gpu-starting",
            Reason::NoGpu => "no-gpu",
            Reason::Disabled => "disabled",
            Reason::Unsupported => "unsupported",
            Reason::InvalidArgs => "invalid-args",
            Reason::Recheck => "recheck",
            Reason::Nested => "nested",
            Reason::WorkspaceQuery => "workspace-query",
            Reason::Empty => "empty",
            Reason::FallbackOutOfMemory => "fallback-oom",
            Reason::FallbackError => "fallback-error",
            Reason::FallbackInfo => "fallback-info",
            Reason::FallbackInjected => "fallback-injected",
            Reason::FallbackNonFinite => "fallback-nonfinite",
            Reason::CpuUnmeasured => "cpu-unmeasured",
            Reason::NoModel => "no-model",
            Reason::Forked => "forked",
            Reason::WorkspaceShort => "workspace-short",
            Reason::IntWidthUnknown => "int-width-unknown",
        }
    }

    fn index(self) -> usize {
        Reason::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

const NREASON: usize = Reason::ALL.len();
/// Slots: routine x precision.
pub(crate) const NSLOT: usize = Routine::ALL.len() * 4;

/// Slot index of a routine in a precision.
#[inline(always)]
pub(crate) fn slot(r: Routine, p: Precision) -> usize {
    r.index() * 4 + p.index()
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    gpu: AtomicU64,
    /// Calls the GPU lost while copying results out (reported as errors, never re-run).
    lost: AtomicU64,
    reasons: [AtomicU64; NREASON],
    time_ns: AtomicU64,
    gpu_time_ns: AtomicU64,
    /// Saved against a measured CPU time of the same shape.
    meas_saved_ns: AtomicI64,
    meas_calls: AtomicU64,
    /// Saved against the model's CPU prediction (no measurement of that shape).
    pred_saved_ns: AtomicI64,
}

/// The counters of one dispatcher.
pub struct Stats {
    slots: Vec<Counters>,
    /// Fast-path (small) calls per slot: a plain load + store, not a locked read-modify-write,
    /// to keep the fast path near 1 ns. Under concurrent small calls to the *same* routine from
    /// several threads a few of these counts can be lost; every other counter is exact.
    small: [AtomicU64; NSLOT],
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            slots: (0..NSLOT).map(|_| Counters::default()).collect(),
            small: [const { AtomicU64::new(0) }; NSLOT],
        }
    }
}

fn ns(s: f64) -> i64 {
    (s * 1e9).round() as i64
}

impl Stats {
    /// Sets every counter to zero (a forked child starts its own counts).
    pub fn reset(&self) {
        for c in &self.slots {
            c.calls.store(0, Relaxed);
            c.gpu.store(0, Relaxed);
            c.lost.store(0, Relaxed);
            for r in &c.reasons {
                r.store(0, Relaxed);
            }
            c.time_ns.store(0, Relaxed);
            c.gpu_time_ns.store(0, Relaxed);
            c.pred_saved_ns.store(0, Relaxed);
            c.meas_saved_ns.store(0, Relaxed);
            c.meas_calls.store(0, Relaxed);
        }
        for c in &self.small {
            c.store(0, Relaxed);
        }
    }

    /// Counts a call that the fast path kept on the CPU (one relaxed increment).
    #[inline(always)]
    pub fn count_small(&self, slot: usize) {
        if let Some(c) = self.small.get(slot) {
            c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }

    /// Records a call that ran on the CPU.
    pub fn record_cpu(&self, slot: usize, reason: Reason, seconds: Option<f64>) {
        let c = &self.slots[slot];
        c.calls.fetch_add(1, Relaxed);
        c.reasons[reason.index()].fetch_add(1, Relaxed);
        if let Some(s) = seconds {
            c.time_ns.fetch_add(ns(s).max(0) as u64, Relaxed);
        }
    }

    /// Records a call the GPU lost while its results were copied out: reported to the caller
    /// as an error (the caller's in-place operands are partly overwritten), run on neither
    /// backend to completion, never re-run. Its time counts in `timed_s`.
    pub fn record_lost(&self, slot: usize, seconds: f64) {
        let c = &self.slots[slot];
        c.calls.fetch_add(1, Relaxed);
        c.lost.fetch_add(1, Relaxed);
        c.time_ns.fetch_add(ns(seconds).max(0) as u64, Relaxed);
    }

    /// Records a call that ran on the GPU: its time and the CPU time it replaced, `measured`
    /// when that CPU time was measured on the same library and shape, else the model's
    /// prediction.
    pub fn record_gpu(&self, slot: usize, seconds: f64, cpu_seconds: f64, measured: bool) {
        let c = &self.slots[slot];
        c.calls.fetch_add(1, Relaxed);
        c.gpu.fetch_add(1, Relaxed);
        c.time_ns.fetch_add(ns(seconds).max(0) as u64, Relaxed);
        c.gpu_time_ns.fetch_add(ns(seconds).max(0) as u64, Relaxed);
        if measured {
            c.meas_saved_ns
                .fetch_add(ns(cpu_seconds - seconds), Relaxed);
            c.meas_calls.fetch_add(1, Relaxed);
        } else {
            c.pred_saved_ns
                .fetch_add(ns(cpu_seconds - seconds), Relaxed);
        }
    }

    /// A copy of the counters, routines with no calls left out.
    pub fn snapshot(&self) -> StatsSnapshot {
        let mut rows = Vec::new();
        for r in Routine::ALL {
            for p in Precision::ALL {
                let c = &self.slots[slot(r, p)];
                let small = self.small[slot(r, p)].load(Relaxed);
                let calls = c.calls.load(Relaxed) + small;
                if calls == 0 {
                    continue;
                }
                let gpu = c.gpu.load(Relaxed);
                let lost = c.lost.load(Relaxed);
                let reasons = Reason::ALL
                    .iter()
                    .zip(c.reasons.iter())
                    .map(|(r, n)| {
                        (
                            *r,
                            n.load(Relaxed)
                                + if *r == Reason::BelowThreshold {
                                    small
                                } else {
                                    0
                                },
                        )
                    })
                    .filter(|(_, n)| *n > 0)
                    .collect();
                rows.push(RoutineStats {
                    name: r.name(p),
                    routine: r,
                    precision: p,
                    calls,
                    gpu,
                    lost,
                    cpu: calls.saturating_sub(gpu).saturating_sub(lost),
                    reasons,
                    timed_s: c.time_ns.load(Relaxed) as f64 * 1e-9,
                    gpu_s: c.gpu_time_ns.load(Relaxed) as f64 * 1e-9,
                    predicted_saved_s: c.pred_saved_ns.load(Relaxed) as f64 * 1e-9,
                    measured_saved_s: c.meas_saved_ns.load(Relaxed) as f64 * 1e-9,
                    measured_calls: c.meas_calls.load(Relaxed),
                });
            }
        }
        StatsSnapshot { rows }
    }
}

/// Statistics of one routine in one precision.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutineStats {
    /// LAPACK name (`dgemm`).
    pub name: String,
    /// Routine.
    pub routine: Routine,
    /// Precision.
    pub precision: Precision,
    /// Calls seen.
    pub calls: u64,
    /// Calls run on the GPU.
    pub gpu: u64,
    /// Calls the GPU lost while copying their results out (each reported to its caller as an
    /// error, as LAPACK reports one, and never re-run).
    pub lost: u64,
    /// Calls run on the CPU.
    pub cpu: u64,
    /// CPU calls by reason (non-zero only).
    pub reasons: Vec<(Reason, u64)>,
    /// Seconds spent in timed calls (every call above the fast-path threshold), both backends.
    pub timed_s: f64,
    /// Of `timed_s`, seconds in calls run on the GPU.
    pub gpu_s: f64,
    /// Over GPU calls whose CPU time was not measured: the model's CPU prediction (learned
    /// corrections applied) minus the measured GPU time.
    pub predicted_saved_s: f64,
    /// Over GPU calls whose CPU time was measured on the same library and shape (a CPU run or
    /// re-check of this process, or a measurement kept in the profile): that CPU time minus the
    /// measured GPU time.
    pub measured_saved_s: f64,
    /// GPU calls behind `measured_saved_s`.
    pub measured_calls: u64,
}

/// Statistics of all routines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatsSnapshot {
    /// One row per routine and precision that was called.
    pub rows: Vec<RoutineStats>,
}

impl StatsSnapshot {
    /// The row of a routine name (`dgemm`).
    pub fn get(&self, name: &str) -> Option<&RoutineStats> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// Calls of every routine kept on the CPU for `reason`.
    pub fn reason_count(&self, reason: Reason) -> u64 {
        self.rows
            .iter()
            .flat_map(|r| r.reasons.iter())
            .filter(|(x, _)| *x == reason)
            .map(|(_, n)| n)
            .sum()
    }

    /// The exit summary: one line per routine called,
    /// `gpukit-offload: dgemm calls=12 gpu=3 cpu=9 saved=1.20s predicted-saved=0.40s timed=3.10s reasons=small:8,cpu-faster:1`.
    /// `saved` is measured (GPU calls whose CPU time was measured on the same library and
    /// shape), `predicted-saved` the model's figure for the others.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for r in &self.rows {
            let _ = write!(
                s,
                "gpukit-offload: {} calls={} gpu={} cpu={} saved={:.2}s predicted-saved={:.2}s timed={:.2}s",
                r.name, r.calls, r.gpu, r.cpu, r.measured_saved_s, r.predicted_saved_s, r.timed_s
            );
            if r.lost > 0 {
                let _ = write!(s, " lost={}", r.lost);
            }
            if !r.reasons.is_empty() {
                let reasons: Vec<String> = r
                    .reasons
                    .iter()
                    .map(|(k, n)| format!("{}:{n}", k.as_str()))
                    .collect();
                let _ = write!(s, " reasons={}", reasons.join(","));
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_summary() {
        let st = Stats::default();
        let s = slot(Routine::Gemm, Precision::D);
        for _ in 0..9 {
            st.count_small(s);
        }
        st.record_cpu(s, Reason::CpuFaster, Some(0.5));
        st.record_gpu(s, 0.2, 1.4, true);
        st.record_gpu(s, 0.2, 1.0, false);
        let snap = st.snapshot();
        let r = snap.get("dgemm").unwrap();
        assert_eq!((r.calls, r.gpu, r.cpu), (12, 2, 10));
        assert!((r.measured_saved_s - 1.2).abs() < 1e-9);
        assert!((r.predicted_saved_s - 0.8).abs() < 1e-9);
        assert_eq!(r.measured_calls, 1);
        assert!((r.timed_s - 0.9).abs() < 1e-9);
        let line = snap.summary();
        assert!(
            line.starts_with(
                "gpukit-offload: dgemm calls=12 gpu=2 cpu=10 saved=1.20s predicted-saved=0.80s"
            ),
            "{line}"
        );
        assert!(line.contains("reasons=small:9,cpu-faster:1"), "{line}");
        assert!(snap.get("sgemm").is_none());
        assert!(!line.contains("lost="), "{line}");
        // A lost call: counted, neither GPU nor CPU, named in the summary.
        let p = slot(Routine::Potrf, Precision::D);
        st.record_lost(p, 0.25);
        let snap = st.snapshot();
        let r = snap.get("dpotrf").unwrap();
        assert_eq!((r.calls, r.gpu, r.lost, r.cpu), (1, 0, 1, 0));
        assert!((r.timed_s - 0.25).abs() < 1e-9);
        assert!(r.reasons.is_empty());
        assert!(snap.summary().contains("dpotrf calls=1 gpu=0 cpu=0"));
        assert!(snap.summary().contains(" lost=1"));
        st.reset();
        assert!(st.snapshot().rows.is_empty());
    }
}
