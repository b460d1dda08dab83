//! The memory ledger as pure bookkeeping: what every running task, every finished task that
//! still holds buffers, and every allocation outside tasks has charged, against the capacity of
//! each pool (the default pool and the partitions) and of the device. No GPU, no threads: the
//! scheduler keeps one behind a lock and gpukit-core's allocator charges it *in the same step*
//! that approves an allocation ([`gpukit_core::alloc::AllocLedger`]), so concurrent
//! allocations cannot overrun it.
//!
//! # Rules
//! - A task's allocations up to its **request** always pass: the request was committed at
//!   admission (for a Guaranteed task that is its whole limit, so its allocations never fail).
//! - An allocation past the task's **limit** (its own, capped by its pool's quota) is refused
//!   with [`Refusal::Quota`].
//! - Memory **above requests** is first come, first served: an allocation that takes a task
//!   further above its request passes only if its pool *and* the device still have that much
//!   that is neither committed nor used; otherwise [`Refusal::Pressure`].
//! - A task's **footprint** is `max(request, in use)` while it runs. When it ends, buffers it
//!   still holds (returned in its result) stay charged to it, in its pool, until they are freed.
//!   Allocations by owners that are no task count in the default pool.
//! - A starting task whose commitment does not fit beside what others hold has a
//!   **shortfall**; [`Ledger::plan_eviction`] names the fewest victims, in the Kubernetes order
//!   (BestEffort first, then Burstable tasks above their request; within a class the lowest
//!   priority, then the most memory above request, then the latest start), taken from its own
//!   pool for a pool shortfall and from *any* pool for a device shortfall (pools above their own
//!   quota first, which is where a partition created over lent memory finds it).

use crate::error::{Error, HolderKind, MemoryHolder, Result};
use crate::plan::TaskId;
use crate::spec::QosClass;
use gpukit_core::OwnerId;
use std::collections::{BTreeMap, HashMap};

/// What a running task is charged against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySpec {
    /// The task.
    pub id: TaskId,
    /// Its name (for messages).
    pub name: String,
    /// Its pool (`None`: the default pool).
    pub pool: Option<String>,
    /// Its class.
    pub qos: QosClass,
    /// Its priority.
    pub priority: i32,
    /// Start order (larger = started later).
    pub started: u64,
    /// Committed bytes.
    pub request: u64,
    /// Limit in bytes (its own limit capped by its pool's quota).
    pub limit: u64,
}

/// Why an allocation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Past the task's limit.
    Quota {
        /// Bytes it holds.
        in_use: u64,
        /// Bytes asked.
        requested: u64,
        /// Its limit.
        limit: u64,
    },
    /// No free memory above requests (in its pool or on the device).
    Pressure {
        /// Bytes asked.
        requested: u64,
        /// Bytes free above requests.
        available: u64,
    },
    /// The task is being stopped (cancelled, preempted, timed out): allocations are its safe
    /// point.
    Stopped,
    /// The owner is a task that has ended.
    Ended,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Quota {
                in_use,
                requested,
                limit,
            } => write!(
                f,
                "memory limit exceeded: {in_use} in use + {requested} requested > limit {limit} bytes"
            ),
            Refusal::Pressure {
                requested,
                available,
            } => write!(
                f,
                "no free memory above its request: {requested} bytes asked, {available} free for bursting"
            ),
            Refusal::Stopped => f.write_str("the task is being stopped (cancelled, preempted or timed out)"),
            Refusal::Ended => f.write_str("the task that owns this allocation has ended"),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    spec: EntrySpec,
    in_use: u64,
    peak: u64,
    running: bool,
    stopped: bool,
    /// Its GPU work did not end (quarantined): the bytes the allocator keeps out of use on
    /// its streams (their cached segments), charged until the work ends.
    quarantined: Option<u64>,
    last_refusal: Option<Refusal>,
}

