//! The QoS scheduler for Python (gpukit-sched): `Scheduler(...)`, `submit(fn, policy=,
//! memory=, bandwidth=, ...)`, task and scheduler statistics as dicts. The Python package wraps
//! the native handle in a `concurrent.futures.Future` (gpukit/scheduler.py); the outcome, the
//! callbacks and every state change come from the crate's `TaskHandle`.
//!
//! A task's function runs on a scheduler worker thread with the task's stream current, so
//! gpukit arrays and kernels used inside it run on the task's stream and SM partition. The
//! worker takes the GIL to call it; callers waiting for a task release the GIL.

use crate::errors::cuda_error;
use gpukit_sched::{
    Admission, ByteSize, QosClass, Scheduler, SchedulerConfig, TaskContext, TaskHandle, TaskSpec,
    TaskState, TaskStats,
};
use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// A scheduler error (rejected, preempted, timed out, failed to start) as
/// `gpukit.SchedulerError` (a `RuntimeError`); a task's own Python exception comes back as
/// itself.
fn sched_err(e: gpukit_sched::Error) -> PyErr {
    match e.into_task_source() {
        Ok(source) => match source.downcast::<PyErr>() {
            Ok(pyerr) => *pyerr,
            Err(other) => PyRuntimeError::new_err(other.to_string()),
        },
        Err(e) => {
            let kind = match &e {
                gpukit_sched::Error::Cancelled { .. } => "TaskCancelled",
                gpukit_sched::Error::TimedOut { .. } => "TaskTimedOut",
                gpukit_sched::Error::Rejected { .. }
                | gpukit_sched::Error::DeadlineExpired { .. } => "TaskRejected",
                gpukit_sched::Error::Preempted { .. } => "TaskPreempted",
                gpukit_sched::Error::InvalidSpec { .. }
                | gpukit_sched::Error::UnknownPartition { .. } => {
                    return PyValueError::new_err(e.to_string())
                }
                _ => "SchedulerError",
            };
            Python::attach(
                |py| match py.import("gpukit._errors").and_then(|m| m.getattr(kind)) {
                    Ok(cls) => match cls.cast_into::<pyo3::types::PyType>() {
                        Ok(t) => PyErr::from_type(t, e.to_string()),
                        Err(_) => cuda_error(e.to_string()),
                    },
                    Err(err) => err,
                },
            )
        }
    }
}

thread_local! {
    /// The task context of the task running on this worker thread (set only while its Python
    /// function runs).
    static CURRENT: Cell<*mut TaskContext> = const { Cell::new(std::ptr::null_mut()) };
}

/// Runs `f` with the context of the running task, from inside the task's function.
fn with_current<R>(f: impl FnOnce(&mut TaskContext) -> R) -> PyResult<R> {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return Err(PyRuntimeError::new_err(
            "not inside a scheduler task (current_task() works only in the function a \
             Scheduler runs, on its thread)",
        ));
    }
    // SAFETY: CURRENT holds a pointer only while the task's closure runs on this thread (set
    // and cleared around the Python call in `submit`, restored on unwind by the guard); the
    // context outlives that call and nothing else on this thread borrows it meanwhile (the
    // closure hands it to Python only through this function, one call at a time).
    Ok(f(unsafe { &mut *p }))
}

/// The running task, seen from inside its function (``gpukit.current_task()``).
#[pyclass(module = "gpukit", name = "CurrentTask", frozen)]
pub struct CurrentTask;

#[pymethods]
impl CurrentTask {
    /// The task's id.
    #[getter]
    fn id(&self) -> PyResult<u64> {
        with_current(|c| c.id())
    }

    /// SMs granted to the task.
    #[getter]
    fn sms(&self) -> PyResult<u32> {
        with_current(|c| c.compute().sms)
    }

    /// The fraction of the GPU's SMs granted.
    #[getter]
    fn share(&self) -> PyResult<f64> {
        with_current(|c| c.compute().granted_share)
    }

