//! The `offload` command line (feature `cli`): `calibrate`, `run` and `explain`, parsed with
//! clap. [`main_with_args`] is the whole program; the `offload` example and the Python
//! package's console script both call it.
//!
//! It is written to be called from inside another process (a Python interpreter's console
//! script) and more than once: it never calls `process::exit`, keeps no state between calls
//! (`explain` reads the profile afresh into its own dispatcher instead of the process-wide
//! one), and a closed stdout ends a command quietly instead of panicking.

use crate::calibrate::{
    calibrate, calibrate_cpu, merge_into, python_libraries, CalibrateOptions, StartupFigures,
};
use crate::cpu::{CpuBackend, CPU_LIB_ENV};
use crate::dispatch::LogMode;
use crate::model::required_speedup;
use crate::profile::Profile;
use crate::{output, share, Config, Dispatcher, Error, OpKind, Result};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// The shim library's file name, looked for beside the current executable by default.
pub const PRELOAD_FILE: &str = "liboffload_preload.so";

#[derive(Parser)]
#[command(
    name = "offload",
    about = "Calibrated BLAS/LAPACK offload: CPU or GPU, whichever is faster here",
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure this machine (the GPU, and each CPU library found: the system one and those of
    /// python3's numpy and scipy) and write the profile (user config dir or
    /// GPUKIT_OFFLOAD_PROFILE).
    Calibrate {
        /// Smaller grids and a time budget (default 150 s).
        #[arg(long)]
        quick: bool,
        /// Write the profile here instead.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Stop measuring larger CPU sizes after this many seconds (default: 150 quick, 1500
        /// full); the rest are extrapolated.
        #[arg(long)]
        budget: Option<f64>,
        /// The Python whose numpy and scipy libraries are measured.
        #[arg(long, default_value = "python3")]
        python: String,
        /// Measure only these library files (repeatable) instead of searching.
        #[arg(long = "library")]
        libraries: Vec<String>,
        /// Measure the CPU libraries only, adding their curves to this profile of this machine
        /// (its GPU curves, copy and start-up figures are kept; no GPU needed).
        #[arg(long = "cpu-only", value_name = "PROFILE")]
        cpu_only: Option<PathBuf>,
        /// Measure only these op kinds, comma-separated model keys (`syev,syev+v`: a routine's
        /// stem, `+v` with vectors, `+a` for a full SVD); with --cpu-only the profile's curves of
        /// the other kinds are kept.
        #[arg(long, value_name = "KINDS")]
        only: Option<String>,
        /// Merge what this calibration measures into this profile of this machine: each
        /// measured curve replaces the rows of the profile's curve (same kind, precision,
        /// backend, library) it measured, everything else is kept. Written to --output, else
        /// back to PROFILE. With --gpu-only and --max-size: a refresh of the GPU curves of
        /// small sizes.
        #[arg(
            long = "merge-into",
            value_name = "PROFILE",
            conflicts_with = "cpu_only"
        )]
        merge_into: Option<PathBuf>,
        /// Measure the GPU only (no CPU library).
        #[arg(long = "gpu-only", conflicts_with_all = ["cpu_only", "libraries"])]
        gpu_only: bool,
        /// Leave out grid sizes whose first feature (the order, or m) is above this.
        #[arg(long = "max-size", value_name = "N")]
        max_size: Option<f64>,
    },
    /// Run a program under the LD_PRELOAD shim (CUDA starts at once in the background; the
    /// program's processes share the GPU through an MPS daemon of their own where
    /// nvidia-cuda-mps-control is on PATH, unless GPUKIT_OFFLOAD_SHARE=off; prints the
    /// per-routine summary at exit; keeps the program's exit status).
    Run {
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<OsString>,
    },
    /// Print the crossover sizes per routine, precision and CPU library from the profile.
    Explain,
}

/// stdout was closed (`offload explain | head`): the command ends quietly, successfully.
struct Closed;

/// Writes a line to stdout.
fn say(text: &str) -> std::result::Result<(), Closed> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|_| out.flush())
        .map_err(|_| Closed)
}