impl Entry {
    fn footprint(&self) -> u64 {
        if self.running {
            self.spec
                .request
                .max(self.in_use)
                .max(self.quarantined.unwrap_or(0))
        } else {
            self.in_use
        }
    }
    fn over(&self) -> u64 {
        self.in_use.saturating_sub(self.spec.request)
    }
    /// What evicting it gives back (its whole footprint, once it has ended). A quarantined
    /// task gives back nothing: its work does not end by being asked to stop.
    fn evictable(&self) -> bool {
        self.running
            && self.quarantined.is_none()
            && match self.spec.qos {
                QosClass::BestEffort => true,
                QosClass::Burstable => self.over() > 0,
                QosClass::Guaranteed => false,
            }
    }
}

/// Memory of one pool as the ledger sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolMemory {
    /// The pool's quota.
    pub capacity: u64,
    /// Bytes charged (running tasks, ended tasks' buffers, and for the default pool
    /// allocations outside tasks).
    pub in_use: u64,
    /// Commitments plus use above them: what the pool's capacity is checked against.
    pub footprint: u64,
    /// Bytes still held by tasks that have ended (buffers they returned).
    pub orphaned: u64,
}

/// The ledger. See the module docs for the rules.
#[derive(Debug, Clone)]
pub struct Ledger {
    capacity: u64,
    pools: BTreeMap<Option<String>, u64>,
    entries: HashMap<OwnerId, Entry>,
    outside: u64,
    /// Lane owners (a lane's cuBLAS workspace): bytes held, and the task they are charged to
    /// while it uses the lane (else they count outside tasks).
    lanes: HashMap<OwnerId, LaneCharge>,
}

#[derive(Debug, Clone, Default)]
struct LaneCharge {
    bytes: u64,
    bound: Option<OwnerId>,
}

impl Ledger {
    /// A ledger whose default pool holds all of `capacity`.
    pub fn new(capacity: u64) -> Self {
        Ledger {
            capacity,
            pools: BTreeMap::from([(None, capacity)]),
            entries: HashMap::new(),
            outside: 0,
            lanes: HashMap::new(),
        }
    }

    /// The device capacity (the sum of the pools' quotas).
    #[cfg(test)]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Sets the pools' quotas (the default pool is `None`); their sum becomes the device
    /// capacity. Pools that are not named are dropped, and what is still charged in them
    /// (buffers of ended tasks) counts in the default pool from then on.
    pub fn set_pools(&mut self, pools: impl IntoIterator<Item = (Option<String>, u64)>) {
        self.pools = pools.into_iter().collect();
        self.pools.entry(None).or_insert(0);
        self.capacity = self.pools.values().sum();
        for e in self.entries.values_mut() {
            if !self.pools.contains_key(&e.spec.pool) {
                e.spec.pool = None;
            }
        }
    }

    /// Starts charging a task's allocations to `owner`. An owner that is still running is an
    /// error (nothing changes); an ended owner's remaining buffers stay charged beside it.
    pub fn open(&mut self, owner: &OwnerId, spec: EntrySpec) -> Result<()> {
        if let Some(e) = self.entries.get(owner) {
            if e.running || e.in_use > 0 {
                return Err(Error::internal(
                    "opening a ledger entry",
                    format!("owner `{owner}` is already charged ({} bytes)", e.in_use),
                ));
            }
        }
        self.entries.insert(
            owner.clone(),
            Entry {
                spec,
                in_use: 0,
                peak: 0,
                running: true,
                stopped: false,
                quarantined: None,
                last_refusal: None,
            },
        );
        Ok(())
    }

    /// The task of `owner` ended: its commitment returns; bytes it still holds stay charged
    /// to it until released. Returns those bytes.
    pub fn close(&mut self, owner: &OwnerId) -> u64 {
        let Some(e) = self.entries.get_mut(owner) else {
            return 0;
        };
        e.running = false;
        e.quarantined = None;
        let left = e.in_use;
        if left == 0 {
            self.entries.remove(owner);
        }
        left
    }

    /// Marks `owner`'s task as being stopped: its further allocations are refused with
    /// [`Refusal::Stopped`].
    pub fn stop(&mut self, owner: &OwnerId) {
        if let Some(e) = self.entries.get_mut(owner) {
            e.stopped = true;
        }
    }

