//! Which CUDA libraries can be loaded here.
//!
//! cudarc loads libcuda, libnvrtc, libcublas and libcusolver lazily and **panics** when one is
//! missing. Every gpukit entry point therefore asks these functions first and returns
//! [`Error::LibraryMissing`] instead. Each probe runs once per process.

use crate::error::{Error, Result};
use std::sync::OnceLock;

macro_rules! probe {
    ($(#[$doc:meta])* $fn_name:ident, $check:ident, $present:path, $lib:literal, $hint:literal) => {
        $(#[$doc])*
        pub fn $fn_name() -> bool {
            static PRESENT: OnceLock<bool> = OnceLock::new();
            // SAFETY: `is_culib_present` only tries to dlopen the library by its candidate
            // names and drops the handle; it calls no CUDA function.
            *PRESENT.get_or_init(|| unsafe { $present() })
        }

        #[doc = concat!("Returns `Err(Error::LibraryMissing)` unless ", $lib, " can be loaded.")]
        pub fn $check() -> Result<()> {
            if $fn_name() {
                Ok(())
            } else {
                Err(Error::LibraryMissing { library: $lib, hint: $hint })
            }
        }
    };
}

probe!(
    /// True when the CUDA driver library (libcuda.so) can be loaded.
    driver_present,
    ensure_driver,
    cudarc::driver::sys::is_culib_present,
    "libcuda (the NVIDIA driver)",
    "no NVIDIA driver on this machine; GPU work needs a machine with an NVIDIA GPU and driver"
);
probe!(
    /// True when NVRTC (libnvrtc.so) can be loaded.
    nvrtc_present,
    ensure_nvrtc,
    cudarc::nvrtc::sys::is_culib_present,
    "libnvrtc",
    "install the CUDA toolkit or `pip install nvidia-cuda-nvrtc==13.0.88` and put its nvidia/cu13/lib on LD_LIBRARY_PATH"
);
probe!(
    /// True when cuBLAS (libcublas.so) can be loaded.
    cublas_present,
    ensure_cublas,
    cudarc::cublas::sys::is_culib_present,
    "libcublas",
    "install the CUDA toolkit's cuBLAS (or the nvidia-cublas wheel) and make it visible to the loader"
);

probe!(
    /// True when cuSOLVER (libcusolver.so) can be loaded.
    cusolver_present,
    ensure_cusolver,
    cudarc::cusolver::sys::is_culib_present,
    "libcusolver",
    "install the CUDA toolkit's cuSOLVER (or the nvidia-cusolver wheel) and make it visible to the loader"
);

/// The driver's `cuDriverGetVersion` (13000 for CUDA 13.0), or 0 without a loadable driver or
/// when it cannot be read. Read once per process; never panics (the library is probed first).
pub fn driver_version() -> i32 {
    static V: OnceLock<i32> = OnceLock::new();
    *V.get_or_init(|| {
        if !driver_present() {
            return 0;
        }
        let mut v = 0;
        // SAFETY: libcuda loads (checked above); cuDriverGetVersion exists in every driver, needs
        // no cuInit, and writes one int into `v`, which outlives the call.
        let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
        if status == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            v
        } else {
            0
        }
    })
}

/// True when this process can reach a CUDA driver that reports at least one device.
///
/// Checks library presence first, so this never panics.
pub fn gpu_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if !driver_present() {
            return false;
        }
        cudarc::driver::result::init().is_ok()
            && cudarc::driver::result::device::get_count()
                .map(|n| n > 0)
                .unwrap_or(false)
    })
}
