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

use crate::error::{DriverContext, Result};
use crate::stream::Event;
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

/// Where a pool's memory comes from: the CUDA driver (page-locked), or, in the unit tests that
/// run the pool's logic under Miri, the heap.
pub(crate) trait HostAlloc: Send + Sync {
    /// `size` bytes (a size class) of `kind`, page-aligned.
    fn allocate(&self, size: usize, kind: PinnedKind) -> Result<*mut u8>;
    /// Frees an allocation.
    ///
    /// # Safety
    /// `ptr` came from `allocate(size, kind)` of this allocator and nothing uses it any more.
    unsafe fn release(&self, ptr: *mut u8, size: usize, kind: PinnedKind);
}

/// Page-locked memory from the driver (`cuMemHostAlloc`).
struct DriverAlloc {
    ctx: Arc<CudaContext>,
}

impl HostAlloc for DriverAlloc {
    fn allocate(&self, size: usize, kind: PinnedKind) -> Result<*mut u8> {
        self.ctx.bind_to_thread().ctx("binding the context")?;
        // SAFETY: the context is bound; the allocation is owned by the returned Block and freed
        // in its Drop through `release`.
        let p = unsafe { cudarc::driver::result::malloc_host(size, kind.flags()) }
            .ctx("allocating pinned host memory")?;
        Ok(p as *mut u8)
    }

    unsafe fn release(&self, ptr: *mut u8, _size: usize, _kind: PinnedKind) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `ptr` came from cuMemHostAlloc (allocate above) and is no longer used (the
        // caller's contract).
        let _ = unsafe { cudarc::driver::result::free_host(ptr as *mut std::ffi::c_void) };
    }
}

/// One page-locked allocation; freed when dropped.
struct Block {
    ptr: *mut u8,
    size: usize,
    kind: PinnedKind,
    alloc: Arc<dyn HostAlloc>,
}

