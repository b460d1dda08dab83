//! Softmax, log-softmax and layer normalisation over an axis (floating-point types).
//!
//! Rows of up to 16384 f32 (8192 f64, 16384 f16 / bf16) elements are held in registers by one
//! block per row; rows of up to 128 KiB (32768 f32, 16384 f64, 65536 f16 / bf16) are staged in
//! shared memory by one block per row: either way the input is read once and the output written
//! once. Longer rows read the input twice. An axis other than the last is moved last (one copy
//! each way).

use super::GpuArray;
use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use crate::kernels::{self, KernelFile};
use crate::shape;
use gpukit_jit::{KernelArg, LaunchConfig};

/// `(vectors per thread, threads)` of the register row kernels for rows of `r` elements of
/// `elem_size` bytes, or `None` when the row needs the two-pass kernel.
pub fn row_config(r: usize, elem_size: usize) -> Option<(u32, u32)> {
    let v = 16 / elem_size;
    for vpt in kernels::NN_VPT {
        let threads = r.div_ceil(vpt as usize * v).next_power_of_two().max(32);
        if threads <= 256 {
            return Some((vpt, threads as u32));
        }
    }
    let threads = r.div_ceil(8 * v).next_power_of_two().max(32);
    // NnMaxThreads in kernels/nn.cu: the register-row kernels' launch bound
    let max = if elem_size == 2 { 256 } else { 512 };
    (threads <= max).then_some((8, threads as u32))
}

/// Rows of at most this many bytes that do not fit the register rows are staged in shared
/// memory (`*_rows_smem` in kernels/nn.cu; the H200 allows 227 KiB per block).
pub const NN_SMEM_MAX_BYTES: usize = 128 << 10;

/// Which row kernel a softmax / layer norm over rows of `r` elements of `elem_size` bytes takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKernel {
    /// `*_rows<T, vpt>` with `threads` threads: the row in registers.
    Registers {
        /// Vectors per thread.
        vpt: u32,
        /// Threads per block.
        threads: u32,
    },
    /// `*_rows_smem<T>` with 1024 threads: the row staged in shared memory.
    Shared,
    /// `*_rows_large<T>` with 1024 threads: the input read twice.
    Large,
}

/// The row kernel for rows of `r` elements of `elem_size` bytes on a device that lets a block
/// have `smem_optin` bytes of shared memory (1 KiB is left for the kernels' static shared
/// memory).
pub fn row_kernel(r: usize, elem_size: usize, smem_optin: usize) -> RowKernel {
    let smem_max = NN_SMEM_MAX_BYTES.min(smem_optin.saturating_sub(1024));
    match row_config(r, elem_size) {
        Some((vpt, threads)) => RowKernel::Registers { vpt, threads },
        None if r * elem_size <= smem_max => RowKernel::Shared,
        None => RowKernel::Large,
    }
}

/// `(kernel name expression, threads, dynamic shared memory bytes)` of `op` ("softmax" or
/// "layernorm") for element type `name`.
fn row_launch(
    op: &str,
    name: &str,
    r: usize,
    elem_size: usize,
    smem_optin: usize,
) -> (String, u32, u32) {
    match row_kernel(r, elem_size, smem_optin) {
        RowKernel::Registers { vpt, threads } => (format!("{op}_rows<{name}, {vpt}>"), threads, 0),
        RowKernel::Shared => (
            format!("{op}_rows_smem<{name}>"),
            1024,
            (r * elem_size).next_multiple_of(16) as u32,
        ),
        RowKernel::Large => (format!("{op}_rows_large<{name}>"), 1024, 0),
    }
}

impl<T: DType> GpuArray<T> {
    fn float_only(&self, op: &str) -> Result<()> {
        if T::KIND == DTypeKind::Float {
            Ok(())
        } else {
            Err(Error::UnsupportedDType {
                op: op.to_string(),
                dtype: T::RUST_NAME,
            })
        }
    }

    /// `exp(x - max) / sum(exp(x - max))` along `axis` (negative counts from the end).
    pub fn softmax(&self, axis: isize) -> Result<GpuArray<T>> {
        self.softmax_impl(axis, false)
    }

    /// `x - max - log(sum(exp(x - max)))` along `axis`.
    pub fn log_softmax(&self, axis: isize) -> Result<GpuArray<T>> {
        self.softmax_impl(axis, true)
    }

    fn softmax_impl(&self, axis: isize, log: bool) -> Result<GpuArray<T>> {
        let op = if log { "log_softmax" } else { "softmax" };
        self.float_only(op)?;
        let ax = shape::normalize_axis(op, axis, self.ndim())?;
        let last = self.ndim() - 1;
        if ax != last {
            let moved = self.swapaxes(ax as isize, last as isize)?;
            let y = moved.softmax_impl(-1, log)?;
            return y.swapaxes(ax as isize, last as isize)?.contiguous();
        }
        let src = self.contiguous()?;
        let r = self.shape[last];
        let rows = self.len().checked_div(r).unwrap_or(0);
        let stream = self.dev.stream();
        let out = GpuArray::<T>::alloc_on(&self.dev, &self.shape, &stream)?;
        if out.is_empty() {
            return Ok(out);
        }
        src.used_on(&stream);
        out.used_on(&stream);
        let (expr, threads, smem) = row_launch(
            "softmax",
            T::NAME,
            r,
            std::mem::size_of::<T>(),
            self.dev.attributes().shared_memory_per_block_optin,
        );
        let k = self.kernel(KernelFile::Nn, &expr)?;
        let blocks = rows.min(self.dev.multiprocessor_count().max(1) as usize * 32) as u32;
        kernels::launch(
            &k,
            &stream,
            LaunchConfig::new((blocks.max(1), 1, 1), (threads, 1, 1)).with_shared_mem(smem),
            &[
                out.arg(),
                src.arg(),
                (rows as i64).into(),
                (r as i64).into(),
                (log as i32).into(),
            ],
        )?;
        Ok(out)
    }

