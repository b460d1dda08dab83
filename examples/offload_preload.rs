//! The gpukit-offload LD_PRELOAD shim (a cdylib built with the examples:
//! `target/<profile>/examples/liboffload_preload.so`).
//!
//! It exports the Fortran BLAS/LAPACK names (`dgemm_`, `dgemm_64_`), the numpy/scipy wheel names
//! (`scipy_dgemm_`, `scipy_dgemm_64_`) and the CBLAS names (`cblas_dgemm`,
//! `scipy_cblas_dgemm64_`, ...) of every routine gpukit-offload knows, generated from one table by
//! [`gpukit_offload::export_blas_symbols!`]. All logic lives in the library; this file only
//! instantiates the wrappers and hooks process start and exit.
//!
//! Use it through `offload run CMD ARGS...`, or directly:
//! `LD_PRELOAD=target/release/examples/liboffload_preload.so GPUKIT_OFFLOAD_LOG=summary python3 x.py`.

gpukit_offload::export_blas_symbols!();

extern "C" fn offload_shim_init() {
    // SAFETY: runs once, from the shim's `.init_array` entry below, before the program's main
    // (and so before any thread of the program touches the environment).
    unsafe { gpukit_offload::interpose::init() };
}

/// The shim's `__cxa_atexit` (`atexit` and C++ static constructors call it): exit handlers that
/// the CUDA libraries register on gpukit-offload's start-up threads run after its exit hook, which
/// waits for those threads, so a program that exits during the start-up never has the libraries
/// torn down under them (see `gpukit_offload::exit_hook`).
///
/// # Safety
/// `__cxa_atexit`'s contract.
#[no_mangle]
pub unsafe extern "C" fn __cxa_atexit(
    func: gpukit_offload::exit_hook::ExitFn,
    arg: *mut std::ffi::c_void,
    dso: *mut std::ffi::c_void,
) -> std::ffi::c_int {
    // SAFETY: forwarded (the function never unwinds).
    unsafe { gpukit_offload::exit_hook::cxa_atexit(func, arg, dso) }
}

/// Runs when the shim is loaded: creates the dispatcher (reading the environment and profile,
/// printing configuration problems) and registers the exit hook (summary, learned corrections).
#[used]
#[link_section = ".init_array"]
static OFFLOAD_SHIM_INIT: extern "C" fn() = offload_shim_init;