// SAFETY: the block is plain host memory owned exclusively by this value; moving the owner
// between threads is fine (nothing is tied to the allocating thread).
unsafe impl Send for Block {}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc.allocate(size, kind)` and nothing uses it any more: a
        // block is dropped only by the pool (after its ready event completed) or by a
        // PinnedBuffer that waited for its event (see PinnedBuffer::drop).
        unsafe { self.alloc.release(self.ptr, self.size, self.kind) };
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
    alloc: Arc<dyn HostAlloc>,
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
        Self::with_alloc(Arc::new(DriverAlloc { ctx }))
    }

    pub(crate) fn with_alloc(alloc: Arc<dyn HostAlloc>) -> Self {
        PinnedPool {
            inner: Arc::new(PoolInner {
                alloc,
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
        let ptr = match self.inner.alloc.allocate(size, kind) {
            Ok(p) => p,
            Err(_) => {
                // Out of lockable memory is the usual cause: give the cache back and retry once.
                self.trim(0);
                self.inner.alloc.allocate(size, kind)?
            }
        };
        let mut st = self.inner.state.lock();
        st.stats.allocations += 1;
        st.stats.allocated_bytes += size as u64;
        Ok(Block {
            ptr,
            size,
            kind,
            alloc: self.inner.alloc.clone(),
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
    use std::alloc::Layout;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Heap memory standing in for the driver (so Miri can check the pool's logic), counting
    /// live allocations.
    #[derive(Default)]
    struct Heap {
        live: AtomicUsize,
        fail_next: AtomicUsize,
    }

    impl HostAlloc for Heap {
        fn allocate(&self, size: usize, _kind: PinnedKind) -> Result<*mut u8> {
            let refuse = self
                .fail_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refuse {
                return Err(crate::Error::invalid("test", "allocation refused"));
            }
            let layout = Layout::from_size_align(size, 4096)
                .map_err(|e| crate::Error::invalid("test", e.to_string()))?;
            // SAFETY: size is a non-zero size class.
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!p.is_null());
            self.live.fetch_add(1, Ordering::SeqCst);
            Ok(p)
        }
        unsafe fn release(&self, ptr: *mut u8, size: usize, _kind: PinnedKind) {
            self.live.fetch_sub(1, Ordering::SeqCst);
            // SAFETY: allocated above with this layout (the caller's contract).
            unsafe { std::alloc::dealloc(ptr, Layout::from_size_align(size, 4096).unwrap()) };
        }
    }

    fn pool() -> (PinnedPool, Arc<Heap>) {
        let heap = Arc::new(Heap::default());
        (PinnedPool::with_alloc(heap.clone()), heap)
    }

    #[test]
    fn buffers_are_reused_by_size_class_and_kind() {
        let (pool, heap) = pool();
        let mut a = pool.acquire(1000, PinnedKind::Cached).unwrap();
        assert_eq!((a.len(), a.capacity()), (1000, MIN_BUFFER));
        a.as_mut_slice().unwrap().fill(7);
        let addr = a.as_ptr();
        drop(a);
        assert_eq!(pool.stats().cached_bytes, MIN_BUFFER);
        // Same class and kind: the same memory, contents as left.
        let mut b = pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap();
        assert_eq!(b.as_ptr(), addr);
        assert!(b.as_slice().unwrap()[..1000].iter().all(|&x| x == 7));
        // Another kind allocates.
        let c = pool.acquire(10, PinnedKind::WriteCombined).unwrap();
        assert_ne!(c.as_ptr(), addr);
        assert_eq!(heap.live.load(Ordering::SeqCst), 2);
        assert_eq!(pool.stats().hits, 1);
        drop((b, c));
        assert_eq!(heap.live.load(Ordering::SeqCst), 2, "both cached");
        pool.trim(0);
        assert_eq!(heap.live.load(Ordering::SeqCst), 0);
        assert_eq!(pool.stats().cached_bytes, 0);
    }

    #[test]
    fn the_cache_limit_frees_what_does_not_fit() {
        let (pool, heap) = pool();
        pool.set_cache_limit(3 * MIN_BUFFER);
        let bufs: Vec<PinnedBuffer> = (0..5)
            .map(|_| pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap())
            .collect();
        assert_eq!(heap.live.load(Ordering::SeqCst), 5);
        drop(bufs);
        assert_eq!(pool.stats().cached_bytes, 3 * MIN_BUFFER);
        assert_eq!(heap.live.load(Ordering::SeqCst), 3);
        pool.set_cache_limit(MIN_BUFFER);
        assert_eq!(heap.live.load(Ordering::SeqCst), 1);
        drop(pool);
        assert_eq!(
            heap.live.load(Ordering::SeqCst),
            0,
            "the pool frees its cache when dropped"
        );
    }

    #[test]
    fn a_failed_allocation_trims_the_cache_and_retries_once() {
        let (pool, heap) = pool();
        drop(pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap());
        assert_eq!(heap.live.load(Ordering::SeqCst), 1);
        heap.fail_next.store(1, Ordering::SeqCst);
        let big = pool.acquire(4 * MIN_BUFFER, PinnedKind::Cached).unwrap();
        assert_eq!(big.capacity(), 4 * MIN_BUFFER);
        assert_eq!(
            heap.live.load(Ordering::SeqCst),
            1,
            "cache released, retry succeeded"
        );
        heap.fail_next.store(2, Ordering::SeqCst);
        // Two failures in a row: an error, nothing leaked.
        assert!(pool.acquire(8 * MIN_BUFFER, PinnedKind::Cached).is_err());
        heap.fail_next.store(0, Ordering::SeqCst);
        drop(big);
    }

    #[test]
    fn concurrent_acquire_and_release() {
        let (pool, heap) = pool();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let pool = pool.clone();
                s.spawn(move || {
                    for i in 0..8usize {
                        let mut b = pool.acquire(1 + i * 1000, PinnedKind::Cached).unwrap();
                        b.as_mut_slice().unwrap().fill(t);
                        assert!(b.as_slice().unwrap().iter().all(|&x| x == t));
                    }
                });
            }
        });
        pool.trim(0);
        assert_eq!(heap.live.load(Ordering::SeqCst), 0);
    }

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