    /// Layer normalisation over the last axis, as `torch.nn.functional.layer_norm(x, (R,),
    /// gamma, beta, eps)`: `(x - mean) / sqrt(var + eps) * gamma + beta` with the population
    /// variance; `gamma` and `beta` (optional) have shape `[R]`.
    pub fn layer_norm(
        &self,
        gamma: Option<&GpuArray<T>>,
        beta: Option<&GpuArray<T>>,
        eps: f64,
    ) -> Result<GpuArray<T>> {
        self.float_only("layer_norm")?;
        if self.ndim() == 0 {
            return Err(Error::invalid(
                "layer_norm",
                "a 0-dimensional array has no axis to normalise",
            ));
        }
        let r = self.shape[self.ndim() - 1];
        let params: Vec<GpuArray<T>> = [gamma, beta]
            .into_iter()
            .flatten()
            .map(|p| -> Result<GpuArray<T>> {
                super::ops::same_device("layer_norm", self, p)?;
                if p.shape != [r] {
                    return Err(Error::ShapeMismatch {
                        op: "layer_norm (gamma / beta must have the last axis' length)".into(),
                        lhs: vec![r],
                        rhs: p.shape.clone(),
                    });
                }
                p.contiguous()
            })
            .collect::<Result<_>>()?;
        let mut it = params.into_iter();
        let g = gamma.and_then(|_| it.next());
        let b = beta.and_then(|_| it.next());
        let src = self.contiguous()?;
        let rows = self.len().checked_div(r).unwrap_or(0);
        let stream = self.dev.stream();
        let out = GpuArray::<T>::alloc_on(&self.dev, &self.shape, &stream)?;
        if out.is_empty() {
            return Ok(out);
        }
        src.used_on(&stream);
        out.used_on(&stream);
        for p in g.iter().chain(b.iter()) {
            p.used_on(&stream);
        }
        let (expr, threads, smem) = row_launch(
            "layernorm",
            T::NAME,
            r,
            std::mem::size_of::<T>(),
            self.dev.attributes().shared_memory_per_block_optin,
        );
        let k = self.kernel(KernelFile::Nn, &expr)?;
        let blocks = rows.min(self.dev.multiprocessor_count().max(1) as usize * 32) as u32;
        kernels::launch(
            &k,
            &stream,
            LaunchConfig::new((blocks.max(1), 1, 1), (threads, 1, 1)).with_shared_mem(smem),
            &[
                out.arg(),
                src.arg(),
                g.as_ref().map_or(KernelArg::Ptr(0), |a| a.arg()),
                b.as_ref().map_or(KernelArg::Ptr(0), |a| a.arg()),
                (rows as i64).into(),
                (r as i64).into(),
                eps.into(),
            ],
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{row_config, row_kernel, RowKernel};

    #[test]
    fn rows_fit_in_registers_up_to_32k_f32() {
        assert_eq!(row_config(4096, 4), Some((4, 256)));
        assert_eq!(row_config(16384, 4), Some((8, 512)));
        assert_eq!(row_config(32768, 4), None);
        assert_eq!(row_config(100, 4), Some((1, 32)));
        assert_eq!(row_config(16384, 2), Some((8, 256)));
        assert_eq!(row_config(32768, 2), None);
        assert_eq!(row_config(8192, 8), Some((8, 512)));
        assert_eq!(row_config(32768, 8), None);
        assert_eq!(row_config(32769, 4), None);
        let h200 = 227 << 10;
        assert_eq!(row_kernel(32768, 4, h200), RowKernel::Shared);
        // A device with 64 KiB per block (sm_75) takes the two-pass kernel.
        assert_eq!(row_kernel(32768, 4, 64 << 10), RowKernel::Large);
        assert_eq!(row_kernel(16384, 8, h200), RowKernel::Shared);
        assert_eq!(row_kernel(65536, 2, h200), RowKernel::Shared);
        assert_eq!(row_kernel(32769, 4, h200), RowKernel::Large);
        assert_eq!(
            row_kernel(4096, 4, h200),
            RowKernel::Registers {
                vpt: 4,
                threads: 256
            }
        );
        for r in [1usize, 7, 1000, 4095, 4097, 20000, 32768] {
            if let Some((vpt, threads)) = row_config(r, 4) {
                assert!(vpt as usize * 4 * threads as usize >= r, "{r}");
            }
        }
    }
}
