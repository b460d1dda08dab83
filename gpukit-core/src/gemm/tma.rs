//! Tensor maps (TMA descriptors) through which the `wgmma` TF32 kernel reads its operands in
//! place instead of packing them, and the probe that tells whether this GPU's tensor copies round
//! to TF32.
//!
//! A map describes one [`OperandView`] as a 3-D tensor of f32, batch entries in its third
//! dimension:
//! - K-major operand (`(k, rows, batch)`, row stride `ld`): boxes of 32 k x `box_rows` rows with
//!   the 128-byte swizzle, which land in shared memory exactly in the layout the pack writes (row
//!   r at byte r * 128, its 16-byte chunk c at c ^ (r & 7)) and wgmma's descriptors read;
//! - MN-major operand (`(rows, k, batch)`, k stride `ld`): boxes of 32 rows x 32 k, `[k][32
//!   rows]` with the 128-byte swizzle (whole 128-byte lines of each k row of the operand), from
//!   which each consumer thread loads its two adjacent rows per k.
//!
//! Elements beyond the operand (rows, K) are zero-filled. With [`Rounding::Tf32`] the map's type
//! is TFLOAT32: on devices where [`tensor_copies_round`] holds, the copy engine rounds every
//! value to TF32 (round to nearest even; NaN and infinity kept) on its way into shared memory.

use super::kernels;
use super::operand::OperandView;
use crate::device::Device;
use crate::error::{DriverContext, Error, Result};
use cudarc::driver::sys;
use cudarc::driver::DevicePtr;
use gpukit_jit::{KernelArg, LaunchConfig};
use std::collections::HashMap;
use std::sync::Mutex;

/// K per box (one 128-byte swizzle row of f32).
pub const BOX_K: u32 = 32;
/// Rows per box of an MN-major operand (two consumer warps' 16 rows each: one 128-byte line).
pub const MN_BOX_ROWS: u32 = 32;

/// What the tensor copy does to the values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounding {
    /// Copies f32 as is (FLOAT32).
    None,
    /// TFLOAT32: rounds to TF32 where [`tensor_copies_round`] holds.
    Tf32,
}

/// True when the driver has `cuTensorMapEncodeTiled` (CUDA 12.0 and later). Calling it through
/// cudarc on an older driver would panic.
pub fn driver_has_tensor_maps() -> bool {
    gpukit_jit::libs::driver_version() >= 12000
}

/// The encoded map of a K-major operand (`op.row_contig == false`), boxes of 32 k x `box_rows`.
pub(crate) fn kmajor_map(op: &OperandView, box_rows: u32, rounding: Rounding) -> Result<Vec<u8>> {
    if op.row_contig {
        return Err(Error::invalid(
            "gemm",
            "internal: a K-major tensor map was asked for an MN-major operand",
        ));
    }
    let dims = [op.k as u64, op.rows as u64, op.entries as u64];
    let boxes = [BOX_K, box_rows, 1];
    encode(
        op,
        dims,
        boxes,
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        rounding,
    )
}

/// The encoded map of an MN-major operand (`op.row_contig == true`), boxes of 32 rows x 32 k.
pub(crate) fn mnmajor_map(op: &OperandView, rounding: Rounding) -> Result<Vec<u8>> {
    if !op.row_contig {
        return Err(Error::invalid(
            "gemm",
            "internal: an MN-major tensor map was asked for a K-major operand",
        ));
    }
    let dims = [op.rows as u64, op.k as u64, op.entries as u64];
    let boxes = [MN_BOX_ROWS, BOX_K, 1];
    encode(
        op,
        dims,
        boxes,
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        rounding,
    )
}

/// The encoded map of a GEMM output written by the `wgmma` kernel's copies (FLOAT32, boxes of 32
/// x 32 floats with the 128-byte swizzle): `outer` rows of `inner` contiguous floats, row stride
/// `ld`, `entries` output slices `stride` floats apart, at `ptr` (C, or a split-K workspace).
/// Swapped products write C^T's layout: `inner` is then P's extent and `outer` Q's.
pub(crate) fn output_map(
    ptr: u64,
    inner: usize,
    outer: usize,
    ld: usize,
    stride: usize,
    entries: usize,
) -> Result<Vec<u8>> {
    // The same layout as a K-major operand of `outer` rows and `inner` k, boxes of 32 rows.
    let view = OperandView {
        ptr,
        rows: outer,
        k: inner,
        ld,
        stride,
        entries,
        row_contig: false,
    };
    kmajor_map(&view, OUTPUT_BOX_ROWS, Rounding::None)
}

/// Rows (and columns) of a box of [`output_map`]: 32 floats, one 128-byte swizzle row.
const OUTPUT_BOX_ROWS: u32 = 32;

