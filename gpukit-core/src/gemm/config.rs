//! Tile configurations of the GEMM kernels and the per-shape choice among them.
//!
//! # How a configuration is chosen
//!
//! Each configuration has a block tile `BM x BN`, a k tile `BK`, a warp tile, a pipeline depth,
//! a number of blocks that fit on one multiprocessor (`occupancy`, from its registers and shared
//! memory) and an estimated sustained rate per multiprocessor when the SM is full of it. The
//! rates are what the big tiles buy: a 64x64 warp tile loads 1 shared-memory wavefront per
//! `mma.sync`, a 32x32 one 2, so small tiles run the tensor cores at a lower rate but make more
//! blocks for small problems.
//!
//! For a problem of `batch x M x N x K` and each candidate (configuration, split-K factor) the
//! planner estimates
//!
//! ```text
//! blocks = ceil(M/BM) * ceil(N/BN) * batch * splits
//! waves  = ceil(blocks / (SMs * occupancy))
//! time   = waves * occupancy * 2*BM*BN*ceil(K/splits) / rate_per_SM      (the GEMM kernel)
//!        + (splits > 1) * (launch + (splits + 2) * 4*M*N*batch / bandwidth)  (the reduction)
//! ```
//!
//! and takes the cheapest. `waves` captures tile quantisation (a 1024x1024 problem makes only
//! 32 blocks of 128x256 for 132 SMs, so smaller tiles or split-K win there); the reduction term
//! keeps split-K to shapes with a large K and a small M*N, where it pays. The result is
//! deterministic and pure, so it is unit-tested here without a GPU.
//!
//! # TF32 on Hopper
//!
//! On a compute capability 9.0 device (H100, H200) TF32 products can also run the `wgmma` kernel
//! ([`Family::Wgmma`], `gemm_wgmma.cu`): it first packs op(A) and op(B)^T into TF32-rounded,
//! swizzled K-major tiles (a memory-bound pass, modelled as its bytes over [`PACK_BANDWIDTH`]
//! plus a launch cost), then multiplies them with warpgroup MMAs. [`plan_tf32`] compares the
//! best `mma.sync` plan with the `wgmma` plan under the same model and keeps the cheaper;
//! [`Tf32Path`] forces one path (the `GPUKIT_GEMM_TF32` environment variable, read by
//! `raw::plan_for`).

/// Which kernel family a configuration belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Tensor cores: `mma.sync.m16n8k8` on TF32-rounded inputs (`gemm_tf32.cu`).
    Tf32,
    /// Exact single precision on the FP32 pipes (`gemm_sgemm.cu`).
    Sgemm,
    /// Hopper tensor cores: `wgmma.mma_async` m64n256k8 on operands packed to TF32-rounded,
    /// 128B-swizzled K-major tiles (`gemm_wgmma.cu`); compute capability 9.0 only, no split-K.
    Wgmma,
}

/// One tile configuration of a GEMM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TileConfig {
    /// Short name used in benches and notes (`tf32_128x256`).
    pub name: &'static str,
    /// The kernel family.
    pub family: Family,
    /// Block tile rows (M).
    pub bm: u32,
    /// Block tile columns (N).
    pub bn: u32,
    /// K per pipeline stage.
    pub bk: u32,
    /// Warp tile rows.
    pub wm: u32,
    /// Warp tile columns.
    pub wn: u32,
    /// Pipeline stages (cp.async multistage).
    pub stages: u32,
    /// Blocks resident per multiprocessor (registers and shared memory permitting).
    pub occupancy: u32,
    /// Sustained rate of one full multiprocessor with this tile, in GFLOP/s: measured on the H200
    /// (TFLOP/s of the config at 8192^3 divided by 132 SMs, `gemm_bench --sweep`).
    pub gflops_per_sm: u32,
}

impl TileConfig {
    /// Threads per block (for [`Family::Wgmma`]: one producer warpgroup plus one consumer
    /// warpgroup per `wm` rows).
    pub fn threads(&self) -> u32 {
        match self.family {
            Family::Wgmma => 128 * (1 + self.bm / self.wm),
            _ => (self.bm / self.wm) * (self.bn / self.wn) * 32,
        }
    }

