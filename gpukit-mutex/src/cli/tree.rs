//! The command's process tree: the runner is a child subreaper for the duration of a call, and
//! waits for its command and for every process re-parented to it meanwhile.
//!
//! Only those are waited for (`waitpid` on each pid, never `waitpid(-1)`), so children the
//! embedding process had before the call are never reaped behind its back. Exits are noticed
//! through pidfds (`poll`), signals through the token's pipe; while the command runs nothing is
//! scanned, and once it has exited the runner's children are listed again a few times a second
//! (orphans of deeper descendants arrive without any event).

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::signals::{Signals, HANDLED};

/// The subreaper flag for the duration of a call; the previous value is restored on drop.
pub(super) struct Subreaper {
    before: libc::c_int,
}

impl Subreaper {
    pub fn enter() -> io::Result<Subreaper> {
        let mut before: libc::c_int = 0;
        // SAFETY: PR_GET_CHILD_SUBREAPER writes an int through the pointer, which is valid.
        if unsafe {
            libc::prctl(
                libc::PR_GET_CHILD_SUBREAPER,
                &mut before as *mut libc::c_int,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Subreaper { before })
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        // SAFETY: as in `enter`.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, self.before, 0, 0, 0) };
    }
}

/// This process's children (zombies included). Reads the kernel's per-thread `children`
/// lists; where the kernel has none (built without `CONFIG_PROC_CHILDREN`), scans `/proc`.
pub(super) fn children() -> BTreeSet<libc::pid_t> {
    let mut out = BTreeSet::new();
    let listed = (|| -> io::Result<()> {
        for task in std::fs::read_dir("/proc/self/task")? {
            let path = task?.path().join("children");
            for pid in std::fs::read_to_string(path)?.split_ascii_whitespace() {
                if let Ok(p) = pid.parse() {
                    out.insert(p);
                }
            }
        }
        Ok(())
    })();
    if listed.is_ok() {
        return out;
    }
    out.clear();
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() }.to_string();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_ascii_whitespace().nth(1));
        if ppid == Some(me.as_str()) {
            out.insert(pid);
        }
    }
    out
}

/// `waitpid(pid, WNOHANG)`: the status if it has exited (and is reaped now).
fn try_reap(pid: libc::pid_t) -> io::Result<Option<libc::c_int>> {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waits for one child of ours; `st` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        if r == pid {
            return Ok(Some(st));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: pidfd_open returned a new descriptor owned by nobody else (close-on-exec by
    // default).
    Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Waits until the command `cmd` has exited and every process re-parented to this process
/// since (not in `before`) has exited too, forwarding signals as the module docs of `cli`
/// say. Returns the command's wait status.
pub(super) fn wait(
    cmd: libc::pid_t,
    before: &BTreeSet<libc::pid_t>,
    signals: &Signals,
) -> Result<libc::c_int, String> {
    let mut status: Option<libc::c_int> = None;
    let mut pidfds: HashMap<libc::pid_t, Option<OwnedFd>> = HashMap::new();
    let mut announced = false;
    loop {
        signals.rearm();
        let pending = signals.take_pending();
        if status.is_none() {
            match try_reap(cmd) {
                Ok(Some(st)) => {
                    signals.set_child(0);
                    pidfds.remove(&cmd);
                    status = Some(st);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("waiting for the command: {e}")),
            }
        }
        // The rest of the tree: processes re-parented to us (only looked for once the command
        // has exited; until then they can wait as zombies).
        let mut rest: Vec<libc::pid_t> = Vec::new();
        if status.is_some() {
            for pid in children() {
                if before.contains(&pid) {
                    continue;
                }
                match try_reap(pid) {
                    Ok(Some(_)) | Err(_) => {
                        pidfds.remove(&pid);
                    }
                    Ok(None) => rest.push(pid),
                }
            }
            if rest.is_empty() {
                break;
            }
            if !announced {
                announced = true;
                eprintln!(
                    "gpumutex-run: command exited; holding the devices until the {} remaining process(es) it started exit (pids {rest:?})",
                    rest.len()
                );
            }
            for sig in HANDLED {
                if pending & (1 << sig) != 0 {
                    for &pid in &rest {
                        // SAFETY: kill(2) of a not yet reaped child of ours.
                        unsafe { libc::kill(pid, sig) };
                    }
                }
            }
        }
        // Sleep until a watched process exits or a signal arrives.
        let watched: Vec<libc::pid_t> = if status.is_none() { vec![cmd] } else { rest };
        let mut fds = vec![libc::pollfd {
            fd: signals.wake_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut blind = false;
        for pid in watched {
            match pidfds.entry(pid).or_insert_with(|| pidfd_open(pid)) {
                Some(fd) => fds.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }),
                None => blind = true,
            }
        }
        let timeout = if blind {
            // No pidfd (kernel before 5.3): poll the exits.
            Duration::from_millis(20)
        } else if status.is_some() {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(3600)
        };
        // SAFETY: `fds` is a valid array of pollfd for the call.
        let rc = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout.as_millis() as libc::c_int,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(format!("waiting for the command: {e}"));
            }
        }
    }
    status.ok_or_else(|| "the command vanished without an exit status".to_string())
}
