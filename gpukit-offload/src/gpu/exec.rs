//! One call's life on a lane: lay out, upload, compute, check, and only then write the
//! caller's buffers.
//!
//! A routine's launch code (the sibling modules) builds a [`Layout`], starts an [`Exec`] with
//! it, queues uploads and library calls, registers what must be checked (LAPACK `info`s, the
//! non-finite checks of [`crate::gpu::finite`]) and what goes back to the caller, then calls
//! [`Exec::finish`] (synchronise, read every status word, fail on any `info != 0` or
//! non-finite value) and [`Exec::commit`] (copy the results into the caller's matrices). So
//! any failure before the commit leaves the caller's buffers untouched and the CPU can run the
//! call on the original inputs. Outputs the routine does not read are written first and
//! in-place operands last: a device failure during the commit is recoverable until the first
//! in-place operand is touched, and [`GpuFailKind::Lost`] after that.
//!
//! The fixed cost of a call: a call whose layout fits the lane's arena allocates nothing; its
//! operands go up from the lane's pinned bounce buffer with one async copy each, on the compute
//! stream; [`Exec::finish`] queues one async copy per result and one of the status words into
//! the bounce buffer behind the routines, then synchronises once, and [`Exec::commit`] only
//! unpacks on the host. Operands too large for the bounce buffer go through the pipelined
//! staging of [`crate::gpu::staging`] (the upload stream, and copies out after the check).

use crate::call::{HostMat, Piv};
use crate::gpu::fail::{cu_ok, fail, GResult, GpuFail, GpuFailKind, Inject};
use crate::gpu::finite::flagged;
use crate::gpu::flags::real_value;
use crate::gpu::kernels::MAX_OPERANDS;
use crate::gpu::lane::{Lane, Raw, LANE_ARENA_MAX, LANE_ARENA_MIN};
use crate::gpu::layout::Layout;
use crate::gpu::phases::Phase;
use crate::gpu::staging::{pack, packed_bytes, unpack};
use crate::gpu::GpuBackend;
use crate::ops::Precision;
use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;
use gpukit_core::DeviceBuffer;

/// The detail of the failure a sizing-only run stops with.
pub(crate) const SIZING_ONLY: &str = "sizing only";

/// What goes back to the caller once every check passed.
enum Out {
    /// A packed device matrix into the caller's matrix (`staged`: already copied into the
    /// bounce buffer at that offset by [`Exec::finish`]).
    Mat {
        dev: usize,
        host: HostMat,
        es: usize,
        in_place: bool,
        staged: Option<usize>,
    },
    /// `len` 64-bit pivots into the caller's integer vector.
    Piv {
        dev: usize,
        piv: Piv,
        len: usize,
        staged: Option<usize>,
    },
    /// Integers computed on the host (rank, eigenvalues found, supports).
    Ints { values: Vec<i64>, out: Piv },
}

/// The status words after [`Exec::finish`]: the routine's own checks read them.
pub(crate) struct Status {
    bytes: Vec<u8>,
    p: Precision,
}

