//! Streams and events, the thread's current stream, and handshakes with streams of other
//! libraries.
//!
//! This module sits at the bottom of gpukit-core's runtime: the allocator, the pinned pool, the
//! transfers and [`Device`](crate::Device) build on it, and it builds on nothing of theirs.
//!
//! - [`Stream`] and [`Event`]: cheap-to-clone handles with ordering helpers
//!   ([`Stream::wait_stream`]).
//! - The current stream: [`Device::with_stream`](crate::Device::with_stream) pushes a scope
//!   (`with_scope`), and the device and its allocator read the innermost scope of their
//!   context (`scoped`).
//! - Foreign streams (DLPack's `stream` argument, the CUDA array interface's `stream` key): a
//!   stream handle given as an integer ([`ForeignStream`]), ordered against ours with
//!   [`Stream::wait_raw_stream`] and [`GpuArray::make_ready_on_raw`](crate::GpuArray::make_ready_on_raw).

use crate::error::{DriverContext, Error, Result};
use cudarc::driver::{sys, CudaEvent, CudaStream};
use std::cell::RefCell;
use std::sync::Arc;

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
    /// A stream with a known priority (made by the device).
    pub(crate) fn with_priority(inner: Arc<CudaStream>, priority: i32) -> Stream {
        Stream { inner, priority }
    }

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

    /// The stream's handle (`CUstream`) as an integer, for libraries that exchange streams as
    /// integers (DLPack's `stream` argument, the CUDA array interface's `stream` key). Valid
    /// while this stream (or a clone) is alive.
    pub fn raw(&self) -> u64 {
        self.inner.cu_stream() as u64
    }

    /// How many clones of this stream (and of its cudarc stream) exist.
    pub(crate) fn holders(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// A key identifying the stream (its handle).
    pub(crate) fn key(&self) -> u64 {
        self.inner.cu_stream() as u64
    }

    /// The context handle of the stream, as an integer (the key of its [`with_scope`] scopes).
    pub(crate) fn context_key(&self) -> usize {
        self.inner.context().cu_ctx() as usize
    }

    fn bind(&self) -> Result<()> {
        self.inner
            .context()
            .bind_to_thread()
            .ctx("binding the context")
    }

    /// Blocks until all work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.synchronize().ctx("synchronizing a stream")
    }

    /// Whether all work queued on the stream so far has finished (`cuStreamQuery`: never
    /// waits). `Err` carries a sticky error of the stream's context.
    pub fn is_idle(&self) -> Result<bool> {
        // SAFETY: the stream is live (the Arc keeps it); the query only reads its state.
        match unsafe { sys::cuStreamQuery(self.inner.cu_stream()) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(Error::driver(
                "querying a stream",
                cudarc::driver::DriverError(e),
            )),
        }
    }

    /// Records a timing event (CU_EVENT_DEFAULT) at the current end of the stream.
    pub fn record(&self) -> Result<Event> {
        self.record_with(sys::CUevent_flags::CU_EVENT_DEFAULT)
    }

    /// Records an ordering-only event (no timing: cheaper) at the current end of the stream,
    /// e.g. for [`PinnedBuffer::set_ready`](crate::pinned::PinnedBuffer::set_ready).
    pub fn record_marker(&self) -> Result<Event> {
        self.record_with(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
    }

    fn record_with(&self, flags: sys::CUevent_flags) -> Result<Event> {
        let ev = self
            .inner
            .context()
            .new_event(Some(flags))
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

    /// Orders this stream after `other` as [`wait_stream`](Self::wait_stream) does; should the
    /// driver refuse the event (no resources), blocks until `other` has finished instead. Only
    /// when both fail, which leaves the context with a sticky error under which no later work
    /// runs, does it return without ordering.
    pub(crate) fn order_after(&self, other: &Stream) {
        if self.wait_stream(other).is_err() {
            let _ = other.synchronize();
        }
    }

    /// Makes future work on this stream wait for all work queued so far on the foreign stream
    /// `foreign` (an event is recorded there and waited on here; the host does not block).
    ///
    /// `foreign` is a `CUstream` as an integer, with the special values of DLPack and the CUDA
    /// array interface: `1` is the legacy default stream and `2` the per-thread default stream
    /// of the calling thread (both of this stream's device), and `0` is refused as ambiguous
    /// (DLPack does not allow it: it could mean either of them, or "no stream"). See
    /// [`ForeignStream`].
    ///
    /// # Safety
    /// `foreign`, unless 1 or 2, must be a live stream of a context of this stream's device,
    /// and must stay alive for the duration of the call.
    pub unsafe fn wait_raw_stream(&self, foreign: u64) -> Result<()> {
        let foreign = ForeignStream::from_raw(foreign)?;
        self.bind()?;
        if foreign.handle() == self.inner.cu_stream() {
            return Ok(());
        }
        // The event must belong to the foreign stream's context (a stream of another context of
        // the device, e.g. a green context, cannot record an event of ours).
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the handle is a live stream of this device (the caller's contract) or one of
        // the special handles, which name the current context's default streams (ours: bound
        // above); `ctx` is a valid out-pointer.
        unsafe { sys::cuStreamGetCtx(foreign.handle(), &mut ctx) }
            .result()
            .ctx("reading the context of a foreign stream")?;
        let pushed = ctx != self.inner.context().cu_ctx();
        if pushed {
            // SAFETY: `ctx` is the live context of a live stream; it is popped below.
            unsafe { sys::cuCtxPushCurrent_v2(ctx) }
                .result()
                .ctx("making a foreign stream's context current")?;
        }
        let recorded = (|| -> Result<sys::CUevent> {
            let mut ev: sys::CUevent = std::ptr::null_mut();
            // SAFETY: the foreign stream's context is current; `ev` is a valid out-pointer.
            unsafe {
                sys::cuEventCreate(
                    &mut ev,
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as std::ffi::c_uint,
                )
            }
            .result()
            .ctx("creating an event")?;
            // SAFETY: `ev` and the foreign stream belong to the current context.
            if let Err(e) = unsafe { sys::cuEventRecord(ev, foreign.handle()) }.result() {
                // SAFETY: `ev` was created above and is destroyed exactly once.
                unsafe { sys::cuEventDestroy_v2(ev) };
                return Err(Error::driver("recording an event on a foreign stream", e));
            }
            Ok(ev)
        })();
        if pushed {
            let mut old: sys::CUcontext = std::ptr::null_mut();
            // SAFETY: pops the context pushed above.
            unsafe { sys::cuCtxPopCurrent_v2(&mut old) };
        }
        let ev = recorded?;
        // SAFETY: our stream is live (we hold it); an event of another context of the same
        // device may be waited on; destroying the event right after is allowed (the driver
        // releases it once the wait is resolved).
        let waited = unsafe { sys::cuStreamWaitEvent(self.inner.cu_stream(), ev, 0) }.result();
        // SAFETY: `ev` was created above and is destroyed exactly once.
        unsafe { sys::cuEventDestroy_v2(ev) };
        waited.ctx("making a stream wait for a foreign stream")
    }

    /// Makes future work on the foreign stream `foreign` (see
    /// [`wait_raw_stream`](Self::wait_raw_stream) for the special values) wait for everything
    /// queued on this stream so far.
    ///
    /// # Safety
    /// As for [`wait_raw_stream`](Self::wait_raw_stream).
    pub unsafe fn make_raw_stream_wait(&self, foreign: u64) -> Result<()> {
        let foreign = ForeignStream::from_raw(foreign)?;
        self.bind()?;
        if foreign.handle() == self.inner.cu_stream() {
            return Ok(());
        }
        let ev = self.record_marker()?;
        // SAFETY: the foreign stream is live (the caller's contract) or a special handle of the
        // current context (ours, bound above); the event is live while `ev` is held.
        unsafe { sys::cuStreamWaitEvent(foreign.handle(), ev.inner.cu_event(), 0) }
            .result()
            .ctx("making a foreign stream wait for ours")
    }

    /// The stream's priority (lower numbers run first; see
    /// [`Device::stream_priority_range`](crate::Device::stream_priority_range)).
    pub fn priority(&self) -> i32 {
        self.priority
    }
}

/// A stream of another library, named by an integer as DLPack (`__dlpack__(stream=...)`) and
/// the CUDA array interface (`stream` key) do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignStream {
    /// `1`: the legacy default stream (`CU_STREAM_LEGACY`), which synchronises with every
    /// blocking stream of its context.
    Legacy,
    /// `2`: the per-thread default stream of the calling thread (`CU_STREAM_PER_THREAD`).
    PerThread,
    /// Any other value: a `CUstream` handle.
    Handle(u64),
}

impl ForeignStream {
    /// Reads DLPack's / the CUDA array interface's stream integer: 1 and 2 are the legacy and
    /// per-thread default streams, other values handles; 0 is refused, as DLPack and the CUDA
    /// array interface do (it could mean the legacy default stream, the per-thread default
    /// stream or no stream at all: pass 1 or 2, or skip the handshake for "no stream").
    pub fn from_raw(raw: u64) -> Result<ForeignStream> {
        match raw {
            0 => Err(Error::invalid(
                "foreign stream",
                "stream 0 is ambiguous and not allowed by DLPack or the CUDA array interface: \
                 pass 1 for the legacy default stream, 2 for the per-thread default stream, or a \
                 stream handle",
            )),
            1 => Ok(ForeignStream::Legacy),
            2 => Ok(ForeignStream::PerThread),
            h => Ok(ForeignStream::Handle(h)),
        }
    }

    /// The driver's handle (`cuda.h` defines `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` as
    /// the handles 1 and 2).
    pub fn handle(self) -> sys::CUstream {
        match self {
            ForeignStream::Legacy => 1usize as sys::CUstream,
            ForeignStream::PerThread => 2usize as sys::CUstream,
            ForeignStream::Handle(h) => h as usize as sys::CUstream,
        }
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
    /// Needs a driver of CUDA 12.8 or later (`cuEventElapsedTime_v2`, which the CUDA 13
    /// bindings call): an older driver gives [`Error::InvalidArgument`] saying so (cudarc would
    /// panic on the missing entry point).
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32> {
        let v = gpukit_jit::libs::driver_version();
        if v < EVENT_TIMING_DRIVER {
            return Err(Error::InvalidArgument {
                op: "Event::elapsed_ms".into(),
                reason: format!(
                    "event timing needs a CUDA 12.8 or later driver (cuEventElapsedTime_v2); \
                     this driver reports version {v}: update the NVIDIA driver"
                ),
            });
        }
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

/// The first driver version (`cuDriverGetVersion`) with `cuEventElapsedTime_v2`: CUDA 12.8.
pub(crate) const EVENT_TIMING_DRIVER: i32 = 12080;

thread_local! {
    /// The stream scopes of this thread: (context handle, stream), innermost last.
    static SCOPES: RefCell<Vec<(usize, Stream)>> = const { RefCell::new(Vec::new()) };
}

/// The innermost [`with_scope`] stream of this thread for the context `ctx_key` (its handle as
/// an integer), if any.
pub(crate) fn scoped(ctx_key: usize) -> Option<Stream> {
    SCOPES.with(|s| {
        s.borrow()
            .iter()
            .rev()
            .find(|(k, _)| *k == ctx_key)
            .map(|(_, st)| st.clone())
    })
}

/// Runs `f` with `s` as this thread's current stream of its context (scopes nest; the previous
/// one is restored when `f` returns or panics).
pub(crate) fn with_scope<R>(s: &Stream, f: impl FnOnce() -> R) -> R {
    let key = s.context_key();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_stream_integers_follow_dlpack() {
        let e = ForeignStream::from_raw(0).unwrap_err().to_string();
        assert!(
            e.contains("ambiguous") && e.contains("1") && e.contains("2"),
            "{e}"
        );
        assert_eq!(ForeignStream::from_raw(1).unwrap(), ForeignStream::Legacy);
        assert_eq!(
            ForeignStream::from_raw(2).unwrap(),
            ForeignStream::PerThread
        );
        assert_eq!(
            ForeignStream::from_raw(0x5555_0000).unwrap(),
            ForeignStream::Handle(0x5555_0000)
        );
        // The driver's special handles are the same integers.
        assert_eq!(ForeignStream::Legacy.handle() as usize, 1);
        assert_eq!(ForeignStream::PerThread.handle() as usize, 2);
        assert_eq!(
            ForeignStream::Handle(0xdead_beef).handle() as usize,
            0xdead_beef
        );
    }
}
