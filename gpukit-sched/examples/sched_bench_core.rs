//! gpukit-sched's proof on the GPU: one table, one run. Shares, isolation, work conservation,
//! memory and overheads, each beside its baseline measured in the same process.
//!
//! `cargo run -p gpukit-sched --release --example sched_bench_core` (a GPU with green contexts), or
//! from the repository root `cargo run --release --example sched_bench` (the
//! same file; named `sched_bench_core` here so the two examples do not collide).

use gpukit_core::{Device, Stream};
use gpukit_jit::{KernelArg, LaunchConfig};
use gpukit_sched::{
    format_bytes, CancelReason, Error, Mechanism, PanicPoint, QosClass, Scheduler, SchedulerConfig,
    TaskContext, TaskHandle, TaskSpec, TaskState,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[path = "../tests/common/kernels.rs"]
#[allow(dead_code)] // shared with the tests: the bench uses some of the kernels
mod kernels;
use kernels::TestKernels;

struct Counting;
static HEAP: AtomicI64 = AtomicI64::new(0);
// SAFETY: forwards to the system allocator and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;

type R<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// FMA grid: a multiple of 8 blocks per SM for 32, 56, 88 and 120 SMs (no wave tail).
const BLOCKS: u32 = 32 * 8 * 7 * 11 * 15 / 5;
const ITERS: i32 = 2000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

struct Row {
    section: &'static str,
    what: String,
    ours: String,
    baseline: String,
    target: String,
    pass: bool,
}

fn fma_cfg() -> LaunchConfig {
    LaunchConfig::new((BLOCKS, 1, 1), (256, 1, 1))
}

/// A compute-bound task body: waits at `start`, launches FMA kernels (one in flight) until
/// `stop`, returns (kernels, seconds).
fn fma_task(
    k: TestKernels,
    start: Arc<Barrier>,
    stop: Arc<AtomicBool>,
) -> impl FnOnce(&mut TaskContext) -> gpukit_sched::Result<(u64, f64, u32)> + Send {
    move |ctx: &mut TaskContext| {
        let out = ctx.alloc(BLOCKS as usize * 256 * 4)?;
        // SAFETY: any pointer is a live allocation of this task, large enough for the
        // kernel, kept until the kernel completes.
        unsafe {
            ctx.launch_unchecked(
                &k.fma_spin,
                fma_cfg(),
                &[KernelArg::Ptr(out.ptr()), ITERS.into()],
            )?
        };
        ctx.synchronize()?;
        start.wait();
        let t = Instant::now();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: any pointer is a live allocation of this task, large enough for the
            // kernel, kept until the kernel completes.
            unsafe {
                ctx.launch_unchecked(
                    &k.fma_spin,
                    fma_cfg(),
                    &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                )?
            };
            ctx.synchronize()?;
            n += 1;
        }
        // The SMs it was given: its own groups (with green contexts the driver-reported SMs
        // of its stream; in the fallback the SM-equivalents of its virtual groups).
        let sms = match ctx.compute().mechanism {
            Mechanism::Pacing => ctx.compute().sms,
            _ => ctx.home_sms(),
        };
        Ok((n, t.elapsed().as_secs_f64(), sms))
    }
}

