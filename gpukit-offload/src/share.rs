//! One GPU shared by the processes of one program: `offload run` starts a private CUDA MPS
//! control daemon (`nvidia-cuda-mps-control -f`) for the program it runs, so that the
//! program's processes (pytest-xdist workers, joblib / loky workers, a shell script's commands)
//! run their GPU work in one MPS server instead of one context each.
//!
//! Why: contexts of different processes on one GPU take turns (time-slicing), and a program
//! whose processes make many small GPU calls pays a context switch per call and per process.
//! numpy.linalg's `TestDet::test_generalized_sq_cases` forced onto the GPU (70 000 4x4 getrf
//! calls) took 4.3 s in one process and 89 s in each of 8 processes at once; under an MPS
//! daemon the 8 took 9 s each, and numpy.linalg's whole suite under 8 pytest workers 37.7 s
//! instead of 243 s (H100 80GB HBM3, 2026-12-06; `tools/gpu/session_o.sh`).
//!
//! The daemon is the program's own: its pipe and log directories sit in a fresh directory of
//! mode 0700 that only this user can enter (no other user can connect to it, put a socket in
//! its place or read its log), named to the program through `CUDA_MPS_PIPE_DIRECTORY` and
//! `CUDA_MPS_LOG_DIRECTORY`. CUDA connects to the daemon at a process's first CUDA call and
//! runs without MPS when it cannot connect, so a daemon that dies only costs the sharing. It
//! runs in a process group of its own (a terminal's Ctrl-C reaches the program, not the
//! daemon) and is told to quit when the program ends; it then waits for the processes still
//! connected to it (a background job the program left running) before it exits, and takes
//! its directory with it only where it is gone within 5 s. An `offload run` killed by SIGKILL
//! cannot tell it to quit: that daemon stays until it is told (`CUDA_MPS_PIPE_DIRECTORY=<its
//! pipe directory> nvidia-cuda-mps-control` with `quit`).
//!
//! Not started ([`plan`]) where `GPUKIT_OFFLOAD_SHARE=off`, where the GPU is off for the
//! program, where the environment already names an MPS daemon (`CUDA_MPS_PIPE_DIRECTORY`), where
//! a system-wide daemon listens at the default `/tmp/nvidia-mps`, or where
//! `nvidia-cuda-mps-control` is not on `PATH`.

use crate::dispatch::GpuMode;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The MPS control program.
pub const CONTROL: &str = "nvidia-cuda-mps-control";
/// Where CUDA looks for the daemon's pipes.
pub const PIPE_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// Where the daemon writes its logs.
pub const LOG_ENV: &str = "CUDA_MPS_LOG_DIRECTORY";
/// A system-wide daemon's default pipe directory.
pub const SYSTEM_PIPE_DIR: &str = "/tmp/nvidia-mps";
/// How long a starting daemon may take to open its control socket.
const READY_WITHIN: Duration = Duration::from_secs(3);
/// How long `stop` waits for the control program's client mode to take `quit`.
const CLIENT_WITHIN: Duration = Duration::from_secs(2);
/// How long `stop` waits for the daemon to exit after `quit`.
const QUIT_WITHIN: Duration = Duration::from_secs(5);
/// A Unix socket's path is limited to 107 bytes; the pipe directory gets this many for its own.
const SOCKET_PATH_MAX: usize = 90;

/// What to do for the program.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Start a daemon with this control program.
    Start(PathBuf),
    /// Start none, for this reason.
    Skip(&'static str),
}

/// Whether `offload run` may start a daemon for the program (`GPUKIT_OFFLOAD_SHARE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharePolicy {
    /// Where [`plan`] finds nothing against it (the default).
    Auto,
    /// Never: each process of the program starts its own CUDA context.
    Off,
}

/// Decides whether the program gets a daemon of its own, from the settings, the environment
/// (`var`), the file system (`exists`) and the program search (`find`, e.g. [`on_path`]).
pub fn plan(
    policy: SharePolicy,
    gpu: GpuMode,
    var: impl Fn(&str) -> Option<OsString>,
    exists: impl Fn(&Path) -> bool,
    find: impl Fn(&str) -> Option<PathBuf>,
) -> Plan {
    if policy == SharePolicy::Off {
        return Plan::Skip("GPUKIT_OFFLOAD_SHARE=off");
    }
    if gpu == GpuMode::Off {
        return Plan::Skip("the GPU is off for the program (GPUKIT_OFFLOAD_GPU=off)");
    }
    if var(PIPE_ENV).is_some_and(|v| !v.is_empty()) {
        return Plan::Skip("the environment names an MPS daemon already (CUDA_MPS_PIPE_DIRECTORY)");
    }
    if exists(&Path::new(SYSTEM_PIPE_DIR).join("control")) {
        return Plan::Skip("a system-wide MPS daemon listens at /tmp/nvidia-mps");
    }
    match find(CONTROL) {
        Some(p) => Plan::Start(p),
        None => Plan::Skip("nvidia-cuda-mps-control is not on PATH"),
    }
}

