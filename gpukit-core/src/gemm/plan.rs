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
//! and FP32-accurate products the 3xTF32 `wgmma` kernel ([`Family::Wgmma3`]). The `wgmma` kernel
//! computes `P Q^T` with P in wgmma's register role and Q in its shared-memory role, either
//! `P = op(A), Q = op(B)^T` or, swapped, `P = op(B)^T, Q = op(A)` (storing the transpose), and
//! (TF32) reads each operand in place through a tensor map where its layout allows ([`Operands`],
//! [`operand_choices`]); the rest (3xTF32: both operands) is first packed into rounded (3xTF32:
//! split), swizzled K-major tiles, a memory-bound pass modelled as its bytes over
//! [`PACK_BANDWIDTH`] plus a launch cost.
//! Above one wave of blocks the `wgmma` kernels run persistent ([`Plan::max_blocks`]: one block
//! per SM walking the tiles). [`choose`] compares the families a precision may use under
//! the same model and keeps the cheapest; [`Paths`] forces one (the `GPUKIT_GEMM_TF32` /
//! `GPUKIT_GEMM_FP32` environment variables, read by [`super::path`]).

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
    /// `wgmma` families: the two consumer warpgroups take alternate work units, each the whole
    /// `bm` x `bn` tile (its 64-row slabs: two, or one for `bm` 64), and their main loops take
    /// turns on the tensor cores, so that one's epilogue runs under the other's main loop
    /// (ping-pong); otherwise both consumers share each tile, one 64-row slab each (cooperative).
    pub pingpong: bool,
    /// `wgmma` TF32 families: blocks per thread-block cluster (1, or 2: the two blocks of a
    /// cluster compute neighbouring P tiles beside one Q tile, each copies half of that Q tile
    /// and the copy engine multicasts it into both, halving the L2 reads of Q; the grid is a
    /// whole number of clusters).
    pub cluster: u32,
    /// Sustained rate of one full multiprocessor with this tile, in GFLOP/s of the product
    /// (`2mnk`): measured on the H200 (TFLOP/s of the config at large sizes divided by 132 SMs,
    /// `gemm_bench --sweep`), or estimated where noted.
    pub gflops_per_sm: u32,
}

/// Shared memory a `wgmma` TF32 block adds when it writes its output through shared memory and
/// the copy engine ([`TileConfig::stages_output`]): two buffers of 64 x 32 floats per consumer
/// warpgroup (`C_STAGE_BYTES` in gemm_wgmma.cu).
pub const OUTPUT_STAGING_BYTES: u32 = 32 * 1024;

/// The most dynamic shared memory a block may have on compute capability 9.0 (227 KB), the bound
/// against which gemm_wgmma.cu compiles its output staging (`C_TMA`).
pub const SM90_SMEM_PER_BLOCK: u32 = 232_448;

impl TileConfig {
    /// Whether this configuration's kernel is compiled to write its output through shared memory
    /// and the copy engine (a tensor map of C): a `wgmma` TF32 tile of one block per SM whose
    /// stages leave [`OUTPUT_STAGING_BYTES`] of the 227 KB a block may have. The consumer
    /// warpgroups stage each chunk of their tile and go on while the copy engine writes it (the
    /// next chunk, the next unit's main loop), where `st.global` from registers held them until
    /// the stores issued: on an H100 at 2000x6000x400 NT, 19 % of the cooperative 128x256's stall
    /// samples were on those stores (GEMM_NOTES.md, version 20). Used where C allows vector
    /// stores, its rows are whole 16-byte units and beta is 0, unless `GPUKIT_GEMM_TMA_STORE=off`
    /// ([`super::launch`]).
    pub fn stages_output(&self) -> bool {
        self.family == Family::Wgmma
            && self.occupancy == 1
            && self.smem_bytes(false, false) + OUTPUT_STAGING_BYTES <= SM90_SMEM_PER_BLOCK
    }

    /// A `wgmma` kernel built for several blocks per SM (`wgmma_128x128_2`): P in shared memory
    /// only ([`config_operand_choices`]), and a candidate only where that many blocks fit.
    pub fn wgmma_of_several_blocks(&self) -> bool {
        self.family.is_wgmma() && self.occupancy > 1
    }

    /// Blocks of one output slice (one batch entry, one K slice) when each runs one tile: the
    /// tiles of `p` under `ops`, the P tiles rounded up to whole clusters.
    pub fn blocks_per_slice(&self, p: &Problem, ops: &Operands) -> u64 {
        let (pr, qr) = p.pq_rows(ops);
        let cluster = self.cluster.max(1);
        (pr.div_ceil(self.bm).div_ceil(cluster) * cluster) as u64 * qr.div_ceil(self.bn) as u64
    }