    /// `owner`'s task is quarantined (its GPU work did not end): its commitment stays, and so
    /// do `held` bytes (what the allocator keeps out of use on its streams) if they are more;
    /// it is no eviction victim. [`close`](Self::close) ends it once the work has ended.
    pub fn quarantine(&mut self, owner: &OwnerId, held: u64) {
        if let Some(e) = self.entries.get_mut(owner) {
            e.stopped = true;
            e.quarantined = Some(held);
        }
    }

    /// `owner`'s quarantine and the bytes it keeps, if it is quarantined.
    pub fn quarantined(&self, owner: &OwnerId) -> Option<u64> {
        let e = self.entries.get(owner)?;
        e.quarantined
            .map(|held| e.spec.request.max(e.in_use).max(held))
    }

    fn pool_cap(&self, pool: &Option<String>) -> u64 {
        self.pools.get(pool).copied().unwrap_or(0)
    }

    fn pool_footprint(&self, pool: &Option<String>) -> u64 {
        let tasks: u64 = self
            .entries
            .values()
            .filter(|e| &e.spec.pool == pool)
            .map(Entry::footprint)
            .sum();
        tasks + if pool.is_none() { self.outside } else { 0 }
    }

    fn device_footprint(&self) -> u64 {
        self.entries.values().map(Entry::footprint).sum::<u64>() + self.outside
    }

    /// Bytes free above requests for an allocation in `pool`: what both the pool and the
    /// device have left.
    pub fn available(&self, pool: &Option<String>) -> u64 {
        let in_pool = self
            .pool_cap(pool)
            .saturating_sub(self.pool_footprint(pool));
        let on_device = self.capacity.saturating_sub(self.device_footprint());
        in_pool.min(on_device)
    }

    /// Reserves `bytes` for `owner`, or refuses (nothing is charged then). Owners that are no
    /// task are charged in the default pool and refused only under pressure.
    pub fn charge(&mut self, owner: &OwnerId, bytes: u64) -> std::result::Result<(), Refusal> {
        if let Some(lane) = self.lanes.get(owner) {
            if let Some(task) = lane.bound.clone() {
                self.charge(&task, bytes)?;
                if let Some(l) = self.lanes.get_mut(owner) {
                    l.bytes += bytes;
                }
                return Ok(());
            }
        }
        let Some(e) = self.entries.get(owner) else {
            let available = self.available(&None);
            if bytes > available {
                return Err(Refusal::Pressure {
                    requested: bytes,
                    available,
                });
            }
            self.outside += bytes;
            if let Some(l) = self.lanes.get_mut(owner) {
                l.bytes += bytes;
            }
            return Ok(());
        };
        let refusal = if !e.running {
            Some(Refusal::Ended)
        } else if e.stopped {
            Some(Refusal::Stopped)
        } else if e.in_use.saturating_add(bytes) > e.spec.limit {
            Some(Refusal::Quota {
                in_use: e.in_use,
                requested: bytes,
                limit: e.spec.limit,
            })
        } else {
            let new_use = e.in_use + bytes;
            let extra = new_use.saturating_sub(e.spec.request) - e.over();
            let available = if extra > 0 {
                self.available(&e.spec.pool)
            } else {
                0
            };
            (extra > available).then_some(Refusal::Pressure {
                requested: bytes,
                available,
            })
        };
        let e = self.entries.get_mut(owner).expect("looked up above");
        match refusal {
            Some(r) => {
                e.last_refusal = Some(r.clone());
                Err(r)
            }
            None => {
                e.in_use += bytes;
                e.peak = e.peak.max(e.in_use);
                Ok(())
            }
        }
    }

