//! Views: arrays that share another array's memory with a different shape, strides or offset
//! (no copy, no kernel). `reshape` copies only when the layout cannot be viewed.

use super::GpuArray;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape;
use crate::slice::{self, Index};

impl<T: DType> GpuArray<T> {
    /// The same elements with another shape (a view when contiguous, else a copy). One extent
    /// may be given as `usize::MAX` to be inferred, like NumPy's `-1`.
    pub fn reshape(&self, new_shape: &[usize]) -> Result<Self> {
        let new_shape = infer_shape("reshape", self.len(), new_shape, &self.shape)?;
        let base = self.contiguous()?;
        Ok(base.view(
            new_shape.clone(),
            shape::contiguous_strides(&new_shape),
            base.offset,
        ))
    }

    /// A one-dimensional array of the elements (a view when contiguous).
    pub fn ravel(&self) -> Result<Self> {
        self.reshape(&[self.len()])
    }

    /// The axes reversed (a view); for 2-D arrays the matrix transpose.
    pub fn transpose(&self) -> Self {
        let perm: Vec<usize> = (0..self.ndim()).rev().collect();
        self.permute_unchecked(&perm)
    }

    /// The axes reordered: axis `i` of the result is axis `perm[i]` of this array (a view).
    pub fn permute(&self, perm: &[usize]) -> Result<Self> {
        shape::check_permutation("permute", perm, self.ndim())?;
        Ok(self.permute_unchecked(perm))
    }

    /// Axes `a` and `b` exchanged (negative counts from the end; a view).
    pub fn swapaxes(&self, a: isize, b: isize) -> Result<Self> {
        let a = shape::normalize_axis("swapaxes", a, self.ndim())?;
        let b = shape::normalize_axis("swapaxes", b, self.ndim())?;
        let mut perm: Vec<usize> = (0..self.ndim()).collect();
        perm.swap(a, b);
        Ok(self.permute_unchecked(&perm))
    }

    pub(crate) fn permute_unchecked(&self, perm: &[usize]) -> Self {
        let shape = perm.iter().map(|&p| self.shape[p]).collect();
        let strides = perm.iter().map(|&p| self.strides[p]).collect();
        self.view(shape, strides, self.offset)
    }

    /// NumPy's basic indexing (a view): positions, ranges with steps (negative steps walk
    /// backwards), new axes and `...`, built with [`s!`](crate::s!):
    ///
    /// ```no_run
    /// # use gpukit_core::{s, Device, GpuArray};
    /// # let dev = Device::open(0)?;
    /// let a = GpuArray::<f32>::arange(&dev, 0.0, 24.0, 1.0)?.reshape(&[4, 6])?;
    /// let b = a.slice(&s![1..;2, ..;-1])?; // rows 1 and 3, columns reversed
    /// assert_eq!(b.shape(), &[2, 6]);
    /// assert_eq!(b.to_vec()?[..3], [11.0, 10.0, 9.0]);
    /// # Ok::<(), gpukit_core::Error>(())
    /// ```
    pub fn slice(&self, index: &[Index]) -> Result<Self> {
        let v = slice::resolve("slice", &self.shape, &self.strides, self.offset, index)?;
        Ok(self.view(v.shape, v.strides, v.offset))
    }

    /// Positions `range` along axis `axis` (a view): `a.slice_axis(0, 2..5)`.
    pub fn slice_axis(&self, axis: isize, range: impl Into<Index>) -> Result<Self> {
        let axis = shape::normalize_axis("slice_axis", axis, self.ndim())?;
        let mut idx = vec![Index::ALL; self.ndim()];
        idx[axis] = range.into();
        if matches!(idx[axis], Index::At(_)) {
            // Keep the axis: a position p becomes p..p+1.
            if let Index::At(p) = idx[axis] {
                let stop = if p == -1 {
                    None
                } else {
                    Some(p.saturating_add(1))
                };
                idx[axis] = Index::Range {
                    start: Some(p),
                    stop,
                    step: 1,
                };
            }
        }
        self.slice(&idx)
    }

