//! Advanced indexing of [`DynArray`]: boolean masks and integer positions, reading
//! (`a[mask]`, `a[idx]`) and writing (`a[mask] = v`, `a[idx] = v`). Masks are `bool` arrays of
//! the array's shape; positions are integer arrays along the first axis (negative positions
//! count from the end, as NumPy's).

use super::{check_fits, with, DynArray, ElementType, Scalar};
use crate::error::{Error, Result};
use crate::GpuArray;

impl DynArray {
    /// The mask of a `bool` array (an error for other types).
    fn mask(&self, op: &str) -> Result<&GpuArray<u8>> {
        match self {
            DynArray::Bool(m) => Ok(m),
            other => Err(Error::invalid(
                op,
                format!("a mask must be a bool array, got {}", other.dtype()),
            )),
        }
    }

    /// Integer positions as one-dimensional `i64`, for the typed `take` / `put`, which count
    /// negative positions from the end and refuse everything outside `[-len, len)` (once: they
    /// used to be counted from the end here too, so `-2 * len + 1` passed as position 1).
    /// Unsigned positions past `i64::MAX` become `i64::MAX`, out of bounds for every axis
    /// (converted as they are, `u64::MAX` would be `-1`: the last element).
    fn positions(&self, op: &str) -> Result<GpuArray<i64>> {
        if !self.dtype().is_integer() {
            return Err(Error::invalid(
                op,
                format!("indices must be integers, got {}", self.dtype()),
            ));
        }
        let src = match self {
            DynArray::U64(a) => DynArray::U64(a.clip(0, i64::MAX as u64)?),
            other => other.clone(),
        };
        match src.to_type(ElementType::I64)? {
            DynArray::I64(a) => a.ravel(),
            _ => Err(Error::invalid(op, "index conversion")),
        }
    }

    /// `a[mask]`: the selected elements in row-major order (one-dimensional).
    pub fn masked_select(&self, mask: &DynArray) -> Result<DynArray> {
        let m = mask.mask("masked_select")?;
        let r = with!(self, a => a.masked_select(m).map(DynArray::from_typed))?;
        Ok(self.retag(r))
    }

    /// `a[mask] = value`.
    pub fn masked_fill(&self, mask: &DynArray, value: &Scalar) -> Result<()> {
        check_fits(value, self.dtype())?;
        let m = mask.mask("masked_fill")?;
        let mut dst = self.clone();
        if let DynArray::Bool(d) = &mut dst {
            return d.masked_fill(m, value.truth() as u8);
        }
        with!(&mut dst, a => a.masked_fill(m, value.to()))
    }

    /// `a[mask] = values` (one value per selected element, or one for all).
    pub fn masked_assign(&self, mask: &DynArray, values: &DynArray) -> Result<()> {
        let m = mask.mask("masked_assign")?;
        let v = values.to_type(self.dtype())?.ravel()?;
        let mut dst = self.clone();
        match (&mut dst, &v) {
            (DynArray::Bool(d), DynArray::Bool(s)) | (DynArray::U8(d), DynArray::U8(s)) => {
                d.masked_assign(m, s)
            }
            (DynArray::I32(d), DynArray::I32(s)) => d.masked_assign(m, s),
            (DynArray::U32(d), DynArray::U32(s)) => d.masked_assign(m, s),
            (DynArray::I64(d), DynArray::I64(s)) => d.masked_assign(m, s),
            (DynArray::U64(d), DynArray::U64(s)) => d.masked_assign(m, s),
            (DynArray::F16(d), DynArray::F16(s)) => d.masked_assign(m, s),
            (DynArray::BF16(d), DynArray::BF16(s)) => d.masked_assign(m, s),
            (DynArray::F32(d), DynArray::F32(s)) => d.masked_assign(m, s),
            (DynArray::F64(d), DynArray::F64(s)) => d.masked_assign(m, s),
            _ => Err(super::mismatch("masked_assign", self, &v)),
        }
    }

    /// `a[idx]` along `axis`: the positions `idx` (any integer type and shape; the result has
    /// `idx`'s shape in place of the axis).
    pub fn take(&self, idx: &DynArray, axis: isize) -> Result<DynArray> {
        let ax = crate::shape::normalize_axis("take", axis, self.ndim())?;
        let flat = idx.positions("take")?;
        let r = with!(self, a => a.take(&flat, axis).map(DynArray::from_typed))?;
        let r = self.retag(r);
        // restore the index's shape in place of the axis
        let mut shape = self.shape()[..ax].to_vec();
        shape.extend_from_slice(idx.shape());
        shape.extend_from_slice(&self.shape()[ax + 1..]);
        r.reshape(&shape)
    }

    /// `a[idx] = values` along the first axis (`values` broadcast).
    pub fn put(&self, idx: &DynArray, values: &DynArray) -> Result<()> {
        if self.ndim() == 0 {
            return Err(Error::invalid(
                "put",
                "a 0-dimensional array has no axis to index",
            ));
        }
        let flat = idx.positions("put")?;
        let v = values.to_type(self.dtype())?;
        let mut dst = self.clone();
        match (&mut dst, &v) {
            (DynArray::Bool(d), DynArray::Bool(s)) | (DynArray::U8(d), DynArray::U8(s)) => {
                d.put(0, &flat, s)
            }
            (DynArray::I32(d), DynArray::I32(s)) => d.put(0, &flat, s),
            (DynArray::U32(d), DynArray::U32(s)) => d.put(0, &flat, s),
            (DynArray::I64(d), DynArray::I64(s)) => d.put(0, &flat, s),
            (DynArray::U64(d), DynArray::U64(s)) => d.put(0, &flat, s),
            (DynArray::F16(d), DynArray::F16(s)) => d.put(0, &flat, s),
            (DynArray::BF16(d), DynArray::BF16(s)) => d.put(0, &flat, s),
            (DynArray::F32(d), DynArray::F32(s)) => d.put(0, &flat, s),
            (DynArray::F64(d), DynArray::F64(s)) => d.put(0, &flat, s),
            _ => Err(super::mismatch("put", self, &v)),
        }
    }

    /// `r` with this array's `bool` tag when this array is `bool` (typed operations on its
    /// bytes give `uint8`).
    fn retag(&self, r: DynArray) -> DynArray {
        match (self.dtype(), r) {
            (ElementType::Bool, DynArray::U8(m)) => DynArray::Bool(m),
            (_, r) => r,
        }
    }
}
