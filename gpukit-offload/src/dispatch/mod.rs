//! The dispatcher: decides per call where it runs, runs it there (falling back to the CPU on any
//! GPU failure), learns from the times it sees, and counts everything.
//!
//! Decision for a call above the fast-path threshold:
//! 1. empty calls, nested calls (made by the CPU library from inside an intercepted call),
//!    invalid arguments and shapes the GPU path does not support stay on the CPU;
//! 2. the model (CPU curves of the call's own library, learned corrections applied) predicts
//!    CPU and GPU time; the call is offloaded when `cpu >= required_speedup(level) * gpu`. A
//!    library without curves runs its first calls of a kind on the CPU, timed, and later ones
//!    are judged by the measured rates;
//! 3. CUDA is started per [`StartPolicy`]: at once (eager, `offload run`), at the first call the
//!    model sends to the GPU (lazy), or once the missed savings would have paid for it (the
//!    library default) - always on a background thread. A GPU-bound call that arrives while the
//!    GPU (or cuSOLVER, loaded at the first LAPACK call) is starting *waits* for it when the
//!    start-up time still needed plus its GPU time beats the CPU by the required speedup, and
//!    runs on the CPU otherwise;
//! 4. re-checks keep the model honest both ways (see [`crate::learn`]).
//!
//! One module per concept: `config` (settings and their environment variables), `startup` (the
//! start-up state machine), `decide` (where a call goes), `estimate` (the model's estimate with
//! learned corrections), `fork` (the dispatcher across `fork()`), `persist` (messages, the exit
//! summary, learning merged into the profile); this file runs a call and records it.
use crate::call::Call;
use crate::cpu::CpuBackend;
use crate::error::{Error, Result};
use crate::gpu::{GpuBackend, Inject, Presized};
use crate::learn::{CorrKey, Learner};
use crate::library::{LibId, LibKey};
use crate::model::{required_speedup, Backend, Estimate, Model};
use crate::ops::{OpKind, Precision, Routine, Shape};
use crate::output;
use crate::profile::Profile;
use crate::request::Request;
use crate::stats::{slot, Reason, Stats, StatsSnapshot, NSLOT};
use crate::sync::Lock;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Condvar;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod config;
mod decide;
pub use decide::{CROWDED_CPU_FACTOR, OTHERS_RUNNING_MAX};
mod estimate;
mod fork;
pub mod load;
mod persist;
pub mod placement;
mod startup;

pub use config::{start_for, Config, GpuMode, LogMode, StartPolicy, EAGER_PARENT_ENV};
use decide::Plan;
use estimate::{MemoEntry, MEMO_SLOTS};
pub(crate) use fork::ForkHold;
pub use persist::WARNED_ENV;
pub use startup::{is_launcher, LAUNCHERS, PRESIZE_CALLS};
use startup::{Phase, ShapeOnly, FAILED, NOT_STARTED, READY, STARTING, WAIT_SLACK};

/// Where a call ran and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Backend that produced the result.
    pub backend: Backend,
    /// Why it ran on the CPU (`None` when it ran on the GPU).
    pub reason: Option<Reason>,
    /// Wall time of the call, seconds (a wait for the GPU's start-up included).
    pub seconds: f64,
    /// The model's prediction, when there was one.
    pub estimate: Option<Estimate>,
    /// LAPACK's `info` (0 for BLAS and for success).
    pub info: i64,
}

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Per-thread memo of the model's *uncorrected* estimate of recent shapes: the model never
    /// changes after a dispatcher is built, so an entry never goes stale (the dispatcher id
    /// keeps dispatchers apart). A program of many small matrices asks the model about the same
    /// few shapes again and again; the memo turns its interpolation (logarithms, grid searches,
    /// curve lookups: about 1 us) into one comparison.
    static MEMO: RefCell<[Option<MemoEntry>; MEMO_SLOTS]> = const { RefCell::new([None; MEMO_SLOTS]) };
    /// Calls since this thread last timed a cheap CPU-kept call (see [`CHEAP_CPU_S`]).
    static CHEAP_UNTIMED: Cell<u32> = const { Cell::new(0) };
}

/// A CPU-kept call predicted shorter than this is timed (and learned from) only once in
/// [`CHEAP_SAMPLE`] calls per thread (unless every call is logged): two clock reads and a
/// learner update would otherwise be a visible share of such a call, and the learner needs only
/// a sample of them.
const CHEAP_CPU_S: f64 = 1e-3;
/// See [`CHEAP_CPU_S`].
const CHEAP_SAMPLE: u32 = 16;

static NEXT_DISPATCHER_ID: AtomicU64 = AtomicU64::new(1);

/// The dispatcher. One per process is usual ([`Dispatcher::global`]); tests make their own.
pub struct Dispatcher {
    /// Distinguishes dispatchers in the per-thread estimate memo.
    id: u64,
    created: Instant,
    config: Config,
    model: Model,
    learner: Learner,
    stats: Stats,
    profile_path: Option<PathBuf>,
    profile_created: u64,
    profile_error: Option<String>,
    profile_machine: crate::profile::Machine,
    gpu: OnceLock<std::result::Result<Arc<GpuBackend>, String>>,
    /// Every visible GPU when there are several (set after the first one started and the
    /// others did too); unset with one GPU, whose calls run on `gpu` exactly as before.
    devices: OnceLock<crate::gpu::devices::Devices<GpuBackend>>,
    core: Phase,
    solver: Phase,
    /// Start-up waiters sleep here; every phase change notifies.
    wake: (Lock<()>, Condvar),
    missed_ns: AtomicU64,
    /// The largest calls kept on the CPU because the GPU was not started (or starting): the
    /// start-up thread sizes the GPU buffers for them.
    missed_calls: Lock<Vec<ShapeOnly>>,
    thresholds: [AtomicU64; NSLOT],
    /// A routine and precision (a stats slot) had its first GPU call in this process: that
    /// call loads its kernels (CUDA loads a module's kernels at their first launch) and is not
    /// learned from.
    gpu_seen: [AtomicBool; NSLOT],
    cpu: OnceLock<std::result::Result<CpuBackend, String>>,
    warnings: Vec<String>,
    /// Notes printed when logging is on (a foreign profile).
    notices: Vec<String>,
    /// Messages printed by [`Dispatcher::warn_once`].
    warned: Lock<Vec<String>>,
    /// This is a forked child of the process that created the dispatcher.
    forked: AtomicBool,
    /// The eager start is armed: it begins at this process's first BLAS/LAPACK call (see
    /// [`Dispatcher::start_if_eager`]); until then every call takes the slow path.
    eager_armed: AtomicBool,
    /// The process is exiting (the exit hook runs): a start-up still running skips its
    /// optional steps (warming kernels, sizing buffers, the other GPUs) so that the exit, which
    /// waits for it, is not held up by work nobody will use.
    exiting: AtomicBool,
    /// This process's calls in flight and its slot on the GPU's load board.
    load: load::Load,
}

static GLOBAL: OnceLock<Arc<Dispatcher>> = OnceLock::new();
/// Threads inside [`Dispatcher::global_slow`] now.
static CREATING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// Whether this thread is inside [`Dispatcher::global_slow`] (0 or 1).
    static CREATING_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as making the dispatcher while it lives.
struct CreatingHere;

impl CreatingHere {
    fn enter() -> CreatingHere {
        CREATING_HERE.with(|h| h.set(1));
        CreatingHere
    }
}

impl Drop for CreatingHere {
    fn drop(&mut self) {
        CREATING_HERE.with(|h| h.set(0));
    }
}

