//! Integer and boolean indexing and assignment (NumPy's advanced indexing and `__setitem__`):
//!
//! - `a.take(&idx, axis)` / `a.take_indices(axis, &[..])`: gather along an axis by i64 indices
//!   (negative from the end); `a.masked_select(&mask)`: `a[mask]`, the elements where the mask
//!   is nonzero, in order; `a.flatnonzero()`;
//! - `a.set(&s![..], &v)` / `a.fill_slice(&s![..], x)` / `a.fill(x)`: `a[...] = v` through a
//!   view (`v` broadcast; an overlapping `v` is read before anything is written);
//!   `a.put(axis, &idx, &v)`: `a[idx] = v` along an axis; `a.masked_fill(&mask, x)`:
//!   `a[mask] = x`; `a.masked_assign(&mask, &v)`: `a[mask] = v`.
//!
//! Indices live on the device, so checking them (an out-of-range index is an error, as in
//! NumPy, and is never dereferenced) waits for the kernel: `take`, `put` and the mask
//! operations that need a count synchronise the stream once. `take_indices` checks its host indices
//! before anything is queued.

use super::ops::{check_out, same_device, unalias};
use super::GpuArray;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{self, KernelFile};
use crate::shape;
use crate::slice::Index;
use gpukit_jit::KernelArg;

impl<T: DType> GpuArray<T> {
    /// Elements at `indices` along `axis` (NumPy's `take`): the result's shape is this
    /// shape with axis `axis` replaced by `indices`' shape. Waits for the gather to check the
    /// indices (an index outside `[-len, len)` is an error).
    pub fn take(&self, indices: &GpuArray<i64>, axis: isize) -> Result<GpuArray<T>> {
        let (out, bad) = self.gather(indices, axis)?;
        if bad.item()? != 0 {
            let ax = shape::normalize_axis("take", axis, self.ndim())?;
            return Err(Error::invalid(
                "take",
                format!(
                    "an index is out of bounds for axis {ax} with size {} (indices must lie in \
                     [-{0}, {0}))",
                    self.shape[ax]
                ),
            ));
        }
        Ok(out)
    }

    /// Elements at host `indices` along `axis`, checked before anything is queued (no wait).
    pub fn take_indices(&self, axis: isize, indices: &[i64]) -> Result<GpuArray<T>> {
        let ax = shape::normalize_axis("take_indices", axis, self.ndim())?;
        let len = self.shape[ax] as i64;
        if let Some(&bad) = indices.iter().find(|&&i| i < -len || i >= len) {
            return Err(Error::invalid(
                "take_indices",
                format!("index {bad} is out of bounds for axis {ax} with size {len}"),
            ));
        }
        let idx = GpuArray::<i64>::from_slice(&self.dev, indices, &[indices.len()])?;
        Ok(self.gather(&idx, axis)?.0)
    }

