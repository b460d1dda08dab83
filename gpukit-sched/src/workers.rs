//! The worker threads: the hand-off of started tasks, and each task's run from its start to
//! the release of everything it held. No panic ends a worker: the closure's panics become the
//! task's [`Error::Panicked`](crate::Error::Panicked), and a panic anywhere else in a task's
//! run (the scheduler, the driver bindings) becomes its [`Error::Internal`]; either way the
//! task's memory, SM groups and lanes are released and the worker takes the next task.

use crate::config::PanicPoint;
use crate::context::{home_key, TaskContext, TaskGpu};
use crate::error::{Error, Result};
use crate::pacer::Pacer;
use crate::scheduler::{push_finished, Inner};
use crate::task::{panic_message, Ended, Stop, Task, TaskState};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A task's closure, type-erased: runs it, stores its value, reports how it ended.
pub(crate) type Job = Box<dyn FnOnce(&mut TaskContext) -> Ended + Send>;

/// Drops the value a task's closure returned (it stays in the handle's slot otherwise).
pub(crate) type Discard = Box<dyn FnOnce() + Send>;

/// A started task on its way to a worker.
pub(crate) struct Pending {
    pub task: Arc<Task>,
    pub job: Job,
    pub discard: Discard,
}

/// Started tasks on their way to the workers. A worker that just finished a task polls
/// `pending` for `worker_spin` before it sleeps on `ready`; a sender wakes sleeping workers
/// only for the jobs that polling workers will not take, so a task handed to a polling worker
/// costs the submitting thread no system call.
pub(crate) struct Handoff {
    queue: Mutex<HandoffQueue>,
    ready: Condvar,
    /// Jobs queued (a hint for the polling worker; the queue under the lock decides).
    pending: AtomicUsize,
}

struct HandoffQueue {
    jobs: VecDeque<Pending>,
    /// Workers polling: each checks the queue under the lock before it sleeps.
    polling: usize,
    closed: bool,
}

impl Handoff {
    pub fn new() -> Self {
        Handoff {
            queue: Mutex::new(HandoffQueue {
                jobs: VecDeque::new(),
                polling: 0,
                closed: false,
            }),
            ready: Condvar::new(),
            pending: AtomicUsize::new(0),
        }
    }

    /// Queues started tasks (call without the scheduler's lock held). After
    /// [`close`](Self::close) workers still drain what is queued.
    pub fn send(&self, out: Vec<Pending>) {
        if out.is_empty() {
            return;
        }
        let wake = {
            let mut q = self.queue.lock();
            let n = out.len();
            q.jobs.extend(out);
            self.pending.store(q.jobs.len(), Ordering::Release);
            n.saturating_sub(q.polling)
        };
        // After unlocking, so a woken worker does not block on the lock. A worker that is
        // still polling took no wake-up; one that takes a job and sees more wakes another.
        for _ in 0..wake {
            self.ready.notify_one();
        }
    }

    /// Workers finish the queued jobs, then exit.
    pub fn close(&self) {
        self.queue.lock().closed = true;
        self.ready.notify_all();
    }

    /// The next job; `None` once closed and drained. `spin`: poll before sleeping.
    fn recv(&self, spin: Duration) -> Option<Pending> {
        let mut q = self.queue.lock();
        if spin > Duration::ZERO && q.jobs.is_empty() && !q.closed && q.polling == 0 {
            q.polling += 1;
            drop(q);
            let t = Instant::now();
            let mut i = 0u32;
            while self.pending.load(Ordering::Acquire) == 0 {
                i = i.wrapping_add(1);
                if i.is_multiple_of(64) {
                    if t.elapsed() >= spin {
                        break;
                    }
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            q = self.queue.lock();
            q.polling -= 1;
        }
        loop {
            if let Some(p) = q.jobs.pop_front() {
                self.pending.store(q.jobs.len(), Ordering::Release);
                let more = !q.jobs.is_empty();
                drop(q);
                if more {
                    self.ready.notify_one();
                }
                return Some(p);
            }
            if q.closed {
                return None;
            }
            self.ready.wait(&mut q);
        }
    }
}

/// The scheduler's threads: the workers and the timer.
pub(crate) struct Workers {
    handles: Vec<std::thread::JoinHandle<()>>,
    alive: Arc<(Mutex<usize>, Condvar)>,
}

struct Alive(Arc<(Mutex<usize>, Condvar)>);

impl Drop for Alive {
    fn drop(&mut self) {
        *self.0 .0.lock() -= 1;
        self.0 .1.notify_all();
    }
}

impl Workers {
    pub fn spawn(inner: &Arc<Inner>, n: usize) -> Result<Workers> {
        let alive = Arc::new((Mutex::new(0usize), Condvar::new()));
        let mut handles = Vec::with_capacity(n + 1);
        let spawn = |name: String, body: Box<dyn FnOnce() + Send>| {
            *alive.0.lock() += 1;
            let guard = Alive(alive.clone());
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let _guard = guard;
                    body()
                })
                .map_err(|e| Error::internal("starting a scheduler thread", e.to_string()))
        };
        let timer = inner.clone();
        handles.push(spawn(
            "gpukit-sched-timer".into(),
            Box::new(move || timer.timer_loop()),
        )?);
        for i in 0..n {
            let inner = inner.clone();
            handles.push(spawn(
                format!("gpukit-sched-{i}"),
                Box::new(move || {
                    let mut spin = Duration::ZERO;
                    while let Some(p) = inner.handoff.recv(spin) {
                        inner.run_task(p);
                        spin = inner.cfg.worker_spin;
                    }
                }),
            )?);
        }
        Ok(Workers { handles, alive })
    }

