//! The one cache of cuBLAS and cuSOLVER (dense) handles, one handle per stream.
//!
//! Every crate that calls cuBLAS or cuSOLVER (core's GEMM baseline and f64 paths, the
//! scheduler's tasks, the offload backend) takes its handle from here, so a process creates one
//! handle per stream instead of one per crate, and every handle's memory is visible to the
//! device allocator's owners and quotas:
//!
//! * a [`BlasHandle`] is bound to its stream once, at creation, and gets its workspace from the
//!   device's [`Allocator`](crate::Allocator) under the owner current at creation
//!   ([`crate::current_owner`]), so a scheduler quota sees it;
//! * a [`SolverHandle`] is bound to its stream and carries the `cusolverDnParams_t` of the
//!   64-bit `X` API; cuSOLVER's workspaces are passed per call by the caller.
//!
//! The raw handle is used inside [`BlasHandle::with`] / [`SolverHandle::with`], which bind the
//! stream's context to the thread and hold the handle's lock: cuBLAS and cuSOLVER handles keep
//! per-handle state (pointer mode, math mode, workspace) that two threads must not change under
//! each other. A closure must not re-bind the handle to another stream.
//!
//! Cached handles keep their stream alive; an entry whose stream and handle nobody else holds any
//! more (only the handle, its workspace and the allocator's segment cache do) is dropped the next
//! time a handle is created, and the allocator then releases that stream's cached segments.
//!
//! Before creating a handle the library is probed ([`gpukit_jit::libs`]): cudarc panics when a
//! library cannot be loaded, gpukit returns [`Error::Jit`] with `LibraryMissing` instead.

use crate::alloc::{current_owner, Allocator, DeviceBuffer};
use crate::device::Device;
use crate::error::{DriverContext, Error, Result};
use crate::stream::Stream;
use cudarc::cublas::{result as cb, sys as cbsys};
use cudarc::cusolver::{result as cs, sys as cssys};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// cuBLAS workspace per handle: NVIDIA recommends 32 MiB on Hopper and 4 MiB on earlier GPUs
/// (cublasSetWorkspace documentation).
pub fn blas_workspace_bytes(compute_capability: (u32, u32)) -> usize {
    if compute_capability.0 >= 9 {
        32 << 20
    } else {
        4 << 20
    }
}

type Key = (usize, usize);

fn key(stream: &Stream) -> Key {
    (
        stream.cuda().context().cu_ctx() as usize,
        stream.cuda().cu_stream() as usize,
    )
}

fn bind(stream: &Stream) -> Result<()> {
    stream
        .cuda()
        .context()
        .bind_to_thread()
        .ctx("binding the stream's context")
}

/// What the cache needs to know about a handle type.
trait Cached {
    /// The stream the handle is bound to.
    fn stream(&self) -> &Stream;
    /// The device's allocator (which may cache a clone of the stream).
    fn allocator(&self) -> &Allocator;
    /// Clones of the stream the handle holds itself (beyond `stream()`'s own).
    fn own_stream_refs(&self) -> usize;
}

/// Whether nobody but the handle itself, its workspace and the allocator holds `h`'s stream.
fn unused<H: Cached>(h: &H) -> bool {
    let internal = 1 + h.own_stream_refs() + usize::from(h.allocator().holds_stream(h.stream()));
    h.stream().holders() <= internal
}

/// Looks `stream` up in `cache`, or creates its handle with `make` and caches it, first dropping
/// entries nobody else uses any more (the allocator then releases their streams' segments).
fn cached<H: Cached>(
    cache: &Cache<H>,
    stream: &Stream,
    make: impl FnOnce() -> Result<H>,
) -> Result<Arc<H>> {
    let k = key(stream);
    if let Some(h) = cache.lock().get(&k) {
        return Ok(h.clone());
    }
    // Created outside the lock (creation loads libraries and can take a while).
    let h = Arc::new(make()?);
    let mut map = cache.lock();
    let stale: Vec<Key> = map
        .iter()
        .filter(|(_, h)| Arc::strong_count(h) == 1 && unused(h.as_ref()))
        .map(|(k, _)| *k)
        .collect();
    let dead: Vec<Arc<H>> = stale.iter().filter_map(|k| map.remove(k)).collect();
    let out = map.entry(k).or_insert(h).clone();
    drop(map);
    // Destroyed outside the lock; then the stream's cached segments go back to the driver.
    for h in dead {
        let (s, alloc) = (h.stream().clone(), h.allocator().clone());
        drop(h);
        let _ = alloc.release_stream(&s);
    }
    Ok(out)
}

type Cache<H> = Mutex<HashMap<Key, Arc<H>>>;

