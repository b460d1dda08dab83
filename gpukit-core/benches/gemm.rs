//! Criterion bench of the GEMM kernels beside cuBLAS (FP32, TF32 and 3xTF32, square n = 1024
//! and 4096). Timed with CUDA events through `iter_custom`; skips cleanly (prints why) without a
//! GPU. The full table with more shapes and the errors is
//! `cargo run --release --example gemm_bench`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpukit_core::gemm::plan::{self, Family, Problem};
use gpukit_core::gemm::{cublas_gemm, sgemm, sgemm_with_plan, BlasType, Precision, RawGemm};
use gpukit_core::{Device, Stream};
use gpukit_jit::cudarc::driver::DevicePtr;
use std::time::Duration;

type Run = Box<dyn Fn(&RawGemm) -> gpukit_core::Result<()>>;

fn cublas(s: &Stream, ty: BlasType) -> Run {
    let s = s.clone();
    // SAFETY: the bench only calls this with `g`, whose pointers are live n*n f32 buffers on
    // this stream.
    Box::new(move |g| unsafe { cublas_gemm(&s, ty, g) })
}

fn ours(s: &Stream, p: Precision) -> Run {
    let s = s.clone();
    // SAFETY: as in `cublas`.
    Box::new(move |g| unsafe { sgemm(&s, p, g) })
}

fn forced(s: &Stream, p: plan::Plan) -> Run {
    let s = s.clone();
    // SAFETY: as in `cublas`.
    Box::new(move |g| unsafe { sgemm_with_plan(&s, g, &p) })
}

fn gemm(c: &mut Criterion) {
    if !gpukit_jit::libs::gpu_available() || !gpukit_jit::libs::cublas_present() {
        eprintln!("SKIPPED gemm bench: no GPU with cuBLAS on this machine");
        return;
    }
    let dev = Device::open(0).expect("device");
    let stream = dev.new_stream(0).expect("stream");
    let attrs = dev.attributes().clone();
    for n in [1024usize, 4096] {
        let host: Vec<f32> = (0..n * n)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 500.0)
            .collect();
        let cs = stream.cuda();
        let a = cs.clone_htod(&host).expect("htod");
        let b = cs.clone_htod(&host).expect("htod");
        let out = cs.clone_htod(&host).expect("htod");
        let g = {
            let (pa, _x) = a.device_ptr(cs);
            let (pb, _y) = b.device_ptr(cs);
            let (pc, _z) = out.device_ptr(cs);
            RawGemm::contiguous(n, n, n, pa, pb, pc)
        };
        let mut group = c.benchmark_group(format!("gemm_{n}"));
        group.throughput(Throughput::Elements((2 * n * n * n) as u64));
        group
            .sample_size(20)
            .measurement_time(Duration::from_secs(2));
        let problem = Problem::of(&g);
        let mut runs: Vec<(&str, Run)> = vec![
            ("cublas_fp32", cublas(&stream, BlasType::F32)),
            ("ours_fp32", ours(&stream, Precision::Fp32)),
            ("cublas_tf32", cublas(&stream, BlasType::F32Tf32)),
            ("ours_tf32", ours(&stream, Precision::Tf32)),
            ("ours_tf32x3", ours(&stream, Precision::Tf32x3)),
        ];
        if let Some(p) = plan::plan(Family::Sgemm, &problem, &attrs) {
            runs.push(("ours_fp32_simt", forced(&stream, p)));
        }
        if let Some(p) = plan::plan(Family::Tf32, &problem, &attrs) {
            runs.push(("ours_tf32_mma", forced(&stream, p)));
        }
        for (name, run) in &runs {
            run(&g).expect("warm-up");
            group.bench_function(*name, |bch| {
                bch.iter_custom(|iters| {
                    let start = stream.record().expect("event");
                    for _ in 0..iters {
                        run(&g).expect("gemm");
                    }
                    let end = stream.record().expect("event");
                    Duration::from_secs_f64(start.elapsed_ms(&end).expect("elapsed") as f64 * 1e-3)
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, gemm);
criterion_main!(benches);
