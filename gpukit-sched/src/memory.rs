//! Memory enforcement as pure logic: which allocations a task may make, and whom to evict
//! under pressure.
//!
//! # Rules
//! - A task's allocations up to its **request** always pass: the request was committed at
//!   admission (for a Guaranteed task that is its whole limit, so its allocations never fail).
//! - An allocation past the task's **limit** fails with [`Error::QuotaExceeded`].
//! - Memory **above requests** is first come, first served: an allocation that takes a task
//!   further above its request passes only if its pool still has that much memory that is
//!   neither committed nor already used above requests; otherwise [`Error::MemoryPressure`].
//! - When a task starts whose commitment does not fit beside what others use above their
//!   requests, tasks are **evicted** in the Kubernetes order: BestEffort first, then Burstable
//!   tasks above their request; within a class the lowest priority first, then the one using
//!   the most memory above its request, then the one started last. Only as many as needed.
//!   Eviction takes effect at the victim's next allocation or launch (its safe point); the new
//!   task starts when the memory has been released.

use crate::error::{Error, Result};
use crate::plan::TaskId;
use crate::spec::QosClass;

/// One running task's memory position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemUse {
    /// The task.
    pub id: TaskId,
    /// Its name (for messages).
    pub name: String,
    /// Its class.
    pub qos: QosClass,
    /// Its priority.
    pub priority: i32,
    /// Start order (larger = started later).
    pub started: u64,
    /// Committed bytes.
    pub request: u64,
    /// Limit in bytes.
    pub limit: u64,
    /// Bytes it holds now.
    pub in_use: u64,
}

impl MemUse {
    /// Bytes above its request.
    pub fn over(&self) -> u64 {
        self.in_use.saturating_sub(self.request)
    }
    /// What its eviction gives back to the pool's ledger (commitment plus use above it).
    pub fn footprint(&self) -> u64 {
        self.request.max(self.in_use)
    }
}

/// Committed bytes plus bytes used above requests: the pool's ledger total.
pub fn ledger_total(tasks: &[MemUse]) -> u64 {
    tasks.iter().map(MemUse::footprint).sum()
}

/// Checks an allocation of `bytes` by `task` against its limit and the pool (`capacity` is the
/// pool's memory quota; `tasks` are the pool's running tasks, `task` among them).
///
/// ```
/// use gpukit_sched::memory::{check_allocation, MemUse};
/// use gpukit_sched::QosClass;
/// let g = MemUse { id: 1, name: "g".into(), qos: QosClass::Guaranteed, priority: 0, started: 1,
///                  request: 600, limit: 600, in_use: 0 };
/// let be = MemUse { id: 2, name: "be".into(), qos: QosClass::BestEffort, priority: 0, started: 2,
///                   request: 0, limit: 1000, in_use: 400 };
/// let pool = vec![g.clone(), be.clone()];
/// assert!(check_allocation(&pool, 1000, &g, 600).is_ok());   // committed: always
/// assert!(check_allocation(&pool, 1000, &g, 601).is_err());  // past its limit
/// assert!(check_allocation(&pool, 1000, &be, 1).is_err());   // 600 + 400 used: nothing free
/// ```
pub fn check_allocation(tasks: &[MemUse], capacity: u64, task: &MemUse, bytes: u64) -> Result<()> {
    let new_use = task.in_use.saturating_add(bytes);
    if new_use > task.limit {
        return Err(Error::QuotaExceeded {
            task: task.name.clone(),
            in_use: task.in_use,
            requested: bytes,
            limit: task.limit,
        });
    }
    let extra = new_use.saturating_sub(task.request) - task.over();
    if extra == 0 {
        return Ok(());
    }
    let available = capacity.saturating_sub(ledger_total(tasks));
    if extra > available {
        return Err(Error::MemoryPressure {
            task: task.name.clone(),
            requested: bytes,
            available,
        });
    }
    Ok(())
}

/// Everyone who may be evicted, in eviction order: BestEffort tasks, then Burstable tasks
/// above their request; Guaranteed tasks and Burstable tasks within their request never.
pub fn eviction_order(tasks: &[MemUse]) -> Vec<TaskId> {
    let mut c: Vec<&MemUse> = tasks
        .iter()
        .filter(|t| match t.qos {
            QosClass::BestEffort => true,
            QosClass::Burstable => t.over() > 0,
            QosClass::Guaranteed => false,
        })
        .collect();
    c.sort_by_key(|t| {
        (
            if t.qos == QosClass::BestEffort { 0 } else { 1 },
            t.priority as i64,
            std::cmp::Reverse(t.over()),
            std::cmp::Reverse(t.started),
        )
    });
    c.into_iter().map(|t| t.id).collect()
}

