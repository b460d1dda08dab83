//! A lane: the streams, library handles and staging one call uses at a time.
//!
//! A lane owns three non-blocking streams of the device (compute, host-to-device,
//! device-to-host), the cuBLAS handle gpukit-core caches for its compute stream, the cuSOLVER
//! handle (taken on the lane's first LAPACK call) and the pinned staging slots ([`Staging`]).
//! Calls check lanes out of the backend's pool, so calls from several threads run concurrently,
//! each on its own lane. Device memory is not the lane's: each call takes its buffers from the
//! device allocator (see [`crate::gpu::exec`]), charged to the caller's owner.
//!
//! The handles are used under their locks: [`Lane::with_handles`] holds them for the whole
//! call and exposes the raw handles to the launch code inside it only.
//!
//! What makes a small call cheap lives here too, reused call after call: a small device arena
//! (for calls whose operands take at most [`LANE_ARENA_MAX`], with their library workspace at
//! most [`LANE_ARENA_CAP`]; charged to `gpukit-offload` like cuBLAS' workspace: calls that fit
//! take no allocation), a pinned bounce buffer ([`Bounce`]: each small operand is one async copy
//! from it and each small result one async copy into it, all on the compute stream, so the one
//! synchronisation before the results are written is the call's only one), the cuSOLVER
//! workspace sizes seen so far ([`WsCache`]) and the call's phase clock.

use crate::gpu::fail::{cu_ok, fail, GResult, GpuFailKind};
use crate::gpu::layout::Layout;
use crate::gpu::phases::{Clock, Phase};
use crate::gpu::staging::{Bounce, Staging};
use crate::gpu::startup::{StartupReport, Step};
use crate::gpu::workspace::{WsCache, WsKey};
use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;
use gpukit_core::{BlasHandle, Device, DeviceBuffer, SolverHandle, Stream};
use std::sync::Arc;
use std::time::Instant;

/// A gpukit-core failure as a GPU failure (quota and out-of-memory are memory failures).
pub(crate) fn core_fail(what: &str, e: gpukit_core::Error) -> crate::gpu::GpuFail {
    let kind = match e {
        gpukit_core::Error::OutOfMemory { .. }
        | gpukit_core::Error::QuotaExceeded { .. }
        | gpukit_core::Error::AllocationRefused { .. } => GpuFailKind::OutOfMemory,
        _ => GpuFailKind::Error,
    };
    fail(kind, format!("{what}: {e}"))
}

/// The largest call layout (device bytes of its operands, results and status words, the
/// libraries' workspace not counted) that runs in the lane's own arena; larger calls take
/// their buffers from the device allocator, charged to the caller's owner.
pub const LANE_ARENA_MAX: usize = 1 << 20;
/// The most a lane's arena grows to hold such a call together with its library workspace (a
/// tiny SVD's polar decomposition asks cuSOLVER for more than [`LANE_ARENA_MAX`]); a call whose
/// workspace is larger still takes its buffers from the allocator.
pub const LANE_ARENA_CAP: usize = 64 << 20;
/// The lane's arena is never smaller than this once made.
pub(crate) const LANE_ARENA_MIN: usize = 256 << 10;

/// The raw handles while a call holds their locks.
#[derive(Clone, Copy)]
pub(crate) struct Raw {
    pub(crate) blas: cb::cublasHandle_t,
    pub(crate) solver: Option<(cs::cusolverDnHandle_t, cs::cusolverDnParams_t)>,
}

