//! The fixed cost of one GPU call (issue 22), in one process on the GPU host:
//!
//! ```text
//! cargo run --release -p gpukit-offload --example fixed_cost [CALLS]
//! ```
//!
//! For tiny calls (the stacked 4x4 matrices of numpy's linalg and 64x64 products) it prints the
//! microseconds per call of: the CPU library; gpukit-offload's GPU path alone (`GpuBackend::run`);
//! the same through the dispatcher with the GPU forced (what the shim pays); and beside them the
//! floor of cuBLAS / cuSOLVER themselves in the same process: the library call and a stream
//! synchronisation on device-resident data, and the same with the two small copies (operands in,
//! result out) a call from host memory needs. The difference between our GPU path and that
//! floor is what the per-call machinery costs. A second table splits our GPU path's host time
//! per call into its phases (`gpukit_offload::gpu::Phase`: lane, workspace sizes, allocation,
//! copies in, the non-finite check, library launches, the synchronisation, which includes the
//! device's own time, and copies out) with the synchronisations, copies, own kernel launches,
//! workspace queries and allocations per call. Medians of five batches of CALLS calls
//! (default 400). Without a GPU it says so and exits 0.

use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;
use gpukit_offload::call::{Call, HostMat, Op, Piv, Scalar};
use gpukit_offload::gpu::Phase;
use gpukit_offload::ops::{Precision, SvdJob, Trans, Uplo};
use gpukit_offload::{Config, GpuMode, Offload};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Microseconds per call of `f`, median of five batches of `calls`.
fn per_call(calls: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..calls.min(20) {
        f();
    }
    median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..calls {
                    f();
                }
                t.elapsed().as_secs_f64() * 1e6 / calls as f64
            })
            .collect(),
    )
}

