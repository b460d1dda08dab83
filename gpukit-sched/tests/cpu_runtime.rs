//! The scheduler's CPU side without a GPU ([`Scheduler::cpu_only`]): the same planner, ledger,
//! state machine, timer and workers as on a device. Every failure path ends with one outcome,
//! in the right state, within a stated bound; memory reservations go through the ledger's
//! charge path (the one gpukit-core's allocator calls), so the memory rules are tested here too.

use gpukit_sched::{
    Admission, CancelReason, Error, HolderKind, MemoryReservation, PanicPoint, Partition, QosClass,
    Resource, TaskContext, TaskSpec, TaskState,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

mod common;
use common::*;

#[test]
fn every_task_runs_once_with_and_without_polling() {
    for spin in [
        Duration::ZERO,
        Duration::from_micros(100),
        Duration::from_millis(5),
    ] {
        let s = sched(spin);
        let ran = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for i in 0..200 {
            let r = ran.clone();
            hs.push(
                s.submit(
                    move |_: &mut TaskContext| -> R<usize> {
                        r.fetch_add(1, Ordering::Relaxed);
                        Ok(i)
                    },
                    spec(),
                )
                .unwrap(),
            );
            if i % 7 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        for (i, h) in hs.into_iter().enumerate() {
            assert_eq!(h.wait().unwrap(), i);
        }
        assert_eq!(ran.load(Ordering::Relaxed), 200);
        let st = s.stats();
        assert_eq!(
            (
                st.submitted,
                st.count(TaskState::Succeeded),
                st.count(TaskState::Failed)
            ),
            (200, 200, 0)
        );
    }
}

#[test]
fn queue_panic_cancel() {
    let s = sched(Duration::from_micros(100));
    let g = gate();
    let blockers: Vec<_> = (0..3)
        .map(|_| s.submit(hold(&g), spec()).unwrap())
        .collect();
    assert!(blockers
        .iter()
        .all(|b| matches!(b.admission(), Admission::Admitted(_))));
    let panics = s
        .submit(
            |_: &mut TaskContext| -> R<()> { panic!("boom") },
            TaskSpec::new("p")
                .memory("1MiB", "1MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert_eq!(panics.admission(), &Admission::Queued { position: 0 });
    let cancelled = s
        .submit(|_: &mut TaskContext| Ok::<_, Error>(()), spec())
        .unwrap();
    assert_eq!(cancelled.admission(), &Admission::Queued { position: 1 });
    assert!(cancelled.cancel());
    assert!(!cancelled.cancel(), "a second cancel changes nothing");
    assert_eq!(cancelled.state(), TaskState::Cancelled);
    assert!(matches!(
        cancelled.wait(),
        Err(Error::Cancelled {
            reason: CancelReason::Requested,
            ..
        })
    ));
    let left = s
        .submit(|_: &mut TaskContext| Ok::<_, Error>(()), spec())
        .unwrap();
    g.store(true, Ordering::Relaxed);
    for b in blockers {
        b.wait().unwrap();
    }
    match finish(panics, Duration::from_secs(10)) {
        Err(Error::Panicked { task, message }) => assert_eq!((&*task, &*message), ("p", "boom")),
        other => panic!("{other:?}"),
    }
    left.wait().unwrap();
}

#[test]
fn no_device_is_an_error_not_a_panic() {
    let s = sched(Duration::ZERO);
    assert!(matches!(s.device(), Err(Error::NoDevice)));
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<(bool, bool, bool)> {
                Ok((
                    matches!(ctx.device(), Err(Error::NoDevice)),
                    matches!(ctx.alloc(1024), Err(Error::NoDevice)),
                    matches!(ctx.stream(), Err(Error::NoDevice)),
                ))
            },
            spec(),
        )
        .unwrap();
    assert_eq!(finish(h, SLACK).unwrap(), (true, true, true));
}

/// Panics anywhere in a task's life — its closure, or the scheduler's own code before or after
/// the closure (what a driver symbol missing inside cudarc does) — end that task with an error
/// and release everything; the single worker goes on serving.
#[test]
fn panics_anywhere_release_everything_and_the_worker_lives() {
    for point in [
        None,
        Some(PanicPoint::BeforeClosure),
        Some(PanicPoint::AfterClosure),
    ] {
        let mut c = cfg().workers(1);
        if let Some(p) = point {
            c = c.inject_panic(p, "victim");
        }
        let s = sched_with(1000, c);
        let h = s
            .submit(
                move |ctx: &mut TaskContext| -> R<MemoryReservation> {
                    let r = ctx.reserve_memory(400)?;
                    if point.is_none() {
                        panic!("closure panic");
                    }
                    drop(r);
                    ctx.reserve_memory(300)
                },
                TaskSpec::new("victim")
                    .memory(500u64, 500u64)
                    .compute(0.5, 0.5),
            )
            .unwrap();
        let id = h.id();
        // Generous: with RUST_BACKTRACE set, the panic hook symbolizes a backtrace first.
        let r = finish(h, Duration::from_secs(10));
        match (point, &r) {
            (None, Err(Error::Panicked { message, .. })) => assert_eq!(message, "closure panic"),
            (Some(_), Err(Error::Internal { message, .. })) => {
                assert!(message.contains("injected panic"), "{message}")
            }
            _ => panic!("{point:?}: {r:?}"),
        }
        let st = s.stats();
        let t = st.tasks.iter().find(|t| t.id == id).unwrap();
        assert_eq!(t.state, TaskState::Failed, "{point:?}");
        // Everything is back: commitment, groups, memory (the value the closure returned
        // before the injected panic after it is dropped with the failed result).
        let pool = &st.partitions[0];
        assert_eq!(pool.pool.memory_committed, 0, "{point:?}");
        assert!(pool.pool.groups_assigned.is_empty(), "{point:?}");
        assert!(
            wait_until(SLACK, || s.stats().partitions[0].memory.in_use == 0),
            "{point:?}: memory still charged"
        );
        // The one worker is alive and takes the next task.
        let next = s
            .submit(
                |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(1000)?.bytes()) },
                TaskSpec::new("next")
                    .memory(1000u64, 1000u64)
                    .compute(1.0, 1.0),
            )
            .unwrap();
        assert_eq!(
            finish(next, Duration::from_secs(10)).unwrap(),
            1000,
            "{point:?}"
        );
    }
}

#[test]
fn rejection_keeps_resource_requested_available() {
    let s = sched_with(1000, cfg());
    let h = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("big").memory(1001u64, 1001u64),
        )
        .unwrap();
    assert_eq!(
        h.admission(),
        &Admission::Rejected {
            resource: Resource::Memory,
            requested: 1001,
            available: 1000
        }
    );
    assert_eq!(h.state(), TaskState::Rejected);
    assert!(matches!(
        h.wait(),
        Err(Error::Rejected {
            resource: Resource::Memory,
            requested: 1001,
            available: 1000,
            ..
        })
    ));
    // A bad spec is an error and leaves nothing behind.
    assert!(s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("bad").memory(2u64, 1u64)
        )
        .is_err());
    assert_eq!(s.stats().submitted, 1);
}