    /// Dynamic shared memory per block in bytes for the given operand layouts.
    pub fn smem_bytes(&self, trans_a: bool, trans_b: bool) -> u32 {
        let (a, b) = match self.family {
            Family::Tf32 => {
                let a = if trans_a {
                    self.bk * (self.bm + 8)
                } else {
                    self.bm * (self.bk + 4)
                };
                let b = if trans_b {
                    self.bn * (self.bk + 4)
                } else {
                    self.bk * (self.bn + 8)
                };
                (a, b)
            }
            Family::Sgemm => (self.bk * (self.bm + 4), self.bk * (self.bn + 4)),
            // Unpadded swizzled tiles, plus 1024 bytes to align the stages to the swizzle period.
            Family::Wgmma => return (self.bm + self.bn) * self.bk * 4 * self.stages + 1024,
        };
        (a + b) * 4 * self.stages
    }

    /// The kernel template's name (`gemm_tf32`, `gemm_sgemm` or `gemm_wgmma`).
    pub fn kernel_name(&self) -> &'static str {
        match self.family {
            Family::Tf32 => "gemm_tf32",
            Family::Sgemm => "gemm_sgemm",
            Family::Wgmma => "gemm_wgmma",
        }
    }

    /// The C++ name expression of one instantiation, e.g.
    /// `gemm_tf32<128,256,32,64,64,3,false,true,true>`. The `wgmma` kernel reads packed operands,
    /// so its instantiation depends only on the tile, the stages and `vec` (8-byte stores of C):
    /// `gemm_wgmma<128,256,4,true>`; the transposes are handled by the pack kernels.
    pub fn name_expression(&self, trans_a: bool, trans_b: bool, vec: bool) -> String {
        if self.family == Family::Wgmma {
            return format!(
                "{}<{},{},{},{}>",
                self.kernel_name(),
                self.bm,
                self.bn,
                self.stages,
                vec
            );
        }
        format!(
            "{}<{},{},{},{},{},{},{},{},{}>",
            self.kernel_name(),
            self.bm,
            self.bn,
            self.bk,
            self.wm,
            self.wn,
            self.stages,
            trans_a,
            trans_b,
            vec
        )
    }
}

/// TF32 configurations, largest first.
///
/// - `tf32_128x256`: 8 warps of 64x64, BK 32, 3 stages (162 KB smem): the big-problem tile,
///   one block per SM, 1 shared wavefront per mma.
/// - `tf32_128x128`: 4 warps of 64x64, 3 stages (111 KB): two blocks per SM, for mid sizes.
/// - `tf32_64x64`: 4 warps of 32x32, 4 stages (74 KB): three blocks per SM, small problems.
pub const TF32_CONFIGS: [TileConfig; 3] = [
    TileConfig {
        name: "tf32_128x256",
        family: Family::Tf32,
        bm: 128,
        bn: 256,
        bk: 32,
        wm: 64,
        wn: 64,
        stages: 3,
        occupancy: 1,
        gflops_per_sm: 1045,
    },
    TileConfig {
        name: "tf32_128x128",
        family: Family::Tf32,
        bm: 128,
        bn: 128,
        bk: 32,
        wm: 64,
        wn: 64,
        stages: 3,
        occupancy: 2,
        gflops_per_sm: 970,
    },
    TileConfig {
        name: "tf32_64x64",
        family: Family::Tf32,
        bm: 64,
        bn: 64,
        bk: 32,
        wm: 32,
        wn: 32,
        stages: 4,
        occupancy: 3,
        gflops_per_sm: 680,
    },
];

