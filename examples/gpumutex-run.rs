//! `gpumutex-run`: run a command with exclusive use of GPU devices.
//!
//! ```text
//! gpumutex-run [--visible-devices D] [--num-devices N] [--lock-dir DIR] [--timeout SECS]
//!              [--backfill] [--status] -- CMD ARGS...
//! ```
//!
//! Waits in FIFO order for `N` of the devices `D` (default: `GPUMUTEX_*` environment variables),
//! runs `CMD` with `CUDA_VISIBLE_DEVICES` set to the granted devices (and the `GPUMUTEX_*`
//! variables set to the effective configuration, so a preloaded `gpumutex_preload` in the
//! command shares the claim), and holds the devices until `CMD` **and every process it
//! started** have exited; then exits with `CMD`'s status.
//!
//! * The runner is a child subreaper (`PR_SET_CHILD_SUBREAPER`): descendants of `CMD` that
//!   daemonize (`setsid cmd &`, double fork) are re-parented to it, and it waits for all of
//!   them before it releases the devices.
//! * `CMD` dies with the runner (`PR_SET_PDEATHSIG`, `SIGKILL`), and `CMD` inherits the claim's
//!   tree lock ([`gpukit::mutex::GpuGuard::hold_in`]): if the runner is killed, whatever of the
//!   tree survives (a daemon that kept its descriptors) keeps the devices busy until it exits.
//!
//! Exit codes: `CMD`'s own code; `128 + signal` if `CMD` died from a signal; `124` if
//! `--timeout` expired (the command is not run); `128 + signal` if SIGINT/SIGTERM/SIGHUP
//! ended the wait (the command is not run); `2` for bad arguments or configuration (nothing is
//! created); `125` for other lock errors; `126`/`127` if `CMD` cannot be executed / is not found.
//!
//! Signals: while waiting, SIGINT (Ctrl-C), SIGTERM and SIGHUP end the wait at once. While
//! `CMD` runs, SIGTERM and SIGHUP are forwarded to it; SIGINT is not (a terminal delivers
//! Ctrl-C to the whole foreground process group, `CMD` included). Once `CMD` has exited, all
//! three are forwarded to the remaining processes of its tree that were re-parented to the
//! runner (they are usually in other sessions, out of the terminal's reach).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use clap::Parser;
use gpukit::mutex::{self as gm, CancelToken, Error, GpuMutex};

#[derive(Parser, Debug)]
#[command(
    name = "gpumutex-run",
    about = "Run a command with exclusive, fairly queued use of GPU devices",
    override_usage = "gpumutex-run [OPTIONS] -- CMD [ARGS]...\n       gpumutex-run [OPTIONS] --status"
)]
struct Args {
    /// Comma-separated device indices to manage, e.g. 0,2,3 [env: GPUMUTEX_VISIBLE_DEVICES]
    #[arg(long, value_name = "D")]
    visible_devices: Option<String>,
    /// How many devices the command needs [env: GPUMUTEX_NUM_DEVICES, default 1]
    #[arg(long, value_name = "N")]
    num_devices: Option<usize>,
    /// Lock and queue directory [env: GPUMUTEX_LOCK_DIR, default /tmp/libgpumutex]
    #[arg(long, value_name = "DIR")]
    lock_dir: Option<PathBuf>,
    /// Give up after SECS seconds of waiting (exit 124, command not run) [env: GPUMUTEX_TIMEOUT]
    #[arg(long, value_name = "SECS")]
    timeout: Option<String>,
    /// Allow taking free devices out of turn when no earlier waiter could use them
    #[arg(long)]
    backfill: bool,
    /// Print who holds each device and who waits, then exit
    #[arg(long)]
    status: bool,
    /// The command to run, after `--`
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    cmd: Vec<OsString>,
}

static CANCEL: OnceLock<CancelToken> = OnceLock::new();
/// The last signal received (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Signals received since the main loop last looked, as a bit set.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// The command's pid while it runs.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    PENDING.fetch_or(1 << sig, Ordering::SeqCst);
    if let Some(t) = CANCEL.get() {
        t.cancel();
    }
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 && sig != libc::SIGINT {
        // SAFETY: kill() is async-signal-safe; `child` is our own child's pid.
        unsafe { libc::kill(child, sig) };
    }
}

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn install_handlers() {
    for sig in FORWARDED {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler only calls
        // async-signal-safe functions (atomics, write(2) via CancelToken::cancel, kill(2)). No
        // SA_RESTART: a signal interrupts waitpid so the main loop can forward it.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("gpumutex-run: {msg}");
    ExitCode::from(code)
}

/// `--status`: reads the directory only (it never creates it, and works on a directory the
/// lock itself would refuse, saying why).
fn print_status(args: &Args) -> ExitCode {
    let dir = args
        .lock_dir
        .clone()
        .or_else(|| std::env::var_os(gm::ENV_LOCK_DIR).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(gm::DEFAULT_LOCK_DIR));
    let visible = match args
        .visible_devices
        .clone()
        .or_else(|| std::env::var(gm::ENV_VISIBLE_DEVICES).ok())
    {
        Some(v) => match gm::parse_device_list(&v) {
            Ok(d) => d,
            Err(e) => return fail(2, e),
        },
        None => Vec::new(),
    };
    if std::fs::symlink_metadata(&dir).is_err() {
        println!(
            "lock directory: {} (does not exist: nothing held, nobody waiting)",
            dir.display()
        );
        return ExitCode::SUCCESS;
    }
    match gm::status(&dir, &visible) {
        Ok(s) => {
            print!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(125, e),
    }
}

/// Our direct children (the command, or descendants re-parented to us), from `/proc`.
fn children() -> Vec<i32> {
    let me = std::process::id().to_string();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_ascii_whitespace().nth(1));
        if ppid == Some(me.as_str()) {
            out.push(pid);
        }
    }
    out
}