/// The `offload` program: `args` as a process gets them (argv\[0\] first), `preload` the shim
/// library (`None`: [`PRELOAD_FILE`] beside the current executable). Returns the exit status:
/// 0 on success, 1 on an error (printed on stderr), 2 for a usage error, the program's own for
/// `run` (128 + the signal when a signal ended it, 127 when it cannot be started).
pub fn main_with_args<I: IntoIterator<Item = OsString>>(args: I, preload: Option<PathBuf>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // --help / --version go to stdout with status 0, usage errors to stderr with 2
            let _ = e.print();
            return e.exit_code();
        }
    };
    let r = match cli.cmd {
        Cmd::Calibrate {
            quick,
            output,
            budget,
            python,
            libraries,
            cpu_only,
            only,
            merge_into,
            gpu_only,
            max_size,
        } => parse_only(only.as_deref()).and_then(|only| {
            run_calibrate(&CalibrateArgs {
                quick,
                output,
                budget,
                python,
                libraries,
                cpu_only,
                only,
                merge_into,
                gpu_only,
                max_size,
            })
        }),
        Cmd::Run { cmd } => return run_shim(&cmd, preload),
        Cmd::Explain => explain(),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            output::line(&format!("offload: {e}"));
            1
        }
    }
}

/// The whole calibration: the GPU (started here, its start-up timed by phase) and `libs`.
fn calibrate_all(libs: &[&CpuBackend], opts: &CalibrateOptions) -> Result<Profile> {
    let t = Instant::now();
    let gpu = crate::gpu::GpuBackend::start()?;
    let start_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    gpu.load_solver().map_err(|e| Error::Gpu {
        what: "loading cuSOLVER",
        detail: e.to_string(),
    })?;
    let solver_s = t.elapsed().as_secs_f64();
    output::line(&format!(
        "offload: GPU {} started in {start_s:.3}s, cuSOLVER in {solver_s:.3}s ({})",
        gpu.name(),
        gpu.startup_report()
    ));
    calibrate(libs, &gpu, StartupFigures { start_s, solver_s }, opts)
}

/// The CPU libraries to calibrate: `--library` files, else GPUKIT_OFFLOAD_CPU_LIB alone (an
/// error if it cannot be used), else the system library and those python's numpy and scipy
/// load (each file once); the embedded backend when there is none.
fn find_libraries(python: &str, named: &[String]) -> Result<Vec<CpuBackend>> {
    if !named.is_empty() {
        return named
            .iter()
            .map(|p| CpuBackend::open(&[p.as_str()]))
            .collect();
    }
    if std::env::var_os(CPU_LIB_ENV).is_some_and(|v| !v.is_empty()) {
        return Ok(vec![CpuBackend::discover()?]);
    }
    let mut libs = Vec::new();
    if let Ok(b) = CpuBackend::system() {
        libs.push(b);
    }
    for path in python_libraries(python) {
        match CpuBackend::open(&[path.as_str()]) {
            Ok(b)
                if !libs
                    .iter()
                    .any(|l: &CpuBackend| l.lib().key() == b.lib().key()) =>
            {
                libs.push(b)
            }
            _ => {}
        }
    }
    if libs.is_empty() {
        libs.push(CpuBackend::embedded());
    }
    Ok(libs)
}

/// `--only`'s kinds (empty without the option); a key the model does not know is an error.
fn parse_only(only: Option<&str>) -> Result<Vec<OpKind>> {
    let Some(list) = only else {
        return Ok(Vec::new());
    };
    let kinds: Vec<OpKind> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|key| {
            OpKind::parse_key(key).ok_or_else(|| Error::Config {
                name: "--only",
                value: key.to_string(),
                msg:
                    "not an op kind: use a routine's stem (gemm, syev, potrf), with +v for vectors \
                      (syev+v) or +a for a full SVD (gesdd+a)"
                        .into(),
            })
        })
        .collect::<Result<_>>()?;
    if kinds.is_empty() {
        return Err(Error::Config {
            name: "--only",
            value: list.to_string(),
            msg: "names no op kind".into(),
        });
    }
    Ok(kinds)
}

/// `calibrate`'s options, parsed.
struct CalibrateArgs {
    quick: bool,
    output: Option<PathBuf>,
    budget: Option<f64>,
    python: String,
    libraries: Vec<String>,
    cpu_only: Option<PathBuf>,
    only: Vec<OpKind>,
    merge_into: Option<PathBuf>,
    gpu_only: bool,
    max_size: Option<f64>,
}