/// FP32 SIMT configurations, largest first.
///
/// Version 3 (warp tile 64x64, 16x8 per thread, fragments double-buffered in registers,
/// 255-register cap, 8 warps per SM):
/// - `sgemm_128x256`: 8 warps, BK 8, 4 stages (50 KB), one block per SM: the big-problem tile.
/// - `sgemm_128x128_w4`: 4 warps, BK 8, 4 stages (34 KB), two blocks per SM, for mid sizes.
///
/// Version 2 (warp tile 64x32, 8x8 per thread):
/// - `sgemm_64x64`: 2 warps, BK 16, 3 stages (26 KB), for small problems.
pub const SGEMM_CONFIGS: [TileConfig; 3] = [
    TileConfig {
        name: "sgemm_128x256",
        family: Family::Sgemm,
        bm: 128,
        bn: 256,
        bk: 8,
        wm: 64,
        wn: 64,
        stages: 4,
        occupancy: 1,
        gflops_per_sm: 363,
    },
    TileConfig {
        name: "sgemm_128x128_w4",
        family: Family::Sgemm,
        bm: 128,
        bn: 128,
        bk: 8,
        wm: 64,
        wn: 64,
        stages: 4,
        occupancy: 2,
        gflops_per_sm: 356,
    },
    TileConfig {
        name: "sgemm_64x64",
        family: Family::Sgemm,
        bm: 64,
        bn: 64,
        bk: 16,
        wm: 64,
        wn: 32,
        stages: 3,
        occupancy: 8,
        gflops_per_sm: 280,
    },
];

/// The Hopper `wgmma` TF32 configuration: block 128x256, k tile 32, 4 stages of 48 KB (193 KB
/// dynamic smem with the alignment slack), 384 threads (a producer warpgroup and two consumer
/// warpgroups of 64x256), one block per SM. `gflops_per_sm` is the rate of the GEMM kernel
/// alone (the pack is modelled separately).
pub const WGMMA_CONFIGS: [TileConfig; 1] = [TileConfig {
    name: "wgmma_128x256",
    family: Family::Wgmma,
    bm: 128,
    bn: 256,
    bk: 32,
    wm: 64,
    wn: 256,
    stages: 4,
    occupancy: 1,
    gflops_per_sm: 2950,
}];

/// Every configuration of a family.
pub fn configs(family: Family) -> &'static [TileConfig] {
    match family {
        Family::Tf32 => &TF32_CONFIGS,
        Family::Sgemm => &SGEMM_CONFIGS,
        Family::Wgmma => &WGMMA_CONFIGS,
    }
}

/// A configuration by name (`tf32_128x256`, `sgemm_64x64`, `wgmma_128x256`, ...).
pub fn config_by_name(name: &str) -> Option<TileConfig> {
    TF32_CONFIGS
        .iter()
        .chain(SGEMM_CONFIGS.iter())
        .chain(WGMMA_CONFIGS.iter())
        .find(|c| c.name == name)
        .copied()
}

/// How one GEMM is run: a configuration and a split of K.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The tile configuration.
    pub config: TileConfig,
    /// Number of K slices (1: no split-K; the slices are summed by a deterministic reduction).
    pub splits: u32,
    /// K per slice, a multiple of the configuration's `bk` (K itself when `splits == 1`).
    pub k_per_split: u32,
    /// The planner's estimate in microseconds (for benches and notes).
    pub estimate_us: f64,
}

/// Split-K factors the planner considers.
pub const SPLIT_CANDIDATES: [u32; 8] = [1, 2, 3, 4, 6, 8, 12, 16];

/// Smallest K per slice worth a split (shorter slices spend their time filling the pipeline).
pub const MIN_K_PER_SPLIT: u32 = 256;

/// Effective bandwidth of the split-K reduction (bytes/s), measured on the H200: a 4096^2
/// split in two cost 0.28 ms more than no split for 268 MB moved (about 1 TB/s; the reduction
/// kernel is scalar, and the partial slices also leave the GEMM's write-out less efficient).
const BANDWIDTH: f64 = 1.0e12;
/// Launch and tail cost of the extra reduction kernel (seconds).
const REDUCE_LAUNCH: f64 = 4.0e-6;
/// Effective bandwidth of the `wgmma` operand pack (bytes read plus bytes written per second).
pub const PACK_BANDWIDTH: f64 = 2.5e12;
/// Fixed cost of the pack launch and allocation (seconds). Set above the ~2 us the H200 shows
/// (1024^3: 8.7 us for 16.8 MB) on purpose: the model overestimates the time of small mma.sync
/// tiles in a partial wave (tf32_64x64 at 1024^3: modelled 37 us, measured 27 us), and with 8 us
/// the planner keeps mma.sync where it measured faster (1024^3: 80 vs 67 TFLOP/s).
const PACK_LAUNCH: f64 = 8.0e-6;