    /// A safe point: raises if the task was cancelled, timed out or preempted.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        let _ = py;
        with_current(|c| c.check())?.map_err(sched_err)
    }

    /// Waits for the task's GPU work (a safe point), with the GIL released.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| with_current(|c| c.synchronize()))?
            .map_err(sched_err)
    }
}

/// ``gpukit.current_task()``: the running task (inside a function a Scheduler runs).
#[pyfunction]
pub fn current_task() -> PyResult<CurrentTask> {
    with_current(|_| ())?;
    Ok(CurrentTask)
}

/// The native handle of one submitted task (wrapped by ``gpukit.TaskFuture``).
#[pyclass(module = "gpukit._native", name = "TaskHandle", frozen)]
pub struct PyTaskHandle {
    h: Arc<TaskHandle<Py<PyAny>>>,
}

fn state_name(s: TaskState) -> &'static str {
    match s {
        TaskState::Queued => "queued",
        TaskState::Starting => "starting",
        TaskState::Running => "running",
        TaskState::Succeeded => "succeeded",
        TaskState::Failed => "failed",
        TaskState::Cancelled => "cancelled",
        TaskState::TimedOut => "timed_out",
        TaskState::Rejected => "rejected",
        TaskState::Expired => "expired",
        TaskState::Preempted => "preempted",
    }
}

fn qos_name(q: QosClass) -> &'static str {
    match q {
        QosClass::Guaranteed => "guaranteed",
        QosClass::Burstable => "burstable",
        QosClass::BestEffort => "best_effort",
    }
}

fn admission_dict<'py>(py: Python<'py>, a: &Admission) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match a {
        Admission::Admitted(g) => {
            d.set_item("status", "admitted")?;
            d.set_item("memory_committed", g.memory_committed)?;
            d.set_item("memory_limit", g.memory_limit)?;
            d.set_item("sms", g.compute.sms)?;
            d.set_item("share", g.compute.granted_share)?;
        }
        Admission::Queued { position } => {
            d.set_item("status", "queued")?;
            d.set_item("position", position)?;
        }
        Admission::Rejected {
            resource,
            requested,
            available,
        } => {
            d.set_item("status", "rejected")?;
            d.set_item(
                "resource",
                match resource {
                    gpukit_sched::Resource::Memory => "memory",
                    gpukit_sched::Resource::Compute => "compute",
                    gpukit_sched::Resource::QueueSlots => "queue",
                },
            )?;
            d.set_item("requested", requested)?;
            d.set_item("available", available)?;
            d.set_item(
                "reason",
                format!("not enough {resource}: requested {requested}, available {available}"),
            )?;
        }
    }
    Ok(d)
}

/// A task's statistics as a dict (times in seconds, memory in bytes).
fn stats_dict<'py>(py: Python<'py>, s: &TaskStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", s.id)?;
    d.set_item("name", &s.name)?;
    d.set_item("state", state_name(s.state))?;
    d.set_item("policy", qos_name(s.qos))?;
    d.set_item("partition", s.partition.clone())?;
    d.set_item("queue_position", s.queue_position)?;
    d.set_item("memory", s.memory_in_use)?;
    d.set_item("memory_peak", s.memory_peak)?;
    d.set_item("memory_committed", s.memory_committed)?;
    d.set_item("memory_limit", s.memory_limit)?;
    let share = s.compute.as_ref().map(|c| c.granted_share);
    d.set_item("bandwidth", share)?;
    d.set_item(
        "bandwidth_requested",
        s.compute.as_ref().map(|c| c.requested_share),
    )?;
    d.set_item("sms", s.granted_sms)?;
    d.set_item("sms_usable", s.usable_sms)?;
    d.set_item("sms_in_use", s.sms_in_use)?;
    d.set_item("kernels_launched", s.kernels_launched)?;
    d.set_item("throttles", s.throttles)?;
    d.set_item("throttled_time", s.throttled_ms / 1e3)?;
    d.set_item("gpu_time", s.gpu_time_ms.map(|m| m / 1e3))?;
    d.set_item("queue_time", s.wait_ms / 1e3)?;
    d.set_item("run_time", s.run_ms / 1e3)?;
    d.set_item("preempted", s.preempted)?;
    d.set_item("detached", s.detached)?;
    d.set_item("achieved_gbps", s.achieved_gbps)?;
    d.set_item("error", s.error.clone())?;
    Ok(d)
}

