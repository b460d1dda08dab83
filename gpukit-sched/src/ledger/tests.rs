// The memory ledger's rules, against a model: charges and releases in any order never take a
// task past its limit or the device past its capacity, allocations within a request always
// pass, eviction plans make room with the fewest victims in the Kubernetes order and never
// touch Guaranteed tasks or Burstable tasks within their request, ended tasks' buffers stay
// charged until released, and the ledger stays consistent under concurrent use.

use super::{EntrySpec, Ledger, Refusal};
use crate::QosClass;
use gpukit_core::OwnerId;
use proptest::prelude::*;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

fn owner(i: u64) -> OwnerId {
    OwnerId::new(&format!("t{i}"))
}

fn spec(id: u64, qos: QosClass, priority: i32, request: u64, limit: u64) -> EntrySpec {
    EntrySpec {
        id,
        name: format!("t{id}"),
        pool: None,
        qos,
        priority,
        started: id,
        request,
        limit,
    }
}

#[test]
fn eviction_order_is_kubernetes() {
    let mut l = Ledger::new(1000);
    let entries = [
        (1, QosClass::Guaranteed, 0, 100, 100),
        (2, QosClass::Burstable, 0, 100, 150), // 50 over
        (3, QosClass::Burstable, 0, 100, 90),  // within its request: never
        (4, QosClass::BestEffort, 5, 0, 10),
        (5, QosClass::BestEffort, 0, 0, 10),
        (6, QosClass::BestEffort, 0, 0, 30),
        (7, QosClass::Burstable, -1, 100, 110), // lower priority than 2
    ];
    for (id, qos, prio, req, used) in entries {
        l.open(&owner(id), spec(id, qos, prio, req, 1000)).unwrap();
        l.charge(&owner(id), used).unwrap();
    }
    // Used: 100 + 150 + 100 (90, committed 100) + 10 + 10 + 30 + 110 = 510 of 1000.
    assert_eq!(l.pool(&None).footprint, 510);
    // A starter committing 520 is 30 short: the largest BestEffort user at priority 0.
    l.open(&owner(8), spec(8, QosClass::Guaranteed, 0, 520, 520))
        .unwrap();
    assert_eq!(l.shortfall(&owner(8)), 30);
    assert_eq!(l.plan_eviction(&owner(8)), vec![6]);
    l.close(&owner(8));
    // 700 short: everyone evictable, BestEffort (priority order) first, then Burstable above
    // request (lower priority first); never 1 (Guaranteed) or 3 (within its request).
    l.open(&owner(9), spec(9, QosClass::Guaranteed, 0, 1000, 1000))
        .unwrap();
    assert_eq!(l.plan_eviction(&owner(9)), vec![6, 5, 4, 7, 2]);
    // Victims already stopping are counted first and not named again.
    l.stop(&owner(6));
    assert_eq!(l.plan_eviction(&owner(9)), vec![5, 4, 7, 2]);
    assert_eq!(l.charge(&owner(6), 1), Err(Refusal::Stopped));
}

#[test]
fn charges_follow_the_rules() {
    let mut l = Ledger::new(700);
    l.open(&owner(1), spec(1, QosClass::Guaranteed, 0, 500, 500))
        .unwrap();
    l.open(&owner(2), spec(2, QosClass::Burstable, 0, 100, 250))
        .unwrap();
    // 600 committed of 700: 100 free above requests.
    assert!(l.charge(&owner(2), 90).is_ok()); // within its request
    assert!(l.charge(&owner(2), 110).is_ok()); // 100 above
    assert_eq!(
        l.charge(&owner(2), 1),
        Err(Refusal::Pressure {
            requested: 1,
            available: 0
        })
    );
    assert_eq!(
        l.charge(&owner(2), 60),
        Err(Refusal::Quota {
            in_use: 200,
            requested: 60,
            limit: 250
        })
    );
    assert_eq!(
        l.take_refusal(&owner(2)),
        Some(Refusal::Quota {
            in_use: 200,
            requested: 60,
            limit: 250
        })
    );
    assert_eq!(l.take_refusal(&owner(2)), None);
    // The Guaranteed task's commitment is always there.
    assert!(l.charge(&owner(1), 500).is_ok());
    // Outside tasks: refused under pressure only.
    assert!(matches!(
        l.charge(&owner(99), 1),
        Err(Refusal::Pressure { .. })
    ));
    l.release(&owner(2), 200);
    assert!(l.charge(&owner(99), 100).is_ok());
    assert_eq!(l.outside(), 100);
    l.check_invariants().unwrap();
}

