//! What GPU start-up costs, step by step, and how little of it is paid up front.
//!
//! [`GpuBackend::start`](crate::gpu::GpuBackend::start) pays only what every offloaded call
//! needs: the CUDA driver, the context, cuBLAS (library and one handle) and one lane's streams.
//! cuSOLVER (its library load and its handle) waits for the first LAPACK call or an explicit
//! [`GpuBackend::load_solver`](crate::gpu::GpuBackend::load_solver); pinned staging and the
//! device arena wait for the first call that moves data (or a
//! [`presize`](crate::gpu::GpuBackend::presize)); kernels are warmed only for the routines the
//! caller names. Every step is timed into a [`StartupReport`] the dispatcher can log.
//!
//! Libraries are opened once: a presence probe that opens and closes a library (as cudarc's
//! `is_culib_present` does) makes cudarc open it a second time; `keep_loaded` opens it the
//! way cudarc will and keeps the handle, so cudarc's own open only takes a reference.

use std::ffi::CString;
use std::fmt;
use std::time::Duration;

/// One step of GPU start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Loading libcuda.
    DriverLibrary,
    /// `cuInit` and the device count.
    Init,
    /// Retaining device 0's primary context.
    Context,
    /// Loading libcublas (and libcublasLt with it).
    BlasLibrary,
    /// A lane's streams and events.
    Streams,
    /// A cuBLAS handle.
    BlasHandle,
    /// Loading libcusolver (first LAPACK call or [`crate::gpu::GpuBackend::load_solver`]).
    SolverLibrary,
    /// The first cuSOLVER handle.
    SolverHandle,
    /// Pinned staging and the device arena reserved ahead of calls.
    Presize,
    /// Loading the non-finite check kernels (PTX, JIT-compiled by the driver).
    CheckKernels,
    /// One warm-up call (its LAPACK name): loads the kernels the routine uses.
    WarmUp(String),
}

impl Step {
    /// A short name for logs.
    pub fn name(&self) -> String {
        match self {
            Step::DriverLibrary => "libcuda".into(),
            Step::Init => "cuInit".into(),
            Step::Context => "context".into(),
            Step::BlasLibrary => "libcublas".into(),
            Step::Streams => "streams".into(),
            Step::BlasHandle => "cublas-handle".into(),
            Step::SolverLibrary => "libcusolver".into(),
            Step::SolverHandle => "cusolver-handle".into(),
            Step::Presize => "presize".into(),
            Step::CheckKernels => "check-kernels".into(),
            Step::WarmUp(r) => format!("warm-{r}"),
        }
    }
}

/// The timed steps of GPU start-up, in the order they ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartupReport {
    /// Each step with its duration; `later` steps ran after [`crate::gpu::GpuBackend::start`]
    /// returned (inside a call, a warm-up or a presize).
    pub steps: Vec<(Step, Duration, bool)>,
    /// What the start could not do as asked (printed after the steps).
    pub notes: Vec<String>,
    started: bool,
}

impl StartupReport {
    /// Records a step.
    pub fn record(&mut self, step: Step, d: Duration) {
        self.steps.push((step, d, self.started));
    }

    /// Notes something the start could not do as asked.
    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// Marks the end of `start`: steps recorded from now on are `later`.
    pub fn mark_started(&mut self) {
        self.started = true;
    }

    /// Time of the steps `start` ran.
    pub fn start_time(&self) -> Duration {
        self.steps.iter().filter(|s| !s.2).map(|s| s.1).sum()
    }

    /// Time of the steps that ran later.
    pub fn later_time(&self) -> Duration {
        self.steps.iter().filter(|s| s.2).map(|s| s.1).sum()
    }

    /// The duration of a step (summed if it ran more than once).
    pub fn of(&self, step: &Step) -> Option<Duration> {
        let v: Vec<Duration> = self
            .steps
            .iter()
            .filter(|s| &s.0 == step)
            .map(|s| s.1)
            .collect();
        (!v.is_empty()).then(|| v.into_iter().sum())
    }
}

impl fmt::Display for StartupReport {
    /// `start 0.512s (libcuda 0.004, cuInit 0.120, ...); later 0.300s (libcusolver 0.180, ...)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |later: bool| {
            self.steps
                .iter()
                .filter(|s| s.2 == later)
                .map(|s| format!("{} {:.3}", s.0.name(), s.1.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(
            f,
            "start {:.3}s ({})",
            self.start_time().as_secs_f64(),
            part(false)
        )?;
        if self.steps.iter().any(|s| s.2) {
            write!(
                f,
                "; later {:.3}s ({})",
                self.later_time().as_secs_f64(),
                part(true)
            )?;
        }
        for n in &self.notes {
            write!(f, "; {n}")?;
        }
        Ok(())
    }
}

/// Opens a CUDA library under the first of cudarc's candidate names that loads, with the flags
/// cudarc uses (`RTLD_LAZY | RTLD_LOCAL`), and keeps it open for the life of the process, so
/// cudarc's own open of the same name is a reference count. Returns the name that loaded.
pub(crate) fn keep_loaded(lib: &str) -> Option<String> {
    for name in cudarc::get_lib_name_candidates(lib) {
        let Ok(c) = CString::new(name.clone()) else {
            continue;
        };
        // SAFETY: dlopen of a NUL-terminated name; the handle is deliberately never closed
        // (the library stays loaded for the process, as cudarc keeps its own handle).
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if !h.is_null() {
            return Some(name);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_splits_start_and_later_steps() {
        let ms = Duration::from_millis;
        let mut r = StartupReport::default();
        r.record(Step::DriverLibrary, ms(4));
        r.record(Step::Context, ms(200));
        r.mark_started();
        r.record(Step::SolverLibrary, ms(150));
        r.record(Step::WarmUp("dpotrf".into()), ms(20));
        r.record(Step::WarmUp("dpotrf".into()), ms(5));
        assert_eq!(r.start_time(), ms(204));
        assert_eq!(r.later_time(), ms(175));
        assert_eq!(r.of(&Step::WarmUp("dpotrf".into())), Some(ms(25)));
        assert_eq!(r.of(&Step::BlasHandle), None);
        let s = r.to_string();
        assert!(
            s.starts_with(
                "start 0.204s (libcuda 0.004, context 0.200); later 0.175s (libcusolver 0.150"
            ),
            "{s}"
        );
        let mut only = StartupReport::default();
        only.record(Step::Init, ms(1));
        assert!(!only.to_string().contains("later"));
    }

    #[test]
    fn a_missing_library_is_none_not_a_panic() {
        assert_eq!(keep_loaded("gpukit-no-such-library"), None);
    }
}
