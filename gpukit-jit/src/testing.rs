//! The workspace's GPU test convention, in one place.
//!
//! A test that needs a GPU starts with `if !gpukit_jit::testing::gpu("test name") { return; }`:
//! where there is no usable CUDA driver it prints why and returns (the test skips), unless
//! `GPUKIT_REQUIRE_GPU=1`, in which case it panics so the test fails. [`nvrtc`] does the same for
//! NVRTC with `GPUKIT_REQUIRE_NVRTC=1` (CI sets it and installs the NVRTC wheel).

use crate::libs;

fn required(var: &str) -> bool {
    matches!(
        std::env::var(var).as_deref().map(str::trim),
        Ok("1") | Ok("true") | Ok("yes")
    )
}

fn gate(test: &str, available: bool, var: &str, what: &str) -> bool {
    if available {
        return true;
    }
    if required(var) {
        panic!("{test}: {what} is required ({var}=1) but not available on this machine");
    }
    eprintln!("SKIPPED {test}: {what} not available on this machine (set {var}=1 to fail instead)");
    false
}

/// Whether a GPU test may run here. Prints the skip reason, or panics under `GPUKIT_REQUIRE_GPU=1`.
pub fn gpu(test: &str) -> bool {
    gate(
        test,
        libs::gpu_available(),
        "GPUKIT_REQUIRE_GPU",
        "a CUDA driver with a GPU",
    )
}

/// Whether an NVRTC test may run here. Prints the skip reason, or panics under
/// `GPUKIT_REQUIRE_NVRTC=1`.
pub fn nvrtc(test: &str) -> bool {
    gate(
        test,
        libs::nvrtc_present(),
        "GPUKIT_REQUIRE_NVRTC",
        "NVRTC (libnvrtc)",
    )
}

/// Whether a test that needs cuBLAS on a GPU may run here (same rules as [`gpu`]).
pub fn cublas(test: &str) -> bool {
    gate(
        test,
        libs::gpu_available() && libs::cublas_present(),
        "GPUKIT_REQUIRE_GPU",
        "a CUDA driver with a GPU and cuBLAS",
    )
}
