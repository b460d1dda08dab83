//! The GPU backend: cuBLAS and cuSOLVER (64-bit `X` API) through cudarc's raw layer.
//!
//! * **Lanes, no global lock.** A [`Lane`] owns three non-blocking streams (compute, host-to-
//!   device, device-to-host), a cuBLAS and a cuSOLVER handle, a device arena and pinned staging
//!   buffers. A call checks a lane out of a pool (a mutex held only for the `pop`/`push`), so
//!   calls from several threads run concurrently, each on its own lane.
//! * **Pinned staging, overlapped.** Inputs go through two pinned slots: while the DMA engine
//!   copies slot 0 to the device, host threads pack the next columns into slot 1 (the pageable
//!   to pinned copy is split over several threads). Column-separable BLAS-3 calls (gemm with
//!   `op(B) = B`, left-side symm and trsm) are pipelined per column block: upload of block j+1,
//!   compute of block j and download of block j-1 overlap. gesv/posv upload B while A is being
//!   factorized, and download the factors while the solve runs.
//! * **User buffers written only after success.** Outputs are copied to a pinned buffer; only
//!   when every stream finished without error and every `info` is 0 are they unpacked into the
//!   caller's memory. Any failure returns [`GpuFail`] and leaves the caller's buffers untouched,
//!   so the CPU can run the call on the original inputs.

use crate::call::{Call, HostMat, Op, Piv, Scalar};
use crate::ops::{Diag, Precision, Side, SvdJob, Trans, Uplo};
use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;
use cudarc::driver::CudaContext;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Why the GPU path failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuFailKind {
    /// Device or pinned memory exhausted.
    OutOfMemory,
    /// A CUDA / cuBLAS / cuSOLVER error.
    Error,
    /// The solver returned `info != 0` (singular, not positive definite, no convergence).
    Info,
    /// Injected for testing.
    Injected,
}

/// A failed GPU attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFail {
    /// The kind.
    pub kind: GpuFailKind,
    /// Details.
    pub detail: String,
}

impl std::fmt::Display for GpuFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.detail)
    }
}

type GResult<T> = Result<T, GpuFail>;

fn fail(kind: GpuFailKind, detail: impl Into<String>) -> GpuFail {
    GpuFail {
        kind,
        detail: detail.into(),
    }
}

fn cu_ok(r: cu::CUresult, what: &str) -> GResult<()> {
    match r {
        cu::CUresult::CUDA_SUCCESS => Ok(()),
        cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            Err(fail(GpuFailKind::OutOfMemory, what.to_string()))
        }
        e => Err(fail(GpuFailKind::Error, format!("{what}: {e:?}"))),
    }
}

fn cb_ok(r: cb::cublasStatus_t, what: &str) -> GResult<()> {
    match r {
        cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        cb::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED => {
            Err(fail(GpuFailKind::OutOfMemory, what.to_string()))
        }
        e => Err(fail(GpuFailKind::Error, format!("{what}: {e:?}"))),
    }
}

fn cs_ok(r: cs::cusolverStatus_t, what: &str) -> GResult<()> {
    match r {
        cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS => Ok(()),
        cs::cusolverStatus_t::CUSOLVER_STATUS_ALLOC_FAILED => {
            Err(fail(GpuFailKind::OutOfMemory, what.to_string()))
        }
        e => Err(fail(GpuFailKind::Error, format!("{what}: {e:?}"))),
    }
}

/// Failure injection points (tests): see [`GpuBackend::set_inject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inject {
    /// No injection.
    None = 0,
    /// Pretend the device allocation failed.
    OutOfMemory = 1,
    /// Fail after the results reached the pinned buffer, before the caller's buffers are written.
    Error = 2,
    /// Pretend the solver returned `info = 1`.
    Info = 3,
}

impl Inject {
    /// Parses `oom`, `error`, `info` (anything else: None).
    pub fn parse(s: &str) -> Option<Inject> {
        match s.trim() {
            "oom" => Some(Inject::OutOfMemory),
            "error" => Some(Inject::Error),
            "info" => Some(Inject::Info),
            "" | "none" => Some(Inject::None),
            _ => None,
        }
    }
}

const SLOT_BYTES: usize = 32 << 20;
const ALIGN: usize = 512;

struct Pinned {
    ptr: *mut u8,
    size: usize,
}

impl Pinned {
    fn alloc(size: usize) -> GResult<Pinned> {
        let mut p: *mut c_void = std::ptr::null_mut();
        cu_ok(
            // SAFETY: a plain pinned allocation (flags 0: cached, not write-combined, so the CPU can
            // read device-to-host results at full speed).
            unsafe { cu::cuMemHostAlloc(&mut p, size.max(1), 0) },
            "pinned host allocation",
        )?;
        Ok(Pinned {
            ptr: p as *mut u8,
            size,
        })
    }

    fn ensure(&mut self, size: usize) -> GResult<()> {
        if size <= self.size {
            return Ok(());
        }
        let grown = size.next_multiple_of(64 << 20);
        let new = Pinned::alloc(grown)?;
        *self = new; // drops (frees) the old one
        Ok(())
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated by cuMemHostAlloc and not used after this.
            unsafe { cu::cuMemFreeHost(self.ptr as *mut c_void) };
        }
    }
}

struct DevArena {
    ptr: cu::CUdeviceptr,
    size: usize,
}

impl Drop for DevArena {
    fn drop(&mut self) {
        if self.ptr != 0 {
            // SAFETY: allocated by cuMemAlloc; the lane synchronised its streams before dropping.
            unsafe { cu::cuMemFree_v2(self.ptr) };
        }
    }
}

/// One set of streams, handles and buffers; used by one call at a time.
pub(crate) struct Lane {
    compute: cu::CUstream,
    h2d: cu::CUstream,
    d2h: cu::CUstream,
    blas: cb::cublasHandle_t,
    solver: cs::cusolverDnHandle_t,
    params: cs::cusolverDnParams_t,
    ev_in: cu::CUevent,
    ev_done: cu::CUevent,
    slot_ev: [cu::CUevent; 2],
    slots: [Pinned; 2],
    next_slot: usize,
    out: Pinned,
    arena: DevArena,
    host_ws: Vec<u8>,
    /// Sizing only ([`GpuBackend::presize`]): `prepare` records the layout here and stops the
    /// call before anything is copied.
    sizing: Option<Option<Layout>>,
}

// SAFETY: a lane is used by one thread at a time (checked out of the pool); CUDA handles and
// streams may be used from any thread once the context is current.
unsafe impl Send for Lane {}

impl Lane {
    fn new() -> GResult<Lane> {
        let mk_stream = || -> GResult<cu::CUstream> {
            let mut s = std::ptr::null_mut();
            cu_ok(
                // SAFETY: plain stream creation with the context current (the caller bound it).
                unsafe {
                    cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
                },
                "stream creation",
            )?;
            Ok(s)
        };
        let compute = mk_stream()?;
        let h2d = mk_stream()?;
        let d2h = mk_stream()?;
        let mk_event = || -> GResult<cu::CUevent> {
            let mut e = std::ptr::null_mut();
            cu_ok(
                // SAFETY: event creation, context current.
                unsafe {
                    cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
                },
                "event creation",
            )?;
            Ok(e)
        };
        let mut blas = std::ptr::null_mut();
        // SAFETY: handle creation; the stream is live and owned by this lane.
        unsafe {
            cb_ok(cb::cublasCreate_v2(&mut blas), "cublasCreate")?;
            cb_ok(
                cb::cublasSetStream_v2(blas, compute as _),
                "cublasSetStream",
            )?;
        }
        let mut solver = std::ptr::null_mut();
        let mut params = std::ptr::null_mut();
        // SAFETY: as above.
        unsafe {
            cs_ok(cs::cusolverDnCreate(&mut solver), "cusolverDnCreate")?;
            cs_ok(
                cs::cusolverDnSetStream(solver, compute as _),
                "cusolverDnSetStream",
            )?;
            cs_ok(
                cs::cusolverDnCreateParams(&mut params),
                "cusolverDnCreateParams",
            )?;
        }
        Ok(Lane {
            compute,
            h2d,
            d2h,
            blas,
            solver,
            params,
            ev_in: mk_event()?,
            ev_done: mk_event()?,
            slot_ev: [mk_event()?, mk_event()?],
            slots: [Pinned::alloc(SLOT_BYTES)?, Pinned::alloc(SLOT_BYTES)?],
            next_slot: 0,
            out: Pinned::alloc(SLOT_BYTES)?,
            arena: DevArena { ptr: 0, size: 0 },
            host_ws: Vec::new(),
            sizing: None,
        })
    }

