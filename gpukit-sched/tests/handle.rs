//! The task handle as a future-like object for other languages' futures (the Python
//! package's `concurrent.futures.Future`): completion callbacks, polling without consuming
//! the handle, taking the result once, and the closure's own error recovered by value.

use gpukit_sched::{Error, TaskContext, TaskState};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// A callback registered before the end runs once, on a scheduler thread, with the final
/// state; one registered after the end runs at once on the caller's thread.
#[test]
fn on_complete_runs_once_on_the_deciding_thread_or_at_once() {
    let s = sched(Duration::ZERO);
    let g = gate();
    let h = s.submit(hold(&g), spec()).unwrap();
    let (tx, rx) = mpsc::channel();
    let calls = Arc::new(AtomicUsize::new(0));
    {
        let (tx, calls) = (tx.clone(), calls.clone());
        h.on_complete(move |state| {
            calls.fetch_add(1, Ordering::SeqCst);
            let name = std::thread::current().name().map(str::to_string);
            tx.send((state, name)).unwrap();
        });
    }
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "ran early"
    );
    g.store(true, Ordering::Release);
    let (state, thread) = rx.recv_timeout(SLACK).expect("callback ran");
    assert_eq!(state, TaskState::Succeeded);
    let thread = thread.unwrap_or_default();
    assert!(thread.starts_with("gpukit-sched-"), "ran on `{thread}`");
    // After the end: at once, on this thread, before on_complete returns.
    let me = std::thread::current().id();
    let here = Arc::new(std::sync::Mutex::new(None));
    let h2 = here.clone();
    h.on_complete(move |state| *h2.lock().unwrap() = Some((state, std::thread::current().id())));
    assert_eq!(*here.lock().unwrap(), Some((TaskState::Succeeded, me)));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the first callback ran once"
    );
    h.wait().unwrap();

    // A queued task cancelled: the cancelling thread runs it, with Cancelled.
    let g = gate();
    let blockers: Vec<_> = (0..3)
        .map(|_| s.submit(hold(&g), spec()).unwrap())
        .collect();
    let queued = s.submit(hold(&g), spec()).unwrap();
    let (tx, rx) = mpsc::channel();
    queued.on_complete(move |state| tx.send((state, std::thread::current().id())).unwrap());
    assert!(queued.cancel());
    assert_eq!(rx.try_recv().unwrap(), (TaskState::Cancelled, me));
    g.store(true, Ordering::Release);
    for b in blockers {
        b.wait().unwrap();
    }
}

/// A panicking callback is contained: the others run, the worker takes the next task, the
/// outcome is intact, and the panic is counted.
#[test]
fn a_panicking_callback_reaches_nothing_else() {
    let s = sched_with(1 << 30, cfg().workers(1));
    let g = gate();
    let h = s.submit(hold(&g), spec()).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    h.on_complete(|_| panic!("callback panic (expected by the test)"));
    {
        let ran = ran.clone();
        h.on_complete(move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
        });
    }
    g.store(true, Ordering::Release);
    // Generous bounds after a panic: with RUST_BACKTRACE set, the panic hook symbolizes a
    // backtrace first.
    let after_panic = Duration::from_secs(10);
    assert!(h.wait_for(after_panic).is_some());
    assert!(wait_until(after_panic, || ran.load(Ordering::SeqCst) == 1));
    // Registered after the end: contained on the caller's thread too.
    h.on_complete(|_| panic!("late callback panic (expected by the test)"));
    assert_eq!(h.take_result().map(|r| r.is_ok()), Some(true));
    assert!(wait_until(after_panic, || s.stats().callback_panics == 2));
    assert!(s.metrics().contains("gpukit_sched_callback_panics_total 2"));
    // The one worker is alive.
    let next = s
        .submit(|_: &mut TaskContext| Ok::<_, Error>(3), spec())
        .unwrap();
    assert_eq!(finish(next, SLACK).unwrap(), 3);
}

/// Polling without consuming the handle, then taking the result exactly once.
#[test]
fn wait_for_polls_and_take_result_takes_once() {
    let s = sched(Duration::ZERO);
    let g = gate();
    let g2 = g.clone();
    let h = s
        .submit(
            move |_: &mut TaskContext| -> R<String> {
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok("value".into())
            },
            spec(),
        )
        .unwrap();
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(h.wait_for(Duration::from_millis(20)), None);
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert!(!h.is_done());
        assert!(h.take_result().is_none(), "no outcome yet");
    }
    g.store(true, Ordering::Release);
    // Any duration is accepted: Duration::MAX waits without a bound.
    assert_eq!(h.wait_for(Duration::MAX), Some(TaskState::Succeeded));
    assert!(h.is_done());
    assert_eq!(h.take_result().unwrap().unwrap(), "value");
    assert!(matches!(
        h.take_result(),
        Some(Err(Error::ResultTaken { .. }))
    ));
    assert!(matches!(h.wait(), Err(Error::ResultTaken { .. })));
}

