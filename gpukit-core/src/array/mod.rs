//! `GpuArray<T>`: an n-dimensional, row-major array on one device.
//!
//! An array is a view: a shared [`DeviceBuffer`] plus shape, element strides and an element
//! offset. Views ([`view`]: `reshape` of a contiguous array, `transpose`, `permute`, `slice`
//! with steps, `squeeze`, `unsqueeze`, `broadcast_to`, `split`) share memory; operations
//! produce fresh contiguous arrays unless they write into a given output (`*_into`) or in place
//! (`*_inplace`, `set*`). Every view lies inside its buffer (each constructor checks), which
//! is what the kernels' launches rely on. Work is queued on the device's current stream of the
//! calling thread ([`Device::with_stream`]); `to_vec` waits for it.
//!
//! - [`ops`]: elementwise arithmetic, math, comparisons, logic, bitwise, `where`, `clip`;
//! - [`expr`]: the `+ - * /` operators, fused into one kernel per expression;
//! - [`reduce`], [`scan`]: reductions over any axes (NumPy's result types), cumsum / cumprod;
//! - [`index`], [`join`]: integer and boolean indexing, setitem, concatenate / stack / split;
//! - [`nn`]: softmax, log-softmax, layer norm; [`matmul`]: `a.matmul(&b)` with N-d batches;
//! - [`host`]: pinned host arrays and stream-ordered non-blocking copies; [`display`].

pub mod display;
pub mod expr;
pub mod host;
pub mod index;
pub mod join;
pub mod matmul;
pub mod nn;
pub mod ops;
pub mod reduce;
pub mod scan;
pub mod view;

pub use expr::Expr;
pub use ops::{where_, BinaryOp, CompareOp, LogicalOp, Predicate, UnaryOp};
pub use reduce::ReduceOp;
pub use scan::ScanOp;

use crate::alloc::{current_owner, DeviceBuffer};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{self, KernelFile};
use crate::shape;
use crate::stream::Stream;
use gpukit_jit::KernelArg;
use std::marker::PhantomData;
use std::sync::Arc;

/// An n-dimensional array of `T` in device memory. Cloning makes another view of the same
/// memory.
pub struct GpuArray<T: DType> {
    dev: Device,
    buf: Arc<DeviceBuffer>,
    shape: Vec<usize>,
    strides: Vec<isize>,
    offset: usize,
    _t: PhantomData<T>,
}

impl<T: DType> Clone for GpuArray<T> {
    fn clone(&self) -> Self {
        GpuArray {
            dev: self.dev.clone(),
            buf: self.buf.clone(),
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            offset: self.offset,
            _t: PhantomData,
        }
    }
}

impl<T: DType> std::fmt::Debug for GpuArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuArray<{}>(shape {:?}, strides {:?}, device {})",
            T::RUST_NAME,
            self.shape,
            self.strides,
            self.dev.ordinal()
        )
    }
}

