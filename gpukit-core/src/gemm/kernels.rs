//! The GEMM kernels' CUDA sources and how each instantiation is compiled.
//!
//! Every instantiation (configuration x transposes x vector path) is its own NVRTC program
//! (one name expression), so a process compiles only the kernels it launches, and each lands
//! in gpukit-jit's kernel cache under its own key.

use super::config::TileConfig;
use gpukit_jit::CompileOptions;

/// Shared device helpers (`cp.async`, tile loaders, block swizzle), passed as an in-memory header.
pub const COMMON_HEADER: &str = include_str!("../../kernels/gemm_common.cuh");
/// The TF32 tensor-core kernel template.
pub const TF32_SOURCE: &str = include_str!("../../kernels/gemm_tf32.cu");
/// The FP32 SIMT kernel template.
pub const SGEMM_SOURCE: &str = include_str!("../../kernels/gemm_sgemm.cu");
/// The Hopper `wgmma` kernel template and its operand pack kernels (compiled for `sm_90a`).
pub const WGMMA_SOURCE: &str = include_str!("../../kernels/gemm_wgmma.cu");
/// Program name the `wgmma` pack kernels are compiled under.
pub const PACK_PROGRAM: &str = "gemm_wgmma_pack";
/// The split-K reduction / beta-scaling kernel.
pub const REDUCE_SOURCE: &str = include_str!("../../kernels/gemm_reduce.cu");
/// Program name the reduction is compiled under.
pub const REDUCE_PROGRAM: &str = "gemm_reduce";
/// Name of the reduction kernel in [`REDUCE_SOURCE`].
pub const REDUCE_KERNEL: &str = "gemm_splitk_reduce";

/// Source, program name and compile options of one instantiation.
pub fn instantiation(
    config: &TileConfig,
    trans_a: bool,
    trans_b: bool,
    vec: bool,
) -> (&'static str, &'static str, CompileOptions, String) {
    let expr = config.name_expression(trans_a, trans_b, vec);
    let source = match config.family {
        super::config::Family::Tf32 => TF32_SOURCE,
        super::config::Family::Sgemm => SGEMM_SOURCE,
        super::config::Family::Wgmma => WGMMA_SOURCE,
    };
    let options = base_options().name_expression(expr.clone());
    (source, config.kernel_name(), options, expr)
}

/// Name expression of the `wgmma` pack kernel for a configuration's tile rows (it packs op(A)
/// into `bm`-row tiles and op(B)^T into `bn`-row tiles in one launch), e.g.
/// `gemm_wgmma_pack<128,256>`.
pub fn pack_expression(config: &TileConfig) -> String {
    format!("{PACK_PROGRAM}<{},{}>", config.bm, config.bn)
}

/// Options shared by all GEMM programs (the common header).
pub fn base_options() -> CompileOptions {
    CompileOptions::new().header("gemm_common.cuh", COMMON_HEADER)
}

/// Every `(trans_a, trans_b, vec)` combination a configuration is instantiated for.
pub fn variants() -> impl Iterator<Item = (bool, bool, bool)> {
    (0..8u8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0))
}

/// The distinct `(trans_a, trans_b, vec)` instantiations of a configuration: all of
/// [`variants`], except for [`Family::Wgmma`](super::config::Family::Wgmma), whose kernel
/// depends only on `vec`.
pub fn variants_of(config: &TileConfig) -> Vec<(bool, bool, bool)> {
    match config.family {
        super::config::Family::Wgmma => vec![(false, false, false), (false, false, true)],
        _ => variants().collect(),
    }
}
