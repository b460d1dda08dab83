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
//! synchronisation on device-resident data (restored by one device-to-device copy where the
//! routine overwrites its input), and the same with the copies (operands in, results and
//! `info` out) a call from host memory needs. The difference between our GPU path and that
//! floor is what the per-call machinery costs. A second table splits our GPU path's host time
//! per call into its phases (`gpukit_offload::gpu::Phase`: lane, workspace sizes, allocation,
//! copies in, the non-finite check, library launches, the synchronisation, which includes the
//! device's own time, and copies out) with the synchronisations, copies, own kernel launches,
//! workspace queries and allocations per call; a third the floors of other cuSOLVER methods for
//! the same tiny problems (Jacobi eigenvalues and SVD, the QR-iteration SVD), which say what a
//! method chosen by size could save. Every call runs on fresh operands (each column restores the
//! in-place ones before each call: a repeated 4x4 potrf on its own factor stops being positive
//! definite after 37 calls, so before this every column timed failing calls), and every GPU
//! failure is counted and printed. Medians of five batches of CALLS calls (default 400).
//! Without a GPU it says so and exits 0.

use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;
use gpukit_offload::call::{Call, HostMat, Op, Piv, Scalar};
use gpukit_offload::gpu::Phase;
use gpukit_offload::ops::{Precision, SvdJob, Trans, Uplo};
use gpukit_offload::{Config, GpuMode, Offload};
use std::ffi::c_void;
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

/// A general 4x4-ish matrix with distinct singular values (for getrf, gesv and gesdd).
fn general(n: usize) -> Vec<f64> {
    let mut a = spd(n);
    for j in 0..n {
        for i in 0..j {
            a[i + j * n] = -a[i + j * n] - 0.25 * (j - i) as f64;
        }
    }
    a
}

/// A buffer the calls overwrite and its pristine contents, restored before each call.
struct Fresh {
    dst: *mut f64,
    src: Vec<f64>,
}

impl Fresh {
    fn restore(list: &[Fresh]) {
        for f in list {
            // SAFETY: `dst` is a live buffer of main of `src.len()` doubles (made beside it).
            unsafe { std::ptr::copy_nonoverlapping(f.src.as_ptr(), f.dst, f.src.len()) };
        }
    }
}

/// GPU failures of one case: how many, and the first one's message.
#[derive(Default)]
struct Fails {
    count: usize,
    calls: usize,
    first: Option<String>,
}

impl Fails {
    fn note<E: std::fmt::Display>(&mut self, r: Result<(), E>) {
        self.calls += 1;
        if let Err(e) = r {
            self.count += 1;
            if self.first.is_none() {
                self.first = Some(e.to_string());
            }
        }
    }
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

