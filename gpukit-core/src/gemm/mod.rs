//! GEMM: FP32, TF32 and 3xTF32 kernels of our own beside cuBLAS.
//!
//! - [`matmul`] / [`matmul_with`]: `A @ B` for 2-D arrays and batched 3-D arrays (a 2-D operand
//!   or a batch of 1 is broadcast over the other's batch).
//! - [`gemm`] / [`gemm_with`]: `C = alpha * op(A) * op(B) + beta * C` into an existing array,
//!   with [`Transpose`] of either operand.
//! - f32 runs our kernels with a [`Precision`]: [`Precision::Fp32`] (FP32 accuracy, the default,
//!   like NumPy), [`Precision::Tf32`] (tensor cores, opt-in, like PyTorch's `allow_tf32`) or
//!   [`Precision::Tf32x3`] (FP32 accuracy from tensor cores), per call or as the process default
//!   ([`set_default_precision`]). f64, f16 and bf16 run cuBLAS (f16/bf16 accumulate in f32).
//!   Other element types are rejected.
//! - Operands may be any row-major layout with unit column stride and any row stride, or a
//!   transposed view (unit row stride), which is handled as a transpose flag without a copy;
//!   anything else is made contiguous first.
//!
//! # FP32 through 3xTF32 on Hopper
//!
//! On compute capability 9.0 (H100, H200) [`Precision::Fp32`] runs the 3xTF32 tensor-core kernel
//! for the shapes with K >= 256 where the planner estimates it faster than the FP32 SIMT kernel
//! (most products from about 1000^3 up; skinny, batched-small and short-K ones stay on SIMT),
//! because there it was measured both faster and more accurate than cuBLAS SGEMM. Measured on
//! the H200 (normwise error against cuBLAS DGEMM on the same inputs, GEMM_NOTES.md "Version 4
//! run" and "Version 5 run"):
//!
//! | shape | cuBLAS SGEMM | 3xTF32 | 3xTF32 / SGEMM speed |
//! | --- | --- | --- | --- |
//! | 1024x1024x8192 (normal inputs) | 8.1e-7 | 3.2e-7 | - |
//! | 1024x1024x8192 (wide exponent range) | 3.5e-7 | 2.6e-7 | - |
//! | 2048^3 (normal) | 8.1e-7 | 2.8e-7 | - |
//! | 96x80x30000 (wide exponent range) | 2.4e-7 | 2.1e-7 | - |
//! | 4096^3 (uniform) | 1.1e-6 | 3.1e-7 | 2.15x |
//! | 8192^3 (uniform) | 1.6e-6 | 3.7e-7 | 2.44x |
//! | 4096x4096x256 (uniform) | 2.9e-7 | 2.4e-7 | 1.78x |
//! | batched 1024 x 64^3 (uniform; SIMT is the default there) | 1.4e-7 | 2.4e-7 | 0.22x |
//!
//! Its results differ from SGEMM's in the last bits (the split `big + small` represents each
//! input to about 2^-22, the sums over K are rounded to nearest outside the tensor cores); NaN
//! and infinity propagate as in SGEMM. `GPUKIT_GEMM_FP32=simt` keeps the SIMT kernel ([`path`]).
//!
//! # Layers
//!
//! - [`desc`]: [`RawGemm`], a GEMM on raw device pointers, and its validation;
//! - [`plan`]: tile configurations and the per-shape, per-device plan;
//! - [`path`]: the environment overrides of the kernel path;
//! - [`tune`]: the autotuner (a measured plan on first use of a shape class, cached in memory
//!   and beside the kernel cache on disk; `GPUKIT_GEMM_TUNE`);
//! - [`launch`]: [`sgemm`] / [`sgemm_with_plan`] run a plan (split-K workspace included);
//! - [`kernels`]: the CUDA sources, their instantiations and loading (the device's kernel
//!   registry); `operand`, `pack` and [`tma`] feed the Hopper kernels (the latter also probes
//!   whether the GPU's tensor copies round to TF32);
//! - [`cublas`]: cuBLAS GEMM for every element type (baseline, f64/f16/bf16, references).
//!
//! ```no_run
//! use gpukit_core::{Device, GpuArray};
//! use gpukit_core::gemm::{matmul, matmul_with, Precision};
//! let dev = Device::open(0)?;
//! let a = GpuArray::<f32>::from_slice(&dev, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let b = GpuArray::<f32>::from_slice(&dev, &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
//! assert_eq!(matmul(&a, &b)?.to_vec()?, vec![4.0, 5.0, 10.0, 11.0]);
//! let fast = matmul_with(&a, &b, Precision::Tf32)?; // tensor cores, ~3e-4 relative error
//! # Ok::<(), gpukit_core::Error>(())
//! ```

