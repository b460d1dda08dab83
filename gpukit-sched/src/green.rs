//! A safe wrapper over the driver's green contexts: split the device's SMs **once** into
//! equal groups, then build green contexts (and their streams) over any set of those groups.
//!
//! Every raw call is checked; handles are destroyed in order (streams, then the green
//! context) by their owners' `Drop`. Streams are handed out as cudarc streams wrapped with the
//! device's *primary* context, so gpukit-core's `Device::with_stream` scopes accept them and
//! core operations queue onto them; kernels launched on them run on the green context's SMs.
//!
//! Every entry point here is one that older drivers lack; callers pass the
//! [`EntryPoints`] found for the loaded driver, and nothing here is called unless it says green
//! contexts are there (cudarc would panic on a missing symbol).

use crate::entry::EntryPoints;
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

/// The SM resource of `device`.
///
/// # Safety
/// `device` must be the device of a live context of this process (the driver is initialised
/// for it), and the green-context entry points must exist in the loaded driver
/// ([`EntryPoints::green`] is `Ok`): cudarc panics on a missing symbol.
unsafe fn sm_resource(device: sys::CUdevice) -> Result<sys::CUdevResource> {
    // SAFETY: CUdevResource is plain data (an enum tag, padding and a union of plain structs);
    // all-zero is a valid (INVALID-typed) value that the driver overwrites.
    let mut res: sys::CUdevResource = unsafe { std::mem::zeroed() };
    // SAFETY: `device` is a live context's device and the entry point exists (the caller's
    // contract); `res` is a valid out-pointer.
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

/// Detects green-context support on `dev` (never panics: the entry points are only called
/// when `entry` found them in the driver).
pub fn probe(dev: &gpukit_core::Device, entry: &EntryPoints) -> GreenSupport {
    let total = dev.multiprocessor_count();
    let mut s = GreenSupport {
        available: false,
        reason: String::new(),
        driver_version: entry.driver_version,
        total_sms: total,
        min_partition: 0,
        alignment: 0,
    };
    if let Err(why) = &entry.green {
        s.reason = why.clone();
        return s;
    }
    // SAFETY: the device of the device's primary context (live while `dev` is); the entry
    // points exist (checked above).
    match unsafe { sm_resource(dev.context().cu_device()) } {
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

/// The device's SMs split once into equal groups plus a floor for BestEffort work: the SMs the
/// split leaves over, or, when it leaves none, its last group ([`SmLayout::with_floor`]).
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
    /// partition size, 8 on Hopper) with `cuDevSmResourceSplitByCount`, optionally ignoring
    /// the SMs the split leaves over (as on a GPU whose split has none: the last group becomes
    /// the floor). A group size the driver does not allow is [`Error::InvalidSpec`]; missing
    /// green contexts are [`Error::Unsupported`].
    pub fn new(
        dev: &gpukit_core::Device,
        group_size: Option<u32>,
        entry: &EntryPoints,
        ignore_remainder: bool,
    ) -> Result<SmSplit> {
        let support = probe(dev, entry);
        if !support.available {
            return Err(Error::Unsupported {
                what: "green contexts".into(),
                reason: support.reason,
            });
        }
        let primary = dev.context().clone();
        primary.bind_to_thread().map_err(|e| Error::Driver {
            call: "cuCtxSetCurrent",
            action: "binding the primary context".into(),
            source: e,
        })?;
        let device = primary.cu_device();
        // SAFETY: the primary context's device (bound above); the entry points exist
        // (`support.available` is only true when EntryPoints::green is Ok).
        let input = unsafe { sm_resource(device) }?;
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
            return Err(Error::Unsupported {
                what: "green contexts".into(),
                reason: format!(
                    "the driver split {} SMs into {n} groups of unequal size or none",
                    support.total_sms
                ),
            });
        }
        let mut rem_sms = if remainder.type_ == sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM
            && !ignore_remainder
        {
            sm_fields(&remainder).0
        } else {
            0
        };
        let total_sms = got * n + rem_sms;
        groups.truncate(64);
        let mut floor = (rem_sms > 0).then_some(remainder);
        if floor.is_none() && groups.len() >= 2 {
            // No SMs left over: the last group is the floor, so BestEffort work never runs
            // on SMs a task owns.
            floor = groups.pop();
            rem_sms = got;
        }
        let layout = SmLayout {
            total_sms,
            group_size: got,
            groups: groups.len() as u32,
            remainder_sms: rem_sms,
            green: true,
        };
        Ok(SmSplit {
            primary,
            device,
            groups,
            remainder: floor,
            layout,
        })
    }

    /// The split's layout.
    pub fn layout(&self) -> SmLayout {
        self.layout
    }

    /// Whether there is a floor (SMs in no task's group).
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
    /// The `CUcontext` handle representing it (for raw driver calls).
    pub fn cu_ctx(&self) -> sys::CUcontext {
        self.inner.cu_ctx
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
            _green: self.inner.clone(),
        })
    }
}

/// Makes `ctx` this thread's current context (no driver call when it already is).
///
/// # Safety
/// `ctx` must be a live context of this process (a green context or a primary context that
/// the caller keeps alive at least until it stops using it on this thread): a destroyed
/// handle made current is undefined behaviour in the driver.
pub(crate) unsafe fn make_current(ctx: sys::CUcontext) -> Result<()> {
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuCtxGetCurrent", "reading the current context", unsafe {
        sys::cuCtxGetCurrent(&mut cur)
    })?;
    if cur != ctx {
        // SAFETY: `ctx` is a live context (the caller's contract).
        let status = unsafe { sys::cuCtxSetCurrent(ctx) };
        check("cuCtxSetCurrent", "making a green context current", status)?;
    }
    Ok(())
}

/// A stream of a green context. Work queued on it runs on the green context's SMs.
///
/// The raw stream is destroyed on drop if its work has finished; otherwise it is leaked with
/// its green context (nothing waits for work that may never end). The [`cuda`](Self::cuda)
/// wrapper does not own it: clones of the wrapper must not be used after the `GreenStream` is
/// dropped.
pub struct GreenStream {
    raw: sys::CUstream,
    cuda: Arc<CudaStream>,
    /// Keeps the green context alive until the stream is destroyed.
    _green: Arc<GreenInner>,
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
    /// A cudarc wrapper (whose context is the device's primary context, as gpukit-core's
    /// stream scopes expect). It does not own the stream: see the type's docs.
    pub fn cuda(&self) -> &Arc<CudaStream> {
        &self.cuda
    }
}

impl Drop for GreenStream {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live stream (destroyed only below); the query does not wait.
        let status = unsafe { sys::cuStreamQuery(self.raw) };
        if status == sys::CUresult::CUDA_ERROR_NOT_READY {
            // Work still runs on it (the lanes destroy only idle streams: this is the last
            // guard). Waiting could take for ever: leak the stream, and keep its green context
            // alive for it (destroying the context would wait too).
            std::mem::forget(self._green.clone());
            return;
        }
        // SAFETY: `raw` came from cuGreenCtxStreamCreate and is destroyed exactly once, while the
        // green context (held through `green`) is still alive; its work has finished (or the
        // context is broken, where nothing runs any more).
        unsafe {
            sys::cuStreamDestroy_v2(self.raw);
        }
    }
}
