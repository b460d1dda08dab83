//! GPU tests (skip without a GPU; fail under GPUKIT_REQUIRE_GPU=1): green-context confinement
//! by %smid, cleanup after panics, quotas, cancellation, eviction order, and the proofs with
//! loose bounds. One scheduler per device at a time, so the tests take a lock.

use gpukit_core::handles::BlasHandle;
use gpukit_core::Device;
use gpukit_core::DeviceBuffer;
use gpukit_jit::{KernelArg, LaunchConfig};
use gpukit_sched::{
    Admission, Error, GroupSet, Mechanism, Partition, QosClass, Resource, Scheduler,
    SchedulerConfig, TaskContext, TaskHandle, TaskSpec, TaskState,
};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::kernels::TestKernels;

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
    let (raw, _) = ctx.raw_stream()?;
    // Poison so unwritten entries show.
    // SAFETY: the buffer holds `blocks` u32 and is ordered on the task's home stream.
    unsafe { cudarc::driver::result::memset_d8_async(buf.ptr(), 0xff, blocks as usize * 4, raw) }
        .map_err(|e| Error::Driver {
        call: "cuMemsetD8Async",
        action: "poisoning".into(),
        source: e,
    })?;
    // SAFETY: any pointer is a live allocation of this task, large enough for the
    // kernel, kept until the kernel completes.
    unsafe {
        ctx.launch_unchecked(
            &k.record_smid,
            LaunchConfig::new((blocks, 1, 1), (128, 1, 1)),
            &[
                KernelArg::Ptr(buf.ptr()),
                KernelArg::I32(blocks as i32),
                KernelArg::I64(20_000),
            ],
        )?
    };
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
        matches!(a.admission(), Admission::Admitted(g) if g.compute.mechanism == Mechanism::GreenContext)
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

