//! [`DynArray`]s over memory another library owns (DLPack, the CUDA array interface), and
//! handing an array's readiness to another library's stream.

use super::{for_type, with, DynArray, ElementType};
use crate::alloc::DeviceBuffer;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::GpuArray;
use std::sync::Arc;

impl DynArray {
    /// An array of type `t` viewing foreign device memory: element 0 at address `data`,
    /// `shape` and `strides` in elements (negative strides allowed). gpukit never frees the
    /// memory; `keep_alive` (the producer's deleter or object) is dropped once no view of it
    /// remains and the work queued on it has finished.
    ///
    /// # Safety
    /// The memory the view spans must be live device memory of `dev` holding elements of `t`
    /// (for `bool`, bytes of 0 or 1), not written by anyone else while gpukit reads it unless
    /// ordered by streams, and must stay valid until `keep_alive` is dropped. (The range is
    /// checked to lie inside one allocation of `dev`.)
    pub unsafe fn from_foreign(
        dev: &Device,
        data: u64,
        shape: &[usize],
        strides: &[isize],
        t: ElementType,
        keep_alive: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<DynArray> {
        if shape.len() != strides.len() {
            return Err(Error::invalid(
                "from_foreign",
                format!("shape {shape:?} and strides {strides:?} differ in length"),
            ));
        }
        let size = t.itemsize() as i128;
        // the span of the view, in elements relative to element 0
        let (mut lo, mut hi) = (0i128, 0i128);
        let empty = shape.contains(&0);
        if !empty {
            for (&d, &s) in shape.iter().zip(strides) {
                let reach = (d as i128 - 1) * s as i128;
                if reach < 0 {
                    lo += reach;
                } else {
                    hi += reach;
                }
            }
        }
        let start = data as i128 + lo * size;
        let bytes = if empty { 0 } else { (hi - lo + 1) * size };
        if start < 0 || start + bytes > u64::MAX as i128 {
            return Err(Error::invalid(
                "from_foreign",
                format!("the view of shape {shape:?}, strides {strides:?} at {data:#x} leaves the address space"),
            ));
        }
        let bytes = usize::try_from(bytes)
            .map_err(|_| Error::invalid("from_foreign", format!("shape {shape:?} is too large")))?;
        // SAFETY: forwarded from the caller: [start, start + bytes) is the memory the view
        // spans, live device memory of `dev` for as long as `keep_alive` lives.
        let buf = unsafe { DeviceBuffer::from_foreign(dev, start as u64, bytes, keep_alive)? };
        let buf = Arc::new(buf);
        let offset = (-lo) as usize;
        let r = for_type!(t, T => GpuArray::<T>::from_buffer(buf, shape, strides, offset).map(DynArray::from_typed))?;
        Ok(match (t, r) {
            (ElementType::Bool, DynArray::U8(m)) => DynArray::Bool(m),
            (_, r) => r,
        })
    }

    /// A copy of this array on `dev` (a peer copy for another device; see
    /// [`GpuArray::to_device`]).
    pub fn to_device(&self, dev: &Device) -> Result<DynArray> {
        let t = self.dtype();
        let r = with!(self, a => a.to_device(dev).map(DynArray::from_typed))?;
        Ok(match (t, r) {
            (ElementType::Bool, DynArray::U8(m)) => DynArray::Bool(m),
            (_, r) => r,
        })
    }

    /// Makes the foreign stream `raw` (DLPack's encoding: 1 legacy default, 2 per-thread
    /// default, else a `CUstream`) wait for every pending use of this array on gpukit's
    /// streams.
    ///
    /// # Safety
    /// `raw` must be a live stream of this array's device (or one of the sentinels) for the
    /// duration of the call.
    pub unsafe fn make_ready_on_raw(&self, raw: u64) -> Result<()> {
        // SAFETY: forwarded from the caller.
        with!(self, a => unsafe { a.make_ready_on_raw(raw) })
    }
}
