//! The scheduler over several GPUs ([`MultiScheduler`]), on the GPU host.
//!
//! - `multi_scheduler_on_every_visible_gpu`: any number of GPUs (1 on the single-GPU host):
//!   tasks run on the device placement chose, a pinned task on its device, each device's SMs
//!   confined as on one device.
//! - `placement_spreads_over_several_gpus`: needs 2 or more GPUs; skips (printing why) with
//!   fewer, fails instead under `GPUKIT_REQUIRE_MULTI_GPU=1`: half-GPU tasks spread two per
//!   device, a pinned one goes to its device, and each task's kernels ran on its device.
//!
//! Multi-GPU host: `GPUKIT_REQUIRE_GPU=1 GPUKIT_REQUIRE_MULTI_GPU=1 <this binary>
//! --test-threads=1`.

use gpukit_core::Device;
use gpukit_jit::{KernelArg, LaunchConfig};
use gpukit_sched::{Admission, MultiScheduler, SchedulerConfig, TaskContext, TaskSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};

mod common;
use common::kernels::TestKernels;

/// Kernels loaded for each device, by ordinal.
fn kernels(m: &MultiScheduler) -> Arc<BTreeMap<usize, TestKernels>> {
    Arc::new(
        m.schedulers()
            .iter()
            .map(|s| {
                let dev = s.device().expect("device");
                (s.ordinal(), TestKernels::load(dev).expect("kernels"))
            })
            .collect(),
    )
}

/// The device a task ran on and the SMs its kernel touched there.
fn on_device(
    k: Arc<BTreeMap<usize, TestKernels>>,
    together: Option<Arc<Barrier>>,
) -> impl FnOnce(&mut TaskContext) -> gpukit_sched::Result<(usize, usize, u32)> + Send + 'static {
    move |ctx: &mut TaskContext| {
        if let Some(b) = together {
            b.wait();
        }
        let ordinal = ctx.device()?.ordinal();
        let k = &k[&ordinal];
        let blocks = 4096u32;
        let buf = ctx.alloc(blocks as usize * 4)?;
        // SAFETY: `buf` holds `blocks` u32 of this task on this device; synchronized below.
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
        // SAFETY: copies `blocks` u32 from a live buffer; the stream is idle.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, buf.ptr()) }.map_err(|e| {
            gpukit_sched::Error::Driver {
                call: "cuMemcpyDtoH",
                action: "reading smids".into(),
                source: e,
            }
        })?;
        let sms: BTreeSet<u32> = host.into_iter().collect();
        Ok((ordinal, sms.len(), ctx.compute().sms))
    }
}

fn half(name: &str) -> TaskSpec {
    TaskSpec::new(name)
        .memory("256MiB", "256MiB")
        .compute(0.5, 0.5)
}

#[test]
fn multi_scheduler_on_every_visible_gpu() {
    if !gpukit_jit::testing::gpu("multi_scheduler_on_every_visible_gpu") {
        return;
    }
    let m = MultiScheduler::all(SchedulerConfig::default()).unwrap();
    let n = m.schedulers().len();
    println!(
        "{n} device(s): {:?}",
        m.schedulers()
            .iter()
            .map(|s| s.ordinal())
            .collect::<Vec<_>>()
    );
    let k = kernels(&m);
    for s in m.schedulers() {
        let d = s.ordinal();
        let spec = half(&format!("pinned-{d}")).device(d);
        assert_eq!(m.place(&spec).unwrap(), d);
        let (ran_on, touched, sms) = m
            .submit(on_device(k.clone(), None), spec)
            .unwrap()
            .wait()
            .unwrap();
        println!("pinned to {d}: ran on {ran_on}, {touched} SMs touched of its {sms}");
        assert_eq!(ran_on, d);
        assert_eq!(touched as u32, sms, "not confined to its SMs");
    }
    let spec = half("placed");
    let d = m.place(&spec).unwrap();
    let (ran_on, _, _) = m.submit(on_device(k, None), spec).unwrap().wait().unwrap();
    assert_eq!(ran_on, d);
}

#[test]
fn placement_spreads_over_several_gpus() {
    if !gpukit_jit::testing::gpu("placement_spreads_over_several_gpus") {
        return;
    }
    let count = Device::count().unwrap();
    if count < 2 {
        let required = std::env::var("GPUKIT_REQUIRE_MULTI_GPU").as_deref() == Ok("1");
        assert!(
            !required,
            "GPUKIT_REQUIRE_MULTI_GPU=1 but this host shows {count} GPU"
        );
        println!("SKIPPED placement_spreads_over_several_gpus: {count} GPU visible, needs 2");
        return;
    }
    let m = MultiScheduler::all(SchedulerConfig::default()).unwrap();
    let k = kernels(&m);
    // Two half-GPU tasks per device, all running at once: they spread two per device.
    let tasks = 2 * count;
    let together = Arc::new(Barrier::new(tasks));
    let hs: Vec<_> = (0..tasks)
        .map(|i| {
            let h = m
                .submit(
                    on_device(k.clone(), Some(together.clone())),
                    half(&format!("t{i}")),
                )
                .unwrap();
            assert!(
                matches!(h.admission(), Admission::Admitted(_)),
                "t{i}: {:?}",
                h.admission()
            );
            h
        })
        .collect();
    let mut per_device: BTreeMap<usize, usize> = BTreeMap::new();
    for h in hs {
        let (d, touched, sms) = h.wait().unwrap();
        assert_eq!(touched as u32, sms, "device {d}: not confined");
        *per_device.entry(d).or_default() += 1;
    }
    println!("tasks per device: {per_device:?}");
    assert_eq!(per_device.len(), count, "a device got nothing");
    assert!(per_device.values().all(|&n| n == 2), "{per_device:?}");
    // A pinned task goes to the last device.
    let last = m.schedulers().last().unwrap().ordinal();
    let (d, _, _) = m
        .submit(on_device(k, None), half("pinned").device(last))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(d, last);
    print!(
        "{}",
        m.metrics()
            .lines()
            .filter(|l| l.starts_with("gpukit_sched_tasks_submitted"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!();
}
