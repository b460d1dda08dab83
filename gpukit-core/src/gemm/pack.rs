//! The operand pack of the `wgmma` kernels: the P and Q operands that are not read through tensor
//! maps, rounded to TF32 (or split into a big and a small TF32 part for 3xTF32) and written as
//! 128-byte-swizzled K-major tiles
//! (`gemm_wgmma_pack` in `gemm_wgmma.cu`, which documents the layout). One allocation and one
//! launch per batch chunk; the buffer comes from the device's caching allocator under the
//! current owner, so quotas and the scheduler's memory admission see it.

use super::kernels;
use super::operand::OperandView;
use super::plan::TileConfig;
use crate::alloc::{current_owner, DeviceBuffer};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::Stream;
use gpukit_jit::{KernelArg, LaunchConfig};

/// Rows of an operand one pack block covers (the pack kernel's block tile is 64 rows x 32 k).
const PACK_ROWS: usize = 64;
/// Most blocks in grid dimension y (the 64-row blocks of both operands).
const MAX_GRID_Y: usize = 65535;

/// Packed operands of one batch chunk: P's tiles at `p` and Q's at `q` (0 for an operand that
/// was not packed), with their element strides between batch entries (0: packed once and
/// broadcast). The buffer returns to the allocator when this is dropped; stream order keeps it
/// alive for the GEMM kernel enqueued after the pack.
pub(crate) struct Packed {
    _buf: Option<DeviceBuffer>,
    /// Device address of the packed P (0 when P was not packed).
    pub p: u64,
    /// Device address of the packed Q (0 when Q was not packed).
    pub q: u64,
    /// Elements between the packed P of consecutive batch entries.
    pub stride_p: usize,
    /// Elements between the packed Q of consecutive batch entries.
    pub stride_q: usize,
}

impl Packed {
    /// Nothing packed.
    pub fn none() -> Packed {
        Packed {
            _buf: None,
            p: 0,
            q: 0,
            stride_p: 0,
            stride_q: 0,
        }
    }
}

/// Packs the operands given (P into 128-row tiles, Q into `cfg.bn`-row tiles, the family's
/// parts) for `cfg`: one allocation, one launch; nothing when both are `None`.
///
/// # Safety
/// As for [`super::launch::sgemm`]: each view describes device memory valid for its `entries`
/// batch entries; `k > 0` and `entries <= 65535`.
pub(crate) unsafe fn pack(
    stream: &Stream,
    dev: &Device,
    cfg: &TileConfig,
    p: Option<&OperandView>,
    q: Option<&OperandView>,
) -> Result<Packed> {
    let Some(k) = p.or(q).map(|v| v.k) else {
        return Ok(Packed::none());
    };
    let (bm, bn, bk) = (cfg.bm as usize, cfg.bn as usize, cfg.bk as usize);
    let parts = cfg.family.parts() as usize;
    let num_kt = k.div_ceil(bk);
    let mp = p.map_or(0, |v| v.rows.div_ceil(bm) * bm);
    let np = q.map_or(0, |v| v.rows.div_ceil(bn) * bn);
    if num_kt > u32::MAX as usize / 2 || (mp + np) / PACK_ROWS > MAX_GRID_Y {
        return Err(Error::invalid(
            "gemm",
            format!(
                "operands of {} and {} rows with k = {k} are too large for the wgmma operand pack \
                 (at most {} rows together); use {}=mma",
                mp,
                np,
                MAX_GRID_Y * PACK_ROWS,
                super::path::TF32_PATH_ENV
            ),
        ));
    }
    let (ep, eq) = (p.map_or(0, |v| v.entries), q.map_or(0, |v| v.entries));
    let (per_p, per_q) = (parts * mp * num_kt * bk, parts * np * num_kt * bk);
    let q_offset = ep * per_p;
    let elements = q_offset + eq * per_q;
    // Every element of the buffer is written by the pack kernel below (its grid covers every
    // (entry, 64-row block, k tile) of the packed operands) before the GEMM kernel reads it,
    // both on this stream.
    let buf = dev
        .allocator()
        .alloc_for(&current_owner(), elements * 4, stream)?;
    let dst = buf.ptr();
    let kernel = kernels::pack_instantiation(cfg).load(dev)?;
    let args = pack_args(p, q, dst, q_offset, num_kt);
    let lc = super::launch::nonempty(
        LaunchConfig::new(
            (
                num_kt as u32,
                ((mp + np) / PACK_ROWS) as u32,
                ep.max(eq) as u32,
            ),
            (256, 1, 1),
        ),
        &kernels::pack_instantiation(cfg).expr,
    )?;
    // SAFETY: the caller's contract (the views of P and Q lie within live device memory of
    // the stream's device until the work has run) covers the reads; `dst` is this call's own
    // allocation of `elements` floats, which the grid covers exactly.
    unsafe { kernel.launch_unchecked(stream.cuda(), lc, &args) }?;
    let stride = |v: Option<&OperandView>, per: usize| match v {
        Some(v) if !v.broadcast() => per,
        _ => 0,
    };
    Ok(Packed {
        p: if p.is_some() { dst } else { 0 },
        q: if q.is_some() {
            dst + (q_offset * 4) as u64
        } else {
            0
        },
        stride_p: stride(p, per_p),
        stride_q: stride(q, per_q),
        _buf: Some(buf),
    })
}

