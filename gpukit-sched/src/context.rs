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
use gpukit_jit::{Arg, Kernel, KernelArg, LaunchConfig};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The device side of a running task.
pub(crate) struct TaskGpu {
    pub dev: Device,
    pub home: Lane,
    pub lent: Option<Lane>,
    /// Lent lanes the task moved off whose queued work had not finished then, each with an
    /// event at the end of that work: back to the pool once it completes (its kernels may
    /// still occupy the SMs; a kernel that never ends quarantines them with the task's other
    /// lanes). The home stream was ordered after each, so its end covers them.
    pub retiring: Vec<(Lane, Option<Event>)>,
    pub on_lent: bool,
    pub seen_generation: u64,
    pub pacer: Option<Pacer>,
    /// The home lane's cuBLAS handle, from gpukit-core's shared cache (one per stream, kept
    /// with the lane); the lane's memory is charged to the task while it is bound
    /// ([`lane_bound`](Self::lane_bound)).
    pub blas: Option<Arc<BlasHandle>>,
    /// The home lane's memory (its cuBLAS workspace) is charged to this task.
    pub lane_bound: bool,
    pub t0: Option<Event>,
    /// The lanes' queued work has finished (set by [`TaskContext::finish`]): they go back to
    /// the pool without waiting.
    pub settled: bool,
}