pub mod cublas;
pub mod desc;
pub mod kernels;
pub mod launch;
mod operand;
mod pack;
pub mod path;
pub mod plan;
mod tail;
pub mod tma;
pub mod tune;

pub use cublas::{cublas_gemm, BlasType};
pub use desc::{Precision, RawGemm, Transpose};
pub use launch::{
    class_of, forget_plans, pack_only, paths_for, plan_for, plan_with_paths, sgemm,
    sgemm_with_plan, tune_now, TuneReport,
};
pub use tma::{tensor_copies_round, TmaRounding};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::GpuArray;
use std::sync::atomic::{AtomicU8, Ordering};

static DEFAULT_PRECISION: AtomicU8 = AtomicU8::new(0);

/// Sets the process-wide precision of f32 products that do not name one (initially
/// [`Precision::Fp32`]).
pub fn set_default_precision(p: Precision) {
    DEFAULT_PRECISION.store(
        match p {
            Precision::Fp32 => 0,
            Precision::Tf32 => 1,
            Precision::Tf32x3 => 2,
        },
        Ordering::Relaxed,
    );
}

/// The process-wide default precision of f32 products.
pub fn default_precision() -> Precision {
    match DEFAULT_PRECISION.load(Ordering::Relaxed) {
        1 => Precision::Tf32,
        2 => Precision::Tf32x3,
        _ => Precision::Fp32,
    }
}

/// `A @ B` with the default precision for f32 (see [`matmul_with`]).
pub fn matmul<T: DType>(a: &GpuArray<T>, b: &GpuArray<T>) -> Result<GpuArray<T>> {
    matmul_with(a, b, default_precision())
}

/// The batch, m, n, k of `a @ b` for shapes `[m, k] @ [k, n]` or `[batch, m, k] @ [batch, k, n]`
/// (a 2-D operand or a batch of 1 broadcasts), and the output shape. Errors name both shapes.
pub fn matmul_shapes(a: &[usize], b: &[usize]) -> Result<(usize, usize, usize, usize, Vec<usize>)> {
    let mismatch = || Error::ShapeMismatch {
        op: "matmul".into(),
        lhs: a.to_vec(),
        rhs: b.to_vec(),
    };
    if !(2..=3).contains(&a.len()) || !(2..=3).contains(&b.len()) {
        return Err(Error::InvalidArgument {
            op: "matmul".into(),
            reason: format!("operands must be 2-D or 3-D (batched), got shapes {a:?} and {b:?}"),
        });
    }
    let (ba, m, ka) = split3(a);
    let (bb, kb, n) = split3(b);
    if ka != kb {
        return Err(mismatch());
    }
    let batch = match (ba, bb) {
        (x, y) if x == y => x,
        (1, y) => y,
        (x, 1) => x,
        _ => return Err(mismatch()),
    };
    let out = if a.len() == 2 && b.len() == 2 {
        vec![m, n]
    } else {
        vec![batch, m, n]
    };
    Ok((batch, m, n, ka, out))
}

fn split3(s: &[usize]) -> (usize, usize, usize) {
    if s.len() == 2 {
        (1, s[0], s[1])
    } else {
        (s[0], s[1], s[2])
    }
}

/// `A @ B` with an explicit precision for f32 (ignored for f64, f16 and bf16, which run
/// cuBLAS). Shapes: `[m, k] @ [k, n] -> [m, n]`, or batched `[b, m, k] @ [b, k, n] -> [b, m, n]`
/// where either side may be 2-D or have a batch of 1 (broadcast). An empty dimension gives an
/// empty result, `k == 0` gives zeros.
pub fn matmul_with<T: DType>(
    a: &GpuArray<T>,
    b: &GpuArray<T>,
    precision: Precision,
) -> Result<GpuArray<T>> {
    let (_, _, _, _, out_shape) = matmul_shapes(a.shape(), b.shape())?;
    check_dtype::<T>("matmul")?;
    same_device("matmul", a, b)?;
    let dev = a.device().clone();
    let stream = dev.stream();
    let mut c = GpuArray::<T>::alloc_on(&dev, &out_shape, &stream)?;
    gemm_with(
        1.0,
        a,
        Transpose::No,
        b,
        Transpose::No,
        0.0,
        &mut c,
        precision,
    )?;
    Ok(c)
}

/// `C = alpha * op(A) * op(B) + beta * C` with the default precision for f32 (see [`gemm_with`]).
pub fn gemm<T: DType>(
    alpha: f64,
    a: &GpuArray<T>,
    trans_a: Transpose,
    b: &GpuArray<T>,
    trans_b: Transpose,
    beta: f64,
    c: &mut GpuArray<T>,
) -> Result<()> {
    gemm_with(alpha, a, trans_a, b, trans_b, beta, c, default_precision())
}