impl<T: DType> GpuArray<T> {
    /// An uninitialised contiguous array on `stream` (for kernels that write every element).
    pub(crate) fn alloc_on(dev: &Device, shape: &[usize], stream: &Stream) -> Result<Self> {
        let n = shape::numel("alloc", shape)?;
        let bytes = n
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::invalid("alloc", format!("shape {shape:?} is too large")))?;
        let buf = dev.allocator().alloc_for(&current_owner(), bytes, stream)?;
        Ok(GpuArray {
            dev: dev.clone(),
            buf: Arc::new(buf),
            shape: shape.to_vec(),
            strides: shape::contiguous_strides(shape),
            offset: 0,
            _t: PhantomData,
        })
    }

    /// An uninitialised array (every element must be written before it is read).
    pub fn empty(dev: &Device, shape: &[usize]) -> Result<Self> {
        Self::alloc_on(dev, shape, &dev.stream())
    }

    /// An array of zeros.
    pub fn zeros(dev: &Device, shape: &[usize]) -> Result<Self> {
        let stream = dev.stream();
        let a = Self::alloc_on(dev, shape, &stream)?;
        let bytes = a.len() * std::mem::size_of::<T>();
        a.buf.zero_async(bytes, &stream)?;
        Ok(a)
    }

    /// An array of ones.
    pub fn ones(dev: &Device, shape: &[usize]) -> Result<Self> {
        Self::full(dev, shape, T::one())
    }

    /// An array filled with `value`.
    pub fn full(dev: &Device, shape: &[usize], value: T) -> Result<Self> {
        let stream = dev.stream();
        let a = Self::alloc_on(dev, shape, &stream)?;
        let n = a.len();
        if n > 0 {
            let (sf, si) = value.scalar_args();
            let k = a.kernel(KernelFile::Copy, &format!("fill<{}>", T::NAME))?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(dev, n.div_ceil(16 / std::mem::size_of::<T>()), 16),
                &[a.arg(), sf.into(), si.into(), (n as i64).into()],
            )?;
        }
        Ok(a)
    }

    /// `start, start + step, ...` up to (excluding) `stop`, like `numpy.arange`. Integer types
    /// are computed exactly in 64 bits.
    pub fn arange(dev: &Device, start: T, stop: T, step: T) -> Result<Self> {
        let (s0, st) = (start.to_f64(), step.to_f64());
        if st == 0.0 || !st.is_finite() || !s0.is_finite() || !stop.to_f64().is_finite() {
            return Err(Error::invalid(
                "arange",
                format!("step must be finite and non-zero and the ends finite (start {start:?}, stop {stop:?}, step {step:?})"),
            ));
        }
        let n = if T::is_float() {
            ((stop.to_f64() - s0) / st).ceil().max(0.0) as usize
        } else {
            let (a, b, s) = (
                start.to_i64() as i128,
                stop.to_i64() as i128,
                step.to_i64() as i128,
            );
            let span = b - a;
            if (span > 0) != (s > 0) || span == 0 {
                0
            } else {
                ((span.abs() + s.abs() - 1) / s.abs()) as usize
            }
        };
        let stream = dev.stream();
        let a = Self::alloc_on(dev, &[n], &stream)?;
        if n > 0 {
            let k = a.kernel(KernelFile::Copy, &format!("arange<{}>", T::NAME))?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(dev, n, 16),
                &[
                    a.arg(),
                    s0.into(),
                    st.into(),
                    start.to_i64().into(),
                    step.to_i64().into(),
                    (n as i64).into(),
                ],
            )?;
        }
        Ok(a)
    }

    /// An array with the contents of `data` (row-major) and shape `shape`.
    pub fn from_slice(dev: &Device, data: &[T], shape: &[usize]) -> Result<Self> {
        let n = shape::numel("from_slice", shape)?;
        if n != data.len() {
            return Err(Error::shape("from_slice", &[data.len()], shape));
        }
        let stream = dev.stream();
        let a = Self::alloc_on(dev, shape, &stream)?;
        let inner = dev.inner();
        inner
            .transfers
            .upload(a.buf.ptr(), bytemuck::cast_slice(data), &stream, &inner.h2d)?;
        Ok(a)
    }

    /// [`from_slice`](Self::from_slice) taking a `Vec`.
    pub fn from_vec(dev: &Device, data: Vec<T>, shape: &[usize]) -> Result<Self> {
        Self::from_slice(dev, &data, shape)
    }

    /// A view of `buf` (device memory of this crate's allocator or of another library,
    /// [`DeviceBuffer::from_foreign`]): `shape`, element `strides` (negative and zero allowed)
    /// and the element `offset` of element `[0, 0, ...]`.
    ///
    /// Checked, as for every view the crate makes: the view lies inside the buffer (what the
    /// kernels rely on), element `[0, ...]` is aligned for `T`, and no element is reached by two
    /// indices except through broadcasting (stride 0; such a view cannot be written into):
    /// layouts where each stride is longer than the span of the smaller ones, which covers
    /// dense, sliced, transposed and broadcast layouts (see [`shape::check_view`]).
    pub fn from_buffer(
        buf: Arc<DeviceBuffer>,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Self> {
        let size = std::mem::size_of::<T>();
        shape::check_view("from_buffer", shape, strides, offset, size, buf.len_bytes())?;
        let first = buf.ptr() as u128 + offset as u128 * size as u128;
        if !shape.contains(&0) && !first.is_multiple_of(std::mem::align_of::<T>() as u128) {
            return Err(Error::invalid(
                "from_buffer",
                format!(
                    "element [0, ...] at {first:#x} is not aligned for {} ({} bytes)",
                    T::RUST_NAME,
                    std::mem::align_of::<T>()
                ),
            ));
        }
        let dev = Device::open(buf.device_ordinal())?;
        Ok(GpuArray {
            dev,
            buf,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset,
            _t: PhantomData,
        })
    }

    /// Makes future work on the foreign stream `foreign` wait for every use of this array's
    /// memory queued so far through gpukit, on any stream (reads and writes alike: each use
    /// waits for the one before, so waiting for the latest waits for all). The host does not
    /// block. For DLPack's `__dlpack__(stream=...)` and the CUDA array interface's `stream`
    /// key: `1` is the legacy default stream, `2` the per-thread default stream, `0` is refused
    /// as ambiguous ([`crate::stream::ForeignStream`]).
    ///
    /// # Safety
    /// `foreign`, unless 1 or 2, must be a live stream of a context of this array's device.
    pub unsafe fn make_ready_on_raw(&self, foreign: u64) -> Result<()> {
        let last = self.buf.last_user();
        // SAFETY: forwarded from the caller.
        unsafe { last.make_raw_stream_wait(foreign) }
    }

    /// The elements in row-major order. Waits for the work queued on the current stream and for
    /// every use of the array's memory queued so far, on any stream, so it always sees finished
    /// results.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        // Zeroed allocation: a large one is fresh mmap'd memory whose pages are not touched yet,
        // so asking for huge pages now makes the copy fault 2 MiB at a time instead of 4 KiB
        // (a 1 GiB download otherwise spends most of its time in 262,144 page faults).
        let mut out: Vec<T> = bytemuck::zeroed_vec(self.len());
        advise_huge_pages(bytemuck::cast_slice_mut(&mut out));
        self.copy_to_host(&mut out)?;
        Ok(out)
    }

    /// Copies the elements (row-major) into `out`, which must hold exactly [`len`](Self::len)
    /// elements. Like [`to_vec`](Self::to_vec) but into memory the caller owns (for example a
    /// buffer reused across calls, whose pages are already mapped).
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<()> {
        if out.len() != self.len() {
            return Err(Error::shape("copy_to_host", &[out.len()], &self.shape));
        }
        let current = self.dev.stream();
        // A non-contiguous array is first gathered on the current stream (ordered after its
        // latest use by `astype`).
        let a = self.contiguous()?;
        if !out.is_empty() {
            let inner = a.dev.inner();
            // Wait for the current stream and for the latest use of the memory (whose queue
            // ends after every earlier use).
            inner.transfers.download(
                bytemuck::cast_slice_mut(out),
                a.device_ptr(),
                &[&current, &a.buf.last_user()],
                &inner.d2h,
            )?;
        }
        Ok(())
    }

    /// The single element of a one-element array (any shape, e.g. the result of `sum()`).
    pub fn item(&self) -> Result<T> {
        if self.len() != 1 {
            return Err(Error::invalid(
                "item",
                format!(
                    "needs exactly one element, the array has shape {:?}",
                    self.shape
                ),
            ));
        }
        Ok(self.to_vec()?[0])
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Element strides (0 in broadcast views).
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// Number of elements (every constructor checks that it fits in `isize`).
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// True for a dense row-major layout.
    pub fn is_contiguous(&self) -> bool {
        shape::is_contiguous(&self.shape, &self.strides)
    }
    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }
    /// The underlying buffer (shared by views).
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }
    /// The underlying buffer as a shared handle (for [`from_buffer`](Self::from_buffer) views
    /// of another element type or layout).
    pub fn buffer_arc(&self) -> &Arc<DeviceBuffer> {
        &self.buf
    }
    /// The element offset of element `[0, 0, ...]` in the buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Device address of element `[0, 0, ...]` (offset applied).
    pub fn device_ptr(&self) -> u64 {
        self.buf.ptr() + (self.offset * std::mem::size_of::<T>()) as u64
    }
    /// The array as a kernel argument (its [`device_ptr`](Self::device_ptr)).
    pub fn as_kernel_arg(&self) -> KernelArg {
        KernelArg::Ptr(self.device_ptr())
    }
    pub(crate) fn arg(&self) -> KernelArg {
        self.as_kernel_arg()
    }

    pub(crate) fn kernel(&self, file: KernelFile, expr: &str) -> Result<gpukit_jit::Kernel> {
        kernels::get(&self.dev, file, T::NAME, expr)
    }

    /// Declares that work about to be queued on `stream` reads or writes this array: `stream`
    /// is ordered after every earlier use of the buffer on other streams, and the memory is not
    /// reused under a running kernel ([`DeviceBuffer::use_on`]). Call it before queueing.
    pub(crate) fn used_on(&self, stream: &Stream) {
        self.buf.use_on(stream);
    }

    /// A view of the same buffer. Callers guarantee the view lies inside the buffer.
    pub(crate) fn view(&self, shape: Vec<usize>, strides: Vec<isize>, offset: usize) -> Self {
        GpuArray {
            dev: self.dev.clone(),
            buf: self.buf.clone(),
            shape,
            strides,
            offset,
            _t: PhantomData,
        }
    }

    /// A contiguous array with the same elements (this array itself when already contiguous).
    pub fn contiguous(&self) -> Result<Self> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.astype::<T>()
    }

    /// A fresh contiguous array with the elements converted to `U` (floats to integers
    /// truncate; out-of-range values follow the CUDA conversion rules).
    pub fn astype<U: DType>(&self) -> Result<GpuArray<U>> {
        let stream = self.dev.stream();
        let out = GpuArray::<U>::alloc_on(&self.dev, &self.shape, &stream)?;
        let n = self.len();
        if n == 0 {
            return Ok(out);
        }
        self.used_on(&stream);
        if self.is_contiguous() {
            let k = self.kernel(
                KernelFile::Copy,
                &format!("cast_contig<{}, {}>", T::NAME, U::NAME),
            )?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_vec(
                    &self.dev,
                    n.div_ceil(16 / std::mem::size_of::<T>().max(std::mem::size_of::<U>())),
                    kernels::EW_UNROLL,
                ),
                &[out.arg(), self.arg(), (n as i64).into()],
            )?;
        } else {
            let layout = shape::layout_bytes(
                "astype",
                &self.shape,
                &[out.strides.clone(), self.strides.clone()],
            )?;
            let k = self.kernel(
                KernelFile::Copy,
                &format!("copy_strided<{}, {}>", T::NAME, U::NAME),
            )?;
            kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, n, 32),
                &[
                    out.arg(),
                    self.arg(),
                    KernelArg::Bytes(layout),
                    (n as i64).into(),
                ],
            )?;
        }
        Ok(out)
    }

    /// Copies `src` (same element type, broadcastable to this shape) into this array, through
    /// this array's strides (so a view writes into the memory it shares). A source that
    /// overlaps this array (another view of the same buffer) is first copied to fresh memory,
    /// so the result is as if the whole source had been read before anything was written.
    pub fn copy_from(&mut self, src: &GpuArray<T>) -> Result<()> {
        if shape::has_repeated_elements(&self.shape, &self.strides) {
            return Err(Error::invalid(
                "copy_from",
                format!(
                    "the destination (shape {:?}, strides {:?}) is a broadcast view with repeated \
                     elements; copy into the array it views instead",
                    self.shape, self.strides
                ),
            ));
        }
        if self.overlaps(src) {
            let fresh = src.astype::<T>()?;
            return self.copy_from(&fresh);
        }
        if src.dev != self.dev {
            return Err(Error::DeviceMismatch {
                op: "copy_from".into(),
                lhs: self.dev.ordinal(),
                rhs: src.dev.ordinal(),
            });
        }
        let sst = shape::broadcast_strides("copy_from", &src.shape, &src.strides, &self.shape)
            .map_err(|_| Error::shape("copy_from", &self.shape, &src.shape))?;
        let n = self.len();
        if n == 0 {
            return Ok(());
        }
        let stream = self.dev.stream();
        src.used_on(&stream);
        self.used_on(&stream);
        let layout = shape::layout_bytes("copy_from", &self.shape, &[self.strides.clone(), sst])?;
        let k = self.kernel(
            KernelFile::Copy,
            &format!("copy_strided<{}, {}>", T::NAME, T::NAME),
        )?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, n, 32),
            &[
                self.arg(),
                src.arg(),
                KernelArg::Bytes(layout),
                (n as i64).into(),
            ],
        )
    }
}

