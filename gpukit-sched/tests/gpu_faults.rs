//! GPU faults, each in a process of its own: a kernel that never ends (it occupies SMs until
//! released; in the fallback it runs in the primary context) and an illegal address (a sticky
//! error poisons the process's CUDA context). Each test re-runs this binary with a filter on
//! one `child_*` test and `GPUKIT_SCHED_FAULT_CHILD` naming it; the child does the work and
//! prints `<name>: child ok`, the parent checks its exit status and that line within a bound.
//! The `child_*` tests are `#[ignore]`d (the parent runs them with `--ignored`) and return at
//! once without the variable. Every wait in a child is bounded and each step prints a
//! `[<ms>] <name>: ...` line, so a child killed at its bound shows where it stood.
//!
//! The hung-kernel children run with `CUDA_MODULE_LOADING=EAGER` (the parent sets it): with
//! lazy loading the first launch of a kernel in a context may synchronise the context, which
//! never returns beside a kernel that never ends (see the crate's `quarantine` docs);
//! `child_lazy_loading_after_a_hang` runs with `LAZY` and checks that the scheduler still ends
//! every task and its own shutdown within their bounds, and prints what the driver did.
//!
//! GPU host: `GPUKIT_REQUIRE_GPU=1 <this test binary> --test-threads=1 --nocapture`.

