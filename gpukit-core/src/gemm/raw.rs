//! Level 1: GEMM on raw device pointers and a cudarc stream.
//!
//! Everything is row-major: `C[m x n] = alpha * op(A) * op(B) + beta * C`, with
//! `op(A)[i][p] = A[i*lda + p]` (or `A[p*lda + i]` when `trans_a`) and likewise for B.
//! `batch` products use element strides between consecutive A, B and C matrices (a stride of 0
//! broadcasts an operand). `beta == 0` never reads C, so C may hold garbage (or NaN).
//!
//! [`sgemm`] runs our kernels ([`Precision::Fp32`]: exact single precision on the FP32 pipes;
//! [`Precision::Tf32`]: tensor cores on TF32-rounded inputs), choosing a tile configuration and
//! split-K factor with [`config::plan`] (TF32: [`config::plan_tf32`], which on compute capability
//! 9.0 may choose the `wgmma` kernel); [`sgemm_with_plan`] takes a plan from the caller (benches,
//! tests).
//!
//! The TF32 path can be forced with the environment variable `GPUKIT_GEMM_TF32`: `auto` (the
//! default: the planner decides), `mma` (`mma.sync` kernels on any GPU) or `wgmma` (the Hopper
//! kernel; an error on devices other than compute capability 9.0). Any other value makes TF32
//! calls fail with [`Error::InvalidArgument`] naming the variable. [`cublas_gemm`] runs cuBLAS for every element type (the baseline, f64/f16/bf16, and the
//! f64 reference of the tests).

