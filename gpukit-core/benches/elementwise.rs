#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! Criterion bench: add / mul / exp / sum on 1 GiB of f32 beside a device-to-device copy of the
//! same bytes, in GB/s (Throughput counts the bytes each operation moves: copy and exp 2x, add
//! and mul 3x, sum 1x), timed with CUDA events through `iter_custom`; and the cached
//! allocate+free latency. Without a GPU it prints a skip line and exits 0.
//! `examples/core_bench.rs` prints the same comparison as one table.

use criterion::{criterion_group, Criterion, Throughput};
use gpukit_core::{Device, GpuArray};
use std::time::{Duration, Instant};

const N: usize = 1 << 28; // 1 GiB of f32

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Times `iters` calls of `f` with events on the current stream.
fn events(dev: &Device, iters: u64, mut f: impl FnMut()) -> Duration {
    let s = dev.stream();
    let e0 = s.record().expect("event");
    for _ in 0..iters {
        f();
    }
    let e1 = s.record().expect("event");
    Duration::from_secs_f64(e0.elapsed_ms(&e1).expect("elapsed") as f64 / 1e3)
}

fn elementwise(c: &mut Criterion) {
    let dev = Device::open(0).expect("device 0");
    let a = GpuArray::from_slice(&dev, &random(N, 1), &[N]).expect("upload");
    let b = GpuArray::from_slice(&dev, &random(N, 2), &[N]).expect("upload");
    let dst = GpuArray::<f32>::empty(&dev, &[N]).expect("alloc");
    let bytes = (N * 4) as u64;
    let mut g = c.benchmark_group("f32_1GiB");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Bytes(2 * bytes));
    g.bench_function("copy_dtod (baseline)", |bch| {
        bch.iter_custom(|iters| {
            events(&dev, iters, || {
                let s = dev.stream();
                // SAFETY: both buffers hold N f32 and are ordered on the current stream.
                unsafe {
                    gpukit_jit::cudarc::driver::result::memcpy_dtod_async(
                        dst.device_ptr(),
                        a.device_ptr(),
                        N * 4,
                        s.cuda().cu_stream(),
                    )
                }
                .expect("copy");
            })
        })
    });
    g.throughput(Throughput::Bytes(3 * bytes));
    g.bench_function("add", |bch| {
        bch.iter_custom(|i| events(&dev, i, || drop(a.add(&b).expect("add"))))
    });
    g.bench_function("mul", |bch| {
        bch.iter_custom(|i| events(&dev, i, || drop(a.mul(&b).expect("mul"))))
    });
    g.throughput(Throughput::Bytes(2 * bytes));
    g.bench_function("exp", |bch| {
        bch.iter_custom(|i| events(&dev, i, || drop(a.exp().expect("exp"))))
    });
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("sum", |bch| {
        bch.iter_custom(|i| events(&dev, i, || drop(a.sum().expect("sum"))))
    });
    g.finish();

    let al = dev.allocator().clone();
    let mut g = c.benchmark_group("allocator");
    g.sample_size(20).measurement_time(Duration::from_secs(1));
    g.bench_function("cached alloc+free 1 MiB", |bch| {
        bch.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                drop(al.alloc(1 << 20).expect("alloc"));
            }
            t.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, elementwise);

fn main() {
    if !gpukit_jit::libs::gpu_available() {
        println!("elementwise bench: no CUDA driver or GPU on this machine; skipped.");
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