/// Cancelling a running task: at its next safe point (Cancelled, within one safe-point
/// interval); a closure that returns Ok before seeing it keeps its result; an unrelated error
/// stays that error (Failed).
#[test]
fn cancellation_outcomes() {
    let s = sched(Duration::ZERO);
    let started = gate();
    let st2 = started.clone();
    let h = s
        .submit(
            move |ctx: &mut TaskContext| -> R<()> {
                st2.store(true, Ordering::Release);
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            spec(),
        )
        .unwrap();
    assert!(wait_until(SLACK, || started.load(Ordering::Acquire)));
    let t = Instant::now();
    assert!(h.cancel());
    let r = finish(h, GRACE + SLACK);
    let took = t.elapsed();
    assert!(
        matches!(
            r,
            Err(Error::Cancelled {
                reason: CancelReason::Requested,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(took < Duration::from_millis(5) + SLACK, "{took:?}");

    // Ok after the flag, without a safe point in between: the result stands.
    let go = gate();
    let in_task = gate();
    let (g2, i2) = (go.clone(), in_task.clone());
    let h = s
        .submit(
            move |_: &mut TaskContext| -> R<u32> {
                i2.store(true, Ordering::Release);
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(7)
            },
            spec(),
        )
        .unwrap();
    assert!(wait_until(SLACK, || in_task.load(Ordering::Acquire)));
    assert!(h.cancel());
    go.store(true, Ordering::Release);
    assert_eq!(finish(h, GRACE + SLACK).unwrap(), 7);

    // An error of its own after the flag (no safe point seen): Failed with that error.
    #[derive(Debug, thiserror::Error)]
    #[error("disk full")]
    struct DiskFull;
    let go = gate();
    let in_task = gate();
    let (g2, i2) = (go.clone(), in_task.clone());
    let h = s
        .submit(
            move |_: &mut TaskContext| -> Result<(), DiskFull> {
                i2.store(true, Ordering::Release);
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(DiskFull)
            },
            spec(),
        )
        .unwrap();
    assert!(wait_until(SLACK, || in_task.load(Ordering::Acquire)));
    let id = h.id();
    h.cancel();
    go.store(true, Ordering::Release);
    let e = finish(h, GRACE + SLACK).unwrap_err();
    assert!(e.task_error::<DiskFull>().is_some(), "{e:?}");
    assert_eq!(s.task_stats(id).unwrap().state, TaskState::Failed);
}

/// A task that never reaches a safe point: its handle completes at the grace period (the
/// stated bound), detached; its resources stay taken until its closure returns.
#[test]
fn a_task_that_never_yields_is_detached_at_the_grace_period() {
    let s = sched_with(1000, cfg().workers(1));
    let release = gate();
    let entered = gate();
    let (r2, e2) = (release.clone(), entered.clone());
    let h = s
        .submit(
            move |ctx: &mut TaskContext| -> R<()> {
                let _held = ctx.reserve_memory(100)?;
                e2.store(true, Ordering::Release);
                while !r2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            },
            TaskSpec::new("stuck")
                .memory(200u64, 200u64)
                .compute(0.5, 0.5),
        )
        .unwrap();
    let id = h.id();
    assert!(wait_until(SLACK, || entered.load(Ordering::Acquire)));
    let t = Instant::now();
    assert!(h.cancel());
    let r = finish(h, GRACE + SLACK);
    let took = t.elapsed();
    assert!(matches!(r, Err(Error::Cancelled { .. })), "{r:?}");
    assert!(took >= GRACE && took < GRACE + SLACK, "{took:?}");
    let ts = s.task_stats(id).unwrap();
    assert_eq!(
        (ts.state, ts.detached, ts.memory_in_use),
        (TaskState::Cancelled, true, 100)
    );
    assert_eq!(s.stats().detached_running, 1);
    assert_eq!(s.stats().partitions[0].pool.memory_committed, 200);
    // The closure returns: everything is released, the outcome stays.
    release.store(true, Ordering::Release);
    assert!(wait_until(SLACK, || s.stats().partitions[0]
        .pool
        .memory_committed
        == 0));
    let ts = s.task_stats(id).unwrap();
    assert_eq!(
        (ts.state, ts.detached, ts.memory_in_use),
        (TaskState::Cancelled, false, 0)
    );
    assert_eq!(s.stats().count(TaskState::Cancelled), 1);
}

#[test]
fn timeouts_stop_running_tasks() {
    let s = sched(Duration::ZERO);
    let timeout = Duration::from_millis(60);
    let t = Instant::now();
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<()> {
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            spec().timeout(timeout),
        )
        .unwrap();
    let r = finish(h, timeout + GRACE + SLACK);
    let took = t.elapsed();
    assert!(
        matches!(r, Err(Error::TimedOut { timeout: d, .. }) if d == timeout),
        "{r:?}"
    );
    assert!(took >= timeout && took < timeout + SLACK, "{took:?}");
    // Never yielding: detached as TimedOut at timeout + grace.
    let release = gate();
    let t = Instant::now();
    let h = s.submit(hold(&release), spec().timeout(timeout)).unwrap();
    let id = h.id();
    let r = finish(h, timeout + GRACE + SLACK);
    let took = t.elapsed();
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    assert!(
        took >= timeout + GRACE && took < timeout + GRACE + SLACK,
        "{took:?}"
    );
    assert_eq!(s.task_stats(id).unwrap().state, TaskState::TimedOut);
    release.store(true, Ordering::Release);
    // A task that ends before its timeout is not touched.
    let h = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(5),
            spec().timeout(timeout),
        )
        .unwrap();
    assert_eq!(finish(h, SLACK).unwrap(), 5);
}

/// A queued task's deadline ends it on a timer, with nothing else happening in the scheduler.
#[test]
fn deadlines_expire_on_a_timer() {
    let s = sched_with(1 << 30, cfg().workers(1));
    let g = gate();
    let blocker = s.submit(hold(&g), spec()).unwrap();
    let deadline = Duration::from_millis(80);
    let t = Instant::now();
    let h = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            spec().deadline(deadline),
        )
        .unwrap();
    assert_eq!(h.admission(), &Admission::Queued { position: 0 });
    let r = finish(h, deadline + SLACK);
    let took = t.elapsed();
    assert!(
        matches!(r, Err(Error::DeadlineExpired { deadline: d, .. }) if d == deadline),
        "{r:?}"
    );
    assert!(took >= deadline && took < deadline + SLACK, "{took:?}");
    assert_eq!(s.stats().count(TaskState::Expired), 1);
    g.store(true, Ordering::Relaxed);
    blocker.wait().unwrap();
    // A deadline that is met: the task runs.
    let h = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(1),
            spec().deadline(deadline),
        )
        .unwrap();
    assert_eq!(finish(h, SLACK).unwrap(), 1);
}

fn be_hog(
    name: &str,
    prio: i32,
    bytes: u64,
    filled: &Arc<AtomicUsize>,
    yields: bool,
    release: &Arc<AtomicBool>,
) -> (
    impl FnOnce(&mut TaskContext) -> R<()> + Send + 'static,
    TaskSpec,
) {
    let (f, rel) = (filled.clone(), release.clone());
    (
        move |ctx: &mut TaskContext| -> R<()> {
            let _held = ctx.reserve_memory(bytes)?;
            f.fetch_add(1, Ordering::Release);
            while !rel.load(Ordering::Acquire) {
                if yields {
                    ctx.check()?;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        },
        TaskSpec::new(name).priority(prio),
    )
}

/// A Guaranteed arrival evicts BestEffort tasks (lowest priority first), only as many as
/// needed, and gets every byte it asked for.
#[test]
fn preemption_in_kubernetes_order_and_guaranteed_never_fails() {
    let s = sched_with(1000, cfg().workers(4));
    let filled = Arc::new(AtomicUsize::new(0));
    let never = gate();
    let mut bes = Vec::new();
    for (name, prio) in [("be-low", -1), ("be-high", 1), ("be-mid", 0)] {
        let (f, spec) = be_hog(name, prio, 300, &filled, true, &never);
        bes.push(s.submit(f, spec).unwrap());
    }
    assert!(wait_until(SLACK, || filled.load(Ordering::Acquire) == 3));
    // 900 in use; a Guaranteed 500 needs 400 back: be-low (300) and be-mid (300).
    let t = Instant::now();
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> {
                let a = ctx.reserve_memory(250)?;
                let b = ctx.reserve_memory(250)?;
                Ok(a.bytes() + b.bytes())
            },
            TaskSpec::new("g")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert_eq!(finish(g, SLACK).unwrap(), 500);
    assert!(t.elapsed() < SLACK);
    let ev: Vec<String> = s.stats().evictions.iter().map(|e| e.1.clone()).collect();
    assert_eq!(ev, ["be-low", "be-mid"]);
    never.store(true, Ordering::Release);
    let r: Vec<R<()>> = bes.into_iter().map(|h| finish(h, SLACK)).collect();
    assert!(
        matches!(&r[0], Err(Error::Preempted { task, .. }) if task == "be-low"),
        "{:?}",
        r[0]
    );
    assert!(r[1].is_ok(), "be-high was not needed: {:?}", r[1]);
    assert!(matches!(&r[2], Err(Error::Preempted { .. })), "{:?}", r[2]);
    let st = s.stats();
    assert_eq!((st.count(TaskState::Preempted), st.evictions_total), (2, 2));
}

/// A victim that never reaches a safe point: at the grace period its handle completes
/// Preempted (detached), and the starter fails with MemoryUnavailable naming it — both
/// within the bound; once the victim returns, its memory comes back.
#[test]
fn preemption_of_a_task_that_never_yields() {
    let s = sched_with(1000, cfg().workers(2));
    let filled = Arc::new(AtomicUsize::new(0));
    let release = gate();
    let (f, spec) = be_hog("stuck", 0, 900, &filled, false, &release);
    let victim = s.submit(f, spec).unwrap();
    assert!(wait_until(SLACK, || filled.load(Ordering::Acquire) == 1));
    let t = Instant::now();
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(500)?.bytes()) },
            TaskSpec::new("g")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    let gid = g.id();
    let rv = finish(victim, GRACE + SLACK);
    let victim_took = t.elapsed();
    let rg = finish(g, GRACE + SLACK);
    let starter_took = t.elapsed();
    assert!(matches!(rv, Err(Error::Preempted { .. })), "{rv:?}");
    assert!(
        matches!(&rg, Err(Error::MemoryUnavailable { holders, missing: 400, .. })
            if holders.len() == 1 && holders[0].task.as_deref() == Some("stuck")
                && holders[0].kind == HolderKind::Stopping && holders[0].bytes == 900),
        "{rg:?}"
    );
    for took in [victim_took, starter_took] {
        assert!(took >= GRACE && took < GRACE + SLACK, "{took:?}");
    }
    assert_eq!(s.task_stats(gid).unwrap().state, TaskState::Failed);
    assert_eq!(
        s.stats().partitions[0].memory.in_use,
        900,
        "still held by the victim"
    );
    release.store(true, Ordering::Release);
    assert!(wait_until(SLACK, || s.stats().partitions[0].memory.in_use == 0));
    // Now the same Guaranteed request starts at once.
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(500)?.bytes()) },
            TaskSpec::new("g2")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert_eq!(finish(g, SLACK).unwrap(), 500);
}

