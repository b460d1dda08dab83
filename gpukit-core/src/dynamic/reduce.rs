//! Reductions, scans and `matmul` of [`DynArray`], with NumPy's result types: `sum` / `prod`
//! of integers and `bool` in 64 bits (`uint64` for unsigned), `mean` / `var` / `std` of
//! integers in `float64`, `max` / `min` in the input's type, `any` / `all` as `bool`,
//! `argmax` / `argmin` as `int64`.

use super::{same, with, DynArray, ElementType};
use crate::array::reduce::ReduceOp;
use crate::error::{Error, Result};

impl DynArray {
    /// Reduces over `axes` (`None`: every axis; negative counts from the end), keeping them as
    /// length 1 with `keepdims`; `ddof` applies to `var` and `std`. `argmax` / `argmin` take at
    /// most one axis (none: the flat index), as NumPy's.
    pub fn reduce(
        &self,
        op: ReduceOp,
        axes: Option<&[isize]>,
        keepdims: bool,
        ddof: usize,
    ) -> Result<DynArray> {
        let t = self.dtype();
        match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => return self.arg_reduce(op, axes, keepdims),
            ReduceOp::Any | ReduceOp::All => {
                return with!(self, a => a.reduce::<u8>(op, axes, keepdims, 0)).map(DynArray::Bool)
            }
            ReduceOp::Max | ReduceOp::Min => {
                return same!(self, a => a.reduce(op, axes, keepdims, 0));
            }
            _ => {}
        }
        if t == ElementType::Bool {
            // 0 / 1 as int64: sums and products of bool are int64, means float64
            return self
                .astype(ElementType::I64)?
                .reduce(op, axes, keepdims, ddof);
        }
        match self {
            DynArray::Bool(_) => Err(Error::invalid(op.name(), "bool")),
            DynArray::U8(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::I32(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::U32(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::I64(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::U64(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::F16(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::BF16(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::F32(a) => reduce_numeric(a, op, axes, keepdims, ddof),
            DynArray::F64(a) => reduce_numeric(a, op, axes, keepdims, ddof),
        }
    }

    fn arg_reduce(&self, op: ReduceOp, axes: Option<&[isize]>, keepdims: bool) -> Result<DynArray> {
        let r = match axes {
            None => {
                let flat = with!(self, a => a.reduce::<i64>(op, None, false, 0))?;
                if keepdims {
                    flat.reshape(&vec![1; self.ndim()])?
                } else {
                    flat
                }
            }
            Some([axis]) => {
                let r = with!(self, a => a.reduce::<i64>(op, Some(&[*axis]), false, 0))?;
                if keepdims {
                    r.unsqueeze(*axis)?
                } else {
                    r
                }
            }
            Some(more) => {
                return Err(Error::invalid(
                    op.name(),
                    format!("takes one axis or none, {} given", more.len()),
                ))
            }
        };
        Ok(DynArray::I64(r))
    }

    /// `cumsum` / `cumprod` along `axis` (`None`: of the flattened array), in the type of
    /// `sum` (integers and `bool` widen to 64 bits).
    pub fn scan(&self, op: crate::ScanOp, axis: Option<isize>) -> Result<DynArray> {
        if self.dtype() == ElementType::Bool {
            return self.astype(ElementType::I64)?.scan(op, axis);
        }
        with!(self, a => a.scan(op, axis).map(DynArray::from_typed))
    }

    /// `self @ other` (NumPy's `matmul`: 1-D operands, batches with broadcasting), in the
    /// promoted type. Only float types have kernels: integer products are an
    /// [`Error::UnsupportedDType`].
    pub fn matmul(&self, other: &DynArray) -> Result<DynArray> {
        let t = ElementType::promote(self.dtype(), other.dtype());
        if !t.is_float() {
            return Err(Error::UnsupportedDType {
                op: "matmul".into(),
                dtype: t.name(),
            });
        }
        let (a, b) = (self.to_type(t)?, other.to_type(t)?);
        match (&a, &b) {
            (DynArray::F16(x), DynArray::F16(y)) => x.matmul(y).map(DynArray::F16),
            (DynArray::BF16(x), DynArray::BF16(y)) => x.matmul(y).map(DynArray::BF16),
            (DynArray::F32(x), DynArray::F32(y)) => x.matmul(y).map(DynArray::F32),
            (DynArray::F64(x), DynArray::F64(y)) => x.matmul(y).map(DynArray::F64),
            _ => Err(super::mismatch("matmul", &a, &b)),
        }
    }
}

/// `sum`, `prod`, `mean`, `var`, `std` of a numeric (not `bool`) array.
fn reduce_numeric<T: crate::DType>(
    a: &crate::GpuArray<T>,
    op: ReduceOp,
    axes: Option<&[isize]>,
    keepdims: bool,
    ddof: usize,
) -> Result<DynArray> {
    match op {
        ReduceOp::Sum => a.sum_axes(axes, keepdims).map(DynArray::from_typed),
        ReduceOp::Prod => a.prod_axes(axes, keepdims).map(DynArray::from_typed),
        ReduceOp::Mean => a.mean_axes(axes, keepdims).map(DynArray::from_typed),
        ReduceOp::Var => a.var(axes, keepdims, ddof).map(DynArray::from_typed),
        ReduceOp::Std => a.std(axes, keepdims, ddof).map(DynArray::from_typed),
        other => Err(Error::invalid(other.name(), "not a numeric reduction")),
    }
}
