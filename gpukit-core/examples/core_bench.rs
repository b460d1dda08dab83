//! One table: elementwise add / mul / exp and sum on 1 GiB of f32 against a device-to-device
//! copy of the same bytes in the same process, plus the cached allocate+free latency.
//!
//! Method: CUDA events on the compute stream around `REPS` back-to-back operations after a
//! warm-up, median of `TRIALS` trials; random inputs (1 GiB each, far beyond the 60 MB L2, so no
//! rotation is needed); every result is checked on a sample against a CPU reference, and the
//! output of the first run is poisoned first so unwritten elements would show. GB/s counts the
//! bytes each operation must move: copy and exp read + write (2x), add and mul 2 reads + 1
//! write (3x), sum 1 read (1x).
//!
//! ```text
//! cargo run --release -p gpukit-core --example core_bench [-- GiB]
//! ```

use gpukit_core::{Device, GpuArray, Result};
use std::process::ExitCode;
use std::time::Instant;

const REPS: usize = 5;
const TRIALS: usize = 7;

fn main() -> ExitCode {
    if !gpukit_jit::libs::gpu_available() {
        println!("core_bench: no CUDA driver or GPU on this machine; skipped.");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("core_bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    // Parallel SplitMix64 fill, uniform in [-1, 1).
    let mut v = vec![0f32; n];
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1);
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, part) in v.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let mut x = seed ^ ((t as u64 + 1) << 40);
                for e in part {
                    x = x.wrapping_add(0x9e3779b97f4a7c15);
                    let mut z = x;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
                    z ^= z >> 31;
                    *e = ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
                }
            });
        }
    });
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median milliseconds per call of `f`, timed with events on the device's compute stream.
fn time_ms(dev: &Device, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..2 {
        f()?;
    }
    let s = dev.stream();
    let mut trials = Vec::new();
    for _ in 0..TRIALS {
        let e0 = s.record()?;
        for _ in 0..REPS {
            f()?;
        }
        let e1 = s.record()?;
        trials.push(e0.elapsed_ms(&e1)? as f64 / REPS as f64);
    }
    Ok(median(trials))
}