/// Encodes the 3-D map of `op` (dimension 1's stride: `op.ld`, dimension 2's: `op.stride`).
fn encode(
    op: &OperandView,
    dims: [u64; 3],
    boxes: [u32; 3],
    swizzle: sys::CUtensorMapSwizzle,
    rounding: Rounding,
) -> Result<Vec<u8>> {
    if !driver_has_tensor_maps() {
        return Err(Error::invalid(
            "gemm",
            "the CUDA driver is older than 12.0 and has no tensor maps (cuTensorMapEncodeTiled)",
        ));
    }
    let row_bytes = 4 * op.ld as u64;
    let fits = op.ptr.is_multiple_of(16)
        && row_bytes.is_multiple_of(16)
        && (op.entries <= 1 || (4 * op.stride as u64).is_multiple_of(16))
        && dims.iter().all(|&d| d >= 1);
    if !fits {
        return Err(Error::invalid(
            "gemm",
            format!(
                "an operand at {:#x} ({} x {}, ld {}, batch stride {}) cannot be read through a \
                 tensor map (16-byte alignment rules)",
                op.ptr, op.rows, op.k, op.ld, op.stride
            ),
        ));
    }
    // A single (or broadcast) entry still needs a valid third stride: the whole matrix, rounded
    // to the 16-byte stride granule.
    let batch_bytes = if op.entries > 1 {
        4 * op.stride as u64
    } else {
        (row_bytes * dims[1]).div_ceil(16).max(1) * 16
    };
    let strides: [u64; 2] = [row_bytes, batch_bytes];
    let element_strides: [u32; 3] = [1, 1, 1];
    let data_type = match rounding {
        Rounding::None => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        Rounding::Tf32 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
    };
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: libcuda has the entry point (driver >= 12.0, checked); every array has the length
    // the rank (3) requires; `map` is a writable, 128-byte aligned CUtensorMap; the global
    // address is only recorded (the kernel that reads through the map runs on memory the
    // caller guarantees).
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            3,
            op.ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::invalid(
            "gemm",
            format!(
                "cuTensorMapEncodeTiled rejected an operand (dims {dims:?}, strides {strides:?} \
                 B, box {boxes:?}): {r:?}"
            ),
        ));
    }
    // SAFETY: initialised by the successful call above (and zeroed before).
    let map = unsafe { map.assume_init() };
    Ok(map.opaque.iter().flat_map(|w| w.to_ne_bytes()).collect())
}

/// The probe's inputs (f32 bit patterns) and what TF32 round-to-nearest-even makes of them:
/// below, at and above half a TF32 ulp (ties to even both ways), a carry into the exponent,
/// negative values, a value that rounds up by a whole ulp, infinities and a NaN (any NaN counts).
const PROBE: [(u32, u32); 16] = [
    (0x3f80_0fff, 0x3f80_0000),
    (0x3f80_1000, 0x3f80_0000),
    (0x3f80_1001, 0x3f80_2000),
    (0x3f80_3000, 0x3f80_4000),
    (0x3f80_2fff, 0x3f80_2000),
    (0x3f7f_ffff, 0x3f80_0000),
    (0xbf80_1001, 0xbf80_2000),
    (0xbf80_3000, 0xbf80_4000),
    (0x4049_0fdb, 0x4049_0000),
    (0x3eaa_aaab, 0x3eaa_a000),
    (0x3f80_1800, 0x3f80_2000),
    (0x4780_0fff, 0x4780_0000),
    (0x7f80_0000, 0x7f80_0000),
    (0xff80_0000, 0xff80_0000),
    (0x7fc0_0000, 0x7fc0_0000),
    (0x3f80_0000, 0x3f80_0000),
];

/// What a device's tensor copies did to the probe's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmaRounding {
    /// Every value came out rounded to TF32, to nearest with ties to even.
    pub rounds: bool,
    /// The values that did not (input, expected, got), for the notes.
    pub mismatches: Vec<(u32, u32, u32)>,
}

/// The probe results per device ordinal (each device is probed once per process).
static PROBED: Mutex<Option<HashMap<usize, TmaRounding>>> = Mutex::new(None);