impl Dispatcher {
    /// The process-wide dispatcher, configured from the environment on first use. Configuration
    /// problems (bad env values, a corrupt profile) are in [`Dispatcher::warnings`].
    #[inline]
    pub fn global() -> &'static Arc<Dispatcher> {
        match GLOBAL.get() {
            Some(d) => d,
            None => Dispatcher::global_slow(),
        }
    }

    #[cold]
    fn global_slow() -> &'static Arc<Dispatcher> {
        // the fork handlers first, so that a fork while the dispatcher is being made waits for
        // it (`creating_elsewhere`) rather than leaving the child a half-made one to wait on
        crate::fork::install();
        CREATING.fetch_add(1, Relaxed);
        let _here = CreatingHere::enter();
        let d = Dispatcher::make_global();
        CREATING.fetch_sub(1, Relaxed);
        d
    }

    /// True while another thread makes the process's dispatcher (the fork handler then waits
    /// for it: see [`crate::fork`]).
    pub(crate) fn creating_elsewhere() -> bool {
        CREATING.load(Relaxed) > CREATING_HERE.with(|h| h.get())
    }

    fn make_global() -> &'static Arc<Dispatcher> {
        GLOBAL.get_or_init(|| {
            let made = std::panic::catch_unwind(|| {
                let (cfg, errs) = Config::from_env();
                let mut d = Dispatcher::new(cfg);
                d.warnings.extend(errs.into_iter().map(|e| e.to_string()));
                d
            });
            let d = made.unwrap_or_else(|_| {
                // a bug in the configuration: offload nothing rather than harm the program
                let mut d = Dispatcher::new(Config {
                    gpu: GpuMode::Off,
                    persist: false,
                    profile_path: None,
                    ..Config::default()
                });
                d.warnings
                    .push("internal error while configuring; every call runs on the CPU".into());
                d
            });
            Arc::new(d)
        })
    }

    /// A dispatcher with these settings. The profile is loaded now (a corrupt one: the embedded
    /// default, with the error in [`Dispatcher::warnings`]); CUDA is not touched.
    pub fn new(config: Config) -> Dispatcher {
        let (profile, path, err) = match &config.profile_path {
            Some(p) if p.is_file() => match Profile::load(p) {
                Ok(prof) => (prof, Some(p.clone()), None),
                Err(e) => (Profile::embedded(), None, Some(e)),
            },
            Some(_) => (Profile::embedded(), None, None),
            None => Profile::resolve(),
        };
        let mut warnings = Vec::new();
        let profile_error = err.map(|e| {
            let msg = format!("{e}; using the built-in default profile");
            warnings.push(msg.clone());
            msg
        });
        let mut notices = Vec::new();
        let foreign = profile.foreign();
        if let Some(f) = &foreign {
            notices.push(format!(
                "{f}: its CPU figures are not used; CPU times are learned from this process's calls (run `offload calibrate` here)"
            ));
        }
        let model = profile.model(foreign.is_none());
        let learner = Learner::from_profile(&profile.corrections, &profile.cpu_points);
        let d = Dispatcher {
            id: NEXT_DISPATCHER_ID.fetch_add(1, Relaxed),
            created: Instant::now(),
            thresholds: [const { AtomicU64::new(0) }; NSLOT],
            gpu_seen: [const { AtomicBool::new(false) }; NSLOT],
            config,
            model,
            learner,
            stats: Stats::default(),
            profile_path: path,
            profile_created: profile.created_unix,
            profile_error,
            profile_machine: profile.machine.clone(),
            gpu: OnceLock::new(),
            devices: OnceLock::new(),
            core: Phase::new(),
            solver: Phase::new(),
            wake: (Lock::new(()), Condvar::new()),
            missed_ns: AtomicU64::new(0),
            missed_calls: Lock::new(Vec::new()),
            cpu: OnceLock::new(),
            warnings,
            notices,
            warned: Lock::new(Vec::new()),
            forked: AtomicBool::new(false),
            eager_armed: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
            load: load::Load::default(),
        };
        if d.config.gpu != GpuMode::Off
            && d.config.inject != Inject::StartPanic
            && !gpukit_jit::libs::driver_present()
        {
            let _ = d
                .gpu
                .set(Err("no CUDA driver (libcuda) on this machine".into()));
            d.core.state.store(FAILED, Relaxed);
        }
        d.compute_thresholds();
        d
    }

    /// The process-wide dispatcher if it was created already (never creates it).
    pub fn global_if_created() -> Option<&'static Arc<Dispatcher>> {
        GLOBAL.get()
    }

    /// Counts a call that bypassed the dispatcher and ran on the CPU (the shim's pass-through of
    /// calls it cannot parse, and workspace queries).
    pub fn count_cpu(&self, r: Routine, p: Precision, reason: Reason) {
        self.stats.record_cpu(slot(r, p), reason, None);
    }

    /// Settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The cost model (without learned corrections).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The learned state.
    pub fn learner(&self) -> &Learner {
        &self.learner
    }

    /// Problems met while configuring (bad environment values, a corrupt profile).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Notes about the profile (printed with the summary when logging is on).
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// The error that made the dispatcher fall back to the embedded profile, if any.
    pub fn profile_error(&self) -> Option<&str> {
        self.profile_error.as_deref()
    }

    /// The profile file loaded (and written back into at exit); `None` for the embedded
    /// default.
    pub fn profile_path(&self) -> Option<&PathBuf> {
        self.profile_path.as_ref()
    }

    /// Statistics so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    fn now_ns(&self) -> u64 {
        self.created.elapsed().as_nanos() as u64
    }

    fn compute_thresholds(&self) {
        if self.eager_armed.load(Relaxed) {
            // the first call of any size must reach the slow path, which starts the GPU
            for t in &self.thresholds {
                t.store(0, Relaxed);
            }
            return;
        }
        // (a forked child keeps the model's thresholds: its calls that would pay on the GPU
        // are counted as `forked`, not as small)
        let never = self.config.gpu != GpuMode::Off
            && self.core.get() == FAILED
            && !self.forked.load(Relaxed);
        for r in Routine::ALL {
            for p in Precision::ALL {
                let t = if never {
                    u64::MAX
                } else if self.config.gpu == GpuMode::Always {
                    0
                } else {
                    OpKind::all()
                        .into_iter()
                        .filter(|k| k.routine == r)
                        .map(|k| self.model.work_threshold(k, p, self.config.level, 4.0))
                        .min()
                        .unwrap_or(u64::MAX)
                        .max(32 * 32 * 32)
                };
                self.thresholds[slot(r, p)].store(t, Relaxed);
            }
        }
    }

    /// The fast path: true when a call of this size certainly stays on the CPU. Counts it.
    /// One relaxed load, one compare and a relaxed load + store of a counter; no locked
    /// instruction, no lock, no allocation.
    #[inline(always)]
    pub fn keep_small(&self, r: Routine, p: Precision, work: u64) -> bool {
        let s = slot(r, p);
        // `slot` is always < NSLOT: the bounds check folds away.
        if work < self.thresholds[s % NSLOT].load(Relaxed) {
            self.stats.count_small(s);
            true
        } else {
            false
        }
    }

    /// The current fast-path threshold (in [`OpKind::work`] units) of a routine and precision.
    pub fn threshold(&self, r: Routine, p: Precision) -> u64 {
        self.thresholds[slot(r, p)].load(Relaxed)
    }

    /// Runs a request where it is fastest. `cpu` runs it on the CPU and returns LAPACK's info;
    /// it is called at most once (on the GPU path's failure, the CPU runs on the untouched
    /// inputs).
    ///
    /// # Safety
    /// Every pointer in the request's call must be valid for the extent its dimensions describe
    /// (the typed API checks this; the shim relies on the BLAS caller's contract).
    pub unsafe fn execute(
        self: &Arc<Self>,
        req: &Request,
        cpu: &mut dyn FnMut() -> Result<i64>,
    ) -> Result<Outcome> {
        // SAFETY: forwarded.
        unsafe { self.execute_gated(req, cpu, &mut || true) }
    }

    /// [`Dispatcher::execute`] with a last check before a call goes to the GPU: `gpu_ok`
    /// returning false runs it on the CPU instead (reason `workspace-short`; the shim's check
    /// that the caller's LAPACK workspace is one its library accepts without question).
    ///
    /// # Safety
    /// As for [`Dispatcher::execute`].
    pub unsafe fn execute_gated(
        self: &Arc<Self>,
        req: &Request,
        cpu: &mut dyn FnMut() -> Result<i64>,
        gpu_ok: &mut dyn FnMut() -> bool,
    ) -> Result<Outcome> {
        if self.eager_armed.load(Relaxed) && self.eager_armed.swap(false, Relaxed) {
            self.start_background();
            self.compute_thresholds();
        }
        let s = req.slot;
        let quick = |reason: Reason, cpu: &mut dyn FnMut() -> Result<i64>| {
            self.untimed_cpu(s, reason, None, cpu)
        };
        if DEPTH.with(|d| d.get()) > 0 {
            return quick(Reason::Nested, cpu);
        }
        if req.is_empty() {
            return quick(Reason::Empty, cpu);
        }
        if req.call.check().is_err() {
            return quick(Reason::InvalidArgs, cpu);
        }
        self.load.note_caller();
        let t0 = Instant::now();
        let raw = self.estimate(req);
        // the decision prices the machine as it is now (see `load`); learning uses the
        // uncontended estimate, and only from calls that ran alone (`learn`: None otherwise)
        let now = self.load.snapshot();
        let est = raw.map(|mut e| {
            let (c, g) = load::price(e.cpu_s, e.gpu_s, &now, self.load.cores());
            e.cpu_s = c;
            e.gpu_s = g;
            e
        });
        // Some(the uncontended estimate) when the machine was quiet, None under contention
        let learn = now.quiet().then_some(raw);
        let mut plan = self.decide(req, est.as_ref());
        if let (Plan::Wait(limit), Some(e)) = (&plan, &est) {
            plan = self.await_start(req, e, *limit);
        }
        // the call's own time starts here: a wait for the start-up is the user's time (in
        // `secs` below, the statistics and the log) but not the backend's (learned from)
        let ran = Instant::now();
        match plan {
            Plan::Gpu => {
                if !gpu_ok() {
                    return self.timed_cpu(req, Reason::WorkspaceShort, est, learn, cpu);
                }
                if let (Some(gpu), Some(e)) = (self.gpu(), est) {
                    let r = {
                        let _queued = self.load.gpu_turn(e.compute_s, load_board);
                        match (self.devices.get(), req.call.op) {
                            // several GPUs: a product whole or split, anything else whole on
                            // the least queued GPU
                            (Some(d), crate::call::Op::Gemm { m, n, k, beta, .. }) => {
                                let cost = placement::product_cost(&e, (m, n, k), !beta.is_zero());
                                // SAFETY: forwarded from the caller; check() passed;
                                // gpu::unsupported() is None.
                                unsafe { d.run_product(&req.call, cost) }.1
                            }
                            // SAFETY: as above.
                            (Some(d), _) => unsafe { d.run(&req.call, e.compute_s) }.1,
                            // SAFETY: as above.
                            (None, _) => unsafe { gpu.run(&req.call) },
                        }
                    };
                    let secs = t0.elapsed().as_secs_f64();
                    let run_s = ran.elapsed().as_secs_f64();
                    // alone before and still alone after: the time is the machine's; and not
                    // the routine's first GPU call, which loads its kernels
                    let first = !self.gpu_seen[s % NSLOT].swap(true, Relaxed);
                    let learn = learn.filter(|_| !first && self.load.snapshot().quiet());
                    match r {
                        Ok(()) => {
                            let learn = learn.flatten().map(|l| (l, run_s));
                            return Ok(self.gpu_done(req, e, learn, secs));
                        }
                        Err(f) => {
                            // after `Lost` the caller's in-place operands are partly
                            // overwritten: the CPU must not run on them
                            let Some(reason) = f.kind.fallback_reason() else {
                                self.stats.record_lost(req.slot, secs);
                                return Err(Error::GpuLost {
                                    routine: req.name(),
                                    detail: f.detail,
                                });
                            };
                            if self.config.log == LogMode::Calls {
                                output::line(&format!(
                                    "gpukit-offload: {} GPU path failed ({f}); running on the CPU",
                                    req.name()
                                ));
                            }
                            return self.timed_cpu(req, reason, est, learn, cpu);
                        }
                    }
                }
                self.timed_cpu(req, Reason::NoGpu, est, learn, cpu)
            }
            Plan::Cpu(reason) => self.timed_cpu(req, reason, est, learn, cpu),
            Plan::Wait(_) => self.timed_cpu(req, Reason::GpuStarting, est, learn, cpu),
        }
    }

    /// Learning and statistics of a call that took `secs` (a wait for the start-up included)
    /// and ran on the GPU, learned from when `learn` has the uncontended estimate and the
    /// seconds the GPU path itself took.
    fn gpu_done(
        &self,
        req: &Request,
        e: Estimate,
        learn: Option<(Estimate, f64)>,
        secs: f64,
    ) -> Outcome {
        let lib = req.lib.key_id();
        if let Some((l, run_s)) = learn {
            self.learner.observe(
                CorrKey::new(req.kind, req.prec(), Backend::Gpu, lib, req.features),
                l.gpu_s,
                run_s,
            );
        }
        let measured = self
            .learner
            .cpu_known(lib, req.kind, req.prec(), req.features, req.flops)
            .filter(|k| k.exact);
        let (cpu_s, is_measured) = match measured {
            Some(k) => (k.seconds, true),
            None => (if e.cpu_known { e.cpu_s } else { secs }, false),
        };
        self.stats.record_gpu(req.slot, secs, cpu_s, is_measured);
        self.log_call(req, Backend::Gpu, None, secs, Some(&e));
        Outcome {
            backend: Backend::Gpu,
            reason: None,
            seconds: secs,
            estimate: Some(e),
            info: 0,
        }
    }

    /// Runs a call on the CPU without timing it (counted, not learned from).
    fn untimed_cpu(
        &self,
        s: usize,
        reason: Reason,
        est: Option<Estimate>,
        cpu: &mut dyn FnMut() -> Result<i64>,
    ) -> Result<Outcome> {
        let info = {
            let _turn = self.load.cpu_turn();
            run_cpu_nested(cpu)?
        };
        self.stats.record_cpu(s, reason, None);
        Ok(Outcome {
            backend: Backend::Cpu,
            reason: Some(reason),
            seconds: 0.0,
            estimate: est,
            info,
        })
    }

    fn timed_cpu(
        &self,
        req: &Request,
        reason: Reason,
        est: Option<Estimate>,
        learn: Option<Option<Estimate>>,
        cpu: &mut dyn FnMut() -> Result<i64>,
    ) -> Result<Outcome> {
        // (with per-call logging on, every call is timed: the log is for reading them all)
        if self.config.log != LogMode::Calls
            && est.is_some_and(|e| e.cpu_known && e.cpu_s < CHEAP_CPU_S)
            && CHEAP_UNTIMED.with(|c| {
                let n = c.get() + 1;
                c.set(if n >= CHEAP_SAMPLE { 0 } else { n });
                n < CHEAP_SAMPLE
            })
        {
            return self.untimed_cpu(req.slot, reason, est, cpu);
        }
        let t0 = Instant::now();
        let info = {
            let _turn = self.load.cpu_turn();
            run_cpu_nested(cpu)?
        };
        let secs = t0.elapsed().as_secs_f64();
        let lib = req.lib.key_id();
        // alone before and still alone after: the time is the machine's
        let learn = learn.filter(|_| self.load.snapshot().quiet());
        if let (0, Some(raw)) = (info, learn) {
            if let Some(e) = raw.filter(|e| e.cpu_known) {
                self.learner.observe(
                    CorrKey::new(req.kind, req.prec(), Backend::Cpu, lib, req.features),
                    e.cpu_s,
                    secs,
                );
            }
            self.learner
                .observe_cpu(lib, req.kind, req.prec(), req.features, req.flops, secs);
        }
        self.stats.record_cpu(req.slot, reason, Some(secs));
        self.log_call(req, Backend::Cpu, Some(reason), secs, est.as_ref());
        Ok(Outcome {
            backend: Backend::Cpu,
            reason: Some(reason),
            seconds: secs,
            estimate: est,
            info,
        })
    }

    fn log_call(
        &self,
        req: &Request,
        b: Backend,
        reason: Option<Reason>,
        secs: f64,
        e: Option<&Estimate>,
    ) {
        if self.config.log != LogMode::Calls {
            return;
        }
        let pred = e
            .map(|e| {
                if e.cpu_known {
                    format!(" predicted cpu={:.4}s gpu={:.4}s", e.cpu_s, e.gpu_s)
                } else {
                    format!(" predicted cpu=? gpu={:.4}s", e.gpu_s)
                }
            })
            .unwrap_or_default();
        output::line(&format!(
            "gpukit-offload: {} {} on {} -> {}{} {:.4}s{}",
            req.name(),
            req.shape,
            match req.lib.key() {
                "" => "?",
                k => k,
            },
            b.as_str(),
            reason
                .map(|r| format!(" ({})", r.as_str()))
                .unwrap_or_default(),
            secs,
            pred
        ));
    }

    /// The CPU backend for library users (loaded on first use).
    pub fn cpu_backend(&self) -> Result<&CpuBackend> {
        let r = self.cpu.get_or_init(|| {
            CpuBackend::discover().map_err(|e| match e {
                Error::NoCpuLibrary { tried } => tried,
                e => e.to_string(),
            })
        });
        match r {
            Ok(c) => Ok(c),
            Err(tried) => Err(Error::NoCpuLibrary {
                tried: tried.clone(),
            }),
        }
    }
}

