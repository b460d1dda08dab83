//! Every GEMM kernel instantiation compiles to CUBIN (ptxas runs): the `mma.sync`, SIMT and
//! reduction kernels for sm_80 and sm_90, the Hopper `wgmma` kernels and their pack for sm_90a,
//! all with no register spills or stack. Needs NVRTC only (no GPU); prints the ptxas resource
//! report per kernel.

use gpukit_core::gemm::kernels::{self, Instantiation, SourceFile};
use gpukit_core::gemm::plan;
use gpukit_jit::{compile, Arch, Output};
use std::collections::BTreeMap;

/// `(function, registers, spill store bytes, spill load bytes, stack bytes)` from a ptxas log.
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

/// Compiles `insts` (all of one source and program) for `arch` in one NVRTC program and returns
/// one line of problems per kernel that spilled, used a stack, or exceeded `max_regs`.
fn compile_group(
    arch: Arch,
    insts: &[&Instantiation],
    max_regs: &dyn Fn(&Instantiation) -> u32,
) -> Vec<String> {
    let first = insts[0];
    let mut opts = first.options().output(Output::Cubin).verbose_ptxas(true);
    for i in insts {
        let plain = i.file == SourceFile::Reduce; // extern "C", no template
        if !plain && !opts.name_expressions.contains(&i.expr) {
            opts = opts.name_expression(i.expr.clone());
        }
    }
    let m = compile(first.source(), first.program, arch, &opts)
        .unwrap_or_else(|e| panic!("{} for {arch}: {e}", first.program));
    assert!(!m.image.is_empty());
    let mut problems = Vec::new();
    for warning in ["C7508", "C7510", "C7512", "C7513"] {
        // setmaxnreg ignored / wgmma serialised: both would cost the Hopper kernels their speed.
        if m.log.contains(warning) {
            problems.push(format!(
                "{arch} {}: ptxas warning {warning}:\n{}",
                first.program, m.log
            ));
        }
    }
    let report = parse_ptxas(&m.log);
    for i in insts {
        let lowered = m
            .symbol_for(&i.expr)
            .unwrap_or_else(|| panic!("{} has no symbol in {:?}", i.expr, m.available_kernels()));
        let (_, regs, st, ld, stack) = report
            .iter()
            .find(|r| r.0 == lowered)
            .unwrap_or_else(|| panic!("no ptxas report for {}:\n{}", i.expr, m.log));
        println!(
            "{arch} {}: {regs} registers, {stack} B stack, spill {st}/{ld} B",
            i.expr
        );
        if (*st, *ld, *stack) != (0, 0, 0) {
            problems.push(format!(
                "{arch} {}: spills {st}/{ld} B, stack {stack} B",
                i.expr
            ));
        }
        let cap = max_regs(i);
        if *regs > cap {
            problems.push(format!("{arch} {}: {regs} registers > {cap}", i.expr));
        }
    }
    problems
}

fn by_program(insts: &[Instantiation]) -> BTreeMap<&'static str, Vec<&Instantiation>> {
    let mut groups: BTreeMap<&'static str, Vec<&Instantiation>> = BTreeMap::new();
    for i in insts {
        groups.entry(i.program).or_default().push(i);
    }
    groups
}

#[test]
fn every_gemm_kernel_compiles_for_sm80_and_sm90_without_spills() {
    if !gpukit_jit::testing::nvrtc("every_gemm_kernel_compiles_for_sm80_and_sm90_without_spills") {
        return;
    }
    let insts = kernels::all_instantiations(false);
    let mut problems = Vec::new();
    for arch in [Arch::new(8, 0), Arch::new(9, 0)] {
        for group in by_program(&insts).values() {
            problems.extend(compile_group(arch, group, &|_| 255));
        }
    }
    for c in plan::TF32_CONFIGS.iter().chain(plan::SGEMM_CONFIGS.iter()) {
        println!(
            "{}: {} threads, {} B dynamic smem at most",
            c.name,
            c.threads(),
            c.max_smem_bytes()
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The Hopper `wgmma` kernels (TF32 128x256 and 128x128 and 3xTF32, every operand layout each,
/// the ping-pong tile, clusters of two, the two-blocks-per-SM 128x128 tile, the pack kernels and the tensor-copy probe) compile for
/// `sm_90a` (chosen automatically for a source using wgmma), with no spills or stack, the GEMM
/// kernels under their entry cap (384 threads: 168 registers for one block per SM, 80 for two),
/// and no ptxas warning that `setmaxnreg` was ignored (C7508) or that the wgmma instructions were
/// serialised (C7510, C7512, C7513).
#[test]
fn wgmma_kernels_compile_for_sm90a_without_spills() {
    if !gpukit_jit::testing::nvrtc("wgmma_kernels_compile_for_sm90a_without_spills") {
        return;
    }
    let arch = Arch::new(9, 0).for_source(kernels::WGMMA_SOURCE);
    assert_eq!(arch.to_string(), "sm_90a");
    let hopper: Vec<Instantiation> = kernels::all_instantiations(true)
        .into_iter()
        .filter(|i| i.file == SourceFile::Wgmma)
        .collect();
    // 10 operand layouts (P packed beside Q packed or mapped, P into registers in 6, a K-major
    // P read by wgmma straight from its tensor copies in 2) x 10 TF32 tiles (four cooperative,
    // three ping-pong, and the 128x256 and two ping-pong tiles in clusters of two), the
    // two-blocks-per-SM tile (the 4 layouts with P in shared memory), the 3xTF32 kernel, 7
    // packs, the tensor-copy probe.
    assert_eq!(hopper.len(), 100 + 4 + 1 + 7 + 1, "{hopper:?}");
    // Each GEMM kernel under its entry cap: 65536 registers over its blocks per SM x 384 threads,
    // rounded down to the allocation unit of 8 (168 for one block, 80 for two).
    let caps: Vec<(String, u32)> = plan::WGMMA_CONFIGS
        .iter()
        .chain(plan::WGMMA3_CONFIGS.iter())
        .flat_map(|c| {
            let cap = (65536 / (c.threads() * c.occupancy)) & !7;
            kernels::variants_of(c)
                .into_iter()
                .map(move |v| (kernels::instantiation(c, v).expr, cap))
        })
        .collect();
    assert!(caps.iter().any(|(e, cap)| e.ends_with(",2>") && *cap == 80));
    let cap_of = |i: &Instantiation| {
        caps.iter()
            .find(|(e, _)| *e == i.expr)
            .map_or(168, |(_, cap)| *cap)
    };
    let mut problems = Vec::new();
    for group in by_program(&hopper).values() {
        problems.extend(compile_group(arch, group, &cap_of));
    }
    for c in plan::WGMMA_CONFIGS
        .iter()
        .chain(plan::WGMMA3_CONFIGS.iter())
    {
        println!(
            "{}: {} threads, {} B dynamic smem",
            c.name,
            c.threads(),
            c.smem_bytes(false, false)
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
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