/// Inside a task, the device's current stream is the task's home stream: gpukit-core
/// operations (here a user `ElementwiseKernel`, compiled and launched by gpukit-core) and a
/// user's JIT kernel launched on `Device::stream()` run on the task's SMs only, exactly where
/// `TaskContext::launch` runs.
#[test]
fn core_ops_and_current_stream_kernels_run_on_the_task_partition() {
    let Some((_g, dev, k)) = setup("core_ops_and_current_stream_kernels_run_on_the_task_partition")
    else {
        return;
    };
    let sched = Scheduler::new(dev.clone(), SchedulerConfig::default()).unwrap();
    let l = sched.layout();
    let smid_op = gpukit_core::custom::ElementwiseKernel::new(
        "uint32 x",
        "uint32 z",
        "z = gpukit_smid();",
        "gpukit_sched_smid_op",
    )
    .unwrap()
    .with_preamble(
        "__device__ unsigned int gpukit_smid() { unsigned int s; \
         asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(s)); return s; }",
    );
    let h = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<_> {
                let dev = ctx.device()?.clone();
                let same_stream = dev.stream() == *ctx.stream()?;
                // The task's SMs, as TaskContext::launch uses them.
                let launched = smids(ctx, &k, 4096)?;
                // A user's JIT kernel on the device's current stream.
                let blocks = 4096u32;
                let out = gpukit_core::GpuArray::<u32>::full(&dev, &[blocks as usize], u32::MAX)?;
                let current = dev.stream();
                // SAFETY: `out` holds `blocks` u32 on this device and lives until the
                // synchronize below; the kernel writes one u32 per block.
                unsafe {
                    k.record_smid.launch_unchecked(
                        current.cuda(),
                        LaunchConfig::new((blocks, 1, 1), (128, 1, 1)),
                        &[
                            out.as_kernel_arg(),
                            KernelArg::I32(blocks as i32),
                            KernelArg::I64(20_000),
                        ],
                    )?
                };
                let user: BTreeSet<u32> = out.to_vec()?.into_iter().collect();
                // A gpukit-core operation: a user ElementwiseKernel over 4M elements.
                let x = gpukit_core::GpuArray::<u32>::zeros(&dev, &[4 << 20])?;
                let z: gpukit_core::GpuArray<u32> =
                    smid_op.call1(&[gpukit_core::custom::KArg::from(&x)])?;
                let core: BTreeSet<u32> = z.to_vec()?.into_iter().collect();
                Ok((same_stream, launched, user, core, ctx.compute().sms))
            },
            TaskSpec::new("current-stream")
                .memory("256MiB", "256MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let (same_stream, launched, user, core, sms) = finish(h, "current-stream task").unwrap();
    println!(
        "task SMs {sms}: TaskContext::launch touched {}, a kernel on Device::stream() {}, \
         a core ElementwiseKernel {} (of {} on the GPU)",
        launched.len(),
        user.len(),
        core.len(),
        l.total_sms
    );
    assert!(same_stream, "Device::stream() is not the task's stream");
    assert_eq!(sms, l.sms(l.groups_for_share(0.25)));
    assert_eq!(launched.len() as u32, sms);
    assert!(!user.contains(&u32::MAX), "a block did not record its SM");
    assert_eq!(
        user, launched,
        "a kernel on Device::stream() left the task's SMs"
    );
    assert!(
        !core.is_empty() && core.is_subset(&launched),
        "a core op left the task's SMs: {core:?}"
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
        Err(Error::QuotaExceeded { limit, .. }) if limit == 64 << 20
    ));
    // And the scheduler keeps serving.
    let h = sched
        .submit(
            {
                let k = k.clone();
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<u32> {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe {
                        ctx.launch_unchecked(
                            &k.noop,
                            LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                            &[KernelArg::I32(1)],
                        )?
                    };
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
            |_: &mut TaskContext| Ok::<_, Error>(()),
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
            |_: &mut TaskContext| Ok::<_, Error>(()),
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
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe {
                        ctx.launch_unchecked(
                            &k.noop,
                            LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                            &[KernelArg::I32(1)],
                        )?
                    };
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
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &k.fma_spin,
                        cfg,
                        &[KernelArg::Ptr(out.ptr()), KernelArg::I32(2000)],
                    )?
                };
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

const MIB: usize = 1 << 20;

/// Polls `f` every millisecond until it holds; false when `timeout` passed first.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while !f() {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn failed(task: &str, message: &str) -> Error {
    Error::TaskFailed {
        task: task.into(),
        source: message.into(),
    }
}

/// Waits for a task with a deadline (a hang fails the test instead of stalling the run).
fn finish<T>(h: TaskHandle<T>, what: &str) -> gpukit_sched::Result<T> {
    match h.wait_timeout(Duration::from_secs(120)) {
        Ok(r) => r,
        Err(h) => {
            h.cancel();
            panic!("{what} did not end within 120 s");
        }
    }
}

fn driver(action: &str) -> impl FnOnce(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Driver {
        call: "cuMemcpy/cuMemset",
        action: action.into(),
        source: e,
    }
}

#[test]
fn partitions_confine_sms_and_memory_and_resize_when_free() {
    let Some((_g, dev, k)) = setup("partitions_confine_sms_and_memory_and_resize_when_free") else {
        return;
    };
    let sched = Scheduler::new(dev, SchedulerConfig::default()).unwrap();
    assert!(
        sched.mechanism().starts_with("green contexts"),
        "{}",
        sched.mechanism()
    );
    let l = sched.layout();
    let default_before = sched.stats().partitions[0].pool.clone();
    assert_eq!(default_before.name, None);

    // Create: quota, share (rounded to groups), band; disjoint groups.
    let pa = sched
        .create_partition(
            &Partition::new("pa")
                .memory("256MiB")
                .compute(0.25)
                .priority_band(1),
        )
        .unwrap();
    let pb = sched
        .create_partition(&Partition::new("pb").memory("1GiB").compute(0.5))
        .unwrap();
    println!("pa: {pa:?}\npb: {pb:?}");
    assert_eq!(pa.sms, l.sms(l.groups_for_share(0.25)));
    assert_eq!(pb.sms, l.sms(l.groups_for_share(0.5)));
    assert_eq!((pa.memory_quota, pa.priority_band), (256 * MIB as u64, 1));
    assert_eq!(pb.memory_quota, 1024 * MIB as u64);
    assert!(pa.groups.intersect(pb.groups).is_empty());
    assert!(sched
        .create_partition(&Partition::new("pa").memory("1MiB").compute(0.1))
        .is_err());

    // Admission against the partition's quota and share.
    let h = sched
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("too-much-memory")
                .partition("pa")
                .memory("512MiB", "512MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    assert_eq!(
        h.admission(),
        &Admission::Rejected {
            resource: Resource::Memory,
            requested: 512 * MIB as u64,
            available: 256 * MIB as u64,
        }
    );
    let h = sched
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("too-much-compute")
                .partition("pa")
                .memory("1MiB", "1MiB")
                .compute(0.5, 0.5),
        )
        .unwrap();
    assert!(
        matches!(
            h.admission(),
            Admission::Rejected {
                resource: Resource::Compute,
                ..
            }
        ),
        "{:?}",
        h.admission()
    );

    // One task in each partition, running together.
    let ready = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let a_hit_quota = Arc::new(AtomicBool::new(false));
    let b_allocated = Arc::new(AtomicBool::new(false));
    // One group of its own; the rest of the GPU idle: it may borrow only pa's groups.
    let one_group = 1.4 / l.groups as f64;
    let a = sched
        .submit(
            {
                let (k, ready, go) = (k.clone(), ready.clone(), go.clone());
                let (hit, b_alloc) = (a_hit_quota.clone(), b_allocated.clone());
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<_> {
                    ready.fetch_add(1, Ordering::AcqRel);
                    if !wait_until(Duration::from_secs(30), || go.load(Ordering::Acquire)) {
                        hit.store(true, Ordering::Release);
                        return Err(failed("a", "no go within 30 s"));
                    }
                    // One launch only: its first launch orders the home stream (the poison
                    // memset) before the lent lane; later launches on a lent lane are not.
                    let s = smids(ctx, &k, 8192)?;
                    let own = ctx.compute().sms;
                    let current = ctx.current_sms()?;
                    let limit = ctx.memory_limit();
                    // Its limit (4 GiB) is capped by pa's quota (256 MiB).
                    let held = ctx.alloc(200 * MIB);
                    let past = match ctx.alloc(100 * MIB).map(|_| ()) {
                        Err(Error::QuotaExceeded { limit, .. }) => Ok(limit as usize),
                        other => Err(format!("{other:?}")),
                    };
                    hit.store(true, Ordering::Release);
                    // Hold the 200 MiB while pb's task allocates.
                    wait_until(Duration::from_secs(30), || b_alloc.load(Ordering::Acquire));
                    let held = held.map(|_| ()).map_err(|e| e.to_string());
                    Ok((s, own, current, limit, held, past))
                }
            },
            TaskSpec::new("a-burstable")
                .partition("pa")
                .memory("64MiB", "4GiB")
                .compute(one_group, 1.0),
        )
        .unwrap();
    let b = sched
        .submit(
            {
                let (k, ready, go) = (k.clone(), ready.clone(), go.clone());
                let (hit, b_alloc) = (a_hit_quota.clone(), b_allocated.clone());
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<_> {
                    ready.fetch_add(1, Ordering::AcqRel);
                    let r = (|| {
                        if !wait_until(Duration::from_secs(30), || go.load(Ordering::Acquire)) {
                            return Err(failed("b", "no go within 30 s"));
                        }
                        let s = smids(ctx, &k, 4096)?;
                        if !wait_until(Duration::from_secs(30), || hit.load(Ordering::Acquire)) {
                            return Err(failed("b", "task a never reached its quota"));
                        }
                        // pa's task is at its quota; pb's allocations are unaffected.
                        let mut held = Vec::new();
                        for _ in 0..3 {
                            held.push(ctx.alloc(200 * MIB)?);
                        }
                        Ok((s, ctx.compute().sms, held.len()))
                    })();
                    b_alloc.store(true, Ordering::Release);
                    r
                }
            },
            TaskSpec::new("b-guaranteed")
                .partition("pb")
                .memory("768MiB", "768MiB")
                .compute(0.5, 0.5),
        )
        .unwrap();
    let both_in = wait_until(Duration::from_secs(30), || {
        ready.load(Ordering::Acquire) == 2
    });
    // Both partitions have a task: resize and remove are refused.
    let busy_resize = sched.resize_partition(&Partition::new("pa").memory("128MiB").compute(0.125));
    let busy_remove = sched.remove_partition("pb");
    go.store(true, Ordering::Release);
    let ra = finish(a, "task a");
    let rb = finish(b, "task b");
    assert!(both_in, "the two partition tasks did not both start");
    assert!(
        matches!(&busy_resize, Err(Error::PartitionBusy { name, .. }) if name == "pa"),
        "{busy_resize:?}"
    );
    assert!(
        matches!(&busy_remove, Err(Error::PartitionBusy { name, .. }) if name == "pb"),
        "{busy_remove:?}"
    );
    let (sa, own_a, current_a, limit_a, held_a, past_a) = ra.expect("task a");
    let (sb, nb, held_b) = rb.expect("task b");
    println!(
        "a: {} SMs touched (own {own_a}, current {current_a}, partition {}), limit {limit_a}; b: {} SMs touched of {nb} (partition {})",
        sa.len(),
        pa.sms,
        sb.len(),
        pb.sms
    );
    assert_eq!(own_a, l.sms(1));
    assert!(
        sa.len() as u32 >= own_a && sa.len() as u32 <= pa.sms,
        "a Burstable task in pa touched {} SMs; pa has {}",
        sa.len(),
        pa.sms
    );
    assert!(current_a >= own_a && current_a <= pa.sms, "{current_a}");
    assert_eq!(nb, pb.sms);
    assert_eq!(
        sb.len() as u32,
        pb.sms,
        "pb's task touched exactly pb's SMs"
    );
    assert!(sa.is_disjoint(&sb), "tasks of two partitions shared an SM");
    assert_eq!(limit_a, 256 * MIB as u64, "limit capped by the quota");
    assert_eq!(held_a, Ok(()), "200 MiB inside the quota");
    assert_eq!(past_a, Ok(256 * MIB), "past pa's quota: the quota error");
    assert_eq!(held_b, 3, "pb unaffected by pa's quota");

    // Free again: resize works (and a resize that cannot fit changes nothing).
    let pa2 = sched
        .resize_partition(
            &Partition::new("pa")
                .memory("128MiB")
                .compute(0.125)
                .priority_band(2),
        )
        .expect("resize of a free partition");
    assert_eq!(pa2.sms, l.sms(l.groups_for_share(0.125)));
    assert_eq!((pa2.memory_quota, pa2.priority_band), (128 * MIB as u64, 2));
    assert!(sched
        .resize_partition(&Partition::new("pa").memory("128MiB").compute(1.0))
        .is_err());
    let pools = sched.stats().partitions;
    let now = pools
        .iter()
        .find(|p| p.pool.name.as_deref() == Some("pa"))
        .expect("pa still there");
    assert_eq!(
        (now.pool.groups, now.pool.memory_quota),
        (pa2.groups, pa2.memory_quota)
    );
    // The resized partition in force: its new SMs and quota.
    let share = 0.125;
    let c = sched
        .submit(
            {
                let k = k.clone();
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<_> {
                    Ok((smids(ctx, &k, 4096)?, ctx.compute().sms))
                }
            },
            TaskSpec::new("c-resized")
                .partition("pa")
                .memory("64MiB", "64MiB")
                .compute(share, share),
        )
        .unwrap();
    let (sc, nc) = finish(c, "task c").expect("task c");
    assert_eq!((sc.len() as u32, nc), (pa2.sms, pa2.sms));
    let h = sched
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("over-new-quota")
                .partition("pa")
                .memory("256MiB", "256MiB")
                .compute(share, share),
        )
        .unwrap();
    assert!(
        matches!(
            h.admission(),
            Admission::Rejected {
                resource: Resource::Memory,
                ..
            }
        ),
        "{:?}",
        h.admission()
    );

    // Remove: everything returns to the default pool; the names are gone.
    sched.remove_partition("pa").expect("remove pa");
    sched.remove_partition("pb").expect("remove pb");
    let pools = sched.stats().partitions;
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].pool.groups, default_before.groups);
    assert_eq!(pools[0].pool.memory_quota, default_before.memory_quota);
    assert!(matches!(
        sched.submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("gone").partition("pa")
        ),
        Err(Error::UnknownPartition { .. })
    ));
}