/// The first executable file named `name` in the directories of `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    find_in(&std::env::var_os("PATH")?, name)
}

/// The first executable file named `name` in the absolute directories of the list `path` (as
/// `PATH` is written; relative entries are skipped: they would depend on where the user stands).
pub fn find_in(path: &std::ffi::OsStr, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A running daemon of the program's own. Dropping it stops it ([`Daemon::stop`]).
#[derive(Debug)]
pub struct Daemon {
    control: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// Starts `control -f` with fresh private pipe and log directories and waits until its
    /// control socket exists. On failure nothing is left behind (the process is killed and
    /// reaped, the directory removed).
    pub fn start(control: &Path) -> io::Result<Daemon> {
        let mut d = Daemon {
            control: control.to_path_buf(),
            dir: private_dir()?,
            child: None,
        };
        match d.launch() {
            Ok(()) => Ok(d),
            Err(e) => {
                d.abandon();
                Err(e)
            }
        }
    }

    fn launch(&mut self) -> io::Result<()> {
        for sub in ["pipe", "log"] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(self.dir.join(sub))?;
        }
        self.child = Some(
            Command::new(&self.control)
                .arg("-f")
                .envs(self.env())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()?,
        );
        let socket = self.dir.join("pipe").join("control");
        let t0 = Instant::now();
        loop {
            if socket.exists() {
                return Ok(());
            }
            let exited = match self.child.as_mut() {
                Some(c) => c.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                return Err(io::Error::other(format!(
                    "{} -f exited at start ({status})",
                    self.control.display()
                )));
            }
            if t0.elapsed() > READY_WITHIN {
                return Err(io::Error::other(format!(
                    "{} -f opened no control socket within {} s",
                    self.control.display(),
                    READY_WITHIN.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills and reaps the daemon, removes the directory (a start that failed).
    fn abandon(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The variables that point CUDA at this daemon.
    pub fn env(&self) -> [(&'static str, PathBuf); 2] {
        [
            (PIPE_ENV, self.dir.join("pipe")),
            (LOG_ENV, self.dir.join("log")),
        ]
    }

    /// Tells the daemon to quit (the control program's client mode, given 2 s) and waits up to
    /// 5 s for it to exit (it waits for processes still connected to it); kills it when it did
    /// not take the command (without waiting for it). Returns within about 5 s whatever the
    /// daemon does. The private
    /// directory is removed once the daemon has exited; a daemon still serving processes that
    /// outlived the program keeps it until they end.
    pub fn stop(mut self) -> io::Result<()> {
        self.shut()
    }

    fn shut(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let told = self.quit();
        // a daemon that did not take the command is not waited for
        let within = if told.is_ok() {
            QUIT_WITHIN
        } else {
            Duration::ZERO
        };
        if exited_within(&mut child, within)?.is_none() {
            if told.is_ok() {
                // it took the command and waits for connected processes: leave it to them
                return Ok(());
            }
            let _ = child.kill();
            child.wait()?;
        }
        std::fs::remove_dir_all(&self.dir)?;
        told
    }

    /// Sends `quit` through the control program's client mode.
    fn quit(&self) -> io::Result<()> {
        let mut c = Command::new(&self.control)
            .envs(self.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let wrote = c
            .stdin
            .take()
            .map(|mut s| s.write_all(b"quit\n"))
            .unwrap_or(Ok(()));
        // bounded: a control program that never answers must not hold `offload run` at exit
        let Some(status) = exited_within(&mut c, CLIENT_WITHIN)? else {
            let _ = c.kill();
            c.wait()?;
            return Err(io::Error::other(format!(
                "`quit` got no answer within {} s",
                CLIENT_WITHIN.as_secs()
            )));
        };
        // the client's status first: one that exits without reading its input makes the write
        // fail with a broken pipe, which says less than the status
        if !status.success() {
            return Err(io::Error::other(format!("`quit` ended with {status}")));
        }
        wrote.map_err(|e| io::Error::other(format!("sending `quit`: {e}")))
    }
}

/// `child`'s exit status if it exits within `within` (polled every 2 ms; checked at least once).
fn exited_within(child: &mut Child, within: Duration) -> io::Result<Option<ExitStatus>> {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if t0.elapsed() >= within {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

/// A fresh directory of mode 0700 under the temporary directory (`/tmp` where that path would
/// not leave room for the daemon's socket names), named with 64 unpredictable bits
/// ([`gpukit_trust::random_hex`]): created, never reused, so nobody can have planted it.
fn private_dir() -> io::Result<PathBuf> {
    let mut base = std::env::temp_dir();
    if base.as_os_str().len() > SOCKET_PATH_MAX - 40 {
        base = PathBuf::from("/tmp");
    }
    let mut last = None;
    for _ in 0..4 {
        let p = base.join(format!("gpukit-mps-{}", &gpukit_trust::random_hex()?[..16]));
        match std::fs::DirBuilder::new().mode(0o700).create(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no fresh directory")))
}

#[cfg(test)]
mod tests;