/// Which kernel family runs a TF32 product on a device that has both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tf32Path {
    /// The planner chooses (`wgmma` only on compute capability 9.0).
    #[default]
    Auto,
    /// Always `mma.sync` ([`Family::Tf32`]).
    Mma,
    /// Always `wgmma` ([`Family::Wgmma`]); an error on devices other than compute capability 9.0.
    Wgmma,
}

impl Tf32Path {
    /// Parses `auto`, `mma` or `wgmma` (the values of `GPUKIT_GEMM_TF32`); `None` otherwise.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(Tf32Path::Auto),
            "mma" => Some(Tf32Path::Mma),
            "wgmma" => Some(Tf32Path::Wgmma),
            _ => None,
        }
    }
}

/// Bytes the `wgmma` pack moves for one product: op(A) and op(B) read once, the padded packed
/// tiles written once (an operand broadcast over the batch is packed once).
pub fn pack_bytes(config: &TileConfig, m: u32, n: u32, k: u32, batch: u32) -> f64 {
    let kp = k.div_ceil(config.bk) as f64 * config.bk as f64;
    let mp = m.div_ceil(config.bm) as f64 * config.bm as f64;
    let np = n.div_ceil(config.bn) as f64 * config.bn as f64;
    4.0 * batch as f64 * (m as f64 * k as f64 + n as f64 * k as f64 + (mp + np) * kp)
}

/// Normalises a requested split factor for `k` and `config`: the slice length is rounded up to
/// a multiple of `bk`, and empty trailing slices are dropped. Returns `(splits, k_per_split)`.
pub fn normalize_split(config: &TileConfig, k: u32, splits: u32) -> (u32, u32) {
    if k == 0 {
        return (1, 0);
    }
    if config.family == Family::Wgmma {
        return (1, k);
    }
    let splits = splits.clamp(1, k.div_ceil(config.bk));
    if splits == 1 {
        return (1, k);
    }
    let per = k.div_ceil(splits).div_ceil(config.bk) * config.bk;
    (k.div_ceil(per), per)
}

/// The planner's time estimate (seconds) for one candidate; see the module docs.
pub fn estimate(
    config: &TileConfig,
    m: u32,
    n: u32,
    k: u32,
    batch: u32,
    splits: u32,
    num_sms: u32,
) -> f64 {
    let (splits, per) = normalize_split(config, k, splits);
    let tiles = (m.div_ceil(config.bm) as u64) * (n.div_ceil(config.bn) as u64) * batch as u64;
    let blocks = tiles * splits as u64;
    let slots = (num_sms.max(1) * config.occupancy) as u64;
    let waves = blocks.div_ceil(slots) as f64;
    let tile_flops = 2.0 * config.bm as f64 * config.bn as f64 * per.max(1) as f64;
    let mut t = waves * config.occupancy as f64 * tile_flops / (config.gflops_per_sm as f64 * 1e9);
    if splits > 1 {
        let bytes = (splits as f64 + 2.0) * 4.0 * m as f64 * n as f64 * batch as f64;
        t += REDUCE_LAUNCH + bytes / BANDWIDTH;
    }
    if config.family == Family::Wgmma {
        t += PACK_LAUNCH + pack_bytes(config, m, n, k, batch) / PACK_BANDWIDTH;
    }
    t
}

