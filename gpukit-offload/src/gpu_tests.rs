//! GPU tests (skip without a GPU; fail under `GPUKIT_REQUIRE_GPU=1`): every op kind in every
//! precision against the CPU library, residuals of eigen and singular decompositions, fallback
//! by injected failure (the caller's buffers untouched, the CPU result returned), several calls
//! in flight from several threads, and lazy start-up.

use crate::calibrate::{Buf, Case};
use crate::cpu::CpuBackend;
use crate::dispatch::Config;
use crate::gpu::{GpuBackend, Inject};
use crate::model::Backend;
use crate::ops::{OpKind, Precision, Routine};
use crate::stats::Reason;
use crate::{Offload, Trans, Uplo};
use std::sync::{Arc, OnceLock};

/// Runs a test body on a thread with a 256 MiB stack: CPU LAPACK routines (and OpenBLAS's
/// threads started from the caller) can need more than the test harness's 2 MiB.
fn big_stack(f: impl FnOnce() + Send + 'static) {
    let h = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .expect("spawn test thread");
    if let Err(e) = h.join() {
        std::panic::resume_unwind(e);
    }
}

fn backends(test: &str) -> Option<(&'static CpuBackend, &'static GpuBackend)> {
    if !gpukit_jit::testing::cublas(test) {
        return None;
    }
    static B: OnceLock<(CpuBackend, GpuBackend)> = OnceLock::new();
    let b = B.get_or_init(|| {
        let cpu = CpuBackend::discover()
            .or_else(|_| numpy_openblas().ok_or(()))
            .expect("a CPU BLAS/LAPACK (system OpenBLAS or numpy's) is needed for the GPU tests");
        // the dispatchers the tests create find the same library
        std::env::set_var(crate::cpu::CPU_LIB_ENV, cpu.path());
        (cpu, GpuBackend::start().expect("GPU backend start"))
    });
    Some((&b.0, &b.1))
}

fn numpy_openblas() -> Option<CpuBackend> {
    let o = std::process::Command::new("python3")
        .args(["-c", "import numpy, os, glob; print(glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir, 'numpy.libs', 'libscipy_openblas*.so'))[0])"])
        .output()
        .ok()?;
    CpuBackend::open(&[String::from_utf8_lossy(&o.stdout).trim()]).ok()
}

fn vals(bytes: &[u8], p: Precision, count: usize) -> Vec<(f64, f64)> {
    let es = p.size();
    (0..count)
        .map(|i| {
            let b = &bytes[i * es..(i + 1) * es];
            let f4 = |o: usize| f32::from_ne_bytes(b[o..o + 4].try_into().unwrap()) as f64;
            let f8 = |o: usize| f64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
            match p {
                Precision::S => (f4(0), 0.0),
                Precision::D => (f8(0), 0.0),
                Precision::C => (f4(0), f4(4)),
                Precision::Z => (f8(0), f8(8)),
            }
        })
        .collect()
}

fn reals(bytes: &[u8], p: Precision, count: usize) -> Vec<f64> {
    let rp = if p.real_size() == 4 {
        Precision::S
    } else {
        Precision::D
    };
    vals(bytes, rp, count).into_iter().map(|v| v.0).collect()
}

fn tol(p: Precision) -> f64 {
    if p.real_size() == 4 {
        3e-3
    } else {
        1e-9
    }
}

/// max |x - y| / max |y| over entries (with magnitudes only when `abs`).
fn rel(x: &[(f64, f64)], y: &[(f64, f64)], abs: bool) -> f64 {
    let mag = |v: (f64, f64)| (v.0 * v.0 + v.1 * v.1).sqrt();
    let scale = y.iter().map(|v| mag(*v)).fold(0.0, f64::max).max(1e-30);
    x.iter()
        .zip(y)
        .map(|(a, b)| {
            if abs {
                (mag(*a) - mag(*b)).abs()
            } else {
                mag((a.0 - b.0, a.1 - b.1))
            }
        })
        .fold(0.0, f64::max)
        / scale
}

