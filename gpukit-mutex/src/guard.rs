//! [`GpuGuard`]: granted devices, released on drop.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::SystemTime;

use crate::claims::OwnClaim;
use crate::config::{ENV_LOCK_DIR, ENV_NUM_DEVICES, ENV_VISIBLE_DEVICES};
use crate::devices::{Device, Namespace};
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
///
/// ## Starting programs that share the claim
///
/// [`GpuGuard::apply`] and [`GpuGuard::hold_in`] prepare a [`Command`]. A program started by
/// another launcher (Python's `subprocess`, a job system) gets the same from
/// [`GpuGuard::child_env`] (the environment to set) and [`GpuGuard::inheritable_fds`] (the
/// descriptors to pass on); `apply` and `hold_in` are built on them.
#[derive(Debug)]
pub struct GpuGuard {
    granted: Vec<Device>,
    /// Their indices in this process's numbering.
    devices: Vec<u32>,
    claim: Option<OwnClaim>,
    dir: Arc<LockDir>,
    owner_pid: u32,
    since: SystemTime,
    inherited_from: Option<u32>,
    /// `CUDA_VISIBLE_DEVICES` for a child, in the child's namespace.
    child_cvd: String,
    lock_dir: PathBuf,
}

impl GpuGuard {
    pub(crate) fn new(
        granted: Vec<Device>,
        claim: OwnClaim,
        dir: Arc<LockDir>,
        inherited_from: Option<u32>,
        namespace: &Namespace,
    ) -> Self {
        GpuGuard {
            devices: granted.iter().map(|d| d.index).collect(),
            child_cvd: namespace.child_cuda_visible_devices(&granted),
            granted,
            since: claim.record.since,
            claim: Some(claim),
            lock_dir: dir.path().to_path_buf(),
            dir,
            owner_pid: std::process::id(),
            inherited_from,
        }
    }

    /// The granted devices' indices in this process's CUDA numbering, in preference order (what
    /// `torch.cuda.set_device` takes in this process).
    pub fn devices(&self) -> &[u32] {
        &self.devices
    }

    /// The granted devices: index, physical identity (UUID when known) and more.
    pub fn granted(&self) -> &[Device] {
        &self.granted
    }

    /// The `CUDA_VISIBLE_DEVICES` value under which a program started from this process sees
    /// exactly the granted devices, e.g. `"2,3"` (indices in the numbering CUDA applies the
    /// variable to, or UUIDs; see [`crate::devices`]). The preload sets it in its own process.
    pub fn cuda_visible_devices(&self) -> String {
        self.child_cvd.clone()
    }

    /// The environment a program started with these devices needs, as `(name, value)` pairs:
    ///
    /// * `CUDA_VISIBLE_DEVICES`: the granted devices ([`GpuGuard::cuda_visible_devices`]);
    /// * `GPUMUTEX_VISIBLE_DEVICES` (the granted devices in the child's numbering: `0,1,…`),
    ///   `GPUMUTEX_NUM_DEVICES` and `GPUMUTEX_LOCK_DIR`: a configuration under which a
    ///   `gpukit-mutex` user in that program (the preload, a nested `gpumutex-run`, a library
    ///   call) shares this claim instead of queueing behind it.
    ///
    /// Set all of them on the child (other variables unchanged). [`GpuGuard::apply`] does this
    /// for a [`Command`].
    pub fn child_env(&self) -> Vec<(String, String)> {
        vec![
            ("CUDA_VISIBLE_DEVICES".into(), self.cuda_visible_devices()),
            // In the child's numbering its devices are 0, 1, ...: the granted ones.
            (
                ENV_VISIBLE_DEVICES.into(),
                (0..self.devices.len())
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            (ENV_NUM_DEVICES.into(), self.devices.len().to_string()),
            (
                ENV_LOCK_DIR.into(),
                self.lock_dir.to_string_lossy().into_owned(),
            ),
        ]
    }

    /// The descriptors a child must inherit to keep the claim alive after this process dies
    /// (the claim's tree lock, see `src/liveness.rs`); empty once released. They are open in
    /// this process (close-on-exec) for as long as the guard lives.
    ///
    /// A launcher other than [`GpuGuard::hold_in`] must pass them **with their numbers unchanged
    /// and without close-on-exec**, as Python's `subprocess.Popen(..., pass_fds=fds)` does, and
    /// the child must not close them. The child never needs to know they are there. Passing
    /// them is optional: without them the claim ends when this guard is dropped or this process
    /// dies, while the child may still run.
    pub fn inheritable_fds(&self) -> Vec<RawFd> {
        self.claim.iter().map(|c| c.file.as_raw_fd()).collect()
    }

    /// Sets [`GpuGuard::child_env`] on `cmd`.
    pub fn apply<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.child_env())
    }

    /// Makes the process `cmd` starts (and every process it starts that keeps its inherited
    /// descriptors) hold the claim too: the claim's record stays live until this guard is
    /// dropped *or*, if this process dies without dropping it (`SIGKILL`), until all of those
    /// processes have exited. Without it, a killed holder's devices are free at once even if
    /// programs it started still run. `gpumutex-run` uses it for its command. It passes
    /// [`GpuGuard::inheritable_fds`] to the child.
    pub fn hold_in<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        let fds = self.inheritable_fds();
        if fds.is_empty() {
            return cmd;
        }
        // SAFETY: the closure runs in the forked child before exec and only calls fcntl, which
        // is async-signal-safe (it reads the captured vector without allocating); every
        // descriptor is open there (it was open in the parent when the child was forked, and
        // only exec closes close-on-exec descriptors).
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
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