    fn ensure_arena(&mut self, bytes: usize) -> GResult<cu::CUdeviceptr> {
        if bytes <= self.arena.size && self.arena.ptr != 0 {
            return Ok(self.arena.ptr);
        }
        self.sync_all()?;
        let grown = bytes.next_multiple_of(64 << 20);
        let (mut free, mut total) = (0usize, 0usize);
        cu_ok(
            // SAFETY: plain query, context current.
            unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) },
            "memory query",
        )?;
        let headroom = 512usize << 20;
        if grown + headroom > free + self.arena.size {
            return Err(fail(
                GpuFailKind::OutOfMemory,
                format!(
                    "need {} MiB of device memory, {} MiB free",
                    grown >> 20,
                    free >> 20
                ),
            ));
        }
        self.arena = DevArena { ptr: 0, size: 0 }; // free the old one first
        let mut p = 0;
        cu_ok(
            // SAFETY: plain device allocation.
            unsafe { cu::cuMemAlloc_v2(&mut p, grown) },
            "device allocation",
        )?;
        self.arena = DevArena {
            ptr: p,
            size: grown,
        };
        Ok(p)
    }

    fn sync_all(&self) -> GResult<()> {
        for s in [self.h2d, self.compute, self.d2h] {
            cu_ok(
                // SAFETY: the streams are live.
                unsafe { cu::cuStreamSynchronize(s) },
                "stream synchronisation",
            )?;
        }
        Ok(())
    }

    /// Makes `waiter` wait for the work queued so far on `on`.
    fn link(&self, on: cu::CUstream, waiter: cu::CUstream, ev: cu::CUevent) -> GResult<()> {
        // SAFETY: live event and streams.
        unsafe {
            cu_ok(cu::cuEventRecord(ev, on), "event record")?;
            cu_ok(cu::cuStreamWaitEvent(waiter, ev, 0), "stream wait")
        }
    }

    /// Uploads a host matrix, packed (`ld = rows`), to `dst` on the h2d stream, through the two
    /// pinned slots.
    fn upload(&mut self, m: &HostMat, es: usize, dst: cu::CUdeviceptr) -> GResult<()> {
        let col = m.rows * es;
        if col == 0 || m.cols == 0 {
            return Ok(());
        }
        if col > self.slots[0].size {
            self.sync_all()?;
            self.slots[0].ensure(col)?;
            self.slots[1].ensure(col)?;
        }
        let per = (self.slots[0].size / col).max(1);
        let mut c0 = 0;
        while c0 < m.cols {
            let c1 = (c0 + per).min(m.cols);
            let s = self.next_slot;
            self.next_slot ^= 1;
            cu_ok(
                // SAFETY: waits for the previous DMA out of this slot before overwriting it.
                unsafe { cu::cuEventSynchronize(self.slot_ev[s]) },
                "staging slot wait",
            )?;
            let bytes = (c1 - c0) * col;
            // SAFETY: the slot holds >= `bytes`; the source columns are valid (caller contract).
            unsafe { pack(m, es, c0, c1, self.slots[s].ptr) };
            // SAFETY: pinned source of `bytes`, device destination inside the arena.
            unsafe {
                cu_ok(
                    cu::cuMemcpyHtoDAsync_v2(
                        dst + (c0 * col) as u64,
                        self.slots[s].ptr as *const c_void,
                        bytes,
                        self.h2d,
                    ),
                    "host-to-device copy",
                )?;
                cu_ok(cu::cuEventRecord(self.slot_ev[s], self.h2d), "event record")?;
            }
            c0 = c1;
        }
        Ok(())
    }

    /// Uploads a small host array (pivots) on the h2d stream.
    fn upload_bytes(&mut self, src: &[u8], dst: cu::CUdeviceptr) -> GResult<()> {
        let m = HostMat::input(src.as_ptr(), src.len(), 1, src.len());
        self.upload(&m, 1, dst)
    }

    /// Queues a device-to-host copy into the pinned output buffer at `off` on `stream`.
    fn download(
        &self,
        src: cu::CUdeviceptr,
        off: usize,
        bytes: usize,
        stream: cu::CUstream,
    ) -> GResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        debug_assert!(off + bytes <= self.out.size);
        cu_ok(
            // SAFETY: the pinned buffer holds off+bytes (ensured by the caller's layout).
            unsafe {
                cu::cuMemcpyDtoHAsync_v2(self.out.ptr.add(off) as *mut c_void, src, bytes, stream)
            },
            "device-to-host copy",
        )
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.sync_all();
        // SAFETY: every handle was created by this lane and is not used after this.
        unsafe {
            cs::cusolverDnDestroyParams(self.params);
            cs::cusolverDnDestroy(self.solver);
            cb::cublasDestroy_v2(self.blas);
            for e in [self.ev_in, self.ev_done, self.slot_ev[0], self.slot_ev[1]] {
                cu::cuEventDestroy_v2(e);
            }
            for s in [self.h2d, self.compute, self.d2h] {
                cu::cuStreamDestroy_v2(s);
            }
        }
    }
}

/// Bump allocator for one call's device and pinned-output layout.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Layout {
    dev: usize,
    out: usize,
}

impl Layout {
    fn dev(&mut self, bytes: usize) -> usize {
        let o = self.dev;
        self.dev += bytes.next_multiple_of(ALIGN).max(ALIGN);
        o
    }
    fn out(&mut self, bytes: usize) -> usize {
        let o = self.out;
        self.out += bytes.next_multiple_of(64).max(64);
        o
    }
}

#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: used only to hand disjoint ranges of one buffer to scoped threads.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// Method access, so closures capture the whole (Send + Sync) wrapper.
    fn get(&self) -> *mut u8 {
        self.0
    }
}

fn threads_for(bytes: usize) -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (bytes / (4 << 20)).clamp(1, cores.min(8))
}

/// Runs `f(lo, hi)` over `0..n` split into contiguous ranges on up to `threads` threads.
fn par_ranges(n: usize, threads: usize, f: impl Fn(usize, usize) + Sync) {
    if threads <= 1 || n < 2 {
        f(0, n);
        return;
    }
    let t = threads.min(n);
    let per = n.div_ceil(t);
    std::thread::scope(|s| {
        for i in 1..t {
            let f = &f;
            let lo = i * per;
            let hi = ((i + 1) * per).min(n);
            if lo < hi {
                s.spawn(move || f(lo, hi));
            }
        }
        f(0, per.min(n));
    });
}

/// Packs columns `c0..c1` of `m` into `dst` (`ld = rows`).
///
/// # Safety
/// `m` valid for its extent; `dst` holds `(c1-c0)*rows*es` bytes.
unsafe fn pack(m: &HostMat, es: usize, c0: usize, c1: usize, dst: *mut u8) {
    let col = m.rows * es;
    let (src, d) = (SendPtr(m.ptr), SendPtr(dst));
    if m.ld == m.rows {
        let bytes = (c1 - c0) * col;
        par_ranges(bytes, threads_for(bytes), |lo, hi| {
            // SAFETY: disjoint byte ranges of the contiguous source and destination.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.get().add(c0 * col + lo),
                    d.get().add(lo),
                    hi - lo,
                )
            }
        });
    } else {
        let ld = m.ld;
        par_ranges(c1 - c0, threads_for((c1 - c0) * col), |lo, hi| {
            for j in lo..hi {
                // SAFETY: column c0+j of the source (inside its extent), slot j of the destination.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.get().add((c0 + j) * ld * es),
                        d.get().add(j * col),
                        col,
                    )
                }
            }
        });
    }
}

/// Unpacks a packed matrix from `src` into the caller's `m`.
///
/// # Safety
/// `src` holds `rows*cols*es` bytes; `m` is writable for its extent.
unsafe fn unpack(src: *const u8, m: &HostMat, es: usize) {
    let col = m.rows * es;
    if col == 0 || m.cols == 0 {
        return;
    }
    let (s, d) = (SendPtr(src as *mut u8), SendPtr(m.ptr));
    if m.ld == m.rows {
        let bytes = m.cols * col;
        par_ranges(bytes, threads_for(bytes), |lo, hi| {
            // SAFETY: disjoint byte ranges.
            unsafe { std::ptr::copy_nonoverlapping(s.get().add(lo), d.get().add(lo), hi - lo) }
        });
    } else {
        let ld = m.ld;
        par_ranges(m.cols, threads_for(m.cols * col), |lo, hi| {
            for j in lo..hi {
                // SAFETY: column j of both.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        s.get().add(j * col),
                        d.get().add(j * ld * es),
                        col,
                    )
                }
            }
        });
    }
}