fn run_calibrate(a: &CalibrateArgs) -> Result<()> {
    let t0 = Instant::now();
    if let Some(m) = a.max_size.filter(|m| !(m.is_finite() && *m >= 1.0)) {
        return Err(Error::Config {
            name: "--max-size",
            value: m.to_string(),
            msg: "a size of at least 1".into(),
        });
    }
    // the profile to merge into is read first: a bad one costs no measurement
    let merge_base = a.merge_into.as_deref().map(Profile::load).transpose()?;
    let libs = if a.gpu_only {
        Vec::new()
    } else {
        find_libraries(&a.python, &a.libraries)?
    };
    let out = |_: Closed| ();
    for l in &libs {
        output::line(&format!("offload: CPU library {}", l.describe()));
    }
    let mut opts = CalibrateOptions::new(a.quick);
    opts.only = a.only.clone();
    // a log (not a terminal) gets one line per grid point instead of the progress bar
    opts.log_points = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    opts.progress = !opts.log_points;
    if let Some(b) = a.budget.filter(|b| b.is_finite() && *b > 0.0) {
        opts.budget = std::time::Duration::from_secs_f64(b);
    }
    opts.max_x1 = a.max_size;
    let refs: Vec<&CpuBackend> = libs.iter().collect();
    let mut profile = match &a.cpu_only {
        Some(base) => calibrate_cpu(&refs, &Profile::load(base)?, &opts)?,
        None => calibrate_all(&refs, &opts)?,
    };
    if let Some(base) = &merge_base {
        let (merged, notes) = merge_into(base, &profile)?;
        for n in notes {
            output::line(&format!("offload: merge: {n}"));
        }
        profile = merged;
    }
    let path = a
        .output
        .clone()
        .or_else(|| a.merge_into.clone())
        .or_else(Profile::default_path)
        .ok_or_else(|| Error::Config {
            name: "profile path",
            value: String::new(),
            msg: "no config directory; pass --output".into(),
        })?;
    profile.save(&path)?;
    say(&format!(
        "offload: calibrated {} curves for {} CPU libraries in {:.1}s (total {:.1}s); copies {:.1} GB/s in, {:.1} GB/s out; profile written to {}",
        profile.curves.len(),
        libs.len(),
        profile.calibration_s,
        t0.elapsed().as_secs_f64(),
        profile.copy.h2d_bytes_per_s / 1e9,
        profile.copy.d2h_bytes_per_s / 1e9,
        path.display()
    ))
    .unwrap_or_else(out);
    Ok(())
}

/// The shim to preload: `preload`, else [`PRELOAD_FILE`] beside the current executable.
fn shim_path(preload: Option<PathBuf>) -> Option<PathBuf> {
    preload.or_else(|| {
        std::env::current_exe()
            .ok()
            .map(|exe| exe.with_file_name(PRELOAD_FILE))
    })
}

fn run_shim(cmd: &[OsString], preload: Option<PathBuf>) -> i32 {
    let Some(shim) = shim_path(preload).filter(|p| p.is_file()) else {
        output::line(&format!(
            "offload: the shim {PRELOAD_FILE} is missing beside this program; build it with `cargo build --release --examples` (or pass its path)"
        ));
        return 1;
    };
    let mut value = shim.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(old);
    }
    let mut c = std::process::Command::new(&cmd[0]);
    c.args(&cmd[1..]).env("LD_PRELOAD", value);
    if std::env::var_os("GPUKIT_OFFLOAD_LOG").is_none() {
        c.env("GPUKIT_OFFLOAD_LOG", "summary");
    }
    // the user asked for offload: CUDA starts in the background at load in the process this
    // command starts, or at its first BLAS/LAPACK call where that is a shell or another
    // launcher (a process without a usable GPU finds that out at load time and never tries);
    // its descendants start CUDA at their first call that pays on the GPU
    // (crate::dispatch::start_for)
    if std::env::var_os("GPUKIT_OFFLOAD_START").is_none() {
        c.env("GPUKIT_OFFLOAD_START", "eager").env(
            crate::dispatch::EAGER_PARENT_ENV,
            std::process::id().to_string(),
        );
    }
    // the wrapper reads its own settings only: the CPU library is the program's to open
    let (cfg, _) =
        Config::from_vars(|k| (k != CPU_LIB_ENV).then(|| std::env::var(k).ok()).flatten());
    let quiet = std::env::var_os("GPUKIT_OFFLOAD_LOG").is_some() && cfg.log == LogMode::Off;
    // the program's processes share the GPU through a daemon of its own (crate::share)
    let daemon = match share::plan(
        cfg.share,
        cfg.gpu,
        |k| std::env::var_os(k),
        |p| p.exists(),
        share::on_path,
    ) {
        share::Plan::Start(control) => match share::Daemon::start(&control) {
            Ok(d) => Some(d),
            Err(e) => {
                if !quiet {
                    output::line(&format!(
                        "offload: the program's processes do not share the GPU ({e}); each starts a CUDA context of its own (GPUKIT_OFFLOAD_SHARE=off: no daemon is tried)"
                    ));
                }
                None
            }
        },
        share::Plan::Skip(_) => None,
    };
    if let Some(d) = &daemon {
        c.envs(d.env());
    }
    let ran = crate::child::run(&mut c);
    if let Some(d) = daemon {
        if let Err(e) = d.stop() {
            if !quiet {
                output::line(&format!("offload: stopping the program's MPS daemon: {e}"));
            }
        }
    }
    match ran {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            match (s.code(), s.signal()) {
                (Some(code), _) => code.clamp(0, 255),
                // as a shell reports it: 128 + the signal
                (None, Some(sig)) => (128 + sig).clamp(0, 255),
                (None, None) => 1,
            }
        }
        Err(e) => {
            output::line(&format!(
                "offload: cannot run {}: {e}",
                cmd[0].to_string_lossy()
            ));
            127
        }
    }
}

