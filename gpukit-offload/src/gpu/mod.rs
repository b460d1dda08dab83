//! The GPU backend: cuBLAS (its `_64` API) and cuSOLVER (its 64-bit `X` API where one exists)
//! through cudarc's raw layer.
//!
//! * **Lanes, no global lock** (`lane`): a call checks a lane of streams, handles and buffers
//!   out of a pool, so calls from several threads run concurrently.
//! * **Pinned staging, overlapped** ([`staging`]): copies go through two pinned slots, the host
//!   packing or unpacking one piece while the DMA engine moves the other; column-separable
//!   BLAS-3 calls upload block j+1 while block j is computed.
//! * **Caller's buffers written only after success** (`exec`): every `info`, every
//!   non-finite check (`finite`) and every routine check is read before the first result is
//!   copied into the caller's memory, so any failure leaves the inputs untouched and the CPU
//!   library can run the call. Non-finite inputs always go to the CPU: LAPACK's own outcome
//!   (an `info`, an error, NaN propagation) is what the caller gets.
//! * **Start-up in steps** ([`startup`]): the context, cuBLAS and one lane's streams up front;
//!   cuSOLVER, pinned memory and the device arena when a call needs them; each step timed.
//! * One module per family of routines: `blas3`, `lu`, `cholesky`, `triangular`,
//!   `eigen`, `svd`, `qr`, `lstsq`.

mod blas3;
mod cholesky;
pub mod devices;
mod eigen;
mod exec;
pub mod fail;
mod finite;
mod flags;
pub mod kernels;
mod lane;
mod layout;
mod lstsq;
mod lu;
pub mod phases;
mod presize;
mod qr;
pub mod staging;
pub mod startup;
mod svd;
mod triangular;
mod workspace;

pub use fail::{GResult, GpuFail, GpuFailKind, Inject};
pub use lane::{LANE_ARENA_CAP, LANE_ARENA_MAX};
pub use phases::{Phase, PhaseTimes};
pub use presize::{presize_plan, Presized, PRESIZE_PINNED_MAX};
pub use startup::{StartupReport, Step};

use gpukit_core::HostWait;

/// How the offload backend's threads wait for the GPU unless `GPUKIT_OFFLOAD_HOST_WAIT` says
/// otherwise: the driver's choice (spinning, with fewer contexts than cores). Measured on an
/// H100 host, 16 cores, 2026-12-06, one call: issue 22's thread pool under `offload run`
/// (CPU-library calls beside GPU ones) took 5.11 / 4.82 s spinning, 5.70 / 5.43 yielding and
/// 5.17 / 5.38 blocking (two rounds, interleaved), so a spinning wait does not slow the CPU
/// library beside it there; and a blocking wait costs a wake-up on every call (a 64 x 64
/// `dgemm` 57 us instead of 34, a 4 x 4 `dpotrf` 83 instead of 42).
pub const DEFAULT_HOST_WAIT: HostWait = HostWait::Auto;

/// The settings of `GPUKIT_OFFLOAD_HOST_WAIT`, by name (the configuration parses them, the
/// start-up report names them).
pub const HOST_WAIT_NAMES: [(&[&str], HostWait); 4] = [
    (&["auto"], HostWait::Auto),
    (&["spin"], HostWait::Spin),
    (&["yield"], HostWait::Yield),
    (&["block"], HostWait::Block),
];

/// The setting's name in `GPUKIT_OFFLOAD_HOST_WAIT`.
pub fn host_wait_name(w: HostWait) -> &'static str {
    HOST_WAIT_NAMES
        .iter()
        .find(|(_, v)| *v == w)
        .map_or("auto", |(names, _)| names[0])
}

use crate::call::{Call, Op};
use crate::ops::{OpKind, Precision};
use exec::SIZING_ONLY;
use fail::fail;
use gpukit_core::{current_owner, Device, DeviceBuffer, OwnerId};
use kernels::CheckKernels;
use lane::{core_fail, Lane};
use parking_lot::Mutex;
use phases::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// How one attempt of a call ended (failures are `Err`).
pub(crate) enum Done {
    /// Results are in the caller's buffers.
    Ok,
    /// Nothing was written; run again with the QR-iteration SVD (the polar SVD perturbed the
    /// singular values more than the guard allows).
    RetryQr,
}

