//! Tile configurations of the GEMM kernels and the per-shape, per-device choice among them.
//!
//! # How a configuration is chosen
//!
//! Each configuration has a block tile `BM x BN`, a k tile `BK`, a warp tile, a pipeline depth,
//! the number of blocks its kernel is built to keep on one multiprocessor (`occupancy`, from its
//! registers), and an estimated sustained rate per multiprocessor when the SM is full of it. The
//! planner reads the device ([`DeviceAttributes`]): a configuration whose shared memory exceeds
//! the device's opt-in limit per block is never chosen, the blocks per SM are also capped by the
//! shared memory and threads per SM, the SM count sets the waves, and the Hopper families are
//! considered only where the device runs them (compute capability 9.0).
//!
//! For a problem of `batch x M x N x K` and each candidate (configuration, split-K factor) the
//! planner estimates
//!
//! ```text
//! blocks = ceil(M/BM) * ceil(N/BN) * batch * splits
//! waves  = ceil(blocks / (SMs * occupancy))
//! time   = waves * occupancy * 2*BM*BN*ceil(K/splits) / rate_per_SM      (the GEMM kernel;
//!          a partial single wave of j < occupancy blocks per SM: sqrt(occupancy * j) instead
//!          of waves * occupancy)
//!        + (splits > 1) * (launch + (splits + 2) * 4*M*N*batch / bandwidth)  (the reduction)
//!        + (wgmma) * (launch + packed bytes / pack bandwidth)              (the operand pack)
//! ```
//!
//! and takes the cheapest. `waves` captures tile quantisation (a 1024x1024 problem makes only
//! 32 blocks of 128x256 for 132 SMs, so smaller tiles or split-K win there); the reduction term
//! keeps split-K to shapes with a large K and a small M*N, where it pays. The rates were
//! measured on the H200 (`gemm_bench --sweep`); on other devices they serve as relative weights
//! between configurations of one family. The result is deterministic and pure, so it is
//! unit-tested here without a GPU, for an H200 and for devices with less shared memory.
//!
//! # Hopper
//!
//! On compute capability 9.0 TF32 products can also run the `wgmma` kernels ([`Family::Wgmma`]),
//! and FP32-accurate products the 3xTF32 `wgmma` kernel ([`Family::Wgmma3`]). Both first pack
//! their operands into rounded (or split), swizzled K-major tiles (a memory-bound pass, modelled
//! as its bytes over [`PACK_BANDWIDTH`] plus a launch cost); a TF32 A that is already K-major and
//! aligned skips the pack and is read in place through a tensor map ([`Plan::tma_a`]).
//! [`choose`] compares the families a precision may use under the same model and keeps the
//! cheapest; [`Paths`] forces one (the `GPUKIT_GEMM_TF32` / `GPUKIT_GEMM_FP32` environment
//! variables, read by [`super::path`]).

use super::desc::{Precision, RawGemm};
use super::path::{Fp32Path, Paths, Tf32Path};
use crate::attributes::DeviceAttributes;
use crate::error::{Error, Result};

/// Which kernel family a configuration belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Tensor cores: `mma.sync.m16n8k8` on TF32-rounded inputs (`gemm_tf32.cu`).
    Tf32,
    /// Exact single precision on the FP32 pipes (`gemm_sgemm.cu`).
    Sgemm,
    /// Hopper tensor cores: `wgmma.mma_async` m64nBNk8 on TF32-rounded, 128B-swizzled K-major
    /// tiles (`gemm_wgmma.cu`, one product per k step); compute capability 9.0 only.
    Wgmma,
    /// Hopper 3xTF32 (`gemm_wgmma.cu`, three products per k step on split operands, f32 sums
    /// outside the tensor cores): FP32 accuracy; compute capability 9.0 only.
    Wgmma3,
}

impl Family {
    /// True for the Hopper `wgmma` families.
    pub fn is_wgmma(self) -> bool {
        matches!(self, Family::Wgmma | Family::Wgmma3)
    }

    /// Packed parts per operand element (the 3xTF32 pack writes a big and a small part).
    pub fn parts(self) -> u32 {
        if self == Family::Wgmma3 {
            2
        } else {
            1
        }
    }
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
    /// Warp tile rows (for the `wgmma` families: rows per consumer warpgroup).
    pub wm: u32,
    /// Warp tile columns (for the `wgmma` families: columns per consumer warpgroup).
    pub wn: u32,
    /// Pipeline stages.
    pub stages: u32,
    /// Blocks per multiprocessor the kernel is built for (its register budget); the planner
    /// caps it further by the device's shared memory and threads per SM.
    pub occupancy: u32,
    /// Sustained rate of one full multiprocessor with this tile, in GFLOP/s of the product
    /// (`2mnk`): measured on the H200 (TFLOP/s of the config at large sizes divided by 132 SMs,
    /// `gemm_bench --sweep`), or estimated where noted.
    pub gflops_per_sm: u32,
}

