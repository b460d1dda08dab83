//! The seed's `scale` kernel, end to end: compile with NVRTC (cached on disk), load, launch with
//! named, typed arguments checked against the parsed signature (`float* x` takes `&mut` device
//! memory of f32), read back and verify.
//!
//! ```text
//! cargo run --release --example custom_kernel
//! ```

use gpukit::jit::{self, KernelCache, LaunchConfig};
use std::process::ExitCode;
use std::time::Instant;

const SCALE: &str = r#"
extern "C" __global__
void scale(float* x, float factor, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) x[idx] *= factor;
}
"#;

fn main() -> ExitCode {
    if !jit::libs::gpu_available() {
        println!("custom_kernel: no CUDA driver or GPU on this machine; nothing to run.");
        if jit::libs::nvrtc_present() {
            match jit::compile(
                SCALE,
                "scale",
                jit::Arch::new(9, 0),
                &jit::CompileOptions::new(),
            ) {
                Ok(m) => println!(
                    "NVRTC is here: compiled `scale` for {} ({} bytes of CUBIN).",
                    m.target,
                    m.image.len()
                ),
                Err(e) => println!("NVRTC is here but compiling failed: {e}"),
            }
        }
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("custom_kernel failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = jit::open_context(0)?;
    println!("device 0: {}", ctx.name()?);
    let t = Instant::now();
    let scale = jit::jit(&ctx, SCALE, "scale")?;
    println!(
        "jit(scale): {:.2} ms (cache: {:?})",
        t.elapsed().as_secs_f64() * 1e3,
        KernelCache::global()?.stats()
    );

    let n = 1 << 20;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let stream = ctx.default_stream();
    let mut x = stream.clone_htod(&host)?;
    scale
        .call()
        .arg("x", &mut x)
        .arg("factor", 0.5f32)
        .arg("n", n as i32)
        .launch(&stream, LaunchConfig::for_elements(n, 256))?;
    let back = stream.clone_dtoh(&x)?;
    let wrong = back
        .iter()
        .zip(&host)
        .filter(|(b, h)| **b != **h * 0.5)
        .count();
    println!(
        "scale(x, factor=0.5, n={n}): {wrong} wrong elements; x[1000] = {}",
        back[1000]
    );

    // A wrong call is an error before the launch, not a crash.
    let err = scale
        .call()
        .arg("x", &mut x)
        .arg("factor", 1i32)
        .arg("n", n as i32)
        .launch(&stream, LaunchConfig::for_elements(n, 256))
        .expect_err("an int for a float parameter must be rejected");
    println!("a wrong argument is caught before launch: {err}");
    let halves = stream.clone_htod(&vec![0.0f64; n])?;
    let err = scale
        .call()
        .arg("x", &halves)
        .arg("factor", 1.0f32)
        .arg("n", n as i32)
        .launch(&stream, LaunchConfig::for_elements(n, 256))
        .expect_err("read-only f64 memory for `float* x` must be rejected");
    println!("so is memory of the wrong type or access: {err}");
    if wrong != 0 {
        return Err(format!("{wrong} elements were not scaled").into());
    }
    Ok(())
}
