//! Running an f32 GEMM with our kernels: plan (per shape and device), then launch.
//!
//! [`sgemm`] chooses a plan with [`super::plan::choose`] (the device's attributes and the paths
//! forced through the environment, [`super::path`]) and runs it; [`sgemm_with_plan`] runs a plan
//! from the caller (benches, tests). Split-K products write their K slices into a workspace from
//! the device's caching allocator (charged to the current owner, like the `wgmma` pack buffers)
//! and a deterministic reduction sums them and applies alpha and beta.

use super::desc::{Precision, RawGemm};
use super::kernels::{self, Variant};
use super::operand::{self, OperandView};
use super::pack;
use super::path::{self, Paths};
use super::plan::{self, Family, Operands, Plan, Problem, Source, TileConfig};
use super::tail::Tail;
use super::tma::{self, Rounding};
use super::tune::{self, TuneMode};
use crate::alloc::current_owner;
use crate::attributes::DeviceAttributes;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::{Stream, EVENT_TIMING_DRIVER};
use gpukit_jit::{KernelArg, LaunchConfig};

/// Grouped tile order of every kernel: GROUP_M tile rows per group (L2 reuse).
const GROUP_M: i32 = 8;
/// Most blocks in grid dimension z (batch entries x K slices per launch).
const MAX_GRID_Z: usize = 65535;

/// The device a stream belongs to (gpukit-core's shared state for that ordinal: attributes,
/// allocator, kernel registry).
fn device_of(stream: &Stream) -> Result<Device> {
    Device::open(stream.cuda().context().ordinal())
}

/// The paths [`sgemm`] may take on `dev`: the environment's ([`path::paths_from_env`]), with
/// [`Paths::tma_rounding`] cleared unless the device's tensor copies round to TF32 (probed once
/// per device on the first call that could use them, [`tma::tensor_copies_round`]).
pub fn paths_for(dev: &Device) -> Result<Paths> {
    let mut paths = path::paths_from_env()?;
    if paths.tma_rounding {
        paths.tma_rounding =
            dev.attributes().supports_wgmma() && tma::tensor_copies_round(dev)?.rounds;
    }
    Ok(paths)
}

/// What a plan depends on: the device (its attributes are fixed per ordinal), the precision, the
/// product's shape and layout facts, the paths and the autotuner's mode.
type PlanKey = (usize, Precision, Problem, Paths, TuneMode);

/// How a cached plan was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chosen {
    /// The model's plan: [`sgemm`] tunes the class on its next call (unless tuning is off).
    Model,
    /// A choice read from the class's file and not yet run through the write check in this
    /// process: [`sgemm`] checks it on a scratch C first ([`check_stored`]).
    Unchecked,
    /// A measured choice (or the model's plan where tuning is off or did not apply).
    Final,
}

/// Plans already chosen in this process ([`plan_for`], [`sgemm`]): a program calls a few shapes
/// many times, so each call after the first skips planning and the tuner's lookups. Bounded:
/// cleared when it holds [`PLAN_CACHE_ENTRIES`] plans.
static PLANS: std::sync::Mutex<Option<std::collections::HashMap<PlanKey, (Plan, Chosen)>>> =
    std::sync::Mutex::new(None);
/// Most plans [`PLANS`] keeps before it starts over.
const PLAN_CACHE_ENTRIES: usize = 4096;

fn cached(key: &PlanKey) -> Option<(Plan, Chosen)> {
    // A poisoned lock (a panic while holding it) only skips the cache.
    PLANS
        .lock()
        .ok()
        .and_then(|g| g.as_ref().and_then(|m| m.get(key).copied()))
}

fn cache(key: PlanKey, plan: Plan, chosen: Chosen) {
    if let Ok(mut guard) = PLANS.lock() {
        let m = guard.get_or_insert_with(std::collections::HashMap::new);
        if m.len() >= PLAN_CACHE_ENTRIES {
            m.clear();
        }
        m.insert(key, (plan, chosen));
    }
}

/// Forgets the plans of this process: the plan cache and the tuner's choices in memory (benches
/// that measure the tuner anew; the tuning files stay).
pub fn forget_plans() {
    if let Ok(mut guard) = PLANS.lock() {
        *guard = None;
    }
    tune::forget_memory();
}

/// The autotuner's class of a product on `dev` ([`tune::ClassKey`]).
fn class_key(dev: &Device, precision: Precision, p: &Problem, paths: &Paths) -> tune::ClassKey {
    let device = tune::DeviceKey::new(
        dev.attributes(),
        gpukit_jit::libs::driver_version(),
        gpukit_jit::nvrtc_version().unwrap_or((0, 0)),
    );
    tune::ClassKey::new(device, precision, p, paths)
}

/// The autotuner's shape class of `g` on `dev` for `precision`, under the paths of
/// [`paths_for`]: the key of its choice in memory ([`tune::known`]) and of its file
/// ([`tune::ClassKey::file_name`] in [`tune::disk_dir`]).
pub fn class_of(dev: &Device, precision: Precision, g: &RawGemm) -> Result<tune::ClassKey> {
    let paths = paths_for(dev)?;
    Ok(class_key(dev, precision, &Problem::of(g), &paths))
}

/// The plan and how it was chosen, from the cache or: a measured choice of the product's class
/// (in memory or on disk, [`tune::lookup`]), else the model's plan.
fn chosen_plan(dev: &Device, precision: Precision, g: &RawGemm) -> Result<(Plan, Chosen, PlanKey)> {
    let paths = paths_for(dev)?;
    let mode = TuneMode::from_env()?;
    let problem = Problem::of(g);
    let key: PlanKey = (dev.ordinal(), precision, problem, paths, mode);
    if let Some((p, c)) = cached(&key) {
        return Ok((p, c, key));
    }
    let measured = if mode == TuneMode::Off {
        None
    } else {
        tune::lookup(
            &class_key(dev, precision, &problem, &paths),
            mode,
            tune::disk_dir().as_deref(),
            &problem,
            dev.attributes(),
        )
    };
    let (plan, chosen) = match measured {
        Some((p, true)) => (p, Chosen::Final),
        Some((p, false)) => (p, Chosen::Unchecked),
        None => {
            let model = plan_with_paths(dev.attributes(), &paths, precision, g)?;
            let chosen = if mode == TuneMode::Off {
                Chosen::Final
            } else {
                Chosen::Model
            };
            (model, chosen)
        }
    };
    cache(key, plan, chosen);
    Ok((plan, chosen, key))
}

/// The plan [`sgemm`] uses for `g` on `dev` now: a measured choice of its shape class where the
/// autotuner has one (this process, or its file on disk: [`super::tune`]), else the model's plan
/// ([`plan_with_paths`] with the paths of [`paths_for`]); cached per device, precision, problem,
/// paths and tuning mode. Never measures (no stream): [`sgemm`] does, on its first call of a
/// class.
pub fn plan_for(dev: &Device, precision: Precision, g: &RawGemm) -> Result<Plan> {
    Ok(chosen_plan(dev, precision, g)?.0)
}

/// The plan for `g` on a device with attributes `dev` under `paths` (no GPU needed: the
/// planner is pure).
pub fn plan_with_paths(
    dev: &DeviceAttributes,
    paths: &Paths,
    precision: Precision,
    g: &RawGemm,
) -> Result<Plan> {
    plan::choose(precision, &Problem::of(g), dev, paths)
}

/// Single-precision GEMM with our kernels; the plan is chosen per shape and device: on the first
/// product of a shape class the autotuner times the model's best candidates on this stream
/// (scratch C, the caller's A and B; see [`super::tune`]) unless `GPUKIT_GEMM_TUNE=off`, or
/// takes the class's choice measured before (this process, or its file on disk).
///
/// # Safety
/// `g.a`, `g.b` and `g.c` must be device addresses in the context of `stream`, valid for
/// [`RawGemm::required_len`] `f32` elements each, and C must not overlap A or B; the memory must
/// stay valid until the stream has run the work enqueued here.
pub unsafe fn sgemm(stream: &Stream, precision: Precision, g: &RawGemm) -> Result<()> {
    g.validate()?;
    let dev = device_of(stream)?;
    let (mut plan, chosen, key) = chosen_plan(&dev, precision, g)?;
    match chosen {
        // SAFETY: forwarded from the caller (the tuner reads A and B within their spans and
        // writes only its own scratch C).
        Chosen::Model => plan = unsafe { tune_class(stream, &dev, precision, g, plan, key) }?,
        // SAFETY: as above.
        Chosen::Unchecked => plan = unsafe { check_stored(stream, &dev, precision, g, plan, key) }?,
        Chosen::Final => {}
    }
    // SAFETY: forwarded from the caller.
    unsafe { run(stream, &dev, g, &plan) }
}