/// The load board of the GPU this process uses (`None` where there is no `/dev/shm`, or
/// `GPUKIT_OFFLOAD_LOAD_BOARD=off`; `GPUKIT_OFFLOAD_LOAD_BOARD=DIR` puts it in DIR).
fn load_board() -> Option<load::Board> {
    let dir = match std::env::var_os(LOAD_BOARD_ENV) {
        Some(v) if v == "off" => return None,
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from("/dev/shm"),
    };
    if !dir.is_dir() {
        return None;
    }
    load::Board::open(&load::board_path(&dir, &load::device_key()))
}

/// Where the GPU load board lives (`off`: no board).
pub const LOAD_BOARD_ENV: &str = "GPUKIT_OFFLOAD_LOAD_BOARD";

/// The message of a caught panic's payload.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

fn run_cpu_nested(cpu: &mut dyn FnMut() -> Result<i64>) -> Result<i64> {
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let _g = Guard;
    cpu()
}

#[cfg(test)]
mod tests {
    use super::startup::keep_largest;
    use super::*;
    use crate::api::Offload;
    use crate::library::LibId;
    use crate::ops::{Trans, Uplo};
    use proptest::prelude::*;

    fn cfg(level: u8, gpu: GpuMode) -> Config {
        let tmp = std::env::temp_dir().join(format!("gpukit-dispatch-{}", std::process::id()));
        Config {
            level,
            gpu,
            log: LogMode::Off,
            profile_path: Some(tmp.join("none.json")),
            persist: false,
            ..Config::default()
        }
    }

