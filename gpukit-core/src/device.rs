//! Devices (streams and events are [`crate::stream`]'s).
//!
//! A [`Device`] is opened once per ordinal per process ([`Device::open`] returns the same shared
//! state each time) and owns the primary CUDA context, a compute stream (non-blocking, not the
//! legacy NULL stream), two transfer streams, the caching [`Allocator`] and the loaded built-in
//! kernels. Operations run on the thread's *current* stream of the device: the compute stream,
//! or the stream of an enclosing [`Device::with_stream`] scope.

use crate::alloc::Allocator;
use crate::attributes::DeviceAttributes;
use crate::error::{DriverContext, Error, Result};
use crate::pinned::PinnedPool;
use crate::stream::{self, Stream};
use crate::transfer::Transfers;
use cudarc::driver::{sys, CudaContext};
use gpukit_jit::{Arch, CompileOptions, Kernel, KernelSet};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Returns `Err(Error::NoDriver)` unless libcuda can be loaded and initialised.
pub(crate) fn ensure_driver() -> Result<()> {
    if !gpukit_jit::libs::driver_present() {
        return Err(Error::NoDriver);
    }
    static INIT: OnceLock<std::result::Result<(), cudarc::driver::DriverError>> = OnceLock::new();
    (*INIT.get_or_init(cudarc::driver::result::init)).ctx("initialising the CUDA driver (cuInit)")
}

/// How host threads wait for a device's work: see [`Device::set_host_wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostWait {
    /// The driver's choice (spin while the process has fewer contexts than cores, else yield).
    Auto,
    /// Spin: the lowest latency; holds a core while waiting.
    Spin,
    /// Spin, yielding the core to any other runnable thread at each turn.
    Yield,
    /// Sleep until the GPU signals completion: frees the core, costs a wake-up.
    Block,
}

/// The first driver with `cuCtxSetFlags` (CUDA 12.1).
const CTX_SET_FLAGS_DRIVER: i32 = 12010;

pub(crate) struct DeviceInner {
    attrs: Arc<DeviceAttributes>,
    priority_range: (i32, i32),
    ctx: Arc<CudaContext>,
    compute: Stream,
    pub(crate) h2d: Stream,
    pub(crate) d2h: Stream,
    allocator: Allocator,
    pinned: PinnedPool,
    pub(crate) transfers: Transfers,
    kernels: &'static KernelSet,
}

/// One CUDA device (GPU). Cheap to clone; all clones share one state.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.inner.attrs.ordinal)
            .field("name", &self.inner.attrs.name)
            .field("compute_capability", &self.inner.attrs.compute_capability)
            .finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

