//! The dispatcher: decides per call where it runs, runs it there (falling back to the CPU on any
//! GPU failure), learns from the times it sees, and counts everything.
//!
//! Decision for a call above the fast-path threshold:
//! 1. empty calls, nested calls (made by the CPU library from inside an intercepted call),
//!    invalid arguments and shapes the GPU path does not support stay on the CPU;
//! 2. the model (with learned corrections) predicts CPU and GPU time; the call is offloaded when
//!    `cpu >= required_speedup(level) * gpu`;
//! 3. CUDA is started lazily: the predicted savings of calls that would have gone to the GPU are
//!    summed, and once they exceed the profile's start-up cost the GPU is started in a background
//!    thread (calls keep running on the CPU meanwhile: no call ever waits for start-up, which
//!    also loads the kernels of the common routines before the first offloaded call);
//! 4. one GPU-bound call in [`crate::learn::RECHECK_EVERY`] per size bucket is re-run on the CPU
//!    while the predicted gain is modest, to keep the CPU side of the model honest.

use crate::call::Call;
use crate::cpu::CpuBackend;
use crate::error::{Error, Result};
use crate::gpu::{GpuBackend, Inject, Presized};
use crate::learn::{CorrKey, Learner};
use crate::library::LibId;
use crate::model::{required_speedup, Backend, Estimate, Model, DEFAULT_LEVEL};
use crate::ops::{OpKind, Precision, Routine, Shape};
use crate::output;
use crate::profile::Profile;
use crate::request::Request;
use crate::stats::{slot, Reason, Stats, StatsSnapshot, NSLOT};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Whether the GPU may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuMode {
    /// Use the GPU when the model says it pays.
    Auto,
    /// Never use the GPU (calls are still timed and counted: this measures the CPU-only run).
    Off,
    /// Run every call the GPU backend supports on the GPU, whatever the model predicts (for
    /// measuring the GPU side and for tests); failures still fall back to the CPU.
    Always,
}

/// What is printed to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// Nothing.
    Off,
    /// One line per routine at exit.
    Summary,
    /// One line per timed call, and the summary at exit.
    Calls,
}

/// When CUDA is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPolicy {
    /// At once, on a background thread, when the dispatcher is created (`offload run`'s
    /// default: the user asked for offload, and a one-shot program's heavy calls come early).
    Eager,
    /// On a background thread at the first call the model would send to the GPU.
    Lazy,
    /// On a background thread once the savings missed by calls kept on the CPU would have paid
    /// for the start-up (the library default: a program that never needs the GPU never pays).
    Savings,
}

impl StartPolicy {
    /// `eager`, `lazy` or `savings`.
    pub fn as_str(self) -> &'static str {
        match self {
            StartPolicy::Eager => "eager",
            StartPolicy::Lazy => "lazy",
            StartPolicy::Savings => "savings",
        }
    }
}

/// Dispatcher settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Decision level 1..=10 (see [`crate::model::LEVEL_SPEEDUP`]).
    pub level: u8,
    /// GPU use.
    pub gpu: GpuMode,
    /// Logging.
    pub log: LogMode,
    /// Profile file (`None`: [`Profile::default_path`]).
    pub profile_path: Option<PathBuf>,
    /// Write learned corrections back into the profile file at exit / on [`Dispatcher::save_learned`].
    pub persist: bool,
    /// When CUDA starts.
    pub start: StartPolicy,
    /// A GPU failure injected into every GPU call (tests).
    pub inject: Inject,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            level: DEFAULT_LEVEL,
            gpu: GpuMode::Auto,
            log: LogMode::Off,
            profile_path: None,
            persist: true,
            start: StartPolicy::Savings,
            inject: Inject::None,
        }
    }
}

