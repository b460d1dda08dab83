//! `gpumutex-run`'s command line (feature `cli`): run a command with exclusive use of GPU
//! devices.
//!
//! ```text
//! gpumutex-run [--visible-devices D] [--num-devices N] [--lock-dir DIR] [--timeout SECS]
//!              [--backfill] [--status] -- CMD ARGS...
//! ```
//!
//! Waits in FIFO order for `N` of the devices `D` (default: `GPUMUTEX_*` environment variables),
//! runs `CMD` with [`crate::GpuGuard::child_env`] set (`CUDA_VISIBLE_DEVICES` and the
//! `GPUMUTEX_*` variables, so a preloaded `gpumutex_preload` in the command shares the claim),
//! and holds the devices until `CMD` **and every process it started** have exited; then returns
//! `CMD`'s status.
//!
//! * The runner is a child subreaper (`PR_SET_CHILD_SUBREAPER`): descendants of `CMD` that
//!   daemonize (`setsid cmd &`, double fork) are re-parented to it, and it waits for all of
//!   them before it releases the devices.
//! * `CMD` dies with the runner's thread (`PR_SET_PDEATHSIG`, `SIGKILL`), and `CMD` inherits the
//!   claim's tree lock ([`crate::GpuGuard::hold_in`]): if the runner is killed, whatever of the
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
//!
//! ## Embedding
//!
//! [`main_with_args`] is the whole program and behaves the same inside another process (the
//! Python package's console script): it never exits the process, it installs its three signal
//! handlers and the subreaper flag only for the duration of the call and restores what was
//! there before, and it waits only for its own command and for processes re-parented to it
//! while it runs (children the embedding process already had are left alone; one it starts from
//! another thread *during* the call is taken for part of the command's tree and waited for).
//! One call at a time per process: a second concurrent call returns 125.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use clap::Parser;

use crate::config;
use crate::devices::{self, DeviceSource};
use crate::error::Error;
use crate::mutex::GpuMutex;
use crate::status;

mod signals;
mod tree;

#[derive(Parser, Debug)]
#[command(
    name = "gpumutex-run",
    about = "Run a command with exclusive, fairly queued use of GPU devices",
    override_usage = "gpumutex-run [OPTIONS] -- CMD [ARGS]...\n       gpumutex-run [OPTIONS] --status"
)]
struct Args {
    /// Devices to manage: indices in this process's CUDA numbering (e.g. 0,2,3), GPU-/MIG- UUIDs, or all [env: GPUMUTEX_VISIBLE_DEVICES]
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

/// Exit code for bad arguments or configuration.
pub const EXIT_USAGE: i32 = 2;
/// Exit code when `--timeout` expired (the command was not run).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code for other lock errors.
pub const EXIT_LOCK_ERROR: i32 = 125;
/// Exit code when the command cannot be executed.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// Exit code when the command is not found.
pub const EXIT_NOT_FOUND: i32 = 127;

fn fail(code: i32, msg: impl std::fmt::Display) -> i32 {
    eprintln!("gpumutex-run: {msg}");
    code
}

/// Runs `gpumutex-run` with `args` (`args[0]` is the program name) and returns its exit code
/// (see the module docs). Never exits the process and never panics on any input.
pub fn main_with_args<I: IntoIterator<Item = OsString>>(args: I) -> i32 {
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            // `--help` and `--version` print to stdout and exit 0; errors print usage, exit 2.
            let _ = e.print();
            return e.exit_code();
        }
    };
    run(&args)
}

