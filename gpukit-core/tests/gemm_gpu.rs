//! GEMM correctness on a GPU: normwise error against an f64 reference (cuBLAS DGEMM on the same
//! inputs upcast, itself checked against a CPU f64 loop), random normal inputs, output poisoned
//! with NaN before each run, padding between rows checked untouched, every run repeated and
//! required bit-identical (a moving result is a race). Skips without a GPU (fails under
//! `GPUKIT_REQUIRE_GPU=1`).

use gpukit_core::gemm::config::{
    self, fixed_plan, Plan, SGEMM_CONFIGS, TF32_CONFIGS, WGMMA_CONFIGS,
};
use gpukit_core::gemm::raw::{self, BlasType, Precision, RawGemm, Transpose};
use gpukit_jit::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use proptest::prelude::*;
use std::sync::{Arc, OnceLock};

const FP32_GATE: f64 = 1e-5;
const TF32_GATE: f64 = 1e-3;

struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

fn gpu() -> &'static Gpu {
    static G: OnceLock<Gpu> = OnceLock::new();
    G.get_or_init(|| {
        let ctx = gpukit_jit::open_context(0).expect("open context");
        let stream = ctx.new_stream().expect("stream");
        Gpu { ctx, stream }
    })
}

/// Deterministic standard normal numbers (xorshift64* + Box-Muller).
fn randn(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (next(), next());
            ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
    /// Extra elements per row beyond the stored columns (odd pads force the scalar path).
    pad: (usize, usize, usize),
    /// Elements the A pointer is offset by (1 misaligns it).
    a_off: usize,
    batch: usize,
    alpha: f64,
    beta: f64,
    /// Broadcast B across the batch (stride 0).
    broadcast_b: bool,
}

impl Case {
    fn square(m: usize, n: usize, k: usize) -> Case {
        Case {
            m,
            n,
            k,
            ta: false,
            tb: false,
            pad: (0, 0, 0),
            a_off: 0,
            batch: 1,
            alpha: 1.0,
            beta: 0.0,
            broadcast_b: false,
        }
    }

    fn raw(&self, a: u64, b: u64, c: u64) -> RawGemm {
        let (ar, ac) = if self.ta {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        };
        let (br, bc) = if self.tb {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        };
        let lda = ac + self.pad.0;
        let ldb = bc + self.pad.1;
        let ldc = self.n + self.pad.2;
        RawGemm {
            m: self.m,
            n: self.n,
            k: self.k,
            trans_a: if self.ta {
                Transpose::Yes
            } else {
                Transpose::No
            },
            trans_b: if self.tb {
                Transpose::Yes
            } else {
                Transpose::No
            },
            a,
            lda,
            stride_a: ar * lda,
            b,
            ldb,
            stride_b: if self.broadcast_b { 0 } else { br * ldb },
            c,
            ldc,
            stride_c: self.m * ldc,
            alpha: self.alpha,
            beta: self.beta,
            batch: self.batch,
        }
    }
}

struct Outcome {
    err: f64,
    /// For outputs of fewer than 64 elements a normwise gate is not meaningful (one TF32
    /// product can be off by 2^-10 relative, and cancellation against beta*C magnifies it), so
    /// each element is checked against the rounding bound of its own sum instead:
    /// TF32 |c - ref| <= 2^-10 |alpha| sum|a||b| (+ f32 accumulation slack),
    /// FP32 |c - ref| <= (k + 4) 2^-24 (|alpha| sum|a||b| + |beta c|).
    small_ok: Option<bool>,
    c: Vec<f32>,
    c_ref: Vec<f64>,
}

fn upload<T: gpukit_jit::cudarc::driver::DeviceRepr>(data: &[T]) -> CudaSlice<T> {
    gpu().stream.clone_htod(data).expect("htod")
}

fn ptr<T>(s: &CudaSlice<T>) -> u64 {
    let (p, _g) = s.device_ptr(&gpu().stream);
    p
}

