//! The caching device allocator with per-owner accounting and quotas.
//!
//! - Size-classed free lists per stream ([`pool`]): a block freed on stream S is reused on S at
//!   once (stream order makes that safe) without a driver call. A wholly free segment of another
//!   stream is adopted after ordering the new stream behind the old one with an event.
//! - A buffer used on streams other than its own ([`DeviceBuffer::record_stream`], done
//!   automatically by gpukit-core's operations) returns to the cache only after events recorded
//!   on those streams at free time have completed.
//! - Every allocation is charged to an [`OwnerId`] (the thread's current owner, see
//!   [`Allocator::with_owner`], default `"default"`), checked against the owner's quota and
//!   offered to the allocation hook first (the scheduler's admission / preemption point).
//! - A [`AllocLedger`] (one per allocator, see [`Allocator::install_ledger`]) is charged in the
//!   same step that approves an allocation, and credited with exactly that amount when the
//!   allocation fails afterwards or its buffer is dropped, so a ledger cannot be overrun by
//!   concurrent allocations and keeps counting buffers that outlive whoever allocated them.
//! - When the driver is out of memory, cached segments are released and the allocation is
//!   retried once; then it fails with [`Error::OutOfMemory`]. Nothing panics.
//! - Uses of a buffer on different streams are ordered (module `access`): work queued through
//!   [`DeviceBuffer::use_on`] (every gpukit-core operation does) on another stream than the
//!   buffer's latest user first waits for that stream.
//! - Memory of another library ([`DeviceBuffer::from_foreign`]) is wrapped, never freed and
//!   never charged: dropping the buffer waits for the work queued on it, then releases the
//!   foreign owner's keep-alive handle.
//!
//! The allocator stands on [`crate::stream`] only: it is given the device's default stream when
//! it is made and reads the thread's current stream from the stream scopes.

pub(crate) mod access;
pub mod pool;

use crate::error::{DriverContext, Error, Result};
use crate::stream::{self, Event, Stream};
use access::Access;
use cudarc::driver::{sys, CudaContext, DriverError};
use parking_lot::{Mutex, RwLock};
use pool::{is_small, round_size, segment_size, Pool, StreamKey};
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The tag an allocation is charged to. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(Arc<str>);

impl OwnerId {
    /// An owner tag.
    pub fn new(name: &str) -> Self {
        OwnerId(Arc::from(name))
    }
    /// The tag of allocations made outside any [`Allocator::with_owner`] scope.
    pub fn default_owner() -> Self {
        thread_local! {
            static DEFAULT: OwnerId = OwnerId::new("default");
        }
        DEFAULT.with(|d| d.clone())
    }
    /// The tag as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for OwnerId {
    fn default() -> Self {
        OwnerId::default_owner()
    }
}
impl From<&str> for OwnerId {
    fn from(s: &str) -> Self {
        OwnerId::new(s)
    }
}
impl From<String> for OwnerId {
    fn from(s: String) -> Self {
        OwnerId(Arc::from(s))
    }
}
impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({:?})", &*self.0)
    }
}
impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

thread_local! {
    static OWNERS: RefCell<Vec<OwnerId>> = const { RefCell::new(Vec::new()) };
}

/// The thread's current owner (innermost [`Allocator::with_owner`] scope, else `"default"`).
pub fn current_owner() -> OwnerId {
    OWNERS
        .with(|o| o.borrow().last().cloned())
        .unwrap_or_default()
}

/// Memory charged to one owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnerUsage {
    /// Bytes in live allocations (rounded to 512 B).
    pub in_use: usize,
    /// Highest `in_use` seen.
    pub peak: usize,
    /// The quota, if any.
    pub quota: Option<usize>,
    /// Live allocations.
    pub allocations: usize,
}

/// Allocator statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes in live allocations (rounded).
    pub in_use: usize,
    /// Bytes held from the driver (cached + in use).
    pub reserved: usize,
    /// Highest `in_use` seen.
    pub peak_in_use: usize,
    /// Allocations served from the cache.
    pub hits: u64,
    /// Allocations that needed a driver allocation (or a segment adopted from another stream).
    pub misses: u64,
    /// Driver allocations (cuMemAlloc).
    pub driver_allocs: u64,
    /// Driver frees (cuMemFree).
    pub driver_frees: u64,
    /// Allocations that failed with [`Error::OutOfMemory`].
    pub oom_errors: u64,
    /// Freed blocks kept out of reuse for good because a stream that used them could be neither
    /// ordered nor waited for (a broken context): never handed out while work may use them.
    pub leaked_blocks: u64,
}

/// The hook called before every allocation with the owner and the rounded size; an `Err`
/// aborts the allocation with that error.
pub type AllocHook = Arc<dyn Fn(&OwnerId, usize) -> Result<()> + Send + Sync>;

