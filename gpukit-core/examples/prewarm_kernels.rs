//! Compiles every built-in gpukit-core kernel into the kernel cache (`GPUKIT_CACHE_DIR`) for an
//! architecture, so that the first use on a GPU host loads instead of compiling. Runs without a
//! GPU (NVRTC only).
//!
//! ```text
//! GPUKIT_CACHE_DIR=/tmp/kcache cargo run -p gpukit-core --example prewarm_kernels -- sm_90
//! ```

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let arch = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sm_90".to_string());
    let arch: gpukit_core::Arch = match arch.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("prewarm_kernels: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !gpukit_jit::libs::nvrtc_present() {
        println!("prewarm_kernels: NVRTC is not available here; nothing to do.");
        return ExitCode::SUCCESS;
    }
    let t = Instant::now();
    match gpukit_core::kernels::precompile(arch) {
        Ok(n) => {
            println!(
                "compiled {n} built-in programs for {arch} in {:.1} s (cache: {:?})",
                t.elapsed().as_secs_f64(),
                gpukit_jit::KernelCache::global()
                    .ok()
                    .and_then(|c| c.disk_dir().map(|d| d.to_path_buf()))
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("prewarm_kernels failed: {e}");
            ExitCode::FAILURE
        }
    }
}
