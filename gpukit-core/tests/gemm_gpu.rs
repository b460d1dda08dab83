//! GEMM correctness on a GPU: normwise error against an f64 reference (cuBLAS DGEMM on the same
//! inputs upcast, itself checked against a CPU f64 loop), random inputs, output poisoned with NaN
//! before each run, padding between rows checked untouched, every run repeated and required
//! bit-identical (a moving result is a race). Also: TF32 rounding (not truncation) on every TF32
//! path, NaN/Inf propagation on every path, 3xTF32 accuracy against cuBLAS SGEMM's, and the
//! scratch memory charged to the allocator's owner. Skips without a GPU (fails under
//! `GPUKIT_REQUIRE_GPU=1`).

use gpukit_core::gemm::desc::{Precision, RawGemm, Transpose};
use gpukit_core::gemm::plan::{
    self, config_operand_choices, fixed_plan, Family, Operands, Plan, Problem, Source,
    SGEMM_CONFIGS, TF32_CONFIGS, WGMMA3_CONFIGS, WGMMA_CONFIGS,
};
use gpukit_core::gemm::{
    cublas_gemm, paths_for, plan_for, sgemm, sgemm_with_plan, tensor_copies_round, BlasType,
};
use gpukit_core::{Device, Error, OwnerId, Stream};
use gpukit_jit::cudarc::driver::{CudaSlice, DevicePtr};
use proptest::prelude::*;
use std::sync::OnceLock;

const FP32_GATE: f64 = 1e-5;
const TF32_GATE: f64 = 1e-3;

struct Gpu {
    dev: Device,
    stream: Stream,
}

fn gpu() -> &'static Gpu {
    static G: OnceLock<Gpu> = OnceLock::new();
    G.get_or_init(|| {
        let dev = Device::open(0).expect("open device 0");
        let stream = dev.new_stream(0).expect("stream");
        Gpu { dev, stream }
    })
}

fn hopper() -> bool {
    gpu().dev.attributes().supports_wgmma()
}

/// Whether test `name` runs: cuBLAS and a GPU there (else it skips, or fails under
/// GPUKIT_REQUIRE_GPU=1), and the `wgmma` kernels on it (compute capability 9.0; else it says it
/// skips).
fn wgmma_gpu(name: &str) -> bool {
    if !gpukit_jit::testing::cublas(name) {
        return false;
    }
    if !hopper() {
        println!("SKIPPED {name}: the device is not compute capability 9.0");
        return false;
    }
    true
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

/// Random inputs of one kind.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Data {
    /// Standard normal.
    Normal,
    /// Standard normal times 2^e, e uniform in [-20, 20]: products spread over 80 binades.
    WideExponent,
}

fn gen(seed: u64, n: usize, data: Data) -> Vec<f32> {
    let v = randn(seed, n);
    match data {
        Data::Normal => v,
        Data::WideExponent => {
            let e = randn(seed ^ 0x5555, n);
            v.iter()
                .zip(&e)
                .map(|(&x, &u)| {
                    let frac = (u.abs() * 1e4).fract(); // ~uniform in [0, 1)
                    x * 2f32.powi((frac * 41.0) as i32 - 20)
                })
                .collect()
        }
    }
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
    data: Data,
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
            data: Data::Normal,
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
        let t = |x: bool| if x { Transpose::Yes } else { Transpose::No };
        RawGemm {
            m: self.m,
            n: self.n,
            k: self.k,
            trans_a: t(self.ta),
            trans_b: t(self.tb),
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

    /// The planner's view of this case (alignment as the test allocates it: 16-byte aligned
    /// buffers, so only pads and the A offset matter).
    fn problem(&self) -> Problem {
        let g = self.raw(4 * self.a_off as u64, 0, 0);
        Problem::of(&g)
    }

    /// op(A)[i][p] and op(B)[p][j] of batch entry `bi` from host copies of the stored operands.
    fn at(&self, a: &[f32], b: &[f32], bi: usize, i: usize, j: usize, p: usize) -> (f32, f32) {
        let g = self.raw(0, 0, 0);
        let av = if self.ta {
            a[bi * g.stride_a + p * g.lda + i]
        } else {
            a[bi * g.stride_a + i * g.lda + p]
        };
        let bv = if self.tb {
            b[bi * g.stride_b + j * g.ldb + p]
        } else {
            b[bi * g.stride_b + p * g.ldb + j]
        };
        (av, bv)
    }
}

/// The error of one 3xTF32 product beyond f32 accumulation, relative to `|a b|`: each operand
/// splits into `big = rn_tf32(x)` and `small = rn_tf32(x - big)` with `|x - big| <= 2^-11 |x|`,
/// so rounding `small` loses at most `2^-22 |x|` of each operand and the product
/// `small(a) small(b)` that is left out at most `2^-22 |a b|`: `3 * 2^-22` in all (12 units of
/// f32's `2^-24`, a constant that dominates the `(k + 4) 2^-24` of a short sum).
const SPLIT_PRODUCT: f64 = 3.0 / 4_194_304.0;

/// Whether the kernel that runs `case` may be the 3xTF32 one: the plan's family, or without a
/// plan the precision (`Tf32x3`, or `Fp32` where the planner's own rule lets it pick 3xTF32).
fn may_split(case: &Case, precision: Precision, plan: Option<&Plan>) -> bool {
    match plan {
        Some(p) => p.config.family == Family::Wgmma3,
        None => {
            precision == Precision::Tf32x3
                || (precision == Precision::Fp32
                    && plan::fp32_prefers_tf32x3(
                        gpu().dev.attributes().compute_capability,
                        case.k as u32,
                    ))
        }
    }
}

/// Whether a plan (or a precision's default path) computes in TF32 (for the error bounds).
fn is_tf32(precision: Precision, plan: Option<&Plan>) -> bool {
    match plan {
        Some(p) => matches!(p.config.family, Family::Tf32 | Family::Wgmma),
        None => precision == Precision::Tf32,
    }
}

struct Outcome {
    err: f64,
    /// For outputs of fewer than 64 elements a normwise gate is not meaningful (one TF32
    /// product can be off by 2^-10 relative, and cancellation against beta*C magnifies it), so
    /// each element is checked against the rounding bound of its own sum instead:
    /// TF32 |c - ref| <= 2^-10 |alpha| sum|a||b| (+ f32 accumulation slack),
    /// FP32 |c - ref| <= (k + 4) 2^-24 (|alpha| sum|a||b| + |beta c|), plus
    /// [`SPLIT_PRODUCT`] |alpha| sum|a||b| where the kernel may be 3xTF32. `Err` names the
    /// element furthest past its bound.
    small_ok: Option<Result<(), String>>,
    c: Vec<f32>,
    c_ref: Vec<f64>,
    a_host: Vec<f32>,
    b_host: Vec<f32>,
    c_init: Vec<f32>,
}

fn upload<T: gpukit_jit::cudarc::driver::DeviceRepr>(data: &[T]) -> CudaSlice<T> {
    gpu().stream.cuda().clone_htod(data).expect("htod")
}

fn download<T: gpukit_jit::cudarc::driver::DeviceRepr + Clone + Default>(
    s: &CudaSlice<T>,
) -> Vec<T> {
    gpu().stream.cuda().clone_dtoh(s).expect("dtoh")
}

fn ptr<T>(s: &CudaSlice<T>) -> u64 {
    let (p, _g) = s.device_ptr(gpu().stream.cuda());
    p
}

/// Host inputs of a case: A (with the offset), B, the initial C.
fn inputs(case: &Case, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (la, lb, lc) = case.raw(0, 0, 0).required_len();
    let a = gen(seed, la + case.a_off, case.data);
    let b = gen(seed + 1, lb.max(1), case.data);
    let c = if case.beta == 0.0 {
        vec![f32::NAN; lc.max(1)]
    } else {
        randn(seed + 2, lc.max(1))
    };
    (a, b, c)
}

/// cuBLAS on the case's layout with element type `ty` (`F64`: the inputs upcast); returns C.
fn cublas_on(case: &Case, a: &[f32], b: &[f32], c0: &[f32], ty: BlasType) -> Vec<f64> {
    let up64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let s = &gpu().stream;
    if ty == BlasType::F64 {
        let (a64, b64, c64) = (upload(&up64(a)), upload(&up64(b)), upload(&up64(c0)));
        let g = case.raw(ptr(&a64) + 8 * case.a_off as u64, ptr(&b64), ptr(&c64));
        // SAFETY: buffers sized by required_len (+ a_off) of this very layout, on this stream.
        unsafe { cublas_gemm(s, ty, &g) }.expect("dgemm");
        download(&c64)
    } else {
        let (a32, b32, c32) = (upload(a), upload(b), upload(c0));
        let g = case.raw(ptr(&a32) + 4 * case.a_off as u64, ptr(&b32), ptr(&c32));
        // SAFETY: as above.
        unsafe { cublas_gemm(s, ty, &g) }.expect("cublas f32");
        download(&c32).iter().map(|&x| x as f64).collect()
    }
}

/// Runs our kernels on `case` (plan chosen by the library for `precision`, or `plan`) twice,
/// requires identical bits and untouched padding, and returns C.
fn ours_on(
    case: &Case,
    a_host: &[f32],
    b_host: &[f32],
    c_init: &[f32],
    precision: Precision,
    plan: Option<&Plan>,
) -> Vec<f32> {
    let (a, b) = (upload(a_host), upload(b_host));
    let mut results = Vec::new();
    for _ in 0..2 {
        let c = upload(c_init);
        let g = case.raw(ptr(&a) + 4 * case.a_off as u64, ptr(&b), ptr(&c));
        // SAFETY: buffers sized by required_len (+ a_off) of this very layout, on this stream.
        unsafe {
            match plan {
                Some(p) => sgemm_with_plan(&gpu().stream, &g, p),
                None => sgemm(&gpu().stream, precision, &g),
            }
        }
        .unwrap_or_else(|e| panic!("{case:?} {plan:?}: {e}"));
        results.push(download(&c));
    }
    assert!(
        results[0]
            .iter()
            .zip(&results[1])
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "two runs on the same inputs differ (race): {case:?} {plan:?}"
    );
    let c = results.pop().unwrap();
    let g = case.raw(0, 0, 0);
    let mut inside = vec![false; c.len()];
    for bi in 0..case.batch {
        for i in 0..case.m {
            for j in 0..case.n {
                inside[bi * g.stride_c + i * g.ldc + j] = true;
            }
        }
    }
    for (idx, (&x, &init)) in c.iter().zip(c_init).enumerate() {
        if !inside[idx] {
            assert!(
                x.to_bits() == init.to_bits(),
                "element {idx} (row {}, column {} of ldc {}) outside C was written: {case:?} \
                 {plan:?}",
                idx % g.stride_c.max(1) / g.ldc.max(1),
                idx % g.stride_c.max(1) % g.ldc.max(1),
                g.ldc
            );
        }
    }
    c
}

/// Normwise error of `c` against `r` over the case's outputs (finite values required).
fn normwise(case: &Case, c: &[f32], r: &[f64], what: &str) -> f64 {
    let g = case.raw(0, 0, 0);
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for bi in 0..case.batch {
        for i in 0..case.m {
            for j in 0..case.n {
                let idx = bi * g.stride_c + i * g.ldc + j;
                let (x, y) = (c[idx] as f64, r[idx]);
                assert!(
                    x.is_finite(),
                    "{case:?} {what}: C[{bi}][{i}][{j}] = {x} (unwritten or NaN)"
                );
                num += (x - y) * (x - y);
                den += y * y;
            }
        }
    }
    if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    }
}