    /// Threads per block (for the `wgmma` families: one producer warpgroup plus two consumer
    /// warpgroups, one per `wm` rows of the tile or, ping-pong, one per unit in flight).
    pub fn threads(&self) -> u32 {
        if self.family.is_wgmma() {
            128 * 3
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

    /// The kernel template's name (`gemm_tf32`, `gemm_sgemm`, `gemm_wgmma`, or `gemm_wgmma_c2`
    /// for a cluster of two blocks).
    pub fn kernel_name(&self) -> &'static str {
        match self.family {
            Family::Tf32 => "gemm_tf32",
            Family::Sgemm => "gemm_sgemm",
            Family::Wgmma if self.cluster == 2 => "gemm_wgmma_c2",
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
        pingpong: false,
        cluster: 1,
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
        pingpong: false,
        cluster: 1,
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
        pingpong: false,
        cluster: 1,
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
///
/// Version 6 (the 64x64 warp tile, 4 warps in a row or a column, 41 KB, two blocks per SM):
/// - `sgemm_64x256` / `sgemm_256x64`: skinny outputs (M or N of 64 or less), where a 128-row
///   tile wastes half its work. Measured on the H200 at 342 / 313 GFLOP/s per SM
///   (64x8192x8192, 8192x64x8192, split 8) and 223 on 500x300x16384 (split 24, where they lost
///   to 3xTF32): planned at 300.
pub const SGEMM_CONFIGS: [TileConfig; 5] = [
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
        pingpong: false,
        cluster: 1,
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
        pingpong: false,
        cluster: 1,
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
        pingpong: false,
        cluster: 1,
        gflops_per_sm: 280,
    },
    TileConfig {
        name: "sgemm_64x256",
        family: Family::Sgemm,
        bm: 64,
        bn: 256,
        bk: 8,
        wm: 64,
        wn: 64,
        stages: 4,
        occupancy: 2,
        pingpong: false,
        cluster: 1,
        gflops_per_sm: 300,
    },
    TileConfig {
        name: "sgemm_256x64",
        family: Family::Sgemm,
        bm: 256,
        bn: 64,
        bk: 8,
        wm: 64,
        wn: 64,
        stages: 4,
        occupancy: 2,
        pingpong: false,
        cluster: 1,
        gflops_per_sm: 300,
    },
];

/// `wgmma_128x256` (see [`WGMMA_CONFIGS`]); its clustered sibling differs in name and cluster.
const WGMMA_128X256: TileConfig = TileConfig {
    name: "wgmma_128x256",
    family: Family::Wgmma,
    bm: 128,
    bn: 256,
    bk: 32,
    wm: 64,
    wn: 256,
    stages: 4,
    occupancy: 1,
    pingpong: false,
    cluster: 1,
    gflops_per_sm: 3180,
};

/// `wgmma_128x128_pp` (see [`WGMMA_CONFIGS`]); its clustered sibling differs in name and cluster.
const WGMMA_128X128_PP: TileConfig = TileConfig {
    name: "wgmma_128x128_pp",
    family: Family::Wgmma,
    bm: 128,
    bn: 128,
    bk: 32,
    wm: 64,
    wn: 128,
    stages: 7,
    occupancy: 1,
    pingpong: true,
    cluster: 1,
    gflops_per_sm: 2200,
};

/// `wgmma_64x128_pp` (see [`WGMMA_CONFIGS`]); its clustered sibling differs in name and cluster.
const WGMMA_64X128_PP: TileConfig = TileConfig {
    name: "wgmma_64x128_pp",
    family: Family::Wgmma,
    bm: 64,
    bn: 128,
    bk: 32,
    wm: 64,
    wn: 128,
    stages: 9,
    occupancy: 1,
    pingpong: true,
    cluster: 1,
    gflops_per_sm: 1900,
};

/// The Hopper `wgmma` TF32 configurations: 384 threads (a producer warpgroup and two consumer
/// warpgroups), k tile 32, one block per SM (168 registers per thread at entry) except
/// `wgmma_128x128_2` (two).
/// `gflops_per_sm` is the rate of the GEMM kernel alone (the pack is modelled separately).
///
/// - `wgmma_128x256`: 4 stages of 48 KB (193 KB with the alignment slack): 3180 per SM, the
///   kernel alone at 4096^3 and 8192^3 on the H200 (version 4 run: total time minus the modelled
///   pack, with A read through the tensor map and with A packed alike; version 3 measured 2950).
/// - `wgmma_128x128`: 4 stages of 32 KB (129 KB), twice the blocks for small and mid shapes
///   (estimated 2700 before the run: m64n128 wgmma, twice the L2 traffic per flop of 128x256; the
///   run showed about 1900-2400 at K = 1000-3000, where the pipeline fill and the epilogue of a
///   single wave weigh in, which the model does not separate).
/// - `wgmma_128x128_2` (version 9): the 128x128 tile built for two blocks per SM (3 stages of
///   32 KB, 97 KB with the slack; 80 registers per thread at entry, setmaxnreg 32 / 104; each
///   k8 step two m64n64 wgmma halves), so that one block's epilogue (storing its tile straight
///   from registers) overlaps the other block's main loop: for K of a few hundred, where a
///   one-block tile spends about as long storing as computing. Planned at the 128x128 tile's
///   rate, 2200 per SM (2700 packed), so the model keeps its choices and the autotuner, which
///   times it on every class where it is within reach, decides. Measured on an H100
///   (2026-12-06): 11-26 % faster than the one-block 128x128 on short-K shapes, never the best
///   plan (GEMM_NOTES.md, version 9).
/// - `wgmma_128x256_c2`, `wgmma_128x128_pp_c2` (version 11): the 128x256 and ping-pong tiles in
///   clusters of two blocks along P that share each Q tile (each block copies half of it, the
///   copy engine multicasts both halves into both blocks): cuBLAS's TF32 kernels on an H100 run
///   their 128x256 and 128x128 tiles in clusters of 2 (ncu, 2026-12-06). Planned at their
///   siblings' rates until measured, so that the model keeps its choices (ties go to the
///   configuration listed first); the autotuner times them. Measured on an H100 (2026-12-06,
///   GEMM_NOTES.md version 11): the 128x256 even with its sibling (380 against 385 TFLOP/s at
///   4096^3), the ping-pong tile with packed operands 8-13 % ahead of its sibling from 3000^3
///   up; the tuner's choice on five sweep shapes.
/// - `wgmma_128x128_pp` (version 10): ping-pong. Each consumer warpgroup computes whole 128x128
///   tiles (two m64n128 wgmma per k8 step, 128 accumulators per thread) of every other work
///   unit of its block, and the two main loops take turns, so that one warpgroup's epilogue
///   runs while the other's main loop has the tensor cores; with P from registers the
///   fragments are double-buffered (one main loop at a time cannot hide their loads behind the
///   other's). 7 stages of 32 KB (225 KB with the slack), one block per SM, persistent grids
///   only (one unit per block would leave the second consumer idle). Planned at the cooperative
///   128x128's rate, 2200 per SM, until measured, so that the model keeps its choices (ties go
///   to the configuration listed first); the autotuner times it wherever it is within reach.
///   Measured on an H100 (2026-12-06, GEMM_NOTES.md version 10): 7-16 % ahead of the
///   cooperative 128x128 with packed operands at short K, the tuner's choice on five sweep
///   shapes, no gain with P from registers.
/// - `wgmma_64x128_pp`, `wgmma_64x128_pp_c2` (version 14): the ping-pong tile halved along P,
///   each consumer computing whole 64 x 128 units (one m64n128 wgmma per k8 step, 64
///   accumulators per thread), 9 stages of 24 KB (217 KB with the slack). cuBLAS runs this tile
///   (in clusters of 8 and 16) where a partial last wave of 128-row tiles idles much of the
///   machine (2500x2500x500: 400 units of 128x128 on 132 SMs take four rounds for 3.03 waves of
///   work; 800 units of 64x128 take seven for 6.06). A unit moves 1.5 times the operand bytes
///   per flop of the 128 x 128 (more so without a cluster), so it is planned below that tile's
///   rate: 1900 per SM (an estimate); the autotuner times it. Measured on an H100 (2026-12-07,
///   GEMM_NOTES.md version 14): correct in every layout, but 7-13 % slower than the 128-row
///   ping-pong tile at 2500x2500x500 and 8 x 768^3 (the partial wave was not their loss); the
///   tuner's choice on four mid-size sweep shapes, 1-8 % ahead of the plans it took before.
/// - `wgmma_64x256_pp` (version 17): the ping-pong tile of 64 x 256 units (one m64n256 wgmma per
///   k8 step, 128 accumulators per thread, as each consumer of the cooperative 128x256), 5
///   stages of 40 KB (201 KB with the slack). cuBLAS runs this tile at 8 x 768^3 (64x256x32,
///   clusters of 3; ncu, version 15), where ours trails it most; half the rows of a 128x256 unit
///   also halve the last wave's granularity. Planned at the ping-pong 128x128's rate, 2200 per
///   SM; the autotuner times it. Measured on an H100 (2026-12-07, GEMM_NOTES.md version 17):
///   178.0 TFLOP/s at 8 x 768^3 against 159.1 for the 128x128_pp and the 128x256 (cuBLAS
///   195.4), the tuner's choice there; behind the 128x128_pp at 2500^2 x 500 and 3000x2000x300.
/// - `wgmma_128x192` (version 18): the cooperative tile with 192 columns (each consumer
///   warpgroup 64 x 192, one m64n192 wgmma per k8 step, 96 accumulators per thread), 5 stages of
///   40 KB (201 KB with the slack). Where N / 256 leaves much of a last wave idle and N / 192
///   does not (2048x3000x1000: 192 tiles of 128 x 256 on 132 SMs take two rounds for 1.45 waves
///   of work, 256 tiles of 128 x 192 take two for 1.94), at nearly the 128 x 256's operand bytes
///   per flop (1.07 times them; the 128 x 128's are 1.2 times). Planned at the 128 x 128's
///   rate, 2200 per SM, so that the model keeps its choices; the autotuner times it wherever it
///   is within reach. Measured on an H100 (2026-12-07, GEMM_NOTES.md version 18): 243.7 TFLOP/s
///   at 2048x3000x1000 against 214.6 for the 128x256, but 77-84 % of the 128x256 at 4096^3 and
///   8192^3; the tuner's choice on 10 of gemm_bench's 46 shapes in one run.
pub const WGMMA_CONFIGS: [TileConfig; 11] = [
    WGMMA_128X256,
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
        pingpong: false,
        cluster: 1,
        gflops_per_sm: 2200,
    },
    TileConfig {
        name: "wgmma_128x64",
        family: Family::Wgmma,
        bm: 128,
        bn: 64,
        bk: 32,
        wm: 64,
        wn: 64,
        stages: 8,
        occupancy: 1,
        pingpong: false,
        cluster: 1,
        gflops_per_sm: 1400,
    },
    TileConfig {
        name: "wgmma_128x128_2",
        family: Family::Wgmma,
        bm: 128,
        bn: 128,
        bk: 32,
        wm: 64,
        wn: 128,
        stages: 3,
        occupancy: 2,
        pingpong: false,
        cluster: 1,
        gflops_per_sm: 2200,
    },
    WGMMA_128X128_PP,
    TileConfig {
        name: "wgmma_128x256_c2",
        cluster: 2,
        ..WGMMA_128X256
    },
    TileConfig {
        name: "wgmma_128x128_pp_c2",
        cluster: 2,
        ..WGMMA_128X128_PP
    },
    WGMMA_64X128_PP,
    TileConfig {
        name: "wgmma_64x128_pp_c2",
        cluster: 2,
        ..WGMMA_64X128_PP
    },
    TileConfig {
        name: "wgmma_64x256_pp",
        family: Family::Wgmma,
        bm: 64,
        bn: 256,
        bk: 32,
        wm: 64,
        wn: 256,
        stages: 5,
        occupancy: 1,
        pingpong: true,
        cluster: 1,
        gflops_per_sm: 2200,
    },
    TileConfig {
        name: "wgmma_128x192",
        family: Family::Wgmma,
        bm: 128,
        bn: 192,
        bk: 32,
        wm: 64,
        wn: 192,
        stages: 5,
        occupancy: 1,
        pingpong: false,
        cluster: 1,
        gflops_per_sm: 2200,
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
    pingpong: false,
    cluster: 1,
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

/// Where the `wgmma` kernel reads its P operand (wgmma's register-side operand) from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Source {
    /// The operand pack's rounded, swizzled K-major tiles (wgmma reads P from shared memory).
    #[default]
    Packed,
    /// The user's K-major layout through a tensor map; fragments rounded in registers.
    TmaKMajor,
    /// The user's MN-major layout through a tensor map (the transpose happens in the fragment
    /// loads); fragments rounded in registers.
    TmaMnMajor,
    /// The user's K-major layout through a rounding (TFLOAT32) tensor map, whose swizzled boxes
    /// land in the packed tiles' layout: wgmma reads P from shared memory as for
    /// [`Source::Packed`], with neither a pack nor fragment loads (needs
    /// [`Paths::tma_rounding`]).
    TmaKMajorShared,
}

impl Source {
    /// The kernel template's code for it (`SRC_PACKED`, `SRC_TMA_K`, `SRC_TMA_MN`).
    pub fn code(self) -> u32 {
        match self {
            Source::Packed => 0,
            Source::TmaKMajor => 1,
            Source::TmaMnMajor => 2,
            Source::TmaKMajorShared => 3,
        }
    }

    /// Whether the kernel loads P's wgmma fragments into registers (and rounds them there).
    pub fn in_registers(self) -> bool {
        matches!(self, Source::TmaKMajor | Source::TmaMnMajor)
    }
}

/// How the `wgmma` kernel gets its operands: which user operand plays P (wgmma's register side,
/// 128 rows per block) and which Q (its shared-memory side, `bn` rows), and where each comes
/// from. `Operands::default()` packs both (`P = op(A)`, `Q = op(B)^T`), the only choice of
/// [`Family::Wgmma3`] and of the other families (where it means nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Operands {
    /// `P = op(B)^T, Q = op(A)` and the kernel stores the transpose of its tile.
    pub swap: bool,
    /// Where P comes from.
    pub p: Source,
    /// Q is read in place through a rounding (TFLOAT32) tensor map instead of being packed (Q
    /// must be K-major, and [`Paths::tma_rounding`] true).
    pub q_tma: bool,
}

impl Operands {
    /// Both operands packed.
    pub const PACKED: Operands = Operands {
        swap: false,
        p: Source::Packed,
        q_tma: false,
    };

    /// Short form for benches and notes: `""` when everything is packed, else e.g.
    /// `"swap P:mn Q:tma"`.
    pub fn label(&self) -> String {
        if *self == Operands::PACKED {
            return String::new();
        }
        let p = match self.p {
            Source::Packed => "P:pack",
            Source::TmaKMajor => "P:k",
            Source::TmaMnMajor => "P:mn",
            Source::TmaKMajorShared => "P:ks",
        };
        format!(
            "{}{p} Q:{}",
            if self.swap { "swap " } else { "" },
            if self.q_tma { "tma" } else { "pack" }
        )
    }
}

/// The operand layouts the `wgmma` kernels of `family` can use for `p` under `paths`, those that
/// pack the least first; [`Operands::PACKED`] is always the last choice, and the only one of
/// [`Family::Wgmma3`] (3xTF32 packs both operands into big and small parts) and of the other
/// families.
///
/// [`Family::Wgmma`] (TF32): P through a tensor map in either major order (rounded in registers)
/// or, when it is K-major and the device's copies round ([`Paths::tma_rounding`]), through a
/// rounding tensor map straight to wgmma ([`Source::TmaKMajorShared`]), or packed; Q through a
/// rounding tensor map under the same conditions, else Q packed. With aligned operands a NN
/// product packs nothing (swapped: P = the N-major B, Q = the K-major A), NT and TT nothing
/// either, TN one operand.
pub fn operand_choices(family: Family, p: &Problem, paths: &Paths) -> Vec<Operands> {
    let mut v = Vec::new();
    if family == Family::Wgmma && paths.tma {
        let a_src = if p.trans_a {
            Source::TmaMnMajor
        } else {
            Source::TmaKMajor
        };
        // Q tensor-mapped: Q must be K-major (op(B)^T when B is stored transposed, op(A) when A
        // is not), and the device's tensor copies must round.
        let no_swap_q = paths.tma_rounding && p.b_mappable && p.trans_b;
        // A K-major through rounding copies: Q when swapped, or P read by wgmma from shared
        // memory.
        let a_rounded = paths.tma_rounding && p.a_mappable && !p.trans_a;
        let swap = p.b_mappable && !p.trans_b;
        let mut add = |when: bool, swap: bool, src: Source, q_tma: bool| {
            if when {
                v.push(Operands {
                    swap,
                    p: src,
                    q_tma,
                });
            }
        };
        add(p.a_mappable && no_swap_q, false, a_src, true);
        add(a_rounded && no_swap_q, false, Source::TmaKMajorShared, true);
        add(swap && a_rounded, true, Source::TmaMnMajor, true);
        // P packed beside a tensor-mapped Q where P cannot come straight from its copies (A
        // MN-major or unaligned): one operand packed, both read by wgmma from shared memory.
        add(!a_rounded && no_swap_q, false, Source::Packed, true);
        add(p.a_mappable, false, a_src, false);
        add(a_rounded, false, Source::TmaKMajorShared, false);
        add(swap, true, Source::TmaMnMajor, false);
    }
    v.push(Operands::PACKED);
    v
}

/// The operand layouts configuration `config` can use for `p` under `paths`: those of its family
/// ([`operand_choices`]), except that a `wgmma` configuration of several blocks per SM
/// (`wgmma_128x128_2`) takes only those with P in shared memory (packed, or read straight from its
/// tensor copies): with P from registers its kernel does not fit two blocks' 80 registers per
/// thread without spilling and serialising its wgmma instructions (ptxas C7512), while those do.
pub fn config_operand_choices(config: &TileConfig, p: &Problem, paths: &Paths) -> Vec<Operands> {
    let mut v = operand_choices(config.family, p, paths);
    if config.wgmma_of_several_blocks() {
        v.retain(|o| !o.p.in_registers());
    }
    v
}

/// The shape and layout facts of one product that the planner uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// A's storage meets the tensor map rules ([`RawGemm::a_tensor_mappable`]).
    pub a_mappable: bool,
    /// B's storage meets the tensor map rules ([`RawGemm::b_tensor_mappable`]).
    pub b_mappable: bool,
    /// A's rows start on 32-byte sectors ([`RawGemm::a_sector_aligned`]).
    pub a_sectors: bool,
    /// B's rows start on 32-byte sectors ([`RawGemm::b_sector_aligned`]).
    pub b_sectors: bool,
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
            b_mappable: g.b_tensor_mappable(),
            a_sectors: g.a_sector_aligned(),
            b_sectors: g.b_sector_aligned(),
        }
    }

    /// A contiguous, untransposed, aligned problem of this shape (planner tests and benches):
    /// its rows start on 32-byte sectors where their length is a multiple of 8 elements (K for
    /// A, N for B).
    pub fn shape(m: u32, n: u32, k: u32, batch: u32) -> Problem {
        Problem {
            m,
            n,
            k,
            batch,
            trans_a: false,
            trans_b: false,
            a_mappable: true,
            b_mappable: true,
            a_sectors: k.is_multiple_of(8),
            b_sectors: n.is_multiple_of(8),
        }
    }

    /// Whether a user operand that `ops` reads through a tensor map has rows that straddle
    /// 32-byte sectors.
    pub fn mapped_rows_straddle(&self, ops: &Operands) -> bool {
        // P is op(A) (swapped: op(B)^T), Q the other.
        let (p_sectors, q_sectors) = if ops.swap {
            (self.b_sectors, self.a_sectors)
        } else {
            (self.a_sectors, self.b_sectors)
        };
        (ops.p != Source::Packed && !p_sectors) || (ops.q_tma && !q_sectors)
    }

    /// Rows of the `wgmma` kernel's P and Q operands under `ops`: `(M, N)`, swapped `(N, M)`.
    pub fn pq_rows(&self, ops: &Operands) -> (u32, u32) {
        if ops.swap {
            (self.n, self.m)
        } else {
            (self.m, self.n)
        }
    }
}