fn shares(
    dev: &Device,
    k: &TestKernels,
    rows: &mut Vec<Row>,
    fractions: &[f64],
    fallback: bool,
) -> R<()> {
    // Baseline: the same tasks on plain streams of the primary context, no scheduler.
    let base: Vec<f64> = {
        let stop = Arc::new(AtomicBool::new(false));
        let start = Arc::new(Barrier::new(fractions.len() + 1));
        let hs: Vec<_> = fractions
            .iter()
            .map(|_| {
                let (dev, k, stop, start) = (dev.clone(), k.clone(), stop.clone(), start.clone());
                std::thread::spawn(move || -> R<f64> {
                    let s = dev.new_stream(0)?;
                    let out = dev.allocator().alloc_for(
                        &"bench-base".into(),
                        BLOCKS as usize * 256 * 4,
                        &s,
                    )?;
                    start.wait();
                    let t = Instant::now();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // SAFETY: `out` is a live allocation of BLOCKS * 256 f32 on this stream's
                        // device, alive until after the synchronize below, used by nothing else.
                        unsafe {
                            k.fma_spin.launch_unchecked(
                                s.cuda(),
                                fma_cfg(),
                                &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                            )
                        }?;
                        s.synchronize()?;
                        n += 1;
                    }
                    Ok(n as f64 / t.elapsed().as_secs_f64())
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
        hs.into_iter()
            .map(|h| h.join().expect("thread"))
            .collect::<R<_>>()?
    };
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default().green_contexts(!fallback),
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(fractions.len() + 1));
    let mut handles = Vec::new();
    for (i, f) in fractions.iter().enumerate() {
        let spec = TaskSpec::new(format!("share{i}"))
            .memory("256MiB", "256MiB")
            .compute(*f, *f);
        handles.push(sched.submit(fma_task(k.clone(), start.clone(), stop.clone()), spec)?);
    }
    start.wait();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let res: Vec<(u64, f64, u32)> = handles
        .into_iter()
        .map(|h| h.wait())
        .collect::<gpukit_sched::Result<_>>()?;
    let thr: Vec<f64> = res.iter().map(|r| r.0 as f64 / r.1).collect();
    let sms: Vec<u32> = res.iter().map(|r| r.2).collect();
    // Ratio of each task's throughput to the first's, against the ratio of SMs given.
    let mut worst = 0f64;
    let mut parts = Vec::new();
    for i in 1..thr.len() {
        let got = thr[i] / thr[0];
        let want = sms[i] as f64 / sms[0] as f64;
        worst = worst.max((got / want - 1.0).abs());
        parts.push(format!("{got:.3} vs {want:.3}"));
    }
    let label: Vec<String> = fractions.iter().map(|f| format!("{f}")).collect();
    let sm_s: Vec<String> = sms.iter().map(|s| s.to_string()).collect();
    let base_r: Vec<String> = base
        .iter()
        .skip(1)
        .map(|b| format!("{:.2}", b / base[0]))
        .collect();
    if !fallback {
        rows.push(Row {
            section: "shares",
            what: format!(
                "{} Guaranteed FMA tasks, SMs {}: throughput ratio vs SM ratio",
                label.join("/"),
                sm_s.join("/")
            ),
            ours: format!("{} (worst {:.1}% off)", parts.join(", "), worst * 100.0),
            baseline: format!("no sched: ratio {}", base_r.join(", ")),
            target: "within 10%".into(),
            pass: worst <= 0.10,
        });
        return Ok(());
    }
    // The fallback also promises each task its share of the whole GPU's time: compare with
    // one FMA loop alone on the GPU (no scheduler), measured now.
    let alone = fma_alone(dev, k, Duration::from_millis(800))?;
    let total = sched.layout().total_sms as f64;
    let got: Vec<String> = thr
        .iter()
        .zip(&sms)
        .map(|(t, s)| format!("{:.3} of {:.3}", t / alone, *s as f64 / total))
        .collect();
    let each_ok = thr
        .iter()
        .zip(&sms)
        .all(|(t, s)| t / alone >= 0.85 * (*s as f64 / total));
    rows.push(Row {
        section: "fallback",
        what: format!(
            "green contexts off: {} Guaranteed FMA tasks (virtual SMs {}): throughput ratio vs share ratio; each task's throughput as a fraction of one alone vs its share",
            label.join("/"),
            sm_s.join("/")
        ),
        ours: format!(
            "{} (worst {:.1}% off); {}",
            parts.join(", "),
            worst * 100.0,
            got.join(", ")
        ),
        baseline: format!("no sched: ratio {}; alone {alone:.0} kernels/s", base_r.join(", ")),
        target: "within 15%; each >= 85% of its share".into(),
        pass: worst <= 0.15 && each_ok,
    });
    Ok(())
}

/// Kernels per second of one FMA loop alone on a plain stream (no scheduler).
fn fma_alone(dev: &Device, k: &TestKernels, dur: Duration) -> R<f64> {
    let s = dev.new_stream(0)?;
    let out = dev
        .allocator()
        .alloc_for(&"bench-alone".into(), BLOCKS as usize * 256 * 4, &s)?;
    let args = [KernelArg::Ptr(out.ptr()), ITERS.into()];
    // SAFETY: `out` is a live allocation of BLOCKS * 256 f32 on this stream's device (the
    // kernel's whole output), used by nothing else and alive past every synchronize below.
    unsafe { k.fma_spin.launch_unchecked(s.cuda(), fma_cfg(), &args) }?;
    s.synchronize()?;
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < dur {
        // SAFETY: as above; each launch is synchronized before the next.
        unsafe { k.fma_spin.launch_unchecked(s.cuda(), fma_cfg(), &args) }?;
        s.synchronize()?;
        n += 1;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn probe_ms(
    k: &TestKernels,
    s: &Stream,
    raw: gpukit_jit::cudarc::driver::sys::CUstream,
    launch: &mut dyn FnMut() -> R<()>,
) -> R<f64> {
    let _ = (k, raw);
    let e0 = s.record()?;
    launch()?;
    let e1 = s.record()?;
    e1.synchronize()?;
    Ok(e0.elapsed_ms(&e1)? as f64)
}

fn isolation(dev: &Device, k: &TestKernels, rows: &mut Vec<Row>) -> R<()> {
    let probe_cfg = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    let probe_args = [KernelArg::Ptr(0), KernelArg::I64(10_000)];
    let hog_cfg = LaunchConfig::new((132 * 16, 1, 1), (256, 1, 1));
    let hog_args = [KernelArg::Ptr(0), KernelArg::I64(1_000_000)];
    let (least, greatest) = dev.stream_priority_range();
    let hi = dev.new_stream(greatest)?;
    let lo = dev.new_stream(least)?;
    let run_probes = |n: usize| -> R<f64> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(probe_ms(k, &hi, hi.cuda().cu_stream(), &mut || {
                // SAFETY: the only pointer is null, which spin_cycles checks before use.
                Ok(unsafe {
                    k.spin_cycles
                        .launch_unchecked(hi.cuda(), probe_cfg, &probe_args)
                }?)
            })?);
        }
        Ok(median(v))
    };
    run_probes(5)?;
    let alone = run_probes(50)?;
    for _ in 0..400 {
        // SAFETY: the only pointer is null, which spin_cycles checks before use.
        unsafe {
            k.spin_cycles
                .launch_unchecked(lo.cuda(), hog_cfg, &hog_args)
        }?;
    }
    std::thread::sleep(Duration::from_millis(5));
    let shared = run_probes(50)?;
    lo.synchronize()?;
    // With the scheduler: the probe is a Guaranteed task with one SM group; the hog is a
    // BestEffort task that borrows every other group and the floor.
    let sched = Scheduler::new(dev.clone(), SchedulerConfig::default())?;
    let one_group = 1.0 / sched.layout().groups as f64;
    let hog_running = Arc::new(Barrier::new(2));
    let stop = Arc::new(AtomicBool::new(false));
    let (k1, b1, s1) = (k.clone(), hog_running.clone(), stop.clone());
    let probe = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(f64, u32)> {
            for _ in 0..5 {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe { ctx.launch_unchecked(&k1.spin_cycles, probe_cfg, &probe_args)? };
            }
            ctx.synchronize()?;
            b1.wait();
            std::thread::sleep(Duration::from_millis(5));
            let s = ctx.stream()?.clone();
            let mut v = Vec::new();
            for _ in 0..50 {
                let e0 = s.record()?;
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe { ctx.launch_unchecked(&k1.spin_cycles, probe_cfg, &probe_args)? };
                let e1 = s.record()?;
                e1.synchronize()?;
                v.push(e0.elapsed_ms(&e1)? as f64);
            }
            s1.store(true, Ordering::Relaxed);
            Ok((median(v), ctx.home_sms()))
        },
        TaskSpec::new("probe")
            .memory("64MiB", "64MiB")
            .compute(one_group, one_group)
            .priority(10),
    )?;
    let (k2, b2, s2) = (k.clone(), hog_running, stop.clone());
    let hog = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<u32> {
            let mut first = true;
            let mut sms = 0;
            while !s2.load(Ordering::Relaxed) {
                for _ in 0..4 {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe { ctx.launch_unchecked(&k2.spin_cycles, hog_cfg, &hog_args)? };
                }
                if first {
                    sms = ctx.current_sms()?;
                    b2.wait();
                    first = false;
                }
                ctx.synchronize()?;
            }
            Ok(sms)
        },
        TaskSpec::new("hog"),
    )?;
    let (with, probe_sms) = probe.wait()?;
    let hog_sms = hog.wait()?;
    let ok = with < 2.0 * alone;
    rows.push(Row {
        section: "isolation",
        what: format!("~5 us probe kernel latency (median of 50): Guaranteed {probe_sms} SMs beside a BestEffort hog on {hog_sms} SMs"),
        ours: format!("{with:.4} ms ({:.2}x alone)", with / alone),
        baseline: format!("alone {alone:.4} ms; hog same context, probe on highest-priority stream {shared:.4} ms ({:.0}x)", shared / alone),
        target: "< 2x alone".into(),
        pass: ok,
    });
    Ok(())
}

