//! GPU faults, each in a process of its own: a kernel that never ends (it occupies SMs until
//! released; in the fallback it runs in the primary context) and an illegal address (a sticky
//! error poisons the process's CUDA context). Each test re-runs this binary with a filter on
//! one `child_*` test and `GPUKIT_SCHED_FAULT_CHILD` naming it; the child does the work and
//! prints `<name>: child ok`, the parent checks its exit status and that line within a bound.
//! The `child_*` tests are `#[ignore]`d (the parent runs them with `--ignored`) and return at
//! once without the variable.
//!
//! GPU host: `GPUKIT_REQUIRE_GPU=1 <this test binary> --test-threads=1`.

use gpukit_core::{Device, GpuArray};
use gpukit_jit::{KernelArg, LaunchConfig};
use gpukit_sched::{
    Admission, Error, Mechanism, Scheduler, SchedulerConfig, TaskContext, TaskSpec, TaskState,
};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::kernels::TestKernels;

const CHILD: &str = "GPUKIT_SCHED_FAULT_CHILD";
const GRACE: Duration = Duration::from_millis(200);
const TIMEOUT: Duration = Duration::from_millis(300);

fn is_child(name: &str) -> bool {
    std::env::var(CHILD).as_deref() == Ok(name)
}

/// Runs test `name` of this binary in a new process and checks it passed within `bound`.
fn run_child(name: &str, bound: Duration) {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child test");
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t.elapsed() > bound {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{name}: no end within {bound:?}\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(status.success(), "{name} failed: {status}\n{text}");
    assert!(
        text.contains(&format!("{name}: child ok")),
        "{name} did not run (filtered out?)\n{text}"
    );
}

/// A device flag the `wait_flag` kernel spins on, set from the host on a stream of its own.
struct Flag {
    dev: Device,
    mem: GpuArray<u32>,
}

impl Flag {
    fn new(dev: &Device) -> Flag {
        let mem = GpuArray::<u32>::zeros(dev, &[1]).expect("flag");
        dev.compute_stream().synchronize().expect("flag zeroed");
        Flag {
            dev: dev.clone(),
            mem,
        }
    }

    fn ptr(&self) -> u64 {
        match self.mem.as_kernel_arg() {
            KernelArg::Ptr(p) => p,
            other => panic!("{other:?}"),
        }
    }

    /// Ends every `wait_flag` kernel on it.
    fn release(&self) {
        let s = self.dev.new_stream(0).expect("stream");
        // SAFETY: the flag is a live 4-byte device allocation; the host value outlives the
        // copy (synchronized below); the spinning kernel only reads it.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(self.ptr(), &[1u32], s.cuda().cu_stream())
        }
        .expect("set the flag");
        s.synchronize().expect("flag set");
    }
}

/// One block spinning on `flag`, then a wait that only a stop ends.
fn hang(
    k: &TestKernels,
    flag: u64,
    launched: Arc<AtomicBool>,
) -> impl FnOnce(&mut TaskContext) -> gpukit_sched::Result<()> + Send + 'static {
    let k = k.clone();
    move |ctx: &mut TaskContext| {
        // SAFETY: `flag` is a live u32 the kernel only reads; it outlives the kernel (the
        // test releases it before dropping it).
        unsafe {
            ctx.launch_unchecked(
                &k.wait_flag,
                LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                &[KernelArg::Ptr(flag)],
            )?
        };
        launched.store(true, Ordering::Release);
        ctx.synchronize()
    }
}

fn noops(
    k: &TestKernels,
    n: usize,
) -> impl FnOnce(&mut TaskContext) -> gpukit_sched::Result<u32> + Send + 'static {
    let k = k.clone();
    move |ctx: &mut TaskContext| {
        for _ in 0..n {
            // SAFETY: no pointer arguments.
            unsafe {
                ctx.launch_unchecked(
                    &k.noop,
                    LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                    &[KernelArg::I32(1)],
                )?
            };
            ctx.synchronize()?;
        }
        Ok(ctx.compute().sms)
    }
}

