//! [`GpuGuard`]: granted devices, released on drop.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, Result};
use crate::lockdir;

/// Devices granted to this process (and shared with its descendants); released on drop.
///
/// The claim lives exactly as long as this guard in the process that created it: the device
/// `flock`s are held through close-on-exec descriptors, so programs this process `exec`s do not
/// inherit them (they share the claim by ancestry instead, see the crate docs). If the process
/// dies, however it dies, the kernel drops the locks. Dropping a guard in a `fork`ed child (which
/// shares the descriptors) does not release the parent's claim.
#[derive(Debug)]
pub struct GpuGuard {
    devices: Vec<u32>,
    files: Vec<File>,
    claim_path: PathBuf,
    queue_path: PathBuf,
    owner_pid: u32,
    since: SystemTime,
    inherited_from: Option<u32>,
    released: bool,
}

impl GpuGuard {
    pub(crate) fn new(
        devices: Vec<u32>,
        files: Vec<File>,
        claim_path: PathBuf,
        queue_path: PathBuf,
        owner_pid: u32,
        since: SystemTime,
        inherited_from: Option<u32>,
    ) -> Self {
        GpuGuard {
            devices,
            files,
            claim_path,
            queue_path,
            owner_pid,
            since,
            inherited_from,
            released: false,
        }
    }

    /// The granted device indices, in preference order.
    pub fn devices(&self) -> &[u32] {
        &self.devices
    }

    /// The `CUDA_VISIBLE_DEVICES` value for the granted devices, e.g. `"2,3"`.
    pub fn cuda_visible_devices(&self) -> String {
        self.devices
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Sets `CUDA_VISIBLE_DEVICES` on `cmd` to the granted devices.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("CUDA_VISIBLE_DEVICES", self.cuda_visible_devices())
    }

    /// When the devices were granted.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// True if this guard shares the claim of an ancestor (or of its job root) instead of
    /// having been granted through the queue.
    pub fn is_shared(&self) -> bool {
        self.inherited_from.is_some()
    }

    /// The pid of the process whose claim is shared, if [`GpuGuard::is_shared`].
    pub fn inherited_from(&self) -> Option<u32> {
        self.inherited_from
    }

    /// Releases the devices now, reporting failures that `drop` would have to ignore.
    pub fn release(mut self) -> Result<()> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        if std::process::id() != self.owner_pid {
            // A forked child: the descriptors are shared with the owner; closing our copies
            // keeps the owner's locks.
            self.files.clear();
            return Ok(());
        }
        // Hold the join lock (briefly, best effort) so waiters never see a claim record without
        // its locks or the reverse.
        let qfile = lockdir::open_existing(&self.queue_path).ok();
        let mut locked = false;
        if let Some(q) = &qfile {
            let until = Instant::now() + Duration::from_secs(2);
            let spin_until = Instant::now() + Duration::from_millis(2);
            let mut pause = Duration::from_micros(50);
            while Instant::now() < until {
                if q.try_lock().is_ok() {
                    locked = true;
                    break;
                }
                if Instant::now() < spin_until {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(1));
                }
            }
        }
        let mut first_err = None;
        if let Err(e) = fs::remove_file(&self.claim_path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                first_err = Some(Error::io("unlink", &self.claim_path, e));
            }
        }
        for f in &self.files {
            if let Err(e) = f.unlock() {
                first_err.get_or_insert(Error::io("flock", &self.claim_path, e));
            }
        }
        if let (true, Some(q)) = (locked, &qfile) {
            let _ = q.unlock();
        }
        // Closing the device descriptors after unlocking emits the inotify events that wake the
        // next waiter.
        self.files.clear();
        drop(qfile);
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for GpuGuard {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}
