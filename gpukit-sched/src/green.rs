//! A safe wrapper over the driver's green contexts: split the device's SMs **once** into
//! equal groups, then build green contexts (and their streams) over any set of those groups.
//!
//! Every raw call is checked; handles are destroyed in order (streams, then the green
//! context) by their owners' `Drop`. Streams are handed out as cudarc streams wrapped with the
//! device's *primary* context, so gpukit-core's `Device::with_stream` scopes accept them and
//! core operations queue onto them; kernels launched on them run on the green context's SMs.
//!
//! ```no_run
//! use gpukit_sched::green::{probe, SmSplit};
//! let dev = gpukit_core::Device::open(0)?;
//! let support = probe(&dev);
//! println!("{support:?}");
//! let split = SmSplit::new(&dev, None)?;            // 132 SMs -> 16 groups of 8 + 4
//! let ctx = split.create(gpukit_sched::GroupSet::first(4), false)?; // 32 SMs
//! let stream = ctx.create_stream(0)?;
//! assert_eq!(ctx.sms(), 32);
//! # Ok::<(), gpukit_sched::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::sm::{GroupSet, SmLayout};
use cudarc::driver::{sys, CudaContext, CudaStream, DriverError};
use std::sync::Arc;

fn check(call: &'static str, action: impl Into<String>, status: sys::CUresult) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver {
            call,
            action: action.into(),
            source: DriverError(status),
        })
    }
}

/// The oldest driver (CUDA 12.4) that has the green-context entry points cudarc binds.
pub const MIN_DRIVER_VERSION: i32 = 12040;

/// Whether green contexts work here, and the device's SM resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GreenSupport {
    /// Whether green contexts can be used.
    pub available: bool,
    /// Why not, or a short description of what was found.
    pub reason: String,
    /// `cuDriverGetVersion` (13000 for CUDA 13.0).
    pub driver_version: i32,
    /// SMs on the device.
    pub total_sms: u32,
    /// The smallest partition the driver allows.
    pub min_partition: u32,
    /// Partition alignment.
    pub alignment: u32,
}

fn driver_version() -> Result<i32> {
    let mut v = 0i32;
    // SAFETY: the driver library is loaded (the caller holds a Device); v is a valid out-ptr.
    check("cuDriverGetVersion", "reading the driver version", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    Ok(v)
}

fn sm_resource(device: sys::CUdevice) -> Result<sys::CUdevResource> {
    // SAFETY: CUdevResource is plain data (an enum tag, padding and a union of plain structs);
    // all-zero is a valid (INVALID-typed) value that the driver overwrites.
    let mut res: sys::CUdevResource = unsafe { std::mem::zeroed() };
    // SAFETY: `device` came from a live context; `res` is a valid out-pointer. Only called
    // after the driver version was checked to have this entry point.
    let status = unsafe {
        sys::cuDeviceGetDevResource(
            device,
            &mut res,
            sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
        )
    };
    check(
        "cuDeviceGetDevResource",
        "reading the device's SM resource",
        status,
    )?;
    Ok(res)
}

fn sm_fields(res: &sys::CUdevResource) -> (u32, u32, u32) {
    // SAFETY: the resource was filled by the driver with type SM, so the `sm` member of the
    // union is the initialised one.
    let sm = unsafe { res.__bindgen_anon_1.sm };
    (sm.smCount, sm.minSmPartitionSize, sm.smCoscheduledAlignment)
}

/// Detects green-context support on `dev` (never panics: entry points are only called when
/// the driver is new enough to have them).
pub fn probe(dev: &gpukit_core::Device) -> GreenSupport {
    let total = dev.multiprocessor_count();
    let mut s = GreenSupport {
        available: false,
        reason: String::new(),
        driver_version: 0,
        total_sms: total,
        min_partition: 0,
        alignment: 0,
    };
    match driver_version() {
        Ok(v) => s.driver_version = v,
        Err(e) => {
            s.reason = e.to_string();
            return s;
        }
    }
    if s.driver_version < MIN_DRIVER_VERSION {
        s.reason = format!(
            "driver reports CUDA {}.{}; green contexts need 12.4 or newer",
            s.driver_version / 1000,
            s.driver_version % 1000 / 10
        );
        return s;
    }
    match sm_resource(dev.context().cu_device()) {
        Ok(r) => {
            let (count, min, align) = sm_fields(&r);
            s.total_sms = count;
            s.min_partition = min;
            s.alignment = align;
            s.available = count >= min.max(1);
            s.reason = format!("{count} SMs, minimum partition {min}, alignment {align}");
        }
        Err(e) => s.reason = format!("no SM resource: {e}"),
    }
    s
}

/// The device's SMs split once into equal groups (plus a remainder).
pub struct SmSplit {
    primary: Arc<CudaContext>,
    device: sys::CUdevice,
    groups: Vec<sys::CUdevResource>,
    remainder: Option<sys::CUdevResource>,
    layout: SmLayout,
}

// SAFETY: CUdevResource values are plain data describing SM sets (no pointers in the CUDA 13.0
// layout); the driver reads them only during calls we make under &self.
unsafe impl Send for SmSplit {}
// SAFETY: as above; nothing is mutated after construction.
unsafe impl Sync for SmSplit {}

impl std::fmt::Debug for SmSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmSplit")
            .field("layout", &self.layout)
            .finish()
    }
}