/// A memory ledger kept by the allocator's user (gpukit-sched's scheduler): every allocation
/// is charged to it *before* memory is taken, in one call that either reserves the bytes or
/// refuses, and every charge is returned exactly once: when the allocation fails after the
/// charge, or when its [`DeviceBuffer`] is dropped (whenever that is, also after the ledger was
/// removed from the allocator). Installed with [`Allocator::install_ledger`].
pub trait AllocLedger: Send + Sync {
    /// Reserves `bytes` (the request rounded to the allocator's granularity) for `owner`, or
    /// refuses the allocation with an error (nothing is reserved then).
    fn charge(&self, owner: &OwnerId, bytes: usize) -> Result<()>;
    /// Returns `bytes` that an earlier successful [`charge`](Self::charge) reserved for
    /// `owner`. Must not panic (it runs in `DeviceBuffer`'s drop).
    fn release(&self, owner: &OwnerId, bytes: usize);
}

/// A charge held by a buffer: returned to its ledger when the buffer is dropped.
struct Charge {
    ledger: Arc<dyn AllocLedger>,
    bytes: usize,
}

/// A freed block waiting for the work of other streams that used it: the event recorded on
/// each of them (with the stream's key) at free time.
struct Pending {
    addr: u64,
    events: Vec<(StreamKey, Event)>,
}

/// The end of some queued work, as the allocator waits for it: an [`Event`], or a stand-in in
/// the unit tests.
trait Completion {
    fn is_complete(&self) -> Result<bool>;
    fn wait(&self) -> Result<()>;
}

impl Completion for Event {
    fn is_complete(&self) -> Result<bool> {
        Event::is_complete(self)
    }
    fn wait(&self) -> Result<()> {
        self.synchronize()
    }
}

/// Whether a pending free may go back to the pool: every event has completed. With `wait`, the
/// host blocks for the events of ordinary streams; the events of retired streams (whose work
/// may never end, [`Allocator::retire_stream`]) are only queried, never waited for, so a
/// release of the cache or an out-of-memory retry cannot hang on a kernel that does not end.
fn pending_done<E: Completion>(
    events: &[(StreamKey, E)],
    retired: &std::collections::HashSet<StreamKey>,
    wait: bool,
) -> Result<bool> {
    let mut done = true;
    for (key, e) in events {
        if wait && !retired.contains(key) {
            e.wait()?;
        } else {
            done &= e.is_complete()?;
        }
    }
    Ok(done)
}

/// What [`Allocator::quiesce`] waits for: every stream that has segments except the retired
/// ones, and the whole primary context only while no stream is retired (a retired stream's
/// never-ending kernel may run in the primary context, whose `cuCtxSynchronize` would then
/// never return). Without the context-wide wait nothing is missed: every use of a pooled block
/// is on the stream of its segment (waited for here) or on a stream recorded at free time
/// (a pending free, which goes back only once its events have completed).
fn quiesce_plan<'a, S>(
    streams: &'a HashMap<StreamKey, S>,
    retired: &std::collections::HashSet<StreamKey>,
) -> (bool, Vec<&'a S>) {
    let waited = streams
        .iter()
        .filter(|(k, _)| !retired.contains(k))
        .map(|(_, s)| s)
        .collect();
    (retired.is_empty(), waited)
}

struct State {
    pool: Pool,
    owners: HashMap<OwnerId, OwnerUsage>,
    /// Streams that have segments: kept alive so their handles are not reused.
    streams: HashMap<StreamKey, Stream>,
    /// Streams whose queued work may never finish (see [`Allocator::retire_stream`]).
    retired: std::collections::HashSet<StreamKey>,
    pending: Vec<Pending>,
    stats: AllocStats,
}

pub(crate) struct AllocInner {
    ctx: Arc<CudaContext>,
    ordinal: usize,
    /// The device's default stream (the current stream outside any stream scope).
    default_stream: Stream,
    /// The stream order shared by every foreign buffer of the device (foreign buffers may
    /// overlap each other, so they share one latest user).
    foreign_access: OnceLock<Arc<Access>>,
    state: Mutex<State>,
    hook: RwLock<Option<AllocHook>>,
    ledger: RwLock<Option<Arc<dyn AllocLedger>>>,
}

/// The caching allocator of one device. Cheap to clone.
#[derive(Clone)]
pub struct Allocator {
    inner: Arc<AllocInner>,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator")
            .field("device", &self.inner.ordinal)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Allocator {
    pub(crate) fn new(ctx: Arc<CudaContext>, ordinal: usize, default_stream: Stream) -> Self {
        Allocator {
            inner: Arc::new(AllocInner {
                ctx,
                ordinal,
                default_stream,
                foreign_access: OnceLock::new(),
                state: Mutex::new(State {
                    pool: Pool::new(),
                    owners: HashMap::new(),
                    streams: HashMap::new(),
                    retired: std::collections::HashSet::new(),
                    pending: Vec::new(),
                    stats: AllocStats::default(),
                }),
                hook: RwLock::new(None),
                ledger: RwLock::new(None),
            }),
        }
    }

    /// Allocates `bytes` for the thread's current owner, ordered on the device's current
    /// stream of this thread.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        let stream = self.current_stream();
        self.alloc_for(&current_owner(), bytes, &stream)
    }