    /// The eager start of a shell waits for the process's first BLAS/LAPACK call: armed,
    /// nothing starts and every call size takes the slow path; the first call (a tiny one)
    /// starts the GPU (here its start-up panics by injection, so it ends FAILED) and the
    /// thresholds come back. A dispatcher that never gets a call never starts; a GPU that is
    /// off is never armed. A program that is no launcher starts at once.
    #[test]
    fn the_eager_start_begins_at_load_or_for_a_launcher_at_the_first_call() {
        let lib = LibId::of_path("/nonexistent/libopenblas.so.0");
        let eager = |gpu| {
            Arc::new(Dispatcher::new(Config {
                start: StartPolicy::Eager,
                inject: Inject::StartPanic,
                ..cfg(1, gpu)
            }))
        };
        // a program that computes: at once
        let now = eager(GpuMode::Auto);
        now.start_if_eager_as("/usr/bin/python3.12");
        assert!(!now.eager_start_armed());
        assert_ne!(
            now.core.get(),
            NOT_STARTED,
            "python3.12 did not start at load"
        );
        now.settle_startup(Duration::from_secs(10));
        assert_eq!(now.core.get(), FAILED, "(the injected panic)");
        for sh in ["/bin/sh", "bash", "/usr/bin/dash"] {
            assert!(is_launcher(sh), "{sh}");
        }
        for prog in ["/usr/bin/python3", "/opt/R/bin/R", "julia", "/bin/shx", ""] {
            assert!(!is_launcher(prog), "{prog}");
        }
        let d = eager(GpuMode::Auto);
        d.start_if_eager_as("/bin/sh");
        assert!(d.eager_start_armed());
        assert_eq!(d.core.get(), NOT_STARTED, "nothing starts before a call");
        for r in Routine::ALL {
            assert_eq!(d.threshold(r, Precision::D), 0, "{r:?}: every call is seen");
        }
        let idle = eager(GpuMode::Auto);
        idle.start_if_eager_as("bash");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(idle.core.get(), NOT_STARTED, "no call, no start");
        let mut buf = vec![0.0f64; 16];
        let req = Request::new(gemm(2, 2, 2, &mut buf), lib);
        let mut cpu = || Ok(0);
        // SAFETY: the closure stands in for the library: no pointer is read.
        let o = unsafe { d.execute(&req, &mut cpu) }.unwrap();
        assert_eq!(o.backend, Backend::Cpu);
        assert!(!d.eager_start_armed());
        assert_ne!(d.core.get(), NOT_STARTED, "the first call started the GPU");
        d.settle_startup(Duration::from_secs(10));
        assert_eq!(d.core.get(), FAILED, "(the injected panic)");
        assert!(
            d.threshold(Routine::Gemm, Precision::D) > 0,
            "thresholds back"
        );
        let off = eager(GpuMode::Off);
        off.start_if_eager_as("/usr/bin/python3");
        assert!(!off.eager_start_armed());
    }