/// Runs `case` with our kernels and with cuBLAS DGEMM on the upcast inputs; returns the
/// normwise error (and the per-element verdict for tiny outputs).
fn run(case: &Case, precision: Precision, plan: Option<&Plan>, seed: u64) -> Outcome {
    let (a_host, b_host, c_init) = inputs(case, seed);
    let c_ref = cublas_on(case, &a_host, &b_host, &c_init, BlasType::F64);
    let c = ours_on(case, &a_host, &b_host, &c_init, precision, plan);
    let err = normwise(case, &c, &c_ref, &format!("{precision:?} {plan:?}"));
    let g = case.raw(0, 0, 0);
    let tf32 = is_tf32(precision, plan);
    let split = may_split(case, precision, plan);
    let small_ok = (case.m * case.n * case.batch < 64).then(|| {
        let a = &a_host[case.a_off..];
        let mut worst: Option<(f64, String)> = None;
        for bi in 0..case.batch {
            for i in 0..case.m {
                for j in 0..case.n {
                    let mut s_abs = 0.0f64;
                    for p in 0..case.k {
                        let (av, bv) = case.at(a, &b_host, bi, i, j, p);
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
                    let bound = if tf32 {
                        2f64.powi(-10) * case.alpha.abs() * s_abs + eps32
                    } else if split {
                        SPLIT_PRODUCT * case.alpha.abs() * s_abs + eps32
                    } else {
                        eps32
                    };
                    let err = (c[idx] as f64 - c_ref[idx]).abs();
                    if err > bound * 1.01 + 1e-30 {
                        let ratio = err / bound.max(1e-300);
                        if worst.as_ref().is_none_or(|(r, _)| ratio > *r) {
                            worst = Some((
                                ratio,
                                format!(
                                    "batch {bi} element ({i}, {j}): ours {} reference {} error {err:.3e} bound {bound:.3e} (sum |a||b| {s_abs:.3e})",
                                    c[idx], c_ref[idx]
                                ),
                            ));
                        }
                    }
                }
            }
        }
        match worst {
            None => Ok(()),
            Some((_, w)) => Err(w),
        }
    });
    Outcome {
        err,
        small_ok,
        c,
        c_ref,
        a_host,
        b_host,
        c_init,
    }
}

fn gate(tf32: bool) -> f64 {
    if tf32 {
        TF32_GATE
    } else {
        FP32_GATE
    }
}

fn check(case: &Case, p: Precision, plan: Option<&Plan>, seed: u64) -> f64 {
    let o = run(case, p, plan, seed);
    let name = plan.map(plan_name);
    if let Some(ok) = o.small_ok {
        if let Err(w) = ok {
            panic!("{case:?} {p:?} plan {name:?}: an element exceeds its rounding bound: {w}");
        }
        return o.err;
    }
    let g = gate(is_tf32(p, plan));
    assert!(
        o.err < g,
        "{case:?} {p:?} plan {name:?}: normwise error {:.3e} >= {g:.0e}",
        o.err
    );
    o.err
}

/// A plan's short name for messages: configuration, splits, operands, grid limit, tail.
fn plan_name(p: &Plan) -> String {
    format!(
        "{} s{} [{}] blocks {}{}",
        p.config.name,
        p.splits,
        p.operands.label(),
        p.max_blocks,
        if p.tail { " tail" } else { "" }
    )
}

/// Grid limit the tests give persistent `wgmma` plans: few blocks, so that each walks many work
/// units (tiles, batch entries, K slices) through the same pipeline.
const FEW_BLOCKS: u32 = 3;

/// Every plan of `configs` that fits this device for `case`, with the given splits; the
/// `wgmma` TF32 plans with every operand layout the planner may choose here (tensor maps where
/// the layout allows, the device's rounding probe included, and packed), alternately with one
/// block per work unit and with [`FEW_BLOCKS`] persistent blocks (the preferred layout both).
fn plans_for(configs: &[plan::TileConfig], case: &Case, splits: &[u32]) -> Vec<Plan> {
    let p = case.problem();
    let d = gpu().dev.attributes();
    let paths = paths_for(&gpu().dev).expect("paths");
    let mut v = Vec::new();
    for c in configs {
        if c.occupancy_on(d, case.ta, case.tb) == 0 {
            continue;
        }
        for &s in splits {
            let plan = fixed_plan(*c, &p, s);
            if !c.family.is_wgmma() {
                v.push(plan);
                continue;
            }
            for (i, ops) in config_operand_choices(c, &p, &paths)
                .into_iter()
                .enumerate()
            {
                if i == 0 {
                    v.push(plan.with(ops, 0));
                }
                // A ping-pong kernel's second consumer only works in a block of several units:
                // every layout of it runs persistent on few blocks too.
                v.push(plan.with(
                    ops,
                    if c.pingpong || (i + s as usize).is_multiple_of(2) {
                        FEW_BLOCKS
                    } else {
                        0
                    },
                ));
            }
        }
    }
    v.dedup();
    v
}

fn all_configs() -> Vec<plan::TileConfig> {
    plan::all_configs().copied().collect()
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
        let g = case.raw(0, 0, 0);
        for bi in 0..case.batch {
            for i in 0..case.m {
                for j in 0..case.n {
                    let mut s = 0.0f64;
                    for p in 0..case.k {
                        let (av, bv) = case.at(&o.a_host, &o.b_host, bi, i, j, p);
                        s += av as f64 * bv as f64;
                    }
                    let idx = bi * g.stride_c + i * g.ldc + j;
                    let want = case.alpha * s + case.beta * o.c_init[idx] as f64;
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
        for p in [Precision::Fp32, Precision::Tf32, Precision::Tf32x3] {
            let e = check(&Case::square(m, n, k), p, None, 11);
            println!("{m}x{n}x{k} {p:?}: normwise error {e:.3e}");
            if p == Precision::Tf32 {
                // TF32 rounding must actually happen (a kernel that computes in FP32 would land
                // far below the expected ~3e-4).
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
    let configs = all_configs();
    for &(m, n, k) in &shapes {
        for (ta, tb, pad, a_off) in [
            (false, false, (0, 0, 0), 0),
            (true, true, (4, 8, 4), 0),
            (true, false, (1, 3, 1), 1),
            (false, true, (0, 0, 0), 0),
        ] {
            let base = Case {
                ta,
                tb,
                pad,
                a_off,
                alpha: 0.75,
                ..Case::square(m, n, k)
            };
            for plan in plans_for(&configs, &base, &[1, 2, 3, 5]) {
                seed += 1;
                let case = Case {
                    beta: if seed % 2 == 0 { 0.0 } else { -1.5 },
                    ..base
                };
                check(&case, Precision::Fp32, Some(&plan), seed);
            }
        }
    }
}

/// The split-K reduction's lanes (eight slices and more are summed in runs of consecutive slices
/// by threads of their own, then in lane order): outputs of odd widths (the scalar store), a
/// padded C, beta, a batch, slice counts the lanes do not divide; every element against cuBLAS
/// DGEMM and the same bits on a second run (`check`).
#[test]
fn split_k_reduction_lanes_on_awkward_outputs() {
    if !gpukit_jit::testing::cublas("split_k_reduction_lanes_on_awkward_outputs") {
        return;
    }
    let configs: Vec<plan::TileConfig> = all_configs()
        .into_iter()
        .filter(|c| ["sgemm_64x64", "tf32_64x64", "wgmma_128x128"].contains(&c.name))
        .collect();
    let mut seed = 9100;
    let mut checked = 0;
    for &(m, n, k, batch) in &[(257, 131, 4800, 1), (7, 301, 3000, 1), (130, 66, 12_000, 3)] {
        for (ta, tb, pad) in [(false, false, (0, 0, 0)), (true, false, (1, 3, 5))] {
            let base = Case {
                ta,
                tb,
                pad,
                batch,
                alpha: 0.75,
                ..Case::square(m, n, k)
            };
            for plan in plans_for(&configs, &base, &[8, 9, 13, 33, 37, 64]) {
                assert!(plan.splits >= 8, "{plan:?}");
                seed += 1;
                let case = Case {
                    beta: if seed % 2 == 0 { 0.0 } else { -1.5 },
                    ..base
                };
                check(&case, Precision::Fp32, Some(&plan), seed);
                checked += 1;
            }
        }
    }
    assert!(checked >= 60, "only {checked} plans ran");
}

/// The output written through shared memory and the copy engine (`wgmma` TF32 tiles that
/// stage it, on by default, beta 0) into a padded C whose rows allow vector stores, for row
/// lengths 128 .. 135 (whole 16-byte units and not), swapped and not, a batch, 3 K slices (whose
/// workspace rows, padded to whole units, are staged for every N): every element against cuBLAS
/// DGEMM, the padding untouched (`check_every_element`). The H100 run of 2026-12-07 found the
/// padding column of a 257 x 131 output with ldc 132 written.
#[test]
fn staged_output_leaves_the_padding_of_every_row_length_alone() {
    if !wgmma_gpu("staged_output_leaves_the_padding_of_every_row_length_alone") {
        return;
    }
    let configs: Vec<plan::TileConfig> = WGMMA_CONFIGS
        .iter()
        .filter(|c| c.stages_output())
        .copied()
        .collect();
    assert!(configs.len() >= 3, "{configs:?}");
    let mut seed = 9900;
    let mut checked = 0;
    for n in 128usize..136 {
        let ldc = (n + 1).div_ceil(4) * 4;
        for (ta, tb, batch) in [
            (false, false, 1),
            (true, true, 2),
            (false, true, 1),
            (true, false, 2),
        ] {
            let case = Case {
                ta,
                tb,
                batch,
                pad: (0, 0, ldc - n),
                alpha: 0.75,
                ..Case::square(150, n, 96)
            };
            for plan in plans_for(&configs, &case, &[1, 3]) {
                seed += 1;
                check_every_element(&case, Precision::Fp32, Some(&plan), seed);
                checked += 1;
            }
        }
    }
    assert!(checked >= 200, "only {checked} plans ran");
    println!("{checked} plans checked");
}

/// Every plan the autotuner may choose (`plan::enumerate`) on tiny shapes, every element
/// within its rounding bound: the tuner times candidates and keeps the fastest that wrote
/// every sampled element, so a plan that is fast but inaccurate on a shape must not exist
/// (the H100 run of 2026-12-06 saw a 1 x 3 x 1 3xTF32 product exceed its bound).
#[test]
fn every_candidate_plan_of_tiny_shapes_is_accurate() {
    if !gpukit_jit::testing::cublas("every_candidate_plan_of_tiny_shapes_is_accurate") {
        return;
    }
    let paths = paths_for(&gpu().dev).expect("paths");
    let mut seed = 7000;
    let mut checked = 0;
    for &(m, n, k) in &[
        (1, 3, 1),
        (1, 1, 1),
        (3, 1, 1),
        (2, 3, 2),
        (1, 5, 3),
        (7, 2, 1),
        (1, 3, 9),
    ] {
        for (ta, tb) in [(false, false), (true, true), (false, true)] {
            let case = Case {
                ta,
                tb,
                ..Case::square(m, n, k)
            };
            for p in [Precision::Fp32, Precision::Tf32x3, Precision::Tf32] {
                let plans = plan::enumerate(p, &case.problem(), gpu().dev.attributes(), &paths)
                    .expect("enumerate");
                for plan in &plans {
                    seed += 1;
                    println!("{m}x{n}x{k} ta={ta} tb={tb} {p:?} {}", plan_name(plan));
                    check(&case, p, Some(plan), seed);
                    checked += 1;
                }
            }
        }
    }
    println!("{checked} plans checked");
}

/// The Hopper `wgmma` paths, forced, on shapes with tails in every dimension, every transpose,
/// odd leading dimensions, a misaligned A (4-byte aligned only), alpha/beta, batches with and
/// without a broadcast operand: TF32 128x256 and 128x128 (A through the tensor map and packed)
/// and 3xTF32. Skips (says so) on devices other than compute capability 9.0.
#[test]
fn wgmma_paths_on_awkward_shapes() {
    if !wgmma_gpu("wgmma_paths_on_awkward_shapes") {
        return;
    }
    let configs: Vec<plan::TileConfig> = WGMMA_CONFIGS
        .iter()
        .chain(WGMMA3_CONFIGS.iter())
        .copied()
        .collect();
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
            (false, false, (4, 0, 0), 0),
        ] {
            let base = Case {
                ta,
                tb,
                pad,
                a_off,
                alpha: 0.75,
                ..Case::square(m, n, k)
            };
            for plan in plans_for(&configs, &base, &[1]) {
                seed += 1;
                let case = Case {
                    beta: if seed % 2 == 0 { 0.0 } else { -1.5 },
                    ..base
                };
                let e = check(&case, Precision::Fp32, Some(&plan), seed);
                if m * n >= 64 && k >= 256 && plan.config.family == Family::Wgmma {
                    assert!(e > 5e-5, "{case:?}: TF32 error {e:.3e} suspiciously small");
                }
            }
        }
    }
    // lda 80 (pad 3): a batched A that the tensor map can read (16-byte row and batch strides).
    for (batch, broadcast_b, ta) in [(3, false, false), (4, true, true), (2, false, true)] {
        let base = Case {
            batch,
            broadcast_b,
            ta,
            pad: (3, 0, 0),
            beta: 1.0,
            ..Case::square(150, 270, 77)
        };
        for plan in plans_for(&configs, &base, &[1, 2]) {
            seed += 1;
            check(&base, Precision::Fp32, Some(&plan), seed);
        }
    }
    for plan in plans_for(&configs, &Case::square(1024, 1024, 8192), &[1, 4]) {
        let e = check(
            &Case::square(1024, 1024, 8192),
            Precision::Fp32,
            Some(&plan),
            77,
        );
        println!(
            "{}: 1024x1024x8192 normwise error {e:.3e}",
            plan_name(&plan)
        );
    }
}

/// The stream-K tail ([`Plan::tail`]): on persistent grids of a few clusters, every TF32 `wgmma`
/// configuration (cooperative, ping-pong, clusters of two) in every operand layout, on shapes
/// whose last wave is partial, cuts the tail tiles into pieces that the last piece to finish
/// sums: the result matches cuBLAS DGEMM to TF32 accuracy, is the same bits on two runs, and
/// writes nothing outside C (`ours_on`); with beta, edge tiles among the tail tiles, batches
/// (tail tiles of several batch entries) and short pieces (K of 3 and 5 k tiles).
#[test]
fn tail_pieces_of_the_last_wave_sum_like_whole_tiles() {
    if !wgmma_gpu("tail_pieces_of_the_last_wave_sum_like_whole_tiles") {
        return;
    }
    let paths = paths_for(&gpu().dev).expect("paths");
    let d = gpu().dev.attributes();
    let shapes = [
        (1000, 700, 1000, 1, 0.0),
        (700, 1000, 300, 1, 1.5),
        (300, 333, 517, 3, -0.5),
        (640, 520, 96, 1, 0.0),
        (520, 640, 160, 2, 1.0),
    ];
    let mut seed = 9100;
    let mut runs = 0;
    for c in WGMMA_CONFIGS.iter().filter(|c| c.family == Family::Wgmma) {
        let cluster = c.cluster.max(1);
        for &(m, n, k, batch, beta) in &shapes {
            let case = Case {
                batch,
                beta,
                alpha: 1.25,
                ..Case::square(m, n, k)
            };
            if c.occupancy_on(d, case.ta, case.tb) == 0 {
                continue;
            }
            let p = case.problem();
            for ops in config_operand_choices(c, &p, &paths) {
                let units = c.blocks_per_slice(&p, &ops) / cluster as u64 * batch as u64;
                let nkt = p.k.div_ceil(c.bk);
                // The smallest grid of at least two clusters whose last wave gets pieces.
                let Some(grid) =
                    (2..units.min(12)).find(|&g| plan::tail_pieces(units, g, nkt) >= 2)
                else {
                    continue;
                };
                let plan = fixed_plan(*c, &p, 1)
                    .with(ops, grid as u32 * cluster)
                    .with_tail(true);
                seed += 1;
                let e = check(&case, Precision::Fp32, Some(&plan), seed);
                println!(
                    "{} {m}x{n}x{k} batch {batch}: {units} units on {grid} clusters, {} pieces per tail tile, error {e:.3e}",
                    plan_name(&plan),
                    plan::tail_pieces(units, grid, nkt)
                );
                runs += 1;
            }
        }
    }
    assert!(runs >= 20, "only {runs} tail plans ran");
}

/// TF32 inputs are rounded to nearest, not truncated, on every TF32 path and layout: with
/// A = +-(1 + 3 * 2^-12) (0.75 TF32 ulps above 1) and B exact in TF32, round-to-nearest gives
/// exactly (1 + 2^-10) * sum(b) (every partial sum is exact in f32), truncation gives sum(b).
/// Then random inputs: the result matches the f64 product of the round-to-nearest inputs to
/// f32 accumulation accuracy, far closer than the ~3e-4 by which truncated inputs differ.
#[test]
fn tf32_inputs_are_rounded_to_nearest_not_truncated() {
    if !gpukit_jit::testing::gpu("tf32_inputs_are_rounded_to_nearest_not_truncated") {
        return;
    }
    let rna = |x: f32| -> f64 {
        let b = x.to_bits();
        f32::from_bits((b.wrapping_add(0x1000)) & 0xffff_e000) as f64
    };
    let trunc = |x: f32| -> f64 { f32::from_bits(x.to_bits() & 0xffff_e000) as f64 };
    let configs: Vec<plan::TileConfig> = TF32_CONFIGS
        .iter()
        .chain(WGMMA_CONFIGS.iter())
        .copied()
        .collect();
    if hopper() {
        // Which rounding the tensor-mapped operands get (the plans below include them only if
        // the copies round; cvt.rna otherwise).
        println!(
            "tensor copies round to TF32 (TFLOAT32 maps): {:?}",
            tensor_copies_round(&gpu().dev).expect("probe")
        );
    }
    let (m, n, k) = (96, 80, 256);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let case = Case {
            ta,
            tb,
            ..Case::square(m, n, k)
        };
        let g = case.raw(0, 0, 0);
        let (la, lb, lc) = g.required_len();
        // Pattern inputs. Row i of op(A) is (-1)^i (1 + 3 * 2^-12); op(B) in {0.5, 1, 2}.
        let mut a = vec![0.0f32; la];
        let mut b = vec![0.0f32; lb];
        let mut want = vec![0.0f64; lc];
        let bvals = randn(3, k * n);
        for i in 0..m {
            for p in 0..k {
                let v = if i % 2 == 0 { 1.0 } else { -1.0 } * (1.0 + 3.0 * 2f32.powi(-12));
                if ta {
                    a[p * g.lda + i] = v;
                } else {
                    a[i * g.lda + p] = v;
                }
            }
        }
        for p in 0..k {
            for j in 0..n {
                let r = bvals[p * n + j];
                let v = if r < -0.5 {
                    0.5
                } else if r < 0.5 {
                    1.0
                } else {
                    2.0
                };
                if tb {
                    b[j * g.ldb + p] = v;
                } else {
                    b[p * g.ldb + j] = v;
                }
            }
        }
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    let (av, bv) = case.at(&a, &b, 0, i, j, p);
                    s += rna(av) * bv as f64;
                }
                want[i * g.ldc + j] = s;
            }
        }
        // Random inputs and their round-to-nearest / truncated references.
        let (ra, rb) = (randn(41, la), randn(42, lb));
        let mut want_rn = vec![0.0f64; lc];
        let mut want_tr = vec![0.0f64; lc];
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let (av, bv) = case.at(&ra, &rb, 0, i, j, p);
                    s += rna(av) * rna(bv);
                    t += trunc(av) * trunc(bv);
                }
                want_rn[i * g.ldc + j] = s;
                want_tr[i * g.ldc + j] = t;
            }
        }
        let nan = vec![f32::NAN; lc];
        let mut plans = plans_for(&configs, &case, &[1, 2]);
        if !hopper() {
            println!("tf32 rounding: wgmma paths not tested (not compute capability 9.0)");
        }
        plans.push(plan_for(&gpu().dev, Precision::Tf32, &case.raw(0, 0, 0)).unwrap());
        for plan in &plans {
            let name = (plan_name(plan), ta, tb);
            let c = ours_on(&case, &a, &b, &nan, Precision::Tf32, Some(plan));
            for i in 0..m {
                for j in 0..n {
                    let idx = i * g.ldc + j;
                    let w = want[idx];
                    assert!(
                        (c[idx] as f64 - w).abs() <= 1e-6 * w.abs(),
                        "{name:?}: C[{i}][{j}] = {} but round-to-nearest inputs give {w} \
                         (truncated inputs would give {})",
                        c[idx],
                        w / (1.0 + 2f64.powi(-10))
                    );
                }
            }
            let c = ours_on(&case, &ra, &rb, &nan, Precision::Tf32, Some(plan));
            let e_rn = normwise(&case, &c, &want_rn, "rn");
            let e_tr = normwise(&case, &c, &want_tr, "trunc");
            assert!(
                e_rn < 1e-5 && e_tr > 10.0 * e_rn,
                "{name:?}: error against round-to-nearest inputs {e_rn:.2e}, against truncated \
                 inputs {e_tr:.2e}"
            );
        }
    }
}