#[test]
fn partition_priority_band_orders_starts() {
    let Some((_g, dev, _k)) = setup("partition_priority_band_orders_starts") else {
        return;
    };
    // One worker: the band decides which queued task starts when it frees.
    let sched = Scheduler::new(dev, SchedulerConfig::default().workers(1)).unwrap();
    for (name, band) in [("lo", 0), ("hi", 5)] {
        sched
            .create_partition(
                &Partition::new(name)
                    .memory("64MiB")
                    .compute(0.1)
                    .priority_band(band),
            )
            .unwrap();
    }
    let started = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let blocker = sched
        .submit(
            {
                let (started, release) = (started.clone(), release.clone());
                move |_: &mut TaskContext| -> gpukit_sched::Result<()> {
                    started.store(true, Ordering::Release);
                    wait_until(Duration::from_secs(30), || release.load(Ordering::Acquire));
                    Ok(())
                }
            },
            TaskSpec::new("blocker")
                .memory("16MiB", "16MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let blocker_started = wait_until(Duration::from_secs(30), || started.load(Ordering::Acquire));
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let rec = |order: Arc<Mutex<Vec<String>>>| {
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
            order
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(ctx.name().to_string());
            Ok(())
        }
    };
    let spec = |p: &str| {
        TaskSpec::new(p)
            .partition(p)
            .memory("16MiB", "16MiB")
            .compute(0.1, 0.1)
    };
    let lo = sched.submit(rec(order.clone()), spec("lo")).unwrap();
    let hi = sched.submit(rec(order.clone()), spec("hi")).unwrap();
    let (lo_adm, hi_adm) = (lo.admission().clone(), hi.admission().clone());
    release.store(true, Ordering::Release);
    finish(blocker, "blocker").expect("blocker");
    finish(hi, "hi").expect("hi");
    finish(lo, "lo").expect("lo");
    assert!(blocker_started);
    assert!(
        matches!(lo_adm, Admission::Queued { .. }) && matches!(hi_adm, Admission::Queued { .. }),
        "{lo_adm:?} {hi_adm:?}"
    );
    let order = order.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(order, ["hi", "lo"], "the higher band starts first");
}

/// `C = A * B` in FP32 (column-major n x n device buffers that live until the task
/// synchronizes) on the handle's stream.
fn sgemm(h: &BlasHandle, n: i32, a: u64, b: u64, c: u64) -> gpukit_sched::Result<()> {
    let (alpha, beta) = (1.0f32, 0.0f32);
    h.with(|raw| {
        // SAFETY: the caller passes three live n*n f32 device buffers that outlive the queued
        // call; the scalars are host values read during the call (host pointer mode).
        unsafe {
            cudarc::cublas::result::sgemm(
                raw,
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                n,
                n,
                n,
                &alpha,
                a as *const f32,
                n,
                b as *const f32,
                n,
                &beta,
                c as *mut f32,
                n,
            )
        }
    })?
    .map_err(|e| Error::Cublas {
        action: "running sgemm".into(),
        message: format!("{e:?}"),
    })
}

/// Column-major random matrix in [-1, 1) (xorshift; deterministic).
fn random_matrix(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n * n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn cublas_in_a_task_is_correct_and_confined() {
    let Some((_g, dev, _k)) = setup("cublas_in_a_task_is_correct_and_confined") else {
        return;
    };
    let sched = Scheduler::new(dev, SchedulerConfig::default()).unwrap();
    assert!(
        sched.mechanism().starts_with("green contexts"),
        "{}",
        sched.mechanism()
    );
    let l = sched.layout();

    // Correctness: n = 256 against a CPU reference.
    let n = 256usize;
    let (a, b) = (random_matrix(n, 1), random_matrix(n, 2));
    let (a2, b2) = (a.clone(), b.clone());
    let h = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<Vec<f32>> {
                let bytes = n * n * 4;
                let (da, db, dc) = (ctx.alloc(bytes)?, ctx.alloc(bytes)?, ctx.alloc(bytes)?);
                let (raw, _) = ctx.raw_stream()?;
                // SAFETY: da/db hold n*n f32 and are ordered on the home stream `raw`; the
                // host slices live in this closure until the synchronize below.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(da.ptr(), &a2, raw)
                        .map_err(driver("uploading A"))?;
                    cudarc::driver::result::memcpy_htod_async(db.ptr(), &b2, raw)
                        .map_err(driver("uploading B"))?;
                }
                let nn = n as i32;
                sgemm(ctx.cublas()?, nn, da.ptr(), db.ptr(), dc.ptr())?;
                ctx.synchronize()?;
                let mut c = vec![0f32; n * n];
                // SAFETY: copies n*n f32 from a live device buffer; the stream is idle.
                unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut c, dc.ptr()) }
                    .map_err(driver("reading C"))?;
                Ok(c)
            },
            TaskSpec::new("sgemm-check")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let c = finish(h, "sgemm check").expect("sgemm in a task");
    let (mut err2, mut a2n, mut b2n) = (0f64, 0f64, 0f64);
    for j in 0..n {
        for i in 0..n {
            let mut s = 0f64;
            for p in 0..n {
                s += a[i + p * n] as f64 * b[p + j * n] as f64;
            }
            err2 += (c[i + j * n] as f64 - s).powi(2);
        }
    }
    for i in 0..n * n {
        a2n += (a[i] as f64).powi(2);
        b2n += (b[i] as f64).powi(2);
    }
    let rel = err2.sqrt() / (a2n.sqrt() * b2n.sqrt());
    println!("sgemm {n}: ||C - ref|| / (||A|| ||B||) = {rel:.3e}");
    assert!(rel < 1e-5, "normwise error {rel:e}");

    // Confinement: the same SGEMM at n = 4096 on one group vs on every group.
    let timed = move |ctx: &mut TaskContext| -> gpukit_sched::Result<(f64, u32)> {
        let n = 4096usize;
        let bytes = n * n * 4;
        let (da, db, dc) = (ctx.alloc(bytes)?, ctx.alloc(bytes)?, ctx.alloc(bytes)?);
        let (raw, _) = ctx.raw_stream()?;
        for d in [&da, &db, &dc] {
            // SAFETY: a live buffer of `bytes` bytes ordered on the home stream (0x3c bytes
            // make small finite floats).
            unsafe { cudarc::driver::result::memset_d8_async(d.ptr(), 0x3c, bytes, raw) }
                .map_err(driver("filling"))?;
        }
        let nn = n as i32;
        sgemm(ctx.cublas()?, nn, da.ptr(), db.ptr(), dc.ptr())?;
        ctx.synchronize()?;
        let reps = 5;
        let t = Instant::now();
        for _ in 0..reps {
            sgemm(ctx.cublas()?, nn, da.ptr(), db.ptr(), dc.ptr())?;
        }
        ctx.synchronize()?;
        Ok((
            t.elapsed().as_secs_f64() * 1e3 / reps as f64,
            ctx.home_sms(),
        ))
    };
    let one = 1.4 / l.groups as f64;
    let small = sched
        .submit(
            timed,
            TaskSpec::new("sgemm-one-group")
                .memory("512MiB", "512MiB")
                .compute(one, one),
        )
        .unwrap();
    let (ms_small, sms_small) = finish(small, "one-group sgemm").expect("one-group sgemm");
    let big = sched
        .submit(
            timed,
            TaskSpec::new("sgemm-all-groups")
                .memory("512MiB", "512MiB")
                .compute(1.0, 1.0),
        )
        .unwrap();
    let (ms_big, sms_big) = finish(big, "all-groups sgemm").expect("all-groups sgemm");
    let ratio = ms_small / ms_big;
    println!(
        "sgemm 4096: {sms_small} SMs {ms_small:.3} ms, {sms_big} SMs {ms_big:.3} ms, ratio {ratio:.1} (SM ratio {:.1})",
        sms_big as f64 / sms_small as f64
    );
    assert_eq!(sms_small, l.sms(1));
    assert_eq!(sms_big, l.sms(l.groups));
    assert!(
        ratio >= 3.0,
        "cuBLAS not confined: one group {ms_small} ms vs all groups {ms_big} ms"
    );
}

