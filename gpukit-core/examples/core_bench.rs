//! Tables: elementwise add / mul / exp and sum on 1 GiB of f32 against a device-to-device copy
//! of the same bytes in the same process, the operator forms (`&a + &b`, `&a * 2.0`, ...)
//! beside the functions they stand for, a fused 4-operation expression beside the same
//! operations one by one, the cached allocate+free latency, host transfers, and every array
//! operation (elementwise, reductions, scans, random numbers, softmax, layer norm; the
//! operators `op_*`, broadcast rows and columns, fused expressions of 2-4 operations
//! `fusedN_*` beside the same operations one by one `chainN_*`) at 1 MiB and 1 GiB per input,
//! in the form `tools/gpu/core_torch.py` times the same operations in torch (written as
//! tab-separated rows to `$CORE_BENCH_TSV` when set, joined by `tools/gpu/core_join.py` into
//! the table with ratios and targets).
//!
//! Method: CUDA events on the compute stream around `REPS` back-to-back operations after a
//! warm-up, median of `TRIALS` trials; random inputs (1 GiB each, far beyond the 60 MB L2, so no
//! rotation is needed); every result is checked on a sample against a CPU reference, and the
//! output of the first run is poisoned first so unwritten elements would show. GB/s counts the
//! bytes each operation must move: copy and exp read + write (2x), add and mul 2 reads + 1
//! write (3x), sum 1 read (1x).
//!
//! In the operations table, the 1 MiB cases rotate through enough input sets to exceed four
//! times the L2 cache, so no call reads cached inputs; host-side launch overhead is part of
//! every figure (back-to-back calls from one thread between two events).
//!
//! ```text
//! cargo run --release -p gpukit-core --example core_bench [-- GiB]
//! ```

use gpukit_core::{f16, random::Generator, Device, GpuArray, Result};
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
        (
            "mul_scalar(2.0) (function)",
            2.0,
            time_ms(&dev, || a.mul_scalar(2.0).map(drop))?,
        ),
        (
            "sub (&a - &b)",
            3.0,
            time_ms(&dev, || (&a - &b).eval().map(drop))?,
        ),
        (
            "div (&a / &b)",
            3.0,
            time_ms(&dev, || (&a / &b).eval().map(drop))?,
        ),
        ("neg (-&a)", 2.0, time_ms(&dev, || (-&a).eval().map(drop))?),
        (
            "exp (a.expr().exp())",
            2.0,
            time_ms(&dev, || a.expr().exp().eval().map(drop))?,
        ),
        (
            "fused 4 ops: ((&a * &b + &a) / &b).exp()",
            3.0,
            time_ms(&dev, || ((&a * &b + &a) / &b).exp().eval().map(drop))?,
        ),
        (
            "the same 4 ops one by one (functions)",
            3.0,
            time_ms(&dev, || a.mul(&b)?.add(&a)?.div(&b)?.exp().map(drop))?,
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
    // Operators against the functions they stand for (issue 23: the same bandwidth), and a
    // fused expression against the same operations one by one (faster).
    let ms = |name: &str| rows.iter().find(|r| r.0 == name).map_or(f64::NAN, |r| r.2);
    for (op, func) in [
        ("add (&a + &b)", "add"),
        ("mul scalar (&a * 2.0)", "mul_scalar(2.0) (function)"),
    ] {
        let r = ms(func) / ms(op);
        println!(
            "targets: {op} at {:.2}x the function's speed (>= 0.95: {})",
            r,
            if r >= 0.95 { "met" } else { "MISSED" }
        );
    }
    let r = ms("the same 4 ops one by one (functions)")
        / ms("fused 4 ops: ((&a * &b + &a) / &b).exp()");
    println!(
        "targets: the fused 4-op expression {r:.2}x faster than its operations one by one (> 1: {})",
        if r > 1.0 { "met" } else { "MISSED" }
    );
    drop((a, b, dst, ha, hb, hback, reused));
    operations(&dev)
}

