//! Softmax, log-softmax and layer normalisation over an axis (floating-point types).
//!
//! Rows of up to 32768 f32 (16384 f64, 16384 f16 / bf16) elements are held in registers by one
//! block per row: the input is read once and the output written once. Longer rows read the
//! input twice. An axis other than the last is moved last (one copy each way).

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
    let threads_for = |vpt: u32| r.div_ceil(vpt as usize * v).next_power_of_two().max(32);
    for &vpt in kernels::nn_vpt(elem_size).iter().filter(|&&p| p <= 8) {
        if threads_for(vpt) <= 256 {
            return Some((vpt, threads_for(vpt) as u32));
        }
    }
    // NnMaxThreads in kernels/nn.cu: the register-row kernels' launch bound. 8 vectors up to
    // it, then 16 (32- and 64-bit types: rows of 32768 f32 / 16384 f64 in 512 threads).
    let max = if elem_size == 2 { 256 } else { 512 };
    kernels::nn_vpt(elem_size)
        .iter()
        .filter(|&&p| p >= 8)
        .map(|&p| (p, threads_for(p)))
        .find(|&(_, t)| t <= max)
        .map(|(p, t)| (p, t as u32))
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
        let (expr, threads) = match row_config(r, std::mem::size_of::<T>()) {
            Some((vpt, threads)) => (format!("softmax_rows<{}, {vpt}>", T::NAME), threads),
            None => (format!("softmax_rows_large<{}>", T::NAME), 1024),
        };
        let k = self.kernel(KernelFile::Nn, &expr)?;
        let blocks = rows.min(self.dev.multiprocessor_count().max(1) as usize * 32) as u32;
        kernels::launch(
            &k,
            &stream,
            LaunchConfig::new((blocks.max(1), 1, 1), (threads, 1, 1)),
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
        let (expr, threads) = match row_config(r, std::mem::size_of::<T>()) {
            Some((vpt, threads)) => (format!("layernorm_rows<{}, {vpt}>", T::NAME), threads),
            None => (format!("layernorm_rows_large<{}>", T::NAME), 1024),
        };
        let k = self.kernel(KernelFile::Nn, &expr)?;
        let blocks = rows.min(self.dev.multiprocessor_count().max(1) as usize * 32) as u32;
        kernels::launch(
            &k,
            &stream,
            LaunchConfig::new((blocks.max(1), 1, 1), (threads, 1, 1)),
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
    use super::row_config;

    #[test]
    fn rows_fit_in_registers_up_to_32k_f32() {
        assert_eq!(row_config(4096, 4), Some((4, 256)));
        assert_eq!(row_config(16384, 4), Some((8, 512)));
        assert_eq!(row_config(32768, 4), Some((16, 512)));
        assert_eq!(row_config(16384, 8), Some((16, 512)));
        assert_eq!(row_config(100, 4), Some((1, 32)));
        assert_eq!(row_config(16384, 2), Some((8, 256)));
        assert_eq!(row_config(32768, 2), None);
        assert_eq!(row_config(8192, 8), Some((8, 512)));
        assert_eq!(row_config(32768, 8), None);
        assert_eq!(row_config(32769, 4), None);
        assert_eq!(row_config(65536, 4), None);
        for r in [1usize, 7, 1000, 4095, 4097, 20000, 32768] {
            if let Some((vpt, threads)) = row_config(r, 4) {
                assert!(vpt as usize * 4 * threads as usize >= r, "{r}");
            }
        }
    }
}
