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
//! command shares the claim), holds the devices until `CMD` exits and exits with its status.
//!
//! Exit codes: `CMD`'s own code; `128 + signal` if `CMD` died from a signal; `124` if
//! `--timeout` expired (the command is not run); `128 + signal` if SIGINT/SIGTERM/SIGHUP
//! ended the wait (the command is not run); `2` for bad arguments or configuration; `125` for
//! other lock errors; `126`/`127` if `CMD` cannot be executed / is not found.
//!
//! Signals: while waiting, SIGINT (Ctrl-C), SIGTERM and SIGHUP end the wait at once. While
//! `CMD` runs, SIGTERM and SIGHUP are forwarded to it; SIGINT is not (a terminal delivers
//! Ctrl-C to the whole foreground process group, `CMD` included), and the runner keeps waiting
//! for `CMD` so the devices stay held until it exits. The runner makes itself a child subreaper,
//! so descendants of `CMD` that daemonize stay in its process tree and keep sharing the claim.

use std::ffi::OsString;
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
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    if let Some(t) = CANCEL.get() {
        t.cancel();
    }
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 && sig != libc::SIGINT {
        // SAFETY: kill() is async-signal-safe; `child` is our own child's pid.
        unsafe { libc::kill(child, sig) };
    }
}

fn install_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler only calls
        // async-signal-safe functions (atomic stores, write(2) via CancelToken::cancel, kill(2)).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("gpumutex-run: {msg}");
    ExitCode::from(code)
}

fn print_status(args: &Args, mutex: Option<&GpuMutex>) -> ExitCode {
    let result = match mutex {
        Some(m) => m.status(),
        None => {
            let dir = args
                .lock_dir
                .clone()
                .or_else(|| std::env::var_os(gm::ENV_LOCK_DIR).map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from(gm::DEFAULT_LOCK_DIR));
            if !dir.exists() {
                println!(
                    "lock directory: {} (does not exist: nothing held, nobody waiting)",
                    dir.display()
                );
                return ExitCode::SUCCESS;
            }
            gm::status(&dir, &[])
        }
    };
    match result {
        Ok(s) => {
            print!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(125, e),
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
        match gm::config::parse_timeout_secs("--timeout", t) {
            Ok(t) => b = b.timeout(t),
            Err(e) => return fail(2, e),
        }
    }
    if args.backfill {
        b = b.backfill(true);
    }
    let token = match CancelToken::new() {
        Ok(t) => t,
        Err(e) => return fail(125, e),
    };
    let _ = CANCEL.set(token.clone());
    let mutex = match b.cancel_token(token).build() {
        Ok(m) => Some(m),
        Err(Error::NoVisibleDevices) if args.status => None,
        Err(e) => return fail(2, e),
    };
    if args.status {
        return print_status(&args, mutex.as_ref());
    }
    let Some(mutex) = mutex else {
        return fail(2, Error::NoVisibleDevices);
    };
    if args.cmd.is_empty() {
        return fail(
            2,
            "no command given (usage: gpumutex-run [OPTIONS] -- CMD [ARGS]...)",
        );
    }
    install_handlers();
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
    // Orphaned descendants of the command are re-parented to us, so they stay in the tree
    // that shares the claim.
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let mut cmd = Command::new(&args.cmd[0]);
    cmd.args(&args.cmd[1..]);
    guard.apply(&mut cmd);
    let devs: Vec<String> = cfg.visible_devices.iter().map(|d| d.to_string()).collect();
    cmd.env(gm::ENV_VISIBLE_DEVICES, devs.join(","))
        .env(gm::ENV_NUM_DEVICES, guard.devices().len().to_string())
        .env(gm::ENV_LOCK_DIR, &cfg.lock_dir);
    let mut child = match cmd.spawn() {
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
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return fail(125, format!("waiting for the command: {e}")),
        }
    };
    CHILD.store(0, Ordering::SeqCst);
    // Reap orphans that were re-parented to us and already exited.
    // SAFETY: waitpid with WNOHANG on any child; the status pointer may be null.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
    drop(guard);
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig.clamp(0, 127)) as u8),
        _ => ExitCode::from(125),
    }
}