fn dtype_s(p: Precision) -> cs::cudaDataType {
    match p {
        Precision::S => cs::cudaDataType::CUDA_R_32F,
        Precision::D => cs::cudaDataType::CUDA_R_64F,
        Precision::C => cs::cudaDataType::CUDA_C_32F,
        Precision::Z => cs::cudaDataType::CUDA_C_64F,
    }
}

fn real_dtype_s(p: Precision) -> cs::cudaDataType {
    match p {
        Precision::S | Precision::C => cs::cudaDataType::CUDA_R_32F,
        Precision::D | Precision::Z => cs::cudaDataType::CUDA_R_64F,
    }
}

fn dtype_b(p: Precision) -> cb::cudaDataType {
    match p {
        Precision::S => cb::cudaDataType::CUDA_R_32F,
        Precision::D => cb::cudaDataType::CUDA_R_64F,
        Precision::C => cb::cudaDataType::CUDA_C_32F,
        Precision::Z => cb::cudaDataType::CUDA_C_64F,
    }
}

fn op_b(t: Trans, p: Precision) -> cb::cublasOperation_t {
    match (t, p.is_complex()) {
        (Trans::No, _) => cb::cublasOperation_t::CUBLAS_OP_N,
        (Trans::Trans, _) | (Trans::Conj, false) => cb::cublasOperation_t::CUBLAS_OP_T,
        (Trans::Conj, true) => cb::cublasOperation_t::CUBLAS_OP_C,
    }
}

fn op_s(t: Trans, p: Precision) -> cs::cublasOperation_t {
    match (t, p.is_complex()) {
        (Trans::No, _) => cs::cublasOperation_t::CUBLAS_OP_N,
        (Trans::Trans, _) | (Trans::Conj, false) => cs::cublasOperation_t::CUBLAS_OP_T,
        (Trans::Conj, true) => cs::cublasOperation_t::CUBLAS_OP_C,
    }
}

fn fill_b(u: Uplo) -> cb::cublasFillMode_t {
    match u {
        Uplo::Upper => cb::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
        Uplo::Lower => cb::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
    }
}

fn fill_s(u: Uplo) -> cs::cublasFillMode_t {
    match u {
        Uplo::Upper => cs::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
        Uplo::Lower => cs::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
    }
}

fn side_b(s: Side) -> cb::cublasSideMode_t {
    match s {
        Side::Left => cb::cublasSideMode_t::CUBLAS_SIDE_LEFT,
        Side::Right => cb::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
    }
}

fn diag_b(d: Diag) -> cb::cublasDiagType_t {
    match d {
        Diag::NonUnit => cb::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
        Diag::Unit => cb::cublasDiagType_t::CUBLAS_DIAG_UNIT,
    }
}

fn ci(x: usize) -> i32 {
    x.min(i32::MAX as usize) as i32
}

fn dp<T>(base: cu::CUdeviceptr, off: usize) -> *mut T {
    (base as usize + off) as *mut T
}

/// A symmetric / triangular cuBLAS call in one precision.
macro_rules! typed_blas {
    ($p:expr, $s:ident, $d:ident, $c:ident, $z:ident, ($($arg:expr),*)) => {
        match $p {
            Precision::S => cb::$s($($arg as _),*),
            Precision::D => cb::$d($($arg as _),*),
            Precision::C => cb::$c($($arg as _),*),
            Precision::Z => cb::$z($($arg as _),*),
        }
    };
}

/// How one attempt of a call ended (failures are `Err`).
enum Done {
    /// Results are in the caller's buffers.
    Ok,
    /// Nothing was written; run again with the QR-iteration SVD.
    RetryQr,
}

/// `(1, 0)` in precision `p`.
fn unit_scalars(p: Precision) -> (Scalar, Scalar) {
    match p {
        Precision::S => (Scalar::of(1.0f32), Scalar::of(0.0f32)),
        Precision::D => (Scalar::of(1.0f64), Scalar::of(0.0f64)),
        Precision::C => (Scalar::of([1.0f32, 0.0]), Scalar::of([0.0f32, 0.0])),
        Precision::Z => (Scalar::of([1.0f64, 0.0]), Scalar::of([0.0f64, 0.0])),
    }
}

/// Why the GPU path cannot run this call, if it cannot (the dispatcher keeps such calls on the
/// CPU, counted as `unsupported`).
pub fn unsupported(call: &Call) -> Option<&'static str> {
    let s = call.shape();
    let big = [s.m, s.n, s.k].into_iter().any(|d| d > i32::MAX as u64 / 2);
    if big {
        return Some("dimension too large for cuBLAS 32-bit sizes");
    }
    match call.op {
        Op::Svd {
            jobu, jobvt, m, n, ..
        } => {
            if m < n {
                Some("cuSOLVER gesvd needs m >= n")
            } else if jobu == SvdJob::Overwrite || jobvt == SvdJob::Overwrite {
                Some("SVD job 'O' is not offloaded")
            } else if jobu != jobvt {
                Some("mixed SVD jobs are not offloaded")
            } else {
                None
            }
        }
        Op::Hemm { .. }
        | Op::Herk { .. }
        | Op::Trmm { .. }
        | Op::Getri { .. }
        | Op::Potri { .. }
        | Op::Trtrs { .. }
        | Op::Syevr { .. }
        | Op::Gelsd { .. }
        | Op::Orgqr { .. } => Some("no GPU path for this routine yet"),
        _ => None,
    }
}

/// The most pinned memory [`GpuBackend::presize`] reserves ahead of a call (the output buffer
/// of one lane): a call whose results need more grows its buffer itself, as without presizing.
pub const PRESIZE_PINNED_MAX: usize = 1 << 30;

const SIZING_ONLY: &str = "sizing only";

/// What to reserve ahead for calls whose layouts are `needs` (device bytes, pinned output
/// bytes), on a lane that has `have_dev` / `have_pinned`: `(device, pinned)`, `None` where
/// nothing needs to grow. The device size is the largest need (an arena that cannot be had is
/// refused by the allocation's own free-memory check); the pinned size is the largest need that
/// is at most `pinned_max`: reserving less than a call needs would not spare it the growth, so
/// larger ones are left to grow in their own call, and nothing is reserved beyond what one of
/// the calls needs.
pub fn presize_plan(
    needs: &[(usize, usize)],
    have_dev: usize,
    have_pinned: usize,
    pinned_max: usize,
) -> (Option<usize>, Option<usize>) {
    let dev = needs.iter().map(|n| n.0).max().unwrap_or(0);
    let pinned = needs
        .iter()
        .map(|n| n.1)
        .filter(|&o| o <= pinned_max)
        .max()
        .unwrap_or(0);
    (
        (dev > have_dev).then_some(dev),
        (pinned > have_pinned).then_some(pinned),
    )
}

/// What [`GpuBackend::presize`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Presized {
    /// Device bytes the calls need (largest).
    pub need_dev: usize,
    /// Pinned output bytes the calls need (largest).
    pub need_pinned: usize,
    /// The lane's device arena afterwards.
    pub dev: usize,
    /// The lane's pinned output buffer afterwards.
    pub pinned: usize,
}

/// The started GPU backend.
pub struct GpuBackend {
    ctx: Arc<CudaContext>,
    lanes: Mutex<Vec<Lane>>,
    name: String,
    inject: AtomicU8,
}