    /// Axes of length 1 removed: all of them (`None`), or the ones named (an error names a
    /// named axis that is not of length 1). A view.
    pub fn squeeze(&self, axes: Option<&[isize]>) -> Result<Self> {
        let drop: Vec<usize> = match axes {
            None => (0..self.ndim()).filter(|&i| self.shape[i] == 1).collect(),
            Some(a) => {
                let a = shape::normalize_axes("squeeze", Some(a), self.ndim())?;
                if let Some(&bad) = a.iter().find(|&&i| self.shape[i] != 1) {
                    return Err(Error::invalid(
                        "squeeze",
                        format!(
                            "axis {bad} has length {}, only axes of length 1 can be removed \
                             (shape {:?})",
                            self.shape[bad], self.shape
                        ),
                    ));
                }
                a
            }
        };
        let (mut sh, mut st) = (Vec::new(), Vec::new());
        for i in 0..self.ndim() {
            if !drop.contains(&i) {
                sh.push(self.shape[i]);
                st.push(self.strides[i]);
            }
        }
        Ok(self.view(sh, st, self.offset))
    }

    /// A new axis of length 1 at position `axis` of the result (NumPy's `expand_dims`; `-1`
    /// appends). A view.
    pub fn unsqueeze(&self, axis: isize) -> Result<Self> {
        let axis = shape::normalize_axis("unsqueeze", axis, self.ndim() + 1)?;
        let mut sh = self.shape.clone();
        let mut st = self.strides.clone();
        sh.insert(axis, 1);
        st.insert(axis, 0);
        Ok(self.view(sh, st, self.offset))
    }

    /// This array read as an array of `shape` under NumPy broadcasting (a view with zero
    /// strides along broadcast axes; its elements repeat, so it cannot be written into).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Self> {
        let st = shape::broadcast_strides("broadcast_to", &self.shape, &self.strides, shape)?;
        // Broadcasting multiplies the element count: it must still fit (len() is a product).
        shape::numel("broadcast_to", shape)?;
        Ok(self.view(shape.to_vec(), st, self.offset))
    }
}

/// `new_shape` with one `usize::MAX` extent inferred so that it holds `n` elements.
pub(crate) fn infer_shape(
    op: &str,
    n: usize,
    new_shape: &[usize],
    old: &[usize],
) -> Result<Vec<usize>> {
    let unknown: Vec<usize> = (0..new_shape.len())
        .filter(|&i| new_shape[i] == usize::MAX)
        .collect();
    let mut out = new_shape.to_vec();
    match unknown.len() {
        0 => {}
        1 => {
            let known: usize = new_shape
                .iter()
                .filter(|&&d| d != usize::MAX)
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .ok_or_else(|| Error::shape(op, old, new_shape))?;
            if known == 0 || !n.is_multiple_of(known) {
                return Err(Error::shape(op, old, new_shape));
            }
            out[unknown[0]] = n / known;
        }
        _ => {
            return Err(Error::invalid(
                op,
                format!("only one extent can be inferred (usize::MAX), got {new_shape:?}"),
            ))
        }
    }
    if shape::numel(op, &out)? != n {
        return Err(Error::shape(op, old, &out));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::infer_shape;

    #[test]
    fn inferred_extents() {
        assert_eq!(
            infer_shape("r", 24, &[usize::MAX, 6], &[24]).unwrap(),
            vec![4, 6]
        );
        assert_eq!(
            infer_shape("r", 24, &[2, 3, 4], &[24]).unwrap(),
            vec![2, 3, 4]
        );
        assert!(infer_shape("r", 24, &[usize::MAX, 5], &[24]).is_err());
        assert!(infer_shape("r", 24, &[usize::MAX, usize::MAX], &[24]).is_err());
        assert!(infer_shape("r", 0, &[usize::MAX, 0], &[0]).is_err());
        assert!(infer_shape("r", 24, &[5, 5], &[24]).is_err());
    }
}
