//! Criterion bench of the GEMM kernels beside cuBLAS (FP32 and TF32, square n = 1024 and 4096).
//! Timed with CUDA events through `iter_custom`; skips cleanly (prints why) without a GPU.
//! The full table with more shapes is `cargo run --release --example gemm_bench`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpukit_core::gemm::config::{self, fixed_plan, Family, WGMMA_CONFIGS};
use gpukit_core::gemm::raw::{self, BlasType, Precision, RawGemm};
use gpukit_jit::cudarc::driver::{sys, DevicePtr};
use std::time::Duration;

fn gemm(c: &mut Criterion) {
    if !gpukit_jit::libs::gpu_available() || !gpukit_jit::libs::cublas_present() {
        eprintln!("SKIPPED gemm bench: no GPU with cuBLAS on this machine");
        return;
    }
    let ctx = gpukit_jit::open_context(0).expect("context");
    let stream = ctx.new_stream().expect("stream");
    for n in [1024usize, 4096] {
        let host: Vec<f32> = (0..n * n)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0)
            .collect();
        let a = stream.clone_htod(&host).expect("htod");
        let b = stream.clone_htod(&host).expect("htod");
        let out = stream.clone_htod(&host).expect("htod");
        let g = {
            let (pa, _x) = a.device_ptr(&stream);
            let (pb, _y) = b.device_ptr(&stream);
            let (pc, _z) = out.device_ptr(&stream);
            RawGemm::contiguous(n, n, n, pa, pb, pc)
        };
        let mut group = c.benchmark_group(format!("gemm_{n}"));
        group.throughput(Throughput::Elements((2 * n * n * n) as u64));
        group
            .sample_size(20)
            .measurement_time(Duration::from_secs(2));
        type Run = Box<dyn Fn(&RawGemm) -> gpukit_core::Result<()>>;
        let s1 = stream.clone();
        let s2 = stream.clone();
        let s3 = stream.clone();
        let s4 = stream.clone();
        let s5 = stream.clone();
        let s6 = stream.clone();
        let sms = raw::multiprocessor_count(&ctx).expect("SM count");
        let mma_plan = config::plan(Family::Tf32, n as u32, n as u32, n as u32, 1, sms);
        let wgmma_plan = fixed_plan(WGMMA_CONFIGS[0], n as u32, 1);
        // Each closure is only called with `g`, whose pointers are live n*n f32 buffers.
        let mut runs: Vec<(&str, Run)> = vec![
            (
                "cublas_fp32",
                Box::new(move |g| {
                    // SAFETY: g points to live n*n f32 device buffers on this stream.
                    unsafe { raw::cublas_gemm(&s1, BlasType::F32, g) }
                }),
            ),
            (
                "ours_fp32",
                Box::new(move |g| {
                    // SAFETY: g points to live n*n f32 device buffers on this stream.
                    unsafe { raw::sgemm(&s2, Precision::Fp32, g) }
                }),
            ),
            (
                "cublas_tf32",
                Box::new(move |g| {
                    // SAFETY: g points to live n*n f32 device buffers on this stream.
                    unsafe { raw::cublas_gemm(&s3, BlasType::F32Tf32, g) }
                }),
            ),
            (
                "ours_tf32",
                Box::new(move |g| {
                    // SAFETY: g points to live n*n f32 device buffers on this stream.
                    unsafe { raw::sgemm(&s4, Precision::Tf32, g) }
                }),
            ),
            (
                "ours_tf32_mma",
                Box::new(move |g| {
                    // SAFETY: g points to live n*n f32 device buffers on this stream.
                    unsafe { raw::sgemm_with_plan(&s5, g, &mma_plan) }
                }),
            ),
        ];
        if raw::supports_wgmma(&ctx).expect("compute capability") {
            runs.push((
                "ours_tf32_wgmma",
                Box::new(move |g| {
                    // SAFETY: g points to live n*n f32 device buffers on this stream.
                    unsafe { raw::sgemm_with_plan(&s6, g, &wgmma_plan) }
                }),
            ));
        }
        for (name, run) in &runs {
            run(&g).expect("warm-up");
            group.bench_function(*name, |bch| {
                bch.iter_custom(|iters| {
                    let ev = || {
                        stream
                            .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                            .expect("event")
                    };
                    let start = ev();
                    for _ in 0..iters {
                        run(&g).expect("gemm");
                    }
                    let end = ev();
                    Duration::from_secs_f64(start.elapsed_ms(&end).expect("elapsed") as f64 * 1e-3)
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, gemm);
criterion_main!(benches);
