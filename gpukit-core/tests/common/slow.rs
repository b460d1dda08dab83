//! A kernel that spins for a while before it writes: work still running when the next
//! operation is queued, so that missing stream ordering shows up as wrong values.

use gpukit_core::{CompileOptions, Device, GpuArray, Kernel, LaunchConfig, Stream};

const SOURCE: &str = r#"
extern "C" __global__ void slow_fill(float* x, float v, long long n, long long spin) {
    long long t0 = clock64();
    while (clock64() - t0 < spin) { }
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] = v;
    }
}
"#;

/// About 100 ms of spinning at GPU clocks near 2 GHz.
pub const SPIN: i64 = 200_000_000;

pub fn kernel(dev: &Device) -> Kernel {
    dev.load_kernel(SOURCE, "slow_fill", &CompileOptions::new(), "slow_fill")
        .expect("slow_fill compiles")
}

pub fn config(n: usize) -> LaunchConfig {
    LaunchConfig::for_elements(n.min(1 << 16), 256)
}

/// Queues `x[:] = v` on `stream` after spinning (a safe, checked launch: `x` is entered into
/// the stream order of its buffer).
pub fn slow_fill(dev: &Device, x: &mut GpuArray<f32>, v: f32, stream: &Stream) {
    slow_fill_for(dev, x, v, stream, SPIN);
}

/// [`slow_fill`] spinning `spin` GPU clocks first.
pub fn slow_fill_for(dev: &Device, x: &mut GpuArray<f32>, v: f32, stream: &Stream, spin: i64) {
    let n = x.len();
    kernel(dev)
        .launch(
            stream.cuda(),
            config(n),
            gpukit_jit::args![x, v, n as i64, spin],
        )
        .expect("slow_fill launches");
}
