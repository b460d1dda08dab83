//! Configuration: the seed's environment variables, overridden by builder values.

use std::path::PathBuf;
use std::time::Duration;

use crate::devices::Device;
use crate::error::{Error, Result};

/// Comma-separated devices to manage, e.g. `0,2,3` (seed-compatible): indices in this process's
/// CUDA numbering, `GPU-…`/`MIG-…` UUIDs, or `all` (see [`crate::devices`]).
pub const ENV_VISIBLE_DEVICES: &str = "GPUMUTEX_VISIBLE_DEVICES";
/// How many devices one process tree needs (default 1; seed-compatible).
pub const ENV_NUM_DEVICES: &str = "GPUMUTEX_NUM_DEVICES";
/// Directory for lock files and the wait queue (default [`DEFAULT_LOCK_DIR`]; seed-compatible).
pub const ENV_LOCK_DIR: &str = "GPUMUTEX_LOCK_DIR";
/// gpukit extension: default wait limit in seconds (decimal allowed, see
/// [`parse_timeout_secs`]); unset or empty = forever.
pub const ENV_TIMEOUT: &str = "GPUMUTEX_TIMEOUT";
/// gpukit extension: how long (seconds, as [`ENV_TIMEOUT`]) to wait for the join lock while one
/// process holds it, before the acquisition fails with [`crate::Error::JoinLockStalled`]
/// naming it (default [`DEFAULT_JOIN_TIMEOUT`]). Applies even to acquisitions that wait forever
/// for devices: a normal decision holds the join lock for microseconds.
pub const ENV_JOIN_TIMEOUT: &str = "GPUMUTEX_JOIN_TIMEOUT";
/// Default of [`ENV_JOIN_TIMEOUT`].
pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// gpukit extension: `1`/`true`/`yes` accepts a lock directory on a network file system (see
/// [`crate::GpuMutexBuilder::allow_network_fs`]; refused by default).
pub const ENV_ALLOW_NETWORK_FS: &str = "GPUMUTEX_ALLOW_NETWORK_FS";
/// gpukit extension: `1`/`true`/`yes` lets this process backfill (see [`crate::queue`]).
pub const ENV_BACKFILL: &str = "GPUMUTEX_BACKFILL";
/// gpukit extension: `<pid>:<starttime>` of a job root (a launcher). Processes of one user that
/// carry the same job root share the first claim any of them takes (sibling ranks). Only
/// honoured when that process really is an ancestor of the caller. See
/// [`crate::job_root_env_value`]; ranks of torchrun, MPI and Slurm launchers are recognised
/// without it (crate docs, "Process trees").
pub const ENV_JOB_ROOT: &str = "GPUMUTEX_JOB_ROOT";
/// The seed's default lock directory.
pub const DEFAULT_LOCK_DIR: &str = "/tmp/libgpumutex";

/// Largest accepted device index (CUDA device ordinals are small; this catches typos).
pub const MAX_DEVICE_INDEX: u32 = 4095;

/// Parses a list of device *indices* such as `0,2,3` (spaces around items allowed); see
/// [`crate::parse_visible`] for lists that may also hold UUIDs or `all`. Rejects empty lists,
/// empty items, non-numbers, negative numbers, indices above [`MAX_DEVICE_INDEX`] and
/// duplicates. The order is kept: it is the preference order for grants.
pub fn parse_device_list(input: &str) -> Result<Vec<u32>> {
    let err = |reason: String| Error::InvalidDeviceList {
        input: input.to_string(),
        reason,
    };
    if input.trim().is_empty() {
        return Err(err("the list is empty".into()));
    }
    let mut out: Vec<u32> = Vec::new();
    for (i, item) in input.split(',').enumerate() {
        let item = item.trim();
        if item.is_empty() {
            return Err(err(format!("item {} is empty", i + 1)));
        }
        if !item.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(format!(
                "item {item:?} is not a non-negative integer device index"
            )));
        }
        let dev: u32 = item
            .parse()
            .ok()
            .filter(|d| *d <= MAX_DEVICE_INDEX)
            .ok_or_else(|| {
                err(format!(
                    "device {item} is out of range (max {MAX_DEVICE_INDEX})"
                ))
            })?;
        if out.contains(&dev) {
            return Err(err(format!("device {dev} is listed twice")));
        }
        out.push(dev);
    }
    Ok(out)
}

/// Parses a positive device count.
pub(crate) fn parse_num_devices(name: &'static str, value: &str) -> Result<usize> {
    let v = value.trim();
    match v.parse::<usize>() {
        Ok(0) => Err(Error::ZeroDevices),
        Ok(n) => Ok(n),
        Err(_) => Err(Error::InvalidConfig {
            name,
            value: value.to_string(),
            reason: "expected a positive integer".into(),
        }),
    }
}

/// Parses a timeout in seconds: a finite, non-negative decimal number (`0.5`, `600`, `1e3`).
/// `NaN`, infinities, negative numbers and values of 2^64 seconds or more are refused. Values
/// too large to be a deadline on this machine (such as `1e19`) are accepted and mean "wait
/// forever": no timeout value makes a wait panic.
pub fn parse_timeout_secs(name: &'static str, value: &str) -> Result<Duration> {
    let bad = |reason: &str| Error::InvalidConfig {
        name,
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let secs: f64 = value
        .trim()
        .parse()
        .map_err(|_| bad("expected a number of seconds"))?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad(
            "expected a finite, non-negative number of seconds (leave it unset to wait forever)",
        ));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| bad("out of range (at most 1.8e19 seconds; leave it unset to wait forever)"))
}

pub(crate) fn parse_bool(name: &'static str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(Error::InvalidConfig {
            name,
            value: value.to_string(),
            reason: "expected 1/0, true/false, yes/no or on/off".into(),
        }),
    }
}

/// Reads an environment variable; non-UTF-8 values are an error, unset is `None`.
pub(crate) fn env_var(name: &'static str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::InvalidConfig {
            name,
            value: v.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".into(),
        }),
    }
}

/// A fully validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Devices this process may be granted, in preference order.
    pub visible_devices: Vec<Device>,
    /// Default request size for [`crate::GpuMutex::lock`].
    pub num_devices: usize,
    /// Lock directory (absolute; its parent with symbolic links resolved).
    pub lock_dir: PathBuf,
    /// True when `lock_dir` is the built-in default (only then may it be created with mode 1777).
    pub lock_dir_is_default: bool,
    /// Default wait limit (`None` = wait forever).
    pub timeout: Option<Duration>,
    /// Whether this process's requests may backfill.
    pub backfill: bool,
    /// Whether a signal the program handles ends a wait with [`crate::Error::Interrupted`].
    pub interrupt_on_signals: bool,
    /// How long one process may hold the join lock before a waiting acquisition gives up
    /// ([`crate::Error::JoinLockStalled`]).
    pub join_timeout: Duration,
}