    /// The thread's current stream of this device (see
    /// [`Device::stream`](crate::Device::stream)).
    fn current_stream(&self) -> Stream {
        stream::scoped(self.inner.ctx.cu_ctx() as usize)
            .unwrap_or_else(|| self.inner.default_stream.clone())
    }

    /// Allocates `bytes` charged to `owner`, for use on `stream` (the block may be reused by
    /// later allocations on `stream` as soon as it is dropped).
    pub fn alloc_for(
        &self,
        owner: &OwnerId,
        bytes: usize,
        stream: &Stream,
    ) -> Result<DeviceBuffer> {
        if bytes == 0 {
            return Ok(DeviceBuffer::pooled(
                0,
                0,
                0,
                0,
                owner.clone(),
                stream,
                self.inner.clone(),
            ));
        }
        let rounded = round_size(bytes);
        if let Some(hook) = self.inner.hook.read().clone() {
            hook(owner, rounded)?;
        }
        // Reserve in the ledger first; a failure below returns the reservation.
        let charge = match self.inner.ledger.read().clone() {
            Some(ledger) => {
                ledger.charge(owner, rounded)?;
                Some(Charge {
                    ledger,
                    bytes: rounded,
                })
            }
            None => None,
        };
        match self.take_block(owner, bytes, rounded, stream) {
            Ok(mut buf) => {
                if let Origin::Pool { charge: slot, .. } = &mut buf.origin {
                    *slot = charge;
                }
                Ok(buf)
            }
            Err(e) => {
                if let Some(c) = charge {
                    c.ledger.release(owner, c.bytes);
                }
                Err(e)
            }
        }
    }

    fn take_block(
        &self,
        owner: &OwnerId,
        bytes: usize,
        rounded: usize,
        stream: &Stream,
    ) -> Result<DeviceBuffer> {
        let key = stream.key();
        let mut st = self.inner.state.lock();
        // Quota.
        let usage = st.owners.entry(owner.clone()).or_default();
        if let Some(q) = usage.quota {
            if usage.in_use.saturating_add(rounded) > q {
                return Err(Error::QuotaExceeded {
                    owner: owner.to_string(),
                    requested: rounded,
                    quota: q,
                    in_use: usage.in_use,
                });
            }
        }
        let addr = match st.pool.alloc(key, rounded) {
            Some(a) => {
                st.stats.hits += 1;
                a
            }
            None => {
                st.stats.misses += 1;
                self.alloc_slow(&mut st, stream, rounded)?
            }
        };
        let size = st.pool.block_size(addr).unwrap_or(rounded);
        let usage = st.owners.entry(owner.clone()).or_default();
        usage.in_use += rounded;
        usage.peak = usage.peak.max(usage.in_use);
        usage.allocations += 1;
        Ok(DeviceBuffer::pooled(
            addr,
            bytes,
            size,
            rounded,
            owner.clone(),
            stream,
            self.inner.clone(),
        ))
    }