/// Why the GPU path cannot run this call, if it cannot (the dispatcher runs it on the CPU).
pub fn unsupported(call: &Call) -> Option<&'static str> {
    let alpha_zero = match &call.op {
        Op::Gemm { alpha, .. }
        | Op::Symm { alpha, .. }
        | Op::Hemm { alpha, .. }
        | Op::Syrk { alpha, .. }
        | Op::Herk { alpha, .. }
        | Op::Trsm { alpha, .. }
        | Op::Trmm { alpha, .. } => alpha.is_zero(),
        _ => false,
    };
    if alpha_zero {
        // BLAS does not read A (and B) then: only C (B) is scaled, at memory speed on the CPU,
        // and NaN in the unread operands must not show
        return Some("alpha = 0: nothing to compute but a scaling");
    }
    // the 32-bit legacy cuSOLVER functions (potri, orgqr, ormqr of the full SVD and of gelsd)
    // bound the order
    let legacy = match &call.op {
        Op::Potri { n, .. } => Some(*n),
        Op::Orgqr { m, .. } => Some(*m),
        Op::Gelsd { m, n, nrhs, .. } => Some((*m).max(*n).max(*nrhs)),
        Op::Svd {
            routine,
            jobu,
            jobvt,
            m,
            n,
            ..
        } => {
            let plan = svd::SvdPlan::new(*routine, *jobu, *jobvt, *m, *n);
            (plan.method(false) == svd::Method::PolarFull).then_some(plan.rows())
        }
        _ => None,
    };
    if legacy.is_some_and(|d| d > i32::MAX as usize) {
        return Some("order too large for the 32-bit cuSOLVER functions this call needs");
    }
    None
}

/// An SVD job's destinations (what the GPU path writes where; the GPU tests check every job
/// against it): columns of U written to `u`, rows of VT written to `vt`, and what A receives
/// (`'U'`: U's first columns, `'V'`: VT's first rows, `'D'`: A as the reduction destroyed it).
pub fn svd_plan(
    routine: crate::ops::Routine,
    jobu: crate::ops::SvdJob,
    jobvt: crate::ops::SvdJob,
    m: usize,
    n: usize,
) -> (usize, usize, char) {
    let p = svd::SvdPlan::new(routine, jobu, jobvt, m, n);
    let a = match p.a_out {
        svd::AOut::U => 'U',
        svd::AOut::Vt => 'V',
        svd::AOut::Destroyed => 'D',
    };
    (p.u_cols, p.vt_rows, a)
}

/// LAPACK's rank rule for gelsd (`dlalsd`), as the GPU path applies it: the effective rank,
/// the threshold, and the factors that scale `U^H B`.
pub use lstsq::rank_and_scale as gelsd_rank;

/// Whether a call needs cuSOLVER (every LAPACK routine but trtrs, which is a cuBLAS trsm:
/// [`crate::routines::RoutineInfo::solver`]).
pub(crate) fn needs_solver(op: &Op) -> bool {
    op.routine().info().solver
}

/// The owner an offloaded call's device memory is charged to: the caller's
/// ([`gpukit_core::Allocator::with_owner`], e.g. a gpukit-sched task), else `gpukit-offload`.
pub fn memory_owner() -> OwnerId {
    let o = current_owner();
    if o == OwnerId::default_owner() {
        OwnerId::new("gpukit-offload")
    } else {
        o
    }
}

/// A new lane, its cuBLAS workspace charged to `gpukit-offload` (a lane outlives the call that
/// made it, so the caller's owner is not the one to pay for it).
fn new_lane(dev: &Device, report: Option<&mut StartupReport>) -> GResult<Lane> {
    dev.allocator()
        .with_owner(&OwnerId::new("gpukit-offload"), || Lane::new(dev, report))
}

/// Device memory kept free beside a call's buffers (other users of the GPU, library
/// workspaces): a call that would leave less runs on the CPU.
const HEADROOM: usize = 512 << 20;

/// Whether `need` bytes may be taken with `free` bytes free on the device and `cached` bytes
/// held free in the allocator's cache.
pub(crate) fn memory_fits(need: usize, free: usize, cached: usize) -> bool {
    need <= cached || need + HEADROOM <= free + cached
}

/// The started GPU backend, standing on gpukit-core's device (context, streams, allocator,
/// pinned pool, handle cache).
pub struct GpuBackend {
    lanes: Mutex<Vec<Lane>>,
    dev: Device,
    inject: AtomicU8,
    report: Mutex<StartupReport>,
    solver_lib: OnceLock<Result<(), String>>,
    checks: OnceLock<GResult<CheckKernels>>,
    polar_retries: AtomicU64,
    timing: AtomicBool,
    phases: Mutex<PhaseTimes>,
}