fn work_conservation(dev: &Device, k: &TestKernels, rows: &mut Vec<Row>) -> R<()> {
    let sched = Scheduler::new(dev.clone(), SchedulerConfig::default())?;
    let l = sched.layout();
    let groups_all: Vec<_> = (0..l.groups).collect();
    let _ = groups_all;
    let stop_b = Arc::new(AtomicBool::new(false));
    let b_kernel_ms = Arc::new(AtomicU64::new(0));
    let b_sms_alone = Arc::new(AtomicU64::new(0));
    // Fewest SMs the Burstable task had after the Guaranteed arrival (its groups are lent back
    // once the Guaranteed task ends, so the last value would show the lending again).
    let b_sms_after = Arc::new(AtomicU64::new(u64::MAX));
    let phase = Arc::new(AtomicU64::new(0)); // 0 alone, 1 G submitted
    let b_rate_alone = Arc::new(AtomicU64::new(0));
    let (kb, sb, bk, bsa, bsb, ph, bra) = (
        k.clone(),
        stop_b.clone(),
        b_kernel_ms.clone(),
        b_sms_alone.clone(),
        b_sms_after.clone(),
        phase.clone(),
        b_rate_alone.clone(),
    );
    let b = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(u32, u32)> {
            let out = ctx.alloc(BLOCKS as usize * 256 * 4)?;
            let s = ctx.stream()?.clone();
            // Warm up (the lent-groups lane is created at the first launch).
            for _ in 0..3 {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &kb.fma_spin,
                        fma_cfg(),
                        &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                    )?
                };
                ctx.synchronize()?;
            }
            let t = Instant::now();
            let mut n = 0u64;
            let mut times = Vec::new();
            while t.elapsed() < Duration::from_millis(600) {
                let e0 = s.record()?;
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &kb.fma_spin,
                        fma_cfg(),
                        &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                    )?
                };
                let e1 = s.record()?;
                e1.synchronize()?;
                times.push(e0.elapsed_ms(&e1)? as f64);
                n += 1;
            }
            bra.store(
                (n as f64 / t.elapsed().as_secs_f64() * 1000.0) as u64,
                Ordering::Relaxed,
            );
            bk.store((median(times) * 1e6) as u64, Ordering::Relaxed);
            bsa.store(ctx.current_sms()? as u64, Ordering::Relaxed);
            ph.store(1, Ordering::Release);
            while !sb.load(Ordering::Relaxed) {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &kb.fma_spin,
                        fma_cfg(),
                        &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                    )?
                };
                ctx.synchronize()?;
                bsb.fetch_min(ctx.current_sms()? as u64, Ordering::Relaxed);
            }
            Ok((ctx.home_sms(), ctx.current_sms()?))
        },
        TaskSpec::new("burstable")
            .memory_request("256MiB")
            .compute(0.25, 1.0),
    )?;
    while phase.load(Ordering::Acquire) == 0 {
        if b.is_done() {
            return Err(format!("the Burstable task ended early: {:?}", b.wait().err()).into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Reference: the request's throughput (a Guaranteed 0.25 task alone, measured afterwards).
    let kg = k.clone();
    let g = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(f64, f64, u32)> {
            let out = ctx.alloc(BLOCKS as usize * 256 * 4)?;
            let s = ctx.stream()?.clone();
            let mut times = Vec::new();
            for _ in 0..12 {
                let e0 = s.record()?;
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &kg.fma_spin,
                        fma_cfg(),
                        &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                    )?
                };
                let e1 = s.record()?;
                e1.synchronize()?;
                times.push(e0.elapsed_ms(&e1)? as f64);
            }
            let first = times[0];
            let steady = median(times[4..].to_vec());
            Ok((first, steady, ctx.home_sms()))
        },
        TaskSpec::new("guaranteed")
            .memory("256MiB", "256MiB")
            .compute(0.75, 0.75),
    )?;
    let (first, steady, g_sms) = g.wait()?;
    stop_b.store(true, Ordering::Relaxed);
    let (b_home, _) = b.wait()?;
    let b_kernel = b_kernel_ms.load(Ordering::Relaxed) as f64 / 1e6;
    let rate_alone = b_rate_alone.load(Ordering::Relaxed) as f64 / 1000.0;
    // The request alone: a Guaranteed 0.25 task (same SMs as B's own groups), measured now.
    let kr = k.clone();
    let r = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<f64> {
            let out = ctx.alloc(BLOCKS as usize * 256 * 4)?;
            // SAFETY: any pointer is a live allocation of this task, large enough for the
            // kernel, kept until the kernel completes.
            unsafe {
                ctx.launch_unchecked(
                    &kr.fma_spin,
                    fma_cfg(),
                    &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                )?
            };
            ctx.synchronize()?;
            let t = Instant::now();
            let mut n = 0;
            while t.elapsed() < Duration::from_millis(400) {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &kr.fma_spin,
                        fma_cfg(),
                        &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                    )?
                };
                ctx.synchronize()?;
                n += 1;
            }
            Ok(n as f64 / t.elapsed().as_secs_f64())
        },
        TaskSpec::new("request-only")
            .memory("256MiB", "256MiB")
            .compute(0.25, 0.25),
    )?;
    let rate_req = r.wait()?;
    let b_alone_sms = b_sms_alone.load(Ordering::Relaxed);
    rows.push(Row {
        section: "work conservation",
        what: format!("Burstable (request 0.25 = {b_home} SMs, limit 1.0) alone: SMs used, throughput vs its request"),
        ours: format!("{b_alone_sms} SMs, {rate_alone:.0} kernels/s = {:.2}x", rate_alone / rate_req),
        baseline: format!("its request alone: {rate_req:.0} kernels/s"),
        target: "> 1x".into(),
        pass: rate_alone > 1.2 * rate_req && b_alone_sms > b_home as u64,
    });
    let delay = (first - steady).max(0.0);
    rows.push(Row {
        section: "work conservation",
        what: format!(
            "Guaranteed 0.75 ({g_sms} SMs) arrives: extra time of its first kernel (share back)"
        ),
        ours: format!(
            "{delay:.3} ms (first {first:.3}, steady {steady:.3}); Burstable down to {} SMs",
            b_sms_after.load(Ordering::Relaxed)
        ),
        baseline: format!("one Burstable kernel: {b_kernel:.3} ms"),
        target: "<= one kernel".into(),
        pass: delay <= b_kernel * 1.1 + 0.05,
    });
    Ok(())
}