    fn alloc_slow(&self, st: &mut State, stream: &Stream, rounded: usize) -> Result<u64> {
        let key = stream.key();
        // 1. Frees waiting for other streams whose events have completed.
        Self::drain_pending(st, false)?;
        if let Some(a) = st.pool.alloc(key, rounded) {
            return Ok(a);
        }
        // 2. A wholly free segment of another stream whose queued work has all finished (not
        // a retired one, whose work may never end, nor a busy one: this stream would wait for
        // its work, however long that takes). Ordered after it all the same.
        let (pool, streams, retired) = (&mut st.pool, &st.streams, &st.retired);
        let adopted = pool.adopt_free_segment(key, rounded, |s| {
            !retired.contains(&s)
                && streams
                    .get(&s)
                    .is_none_or(|o| matches!(o.is_idle(), Ok(true)))
        });
        if let Some(old) = adopted {
            if let Some(old_stream) = st.streams.get(&old).cloned() {
                stream.wait_stream(&old_stream)?;
            }
            st.streams.insert(key, stream.clone());
            if let Some(a) = st.pool.alloc(key, rounded) {
                return Ok(a);
            }
        }
        // 3. The driver; on OOM release every cached segment and retry once.
        let seg = segment_size(rounded);
        self.inner.ctx.bind_to_thread().ctx("binding the context")?;
        if !st.retired.is_empty() {
            // The driver's own out-of-memory path may wait for the whole device: on the H100 a
            // failing cuMemAlloc waited 3 s for a retired stream's kernel once the process had
            // freed most of the GPU's memory (gpu_alloc's tests in one process; in a fresh
            // process it returns in milliseconds). While a stream is retired the driver is
            // asked only for what it reports free, so it never gets there.
            let free = self.free_memory();
            if free < seg {
                return Err(Self::out_of_memory(st, seg, free));
            }
        }
        let base = match self.driver_alloc(seg) {
            Ok(p) => p,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                self.quiesce(st)?;
                Self::drain_pending(st, true)?;
                self.release_segments(st)?;
                match self.driver_alloc(seg) {
                    Ok(p) => p,
                    Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                        return Err(Self::out_of_memory(st, seg, self.free_memory()));
                    }
                    Err(e) => return Err(Error::driver("allocating device memory", e)),
                }
            }
            Err(e) => return Err(Error::driver("allocating device memory", e)),
        };
        st.stats.driver_allocs += 1;
        st.pool.add_segment(base, seg, key, is_small(rounded));
        st.streams.insert(key, stream.clone());
        st.pool.alloc(key, rounded).ok_or_else(|| {
            Error::invalid(
                "alloc",
                "internal: a fresh segment did not serve its request",
            )
        })
    }

    /// The device's free memory as the driver reports it (0 if it cannot be read).
    fn free_memory(&self) -> usize {
        self.inner.ctx.mem_get_info().map(|m| m.0).unwrap_or(0)
    }

    /// Counts and describes an allocation of `requested` bytes that cannot be served.
    fn out_of_memory(st: &mut State, requested: usize, free: usize) -> Error {
        st.stats.oom_errors += 1;
        Error::OutOfMemory {
            requested,
            free,
            reserved: st.pool.counters().reserved,
        }
    }

    fn driver_alloc(&self, bytes: usize) -> std::result::Result<u64, DriverError> {
        // SAFETY: the device's context is bound to this thread (by the caller); the result is
        // a fresh allocation owned by the pool until released by `release_segments`.
        unsafe { cudarc::driver::result::malloc_sync(bytes) }
    }

    /// Returns the pending frees whose events have completed to the pool; with `wait`, first
    /// waits for those events (except on retired streams: see [`pending_done`]).
    fn drain_pending(st: &mut State, wait: bool) -> Result<()> {
        let mut i = 0;
        while i < st.pending.len() {
            let done = pending_done(&st.pending[i].events, &st.retired, wait)?;
            if done {
                let p = st.pending.swap_remove(i);
                st.pool.free(p.addr);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Releases every wholly free segment to the driver, except while a stream is retired:
    /// `cuMemFree` waits for all of the device's queued work (it synchronises the device, as
    /// the H100 run of `gpu_alloc::retired_streams_are_never_waited_for` showed: 3.06 s for
    /// the retired stream's 3 s kernel), and a retired stream's kernel may never end. The
    /// segments then stay cached (an out-of-memory retry fails at once instead of hanging).
    fn release_segments(&self, st: &mut State) -> Result<()> {
        if !st.retired.is_empty() {
            return Ok(());
        }
        let segs = st.pool.take_free_segments(|_| true);
        for (base, _) in segs {
            // SAFETY: `base` came from malloc_sync and no block of its segment is allocated
            // (take_free_segments only returns wholly free segments); the device was
            // synchronized by the caller, so no queued work uses it.
            unsafe { cudarc::driver::result::free_sync(base) }.ctx("freeing device memory")?;
            st.stats.driver_frees += 1;
        }
        if st.pool.segment_count() == 0 {
            st.streams.clear();
        }
        Ok(())
    }

    /// Sets (or with `None` removes) `owner`'s quota in bytes. Allocations already made stay;
    /// later ones that would pass the quota fail with [`Error::QuotaExceeded`].
    pub fn set_quota(&self, owner: &OwnerId, quota: Option<usize>) -> Result<()> {
        self.inner
            .state
            .lock()
            .owners
            .entry(owner.clone())
            .or_default()
            .quota = quota;
        Ok(())
    }

    /// Memory charged to `owner`.
    pub fn owner_usage(&self, owner: &OwnerId) -> OwnerUsage {
        self.inner
            .state
            .lock()
            .owners
            .get(owner)
            .copied()
            .unwrap_or_default()
    }

    /// Runs `f` with `owner` as this thread's current owner (scopes nest; restored on return
    /// or panic).
    pub fn with_owner<R>(&self, owner: &OwnerId, f: impl FnOnce() -> R) -> R {
        OWNERS.with(|o| o.borrow_mut().push(owner.clone()));
        struct Pop;
        impl Drop for Pop {
            fn drop(&mut self) {
                OWNERS.with(|o| {
                    o.borrow_mut().pop();
                });
            }
        }
        let _pop = Pop;
        f()
    }

    /// Installs (or removes) the hook called before every allocation.
    pub fn set_alloc_hook(&self, hook: Option<AllocHook>) {
        *self.inner.hook.write() = hook;
    }

    /// Installs the allocator's memory ledger (see [`AllocLedger`]). There is at most one: an
    /// [`Error::InvalidArgument`] names the conflict when another ledger is installed, and
    /// nothing changes.
    pub fn install_ledger(&self, ledger: Arc<dyn AllocLedger>) -> Result<()> {
        let mut slot = self.inner.ledger.write();
        if slot.is_some() {
            return Err(Error::invalid(
                "install_ledger",
                format!(
                    "device {} already has a memory ledger (another scheduler on this device?); \
                     remove it first",
                    self.inner.ordinal
                ),
            ));
        }
        *slot = Some(ledger);
        Ok(())
    }

    /// Removes `ledger` if it is the installed one (returns whether it was). Buffers charged to
    /// it still return their charges to it when dropped.
    pub fn remove_ledger(&self, ledger: &Arc<dyn AllocLedger>) -> bool {
        let mut slot = self.inner.ledger.write();
        match &*slot {
            Some(l) if Arc::ptr_eq(l, ledger) => {
                *slot = None;
                true
            }
            _ => false,
        }
    }

    /// Whether the allocator keeps a clone of `stream` (it does while the stream has cached
    /// segments; [`release_stream`](Self::release_stream) lets go of it).
    pub(crate) fn holds_stream(&self, stream: &Stream) -> bool {
        self.inner.state.lock().streams.contains_key(&stream.key())
    }

    /// Forgets `stream` so that its handle may be destroyed: when no block of a segment that
    /// belongs to it is allocated (or waiting for other streams), waits for the stream, releases
    /// those segments to the driver and returns `true`; otherwise (also while any stream of the
    /// device is retired: freeing to the driver would wait for it) changes nothing and returns
    /// `false` (keep the stream alive until its blocks are freed).
    pub fn release_stream(&self, stream: &Stream) -> Result<bool> {
        let key = stream.key();
        let mut st = self.inner.state.lock();
        // Any retired stream, not only this one: freeing to the driver (`cuMemFree`) waits for
        // every stream of the device, the retired one's never-ending kernel included.
        if !st.retired.is_empty() {
            return Ok(false);
        }
        Self::drain_pending(&mut st, false)?;
        if !st.pool.stream_is_idle(key) {
            return Ok(false);
        }
        stream.synchronize()?;
        self.inner.ctx.bind_to_thread().ctx("binding the context")?;
        for (base, _) in st.pool.take_free_segments(|s| s == key) {
            // SAFETY: `base` came from malloc_sync; its segment is wholly free (stream_is_idle)
            // and belongs to `stream`, whose queued work has finished (synchronized above), so no
            // work uses it.
            unsafe { cudarc::driver::result::free_sync(base) }.ctx("freeing device memory")?;
            st.stats.driver_frees += 1;
        }
        st.streams.remove(&key);
        Ok(true)
    }

    /// Marks `stream` as one whose queued work may never finish (a kernel that does not end):
    /// its cached segments stay out of use until [`restore_stream`](Self::restore_stream) —
    /// never adopted by another stream (which would have to wait for it) nor released to the
    /// driver (the work may still use them) — and [`release_stream`](Self::release_stream)
    /// keeps it. Its own blocks are still freed into its segments as they are dropped.
    pub fn retire_stream(&self, stream: &Stream) {
        self.inner.state.lock().retired.insert(stream.key());
    }

    /// Undoes [`retire_stream`](Self::retire_stream) once the stream's work has finished.
    pub fn restore_stream(&self, stream: &Stream) {
        self.inner.state.lock().retired.remove(&stream.key());
    }

    /// Streams retired now ([`retire_stream`](Self::retire_stream)).
    pub fn retired_streams(&self) -> usize {
        self.inner.state.lock().retired.len()
    }

    /// Bytes of the cached segments that belong to `stream` (blocks in use on it and blocks
    /// freed into its cache): for a retired stream, memory kept out of use.
    pub fn stream_reserved(&self, stream: &Stream) -> usize {
        self.inner.state.lock().pool.stream_reserved(stream.key())
    }

    /// Statistics.
    pub fn stats(&self) -> AllocStats {
        let st = self.inner.state.lock();
        let c = st.pool.counters();
        AllocStats {
            in_use: c.in_use,
            reserved: c.reserved,
            peak_in_use: c.peak_in_use,
            ..st.stats
        }
    }

    /// Waits for pending frees and releases every cached (wholly free) segment to the driver.
    pub fn empty_cache(&self) -> Result<()> {
        self.inner.ctx.bind_to_thread().ctx("binding the context")?;
        let mut st = self.inner.state.lock();
        self.quiesce(&st)?;
        Self::drain_pending(&mut st, true)?;
        self.release_segments(&mut st)
    }

    /// Waits until no queued work can use a cached block that may be released: the primary
    /// context, and every stream that has segments, whatever its context (streams of green
    /// contexts are not synchronised by the primary context's `cuCtxSynchronize`). Retired
    /// streams are not waited for (their segments are not released; see [`quiesce_plan`]).
    /// Called with the state locked, so no block is freed meanwhile: every free happened
    /// before, after the work that used the block was queued.
    fn quiesce(&self, st: &State) -> Result<()> {
        let (whole_context, streams) = quiesce_plan(&st.streams, &st.retired);
        if whole_context {
            self.inner
                .ctx
                .synchronize()
                .ctx("synchronizing before releasing the cache")?;
        }
        for s in streams {
            s.synchronize()?;
        }
        Ok(())
    }
}

impl Allocator {
    /// Wraps foreign device memory (see [`DeviceBuffer::from_foreign`], which checks the
    /// pointer first), first used on `stream`.
    ///
    /// # Safety
    /// As for [`DeviceBuffer::from_foreign`].
    pub(crate) unsafe fn wrap_foreign(
        &self,
        ptr: u64,
        bytes: usize,
        keep_alive: Box<dyn Any + Send + Sync>,
        stream: &Stream,
    ) -> DeviceBuffer {
        let access = self
            .inner
            .foreign_access
            .get_or_init(|| Arc::new(Access::new(stream)))
            .clone();
        // The buffer's first use is on `stream`: order it after the foreign buffers' latest use
        // (they may share memory with this one).
        access.enter(stream);
        DeviceBuffer {
            ptr,
            len: bytes,
            size: bytes,
            owner: OwnerId::new(FOREIGN_OWNER),
            stream: stream.clone(),
            used_on: Mutex::new(Vec::new()),
            access: Tracker::Shared(access),
            origin: Origin::Foreign {
                keep_alive: Some(keep_alive),
                ordinal: self.inner.ordinal,
                alloc: self.inner.clone(),
            },
        }
    }
}

/// The [`OwnerId`] a foreign buffer reports (it is charged to nobody).
pub const FOREIGN_OWNER: &str = "foreign";

/// The stream order of a buffer: its own, or the one every foreign buffer of the device shares.
enum Tracker {
    Own(Access),
    Shared(Arc<Access>),
}

impl std::ops::Deref for Tracker {
    type Target = Access;
    fn deref(&self) -> &Access {
        match self {
            Tracker::Own(a) => a,
            Tracker::Shared(a) => a,
        }
    }
}

/// Where a buffer's memory comes from.
enum Origin {
    /// A block of the allocator's pool, returned to it on drop.
    Pool {
        alloc: Arc<AllocInner>,
        /// Bytes charged to the owner: the request in the allocator's size class, whatever
        /// block served it (a larger cached block must not charge more, nor let usage pass the
        /// quota that was checked against the request).
        charged: usize,
        charge: Option<Charge>,
    },
    /// Memory of another library: never freed here; its owner's handle is released on drop,
    /// after the work queued on the memory has finished.
    Foreign {
        keep_alive: Option<Box<dyn Any + Send + Sync>>,
        ordinal: usize,
        /// The allocator of the device (for its retired streams).
        alloc: Arc<AllocInner>,
    },
}

/// A block of device memory from the [`Allocator`] (returned to the cache when dropped), or
/// memory of another library wrapped by [`DeviceBuffer::from_foreign`].
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
    size: usize,
    owner: OwnerId,
    /// The stream the block is ordered on in the pool (for a foreign buffer: its first user).
    stream: Stream,
    /// Streams other than `stream` that used the buffer (waited for before the block is
    /// reused or the foreign handle released).
    used_on: Mutex<Vec<Stream>>,
    access: Tracker,
    origin: Origin,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len_bytes", &self.len)
            .field("owner", &self.owner)
            .field("foreign", &self.is_foreign())
            .finish()
    }
}

