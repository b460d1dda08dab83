//! Every built-in kernel compiles with NVRTC for sm_80 and sm_90a (CUBIN, so ptxas runs and
//! spills would show), and every name expression the Rust side asks for resolves; so do
//! kernels generated for the fused operators and the user kernels. Every instance's mangled
//! symbol decodes to the parameter types of its declaration.

use gpukit_core::kernels::{builtin_programs, KernelFile};
use gpukit_jit::{compile, Arch, Output};

#[test]
fn every_builtin_kernel_compiles_for_sm80_and_sm90a() {
    if !gpukit_jit::testing::nvrtc("every_builtin_kernel_compiles_for_sm80_and_sm90a") {
        return;
    }
    let programs = builtin_programs();
    // Seven files for all nine element types, random and nn for the four float types.
    assert_eq!(programs.len(), 7 * 9 + 2 * 4);
    let jobs: Vec<_> = [Arch::new(8, 0), Arch::new(9, 0).specific()]
        .into_iter()
        .flat_map(|arch| programs.iter().map(move |p| (arch, p)))
        .collect();
    // NVRTC is thread-safe: compile on every core.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((arch, (program, source, opts))) = jobs.get(i) else {
                    return;
                };
                let opts = opts.clone().output(Output::Cubin).verbose_ptxas(true);
                let m = compile(source, program, *arch, &opts)
                    .unwrap_or_else(|e| panic!("{program} for {arch}: {e}"));
                assert!(!m.image.is_empty());
                assert_eq!(
                    m.lowered_names.len(),
                    opts.name_expressions.len(),
                    "{program}: every name expression must lower"
                );
                // Launch checks read each instance's parameter types from its mangled symbol:
                // every built-in one decodes, to the types of its declaration (whose names it
                // then carries).
                for expr in &opts.name_expressions {
                    let sig = m
                        .signature_for(expr)
                        .unwrap_or_else(|| panic!("{program}: {expr} has no decoded signature"));
                    assert!(
                        !sig.params.is_empty() && sig.params.iter().all(|p| !p.name.is_empty()),
                        "{program}: {expr} decodes to other types than declared: {sig:?}"
                    );
                }
                // No kernel spills registers to local memory.
                for line in m.log.lines().filter(|l| l.contains("spill")) {
                    assert!(
                        line.contains("0 bytes spill stores")
                            && line.contains("0 bytes spill loads"),
                        "{program} for {arch} spills: {line}"
                    );
                }
            });
        }
    });
}

#[test]
fn name_expressions_cover_the_operations() {
    let has = |f: KernelFile, d: &str, e: &str| f.name_expressions(d).contains(&e.to_string());
    assert!(has(KernelFile::Binary, "float", "binary_contig<float, 0>"));
    assert!(has(KernelFile::Binary, "float", "binary_strided<float, 7>"));
    // Bitwise operations exist for integers only.
    assert!(!has(KernelFile::Binary, "float", "binary_contig<float, 8>"));
    assert!(has(KernelFile::Binary, "int", "binary_scalar<int, 10>"));
    assert!(has(KernelFile::Unary, "float", "unary_contig<float, 8>"));
    assert!(!has(KernelFile::Unary, "int", "unary_contig<int, 2>"));
    assert!(has(KernelFile::Unary, "int", "unary_contig<int, 14>"));
    assert!(has(KernelFile::Logic, "__half", "where_strided<__half>"));
    assert!(has(
        KernelFile::Copy,
        "__half",
        "copy_strided<__half, unsigned long long>"
    ));
    assert!(has(
        KernelFile::Reduce,
        "unsigned char",
        "reduce_cols<unsigned char, 10>"
    ));
    assert!(has(KernelFile::Scan, "int", "scan_onepass<int, 1>"));
    assert!(has(KernelFile::Nn, "float", "softmax_rows<float, 8>"));
    assert!(!KernelFile::Random.applies_to("int"));
    assert!(KernelFile::Random.applies_to("__nv_bfloat16"));
}

#[test]
fn generated_kernels_compile_for_sm80_and_sm90a() {
    if !gpukit_jit::testing::nvrtc("generated_kernels_compile_for_sm80_and_sm90a") {
        return;
    }
    use gpukit_core::codegen::{elementwise_source, reduction_source, Param, Role};
    let p = |name: &str, ctype: &'static str, role| Param {
        name: name.into(),
        ctype,
        role,
    };
    let ew = elementwise_source(
        "fused",
        &[
            p("x0", "__half", Role::In),
            p("x1", "__half", Role::In),
            p("s0", "__half", Role::Scalar),
            p("y", "__half", Role::Out),
        ],
        "y = (_gk_div(x0, s0) + x1);",
        "",
    );
    let red = reduction_source(
        "l2",
        &[p("x", "float", Role::In), p("y", "double", Role::Out)],
        "x * x",
        "a + b",
        "y = sqrt(a)",
        "0",
        "double",
        "",
    );
    for arch in [Arch::new(8, 0), Arch::new(9, 0).specific()] {
        for (name, src) in [("fused", &ew), ("l2", &red)] {
            let opts = gpukit_jit::CompileOptions::new()
                .header("common.cuh", gpukit_core::kernels::COMMON_H)
                .output(Output::Cubin);
            let m =
                compile(src, name, arch, &opts).unwrap_or_else(|e| panic!("{name} {arch}: {e}"));
            assert!(m.available_kernels().contains(&name.to_string()));
        }
    }
}