    /// Returns `bytes` an earlier [`charge`](Self::charge) reserved for `owner`. An ended
    /// task's entry goes once nothing is left.
    pub fn release(&mut self, owner: &OwnerId, bytes: u64) {
        if let Some(l) = self.lanes.get_mut(owner) {
            l.bytes = l.bytes.saturating_sub(bytes);
            let bound = l.bound.clone();
            if l.bytes == 0 && bound.is_none() {
                self.lanes.remove(owner);
            }
            match bound {
                Some(task) => self.release(&task, bytes),
                None => self.outside = self.outside.saturating_sub(bytes),
            }
            return;
        }
        match self.entries.get_mut(owner) {
            Some(e) => {
                e.in_use = e.in_use.saturating_sub(bytes);
                if !e.running && e.in_use == 0 {
                    self.entries.remove(owner);
                }
            }
            None => self.outside = self.outside.saturating_sub(bytes),
        }
    }

    /// Charges lane `lane`'s memory (its cuBLAS workspace, allocated under the lane's owner)
    /// to `task` while the task uses it: what the lane holds now moves from outside tasks to
    /// the task, checked like an allocation of the task (refused: nothing changes), and the
    /// lane's later allocations and frees go to the task until [`unbind_lane`]
    /// (Self::unbind_lane).
    pub fn bind_lane(
        &mut self,
        lane: &OwnerId,
        task: &OwnerId,
    ) -> std::result::Result<(), Refusal> {
        let l = self.lanes.entry(lane.clone()).or_default();
        match &l.bound {
            Some(t) if t == task => return Ok(()),
            Some(_) => {
                return Err(Refusal::Pressure {
                    requested: l.bytes,
                    available: 0,
                })
            }
            None => {}
        }
        let bytes = l.bytes;
        self.outside = self.outside.saturating_sub(bytes);
        if let Err(r) = self.charge(task, bytes) {
            self.outside += bytes;
            if bytes == 0 {
                self.lanes.remove(lane);
            }
            return Err(r);
        }
        if let Some(l) = self.lanes.get_mut(lane) {
            l.bound = Some(task.clone());
        }
        Ok(())
    }

    /// The task using lane `lane` is done with it: the lane's memory moves back from the task
    /// to outside tasks.
    pub fn unbind_lane(&mut self, lane: &OwnerId) {
        let Some(l) = self.lanes.get_mut(lane) else {
            return;
        };
        let (bytes, bound) = (l.bytes, l.bound.take());
        if bytes == 0 {
            self.lanes.remove(lane);
        }
        if let Some(task) = bound {
            self.release(&task, bytes);
            self.outside += bytes;
        }
    }

    /// The last refusal of `owner`'s allocations, taken (for a structured error).
    pub fn take_refusal(&mut self, owner: &OwnerId) -> Option<Refusal> {
        self.entries.get_mut(owner)?.last_refusal.take()
    }

    /// Bytes `owner` holds now and at most.
    pub fn usage(&self, owner: &OwnerId) -> Option<(u64, u64)> {
        self.entries.get(owner).map(|e| (e.in_use, e.peak))
    }

    /// Bytes charged outside tasks.
    pub fn outside(&self) -> u64 {
        self.outside
    }

    /// A pool's memory.
    pub fn pool(&self, pool: &Option<String>) -> PoolMemory {
        let mut m = PoolMemory {
            capacity: self.pool_cap(pool),
            footprint: self.pool_footprint(pool),
            ..Default::default()
        };
        for e in self.entries.values().filter(|e| &e.spec.pool == pool) {
            m.in_use += e.in_use;
            if !e.running {
                m.orphaned += e.in_use;
            }
        }
        if pool.is_none() {
            m.in_use += self.outside;
        }
        m
    }

    /// Bytes by which `owner`'s running task does not fit beside the others (in its pool or
    /// on the device); 0 when it fits.
    pub fn shortfall(&self, owner: &OwnerId) -> u64 {
        let Some(me) = self.entries.get(owner) else {
            return 0;
        };
        let pool = &me.spec.pool;
        let in_pool = self
            .pool_footprint(pool)
            .saturating_sub(self.pool_cap(pool));
        let on_device = self.device_footprint().saturating_sub(self.capacity);
        in_pool.max(on_device)
    }

