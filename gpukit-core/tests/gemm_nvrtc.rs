//! Every GEMM kernel instantiation compiles to CUBIN (ptxas runs) for sm_80 and sm_90 with no
//! register spills. Needs NVRTC only (no GPU); prints the ptxas resource report per kernel.

use gpukit_core::gemm::config::{SGEMM_CONFIGS, TF32_CONFIGS, WGMMA_CONFIGS};
use gpukit_core::gemm::kernels;
use gpukit_jit::{compile, Arch, Output};

/// `(function, registers, spill store bytes, spill load bytes, stack bytes, smem)` from a ptxas log.
fn parse_ptxas(log: &str) -> Vec<(String, u32, u32, u32, u32)> {
    let mut out = Vec::new();
    let mut current: Option<(String, u32, u32, u32)> = None;
    for line in log.lines() {
        if let Some(i) = line.find("Function properties for ") {
            current = Some((line[i + 24..].trim().to_string(), 0, 0, 0));
        } else if line.contains("bytes stack frame") {
            let nums: Vec<u32> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            if let (Some(c), [stack, st, ld, ..]) = (current.as_mut(), nums.as_slice()) {
                c.1 = *stack;
                c.2 = *st;
                c.3 = *ld;
            }
        } else if let Some(i) = line.find("Used ") {
            let regs: u32 = line[i + 5..]
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if let Some((name, stack, st, ld)) = current.take() {
                out.push((name, regs, st, ld, stack));
            }
        }
    }
    out
}

/// The `i`-th template argument of a name expression, as a bool.
fn flag(expr: &str, i: usize) -> bool {
    expr.trim_end_matches('>').split(['<', ',']).nth(i + 1) == Some("true")
}

#[test]
fn every_gemm_kernel_compiles_for_sm80_and_sm90_without_spills() {
    if !gpukit_jit::testing::nvrtc("every_gemm_kernel_compiles_for_sm80_and_sm90_without_spills") {
        return;
    }
    let mut failures = Vec::new();
    for arch in [Arch::new(8, 0), Arch::new(9, 0)] {
        for config in TF32_CONFIGS.iter().chain(SGEMM_CONFIGS.iter()) {
            let mut opts = kernels::base_options()
                .output(Output::Cubin)
                .verbose_ptxas(true);
            let mut exprs = Vec::new();
            for (ta, tb, vec) in kernels::variants() {
                let e = config.name_expression(ta, tb, vec);
                opts = opts.name_expression(e.clone());
                exprs.push(e);
            }
            let source = kernels::instantiation(config, false, false, true).0;
            let m = compile(source, config.kernel_name(), arch, &opts)
                .unwrap_or_else(|e| panic!("{} for {arch}: {e}", config.name));
            assert!(!m.image.is_empty());
            let report = parse_ptxas(&m.log);
            assert_eq!(
                report.len(),
                exprs.len(),
                "{} {arch}: one ptxas report per kernel expected, log:\n{}",
                config.name,
                m.log
            );
            for e in &exprs {
                assert!(m.symbol_for(e).is_some(), "{e} has no symbol");
            }
            for (expr, lowered) in &m.lowered_names {
                let (_, regs, st, ld, stack) = report
                    .iter()
                    .find(|r| &r.0 == lowered)
                    .unwrap_or_else(|| panic!("no ptxas report for {expr}"));
                println!(
                    "{arch} {expr}: {regs} registers, {stack} B stack, spill {st}/{ld} B, smem {} B dynamic",
                    config.smem_bytes(flag(expr, 6), flag(expr, 7))
                );
                if *st != 0 || *ld != 0 {
                    failures.push(format!("{arch} {expr}: spills {st} B stores, {ld} B loads"));
                }
            }
        }
        let m = compile(
            kernels::REDUCE_SOURCE,
            "gemm_reduce",
            arch,
            &kernels::base_options()
                .output(Output::Cubin)
                .verbose_ptxas(true),
        )
        .unwrap();
        assert!(
            m.symbol_for(kernels::REDUCE_KERNEL).is_some(),
            "{} not found in {:?}",
            kernels::REDUCE_KERNEL,
            m.available_kernels()
        );
        let report = parse_ptxas(&m.log);
        assert_eq!(report.len(), 1, "{}", m.log);
        assert_eq!((report[0].2, report[0].3), (0, 0), "{}", m.log);
    }
    assert!(
        failures.is_empty(),
        "register spills:\n{}",
        failures.join("\n")
    );
}

/// The Hopper `wgmma` kernels (GEMM, both store variants, and the two pack kernels) compile for
/// `sm_90a` (chosen automatically for a source using wgmma), with no spills, the GEMM kernel
/// under its 168-register entry cap, and no ptxas warning that `setmaxnreg` was ignored (C7508).
#[test]
fn wgmma_kernels_compile_for_sm90a_without_spills() {
    if !gpukit_jit::testing::nvrtc("wgmma_kernels_compile_for_sm90a_without_spills") {
        return;
    }
    let config = &WGMMA_CONFIGS[0];
    let arch = Arch::new(9, 0).for_source(kernels::WGMMA_SOURCE);
    assert_eq!(arch.to_string(), "sm_90a");
    let mut opts = kernels::base_options()
        .output(Output::Cubin)
        .verbose_ptxas(true);
    let mut exprs = Vec::new();
    for (ta, tb, vec) in kernels::variants_of(config) {
        exprs.push(config.name_expression(ta, tb, vec));
    }
    exprs.push(kernels::pack_expression(config));
    for e in &exprs {
        opts = opts.name_expression(e.clone());
    }
    let m = compile(kernels::WGMMA_SOURCE, config.kernel_name(), arch, &opts)
        .unwrap_or_else(|e| panic!("wgmma for {arch}: {e}"));
    assert!(!m.log.contains("C7508"), "setmaxnreg ignored:\n{}", m.log);
    let report = parse_ptxas(&m.log);
    assert_eq!(report.len(), exprs.len(), "{}", m.log);
    for (expr, lowered) in &m.lowered_names {
        let (_, regs, st, ld, stack) = report
            .iter()
            .find(|r| &r.0 == lowered)
            .unwrap_or_else(|| panic!("no ptxas report for {expr}"));
        println!("{arch} {expr}: {regs} registers, {stack} B stack, spill {st}/{ld} B");
        assert_eq!(
            (*st, *ld, *stack),
            (0, 0, 0),
            "{expr}: local memory\n{}",
            m.log
        );
        if expr.starts_with("gemm_wgmma<") {
            assert!(*regs <= 168, "{expr}: {regs} registers at entry");
            println!(
                "  {} threads, {} B dynamic smem",
                config.threads(),
                config.smem_bytes(false, false)
            );
        }
    }
}

#[test]
fn ptxas_report_parser_reads_registers_and_spills() {
    let log = "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'\n\
               ptxas info    : Function properties for _Z1kv\n\
               \x20   8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads\n\
               ptxas info    : Used 255 registers, used 1 barriers, 380 bytes cmem[0]";
    assert_eq!(
        parse_ptxas(log),
        vec![("_Z1kv".to_string(), 255, 12, 16, 8)]
    );
}
