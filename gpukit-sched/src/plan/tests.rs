// CPU-side, deterministic tests of admission, queue order, deadlines, anti-starvation,
// partitions, SM-group assignment and lending.

use super::{Admission, Event, Planner, PlannerConfig, Rejection, TaskId};
use crate::{GroupSet, Mechanism, Partition, QosClass, Resource, SmLayout, TaskSpec};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const GIB: u64 = 1 << 30;

fn cfg() -> PlannerConfig {
    PlannerConfig {
        memory_capacity: 100 * GIB,
        layout: SmLayout::new(132, 8, true).unwrap(),
        max_running: 16,
        max_queue: 64,
        max_bypass: 3,
    }
}

fn g(name: &str, mem: u64, share: f64) -> crate::ResolvedSpec {
    TaskSpec::new(name)
        .memory(mem, mem)
        .compute(share, share)
        .resolve()
        .unwrap()
}

/// A Burstable task of 1 GiB requesting `request` of the GPU, up to `limit`.
fn burst(request: f64, limit: f64) -> crate::ResolvedSpec {
    TaskSpec::new("burst")
        .memory_request(GIB)
        .compute(request, limit)
        .resolve()
        .unwrap()
}

fn started(ev: &[Event]) -> Vec<TaskId> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Started(t, _) => Some(*t),
            _ => None,
        })
        .collect()
}

#[test]
fn admission_counts_requests_and_rejects_with_reason() {
    let mut p = Planner::new(cfg());
    let (d, _) = p.submit(1, g("a", 60 * GIB, 0.25), 0).unwrap();
    let Admission::Admitted(grant) = d else {
        panic!("{d:?}")
    };
    assert_eq!(grant.memory_committed, 60 * GIB);
    assert_eq!(grant.compute.mechanism, Mechanism::GreenContext);
    assert_eq!((grant.compute.groups.len(), grant.compute.sms), (4, 32));
    // 60 + 60 > 100: queued, though nothing is *used* yet.
    assert_eq!(
        p.submit(2, g("b", 60 * GIB, 0.25), 0).unwrap().0,
        Admission::Queued { position: 0 }
    );
    // Never fits: rejected with resource, requested, available.
    assert_eq!(
        p.submit(3, g("c", 101 * GIB, 0.25), 0).unwrap().0,
        Admission::Rejected {
            resource: Resource::Memory,
            requested: 101 * GIB,
            available: 100 * GIB
        }
    );
    // Compute: 0.75 + 0.25 = 16 groups fit; another 0.25 queues.
    let mut p = Planner::new(cfg());
    assert!(matches!(
        p.submit(1, g("a", GIB, 0.75), 0).unwrap().0,
        Admission::Admitted(_)
    ));
    assert!(matches!(
        p.submit(2, g("b", GIB, 0.25), 0).unwrap().0,
        Admission::Admitted(_)
    ));
    assert_eq!(
        p.submit(3, g("c", GIB, 0.25), 0).unwrap().0,
        Admission::Queued { position: 0 }
    );
    let (own1, _) = p.running_groups(1).unwrap();
    let (own2, _) = p.running_groups(2).unwrap();
    assert_eq!((own1.len(), own2.len()), (12, 4));
    assert!(own1.intersect(own2).is_empty());
    // Duplicate ids and unknown partitions are errors and change nothing.
    assert!(p.submit(1, g("dup", GIB, 0.25), 0).is_err());
    let mut s = g("x", GIB, 0.25);
    s.partition = Some("nope".into());
    assert!(matches!(
        p.submit(9, s, 0),
        Err(crate::Error::UnknownPartition { .. })
    ));
    assert_eq!(p.queued_tasks(), vec![3]);
    // A finished task's groups go to the queue.
    assert_eq!(started(&p.finish(2, 1)), vec![3]);
}