/// A victim asked to stop that finishes with Ok before its next safe point keeps its result.
#[test]
fn a_preempted_task_that_finishes_keeps_its_ok() {
    let s = sched_with(1000, cfg().stop_grace(Duration::from_secs(5)));
    let filled = Arc::new(AtomicUsize::new(0));
    let f2 = filled.clone();
    let flagged = gate();
    let fl = flagged.clone();
    let victim = s
        .submit(
            move |ctx: &mut TaskContext| -> R<&'static str> {
                let held = ctx.reserve_memory(900)?;
                f2.fetch_add(1, Ordering::Release);
                while !fl.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                drop(held);
                Ok("done anyway")
            },
            TaskSpec::new("victim"),
        )
        .unwrap();
    let vid = victim.id();
    assert!(wait_until(SLACK, || filled.load(Ordering::Acquire) == 1));
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(500)?.bytes()) },
            TaskSpec::new("g")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert!(wait_until(SLACK, || s.task_stats(vid).unwrap().preempted));
    flagged.store(true, Ordering::Release);
    assert_eq!(finish(victim, SLACK).unwrap(), "done anyway");
    assert_eq!(finish(g, SLACK).unwrap(), 500);
    assert_eq!(s.task_stats(vid).unwrap().state, TaskState::Succeeded);
}

