//! Who holds what, who waits.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, TryLockError};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, Result};
use crate::lockdir;
use crate::proc;
use crate::records::{self, ClaimKind, ClaimRecord, TicketRecord};

/// A process holding (or sharing) a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// Process id.
    pub pid: u32,
    /// Its real uid.
    pub uid: u32,
    /// Its command line (from `/proc/<pid>/cmdline` when it took the claim).
    pub cmd: String,
    /// When it took the claim.
    pub since: SystemTime,
    /// True if it shares an ancestor's claim rather than having been granted it.
    pub shared: bool,
}

/// One device's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceStatus {
    /// Device index.
    pub device: u32,
    /// Whether its lock is held (by the holders listed, or by survivors of a claim whose
    /// records are gone).
    pub busy: bool,
    /// Live processes that hold or share it, primary holder first.
    pub holders: Vec<HolderInfo>,
}

/// One waiting process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterInfo {
    /// Process id.
    pub pid: u32,
    /// Its real uid.
    pub uid: u32,
    /// Its command line.
    pub cmd: String,
    /// Devices requested.
    pub n: usize,
    /// Devices it may be given.
    pub candidates: Vec<u32>,
    /// Whether it may backfill.
    pub backfill: bool,
    /// When it joined the queue.
    pub since: SystemTime,
}

/// A snapshot of the lock directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The directory.
    pub lock_dir: PathBuf,
    /// Every device that is visible to the caller or has a lock file, by index.
    pub devices: Vec<DeviceStatus>,
    /// Live waiters, in queue order (head first).
    pub waiters: Vec<WaiterInfo>,
}

/// Reads the status of `lock_dir` without a [`crate::GpuMutex`]; `extra_devices` are listed
/// even if they have no lock file yet.
pub fn read_status(lock_dir: &Path, extra_devices: &[u32]) -> Result<Status> {
    lockdir::validate_existing(lock_dir)?;
    let qpath = lock_dir.join(lockdir::QUEUE_LOCK);
    // Take the join lock if the directory has one, so the snapshot is consistent.
    let qfile = lockdir::open_existing(&qpath).ok();
    let _held = match &qfile {
        Some(q) => {
            let until = Instant::now() + Duration::from_secs(2);
            let mut ok = false;
            while Instant::now() < until {
                match q.try_lock() {
                    Ok(()) => {
                        ok = true;
                        break;
                    }
                    Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_micros(100)),
                    Err(TryLockError::Error(e)) => return Err(Error::io("flock", &qpath, e)),
                }
            }
            ok
        }
        None => false,
    };
    let result = snapshot(lock_dir, extra_devices);
    if let (true, Some(q)) = (_held, &qfile) {
        let _ = q.unlock();
    }
    result
}

fn snapshot(lock_dir: &Path, extra_devices: &[u32]) -> Result<Status> {
    let mut devices: BTreeSet<u32> = extra_devices.iter().copied().collect();
    let mut claims: Vec<ClaimRecord> = Vec::new();
    let mut tickets: Vec<(u64, TicketRecord)> = Vec::new();
    let rd = fs::read_dir(lock_dir).map_err(|e| Error::io("read_dir", lock_dir, e))?;
    for ent in rd.flatten() {
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(d) = lockdir::parse_device_lock_name(name) {
            devices.insert(d);
        } else if name.starts_with(lockdir::CLAIM_PREFIX) {
            let Ok(text) = read_small(&lock_dir.join(name)) else {
                continue;
            };
            if let Some(c) = ClaimRecord::parse(&text) {
                if proc::is_alive(c.proc_id) {
                    claims.push(c);
                }
            }
        } else if let Some(seq) = records::parse_ticket_name(name) {
            let path = lock_dir.join(name);
            let Ok(f) = lockdir::open_existing(&path) else {
                continue;
            };
            // Live waiters hold an exclusive flock on their ticket.
            match f.try_lock_shared() {
                Ok(()) => {
                    let _ = f.unlock();
                    continue;
                }
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(_)) => continue,
            }
            let Ok(text) = read_small(&path) else {
                continue;
            };
            if let Some(t) = TicketRecord::parse(&text) {
                tickets.push((seq, t));
            }
        }
    }
    tickets.sort_by_key(|(s, _)| *s);
    claims.sort_by_key(|c| (c.kind != ClaimKind::Primary, c.since));
    let mut out = Vec::new();
    for d in devices {
        let path = lock_dir.join(lockdir::device_lock_name(d));
        let busy = match lockdir::open_existing(&path) {
            Ok(f) => match f.try_lock() {
                Ok(()) => {
                    let _ = f.unlock();
                    false
                }
                Err(_) => true,
            },
            Err(_) => false,
        };
        let holders = if busy {
            claims
                .iter()
                .filter(|c| c.devices.contains(&d))
                .map(|c| HolderInfo {
                    pid: c.proc_id.pid,
                    uid: c.uid,
                    cmd: c.cmd.clone(),
                    since: c.since,
                    shared: c.kind == ClaimKind::Shared,
                })
                .collect()
        } else {
            Vec::new()
        };
        out.push(DeviceStatus {
            device: d,
            busy,
            holders,
        });
    }
    Ok(Status {
        lock_dir: lock_dir.to_path_buf(),
        devices: out,
        waiters: tickets
            .into_iter()
            .map(|(_, t)| WaiterInfo {
                pid: t.proc_id.pid,
                uid: t.uid,
                cmd: t.cmd,
                n: t.n,
                candidates: t.candidates,
                backfill: t.backfill,
                since: t.since,
            })
            .collect(),
    })
}

fn read_small(path: &Path) -> std::io::Result<String> {
    let mut f = lockdir::open_existing(path)?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    Ok(s)
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
        for d in &self.devices {
            if !d.busy {
                writeln!(f, "  device {}: free", d.device)?;
                continue;
            }
            if d.holders.is_empty() {
                writeln!(f, "  device {}: busy (holder record missing)", d.device)?;
            }
            for (i, h) in d.holders.iter().enumerate() {
                let label = if i == 0 {
                    format!("device {}:", d.device)
                } else {
                    String::new()
                };
                writeln!(
                    f,
                    "  {label:<11} pid {} uid {} {} since {}: {}",
                    h.pid,
                    h.uid,
                    if h.shared { "(shares)" } else { "(holds) " },
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
                let c: Vec<String> = w.candidates.iter().map(|d| d.to_string()).collect();
                writeln!(
                    f,
                    "  {}. pid {} uid {} wants {} of [{}]{} waiting since {}: {}",
                    i + 1,
                    w.pid,
                    w.uid,
                    w.n,
                    c.join(","),
                    if w.backfill { " (backfill)" } else { "" },
                    ago(w.since),
                    w.cmd
                )?;
            }
        }
        Ok(())
    }
}