    /// Joins the threads that end by `deadline`; the others (a detached task's closure that
    /// never returns) are left running.
    pub fn join(self, deadline: Instant) {
        let (count, cv) = &*self.alive;
        let mut n = count.lock();
        while *n > 0 {
            if cv.wait_until(&mut n, deadline).timed_out() {
                break;
            }
        }
        let all_done = *n == 0;
        drop(n);
        if all_done {
            for h in self.handles {
                let _ = h.join();
            }
        }
    }
}

impl Inner {
    /// Runs one started task to its end. Never panics, never skips the release.
    pub(crate) fn run_task(self: &Arc<Self>, p: Pending) {
        let Pending { task, job, discard } = p;
        let (ended, gpu_ms) = match catch_unwind(AssertUnwindSafe(|| self.execute(&task, job))) {
            Ok(r) => r,
            Err(payload) => (
                Ended::Err(Error::internal(
                    "running the task",
                    format!("panic: {}", panic_message(&*payload)),
                )),
                None,
            ),
        };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| {
            self.end_task(&task, ended, gpu_ms, discard)
        })) {
            // A bug in the release itself: still give the task its outcome.
            task.resolve(
                TaskState::Failed,
                Some(Error::internal(
                    "releasing the task",
                    format!("panic: {}", panic_message(&*payload)),
                )),
                false,
            );
            self.notify(&task);
        }
    }

    /// From the start to the closure's return: room in memory, lanes, the closure, timing.
    fn execute(self: &Arc<Self>, task: &Arc<Task>, job: Job) -> (Ended, Option<f64>) {
        let grace = self.cfg.stop_grace;
        let room = self.memory.make_room(
            &task.owner,
            crate::timer::after(grace),
            |victims| self.evict(task, victims),
            || task.stop.requested(),
        );
        if let Err(e) = task.safe_point() {
            // Stopped while starting (cancelled, shut down): the stop's outcome.
            return (Ended::Err(e), None);
        }
        if let Err((missing, holders)) = room {
            return (
                Ended::Err(Error::MemoryUnavailable {
                    task: task.spec.name.clone(),
                    missing,
                    waited: grace,
                    holders,
                }),
                None,
            );
        }
        let Some(grant) = task.status.lock().grant else {
            return (
                Ended::Err(Error::internal(
                    "starting the task",
                    "started without a grant",
                )),
                None,
            );
        };
        // The timeout counts from here: the lane the task needs may be created now, and beside
        // a kernel that never ends the driver can block that creation (a new context loads
        // every module in it under CUDA_MODULE_LOADING=EAGER), so the start is bounded too.
        if let Some(timeout) = task.spec.timeout {
            let mut st = self.state.lock();
            st.timers.entry(task.id).or_default().timeout_at = crate::timer::after(timeout);
            self.arm_timer(&mut st);
        }
        let gpu = match self.task_gpu(task, &grant) {
            Ok(g) => g,
            Err(e) => return (Ended::Err(e), None),
        };
        // Stopped while its lane was made (timed out, cancelled, shut down; detached already
        // if that took past the grace period): the closure never runs.
        if let Err(e) = task.safe_point() {
            if let Some(g) = gpu {
                self.checkin(g.home);
            }
            return (Ended::Err(e), None);
        }
        task.set_state(TaskState::Running);
        let mut ctx = TaskContext {
            inner: self.clone(),
            task: task.clone(),
            grant,
            gpu,
        };
        self.injected(PanicPoint::BeforeClosure, task);
        let ended = match (&self.gpu, ctx.gpu.as_ref().map(|g| g.home.stream.clone())) {
            (Some(gpu), Some(home)) => gpu.dev.with_stream(&home, || {
                gpu.dev
                    .allocator()
                    .with_owner(&task.owner, || job(&mut ctx))
            }),
            _ => job(&mut ctx),
        };
        self.injected(PanicPoint::AfterClosure, task);
        let finished = ctx.finish();
        if let Err(e) = &finished {
            self.observe_error(task, e);
        }
        match (ended, finished) {
            (Ended::Ok, Err(e)) => (Ended::Err(e), None),
            (ended, Ok(ms)) => (ended, ms),
            (ended, Err(_)) => (ended, None),
        }
    }

    pub(crate) fn injected(&self, at: PanicPoint, task: &Task) {
        if let Some((point, name)) = &self.cfg.inject_panic {
            if *point == at && *name == task.spec.name {
                panic!("injected panic ({at:?}) in the scheduler for task `{name}`");
            }
        }
    }

    /// The streams and pacer of a task about to run (`None` without a device).
    fn task_gpu(&self, task: &Task, grant: &crate::plan::Grant) -> Result<Option<TaskGpu>> {
        let Some(gpu) = &self.gpu else {
            return Ok(None);
        };
        let has_floor = gpu.split.as_ref().is_some_and(|s| s.has_remainder());
        let home = self.checkout(home_key(gpu.split.is_some(), has_floor, grant))?;
        let (own, lent) = *task.usable.lock();
        let pacer = self
            .duty(grant, own, lent)
            .filter(|d| gpu.split.is_none() || *d < 0.999)
            .map(|d| Pacer::new(d, gpu.split.is_none()));
        let t0 = match home.stream.record() {
            Ok(e) => e,
            Err(e) => {
                self.checkin(home);
                return Err(e.into());
            }
        };
        task.sms_in_use.store(home.sms, Ordering::Relaxed);
        Ok(Some(TaskGpu {
            dev: gpu.dev.clone(),
            home,
            lent: None,
            retiring: Vec::new(),
            on_lent: false,
            seen_generation: u64::MAX,
            pacer,
            blas: None,
            lane_bound: false,
            t0: Some(t0),
            settled: false,
        }))
    }

    /// The closure has returned (or never ran): release everything, decide the outcome (unless
    /// a stop past its grace already did), start what can start.
    ///
    /// A task evicted for memory that returned `Ok` while still holding device memory (its
    /// result holds buffers) cannot keep it: the result is dropped here, which frees the
    /// memory for the task that evicted it, and the task ends Preempted.
    fn end_task(&self, task: &Arc<Task>, ended: Ended, gpu_ms: Option<f64>, discard: Discard) {
        // A sticky error first: queued tasks then fail instead of starting below.
        if let Ended::Err(e) = &ended {
            self.observe_error(task, e);
        }
        // Its GPU work did not end: resources stay taken until it does (see `quarantine`).
        let quarantined = self.is_quarantined(task.id);
        let evicted = matches!(task.stop.get(), Some((Stop::Preempt(_), _)));
        let ended = match ended {
            Ended::Ok if evicted => match self.memory.usage(&task.owner).0 {
                0 => Ended::Ok,
                bytes => {
                    discard();
                    Ended::Discarded { bytes }
                }
            },
            e => e,
        };
        let (_, peak) = self.memory.usage(&task.owner);
        if quarantined.is_none() {
            self.memory.close(&task.owner);
        }
        let (state, err) = task.outcome_of(ended);
        let ran = {
            let mut s = task.status.lock();
            s.gpu_ms = gpu_ms;
            s.mem_peak = peak;
            let now = Instant::now();
            if quarantined.is_none() {
                s.released_at = Some(now);
            }
            s.started
                .map(|t| now.saturating_duration_since(t).as_secs_f64())
        };
        let now = self.now();
        let out = {
            let mut st = self.state.lock();
            st.timers.remove(&task.id);
            let planned = match quarantined {
                Some(groups) => st.planner.quarantine(task.id, groups, now).1,
                None => {
                    st.live.remove(&task.id);
                    st.start_order.remove(&task.id);
                    st.planner.finish(task.id, now)
                }
            };
            let q = crate::stats::qos_index(task.spec.qos);
            if let Some(secs) = ran {
                st.run_time[q].observe(secs);
            }
            st.gpu_seconds[q] += gpu_ms.unwrap_or(0.0) / 1e3;
            self.conclude(&mut st, task, state, err, false);
            push_finished(&mut st, task.clone());
            self.apply_events(&mut st, planned);
            if st.shutting_down {
                self.idle.notify_all();
            }
            st
        };
        self.release(out);
    }
}