#[test]
fn queue_order_priority_fifo_edf() {
    let mut p = Planner::new(cfg());
    p.submit(100, g("blocker", 100 * GIB, 1.0), 0).unwrap();
    let mk = |prio: i32, dl: Option<u64>| {
        let mut s = TaskSpec::new("q")
            .memory(GIB, GIB)
            .compute(1.0, 1.0)
            .priority(prio);
        if let Some(ms) = dl {
            s = s.deadline(Duration::from_millis(ms));
        }
        s.resolve().unwrap()
    };
    p.submit(1, mk(0, None), 0).unwrap();
    p.submit(2, mk(5, None), 0).unwrap();
    p.submit(3, mk(0, Some(500)), 0).unwrap();
    p.submit(4, mk(0, Some(200)), 0).unwrap();
    p.submit(5, mk(5, None), 0).unwrap();
    p.submit(6, mk(0, None), 0).unwrap();
    // priority 5 FIFO (2, 5), then EDF (4, 3), then FIFO (1, 6).
    let order: Vec<usize> = [2, 5, 4, 3, 1, 6]
        .iter()
        .map(|&t| p.queue_position(t).unwrap())
        .collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
    // Run them one at a time: start order follows the queue order.
    let mut seen = Vec::new();
    let mut cur = 100;
    for _ in 0..6 {
        let ev = p.finish(cur, 1);
        let s = started(&ev);
        assert_eq!(s.len(), 1, "{ev:?}");
        cur = s[0];
        seen.push(cur);
    }
    assert_eq!(seen, vec![2, 5, 4, 3, 1, 6]);
}

#[test]
fn deadline_passed_while_queued_is_rejected() {
    let mut p = Planner::new(cfg());
    p.submit(1, g("blocker", 100 * GIB, 1.0), 0).unwrap();
    let s = TaskSpec::new("late")
        .memory(GIB, GIB)
        .deadline(Duration::from_millis(10))
        .resolve()
        .unwrap();
    assert_eq!(
        p.submit(2, s, 0).unwrap().0,
        Admission::Queued { position: 0 }
    );
    assert!(p.schedule(9_999_999).is_empty());
    let ev = p.schedule(10_000_000);
    assert!(
        matches!(&ev[..], [Event::Rejected(2, Rejection::DeadlinePassed { deadline })] if *deadline == Duration::from_millis(10)),
        "{ev:?}"
    );
    assert!(p.queued_tasks().is_empty());
}

#[test]
fn anti_starvation_bounds_jumps() {
    let mut p = Planner::new(cfg()); // max_bypass = 3
    p.submit(1, g("half", 50 * GIB, 0.5), 0).unwrap();
    p.submit(2, g("quarter", 10 * GIB, 0.25), 0).unwrap();
    // The big task needs 0.75: queued behind the running ones.
    assert_eq!(
        p.submit(10, g("big", 10 * GIB, 0.75), 0).unwrap().0,
        Admission::Queued { position: 0 }
    );
    // Small tasks keep arriving and jumping it while 4 groups are free.
    let mut next = 20;
    for i in 0..3 {
        let (d, _) = p.submit(next, g("small", GIB, 0.25), i).unwrap();
        assert!(matches!(d, Admission::Admitted(_)), "jump {i}: {d:?}");
        p.finish(next, i);
        next += 1;
    }
    assert_eq!(p.bypassed(10), Some(3));
    // Starving now: a later small task may not jump it although it would fit.
    assert!(matches!(
        p.submit(next, g("small", GIB, 0.25), 5).unwrap().0,
        Admission::Queued { .. }
    ));
    assert_eq!(p.queue_position(10), Some(0));
    // When the half finishes, the big one starts first.
    let ev = p.finish(1, 6);
    assert_eq!(started(&ev)[0], 10);
}