/// Times the product's candidates on `stream` ([`tune::tune`]) and records the choice; the
/// model's plan where the product is not tuned (see [`super::tune`]). One thread measures a
/// class at a time (others wait for its choice, [`tune::begin`]); processes sharing the tuning
/// directory take turns ([`tune::lock_dir`]) and read what another one measured meanwhile.
///
/// # Safety
/// As for [`sgemm`]; `g` is validated.
unsafe fn tune_class(
    stream: &Stream,
    dev: &Device,
    precision: Precision,
    g: &RawGemm,
    model: Plan,
    key: PlanKey,
) -> Result<Plan> {
    let untuned = |final_: bool| {
        tune::count_untuned();
        if final_ {
            cache(key, model, Chosen::Final);
        }
        Ok(model)
    };
    if g.m == 0 || g.n == 0 || g.batch == 0 || g.k == 0 || g.alpha == 0.0 {
        // No product to time: C = beta * C.
        return Ok(model);
    }
    if model.estimate_us > tune::MAX_TUNED_US {
        return untuned(true);
    }
    if can_measure_on(stream).is_err() {
        // Not on this stream (see can_measure_on); a later call on another stream may tune.
        return untuned(false);
    }
    let (_, _, problem, paths, mode) = key;
    let class = class_key(dev, precision, &problem, &paths);
    let claim = match tune::begin(&class, true) {
        tune::Begin::Measure(c) => c,
        tune::Begin::Known(choice) => {
            // Measured by another thread meanwhile (a choice of this class always fits its
            // products: `plan_for` fails only for a choice of another plan space).
            return match choice.plan_for(precision, &problem, dev.attributes(), &paths) {
                Some(p) if tune::checked(&class) => {
                    cache(key, p, Chosen::Final);
                    Ok(p)
                }
                // Read from disk by another thread, not checked yet.
                // SAFETY: forwarded from the caller.
                Some(p) => unsafe { check_stored(stream, dev, precision, g, p, key) },
                None => untuned(true),
            };
        }
        tune::Begin::Busy => return untuned(false),
    };
    let dir = tune::disk_dir();
    let turn = dir.as_deref().and_then(tune::lock_dir);
    if mode == TuneMode::On {
        if let Some(p) = dir
            .as_deref()
            .and_then(|d| tune::lookup_disk(&class, d, &problem, dev.attributes()))
        {
            // Another process measured the class meanwhile: its file is checked like any other.
            drop((turn, claim));
            cache(key, p, Chosen::Unchecked);
            // SAFETY: forwarded from the caller.
            return unsafe { check_stored(stream, dev, precision, g, p, key) };
        }
    }
    // SAFETY: forwarded from the caller.
    let report = unsafe { measure_class(stream, dev, precision, g, model, key, &class, dir) }?;
    drop(claim);
    match report {
        Some(r) => Ok(r.chosen),
        // No scratch C, or no candidate ran: the model's plan now, tuning again next time.
        None => untuned(false),
    }
}

/// Runs a choice read from disk (`stored`, for `g`) once into a scratch C through the write check
/// ([`GpuTimer::check`]) before the product uses it, once per class and process: a file is data
/// to validate, and a valid-looking one could still name a plan that leaves C unwritten. Passed:
/// the class's choice is marked checked and `stored` returned. Failed: the choice is dropped
/// (counted as a rejected file) and the class measured anew ([`tune_class`], which overwrites
/// the file). Where no check can be made now (a stream in graph capture, no scratch memory),
/// `stored` runs unchecked this time and is checked on a later call.
///
/// # Safety
/// As for [`sgemm`]; `g` is validated.
unsafe fn check_stored(
    stream: &Stream,
    dev: &Device,
    precision: Precision,
    g: &RawGemm,
    stored: Plan,
    key: PlanKey,
) -> Result<Plan> {
    let (_, _, problem, paths, _) = key;
    let class = class_key(dev, precision, &problem, &paths);
    if tune::checked(&class) {
        cache(key, stored, Chosen::Final);
        return Ok(stored);
    }
    if g.m == 0 || g.n == 0 || g.batch == 0 || g.k == 0 || g.alpha == 0.0 {
        // Nothing to check: these run the beta-scaling kernel whatever the plan.
        return Ok(stored);
    }
    if stream_is_capturing(stream) {
        return Ok(stored);
    }
    // SAFETY: forwarded from the caller (A and B read within their spans).
    let Some(timer) = (unsafe { GpuTimer::new(stream, dev, g, false) })? else {
        return Ok(stored);
    };
    match timer.check(&stored) {
        Ok(()) => {
            tune::mark_checked(&class);
            cache(key, stored, Chosen::Final);
            Ok(stored)
        }
        Err(Error::GemmUnwritten { .. }) => {
            drop(timer);
            tune::reject_held(&class);
            let model = plan_with_paths(dev.attributes(), &paths, precision, g)?;
            cache(key, model, Chosen::Model);
            // SAFETY: forwarded from the caller.
            unsafe { tune_class(stream, dev, precision, g, model, key) }
        }
        Err(e) => Err(e),
    }
}

/// What one measurement of a product's class found ([`tune_now`]).
#[derive(Debug, Clone)]
pub struct TuneReport {
    /// The plan chosen (now the class's plan).
    pub chosen: Plan,
    /// The model's plan.
    pub model: Plan,
    /// Every candidate, with its microseconds per product (infinite: it failed to run, or was
    /// not run within [`tune::WARM_BUDGET`]).
    pub timed: Vec<(Plan, f64)>,
    /// Every candidate ran (else the choice is kept in this process only).
    pub complete: bool,
    /// Host time the measurement took (microseconds: kernel compiles and loads, the timed
    /// runs, the waits for them).
    pub host_us: u64,
}

/// Measures the shape class of `g` now on `stream`, whatever is known of it already, and makes
/// the result the class's plan (in memory, and on disk where the kernel cache has a directory
/// and tuning is not off): what [`sgemm`] does on a class's first product, without the product
/// itself and without the limits that keep the first product cheap ([`tune::MAX_TUNED_US`]).
/// For benches and tests. An error when the stream cannot be measured on (a driver older than
/// CUDA 12.8, a green context's stream, a stream being captured), when the model's plan
/// left an element of C unwritten and no other candidate ran ([`Error::GemmUnwritten`]), or when
/// no candidate could run (no scratch C).
///
/// # Safety
/// As for [`sgemm`], except that C is neither read nor written.
pub unsafe fn tune_now(stream: &Stream, precision: Precision, g: &RawGemm) -> Result<TuneReport> {
    g.validate()?;
    let dev = device_of(stream)?;
    let paths = paths_for(&dev)?;
    let problem = Problem::of(g);
    let mode = TuneMode::from_env()?;
    let key: PlanKey = (dev.ordinal(), precision, problem, paths, mode);
    let model = plan_with_paths(dev.attributes(), &paths, precision, g)?;
    if g.m == 0 || g.n == 0 || g.batch == 0 || g.k == 0 || g.alpha == 0.0 {
        return Err(Error::invalid(
            "gemm tuning",
            "the product is empty (nothing to time)",
        ));
    }
    if let Err(why) = can_measure_on(stream) {
        return Err(Error::invalid(
            "gemm tuning",
            format!("cannot measure on this stream: {why}; tune on a stream of the whole device"),
        ));
    }
    let class = class_key(&dev, precision, &problem, &paths);
    let claim = match tune::begin(&class, false) {
        tune::Begin::Measure(c) => c,
        _ => {
            return Err(Error::invalid(
                "gemm tuning",
                format!(
                    "another thread has been measuring this class for more than {} s",
                    tune::CLAIM_WAIT.as_secs()
                ),
            ))
        }
    };
    let dir = if mode == TuneMode::Off {
        None
    } else {
        tune::disk_dir()
    };
    let _turn = dir.as_deref().and_then(tune::lock_dir);
    // SAFETY: forwarded from the caller (C is replaced by the tuner's scratch).
    let report = unsafe { measure_class(stream, &dev, precision, g, model, key, &class, dir) }?;
    drop(claim);
    report.ok_or_else(|| {
        Error::invalid(
            "gemm tuning",
            "no candidate plan ran (the scratch C could not be allocated, or every candidate \
             failed)",
        )
    })
}