/// Runs `case` with our kernels (plan chosen by the library, or `plan`) and with cuBLAS DGEMM
/// on the upcast inputs; returns the normwise error. Checks rows' padding is untouched and that
/// a second run gives identical bits.
fn run(case: &Case, precision: Precision, plan: Option<&Plan>, seed: u64) -> Outcome {
    let g0 = case.raw(0, 0, 0);
    let (la, lb, lc) = g0.required_len();
    let a_host = randn(seed, la + case.a_off);
    let b_host = randn(seed + 1, lb.max(1));
    let c_init: Vec<f32> = if case.beta == 0.0 {
        vec![f32::NAN; lc.max(1)]
    } else {
        randn(seed + 2, lc.max(1))
    };
    let up64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();

    // f64 reference with cuBLAS on identical layouts.
    let (a64, b64, c64) = (
        upload(&up64(&a_host)),
        upload(&up64(&b_host)),
        upload(&up64(&c_init)),
    );
    let gr = case.raw(ptr(&a64) + 8 * case.a_off as u64, ptr(&b64), ptr(&c64));
    // SAFETY: buffers sized by required_len (+ a_off) of this very layout, on this stream.
    unsafe { raw::cublas_gemm(&gpu().stream, BlasType::F64, &gr) }.expect("dgemm");
    let c_ref = gpu().stream.clone_dtoh(&c64).expect("dtoh");

    let (a, b) = (upload(&a_host), upload(&b_host));
    let mut results = Vec::new();
    for _ in 0..2 {
        let c = upload(&c_init);
        let g = case.raw(ptr(&a) + 4 * case.a_off as u64, ptr(&b), ptr(&c));
        // SAFETY: as above.
        unsafe {
            match plan {
                Some(p) => raw::sgemm_with_plan(&gpu().stream, &g, p),
                None => raw::sgemm(&gpu().stream, precision, &g),
            }
        }
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        results.push(gpu().stream.clone_dtoh(&c).expect("dtoh"));
    }
    assert!(
        results[0]
            .iter()
            .zip(&results[1])
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "{case:?}: two runs on the same inputs differ (race)"
    );
    let c = results.pop().unwrap();

    let g = case.raw(0, 0, 0);
    let (mut num, mut den) = (0.0f64, 0.0f64);
    let mut inside = vec![false; c.len()];
    for bi in 0..case.batch {
        for i in 0..case.m {
            for j in 0..case.n {
                let idx = bi * g.stride_c + i * g.ldc + j;
                inside[idx] = true;
                let (x, r) = (c[idx] as f64, c_ref[idx]);
                assert!(
                    x.is_finite(),
                    "{case:?}: C[{bi}][{i}][{j}] = {x} (unwritten or NaN)"
                );
                num += (x - r) * (x - r);
                den += r * r;
            }
        }
    }
    for (idx, (&x, &init)) in c.iter().zip(&c_init).enumerate() {
        if !inside[idx] {
            assert!(
                x.to_bits() == init.to_bits(),
                "{case:?}: element {idx} outside C was written"
            );
        }
    }
    let err = if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    };
    let small_ok = (case.m * case.n * case.batch < 64).then(|| {
        let a = &a_host[case.a_off..];
        let mut ok = true;
        for bi in 0..case.batch {
            for i in 0..case.m {
                for j in 0..case.n {
                    let mut s_abs = 0.0f64;
                    for p in 0..case.k {
                        let av = if case.ta {
                            a[bi * g.stride_a + p * g.lda + i]
                        } else {
                            a[bi * g.stride_a + i * g.lda + p]
                        };
                        let bv = if case.tb {
                            b_host[bi * g.stride_b + j * g.ldb + p]
                        } else {
                            b_host[bi * g.stride_b + p * g.ldb + j]
                        };
                        s_abs += (av as f64 * bv as f64).abs();
                    }
                    let idx = bi * g.stride_c + i * g.ldc + j;
                    let scale = case.alpha.abs() * s_abs
                        + if case.beta != 0.0 {
                            (case.beta * c_init[idx] as f64).abs()
                        } else {
                            0.0
                        };
                    let eps32 = (case.k as f64 + 4.0) * 2f64.powi(-24) * scale;
                    let bound = match precision {
                        Precision::Fp32 => eps32,
                        Precision::Tf32 => 2f64.powi(-10) * case.alpha.abs() * s_abs + eps32,
                    };
                    ok &= (c[idx] as f64 - c_ref[idx]).abs() <= bound * 1.01 + 1e-30;
                }
            }
        }
        ok
    });
    Outcome {
        err,
        small_ok,
        c,
        c_ref,
    }
}

fn gate(p: Precision) -> f64 {
    match p {
        Precision::Fp32 => FP32_GATE,
        Precision::Tf32 => TF32_GATE,
    }
}

fn check(case: &Case, p: Precision, plan: Option<&Plan>, seed: u64) -> f64 {
    let o = run(case, p, plan, seed);
    if let Some(ok) = o.small_ok {
        assert!(
            ok,
            "{case:?} {p:?} plan {:?}: an element exceeds its rounding bound",
            plan.map(|p| (p.config.name, p.splits))
        );
        return o.err;
    }
    assert!(
        o.err < gate(p),
        "{case:?} {p:?} plan {:?}: normwise error {:.3e} >= {:.0e}",
        plan.map(|p| (p.config.name, p.splits)),
        o.err,
        gate(p)
    );
    o.err
}