/// One set of streams, handles and staging; used by one call at a time.
pub(crate) struct Lane {
    compute: Stream,
    h2d_stream: Stream,
    d2h_stream: Stream,
    /// The raw streams (the same three), for the launch code.
    pub(crate) compute_raw: cu::CUstream,
    pub(crate) h2d: cu::CUstream,
    pub(crate) d2h: cu::CUstream,
    blas: Arc<BlasHandle>,
    solver: Option<Arc<SolverHandle>>,
    raw: Option<Raw>,
    ev_in: cu::CUevent,
    pub(crate) staging: Staging,
    /// Pinned memory for the small operands and results of one call.
    pub(crate) bounce: Bounce,
    /// The device arena of small calls (see [`LANE_ARENA_MAX`]; on the compute stream).
    pub(crate) arena: Option<DeviceBuffer>,
    /// cuSOLVER workspace sizes this lane has seen.
    pub(crate) ws: WsCache,
    /// The call's clock (counts, and times when timing is on).
    pub(crate) clock: Clock,
    /// Work may be queued on the lane's streams (cleared when a call ended synchronised).
    pub(crate) dirty: bool,
    /// The call is a part of a split call: its place at the parts' gate (taken by the call's
    /// `Exec`, which commits only when every part may).
    pub(crate) gate: Option<crate::gpu::devices::Arrival>,
    pub(crate) host_ws: Vec<u8>,
    /// Sizing only ([`crate::gpu::GpuBackend::presize`]): `Exec::begin` records the layout
    /// here and stops the call before anything is copied.
    pub(crate) sizing: Option<Option<Layout>>,
}

// SAFETY: a lane is used by one thread at a time (checked out of the pool); its raw events
// and streams may be used from any thread with the context current, and its handles are used
// only under their locks (`with_handles`).
unsafe impl Send for Lane {}

fn event() -> GResult<cu::CUevent> {
    let mut e = std::ptr::null_mut();
    cu_ok(
        // SAFETY: event creation with the context current (the backend binds it).
        unsafe { cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) },
        "event creation",
    )?;
    Ok(e)
}

impl Lane {
    /// Creates the streams, events and the cuBLAS handle (nothing pinned, no device memory
    /// but cuBLAS' workspace); the steps are timed into `report` when given.
    pub(crate) fn new(dev: &Device, mut report: Option<&mut StartupReport>) -> GResult<Lane> {
        let t = Instant::now();
        let least = dev.stream_priority_range().0;
        let mk = || {
            dev.new_stream(least)
                .map_err(|e| core_fail("stream creation", e))
        };
        let (compute, h2d_stream, d2h_stream) = (mk()?, mk()?, mk()?);
        let evs = [event()?, event()?, event()?];
        if let Some(r) = report.as_deref_mut() {
            r.record(Step::Streams, t.elapsed());
        }
        let t = Instant::now();
        let blas = BlasHandle::for_stream(&compute).map_err(|e| core_fail("cuBLAS handle", e))?;
        if let Some(r) = report {
            r.record(Step::BlasHandle, t.elapsed());
        }
        Ok(Lane {
            compute_raw: compute.cuda().cu_stream(),
            h2d: h2d_stream.cuda().cu_stream(),
            d2h: d2h_stream.cuda().cu_stream(),
            compute,
            h2d_stream,
            d2h_stream,
            blas,
            solver: None,
            raw: None,
            ev_in: evs[0],
            staging: Staging::new(dev.pinned().clone(), [evs[1], evs[2]]),
            bounce: Bounce::new(dev.pinned().clone()),
            arena: None,
            ws: WsCache::default(),
            clock: Clock::new(false),
            dirty: false,
            gate: None,
            host_ws: Vec::new(),
            sizing: None,
        })
    }

    /// The compute stream.
    pub(crate) fn compute(&self) -> &Stream {
        &self.compute
    }

    /// The two transfer streams.
    pub(crate) fn transfer_streams(&self) -> [&Stream; 2] {
        [&self.h2d_stream, &self.d2h_stream]
    }

    /// True once this lane has a cuSOLVER handle.
    pub(crate) fn has_solver(&self) -> bool {
        self.solver.is_some()
    }

    /// Takes the cuSOLVER handle of the compute stream from gpukit-core's cache (created
    /// there on first use). The caller loaded libcusolver first.
    pub(crate) fn take_solver(&mut self) -> GResult<()> {
        if self.solver.is_none() {
            self.solver = Some(
                SolverHandle::for_stream(&self.compute)
                    .map_err(|e| core_fail("cuSOLVER handle", e))?,
            );
        }
        Ok(())
    }