impl DeviceBuffer {
    fn pooled(
        ptr: u64,
        len: usize,
        size: usize,
        charged: usize,
        owner: OwnerId,
        stream: &Stream,
        alloc: Arc<AllocInner>,
    ) -> DeviceBuffer {
        DeviceBuffer {
            ptr,
            len,
            size,
            owner,
            stream: stream.clone(),
            used_on: Mutex::new(Vec::new()),
            access: Tracker::Own(Access::new(stream)),
            origin: Origin::Pool {
                alloc,
                charged,
                charge: None,
            },
        }
    }

    /// The device address (0 for an empty buffer).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// Bytes requested.
    pub fn len_bytes(&self) -> usize {
        self.len
    }
    /// Bytes held (the request rounded to the allocator's granularity; a foreign buffer's
    /// length).
    pub fn capacity_bytes(&self) -> usize {
        self.size
    }
    /// The device addresses `[ptr, ptr + len_bytes)` of the buffer.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.ptr..self.ptr + self.len as u64
    }
    /// Whether the two buffers share a byte (blocks of the allocator never do; foreign buffers
    /// may overlap each other).
    pub fn overlaps(&self, other: &DeviceBuffer) -> bool {
        gpukit_jit::typed::ranges_overlap(&self.range(), &other.range())
    }
    /// The owner charged ([`FOREIGN_OWNER`] for a foreign buffer, which is charged nothing).
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }
    /// The ordinal of the device the memory belongs to.
    pub fn device_ordinal(&self) -> usize {
        match &self.origin {
            Origin::Pool { alloc, .. } => alloc.ordinal,
            Origin::Foreign { ordinal, .. } => *ordinal,
        }
    }
    /// Whether the memory belongs to another library ([`DeviceBuffer::from_foreign`]).
    pub fn is_foreign(&self) -> bool {
        matches!(self.origin, Origin::Foreign { .. })
    }
    /// The stream the buffer is ordered on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
    /// Declares that work on `stream` (other than the buffer's own) uses the buffer, so that
    /// its memory is reused only after that work has finished. Does not order `stream` with
    /// other uses: see [`use_on`](Self::use_on).
    pub fn record_stream(&self, stream: &Stream) {
        if *stream == self.stream || self.size == 0 {
            return;
        }
        let mut u = self.used_on.lock();
        if !u.contains(stream) {
            u.push(stream.clone());
        }
    }
    /// Declares that work about to be queued on `stream` reads or writes the buffer: `stream`
    /// is first ordered after every use queued so far on other streams (see
    /// module `access`), and the memory is reused (or a foreign handle released) only
    /// after that work has finished. Call it before queueing the work.
    pub fn use_on(&self, stream: &Stream) {
        if self.size == 0 {
            return;
        }
        if self.access.enter(stream) {
            self.record_stream(stream);
        }
    }
    /// Queues on `stream` the zeroing of the buffer's first `bytes` bytes (`bytes` at most
    /// [`len_bytes`](Self::len_bytes)), ordered after the buffer's other uses as
    /// [`use_on`](Self::use_on) orders them. `stream` must belong to the buffer's device.
    pub fn zero_async(&self, bytes: usize, stream: &Stream) -> Result<()> {
        if bytes > self.len {
            return Err(Error::invalid(
                "memory",
                format!(
                    "cannot zero {bytes} bytes of a {}-byte buffer; pass at most its length",
                    self.len
                ),
            ));
        }
        let ctx = stream.cuda().context();
        if ctx.ordinal() != self.device_ordinal() {
            return Err(Error::invalid(
                "memory",
                format!(
                    "the buffer lives on device {} but the stream belongs to device {}; zero it \
                     on a stream of its own device",
                    self.device_ordinal(),
                    ctx.ordinal()
                ),
            ));
        }
        if bytes == 0 {
            return Ok(());
        }
        ctx.bind_to_thread().ctx("binding the context")?;
        self.use_on(stream);
        // SAFETY: `[ptr, ptr + bytes)` lies inside this live block (checked above), which
        // `self` keeps out of the pool; `stream` belongs to the block's device (checked above)
        // and its context is current on this thread; `use_on` ordered `stream` after the
        // block's other uses and made its reuse wait for `stream`, so the memset neither races
        // earlier work nor outlives the block's ownership.
        unsafe {
            cudarc::driver::result::memset_d8_async(self.ptr, 0, bytes, stream.cuda().cu_stream())
        }
        .ctx("zeroing device memory")
    }
    /// The stream that used the buffer last ([`use_on`](Self::use_on)): its queue ends after
    /// every use queued so far.
    pub fn last_user(&self) -> Stream {
        self.access.last()
    }
    /// How many clones of `stream` the buffer holds (for owners that decide from the count of
    /// a stream's holders whether anybody else still uses it).
    pub(crate) fn stream_refs(&self, stream: &Stream) -> usize {
        usize::from(self.stream == *stream)
            + usize::from(self.access.last() == *stream)
            + self.used_on.lock().iter().filter(|s| *s == stream).count()
    }
}

