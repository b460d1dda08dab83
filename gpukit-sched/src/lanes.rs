//! Lanes: the streams tasks run on (a green-context stream over a set of SM groups, or a
//! plain stream of the primary context in the pacing fallback), pooled because a green
//! context costs about 1 ms to create. Each lane has an allocation owner of its own for its
//! cuBLAS workspace (the shared handle of its stream), charged to the task that uses it.
//!
//! # A lane is destroyed only when nothing else can use its stream
//! A green-context stream is destroyed with its lane, and every clone of its
//! [`Stream`](gpukit_core::Stream) — [`TaskContext::stream`](crate::TaskContext::stream),
//! buffers ordered on it (`used_on`), gpukit-core's allocator and handle cache — is a clone of
//! the same `Arc<CudaStream>`. The pool is bounded: past
//! [`SchedulerConfig::max_cached_lanes`](crate::SchedulerConfig::max_cached_lanes) idle lanes
//! the least recently used one is destroyed once (1) the handle cache has dropped the
//! stream's handles, (2) the allocator has let go of the stream, and (3) no other clone of
//! the stream exists. Until then it is kept aside and retried; when the scheduler goes, the
//! lanes still referenced move to a process-wide list that is retried the same way.
//!
//! # Nothing is destroyed beside hung work
//! A quarantined lane (its work never ended) is never destroyed. Destroying any other lane
//! waits for the device too (the allocator synchronises the stream and frees its memory,
//! the cuBLAS handle is destroyed, the green stream is synchronised, the green context
//! destroyed), and whether the driver lets such a wait pass a kernel that never ends in
//! another context is not documented. So while the device has work that may never end —
//! quarantined work, or a detached task whose closure has not returned
//! ([`crate::quarantine`]) — no lane is destroyed at all: past the bound they are kept
//! aside (reported as held), and at shutdown they become orphans, retried by later
//! schedulers once the work has ended — or leaked with the process.

use crate::error::Result;
use crate::green::{GreenContext, GreenStream, SmSplit};
use crate::sm::{GroupSet, SmLayout};
use cudarc::driver::sys;
use gpukit_core::{Allocator, Device, OwnerId, Stream};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Which lane: a green context over groups (and the floor SMs), or the primary context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LaneKey {
    Green(GroupSet, bool),
    Primary,
}

impl LaneKey {
    /// The SM groups the lane's work runs on (none for the primary context's lanes).
    pub fn groups(self) -> GroupSet {
        match self {
            LaneKey::Green(g, _) => g,
            LaneKey::Primary => GroupSet::EMPTY,
        }
    }
}

/// A stream a task can run on.
pub(crate) struct Lane {
    /// gpukit-core's view of the stream (wrapped with the primary context, so core's stream
    /// scopes, events and allocations accept it). Declared first: dropped before the raw
    /// stream it borrows.
    pub stream: Stream,
    /// The context to make current for launches and library handles.
    pub ctx: sys::CUcontext,
    /// SMs the stream's kernels may run on.
    pub sms: u32,
    pub key: LaneKey,
    /// The allocation owner of the lane's cuBLAS workspace.
    pub owner: OwnerId,
    _green: Option<(GreenStream, GreenContext)>,
}

// SAFETY: the raw context handle is a process-wide driver object kept alive by `_green` (or
// the device's primary context); streams may be used from any thread.
unsafe impl Send for Lane {}
// SAFETY: as above; a Lane is used by one task at a time and only read through `&`.
unsafe impl Sync for Lane {}