/// A share below one SM group is admitted with a group of its own and paced within it to its
/// limit: the task is told so (`ComputeGrant::pace`), it is throttled, and its throughput lands
/// near its share. Reference in the same test: the same kernel loop in a one-group (8 SM)
/// green-context task. The paced task should reach about `share * total_sms / 8` of the
/// one-group task's throughput (0.02 * 132 / 8 = 0.33); the bounds are loose.
#[test]
fn share_below_one_group_is_paced() {
    let Some((_g, dev, k)) = setup("share_below_one_group_is_paced") else {
        return;
    };
    let total_sms = dev.multiprocessor_count() as f64;
    let sched = Scheduler::new(dev, SchedulerConfig::default()).unwrap();
    let body = |k: TestKernels| {
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(f64, Mechanism, u32)> {
            let blocks = 32 * 8 * 11;
            let out = ctx.alloc(blocks * 256 * 4)?;
            let cfg = LaunchConfig::new((blocks as u32, 1, 1), (256, 1, 1));
            let t = Instant::now();
            let mut n = 0u32;
            while t.elapsed() < Duration::from_millis(700) {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &k.fma_spin,
                        cfg,
                        &[KernelArg::Ptr(out.ptr()), KernelArg::I32(500)],
                    )?
                };
                ctx.synchronize()?;
                n += 1;
            }
            Ok((
                n as f64 / t.elapsed().as_secs_f64(),
                ctx.compute().mechanism,
                ctx.home_sms(),
            ))
        }
    };
    let group = sched
        .submit(
            body(k.clone()),
            TaskSpec::new("one-group")
                .memory("64MiB", "64MiB")
                .compute(8.0 / total_sms, 8.0 / total_sms),
        )
        .unwrap();
    let (rate_group, mech_group, sms_group) = finish(group, "one-group task").unwrap();
    let share = 0.02;
    let paced = sched
        .submit(
            body(k),
            TaskSpec::new("paced")
                .memory("64MiB", "64MiB")
                .compute(share, share),
        )
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || paced.is_done()),
        "the paced task did not finish within 60 s"
    );
    let throttles = paced.stats().throttles;
    let (rate_paced, mech_paced, sms_paced) = finish(paced, "paced task").unwrap();
    let ratio = rate_paced / rate_group;
    let expected = share * total_sms / 8.0;
    println!(
        "one group: {mech_group:?} on {sms_group} SMs, {rate_group:.1} kernels/s; \
         paced: {mech_paced:?} on {sms_paced} SMs, {rate_paced:.1} kernels/s, {throttles} \
         throttles; ratio {ratio:.3} (expected about {expected:.3})"
    );
    assert_eq!(mech_group, Mechanism::GreenContext);
    assert_eq!(sms_group, 8);
    assert_eq!((mech_paced, sms_paced), (Mechanism::GreenContext, 8));
    assert!(throttles > 0, "the paced task was never throttled");
    assert!(
        ratio > expected * 0.5 && ratio < expected * 1.6,
        "paced throughput ratio {ratio:.3}, expected about {expected:.3}"
    );
}