/// How one GEMM is run: a configuration, a split of K, and for the `wgmma` kernels the operand
/// layout and whether the grid is persistent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The tile configuration.
    pub config: TileConfig,
    /// Number of K slices (1: no split-K; the slices are summed by a deterministic reduction).
    pub splits: u32,
    /// K per slice, a multiple of the configuration's `bk` (K itself when `splits == 1`).
    pub k_per_split: u32,
    /// The `wgmma` kernels' operand roles and sources (one of [`operand_choices`]; packed for
    /// the other families).
    pub operands: Operands,
    /// The `wgmma` kernels' grid: 0 launches one block per work unit (tile x batch entry x K
    /// slice); `n > 0` at most `n` blocks, each walking the units `n` apart (persistent: the
    /// planner uses one per SM above one wave; tests use small `n` to walk many units per block).
    pub max_blocks: u32,
    /// TF32 `wgmma` on a persistent grid without split: the last, partial wave's tiles cut along
    /// K into pieces ([`tail_pieces`]) summed by the last piece to finish (a stream-K tail).
    pub tail: bool,
    /// The planner's estimate in microseconds (for benches and notes).
    pub estimate_us: f64,
}

/// Split-K factors the planner considers (up to 128: a 128x128 output with K = 65536 makes one
/// tile, and only a split fills the SMs).
pub const SPLIT_CANDIDATES: [u32; 14] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128];

/// Smallest K per slice worth a split (shorter slices spend their time filling the pipeline).
pub const MIN_K_PER_SPLIT: u32 = 256;

