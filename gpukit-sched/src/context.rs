//! What a task's closure gets: its streams (on its green context), allocations charged to it,
//! kernel launches that count, follow lending and pace, and its safe points.

use crate::error::{Error, Result};
use crate::green::make_current;
use crate::lanes::{Lane, LaneKey};
use crate::pacer::Pacer;
use crate::plan::{Grant, TaskId};
use crate::scheduler::Inner;
use crate::sm::{ComputeGrant, Mechanism};
use crate::spec::QosClass;
use crate::task::Task;
use cudarc::driver::sys;
use gpukit_core::handles::BlasHandle;
use gpukit_core::{Device, DeviceBuffer, Event, Stream};
use gpukit_jit::{Kernel, KernelArg, LaunchConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The device side of a running task.
pub(crate) struct TaskGpu {
    pub dev: Device,
    pub home: Lane,
    pub lent: Option<Lane>,
    pub on_lent: bool,
    pub seen_generation: u64,
    pub pacer: Option<Pacer>,
    /// The task's own cuBLAS handle (its workspace charged to the task); dropped before the
    /// lanes are returned.
    pub blas: Option<BlasHandle>,
    pub t0: Option<Event>,
}

/// What a task's closure gets: its streams (on its green context), an allocator charged to
/// it, kernel launches that count, follow lending and are paced, and safe points.
///
/// gpukit-core operations inside the task run on [`stream`](Self::stream) (the task's *home*
/// stream: its own SM groups, or the floor for BestEffort tasks) and are charged to the task.
/// Kernels launched with [`launch`](Self::launch) also use SM groups lent to the task while it
/// has them; lent groups are given up at the next launch after they are taken back.
///
/// Safe points — [`check`](Self::check), [`launch`](Self::launch), [`alloc`](Self::alloc),
/// [`reserve_memory`](Self::reserve_memory), [`synchronize`](Self::synchronize),
/// [`cublas`](Self::cublas) and every allocation made by gpukit-core inside the task — return
/// the stop's error once the task is asked to stop (cancelled, timed out, preempted, shut
/// down). Return it (`?`) and the task ends in the stop's state.
pub struct TaskContext {
    pub(crate) inner: Arc<Inner>,
    pub(crate) task: Arc<Task>,
    pub(crate) grant: Grant,
    pub(crate) gpu: Option<TaskGpu>,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("task", &self.task.spec.name)
            .field("grant", &self.grant)
            .finish()
    }
}

/// Memory reserved in the task's ledger without a gpukit-core allocation (for libraries that
/// allocate device memory themselves): charged like an allocation, returned on drop.
pub struct MemoryReservation {
    inner: Arc<Inner>,
    owner: gpukit_core::OwnerId,
    bytes: u64,
}

impl std::fmt::Debug for MemoryReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryReservation")
            .field("owner", &self.owner)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl MemoryReservation {
    /// Bytes reserved.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for MemoryReservation {
    fn drop(&mut self) {
        self.inner.memory.release(&self.owner, self.bytes);
    }
}

impl TaskContext {
    fn gpu(&self) -> Result<&TaskGpu> {
        self.gpu.as_ref().ok_or(Error::NoDevice)
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task.id
    }
    /// The task's name.
    pub fn name(&self) -> &str {
        &self.task.spec.name
    }
    /// Its QoS class.
    pub fn qos(&self) -> QosClass {
        self.task.spec.qos
    }
    /// The compute it was given (groups, SMs, share, mechanism, pace).
    pub fn compute(&self) -> ComputeGrant {
        self.grant.compute
    }
    /// Bytes committed to it.
    pub fn memory_committed(&self) -> u64 {
        self.grant.memory_committed
    }
    /// Its memory limit (its own, capped by its partition's quota).
    pub fn memory_limit(&self) -> u64 {
        self.grant.memory_limit
    }
    /// Bytes charged to it now.
    pub fn memory_in_use(&self) -> u64 {
        self.inner.memory.usage(&self.task.owner).0
    }
    /// SMs of the home stream's context (0 without a device).
    pub fn home_sms(&self) -> u32 {
        self.gpu.as_ref().map_or(0, |g| g.home.sms)
    }
    /// SMs of the stream the next launch goes to (home, or home + lent groups).
    pub fn current_sms(&mut self) -> Result<u32> {
        self.refresh()?;
        let g = self.gpu()?;
        Ok(match (&g.lent, g.on_lent) {
            (Some(l), true) => l.sms,
            _ => g.home.sms,
        })
    }
    /// The device; [`Error::NoDevice`] in a task of a CPU-only scheduler.
    pub fn device(&self) -> Result<&Device> {
        Ok(&self.gpu()?.dev)
    }
    /// The home stream (gpukit-core operations in the task run here).
    pub fn stream(&self) -> Result<&Stream> {
        Ok(&self.gpu()?.home.stream)
    }
    /// The raw home stream and its context, for raw driver or library calls (both live while
    /// the task runs; make the context current with [`make_current`](Self::make_current)).
    pub fn raw_stream(&self) -> Result<(sys::CUstream, sys::CUcontext)> {
        let g = self.gpu()?;
        Ok((g.home.raw(), g.home.ctx))
    }