#[test]
fn partitions_create_resize_remove() {
    let mut p = Planner::new(cfg());
    let spec = Partition::new("rt")
        .memory(20 * GIB)
        .compute(0.25)
        .priority_band(1);
    let info = p.create_partition(&spec).unwrap();
    assert_eq!(
        (info.memory_quota, info.groups.len(), info.sms),
        (20 * GIB, 4, 32)
    );
    let default = &p.pools()[0];
    assert_eq!(
        (
            default.name.clone(),
            default.memory_quota,
            default.groups.len()
        ),
        (None, 80 * GIB, 12)
    );
    assert!(default.groups.intersect(info.groups).is_empty());
    // Duplicate name, too big, bad share: errors, nothing changes.
    let before = p.pools();
    assert!(p.create_partition(&spec).is_err());
    assert!(matches!(
        p.create_partition(
            &Partition::new("x")
                .memory(81 * GIB)
                .compute(0.1)
                .priority_band(0)
        ),
        Err(crate::Error::Insufficient {
            resource: Resource::Memory,
            ..
        })
    ));
    assert!(matches!(
        p.create_partition(
            &Partition::new("x")
                .memory(GIB)
                .compute(0.8)
                .priority_band(0)
        ),
        Err(crate::Error::Insufficient {
            resource: Resource::Compute,
            ..
        })
    ));
    assert!(p
        .create_partition(
            &Partition::new("x")
                .memory(GIB)
                .compute(0.0)
                .priority_band(0)
        )
        .is_err());
    assert_eq!(p.pools(), before);
    // Tasks in the partition get its groups and are limited by its quota.
    let mut s = g("in-rt", 10 * GIB, 0.25);
    s.partition = Some("rt".into());
    let (Admission::Admitted(gr), _) = p.submit(1, s.clone(), 0).unwrap() else {
        panic!()
    };
    assert!(info.groups.contains(gr.compute.groups));
    let mut big = g("too-big", 21 * GIB, 0.1);
    big.partition = Some("rt".into());
    assert!(matches!(
        p.submit(2, big, 0).unwrap().0,
        Admission::Rejected {
            resource: Resource::Memory,
            ..
        }
    ));
    // Busy: no resize or remove.
    let bigger = spec.clone().memory(30 * GIB).compute(0.5);
    assert!(matches!(
        p.resize_partition(&bigger, 0),
        Err(crate::Error::PartitionBusy { tasks: 1, .. })
    ));
    assert!(p.remove_partition("rt", 0).is_err());
    p.finish(1, 1);
    let (info2, _) = p.resize_partition(&bigger, 1).unwrap();
    assert_eq!((info2.memory_quota, info2.groups.len()), (30 * GIB, 8));
    // A resize that cannot fit leaves the partition as it was.
    let huge = spec.clone().memory(200 * GIB);
    assert!(p.resize_partition(&huge, 1).is_err());
    assert_eq!(
        p.pools()
            .iter()
            .find(|x| x.name.as_deref() == Some("rt"))
            .unwrap()
            .memory_quota,
        30 * GIB
    );
    p.remove_partition("rt", 2).unwrap();
    assert_eq!(
        (
            p.pools().len(),
            p.pools()[0].memory_quota,
            p.pools()[0].groups.len()
        ),
        (1, 100 * GIB, 16)
    );
    assert!(matches!(
        p.remove_partition("rt", 2),
        Err(crate::Error::UnknownPartition { .. })
    ));
}

#[test]
fn lending_is_work_conserving_and_revocable() {
    let mut p = Planner::new(cfg());
    let b = burst(0.25, 1.0);
    assert_eq!(b.qos, QosClass::Burstable);
    p.submit(1, b, 0).unwrap();
    let (own, lent) = p.running_groups(1).unwrap();
    assert_eq!(
        (own.len(), lent.len()),
        (4, 12),
        "alone it borrows every idle group"
    );
    // A Guaranteed arrival takes 8 groups back.
    p.submit(2, g("g", GIB, 0.5), 0).unwrap();
    let (own2, _) = p.running_groups(2).unwrap();
    let (own1, lent1) = p.running_groups(1).unwrap();
    assert_eq!((own1, own2.len(), lent1.len()), (own, 8, 4));
    assert!(lent1.intersect(own2).is_empty());
    // A BestEffort task gets its place on the floor and what is left.
    let (Admission::Admitted(be), _) = p
        .submit(3, TaskSpec::new("be").resolve().unwrap(), 0)
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (be.compute.mechanism, be.compute.sms),
        (Mechanism::Floor, 0)
    );
    assert_eq!(
        p.running_groups(3).unwrap().1.len(),
        0,
        "the Burstable task borrows first"
    );
    p.finish(1, 1);
    assert_eq!(p.running_groups(3).unwrap().1.len(), 8);
    // Below one group: a whole group of its own, paced within it to its limit
    // (0.02 x 132 SMs = 2.64 SMs of 8), and the group counts in admission.
    let tiny = TaskSpec::new("tiny")
        .memory(GIB, GIB)
        .compute(0.02, 0.02)
        .resolve()
        .unwrap();
    let (Admission::Admitted(t), _) = p.submit(4, tiny, 0).unwrap() else {
        panic!()
    };
    assert_eq!(
        (t.compute.mechanism, t.compute.groups.len(), t.compute.sms),
        (Mechanism::GreenContext, 1, 8)
    );
    let pace = t.compute.pace.expect("paced within its group");
    assert!((pace - 0.02 * 132.0 / 8.0).abs() < 1e-12, "{pace}");
    assert!(p.running_groups(4).unwrap().0.intersect(own2).is_empty());
    // A Burstable request below one group with a larger limit: one group, not paced, and it
    // borrows up to its limit.
    let small = TaskSpec::new("small")
        .memory_request(GIB)
        .compute(0.02, 0.5)
        .resolve()
        .unwrap();
    let (Admission::Admitted(sg), _) = p.submit(5, small, 0).unwrap() else {
        panic!()
    };
    assert_eq!((sg.compute.groups.len(), sg.compute.pace), (1, None));
}