fn exit_code(status: libc::c_int) -> ExitCode {
    if libc::WIFEXITED(status) {
        ExitCode::from(libc::WEXITSTATUS(status).clamp(0, 255) as u8)
    } else if libc::WIFSIGNALED(status) {
        ExitCode::from((128 + libc::WTERMSIG(status).clamp(0, 127)) as u8)
    } else {
        ExitCode::from(125)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut b = GpuMutex::builder();
    if let Some(v) = &args.visible_devices {
        match gm::parse_device_list(v) {
            Ok(d) => b = b.visible_devices(d),
            Err(e) => return fail(2, e),
        }
    }
    if let Some(n) = args.num_devices {
        b = b.num_devices(n);
    }
    if let Some(d) = &args.lock_dir {
        b = b.lock_dir(d);
    }
    if let Some(t) = &args.timeout {
        match gm::parse_timeout_secs("--timeout", t) {
            Ok(t) => b = b.timeout(t),
            Err(e) => return fail(2, e),
        }
    }
    if args.backfill {
        b = b.backfill(true);
    }
    if args.status {
        return print_status(&args);
    }
    if args.cmd.is_empty() {
        return fail(
            2,
            "no command given (usage: gpumutex-run [OPTIONS] -- CMD [ARGS]...)",
        );
    }
    let token = match CancelToken::new() {
        Ok(t) => t,
        Err(e) => return fail(125, e),
    };
    let _ = CANCEL.set(token.clone());
    install_handlers();
    let mutex = match b.cancel_token(token).build() {
        Ok(m) => m,
        Err(e) => return fail(2, e),
    };
    let cfg = mutex.config().clone();
    let guard = match mutex.lock() {
        Ok(g) => g,
        Err(e @ Error::Timeout { .. }) => return fail(124, format!("{e}; command not run")),
        Err(Error::Cancelled) => {
            let sig = SIGNAL.load(Ordering::SeqCst);
            eprintln!("gpumutex-run: wait interrupted by signal {sig}; command not run");
            return ExitCode::from((128 + sig.clamp(0, 127)) as u8);
        }
        Err(e) if e.is_config_error() => return fail(2, e),
        Err(e) => return fail(125, e),
    };
    // Orphaned descendants of the command are re-parented to us: they stay in the tree that
    // shares the claim, and we wait for them before releasing it.
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return fail(
            125,
            format!(
                "cannot become a child subreaper: {}",
                std::io::Error::last_os_error()
            ),
        );
    }
    let mut cmd = Command::new(&args.cmd[0]);
    cmd.args(&args.cmd[1..]);
    guard.apply(&mut cmd);
    guard.hold_in(&mut cmd);
    let devs: Vec<String> = cfg.visible_devices.iter().map(|d| d.to_string()).collect();
    cmd.env(gm::ENV_VISIBLE_DEVICES, devs.join(","))
        .env(gm::ENV_NUM_DEVICES, guard.devices().len().to_string())
        .env(gm::ENV_LOCK_DIR, &cfg.lock_dir);
    let runner = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // syscalls (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The runner may have died before the death signal was armed.
            if libc::getppid() != runner {
                return Err(std::io::Error::other("gpumutex-run exited"));
            }
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return fail(code, format!("cannot run {:?}: {e}", args.cmd[0]));
        }
    };
    let child_pid = child.id() as libc::pid_t;
    CHILD.store(child_pid, Ordering::SeqCst);
    let mut status: Option<libc::c_int> = None;
    let mut announced = false;
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waits for any child of ours; `st` is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut st, 0) };
        if pid == child_pid {
            CHILD.store(0, Ordering::SeqCst);
            status = Some(st);
        }
        if pid > 0 {
            if status.is_some() && !announced {
                let rest = children();
                if !rest.is_empty() {
                    announced = true;
                    eprintln!(
                        "gpumutex-run: command exited; holding the devices until the {} remaining process(es) it started exit (pids {rest:?})",
                        rest.len()
                    );
                }
            }
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {
                let pending = PENDING.swap(0, Ordering::SeqCst);
                if status.is_some() {
                    for sig in FORWARDED {
                        if pending & (1 << sig) != 0 {
                            for pid in children() {
                                // SAFETY: kill(2) of a process re-parented to us.
                                unsafe { libc::kill(pid, sig) };
                            }
                        }
                    }
                }
            }
            Some(libc::ECHILD) => break,
            _ => return fail(125, format!("waiting for the command: {e}")),
        }
    }
    drop(guard);
    match status {
        Some(st) => exit_code(st),
        None => fail(125, "the command vanished without an exit status"),
    }
}
