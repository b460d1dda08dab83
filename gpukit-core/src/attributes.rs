//! What a device can do, read from the driver once per device and shared by every crate.
//!
//! Kernel planners (GEMM tiles, reduction grids), the scheduler (SM counts) and the offload
//! backend read these instead of hard-coding H200 numbers. [`DeviceAttributes::of`] serves code
//! that only holds a cudarc context; [`crate::Device::attributes`] is the same value.

use crate::error::{DriverContext, Result};
use cudarc::driver::sys::CUdevice_attribute as A;
use cudarc::driver::CudaContext;
use gpukit_jit::Arch;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// A device's properties that kernels and planners depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttributes {
    /// The device ordinal.
    pub ordinal: usize,
    /// The device's name (e.g. "NVIDIA H200").
    pub name: String,
    /// Compute capability `(major, minor)`: `(9, 0)` on the H200.
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors (132 on the H200).
    pub multiprocessor_count: u32,
    /// Shared memory a block gets without opting in (48 KiB on every current GPU).
    pub shared_memory_per_block: usize,
    /// The most shared memory a block can opt into with `cuFuncSetAttribute` (227 KiB on
    /// Hopper, 99 KiB on RTX 30/40, 163 KiB on the A100).
    pub shared_memory_per_block_optin: usize,
    /// Shared memory per multiprocessor (228 KiB on Hopper).
    pub shared_memory_per_multiprocessor: usize,
    /// L2 cache size in bytes (60 MiB on the H200).
    pub l2_cache_bytes: usize,
    /// Threads per block at most.
    pub max_threads_per_block: u32,
    /// Resident threads per multiprocessor at most.
    pub max_threads_per_multiprocessor: u32,
    /// 32-bit registers available to one block.
    pub registers_per_block: u32,
    /// 32-bit registers per multiprocessor.
    pub registers_per_multiprocessor: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Copy engines that can run concurrently with kernels.
    pub async_engine_count: u32,
    /// Total device memory in bytes.
    pub total_memory: usize,
}

impl DeviceAttributes {
    /// Reads the attributes of `ctx`'s device from the driver (uncached; see [`of`](Self::of)).
    pub fn query(ctx: &Arc<CudaContext>) -> Result<DeviceAttributes> {
        let get = |a: A, what: &str| -> Result<u32> {
            let v = ctx.attribute(a).ctx(&format!("reading the {what}"))?;
            Ok(v.max(0) as u32)
        };
        let (major, minor) = ctx
            .compute_capability()
            .ctx("reading the compute capability")?;
        Ok(DeviceAttributes {
            ordinal: ctx.ordinal(),
            name: ctx.name().ctx("reading the device name")?,
            compute_capability: (major.max(0) as u32, minor.max(0) as u32),
            multiprocessor_count: get(
                A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                "multiprocessor count",
            )?,
            shared_memory_per_block: get(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
                "shared memory per block",
            )? as usize,
            shared_memory_per_block_optin: get(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                "opt-in shared memory per block",
            )? as usize,
            shared_memory_per_multiprocessor: get(
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                "shared memory per multiprocessor",
            )? as usize,
            l2_cache_bytes: get(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size")? as usize,
            max_threads_per_block: get(
                A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                "threads per block",
            )?,
            max_threads_per_multiprocessor: get(
                A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                "threads per multiprocessor",
            )?,
            registers_per_block: get(
                A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
                "registers per block",
            )?,
            registers_per_multiprocessor: get(
                A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
                "registers per multiprocessor",
            )?,
            warp_size: get(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, "warp size")?,
            async_engine_count: get(A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, "copy engines")?,
            total_memory: ctx.total_mem().ctx("reading the device memory size")?,
        })
    }

    /// The attributes of `ctx`'s device, read once per device ordinal in this process.
    pub fn of(ctx: &Arc<CudaContext>) -> Result<Arc<DeviceAttributes>> {
        static CACHE: OnceLock<Mutex<HashMap<usize, Arc<DeviceAttributes>>>> = OnceLock::new();
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        if let Some(a) = cache.lock().get(&ctx.ordinal()) {
            return Ok(a.clone());
        }
        // Queried outside the lock: the driver calls may take a while and other devices'
        // lookups need not wait. Two racing first lookups both query; the first insert wins.
        let attrs = Arc::new(DeviceAttributes::query(ctx)?);
        Ok(cache.lock().entry(ctx.ordinal()).or_insert(attrs).clone())
    }

    /// The compile target of this device (`sm_90` on the H200).
    pub fn arch(&self) -> Arch {
        Arch::new(self.compute_capability.0, self.compute_capability.1)
    }

    /// Whether the device runs Hopper's `wgmma` and TMA instructions (compute capability 9.0,
    /// code built for `sm_90a`).
    pub fn supports_wgmma(&self) -> bool {
        self.compute_capability == (9, 0)
    }

    /// Whether a kernel needing `bytes` of dynamic shared memory per block can launch here.
    pub fn fits_shared_memory(&self, bytes: usize) -> bool {
        bytes
            <= self
                .shared_memory_per_block_optin
                .max(self.shared_memory_per_block)
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceAttributes;

    fn h200_like() -> DeviceAttributes {
        DeviceAttributes {
            ordinal: 0,
            name: "test".into(),
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

    #[test]
    fn shared_memory_fit_uses_the_opt_in_limit() {
        let a = h200_like();
        assert!(a.fits_shared_memory(200 << 10));
        assert!(!a.fits_shared_memory(228 << 10));
        let rtx = DeviceAttributes {
            compute_capability: (8, 9),
            shared_memory_per_block_optin: 99 << 10,
            ..h200_like()
        };
        assert!(!rtx.fits_shared_memory(128 << 10));
        assert!(!rtx.supports_wgmma());
        assert!(a.supports_wgmma());
        assert_eq!(a.arch(), gpukit_jit::Arch::new(9, 0));
    }
}
