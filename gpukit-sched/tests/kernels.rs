//! The test and bench kernels compile (NVRTC, no GPU needed) for sm_80 and sm_90 without
//! register spills.

mod common;
use common::kernels::{NAMES, PROGRAM, SOURCE};
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
        for k in NAMES {
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