impl SmSplit {
    /// Splits `dev`'s SMs into groups of `group_size` SMs (default: the driver's minimum
    /// partition size, 8 on Hopper) with `cuDevSmResourceSplitByCount`.
    pub fn new(dev: &gpukit_core::Device, group_size: Option<u32>) -> Result<SmSplit> {
        let support = probe(dev);
        if !support.available {
            return Err(Error::invalid(
                "green contexts",
                "unavailable",
                support.reason,
            ));
        }
        let primary = dev.context().clone();
        primary.bind_to_thread().map_err(|e| Error::Driver {
            call: "cuCtxSetCurrent",
            action: "binding the primary context".into(),
            source: e,
        })?;
        let device = primary.cu_device();
        let input = sm_resource(device)?;
        let min = support.min_partition.max(1);
        let size = group_size.unwrap_or(min);
        if size < min || !size.is_multiple_of(support.alignment.max(1)) {
            return Err(Error::invalid(
                "SM group size",
                size,
                format!(
                    "must be a multiple of {} and at least {min}",
                    support.alignment
                ),
            ));
        }
        let max_groups = (support.total_sms / size).max(1);
        // SAFETY: plain data, overwritten by the driver.
        let mut groups: Vec<sys::CUdevResource> =
            vec![unsafe { std::mem::zeroed() }; max_groups as usize];
        // SAFETY: as above.
        let mut remainder: sys::CUdevResource = unsafe { std::mem::zeroed() };
        let mut n = max_groups;
        // SAFETY: `groups` has room for `n` results; `input` came from cuDeviceGetDevResource;
        // `remainder` is a valid out-pointer; flags 0.
        let status = unsafe {
            sys::cuDevSmResourceSplitByCount(
                groups.as_mut_ptr(),
                &mut n,
                &input,
                &mut remainder,
                0,
                size,
            )
        };
        check(
            "cuDevSmResourceSplitByCount",
            format!("splitting {} SMs into groups of {size}", support.total_sms),
            status,
        )?;
        groups.truncate(n as usize);
        let got = groups.first().map(|g| sm_fields(g).0).unwrap_or(0);
        if n == 0 || groups.iter().any(|g| sm_fields(g).0 != got) {
            return Err(Error::invalid(
                "SM split",
                format!("{n} groups"),
                "the driver returned no groups or groups of unequal size",
            ));
        }
        let rem_sms = if remainder.type_ == sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM {
            sm_fields(&remainder).0
        } else {
            0
        };
        let layout = SmLayout {
            total_sms: got * n + rem_sms,
            group_size: got,
            groups: n.min(64),
            remainder_sms: rem_sms,
            green: true,
        };
        groups.truncate(64);
        Ok(SmSplit {
            primary,
            device,
            groups,
            remainder: (rem_sms > 0).then_some(remainder),
            layout,
        })
    }