/// FMA blocks for the fallback tests (fills the GPU several times over).
const FMA_BLOCKS: u32 = 132 * 8 * 3;

/// Kernels per second of an FMA loop on a plain stream of the primary context (no scheduler).
fn fma_rate_raw(dev: &Device, k: &TestKernels, dur: Duration) -> f64 {
    let s = dev.new_stream(0).unwrap();
    let out = dev
        .allocator()
        .alloc_for(&"raw-fma".into(), FMA_BLOCKS as usize * 256 * 4, &s)
        .unwrap();
    let cfg = LaunchConfig::new((FMA_BLOCKS, 1, 1), (256, 1, 1));
    let args = [KernelArg::Ptr(out.ptr()), KernelArg::I32(500)];
    // SAFETY: `out` is a live allocation of FMA_BLOCKS * 256 floats on this stream's device,
    // the kernel's whole output, used by nothing else; it outlives the synchronize below.
    unsafe { k.fma_spin.launch_unchecked(s.cuda(), cfg, &args) }.unwrap();
    s.synchronize().unwrap();
    let t = Instant::now();
    let mut n = 0u32;
    while t.elapsed() < dur {
        // SAFETY: as above; each launch is synchronized before the next.
        unsafe { k.fma_spin.launch_unchecked(s.cuda(), cfg, &args) }.unwrap();
        s.synchronize().unwrap();
        n += 1;
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// A task body: the same FMA loop through the task's context; (kernels/s, mechanism).
fn fma_task(
    k: TestKernels,
    dur: Duration,
) -> impl FnOnce(&mut TaskContext) -> gpukit_sched::Result<(f64, Mechanism)> + Send {
    move |ctx: &mut TaskContext| {
        let out = ctx.alloc(FMA_BLOCKS as usize * 256 * 4)?;
        let cfg = LaunchConfig::new((FMA_BLOCKS, 1, 1), (256, 1, 1));
        let args = [KernelArg::Ptr(out.ptr()), KernelArg::I32(500)];
        // SAFETY: any pointer is a live allocation of this task, large enough for the
        // kernel, kept until the kernel completes.
        unsafe { ctx.launch_unchecked(&k.fma_spin, cfg, &args)? };
        ctx.synchronize()?;
        let t = Instant::now();
        let mut n = 0u32;
        while t.elapsed() < dur {
            // SAFETY: any pointer is a live allocation of this task, large enough for the
            // kernel, kept until the kernel completes.
            unsafe { ctx.launch_unchecked(&k.fma_spin, cfg, &args)? };
            ctx.synchronize()?;
            n += 1;
        }
        Ok((
            n as f64 / t.elapsed().as_secs_f64(),
            ctx.compute().mechanism,
        ))
    }
}

/// The pacing fallback with green contexts turned off: a BestEffort task alone is not slowed
/// (work-conserving), a Guaranteed quarter gets a quarter of the GPU's time, and admission
/// counts shares (a third half waits).
#[test]
fn fallback_without_green_contexts_keeps_each_tiers_promise() {
    let Some((_g, dev, k)) = setup("fallback_without_green_contexts_keeps_each_tiers_promise")
    else {
        return;
    };
    let dur = Duration::from_millis(500);
    let raw = fma_rate_raw(&dev, &k, dur);
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default().green_contexts(false),
    )
    .unwrap();
    println!("{}", sched.mechanism());
    assert!(
        sched.mechanism().starts_with("pacing"),
        "{}",
        sched.mechanism()
    );
    assert!(!sched.layout().green);
    let be = sched
        .submit(fma_task(k.clone(), dur), TaskSpec::new("be"))
        .unwrap();
    let be_id = be.id();
    let (be_rate, be_mech) = finish(be, "BestEffort alone").unwrap();
    let be_throttles = sched.task_stats(be_id).unwrap().throttles;
    let q = sched
        .submit(
            fma_task(k.clone(), dur),
            TaskSpec::new("quarter")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let q_id = q.id();
    let (q_rate, _) = finish(q, "Guaranteed quarter").unwrap();
    let q_stats = sched.task_stats(q_id).unwrap();
    let share = q_stats.compute.unwrap().granted_share;
    println!(
        "raw {raw:.1}/s; BestEffort alone {be_rate:.1}/s ({:.2}x, {be_throttles} throttles); \
         Guaranteed {share:.3} {q_rate:.1}/s ({:.3} of raw, {} throttles)",
        be_rate / raw,
        q_rate / raw,
        q_stats.throttles
    );
    assert_eq!(be_mech, Mechanism::Pacing);
    assert!(
        be_rate > 0.85 * raw,
        "BestEffort alone was slowed: {be_rate} vs {raw}"
    );
    assert_eq!(be_throttles, 0);
    assert!(
        (q_rate / raw / share - 1.0).abs() < 0.25,
        "Guaranteed {share}: {:.3} of the GPU",
        q_rate / raw
    );
    assert!(q_stats.throttles > 0);
    // Admission by share: two halves run, a third waits.
    let release = Arc::new(AtomicBool::new(false));
    let half = |r: Arc<AtomicBool>| {
        move |_: &mut TaskContext| -> gpukit_sched::Result<()> {
            wait_until(Duration::from_secs(30), || r.load(Ordering::Acquire));
            Ok(())
        }
    };
    let spec = || {
        TaskSpec::new("half")
            .memory("16MiB", "16MiB")
            .compute(0.5, 0.5)
    };
    let hs: Vec<_> = (0..3)
        .map(|_| sched.submit(half(release.clone()), spec()).unwrap())
        .collect();
    let adm: Vec<_> = hs.iter().map(|h| h.admission().clone()).collect();
    release.store(true, Ordering::Release);
    for h in hs {
        finish(h, "half").unwrap();
    }
    assert!(matches!(adm[0], Admission::Admitted(_)) && matches!(adm[1], Admission::Admitted(_)));
    assert!(matches!(adm[2], Admission::Queued { .. }), "{:?}", adm[2]);
}

/// A split without remainder: its last group is the floor, BestEffort work runs there and
/// never on the SMs a task owns.
#[test]
fn no_remainder_layout_keeps_best_effort_off_task_sms() {
    let Some((_g, dev, k)) = setup("no_remainder_layout_keeps_best_effort_off_task_sms") else {
        return;
    };
    let cfg = SchedulerConfig {
        ignore_split_remainder: true,
        ..Default::default()
    };
    let sched = Scheduler::new(dev, cfg).unwrap();
    let l = sched.layout();
    println!("{}", sched.mechanism());
    assert_eq!(l.remainder_sms, l.group_size, "the last group is the floor");
    let both = Arc::new(Barrier::new(2));
    let (b1, b2) = (both.clone(), both);
    let (k1, k2) = (k.clone(), k.clone());
    let g = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<BTreeSet<u32>> {
                b1.wait();
                smids(ctx, &k1, 8192)
            },
            TaskSpec::new("all-groups")
                .memory("64MiB", "64MiB")
                .compute(1.0, 1.0),
        )
        .unwrap();
    let be = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<BTreeSet<u32>> {
                b2.wait();
                smids(ctx, &k2, 8192)
            },
            TaskSpec::new("be"),
        )
        .unwrap();
    let sg = finish(g, "all-groups").unwrap();
    let sb = finish(be, "be").unwrap();
    println!("task: {} SMs, BestEffort: {} SMs", sg.len(), sb.len());
    assert_eq!(sg.len() as u32, l.sms(l.groups));
    assert!(sb.len() as u32 <= l.remainder_sms, "{} SMs", sb.len());
    assert!(
        sg.is_disjoint(&sb),
        "BestEffort work ran on SMs the task owns"
    );
}

