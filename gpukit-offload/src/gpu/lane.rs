//! A lane: the streams, events, library handles and memory one call uses at a time.
//!
//! A lane owns three non-blocking streams (compute, host-to-device, device-to-host), a cuBLAS
//! handle bound to the compute stream, a cuSOLVER handle created on the lane's first LAPACK
//! call, a device arena that grows to the largest call it served, and the pinned staging
//! slots ([`Staging`]). Calls check lanes out of the backend's pool, so calls from several
//! threads run concurrently, each on its own lane.

use crate::gpu::fail::{cb_ok, cs_ok, cu_ok, fail, GResult, GpuFailKind};
use crate::gpu::layout::Layout;
use crate::gpu::staging::Staging;
use crate::gpu::startup::{StartupReport, Step};
use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;
use std::time::Instant;

/// Device memory kept free beside the arena (other users of the GPU, library workspaces).
const HEADROOM: usize = 512 << 20;
/// The arena grows in multiples of this.
const ARENA_GRAIN: usize = 64 << 20;

pub(crate) struct DevArena {
    pub(crate) ptr: cu::CUdeviceptr,
    pub(crate) size: usize,
}

impl Drop for DevArena {
    fn drop(&mut self) {
        if self.ptr != 0 {
            // SAFETY: allocated by cuMemAlloc; the lane synchronised its streams before.
            unsafe { cu::cuMemFree_v2(self.ptr) };
        }
    }
}

/// The cuSOLVER handle and its parameter object.
#[derive(Clone, Copy)]
pub(crate) struct Solver {
    pub(crate) handle: cs::cusolverDnHandle_t,
    pub(crate) params: cs::cusolverDnParams_t,
}

/// The size of an arena that holds `bytes`, or `None` when the device cannot spare it
/// (`free` bytes free now, `held` bytes held by the arena that would be released first).
pub(crate) fn arena_size(bytes: usize, free: usize, held: usize) -> Option<usize> {
    let grown = bytes.next_multiple_of(ARENA_GRAIN).max(ARENA_GRAIN);
    (grown + HEADROOM <= free + held).then_some(grown)
}

/// One set of streams, handles and buffers; used by one call at a time.
pub(crate) struct Lane {
    pub(crate) compute: cu::CUstream,
    pub(crate) h2d: cu::CUstream,
    pub(crate) d2h: cu::CUstream,
    pub(crate) blas: cb::cublasHandle_t,
    solver: Option<Solver>,
    ev_in: cu::CUevent,
    pub(crate) staging: Staging,
    pub(crate) arena: DevArena,
    pub(crate) host_ws: Vec<u8>,
    /// Sizing only ([`crate::gpu::GpuBackend::presize`]): `Exec::begin` records the layout
    /// here and stops the call before anything is copied.
    pub(crate) sizing: Option<Option<Layout>>,
}

// SAFETY: a lane is used by one thread at a time (checked out of the pool); CUDA handles and
// streams may be used from any thread once the context is current there.
unsafe impl Send for Lane {}

fn stream() -> GResult<cu::CUstream> {
    let mut s = std::ptr::null_mut();
    cu_ok(
        // SAFETY: plain stream creation with the context current (the caller bound it).
        unsafe { cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) },
        "stream creation",
    )?;
    Ok(s)
}

fn event() -> GResult<cu::CUevent> {
    let mut e = std::ptr::null_mut();
    cu_ok(
        // SAFETY: event creation with the context current.
        unsafe { cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) },
        "event creation",
    )?;
    Ok(e)
}

impl Lane {
    /// Creates the streams, events and the cuBLAS handle (nothing pinned, nothing allocated on
    /// the device); the steps are timed into `report` when given.
    pub(crate) fn new(mut report: Option<&mut StartupReport>) -> GResult<Lane> {
        let t = Instant::now();
        let (compute, h2d, d2h) = (stream()?, stream()?, stream()?);
        let evs = [event()?, event()?, event()?];
        if let Some(r) = report.as_deref_mut() {
            r.record(Step::Streams, t.elapsed());
        }
        let t = Instant::now();
        let mut blas = std::ptr::null_mut();
        // SAFETY: handle creation (the library was loaded by the backend's start); the stream
        // is live and owned by this lane.
        unsafe {
            cb_ok(cb::cublasCreate_v2(&mut blas), "cublasCreate")?;
            cb_ok(
                cb::cublasSetStream_v2(blas, compute as _),
                "cublasSetStream",
            )?;
        }
        if let Some(r) = report {
            r.record(Step::BlasHandle, t.elapsed());
        }
        Ok(Lane {
            compute,
            h2d,
            d2h,
            blas,
            solver: None,
            ev_in: evs[0],
            staging: Staging::new([evs[1], evs[2]]),
            arena: DevArena { ptr: 0, size: 0 },
            host_ws: Vec::new(),
            sizing: None,
        })
    }

