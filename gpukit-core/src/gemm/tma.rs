//! Tensor maps (TMA descriptors) through which the `wgmma` TF32 kernel reads a K-major A in
//! place, instead of packing it first.
//!
//! The map describes A as a 3-D tensor `(k, m, batch)` of f32 with row stride `lda` and batch
//! stride `stride_a`, read in boxes of 32 k x 128 rows with the 128-byte swizzle: a box lands in
//! shared memory exactly in the layout the pack would have written (row r at byte r * 128, its
//! 16-byte chunk c at c ^ (r & 7)), with zeros beyond M and K. The kernel rounds the values to
//! TF32 on their way into registers.

use super::desc::RawGemm;
use crate::error::{Error, Result};
use cudarc::driver::sys;

/// Rows of op(A) per box (the block tile's M).
pub const BOX_ROWS: u32 = 128;
/// K per box (one 128-byte swizzle row of f32).
pub const BOX_K: u32 = 32;

/// True when the driver has `cuTensorMapEncodeTiled` (CUDA 12.0 and later). Calling it through
/// cudarc on an older driver would panic.
pub fn driver_has_tensor_maps() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        if !gpukit_jit::libs::driver_present() {
            return false;
        }
        let mut v = 0i32;
        // SAFETY: libcuda is present (checked above); the out-pointer is valid.
        let r = unsafe { sys::cuDriverGetVersion(&mut v) };
        r == sys::CUresult::CUDA_SUCCESS && v >= 12000
    })
}

/// The encoded tensor map of A for `g` (all batch entries; the kernel picks the entry by its
/// third coordinate), as the 128 bytes the kernel takes by value. Errors when the driver lacks
/// tensor maps or rejects the layout; callers then pack A instead.
pub fn a_tensor_map(g: &RawGemm) -> Result<Vec<u8>> {
    if !driver_has_tensor_maps() {
        return Err(Error::invalid(
            "gemm",
            "the CUDA driver is older than 12.0 and has no tensor maps (cuTensorMapEncodeTiled)",
        ));
    }
    if !g.a_tensor_mappable() || g.m == 0 || g.k == 0 {
        return Err(Error::invalid(
            "gemm",
            format!(
                "A ({}x{}, lda {}, transposed: {}) cannot be read through a tensor map",
                g.m,
                g.k,
                g.lda,
                g.trans_a.is_yes()
            ),
        ));
    }
    let batched = g.batch > 1 && g.stride_a != 0;
    let row_bytes = 4 * g.lda as u64;
    // A single (or broadcast) entry still needs a valid third stride: the whole matrix, rounded
    // to the 16-byte stride granule.
    let batch_bytes = if batched {
        4 * g.stride_a as u64
    } else {
        (row_bytes * g.m as u64).div_ceil(16).max(1) * 16
    };
    let dims: [u64; 3] = [
        g.k as u64,
        g.m as u64,
        if batched { g.batch as u64 } else { 1 },
    ];
    let strides: [u64; 2] = [row_bytes, batch_bytes];
    let boxes: [u32; 3] = [BOX_K, BOX_ROWS, 1];
    let element_strides: [u32; 3] = [1, 1, 1];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: libcuda has the entry point (driver >= 12.0, checked); every array has the length
    // the rank (3) requires; `map` is a writable, 128-byte aligned CUtensorMap; the global
    // address is only recorded (the kernel that reads through the map runs on memory the
    // caller guarantees).
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            3,
            g.a as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::invalid(
            "gemm",
            format!(
                "cuTensorMapEncodeTiled rejected A (dims {dims:?}, strides {strides:?} B): {r:?}"
            ),
        ));
    }
    // SAFETY: initialised by the successful call above (and zeroed before).
    let map = unsafe { map.assume_init() };
    Ok(map.opaque.iter().flat_map(|w| w.to_ne_bytes()).collect())
}
