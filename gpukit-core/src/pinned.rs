//! Page-locked (pinned) host memory, pooled per device.
//!
//! The DMA engines copy from and to pinned memory at the link's full rate (55 GB/s on the H200
//! host against 9-15 GB/s from pageable memory), but `cuMemHostAlloc` is slow (milliseconds for
//! large buffers) and locks physical memory. A [`PinnedPool`] keeps released buffers by size
//! class for reuse, up to a byte limit, so a hot path allocates pinned memory once.
//!
//! Two kinds: [`PinnedKind::WriteCombined`] for host-to-device staging (the CPU writes it fast,
//! reading it back is very slow) and [`PinnedKind::Cached`] for device-to-host results (the CPU
//! reads it at full speed).
//!
//! A buffer that an asynchronous copy still uses carries that copy's completion event
//! ([`PinnedBuffer::set_ready`]): the CPU views ([`PinnedBuffer::as_slice`],
//! [`PinnedBuffer::as_mut_slice`]) wait for it first, and the pool never hands the buffer out
//! again before it has completed, so safe code cannot race a DMA transfer.

use crate::device::Event;
use crate::error::{DriverContext, Result};
use cudarc::driver::{sys, CudaContext};
use parking_lot::Mutex;
use std::sync::Arc;

/// What the CPU will do with a pinned buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PinnedKind {
    /// Write-combined: fast for the CPU to write, very slow to read. For host-to-device staging.
    WriteCombined,
    /// Ordinary cached memory: fast to read. For device-to-host results.
    Cached,
}

impl PinnedKind {
    fn flags(self) -> u32 {
        match self {
            PinnedKind::WriteCombined => sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            PinnedKind::Cached => 0,
        }
    }
}

/// The smallest buffer the pool allocates (smaller requests are rounded up to it).
pub const MIN_BUFFER: usize = 64 << 10;
/// Requests up to this size are rounded to a power of two; larger ones to a multiple of it.
const POW2_LIMIT: usize = 64 << 20;
/// Default bound on the bytes a pool keeps cached for reuse.
pub const DEFAULT_CACHE_LIMIT: usize = 512 << 20;

/// The size class a request of `bytes` is served from.
pub fn size_class(bytes: usize) -> usize {
    let b = bytes.max(MIN_BUFFER);
    if b <= POW2_LIMIT {
        b.next_power_of_two()
    } else {
        b.next_multiple_of(POW2_LIMIT)
    }
}

/// One page-locked allocation; freed when dropped.
struct Block {
    ptr: *mut u8,
    size: usize,
    kind: PinnedKind,
    ctx: Arc<CudaContext>,
}

// SAFETY: the block is plain host memory owned exclusively by this value; moving the owner
// between threads is fine (nothing is tied to the allocating thread).
unsafe impl Send for Block {}

impl Drop for Block {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuMemHostAlloc and nothing uses it any more: a block is dropped
        // only by the pool (after its ready event completed) or by a PinnedBuffer that waited
        // for its event (see PinnedBuffer::drop).
        let _ = unsafe { cudarc::driver::result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}

struct Cached {
    block: Block,
    ready: Option<Event>,
}

struct PoolState {
    free: Vec<Cached>,
    cached_bytes: usize,
    limit: usize,
    stats: PinnedStats,
}

struct PoolInner {
    ctx: Arc<CudaContext>,
    state: Mutex<PoolState>,
}

/// Counters of a [`PinnedPool`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinnedStats {
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests that allocated new pinned memory.
    pub allocations: u64,
    /// Bytes allocated from the driver in total.
    pub allocated_bytes: u64,
    /// Bytes now cached for reuse.
    pub cached_bytes: usize,
}

/// A device's pool of pinned host buffers. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PinnedPool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for PinnedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedPool")
            .field("stats", &self.stats())
            .finish()
    }
}

