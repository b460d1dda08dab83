//! The scheduler's CPU side without a GPU ([`Scheduler::cpu_only`]): admission, queueing,
//! hand-off to the workers (polling and sleeping), panics, cancellation and shutdown.

use gpukit_sched::{
    Admission, Error, Scheduler, SchedulerConfig, SmLayout, TaskContext, TaskSpec, TaskState,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn sched(spin: Duration) -> Scheduler {
    let layout = SmLayout::with_groups(132, 8, 15, true).unwrap();
    Scheduler::cpu_only(
        layout,
        1 << 30,
        SchedulerConfig::default().workers(3).worker_spin(spin),
    )
    .unwrap()
}

fn spec() -> TaskSpec {
    TaskSpec::new("t")
        .memory("1MiB", "1MiB")
        .compute(0.25, 0.25)
}

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
                    move |_: &mut TaskContext| {
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
        assert_eq!((st.submitted, st.succeeded, st.failed), (200, 200, 0));
    }
}

#[test]
fn queue_panic_cancel_shutdown() {
    let s = sched(Duration::from_micros(100));
    let gate = Arc::new(AtomicBool::new(false));
    let blockers: Vec<_> = (0..3)
        .map(|_| {
            let g = gate.clone();
            s.submit(
                move |_: &mut TaskContext| {
                    while !g.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                },
                spec(),
            )
            .unwrap()
        })
        .collect();
    assert!(blockers
        .iter()
        .all(|b| matches!(b.admission(), Admission::Admitted { .. })));
    let panics = s
        .submit(
            |_: &mut TaskContext| -> gpukit_sched::Result<()> { panic!("boom") },
            TaskSpec::new("p")
                .memory("1MiB", "1MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert_eq!(panics.admission(), &Admission::Queued { position: 0 });
    let cancelled = s.submit(|_: &mut TaskContext| Ok(()), spec()).unwrap();
    assert_eq!(cancelled.admission(), &Admission::Queued { position: 1 });
    assert!(cancelled.cancel());
    assert!(matches!(cancelled.wait(), Err(Error::Cancelled { .. })));
    let left = s.submit(|_: &mut TaskContext| Ok(()), spec()).unwrap();
    gate.store(true, Ordering::Relaxed);
    for b in blockers {
        b.wait().unwrap();
    }
    match panics.wait() {
        Err(Error::Panicked { task, message }) => assert_eq!((&*task, &*message), ("p", "boom")),
        other => panic!("{other:?}"),
    }
    left.wait().unwrap();
    // Queued at shutdown: cancelled.
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let _busy: Vec<_> = (0..3)
        .map(|_| {
            let g = g.clone();
            s.submit(
                move |_: &mut TaskContext| {
                    while !g.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                },
                spec(),
            )
            .unwrap()
        })
        .collect();
    let queued = s.submit(|_: &mut TaskContext| Ok(()), spec()).unwrap();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        gate.store(true, Ordering::Relaxed);
    });
    s.shutdown();
    opener.join().unwrap();
    assert_eq!(queued.state(), TaskState::Cancelled);
}

#[test]
fn no_device_is_an_error_not_a_panic() {
    let s = sched(Duration::ZERO);
    assert!(matches!(s.device(), Err(Error::NoDevice)));
    let h = s
        .submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<(bool, bool)> {
                Ok((
                    matches!(ctx.device(), Err(Error::NoDevice)),
                    matches!(ctx.alloc(1024), Err(Error::NoDevice)),
                ))
            },
            spec(),
        )
        .unwrap();
    assert_eq!(
        h.wait_timeout(Duration::from_secs(10))
            .expect("ended")
            .unwrap(),
        (true, true)
    );
}
