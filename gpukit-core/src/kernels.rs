//! The built-in kernels: CUDA C++ in `kernels/*.cu`, compiled through gpukit-jit (cached on
//! disk) at first use, one module per (file, element type) holding every instantiation of that
//! type as an NVRTC name expression.

use crate::device::{Device, Stream};
use crate::dtype::{kind_of, DTypeKind, ALL_DTYPE_NAMES};
use crate::error::Result;
use gpukit_jit::{CompileOptions, Kernel, KernelArg, LaunchConfig};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The shared header of the built-in kernels.
pub const COMMON_H: &str = include_str!("../kernels/common.cuh");
/// Elementwise kernels (binary, scalar, unary, comparison, where).
pub const ELEMENTWISE_CU: &str = include_str!("../kernels/elementwise.cu");
/// Copy, cast, fill and arange kernels.
pub const COPY_CU: &str = include_str!("../kernels/copy.cu");
/// Reduction kernels.
pub const REDUCE_CU: &str = include_str!("../kernels/reduce.cu");

/// One built-in kernel file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelFile {
    /// `kernels/elementwise.cu`.
    Elementwise,
    /// `kernels/copy.cu`.
    Copy,
    /// `kernels/reduce.cu`.
    Reduce,
}

impl KernelFile {
    /// All files.
    pub const ALL: [KernelFile; 3] = [
        KernelFile::Elementwise,
        KernelFile::Copy,
        KernelFile::Reduce,
    ];

