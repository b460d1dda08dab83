//! The GEMM kernels' CUDA sources, how each instantiation is compiled, and how it is loaded.
//!
//! Every instantiation (configuration x layout variant) is its own NVRTC program (one name
//! expression), so a process compiles only the kernels it launches, and each lands in
//! gpukit-jit's kernel cache under its own key. Loaded kernels are kept in the device's kernel
//! registry ([`crate::kernels`]' `KernelSet`, keyed by the name expression), the one registry the
//! built-in kernels use too.

use super::path::Paths;
use super::plan::{config_operand_choices, Family, Operands, Problem, TileConfig};
use crate::device::Device;
use crate::error::Result;
use gpukit_jit::{CompileOptions, Kernel, ProgramSpec};

/// Shared device helpers (`cp.async`, tile loaders, block swizzle), passed as an in-memory header.
pub const COMMON_HEADER: &str = include_str!("../../kernels/gemm_common.cuh");
/// Hopper building blocks (mbarriers, bulk and tensor copies, descriptors, wgmma), a header of
/// [`WGMMA_SOURCE`].
pub const WGMMA_OPS_HEADER: &str = include_str!("../../kernels/gemm_wgmma_ops.cuh");
/// The TF32 `mma.sync` kernel template.
pub const TF32_SOURCE: &str = include_str!("../../kernels/gemm_tf32.cu");
/// The FP32 SIMT kernel template.
pub const SGEMM_SOURCE: &str = include_str!("../../kernels/gemm_sgemm.cu");
/// The Hopper `wgmma` TF32 / 3xTF32 kernel template and its operand pack kernel (compiled for
/// `sm_90a`).
pub const WGMMA_SOURCE: &str = include_str!("../../kernels/gemm_wgmma.cu");
/// Program name the `wgmma` pack kernels are compiled under.
pub const PACK_PROGRAM: &str = "gemm_wgmma_pack";
/// Name (and program name) of the kernel that checks whether tensor copies round to TF32.
pub const PROBE_KERNEL: &str = "gemm_tma_probe";
/// The split-K reduction / beta-scaling kernel.
pub const REDUCE_SOURCE: &str = include_str!("../../kernels/gemm_reduce.cu");
/// Program name the reduction is compiled under.
pub const REDUCE_PROGRAM: &str = "gemm_reduce";
/// Name of the reduction kernel in [`REDUCE_SOURCE`].
pub const REDUCE_KERNEL: &str = "gemm_splitk_reduce";

/// The layout-dependent template arguments of one instantiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Variant {
    /// A stored transposed (`mma.sync` and SIMT kernels; the `wgmma` kernels take their layout
    /// from [`Variant::operands`] and ignore it).
    pub trans_a: bool,
    /// B stored transposed (likewise).
    pub trans_b: bool,
    /// The 16-byte vector path of the `mma.sync` and SIMT kernels (aligned operands and C; the
    /// `wgmma` kernels take C's vector stores as a run-time argument).
    pub vec: bool,
    /// The `wgmma` kernels' operand roles and sources.
    pub operands: Operands,
}

/// The GEMM kernel source files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceFile {
    /// `gemm_tf32.cu` ([`TF32_SOURCE`]).
    Tf32,
    /// `gemm_sgemm.cu` ([`SGEMM_SOURCE`]).
    Sgemm,
    /// `gemm_wgmma.cu` ([`WGMMA_SOURCE`], with the [`WGMMA_OPS_HEADER`]).
    Wgmma,
    /// `gemm_reduce.cu` ([`REDUCE_SOURCE`]; `extern "C"`, no templates).
    Reduce,
}

impl SourceFile {
    /// The CUDA source text.
    pub fn text(self) -> &'static str {
        match self {
            SourceFile::Tf32 => TF32_SOURCE,
            SourceFile::Sgemm => SGEMM_SOURCE,
            SourceFile::Wgmma => WGMMA_SOURCE,
            SourceFile::Reduce => REDUCE_SOURCE,
        }
    }
}

