//! The built-in kernels: CUDA C++ in `kernels/*.cu`, compiled through gpukit-jit (cached on
//! disk) at first use, one program per (file, element type) holding every instantiation of that
//! type as an NVRTC name expression, loaded into the device's
//! [`KernelSet`](gpukit_jit::KernelSet) under the id `gpukit-core/<program>`.

use crate::device::Device;
use crate::dtype::{kind_of, DTypeKind, ALL_DTYPE_NAMES};
use crate::error::Result;
use crate::stream::Stream;
use gpukit_jit::{CompileOptions, Kernel, KernelArg, LaunchConfig};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The shared header of the built-in kernels.
pub const COMMON_H: &str = include_str!("../kernels/common.cuh");
/// The elementwise operations shared by `binary.cu`, `unary.cu` and the kernels generated for
/// fused expressions ([`crate::Expr`]): one definition of each operation's arithmetic.
pub const ELEMENTWISE_H: &str = include_str!("../kernels/elementwise.cuh");

/// One built-in kernel file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelFile {
    /// `kernels/binary.cu`: arithmetic, bitwise, remainder, power (arrays and scalars).
    Binary,
    /// `kernels/unary.cu`: math functions, rounding, bitwise not, sign, clip.
    Unary,
    /// `kernels/logic.cu`: comparisons, predicates, logical and / or / xor, `where`.
    Logic,
    /// `kernels/copy.cu`: copies through strides, casts, fill, arange.
    Copy,
    /// `kernels/index.cu`: take, put, nonzero.
    Index,
    /// `kernels/reduce.cu`: every reduction.
    Reduce,
    /// `kernels/scan.cu`: cumsum, cumprod.
    Scan,
    /// `kernels/random.cu`: Philox uniform and normal (floating-point types).
    Random,
    /// `kernels/nn.cu`: softmax, log-softmax, layer norm (floating-point types).
    Nn,
}

/// Unary operation codes defined for a kind of element type (see `ops::UnaryOp`): every one
/// but bitwise not for floats; neg, abs, relu, the rounding identities, not and sign for
/// integers.
pub(crate) fn unary_ops(kind: DTypeKind) -> &'static [u32] {
    match kind {
        DTypeKind::Float => &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15],
        _ => &[0, 1, 6, 10, 11, 12, 13, 14, 15],
    }
}

/// Binary operation codes defined for a kind of element type (see `ops::BinaryOp`): the bitwise
/// operations only for integers.
pub(crate) fn binary_ops(kind: DTypeKind) -> std::ops::Range<u32> {
    match kind {
        DTypeKind::Float => 0..8,
        _ => 0..11,
    }
}

/// Reduction codes (see `reduce::ReduceOp`).
pub(crate) const REDUCE_OPS: std::ops::Range<u32> = 0..11;
/// Row-kernel vectors per thread (see `kernels/nn.cu`).
pub(crate) const NN_VPT: [u32; 4] = [1, 2, 4, 8];

impl KernelFile {
    /// All files.
    pub const ALL: [KernelFile; 9] = [
        KernelFile::Binary,
        KernelFile::Unary,
        KernelFile::Logic,
        KernelFile::Copy,
        KernelFile::Index,
        KernelFile::Reduce,
        KernelFile::Scan,
        KernelFile::Random,
        KernelFile::Nn,
    ];