    /// Who holds the memory `owner`'s starting task lacks: every other charge in its pool (and,
    /// when the device is short, in every pool), with its bytes (a running task's footprint,
    /// an ended task's returned buffers, allocations outside tasks), largest first.
    pub fn holders(&self, owner: &OwnerId) -> Vec<MemoryHolder> {
        let Some(me) = self.entries.get(owner) else {
            return Vec::new();
        };
        let pool = &me.spec.pool;
        let device_short = self.device_footprint() > self.capacity;
        let mut out: Vec<MemoryHolder> = self
            .entries
            .iter()
            .filter(|(o, e)| *o != owner && (device_short || &e.spec.pool == pool))
            .filter(|(_, e)| e.footprint() > 0)
            .map(|(_, e)| MemoryHolder {
                task: Some(e.spec.name.clone()),
                id: Some(e.spec.id),
                bytes: e.footprint(),
                kind: match (e.running, e.stopped) {
                    _ if e.running && e.quarantined.is_some() => HolderKind::Quarantined,
                    (false, _) => HolderKind::Ended,
                    (true, true) => HolderKind::Stopping,
                    (true, false) => HolderKind::Running,
                },
            })
            .collect();
        if self.outside > 0 && (device_short || pool.is_none()) {
            out.push(MemoryHolder {
                task: None,
                id: None,
                bytes: self.outside,
                kind: HolderKind::OutsideTasks,
            });
        }
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.id.cmp(&b.id)));
        out
    }

    /// The fewest further victims whose eviction removes `owner`'s shortfall (tasks already
    /// being stopped are counted as released first), in eviction order. Empty when it fits or
    /// when nobody can be evicted (then it waits for memory to be freed).
    pub fn plan_eviction(&self, owner: &OwnerId) -> Vec<TaskId> {
        let Some(me) = self.entries.get(owner) else {
            return Vec::new();
        };
        let pool = &me.spec.pool;
        let mut pool_over = self
            .pool_footprint(pool)
            .saturating_sub(self.pool_cap(pool));
        let mut dev_over = self.device_footprint().saturating_sub(self.capacity);
        let over_quota = |p: &Option<String>| self.pool_footprint(p) > self.pool_cap(p);
        let mut candidates: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|(o, e)| *o != owner && e.evictable())
            .map(|(_, e)| e)
            .collect();
        candidates.sort_by_key(|e| {
            (
                e.stopped as u8 ^ 1, // already stopping: counted first
                !over_quota(&e.spec.pool) as u8,
                if e.spec.qos == QosClass::BestEffort {
                    0
                } else {
                    1
                },
                e.spec.priority as i64,
                std::cmp::Reverse(e.over()),
                std::cmp::Reverse(e.spec.started),
                e.spec.id,
            )
        });
        let mut victims = Vec::new();
        for e in candidates {
            let same_pool = &e.spec.pool == pool;
            let helps = (pool_over > 0 && same_pool) || dev_over > 0;
            if !helps {
                continue;
            }
            let gain = e.footprint();
            if same_pool {
                pool_over = pool_over.saturating_sub(gain);
            }
            dev_over = dev_over.saturating_sub(gain);
            if !e.stopped {
                victims.push(e.spec.id);
            }
            if pool_over == 0 && dev_over == 0 {
                break;
            }
        }
        victims
    }

    /// Checks what the charge rules keep: no running task above its limit, and the bytes
    /// charged in all (tasks, ended tasks' buffers, outside tasks) within the device capacity.
    /// The second holds as long as admission keeps each pool's commitments within its quota
    /// and a starting task allocates only once its [`shortfall`](Self::shortfall) is zero (the
    /// scheduler's rules). Returns the first violation.
    #[cfg(test)]
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        for (o, e) in &self.entries {
            if e.running && e.in_use > e.spec.limit {
                return Err(format!("`{o}` holds {} > limit {}", e.in_use, e.spec.limit));
            }
        }
        let charged = self.entries.values().map(|e| e.in_use).sum::<u64>() + self.outside;
        if charged > self.capacity {
            return Err(format!(
                "{charged} bytes charged > device capacity {}",
                self.capacity
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