#[test]
fn shares_below_one_group_each_take_a_group_and_queue_when_none_is_left() {
    // 16 groups: sixteen 0.01 tasks fit, the seventeenth waits (a real guarantee each).
    let mut p = Planner::new(cfg());
    let tiny = |i: u64| {
        TaskSpec::new(format!("t{i}"))
            .memory(GIB, GIB)
            .compute(0.01, 0.01)
            .resolve()
            .unwrap()
    };
    let mut owned = GroupSet::EMPTY;
    for i in 0..16 {
        let (Admission::Admitted(g), _) = p.submit(i, tiny(i), 0).unwrap() else {
            panic!("task {i} not admitted")
        };
        assert!(owned.intersect(g.compute.groups).is_empty());
        owned = owned.union(g.compute.groups);
    }
    assert_eq!(
        p.submit(16, tiny(16), 0).unwrap().0,
        Admission::Queued { position: 0 }
    );
}

#[test]
fn pacing_layout_admits_by_share_and_lends_to_best_effort() {
    // No green contexts: virtual groups of 3 SMs; admission by share.
    let mut p = Planner::new(PlannerConfig {
        layout: SmLayout::pacing(132).unwrap(),
        ..cfg()
    });
    let half = |i: u64| g(&format!("h{i}"), GIB, 0.5);
    for i in 0..2 {
        let (Admission::Admitted(gr), _) = p.submit(i, half(i), 0).unwrap() else {
            panic!("{i}")
        };
        assert_eq!(gr.compute.mechanism, Mechanism::Pacing);
    }
    // Two halves use the GPU; a third share waits (before: any number of shares <= 0.5).
    assert!(matches!(
        p.submit(2, g("q", GIB, 0.25), 0).unwrap().0,
        Admission::Queued { .. }
    ));
    p.finish(0, 1);
    p.finish(1, 1);
    // A BestEffort task alone is lent every virtual group: its pace is the whole GPU.
    let mut p = Planner::new(PlannerConfig {
        layout: SmLayout::pacing(132).unwrap(),
        ..cfg()
    });
    p.submit(1, TaskSpec::new("be").resolve().unwrap(), 0)
        .unwrap();
    let (own, lent) = p.running_groups(1).unwrap();
    assert_eq!((own.len(), lent.len()), (0, 43));
}