    /// The CUDA source.
    pub fn source(self) -> &'static str {
        match self {
            KernelFile::Binary => include_str!("../kernels/binary.cu"),
            KernelFile::Unary => include_str!("../kernels/unary.cu"),
            KernelFile::Logic => include_str!("../kernels/logic.cu"),
            KernelFile::Copy => include_str!("../kernels/copy.cu"),
            KernelFile::Index => include_str!("../kernels/index.cu"),
            KernelFile::Reduce => include_str!("../kernels/reduce.cu"),
            KernelFile::Scan => include_str!("../kernels/scan.cu"),
            KernelFile::Random => include_str!("../kernels/random.cu"),
            KernelFile::Nn => include_str!("../kernels/nn.cu"),
        }
    }

    fn stem(self) -> &'static str {
        match self {
            KernelFile::Binary => "gpukit_binary",
            KernelFile::Unary => "gpukit_unary",
            KernelFile::Logic => "gpukit_logic",
            KernelFile::Copy => "gpukit_copy",
            KernelFile::Index => "gpukit_index",
            KernelFile::Reduce => "gpukit_reduce",
            KernelFile::Scan => "gpukit_scan",
            KernelFile::Random => "gpukit_random",
            KernelFile::Nn => "gpukit_nn",
        }
    }

    /// Whether the file is instantiated for element type `dtype` (random numbers and the row
    /// kernels exist for floating-point types only).
    pub fn applies_to(self, dtype: &str) -> bool {
        match self {
            KernelFile::Random | KernelFile::Nn => kind_of(dtype) == DTypeKind::Float,
            _ => true,
        }
    }

    /// The program name for element type `dtype` (its C name).
    pub fn program(self, dtype: &str) -> String {
        format!("{}_{}", self.stem(), dtype.replace(' ', "_"))
    }

    /// Every instantiation the Rust side may ask for, for element type `dtype`.
    pub fn name_expressions(self, dtype: &str) -> Vec<String> {
        let kind = kind_of(dtype);
        let mut v = Vec::new();
        match self {
            KernelFile::Binary => {
                for op in binary_ops(kind) {
                    for k in [
                        "binary_contig",
                        "binary_scalar",
                        "binary_strided",
                        "binary_scalar_strided",
                    ] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
            }
            KernelFile::Unary => {
                for op in unary_ops(kind) {
                    for k in ["unary_contig", "unary_strided"] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
                v.push(format!("clip_contig<{dtype}>"));
                v.push(format!("clip_strided<{dtype}>"));
            }
            KernelFile::Logic => {
                for op in 0..6 {
                    for k in ["compare_contig", "compare_strided", "compare_scalar"] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
                for p in 0..4 {
                    for k in ["predicate_contig", "predicate_strided"] {
                        v.push(format!("{k}<{dtype}, {p}>"));
                    }
                }
                for l in 0..3 {
                    for k in ["logical_contig", "logical_strided"] {
                        v.push(format!("{k}<{dtype}, {l}>"));
                    }
                }
                v.push(format!("where_contig<{dtype}>"));
                v.push(format!("where_strided<{dtype}>"));
                v.push(format!("where_scalar<{dtype}>"));
            }
            KernelFile::Copy => {
                for to in ALL_DTYPE_NAMES {
                    v.push(format!("copy_strided<{dtype}, {to}>"));
                    v.push(format!("cast_contig<{dtype}, {to}>"));
                }
                v.push(format!("fill<{dtype}>"));
                v.push(format!("fill_strided<{dtype}>"));
                v.push(format!("arange<{dtype}>"));
            }
            KernelFile::Index => {
                v.push(format!("take_axis<{dtype}>"));
                v.push(format!("put_axis<{dtype}>"));
                v.push(format!("nonzero_flat<{dtype}>"));
            }
            KernelFile::Reduce => {
                for op in REDUCE_OPS {
                    for k in [
                        "reduce_partial",
                        "reduce_finish",
                        "reduce_rows",
                        "reduce_cols",
                        "reduce_cols_finish",
                        "reduce_rows_vec",
                        "reduce_cols_small",
                    ] {
                        v.push(format!("{k}<{dtype}, {op}>"));
                    }
                }
            }
            KernelFile::Scan => {
                for op in 0..2 {
                    v.push(format!("scan_onepass<{dtype}, {op}>"));
                    v.push(format!("scan_flat<{dtype}, {op}>"));
                }
            }
            KernelFile::Random => {
                v.push(format!("uniform<{dtype}>"));
                v.push(format!("normal<{dtype}>"));
            }
            KernelFile::Nn => {
                for vpt in NN_VPT {
                    v.push(format!("softmax_rows<{dtype}, {vpt}>"));
                    v.push(format!("layernorm_rows<{dtype}, {vpt}>"));
                }
                v.push(format!("softmax_rows_smem<{dtype}>"));
                v.push(format!("layernorm_rows_smem<{dtype}>"));
                v.push(format!("softmax_rows_large<{dtype}>"));
                v.push(format!("layernorm_rows_large<{dtype}>"));
            }
        }
        v
    }

    /// Compile options for element type `dtype` (target left to the loader).
    pub fn options(self, dtype: &str) -> CompileOptions {
        let mut o = CompileOptions::new().header("common.cuh", COMMON_H);
        if matches!(self, KernelFile::Binary | KernelFile::Unary) {
            o = o.header("elementwise.cuh", ELEMENTWISE_H);
        }
        for e in self.name_expressions(dtype) {
            o = o.name_expression(e);
        }
        o
    }
}

/// Every built-in program: `(program name, source, options)` for each file and each element
/// type it applies to; used by the NVRTC compile tests and [`precompile`].
pub fn builtin_programs() -> Vec<(String, &'static str, CompileOptions)> {
    let mut v = Vec::new();
    for f in KernelFile::ALL {
        for d in ALL_DTYPE_NAMES {
            if f.applies_to(d) {
                v.push((f.program(d), f.source(), f.options(d)));
            }
        }
    }
    v
}

/// `(id, program)` of a built-in file for one element type (computed once).
fn program_names(file: KernelFile, dtype: &'static str) -> (&'static str, &'static str) {
    type Names = HashMap<(KernelFile, &'static str), (String, String)>;
    static NAMES: OnceLock<Names> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut m = HashMap::new();
        for f in KernelFile::ALL {
            for d in ALL_DTYPE_NAMES {
                let program = f.program(d);
                m.insert((f, d), (format!("gpukit-core/{program}"), program));
            }
        }
        m
    });
    names
        .get(&(file, dtype))
        .map_or(("gpukit-core/unknown", "unknown"), |(i, p)| {
            (i.as_str(), p.as_str())
        })
}

/// Kernel `expr` (a name expression) of `file` for element type `dtype`, from the device's
/// kernel set (compiled and loaded on first use).
pub(crate) fn get(
    dev: &Device,
    file: KernelFile,
    dtype: &'static str,
    expr: &str,
) -> Result<Kernel> {
    let (id, program) = program_names(file, dtype);
    // SAFETY: `id` (`gpukit-core/<program>`) names exactly this file's source with the options
    // of `dtype`, in every call of this crate; no other crate registers `gpukit-core/` ids
    // (the kernel set's contract).
    let kernel = unsafe {
        dev.kernel_set()
            .kernel(id, expr, || gpukit_jit::ProgramSpec {
                source: file.source().into(),
                program: program.into(),
                options: file.options(dtype),
            })
    }?;
    Ok(kernel)
}

/// Threads per block of the built-in grid-stride kernels.
pub(crate) const BLOCK: u32 = 256;

/// Launch configuration for a grid-stride kernel covering `work` items: enough blocks to fill
/// the device `waves` times over (or fewer when there is less work).
pub(crate) fn grid_for(dev: &Device, work: usize, waves: u32) -> LaunchConfig {
    let max_blocks = (dev.multiprocessor_count().max(1) * waves) as usize;
    let blocks = work.div_ceil(BLOCK as usize).clamp(1, max_blocks) as u32;
    LaunchConfig::new((blocks, 1, 1), (BLOCK, 1, 1))
}

/// Vectors per thread of the contiguous elementwise kernels (EW_UNROLL in kernels/common.cuh);
/// the arithmetic-heavy operations (power, logarithm) take one (EW_UNROLL_HEAVY): with four
/// their 16 results in flight per thread need 55-80 registers, which halves the resident warps
/// that hide the memory latency (H200, 1 GiB f32: pow 0.92 ms with four, 0.84 with one, torch
/// 0.81; log 0.556 and 0.504, torch 0.512).
pub(crate) const EW_UNROLL: usize = 4;
/// See [`EW_UNROLL`].
pub(crate) const EW_UNROLL_HEAVY: usize = 1;
/// Threads per block of the contiguous elementwise kernels (H200, 1 GiB f32: 128 threads was
/// as fast as 256 or faster for add, logical_and and eq, within 0.3% for where and exp).
const EW_BLOCK: usize = 128;

/// Launch configuration for a contiguous elementwise kernel over `vectors` 16-byte steps
/// (`ew_loop` in kernels/common.cuh) with `unroll` vectors per thread (the kernel's `U`): a grid
/// that covers the array, one block-contiguous chunk per block, so each warp streams through
/// adjacent memory and the whole array is in flight across the grid (a small grid striding
/// over a 1 GiB array reached 0.94-0.95x torch on the H200; this grid, 0.98-1.02x); past 2048
/// blocks per multiprocessor the kernel's loop strides over the grid.
pub(crate) fn grid_vec(dev: &Device, vectors: usize, unroll: usize) -> LaunchConfig {
    let sms = dev.multiprocessor_count().max(1) as usize;
    let unroll = unroll.max(1);
    // Small arrays: narrower blocks, so that at least two per multiprocessor have work.
    let mut threads = EW_BLOCK;
    while threads > 64 && vectors.div_ceil(threads * unroll) < 2 * sms {
        threads /= 2;
    }
    let blocks = vectors.div_ceil(threads * unroll).clamp(1, sms * 2048) as u32;
    LaunchConfig::new((blocks, 1, 1), (threads as u32, 1, 1))
}

/// Launches a built-in `kernel` on `stream`.
///
/// Crate-internal and only called by gpukit-core's operations, which uphold the raw launch
/// contract by construction: every pointer is the address of a live `GpuArray` (or scratch
/// array) of the kernel's element type whose view (shape, strides, offset) lies inside its
/// buffer (every view constructor checks), every element count and layout passed describes
/// exactly those views, an output never overlaps an input unless the kernel is written for it
/// (the same element read and written by one thread, in place), and every array is marked as
/// used on `stream` before the launch (so its memory outlives the work).
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