/// The error a closure returns comes back as the very object (not a copy, not a string), by
/// reference and by value: what re-raising a Python exception needs.
#[test]
fn the_closures_error_is_recovered_by_value() {
    #[derive(Debug)]
    struct Foreign(Arc<()>);
    impl std::fmt::Display for Foreign {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("foreign exception")
        }
    }
    impl std::error::Error for Foreign {}
    let s = sched(Duration::ZERO);
    let identity = Arc::new(());
    let id2 = identity.clone();
    let h = s
        .submit(
            move |_: &mut TaskContext| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                Err(Box::new(Foreign(id2)))
            },
            spec(),
        )
        .unwrap();
    assert_eq!(h.wait_for(SLACK), Some(TaskState::Failed));
    let e = h.take_result().unwrap().unwrap_err();
    assert!(e.task_source().is_some_and(|s| s.is::<Foreign>()), "{e:?}");
    assert!(e.to_string().contains("foreign exception"));
    let back = e.into_task_source().unwrap().downcast::<Foreign>().unwrap();
    assert!(Arc::ptr_eq(&back.0, &identity), "not the same object");
    // A scheduler error is no task source, and comes back whole.
    let e = Error::NoDevice;
    assert!(e.task_source().is_none());
    assert!(matches!(e.into_task_source(), Err(Error::NoDevice)));
}

/// A body that runs until stopped (a safe point every millisecond), flagging its start.
fn until_stopped(started: &Arc<AtomicBool>) -> impl FnOnce(&mut TaskContext) -> R<()> + Send {
    let s = started.clone();
    move |ctx: &mut TaskContext| {
        s.store(true, Ordering::Release);
        loop {
            ctx.check()?;
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Dropping a handle cancels its task (running: at its next safe point; queued: at once),
/// so a service that gives up on a task (a timeout around its future) leaks no GPU work.
#[test]
fn dropping_a_handle_cancels_its_task() {
    let s = sched_with(1 << 30, cfg().workers(1));
    let started = gate();
    let running = s.submit(until_stopped(&started), spec()).unwrap();
    let rid = running.id();
    let queued = s.submit(until_stopped(&gate()), spec()).unwrap();
    let qid = queued.id();
    assert!(wait_until(SLACK, || started.load(Ordering::Acquire)));
    drop(queued);
    assert_eq!(s.task_stats(qid).unwrap().state, TaskState::Cancelled);
    drop(running);
    assert!(wait_until(SLACK, || s.task_stats(rid).unwrap().state
        == TaskState::Cancelled));
    let e = s.task_stats(rid).unwrap().error.unwrap();
    assert!(e.contains("handle was dropped"), "{e}");
    // A future dropped after its first poll (what a timeout around it does) cancels too.
    let started = gate();
    let mut fut = s.submit(until_stopped(&started), spec()).unwrap();
    let fid = fut.id();
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(std::pin::Pin::new(&mut fut).poll(&mut cx).is_pending());
    drop(fut);
    assert!(wait_until(SLACK, || s.task_stats(fid).unwrap().state
        == TaskState::Cancelled));
    // A handle dropped after the task ended changes nothing.
    let h = s
        .submit(|_: &mut TaskContext| Ok::<_, Error>(1), spec())
        .unwrap();
    let id = h.id();
    assert_eq!(h.wait_for(SLACK), Some(TaskState::Succeeded));
    drop(h);
    assert_eq!(s.task_stats(id).unwrap().state, TaskState::Succeeded);
}

/// `detach` is fire-and-forget: the task runs to its end, and its value is dropped then.
#[test]
fn a_detached_handle_runs_to_its_end() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let s = sched(Duration::ZERO);
    let g = gate();
    let drops = Arc::new(AtomicUsize::new(0));
    let (g2, d2) = (g.clone(), drops.clone());
    let h = s
        .submit(
            move |_: &mut TaskContext| -> R<Counted> {
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(Counted(d2))
            },
            spec(),
        )
        .unwrap();
    let id = h.id();
    h.detach();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(s.task_stats(id).unwrap().state, TaskState::Running);
    g.store(true, Ordering::Release);
    assert!(wait_until(SLACK, || s.task_stats(id).unwrap().state
        == TaskState::Succeeded));
    assert!(wait_until(SLACK, || drops.load(Ordering::SeqCst) == 1));
}