/// Chooses a configuration and split for `batch` products of `m x k` by `k x n` on a device with
/// `num_sms` multiprocessors (see the module docs for the model).
pub fn plan(family: Family, m: u32, n: u32, k: u32, batch: u32, num_sms: u32) -> Plan {
    let mut best: Option<Plan> = None;
    for config in configs(family) {
        for &want in &SPLIT_CANDIDATES {
            if want > 1 && (k / want < MIN_K_PER_SPLIT || batch > 1) {
                continue;
            }
            let (splits, per) = normalize_split(config, k, want);
            if want > 1 && splits != want {
                continue;
            }
            let t = estimate(config, m, n, k, batch, splits, num_sms);
            // Strictly better by 3 %: ties go to the larger tile / fewer splits (listed first).
            if best.is_none_or(|b| t < b.estimate_us * 1e-6 * 0.97) {
                best = Some(Plan {
                    config: *config,
                    splits,
                    k_per_split: per,
                    estimate_us: t * 1e6,
                });
            }
        }
    }
    best.expect("configs are never empty")
}

/// Chooses the TF32 plan on a device with `num_sms` multiprocessors: `mma.sync` tiles only
/// ([`Tf32Path::Mma`], and what a device without `wgmma` must use), the `wgmma` kernel only
/// ([`Tf32Path::Wgmma`]), or the cheaper of the two under the model ([`Tf32Path::Auto`]; the
/// `wgmma` plan must be at least 3 % cheaper).
pub fn plan_tf32(m: u32, n: u32, k: u32, batch: u32, num_sms: u32, path: Tf32Path) -> Plan {
    let mma = || plan(Family::Tf32, m, n, k, batch, num_sms);
    let wgmma = || plan(Family::Wgmma, m, n, k, batch, num_sms);
    match path {
        Tf32Path::Mma => mma(),
        Tf32Path::Wgmma => wgmma(),
        Tf32Path::Auto => {
            let (a, b) = (mma(), wgmma());
            if b.estimate_us < a.estimate_us * 0.97 {
                b
            } else {
                a
            }
        }
    }
}

