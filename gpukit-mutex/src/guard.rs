//! [`GpuGuard`]: granted devices, released on drop.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;
use std::time::SystemTime;

use crate::claims::OwnClaim;
use crate::liveness;
use crate::lockdir::LockDir;

/// Devices granted to this process (and shared with its descendants); released on drop.
///
/// The claim lives as long as this guard in the process that created it, and its record keeps
/// the devices busy while any of these holds: this process (its owner lock; the kernel drops it
/// when the process dies, however it dies), or a process that received the claim's descriptor
/// through [`GpuGuard::hold_in`] (the tree lock). Programs this process runs share the claim by
/// ancestry (see the crate docs), not by inherited descriptors. A `fork`ed child cannot release
/// the parent's claim: dropping a guard in a child, `flock(LOCK_UN)` or `fcntl(F_UNLCK)` on the
/// inherited descriptors leave the parent's owner lock in place. (A child forked without `exec`
/// shares the claim's descriptor, so if this process dies while such children live, the claim
/// lasts until they have exited too.)
#[derive(Debug)]
pub struct GpuGuard {
    devices: Vec<u32>,
    claim: Option<OwnClaim>,
    dir: Arc<LockDir>,
    owner_pid: u32,
    since: SystemTime,
    inherited_from: Option<u32>,
}

impl GpuGuard {
    pub(crate) fn new(
        devices: Vec<u32>,
        claim: OwnClaim,
        dir: Arc<LockDir>,
        inherited_from: Option<u32>,
    ) -> Self {
        GpuGuard {
            devices,
            since: claim.record.since,
            claim: Some(claim),
            dir,
            owner_pid: std::process::id(),
            inherited_from,
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

    /// Makes the process `cmd` starts (and every process it starts that keeps its inherited
    /// descriptors) hold the claim too: the claim's record stays live until this guard is
    /// dropped *or*, if this process dies without dropping it (`SIGKILL`), until all of those
    /// processes have exited. Without it, a killed holder's devices are free at once even if
    /// programs it started still run. `gpumutex-run` uses it for its command.
    pub fn hold_in<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        if let Some(claim) = &self.claim {
            let fd = claim.file.as_raw_fd();
            // SAFETY: the closure runs in the forked child before exec and only calls fcntl,
            // which is async-signal-safe; `fd` is open there (it was open in the parent when
            // the child was forked, and only exec closes close-on-exec descriptors).
            unsafe {
                cmd.pre_exec(move || {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd
    }

    /// When the devices were granted.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// True if this guard shares the claim of an ancestor (or of a sibling rank) instead of
    /// having been granted through the queue.
    pub fn is_shared(&self) -> bool {
        self.inherited_from.is_some()
    }

    /// The pid of the process whose claim is shared, if [`GpuGuard::is_shared`].
    pub fn inherited_from(&self) -> Option<u32> {
        self.inherited_from
    }

    /// Releases the devices now (the same as dropping the guard). Release cannot fail in a way
    /// that keeps the devices: the record is removed and its descriptor closed, which drops its
    /// locks.
    pub fn release(mut self) {
        self.release_inner();
    }

    fn release_inner(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        if std::process::id() != self.owner_pid {
            // A forked child: the owner lock is the parent's; closing our copy of the
            // descriptor leaves it (and the tree lock, still referenced by the parent) alone.
            drop(claim);
            return;
        }
        // Remove the record (waiters see the devices free at once), then close, which drops
        // the locks. No join lock is needed: removal is atomic for readers.
        self.dir.unlink_if(&claim.name, claim.id);
        liveness::own_remove(claim.id);
        drop(claim);
    }
}

impl Drop for GpuGuard {
    fn drop(&mut self) {
        self.release_inner();
    }
}
