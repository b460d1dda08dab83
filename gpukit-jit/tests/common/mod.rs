//! Shared helpers for gpukit-jit's integration tests.
#![allow(dead_code)]

use gpukit_jit::CompileOptions;

/// The test kernels (scale, axpy<T>, reverse_smem).
pub const KERNELS: &str = include_str!("../kernels/test_kernels.cu");

/// Options that supply the in-memory header the test kernels include.
pub fn options() -> CompileOptions {
    CompileOptions::new().header("scale_factor.h", "#define SCALE_UNIT 1.0f\n")
}

/// A fresh, empty cache directory.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("creating a temporary directory")
}
