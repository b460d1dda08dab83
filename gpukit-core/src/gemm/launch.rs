//! Running an f32 GEMM with our kernels: plan (per shape and device), then launch.
//!
//! [`sgemm`] chooses a plan with [`super::plan::choose`] (the device's attributes and the paths
//! forced through the environment, [`super::path`]) and runs it; [`sgemm_with_plan`] runs a plan
//! from the caller (benches, tests). Split-K products write their K slices into a workspace from
//! the device's caching allocator (charged to the current owner, like the `wgmma` pack buffers)
//! and a deterministic reduction sums them and applies alpha and beta.

use super::desc::{Precision, RawGemm};
use super::kernels::{self, Variant};
use super::pack;
use super::path;
use super::plan::{self, Family, Plan, Problem, TileConfig};
use super::tma;
use crate::alloc::current_owner;
use crate::attributes::DeviceAttributes;
use crate::device::{Device, Stream};
use crate::error::{Error, Result};
use gpukit_jit::{KernelArg, LaunchConfig};

/// Grouped tile order of every kernel: GROUP_M tile rows per group (L2 reuse).
const GROUP_M: i32 = 8;
/// Most blocks in grid dimension z (batch entries x K slices per launch).
const MAX_GRID_Z: usize = 65535;

/// The device a stream belongs to (gpukit-core's shared state for that ordinal: attributes,
/// allocator, kernel registry).
fn device_of(stream: &Stream) -> Result<Device> {
    Device::open(stream.cuda().context().ordinal())
}

/// The plan [`sgemm`] uses for `g` on `dev` (the paths forced by `GPUKIT_GEMM_TF32` /
/// `GPUKIT_GEMM_FP32` included).
pub fn plan_for(dev: &DeviceAttributes, precision: Precision, g: &RawGemm) -> Result<Plan> {
    plan::choose(precision, &Problem::of(g), dev, &path::paths_from_env()?)
}

/// Single-precision GEMM with our kernels; the plan is chosen per shape and device.
///
/// # Safety
/// `g.a`, `g.b` and `g.c` must be device addresses in the context of `stream`, valid for
/// [`RawGemm::required_len`] `f32` elements each, and C must not overlap A or B; the memory must
/// stay valid until the stream has run the work enqueued here.
pub unsafe fn sgemm(stream: &Stream, precision: Precision, g: &RawGemm) -> Result<()> {
    g.validate()?;
    let dev = device_of(stream)?;
    let plan = plan_for(dev.attributes(), precision, g)?;
    // SAFETY: forwarded from the caller.
    unsafe { run(stream, &dev, g, &plan) }
}

/// Single-precision GEMM with a given plan (its configuration decides the arithmetic). A plan
/// whose configuration does not fit the device (shared memory per block, or a Hopper family on
/// another GPU) is an [`Error::InvalidArgument`].
///
/// # Safety
/// As for [`sgemm`].
pub unsafe fn sgemm_with_plan(stream: &Stream, g: &RawGemm, plan: &Plan) -> Result<()> {
    g.validate()?;
    let dev = device_of(stream)?;
    // SAFETY: forwarded from the caller.
    unsafe { run(stream, &dev, g, plan) }
}

fn check_fits(cfg: &TileConfig, g: &RawGemm, dev: &DeviceAttributes) -> Result<()> {
    let (ta, tb) = (g.trans_a.is_yes(), g.trans_b.is_yes());
    if cfg.occupancy_on(dev, ta, tb) > 0 {
        return Ok(());
    }
    Err(Error::invalid(
        "gemm",
        if cfg.family.is_wgmma() && !dev.supports_wgmma() {
            format!(
                "{} needs a compute capability 9.0 GPU (H100/H200); {} is {}.{}",
                cfg.name, dev.name, dev.compute_capability.0, dev.compute_capability.1
            )
        } else {
            format!(
                "{} needs {} B of shared memory per block; {} allows {} B",
                cfg.name,
                cfg.smem_bytes(ta, tb),
                dev.name,
                dev.shared_memory_per_block_optin
            )
        },
    ))
}

/// Where the main kernel of one batch chunk writes: C itself, or the split-K workspace.
struct Target {
    c: u64,
    ldc: usize,
    stride_c: usize,
    alpha: f32,
    beta: f32,
}

