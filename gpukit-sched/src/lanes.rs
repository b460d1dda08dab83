//! Lanes: the streams tasks run on (a green-context stream over a set of SM groups, or a
//! plain stream of the primary context in the pacing fallback), pooled because a green
//! context costs about 1 ms to create. The pool is bounded: past
//! [`SchedulerConfig::max_cached_lanes`](crate::SchedulerConfig::max_cached_lanes) idle lanes
//! the least recently used one is destroyed, once gpukit-core's allocator has let go of its
//! stream ([`gpukit_core::Allocator::release_stream`]); a lane whose stream still orders live
//! buffers is kept aside until they are freed.

use crate::error::Result;
use crate::green::{GreenContext, GreenStream, SmSplit};
use crate::sm::GroupSet;
use cudarc::driver::sys;
use gpukit_core::{Allocator, Device, Stream};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which lane: a green context over groups (and the floor SMs), or the primary context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LaneKey {
    Green(GroupSet, bool),
    Primary,
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
    _green: Option<(GreenStream, GreenContext)>,
}

// SAFETY: the raw context handle is a process-wide driver object kept alive by `_green` (or
// the device's primary context); streams may be used from any thread.
unsafe impl Send for Lane {}
// SAFETY: as above; a Lane is used by one task at a time and only read through `&`.
unsafe impl Sync for Lane {}

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
            _green: None,
        })
    }
}

#[derive(Default)]
struct Cache {
    /// Idle lanes, least recently used first.
    idle: VecDeque<Lane>,
    /// Evicted lanes whose streams still order live buffers.
    held: Vec<Lane>,
}

/// The bounded pool of idle lanes.
pub(crate) struct Lanes {
    cache: Mutex<Cache>,
    cap: usize,
    created: AtomicU64,
    /// The device's allocator (None without a device): streams are destroyed only once it has
    /// let go of them.
    alloc: Option<Allocator>,
}

impl Lanes {
    pub fn new(cap: usize, alloc: Option<Allocator>) -> Self {
        Lanes {
            cache: Mutex::new(Cache::default()),
            cap,
            created: AtomicU64::new(0),
            alloc,
        }
    }

    /// An idle lane with `key`, or a new one from `make`.
    pub fn checkout(&self, key: LaneKey, make: impl FnOnce() -> Result<Lane>) -> Result<Lane> {
        {
            let mut c = self.cache.lock();
            if let Some(i) = c.idle.iter().rposition(|l| l.key == key) {
                if let Some(l) = c.idle.remove(i) {
                    return Ok(l);
                }
            }
        }
        let lane = make()?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(lane)
    }

    /// Returns a lane; past the cap the least recently used idle lanes go (see the module
    /// docs). Lanes are dropped outside the pool's lock (destroying one waits for its stream).
    pub fn checkin(&self, lane: Lane) {
        let alloc = self.alloc.as_ref();
        let mut drop_now = Vec::new();
        {
            let mut c = self.cache.lock();
            c.idle.push_back(lane);
            while c.idle.len() > self.cap {
                let Some(old) = c.idle.pop_front() else {
                    break;
                };
                c.held.push(old);
            }
            if let Some(a) = alloc {
                let held = std::mem::take(&mut c.held);
                for l in held {
                    match a.release_stream(&l.stream) {
                        Ok(true) => drop_now.push(l),
                        _ => c.held.push(l),
                    }
                }
            }
        }
        drop(drop_now);
    }

    /// Lanes created so far.
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    /// Idle lanes cached now.
    pub fn cached(&self) -> usize {
        self.cache.lock().idle.len()
    }

    /// Destroys every idle lane the allocator lets go of; the others are leaked on purpose (a
    /// buffer still alive is ordered on their streams, and the allocator may order a later
    /// allocation after them). Returns how many were kept. Lanes checked out (a detached
    /// task's) are not touched; they come back to the pool, and are drained with it on drop.
    pub fn drain(&self) -> usize {
        let lanes: Vec<Lane> = {
            let mut c = self.cache.lock();
            let held = std::mem::take(&mut c.held);
            c.idle.drain(..).chain(held).collect()
        };
        let mut kept = 0;
        for l in lanes {
            let released = self
                .alloc
                .as_ref()
                .is_none_or(|a| matches!(a.release_stream(&l.stream), Ok(true)));
            if released {
                drop(l);
            } else {
                kept += 1;
                std::mem::forget(l);
            }
        }
        kept
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        self.drain();
    }
}
