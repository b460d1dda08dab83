//! # gpukit
//!
//! One embeddable, feature-gated GPU toolkit. Each member crate is re-exported behind a feature:
//!
//! | feature   | crate            | what it gives                                                     |
//! |-----------|------------------|-------------------------------------------------------------------|
//! | `jit`     | [`jit`]          | NVRTC compilation, a two-level kernel cache, typed kernel launch  |
//! | `core`    | [`core`]         | devices, streams, `GpuArray<T>`, caching allocator, GEMM          |
//! | `sched`   | [`sched`]        | QoS scheduler with admission control and SM partitions            |
//! | `mutex`   | [`mutex`]        | `GpuMutex::acquire(n)`: fair, crash-safe device locks             |
//! | `offload` | [`offload`]      | calibrated BLAS/LAPACK dispatcher (CPU or cuBLAS/cuSOLVER)        |
//! | `full`    | all of the above | (the default)                                                     |
//!
//! Without a CUDA driver every GPU entry point returns a typed error; nothing panics.

#[cfg(feature = "core")]
#[doc(inline)]
pub use gpukit_core as core;
#[cfg(feature = "jit")]
#[doc(inline)]
pub use gpukit_jit as jit;
#[cfg(feature = "mutex")]
#[doc(inline)]
pub use gpukit_mutex as mutex;
#[cfg(feature = "offload")]
#[doc(inline)]
pub use gpukit_offload as offload;
#[cfg(feature = "sched")]
#[doc(inline)]
pub use gpukit_sched as sched;
