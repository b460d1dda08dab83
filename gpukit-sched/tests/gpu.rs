//! GPU tests (skip without a GPU; fail under GPUKIT_REQUIRE_GPU=1): green-context confinement
//! by %smid, cleanup after panics, quotas, cancellation, eviction order, and the proofs with
//! loose bounds. One scheduler per device at a time, so the tests take a lock.

use gpukit_core::Device;
use gpukit_jit::{KernelArg, LaunchConfig};
use gpukit_sched::kernels::TestKernels;
use gpukit_sched::{
    Admission, Error, Mechanism, QosClass, Scheduler, SchedulerConfig, TaskContext, TaskSpec,
    TaskState,
};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn setup(name: &str) -> Option<(std::sync::MutexGuard<'static, ()>, Device, TestKernels)> {
    if !gpukit_jit::testing::gpu(name) {
        return None;
    }
    let g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Device::open(0).expect("device");
    let k = TestKernels::load(&dev).expect("kernels");
    Some((g, dev, k))
}

/// The SMs a task's kernels ran on (each block of a wide launch records its %smid).
fn smids(
    ctx: &mut TaskContext,
    k: &TestKernels,
    blocks: u32,
) -> gpukit_sched::Result<BTreeSet<u32>> {
    let buf = ctx.alloc(blocks as usize * 4)?;
    let (raw, _) = ctx.raw_stream();
    // Poison so unwritten entries show.
    // SAFETY: the buffer holds `blocks` u32 and is ordered on the task's home stream.
    unsafe { cudarc::driver::result::memset_d8_async(buf.ptr(), 0xff, blocks as usize * 4, raw) }
        .map_err(|e| Error::Driver {
        call: "cuMemsetD8Async",
        action: "poisoning".into(),
        source: e,
    })?;
    ctx.launch(
        &k.record_smid,
        LaunchConfig::new((blocks, 1, 1), (128, 1, 1)),
        &[
            KernelArg::Ptr(buf.ptr()),
            KernelArg::I32(blocks as i32),
            KernelArg::I64(20_000),
        ],
    )?;
    ctx.synchronize()?;
    let mut host = vec![0u32; blocks as usize];
    // SAFETY: copies `blocks` u32 from a live device buffer into `host`; the stream is idle.
    unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, buf.ptr()) }.map_err(|e| {
        Error::Driver {
            call: "cuMemcpyDtoH",
            action: "reading smids".into(),
            source: e,
        }
    })?;
    assert!(
        host.iter().all(|&x| x != u32::MAX),
        "a block did not record its SM"
    );
    Ok(host.into_iter().collect())
}