/// Arguments of `gemm_wgmma_pack`: P (unless `None`: 0 rows) into `dst`, Q (likewise) into
/// `dst + q_offset` elements.
fn pack_args(
    p: Option<&OperandView>,
    q: Option<&OperandView>,
    dst: u64,
    q_offset: usize,
    num_kt: usize,
) -> Vec<KernelArg> {
    let k = p.or(q).map_or(0, |v| v.k);
    let mut args = Vec::new();
    for (v, at) in [(p, dst), (q, dst + (q_offset * 4) as u64)] {
        let none = OperandView {
            ptr: 0,
            rows: 0,
            k,
            ld: 0,
            stride: 0,
            entries: 0,
            row_contig: false,
        };
        let v = v.copied().unwrap_or(none);
        args.extend([
            KernelArg::Ptr(v.ptr),
            KernelArg::Ptr(at),
            (v.rows as i32).into(),
            (v.ld as i32).into(),
            (v.stride as i64).into(),
            (v.row_contig as i32).into(),
            (v.entries as i32).into(),
        ]);
    }
    args.push((k as i32).into());
    args.push((num_kt as i32).into());
    args
}

#[cfg(test)]
impl Packed {
    /// Packed operands at fixed addresses without a buffer (argument-list tests).
    pub(crate) fn for_test(p: u64, q: u64) -> Packed {
        Packed {
            _buf: None,
            p,
            q,
            stride_p: 0,
            stride_q: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::desc::RawGemm;
    use crate::gemm::operand::a_and_bt;
    use crate::gemm::plan::{WGMMA3_CONFIGS, WGMMA_CONFIGS};
    use gpukit_jit::signature::parse_kernels;

    #[test]
    fn pack_arguments_match_the_kernel_signature() {
        let g = RawGemm::contiguous(8, 8, 8, 256, 512, 4096);
        let (a, bt) = a_and_bt(&g, 0, 1);
        for cfg in WGMMA_CONFIGS.iter().chain(WGMMA3_CONFIGS.iter()) {
            let inst = kernels::pack_instantiation(cfg);
            let sig = parse_kernels(inst.source())
                .into_iter()
                .find(|k| k.name == kernels::PACK_PROGRAM)
                .unwrap()
                .instantiate(&inst.expr);
            for (p, q) in [(Some(&a), Some(&bt)), (None, Some(&a)), (Some(&bt), None)] {
                let args = pack_args(p, q, 8192, 64, 1);
                gpukit_jit::check_args(&sig, &inst.expr, &args).unwrap();
                // An operand not packed has no rows (the kernel's grid skips it).
                if p.is_none() {
                    assert_eq!(args[2], KernelArg::from(0i32));
                }
            }
        }
    }
}