#[pymethods]
impl PyTaskHandle {
    /// The task id (``Scheduler.stats(id)``).
    #[getter]
    fn id(&self) -> u64 {
        self.h.id()
    }

    /// The admission decision: a dict with ``status`` ``"admitted"`` / ``"queued"`` /
    /// ``"rejected"`` and its details.
    #[getter]
    fn admission<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        admission_dict(py, self.h.admission())
    }

    /// The current state (``"queued"``, ``"running"``, ``"succeeded"``, ...).
    #[getter]
    fn state(&self) -> &'static str {
        state_name(self.h.state())
    }

    /// Whether the task has ended.
    fn done(&self) -> bool {
        self.h.is_done()
    }

    /// Asks the task to stop (at its next safe point when running); False when it had already
    /// ended.
    fn cancel(&self) -> bool {
        self.h.cancel()
    }

    /// The task's statistics.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.h.stats())
    }

    /// Calls ``fn(state, value, exception)`` once, when the task ends (at once when it has):
    /// ``value`` is the function's result, ``exception`` the exception to raise (the
    /// function's own, or a ``gpukit.SchedulerError`` subclass), one of them None.
    fn on_done(&self, callback: Py<PyAny>) {
        let h = self.h.clone();
        self.h.on_complete(move |state| {
            Python::attach(|py| {
                let (value, exc): (Py<PyAny>, Py<PyAny>) = match h.take_result() {
                    Some(Ok(v)) => (v, py.None()),
                    Some(Err(e)) => (py.None(), sched_err(e).into_value(py).into_any()),
                    None => (
                        py.None(),
                        PyRuntimeError::new_err("the task ended without a result")
                            .into_value(py)
                            .into_any(),
                    ),
                };
                if let Err(e) = callback.call1(py, (state_name(state), value, exc)) {
                    e.write_unraisable(py, Some(callback.bind(py)));
                }
            })
        });
    }

    /// Waits up to ``timeout`` seconds (None: without limit) for the task to end, with the GIL
    /// released; returns whether it has.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let d = seconds(timeout)?;
        let h = self.h.clone();
        Ok(py.detach(move || h.wait_for(d)).is_some())
    }
}

/// A timeout in seconds as a Duration (None: without limit).
fn seconds(t: Option<f64>) -> PyResult<Duration> {
    match t {
        None => Ok(Duration::MAX),
        Some(s) if s.is_nan() || s < 0.0 => Err(PyValueError::new_err(format!(
            "a timeout must be a non-negative number of seconds, got {s}"
        ))),
        Some(s) => Ok(Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)),
    }
}

/// A byte amount: an int, or a string such as ``"512MB"`` / ``"1GiB"``.
fn bytes(v: &Bound<'_, PyAny>) -> PyResult<ByteSize> {
    if let Ok(n) = v.extract::<u64>() {
        return Ok(ByteSize::from(n));
    }
    if let Ok(s) = v.extract::<String>() {
        gpukit_sched::parse_bytes(&s).map_err(|e| PyValueError::new_err(e.to_string()))?;
        return Ok(ByteSize::from(s));
    }
    Err(PyTypeError::new_err(
        "memory must be a number of bytes or a string such as \"1GB\"",
    ))
}

/// The scheduler (native part of ``gpukit.Scheduler``).
#[pyclass(module = "gpukit._native", name = "Scheduler", frozen)]
pub struct PyScheduler {
    s: Mutex<Option<Arc<Scheduler>>>,
}

impl PyScheduler {
    fn get(&self) -> PyResult<Arc<Scheduler>> {
        self.s
            .lock()
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("the scheduler has been shut down"))
    }
}