#[test]
fn ended_tasks_keep_their_buffers_charged_until_released() {
    let mut l = Ledger::new(1000);
    l.open(&owner(1), spec(1, QosClass::Guaranteed, 0, 600, 600))
        .unwrap();
    l.charge(&owner(1), 400).unwrap();
    assert_eq!(l.close(&owner(1)), 400);
    let p = l.pool(&None);
    assert_eq!((p.in_use, p.orphaned, p.footprint), (400, 400, 400));
    assert_eq!(l.charge(&owner(1), 1), Err(Refusal::Ended));
    // Bursting sees the 400 as taken.
    l.open(&owner(2), spec(2, QosClass::BestEffort, 0, 0, 1000))
        .unwrap();
    assert_eq!(
        l.charge(&owner(2), 601),
        Err(Refusal::Pressure {
            requested: 601,
            available: 600
        })
    );
    l.release(&owner(1), 400);
    assert_eq!(l.pool(&None).orphaned, 0);
    assert_eq!(
        l.usage(&owner(1)),
        None,
        "the entry goes once nothing is left"
    );
    // A new task may reuse the owner name once the old one is gone.
    l.open(&owner(1), spec(1, QosClass::Guaranteed, 0, 10, 10))
        .unwrap();
}

#[test]
fn a_partition_over_lent_memory_evicts_across_pools() {
    let mut l = Ledger::new(1000);
    l.open(&owner(1), spec(1, QosClass::BestEffort, 0, 0, 1000))
        .unwrap();
    l.charge(&owner(1), 800).unwrap();
    // 600 of the default pool become a partition: the default pool is now over its quota.
    l.set_pools([(None, 400), (Some("rt".to_string()), 600)]);
    assert_eq!(l.capacity(), 1000);
    let mut s = spec(2, QosClass::Guaranteed, 0, 600, 600);
    s.pool = Some("rt".into());
    l.open(&owner(2), s).unwrap();
    assert_eq!(l.shortfall(&owner(2)), 400);
    assert_eq!(
        l.plan_eviction(&owner(2)),
        vec![1],
        "the default pool's task"
    );
    // Removing the partition re-homes what is charged in it.
    l.close(&owner(2));
    l.set_pools([(None, 1000)]);
    assert_eq!(l.pool(&None).footprint, 800);
}

#[derive(Debug, Clone)]
enum Op {
    Charge(usize, u64),
    Release(usize, u64),
    Close(usize),
}