use super::config::{self, Family, Plan, Tf32Path};
use super::kernels;
use crate::attributes::DeviceAttributes;
use crate::device::Stream;
use crate::error::{Error, Result};
use crate::handles::BlasHandle;
use cudarc::cublas::sys as cublas_sys;
use cudarc::driver::{CudaContext, CudaStream};
use gpukit_jit::{Kernel, KernelArg, LaunchConfig};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Single-precision arithmetic used by [`sgemm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// Exact IEEE single precision (FFMA), like NumPy. The default.
    #[default]
    Fp32,
    /// Tensor cores on inputs rounded to TF32 (10-bit mantissa, round-to-nearest-away), f32
    /// accumulation; like PyTorch's `allow_tf32`. About 3e-4 normwise relative error.
    Tf32,
}

impl Precision {
    /// The kernel family that implements this precision on any GPU (TF32: `mma.sync`; on
    /// compute capability 9.0, [`plan_for`] may choose [`Family::Wgmma`] instead).
    pub fn family(self) -> Family {
        match self {
            Precision::Fp32 => Family::Sgemm,
            Precision::Tf32 => Family::Tf32,
        }
    }
}

/// Whether an operand is used as stored or transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transpose {
    /// `op(X) = X`.
    #[default]
    No,
    /// `op(X) = X^T`.
    Yes,
}

impl Transpose {
    /// True for [`Transpose::Yes`].
    pub fn is_yes(self) -> bool {
        self == Transpose::Yes
    }
    fn cublas(self) -> cublas_sys::cublasOperation_t {
        match self {
            Transpose::No => cublas_sys::cublasOperation_t::CUBLAS_OP_N,
            Transpose::Yes => cublas_sys::cublasOperation_t::CUBLAS_OP_T,
        }
    }
}

/// One (batched) GEMM on raw device pointers; dimensions, leading dimensions and strides are in
/// elements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawGemm {
    /// Rows of `op(A)` and C.
    pub m: usize,
    /// Columns of `op(B)` and C.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Transpose of A.
    pub trans_a: Transpose,
    /// Transpose of B.
    pub trans_b: Transpose,
    /// Device address of A.
    pub a: u64,
    /// Row stride of A as stored.
    pub lda: usize,
    /// Element stride between batch entries of A (0 broadcasts).
    pub stride_a: usize,
    /// Device address of B.
    pub b: u64,
    /// Row stride of B as stored.
    pub ldb: usize,
    /// Element stride between batch entries of B (0 broadcasts).
    pub stride_b: usize,
    /// Device address of C.
    pub c: u64,
    /// Row stride of C.
    pub ldc: usize,
    /// Element stride between batch entries of C.
    pub stride_c: usize,
    /// Scale of the product.
    pub alpha: f64,
    /// Scale of the old C (0: C is not read).
    pub beta: f64,
    /// Number of products.
    pub batch: usize,
}

impl RawGemm {
    /// A single `C = A * B` on contiguous row-major matrices (`lda = k`, `ldb = ldc = n`).
    pub fn contiguous(m: usize, n: usize, k: usize, a: u64, b: u64, c: u64) -> Self {
        RawGemm {
            m,
            n,
            k,
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            a,
            lda: k,
            stride_a: m * k,
            b,
            ldb: n,
            stride_b: k * n,
            c,
            ldc: n,
            stride_c: m * n,
            alpha: 1.0,
            beta: 0.0,
            batch: 1,
        }
    }

    /// Rows and columns of A as stored.
    pub fn a_stored(&self) -> (usize, usize) {
        if self.trans_a.is_yes() {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }

    /// Rows and columns of B as stored.
    pub fn b_stored(&self) -> (usize, usize) {
        if self.trans_b.is_yes() {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }

    /// Number of elements one batch entry of each operand spans: `(A, B, C)`.
    pub fn spans(&self) -> (usize, usize, usize) {
        let span = |(r, c): (usize, usize), ld: usize| {
            if r == 0 || c == 0 {
                0
            } else {
                (r - 1) * ld + c
            }
        };
        (
            span(self.a_stored(), self.lda),
            span(self.b_stored(), self.ldb),
            span((self.m, self.n), self.ldc),
        )
    }

    /// Elements each operand needs from its base address, over all batch entries: `(A, B, C)`.
    pub fn required_len(&self) -> (usize, usize, usize) {
        let (sa, sb, sc) = self.spans();
        let over = |span: usize, stride: usize| {
            if span == 0 || self.batch == 0 {
                0
            } else {
                (self.batch - 1) * stride + span
            }
        };
        (
            over(sa, self.stride_a),
            over(sb, self.stride_b),
            over(sc, self.stride_c),
        )
    }

    /// Checks dimensions, leading dimensions and strides (not the pointers).
    pub fn validate(&self) -> Result<()> {
        let op = "gemm";
        let limit = i32::MAX as usize;
        for (name, v) in [
            ("m", self.m),
            ("n", self.n),
            ("k", self.k),
            ("lda", self.lda),
            ("ldb", self.ldb),
            ("ldc", self.ldc),
        ] {
            if v > limit {
                return Err(Error::invalid(
                    op,
                    format!("{name} = {v} exceeds the 32-bit limit {limit}"),
                ));
            }
        }
        for (name, (r, c), ld) in [
            ("lda", self.a_stored(), self.lda),
            ("ldb", self.b_stored(), self.ldb),
            ("ldc", (self.m, self.n), self.ldc),
        ] {
            if r > 0 && c > 0 && ld < c {
                return Err(Error::invalid(
                    op,
                    format!("{name} = {ld} is smaller than the {c} columns of a {r}x{c} operand"),
                ));
            }
        }
        let (_, _, sc) = self.spans();
        if self.batch > 1 && sc > 0 && self.stride_c < sc {
            return Err(Error::invalid(
                op,
                format!(
                    "stride_c = {} makes the {} outputs of {} elements overlap",
                    self.stride_c, self.batch, sc
                ),
            ));
        }
        for (name, v) in [
            ("stride_a", self.stride_a),
            ("stride_b", self.stride_b),
            ("stride_c", self.stride_c),
        ] {
            if v > i64::MAX as usize / 2 {
                return Err(Error::invalid(op, format!("{name} = {v} is too large")));
            }
        }
        Ok(())
    }

    /// True when the aligned 16-byte path of our kernels applies to A and B: addresses 16-byte
    /// aligned, leading dimensions and batch strides multiples of 4.
    pub fn ab_vectorizable(&self) -> bool {
        let batched = self.batch > 1;
        self.a.is_multiple_of(16)
            && self.b.is_multiple_of(16)
            && self.lda.is_multiple_of(4)
            && self.ldb.is_multiple_of(4)
            && (!batched || (self.stride_a.is_multiple_of(4) && self.stride_b.is_multiple_of(4)))
    }

    /// True when C also allows vector stores (same conditions).
    pub fn c_vectorizable(&self) -> bool {
        self.c.is_multiple_of(16)
            && self.ldc.is_multiple_of(4)
            && (self.batch <= 1 || self.stride_c.is_multiple_of(4))
    }
}

/// Loaded kernels, per context and name expression: the per-call lookup. Going through
/// `gpukit_jit::load_source` on every call would hash the whole kernel source (tens of KB) for
/// its cache key; this map costs one short string comparison.
fn kernel_cache() -> &'static Mutex<HashMap<(usize, String), Kernel>> {
    static CACHE: OnceLock<Mutex<HashMap<(usize, String), Kernel>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn load(
    ctx: &Arc<CudaContext>,
    source: &str,
    program: &str,
    kernel: &str,
    expr: Option<&str>,
) -> Result<Kernel> {
    let key = (ctx.cu_ctx() as usize, expr.unwrap_or(kernel).to_string());
    if let Some(k) = kernel_cache().lock().get(&key) {
        return Ok(k.clone());
    }
    let mut options = kernels::base_options();
    if let Some(e) = expr {
        options = options.name_expression(e);
    }
    let module = gpukit_jit::load_source(ctx, source, program, &options)?;
    let kernel = module.kernel(expr.unwrap_or(kernel))?;
    kernel_cache().lock().insert(key, kernel.clone());
    Ok(kernel)
}

/// Loads (compiling on first use) the kernel of one plan instantiation.
pub fn load_gemm_kernel(
    ctx: &Arc<CudaContext>,
    config: &config::TileConfig,
    trans_a: bool,
    trans_b: bool,
    vec: bool,
) -> Result<Kernel> {
    let (source, program, _, expr) = kernels::instantiation(config, trans_a, trans_b, vec);
    load(ctx, source, program, program, Some(&expr))
}

/// Loads the split-K reduction / beta-scaling kernel.
pub fn load_reduce(ctx: &Arc<CudaContext>) -> Result<Kernel> {
    load(
        ctx,
        kernels::REDUCE_SOURCE,
        kernels::REDUCE_PROGRAM,
        kernels::REDUCE_KERNEL,
        None,
    )
}

/// The multiprocessor count of a context's device (from [`DeviceAttributes`], read once per
/// device).
pub fn multiprocessor_count(ctx: &Arc<CudaContext>) -> Result<u32> {
    Ok(DeviceAttributes::of(ctx)?.multiprocessor_count)
}

/// Name of the environment variable that forces the TF32 path (`auto`, `mma`, `wgmma`).
pub const TF32_PATH_ENV: &str = "GPUKIT_GEMM_TF32";

/// The TF32 path requested by `GPUKIT_GEMM_TF32` ([`Tf32Path::Auto`] when unset); a value other
/// than `auto`, `mma` or `wgmma` is an [`Error::InvalidArgument`].
pub fn tf32_path_from_env() -> Result<Tf32Path> {
    let Some(v) = std::env::var_os(TF32_PATH_ENV) else {
        return Ok(Tf32Path::Auto);
    };
    v.to_str().and_then(Tf32Path::parse).ok_or_else(|| {
        Error::invalid(
            "gemm",
            format!("{TF32_PATH_ENV} = {v:?} is not one of auto, mma, wgmma"),
        )
    })
}

/// True when the device of `ctx` runs the `wgmma` kernel (compute capability exactly 9.0: the
/// kernel is built for `sm_90a`, which runs on no other architecture).
pub fn supports_wgmma(ctx: &Arc<CudaContext>) -> Result<bool> {
    Ok(DeviceAttributes::of(ctx)?.supports_wgmma())
}

fn wgmma_unsupported(ctx: &Arc<CudaContext>) -> Error {
    let arch = gpukit_jit::Arch::of_context(ctx)
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "unknown".into());
    Error::invalid(
        "gemm",
        format!(
            "the wgmma TF32 kernel needs a compute capability 9.0 GPU (H100/H200), this device is \
             {arch}; unset {TF32_PATH_ENV} or set it to `auto` or `mma`"
        ),
    )
}

/// The plan [`sgemm`] uses for `g` on the device of `ctx` (TF32: see [`tf32_path_from_env`]).
pub fn plan_for(ctx: &Arc<CudaContext>, precision: Precision, g: &RawGemm) -> Result<Plan> {
    let sms = multiprocessor_count(ctx)?;
    let (m, n, k) = (g.m as u32, g.n as u32, g.k as u32);
    let batch = g.batch.min(u32::MAX as usize) as u32;
    match precision {
        Precision::Fp32 => Ok(config::plan(Family::Sgemm, m, n, k, batch, sms)),
        Precision::Tf32 => {
            let path = match tf32_path_from_env()? {
                Tf32Path::Auto if !supports_wgmma(ctx)? => Tf32Path::Mma,
                Tf32Path::Wgmma if !supports_wgmma(ctx)? => return Err(wgmma_unsupported(ctx)),
                p => p,
            };
            Ok(config::plan_tf32(m, n, k, batch, sms, path))
        }
    }
}

/// Single-precision GEMM with our kernels; the plan is chosen per shape.
///
/// # Safety
/// `g.a`, `g.b` and `g.c` must be device addresses in the context of `stream`, valid for
/// [`RawGemm::required_len`] `f32` elements each, and C must not overlap A or B; the memory must
/// stay valid until the stream has run the work enqueued here.
pub unsafe fn sgemm(stream: &Arc<CudaStream>, precision: Precision, g: &RawGemm) -> Result<()> {
    g.validate()?;
    let plan = plan_for(stream.context(), precision, g)?;
    // SAFETY: forwarded from the caller.
    unsafe { sgemm_with_plan(stream, g, &plan) }
}

const GROUP_M: i32 = 8;
const MAX_GRID_Z: usize = 65535;

/// Single-precision GEMM with a given plan (its configuration decides TF32 or FP32).
///
/// # Safety
/// As for [`sgemm`].
pub unsafe fn sgemm_with_plan(stream: &Arc<CudaStream>, g: &RawGemm, plan: &Plan) -> Result<()> {
    g.validate()?;
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    let ctx = stream.context();
    if g.k == 0 || g.alpha == 0.0 {
        // C = beta * C (BLAS: A and B are not read when alpha == 0 or k == 0).
        // SAFETY: C is valid for the caller's span.
        return unsafe { scale_c(stream, g) };
    }
    let cfg = &plan.config;
    if cfg.family == Family::Wgmma {
        // SAFETY: forwarded from the caller.
        return unsafe { wgmma_gemm(stream, g, cfg) };
    }
    let (splits, k_per_split) = config::normalize_split(cfg, g.k as u32, plan.splits);
    let ta = g.trans_a.is_yes();
    let tb = g.trans_b.is_yes();
    let tiles = (g.m.div_ceil(cfg.bm as usize) * g.n.div_ceil(cfg.bn as usize)) as u64;
    if tiles > i32::MAX as u64 {
        return Err(Error::invalid(
            "gemm",
            format!(
                "{}x{} makes {tiles} tiles, more than a grid holds",
                g.m, g.n
            ),
        ));
    }
    let smem = cfg.smem_bytes(ta, tb);
    let threads = cfg.threads();

    if splits <= 1 {
        let vec = g.ab_vectorizable() && g.c_vectorizable();
        let kernel = load_gemm_kernel(ctx, cfg, ta, tb, vec)?;
        let chunk = MAX_GRID_Z;
        let mut b0 = 0usize;
        while b0 < g.batch {
            let nb = (g.batch - b0).min(chunk);
            let args = gemm_args(
                g,
                g.a + (b0 * g.stride_a * 4) as u64,
                g.b + (b0 * g.stride_b * 4) as u64,
                g.c + (b0 * g.stride_c * 4) as u64,
                g.ldc,
                g.stride_c,
                g.alpha as f32,
                g.beta as f32,
                1,
                g.k as i32,
            );
            let lc = LaunchConfig {
                grid: (tiles as u32, 1, nb as u32),
                block: (threads, 1, 1),
                shared_mem_bytes: smem,
            };
            // SAFETY: the enclosing unsafe fn's contract (RawGemm addresses valid on the stream's
            // device for every access, C not overlapping A or B, memory live until the work has
            // run) is launch_unchecked's; the workspace is this call's own allocation.
            unsafe { kernel.launch_unchecked(stream, lc, &args) }?;
            b0 += nb;
        }
        return Ok(());
    }

    // Split-K: each (batch, split) writes its partial product into a workspace slice (row
    // stride rounded to 4 floats, so the vector path applies), then a reduction sums the slices
    // in a fixed order (deterministic) and applies alpha and beta.
    let ldw = g.n.div_ceil(4) * 4;
    let slice = g.m * ldw;
    let per_launch = (MAX_GRID_Z / splits as usize).max(1);
    let vec = g.ab_vectorizable();
    let kernel = load_gemm_kernel(ctx, cfg, ta, tb, vec)?;
    let reduce = load_reduce(ctx)?;
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(per_launch);
        let len = nb * splits as usize * slice;
        // SAFETY: the workspace is fully written by the GEMM kernel (every (row, col) of every
        // slice lies in some tile) before the reduction reads it, both on this stream.
        let ws = unsafe { stream.alloc::<f32>(len) }
            .map_err(|e| Error::driver("allocating the split-K workspace", e))?;
        let (ws_ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(&ws, stream);
        let args = gemm_args(
            g,
            g.a + (b0 * g.stride_a * 4) as u64,
            g.b + (b0 * g.stride_b * 4) as u64,
            ws_ptr,
            ldw,
            slice,
            1.0,
            0.0,
            splits as i32,
            k_per_split as i32,
        );
        let lc = LaunchConfig {
            grid: (tiles as u32, 1, nb as u32 * splits),
            block: (threads, 1, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: the enclosing unsafe fn's contract (RawGemm addresses valid on the stream's
        // device for every access, C not overlapping A or B, memory live until the work has
        // run) is launch_unchecked's; the workspace is this call's own allocation.
        unsafe { kernel.launch_unchecked(stream, lc, &args) }?;
        let rargs = [
            KernelArg::Ptr(ws_ptr),
            KernelArg::Ptr(g.c + (b0 * g.stride_c * 4) as u64),
            (g.m as i32).into(),
            (g.n as i32).into(),
            (ldw as i32).into(),
            (slice as i64).into(),
            (g.ldc as i32).into(),
            (g.stride_c as i64).into(),
            (splits as i32).into(),
            (nb as i32).into(),
            (g.alpha as f32).into(),
            (g.beta as f32).into(),
        ];
        // SAFETY: the enclosing unsafe fn's contract (RawGemm addresses valid on the stream's
        // device for every access, C not overlapping A or B, memory live until the work has
        // run) is launch_unchecked's; the workspace is this call's own allocation.
        unsafe { reduce.launch_unchecked(stream, reduce_launch(nb * g.m * g.n), &rargs) }?;
        b0 += nb;
    }
    Ok(())
}

/// Rows of op(X) one pack block covers (the pack kernel's block tile is 64 rows x 32 k).
const PACK_ROWS: usize = 64;

/// Operands packed for the `wgmma` kernel (see `gemm_wgmma.cu`): TF32-rounded, swizzled K-major
/// tiles of op(A) (at element 0 of `buf`) and op(B)^T (at element `b_offset`), with their element
/// strides between batch entries (0: packed once and broadcast).
struct Packed {
    buf: cudarc::driver::CudaSlice<f32>,
    b_offset: usize,
    stride_a: usize,
    stride_b: usize,
}

/// Packs batch entries `b0 .. b0 + nb` of op(A) and op(B)^T for `cfg` (one allocation, one
/// launch).
///
/// # Safety
/// As for [`sgemm`]; `g` is validated, `k > 0`, `b0 + nb <= g.batch` and `nb <= 65535`.
unsafe fn wgmma_pack(
    stream: &Arc<CudaStream>,
    g: &RawGemm,
    cfg: &config::TileConfig,
    b0: usize,
    nb: usize,
) -> Result<Packed> {
    let ctx = stream.context();
    let (bm, bn, bk) = (cfg.bm as usize, cfg.bn as usize, cfg.bk as usize);
    let num_kt = g.k.div_ceil(bk);
    let (mp, np) = (g.m.div_ceil(bm) * bm, g.n.div_ceil(bn) * bn);
    if num_kt > u32::MAX as usize / 2 || (mp + np) / PACK_ROWS > 65535 {
        return Err(Error::invalid(
            "gemm",
            format!(
                "{}x{}x{} is too large for the wgmma operand pack (at most {} rows of op(A) and \
                 op(B)^T together); use {TF32_PATH_ENV}=mma",
                g.m,
                g.n,
                g.k,
                65535 * PACK_ROWS
            ),
        ));
    }
    let entries = |stride: usize| if stride == 0 { 1 } else { nb };
    let (ea, eb) = (entries(g.stride_a), entries(g.stride_b));
    let (per_a, per_b) = (mp * num_kt * bk, np * num_kt * bk);
    let b_offset = ea * per_a;
    // SAFETY: every element of the buffer is written by the pack kernel below (its grid covers
    // every (entry, 64-row block, k tile) of both padded operands) before the GEMM kernel reads
    // it, both on this stream.
    let buf = unsafe { stream.alloc::<f32>(b_offset + eb * per_b) }
        .map_err(|e| Error::driver("allocating the wgmma operand pack", e))?;
    {
        let (dst, _sync) = cudarc::driver::DevicePtr::device_ptr(&buf, stream);
        let kernel = load(
            ctx,
            kernels::WGMMA_SOURCE,
            kernels::PACK_PROGRAM,
            kernels::PACK_PROGRAM,
            Some(&kernels::pack_expression(cfg)),
        )?;
        let args = [
            KernelArg::Ptr(g.a + (b0 * g.stride_a * 4) as u64),
            KernelArg::Ptr(dst),
            (g.m as i32).into(),
            (g.lda as i32).into(),
            (g.stride_a as i64).into(),
            (g.trans_a.is_yes() as i32).into(),
            (ea as i32).into(),
            KernelArg::Ptr(g.b + (b0 * g.stride_b * 4) as u64),
            KernelArg::Ptr(dst + (b_offset * 4) as u64),
            (g.n as i32).into(),
            (g.ldb as i32).into(),
            (g.stride_b as i64).into(),
            (!g.trans_b.is_yes() as i32).into(),
            (eb as i32).into(),
            (g.k as i32).into(),
            (num_kt as i32).into(),
        ];
        let lc = LaunchConfig::new(
            (
                num_kt as u32,
                ((mp + np) / PACK_ROWS) as u32,
                ea.max(eb) as u32,
            ),
            (256, 1, 1),
        );
        // SAFETY: the enclosing unsafe fn's contract (RawGemm addresses valid on the stream's
        // device for every access, C not overlapping A or B, memory live until the work has
        // run) is launch_unchecked's; the workspace is this call's own allocation.
        unsafe { kernel.launch_unchecked(stream, lc, &args) }?;
    }
    Ok(Packed {
        buf,
        b_offset,
        stride_a: if g.stride_a == 0 { 0 } else { per_a },
        stride_b: if g.stride_b == 0 { 0 } else { per_b },
    })
}

/// The `wgmma` path: pack, then the GEMM kernel, per chunk of at most 65535 batch entries. The
/// packed buffers are freed stream-ordered (no host synchronisation).
///
/// # Safety
/// As for [`sgemm`]; `g` is validated, non-empty, `k > 0`, `alpha != 0`.
unsafe fn wgmma_gemm(
    stream: &Arc<CudaStream>,
    g: &RawGemm,
    cfg: &config::TileConfig,
) -> Result<()> {
    let ctx = stream.context();
    if !supports_wgmma(ctx)? {
        return Err(wgmma_unsupported(ctx));
    }
    let tiles = g.m.div_ceil(cfg.bm as usize) * g.n.div_ceil(cfg.bn as usize);
    if tiles > i32::MAX as usize {
        return Err(Error::invalid(
            "gemm",
            format!(
                "{}x{} makes {tiles} tiles, more than a grid holds",
                g.m, g.n
            ),
        ));
    }
    let vec = g.c_vectorizable();
    let kernel = load_gemm_kernel(ctx, cfg, false, false, vec)?;
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(MAX_GRID_Z);
        // SAFETY: forwarded from the caller; b0 + nb <= batch, nb <= 65535.
        let packed = unsafe { wgmma_pack(stream, g, cfg, b0, nb) }?;
        let (pa, _guard) = cudarc::driver::DevicePtr::device_ptr(&packed.buf, stream);
        let pb = pa + (packed.b_offset * 4) as u64;
        let args = [
            KernelArg::Ptr(pa),
            KernelArg::Ptr(pb),
            KernelArg::Ptr(g.c + (b0 * g.stride_c * 4) as u64),
            (g.m as i32).into(),
            (g.n as i32).into(),
            (g.k as i32).into(),
            (g.ldc as i32).into(),
            (packed.stride_a as i64).into(),
            (packed.stride_b as i64).into(),
            (g.stride_c as i64).into(),
            (g.alpha as f32).into(),
            (g.beta as f32).into(),
            GROUP_M.into(),
        ];
        let lc = LaunchConfig {
            grid: (tiles as u32, 1, nb as u32),
            block: (cfg.threads(), 1, 1),
            shared_mem_bytes: cfg.smem_bytes(false, false),
        };
        // SAFETY: the enclosing unsafe fn's contract (RawGemm addresses valid on the stream's
        // device for every access, C not overlapping A or B, memory live until the work has
        // run) is launch_unchecked's; the workspace is this call's own allocation.
        unsafe { kernel.launch_unchecked(stream, lc, &args) }?;
        b0 += nb;
    }
    Ok(())
}

/// Runs only the operand pack of the `wgmma` path for `g` (benches: the pack's share of the
/// time). Does nothing for empty products.
///
/// # Safety
/// As for [`sgemm`].
pub unsafe fn wgmma_pack_only(stream: &Arc<CudaStream>, g: &RawGemm) -> Result<()> {
    g.validate()?;
    if g.m == 0 || g.n == 0 || g.k == 0 || g.batch == 0 {
        return Ok(());
    }
    if !supports_wgmma(stream.context())? {
        return Err(wgmma_unsupported(stream.context()));
    }
    let cfg = config::WGMMA_CONFIGS[0];
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(MAX_GRID_Z);
        // SAFETY: forwarded from the caller.
        drop(unsafe { wgmma_pack(stream, g, &cfg, b0, nb) }?);
        b0 += nb;
    }
    Ok(())
}

fn reduce_launch(elements: usize) -> LaunchConfig {
    let blocks = elements.div_ceil(256).clamp(1, 132 * 16) as u32;
    LaunchConfig::new((blocks, 1, 1), (256, 1, 1))
}

#[allow(clippy::too_many_arguments)]
fn gemm_args(
    g: &RawGemm,
    a: u64,
    b: u64,
    c: u64,
    ldc: usize,
    stride_c: usize,
    alpha: f32,
    beta: f32,
    splits: i32,
    k_per_split: i32,
) -> Vec<KernelArg> {
    vec![
        KernelArg::Ptr(a),
        KernelArg::Ptr(b),
        KernelArg::Ptr(c),
        (g.m as i32).into(),
        (g.n as i32).into(),
        (g.k as i32).into(),
        (g.lda as i32).into(),
        (g.ldb as i32).into(),
        (ldc as i32).into(),
        (g.stride_a as i64).into(),
        (g.stride_b as i64).into(),
        (stride_c as i64).into(),
        alpha.into(),
        beta.into(),
        splits.into(),
        k_per_split.into(),
        GROUP_M.into(),
    ]
}

/// `C = beta * C` over all batch entries (the k == 0 / alpha == 0 case).
unsafe fn scale_c(stream: &Arc<CudaStream>, g: &RawGemm) -> Result<()> {
    let reduce = load_reduce(stream.context())?;
    let mut b0 = 0usize;
    // The reduction indexes batch * m * n with 64-bit arithmetic; chunk the batch to keep the
    // `batch` argument in i32.
    while b0 < g.batch {
        let nb = (g.batch - b0).min(i32::MAX as usize);
        let args = [
            KernelArg::Ptr(g.c),
            KernelArg::Ptr(g.c + (b0 * g.stride_c * 4) as u64),
            (g.m as i32).into(),
            (g.n as i32).into(),
            (g.ldc as i32).into(),
            0i64.into(),
            (g.ldc as i32).into(),
            (g.stride_c as i64).into(),
            0i32.into(),
            (nb as i32).into(),
            0.0f32.into(),
            (g.beta as f32).into(),
        ];
        // SAFETY: the enclosing unsafe fn's contract (RawGemm addresses valid on the stream's
        // device for every access, C not overlapping A or B, memory live until the work has
        // run) is launch_unchecked's; the workspace is this call's own allocation.
        unsafe { reduce.launch_unchecked(stream, reduce_launch(nb * g.m * g.n), &args) }?;
        b0 += nb;
    }
    Ok(())
}

/// Element types cuBLAS computes for [`cublas_gemm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlasType {
    /// f32 with cuBLAS's default math (exact FP32, no tensor cores).
    F32,
    /// f32 inputs on TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    F32Tf32,
    /// f64.
    F64,
    /// f16 inputs and output, f32 accumulation.
    F16,
    /// bf16 inputs and output, f32 accumulation.
    Bf16,
}

impl BlasType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            BlasType::F32 | BlasType::F32Tf32 => 4,
            BlasType::F64 => 8,
            BlasType::F16 | BlasType::Bf16 => 2,
        }
    }
}