fn lane_owner() -> OwnerId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    OwnerId::new(&format!(
        "sched-lane-{}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

impl Lane {
    /// The raw stream handle.
    pub fn raw(&self) -> sys::CUstream {
        self.stream.cuda().cu_stream()
    }

    /// A stream of a new green context over `groups` (plus the floor SMs when `floor`).
    pub fn green(split: &SmSplit, groups: GroupSet, floor: bool) -> Result<Lane> {
        let gc = split.create(groups, floor)?;
        let gs = gc.create_stream(0)?;
        Ok(Lane {
            stream: Stream::from_cuda(gs.cuda().clone()),
            ctx: gc.cu_ctx(),
            sms: gc.sms(),
            key: LaneKey::Green(groups, floor),
            owner: lane_owner(),
            _green: Some((gs, gc)),
        })
    }

    /// A new stream of the primary context.
    pub fn primary(dev: &Device) -> Result<Lane> {
        Ok(Lane {
            stream: dev.new_stream(0)?,
            ctx: dev.context().cu_ctx(),
            sms: dev.multiprocessor_count(),
            key: LaneKey::Primary,
            owner: lane_owner(),
            _green: None,
        })
    }

    /// Whether destroying the lane leaves no clone of its stream behind. A green lane's
    /// stream is borrowed by cudarc (the lane destroys it): only the lane's own two
    /// references may remain (the green stream's and `stream`'s). A primary-context lane's
    /// stream is owned by cudarc and lives as long as any clone: always true.
    fn unreferenced(&self) -> bool {
        match &self._green {
            None => true,
            Some(_) => {
                let s = self.stream.cuda();
                Arc::strong_count(s) == 2 && Arc::weak_count(s) == 0
            }
        }
    }
}

#[derive(Default)]
struct Cache {
    /// Idle lanes, least recently used first.
    idle: VecDeque<Lane>,
    /// Lanes past the bound that could not be destroyed yet (see the module docs).
    held: Vec<Lane>,
}

/// Lanes of schedulers that have gone but whose streams were still referenced (or whose
/// device had hung work), with their allocator, device ordinal and the SM layout their keys
/// refer to.
type Orphan = (Lane, Option<Allocator>, usize, SmLayout);
static ORPHANS: Mutex<Vec<Orphan>> = Mutex::new(Vec::new());

/// Destroys `lane` of device `ordinal` if nothing else can use its stream and the device has
/// no hung work (see the module docs); gives it back otherwise.
fn try_destroy(
    lane: Lane,
    alloc: Option<&Allocator>,
    ordinal: usize,
) -> std::result::Result<(), Lane> {
    if crate::quarantine::device_has_hung_work(ordinal) {
        return Err(lane);
    }
    if !gpukit_core::handles::release_stream(&lane.stream) {
        return Err(lane);
    }
    if let Some(a) = alloc {
        if !matches!(a.release_stream(&lane.stream), Ok(true)) {
            return Err(lane);
        }
    }
    if !lane.unreferenced() {
        return Err(lane);
    }
    drop(lane);
    Ok(())
}

/// Retries the orphaned lanes of earlier schedulers.
fn sweep_orphans() {
    let mut orphans = ORPHANS.lock();
    if orphans.is_empty() {
        return;
    }
    let all = std::mem::take(&mut *orphans);
    for (lane, alloc, ordinal, layout) in all {
        if let Err(lane) = try_destroy(lane, alloc.as_ref(), ordinal) {
            orphans.push((lane, alloc, ordinal, layout));
        }
    }
}

/// An orphaned idle lane of device `ordinal` with `key` over the same SM layout, taken for
/// reuse: a later scheduler on the device adopts the lanes an earlier one left instead of
/// creating new ones (beside a kernel that never ends, creating a context can block in the
/// driver, while a lane that exists runs its loaded kernels).
fn adopt_orphan(ordinal: usize, layout: SmLayout, key: LaneKey) -> Option<Lane> {
    let mut orphans = ORPHANS.lock();
    let i = orphans
        .iter()
        .position(|(l, _, o, lay)| *o == ordinal && *lay == layout && l.key == key)?;
    Some(orphans.swap_remove(i).0)
}

/// The bounded pool of idle lanes.
pub(crate) struct Lanes {
    cache: Mutex<Cache>,
    cap: usize,
    created: AtomicU64,
    destroyed: AtomicU64,
    /// The device's allocator (None without a device): streams are destroyed only once it has
    /// let go of them.
    alloc: Option<Allocator>,
    /// The device's ordinal.
    ordinal: usize,
    /// The SM layout the lanes' keys refer to.
    layout: SmLayout,
}

impl Lanes {
    pub fn new(cap: usize, alloc: Option<Allocator>, ordinal: usize, layout: SmLayout) -> Self {
        Lanes {
            ordinal,
            layout,
            cache: Mutex::new(Cache::default()),
            cap,
            created: AtomicU64::new(0),
            destroyed: AtomicU64::new(0),
            alloc,
        }
    }

    /// An idle lane with `key`, an orphaned one an earlier scheduler of the device left, or a
    /// new one from `make`.
    pub fn checkout(&self, key: LaneKey, make: impl FnOnce() -> Result<Lane>) -> Result<Lane> {
        {
            let mut c = self.cache.lock();
            if let Some(i) = c.idle.iter().rposition(|l| l.key == key) {
                if let Some(l) = c.idle.remove(i) {
                    return Ok(l);
                }
            }
        }
        if let Some(l) = adopt_orphan(self.ordinal, self.layout, key) {
            return Ok(l);
        }
        let lane = make()?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(lane)
    }

    /// Returns a lane whose queued work has finished; past the cap the least recently used
    /// idle lanes go (see the module docs). Lanes are destroyed outside the pool's lock.
    pub fn checkin(&self, lane: Lane) {
        let candidates = {
            let mut c = self.cache.lock();
            c.idle.push_back(lane);
            while c.idle.len() > self.cap {
                let Some(old) = c.idle.pop_front() else {
                    break;
                };
                c.held.push(old);
            }
            std::mem::take(&mut c.held)
        };
        if candidates.is_empty() {
            return;
        }
        let mut kept = Vec::new();
        for l in candidates {
            match try_destroy(l, self.alloc.as_ref(), self.ordinal) {
                Ok(()) => {
                    self.destroyed.fetch_add(1, Ordering::Relaxed);
                }
                Err(l) => kept.push(l),
            }
        }
        self.cache.lock().held.extend(kept);
        sweep_orphans();
    }

    /// Lanes created so far.
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    /// Lanes destroyed so far.
    pub fn destroyed(&self) -> u64 {
        self.destroyed.load(Ordering::Relaxed)
    }

    /// Idle lanes cached now.
    pub fn cached(&self) -> usize {
        self.cache.lock().idle.len()
    }

    /// Lanes past the bound kept because their streams are still referenced.
    pub fn held(&self) -> usize {
        self.cache.lock().held.len()
    }

    /// Destroys every idle lane nothing else references (none while the device has hung
    /// work); the others become orphans, retried by later schedulers' pools (see the module
    /// docs). With `hung` (the caller knows of work that may never end) it makes no driver
    /// call at all: every lane becomes an orphan (a driver call could block beside such work).
    /// Lanes checked out (a detached task's) are not touched. Returns how many were kept.
    pub fn drain(&self, hung: bool) -> usize {
        let lanes: Vec<Lane> = {
            let mut c = self.cache.lock();
            let held = std::mem::take(&mut c.held);
            c.idle.drain(..).chain(held).collect()
        };
        let mut kept = 0;
        for l in lanes {
            let left = if hung {
                Err(l)
            } else {
                try_destroy(l, self.alloc.as_ref(), self.ordinal)
            };
            match left {
                Ok(()) => {
                    self.destroyed.fetch_add(1, Ordering::Relaxed);
                }
                Err(l) => {
                    kept += 1;
                    ORPHANS
                        .lock()
                        .push((l, self.alloc.clone(), self.ordinal, self.layout));
                }
            }
        }
        if !hung {
            sweep_orphans();
        }
        kept
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        self.drain(false);
    }
}