proptest! {
    /// Whatever the operations, charges respect limits and the device capacity, allocations
    /// within a request never fail, and released bytes come back exactly.
    #[test]
    fn ledger_invariants(reqs in proptest::collection::vec((0u8..3, 0u64..300, 1u64..400), 1..6),
                         ops in proptest::collection::vec(
                             prop_oneof![
                                 (0usize..6, 1u64..200).prop_map(|(i, b)| Op::Charge(i, b)),
                                 (0usize..6, 1u64..200).prop_map(|(i, b)| Op::Release(i, b)),
                                 (0usize..6).prop_map(Op::Close),
                             ], 0..80)) {
        let capacity = 1000u64;
        let mut l = Ledger::new(capacity);
        let mut tasks: Vec<(OwnerId, EntrySpec, u64, bool)> = Vec::new(); // owner, spec, held, running
        let mut committed = 0;
        for (i, (q, r, extra)) in reqs.iter().enumerate() {
            let qos = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort][*q as usize];
            let request = if qos == QosClass::BestEffort { 0 } else { *r };
            let limit = if qos == QosClass::Guaranteed { request } else { request + extra };
            if committed + request > capacity { continue; } // admission by requests
            committed += request;
            let s = spec(i as u64, qos, 0, request, limit);
            l.open(&owner(i as u64), s.clone()).unwrap();
            tasks.push((owner(i as u64), s, 0, true));
        }
        prop_assume!(!tasks.is_empty());
        for op in ops {
            match op {
                Op::Charge(i, b) => {
                    let i = i % tasks.len();
                    let (o, s, held, running) = tasks[i].clone();
                    if !running && held == 0 {
                        // Ended with nothing left: the ledger forgot the owner (a later
                        // allocation under its name counts as outside tasks).
                        continue;
                    }
                    match l.charge(&o, b) {
                        Ok(()) => { prop_assert!(running); tasks[i].2 += b; }
                        Err(Refusal::Ended) => prop_assert!(!running),
                        Err(_) => prop_assert!(!running || held + b > s.request, "a charge within the request failed"),
                    }
                }
                Op::Release(i, b) => {
                    let i = i % tasks.len();
                    let b = b.min(tasks[i].2);
                    if b > 0 {
                        l.release(&tasks[i].0, b);
                        tasks[i].2 -= b;
                    }
                }
                Op::Close(i) => {
                    let i = i % tasks.len();
                    if tasks[i].3 {
                        prop_assert_eq!(l.close(&tasks[i].0), tasks[i].2);
                        tasks[i].3 = false;
                    }
                }
            }
            l.check_invariants().map_err(TestCaseError::fail)?;
            let held: u64 = tasks.iter().map(|t| t.2).sum();
            prop_assert_eq!(l.pool(&None).in_use, held);
            for t in &tasks {
                prop_assert_eq!(l.usage(&t.0).map_or(0, |u| u.0), t.2);
            }
        }
    }

    /// Evicting the planned victims makes room whenever room can be made, never touches
    /// Guaranteed tasks or Burstable tasks within their request, and takes no victim more than
    /// needed.
    #[test]
    fn eviction_makes_room_minimally(ts in proptest::collection::vec((0u8..3, 0u64..300, 0u64..300, -2i32..3), 1..8),
                                      incoming in 1u64..500) {
        let capacity = 1000u64;
        let mut l = Ledger::new(u64::MAX / 4);
        let mut info = Vec::new();
        for (i, (q, r, u, p)) in ts.iter().enumerate() {
            let qos = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort][*q as usize];
            let request = if qos == QosClass::BestEffort { 0 } else { *r };
            let used = if qos == QosClass::Guaranteed { (*u).min(request) } else { *u };
            l.open(&owner(i as u64), spec(i as u64, qos, *p, request, u64::MAX)).unwrap();
            l.charge(&owner(i as u64), used).unwrap();
            info.push((qos, request, used));
        }
        l.set_pools([(None, capacity)]);
        let me = owner(100);
        l.open(&me, spec(100, QosClass::Guaranteed, 0, incoming, incoming)).unwrap();
        let victims = l.plan_eviction(&me);
        let footprint = |i: usize| info[i].1.max(info[i].2);
        for v in &victims {
            let (qos, request, used) = info[*v as usize];
            prop_assert!(qos == QosClass::BestEffort || (qos == QosClass::Burstable && used > request));
        }
        let evictable: u64 = (0..info.len())
            .filter(|&i| match info[i].0 {
                QosClass::BestEffort => true,
                QosClass::Burstable => info[i].2 > info[i].1,
                QosClass::Guaranteed => false,
            })
            .map(footprint)
            .sum();
        let total: u64 = (0..info.len()).map(footprint).sum::<u64>() + incoming;
        let freed: u64 = victims.iter().map(|&v| footprint(v as usize)).sum();
        if total.saturating_sub(evictable) <= capacity {
            prop_assert!(total - freed <= capacity, "room was possible but not made");
        }
        if let Some((last, head)) = victims.split_last() {
            let _ = last;
            let freed_head: u64 = head.iter().map(|&v| footprint(v as usize)).sum();
            prop_assert!(total - freed_head > capacity, "a victim too many");
        }
    }
}