#[test]
fn cublas_reference_matches_a_cpu_f64_loop() {
    if !gpukit_jit::testing::cublas("cublas_reference_matches_a_cpu_f64_loop") {
        return;
    }
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let case = Case {
            ta,
            tb,
            pad: (3, 1, 2),
            batch: 2,
            alpha: -1.25,
            beta: 0.5,
            ..Case::square(13, 17, 29)
        };
        let o = run(&case, Precision::Fp32, None, 7);
        // CPU f64 product on the same inputs.
        let g = case.raw(0, 0, 0);
        let (la, lb, lc) = g.required_len();
        let a = randn(7, la);
        let b = randn(8, lb);
        let c0 = randn(9, lc);
        for bi in 0..case.batch {
            for i in 0..case.m {
                for j in 0..case.n {
                    let mut s = 0.0f64;
                    for p in 0..case.k {
                        let av = if ta {
                            a[bi * g.stride_a + p * g.lda + i]
                        } else {
                            a[bi * g.stride_a + i * g.lda + p]
                        };
                        let bv = if tb {
                            b[bi * g.stride_b + j * g.ldb + p]
                        } else {
                            b[bi * g.stride_b + p * g.ldb + j]
                        };
                        s += av as f64 * bv as f64;
                    }
                    let idx = bi * g.stride_c + i * g.ldc + j;
                    let want = case.alpha * s + case.beta * c0[idx] as f64;
                    assert!(
                        (o.c_ref[idx] - want).abs() <= 1e-9 * (1.0 + want.abs()),
                        "cuBLAS f64 reference wrong at {bi},{i},{j}: {} vs {want}",
                        o.c_ref[idx]
                    );
                    assert!((o.c[idx] as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()));
                }
            }
        }
        assert!(o.err < FP32_GATE, "{}", o.err);
    }
}

#[test]
fn large_k_meets_the_accuracy_gates() {
    if !gpukit_jit::testing::cublas("large_k_meets_the_accuracy_gates") {
        return;
    }
    for (m, n, k) in [(1024, 1024, 8192), (2048, 2048, 2048), (333, 517, 8191)] {
        for p in [Precision::Fp32, Precision::Tf32] {
            let e = check(&Case::square(m, n, k), p, None, 11);
            println!("{m}x{n}x{k} {p:?}: normwise error {e:.3e}");
            if p == Precision::Tf32 {
                // TF32 rounding must actually happen (a kernel that truncates, or that computes
                // in FP32, would land far from the expected ~3e-4).
                assert!(e > 5e-5, "TF32 error {e:.3e} suspiciously small");
            }
        }
    }
}

#[test]
fn every_config_and_split_on_awkward_shapes() {
    if !gpukit_jit::testing::cublas("every_config_and_split_on_awkward_shapes") {
        return;
    }
    let shapes = [
        (1, 1, 1),
        (257, 131, 1000),
        (64, 64, 64),
        (7, 300, 517),
        (129, 257, 33),
    ];
    let mut seed = 100;
    for cfg in TF32_CONFIGS.iter().chain(SGEMM_CONFIGS.iter()) {
        let p = match cfg.family {
            config::Family::Tf32 | config::Family::Wgmma => Precision::Tf32,
            config::Family::Sgemm => Precision::Fp32,
        };
        for &(m, n, k) in &shapes {
            for splits in [1, 2, 3, 5] {
                for (ta, tb, pad, a_off) in [
                    (false, false, (0, 0, 0), 0),
                    (true, true, (4, 8, 4), 0),
                    (true, false, (1, 3, 1), 1),
                    (false, true, (0, 0, 0), 0),
                ] {
                    seed += 1;
                    let case = Case {
                        ta,
                        tb,
                        pad,
                        a_off,
                        alpha: 0.75,
                        beta: if seed % 2 == 0 { 0.0 } else { -1.5 },
                        ..Case::square(m, n, k)
                    };
                    check(&case, p, Some(&fixed_plan(*cfg, k as u32, splits)), seed);
                }
            }
        }
    }
}