/// Median milliseconds per call of `f(k)` over input sets `k = 0, 1, ...` (cycled), timed with
/// events on the device's stream after one warm-up pass over every set.
fn time_sets(dev: &Device, sets: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    for k in 0..sets.max(2) {
        f(k % sets)?;
    }
    let reps = sets.max(REPS);
    let s = dev.stream();
    let mut trials = Vec::new();
    for _ in 0..TRIALS {
        let e0 = s.record()?;
        for r in 0..reps {
            f(r % sets)?;
        }
        let e1 = s.record()?;
        trials.push(e0.elapsed_ms(&e1)? as f64 / reps as f64);
    }
    Ok(median(trials))
}

/// One row of the operations table: `(op, size label, ms, bytes moved)`.
type OpRow = (String, String, f64, f64);

/// Inputs of one size: `sets` independent random f32 arrays of `n` elements (two per set), masks
/// and i32 arrays derived from them.
struct Inputs {
    a: Vec<GpuArray<f32>>,
    b: Vec<GpuArray<f32>>,
    ma: Vec<GpuArray<u8>>,
    mb: Vec<GpuArray<u8>>,
    ia: Vec<GpuArray<i32>>,
    ib: Vec<GpuArray<i32>>,
}

fn inputs(dev: &Device, n: usize, sets: usize, rng: &Generator) -> Result<Inputs> {
    let mut x = Inputs {
        a: Vec::new(),
        b: Vec::new(),
        ma: Vec::new(),
        mb: Vec::new(),
        ia: Vec::new(),
        ib: Vec::new(),
    };
    for _ in 0..sets {
        let a = rng.uniform::<f32>(dev, &[n], -1.0, 1.0)?;
        let b = rng.uniform::<f32>(dev, &[n], 0.5, 2.0)?;
        x.ma.push(a.gt_scalar(0.0)?);
        x.mb.push(b.gt_scalar(1.0)?);
        x.ia.push(a.mul_scalar(1e6)?.astype::<i32>()?);
        x.ib.push(b.mul_scalar(1e6)?.astype::<i32>()?);
        x.a.push(a);
        x.b.push(b);
    }
    Ok(x)
}