#[derive(Debug, Clone)]
enum Op {
    Submit {
        qos: u8,
        mem: u64,
        share: u8,
        limit: u8,
        prio: i8,
        deadline: Option<u16>,
        part: bool,
    },
    Finish(usize),
    Cancel(usize),
    Tick(u16),
    /// A running task's work hangs: quarantined with its own and lent groups occupied.
    Hang(usize),
    /// A quarantined task's work ends after all.
    Recover(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u64..60, 0u8..17, 0u8..17, -2i8..3, proptest::option::of(1u16..500), any::<bool>())
            .prop_map(|(qos, mem, share, limit, prio, deadline, part)| Op::Submit { qos, mem, share, limit, prio, deadline, part }),
        3 => (0usize..64).prop_map(Op::Finish),
        1 => (0usize..64).prop_map(Op::Cancel),
        1 => (1u16..300).prop_map(Op::Tick),
        1 => (0usize..64).prop_map(Op::Hang),
        1 => (0usize..64).prop_map(Op::Recover),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Never overcommit requests, never grant past a limit, own groups disjoint, lent groups
    /// only to non-Guaranteed tasks and only idle ones, never a group hung work may occupy to a
    /// task started after the hang nor as a loan; and once all work drains, every submitted
    /// task has either run or been rejected with a reason.
    #[test]
    fn planner_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let mut c = cfg();
        c.max_running = 6;
        c.max_queue = 20;
        let mut p = Planner::new(c.clone());
        p.create_partition(&Partition::new("p").memory(30 * GIB).compute(0.25).priority_band(1)).unwrap();
        let mut now = 0u64;
        let mut next_id = 0u64;
        let mut outcome: BTreeMap<TaskId, &'static str> = BTreeMap::new();
        // Quarantined tasks: (id, groups its work may occupy, tasks running at the hang).
        let mut hung: Vec<(TaskId, GroupSet, BTreeSet<TaskId>)> = Vec::new();
        let record = |outcome: &mut BTreeMap<TaskId, &'static str>, ev: &[Event]| {
            for e in ev {
                match e {
                    Event::Started(t, _) => { outcome.insert(*t, "ran"); }
                    Event::Rejected(t, _) => { outcome.insert(*t, "rejected"); }
                }
            }
        };
        for op in ops {
            match op {
                Op::Submit { qos, mem, share, limit, prio, deadline, part } => {
                    let mut s = TaskSpec::new("t").priority(prio as i32);
                    let m = (mem + 1) * GIB / 2;
                    let sh = share.max(1) as f64 / 16.0;
                    let li = (limit.max(share.max(1))) as f64 / 16.0;
                    s = match qos {
                        0 => s.memory(m, m).compute(sh, sh),
                        1 => s.memory(m, m + GIB).compute(sh, li),
                        _ => s,
                    };
                    if let Some(d) = deadline { s = s.deadline(Duration::from_millis(d as u64)); }
                    if part { s = s.partition("p"); }
                    let id = next_id; next_id += 1;
                    let (d, ev) = p.submit(id, s.resolve().unwrap(), now).unwrap();
                    record(&mut outcome, &ev);
                    match d {
                        Admission::Admitted(_) => { outcome.insert(id, "ran"); }
                        Admission::Queued { .. } => { outcome.insert(id, "queued"); }
                        Admission::Rejected { requested, available, .. } => { prop_assert!(requested > available || available == 0); outcome.insert(id, "rejected"); }
                    }
                }
                Op::Finish(i) => {
                    let r = p.running_tasks();
                    if !r.is_empty() { let ev = p.finish(r[i % r.len()], now); record(&mut outcome, &ev); }
                }
                Op::Cancel(i) => {
                    let q = p.queued_tasks();
                    if !q.is_empty() { let t = q[i % q.len()]; let (ok, ev) = p.cancel(t, now); prop_assert!(ok); outcome.insert(t, "cancelled"); record(&mut outcome, &ev); }
                }
                Op::Tick(ms) => { now += ms as u64 * 1_000_000; let ev = p.schedule(now); record(&mut outcome, &ev); }
                Op::Hang(i) => {
                    let r = p.running_tasks();
                    if !r.is_empty() {
                        let t = r[i % r.len()];
                        let (own, lent) = p.running_groups(t).unwrap();
                        let (ok, ev) = p.quarantine(t, own.union(lent), now);
                        prop_assert!(ok);
                        record(&mut outcome, &ev);
                        let others: BTreeSet<TaskId> = p.running_tasks().into_iter().collect();
                        hung.push((t, own.union(lent), others));
                    }
                }
                Op::Recover(i) => {
                    if !hung.is_empty() {
                        let (t, _, _) = hung.remove(i % hung.len());
                        let ev = p.finish(t, now);
                        record(&mut outcome, &ev);
                    }
                }
            }
            // Invariants.
            let running = p.running_tasks();
            prop_assert!(running.len() <= c.max_running);
            let mut used_own = GroupSet::EMPTY;
            let mut used_any = GroupSet::EMPTY;
            for pool in p.pools() {
                prop_assert!(pool.memory_committed <= pool.memory_quota, "overcommitted {pool:?}");
            }
            let mut committed: BTreeMap<Option<String>, u64> = BTreeMap::new();
            for &t in &running {
                let spec = p.spec(t).unwrap().clone();
                let (own, lent) = p.running_groups(t).unwrap();
                let grant = p.grant(t).unwrap();
                *committed.entry(spec.partition.clone()).or_default() += spec.memory_request;
                prop_assert!(own.intersect(used_own).is_empty(), "own groups overlap");
                prop_assert!(own.union(lent).intersect(used_any).is_empty(), "usable groups overlap");
                used_own = used_own.union(own);
                used_any = used_any.union(own).union(lent);
                prop_assert_eq!(own.len(), c.layout.groups_for_share(spec.compute_request));
                if spec.qos == QosClass::Guaranteed { prop_assert!(lent.is_empty()); }
                if let Some(l) = spec.compute_limit { prop_assert!(own.len() + lent.len() <= c.layout.groups_for_share(l).max(own.len())); }
                if let Some(l) = spec.memory_limit { prop_assert!(grant.memory_limit <= l); }
                let pool = p.pools().into_iter().find(|x| x.name == spec.partition).unwrap();
                prop_assert!(pool.groups.contains(own.union(lent)), "groups outside the task's pool");
                for (h, occupied, before) in &hung {
                    prop_assert!(lent.intersect(*occupied).is_empty(), "lent groups task {h}'s hung work occupies");
                    if !before.contains(&t) {
                        prop_assert!(own.intersect(*occupied).is_empty(), "task {t} put on groups task {h}'s hung work occupies");
                    }
                }
            }
            for pool in p.pools() {
                let q = hung.iter().fold(GroupSet::EMPTY, |a, (_, o, _)| a.union(*o)).intersect(pool.groups);
                prop_assert_eq!(pool.groups_quarantined, q);
            }
            for &(h, _, _) in &hung {
                let spec = p.spec(h).unwrap().clone();
                *committed.entry(spec.partition.clone()).or_default() += spec.memory_request;
            }
            for pool in p.pools() {
                prop_assert_eq!(committed.get(&pool.name).copied().unwrap_or(0), pool.memory_committed);
            }
        }
        // Drain: the hung work ends, then finish everything; every task ends as ran / rejected
        // / cancelled.
        for (h, _, _) in hung.drain(..) {
            let ev = p.finish(h, now);
            record(&mut outcome, &ev);
        }
        for _ in 0..200 {
            let r = p.running_tasks();
            if r.is_empty() { break; }
            let ev = p.finish(r[0], now);
            record(&mut outcome, &ev);
        }
        prop_assert!(p.queued_tasks().is_empty(), "left queued: {:?}", p.queued_tasks());
        let left: BTreeSet<_> = outcome.iter().filter(|(_, v)| **v == "queued").map(|(k, _)| *k).collect();
        prop_assert!(left.is_empty(), "never ran nor rejected: {left:?}");
    }
}