/// Everything needed to compile and look up one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instantiation {
    /// The source file.
    pub file: SourceFile,
    /// The NVRTC program name.
    pub program: &'static str,
    /// The C++ name expression (also the kernel's key in the device's registry).
    pub expr: String,
}

impl Instantiation {
    /// The CUDA source.
    pub fn source(&self) -> &'static str {
        self.file.text()
    }

    /// Compile options: the shared headers and (for templates) the name expression.
    pub fn options(&self) -> CompileOptions {
        let mut o = CompileOptions::new().header("gemm_common.cuh", COMMON_HEADER);
        if self.file == SourceFile::Wgmma {
            o = o.header("gemm_wgmma_ops.cuh", WGMMA_OPS_HEADER);
        }
        if self.file != SourceFile::Reduce {
            o = o.name_expression(self.expr.clone());
        }
        o
    }

    /// Loads (compiling on first use, through gpukit-jit's cache) this kernel on `dev`, served
    /// from the device's kernel registry afterwards.
    pub fn load(&self, dev: &Device) -> Result<Kernel> {
        // One program per instantiation: the name expression is part of the options, so the id
        // carries it (the kernel set's rule: one id, one source with one set of options).
        let id = format!("gpukit-core/gemm/{}", self.expr);
        // SAFETY: the id carries the instantiation, which fixes the source file and the options
        // (`options()` is a function of it), in every call; no other crate registers
        // `gpukit-core/` ids (the kernel set's contract).
        let kernel = unsafe {
            dev.kernel_set().kernel(&id, &self.expr, || ProgramSpec {
                source: self.source().into(),
                program: self.program.into(),
                options: self.options(),
            })
        }?;
        Ok(kernel)
    }
}

/// The instantiation of `config` for `v`, e.g. `gemm_tf32<128,256,32,64,64,3,false,true,true>`
/// or, for the `wgmma` families (whose kernel depends only on the tile, stages, products per
/// step and the operands: P's source code, Q tensor-mapped, swapped),
/// `gemm_wgmma<256,4,1,2,true,true>` (a configuration of two blocks per SM adds the count:
/// `gemm_wgmma<128,3,1,2,true,true,2>`, a ping-pong configuration the flag and, for tiles of
/// other than 128 rows, the rows: `gemm_wgmma<128,9,1,2,true,true,1,true,64>`; clusters of two
/// blocks name their own template: `gemm_wgmma_c2<256,4,1,2,true,true>`).
pub fn instantiation(config: &TileConfig, v: Variant) -> Instantiation {
    let file = match config.family {
        Family::Tf32 => SourceFile::Tf32,
        Family::Sgemm => SourceFile::Sgemm,
        Family::Wgmma | Family::Wgmma3 => SourceFile::Wgmma,
    };
    let expr = if config.family.is_wgmma() {
        let split = if config.family == Family::Wgmma3 {
            3
        } else {
            1
        };
        let o = if config.family == Family::Wgmma {
            v.operands
        } else {
            Operands::PACKED
        };
        // Blocks per SM, the template's next argument: left to its default (1) for the
        // one-block configurations, whose name expressions stay as they were, unless followed
        // by the ping-pong flag (`,1,true`).
        let minb = if config.pingpong && config.bm != 128 {
            // The block tile's rows, the last argument (default 128).
            format!(",{},true,{}", config.occupancy, config.bm)
        } else if config.pingpong {
            format!(",{},true", config.occupancy)
        } else if config.wgmma_of_several_blocks() {
            format!(",{}", config.occupancy)
        } else {
            String::new()
        };
        format!(
            "{}<{},{},{split},{},{},{}{minb}>",
            config.kernel_name(),
            config.bn,
            config.stages,
            o.p.code(),
            o.q_tma,
            o.swap
        )
    } else {
        format!(
            "{}<{},{},{},{},{},{},{},{},{}>",
            config.kernel_name(),
            config.bm,
            config.bn,
            config.bk,
            config.wm,
            config.wn,
            config.stages,
            v.trans_a,
            v.trans_b,
            v.vec
        )
    };
    Instantiation {
        file,
        program: config.kernel_name(),
        expr,
    }
}

