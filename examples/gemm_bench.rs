//! GEMM speed: our FP32 and TF32 kernels beside cuBLAS, in one process, one table.
//!
//! ```text
//! gemm_bench                      # the table (TFLOP/s, median of repeats, CUDA events)
//! gemm_bench --sweep              # also every tile configuration x split-K per shape
//! gemm_bench --cubin DIR          # also write the chosen kernels' CUBINs (for cuobjdump -sass)
//! gemm_bench --precompile DIR     # no GPU needed: compile every GEMM kernel for sm_90 into a
//!                                 # kernel cache at DIR (carry it, set GPUKIT_CACHE_DIR=DIR)
//! gemm_bench --shapes 4096,4096,4096;1024,8192,1024
//! ```
//!
//! Inputs are random (never zeros), rotated among several sets so that A and B together exceed
//! the 60 MB L2; each method is warmed up, then timed with CUDA events over repeated launches,
//! median of 9 samples. Every shape also checks our result against cuBLAS FP32 (normwise).
//!
//! TF32 columns: "ours TF32" is the path the library chooses (`GPUKIT_GEMM_TF32` unset: the
//! planner; see `gemm::raw`), then the best `mma.sync` plan and the Hopper `wgmma` kernel each
//! forced (the latter on compute capability 9.0 only), and the share of the `wgmma` time spent
//! in its operand pack (the pack kernels timed alone).

use gpukit_core::gemm::config::{
    self, fixed_plan, Family, Plan, SGEMM_CONFIGS, TF32_CONFIGS, WGMMA_CONFIGS,
};
use gpukit_core::gemm::kernels;
use gpukit_core::gemm::raw::{self, BlasType, Precision, RawGemm};
use gpukit_jit::cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use std::sync::Arc;