impl GpuBackend {
    /// Checks the CUDA driver and cuBLAS, opens the first visible GPU and creates the first lane (streams,
    /// events, a cuBLAS handle): what every offloaded call needs. cuSOLVER, pinned staging and
    /// device memory come with the first call that needs them. Each step is timed into
    /// [`GpuBackend::startup_report`].
    pub fn start() -> crate::Result<GpuBackend> {
        GpuBackend::start_on(0)
    }

    /// [`GpuBackend::start`] on the GPU of ordinal `ordinal` in the visible set (a process
    /// with several GPUs runs one backend per GPU: [`devices::Devices`]), its threads waiting
    /// for the GPU as [`DEFAULT_HOST_WAIT`] says.
    pub fn start_on(ordinal: usize) -> crate::Result<GpuBackend> {
        GpuBackend::start_waiting(ordinal, DEFAULT_HOST_WAIT)
    }

    /// [`GpuBackend::start_on`] with the way host threads wait for the GPU (the context's
    /// scheduling flags, [`gpukit_core::Device::set_host_wait`]; `Auto` leaves the context's
    /// flags as they are). A driver that cannot set it
    /// (older than CUDA 12.1) keeps its own, noted in the start-up report.
    pub fn start_waiting(ordinal: usize, wait: HostWait) -> crate::Result<GpuBackend> {
        let unavailable = |e: String| crate::Error::GpuUnavailable(e);
        let mut report = StartupReport::default();
        let t = Instant::now();
        gpukit_jit::libs::ensure_driver().map_err(|e| unavailable(e.to_string()))?;
        report.record(Step::DriverLibrary, t.elapsed());
        let t = Instant::now();
        if !gpukit_jit::libs::gpu_available() {
            return Err(unavailable("the CUDA driver reports no device".into()));
        }
        report.record(Step::Init, t.elapsed());
        let t = Instant::now();
        if startup::keep_loaded("cublas").is_none() {
            return Err(unavailable(
                "libcublas cannot be loaded: install the CUDA toolkit's cuBLAS (or the nvidia-cublas wheel) and make it visible to the loader".into(),
            ));
        }
        report.record(Step::BlasLibrary, t.elapsed());
        let t = Instant::now();
        let dev = Device::open(ordinal).map_err(|e| unavailable(e.to_string()))?;
        dev.context()
            .bind_to_thread()
            .map_err(|e| unavailable(e.to_string()))?;
        // `Auto` leaves the context's flags as they are (the driver's, or those another user
        // of the primary context in this process chose)
        if wait != HostWait::Auto {
            if let Err(e) = dev.set_host_wait(wait) {
                report.note(format!("host wait {} not set: {e}", host_wait_name(wait)));
            }
        }
        report.record(Step::Context, t.elapsed());
        let lane = new_lane(&dev, Some(&mut report)).map_err(|e| unavailable(e.to_string()))?;
        report.mark_started();
        // failures are injected by the caller (the dispatcher reads GPUKIT_OFFLOAD_INJECT_FAILURE)
        Ok(GpuBackend {
            lanes: Mutex::new(vec![lane]),
            dev,
            inject: AtomicU8::new(Inject::None as u8),
            report: Mutex::new(report),
            solver_lib: OnceLock::new(),
            checks: OnceLock::new(),
            polar_retries: AtomicU64::new(0),
            timing: AtomicBool::new(false),
            phases: Mutex::new(PhaseTimes::default()),
        })
    }

    /// How many GPUs this process sees (`CUDA_VISIBLE_DEVICES` as CUDA reads it).
    pub fn visible_count() -> usize {
        Device::count().unwrap_or(0)
    }

    /// The device name.
    pub fn name(&self) -> &str {
        self.dev.name()
    }

    /// The device (gpukit-core's shared state: allocator, pinned pool, attributes).
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The start-up steps so far, timed (later steps: cuSOLVER, warm-ups, presizing).
    pub fn startup_report(&self) -> StartupReport {
        self.report.lock().clone()
    }

    /// How often a polar-decomposition SVD was re-run with the QR-iteration SVD because its
    /// perturbation exceeded the guard (or, for gelsd, came near the rank threshold).
    pub fn polar_retries(&self) -> u64 {
        self.polar_retries.load(Ordering::Relaxed)
    }