    /// True once this lane has a cuSOLVER handle.
    pub(crate) fn has_solver(&self) -> bool {
        self.solver.is_some()
    }

    /// The lane's cuSOLVER handle, created on first use. The caller checked that libcusolver
    /// loads (cudarc panics otherwise).
    pub(crate) fn solver(&mut self) -> GResult<&Solver> {
        if self.solver.is_none() {
            let (mut handle, mut params) = (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: handle creation with the library loaded (caller contract) and the
            // context current; the stream is live and owned by this lane.
            unsafe {
                cs_ok(cs::cusolverDnCreate(&mut handle), "cusolverDnCreate")?;
                let bound = cs_ok(
                    cs::cusolverDnSetStream(handle, self.compute as _),
                    "cusolverDnSetStream",
                )
                .and_then(|()| {
                    cs_ok(
                        cs::cusolverDnCreateParams(&mut params),
                        "cusolverDnCreateParams",
                    )
                });
                if let Err(e) = bound {
                    cs::cusolverDnDestroy(handle);
                    return Err(e);
                }
            }
            self.solver = Some(Solver { handle, params });
        }
        self.solver
            .as_ref()
            .ok_or_else(|| fail(GpuFailKind::Error, "cuSOLVER handle missing"))
    }

    /// The arena's base address, grown to hold `bytes` first.
    pub(crate) fn ensure_arena(&mut self, bytes: usize) -> GResult<cu::CUdeviceptr> {
        if bytes <= self.arena.size && self.arena.ptr != 0 {
            return Ok(self.arena.ptr);
        }
        self.sync_all()?;
        let (mut free, mut total) = (0usize, 0usize);
        cu_ok(
            // SAFETY: plain query with the context current.
            unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) },
            "memory query",
        )?;
        let Some(grown) = arena_size(bytes, free, self.arena.size) else {
            return Err(fail(
                GpuFailKind::OutOfMemory,
                format!(
                    "need {} MiB of device memory, {} MiB free",
                    bytes >> 20,
                    free >> 20
                ),
            ));
        };
        self.arena = DevArena { ptr: 0, size: 0 }; // free the old one first
        let mut p = 0;
        cu_ok(
            // SAFETY: plain device allocation with the context current.
            unsafe { cu::cuMemAlloc_v2(&mut p, grown) },
            "device allocation",
        )?;
        self.arena = DevArena {
            ptr: p,
            size: grown,
        };
        Ok(p)
    }

    pub(crate) fn sync_all(&self) -> GResult<()> {
        for s in [self.h2d, self.compute, self.d2h] {
            cu_ok(
                // SAFETY: the streams are live.
                unsafe { cu::cuStreamSynchronize(s) },
                "stream synchronisation",
            )?;
        }
        Ok(())
    }

    /// Makes the compute stream wait for the uploads queued so far.
    pub(crate) fn inputs_ready(&self) -> GResult<()> {
        Self::link(self.h2d, self.compute, self.ev_in)
    }

    fn link(on: cu::CUstream, waiter: cu::CUstream, ev: cu::CUevent) -> GResult<()> {
        // SAFETY: live event and streams of this lane.
        unsafe {
            cu_ok(cu::cuEventRecord(ev, on), "event record")?;
            cu_ok(cu::cuStreamWaitEvent(waiter, ev, 0), "stream wait")
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.sync_all();
        // SAFETY: every handle was created by this lane and is not used after this.
        unsafe {
            if let Some(s) = self.solver.take() {
                cs::cusolverDnDestroyParams(s.params);
                cs::cusolverDnDestroy(s.handle);
            }
            cb::cublasDestroy_v2(self.blas);
            let [e2, e3] = self.staging.events();
            for e in [self.ev_in, e2, e3] {
                cu::cuEventDestroy_v2(e);
            }
            for s in [self.h2d, self.compute, self.d2h] {
                cu::cuStreamDestroy_v2(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_arena_grows_in_grains_and_keeps_headroom() {
        assert_eq!(arena_size(1, 8 << 30, 0), Some(64 * MIB));
        assert_eq!(arena_size(300 * MIB, 8 << 30, 0), Some(320 * MIB));
        // not enough free memory beside the headroom
        assert_eq!(arena_size(600 * MIB, 1000 * MIB, 0), None);
        // the memory the old arena holds counts: it is released first
        assert_eq!(
            arena_size(600 * MIB, 1000 * MIB, 256 * MIB),
            Some(640 * MIB)
        );
    }
}
