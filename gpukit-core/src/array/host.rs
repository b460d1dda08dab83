//! Page-locked host arrays ([`PinnedArray`], over the device's [`PinnedPool`]) and
//! non-blocking, stream-ordered copies between them and device arrays; device-to-device copies
//! (also across devices).
//!
//! `upload_async` / `download_async` queue a DMA copy on a stream and return at once. The host
//! array remembers the copy's completion event: reading or writing it
//! ([`PinnedArray::as_slice`] / [`as_mut_slice`](PinnedArray::as_mut_slice)) waits for the
//! copy first, and dropping it returns the buffer to the pool, which does not reuse it before
//! the copy has completed. Safe code therefore cannot observe or disturb a transfer in flight.
//!
//! ```no_run
//! use gpukit_core::{Device, GpuArray, PinnedArray, PinnedKind};
//! let dev = Device::open(0)?;
//! let mut host = PinnedArray::<f32>::from_slice(&dev, &vec![1.0; 1 << 20], PinnedKind::WriteCombined)?;
//! let mut x = GpuArray::<f32>::empty(&dev, &[1 << 20])?;
//! x.upload_async(&mut host)?;              // returns at once
//! let y = x.mul_scalar(2.0)?;               // ordered after the upload (same stream)
//! let mut back = PinnedArray::<f32>::zeros(&dev, 1 << 20, PinnedKind::Cached)?;
//! y.download_async(&mut back)?;
//! assert_eq!(back.as_slice()?[0], 2.0);     // waits for the download
//! # Ok::<(), gpukit_core::Error>(())
//! ```
//!
//! [`PinnedPool`]: crate::pinned::PinnedPool

use super::ops::same_device;
use super::GpuArray;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{DriverContext, Error, Result};
use crate::pinned::{PinnedBuffer, PinnedKind};
use crate::stream::Stream;
use cudarc::driver::sys;
use std::marker::PhantomData;

/// A typed, page-locked host array from a device's pinned pool.
pub struct PinnedArray<T: DType> {
    buf: PinnedBuffer,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: DType> std::fmt::Debug for PinnedArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PinnedArray<{}>(len {}, {:?})",
            T::RUST_NAME,
            self.len,
            self.buf.kind()
        )
    }
}