/// The operand pack kernel of a `wgmma` configuration: op(A) into `bm`-row tiles and op(B)^T into
/// `bn`-row tiles, with the family's parts, e.g. `gemm_wgmma_pack<128,128,2>`.
pub fn pack_instantiation(config: &TileConfig) -> Instantiation {
    Instantiation {
        file: SourceFile::Wgmma,
        program: PACK_PROGRAM,
        expr: format!(
            "{PACK_PROGRAM}<{},{},{}>",
            config.bm,
            config.bn,
            config.family.parts()
        ),
    }
}

/// The tensor-copy rounding probe (`gemm_tma_probe` in the `wgmma` source).
pub fn probe_instantiation() -> Instantiation {
    Instantiation {
        file: SourceFile::Wgmma,
        program: PROBE_KERNEL,
        expr: PROBE_KERNEL.to_string(),
    }
}

/// The split-K reduction / beta-scaling kernel.
pub fn reduce_instantiation() -> Instantiation {
    Instantiation {
        file: SourceFile::Reduce,
        program: REDUCE_PROGRAM,
        expr: REDUCE_KERNEL.to_string(),
    }
}

/// The distinct variants a configuration is instantiated for: every transpose x `vec`
/// combination for the `mma.sync` and SIMT kernels; every operand layout the planner can choose
/// for the `wgmma` families ([`config_operand_choices`] over all layouts; packed for 3xTF32 and
/// for the two-blocks-per-SM configuration).
pub fn variants_of(config: &TileConfig) -> Vec<Variant> {
    match config.family {
        Family::Wgmma | Family::Wgmma3 => {
            let mut v: Vec<Variant> = Vec::new();
            for i in 0..4u8 {
                for (am, bm) in [(true, true), (true, false), (false, true)] {
                    let p = Problem {
                        trans_a: i & 1 != 0,
                        trans_b: i & 2 != 0,
                        a_mappable: am,
                        b_mappable: bm,
                        ..Problem::shape(256, 256, 256, 1)
                    };
                    for tma_rounding in [true, false] {
                        let paths = Paths {
                            tma_rounding,
                            ..Paths::default()
                        };
                        for operands in config_operand_choices(config, &p, &paths) {
                            let var = Variant {
                                operands,
                                ..Variant::default()
                            };
                            if !v.contains(&var) {
                                v.push(var);
                            }
                        }
                    }
                }
            }
            v
        }
        _ => (0..8u8)
            .map(|i| Variant {
                trans_a: i & 1 != 0,
                trans_b: i & 2 != 0,
                vec: i & 4 != 0,
                operands: Operands::PACKED,
            })
            .collect(),
    }
}