fn blas_cache() -> &'static Cache<BlasHandle> {
    static CACHE: OnceLock<Cache<BlasHandle>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn solver_cache() -> &'static Cache<SolverHandle> {
    static CACHE: OnceLock<Cache<SolverHandle>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Drops the cached handle of `stream` from `cache` unless someone else holds it; true when
/// none is cached for it any more.
fn release<H>(cache: &Cache<H>, stream: &Stream) -> bool {
    let k = key(stream);
    let dead = {
        let mut map = cache.lock();
        match map.get(&k) {
            None => return true,
            Some(h) if Arc::strong_count(h) > 1 => return false,
            Some(_) => map.remove(&k),
        }
    };
    // Destroyed outside the lock (its workspace goes back to the allocator).
    drop(dead);
    true
}

/// Drops the cached cuBLAS and cuSOLVER handles of `stream` that nobody else holds, so that
/// the stream can be destroyed (their workspaces go back to the allocator, and no later
/// stream that gets the same handle value finds a handle bound to the destroyed one). Returns
/// whether none is cached for it any more; `false` means someone still holds one (keep the
/// stream alive).
pub fn release_stream(stream: &Stream) -> bool {
    let blas = release(blas_cache(), stream);
    release(solver_cache(), stream) && blas
}

/// The raw cuBLAS handle, owned.
struct RawBlas(cbsys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread; BlasHandle serialises its use with a
// mutex, so it is never used by two threads at once.
unsafe impl Send for RawBlas {}

/// A cuBLAS handle bound to one stream, with its workspace from the device allocator.
pub struct BlasHandle {
    raw: Mutex<RawBlas>,
    stream: Stream,
    alloc: Allocator,
    workspace: Option<DeviceBuffer>,
}

impl Cached for BlasHandle {
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn allocator(&self) -> &Allocator {
        &self.alloc
    }
    fn own_stream_refs(&self) -> usize {
        // The workspace buffer holds the stream too (as its own, and as its latest user).
        self.workspace
            .as_ref()
            .map_or(0, |w| w.stream_refs(&self.stream))
    }
}

impl std::fmt::Debug for BlasHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlasHandle")
            .field("stream", &self.stream)
            .field(
                "workspace_bytes",
                &self.workspace.as_ref().map_or(0, |w| w.len_bytes()),
            )
            .finish()
    }
}

fn cublas_err(action: &str) -> impl FnOnce(cb::CublasError) -> Error + '_ {
    move |source| Error::Cublas {
        action: action.to_string(),
        source,
    }
}

impl BlasHandle {
    /// The cached handle of `stream` (created on first use).
    pub fn for_stream(stream: &Stream) -> Result<Arc<BlasHandle>> {
        cached(blas_cache(), stream, || BlasHandle::create(stream))
    }

    /// A new handle bound to `stream` (not cached: most callers want
    /// [`for_stream`](Self::for_stream)). Its workspace is charged to the current owner.
    pub fn create(stream: &Stream) -> Result<BlasHandle> {
        gpukit_jit::libs::ensure_cublas()?;
        let dev = Device::open(stream.cuda().context().ordinal())?;
        let ws_bytes = blas_workspace_bytes(dev.compute_capability());
        let workspace = dev
            .allocator()
            .alloc_for(&current_owner(), ws_bytes, stream)?;
        bind(stream)?;
        let raw = RawBlas(cb::create_handle().map_err(cublas_err("creating a cuBLAS handle"))?);
        let h = BlasHandle {
            raw: Mutex::new(raw),
            stream: stream.clone(),
            alloc: dev.allocator().clone(),
            workspace: Some(workspace),
        };
        {
            let raw = h.raw.lock();
            // SAFETY: live handle; the stream is live (h.stream keeps it) and belongs to the
            // bound context.
            unsafe { cb::set_stream(raw.0, stream.cuda().cu_stream() as cbsys::cudaStream_t) }
                .map_err(cublas_err("binding a cuBLAS handle to its stream"))?;
            if let Some(ws) = &h.workspace {
                // SAFETY: live handle; the workspace is a device allocation of len_bytes() bytes
                // that lives as long as the handle (field of h, dropped after the handle is
                // destroyed in Drop) and is only used on h's stream.
                let st = unsafe {
                    cbsys::cublasSetWorkspace_v2(
                        raw.0,
                        ws.ptr() as *mut std::ffi::c_void,
                        ws.len_bytes(),
                    )
                };
                st.result()
                    .map_err(cublas_err("giving a cuBLAS handle its workspace"))?;
            }
        }
        Ok(h)
    }

    /// The stream the handle is bound to.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Bytes of device workspace the handle holds.
    pub fn workspace_bytes(&self) -> usize {
        self.workspace.as_ref().map_or(0, |w| w.len_bytes())
    }