/// A plan for a fixed configuration and split factor (benches and tests that sweep them).
pub fn fixed_plan(config: TileConfig, k: u32, splits: u32) -> Plan {
    let (splits, per) = normalize_split(&config, k, splits);
    Plan {
        config,
        splits,
        k_per_split: per,
        estimate_us: f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200_SMS: u32 = 132;

    #[test]
    fn big_square_problems_take_the_big_tile_without_split() {
        for n in [4096, 8192] {
            let p = plan(Family::Tf32, n, n, n, 1, H200_SMS);
            assert_eq!(p.config.name, "tf32_128x256", "n={n}");
            assert_eq!(p.splits, 1);
            let p = plan(Family::Sgemm, n, n, n, 1, H200_SMS);
            assert_eq!(p.config.name, "sgemm_128x256", "n={n}");
            assert_eq!(p.splits, 1);
        }
    }

    #[test]
    fn small_problems_take_smaller_tiles_or_split_k() {
        // 1024^2 makes 32 blocks of 128x256 for 132 SMs: the planner must not choose that.
        let p = plan(Family::Tf32, 1024, 1024, 1024, 1, H200_SMS);
        assert!(p.config.name != "tf32_128x256" || p.splits > 1, "{p:?}");
        // Skinny: M*N tiny, K huge -> split-K.
        let p = plan(Family::Tf32, 128, 128, 65536, 1, H200_SMS);
        assert!(p.splits >= 4, "{p:?}");
        let p = plan(Family::Sgemm, 64, 64, 100_000, 1, H200_SMS);
        assert!(p.splits >= 4, "{p:?}");
        // Big M*N, small K -> never split.
        let p = plan(Family::Tf32, 4096, 4096, 256, 1, H200_SMS);
        assert_eq!(p.splits, 1, "{p:?}");
    }

    #[test]
    fn wgmma_is_planned_for_big_tf32_products_only() {
        for n in [4096, 8192] {
            let p = plan_tf32(n, n, n, 1, H200_SMS, Tf32Path::Auto);
            assert_eq!(p.config.name, "wgmma_128x256", "n={n}");
            assert_eq!(p.splits, 1);
        }
        // Tiny products stay on mma.sync (the pack's launches dominate).
        let p = plan_tf32(64, 64, 64, 1, H200_SMS, Tf32Path::Auto);
        assert_eq!(p.config.family, Family::Tf32, "{p:?}");
        // Forced paths.
        let p = plan_tf32(64, 64, 64, 1, H200_SMS, Tf32Path::Wgmma);
        assert_eq!((p.config.family, p.splits), (Family::Wgmma, 1));
        let p = plan_tf32(8192, 8192, 8192, 1, H200_SMS, Tf32Path::Mma);
        assert_eq!(p.config.family, Family::Tf32);
        // wgmma never splits K, whatever is asked.
        let w = WGMMA_CONFIGS[0];
        assert_eq!(normalize_split(&w, 30_000, 8), (1, 30_000));
        assert_eq!(fixed_plan(w, 1000, 4).splits, 1);
        assert_eq!(w.threads(), 384);
        assert_eq!(w.smem_bytes(true, false), 4 * 48 * 1024 + 1024);
        assert_eq!(
            w.name_expression(true, true, false),
            "gemm_wgmma<128,256,4,false>"
        );
        for (s, want) in [
            ("auto", Some(Tf32Path::Auto)),
            ("", Some(Tf32Path::Auto)),
            ("MMA", Some(Tf32Path::Mma)),
            (" wgmma ", Some(Tf32Path::Wgmma)),
            ("tensor", None),
        ] {
            assert_eq!(Tf32Path::parse(s), want, "{s:?}");
        }
    }

    #[test]
    fn batches_fill_the_device_without_split() {
        let p = plan(Family::Sgemm, 64, 64, 4096, 512, H200_SMS);
        assert_eq!(p.splits, 1);
    }

    #[test]
    fn split_normalisation_keeps_slices_aligned_and_non_empty() {
        let c = TF32_CONFIGS[0];
        assert_eq!(normalize_split(&c, 1000, 1), (1, 1000));
        assert_eq!(normalize_split(&c, 0, 4), (1, 0));
        // 1000 / 3 = 334 -> 352 (multiple of 32) -> 3 slices.
        assert_eq!(normalize_split(&c, 1000, 3), (3, 352));
        // 100 / 4 = 25 -> 32 -> ceil(100/32) = 4 slices.
        assert_eq!(normalize_split(&c, 100, 4), (4, 32));
        // 40 asks for 16 slices: at most ceil(40/32) = 2.
        assert_eq!(normalize_split(&c, 40, 16), (2, 32));
        for k in 1..600u32 {
            for s in SPLIT_CANDIDATES {
                let (splits, per) = normalize_split(&c, k, s);
                assert!(per % c.bk == 0 || splits == 1, "k={k} s={s}");
                assert!(per * splits >= k, "k={k} s={s}");
                assert!(per * (splits - 1) < k, "empty slice: k={k} s={s}");
            }
        }
    }

    #[test]
    fn shared_memory_fits_and_names_are_stable() {
        for c in TF32_CONFIGS
            .iter()
            .chain(SGEMM_CONFIGS.iter())
            .chain(WGMMA_CONFIGS.iter())
        {
            for ta in [false, true] {
                for tb in [false, true] {
                    let bytes = c.smem_bytes(ta, tb);
                    assert!(bytes <= 227 * 1024, "{} {bytes}", c.name);
                    // occupancy claims fit the 228 KB of an H100/H200 SM (1 KB reserved per block)
                    assert!(
                        c.occupancy * (bytes + 1024) <= 228 * 1024,
                        "{} occupancy {} with {bytes} B",
                        c.name,
                        c.occupancy
                    );
                }
            }
            assert_eq!(c.bm % c.wm, 0);
            assert_eq!(c.bn % c.wn, 0);
            assert_eq!(config_by_name(c.name), Some(*c));
        }
        assert_eq!(
            TF32_CONFIGS[0].name_expression(false, true, true),
            "gemm_tf32<128,256,32,64,64,3,false,true,true>"
        );
        assert_eq!(TF32_CONFIGS[0].threads(), 256);
        assert_eq!(SGEMM_CONFIGS[0].threads(), 256);
        assert_eq!(SGEMM_CONFIGS[1].threads(), 128);
        assert_eq!(SGEMM_CONFIGS[2].threads(), 64);
    }
}