/// Effective bandwidth of the split-K reduction (bytes/s). Version 3 measured about 1 TB/s on
/// the H200 with a scalar reduction (a 4096^2 split in two cost 0.28 ms more than no split for
/// 268 MB moved); version 5's reduces four columns per thread with 16-byte loads, four slices in
/// flight: predicted 2 TB/s (not measured yet).
const BANDWIDTH: f64 = 3.0e12;
/// Launch and tail cost of the extra reduction kernel (seconds).
const REDUCE_LAUNCH: f64 = 2.0e-6;
/// The reduction's latency per K slice (seconds): each thread sums its slices four at a time, so
/// a small output with many slices (few threads, a long serial chain) is latency-bound. Version
/// 6's run (`gemm_bench --explore`, 128x128x65536): 64 more slices cost about 11 us beyond the
/// kernel time they saved; 1024^3 with two slices about 5 us in all.
const REDUCE_PER_SLICE: f64 = 0.1e-6;
/// Effective bandwidth of the `wgmma` operand pack (bytes read plus bytes written per second).
pub const PACK_BANDWIDTH: f64 = 2.5e12;
/// Fixed cost of the pack launch and allocation (seconds). Set above the ~2 us the H200 shows
/// (1024^3: 8.7 us for 16.8 MB) on purpose: the model overestimates the time of small mma.sync
/// tiles in a partial wave (tf32_64x64 at 1024^3: modelled 37 us, measured 27 us), and with 8 us
/// the planner keeps mma.sync where it measured faster (1024^3: 80 vs 67 TFLOP/s).
const PACK_LAUNCH: f64 = 8.0e-6;
/// Fixed cost of a `wgmma` kernel (seconds): barrier set-up, tensor-map fetch, the first loads
/// of a 384-thread block. Version 4's run: wgmma_128x128 at 1024^3 (one wave of 64 blocks) took
/// about 4 us more than its rate and the pack explain; split here into this and one fill.
const WGMMA_LAUNCH: f64 = 5.0e-6;
/// A `wgmma` block's pipeline fill and epilogue (seconds), paid once per wave when each block
/// runs one tile, once in all when the grid is persistent.
const WGMMA_FILL: f64 = 1.5e-6;
/// Share of its rate a `wgmma` plan keeps when it reads an operand whose rows straddle 32-byte
/// sectors through a tensor map: version 15's H100 run (`--configs`, tuner off) measured the
/// tensor-mapped plans at 2500x2500x500 (2000- and 10000-byte rows) at 0.74-0.85 of their rate at
/// 2504x2504x504 (the same tile counts, 32-byte aligned rows), the packed plans at 0.93.
const STRADDLE_RATE: f64 = 0.85;
/// GFLOP/s per SM of `wgmma_128x128` when wgmma reads P from shared memory (packed, as for odd
/// leading dimensions, or [`Source::TmaKMajorShared`]):
/// version 5 planned 2700 and measured that tile ahead of 128x256 on the packed odd sweep shapes
/// (version 6's run, planned at 2200 everywhere, moved four of them to 128x256 and measured them
/// 3-24 % slower); the operands read through tensor maps run it at about 2200 (the P:mn boxes,
/// `gemm_bench --explore`).
const WGMMA_128X128_PACKED_GFLOPS: u32 = 2700;
/// The rate of the `mma.sync` and SIMT kernels on operands that are not 16-byte aligned,
/// relative to their aligned rate ([`estimate`]).
const UNALIGNED_RATE: f64 = 0.3;
/// A plan of another family must be this much cheaper to replace the family a precision runs
/// by default (the model's uncertainty).
const SWITCH_MARGIN: f64 = 0.97;

/// Bytes the `wgmma` pack moves for one product: the operands it packs read once, their padded
/// packed tiles (times the parts) written once; operands read through tensor maps are not
/// packed at all.
pub fn pack_bytes(config: &TileConfig, p: &Problem, ops: &Operands) -> f64 {
    let kp = p.k.div_ceil(config.bk) as f64 * config.bk as f64;
    let (pr, qr) = p.pq_rows(ops);
    let parts = config.family.parts() as f64;
    let packed = |rows: u32, tile: u32| {
        rows as f64 * p.k as f64 + parts * (rows.div_ceil(tile) * tile) as f64 * kp
    };
    let a = if ops.p == Source::Packed {
        packed(pr, config.bm)
    } else {
        0.0
    };
    let b = if ops.q_tma {
        0.0
    } else {
        packed(qr, config.bn)
    };
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

/// What one slot of a tail tile costs, in the tile's k tiles: each piece writes its partial
/// tile to the workspace, and the piece that finishes last reads every piece's back (an SM moves
/// a 128 x 128 f32 tile through L2 in about the time its tensor cores take for one k tile of it:
/// 64 KB at ~64 B per cycle, against 128 x 128 x 32 multiply-adds at 512 per cycle).
const TAIL_SLOT_KT: f64 = 1.0;

/// A tail of `s` pieces of a unit of `nkt` k tiles, in k tiles: the longest piece, then its own
/// write and the last piece's reads of all `s`.
fn tail_cost_kt(s: u32, nkt: u32) -> f64 {
    nkt.div_ceil(s) as f64 + TAIL_SLOT_KT * (s + 1) as f64
}

/// Pieces each tile of the last, partial wave is cut into when `units` work units of `nkt` k
/// tiles run on a persistent grid of `grid` units (clusters of blocks), or 0 when the tiles stay
/// whole: no partial wave (`units` a multiple of `grid`, or at most one wave), or no cut cheaper
/// than a whole tile. The pieces of the `units % grid` tail tiles take one block each (at most
/// `grid` in all) and at least two k tiles each; among those counts the cheapest by
/// [`tail_cost_kt`]. The kernel's `tailFrom` is `units - units % grid`.
pub fn tail_pieces(units: u64, grid: u64, nkt: u32) -> u32 {
    if grid == 0 || units <= grid || units.is_multiple_of(grid) {
        return 0;
    }
    let most = (grid / (units % grid)).min(nkt as u64 / 2) as u32;
    let mut best = (nkt as f64, 0);
    for s in 2..=most {
        let c = tail_cost_kt(s, nkt);
        if c < best.0 {
            best = (c, s);
        }
    }
    best.1
}

/// The tail pieces of a plan's kernel for `p` on `dev` ([`tail_pieces`] of its units on its
/// persistent grid), 0 where the plan cannot have a tail: not the TF32 `wgmma` family, a split,
/// or one block per unit.
pub fn plan_tail_pieces(
    config: &TileConfig,
    p: &Problem,
    splits: u32,
    ops: &Operands,
    dev: &DeviceAttributes,
) -> u32 {
    let grid = persistent_blocks(config, p, splits, ops, dev);
    if config.family != Family::Wgmma || splits != 1 || grid == 0 {
        return 0;
    }
    let cluster = config.cluster.max(1) as u64;
    let units = config.blocks_per_slice(p, ops) / cluster * p.batch as u64;
    tail_pieces(units, grid as u64 / cluster, p.k.div_ceil(config.bk))
}

/// The planner's time estimate (seconds) for one candidate on `dev`; see the module docs.
/// Infinite when the configuration does not fit the device.
pub fn estimate(
    config: &TileConfig,
    p: &Problem,
    splits: u32,
    ops: &Operands,
    dev: &DeviceAttributes,
) -> f64 {
    estimate_with_tail(config, p, splits, ops, dev, false)
}

/// [`estimate`] for the plan with a tail (`tail`: [`Plan::tail`]): the last wave costs
/// [`tail_cost_kt`] of its pieces instead of whole tiles; infinite where the plan cannot have
/// one ([`plan_tail_pieces`] 0).
pub fn estimate_with_tail(
    config: &TileConfig,
    p: &Problem,
    splits: u32,
    ops: &Operands,
    dev: &DeviceAttributes,
    tail: bool,
) -> f64 {
    let occupancy = config.occupancy_on(dev, p.trans_a, p.trans_b);
    if occupancy == 0 || (config.family.is_wgmma() && occupancy < config.occupancy) {
        // A `wgmma` kernel built for several blocks per SM exists for their overlap; with fewer
        // it is a shallower copy of its one-block sibling.
        return f64::INFINITY;
    }
    let (splits, per) = normalize_split(config, p.k, splits);
    if config.pingpong && persistent_blocks(config, p, splits, ops, dev) == 0 {
        // One unit per block leaves a ping-pong kernel's second consumer idle and nothing to
        // overlap: its sibling cooperative tile does that better.
        return f64::INFINITY;
    }
    let tiles = config.blocks_per_slice(p, ops) * p.batch as u64;
    let blocks = tiles * splits as u64;
    let sms = dev.multiprocessor_count.max(1) as u64;
    let slots = sms * occupancy as u64;
    let mut waves = blocks.div_ceil(slots) as f64;
    if tail {
        let pieces = plan_tail_pieces(config, p, splits, ops, dev);
        if pieces < 2 {
            return f64::INFINITY;
        }
        let nkt = p.k.div_ceil(config.bk);
        waves = (blocks / slots) as f64 + tail_cost_kt(pieces, nkt) / nkt as f64;
    }
    let tile_flops = 2.0 * config.bm as f64 * config.bn as f64 * per.max(1) as f64;
    let per_sm = if config.family == Family::Wgmma
        && (config.bm, config.bn) == (128, 128)
        && !ops.p.in_registers()
    {
        // P read by wgmma from shared memory (packed, or its K-major boxes as they land): the
        // 128x128 tile keeps its rate.
        WGMMA_128X128_PACKED_GFLOPS
    } else {
        config.gflops_per_sm
    };
    let mut rate = per_sm as f64 * 1e9 * occupancy as f64 / config.occupancy as f64;
    if config.family == Family::Wgmma && p.mapped_rows_straddle(ops) {
        rate *= STRADDLE_RATE;
    }
    let aligned = p.a_mappable && p.b_mappable;
    if !config.family.is_wgmma() && !aligned {
        // Operands that are not 16-byte aligned (an odd leading dimension) take the 4-byte
        // loads of the mma.sync and SIMT kernels: version 5's run measured the forced mma.sync
        // plans of the odd sweep shapes at 18-36 TFLOP/s, a quarter of their aligned rate (the
        // `wgmma` families pack such operands and keep their rate).
        rate *= UNALIGNED_RATE;
    }
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
        t += REDUCE_LAUNCH + bytes / BANDWIDTH + splits as f64 * REDUCE_PER_SLICE;
    }
    if config.family.is_wgmma() {
        let packed = pack_bytes(config, p, ops);
        if packed > 0.0 {
            t += PACK_LAUNCH + packed / PACK_BANDWIDTH;
        }
        // Start-up, and a pipeline fill and epilogue per wave that a persistent grid hides
        // behind the next unit's loads (all but the first).
        let fills = if persistent_blocks(config, p, splits, ops, dev) > 0 {
            1.0
        } else {
            waves
        };
        t += WGMMA_LAUNCH + fills * WGMMA_FILL;
    }
    t
}