    /// The split's layout.
    pub fn layout(&self) -> SmLayout {
        self.layout
    }

    /// Whether there are SMs in no group.
    pub fn has_remainder(&self) -> bool {
        self.remainder.is_some()
    }

    /// A green context over `groups` (and the remainder SMs when `with_remainder`).
    pub fn create(&self, groups: GroupSet, with_remainder: bool) -> Result<GreenContext> {
        let mut res: Vec<sys::CUdevResource> = groups
            .indices()
            .filter_map(|i| self.groups.get(i as usize).copied())
            .collect();
        if res.len() != groups.len() as usize {
            return Err(Error::invalid(
                "group set",
                groups,
                format!("the split has {} groups", self.groups.len()),
            ));
        }
        if with_remainder {
            match self.remainder {
                Some(r) => res.push(r),
                None => {
                    return Err(Error::invalid(
                        "green context",
                        "remainder",
                        "this split has no remainder SMs",
                    ))
                }
            }
        }
        if res.is_empty() {
            return Err(Error::invalid(
                "green context",
                groups,
                "needs at least one SM group",
            ));
        }
        let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
        // SAFETY: `res` holds resources from one split instance (as the driver requires for
        // combining); the out-pointer is valid.
        let status = unsafe {
            sys::cuDevResourceGenerateDesc(&mut desc, res.as_mut_ptr(), res.len() as u32)
        };
        check(
            "cuDevResourceGenerateDesc",
            format!("describing groups {groups}"),
            status,
        )?;
        let mut handle: sys::CUgreenCtx = std::ptr::null_mut();
        // SAFETY: `desc` was just generated for this device; flags CU_GREEN_CTX_DEFAULT_STREAM
        // is one of the documented values.
        let status = unsafe {
            sys::cuGreenCtxCreate(
                &mut handle,
                desc,
                self.device,
                sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
            )
        };
        check(
            "cuGreenCtxCreate",
            format!("creating a green context over groups {groups}"),
            status,
        )?;
        // Owned from here on: destroyed by GreenInner's drop on any early return.
        let mut inner = GreenInner {
            handle,
            cu_ctx: std::ptr::null_mut(),
        };
        // SAFETY: `inner.handle` is a live green context; valid out-pointer.
        let status = unsafe { sys::cuCtxFromGreenCtx(&mut inner.cu_ctx, inner.handle) };
        check("cuCtxFromGreenCtx", "converting the green context", status)?;
        let inner = Arc::new(inner);
        // SAFETY: plain data, overwritten by the driver.
        let mut got: sys::CUdevResource = unsafe { std::mem::zeroed() };
        // SAFETY: live green context; valid out-pointer.
        let status = unsafe {
            sys::cuGreenCtxGetDevResource(
                inner.handle,
                &mut got,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
            )
        };
        check(
            "cuGreenCtxGetDevResource",
            "reading the green context's SMs",
            status,
        )?;
        let sms = sm_fields(&got).0;
        Ok(GreenContext {
            inner,
            primary: self.primary.clone(),
            groups,
            with_remainder,
            sms,
        })
    }
}

struct GreenInner {
    handle: sys::CUgreenCtx,
    cu_ctx: sys::CUcontext,
}

// SAFETY: green-context handles are process-wide driver objects; we never make one current on
// two threads through this type (launches go to its streams, which are thread-safe).
unsafe impl Send for GreenInner {}
// SAFETY: as above.
unsafe impl Sync for GreenInner {}

impl Drop for GreenInner {
    fn drop(&mut self) {
        if self.handle.is_null() {
            return;
        }
        // SAFETY: the handle came from cuGreenCtxCreate and is destroyed exactly once, after
        // every GreenStream (each holds an Arc to this) has destroyed its stream.
        unsafe {
            sys::cuGreenCtxDestroy(self.handle);
        }
    }
}

/// A green context over a set of SM groups. Its streams keep it alive.
pub struct GreenContext {
    inner: Arc<GreenInner>,
    primary: Arc<CudaContext>,
    groups: GroupSet,
    with_remainder: bool,
    sms: u32,
}