/// Times the candidates of `g`'s product on `stream` with a scratch C and records the choice
/// (memory, the file in `dir` when the measurement is complete, the plan cache). `None` when
/// the scratch could not be had or nothing ran; [`Error::GemmUnwritten`] when the model's plan
/// left C unwritten and no other plan ran (running it would leave the caller's C unwritten).
///
/// # Safety
/// As for [`sgemm`] (C is not touched); `g` is validated and describes a non-empty product.
#[allow(clippy::too_many_arguments)]
unsafe fn measure_class(
    stream: &Stream,
    dev: &Device,
    precision: Precision,
    g: &RawGemm,
    model: Plan,
    key: PlanKey,
    class: &tune::ClassKey,
    dir: Option<std::path::PathBuf>,
) -> Result<Option<TuneReport>> {
    let t0 = std::time::Instant::now();
    let (_, _, problem, paths, _) = key;
    let all = plan::enumerate(precision, &problem, dev.attributes(), &paths)?;
    if all.len() <= 1 {
        tune::store(
            class,
            tune::Choice::of(&model),
            &[],
            dir.as_deref(),
            true,
            0,
        );
        cache(key, model, Chosen::Final);
        return Ok(Some(TuneReport {
            chosen: model,
            model,
            timed: Vec::new(),
            complete: true,
            host_us: 0,
        }));
    }
    // SAFETY: forwarded from the caller (A and B read within their spans).
    let Some(mut timer) = (unsafe { GpuTimer::new(stream, dev, g, true) })? else {
        return Ok(None);
    };
    let tuned = tune::tune(&model, &all, &mut timer, tune::WARM_BUDGET);
    // The scratch buffers return to the allocator in stream order, after the timed runs.
    drop(timer);
    let host_us = t0.elapsed().as_micros().min(u64::MAX as u128) as u64;
    let Some(chosen) = tuned.chosen else {
        return match tuned.model_error {
            Some(e @ Error::GemmUnwritten { .. }) => Err(e),
            _ => Ok(None),
        };
    };
    tune::store(
        class,
        tune::Choice::of(&chosen),
        &tuned.timed,
        dir.as_deref(),
        tuned.complete,
        host_us,
    );
    cache(key, chosen, Chosen::Final);
    Ok(Some(TuneReport {
        chosen,
        model,
        timed: tuned.timed,
        complete: tuned.complete,
        host_us,
    }))
}

/// Whether the tuner can measure on `stream`: `Err(why)` when the driver lacks the event timing
/// the CUDA 13 bindings call (`cuEventElapsedTime_v2`, CUDA 12.8; calling it on an older driver
/// would panic in cudarc), when the stream belongs to a green context (a share of the SMs: a
/// choice measured there would be stored for the whole device), or when it is being captured
/// into a CUDA graph (no host waits inside a capture).
fn can_measure_on(stream: &Stream) -> std::result::Result<(), &'static str> {
    use gpukit_jit::cudarc::driver::sys;
    if gpukit_jit::libs::driver_version() < EVENT_TIMING_DRIVER {
        return Err("the driver is older than CUDA 12.8 (no cuEventElapsedTime_v2)");
    }
    let mut green: sys::CUgreenCtx = std::ptr::null_mut();
    // SAFETY: the stream handle is live (we hold its Arc); the entry point exists from CUDA
    // 12.4 (the driver is 12.8 or later, checked above); the call writes one handle.
    let r = unsafe { sys::cuStreamGetGreenCtx(stream.cuda().cu_stream(), &mut green) };
    if r != sys::CUresult::CUDA_SUCCESS || !green.is_null() {
        return Err("the stream belongs to a green context (a share of the device's SMs)");
    }
    if stream_is_capturing(stream) {
        return Err("the stream is being captured into a graph");
    }
    Ok(())
}

/// Whether `stream` is being captured into a CUDA graph (where the tuner cannot wait for
/// events); a failed query counts as captured.
fn stream_is_capturing(stream: &Stream) -> bool {
    use gpukit_jit::cudarc::driver::sys;
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream handle is live (we hold its Arc); the call writes one status.
    let r = unsafe { sys::cuStreamIsCapturing(stream.cuda().cu_stream(), &mut status) };
    r != sys::CUresult::CUDA_SUCCESS
        || status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

/// The bits the tuner fills a candidate's scratch C with before its first run: a signalling
/// NaN, which no arithmetic produces (a NaN result is always quiet), so an element that still
/// holds it was not written.
const UNWRITTEN: u32 = 0x7F80_DEAD;

/// Rows of the slices through which [`L2Flush`] reads its buffer.
const FLUSH_ROWS: usize = 16;
/// Columns of those slices (one reduction thread per four: 16 x 1024 threads).
const FLUSH_COLS: usize = 4096;

/// The tuner's L2 flush: a buffer of at least the L2's size, zeroed once, read in full around
/// the timed runs by the split-K reduction (its slices of `FLUSH_ROWS x FLUSH_COLS` summed into
/// a 256 KB sink, eight slices in flight per thread). Reading leaves the L2 holding clean lines
/// of the buffer, as the bench's rotated inputs leave it holding clean lines of other inputs. The
/// flush before this one was a memset of the buffer, which left the L2 full of dirty lines whose
/// write-back (tens of MB) then shared DRAM with the timed product: 4-6 us at 192x160x32768 on
/// an H100, more for the plan that reads more, which reordered plans the bench ran the other
/// way round (GEMM_NOTES.md, version 16). The tuner times each product together with the flush
/// after it, less a clean flush's time ([`GpuTimer`]'s `time_us`): the write-back of what the
/// product left dirty is charged to it (GEMM_NOTES.md, version 17).
struct L2Flush {
    buf: crate::alloc::DeviceBuffer,
    sink: crate::alloc::DeviceBuffer,
    slices: usize,
    reduce: gpukit_jit::Kernel,
    /// Microseconds of a flush that follows a flush (nothing dirty to write back): the median
    /// of [`CLEAN_SAMPLES`], measured when the flush is made.
    clean_us: f64,
}

/// Timed flushes behind [`L2Flush::clean_us`].
const CLEAN_SAMPLES: usize = 7;

impl L2Flush {
    /// The flush for `dev` (L2 of `l2` bytes) on `stream`, charged to the current owner; `None`
    /// when its memory cannot be allocated or zeroed or the reduction cannot be loaded (the
    /// timed runs then go unflushed, and a product that needs the reduction reports why).
    fn new(dev: &Device, stream: &Stream, l2: usize) -> Option<Self> {
        let slice = FLUSH_ROWS * FLUSH_COLS;
        let slices = (l2 / 4).div_ceil(slice).max(1);
        let owner = current_owner();
        let alloc = |bytes: usize| dev.allocator().alloc_for(&owner, bytes, stream).ok();
        let buf = alloc(slices * slice * 4)?;
        let sink = alloc(slice * 4)?;
        buf.zero_async(slices * slice * 4, stream).ok()?;
        let reduce = kernels::reduce_instantiation().load(dev).ok()?;
        let mut flush = L2Flush {
            buf,
            sink,
            slices,
            reduce,
            clean_us: 0.0,
        };
        flush.clean_us = flush.time_clean(dev, stream).ok()?;
        Some(flush)
    }

    /// The median time of [`CLEAN_SAMPLES`] flushes, each after another flush (microseconds).
    fn time_clean(&self, dev: &Device, stream: &Stream) -> Result<f64> {
        self.run(dev, stream)?;
        let mut us = windows_us(stream, CLEAN_SAMPLES, || self.run(dev, stream))?;
        us.sort_by(f64::total_cmp);
        Ok(us[us.len() / 2])
    }

    /// Reads the whole buffer on `stream`.
    fn run(&self, dev: &Device, stream: &Stream) -> Result<()> {
        let args = flush_args(self.buf.ptr(), self.sink.ptr(), self.slices);
        // SAFETY: the reduction reads `slices` slices of FLUSH_ROWS x FLUSH_COLS floats (row
        // stride FLUSH_COLS, slice stride FLUSH_ROWS * FLUSH_COLS) from `buf`, which holds
        // exactly that many, zeroed, and writes one such slice (ldc FLUSH_COLS, one batch entry,
        // beta 0: not read) to `sink`; both are this flush's live allocations on the stream's
        // device, 16-byte aligned, and are freed only through the allocator's stream order after
        // the launch has run; the arguments match the kernel's signature (checked in the tests).
        unsafe {
            self.reduce.launch_unchecked(
                stream.cuda(),
                reduce_launch(dev, FLUSH_ROWS * FLUSH_COLS / 4, self.slices),
                &args,
            )
        }?;
        Ok(())
    }
}

/// The reduction's arguments for [`L2Flush::run`]: `slices` slices of `FLUSH_ROWS x FLUSH_COLS`
/// floats at `buf` summed into one at `sink` (alpha 1, beta 0).
fn flush_args(buf: u64, sink: u64, slices: usize) -> Vec<KernelArg> {
    vec![
        KernelArg::Ptr(buf),
        KernelArg::Ptr(sink),
        (FLUSH_ROWS as i32).into(),
        (FLUSH_COLS as i32).into(),
        (FLUSH_COLS as i32).into(),
        ((FLUSH_ROWS * FLUSH_COLS) as i64).into(),
        (FLUSH_COLS as i32).into(),
        0i64.into(),
        (slices as i32).into(),
        1i32.into(),
        1.0f32.into(),
        0.0f32.into(),
    ]
}

/// The tuner's GPU timer: runs plans of one product (the caller's A and B, a scratch C) on the
/// caller's stream between CUDA events. Each candidate's first run writes a poisoned scratch C
/// and is checked ([`GpuTimer::check`]); where the product's operands fit in L2 the timed runs
/// are separated by an L2 flush ([`L2Flush`]: each reads its operands from memory, as the
/// product itself does among other work, and pays for the write-back of the lines it dirtied).
struct GpuTimer<'a> {
    stream: &'a Stream,
    dev: &'a Device,
    /// The product with C replaced by the scratch buffer (validated; A and B the caller's).
    g: RawGemm,
    /// Its scratch C: `required_len` elements from `g.c`, which sits at the caller's C's offset
    /// within 16 bytes (so the same kernel variants run as for the product).
    scratch: crate::alloc::DeviceBuffer,
    /// Elements of C checked after a candidate's first run (batch entry, row, column).
    samples: Vec<(usize, usize, usize)>,
    /// The L2 flush, where the operands fit in L2.
    flush: Option<L2Flush>,
}