impl PinnedPool {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Self {
        PinnedPool {
            inner: Arc::new(PoolInner {
                ctx,
                state: Mutex::new(PoolState {
                    free: Vec::new(),
                    cached_bytes: 0,
                    limit: DEFAULT_CACHE_LIMIT,
                    stats: PinnedStats::default(),
                }),
            }),
        }
    }

    /// A pinned buffer of at least `bytes` bytes of `kind` (its [`len`](PinnedBuffer::len) is
    /// `bytes`). Served from the cache when a buffer of the size class is free (one whose last
    /// copy has completed first; else the call waits for the oldest), otherwise allocated.
    /// Its contents are unspecified.
    pub fn acquire(&self, bytes: usize, kind: PinnedKind) -> Result<PinnedBuffer> {
        let class = size_class(bytes);
        let taken = {
            let mut st = self.inner.state.lock();
            let fits = |c: &Cached| c.block.kind == kind && c.block.size == class;
            let idle = st.free.iter().position(|c| {
                fits(c)
                    && c.ready
                        .as_ref()
                        .is_none_or(|e| e.is_complete().unwrap_or(false))
            });
            let pos = idle.or_else(|| st.free.iter().position(fits));
            pos.map(|i| {
                let c = st.free.swap_remove(i);
                st.cached_bytes -= c.block.size;
                st.stats.hits += 1;
                c
            })
        };
        if let Some(c) = taken {
            if let Some(e) = &c.ready {
                e.synchronize()?;
            }
            return Ok(PinnedBuffer {
                block: Some(c.block),
                len: bytes,
                ready: None,
                pool: self.inner.clone(),
            });
        }
        let block = self.allocate(class, kind)?;
        Ok(PinnedBuffer {
            block: Some(block),
            len: bytes,
            ready: None,
            pool: self.inner.clone(),
        })
    }

    fn allocate(&self, size: usize, kind: PinnedKind) -> Result<Block> {
        let attempt =
            || -> std::result::Result<*mut std::ffi::c_void, cudarc::driver::DriverError> {
                self.inner.ctx.bind_to_thread()?;
                // SAFETY: the context is bound; the allocation is owned by the returned Block and
                // freed in its Drop.
                unsafe { cudarc::driver::result::malloc_host(size, kind.flags()) }
            };
        let ptr = match attempt() {
            Ok(p) => p,
            Err(_) => {
                // Out of lockable memory is the usual cause: give the cache back and retry once.
                self.trim(0);
                attempt().ctx("allocating pinned host memory")?
            }
        };
        let mut st = self.inner.state.lock();
        st.stats.allocations += 1;
        st.stats.allocated_bytes += size as u64;
        Ok(Block {
            ptr: ptr as *mut u8,
            size,
            kind,
            ctx: self.inner.ctx.clone(),
        })
    }

    /// Bounds the bytes kept cached for reuse (default [`DEFAULT_CACHE_LIMIT`]); frees cached
    /// buffers above the new bound.
    pub fn set_cache_limit(&self, bytes: usize) {
        self.inner.state.lock().limit = bytes;
        self.trim(bytes);
    }

    /// Frees cached buffers until at most `keep` bytes stay cached (waiting for pending copies).
    pub fn trim(&self, keep: usize) {
        let dropped = {
            let mut st = self.inner.state.lock();
            let mut dropped = Vec::new();
            while st.cached_bytes > keep {
                // Oldest first: buffers are pushed at the end when released.
                let c = st.free.remove(0);
                st.cached_bytes -= c.block.size;
                dropped.push(c);
            }
            dropped
        };
        for c in dropped {
            if let Some(e) = &c.ready {
                let _ = e.synchronize();
            }
            drop(c.block);
        }
    }

    /// The pool's counters.
    pub fn stats(&self) -> PinnedStats {
        let st = self.inner.state.lock();
        PinnedStats {
            cached_bytes: st.cached_bytes,
            ..st.stats
        }
    }
}