/// IEEE class of a value: 0 finite, 1 +inf, 2 -inf, 3 NaN.
fn class(x: f64) -> u8 {
    if x.is_nan() {
        3
    } else if x == f64::INFINITY {
        1
    } else if x == f64::NEG_INFINITY {
        2
    } else {
        0
    }
}

/// NaN and infinities in A and B propagate as IEEE arithmetic (and cuBLAS SGEMM) make them, on
/// every path: SIMT, mma.sync, wgmma (packed and tensor-mapped A), 3xTF32 (whose big x small
/// cross terms would turn inf * 1.0 into NaN without the kernel's repair), with and without
/// split-K, through the planner for each precision too. Planted: +inf and a (-inf, +inf) pair in
/// A rows, NaN in an A row and a B column, +inf in a B column, and opposite an A infinity a 0,
/// a 1.0 (TF32-exact: small part 0) and 0.99999 (small part negative).
#[test]
fn nan_and_inf_propagate_like_cublas() {
    if !gpukit_jit::testing::cublas("nan_and_inf_propagate_like_cublas") {
        return;
    }
    let (m, n, k) = (70, 90, 700);
    let case = Case {
        alpha: 1.0,
        beta: 0.0,
        ..Case::square(m, n, k)
    };
    let g = case.raw(0, 0, 0);
    let (la, lb, _) = g.required_len();
    let mut a = randn(61, la);
    let mut b = randn(62, lb);
    let sa = |a: &mut Vec<f32>, i: usize, p: usize, v: f32| a[i * g.lda + p] = v;
    let sb = |b: &mut Vec<f32>, p: usize, j: usize, v: f32| b[p * g.ldb + j] = v;
    sa(&mut a, 3, 10, f32::INFINITY);
    sa(&mut a, 5, 20, f32::NEG_INFINITY);
    sa(&mut a, 5, 600, f32::INFINITY);
    sa(&mut a, 7, 30, f32::NAN);
    sa(&mut a, 69, 699, f32::INFINITY);
    sb(&mut b, 40, 11, f32::INFINITY);
    sb(&mut b, 50, 12, f32::NAN);
    sb(&mut b, 10, 13, 0.0);
    sb(&mut b, 10, 14, 1.0);
    sb(&mut b, 10, 15, 0.99999);
    sb(&mut b, 699, 89, -1.0);
    // The exact classes, from f64 sums (no finite product overflows here).
    let mut want = vec![0u8; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                let (av, bv) = case.at(&a, &b, 0, i, j, p);
                s += av as f64 * bv as f64;
            }
            want[i * n + j] = class(s);
        }
    }
    let poisoned = vec![f32::NAN; m * n];
    let cublas = cublas_on(&case, &a, &b, &vec![0.0; m * n], BlasType::F32);
    let cublas_off = (0..m * n).filter(|&x| class(cublas[x]) != want[x]).count();
    println!("cuBLAS SGEMM differs from the IEEE classes at {cublas_off} elements");
    assert!(
        want.iter().filter(|&&c| c != 0).count() > 300,
        "planted too little"
    );
    assert!(want.contains(&1) && want.contains(&2) && want.contains(&3));

    let mut plans = plans_for(&all_configs(), &case, &[1, 3]);
    for p in [Precision::Fp32, Precision::Tf32, Precision::Tf32x3] {
        plans.push(plan_for(&gpu().dev, p, &g).unwrap());
    }
    let clean_rows: Vec<usize> = (0..m).filter(|i| ![3, 5, 7, 69].contains(i)).collect();
    let clean_cols: Vec<usize> = (0..n).filter(|j| !(11..=12).contains(j)).collect();
    let reference = cublas_on(&case, &a, &b, &vec![0.0; m * n], BlasType::F64);
    for plan in &plans {
        let name = plan_name(plan);
        let c = ours_on(&case, &a, &b, &poisoned, Precision::Fp32, Some(plan));
        for i in 0..m {
            for j in 0..n {
                let got = class(c[i * n + j] as f64);
                assert_eq!(
                    got,
                    want[i * n + j],
                    "{name:?}: C[{i}][{j}] = {} (IEEE: class {}, cuBLAS SGEMM: {})",
                    c[i * n + j],
                    want[i * n + j],
                    cublas[i * n + j]
                );
            }
        }
        // The finite part is still accurate.
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for &i in &clean_rows {
            for &j in &clean_cols {
                let (x, r) = (c[i * n + j] as f64, reference[i * n + j]);
                num += (x - r) * (x - r);
                den += r * r;
            }
        }
        let e = (num / den).sqrt();
        let tf32 = is_tf32(Precision::Fp32, Some(plan));
        assert!(e < gate(tf32), "{name:?}: finite part error {e:.2e}");
    }
}

