//! # gpukit-core
//!
//! Devices, streams and events; `GpuArray<T>` with NumPy-like operations; a caching device
//! allocator with per-owner accounting and quotas; pinned, stream-ordered transfers. GEMM lives
//! in [`gemm`].
//!
//! The shared runtime that gpukit-sched and gpukit-offload stand on lives here too, once per
//! process: [`DeviceAttributes`] (read once per device), the [`PinnedPool`] of page-locked host
//! buffers ([`Device::pinned`]) and the cuBLAS / cuSOLVER handle cache ([`handles`]).
//!
//! Every entry point checks for the CUDA driver first and returns [`Error::NoDriver`] instead of
//! panicking on a machine without one.
//!
//! ```no_run
//! use gpukit_core::{Device, GpuArray};
//! let dev = Device::open(0)?;
//! let a = GpuArray::<f32>::ones(&dev, &[2, 3])?;
//! let b = GpuArray::<f32>::arange(&dev, 0.0, 3.0, 1.0)?;   // shape [3], broadcast
//! let c = (&a + &b)?;
//! let c = (&c * 2.0)?;
//! assert_eq!(c.to_vec()?, vec![2.0, 4.0, 6.0, 2.0, 4.0, 6.0]);
//! assert_eq!(c.sum()?.item()?, 24.0);
//! # Ok::<(), gpukit_core::Error>(())
//! ```
//!
//! Kernels are CUDA C++ in `kernels/*.cu`, compiled through gpukit-jit at first use.

pub mod alloc;
mod array;
pub mod attributes;
mod device;
pub mod dtype;
mod error;
pub mod gemm;
pub mod handles;
pub mod kernels;
pub mod pinned;
pub mod shape;
mod transfer;

pub use alloc::{
    current_owner, AllocHook, AllocStats, Allocator, DeviceBuffer, OwnerId, OwnerUsage,
};
pub use array::{where_, BinaryOp, CompareOp, GpuArray, ReduceOp, UnaryOp};
pub use attributes::DeviceAttributes;
pub use device::{Device, Event, Stream};
pub use dtype::{DType, DTypeKind};
pub use error::{Error, Result};
pub use gpukit_jit::{Arch, CompileOptions, Kernel, KernelArg, LaunchConfig};
pub use half::{bf16, f16};
pub use handles::{BlasHandle, SolverHandle};
pub use pinned::{PinnedBuffer, PinnedKind, PinnedPool};
