//! Joining and splitting: `concatenate`, `stack` (copies into one fresh array) and `split` /
//! `split_at` (views).

use super::ops::same_device;
use super::GpuArray;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape;
use crate::slice::Index;

/// The arrays joined along an existing axis (NumPy's `concatenate`): every other extent must
/// match. Negative `axis` counts from the end.
pub fn concatenate<T: DType>(arrays: &[&GpuArray<T>], axis: isize) -> Result<GpuArray<T>> {
    let first = arrays
        .first()
        .ok_or_else(|| Error::invalid("concatenate", "needs at least one array to join"))?;
    if first.ndim() == 0 {
        return Err(Error::invalid(
            "concatenate",
            "0-dimensional arrays cannot be concatenated (stack them instead)",
        ));
    }
    let ax = shape::normalize_axis("concatenate", axis, first.ndim())?;
    let mut total = 0usize;
    for a in arrays {
        same_device("concatenate", first, a)?;
        let fits = a.ndim() == first.ndim()
            && (0..a.ndim()).all(|i| i == ax || a.shape()[i] == first.shape()[i]);
        if !fits {
            return Err(Error::ShapeMismatch {
                op: format!("concatenate along axis {ax}"),
                lhs: first.shape().to_vec(),
                rhs: a.shape().to_vec(),
            });
        }
        total += a.shape()[ax];
    }
    let mut out_shape = first.shape().to_vec();
    out_shape[ax] = total;
    let dev = first.device().clone();
    let out = GpuArray::<T>::alloc_on(&dev, &out_shape, &dev.stream())?;
    let mut at = 0isize;
    for a in arrays {
        let len = a.shape()[ax] as isize;
        if len > 0 {
            let mut part = out.slice_axis(ax as isize, Index::from(at..at + len))?;
            part.copy_from(a)?;
        }
        at += len;
    }
    Ok(out)
}

/// The arrays, all of one shape, joined along a new axis (NumPy's `stack`).
pub fn stack<T: DType>(arrays: &[&GpuArray<T>], axis: isize) -> Result<GpuArray<T>> {
    let first = arrays
        .first()
        .ok_or_else(|| Error::invalid("stack", "needs at least one array to stack"))?;
    for a in arrays {
        if a.shape() != first.shape() {
            return Err(Error::ShapeMismatch {
                op: "stack (every array must have the same shape)".into(),
                lhs: first.shape().to_vec(),
                rhs: a.shape().to_vec(),
            });
        }
    }
    let ax = shape::normalize_axis("stack", axis, first.ndim() + 1)? as isize;
    let expanded: Vec<GpuArray<T>> = arrays
        .iter()
        .map(|a| a.unsqueeze(ax))
        .collect::<Result<_>>()?;
    let refs: Vec<&GpuArray<T>> = expanded.iter().collect();
    concatenate(&refs, ax)
}

impl<T: DType> GpuArray<T> {
    /// `sections` equal views along `axis` (NumPy's `split` with an integer): the axis length
    /// must divide evenly.
    pub fn split(&self, sections: usize, axis: isize) -> Result<Vec<GpuArray<T>>> {
        let ax = shape::normalize_axis("split", axis, self.ndim())?;
        let len = self.shape()[ax];
        if sections == 0 || !len.is_multiple_of(sections) {
            return Err(Error::invalid(
                "split",
                format!(
                    "axis {ax} of length {len} does not split into {sections} equal sections \
                     (use split_at for uneven parts)"
                ),
            ));
        }
        let step = len / sections;
        let cuts: Vec<usize> = (1..sections).map(|i| i * step).collect();
        self.split_at(&cuts, axis)
    }

    /// Views between the cut positions along `axis` (NumPy's `split` with indices):
    /// `[..c0], [c0..c1], ..., [c_last..]`; positions past the end give empty parts.
    pub fn split_at(&self, cuts: &[usize], axis: isize) -> Result<Vec<GpuArray<T>>> {
        let ax = shape::normalize_axis("split_at", axis, self.ndim())?;
        let len = self.shape()[ax];
        let mut out = Vec::with_capacity(cuts.len() + 1);
        let mut start = 0usize;
        for &c in cuts.iter().chain(std::iter::once(&len)) {
            let s = start.min(len);
            let e = c.clamp(s, len);
            out.push(self.slice_axis(ax as isize, Index::from(s..e))?);
            start = c.max(start);
        }
        Ok(out)
    }
}