/// 3xTF32 is at least as accurate as cuBLAS SGEMM (within 25 %) against an f64 reference on the
/// same inputs, normal and wide-exponent-range, K up to 30000; so is the FP32 default wherever
/// it runs 3xTF32 (compute capability 9.0, large shapes). Where the FP32 default runs the SIMT
/// kernel it is held to the FP32 gate only: on the H200 run of version 4 its split-K sum for
/// 96x80x30000 measured 5.5e-7 against cuBLAS SGEMM's 3.4e-7 (both far inside FP32 accuracy).
/// Prints every row before asserting, so one bad row does not hide the others.
#[test]
fn tf32x3_is_as_accurate_as_cublas_sgemm() {
    if !gpukit_jit::testing::cublas("tf32x3_is_as_accurate_as_cublas_sgemm") {
        return;
    }
    let mut seed = 900;
    let mut failures = Vec::new();
    for data in [Data::Normal, Data::WideExponent] {
        for (m, n, k) in [
            (1024, 1024, 8192),
            (512, 512, 8192),
            (333, 517, 8191),
            (2048, 2048, 2048),
            (96, 80, 30000),
        ] {
            seed += 3;
            let case = Case {
                data,
                ..Case::square(m, n, k)
            };
            let (a, b, c0) = inputs(&case, seed);
            let r = cublas_on(&case, &a, &b, &c0, BlasType::F64);
            let cub = cublas_on(&case, &a, &b, &c0, BlasType::F32);
            let cub: Vec<f32> = cub.iter().map(|&x| x as f32).collect();
            let e_cublas = normwise(&case, &cub, &r, "cuBLAS SGEMM");
            let mut row = format!("{data:?} {m}x{n}x{k}: cuBLAS SGEMM {e_cublas:.3e}");
            for p in [Precision::Tf32x3, Precision::Fp32] {
                let c = ours_on(&case, &a, &b, &c0, p, None);
                // The plan that ran (the autotuner's choice for the class once it has run).
                let plan = plan_for(&gpu().dev, p, &case.raw(0, 0, 0)).unwrap();
                let e = normwise(&case, &c, &r, "ours");
                row += &format!(", {p:?} ({} s{}) {e:.3e}", plan.config.name, plan.splits);
                let three = plan.config.family == Family::Wgmma3;
                let bound = if three { 1.25 * e_cublas } else { FP32_GATE };
                if e > bound {
                    failures.push(format!(
                        "{data:?} {m}x{n}x{k} {p:?} ({}): error {e:.3e} > {bound:.3e} (cuBLAS \
                         SGEMM {e_cublas:.3e})",
                        plan.config.name
                    ));
                }
            }
            println!("{row}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn empty_dims_alpha_zero_and_broadcast_batches() {
    if !gpukit_jit::testing::cublas("empty_dims_alpha_zero_and_broadcast_batches") {
        return;
    }
    for p in [Precision::Fp32, Precision::Tf32, Precision::Tf32x3] {
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
fn skinny_and_small_long_k_shapes_use_split_k_and_stay_accurate() {
    if !gpukit_jit::testing::cublas("skinny_and_small_long_k_shapes_use_split_k_and_stay_accurate")
    {
        return;
    }
    for (m, n, k) in [(96, 80, 30_000), (384, 384, 8192), (250, 260, 8192)] {
        for p in [Precision::Fp32, Precision::Tf32, Precision::Tf32x3] {
            let case = Case::square(m, n, k);
            // The model's plan (what the autotuner starts from; its choice may differ).
            let plan = plan::choose(
                p,
                &case.problem(),
                gpu().dev.attributes(),
                &paths_for(&gpu().dev).unwrap(),
            )
            .unwrap();
            assert!(plan.splits > 1, "{m}x{n}x{k} {p:?}: {plan:?}");
            check(&case, p, None, 9);
        }
    }
}

/// Split-K workspaces and `wgmma` pack buffers come from the device's allocator under the
/// current owner: with a quota too small for them the product fails with `QuotaExceeded` (and
/// leaves nothing charged), without one it runs.
#[test]
fn gemm_scratch_memory_is_charged_to_the_current_owner() {
    if !gpukit_jit::testing::gpu("gemm_scratch_memory_is_charged_to_the_current_owner") {
        return;
    }
    let dev = &gpu().dev;
    let owner = OwnerId::new("gemm-scratch-quota-test");
    dev.allocator().set_quota(&owner, Some(4096)).unwrap();
    let case = Case::square(96, 80, 3000);
    let (a_host, b_host, c_init) = inputs(&case, 5);
    let (a, b, c) = (upload(&a_host), upload(&b_host), upload(&c_init));
    let g = case.raw(ptr(&a), ptr(&b), ptr(&c));
    let mut plans = vec![fixed_plan(SGEMM_CONFIGS[2], &case.problem(), 4)];
    if hopper() {
        // Both operands packed; B packed (A through its tensor map); nothing packed but a
        // split-K workspace; 3xTF32 (split parts packed), without and with split-K.
        let p = case.problem();
        plans.push(fixed_plan(WGMMA_CONFIGS[1], &p, 1).with(Operands::PACKED, 0));
        let a_mapped = Operands {
            swap: false,
            p: Source::TmaKMajor,
            q_tma: false,
        };
        plans.push(fixed_plan(WGMMA_CONFIGS[0], &p, 1).with(a_mapped, FEW_BLOCKS));
        plans.push(fixed_plan(WGMMA_CONFIGS[0], &p, 2));
        plans.push(fixed_plan(WGMMA3_CONFIGS[0], &p, 1).with(Operands::PACKED, 0));
        plans.push(fixed_plan(WGMMA3_CONFIGS[0], &p, 2));
    }
    for plan in &plans {
        let r = dev.allocator().with_owner(&owner, || {
            // SAFETY: buffers sized by required_len of this layout, on this stream.
            unsafe { sgemm_with_plan(&gpu().stream, &g, plan) }
        });
        match r {
            Err(Error::QuotaExceeded { owner: o, .. }) => assert_eq!(o, owner.to_string()),
            other => panic!("{}: expected QuotaExceeded, got {other:?}", plan_name(plan)),
        }
        assert_eq!(dev.allocator().owner_usage(&owner).in_use, 0);
        // SAFETY: as above.
        unsafe { sgemm_with_plan(&gpu().stream, &g, plan) }
            .unwrap_or_else(|e| panic!("{}: {e}", plan_name(plan)));
    }
    dev.allocator().set_quota(&owner, None).unwrap();
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
        precision in prop::sample::select(vec![Precision::Fp32, Precision::Tf32, Precision::Tf32x3]),
        wide in any::<bool>(),
        seed in 0u64..1_000_000,
    ) {
        if !gpukit_jit::testing::cublas("random_shapes_transposes_scalars_and_batches") {
            return Ok(());
        }
        let data = if wide { Data::WideExponent } else { Data::Normal };
        let case = Case { m, n, k, ta, tb, pad, a_off, batch, alpha, beta, broadcast_b: false, data };
        let o = run(&case, precision, None, seed);
        match o.small_ok {
            Some(ok) => prop_assert!(ok.is_ok(), "{:?} {:?}: an element exceeds its rounding bound: {}", case, precision, ok.err().unwrap_or_default()),
            None => prop_assert!(o.err < gate(precision == Precision::Tf32), "{:?} {:?}: error {:.3e}", case, precision, o.err),
        }
    }
}

/// Runs `case` with our kernels (plan chosen by the library for `p`, or `plan`) into a poisoned
/// C (NaN where beta is 0) and checks **every** element of C against cuBLAS DGEMM on the same
/// inputs: finite, and within the rounding bound of its own sum, `B = |alpha| sum|a||b|` (from
/// DGEMM on |A| and |B|): TF32 `2^-10 B`, FP32 (SIMT or 3xTF32) `2^-20 B`, both plus the f32
/// accumulation's `(k + 4) 2^-24 (B + |beta c|)`. Also (`ours_on`): two runs bit-identical, the
/// padding between rows untouched. Returns the normwise error (also gated).
fn check_every_element(case: &Case, p: Precision, plan: Option<&Plan>, seed: u64) -> f64 {
    let (a, b, c0) = inputs(case, seed);
    let c_ref = cublas_on(case, &a, &b, &c0, BlasType::F64);
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let bounds_case = Case {
        alpha: case.alpha.abs(),
        beta: 0.0,
        ..*case
    };
    let s_abs = cublas_on(
        &bounds_case,
        &abs(&a),
        &abs(&b),
        &vec![0.0; c0.len()],
        BlasType::F64,
    );
    let c = ours_on(case, &a, &b, &c0, p, plan);
    let tf32 = is_tf32(p, plan);
    let g = case.raw(0, 0, 0);
    let mut worst = (0.0f64, 0usize);
    for bi in 0..case.batch {
        for i in 0..case.m {
            for j in 0..case.n {
                let idx = bi * g.stride_c + i * g.ldc + j;
                let (x, r, sb) = (c[idx] as f64, c_ref[idx], s_abs[idx]);
                let beta_c = if case.beta != 0.0 {
                    (case.beta * c0[idx] as f64).abs()
                } else {
                    0.0
                };
                let bound = if tf32 { 2f64.powi(-10) } else { 2f64.powi(-20) } * sb
                    + (case.k as f64 + 4.0) * 2f64.powi(-24) * (sb + beta_c)
                    + 1e-30;
                assert!(
                    x.is_finite(),
                    "{case:?} {p:?} {plan:?}: C[{bi}][{i}][{j}] = {x} (unwritten or NaN)"
                );
                let e = (x - r).abs();
                assert!(
                    e <= bound,
                    "{case:?} {p:?} {plan:?}: C[{bi}][{i}][{j}] = {x}, reference {r}: error {e:.3e} \
                     above its bound {bound:.3e}"
                );
                if e / bound > worst.0 {
                    worst = (e / bound, idx);
                }
            }
        }
    }
    let err = normwise(case, &c, &c_ref, &format!("{p:?} {plan:?}"));
    let gate = gate(tf32);
    assert!(
        err < gate,
        "{case:?} {p:?} {plan:?}: normwise error {err:.3e} >= {gate:.0e}"
    );
    err
}

/// The shape classes the autotuner tests measure: non-square with K of a few hundred, both
/// operands transposed, a small output with a long K (split-K), odd sizes with an unaligned C
/// row stride and A transposed, a batch with B transposed and a negative alpha, a skinny
/// output, beta != 0 (C read through the tuned plan); TF32, FP32 and 3xTF32. Each with a
/// sibling of the same class (dimensions 4 and 8 smaller: the same quarter-octave buckets and
/// alignments). No other test of this binary runs a product of these classes through `sgemm`
/// (`tune_now` measures a class anew, and a test running the class's plan twice meanwhile
/// would see two plans): the random shapes stay below 700 rows and columns with batches below 4.
fn tuned_cases() -> Vec<(Case, Precision)> {
    let sq = Case::square;
    vec![
        (sq(1111, 2222, 333), Precision::Tf32),
        (
            Case {
                ta: true,
                tb: true,
                ..sq(700, 880, 3000)
            },
            Precision::Fp32,
        ),
        (sq(112, 76, 24_000), Precision::Tf32),
        (
            Case {
                ta: true,
                pad: (0, 0, 3),
                ..sq(1023, 555, 259)
            },
            Precision::Tf32x3,
        ),
        (
            Case {
                tb: true,
                batch: 6,
                alpha: -0.5,
                ..sq(150, 250, 190)
            },
            Precision::Fp32,
        ),
        (sq(2000, 76, 4096), Precision::Tf32),
        (
            Case {
                beta: 1.5,
                ..sq(800, 480, 320)
            },
            Precision::Tf32,
        ),
    ]
}

fn sibling(case: &Case) -> Case {
    let s = Case {
        m: case.m - 4,
        n: case.n - 8,
        ..*case
    };
    for (x, y) in [(case.m, s.m), (case.n, s.n)] {
        assert_eq!(
            tune::bucket(x as u32),
            tune::bucket(y as u32),
            "test setup: {x} and {y} are not in one class"
        );
    }
    s
}

use gpukit_core::gemm::tune::{self, Choice, TuneMode, SIBLINGS, STAGE_ONE, STAGE_TWO};

/// The autotuner on the GPU. Per shape class (see [`tuned_cases`]): a measurement times at most
/// `STAGE_ONE + STAGE_TWO + SIBLINGS` candidates of the plan space, checks each candidate's first run on a
/// poisoned scratch C (none leaves an element unwritten), picks the fastest (the model's plan
/// kept within 1 %), never touches the caller's C (compared bit for bit: the poison is NaN, so
/// `==` on floats would never hold), and becomes the plan `plan_for` and `sgemm` use for every
/// product of the class; its file (where the kernel cache has a directory) holds the choice;
/// the product and a sibling of the class then write every element of a poisoned C within its
/// rounding bound.
#[test]
fn autotuner_measures_a_class_once_and_its_choice_runs_correctly() {
    if !gpukit_jit::testing::cublas("autotuner_measures_a_class_once_and_its_choice_runs_correctly")
    {
        return;
    }
    use gpukit_core::gemm::{class_of, tune_now};
    for (seed, (case, p)) in (20u64..).zip(tuned_cases()) {
        let (a_host, b_host, c_init) = inputs(&case, seed);
        let (a, b, c) = (upload(&a_host), upload(&b_host), upload(&c_init));
        let g = case.raw(ptr(&a), ptr(&b), ptr(&c));
        let before = tune::stats();
        // SAFETY: buffers sized by required_len of this layout, on this stream.
        let report = unsafe { tune_now(&gpu().stream, p, &g) }.unwrap();
        let after = tune::stats();
        let space: Vec<Choice> = plan::enumerate(
            p,
            &case.problem(),
            gpu().dev.attributes(),
            &paths_for(&gpu().dev).unwrap(),
        )
        .unwrap()
        .iter()
        .map(Choice::of)
        .collect();
        assert!(space.contains(&Choice::of(&report.chosen)));
        if space.len() <= 1 {
            // One plan fits this class on this device (e.g. 3xTF32 with an unaligned C): there
            // is nothing to time, and the class takes it at once.
            println!(
                "tuned {case:?} {p:?}: one plan fits ({}), nothing timed",
                plan_name(&report.model)
            );
            assert!(report.timed.is_empty() && report.complete, "{case:?}");
            assert_eq!(Choice::of(&report.chosen), Choice::of(&report.model));
        } else {
            assert!(
                !report.timed.is_empty() && report.timed.len() <= STAGE_ONE + STAGE_TWO + SIBLINGS,
                "{case:?}: {} candidates of {} plans",
                report.timed.len(),
                space.len()
            );
            assert!(report.host_us > 0 && after.tuned > before.tuned);
            assert_eq!(
                after.unwritten_candidates, before.unwritten_candidates,
                "{case:?} {p:?}: a candidate left the scratch C unwritten"
            );
            let best = report
                .timed
                .iter()
                .map(|x| x.1)
                .fold(f64::INFINITY, f64::min);
            let chosen_time = report
                .timed
                .iter()
                .find(|x| Choice::of(&x.0) == Choice::of(&report.chosen))
                .map(|x| x.1)
                .unwrap();
            println!(
                "tuned {case:?} {p:?}: model {} chose {} ({chosen_time:.1} us, best {best:.1} us \
                 of {}, {} ms on the host, complete: {})",
                plan_name(&report.model),
                plan_name(&report.chosen),
                report.timed.len(),
                report.host_us / 1000,
                report.complete
            );
            assert!(best.is_finite() && chosen_time.is_finite());
            assert!(
                chosen_time <= best * (1.0 + tune::KEEP_MARGIN),
                "{case:?}: chose {chosen_time} us, best {best} us"
            );
        }
        // The caller's C was not touched (the tuner writes a scratch C), bit for bit.
        let now_c = download(&c);
        assert!(
            now_c
                .iter()
                .zip(&c_init)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{case:?}: tuning wrote the caller's C"
        );
        // The class's plan is now the measured one, for this product and another of the class.
        let now = plan_for(&gpu().dev, p, &g).unwrap();
        assert_eq!(Choice::of(&now), Choice::of(&report.chosen), "{case:?}");
        let sib = sibling(&case);
        let gs = sib.raw(ptr(&a), ptr(&b), ptr(&c));
        if TuneMode::from_env().unwrap() != TuneMode::Off {
            assert_eq!(
                plan_for(&gpu().dev, p, &gs).unwrap().config.name,
                report.chosen.config.name
            );
        } else {
            println!(
                "{} = off: the class's other products keep the model's plan",
                tune::TUNE_ENV
            );
        }
        // Its file holds the choice (read back as another process would).
        if let (Some(dir), true, false) = (
            tune::disk_dir(),
            report.complete,
            TuneMode::from_env().unwrap() == TuneMode::Off,
        ) {
            let class = class_of(&gpu().dev, p, &g).unwrap();
            let stored = tune::lookup_disk(&class, &dir, &case.problem(), gpu().dev.attributes())
                .unwrap_or_else(|| panic!("{case:?}: no valid tuning file in {}", dir.display()));
            assert_eq!(Choice::of(&stored), Choice::of(&report.chosen));
        }
        // sgemm runs the class's plan, and every element of C is right.
        check_every_element(&case, p, None, seed + 100);
        check_every_element(&sib, p, None, seed + 200);
        // The same plan through sgemm_with_plan (what the bench's plan sweep runs).
        check_every_element(&case, p, Some(&report.chosen), seed + 300);
    }
}

/// A class's first product through `sgemm` itself: the measurement runs inline, then the
/// product, which writes every element of a poisoned C within its bound. Four threads on their
/// own streams asking for a new class at once: one measures, the others wait for its choice,
/// and all four compute the same bits.
#[test]
fn first_products_of_a_class_tune_inline_once_and_write_every_element() {
    if !gpukit_jit::testing::cublas(
        "first_products_of_a_class_tune_inline_once_and_write_every_element",
    ) {
        return;
    }
    let mode = TuneMode::from_env().unwrap();
    println!("tuning mode: {mode:?}");
    for (seed, (case, p)) in (40u64..).zip([
        (Case::square(1500, 700, 450), Precision::Tf32),
        (
            Case {
                ta: true,
                pad: (1, 0, 0),
                ..Case::square(777, 1023, 2049)
            },
            Precision::Fp32,
        ),
    ]) {
        let before = tune::stats();
        check_every_element(&case, p, None, seed);
        let after = tune::stats();
        if mode != TuneMode::Off {
            assert!(
                after.tuned + after.disk_hits + after.memory_hits
                    > before.tuned + before.disk_hits + before.memory_hits,
                "{case:?} {p:?}: the first product did not consult the tuner"
            );
        }
        assert_eq!(after.unwritten_candidates, before.unwritten_candidates);
    }
    // Concurrent first products of one new class (TF32, 1320x1170x700 NT).
    let case = Case {
        tb: true,
        ..Case::square(1320, 1170, 700)
    };
    let (a_host, b_host, c_init) = inputs(&case, 77);
    let c_ref = cublas_on(&case, &a_host, &b_host, &c_init, BlasType::F64);
    let results: Vec<Vec<f32>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (a_host, b_host, c_init) = (&a_host, &b_host, &c_init);
                sc.spawn(move || {
                    let stream = gpu().dev.new_stream(0).expect("stream");
                    let cu = stream.cuda();
                    let a = cu.clone_htod(a_host).expect("htod");
                    let b = cu.clone_htod(b_host).expect("htod");
                    let c = cu.clone_htod(c_init).expect("htod");
                    let (pa, _ga) = a.device_ptr(cu);
                    let (pb, _gb) = b.device_ptr(cu);
                    let (pc, _gc) = c.device_ptr(cu);
                    let g = case.raw(pa, pb, pc);
                    // SAFETY: this thread's buffers, sized by required_len of this layout, on
                    // this thread's stream.
                    unsafe { sgemm(&stream, Precision::Tf32, &g) }.expect("sgemm");
                    cu.clone_dtoh(&c).expect("dtoh")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in &results[1..] {
        assert!(
            r.iter()
                .zip(&results[0])
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "concurrent first products of one class ran different plans"
        );
    }
    let err = normwise(&case, &results[0], &c_ref, "concurrent");
    assert!(
        err < TF32_GATE,
        "concurrent first products: error {err:.3e}"
    );
}