/// The fewest victims, taken in [`eviction_order`], whose eviction brings the ledger total of
/// `tasks` plus `incoming` (a starting task's commitment) within `capacity`. Empty when it
/// already fits; all candidates when even that is not enough (the newcomer then waits).
pub fn plan_eviction(tasks: &[MemUse], capacity: u64, incoming: u64) -> Vec<TaskId> {
    let mut total = ledger_total(tasks).saturating_add(incoming);
    let mut victims = Vec::new();
    for id in eviction_order(tasks) {
        if total <= capacity {
            break;
        }
        let t = tasks
            .iter()
            .find(|t| t.id == id)
            .expect("candidate from tasks");
        total = total.saturating_sub(t.footprint());
        victims.push(id);
    }
    victims
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mu(id: TaskId, qos: QosClass, priority: i32, request: u64, in_use: u64) -> MemUse {
        MemUse {
            id,
            name: format!("t{id}"),
            qos,
            priority,
            started: id,
            request,
            limit: if qos == QosClass::Guaranteed {
                request
            } else {
                u64::MAX
            },
            in_use,
        }
    }

    #[test]
    fn order_is_kubernetes() {
        let t = vec![
            mu(1, QosClass::Guaranteed, 0, 100, 100),
            mu(2, QosClass::Burstable, 0, 100, 150), // 50 over
            mu(3, QosClass::Burstable, 0, 100, 90),  // within request: never
            mu(4, QosClass::BestEffort, 5, 0, 10),
            mu(5, QosClass::BestEffort, 0, 0, 10),
            mu(6, QosClass::BestEffort, 0, 0, 30),
            mu(7, QosClass::Burstable, -1, 100, 110), // lower priority than 2
        ];
        // BestEffort: priority 0 before 5; within priority 0 the larger user (6) first.
        assert_eq!(eviction_order(&t), vec![6, 5, 4, 7, 2]);
        // Only as many as needed: 330 committed/used... capacity 300 needs 30+ freed + incoming.
        let total = ledger_total(&t);
        assert_eq!(total, 100 + 150 + 100 + 10 + 10 + 30 + 110);
        assert_eq!(plan_eviction(&t, total, 0), Vec::<TaskId>::new());
        assert_eq!(plan_eviction(&t, total, 30), vec![6]);
        assert_eq!(plan_eviction(&t, total, 31), vec![6, 5]);
        assert_eq!(plan_eviction(&t, 0, 0), vec![6, 5, 4, 7, 2]);
    }

    #[test]
    fn allocation_rules() {
        let b = mu(2, QosClass::Burstable, 0, 100, 90);
        let pool = vec![mu(1, QosClass::Guaranteed, 0, 500, 0), b.clone()];
        // 600 committed of 700: 100 free above requests.
        assert!(check_allocation(&pool, 700, &b, 10).is_ok()); // within request
        assert!(check_allocation(&pool, 700, &b, 110).is_ok()); // 100 above
        assert!(matches!(
            check_allocation(&pool, 700, &b, 111),
            Err(Error::MemoryPressure { available: 100, .. })
        ));
        let capped = MemUse { limit: 120, ..b };
        assert!(matches!(
            check_allocation(&pool, 700, &capped, 31),
            Err(Error::QuotaExceeded { limit: 120, .. })
        ));
    }

    proptest! {
        /// Whatever the allocation sequence, the ledger never exceeds capacity, no task passes
        /// its limit, and allocations within a request never fail.
        #[test]
        fn ledger_invariants(reqs in proptest::collection::vec((0u8..3, 0u64..200, 1u64..400), 1..6),
                             allocs in proptest::collection::vec((0usize..6, 1u64..150), 0..60)) {
            let capacity = 1000u64;
            let mut tasks: Vec<MemUse> = Vec::new();
            for (i, (q, r, extra)) in reqs.iter().enumerate() {
                let qos = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort][*q as usize];
                let request = if qos == QosClass::BestEffort { 0 } else { *r };
                let limit = if qos == QosClass::Guaranteed { request } else { request + extra };
                // Admission by requests.
                if tasks.iter().map(|t| t.request).sum::<u64>() + request > capacity { continue; }
                tasks.push(MemUse { id: i as u64, name: format!("t{i}"), qos, priority: 0, started: i as u64, request, limit, in_use: 0 });
            }
            prop_assume!(!tasks.is_empty());
            for (who, bytes) in allocs {
                let i = who % tasks.len();
                let t = tasks[i].clone();
                match check_allocation(&tasks, capacity, &t, bytes) {
                    Ok(()) => tasks[i].in_use += bytes,
                    Err(_) => prop_assert!(t.in_use + bytes > t.request, "an allocation within the request failed"),
                }
                prop_assert!(ledger_total(&tasks) <= capacity);
                prop_assert!(tasks.iter().all(|t| t.in_use <= t.limit));
            }
        }

        /// Evicting the planned victims always makes room when room can be made, and never
        /// touches Guaranteed tasks or Burstable tasks within their request.
        #[test]
        fn eviction_makes_room(ts in proptest::collection::vec((0u8..3, 0u64..300, 0u64..300, -2i32..3), 1..8), incoming in 0u64..500) {
            let tasks: Vec<MemUse> = ts.iter().enumerate().map(|(i, (q, r, u, p))| {
                let qos = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort][*q as usize];
                let request = if qos == QosClass::BestEffort { 0 } else { *r };
                MemUse { id: i as u64, name: String::new(), qos, priority: *p, started: i as u64, request, limit: u64::MAX,
                         in_use: if qos == QosClass::Guaranteed { (*u).min(request) } else { *u } }
            }).collect();
            let capacity = 1000;
            let victims = plan_eviction(&tasks, capacity, incoming);
            for v in &victims {
                let t = &tasks[*v as usize];
                prop_assert!(t.qos == QosClass::BestEffort || (t.qos == QosClass::Burstable && t.over() > 0));
            }
            let rest: Vec<MemUse> = tasks.iter().filter(|t| !victims.contains(&t.id)).cloned().collect();
            let possible = ledger_total(&tasks.iter().filter(|t| !eviction_order(&tasks).contains(&t.id)).cloned().collect::<Vec<_>>()) + incoming <= capacity;
            if possible { prop_assert!(ledger_total(&rest) + incoming <= capacity); }
            // Minimal: without the last victim it would not fit.
            if let Some((_, head)) = victims.split_last() {
                let rest2: Vec<MemUse> = tasks.iter().filter(|t| !head.contains(&t.id)).cloned().collect();
                prop_assert!(ledger_total(&rest2) + incoming > capacity);
            }
        }
    }
}
