//! `offload`: the command-line consumer of gpukit-offload.
//!
//! ```text
//! cargo run --release --example offload                 # demo workload through the dispatcher, results checked
//! cargo run --release --example offload -- calibrate [--quick] [--output PATH] [--budget S]
//! cargo run --release --example offload -- run python3 script.py   # under the LD_PRELOAD shim
//! cargo run --release --example offload -- explain      # crossover sizes from the profile
//! ```

use clap::{Parser, Subcommand};
use gpukit_offload::calibrate::{calibrate, python_libraries, CalibrateOptions, StartupFigures};
use gpukit_offload::cpu::{CpuBackend, CPU_LIB_ENV};
use gpukit_offload::model::required_speedup;
use gpukit_offload::output;
use gpukit_offload::profile::Profile;
use gpukit_offload::{c64, Config, Dispatcher, Offload, OpKind, Outcome, SvdJob, Trans, Uplo};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "offload",
    about = "Calibrated BLAS/LAPACK offload: CPU or GPU, whichever is faster here"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
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
    },
    /// Run a program under the LD_PRELOAD shim (CUDA starts at once in the background; prints
    /// the per-routine summary at exit; keeps the program's exit status).
    Run {
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
    /// Print the crossover sizes per routine, precision and CPU library from the profile.
    Explain,
}