/// Every array operation at 1 MiB and 1 GiB of f32 per input (see the module docs).
fn operations(dev: &Device) -> Result<()> {
    let l2 = dev.attributes().l2_cache_bytes.max(1 << 20);
    let rng = Generator::new(2024);
    let mut rows: Vec<OpRow> = Vec::new();
    for (label, bytes) in [("1MiB", 1usize << 20), ("1GiB", 1usize << 30)] {
        let n = bytes / 4;
        // Enough sets that every call reads inputs evicted from L2 (two arrays per set).
        let sets = (4 * l2).div_ceil(2 * bytes).max(1);
        let x = inputs(dev, n, sets, &rng)?;
        let b1 = bytes as f64;
        let mut add = |name: &str, moved: f64, ms: f64| {
            rows.push((name.to_string(), label.to_string(), ms, moved * b1));
        };
        macro_rules! row {
            ($name:expr, $moved:expr, |$k:ident| $e:expr) => {
                add($name, $moved, time_sets(dev, sets, |$k| $e.map(drop))?)
            };
        }
        row!("add", 3.0, |k| x.a[k].add(&x.b[k]));
        row!("sub", 3.0, |k| x.a[k].sub(&x.b[k]));
        row!("mul", 3.0, |k| x.a[k].mul(&x.b[k]));
        row!("div", 3.0, |k| x.a[k].div(&x.b[k]));
        row!("mul_scalar", 2.0, |k| x.a[k].mul_scalar(2.0));
        row!("maximum", 3.0, |k| x.a[k].maximum(&x.b[k]));
        row!("pow", 3.0, |k| x.b[k].pow(&x.a[k]));
        row!("remainder", 3.0, |k| x.a[k].remainder(&x.b[k]));
        row!("neg", 2.0, |k| x.a[k].neg());
        row!("abs", 2.0, |k| x.a[k].abs());
        row!("exp", 2.0, |k| x.a[k].exp());
        row!("log", 2.0, |k| x.b[k].log());
        row!("sqrt", 2.0, |k| x.b[k].sqrt());
        row!("tanh", 2.0, |k| x.a[k].tanh());
        row!("sigmoid", 2.0, |k| x.a[k].sigmoid());
        row!("relu", 2.0, |k| x.a[k].relu());
        row!("sin", 2.0, |k| x.a[k].sin());
        row!("cos", 2.0, |k| x.a[k].cos());
        row!("floor", 2.0, |k| x.a[k].floor());
        row!("round", 2.0, |k| x.a[k].round());
        row!("clip", 2.0, |k| x.a[k].clip(-0.5, 0.5));
        row!("isnan", 1.25, |k| x.a[k].isnan());
        row!("eq", 2.25, |k| x.a[k].eq(&x.b[k]));
        row!("logical_and", 0.75, |k| x.ma[k].logical_and(&x.mb[k]));
        row!("where", 3.25, |k| gpukit_core::where_(
            &x.ma[k], &x.a[k], &x.b[k]
        ));
        row!("bitwise_and_i32", 3.0, |k| x.ia[k].bitwise_and(&x.ib[k]));
        row!("cast_f16", 1.5, |k| x.a[k].astype::<f16>());
        row!("expr_2a_plus_b", 3.0, |k| (2.0 * &x.a[k] + &x.b[k]).eval());
        // The operator forms of the rows above (issue 23: the same speed as the functions).
        row!("op_add", 3.0, |k| (&x.a[k] + &x.b[k]).eval());
        row!("op_sub", 3.0, |k| (&x.a[k] - &x.b[k]).eval());
        row!("op_mul", 3.0, |k| (&x.a[k] * &x.b[k]).eval());
        row!("op_div", 3.0, |k| (&x.a[k] / &x.b[k]).eval());
        row!("op_mul_scalar", 2.0, |k| (&x.a[k] * 2.0).eval());
        row!("op_rsub_scalar", 2.0, |k| (1.0 - &x.a[k]).eval());
        row!("op_neg", 2.0, |k| (-&x.a[k]).eval());
        row!("op_exp", 2.0, |k| x.a[k].expr().exp().eval());
        row!("op_maximum", 3.0, |k| x.a[k].expr().maximum(&x.b[k]).eval());
        // A bias row broadcast over rows of 1024, and a column over the same rows.
        let bias = x.b[0].slice(&gpukit_core::s![0..1024])?;
        let colv = x.b[0]
            .slice(&gpukit_core::s![0..n / 1024])?
            .reshape(&[n / 1024, 1])?;
        row!("op_add_row_bias", 2.0, |k| (&x.a[k]
            .reshape(&[n / 1024, 1024])?
            + &bias)
            .eval());
        row!("add_row_bias", 2.0, |k| x.a[k]
            .reshape(&[n / 1024, 1024])?
            .add(&bias));
        row!("op_mul_column", 2.0, |k| (&x.a[k]
            .reshape(&[n / 1024, 1024])?
            * &colv)
            .eval());
        row!("mul_column", 2.0, |k| x.a[k]
            .reshape(&[n / 1024, 1024])?
            .mul(&colv));
        // Fused expressions of 2, 3 and 4 operations against the same operations one by one
        // (named functions: one kernel and one pass over memory each). Bytes moved: what the
        // fused kernel must move (two inputs read, one output written).
        row!("fused2_2a_plus_b", 3.0, |k| (2.0 * &x.a[k] + &x.b[k])
            .eval());
        row!("chain2_2a_plus_b", 3.0, |k| x.a[k]
            .mul_scalar(2.0)?
            .add(&x.b[k]));
        row!("fused3_amb_times_a_plus_1", 3.0, |k| ((&x.a[k] - &x.b[k])
            * &x.a[k]
            + 1.0)
            .eval());
        row!("chain3_amb_times_a_plus_1", 3.0, |k| x.a[k]
            .sub(&x.b[k])?
            .mul(&x.a[k])?
            .add_scalar(1.0));
        row!("fused4_exp_ab_plus_a_over_b", 3.0, |k| ((&x.a[k]
            * &x.b[k]
            + &x.a[k])
            / &x.b[k])
            .exp()
            .eval());
        row!("chain4_exp_ab_plus_a_over_b", 3.0, |k| x.a[k]
            .mul(&x.b[k])?
            .add(&x.a[k])?
            .div(&x.b[k])?
            .exp());
        row!("sum", 1.0, |k| x.a[k].sum());
        row!("mean", 1.0, |k| x.a[k].mean());
        row!("max", 1.0, |k| x.a[k].max());
        row!("min", 1.0, |k| x.a[k].min());
        row!("prod", 1.0, |k| x.b[k].prod());
        row!("any", 1.0, |k| x.a[k].any());
        row!("all", 1.0, |k| x.a[k].all());
        row!("var", 1.0, |k| x.a[k].var(None, false, 0));
        row!("std", 1.0, |k| x.a[k].std(None, false, 0));
        row!("argmax", 1.0, |k| x.a[k].argmax());
        row!("sum_i32", 1.0, |k| x.ia[k].sum());
        row!("sum_rows_1024", 1.0, |k| x.a[k]
            .reshape(&[n / 1024, 1024])?
            .sum_axis(1));
        row!("sum_axis0_2cols", 1.0, |k| x.a[k]
            .reshape(&[n / 2, 2])?
            .sum_axis(0));
        row!("cumsum", 2.0, |k| x.a[k].cumsum(None));
        row!("uniform", 1.0, |_k| rng.uniform::<f32>(dev, &[n], 0.0, 1.0));
        row!("normal", 1.0, |_k| rng.normal::<f32>(dev, &[n], 0.0, 1.0));
    }
    // Row kernels on 256 MiB of f32.
    let total = 1usize << 26;
    for r in [4096usize, 32768] {
        let x = rng.normal::<f32>(dev, &[total / r, r], 0.0, 1.0)?;
        let g = rng.uniform::<f32>(dev, &[r], 0.5, 1.5)?;
        let bb = rng.uniform::<f32>(dev, &[r], -0.5, 0.5)?;
        let ms = time_sets(dev, 1, |_| x.softmax(-1).map(drop))?;
        rows.push((
            format!("softmax_{r}"),
            "256MiB".into(),
            ms,
            2.0 * (total * 4) as f64,
        ));
        let ms = time_sets(dev, 1, |_| {
            x.layer_norm(Some(&g), Some(&bb), 1e-5).map(drop)
        })?;
        rows.push((
            format!("layernorm_{r}"),
            "256MiB".into(),
            ms,
            2.0 * (total * 4) as f64,
        ));
    }
    println!();
    println!("| op | size | ms | GB/s |");
    println!("| --- | --- | --- | --- |");
    for (op, size, ms, moved) in &rows {
        println!("| {op} | {size} | {ms:.4} | {:.0} |", moved / ms / 1e6);
    }
    if let Ok(path) = std::env::var("CORE_BENCH_TSV") {
        let mut text = String::from("op\tsize\tms\n");
        for (op, size, ms, _) in &rows {
            text.push_str(&format!("{op}\t{size}\t{ms:.6}\n"));
        }
        std::fs::write(&path, text).map_err(|e| gpukit_core::Error::InvalidArgument {
            op: "core_bench".into(),
            reason: format!("writing {path}: {e}"),
        })?;
        println!("rows written to {path}");
    }
    Ok(())
}