#[test]
fn two_schedulers_on_one_device_is_an_error() {
    let Some((_g, dev, _k)) = setup("two_schedulers_on_one_device_is_an_error") else {
        return;
    };
    let a = Scheduler::new(dev.clone(), SchedulerConfig::default()).unwrap();
    let b = Scheduler::new(dev.clone(), SchedulerConfig::default());
    assert!(matches!(b, Err(Error::DeviceInUse { .. })), "{b:?}");
    drop(a);
    let c = Scheduler::new(dev, SchedulerConfig::default());
    assert!(c.is_ok(), "{c:?}");
}

/// A driver without green-context streams or `_v2` event timing (simulated by hiding the
/// symbols): the scheduler says why it paces, and times with the older entry point.
#[test]
fn missing_entry_points_degrade_with_a_reason() {
    let Some((_g, dev, k)) = setup("missing_entry_points_degrade_with_a_reason") else {
        return;
    };
    let run = |sched: &Scheduler| {
        let k = k.clone();
        let h = sched
            .submit(
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe {
                        ctx.launch_unchecked(
                            &k.spin_cycles,
                            LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                            &[KernelArg::Ptr(0), KernelArg::I64(2_000_000)],
                        )?
                    };
                    ctx.synchronize()
                },
                TaskSpec::new("spin")
                    .memory("16MiB", "16MiB")
                    .compute(0.25, 0.25),
            )
            .unwrap();
        let id = h.id();
        finish(h, "spin").unwrap();
        sched.task_stats(id).unwrap().gpu_time_ms
    };
    let s = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default().hide_entry_points(["cuGreenCtxStreamCreate"]),
    )
    .unwrap();
    println!("{}", s.mechanism());
    assert!(
        s.mechanism().starts_with("pacing") && s.mechanism().contains("cuGreenCtxStreamCreate"),
        "{}",
        s.mechanism()
    );
    assert!(run(&s).is_some_and(|ms| ms > 0.0));
    drop(s);
    let s = Scheduler::new(
        dev,
        SchedulerConfig::default().hide_entry_points(["cuEventElapsedTime_v2"]),
    )
    .unwrap();
    assert_eq!(s.entry_points().unwrap().timing, gpukit_sched::Timing::V1);
    let ms = run(&s);
    println!("GPU time with cuEventElapsedTime (v1): {ms:?} ms");
    assert!(ms.is_some_and(|ms| ms > 0.0));
}