/// How one operand is laid out for the raw layer: stored transpose flag, leading dimension,
/// batch stride, and the array the pointer comes from (a contiguous copy when needed).
struct Operand<T: DType> {
    array: GpuArray<T>,
    transposed: bool,
    ld: usize,
    batch_stride: usize,
}

/// Describes a 2-D or 3-D array as (batch of) row-major matrices `rows x cols` (as used, before
/// `trans`), making it contiguous when its strides fit neither a row-major nor a transposed view.
fn operand<T: DType>(x: &GpuArray<T>, trans: Transpose) -> Result<Operand<T>> {
    let describe = |x: &GpuArray<T>| -> Option<(bool, usize, usize)> {
        let nd = x.ndim();
        let (r, c) = (x.shape()[nd - 2], x.shape()[nd - 1]);
        let (sr, sc) = (x.strides()[nd - 2], x.strides()[nd - 1]);
        let sb = if nd == 3 { x.strides()[0] } else { 0 };
        if sr < 0 || sc < 0 || sb < 0 {
            return None;
        }
        let (sr, sc, sb) = (sr as usize, sc as usize, sb as usize);
        if (sc == 1 || c <= 1) && sr >= c.max(1) {
            Some((false, sr.max(c).max(1), sb))
        } else if (sr == 1 || r <= 1) && sc >= r.max(1) {
            Some((true, sc.max(r).max(1), sb))
        } else {
            None
        }
    };
    let (array, (t, ld, sb)) = match describe(x) {
        Some(d) => (x.clone(), d),
        None => {
            let y = x.contiguous()?;
            let d = describe(&y).ok_or_else(|| {
                Error::invalid("gemm", format!("cannot describe shape {:?}", y.shape()))
            })?;
            (y, d)
        }
    };
    Ok(Operand {
        array,
        transposed: t ^ trans.is_yes(),
        ld,
        batch_stride: sb,
    })
}

fn check_dtype<T: DType>(op: &str) -> Result<()> {
    match T::RUST_NAME {
        "f32" | "f64" | "f16" | "bf16" => Ok(()),
        other => Err(Error::UnsupportedDType {
            op: op.to_string(),
            dtype: other_static(other),
        }),
    }
}

fn other_static(name: &str) -> &'static str {
    ["i32", "u32", "i64", "u8"]
        .into_iter()
        .find(|n| *n == name)
        .unwrap_or("this element type")
}

fn same_device<T: DType>(op: &str, a: &GpuArray<T>, b: &GpuArray<T>) -> Result<()> {
    if a.device() != b.device() {
        return Err(Error::DeviceMismatch {
            op: op.to_string(),
            lhs: a.device().ordinal(),
            rhs: b.device().ordinal(),
        });
    }
    Ok(())
}

