//! The scheduler's decisions as pure, deterministic logic: admission, partitions, the queue,
//! SM-group assignment and lending. No GPU, no clock (time is passed in), no threads: the
//! runtime ([`crate::Scheduler`]) drives it under one lock, and the tests drive it directly.
//!
//! # Rules
//! - **Admission** compares the *sum of requests* of running tasks plus the new request with
//!   the pool's capacity (memory: its quota, which for the default pool is device memory minus
//!   headroom minus partition quotas; compute: its SM groups) — never current usage, as in
//!   Kubernetes. A request that can never fit its pool is rejected with the resource, the
//!   amount requested and the amount available.
//! - **Queue order** within a pool: priority (larger first), then earliest deadline (tasks
//!   with a deadline before those without), then submission order (FIFO). Pools are served
//!   by priority band (larger first). A task still queued at its deadline is rejected.
//! - **Backfill and anti-starvation**: when the task at the head cannot start, tasks behind
//!   it that fit may start ahead of it ("jump" it). Every time a task that was behind a queued
//!   task T in the queue order, and submitted after it, starts while T waits in the same pool,
//!   T's `bypassed` count grows. Once it reaches
//!   `max_bypass` (default 4), T is *starving*: no task submitted after T starts in that pool
//!   until T has started. Since running tasks finish and T's request fits the pool (else it was
//!   rejected), T starts after at most `max_bypass` jumps plus the tasks submitted before it
//!   and tasks of strictly higher priority (priority is strict: a higher-priority task is
//!   ahead in the queue and does not count as a jump).
//! - **SM groups**: a compute request rounds to whole groups, at least one for any positive
//!   share (see [`SmLayout::groups_for_request`]); a task gets its own groups for its lifetime.
//!   A limit below one group is enforced by pacing within the task's one group
//!   ([`ComputeGrant::pace`]). Without green contexts the groups are virtual shares of GPU
//!   time ([`SmLayout::pacing`]) and the same rules admit and lend them. Groups of a pool that no running task owns
//!   are *lent* to Burstable and BestEffort tasks (priority order, then Burstable before
//!   BestEffort, then submission order) up to their compute limit; a new task's groups are
//!   taken back from borrowers, who move off them at their next kernel launch.

use crate::error::{Error, Resource, Result};
use crate::partitions::Partition;
use crate::sm::{ComputeGrant, GroupSet, Mechanism, SmLayout};
use crate::spec::{QosClass, ResolvedSpec};
use std::collections::BTreeMap;
use std::time::Duration;

/// A task's identity inside the scheduler.
pub type TaskId = u64;

/// Capacity and policy knobs of a [`Planner`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlannerConfig {
    /// Memory that requests may sum to (device memory minus headroom).
    pub memory_capacity: u64,
    /// The SM groups.
    pub layout: SmLayout,
    /// Tasks running at once (the worker pool's size).
    pub max_running: usize,
    /// Tasks waiting at once; more are rejected.
    pub max_queue: usize,
    /// Jumps a queued task tolerates before it blocks later tasks (see the module docs).
    pub max_bypass: u32,
}

/// A partition (or the default pool) as it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInfo {
    /// Name (`None`: the default pool, the unpartitioned rest).
    pub name: Option<String>,
    /// Memory quota in bytes.
    pub memory_quota: u64,
    /// Sum of memory requests of its running tasks.
    pub memory_committed: u64,
    /// Its SM groups.
    pub groups: GroupSet,
    /// SMs in those groups.
    pub sms: u32,
    /// Groups owned by running tasks (quarantined ones included).
    pub groups_assigned: GroupSet,
    /// Groups out of service: those of quarantined tasks (their own and the lent ones their
    /// work may still occupy), given to no task until that work ends.
    pub groups_quarantined: GroupSet,
    /// Priority band.
    pub priority_band: i32,
    /// Running tasks.
    pub running: usize,
    /// Queued tasks.
    pub queued: usize,
}

/// What the scheduler gives a task when it starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    /// Bytes committed (its memory request).
    pub memory_committed: u64,
    /// Its effective memory limit (its limit, capped by its pool's quota).
    pub memory_limit: u64,
    /// Its compute.
    pub compute: ComputeGrant,
}

/// The admission result of a submission, decided at once.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Admitted and started (or starting): what it was given.
    Admitted(Grant),
    /// Waiting; `position` 0 is next in its pool.
    Queued {
        /// Place in its pool's queue order.
        position: usize,
    },
    /// Never admitted.
    Rejected {
        /// Which resource.
        resource: Resource,
        /// How much was asked.
        requested: u64,
        /// How much its pool can ever give.
        available: u64,
    },
}

