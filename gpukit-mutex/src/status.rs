//! Who holds what, who waits. A status report only reads: it takes no lock and changes
//! nothing, so it can neither block nor disturb a grant, whatever is in the directory.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::devices::{self, Device, DeviceName, DeviceSource, Namespace, VisibleSpec};
use crate::error::{Error, Result};
use crate::joinlock;
use crate::lockdir::LockDir;
use crate::probe::Prober;
use crate::queue::TicketState;
use crate::records::ClaimKind;

/// A process holding (or sharing) a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// Process id, as its record says.
    pub pid: u32,
    /// The uid that owns its record file.
    pub uid: u32,
    /// Its command line (when it took the claim).
    pub cmd: String,
    /// When it took the claim.
    pub since: SystemTime,
    /// True if it shares another process's claim rather than having been granted it.
    pub shared: bool,
    /// True if the record's owner and lock agree with it (see the crate docs); an unverified
    /// live record still makes its devices busy.
    pub verified: bool,
}

/// One device's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStatus {
    /// What is locked: the device's UUID, or without device information its physical index
    /// (see [`crate::devices`]).
    pub device: String,
    /// Its index in the reporting process's CUDA numbering, when it has one there.
    pub index: Option<u32>,
    /// Whether a live claim names it.
    pub busy: bool,
    /// The live claims that name it, verified primary holders first.
    pub holders: Vec<HolderInfo>,
}

/// One waiting process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterInfo {
    /// Process id.
    pub pid: u32,
    /// The uid that owns its ticket.
    pub uid: u32,
    /// Its command line.
    pub cmd: String,
    /// Devices requested.
    pub n: usize,
    /// Devices (keys) it may be given.
    pub candidates: Vec<String>,
    /// Whether it may backfill.
    pub backfill: bool,
    /// When it joined the queue.
    pub since: SystemTime,
    /// Its process is stopped or frozen: it keeps its place but holds up nobody meanwhile.
    pub suspended: bool,
}

/// The process that held the join lock when a status report was taken (normally for
/// microseconds per decision; one that stays there, e.g. stopped, holds up every acquisition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinLockHolder {
    /// Its pid, when this process can see it (not in another pid namespace).
    pub pid: Option<u32>,
    /// Its effective uid, when readable.
    pub uid: Option<u32>,
    /// What it is doing: `running`, `sleeping`, `stopped`, `frozen (its cgroup is frozen)`, ...
    pub state: String,
    /// Its command line.
    pub cmd: String,
}

impl fmt::Display for JoinLockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            None => write!(
                f,
                "a process this one cannot see (in another pid namespace)"
            ),
            Some(pid) => {
                write!(f, "pid {pid}")?;
                if let Some(uid) = self.uid {
                    write!(f, " uid {uid}")?;
                }
                write!(f, " ({})", self.state)?;
                if !self.cmd.is_empty() {
                    write!(f, ": {}", self.cmd)?;
                }
                Ok(())
            }
        }
    }
}

/// A snapshot of the lock directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The directory.
    pub lock_dir: PathBuf,
    /// Why the directory is not trusted (then acquisitions refuse it), if it is not.
    pub untrusted: Option<String>,
    /// Every device that is visible to the caller (first, in the caller's numbering) or named
    /// by a live claim.
    pub devices: Vec<DeviceStatus>,
    /// Live waiters, in queue order (head first).
    pub waiters: Vec<WaiterInfo>,
    /// Files under record names that were ignored: dead, unreadable, too large, not regular
    /// files, or contradicted by their name, owner or lock.
    pub ignored: usize,
    /// Owners of ignored files, as `(uid, count)`, most first (where the owner is known).
    pub ignored_by: Vec<(u32, usize)>,
    /// Who held the join lock when the report was taken, if anybody.
    pub join_lock: Option<JoinLockHolder>,
}

/// How long a status pass may take (a directory flooded with entries is cut short).
const STATUS_LIMIT: Duration = Duration::from_secs(10);

