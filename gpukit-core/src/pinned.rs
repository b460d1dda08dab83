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
//! again before it has completed, so safe code cannot race a DMA transfer. A buffer whose
//! copy can be neither marked nor waited for (the driver refuses both: a broken context) is
//! never touched again: CPU views fail, and the memory is leaked rather than reused or freed
//! under a copy that may still write it ([`PinnedStats::leaked`]).

use crate::error::{DriverContext, Error, Result};
use crate::stream::{Event, Stream};
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

/// What must complete before the CPU or the pool may touch a buffer again.
enum Ready {
    /// The last copy queued on the buffer completes with this event.
    Event(Event),
    /// Copies were queued on the buffer and neither an event nor a host wait could be made:
    /// nothing is known to end them, so the buffer is never touched again.
    Never,
    /// A stand-in for an event in the unit tests.
    #[cfg(test)]
    Test(Arc<tests::Copy>),
}

impl Ready {
    fn is_complete(&self) -> bool {
        match self {
            Ready::Event(e) => e.is_complete().unwrap_or(false),
            Ready::Never => false,
            #[cfg(test)]
            Ready::Test(c) => c.is_complete(),
        }
    }

    fn wait(&self) -> Result<()> {
        match self {
            Ready::Event(e) => e.synchronize(),
            Ready::Never => Err(Error::invalid(
                "pinned buffer",
                "a copy that uses this buffer could be neither marked nor waited for (the CUDA \
                 context failed), so the buffer cannot be used again",
            )),
            #[cfg(test)]
            Ready::Test(c) => c.wait(),
        }
    }
}

struct Cached {
    block: Block,
    ready: Option<Ready>,
}

