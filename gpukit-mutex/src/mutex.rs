//! [`GpuMutex`] and its builder.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::anchors::{self, Declared};
use crate::cancel::CancelToken;
use crate::config::{self, Config};
use crate::devices::{self, DeviceName, DeviceSource, Namespace, VisibleSpec};
use crate::error::{Error, Result};
use crate::guard::GpuGuard;
use crate::lockdir::{Create, LockDir};
use crate::proc;
use crate::session::Session;
use crate::status::{self, Status};
use crate::wait::{SignalMode, Waiter};

/// Builder for [`GpuMutex`]. Values set here win over the environment variables.
#[derive(Debug, Clone, Default)]
pub struct GpuMutexBuilder {
    visible: Option<VisibleSpec>,
    device_source: Option<DeviceSource>,
    num_devices: Option<usize>,
    lock_dir: Option<PathBuf>,
    timeout: Option<Option<Duration>>,
    join_timeout: Option<Duration>,
    backfill: Option<bool>,
    allow_network_fs: Option<bool>,
    cancel: Option<CancelToken>,
    interrupt_on_signals: bool,
    ignore_env: bool,
}

impl GpuMutexBuilder {
    /// Devices this process may be granted, in preference order: indices in this process's
    /// CUDA numbering (which an inherited `CUDA_VISIBLE_DEVICES` defines; see
    /// [`crate::devices`]).
    pub fn visible_devices(mut self, devices: impl IntoIterator<Item = u32>) -> Self {
        self.visible = Some(VisibleSpec::Names(
            devices.into_iter().map(DeviceName::Index).collect(),
        ));
        self
    }

    /// Devices this process may be granted, written as `GPUMUTEX_VISIBLE_DEVICES` is: indices,
    /// `GPU-…`/`MIG-…` UUIDs (or unique prefixes), a mix, or `all` (see
    /// [`crate::parse_visible`]).
    pub fn visible_device_list(mut self, list: &str) -> Result<Self> {
        self.visible = Some(devices::parse_visible(list)?);
        Ok(self)
    }

    /// Where the GPUs' identities come from (default: `GPUMUTEX_DEVICE_SOURCE`, else
    /// [`DeviceSource::Auto`]); see [`crate::devices`].
    pub fn device_source(mut self, source: DeviceSource) -> Self {
        self.device_source = Some(source);
        self
    }

    /// Default request size for [`GpuMutex::lock`] (default: `GPUMUTEX_NUM_DEVICES`, else 1).
    pub fn num_devices(mut self, n: usize) -> Self {
        self.num_devices = Some(n);
        self
    }