    /// Makes the home stream's context (the task's green context, or the primary context)
    /// current on this thread, for raw launches on [`raw_stream`](Self::raw_stream).
    pub fn make_current(&self) -> Result<()> {
        let g = self.gpu()?;
        // SAFETY: the home lane keeps its context alive while the task holds it.
        unsafe { make_current(g.home.ctx) }
    }

    /// A safe point (and, when paced, a pacing point): `Err` once the task is asked to stop.
    pub fn check(&mut self) -> Result<()> {
        self.task.safe_point()?;
        self.refresh()?;
        self.pace()
    }

    /// The error for an allocation the ledger refused, structured.
    fn refused(&self, e: gpukit_core::Error) -> Error {
        match e {
            gpukit_core::Error::AllocationRefused { .. }
            | gpukit_core::Error::QuotaExceeded { .. } => {
                if let Err(stop) = self.task.safe_point() {
                    return stop;
                }
                self.inner
                    .memory
                    .refusal_error(&self.task.owner, &self.task.spec.name)
                    .unwrap_or(Error::Core(e))
            }
            e => Error::Core(e),
        }
    }

    /// Allocates `bytes` on the home stream, charged to this task (limit, commitment and
    /// eviction apply): [`Error::QuotaExceeded`] past its limit, [`Error::MemoryPressure`]
    /// above its request when nothing is free, the stop's error once it is asked to stop.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.task.safe_point()?;
        let g = self.gpu()?;
        g.dev
            .allocator()
            .alloc_for(&self.task.owner, bytes, &g.home.stream)
            .map_err(|e| self.refused(e))
    }

    /// Reserves `bytes` in the task's memory ledger without allocating (for device memory a
    /// library allocates itself): the same checks as [`alloc`](Self::alloc), returned when the
    /// reservation is dropped. Works without a device too.
    pub fn reserve_memory(&self, bytes: u64) -> Result<MemoryReservation> {
        self.task.safe_point()?;
        match self.inner.memory.charge(&self.task.owner, bytes) {
            Ok(()) => Ok(MemoryReservation {
                inner: self.inner.clone(),
                owner: self.task.owner.clone(),
                bytes,
            }),
            Err(crate::ledger::Refusal::Stopped) => {
                self.task.safe_point()?;
                Err(Error::internal(
                    "reserving memory",
                    "refused as stopped without a stop",
                ))
            }
            Err(r) => Err(crate::memory::refusal_error(&self.task.spec.name, r)),
        }
    }

    /// Records that the task moved `bytes` (for the achieved-bandwidth figure in its stats).
    pub fn report_bytes(&self, bytes: u64) {
        self.task.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A cuBLAS handle (gpukit-core's [`BlasHandle`]) bound to the home stream, so cuBLAS
    /// kernels run on the task's SMs; its workspace is an allocation charged to the task (past
    /// the task's limit this is [`Error::QuotaExceeded`]). The handle is the task's own and is
    /// destroyed when the task ends. A safe point and a pacing point.
    pub fn cublas(&mut self) -> Result<&BlasHandle> {
        self.check()?;
        let owner = self.task.owner.clone();
        let made = {
            let g = self.gpu.as_ref().ok_or(Error::NoDevice)?;
            if g.blas.is_some() {
                None
            } else {
                let stream = g.home.stream.clone();
                // SAFETY: the home lane keeps its context alive while the task holds it.
                unsafe { make_current(g.home.ctx) }?;
                Some(
                    g.dev
                        .allocator()
                        .with_owner(&owner, || BlasHandle::create(&stream)),
                )
            }
        };
        if let Some(made) = made {
            let h = made.map_err(|e| self.refused(e))?;
            if let Some(g) = self.gpu.as_mut() {
                g.blas = Some(h);
            }
        }
        self.gpu
            .as_ref()
            .and_then(|g| g.blas.as_ref())
            .ok_or_else(|| Error::internal("creating a cuBLAS handle", "handle missing"))
    }

    /// Blocks until the task's queued work is done. A safe point and a pacing point.
    pub fn synchronize(&mut self) -> Result<()> {
        self.check()?;
        let g = self.gpu()?;
        if let Some(l) = &g.lent {
            l.stream.synchronize()?;
        }
        g.home.stream.synchronize()?;
        Ok(())
    }

    /// Applies lending changes the scheduler published: moves onto or off lent groups (green
    /// contexts) or changes the pace (fallback).
    fn refresh(&mut self) -> Result<()> {
        let gen = self.task.generation.load(Ordering::Acquire);
        let Some(g) = self.gpu.as_mut() else {
            return Ok(());
        };
        if gen == g.seen_generation {
            return Ok(());
        }
        g.seen_generation = gen;
        let inner = &self.inner;
        let (own, lent) = *self.task.usable.lock();
        if inner.split().is_none() {
            if let (Some(p), Some(duty)) = (g.pacer.as_mut(), inner.duty(&self.grant, own, lent)) {
                p.budget.set_duty(duty, Instant::now());
            }
            return Ok(());
        }
        if lent.is_empty() {
            if g.on_lent {
                switch_to_home(g)?;
            }
            return Ok(());
        }
        let key = inner.lent_key(own, lent, self.grant.compute.mechanism);
        if g.lent.as_ref().map(|l| l.key) == Some(key) {
            if !g.on_lent {
                switch_to_lent(g)?;
            }
            return Ok(());
        }
        if g.on_lent {
            switch_to_home(g)?;
        }
        if let Some(old) = g.lent.take() {
            inner.checkin(old);
        }
        g.lent = Some(inner.checkout(key)?);
        switch_to_lent(g)
    }

    /// Charges what the pacer has measured and waits while the task is over budget (in
    /// slices, ending early with the stop's error).
    fn throttle(&mut self) -> Result<()> {
        let Some(p) = self.gpu.as_mut().and_then(|g| g.pacer.as_mut()) else {
            return Ok(());
        };
        if !p.active() {
            return Ok(());
        }
        let (Some(entry), task) = (self.inner.entry(), &self.task) else {
            return Ok(());
        };
        p.harvest(entry)?;
        let mut waited = Duration::ZERO;
        loop {
            let w = p.budget.wait(Instant::now());
            if w.is_zero() {
                break;
            }
            let slice = w.min(Duration::from_millis(5));
            std::thread::sleep(slice);
            waited += slice;
            task.safe_point()?;
            p.harvest(entry)?;
        }
        if !waited.is_zero() {
            task.throttles.fetch_add(1, Ordering::Relaxed);
            task.throttled_ns
                .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A pacing point without a launch.
    fn pace(&mut self) -> Result<()> {
        self.throttle()?;
        if let Some(g) = self.gpu.as_mut() {
            if let Some(p) = g.pacer.as_mut().filter(|p| p.active()) {
                p.mark(&g.home.stream)?;
            }
        }
        Ok(())
    }

    /// Launches `kernel` at a kernel boundary of the task: a safe point, moves onto or off
    /// lent SM groups if the scheduler changed them, paces the launch when pacing is in force,
    /// and counts it.
    pub fn launch(&mut self, kernel: &Kernel, cfg: LaunchConfig, args: &[KernelArg]) -> Result<()> {
        self.task.safe_point()?;
        self.refresh()?;
        self.throttle()?;
        let inner = &self.inner;
        let g = self.gpu.as_mut().ok_or(Error::NoDevice)?;
        let TaskGpu {
            home,
            lent,
            on_lent,
            pacer,
            ..
        } = g;
        let lane = match (lent.as_ref(), *on_lent) {
            (Some(l), true) => {
                // Work queued on the home stream since the last launch (core ops, copies,
                // memsets) finishes before this kernel runs on the lent groups' stream.
                l.stream.wait_stream(&home.stream)?;
                l
            }
            _ => &*home,
        };
        let go = || -> Result<()> {
            // SAFETY: `lane` (borrowed from the task's context) keeps its context alive.
            unsafe { make_current(lane.ctx) }?;
            // SAFETY: the lane's stream is a live stream of context `lane.ctx`, now current;
            // gpukit-jit kernels are context-independent (cuLibrary); argument pointers are
            // the caller's device memory, checked against the signature by launch_raw.
            unsafe { kernel.launch_raw(lane.raw(), cfg, args)? };
            Ok(())
        };
        match pacer.as_mut().filter(|p| p.active()) {
            Some(p) => p.launch(&home.stream, &inner.token, go)?,
            None => go()?,
        }
        if *on_lent {
            // Keep the home stream (where core ops and the end-of-task event go) ordered after
            // work on lent groups.
            home.stream.wait_stream(&lane.stream)?;
        }
        self.task.sms_in_use.store(lane.sms, Ordering::Relaxed);
        self.task.kernels.fetch_add(1, Ordering::Relaxed);
        inner.kernel_launched();
        Ok(())
    }

    /// At the end of the task: back on the home stream, and its GPU time.
    pub(crate) fn finish(&mut self) -> Result<Option<f64>> {
        let entry = self.inner.entry();
        let Some(g) = self.gpu.as_mut() else {
            return Ok(None);
        };
        g.blas = None;
        if g.on_lent {
            switch_to_home(g)?;
        }
        let Some(t0) = g.t0.take() else {
            return Ok(None);
        };
        let t1 = g.home.stream.record()?;
        t1.synchronize()?;
        match entry {
            Some(e) if e.timing != crate::entry::Timing::Missing => {
                Ok(Some(e.elapsed_ms(&t0, &t1)? as f64))
            }
            _ => Ok(None),
        }
    }
}

fn switch_to_lent(g: &mut TaskGpu) -> Result<()> {
    let lane = g
        .lent
        .as_ref()
        .ok_or_else(|| Error::internal("moving onto lent groups", "no lent lane"))?;
    lane.stream.wait_stream(&g.home.stream)?;
    g.on_lent = true;
    Ok(())
}

fn switch_to_home(g: &mut TaskGpu) -> Result<()> {
    if let Some(lane) = &g.lent {
        g.home.stream.wait_stream(&lane.stream)?;
    }
    g.on_lent = false;
    Ok(())
}

impl Drop for TaskContext {
    fn drop(&mut self) {
        if let Some(mut g) = self.gpu.take() {
            g.blas = None;
            if let Some(l) = &g.lent {
                let _ = l.stream.synchronize();
            }
            let _ = g.home.stream.synchronize();
            if let Some(l) = g.lent.take() {
                self.inner.checkin(l);
            }
            self.inner.checkin(g.home);
        }
    }
}

/// Which lane a task's home stream is on.
pub(crate) fn home_key(has_split: bool, has_floor: bool, grant: &Grant) -> LaneKey {
    match (has_split, grant.compute.mechanism) {
        (false, _) | (true, Mechanism::Pacing) => LaneKey::Primary,
        (true, Mechanism::GreenContext) => LaneKey::Green(grant.compute.groups, false),
        (true, Mechanism::Floor) if has_floor => LaneKey::Green(crate::GroupSet::EMPTY, true),
        // A single group and no floor: BestEffort work runs unconfined.
        (true, Mechanism::Floor) => LaneKey::Primary,
    }
}