/// # Safety
/// As for [`sgemm`]; `g` is validated.
unsafe fn run(stream: &Stream, dev: &Device, g: &RawGemm, plan: &Plan) -> Result<()> {
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    if g.k == 0 || g.alpha == 0.0 {
        // C = beta * C (BLAS: A and B are not read when alpha == 0 or k == 0).
        // SAFETY: C is valid for the caller's span.
        return unsafe { scale_c(stream, dev, g) };
    }
    let cfg = &plan.config;
    check_fits(cfg, g, dev.attributes())?;
    let tiles = (g.m.div_ceil(cfg.bm as usize) * g.n.div_ceil(cfg.bn as usize)) as u64;
    if tiles > i32::MAX as u64 {
        return Err(Error::invalid(
            "gemm",
            format!(
                "{}x{} makes {tiles} tiles, more than a grid holds",
                g.m, g.n
            ),
        ));
    }
    let (splits, k_per_split) = plan::normalize_split(cfg, g.k as u32, plan.splits);
    let splits = splits as usize;
    // The tensor map of A (wgmma TF32 with a K-major, aligned A); if the driver rejects the
    // layout, A is packed instead.
    let tmap = if cfg.family == Family::Wgmma && plan.tma_a && g.a_tensor_mappable() {
        tma::a_tensor_map(g).ok()
    } else {
        None
    };
    let main = MainKernel {
        cfg,
        variant: Variant {
            trans_a: g.trans_a.is_yes(),
            trans_b: g.trans_b.is_yes(),
            vec: if cfg.family.is_wgmma() {
                if splits > 1 {
                    true // the workspace is 16-byte aligned with rows of a multiple of 4
                } else {
                    g.c_vectorizable()
                }
            } else {
                g.ab_vectorizable() && (splits > 1 || g.c_vectorizable())
            },
            tma_a: tmap.is_some(),
        },
        tiles: tiles as u32,
        splits,
        k_per_split: k_per_split as usize,
        tmap,
    };
    let kernel = kernels::instantiation(cfg, main.variant).load(dev)?;

    if splits == 1 {
        let mut b0 = 0usize;
        while b0 < g.batch {
            let nb = (g.batch - b0).min(MAX_GRID_Z);
            let target = Target {
                c: g.c + (b0 * g.stride_c * 4) as u64,
                ldc: g.ldc,
                stride_c: g.stride_c,
                alpha: g.alpha as f32,
                beta: g.beta as f32,
            };
            // SAFETY: forwarded from the caller; b0 + nb <= batch, nb <= 65535.
            unsafe { main.launch(stream, dev, &kernel, g, b0, nb, &target) }?;
            b0 += nb;
        }
        return Ok(());
    }

    // Split-K: each (batch, split) writes its partial product into a workspace slice (row
    // stride rounded to 4 floats, so the vector path applies), then a reduction sums the slices
    // in a fixed order (deterministic) and applies alpha and beta.
    let ldw = g.n.div_ceil(4) * 4;
    let slice = g.m * ldw;
    let per_launch = (MAX_GRID_Z / splits).max(1);
    let reduce = kernels::reduce_instantiation().load(dev)?;
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(per_launch);
        let len = nb * splits * slice;
        // Every element of the workspace is written by the GEMM kernel (every (row, col) of
        // every slice lies in some tile) before the reduction reads it, both on this stream.
        let ws = dev
            .allocator()
            .alloc_for(&current_owner(), len * 4, stream)?;
        let target = Target {
            c: ws.ptr(),
            ldc: ldw,
            stride_c: slice,
            alpha: 1.0,
            beta: 0.0,
        };
        // SAFETY: forwarded from the caller; the workspace holds nb * splits slices.
        unsafe { main.launch(stream, dev, &kernel, g, b0, nb, &target) }?;
        let rargs = reduce_args(g, b0, nb, ws.ptr(), ldw, slice, splits);
        reduce.launch(stream.cuda(), reduce_launch(dev, nb * g.m * g.n), &rargs)?;
        b0 += nb;
    }
    Ok(())
}

/// The main GEMM kernel of a plan, launched once per batch chunk.
struct MainKernel<'a> {
    cfg: &'a TileConfig,
    variant: Variant,
    tiles: u32,
    splits: usize,
    k_per_split: usize,
    /// The encoded tensor map of A when the kernel reads A through it.
    tmap: Option<Vec<u8>>,
}