#[test]
fn h200_burstable_gives_back_everything_to_a_guaranteed_arrival() {
    let mut c = cfg();
    c.layout = SmLayout::with_groups(132, 8, 15, true).unwrap();
    let mut p = Planner::new(c);
    let b = TaskSpec::new("b")
        .memory_request("256MiB")
        .compute(0.25, 1.0)
        .resolve()
        .unwrap();
    p.submit(1, b, 0).unwrap();
    assert_eq!(p.take_lend_changes().last().map(|(_, g)| g.len()), Some(15));
    let g = TaskSpec::new("g")
        .memory("256MiB", "256MiB")
        .compute(0.75, 0.75)
        .resolve()
        .unwrap();
    assert!(matches!(
        p.submit(2, g, 0).unwrap().0,
        Admission::Admitted(_)
    ));
    let (own, lent) = p.running_groups(1).unwrap();
    assert_eq!((own.len(), lent.len()), (4, 0));
    let changes = p.take_lend_changes();
    assert!(
        changes.iter().any(|(t, set)| *t == 1 && set.len() == 4),
        "{changes:?}"
    );
}

#[test]
fn requests_not_usage_decide_admission() -> crate::Result<()> {
    let cfg = PlannerConfig {
        memory_capacity: 10 << 30,
        layout: SmLayout::new(132, 8, true)?,
        max_running: 8,
        max_queue: 64,
        max_bypass: 4,
    };
    let mut p = Planner::new(cfg);
    let g = TaskSpec::new("g")
        .memory("4GiB", "4GiB")
        .compute(0.25, 0.25)
        .resolve()?;
    let (Admission::Admitted(grant), _) = p.submit(1, g.clone(), 0)? else {
        panic!("not admitted")
    };
    assert_eq!((grant.compute.groups.len(), grant.compute.sms), (4, 32));
    // Requests, not usage: a third 4 GiB request does not fit in 10 GiB.
    p.submit(2, g.clone(), 0)?;
    assert_eq!(p.submit(3, g, 0)?.0, Admission::Queued { position: 0 });
    let started = p.finish(1, 1);
    assert!(matches!(started[0], Event::Started(3, _)));
    Ok(())
}

