//! Devices, streams and events.
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
use crate::transfer::Transfers;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use gpukit_jit::{Arch, CompileOptions, Kernel, KernelSet};
use parking_lot::Mutex;
use std::cell::RefCell;
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

/// A CUDA stream with its priority. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Stream {
    inner: Arc<CudaStream>,
    priority: i32,
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.inner.cu_stream() == other.inner.cu_stream()
    }
}
impl Eq for Stream {}

impl Stream {
    /// Wraps a cudarc stream (for example one made by another library or a green context).
    pub fn from_cuda(stream: Arc<CudaStream>) -> Stream {
        let mut priority = 0i32;
        // SAFETY: the stream is live (the Arc keeps it), and the out-pointer is valid; on
        // failure priority stays 0.
        let status = unsafe { sys::cuStreamGetPriority(stream.cu_stream(), &mut priority) };
        if status != sys::CUresult::CUDA_SUCCESS {
            priority = 0;
        }
        Stream {
            inner: stream,
            priority,
        }
    }

    /// Wraps a cudarc stream without asking the driver for its priority (recorded as 0): for
    /// identity and ordering only.
    pub(crate) fn wrap(stream: Arc<CudaStream>) -> Stream {
        Stream {
            inner: stream,
            priority: 0,
        }
    }

    /// The cudarc stream.
    pub fn cuda(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// How many clones of this stream (and of its cudarc stream) exist.
    pub(crate) fn holders(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// A key identifying the stream (its handle).
    pub(crate) fn key(&self) -> u64 {
        self.inner.cu_stream() as u64
    }

    /// Blocks until all work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize().ctx("synchronizing a stream")
    }

    /// Records a timing event (CU_EVENT_DEFAULT) at the current end of the stream.
    pub fn record(&self) -> Result<Event> {
        let ev = self
            .inner
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .ctx("creating an event")?;
        ev.record(&self.inner).ctx("recording an event")?;
        Ok(Event {
            inner: Arc::new(ev),
        })
    }

    /// Records an ordering-only event (no timing: cheaper) at the current end of the stream,
    /// e.g. for [`PinnedBuffer::set_ready`](crate::pinned::PinnedBuffer::set_ready).
    pub fn record_marker(&self) -> Result<Event> {
        let ev = self
            .inner
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .ctx("creating an event")?;
        ev.record(&self.inner).ctx("recording an event")?;
        Ok(Event {
            inner: Arc::new(ev),
        })
    }

    /// Makes future work on this stream wait for `event` (does not block the host).
    pub fn wait(&self, event: &Event) -> Result<()> {
        self.inner
            .wait(&event.inner)
            .ctx("making a stream wait for an event")
    }

    /// Orders this stream after everything queued on `other` so far.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        if self == other {
            return Ok(());
        }
        let ev = other.record_marker()?;
        self.wait(&ev)
    }

    /// The stream's priority (lower numbers run first; see [`Device::stream_priority_range`]).
    pub fn priority(&self) -> i32 {
        self.priority
    }
}

/// A CUDA event, for ordering and timing. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Event {
    inner: Arc<CudaEvent>,
}

impl Event {
    /// Milliseconds between this event and `later` (both must have completed or will be waited
    /// for). Both must be timing events (made by [`Stream::record`]).
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32> {
        self.inner
            .elapsed_ms(&later.inner)
            .ctx("reading the time between two events")
    }

    /// Blocks until the event has completed.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize().ctx("waiting for an event")
    }

    /// True when the work before the event has completed.
    pub fn is_complete(&self) -> Result<bool> {
        self.inner.try_is_complete().ctx("querying an event")
    }

    /// The cudarc event.
    pub fn cuda(&self) -> &CudaEvent {
        &self.inner
    }
}

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

thread_local! {
    /// The stream scopes of this thread: (context handle, stream), innermost last.
    static SCOPES: RefCell<Vec<(usize, Stream)>> = const { RefCell::new(Vec::new()) };
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
            Ok(Stream {
                inner: s,
                priority: p,
            })
        };
        let compute = mk(least)?;
        let h2d = mk(least)?;
        let d2h = mk(least)?;
        let allocator = Allocator::new(ctx.clone(), ordinal);
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
        let key = self.inner.ctx.cu_ctx() as usize;
        SCOPES
            .with(|s| {
                s.borrow()
                    .iter()
                    .rev()
                    .find(|(k, _)| *k == key)
                    .map(|(_, st)| st.clone())
            })
            .unwrap_or_else(|| self.inner.compute.clone())
    }

    /// The device's own compute stream (the default current stream).
    pub fn compute_stream(&self) -> &Stream {
        &self.inner.compute
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
        Ok(Stream {
            inner: s,
            priority: p,
        })
    }

    /// Runs `f` with `s` as this thread's current stream of this device: gpukit-core operations
    /// inside `f` queue their work on `s`. Scopes nest; the previous stream is restored when `f`
    /// returns or panics. A stream of another device is ignored by this device's operations.
    pub fn with_stream<R>(&self, s: &Stream, f: impl FnOnce() -> R) -> R {
        let key = s.inner.context().cu_ctx() as usize;
        SCOPES.with(|sc| sc.borrow_mut().push((key, s.clone())));
        struct Pop;
        impl Drop for Pop {
            fn drop(&mut self) {
                SCOPES.with(|sc| {
                    sc.borrow_mut().pop();
                });
            }
        }
        let _pop = Pop;
        f()
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