fn registry() -> &'static Mutex<HashMap<usize, Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Device {
    /// Number of CUDA devices; `Err(Error::NoDriver)` without a driver.
    pub fn count() -> Result<usize> {
        ensure_driver()?;
        let n = cudarc::driver::result::device::get_count().ctx("counting CUDA devices")?;
        Ok(n.max(0) as usize)
    }

    /// Opens device `ordinal` (the same shared state on every call in this process).
    pub fn open(ordinal: usize) -> Result<Device> {
        ensure_driver()?;
        let mut reg = registry().lock();
        if let Some(d) = reg.get(&ordinal) {
            return Ok(d.clone());
        }
        let count = Device::count()?;
        if ordinal >= count {
            return Err(Error::InvalidDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).ctx("creating the CUDA context")?;
        let attrs = DeviceAttributes::of(&ctx)?;
        ctx.bind_to_thread().ctx("binding the context")?;
        let (least, greatest) = cudarc::driver::result::stream::get_priority_range()
            .ctx("reading the stream priority range")?;
        let mk = |p: i32| -> Result<Stream> {
            let s = ctx.new_stream_with_priority(p).ctx("creating a stream")?;
            Ok(Stream::with_priority(s, p))
        };
        let compute = mk(least)?;
        let h2d = mk(least)?;
        let d2h = mk(least)?;
        let allocator = Allocator::new(ctx.clone(), ordinal, compute.clone());
        let kernels = KernelSet::of(&ctx)?;
        let pinned = PinnedPool::new(ctx.clone());
        let dev = Device {
            inner: Arc::new(DeviceInner {
                attrs,
                priority_range: (least, greatest),
                transfers: Transfers::new(pinned.clone()),
                pinned,
                kernels,
                ctx,
                compute,
                h2d,
                d2h,
                allocator,
            }),
        };
        reg.insert(ordinal, dev.clone());
        Ok(dev)
    }

    /// The device's name (e.g. "NVIDIA H200").
    pub fn name(&self) -> &str {
        &self.inner.attrs.name
    }

    /// What the device can do (SMs, shared memory limits, L2, ...), read once when it was
    /// opened.
    pub fn attributes(&self) -> &Arc<DeviceAttributes> {
        &self.inner.attrs
    }

    /// The device's pool of pinned host buffers (staging for copies; see [`crate::pinned`]).
    pub fn pinned(&self) -> &PinnedPool {
        &self.inner.pinned
    }

    /// Compute capability `(major, minor)`: `(9, 0)` on the H200.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.inner.attrs.compute_capability
    }

    /// The compile target of this device (`sm_90` on the H200).
    pub fn arch(&self) -> Arch {
        self.inner.attrs.arch()
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> usize {
        self.inner.attrs.total_memory
    }

    /// Free device memory in bytes, as the driver reports it now.
    pub fn free_memory(&self) -> Result<usize> {
        Ok(self.inner.ctx.mem_get_info().ctx("reading free memory")?.0)
    }

    /// Number of streaming multiprocessors (132 on the H200).
    pub fn multiprocessor_count(&self) -> u32 {
        self.inner.attrs.multiprocessor_count
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.attrs.ordinal
    }

    /// The CUDA context (the device's primary context).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// The thread's current stream on this device: the innermost
    /// [`with_stream`](Self::with_stream) scope's, else the device's compute stream.
    pub fn stream(&self) -> Stream {
        stream::scoped(self.inner.ctx.cu_ctx() as usize)
            .unwrap_or_else(|| self.inner.compute.clone())
    }

    /// The device's own compute stream (the default current stream).
    pub fn compute_stream(&self) -> &Stream {
        &self.inner.compute
    }

    /// How host threads wait for this device's work (`cuCtxSetFlags`' scheduling flags on
    /// the device's context; every later wait of the process on it, and of libraries sharing
    /// the primary context, follows it). The driver's default (`Auto`) spins while the process
    /// has fewer contexts than cores: the lowest latency, but a spinning wait holds a core,
    /// and beside a CPU library whose threads fill every core (OpenBLAS, MKL) one held core
    /// slows each of the library's parallel regions to the pace of its descheduled thread.
    /// Needs a CUDA 12.1 or later driver (`cuCtxSetFlags`); older ones get
    /// [`Error::InvalidArgument`] and keep their flags.
    pub fn set_host_wait(&self, wait: HostWait) -> Result<()> {
        let v = gpukit_jit::libs::driver_version();
        if v < CTX_SET_FLAGS_DRIVER {
            return Err(Error::InvalidArgument {
                op: "Device::set_host_wait".into(),
                reason: format!(
                    "setting how host threads wait needs a CUDA 12.1 or later driver \
                     (cuCtxSetFlags); this driver reports version {v}"
                ),
            });
        }
        self.inner.ctx.bind_to_thread().ctx("binding the context")?;
        let sched = match wait {
            HostWait::Auto => sys::CUctx_flags::CU_CTX_SCHED_AUTO,
            HostWait::Spin => sys::CUctx_flags::CU_CTX_SCHED_SPIN,
            HostWait::Yield => sys::CUctx_flags::CU_CTX_SCHED_YIELD,
            HostWait::Block => sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC,
        } as u32;
        let mut now: u32 = 0;
        // SAFETY: the device's context is current on this thread (bound above); the call
        // writes one unsigned int into `now`, which outlives it; cuCtxGetFlags exists in
        // every driver cudarc binds (CUDA 7 and later).
        unsafe { sys::cuCtxGetFlags(&mut now) }
            .result()
            .ctx("reading the context's flags (cuCtxGetFlags)")?;
        let mask = sys::CUctx_flags::CU_CTX_SCHED_MASK as u32;
        // cuCtxSetFlags replaces every flag: only the scheduling bits change. The driver has
        // it (version checked above), so cudarc's lazy symbol lookup cannot panic.
        // SAFETY: the context is current on this thread; the flags are the context's own with
        // the scheduling bits replaced by one valid scheduling flag.
        unsafe { sys::cuCtxSetFlags((now & !mask) | sched) }
            .result()
            .ctx("setting how host threads wait for the GPU (cuCtxSetFlags)")
    }

    /// `(lowest, highest)` priority: numerically, lowest >= highest (0 and -5 on the H200).
    pub fn stream_priority_range(&self) -> (i32, i32) {
        self.inner.priority_range
    }

    /// A new non-blocking stream; `priority` is clamped to
    /// [`stream_priority_range`](Self::stream_priority_range).
    pub fn new_stream(&self, priority: i32) -> Result<Stream> {
        let (least, greatest) = self.inner.priority_range;
        let p = priority.clamp(greatest, least);
        let s = self
            .inner
            .ctx
            .new_stream_with_priority(p)
            .ctx("creating a stream")?;
        Ok(Stream::with_priority(s, p))
    }

    /// Runs `f` with `s` as this thread's current stream of this device: gpukit-core operations
    /// inside `f` queue their work on `s`. Scopes nest; the previous stream is restored when `f`
    /// returns or panics. A stream of another device is ignored by this device's operations.
    pub fn with_stream<R>(&self, s: &Stream, f: impl FnOnce() -> R) -> R {
        stream::with_scope(s, f)
    }

    /// The device's caching allocator.
    pub fn allocator(&self) -> &Allocator {
        &self.inner.allocator
    }

    /// Compiles (through gpukit-jit's cache) and loads `source`, returning kernel `name`. The
    /// module is kept in the device's [`KernelSet`] under its content-hashed key.
    pub fn load_kernel(
        &self,
        source: &str,
        program: &str,
        opts: &CompileOptions,
        name: &str,
    ) -> Result<Kernel> {
        let module = self.inner.kernels.load_source(source, program, opts)?;
        Ok(module.kernel(name)?)
    }

    /// The device's loaded kernels (gpukit-jit's [`KernelSet`]: one per device, shared by the
    /// built-in operations, GEMM and user kernels).
    pub fn kernel_set(&self) -> &'static KernelSet {
        self.inner.kernels
    }

    /// Blocks until all work on the device has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.ctx.synchronize().ctx("synchronizing the device")
    }

    pub(crate) fn inner(&self) -> &DeviceInner {
        &self.inner
    }
}