impl MainKernel<'_> {
    /// Launches batch entries `b0 .. b0 + nb` (times the K slices) into `t`.
    ///
    /// # Safety
    /// As for [`sgemm`]; `b0 + nb <= g.batch`, `nb * splits <= 65535`, and `t` valid for the
    /// outputs of `nb * splits` (batch entry, slice) pairs.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        stream: &Stream,
        dev: &Device,
        kernel: &gpukit_jit::Kernel,
        g: &RawGemm,
        b0: usize,
        nb: usize,
        t: &Target,
    ) -> Result<()> {
        let cfg = self.cfg;
        let lc = LaunchConfig {
            grid: (self.tiles, 1, (nb * self.splits) as u32),
            block: (cfg.threads(), 1, 1),
            shared_mem_bytes: cfg.smem_bytes(self.variant.trans_a, self.variant.trans_b),
        };
        if !cfg.family.is_wgmma() {
            let args = simt_args(g, b0, t, self.splits, self.k_per_split);
            kernel.launch(stream.cuda(), lc, &args)?;
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        let packed = unsafe { pack::pack(stream, dev, g, cfg, b0, nb, self.tmap.is_none()) }?;
        let args = wgmma_args(
            g,
            b0,
            t,
            &packed,
            self.tmap.as_deref(),
            self.splits,
            self.k_per_split.div_ceil(cfg.bk as usize),
        );
        kernel.launch(stream.cuda(), lc, &args)?;
        // The pack buffer returns to the allocator here; stream order keeps it intact until the
        // kernel above has run.
        drop(packed);
        Ok(())
    }
}

/// Arguments of the `mma.sync` and SIMT kernels (`gemm_tf32`, `gemm_sgemm`) for batch entries
/// from `b0` into `t`.
fn simt_args(
    g: &RawGemm,
    b0: usize,
    t: &Target,
    splits: usize,
    k_per_split: usize,
) -> Vec<KernelArg> {
    vec![
        KernelArg::Ptr(g.a + (b0 * g.stride_a * 4) as u64),
        KernelArg::Ptr(g.b + (b0 * g.stride_b * 4) as u64),
        KernelArg::Ptr(t.c),
        (g.m as i32).into(),
        (g.n as i32).into(),
        (g.k as i32).into(),
        (g.lda as i32).into(),
        (g.ldb as i32).into(),
        (t.ldc as i32).into(),
        (g.stride_a as i64).into(),
        (g.stride_b as i64).into(),
        (t.stride_c as i64).into(),
        t.alpha.into(),
        t.beta.into(),
        (splits as i32).into(),
        (k_per_split as i32).into(),
        GROUP_M.into(),
    ]
}

/// Arguments of the `wgmma` kernels (`gemm_wgmma`) for batch entries from `b0` into `t`, with
/// the packed operands and (when A is read in place) A's tensor map; `kt_per_split` in k tiles.
fn wgmma_args(
    g: &RawGemm,
    b0: usize,
    t: &Target,
    packed: &pack::Packed,
    tmap: Option<&[u8]>,
    splits: usize,
    kt_per_split: usize,
) -> Vec<KernelArg> {
    let batched_a = g.batch > 1 && g.stride_a != 0;
    vec![
        KernelArg::Ptr(packed.a),
        KernelArg::Ptr(packed.b),
        KernelArg::Ptr(t.c),
        KernelArg::Bytes(tmap.map_or_else(|| vec![0u8; 128], <[u8]>::to_vec)),
        (g.m as i32).into(),
        (g.n as i32).into(),
        (g.k as i32).into(),
        (t.ldc as i32).into(),
        (packed.stride_a as i64).into(),
        (packed.stride_b as i64).into(),
        (t.stride_c as i64).into(),
        (b0 as i32).into(),
        (!batched_a as i32).into(),
        t.alpha.into(),
        t.beta.into(),
        (splits as i32).into(),
        (kt_per_split as i32).into(),
        GROUP_M.into(),
    ]
}

/// Runs only the operand pack of a `wgmma` plan for `g` (benches: the pack's share of the
/// time). Does nothing for empty products or plans of other families.
///
/// # Safety
/// As for [`sgemm`].
pub unsafe fn pack_only(stream: &Stream, g: &RawGemm, plan: &Plan) -> Result<()> {
    g.validate()?;
    if g.m == 0 || g.n == 0 || g.k == 0 || g.batch == 0 || !plan.config.family.is_wgmma() {
        return Ok(());
    }
    let dev = device_of(stream)?;
    check_fits(&plan.config, g, dev.attributes())?;
    let pack_a = !(plan.tma_a && plan.config.family == Family::Wgmma && g.a_tensor_mappable());
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(MAX_GRID_Z);
        // SAFETY: forwarded from the caller.
        drop(unsafe { pack::pack(stream, &dev, g, &plan.config, b0, nb, pack_a) }?);
        b0 += nb;
    }
    Ok(())
}