/// How a stream that used a freed buffer was ordered before the memory goes back.
#[derive(Debug)]
enum Ordered<E> {
    /// An event at the end of its work.
    Event(E),
    /// The host waited for it (no event could be made).
    Waited,
    /// Neither worked: the memory may still be in use.
    Failed,
}

/// What happens to the memory of a dropped buffer.
#[derive(Debug, PartialEq, Eq)]
enum Release<E> {
    /// Back at once (nothing else is pending).
    Now,
    /// Back once these events have completed.
    After(Vec<E>),
    /// Never: a stream that used it could not be ordered (the context is broken), so the
    /// memory is kept out of reuse for the rest of the process rather than handed out while
    /// work may still use it.
    Never,
}

fn release_plan<E>(ordered: impl IntoIterator<Item = Ordered<E>>) -> Release<E> {
    let mut events = Vec::new();
    for o in ordered {
        match o {
            Ordered::Event(e) => events.push(e),
            Ordered::Waited => {}
            Ordered::Failed => return Release::Never,
        }
    }
    if events.is_empty() {
        Release::Now
    } else {
        Release::After(events)
    }
}

/// Orders the end of `s`'s queued work: an event (with the stream's key), else a host wait;
/// never a host wait for a retired stream, whose work may never end.
fn order(s: &Stream, retired: bool) -> Ordered<(StreamKey, Event)> {
    match s.record_marker() {
        Ok(e) => Ordered::Event((s.key(), e)),
        Err(_) if !retired && s.synchronize().is_ok() => Ordered::Waited,
        Err(_) => Ordered::Failed,
    }
}

