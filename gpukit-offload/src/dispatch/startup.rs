//! The GPU start-up state machine: two phases (the backend, then cuSOLVER at the first LAPACK
//! call), each NOT_STARTED -> STARTING -> READY or FAILED, started on a background thread by
//! the start policy (or on the caller's thread where a caller needs the GPU now); waiters sleep
//! on one condition variable that every phase change notifies; the largest calls missed while
//! the GPU was not ready size its buffers. A panic anywhere in a phase ends it.

use super::*;

pub(super) const NOT_STARTED: u8 = 0;
pub(super) const STARTING: u8 = 1;
pub(super) const READY: u8 = 2;
pub(super) const FAILED: u8 = 3;

/// How many of the largest missed calls the start-up thread sizes the GPU buffers for.
pub const PRESIZE_CALLS: usize = 4;

/// A call without its data ([`Call::without_data`]): only its dimensions are kept.
#[derive(Debug, Clone, Copy)]
pub(super) struct ShapeOnly(pub(super) Call);

// SAFETY: every pointer in the call is null (made by `Call::without_data`); it is only read for
// its dimensions, from any thread.
unsafe impl Send for ShapeOnly {}
// SAFETY: as above.
unsafe impl Sync for ShapeOnly {}

/// Adds `call` to `kept`, the (at most `cap`) largest calls by [`Call::footprint`] with distinct
/// routine, precision and shape; returns whether it was kept.
pub(super) fn keep_largest(kept: &mut Vec<ShapeOnly>, call: &Call, cap: usize) -> bool {
    let same =
        |c: &Call| c.kind() == call.kind() && c.prec == call.prec && c.shape() == call.shape();
    if cap == 0 || kept.iter().any(|k| same(&k.0)) {
        return false;
    }
    let f = call.footprint();
    if kept.len() < cap {
        kept.push(ShapeOnly(call.without_data()));
        return true;
    }
    let Some((i, smallest)) = kept
        .iter()
        .enumerate()
        .map(|(i, k)| (i, k.0.footprint()))
        .min_by_key(|&(_, f)| f)
    else {
        return false;
    };
    if f > smallest {
        kept[i] = ShapeOnly(call.without_data());
        true
    } else {
        false
    }
}

/// When a start-up phase runs longer than the profile says, the rest of it is guessed as this
/// share of the expected time.
pub(super) const OVERRUN_SHARE: f64 = 0.25;
/// A wait for the GPU gives up this long after the expected end (the call then runs on the CPU).
pub(super) const WAIT_SLACK: Duration = Duration::from_millis(100);

/// One phase of GPU start-up (the backend, then cuSOLVER): its state and since when it runs.
pub(super) struct Phase {
    pub(super) state: AtomicU8,
    /// Nanoseconds after the dispatcher's creation at which the phase began (0: not begun).
    pub(super) since_ns: AtomicU64,
    /// The background thread running the phase, joined at exit (see
    /// [`Dispatcher::settle_startup`]).
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Phase {
    pub(super) const fn new() -> Phase {
        Phase {
            state: AtomicU8::new(NOT_STARTED),
            since_ns: AtomicU64::new(0),
            thread: std::sync::Mutex::new(None),
        }
    }

    /// Keeps the phase's thread for the join at exit.
    fn keep(&self, h: std::thread::JoinHandle<()>) {
        if let Ok(mut t) = self.thread.lock() {
            *t = Some(h);
        }
    }

    /// Joins the phase's thread once it has finished, waiting for that until `end` at most (a
    /// thread still running then is left alone).
    fn join_by(&self, end: Instant) {
        let Some(h) = self.thread.lock().ok().and_then(|mut t| t.take()) else {
            return;
        };
        while !h.is_finished() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        if h.is_finished() {
            let _ = h.join();
        }
    }

    pub(super) fn get(&self) -> u8 {
        self.state.load(Relaxed)
    }

    /// NOT_STARTED -> STARTING; true when this caller made the transition.
    pub(super) fn begin(&self, now_ns: u64) -> bool {
        let won = self
            .state
            .compare_exchange(NOT_STARTED, STARTING, Relaxed, Relaxed)
            .is_ok();
        if won {
            self.since_ns.store(now_ns.max(1), Relaxed);
        }
        won
    }
}

impl Dispatcher {
    /// The started GPU backend, if started.
    pub fn gpu(&self) -> Option<&Arc<GpuBackend>> {
        match self.gpu.get() {
            Some(Ok(g)) => Some(g),
            _ => None,
        }
    }