#[test]
fn confinement_by_smid() {
    let Some((_g, dev, k)) = setup("confinement_by_smid") else {
        return;
    };
    let sched = Scheduler::new(dev.clone(), SchedulerConfig::default()).unwrap();
    assert!(
        sched.mechanism().starts_with("green contexts"),
        "{}",
        sched.mechanism()
    );
    let l = sched.layout();
    let both = Arc::new(Barrier::new(2));
    let run = |share: f64, b: Arc<Barrier>, k: TestKernels| {
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(BTreeSet<u32>, u32)> {
            b.wait();
            let s = smids(ctx, &k, 4096)?;
            let _ = share;
            Ok((s, ctx.compute().sms))
        }
    };
    let a = sched
        .submit(
            run(0.25, both.clone(), k.clone()),
            TaskSpec::new("a")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let b = sched
        .submit(
            run(0.5, both, k.clone()),
            TaskSpec::new("b")
                .memory("64MiB", "64MiB")
                .compute(0.5, 0.5),
        )
        .unwrap();
    assert!(
        matches!(a.admission(), Admission::Admitted { compute, .. } if compute.mechanism == Mechanism::GreenContext)
    );
    let (sa, na) = a.wait().unwrap();
    let (sb, nb) = b.wait().unwrap();
    println!("a: {} SMs of {na}, b: {} SMs of {nb}", sa.len(), sb.len());
    assert_eq!(
        sa.len() as u32,
        na,
        "task a's kernels touched exactly its SMs"
    );
    assert_eq!(sb.len() as u32, nb);
    assert_eq!(na, l.sms(l.groups_for_share(0.25)));
    assert!(sa.is_disjoint(&sb), "two tasks shared an SM");
    // A BestEffort task alone borrows every group and the floor.
    let be = sched
        .submit(
            {
                let k = k.clone();
                move |ctx: &mut TaskContext| smids(ctx, &k, 8192)
            },
            TaskSpec::new("be"),
        )
        .unwrap();
    let s = be.wait().unwrap();
    assert!(
        s.len() as u32 > l.total_sms / 2 && s.len() as u32 <= l.total_sms,
        "{}",
        s.len()
    );
}

#[test]
fn panics_and_errors_release_everything() {
    let Some((_g, dev, k)) = setup("panics_and_errors_release_everything") else {
        return;
    };
    let sched = Scheduler::new(dev.clone(), SchedulerConfig::default()).unwrap();
    let h = sched
        .submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                let _b = ctx.alloc(1 << 30)?;
                panic!("boom");
            },
            TaskSpec::new("panicky")
                .memory("2GiB", "2GiB")
                .compute(0.5, 0.5),
        )
        .unwrap();
    let id = h.id();
    match h.wait() {
        Err(Error::Panicked { message, .. }) => assert_eq!(message, "boom"),
        other => panic!("{other:?}"),
    }
    let st = sched.stats();
    let t = st.tasks.iter().find(|t| t.id == id).unwrap();
    assert_eq!((t.state, t.memory_in_use), (TaskState::Failed, 0));
    assert_eq!(st.partitions[0].pool.memory_committed, 0);
    assert!(st.partitions[0].pool.groups_assigned.is_empty());
    // Past the limit: the allocator's quota error. A failing task is just a failed result.
    let h = sched
        .submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<()> { ctx.alloc(65 << 20).map(|_| ()) },
            TaskSpec::new("greedy")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert!(matches!(
        h.wait(),
        Err(Error::Core(gpukit_core::Error::QuotaExceeded { .. }))
    ));
    // And the scheduler keeps serving.
    let h = sched
        .submit(
            {
                let k = k.clone();
                move |ctx: &mut TaskContext| {
                    ctx.launch(
                        &k.noop,
                        LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                        &[KernelArg::I32(1)],
                    )?;
                    ctx.synchronize()?;
                    Ok(ctx.compute().sms)
                }
            },
            TaskSpec::new("after")
                .memory("64MiB", "64MiB")
                .compute(1.0, 1.0),
        )
        .unwrap();
    assert_eq!(h.wait().unwrap(), sched.layout().sms(sched.layout().groups));
    // Rejections carry the reason; invalid specs are errors.
    let cap = sched.memory_capacity();
    let h = sched
        .submit(
            |_: &mut TaskContext| Ok(()),
            TaskSpec::new("huge").memory(cap + 1, cap + 1),
        )
        .unwrap();
    assert_eq!(
        h.admission(),
        &Admission::Rejected {
            resource: gpukit_sched::Resource::Memory,
            requested: cap + 1,
            available: cap
        }
    );
    assert!(matches!(h.wait(), Err(Error::Rejected { .. })));
    assert!(sched
        .submit(
            |_: &mut TaskContext| Ok(()),
            TaskSpec::new("bad")
                .memory("1GB", "1GB")
                .qos(QosClass::BestEffort)
        )
        .is_err());
}