    /// The CUDA source.
    pub fn source(self) -> &'static str {
        match self {
            KernelFile::Elementwise => ELEMENTWISE_CU,
            KernelFile::Copy => COPY_CU,
            KernelFile::Reduce => REDUCE_CU,
        }
    }

    /// The program name for element type `dtype` (its C name).
    pub fn program(self, dtype: &str) -> String {
        let stem = match self {
            KernelFile::Elementwise => "gpukit_elementwise",
            KernelFile::Copy => "gpukit_copy",
            KernelFile::Reduce => "gpukit_reduce",
        };
        format!("{stem}_{}", dtype.replace(' ', "_"))
    }

    /// Every instantiation the Rust side may ask for, for element type `dtype`.
    pub fn name_expressions(self, dtype: &str) -> Vec<String> {
        let kind = kind_of(dtype);
        let mut v = Vec::new();
        match self {
            KernelFile::Elementwise => {
                for op in 0..7 {
                    for k in ["binary_contig", "binary_scalar", "binary_strided"] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
                for op in unary_ops(kind) {
                    for k in ["unary_contig", "unary_strided"] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
                for op in 0..6 {
                    for k in ["compare_contig", "compare_scalar", "compare_strided"] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
                v.push(format!("where_strided<{dtype}>"));
            }
            KernelFile::Copy => {
                for to in ALL_DTYPE_NAMES {
                    v.push(format!("copy_strided<{dtype}, {to}>"));
                    v.push(format!("cast_contig<{dtype}, {to}>"));
                }
                v.push(format!("fill<{dtype}>"));
                v.push(format!("arange<{dtype}>"));
            }
            KernelFile::Reduce => {
                for op in 0..4 {
                    for k in [
                        "reduce_partial",
                        "reduce_finish",
                        "reduce_rows",
                        "reduce_cols",
                    ] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
                for op in 0..2 {
                    for k in ["arg_partial", "arg_finish", "arg_rows", "arg_cols"] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
            }
        }
        v
    }

    /// Compile options for element type `dtype` (target left to the loader).
    pub fn options(self, dtype: &str) -> CompileOptions {
        let mut o = CompileOptions::new().header("common.cuh", COMMON_H);
        for e in self.name_expressions(dtype) {
            o = o.name_expression(e);
        }
        o
    }
}

/// Unary operation codes defined for a kind of element type: all eight for floats; neg, abs
/// and relu for integers.
pub(crate) fn unary_ops(kind: DTypeKind) -> Vec<u32> {
    match kind {
        DTypeKind::Float => (0..8).collect(),
        _ => vec![0, 1, 6],
    }
}

/// Every built-in program: `(program name, source, options)` for each file and element type;
/// used by the NVRTC compile tests.
pub fn builtin_programs() -> Vec<(String, &'static str, CompileOptions)> {
    let mut v = Vec::new();
    for f in KernelFile::ALL {
        for d in ALL_DTYPE_NAMES {
            v.push((f.program(d), f.source(), f.options(d)));
        }
    }
    v
}

/// The program id of a built-in file for one element type in the device's
/// [`KernelSet`](gpukit_jit::KernelSet) (computed once).
fn program_id(file: KernelFile, dtype: &'static str) -> &'static str {
    static IDS: OnceLock<HashMap<(KernelFile, &'static str), String>> = OnceLock::new();
    let ids = IDS.get_or_init(|| {
        let mut m = HashMap::new();
        for f in KernelFile::ALL {
            for d in ALL_DTYPE_NAMES {
                m.insert((f, d), format!("gpukit-core/{}", f.program(d)));
            }
        }
        m
    });
    ids.get(&(file, dtype))
        .map_or("gpukit-core/unknown", String::as_str)
}

/// Kernel `expr` (a name expression) of `file` for element type `dtype`, from the device's
/// kernel set (compiled and loaded on first use).
pub(crate) fn get(
    dev: &Device,
    file: KernelFile,
    dtype: &'static str,
    expr: &str,
) -> Result<Kernel> {
    Ok(dev
        .kernel_set()
        .kernel(program_id(file, dtype), expr, || gpukit_jit::ProgramSpec {
            source: file.source(),
            program: Box::leak(file.program(dtype).into_boxed_str()),
            options: file.options(dtype),
        })?)
}

/// Threads per block of the built-in kernels.
pub(crate) const BLOCK: u32 = 256;

/// Launch configuration for a grid-stride kernel covering `work` items: enough blocks to fill
/// the device `waves` times over (or fewer when there is less work).
pub(crate) fn grid_for(dev: &Device, work: usize, waves: u32) -> LaunchConfig {
    let max_blocks = (dev.multiprocessor_count().max(1) * waves) as usize;
    let blocks = work.div_ceil(BLOCK as usize).clamp(1, max_blocks) as u32;
    LaunchConfig::new((blocks, 1, 1), (BLOCK, 1, 1))
}

/// Launches a built-in `kernel` on `stream`.
///
/// Crate-internal and only called by gpukit-core's operations, which uphold the raw launch
/// contract by construction: every pointer is the address of a live `GpuArray` of the kernel's
/// element type whose view (shape, strides, offset) lies inside its buffer, every element count
/// and layout passed describes exactly those views, outputs are freshly allocated (or checked
/// not to overlap the inputs), and every array is marked as used on `stream` before the launch.
pub(crate) fn launch(
    kernel: &Kernel,
    stream: &Stream,
    cfg: LaunchConfig,
    args: &[KernelArg],
) -> Result<()> {
    // SAFETY: see the function's documentation: the callers' arguments satisfy
    // `launch_unchecked`'s contract.
    Ok(unsafe { kernel.launch_unchecked(stream.cuda(), cfg, args) }?)
}

/// Compiles every built-in program for `arch` into gpukit-jit's kernel cache (memory and disk),
/// using all CPU cores. Later first uses on a device of that architecture load from the cache
/// instead of compiling. Returns the number of programs.
pub fn precompile(arch: gpukit_jit::Arch) -> Result<usize> {
    let cache = gpukit_jit::KernelCache::global()?;
    let programs = builtin_programs();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(programs.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((program, source, opts)) = programs.get(i) else {
                            return Ok(());
                        };
                        let target = arch.for_source(source);
                        cache.get_or_compile(source, program, target, opts)?;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::Error::invalid(
                        "precompile",
                        "a compile thread panicked",
                    ))
                })
            })
            .collect()
    });
    for r in results {
        r?;
    }
    Ok(programs.len())
}