/// `--status`: reads the directory only (it never creates it, and works on a directory the
/// lock itself would refuse, saying why).
fn print_status(args: &Args) -> i32 {
    let dir = args
        .lock_dir
        .clone()
        .or_else(|| std::env::var_os(config::ENV_LOCK_DIR).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_LOCK_DIR));
    let visible = match args
        .visible_devices
        .clone()
        .or_else(|| std::env::var(config::ENV_VISIBLE_DEVICES).ok())
    {
        Some(v) => match devices::parse_visible(&v) {
            Ok(d) => Some(d),
            Err(e) => return fail(EXIT_USAGE, e),
        },
        None => None,
    };
    let source = match std::env::var(devices::ENV_DEVICE_SOURCE) {
        Ok(s) => match DeviceSource::parse(&s) {
            Ok(s) => s,
            Err(e) => return fail(EXIT_USAGE, e),
        },
        Err(_) => DeviceSource::Auto,
    };
    if std::fs::symlink_metadata(&dir).is_err() {
        println!(
            "lock directory: {} (does not exist: nothing held, nobody waiting)",
            dir.display()
        );
        return 0;
    }
    match status::read_status_with(&dir, visible.as_ref(), &source) {
        Ok(s) => {
            print!("{s}");
            0
        }
        Err(e) => fail(EXIT_LOCK_ERROR, e),
    }
}

fn run(args: &Args) -> i32 {
    let mut b = GpuMutex::builder();
    if let Some(v) = &args.visible_devices {
        match b.visible_device_list(v) {
            Ok(with) => b = with,
            Err(e) => return fail(EXIT_USAGE, e),
        }
    }
    if let Some(n) = args.num_devices {
        b = b.num_devices(n);
    }
    if let Some(d) = &args.lock_dir {
        b = b.lock_dir(d);
    }
    if let Some(t) = &args.timeout {
        match config::parse_timeout_secs("--timeout", t) {
            Ok(t) => b = b.timeout(t),
            Err(e) => return fail(EXIT_USAGE, e),
        }
    }
    if args.backfill {
        b = b.backfill(true);
    }
    if args.status {
        return print_status(args);
    }
    let Some((program, rest)) = args.cmd.split_first() else {
        return fail(
            EXIT_USAGE,
            "no command given (usage: gpumutex-run [OPTIONS] -- CMD [ARGS]...)",
        );
    };
    // Handlers from here on, restored when `signals` is dropped (on every return path).
    let signals = match signals::Signals::enter() {
        Ok(s) => s,
        Err(msg) => return fail(EXIT_LOCK_ERROR, msg),
    };
    let mutex = match b.cancel_token(signals.token()).build() {
        Ok(m) => m,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    let guard = match mutex.lock() {
        Ok(g) => g,
        Err(e @ Error::Timeout { .. }) => {
            return fail(EXIT_TIMEOUT, format!("{e}; command not run"))
        }
        Err(Error::Cancelled) => {
            let sig = signals.last_signal();
            eprintln!("gpumutex-run: wait interrupted by signal {sig}; command not run");
            return 128 + sig.clamp(0, 127);
        }
        Err(e) if e.is_config_error() => return fail(EXIT_USAGE, e),
        Err(e) => return fail(EXIT_LOCK_ERROR, e),
    };
    // Orphaned descendants of the command are re-parented to us: they stay in the tree that
    // shares the claim, and we wait for them before releasing it.
    let reaper = match tree::Subreaper::enter() {
        Ok(r) => r,
        Err(e) => {
            return fail(
                EXIT_LOCK_ERROR,
                format!("cannot become a child subreaper: {e}"),
            )
        }
    };
    let before = tree::children();
    let mut cmd = Command::new(program);
    cmd.args(rest);
    guard.apply(&mut cmd);
    guard.hold_in(&mut cmd);
    // SAFETY: getpid has no preconditions.
    let runner = unsafe { libc::getpid() };
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
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXECUTE
            };
            return fail(code, format!("cannot run {program:?}: {e}"));
        }
    };
    let child_pid = child.id() as libc::pid_t;
    // `child` is only a pid from here on: the tree waiter reaps it.
    drop(child);
    signals.set_child(child_pid);
    let status = tree::wait(child_pid, &before, &signals);
    signals.set_child(0);
    // Release the devices once the whole tree has exited, then stop being a subreaper and put
    // the signal handlers back (in this order: nothing of the tree is left to re-parent).
    drop(guard);
    drop(reaper);
    drop(signals);
    match status {
        Ok(st) => exit_code(st),
        Err(msg) => fail(EXIT_LOCK_ERROR, msg),
    }
}

fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status).clamp(0, 127)
    } else {
        EXIT_LOCK_ERROR
    }
}