/// Polling with a growing pause: spins for the first 100 us, yields until 2 ms, then sleeps
/// 50 us between polls (a driver wait would block without end on a kernel that never ends;
/// polling lets the caller give up).
pub(crate) struct Backoff {
    start: Instant,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff {
            start: Instant::now(),
        }
    }

    /// Pauses before the next poll.
    pub(crate) fn pause(&mut self) {
        let e = self.start.elapsed();
        if e < Duration::from_micros(100) {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        } else if e < Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Polls until every event has completed (`Ok(true)`), or `give_up` says to stop waiting
/// (`Ok(false)`), or `give_up` or a query fails (its error).
pub(crate) fn wait_events(
    events: &[Event],
    mut give_up: impl FnMut() -> Result<bool>,
) -> Result<bool> {
    let mut poll = Backoff::new();
    loop {
        let mut done = true;
        for e in events {
            if !e.is_complete()? {
                done = false;
                break;
            }
        }
        if done {
            return Ok(true);
        }
        if give_up()? {
            return Ok(false);
        }
        poll.pause();
    }
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

    /// The cuBLAS handle of the home stream (gpukit-core's shared cache: one
    /// [`BlasHandle`] per stream, kept with the scheduler's lane and reused by the tasks that
    /// run on it), so cuBLAS kernels run on the task's SMs. From the first call to the task's
    /// end the lane's memory (the handle's workspace) is charged to the task like an
    /// allocation (past the task's limit this is [`Error::QuotaExceeded`]); while no task uses
    /// the lane it counts as memory outside tasks. A safe point and a pacing point.
    pub fn cublas(&mut self) -> Result<&BlasHandle> {
        self.check()?;
        let (bound, has) = {
            let g = self.gpu()?;
            (g.lane_bound, g.blas.is_some())
        };
        if !bound {
            let lane = self.gpu()?.home.owner.clone();
            self.inner
                .memory
                .bind_lane(&lane, &self.task.owner)
                .map_err(|r| crate::memory::refusal_error(&self.task.spec.name, r))?;
            if let Some(g) = self.gpu.as_mut() {
                g.lane_bound = true;
            }
        }
        if !has {
            let made = {
                let g = self.gpu()?;
                g.dev
                    .allocator()
                    .with_owner(&g.home.owner, || BlasHandle::for_stream(&g.home.stream))
            };
            let h = made.map_err(|e| self.refused(e))?;
            if let Some(g) = self.gpu.as_mut() {
                g.blas = Some(h);
            }
        }
        self.gpu
            .as_ref()
            .and_then(|g| g.blas.as_deref())
            .ok_or_else(|| Error::internal("taking the lane's cuBLAS handle", "handle missing"))
    }

    /// Waits until the task's queued work is done. A safe point and a pacing point, also
    /// while it waits: a stop request (cancellation, timeout, eviction, shutdown) ends the
    /// wait with the stop's error, even when a kernel never ends. (A driver wait such as
    /// gpukit-core's `Stream::synchronize` cannot be interrupted: prefer this one in a task.)
    pub fn synchronize(&mut self) -> Result<()> {
        self.check()?;
        let g = self.gpu()?;
        let mut events = Vec::with_capacity(2);
        if let Some(l) = &g.lent {
            events.push(l.stream.record_marker()?);
        }
        events.push(g.home.stream.record_marker()?);
        let task = &self.task;
        wait_events(&events, || task.safe_point().map(|()| false))?;
        Ok(())
    }

    /// Applies lending changes the scheduler published: moves onto or off lent groups (green
    /// contexts) or changes the pace (fallback).
    fn refresh(&mut self) -> Result<()> {
        self.reap_retiring();
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
            // Its work may still run (the home stream waits for it, the host does not).
            let end = old.stream.record_marker().ok();
            g.retiring.push((old, end));
        }
        g.lent = Some(inner.checkout(key)?);
        switch_to_lent(g)
    }

    /// Returns to the pool the lent lanes the task moved off whose work has finished.
    fn reap_retiring(&mut self) {
        let Some(g) = self.gpu.as_mut() else {
            return;
        };
        if g.retiring.is_empty() {
            return;
        }
        let mut i = 0;
        while i < g.retiring.len() {
            let done = matches!(
                g.retiring[i].1.as_ref().map(Event::is_complete),
                Some(Ok(true))
            );
            if done {
                let (lane, _) = g.retiring.swap_remove(i);
                self.inner.checkin(lane);
            } else {
                i += 1;
            }
        }
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
        p.harvest(entry, task)?;
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
            p.harvest(entry, task)?;
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

    /// Launches `kernel` with typed arguments — device memory as `&array` (read) or
    /// `&mut array` (written), scalars by value (gpukit-jit's [`Arg`]) — checked against the
    /// kernel's signature as [`Kernel::launch`] checks them (nothing is queued when a check
    /// fails), at a kernel boundary of the task: a safe point, moves onto or off lent SM groups
    /// if the scheduler changed them, paces the launch when pacing is in force, and counts it.
    pub fn launch<'a>(
        &mut self,
        kernel: &Kernel,
        cfg: LaunchConfig,
        mut args: impl AsMut<[Arg<'a>]>,
    ) -> Result<()> {
        let args = args.as_mut();
        self.launch_on_lane(|lane| Ok(kernel.launch(lane.stream.cuda(), cfg, &mut *args)?))
    }

    /// [`launch`](Self::launch) with raw arguments (device addresses as
    /// [`KernelArg::Ptr`]), checked for count, kinds and widths only.
    ///
    /// # Safety
    /// The contract of gpukit-jit's [`Kernel::launch_unchecked`]: every device address must be
    /// memory of the task's device valid for every access the kernel makes through it, stay
    /// allocated until the kernel has completed (memory of the task's own allocations stays
    /// until they are dropped; the task's end waits for its kernels), hold values of the types
    /// the kernel reads, and memory it writes must not be used by concurrent work.
    pub unsafe fn launch_unchecked(
        &mut self,
        kernel: &Kernel,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        self.launch_on_lane(|lane| {
            // SAFETY: `lane` (borrowed from the task's context) keeps its context alive.
            unsafe { make_current(lane.ctx) }?;
            // SAFETY: the lane's stream is a live stream of context `lane.ctx`, now current;
            // gpukit-jit kernels are context-independent (cuLibrary); the arguments carry the
            // caller's guarantee (this function's contract).
            unsafe { kernel.launch_raw(lane.raw(), cfg, args)? };
            Ok(())
        })
    }

    /// The launch path: safe point, lending, pacing; `go` queues the kernel on the lane.
    fn launch_on_lane(&mut self, go: impl FnOnce(&Lane) -> Result<()>) -> Result<()> {
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
        let go = || go(lane);
        match pacer.as_mut().filter(|p| p.active()) {
            Some(p) => p.launch(&home.stream, &inner.token, &self.task, go)?,
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

    /// At the end of the task: back on the home stream, waits for the task's queued work, and
    /// its GPU time. The wait ends when the work does; once the task is asked to stop (its
    /// timeout, a cancellation, an eviction, shutdown), at most until the stop's grace period
    /// is over: then the work is taken for hung (a kernel that does not end), the stop's
    /// error is returned, and the lanes are quarantined when the context is dropped.
    pub(crate) fn finish(&mut self) -> Result<Option<f64>> {
        let entry = self.inner.entry();
        let grace = self.inner.cfg.stop_grace;
        let task = self.task.clone();
        let Some(g) = self.gpu.as_mut() else {
            return Ok(None);
        };
        g.blas = None;
        if g.on_lent {
            switch_to_home(g)?;
        }
        let t1 = g.home.stream.record()?;
        let done = wait_events(std::slice::from_ref(&t1), || {
            Ok(stop_grace_over(&task, grace))
        })?;
        if !done {
            // Hung: the outcome is the stop's (the closure's Ok does not stand without its work).
            return Err(task
                .safe_point()
                .err()
                .unwrap_or_else(|| Error::internal("ending the task", "gave up without a stop")));
        }
        g.settled = true;
        let Some(t0) = g.t0.take() else {
            return Ok(None);
        };
        match entry {
            Some(e) if e.timing != crate::entry::Timing::Missing => {
                Ok(Some(e.elapsed_ms(&t0, &t1)? as f64))
            }
            _ => Ok(None),
        }
    }
}

/// Whether a stop was requested and its grace period is over (the end of waiting for a
/// task's GPU work).
fn stop_grace_over(task: &Task, grace: Duration) -> bool {
    task.stop.get().is_some_and(|(_, at)| {
        at.checked_add(grace)
            .is_some_and(|end| Instant::now() >= end)
    })
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

/// Where a task's lanes stand at its end.
enum Settled {
    /// Their queued work has finished.
    Idle,
    /// It has not, within the stop's grace period: `pending` completes when it does.
    Hung(Event),
    /// The driver did not answer (a sticky error).
    Broken(Error),
}

impl TaskContext {
    /// Waits for the lanes' queued work (home after lent: one event), at most until the
    /// stop's grace period is over, or the grace period from now when no stop comes.
    fn settle(&self, g: &TaskGpu) -> Settled {
        if g.settled {
            return Settled::Idle;
        }
        let grace = self.inner.cfg.stop_grace;
        let marker = (|| -> Result<Event> {
            if let Some(l) = &g.lent {
                g.home.stream.wait_stream(&l.stream)?;
            }
            Ok(g.home.stream.record_marker()?)
        })();
        let pending = match marker {
            Ok(e) => e,
            Err(e) => return Settled::Broken(e),
        };
        let bound = crate::timer::after(grace);
        let task = &self.task;
        let finished = wait_events(std::slice::from_ref(&pending), || {
            Ok(stop_grace_over(task, grace) || bound.is_some_and(|b| Instant::now() >= b))
        });
        match finished {
            Ok(true) => Settled::Idle,
            Ok(false) => Settled::Hung(pending),
            Err(e) => Settled::Broken(e),
        }
    }
}

impl Drop for TaskContext {
    /// Returns the lanes: to the pool once their queued work has finished, or — when it does
    /// not finish within the stop's grace period (or the grace period from now, on a path
    /// without a stop) — to quarantine, where they stay until it does.
    fn drop(&mut self) {
        let Some(mut g) = self.gpu.take() else {
            return;
        };
        g.blas = None;
        let settled = self.settle(&g);
        let lane_owner = g.home.owner.clone();
        let lanes: Vec<Lane> = std::iter::once(g.home)
            .chain(g.lent)
            .chain(g.retiring.into_iter().map(|(l, _)| l))
            .collect();
        match settled {
            Settled::Idle => {
                if g.lane_bound {
                    self.inner.memory.unbind_lane(&lane_owner);
                }
                for l in lanes {
                    self.inner.checkin(l);
                }
            }
            Settled::Hung(pending) => {
                let bound = g.lane_bound.then_some(lane_owner);
                self.inner
                    .quarantine_lanes(&self.task, lanes, pending, bound);
            }
            Settled::Broken(e) => {
                // The context no longer answers: the lanes are not reused (nor destroyed: that
                // would wait on the driver).
                self.inner.observe_error(&self.task, &e);
                if g.lane_bound {
                    self.inner.memory.unbind_lane(&lane_owner);
                }
                std::mem::forget(lanes);
            }
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