impl Config {
    /// Reads `GPUKIT_OFFLOAD_LEVEL` (1-10), `GPUKIT_OFFLOAD_GPU` (`auto`|`off`|`always`),
    /// `GPUKIT_OFFLOAD_LOG` (`off`|`summary`|`calls`), `GPUKIT_OFFLOAD_PROFILE` and
    /// `GPUKIT_OFFLOAD_PERSIST` (`1`|`0`). A bad value keeps the default and yields a message.
    pub fn from_env() -> (Config, Vec<Error>) {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) with a custom variable source (for tests and embedders).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> (Config, Vec<Error>) {
        let mut c = Config::default();
        let mut errs = Vec::new();
        let get = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if let Some(v) = get("GPUKIT_OFFLOAD_LEVEL") {
            match v.parse::<u8>() {
                Ok(l) if (1..=10).contains(&l) => c.level = l,
                _ => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_LEVEL",
                    value: v,
                    msg: format!("must be an integer from 1 to 10; using {DEFAULT_LEVEL}"),
                }),
            }
        }
        if let Some(v) = get("GPUKIT_OFFLOAD_GPU") {
            match v.to_ascii_lowercase().as_str() {
                "auto" | "on" | "1" => c.gpu = GpuMode::Auto,
                "off" | "0" => c.gpu = GpuMode::Off,
                "always" => c.gpu = GpuMode::Always,
                _ => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_GPU",
                    value: v,
                    msg: "must be auto, off or always; using auto".into(),
                }),
            }
        }
        if let Some(v) = get("GPUKIT_OFFLOAD_LOG") {
            match v.to_ascii_lowercase().as_str() {
                "off" | "none" | "0" => c.log = LogMode::Off,
                "summary" | "1" => c.log = LogMode::Summary,
                "calls" | "debug" => c.log = LogMode::Calls,
                _ => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_LOG",
                    value: v,
                    msg: "must be summary, calls or off; using off".into(),
                }),
            }
        }
        if let Some(v) = get("GPUKIT_OFFLOAD_PERSIST") {
            match v.as_str() {
                "1" | "on" | "yes" => c.persist = true,
                "0" | "off" | "no" => c.persist = false,
                _ => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_PERSIST",
                    value: v,
                    msg: "must be 1 or 0; using 1".into(),
                }),
            }
        }
        if let Some(v) = get("GPUKIT_OFFLOAD_START") {
            match v.to_ascii_lowercase().as_str() {
                "eager" => c.start = StartPolicy::Eager,
                "lazy" => c.start = StartPolicy::Lazy,
                "savings" => c.start = StartPolicy::Savings,
                _ => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_START",
                    value: v,
                    msg: "must be eager, lazy or savings; using savings".into(),
                }),
            }
        }
        if let Some(v) = get("GPUKIT_OFFLOAD_INJECT_FAILURE") {
            match Inject::parse(&v) {
                Some(i) => c.inject = i,
                None => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_INJECT_FAILURE",
                    value: v,
                    msg: "must be oom, error, info or none (tests only); injecting nothing".into(),
                }),
            }
        }
        if let Some(v) = get(crate::cpu::CPU_LIB_ENV) {
            if let Err(e) = CpuBackend::open(&[v.as_str()]) {
                errs.push(Error::Config {
                    name: crate::cpu::CPU_LIB_ENV,
                    value: v,
                    msg: format!("{e}; the typed API and calibration refuse it, the shim runs the program's own library"),
                });
            }
        }
        c.profile_path = get(crate::profile::PROFILE_ENV).map(PathBuf::from);
        (c, errs)
    }
}

/// Where a call ran and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Backend that produced the result.
    pub backend: Backend,
    /// Why it ran on the CPU (`None` when it ran on the GPU).
    pub reason: Option<Reason>,
    /// Wall time of the call, seconds.
    pub seconds: f64,
    /// The model's prediction, when there was one.
    pub estimate: Option<Estimate>,
    /// LAPACK's `info` (0 for BLAS and for success).
    pub info: i64,
}

const GPU_NOT_STARTED: u8 = 0;
const GPU_STARTING: u8 = 1;
const GPU_READY: u8 = 2;
const GPU_FAILED: u8 = 3;

/// How many of the largest missed calls the start-up thread sizes the GPU buffers for.
pub const PRESIZE_CALLS: usize = 4;

/// A call without its data ([`Call::without_data`]): only its dimensions are kept.
#[derive(Debug, Clone, Copy)]
struct ShapeOnly(Call);