/// The grid limit ([`Plan::max_blocks`]) of a plan: for the `wgmma` kernels, one block per SM
/// (persistent) when its work units (tiles x batch x splits) are more than one wave on `dev`, so
/// that each SM's producer runs on into its next tile while the consumers store the last one;
/// else 0 (one block per unit). Version 5's run: the persistent TF32 grid as fast or faster
/// everywhere (+0.5-2 % at 4096^3-12288^2, +9 % at 4096x4096x256, +7-22 % on batched small
/// products, against one block per unit in the same run); the persistent 3xTF32 grid on six
/// sweep shapes -1 % to +8 % against version 4's one block per unit.
pub fn persistent_blocks(
    config: &TileConfig,
    p: &Problem,
    splits: u32,
    ops: &Operands,
    dev: &DeviceAttributes,
) -> u32 {
    let units = config.blocks_per_slice(p, ops) * p.batch as u64 * splits as u64;
    let cluster = config.cluster.max(1) as u64;
    // Whole clusters: a grid is a multiple of the cluster size.
    let slots = dev.multiprocessor_count.max(1) as u64
        * config.occupancy_on(dev, p.trans_a, p.trans_b).max(1) as u64
        / cluster
        * cluster;
    if config.family.is_wgmma() && units > slots && slots > 0 {
        slots.min(u32::MAX as u64) as u32
    } else {
        0
    }
}

