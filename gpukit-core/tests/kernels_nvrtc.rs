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

/// Every form of the fused-expression kernels (array/expr.rs): the vector kernel for each
/// element type and each way of reading an operand (dense, a repeated row, a splat column or
/// channel, a single element), with scalars, with the functions and operators of the
/// element type, and the general kernel for the same expressions, compile for sm_90a (CUBIN,
/// so ptxas runs) and sm_80 without spilling registers; and the vector kernel of a single
/// operator uses no more registers than the built-in kernel of the named method it stands for
/// (`&a + &b` beside `binary_contig<T, 0>`, ...: the kernels the H200 measured at copy speed).
#[test]
fn fused_expression_kernels_compile_without_spills() {
    if !gpukit_jit::testing::nvrtc("fused_expression_kernels_compile_without_spills") {
        return;
    }
    use gpukit_core::array::expr::{general_source, vector_source, vector_unroll, LeafMode};
    use gpukit_core::dtype::ALL_DTYPE_NAMES;
    let (d, r, s, c) = (
        LeafMode::Dense,
        LeafMode::Repeat { m: 16 },
        LeafMode::Splat { d: 16, m: 3 },
        LeafMode::Const,
    );
    struct Case {
        code: &'static str,
        modes: Vec<LeafMode>,
        scalars: usize,
        heavy: bool,
        /// The built-in kernel of the named method (`{T}` for the type), for single operators.
        builtin: Option<(KernelFile, &'static str)>,
    }
    let case = |code, modes: &[LeafMode], scalars, heavy, builtin| Case {
        code,
        modes: modes.to_vec(),
        scalars,
        heavy,
        builtin,
    };
    let (bin, una) = (KernelFile::Binary, KernelFile::Unary);
    // Operators, functions, fused chains, every read mode.
    let float_cases = vec![
        case(
            "wrap_add(x0, x1)",
            &[d, d],
            0,
            false,
            Some((bin, "binary_contig<{T}, 0>")),
        ),
        case(
            "wrap_sub(x0, x1)",
            &[d, d],
            0,
            false,
            Some((bin, "binary_contig<{T}, 1>")),
        ),
        case(
            "wrap_mul(x0, x1)",
            &[d, d],
            0,
            false,
            Some((bin, "binary_contig<{T}, 2>")),
        ),
        case(
            "gk_bin<3>(x0, x1)",
            &[d, d],
            0,
            false,
            Some((bin, "binary_contig<{T}, 3>")),
        ),
        case(
            "wrap_mul(x0, s0)",
            &[d],
            1,
            false,
            Some((bin, "binary_scalar<{T}, 2>")),
        ),
        case(
            "wrap_sub(s0, x0)",
            &[d],
            1,
            false,
            Some((bin, "binary_scalar<{T}, 1>")),
        ),
        case(
            "gk_una<0>(x0)",
            &[d],
            0,
            false,
            Some((una, "unary_contig<{T}, 0>")),
        ),
        case(
            "gk_una<2>(x0)",
            &[d],
            0,
            false,
            Some((una, "unary_contig<{T}, 2>")),
        ),
        case(
            "gk_una<3>(x0)",
            &[d],
            0,
            true,
            Some((una, "unary_contig<{T}, 3>")),
        ),
        case(
            "gk_bin<6>(x0, x1)",
            &[d, d],
            0,
            true,
            Some((bin, "binary_contig<{T}, 6>")),
        ),
        case("wrap_add(wrap_mul(s0, x0), x1)", &[d, d], 1, false, None),
        case(
            "gk_una<2>(gk_bin<3>(wrap_add(wrap_mul(x0, x1), x0), x1))",
            &[d, d],
            0,
            false,
            None,
        ),
        case("wrap_add(x0, x1)", &[d, r], 0, false, None),
        case("wrap_mul(x0, x1)", &[d, s], 0, false, None),
        case("wrap_sub(x0, x1)", &[d, c], 0, false, None),
        case(
            "gk_bin<4>(wrap_add(wrap_mul(x0, x1), wrap_sub(x2, x3)), s0)",
            &[d, r, s, c],
            1,
            false,
            None,
        ),
        case(
            "wrap_add(wrap_add(wrap_add(x0, x1), wrap_add(x2, x3)), wrap_add(x4, x5))",
            &[d, d, d, d, r, r],
            0,
            false,
            None,
        ),
    ];
    let int_cases = vec![
        case(
            "wrap_add(x0, x1)",
            &[d, d],
            0,
            false,
            Some((bin, "binary_contig<{T}, 0>")),
        ),
        case(
            "wrap_mul(x0, s0)",
            &[d],
            1,
            false,
            Some((bin, "binary_scalar<{T}, 2>")),
        ),
        case(
            "gk_bin<3>(x0, x1)",
            &[d, d],
            0,
            true,
            Some((bin, "binary_contig<{T}, 3>")),
        ),
        case("gk_bin<3>(wrap_add(x0, x1), s0)", &[d, r], 1, true, None),
        case("gk_bin<7>(x0, x1)", &[d, s], 0, true, None),
        case("gk_bin<8>(x0, gk_una<14>(x1))", &[d, c], 0, false, None),
        case("gk_bin<6>(x0, x1)", &[d, d], 0, true, None),
    ];
    let sm90 = Arch::new(9, 0).specific();
    // (label, program, source, options, arch, kernel name or name expression, case index)
    let mut jobs = Vec::new();
    let generated = || {
        gpukit_jit::CompileOptions::new()
            .header("common.cuh", gpukit_core::kernels::COMMON_H)
            .header("elementwise.cuh", gpukit_core::kernels::ELEMENTWISE_H)
    };
    for ty in ALL_DTYPE_NAMES {
        let float = matches!(ty, "float" | "double" | "__half" | "__nv_bfloat16");
        for (ci, k) in (if float { &float_cases } else { &int_cases })
            .iter()
            .enumerate()
        {
            let loads = k.modes.iter().filter(|m| m.vector_loads()).count();
            let unroll = vector_unroll(loads, k.heavy);
            let label = format!("{ty} `{}`", k.code);
            let v = vector_source(ty, k.code, &k.modes, k.scalars, unroll);
            for arch in [sm90, Arch::new(8, 0)] {
                let src = std::borrow::Cow::Owned(v.clone());
                jobs.push((
                    label.clone(),
                    "gk_expr_v".to_string(),
                    src,
                    generated(),
                    arch,
                    (ty, float, ci, 'v'),
                ));
            }
            let g = general_source(ty, k.code, k.modes.len(), k.scalars);
            jobs.push((
                label.clone(),
                "gk_expr".to_string(),
                g.into(),
                generated(),
                sm90,
                (ty, float, ci, 'g'),
            ));
            if let Some((file, expr)) = k.builtin {
                let expr = expr.replace("{T}", ty);
                let mut o = file.options(ty);
                o.name_expressions = vec![expr.clone()];
                jobs.push((
                    label,
                    file.program(ty),
                    file.source().into(),
                    o,
                    sm90,
                    (ty, float, ci, 'b'),
                ));
            }
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let regs_of = std::sync::Mutex::new(std::collections::HashMap::new());
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((label, program, src, opts, arch, key)) = jobs.get(i) else {
                    return;
                };
                let opts = opts.clone().output(Output::Cubin).verbose_ptxas(true);
                let m = compile(src, program, *arch, &opts)
                    .unwrap_or_else(|e| panic!("{program} {label} for {arch}: {e}\n{src}"));
                for line in m.log.lines().filter(|l| l.contains("spill")) {
                    assert!(
                        line.contains("0 bytes spill stores")
                            && line.contains("0 bytes spill loads"),
                        "{program} {label} for {arch} spills: {line}"
                    );
                }
                let regs: u32 = m
                    .log
                    .lines()
                    .find_map(|l| {
                        let at = l.find("Used ")?;
                        l[at + 5..].split_whitespace().next()?.parse().ok()
                    })
                    .unwrap_or_else(|| {
                        panic!("{program} {label}: no register count in\n{}", m.log)
                    });
                if *arch == sm90 {
                    regs_of.lock().unwrap().insert(*key, (label.clone(), regs));
                }
            });
        }
    });
    let regs_of = regs_of.into_inner().unwrap();
    let mut lines: Vec<String> = Vec::new();
    for (&(ty, float, ci, kind), (label, regs)) in &regs_of {
        if kind != 'v' {
            continue;
        }
        let general = regs_of.get(&(ty, float, ci, 'g')).map_or(0, |r| r.1);
        let line = match regs_of.get(&(ty, float, ci, 'b')) {
            Some((_, b)) => {
                assert!(
                    *regs <= b + 8,
                    "{label}: the vector kernel takes {regs} registers, the built-in {b}"
                );
                format!("{label}: vector {regs}, general {general}, built-in {b} registers")
            }
            None => format!("{label}: vector {regs}, general {general} registers"),
        };
        lines.push(line);
    }
    lines.sort();
    for l in &lines {
        println!("{l}");
    }
    assert_eq!(lines.len(), 4 * float_cases.len() + 5 * int_cases.len());
}