    /// Lock directory (default: `GPUMUTEX_LOCK_DIR`, else `/tmp/libgpumutex`).
    pub fn lock_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.lock_dir = Some(dir.into());
        self
    }

    /// Default wait limit for [`GpuMutex::acquire`] and [`GpuMutex::lock`]
    /// (default: `GPUMUTEX_TIMEOUT`, else wait forever).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Some(timeout));
        self
    }

    /// Wait without limit, whatever `GPUMUTEX_TIMEOUT` says.
    pub fn no_timeout(mut self) -> Self {
        self.timeout = Some(None);
        self
    }

    /// How long one process may hold the join lock (normally held for microseconds per
    /// decision) before a waiting acquisition fails with [`Error::JoinLockStalled`], which
    /// names it (default: `GPUMUTEX_JOIN_TIMEOUT`, else
    /// [`crate::config::DEFAULT_JOIN_TIMEOUT`]). [`Duration::MAX`] waits without limit.
    pub fn join_timeout(mut self, limit: Duration) -> Self {
        self.join_timeout = Some(limit);
        self
    }

    /// Accept a lock directory on a network file system (NFS, SMB, Lustre, GPFS, CephFS, 9p,
    /// network FUSE; refused by default with [`Error::NetworkLockDir`]; default:
    /// `GPUMUTEX_ALLOW_NETWORK_FS`, else off). Only right when every process that uses the
    /// directory runs on this one machine: the kernel's locks are not shared between machines.
    pub fn allow_network_fs(mut self, on: bool) -> Self {
        self.allow_network_fs = Some(on);
        self
    }

    /// Let this process's requests backfill (see [`crate::queue`]; default: `GPUMUTEX_BACKFILL`,
    /// else off).
    pub fn backfill(mut self, on: bool) -> Self {
        self.backfill = Some(on);
        self
    }

    /// A token that cancels every wait of the built mutex.
    pub fn cancel_token(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// End waits with [`Error::Interrupted`] when a signal the program handles arrives
    /// (`SIGINT`, `SIGTERM`, `SIGHUP`, `SIGQUIT`, `SIGALRM`, `SIGUSR1` or `SIGUSR2` with a handler
    /// installed; default off). The handler runs as usual; nothing is granted. This is how a
    /// program that waits inside a library call (the preload's `cuInit`) stays responsive to
    /// Ctrl-C. See `src/wait.rs` for how signals are kept from slipping between two sleeps.
    pub fn interrupt_on_signals(mut self, on: bool) -> Self {
        self.interrupt_on_signals = on;
        self
    }

    /// Do not read any `GPUMUTEX_*` configuration variable (builder values and defaults only).
    pub fn ignore_env(mut self) -> Self {
        self.ignore_env = true;
        self
    }

    fn env(&self, name: &'static str) -> Result<Option<String>> {
        if self.ignore_env {
            Ok(None)
        } else {
            config::env_var(name)
        }
    }

    /// Validates everything, then opens the lock directory, creating it if it is missing (the
    /// built-in default with mode `1777`, a directory the caller named with mode `0700`) and
    /// refusing one that another user could change ([`Error::UntrustedLockDir`]). Every other
    /// setting is checked first, so a bad value leaves the file system untouched.
    pub fn build(self) -> Result<GpuMutex> {
        let spec = match &self.visible {
            Some(VisibleSpec::Names(n)) if n.is_empty() => {
                return Err(Error::InvalidDeviceList {
                    input: String::new(),
                    reason: "the list is empty".into(),
                })
            }
            Some(v) => v.clone(),
            None => match self.env(config::ENV_VISIBLE_DEVICES)? {
                Some(s) => devices::parse_visible(&s)?,
                None => return Err(Error::NoVisibleDevices),
            },
        };
        if let VisibleSpec::Names(n) = &spec {
            let text: Vec<String> = n.iter().map(|d| d.to_string()).collect();
            if let Some(DeviceName::Index(i)) = n
                .iter()
                .find(|d| matches!(d, DeviceName::Index(i) if *i > config::MAX_DEVICE_INDEX))
            {
                return Err(Error::InvalidDeviceList {
                    input: text.join(","),
                    reason: format!(
                        "device {i} is out of range (max {})",
                        config::MAX_DEVICE_INDEX
                    ),
                });
            }
            let mut sorted = n.clone();
            sorted.sort_by_key(|d| d.to_string());
            if sorted.windows(2).any(|w| w[0] == w[1]) {
                return Err(Error::InvalidDeviceList {
                    input: text.join(","),
                    reason: "a device is listed twice".into(),
                });
            }
        }
        let num_devices = match self.num_devices {
            Some(0) => return Err(Error::ZeroDevices),
            Some(n) => n,
            None => match self.env(config::ENV_NUM_DEVICES)? {
                Some(s) => config::parse_num_devices(config::ENV_NUM_DEVICES, &s)?,
                None => 1,
            },
        };
        if let VisibleSpec::Names(n) = &spec {
            if num_devices > n.len() {
                return Err(Error::TooManyDevices {
                    requested: num_devices,
                    visible: n.len(),
                });
            }
        }
        let source = match &self.device_source {
            Some(s) => s.clone(),
            None => match self.env(devices::ENV_DEVICE_SOURCE)? {
                Some(s) => DeviceSource::parse(&s)?,
                None => DeviceSource::Auto,
            },
        };
        let timeout = match self.timeout {
            Some(t) => t,
            None => match self.env(config::ENV_TIMEOUT)? {
                Some(s) if !s.trim().is_empty() => {
                    Some(config::parse_timeout_secs(config::ENV_TIMEOUT, &s)?)
                }
                _ => None,
            },
        };
        let join_timeout = match self.join_timeout {
            Some(t) => t,
            None => match self.env(config::ENV_JOIN_TIMEOUT)? {
                Some(s) if !s.trim().is_empty() => {
                    config::parse_timeout_secs(config::ENV_JOIN_TIMEOUT, &s)?
                }
                _ => config::DEFAULT_JOIN_TIMEOUT,
            },
        };
        let backfill = match self.backfill {
            Some(b) => b,
            None => match self.env(config::ENV_BACKFILL)? {
                Some(s) => config::parse_bool(config::ENV_BACKFILL, &s)?,
                None => false,
            },
        };
        let allow_network_fs = match self.allow_network_fs {
            Some(b) => b,
            None => match self.env(config::ENV_ALLOW_NETWORK_FS)? {
                Some(s) => config::parse_bool(config::ENV_ALLOW_NETWORK_FS, &s)?,
                None => false,
            },
        };
        let (lock_dir, is_default) = match &self.lock_dir {
            Some(d) => (d.clone(), false),
            None => match self.env(config::ENV_LOCK_DIR)? {
                Some(s) => (PathBuf::from(s), false),
                None => (PathBuf::from(config::DEFAULT_LOCK_DIR), true),
            },
        };
        let declared = if self.ignore_env {
            None
        } else {
            anchors::declared(|k| std::env::var(k).ok())?
        };
        // The devices: discovered, then read in this process's namespace (CUDA_VISIBLE_DEVICES
        // and friends are CUDA's variables, read whatever `ignore_env` says).
        let found = devices::discover(&source)?;
        let namespace = Namespace::new(found.as_ref(), &|k| std::env::var(k).ok())?;
        let visible = namespace.resolve(&spec)?;
        if num_devices > visible.len() {
            return Err(Error::TooManyDevices {
                requested: num_devices,
                visible: visible.len(),
            });
        }
        let create = if is_default {
            Create::SharedDefault
        } else {
            Create::Private
        };
        let dir = Arc::new(LockDir::open_checked(&lock_dir, create, allow_network_fs)?);
        Ok(GpuMutex {
            cfg: Config {
                visible_devices: visible,
                num_devices,
                lock_dir: dir.path().to_path_buf(),
                lock_dir_is_default: is_default,
                timeout,
                backfill,
                interrupt_on_signals: self.interrupt_on_signals,
                join_timeout,
            },
            dir,
            cancel: self.cancel,
            declared,
            namespace: Arc::new(namespace),
        })
    }
}