/// Reads the status of `lock_dir` without a [`crate::GpuMutex`]; `extra_devices` (indices in
/// this process's CUDA numbering, as `GPUMUTEX_VISIBLE_DEVICES` names them; devices from
/// `GPUMUTEX_DEVICE_SOURCE`, else [`DeviceSource::Auto`]) are listed even if no claim names
/// them. Works on a directory that is not trusted (and says so).
pub fn read_status(lock_dir: &Path, extra_devices: &[u32]) -> Result<Status> {
    let source = std::env::var(crate::devices::ENV_DEVICE_SOURCE)
        .ok()
        .and_then(|s| DeviceSource::parse(&s).ok())
        .unwrap_or_default();
    let spec = VisibleSpec::Names(
        extra_devices
            .iter()
            .map(|i| DeviceName::Index(*i))
            .collect(),
    );
    read_status_with(lock_dir, Some(&spec), &source)
}

/// [`read_status`] for devices named as `GPUMUTEX_VISIBLE_DEVICES` names them (`None`: only
/// those that claims name), with devices from `source`. Device information that cannot be read
/// only leaves devices without an index in the report.
pub fn read_status_with(
    lock_dir: &Path,
    visible: Option<&VisibleSpec>,
    source: &DeviceSource,
) -> Result<Status> {
    let dir = LockDir::open_for_reading(lock_dir)?;
    let namespace = devices::discover(source)
        .ok()
        .and_then(|found| Namespace::new(found.as_ref(), &|k| std::env::var(k).ok()).ok());
    let extra = match (&namespace, visible) {
        (Some(ns), Some(spec)) if *spec != VisibleSpec::Names(Vec::new()) => {
            ns.resolve(spec).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    snapshot(&dir, &extra, namespace.as_ref())
}

pub(crate) fn snapshot(
    dir: &LockDir,
    extra_devices: &[Device],
    namespace: Option<&Namespace>,
) -> Result<Status> {
    let until = Instant::now() + STATUS_LIMIT;
    let probe = Prober::default().probe(dir, false, || {
        if Instant::now() > until {
            Err(Error::LockDir {
                path: dir.path().to_path_buf(),
                reason: format!(
                    "holds too many entries to report within {STATUS_LIMIT:?} (flooded?)"
                ),
            })
        } else {
            Ok(())
        }
    })?;
    let mut ignored = probe.unusable;
    let mut ignored_by = probe.unusable_by.clone();
    let mut devices: Vec<(Option<u32>, String)> = extra_devices
        .iter()
        .map(|d| (Some(d.index), d.key.clone()))
        .collect();
    let mut holders: Vec<(String, HolderInfo)> = Vec::new();
    for c in &probe.claims {
        match (&c.record, c.live()) {
            (Some(r), true) => {
                let info = HolderInfo {
                    pid: r.proc_id.pid,
                    uid: c.owner_uid,
                    cmd: r.cmd.clone(),
                    since: r.since,
                    shared: r.kind == ClaimKind::Shared,
                    verified: c.verified(),
                };
                for d in &r.devices {
                    if !devices.iter().any(|(_, k)| k == d) {
                        let index = namespace.and_then(|ns| ns.by_key(d)).map(|x| x.index);
                        devices.push((index, d.clone()));
                    }
                    holders.push((d.clone(), info.clone()));
                }
            }
            _ => {
                ignored += 1;
                *ignored_by.entry(c.owner_uid).or_default() += 1;
            }
        }
    }
    holders.sort_by(|(d, h), (e, g)| {
        (d, !h.verified, h.shared, h.since).cmp(&(e, !g.verified, g.shared, g.since))
    });
    // The caller's devices first, in its numbering, then the others by name.
    devices.sort_by(|a, b| (a.0.is_none(), a.0, &a.1).cmp(&(b.0.is_none(), b.0, &b.1)));
    let mut waiters = Vec::new();
    for t in &probe.tickets {
        match (t.state(), &t.record) {
            (TicketState::Waiting(_), Some(r)) => waiters.push(WaiterInfo {
                suspended: !t.own
                    && matches!(t.locks.owner, crate::liveness::Owner::Pid(p) if crate::proc::is_suspended(p)),
                pid: r.proc_id.pid,
                uid: t.owner_uid,
                cmd: r.cmd.clone(),
                n: r.n,
                candidates: r.candidates.clone(),
                backfill: r.backfill,
                since: r.since,
            }),
            _ => {
                ignored += 1;
                *ignored_by.entry(t.owner_uid).or_default() += 1;
            }
        }
    }
    let mut ignored_by: Vec<(u32, usize)> = ignored_by.into_iter().collect();
    ignored_by.sort_by_key(|(uid, n)| (std::cmp::Reverse(*n), *uid));
    Ok(Status {
        lock_dir: dir.path().to_path_buf(),
        untrusted: dir.distrust().map(str::to_owned),
        devices: devices
            .into_iter()
            .map(|(index, d)| {
                let hs: Vec<HolderInfo> = holders
                    .iter()
                    .filter(|(x, _)| *x == d)
                    .map(|(_, h)| h.clone())
                    .collect();
                DeviceStatus {
                    device: d,
                    index,
                    busy: !hs.is_empty(),
                    holders: hs,
                }
            })
            .collect(),
        waiters,
        ignored,
        ignored_by,
        join_lock: joinlock::holder(dir),
    })
}

fn ago(t: SystemTime) -> String {
    match SystemTime::now().duration_since(t) {
        Ok(d) if d.as_secs() >= 3600 => {
            format!("{}h{:02}m ago", d.as_secs() / 3600, d.as_secs() % 3600 / 60)
        }
        Ok(d) if d.as_secs() >= 60 => format!("{}m{:02}s ago", d.as_secs() / 60, d.as_secs() % 60),
        Ok(d) => format!("{:.1}s ago", d.as_secs_f64()),
        Err(_) => "just now".into(),
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "lock directory: {}", self.lock_dir.display())?;
        if let Some(u) = &self.untrusted {
            writeln!(f, "  NOT TRUSTED (acquisitions refuse it): {u}")?;
        }
        if let Some(h) = &self.join_lock {
            writeln!(f, "join lock: held by {h}")?;
        }
        for d in &self.devices {
            let name = match d.index {
                Some(i) if i.to_string() == d.device => format!("device {i}"),
                Some(i) => format!("device {i} ({})", d.device),
                None => format!("device {}", d.device),
            };
            if !d.busy {
                writeln!(f, "  {name}: free")?;
                continue;
            }
            for (i, h) in d.holders.iter().enumerate() {
                let label = if i == 0 {
                    format!("{name}:")
                } else {
                    String::new()
                };
                writeln!(
                    f,
                    "  {label:<11} pid {} uid {} {}{} since {}: {}",
                    h.pid,
                    h.uid,
                    if h.shared { "(shares)" } else { "(holds) " },
                    if h.verified {
                        ""
                    } else {
                        " (unverified record)"
                    },
                    ago(h.since),
                    h.cmd
                )?;
            }
        }
        if self.waiters.is_empty() {
            writeln!(f, "queue: empty")?;
        } else {
            writeln!(f, "queue ({} waiting, head first):", self.waiters.len())?;
            for (i, w) in self.waiters.iter().enumerate() {
                let c: Vec<&str> = w.candidates.iter().map(String::as_str).collect();
                writeln!(
                    f,
                    "  {}. pid {} uid {} wants {} of [{}]{}{} waiting since {}: {}",
                    i + 1,
                    w.pid,
                    w.uid,
                    w.n,
                    c.join(","),
                    if w.backfill { " (backfill)" } else { "" },
                    if w.suspended {
                        " (stopped or frozen: skipped until it runs)"
                    } else {
                        ""
                    },
                    ago(w.since),
                    w.cmd
                )?;
            }
        }
        if self.ignored > 0 {
            write!(
                f,
                "ignored: {} file(s) under record names (dead, unreadable or not trusted)",
                self.ignored
            )?;
            let by: Vec<String> = self
                .ignored_by
                .iter()
                .take(3)
                .map(|(uid, n)| format!("{n} owned by uid {uid}"))
                .collect();
            if !by.is_empty() {
                write!(f, ": {}", by.join(", "))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