/// The cuBLAS handle bound to `stream` (gpukit-core's one handle cache, [`crate::handles`]).
pub fn blas_handle(stream: &Arc<CudaStream>) -> Result<Arc<BlasHandle>> {
    BlasHandle::for_stream(&Stream::from_cuda(stream.clone()))
}

/// cuBLAS GEMM on row-major operands of element type `ty` (pointers and dimensions as in
/// [`RawGemm`]; alpha and beta are used as f64 for [`BlasType::F64`], else as f32).
///
/// The row-major product is computed as the column-major `C^T = op(B)^T op(A)^T`.
///
/// # Safety
/// As for [`sgemm`], with elements of `ty`.
pub unsafe fn cublas_gemm(stream: &Arc<CudaStream>, ty: BlasType, g: &RawGemm) -> Result<()> {
    use cublas_sys::{cublasComputeType_t as Ct, cudaDataType as Dt};
    g.validate()?;
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    let handle = blas_handle(stream)?;
    let (dt, ct) = match ty {
        BlasType::F32 => (Dt::CUDA_R_32F, Ct::CUBLAS_COMPUTE_32F),
        BlasType::F32Tf32 => (Dt::CUDA_R_32F, Ct::CUBLAS_COMPUTE_32F_FAST_TF32),
        BlasType::F64 => (Dt::CUDA_R_64F, Ct::CUBLAS_COMPUTE_64F),
        BlasType::F16 => (Dt::CUDA_R_16F, Ct::CUBLAS_COMPUTE_32F),
        BlasType::Bf16 => (Dt::CUDA_R_16BF, Ct::CUBLAS_COMPUTE_32F),
    };
    let (a32, b32) = (g.alpha as f32, g.beta as f32);
    let (alpha, beta): (*const std::ffi::c_void, *const std::ffi::c_void) = if ty == BlasType::F64 {
        (
            &g.alpha as *const f64 as *const _,
            &g.beta as *const f64 as *const _,
        )
    } else {
        (
            &a32 as *const f32 as *const _,
            &b32 as *const f32 as *const _,
        )
    };
    let ld = |x: usize| x.max(1) as i32;
    let mut b0 = 0usize;
    while b0 < g.batch {
        let nb = (g.batch - b0).min(i32::MAX as usize);
        let off = |p: u64, stride: usize| p + (b0 * stride * ty.size()) as u64;
        handle
            .with(|raw| {
                // SAFETY: the caller guarantees the pointers and spans; alpha/beta point to host
                // scalars of the compute type (host pointer mode, the handle's default), alive
                // for the call; `raw` is the live handle bound to `stream`.
                unsafe {
                    cudarc::cublas::result::gemm_strided_batched_ex(
                        raw,
                        g.trans_b.cublas(),
                        g.trans_a.cublas(),
                        g.n as i32,
                        g.m as i32,
                        g.k as i32,
                        alpha,
                        off(g.b, g.stride_b) as *const _,
                        dt,
                        ld(g.ldb),
                        g.stride_b as i64,
                        off(g.a, g.stride_a) as *const _,
                        dt,
                        ld(g.lda),
                        g.stride_a as i64,
                        beta,
                        off(g.c, g.stride_c) as *mut _,
                        dt,
                        ld(g.ldc),
                        g.stride_c as i64,
                        nb as i32,
                        ct,
                        cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
            })?
            .map_err(|source| Error::Cublas {
                action: format!(
                    "running a {ty:?} GEMM of {}x{}x{} (batch {nb})",
                    g.m, g.n, g.k
                ),
                source,
            })?;
        b0 += nb;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> RawGemm {
        RawGemm::contiguous(3, 5, 7, 0, 0, 0)
    }

    #[test]
    fn validation_names_the_bad_leading_dimension() {
        base().validate().unwrap();
        let mut g = base();
        g.lda = 6;
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("lda = 6") && e.contains("3x7"), "{e}");
        let mut g = base();
        g.trans_b = Transpose::Yes; // B stored 5x7: ldb 5 is too small
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("ldb = 5") && e.contains("5x7"), "{e}");
        let mut g = base();
        g.ldc = 4;
        assert!(g.validate().unwrap_err().to_string().contains("ldc = 4"));
        // Empty operands accept any leading dimension.
        let mut g = RawGemm::contiguous(0, 5, 7, 0, 0, 0);
        g.lda = 0;
        g.validate().unwrap();
    }

    #[test]
    fn validation_rejects_overlapping_batches_and_huge_dims() {
        let mut g = base();
        g.batch = 2;
        g.stride_c = 14; // one C spans 15 elements
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("overlap"), "{e}");
        g.stride_c = 15;
        g.validate().unwrap();
        g.stride_a = 0; // broadcasting A is fine
        g.validate().unwrap();
        let mut g = base();
        g.m = 1 << 31;
        assert!(g.validate().unwrap_err().to_string().contains("32-bit"));
    }

    #[test]
    fn spans_and_vector_path_conditions() {
        let mut g = RawGemm::contiguous(4, 8, 12, 256, 512, 1024);
        assert_eq!(g.spans(), (48, 96, 32));
        g.batch = 3;
        assert_eq!(g.required_len(), (3 * 48, 3 * 96, 3 * 32));
        assert!(g.ab_vectorizable() && g.c_vectorizable());
        g.lda = 13;
        assert!(!g.ab_vectorizable());
        let mut g = RawGemm::contiguous(4, 8, 12, 256 + 4, 512, 1024);
        assert!(!g.ab_vectorizable());
        g.a = 256;
        g.c = 1024 + 8;
        assert!(g.ab_vectorizable() && !g.c_vectorizable());
        let mut t = RawGemm::contiguous(4, 8, 12, 0, 0, 0);
        t.trans_a = Transpose::Yes;
        assert_eq!(t.a_stored(), (12, 4));
    }
}