/// The cheapest plan of `family` for `p` on `dev` with the operand layouts `paths` allows (see
/// the module docs for the model), or `None` when no configuration of the family fits the
/// device.
pub fn plan(family: Family, p: &Problem, dev: &DeviceAttributes, paths: &Paths) -> Option<Plan> {
    let mut best: Option<Plan> = None;
    for config in configs(family) {
        let choices = config_operand_choices(config, p, paths);
        for &want in &SPLIT_CANDIDATES {
            if want > 1 && (p.k / want < MIN_K_PER_SPLIT || p.batch > 1) {
                continue;
            }
            let (splits, per) = normalize_split(config, p.k, want);
            if want > 1 && splits != want {
                continue;
            }
            for ops in &choices {
                let t = estimate(config, p, splits, ops, dev);
                if !t.is_finite() {
                    continue;
                }
                // Strictly better by 3 %: ties go to the larger tile / fewer splits / the layout
                // that packs less (listed first).
                if best.is_none_or(|b| t < b.estimate_us * 1e-6 * SWITCH_MARGIN) {
                    best = Some(Plan {
                        config: *config,
                        splits,
                        k_per_split: per,
                        operands: *ops,
                        max_blocks: persistent_blocks(config, p, splits, ops, dev),
                        tail: false,
                        estimate_us: t * 1e6,
                    });
                }
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
/// `paths.tma == false` packs every `wgmma` operand instead of reading it through a tensor map.
pub fn choose(
    precision: Precision,
    p: &Problem,
    dev: &DeviceAttributes,
    paths: &Paths,
) -> Result<Plan> {
    let hopper = dev.supports_wgmma();
    let simt = || plan(Family::Sgemm, p, dev, paths).ok_or_else(|| no_plan("FP32", dev));
    let x3 = || plan(Family::Wgmma3, p, dev, paths).ok_or_else(|| no_plan("3xTF32", dev));
    match precision {
        Precision::Tf32 => {
            let mma = || plan(Family::Tf32, p, dev, paths);
            let wg = || plan(Family::Wgmma, p, dev, paths);
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
                cheaper(
                    plan(Family::Sgemm, p, dev, paths),
                    plan(Family::Wgmma3, p, dev, paths),
                )
                .ok_or_else(|| no_plan("FP32", dev))
            }
            Fp32Path::Auto => simt(),
        },
        Precision::Tf32x3 if hopper => x3(),
        Precision::Tf32x3 => simt(),
    }
}

/// The kernel families [`choose`] may use for `precision` on `dev` under `paths` (the same rules:
/// the `wgmma` families only on compute capability 9.0, 3xTF32 for [`Precision::Fp32`] only where
/// [`fp32_prefers_tf32x3`]; a forced Hopper path on another device is the same error).
pub fn families(
    precision: Precision,
    p: &Problem,
    dev: &DeviceAttributes,
    paths: &Paths,
) -> Result<Vec<Family>> {
    let hopper = dev.supports_wgmma();
    Ok(match precision {
        Precision::Tf32 => match paths.tf32 {
            Tf32Path::Mma => vec![Family::Tf32],
            Tf32Path::Wgmma if !hopper => {
                return Err(wgmma_unsupported(dev, super::path::TF32_PATH_ENV))
            }
            Tf32Path::Wgmma => vec![Family::Wgmma],
            Tf32Path::Auto if hopper => vec![Family::Tf32, Family::Wgmma],
            Tf32Path::Auto => vec![Family::Tf32],
        },
        Precision::Fp32 => match paths.fp32 {
            Fp32Path::Simt => vec![Family::Sgemm],
            Fp32Path::Tf32x3 if !hopper => {
                return Err(wgmma_unsupported(dev, super::path::FP32_PATH_ENV))
            }
            Fp32Path::Tf32x3 => vec![Family::Wgmma3],
            Fp32Path::Auto if hopper && fp32_prefers_tf32x3(dev.compute_capability, p.k) => {
                vec![Family::Sgemm, Family::Wgmma3]
            }
            Fp32Path::Auto => vec![Family::Sgemm],
        },
        Precision::Tf32x3 if hopper => vec![Family::Wgmma3],
        Precision::Tf32x3 => vec![Family::Sgemm],
    })
}

/// Every plan the planner weighs for `precision` (each family of [`families`], configuration
/// that fits `dev`, split factor and operand layout that [`plan`] considers, with the grid
/// [`persistent_blocks`] gives), with the model's estimate, cheapest first (ties in the order
/// [`plan`] meets them). The plan space the autotuner ([`super::tune`]) and `gemm_bench` choose
/// from; [`choose`]'s plan is one of them.
pub fn enumerate(
    precision: Precision,
    p: &Problem,
    dev: &DeviceAttributes,
    paths: &Paths,
) -> Result<Vec<Plan>> {
    let mut v = Vec::new();
    for family in families(precision, p, dev, paths)? {
        for config in configs(family) {
            let choices = config_operand_choices(config, p, paths);
            for &want in &SPLIT_CANDIDATES {
                if want > 1 && (p.k / want < MIN_K_PER_SPLIT || p.batch > 1) {
                    continue;
                }
                let (splits, per) = normalize_split(config, p.k, want);
                if want > 1 && splits != want {
                    continue;
                }
                for ops in &choices {
                    for tail in [false, true] {
                        if tail && !paths.tail {
                            continue;
                        }
                        let t = estimate_with_tail(config, p, splits, ops, dev, tail);
                        if t.is_finite() {
                            v.push(Plan {
                                config: *config,
                                splits,
                                k_per_split: per,
                                operands: *ops,
                                max_blocks: persistent_blocks(config, p, splits, ops, dev),
                                tail,
                                estimate_us: t * 1e6,
                            });
                        }
                    }
                }
            }
        }
    }
    v.sort_by(|a, b| a.estimate_us.total_cmp(&b.estimate_us));
    Ok(v)
}

/// A plan for a fixed configuration and split factor (benches and tests that sweep them), with
/// the operand layout that packs the least under [`Paths::default`] (the first of
/// [`config_operand_choices`]) and one block per work unit; [`Plan::with`] changes either.
pub fn fixed_plan(config: TileConfig, p: &Problem, splits: u32) -> Plan {
    let (splits, per) = normalize_split(&config, p.k, splits);
    Plan {
        config,
        splits,
        k_per_split: per,
        operands: config_operand_choices(&config, p, &Paths::default())[0],
        max_blocks: 0,
        tail: false,
        estimate_us: f64::NAN,
    }
}

impl Plan {
    /// This plan with other operands and grid limit (tests and benches that force them).
    pub fn with(self, operands: Operands, max_blocks: u32) -> Plan {
        Plan {
            operands,
            max_blocks,
            ..self
        }
    }

    /// This plan with or without a tail ([`Plan::tail`]; tests and benches that force it).
    pub fn with_tail(self, tail: bool) -> Plan {
        Plan { tail, ..self }
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

    /// The tiles that write their output through shared memory are those whose stages leave
    /// the staging buffers room in 227 KB, and the kernel compiles the same bound.
    #[test]
    fn output_staging_is_compiled_where_its_buffers_fit() {
        let staged: Vec<&str> = all_configs()
            .filter(|c| c.stages_output())
            .map(|c| c.name)
            .collect();
        assert_eq!(
            staged,
            [
                "wgmma_128x256",
                "wgmma_128x128",
                "wgmma_128x64",
                "wgmma_128x256_c2"
            ]
        );
        for c in all_configs() {
            let fits = c.smem_bytes(false, false) + OUTPUT_STAGING_BYTES <= SM90_SMEM_PER_BLOCK;
            assert_eq!(
                c.stages_output(),
                c.family == Family::Wgmma && c.occupancy == 1 && fits,
                "{}",
                c.name
            );
        }
        // gemm_wgmma.cu's C_TMA: the same buffers (2 consumers x 2 chunks x 2 boxes of 32 x 32
        // floats) against the same bound.
        let src = include_str!("../../kernels/gemm_wgmma.cu");
        assert!(src.contains("C_STAGE_BYTES = 2 * 2 * C_CHUNK_BYTES"));
        assert!(src.contains("C_BOX_BYTES = 32 * 32 * 4"));
        assert!(src.contains("+ 1024 + C_STAGE_BYTES <= 232448"));
        assert_eq!(OUTPUT_STAGING_BYTES, 2 * 2 * 2 * 32 * 32 * 4);
    }

    #[test]
    fn big_square_problems_take_the_big_tile_without_split() {
        let d = h200();
        for n in [4096, 8192] {
            let p = plan(Family::Tf32, &sq(n), &d, &auto()).unwrap();
            assert_eq!(p.config.name, "tf32_128x256", "n={n}");
            assert_eq!(p.splits, 1);
            let p = plan(Family::Sgemm, &sq(n), &d, &auto()).unwrap();
            assert_eq!(p.config.name, "sgemm_128x256", "n={n}");
            assert_eq!(p.splits, 1);
        }
    }

    /// The choices version 6's run measured best (`gemm_bench --explore`, every configuration x
    /// split x grid beside cuBLAS on the H200): the 128x64 `wgmma` tile for long-K and skinny
    /// small outputs, 128x256 for a mid-size TT product, the skinny SIMT tiles for FP32.
    #[test]
    fn measured_best_plans_are_chosen_on_the_h200() {
        let d = h200();
        let tf32 = |p: &Problem| choose(Precision::Tf32, p, &d, &auto()).unwrap();
        let p = tf32(&Problem::shape(128, 128, 65536, 1));
        assert_eq!((p.config.name, p.splits), ("wgmma_128x64", 64), "{p:?}");
        let p = tf32(&Problem::shape(16, 4096, 4096, 1));
        assert_eq!(p.config.name, "wgmma_128x64", "{p:?}");
        assert!((3..=8).contains(&p.splits), "{p:?}");
        let p = tf32(&Problem::shape(256, 256, 8192, 1));
        assert_eq!(p.config.name, "wgmma_128x64", "{p:?}");
        let p = tf32(&Problem::shape(64, 8192, 8192, 1));
        assert_eq!(p.config.name, "wgmma_128x64", "{p:?}");
        let p = tf32(&Problem::shape(384, 384, 8192, 1));
        assert_eq!((p.config.name, p.splits), ("wgmma_128x128", 12), "{p:?}");
        let tt = Problem {
            trans_a: true,
            trans_b: true,
            ..Problem::shape(2048, 3000, 1000, 1)
        };
        let p = tf32(&tt);
        assert_eq!(p.config.name, "wgmma_128x256", "{p:?}");
        // 1024^3: 128 blocks of 128x64 (measured 104.5 TFLOP/s beside 106.0 for 128x128 with two
        // slices and 96.5 for 64 blocks of 128x128).
        let p = tf32(&sq(1024));
        assert_eq!((p.config.name, p.splits), ("wgmma_128x64", 1), "{p:?}");
        let fp32 = |m, n, k| choose(Precision::Fp32, &Problem::shape(m, n, k, 1), &d, &auto());
        assert_eq!(fp32(64, 8192, 8192).unwrap().config.name, "sgemm_64x256");
        assert_eq!(fp32(8192, 64, 8192).unwrap().config.name, "sgemm_256x64");
        assert_eq!(fp32(16, 4096, 4096).unwrap().config.name, "sgemm_64x256");
        // 500x300x16384: 3xTF32 with 32 slices, persistent (measured 42.0 TFLOP/s beside 29.5 for
        // sgemm_256x64 with 24 slices).
        let p = fp32(500, 300, 16384).unwrap();
        assert_eq!((p.config.family, p.splits), (Family::Wgmma3, 32), "{p:?}");
        // Odd leading dimensions: the mma.sync kernels' 4-byte loads run at a fraction of their
        // rate, so the packed wgmma kernel stays the TF32 choice.
        let odd = Problem {
            a_mappable: false,
            b_mappable: false,
            ..Problem::shape(1023, 1025, 1027, 1)
        };
        assert_eq!(tf32(&odd).config.name, "wgmma_128x128");
        for (m, n, k) in [(2039, 2053, 1021), (4093, 4099, 997), (777, 1555, 2333)] {
            let odd = Problem {
                a_mappable: false,
                b_mappable: false,
                ..Problem::shape(m, n, k, 1)
            };
            let p = tf32(&odd);
            assert_eq!(
                (p.config.name, p.splits),
                ("wgmma_128x128", 1),
                "{m}x{n}x{k}: {p:?}"
            );
        }
    }

    #[test]
    fn small_problems_take_smaller_tiles_or_split_k() {
        let d = h200();
        // 1024^2 makes 32 blocks of 128x256 for 132 SMs: the planner must not choose that.
        let p = plan(Family::Tf32, &sq(1024), &d, &auto()).unwrap();
        assert!(p.config.name != "tf32_128x256" || p.splits > 1, "{p:?}");
        // Skinny: M*N tiny, K huge -> split-K.
        let p = plan(
            Family::Tf32,
            &Problem::shape(128, 128, 65536, 1),
            &d,
            &auto(),
        )
        .unwrap();
        assert!(p.splits >= 4, "{p:?}");
        let p = plan(
            Family::Sgemm,
            &Problem::shape(64, 64, 100_000, 1),
            &d,
            &auto(),
        )
        .unwrap();
        assert!(p.splits >= 4, "{p:?}");
        // A few hundred square with a long K: split-K in every family.
        for f in [Family::Sgemm, Family::Tf32, Family::Wgmma, Family::Wgmma3] {
            let p = plan(f, &Problem::shape(384, 384, 8192, 1), &d, &auto()).unwrap();
            assert!(p.splits >= 4, "{f:?}: {p:?}");
        }
        // Big M*N, small K -> never split.
        let p = plan(
            Family::Tf32,
            &Problem::shape(4096, 4096, 256, 1),
            &d,
            &auto(),
        )
        .unwrap();
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
            // Nothing packed: P = the N-major B (registers), Q = A through a rounding map.
            assert_eq!(
                p.operands,
                Operands {
                    swap: true,
                    p: Source::TmaMnMajor,
                    q_tma: true
                },
                "n={n}"
            );
            assert_eq!(
                p.max_blocks, 132,
                "n={n}: more than one wave runs persistent"
            );
            let p = choose(Precision::Fp32, &sq(n), &d, &auto()).unwrap();
            assert_eq!(p.config.family, Family::Wgmma3, "n={n}: {p:?}");
            // 3xTF32 packs both operands; persistent above one wave.
            assert_eq!(
                (p.operands, p.max_blocks),
                (Operands::PACKED, 132),
                "n={n}: {p:?}"
            );
        }
        // Every layout with aligned operands: NT and TT pack nothing, TN one operand.
        for (ta, tb, packs) in [(false, true, 0), (true, true, 0), (true, false, 1)] {
            let t = Problem {
                trans_a: ta,
                trans_b: tb,
                ..sq(4096)
            };
            let p = choose(Precision::Tf32, &t, &d, &auto()).unwrap();
            let o = p.operands;
            let packed = (o.p == Source::Packed) as u32 + (!o.q_tma) as u32;
            assert!(
                p.config.family == Family::Wgmma && packed == packs,
                "ta {ta} tb {tb}: {p:?}"
            );
            assert!(pack_bytes(&p.config, &t, &o) < 4.0 * 4096.0 * 4096.0 * 2.1);
        }
        // A misaligned A (not mappable): packed, B still in place as P.
        let t = Problem {
            a_mappable: false,
            ..sq(4096)
        };
        let p = choose(Precision::Tf32, &t, &d, &auto()).unwrap();
        assert_eq!(
            p.operands,
            Operands {
                swap: true,
                p: Source::TmaMnMajor,
                q_tma: false
            },
            "{p:?}"
        );
        // A device whose tensor copies do not round: Q is packed.
        let no_round = Paths {
            tma_rounding: false,
            ..auto()
        };
        let p = choose(Precision::Tf32, &sq(4096), &d, &no_round).unwrap();
        assert!(!p.operands.q_tma && p.operands.p != Source::Packed, "{p:?}");
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
            ..auto()
        };
        let no_tma = Paths {
            tma: false,
            ..auto()
        };
        let p = choose(Precision::Tf32, &sq(4096), &d, &no_tma).unwrap();
        assert!(
            p.config.family == Family::Wgmma && p.operands == Operands::PACKED,
            "{p:?}"
        );
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
        let p = plan(
            Family::Sgemm,
            &Problem::shape(64, 64, 4096, 512),
            &h200(),
            &auto(),
        )
        .unwrap();
        assert_eq!(p.splits, 1);
    }

    #[test]
    fn pack_bytes_count_parts_and_skip_the_mapped_operands() {
        let w = WGMMA_CONFIGS[0];
        let p = Problem::shape(128, 256, 32, 1);
        // A: read 128*32 + write 128*32; B: read 256*32 + write 256*32 (floats).
        let packed = Operands::PACKED;
        assert_eq!(
            pack_bytes(&w, &p, &packed),
            4.0 * 2.0 * (128.0 + 256.0) * 32.0
        );
        let p_mapped = Operands {
            p: Source::TmaKMajor,
            ..packed
        };
        assert_eq!(pack_bytes(&w, &p, &p_mapped), 4.0 * 2.0 * 256.0 * 32.0);
        let none = Operands {
            q_tma: true,
            ..p_mapped
        };
        assert_eq!(pack_bytes(&w, &p, &none), 0.0);
        // Swapped: Q = op(A), 128 rows padded to BN = 256.
        let swapped = Operands {
            swap: true,
            p: Source::TmaMnMajor,
            q_tma: false,
        };
        assert_eq!(pack_bytes(&w, &p, &swapped), 4.0 * (128.0 + 256.0) * 32.0);
        let x = WGMMA3_CONFIGS[0];
        let p = Problem::shape(128, 128, 32, 1);
        assert_eq!(pack_bytes(&x, &p, &packed), 4.0 * 3.0 * 256.0 * 32.0);
    }

    /// P read by wgmma straight from its copies is priced as the packed tile without P's pack:
    /// the same rate (the 128x128 tile's packed rate included), fewer bytes packed, and with a
    /// mapped Q no pack at all.
    #[test]
    fn p_from_its_copies_is_priced_as_packed_without_the_pack() {
        let d = h200();
        let p = Problem::shape(2048, 2048, 512, 1);
        let ks = |q_tma| Operands {
            swap: false,
            p: Source::TmaKMajorShared,
            q_tma,
        };
        for c in WGMMA_CONFIGS.iter().filter(|c| !c.pingpong) {
            let packed = estimate(c, &p, 1, &Operands::PACKED, &d);
            let ks_pack = estimate(c, &p, 1, &ks(false), &d);
            let ks_tma = estimate(c, &p, 1, &ks(true), &d);
            assert!(ks_tma < ks_pack && ks_pack < packed, "{}", c.name);
            assert!(pack_bytes(c, &p, &ks(false)) < pack_bytes(c, &p, &Operands::PACKED));
            assert_eq!(pack_bytes(c, &p, &ks(true)), 0.0);
        }
        // The 128x128 tile: the packed rate, above the rate of P from registers.
        let t = config_by_name("wgmma_128x128").unwrap();
        let regs = Operands {
            p: Source::TmaKMajor,
            ..ks(true)
        };
        assert!(estimate(&t, &p, 1, &ks(true), &d) < estimate(&t, &p, 1, &regs, &d));
    }

    #[test]
    fn operand_choices_follow_layout_alignment_and_rounding() {
        let all = auto();
        let sq = sq(256);
        // NN: swapped with nothing packed first; PACKED last.
        let c = operand_choices(Family::Wgmma, &sq, &all);
        let labels = |c: &[Operands]| c.iter().map(Operands::label).collect::<Vec<_>>();
        assert_eq!(
            labels(&c),
            [
                "swap P:mn Q:tma",
                "P:k Q:pack",
                "P:ks Q:pack",
                "swap P:mn Q:pack",
                ""
            ]
        );
        // NT: both K-major, nothing packed, P from registers or straight from the copies.
        let nt = Problem {
            trans_b: true,
            ..sq
        };
        assert_eq!(
            labels(&operand_choices(Family::Wgmma, &nt, &all)),
            ["P:k Q:tma", "P:ks Q:tma", "P:k Q:pack", "P:ks Q:pack", ""]
        );
        // TT: the MN-major A from registers, or packed beside the mapped B.
        let tt = Problem {
            trans_a: true,
            ..nt
        };
        assert_eq!(
            labels(&operand_choices(Family::Wgmma, &tt, &all)),
            ["P:mn Q:tma", "P:pack Q:tma", "P:mn Q:pack", ""]
        );
        assert_eq!(
            operand_choices(Family::Wgmma3, &sq, &all),
            vec![Operands::PACKED]
        );
        assert_eq!(
            operand_choices(Family::Tf32, &sq, &all),
            vec![Operands::PACKED]
        );
        for ta in [false, true] {
            for tb in [false, true] {
                for (am, bm) in [(true, true), (false, true), (true, false), (false, false)] {
                    let p = Problem {
                        trans_a: ta,
                        trans_b: tb,
                        a_mappable: am,
                        b_mappable: bm,
                        ..sq
                    };
                    for paths in [
                        all,
                        Paths {
                            tma_rounding: false,
                            ..all
                        },
                        Paths {
                            tma: false,
                            tma_rounding: false,
                            ..all
                        },
                    ] {
                        let c = operand_choices(Family::Wgmma, &p, &paths);
                        // P read by wgmma as it lands: only a K-major A through rounding copies.
                        assert_eq!(
                            c.iter().any(|o| o.p == Source::TmaKMajorShared),
                            paths.tma && paths.tma_rounding && am && !ta,
                            "{c:?}"
                        );
                        for o in c {
                            // What plays P and Q, and whether that operand is K-major.
                            let (p_is_a, p_mappable, q_mappable) = if o.swap {
                                (false, bm, am)
                            } else {
                                (true, am, bm)
                            };
                            let p_kmajor = if p_is_a { !ta } else { tb };
                            let q_kmajor = if p_is_a { tb } else { !ta };
                            match o.p {
                                // Packed P beside a mapped Q only where P cannot be mapped
                                // straight to wgmma.
                                Source::Packed => {
                                    let p_shared = am && !ta && paths.tma_rounding;
                                    assert!(!o.swap, "{o:?}");
                                    assert!(!o.q_tma || !p_shared, "{o:?}");
                                }
                                Source::TmaKMajor => assert!(p_mappable && p_kmajor && paths.tma),
                                Source::TmaMnMajor => {
                                    assert!(p_mappable && !p_kmajor && paths.tma)
                                }
                                // wgmma reads the boxes as they land: they must be rounded.
                                Source::TmaKMajorShared => assert!(
                                    !o.swap && p_mappable && p_kmajor && paths.tma_rounding,
                                    "{o:?}"
                                ),
                            }
                            if o.q_tma {
                                assert!(q_mappable && q_kmajor && paths.tma_rounding, "{o:?}");
                            }
                        }
                    }
                }
            }
        }
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

    /// The tail is cut only where the last wave is partial, into pieces of at least two k tiles
    /// that take one block each, and only where the cut is cheaper than a whole tile.
    #[test]
    fn tail_pieces_cut_only_a_partial_last_wave() {
        // 2500x2500x500 on 132 SMs: 400 ping-pong tiles (4 in the last wave) of 16 k tiles.
        assert_eq!(tail_pieces(400, 132, 16), 4);
        // The same with clusters of two: 200 units on 66 clusters.
        assert_eq!(tail_pieces(200, 66, 16), 4);
        // A batch of 8 of 768^3: 288 tiles, 24 in the last wave, 24 k tiles.
        assert_eq!(tail_pieces(288, 132, 24), 4);
        // Whole waves, one wave or less, an empty grid, too few k tiles to cut: no tail.
        for (units, grid, nkt) in [(264, 132, 16), (132, 132, 16), (100, 132, 16), (400, 0, 16)] {
            assert_eq!(tail_pieces(units, grid, nkt), 0, "{units} {grid} {nkt}");
        }
        assert_eq!(tail_pieces(400, 132, 3), 0);
        // 4096x4096x256 with 128x256 tiles: 512 units, 116 in the last wave: one piece each.
        assert_eq!(tail_pieces(512, 132, 8), 0);
        for units in 1..600u64 {
            for grid in [1u64, 2, 3, 7, 66, 132] {
                for nkt in [1u32, 2, 3, 4, 5, 8, 16, 31, 128] {
                    let s = tail_pieces(units, grid, nkt);
                    if s == 0 {
                        continue;
                    }
                    let r = units % grid;
                    assert!(units > grid && r > 0, "{units} {grid} {nkt}");
                    assert!(
                        s >= 2 && r * s as u64 <= grid && 2 * s <= nkt,
                        "{units} {grid} {nkt}: {s}"
                    );
                    assert!(
                        tail_cost_kt(s, nkt) < nkt as f64,
                        "{units} {grid} {nkt}: {s}"
                    );
                }
            }
        }
    }

    /// Tail plans are candidates of TF32 `wgmma` persistent plans without split whose last wave
    /// gets pieces, estimated cheaper than their whole-tile twin there; the model's own plan
    /// never has one (unmeasured by version 13's model), and 3xTF32 never does.
    #[test]
    fn tail_plans_are_candidates_only_where_the_last_wave_is_partial() {
        let d = h200();
        let paths = Paths::default();
        let p = Problem::shape(2500, 2500, 500, 1);
        let pp = config_by_name("wgmma_128x128_pp").unwrap();
        let ops = Operands::PACKED;
        let whole = estimate(&pp, &p, 1, &ops, &d);
        let tail = estimate_with_tail(&pp, &p, 1, &ops, &d, true);
        assert!(tail < whole, "{tail} vs {whole}");
        assert_eq!(plan_tail_pieces(&pp, &p, 1, &ops, &d), 4);
        assert_eq!(plan_tail_pieces(&pp, &p, 2, &ops, &d), 0);
        let x3 = config_by_name("wgmma3_128x128").unwrap();
        assert!(estimate_with_tail(&x3, &p, 1, &ops, &d, true).is_infinite());
        let all = enumerate(Precision::Tf32, &p, &d, &paths).unwrap();
        assert!(all.iter().any(|x| x.tail));
        for x in all.iter().filter(|x| x.tail) {
            assert!(
                x.config.family == Family::Wgmma && x.splits == 1 && x.max_blocks > 0,
                "{x:?}"
            );
            assert!(
                plan_tail_pieces(&x.config, &p, 1, &x.operands, &d) >= 2,
                "{x:?}"
            );
        }
        for q in [
            p,
            Problem::shape(4096, 4096, 256, 1),
            Problem::shape(768, 768, 768, 8),
        ] {
            assert!(
                !choose(Precision::Tf32, &q, &d, &paths).unwrap().tail,
                "{q:?}"
            );
        }
        // GPUKIT_GEMM_TAIL=off: no tail plan.
        let off = Paths {
            tail: false,
            ..paths
        };
        assert!(!enumerate(Precision::Tf32, &p, &d, &off)
            .unwrap()
            .iter()
            .any(|x| x.tail));
        // Whole waves (1024 x 2048 of 128x128 tiles: 128 units, one wave): no tail plan.
        let one = Problem::shape(1024, 2048, 4096, 1);
        assert!(!enumerate(Precision::Tf32, &one, &d, &paths)
            .unwrap()
            .iter()
            .any(|x| x.tail));
    }

    /// Version 9's two-blocks-per-SM tile: two blocks fit an sm_90 SM, it is a packed candidate
    /// (persistent over two blocks per SM) on the short-K shapes issue 23 missed, the model does
    /// not take it where 128x256 wins, and it is no candidate where two blocks do not fit.
    #[test]
    fn two_blocks_per_sm_tile_is_a_candidate_for_short_k() {
        let d = h200();
        let c = config_by_name("wgmma_128x128_2").unwrap();
        assert_eq!((c.occupancy, c.stages, c.threads()), (2, 3, 384));
        assert_eq!(c.smem_bytes(false, false), 3 * 32 * 1024 + 1024);
        assert_eq!(c.occupancy_on(&d, false, false), 2);
        assert!(
            2 * (c.smem_bytes(true, true) as usize + 1024) <= d.shared_memory_per_multiprocessor
        );
        // Registers: 2 blocks x 384 threads x 80 at entry fit the SM's 65536.
        assert!(
            2 * c.threads() * ((65536 / (2 * c.threads())) & !7) <= d.registers_per_multiprocessor
        );
        for (m, n, k, ta, tb) in [
            (4096, 4096, 256, false, false),
            (8192, 2048, 256, false, false),
            (2500, 2500, 500, false, false),
            (1500, 1500, 300, true, true),
            (4096, 4096, 1024, false, false),
        ] {
            let p = Problem {
                trans_a: ta,
                trans_b: tb,
                ..Problem::shape(m, n, k, 1)
            };
            let all = enumerate(Precision::Tf32, &p, &d, &auto()).unwrap();
            let mine: Vec<&Plan> = all.iter().filter(|q| q.config.name == c.name).collect();
            assert!(!mine.is_empty(), "{m}x{n}x{k}");
            assert!(
                mine.iter().all(|q| !q.operands.p.in_registers()),
                "{m}x{n}x{k}"
            );
            let best = mine[0];
            let tiles = m.div_ceil(128) * n.div_ceil(128);
            if tiles > 2 * d.multiprocessor_count {
                assert_eq!(best.max_blocks, 2 * d.multiprocessor_count, "{m}x{n}x{k}");
            }
            // Within the tuner's first-stage reach of the model's best.
            assert!(best.estimate_us <= super::super::tune::WITHIN * all[0].estimate_us);
            let model = choose(Precision::Tf32, &p, &d, &auto()).unwrap();
            let stage = super::super::tune::stage_one(&model, &all);
            assert!(
                stage.iter().any(|q| q.config.name == c.name),
                "{m}x{n}x{k}: {:#?}",
                stage
                    .iter()
                    .map(|q| (
                        q.config.name,
                        q.operands.label(),
                        q.splits,
                        q.tail,
                        q.estimate_us
                    ))
                    .collect::<Vec<_>>()
            );
        }
        for n in [4096, 8192] {
            let model = choose(Precision::Tf32, &sq(n), &d, &auto()).unwrap();
            assert_eq!(model.config.name, "wgmma_128x256", "n={n}");
        }
        // Where two blocks do not fit (an SM of 164 KB) it is no candidate: one block of it would
        // be a shallower wgmma_128x128.
        let small = DeviceAttributes {
            shared_memory_per_multiprocessor: 164 << 10,
            ..h200()
        };
        assert_eq!(c.occupancy_on(&small, false, false), 1);
        let p = Problem::shape(4096, 4096, 256, 1);
        assert!(!estimate(&c, &p, 1, &Operands::PACKED, &small).is_finite());
        assert!(enumerate(Precision::Tf32, &p, &small, &auto())
            .unwrap()
            .iter()
            .all(|q| q.config.name != c.name));
        // Nor on a device without wgmma, nor with P in registers: NN reads A straight from its
        // copies or packs both; NT reads both straight from their copies.
        assert_eq!(c.occupancy_on(&a100(), false, false), 0);
        let labels = |p: &Problem| {
            config_operand_choices(&c, p, &Paths::default())
                .iter()
                .map(Operands::label)
                .collect::<Vec<_>>()
        };
        assert_eq!(labels(&p), ["P:ks Q:pack", ""]);
        let nt = Problem { trans_b: true, ..p };
        assert_eq!(labels(&nt), ["P:ks Q:tma", "P:ks Q:pack", ""]);
        assert!(config_operand_choices(&WGMMA_CONFIGS[1], &p, &Paths::default()).len() > 1);
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

    /// The 64-row ping-pong tiles (version 14): twice the units of the 128-row tile (800 at
    /// 2500x2500x500), a 384-thread block of 9 stages of 24 KB, persistent grids only, and in
    /// the tuner's first stage on the two shapes whose partial last wave they exist for.
    #[test]
    fn the_64_row_ping_pong_tile_halves_the_units_and_reaches_the_tuner() {
        let d = h200();
        let half = config_by_name("wgmma_64x128_pp").unwrap();
        let whole = config_by_name("wgmma_128x128_pp").unwrap();
        let p = Problem::shape(2500, 2500, 500, 1);
        assert_eq!(half.blocks_per_slice(&p, &Operands::PACKED), 40 * 20);
        assert_eq!(whole.blocks_per_slice(&p, &Operands::PACKED), 20 * 20);
        assert_eq!((half.threads(), half.stages), (384, 9));
        assert_eq!(half.smem_bytes(false, false), 9 * 24 * 1024 + 1024);
        for p in [
            Problem::shape(2500, 2500, 500, 1),
            Problem::shape(768, 768, 768, 8),
        ] {
            let all = enumerate(Precision::Tf32, &p, &d, &auto()).unwrap();
            for name in ["wgmma_64x128_pp", "wgmma_64x128_pp_c2"] {
                let mine: Vec<&Plan> = all.iter().filter(|q| q.config.name == name).collect();
                assert!(!mine.is_empty(), "{name} {p:?}");
                assert!(mine.iter().all(|q| q.max_blocks > 0), "{name} {p:?}");
            }
            let model = choose(Precision::Tf32, &p, &d, &auto()).unwrap();
            let stage = super::super::tune::stage_one(&model, &all);
            assert!(
                stage.iter().any(|q| q.config.name == "wgmma_64x128_pp"),
                "{p:?}: {stage:?}"
            );
        }
        // Units of one wave (32, one k tile: no split) would leave each block's second
        // consumer idle: no such plan.
        let one_wave = Problem::shape(512, 512, 32, 1);
        let all = enumerate(Precision::Tf32, &one_wave, &d, &auto()).unwrap();
        assert!(all
            .iter()
            .all(|q| !q.config.name.starts_with("wgmma_64x128")));
    }
}