fn spd(n: usize) -> Vec<f64> {
    let mut a = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..n {
            a[i + j * n] = if i == j {
                n as f64 + 1.0
            } else {
                1.0 / (1.0 + (i + j) as f64)
            };
        }
    }
    a
}

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let off = Offload::with_config(Config {
        gpu: GpuMode::Always,
        persist: false,
        ..Config::from_env().0
    });
    let d = off.dispatcher();
    let gpu = match d.start_solver() {
        Ok(g) => g.clone(),
        Err(e) => {
            println!("fixed_cost: no GPU here ({e}); nothing to measure");
            return;
        }
    };
    let cpu = d.cpu_backend().expect("a CPU BLAS/LAPACK");
    println!(
        "fixed_cost: GPU {}, CPU library {}, {calls} calls per batch",
        gpu.name(),
        cpu.describe()
    );
    println!(
        "{:<22} {:>10} {:>12} {:>14} {:>12} {:>14}",
        "call", "cpu us", "gpu path us", "dispatcher us", "floor us", "floor+copy us"
    );

    // the cases: (name, make a call on these buffers)
    let n4 = 4;
    let mut a4 = spd(n4);
    let mut b4 = vec![1.0f64; n4];
    let mut piv = vec![0i32; n4];
    let mut w4 = vec![0.0f64; n4];
    let (mut s4, mut u4, mut vt4) = (
        vec![0.0f64; n4],
        vec![0.0f64; n4 * n4],
        vec![0.0f64; n4 * n4],
    );
    // one matrix per case, alive for all of main (the calls keep pointers to them)
    let (mut a_potrf, mut a_gesv, mut a_syevd, mut a_gesdd) = (spd(n4), spd(n4), spd(n4), spd(n4));
    let n64 = 64;
    let a64 = spd(n64);
    let mut c64 = vec![0.0f64; n64 * n64];
    let one = Scalar::of(1.0f64);
    let zero = Scalar::of(0.0f64);
    let m = |p: &mut Vec<f64>, n: usize| HostMat::new(p.as_mut_ptr() as *mut u8, n, n, n);
    let a64p = a64.as_ptr() as *mut u8;
    let cases: Vec<(&str, Call)> = vec![
        (
            "dgemm 64x64x64",
            Call {
                prec: Precision::D,
                op: Op::Gemm {
                    ta: Trans::No,
                    tb: Trans::No,
                    m: n64,
                    n: n64,
                    k: n64,
                    alpha: one,
                    a: HostMat::new(a64p, n64, n64, n64),
                    b: HostMat::new(a64p, n64, n64, n64),
                    beta: zero,
                    c: m(&mut c64, n64),
                },
            },
        ),
        (
            "dpotrf 4 (cholesky)",
            Call {
                prec: Precision::D,
                op: Op::Potrf {
                    uplo: Uplo::Lower,
                    n: n4,
                    a: m(&mut a_potrf, n4),
                },
            },
        ),
        (
            "dgetrf 4 (det)",
            Call {
                prec: Precision::D,
                op: Op::Getrf {
                    m: n4,
                    n: n4,
                    a: m(&mut a4, n4),
                    ipiv: Piv::I32(piv.as_mut_ptr()),
                },
            },
        ),
        (
            "dgesv 4 (solve)",
            Call {
                prec: Precision::D,
                op: Op::Gesv {
                    n: n4,
                    nrhs: 1,
                    a: m(&mut a_gesv, n4),
                    ipiv: Piv::I32(piv.as_mut_ptr()),
                    b: HostMat::new(b4.as_mut_ptr() as *mut u8, n4, 1, n4),
                },
            },
        ),
        (
            "dsyevd 4 (eigh)",
            Call {
                prec: Precision::D,
                op: Op::Syevd {
                    routine: gpukit_offload::Routine::Syevd,
                    vectors: true,
                    uplo: Uplo::Lower,
                    n: n4,
                    a: m(&mut a_syevd, n4),
                    w: w4.as_mut_ptr() as *mut u8,
                },
            },
        ),
        (
            "dgesdd 4 (svd)",
            Call {
                prec: Precision::D,
                op: Op::Svd {
                    routine: gpukit_offload::Routine::Gesdd,
                    jobu: SvdJob::Thin,
                    jobvt: SvdJob::Thin,
                    m: n4,
                    n: n4,
                    a: m(&mut a_gesdd, n4),
                    s: s4.as_mut_ptr() as *mut u8,
                    u: m(&mut u4, n4),
                    vt: m(&mut vt4, n4),
                },
            },
        ),
    ];
    let floors = raw_floors(calls);
    let mut phases = Vec::new();
    for (name, call) in &cases {
        let cpu_us = per_call(calls, || {
            // SAFETY: every buffer of the call lives for all of main; LAPACK may overwrite them
            // (the timing does not depend on their values: the matrices stay well conditioned
            // enough or fail fast, the same way each time).
            let _ = unsafe { cpu.run(call) };
        });
        let gpu_us = per_call(calls, || {
            // SAFETY: as above.
            let _ = unsafe { gpu.run(call) };
        });
        // the same calls once more, with the phases timed (the clock reads cost a little)
        gpu.set_phase_timing(true);
        gpu.take_phase_times();
        for _ in 0..calls {
            // SAFETY: as above.
            let _ = unsafe { gpu.run(call) };
        }
        phases.push((*name, gpu.take_phase_times()));
        gpu.set_phase_timing(false);
        let req = gpukit_offload::Request::new(*call, gpukit_offload::library::LibId::UNKNOWN);
        let disp_us = per_call(calls, || {
            // SAFETY: as above; the CPU closure is not reached with the GPU forced and up.
            let _ = unsafe { d.execute(&req, &mut || Ok(0)) };
        });
        let (fl, flc) = floors
            .iter()
            .find(|(k, _, _)| name.starts_with(k))
            .map(|(_, a, b)| (format!("{a:.1}"), format!("{b:.1}")))
            .unwrap_or(("-".into(), "-".into()));
        println!("{name:<22} {cpu_us:>10.1} {gpu_us:>12.1} {disp_us:>14.1} {fl:>12} {flc:>14}");
    }
    println!("(floor: the library call + a stream sync on device data; floor+copy: with the operands copied in and the result out, as a call from host memory needs)");
    println!();
    print!("{:<22}", "gpu path, us per call");
    for p in Phase::ALL {
        print!(" {:>9}", p.name());
    }
    println!(
        " {:>7} | {:>5} {:>7} {:>8} {:>8} {:>9} {:>6}",
        "total", "syncs", "copy-in", "copy-out", "launches", "ws-query", "allocs"
    );
    for (name, t) in &phases {
        print!("{name:<22}");
        for p in Phase::ALL {
            print!(" {:>9.1}", t.per_call_us(p));
        }
        println!(
            " {:>7.1} | {:>5.2} {:>7.2} {:>8.2} {:>8.2} {:>9.2} {:>6.2}",
            t.total_us(),
            t.per_call(t.syncs),
            t.per_call(t.copies_in),
            t.per_call(t.copies_out),
            t.per_call(t.own_launches),
            t.per_call(t.workspace_queries),
            t.per_call(t.allocations),
        );
    }
    println!("(sync includes the device's time for the copies and the routines; launches: the backend's own check kernels)");
}