    /// The gather and its out-of-range flag (not yet read).
    fn gather(&self, indices: &GpuArray<i64>, axis: isize) -> Result<(GpuArray<T>, GpuArray<i32>)> {
        same_device("take", self, indices)?;
        let ax = shape::normalize_axis("take", axis, self.ndim())?;
        let src = self.contiguous()?;
        let idx = indices.contiguous()?;
        let (outer, a_len, inner) = shape::split_at_axis(&src.shape, ax);
        let mut out_shape = self.shape[..ax].to_vec();
        out_shape.extend_from_slice(&indices.shape);
        out_shape.extend_from_slice(&self.shape[ax + 1..]);
        let stream = self.dev.stream();
        let out = GpuArray::<T>::alloc_on(&self.dev, &out_shape, &stream)?;
        let bad = GpuArray::<i32>::zeros(&self.dev, &[1])?;
        let n = out.len();
        if n > 0 {
            src.used_on(&stream);
            idx.used_on(&stream);
            let k = self.kernel(KernelFile::Index, &format!("take_axis<{}>", T::NAME))?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n, 32),
                &[
                    out.arg(),
                    src.arg(),
                    idx.arg(),
                    (outer as i64).into(),
                    (a_len as i64).into(),
                    (inner as i64).into(),
                    (idx.len() as i64).into(),
                    bad.arg(),
                ],
            )?;
        }
        Ok((out, bad))
    }

    /// `a[idx] = values` along `axis` (`idx` one-dimensional; `values` broadcast to this shape
    /// with axis `axis` of length `idx.len()`). With repeated indices one of the values wins
    /// (which one is unspecified). Waits to check the indices; nothing is written where an
    /// index is out of range, and the call returns an error.
    pub fn put(
        &mut self,
        axis: isize,
        indices: &GpuArray<i64>,
        values: &GpuArray<T>,
    ) -> Result<()> {
        same_device("put", self, indices)?;
        same_device("put", self, values)?;
        let ax = shape::normalize_axis("put", axis, self.ndim())?;
        if indices.ndim() != 1 {
            return Err(Error::invalid(
                "put",
                format!(
                    "indices must be one-dimensional, got shape {:?}",
                    indices.shape
                ),
            ));
        }
        if !self.is_contiguous() {
            // Scatter into a contiguous copy, then write it back through the view.
            let mut tmp = self.astype::<T>()?;
            tmp.put(axis, indices, values)?;
            return self.copy_from(&tmp);
        }
        let mut vshape = self.shape.clone();
        vshape[ax] = indices.len();
        let vals = values
            .broadcast_to(&vshape)
            .map_err(|_| Error::shape("put (values)", &values.shape, &vshape))?;
        let vals = unalias(&vals, self)?.contiguous()?;
        // Indices that share memory with the output would be overwritten while other threads
        // of the scatter still read them: read them from a copy made first.
        let idx = if indices.overlaps(self) {
            indices.astype::<i64>()?
        } else {
            indices.contiguous()?
        };
        let (outer, a_len, inner) = shape::split_at_axis(&self.shape, ax);
        let n = vals.len();
        if n == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        let bad = GpuArray::<i32>::zeros(&self.dev, &[1])?;
        self.used_on(&stream);
        vals.used_on(&stream);
        idx.used_on(&stream);
        let k = self.kernel(KernelFile::Index, &format!("put_axis<{}>", T::NAME))?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                self.arg(),
                vals.arg(),
                idx.arg(),
                (outer as i64).into(),
                (a_len as i64).into(),
                (inner as i64).into(),
                (idx.len() as i64).into(),
                bad.arg(),
            ],
        )?;
        if bad.item()? != 0 {
            return Err(Error::invalid(
                "put",
                format!(
                    "an index is out of bounds for axis {ax} with size {a_len}; the elements \
                     with valid indices were written"
                ),
            ));
        }
        Ok(())
    }

    /// Flat (row-major) indices of the nonzero elements, in order (NumPy's `flatnonzero`;
    /// NaN counts as nonzero). Waits once for the count.
    pub fn flatnonzero(&self) -> Result<GpuArray<i64>> {
        let mask = self.ne_scalar(T::zero())?;
        let n = mask.len();
        if n == 0 {
            return GpuArray::<i64>::alloc_on(&self.dev, &[0], &self.dev.stream());
        }
        let incl = mask.cumsum(None)?;
        let count = incl.slice(&[Index::At(-1)])?.item()? as usize;
        let stream = self.dev.stream();
        let out = GpuArray::<i64>::alloc_on(&self.dev, &[count], &stream)?;
        if count > 0 {
            mask.used_on(&stream);
            incl.used_on(&stream);
            let k = mask.kernel(KernelFile::Index, "nonzero_flat<unsigned char>")?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n, 32),
                &[out.arg(), mask.arg(), incl.arg(), (n as i64).into()],
            )?;
        }
        Ok(out)
    }

    fn check_mask(&self, op: &str, mask: &GpuArray<u8>) -> Result<()> {
        same_device(op, self, mask)?;
        if mask.shape != self.shape {
            return Err(Error::ShapeMismatch {
                op: format!("{op} (the mask must have the array's shape)"),
                lhs: self.shape.clone(),
                rhs: mask.shape.clone(),
            });
        }
        Ok(())
    }

    /// `a[mask]`: the elements where `mask` (of this shape) is nonzero, in row-major order, as a
    /// one-dimensional array. Waits once for the count.
    pub fn masked_select(&self, mask: &GpuArray<u8>) -> Result<GpuArray<T>> {
        self.check_mask("masked_select", mask)?;
        let idx = mask.flatnonzero()?;
        let flat = self.contiguous()?.ravel()?;
        Ok(flat.gather(&idx, 0)?.0)
    }

    /// `a[...] = value` for the view `index` selects (`value` broadcast to it; an overlapping
    /// `value` is read completely before anything is written).
    pub fn set(&mut self, index: &[Index], value: &GpuArray<T>) -> Result<()> {
        let mut view = self.slice(index)?;
        view.copy_from(value)
    }

    /// `a[...] = x` for the view `index` selects.
    pub fn fill_slice(&mut self, index: &[Index], x: T) -> Result<()> {
        let mut view = self.slice(index)?;
        view.fill(x)
    }

    /// Every element set to `x` (through this view's strides).
    pub fn fill(&mut self, x: T) -> Result<()> {
        if shape::has_repeated_elements(&self.shape, &self.strides) {
            return Err(Error::invalid(
                "fill",
                "a broadcast view has repeated elements; fill the array it views instead",
            ));
        }
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        let (sf, si) = x.scalar_args();
        if self.is_contiguous() {
            let k = self.kernel(KernelFile::Copy, &format!("fill<{}>", T::NAME))?;
            return kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n.div_ceil(16 / std::mem::size_of::<T>()), 16),
                &[self.arg(), sf.into(), si.into(), (n as i64).into()],
            );
        }
        let layout = shape::layout_bytes("fill", &self.shape, std::slice::from_ref(&self.strides))?;
        let k = self.kernel(KernelFile::Copy, &format!("fill_strided<{}>", T::NAME))?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                self.arg(),
                sf.into(),
                si.into(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )
    }

    /// `a[mask] = x` (`mask` broadcast to this shape).
    pub fn masked_fill(&mut self, mask: &GpuArray<u8>, x: T) -> Result<()> {
        same_device("masked_fill", self, mask)?;
        let shape = self.shape.clone();
        check_out("masked_fill", self, self, &shape)?;
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        let mask = unalias(mask, self)?;
        let stream = self.dev.stream();
        self.used_on(&stream);
        mask.used_on(&stream);
        let (sf, si) = x.scalar_args();
        let layout = shape::layout_bytes(
            "masked_fill",
            &self.shape,
            &[
                self.strides.clone(),
                mask.strides_for("masked_fill", &self.shape)?,
                self.strides.clone(),
            ],
        )?;
        let k = self.kernel(KernelFile::Logic, &format!("where_scalar<{}>", T::NAME))?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                self.arg(),
                mask.arg(),
                sf.into(),
                si.into(),
                self.arg(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )
    }

    /// `a[mask] = values`: the i-th nonzero position of `mask` (of this shape) gets
    /// `values[i]` (`values` one-dimensional with one element per nonzero, or a single element
    /// for all). Waits once for the count.
    pub fn masked_assign(&mut self, mask: &GpuArray<u8>, values: &GpuArray<T>) -> Result<()> {
        self.check_mask("masked_assign", mask)?;
        let idx = mask.flatnonzero()?;
        let count = idx.len();
        if values.len() != count && values.len() != 1 {
            return Err(Error::invalid(
                "masked_assign",
                format!(
                    "the mask selects {count} element(s) but {} value(s) were given (shape {:?})",
                    values.len(),
                    values.shape
                ),
            ));
        }
        let vals = values.reshape(&[values.len()])?;
        let mut flat = if self.is_contiguous() {
            self.reshape(&[self.len()])?
        } else {
            let mut tmp = self.astype::<T>()?.ravel()?;
            tmp.put(0, &idx, &vals)?;
            let back = tmp.reshape(&self.shape.clone())?;
            return self.copy_from(&back);
        };
        flat.put(0, &idx, &vals)
    }
}