fn quarter(name: &str) -> TaskSpec {
    TaskSpec::new(name)
        .memory("16MiB", "16MiB")
        .compute(0.25, 0.25)
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while !f() {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// A kernel that never ends, with green contexts: at its timeout plus the grace period the
/// task ends TimedOut, its worker is free, its lane and SM groups are quarantined (no task is
/// put on them), the rest of the GPU keeps working; once the kernel ends after all, everything
/// comes back.
#[test]
fn a_kernel_that_never_ends_is_quarantined() {
    if !gpukit_jit::testing::gpu("a_kernel_that_never_ends_is_quarantined") {
        return;
    }
    run_child("child_never_ending_kernel_green", Duration::from_secs(40));
}

#[test]
#[ignore = "runs only in the child process its parent test starts"]
fn child_never_ending_kernel_green() {
    let name = "child_never_ending_kernel_green";
    if !is_child(name) {
        return;
    }
    let dev = Device::open(0).expect("device");
    let k = TestKernels::load(&dev).expect("kernels");
    let flag = Flag::new(&dev);
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default().workers(2).stop_grace(GRACE),
    )
    .unwrap();
    assert!(
        sched.mechanism().starts_with("green contexts"),
        "{}",
        sched.mechanism()
    );
    let l = sched.layout();
    let t = Instant::now();
    let hung = sched
        .submit(
            hang(&k, flag.ptr(), Arc::new(AtomicBool::new(false))),
            quarter("hung").timeout(TIMEOUT),
        )
        .unwrap();
    let Admission::Admitted(grant) = hung.admission().clone() else {
        panic!("{:?}", hung.admission())
    };
    let hid = hung.id();
    let r = hung
        .wait_timeout(Duration::from_secs(10))
        .expect("an outcome");
    let took = t.elapsed();
    println!("hung task: {r:?} after {took:?}");
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    assert!(took >= TIMEOUT && took < TIMEOUT + GRACE + Duration::from_millis(500));
    assert!(
        wait_until(Duration::from_secs(2), || sched.stats().quarantined == 1),
        "not quarantined"
    );
    let ts = sched.task_stats(hid).unwrap();
    assert!(ts.quarantined && ts.state == TaskState::TimedOut, "{ts:?}");
    let pool = sched.stats().partitions[0].pool.clone();
    assert!(pool.groups_assigned.contains(grant.compute.groups));
    assert!(sched
        .metrics()
        .contains("gpukit_sched_tasks{state=\"quarantined\"} 1"));
    // Both workers are free and the rest of the GPU works.
    let t = Instant::now();
    let a = sched.submit(noops(&k, 20), quarter("a")).unwrap();
    let b = sched.submit(noops(&k, 20), quarter("b")).unwrap();
    assert_eq!(a.wait().unwrap(), l.sms(l.groups_for_share(0.25)));
    assert_eq!(b.wait().unwrap(), l.sms(l.groups_for_share(0.25)));
    println!("two tasks beside the hung kernel: {:?}", t.elapsed());
    // The hung kernel's groups are not given away: the whole GPU is not free.
    let all = sched
        .submit(
            noops(&k, 1),
            TaskSpec::new("all")
                .memory("16MiB", "16MiB")
                .compute(1.0, 1.0),
        )
        .unwrap();
    assert!(
        matches!(all.admission(), Admission::Queued { .. }),
        "{:?}",
        all.admission()
    );
    // The kernel ends after all: the quarantine lifts and the queued task runs.
    flag.release();
    assert_eq!(
        all.wait_timeout(Duration::from_secs(10))
            .expect("ran")
            .unwrap(),
        l.sms(l.groups)
    );
    let st = sched.stats();
    assert_eq!(st.quarantined, 0);
    assert!(!sched.task_stats(hid).unwrap().quarantined);
    println!("{name}: child ok");
}

/// The same in the pacing fallback (no green contexts): the hung task held the pacing token;
/// a paced task that waits for it goes on once the hung task is quarantined.
#[test]
fn a_kernel_that_never_ends_releases_the_pacing_token() {
    if !gpukit_jit::testing::gpu("a_kernel_that_never_ends_releases_the_pacing_token") {
        return;
    }
    run_child(
        "child_never_ending_kernel_fallback",
        Duration::from_secs(40),
    );
}

#[test]
#[ignore = "runs only in the child process its parent test starts"]
fn child_never_ending_kernel_fallback() {
    let name = "child_never_ending_kernel_fallback";
    if !is_child(name) {
        return;
    }
    let dev = Device::open(0).expect("device");
    let k = TestKernels::load(&dev).expect("kernels");
    let flag = Flag::new(&dev);
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default()
            .workers(2)
            .stop_grace(GRACE)
            .green_contexts(false),
    )
    .unwrap();
    assert!(
        sched.mechanism().starts_with("pacing"),
        "{}",
        sched.mechanism()
    );
    let launched = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let hung = sched
        .submit(
            hang(&k, flag.ptr(), launched.clone()),
            quarter("hung").timeout(TIMEOUT),
        )
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || launched.load(Ordering::Acquire)));
    // A paced task whose launches wait for the token the hung kernel holds.
    let paced = sched.submit(noops(&k, 20), quarter("paced")).unwrap();
    let r = hung
        .wait_timeout(Duration::from_secs(10))
        .expect("an outcome");
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    let p = paced
        .wait_timeout(Duration::from_secs(10))
        .expect("the paced task waited for the hung kernel's token for good");
    println!(
        "paced task beside the hung kernel: {p:?} after {:?}",
        t.elapsed()
    );
    assert!(p.is_ok(), "{p:?}");
    assert_eq!(sched.stats().quarantined, 1);
    let c = sched
        .stats()
        .tasks
        .iter()
        .find(|t| t.name == "paced")
        .cloned();
    assert_eq!(
        c.and_then(|c| c.compute).map(|c| c.mechanism),
        Some(Mechanism::Pacing)
    );
    flag.release();
    assert!(wait_until(Duration::from_secs(10), || sched
        .stats()
        .quarantined
        == 0));
    println!("{name}: child ok");
}