impl Cached {
    /// Frees the memory once its last copy has completed; when that cannot be waited for, the
    /// memory is leaked instead (a copy may still write it). Returns whether it was freed.
    fn free(self) -> bool {
        if let Some(r) = &self.ready {
            if r.wait().is_err() {
                std::mem::forget(self.block);
                return false;
            }
        }
        drop(self.block);
        true
    }
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

impl Drop for PoolInner {
    fn drop(&mut self) {
        // Cached buffers may still be read or written by their last copies: each is freed once
        // its copy has completed (or leaked when that cannot be known).
        for c in std::mem::take(&mut self.state.get_mut().free) {
            c.free();
        }
    }
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
    /// Buffers never reused nor freed because a copy that used them could not be waited for
    /// (the CUDA context failed): leaked rather than handed out or freed under a copy that may
    /// still write them.
    pub leaked: u64,
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
            let idle = st
                .free
                .iter()
                .position(|c| fits(c) && c.ready.as_ref().is_none_or(Ready::is_complete));
            let pos = idle.or_else(|| st.free.iter().position(fits));
            pos.map(|i| {
                let c = st.free.swap_remove(i);
                st.cached_bytes -= c.block.size;
                st.stats.hits += 1;
                c
            })
        };
        if let Some(c) = taken {
            if let Some(Err(e)) = c.ready.as_ref().map(Ready::wait) {
                // Its copy may still run: the memory is neither handed out nor freed.
                self.inner.state.lock().stats.leaked += 1;
                std::mem::forget(c.block);
                return Err(e);
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
        let leaked = dropped
            .into_iter()
            .map(Cached::free)
            .filter(|freed| !freed)
            .count();
        if leaked > 0 {
            self.inner.state.lock().stats.leaked += leaked as u64;
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
    ready: Option<Ready>,
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
        if !matches!(self.ready, Some(Ready::Never)) {
            self.ready = Some(Ready::Event(event));
        }
    }

    /// Marks the buffer as used by the copies queued on `stream` so far (as
    /// [`set_ready`](Self::set_ready) with an event recorded there). Should the driver refuse
    /// the event, waits for the stream on the host instead; should that fail too, the buffer is
    /// never touched again (its CPU views fail, its memory is leaked, not reused or freed while
    /// the copy may still write it) and the error is returned.
    pub fn set_ready_after(&mut self, stream: &Stream) -> Result<()> {
        match stream.record_marker() {
            Ok(e) => {
                self.set_ready(e);
                Ok(())
            }
            Err(_) if stream.synchronize().is_ok() => Ok(()),
            Err(e) => {
                self.ready = Some(Ready::Never);
                Err(e)
            }
        }
    }

    /// Waits until the last copy marked with [`set_ready`](Self::set_ready) has completed.
    pub fn wait(&mut self) -> Result<()> {
        if let Some(r) = self.ready.take() {
            if let Err(err) = r.wait() {
                self.ready = Some(r);
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
        let cached = Cached {
            block,
            ready: self.ready.take(),
        };
        let mut st = self.pool.state.lock();
        let never = matches!(cached.ready, Some(Ready::Never));
        if !never && st.cached_bytes + cached.block.size <= st.limit {
            st.cached_bytes += cached.block.size;
            st.free.push(cached);
            return;
        }
        drop(st);
        // Not kept: the memory may only be freed once no copy uses it.
        if !cached.free() {
            self.pool.state.lock().stats.leaked += 1;
        }
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

    /// A copy queued on a buffer, standing in for its event: running until waited for, or one
    /// that cannot be waited for (the driver fails the wait).
    pub(super) struct Copy {
        done: std::sync::atomic::AtomicBool,
        fails: bool,
        waits: AtomicUsize,
    }

    impl Copy {
        fn running(fails: bool) -> Arc<Copy> {
            Arc::new(Copy {
                done: false.into(),
                fails,
                waits: AtomicUsize::new(0),
            })
        }
        pub(super) fn is_complete(&self) -> bool {
            self.done.load(Ordering::SeqCst)
        }
        pub(super) fn wait(&self) -> Result<()> {
            self.waits.fetch_add(1, Ordering::SeqCst);
            if self.fails {
                return Err(crate::Error::invalid("test", "the wait failed"));
            }
            self.done.store(true, Ordering::SeqCst);
            Ok(())
        }
    }

    fn queue(buf: &mut PinnedBuffer, copy: &Arc<Copy>) {
        buf.ready = Some(Ready::Test(copy.clone()));
    }

    #[test]
    fn a_buffer_whose_copy_cannot_be_waited_for_is_never_reused_nor_freed() {
        let (pool, heap) = pool();
        // Cached with its copy pending, then asked for again: the wait fails, so the buffer is
        // neither handed out nor freed (before: the error path freed it, the drop path and
        // trim freed it whatever the wait said).
        let mut a = pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap();
        let addr = a.as_ptr();
        let stuck = Copy::running(true);
        queue(&mut a, &stuck);
        assert!(a.as_slice().is_err(), "a CPU view waits for the copy");
        drop(a);
        assert_eq!(pool.stats().cached_bytes, MIN_BUFFER);
        assert!(pool.acquire(MIN_BUFFER, PinnedKind::Cached).is_err());
        assert_eq!(heap.live.load(Ordering::SeqCst), 1, "not freed");
        assert_eq!(pool.stats().leaked, 1);
        let b = pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap();
        assert_ne!(b.as_ptr(), addr, "never handed out again");
        drop(b);
        // Not cached (no room): dropped with a copy that cannot be waited for.
        pool.set_cache_limit(0);
        let mut c = pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap();
        queue(&mut c, &Copy::running(true));
        drop(c);
        assert_eq!(pool.stats().leaked, 2);
        assert_eq!(
            heap.live.load(Ordering::SeqCst),
            2,
            "the stuck ones stay allocated"
        );
        // Trimmed from the cache, and dropped with the pool.
        pool.set_cache_limit(4 * MIN_BUFFER);
        for _ in 0..2 {
            let mut d = pool.acquire(2 * MIN_BUFFER, PinnedKind::Cached).unwrap();
            queue(&mut d, &Copy::running(true));
            drop(d);
            pool.trim(0);
        }
        assert_eq!(pool.stats().leaked, 4);
        let mut e = pool.acquire(MIN_BUFFER, PinnedKind::WriteCombined).unwrap();
        queue(&mut e, &Copy::running(true));
        drop(e);
        assert_eq!(heap.live.load(Ordering::SeqCst), 5);
        drop(pool);
        assert_eq!(
            heap.live.load(Ordering::SeqCst),
            5,
            "nothing stuck was freed"
        );
        // A buffer marked as never to be touched again (set_ready_after when the driver refused
        // both the event and the wait) behaves the same.
        let (pool, heap) = self::pool();
        let mut f = pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap();
        f.ready = Some(Ready::Never);
        assert!(f.as_mut_slice().is_err());
        drop(f);
        assert_eq!(pool.stats().cached_bytes, 0, "not cached");
        assert_eq!(heap.live.load(Ordering::SeqCst), 1);
        assert_eq!(pool.stats().leaked, 1);
    }

    #[test]
    fn copies_in_flight_are_waited_for_before_reuse_and_free() {
        let (pool, heap) = pool();
        let mut a = pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap();
        let copy = Copy::running(false);
        queue(&mut a, &copy);
        let addr = a.as_ptr();
        drop(a);
        // Reused only after the copy: acquire waits for it.
        let b = pool.acquire(MIN_BUFFER, PinnedKind::Cached).unwrap();
        assert_eq!(b.as_ptr(), addr);
        assert!(copy.is_complete());
        assert_eq!(copy.waits.load(Ordering::SeqCst), 1);
        drop(b);
        // An idle buffer is preferred over one whose copy is still running.
        let mut busy = pool.acquire(2 * MIN_BUFFER, PinnedKind::Cached).unwrap();
        let idle = pool.acquire(2 * MIN_BUFFER, PinnedKind::Cached).unwrap();
        let (busy_addr, idle_addr) = (busy.as_ptr(), idle.as_ptr());
        let running = Copy::running(false);
        queue(&mut busy, &running);
        drop((busy, idle));
        let next = pool.acquire(2 * MIN_BUFFER, PinnedKind::Cached).unwrap();
        assert_eq!(next.as_ptr(), idle_addr);
        assert_ne!(next.as_ptr(), busy_addr);
        assert_eq!(running.waits.load(Ordering::SeqCst), 0);
        drop(next);
        // Dropping the pool frees its cache only after the copies have completed.
        drop(pool);
        assert_eq!(running.waits.load(Ordering::SeqCst), 1);
        assert_eq!(heap.live.load(Ordering::SeqCst), 0);
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