/// Writes a line to stdout; a closed stdout (`offload explain | head`) ends the program
/// quietly instead of panicking.
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        None => match demo() {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Some(Cmd::Calibrate {
            quick,
            output,
            budget,
            python,
            libraries,
            cpu_only,
            only,
        }) => parse_only(only.as_deref()).and_then(|only| {
            run_calibrate(quick, output, budget, &python, &libraries, cpu_only, only)
        }),
        Some(Cmd::Run { cmd }) => return run_shim(&cmd),
        Some(Cmd::Explain) => explain(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::line(&format!("offload: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// The whole calibration: the GPU (started here, its start-up timed by phase) and `libs`.
fn calibrate_all(libs: &[&CpuBackend], opts: &CalibrateOptions) -> gpukit_offload::Result<Profile> {
    let t = Instant::now();
    let gpu = gpukit_offload::gpu::GpuBackend::start()?;
    let start_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    gpu.load_solver().map_err(|e| gpukit_offload::Error::Gpu {
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
fn find_libraries(python: &str, named: &[String]) -> gpukit_offload::Result<Vec<CpuBackend>> {
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
fn parse_only(only: Option<&str>) -> gpukit_offload::Result<Vec<OpKind>> {
    let Some(list) = only else {
        return Ok(Vec::new());
    };
    let kinds: Vec<OpKind> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|key| {
            OpKind::parse_key(key).ok_or_else(|| gpukit_offload::Error::Config {
                name: "--only",
                value: key.to_string(),
                msg:
                    "not an op kind: use a routine's stem (gemm, syev, potrf), with +v for vectors \
                      (syev+v) or +a for a full SVD (gesdd+a)"
                        .into(),
            })
        })
        .collect::<gpukit_offload::Result<_>>()?;
    if kinds.is_empty() {
        return Err(gpukit_offload::Error::Config {
            name: "--only",
            value: list.to_string(),
            msg: "names no op kind".into(),
        });
    }
    Ok(kinds)
}

fn run_calibrate(
    quick: bool,
    output: Option<PathBuf>,
    budget: Option<f64>,
    python: &str,
    named: &[String],
    cpu_only: Option<PathBuf>,
    only: Vec<OpKind>,
) -> gpukit_offload::Result<()> {
    let t0 = Instant::now();
    let libs = find_libraries(python, named)?;
    for l in &libs {
        output::line(&format!("offload: CPU library {}", l.describe()));
    }
    let mut opts = CalibrateOptions::new(quick);
    opts.only = only;
    // a log (not a terminal) gets one line per grid point instead of the progress bar
    opts.log_points = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    opts.progress = !opts.log_points;
    if let Some(b) = budget.filter(|b| b.is_finite() && *b > 0.0) {
        opts.budget = std::time::Duration::from_secs_f64(b);
    }
    let refs: Vec<&CpuBackend> = libs.iter().collect();
    let profile = match cpu_only {
        Some(base) => {
            let base = Profile::load(&base)?;
            gpukit_offload::calibrate::calibrate_cpu(&refs, &base, &opts)?
        }
        None => calibrate_all(&refs, &opts)?,
    };
    let path =
        output
            .or_else(Profile::default_path)
            .ok_or_else(|| gpukit_offload::Error::Config {
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
    ));
    Ok(())
}

fn run_shim(cmd: &[String]) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_default();
    let shim = exe.with_file_name("liboffload_preload.so");
    if !shim.exists() {
        output::line(&format!(
            "offload: the shim {} is missing; build it with `cargo build --release --examples`",
            shim.display()
        ));
        return ExitCode::FAILURE;
    }
    let mut preload = shim.display().to_string();
    if let Ok(old) = std::env::var("LD_PRELOAD") {
        if !old.is_empty() {
            preload = format!("{preload}:{old}");
        }
    }
    let mut c = std::process::Command::new(&cmd[0]);
    c.args(&cmd[1..]).env("LD_PRELOAD", preload);
    if std::env::var_os("GPUKIT_OFFLOAD_LOG").is_none() {
        c.env("GPUKIT_OFFLOAD_LOG", "summary");
    }
    // the user asked for offload: CUDA starts at once, in the background (a process without a
    // usable GPU finds that out at load time and never tries)
    if std::env::var_os("GPUKIT_OFFLOAD_START").is_none() {
        c.env("GPUKIT_OFFLOAD_START", "eager");
    }
    match c.status() {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            match (s.code(), s.signal()) {
                (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
                // as a shell reports it: 128 + the signal
                (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
                (None, None) => ExitCode::FAILURE,
            }
        }
        Err(e) => {
            output::line(&format!("offload: cannot run {}: {e}", cmd[0]));
            ExitCode::from(127)
        }
    }
}

fn explain() -> gpukit_offload::Result<()> {
    let d = Dispatcher::global();
    for w in d.warnings().iter().chain(d.notices()) {
        output::line(&format!("offload: {w}"));
    }
    let level = d.config().level;
    say(&format!(
        "profile: {}; level {level} (offload when predicted >= {:.2}x faster)",
        d.profile_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in default".into()),
        required_speedup(level)
    ));
    let m = d.model();
    let libs = m.libraries();
    if libs.is_empty() {
        say("no CPU curves for this machine: CPU times are learned from a program's own calls");
    }
    say(&format!(
        "{:<10} {:>4} {:<18} {:>12} {:>8} {:>8} {:>8}",
        "op", "prec", "CPU library", "crossover n", "x@1024", "x@4096", "x@8192"
    ));
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
                ));
            }
        }
    }
    say("(square calls; solves with nrhs = n; x@n = predicted GPU speedup, copies included)");
    Ok(())
}

fn fill(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect()
}

fn spd(n: usize, seed: u64) -> Vec<f64> {
    let mut a = fill(n * n, seed);
    for j in 0..n {
        for i in 0..j {
            a[i + j * n] = a[j + i * n];
        }
        a[j + j * n] += n as f64;
    }
    a
}

/// `y = op(A) x` for a column-major `rows x cols` A (`t`: transposed).
fn matvec(a: &[f64], rows: usize, cols: usize, x: &[f64], t: bool) -> Vec<f64> {
    if t {
        (0..cols)
            .map(|j| (0..rows).map(|i| a[i + j * rows] * x[i]).sum())
            .collect()
    } else {
        let mut y = vec![0.0; rows];
        for j in 0..cols {
            let xj = x[j];
            for i in 0..rows {
                y[i] += a[i + j * rows] * xj;
            }
        }
        y
    }
}

fn rel_err(x: &[f64], y: &[f64]) -> f64 {
    let num = x
        .iter()
        .zip(y)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let den = y.iter().map(|v| v.abs()).fold(0.0, f64::max).max(1e-300);
    num / den
}

/// One demo row: where it ran, and a check of the result against an independent computation.
struct Demo {
    failures: Vec<String>,
}

impl Demo {
    fn row(
        &mut self,
        name: &str,
        shape: &str,
        r: gpukit_offload::Result<Outcome>,
        err: f64,
        tol: f64,
    ) {
        match r {
            Ok(o) => {
                let ok = err.is_finite() && err <= tol;
                if !ok {
                    self.failures
                        .push(format!("{name} {shape}: error {err:.2e} > {tol:.0e}"));
                }
                say(&format!(
                    "{:<8} {:<20} {:<4} {:<18} {:>9.4}s  check {} ({err:.1e})",
                    name,
                    shape,
                    o.backend.as_str(),
                    o.reason.map(|r| r.as_str()).unwrap_or("model: gpu faster"),
                    o.seconds,
                    if ok { "ok" } else { "FAILED" },
                ))
            }
            Err(e) => {
                self.failures.push(format!("{name} {shape}: {e}"));
                say(&format!("{name:<8} {shape:<20} error: {e}"));
            }
        }
    }
}

/// Runs the demo; false when a result failed its check.
fn demo() -> gpukit_offload::Result<bool> {
    let off = Offload::with_config(Config {
        persist: false,
        ..Config::from_env().0
    });
    let d = off.dispatcher();
    let cpu = d.cpu_backend()?;
    say(&format!("CPU library: {}", cpu.describe()));
    // without a GPU every call runs on the CPU: smaller sizes show the same checks sooner
    let big = match d.start_gpu() {
        Ok(g) => {
            say(&format!(
                "GPU: {} (started for the demo; `offload run` starts it in the background)",
                g.name()
            ));
            true
        }
        Err(e) => {
            say(&format!(
                "no GPU here ({e}): every call runs on the CPU, at smaller sizes"
            ));
            false
        }
    };
    let large = if big { 4096 } else { 2048 };
    say(&format!(
        "{:<8} {:<20} {:<4} {:<18} {:>10}  check against an independent computation",
        "routine", "shape", "ran", "reason", "time"
    ));
    let mut demo = Demo {
        failures: Vec::new(),
    };
    let probe = fill(8192, 99);
    for n in [64usize, 512, 2048, large] {
        let a = fill(n * n, 1);
        let b = fill(n * n, 2);
        let mut c = vec![0.0; n * n];
        let r = off.gemm(
            Trans::No,
            Trans::No,
            n,
            n,
            n,
            1.0,
            &a,
            n,
            &b,
            n,
            0.0,
            &mut c,
            n,
        );
        // Freivalds: C x = A (B x)
        let x = &probe[..n];
        let err = rel_err(
            &matvec(&c, n, n, x, false),
            &matvec(&a, n, n, &matvec(&b, n, n, x, false), false),
        );
        demo.row("dgemm", &format!("{n}x{n}x{n}"), r, err, 1e-10);
    }
    {
        // a tiny inner dimension: judged by its shape, not its flops
        let (m, k) = (8192usize, 32usize);
        let a = fill(m * k, 3);
        let b = fill(k * m, 4);
        let mut c = vec![0.0; m * m];
        let r = off.gemm(
            Trans::No,
            Trans::No,
            m,
            m,
            k,
            1.0,
            &a,
            m,
            &b,
            k,
            0.0,
            &mut c,
            m,
        );
        let x = &probe[..m];
        let err = rel_err(
            &matvec(&c, m, m, x, false),
            &matvec(&a, m, k, &matvec(&b, k, m, x, false), false),
        );
        demo.row("dgemm", &format!("{m}x{m}x{k}"), r, err, 1e-10);
    }
    {
        let n = large;
        let a: Vec<f32> = fill(n * n, 5).into_iter().map(|x| x as f32).collect();
        let mut c = vec![0f32; n * n];
        let r = off.gemm(
            Trans::No,
            Trans::Trans,
            n,
            n,
            n,
            1.0f32,
            &a,
            n,
            &a,
            n,
            0.0,
            &mut c,
            n,
        );
        let a64: Vec<f64> = a.iter().map(|v| *v as f64).collect();
        let c64v: Vec<f64> = c.iter().map(|v| *v as f64).collect();
        let x = &probe[..n];
        let err = rel_err(
            &matvec(&c64v, n, n, x, false),
            &matvec(&a64, n, n, &matvec(&a64, n, n, x, true), false),
        );
        demo.row("sgemm", &format!("{n}x{n}x{n} (A A^T)"), r, err, 1e-3);
    }
    for n in [300usize, if big { 4000 } else { 2000 }] {
        let a0 = spd(n, 6);
        let mut l = a0.clone();
        let r = off.potrf(Uplo::Lower, n, &mut l, n);
        // L L^T x = A x
        for j in 0..n {
            for i in 0..j {
                l[i + j * n] = 0.0;
            }
        }
        let x = &probe[..n];
        let err = rel_err(
            &matvec(&l, n, n, &matvec(&l, n, n, x, true), false),
            &matvec(&a0, n, n, x, false),
        );
        demo.row("dpotrf", &format!("n={n}"), r, err, 1e-12);
    }
    {
        let (n, nrhs) = (3000usize, 16usize);
        let a0 = spd(n, 7);
        let b0 = fill(n * nrhs, 8);
        let (mut a, mut b) = (a0.clone(), b0.clone());
        let mut piv = vec![0i32; n];
        let r = off.gesv(n, nrhs, &mut a, n, &mut piv, &mut b, n);
        // A X = B, column by column
        let err = (0..nrhs)
            .map(|j| {
                rel_err(
                    &matvec(&a0, n, n, &b[j * n..(j + 1) * n], false),
                    &b0[j * n..(j + 1) * n],
                )
            })
            .fold(0.0, f64::max);
        demo.row("dgesv", &format!("n={n} nrhs={nrhs}"), r, err, 1e-10);
    }
    {
        let n = 1500;
        let a0 = spd(n, 9);
        let mut v = a0.clone();
        let mut w = vec![0.0; n];
        let r = off.syevd(true, Uplo::Lower, n, &mut v, n, &mut w);
        // A v_j = w_j v_j for a few eigenpairs
        let err = [0, n / 2, n - 1]
            .iter()
            .map(|&j| {
                let vj = &v[j * n..(j + 1) * n];
                let av = matvec(&a0, n, n, vj, false);
                let wv: Vec<f64> = vj.iter().map(|x| x * w[j]).collect();
                rel_err(&av, &wv)
            })
            .fold(0.0, f64::max);
        demo.row("dsyevd", &format!("n={n} vectors"), r, err, 1e-9);
    }
    {
        let (m, n) = (2000usize, 1000usize);
        let a0 = fill(m * n, 10);
        let mut a = a0.clone();
        let mut s = vec![0.0; n];
        let r = off.gesdd(
            SvdJob::None,
            m,
            n,
            &mut a,
            m,
            &mut s,
            &mut [],
            1,
            &mut [],
            1,
        );
        // sum of squared singular values = squared Frobenius norm
        let fro: f64 = a0.iter().map(|x| x * x).sum();
        let sv: f64 = s.iter().map(|x| x * x).sum();
        demo.row(
            "dgesdd",
            &format!("{m}x{n} values"),
            r,
            (fro - sv).abs() / fro,
            1e-10,
        );
    }
    {
        let n = 1024;
        let a: Vec<c64> = fill(2 * n * n, 11)
            .chunks(2)
            .map(|c| c64::new(c[0], c[1]))
            .collect();
        let mut c = vec![c64::default(); n * n];
        let one = c64::new(1.0, 0.0);
        let r = off.gemm(
            Trans::No,
            Trans::Conj,
            n,
            n,
            n,
            one,
            &a,
            n,
            &a,
            n,
            c64::default(),
            &mut c,
            n,
        );
        // C = A A^H is Hermitian with the squared row norms of A on its diagonal
        let err = (0..n)
            .map(|i| {
                let norm: f64 = (0..n)
                    .map(|j| {
                        let v = a[i + j * n];
                        v.re * v.re + v.im * v.im
                    })
                    .sum();
                let d = c[i + i * n];
                ((d.re - norm).abs() + d.im.abs()) / norm
            })
            .fold(0.0, f64::max);
        demo.row("zgemm", &format!("{n}x{n}x{n} (A A^H)"), r, err, 1e-10);
    }
    say("");
    for line in d.stats().summary().lines() {
        say(line);
    }
    if demo.failures.is_empty() {
        say("every result checked: ok");
    } else {
        output::line(&format!(
            "offload: results failed their checks: {}",
            demo.failures.join("; ")
        ));
    }
    Ok(demo.failures.is_empty())
}