impl<T: DType> GpuArray<T> {
    /// The device addresses `[start, end)` this view's elements occupy (empty for an empty
    /// array): the span from its lowest to its highest element, whatever the strides.
    pub fn byte_range(&self) -> std::ops::Range<u64> {
        let base = self.buf.ptr();
        match shape::extent(&self.shape, &self.strides, self.offset) {
            None => base..base,
            Some((lo, hi)) => {
                let size = std::mem::size_of::<T>() as u64;
                base + lo as u64 * size..base + (hi as u64 + 1) * size
            }
        }
    }

    /// Whether this array's elements and `other`'s share device memory (views of one buffer
    /// whose spans intersect). Operations that write one while reading the other, or kernels
    /// that assume distinct operands (GEMM's C against A and B), check this first.
    pub fn overlaps<U: DType>(&self, other: &GpuArray<U>) -> bool {
        gpukit_jit::typed::ranges_overlap(&self.byte_range(), &other.byte_range())
    }
}

// SAFETY: the buffer is a live allocation of the array's device (the array holds an Arc of it;
// a foreign buffer's memory stays valid while it lives, by from_foreign's contract); the view
// lies inside it (every view constructor checks its bounds), so byte_range is inside the
// allocation; is_dense is true only for contiguous views, whose elements are exactly the range
// starting at device_ptr. read_on / write_on enter the stream into the buffer's stream order
// (use_on), so the memory is neither reused nor handed back before the work queued there has
// completed, and that work is ordered after earlier uses on other streams.
unsafe impl<T: DType> gpukit_jit::DeviceMemory for GpuArray<T> {
    fn elem_type(&self) -> gpukit_jit::ElemType {
        <T as gpukit_jit::Element>::ELEM
    }
    fn byte_range(&self) -> std::ops::Range<u64> {
        GpuArray::byte_range(self)
    }
    fn device_ordinal(&self) -> usize {
        self.dev.ordinal()
    }
    fn is_dense(&self) -> bool {
        self.is_contiguous()
    }
    fn read_on<'s>(
        &'s self,
        stream: &'s Arc<cudarc::driver::CudaStream>,
    ) -> (u64, gpukit_jit::UseGuard<'s>) {
        self.buf.use_on(&Stream::wrap(stream.clone()));
        (self.device_ptr(), gpukit_jit::UseGuard::none())
    }
    fn write_on<'s>(
        &'s mut self,
        stream: &'s Arc<cudarc::driver::CudaStream>,
    ) -> (u64, gpukit_jit::UseGuard<'s>) {
        self.buf.use_on(&Stream::wrap(stream.clone()));
        (self.device_ptr(), gpukit_jit::UseGuard::none())
    }
}

impl<T: DType> From<&GpuArray<T>> for KernelArg {
    fn from(a: &GpuArray<T>) -> Self {
        a.as_kernel_arg()
    }
}

/// Asks the kernel to back a large, not yet touched host buffer with transparent huge pages.
/// Only a hint: on failure (or where THP is disabled) nothing changes.
pub(crate) fn advise_huge_pages(buf: &mut [u8]) {
    const MIN: usize = 64 << 20;
    const HUGE: usize = 2 << 20;
    if buf.len() < MIN {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = (buf.as_mut_ptr() as usize).next_multiple_of(HUGE);
        let end = (buf.as_mut_ptr() as usize + buf.len()) / HUGE * HUGE;
        if end > start {
            // SAFETY: [start, end) lies inside `buf`, which we borrow mutably; MADV_HUGEPAGE
            // changes only how future faults are served, never the contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
}