/// Why a queued task was rejected inside [`Planner::schedule`].
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// Its start-by deadline passed while it was queued.
    DeadlinePassed {
        /// The deadline, counted from submission.
        deadline: Duration,
    },
    /// Its pool can no longer ever give what it asks (the partition was resized).
    PoolTooSmall {
        /// Which resource.
        resource: Resource,
        /// How much it asks.
        requested: u64,
        /// How much the pool has.
        available: u64,
    },
}

/// Something that happened to a task inside [`Planner::schedule`].
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A queued task started.
    Started(TaskId, Grant),
    /// A queued task was rejected.
    Rejected(TaskId, Rejection),
}

#[derive(Debug, Clone)]
enum Phase {
    Queued {
        bypassed: u32,
    },
    Running {
        own: GroupSet,
        lent: GroupSet,
        #[cfg_attr(not(test), allow(dead_code))] // read by the tests (Planner::grant)
        grant: Grant,
    },
    /// Its closure has returned but its GPU work has not ended (a kernel that does not end):
    /// it keeps its own groups, the other groups its work may still occupy (`held`: lent to
    /// it, possibly owned by another task since) and its memory commitment, but no worker
    /// slot, and it borrows nothing.
    Quarantined {
        own: GroupSet,
        held: GroupSet,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    spec: ResolvedSpec,
    pool: Option<String>,
    seq: u64,
    groups_needed: u32,
    deadline_at: Option<u64>,
    phase: Phase,
}

/// A queued task's place in the queue order (see [`Planner::order_key`]).
type OrderKey = (u8, i64, u64, u64, u64);

#[derive(Debug, Clone)]
struct Pool {
    memory_quota: u64,
    groups: GroupSet,
    band: i32,
    committed: u64,
    assigned: GroupSet,
    /// Groups besides the owners' that quarantined work may occupy: the union of the
    /// quarantined tasks' `held` sets (they may overlap each other and groups that running
    /// tasks own). No task is given them, nor are they lent, until that work ends.
    held: GroupSet,
    /// Queued tasks with their order keys, kept sorted by key (the queue order).
    queue: Vec<(OrderKey, TaskId)>,
}

impl Pool {
    /// Groups neither owned by a task nor held by quarantined work.
    fn free_groups(&self) -> GroupSet {
        self.groups.minus(self.assigned).minus(self.held)
    }
}

/// The deterministic core of the scheduler. See the module docs for the rules.
#[derive(Debug, Clone)]
pub struct Planner {
    cfg: PlannerConfig,
    pools: BTreeMap<Option<String>, Pool>,
    tasks: BTreeMap<TaskId, Entry>,
    seq: u64,
    running: usize,
    lend_changes: Vec<(TaskId, GroupSet)>,
    /// Running tasks that may borrow groups (not Guaranteed); none: nothing to lend.
    borrowers: usize,
    /// No queued task's deadline is earlier (a lower bound; `u64::MAX`: none).
    next_deadline: u64,
    /// Pools changed since queued tasks were last checked against them.
    recheck: bool,
    /// Quarantined tasks (none: no pool holds groups out of service but `inherited`).
    quarantined: usize,
    /// Groups that work an earlier scheduler of the device left running may occupy (see
    /// [`set_inherited`](Self::set_inherited)).
    inherited: GroupSet,
}

impl Planner {
    /// A planner whose default pool holds everything.
    pub fn new(cfg: PlannerConfig) -> Self {
        let mut pools = BTreeMap::new();
        pools.insert(
            None,
            Pool {
                memory_quota: cfg.memory_capacity,
                groups: cfg.layout.all(),
                band: 0,
                committed: 0,
                assigned: GroupSet::EMPTY,
                held: GroupSet::EMPTY,
                queue: Vec::new(),
            },
        );
        Planner {
            cfg,
            pools,
            tasks: BTreeMap::new(),
            seq: 0,
            running: 0,
            lend_changes: Vec::new(),
            borrowers: 0,
            next_deadline: u64::MAX,
            recheck: false,
            quarantined: 0,
            inherited: GroupSet::EMPTY,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PlannerConfig {
        &self.cfg
    }

    /// Tasks holding a worker slot now.
    pub fn running_count(&self) -> usize {
        self.running
    }

    fn pool_names(&self) -> Vec<String> {
        self.pools.keys().flatten().cloned().collect()
    }

    fn pool_key(&self, name: &Option<String>) -> Result<Option<String>> {
        if self.pools.contains_key(name) {
            Ok(name.clone())
        } else {
            Err(Error::UnknownPartition {
                name: name.clone().unwrap_or_default(),
                known: self.pool_names(),
            })
        }
    }

    /// Submits task `id` at time `now` (nanoseconds on any monotonic clock). Errors (unknown
    /// partition, duplicate id) change nothing.
    ///
    /// Returns the decision for this task and any events for *other* tasks that the same
    /// scheduling pass produced (queued tasks whose deadline passed meanwhile).
    pub fn submit(
        &mut self,
        id: TaskId,
        spec: ResolvedSpec,
        now: u64,
    ) -> Result<(Admission, Vec<Event>)> {
        if self.tasks.contains_key(&id) {
            return Err(Error::invalid("task id", id, "already in use"));
        }
        let pool_key = self.pool_key(&spec.partition)?;
        let pool = &self.pools[&pool_key];
        let groups_needed = self.cfg.layout.groups_for_request(spec.compute_request);
        if spec.memory_request > pool.memory_quota {
            return Ok((
                Admission::Rejected {
                    resource: Resource::Memory,
                    requested: spec.memory_request,
                    available: pool.memory_quota,
                },
                Vec::new(),
            ));
        }
        if groups_needed > pool.groups.len() {
            return Ok((
                Admission::Rejected {
                    resource: Resource::Compute,
                    requested: groups_needed as u64,
                    available: pool.groups.len() as u64,
                },
                Vec::new(),
            ));
        }
        let queued: usize = self.pools.values().map(|p| p.queue.len()).sum();
        if queued >= self.cfg.max_queue && !self.fits(&pool_key, spec.memory_request, groups_needed)
        {
            return Ok((
                Admission::Rejected {
                    resource: Resource::QueueSlots,
                    requested: 1,
                    available: 0,
                },
                Vec::new(),
            ));
        }
        self.seq += 1;
        let deadline_at = spec
            .deadline
            .map(|d| now.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64));
        self.tasks.insert(
            id,
            Entry {
                spec,
                pool: pool_key.clone(),
                seq: self.seq,
                groups_needed,
                deadline_at,
                phase: Phase::Queued { bypassed: 0 },
            },
        );
        if let Some(d) = deadline_at {
            self.next_deadline = self.next_deadline.min(d);
        }
        let key = self.order_key(id);
        let queue = &mut self.pools.get_mut(&pool_key).expect("pool exists").queue;
        let at = queue.partition_point(|(k, _)| *k < key);
        queue.insert(at, (key, id));
        let mut events = self.schedule(now);
        let mine = events.iter().position(|e| match e {
            Event::Started(t, _) | Event::Rejected(t, _) => *t == id,
        });
        let decision = match mine.map(|i| events.remove(i)) {
            Some(Event::Started(_, g)) => Admission::Admitted(g),
            // Rejected in the same pass (a deadline that has already passed).
            Some(Event::Rejected(
                _,
                Rejection::PoolTooSmall {
                    resource,
                    requested,
                    available,
                },
            )) => Admission::Rejected {
                resource,
                requested,
                available,
            },
            Some(Event::Rejected(_, Rejection::DeadlinePassed { .. })) => Admission::Rejected {
                resource: Resource::QueueSlots,
                requested: 1,
                available: 0,
            },
            None => Admission::Queued {
                position: self.queue_position(id).unwrap_or(0),
            },
        };
        Ok((decision, events))
    }

    fn fits(&self, pool_key: &Option<String>, memory: u64, groups: u32) -> bool {
        let pool = &self.pools[pool_key];
        self.running < self.cfg.max_running
            && pool.committed + memory <= pool.memory_quota
            && pool.free_groups().len() >= groups
    }

    /// The queue order: starving tasks first (in submission order), then priority (larger
    /// first), deadline (earliest first, tasks with one before those without), submission.
    fn order_key(&self, id: TaskId) -> OrderKey {
        let e = &self.tasks[&id];
        let starving =
            matches!(e.phase, Phase::Queued { bypassed } if bypassed >= self.cfg.max_bypass);
        if starving {
            (0, 0, 0, 0, e.seq)
        } else {
            (
                1,
                -(e.spec.priority as i64),
                if e.deadline_at.is_some() { 0 } else { 1 },
                e.deadline_at.unwrap_or(0),
                e.seq,
            )
        }
    }

    fn sorted_queue(&self, pool_key: &Option<String>) -> Vec<TaskId> {
        self.pools[pool_key]
            .queue
            .iter()
            .map(|&(_, id)| id)
            .collect()
    }

    /// A queued task's place in its pool's order (0 = next).
    pub fn queue_position(&self, id: TaskId) -> Option<usize> {
        let e = self.tasks.get(&id)?;
        if !matches!(e.phase, Phase::Queued { .. }) {
            return None;
        }
        self.pools[&e.pool].queue.iter().position(|&(_, t)| t == id)
    }

    /// Starts whatever can start and rejects queued tasks whose deadline has passed (or that
    /// can no longer ever fit their pool). Call after every change; [`submit`](Self::submit),
    /// [`finish`](Self::finish) and [`cancel`](Self::cancel) do.
    pub fn schedule(&mut self, now: u64) -> Vec<Event> {
        let mut events = Vec::new();
        // Queued tasks passed the pool checks at submit and at the last check; only a pool
        // change or a passed deadline can reject one now.
        let check = self.recheck || now >= self.next_deadline;
        if check {
            self.next_deadline = u64::MAX;
        }
        if self.pools.len() == 1 {
            self.schedule_pool(&None, now, check, &mut events);
        } else {
            let mut order: Vec<Option<String>> = self.pools.keys().cloned().collect();
            order.sort_by_key(|k| -(self.pools[k].band as i64));
            for key in order {
                self.schedule_pool(&key, now, check, &mut events);
            }
        }
        if check {
            self.recheck = false;
        }
        let changed = self.lend();
        self.lend_changes.extend(changed);
        events
    }

    fn schedule_pool(
        &mut self,
        key: &Option<String>,
        now: u64,
        check: bool,
        events: &mut Vec<Event>,
    ) {
        if self.pools[key].queue.is_empty() {
            return;
        }
        if check {
            // Deadlines and impossible requests, in submission order.
            let mut ids: Vec<(u64, TaskId)> = self.pools[key]
                .queue
                .iter()
                .map(|&(_, id)| (self.tasks[&id].seq, id))
                .collect();
            ids.sort_unstable();
            for (_, id) in ids {
                let e = &self.tasks[&id];
                let pool = &self.pools[key];
                let reason = if e.deadline_at.is_some_and(|d| now >= d) {
                    Some(Rejection::DeadlinePassed {
                        deadline: e.spec.deadline.unwrap_or_default(),
                    })
                } else if e.spec.memory_request > pool.memory_quota {
                    Some(Rejection::PoolTooSmall {
                        resource: Resource::Memory,
                        requested: e.spec.memory_request,
                        available: pool.memory_quota,
                    })
                } else if e.groups_needed > pool.groups.len() {
                    Some(Rejection::PoolTooSmall {
                        resource: Resource::Compute,
                        requested: e.groups_needed as u64,
                        available: pool.groups.len() as u64,
                    })
                } else {
                    None
                };
                match reason {
                    Some(r) => {
                        self.remove(id);
                        events.push(Event::Rejected(id, r));
                    }
                    None => {
                        if let Some(d) = e.deadline_at {
                            self.next_deadline = self.next_deadline.min(d);
                        }
                    }
                }
            }
        }
        // Nothing starts while every worker slot is taken.
        if self.running >= self.cfg.max_running {
            return;
        }
        let queue = self.sorted_queue(key);
        let mut barrier: Option<u64> = None;
        for id in queue {
            if self.running >= self.cfg.max_running {
                break;
            }
            let (seq, mem, groups, starving) = {
                let e = &self.tasks[&id];
                let starving = matches!(e.phase, Phase::Queued { bypassed } if bypassed >= self.cfg.max_bypass);
                (e.seq, e.spec.memory_request, e.groups_needed, starving)
            };
            let allowed = barrier.is_none_or(|b| seq < b);
            if allowed && self.fits(key, mem, groups) {
                let key_of_started = self.order_key(id);
                let grant = self.start(id);
                events.push(Event::Started(id, grant));
                // Every task still queued in this pool that was ahead of it in the queue
                // order (a prefix of the sorted queue), and submitted earlier, was jumped.
                let ahead = self.pools[key]
                    .queue
                    .partition_point(|(k, _)| *k < key_of_started);
                let max_bypass = self.cfg.max_bypass;
                let mut now_starving = false;
                for i in 0..ahead {
                    let other = self.pools[key].queue[i].1;
                    let o = self.tasks.get_mut(&other).expect("queued task exists");
                    if o.seq < seq {
                        if let Phase::Queued { bypassed } = &mut o.phase {
                            now_starving |= *bypassed < max_bypass && *bypassed + 1 >= max_bypass;
                            *bypassed += 1;
                        }
                    }
                }
                if now_starving {
                    self.rekey(key);
                }
            } else if starving && barrier.is_none() {
                barrier = Some(seq);
            }
        }
    }

    /// Recomputes the order keys of a pool's queue and sorts it again.
    fn rekey(&mut self, key: &Option<String>) {
        let mut queue = std::mem::take(&mut self.pools.get_mut(key).expect("pool exists").queue);
        for (k, id) in queue.iter_mut() {
            *k = self.order_key(*id);
        }
        queue.sort_unstable();
        self.pools.get_mut(key).expect("pool exists").queue = queue;
    }

    /// Lending changes since the last call: tasks whose usable groups (own + lent) changed,
    /// with the new sets (the runtime publishes these to the tasks).
    pub fn take_lend_changes(&mut self) -> Vec<(TaskId, GroupSet)> {
        std::mem::take(&mut self.lend_changes)
    }

    fn start(&mut self, id: TaskId) -> Grant {
        let layout = self.cfg.layout;
        let (pool_key, mem, groups_needed, share, limit, compute_limit) = {
            let e = &self.tasks[&id];
            (
                e.pool.clone(),
                e.spec.memory_request,
                e.groups_needed,
                e.spec.compute_request,
                e.spec.memory_limit,
                e.spec.compute_limit,
            )
        };
        // Prefer groups nobody borrows, so fewer borrowers have to move.
        let lent_now = self.lent_in_pool(&pool_key);
        let pool = self.pools.get_mut(&pool_key).expect("pool exists");
        let free = pool.free_groups();
        let calm = free.minus(lent_now);
        let mut own = calm.take(groups_needed);
        own = own.union(free.minus(own).take(groups_needed - own.len()));
        pool.assigned = pool.assigned.union(own);
        pool.committed += mem;
        let pool_quota = pool.memory_quota;
        pool.queue.retain(|&(_, t)| t != id);
        self.running += 1;
        let borrower = self.tasks[&id].spec.qos != QosClass::Guaranteed;
        self.borrowers += borrower as usize;
        let mechanism = if !layout.green {
            Mechanism::Pacing
        } else if groups_needed > 0 {
            Mechanism::GreenContext
        } else {
            Mechanism::Floor
        };
        // A limit below one group: paced within its own group(s) to the limit.
        let pace = match compute_limit {
            Some(l) if layout.green && groups_needed > 0 && layout.groups_for_share(l) == 0 => {
                Some((l * layout.total_sms as f64 / layout.sms(own.len()).max(1) as f64).min(1.0))
            }
            _ => None,
        };
        let grant = Grant {
            memory_committed: mem,
            memory_limit: limit.unwrap_or(u64::MAX).min(pool_quota),
            compute: ComputeGrant {
                requested_share: share,
                groups: own,
                sms: layout.sms(own.len()),
                granted_share: layout.share_of(own.len()),
                mechanism,
                pace,
            },
        };
        self.tasks.get_mut(&id).expect("task exists").phase = Phase::Running {
            own,
            lent: GroupSet::EMPTY,
            grant,
        };
        self.lend_changes.push((id, own));
        grant
    }

    fn lent_in_pool(&self, pool_key: &Option<String>) -> GroupSet {
        if self.borrowers == 0 {
            // Only running borrowers hold lent groups.
            return GroupSet::EMPTY;
        }
        self.tasks
            .values()
            .filter(|e| &e.pool == pool_key)
            .fold(GroupSet::EMPTY, |acc, e| match e.phase {
                Phase::Running { lent, .. } => acc.union(lent),
                _ => acc,
            })
    }

    /// Recomputes which idle groups are lent to whom. Returns the tasks whose set of usable
    /// groups (own + lent) changed, with the new set.
    pub fn lend(&mut self) -> Vec<(TaskId, GroupSet)> {
        let layout = self.cfg.layout;
        let mut changed = Vec::new();
        if self.borrowers == 0 {
            // Guaranteed tasks never borrow: nobody to lend to, nothing lent.
            return changed;
        }
        let keys: Vec<Option<String>> = self.pools.keys().cloned().collect();
        for key in keys {
            let pool = &self.pools[&key];
            let mut idle = pool.free_groups();
            let pool_groups = pool.groups.len();
            let mut borrowers: Vec<(TaskId, i64, u8, u64, u32, GroupSet)> = self
                .tasks
                .iter()
                .filter(|(_, e)| e.pool == key && e.spec.qos != QosClass::Guaranteed)
                .filter_map(|(&id, e)| match e.phase {
                    Phase::Running { own, lent, .. } => {
                        let cap = match e.spec.compute_limit {
                            Some(l) => layout.groups_for_share(l).max(own.len()),
                            None => pool_groups,
                        };
                        let room = cap.saturating_sub(own.len());
                        let class = if e.spec.qos == QosClass::Burstable {
                            0
                        } else {
                            1
                        };
                        Some((id, -(e.spec.priority as i64), class, e.seq, room, lent))
                    }
                    _ => None,
                })
                .collect();
            borrowers.sort_by_key(|b| (b.1, b.2, b.3));
            // Keep what each borrower already has where still idle, then hand out the rest.
            let mut next: Vec<GroupSet> = Vec::with_capacity(borrowers.len());
            for b in &borrowers {
                let keep = b.5.intersect(idle).take(b.4);
                idle = idle.minus(keep);
                next.push(keep);
            }
            for (i, b) in borrowers.iter().enumerate() {
                let more = idle.take(b.4 - next[i].len());
                idle = idle.minus(more);
                next[i] = next[i].union(more);
            }
            for (i, b) in borrowers.iter().enumerate() {
                let e = self.tasks.get_mut(&b.0).expect("task exists");
                if let Phase::Running { own, lent, .. } = &mut e.phase {
                    if *lent != next[i] {
                        *lent = next[i];
                        changed.push((b.0, own.union(next[i])));
                    }
                }
            }
        }
        changed
    }

    fn remove(&mut self, id: TaskId) -> Option<Entry> {
        let e = self.tasks.remove(&id)?;
        let pool = self.pools.get_mut(&e.pool).expect("pool exists");
        match e.phase {
            Phase::Queued { .. } => pool.queue.retain(|&(_, t)| t != id),
            Phase::Running { own, .. } => {
                pool.assigned = pool.assigned.minus(own);
                pool.committed -= e.spec.memory_request;
                self.running -= 1;
                self.borrowers -= (e.spec.qos != QosClass::Guaranteed) as usize;
            }
            Phase::Quarantined { own, .. } => {
                pool.assigned = pool.assigned.minus(own);
                pool.committed -= e.spec.memory_request;
                self.quarantined -= 1;
                let key = e.pool.clone();
                self.recompute_held(&key);
            }
        }
        Some(e)
    }

    /// Recomputes a pool's `held` groups from its quarantined tasks and the inherited groups.
    fn recompute_held(&mut self, key: &Option<String>) {
        let held =
            self.tasks
                .values()
                .filter(|e| &e.pool == key)
                .fold(GroupSet::EMPTY, |acc, e| match e.phase {
                    Phase::Quarantined { held, .. } => acc.union(held),
                    _ => acc,
                });
        if let Some(pool) = self.pools.get_mut(key) {
            pool.held = held.union(self.inherited.intersect(pool.groups));
        }
    }

    /// Sets the groups that work an earlier scheduler of the device left running may occupy
    /// (a kernel that never ended, quarantined there, whose SMs are still busy): like a
    /// quarantined task's, they are given to no task and lent to none while set. Setting
    /// fewer starts the queued tasks that fit.
    pub fn set_inherited(&mut self, groups: GroupSet, now: u64) -> Vec<Event> {
        let groups = groups.intersect(self.cfg.layout.all());
        if groups == self.inherited {
            return Vec::new();
        }
        self.inherited = groups;
        let keys: Vec<Option<String>> = self.pools.keys().cloned().collect();
        for k in &keys {
            self.recompute_held(k);
        }
        self.recheck = true;
        self.schedule(now)
    }

    /// The groups set by [`set_inherited`](Self::set_inherited).
    pub fn inherited(&self) -> GroupSet {
        self.inherited
    }

    /// A running task ended: its resources return and queued tasks start.
    pub fn finish(&mut self, id: TaskId, now: u64) -> Vec<Event> {
        if self.remove(id).is_none() {
            return Vec::new();
        }
        self.schedule(now)
    }

    /// Removes a queued task. Returns false when it is not queued (running tasks are
    /// cancelled by the runtime at their next safe point and then [`finish`](Self::finish)ed).
    pub fn cancel(&mut self, id: TaskId, now: u64) -> (bool, Vec<Event>) {
        match self.tasks.get(&id).map(|e| &e.phase) {
            Some(Phase::Queued { .. }) => {
                self.remove(id);
                (true, self.schedule(now))
            }
            _ => (false, Vec::new()),
        }
    }

    /// A running task's closure returned while its GPU work goes on (see `Phase::Quarantined`):
    /// its worker slot is freed (queued tasks may start), its own groups and memory stay taken,
    /// and so do the pool's groups in `occupied` (lent to it, its work may still run there),
    /// also those another task owns now: they are not given to anybody else, nor lent, once
    /// that task lets them go. [`finish`](Self::finish) releases everything once the work
    /// ends. False (nothing changes) when the task is not running.
    pub fn quarantine(&mut self, id: TaskId, occupied: GroupSet, now: u64) -> (bool, Vec<Event>) {
        let Some(e) = self.tasks.get_mut(&id) else {
            return (false, Vec::new());
        };
        let Phase::Running { own, .. } = e.phase else {
            return (false, Vec::new());
        };
        let borrower = e.spec.qos != QosClass::Guaranteed;
        let pool = self.pools.get_mut(&e.pool).expect("pool exists");
        let held = occupied.intersect(pool.groups).minus(own);
        pool.held = pool.held.union(held);
        e.phase = Phase::Quarantined { own, held };
        self.running -= 1;
        self.quarantined += 1;
        self.borrowers -= borrower as usize;
        // Groups now held are no longer lendable: lending is recomputed by the pass.
        (true, self.schedule(now))
    }

    /// Removes every queued task at once, starting none (a shutdown: cancelling queued tasks
    /// one by one would start the tasks behind each). Returns their ids in submission order.
    pub fn drain_queue(&mut self) -> Vec<TaskId> {
        let mut ids: Vec<(u64, TaskId)> = self
            .tasks
            .iter()
            .filter(|(_, e)| matches!(e.phase, Phase::Queued { .. }))
            .map(|(&id, e)| (e.seq, id))
            .collect();
        ids.sort_unstable();
        for &(_, id) in &ids {
            self.remove(id);
        }
        self.next_deadline = u64::MAX;
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// Whether the task is running, and its own + lent groups.
    pub fn running_groups(&self, id: TaskId) -> Option<(GroupSet, GroupSet)> {
        match self.tasks.get(&id)?.phase {
            Phase::Running { own, lent, .. } => Some((own, lent)),
            _ => None,
        }
    }

    /// The grant of a running task.
    #[cfg(test)]
    pub fn grant(&self, id: TaskId) -> Option<Grant> {
        match self.tasks.get(&id)?.phase {
            Phase::Running { grant, .. } => Some(grant),
            _ => None,
        }
    }

    /// The earliest start-by deadline of a queued task, if any (nanoseconds on the clock of
    /// [`submit`](Self::submit); a lower bound: [`schedule`](Self::schedule) at that time
    /// rejects what has expired and moves it on).
    pub fn next_deadline(&self) -> Option<u64> {
        (self.next_deadline != u64::MAX).then_some(self.next_deadline)
    }

    /// How often a queued task has been jumped.
    #[cfg(test)]
    pub fn bypassed(&self, id: TaskId) -> Option<u32> {
        match self.tasks.get(&id)?.phase {
            Phase::Queued { bypassed } => Some(bypassed),
            _ => None,
        }
    }

    /// Tasks running now.
    #[cfg(test)]
    pub fn running_tasks(&self) -> Vec<TaskId> {
        self.tasks
            .iter()
            .filter(|(_, e)| matches!(e.phase, Phase::Running { .. }))
            .map(|(&id, _)| id)
            .collect()
    }

    /// Tasks queued now.
    #[cfg(test)]
    pub fn queued_tasks(&self) -> Vec<TaskId> {
        self.tasks
            .iter()
            .filter(|(_, e)| matches!(e.phase, Phase::Queued { .. }))
            .map(|(&id, _)| id)
            .collect()
    }

    /// The spec of a known task.
    #[cfg(test)]
    pub fn spec(&self, id: TaskId) -> Option<&ResolvedSpec> {
        self.tasks.get(&id).map(|e| &e.spec)
    }

    /// Every pool, the default one first.
    pub fn pools(&self) -> Vec<PoolInfo> {
        self.pools
            .iter()
            .map(|(k, p)| {
                let running = self
                    .tasks
                    .values()
                    .filter(|e| &e.pool == k && matches!(e.phase, Phase::Running { .. }))
                    .count();
                PoolInfo {
                    name: k.clone(),
                    memory_quota: p.memory_quota,
                    memory_committed: p.committed,
                    groups: p.groups,
                    sms: self.cfg.layout.sms(p.groups.len()),
                    groups_assigned: p.assigned,
                    groups_quarantined: if self.quarantined == 0 {
                        self.inherited.intersect(p.groups)
                    } else {
                        self.quarantined_groups(k)
                            .union(self.inherited.intersect(p.groups))
                    },
                    priority_band: p.band,
                    running,
                    queued: p.queue.len(),
                }
            })
            .collect()
    }

    /// The groups of a pool's quarantined tasks (their own and those their work may occupy).
    fn quarantined_groups(&self, key: &Option<String>) -> GroupSet {
        self.tasks
            .values()
            .filter(|e| &e.pool == key)
            .fold(GroupSet::EMPTY, |acc, e| match e.phase {
                Phase::Quarantined { own, held } => acc.union(own).union(held),
                _ => acc,
            })
    }

    /// Creates a partition out of the default pool's unused memory and groups.
    pub fn create_partition(&mut self, spec: &Partition) -> Result<PoolInfo> {
        let memory = spec.memory.resolve()?;
        let name = spec.name.trim();
        if name.is_empty() {
            return Err(Error::invalid("partition name", &spec.name, "is empty"));
        }
        if self.pools.contains_key(&Some(name.to_string())) {
            return Err(Error::invalid("partition name", name, "already exists"));
        }
        if !(spec.compute.is_finite() && spec.compute > 0.0 && spec.compute <= 1.0) {
            return Err(Error::invalid(
                "partition compute share",
                spec.compute,
                "must be a fraction in (0, 1]",
            ));
        }
        let groups = self.cfg.layout.groups_for_share(spec.compute).max(1);
        let default = &self.pools[&None];
        let mem_free = default.memory_quota - default.committed;
        if memory > mem_free {
            return Err(Error::Insufficient {
                resource: Resource::Memory,
                requested: memory,
                available: mem_free,
            });
        }
        let free = default.free_groups();
        if free.len() < groups {
            return Err(Error::Insufficient {
                resource: Resource::Compute,
                requested: groups as u64,
                available: free.len() as u64,
            });
        }
        // Take the highest free groups so the default pool keeps the low ones.
        let mine = GroupSet(reverse_take(free.0, groups));
        let d = self.pools.get_mut(&None).expect("default pool");
        d.memory_quota -= memory;
        d.groups = d.groups.minus(mine);
        self.recheck = true;
        self.pools.insert(
            Some(name.to_string()),
            Pool {
                memory_quota: memory,
                groups: mine,
                band: spec.priority_band,
                committed: 0,
                assigned: GroupSet::EMPTY,
                held: GroupSet::EMPTY,
                queue: Vec::new(),
            },
        );
        Ok(self
            .pools()
            .into_iter()
            .find(|p| p.name.as_deref() == Some(name))
            .expect("just created"))
    }

    fn busy(&self, name: &str) -> Result<()> {
        let key = self.pool_key(&Some(name.to_string()))?;
        let n = self.tasks.values().filter(|e| e.pool == key).count();
        if n > 0 {
            return Err(Error::PartitionBusy {
                name: name.to_string(),
                tasks: n,
            });
        }
        Ok(())
    }

    /// Removes a free partition; its memory and groups return to the default pool.
    pub fn remove_partition(&mut self, name: &str, now: u64) -> Result<Vec<Event>> {
        self.busy(name)?;
        let p = self.pools.remove(&Some(name.to_string())).expect("checked");
        let d = self.pools.get_mut(&None).expect("default pool");
        d.memory_quota += p.memory_quota;
        d.groups = d.groups.union(p.groups);
        self.recheck = true;
        Ok(self.schedule(now))
    }

    /// Resizes a free partition (memory, share and band from `spec`; the name must match).
    /// On failure the partition is left as it was.
    pub fn resize_partition(
        &mut self,
        spec: &Partition,
        now: u64,
    ) -> Result<(PoolInfo, Vec<Event>)> {
        self.busy(&spec.name)?;
        let saved = self.clone();
        let mut events = self.remove_partition(&spec.name, now)?;
        match self.create_partition(spec) {
            Ok(info) => {
                events.extend(self.schedule(now));
                Ok((info, events))
            }
            Err(e) => {
                *self = saved;
                Err(e)
            }
        }
    }
}

fn reverse_take(bits: u64, n: u32) -> u64 {
    let mut out = 0u64;
    let mut rest = bits;
    for _ in 0..n {
        if rest == 0 {
            break;
        }
        let top = 63 - rest.leading_zeros();
        out |= 1 << top;
        rest &= !(1u64 << top);
    }
    out
}

#[cfg(test)]
mod tests;
