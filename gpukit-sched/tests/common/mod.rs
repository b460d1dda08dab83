//! Helpers shared by the CPU-only test binaries ([`Scheduler::cpu_only`]: the scheduler's
//! planner, ledger, state machine, timer and workers without a device).
#![allow(dead_code)] // each test binary uses a part

use gpukit_sched::{Scheduler, SchedulerConfig, SmLayout, TaskContext, TaskHandle, TaskSpec};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub type R<T> = gpukit_sched::Result<T>;

pub const GRACE: Duration = Duration::from_millis(150);
/// Slack for a loaded 2-core build machine on every time bound below.
pub const SLACK: Duration = Duration::from_millis(250);

pub fn layout() -> SmLayout {
    SmLayout::with_groups(132, 8, 15, true).unwrap()
}

pub fn cfg() -> SchedulerConfig {
    SchedulerConfig::default()
        .workers(3)
        .stop_grace(GRACE)
        .shutdown_timeout(Duration::from_millis(200))
}

pub fn sched_with(capacity: u64, cfg: SchedulerConfig) -> Scheduler {
    Scheduler::cpu_only(layout(), capacity, cfg).unwrap()
}

pub fn sched(spin: Duration) -> Scheduler {
    sched_with(1 << 30, cfg().worker_spin(spin))
}

pub fn spec() -> TaskSpec {
    TaskSpec::new("t")
        .memory("1MiB", "1MiB")
        .compute(0.25, 0.25)
}

pub fn gate() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// A task body that holds its worker until `g` opens.
pub fn hold(g: &Arc<AtomicBool>) -> impl FnOnce(&mut TaskContext) -> R<()> + Send + 'static {
    let g = g.clone();
    move |_: &mut TaskContext| {
        while !g.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// Polls `f` every millisecond until it holds; false when `timeout` passed first.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while !f() {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

pub fn finish<T>(h: TaskHandle<T>, bound: Duration) -> R<T> {
    match h.wait_timeout(bound) {
        Ok(r) => r,
        Err(h) => panic!("task {} had no outcome within {bound:?}", h.id()),
    }
}
pub mod kernels;