/// Arguments of the split-K reduction: the `splits` slices of workspace `ws` (row stride `ldw`,
/// `slice` elements apart) summed into batch entries `b0 .. b0 + nb` of C with alpha and beta;
/// `splits == 0` makes it `C = beta * C`.
fn reduce_args(
    g: &RawGemm,
    b0: usize,
    nb: usize,
    ws: u64,
    ldw: usize,
    slice: usize,
    splits: usize,
) -> Vec<KernelArg> {
    vec![
        KernelArg::Ptr(ws),
        KernelArg::Ptr(g.c + (b0 * g.stride_c * 4) as u64),
        (g.m as i32).into(),
        (g.n as i32).into(),
        (ldw as i32).into(),
        (slice as i64).into(),
        (g.ldc as i32).into(),
        (g.stride_c as i64).into(),
        (splits as i32).into(),
        (nb as i32).into(),
        (if splits == 0 { 0.0 } else { g.alpha as f32 }).into(),
        (g.beta as f32).into(),
    ]
}

fn reduce_launch(dev: &Device, elements: usize) -> LaunchConfig {
    let max_blocks = (dev.multiprocessor_count().max(1) * 16) as usize;
    let blocks = elements.div_ceil(256).clamp(1, max_blocks) as u32;
    LaunchConfig::new((blocks, 1, 1), (256, 1, 1))
}

/// `C = beta * C` over all batch entries (the k == 0 / alpha == 0 case).
///
/// # Safety
/// As for [`sgemm`] (only C is touched).
unsafe fn scale_c(stream: &Stream, dev: &Device, g: &RawGemm) -> Result<()> {
    let reduce = kernels::reduce_instantiation().load(dev)?;
    let mut b0 = 0usize;
    // The reduction indexes batch * m * n with 64-bit arithmetic; chunk the batch to keep the
    // `batch` argument in i32.
    while b0 < g.batch {
        let nb = (g.batch - b0).min(i32::MAX as usize);
        // splits = 0: no slices are read, C = beta * C.
        let args = reduce_args(g, b0, nb, g.c, g.ldc, 0, 0);
        reduce.launch(stream.cuda(), reduce_launch(dev, nb * g.m * g.n), &args)?;
        b0 += nb;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::all_configs;
    use gpukit_jit::signature::parse_kernels;

    fn target() -> Target {
        Target {
            c: 4096,
            ldc: 8,
            stride_c: 64,
            alpha: 1.0,
            beta: 0.0,
        }
    }

    /// The argument lists built here match the kernels' parsed signatures (count, pointer vs
    /// value, widths) for every instantiation: a mismatch would otherwise surface only on a GPU.
    #[test]
    fn argument_lists_match_every_kernel_signature() {
        let g = RawGemm::contiguous(8, 8, 8, 256, 512, 4096);
        let packed = pack::Packed::for_test(1024, 2048);
        for config in all_configs() {
            for v in kernels::variants_of(config) {
                let inst = kernels::instantiation(config, v);
                let sig = parse_kernels(inst.source())
                    .into_iter()
                    .find(|k| k.name == config.kernel_name())
                    .unwrap_or_else(|| panic!("{} not found", config.kernel_name()))
                    .instantiate(&inst.expr);
                let args = if config.family.is_wgmma() {
                    wgmma_args(&g, 0, &target(), &packed, Some(&[7u8; 128]), 2, 3)
                } else {
                    simt_args(&g, 0, &target(), 2, 32)
                };
                gpukit_jit::check_args(&sig, &inst.expr, &args)
                    .unwrap_or_else(|e| panic!("{}: {e}", inst.expr));
            }
        }
        let sig = parse_kernels(kernels::REDUCE_SOURCE)
            .into_iter()
            .find(|k| k.name == kernels::REDUCE_KERNEL)
            .unwrap();
        gpukit_jit::check_args(&sig, "reduce", &reduce_args(&g, 0, 1, 8192, 8, 64, 3)).unwrap();
        gpukit_jit::check_args(&sig, "scale", &reduce_args(&g, 0, 1, g.c, 8, 0, 0)).unwrap();
        // The tensor map travels as its 128 bytes, zeros when A is packed.
        let a = wgmma_args(&g, 0, &target(), &packed, None, 1, 1);
        assert_eq!(a[3], KernelArg::Bytes(vec![0u8; 128]));
    }
}
