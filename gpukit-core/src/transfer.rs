//! Host <-> device copies through pooled pinned staging buffers ([`crate::pinned`]) on the device's dedicated
//! transfer streams, ordered with compute work through events.
//!
//! Host-to-device: the transfer stream first waits for the compute stream (the destination
//! block may have been in use there), then each chunk is copied by the CPU into a
//! write-combined pinned buffer and sent with `cuMemcpyHtoDAsync`; the compute stream then
//! waits for the transfer stream. Device-to-host: the transfer stream waits for the compute
//! stream (so `to_vec()` sees finished work), chunks land in ordinary (cached, not
//! write-combined: fast for the CPU to read) pinned buffers and are copied out while the next
//! chunk is in flight.

use crate::error::{DriverContext, Result};
use crate::pinned::{PinnedBuffer, PinnedKind, PinnedPool};
use crate::stream::Stream;
use cudarc::driver::sys;
use std::collections::VecDeque;

/// Bytes per staging chunk.
pub const CHUNK: usize = 16 << 20;

/// Stream-ordered copies between pageable host memory and device memory, staged through a
/// device's [`PinnedPool`].
pub(crate) struct Transfers {
    pool: PinnedPool,
}

impl Transfers {
    pub(crate) fn new(pool: PinnedPool) -> Self {
        Transfers { pool }
    }

    fn bind(&self, s: &Stream) -> Result<()> {
        s.cuda()
            .context()
            .bind_to_thread()
            .ctx("binding the context")
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
        self.bind(h2d)?;
        h2d.wait_stream(compute)?;
        let staged = self.stage_upload(dst, src, h2d);
        // Also when staging failed part-way: the chunks already queued write the destination,
        // so the compute stream (on which its memory is reused) must wait for them (or the
        // host, should the driver refuse the event).
        compute.order_after(h2d);
        staged?;
        Ok(())
    }

    fn stage_upload(&self, dst: u64, src: &[u8], h2d: &Stream) -> Result<()> {
        for (i, chunk) in src.chunks(CHUNK).enumerate() {
            let mut buf = self.pool.acquire(chunk.len(), PinnedKind::WriteCombined)?;
            // SAFETY: the buffer holds >= chunk.len() bytes of pinned memory that no copy uses
            // now (acquire waits for a reused buffer's last copy); the regions do not overlap.
            unsafe { par_copy(chunk.as_ptr(), buf.as_mut_ptr(), chunk.len()) };
            let off = (i * CHUNK) as u64;
            // SAFETY: dst + off .. + chunk.len() lies inside the destination allocation (the
            // caller passes a buffer of src.len() bytes); the pinned source stays alive and
            // unmodified until `ready` completes.
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst + off,
                    buf.as_ptr() as *const std::ffi::c_void,
                    chunk.len(),
                    h2d.cuda().cu_stream(),
                )
            }
            .result()
            .ctx("copying host to device")?;
            buf.set_ready_after(h2d)?;
            // Dropped back into the pool, which will not reuse it before the copy completes.
            drop(buf);
        }
        Ok(())
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
        self.bind(d2h)?;
        for s in after {
            d2h.wait_stream(s)?;
        }
        let mut inflight: VecDeque<(PinnedBuffer, usize, usize)> = VecDeque::new();
        let finish =
            |(mut buf, off, len): (PinnedBuffer, usize, usize), dst: &mut [u8]| -> Result<()> {
                let staged = buf.as_slice()?; // waits for the copy into the buffer
                                              // SAFETY: `staged` holds len bytes (the buffer was acquired for len), and
                                              // dst[off..off + len] is a distinct, valid region.
                unsafe { par_copy(staged.as_ptr(), dst[off..off + len].as_mut_ptr(), len) };
                Ok(())
            };
        let total = dst.len();
        let mut off = 0usize;
        while off < total {
            let len = CHUNK.min(total - off);
            let mut buf = self.pool.acquire(len, PinnedKind::Cached)?;
            // SAFETY: src + off .. + len lies inside the source allocation (the caller passes a
            // buffer of dst.len() bytes); buf is pinned, holds >= len bytes and is not read by
            // the CPU until its ready event completes (as_slice waits for it).
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    buf.as_mut_ptr() as *mut std::ffi::c_void,
                    src + off as u64,
                    len,
                    d2h.cuda().cu_stream(),
                )
            }
            .result()
            .ctx("copying device to host")?;
            buf.set_ready_after(d2h)?;
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
        // Under Miri (slow) the threaded path is reached with a lowered threshold only through
        // the sizes just above it.
        let sizes: &[usize] = if cfg!(miri) {
            &[0, 1, 4095, (4 << 20) + 12345]
        } else {
            &[0, 1, 4095, (4 << 20) - 1, (4 << 20) + 12345, 37 << 20]
        };
        for &len in sizes {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: both vectors hold `len` bytes and do not overlap.
            unsafe { par_copy(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert!(src == dst, "len {len}");
        }
    }
}
