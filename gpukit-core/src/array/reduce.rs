//! Reductions: sum, mean, max, min, argmax, argmin over all elements or along one axis.
//!
//! Order and accuracy: tree order (see `kernels/reduce.cu`); accumulators are f64 for f64,
//! f32 for f32 / f16 / bf16, 64-bit integers for integer sums (wrapping to the element type on
//! output). Integer means divide in 64-bit integers (truncating).

use super::GpuArray;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{self, KernelFile, BLOCK};
use crate::shape;
use gpukit_jit::{KernelArg, LaunchConfig};

/// Reductions (codes shared with `kernels/reduce.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (0 for no elements).
    Sum = 0,
    /// Arithmetic mean.
    Mean = 1,
    /// Maximum (NaN propagates).
    Max = 2,
    /// Minimum (NaN propagates).
    Min = 3,
}

impl ReduceOp {
    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

/// Bytes of one partial of the accumulator (at most 16: an (f64, i64) pair).
const PARTIAL_BYTES: usize = 16;

impl<T: DType> GpuArray<T> {
    fn partial_blocks(&self, n: usize) -> usize {
        let sms = self.dev.multiprocessor_count().max(1) as usize;
        let vec = 16 / std::mem::size_of::<T>();
        n.div_ceil(vec * BLOCK as usize).clamp(1, sms * 8)
    }