type Cx = (f64, f64);
fn mul(a: Cx, b: Cx) -> Cx {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

/// ||A V - V diag(w)|| / (||A|| n) for the eigenpairs.
fn eig_residual(a: &[Cx], v: &[Cx], w: &[f64], n: usize) -> f64 {
    let mut worst: f64 = 0.0;
    let anorm = a
        .iter()
        .map(|x| x.0.abs() + x.1.abs())
        .fold(0.0, f64::max)
        .max(1e-30);
    for j in 0..n {
        for i in 0..n {
            let mut s = (0.0, 0.0);
            for k in 0..n {
                let t = mul(a[i + k * n], v[k + j * n]);
                s = (s.0 + t.0, s.1 + t.1);
            }
            let r = (s.0 - w[j] * v[i + j * n].0, s.1 - w[j] * v[i + j * n].1);
            worst = worst.max((r.0 * r.0 + r.1 * r.1).sqrt());
        }
    }
    worst / anorm
}

/// ||A - U S VT|| / ||A|| for a thin SVD (m >= n).
fn svd_residual(a: &[Cx], u: &[Cx], s: &[f64], vt: &[Cx], m: usize, n: usize) -> f64 {
    let anorm = a
        .iter()
        .map(|x| (x.0 * x.0 + x.1 * x.1).sqrt())
        .fold(0.0, f64::max)
        .max(1e-30);
    let mut worst: f64 = 0.0;
    for j in 0..n {
        for i in 0..m {
            let mut acc = (0.0, 0.0);
            for k in 0..n {
                let t = mul(u[i + k * m], vt[k + j * n]);
                acc = (acc.0 + s[k] * t.0, acc.1 + s[k] * t.1);
            }
            let r = (a[i + j * m].0 - acc.0, a[i + j * m].1 - acc.1);
            worst = worst.max((r.0 * r.0 + r.1 * r.1).sqrt());
        }
    }
    worst / anorm
}

fn size(kind: OpKind) -> (f64, f64) {
    match kind.routine {
        Routine::Potrf | Routine::Syevd => (160.0, 1.0),
        Routine::Getrf | Routine::Geqrf | Routine::Gesdd | Routine::Gesvd => (96.0, 1.5),
        _ => (192.0, 40.0),
    }
}

/// Every routine and precision: the GPU path against the CPU library on the same inputs.
#[test]
fn every_routine_and_precision_matches_cpu() {
    big_stack(every_routine_and_precision_matches_cpu_body);
}

fn every_routine_and_precision_matches_cpu_body() {
    let Some((cpu, gpu)) = backends("every_routine_and_precision_matches_cpu") else {
        return;
    };
    let mut failures = Vec::new();
    for kind in OpKind::all() {
        for p in Precision::ALL {
            let (x1, x2) = size(kind);
            let mut c1 = Case::new(kind, p, x1, x2);
            let mut c2 = Case::new(kind, p, x1, x2);
            c1.reset();
            c2.reset();
            // poison the outputs of the GPU run so unwritten elements show
            for b in c2.bufs.iter_mut().skip(1) {
                if matches!(
                    kind.routine,
                    Routine::Syevd | Routine::Gesdd | Routine::Gesvd | Routine::Geqrf
                ) {
                    b.bytes.iter_mut().for_each(|x| *x = 0x7f);
                }
            }
            let call1 = c1.call(kind, p, x1, x2);
            let call2 = c2.call(kind, p, x1, x2);
            // routines LAPACK lacks in this precision, and those without a GPU path, are kept
            // on the CPU by the dispatcher
            if !kind.routine.precisions().contains(&p) || crate::gpu::unsupported(&call2).is_some()
            {
                continue;
            }
            // SAFETY: both calls' buffers belong to their cases.
            let info = unsafe { cpu.run(&call1) }.unwrap();
            assert_eq!(info, 0, "{kind} {p:?} cpu info");
            // SAFETY: as above.
            if let Err(e) = unsafe { gpu.run(&call2) } {
                failures.push(format!("{kind} {}: GPU failed: {e}", p.letter()));
                continue;
            }
            let s = call1.shape();
            let (m, n) = (s.m as usize, s.n as usize);
            let t = tol(p);
            let all = |b: &Buf| vals(&b.bytes, p, b.rows * b.cols);
            let err = match kind.routine {
                Routine::Gemm | Routine::Symm => rel(&all(&c2.bufs[2]), &all(&c1.bufs[2]), false),
                Routine::Syrk => rel(&all(&c2.bufs[1]), &all(&c1.bufs[1]), false),
                Routine::Trsm | Routine::Getrs | Routine::Potrs => {
                    rel(&all(&c2.bufs[1]), &all(&c1.bufs[1]), false)
                }
                Routine::Gesv | Routine::Posv => rel(&all(&c2.bufs[0]), &all(&c1.bufs[0]), false)
                    .max(rel(&all(&c2.bufs[1]), &all(&c1.bufs[1]), false)),
                Routine::Getrf => {
                    assert_eq!(
                        c1.piv[..m.min(n)],
                        c2.piv[..m.min(n)],
                        "{kind} {p:?} pivots"
                    );
                    rel(&all(&c2.bufs[0]), &all(&c1.bufs[0]), false)
                }
                Routine::Potrf => rel(&all(&c2.bufs[0]), &all(&c1.bufs[0]), false),
                Routine::Geqrf => {
                    // R and the reflectors follow the same LAPACK convention
                    rel(&all(&c2.bufs[0]), &all(&c1.bufs[0]), false).max(rel(
                        &all(&c2.bufs[1]),
                        &all(&c1.bufs[1]),
                        false,
                    ))
                }
                Routine::Syevd => {
                    let w1 = reals(&c1.bufs[1].bytes, p, n);
                    let w2 = reals(&c2.bufs[1].bytes, p, n);
                    let werr = rel(
                        &w2.iter().map(|x| (*x, 0.0)).collect::<Vec<_>>(),
                        &w1.iter().map(|x| (*x, 0.0)).collect::<Vec<_>>(),
                        false,
                    );
                    if kind.vectors() {
                        let a = vals(&c2.pristine[0], p, n * n);
                        werr.max(eig_residual(&a, &all(&c2.bufs[0]), &w2, n) / (n as f64))
                    } else {
                        werr
                    }
                }
                Routine::Gesdd | Routine::Gesvd => {
                    let mn = m.min(n);
                    let s1 = reals(&c1.bufs[1].bytes, p, mn);
                    let s2 = reals(&c2.bufs[1].bytes, p, mn);
                    let serr = rel(
                        &s2.iter().map(|x| (*x, 0.0)).collect::<Vec<_>>(),
                        &s1.iter().map(|x| (*x, 0.0)).collect::<Vec<_>>(),
                        false,
                    );
                    if kind.vectors() {
                        let a = vals(&c2.pristine[0], p, m * n);
                        serr.max(
                            svd_residual(&a, &all(&c2.bufs[2]), &s2, &all(&c2.bufs[3]), m, n)
                                / (n as f64),
                        )
                    } else {
                        serr
                    }
                }
                r => {
                    failures.push(format!(
                        "{kind} {}: the test has no comparison for {r:?}",
                        p.letter()
                    ));
                    continue;
                }
            };
            let limit = if kind.routine.has_vectors() {
                t * 10.0
            } else {
                t
            };
            if err.is_nan() || err > limit {
                failures.push(format!(
                    "{kind} {}: error {err:.3e} > {limit:.1e}",
                    p.letter()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A failing GPU path leaves the caller's buffers untouched and the CPU result is returned.
#[test]
fn injected_failures_fall_back_to_cpu() {
    big_stack(injected_failures_fall_back_to_cpu_body);
}

fn injected_failures_fall_back_to_cpu_body() {
    if backends("injected_failures_fall_back_to_cpu").is_none() {
        return;
    }
    let off = Offload::with_config(Config {
        level: 10,
        persist: false,
        ..Config::default()
    });
    let d = off.dispatcher();
    let g = d.start_gpu().unwrap();
    let n = 1500;
    let a: Vec<f64> = (0..n * n)
        .map(|i| ((i * 7919) % 1000) as f64 / 1000.0 - 0.5)
        .collect();
    let mut spd = a.clone();
    for j in 0..n {
        for i in 0..j {
            spd[i + j * n] = spd[j + i * n];
        }
        spd[j + j * n] += n as f64;
    }
    let reference = {
        let mut r = spd.clone();
        let cpu = d.cpu_backend().unwrap();
        let call = crate::call::Call {
            prec: Precision::D,
            op: crate::call::Op::Potrf {
                uplo: Uplo::Lower,
                n,
                a: crate::call::HostMat::new(r.as_mut_ptr() as *mut u8, n, n, n),
            },
        };
        // SAFETY: `r` holds n*n elements.
        assert_eq!(unsafe { cpu.run(&call) }.unwrap(), 0);
        r
    };
    for (inject, reason) in [
        (Inject::OutOfMemory, Reason::FallbackInjected),
        (Inject::Error, Reason::FallbackInjected),
        (Inject::Info, Reason::FallbackInjected),
    ] {
        g.set_inject(inject);
        let mut x = spd.clone();
        let o = off.potrf(Uplo::Lower, n, &mut x, n).unwrap();
        assert_eq!(o.backend, Backend::Cpu, "{inject:?}");
        assert_eq!(o.reason, Some(reason), "{inject:?}");
        assert_eq!(
            x, reference,
            "{inject:?}: the CPU result on untouched inputs"
        );
    }
    g.set_inject(Inject::None);
    let mut x = spd.clone();
    let o = off.potrf(Uplo::Lower, n, &mut x, n).unwrap();
    assert_eq!(o.backend, Backend::Gpu);
    let err = x
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(err < 1e-9 * n as f64, "{err}");
    // a real solver failure: not positive definite -> info from the GPU, CPU reports it
    let mut bad = spd.clone();
    bad[0] = -1.0;
    let e = off.potrf(Uplo::Lower, n, &mut bad, n).unwrap_err();
    assert!(e.to_string().contains("not positive definite"), "{e}");
    let st = d.stats();
    let row = st.get("dpotrf").unwrap();
    assert!(
        row.reasons
            .iter()
            .any(|(r, c)| *r == Reason::FallbackInfo && *c == 1),
        "{row:?}"
    );
    assert_eq!(
        row.reasons
            .iter()
            .find(|(r, _)| *r == Reason::FallbackInjected)
            .map(|x| x.1),
        Some(3)
    );
}

/// Several threads offload at once, each on its own lane; results match the CPU.
#[test]
fn concurrent_calls_from_several_threads() {
    big_stack(concurrent_calls_from_several_threads_body);
}

fn concurrent_calls_from_several_threads_body() {
    if backends("concurrent_calls_from_several_threads").is_none() {
        return;
    }
    // Forced onto the GPU: this test is about concurrency, not decisions (under contention the
    // learner may rightly move a 2048 dgemm back to the CPU).
    let off = Offload::with_config(Config {
        level: 10,
        gpu: crate::GpuMode::Always,
        persist: false,
        ..Config::default()
    });
    off.dispatcher().start_gpu().unwrap();
    let n = 2048;
    let a: Vec<f64> = (0..n * n).map(|i| ((i * 31) % 97) as f64 / 97.0).collect();
    let b: Vec<f64> = (0..n * n).map(|i| ((i * 17) % 89) as f64 / 89.0).collect();
    let mut want = vec![0.0; n * n];
    let cpu = Offload::with_config(Config {
        gpu: crate::GpuMode::Off,
        persist: false,
        ..Config::default()
    });
    cpu.gemm(
        Trans::No,
        Trans::Trans,
        n,
        n,
        n,
        1.0,
        &a,
        n,
        &b,
        n,
        0.0,
        &mut want,
        n,
    )
    .unwrap();
    let want = Arc::new(want);
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (off, a, b, want) = (off.clone(), &a, &b, want.clone());
            s.spawn(move || {
                for _ in 0..3 {
                    let mut c = vec![f64::NAN; n * n];
                    let o = off
                        .gemm(
                            Trans::No,
                            Trans::Trans,
                            n,
                            n,
                            n,
                            1.0,
                            a,
                            n,
                            b,
                            n,
                            0.0,
                            &mut c,
                            n,
                        )
                        .unwrap();
                    assert_eq!(o.backend, Backend::Gpu, "{o:?}");
                    let err = c
                        .iter()
                        .zip(want.iter())
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0, f64::max);
                    assert!(err < 1e-9 * n as f64, "{err}");
                }
            });
        }
    });
    eprintln!(
        "12 dgemm 2048 from 4 threads: {:.3}s",
        t0.elapsed().as_secs_f64()
    );
}

/// The dispatcher starts CUDA lazily: small calls never start it; large ones start it once the
/// savings missed pay for start-up.
#[test]
fn lazy_start() {
    big_stack(lazy_start_body);
}

fn lazy_start_body() {
    if backends("lazy_start").is_none() {
        return;
    }
    let off = Offload::with_config(Config {
        persist: false,
        ..Config::default()
    });
    let n = 64;
    let a = vec![1.0f64; n * n];
    let mut c = vec![0.0; n * n];
    for _ in 0..10 {
        off.gemm(
            Trans::No,
            Trans::No,
            n,
            n,
            n,
            1.0,
            &a,
            n,
            &a,
            n,
            0.0,
            &mut c,
            n,
        )
        .unwrap();
    }
    assert!(
        off.dispatcher().gpu().is_none(),
        "small calls must not start CUDA"
    );
    let n = 6000;
    let mut a = vec![0.0f64; n * n];
    for j in 0..n {
        a[j + j * n] = 2.0;
    }
    let mut seen = Vec::new();
    // the H200 profile predicts ~0.17 s saved per potrf 6000 against ~0.7 s of start-up, and the
    // learner lowers the CPU prediction after each measured call: several calls are needed
    for _ in 0..20 {
        let mut x = a.clone();
        let o = off.potrf(Uplo::Lower, n, &mut x, n).unwrap();
        seen.push((o.backend, o.reason));
        if off.dispatcher().gpu().is_some() {
            break;
        }
    }
    // a background start may still be running
    for _ in 0..100 {
        if off.dispatcher().gpu().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    eprintln!("large potrf calls before the GPU was up: {seen:?}");
    // the call that starts CUDA does not wait for it: it runs on the CPU (later calls may find
    // the GPU ready: the background start can finish during that CPU call)
    assert_eq!(
        seen[0],
        (Backend::Cpu, Some(Reason::StartupNotPaid)),
        "the call that starts CUDA must not wait for it: {seen:?}"
    );
    assert!(off.dispatcher().gpu().is_some(), "{seen:?}");
    // the start-up thread sized the lane for the missed potrf 6000 (its matrix is n^2 doubles)
    let g = off.dispatcher().gpu().unwrap();
    let reserved = g.reserved();
    assert!(reserved.0 >= n * n * 8, "device arena {reserved:?}");
    let mut x = a.clone();
    let o = off.potrf(Uplo::Lower, n, &mut x, n).unwrap();
    assert_eq!(o.backend, Backend::Gpu, "{o:?}");
    assert_eq!(
        g.reserved(),
        reserved,
        "the first GPU potrf grew its buffers"
    );
    assert!((x[0] - 2f64.sqrt()).abs() < 1e-12);
}

/// The start-up thread's buffer sizing: the lane gets what the call needs, and the call then
/// runs without growing anything (and correctly).
#[test]
fn presize() {
    big_stack(presize_body);
}

fn presize_body() {
    if backends("presize").is_none() {
        return;
    }
    let g = GpuBackend::start().expect("GPU backend start");
    let n = 3000;
    let mut a = vec![0.0f64; n * n];
    for j in 0..n {
        a[j + j * n] = 4.0;
    }
    let call = crate::call::Call {
        prec: Precision::D,
        op: crate::call::Op::Potrf {
            uplo: Uplo::Lower,
            n,
            a: crate::call::HostMat::new(a.as_mut_ptr() as *mut u8, n, n, n),
        },
    };
    let before = g.reserved();
    let p = g.presize(&[call.without_data()]).expect("presize");
    eprintln!("presize potrf {n}: before {before:?}, {p:?}");
    assert!(p.need_dev >= n * n * 8 && p.need_pinned > 0, "{p:?}");
    assert!(p.pinned >= p.need_pinned && p.dev >= p.need_dev, "{p:?}");
    assert_eq!(g.reserved(), (p.dev, p.pinned));
    // a second sizing for the same call changes nothing
    assert_eq!(g.presize(&[call.without_data()]).expect("presize"), p);
    // SAFETY: `a` holds the n x n matrix the call describes.
    unsafe { g.run(&call) }.expect("potrf on the GPU");
    assert_eq!(g.reserved(), (p.dev, p.pinned), "the call grew its buffers");
    assert!((a[0] - 2.0).abs() < 1e-12 && (a[n * n - 1] - 2.0).abs() < 1e-12);
}