/// `C = alpha * op(A) * op(B) + beta * C` with an explicit precision for f32.
///
/// `op(A)` is `[m, k]` (or `[batch, m, k]`), `op(B)` is `[k, n]`, C is `[m, n]` (or
/// `[batch, m, n]`; 2-D operands broadcast over the batch). C must be row-major with a unit
/// column stride (any row stride). `beta == 0` does not read C. Errors name the shapes.
#[allow(clippy::too_many_arguments)]
pub fn gemm_with<T: DType>(
    alpha: f64,
    a: &GpuArray<T>,
    trans_a: Transpose,
    b: &GpuArray<T>,
    trans_b: Transpose,
    beta: f64,
    c: &mut GpuArray<T>,
    precision: Precision,
) -> Result<()> {
    check_dtype::<T>("gemm")?;
    same_device("gemm", a, b)?;
    same_device("gemm", a, c)?;
    let op_shape = |x: &GpuArray<T>, t: Transpose| -> Vec<usize> {
        let mut s = x.shape().to_vec();
        let nd = s.len();
        if t.is_yes() && nd >= 2 {
            s.swap(nd - 1, nd - 2);
        }
        s
    };
    let (sa, sb) = (op_shape(a, trans_a), op_shape(b, trans_b));
    let (batch, m, n, k, out_shape) = matmul_shapes(&sa, &sb)?;
    let c_ok = match c.ndim() {
        2 => c.shape() == [m, n] && batch == 1,
        3 => c.shape() == [batch, m, n] || (c.shape() == [1, m, n] && batch == 1),
        _ => false,
    };
    if !c_ok {
        return Err(Error::ShapeMismatch {
            op: format!("gemm output (op(A) {sa:?} @ op(B) {sb:?} = {out_shape:?})"),
            lhs: out_shape,
            rhs: c.shape().to_vec(),
        });
    }
    let nd = c.ndim();
    let (csr, csc) = (c.strides()[nd - 2], c.strides()[nd - 1]);
    let csb = if nd == 3 { c.strides()[0] } else { 0 };
    if (csc != 1 && n > 1) || csr < n as isize || csb < 0 {
        return Err(Error::invalid(
            "gemm",
            format!(
                "the output must be row-major with unit column stride (shape {:?}, strides {:?}); \
                 write into a contiguous array",
                c.shape(),
                c.strides()
            ),
        ));
    }
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    // The kernels (and cuBLAS) take C as distinct from A and B (`__restrict__`): an operand
    // that shares memory with C (a view of it, `let mut c = a.clone()`) is read from a copy
    // made first, so the result is as if both operands had been read before C was written.
    let a_src;
    let a = if k > 0 && a.overlaps(c) {
        a_src = a.astype::<T>()?;
        &a_src
    } else {
        a
    };
    let b_src;
    let b = if k > 0 && b.overlaps(c) {
        b_src = b.astype::<T>()?;
        &b_src
    } else {
        b
    };
    let oa = operand(a, trans_a)?;
    let ob = operand(b, trans_b)?;
    let a_batched = a.ndim() == 3 && a.shape()[0] == batch && batch > 1;
    let b_batched = b.ndim() == 3 && b.shape()[0] == batch && batch > 1;
    let g = RawGemm {
        m,
        n,
        k,
        trans_a: if oa.transposed {
            Transpose::Yes
        } else {
            Transpose::No
        },
        trans_b: if ob.transposed {
            Transpose::Yes
        } else {
            Transpose::No
        },
        a: oa.array.device_ptr(),
        lda: oa.ld,
        stride_a: if a_batched { oa.batch_stride } else { 0 },
        b: ob.array.device_ptr(),
        ldb: ob.ld,
        stride_b: if b_batched { ob.batch_stride } else { 0 },
        c: c.device_ptr(),
        ldc: (csr.max(1)) as usize,
        stride_c: if batch > 1 { csb as usize } else { 0 },
        alpha,
        beta,
        batch,
    };
    let dev = c.device().clone();
    let stream = dev.stream();
    // Before anything is queued: `stream` is ordered after earlier uses of the operands on other
    // streams, and their memory is not reused before the work queued below has run (even when
    // a launch fails part-way, after some of it was queued).
    oa.array.used_on(&stream);
    ob.array.used_on(&stream);
    c.used_on(&stream);
    // SAFETY: the pointers come from live arrays of this device whose shapes and strides were
    // checked above (RawGemm::validate re-checks leading dimensions and batch strides); C does
    // not overlap A or B (an overlapping operand was copied above), C's rows and batch entries
    // do not overlap each other (unit column stride, row stride >= n, batch stride checked by
    // validate); the arrays were marked as used on `stream` above.
    unsafe {
        match T::RUST_NAME {
            "f32" => launch::sgemm(&stream, precision, &g),
            "f64" => cublas::cublas_gemm(&stream, BlasType::F64, &g),
            "f16" => cublas::cublas_gemm(&stream, BlasType::F16, &g),
            "bf16" => cublas::cublas_gemm(&stream, BlasType::Bf16, &g),
            other => Err(Error::UnsupportedDType {
                op: "gemm".into(),
                dtype: other_static(other),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_shapes_broadcast_and_name_both_shapes() {
        assert_eq!(
            matmul_shapes(&[2, 3], &[3, 4]).unwrap(),
            (1, 2, 4, 3, vec![2, 4])
        );
        assert_eq!(
            matmul_shapes(&[5, 2, 3], &[3, 4]).unwrap(),
            (5, 2, 4, 3, vec![5, 2, 4])
        );
        assert_eq!(
            matmul_shapes(&[1, 2, 3], &[7, 3, 4]).unwrap(),
            (7, 2, 4, 3, vec![7, 2, 4])
        );
        assert_eq!(matmul_shapes(&[0, 3], &[3, 4]).unwrap().4, vec![0, 4]);
        assert_eq!(matmul_shapes(&[2, 0], &[0, 4]).unwrap().3, 0);
        let e = matmul_shapes(&[2, 3], &[4, 5]).unwrap_err().to_string();
        assert!(e.contains("[2, 3]") && e.contains("[4, 5]"), "{e}");
        let e = matmul_shapes(&[2, 2, 3], &[3, 3, 4])
            .unwrap_err()
            .to_string();
        assert!(e.contains("[2, 2, 3]") && e.contains("[3, 3, 4]"), "{e}");
        let e = matmul_shapes(&[3], &[3, 4]).unwrap_err().to_string();
        assert!(e.contains("2-D or 3-D") && e.contains("[3]"), "{e}");
    }

    #[test]
    fn default_precision_round_trips() {
        assert_eq!(default_precision(), Precision::Fp32);
        set_default_precision(Precision::Tf32);
        assert_eq!(default_precision(), Precision::Tf32);
        set_default_precision(Precision::Tf32x3);
        assert_eq!(default_precision(), Precision::Tf32x3);
        set_default_precision(Precision::Fp32);
        assert_eq!(default_precision(), Precision::Fp32);
    }
}