    #[test]
    fn memoised_estimates_equal_the_model_and_stay_per_dispatcher() {
        let (a, b) = (
            Dispatcher::new(cfg(1, GpuMode::Off)),
            Dispatcher::new(cfg(10, GpuMode::Off)),
        );
        let lib = LibId::of_path("/nonexistent/libopenblas.so.0");
        let mut buf = vec![0.0f64; 16];
        for (m, n, k) in [
            (100, 100, 100),
            (300, 7, 1000),
            (100, 100, 100),
            (5000, 5000, 64),
        ] {
            let call = Request::new(gemm(m, n, k, &mut buf), lib);
            let want = a
                .model
                .estimate(call.kind, call.prec(), call.shape, lib.key_id());
            // twice: the second answer comes from the memo and must be the same
            for _ in 0..2 {
                assert_eq!(a.model_estimate(&call, lib.key_id()), want);
                assert_eq!(
                    b.model_estimate(&call, lib.key_id()),
                    b.model
                        .estimate(call.kind, call.prec(), call.shape, lib.key_id())
                );
            }
        }
        // a third dispatcher with its own learned correction: the memo must not hide it
        let c = Dispatcher::new(cfg(5, GpuMode::Off));
        let call = Request::new(gemm(100, 100, 100, &mut buf), lib);
        let key = CorrKey::new(
            call.kind,
            call.prec(),
            Backend::Gpu,
            lib.key_id(),
            call.features,
        );
        let base = c.estimate(&call).unwrap();
        c.learner.observe(key, base.gpu_s, base.gpu_s * 4.0);
        let after = c.estimate(&call).unwrap();
        assert!(
            (after.gpu_s / base.gpu_s - 2.0).abs() < 1e-9,
            "{after:?} vs {base:?}"
        );
    }

