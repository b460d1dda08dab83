//! cuBLAS GEMM on row-major operands: the baseline of the benches, the f64 / f16 / bf16 paths of
//! [`super::gemm_with`], and the f64 reference of the tests. The handle is the stream's one
//! cached handle from gpukit-core's handle cache ([`crate::handles::BlasHandle`]).

use super::desc::{RawGemm, Transpose};
use crate::error::{Error, Result};
use crate::handles::BlasHandle;
use crate::stream::Stream;
use cudarc::cublas::sys as cublas_sys;

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

fn op(t: Transpose) -> cublas_sys::cublasOperation_t {
    match t {
        Transpose::No => cublas_sys::cublasOperation_t::CUBLAS_OP_N,
        Transpose::Yes => cublas_sys::cublasOperation_t::CUBLAS_OP_T,
    }
}

/// cuBLAS GEMM on row-major operands of element type `ty` (pointers and dimensions as in
/// [`RawGemm`]; alpha and beta are used as f64 for [`BlasType::F64`], else as f32).
///
/// The row-major product is computed as the column-major `C^T = op(B)^T op(A)^T`.
///
/// # Safety
/// `g.a`, `g.b` and `g.c` must be device addresses in the context of `stream`, valid for
/// [`RawGemm::required_len`] elements of `ty` each, and C must not overlap A or B; the memory
/// must stay valid until the stream has run the work enqueued here.
pub unsafe fn cublas_gemm(stream: &Stream, ty: BlasType, g: &RawGemm) -> Result<()> {
    use cublas_sys::{cublasComputeType_t as Ct, cudaDataType as Dt};
    g.validate()?;
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    let handle = BlasHandle::for_stream(stream)?;
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
                        op(g.trans_b),
                        op(g.trans_a),
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