/// Shutdown with running tasks: queued ones are cancelled at once, running ones get the
/// deadline, then a stop; one that reaches no safe point is detached. Total time within
/// timeout + grace (+ slack).
#[test]
fn shutdown_with_running_tasks_has_a_deadline() {
    let s = sched_with(1 << 30, cfg().workers(3));
    let short = s
        .submit(
            |_: &mut TaskContext| -> R<u8> {
                std::thread::sleep(Duration::from_millis(20));
                Ok(1)
            },
            spec(),
        )
        .unwrap();
    let yields = s
        .submit(
            |ctx: &mut TaskContext| -> R<()> {
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            spec(),
        )
        .unwrap();
    let release = gate();
    let stuck = s.submit(hold(&release), spec()).unwrap();
    let queued = s
        .submit(|_: &mut TaskContext| Ok::<_, Error>(()), spec())
        .unwrap();
    assert!(matches!(queued.admission(), Admission::Queued { .. }));
    let timeout = Duration::from_millis(100);
    let t = Instant::now();
    let report = s.shutdown(timeout);
    let took = t.elapsed();
    assert_eq!(
        (
            report.cancelled_queued,
            report.finished,
            report.stopped,
            report.detached
        ),
        (1, 1, 1, 1),
        "{report:?}"
    );
    assert!(
        took >= timeout && took < timeout + GRACE + SLACK,
        "{took:?}"
    );
    assert_eq!(short.wait().unwrap(), 1);
    assert!(matches!(
        yields.wait(),
        Err(Error::Cancelled {
            reason: CancelReason::Shutdown,
            ..
        })
    ));
    assert!(matches!(
        stuck.wait(),
        Err(Error::Cancelled {
            reason: CancelReason::Shutdown,
            ..
        })
    ));
    assert!(matches!(
        queued.wait(),
        Err(Error::Cancelled {
            reason: CancelReason::Shutdown,
            ..
        })
    ));
    release.store(true, Ordering::Release);
}

/// Dropping the scheduler is a shutdown with `shutdown_timeout`: it signals running tasks and
/// returns within the bound.
#[test]
fn drop_signals_running_tasks_and_returns() {
    let s = sched_with(1 << 30, cfg());
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<()> {
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            spec(),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(10));
    let t = Instant::now();
    drop(s);
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(200) + GRACE + SLACK,
        "{took:?}"
    );
    assert!(matches!(h.wait(), Err(Error::Cancelled { .. })));
}

struct Flag(Mutex<bool>, std::sync::Condvar);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        *self.0.lock().unwrap() = true;
        self.1.notify_all();
    }
}

/// A minimal executor: polls, sleeps until woken, polls again.
fn block_on<F: Future + Unpin>(mut f: F) -> (F::Output, usize) {
    let flag = Arc::new(Flag(Mutex::new(false), std::sync::Condvar::new()));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(v) = Pin::new(&mut f).poll(&mut cx) {
            return (v, polls);
        }
        let mut woken = flag.0.lock().unwrap();
        while !*woken {
            woken = flag.1.wait(woken).unwrap();
        }
        *woken = false;
    }
}

#[test]
fn a_handle_is_a_future_woken_by_the_task_end() {
    let s = sched(Duration::ZERO);
    let g = gate();
    let g2 = g.clone();
    let h = s
        .submit(
            move |_: &mut TaskContext| -> R<u32> {
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(42)
            },
            spec(),
        )
        .unwrap();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        g.store(true, Ordering::Release);
    });
    let (v, polls) = block_on(h);
    opener.join().unwrap();
    assert_eq!(v.unwrap(), 42);
    assert!(polls >= 2, "it was pending first and woken ({polls} polls)");
    // Errors come through the future too, and a second poll says the result is taken.
    let mut h = s
        .submit(
            |_: &mut TaskContext| -> Result<(), std::io::Error> {
                Err(std::io::Error::other("io"))
            },
            spec(),
        )
        .unwrap();
    let (r, _) = block_on(&mut h);
    let e = r.unwrap_err();
    assert!(e.task_error::<std::io::Error>().is_some(), "{e:?}");
    let (again, _) = block_on(&mut h);
    assert!(matches!(again, Err(Error::ResultTaken { .. })));
    // A rejected task's future is ready at once.
    let h = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("huge").memory(1u64 << 40, 1u64 << 40),
        )
        .unwrap();
    assert!(matches!(block_on(h).0, Err(Error::Rejected { .. })));
}

