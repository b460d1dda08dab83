//! Where a call goes: the decision (see the module docs of [`crate::dispatch`]) and the wait
//! for a GPU that is still starting.

use super::*;

/// Threads of other processes running beside a call (see [`load::running_beside`]) beyond
/// which its CPU estimate is not trusted while the GPU starts: a multithreaded CPU library's
/// team spans every core, and a core taken by another program stalls the whole team at each of
/// its barriers. Issue 22's script of short processes (four Python processes at a time with
/// OpenBLAS's 16 threads each, H100 host, 2026-12-06): a 1500 x 1500 `dgesv` priced at 0.09 s
/// ran 1.0-1.4 s. One such thread (a daemon waking) is tolerated.
pub const OTHERS_RUNNING_MAX: u32 = 1;

/// How many times its calibrated CPU time a call the CPU estimate of which cannot be trusted
/// ([`Dispatcher::crowded`]) is taken to cost on the CPU when it decides how long to wait for a
/// start-up that overruns ([`Dispatcher::await_start`]): the low end of what such calls ran,
/// measured on an H100 host (16 cores, OpenBLAS's 16 threads, 2026-12-06): 3.4-7.5x (a
/// `dsyevd` beside a pool's busy threads), 10-15x (`dgesv` in four processes at once), 13-38x
/// (beside other CPU-library calls of the process). In issue 22's thread pool on a freshly
/// started machine (the CUDA libraries read from disk, a start far longer than the profile's),
/// the four threads' first calls each waited their first wait, gave up together and ran on the
/// CPU side by side in 1.8-2.8 s: the program took 6.1 s against 2.7 s forced.
pub const CROWDED_CPU_FACTOR: f64 = 8.0;

/// What to do with a call.
pub(super) enum Plan {
    Gpu,
    Cpu(Reason),
    /// Wait for the GPU (start-up, or cuSOLVER's load) up to this long, then run there; run on
    /// the CPU if it is not ready by then.
    Wait(Duration),
}

impl Dispatcher {
    /// Where a call goes (see the module docs).
    pub(super) fn decide(self: &Arc<Self>, req: &Request, est: Option<&Estimate>) -> Plan {
        if self.config.gpu == GpuMode::Off {
            return Plan::Cpu(Reason::Disabled);
        }
        if crate::gpu::unsupported(&req.call).is_some() {
            return Plan::Cpu(Reason::Unsupported);
        }
        if self.forked.load(Relaxed) {
            return Plan::Cpu(Reason::Forked);
        }
        let lapack = crate::gpu::needs_solver(&req.call.op);
        if self.config.gpu == GpuMode::Always {
            self.start_blocking();
            if self.core.get() != READY {
                return Plan::Cpu(Reason::NoGpu);
            }
            return Plan::Gpu;
        }
        let Some(e) = est else {
            return Plan::Cpu(Reason::NoModel);
        };
        if !e.cpu_known {
            return Plan::Cpu(Reason::CpuUnmeasured);
        }
        let need = required_speedup(self.config.level);
        if e.cpu_s < need * e.gpu_s {
            // a GPU correction may have become too pessimistic (a slow first call): when the
            // uncorrected GPU figure says it wins, re-measure it now and then
            let raw_gpu = self
                .model_estimate(req, req.lib.key_id())
                .map(|r| r.gpu_s)
                .unwrap_or(f64::INFINITY);
            if self.core.get() == READY
                && (!lapack || self.solver.get() == READY)
                && e.cpu_s >= need * raw_gpu
                && self
                    .learner
                    .take_recheck(req.kind, req.prec(), req.features, Backend::Gpu)
            {
                return Plan::Gpu;
            }
            return Plan::Cpu(Reason::CpuFaster);
        }
        match self.core.get() {
            FAILED => return Plan::Cpu(Reason::NoGpu),
            NOT_STARTED => {
                self.note_missed(&req.call);
                match self.config.start {
                    StartPolicy::Savings => {
                        // the savings this call misses are added up; once they would have paid
                        // for start-up (with cuSOLVER's load for a LAPACK call, which it needs
                        // too), CUDA starts on a background thread while this call runs on the
                        // CPU
                        let gain = (e.cpu_s - e.gpu_s).max(0.0);
                        let missed = self.missed_ns.fetch_add((gain * 1e9) as u64, Relaxed) as f64
                            * 1e-9
                            + gain;
                        let st = &self.model.startup;
                        let price = st.start_s + if lapack { st.solver_s } else { 0.0 };
                        if missed > price {
                            self.start_background();
                        }
                        return Plan::Cpu(Reason::StartupNotPaid);
                    }
                    StartPolicy::Lazy | StartPolicy::Eager => {
                        self.start_background();
                        return self.wait_or_cpu(req, e, need, lapack);
                    }
                }
            }
            STARTING => {
                self.note_missed(&req.call);
                return self.wait_or_cpu(req, e, need, lapack);
            }
            _ => {}
        }
        if lapack && self.solver.get() != READY {
            if self.solver.get() == FAILED {
                return Plan::Cpu(Reason::NoGpu);
            }
            self.load_solver_background();
            return self.wait_or_cpu(req, e, need, lapack);
        }
        if e.speedup() < 2.0 * need
            && self
                .learner
                .take_recheck(req.kind, req.prec(), req.features, Backend::Cpu)
        {
            return Plan::Cpu(Reason::Recheck);
        }
        Plan::Gpu
    }