/// An illegal address (a sticky error that poisons the context): the scheduler becomes
/// unhealthy: the task that was queued fails, submissions are refused with a typed error
/// naming the task and the error, stats and metrics say so.
#[test]
fn an_illegal_address_makes_the_scheduler_unhealthy() {
    if !gpukit_jit::testing::gpu("an_illegal_address_makes_the_scheduler_unhealthy") {
        return;
    }
    run_child("child_illegal_address", Duration::from_secs(40));
}

#[test]
#[ignore = "runs only in the child process its parent test starts"]
fn child_illegal_address() {
    let name = "child_illegal_address";
    if !is_child(name) {
        return;
    }
    let dev = Device::open(0).expect("device");
    let k = TestKernels::load(&dev).expect("kernels");
    let sched = Scheduler::new(dev, SchedulerConfig::default().workers(1)).unwrap();
    let go = Arc::new(AtomicBool::new(false));
    let g2 = go.clone();
    let kk = k.clone();
    let poisoner = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<()> {
                while !g2.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // SAFETY: deliberately not: address 16 is no allocation (an illegal address
                // is what this test is about; it corrupts only this process's context).
                unsafe {
                    ctx.launch_unchecked(
                        &kk.poke,
                        LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                        &[KernelArg::Ptr(16), KernelArg::U32(1)],
                    )?
                };
                ctx.synchronize()
            },
            quarter("poisoner"),
        )
        .unwrap();
    let queued = sched.submit(noops(&k, 1), quarter("queued")).unwrap();
    assert!(matches!(queued.admission(), Admission::Queued { .. }));
    go.store(true, Ordering::Release);
    let r = poisoner
        .wait_timeout(Duration::from_secs(30))
        .expect("ended");
    println!("poisoner: {r:?}");
    assert!(r.is_err());
    let q = queued.wait_timeout(Duration::from_secs(30)).expect("ended");
    let cause = match &q {
        Err(Error::Unhealthy { cause }) => cause.clone(),
        other => panic!("the queued task: {other:?}"),
    };
    println!("unhealthy: {cause}");
    assert!(
        cause.contains("poisoner") && cause.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{cause}"
    );
    let refused = sched.submit(noops(&k, 1), quarter("later"));
    assert!(
        matches!(&refused, Err(Error::Unhealthy { cause: c }) if *c == cause),
        "{refused:?}"
    );
    let st = sched.stats();
    assert_eq!(st.unhealthy.as_deref(), Some(cause.as_str()));
    assert!(sched.metrics().contains("gpukit_sched_healthy 0"));
    println!("{name}: child ok");
}
