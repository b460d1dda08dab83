//! Host <-> device copies through pooled pinned staging buffers on the device's dedicated
//! transfer streams, ordered with compute work through events.
//!
//! Host-to-device: the transfer stream first waits for the compute stream (the destination
//! block may have been in use there), then each chunk is copied by the CPU into a
//! write-combined pinned buffer and sent with `cuMemcpyHtoDAsync`; the compute stream then
//! waits for the transfer stream. Device-to-host: the transfer stream waits for the compute
//! stream (so `to_vec()` sees finished work), chunks land in ordinary (cached, not
//! write-combined: fast for the CPU to read) pinned buffers and are copied out while the next
//! chunk is in flight.

use crate::device::{Event, Stream};
use crate::error::{DriverContext, Result};
use cudarc::driver::{sys, CudaContext};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes per staging chunk.
pub const CHUNK: usize = 16 << 20;
/// Staging buffers kept per direction.
const MAX_BUFFERS: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Write-combined, for host-to-device.
    Upload,
    /// Cached, for device-to-host.
    Download,
}

struct PinnedBuf {
    ptr: *mut u8,
    size: usize,
    kind: Kind,
    /// Completes when the last copy that used the buffer has finished.
    ready: Option<Event>,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is page-locked host memory owned exclusively by this value; it is only
// touched by the thread that holds it (the pool hands it out to one user at a time).
unsafe impl Send for PinnedBuf {}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        if let Some(e) = &self.ready {
            let _ = e.synchronize();
        }
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuMemHostAlloc and no queued copy uses it any more (its
        // ready event was waited for above).
        let _ = unsafe { cudarc::driver::result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}

impl PinnedBuf {
    fn wait_ready(&mut self) -> Result<()> {
        if let Some(e) = self.ready.take() {
            e.synchronize()?;
        }
        Ok(())
    }
}

/// The device's pool of pinned staging buffers.
pub(crate) struct PinnedPool {
    ctx: Arc<CudaContext>,
    free: Mutex<VecDeque<PinnedBuf>>,
}

impl PinnedPool {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Self {
        PinnedPool {
            ctx,
            free: Mutex::new(VecDeque::new()),
        }
    }

    fn acquire(&self, kind: Kind, bytes: usize) -> Result<PinnedBuf> {
        let want = bytes.next_power_of_two().clamp(64 << 10, CHUNK);
        {
            let mut free = self.free.lock();
            // Prefer a buffer whose last copy has finished; else the oldest of the right kind.
            let pos = free
                .iter()
                .position(|b| {
                    b.kind == kind
                        && b.size >= want
                        && b.ready
                            .as_ref()
                            .is_none_or(|e| e.is_complete().unwrap_or(false))
                })
                .or_else(|| {
                    let n = free.iter().filter(|b| b.kind == kind).count();
                    if n >= MAX_BUFFERS {
                        free.iter().position(|b| b.kind == kind && b.size >= want)
                    } else {
                        None
                    }
                });
            if let Some(i) = pos {
                if let Some(mut b) = free.remove(i) {
                    drop(free);
                    b.wait_ready()?;
                    return Ok(b);
                }
            }
        }
        self.ctx.bind_to_thread().ctx("binding the context")?;
        let flags = match kind {
            Kind::Upload => sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            Kind::Download => 0,
        };
        // SAFETY: the context is bound; the allocation is owned by the returned PinnedBuf and
        // freed in its Drop.
        let ptr = unsafe { cudarc::driver::result::malloc_host(want, flags) }
            .ctx("allocating pinned host memory")?;
        Ok(PinnedBuf {
            ptr: ptr as *mut u8,
            size: want,
            kind,
            ready: None,
            ctx: self.ctx.clone(),
        })
    }

    fn release(&self, buf: PinnedBuf) {
        let mut free = self.free.lock();
        free.push_back(buf);
        // Keep at most MAX_BUFFERS per kind: drop the oldest extra ones.
        for kind in [Kind::Upload, Kind::Download] {
            while free.iter().filter(|b| b.kind == kind).count() > MAX_BUFFERS {
                if let Some(i) = free.iter().position(|b| b.kind == kind) {
                    free.remove(i);
                }
            }
        }
    }

    /// Copies `src` to device address `dst`, ordered after `compute`'s queued work and before
    /// its later work. Returns when the host data has been staged (the copy may still run).
    pub(crate) fn upload(
        &self,
        dst: u64,
        src: &[u8],
        compute: &Stream,
        h2d: &Stream,
    ) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.ctx.bind_to_thread().ctx("binding the context")?;
        h2d.wait_stream(compute)?;
        for (i, chunk) in src.chunks(CHUNK).enumerate() {
            let mut buf = self.acquire(Kind::Upload, chunk.len())?;
            // SAFETY: buf.ptr points to buf.size >= chunk.len() bytes of pinned memory that no
            // copy uses now (wait_ready in acquire); the regions do not overlap.
            unsafe { par_copy(chunk.as_ptr(), buf.ptr, chunk.len()) };
            let off = (i * CHUNK) as u64;
            // SAFETY: dst + off .. + chunk.len() lies inside the destination allocation (the
            // caller passes a buffer of src.len() bytes); the pinned source stays alive and
            // unmodified until `ready` completes.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst + off,
                    buf.ptr as *const std::ffi::c_void,
                    chunk.len(),
                    h2d.cuda().cu_stream(),
                )
            }
            .result()
            .ctx("copying host to device")?;
            buf.ready = Some(h2d.record_marker()?);
            self.release(buf);
        }
        compute.wait_stream(h2d)
    }

    /// Copies device address `src` into `dst` after the work queued on every stream of `after`
    /// has finished.
    pub(crate) fn download(
        &self,
        dst: &mut [u8],
        src: u64,
        after: &[&Stream],
        d2h: &Stream,
    ) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind_to_thread().ctx("binding the context")?;
        for s in after {
            d2h.wait_stream(s)?;
        }
        let mut inflight: VecDeque<(PinnedBuf, usize, usize)> = VecDeque::new();
        let finish =
            |(mut buf, off, len): (PinnedBuf, usize, usize), dst: &mut [u8]| -> Result<()> {
                buf.wait_ready()?;
                // SAFETY: the copy into buf has completed (wait_ready); buf holds >= len bytes, and
                // dst[off..off + len] is a distinct, valid region.
                unsafe { par_copy(buf.ptr, dst[off..off + len].as_mut_ptr(), len) };
                self.release(buf);
                Ok(())
            };
        let total = dst.len();
        let mut off = 0usize;
        while off < total {
            let len = CHUNK.min(total - off);
            let mut buf = self.acquire(Kind::Download, len)?;
            // SAFETY: src + off .. + len lies inside the source allocation (the caller passes a
            // buffer of dst.len() bytes); buf is pinned, holds >= len bytes and is not read by
            // the CPU until `ready` completes.
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    buf.ptr as *mut std::ffi::c_void,
                    src + off as u64,
                    len,
                    d2h.cuda().cu_stream(),
                )
            }
            .result()
            .ctx("copying device to host")?;
            buf.ready = Some(d2h.record_marker()?);
            inflight.push_back((buf, off, len));
            if inflight.len() >= 2 {
                if let Some(f) = inflight.pop_front() {
                    finish(f, dst)?;
                }
            }
            off += len;
        }
        while let Some(f) = inflight.pop_front() {
            finish(f, dst)?;
        }
        Ok(())
    }
}

