//! Device locks for Python (gpukit-mutex): the native part of `gpukit.mutex.acquire` and the
//! `gpumutex-run` / `gpukit-offload` command lines (the crates' own `cli` modules).
//!
//! A wait for devices runs on a helper thread while the calling thread, with the GIL released
//! between checks, looks at Python's signal flag every 50 ms: Ctrl-C cancels the wait through
//! the crate's `CancelToken` (the wait ends and removes its ticket at once) and raises
//! `KeyboardInterrupt` within a fraction of a second.

use gpukit_mutex::{CancelToken, GpuGuard, GpuMutex};
use parking_lot::Mutex;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ffi::OsString;
use std::time::Duration;

/// The Python exception for a lock error.
fn mutex_err(e: gpukit_mutex::Error) -> PyErr {
    use gpukit_mutex::Error as E;
    let msg = e.to_string();
    match e {
        E::Timeout { .. } => PyTimeoutError::new_err(msg),
        E::Io { .. } | E::LockDir { .. } | E::UntrustedLockDir { .. } => PyOSError::new_err(msg),
        E::Cancelled | E::Interrupted => PyRuntimeError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// Devices held by this process (and shared with its children): the native part of
/// ``gpukit.mutex.acquire``'s context manager.
#[pyclass(module = "gpukit._native", name = "DeviceLease", frozen)]
pub struct DeviceLease {
    guard: Mutex<Option<GpuGuard>>,
}

#[pymethods]
impl DeviceLease {
    /// The granted device indices (in the lock's namespace).
    #[getter]
    fn devices(&self) -> PyResult<Vec<u32>> {
        self.with(|g| g.devices().to_vec())
    }

    /// The granted devices' physical identities: ``(index, key, uuid)`` (the key is what the
    /// lock names: the UUID where the driver tells it, else the physical index).
    #[getter]
    fn granted(&self) -> PyResult<Vec<(u32, String, Option<String>)>> {
        self.with(|g| {
            g.granted()
                .iter()
                .map(|d| (d.index, d.key.clone(), d.uuid.clone()))
                .collect()
        })
    }

    /// ``CUDA_VISIBLE_DEVICES`` for programs using the granted devices.
    #[getter]
    fn cuda_visible_devices(&self) -> PyResult<String> {
        self.with(|g| g.cuda_visible_devices())
    }

    /// The environment a child process needs (``CUDA_VISIBLE_DEVICES`` and the ``GPUMUTEX_*``
    /// variables under which a gpukit-mutex user in it shares this claim).
    #[getter]
    fn env<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.with(|g| g.child_env())? {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Descriptors a child keeps the claim alive with after this process ends: pass them with
    /// ``subprocess.Popen(..., pass_fds=lease.fds)``.
    #[getter]
    fn fds(&self) -> PyResult<Vec<i32>> {
        self.with(|g| g.inheritable_fds())
    }

    /// Whether this lease shares a claim an ancestor process holds.
    #[getter]
    fn is_shared(&self) -> PyResult<bool> {
        self.with(|g| g.is_shared())
    }

    /// Whether the devices are still held.
    #[getter]
    fn held(&self) -> bool {
        self.guard.lock().is_some()
    }

    /// Releases the devices (the next waiter starts within about a millisecond). Later calls
    /// do nothing.
    fn release(&self) {
        if let Some(g) = self.guard.lock().take() {
            g.release();
        }
    }
}

impl DeviceLease {
    fn with<R>(&self, f: impl FnOnce(&GpuGuard) -> R) -> PyResult<R> {
        self.guard
            .lock()
            .as_ref()
            .map(f)
            .ok_or_else(|| PyRuntimeError::new_err("the devices have been released"))
    }
}

/// Waits for ``num_devices`` devices (see ``gpukit.mutex.acquire``).
#[pyfunction]
#[pyo3(signature = (num_devices=None, visible_devices=None, lock_dir=None, timeout=None, backfill=None))]
pub fn acquire(
    py: Python<'_>,
    num_devices: Option<usize>,
    visible_devices: Option<String>,
    lock_dir: Option<std::path::PathBuf>,
    timeout: Option<f64>,
    backfill: Option<bool>,
) -> PyResult<DeviceLease> {
    let mut b = GpuMutex::builder();
    if let Some(v) = visible_devices {
        b = b.visible_device_list(&v).map_err(mutex_err)?;
    }
    if let Some(n) = num_devices {
        b = b.num_devices(n);
    }
    if let Some(d) = lock_dir {
        b = b.lock_dir(d);
    }
    if let Some(on) = backfill {
        b = b.backfill(on);
    }
    let timeout = match timeout {
        None => None,
        Some(t) if t.is_nan() || t < 0.0 => {
            return Err(PyValueError::new_err(format!(
                "timeout must be a non-negative number of seconds, got {t}"
            )))
        }
        Some(t) => Some(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX)),
    };
    let m = b.build().map_err(mutex_err)?;
    let n = num_devices.unwrap_or(m.config().num_devices);
    let token = CancelToken::new().map_err(mutex_err)?;
    let (tx, rx) = crossbeam::channel::bounded(1);
    let t2 = token.clone();
    let waiter = std::thread::Builder::new()
        .name("gpukit-mutex-wait".into())
        .spawn(move || {
            let r = m.acquire_with(n, timeout, Some(&t2));
            let _ = tx.send(r);
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start the waiting thread: {e}")))?;
    loop {
        match py.detach(|| rx.recv_timeout(Duration::from_millis(50))) {
            Ok(r) => {
                let _ = waiter.join();
                return r
                    .map(|g| DeviceLease {
                        guard: Mutex::new(Some(g)),
                    })
                    .map_err(mutex_err);
            }
            Err(crossbeam::channel::RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    // Ctrl-C (or any signal handler that raised): end the wait, let it remove
                    // its ticket, and give a lease it may have won in the meantime back
                    token.cancel();
                    if let Ok(Ok(g)) = py.detach(|| rx.recv()) {
                        g.release();
                    }
                    let _ = waiter.join();
                    return Err(e);
                }
            }
            Err(crossbeam::channel::RecvTimeoutError::Disconnected) => {
                let _ = waiter.join();
                return Err(PyRuntimeError::new_err(
                    "the waiting thread ended without an answer",
                ));
            }
        }
    }
}

/// The ``gpumutex-run`` command line (argv with the program name first); returns the exit
/// status.
#[pyfunction]
pub fn gpumutex_main(py: Python<'_>, argv: Vec<OsString>) -> i32 {
    py.detach(move || gpukit_mutex::cli::main_with_args(argv))
}

/// The ``gpukit-offload`` command line (argv with the program name first); ``preload`` is the
/// shim library's path. Returns the exit status.
#[pyfunction]
#[pyo3(signature = (argv, preload=None))]
pub fn offload_main(
    py: Python<'_>,
    argv: Vec<OsString>,
    preload: Option<std::path::PathBuf>,
) -> i32 {
    py.detach(move || gpukit_offload::cli::main_with_args(argv, preload))
}

/// Registers the lock functions and the command lines.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DeviceLease>()?;
    m.add_function(wrap_pyfunction!(acquire, m)?)?;
    m.add_function(wrap_pyfunction!(gpumutex_main, m)?)?;
    m.add_function(wrap_pyfunction!(offload_main, m)?)?;
    Ok(())
}