    /// Why the GPU is unusable, once that is known.
    pub fn gpu_error(&self) -> Option<&str> {
        match self.gpu.get() {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }

    /// Starts the GPU backend now and waits for it. Used by calibration, tests and
    /// `GPUKIT_OFFLOAD_GPU=always`; otherwise the start policy decides.
    pub fn start_gpu(&self) -> Result<&Arc<GpuBackend>> {
        self.start_blocking();
        match self.gpu.get() {
            Some(Ok(g)) => Ok(g),
            Some(Err(e)) => Err(Error::GpuUnavailable(e.clone())),
            None => Err(Error::GpuUnavailable("GPU start-up did not finish".into())),
        }
    }

    /// [`Dispatcher::start_gpu`], then loads cuSOLVER now (on this thread, or waits for the
    /// load in progress), so that LAPACK calls that follow are never decided while cuSOLVER
    /// is still loading. Used by tests and calibration; the dispatcher itself loads cuSOLVER
    /// in the background at the first LAPACK call.
    pub fn start_solver(&self) -> Result<&Arc<GpuBackend>> {
        let g = self.start_gpu()?;
        if self.solver.begin(self.now_ns()) {
            let r = g.load_solver();
            self.solver
                .state
                .store(if r.is_ok() { READY } else { FAILED }, Relaxed);
            self.notify();
            if let Err(f) = r {
                return Err(Error::GpuUnavailable(format!(
                    "cuSOLVER could not be loaded: {f}"
                )));
            }
        } else {
            self.wait_for(|d| d.solver.get() != STARTING, None);
        }
        match self.solver.get() {
            READY => Ok(g),
            _ => Err(Error::GpuUnavailable(
                "cuSOLVER could not be loaded (see the start-up log)".into(),
            )),
        }
    }

    /// Starts the GPU on this thread if nobody did, else waits for the start in progress.
    pub(super) fn start_blocking(&self) {
        if self.forked.load(Relaxed) || self.config.gpu == GpuMode::Off {
            return;
        }
        if self.core.begin(self.now_ns()) {
            self.run_start();
        } else {
            self.wait_for(|d| d.core.get() != STARTING, None);
        }
    }

    pub(super) fn notify(&self) {
        let _g = self.wake.0.lock();
        self.wake.1.notify_all();
    }

    /// Waits until `done` holds (checked on every phase change), at most `limit`; true when it
    /// holds.
    pub(super) fn wait_for(&self, done: impl Fn(&Self) -> bool, limit: Option<Duration>) -> bool {
        let deadline = limit.map(|l| Instant::now() + l);
        let mut g = self.wake.0.lock();
        loop {
            if done(self) {
                return true;
            }
            let step = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return done(self);
                    }
                    d - now
                }
                None => Duration::from_millis(200),
            };
            g = match self.wake.1.wait_timeout(g, step) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// The start itself (the phase is STARTING, owned by this thread): the backend, then for
    /// the calls missed so far their kernels (cuSOLVER with them if one was a LAPACK call) and
    /// buffers. Returns what was reserved. A panic anywhere in it ends the phase (FAILED, or
    /// READY when the backend was already published) and wakes every waiter: a phase left
    /// STARTING would make every later call wait (with `GPUKIT_OFFLOAD_GPU=always`, for ever).
    pub(super) fn run_start(&self) -> Option<Presized> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_start_steps())) {
            Ok(p) => p,
            Err(payload) => {
                let what = panic_text(payload.as_ref());
                let _ = self.gpu.set(Err(format!(
                    "the GPU start-up failed with an internal error: {what}"
                )));
                let ok = self.gpu().is_some();
                self.core
                    .state
                    .store(if ok { READY } else { FAILED }, Relaxed);
                if !ok {
                    self.compute_thresholds();
                }
                self.notify();
                None
            }
        }
    }

    pub(super) fn run_start_steps(&self) -> Option<Presized> {
        if self.config.inject == Inject::StartPanic {
            panic!("injected panic in the GPU start-up");
        }
        let t0 = Instant::now();
        let r = GpuBackend::start_waiting(0, self.config.host_wait)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        let mut presized = None;
        if let Ok(g) = &r {
            if self.config.inject != Inject::None {
                g.set_inject(self.config.inject);
            }
            let calls: Vec<Call> = self.missed_calls.lock().iter().map(|c| c.0).collect();
            // warm-up and sizing for what this process called only (so cuSOLVER is loaded
            // here only if a LAPACK call came)
            let mut kinds: Vec<(OpKind, Precision)> =
                calls.iter().map(|c| (c.kind(), c.prec)).collect();
            kinds.sort();
            kinds.dedup();
            let exiting = || self.exiting.load(Relaxed);
            if !kinds.is_empty() && !exiting() {
                g.warm_up(&kinds);
            }
            if calls.iter().any(|c| crate::gpu::needs_solver(&c.op)) && g.solver_loaded() {
                self.solver.state.store(READY, Relaxed);
            }
            if !calls.is_empty() && !exiting() {
                presized = g.presize(&calls).ok();
            }
            // informational (the figures are corrected either way): printed only where the
            // user asked for output, never under GPUKIT_OFFLOAD_LOG=off
            if self.config.log != LogMode::Off
                && !self.profile_machine.gpu.is_empty()
                && self.profile_machine.gpu != g.name()
            {
                self.warn_once(&format!(
                    "the profile's GPU figures were measured on {}, this GPU is {}; they are corrected from this process's calls",
                    self.profile_machine.gpu,
                    g.name()
                ));
            }
        }
        let ok = r.is_ok();
        let first = r.as_ref().ok().cloned();
        let _ = self.gpu.set(r);
        self.core
            .state
            .store(if ok { READY } else { FAILED }, Relaxed);
        if !ok {
            self.compute_thresholds();
        }
        self.notify();
        if let Some(g0) = first.filter(|_| !self.exiting.load(Relaxed)) {
            self.start_other_gpus(g0);
        }
        if self.config.log == LogMode::Calls {
            let mib = |b: usize| b >> 20;
            let p = presized.unwrap_or_default();
            output::line(&format!(
                "gpukit-offload: GPU start {} in {:.3}s ({}); reserved for missed calls: device {} MiB (need {}), pinned {} MiB (need {})",
                if ok { "ready" } else { "failed" },
                t0.elapsed().as_secs_f64(),
                self.gpu()
                    .map(|g| g.startup_report().to_string())
                    .unwrap_or_else(|| self.gpu_error().unwrap_or("").to_string()),
                mib(p.dev),
                mib(p.need_dev),
                mib(p.pinned),
                mib(p.need_pinned),
            ));
        }
        presized
    }

    /// With several visible GPUs, starts a backend on each of the others (calls run on the
    /// first meanwhile) and publishes the set; a GPU that cannot start is left out.
    fn start_other_gpus(&self, g0: Arc<GpuBackend>) {
        let count = GpuBackend::visible_count();
        if count <= 1 {
            return;
        }
        let mut all = vec![g0];
        for i in 1..count {
            match GpuBackend::start_waiting(i, self.config.host_wait) {
                Ok(g) => {
                    if self.config.inject != Inject::None {
                        g.set_inject(self.config.inject);
                    }
                    all.push(Arc::new(g));
                }
                Err(e) => self.warn_once(&format!("GPU {i} is not used: {e}")),
            }
        }
        if all.len() > 1 {
            let _ = self.devices.set(crate::gpu::devices::Devices::new(all));
        }
    }

    /// Starts the GPU on a background thread (once).
    pub(super) fn start_background(self: &Arc<Self>) {
        if self.forked.load(Relaxed)
            || self.config.gpu == GpuMode::Off
            || !self.core.begin(self.now_ns())
        {
            return;
        }
        let me = Arc::clone(self);
        // Normal priority on purpose: at nice 19 (a variant measured on the H200) start-up took
        // 4.6 s instead of 1.3 s, because OpenBLAS's spinning workers keep every core busy.
        let spawned = std::thread::Builder::new()
            .name("gpukit-offload-start".into())
            .spawn(move || {
                crate::exit_hook::mark_loader_thread();
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| me.run_start()));
                crate::exit_hook::register_again();
            });
        match spawned {
            Ok(h) => self.core.keep(h),
            Err(_) => {
                self.run_start();
            }
        }
    }

    /// Loads cuSOLVER on a background thread (once), for the first LAPACK call.
    pub(super) fn load_solver_background(self: &Arc<Self>) {
        if !self.solver.begin(self.now_ns()) {
            return;
        }
        let me = Arc::clone(self);
        let run = move || {
            let t0 = Instant::now();
            // a panic while loading counts as a failed load (never a phase left STARTING)
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                me.gpu().is_some_and(|g| g.load_solver().is_ok())
            }))
            .unwrap_or(false);
            me.solver
                .state
                .store(if ok { READY } else { FAILED }, Relaxed);
            me.notify();
            if me.config.log == LogMode::Calls {
                output::line(&format!(
                    "gpukit-offload: cuSOLVER {} in {:.3}s (first LAPACK call)",
                    if ok { "loaded" } else { "failed" },
                    t0.elapsed().as_secs_f64()
                ));
            }
        };
        let spawned = std::thread::Builder::new()
            .name("gpukit-offload-solver".into())
            .spawn(move || {
                crate::exit_hook::mark_loader_thread();
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
                crate::exit_hook::register_again();
            });
        match spawned {
            Ok(h) => self.solver.keep(h),
            Err(_) => self.solver.state.store(FAILED, Relaxed),
        }
    }

    /// Seconds a phase still needs: what the profile says it takes minus what has passed
    /// (a share of the expected time when it runs over).
    pub(super) fn remaining(&self, phase: &Phase, expected_s: f64) -> f64 {
        let since = phase.since_ns.load(Relaxed);
        let elapsed = self.now_ns().saturating_sub(since) as f64 * 1e-9;
        (expected_s - elapsed).max(OVERRUN_SHARE * expected_s)
    }

    /// Waits (at most `limit`) while a start-up phase still runs on its thread. At exit this
    /// keeps the process from tearing down the CUDA libraries under that thread: on the H200 a
    /// short program run with the eager start sometimes ended in SIGSEGV after its last line
    /// (2026-12-02, `gpukit-offload run python3 prog.py`: rc 139, no summary).
    pub(super) fn settle_startup(&self, limit: Duration) {
        let end = Instant::now() + limit;
        while (self.core.get() == STARTING || self.solver.get() == STARTING) && Instant::now() < end
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        // A start-up thread that has set its phase may still be ending (its thread-local
        // destructors, the driver's among them): the exit's library teardown must not run
        // beside that, so the finished threads are joined.
        self.core.join_by(end);
        self.solver.join_by(end);
    }

    /// The eager start ([`StartPolicy::Eager`], where a GPU may be used) of this process
    /// ([`Dispatcher::start_if_eager_as`] with its executable, `/proc/self/exe`, read only where
    /// the policy is eager).
    pub fn start_if_eager(self: &Arc<Self>) {
        self.eager_start(|| {
            let exe = std::fs::read_link("/proc/self/exe")
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            is_launcher(&exe)
        });
    }

    /// The eager start of a process running `exe`: CUDA starts in the background now (at
    /// load), unless `exe` is a shell or another launcher ([`is_launcher`]); then it is armed
    /// to start at the process's first BLAS or LAPACK call, of any size (until then every call
    /// takes the slow path, which starts it), and a launcher that never calls the library pays
    /// nothing: `offload run sh script.sh` made the shell start CUDA and hold a context while
    /// it forked every command, and the script of short Python processes took 22 s instead of
    /// 12 s (H100, 2026-12-06; with the shell not starting, 13 s). A program that computes
    /// gets the start's head start from its first line: starting only at the first call cost
    /// issue 11's one-shot numpy program 0.2-0.3 s in its first section (a 6000 x 3000 least
    /// squares waiting for the start: 0.64-0.77 s against 0.36-0.50 s with wave 2's start at
    /// load, H100, 2026-12-06).
    pub fn start_if_eager_as(self: &Arc<Self>, exe: &str) {
        self.eager_start(|| is_launcher(exe));
    }

    /// [`Dispatcher::start_if_eager_as`], asking `launcher` only where the policy applies.
    fn eager_start(self: &Arc<Self>, launcher: impl FnOnce() -> bool) {
        if self.config.start == StartPolicy::Eager
            && self.config.gpu != GpuMode::Off
            && self.core.get() == NOT_STARTED
            && !self.forked.load(Relaxed)
        {
            if launcher() {
                self.eager_armed.store(true, Relaxed);
                self.compute_thresholds();
            } else {
                self.start_background();
            }
        }
    }

    /// True while the eager start waits for the process's first BLAS or LAPACK call.
    pub fn eager_start_armed(&self) -> bool {
        self.eager_armed.load(Relaxed)
    }

    /// Injects a GPU failure into the following calls (tests); starts nothing.
    pub fn inject_failure(&self, i: Inject) {
        if let Some(g) = self.gpu() {
            g.set_inject(i);
        }
    }

    /// Remembers a call that would have gone to the GPU had it been started (its dimensions
    /// only), for the start-up thread's buffer sizing.
    pub(super) fn note_missed(&self, call: &Call) {
        keep_largest(&mut self.missed_calls.lock(), call, PRESIZE_CALLS);
    }
}

/// Executables that start other programs rather than compute: shells, job runners, build
/// tools, MPI and Slurm launchers, tracers. The eager start waits for their first BLAS or LAPACK
/// call (which they rarely make) instead of starting CUDA at load.
pub const LAUNCHERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "yash", "fish", "csh", "tcsh", "busybox",
    "env", "nice", "nohup", "time", "timeout", "xargs", "parallel", "make", "gmake", "ninja",
    "srun", "mpirun", "mpiexec", "orterun", "prterun", "strace", "ltrace",
];

/// Whether the executable `exe` (a path or a bare name) is one of [`LAUNCHERS`].
pub fn is_launcher(exe: &str) -> bool {
    let base = exe.rsplit('/').next().unwrap_or(exe);
    LAUNCHERS.contains(&base)
}