    /// Runs `f` with the lane's handles locked (the cuSOLVER one too when `solver`; the
    /// caller took it with [`Lane::take_solver`]): the raw handles are visible to the launch
    /// code ([`Lane::raw`]) only inside.
    pub(crate) fn with_handles<R>(
        &mut self,
        solver: bool,
        f: impl FnOnce(&mut Lane) -> GResult<R>,
    ) -> GResult<R> {
        let blas = self.blas.clone();
        let sh = if solver { self.solver.clone() } else { None };
        let r = blas.with(|bh| match &sh {
            Some(s) => s
                .with(|h, prm| {
                    self.raw = Some(Raw {
                        blas: bh,
                        solver: Some((h, prm)),
                    });
                    let r = f(self);
                    self.raw = None;
                    r
                })
                .map_err(|e| core_fail("locking the cuSOLVER handle", e))
                .and_then(|r| r),
            None => {
                self.raw = Some(Raw {
                    blas: bh,
                    solver: None,
                });
                let r = f(self);
                self.raw = None;
                r
            }
        });
        r.map_err(|e| core_fail("locking the cuBLAS handle", e))
            .and_then(|r| r)
    }

    /// The raw handles of the call in progress.
    pub(crate) fn raw(&self) -> GResult<Raw> {
        self.raw
            .ok_or_else(|| fail(GpuFailKind::Error, "library handles used outside a call"))
    }

    /// The raw cuSOLVER handle and parameters of the call in progress.
    pub(crate) fn raw_solver(&self) -> GResult<(cs::cusolverDnHandle_t, cs::cusolverDnParams_t)> {
        self.raw()?
            .solver
            .ok_or_else(|| fail(GpuFailKind::Error, "cuSOLVER handle not held by this call"))
    }

    /// Attributes the call's host time since the last mark to `p` (when timing is on).
    pub(crate) fn mark(&mut self, p: Phase) {
        self.clock.mark(p);
    }

    /// The cuSOLVER workspace size for `key`: from this lane's cache, else asked with `query`
    /// (given the raw handle and parameters of the call in progress).
    pub(crate) fn workspace(
        &mut self,
        key: WsKey,
        query: impl FnOnce(cs::cusolverDnHandle_t, cs::cusolverDnParams_t) -> GResult<(usize, usize)>,
    ) -> GResult<(usize, usize)> {
        self.mark(Phase::Launch);
        let (h, prm) = self.raw_solver()?;
        let r = self.ws.get_or(key, || query(h, prm));
        if let Ok((_, true)) = r {
            self.clock.t.workspace_queries += 1;
        }
        self.mark(Phase::Workspace);
        r.map(|(v, _)| v)
    }

    /// Waits for the compute stream (and the upload stream when `h2d`): the call's one
    /// synchronisation before its results are read.
    pub(crate) fn sync_compute(&mut self, h2d: bool) -> GResult<()> {
        self.mark(Phase::Launch);
        let mut r = cu_ok(
            // SAFETY: the stream is live (the lane holds it).
            unsafe { cu::cuStreamSynchronize(self.compute_raw) },
            "stream synchronisation",
        );
        if h2d && r.is_ok() {
            r = cu_ok(
                // SAFETY: as above.
                unsafe { cu::cuStreamSynchronize(self.h2d) },
                "stream synchronisation",
            );
        }
        self.clock.t.syncs += 1;
        self.mark(Phase::Sync);
        r
    }

    pub(crate) fn sync_all(&self) -> GResult<()> {
        for s in [self.h2d, self.compute_raw, self.d2h] {
            cu_ok(
                // SAFETY: the streams are live (the lane holds them).
                unsafe { cu::cuStreamSynchronize(s) },
                "stream synchronisation",
            )?;
        }
        Ok(())
    }

    /// Makes the compute stream wait for the uploads queued so far.
    pub(crate) fn inputs_ready(&self) -> GResult<()> {
        // SAFETY: live event and streams of this lane.
        unsafe {
            cu_ok(cu::cuEventRecord(self.ev_in, self.h2d), "event record")?;
            cu_ok(
                cu::cuStreamWaitEvent(self.compute_raw, self.ev_in, 0),
                "stream wait",
            )
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.sync_all();
        let [e1, e2] = self.staging.events();
        for e in [self.ev_in, e1, e2] {
            // SAFETY: the events were created by this lane, its streams are idle, and the
            // events are not used after this.
            unsafe { cu::cuEventDestroy_v2(e) };
        }
    }
}