impl crate::alloc::DeviceBuffer {
    /// Wraps `bytes` bytes of device memory at `ptr` that another library owns (a DLPack
    /// capsule's tensor, an object with `__cuda_array_interface__`): gpukit never frees it and
    /// charges it to no owner or quota. `keep_alive` (the owner's handle: a capsule, a tensor
    /// reference) is released when the buffer is dropped, after the host has waited for the
    /// work queued on the memory through gpukit (an event on every stream that used it); should
    /// that wait fail, `keep_alive` is leaked instead, so the memory is never returned to its
    /// owner while gpukit's work may use it.
    ///
    /// The buffer starts out used on the thread's current stream of `dev`: order it after the
    /// foreign producer first ([`Stream::wait_raw_stream`]), and make a foreign consumer wait
    /// for gpukit's work ([`GpuArray::make_ready_on_raw`](crate::GpuArray::make_ready_on_raw)).
    /// Foreign buffers of a device share one stream order (they may overlap each other).
    /// Views: [`GpuArray::from_buffer`](crate::GpuArray::from_buffer).
    ///
    /// Checked here: the address range does not wrap, a non-empty buffer has a non-null address
    /// that the driver knows as memory of `dev`, lying inside one allocation where the driver
    /// reports the allocation's range.
    ///
    /// # Safety
    /// While `keep_alive` lives, `[ptr, ptr + bytes)` must stay allocated device memory usable
    /// from `dev`'s primary context (device memory of `dev`, or memory mapped for it), and must
    /// not be freed or reused by its owner. Work of other libraries on the memory must be
    /// ordered with gpukit's through the stream handshakes above (or host synchronisation).
    pub unsafe fn from_foreign(
        dev: &Device,
        ptr: u64,
        bytes: usize,
        keep_alive: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<crate::alloc::DeviceBuffer> {
        let invalid = |reason: String| Error::invalid("DeviceBuffer::from_foreign", reason);
        if ptr.checked_add(bytes as u64).is_none() {
            return Err(invalid(format!(
                "{bytes} bytes at {ptr:#x} pass the end of the address space"
            )));
        }
        if bytes > 0 {
            if ptr == 0 {
                return Err(invalid(format!("a null pointer for {bytes} bytes")));
            }
            check_foreign_range(dev, ptr, bytes)?;
        }
        let stream = dev.stream();
        // SAFETY: forwarded from the caller; the range was checked above.
        Ok(unsafe {
            dev.allocator()
                .wrap_foreign(ptr, bytes, keep_alive, &stream)
        })
    }
}

/// Checks with the driver that `[ptr, ptr + bytes)` is memory of `dev` inside one allocation.
fn check_foreign_range(dev: &Device, ptr: u64, bytes: usize) -> Result<()> {
    use cudarc::driver::sys::{self, CUpointer_attribute as A};
    dev.context().bind_to_thread().ctx("binding the context")?;
    let invalid = |reason: String| Error::invalid("DeviceBuffer::from_foreign", reason);
    let mut ordinal: std::ffi::c_int = -1;
    // SAFETY: the out-pointer holds the int this attribute writes; any address may be queried.
    let status = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut std::ffi::c_int).cast(),
            A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(invalid(format!(
            "{ptr:#x} is not memory the CUDA driver knows ({status:?}); pass a device pointer"
        )));
    }
    if ordinal as usize != dev.ordinal() {
        return Err(invalid(format!(
            "{ptr:#x} is memory of device {ordinal}, not of device {}",
            dev.ordinal()
        )));
    }
    let (mut start, mut size): (u64, usize) = (0, 0);
    // SAFETY: as above, with the u64 / size_t these attributes write.
    let ranged = unsafe {
        sys::cuPointerGetAttribute(
            (&mut start as *mut u64).cast(),
            A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            ptr,
        ) == sys::CUresult::CUDA_SUCCESS
            && sys::cuPointerGetAttribute(
                (&mut size as *mut usize).cast(),
                A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                ptr,
            ) == sys::CUresult::CUDA_SUCCESS
    };
    if ranged && size > 0 && (ptr < start || ptr - start + bytes as u64 > size as u64) {
        return Err(invalid(format!(
            "{bytes} bytes at {ptr:#x} pass the end of their allocation ({size} bytes at \
             {start:#x})"
        )));
    }
    Ok(())
}