/// The ledger on the device: gpukit-core operations and cuBLAS's workspace are charged to the
/// task, the limit holds for them, and a buffer the task returns stays charged until dropped.
#[test]
fn the_ledger_sees_core_ops_cublas_and_returned_buffers() {
    let Some((_g, dev, _k)) = setup("the_ledger_sees_core_ops_cublas_and_returned_buffers") else {
        return;
    };
    let sched = Scheduler::new(dev.clone(), SchedulerConfig::default()).unwrap();
    let h = sched
        .submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<(u64, DeviceBuffer)> {
                let dev = ctx.device()?.clone();
                let a = gpukit_core::GpuArray::<f32>::zeros(&dev, &[1 << 20])?;
                let in_use = ctx.memory_in_use();
                drop(a);
                ctx.cublas()?;
                let kept = ctx.alloc(8 << 20)?;
                Ok((in_use, kept))
            },
            TaskSpec::new("charged").memory("128MiB", "128MiB"),
        )
        .unwrap();
    let id = h.id();
    let (core_bytes, kept) = finish(h, "charged").unwrap();
    let ts = sched.task_stats(id).unwrap();
    println!(
        "core op: {core_bytes} B; peak {} B; after the end {} B",
        ts.memory_peak, ts.memory_in_use
    );
    assert!(
        core_bytes >= 4 << 20,
        "a core array of 4 MiB was not charged: {core_bytes}"
    );
    let ws = gpukit_core::handles::blas_workspace_bytes(dev.compute_capability()) as u64;
    assert!(
        ts.memory_peak >= ws + (8 << 20),
        "cuBLAS workspace not charged: {}",
        ts.memory_peak
    );
    assert_eq!(
        ts.memory_in_use,
        8 << 20,
        "the returned buffer is still charged"
    );
    assert_eq!(sched.stats().partitions[0].memory.orphaned, 8 << 20);
    drop(kept);
    assert_eq!(sched.task_stats(id).unwrap().memory_in_use, 0);
    // A limit below cuBLAS's workspace: the workspace is refused like any allocation.
    let h = sched
        .submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<()> { ctx.cublas().map(|_| ()) },
            TaskSpec::new("tight").memory("1MiB", "1MiB"),
        )
        .unwrap();
    let r = finish(h, "tight");
    assert!(matches!(r, Err(Error::QuotaExceeded { .. })), "{r:?}");
}

