//! GEMM: FP32 and TF32 kernels of our own beside cuBLAS.

pub mod config;
pub mod kernels;
pub mod raw;

pub use raw::{BlasType, Precision, RawGemm, Transpose};