    // one buffer set per case, alive for all of main (the calls keep pointers to them)
    let n4 = 4;
    let mut b4 = vec![1.0f64; n4];
    let (mut piv_getrf, mut piv_gesv) = (vec![0i32; n4], vec![0i32; n4]);
    let mut w4 = vec![0.0f64; n4];
    let (mut s4, mut u4, mut vt4) = (
        vec![0.0f64; n4],
        vec![0.0f64; n4 * n4],
        vec![0.0f64; n4 * n4],
    );
    let (mut a_potrf, mut a_getrf, mut a_gesv, mut a_syevd, mut a_gesdd) =
        (spd(n4), general(n4), general(n4), spd(n4), general(n4));
    let n64 = 64;
    let a64 = spd(n64);
    let mut c64 = vec![0.0f64; n64 * n64];
    let one = Scalar::of(1.0f64);
    let zero = Scalar::of(0.0f64);
    let m = |p: &mut Vec<f64>, n: usize| HostMat::new(p.as_mut_ptr() as *mut u8, n, n, n);
    let fresh = |p: &mut Vec<f64>| Fresh {
        dst: p.as_mut_ptr(),
        src: p.clone(),
    };
    let a64p = a64.as_ptr() as *mut u8;
    let cases: Vec<(&str, Call, Vec<Fresh>)> = vec![
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
            vec![],
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
            vec![fresh(&mut a_potrf)],
        ),
        (
            "dgetrf 4 (det)",
            Call {
                prec: Precision::D,
                op: Op::Getrf {
                    m: n4,
                    n: n4,
                    a: m(&mut a_getrf, n4),
                    ipiv: Piv::I32(piv_getrf.as_mut_ptr()),
                },
            },
            vec![fresh(&mut a_getrf)],
        ),
        (
            "dgesv 4 (solve)",
            Call {
                prec: Precision::D,
                op: Op::Gesv {
                    n: n4,
                    nrhs: 1,
                    a: m(&mut a_gesv, n4),
                    ipiv: Piv::I32(piv_gesv.as_mut_ptr()),
                    b: HostMat::new(b4.as_mut_ptr() as *mut u8, n4, 1, n4),
                },
            },
            vec![fresh(&mut a_gesv), fresh(&mut b4)],
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
            vec![fresh(&mut a_syevd)],
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
            vec![fresh(&mut a_gesdd)],
        ),
    ];
    let floors = Floors::new().map(|f| f.measure(calls));
    let (floors, alternatives) = match floors {
        Ok(Ok(v)) => v,
        Ok(Err(e)) | Err(e) => {
            println!("fixed_cost: floors not measured ({e})");
            (Vec::new(), Vec::new())
        }
    };
    let mut phases = Vec::new();
    let mut failures = Vec::new();
    for (name, call, fresh) in &cases {
        let cpu_us = per_call(calls, || {
            Fresh::restore(fresh);
            // SAFETY: every buffer of the call lives for all of main; LAPACK overwrites the
            // in-place ones, restored before each call.
            let _ = unsafe { cpu.run(call) };
        });
        let mut fails = Fails::default();
        let gpu_us = per_call(calls, || {
            Fresh::restore(fresh);
            // SAFETY: as above.
            fails.note(unsafe { gpu.run(call) });
        });
        // the same calls once more, with the phases timed (the clock reads cost a little)
        gpu.set_phase_timing(true);
        gpu.take_phase_times();
        for _ in 0..calls {
            Fresh::restore(fresh);
            // SAFETY: as above.
            fails.note(unsafe { gpu.run(call) });
        }
        phases.push((*name, gpu.take_phase_times()));
        gpu.set_phase_timing(false);
        let req = gpukit_offload::Request::new(*call, gpukit_offload::library::LibId::UNKNOWN);
        let disp_us = per_call(calls, || {
            Fresh::restore(fresh);
            // SAFETY: as above; the CPU closure is not reached with the GPU forced and up.
            let _ = unsafe { d.execute(&req, &mut || Ok(0)) };
        });
        let (fl, flc) = floors
            .iter()
            .find(|(k, _, _)| name.starts_with(k))
            .map(|(_, a, b)| (fmt(*a), fmt(*b)))
            .unwrap_or(("-".into(), "-".into()));
        println!("{name:<22} {cpu_us:>10.1} {gpu_us:>12.1} {disp_us:>14.1} {fl:>12} {flc:>14}");
        if fails.count > 0 {
            failures.push(format!(
                "{name}: {} of {} GPU calls failed (first: {})",
                fails.count,
                fails.calls,
                fails.first.unwrap_or_default()
            ));
        }
    }
    println!("(floor: the library call on device data + a stream sync, with one device-to-device copy restoring an in-place input; floor+copy: the operands copied in from host memory and the results and info out, as a call from host memory needs)");
    for f in &failures {
        println!("GPU FAILURES {f}");
    }
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
    if !alternatives.is_empty() {
        println!();
        println!(
            "{:<34} {:>10} {:>14}",
            "other cuSOLVER methods, 4x4", "floor us", "floor+copy us"
        );
        for (name, a, b) in &alternatives {
            println!("{name:<34} {:>10} {:>14}", fmt(*a), fmt(*b));
        }
    }
}

/// A measured time, or `failed` when a library call of the measurement failed.
fn fmt(v: Option<f64>) -> String {
    v.map_or_else(|| "failed".into(), |v| format!("{v:.1}"))
}