impl std::fmt::Debug for GreenContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GreenContext")
            .field("groups", &self.groups)
            .field("with_remainder", &self.with_remainder)
            .field("sms", &self.sms)
            .finish()
    }
}

impl GreenContext {
    /// SMs in the context, as the driver reports them.
    pub fn sms(&self) -> u32 {
        self.sms
    }
    /// Its groups.
    pub fn groups(&self) -> GroupSet {
        self.groups
    }
    /// Whether it includes the remainder SMs.
    pub fn with_remainder(&self) -> bool {
        self.with_remainder
    }
    /// The `CUcontext` handle representing it (for raw driver calls).
    pub fn cu_ctx(&self) -> sys::CUcontext {
        self.inner.cu_ctx
    }

    /// Makes it current on this thread (raw launches and event creation need that).
    pub fn make_current(&self) -> Result<()> {
        make_current(self.inner.cu_ctx)
    }

    /// Makes the context `ctx` (from [`GreenStream::cu_ctx`]) current on this thread.
    pub fn make_current_raw(ctx: sys::CUcontext) -> Result<()> {
        make_current(ctx)
    }

    /// A new non-blocking stream of this green context with `priority` (lower runs first).
    pub fn create_stream(&self, priority: i32) -> Result<GreenStream> {
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: live green context; the flags must be CU_STREAM_NON_BLOCKING (documented).
        let status = unsafe {
            sys::cuGreenCtxStreamCreate(
                &mut raw,
                self.inner.handle,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                priority,
            )
        };
        check(
            "cuGreenCtxStreamCreate",
            "creating a green-context stream",
            status,
        )?;
        // SAFETY: `raw` is a live stream; the wrapper does not own it (GreenStream destroys it
        // after the wrapper's users are gone, see GreenStream's docs).
        let cuda = unsafe { self.primary.wrap_borrowed_stream(raw) };
        Ok(GreenStream {
            raw,
            cuda,
            green: self.inner.clone(),
        })
    }

    /// A timing event created in this green context.
    pub fn create_event(&self) -> Result<GreenEvent> {
        self.make_current()?;
        let mut ev: sys::CUevent = std::ptr::null_mut();
        // SAFETY: this green context is current; valid out-pointer; CU_EVENT_DEFAULT times.
        let status =
            unsafe { sys::cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DEFAULT as u32) };
        check(
            "cuEventCreate",
            "creating an event in a green context",
            status,
        )?;
        Ok(GreenEvent {
            raw: ev,
            _green: Some(self.inner.clone()),
        })
    }
}

pub(crate) fn make_current(ctx: sys::CUcontext) -> Result<()> {
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuCtxGetCurrent", "reading the current context", unsafe {
        sys::cuCtxGetCurrent(&mut cur)
    })?;
    if cur != ctx {
        // SAFETY: `ctx` is a live context handle (a green context held by the caller).
        let status = unsafe { sys::cuCtxSetCurrent(ctx) };
        check("cuCtxSetCurrent", "making a green context current", status)?;
    }
    Ok(())
}

/// A stream of a green context. Work queued on it runs on the green context's SMs.
///
/// The raw stream is destroyed on drop (after synchronizing). The [`cuda`](Self::cuda) wrapper
/// does not own it: clones of the wrapper must not be used after the `GreenStream` is dropped.
pub struct GreenStream {
    raw: sys::CUstream,
    cuda: Arc<CudaStream>,
    green: Arc<GreenInner>,
}

// SAFETY: CUDA streams may be used from any thread; the green context is kept alive.
unsafe impl Send for GreenStream {}
// SAFETY: as above.
unsafe impl Sync for GreenStream {}

impl std::fmt::Debug for GreenStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GreenStream({:p})", self.raw)
    }
}