/// cuBLAS's and cuSOLVER's own per-call cost in this process: `(case prefix, floor us, floor
/// with copies us)` for dgemm 64 and dpotrf 4.
fn raw_floors(calls: usize) -> Vec<(&'static str, f64, f64)> {
    let mut out = Vec::new();
    let ctx = match cudarc::driver::CudaContext::new(0) {
        Ok(c) => c,
        Err(e) => {
            println!("fixed_cost: raw floors not measured ({e})");
            return out;
        }
    };
    let stream = ctx.default_stream();
    let n = 64usize;
    let host = spd(n);
    let mut back = vec![0.0f64; n * n];
    let (Ok(a), Ok(mut c)) = (stream.clone_htod(&host), stream.alloc_zeros::<f64>(n * n)) else {
        return out;
    };
    let Ok(blas) = cudarc::cublas::CudaBlas::new(stream.clone()) else {
        return out;
    };
    use cudarc::cublas::{Gemm, GemmConfig};
    let cfg = GemmConfig {
        transa: cb::cublasOperation_t::CUBLAS_OP_N,
        transb: cb::cublasOperation_t::CUBLAS_OP_N,
        m: n as i32,
        n: n as i32,
        k: n as i32,
        alpha: 1.0f64,
        lda: n as i32,
        ldb: n as i32,
        beta: 0.0,
        ldc: n as i32,
    };
    let floor = per_call(calls, || {
        // SAFETY: a, c hold n*n f64 on this stream.
        unsafe { blas.gemm(cfg, &a, &a, &mut c) }.unwrap();
        stream.synchronize().unwrap();
    });
    let mut a2 = stream.alloc_zeros::<f64>(n * n).unwrap();
    let copy = per_call(calls, || {
        stream.memcpy_htod(&host, &mut a2).unwrap();
        // SAFETY: as above.
        unsafe { blas.gemm(cfg, &a2, &a2, &mut c) }.unwrap();
        stream.memcpy_dtoh(&c, &mut back).unwrap();
        stream.synchronize().unwrap();
    });
    out.push(("dgemm", floor, copy));
    // cuSOLVER potrf 4 with its workspace queried once
    let n = 4usize;
    let host = spd(n);
    let mut back = vec![0.0f64; n * n];
    let mut info_h = [0i32];
    let mut a = stream.clone_htod(&host).unwrap();
    let mut info = stream.alloc_zeros::<i32>(1).unwrap();
    let mut h: cs::cusolverDnHandle_t = std::ptr::null_mut();
    // SAFETY: creates a handle and binds it to the stream (raw cuSOLVER).
    unsafe {
        if cs::cusolverDnCreate(&mut h) != cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
            return out;
        }
        cs::cusolverDnSetStream(h, stream.cu_stream() as cs::cudaStream_t);
    }
    use cudarc::driver::{DevicePtr, DevicePtrMut};
    let mut lwork = 0i32;
    let (ap, _ga) = a.device_ptr_mut(&stream);
    // SAFETY: a workspace query on a 4x4 device matrix.
    unsafe {
        cs::cusolverDnDpotrf_bufferSize(
            h,
            cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
            n as i32,
            ap as *mut f64,
            n as i32,
            &mut lwork,
        )
    };
    drop(_ga);
    let mut ws = stream.alloc_zeros::<f64>(lwork.max(1) as usize).unwrap();
    let mut potrf = |copy: bool| {
        if copy {
            stream.memcpy_htod(&host, &mut a).unwrap();
        }
        let (ap, _g1) = a.device_ptr_mut(&stream);
        let (wp, _g2) = ws.device_ptr_mut(&stream);
        let (ip, _g3) = info.device_ptr_mut(&stream);
        // SAFETY: device buffers of the sizes the call needs, the queried workspace.
        unsafe {
            cs::cusolverDnDpotrf(
                h,
                cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
                n as i32,
                ap as *mut f64,
                n as i32,
                wp as *mut f64,
                lwork,
                ip as *mut i32,
            )
        };
        drop((_g1, _g2, _g3));
        if copy {
            stream.memcpy_dtoh(&a, &mut back).unwrap();
            stream.memcpy_dtoh(&info, &mut info_h).unwrap();
        }
        stream.synchronize().unwrap();
    };
    let floor = per_call(calls, || potrf(false));
    let copy = per_call(calls, || potrf(true));
    out.push(("dpotrf", floor, copy));
    let _ = (cu::CUresult::CUDA_SUCCESS, a.device_ptr(&stream).0);
    out
}