/// The retired streams of an allocator, read only when a dropped buffer was used on other
/// streams than its own.
fn retired_of(alloc: &AllocInner, streams: &[Stream]) -> std::collections::HashSet<StreamKey> {
    if streams.is_empty() {
        Default::default()
    } else {
        alloc.state.lock().retired.clone()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.size == 0 {
            return;
        }
        let mut streams = std::mem::take(&mut *self.used_on.lock());
        match &mut self.origin {
            Origin::Pool {
                alloc,
                charged,
                charge,
            } => {
                let retired = retired_of(alloc, &streams);
                let plan =
                    release_plan(streams.iter().map(|s| order(s, retired.contains(&s.key()))));
                let mut st = alloc.state.lock();
                if let Some(u) = st.owners.get_mut(&self.owner) {
                    u.in_use = u.in_use.saturating_sub(*charged);
                    u.allocations = u.allocations.saturating_sub(1);
                }
                match plan {
                    Release::Now => {
                        st.pool.free(self.ptr);
                    }
                    Release::After(events) => st.pending.push(Pending {
                        addr: self.ptr,
                        events,
                    }),
                    Release::Never => st.stats.leaked_blocks += 1,
                }
                drop(st);
                if let Some(c) = charge.take() {
                    c.ledger.release(&self.owner, c.bytes);
                }
            }
            Origin::Foreign {
                keep_alive, alloc, ..
            } => {
                // The foreign owner may reuse the memory as soon as its handle is released:
                // wait (on the host) for every stream that used it first; a retired stream's
                // work that has not ended keeps the handle forever instead of blocking here.
                let last = self.access.last();
                if !streams.contains(&last) {
                    streams.push(last);
                }
                let retired = retired_of(alloc, &streams);
                let plan =
                    release_plan(streams.iter().map(|s| order(s, retired.contains(&s.key()))));
                let done = match plan {
                    Release::Now => true,
                    Release::After(events) => {
                        pending_done(&events, &retired, true).unwrap_or(false)
                    }
                    Release::Never => false,
                };
                match keep_alive.take() {
                    Some(k) if done => drop(k),
                    // Work may still use the memory: keep the foreign owner's handle forever
                    // rather than let it free memory in use.
                    Some(k) => std::mem::forget(k),
                    None => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{pending_done, quiesce_plan, release_plan, Completion, Ordered, Release};
    use crate::error::Result;
    use std::cell::Cell;
    use std::collections::{HashMap, HashSet};

    /// Queued work as the allocator sees it: done or not; waiting for work that never ends
    /// fails the test (the real wait would never return).
    struct Work {
        done: Cell<bool>,
        ends: bool,
        waits: Cell<u32>,
    }

    impl Work {
        fn running(ends: bool) -> Work {
            Work {
                done: Cell::new(false),
                ends,
                waits: Cell::new(0),
            }
        }
    }

    impl Completion for Work {
        fn is_complete(&self) -> Result<bool> {
            Ok(self.done.get())
        }
        fn wait(&self) -> Result<()> {
            assert!(
                self.ends,
                "waited for work that never ends: this wait would hang"
            );
            self.waits.set(self.waits.get() + 1);
            self.done.set(true);
            Ok(())
        }
    }

    #[test]
    fn retired_streams_are_queried_never_waited_for() {
        let retired: HashSet<u64> = [7].into_iter().collect();
        // An ordinary stream's work is waited for; a retired stream's is only queried.
        let events = vec![(1u64, Work::running(true)), (7, Work::running(false))];
        assert!(!pending_done(&events, &retired, true).unwrap());
        assert_eq!(events[0].1.waits.get(), 1);
        // The free stays pending until the retired stream's work has ended after all.
        events[1].1.done.set(true);
        assert!(pending_done(&events, &retired, true).unwrap());
        // Without `wait` nothing blocks.
        let events = vec![(1u64, Work::running(true))];
        assert!(!pending_done(&events, &HashSet::new(), false).unwrap());
        assert_eq!(events[0].1.waits.get(), 0);
        assert!(pending_done(&events, &HashSet::new(), true).unwrap());
    }

    #[test]
    fn quiescing_skips_retired_streams_and_the_context_wide_wait() {
        let streams: HashMap<u64, &str> = [(1, "a"), (2, "b"), (3, "c")].into_iter().collect();
        let (whole, mut waited) = quiesce_plan(&streams, &HashSet::new());
        waited.sort();
        assert!(whole);
        assert_eq!(waited, [&"a", &"b", &"c"]);
        let retired: HashSet<u64> = [2].into_iter().collect();
        let (whole, mut waited) = quiesce_plan(&streams, &retired);
        waited.sort();
        assert!(
            !whole,
            "cuCtxSynchronize would wait for the retired stream too"
        );
        assert_eq!(waited, [&"a", &"c"]);
    }

    #[test]
    fn a_stream_that_cannot_be_ordered_keeps_the_memory_out_of_reuse() {
        use Ordered::*;
        assert_eq!(release_plan::<u8>([]), Release::Now);
        assert_eq!(release_plan::<u8>([Waited, Waited]), Release::Now);
        assert_eq!(
            release_plan([Event(1u8), Waited, Event(2)]),
            Release::After(vec![1, 2])
        );
        // One stream neither recorded an event nor could be waited for: never released, even
        // when the others were ordered (the old code freed the block at once).
        assert_eq!(release_plan([Event(1u8), Failed, Event(2)]), Release::Never);
        assert_eq!(release_plan::<u8>([Failed]), Release::Never);
    }
}
