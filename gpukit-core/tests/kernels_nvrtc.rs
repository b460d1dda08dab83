//! Every built-in kernel compiles with NVRTC for sm_80 and sm_90 (CUBIN, so ptxas runs and
//! spills would show), and every name expression the Rust side asks for resolves.

use gpukit_core::kernels::{builtin_programs, KernelFile};
use gpukit_jit::{compile, Arch, Output};

#[test]
fn every_builtin_kernel_compiles_for_sm80_and_sm90() {
    if !gpukit_jit::testing::nvrtc("every_builtin_kernel_compiles_for_sm80_and_sm90") {
        return;
    }
    let programs = builtin_programs();
    assert_eq!(programs.len(), 3 * 8);
    let jobs: Vec<_> = [Arch::new(8, 0), Arch::new(9, 0)]
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
    let ew = KernelFile::Elementwise.name_expressions("float");
    assert!(ew.contains(&"binary_contig<float, 0>".to_string()));
    assert!(ew.contains(&"unary_contig<float, 7>".to_string()));
    assert!(ew.contains(&"where_strided<float>".to_string()));
    // Integer types get only neg / abs / relu.
    let ints = KernelFile::Elementwise.name_expressions("int");
    assert!(!ints.iter().any(|e| e.starts_with("unary_contig<int, 2>")));
    assert!(ints.contains(&"unary_contig<int, 6>".to_string()));
    let copy = KernelFile::Copy.name_expressions("__half");
    assert!(copy.contains(&"copy_strided<__half, long long>".to_string()));
    let red = KernelFile::Reduce.name_expressions("unsigned char");
    assert!(red.contains(&"arg_cols<unsigned char, 1>".to_string()));
}