fn memory(dev: &Device, rows: &mut Vec<Row>) -> R<()> {
    const GIB: usize = 1 << 30;
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default().memory_headroom("3GiB"),
    )?;
    let cap = sched.memory_capacity() as usize;
    let chunk = 2 * GIB;
    // G1: Guaranteed 16 GiB, allocates while the BestEffort tasks fill the GPU.
    let g1_go = Arc::new(AtomicBool::new(false));
    let g1g = g1_go.clone();
    let g1 = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(usize, usize)> {
            let mut held = Vec::new();
            let (mut ok, mut failed) = (0, 0);
            while !g1g.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            for _ in 0..16 {
                match ctx.alloc(GIB) {
                    Ok(b) => {
                        held.push(b);
                        ok += 1;
                    }
                    Err(_) => failed += 1,
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok((ok, failed))
        },
        TaskSpec::new("G1")
            .memory("16GiB", "16GiB")
            .compute(0.25, 0.25),
    )?;
    // Burstable: request 8 GiB, uses 24.
    let burst_ready = Arc::new(AtomicU64::new(0));
    let br = burst_ready.clone();
    let burst = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
            let mut held = Vec::new();
            for _ in 0..12 {
                held.push(ctx.alloc(chunk)?);
            }
            br.store(1, Ordering::Release);
            loop {
                ctx.check()?;
                std::thread::sleep(Duration::from_millis(1));
            }
        },
        TaskSpec::new("burstable")
            .memory("8GiB", "24GiB")
            .compute(0.25, 0.5),
    )?;
    while burst_ready.load(Ordering::Acquire) == 0 {
        if burst.is_done() {
            g1_go.store(true, Ordering::Relaxed);
            return Err(format!("the Burstable task ended early: {:?}", burst.wait().err()).into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Three BestEffort tasks push memory to the limit (2 GiB chunks until refused).
    let filled = Arc::new(AtomicU64::new(0));
    let mut bes = Vec::new();
    for (name, prio) in [("BE-a p0", 0), ("BE-b p0", 0), ("BE-c p1", 1)] {
        let f = filled.clone();
        let n = 99;
        bes.push(sched.submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<usize> {
                let mut held = Vec::new();
                for _ in 0..n {
                    match ctx.alloc(chunk) {
                        Ok(b) => held.push(b),
                        Err(Error::MemoryPressure { .. }) => break,
                        Err(e) => return Err(e),
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                f.fetch_add(1, Ordering::Release);
                loop {
                    ctx.check()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            TaskSpec::new(name).priority(prio),
        )?);
    }
    g1_go.store(true, Ordering::Relaxed);
    let t_fill = Instant::now();
    while filled.load(Ordering::Acquire) < 3 {
        if t_fill.elapsed() > Duration::from_secs(60) || bes.iter().any(|h| h.is_done()) {
            for h in &bes {
                h.cancel();
            }
            burst.cancel();
            return Err("BestEffort tasks did not fill memory".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (g1_ok, g1_failed) = g1.wait()?;
    let used_before = dev.total_memory() - dev.free_memory()?;
    // G2: Guaranteed, large (G1 has ended): fits beside the Burstable's request only, so every
    // BestEffort task and then the Burstable task (above its request) must be evicted.
    let g2_req = cap - 8 * GIB - GIB;
    let t = Instant::now();
    let g2 = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<(usize, usize, f64)> {
            let waited = t.elapsed().as_secs_f64() * 1e3;
            let mut held = Vec::new();
            let (mut ok, mut failed) = (0, 0);
            let mut left = ctx.memory_limit() as usize;
            while left >= chunk {
                match ctx.alloc(chunk) {
                    Ok(b) => {
                        held.push(b);
                        ok += 1;
                    }
                    Err(_) => failed += 1,
                }
                left -= chunk;
            }
            Ok((ok, failed, waited))
        },
        TaskSpec::new("G2")
            .memory(g2_req as u64, g2_req as u64)
            .compute(0.25, 0.25),
    )?;
    let g2_r = g2.wait();
    // Whatever happened, nobody keeps looping: cancel the rest (a no-op for evicted tasks).
    for h in &bes {
        h.cancel();
    }
    burst.cancel();
    let (g2_ok, g2_failed, waited) = g2_r?;
    let be_results: Vec<_> = bes.into_iter().map(|h| h.wait()).collect();
    let burst_r = burst.wait();
    let evicted: Vec<String> = sched
        .stats()
        .evictions
        .iter()
        .map(|(_, n, q)| format!("{n} ({q})"))
        .collect();
    let all_be_preempted = be_results
        .iter()
        .all(|r| matches!(r, Err(Error::Preempted { .. })));
    let kinds: Vec<&str> = sched
        .stats()
        .evictions
        .iter()
        .map(|(_, n, _)| {
            if n.starts_with("BE-c") {
                "c"
            } else if n.starts_with("BE") {
                "ab"
            } else {
                "burst"
            }
        })
        .collect();
    let order_ok = kinds.len() == 4
        && kinds[..2].iter().all(|n| *n == "ab")
        && kinds[2] == "c"
        && kinds[3] == "burst";
    let _ = QosClass::BestEffort;
    rows.push(Row {
        section: "memory",
        what: format!("Guaranteed allocations while BestEffort tasks fill the GPU ({} of {} in use)", format_bytes(used_before as u64), format_bytes(dev.total_memory() as u64)),
        ours: format!("G1 {g1_ok} ok / {g1_failed} failed; G2 ({}) {g2_ok} ok / {g2_failed} failed after {waited:.0} ms", format_bytes(g2_req as u64)),
        baseline: "no sched: first come, first served (cuMemAlloc OOM)".into(),
        target: "0 failed".into(),
        pass: g1_failed == 0 && g2_failed == 0 && g1_ok == 16,
    });
    rows.push(Row {
        section: "memory",
        what:
            "eviction order for G2 (BestEffort p0 largest first, p1, then Burstable above request)"
                .into(),
        ours: format!(
            "{}; Burstable: {}",
            evicted.join(" > "),
            match &burst_r {
                Ok(_) => "not evicted".to_string(),
                Err(e) => e.to_string().chars().take(50).collect(),
            }
        ),
        baseline: "no sched: no eviction, the arrival meets OOM".into(),
        target: "BE p0, BE p0, BE p1, Burstable".into(),
        pass: all_be_preempted && order_ok && matches!(burst_r, Err(Error::Preempted { .. })),
    });
    Ok(())
}

fn overheads(dev: &Device, k: &TestKernels, rows: &mut Vec<Row>) -> R<()> {
    let sched = Scheduler::new(dev.clone(), SchedulerConfig::default().workers(2))?;
    // Submit + admission, admitted path: a trivial Guaranteed task, one at a time.
    let mut adm = Vec::new();
    for i in 0..300 {
        let t = Instant::now();
        let h = sched.submit(
            |_ctx: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("t")
                .memory("1MiB", "1MiB")
                .compute(0.25, 0.25),
        )?;
        let dt = t.elapsed().as_secs_f64() * 1e6;
        if i >= 20 {
            adm.push(dt);
        }
        h.wait()?;
    }
    // Admitted after 2 ms idle: the workers sleep, so submit wakes one (and runs cold).
    let mut idle = Vec::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(2));
        let t = Instant::now();
        let h = sched.submit(
            |_ctx: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("t")
                .memory("1MiB", "1MiB")
                .compute(0.25, 0.25),
        )?;
        idle.push(t.elapsed().as_secs_f64() * 1e6);
        h.wait()?;
    }
    // Queued path: both workers blocked, then 64 submissions queue up.
    let gate = Arc::new(AtomicBool::new(false));
    let blockers: Vec<_> = (0..2)
        .map(|_| {
            let g = gate.clone();
            sched.submit(
                move |_ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                    while !g.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(())
                },
                TaskSpec::new("blocker")
                    .memory("1MiB", "1MiB")
                    .compute(0.25, 0.25),
            )
        })
        .collect::<gpukit_sched::Result<_>>()?;
    std::thread::sleep(Duration::from_millis(20));
    let mut q = Vec::new();
    let heap0 = HEAP.load(Ordering::Relaxed);
    let mut hs = Vec::new();
    for _ in 0..64 {
        let t = Instant::now();
        let h = sched.submit(
            |_ctx: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("queued")
                .memory("1MiB", "1MiB")
                .compute(0.25, 0.25),
        )?;
        q.push(t.elapsed().as_secs_f64() * 1e6);
        hs.push(h);
    }
    let per_task = (HEAP.load(Ordering::Relaxed) - heap0) as f64 / 64.0;
    gate.store(true, Ordering::Relaxed);
    for h in hs {
        h.wait()?;
    }
    for b in blockers {
        b.wait()?;
    }
    let (adm_med, q_med, idle_med) = (median(adm), median(q.clone()), median(idle));
    rows.push(Row {
        section: "overheads",
        what: "submit + admission (median; admitted / queued behind 64)".into(),
        ours: format!("{adm_med:.2} us / {q_med:.2} us"),
        baseline: String::new(),
        target: "< 5 us".into(),
        pass: adm_med < 5.0,
    });
    rows.push(Row {
        section: "overheads",
        what: "submit + admission after 2 ms idle (median; wakes a sleeping worker)".into(),
        ours: format!("{idle_med:.2} us"),
        baseline: String::new(),
        target: "< 50 us".into(),
        pass: idle_med < 50.0,
    });
    // Launch overhead: TaskContext::launch vs a raw launch on the same stream (CPU time).
    let kk = k.clone();
    let (ctx_us, raw_us) = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<(f64, f64)> {
                let (raw, _) = ctx.raw_stream()?;
                let n = 2000;
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for _ in 0..10 {
                    let t = Instant::now();
                    for _ in 0..n {
                        // SAFETY: any pointer is a live allocation of this task, large enough for the
                        // kernel, kept until the kernel completes.
                        unsafe {
                            ctx.launch_unchecked(
                                &kk.noop,
                                LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                                &[KernelArg::I32(1)],
                            )?
                        };
                    }
                    a.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
                    ctx.synchronize()?;
                    ctx.make_current()?;
                    let t = Instant::now();
                    for _ in 0..n {
                        // SAFETY: live stream of the current context; no pointer arguments.
                        unsafe {
                            kk.noop.launch_raw(
                                raw,
                                LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                                &[KernelArg::I32(1)],
                            )?
                        };
                    }
                    b.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
                    ctx.synchronize()?;
                }
                Ok((median(a), median(b)))
            },
            TaskSpec::new("launch")
                .memory("1MiB", "1MiB")
                .compute(0.25, 0.25),
        )?
        .wait()?;
    rows.push(Row {
        section: "overheads",
        what: "kernel launch from TaskContext vs raw launch (CPU, median)".into(),
        ours: format!("{ctx_us:.2} us (+{:.2} us)", ctx_us - raw_us),
        baseline: format!("raw {raw_us:.2} us"),
        target: "within 1 us".into(),
        pass: ctx_us - raw_us < 1.0,
    });
    rows.push(Row {
        section: "overheads",
        what: "scheduler heap per queued task (counting allocator)".into(),
        ours: format!("{per_task:.0} B"),
        baseline: String::new(),
        target: "< 4 KiB".into(),
        pass: per_task < 4096.0,
    });
    Ok(())
}

/// An FMA loop for `dur` through the task's context: (kernels/s, throttles seen by the task).
fn fma_for(
    k: TestKernels,
    dur: Duration,
) -> impl FnOnce(&mut TaskContext) -> gpukit_sched::Result<f64> + Send {
    move |ctx: &mut TaskContext| {
        let out = ctx.alloc(BLOCKS as usize * 256 * 4)?;
        let args = [KernelArg::Ptr(out.ptr()), ITERS.into()];
        // SAFETY: any pointer is a live allocation of this task, large enough for the
        // kernel, kept until the kernel completes.
        unsafe { ctx.launch_unchecked(&k.fma_spin, fma_cfg(), &args)? };
        ctx.synchronize()?;
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed() < dur {
            // SAFETY: any pointer is a live allocation of this task, large enough for the
            // kernel, kept until the kernel completes.
            unsafe { ctx.launch_unchecked(&k.fma_spin, fma_cfg(), &args)? };
            ctx.synchronize()?;
            n += 1;
        }
        Ok(n as f64 / t.elapsed().as_secs_f64())
    }
}

/// The fallback's other promises: a BestEffort task alone on an idle GPU is not slowed
/// (work conservation), and a Guaranteed half keeps its half beside a BestEffort hog.
fn fallback_tiers(dev: &Device, k: &TestKernels, rows: &mut Vec<Row>) -> R<()> {
    let dur = Duration::from_millis(800);
    let alone = fma_alone(dev, k, dur)?;
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default().green_contexts(false),
    )?;
    let be = sched.submit(fma_for(k.clone(), dur), TaskSpec::new("be-alone"))?;
    let be_id = be.id();
    let be_rate = be.wait()?;
    let be_throttles = sched.task_stats(be_id).map_or(u64::MAX, |t| t.throttles);
    rows.push(Row {
        section: "fallback",
        what: "green contexts off: BestEffort FMA task alone on an idle GPU (work-conserving)"
            .into(),
        ours: format!(
            "{be_rate:.0} kernels/s = {:.2}x alone, {be_throttles} throttles",
            be_rate / alone
        ),
        baseline: format!("alone, no sched: {alone:.0} kernels/s (before: paced to 0.1%)"),
        target: ">= 0.9x alone, 0 throttles".into(),
        pass: be_rate >= 0.9 * alone && be_throttles == 0,
    });
    // A Guaranteed half beside a BestEffort hog that would take the whole GPU.
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let kh = k.clone();
    let hog = sched.submit(
        move |ctx: &mut TaskContext| -> gpukit_sched::Result<u64> {
            let out = ctx.alloc(BLOCKS as usize * 256 * 4)?;
            let args = [KernelArg::Ptr(out.ptr()), ITERS.into()];
            let mut n = 0;
            while !st.load(Ordering::Relaxed) {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe { ctx.launch_unchecked(&kh.fma_spin, fma_cfg(), &args)? };
                ctx.synchronize()?;
                n += 1;
            }
            Ok(n)
        },
        TaskSpec::new("be-hog"),
    )?;
    std::thread::sleep(Duration::from_millis(100));
    let g = sched.submit(
        fma_for(k.clone(), dur),
        TaskSpec::new("g-half")
            .memory("256MiB", "256MiB")
            .compute(0.5, 0.5),
    )?;
    let g_id = g.id();
    let g_rate = g.wait();
    stop.store(true, Ordering::Relaxed);
    let hog_kernels = hog.wait()?;
    let g_rate = g_rate?;
    let share = sched
        .task_stats(g_id)
        .and_then(|t| t.compute)
        .map_or(0.5, |c| c.granted_share);
    rows.push(Row {
        section: "fallback",
        what: format!(
            "green contexts off: Guaranteed {share:.3} FMA task beside a BestEffort hog: its throughput vs its share of one alone"
        ),
        ours: format!(
            "{g_rate:.0} kernels/s = {:.3} of alone (hog ran {hog_kernels} kernels in all)",
            g_rate / alone
        ),
        baseline: format!("alone: {alone:.0} kernels/s; unpaced streams split about 1:1"),
        target: format!(">= {:.3} (85% of its share)", 0.85 * share),
        pass: g_rate / alone >= 0.85 * share,
    });
    Ok(())
}

/// Waits for a handle in a thread; the time from `t0` to its outcome comes back with it.
fn timed<T: Send + 'static>(
    h: TaskHandle<T>,
    t0: Instant,
) -> std::thread::JoinHandle<(gpukit_sched::Result<T>, Duration)> {
    std::thread::spawn(move || {
        let r = h.wait();
        (r, t0.elapsed())
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The failure paths on the GPU, each with the time to its outcome.
fn failures(dev: &Device, k: &TestKernels, rows: &mut Vec<Row>) -> R<()> {
    const GIB: usize = 1 << 30;
    let noop_cfg = LaunchConfig::new((1, 1, 1), (32, 1, 1));
    // 1. Panics: in the closure after allocating, and in the scheduler after the closure (what
    //    a missing cuEventElapsedTime_v2 did inside cudarc). One worker: it must survive both.
    {
        let sched = Scheduler::new(
            dev.clone(),
            SchedulerConfig::default()
                .workers(1)
                .inject_panic(PanicPoint::AfterClosure, "internal"),
        )?;
        let mut times = Vec::new();
        let mut kinds = Vec::new();
        for name in ["closure", "internal"] {
            let kk = k.clone();
            let t0 = Instant::now();
            let h = sched.submit(
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                    let _b = ctx.alloc(GIB)?;
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe { ctx.launch_unchecked(&kk.noop, noop_cfg, &[KernelArg::I32(1)])? };
                    ctx.synchronize()?;
                    if ctx.name() == "closure" {
                        panic!("injected panic in the task's closure");
                    }
                    Ok(())
                },
                TaskSpec::new(name).memory("2GiB", "2GiB").compute(0.5, 0.5),
            )?;
            let r = h.wait();
            times.push(ms(t0.elapsed()));
            kinds.push(match r {
                Err(Error::Panicked { .. }) => "Panicked",
                Err(Error::Internal { .. }) => "Internal",
                _ => "wrong outcome",
            });
        }
        let st = sched.stats();
        let left = st.partitions[0].memory.in_use;
        let groups_free = st.partitions[0].pool.groups_assigned.is_empty();
        let kk = k.clone();
        let next = sched
            .submit(
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe { ctx.launch_unchecked(&kk.noop, noop_cfg, &[KernelArg::I32(1)])? };
                    ctx.synchronize()
                },
                TaskSpec::new("next")
                    .memory("1GiB", "1GiB")
                    .compute(0.5, 0.5),
            )?
            .wait();
        rows.push(Row {
            section: "failures",
            what: "injected panic: in the closure / in the scheduler after the closure (1 worker, 1 GiB held)".into(),
            ours: format!(
                "{} after {:.1} ms / {} after {:.1} ms; {left} B left charged, groups free: {groups_free}; next task: {}",
                kinds[0], times[0], kinds[1], times[1],
                if next.is_ok() { "ok" } else { "FAILED" }
            ),
            baseline: "before: a panic outside the closure killed the worker; wait() hung".into(),
            target: "Panicked / Internal, < 100 ms, 0 B, next ok".into(),
            pass: kinds == ["Panicked", "Internal"]
                && times.iter().all(|t| *t < 100.0)
                && left == 0
                && groups_free
                && next.is_ok(),
        });
    }
    // 2. A driver without green-context streams and without cuEventElapsedTime_v2.
    {
        let t0 = Instant::now();
        let sched = Scheduler::new(
            dev.clone(),
            SchedulerConfig::default()
                .hide_entry_points(["cuGreenCtxStreamCreate", "cuEventElapsedTime_v2"]),
        )?;
        let ready = ms(t0.elapsed());
        let mech = sched.mechanism().to_string();
        let timing = sched.entry_points().map(|e| e.timing);
        let kk = k.clone();
        let h = sched.submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                // SAFETY: any pointer is a live allocation of this task, large enough for the
                // kernel, kept until the kernel completes.
                unsafe {
                    ctx.launch_unchecked(
                        &kk.spin_cycles,
                        noop_cfg,
                        &[KernelArg::Ptr(0), KernelArg::I64(2_000_000)],
                    )?
                };
                ctx.synchronize()
            },
            TaskSpec::new("spin")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )?;
        let id = h.id();
        let r = h.wait();
        let gpu_ms = sched.task_stats(id).and_then(|t| t.gpu_time_ms);
        let degraded = mech.starts_with("pacing") && mech.contains("cuGreenCtxStreamCreate");
        rows.push(Row {
            section: "failures",
            what: "simulated driver without cuGreenCtxStreamCreate and cuEventElapsedTime_v2".into(),
            ours: format!(
                "ready in {ready:.0} ms: `{}`; timing {timing:?}; task {} with GPU time {gpu_ms:?} ms",
                mech.chars().take(110).collect::<String>(),
                if r.is_ok() { "ok" } else { "FAILED" }
            ),
            baseline: "before: cudarc panics at the first call (worker dies)".into(),
            target: "pacing with the reason, task ok, GPU time from v1".into(),
            pass: degraded
                && timing == Some(gpukit_sched::Timing::V1)
                && r.is_ok()
                && gpu_ms.is_some_and(|m| m > 0.0),
        });
    }
    // 3. Preemption: a victim that never reaches a safe point, and one that does.
    {
        let grace = Duration::from_millis(500);
        let sched = Scheduler::new(
            dev.clone(),
            SchedulerConfig::default()
                .memory_capacity("8GiB")
                .stop_grace(grace),
        )?;
        let held = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let (h2, r2) = (held.clone(), release.clone());
        let victim = sched.submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                let _b: Vec<_> = (0..6)
                    .map(|_| ctx.alloc(GIB))
                    .collect::<gpukit_sched::Result<_>>()?;
                h2.store(true, Ordering::Release);
                // No safe point: a host loop that never calls the scheduler.
                while !r2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            },
            TaskSpec::new("stuck"),
        )?;
        while !held.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        let g = sched.submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<usize> {
                let b: Vec<_> = (0..4)
                    .map(|_| ctx.alloc(GIB))
                    .collect::<gpukit_sched::Result<_>>()?;
                Ok(b.len())
            },
            TaskSpec::new("g")
                .memory("4GiB", "4GiB")
                .compute(0.25, 0.25),
        )?;
        let (wv, wg) = (timed(victim, t0), timed(g, t0));
        let (rv, tv) = wv.join().map_err(|_| "waiter panicked")?;
        let (rg, tg) = wg.join().map_err(|_| "waiter panicked")?;
        let in_use_before = sched.stats().partitions[0].memory.in_use;
        let t1 = Instant::now();
        release.store(true, Ordering::Release);
        let g2 = sched.submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<usize> {
                let b: Vec<_> = (0..4)
                    .map(|_| ctx.alloc(GIB))
                    .collect::<gpukit_sched::Result<_>>()?;
                Ok(b.len())
            },
            TaskSpec::new("g-again")
                .memory("4GiB", "4GiB")
                .compute(0.25, 0.25),
        )?;
        let r2 = g2.wait();
        let t_again = ms(t1.elapsed());
        let bound = grace + Duration::from_millis(150);
        rows.push(Row {
            section: "failures",
            what: format!("preemption of a task that never yields (6 GiB held; Guaranteed 4 GiB of 8 arrives; grace {} ms)", grace.as_millis()),
            ours: format!(
                "victim {} after {:.0} ms, starter {} after {:.0} ms; {} held until it returned; retry {} in {t_again:.0} ms",
                if matches!(rv, Err(Error::Preempted { .. })) { "Preempted" } else { "WRONG" },
                ms(tv),
                if matches!(rg, Err(Error::MemoryUnavailable { .. })) { "MemoryUnavailable" } else { "WRONG" },
                ms(tg),
                format_bytes(in_use_before),
                if matches!(r2, Ok(4)) { "ok" } else { "FAILED" },
            ),
            baseline: "before: the start blocked a worker for 30 s, then failed as Rejected".into(),
            target: format!("both in [{}, {}] ms; retry ok < 200 ms", grace.as_millis(), bound.as_millis()),
            pass: matches!(rv, Err(Error::Preempted { .. }))
                && matches!(rg, Err(Error::MemoryUnavailable { .. }))
                && [tv, tg].iter().all(|t| *t >= grace && *t <= bound)
                && matches!(r2, Ok(4))
                && t_again < 200.0,
        });
        // A victim that reaches safe points: evicted within one of them.
        let held = Arc::new(AtomicBool::new(false));
        let h2 = held.clone();
        let kk = k.clone();
        let victim = sched.submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                let _b: Vec<_> = (0..6)
                    .map(|_| ctx.alloc(GIB))
                    .collect::<gpukit_sched::Result<_>>()?;
                h2.store(true, Ordering::Release);
                loop {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe { ctx.launch_unchecked(&kk.noop, noop_cfg, &[KernelArg::I32(1)])? };
                    ctx.synchronize()?;
                }
            },
            TaskSpec::new("yields"),
        )?;
        while !held.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        let g = sched.submit(
            |ctx: &mut TaskContext| -> gpukit_sched::Result<usize> {
                let b: Vec<_> = (0..4)
                    .map(|_| ctx.alloc(GIB))
                    .collect::<gpukit_sched::Result<_>>()?;
                Ok(b.len())
            },
            TaskSpec::new("g")
                .memory("4GiB", "4GiB")
                .compute(0.25, 0.25),
        )?;
        let (wv, wg) = (timed(victim, t0), timed(g, t0));
        let (rv, tv) = wv.join().map_err(|_| "waiter panicked")?;
        let (rg, tg) = wg.join().map_err(|_| "waiter panicked")?;
        rows.push(Row {
            section: "failures",
            what: "preemption of a task that reaches safe points (launch + synchronize loop)"
                .into(),
            ours: format!(
                "victim {} after {:.1} ms; Guaranteed got {:?} GiB after {:.1} ms",
                if matches!(rv, Err(Error::Preempted { .. })) {
                    "Preempted"
                } else {
                    "WRONG"
                },
                ms(tv),
                rg.as_ref().ok(),
                ms(tg)
            ),
            baseline: String::new(),
            target: "Preempted, Guaranteed 4 GiB, < 50 ms".into(),
            pass: matches!(rv, Err(Error::Preempted { .. }))
                && matches!(rg, Ok(4))
                && ms(tg) < 50.0,
        });
    }
    // 4. Deadline expiry while queued, with nothing else happening; and a timeout.
    {
        let sched = Scheduler::new(dev.clone(), SchedulerConfig::default().workers(1))?;
        let gate = Arc::new(AtomicBool::new(false));
        let g2 = gate.clone();
        let blocker = sched.submit(
            move |_: &mut TaskContext| -> gpukit_sched::Result<()> {
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            },
            TaskSpec::new("blocker")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )?;
        let deadline = Duration::from_millis(200);
        let t0 = Instant::now();
        let late = sched.submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("late")
                .memory("64MiB", "64MiB")
                .deadline(deadline),
        )?;
        let r = late.wait();
        let t_deadline = t0.elapsed();
        gate.store(true, Ordering::Release);
        blocker.wait()?;
        let timeout = Duration::from_millis(200);
        let kk = k.clone();
        let t0 = Instant::now();
        let long = sched.submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                let out = ctx.alloc(BLOCKS as usize * 256 * 4)?;
                loop {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe {
                        ctx.launch_unchecked(
                            &kk.fma_spin,
                            fma_cfg(),
                            &[KernelArg::Ptr(out.ptr()), ITERS.into()],
                        )?
                    };
                    ctx.synchronize()?;
                }
            },
            TaskSpec::new("long")
                .memory("64MiB", "64MiB")
                .compute(0.5, 0.5)
                .timeout(timeout),
        )?;
        let rt = long.wait();
        let t_timeout = t0.elapsed();
        rows.push(Row {
            section: "failures",
            what: format!(
                "deadline expiry while queued ({} ms) / timeout of a running kernel loop ({} ms)",
                deadline.as_millis(),
                timeout.as_millis()
            ),
            ours: format!(
                "{} after {:.1} ms / {} after {:.1} ms",
                if matches!(r, Err(Error::DeadlineExpired { .. })) {
                    "DeadlineExpired"
                } else {
                    "WRONG"
                },
                ms(t_deadline),
                if matches!(rt, Err(Error::TimedOut { .. })) {
                    "TimedOut"
                } else {
                    "WRONG"
                },
                ms(t_timeout)
            ),
            baseline: "before: expiry only when something else happened; no timeouts".into(),
            target: "within 30 ms of the time (one FMA kernel for the timeout)".into(),
            pass: matches!(r, Err(Error::DeadlineExpired { .. }))
                && matches!(rt, Err(Error::TimedOut { .. }))
                && t_deadline >= deadline
                && t_deadline <= deadline + Duration::from_millis(30)
                && t_timeout >= timeout
                && t_timeout <= timeout + Duration::from_millis(30),
        });
    }
    // 5. Shutdown with running tasks: one ending by itself, one yielding, one never yielding,
    //    one queued.
    {
        let grace = Duration::from_millis(300);
        let timeout = Duration::from_millis(200);
        let sched = Scheduler::new(
            dev.clone(),
            SchedulerConfig::default().workers(3).stop_grace(grace),
        )?;
        let t0 = Instant::now();
        let kk = k.clone();
        let short = sched.submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                for _ in 0..20 {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe { ctx.launch_unchecked(&kk.noop, noop_cfg, &[KernelArg::I32(1)])? };
                    ctx.synchronize()?;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok(())
            },
            TaskSpec::new("short")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )?;
        let kk = k.clone();
        let yields = sched.submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                loop {
                    // SAFETY: any pointer is a live allocation of this task, large enough for the
                    // kernel, kept until the kernel completes.
                    unsafe { ctx.launch_unchecked(&kk.noop, noop_cfg, &[KernelArg::I32(1)])? };
                    ctx.synchronize()?;
                }
            },
            TaskSpec::new("yields")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )?;
        let release = Arc::new(AtomicBool::new(false));
        let r2 = release.clone();
        let stuck = sched.submit(
            move |_: &mut TaskContext| -> gpukit_sched::Result<()> {
                while !r2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            },
            TaskSpec::new("stuck")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )?;
        let queued = sched.submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            TaskSpec::new("queued")
                .memory("64MiB", "64MiB")
                .compute(0.25, 0.25),
        )?;
        let waiters = [
            timed(short, t0),
            timed(yields, t0),
            timed(stuck, t0),
            timed(queued, t0),
        ];
        std::thread::sleep(Duration::from_millis(10));
        let ts = Instant::now();
        let report = sched.shutdown(timeout);
        let took = ts.elapsed();
        let outs: Vec<(String, f64)> = waiters
            .into_iter()
            .map(|w| match w.join() {
                Ok((r, t)) => (
                    match r {
                        Ok(()) => "Ok".to_string(),
                        Err(Error::Cancelled {
                            reason: CancelReason::Shutdown,
                            ..
                        }) => "Cancelled".into(),
                        Err(e) => e.to_string(),
                    },
                    ms(t),
                ),
                Err(_) => ("waiter panicked".into(), 0.0),
            })
            .collect();
        release.store(true, Ordering::Release);
        let names = ["short", "yields", "stuck", "queued"];
        let text: Vec<String> = names
            .iter()
            .zip(&outs)
            .map(|(n, (o, t))| format!("{n} {o} at {t:.0} ms"))
            .collect();
        let states_ok = outs[0].0 == "Ok" && outs[1..].iter().all(|(o, _)| o == "Cancelled");
        let bound = timeout + grace + Duration::from_millis(150);
        rows.push(Row {
            section: "failures",
            what: format!(
                "shutdown({} ms) with 3 running tasks and 1 queued (grace {} ms)",
                timeout.as_millis(),
                grace.as_millis()
            ),
            ours: format!(
                "{:.0} ms; {}; report {}/{}/{}/{} (queued/finished/stopped/detached)",
                ms(took),
                text.join(", "),
                report.cancelled_queued,
                report.finished,
                report.stopped,
                report.detached
            ),
            baseline: "before: Drop joined workers without a deadline and signalled no task".into(),
            target: format!("<= {} ms; Ok, Cancelled x3; 1/1/1/1", bound.as_millis()),
            pass: took <= bound
                && states_ok
                && (
                    report.cancelled_queued,
                    report.finished,
                    report.stopped,
                    report.detached,
                ) == (1, 1, 1, 1),
        });
    }
    let _ = TaskState::Succeeded;
    Ok(())
}