impl<T: DType> PinnedArray<T> {
    /// `len` zeros in pinned memory of `kind` (`WriteCombined` for data to upload, `Cached`
    /// for data to read back on the CPU).
    pub fn zeros(dev: &Device, len: usize, kind: PinnedKind) -> Result<Self> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::invalid("PinnedArray", format!("{len} elements are too many")))?;
        let mut buf = dev.pinned().acquire(bytes, kind)?;
        buf.as_mut_slice()?.fill(0);
        Ok(PinnedArray {
            buf,
            len,
            _t: PhantomData,
        })
    }

    /// A pinned copy of `data`.
    pub fn from_slice(dev: &Device, data: &[T], kind: PinnedKind) -> Result<Self> {
        let bytes = std::mem::size_of_val(data);
        let mut buf = dev.pinned().acquire(bytes, kind)?;
        buf.as_mut_slice()?
            .copy_from_slice(bytemuck::cast_slice(data));
        Ok(PinnedArray {
            buf,
            len: data.len(),
            _t: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements, after any copy in flight has completed.
    pub fn as_slice(&mut self) -> Result<&[T]> {
        let bytes = self.buf.as_slice()?;
        // The buffer holds len * size_of::<T>() bytes of a page-aligned allocation.
        bytemuck::try_cast_slice(bytes)
            .map_err(|e| Error::invalid("PinnedArray", format!("buffer is not castable: {e}")))
    }

    /// The elements, writable, after any copy in flight has completed.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        let bytes = self.buf.as_mut_slice()?;
        bytemuck::try_cast_slice_mut(bytes)
            .map_err(|e| Error::invalid("PinnedArray", format!("buffer is not castable: {e}")))
    }

    /// Waits until any copy in flight has completed.
    pub fn wait(&mut self) -> Result<()> {
        self.buf.wait()
    }
}

fn check_len<T: DType>(op: &str, a: &GpuArray<T>, n: usize) -> Result<()> {
    if a.len() != n {
        return Err(Error::shape(op, &a.shape, &[n]));
    }
    Ok(())
}

impl<T: DType> GpuArray<T> {
    /// Starts copying `src` into this array on the device's current stream and returns at
    /// once (see the module docs). The array must be contiguous with `src.len()` elements.
    pub fn upload_async(&mut self, src: &mut PinnedArray<T>) -> Result<()> {
        let stream = self.dev.stream();
        self.upload_async_on(src, &stream)
    }

    /// [`upload_async`](Self::upload_async) on `stream` (work on other streams that reads the
    /// array must wait for it: [`Stream::wait_stream`]).
    pub fn upload_async_on(&mut self, src: &mut PinnedArray<T>, stream: &Stream) -> Result<()> {
        check_len("upload_async", self, src.len)?;
        if !self.is_contiguous() {
            return Err(Error::invalid(
                "upload_async",
                format!(
                    "the destination must be contiguous (shape {:?}, strides {:?}); upload into \
                     a fresh array and copy_from it",
                    self.shape, self.strides
                ),
            ));
        }
        let bytes = src.len * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(());
        }
        // Any copy still reading or writing the host buffer finishes first.
        src.buf.wait()?;
        stream
            .cuda()
            .context()
            .bind_to_thread()
            .ctx("binding the context")?;
        self.used_on(stream);
        // SAFETY: the destination is this contiguous array's `bytes` bytes of device memory
        // (a live allocation, used on `stream` from now on, so not reused before the copy);
        // the source is the pinned buffer's first `bytes` bytes, which stay allocated and
        // unmodified until the event set below completes (PinnedBuffer's contract).
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                self.device_ptr(),
                src.buf.as_ptr() as *const std::ffi::c_void,
                bytes,
                stream.cuda().cu_stream(),
            )
        }
        .result()
        .ctx("copying host to device")?;
        src.buf.set_ready_after(stream)?;
        Ok(())
    }

    /// Starts copying this array into `dst` on the device's current stream (after the work
    /// queued there) and returns at once; `dst.as_slice()` waits for it.
    pub fn download_async(&self, dst: &mut PinnedArray<T>) -> Result<()> {
        let stream = self.dev.stream();
        self.download_async_on(dst, &stream)
    }

    /// [`download_async`](Self::download_async) on `stream`.
    pub fn download_async_on(&self, dst: &mut PinnedArray<T>, stream: &Stream) -> Result<()> {
        check_len("download_async", self, dst.len)?;
        let bytes = dst.len * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(());
        }
        let src = self.contiguous()?;
        dst.buf.wait()?;
        stream
            .cuda()
            .context()
            .bind_to_thread()
            .ctx("binding the context")?;
        src.used_on(stream);
        // SAFETY: the source is `bytes` bytes of a live contiguous device array, used on
        // `stream` (not reused before the copy); the destination is the pinned buffer's first
        // `bytes` bytes, not read by the CPU before the event set below completes (as_slice
        // waits for it) and not freed or reused before then (the pool's contract).
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                dst.buf.as_mut_ptr() as *mut std::ffi::c_void,
                src.device_ptr(),
                bytes,
                stream.cuda().cu_stream(),
            )
        }
        .result()
        .ctx("copying device to host")?;
        dst.buf.set_ready_after(stream)?;
        Ok(())
    }

    /// A new array of `shape` with `src`'s elements, uploaded without waiting.
    pub fn from_pinned(dev: &Device, src: &mut PinnedArray<T>, shape: &[usize]) -> Result<Self> {
        let mut a = GpuArray::<T>::empty(dev, shape)?;
        a.upload_async(src)?;
        Ok(a)
    }

    /// A copy of this array on device `dev` (a peer copy when it is another device, ordered
    /// after the work queued on this device's current stream; no host round trip).
    pub fn to_device(&self, dev: &Device) -> Result<GpuArray<T>> {
        if *dev == self.dev {
            return self.astype::<T>();
        }
        let src = self.contiguous()?;
        let src_stream = self.dev.stream();
        let dst_stream = dev.stream();
        let out = GpuArray::<T>::alloc_on(dev, &self.shape, &dst_stream)?;
        let bytes = out.len() * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(out);
        }
        dst_stream.wait_stream(&src_stream)?;
        src.used_on(&dst_stream);
        dev.context().bind_to_thread().ctx("binding the context")?;
        // SAFETY: both ranges are `bytes` bytes of live contiguous device arrays of their
        // contexts, used on `dst_stream` (not reused before the copy), which is ordered after
        // the source's producing stream; they are distinct allocations on distinct devices.
        unsafe {
            sys::cuMemcpyPeerAsync(
                out.device_ptr(),
                dev.context().cu_ctx(),
                src.device_ptr(),
                self.dev.context().cu_ctx(),
                bytes,
                dst_stream.cuda().cu_stream(),
            )
        }
        .result()
        .ctx("copying between devices")?;
        Ok(out)
    }

    /// Copies `src` (same shape, any layout, same device) into this contiguous array with the
    /// copy engine (`cuMemcpyDtoDAsync` when both are contiguous, else a strided copy kernel).
    pub fn copy_from_device(&mut self, src: &GpuArray<T>) -> Result<()> {
        same_device("copy_from_device", self, src)?;
        if self.shape != src.shape {
            return Err(Error::shape("copy_from_device", &self.shape, &src.shape));
        }
        if !(self.is_contiguous() && src.is_contiguous()) || self.overlaps(src) {
            return self.copy_from(src);
        }
        let bytes = self.len() * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        src.used_on(&stream);
        self.dev
            .context()
            .bind_to_thread()
            .ctx("binding the context")?;
        // SAFETY: two disjoint (checked above) ranges of `bytes` bytes of live contiguous device
        // arrays of this context, both used on `stream`.
        unsafe {
            sys::cuMemcpyDtoDAsync_v2(
                self.device_ptr(),
                src.device_ptr(),
                bytes,
                stream.cuda().cu_stream(),
            )
        }
        .result()
        .ctx("copying device to device")
    }
}