impl TileConfig {
    /// Threads per block (for the `wgmma` families: one producer warpgroup plus one consumer
    /// warpgroup per `wm` rows).
    pub fn threads(&self) -> u32 {
        if self.family.is_wgmma() {
            128 * (1 + self.bm / self.wm)
        } else {
            (self.bm / self.wm) * (self.bn / self.wn) * 32
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
            // Unpadded swizzled tiles (times the packed parts), plus 1024 bytes to align the
            // stages to the swizzle period.
            Family::Wgmma | Family::Wgmma3 => {
                return self.family.parts() * (self.bm + self.bn) * self.bk * 4 * self.stages + 1024
            }
        };
        (a + b) * 4 * self.stages
    }

    /// The largest dynamic shared memory of any operand layout.
    pub fn max_smem_bytes(&self) -> u32 {
        [(false, false), (false, true), (true, false), (true, true)]
            .into_iter()
            .map(|(a, b)| self.smem_bytes(a, b))
            .max()
            .unwrap_or(0)
    }

    /// The kernel template's name (`gemm_tf32`, `gemm_sgemm` or `gemm_wgmma`).
    pub fn kernel_name(&self) -> &'static str {
        match self.family {
            Family::Tf32 => "gemm_tf32",
            Family::Sgemm => "gemm_sgemm",
            Family::Wgmma | Family::Wgmma3 => "gemm_wgmma",
        }
    }

    /// Blocks of this configuration that fit on one multiprocessor of `dev` for the operand
    /// layouts given: its built-in occupancy, capped by shared memory (1 KB reserved per block)
    /// and threads per SM. 0 when a block does not fit at all (shared memory per block above the
    /// opt-in limit, or a `wgmma` family on a device without it).
    pub fn occupancy_on(&self, dev: &DeviceAttributes, trans_a: bool, trans_b: bool) -> u32 {
        if self.family.is_wgmma() && !dev.supports_wgmma() {
            return 0;
        }
        let smem = self.smem_bytes(trans_a, trans_b) as usize;
        if !dev.fits_shared_memory(smem) || self.threads() > dev.max_threads_per_block {
            return 0;
        }
        let by_smem = if dev.shared_memory_per_multiprocessor == 0 {
            self.occupancy as usize
        } else {
            dev.shared_memory_per_multiprocessor / (smem + 1024)
        };
        let by_threads = (dev.max_threads_per_multiprocessor / self.threads().max(1)) as usize;
        (self.occupancy as usize).min(by_smem).min(by_threads) as u32
    }
}

/// TF32 `mma.sync` configurations, largest first.
///
/// - `tf32_128x256`: 8 warps of 64x64, BK 32, 3 stages (153 KB smem): the big-problem tile,
///   one block per SM, 1 shared wavefront per mma.
/// - `tf32_128x128`: 4 warps of 64x64, 3 stages (105 KB): two blocks per SM, for mid sizes.
/// - `tf32_64x64`: 4 warps of 32x32, 4 stages (72 KB): three blocks per SM, small problems, and
///   the one TF32 tile of devices with 99 KB per block (RTX 30/40).
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

/// The Hopper `wgmma` TF32 configurations: 384 threads (a producer warpgroup and two consumer
/// warpgroups of 64 x BN), k tile 32, one block per SM (168 registers per thread at entry).
/// `gflops_per_sm` is the rate of the GEMM kernel alone (the pack is modelled separately).
///
/// - `wgmma_128x256`: 4 stages of 48 KB (193 KB with the alignment slack): 3180 per SM, the
///   kernel alone at 4096^3 and 8192^3 on the H200 (version 4 run: total time minus the modelled
///   pack, with A read through the tensor map and with A packed alike; version 3 measured 2950).
/// - `wgmma_128x128`: 4 stages of 32 KB (129 KB), twice the blocks for small and mid shapes
///   (estimated 2700 before the run: m64n128 wgmma, twice the L2 traffic per flop of 128x256; the
///   run showed about 1900-2400 at K = 1000-3000, where the pipeline fill and the epilogue of a
///   single wave weigh in, which the model does not separate).
pub const WGMMA_CONFIGS: [TileConfig; 2] = [
    TileConfig {
        name: "wgmma_128x256",
        family: Family::Wgmma,
        bm: 128,
        bn: 256,
        bk: 32,
        wm: 64,
        wn: 256,
        stages: 4,
        occupancy: 1,
        gflops_per_sm: 3180,
    },
    TileConfig {
        name: "wgmma_128x128",
        family: Family::Wgmma,
        bm: 128,
        bn: 128,
        bk: 32,
        wm: 64,
        wn: 128,
        stages: 4,
        occupancy: 1,
        gflops_per_sm: 2700,
    },
];