/// An injected panic in the scheduler's own code after the closure (where cudarc would panic
/// on a missing timing symbol): the task fails with an internal error, its memory and groups
/// are released, the one worker goes on.
#[test]
fn injected_panics_on_the_device_release_everything() {
    let Some((_g, dev, k)) = setup("injected_panics_on_the_device_release_everything") else {
        return;
    };
    let sched = Scheduler::new(
        dev,
        SchedulerConfig::default()
            .workers(1)
            .inject_panic(gpukit_sched::PanicPoint::AfterClosure, "victim"),
    )
    .unwrap();
    let kk = k.clone();
    let h = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                let _b = ctx.alloc(256 << 20)?;
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &kk.noop,
                        LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                        &[KernelArg::I32(1)],
                    )?
                };
                Ok(())
            },
            TaskSpec::new("victim")
                .memory("512MiB", "512MiB")
                .compute(0.5, 0.5),
        )
        .unwrap();
    let id = h.id();
    let r = finish(h, "victim");
    assert!(matches!(r, Err(Error::Internal { .. })), "{r:?}");
    let st = sched.stats();
    assert_eq!(
        st.tasks.iter().find(|t| t.id == id).unwrap().state,
        TaskState::Failed
    );
    assert_eq!(st.partitions[0].memory.in_use, 0);
    assert!(st.partitions[0].pool.groups_assigned.is_empty());
    let h = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<u32> {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &k.noop,
                        LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                        &[KernelArg::I32(1)],
                    )?
                };
                ctx.synchronize()?;
                Ok(ctx.compute().sms)
            },
            TaskSpec::new("next")
                .memory("16MiB", "16MiB")
                .compute(0.5, 0.5),
        )
        .unwrap();
    assert!(finish(h, "next").unwrap() > 0);
}

/// The lane cache keeps at most `max_cached_lanes` idle lanes.
#[test]
fn lane_cache_is_bounded() {
    let Some((_g, dev, _k)) = setup("lane_cache_is_bounded") else {
        return;
    };
    let sched = Scheduler::new(dev, SchedulerConfig::default().max_cached_lanes(2)).unwrap();
    let sets: Vec<(GroupSet, bool)> = (0..6).map(|i| (GroupSet(1 << i), false)).collect();
    sched.prewarm(&sets).unwrap();
    let st = sched.stats();
    println!(
        "created {}, cached {}",
        st.green_contexts_created, st.lanes_cached
    );
    assert_eq!(st.green_contexts_created, 6);
    assert!(st.lanes_cached <= 2, "{}", st.lanes_cached);
}

/// `TaskContext::cublas` takes the lane's handle from gpukit-core's shared cache (one per
/// stream): two tasks on the same lane get the same handle, each is charged its workspace
/// while it uses it, and the idle lane's workspace counts outside tasks.
#[test]
fn cublas_handles_come_from_the_shared_cache() {
    let Some((_g, dev, _k)) = setup("cublas_handles_come_from_the_shared_cache") else {
        return;
    };
    let ws = gpukit_core::handles::blas_workspace_bytes(dev.compute_capability()) as u64;
    let sched = Scheduler::new(dev, SchedulerConfig::default()).unwrap();
    let run = || {
        let h = sched
            .submit(
                |ctx: &mut TaskContext| -> gpukit_sched::Result<(usize, bool, u64)> {
                    let mine = ctx.cublas()? as *const BlasHandle as usize;
                    let cached = BlasHandle::for_stream(ctx.stream()?)?;
                    let same = Arc::as_ptr(&cached) as usize == mine;
                    Ok((mine, same, ctx.memory_in_use()))
                },
                TaskSpec::new("blas")
                    .memory("128MiB", "128MiB")
                    .compute(1.0, 1.0),
            )
            .unwrap();
        finish(h, "blas task").unwrap()
    };
    let (first, same1, used1) = run();
    let (second, same2, used2) = run();
    println!("handles {first:#x} / {second:#x}, charged {used1} / {used2} B (workspace {ws} B)");
    assert!(same1 && same2, "not the shared cache's handle");
    assert_eq!(
        first, second,
        "the second task on the lane made a new handle"
    );
    assert!(
        used1 >= ws && used2 >= ws,
        "the workspace was not charged to the task"
    );
    assert!(sched.stats().memory_outside_tasks >= ws);
}

/// A clone of a task's stream (or a buffer ordered on it) outliving the task keeps the
/// task's lane — its green context and stream — alive: the stream still works, and the lane
/// is destroyed only once the clone is gone.
#[test]
fn a_stream_clone_keeps_its_lane_alive() {
    let Some((_g, dev, _k)) = setup("a_stream_clone_keeps_its_lane_alive") else {
        return;
    };
    // No idle lane is kept: each lane is destroyed when its task ends, if it can be.
    let sched =
        Scheduler::new(dev.clone(), SchedulerConfig::default().max_cached_lanes(0)).unwrap();
    assert!(
        sched.mechanism().starts_with("green contexts"),
        "{}",
        sched.mechanism()
    );
    let h = sched
        .submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<(gpukit_core::Stream, DeviceBuffer)> {
                Ok((ctx.stream()?.clone(), ctx.alloc(1 << 20)?))
            },
            TaskSpec::new("leaks-its-stream")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    let (stream, buf) = finish(h, "task").unwrap();
    let st = sched.stats();
    println!(
        "after the task: destroyed {}, held {}",
        st.lanes_destroyed, st.lanes_held
    );
    assert_eq!((st.lanes_destroyed, st.lanes_held), (0, 1));
    // The stream still works: an operation on it, and its result.
    let v = dev
        .with_stream(&stream, || {
            gpukit_core::GpuArray::<f32>::full(&dev, &[1024], 2.5)?.to_vec()
        })
        .unwrap();
    assert!(v.iter().all(|&x| x == 2.5));
    stream.synchronize().unwrap();
    drop(buf);
    drop(stream);
    // The next lane returned retries the held one.
    let h = sched
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("next")
                .memory("16MiB", "16MiB")
                .compute(0.25, 0.25),
        )
        .unwrap();
    finish(h, "next").unwrap();
    let st = sched.stats();
    println!(
        "after the clone was dropped: destroyed {}, held {}",
        st.lanes_destroyed, st.lanes_held
    );
    assert_eq!(st.lanes_held, 0);
    assert!(st.lanes_destroyed >= 1);
}
