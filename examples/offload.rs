//! `offload`: the command-line consumer of gpukit-offload.
//!
//! ```text
//! cargo run --release --example offload                 # demo workload through the dispatcher, results checked
//! cargo run --release --example offload -- calibrate [--quick] [--output PATH] [--budget S]
//! cargo run --release --example offload -- run python3 script.py   # under the LD_PRELOAD shim
//! cargo run --release --example offload -- explain      # crossover sizes from the profile
//! ```
//!
//! Without arguments it runs the demo below; everything else is the crate's command line
//! (`gpukit_offload::cli`, feature `cli`), which the Python package's console script runs too.

use gpukit_offload::output;
use gpukit_offload::{c64, Config, Offload, Outcome, SvdJob, Trans, Uplo};
use std::io::Write;
use std::process::ExitCode;

/// Writes a line to stdout; a closed stdout ends the demo quietly instead of panicking.
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn main() -> ExitCode {
    if std::env::args_os().len() > 1 {
        // calibrate / run / explain / --help: the crate's command line; the shim is the one
        // built beside this executable
        let code = gpukit_offload::cli::main_with_args(std::env::args_os(), None);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    match demo() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            output::line(&format!("offload: {e}"));
            ExitCode::FAILURE
        }
    }
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