    /// Reduces all elements to a 0-dimensional array.
    pub fn reduce(&self, op: ReduceOp) -> Result<GpuArray<T>> {
        let n = self.len();
        if n == 0 && op != ReduceOp::Sum {
            return Err(Error::EmptyReduction {
                op: op.name().into(),
                shape: self.shape.clone(),
            });
        }
        let src = self.contiguous()?;
        let stream = self.dev.stream();
        src.used_on(&stream);
        let out = GpuArray::<T>::alloc_on(&self.dev, &[], &stream)?;
        let code = op as u32;
        let blocks = self.partial_blocks(n);
        let scratch = GpuArray::<u8>::alloc_on(&self.dev, &[blocks * PARTIAL_BYTES], &stream)?;
        let k1 = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_partial<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k1,
            &stream,
            LaunchConfig::new((blocks as u32, 1, 1), (BLOCK, 1, 1)),
            &[
                src.as_kernel_arg(),
                (n as i64).into(),
                scratch.as_kernel_arg(),
            ],
        )?;
        let k2 = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_finish<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k2,
            &stream,
            LaunchConfig::new((1, 1, 1), (BLOCK * 4, 1, 1)),
            &[
                scratch.as_kernel_arg(),
                (blocks as i32).into(),
                out.as_kernel_arg(),
                (n as i64).into(),
            ],
        )?;
        Ok(out)
    }

    /// Reduces along `axis`, which is removed from the shape.
    pub fn reduce_axis(&self, op: ReduceOp, axis: usize) -> Result<GpuArray<T>> {
        let axis = shape::check_axis(op.name(), axis, self.ndim())?;
        let (outer, r, inner) = shape::split_at_axis(&self.shape, axis);
        if r == 0 && op != ReduceOp::Sum {
            return Err(Error::EmptyReduction {
                op: op.name().into(),
                shape: self.shape.clone(),
            });
        }
        let mut out_shape = self.shape.clone();
        out_shape.remove(axis);
        if outer * inner == 0 {
            return GpuArray::alloc_on(&self.dev, &out_shape, &self.dev.stream());
        }
        if r == 0 {
            return GpuArray::zeros(&self.dev, &out_shape);
        }
        if outer * inner == 1 {
            return self.reduce(op)?.reshape(&out_shape);
        }
        let src = self.contiguous()?;
        let stream = self.dev.stream();
        src.used_on(&stream);
        let out = GpuArray::<T>::alloc_on(&self.dev, &out_shape, &stream)?;
        let code = op as u32;
        if inner == 1 {
            let k = self.kernel(
                KernelFile::Reduce,
                &format!("reduce_rows<{}, {code}>", T::NAME),
            )?;
            let blocks = outer.min(65535 * 16) as u32;
            kernels::launch(
                &k,
                &stream,
                LaunchConfig::new((blocks, 1, 1), (BLOCK, 1, 1)),
                &[
                    src.as_kernel_arg(),
                    (outer as i64).into(),
                    (r as i64).into(),
                    out.as_kernel_arg(),
                ],
            )?;
        } else {
            let k = self.kernel(
                KernelFile::Reduce,
                &format!("reduce_cols<{}, {code}>", T::NAME),
            )?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, outer * inner, 32),
                &[
                    src.as_kernel_arg(),
                    (outer as i64).into(),
                    (r as i64).into(),
                    (inner as i64).into(),
                    out.as_kernel_arg(),
                ],
            )?;
        }
        Ok(out)
    }

    fn arg_reduce(&self, code: u32, name: &str, axis: Option<usize>) -> Result<GpuArray<i64>> {
        let stream = self.dev.stream();
        match axis {
            None => {
                let n = self.len();
                if n == 0 {
                    return Err(Error::EmptyReduction {
                        op: name.into(),
                        shape: self.shape.clone(),
                    });
                }
                let src = self.contiguous()?;
                src.used_on(&stream);
                let out = GpuArray::<i64>::alloc_on(&self.dev, &[], &stream)?;
                let blocks = self.partial_blocks(n);
                let scratch =
                    GpuArray::<u8>::alloc_on(&self.dev, &[blocks * PARTIAL_BYTES], &stream)?;
                let k1 = self.kernel(
                    KernelFile::Reduce,
                    &format!("arg_partial<{}, {code}>", T::NAME),
                )?;
                kernels::launch(
                    &k1,
                    &stream,
                    LaunchConfig::new((blocks as u32, 1, 1), (BLOCK, 1, 1)),
                    &[
                        src.as_kernel_arg(),
                        (n as i64).into(),
                        scratch.as_kernel_arg(),
                    ],
                )?;
                let k2 = self.kernel(
                    KernelFile::Reduce,
                    &format!("arg_finish<{}, {code}>", T::NAME),
                )?;
                kernels::launch(
                    &k2,
                    &stream,
                    LaunchConfig::new((1, 1, 1), (BLOCK * 4, 1, 1)),
                    &[
                        scratch.as_kernel_arg(),
                        (blocks as i32).into(),
                        out.as_kernel_arg(),
                    ],
                )?;
                Ok(out)
            }
            Some(axis) => {
                let axis = shape::check_axis(name, axis, self.ndim())?;
                let (outer, r, inner) = shape::split_at_axis(&self.shape, axis);
                if r == 0 {
                    return Err(Error::EmptyReduction {
                        op: name.into(),
                        shape: self.shape.clone(),
                    });
                }
                let mut out_shape = self.shape.clone();
                out_shape.remove(axis);
                let out = GpuArray::<i64>::alloc_on(&self.dev, &out_shape, &stream)?;
                if outer * inner == 0 {
                    return Ok(out);
                }
                let src = self.contiguous()?;
                src.used_on(&stream);
                let (expr, cfg, args): (String, LaunchConfig, Vec<KernelArg>) = if inner == 1 {
                    (
                        format!("arg_rows<{}, {code}>", T::NAME),
                        LaunchConfig::new(((outer.min(65535 * 16)) as u32, 1, 1), (BLOCK, 1, 1)),
                        vec![
                            src.as_kernel_arg(),
                            (outer as i64).into(),
                            (r as i64).into(),
                            out.as_kernel_arg(),
                        ],
                    )
                } else {
                    (
                        format!("arg_cols<{}, {code}>", T::NAME),
                        kernels::grid_for(&self.dev, outer * inner, 32),
                        vec![
                            src.as_kernel_arg(),
                            (outer as i64).into(),
                            (r as i64).into(),
                            (inner as i64).into(),
                            out.as_kernel_arg(),
                        ],
                    )
                };
                let k = self.kernel(KernelFile::Reduce, &expr)?;
                kernels::launch(&k, &stream, cfg, &args)?;
                Ok(out)
            }
        }
    }

    /// Sum of all elements (a 0-d array; `.item()` reads it).
    pub fn sum(&self) -> Result<GpuArray<T>> {
        self.reduce(ReduceOp::Sum)
    }
    /// Mean of all elements.
    pub fn mean(&self) -> Result<GpuArray<T>> {
        self.reduce(ReduceOp::Mean)
    }
    /// Maximum of all elements.
    pub fn max(&self) -> Result<GpuArray<T>> {
        self.reduce(ReduceOp::Max)
    }
    /// Minimum of all elements.
    pub fn min(&self) -> Result<GpuArray<T>> {
        self.reduce(ReduceOp::Min)
    }
    /// Sum along `axis`.
    pub fn sum_axis(&self, axis: usize) -> Result<GpuArray<T>> {
        self.reduce_axis(ReduceOp::Sum, axis)
    }
    /// Mean along `axis`.
    pub fn mean_axis(&self, axis: usize) -> Result<GpuArray<T>> {
        self.reduce_axis(ReduceOp::Mean, axis)
    }
    /// Maximum along `axis`.
    pub fn max_axis(&self, axis: usize) -> Result<GpuArray<T>> {
        self.reduce_axis(ReduceOp::Max, axis)
    }
    /// Minimum along `axis`.
    pub fn min_axis(&self, axis: usize) -> Result<GpuArray<T>> {
        self.reduce_axis(ReduceOp::Min, axis)
    }
    /// Flat index of the (first) maximum (NaN counts as the maximum, as in NumPy).
    pub fn argmax(&self) -> Result<GpuArray<i64>> {
        self.arg_reduce(0, "argmax", None)
    }
    /// Flat index of the (first) minimum.
    pub fn argmin(&self) -> Result<GpuArray<i64>> {
        self.arg_reduce(1, "argmin", None)
    }
    /// Index of the maximum along `axis`.
    pub fn argmax_axis(&self, axis: usize) -> Result<GpuArray<i64>> {
        self.arg_reduce(0, "argmax", Some(axis))
    }
    /// Index of the minimum along `axis`.
    pub fn argmin_axis(&self, axis: usize) -> Result<GpuArray<i64>> {
        self.arg_reduce(1, "argmin", Some(axis))
    }
}