impl GreenStream {
    /// The raw handle.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }
    /// A cudarc wrapper (whose context is the device's primary context, as gpukit-core's
    /// stream scopes expect).
    pub fn cuda(&self) -> &Arc<CudaStream> {
        &self.cuda
    }
    /// The green context's `CUcontext`.
    pub fn cu_ctx(&self) -> sys::CUcontext {
        self.green.cu_ctx
    }
    /// Blocks until the stream's work is done.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live stream.
        let status = unsafe { sys::cuStreamSynchronize(self.raw) };
        check(
            "cuStreamSynchronize",
            "synchronizing a green-context stream",
            status,
        )
    }
    /// Records `ev` on this stream.
    pub fn record(&self, ev: &GreenEvent) -> Result<()> {
        // SAFETY: live event and stream of the same device.
        check("cuEventRecord", "recording an event", unsafe {
            sys::cuEventRecord(ev.raw, self.raw)
        })
    }
    /// Makes this stream wait for `ev`.
    pub fn wait(&self, ev: &GreenEvent) -> Result<()> {
        // SAFETY: live event and stream.
        check("cuStreamWaitEvent", "ordering streams", unsafe {
            sys::cuStreamWaitEvent(self.raw, ev.raw, 0)
        })
    }
}

impl Drop for GreenStream {
    fn drop(&mut self) {
        // SAFETY: `raw` came from cuGreenCtxStreamCreate and is destroyed exactly once, while the
        // green context (held through `green`) is still alive; pending work is waited for first.
        unsafe {
            sys::cuStreamSynchronize(self.raw);
            sys::cuStreamDestroy_v2(self.raw);
        }
    }
}

/// A timing event of a green context (or of any context, see [`GreenEvent::in_context`]).
pub struct GreenEvent {
    raw: sys::CUevent,
    _green: Option<Arc<GreenInner>>,
}

// SAFETY: CUDA events may be used from any thread.
unsafe impl Send for GreenEvent {}
// SAFETY: as above.
unsafe impl Sync for GreenEvent {}

impl GreenEvent {
    /// A timing event created in `ctx` (for example the primary context), which the caller
    /// keeps alive for the event's lifetime.
    pub fn in_context(ctx: sys::CUcontext) -> Result<GreenEvent> {
        make_current(ctx)?;
        let mut ev: sys::CUevent = std::ptr::null_mut();
        // SAFETY: `ctx` is current; valid out-pointer; CU_EVENT_DEFAULT times.
        check("cuEventCreate", "creating an event", unsafe {
            sys::cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DEFAULT as u32)
        })?;
        Ok(GreenEvent {
            raw: ev,
            _green: None,
        })
    }

    /// Records it on a raw stream of the same device.
    pub(crate) fn record_on(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: live event; the caller passes a live stream.
        check("cuEventRecord", "recording an event", unsafe {
            sys::cuEventRecord(self.raw, stream)
        })
    }

    /// Makes the raw `stream` wait for this event.
    pub(crate) fn wait_on(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: live event; the caller passes a live stream.
        check("cuStreamWaitEvent", "ordering streams", unsafe {
            sys::cuStreamWaitEvent(stream, self.raw, 0)
        })
    }

    /// The raw handle.
    pub fn raw(&self) -> sys::CUevent {
        self.raw
    }
    /// Whether the work before it has completed.
    pub fn is_complete(&self) -> Result<bool> {
        // SAFETY: live event.
        let s = unsafe { sys::cuEventQuery(self.raw) };
        match s {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => check("cuEventQuery", "querying an event", e).map(|_| false),
        }
    }
    /// Blocks until it has completed.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: live event.
        check("cuEventSynchronize", "waiting for an event", unsafe {
            sys::cuEventSynchronize(self.raw)
        })
    }
    /// Milliseconds from this event to `later` (both recorded and completed).
    pub fn elapsed_ms(&self, later: &GreenEvent) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: live timing events; valid out-pointer.
        check("cuEventElapsedTime", "timing", unsafe {
            sys::cuEventElapsedTime_v2(&mut ms, self.raw, later.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for GreenEvent {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate, destroyed exactly once (the driver defers the
        // release of a recorded, not yet completed event).
        unsafe {
            sys::cuEventDestroy_v2(self.raw);
        }
    }
}