/// Bytes below which a host copy runs on the calling thread only.
const PAR_MIN: usize = 4 << 20;

/// `memcpy` of `len` bytes, split over up to 8 threads for large copies: one core cannot
/// stream to pinned (and write-combined) memory at the PCIe/NVLink-C2C rate.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and the regions must not
/// overlap.
unsafe fn par_copy(src: *const u8, dst: *mut u8, len: usize) {
    let threads = if len < PAR_MIN {
        1
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(8)
            .min(len / (1 << 20))
    };
    if threads <= 1 {
        // SAFETY: guaranteed by the caller.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let part = len.div_ceil(threads).next_multiple_of(4096);
    let (src, dst) = (src as usize, dst as usize);
    std::thread::scope(|s| {
        for i in 0..threads {
            let start = i * part;
            if start >= len {
                break;
            }
            let n = part.min(len - start);
            s.spawn(move || {
                // SAFETY: [start, start + n) lies inside both regions (caller's guarantee);
                // the threads copy disjoint parts.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (src + start) as *const u8,
                        (dst + start) as *mut u8,
                        n,
                    )
                };
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::par_copy;

    #[test]
    fn parallel_copy_copies_every_byte() {
        for len in [0usize, 1, 4095, (4 << 20) - 1, (4 << 20) + 12345, 37 << 20] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: both vectors hold `len` bytes and do not overlap.
            unsafe { par_copy(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert!(src == dst, "len {len}");
        }
    }
}