    /// A GPU-bound call while the GPU (or cuSOLVER) is starting: wait when the start-up still
    /// needed plus the GPU time beats the CPU by the required speedup, else run on the CPU.
    ///
    /// Also wait, whatever the CPU estimate, when another CPU-library call of this process is
    /// in flight, or other threads of this process have called the library (a thread pool), or
    /// other threads of this process are at work beside it (the library's own team and
    /// gpukit's threads aside, [`load::Beside::own`]: a pool whose other threads have not
    /// called yet), or more than [`OTHERS_RUNNING_MAX`] threads of other processes are running
    /// on the machine, and the call's own GPU time beats its CPU time by the required speedup:
    /// the CPU estimate then cannot be trusted. Concurrent calls into one multithreaded CPU
    /// library do not share the cores as the load price's `k` times assumes: each starts a full
    /// team of threads, and the teams thrash; a team beside the pool's other threads' work (NumPy's element-wise
    /// operations, random numbers) thrashes too. Measured in issue 22's thread pool on an H100
    /// host (16 cores, OpenBLAS, four threads, 2026-12-06): with calls in flight beside it, a
    /// 3000 x 3000 `dgesv` priced at 0.36 s ran 3.4-3.7 s on the CPU, a 1500 x 1500 `dsyevd`
    /// priced at 0.32 s ran 3.0 s; with none in flight but the other threads busy, that
    /// `dsyevd` priced at 0.32 s ran 1.1-2.4 s (three runs of four), and a 3000 x 3000 `dgesv`
    /// priced at 0.09 s 0.9 s. The same program with every call waiting for the GPU took
    /// 2.5-3.1 s in all; when that `dsyevd` was the process's first call (nothing in flight, no
    /// other thread had called, the pool's other threads making their requests' data), it
    /// ran 4.2-4.7 s on the CPU in three runs of six. A call waiting leaves the cores to the
    /// work already running.
    pub(super) fn wait_or_cpu(&self, req: &Request, e: &Estimate, need: f64, lapack: bool) -> Plan {
        let st = &self.model.startup;
        let mut remaining = match self.core.get() {
            STARTING => self.remaining(&self.core, st.start_s),
            READY => 0.0,
            _ => return Plan::Cpu(Reason::NoGpu),
        };
        if lapack {
            remaining += match self.solver.get() {
                STARTING => self.remaining(&self.solver, st.solver_s),
                READY => 0.0,
                _ => st.solver_s,
            };
        }
        // the cheap test first: `crowded` reads /proc
        if e.cpu_s >= need * (remaining + e.gpu_s) || self.crowded(e, need) {
            Plan::Wait(Duration::from_secs_f64(remaining) + WAIT_SLACK)
        } else {
            self.note_missed(&req.call);
            Plan::Cpu(Reason::GpuStarting)
        }
    }

    /// True when a call estimated at `e`, which the GPU wins by the required speedup `need`,
    /// would run on a CPU its estimate does not describe (see [`Dispatcher::wait_or_cpu`]):
    /// another CPU-library call of the process in flight, other threads of the process that
    /// have called the library or are at work beside it, or more than [`OTHERS_RUNNING_MAX`]
    /// threads of other processes running.
    pub(super) fn crowded(&self, e: &Estimate, need: f64) -> bool {
        let now = self.load.snapshot();
        e.cpu_s >= need * e.gpu_s
            && (now.cpu_others > 0
                || now.callers > 1
                || self
                    .load
                    .beside()
                    .is_some_and(|b| b.own > 0 || b.other_processes > OTHERS_RUNNING_MAX))
    }

    /// Carries out a [`Plan::Wait`] of `first` for a call estimated at `e`: waits for the
    /// start-up, and when a wait ends before the GPU is ready (a start running past its expected
    /// time, as on a machine slower to start than the profile's), decides again with what is
    /// left of it ([`Dispatcher::wait_or_cpu`]) instead of sending the call to the CPU at once:
    /// a call the GPU would run in milliseconds once ready is worth a few hundred milliseconds
    /// more of waiting, seconds of CPU time are not worth giving up for it. The waits together
    /// never pass the call's CPU time or the first wait, whichever is longer (then it runs
    /// there: a start that never ends costs at most twice that, the break-even rule of renting
    /// versus buying; the first wait may be the longer for a call that waits because the CPU
    /// library is busy with another call, see [`Dispatcher::wait_or_cpu`]). A call whose CPU
    /// estimate cannot be trusted ([`Dispatcher::crowded`], looked at again after each wait)
    /// counts its CPU time as [`CROWDED_CPU_FACTOR`] times the estimate.
    pub(super) fn await_start(&self, req: &Request, e: &Estimate, first: Duration) -> Plan {
        let lapack = crate::gpu::needs_solver(&req.call.op);
        let need = required_speedup(self.config.level);
        let began = Instant::now();
        let bound = |crowded: bool| {
            let cpu = if crowded {
                e.cpu_s * CROWDED_CPU_FACTOR
            } else {
                e.cpu_s
            };
            cpu.max(first.as_secs_f64())
        };
        let mut limit = first;
        loop {
            let ready = self.wait_for(
                |d| {
                    d.core.get() != STARTING
                        && (!lapack || d.core.get() != READY || d.solver.get() != STARTING)
                },
                Some(limit),
            );
            if ready {
                return match self.core.get() {
                    READY => Plan::Gpu,
                    _ => Plan::Cpu(Reason::NoGpu),
                };
            }
            let left = bound(self.crowded(e, need)) - began.elapsed().as_secs_f64();
            if left <= 0.0 {
                self.note_missed(&req.call);
                return Plan::Cpu(Reason::GpuStarting);
            }
            match self.wait_or_cpu(req, e, need, lapack) {
                Plan::Wait(next) => limit = next.min(Duration::from_secs_f64(left)),
                other => return other,
            }
        }
    }
}
