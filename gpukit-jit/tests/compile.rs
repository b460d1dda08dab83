//! NVRTC compilation tests: they run here and in CI with the real NVRTC (GPUKIT_REQUIRE_NVRTC=1
//! makes them fail instead of skipping when NVRTC is missing).

mod common;

use common::{options, KERNELS};
use gpukit_jit::{compile, testing, Arch, CompileOptions, Error, KernelArg, Output};

fn sm(s: &str) -> Arch {
    s.parse().expect("valid arch")
}

#[test]
fn ptx_and_cubin_for_sm80_and_sm90a() {
    if !testing::nvrtc("ptx_and_cubin_for_sm80_and_sm90a") {
        return;
    }
    for arch in ["sm_80", "sm_90", "sm_90a"] {
        let ptx = compile(KERNELS, "t", sm(arch), &options().output(Output::Ptx)).unwrap();
        let text = String::from_utf8(ptx.image.clone()).unwrap();
        assert!(
            text.contains(".entry scale"),
            "{arch}: PTX lacks the scale entry"
        );
        let target = arch.trim_start_matches("sm_");
        assert!(
            text.contains(&format!(".target sm_{target}")),
            "{arch}: {}",
            &text[..400.min(text.len())]
        );
        let cubin = compile(KERNELS, "t", sm(arch), &options().output(Output::Cubin)).unwrap();
        assert_eq!(
            &cubin.image[..4],
            b"\x7fELF",
            "{arch}: CUBIN is not an ELF image"
        );
        assert_eq!(cubin.target, sm(arch));
    }
}

const WGMMA: &str = r#"
extern "C" __global__ void fence_only() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
"#;

#[test]
fn hopper_only_code_needs_and_gets_sm_90a() {
    if !testing::nvrtc("hopper_only_code_needs_and_gets_sm_90a") {
        return;
    }
    let target = Arch::new(9, 0).for_source(WGMMA);
    assert_eq!(target.to_string(), "sm_90a");
    compile(WGMMA, "w", target, &CompileOptions::new()).expect("wgmma compiles for sm_90a");
    let err = compile(WGMMA, "w", Arch::new(9, 0), &CompileOptions::new())
        .expect_err("wgmma must not assemble for plain sm_90");
    assert!(err.to_string().contains("w"), "{err}");
}

#[test]
fn compile_error_quotes_the_failing_line_and_names_the_kernel() {
    if !testing::nvrtc("compile_error_quotes_the_failing_line_and_names_the_kernel") {
        return;
    }
    let src = "extern \"C\" __global__ void broken(float* x) {\n    x[0] = fator;\n}\n";
    let err = compile(src, "broken", Arch::new(8, 0), &CompileOptions::new()).unwrap_err();
    match &err {
        Error::Compile {
            program,
            summary,
            log,
        } => {
            assert_eq!(program, "broken");
            assert!(summary.contains("broken.cu:2"), "{summary}");
            assert!(summary.contains("fator"), "{summary}");
            assert!(
                summary.contains("x[0] = fator;"),
                "the source line is quoted: {summary}"
            );
            assert!(log.contains("error"), "{log}");
        }
        other => panic!("expected a compile error, got {other}"),
    }
}

#[test]
fn name_expressions_find_template_instantiations() {
    if !testing::nvrtc("name_expressions_find_template_instantiations") {
        return;
    }
    let opts = options()
        .name_expression("axpy<float>")
        .name_expression("axpy<double>");
    let m = compile(KERNELS, "t", Arch::new(9, 0), &opts).unwrap();
    let f = m.resolve("axpy<float>").unwrap();
    let d = m.resolve("axpy<double>").unwrap();
    assert!(f.starts_with("_Z") && f != d, "{f} / {d}");
    assert_eq!(m.resolve("scale").unwrap(), "scale");
    // A missing kernel lists what the module has.
    let e = m.resolve("nope").unwrap_err().to_string();
    for k in ["scale", "reverse_smem", "axpy<float>", "axpy<double>"] {
        assert!(e.contains(k), "{e}");
    }
    // The template's parameter types are bound from the expression, so launches are checked.
    let ok = [
        KernelArg::Ptr(1),
        KernelArg::Ptr(2),
        2.0f64.into(),
        5i32.into(),
    ];
    m.check_launch("axpy<double>", &ok).unwrap();
    let e = m.check_launch("axpy<float>", &ok).unwrap_err().to_string();
    assert!(
        e.contains("argument 3") && e.contains("32-bit float"),
        "{e}"
    );
    let e = m
        .check_launch("scale", &[KernelArg::Ptr(1), 1i32.into(), 3i32.into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("scale") && e.contains("float") && e.contains("i32"),
        "{e}"
    );
    let e = m
        .check_launch("scale", &[KernelArg::Ptr(1)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("expects 3 argument(s)"), "{e}");
}

#[test]
fn headers_include_paths_and_defines() {
    if !testing::nvrtc("headers_include_paths_and_defines") {
        return;
    }
    // Without the in-memory header the include fails with a clear error.
    let e = compile(KERNELS, "t", Arch::new(8, 0), &CompileOptions::new()).unwrap_err();
    assert!(e.to_string().contains("scale_factor.h"), "{e}");
    // An include path on disk works as well as an in-memory header.
    let dir = common::temp_dir();
    std::fs::write(
        dir.path().join("scale_factor.h"),
        "#define SCALE_UNIT 2.0f\n",
    )
    .unwrap();
    let opts = CompileOptions::new().include_path(dir.path().to_string_lossy());
    compile(KERNELS, "t", Arch::new(8, 0), &opts).unwrap();
    // Defines reach the preprocessor.
    let src = "#ifndef TILE\n#error TILE must be defined\n#endif\nextern \"C\" __global__ void k(int* x) { x[0] = TILE; }\n";
    assert!(compile(src, "k", Arch::new(8, 0), &CompileOptions::new()).is_err());
    let m = compile(
        src,
        "k",
        Arch::new(8, 0),
        &CompileOptions::new()
            .define("TILE", "64")
            .output(Output::Ptx),
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&m.image).contains("64"));
}

#[test]
fn fast_math_line_info_register_cap_and_ptxas_report() {
    if !testing::nvrtc("fast_math_line_info_register_cap_and_ptxas_report") {
        return;
    }
    let src = "extern \"C\" __global__ void e(float* x) { x[threadIdx.x] = expf(x[threadIdx.x]) / x[1]; }\n";
    let plain = compile(
        src,
        "e",
        Arch::new(8, 0),
        &CompileOptions::new().output(Output::Ptx),
    )
    .unwrap();
    let fast = compile(
        src,
        "e",
        Arch::new(8, 0),
        &CompileOptions::new().output(Output::Ptx).fast_math(true),
    )
    .unwrap();
    let p = String::from_utf8_lossy(&plain.image);
    let f = String::from_utf8_lossy(&fast.image);
    assert!(
        f.contains("ex2.approx") && p != f,
        "fast math changes the code"
    );
    let lined = compile(
        src,
        "e",
        Arch::new(8, 0),
        &CompileOptions::new().output(Output::Ptx).line_info(true),
    )
    .unwrap();
    assert!(
        String::from_utf8_lossy(&lined.image).contains(".loc"),
        "line info emits .loc"
    );
    let rep = compile(
        src,
        "e",
        Arch::new(9, 0),
        &CompileOptions::new().verbose_ptxas(true).max_registers(32),
    )
    .unwrap();
    assert!(
        rep.log.contains("registers"),
        "ptxas report in the log: {}",
        rep.log
    );
}