/// Every GEMM kernel: each configuration's variants, the pack kernels (with `include_hopper`:
/// the `wgmma` families, `sm_90a` only), and the reduction (precompiling, compile tests).
pub fn all_instantiations(include_hopper: bool) -> Vec<Instantiation> {
    let mut v = Vec::new();
    for config in super::plan::all_configs() {
        if config.family.is_wgmma() && !include_hopper {
            continue;
        }
        for variant in variants_of(config) {
            v.push(instantiation(config, variant));
        }
        if config.family.is_wgmma() {
            let p = pack_instantiation(config);
            if !v.contains(&p) {
                v.push(p);
            }
        }
    }
    if include_hopper {
        v.push(probe_instantiation());
    }
    v.push(reduce_instantiation());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::{Source, SGEMM_CONFIGS, TF32_CONFIGS, WGMMA3_CONFIGS, WGMMA_CONFIGS};

    #[test]
    fn name_expressions_are_stable() {
        let v = Variant {
            trans_a: false,
            trans_b: true,
            vec: true,
            operands: Operands::PACKED,
        };
        assert_eq!(
            instantiation(&TF32_CONFIGS[0], v).expr,
            "gemm_tf32<128,256,32,64,64,3,false,true,true>"
        );
        assert_eq!(instantiation(&SGEMM_CONFIGS[2], v).program, "gemm_sgemm");
        let w = Variant {
            operands: Operands {
                swap: true,
                p: Source::TmaMnMajor,
                q_tma: true,
            },
            ..v
        };
        assert_eq!(
            instantiation(&WGMMA_CONFIGS[0], w).expr,
            "gemm_wgmma<256,4,1,2,true,true>"
        );
        assert_eq!(
            instantiation(&WGMMA_CONFIGS[1], v).expr,
            "gemm_wgmma<128,4,1,0,false,false>"
        );
        // The transposes do not change a wgmma instantiation; 3xTF32 always packs.
        assert_eq!(
            instantiation(&WGMMA3_CONFIGS[0], w).expr,
            "gemm_wgmma<128,3,3,0,false,false>"
        );
        assert_eq!(
            pack_instantiation(&WGMMA3_CONFIGS[0]).expr,
            "gemm_wgmma_pack<128,128,2>"
        );
        assert_eq!(
            pack_instantiation(&WGMMA_CONFIGS[0]).expr,
            "gemm_wgmma_pack<128,256,1>"
        );
        assert_eq!(variants_of(&TF32_CONFIGS[0]).len(), 8);
        // P packed with Q packed or mapped; P K-major, into registers or read by wgmma from
        // shared memory, with Q packed or mapped; P MN-major (either role) with Q packed or
        // mapped, swapped or not.
        assert_eq!(variants_of(&WGMMA_CONFIGS[1]).len(), 10);
        assert_eq!(variants_of(&WGMMA3_CONFIGS[0]).len(), 1);
        // The two-blocks-per-SM tile: P in shared memory only (packed beside Q packed or
        // mapped, or straight from its copies beside either), its block count the last template
        // argument.
        let two = crate::gemm::plan::config_by_name("wgmma_128x128_2").unwrap();
        assert_eq!(variants_of(&two).len(), 4);
        assert!(variants_of(&two).contains(&Variant::default()));
        assert_eq!(
            instantiation(&two, v).expr,
            "gemm_wgmma<128,3,1,0,false,false,2>"
        );
        assert_eq!(
            pack_instantiation(&two),
            pack_instantiation(&WGMMA_CONFIGS[1])
        );
        // Ping-pong: the flag; the 64-row tile also its rows, in one block or clusters of two.
        let pp = crate::gemm::plan::config_by_name("wgmma_128x128_pp").unwrap();
        assert_eq!(
            instantiation(&pp, w).expr,
            "gemm_wgmma<128,7,1,2,true,true,1,true>"
        );
        let half = crate::gemm::plan::config_by_name("wgmma_64x128_pp").unwrap();
        assert_eq!(
            instantiation(&half, w).expr,
            "gemm_wgmma<128,9,1,2,true,true,1,true,64>"
        );
        let half_c2 = crate::gemm::plan::config_by_name("wgmma_64x128_pp_c2").unwrap();
        assert_eq!(
            instantiation(&half_c2, v).expr,
            "gemm_wgmma_c2<128,9,1,0,false,false,1,true,64>"
        );
        assert_eq!(pack_instantiation(&half).expr, "gemm_wgmma_pack<64,128,1>");
        let all = all_instantiations(true);
        let mut exprs: Vec<&str> = all.iter().map(|i| i.expr.as_str()).collect();
        let n = exprs.len();
        exprs.sort();
        exprs.dedup();
        assert_eq!(exprs.len(), n, "duplicate instantiations");
        assert!(exprs.contains(&PROBE_KERNEL));
        assert!(all_instantiations(false)
            .iter()
            .all(|i| i.file != SourceFile::Wgmma));
        // The wgmma source carries its Hopper header; the others do not need it.
        let o = instantiation(&WGMMA_CONFIGS[0], w).options();
        assert!(o.headers.iter().any(|(n, _)| n == "gemm_wgmma_ops.cuh"));
    }
}
