//! One scheduler over several devices: a [`Scheduler`] per device — each with its own
//! partitions, memory ledger, SM groups, workers and timer, exactly as on one device — and a
//! placement that puts each task on one of them (by free memory and SM shares, or where it is
//! pinned; see the placement rules in [`MultiScheduler::submit`]). With one device it is that
//! device's scheduler.

use crate::config::SchedulerConfig;
use crate::context::TaskContext;
use crate::error::{Error, Result};
use crate::handle::TaskHandle;
use crate::partitions::Partition;
use crate::placement::{place, NoPlace, Request};
use crate::plan::PoolInfo;
use crate::scheduler::{Scheduler, ShutdownReport};
use crate::sm::SmLayout;
use crate::spec::TaskSpec;
use crate::stats::SchedulerStats;
use gpukit_core::Device;
use std::time::Duration;

/// A QoS scheduler over several devices of one machine. See the module docs.
///
/// ```no_run
/// use gpukit_sched::{MultiScheduler, SchedulerConfig, TaskContext, TaskSpec};
/// let sched = MultiScheduler::all(SchedulerConfig::default())?; // every visible GPU
/// let h = sched.submit(
///     |ctx: &mut TaskContext| -> gpukit_sched::Result<usize> { Ok(ctx.device()?.ordinal()) },
///     TaskSpec::new("job").memory("1GiB", "1GiB").compute(0.5, 0.5),
/// )?;
/// println!("ran on device {}", h.wait()?);
/// # Ok::<(), gpukit_sched::Error>(())
/// ```
#[derive(Debug)]
pub struct MultiScheduler {
    scheds: Vec<Scheduler>,
}

impl MultiScheduler {
    /// A scheduler per device in `devices` (each [`Scheduler::new`] with `cfg`). No device, or
    /// one listed twice, is [`Error::InvalidSpec`].
    pub fn new(devices: Vec<Device>, cfg: SchedulerConfig) -> Result<MultiScheduler> {
        let mut seen = std::collections::BTreeSet::new();
        for d in &devices {
            if !seen.insert(d.ordinal()) {
                return Err(Error::invalid("devices", d.ordinal(), "listed twice"));
            }
        }
        if devices.is_empty() {
            return Err(Error::invalid("devices", "[]", "needs at least one device"));
        }
        let scheds = devices
            .into_iter()
            .map(|d| Scheduler::new(d, cfg.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiScheduler { scheds })
    }

    /// A scheduler over every device CUDA shows this process (`Device::count()`, which
    /// `CUDA_VISIBLE_DEVICES` limits).
    pub fn all(cfg: SchedulerConfig) -> Result<MultiScheduler> {
        let n = Device::count()?;
        let devices = (0..n)
            .map(Device::open)
            .collect::<gpukit_core::Result<Vec<_>>>()?;
        MultiScheduler::new(devices, cfg)
    }

    /// Simulated devices without a GPU (`(layout, memory capacity)` each, ordinals 0..n): the
    /// CPU side of each device's scheduler as [`Scheduler::cpu_only`], with the same placement.
    pub fn cpu_only(devices: &[(SmLayout, u64)], cfg: SchedulerConfig) -> Result<MultiScheduler> {
        if devices.is_empty() {
            return Err(Error::invalid("devices", "[]", "needs at least one device"));
        }
        let scheds = devices
            .iter()
            .enumerate()
            .map(|(i, (layout, cap))| Scheduler::simulated(i, *layout, *cap, cfg.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiScheduler { scheds })
    }

    /// The devices' schedulers, in the order given.
    pub fn schedulers(&self) -> &[Scheduler] {
        &self.scheds
    }

    /// The scheduler of device `ordinal`.
    pub fn scheduler(&self, ordinal: usize) -> Option<&Scheduler> {
        self.scheds.iter().find(|s| s.ordinal() == ordinal)
    }

    /// The device (ordinal) a task with `spec` would go to now.
    ///
    /// 1. A task pinned to a device ([`TaskSpec::device`]) goes there (an ordinal this
    ///    scheduler does not run is [`Error::InvalidSpec`]).
    /// 2. Candidates: healthy devices where its partition exists and its request can ever fit.
    /// 3. Among those where it starts now (a worker slot, uncommitted memory and free SM
    ///    groups for it), the one with the most room left after it (free memory fraction +
    ///    free SM-group fraction), then fewer running tasks, then the lower ordinal.
    /// 4. Else the candidate with the shortest queue, fewest running tasks, most room, lower
    ///    ordinal: it waits there.
    /// 5. Without candidates, the first device with its partition (else the first device),
    ///    whose admission answers with the precise rejection.
    pub fn place(&self, spec: &TaskSpec) -> Result<usize> {
        let r = spec.resolve()?;
        let loads: Vec<_> = self.scheds.iter().map(|s| s.load(&r.partition)).collect();
        let req = Request {
            memory: r.memory_request,
            share: r.compute_request,
            device: r.device,
        };
        match place(&loads, &req) {
            Ok(i) => Ok(loads[i].ordinal),
            Err(NoPlace::UnknownDevice { asked, known }) => Err(Error::invalid(
                "device",
                asked,
                format!("this scheduler runs devices {known:?}"),
            )),
            Err(NoPlace::Empty) => Err(Error::invalid("devices", "[]", "no device")),
        }
    }

    /// Places a task ([`place`](Self::place)) and submits it to that device's scheduler
    /// ([`Scheduler::submit`]); the handle is that scheduler's. Inside the task,
    /// [`TaskContext::device`] is the device it runs on.
    pub fn submit<T, E, F>(&self, task: F, spec: TaskSpec) -> Result<TaskHandle<T>>
    where
        T: Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
        F: FnOnce(&mut TaskContext) -> std::result::Result<T, E> + Send + 'static,
    {
        let ordinal = self.place(&spec)?;
        let sched = self
            .scheduler(ordinal)
            .ok_or_else(|| Error::internal("placing a task", "placed on an unknown device"))?;
        sched.submit(task, spec.device(ordinal))
    }

    /// Creates partition `p` on device `ordinal` (each device has its own partitions).
    pub fn create_partition(&self, ordinal: usize, p: &Partition) -> Result<PoolInfo> {
        self.on(ordinal)?.create_partition(p)
    }

    /// Removes partition `name` from device `ordinal`.
    pub fn remove_partition(&self, ordinal: usize, name: &str) -> Result<()> {
        self.on(ordinal)?.remove_partition(name)
    }

    fn on(&self, ordinal: usize) -> Result<&Scheduler> {
        self.scheduler(ordinal).ok_or_else(|| {
            Error::invalid(
                "device",
                ordinal,
                format!(
                    "this scheduler runs devices {:?}",
                    self.scheds
                        .iter()
                        .map(Scheduler::ordinal)
                        .collect::<Vec<_>>()
                ),
            )
        })
    }

    /// Each device's statistics.
    pub fn stats(&self) -> Vec<SchedulerStats> {
        self.scheds.iter().map(Scheduler::stats).collect()
    }

    /// One metrics snapshot of every device (Prometheus text, label `device`).
    pub fn metrics(&self) -> String {
        SchedulerStats::to_prometheus_devices(&self.stats())
    }

    /// Shuts every device's scheduler down (one after the other, each with `timeout`).
    pub fn shutdown(self, timeout: Duration) -> Vec<ShutdownReport> {
        self.scheds
            .into_iter()
            .map(|s| s.shutdown(timeout))
            .collect()
    }
}