/// Fair, crash-safe, exclusive access to GPU devices for a process tree. See the crate docs.
#[derive(Debug, Clone)]
pub struct GpuMutex {
    pub(crate) cfg: Config,
    pub(crate) dir: Arc<LockDir>,
    cancel: Option<CancelToken>,
    /// The job this process declares through its environment (see `anchors.rs`).
    pub(crate) declared: Option<Declared>,
    /// How this process numbers devices.
    pub(crate) namespace: Arc<Namespace>,
}

/// How long [`GpuMutex::try_acquire`] waits for the join lock (normally held for microseconds).
const TRY_JOIN_LIMIT: Duration = Duration::from_secs(1);

impl GpuMutex {
    /// A builder; values set on it win over the environment.
    pub fn builder() -> GpuMutexBuilder {
        GpuMutexBuilder::default()
    }

    /// Configuration from the environment only (`GPUMUTEX_VISIBLE_DEVICES` is required).
    pub fn from_env() -> Result<Self> {
        Self::builder().build()
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Acquires the configured number of devices (`num_devices`), waiting up to the configured
    /// timeout (forever if none).
    pub fn lock(&self) -> Result<GpuGuard> {
        self.acquire(self.cfg.num_devices)
    }

    /// Acquires `n` devices, waiting in FIFO order up to the configured timeout (forever if
    /// none). Returns [`Error::Timeout`] at the deadline, [`Error::Cancelled`] if the builder's
    /// cancel token fires and [`Error::Interrupted`] on a signal in signal mode.
    pub fn acquire(&self, n: usize) -> Result<GpuGuard> {
        self.acquire_with(n, self.cfg.timeout, None)
    }

    /// Acquires `n` devices, waiting at most `timeout` (any value: one too large to be a
    /// deadline, such as [`Duration::MAX`], waits without limit).
    pub fn acquire_timeout(&self, n: usize, timeout: Duration) -> Result<GpuGuard> {
        self.acquire_with(n, Some(timeout), None)
    }

    /// Takes `n` devices if that is possible right now without overtaking anybody in the
    /// queue (or by sharing an ancestor's claim); `Ok(None)` otherwise. Never queues; waits only
    /// for the join lock, at most a second ([`Error::Timeout`] if somebody holds it longer).
    pub fn try_acquire(&self, n: usize) -> Result<Option<GpuGuard>> {
        self.check_request(n)?;
        let cancels: Vec<CancelToken> = self.cancel.iter().cloned().collect();
        let started = Instant::now();
        let signals = self.signal_mode()?;
        let waiter = Waiter {
            started,
            deadline: started.checked_add(TRY_JOIN_LIMIT),
            requested: n,
            cancels: &cancels,
            signals: signals.as_ref(),
        };
        Session::new(self)?.try_once(n, &waiter)
    }

    /// Acquires `n` devices, waiting at most `timeout` (`None`: forever), cancellable through
    /// `cancel` as well as through the builder's token.
    pub fn acquire_with(
        &self,
        n: usize,
        timeout: Option<Duration>,
        cancel: Option<&CancelToken>,
    ) -> Result<GpuGuard> {
        self.check_request(n)?;
        let started = Instant::now();
        let cancels: Vec<CancelToken> = [self.cancel.clone(), cancel.cloned()]
            .into_iter()
            .flatten()
            .collect();
        if cancels.iter().any(|c| c.is_cancelled()) {
            return Err(Error::Cancelled);
        }
        let signals = self.signal_mode()?;
        let waiter = Waiter {
            started,
            // A deadline past what `Instant` can represent is no deadline.
            deadline: timeout.and_then(|t| started.checked_add(t)),
            requested: n,
            cancels: &cancels,
            signals: signals.as_ref(),
        };
        Session::new(self)?.acquire(n, &waiter)
    }

    fn signal_mode(&self) -> Result<Option<SignalMode>> {
        if self.cfg.interrupt_on_signals {
            SignalMode::enter().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Who holds each visible device (and any other device a live claim names) and who waits,
    /// in queue order.
    pub fn status(&self) -> Result<Status> {
        status::snapshot(&self.dir, &self.cfg.visible_devices, Some(&self.namespace))
    }

    fn check_request(&self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(Error::ZeroDevices);
        }
        if n > self.cfg.visible_devices.len() {
            return Err(Error::TooManyDevices {
                requested: n,
                visible: self.cfg.visible_devices.len(),
            });
        }
        Ok(())
    }
}

/// The `GPUMUTEX_JOB_ROOT` value naming the calling process (`<pid>:<starttime>`). A launcher
/// that exports it makes its whole subtree share the first claim any of its descendants takes
/// (sibling ranks that are not descendants of each other); the value is honoured only by true
/// descendants of the same user.
pub fn job_root_env_value() -> Option<String> {
    proc::self_id().map(|id| id.to_text())
}