/// The Hopper 3xTF32 configuration `wgmma3_128x128`: block 128x128, k tile 32, 3 stages of
/// 64 KB (big and small parts of both operands; 193 KB with the slack), 384 threads, one block
/// per SM; consumer warpgroups of 64x128 with a main and a scratch accumulator set.
/// `gflops_per_sm` counts the product's `2mnk` (a third of the tensor-core work): 960, the kernel
/// alone at 4096^3 and 8192^3 on the H200 (version 4 run; estimated 840 before it).
pub const WGMMA3_CONFIGS: [TileConfig; 1] = [TileConfig {
    name: "wgmma3_128x128",
    family: Family::Wgmma3,
    bm: 128,
    bn: 128,
    bk: 32,
    wm: 64,
    wn: 128,
    stages: 3,
    occupancy: 1,
    gflops_per_sm: 960,
}];

/// Every configuration of a family.
pub fn configs(family: Family) -> &'static [TileConfig] {
    match family {
        Family::Tf32 => &TF32_CONFIGS,
        Family::Sgemm => &SGEMM_CONFIGS,
        Family::Wgmma => &WGMMA_CONFIGS,
        Family::Wgmma3 => &WGMMA3_CONFIGS,
    }
}

/// Every configuration of every family.
pub fn all_configs() -> impl Iterator<Item = &'static TileConfig> {
    TF32_CONFIGS
        .iter()
        .chain(SGEMM_CONFIGS.iter())
        .chain(WGMMA_CONFIGS.iter())
        .chain(WGMMA3_CONFIGS.iter())
}

/// A configuration by name (`tf32_128x256`, `sgemm_64x64`, `wgmma3_128x128`, ...).
pub fn config_by_name(name: &str) -> Option<TileConfig> {
    all_configs().find(|c| c.name == name).copied()
}

/// The shape and layout facts of one product that the planner uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    /// Rows of C.
    pub m: u32,
    /// Columns of C.
    pub n: u32,
    /// The inner dimension.
    pub k: u32,
    /// Products in the batch.
    pub batch: u32,
    /// A is stored transposed.
    pub trans_a: bool,
    /// B is stored transposed.
    pub trans_b: bool,
    /// A can be read in place through a tensor map ([`RawGemm::a_tensor_mappable`]).
    pub a_mappable: bool,
}

impl Problem {
    /// The problem of `g` (dimensions saturate at `u32::MAX`; [`RawGemm::validate`] keeps them
    /// within `i32`).
    pub fn of(g: &RawGemm) -> Problem {
        let c = |v: usize| v.min(u32::MAX as usize) as u32;
        Problem {
            m: c(g.m),
            n: c(g.n),
            k: c(g.k),
            batch: c(g.batch),
            trans_a: g.trans_a.is_yes(),
            trans_b: g.trans_b.is_yes(),
            a_mappable: g.a_tensor_mappable(),
        }
    }

    /// A contiguous, untransposed, aligned problem of this shape (planner tests and benches).
    pub fn shape(m: u32, n: u32, k: u32, batch: u32) -> Problem {
        Problem {
            m,
            n,
            k,
            batch,
            trans_a: false,
            trans_b: false,
            a_mappable: true,
        }
    }
}

/// How one GEMM is run: a configuration, a split of K, and (`wgmma` TF32) whether A is read in
/// place through a tensor map instead of being packed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The tile configuration.
    pub config: TileConfig,
    /// Number of K slices (1: no split-K; the slices are summed by a deterministic reduction).
    pub splits: u32,
    /// K per slice, a multiple of the configuration's `bk` (K itself when `splits == 1`).
    pub k_per_split: u32,
    /// [`Family::Wgmma`] only: A is read through a tensor map and rounded in registers (the
    /// problem must be [`Problem::a_mappable`]; else A is packed like B).
    pub tma_a: bool,
    /// The planner's estimate in microseconds (for benches and notes).
    pub estimate_us: f64,
}

/// Split-K factors the planner considers.
pub const SPLIT_CANDIDATES: [u32; 10] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32];

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
/// A plan of another family must be this much cheaper to replace the family a precision runs
/// by default (the model's uncertainty).
const SWITCH_MARGIN: f64 = 0.97;

/// Bytes the `wgmma` pack moves for one product: the operands it packs read once, their padded
/// packed tiles (times the parts) written once (an operand broadcast over the batch is packed
/// once; the tensor-map A of `tma_a` is not packed at all).
pub fn pack_bytes(config: &TileConfig, p: &Problem, tma_a: bool) -> f64 {
    let kp = p.k.div_ceil(config.bk) as f64 * config.bk as f64;
    let mp = p.m.div_ceil(config.bm) as f64 * config.bm as f64;
    let np = p.n.div_ceil(config.bn) as f64 * config.bn as f64;
    let parts = config.family.parts() as f64;
    let a = if tma_a {
        0.0
    } else {
        p.m as f64 * p.k as f64 + parts * mp * kp
    };
    let b = p.n as f64 * p.k as f64 + parts * np * kp;
    4.0 * p.batch as f64 * (a + b)
}