impl<'a> GpuTimer<'a> {
    /// The timer of `g` on `stream`: a zeroed scratch C from the device's allocator (charged
    /// to the current owner) and, with `timing` where A, B and C together are smaller than
    /// twice the L2, an [`L2Flush`]. `None` when the scratch C cannot be
    /// allocated.
    ///
    /// # Safety
    /// As for [`sgemm`]; `g` is validated.
    unsafe fn new(
        stream: &'a Stream,
        dev: &'a Device,
        g: &RawGemm,
        timing: bool,
    ) -> Result<Option<Self>> {
        let (la, lb, lc) = g.required_len();
        let offset = (g.c % 16) as usize;
        let bytes = lc.max(1) * 4 + 16;
        let owner = current_owner();
        let Ok(scratch) = dev.allocator().alloc_for(&owner, bytes, stream) else {
            return Ok(None);
        };
        let zeroed = scratch.zero_async(bytes, stream);
        if zeroed.is_err() {
            return Ok(None);
        }
        let l2 = dev.attributes().l2_cache_bytes;
        let flush = if timing && l2 > 0 && (la + lb + lc) * 4 < 2 * l2 {
            L2Flush::new(dev, stream, l2)
        } else {
            None
        };
        let pick = |n: usize| {
            let mut v = vec![0, n / 2, n.saturating_sub(1)];
            v.dedup();
            v
        };
        let mut samples = Vec::new();
        for b in pick(g.batch) {
            for i in pick(g.m) {
                for j in pick(g.n) {
                    samples.push((b, i, j));
                }
            }
        }
        Ok(Some(GpuTimer {
            stream,
            dev,
            g: RawGemm {
                c: scratch.ptr() + offset as u64,
                ..*g
            },
            scratch,
            samples,
            flush,
        }))
    }

    /// Fills the scratch C with [`UNWRITTEN`], runs `plan` into it with beta = 0 (the kernels'
    /// write path; the timed runs then use the product's beta on what it wrote) and reads the
    /// sampled elements back: [`Error::GemmUnwritten`] naming the first that still holds the
    /// poison.
    fn check(&self, plan: &Plan) -> Result<()> {
        let s = self.stream.cuda();
        let words = self.scratch.len_bytes() / 4;
        // SAFETY: the scratch buffer holds `words` 32-bit words, live and ordered on `stream`.
        unsafe {
            gpukit_jit::cudarc::driver::sys::cuMemsetD32Async(
                self.scratch.ptr(),
                UNWRITTEN,
                words,
                s.cu_stream(),
            )
        }
        .result()
        .map_err(|e| Error::driver("poisoning the tuner's scratch C", e))?;
        let g = RawGemm {
            beta: 0.0,
            ..self.g
        };
        // SAFETY: A and B as the caller of `sgemm` guarantees; C is the tuner's scratch of
        // required_len elements from `g.c` (this RawGemm's own layout), live until after the
        // reads below (the stream is synchronised before the buffer can be dropped).
        unsafe { run(self.stream, self.dev, &g, plan) }?;
        let mut got = vec![0u32; self.samples.len()];
        s.context()
            .bind_to_thread()
            .map_err(|e| Error::driver("binding the context", e))?;
        for (word, &(b, i, j)) in got.iter_mut().zip(&self.samples) {
            let at = g.c + 4 * (b * g.stride_c + i * g.ldc + j) as u64;
            // SAFETY: `at` is an element of C within required_len (b < batch, i < m, j < n);
            // the destination is one live u32 of `got`, which outlives the synchronisation
            // below (a copy to pageable memory has completed when the call returns anyway).
            unsafe {
                gpukit_jit::cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                    word as *mut u32 as *mut std::ffi::c_void,
                    at,
                    4,
                    s.cu_stream(),
                )
            }
            .result()
            .map_err(|e| Error::driver("reading the tuner's scratch C", e))?;
        }
        self.stream.synchronize()?;
        if let Some(k) = got.iter().position(|&w| w == UNWRITTEN) {
            tune::count_unwritten();
            let (batch, row, col) = self.samples[k];
            return Err(Error::GemmUnwritten {
                plan: format!(
                    "{} s{} {} blocks {}",
                    plan.config.name,
                    plan.splits,
                    plan.operands.label(),
                    plan.max_blocks
                ),
                m: g.m,
                n: g.n,
                k: g.k,
                batch,
                row,
                col,
            });
        }
        Ok(())
    }
}

impl tune::Timer for GpuTimer<'_> {
    fn warm(&mut self, plan: &Plan) -> Result<()> {
        self.check(plan)
    }

    fn time_us(&mut self, plan: &Plan, reps: u32) -> Result<f64> {
        let reps = reps.max(1);
        let product = || {
            // SAFETY: A and B as the caller of `sgemm` guarantees; C is the tuner's scratch of
            // required_len elements (this RawGemm's own layout), live until after these runs.
            unsafe { run(self.stream, self.dev, &self.g, plan) }
        };
        let Some(flush) = &self.flush else {
            let w = windows_us(self.stream, 1, || (0..reps).try_for_each(|_| product()))?;
            return Ok(w[0] / reps as f64);
        };
        // flush | e0 product flush e1 | e0 product flush e1 | ...: each timed window holds the
        // product and the flush after it, which writes back the dirty lines the product left in
        // L2 (its split-K slices, pack buffers, C) and leaves the L2 clean for the next product;
        // the time of a flush with nothing to write back is taken off. A plan that dirties more
        // of the L2 pays for its write-back, as it does when products follow one another.
        flush.run(self.dev, self.stream)?;
        let w = windows_us(self.stream, reps as usize, || {
            product()?;
            flush.run(self.dev, self.stream)
        })?;
        Ok(charged_us(
            w.iter().sum::<f64>() / reps as f64,
            flush.clean_us,
        ))
    }
}

/// Microseconds of each of `n` windows on `stream`, each holding the work `body` queues,
/// between two events; waits for the last.
fn windows_us(stream: &Stream, n: usize, mut body: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    let mut marks = Vec::with_capacity(n);
    for _ in 0..n {
        let e0 = stream.record()?;
        body()?;
        marks.push((e0, stream.record()?));
    }
    if let Some((_, last)) = marks.last() {
        last.synchronize()?;
    }
    marks
        .iter()
        .map(|(a, b)| Ok(a.elapsed_ms(b)? as f64 * 1e3))
        .collect()
}

/// A timed window of a product and the flush after it (`window_us`) less the time of a flush with
/// nothing to write back (`clean_us`): the product's time with its write-back, never below a
/// twentieth of the window (jitter of the flush must not make a short product look free or
/// negative, which the tuner would reject as a failed measurement).
fn charged_us(window_us: f64, clean_us: f64) -> f64 {
    (window_us - clean_us).max(window_us / 20.0)
}