/// Many tasks allocating in bursts against a near-full ledger (the whole GPU, 3 GiB headroom):
/// BestEffort tasks fill what is free and are evicted (and resubmitted) while Guaranteed tasks
/// arrive and allocate their requests in bursts. Zero failed Guaranteed allocations and zero
/// driver out-of-memory errors.
fn memory_race(dev: &Device, rows: &mut Vec<Row>) -> R<()> {
    const CHUNK: usize = 256 << 20;
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default()
            .workers(16)
            .memory_headroom("3GiB")
            .stop_grace(Duration::from_secs(2)),
    )?;
    let cap = sched.memory_capacity() as usize;
    let ooms0 = dev.allocator().stats().oom_errors;
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let be = |i: u64| {
        let (stop, refused) = (stop.clone(), refused.clone());
        (
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match ctx.alloc(CHUNK) {
                        Ok(b) => held.push(b),
                        Err(Error::MemoryPressure { .. }) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            // Burst over: give half back, go again.
                            let keep = held.len() / 2;
                            held.truncate(keep);
                            ctx.check()?;
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            },
            TaskSpec::new(format!("be{i}")).priority((i % 3) as i32),
        )
    };
    let mut bes = Vec::new();
    let mut next_be = 0u64;
    for _ in 0..6 {
        let (f, s) = be(next_be);
        next_be += 1;
        bes.push(sched.submit(f, s)?);
    }
    std::thread::sleep(Duration::from_millis(300));
    let g_failed = Arc::new(AtomicU64::new(0));
    let g_ok = Arc::new(AtomicU64::new(0));
    let request = cap / 8 / CHUNK * CHUNK;
    let mut gs = Vec::new();
    let mut peak_used = 0usize;
    let t0 = Instant::now();
    for i in 0..6 {
        let (gf, go) = (g_failed.clone(), g_ok.clone());
        gs.push(
            sched.submit(
                move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                    for _round in 0..3 {
                        let mut held = Vec::new();
                        for _ in 0..request / CHUNK {
                            match ctx.alloc(CHUNK) {
                                Ok(b) => {
                                    go.fetch_add(1, Ordering::Relaxed);
                                    held.push(b);
                                }
                                Err(_) => {
                                    gf.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Ok(())
                },
                TaskSpec::new(format!("g{i}"))
                    .memory(request as u64, request as u64)
                    .compute(0.1, 0.1),
            )?,
        );
        // Staggered arrivals; evicted BestEffort tasks come back to keep the pressure on.
        let until = Instant::now() + Duration::from_millis(150);
        while Instant::now() < until {
            peak_used = peak_used.max(dev.total_memory() - dev.free_memory()?);
            for h in bes.iter_mut() {
                if h.is_done() {
                    let (f, s) = be(next_be);
                    next_be += 1;
                    *h = sched.submit(f, s)?;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let mut g_errors = Vec::new();
    for h in gs {
        while !h.is_done() {
            peak_used = peak_used.max(dev.total_memory() - dev.free_memory()?);
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Err(e) = h.wait() {
            g_errors.push(e.to_string());
        }
    }
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for h in bes {
        let _ = h.wait();
    }
    let st = sched.stats();
    let ooms = dev.allocator().stats().oom_errors - ooms0;
    let (ok, failed, refusals) = (
        g_ok.load(Ordering::Relaxed),
        g_failed.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    rows.push(Row {
        section: "memory race",
        what: format!(
            "6 Guaranteed tasks ({} each, 3 burst rounds) arrive while {} BestEffort tasks burst-fill {} ({:.1} s)",
            format_bytes(request as u64),
            next_be,
            format_bytes(cap as u64),
            took.as_secs_f64()
        ),
        ours: format!(
            "Guaranteed {ok} ok / {failed} failed; driver OOMs {ooms}; BestEffort refusals {refusals}, evictions {}; peak device use {} of {}{}",
            st.evictions_total,
            format_bytes(peak_used as u64),
            format_bytes(dev.total_memory() as u64),
            if g_errors.is_empty() { String::new() } else { format!("; errors: {}", g_errors.join("; ")) }
        ),
        baseline: "before: check under the lock, charge later (concurrent bursts could pass the check together)".into(),
        target: "0 failed, 0 OOMs, refusals > 0".into(),
        pass: failed == 0 && ooms == 0 && refusals > 0 && g_errors.is_empty() && ok > 0,
    });
    Ok(())
}

/// Runs every section and prints the table.
pub fn main() {
    // Panics are injected on purpose (the failure rows): one line each, as a service logs them,
    // instead of a symbolized backtrace per panic.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("panic (expected in the failure rows): {info}")
    }));
    let dev = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("sched_bench needs a GPU: {e}");
            std::process::exit(2);
        }
    };
    let k = TestKernels::load(&dev).expect("test kernels");
    let mut rows = Vec::new();
    let mech = Scheduler::new(dev.clone(), SchedulerConfig::default())
        .map(|s| s.mechanism().to_string())
        .unwrap_or_else(|e| e.to_string());
    type Section<'a> = (&'a str, Box<dyn Fn(&mut Vec<Row>) -> R<()> + 'a>);
    let sections: Vec<Section> = vec![
        (
            "shares 0.25/0.75",
            Box::new(|r| shares(&dev, &k, r, &[0.25, 0.75], false)),
        ),
        (
            "shares 0.5/0.25/0.25",
            Box::new(|r| shares(&dev, &k, r, &[0.5, 0.25, 0.25], false)),
        ),
        ("isolation", Box::new(|r| isolation(&dev, &k, r))),
        (
            "work conservation",
            Box::new(|r| work_conservation(&dev, &k, r)),
        ),
        (
            "fallback shares 0.25/0.75",
            Box::new(|r| shares(&dev, &k, r, &[0.25, 0.75], true)),
        ),
        ("fallback tiers", Box::new(|r| fallback_tiers(&dev, &k, r))),
        ("memory", Box::new(|r| memory(&dev, r))),
        ("memory race", Box::new(|r| memory_race(&dev, r))),
        ("failures", Box::new(|r| failures(&dev, &k, r))),
        ("overheads", Box::new(|r| overheads(&dev, &k, r))),
    ];
    for (name, f) in sections {
        if let Err(e) = f(&mut rows) {
            rows.push(Row {
                section: "error",
                what: name.to_string(),
                ours: e.to_string(),
                baseline: String::new(),
                target: String::new(),
                pass: false,
            });
        }
    }
    println!("\ngpukit-sched on {} — {}", dev.name(), mech);
    println!("| section | what | gpukit-sched | baseline (same run) | target | ok |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.section,
            r.what,
            r.ours,
            r.baseline,
            r.target,
            if r.pass { "PASS" } else { "FAIL" }
        );
    }
    let failed = rows.iter().filter(|r| !r.pass).count();
    println!("{} rows, {} failed", rows.len(), failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