use gpukit_core::Device;
use gpukit_jit::{KernelArg, LaunchConfig};
use gpukit_sched::{
    Admission, Error, Mechanism, Scheduler, SchedulerConfig, SchedulerStats, TaskContext,
    TaskHandle, TaskSpec, TaskState,
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

/// CUDA's module loading mode for a child (`CUDA_MODULE_LOADING`).
const LOADING: &str = "CUDA_MODULE_LOADING";

/// Runs test `name` of this binary in a new process (with `CUDA_MODULE_LOADING=loading`)
/// and checks it passed within `bound`.
fn run_child(name: &str, bound: Duration, loading: &str) {
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
        .env(LOADING, loading)
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

/// A flag the `wait_flag` kernel spins on: pinned host memory mapped into the device, set by a
/// plain host store, so releasing the kernel makes no driver call (a driver blocked beside the
/// hung kernel, e.g. in a lazy kernel load, cannot keep the release from happening). Never
/// freed: freeing pinned memory may wait for the device, and the child process ends soon.
struct Flag {
    host: *mut u32,
    device: u64,
}

// SAFETY: the pointer is to pinned host memory that is never freed; the host only writes it
// with volatile stores.
unsafe impl Send for Flag {}
// SAFETY: as above.
unsafe impl Sync for Flag {}

impl Flag {
    fn new(dev: &Device) -> Flag {
        dev.context().bind_to_thread().expect("bind");
        let flags = cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP
            | cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: the device's context is current; 4 bytes of pinned, device-mapped memory.
        let host = unsafe { cudarc::driver::result::malloc_host(4, flags) }.expect("pinned flag")
            as *mut u32;
        // SAFETY: `host` is 4 writable bytes just allocated.
        unsafe { std::ptr::write_volatile(host, 0) };
        let mut device = 0u64;
        // SAFETY: `host` is device-mapped pinned memory of this context; a valid out-pointer.
        let r = unsafe {
            cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0)
        };
        assert_eq!(
            r,
            cudarc::driver::sys::CUresult::CUDA_SUCCESS,
            "device pointer"
        );
        Flag { host, device }
    }

    fn ptr(&self) -> u64 {
        self.device
    }

    /// Ends every `wait_flag` kernel on it.
    fn release(&self) {
        // SAFETY: `host` is live pinned memory (never freed); the kernel only reads it.
        unsafe { std::ptr::write_volatile(self.host, 1) };
        std::sync::atomic::fence(Ordering::SeqCst);
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
        // SAFETY: `flag` is a live u32 the kernel only reads (device-mapped pinned memory,
        // never freed).
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

/// A Guaranteed task of 16 MiB with `share` of the GPU.
fn share(name: &str, share: f64) -> TaskSpec {
    TaskSpec::new(name)
        .memory("16MiB", "16MiB")
        .compute(share, share)
}

fn quarter(name: &str) -> TaskSpec {
    share(name, 0.25)
}

/// Prints a step of a child with the milliseconds since `t0`.
fn step(t0: Instant, name: &str, what: impl std::fmt::Display) {
    println!("[{:>6}] {name}: {what}", t0.elapsed().as_millis());
}

/// The driver's module loading mode, as `CUDA_MODULE_LOADING` set it for this process.
fn loading_mode() -> &'static str {
    let mut mode = cudarc::driver::sys::CUmoduleLoadingMode::CU_MODULE_LAZY_LOADING;
    // SAFETY: a valid out-pointer; the driver is initialised (a device was opened).
    let r = unsafe { cudarc::driver::sys::cuModuleGetLoadingMode(&mut mode) };
    assert_eq!(
        r,
        cudarc::driver::sys::CUresult::CUDA_SUCCESS,
        "cuModuleGetLoadingMode"
    );
    match mode {
        cudarc::driver::sys::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING => "EAGER",
        _ => "LAZY",
    }
}

/// The handle's outcome within `bound`, or a panic naming the task and its stats.
fn outcome<T>(sched: &Scheduler, h: TaskHandle<T>, bound: Duration) -> gpukit_sched::Result<T> {
    let id = h.id();
    match h.wait_timeout(bound) {
        Ok(r) => r,
        Err(h) => panic!(
            "task {id}: no outcome within {bound:?}: {:?}\n{h:?}",
            sched.task_stats(id)
        ),
    }
}

/// The quarantine as the stats report it: exactly the task `name`, whose work occupies at
/// least `groups` (its own), with its memory commitment and at least one stream.
fn check_quarantine(st: &SchedulerStats, name: &str, id: u64, groups: gpukit_sched::GroupSet) {
    assert_eq!(st.quarantined, 1, "{:?}", st.quarantine);
    let [q] = &st.quarantine[..] else {
        panic!("{:?}", st.quarantine)
    };
    assert_eq!((q.name.as_str(), q.id), (name, id), "{q:?}");
    assert!(q.groups.contains(groups), "{q:?} vs own {groups}");
    assert_eq!(
        q.sms,
        st.layout.sms(q.groups.len()) + if q.floor { st.layout.remainder_sms } else { 0 },
        "{q:?}"
    );
    assert!(q.memory_bytes >= 16 << 20, "commitment kept: {q:?}");
    assert!(q.streams >= 1, "{q:?}");
    assert!(st.partitions[0].pool.groups_quarantined.contains(q.groups));
    assert!(st.tasks.iter().any(|t| t.id == id && t.quarantined));
}

/// Whether one task is quarantined and the planner has followed: the lanes are quarantined
/// first (the registry behind `quarantined` / `quarantine`), the planner's pool when the
/// task's end is processed on its worker, so a snapshot between the two shows the first alone
/// (the H100 run of `child_shutdown_beside_a_hung_kernel` caught one).
fn quarantine_settled(st: &SchedulerStats) -> bool {
    st.quarantined == 1
        && st
            .quarantine
            .iter()
            .all(|q| st.partitions[0].pool.groups_quarantined.contains(q.groups))
}

/// The `i`-th run of `q` SM groups (the groups a quarter of the GPU gets, lowest first).
fn quarter_at(q: u32, i: u32) -> gpukit_sched::GroupSet {
    gpukit_sched::GroupSet::first((i + 1) * q).minus(gpukit_sched::GroupSet::first(i * q))
}

/// Submits task `name` on an eighth of the GPU (two groups after the lowest free ones: no lane
/// exists for them) beside hung work, with a timeout of 1 s, and checks it has its outcome
/// within the timeout plus the grace period plus slack: `Ok` (the driver made the lane) or
/// `TimedOut` (its start blocked; detached at the grace period). Returns the task's id when it
/// was detached.
fn new_lane_beside_the_hang(
    sched: &Scheduler,
    k: &TestKernels,
    t0: Instant,
    child: &str,
    name: &str,
) -> Option<u64> {
    let timeout = Duration::from_millis(1000);
    let t = Instant::now();
    let h = sched
        .submit(noops(k, 5), share(name, 0.125).timeout(timeout))
        .unwrap();
    let id = h.id();
    let r = outcome(sched, h, timeout + GRACE + Duration::from_millis(1000));
    let took = t.elapsed();
    let ts = sched.task_stats(id).unwrap();
    step(
        t0,
        child,
        format!(
            "a task on a new lane ({:?}) beside the hung kernel: {r:?} after {took:?} (detached {})",
            ts.compute.as_ref().map(|c| c.groups),
            ts.detached
        ),
    );
    match r {
        Ok(_) => None,
        Err(Error::TimedOut { .. }) => {
            assert!(
                took < timeout + GRACE + Duration::from_millis(500),
                "{took:?}"
            );
            ts.detached.then_some(id)
        }
        Err(e) => panic!("{name}: {e}"),
    }
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

/// What a child with a hung kernel may take for a step that does not involve the hang
/// (green-context creation about 1 ms, kernel loading, a few launches).
const STEP: Duration = Duration::from_secs(5);
/// How long the scheduler's own shutdown may take beside a hung kernel: its timeout (200 ms)
/// plus the grace period plus slack.
const SHUTDOWN_BOUND: Duration = Duration::from_millis(200 + 200 + 1500);

/// A kernel that never ends, with green contexts: at its timeout plus the grace period the
/// task ends TimedOut, its worker is free, its lane and SM groups are quarantined (no task is
/// put on them) and the stats name it with its groups, SMs and memory; new tasks are admitted
/// and run on the other groups within a bound, on lanes created after the hang; once the
/// kernel ends after all, everything comes back; the shutdown ends within its bound.
#[test]
fn a_kernel_that_never_ends_is_quarantined() {
    if !gpukit_jit::testing::gpu("a_kernel_that_never_ends_is_quarantined") {
        return;
    }
    run_child(
        "child_never_ending_kernel_green",
        Duration::from_secs(40),
        "EAGER",
    );
}

#[test]
#[ignore = "runs only in the child process its parent test starts"]
fn child_never_ending_kernel_green() {
    let name = "child_never_ending_kernel_green";
    if !is_child(name) {
        return;
    }
    let t0 = Instant::now();
    let dev = Device::open(0).expect("device");
    assert_eq!(loading_mode(), "EAGER");
    let k = TestKernels::load(&dev).expect("kernels");
    let flag = Flag::new(&dev);
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default().workers(3).stop_grace(GRACE),
    )
    .unwrap();
    assert!(
        sched.mechanism().starts_with("green contexts"),
        "{}",
        sched.mechanism()
    );
    let l = sched.layout();
    step(t0, name, sched.mechanism());
    // Lanes for the two quarters after the first, made before anything hangs (the planner
    // gives each task the lowest free groups: the hung task the first quarter, `a` and `b`
    // these two).
    let q = l.groups_for_share(0.25);
    sched
        .prewarm(&[(quarter_at(q, 1), false), (quarter_at(q, 2), false)])
        .expect("prewarm");
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
    let r = outcome(&sched, hung, Duration::from_secs(10));
    let took = t.elapsed();
    step(t0, name, format!("hung task: {r:?} after {took:?}"));
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    assert!(took >= TIMEOUT && took < TIMEOUT + GRACE + Duration::from_millis(500));
    assert!(
        wait_until(Duration::from_secs(2), || quarantine_settled(
            &sched.stats()
        )),
        "not quarantined: {:?}",
        sched.stats().quarantine
    );
    let st = sched.stats();
    check_quarantine(&st, "hung", hid, grant.compute.groups);
    step(t0, name, format!("quarantine: {:?}", st.quarantine));
    // The allocator waits for nothing beside the hung work: its stream is retired, and
    // releasing the cache (gpukit-core waits for the other streams only) returns at once.
    assert!(dev.allocator().retired_streams() >= 1);
    let t = Instant::now();
    dev.allocator()
        .empty_cache()
        .expect("empty_cache beside the hung work");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let ts = sched.task_stats(hid).unwrap();
    assert!(ts.quarantined && ts.state == TaskState::TimedOut, "{ts:?}");
    assert!(st.partitions[0]
        .pool
        .groups_assigned
        .contains(grant.compute.groups));
    let m = sched.metrics();
    assert!(
        m.contains("gpukit_sched_tasks{state=\"quarantined\"} 1"),
        "{m}"
    );
    let q_sms = st.quarantine[0].sms;
    assert!(
        m.contains(&format!("gpukit_sched_quarantined_sms {q_sms}")),
        "{m}"
    );
    // New tasks are admitted and run on the other groups, on lanes made before the hang,
    // each within a bound, on groups the hung work does not occupy.
    let out = st.quarantine[0].groups;
    let t = Instant::now();
    let kk = k.clone();
    let a = sched
        .submit(
            move |ctx: &mut TaskContext| -> gpukit_sched::Result<u32> {
                // Memory for a new task beside the hung work, then kernels.
                let buf = ctx.alloc(8 << 20)?;
                drop(buf);
                noops(&kk, 20)(ctx)
            },
            quarter("a"),
        )
        .unwrap();
    let b = sched.submit(noops(&k, 20), quarter("b")).unwrap();
    for (h, i) in [(&a, 1), (&b, 2)] {
        let Admission::Admitted(g) = h.admission() else {
            panic!("{:?}", h.admission())
        };
        assert!(g.compute.groups.intersect(out).is_empty(), "{g:?} on {out}");
        assert_eq!(g.compute.groups, quarter_at(q, i), "not a prewarmed lane");
    }
    let want = l.sms(q);
    assert_eq!(outcome(&sched, a, STEP).unwrap(), want);
    assert_eq!(outcome(&sched, b, STEP).unwrap(), want);
    step(
        t0,
        name,
        format!("two new tasks beside the hung kernel: {:?}", t.elapsed()),
    );
    // A task whose lane does not exist yet: the driver may block creating a context beside the
    // hung kernel (under EAGER loading a new context loads every module). Either way the task
    // has its outcome within its timeout plus the grace period (its timeout counts from its
    // start, lane creation included); the child prints which way it went.
    let c = new_lane_beside_the_hang(&sched, &k, t0, name, "c");
    // The hung kernel's groups are not given away: the whole GPU is not free.
    let all = sched.submit(noops(&k, 1), share("all", 1.0)).unwrap();
    assert!(
        matches!(all.admission(), Admission::Queued { .. }),
        "{:?}",
        all.admission()
    );
    // The kernel ends after all: the quarantine lifts and the queued task runs.
    flag.release();
    step(t0, name, "flag released");

    assert_eq!(
        outcome(&sched, all, Duration::from_secs(10)).unwrap(),
        l.sms(l.groups)
    );
    if let Some(cid) = c {
        // `c`, detached while its lane was made, gave its groups back once the driver
        // returned (`all` had every group) and kept its outcome.
        assert_eq!(
            sched.task_stats(cid).map(|t| t.state),
            Some(TaskState::TimedOut)
        );
    }
    let st = sched.stats();
    assert_eq!(st.quarantined, 0);
    assert!(st.quarantine.is_empty());
    assert_eq!(
        st.partitions[0].pool.groups_quarantined,
        gpukit_sched::GroupSet::EMPTY
    );
    assert!(!sched.task_stats(hid).unwrap().quarantined);
    let t = Instant::now();
    let rep = sched.shutdown(Duration::from_millis(200));
    step(t0, name, format!("shutdown: {rep:?}"));
    assert!(t.elapsed() < SHUTDOWN_BOUND, "{rep:?}");
    assert_eq!(rep.quarantined, 0);
    println!("{name}: child ok");
}

/// Shutdown beside a kernel that never ends (green contexts): the scheduler's shutdown ends
/// within its bound and names the quarantined task, leaving its lanes to the driver; a new
/// scheduler on the device then runs a task within a bound while the kernel still runs.
#[test]
fn shutdown_beside_a_never_ending_kernel_ends_within_its_bound() {
    if !gpukit_jit::testing::gpu("shutdown_beside_a_never_ending_kernel_ends_within_its_bound") {
        return;
    }
    run_child(
        "child_shutdown_beside_a_hung_kernel",
        Duration::from_secs(40),
        "EAGER",
    );
}

#[test]
#[ignore = "runs only in the child process its parent test starts"]
fn child_shutdown_beside_a_hung_kernel() {
    let name = "child_shutdown_beside_a_hung_kernel";
    if !is_child(name) {
        return;
    }
    let t0 = Instant::now();
    let dev = Device::open(0).expect("device");
    assert_eq!(loading_mode(), "EAGER");
    let k = TestKernels::load(&dev).expect("kernels");
    let flag = Flag::new(&dev);
    let cfg = SchedulerConfig::default().workers(2).stop_grace(GRACE);
    let sched = Scheduler::new(dev.clone(), cfg.clone()).unwrap();
    // A lane for the second quarter, made before anything hangs (the task `a` runs on it).
    let q = sched.layout().groups_for_share(0.25);
    sched
        .prewarm(&[(quarter_at(q, 1), false)])
        .expect("prewarm");
    let hung = sched
        .submit(
            hang(&k, flag.ptr(), Arc::new(AtomicBool::new(false))),
            quarter("hung").timeout(TIMEOUT),
        )
        .unwrap();
    let hid = hung.id();
    let Admission::Admitted(grant) = hung.admission().clone() else {
        panic!("{:?}", hung.admission())
    };
    let r = outcome(&sched, hung, Duration::from_secs(10));
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    assert!(wait_until(Duration::from_secs(2), || quarantine_settled(
        &sched.stats()
    )));
    check_quarantine(&sched.stats(), "hung", hid, grant.compute.groups);
    step(t0, name, "quarantined");
    let a = sched.submit(noops(&k, 5), quarter("a")).unwrap();
    outcome(&sched, a, STEP).unwrap();
    let t = Instant::now();
    let rep = sched.shutdown(Duration::from_millis(200));
    let took = t.elapsed();
    step(t0, name, format!("shutdown in {took:?}: {rep:?}"));
    assert!(took < SHUTDOWN_BOUND, "{rep:?}");
    assert_eq!(rep.quarantined, 1, "{rep:?}");
    assert_eq!(rep.quarantine.len(), 1, "{rep:?}");
    assert_eq!(
        (rep.quarantine[0].name.as_str(), rep.quarantine[0].id),
        ("hung", hid)
    );
    // The kernel still runs. A new scheduler on the device keeps the groups it occupies out
    // of service (inherited from the first scheduler's quarantine), so its first quarter is the
    // second one, whose idle lane the first scheduler left and the new one adopts: it runs
    // within a bound. Once the kernel ends the groups come back.
    let again = Scheduler::new(dev.clone(), cfg).unwrap();
    let st = again.stats();
    assert!(
        st.partitions[0]
            .pool
            .groups_quarantined
            .contains(grant.compute.groups),
        "not inherited: {:?}",
        st.partitions[0].pool
    );
    let b = again.submit(noops(&k, 5), quarter("b")).unwrap();
    let Admission::Admitted(g) = b.admission().clone() else {
        panic!("{:?}", b.admission())
    };
    assert_eq!(g.compute.groups, quarter_at(q, 1), "{g:?}");
    outcome(&again, b, STEP).unwrap();
    step(
        t0,
        name,
        "a second scheduler ran a task beside the hung kernel on an adopted lane",
    );
    flag.release();
    step(t0, name, "flag released");
    assert!(
        wait_until(Duration::from_secs(5), || again.stats().partitions[0]
            .pool
            .groups_quarantined
            .is_empty()),
        "the inherited groups did not come back: {:?}",
        again.stats().partitions[0].pool
    );
    let all = again.submit(noops(&k, 1), share("all", 1.0)).unwrap();
    outcome(&again, all, STEP).unwrap();
    let t = Instant::now();
    let rep = again.shutdown(Duration::from_millis(200));
    assert!(t.elapsed() < SHUTDOWN_BOUND, "{rep:?}");
    println!("{name}: child ok");
}

/// The same in the pacing fallback (no green contexts): the hung task held the pacing token;
/// a paced task that waits for it goes on once the hung task is quarantined, later paced
/// tasks get the token too, the stats name the hung task, and the shutdown is bounded.
#[test]
fn a_kernel_that_never_ends_releases_the_pacing_token() {
    if !gpukit_jit::testing::gpu("a_kernel_that_never_ends_releases_the_pacing_token") {
        return;
    }
    run_child(
        "child_never_ending_kernel_fallback",
        Duration::from_secs(40),
        "EAGER",
    );
}

#[test]
#[ignore = "runs only in the child process its parent test starts"]
fn child_never_ending_kernel_fallback() {
    let name = "child_never_ending_kernel_fallback";
    if !is_child(name) {
        return;
    }
    let t0 = Instant::now();
    let dev = Device::open(0).expect("device");
    assert_eq!(loading_mode(), "EAGER");
    let k = TestKernels::load(&dev).expect("kernels");
    let flag = Flag::new(&dev);
    let sched = Scheduler::new(
        dev.clone(),
        SchedulerConfig::default()
            .workers(3)
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
    let hung = sched
        .submit(
            hang(&k, flag.ptr(), launched.clone()),
            quarter("hung").timeout(TIMEOUT),
        )
        .unwrap();
    let hid = hung.id();
    let Admission::Admitted(grant) = hung.admission().clone() else {
        panic!("{:?}", hung.admission())
    };
    assert!(wait_until(Duration::from_secs(10), || launched.load(Ordering::Acquire)));
    step(t0, name, "hung kernel launched");
    // A paced task whose launches wait for the token the hung kernel holds.
    let paced = sched.submit(noops(&k, 20), quarter("paced")).unwrap();
    let r = outcome(&sched, hung, Duration::from_secs(10));
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    let p = outcome(&sched, paced, Duration::from_secs(10));
    step(
        t0,
        name,
        format!("paced task beside the hung kernel: {p:?}"),
    );
    assert!(p.is_ok(), "{p:?}");
    let st = sched.stats();
    check_quarantine(&st, "hung", hid, grant.compute.groups);
    let c = st.tasks.iter().find(|t| t.name == "paced").cloned();
    assert_eq!(
        c.and_then(|c| c.compute).map(|c| c.mechanism),
        Some(Mechanism::Pacing)
    );
    // The token passes on: two more paced tasks, at once.
    let t = Instant::now();
    let more: Vec<_> = ["p1", "p2"]
        .iter()
        .map(|n| sched.submit(noops(&k, 20), quarter(n)).unwrap())
        .collect();
    for h in more {
        outcome(&sched, h, STEP).unwrap();
    }
    step(t0, name, format!("two more paced tasks: {:?}", t.elapsed()));
    flag.release();
    assert!(wait_until(Duration::from_secs(10), || sched
        .stats()
        .quarantined
        == 0));
    let t = Instant::now();
    let rep = sched.shutdown(Duration::from_millis(200));
    step(t0, name, format!("shutdown: {rep:?}"));
    assert!(t.elapsed() < SHUTDOWN_BOUND, "{rep:?}");
    println!("{name}: child ok");
}

/// With lazy module loading (the driver's default), in the fallback: after a kernel that
/// never ends was quarantined, a task launches a kernel never launched in the context before
/// (the driver loads it at that launch, which may synchronise the context). Whatever the
/// driver does, the task has its outcome within its timeout plus the grace period, and the
/// shutdown ends within its bound; the child prints which way it went.
#[test]
fn lazy_loading_after_a_hang_still_ends_within_bounds() {
    if !gpukit_jit::testing::gpu("lazy_loading_after_a_hang_still_ends_within_bounds") {
        return;
    }
    run_child(
        "child_lazy_loading_after_a_hang",
        Duration::from_secs(40),
        "LAZY",
    );
}

#[test]
#[ignore = "runs only in the child process its parent test starts"]
fn child_lazy_loading_after_a_hang() {
    let name = "child_lazy_loading_after_a_hang";
    if !is_child(name) {
        return;
    }
    let t0 = Instant::now();
    let dev = Device::open(0).expect("device");
    assert_eq!(loading_mode(), "LAZY");
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
    let hung = sched
        .submit(
            hang(&k, flag.ptr(), Arc::new(AtomicBool::new(false))),
            quarter("hung").timeout(TIMEOUT),
        )
        .unwrap();
    let r = outcome(&sched, hung, Duration::from_secs(10));
    assert!(matches!(r, Err(Error::TimedOut { .. })), "{r:?}");
    assert!(wait_until(Duration::from_secs(2), || sched
        .stats()
        .quarantined
        == 1));
    step(t0, name, "quarantined");
    // `noop` was never launched in this process: its first launch loads it.
    let timeout = Duration::from_millis(1000);
    let t = Instant::now();
    let cold = sched
        .submit(noops(&k, 1), quarter("cold").timeout(timeout))
        .unwrap();
    let cid = cold.id();
    let r = outcome(&sched, cold, timeout + GRACE + Duration::from_millis(1000));
    let took = t.elapsed();
    let ts = sched.task_stats(cid).unwrap();
    match &r {
        Ok(_) => step(
            t0,
            name,
            format!("a first launch after the hang returned ({took:?})"),
        ),
        Err(Error::TimedOut { .. }) => step(
            t0,
            name,
            format!(
                "a first launch after the hang did not return (lazy loading waits for the \
                 hung kernel): TimedOut after {took:?}, detached {}, kernels {}",
                ts.detached, ts.kernels_launched
            ),
        ),
        Err(e) => panic!("cold task: {e}"),
    }
    let t = Instant::now();
    let rep = sched.shutdown(Duration::from_millis(200));
    step(t0, name, format!("shutdown in {:?}: {rep:?}", t.elapsed()));
    assert!(t.elapsed() < SHUTDOWN_BOUND, "{rep:?}");
    flag.release();
    step(t0, name, "flag released");
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
    run_child("child_illegal_address", Duration::from_secs(40), "LAZY");
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