/// Single-precision GEMM with a given plan (its configuration decides the arithmetic). A plan
/// whose configuration does not fit the device (shared memory per block, or a Hopper family on
/// another GPU) or whose operands cannot be read as it says (a tensor map for a layout or an
/// alignment that does not allow one, a rounding tensor map on a device whose tensor copies do
/// not round) is an [`Error::InvalidArgument`].
///
/// # Safety
/// As for [`sgemm`].
pub unsafe fn sgemm_with_plan(stream: &Stream, g: &RawGemm, plan: &Plan) -> Result<()> {
    g.validate()?;
    let dev = device_of(stream)?;
    // SAFETY: forwarded from the caller.
    unsafe { run(stream, &dev, g, plan) }
}

fn check_fits(cfg: &TileConfig, g: &RawGemm, dev: &DeviceAttributes) -> Result<()> {
    let (ta, tb) = (g.trans_a.is_yes(), g.trans_b.is_yes());
    if cfg.occupancy_on(dev, ta, tb) > 0 {
        return Ok(());
    }
    Err(Error::invalid(
        "gemm",
        if cfg.family.is_wgmma() && !dev.supports_wgmma() {
            format!(
                "{} needs a compute capability 9.0 GPU (H100/H200); {} is {}.{}",
                cfg.name, dev.name, dev.compute_capability.0, dev.compute_capability.1
            )
        } else {
            format!(
                "{} needs {} B of shared memory per block; {} allows {} B",
                cfg.name,
                cfg.smem_bytes(ta, tb),
                dev.name,
                dev.shared_memory_per_block_optin
            )
        },
    ))
}

/// `lc`, or an error when a grid or block dimension is 0: gpukit-jit treats such a launch as
/// nothing to do and returns success, which here would leave C unwritten without a word (a
/// non-empty product always has at least one block; this guards the planning arithmetic).
pub(super) fn nonempty(lc: LaunchConfig, kernel: &str) -> Result<LaunchConfig> {
    let (g, b) = (lc.grid, lc.block);
    if g.0 == 0 || g.1 == 0 || g.2 == 0 || b.0 == 0 || b.1 == 0 || b.2 == 0 {
        return Err(Error::invalid(
            "gemm",
            format!(
                "{kernel} would launch an empty grid {:?} x block {:?} for a non-empty product                  (a gpukit bug: please report the shape)",
                g, b
            ),
        ));
    }
    Ok(lc)
}

/// Where the main kernel of one batch chunk writes: C itself, or the split-K workspace.
struct Target {
    c: u64,
    /// Columns of each row the kernel may write: C's N, or the workspace's whole rows (`ldw`,
    /// whose padding beyond N is its own scratch).
    cols: usize,
    ldc: usize,
    stride_c: usize,
    alpha: f32,
    beta: f32,
}

/// Checks that `g`'s operands can be read as `ops` says (the planner only offers such layouts;
/// a plan from a caller may not fit): P and Q views of the right major order, aligned for tensor
/// maps, a rounding map only where the device's copies round.
fn check_operands(dev: &Device, g: &RawGemm, cfg: &TileConfig, ops: &Operands) -> Result<()> {
    if *ops == Operands::PACKED {
        return Ok(());
    }
    let problem = Problem::of(g);
    let paths = Paths {
        tma: true,
        tma_rounding: (ops.q_tma || ops.p == Source::TmaKMajorShared)
            && tma::tensor_copies_round(dev)?.rounds,
        ..Paths::default()
    };
    if plan::config_operand_choices(cfg, &problem, &paths).contains(ops) {
        return Ok(());
    }
    Err(Error::invalid(
        "gemm",
        format!(
            "{} cannot read this product's operands as `{}` (transposes {:?}/{:?}, tensor-map \
             alignment A {} B {}, tensor copies round to TF32: {})",
            cfg.name,
            ops.label(),
            g.trans_a,
            g.trans_b,
            g.a_tensor_mappable(),
            g.b_tensor_mappable(),
            paths.tma_rounding
        ),
    ))
}

/// # Safety
/// As for [`sgemm`]; `g` is validated.
unsafe fn run(stream: &Stream, dev: &Device, g: &RawGemm, plan: &Plan) -> Result<()> {
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    if g.k == 0 || g.alpha == 0.0 {
        // C = beta * C (BLAS: A and B are not read when alpha == 0 or k == 0).
        // SAFETY: C is valid for the caller's span.
        return unsafe { scale_c(stream, dev, g) };
    }
    let cfg = &plan.config;
    check_fits(cfg, g, dev.attributes())?;
    let ops = if cfg.family.is_wgmma() {
        plan.operands
    } else {
        Operands::PACKED
    };
    check_operands(dev, g, cfg, &ops)?;
    let p_rounding = if cfg.family == Family::Wgmma
        && ops.p != Source::Packed
        && tma::tensor_copies_round(dev)?.rounds
    {
        // A rounding map for P too where the copies round: every value of the product is then
        // rounded the same way (to nearest even; the kernel's cvt.rna leaves it unchanged).
        Rounding::Tf32
    } else {
        Rounding::None
    };
    // Should the driver reject a tensor map of this layout (alignment and layout rules are
    // checked before, so this is not expected), both operands are packed instead.
    let ops = if ops != Operands::PACKED {
        let (p, q) = operand::p_and_q(g, &ops, 0, 1);
        match tensor_maps(cfg, &ops, &p, &q, p_rounding) {
            Ok(_) => ops,
            Err(_) => Operands::PACKED,
        }
    } else {
        ops
    };
    // Block tiles of one output slice (P tiles rounded up to whole clusters).
    let tiles = cfg.blocks_per_slice(&Problem::of(g), &ops);
    if tiles > i32::MAX as u64 {
        return Err(Error::invalid(
            "gemm",
            format!(
                "{}x{} makes {tiles} tiles, more than a grid holds",
                g.m, g.n
            ),
        ));
    }
    let (splits, k_per_split) = plan::normalize_split(cfg, g.k as u32, plan.splits);
    let splits = splits as usize;
    let main = MainKernel {
        cfg,
        variant: Variant {
            trans_a: g.trans_a.is_yes(),
            trans_b: g.trans_b.is_yes(),
            vec: g.ab_vectorizable() && (splits > 1 || g.c_vectorizable()),
            operands: ops,
        },
        tiles,
        splits,
        k_per_split: k_per_split as usize,
        max_blocks: if cfg.family.is_wgmma() {
            plan.max_blocks
        } else {
            0
        },
        p_rounding,
        tail: plan.tail && cfg.family == Family::Wgmma && splits == 1 && plan.max_blocks > 0,
    };
    let kernel = kernels::instantiation(cfg, main.variant).load(dev)?;
    if cfg.wgmma_of_several_blocks() {
        // Two blocks per SM need the largest shared-memory carveout (2 x 98 KB of the SM's 228):
        // ask for it rather than leave it to the driver's choice (a hint; the launch sets the
        // dynamic size itself).
        kernel.set_attribute(
            gpukit_jit::cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            100,
        )?;
    }

    if splits == 1 {
        let mut b0 = 0usize;
        while b0 < g.batch {
            let nb = (g.batch - b0).min(MAX_GRID_Z);
            let target = Target {
                c: g.c + (b0 * g.stride_c * 4) as u64,
                cols: g.n,
                ldc: g.ldc,
                stride_c: g.stride_c,
                alpha: g.alpha as f32,
                beta: g.beta as f32,
            };
            // SAFETY: forwarded from the caller; b0 + nb <= batch, nb <= 65535.
            unsafe { main.launch(stream, dev, &kernel, g, b0, nb, &target, g.c_vectorizable()) }?;
            b0 += nb;
        }
        return Ok(());
    }

    // Split-K: each (batch, split) writes its partial product into a workspace slice (row
    // stride rounded to 4 floats, so the vector path applies), then a reduction sums the slices
    // in a fixed order (deterministic) and applies alpha and beta.
    let ldw = g.n.div_ceil(4) * 4;
    let slice = g.m * ldw;
    let per_launch = (MAX_GRID_Z / splits).max(1);
    let reduce = kernels::reduce_instantiation().load(dev)?;
    let programmatic = programmatic_reduction(dev, stream);
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(per_launch);
        let len = nb * splits * slice;
        // Every element of the workspace is written by the GEMM kernel (every (row, col) of
        // every slice lies in some tile) before the reduction reads it, both on this stream.
        let ws = dev
            .allocator()
            .alloc_for(&current_owner(), len * 4, stream)?;
        let target = Target {
            c: ws.ptr(),
            cols: ldw,
            ldc: ldw,
            stride_c: slice,
            alpha: 1.0,
            beta: 0.0,
        };
        // SAFETY: forwarded from the caller; the workspace holds nb * splits slices (16-byte
        // aligned, rows a multiple of 4 floats: vector stores apply).
        unsafe { main.launch(stream, dev, &kernel, g, b0, nb, &target, true) }?;
        let rargs = reduce_args(g, b0, nb, ws.ptr(), ldw, slice, splits);
        let rcfg = reduce_launch(dev, nb * g.m * g.n.div_ceil(4), splits);
        // SAFETY: the workspace `ws` is this call's live allocation of nb * splits slices, all
        // written by the GEMM kernel before (same stream) and returned to the allocator only
        // after this launch (stream order); C's range is the caller's RawGemm contract (valid on
        // the stream's device, not overlapping A or B, live until the work has run). Launched
        // programmatically, the reduction may start while the GEMM runs: its first instruction
        // is griddepcontrol.wait (gemm_reduce.cu), so it touches W and C only after the GEMM
        // grid has completed and its writes are visible, and only on compute capability 9.0 or
        // later ([`programmatic_reduction`]), where that instruction exists.
        unsafe {
            if programmatic {
                reduce.launch_programmatic_unchecked(stream.cuda(), rcfg, &rargs)
            } else {
                reduce.launch_unchecked(stream.cuda(), rcfg, &rargs)
            }
        }?;
        b0 += nb;
    }
    Ok(())
}

