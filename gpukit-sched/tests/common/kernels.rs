//! The CUDA kernels gpukit-sched's GPU tests and benchmark use (compiled through gpukit-jit):
//! `record_smid` (each block writes its `%smid`), `fma_spin` (compute-bound), `spin_cycles`
//! (hog / latency probe), `noop` (launch overhead), `wait_flag` (runs until the host sets a
//! flag: a kernel that never ends until released) and `poke` (a store to any address: an
//! illegal address on purpose). Test support, not part of the crate's API: the tests and the
//! bench include this file by path.

/// Source of the kernels (`kernels/sched_kernels.cu`).
pub const SOURCE: &str = include_str!("../../kernels/sched_kernels.cu");

/// Program name used for compilation and caching.
pub const PROGRAM: &str = "gpukit_sched_kernels";

/// The kernels, loaded for a device.
#[derive(Debug, Clone)]
pub struct TestKernels {
    /// `record_smid(unsigned* out, int n, long long spin)`.
    pub record_smid: gpukit_jit::Kernel,
    /// `fma_spin(float* out, int iters)`.
    pub fma_spin: gpukit_jit::Kernel,
    /// `spin_cycles(unsigned* flag, long long cycles)`.
    pub spin_cycles: gpukit_jit::Kernel,
    /// `noop(int x)`.
    pub noop: gpukit_jit::Kernel,
    /// `wait_flag(const volatile unsigned* flag)`: spins until `*flag != 0`.
    pub wait_flag: gpukit_jit::Kernel,
    /// `poke(unsigned* p, unsigned v)`: `*p = v`.
    pub poke: gpukit_jit::Kernel,
}

/// The kernels' names.
pub const NAMES: [&str; 6] = [
    "record_smid",
    "fma_spin",
    "spin_cycles",
    "noop",
    "wait_flag",
    "poke",
];

impl TestKernels {
    /// Compiles (cached) and loads the kernels for `dev`. They are context-independent, so
    /// they launch on green-context streams too.
    pub fn load(dev: &gpukit_core::Device) -> gpukit_sched::Result<Self> {
        let m = gpukit_jit::load_source(
            dev.context(),
            SOURCE,
            PROGRAM,
            &gpukit_jit::CompileOptions::new(),
        )?;
        Ok(TestKernels {
            record_smid: m.kernel("record_smid")?,
            fma_spin: m.kernel("fma_spin")?,
            spin_cycles: m.kernel("spin_cycles")?,
            noop: m.kernel("noop")?,
            wait_flag: m.kernel("wait_flag")?,
            poke: m.kernel("poke")?,
        })
    }
}