/// Normalises a requested split factor for `k` and `config`: the slice length is rounded up to
/// a multiple of `bk`, and empty trailing slices are dropped. Returns `(splits, k_per_split)`.
pub fn normalize_split(config: &TileConfig, k: u32, splits: u32) -> (u32, u32) {
    if k == 0 {
        return (1, 0);
    }
    let splits = splits.clamp(1, k.div_ceil(config.bk));
    if splits == 1 {
        return (1, k);
    }
    let per = k.div_ceil(splits).div_ceil(config.bk) * config.bk;
    (k.div_ceil(per), per)
}

/// The planner's time estimate (seconds) for one candidate on `dev`; see the module docs.
/// Infinite when the configuration does not fit the device.
pub fn estimate(
    config: &TileConfig,
    p: &Problem,
    splits: u32,
    tma_a: bool,
    dev: &DeviceAttributes,
) -> f64 {
    let occupancy = config.occupancy_on(dev, p.trans_a, p.trans_b);
    if occupancy == 0 {
        return f64::INFINITY;
    }
    let (splits, per) = normalize_split(config, p.k, splits);
    let tiles =
        (p.m.div_ceil(config.bm) as u64) * (p.n.div_ceil(config.bn) as u64) * p.batch as u64;
    let blocks = tiles * splits as u64;
    let sms = dev.multiprocessor_count.max(1) as u64;
    let slots = sms * occupancy as u64;
    let waves = blocks.div_ceil(slots) as f64;
    let tile_flops = 2.0 * config.bm as f64 * config.bn as f64 * per.max(1) as f64;
    let rate = config.gflops_per_sm as f64 * 1e9 * occupancy as f64 / config.occupancy as f64;
    // A full wave shares each SM among `occupancy` blocks. In a partial single wave with j < occ
    // blocks per SM each block runs faster than 1/occ of the SM, though not j/occ times
    // faster (fewer warps hide less latency): modelled as sqrt(occ * j) block-times.
    let per_sm = blocks.div_ceil(sms);
    let mut t = if per_sm >= occupancy as u64 {
        waves * occupancy as f64 * tile_flops / rate
    } else {
        (occupancy as f64 * per_sm as f64).sqrt() * tile_flops / rate
    };
    if splits > 1 {
        let bytes = (splits as f64 + 2.0) * 4.0 * p.m as f64 * p.n as f64 * p.batch as f64;
        t += REDUCE_LAUNCH + bytes / BANDWIDTH;
    }
    if config.family.is_wgmma() {
        t += PACK_LAUNCH + pack_bytes(config, p, tma_a) / PACK_BANDWIDTH;
    }
    t
}

/// The cheapest plan of `family` for `p` on `dev` (see the module docs for the model), or
/// `None` when no configuration of the family fits the device.
pub fn plan(family: Family, p: &Problem, dev: &DeviceAttributes) -> Option<Plan> {
    let tma_a = family == Family::Wgmma && p.a_mappable;
    let mut best: Option<Plan> = None;
    for config in configs(family) {
        for &want in &SPLIT_CANDIDATES {
            if want > 1 && (p.k / want < MIN_K_PER_SPLIT || p.batch > 1) {
                continue;
            }
            let (splits, per) = normalize_split(config, p.k, want);
            if want > 1 && splits != want {
                continue;
            }
            let t = estimate(config, p, splits, tma_a, dev);
            if !t.is_finite() {
                continue;
            }
            // Strictly better by 3 %: ties go to the larger tile / fewer splits (listed first).
            if best.is_none_or(|b| t < b.estimate_us * 1e-6 * SWITCH_MARGIN) {
                best = Some(Plan {
                    config: *config,
                    splits,
                    k_per_split: per,
                    tma_a,
                    estimate_us: t * 1e6,
                });
            }
        }
    }
    best
}

/// Smallest K for which the FP32 default may run 3xTF32. Its normwise error has a floor of about
/// 2.4e-7 (the split represents each input to about 2^-22) whatever K, while an FP32 sum's
/// error grows with K: on the H200 run of version 4, 3xTF32 was more accurate than cuBLAS SGEMM
/// at every K >= 256 where the planner chose it (K = 256: 2.4e-7 vs 2.9e-7; K = 8192: 3.7e-7 vs
/// 1.6e-6) and less accurate at K = 128 (2.4e-7 vs 2.0e-7) and K = 64 (2.4e-7 vs 1.4e-7).
pub const TF32X3_MIN_K: u32 = 256;

/// Whether 3xTF32 may be the FP32 default for a product of inner dimension `k` on a device of
/// this compute capability: where it was measured both faster than the FP32 SIMT kernel and at
/// least as accurate as cuBLAS SGEMM (GEMM_NOTES.md, "Version 4 run": compute capability 9.0,
/// the only one with the kernel, and `k >= TF32X3_MIN_K`).
pub fn fp32_prefers_tf32x3(compute_capability: (u32, u32), k: u32) -> bool {
    compute_capability == (9, 0) && k >= TF32X3_MIN_K
}