    #[test]
    fn env_values_parse_with_clear_errors() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let (c, errs) = Config::from_vars(vars(&[
            ("GPUKIT_OFFLOAD_LEVEL", "3"),
            ("GPUKIT_OFFLOAD_GPU", "always"),
            ("GPUKIT_OFFLOAD_START", "eager"),
            ("GPUKIT_OFFLOAD_INJECT_FAILURE", "oom"),
            ("GPUKIT_OFFLOAD_HOST_WAIT", "Block"),
            ("GPUKIT_OFFLOAD_SHARE", "Off"),
        ]));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(c.host_wait, gpukit_core::HostWait::Block);
        assert_eq!(c.share, crate::share::SharePolicy::Off);
        assert_eq!(Config::default().share, crate::share::SharePolicy::Auto);
        assert_eq!((c.level, c.gpu), (3, GpuMode::Always));
        assert_eq!(
            (c.start, c.inject),
            (StartPolicy::Eager, Inject::OutOfMemory)
        );
        let (c, _) = Config::from_vars(vars(&[("GPUKIT_OFFLOAD_GPU", " OFF ")]));
        assert_eq!(c.gpu, GpuMode::Off);
        let (c, errs) = Config::from_vars(vars(&[
            ("GPUKIT_OFFLOAD_LEVEL", "eleven"),
            ("GPUKIT_OFFLOAD_GPU", "sometimes"),
            ("GPUKIT_OFFLOAD_INJECT_FAILURE", "garbage"),
            ("GPUKIT_OFFLOAD_START", "whenever"),
            ("GPUKIT_OFFLOAD_CPU_LIB", "/nonexistent/libblas.so"),
            ("GPUKIT_OFFLOAD_HOST_WAIT", "nap"),
            ("GPUKIT_OFFLOAD_SHARE", "sometimes"),
        ]));
        assert_eq!((c.level, c.gpu), (Config::default().level, GpuMode::Auto));
        assert_eq!(c.share, crate::share::SharePolicy::Auto);
        assert_eq!(c.host_wait, crate::gpu::DEFAULT_HOST_WAIT);
        assert_eq!((c.start, c.inject), (StartPolicy::Savings, Inject::None));
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(text.len(), 7, "{text:?}");
        assert!(
            text[0].contains("GPUKIT_OFFLOAD_LEVEL=\"eleven\""),
            "{text:?}"
        );
        assert!(
            text[1].contains("GPUKIT_OFFLOAD_GPU") && text[1].contains("always"),
            "{text:?}"
        );
        for name in [
            "GPUKIT_OFFLOAD_START=\"whenever\"",
            "GPUKIT_OFFLOAD_INJECT_FAILURE=\"garbage\"",
            "GPUKIT_OFFLOAD_CPU_LIB=\"/nonexistent/libblas.so\"",
            "GPUKIT_OFFLOAD_HOST_WAIT=\"nap\"",
            "GPUKIT_OFFLOAD_SHARE=\"sometimes\"",
        ] {
            assert!(text.iter().any(|t| t.contains(name)), "{name}: {text:?}");
        }
    }

    fn potrf(n: usize, buf: &mut [f64]) -> Call {
        Call {
            prec: Precision::D,
            op: crate::call::Op::Potrf {
                uplo: crate::ops::Uplo::Lower,
                n,
                a: crate::call::HostMat::new(buf.as_mut_ptr() as *mut u8, n, n, n),
            },
        }
    }

    fn gemm(m: usize, n: usize, k: usize, buf: &mut [f64]) -> Call {
        let p = buf.as_mut_ptr() as *mut u8;
        let one = crate::call::Scalar::of(1.0f64);
        Call {
            prec: Precision::D,
            op: crate::call::Op::Gemm {
                ta: crate::ops::Trans::No,
                tb: crate::ops::Trans::No,
                m,
                n,
                k,
                alpha: one,
                a: crate::call::HostMat::new(p, m, k, m),
                b: crate::call::HostMat::new(p, k, n, k),
                beta: one,
                c: crate::call::HostMat::new(p, m, n, m),
            },
        }
    }

    #[test]
    fn missed_calls_keep_the_largest_distinct_shapes_without_data() {
        let mut buf = vec![0.0f64; 16];
        let mut kept = Vec::new();
        assert!(keep_largest(&mut kept, &potrf(1000, &mut buf), 2));
        // the same routine and shape again: not a second entry
        assert!(!keep_largest(&mut kept, &potrf(1000, &mut buf), 2));
        assert!(keep_largest(
            &mut kept,
            &gemm(3000, 3000, 6000, &mut buf),
            2
        ));
        // full: a larger call replaces the smallest, a smaller one is dropped
        assert!(keep_largest(&mut kept, &potrf(6000, &mut buf), 2));
        assert!(!keep_largest(&mut kept, &potrf(500, &mut buf), 2));
        let mut sizes: Vec<usize> = kept.iter().map(|k| k.0.footprint()).collect();
        sizes.sort();
        assert_eq!(
            sizes,
            vec![6000 * 6000 * 8, (2 * 3000 * 6000 + 3000 * 3000) * 8]
        );
        for k in &kept {
            match k.0.op {
                crate::call::Op::Potrf { a, .. } => assert!(a.ptr.is_null()),
                crate::call::Op::Gemm { a, b, c, .. } => {
                    assert!(a.ptr.is_null() && b.ptr.is_null() && c.ptr.is_null())
                }
                _ => unreachable!(),
            }
        }
        assert!(!keep_largest(&mut kept, &potrf(9000, &mut buf), 0));
    }

    #[test]
    fn without_data_keeps_the_dimensions() {
        let mut buf = vec![0.0f64; 16];
        let c = gemm(30, 20, 10, &mut buf);
        let d = c.without_data();
        assert_eq!((d.kind(), d.prec, d.shape()), (c.kind(), c.prec, c.shape()));
        assert_eq!(d.footprint(), c.footprint());
        assert!(d.check().is_ok());
    }

    /// A library without curves: its first call of a kind runs on the CPU to be measured; the
    /// next one of that kind is judged by the measured rate (never by another library's curve).
    #[test]
    fn a_library_without_curves_learns_from_its_first_calls() {
        let off = Offload::with_config(cfg(8, GpuMode::Auto));
        let d = off.dispatcher();
        let cpu = d.cpu_backend().unwrap();
        let n = 200;
        let mut a = vec![0.0f64; n * n];
        for j in 0..n {
            a[j + j * n] = 4.0;
        }
        let lib = cpu.lib().key_id();
        // the embedded profile has no curves for this library (or is foreign here)
        let probe = d.model.estimate(
            OpKind::plain(Routine::Potrf),
            Precision::D,
            Shape::new(1, n as u64, 1),
            lib,
        );
        if probe.is_some_and(|e| e.cpu_known) {
            eprintln!("SKIPPED a_library_without_curves_learns_from_its_first_calls: the profile has curves for {}", cpu.describe());
            return;
        }
        let first = off.potrf(Uplo::Lower, n, &mut a.clone(), n).unwrap();
        assert_eq!(first.reason, Some(Reason::CpuUnmeasured), "{first:?}");
        assert!(first.seconds > 0.0);
        let second = off.potrf(Uplo::Lower, n, &mut a, n).unwrap();
        assert_ne!(second.reason, Some(Reason::CpuUnmeasured), "{second:?}");
        let e = second.estimate.unwrap();
        assert!(e.cpu_known && e.cpu_s > 0.0, "{e:?}");
        // a ten times larger call of the same kind borrows the measured rate, scaled by flops
        assert!((a[0] - 2.0).abs() < 1e-12);
    }

    /// A profile from another machine: reported, and its CPU curves are not used.
    #[test]
    fn a_foreign_profile_is_reported_and_its_cpu_curves_unused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let mut p = Profile::embedded();
        p.machine.cpu = "Some Other CPU (3 threads)".into();
        p.save(&path).unwrap();
        let d = Dispatcher::new(Config {
            profile_path: Some(path.clone()),
            ..cfg(8, GpuMode::Off)
        });
        assert!(
            d.notices()
                .iter()
                .any(|n| n.contains("Some Other CPU") && n.contains("not used")),
            "{:?}",
            d.notices()
        );
        assert!(d.model().libraries().is_empty());
        // the same profile with this machine's CPU: trusted
        p.machine.cpu = crate::profile::Machine::local_cpu();
        p.save(&path).unwrap();
        let d = Dispatcher::new(Config {
            profile_path: Some(path),
            ..cfg(8, GpuMode::Off)
        });
        assert!(d.notices().is_empty(), "{:?}", d.notices());
        assert!(!d.model().libraries().is_empty());
    }

    /// Learning is written only into the profile file the process loaded, merged with it.
    #[test]
    fn learning_is_merged_into_the_loaded_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent.json");
        let off = Offload::with_config(Config {
            profile_path: Some(absent.clone()),
            persist: true,
            ..cfg(8, GpuMode::Off)
        });
        // 64^3 is a cheap call (timed 1 in CHEAP_SAMPLE): that many calls time one of them.
        let n = 64;
        let a = vec![1.0f64; n * n];
        let mut c = vec![0.0; n * n];
        for _ in 0..CHEAP_SAMPLE {
            off.gemm(
                Trans::No,
                Trans::No,
                n,
                n,
                n,
                1.0,
                &a,
                n,
                &a,
                n,
                0.0,
                &mut c,
                n,
            )
            .unwrap();
        }
        assert_eq!(off.dispatcher().save_learned().unwrap(), None);
        assert!(!absent.exists());
        // with a file: the measured CPU rate lands there, other fields kept
        let path = dir.path().join("p.json");
        let mut p = Profile::embedded();
        p.machine.cpu = crate::profile::Machine::local_cpu();
        p.extra
            .insert("note".into(), serde_json::Value::from("mine"));
        p.save(&path).unwrap();
        let off = Offload::with_config(Config {
            profile_path: Some(path.clone()),
            persist: true,
            ..cfg(8, GpuMode::Off)
        });
        for _ in 0..CHEAP_SAMPLE {
            off.gemm(
                Trans::No,
                Trans::No,
                n,
                n,
                n,
                1.0,
                &a,
                n,
                &a,
                n,
                0.0,
                &mut c,
                n,
            )
            .unwrap();
        }
        assert_eq!(off.dispatcher().save_learned().unwrap(), Some(path.clone()));
        let q = Profile::load(&path).unwrap();
        assert!(!q.cpu_points.is_empty(), "{q:?}");
        assert_eq!(q.extra.get("note"), Some(&serde_json::Value::from("mine")));
        // nothing new learned: nothing written
        assert_eq!(off.dispatcher().save_learned().unwrap(), None);
    }

    fn gemm_outcome(off: &Offload, n: usize) -> Outcome {
        let a = vec![1.0f64; n * n];
        let mut c = vec![0.0; n * n];
        let o = off
            .gemm(
                Trans::No,
                Trans::No,
                n,
                n,
                n,
                1.0,
                &a,
                n,
                &a,
                n,
                0.0,
                &mut c,
                n,
            )
            .unwrap();
        assert!(c.iter().all(|v| *v == n as f64));
        o
    }

    /// A panic in the GPU start-up ends the phase FAILED: with the GPU forced every later call
    /// runs on the CPU at once (it waited for ever while the phase stayed "starting").
    #[test]
    fn a_panic_in_the_start_up_fails_the_phase_and_nobody_waits() {
        let off = Offload::with_config(Config {
            inject: Inject::StartPanic,
            ..cfg(8, GpuMode::Always)
        });
        let d = off.dispatcher();
        assert_eq!(d.core.get(), NOT_STARTED);
        // on a background thread, as `offload run` starts it
        d.start_background();
        assert!(d.wait_for(|d| d.core.get() != STARTING, Some(Duration::from_secs(20))));
        assert_eq!(d.core.get(), FAILED);
        assert!(
            d.gpu_error().unwrap().contains("internal error"),
            "{:?}",
            d.gpu_error()
        );
        for _ in 0..2 {
            let o = gemm_outcome(&off, 64);
            assert_eq!(o.reason, Some(Reason::NoGpu), "{o:?}");
        }
        // and on the calling thread (GPU forced, nothing started yet)
        let off = Offload::with_config(Config {
            inject: Inject::StartPanic,
            ..cfg(8, GpuMode::Always)
        });
        let o = gemm_outcome(&off, 64);
        assert_eq!(o.reason, Some(Reason::NoGpu), "{o:?}");
        assert_eq!(off.dispatcher().core.get(), FAILED);
    }

    /// A fork() child of a process that had loaded CUDA runs its calls on the CPU and says
    /// why (`forked`, not `small`); a child of one that had not may start CUDA itself.
    #[test]
    fn a_forked_child_says_why_its_calls_stay_on_the_cpu() {
        let off = Offload::with_config(cfg(8, GpuMode::Auto));
        let d = off.dispatcher();
        // pretend the parent had started (or was starting) CUDA
        d.core.state.store(STARTING, Relaxed);
        d.forked_child(false);
        assert!(d.is_forked_child());
        let o = gemm_outcome(&off, 200);
        assert_eq!(o.reason, Some(Reason::Forked), "{o:?}");
        assert_eq!(d.stats().reason_count(Reason::Forked), 1);
        // its fast-path thresholds are the model's, not "never": large calls are counted
        // as forked, not small
        assert!(d.threshold(Routine::Gemm, Precision::D) < u64::MAX);
        // the driver loaded in the parent: forked too
        let off = Offload::with_config(cfg(8, GpuMode::Auto));
        off.dispatcher().forked_child(true);
        assert!(off.dispatcher().is_forked_child());
        // neither: a process of its own
        let off = Offload::with_config(cfg(8, GpuMode::Auto));
        let d = off.dispatcher();
        let before = d.core.get();
        d.forked_child(false);
        assert!(!d.is_forked_child());
        assert_eq!(d.core.get(), before);
        assert_ne!(gemm_outcome(&off, 200).reason, Some(Reason::Forked));
    }

    /// A pool of four threads in CPU-library calls (real threads, held inside their calls): a
    /// decision made meanwhile prices the CPU at its share of the cores, and none of those
    /// contended calls is learned from; a call made alone afterwards is.
    #[test]
    fn concurrent_cpu_callers_are_priced_and_not_learned_from() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let mut p = Profile::embedded();
        p.machine.cpu = crate::profile::Machine::local_cpu();
        p.save(&path).unwrap();
        let off = Offload::with_config(Config {
            profile_path: Some(path),
            ..cfg(8, GpuMode::Auto)
        });
        let d = off.dispatcher().clone();
        if d.cpu_backend().is_err() {
            eprintln!(
                "SKIPPED concurrent_cpu_callers_are_priced_and_not_learned_from: no CPU library"
            );
            return;
        }
        let n = 400;
        let quiet = gemm_outcome(&off, n).estimate;
        // what the lone call taught is not what this test looks at
        d.learner.mark_saved();
        let pool = 4;
        let inside = Arc::new(std::sync::Barrier::new(pool + 1));
        let release = Arc::new(std::sync::Barrier::new(pool + 1));
        let lib = d.cpu_backend().unwrap().lib();
        let hs: Vec<_> = (0..pool)
            .map(|_| {
                let (d, inside, release) = (d.clone(), inside.clone(), release.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0.0f64; 16];
                    let req = Request::new(gemm(n, n, n, &mut buf), lib);
                    let mut cpu = || {
                        inside.wait();
                        release.wait();
                        Ok(0)
                    };
                    // SAFETY: the closure stands in for the library: no pointer is read.
                    unsafe { d.execute(&req, &mut cpu) }.unwrap()
                })
            })
            .collect();
        inside.wait();
        assert_eq!(d.load.snapshot().cpu_others, pool as u32);
        let busy = gemm_outcome(&off, n).estimate;
        release.wait();
        for h in hs {
            let o = h.join().unwrap();
            assert_eq!(o.backend, Backend::Cpu);
        }
        let (q, b) = (quiet.unwrap(), busy.unwrap());
        {
            if q.cpu_known {
                let k = (1 + pool).min(d.load.cores()) as f64;
                assert!(
                    (b.cpu_s / q.cpu_s - k).abs() < 1e-6 * k,
                    "busy {} quiet {} k {k}",
                    b.cpu_s,
                    q.cpu_s
                );
                assert_eq!(b.gpu_s, q.gpu_s);
            }
        }
        assert!(
            !d.learner.dirty(),
            "a call measured under contention was learned from"
        );
        // nothing in flight; the pool's threads and this one have called
        assert_eq!(
            d.load.snapshot(),
            load::Snapshot {
                callers: pool as u32 + 1,
                ..load::Snapshot::default()
            }
        );
        // alone again: learned (a call above the cheap-call sampling)
        gemm_outcome(&off, 700);
        assert!(d.learner.dirty(), "a quiet call was not learned from");
    }

    /// A dispatcher whose GPU start-up has just begun (as on a machine with a GPU).
    fn starting() -> Arc<Dispatcher> {
        // a quiet machine (the one the tests run on may not be)
        starting_beside(load::Beside::default())
    }

    /// [`starting`] with `beside` running beside its calls.
    fn starting_beside(beside: load::Beside) -> Arc<Dispatcher> {
        let d = Arc::new(Dispatcher::new(cfg(5, GpuMode::Auto)));
        d.load.fix_beside(Some(beside));
        d.core.state.store(STARTING, Relaxed);
        d.core.since_ns.store(d.now_ns().max(1), Relaxed);
        d
    }

    /// An estimate of `cpu_s` on the CPU and `gpu_s` of GPU compute.
    fn est(cpu_s: f64, gpu_s: f64) -> Estimate {
        Estimate {
            cpu_s,
            cpu_known: true,
            gpu_s,
            h2d_s: 0.0,
            compute_s: gpu_s,
            d2h_s: 0.0,
        }
    }

    /// [`Dispatcher::await_start`] while another thread ends the start-up (`state`) after
    /// `after`.
    fn await_ending_after(
        d: &Arc<Dispatcher>,
        req: &Request,
        e: &Estimate,
        first: Duration,
        after: Duration,
        state: u8,
    ) -> Plan {
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(after);
                d.core.state.store(state, Relaxed);
                d.notify();
            });
            d.await_start(req, e, first)
        })
    }

    /// The savings start: CUDA starts once the missed savings pay for the start-up, and for a
    /// LAPACK call that price includes loading cuSOLVER, which it needs as well.
    #[test]
    fn savings_pay_for_the_start_up_and_for_cusolver_where_a_call_needs_it() {
        let st = Dispatcher::new(cfg(5, GpuMode::Auto)).model.startup;
        let gain = st.start_s + 0.5 * st.solver_s;
        let mut buf = vec![0.0f64; 64];
        for (lapack, starts) in [(true, false), (false, true)] {
            let d = Arc::new(Dispatcher::new(Config {
                start: StartPolicy::Savings,
                ..cfg(5, GpuMode::Auto)
            }));
            // as on a machine with a GPU (here the dispatcher knows there is none)
            d.core.state.store(NOT_STARTED, Relaxed);
            let call = if lapack {
                potrf(4, &mut buf)
            } else {
                gemm(4, 4, 4, &mut buf)
            };
            let req = Request::new(call, LibId::UNKNOWN);
            let plan = d.decide(&req, Some(&est(gain + 1e-3, 1e-3)));
            match plan {
                Plan::Cpu(Reason::StartupNotPaid) => {}
                Plan::Cpu(r) => panic!("lapack {lapack}: cpu ({})", r.as_str()),
                _ => panic!("lapack {lapack}: not the CPU"),
            }
            assert_eq!(
                d.core.get() != NOT_STARTED,
                starts,
                "lapack {lapack}: savings {gain} s against start {} s + cuSOLVER {} s",
                st.start_s,
                st.solver_s
            );
        }
    }

    /// With another CPU-library call of the process in flight, or another thread that has
    /// called the library, a call the GPU would win waits for the start-up even where its
    /// (untrustworthy) CPU estimate is below the start-up left, and may wait that long; alone,
    /// the same call runs on the CPU.
    #[test]
    fn a_call_beside_another_cpu_call_waits_for_the_starting_gpu() {
        let d = starting();
        let mut buf = vec![0.0f64; 16];
        let req = Request::new(gemm(64, 64, 64, &mut buf), LibId::UNKNOWN);
        let need = required_speedup(5);
        let start_s = d.model.startup.start_s;
        // a call the GPU wins by far, whose CPU estimate is under the start-up left
        let e = est(start_s / 4.0, start_s / 400.0);
        assert!(matches!(
            d.wait_or_cpu(&req, &e, need, false),
            Plan::Cpu(Reason::GpuStarting)
        ));
        let other = d.load.cpu_turn();
        let Plan::Wait(first) = d.wait_or_cpu(&req, &e, need, false) else {
            panic!("a call beside another CPU call did not wait");
        };
        assert!(first.as_secs_f64() > e.cpu_s);
        // the start ends after the call's CPU estimate but within the first wait: it waits
        let ready_after = Duration::from_secs_f64(start_s / 2.0);
        let t = Instant::now();
        let plan = await_ending_after(&d, &req, &e, first, ready_after, READY);
        assert!(matches!(plan, Plan::Gpu), "gave up after {:?}", t.elapsed());
        drop(other);
        // nothing in flight, but another thread of the process has called the library (a
        // thread pool): it waits too
        let d = starting();
        d.load.note_caller();
        assert!(matches!(
            d.wait_or_cpu(&req, &e, need, false),
            Plan::Cpu(Reason::GpuStarting)
        ));
        std::thread::scope(|s| {
            s.spawn(|| d.load.note_caller());
        });
        assert!(
            matches!(d.wait_or_cpu(&req, &e, need, false), Plan::Wait(_)),
            "a call of a thread pool did not wait"
        );
        // no other thread has called, but one of the program's threads is at work beside the
        // call (a pool's thread making its first request's data): it waits
        let d = starting_beside(load::Beside {
            other_processes: 0,
            own: 1,
        });
        assert!(
            matches!(d.wait_or_cpu(&req, &e, need, false), Plan::Wait(_)),
            "a call beside the program's other running thread did not wait"
        );
        // nothing of this process, but more than OTHERS_RUNNING_MAX threads of other
        // processes running: it waits; up to that many, it does not
        for (others, waits) in [(OTHERS_RUNNING_MAX, false), (OTHERS_RUNNING_MAX + 1, true)] {
            let d = starting_beside(load::Beside {
                other_processes: others,
                own: 0,
            });
            let plan = d.wait_or_cpu(&req, &e, need, false);
            assert_eq!(
                matches!(plan, Plan::Wait(_)),
                waits,
                "{others} others running"
            );
        }
        // a call the GPU does not win by the required speedup never waits for it
        let d = starting();
        let _other = d.load.cpu_turn();
        let slow_gpu = est(e.cpu_s, e.cpu_s);
        assert!(matches!(
            d.wait_or_cpu(&req, &slow_gpu, need, false),
            Plan::Cpu(Reason::GpuStarting)
        ));
    }

    /// A start-up running past its expected time: the call that decided to wait keeps waiting
    /// while the CPU would still take longer (before, the first wait's end sent a call of
    /// seconds to the CPU: a 4 s `dsyevd` of issue 22's thread pool, on an H100 slower to start
    /// than the profile said), and a start that never ends costs at most the call's CPU time.
    #[test]
    fn an_overrunning_start_up_is_waited_for_while_the_cpu_would_take_longer() {
        let d = starting();
        let mut buf = vec![0.0f64; 16];
        let req = Request::new(gemm(64, 64, 64, &mut buf), LibId::UNKNOWN);
        let need = required_speedup(5);
        let start_s = d.model.startup.start_s;
        // the start ends well after the first wait would have given up
        let ready_after = Duration::from_secs_f64(start_s) + WAIT_SLACK * 4;
        let e = est(20.0, 1e-3);
        let Plan::Wait(first) = d.wait_or_cpu(&req, &e, need, false) else {
            panic!("a 20 s call does not wait for a start of {start_s} s");
        };
        assert!(first < ready_after, "{first:?} {ready_after:?}");
        let t = Instant::now();
        let plan = await_ending_after(&d, &req, &e, first, ready_after, READY);
        assert!(
            matches!(plan, Plan::Gpu),
            "gave up waiting after {:?}",
            t.elapsed()
        );
        assert!(t.elapsed() >= ready_after);

        // a start that never ends: the call runs on the CPU once it has waited its CPU time
        let d = starting();
        let cpu_s = (start_s * 3.0).clamp(0.3, 2.0);
        let e = est(cpu_s, 1e-3);
        let t = Instant::now();
        let plan = match d.wait_or_cpu(&req, &e, need, false) {
            Plan::Wait(first) => d.await_start(&req, &e, first),
            other => other,
        };
        let waited = t.elapsed().as_secs_f64();
        assert!(
            matches!(plan, Plan::Cpu(Reason::GpuStarting)),
            "a start that never ends"
        );
        assert!(
            waited <= cpu_s + 0.2,
            "waited {waited} s for a {cpu_s} s call"
        );

        // a start that fails while a call waits: the CPU, as `no-gpu`
        let d = starting();
        let e = est(20.0, 1e-3);
        let plan = await_ending_after(
            &d,
            &req,
            &e,
            Duration::from_secs(5),
            Duration::from_millis(50),
            FAILED,
        );
        assert!(matches!(plan, Plan::Cpu(Reason::NoGpu)));
    }

    /// A call whose CPU estimate cannot be trusted (here: beside another CPU-library call)
    /// keeps waiting for a start-up that overruns its first wait, up to CROWDED_CPU_FACTOR
    /// times its CPU estimate (issue 22's thread pool on a freshly started H100: the four
    /// threads' first calls gave up together at their first wait's end and ran on the CPU side
    /// by side, 6.1 s against 2.7 s forced); a start that never ends costs it that much.
    #[test]
    fn a_crowded_call_waits_longer_for_an_overrunning_start_up() {
        let mut buf = vec![0.0f64; 16];
        let req = Request::new(gemm(64, 64, 64, &mut buf), LibId::UNKNOWN);
        let need = required_speedup(5);
        let start_s = starting().model.startup.start_s;
        // under the start-up left: alone, it would run on the CPU at once
        let e = est(start_s / 4.0, start_s / 400.0);
        let bound = (e.cpu_s * CROWDED_CPU_FACTOR).max(start_s);

        let d = starting();
        let _other = d.load.cpu_turn();
        let Plan::Wait(first) = d.wait_or_cpu(&req, &e, need, false) else {
            panic!("a crowded call did not wait");
        };
        assert!(first.as_secs_f64() < bound, "{first:?} against {bound} s");
        // the start ends after the first wait, well within the crowded bound
        let ready_after = first + Duration::from_secs_f64((bound - first.as_secs_f64()) / 4.0);
        let t = Instant::now();
        let plan = await_ending_after(&d, &req, &e, first, ready_after, READY);
        assert!(
            matches!(plan, Plan::Gpu),
            "gave up after {:?} (first wait {first:?})",
            t.elapsed()
        );

        // a start that never ends: the CPU once the crowded bound has passed
        let d = starting();
        let _other = d.load.cpu_turn();
        let Plan::Wait(first) = d.wait_or_cpu(&req, &e, need, false) else {
            panic!("a crowded call did not wait");
        };
        let t = Instant::now();
        let plan = d.await_start(&req, &e, first);
        let waited = t.elapsed().as_secs_f64();
        assert!(matches!(plan, Plan::Cpu(Reason::GpuStarting)));
        let expect = bound.max(first.as_secs_f64());
        assert!(
            waited >= expect - 0.02 && waited <= expect + 0.3,
            "waited {waited} s, bound {expect} s"
        );
    }

    proptest! {
        /// The start-up decision of a call alone on the CPU library: wait exactly when the
        /// remaining start-up plus the GPU time beats the CPU by the required speedup.
        #[test]
        fn waits_only_when_start_up_plus_gpu_beats_the_cpu(
            cpu in 1e-3f64..10.0, gpu in 1e-4f64..5.0, start in 0.01f64..3.0, level in 1u8..=10
        ) {
            let d = Arc::new(Dispatcher::new(cfg(level, GpuMode::Auto)));
            d.load.fix_beside(Some(load::Beside::default()));
            // pretend the backend started `start` seconds' worth ago, with a long expected start
            d.core.state.store(STARTING, Relaxed);
            d.core.since_ns.store(d.now_ns().max(1), Relaxed);
            let mut buf = vec![0.0f64; 16];
            let req = Request::new(gemm(64, 64, 64, &mut buf), LibId::UNKNOWN);
            let e = Estimate { cpu_s: cpu, cpu_known: true, gpu_s: gpu, h2d_s: 0.0, compute_s: gpu, d2h_s: 0.0 };
            let need = required_speedup(level);
            let remaining = d.remaining(&d.core, d.model.startup.start_s);
            let plan = d.wait_or_cpu(&req, &e, need, false);
            let wait = matches!(plan, Plan::Wait(_));
            prop_assert_eq!(wait, cpu >= need * (remaining + gpu), "cpu {} gpu {} remaining {}", cpu, gpu, remaining);
            if let Plan::Wait(t) = plan {
                prop_assert!(t.as_secs_f64() <= remaining + WAIT_SLACK.as_secs_f64() + 1e-9);
            }
            let _ = start;
        }
    }
}