/// The raw libraries on one stream of the primary context, for the floors.
struct Floors {
    _ctx: std::sync::Arc<cudarc::driver::CudaContext>,
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    h: cs::cusolverDnHandle_t,
    prm: cs::cusolverDnParams_t,
    blas: cudarc::cublas::CudaBlas,
    mem: Vec<cu::CUdeviceptr>,
}

/// One floor's operands: device buffers, their pristine device copies (restored before each
/// device-only call when the routine overwrites them), the host data copied in and the device
/// results copied out.
struct Case {
    /// (device buffer, pristine device copy, host data)
    inputs: Vec<(cu::CUdeviceptr, cu::CUdeviceptr, Vec<u8>)>,
    /// The routine overwrites its inputs (a device-only call restores them first).
    in_place: bool,
    /// (device buffer, bytes)
    outputs: Vec<(cu::CUdeviceptr, usize)>,
}

fn bytes_of(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn ok_cs(s: cs::cusolverStatus_t) -> bool {
    s == cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS
}

fn ok_cu(r: cu::CUresult) -> bool {
    r == cu::CUresult::CUDA_SUCCESS
}

impl Floors {
    fn new() -> Result<Floors, String> {
        let ctx = cudarc::driver::CudaContext::new(0).map_err(|e| e.to_string())?;
        ctx.bind_to_thread().map_err(|e| e.to_string())?;
        let stream = ctx.default_stream();
        let blas = cudarc::cublas::CudaBlas::new(stream.clone()).map_err(|e| e.to_string())?;
        let mut h: cs::cusolverDnHandle_t = std::ptr::null_mut();
        let mut prm: cs::cusolverDnParams_t = std::ptr::null_mut();
        // SAFETY: creates a cuSOLVER handle and parameters and binds the handle to the stream.
        let made = unsafe {
            ok_cs(cs::cusolverDnCreate(&mut h))
                && ok_cs(cs::cusolverDnCreateParams(&mut prm))
                && ok_cs(cs::cusolverDnSetStream(
                    h,
                    stream.cu_stream() as cs::cudaStream_t,
                ))
        };
        if !made {
            return Err("cuSOLVER handle".into());
        }
        Ok(Floors {
            _ctx: ctx,
            stream,
            h,
            prm,
            blas,
            mem: Vec::new(),
        })
    }

    fn cu_stream(&self) -> cu::CUstream {
        self.stream.cu_stream()
    }

    /// `bytes` of device memory (freed with the floors).
    fn dev(&mut self, bytes: usize) -> Result<cu::CUdeviceptr, String> {
        let mut p: cu::CUdeviceptr = 0;
        // SAFETY: an allocation in the bound primary context.
        if !ok_cu(unsafe { cu::cuMemAlloc_v2(&mut p, bytes.max(8)) }) {
            return Err(format!("device allocation of {bytes} bytes"));
        }
        self.mem.push(p);
        Ok(p)
    }

    /// A device input holding `host`, with a pristine device copy.
    fn input(
        &mut self,
        host: &[f64],
    ) -> Result<(cu::CUdeviceptr, cu::CUdeviceptr, Vec<u8>), String> {
        let b = bytes_of(host);
        let (d, keep) = (self.dev(b.len())?, self.dev(b.len())?);
        // SAFETY: both device buffers hold `b.len()` bytes; synchronous copies.
        let ok = unsafe {
            ok_cu(cu::cuMemcpyHtoD_v2(d, b.as_ptr() as *const c_void, b.len()))
                && ok_cu(cu::cuMemcpyHtoD_v2(
                    keep,
                    b.as_ptr() as *const c_void,
                    b.len(),
                ))
        };
        if !ok {
            return Err("device copy".into());
        }
        Ok((d, keep, b))
    }

    /// Microseconds per call of `launch` (true when every library call succeeded): on device
    /// data (inputs restored device to device) and with the copies from and to host memory.
    fn time(
        &self,
        calls: usize,
        case: &Case,
        mut launch: impl FnMut() -> bool,
    ) -> (Option<f64>, Option<f64>) {
        let s = self.cu_stream();
        let mut back: Vec<Vec<u8>> = case.outputs.iter().map(|&(_, b)| vec![0u8; b]).collect();
        let mut good = true;
        let floor = per_call(calls, || {
            for (d, keep, host) in case.inputs.iter().filter(|_| case.in_place) {
                // SAFETY: both device buffers hold `host.len()` bytes.
                good &= ok_cu(unsafe { cu::cuMemcpyDtoDAsync_v2(*d, *keep, host.len(), s) });
            }
            good &= launch();
            // SAFETY: the floors' stream.
            good &= ok_cu(unsafe { cu::cuStreamSynchronize(s) });
        });
        let floor = good.then_some(floor);
        good = true;
        let copy = per_call(calls, || {
            for (d, _, host) in &case.inputs {
                // SAFETY: the device buffer holds `host.len()` bytes (pageable source).
                good &= ok_cu(unsafe {
                    cu::cuMemcpyHtoDAsync_v2(*d, host.as_ptr() as *const c_void, host.len(), s)
                });
            }
            good &= launch();
            for ((d, b), h) in case.outputs.iter().zip(back.iter_mut()) {
                // SAFETY: the device buffer holds `b` bytes, `h` as many (pageable).
                good &= ok_cu(unsafe {
                    cu::cuMemcpyDtoHAsync_v2(h.as_mut_ptr() as *mut c_void, *d, *b, s)
                });
            }
            // SAFETY: the floors' stream.
            good &= ok_cu(unsafe { cu::cuStreamSynchronize(s) });
        });
        (floor, good.then_some(copy))
    }

    /// The floors of the cases (name prefix, floor, floor with copies) and of the other methods.
    #[allow(clippy::type_complexity)]
    fn measure(
        mut self,
        calls: usize,
    ) -> Result<
        (
            Vec<(&'static str, Option<f64>, Option<f64>)>,
            Vec<(&'static str, Option<f64>, Option<f64>)>,
        ),
        String,
    > {
        let mut out = Vec::new();
        let mut alt = Vec::new();
        let r64 = cs::cudaDataType::CUDA_R_64F;
        let (h, prm) = (self.h, self.prm);
        // ---- dgemm 64 (C is output only: nothing to restore)
        {
            let n = 64usize;
            let a = self.input(&spd(n))?;
            let c = self.dev(n * n * 8)?;
            let case = Case {
                inputs: vec![a],
                in_place: false,
                outputs: vec![(c, n * n * 8)],
            };
            let ap = case.inputs[0].0;
            let (one, zero) = (1.0f64, 0.0f64);
            let bh = *self.blas.handle();
            let gemm = || {
                // SAFETY: A and C hold n x n doubles on the floors' stream (the handle's).
                unsafe {
                    cb::cublasDgemm_v2(
                        bh,
                        cb::cublasOperation_t::CUBLAS_OP_N,
                        cb::cublasOperation_t::CUBLAS_OP_N,
                        n as i32,
                        n as i32,
                        n as i32,
                        &one,
                        ap as *const f64,
                        n as i32,
                        ap as *const f64,
                        n as i32,
                        &zero,
                        c as *mut f64,
                        n as i32,
                    ) == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                }
            };
            let (f, fc) = self.time(calls, &case, gemm);
            out.push(("dgemm", f, fc));
        }
        let n = 4usize;
        let nb = n * n * 8;
        let info = self.dev(4)?;
        // ---- dpotrf 4 (Xpotrf, as our path)
        {
            let a = self.input(&spd(n))?;
            let ap = a.0;
            let (dw, hw) = {
                let (mut d, mut hw) = (0usize, 0usize);
                // SAFETY: a size query.
                let ok = ok_cs(unsafe {
                    cs::cusolverDnXpotrf_bufferSize(
                        h,
                        prm,
                        cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
                        n as i64,
                        r64,
                        ap as *const c_void,
                        n as i64,
                        r64,
                        &mut d,
                        &mut hw,
                    )
                });
                if !ok {
                    return Err("potrf workspace query".into());
                }
                (d, hw)
            };
            let ws = self.dev(dw)?;
            let mut hws = vec![0u8; hw.max(1)];
            let case = Case {
                in_place: true,
                inputs: vec![a],
                outputs: vec![(ap, nb), (info, 4)],
            };
            let (f, fc) = self.time(calls, &case, || {
                // SAFETY: A, the workspace and info in device memory of the sizes asked.
                ok_cs(unsafe {
                    cs::cusolverDnXpotrf(
                        h,
                        prm,
                        cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
                        n as i64,
                        r64,
                        ap as *mut c_void,
                        n as i64,
                        r64,
                        ws as *mut c_void,
                        dw,
                        hws.as_mut_ptr() as *mut c_void,
                        hw,
                        info as *mut i32,
                    )
                })
            });
            out.push(("dpotrf", f, fc));
        }
        // ---- dgetrf 4 and dgesv 4 (Xgetrf, Xgetrs)
        {
            let a = self.input(&general(n))?;
            let ap = a.0;
            let b = self.input(&[1.0; 4])?;
            let bp = b.0;
            let piv = self.dev(8 * n)?;
            let (mut dw, mut hw) = (0usize, 0usize);
            // SAFETY: a size query.
            let ok = ok_cs(unsafe {
                cs::cusolverDnXgetrf_bufferSize(
                    h,
                    prm,
                    n as i64,
                    n as i64,
                    r64,
                    ap as *const c_void,
                    n as i64,
                    r64,
                    &mut dw,
                    &mut hw,
                )
            });
            if !ok {
                return Err("getrf workspace query".into());
            }
            let ws = self.dev(dw)?;
            let mut hws = vec![0u8; hw.max(1)];
            let mut getrf = || {
                // SAFETY: A, pivots, workspace and info in device memory of the sizes asked.
                ok_cs(unsafe {
                    cs::cusolverDnXgetrf(
                        h,
                        prm,
                        n as i64,
                        n as i64,
                        r64,
                        ap as *mut c_void,
                        n as i64,
                        piv as *mut i64,
                        r64,
                        ws as *mut c_void,
                        dw,
                        hws.as_mut_ptr() as *mut c_void,
                        hw,
                        info as *mut i32,
                    )
                })
            };
            let case = Case {
                in_place: true,
                inputs: vec![a.clone()],
                outputs: vec![(ap, nb), (piv, 8 * n), (info, 4)],
            };
            let (f, fc) = self.time(calls, &case, &mut getrf);
            out.push(("dgetrf", f, fc));
            let case = Case {
                in_place: true,
                inputs: vec![a, b],
                outputs: vec![(ap, nb), (piv, 8 * n), (bp, 8 * n), (info, 4)],
            };
            let (f, fc) = self.time(calls, &case, || {
                getrf()
                    // SAFETY: the LU, pivots and B of the getrf above.
                    && ok_cs(unsafe {
                        cs::cusolverDnXgetrs(
                            h,
                            prm,
                            cs::cublasOperation_t::CUBLAS_OP_N,
                            n as i64,
                            1,
                            r64,
                            ap as *const c_void,
                            n as i64,
                            piv as *const i64,
                            r64,
                            bp as *mut c_void,
                            n as i64,
                            info as *mut i32,
                        )
                    })
            });
            out.push(("dgesv", f, fc));
        }
        // ---- dsyevd 4 (Xsyevd, as our path) and the Jacobi method (syevj)
        {
            let a = self.input(&spd(n))?;
            let ap = a.0;
            let w = self.dev(8 * n)?;
            let vec_mode = cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR;
            let lower = cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
            let (mut dw, mut hw) = (0usize, 0usize);
            // SAFETY: a size query.
            let ok = ok_cs(unsafe {
                cs::cusolverDnXsyevd_bufferSize(
                    h,
                    prm,
                    vec_mode,
                    lower,
                    n as i64,
                    r64,
                    ap as *const c_void,
                    n as i64,
                    r64,
                    w as *const c_void,
                    r64,
                    &mut dw,
                    &mut hw,
                )
            });
            if !ok {
                return Err("syevd workspace query".into());
            }
            let ws = self.dev(dw)?;
            let mut hws = vec![0u8; hw.max(1)];
            let case = Case {
                in_place: true,
                inputs: vec![a.clone()],
                outputs: vec![(ap, nb), (w, 8 * n), (info, 4)],
            };
            let (f, fc) = self.time(calls, &case, || {
                // SAFETY: A, w, workspace and info in device memory of the sizes asked.
                ok_cs(unsafe {
                    cs::cusolverDnXsyevd(
                        h,
                        prm,
                        vec_mode,
                        lower,
                        n as i64,
                        r64,
                        ap as *mut c_void,
                        n as i64,
                        r64,
                        w as *mut c_void,
                        r64,
                        ws as *mut c_void,
                        dw,
                        hws.as_mut_ptr() as *mut c_void,
                        hw,
                        info as *mut i32,
                    )
                })
            });
            out.push(("dsyevd", f, fc));
            let mut sj: cs::syevjInfo_t = std::ptr::null_mut();
            let mut lw = 0i32;
            // SAFETY: Jacobi parameters (defaults) and a size query.
            let ok = unsafe {
                ok_cs(cs::cusolverDnCreateSyevjInfo(&mut sj))
                    && ok_cs(cs::cusolverDnDsyevj_bufferSize(
                        h,
                        vec_mode,
                        lower,
                        n as i32,
                        ap as *const f64,
                        n as i32,
                        w as *const f64,
                        &mut lw,
                        sj,
                    ))
            };
            if ok {
                let wsj = self.dev(lw.max(1) as usize * 8)?;
                let (f, fc) = self.time(calls, &case, || {
                    // SAFETY: A, w, workspace and info in device memory of the sizes asked.
                    ok_cs(unsafe {
                        cs::cusolverDnDsyevj(
                            h,
                            vec_mode,
                            lower,
                            n as i32,
                            ap as *mut f64,
                            n as i32,
                            w as *mut f64,
                            wsj as *mut f64,
                            lw,
                            info as *mut i32,
                            sj,
                        )
                    })
                });
                alt.push(("dsyevd 4 as syevj (Jacobi)", f, fc));
                // SAFETY: made above, no longer used.
                unsafe { cs::cusolverDnDestroySyevjInfo(sj) };
            }
        }
        // ---- dgesdd 4 (Xgesvdp, as our path), Xgesvd, gesvdj
        {
            let a = self.input(&general(n))?;
            let ap = a.0;
            let (s, u, v) = (self.dev(8 * n)?, self.dev(nb)?, self.dev(nb)?);
            let vec_mode = cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR;
            let ni = n as i64;
            let (mut dw, mut hw) = (0usize, 0usize);
            // SAFETY: a size query.
            let ok = ok_cs(unsafe {
                cs::cusolverDnXgesvdp_bufferSize(
                    h,
                    prm,
                    vec_mode,
                    1,
                    ni,
                    ni,
                    r64,
                    ap as *const c_void,
                    ni,
                    r64,
                    s as *const c_void,
                    r64,
                    u as *const c_void,
                    ni,
                    r64,
                    v as *const c_void,
                    ni,
                    r64,
                    &mut dw,
                    &mut hw,
                )
            });
            if !ok {
                return Err("gesvdp workspace query".into());
            }
            println!(
                "fixed_cost: Xgesvdp 4x4 asks for {dw} bytes of device workspace ({} MiB)",
                dw >> 20
            );
            let ws = self.dev(dw)?;
            let mut hws = vec![0u8; hw.max(1)];
            let case = Case {
                in_place: true,
                inputs: vec![a],
                outputs: vec![(s, 8 * n), (u, nb), (v, nb), (info, 4)],
            };
            let (f, fc) = self.time(calls, &case, || {
                let mut err = 0.0f64;
                // SAFETY: A, s, U, V, workspace and info in device memory of the sizes asked.
                ok_cs(unsafe {
                    cs::cusolverDnXgesvdp(
                        h,
                        prm,
                        vec_mode,
                        1,
                        ni,
                        ni,
                        r64,
                        ap as *mut c_void,
                        ni,
                        r64,
                        s as *mut c_void,
                        r64,
                        u as *mut c_void,
                        ni,
                        r64,
                        v as *mut c_void,
                        ni,
                        r64,
                        ws as *mut c_void,
                        dw,
                        hws.as_mut_ptr() as *mut c_void,
                        hw,
                        info as *mut i32,
                        &mut err,
                    )
                })
            });
            out.push(("dgesdd", f, fc));
            // the QR-iteration SVD, jobs 'S'
            let (ju, jv) = (b'S' as i8, b'S' as i8);
            let (mut dq, mut hq) = (0usize, 0usize);
            // SAFETY: a size query.
            let ok = ok_cs(unsafe {
                cs::cusolverDnXgesvd_bufferSize(
                    h,
                    prm,
                    ju,
                    jv,
                    ni,
                    ni,
                    r64,
                    ap as *const c_void,
                    ni,
                    r64,
                    s as *const c_void,
                    r64,
                    u as *const c_void,
                    ni,
                    r64,
                    v as *const c_void,
                    ni,
                    r64,
                    &mut dq,
                    &mut hq,
                )
            });
            if ok {
                let wq = self.dev(dq)?;
                let mut hwq = vec![0u8; hq.max(1)];
                let (f, fc) = self.time(calls, &case, || {
                    // SAFETY: as above, with Xgesvd's workspace.
                    ok_cs(unsafe {
                        cs::cusolverDnXgesvd(
                            h,
                            prm,
                            ju,
                            jv,
                            ni,
                            ni,
                            r64,
                            ap as *mut c_void,
                            ni,
                            r64,
                            s as *mut c_void,
                            r64,
                            u as *mut c_void,
                            ni,
                            r64,
                            v as *mut c_void,
                            ni,
                            r64,
                            wq as *mut c_void,
                            dq,
                            hwq.as_mut_ptr() as *mut c_void,
                            hq,
                            info as *mut i32,
                        )
                    })
                });
                alt.push(("dgesdd 4 as Xgesvd (QR iteration)", f, fc));
            }
            // the Jacobi SVD (economy)
            let mut gj: cs::gesvdjInfo_t = std::ptr::null_mut();
            let mut lw = 0i32;
            // SAFETY: Jacobi parameters (defaults) and a size query.
            let ok = unsafe {
                ok_cs(cs::cusolverDnCreateGesvdjInfo(&mut gj))
                    && ok_cs(cs::cusolverDnDgesvdj_bufferSize(
                        h,
                        vec_mode,
                        1,
                        n as i32,
                        n as i32,
                        ap as *const f64,
                        n as i32,
                        s as *const f64,
                        u as *const f64,
                        n as i32,
                        v as *const f64,
                        n as i32,
                        &mut lw,
                        gj,
                    ))
            };
            if ok {
                let wj = self.dev(lw.max(1) as usize * 8)?;
                let (f, fc) = self.time(calls, &case, || {
                    // SAFETY: as above, with gesvdj's workspace.
                    ok_cs(unsafe {
                        cs::cusolverDnDgesvdj(
                            h,
                            vec_mode,
                            1,
                            n as i32,
                            n as i32,
                            ap as *mut f64,
                            n as i32,
                            s as *mut f64,
                            u as *mut f64,
                            n as i32,
                            v as *mut f64,
                            n as i32,
                            wj as *mut f64,
                            lw,
                            info as *mut i32,
                            gj,
                        )
                    })
                });
                alt.push(("dgesdd 4 as gesvdj (Jacobi)", f, fc));
                // SAFETY: made above, no longer used.
                unsafe { cs::cusolverDnDestroyGesvdjInfo(gj) };
            }
        }
        Ok((out, alt))
    }
}

impl Drop for Floors {
    fn drop(&mut self) {
        // SAFETY: the stream is idle after the measurements; every pointer came from
        // cuMemAlloc and the handle and parameters from their create calls.
        unsafe {
            cu::cuStreamSynchronize(self.cu_stream());
            for &p in &self.mem {
                cu::cuMemFree_v2(p);
            }
            cs::cusolverDnDestroyParams(self.prm);
            cs::cusolverDnDestroy(self.h);
        }
    }
}
