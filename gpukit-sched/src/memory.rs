//! The allocation hook and eviction: the scheduler's [`Ledger`] behind one lock, installed as
//! gpukit-core's [`AllocLedger`] (each allocation is checked and charged in one call, each
//! free is credited), and a starting task's wait for evicted tasks to release memory.

use crate::error::{Error, MemoryHolder};
use crate::ledger::{EntrySpec, Ledger, PoolMemory, Refusal};
use crate::plan::TaskId;
use gpukit_core::alloc::AllocLedger;
use gpukit_core::OwnerId;
use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The live ledger.
pub(crate) struct Memory {
    ledger: Mutex<Ledger>,
    freed: Condvar,
}

impl Memory {
    pub fn new(capacity: u64) -> Self {
        Memory {
            ledger: Mutex::new(Ledger::new(capacity)),
            freed: Condvar::new(),
        }
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Ledger) -> R) -> R {
        f(&mut self.ledger.lock())
    }

    pub fn open(&self, owner: &OwnerId, spec: EntrySpec) -> crate::Result<()> {
        self.ledger.lock().open(owner, spec)
    }

    pub fn close(&self, owner: &OwnerId) -> u64 {
        let left = self.ledger.lock().close(owner);
        self.freed.notify_all();
        left
    }

    pub fn charge(&self, owner: &OwnerId, bytes: u64) -> Result<(), Refusal> {
        self.ledger.lock().charge(owner, bytes)
    }

    pub fn release(&self, owner: &OwnerId, bytes: u64) {
        self.ledger.lock().release(owner, bytes);
        self.freed.notify_all();
    }

    /// See [`Ledger::bind_lane`].
    pub fn bind_lane(&self, lane: &OwnerId, task: &OwnerId) -> Result<(), Refusal> {
        self.ledger.lock().bind_lane(lane, task)
    }

    /// See [`Ledger::unbind_lane`].
    pub fn unbind_lane(&self, lane: &OwnerId) {
        self.ledger.lock().unbind_lane(lane);
        self.freed.notify_all();
    }

    pub fn usage(&self, owner: &OwnerId) -> (u64, u64) {
        self.ledger.lock().usage(owner).unwrap_or((0, 0))
    }

    pub fn pool(&self, pool: &Option<String>) -> PoolMemory {
        self.ledger.lock().pool(pool)
    }

    /// The structured error for `owner`'s last refused allocation, if any.
    pub fn refusal_error(&self, owner: &OwnerId, task: &str) -> Option<Error> {
        let r = self.ledger.lock().take_refusal(owner)?;
        Some(refusal_error(task, r))
    }

    /// Waits until `owner`'s starting task fits beside the others, asking `evict` to stop
    /// the victims the ledger names (called without the ledger's lock). Gives up at
    /// `deadline` (`None`: no bound) with the bytes still missing and who holds them, or at
    /// once (with nothing missing) when `stopped` says the starting task itself was asked to
    /// stop.
    pub fn make_room(
        &self,
        owner: &OwnerId,
        deadline: Option<Instant>,
        mut evict: impl FnMut(&[TaskId]),
        stopped: impl Fn() -> bool,
    ) -> Result<(), (u64, Vec<MemoryHolder>)> {
        loop {
            if stopped() {
                return Err((0, Vec::new()));
            }
            let (short, victims) = {
                let l = self.ledger.lock();
                (l.shortfall(owner), l.plan_eviction(owner))
            };
            if short == 0 {
                return Ok(());
            }
            if !victims.is_empty() {
                evict(&victims);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                let l = self.ledger.lock();
                return Err((l.shortfall(owner), l.holders(owner)));
            }
            // Re-check at least every 10 ms: a release may land between the check and the wait.
            let mut l = self.ledger.lock();
            let tick = now + Duration::from_millis(10);
            let until = deadline.map_or(tick, |d| d.min(tick));
            self.freed.wait_until(&mut l, until);
        }
    }
}

/// The error a task sees for a refused allocation.
pub(crate) fn refusal_error(task: &str, r: Refusal) -> Error {
    match r {
        Refusal::Quota {
            in_use,
            requested,
            limit,
        } => Error::QuotaExceeded {
            task: task.to_string(),
            in_use,
            requested,
            limit,
        },
        Refusal::Pressure {
            requested,
            available,
        } => Error::MemoryPressure {
            task: task.to_string(),
            requested,
            available,
        },
        Refusal::Stopped | Refusal::Ended => {
            Error::internal("charging an allocation", format!("task `{task}`: {r}"))
        }
    }
}

/// [`Memory`] as gpukit-core's allocation ledger.
pub(crate) struct Hook(pub std::sync::Arc<Memory>);

impl AllocLedger for Hook {
    fn charge(&self, owner: &OwnerId, bytes: usize) -> gpukit_core::Result<()> {
        self.0.charge(owner, bytes as u64).map_err(|r| match r {
            Refusal::Quota {
                in_use,
                requested,
                limit,
            } => gpukit_core::Error::QuotaExceeded {
                owner: owner.to_string(),
                requested: requested as usize,
                quota: usize::try_from(limit).unwrap_or(usize::MAX),
                in_use: in_use as usize,
            },
            r => gpukit_core::Error::AllocationRefused {
                owner: owner.to_string(),
                requested: bytes,
                reason: r.to_string(),
            },
        })
    }

    fn release(&self, owner: &OwnerId, bytes: usize) {
        self.0.release(owner, bytes as u64);
    }
}