/// Charge-then-allocate and free-then-release from many threads: the bytes "allocated" never
/// exceed the capacity at any moment, and everything comes back.
#[test]
fn concurrent_charges_never_overrun() {
    const CAP: u64 = 10_000;
    let ledger = Arc::new(Mutex::new(Ledger::new(CAP)));
    for i in 0..8u64 {
        let qos = if i % 2 == 0 {
            QosClass::Guaranteed
        } else {
            QosClass::BestEffort
        };
        let (req, lim) = if qos == QosClass::Guaranteed {
            (1_000, 1_000)
        } else {
            (0, CAP)
        };
        ledger
            .lock()
            .unwrap()
            .open(&owner(i), spec(i, qos, 0, req, lim))
            .unwrap();
    }
    let physical = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|i| {
            let (ledger, physical, peak) = (ledger.clone(), physical.clone(), peak.clone());
            std::thread::spawn(move || {
                let mut g_failures = 0;
                for round in 0..2_000u64 {
                    let bytes = 100 + (round * 37 + i * 11) % 400;
                    let ok = ledger.lock().unwrap().charge(&owner(i), bytes).is_ok();
                    if ok {
                        let now = physical.fetch_add(bytes as i64, Ordering::SeqCst) + bytes as i64;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        physical.fetch_sub(bytes as i64, Ordering::SeqCst);
                        ledger.lock().unwrap().release(&owner(i), bytes);
                    } else if i % 2 == 0 && bytes <= 1_000 {
                        g_failures += 1;
                    }
                }
                g_failures
            })
        })
        .collect();
    let g_failures: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        g_failures, 0,
        "a Guaranteed charge within its request failed"
    );
    assert!(peak.load(Ordering::SeqCst) as u64 <= CAP);
    assert_eq!(ledger.lock().unwrap().pool(&None).in_use, 0);
}

#[test]
fn committed_memory_always_passes_and_bursts_share_the_rest() -> crate::Result<()> {
    let mut l = Ledger::new(1000);
    l.open(&owner(1), spec(1, QosClass::Guaranteed, 0, 600, 600))?;
    l.open(&owner(2), spec(2, QosClass::BestEffort, 0, 0, 1000))?;
    assert!(l.charge(&owner(2), 400).is_ok());
    assert!(matches!(
        l.charge(&owner(2), 1),
        Err(Refusal::Pressure { available: 0, .. })
    ));
    assert!(l.charge(&owner(1), 600).is_ok(), "committed: always");
    assert!(matches!(l.charge(&owner(1), 1), Err(Refusal::Quota { .. })));
    Ok(())
}

#[test]
fn holders_name_everything_the_starter_lacks_largest_first() {
    use crate::error::HolderKind;
    let mut l = Ledger::new(1000);
    l.open(&owner(1), spec(1, QosClass::BestEffort, 0, 0, 1000))
        .unwrap();
    l.charge(&owner(1), 300).unwrap();
    l.open(&owner(2), spec(2, QosClass::BestEffort, 0, 0, 1000))
        .unwrap();
    l.charge(&owner(2), 400).unwrap();
    l.close(&owner(2)); // ended, its 400 returned in its result
    l.open(&owner(3), spec(3, QosClass::Burstable, 0, 100, 1000))
        .unwrap();
    l.stop(&owner(3));
    l.charge(&"outside".into(), 50).unwrap();
    l.open(&owner(9), spec(9, QosClass::Guaranteed, 0, 500, 500))
        .unwrap();
    assert_eq!(l.shortfall(&owner(9)), 350);
    let h: Vec<(Option<u64>, u64, HolderKind)> = l
        .holders(&owner(9))
        .into_iter()
        .map(|h| (h.id, h.bytes, h.kind))
        .collect();
    assert_eq!(
        h,
        [
            (Some(2), 400, HolderKind::Ended),
            (Some(1), 300, HolderKind::Running),
            (Some(3), 100, HolderKind::Stopping),
            (None, 50, HolderKind::OutsideTasks),
        ]
    );
}