fn no_plan(what: &str, dev: &DeviceAttributes) -> Error {
    Error::invalid(
        "gemm",
        format!(
            "no {what} GEMM configuration fits {} (compute capability {}.{}, {} B of shared memory \
             per block)",
            dev.name,
            dev.compute_capability.0,
            dev.compute_capability.1,
            dev.shared_memory_per_block_optin
        ),
    )
}

fn wgmma_unsupported(dev: &DeviceAttributes, var: &str) -> Error {
    Error::invalid(
        "gemm",
        format!(
            "the wgmma kernels need a compute capability 9.0 GPU (H100/H200), {} is {}.{}; unset \
             {var} or set it to `auto`",
            dev.name, dev.compute_capability.0, dev.compute_capability.1
        ),
    )
}

/// The cheaper of two optional plans; `alt` must beat `base` by the switch margin.
fn cheaper(base: Option<Plan>, alt: Option<Plan>) -> Option<Plan> {
    match (base, alt) {
        (Some(b), Some(a)) if a.estimate_us < b.estimate_us * SWITCH_MARGIN => Some(a),
        (Some(b), _) => Some(b),
        (None, a) => a,
    }
}

/// The plan for `precision` on `dev`, with the paths forced by `paths`:
///
/// - [`Precision::Tf32`]: the best `mma.sync` plan, or on compute capability 9.0 the `wgmma`
///   plan when it is at least 3 % cheaper ([`Tf32Path`] forces either);
/// - [`Precision::Fp32`]: the SIMT plan, or where [`fp32_prefers_tf32x3`] the 3xTF32 plan when
///   it is at least 3 % cheaper ([`Fp32Path`] forces either);
/// - [`Precision::Tf32x3`]: the 3xTF32 plan where the device runs it, else the SIMT plan.
///
/// A forced Hopper path on another device is an [`Error::InvalidArgument`] naming the variable;
/// `paths.tma == false` packs A instead of reading it through a tensor map.
pub fn choose(
    precision: Precision,
    p: &Problem,
    dev: &DeviceAttributes,
    paths: &Paths,
) -> Result<Plan> {
    let chosen = choose_family(precision, p, dev, paths)?;
    Ok(Plan {
        tma_a: chosen.tma_a && paths.tma,
        ..chosen
    })
}

fn choose_family(
    precision: Precision,
    p: &Problem,
    dev: &DeviceAttributes,
    paths: &Paths,
) -> Result<Plan> {
    let hopper = dev.supports_wgmma();
    let simt = || plan(Family::Sgemm, p, dev).ok_or_else(|| no_plan("FP32", dev));
    let x3 = || plan(Family::Wgmma3, p, dev).ok_or_else(|| no_plan("3xTF32", dev));
    match precision {
        Precision::Tf32 => {
            let mma = || plan(Family::Tf32, p, dev);
            let wg = || plan(Family::Wgmma, p, dev);
            let chosen = match paths.tf32 {
                Tf32Path::Mma => mma(),
                Tf32Path::Wgmma if !hopper => {
                    return Err(wgmma_unsupported(dev, super::path::TF32_PATH_ENV))
                }
                Tf32Path::Wgmma => wg(),
                Tf32Path::Auto if hopper => cheaper(mma(), wg()),
                Tf32Path::Auto => mma(),
            };
            chosen.ok_or_else(|| no_plan("TF32", dev))
        }
        Precision::Fp32 => match paths.fp32 {
            Fp32Path::Simt => simt(),
            Fp32Path::Tf32x3 if !hopper => Err(wgmma_unsupported(dev, super::path::FP32_PATH_ENV)),
            Fp32Path::Tf32x3 => x3(),
            Fp32Path::Auto if hopper && fp32_prefers_tf32x3(dev.compute_capability, p.k) => {
                cheaper(plan(Family::Sgemm, p, dev), plan(Family::Wgmma3, p, dev))
                    .ok_or_else(|| no_plan("FP32", dev))
            }
            Fp32Path::Auto => simt(),
        },
        Precision::Tf32x3 if hopper => x3(),
        Precision::Tf32x3 => simt(),
    }
}

