//! # gpukit-core (being built in this session)
//!
//! Devices, streams, `GpuArray<T>`, a caching device allocator, operations and GEMM.

pub mod gemm;
