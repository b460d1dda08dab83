//! The operand pack of the `wgmma` kernels: op(A) and op(B)^T rounded to TF32 (or split into a
//! big and a small TF32 part for 3xTF32) and written as 128-byte-swizzled K-major tiles
//! (`gemm_wgmma_pack` in `gemm_wgmma.cu`, which documents the layout). One allocation and one
//! launch per batch chunk; the buffer comes from the device's caching allocator under the
//! current owner, so quotas and the scheduler's memory admission see it.

use super::desc::RawGemm;
use super::kernels;
use super::plan::TileConfig;
use crate::alloc::{current_owner, DeviceBuffer};
use crate::device::{Device, Stream};
use crate::error::{Error, Result};
use gpukit_jit::{KernelArg, LaunchConfig};

/// Rows of op(X) one pack block covers (the pack kernel's block tile is 64 rows x 32 k).
const PACK_ROWS: usize = 64;
/// Most blocks in grid dimension y (the 64-row blocks of both operands).
const MAX_GRID_Y: usize = 65535;

/// Packed operands of one batch chunk: op(A)'s tiles at `a` (unless A is read in place) and
/// op(B)^T's at `b`, with their element strides between batch entries (0: packed once and
/// broadcast). The buffer returns to the allocator when this is dropped; stream order keeps it
/// alive for the GEMM kernel enqueued after the pack.
pub(crate) struct Packed {
    _buf: Option<DeviceBuffer>,
    /// Device address of the packed op(A) (0 when A was not packed).
    pub a: u64,
    /// Device address of the packed op(B)^T.
    pub b: u64,
    /// Elements between the packed A of consecutive batch entries.
    pub stride_a: usize,
    /// Elements between the packed B of consecutive batch entries.
    pub stride_b: usize,
}

/// Packs batch entries `b0 .. b0 + nb` of op(B)^T, and of op(A) unless `pack_a` is false, for
/// `cfg` (one allocation, one launch).
///
/// # Safety
/// As for [`super::launch::sgemm`]; `g` is validated, `k > 0`, `b0 + nb <= g.batch` and
/// `nb <= 65535`.
pub(crate) unsafe fn pack(
    stream: &Stream,
    dev: &Device,
    g: &RawGemm,
    cfg: &TileConfig,
    b0: usize,
    nb: usize,
    pack_a: bool,
) -> Result<Packed> {
    let (bm, bn, bk) = (cfg.bm as usize, cfg.bn as usize, cfg.bk as usize);
    let parts = cfg.family.parts() as usize;
    let num_kt = g.k.div_ceil(bk);
    let mp = if pack_a { g.m.div_ceil(bm) * bm } else { 0 };
    let np = g.n.div_ceil(bn) * bn;
    if num_kt > u32::MAX as usize / 2 || (mp + np) / PACK_ROWS > MAX_GRID_Y {
        return Err(Error::invalid(
            "gemm",
            format!(
                "{}x{}x{} is too large for the wgmma operand pack (at most {} rows of op(A) and \
                 op(B)^T together); use {}=mma",
                g.m,
                g.n,
                g.k,
                MAX_GRID_Y * PACK_ROWS,
                super::path::TF32_PATH_ENV
            ),
        ));
    }
    let entries = |stride: usize| if stride == 0 { 1 } else { nb };
    let (ea, eb) = (
        if pack_a { entries(g.stride_a) } else { 0 },
        entries(g.stride_b),
    );
    let (per_a, per_b) = (parts * mp * num_kt * bk, parts * np * num_kt * bk);
    let b_offset = ea * per_a;
    let elements = b_offset + eb * per_b;
    // Every element of the buffer is written by the pack kernel below (its grid covers every
    // (entry, 64-row block, k tile) of the packed operands) before the GEMM kernel reads it,
    // both on this stream.
    let buf = dev
        .allocator()
        .alloc_for(&current_owner(), elements * 4, stream)?;
    let dst = buf.ptr();
    let kernel = kernels::pack_instantiation(cfg).load(dev)?;
    let args = pack_args(g, b0, dst, b_offset, pack_a, ea, eb, num_kt);
    let lc = LaunchConfig::new(
        (
            num_kt as u32,
            ((mp + np) / PACK_ROWS) as u32,
            ea.max(eb) as u32,
        ),
        (256, 1, 1),
    );
    kernel.launch(stream.cuda(), lc, &args)?;
    Ok(Packed {
        a: if pack_a { dst } else { 0 },
        b: dst + (b_offset * 4) as u64,
        stride_a: if g.stride_a == 0 { 0 } else { per_a },
        stride_b: if g.stride_b == 0 { 0 } else { per_b },
        _buf: Some(buf),
    })
}

/// Arguments of `gemm_wgmma_pack` for batch entries from `b0`: op(A) (unless `pack_a` is false:
/// M = 0 packs B only) into `dst`, op(B)^T into `dst + b_offset` elements, `ea` / `eb` entries.
#[allow(clippy::too_many_arguments)]
fn pack_args(
    g: &RawGemm,
    b0: usize,
    dst: u64,
    b_offset: usize,
    pack_a: bool,
    ea: usize,
    eb: usize,
    num_kt: usize,
) -> Vec<KernelArg> {
    vec![
        KernelArg::Ptr(g.a + (b0 * g.stride_a * 4) as u64),
        KernelArg::Ptr(dst),
        (if pack_a { g.m as i32 } else { 0 }).into(),
        (g.lda as i32).into(),
        (g.stride_a as i64).into(),
        (g.trans_a.is_yes() as i32).into(),
        (ea as i32).into(),
        KernelArg::Ptr(g.b + (b0 * g.stride_b * 4) as u64),
        KernelArg::Ptr(dst + (b_offset * 4) as u64),
        (g.n as i32).into(),
        (g.ldb as i32).into(),
        (g.stride_b as i64).into(),
        (!g.trans_b.is_yes() as i32).into(),
        (eb as i32).into(),
        (g.k as i32).into(),
        (num_kt as i32).into(),
    ]
}

#[cfg(test)]
impl Packed {
    /// Packed operands at fixed addresses without a buffer (argument-list tests).
    pub(crate) fn for_test(a: u64, b: u64) -> Packed {
        Packed {
            _buf: None,
            a,
            b,
            stride_a: 0,
            stride_b: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::{WGMMA3_CONFIGS, WGMMA_CONFIGS};
    use gpukit_jit::signature::parse_kernels;

    #[test]
    fn pack_arguments_match_the_kernel_signature() {
        let g = RawGemm::contiguous(8, 8, 8, 256, 512, 4096);
        for cfg in WGMMA_CONFIGS.iter().chain(WGMMA3_CONFIGS.iter()) {
            let inst = kernels::pack_instantiation(cfg);
            let sig = parse_kernels(inst.source())
                .into_iter()
                .find(|k| k.name == kernels::PACK_PROGRAM)
                .unwrap()
                .instantiate(&inst.expr);
            for pack_a in [false, true] {
                let args = pack_args(&g, 0, 8192, 64, pack_a, 1, 1, 1);
                gpukit_jit::check_args(&sig, &inst.expr, &args).unwrap();
            }
        }
    }
}