/// The main GEMM kernel of a plan, launched once per batch chunk.
struct MainKernel<'a> {
    cfg: &'a TileConfig,
    variant: Variant,
    /// Block tiles of one output slice.
    tiles: u64,
    splits: usize,
    k_per_split: usize,
    /// `wgmma`: the grid limit ([`Plan::max_blocks`], 0: one block per work unit).
    max_blocks: u32,
    /// `wgmma`: the type of P's tensor map.
    p_rounding: Rounding,
    /// TF32 `wgmma` on a persistent grid: the last wave's tiles cut along K ([`Plan::tail`]).
    tail: bool,
}

impl MainKernel<'_> {
    /// Launches batch entries `b0 .. b0 + nb` (times the K slices) into `t`; `vec_c`: `t` allows
    /// vector stores.
    ///
    /// # Safety
    /// As for [`sgemm`]; `b0 + nb <= g.batch`, `nb * splits <= 65535`, and `t` valid for the
    /// outputs of `nb * splits` (batch entry, slice) pairs.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        stream: &Stream,
        dev: &Device,
        kernel: &gpukit_jit::Kernel,
        g: &RawGemm,
        b0: usize,
        nb: usize,
        t: &Target,
        vec_c: bool,
    ) -> Result<()> {
        let cfg = self.cfg;
        let mut smem = cfg.smem_bytes(self.variant.trans_a, self.variant.trans_b);
        if !cfg.family.is_wgmma() {
            let lc = nonempty(
                LaunchConfig {
                    grid: (self.tiles as u32, 1, (nb * self.splits) as u32),
                    block: (cfg.threads(), 1, 1),
                    shared_mem_bytes: smem,
                },
                cfg.name,
            )?;
            let args = simt_args(g, b0, t, self.splits, self.k_per_split);
            // SAFETY: this fn's contract (A, B within the caller's RawGemm, `t` valid for the
            // outputs of nb * splits entries, not overlapping A or B, live until the work has
            // run) is launch_unchecked's.
            unsafe { kernel.launch_unchecked(stream.cuda(), lc, &args) }?;
            return Ok(());
        }
        let ops = self.variant.operands;
        let (p, q) = operand::p_and_q(g, &ops, b0, nb);
        let (pmap, qmap) = tensor_maps(cfg, &ops, &p, &q, self.p_rounding)?;
        // The output through shared memory and the copy engine where the kernel has the buffers
        // and the target allows it: vector stores (the map's alignment rules), beta 0 (C is not
        // read), and rows of whole 16-byte units (`t.cols` a multiple of 4 floats: the H100 run
        // of 2026-12-07 wrote C[0][131], the padding of a 257 x 131 output with ldc 132, through
        // a map whose extent was 131, while extents of whole units kept every padding element;
        // GEMM_NOTES.md, version 22). A split-K workspace's rows are whole units (`ldw`); C's rows
        // of a ragged N keep the stores from registers. Rows: M, whichever operand is P.
        let rows = if ops.swap { q.rows } else { p.rows };
        let cmap = if vec_c && t.beta == 0.0 && t.cols.is_multiple_of(4) && stages_output(dev, cfg)
        {
            smem += plan::OUTPUT_STAGING_BYTES;
            let nz = nb * self.splits;
            Some(tma::output_map(t.c, t.cols, rows, t.ldc, t.stride_c, nz)?)
        } else {
            None
        };
        // SAFETY: forwarded from the caller (the views lie within A and B).
        let packed = unsafe {
            pack::pack(
                stream,
                dev,
                cfg,
                (ops.p == Source::Packed).then_some(&p),
                (!ops.q_tma).then_some(&q),
            )
        }?;
        // Work units: block tiles, or with clusters the clusters' tiles (a pair of P tiles beside
        // one Q tile for two blocks). The kernel walks units in steps of the grid's cluster
        // count, so any grid of whole clusters is correct; one cluster per unit is the classic
        // launch.
        let cluster = cfg.cluster.max(1) as u64;
        let units = self.tiles / cluster * (nb * self.splits) as u64;
        let limit = if self.max_blocks == 0 {
            u64::MAX
        } else {
            (self.max_blocks as u64 / cluster).max(1)
        };
        let grid = (units.min(limit) * cluster).min(i32::MAX as u64 / cluster * cluster) as u32;
        // A persistent grid's last, partial wave cut along K (the kernel walks the whole tiles,
        // then one piece per block).
        let tail = if self.tail {
            let nkt = p.k.div_ceil(cfg.bk as usize) as u32;
            Tail::prepare(stream, dev, cfg, units, grid as u64 / cluster, nkt)?
        } else {
            Tail::none()
        };
        let lc = nonempty(
            LaunchConfig {
                grid: (grid, 1, 1),
                block: (cfg.threads(), 1, 1),
                shared_mem_bytes: smem,
            },
            cfg.name,
        )?;
        let args = wgmma_args(&WgmmaCall {
            p: &p,
            q: &q,
            packed: &packed,
            pmap: pmap.as_deref(),
            qmap: qmap.as_deref(),
            cmap: cmap.as_deref(),
            target: t,
            vec_c,
            splits: self.splits,
            kt_per_split: self.k_per_split.div_ceil(cfg.bk as usize),
            nz: nb * self.splits,
            tail: &tail,
        });
        // SAFETY: this fn's contract (P and Q views within A and B, `t` valid for the outputs of
        // nb * splits entries and not overlapping them, all live until the work has run) is
        // launch_unchecked's; the tensor maps encode those same views (C's, where the output is
        // staged, the outputs of `t`: `t.cols` x M elements of each of the nb * splits slices,
        // within `t`'s rows, and a whole number of 16-byte units per row, the granule at which
        // the copy engine was seen to stop), and the pack buffer and the tail's
        // workspace (its counters zeroed on this stream before, its slots sized for every piece
        // of every tail tile: Tail::prepare) are this call's own allocations, dropped below only
        // in stream order.
        unsafe { kernel.launch_unchecked(stream.cuda(), lc, &args) }?;
        // The pack buffer and the tail's workspace return to the allocator here; stream order
        // keeps them intact until the kernel above has run.
        drop(packed);
        drop(tail);
        Ok(())
    }
}

/// The encoded tensor maps (128 bytes each) of P and Q, `None` for an operand read packed.
type Maps = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The encoded tensor maps of P and Q where `ops` reads them through one (TF32 only): P with
/// `p_rounding`, Q through a rounding map.
fn tensor_maps(
    cfg: &TileConfig,
    ops: &Operands,
    p: &OperandView,
    q: &OperandView,
    p_rounding: Rounding,
) -> Result<Maps> {
    let pmap = match ops.p {
        Source::Packed => None,
        Source::TmaKMajor => Some(tma::kmajor_map(p, cfg.bm, p_rounding)?),
        Source::TmaMnMajor => Some(tma::mnmajor_map(p, p_rounding)?),
        // wgmma reads these boxes as they land: the map must round (check_operands).
        Source::TmaKMajorShared => Some(tma::kmajor_map(p, cfg.bm, Rounding::Tf32)?),
    };
    // A cluster's blocks each copy their share of Q's tile (multicast to all of them): boxes of
    // bn / cluster rows.
    let qmap = if ops.q_tma {
        Some(tma::kmajor_map(
            q,
            cfg.bn / cfg.cluster.max(1),
            Rounding::Tf32,
        )?)
    } else {
        None
    };
    Ok((pmap, qmap))
}