fn explain() -> Result<()> {
    match explain_lines() {
        Ok(()) | Err(Closed) => Ok(()),
    }
}

fn explain_lines() -> std::result::Result<(), Closed> {
    // a dispatcher of its own, read afresh: a second call in one process sees a profile the
    // first one (or a calibration between them) wrote
    let (cfg, errs) = Config::from_env();
    let d = Dispatcher::new(Config {
        persist: false,
        ..cfg
    });
    for w in errs
        .iter()
        .map(|e| e.to_string())
        .chain(d.warnings().iter().cloned())
        .chain(d.notices().iter().cloned())
    {
        output::line(&format!("offload: {w}"));
    }
    let level = d.config().level;
    say(&format!(
        "profile: {}; level {level} (offload when predicted >= {:.2}x faster)",
        d.profile_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in default".into()),
        required_speedup(level)
    ))?;
    let m = d.model();
    let libs = m.libraries();
    if libs.is_empty() {
        say("no CPU curves for this machine: CPU times are learned from a program's own calls")?;
    }
    say(&format!(
        "{:<10} {:>4} {:<18} {:>12} {:>8} {:>8} {:>8}",
        "op", "prec", "CPU library", "crossover n", "x@1024", "x@4096", "x@8192"
    ))?;
    for lib in libs {
        for kind in OpKind::all() {
            for &p in kind.routine.precisions() {
                let sp = |x: f64| {
                    let x2 = if kind.routine.one_feature() || kind.routine.aspect_feature() {
                        1.0
                    } else {
                        x
                    };
                    m.estimate(kind, p, kind.canonical_shape(x, x2), lib)
                        .filter(|e| e.cpu_known)
                        .map(|e| e.speedup())
                };
                let cross = (0..=48)
                    .map(|e| 32.0 * 2f64.powf(e as f64 / 6.0))
                    .find(|&x| sp(x).is_some_and(|s| s >= required_speedup(level)))
                    .map(|x| (x.round() as u64).to_string())
                    .unwrap_or_else(|| "never".into());
                let f = |x: f64| {
                    sp(x)
                        .map(|s| format!("{s:.2}"))
                        .unwrap_or_else(|| "-".into())
                };
                say(&format!(
                    "{:<10} {:>4} {:<18} {:>12} {:>8} {:>8} {:>8}",
                    kind.key(),
                    p.letter(),
                    lib.as_str(),
                    cross,
                    f(1024.0),
                    f(4096.0),
                    f(8192.0)
                ))?;
            }
        }
    }
    say("(square calls; solves with nrhs = n; x@n = predicted GPU speedup, copies included)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    /// A shared library certainly loadable in a child process: this process's libc.
    fn some_library() -> PathBuf {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
            .map(PathBuf::from)
            .expect("libc in the memory map")
    }

    /// Usage errors and --help return their status instead of exiting the process, and a
    /// second call behaves as the first.
    #[test]
    fn usage_and_help_return_a_status_twice() {
        for _ in 0..2 {
            assert_eq!(main_with_args(args(&["offload"]), None), 2);
            assert_eq!(
                main_with_args(args(&["offload", "no-such-command"]), None),
                2
            );
            assert_eq!(main_with_args(args(&["offload", "run"]), None), 2);
            assert_eq!(main_with_args(args(&["offload", "--help"]), None), 0);
        }
    }

    /// `run` preloads the library it is given, keeps the program's status (and 128 + a signal),
    /// and works the same the second time.
    #[test]
    fn run_preloads_the_given_shim_and_keeps_the_status() {
        let _turn = crate::child::tests::PROGRAMS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let lib = some_library();
        let script = format!(
            "case \"$LD_PRELOAD\" in '{}'*) ;; *) exit 99;; esac; [ \"$GPUKIT_OFFLOAD_LOG\" = summary ] || [ -n \"$OUTER_LOG\" ] || exit 98; exit 7",
            lib.display()
        );
        for _ in 0..2 {
            let code = main_with_args(
                args(&["offload", "run", "sh", "-c", &script]),
                Some(lib.clone()),
            );
            if std::env::var_os("GPUKIT_OFFLOAD_LOG").is_none() {
                assert_eq!(code, 7);
            } else {
                assert!(code == 7 || code == 98, "{code}");
            }
        }
        let killed = main_with_args(
            args(&["offload", "run", "sh", "-c", "kill -TERM $$"]),
            Some(lib.clone()),
        );
        assert_eq!(killed, 128 + libc::SIGTERM);
        let missing = main_with_args(args(&["offload", "run", "/nonexistent/program"]), Some(lib));
        assert_eq!(missing, 127);
    }

    /// While the program runs, SIGINT and SIGQUIT sent to the wrapper's process group reach
    /// the program alone (the wrapper waits on and reports the program's status; before, it
    /// died at once), SIGTERM and SIGHUP sent to the wrapper reach the program, and the program
    /// starts with the default dispositions; afterwards the wrapper's own are back.
    #[test]
    fn run_keeps_waiting_through_an_interrupt_and_passes_termination_on() {
        let _turn = crate::child::tests::PROGRAMS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // a test binary run in the background has SIGINT and SIGQUIT ignored from the start,
        // which the program would keep (ignored stays ignored): this test is about a wrapper
        // started from a terminal
        crate::child::unignore_for_tests();
        let lib = some_library();
        let run = |script: &str| {
            main_with_args(
                args(&["offload", "run", "sh", "-c", script]),
                Some(lib.clone()),
            )
        };
        // the program interrupts its parent (the wrapper: this test process) and then itself
        assert_eq!(
            run("trap 'exit 7' INT; kill -INT $PPID; kill -INT $$; sleep 1; exit 9"),
            7
        );
        // SIGINT's default in the program: it ends by the signal
        assert_eq!(run("kill -INT $$; sleep 1; exit 9"), 128 + libc::SIGINT);
        // SIGTERM to the wrapper alone is passed on to the program
        assert_eq!(
            run("trap 'exit 5' TERM; kill -TERM $PPID; sleep 1; exit 9"),
            5
        );
        assert_eq!(
            run("trap 'exit 6' HUP; kill -HUP $PPID; sleep 1; exit 9"),
            6
        );
        // this process's dispositions are its own again
        for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: sigaction is plain data; zeroed is a valid value for it.
            let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the disposition into `now`, of this frame.
            let r = unsafe { libc::sigaction(sig, std::ptr::null(), &mut now) };
            assert_eq!(r, 0);
            assert_ne!(now.sa_sigaction, libc::SIG_IGN, "signal {sig} left ignored");
        }
    }

    /// A shim that is not there: status 1, nothing run.
    #[test]
    fn run_without_the_shim_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let code = main_with_args(
            args(&["offload", "run", "touch", marker.to_str().unwrap()]),
            Some(dir.path().join("liboffload_preload.so")),
        );
        assert_eq!(code, 1);
        assert!(!marker.exists());
    }

    /// `calibrate --only` with a key the model does not know: status 1, no profile written.
    #[test]
    fn calibrate_with_an_unknown_kind_fails_before_measuring() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p.json");
        let code = main_with_args(
            args(&[
                "offload",
                "calibrate",
                "--only",
                "gemm,nonsense",
                "--output",
                out.to_str().unwrap(),
            ]),
            None,
        );
        assert_eq!(code, 1);
        assert!(!out.exists());
    }

    /// `--merge-into` a profile that cannot be read, and a size below 1, fail before measuring
    /// and write nothing; `--gpu-only` with `--library` or `--cpu-only` is a usage error.
    #[test]
    fn calibrate_merge_options_fail_before_measuring() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("p.json");
        let missing = dir.path().join("missing.json");
        let o = out.to_str().unwrap();
        for (extra, want) in [
            (vec!["--merge-into", missing.to_str().unwrap()], 1),
            (vec!["--gpu-only", "--max-size", "0"], 1),
            (vec!["--gpu-only", "--library", "/x.so"], 2),
            (vec!["--gpu-only", "--cpu-only", "/x.json"], 2),
            (vec!["--merge-into", "/a.json", "--cpu-only", "/b.json"], 2),
        ] {
            let mut a = vec!["offload", "calibrate", "--output", o];
            a.extend(extra.iter().copied());
            assert_eq!(main_with_args(args(&a), None), want, "{extra:?}");
            assert!(!out.exists(), "{extra:?} wrote a profile");
        }
    }
}
