//! The CUDA kernels gpukit-sched's tests, examples and benchmark use (compiled through
//! gpukit-jit): `record_smid` (each block writes its `%smid`), `fma_spin` (compute-bound),
//! `spin_cycles` (hog / latency probe) and `noop` (launch overhead).

/// Source of the kernels (`kernels/sched_kernels.cu`).
pub const SOURCE: &str = include_str!("../kernels/sched_kernels.cu");

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
}

impl TestKernels {
    /// Compiles (cached) and loads the kernels for `dev`. They are context-independent, so
    /// they launch on green-context streams too.
    pub fn load(dev: &gpukit_core::Device) -> crate::Result<Self> {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpukit_jit::{compile, Arch, CompileOptions, Output};

    #[test]
    fn kernels_compile_for_sm80_and_sm90() {
        if !gpukit_jit::testing::nvrtc("sched kernels compile") {
            return;
        }
        for arch in [Arch::new(8, 0), Arch::new(9, 0)] {
            let m = compile(
                SOURCE,
                PROGRAM,
                arch,
                &CompileOptions::new()
                    .output(Output::Cubin)
                    .verbose_ptxas(true),
            )
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
            let names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
            for k in ["record_smid", "fma_spin", "spin_cycles", "noop"] {
                assert!(names.contains(&k), "{arch}: {k} missing from {names:?}");
            }
            assert!(
                !m.log.contains("spill stores") || m.log.contains("0 bytes spill stores"),
                "{arch}: spills\n{}",
                m.log
            );
            assert!(!m.image.is_empty());
        }
    }
}