#[test]
fn cancel_running_task_at_safe_point() {
    let Some((_g, dev, k)) = setup("cancel_running_task_at_safe_point") else {
        return;
    };
    let sched = Scheduler::new(dev, SchedulerConfig::default()).unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let s2 = started.clone();
    let h = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                s2.store(true, Ordering::Release);
                loop {
                    ctx.launch(
                        &k.noop,
                        LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                        &[KernelArg::I32(1)],
                    )?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            TaskSpec::new("forever")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    while !started.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(h.cancel());
    assert!(matches!(
        h.wait_timeout(Duration::from_secs(10)).expect("ended"),
        Err(Error::Cancelled { .. })
    ));
}

#[test]
fn eviction_order_and_guaranteed_never_fails() {
    let Some((_g, dev, _k)) = setup("eviction_order_and_guaranteed_never_fails") else {
        return;
    };
    let sched = Scheduler::new(dev, SchedulerConfig::default().memory_capacity("8GiB")).unwrap();
    const MIB: usize = 1 << 20;
    let full = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut bes = Vec::new();
    for (name, prio) in [("be-low", -1), ("be-high", 1)] {
        let f = full.clone();
        bes.push(
            sched
                .submit(
                    move |ctx: &mut TaskContext| -> gpukit_sched::Result<usize> {
                        let mut held = Vec::new();
                        while let Ok(b) = ctx.alloc(256 * MIB) {
                            held.push(b);
                        }
                        f.fetch_add(1, Ordering::Release);
                        loop {
                            ctx.check()?;
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    },
                    TaskSpec::new(name).priority(prio),
                )
                .unwrap(),
        );
    }
    while full.load(Ordering::Acquire) < 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    let g = sched
        .submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<usize> {
                let mut held = Vec::new();
                for _ in 0..24 {
                    held.push(ctx.alloc(256 * MIB)?);
                }
                Ok(held.len())
            },
            TaskSpec::new("g")
                .memory("6GiB", "6GiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let gr = g.wait();
    for h in &bes {
        h.cancel();
    }
    assert_eq!(gr.unwrap(), 24, "a Guaranteed allocation failed");
    println!("G waited {:?} for evictions", t.elapsed());
    let ev: Vec<String> = sched
        .stats()
        .evictions
        .iter()
        .map(|e| e.1.clone())
        .collect();
    assert_eq!(
        ev.first().map(String::as_str),
        Some("be-low"),
        "lowest-priority BestEffort first: {ev:?}"
    );
    let r: Vec<_> = bes.into_iter().map(|h| h.wait()).collect();
    assert!(matches!(r[0], Err(Error::Preempted { .. })), "{:?}", r[0]);
}

#[test]
fn shares_and_isolation_loose() {
    let Some((_g, dev, k)) = setup("shares_and_isolation_loose") else {
        return;
    };
    let sched = Scheduler::new(dev, SchedulerConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(2));
    let body = |k: TestKernels, start: Arc<Barrier>, stop: Arc<AtomicBool>| {
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(f64, u32)> {
            let blocks = 32 * 8 * 11 * 3;
            let out = ctx.alloc(blocks * 256 * 4)?;
            let cfg = LaunchConfig::new((blocks as u32, 1, 1), (256, 1, 1));
            start.wait();
            let t = Instant::now();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                ctx.launch(
                    &k.fma_spin,
                    cfg,
                    &[KernelArg::Ptr(out.ptr()), KernelArg::I32(2000)],
                )?;
                ctx.synchronize()?;
                n += 1;
            }
            Ok((n as f64 / t.elapsed().as_secs_f64(), ctx.home_sms()))
        }
    };
    let a = sched
        .submit(
            body(k.clone(), start.clone(), stop.clone()),
            TaskSpec::new("q")
                .memory("128MiB", "128MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let b = sched
        .submit(
            body(k.clone(), start, stop.clone()),
            TaskSpec::new("tq")
                .memory("128MiB", "128MiB")
                .compute(0.75, 0.75),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, Ordering::Relaxed);
    let (ta, sa) = a.wait().unwrap();
    let (tb, sb) = b.wait().unwrap();
    let (got, want) = (tb / ta, sb as f64 / sa as f64);
    println!("throughput ratio {got:.3}, SM ratio {want:.3}");
    assert!((got / want - 1.0).abs() < 0.25, "ratio {got} vs {want}");
}