/// Many tasks reserving memory in bursts against a near-full ledger: the charged total never
/// passes the capacity (each reservation is charged in the same step that approves it),
/// Guaranteed reservations never fail, and burst refusals are structured.
#[test]
fn memory_race_never_overruns_the_ledger() {
    const CAP: u64 = 100_000;
    let s = sched_with(CAP, cfg().workers(12).stop_grace(Duration::from_secs(5)));
    let charged = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let guaranteed_failures = Arc::new(AtomicUsize::new(0));
    let pressure = Arc::new(AtomicUsize::new(0));
    let mut hs = Vec::new();
    let mut kinds = Vec::new();
    for i in 0..12 {
        let (c, p, gf, pr) = (
            charged.clone(),
            peak.clone(),
            guaranteed_failures.clone(),
            pressure.clone(),
        );
        let guaranteed = i % 3 == 0;
        kinds.push(guaranteed);
        let spec = if guaranteed {
            TaskSpec::new(format!("g{i}"))
                .memory(20_000u64, 20_000u64)
                .compute(0.1, 0.1)
        } else {
            TaskSpec::new(format!("b{i}"))
                .memory_request(1_000u64)
                .compute(0.05, 1.0)
        };
        hs.push(
            s.submit(
                move |ctx: &mut TaskContext| -> R<()> {
                    for round in 0..60 {
                        let mut held = Vec::new();
                        for _ in 0..4 {
                            let bytes = if guaranteed {
                                5_000
                            } else {
                                3_000 + (round % 5) * 1_000
                            };
                            match ctx.reserve_memory(bytes) {
                                Ok(r) => {
                                    let now = c.fetch_add(r.bytes() as i64, Ordering::SeqCst)
                                        + r.bytes() as i64;
                                    p.fetch_max(now, Ordering::SeqCst);
                                    held.push(r);
                                }
                                Err(Error::MemoryPressure { .. }) if !guaranteed => {
                                    pr.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    // the reservations held are released when this task
                                    // returns (a preempted Burstable task too): uncount them
                                    // first, or the peak counts memory no longer held
                                    for r in &held {
                                        c.fetch_sub(r.bytes() as i64, Ordering::SeqCst);
                                    }
                                    if guaranteed {
                                        gf.fetch_add(1, Ordering::Relaxed);
                                    }
                                    return Err(e);
                                }
                            }
                        }
                        std::thread::yield_now();
                        for r in held {
                            c.fetch_sub(r.bytes() as i64, Ordering::SeqCst);
                        }
                    }
                    Ok(())
                },
                spec,
            )
            .unwrap(),
        );
    }
    for (h, guaranteed) in hs.into_iter().zip(kinds) {
        match finish(h, Duration::from_secs(30)) {
            Ok(()) => {}
            // A Burstable task above its request is evicted when another task starts and
            // needs its commitment: the Kubernetes rule, not a failure.
            Err(Error::Preempted { .. }) if !guaranteed => {}
            Err(e) => panic!("guaranteed {guaranteed}: {e}"),
        }
    }
    assert_eq!(guaranteed_failures.load(Ordering::Relaxed), 0);
    assert!(
        peak.load(Ordering::SeqCst) as u64 <= CAP,
        "peak {}",
        peak.load(Ordering::SeqCst)
    );
    assert!(
        pressure.load(Ordering::Relaxed) > 0,
        "the ledger was never near full: not a race"
    );
    assert_eq!(s.stats().partitions[0].memory.in_use, 0);
}

/// Memory a task returns in its result stays charged (in its pool) until it is freed.
#[test]
fn returned_memory_is_accounted_until_freed() {
    let s = sched_with(1000, cfg());
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<MemoryReservation> { ctx.reserve_memory(700) },
            TaskSpec::new("returns").memory(700u64, 700u64),
        )
        .unwrap();
    let id = h.id();
    let kept = finish(h, SLACK).unwrap();
    let st = s.stats();
    assert_eq!(st.partitions[0].memory.orphaned, 700);
    assert_eq!(st.partitions[0].pool.memory_committed, 0);
    assert_eq!(s.task_stats(id).unwrap().memory_in_use, 700);
    // A burst above requests sees the 700 as taken.
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(400)?.bytes()) },
            TaskSpec::new("burst"),
        )
        .unwrap();
    assert!(matches!(
        finish(h, SLACK),
        Err(Error::MemoryPressure { available: 300, .. })
    ));
    drop(kept);
    assert_eq!(s.stats().partitions[0].memory.in_use, 0);
    assert_eq!(s.task_stats(id).unwrap().memory_in_use, 0);
}

/// Limits: a reservation past the limit is QuotaExceeded, with the numbers.
#[test]
fn limits_are_structured_errors() {
    let s = sched_with(1000, cfg());
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<()> {
                let _a = ctx.reserve_memory(60)?;
                ctx.reserve_memory(50).map(|_| ())
            },
            TaskSpec::new("capped").memory(100u64, 100u64),
        )
        .unwrap();
    assert!(matches!(
        finish(h, SLACK),
        Err(Error::QuotaExceeded {
            in_use: 60,
            requested: 50,
            limit: 100,
            ..
        })
    ));
}

/// A partition created over memory that default-pool tasks use above their requests: the
/// partition's task evicts them (eviction across pools) and gets its memory.
#[test]
fn partitions_evict_across_pools() {
    let s = sched_with(1000, cfg().workers(4));
    let filled = Arc::new(AtomicUsize::new(0));
    let never = gate();
    let (f, spec) = be_hog("squatter", 0, 800, &filled, true, &never);
    let squatter = s.submit(f, spec).unwrap();
    assert!(wait_until(SLACK, || filled.load(Ordering::Acquire) == 1));
    // Nothing is committed in the default pool: the partition may take 600.
    s.create_partition(&Partition::new("rt").memory(600u64).compute(0.25))
        .unwrap();
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(600)?.bytes()) },
            TaskSpec::new("rt-task")
                .partition("rt")
                .memory(600u64, 600u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert_eq!(finish(g, GRACE + SLACK).unwrap(), 600);
    assert!(matches!(
        finish(squatter, SLACK),
        Err(Error::Preempted { .. })
    ));
    let st = s.stats();
    assert_eq!(
        st.partitions[0].evictions, 1,
        "the default pool's task was evicted"
    );
    // The partition cannot be removed while... it is free now: remove it.
    s.remove_partition("rt").unwrap();
    never.store(true, Ordering::Release);
}