    /// Runs `f` with the raw handle, the stream's context bound and the handle locked. Calls
    /// made through it are queued on [`stream`](Self::stream).
    pub fn with<R>(&self, f: impl FnOnce(cbsys::cublasHandle_t) -> R) -> Result<R> {
        let raw = self.raw.lock();
        bind(&self.stream)?;
        Ok(f(raw.0))
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        let raw = self.raw.get_mut();
        if raw.0.is_null() {
            return;
        }
        let _ = bind(&self.stream);
        // SAFETY: the handle is live and no other reference to it exists (&mut self); after
        // this it is never used again. The workspace is freed afterwards (field drop order),
        // stream-ordered by the allocator.
        let _ = unsafe { cb::destroy_handle(raw.0) };
        raw.0 = std::ptr::null_mut();
    }
}

/// The raw cuSOLVER handle and its 64-bit-API parameters, owned.
struct RawSolver {
    handle: cssys::cusolverDnHandle_t,
    params: cssys::cusolverDnParams_t,
}

// SAFETY: cuSOLVER handles may be used from any thread; SolverHandle serialises their use.
unsafe impl Send for RawSolver {}

/// A cuSOLVER dense handle bound to one stream, with a `cusolverDnParams_t` for the `X` API.
pub struct SolverHandle {
    raw: Mutex<RawSolver>,
    stream: Stream,
    alloc: Allocator,
}

impl Cached for SolverHandle {
    fn stream(&self) -> &Stream {
        &self.stream
    }
    fn allocator(&self) -> &Allocator {
        &self.alloc
    }
    fn own_stream_refs(&self) -> usize {
        0
    }
}

impl std::fmt::Debug for SolverHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SolverHandle")
            .field("stream", &self.stream)
            .finish()
    }
}

fn cusolver_err(action: &str) -> impl FnOnce(cs::CusolverError) -> Error + '_ {
    move |source| Error::Cusolver {
        action: action.to_string(),
        source,
    }
}

impl SolverHandle {
    /// The cached handle of `stream` (created on first use: loads cuSOLVER then).
    pub fn for_stream(stream: &Stream) -> Result<Arc<SolverHandle>> {
        cached(solver_cache(), stream, || SolverHandle::create(stream))
    }

    /// A new handle bound to `stream` (not cached).
    pub fn create(stream: &Stream) -> Result<SolverHandle> {
        gpukit_jit::libs::ensure_cusolver()?;
        let dev = Device::open(stream.cuda().context().ordinal())?;
        bind(stream)?;
        let handle = cs::dn_create().map_err(cusolver_err("creating a cuSOLVER handle"))?;
        let h = SolverHandle {
            raw: Mutex::new(RawSolver {
                handle,
                params: std::ptr::null_mut(),
            }),
            stream: stream.clone(),
            alloc: dev.allocator().clone(),
        };
        {
            let mut raw = h.raw.lock();
            // SAFETY: live handle; the stream is live (h.stream keeps it).
            unsafe { cs::dn_set_stream(raw.handle, stream.cuda().cu_stream() as _) }
                .map_err(cusolver_err("binding a cuSOLVER handle to its stream"))?;
            raw.params =
                cs::dn_create_params().map_err(cusolver_err("creating cuSOLVER parameters"))?;
        }
        Ok(h)
    }

    /// The stream the handle is bound to.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Runs `f` with the raw handle and its `X`-API parameters, the stream's context bound and
    /// the handle locked.
    pub fn with<R>(
        &self,
        f: impl FnOnce(cssys::cusolverDnHandle_t, cssys::cusolverDnParams_t) -> R,
    ) -> Result<R> {
        let raw = self.raw.lock();
        bind(&self.stream)?;
        Ok(f(raw.handle, raw.params))
    }
}

impl Drop for SolverHandle {
    fn drop(&mut self) {
        let raw = self.raw.get_mut();
        let _ = bind(&self.stream);
        if !raw.params.is_null() {
            // SAFETY: created by dn_create_params, never used after this.
            let _ = unsafe { cs::dn_destroy_params(raw.params) };
        }
        if !raw.handle.is_null() {
            // SAFETY: the handle is live and exclusively ours (&mut self); never used after this.
            let _ = unsafe { cs::dn_destroy(raw.handle) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::blas_workspace_bytes;

    #[test]
    fn workspace_follows_nvidias_recommendation() {
        assert_eq!(blas_workspace_bytes((9, 0)), 32 << 20);
        assert_eq!(blas_workspace_bytes((10, 0)), 32 << 20);
        assert_eq!(blas_workspace_bytes((8, 0)), 4 << 20);
        assert_eq!(blas_workspace_bytes((8, 9)), 4 << 20);
    }
}