// SAFETY: every pointer in the call is null (made by `Call::without_data`); it is only read for
// its dimensions, from any thread.
unsafe impl Send for ShapeOnly {}
// SAFETY: as above.
unsafe impl Sync for ShapeOnly {}

/// Adds `call` to `kept`, the (at most `cap`) largest calls by [`Call::footprint`] with distinct
/// routine, precision and shape; returns whether it was kept.
fn keep_largest(kept: &mut Vec<ShapeOnly>, call: &Call, cap: usize) -> bool {
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
    let (i, smallest) = kept
        .iter()
        .enumerate()
        .map(|(i, k)| (i, k.0.footprint()))
        .min_by_key(|&(_, f)| f)
        .expect("cap > 0");
    if f > smallest {
        kept[i] = ShapeOnly(call.without_data());
        true
    } else {
        false
    }
}

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Per-thread memo of the model's *uncorrected* estimate (and flops) of recent shapes: the
    /// model never changes after a dispatcher is built, so an entry never goes stale (the
    /// dispatcher id keeps dispatchers apart). A program of many small matrices asks the model
    /// about the same few shapes again and again; the memo turns its interpolation (logarithms,
    /// grid searches, curve lookups: about 1 us) into one comparison.
    static MEMO: RefCell<[Option<MemoEntry>; MEMO_SLOTS]> = const { RefCell::new([None; MEMO_SLOTS]) };
    /// Calls since this thread last timed a cheap CPU-kept call (see [`CHEAP_CPU_S`]).
    static CHEAP_UNTIMED: Cell<u32> = const { Cell::new(0) };
}

const MEMO_SLOTS: usize = 64;

#[derive(Clone, Copy)]
struct MemoEntry {
    key: (u64, OpKind, Precision, Shape),
    estimate: Option<Estimate>,
}

/// A CPU-kept call predicted shorter than this is timed (and learned from) only once in
/// [`CHEAP_SAMPLE`] calls per thread (unless every call is logged): two clock reads and a
/// learner update would otherwise be a visible share of such a call, and the learner needs only
/// a sample of them.
const CHEAP_CPU_S: f64 = 1e-3;
/// See [`CHEAP_CPU_S`].
const CHEAP_SAMPLE: u32 = 16;

static NEXT_DISPATCHER_ID: AtomicU64 = AtomicU64::new(1);

/// Marks the configuration warnings a parent process printed (see
/// [`Dispatcher::report_warnings_once`]).
pub const WARNED_ENV: &str = "GPUKIT_OFFLOAD_WARNED";

/// Sets an environment variable.
///
/// # Safety
/// No other thread may read or write the environment at the same time.
unsafe fn set_env(name: &str, value: &str) {
    // SAFETY: forwarded.
    unsafe { std::env::set_var(name, value) };
}

/// The dispatcher. One per process is usual ([`Dispatcher::global`]); tests make their own.
pub struct Dispatcher {
    /// Distinguishes dispatchers in the per-thread estimate memo.
    id: u64,
    config: Config,
    model: Model,
    learner: Learner,
    stats: Stats,
    profile: Mutex<Profile>,
    profile_path: Option<PathBuf>,
    profile_error: Option<String>,
    gpu: OnceLock<std::result::Result<Arc<GpuBackend>, String>>,
    gpu_state: AtomicU8,
    start_lock: Mutex<()>,
    missed_ns: AtomicU64,
    /// The largest calls kept on the CPU because the GPU was not started (or starting): the
    /// start-up thread sizes the GPU buffers for them.
    missed_calls: Mutex<Vec<ShapeOnly>>,
    thresholds: [AtomicU64; NSLOT],
    cpu: OnceLock<std::result::Result<CpuBackend, String>>,
    warnings: Vec<String>,
    /// Messages printed by [`Dispatcher::warn_once`].
    warned: Mutex<Vec<String>>,
    /// This is a forked child of the process that created the dispatcher.
    forked: AtomicBool,
}