/// Arguments of the `mma.sync` and SIMT kernels (`gemm_tf32`, `gemm_sgemm`) for batch entries
/// from `b0` into `t`.
fn simt_args(
    g: &RawGemm,
    b0: usize,
    t: &Target,
    splits: usize,
    k_per_split: usize,
) -> Vec<KernelArg> {
    vec![
        KernelArg::Ptr(g.a + (b0 * g.stride_a * 4) as u64),
        KernelArg::Ptr(g.b + (b0 * g.stride_b * 4) as u64),
        KernelArg::Ptr(t.c),
        (g.m as i32).into(),
        (g.n as i32).into(),
        (g.k as i32).into(),
        (g.lda as i32).into(),
        (g.ldb as i32).into(),
        (t.ldc as i32).into(),
        (g.stride_a as i64).into(),
        (g.stride_b as i64).into(),
        (t.stride_c as i64).into(),
        t.alpha.into(),
        t.beta.into(),
        (splits as i32).into(),
        (k_per_split as i32).into(),
        GROUP_M.into(),
    ]
}

/// Everything one `wgmma` launch takes.
struct WgmmaCall<'a> {
    p: &'a OperandView,
    q: &'a OperandView,
    packed: &'a pack::Packed,
    /// P's and Q's encoded tensor maps, where they are read through one.
    pmap: Option<&'a [u8]>,
    qmap: Option<&'a [u8]>,
    /// C's encoded tensor map where the kernel writes its output through it.
    cmap: Option<&'a [u8]>,
    target: &'a Target,
    vec_c: bool,
    splits: usize,
    /// K per slice in k tiles.
    kt_per_split: usize,
    /// Output slices (batch entries x splits) of the launch.
    nz: usize,
    /// The last wave's pieces and their workspace ([`Tail::none`] without).
    tail: &'a Tail,
}

/// Arguments of the `wgmma` kernels (`gemm_wgmma`).
fn wgmma_args(c: &WgmmaCall) -> Vec<KernelArg> {
    let map = |m: Option<&[u8]>| KernelArg::Bytes(m.map_or_else(|| vec![0u8; 128], <[u8]>::to_vec));
    vec![
        KernelArg::Ptr(c.packed.p),
        KernelArg::Ptr(c.packed.q),
        KernelArg::Ptr(c.target.c),
        map(c.pmap),
        map(c.qmap),
        (c.p.rows as i32).into(),
        (c.q.rows as i32).into(),
        (c.p.k as i32).into(),
        (c.target.ldc as i32).into(),
        (c.packed.stride_p as i64).into(),
        (c.packed.stride_q as i64).into(),
        (c.target.stride_c as i64).into(),
        (c.p.broadcast() as i32).into(),
        (c.q.broadcast() as i32).into(),
        c.target.alpha.into(),
        c.target.beta.into(),
        (c.splits as i32).into(),
        (c.kt_per_split as i32).into(),
        (c.nz as i32).into(),
        (c.vec_c as i32).into(),
        GROUP_M.into(),
        (c.tail.from as i64).into(),
        (c.tail.pieces as i32).into(),
        KernelArg::Ptr(c.tail.slots),
        KernelArg::Ptr(c.tail.counters),
        map(c.cmap),
        (c.cmap.is_some() as i32).into(),
    ]
}

/// Runs only the operand pack of a `wgmma` plan for `g` (benches: the pack's share of the
/// time). Does nothing for empty products, plans of other families or operands read in place.
///
/// # Safety
/// As for [`sgemm`].
pub unsafe fn pack_only(stream: &Stream, g: &RawGemm, plan: &Plan) -> Result<()> {
    g.validate()?;
    if g.m == 0 || g.n == 0 || g.k == 0 || g.batch == 0 || !plan.config.family.is_wgmma() {
        return Ok(());
    }
    let dev = device_of(stream)?;
    check_fits(&plan.config, g, dev.attributes())?;
    let ops = plan.operands;
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(MAX_GRID_Z);
        let (p, q) = operand::p_and_q(g, &ops, b0, nb);
        // SAFETY: forwarded from the caller.
        drop(unsafe {
            pack::pack(
                stream,
                &dev,
                &plan.config,
                (ops.p == Source::Packed).then_some(&p),
                (!ops.q_tma).then_some(&q),
            )
        }?);
        b0 += nb;
    }
    Ok(())
}

/// Arguments of the split-K reduction: the `splits` slices of workspace `ws` (row stride `ldw`,
/// `slice` elements apart) summed into batch entries `b0 .. b0 + nb` of C with alpha and beta;
/// `splits == 0` makes it `C = beta * C`.
fn reduce_args(
    g: &RawGemm,
    b0: usize,
    nb: usize,
    ws: u64,
    ldw: usize,
    slice: usize,
    splits: usize,
) -> Vec<KernelArg> {
    vec![
        KernelArg::Ptr(ws),
        KernelArg::Ptr(g.c + (b0 * g.stride_c * 4) as u64),
        (g.m as i32).into(),
        (g.n as i32).into(),
        (ldw as i32).into(),
        (slice as i64).into(),
        (g.ldc as i32).into(),
        (g.stride_c as i64).into(),
        (splits as i32).into(),
        (nb as i32).into(),
        (if splits == 0 { 0.0 } else { g.alpha as f32 }).into(),
        (g.beta as f32).into(),
    ]
}

/// The `wgmma` TF32 configurations that can ([`TileConfig::stages_output`]) write their output
/// through shared memory and the copy engine ([`stages_output`]) by default;
/// `GPUKIT_GEMM_TMA_STORE=off` has them store it from registers instead. On an H100 (2026-12-07,
/// GEMM_NOTES.md version 22), paired against cuBLAS in one process each: 2000x6000x400 NT 0.979
/// of cuBLAS TF32 with it, 0.890 without; 2500^2 x 500 0.945 against 0.894; 192x160x32768 0.939
/// against 0.895; 4096^3 and 4096x4096x256 within 0.2 %.
pub const TMA_STORE_ENV: &str = "GPUKIT_GEMM_TMA_STORE";

/// Whether [`TMA_STORE_ENV`]'s value leaves the staged output on: anything but `off` (any case,
/// spaces around), and no value.
fn tma_store_requested(value: Option<&str>) -> bool {
    !value.is_some_and(|v| v.trim().eq_ignore_ascii_case("off"))
}

/// Whether a `wgmma` launch of `cfg` on `dev` writes its output through a tensor map of C: the
/// kernel has the staging buffers, the device gives a block the shared memory for them, the
/// driver has tensor maps, and [`TMA_STORE_ENV`] asks for it (read once per process).
fn stages_output(dev: &Device, cfg: &TileConfig) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| tma_store_requested(std::env::var(TMA_STORE_ENV).ok().as_deref()));
    on && cfg.stages_output()
        && dev
            .attributes()
            .fits_shared_memory((cfg.max_smem_bytes() + plan::OUTPUT_STAGING_BYTES) as usize)
        && tma::driver_has_tensor_maps()
}

/// `GPUKIT_GEMM_PDL=off` launches the split-K reduction only after its GEMM has completed (a
/// plain launch: for comparison); by default it is launched early ([`programmatic_reduction`]).
pub const PDL_ENV: &str = "GPUKIT_GEMM_PDL";

/// Whether the split-K reduction after a GEMM on `stream` is launched with programmatic stream
/// serialization (its blocks start while the GEMM's last blocks run, and wait in
/// `griddepcontrol.wait` for the GEMM grid: the launch gap between the two is hidden): compute
/// capability 9.0 or later (where the instruction exists), a stream not being captured into a
/// graph, and not turned off by [`PDL_ENV`] (read once per process).
fn programmatic_reduction(dev: &Device, stream: &Stream) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var(PDL_ENV).map_or(true, |v| !v.trim().eq_ignore_ascii_case("off"))
    });
    on && dev.attributes().compute_capability.0 >= 9 && !stream_is_capturing(stream)
}

/// Most threads of one reduction block (`REDUCE_MAX_THREADS` in gemm_reduce.cu).
const REDUCE_MAX_THREADS: usize = 256;

/// Most lanes (runs of consecutive slices summed by threads of their own) per output group.
const REDUCE_MAX_LANES: usize = 8;

/// Grid of the reduction of `splits` slices for `groups` groups of four output columns: blocks
/// of `x` groups times `y` lanes. Each lane sums at least four consecutive slices (one round of
/// loads in flight), so `y` is the largest power of two up to eight and `splits / 4` (one lane,
/// the whole sum, below eight slices); `x` is 256 / `y`, or with one lane 64 when 256 would
/// leave SMs idle (a small output: spread over more SMs).
fn reduce_launch(dev: &Device, groups: usize, splits: usize) -> LaunchConfig {
    let sms = dev.multiprocessor_count().max(1) as usize;
    let (blocks, gx, lanes) = reduce_geometry(sms, groups, splits);
    LaunchConfig::new((blocks, 1, 1), (gx, lanes, 1))
}