const SHAPES: [(usize, usize, usize); 7] = [
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (8192, 1024, 8192),
    (1024, 8192, 1024),
    (4096, 4096, 256),
];

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = real_main() {
        eprintln!("gemm_bench: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    if let Some(dir) = opt("--precompile") {
        return precompile(&dir);
    }
    let sweep = args.iter().any(|a| a == "--sweep");
    let cubin_dir = opt("--cubin");
    let shapes: Vec<(usize, usize, usize)> = match opt("--shapes") {
        Some(s) => s
            .split(';')
            .map(|t| {
                let v: Vec<usize> = t
                    .split(',')
                    .map(|x| x.trim().parse().unwrap_or(0))
                    .collect();
                (v[0], v[1], v[2])
            })
            .collect(),
        None => SHAPES.to_vec(),
    };
    if !gpukit_jit::libs::gpu_available() || !gpukit_jit::libs::cublas_present() {
        println!("gemm_bench: no GPU with cuBLAS on this machine; nothing to measure");
        return Ok(());
    }
    let ctx = gpukit_jit::open_context(0)?;
    let stream = ctx.new_stream()?;
    let sms = raw::multiprocessor_count(&ctx)?;
    let name = ctx.name()?;
    let wgmma = raw::supports_wgmma(&ctx)?;
    println!("device: {name}, {sms} SMs, wgmma kernel: {wgmma}");

    let mut rows = Vec::new();
    for &(m, n, k) in &shapes {
        let mut bench = Bench::new(&ctx, &stream, m, n, k)?;
        let flops = 2.0 * m as f64 * n as f64 * k as f64;
        let tf = |ms: f64| flops / (ms * 1e-3) / 1e12;
        // SAFETY (every closure below): the RawGemm comes from Bench::raw, whose buffers are
        // live device allocations of exactly m*k, k*n and m*n f32 on `stream`.
        // SAFETY: see above (buffers owned by `bench`, sized for this shape).
        let cublas32 = |g: &RawGemm| unsafe { raw::cublas_gemm(&stream, BlasType::F32, g) };
        // SAFETY: see above (buffers owned by `bench`, sized for this shape).
        let ours32 = |g: &RawGemm| unsafe { raw::sgemm(&stream, Precision::Fp32, g) };
        // SAFETY: see above (buffers owned by `bench`, sized for this shape).
        let cublas_tf = |g: &RawGemm| unsafe { raw::cublas_gemm(&stream, BlasType::F32Tf32, g) };
        // SAFETY: see above (buffers owned by `bench`, sized for this shape).
        let ours_tf = |g: &RawGemm| unsafe { raw::sgemm(&stream, Precision::Tf32, g) };
        let c_fp32 = bench.time(cublas32)?;
        let reference = bench.result(cublas32)?;
        let o_fp32 = bench.time(ours32)?;
        let err_fp32 = normwise(&bench.result(ours32)?, &reference);
        let c_tf32 = bench.time(cublas_tf)?;
        let o_tf32 = bench.time(ours_tf)?;
        let err_tf32 = normwise(&bench.result(ours_tf)?, &reference);
        let g = bench.raw(0);
        let p32 = raw::plan_for(&ctx, Precision::Fp32, &g)?;
        let ptf = raw::plan_for(&ctx, Precision::Tf32, &g)?;
        // The mma.sync path's own best plan, and the wgmma kernel, each forced.
        let pmma = config::plan(Family::Tf32, m as u32, n as u32, k as u32, 1, sms);
        // SAFETY: as above.
        let o_mma = bench.time(|g| unsafe { raw::sgemm_with_plan(&stream, g, &pmma) })?;
        let (wg, pack_share, err_wg) = if wgmma {
            let pw = fixed_plan(WGMMA_CONFIGS[0], k as u32, 1);
            // SAFETY: as above.
            let run = |g: &RawGemm| unsafe { raw::sgemm_with_plan(&stream, g, &pw) };
            let t = bench.time(run)?;
            let e = normwise(&bench.result(run)?, &reference);
            // SAFETY: as above (the pack reads A and B only).
            let tp = bench.time(|g| unsafe { raw::wgmma_pack_only(&stream, g) })?;
            (
                format!("{:.1} ({:.0} %)", tf(t), 100.0 * c_tf32 / t),
                format!("{:.0} %", 100.0 * tp / t),
                format!("{e:.1e}"),
            )
        } else {
            ("-".into(), "-".into(), "-".into())
        };
        let row = format!(
            "| {m}x{n}x{k} | {:.1} | {:.1} | {:.0} % | {:.1} | {:.1} | {:.0} % | {} | {:.1} | {wg} | {pack_share} | {} s{} | {:.1e} / {:.1e} / {err_wg} |",
            tf(c_fp32),
            tf(o_fp32),
            100.0 * c_fp32 / o_fp32,
            tf(c_tf32),
            tf(o_tf32),
            100.0 * c_tf32 / o_tf32,
            ptf.config.name,
            tf(o_mma),
            pmma.config.name,
            pmma.splits,
            err_fp32,
            err_tf32
        );
        println!("{row}");
        rows.push(row);
        if sweep {
            let hopper: &[config::TileConfig] = if wgmma { &WGMMA_CONFIGS } else { &[] };
            for cfg in TF32_CONFIGS
                .iter()
                .chain(SGEMM_CONFIGS.iter())
                .chain(hopper)
            {
                for s in [1u32, 2, 3, 4, 6, 8] {
                    let plan = fixed_plan(*cfg, k as u32, s);
                    if plan.splits != s {
                        continue;
                    }
                    // SAFETY: as above.
                    let ms = bench.time(|g| unsafe { raw::sgemm_with_plan(&stream, g, &plan) })?;
                    let est = config::estimate(cfg, m as u32, n as u32, k as u32, 1, s, sms);
                    println!(
                        "sweep {m}x{n}x{k} {} splits {s}: {:.1} TFLOP/s (model {:.1})",
                        cfg.name,
                        tf(ms),
                        flops / est / 1e12
                    );
                }
            }
        }
        if let Some(dir) = &cubin_dir {
            for plan in [p32, ptf, pmma] {
                write_cubin(dir, &plan, bench.vec())?;
            }
        }
    }
    println!();
    println!(
        "GEMM on {name}: TFLOP/s (median of 9 samples, CUDA events, inputs rotated beyond L2)"
    );
    println!(
        "| m x n x k | cuBLAS FP32 | ours FP32 | ours/cuBLAS | cuBLAS TF32 | ours TF32 | ours/cuBLAS | TF32 path chosen | mma.sync TF32 | wgmma TF32 (/cuBLAS) | pack share of wgmma | mma.sync plan | err vs cuBLAS FP32 (FP32 / TF32 / wgmma) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}

fn normwise(x: &[f32], r: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&a, &b) in x.iter().zip(r) {
        num += (a as f64 - b as f64).powi(2);
        den += (b as f64).powi(2);
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// Random inputs (several sets), one output, and event timing.
struct Bench {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    m: usize,
    n: usize,
    k: usize,
    sets: Vec<(CudaSlice<f32>, CudaSlice<f32>)>,
    c: CudaSlice<f32>,
    nan: Vec<f32>,
}

fn uniform(seed: u64, n: usize) -> Vec<f32> {
    // splitmix64 -> uniform in [-1, 1)
    (0..n as u64)
        .map(|i| {
            let mut z = seed
                .wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

impl Bench {
    fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        m: usize,
        n: usize,
        k: usize,
    ) -> Res<Bench> {
        let bytes = 4 * (m * k + k * n);
        let nsets = (256usize << 20).div_ceil(bytes).clamp(1, 8);
        let a0 = uniform(1, m * k);
        let b0 = uniform(2, k * n);
        let mut sets = Vec::new();
        for s in 0..nsets {
            // Different data per set: rotate the host vectors.
            let a: Vec<f32> = a0.iter().map(|x| -x * (1.0 + s as f32 * 0.01)).collect();
            sets.push((stream.clone_htod(&a)?, stream.clone_htod(&b0)?));
        }
        let nan = vec![f32::NAN; m * n];
        let c = stream.clone_htod(&nan)?;
        Ok(Bench {
            ctx: ctx.clone(),
            stream: stream.clone(),
            m,
            n,
            k,
            sets,
            c,
            nan,
        })
    }

    fn raw(&self, set: usize) -> RawGemm {
        let (a, b) = &self.sets[set % self.sets.len()];
        let (pa, _ga) = a.device_ptr(&self.stream);
        let (pb, _gb) = b.device_ptr(&self.stream);
        let (pc, _gc) = self.c.device_ptr(&self.stream);
        RawGemm::contiguous(self.m, self.n, self.k, pa, pb, pc)
    }

    fn vec(&self) -> bool {
        self.raw(0).ab_vectorizable() && self.raw(0).c_vectorizable()
    }

    /// Runs `f` once more on input set 0 and returns C (every method's result is compared on
    /// the same inputs).
    fn result(&self, f: impl Fn(&RawGemm) -> gpukit_core::Result<()>) -> Res<Vec<f32>> {
        f(&self.raw(0))?;
        Ok(self.stream.clone_dtoh(&self.c)?)
    }

    /// Median milliseconds per call of `f` over 9 samples, after warm-up.
    fn time(&mut self, f: impl Fn(&RawGemm) -> gpukit_core::Result<()>) -> Res<f64> {
        // Poison C, then warm up (compiles, loads, creates handles) and check for errors.
        self.stream.memcpy_htod(&self.nan, &mut self.c)?;
        for i in 0..2 {
            f(&self.raw(i))?;
        }
        self.stream.synchronize()?;
        let ev = |s: &CudaStream| s.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT));
        // Calibrate: how many calls make a sample of ~3 ms.
        let t0 = ev(&self.stream)?;
        f(&self.raw(0))?;
        let t1 = ev(&self.stream)?;
        let one = t0.elapsed_ms(&t1)? as f64;
        let inner = ((3.0 / one.max(1e-3)) as usize).clamp(1, 200);
        let mut samples = Vec::new();
        for _ in 0..9 {
            let s = ev(&self.stream)?;
            for i in 0..inner {
                f(&self.raw(i))?;
            }
            let e = ev(&self.stream)?;
            samples.push(s.elapsed_ms(&e)? as f64 / inner as f64);
        }
        samples.sort_by(|a, b| a.total_cmp(b));
        let _ = &self.ctx;
        Ok(samples[samples.len() / 2])
    }
}

fn write_cubin(dir: &str, plan: &Plan, vec: bool) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    let (source, program, options, expr) = kernels::instantiation(&plan.config, false, false, vec);
    let options = options
        .output(gpukit_jit::Output::Cubin)
        .verbose_ptxas(true);
    let arch = gpukit_jit::Arch::new(9, 0).for_source(source);
    let m = gpukit_jit::compile(source, program, arch, &options)?;
    let file = format!(
        "{dir}/{}_nn_{}.cubin",
        plan.config.name,
        if vec { "vec" } else { "scalar" }
    );
    std::fs::write(&file, &m.image)?;
    println!(
        "wrote {file} ({expr}); ptxas: {}",
        m.log.replace('\n', " | ")
    );
    Ok(())
}

/// Compiles every GEMM kernel for sm_90 (the wgmma ones for sm_90a) into the kernel cache at
/// `dir` (NVRTC only).
fn precompile(dir: &str) -> Res<()> {
    // SAFETY (edition 2021: set_var is safe): called before any thread or cache exists.
    std::env::set_var("GPUKIT_CACHE_DIR", dir);
    let cache = gpukit_jit::KernelCache::global()?;
    let arch = gpukit_jit::Arch::new(9, 0);
    let mut n = 0;
    for fam in [Family::Tf32, Family::Sgemm, Family::Wgmma] {
        for cfg in config::configs(fam) {
            for (ta, tb, vec) in kernels::variants_of(cfg) {
                let (source, program, options, _) = kernels::instantiation(cfg, ta, tb, vec);
                cache.get_or_compile(source, program, arch.for_source(source), &options)?;
                n += 1;
            }
        }
    }
    for cfg in &WGMMA_CONFIGS {
        let options = kernels::base_options().name_expression(kernels::pack_expression(cfg));
        cache.get_or_compile(
            kernels::WGMMA_SOURCE,
            kernels::PACK_PROGRAM,
            arch.for_source(kernels::WGMMA_SOURCE),
            &options,
        )?;
        n += 1;
    }
    cache.get_or_compile(
        kernels::REDUCE_SOURCE,
        kernels::REDUCE_PROGRAM,
        arch,
        &kernels::base_options(),
    )?;
    println!("precompiled {} GEMM kernels for {arch} into {dir}", n + 1);
    Ok(())
}