static GLOBAL: OnceLock<Arc<Dispatcher>> = OnceLock::new();

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
        GLOBAL.get_or_init(|| {
            let (cfg, errs) = Config::from_env();
            let mut d = Dispatcher::new(cfg);
            d.warnings.extend(errs.into_iter().map(|e| e.to_string()));
            Arc::new(d)
        })
    }

    /// A dispatcher with these settings. The profile is loaded now (a corrupt one: the embedded
    /// default, with the error in [`Dispatcher::warnings`]); CUDA is not touched.
    pub fn new(config: Config) -> Dispatcher {
        let (profile, path, err) = match &config.profile_path {
            Some(p) if p.exists() => match Profile::load(p) {
                Ok(prof) => (prof, Some(p.clone()), None),
                Err(e) => (Profile::embedded(), Some(p.clone()), Some(e)),
            },
            Some(p) => (Profile::embedded(), Some(p.clone()), None),
            None => {
                let (prof, from, err) = Profile::resolve();
                (prof, from.or_else(Profile::default_path), err)
            }
        };
        let mut warnings = Vec::new();
        let profile_error = err.map(|e| {
            let msg = format!("{e}; using the built-in default profile");
            warnings.push(msg.clone());
            msg
        });
        let model = profile.model();
        let learner = Learner::from_map(&profile.corrections);
        let d = Dispatcher {
            id: NEXT_DISPATCHER_ID.fetch_add(1, Relaxed),
            thresholds: [const { AtomicU64::new(0) }; NSLOT],
            config,
            model,
            learner,
            stats: Stats::default(),
            profile: Mutex::new(profile),
            profile_path: path,
            profile_error,
            gpu: OnceLock::new(),
            gpu_state: AtomicU8::new(GPU_NOT_STARTED),
            start_lock: Mutex::new(()),
            missed_ns: AtomicU64::new(0),
            missed_calls: Mutex::new(Vec::new()),
            cpu: OnceLock::new(),
            warnings,
            warned: Mutex::new(Vec::new()),
            forked: AtomicBool::new(false),
        };
        if d.config.gpu != GpuMode::Off && !gpukit_jit::libs::driver_present() {
            let _ = d
                .gpu
                .set(Err("no CUDA driver (libcuda) on this machine".into()));
            d.gpu_state.store(GPU_FAILED, Relaxed);
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

    /// The learned corrections.
    pub fn learner(&self) -> &Learner {
        &self.learner
    }

    /// Problems met while configuring (bad environment values, a corrupt profile).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The error that made the dispatcher fall back to the embedded profile, if any.
    pub fn profile_error(&self) -> Option<&str> {
        self.profile_error.as_deref()
    }

    /// The profile file corrections are saved to.
    pub fn profile_path(&self) -> Option<&PathBuf> {
        self.profile_path.as_ref()
    }

    /// Statistics so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    fn compute_thresholds(&self) {
        let never = self.config.gpu != GpuMode::Off && self.gpu_state.load(Relaxed) == GPU_FAILED;
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

    /// Starts the GPU backend now (blocking). Used by calibration and tests; the dispatcher
    /// itself starts it lazily.
    pub fn start_gpu(&self) -> Result<&Arc<GpuBackend>> {
        self.start_now();
        match self.gpu.get() {
            Some(Ok(g)) => Ok(g),
            Some(Err(e)) => Err(Error::GpuUnavailable(e.clone())),
            None => Err(Error::GpuUnavailable("GPU start-up did not finish".into())),
        }
    }

    /// Starts the GPU (if not yet), loads the common kernels and sizes the lane's buffers for
    /// the largest calls missed so far; returns what was reserved (`None`: not started here).
    fn start_now(&self) -> Option<Presized> {
        if self.forked.load(Relaxed) {
            return None;
        }
        let _g = self.start_lock.lock();
        if self.gpu.get().is_some() {
            return None;
        }
        self.gpu_state.store(GPU_STARTING, Relaxed);
        let r = GpuBackend::start().map(Arc::new).map_err(|e| e.to_string());
        let mut presized = None;
        if let Ok(g) = &r {
            let calls: Vec<Call> = self.missed_calls.lock().iter().map(|c| c.0).collect();
            // warm-up and sizing for what this process called only (so cuSOLVER is loaded
            // here only if a LAPACK call came)
            let mut kinds: Vec<(OpKind, Precision)> =
                calls.iter().map(|c| (c.kind(), c.prec)).collect();
            kinds.sort();
            kinds.dedup();
            g.warm_up(&kinds);
            if !calls.is_empty() {
                presized = g.presize(&calls).ok();
            }
            if self.config.log == LogMode::Calls {
                output::line(&format!(
                    "gpukit-offload: GPU start-up steps: {}",
                    g.startup_report()
                ));
            }
        }
        if let Ok(g) = &r {
            if self.config.inject != Inject::None {
                g.set_inject(self.config.inject);
            }
        }
        let ok = r.is_ok();
        let _ = self.gpu.set(r);
        self.gpu_state
            .store(if ok { GPU_READY } else { GPU_FAILED }, Relaxed);
        if !ok {
            self.compute_thresholds();
        }
        presized
    }

    fn start_background(self: &Arc<Self>) {
        if self
            .gpu_state
            .compare_exchange(GPU_NOT_STARTED, GPU_STARTING, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("gpukit-offload-start".into())
            .spawn(move || {
                // Normal priority on purpose: run at nice 19 while CPU calls were in flight (a
                // variant measured on the H200), start-up took 4.6 s instead of 1.3 s, because
                // OpenBLAS's spinning workers keep every core busy, and the whole-program run
                // was 12.45 s instead of 9.79 s.
                let t0 = Instant::now();
                let presized = me.start_now();
                if me.config.log == LogMode::Calls {
                    let mib = |b: usize| b >> 20;
                    let p = presized.unwrap_or_default();
                    output::line(&format!(
                        "gpukit-offload: background start {} in {:.3}s; reserved for missed calls: device {} MiB (need {}), pinned {} MiB (need {})",
                        if me.gpu().is_some() { "ready" } else { "failed" },
                        t0.elapsed().as_secs_f64(),
                        mib(p.dev),
                        mib(p.need_dev),
                        mib(p.pinned),
                        mib(p.need_pinned),
                    ));
                }
            });
        if spawned.is_err() {
            self.start_now();
        }
    }

    /// Injects a GPU failure into the following calls (tests); starts nothing.
    pub fn inject_failure(&self, i: Inject) {
        if let Some(g) = self.gpu() {
            g.set_inject(i);
        }
    }

    /// The estimate for a request with learned corrections applied.
    pub fn estimate(&self, req: &Request) -> Option<Estimate> {
        let mut e = self.model_estimate(req)?;
        let (fc, fg) = self.learner.factors(
            CorrKey::new(req.kind, req.prec(), Backend::Cpu, req.flops),
            CorrKey::new(req.kind, req.prec(), Backend::Gpu, req.flops),
        );
        e.cpu_s *= fc;
        e.gpu_s *= fg;
        Some(e)
    }

    /// The model's uncorrected estimate of a request, through the per-thread memo.
    fn model_estimate(&self, req: &Request) -> Option<Estimate> {
        let (kind, prec, shape) = (req.kind, req.prec(), req.shape);
        let key = (self.id, kind, prec, shape);
        let h = (shape.m ^ shape.n.rotate_left(21) ^ shape.k.rotate_left(42) ^ self.id)
            .wrapping_add(((kind.routine as u64) << 3) ^ ((kind.variant as u64) << 1) ^ prec as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (h >> 58) as usize % MEMO_SLOTS;
        let hit = MEMO.with(|m| {
            m.borrow()[slot]
                .filter(|e| e.key == key)
                .map(|e| e.estimate)
        });
        if let Some(v) = hit {
            return v;
        }
        let estimate = self.model.estimate(kind, prec, shape);
        MEMO.with(|m| m.borrow_mut()[slot] = Some(MemoEntry { key, estimate }));
        estimate
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
        let est = self.estimate(req);
        let reason = self.decide(req, est.as_ref());
        if reason.is_none() {
            if let (Some(gpu), Some(e)) = (self.gpu(), est) {
                let t0 = Instant::now();
                // SAFETY: forwarded from the caller; check() passed; gpu::unsupported() is None.
                let r = unsafe { gpu.run(&req.call) };
                let secs = t0.elapsed().as_secs_f64();
                match r {
                    Ok(()) => {
                        self.learner.observe(
                            CorrKey::new(req.kind, req.prec(), Backend::Gpu, req.flops),
                            e.gpu_s,
                            secs,
                        );
                        self.stats.record_gpu(s, secs, e.cpu_s, e.gpu_s);
                        self.log_call(req, Backend::Gpu, None, secs, Some(&e));
                        return Ok(Outcome {
                            backend: Backend::Gpu,
                            reason: None,
                            seconds: secs,
                            estimate: Some(e),
                            info: 0,
                        });
                    }
                    Err(f) => {
                        // after `Lost` the caller's in-place operands are partly
                        // overwritten: the CPU must not run on them
                        let Some(reason) = f.kind.fallback_reason() else {
                            return Err(Error::Gpu {
                                what: "copying results to the caller",
                                detail: f.to_string(),
                            });
                        };
                        if self.config.log == LogMode::Calls {
                            output::line(&format!(
                                "gpukit-offload: {} GPU path failed ({f}); running on the CPU",
                                req.name()
                            ));
                        }
                        return self.timed_cpu(req, reason, est, cpu);
                    }
                }
            }
        }
        self.timed_cpu(req, reason.unwrap_or(Reason::NoGpu), est, cpu)
    }

    /// Runs a call on the CPU without timing it (counted, not learned from).
    fn untimed_cpu(
        &self,
        s: usize,
        reason: Reason,
        est: Option<Estimate>,
        cpu: &mut dyn FnMut() -> Result<i64>,
    ) -> Result<Outcome> {
        let info = run_cpu_nested(cpu)?;
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
        cpu: &mut dyn FnMut() -> Result<i64>,
    ) -> Result<Outcome> {
        // (with per-call logging on, every call is timed: the log is for reading them all)
        if self.config.log != LogMode::Calls
            && est.is_some_and(|e| e.cpu_s < CHEAP_CPU_S)
            && CHEAP_UNTIMED.with(|c| {
                let n = c.get() + 1;
                c.set(if n >= CHEAP_SAMPLE { 0 } else { n });
                n < CHEAP_SAMPLE
            })
        {
            return self.untimed_cpu(req.slot, reason, est, cpu);
        }
        let t0 = Instant::now();
        let info = run_cpu_nested(cpu)?;
        let secs = t0.elapsed().as_secs_f64();
        if let Some(e) = est {
            self.learner.observe(
                CorrKey::new(req.kind, req.prec(), Backend::Cpu, req.flops),
                e.cpu_s,
                secs,
            );
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

    /// `None`: run on the GPU; else the reason to stay on the CPU.
    fn decide(self: &Arc<Self>, req: &Request, est: Option<&Estimate>) -> Option<Reason> {
        if self.config.gpu == GpuMode::Off {
            return Some(Reason::Disabled);
        }
        if crate::gpu::unsupported(&req.call).is_some() {
            return Some(Reason::Unsupported);
        }
        if self.config.gpu == GpuMode::Always {
            if self.gpu_state.load(Relaxed) != GPU_READY {
                self.start_now();
            }
            return (self.gpu_state.load(Relaxed) != GPU_READY).then_some(Reason::NoGpu);
        }
        let e = est?;
        let need = required_speedup(self.config.level);
        if e.cpu_s < need * e.gpu_s {
            return Some(Reason::CpuFaster);
        }
        match self.gpu_state.load(Relaxed) {
            GPU_READY => {}
            GPU_FAILED => return Some(Reason::NoGpu),
            GPU_STARTING => {
                self.note_missed(&req.call);
                return Some(Reason::GpuStarting);
            }
            _ => {
                self.note_missed(&req.call);
                // No call ever waits for CUDA start-up: the savings this call misses are added
                // up, and once they would have paid for start-up CUDA starts on a background
                // thread while this call (and every call until the GPU is ready) runs on the CPU.
                let gain = (e.cpu_s - e.gpu_s).max(0.0);
                let missed =
                    self.missed_ns.fetch_add((gain * 1e9) as u64, Relaxed) as f64 * 1e-9 + gain;
                if missed > self.model.startup_s {
                    self.start_background();
                }
                return Some(Reason::StartupNotPaid);
            }
        }
        if e.speedup() < 2.0 * need && self.learner.take_recheck(req.kind, req.prec(), req.flops) {
            return Some(Reason::Recheck);
        }
        None
    }

    /// Remembers a call that would have gone to the GPU had it been started (its dimensions
    /// only), for the start-up thread's buffer sizing.
    fn note_missed(&self, call: &Call) {
        keep_largest(&mut self.missed_calls.lock(), call, PRESIZE_CALLS);
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
            .map(|e| format!(" predicted cpu={:.4}s gpu={:.4}s", e.cpu_s, e.gpu_s))
            .unwrap_or_default();
        output::line(&format!(
            "gpukit-offload: {} {} -> {}{} {:.4}s{}",
            req.name(),
            req.shape,
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

    /// Prints a message once per dispatcher (`gpukit-offload: ` is prepended).
    pub fn warn_once(&self, msg: &str) {
        let mut w = self.warned.lock();
        if w.iter().any(|m| m == msg) {
            return;
        }
        w.push(msg.to_string());
        drop(w);
        output::line(&format!("gpukit-offload: {msg}"));
    }

    /// Prints [`Dispatcher::warnings`] unless this process was started by a process that
    /// printed the same ones (the shim marks them in `GPUKIT_OFFLOAD_WARNED`, which child
    /// processes inherit), so a bad setting is named once per process tree.
    pub fn report_warnings_once(&self) {
        if self.warnings.is_empty() {
            return;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&self.warnings, &mut h);
        let mark = format!("{:016x}", std::hash::Hasher::finish(&h));
        if std::env::var(WARNED_ENV).is_ok_and(|v| v == mark) {
            return;
        }
        for w in &self.warnings {
            self.warn_once(w);
        }
        // SAFETY: called from the shim's constructor, before the program's main and its threads.
        unsafe { set_env(WARNED_ENV, &mark) };
    }

    /// Fork handler (before): takes every lock a call can take, in one order.
    pub(crate) fn fork_prepare(&self) {
        std::mem::forget(self.warned.lock());
        std::mem::forget(self.missed_calls.lock());
        std::mem::forget(self.profile.lock());
        self.learner.fork_lock();
        LibId::fork_lock();
    }

    /// Fork handler (parent, after): releases what [`Dispatcher::fork_prepare`] took.
    ///
    /// # Safety
    /// Only right after `fork_prepare` on this thread.
    pub(crate) unsafe fn fork_parent(&self) {
        // SAFETY: (whole block) every lock is held by fork_prepare's forgotten guards.
        unsafe {
            LibId::fork_unlock();
            self.learner.fork_unlock();
            self.profile.force_unlock();
            self.missed_calls.force_unlock();
            self.warned.force_unlock();
        }
    }

    /// Fork handler (child): releases the locks and starts the child's own bookkeeping (see
    /// [`crate::fork`]).
    ///
    /// # Safety
    /// Only in the child, right after `fork_prepare` ran in the parent.
    pub(crate) unsafe fn fork_child(&self) {
        // SAFETY: forwarded.
        unsafe { self.fork_parent() };
        self.forked.store(true, Relaxed);
        self.stats.reset();
        self.learner.forked_child();
        self.missed_ns.store(0, Relaxed);
        self.missed_calls.lock().clear();
        if self.config.gpu != GpuMode::Off {
            self.gpu_state.store(GPU_FAILED, Relaxed);
            self.compute_thresholds();
        }
    }

    /// Starts CUDA in the background now when the policy is [`StartPolicy::Eager`] and a GPU
    /// may be used.
    pub fn start_if_eager(self: &Arc<Self>) {
        if self.config.start == StartPolicy::Eager
            && self.config.gpu != GpuMode::Off
            && self.gpu_state.load(Relaxed) == GPU_NOT_STARTED
        {
            self.start_background();
        }
    }

    /// Writes the learned corrections into the profile file, if anything was learned, persisting
    /// is enabled and the profile was not corrupt (a corrupt file is left for the user to see).
    /// Returns the path written.
    pub fn save_learned(&self) -> Result<Option<PathBuf>> {
        if !self.config.persist || self.profile_error.is_some() || !self.learner.dirty() {
            return Ok(None);
        }
        let Some(path) = self.profile_path.clone() else {
            return Ok(None);
        };
        let mut p = self.profile.lock();
        p.corrections = self.learner.snapshot();
        p.save(&path)?;
        self.learner.mark_saved();
        Ok(Some(path))
    }

    /// The end-of-run work: prints the summary (per the log mode) and persists corrections.
    /// Never panics; problems go to stderr.
    pub fn finish(&self) {
        if self.config.log != LogMode::Off {
            output::emit(&self.stats().summary());
        }
        if let Err(e) = self.save_learned() {
            output::line(&format!(
                "gpukit-offload: could not save learned corrections: {e}"
            ));
        }
    }
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
    use super::*;

    #[test]
    fn memoised_estimates_equal_the_model_and_stay_per_dispatcher() {
        let tmp = std::env::temp_dir().join(format!("gpukit-memo-{}", std::process::id()));
        let cfg = |level| Config {
            level,
            gpu: GpuMode::Off,
            log: LogMode::Off,
            profile_path: Some(tmp.join("none.json")),
            persist: false,
            ..Config::default()
        };
        let (a, b) = (Dispatcher::new(cfg(1)), Dispatcher::new(cfg(10)));
        let mut buf = vec![0.0f64; 16];
        for (m, n, k) in [
            (100, 100, 100),
            (300, 7, 1000),
            (100, 100, 100),
            (5000, 5000, 64),
        ] {
            let call = Request::new(gemm(m, n, k, &mut buf), LibId::UNKNOWN);
            let want = a.model.estimate(call.kind, call.prec(), call.shape);
            // twice: the second answer comes from the memo and must be the same
            for _ in 0..2 {
                assert_eq!(a.estimate(&call), want);
                assert_eq!(
                    b.estimate(&call),
                    b.model.estimate(call.kind, call.prec(), call.shape)
                );
            }
        }
        // a third dispatcher with its own learned correction: the memo must not hide it
        let c = Dispatcher::new(cfg(5));
        let call = Request::new(gemm(100, 100, 100, &mut buf), LibId::UNKNOWN);
        let key = CorrKey::new(call.kind, call.prec(), Backend::Cpu, call.flops);
        let base = c.estimate(&call).unwrap();
        c.learner.observe(key, base.cpu_s, base.cpu_s * 4.0);
        let after = c.estimate(&call).unwrap();
        assert!(
            (after.cpu_s / base.cpu_s - 2.0).abs() < 1e-9,
            "{after:?} vs {base:?}"
        );
        assert_eq!(after.gpu_s, base.gpu_s);
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
        ]));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!((c.level, c.gpu), (3, GpuMode::Always));
        let (c, _) = Config::from_vars(vars(&[("GPUKIT_OFFLOAD_GPU", " OFF ")]));
        assert_eq!(c.gpu, GpuMode::Off);
        let (c, errs) = Config::from_vars(vars(&[
            ("GPUKIT_OFFLOAD_LEVEL", "eleven"),
            ("GPUKIT_OFFLOAD_GPU", "sometimes"),
        ]));
        assert_eq!((c.level, c.gpu), (Config::default().level, GpuMode::Auto));
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(
            text[0].contains("GPUKIT_OFFLOAD_LEVEL=\"eleven\""),
            "{text:?}"
        );
        assert!(
            text[1].contains("GPUKIT_OFFLOAD_GPU") && text[1].contains("always"),
            "{text:?}"
        );
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
        // potrf 6000: 6000^2 doubles; gemm: 3 * 3000*6000 doubles... (A 3000x6000, B 6000x3000, C 3000^2)
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
}