/// A page-locked host buffer from a [`PinnedPool`]; returns to the pool when dropped.
pub struct PinnedBuffer {
    block: Option<Block>,
    len: usize,
    ready: Option<Event>,
    pool: Arc<PoolInner>,
}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("kind", &self.kind())
            .field("pending", &self.ready.is_some())
            .finish()
    }
}

impl PinnedBuffer {
    fn block(&self) -> &Block {
        // Invariant: `block` is Some until Drop takes it.
        self.block
            .as_ref()
            .unwrap_or_else(|| unreachable!("PinnedBuffer used after drop"))
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes actually allocated (the size class, >= [`len`](Self::len)).
    pub fn capacity(&self) -> usize {
        self.block().size
    }

    /// The memory's kind.
    pub fn kind(&self) -> PinnedKind {
        self.block().kind
    }

    /// The buffer's address, for asynchronous copies. Using it is `unsafe`: the caller must keep
    /// within [`capacity`](Self::capacity) bytes and call [`set_ready`](Self::set_ready) with an
    /// event recorded after the last queued copy that reads or writes it.
    pub fn as_ptr(&self) -> *const u8 {
        self.block().ptr
    }

    /// Mutable address, for asynchronous copies (same contract as [`as_ptr`](Self::as_ptr)).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.block().ptr
    }

    /// Marks the buffer as used by queued work until `event` completes: CPU views wait for it,
    /// and the pool does not reuse the buffer before it.
    pub fn set_ready(&mut self, event: Event) {
        self.ready = Some(event);
    }

    /// Waits until the last copy marked with [`set_ready`](Self::set_ready) has completed.
    pub fn wait(&mut self) -> Result<()> {
        if let Some(e) = self.ready.take() {
            if let Err(err) = e.synchronize() {
                self.ready = Some(e);
                return Err(err);
            }
        }
        Ok(())
    }

    /// The first [`len`](Self::len) bytes, after pending copies have completed.
    pub fn as_slice(&mut self) -> Result<&[u8]> {
        self.wait()?;
        // SAFETY: the block holds capacity >= len initialised-or-not bytes of host memory that no
        // copy uses any more (waited above); u8 has no invalid bit patterns and the memory was
        // allocated by the driver, so reading it is defined (its contents are unspecified).
        Ok(unsafe { std::slice::from_raw_parts(self.block().ptr, self.len) })
    }

    /// The first [`len`](Self::len) bytes, writable, after pending copies have completed.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        self.wait()?;
        // SAFETY: as in as_slice; `&mut self` makes this the only view.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.block().ptr, self.len) })
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        let ready = self.ready.take();
        let mut st = self.pool.state.lock();
        if st.cached_bytes + block.size <= st.limit {
            st.cached_bytes += block.size;
            st.free.push(Cached { block, ready });
            return;
        }
        drop(st);
        // Not kept: the memory may only be freed once no copy uses it.
        if let Some(e) = ready {
            let _ = e.synchronize();
        }
        drop(block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_without_doubling_large_requests() {
        assert_eq!(size_class(0), MIN_BUFFER);
        assert_eq!(size_class(1), MIN_BUFFER);
        assert_eq!(size_class(MIN_BUFFER + 1), 2 * MIN_BUFFER);
        assert_eq!(size_class(16 << 20), 16 << 20);
        assert_eq!(size_class((16 << 20) + 1), 32 << 20);
        assert_eq!(size_class(POW2_LIMIT), POW2_LIMIT);
        assert_eq!(size_class(POW2_LIMIT + 1), 2 * POW2_LIMIT);
        assert_eq!(size_class(300 << 20), 320 << 20);
        for b in [1usize, 4097, 1 << 20, (100 << 20) + 3, 1 << 31] {
            let c = size_class(b);
            assert!(c >= b);
            assert!(c < b.max(MIN_BUFFER) * 2 || c - b < POW2_LIMIT);
        }
    }
}
