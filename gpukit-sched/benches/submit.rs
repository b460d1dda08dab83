//! Where `Scheduler::submit` spends its time, without a GPU.
//!
//! `cargo bench -p gpukit-sched --bench submit`
//!
//! The scheduler is [`Scheduler::cpu_only`]: the real planner, state, admission and hand-off
//! to the worker threads (the code `submit` runs on the GPU host), with the H200's layout
//! (15 groups of 8 SMs + 12) given instead of probed. Tasks are no-ops; specs are built inside
//! the timed region, as in `sched_bench`'s overhead row. Besides the whole call, the parts:
//! spec resolution and the worker hand-off (channel send that wakes a parked worker). The
//! planner alone is internal (not benchable from here since it became private); the
//! difference between `submit/admitted` and these parts bounds it.
//!
//! `admitted` submits right after the previous task ended (a worker still polls, see
//! `SchedulerConfig::worker_spin`); `admitted_workers_asleep` waits 2 ms first, so the
//! submitting thread has to wake a sleeping worker (and finds its caches cold);
//! `admitted_no_worker_spin` submits right after the previous task with polling off.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{criterion_group, criterion_main, Criterion};
use crossbeam::channel::unbounded;
use gpukit_sched::{Scheduler, SchedulerConfig, SmLayout, TaskContext, TaskHandle, TaskSpec};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn layout() -> SmLayout {
    SmLayout::with_groups(132, 8, 15, true).expect("H200 layout")
}

fn spec(name: &str) -> TaskSpec {
    TaskSpec::new(name)
        .memory("1MiB", "1MiB")
        .compute(0.25, 0.25)
}

fn sched() -> Scheduler {
    Scheduler::cpu_only(layout(), 100 << 30, SchedulerConfig::default().workers(2))
        .expect("cpu-only scheduler")
}

fn noop(_: &mut TaskContext) -> gpukit_sched::Result<()> {
    Ok(())
}

/// Both workers busy until `gate` opens, then `n` tasks queued behind them.
fn fill(s: &Scheduler, gate: &Arc<AtomicBool>, n: usize) -> Vec<TaskHandle<()>> {
    let mut hs = Vec::new();
    for _ in 0..2 {
        let g = gate.clone();
        hs.push(
            s.submit(
                move |_: &mut TaskContext| -> gpukit_sched::Result<()> {
                    while !g.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                },
                spec("blocker"),
            )
            .expect("blocker"),
        );
    }
    for _ in 0..n {
        hs.push(s.submit(noop, spec("queued")).expect("queued"));
    }
    hs
}

fn whole(c: &mut Criterion) {
    let mut g = c.benchmark_group("submit");
    g.measurement_time(Duration::from_secs(3));
    let s = sched();
    g.bench_function("admitted", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let h = s.submit(noop, spec("t")).expect("submit");
                total += t.elapsed();
                h.wait().expect("ran");
            }
            total
        })
    });
    g.bench_function("admitted_workers_asleep", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::thread::sleep(Duration::from_millis(2));
                let t = Instant::now();
                let h = s.submit(noop, spec("t")).expect("submit");
                total += t.elapsed();
                h.wait().expect("ran");
            }
            total
        })
    });
    // The same with workers that never poll (worker_spin 0): every hand-off wakes one.
    let no_spin = Scheduler::cpu_only(
        layout(),
        100 << 30,
        SchedulerConfig::default()
            .workers(2)
            .worker_spin(Duration::ZERO),
    )
    .expect("cpu-only scheduler");
    g.bench_function("admitted_no_worker_spin", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let h = no_spin.submit(noop, spec("t")).expect("submit");
                total += t.elapsed();
                h.wait().expect("ran");
            }
            total
        })
    });
    drop(no_spin);
    let gate = Arc::new(AtomicBool::new(false));
    let held = fill(&s, &gate, 64);
    g.bench_function("queued_behind_64", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let h = s.submit(noop, spec("queued")).expect("submit");
                total += t.elapsed();
                assert!(h.cancel());
            }
            total
        })
    });
    gate.store(true, Ordering::Relaxed);
    for h in held {
        h.wait().expect("ran");
    }
    g.finish();
}

fn parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("parts");
    g.measurement_time(Duration::from_secs(2));
    g.bench_function("build_and_resolve_spec", |b| {
        b.iter(|| black_box(spec("t")).resolve().expect("valid"))
    });
    // The hand-off: a send that wakes a worker parked in `recv`.
    let (tx, rx) = unbounded::<u64>();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    let worker = std::thread::spawn(move || {
        while let Ok(v) = rx.recv() {
            seen2.store(v, Ordering::Release);
        }
    });
    g.bench_function("send_wake_parked_worker", |b| {
        let mut n = 0u64;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                // Let the worker park first.
                std::thread::sleep(Duration::from_micros(200));
                let t = Instant::now();
                tx.send(n).expect("send");
                total += t.elapsed();
                while seen.load(Ordering::Acquire) != n {
                    std::hint::spin_loop();
                }
            }
            total
        })
    });
    drop(tx);
    worker.join().expect("worker");
    g.finish();
}

criterion_group!(benches, whole, parts);
criterion_main!(benches);