/// A lane's memory (its cuBLAS workspace) is charged to the task using the lane, limits
/// included, and counts outside tasks while the lane is idle; the total never changes.
#[test]
fn lane_memory_follows_the_task_that_uses_the_lane() {
    let lane: OwnerId = "sched-lane-1".into();
    let mut l = Ledger::new(1000);
    l.open(&owner(1), spec(1, QosClass::Guaranteed, 0, 500, 500))
        .unwrap();
    // Bound: the workspace allocation is the task's (within its request: it always passes).
    l.bind_lane(&lane, &owner(1)).unwrap();
    l.charge(&lane, 300).unwrap();
    assert_eq!((l.usage(&owner(1)).unwrap().0, l.outside()), (300, 0));
    // Past the task's limit: refused as the task's quota.
    assert!(matches!(l.charge(&lane, 300), Err(Refusal::Quota { .. })));
    // The task is done: the lane's 300 count outside tasks; the task's entry goes.
    l.unbind_lane(&lane);
    l.close(&owner(1));
    assert_eq!((l.usage(&owner(1)), l.outside()), (None, 300));
    // A task with a limit below the workspace cannot take the lane's memory: nothing moves.
    l.open(&owner(2), spec(2, QosClass::Burstable, 0, 0, 100))
        .unwrap();
    assert!(matches!(
        l.bind_lane(&lane, &owner(2)),
        Err(Refusal::Quota { .. })
    ));
    assert_eq!((l.usage(&owner(2)).unwrap().0, l.outside()), (0, 300));
    // One that can: the bytes move to it; freeing the workspace while bound credits it.
    l.open(&owner(3), spec(3, QosClass::Burstable, 0, 0, 1000))
        .unwrap();
    l.bind_lane(&lane, &owner(3)).unwrap();
    assert_eq!((l.usage(&owner(3)).unwrap().0, l.outside()), (300, 0));
    l.release(&lane, 300);
    assert_eq!((l.usage(&owner(3)).unwrap().0, l.outside()), (0, 0));
    l.unbind_lane(&lane);
    assert_eq!(l.outside(), 0);
    l.check_invariants().unwrap();
}

/// A quarantined task (its GPU work did not end) keeps its commitment and the memory its
/// streams keep out of use, is never an eviction victim (stopping it frees nothing), and is
/// named as quarantined among the holders; once its work ends, everything is released.
#[test]
fn a_quarantined_task_keeps_its_memory_and_is_no_victim() {
    let mut l = Ledger::new(1000);
    // A BestEffort task (the first victim otherwise) holding 300, its buffers dropped since
    // (the kernel still runs) while its stream's cache keeps 400 out of use.
    l.open(&owner(1), spec(1, QosClass::BestEffort, 0, 0, 1000))
        .unwrap();
    l.charge(&owner(1), 300).unwrap();
    l.release(&owner(1), 300);
    l.quarantine(&owner(1), 400);
    assert_eq!(l.quarantined(&owner(1)), Some(400));
    assert_eq!(l.pool(&None).footprint, 400);
    assert_eq!(l.charge(&owner(1), 1), Err(Refusal::Stopped));
    // Another BestEffort task and a Guaranteed starter that is 100 short: only the other
    // task is a victim; the holders name the quarantined one as such.
    l.open(&owner(2), spec(2, QosClass::BestEffort, 0, 0, 1000))
        .unwrap();
    l.charge(&owner(2), 200).unwrap();
    l.open(&owner(3), spec(3, QosClass::Guaranteed, 0, 500, 500))
        .unwrap();
    assert_eq!(l.shortfall(&owner(3)), 100);
    assert_eq!(l.plan_eviction(&owner(3)), vec![2]);
    // Short by more than the others can give: no victim could help, the quarantined task
    // is not named.
    l.close(&owner(3));
    l.open(&owner(4), spec(4, QosClass::Guaranteed, 0, 900, 900))
        .unwrap();
    assert_eq!(l.plan_eviction(&owner(4)), vec![2]);
    let holders = l.holders(&owner(4));
    let q = holders.iter().find(|h| h.id == Some(1)).expect("named");
    assert_eq!((q.bytes, q.kind), (400, crate::HolderKind::Quarantined));
    // The work ends: its entry closes and the memory is free again.
    l.close(&owner(1));
    assert_eq!(l.quarantined(&owner(1)), None);
    assert_eq!(l.pool(&None).footprint, 200 + 900);
    l.check_invariants().unwrap();
}