    /// Sets a failure to inject into every following call (tests).
    pub fn set_inject(&self, i: Inject) {
        self.inject.store(i as u8, Ordering::Relaxed);
    }

    pub(crate) fn injected(&self) -> Inject {
        Inject::from_u8(self.inject.load(Ordering::Relaxed))
    }

    /// Times every following call's phases (off by default: calls then read no clock); the
    /// totals are read with [`GpuBackend::take_phase_times`]. The counts of synchronisations,
    /// copies, own launches, workspace queries and allocations are kept while timing is on.
    pub fn set_phase_timing(&self, on: bool) {
        self.timing.store(on, Ordering::Relaxed);
    }

    /// The phase totals of the calls since the last take (and resets them).
    pub fn take_phase_times(&self) -> PhaseTimes {
        std::mem::take(&mut *self.phases.lock())
    }

    /// The non-finite check kernels, loaded into the context the first time (timed into the
    /// start-up report); the outcome is kept.
    pub(crate) fn check_kernels(&self) -> GResult<&CheckKernels> {
        self.checks
            .get_or_init(|| {
                let t = Instant::now();
                let r = CheckKernels::load();
                self.report.lock().record(Step::CheckKernels, t.elapsed());
                r
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads libcusolver, takes the cuSOLVER handle of an idle lane and loads the non-finite
    /// check kernels now (a LAPACK call does this itself when it comes): for a start-up thread
    /// that has seen a LAPACK call and wants the load off that call's path.
    pub fn load_solver(&self) -> GResult<()> {
        self.bind()?;
        let mut lane = self.checkout()?;
        let r = self.prepare_solver(&mut lane);
        self.checkin(lane);
        // the LAPACK calls' non-finite checks: their PTX is compiled by the driver here, off
        // the first call's path
        r.and_then(|()| self.check_kernels().map(|_| ()))
    }

    /// True once libcusolver is loaded.
    pub fn solver_loaded(&self) -> bool {
        matches!(self.solver_lib.get(), Some(Ok(())))
    }

    /// Loads libcusolver the first time (cudarc panics on a missing library, so this runs
    /// before any cuSOLVER function); the outcome is kept.
    fn solver_library(&self) -> GResult<()> {
        let r = self.solver_lib.get_or_init(|| {
            let t = Instant::now();
            let r = startup::keep_loaded("cusolver").map(|_| ()).ok_or_else(|| {
                "libcusolver cannot be loaded: install the CUDA toolkit's cuSOLVER (or the nvidia-cusolver wheel) and make it visible to the loader".to_string()
            });
            self.report.lock().record(Step::SolverLibrary, t.elapsed());
            r
        });
        r.clone().map_err(|e| fail(GpuFailKind::Error, e))
    }

    /// libcusolver loaded and the lane's cuSOLVER handle taken (the first one timed into the
    /// start-up report).
    fn prepare_solver(&self, lane: &mut Lane) -> GResult<()> {
        self.solver_library()?;
        if lane.has_solver() {
            return Ok(());
        }
        let t = Instant::now();
        lane.take_solver()?;
        let mut r = self.report.lock();
        if r.of(&Step::SolverHandle).is_none() {
            r.record(Step::SolverHandle, t.elapsed());
        }
        Ok(())
    }

    /// `bytes` of device memory from the device allocator for a call on `lane`, charged to
    /// [`memory_owner`], ordered after the lane's three streams when given back.
    pub(crate) fn device_memory(&self, bytes: usize, lane: &Lane) -> GResult<DeviceBuffer> {
        let buf = self.device_block(bytes, lane)?;
        for s in lane.transfer_streams() {
            buf.record_stream(s);
        }
        Ok(buf)
    }

    /// A lane's own arena of `bytes` on its compute stream, charged to `gpukit-offload` (it
    /// outlives the calls that use it, as cuBLAS' workspace does).
    pub(crate) fn lane_arena(&self, bytes: usize, lane: &Lane) -> GResult<DeviceBuffer> {
        self.dev
            .allocator()
            .with_owner(&OwnerId::new("gpukit-offload"), || {
                self.device_block(bytes, lane)
            })
    }

    /// A block of `bytes` on the lane's compute stream, used by nothing else: dropped, it goes
    /// straight back to the allocator's cache for that stream (a block recorded on the transfer
    /// streams waits for their events first and is not counted as cached meanwhile, which is
    /// why presizing with [`GpuBackend::device_memory`] left 17 of 72 MB visible on the H200).
    pub(crate) fn device_block(&self, bytes: usize, lane: &Lane) -> GResult<DeviceBuffer> {
        let alloc = self.dev.allocator();
        let st = alloc.stats();
        let cached = st.reserved.saturating_sub(st.in_use);
        if bytes > cached {
            let free = self
                .dev
                .free_memory()
                .map_err(|e| core_fail("memory query", e))?;
            if !memory_fits(bytes, free, cached) {
                return Err(fail(
                    GpuFailKind::OutOfMemory,
                    format!(
                        "need {} MiB of device memory, {} MiB free",
                        bytes >> 20,
                        free >> 20
                    ),
                ));
            }
        }
        alloc
            .alloc_for(&memory_owner(), bytes, lane.compute())
            .map_err(|e| core_fail("device allocation", e))
    }

    fn bind(&self) -> GResult<()> {
        self.dev
            .context()
            .bind_to_thread()
            .map_err(|e| fail(GpuFailKind::Error, format!("binding the context: {e}")))
    }

    fn checkout(&self) -> GResult<Lane> {
        let lane = self.lanes.lock().pop();
        match lane {
            Some(l) => Ok(l),
            None => new_lane(&self.dev, None),
        }
    }

    /// Returns a lane to the pool if its streams are healthy (a lane that failed to
    /// synchronise is dropped). A lane whose call ended synchronised is idle: no wait.
    fn checkin(&self, mut lane: Lane) {
        if !lane.dirty || lane.sync_all().is_ok() {
            lane.dirty = false;
            self.lanes.lock().push(lane);
        }
    }

    /// Runs one small call of each `(kind, precision)` untimed by the dispatcher, so the kernels
    /// those routines use are loaded before their first real call; each is timed into the
    /// start-up report. Failures are ignored: a real call meets them again and falls back.
    pub fn warm_up(&self, what: &[(OpKind, Precision)]) {
        use crate::calibrate::Case;
        for &(kind, p) in what {
            if !kind.routine.precisions().contains(&p) {
                continue;
            }
            let (x1, x2) = kind.routine.info().warm_up;
            let mut case = Case::new(kind, p, x1, x2);
            case.reset();
            let call = case.call(kind, p, x1, x2);
            let t = Instant::now();
            // SAFETY: the call's buffers belong to `case` and match its dimensions.
            let _ = unsafe { self.run(&call) };
            self.report
                .lock()
                .record(Step::WarmUp(call.name()), t.elapsed());
        }
    }

    /// Reserves, on an idle lane, the device memory (in the allocator's cache, for the lane's
    /// stream) and the pinned staging that the largest of `calls` needs (bounded by
    /// [`presize_plan`]), so that the first such call allocates nothing inside its own time.
    /// Each call's layout is found by running it in sizing-only mode (workspace queries, then
    /// a stop before anything is copied). Nothing is read from or written to the calls'
    /// buffers (they may be [`Call::without_data`]).
    pub fn presize(&self, calls: &[Call]) -> GResult<Presized> {
        self.bind()?;
        let t = Instant::now();
        let mut lane = self.checkout()?;
        let r = self.presize_on(&mut lane, calls);
        lane.sizing = None;
        self.checkin(lane);
        self.report.lock().record(Step::Presize, t.elapsed());
        r
    }

    fn presize_on(&self, lane: &mut Lane, calls: &[Call]) -> GResult<Presized> {
        let mut needs = Vec::with_capacity(calls.len());
        for call in calls {
            if unsupported(call).is_some() || call.check().is_err() {
                continue;
            }
            let lapack = needs_solver(&call.op);
            if lapack {
                self.prepare_solver(lane)?;
            }
            lane.sizing = Some(None);
            let r = lane.with_handles(lapack, |lane| {
                // SAFETY: a sizing-only run stops in `Exec::begin`, before the first access
                // to any host pointer of the call (everything before it is shape arithmetic
                // and workspace queries with null matrix pointers).
                unsafe { self.run_on(lane, call, false) }.map(|_| ())
            });
            let lay = lane.sizing.take().flatten();
            // a call whose sizing run fails (a workspace query) is left to size itself
            if let (Err(f), Some(l)) = (r, lay) {
                if f.detail == SIZING_ONLY {
                    needs.push((l.total(), presize::staging_need(&l)));
                }
            }
        }
        let (dev, pinned) =
            presize_plan(&needs, 0, lane.staging.pinned_bytes(), PRESIZE_PINNED_MAX);
        if let Some(d) = dev {
            // taken and given back, never used by a stream: the allocator keeps it cached for
            // this lane's compute stream at once
            drop(self.device_block(d, lane)?);
        }
        if let Some(p) = pinned {
            lane.staging.ensure(p / 2)?;
        }
        Ok(Presized {
            need_dev: needs.iter().map(|n| n.0).max().unwrap_or(0),
            need_pinned: needs.iter().map(|n| n.1).max().unwrap_or(0),
            dev: self.reserved().0,
            pinned: lane.staging.pinned_bytes(),
        })
    }

    /// Device memory the allocator holds free for reuse, and the largest pinned memory among
    /// the idle lanes (staging slots and bounce buffer, bytes).
    pub fn reserved(&self) -> (usize, usize) {
        let st = self.dev.allocator().stats();
        let lanes = self.lanes.lock();
        (
            st.reserved.saturating_sub(st.in_use),
            lanes
                .iter()
                .map(|l| l.staging.pinned_bytes() + l.bounce.pinned_bytes())
                .max()
                .unwrap_or(0),
        )
    }

    /// Runs a checked call on the GPU. On `Err` the caller's buffers are untouched, except
    /// after [`GpuFailKind::Lost`] (the device failed while results were being written).
    ///
    /// # Safety
    /// Every pointer in `call` must be valid for its extent; [`Call::check`] passed and
    /// [`unsupported`] returned `None`.
    pub unsafe fn run(&self, call: &Call) -> GResult<()> {
        // SAFETY: forwarded.
        unsafe { self.run_gated(call, None) }
    }

    /// [`GpuBackend::run`] of one part of a split call: the results are written only when
    /// `arrival` says every part may commit ([`devices::Gate`]).
    ///
    /// # Safety
    /// As [`GpuBackend::run`].
    pub(crate) unsafe fn run_gated(
        &self,
        call: &Call,
        arrival: Option<devices::Arrival>,
    ) -> GResult<()> {
        let timed = self.timing.load(Ordering::Relaxed);
        let mut clock = Clock::new(timed);
        self.bind()?;
        let mut lane = self.checkout()?;
        std::mem::swap(&mut lane.clock, &mut clock);
        let lapack = needs_solver(&call.op);
        let r = if lapack {
            self.prepare_solver(&mut lane)
        } else {
            Ok(())
        }
        .and_then(|()| {
            lane.gate = arrival;
            lane.with_handles(lapack, |lane| {
                lane.mark(Phase::Lane);
                // SAFETY: forwarded.
                let mut r = unsafe { self.run_on(lane, call, false) };
                if matches!(r, Ok(Done::RetryQr)) {
                    self.polar_retries.fetch_add(1, Ordering::Relaxed);
                    // the polar SVD perturbed the singular values too much: the QR-iteration
                    // SVD, on the same (still untouched) inputs
                    // SAFETY: forwarded.
                    r = unsafe { self.run_on(lane, call, true) };
                }
                lane.mark(Phase::Launch);
                r
            })
        })
        .and_then(|d| match d {
            Done::Ok => Ok(()),
            Done::RetryQr => Err(fail(GpuFailKind::Error, "SVD retry did not finish")),
        });
        // a part that never reached its commit releases the others (Arrival's drop)
        lane.gate = None;
        std::mem::swap(&mut lane.clock, &mut clock);
        self.checkin(lane);
        if timed {
            clock.mark(Phase::Lane);
            self.phases.lock().add(&clock.t);
        }
        r
    }

    /// One attempt of a call on `lane`; `svd_qr` forces the QR-iteration SVD.
    ///
    /// # Safety
    /// As [`GpuBackend::run`].
    unsafe fn run_on(&self, lane: &mut Lane, call: &Call, svd_qr: bool) -> GResult<Done> {
        if self.injected() == Inject::OutOfMemory {
            return Err(fail(GpuFailKind::Injected, "injected out-of-memory"));
        }
        let p = call.prec;
        // SAFETY: (every arm) the call's pointers are valid for its extents (contract).
        unsafe {
            match call.op {
                Op::Gemm { .. }
                | Op::Symm { .. }
                | Op::Hemm { .. }
                | Op::Syrk { .. }
                | Op::Herk { .. }
                | Op::Trsm { .. }
                | Op::Trmm { .. } => blas3::run(self, lane, p, &call.op).map(|()| Done::Ok),
                Op::Getrf { .. } | Op::Getrs { .. } | Op::Gesv { .. } | Op::Getri { .. } => {
                    lu::run(self, lane, p, &call.op).map(|()| Done::Ok)
                }
                Op::Potrf { .. } | Op::Potrs { .. } | Op::Posv { .. } | Op::Potri { .. } => {
                    cholesky::run(self, lane, p, &call.op).map(|()| Done::Ok)
                }
                Op::Trtrs { .. } => triangular::run(self, lane, p, &call.op).map(|()| Done::Ok),
                Op::Syevd { .. } | Op::Syevr { .. } => {
                    eigen::run(self, lane, p, &call.op).map(|()| Done::Ok)
                }
                Op::Svd { .. } => svd::run(self, lane, p, &call.op, svd_qr),
                Op::Geqrf { .. } | Op::Orgqr { .. } => {
                    qr::run(self, lane, p, &call.op).map(|()| Done::Ok)
                }
                Op::Gelsd { .. } => lstsq::run(self, lane, p, &call.op, svd_qr),
            }
        }
    }

    /// Measures staging throughput: `(h2d bytes/s, d2h bytes/s)` for a `bytes`-sized pageable
    /// buffer, as the backend copies it (pack + DMA, DMA + unpack), best of three.
    pub fn measure_copies(&self, bytes: usize) -> crate::Result<(f64, f64)> {
        let err = |e: GpuFail| crate::Error::Gpu {
            what: "copy calibration",
            detail: e.to_string(),
        };
        self.bind().map_err(err)?;
        let mut lane = self.checkout().map_err(err)?;
        let mut host = vec![1u8; bytes];
        let m = crate::call::HostMat::new(host.as_mut_ptr(), bytes, 1, bytes.max(1));
        let r = (|| -> GResult<(f64, f64)> {
            let buf = self.device_memory(bytes, &lane)?;
            let base = buf.ptr();
            let mut best = (f64::MAX, f64::MAX);
            for _ in 0..3 {
                let t = Instant::now();
                // SAFETY: `host` holds `bytes`; the arena holds `bytes` at `base`.
                unsafe { lane.staging.upload(&m, 1, base, lane.h2d)? };
                lane.sync_all()?;
                best.0 = best.0.min(t.elapsed().as_secs_f64());
                let t = Instant::now();
                // SAFETY: as above; the streams are idle.
                unsafe { lane.staging.copy_out(base, &m, 1, lane.d2h) }.map_err(|(e, _)| e)?;
                best.1 = best.1.min(t.elapsed().as_secs_f64());
            }
            drop(buf);
            Ok((bytes as f64 / best.0, bytes as f64 / best.1))
        })();
        self.checkin(lane);
        r.map_err(err)
    }
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
        // the lanes destroy their events in this context
        let _ = self.dev.context().bind_to_thread();
        self.lanes.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn memory_is_taken_from_the_cache_or_with_headroom() {
        assert!(memory_fits(100 * MIB, 0, 100 * MIB));
        assert!(memory_fits(100 * MIB, 612 * MIB, 0));
        assert!(!memory_fits(100 * MIB, 611 * MIB, 0));
        assert!(memory_fits(300 * MIB, 612 * MIB, 200 * MIB));
        assert!(!memory_fits(300 * MIB, 611 * MIB, 200 * MIB));
    }

    #[test]
    fn only_lapack_routines_take_a_solver_handle() {
        use crate::call::HostMat;
        use crate::ops::Uplo;
        let a = HostMat::new(std::ptr::null_mut(), 4, 4, 4);
        assert!(needs_solver(&Op::Potrf {
            uplo: Uplo::Lower,
            n: 4,
            a
        }));
        assert!(!needs_solver(&Op::Trtrs {
            uplo: Uplo::Lower,
            trans: crate::ops::Trans::No,
            diag: crate::ops::Diag::NonUnit,
            n: 4,
            nrhs: 1,
            a,
            b: a
        }));
    }

    #[test]
    fn memory_is_charged_to_the_caller_or_to_offload() {
        assert_eq!(memory_owner().as_str(), "gpukit-offload");
    }
}