/// A plan for a fixed configuration and split factor (benches and tests that sweep them); for
/// [`Family::Wgmma`], A is read through a tensor map when `p` allows it.
pub fn fixed_plan(config: TileConfig, p: &Problem, splits: u32) -> Plan {
    let (splits, per) = normalize_split(&config, p.k, splits);
    Plan {
        config,
        splits,
        k_per_split: per,
        tma_a: config.family == Family::Wgmma && p.a_mappable,
        estimate_us: f64::NAN,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn h200() -> DeviceAttributes {
        DeviceAttributes {
            ordinal: 0,
            name: "H200-like".into(),
            compute_capability: (9, 0),
            multiprocessor_count: 132,
            shared_memory_per_block: 48 << 10,
            shared_memory_per_block_optin: 227 << 10,
            shared_memory_per_multiprocessor: 228 << 10,
            l2_cache_bytes: 60 << 20,
            max_threads_per_block: 1024,
            max_threads_per_multiprocessor: 2048,
            registers_per_block: 65536,
            registers_per_multiprocessor: 65536,
            warp_size: 32,
            async_engine_count: 3,
            total_memory: 141 << 30,
        }
    }

    /// An RTX 4090-like device: 99 KB per block, 100 KB per SM, 128 SMs, compute capability 8.9.
    fn rtx4090() -> DeviceAttributes {
        DeviceAttributes {
            name: "RTX-4090-like".into(),
            compute_capability: (8, 9),
            multiprocessor_count: 128,
            shared_memory_per_block_optin: 99 << 10,
            shared_memory_per_multiprocessor: 100 << 10,
            max_threads_per_multiprocessor: 1536,
            ..h200()
        }
    }

    /// An A100-like device: 163 KB per block, 164 KB per SM, 108 SMs.
    fn a100() -> DeviceAttributes {
        DeviceAttributes {
            name: "A100-like".into(),
            compute_capability: (8, 0),
            multiprocessor_count: 108,
            shared_memory_per_block_optin: 163 << 10,
            shared_memory_per_multiprocessor: 164 << 10,
            ..h200()
        }
    }

    fn sq(n: u32) -> Problem {
        Problem::shape(n, n, n, 1)
    }

    fn auto() -> Paths {
        Paths::default()
    }

    #[test]
    fn big_square_problems_take_the_big_tile_without_split() {
        let d = h200();
        for n in [4096, 8192] {
            let p = plan(Family::Tf32, &sq(n), &d).unwrap();
            assert_eq!(p.config.name, "tf32_128x256", "n={n}");
            assert_eq!(p.splits, 1);
            let p = plan(Family::Sgemm, &sq(n), &d).unwrap();
            assert_eq!(p.config.name, "sgemm_128x256", "n={n}");
            assert_eq!(p.splits, 1);
        }
    }

    #[test]
    fn small_problems_take_smaller_tiles_or_split_k() {
        let d = h200();
        // 1024^2 makes 32 blocks of 128x256 for 132 SMs: the planner must not choose that.
        let p = plan(Family::Tf32, &sq(1024), &d).unwrap();
        assert!(p.config.name != "tf32_128x256" || p.splits > 1, "{p:?}");
        // Skinny: M*N tiny, K huge -> split-K.
        let p = plan(Family::Tf32, &Problem::shape(128, 128, 65536, 1), &d).unwrap();
        assert!(p.splits >= 4, "{p:?}");
        let p = plan(Family::Sgemm, &Problem::shape(64, 64, 100_000, 1), &d).unwrap();
        assert!(p.splits >= 4, "{p:?}");
        // A few hundred square with a long K: split-K in every family.
        for f in [Family::Sgemm, Family::Tf32, Family::Wgmma, Family::Wgmma3] {
            let p = plan(f, &Problem::shape(384, 384, 8192, 1), &d).unwrap();
            assert!(p.splits >= 4, "{f:?}: {p:?}");
        }
        // Big M*N, small K -> never split.
        let p = plan(Family::Tf32, &Problem::shape(4096, 4096, 256, 1), &d).unwrap();
        assert_eq!(p.splits, 1, "{p:?}");
        // What the GPU test `skinny_and_small_long_k_shapes_use_split_k_and_stay_accurate`
        // expects of the H200.
        for (m, n, k) in [(96, 80, 30_000), (384, 384, 8192), (250, 260, 8192)] {
            for prec in [Precision::Fp32, Precision::Tf32, Precision::Tf32x3] {
                let p = choose(prec, &Problem::shape(m, n, k, 1), &d, &auto()).unwrap();
                assert!(p.splits > 1, "{m}x{n}x{k} {prec:?}: {p:?}");
            }
        }
    }

    #[test]
    fn hopper_paths_are_planned_for_big_products_only() {
        let d = h200();
        for n in [4096, 8192] {
            let p = choose(Precision::Tf32, &sq(n), &d, &auto()).unwrap();
            assert_eq!(p.config.name, "wgmma_128x256", "n={n}");
            assert_eq!(p.splits, 1);
            assert!(p.tma_a, "contiguous A is read through a tensor map");
            let p = choose(Precision::Fp32, &sq(n), &d, &auto()).unwrap();
            assert_eq!(p.config.family, Family::Wgmma3, "n={n}: {p:?}");
        }
        // A transposed A cannot be read through the tensor map: packed.
        let mut t = sq(4096);
        t.trans_a = true;
        t.a_mappable = false;
        let p = choose(Precision::Tf32, &t, &d, &auto()).unwrap();
        assert!(p.config.family == Family::Wgmma && !p.tma_a, "{p:?}");
        // Tiny products stay on mma.sync / SIMT (the pack's launch dominates).
        let tiny = Problem::shape(64, 64, 64, 1);
        let p = choose(Precision::Tf32, &tiny, &d, &auto()).unwrap();
        assert_eq!(p.config.family, Family::Tf32, "{p:?}");
        let p = choose(Precision::Fp32, &tiny, &d, &auto()).unwrap();
        assert_eq!(p.config.family, Family::Sgemm, "{p:?}");
        // Forced paths.
        let force = |tf32, fp32| Paths {
            tf32,
            fp32,
            tma: true,
        };
        let no_tma = Paths {
            tma: false,
            ..auto()
        };
        let p = choose(Precision::Tf32, &sq(4096), &d, &no_tma).unwrap();
        assert!(p.config.family == Family::Wgmma && !p.tma_a, "{p:?}");
        let p = choose(
            Precision::Tf32,
            &tiny,
            &d,
            &force(Tf32Path::Wgmma, Fp32Path::Auto),
        );
        assert_eq!(p.unwrap().config.family, Family::Wgmma);
        let p = choose(
            Precision::Tf32,
            &sq(8192),
            &d,
            &force(Tf32Path::Mma, Fp32Path::Auto),
        );
        assert_eq!(p.unwrap().config.family, Family::Tf32);
        let p = choose(
            Precision::Fp32,
            &sq(8192),
            &d,
            &force(Tf32Path::Auto, Fp32Path::Simt),
        );
        assert_eq!(p.unwrap().config.family, Family::Sgemm);
        let p = choose(
            Precision::Fp32,
            &tiny,
            &d,
            &force(Tf32Path::Auto, Fp32Path::Tf32x3),
        );
        assert_eq!(p.unwrap().config.family, Family::Wgmma3);
        let p = choose(Precision::Tf32x3, &tiny, &d, &auto()).unwrap();
        assert_eq!(p.config.family, Family::Wgmma3);
        // A short K keeps the FP32 default on SIMT however large the output (3xTF32's error
        // floor is above an FP32 sum's there); Tf32x3 itself still runs it.
        let short = Problem::shape(8192, 8192, 128, 1);
        let p = choose(Precision::Fp32, &short, &d, &auto()).unwrap();
        assert_eq!(p.config.family, Family::Sgemm, "{p:?}");
        let p = choose(Precision::Tf32x3, &short, &d, &auto()).unwrap();
        assert_eq!(p.config.family, Family::Wgmma3, "{p:?}");
    }

    #[test]
    fn devices_without_wgmma_never_get_it_and_forcing_it_is_an_error() {
        for d in [a100(), rtx4090()] {
            for n in [256, 4096, 8192] {
                let p = choose(Precision::Tf32, &sq(n), &d, &auto()).unwrap();
                assert_eq!(p.config.family, Family::Tf32, "{}: {p:?}", d.name);
                let p = choose(Precision::Fp32, &sq(n), &d, &auto()).unwrap();
                assert_eq!(p.config.family, Family::Sgemm, "{}: {p:?}", d.name);
                // 3xTF32 falls back to the SIMT kernel (same accuracy class).
                let p = choose(Precision::Tf32x3, &sq(n), &d, &auto()).unwrap();
                assert_eq!(p.config.family, Family::Sgemm, "{}: {p:?}", d.name);
            }
            let forced = Paths {
                tf32: Tf32Path::Wgmma,
                ..auto()
            };
            let e = choose(Precision::Tf32, &sq(64), &d, &forced).unwrap_err();
            assert!(e.to_string().contains("GPUKIT_GEMM_TF32"), "{e}");
            let forced = Paths {
                fp32: Fp32Path::Tf32x3,
                ..auto()
            };
            let e = choose(Precision::Fp32, &sq(64), &d, &forced).unwrap_err();
            assert!(e.to_string().contains("GPUKIT_GEMM_FP32"), "{e}");
        }
    }

    #[test]
    fn tiles_beyond_the_shared_memory_per_block_are_never_chosen() {
        // RTX 30/40: 99 KB per block. tf32_128x256 (153 KB) and tf32_128x128 (105 KB) do not fit.
        let d = rtx4090();
        for c in all_configs() {
            let fits = c.max_smem_bytes() as usize <= d.shared_memory_per_block_optin;
            if !fits || c.family.is_wgmma() {
                assert_eq!(c.occupancy_on(&d, true, false), 0, "{}", c.name);
            }
        }
        for (m, n, k) in [
            (8192, 8192, 8192),
            (4096, 4096, 256),
            (1024, 1024, 1024),
            (128, 128, 65536),
            (7, 300, 517),
        ] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let p = Problem {
                        trans_a: ta,
                        trans_b: tb,
                        a_mappable: !ta,
                        ..Problem::shape(m, n, k, 1)
                    };
                    for prec in [Precision::Tf32, Precision::Fp32, Precision::Tf32x3] {
                        let plan = choose(prec, &p, &d, &auto()).unwrap();
                        let smem = plan.config.smem_bytes(ta, tb) as usize;
                        assert!(
                            smem <= d.shared_memory_per_block_optin,
                            "{m}x{n}x{k} {prec:?}: {} needs {smem} B",
                            plan.config.name
                        );
                    }
                }
            }
        }
        assert_eq!(
            choose(Precision::Tf32, &sq(8192), &d, &auto())
                .unwrap()
                .config
                .name,
            "tf32_64x64"
        );
        // A100: 163 KB per block: the 128x256 TF32 tile fits, one block per SM.
        let a = a100();
        assert_eq!(TF32_CONFIGS[0].occupancy_on(&a, false, false), 1);
        assert_eq!(
            choose(Precision::Tf32, &sq(8192), &a, &auto())
                .unwrap()
                .config
                .name,
            "tf32_128x256"
        );
        // A device that fits no configuration of a family gets a typed error, not a panic.
        let tiny = DeviceAttributes {
            shared_memory_per_block_optin: 16 << 10,
            shared_memory_per_multiprocessor: 16 << 10,
            ..rtx4090()
        };
        let e = choose(Precision::Tf32, &sq(64), &tiny, &auto()).unwrap_err();
        assert!(
            e.to_string().contains("no TF32 GEMM configuration fits"),
            "{e}"
        );
    }

    #[test]
    fn occupancy_follows_the_device() {
        let d = h200();
        // tf32_128x128 is built for 2 blocks/SM and 2 x 106 KB fit in 228 KB.
        assert_eq!(TF32_CONFIGS[1].occupancy_on(&d, false, false), 2);
        // The same tile on an A100-like SM (164 KB) fits once.
        assert_eq!(TF32_CONFIGS[1].occupancy_on(&a100(), false, false), 1);
        // sgemm_64x64 (64 threads, 26 KB): 8 per SM on the H200.
        assert_eq!(SGEMM_CONFIGS[2].occupancy_on(&d, false, false), 8);
        for c in all_configs() {
            assert!(
                c.occupancy_on(&d, false, true) >= 1,
                "{} fits the H200",
                c.name
            );
        }
    }

    #[test]
    fn more_sms_never_make_a_plan_slower() {
        let small = DeviceAttributes {
            multiprocessor_count: 66,
            ..h200()
        };
        for n in [512u32, 1024, 2048, 4096] {
            for prec in [Precision::Tf32, Precision::Fp32] {
                let a = choose(prec, &sq(n), &h200(), &auto()).unwrap();
                let b = choose(prec, &sq(n), &small, &auto()).unwrap();
                // Each of the two choices (within a family, across families) keeps the first
                // candidate unless another is 3 % cheaper: allow that slack twice.
                let slack = SWITCH_MARGIN * SWITCH_MARGIN;
                assert!(
                    a.estimate_us <= b.estimate_us / slack,
                    "n={n} {prec:?}: {a:?} vs {b:?}"
                );
            }
        }
    }

    #[test]
    fn batches_fill_the_device_without_split() {
        let p = plan(Family::Sgemm, &Problem::shape(64, 64, 4096, 512), &h200()).unwrap();
        assert_eq!(p.splits, 1);
    }

    #[test]
    fn pack_bytes_count_parts_and_skip_the_mapped_a() {
        let w = WGMMA_CONFIGS[0];
        let p = Problem::shape(128, 256, 32, 1);
        // A: read 128*32 + write 128*32; B: read 256*32 + write 256*32 (floats).
        assert_eq!(
            pack_bytes(&w, &p, false),
            4.0 * 2.0 * (128.0 + 256.0) * 32.0
        );
        assert_eq!(pack_bytes(&w, &p, true), 4.0 * 2.0 * 256.0 * 32.0);
        let x = WGMMA3_CONFIGS[0];
        let p = Problem::shape(128, 128, 32, 1);
        assert_eq!(pack_bytes(&x, &p, false), 4.0 * 3.0 * 256.0 * 32.0);
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
        for config in all_configs() {
            for k in 1..600u32 {
                for s in SPLIT_CANDIDATES {
                    let (splits, per) = normalize_split(config, k, s);
                    assert!(per % config.bk == 0 || splits == 1, "k={k} s={s}");
                    assert!(per * splits >= k, "k={k} s={s}");
                    assert!(per * (splits - 1) < k, "empty slice: k={k} s={s}");
                }
            }
        }
    }

    #[test]
    fn shared_memory_fits_the_h200_and_names_are_stable() {
        for c in all_configs() {
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
        assert_eq!(TF32_CONFIGS[0].threads(), 256);
        assert_eq!(SGEMM_CONFIGS[0].threads(), 256);
        assert_eq!(SGEMM_CONFIGS[1].threads(), 128);
        assert_eq!(SGEMM_CONFIGS[2].threads(), 64);
        assert_eq!(WGMMA_CONFIGS[0].threads(), 384);
        assert_eq!(WGMMA3_CONFIGS[0].threads(), 384);
        assert_eq!(
            WGMMA_CONFIGS[0].smem_bytes(true, false),
            4 * 48 * 1024 + 1024
        );
        assert_eq!(
            WGMMA3_CONFIGS[0].smem_bytes(false, false),
            3 * 64 * 1024 + 1024
        );
    }
}
