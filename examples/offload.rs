//! `offload`: the command-line consumer of gpukit-offload.
//!
//! ```text
//! cargo run --release --example offload                 # demo workload through the dispatcher
//! cargo run --release --example offload -- calibrate [--quick] [--output PATH]
//! cargo run --release --example offload -- run python3 script.py   # under the LD_PRELOAD shim
//! cargo run --release --example offload -- explain      # crossover sizes from the profile
//! ```

use clap::{Parser, Subcommand};
use gpukit_offload::calibrate::{calibrate, CalibrateOptions};
use gpukit_offload::cpu::{CpuBackend, CPU_LIB_ENV};
use gpukit_offload::model::required_speedup;
use gpukit_offload::profile::Profile;
use gpukit_offload::{
    c64, Config, Dispatcher, Offload, OpKind, Outcome, Precision, Routine, SvdJob, Trans, Uplo,
};
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
    /// Measure this machine and write the profile (user config dir or GPUKIT_OFFLOAD_PROFILE).
    Calibrate {
        /// Smaller grids, under 3 minutes.
        #[arg(long)]
        quick: bool,
        /// Write the profile here instead.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Stop adding larger sizes after this many seconds (default: 150 quick, 1500 full).
        #[arg(long)]
        budget: Option<f64>,
    },
    /// Run a program under the LD_PRELOAD shim (prints the per-routine summary at exit).
    Run {
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<String>,
    },
    /// Print the crossover sizes per routine and precision from the current profile.
    Explain,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        None => demo(),
        Some(Cmd::Calibrate {
            quick,
            output,
            budget,
        }) => run_calibrate(quick, output, budget),
        Some(Cmd::Run { cmd }) => return run_shim(&cmd),
        Some(Cmd::Explain) => explain(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("offload: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The CPU library: GPUKIT_OFFLOAD_CPU_LIB, the system OpenBLAS/LAPACK, else the OpenBLAS that
/// python3's numpy bundles (the library numpy programs use, so the best one to calibrate).
fn find_cpu() -> gpukit_offload::Result<CpuBackend> {
    if let Ok(b) = CpuBackend::discover() {
        return Ok(b);
    }
    let out = std::process::Command::new("python3")
        .args(["-c", "import numpy, os, glob; d = os.path.join(os.path.dirname(numpy.__file__), os.pardir, 'numpy.libs'); print('\\n'.join(glob.glob(os.path.join(d, 'libscipy_openblas*.so'))))"])
        .output();
    if let Ok(o) = out {
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            if let Ok(b) = CpuBackend::open(&[line.trim()]) {
                return Ok(b);
            }
        }
    }
    CpuBackend::discover()
}

fn run_calibrate(
    quick: bool,
    output: Option<PathBuf>,
    budget: Option<f64>,
) -> gpukit_offload::Result<()> {
    let t0 = Instant::now();
    let cpu = find_cpu()?;
    // make the typed API of this process use the same library
    std::env::set_var(CPU_LIB_ENV, cpu.path());
    eprintln!(
        "offload: CPU library {} ({})",
        cpu.path(),
        if cpu.ilp64() { "ILP64" } else { "LP64" }
    );
    let t = Instant::now();
    let gpu = gpukit_offload::gpu::GpuBackend::start()?;
    let startup = t.elapsed().as_secs_f64();
    eprintln!("offload: GPU {} started in {:.3}s", gpu.name(), startup);
    let mut opts = CalibrateOptions::new(quick);
    // a log (not a terminal) gets one line per grid point instead of the progress bar
    opts.log_points = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    if let Some(b) = budget.filter(|b| b.is_finite() && *b > 0.0) {
        opts.budget = std::time::Duration::from_secs_f64(b);
    }
    let profile = calibrate(&cpu, &gpu, startup, &opts)?;
    let path =
        output
            .or_else(Profile::default_path)
            .ok_or_else(|| gpukit_offload::Error::Config {
                name: "profile path",
                value: String::new(),
                msg: "no config directory; pass --output".into(),
            })?;
    profile.save(&path)?;
    println!(
        "offload: calibrated {} curves in {:.1}s (total {:.1}s); copies {:.1} GB/s in, {:.1} GB/s out; profile written to {}",
        profile.curves.len(),
        profile.calibration_s,
        t0.elapsed().as_secs_f64(),
        profile.copy.h2d_bytes_per_s / 1e9,
        profile.copy.d2h_bytes_per_s / 1e9,
        path.display()
    );
    Ok(())
}

fn run_shim(cmd: &[String]) -> ExitCode {
    let exe = std::env::current_exe().unwrap_or_default();
    let shim = exe.with_file_name("liboffload_preload.so");
    if !shim.exists() {
        eprintln!(
            "offload: the shim {} is missing; build it with `cargo build --release --examples`",
            shim.display()
        );
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
    match c.status() {
        Ok(s) => match s.code() {
            Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
            None => {
                eprintln!("offload: {} was killed by a signal", cmd[0]);
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("offload: cannot run {}: {e}", cmd[0]);
            ExitCode::from(127)
        }
    }
}

fn explain() -> gpukit_offload::Result<()> {
    let d = Dispatcher::global();
    for w in d.warnings() {
        eprintln!("offload: {w}");
    }
    let level = d.config().level;
    println!(
        "profile: {}; level {level} (offload when predicted >= {:.2}x faster)",
        d.profile_path()
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in default".into()),
        required_speedup(level)
    );
    println!(
        "{:<10} {:>4} {:>14} {:>10} {:>10} {:>10}",
        "op", "prec", "crossover n", "x@1024", "x@4096", "x@8192"
    );
    let m = d.model();
    for kind in OpKind::all() {
        for p in Precision::ALL {
            let sp = |x: f64| {
                let x2 = match kind.routine {
                    Routine::Getrs | Routine::Gesv | Routine::Potrs | Routine::Posv => x,
                    Routine::Getrf
                    | Routine::Geqrf
                    | Routine::Gesdd
                    | Routine::Gesvd
                    | Routine::Potrf
                    | Routine::Syevd => 1.0,
                    _ => x,
                };
                m.estimate(kind, p, kind.canonical_shape(x, x2))
                    .map(|e| e.speedup())
            };
            let mut cross = None;
            for e in 0..=48 {
                let x = 32.0 * 2f64.powf(e as f64 / 6.0);
                if sp(x).is_some_and(|s| s >= required_speedup(level)) {
                    cross = Some(x.round() as u64);
                    break;
                }
            }
            let f = |x: f64| {
                sp(x)
                    .map(|s| format!("{s:.2}"))
                    .unwrap_or_else(|| "-".into())
            };
            println!(
                "{:<10} {:>4} {:>14} {:>10} {:>10} {:>10}",
                kind.key(),
                p.letter(),
                cross
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "never".into()),
                f(1024.0),
                f(4096.0),
                f(8192.0)
            );
        }
    }
    println!("(square calls; solves with nrhs = n; x@n = predicted GPU speedup, copies included)");
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

fn show(name: &str, shape: &str, r: gpukit_offload::Result<Outcome>) {
    match r {
        Ok(o) => println!(
            "{:<8} {:<26} {:<4} {:<18} {:>9.4}s {}",
            name,
            shape,
            o.backend.as_str(),
            o.reason.map(|r| r.as_str()).unwrap_or("model: gpu faster"),
            o.seconds,
            o.estimate
                .map(|e| format!("(predicted cpu {:.4}s, gpu {:.4}s)", e.cpu_s, e.gpu_s))
                .unwrap_or_default()
        ),
        Err(e) => println!("{name:<8} {shape:<26} error: {e}"),
    }
}

fn demo() -> gpukit_offload::Result<()> {
    let off = Offload::with_config(Config {
        persist: false,
        ..Config::from_env().0
    });
    let d = off.dispatcher();
    match d.start_gpu() {
        Ok(g) => println!(
            "GPU: {} (started for the demo; the shim starts it lazily)",
            g.name()
        ),
        Err(e) => println!("no GPU here ({e}): every call runs on the CPU"),
    }
    d.cpu_backend()?;
    println!(
        "{:<8} {:<26} {:<4} {:<18} {:>10}",
        "routine", "shape", "ran", "reason", "time"
    );
    for n in [64usize, 512, 2048, 4096] {
        let a = fill(n * n, 1);
        let b = fill(n * n, 2);
        let mut c = vec![0.0; n * n];
        show(
            "dgemm",
            &format!("{n}x{n}x{n}"),
            off.gemm(
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
            ),
        );
    }
    {
        // same flops as 2048^3, but a tiny inner dimension: judged by its shape
        let (m, k) = (16384usize, 32usize);
        let a = fill(m * k, 3);
        let b = fill(k * m, 4);
        let mut c = vec![0.0; m * m];
        show(
            "dgemm",
            &format!("{m}x{m}x{k}"),
            off.gemm(
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
            ),
        );
    }
    {
        let n = 4096;
        let a: Vec<f32> = fill(n * n, 5).into_iter().map(|x| x as f32).collect();
        let mut c = vec![0f32; n * n];
        show(
            "sgemm",
            &format!("{n}x{n}x{n}"),
            off.gemm(
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
            ),
        );
    }
    for n in [300usize, 4000] {
        let mut a = spd(n, 6);
        show(
            "dpotrf",
            &format!("n={n}"),
            off.potrf(Uplo::Lower, n, &mut a, n),
        );
    }
    {
        let (n, r) = (3000usize, 16usize);
        let mut a = spd(n, 7);
        let mut b = fill(n * r, 8);
        let mut piv = vec![0i32; n];
        show(
            "dgesv",
            &format!("n={n} nrhs={r}"),
            off.gesv(n, r, &mut a, n, &mut piv, &mut b, n),
        );
    }
    {
        let n = 1500;
        let mut a = spd(n, 9);
        let mut w = vec![0.0; n];
        show(
            "dsyevd",
            &format!("n={n} vectors"),
            off.syevd(true, Uplo::Lower, n, &mut a, n, &mut w),
        );
    }
    {
        let (m, n) = (2000usize, 1000usize);
        let mut a = fill(m * n, 10);
        let mut s = vec![0.0; n];
        show(
            "dgesdd",
            &format!("{m}x{n} values"),
            off.gesdd(
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
            ),
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
        show(
            "zgemm",
            &format!("{n}x{n}x{n}"),
            off.gemm(
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
            ),
        );
    }
    println!();
    print!("{}", d.stats().summary());
    Ok(())
}