/// Whether `dev`'s tensor copies round f32 to TF32 for a TFLOAT32 map (the `wgmma` kernel reads
/// its shared-memory operand in place only if they do; the CUDA documentation names the type but
/// not the conversion, so it is checked): the first call per device copies [`PROBE`]'s values
/// through such a map on a stream of its own and compares; later calls return the result.
/// Devices without the `wgmma` kernels (or drivers without tensor maps) report no rounding.
pub fn tensor_copies_round(dev: &Device) -> Result<TmaRounding> {
    let ordinal = dev.ordinal();
    if let Some(r) = PROBED
        .lock()
        .map_err(|_| Error::invalid("gemm", "the tensor-copy probe's lock was poisoned"))?
        .as_ref()
        .and_then(|m| m.get(&ordinal))
    {
        return Ok(r.clone());
    }
    let result = if dev.attributes().supports_wgmma() && driver_has_tensor_maps() {
        probe(dev)?
    } else {
        TmaRounding {
            rounds: false,
            mismatches: Vec::new(),
        }
    };
    PROBED
        .lock()
        .map_err(|_| Error::invalid("gemm", "the tensor-copy probe's lock was poisoned"))?
        .get_or_insert_with(HashMap::new)
        .insert(ordinal, result.clone());
    Ok(result)
}

fn probe(dev: &Device) -> Result<TmaRounding> {
    let stream = dev.new_stream(0)?;
    let s = stream.cuda();
    let input: Vec<f32> = (0..32)
        .map(|i| f32::from_bits(PROBE[i % PROBE.len()].0))
        .collect();
    let src = s
        .clone_htod(&input)
        .ctx("copying the tensor-copy probe's input")?;
    let out = s
        .clone_htod(&[0.0f32; 32])
        .ctx("allocating the tensor-copy probe's output")?;
    let (src_ptr, _src_guard) = src.device_ptr(s);
    let (out_ptr, _out_guard) = out.device_ptr(s);
    let view = OperandView {
        ptr: src_ptr,
        rows: 1,
        k: 32,
        ld: 32,
        stride: 0,
        entries: 1,
        row_contig: false,
    };
    // One box of 32 k x 1 row, unswizzled (a 128-byte row needs no pattern).
    let map = encode(
        &view,
        [32, 1, 1],
        [BOX_K, 1, 1],
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        Rounding::Tf32,
    )?;
    let kernel = kernels::probe_instantiation().load(dev)?;
    let args = vec![KernelArg::Bytes(map), KernelArg::Ptr(out_ptr)];
    // SAFETY: the map describes `src` (32 live floats) and `out` holds 32 floats, both
    // allocations of this stream's device kept alive (with their guards) past the copy back.
    unsafe { kernel.launch_unchecked(s, LaunchConfig::new((1, 1, 1), (32, 1, 1)), &args) }?;
    let got = s
        .clone_dtoh(&out)
        .ctx("reading the tensor-copy probe's output")?;
    let mut mismatches = Vec::new();
    let mut rounds = true;
    for (i, g) in got.iter().enumerate() {
        let (x, want) = PROBE[i % PROBE.len()];
        let ok = if f32::from_bits(want).is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == want
        };
        rounds &= ok;
        if !ok && !mismatches.iter().any(|m: &(u32, u32, u32)| m.0 == x) {
            mismatches.push((x, want, g.to_bits()));
        }
    }
    Ok(TmaRounding { rounds, mismatches })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe's expectations are TF32 round-to-nearest-even (checked here against an
    /// independent formulation: nearest TF32 value by distance, ties to an even last bit).
    #[test]
    fn probe_expectations_are_round_to_nearest_even() {
        for (x, want) in PROBE {
            let f = f32::from_bits(x);
            if !f.is_finite() {
                assert_eq!(x, want);
                continue;
            }
            let lo = x & 0xffff_e000;
            let hi = lo + 0x2000;
            let (dl, dh) = (
                (f as f64 - f32::from_bits(lo) as f64).abs(),
                (f32::from_bits(hi) as f64 - f as f64).abs(),
            );
            let nearest = if dl < dh {
                lo
            } else if dh < dl {
                hi
            } else if (lo >> 13) & 1 == 0 {
                lo
            } else {
                hi
            };
            assert_eq!(nearest, want, "{x:#x}");
        }
        // The set tells rounding from truncation and from ties-away rounding.
        assert!(PROBE.iter().any(|&(x, w)| x & 0xffff_e000 != w));
        assert!(PROBE
            .iter()
            .any(|&(x, w)| x & 0x1fff == 0x1000 && w == x & 0xffff_e000));
    }

    #[test]
    fn maps_refuse_the_wrong_layout_and_misaligned_operands() {
        let v = OperandView {
            ptr: 4096,
            rows: 8,
            k: 8,
            ld: 8,
            stride: 0,
            entries: 1,
            row_contig: false,
        };
        assert!(mnmajor_map(&v, Rounding::None).is_err());
        let t = OperandView {
            row_contig: true,
            ..v
        };
        assert!(kmajor_map(&t, 128, Rounding::None).is_err());
        if driver_has_tensor_maps() {
            let bad = OperandView { ld: 7, ..v };
            assert!(kmajor_map(&bad, 128, Rounding::None).is_err());
        }
    }
}