#[test]
fn drain_queue_starts_nothing() {
    let mut p = Planner::new(cfg());
    p.submit(1, g("big", 90 * GIB, 0.25), 0).unwrap();
    p.submit(2, g("blocked", 20 * GIB, 0.25), 0).unwrap();
    p.submit(3, g("small", GIB, 0.25), 0).unwrap();
    assert_eq!(p.queued_tasks(), vec![2]);
    assert_eq!(p.drain_queue(), vec![2]);
    assert!(p.queued_tasks().is_empty());
    assert!(p.take_lend_changes().iter().all(|(id, _)| *id != 2));
    assert_eq!(p.running_tasks(), vec![1, 3]);
}

/// A quarantined task frees its worker slot but keeps its groups, the lent groups its work
/// may occupy and its memory commitment, and lends nothing; finishing it releases them.
#[test]
fn quarantine_keeps_groups_and_memory_but_frees_the_slot() {
    let mut c = cfg();
    c.max_running = 1;
    let mut p = Planner::new(c);
    let (d, _) = p.submit(1, g("hung", 40 * GIB, 0.25), 0).unwrap();
    let Admission::Admitted(grant) = d else {
        panic!("{d:?}")
    };
    let own = grant.compute.groups;
    // A second task waits for the only worker slot.
    assert_eq!(
        p.submit(2, g("next", 40 * GIB, 0.25), 0).unwrap().0,
        Admission::Queued { position: 0 }
    );
    // Its work also occupies two idle groups (lent to it before).
    let occupied = own.union(GroupSet(0b11 << 8));
    let (ok, events) = p.quarantine(1, occupied, 1);
    assert!(ok);
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Started(id, g) => Some((*id, g.compute.groups)),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1, "the freed slot starts the next task");
    let (_, next_groups) = started[0];
    assert!(
        next_groups.intersect(occupied).is_empty(),
        "put on hung SMs"
    );
    let pool = &p.pools()[0];
    assert_eq!(pool.memory_committed, 80 * GIB);
    assert!(pool.groups_assigned.contains(own));
    assert_eq!(pool.groups_quarantined, occupied);
    // Quarantined twice, or a queued task: nothing happens.
    assert!(!p.quarantine(1, occupied, 2).0);
    // A third task needing everything waits until the work ends.
    assert!(matches!(
        p.submit(3, g("all", 10 * GIB, 1.0), 2).unwrap().0,
        Admission::Queued { .. }
    ));
    assert!(p.finish(2, 3).is_empty(), "still quarantined");
    let started = p.finish(1, 4);
    assert!(matches!(started[..], [Event::Started(3, _)]), "{started:?}");
}