impl GpuBackend {
    /// Checks the CUDA libraries, opens device 0, and creates the first lane (handles, streams,
    /// staging buffers), so the first offloaded call does not pay for them.
    pub fn start() -> crate::Result<GpuBackend> {
        let unavailable = |e: String| crate::Error::GpuUnavailable(e);
        gpukit_jit::libs::ensure_driver().map_err(|e| unavailable(e.to_string()))?;
        gpukit_jit::libs::ensure_cublas().map_err(|e| unavailable(e.to_string()))?;
        // SAFETY: only tries to dlopen libcusolver by its candidate names.
        if !unsafe { cs::is_culib_present() } {
            return Err(unavailable("libcusolver cannot be loaded".into()));
        }
        if !gpukit_jit::libs::gpu_available() {
            return Err(unavailable("the CUDA driver reports no device".into()));
        }
        let ctx = gpukit_jit::open_context(0).map_err(|e| unavailable(e.to_string()))?;
        ctx.bind_to_thread()
            .map_err(|e| unavailable(e.to_string()))?;
        let name = ctx.name().unwrap_or_else(|_| "CUDA device 0".into());
        let lane = Lane::new().map_err(|e| unavailable(e.to_string()))?;
        let inject = std::env::var("GPUKIT_OFFLOAD_INJECT_FAILURE")
            .ok()
            .and_then(|s| Inject::parse(&s))
            .unwrap_or(Inject::None);
        Ok(GpuBackend {
            ctx,
            lanes: Mutex::new(vec![lane]),
            name,
            inject: AtomicU8::new(inject as u8),
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets a failure to inject into every following call (tests).
    pub fn set_inject(&self, i: Inject) {
        self.inject.store(i as u8, Ordering::Relaxed);
    }

    fn injected(&self) -> Inject {
        match self.inject.load(Ordering::Relaxed) {
            1 => Inject::OutOfMemory,
            2 => Inject::Error,
            3 => Inject::Info,
            _ => Inject::None,
        }
    }

    /// Reserves, on an idle lane, the device arena and pinned output buffer that the largest of
    /// `calls` needs (bounded by [`presize_plan`] with [`PRESIZE_PINNED_MAX`]), so that the first
    /// such call does not allocate inside its own time. Each call's layout is found by running
    /// it in sizing-only mode: workspace queries, then a stop before anything is copied. Nothing
    /// is read from or written to the calls' buffers (they may be [`Call::without_data`]).
    pub fn presize(&self, calls: &[Call]) -> GResult<Presized> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| fail(GpuFailKind::Error, format!("binding the context: {e}")))?;
        let lane = self.lanes.lock().pop();
        let mut lane = match lane {
            Some(l) => l,
            None => Lane::new()?,
        };
        let r = (|| -> GResult<Presized> {
            let mut needs = Vec::with_capacity(calls.len());
            for call in calls {
                if unsupported(call).is_some() || call.check().is_err() {
                    continue;
                }
                lane.sizing = Some(None);
                // SAFETY: a sizing-only run stops in `prepare`, before the first access to any
                // host pointer of the call (everything before it is shape arithmetic and
                // cuSOLVER workspace queries with null matrix pointers).
                let r = unsafe { self.run_on(&mut lane, call, false) };
                let lay = lane.sizing.take().flatten();
                // a call whose sizing run fails (a workspace query) or takes no buffers is
                // left to size itself when it runs
                if let (Err(f), Some(l)) = (r, lay) {
                    if f.detail == SIZING_ONLY {
                        needs.push((l.dev, l.out));
                    }
                }
            }
            let (dev, pinned) =
                presize_plan(&needs, lane.arena.size, lane.out.size, PRESIZE_PINNED_MAX);
            if let Some(d) = dev {
                lane.ensure_arena(d)?;
            }
            if let Some(p) = pinned {
                lane.sync_all()?;
                lane.out.ensure(p)?;
            }
            Ok(Presized {
                need_dev: needs.iter().map(|n| n.0).max().unwrap_or(0),
                need_pinned: needs.iter().map(|n| n.1).max().unwrap_or(0),
                dev: lane.arena.size,
                pinned: lane.out.size,
            })
        })();
        lane.sizing = None;
        if lane.sync_all().is_ok() {
            self.lanes.lock().push(lane);
        }
        r
    }

    /// The largest device arena and pinned output buffer among the idle lanes (bytes).
    pub fn reserved(&self) -> (usize, usize) {
        let lanes = self.lanes.lock();
        (
            lanes.iter().map(|l| l.arena.size).max().unwrap_or(0),
            lanes.iter().map(|l| l.out.size).max().unwrap_or(0),
        )
    }

    /// Runs a checked call on the GPU. On `Err` the caller's buffers are untouched.
    ///
    /// # Safety
    /// Every pointer in `call` must be valid for its extent; [`Call::check`] passed and
    /// [`unsupported`] returned `None`.
    pub unsafe fn run(&self, call: &Call) -> GResult<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| fail(GpuFailKind::Error, format!("binding the context: {e}")))?;
        let lane = self.lanes.lock().pop();
        let mut lane = match lane {
            Some(l) => l,
            None => Lane::new()?,
        };
        // SAFETY: forwarded.
        let mut r = unsafe { self.run_on(&mut lane, call, false) };
        if matches!(r, Ok(Done::RetryQr)) {
            // the polar SVD perturbed the singular values too much: the QR-iteration SVD, on
            // the same (still untouched) inputs
            // SAFETY: forwarded.
            r = unsafe { self.run_on(&mut lane, call, true) };
        }
        let r = r.and_then(|d| match d {
            Done::Ok => Ok(()),
            Done::RetryQr => Err(fail(GpuFailKind::Error, "SVD retry did not finish")),
        });
        let healthy = lane.sync_all().is_ok();
        if healthy {
            self.lanes.lock().push(lane);
        }
        r
    }

    /// One attempt of a call on `lane`; `svd_qr` forces the QR-iteration SVD (gesvd).
    unsafe fn run_on(&self, lane: &mut Lane, call: &Call, svd_qr: bool) -> GResult<Done> {
        let inject = self.injected();
        if inject == Inject::OutOfMemory {
            return Err(fail(GpuFailKind::Injected, "injected out-of-memory"));
        }
        let p = call.prec;
        let es = p.size();
        let mut lay = Layout::default();
        // Outputs to unpack after success: (pinned offset, destination).
        let mut outs: Vec<(usize, HostMat, usize)> = Vec::new();
        let mut piv_out: Option<(usize, Piv, usize)> = None;
        let mut infos: Vec<usize> = Vec::new();
        // polar SVD: (its reported perturbation, pinned offset of the singular values, max(m, n))
        let mut polar_check: Option<(f64, usize, usize)> = None;
        let packed = |m: &HostMat| m.rows * m.cols * es;
        // SAFETY: (whole block) every device pointer is inside the arena sized by `lay`; every
        // host pointer is the caller's (contract) or a pinned buffer sized by `lay.out`.
        unsafe {
            match call.op {
                Op::Gemm {
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    alpha,
                    a,
                    b,
                    beta,
                    c,
                } => {
                    let (oa, ob, oc) = (
                        lay.dev(packed(&a)),
                        lay.dev(packed(&b)),
                        lay.dev(packed(&c)),
                    );
                    let out_c = lay.out(packed(&c));
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    let read_c = !beta.is_zero();
                    let chunkable = tb == Trans::No;
                    self.column_pipeline(lane, n, m, chunkable, |lane, j0, j1| {
                        let bcols = HostMat {
                            ptr: b.ptr.add(j0 * b.ld * es),
                            cols: j1 - j0,
                            ..b
                        };
                        let bptr = if chunkable {
                            base + (ob + j0 * b.rows * es) as u64
                        } else {
                            base + ob as u64
                        };
                        if chunkable || j0 == 0 {
                            lane.upload(if chunkable { &bcols } else { &b }, es, bptr)?;
                        }
                        if read_c {
                            let ccols = HostMat {
                                ptr: c.ptr.add(j0 * c.ld * es),
                                cols: j1 - j0,
                                ..c
                            };
                            lane.upload(&ccols, es, base + (oc + j0 * m * es) as u64)?;
                        }
                        lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                        let cptr: *mut c_void = dp(base, oc + j0 * m * es);
                        cb_ok(
                            cb::cublasGemmEx(
                                lane.blas,
                                op_b(ta, p),
                                op_b(tb, p),
                                ci(m),
                                ci(j1 - j0),
                                ci(k),
                                alpha.as_ptr() as *const c_void,
                                dp::<c_void>(base, oa),
                                dtype_b(p),
                                ci(a.rows.max(1)),
                                dp::<c_void>(
                                    base,
                                    if chunkable { ob + j0 * b.rows * es } else { ob },
                                ),
                                dtype_b(p),
                                ci(b.rows.max(1)),
                                beta.as_ptr() as *const c_void,
                                cptr,
                                dtype_b(p),
                                ci(m.max(1)),
                                compute_type(p),
                                cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                            ),
                            "cublasGemmEx",
                        )?;
                        // a non-chunkable product is one block over all columns
                        let _ = bptr;
                        lane.link(lane.compute, lane.d2h, lane.ev_done)?;
                        lane.download(
                            base + (oc + j0 * m * es) as u64,
                            out_c + j0 * m * es,
                            (j1 - j0) * m * es,
                            lane.d2h,
                        )
                    })?;
                    outs.push((out_c, c, es));
                }
                Op::Symm {
                    side,
                    uplo,
                    m,
                    n,
                    alpha,
                    a,
                    b,
                    beta,
                    c,
                } => {
                    let (oa, ob, oc) = (
                        lay.dev(packed(&a)),
                        lay.dev(packed(&b)),
                        lay.dev(packed(&c)),
                    );
                    let out_c = lay.out(packed(&c));
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    let read_c = !beta.is_zero();
                    let chunkable = side == Side::Left;
                    self.column_pipeline(lane, n, m, chunkable, |lane, j0, j1| {
                        let sub = |x: &HostMat| HostMat {
                            ptr: x.ptr.add(j0 * x.ld * es),
                            cols: j1 - j0,
                            ..*x
                        };
                        let off = j0 * m * es;
                        lane.upload(&sub(&b), es, base + (ob + off) as u64)?;
                        if read_c {
                            lane.upload(&sub(&c), es, base + (oc + off) as u64)?;
                        }
                        lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                        let (ka, bp, cp) = (
                            a.rows.max(1),
                            dp::<u8>(base, ob + off),
                            dp::<u8>(base, oc + off),
                        );
                        let ap = dp::<u8>(base, oa);
                        cb_ok(
                            typed_blas!(
                                p,
                                cublasSsymm_v2,
                                cublasDsymm_v2,
                                cublasCsymm_v2,
                                cublasZsymm_v2,
                                (
                                    lane.blas,
                                    side_b(side),
                                    fill_b(uplo),
                                    ci(m),
                                    ci(j1 - j0),
                                    alpha.as_ptr(),
                                    ap,
                                    ci(ka),
                                    bp,
                                    ci(m.max(1)),
                                    beta.as_ptr(),
                                    cp,
                                    ci(m.max(1))
                                )
                            ),
                            "cublas symm",
                        )?;
                        lane.link(lane.compute, lane.d2h, lane.ev_done)?;
                        lane.download(
                            base + (oc + off) as u64,
                            out_c + off,
                            (j1 - j0) * m * es,
                            lane.d2h,
                        )
                    })?;
                    outs.push((out_c, c, es));
                }
                Op::Syrk {
                    uplo,
                    trans,
                    n,
                    k,
                    alpha,
                    a,
                    beta,
                    c,
                } => {
                    let (oa, oc) = (lay.dev(packed(&a)), lay.dev(packed(&c)));
                    let out_c = lay.out(packed(&c));
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    // C is read back whole: the untouched triangle must come back unchanged
                    lane.upload(&c, es, base + oc as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    let t = if trans == Trans::No {
                        Trans::No
                    } else {
                        Trans::Trans
                    };
                    cb_ok(
                        typed_blas!(
                            p,
                            cublasSsyrk_v2,
                            cublasDsyrk_v2,
                            cublasCsyrk_v2,
                            cublasZsyrk_v2,
                            (
                                lane.blas,
                                fill_b(uplo),
                                op_b(t, p),
                                ci(n),
                                ci(k),
                                alpha.as_ptr(),
                                dp::<u8>(base, oa),
                                ci(a.rows.max(1)),
                                beta.as_ptr(),
                                dp::<u8>(base, oc),
                                ci(n.max(1))
                            )
                        ),
                        "cublas syrk",
                    )?;
                    lane.download(base + oc as u64, out_c, packed(&c), lane.compute)?;
                    outs.push((out_c, c, es));
                }
                Op::Trsm {
                    side,
                    uplo,
                    ta,
                    diag,
                    m,
                    n,
                    alpha,
                    a,
                    b,
                } => {
                    let (oa, ob) = (lay.dev(packed(&a)), lay.dev(packed(&b)));
                    let out_b = lay.out(packed(&b));
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    let chunkable = side == Side::Left;
                    self.column_pipeline(lane, n, m, chunkable, |lane, j0, j1| {
                        let off = j0 * m * es;
                        let sub = HostMat {
                            ptr: b.ptr.add(j0 * b.ld * es),
                            cols: j1 - j0,
                            ..b
                        };
                        lane.upload(&sub, es, base + (ob + off) as u64)?;
                        lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                        cb_ok(
                            typed_blas!(
                                p,
                                cublasStrsm_v2,
                                cublasDtrsm_v2,
                                cublasCtrsm_v2,
                                cublasZtrsm_v2,
                                (
                                    lane.blas,
                                    side_b(side),
                                    fill_b(uplo),
                                    op_b(ta, p),
                                    diag_b(diag),
                                    ci(m),
                                    ci(j1 - j0),
                                    alpha.as_ptr(),
                                    dp::<u8>(base, oa),
                                    ci(a.rows.max(1)),
                                    dp::<u8>(base, ob + off),
                                    ci(m.max(1))
                                )
                            ),
                            "cublas trsm",
                        )?;
                        lane.link(lane.compute, lane.d2h, lane.ev_done)?;
                        lane.download(
                            base + (ob + off) as u64,
                            out_b + off,
                            (j1 - j0) * m * es,
                            lane.d2h,
                        )
                    })?;
                    outs.push((out_b, b, es));
                }
                Op::Getrf { m, n, a, ipiv } => {
                    let mn = m.min(n);
                    let (oa, op, oi) = (lay.dev(packed(&a)), lay.dev(8 * mn), lay.dev(4));
                    let (out_a, out_p, out_i) = (lay.out(packed(&a)), lay.out(8 * mn), lay.out(4));
                    let ws = self.ws_getrf(lane, p, m, n)?;
                    let ow = lay.dev(ws.0);
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    self.getrf(lane, p, m, n, base, oa, op, oi, ow, ws)?;
                    lane.download(base + oa as u64, out_a, packed(&a), lane.compute)?;
                    lane.download(base + op as u64, out_p, 8 * mn, lane.compute)?;
                    lane.download(base + oi as u64, out_i, 4, lane.compute)?;
                    outs.push((out_a, a, es));
                    piv_out = Some((out_p, ipiv, mn));
                    infos.push(out_i);
                }
                Op::Getrs {
                    trans,
                    n,
                    nrhs,
                    a,
                    ipiv,
                    b,
                } => {
                    let (oa, op, ob, oi) = (
                        lay.dev(packed(&a)),
                        lay.dev(8 * n),
                        lay.dev(packed(&b)),
                        lay.dev(4),
                    );
                    let (out_b, out_i) = (lay.out(packed(&b)), lay.out(4));
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    let piv64 = read_piv(ipiv, n);
                    lane.upload_bytes(as_bytes(&piv64), base + op as u64)?;
                    lane.upload(&b, es, base + ob as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    cs_ok(
                        cs::cusolverDnXgetrs(
                            lane.solver,
                            lane.params,
                            op_s(trans, p),
                            n as i64,
                            nrhs as i64,
                            dtype_s(p),
                            dp::<c_void>(base, oa),
                            a.rows.max(1) as i64,
                            dp::<i64>(base, op),
                            dtype_s(p),
                            dp::<c_void>(base, ob),
                            n.max(1) as i64,
                            dp::<i32>(base, oi),
                        ),
                        "cusolverDnXgetrs",
                    )?;
                    lane.download(base + ob as u64, out_b, packed(&b), lane.compute)?;
                    lane.download(base + oi as u64, out_i, 4, lane.compute)?;
                    outs.push((out_b, b, es));
                    infos.push(out_i);
                }
                Op::Gesv {
                    n,
                    nrhs,
                    a,
                    ipiv,
                    b,
                } => {
                    let (oa, op, ob, oi, oi2) = (
                        lay.dev(packed(&a)),
                        lay.dev(8 * n),
                        lay.dev(packed(&b)),
                        lay.dev(4),
                        lay.dev(4),
                    );
                    let (out_a, out_p, out_b, out_i, out_i2) = (
                        lay.out(packed(&a)),
                        lay.out(8 * n),
                        lay.out(packed(&b)),
                        lay.out(4),
                        lay.out(4),
                    );
                    let ws = self.ws_getrf(lane, p, n, n)?;
                    let ow = lay.dev(ws.0);
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    self.getrf(lane, p, n, n, base, oa, op, oi, ow, ws)?;
                    // B goes up while A is being factorized; the factors come down during the solve
                    lane.upload(&b, es, base + ob as u64)?;
                    lane.link(lane.compute, lane.d2h, lane.ev_done)?;
                    lane.download(base + oa as u64, out_a, packed(&a), lane.d2h)?;
                    lane.download(base + op as u64, out_p, 8 * n, lane.d2h)?;
                    lane.download(base + oi as u64, out_i, 4, lane.d2h)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    cs_ok(
                        cs::cusolverDnXgetrs(
                            lane.solver,
                            lane.params,
                            cs::cublasOperation_t::CUBLAS_OP_N,
                            n as i64,
                            nrhs as i64,
                            dtype_s(p),
                            dp::<c_void>(base, oa),
                            n.max(1) as i64,
                            dp::<i64>(base, op),
                            dtype_s(p),
                            dp::<c_void>(base, ob),
                            n.max(1) as i64,
                            dp::<i32>(base, oi2),
                        ),
                        "cusolverDnXgetrs",
                    )?;
                    lane.download(base + ob as u64, out_b, packed(&b), lane.compute)?;
                    lane.download(base + oi2 as u64, out_i2, 4, lane.compute)?;
                    outs.push((out_a, a, es));
                    outs.push((out_b, b, es));
                    piv_out = Some((out_p, ipiv, n));
                    infos.push(out_i);
                    infos.push(out_i2);
                }
                Op::Potrf { uplo, n, a } => {
                    let (oa, oi) = (lay.dev(packed(&a)), lay.dev(4));
                    let (out_a, out_i) = (lay.out(packed(&a)), lay.out(4));
                    let ws = self.ws_potrf(lane, p, uplo, n)?;
                    let ow = lay.dev(ws.0);
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    self.potrf(lane, p, uplo, n, base, oa, oi, ow, ws)?;
                    lane.download(base + oa as u64, out_a, packed(&a), lane.compute)?;
                    lane.download(base + oi as u64, out_i, 4, lane.compute)?;
                    outs.push((out_a, a, es));
                    infos.push(out_i);
                }
                Op::Potrs {
                    uplo,
                    n,
                    nrhs,
                    a,
                    b,
                }
                | Op::Posv {
                    uplo,
                    n,
                    nrhs,
                    a,
                    b,
                } => {
                    let factor = matches!(call.op, Op::Posv { .. });
                    let (oa, ob, oi, oi2) = (
                        lay.dev(packed(&a)),
                        lay.dev(packed(&b)),
                        lay.dev(4),
                        lay.dev(4),
                    );
                    let (out_a, out_b, out_i, out_i2) = (
                        lay.out(packed(&a)),
                        lay.out(packed(&b)),
                        lay.out(4),
                        lay.out(4),
                    );
                    let ws = if factor {
                        self.ws_potrf(lane, p, uplo, n)?
                    } else {
                        (0, 0)
                    };
                    let ow = lay.dev(ws.0);
                    let base = self.prepare(lane, &lay)?;
                    lane.upload(&a, es, base + oa as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    if factor {
                        self.potrf(lane, p, uplo, n, base, oa, oi, ow, ws)?;
                        lane.link(lane.compute, lane.d2h, lane.ev_done)?;
                        lane.download(base + oa as u64, out_a, packed(&a), lane.d2h)?;
                        lane.download(base + oi as u64, out_i, 4, lane.d2h)?;
                        outs.push((out_a, a, es));
                        infos.push(out_i);
                    }
                    lane.upload(&b, es, base + ob as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    cs_ok(
                        cs::cusolverDnXpotrs(
                            lane.solver,
                            lane.params,
                            fill_s(uplo),
                            n as i64,
                            nrhs as i64,
                            dtype_s(p),
                            dp::<c_void>(base, oa),
                            n.max(1) as i64,
                            dtype_s(p),
                            dp::<c_void>(base, ob),
                            n.max(1) as i64,
                            dp::<i32>(base, oi2),
                        ),
                        "cusolverDnXpotrs",
                    )?;
                    lane.download(base + ob as u64, out_b, packed(&b), lane.compute)?;
                    lane.download(base + oi2 as u64, out_i2, 4, lane.compute)?;
                    outs.push((out_b, b, es));
                    infos.push(out_i2);
                }
                Op::Syevd {
                    vectors,
                    uplo,
                    n,
                    a,
                    w,
                } => {
                    let rs = p.real_size();
                    let (oa, ow_, oi) = (lay.dev(packed(&a)), lay.dev(n * rs), lay.dev(4));
                    let (out_a, out_w, out_i) = (lay.out(packed(&a)), lay.out(n * rs), lay.out(4));
                    let mode = if vectors {
                        cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR
                    } else {
                        cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_NOVECTOR
                    };
                    let (mut dws, mut hws) = (0usize, 0usize);
                    cs_ok(
                        cs::cusolverDnXsyevd_bufferSize(
                            lane.solver,
                            lane.params,
                            mode,
                            fill_s(uplo),
                            n as i64,
                            dtype_s(p),
                            std::ptr::null(),
                            n.max(1) as i64,
                            real_dtype_s(p),
                            std::ptr::null(),
                            dtype_s(p),
                            &mut dws,
                            &mut hws,
                        ),
                        "cusolverDnXsyevd_bufferSize",
                    )?;
                    let owk = lay.dev(dws);
                    let base = self.prepare(lane, &lay)?;
                    lane.host_ws.resize(hws.max(1), 0);
                    lane.upload(&a, es, base + oa as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    cs_ok(
                        cs::cusolverDnXsyevd(
                            lane.solver,
                            lane.params,
                            mode,
                            fill_s(uplo),
                            n as i64,
                            dtype_s(p),
                            dp::<c_void>(base, oa),
                            n.max(1) as i64,
                            real_dtype_s(p),
                            dp::<c_void>(base, ow_),
                            dtype_s(p),
                            dp::<c_void>(base, owk),
                            dws,
                            lane.host_ws.as_mut_ptr() as *mut c_void,
                            hws,
                            dp::<i32>(base, oi),
                        ),
                        "cusolverDnXsyevd",
                    )?;
                    if vectors {
                        lane.download(base + oa as u64, out_a, packed(&a), lane.compute)?;
                        outs.push((out_a, a, es));
                    }
                    lane.download(base + ow_ as u64, out_w, n * rs, lane.compute)?;
                    lane.download(base + oi as u64, out_i, 4, lane.compute)?;
                    outs.push((out_w, HostMat::new(w, n, 1, n.max(1)), rs));
                    infos.push(out_i);
                }
                Op::Svd {
                    jobu,
                    m,
                    n,
                    a,
                    s,
                    u,
                    vt,
                    ..
                } => {
                    // m >= n and jobu == jobvt (checked by gpu_unsupported)
                    let rs = p.real_size();
                    let mn = n;
                    let (ucols, vtrows) = match jobu {
                        SvdJob::Thin => (mn, mn),
                        SvdJob::Full => (m, n),
                        _ => (0, 0),
                    };
                    let job = jobu.to_char() as i8;
                    let (oa, os, ou, ov, oi) = (
                        lay.dev(packed(&a)),
                        lay.dev(mn * rs),
                        lay.dev(m * ucols * es),
                        lay.dev(vtrows * n * es),
                        lay.dev(4),
                    );
                    let (out_s, out_u, out_v, out_i) = (
                        lay.out(mn * rs),
                        lay.out(m * ucols * es),
                        lay.out(vtrows * n * es),
                        lay.out(4),
                    );
                    let (mut dws, mut hws) = (0usize, 0usize);
                    let (ldu, ldvt) = (m.max(1) as i64, vtrows.max(1) as i64);
                    // Thin SVD with vectors: the polar-decomposition SVD (QDWH + syevd), several
                    // times faster than the QR-iteration gesvd. It returns V (not V^H), which a
                    // geam transposes into VT. Its singular values can be shifted by a small
                    // perturbation it adds for (near-)singular inputs: checked after the call.
                    let polar = jobu == SvdJob::Thin && !svd_qr;
                    let ovv = if polar { lay.dev(n * n * es) } else { 0 };
                    if polar {
                        cs_ok(
                            cs::cusolverDnXgesvdp_bufferSize(
                                lane.solver,
                                lane.params,
                                cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR,
                                1,
                                m as i64,
                                n as i64,
                                dtype_s(p),
                                std::ptr::null(),
                                m.max(1) as i64,
                                real_dtype_s(p),
                                std::ptr::null(),
                                dtype_s(p),
                                std::ptr::null(),
                                ldu,
                                dtype_s(p),
                                std::ptr::null(),
                                n.max(1) as i64,
                                dtype_s(p),
                                &mut dws,
                                &mut hws,
                            ),
                            "cusolverDnXgesvdp_bufferSize",
                        )?;
                    } else {
                        cs_ok(
                            cs::cusolverDnXgesvd_bufferSize(
                                lane.solver,
                                lane.params,
                                job,
                                job,
                                m as i64,
                                n as i64,
                                dtype_s(p),
                                std::ptr::null(),
                                m.max(1) as i64,
                                real_dtype_s(p),
                                std::ptr::null(),
                                dtype_s(p),
                                std::ptr::null(),
                                ldu,
                                dtype_s(p),
                                std::ptr::null(),
                                ldvt,
                                dtype_s(p),
                                &mut dws,
                                &mut hws,
                            ),
                            "cusolverDnXgesvd_bufferSize",
                        )?;
                    }
                    let owk = lay.dev(dws);
                    let base = self.prepare(lane, &lay)?;
                    lane.host_ws.resize(hws.max(1), 0);
                    lane.upload(&a, es, base + oa as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    if polar {
                        let mut err_sigma = 0.0f64;
                        cs_ok(
                            cs::cusolverDnXgesvdp(
                                lane.solver,
                                lane.params,
                                cs::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR,
                                1,
                                m as i64,
                                n as i64,
                                dtype_s(p),
                                dp::<c_void>(base, oa),
                                m.max(1) as i64,
                                real_dtype_s(p),
                                dp::<c_void>(base, os),
                                dtype_s(p),
                                dp::<c_void>(base, ou),
                                ldu,
                                dtype_s(p),
                                dp::<c_void>(base, ovv),
                                n.max(1) as i64,
                                dtype_s(p),
                                dp::<c_void>(base, owk),
                                dws,
                                lane.host_ws.as_mut_ptr() as *mut c_void,
                                hws,
                                dp::<i32>(base, oi),
                                &mut err_sigma,
                            ),
                            "cusolverDnXgesvdp",
                        )?;
                        // VT = V^H (conjugate transpose for complex data)
                        let (one, zero) = unit_scalars(p);
                        let vt_ptr = dp::<u8>(base, ov);
                        cb_ok(
                            typed_blas!(
                                p,
                                cublasSgeam,
                                cublasDgeam,
                                cublasCgeam,
                                cublasZgeam,
                                (
                                    lane.blas,
                                    op_b(Trans::Conj, p),
                                    cb::cublasOperation_t::CUBLAS_OP_N,
                                    ci(n),
                                    ci(n),
                                    one.as_ptr(),
                                    dp::<u8>(base, ovv),
                                    ci(n.max(1)),
                                    zero.as_ptr(),
                                    vt_ptr,
                                    ci(n.max(1)),
                                    vt_ptr,
                                    ci(n.max(1))
                                )
                            ),
                            "cublas geam (V transpose)",
                        )?;
                        polar_check = Some((err_sigma, out_s, m.max(n)));
                    } else {
                        cs_ok(
                            cs::cusolverDnXgesvd(
                                lane.solver,
                                lane.params,
                                job,
                                job,
                                m as i64,
                                n as i64,
                                dtype_s(p),
                                dp::<c_void>(base, oa),
                                m.max(1) as i64,
                                real_dtype_s(p),
                                dp::<c_void>(base, os),
                                dtype_s(p),
                                dp::<c_void>(base, ou),
                                ldu,
                                dtype_s(p),
                                dp::<c_void>(base, ov),
                                ldvt,
                                dtype_s(p),
                                dp::<c_void>(base, owk),
                                dws,
                                lane.host_ws.as_mut_ptr() as *mut c_void,
                                hws,
                                dp::<i32>(base, oi),
                            ),
                            "cusolverDnXgesvd",
                        )?;
                    }
                    lane.download(base + os as u64, out_s, mn * rs, lane.compute)?;
                    lane.download(base + ou as u64, out_u, m * ucols * es, lane.compute)?;
                    lane.download(base + ov as u64, out_v, vtrows * n * es, lane.compute)?;
                    lane.download(base + oi as u64, out_i, 4, lane.compute)?;
                    outs.push((out_s, HostMat::new(s, mn, 1, mn.max(1)), rs));
                    if ucols > 0 {
                        outs.push((
                            out_u,
                            HostMat {
                                rows: m,
                                cols: ucols,
                                ..u
                            },
                            es,
                        ));
                        outs.push((
                            out_v,
                            HostMat {
                                rows: vtrows,
                                cols: n,
                                ..vt
                            },
                            es,
                        ));
                    }
                    infos.push(out_i);
                }
                Op::Geqrf { m, n, a, tau } => {
                    let mn = m.min(n);
                    let (oa, ot, oi) = (lay.dev(packed(&a)), lay.dev(mn * es), lay.dev(4));
                    let (out_a, out_t, out_i) = (lay.out(packed(&a)), lay.out(mn * es), lay.out(4));
                    let (mut dws, mut hws) = (0usize, 0usize);
                    cs_ok(
                        cs::cusolverDnXgeqrf_bufferSize(
                            lane.solver,
                            lane.params,
                            m as i64,
                            n as i64,
                            dtype_s(p),
                            std::ptr::null(),
                            m.max(1) as i64,
                            dtype_s(p),
                            std::ptr::null(),
                            dtype_s(p),
                            &mut dws,
                            &mut hws,
                        ),
                        "cusolverDnXgeqrf_bufferSize",
                    )?;
                    let owk = lay.dev(dws);
                    let base = self.prepare(lane, &lay)?;
                    lane.host_ws.resize(hws.max(1), 0);
                    lane.upload(&a, es, base + oa as u64)?;
                    lane.link(lane.h2d, lane.compute, lane.ev_in)?;
                    cs_ok(
                        cs::cusolverDnXgeqrf(
                            lane.solver,
                            lane.params,
                            m as i64,
                            n as i64,
                            dtype_s(p),
                            dp::<c_void>(base, oa),
                            m.max(1) as i64,
                            dtype_s(p),
                            dp::<c_void>(base, ot),
                            dtype_s(p),
                            dp::<c_void>(base, owk),
                            dws,
                            lane.host_ws.as_mut_ptr() as *mut c_void,
                            hws,
                            dp::<i32>(base, oi),
                        ),
                        "cusolverDnXgeqrf",
                    )?;
                    lane.download(base + oa as u64, out_a, packed(&a), lane.compute)?;
                    lane.download(base + ot as u64, out_t, mn * es, lane.compute)?;
                    lane.download(base + oi as u64, out_i, 4, lane.compute)?;
                    outs.push((out_a, a, es));
                    outs.push((out_t, HostMat::new(tau, mn, 1, mn.max(1)), es));
                    infos.push(out_i);
                }
                // routines without a GPU path yet: `unsupported` keeps them on the CPU
                _ => {
                    return Err(fail(
                        GpuFailKind::Error,
                        format!("{} has no GPU path", call.name()),
                    ))
                }
            }
        }
        lane.sync_all()?;
        for off in &infos {
            // SAFETY: `off` is inside the pinned output buffer; the streams are synchronised.
            let info = unsafe { (lane.out.ptr.add(*off) as *const i32).read_unaligned() };
            if info != 0 {
                return Err(fail(
                    GpuFailKind::Info,
                    format!("{}: info = {info}", call.name()),
                ));
            }
        }
        if let Some((err, off, dim)) = polar_check {
            // SAFETY: the singular values (descending) are in the pinned buffer at `off`.
            let smax = unsafe {
                if p.real_size() == 4 {
                    (lane.out.ptr.add(off) as *const f32).read_unaligned() as f64
                } else {
                    (lane.out.ptr.add(off) as *const f64).read_unaligned()
                }
            };
            let eps = if p.real_size() == 4 {
                f32::EPSILON as f64
            } else {
                f64::EPSILON
            };
            if !err.is_finite() || !smax.is_finite() || err > eps * dim as f64 * smax {
                return Ok(Done::RetryQr);
            }
        }
        match inject {
            Inject::Info => return Err(fail(GpuFailKind::Injected, "injected info = 1")),
            Inject::Error => return Err(fail(GpuFailKind::Injected, "injected CUDA error")),
            _ => {}
        }
        // Success: now, and only now, the caller's buffers are written.
        for (off, m, es) in outs {
            // SAFETY: the pinned buffer holds the packed matrix at `off`; `m` is the caller's.
            unsafe { unpack(lane.out.ptr.add(off), &m, es) };
        }
        if let Some((off, piv, len)) = piv_out {
            // SAFETY: `len` i64 pivots at `off`; the caller's vector holds `len` integers.
            unsafe { write_piv(lane.out.ptr.add(off) as *const i64, piv, len) };
        }
        Ok(Done::Ok)
    }

    /// Sizes the lane's arena and pinned output for a layout; returns the arena base. In a
    /// sizing-only run ([`GpuBackend::presize`]) it records the layout and stops the call here,
    /// before any host pointer is read.
    fn prepare(&self, lane: &mut Lane, lay: &Layout) -> GResult<cu::CUdeviceptr> {
        if let Some(slot) = lane.sizing.as_mut() {
            *slot = Some(*lay);
            return Err(fail(GpuFailKind::Error, SIZING_ONLY));
        }
        if lay.out > lane.out.size {
            lane.sync_all()?;
            lane.out.ensure(lay.out)?;
        }
        lane.ensure_arena(lay.dev)
    }

    /// Runs `launch(lane, j0, j1)` over column blocks of an `rows x n` output, so that the upload
    /// of one block, the compute of the previous one and the download of the one before overlap.
    fn column_pipeline(
        &self,
        lane: &mut Lane,
        n: usize,
        rows: usize,
        chunkable: bool,
        mut launch: impl FnMut(&mut Lane, usize, usize) -> GResult<()>,
    ) -> GResult<()> {
        let bytes = n * rows * 8;
        let blocks = if chunkable {
            (bytes / (48 << 20)).clamp(1, 8).min(n.max(1))
        } else {
            1
        };
        let per = n.div_ceil(blocks).max(1);
        let mut j0 = 0;
        while j0 < n {
            let j1 = (j0 + per).min(n);
            launch(lane, j0, j1)?;
            j0 = j1;
        }
        Ok(())
    }

    fn ws_getrf(
        &self,
        lane: &mut Lane,
        p: Precision,
        m: usize,
        n: usize,
    ) -> GResult<(usize, usize)> {
        let (mut d, mut h) = (0usize, 0usize);
        cs_ok(
            // SAFETY: size query with null matrix pointers (allowed by cuSOLVER).
            unsafe {
                cs::cusolverDnXgetrf_bufferSize(
                    lane.solver,
                    lane.params,
                    m as i64,
                    n as i64,
                    dtype_s(p),
                    std::ptr::null(),
                    m.max(1) as i64,
                    dtype_s(p),
                    &mut d,
                    &mut h,
                )
            },
            "cusolverDnXgetrf_bufferSize",
        )?;
        lane.host_ws.resize(h.max(1), 0);
        Ok((d, h))
    }

    fn ws_potrf(
        &self,
        lane: &mut Lane,
        p: Precision,
        uplo: Uplo,
        n: usize,
    ) -> GResult<(usize, usize)> {
        let (mut d, mut h) = (0usize, 0usize);
        cs_ok(
            // SAFETY: size query.
            unsafe {
                cs::cusolverDnXpotrf_bufferSize(
                    lane.solver,
                    lane.params,
                    fill_s(uplo),
                    n as i64,
                    dtype_s(p),
                    std::ptr::null(),
                    n.max(1) as i64,
                    dtype_s(p),
                    &mut d,
                    &mut h,
                )
            },
            "cusolverDnXpotrf_bufferSize",
        )?;
        lane.host_ws.resize(h.max(1), 0);
        Ok((d, h))
    }

    #[allow(clippy::too_many_arguments)]
    fn getrf(
        &self,
        lane: &mut Lane,
        p: Precision,
        m: usize,
        n: usize,
        base: u64,
        oa: usize,
        op: usize,
        oi: usize,
        ow: usize,
        ws: (usize, usize),
    ) -> GResult<()> {
        cs_ok(
            // SAFETY: device pointers inside the arena sized for this layout; host workspace sized by
            // ws_getrf.
            unsafe {
                cs::cusolverDnXgetrf(
                    lane.solver,
                    lane.params,
                    m as i64,
                    n as i64,
                    dtype_s(p),
                    dp::<c_void>(base, oa),
                    m.max(1) as i64,
                    dp::<i64>(base, op),
                    dtype_s(p),
                    dp::<c_void>(base, ow),
                    ws.0,
                    lane.host_ws.as_mut_ptr() as *mut c_void,
                    ws.1,
                    dp::<i32>(base, oi),
                )
            },
            "cusolverDnXgetrf",
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn potrf(
        &self,
        lane: &mut Lane,
        p: Precision,
        uplo: Uplo,
        n: usize,
        base: u64,
        oa: usize,
        oi: usize,
        ow: usize,
        ws: (usize, usize),
    ) -> GResult<()> {
        cs_ok(
            // SAFETY: as in getrf.
            unsafe {
                cs::cusolverDnXpotrf(
                    lane.solver,
                    lane.params,
                    fill_s(uplo),
                    n as i64,
                    dtype_s(p),
                    dp::<c_void>(base, oa),
                    n.max(1) as i64,
                    dtype_s(p),
                    dp::<c_void>(base, ow),
                    ws.0,
                    lane.host_ws.as_mut_ptr() as *mut c_void,
                    ws.1,
                    dp::<i32>(base, oi),
                )
            },
            "cusolverDnXpotrf",
        )
    }

    /// Measures staging throughput: `(h2d bytes/s, d2h bytes/s)` for a `bytes`-sized pageable
    /// buffer, as the backend copies it (pack + DMA, DMA + unpack).
    pub fn measure_copies(&self, bytes: usize) -> crate::Result<(f64, f64)> {
        let err = |e: GpuFail| crate::Error::Gpu {
            what: "copy calibration",
            detail: e.to_string(),
        };
        self.ctx.bind_to_thread().map_err(|e| crate::Error::Gpu {
            what: "copy calibration",
            detail: e.to_string(),
        })?;
        let mut lane = match self.lanes.lock().pop() {
            Some(l) => l,
            None => Lane::new().map_err(err)?,
        };
        let mut host = vec![1u8; bytes];
        let m = HostMat::new(host.as_mut_ptr(), bytes, 1, bytes);
        let r = (|| -> GResult<(f64, f64)> {
            let mut lay = Layout::default();
            let o = lay.dev(bytes);
            let oo = lay.out(bytes);
            let base = self.prepare(&mut lane, &lay)?;
            let mut best = (f64::MAX, f64::MAX);
            for _ in 0..3 {
                let t = std::time::Instant::now();
                lane.upload(&m, 1, base + o as u64)?;
                lane.sync_all()?;
                best.0 = best.0.min(t.elapsed().as_secs_f64());
                let t = std::time::Instant::now();
                lane.download(base + o as u64, oo, bytes, lane.d2h)?;
                lane.sync_all()?;
                // SAFETY: pinned buffer holds `bytes` at `oo`; `m` is our vector.
                unsafe { unpack(lane.out.ptr.add(oo), &m, 1) };
                best.1 = best.1.min(t.elapsed().as_secs_f64());
            }
            Ok((bytes as f64 / best.0, bytes as f64 / best.1))
        })();
        self.lanes.lock().push(lane);
        r.map_err(err)
    }
}

fn compute_type(p: Precision) -> cb::cublasComputeType_t {
    match p {
        Precision::S | Precision::C => cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        Precision::D | Precision::Z => cb::cublasComputeType_t::CUBLAS_COMPUTE_64F,
    }
}

fn as_bytes(v: &[i64]) -> &[u8] {
    // SAFETY: i64 has no padding; the byte view covers exactly the vector.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// # Safety
/// `piv` holds `len` integers.
unsafe fn read_piv(piv: Piv, len: usize) -> Vec<i64> {
    (0..len)
        .map(|j| {
            // SAFETY: caller contract.
            unsafe {
                match piv {
                    Piv::I32(p) => *p.add(j) as i64,
                    Piv::I64(p) => *p.add(j),
                }
            }
        })
        .collect()
}

/// # Safety
/// `src` holds `len` i64; `piv` holds `len` integers.
unsafe fn write_piv(src: *const i64, piv: Piv, len: usize) {
    for j in 0..len {
        // SAFETY: caller contract.
        unsafe {
            let v = src.add(j).read_unaligned();
            match piv {
                Piv::I32(p) => *p.add(j) = v as i32,
                Piv::I64(p) => *p.add(j) = v,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn presize_reserves_the_largest_need_within_the_pinned_bound() {
        // dgesv 6000 nrhs 200 (A and B come back) and sgemm 6000^3 (C comes back)
        let gesv = (300 * MIB, 298 * MIB);
        let sgemm = (432 * MIB, 144 * MIB);
        assert_eq!(
            presize_plan(&[gesv, sgemm], 0, 32 * MIB, PRESIZE_PINNED_MAX),
            (Some(432 * MIB), Some(298 * MIB))
        );
        // already large enough: nothing
        assert_eq!(
            presize_plan(&[gesv], 512 * MIB, 320 * MIB, PRESIZE_PINNED_MAX),
            (None, None)
        );
        // a call whose output is over the bound gets no pinned reservation (a smaller one
        // would not spare it the growth); the device arena is still sized
        let huge = (3000 * MIB, 1500 * MIB);
        assert_eq!(
            presize_plan(&[huge], 0, 32 * MIB, PRESIZE_PINNED_MAX),
            (Some(3000 * MIB), None)
        );
        assert_eq!(
            presize_plan(&[huge, gesv], 0, 32 * MIB, PRESIZE_PINNED_MAX),
            (Some(3000 * MIB), Some(298 * MIB))
        );
        // never more than a call needs
        assert_eq!(presize_plan(&[], 0, 0, PRESIZE_PINNED_MAX), (None, None));
        assert_eq!(
            presize_plan(&[(MIB, MIB)], 0, 0, PRESIZE_PINNED_MAX),
            (Some(MIB), Some(MIB))
        );
    }
}