/// `stats(task_id)` and the Prometheus snapshot: every family has HELP and TYPE before its
/// samples, names and labels are well formed, values parse, and the numbers are the stats'.
#[test]
fn task_stats_and_prometheus_metrics() {
    let s = sched_with(1 << 20, cfg());
    s.create_partition(&Partition::new("p\"x").memory(1000u64).compute(0.25))
        .unwrap();
    let g = gate();
    let in_task = gate();
    let (g2, i2) = (g.clone(), in_task.clone());
    let h = s
        .submit(
            move |ctx: &mut TaskContext| -> R<()> {
                let _r = ctx.reserve_memory(512)?;
                i2.store(true, Ordering::Release);
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            },
            TaskSpec::new("we\"ird\\name")
                .partition("p\"x")
                .memory(600u64, 600u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert!(wait_until(SLACK, || in_task.load(Ordering::Acquire)));
    let ts = s.task_stats(h.id()).unwrap();
    assert_eq!(
        (
            ts.state,
            ts.memory_in_use,
            ts.memory_committed,
            ts.granted_sms
        ),
        (TaskState::Running, 512, 600, 32)
    );
    assert!(s.task_stats(9999).is_none());
    let text = s.metrics();
    let samples = parse_prometheus(&text);
    let find = |name: &str, label: &str| {
        samples
            .iter()
            .find(|(n, l, _)| n == name && l.contains(label))
            .map(|s| s.2)
    };
    assert_eq!(
        find("gpukit_sched_task_memory_bytes", "we\\\"ird\\\\name"),
        Some(512.0)
    );
    assert_eq!(
        find(
            "gpukit_sched_task_granted_sms",
            &format!("id=\"{}\"", h.id())
        ),
        Some(32.0)
    );
    assert_eq!(find("gpukit_sched_tasks", "state=\"running\""), Some(1.0));
    assert_eq!(
        find(
            "gpukit_sched_partition_memory_bytes",
            "partition=\"p\\\"x\""
        ),
        Some(512.0)
    );
    assert_eq!(
        find("gpukit_sched_partition_queue_length", "partition=\"\""),
        Some(0.0)
    );
    assert_eq!(find("gpukit_sched_tasks_submitted_total", ""), Some(1.0));
    g.store(true, Ordering::Release);
    finish(h, SLACK).unwrap();
    let after = parse_prometheus(&s.metrics());
    assert!(after
        .iter()
        .any(|(n, l, v)| n == "gpukit_sched_tasks_ended_total"
            && l.contains("succeeded")
            && *v == 1.0));
}

/// A task cancelled while it waits for evicted memory ends Cancelled at once, not at the end
/// of the wait.
#[test]
fn cancelling_a_starting_task_ends_its_wait() {
    let s = sched_with(1000, cfg().workers(2).stop_grace(Duration::from_secs(5)));
    let filled = Arc::new(AtomicUsize::new(0));
    let release = gate();
    let (f, spec) = be_hog("stuck", 0, 900, &filled, false, &release);
    let victim = s.submit(f, spec).unwrap();
    assert!(wait_until(SLACK, || filled.load(Ordering::Acquire) == 1));
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(500)?.bytes()) },
            TaskSpec::new("g")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    let gid = g.id();
    assert!(wait_until(SLACK, || s.task_stats(gid).unwrap().state
        == TaskState::Starting));
    let t = Instant::now();
    assert!(g.cancel());
    let r = finish(g, SLACK);
    assert!(matches!(r, Err(Error::Cancelled { .. })), "{r:?}");
    assert!(t.elapsed() < SLACK, "{:?}", t.elapsed());
    release.store(true, Ordering::Release);
    let _ = finish(victim, Duration::from_secs(6));
}

/// Any duration is accepted and none panics: `Duration::MAX` as a timeout, a deadline, a stop
/// grace period (also inside `cancel` and on the timer thread) and a shutdown timeout; the
/// timer keeps firing afterwards.
#[test]
fn huge_durations_never_panic_and_the_timer_survives() {
    let huge = Duration::MAX;
    let s = sched_with(1 << 30, cfg().stop_grace(huge).shutdown_timeout(huge));
    // A run-time limit and a deadline that never come.
    let h = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(1),
            spec().timeout(huge).deadline(huge),
        )
        .unwrap();
    assert_eq!(finish(h, SLACK).unwrap(), 1);
    // A stop with an unbounded grace period: from cancel() and from the timer (a timeout).
    let started = gate();
    let st2 = started.clone();
    let h = s
        .submit(
            move |ctx: &mut TaskContext| -> R<()> {
                st2.store(true, Ordering::Release);
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            spec(),
        )
        .unwrap();
    assert!(wait_until(SLACK, || started.load(Ordering::Acquire)));
    assert!(h.cancel());
    assert!(matches!(finish(h, SLACK), Err(Error::Cancelled { .. })));
    let t = Instant::now();
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<()> {
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            spec().timeout(Duration::from_millis(30)),
        )
        .unwrap();
    assert!(matches!(finish(h, SLACK), Err(Error::TimedOut { .. })));
    assert!(t.elapsed() < SLACK);
    // The timer still fires: a queued task's deadline expires on time.
    let g = gate();
    let blockers: Vec<_> = (0..3)
        .map(|_| s.submit(hold(&g), spec()).unwrap())
        .collect();
    let t = Instant::now();
    let late = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            spec().deadline(Duration::from_millis(40)),
        )
        .unwrap();
    assert!(matches!(
        finish(late, SLACK),
        Err(Error::DeadlineExpired { .. })
    ));
    assert!(t.elapsed() < Duration::from_millis(40) + SLACK);
    g.store(true, Ordering::Release);
    // Waiting without a bound.
    for b in blockers {
        assert!(b.wait_timeout(huge).is_ok());
    }
    // Shutdown with an unbounded timeout returns once nothing runs.
    let t = Instant::now();
    let report = s.shutdown(huge);
    assert_eq!(report.detached, 0);
    assert!(t.elapsed() < SLACK, "{:?}", t.elapsed());
    // And Drop with an unbounded shutdown_timeout.
    let s = sched_with(1 << 30, cfg().stop_grace(huge).shutdown_timeout(huge));
    let t = Instant::now();
    drop(s);
    assert!(t.elapsed() < SLACK, "{:?}", t.elapsed());
}