/// Hung work on groups that were lent to it and have been given to another task since: those
/// groups stay out of service when that task ends (before: they were free again at once, and
/// the next task was put on SMs a never-ending kernel holds), and nothing lends them.
#[test]
fn quarantined_work_keeps_lent_groups_that_another_task_owns_out_of_service() {
    let mut p = Planner::new(cfg());
    let b = burst(0.25, 0.5);
    p.submit(1, b, 0).unwrap();
    let (own_b, lent_b) = p.running_groups(1).unwrap();
    assert_eq!((own_b.len(), lent_b.len()), (4, 4));
    // A Guaranteed arrival needs more than the idle groups nobody borrows: it takes the lent
    // ones too; the borrower's kernels may still run there (they move off at its next launch,
    // which never comes).
    p.submit(2, g("g", GIB, 0.75), 0).unwrap();
    let (own_g, _) = p.running_groups(2).unwrap();
    assert!(own_g.contains(lent_b), "took the lent groups");
    let occupied = own_b.union(lent_b);
    assert!(p.quarantine(1, occupied, 1).0);
    let pool = p.pools()[0].clone();
    assert_eq!(pool.groups_quarantined, occupied);
    assert!(pool.groups_assigned.contains(own_b.union(own_g)));
    // The Guaranteed task ends: its groups stay out of service (the hung work may hold them).
    assert!(p.finish(2, 2).is_empty());
    let pool = p.pools()[0].clone();
    assert_eq!(pool.groups_assigned, own_b);
    assert_eq!(pool.groups_quarantined, occupied);
    // A task that needs every group not occupied by the hung work starts; one more group
    // does not fit; a BestEffort borrower is lent nothing of the held groups.
    let rest = p.config().layout.all().minus(occupied);
    let need = rest.len() as f64 / p.config().layout.groups as f64;
    let (d, _) = p.submit(3, g("rest", GIB, need), 3).unwrap();
    let Admission::Admitted(grant) = d else {
        panic!("{d:?}")
    };
    assert_eq!(grant.compute.groups, rest);
    p.finish(3, 4);
    let burst = TaskSpec::new("burst2")
        .memory_request(GIB)
        .compute(0.01, 1.0)
        .resolve()
        .unwrap();
    p.submit(4, burst, 5).unwrap();
    let (own4, lent4) = p.running_groups(4).unwrap();
    assert!(
        own4.union(lent4).intersect(occupied).is_empty(),
        "{own4} + {lent4} on held groups {occupied}"
    );
    // The work ends: everything comes back.
    p.finish(4, 6);
    p.finish(1, 7);
    let pool = p.pools()[0].clone();
    assert_eq!(pool.groups_assigned, GroupSet::EMPTY);
    assert_eq!(pool.groups_quarantined, GroupSet::EMPTY);
    assert_eq!(pool.memory_committed, 0);
}

/// Groups an earlier scheduler's hung work occupies (inherited) are given to no task and lent
/// to none; a task that needs them waits; setting fewer starts it.
#[test]
fn inherited_groups_are_out_of_service_until_set_again() {
    let mut p = Planner::new(cfg());
    let hung = GroupSet::first(4);
    assert!(p.set_inherited(hung, 0).is_empty());
    assert_eq!(p.inherited(), hung);
    assert_eq!(p.pools()[0].groups_quarantined, hung);
    // A quarter goes to the groups after them.
    let (d, _) = p.submit(1, g("a", GIB, 0.25), 0).unwrap();
    let Admission::Admitted(grant) = d else {
        panic!("{d:?}")
    };
    assert!(grant.compute.groups.intersect(hung).is_empty(), "{grant:?}");
    // A borrower is lent nothing of them.
    let b = burst(0.25, 1.0);
    p.submit(2, b, 0).unwrap();
    let (own_b, lent_b) = p.running_groups(2).unwrap();
    assert!(own_b.union(lent_b).intersect(hung).is_empty());
    // The whole GPU waits until the work ends.
    assert!(matches!(
        p.submit(3, g("all", GIB, 1.0), 1).unwrap().0,
        Admission::Queued { .. }
    ));
    assert!(p.finish(1, 2).is_empty());
    assert!(
        p.finish(2, 3).is_empty(),
        "the inherited groups are still out"
    );
    let started = p.set_inherited(GroupSet::EMPTY, 4);
    assert!(matches!(started[..], [Event::Started(3, _)]), "{started:?}");
    assert_eq!(p.pools()[0].groups_quarantined, GroupSet::EMPTY);
}