impl Status {
    /// The `i32` at status offset `off`.
    pub(crate) fn int(&self, off: usize) -> i32 {
        let b = &self.bytes[off..off + 4];
        i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The real value (the call's real type) at status offset `off`.
    pub(crate) fn real(&self, off: usize) -> f64 {
        real_value(&self.bytes[off..], self.p)
    }

    /// The flag word at status offset `off`.
    pub(crate) fn flag(&self, off: usize) -> u32 {
        self.int(off) as u32
    }

    /// The raw bytes from status offset `off`.
    pub(crate) fn bytes(&self, off: usize, len: usize) -> &[u8] {
        &self.bytes[off..off + len]
    }
}

/// One call in flight on a lane.
pub(crate) struct Exec<'a> {
    pub(crate) backend: &'a GpuBackend,
    pub(crate) lane: &'a mut Lane,
    raw: Raw,
    /// The call's device memory when it does not fit the lane's arena (from the device
    /// allocator, charged to the caller's owner; back to its cache on drop, ordered after the
    /// streams that used it).
    arena: Option<DeviceBuffer>,
    /// Uploads were queued on the upload stream since the compute stream last waited for it.
    pending_h2d: bool,
    /// The upload stream was used by this call.
    used_h2d: bool,
    /// A part of a split call: commits only when every part may (dropped uncommitted, it
    /// tells the others not to).
    arrival: Option<crate::gpu::devices::Arrival>,
    /// Element type.
    pub(crate) p: Precision,
    /// Bytes per element.
    pub(crate) es: usize,
    base: cu::CUdeviceptr,
    status_base: usize,
    status_len: usize,
    infos: Vec<(usize, &'static str)>,
    /// Non-finite check flags: (status offset, the operands' names, whether they are inputs).
    finite: Vec<(usize, [&'static str; MAX_OPERANDS], bool)>,
    outs: Vec<Out>,
}

impl<'a> Exec<'a> {
    /// Sizes the lane for `lay` and starts the call. In a sizing-only run
    /// ([`GpuBackend::presize`]) it records the layout and stops here, before any host
    /// pointer of the call is read.
    pub(crate) fn begin(
        backend: &'a GpuBackend,
        lane: &'a mut Lane,
        p: Precision,
        lay: &Layout,
    ) -> GResult<Exec<'a>> {
        if let Some(slot) = lane.sizing.as_mut() {
            *slot = Some(*lay);
            return Err(fail(GpuFailKind::Error, SIZING_ONLY));
        }
        let raw = lane.raw()?;
        lane.mark(Phase::Launch);
        lane.dirty = true;
        let arrival = lane.gate.take();
        if lane.bounce.ensure()? {
            lane.clock.t.allocations += 1;
        }
        lane.bounce.reset();
        let total = lay.total();
        let (arena, base) = if total <= LANE_ARENA_MAX {
            if lane.arena.as_ref().is_none_or(|a| a.len_bytes() < total) {
                // the old arena was last used by a finished call on the compute stream
                lane.arena = None;
                let size = total
                    .max(LANE_ARENA_MIN)
                    .next_power_of_two()
                    .min(LANE_ARENA_MAX);
                lane.arena = Some(backend.lane_arena(size, lane)?);
                lane.clock.t.allocations += 1;
            }
            let base = lane.arena.as_ref().map_or(0, |a| a.ptr());
            (None, base)
        } else {
            let b = backend.device_block(total, lane)?;
            lane.clock.t.allocations += 1;
            let base = b.ptr();
            (Some(b), base)
        };
        lane.mark(Phase::Alloc);
        if lay.status_len() > 0 {
            cu_ok(
                // SAFETY: the status region lies inside the arena laid out for `lay`.
                unsafe {
                    cu::cuMemsetD8Async(
                        base + lay.status_base() as u64,
                        0,
                        lay.status_len(),
                        lane.compute_raw,
                    )
                },
                "status reset",
            )?;
        }
        Ok(Exec {
            backend,
            lane,
            raw,
            arena,
            pending_h2d: false,
            used_h2d: false,
            arrival,
            p,
            es: p.size(),
            base,
            status_base: lay.status_base(),
            status_len: lay.status_len(),
            infos: Vec::new(),
            finite: Vec::new(),
            outs: Vec::new(),
        })
    }

    /// Orders the arena's reuse after `stream` (one of the lane's transfer streams, about to
    /// use it).
    fn record(&mut self, h2d: bool) {
        let [up, down] = self.lane.transfer_streams();
        let s = if h2d { up } else { down };
        match &self.arena {
            Some(b) => b.record_stream(s),
            None => {
                if let Some(a) = &self.lane.arena {
                    a.record_stream(s)
                }
            }
        }
    }

    /// The arena offset of status offset `off`.
    pub(crate) fn status_offset(&self, off: usize) -> usize {
        self.status_base + off
    }

    /// Device address of arena offset `off`.
    pub(crate) fn addr(&self, off: usize) -> cu::CUdeviceptr {
        self.base + off as u64
    }

    /// Typed device pointer at arena offset `off`.
    pub(crate) fn ptr<T>(&self, off: usize) -> *mut T {
        self.addr(off) as usize as *mut T
    }

    /// Typed device pointer at status offset `off`.
    pub(crate) fn status_ptr<T>(&self, off: usize) -> *mut T {
        self.ptr(self.status_base + off)
    }

    /// The lane's cuBLAS handle (held locked by this call).
    pub(crate) fn blas(&self) -> cb::cublasHandle_t {
        self.raw.blas
    }

    /// The lane's cuSOLVER handle and parameters (held locked by this call).
    pub(crate) fn solver(&self) -> GResult<(cs::cusolverDnHandle_t, cs::cusolverDnParams_t)> {
        self.raw
            .solver
            .ok_or_else(|| fail(GpuFailKind::Error, "cuSOLVER handle not held by this call"))
    }

    /// Host workspace of at least `bytes` (cuSOLVER's `bufferOnHost`).
    pub(crate) fn host_ws(&mut self, bytes: usize) -> *mut std::ffi::c_void {
        if self.lane.host_ws.len() < bytes.max(1) {
            self.lane.host_ws.resize(bytes.max(1), 0);
        }
        self.lane.host_ws.as_mut_ptr() as *mut std::ffi::c_void
    }

    /// Queues the upload of a caller's matrix (packed) to arena offset `off`: one async copy
    /// from the bounce buffer on the compute stream when it fits there, else the pipelined
    /// staging on the upload stream (the compute stream waits for it at
    /// [`Exec::inputs_ready`]).
    ///
    /// # Safety
    /// `m` is readable for its extent (the call's contract).
    pub(crate) unsafe fn upload(&mut self, m: &HostMat, off: usize) -> GResult<()> {
        self.lane.mark(Phase::Launch);
        let dst = self.addr(off);
        let es = self.es;
        let bytes = packed_bytes(m, es);
        let r = if bytes == 0 {
            Ok(())
        } else if let Some(b) = self.lane.bounce.take(bytes) {
            let src = self.lane.bounce.at(b);
            // SAFETY: `m` is readable (contract); the bounce range holds `bytes` and no queued
            // copy uses it (handed out for this call).
            unsafe { pack(m, es, src) };
            self.lane.clock.t.copies_in += 1;
            cu_ok(
                // SAFETY: pinned source of `bytes`; destination inside the arena.
                unsafe {
                    cu::cuMemcpyHtoDAsync_v2(
                        dst,
                        src as *const std::ffi::c_void,
                        bytes,
                        self.lane.compute_raw,
                    )
                },
                "host-to-device copy",
            )
        } else {
            self.record(true);
            self.pending_h2d = true;
            self.used_h2d = true;
            self.lane.clock.t.copies_in += 1;
            let h2d = self.lane.h2d;
            // SAFETY: forwarded; the copies finish before `run` returns (finish synchronises).
            unsafe { self.lane.staging.upload(m, es, dst, h2d) }
        };
        self.lane.mark(Phase::CopyIn);
        r
    }

    /// Queues the upload of host bytes (pivots, constants) to arena offset `off`. The bytes
    /// are staged before this returns, so `src` may be dropped afterwards.
    pub(crate) fn upload_bytes(&mut self, src: &[u8], off: usize) -> GResult<()> {
        let m = HostMat::input(src.as_ptr(), src.len(), 1, src.len().max(1));
        // SAFETY: `src` is readable for its length; it is packed (into the bounce buffer or a
        // staging slot) before this returns.
        unsafe { self.upload(&m, off) }
    }

    /// Makes the compute stream wait for the uploads queued on the upload stream so far (the
    /// small ones are on the compute stream already).
    pub(crate) fn inputs_ready(&mut self) -> GResult<()> {
        if !self.pending_h2d {
            return Ok(());
        }
        self.pending_h2d = false;
        self.lane.inputs_ready()
    }

    /// Registers a LAPACK `info` (an `i32` at status offset `off`): non-zero fails the call.
    pub(crate) fn info(&mut self, off: usize, what: &'static str) {
        self.infos.push((off, what));
    }

    /// Registers a non-finite check's flag word (status offset `off`, bit k for operand
    /// `names[k]`); `input`: the flags of a routine's inputs, read before everything else.
    pub(crate) fn finite_flag(
        &mut self,
        off: usize,
        names: [&'static str; MAX_OPERANDS],
        input: bool,
    ) {
        self.finite.push((off, names, input));
    }

    /// Registers an output the routine does not read: the packed device matrix at `dev`
    /// goes into `host` (elements of `es` bytes).
    pub(crate) fn output(&mut self, dev: usize, host: HostMat, es: usize) {
        self.outs.push(Out::Mat {
            dev,
            host,
            es,
            in_place: false,
            staged: None,
        });
    }

    /// Registers an in-place operand's result (the routine read `host` as an input).
    pub(crate) fn output_in_place(&mut self, dev: usize, host: HostMat, es: usize) {
        self.outs.push(Out::Mat {
            dev,
            host,
            es,
            in_place: true,
            staged: None,
        });
    }

    /// Registers `len` 64-bit device pivots for the caller's pivot vector.
    pub(crate) fn output_piv(&mut self, dev: usize, piv: Piv, len: usize) {
        self.outs.push(Out::Piv {
            dev,
            piv,
            len,
            staged: None,
        });
    }

    /// Registers integers computed on the host for the caller's integer vector `out`.
    pub(crate) fn output_ints(&mut self, values: Vec<i64>, out: Piv) {
        self.outs.push(Out::Ints { values, out });
    }

    /// Waits for the call's device work and checks it: every `info` must be 0 and every
    /// non-finite check finite. Returns the status words for the routine's own checks.
    pub(crate) fn finish(&mut self) -> GResult<Status> {
        self.finish_with(|_| Ok(()))
    }

    /// Queues the copies of the results that fit the bounce buffer and of the status words
    /// behind the routines, synchronises once, and checks. Order of the checks: the inputs'
    /// flags (non-finite data goes to the CPU library whatever the GPU routine said of it),
    /// the `info`s, the routine check, then the results' flags (a zero pivot gives LAPACK's
    /// `info`, not a non-finite result).
    pub(crate) fn finish_with(
        &mut self,
        check: impl FnOnce(&Status) -> GResult<()>,
    ) -> GResult<Status> {
        self.lane.mark(Phase::Launch);
        let compute = self.lane.compute_raw;
        let base = self.base;
        let mut outs = std::mem::take(&mut self.outs);
        let mut queued = Ok(());
        for o in outs.iter_mut() {
            let (dev, bytes, staged) = match o {
                Out::Mat {
                    dev,
                    host,
                    es,
                    staged,
                    ..
                } => (*dev, packed_bytes(host, *es), staged),
                Out::Piv {
                    dev, len, staged, ..
                } => (*dev, 8 * *len, staged),
                Out::Ints { .. } => continue,
            };
            if let Some(b) = self.lane.bounce.take(bytes) {
                queued = d2h(self.lane.bounce.at(b), base + dev as u64, bytes, compute);
                if queued.is_err() {
                    break;
                }
                self.lane.clock.t.copies_out += 1;
                *staged = Some(b);
            }
        }
        self.outs = outs;
        queued?;
        let status_at = if self.status_len > 0 {
            let b = self.lane.bounce.take(self.status_len);
            if let Some(b) = b {
                d2h(
                    self.lane.bounce.at(b),
                    self.addr(self.status_base),
                    self.status_len,
                    compute,
                )?;
                self.lane.clock.t.copies_out += 1;
            }
            b
        } else {
            None
        };
        self.lane.mark(Phase::CopyOut);
        self.lane.sync_compute(self.used_h2d)?;
        let bytes = match status_at {
            Some(b) => {
                // SAFETY: the bounce range holds the status words, copied before the sync.
                unsafe { std::slice::from_raw_parts(self.lane.bounce.at(b), self.status_len) }
                    .to_vec()
            }
            None if self.status_len > 0 => {
                self.record(false);
                let src = self.addr(self.status_base);
                let d2h = self.lane.d2h;
                self.lane.clock.t.copies_out += 1;
                self.lane.clock.t.syncs += 1;
                // SAFETY: the status region lies in the arena; every stream is idle.
                unsafe { self.lane.staging.read(src, self.status_len, d2h)? }
            }
            None => Vec::new(),
        };
        let st = Status { bytes, p: self.p };
        let non_finite = |input: bool| -> GResult<()> {
            for &(off, ref names, is_input) in &self.finite {
                if is_input != input {
                    continue;
                }
                if let Some(what) = flagged(st.flag(off), names) {
                    return Err(fail(
                        GpuFailKind::NonFinite,
                        format!("{what} holds NaN or infinity"),
                    ));
                }
            }
            Ok(())
        };
        // Non-finite inputs first: whatever `info` the GPU routine gave them (it ran on the
        // guard's identity pattern), LAPACK's answer to such data comes from the CPU library.
        non_finite(true)?;
        for &(off, what) in &self.infos {
            let info = st.int(off);
            if info != 0 {
                return Err(fail(GpuFailKind::Info, format!("{what}: info = {info}")));
            }
        }
        check(&st)?;
        non_finite(false)?;
        self.lane.mark(Phase::Launch);
        Ok(st)
    }

    /// Writes the results into the caller's buffers (after [`Exec::finish`] and the routine's
    /// own checks): outputs first, in-place operands last.
    pub(crate) fn commit(mut self) -> GResult<()> {
        match self.backend.injected() {
            Inject::Info => return Err(fail(GpuFailKind::Injected, "injected info = 1")),
            Inject::Error => return Err(fail(GpuFailKind::Injected, "injected CUDA error")),
            _ => {}
        }
        if let Some(a) = self.arrival.take() {
            if !a.commit() {
                return Err(fail(
                    GpuFailKind::Error,
                    "another part of the split call failed: nothing written",
                ));
            }
        }
        self.lane.mark(Phase::Launch);
        let mut outs = std::mem::take(&mut self.outs);
        outs.sort_by_key(|o| matches!(o, Out::Mat { in_place: true, .. }));
        let mut touched = false;
        let mut result = Ok(());
        for o in outs {
            let r = match o {
                Out::Mat {
                    host,
                    es,
                    in_place,
                    staged: Some(b),
                    ..
                } => {
                    // SAFETY: `host` is the caller's writable matrix (call contract); the
                    // bounce range holds its packed result (copied before finish's sync).
                    unsafe { unpack(self.lane.bounce.at(b), &host, es) };
                    touched |= in_place;
                    Ok(())
                }
                Out::Mat {
                    dev,
                    host,
                    es,
                    in_place,
                    staged: None,
                } => {
                    self.record(false);
                    self.lane.clock.t.copies_out += 1;
                    let (src, d2h) = (self.addr(dev), self.lane.d2h);
                    // SAFETY: `host` is the caller's writable matrix (call contract); `src`
                    // holds its packed result and the streams are idle (finish).
                    let r = unsafe { self.lane.staging.copy_out(src, &host, es, d2h) };
                    r.map_err(|(e, written)| {
                        touched |= in_place && written;
                        e
                    })
                    .map(|()| touched |= in_place)
                }
                Out::Piv {
                    piv,
                    len,
                    staged: Some(b),
                    ..
                } => {
                    // SAFETY: the bounce range holds `len` pivots (copied before the sync).
                    let bytes =
                        unsafe { std::slice::from_raw_parts(self.lane.bounce.at(b), 8 * len) };
                    // SAFETY: the caller's pivot vector holds `len` integers (call contract).
                    unsafe { write_piv(bytes, piv) };
                    Ok(())
                }
                Out::Piv {
                    dev,
                    piv,
                    len,
                    staged: None,
                } => {
                    self.record(false);
                    self.lane.clock.t.copies_out += 1;
                    let (src, d2h) = (self.addr(dev), self.lane.d2h);
                    // SAFETY: `len` i64 at `src`; streams idle.
                    unsafe { self.lane.staging.read(src, 8 * len, d2h) }.map(|bytes| {
                        // SAFETY: the caller's pivot vector holds `len` integers.
                        unsafe { write_piv(&bytes, piv) }
                    })
                }
                Out::Ints { values, out } => {
                    for (j, v) in values.iter().enumerate() {
                        // SAFETY: the caller's integer vector holds `values.len()` integers
                        // (call contract).
                        unsafe {
                            match out {
                                Piv::I32(p) => *p.add(j) = *v as i32,
                                Piv::I64(p) => *p.add(j) = *v,
                            }
                        }
                    }
                    Ok(())
                }
            };
            let r = r.and_then(|()| {
                if touched && self.backend.injected() == Inject::Lost {
                    Err(fail(
                        GpuFailKind::Injected,
                        "injected failure of the copy out",
                    ))
                } else {
                    Ok(())
                }
            });
            if let Err(e) = r {
                result = Err(if touched { lost(e) } else { e });
                break;
            }
        }
        if result.is_ok() {
            // every copy of the call has finished: the lane is idle
            self.lane.dirty = false;
        }
        self.lane.mark(Phase::CopyOut);
        result
    }
}

/// Queues a device-to-host copy of `bytes` on `stream`.
fn d2h(dst: *mut u8, src: cu::CUdeviceptr, bytes: usize, stream: cu::CUstream) -> GResult<()> {
    cu_ok(
        // SAFETY: callers pass a pinned destination of `bytes` (a bounce range) and a source
        // inside the call's arena.
        unsafe { cu::cuMemcpyDtoHAsync_v2(dst as *mut std::ffi::c_void, src, bytes, stream) },
        "device-to-host copy",
    )
}

/// Writes 64-bit pivots (`bytes`, native order) into the caller's integer vector.
///
/// # Safety
/// `piv` holds `bytes.len() / 8` integers.
unsafe fn write_piv(bytes: &[u8], piv: Piv) {
    for (j, c) in bytes.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let v = i64::from_ne_bytes(b);
        // SAFETY: caller contract.
        unsafe {
            match piv {
                Piv::I32(p) => *p.add(j) = v as i32,
                Piv::I64(p) => *p.add(j) = v,
            }
        }
    }
}

impl Exec<'_> {
    /// Reads `len` bytes at arena offset `off` now, synchronising the lane first (for the
    /// routines that decide on the host in the middle of a call: gelsd's rank).
    pub(crate) fn read_now(&mut self, off: usize, len: usize) -> GResult<Vec<u8>> {
        self.lane.sync_compute(self.used_h2d)?;
        self.record(false);
        self.lane.clock.t.copies_out += 1;
        let (src, d2h) = (self.addr(off), self.lane.d2h);
        // SAFETY: `off..off+len` lies in the arena; every stream is idle.
        unsafe { self.lane.staging.read(src, len, d2h) }
    }

    /// Copies `count` elements every `stride` elements from arena offset `off` into the status
    /// region at `status` (a diagonal, for the routines that check it for exact zeros).
    pub(crate) fn status_strided(
        &self,
        off: usize,
        count: usize,
        stride: usize,
        status: usize,
    ) -> GResult<()> {
        let p = self.p;
        crate::gpu::fail::cb_ok(
            // SAFETY: the strided source and the status words lie in the arena (the caller's
            // layout); the handle is bound to the compute stream.
            unsafe {
                crate::gpu::flags::typed_blas!(
                    p,
                    cublasScopy_v2_64,
                    cublasDcopy_v2_64,
                    cublasCcopy_v2_64,
                    cublasZcopy_v2_64,
                    (
                        self.blas(),
                        count as i64,
                        self.ptr::<u8>(off),
                        stride as i64,
                        self.status_ptr::<u8>(status),
                        1i64
                    )
                )
            },
            "cublas copy (diagonal)",
        )
    }
}

/// The 1-based index of the first exactly zero element among `n` elements of precision `p`
/// (a zero pivot: LAPACK's `info` for getri and trtrs).
pub(crate) fn first_zero(bytes: &[u8], p: Precision, n: usize) -> Option<usize> {
    (0..n)
        .find(|&j| crate::gpu::flags::element(&bytes[j * p.size()..], p) == (0.0, 0.0))
        .map(|j| j + 1)
}

/// The failure after an in-place operand was (partly) written.
fn lost(e: GpuFail) -> GpuFail {
    fail(
        GpuFailKind::Lost,
        format!(
            "the device failed while the results were copied out ({e}); some of the caller's operands are already overwritten"
        ),
    )
}

/// Reads the caller's pivot vector as 64-bit integers (cuSOLVER's `X` API).
///
/// # Safety
/// `piv` holds `len` integers.
pub(crate) unsafe fn read_piv(piv: Piv, len: usize) -> Vec<i64> {
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

/// The bytes of an `i64` slice (no padding).
pub(crate) fn i64_bytes(v: &[i64]) -> &[u8] {
    // SAFETY: i64 has no padding; the byte view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}