/// A panic on the timer thread (injected where a timeout fires) is contained: later
/// deadlines, timeouts and grace periods still fire.
#[test]
fn the_timer_survives_a_panic() {
    let s = sched_with(1 << 30, cfg().inject_panic(PanicPoint::Timer, "doomed"));
    let release = gate();
    let doomed = s
        .submit(
            hold(&release),
            TaskSpec::new("doomed").timeout(Duration::from_millis(20)),
        )
        .unwrap();
    assert!(wait_until(SLACK, || s.stats().timer_panics == 1));
    let t = Instant::now();
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> R<()> {
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            spec().timeout(Duration::from_millis(30)),
        )
        .unwrap();
    assert!(matches!(finish(h, SLACK), Err(Error::TimedOut { .. })));
    assert!(t.elapsed() < SLACK);
    release.store(true, Ordering::Release);
    let _ = finish(doomed, SLACK);
}

/// Shutdown cancels every queued task, including those that cancelling a starving task
/// would have started: none is left Starting with its memory open, none is reported detached,
/// and shutdown does not wait its timeout for them.
#[test]
fn shutdown_cancels_every_queued_task_even_behind_a_starving_one() {
    let s = sched_with(
        2000,
        cfg().workers(8).stop_grace(Duration::from_millis(100)),
    );
    let g = gate();
    let big = s
        .submit(hold(&g), TaskSpec::new("big").memory(1500u64, 1500u64))
        .unwrap();
    // `starving` does not fit beside `big`; four small tasks jump it, then it blocks the rest.
    let starving = s
        .submit(hold(&g), TaskSpec::new("starving").memory(1000u64, 1000u64))
        .unwrap();
    let mut small = Vec::new();
    for i in 0..4 {
        let h = s
            .submit(
                hold(&g),
                TaskSpec::new(format!("jump{i}")).memory(50u64, 50u64),
            )
            .unwrap();
        assert!(matches!(h.admission(), Admission::Admitted(_)));
        small.push(h);
    }
    let mut blocked = Vec::new();
    for i in 0..4 {
        let h = s
            .submit(
                hold(&g),
                TaskSpec::new(format!("blocked{i}")).memory(50u64, 50u64),
            )
            .unwrap();
        assert!(
            matches!(h.admission(), Admission::Queued { .. }),
            "behind the starving task: {:?}",
            h.admission()
        );
        blocked.push(h);
    }
    g.store(true, Ordering::Release);
    let t = Instant::now();
    let report = s.shutdown(Duration::from_secs(3));
    let took = t.elapsed();
    assert_eq!(
        (report.cancelled_queued, report.detached),
        (5, 0),
        "{report:?}"
    );
    assert!(
        took < SLACK,
        "shutdown waited for tasks that never ran: {took:?}"
    );
    for h in std::iter::once(starving).chain(blocked) {
        assert!(matches!(
            h.wait(),
            Err(Error::Cancelled {
                reason: CancelReason::Shutdown,
                ..
            })
        ));
    }
    big.wait().unwrap();
    for h in small {
        h.wait().unwrap();
    }
}

/// An evicted task that returns its memory in an `Ok` result before any safe point: its
/// result cannot keep memory the evicting Guaranteed task needs. The result is dropped (the
/// memory goes back), the task ends Preempted saying so, and the Guaranteed task gets every
/// byte.
#[test]
fn an_evicted_task_cannot_keep_memory_in_its_result() {
    let s = sched_with(1000, cfg().workers(2).stop_grace(Duration::from_secs(5)));
    let filled = gate();
    let f2 = filled.clone();
    let evicted = gate();
    let e2 = evicted.clone();
    let victim = s
        .submit(
            move |ctx: &mut TaskContext| -> R<MemoryReservation> {
                let held = ctx.reserve_memory(900)?;
                f2.store(true, Ordering::Release);
                // No safe point: returns its memory as soon as it is asked to stop.
                while !e2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(held)
            },
            TaskSpec::new("hoarder"),
        )
        .unwrap();
    let vid = victim.id();
    assert!(wait_until(SLACK, || filled.load(Ordering::Acquire)));
    let t = Instant::now();
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(500)?.bytes()) },
            TaskSpec::new("g")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert!(wait_until(SLACK, || s.task_stats(vid).unwrap().preempted));
    evicted.store(true, Ordering::Release);
    assert_eq!(
        finish(g, SLACK).unwrap(),
        500,
        "the Guaranteed task got its memory"
    );
    assert!(t.elapsed() < SLACK, "{:?}", t.elapsed());
    let r = finish(victim, SLACK);
    assert!(
        matches!(&r, Err(Error::Preempted { task, reason, .. }) if task == "hoarder" && reason.contains("900 bytes")),
        "{r:?}"
    );
    assert_eq!(s.task_stats(vid).unwrap().state, TaskState::Preempted);
    assert_eq!(s.stats().partitions[0].memory.in_use, 0);
}