/// [`reduce_launch`]'s blocks, groups per block and lanes on a device of `sms` SMs.
fn reduce_geometry(sms: usize, groups: usize, splits: usize) -> (u32, u32, u32) {
    let lanes = reduce_lanes(splits);
    let gx = if lanes > 1 {
        REDUCE_MAX_THREADS / lanes
    } else if groups < sms * REDUCE_MAX_THREADS {
        64
    } else {
        REDUCE_MAX_THREADS
    };
    let blocks = groups.div_ceil(gx).clamp(1, sms * 16);
    (blocks as u32, gx as u32, lanes as u32)
}

/// Lanes of the reduction of `splits` slices ([`reduce_launch`]).
fn reduce_lanes(splits: usize) -> usize {
    let mut lanes = 1;
    while lanes * 2 <= REDUCE_MAX_LANES && lanes * 2 * 4 <= splits {
        lanes *= 2;
    }
    lanes
}

/// `C = beta * C` over all batch entries (the k == 0 / alpha == 0 case).
///
/// # Safety
/// As for [`sgemm`] (only C is touched).
unsafe fn scale_c(stream: &Stream, dev: &Device, g: &RawGemm) -> Result<()> {
    let reduce = kernels::reduce_instantiation().load(dev)?;
    let mut b0 = 0usize;
    // The reduction indexes batch * m * n with 64-bit arithmetic; chunk the batch to keep the
    // `batch` argument in i32.
    while b0 < g.batch {
        let nb = (g.batch - b0).min(i32::MAX as usize);
        // splits = 0: no slices are read, C = beta * C.
        let args = reduce_args(g, b0, nb, g.c, g.ldc, 0, 0);
        // SAFETY: this fn's contract (C valid on the stream's device for batch entries
        // b0 .. b0 + nb and live until the work has run); no slices are read (splits = 0).
        unsafe {
            reduce.launch_unchecked(
                stream.cuda(),
                reduce_launch(dev, nb * g.m * g.n.div_ceil(4), 0),
                &args,
            )
        }?;
        b0 += nb;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::all_configs;
    use gpukit_jit::signature::parse_kernels;

    const TARGET: Target = Target {
        c: 4096,
        cols: 7,
        ldc: 8,
        stride_c: 64,
        alpha: 1.0,
        beta: 0.0,
    };

    /// A product timed with the flush after it is charged the window less a clean flush, and
    /// never less than a twentieth of the window (flush jitter on a short product).
    #[test]
    fn a_timed_window_is_charged_less_a_clean_flush() {
        assert_eq!(charged_us(60.0, 20.0), 40.0);
        assert_eq!(charged_us(21.0, 20.0), 1.05);
        assert_eq!(charged_us(19.0, 20.0), 0.95);
        assert!(charged_us(1e-3, 20.0) > 0.0);
        // The write-back a plan causes shows in its window: the same product leaving 10 us of
        // dirty lines behind is charged those 10 us.
        assert_eq!(charged_us(70.0, 20.0) - charged_us(60.0, 20.0), 10.0);
    }

    /// The reduction's blocks stay within the kernel's shared array (the limit read from the
    /// source), every lane sums at least four slices, and a small
    /// output over many slices gets every slice's load in flight at once (192 x 160 over 32).
    #[test]
    fn reduction_geometry_fits_the_kernel_and_spreads_the_slices() {
        let src = kernels::REDUCE_SOURCE;
        let at = src
            .find("#define REDUCE_MAX_THREADS ")
            .expect("the kernel's limit");
        let limit: usize = src[at + 27..]
            .split_whitespace()
            .next()
            .and_then(|t| t.parse().ok())
            .expect("a number");
        assert_eq!(limit, REDUCE_MAX_THREADS);
        for sms in [1, 78, 132] {
            for groups in [1, 7, 64, 7680, 33_792, 1 << 22] {
                for splits in 0..=256 {
                    let (blocks, gx, lanes) = reduce_geometry(sms, groups, splits);
                    let (gx, lanes) = (gx as usize, lanes as usize);
                    assert!(gx * lanes <= limit, "{sms} {groups} {splits}");
                    assert!(blocks >= 1 && blocks as usize <= sms * 16);
                    assert!(lanes.is_power_of_two() && lanes <= REDUCE_MAX_LANES);
                    // Lane y sums slices y * splits / lanes .. (y + 1) * splits / lanes.
                    if lanes > 1 {
                        for y in 0..lanes {
                            let run = (y + 1) * splits / lanes - y * splits / lanes;
                            assert!(
                                run >= 4,
                                "{splits} slices, {lanes} lanes: lane {y} has {run}"
                            );
                        }
                    }
                }
            }
        }
        assert_eq!(reduce_geometry(132, 7680, 32), (240, 32, 8));
        assert_eq!(reduce_geometry(132, 7680, 4), (120, 64, 1));
        assert_eq!(reduce_geometry(132, 1 << 22, 2), (2112, 256, 1));
    }

    /// The staged output is on by default: only `off` turns it off.
    #[test]
    fn the_staged_output_is_turned_off_by_off_only() {
        assert!(tma_store_requested(None));
        for v in ["off", "OFF", " Off "] {
            assert!(!tma_store_requested(Some(v)), "{v:?}");
        }
        for v in ["", "on", "1", "auto", "yes", "offf"] {
            assert!(tma_store_requested(Some(v)), "{v:?}");
        }
    }

    /// The argument lists built here match the kernels' parsed signatures (count, pointer vs
    /// value, widths) for every instantiation: a mismatch would otherwise surface only on a GPU.
    #[test]
    fn argument_lists_match_every_kernel_signature() {
        let g = RawGemm::contiguous(8, 8, 8, 256, 512, 4096);
        let packed = pack::Packed::for_test(1024, 2048);
        let (p, q) = operand::a_and_bt(&g, 0, 1);
        let tail = Tail::none();
        let call = |pmap: Option<&'static [u8]>| WgmmaCall {
            p: &p,
            q: &q,
            packed: &packed,
            pmap,
            qmap: None,
            cmap: Some(&[9u8; 128]),
            target: &TARGET,
            vec_c: true,
            splits: 2,
            kt_per_split: 3,
            nz: 2,
            tail: &tail,
        };
        for config in all_configs() {
            for v in kernels::variants_of(config) {
                let inst = kernels::instantiation(config, v);
                let sig = parse_kernels(inst.source())
                    .into_iter()
                    .find(|k| k.name == config.kernel_name())
                    .unwrap_or_else(|| panic!("{} not found", config.kernel_name()))
                    .instantiate(&inst.expr);
                let args = if config.family.is_wgmma() {
                    wgmma_args(&call(Some(&[7u8; 128])))
                } else {
                    simt_args(&g, 0, &TARGET, 2, 32)
                };
                gpukit_jit::check_args(&sig, &inst.expr, &args)
                    .unwrap_or_else(|e| panic!("{}: {e}", inst.expr));
            }
        }
        let sig = parse_kernels(kernels::REDUCE_SOURCE)
            .into_iter()
            .find(|k| k.name == kernels::REDUCE_KERNEL)
            .unwrap();
        gpukit_jit::check_args(&sig, "reduce", &reduce_args(&g, 0, 1, 8192, 8, 64, 3)).unwrap();
        gpukit_jit::check_args(&sig, "scale", &reduce_args(&g, 0, 1, g.c, 8, 0, 0)).unwrap();
        gpukit_jit::check_args(&sig, "flush", &flush_args(8192, 4096, 190)).unwrap();
        // The tensor maps travel as their 128 bytes each, zeros for an operand read packed.
        let a = wgmma_args(&call(None));
        assert_eq!(a[3], KernelArg::Bytes(vec![0u8; 128]));
        assert_eq!(a[4], KernelArg::Bytes(vec![0u8; 128]));
        let a = wgmma_args(&call(Some(&[7u8; 128])));
        assert_eq!(a[3], KernelArg::Bytes(vec![7u8; 128]));
        // The probe kernel takes a map and an output pointer.
        let inst = kernels::probe_instantiation();
        let sig = parse_kernels(inst.source())
            .into_iter()
            .find(|k| k.name == kernels::PROBE_KERNEL)
            .unwrap();
        let probe_args = vec![KernelArg::Bytes(vec![0u8; 128]), KernelArg::Ptr(4096)];
        gpukit_jit::check_args(&sig, &inst.expr, &probe_args).unwrap();
    }
}
