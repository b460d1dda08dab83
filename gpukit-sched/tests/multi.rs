//! One scheduler over several devices, simulated without a GPU
//! ([`MultiScheduler::cpu_only`]): one device behaves as the single-device scheduler; several
//! get tasks spread by free memory and SM shares; a pinned task goes where it asks; each
//! device keeps its own partitions; metrics carry a `device` label.

use gpukit_sched::{
    Admission, Error, MultiScheduler, Partition, Scheduler, TaskContext, TaskHandle, TaskSpec,
    TaskState,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::*;

fn devices(n: usize) -> MultiScheduler {
    let d: Vec<_> = (0..n).map(|_| (layout(), 1u64 << 30)).collect();
    MultiScheduler::cpu_only(&d, cfg().workers(4)).unwrap()
}

fn half(name: &str) -> TaskSpec {
    TaskSpec::new(name)
        .memory("64MiB", "64MiB")
        .compute(0.5, 0.5)
}

/// A task held until `g` opens (returns its id).
fn held_until(g: &Arc<AtomicBool>) -> impl FnOnce(&mut TaskContext) -> R<usize> + Send + 'static {
    let g = g.clone();
    move |ctx: &mut TaskContext| {
        while !g.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(ctx.id() as usize)
    }
}

#[test]
fn one_device_is_the_single_device_scheduler() {
    let m = devices(1);
    assert_eq!(m.schedulers().len(), 1);
    assert_eq!(m.place(&half("a")).unwrap(), 0);
    let h = m
        .submit(|_: &mut TaskContext| Ok::<_, Error>(7), half("a"))
        .unwrap();
    assert!(matches!(h.admission(), Admission::Admitted(_)));
    assert_eq!(finish(h, SLACK).unwrap(), 7);
    // Pinned to its device: fine; to another: an error, nothing submitted.
    assert!(m
        .submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            half("p").device(0)
        )
        .is_ok());
    assert!(matches!(
        m.submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            half("p").device(1)
        ),
        Err(Error::InvalidSpec { .. })
    ));
    // The single-device scheduler accepts only its own ordinal.
    let s = Scheduler::cpu_only(layout(), 1 << 30, cfg()).unwrap();
    assert!(matches!(
        s.submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            half("p").device(3)
        ),
        Err(Error::InvalidSpec { .. })
    ));
}

/// Half-GPU tasks on three devices: two per device (the third per device waits), spread as
/// they arrive; a pinned task goes to its device even when it has to queue there.
#[test]
fn tasks_spread_by_free_memory_and_sms_and_pins_hold() {
    let m = devices(3);
    let g = gate();
    let mut placed = vec![0usize; 3];
    let mut hs: Vec<TaskHandle<usize>> = Vec::new();
    for i in 0..6 {
        let spec = half(&format!("t{i}"));
        let d = m.place(&spec).unwrap();
        placed[d] += 1;
        let h = m.submit(held_until(&g), spec).unwrap();
        assert!(
            matches!(h.admission(), Admission::Admitted(_)),
            "t{i}: {:?}",
            h.admission()
        );
        hs.push(h);
        // Spread as they arrive: never two more on one device than on another.
        let (lo, hi) = (placed.iter().min().unwrap(), placed.iter().max().unwrap());
        assert!(hi - lo <= 1, "{placed:?}");
    }
    assert_eq!(placed, [2, 2, 2]);
    for st in m.stats() {
        assert_eq!(st.partitions[0].pool.running, 2, "device {}", st.device);
    }
    // Every device is full: a seventh waits on one; a pinned one queues on its device.
    let pinned = m.submit(held_until(&g), half("pinned").device(2)).unwrap();
    assert!(matches!(pinned.admission(), Admission::Queued { .. }));
    assert_eq!(
        m.scheduler(2)
            .unwrap()
            .task_stats(pinned.id())
            .unwrap()
            .state,
        TaskState::Queued
    );
    g.store(true, Ordering::Release);
    for h in hs {
        finish(h, SLACK).unwrap();
    }
    finish(pinned, SLACK).unwrap();
    let ran: Vec<u64> = m
        .stats()
        .iter()
        .map(|s| s.count(TaskState::Succeeded))
        .collect();
    assert_eq!(ran, [2, 2, 3]);
}

/// Memory decides too: a device with less uncommitted memory gets the task last.
#[test]
fn the_device_with_more_free_memory_wins() {
    let m = devices(2);
    let g = gate();
    let big = m
        .submit(
            held_until(&g),
            TaskSpec::new("big")
                .memory("900MiB", "900MiB")
                .compute(0.1, 0.1)
                .device(0),
        )
        .unwrap();
    assert_eq!(m.place(&half("next")).unwrap(), 1);
    g.store(true, Ordering::Release);
    finish(big, SLACK).unwrap();
}

/// Each device has its own partitions: a task for a partition goes to the device that has
/// it; an unknown partition is the usual error.
#[test]
fn partitions_are_per_device() {
    let m = devices(3);
    m.create_partition(1, &Partition::new("rt").memory(1u64 << 28).compute(0.25))
        .unwrap();
    let spec = half("rt-task").partition("rt").compute(0.25, 0.25);
    assert_eq!(m.place(&spec).unwrap(), 1);
    let h = m
        .submit(|_: &mut TaskContext| Ok::<_, Error>(1), spec)
        .unwrap();
    assert_eq!(finish(h, SLACK).unwrap(), 1);
    assert!(matches!(
        m.submit(
            |_: &mut TaskContext| Ok::<_, Error>(()),
            half("x").partition("nowhere")
        ),
        Err(Error::UnknownPartition { .. })
    ));
    assert!(m.create_partition(7, &Partition::new("p")).is_err());
    m.remove_partition(1, "rt").unwrap();
}

/// One metrics snapshot for all devices: every sample has a `device` label, each family is
/// declared once, the text parses strictly.
#[test]
fn metrics_of_all_devices_carry_a_device_label() {
    let m = devices(2);
    let g = gate();
    let hs: Vec<_> = (0..4)
        .map(|i| m.submit(held_until(&g), half(&format!("t{i}"))).unwrap())
        .collect();
    assert!(wait_until(SLACK, || m.metrics().contains(
        "gpukit_sched_tasks{device=\"1\",state=\"running\"} 2"
    )));
    g.store(true, Ordering::Release);
    for h in hs {
        finish(h, SLACK).unwrap();
    }
    let text = m.metrics();
    let samples = parse_prometheus(&text);
    assert!(
        samples.iter().all(|(_, l, _)| l.starts_with("device=\"")),
        "{text}"
    );
    for d in 0..2 {
        let submitted = samples
            .iter()
            .find(|(n, l, _)| {
                n == "gpukit_sched_tasks_submitted_total" && l == &format!("device=\"{d}\"")
            })
            .unwrap()
            .2;
        assert_eq!(submitted, 2.0, "device {d}");
    }
    let reports = m.shutdown(SLACK);
    assert_eq!(reports.len(), 2);
}