#[pymethods]
impl PyScheduler {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (device=None, workers=None, green_contexts=true, memory_capacity=None, memory_headroom=None, stop_grace=None, max_queue=None))]
    fn py_new(
        py: Python<'_>,
        device: Option<usize>,
        workers: Option<usize>,
        green_contexts: bool,
        memory_capacity: Option<&Bound<'_, PyAny>>,
        memory_headroom: Option<&Bound<'_, PyAny>>,
        stop_grace: Option<f64>,
        max_queue: Option<usize>,
    ) -> PyResult<Self> {
        let dev = crate::array::device(device)?;
        let mut cfg = SchedulerConfig::default().green_contexts(green_contexts);
        if let Some(n) = workers {
            cfg = cfg.workers(n);
        }
        if let Some(b) = memory_capacity {
            cfg = cfg.memory_capacity(bytes(b)?);
        }
        if let Some(b) = memory_headroom {
            cfg = cfg.memory_headroom(bytes(b)?);
        }
        if let Some(g) = stop_grace {
            cfg = cfg.stop_grace(seconds(Some(g))?);
        }
        if let Some(q) = max_queue {
            cfg = cfg.max_queue(q);
        }
        let s = py
            .detach(move || Scheduler::new(dev, cfg))
            .map_err(sched_err)?;
        Ok(PyScheduler {
            s: Mutex::new(Some(Arc::new(s))),
        })
    }

    /// Submits ``fn(*args)`` (see ``gpukit.Scheduler.submit``) and returns the native handle.
    #[pyo3(signature = (func, args, policy=None, memory=None, memory_limit=None, bandwidth=None, bandwidth_limit=None, priority=0, name=None, deadline=None, timeout=None, partition=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        py: Python<'_>,
        func: Py<PyAny>,
        args: Py<pyo3::types::PyTuple>,
        policy: Option<&str>,
        memory: Option<&Bound<'_, PyAny>>,
        memory_limit: Option<&Bound<'_, PyAny>>,
        bandwidth: Option<f64>,
        bandwidth_limit: Option<f64>,
        priority: i32,
        name: Option<String>,
        deadline: Option<f64>,
        timeout: Option<f64>,
        partition: Option<String>,
    ) -> PyResult<PyTaskHandle> {
        let s = self.get()?;
        let name = match name {
            Some(n) => n,
            None => func
                .bind(py)
                .getattr("__name__")
                .and_then(|n| n.extract::<String>())
                .unwrap_or_else(|_| "task".to_string()),
        };
        let mut spec = TaskSpec::new(name).priority(priority);
        let qos = match policy.unwrap_or("") {
            "" => None,
            "guaranteed" => Some(QosClass::Guaranteed),
            "burstable" => Some(QosClass::Burstable),
            "best_effort" | "besteffort" | "best-effort" => Some(QosClass::BestEffort),
            other => {
                return Err(PyValueError::new_err(format!(
                    "policy must be \"guaranteed\", \"burstable\" or \"best_effort\", got {other:?}"
                )))
            }
        };
        let mem = memory.map(bytes).transpose()?;
        let mem_limit = memory_limit.map(bytes).transpose()?;
        match qos {
            Some(QosClass::Guaranteed) => {
                // request = limit, as Kubernetes' Guaranteed
                let m =
                    mem.ok_or_else(|| PyValueError::new_err("a guaranteed task needs memory="))?;
                let b = bandwidth
                    .ok_or_else(|| PyValueError::new_err("a guaranteed task needs bandwidth="))?;
                if mem_limit.is_some() || bandwidth_limit.is_some() {
                    return Err(PyValueError::new_err(
                        "a guaranteed task's limits equal its requests: drop memory_limit / bandwidth_limit",
                    ));
                }
                spec = spec.memory(m.clone(), m).compute(b, b);
            }
            Some(QosClass::BestEffort) => {
                if mem.is_some() || bandwidth.is_some() {
                    return Err(PyValueError::new_err(
                        "a best_effort task requests nothing: drop memory= and bandwidth= (limits are allowed)",
                    ));
                }
                if let Some(l) = mem_limit {
                    spec = spec.memory_limit(l);
                }
                if let Some(l) = bandwidth_limit {
                    spec = spec.compute_limit(l);
                }
            }
            _ => {
                if let Some(m) = mem {
                    spec = spec.memory_request(m);
                }
                if let Some(l) = mem_limit {
                    spec = spec.memory_limit(l);
                }
                if let Some(b) = bandwidth {
                    spec = spec.compute_request(b);
                }
                if let Some(l) = bandwidth_limit {
                    spec = spec.compute_limit(l);
                }
            }
        }
        if let Some(q) = qos {
            spec = spec.qos(q);
        }
        if let Some(d) = deadline {
            spec = spec.deadline(seconds(Some(d))?);
        }
        if let Some(t) = timeout {
            spec = spec.timeout(seconds(Some(t))?);
        }
        if let Some(p) = partition {
            spec = spec.partition(p);
        }
        let job = move |ctx: &mut TaskContext| -> Result<Py<PyAny>, PyErr> {
            struct Clear;
            impl Drop for Clear {
                fn drop(&mut self) {
                    CURRENT.with(|c| c.set(std::ptr::null_mut()));
                }
            }
            CURRENT.with(|c| c.set(ctx as *mut TaskContext));
            let _clear = Clear;
            Python::attach(|py| func.call1(py, args.bind(py)))
        };
        let h = py.detach(|| s.submit(job, spec)).map_err(sched_err)?;
        Ok(PyTaskHandle { h: Arc::new(h) })
    }

    /// Statistics of one task (live or recently ended) as a dict, or None.
    fn stats<'py>(&self, py: Python<'py>, task_id: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        let s = self.get()?;
        s.task_stats(task_id)
            .map(|t| stats_dict(py, &t))
            .transpose()
    }

    /// Scheduler-wide statistics as a dict.
    fn global_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.get()?;
        let st = s.stats();
        let d = PyDict::new(py);
        d.set_item("mechanism", &st.mechanism)?;
        d.set_item("memory_capacity", st.memory_capacity)?;
        d.set_item("memory_outside_tasks", st.memory_outside_tasks)?;
        d.set_item("submitted", st.submitted)?;
        let ended = PyDict::new(py);
        for (state, n) in st.ended.iter() {
            ended.set_item(state_name(*state), n)?;
        }
        d.set_item("ended", ended)?;
        d.set_item("detached_running", st.detached_running)?;
        d.set_item("evictions", st.evictions_total)?;
        d.set_item("kernels_launched", st.kernels_launched)?;
        d.set_item("green_contexts_created", st.green_contexts_created)?;
        let tasks = st
            .tasks
            .iter()
            .map(|t| stats_dict(py, t))
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("tasks", tasks)?;
        Ok(d)
    }

    /// The scheduler's metrics in the Prometheus text format.
    fn metrics(&self) -> PyResult<String> {
        Ok(self.get()?.metrics())
    }

    /// How compute shares are enforced (green contexts, or paced time shares and why).
    #[getter]
    fn mechanism(&self) -> PyResult<String> {
        Ok(self.get()?.mechanism().to_string())
    }

    /// Stops accepting tasks, cancels queued ones and waits up to ``timeout`` seconds for
    /// running ones; returns a summary dict. Later calls do nothing.
    #[pyo3(signature = (timeout=None))]
    fn shutdown<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let Some(s) = self.s.lock().take() else {
            d.set_item("already", true)?;
            return Ok(d);
        };
        let t = seconds(timeout.or(Some(30.0)))?;
        let report = py.detach(move || match Arc::try_unwrap(s) {
            Ok(s) => Ok(s.shutdown(t)),
            Err(still_shared) => Err(still_shared),
        });
        match report {
            Ok(r) => {
                d.set_item("report", format!("{r:?}"))?;
                Ok(d)
            }
            Err(s) => {
                *self.s.lock() = Some(s);
                Err(PyRuntimeError::new_err(
                    "the scheduler is in use by another thread's call; try again",
                ))
            }
        }
    }
}

/// Registers the scheduler classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyScheduler>()?;
    m.add_class::<PyTaskHandle>()?;
    m.add_class::<CurrentTask>()?;
    m.add_function(wrap_pyfunction!(current_task, m)?)?;
    Ok(())
}