/// The Hopper `wgmma` path, forced, on shapes with tails in every dimension, every transpose,
/// odd leading dimensions, a misaligned A (4-byte aligned only), alpha/beta, batches with and
/// without a broadcast operand. Skips (says so) on devices other than compute capability 9.0.
#[test]
fn wgmma_path_on_awkward_shapes() {
    if !gpukit_jit::testing::cublas("wgmma_path_on_awkward_shapes") {
        return;
    }
    if !raw::supports_wgmma(&gpu().ctx).unwrap() {
        println!("SKIPPED wgmma_path_on_awkward_shapes: the device is not compute capability 9.0");
        return;
    }
    let plan = fixed_plan(WGMMA_CONFIGS[0], 1, 1);
    let shapes = [
        (333, 517, 8191),
        (1, 700, 5),
        (700, 1, 129),
        (1, 1, 1),
        (257, 131, 1000),
        (129, 257, 33),
        (128, 256, 32),
        (7, 300, 517),
    ];
    let mut seed = 5000;
    for &(m, n, k) in &shapes {
        for (ta, tb, pad, a_off) in [
            (false, false, (0, 0, 0), 0),
            (true, true, (4, 8, 4), 0),
            (true, false, (1, 3, 1), 1),
            (false, true, (0, 0, 0), 0),
        ] {
            seed += 1;
            let case = Case {
                ta,
                tb,
                pad,
                a_off,
                alpha: 0.75,
                beta: if seed % 2 == 0 { 0.0 } else { -1.5 },
                ..Case::square(m, n, k)
            };
            let e = check(&case, Precision::Tf32, Some(&plan), seed);
            if m * n >= 64 && k >= 256 {
                assert!(e > 5e-5, "{case:?}: TF32 error {e:.3e} suspiciously small");
            }
        }
    }
    for (batch, broadcast_b, ta) in [(3, false, false), (4, true, true), (2, false, true)] {
        seed += 1;
        let case = Case {
            batch,
            broadcast_b,
            ta,
            beta: 1.0,
            ..Case::square(150, 270, 77)
        };
        check(&case, Precision::Tf32, Some(&plan), seed);
    }
    let e = check(
        &Case::square(1024, 1024, 8192),
        Precision::Tf32,
        Some(&plan),
        77,
    );
    println!("wgmma 1024x1024x8192: normwise error {e:.3e}");
    assert!(e > 5e-5, "TF32 error {e:.3e} suspiciously small");
}

#[test]
fn empty_dims_alpha_zero_and_broadcast_batches() {
    if !gpukit_jit::testing::cublas("empty_dims_alpha_zero_and_broadcast_batches") {
        return;
    }
    for p in [Precision::Fp32, Precision::Tf32] {
        // k == 0: C = beta * C exactly.
        let case = Case {
            beta: 2.0,
            ..Case::square(33, 17, 0)
        };
        let o = run(&case, p, None, 1);
        assert!(o.err == 0.0, "k = 0 must scale C exactly: {}", o.err);
        // k == 0, beta == 0: C = 0 (the NaN poison must be overwritten).
        let o = run(&Case::square(5, 9, 0), p, None, 2);
        assert!(o.c[..45].iter().all(|&x| x == 0.0));
        // alpha == 0 does not read A or B.
        let case = Case {
            alpha: 0.0,
            beta: -1.0,
            ..Case::square(40, 41, 42)
        };
        assert_eq!(run(&case, p, None, 3).err, 0.0);
        // m == 0 or n == 0: nothing to do, nothing written.
        run(&Case::square(0, 9, 4), p, None, 4);
        run(&Case::square(9, 0, 4), p, None, 5);
        // Batched with a broadcast B.
        let case = Case {
            batch: 5,
            broadcast_b: true,
            beta: 1.0,
            ..Case::square(100, 70, 90)
        };
        check(&case, p, None, 6);
    }
}

#[test]
fn skinny_shapes_use_split_k_and_stay_accurate() {
    if !gpukit_jit::testing::cublas("skinny_shapes_use_split_k_and_stay_accurate") {
        return;
    }
    let sms = raw::multiprocessor_count(&gpu().ctx).unwrap();
    for p in [Precision::Fp32, Precision::Tf32] {
        let case = Case::square(96, 80, 30_000);
        let plan = config::plan(p.family(), 96, 80, 30_000, 1, sms);
        assert!(plan.splits > 1, "{plan:?}");
        check(&case, p, None, 9);
    }
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(1usize),
        1usize..40,
        1usize..700,
        prop::sample::select(vec![2usize, 3, 5, 31, 127, 257, 509, 521, 631, 691, 699]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_transposes_scalars_and_batches(
        m in dim(), n in dim(), k in dim(),
        ta in any::<bool>(), tb in any::<bool>(),
        pad in (0usize..6, 0usize..6, 0usize..6),
        a_off in 0usize..2,
        batch in 1usize..4,
        alpha in prop::sample::select(vec![1.0f64, -0.5, 2.25]),
        beta in prop::sample::select(vec![0.0f64, 1.0, -1.5]),
        tf32 in any::<bool>(),
        seed in 0u64..1_000_000,
    ) {
        if !gpukit_jit::testing::cublas("random_shapes_transposes_scalars_and_batches") {
            return Ok(());
        }
        let case = Case { m, n, k, ta, tb, pad, a_off, batch, alpha, beta, broadcast_b: false };
        let p = if tf32 { Precision::Tf32 } else { Precision::Fp32 };
        let o = run(&case, p, None, seed);
        match o.small_ok {
            Some(ok) => prop_assert!(ok, "{:?} {:?}: an element exceeds its rounding bound", case, p),
            None => prop_assert!(o.err < gate(p), "{:?} {:?}: error {:.3e}", case, p, o.err),
        }
    }
}