/// Memory no running task can give back (buffers an ended task returned, here): the waiting
/// Guaranteed task fails at the grace period with an error naming who holds it and how much.
#[test]
fn a_guaranteed_task_that_cannot_get_its_memory_names_who_holds_it() {
    let s = sched_with(1000, cfg().workers(2));
    let kept = s
        .submit(
            |ctx: &mut TaskContext| -> R<MemoryReservation> { ctx.reserve_memory(900) },
            TaskSpec::new("keeper"),
        )
        .unwrap();
    let kid = kept.id();
    let kept = finish(kept, SLACK).unwrap();
    let t = Instant::now();
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(500)?.bytes()) },
            TaskSpec::new("g")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    let r = finish(g, GRACE + SLACK);
    let took = t.elapsed();
    assert!(took >= GRACE && took < GRACE + SLACK, "{took:?}");
    match &r {
        Err(Error::MemoryUnavailable {
            task,
            missing,
            holders,
            ..
        }) => {
            assert_eq!((task.as_str(), *missing), ("g", 400));
            assert_eq!(holders.len(), 1, "{holders:?}");
            let h = &holders[0];
            assert_eq!(
                (h.task.as_deref(), h.id, h.bytes, h.kind),
                (Some("keeper"), Some(kid), 900, HolderKind::Ended)
            );
            let text = r.as_ref().unwrap_err().to_string();
            assert!(text.contains("keeper") && text.contains("900"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    drop(kept);
    let g = s
        .submit(
            |ctx: &mut TaskContext| -> R<u64> { Ok(ctx.reserve_memory(500)?.bytes()) },
            TaskSpec::new("g2")
                .memory(500u64, 500u64)
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert_eq!(finish(g, SLACK).unwrap(), 500);
}

/// The metrics' label sets are bounded: finished tasks have no series of their own (they are
/// aggregated into counters and histograms), so the snapshot does not grow with the tasks run;
/// queue wait and run time are Prometheus histograms (cumulative buckets, `+Inf` = count).
#[test]
fn metrics_are_bounded_and_have_histograms() {
    let s = sched(Duration::ZERO);
    let run = |n: usize| {
        for _ in 0..n {
            let h = s
                .submit(
                    |_: &mut TaskContext| -> R<()> {
                        std::thread::sleep(Duration::from_micros(200));
                        Ok(())
                    },
                    spec(),
                )
                .unwrap();
            finish(h, SLACK).unwrap();
        }
    };
    run(150);
    let first = s.metrics();
    run(150);
    let second = s.metrics();
    let series = |t: &str| t.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(
        series(&first),
        series(&second),
        "series grew with finished tasks"
    );
    let samples = parse_prometheus(&second);
    assert!(
        !samples
            .iter()
            .any(|(n, _, _)| n.starts_with("gpukit_sched_task_")),
        "a finished task kept its series"
    );
    for family in [
        "gpukit_sched_queue_wait_seconds",
        "gpukit_sched_run_seconds",
    ] {
        let label = "qos=\"Guaranteed\"";
        let buckets: Vec<(String, f64)> = samples
            .iter()
            .filter(|(n, l, _)| *n == format!("{family}_bucket") && l.contains(label))
            .map(|(_, l, v)| (l.clone(), *v))
            .collect();
        assert!(buckets.len() > 5, "{family}: {buckets:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{family}: not cumulative"
        );
        let (last_label, inf) = buckets.last().unwrap();
        assert!(last_label.contains("le=\"+Inf\""), "{last_label}");
        let count = samples
            .iter()
            .find(|(n, l, _)| *n == format!("{family}_count") && l.contains(label))
            .unwrap()
            .2;
        let sum = samples
            .iter()
            .find(|(n, l, _)| *n == format!("{family}_sum") && l.contains(label))
            .unwrap()
            .2;
        assert_eq!((*inf, count), (300.0, 300.0), "{family}");
        assert!(sum > 0.0, "{family}");
    }
    // Run time: each task slept 200 us, so no observation falls in a bucket below it.
    let below = samples
        .iter()
        .find(|(n, l, _)| n == "gpukit_sched_run_seconds_bucket" && l.contains("le=\"0.0001\""))
        .unwrap()
        .2;
    assert_eq!(below, 0.0);
    // Nothing quarantined: the families are there, at zero.
    for family in [
        "gpukit_sched_quarantined_sms",
        "gpukit_sched_quarantined_memory_bytes",
        "gpukit_sched_partition_sms_quarantined",
    ] {
        let v: Vec<f64> = samples
            .iter()
            .filter(|(n, _, _)| n == family)
            .map(|(_, _, v)| *v)
            .collect();
        assert!(
            !v.is_empty() && v.iter().all(|v| *v == 0.0),
            "{family}: {v:?}"
        );
    }
    let st = s.stats();
    assert!(st.quarantine.is_empty() && st.quarantined == 0);
    let g = &st
        .run_time
        .iter()
        .find(|(q, _)| *q == QosClass::Guaranteed)
        .unwrap()
        .1;
    assert_eq!(g.count, 300);
    assert!(g.sum >= 300.0 * 200e-6, "{}", g.sum);
}

/// The error an illegal address gives every later call in the context, wrapped in a task's
/// own error (whose text needs no driver: formatting a `DriverError` asks the driver).
#[derive(Debug, thiserror::Error)]
#[error("the kernel failed")]
struct KernelFailed(#[source] cudarc::driver::DriverError);

fn driver_error(code: cudarc::driver::sys::CUresult) -> KernelFailed {
    KernelFailed(cudarc::driver::DriverError(code))
}

/// A task that ends with a sticky CUDA error (simulated here: the error an illegal address
/// gives every later call) makes the scheduler unhealthy: queued tasks fail and submissions
/// are refused with a typed error naming the task and the error; stats and metrics say so.
#[test]
fn a_sticky_error_makes_the_scheduler_unhealthy() {
    use cudarc::driver::sys::CUresult;
    let s = sched_with(1 << 30, cfg().workers(1));
    let g = gate();
    let g2 = g.clone();
    let poisoner = s
        .submit(
            move |_: &mut TaskContext| -> Result<(), KernelFailed> {
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(driver_error(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS))
            },
            spec(),
        )
        .unwrap();
    let queued = s
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("queued"),
        )
        .unwrap();
    assert!(matches!(queued.admission(), Admission::Queued { .. }));
    assert!(s.stats().unhealthy.is_none());
    assert!(s.metrics().contains("gpukit_sched_healthy 1"));
    g.store(true, Ordering::Release);
    assert!(matches!(
        finish(poisoner, SLACK),
        Err(Error::TaskFailed { .. })
    ));
    let cause = |e: &Error| match e {
        Error::Unhealthy { cause } => cause.clone(),
        other => panic!("{other:?}"),
    };
    let c = cause(&finish(queued, SLACK).unwrap_err());
    assert!(
        c.contains("task `t`") && c.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{c}"
    );
    let refused = s
        .submit(|_: &mut TaskContext| Ok::<_, Error>(()), spec())
        .unwrap_err();
    assert_eq!(cause(&refused), c);
    let st = s.stats();
    assert_eq!(st.unhealthy.as_deref(), Some(c.as_str()));
    assert_eq!(st.count(TaskState::Failed), 2);
    assert!(s.metrics().contains("gpukit_sched_healthy 0"));
    // An ordinary error does not: a fresh scheduler stays healthy.
    let s = sched(Duration::ZERO);
    let h = s
        .submit(
            |_: &mut TaskContext| -> Result<(), KernelFailed> {
                Err(driver_error(CUresult::CUDA_ERROR_OUT_OF_MEMORY))
            },
            spec(),
        )
        .unwrap();
    assert!(finish(h, SLACK).is_err());
    assert!(s.stats().unhealthy.is_none());
}