fn run() -> Result<()> {
    let gib: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1.0);
    let dev = Device::open(0)?;
    let n = ((gib * (1u64 << 30) as f64) as usize / 4) & !1023;
    let bytes = (n * 4) as f64;
    println!(
        "device: {} ({} SMs); {} f32 = {:.2} GiB per array; {REPS} reps x {TRIALS} trials, median",
        dev.name(),
        dev.multiprocessor_count(),
        n,
        bytes / (1u64 << 30) as f64
    );
    let t = Instant::now();
    let ha = random_f32(n, 1);
    let hb = random_f32(n, 2);
    let a = GpuArray::from_slice(&dev, &ha, &[n])?;
    let b = GpuArray::from_slice(&dev, &hb, &[n])?;
    println!(
        "upload of 2 x {:.2} GiB: {:.0} ms",
        bytes / (1u64 << 30) as f64,
        t.elapsed().as_secs_f64() * 1e3
    );

    // Correctness on samples (poisoned output first).
    let mut out = GpuArray::<f32>::full(&dev, &[n], f32::NAN)?;
    out.copy_from(&a.add(&b)?)?;
    let sum_ref: f64 = ha.iter().map(|&x| x as f64).sum();
    {
        let got_add = out.to_vec()?;
        let got_mul = a.mul(&b)?.to_vec()?;
        let got_exp = a.exp()?.to_vec()?;
        let step = n / 4096;
        for i in (0..n).step_by(step.max(1)).chain([n - 1]) {
            assert_eq!(got_add[i], ha[i] + hb[i], "add at {i}");
            assert_eq!(got_mul[i], ha[i] * hb[i], "mul at {i}");
            let e = (ha[i] as f64).exp();
            assert!(((got_exp[i] as f64) - e).abs() <= 4e-7 * e, "exp at {i}");
        }
        assert!(
            got_add.iter().all(|x| !x.is_nan()),
            "an add output element was not written"
        );
        let s = a.sum()?.item()? as f64;
        assert!(
            (s - sum_ref).abs() <= 1e-6 * ha.iter().map(|x| x.abs() as f64).sum::<f64>(),
            "sum {s} vs {sum_ref}"
        );
    }
    drop(out);

    // Baseline: device-to-device copy of the same bytes on the same stream.
    let dst = GpuArray::<f32>::empty(&dev, &[n])?;
    let s = dev.stream();
    let copy_ms = time_ms(&dev, || {
        dev.context()
            .bind_to_thread()
            .map_err(|e| gpukit_core::Error::Driver {
                action: "bind".into(),
                source: e,
            })?;
        // SAFETY: both buffers hold n f32 and are ordered on stream `s`.
        unsafe {
            gpukit_jit::cudarc::driver::result::memcpy_dtod_async(
                dst.device_ptr(),
                a.device_ptr(),
                n * 4,
                s.cuda().cu_stream(),
            )
        }
        .map_err(|e| gpukit_core::Error::Driver {
            action: "copying".into(),
            source: e,
        })
    })?;
    let copy_gbs = 2.0 * bytes / copy_ms / 1e6;
    let rows: Vec<(&str, f64, f64)> = vec![
        ("copy (baseline)", 2.0, copy_ms),
        ("add", 3.0, time_ms(&dev, || a.add(&b).map(drop))?),
        ("mul", 3.0, time_ms(&dev, || a.mul(&b).map(drop))?),
        ("exp", 2.0, time_ms(&dev, || a.exp().map(drop))?),
        ("sum", 1.0, time_ms(&dev, || a.sum().map(drop))?),
        (
            "add (&a + &b)",
            3.0,
            time_ms(&dev, || (&a + &b).eval().map(drop))?,
        ),
        (
            "mul scalar (&a * 2.0)",
            2.0,
            time_ms(&dev, || (&a * 2.0).eval().map(drop))?,
        ),
    ];

    // Cached allocate + free (host time, includes the owner/quota bookkeeping).
    let al = dev.allocator();
    drop(al.alloc(1 << 20)?);
    let iters = 200_000;
    let t = Instant::now();
    for _ in 0..iters {
        drop(al.alloc(1 << 20)?);
    }
    let alloc_ns = t.elapsed().as_secs_f64() * 1e9 / iters as f64;
    let st = al.stats();

    // Transfers of 1 GiB (host timers, after a warm-up; median of 3): gpukit's staged pinned
    // path against a plain pageable cuMemcpy and a pure pinned DMA in the same process.
    let ctx = dev.context().clone();
    let drv = |e| gpukit_core::Error::Driver {
        action: "baseline copy".into(),
        source: e,
    };
    let host_ms = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        f()?;
        let mut v = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(median(v))
    };
    let mut hback = vec![0f32; n];
    let up_ms = host_ms(&mut || {
        GpuArray::from_slice(&dev, &ha, &[n]).and_then(|g| dev.synchronize().map(|_| drop(g)))
    })?;
    let down_ms = host_ms(&mut || a.to_vec().map(drop))?;
    let mut reused = vec![0f32; n];
    let down_reused_ms = host_ms(&mut || a.copy_to_host(&mut reused))?;
    let page_up = host_ms(&mut || {
        ctx.bind_to_thread().map_err(drv)?;
        // SAFETY: dst holds n f32; the source slice is valid for the synchronous copy.
        unsafe { gpukit_jit::cudarc::driver::result::memcpy_htod_sync(dst.device_ptr(), &ha) }
            .map_err(drv)
    })?;
    let page_down = host_ms(&mut || {
        ctx.bind_to_thread().map_err(drv)?;
        // SAFETY: a holds n f32; the destination slice is valid for the synchronous copy.
        unsafe { gpukit_jit::cudarc::driver::result::memcpy_dtoh_sync(&mut hback, a.device_ptr()) }
            .map_err(drv)
    })?;
    // SAFETY: the pinned buffer is written by the device copy below before anything reads it.
    let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(n * 4, 0) }.map_err(drv)?;
    let pin_up = host_ms(&mut || {
        let p = pinned.as_ptr().map_err(drv)?;
        ctx.bind_to_thread().map_err(drv)?;
        // SAFETY: p points to n*4 pinned bytes; dst holds n*4 bytes.
        unsafe {
            gpukit_jit::cudarc::driver::sys::cuMemcpyHtoD_v2(dst.device_ptr(), p as *const _, n * 4)
        }
        .result()
        .map_err(drv)
    })?;
    let pin_down = host_ms(&mut || {
        let p = pinned.as_mut_ptr().map_err(drv)?;
        ctx.bind_to_thread().map_err(drv)?;
        // SAFETY: p points to n*4 pinned bytes; a holds n*4 bytes.
        unsafe {
            gpukit_jit::cudarc::driver::sys::cuMemcpyDtoH_v2(p as *mut _, a.device_ptr(), n * 4)
        }
        .result()
        .map_err(drv)
    })?;
    drop(pinned);

    println!();
    println!("| transfer of 1 GiB | host-to-device GB/s | device-to-host GB/s |");
    println!("| --- | --- | --- |");
    for (name, u, d) in [
        (
            "gpukit from_slice / to_vec (pinned staging, incl. host copies and Vec allocation)",
            up_ms,
            down_ms,
        ),
        (
            "gpukit from_slice / copy_to_host into a reused buffer",
            up_ms,
            down_reused_ms,
        ),
        (
            "cuMemcpy from pageable host memory (baseline)",
            page_up,
            page_down,
        ),
        (
            "cuMemcpy from pinned host memory, DMA only (ceiling)",
            pin_up,
            pin_down,
        ),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} |",
            bytes / u / 1e6,
            bytes / d / 1e6
        );
    }

    println!();
    println!("| op | ms | GB/s | % of copy |");
    println!("| --- | --- | --- | --- |");
    for (name, factor, ms) in &rows {
        let gbs = factor * bytes / ms / 1e6;
        println!(
            "| {name} | {ms:.3} | {gbs:.0} | {:.1} % |",
            100.0 * gbs / copy_gbs
        );
    }
    println!(
        "| cached alloc+free (1 MiB) | {:.3} us | | |",
        alloc_ns / 1e3
    );
    println!();
    println!("allocator: {st:?}");
    let add = rows[1].1 * bytes / rows[1].2 / 1e6 / copy_gbs;
    let sum = rows[4].1 * bytes / rows[4].2 / 1e6 / copy_gbs;
    println!(
        "targets: add {:.1} % of copy (>= 90 %: {}), sum {:.1} % (>= 90 %: {}), alloc+free {:.3} us (< 1 us: {})",
        100.0 * add,
        if add >= 0.9 { "met" } else { "MISSED" },
        100.0 * sum,
        if sum >= 0.9 { "met" } else { "MISSED" },
        alloc_ns / 1e3,
        if alloc_ns < 1000.0 { "met" } else { "MISSED" }
    );
    Ok(())
}
