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

use crate::call::{HostMat, Piv};
use crate::gpu::fail::{cu_ok, fail, GResult, GpuFail, GpuFailKind, Inject};
use crate::gpu::flags::real_value;
use crate::gpu::lane::{Lane, Raw};
use crate::gpu::layout::Layout;
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
    /// A packed device matrix into the caller's matrix.
    Mat {
        dev: usize,
        host: HostMat,
        es: usize,
        in_place: bool,
    },
    /// `len` 64-bit pivots into the caller's integer vector.
    Piv { dev: usize, piv: Piv, len: usize },
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
    /// The call's device memory (from the device allocator; back to its cache on drop,
    /// ordered after the lane's three streams).
    _arena: DeviceBuffer,
    /// Element type.
    pub(crate) p: Precision,
    /// Bytes per element.
    pub(crate) es: usize,
    base: cu::CUdeviceptr,
    status_base: usize,
    status_len: usize,
    infos: Vec<(usize, &'static str)>,
    /// Non-finite check sums: (status offset, operand, whether the check reads an input).
    finite: Vec<(usize, &'static str, bool)>,
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
        let arena = backend.device_memory(lay.total(), lane)?;
        let base = arena.ptr();
        if lay.status_len() > 0 {
            cu_ok(
                // SAFETY: the status region lies inside the buffer allocated for `lay`.
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
            _arena: arena,
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

    /// Queues the upload of a caller's matrix (packed) to arena offset `off`.
    ///
    /// # Safety
    /// `m` is readable for its extent (the call's contract).
    pub(crate) unsafe fn upload(&mut self, m: &HostMat, off: usize) -> GResult<()> {
        let dst = self.addr(off);
        let (es, h2d) = (self.es, self.lane.h2d);
        // SAFETY: forwarded; the copies finish before `run` returns (finish synchronises).
        unsafe { self.lane.staging.upload(m, es, dst, h2d) }
    }

    /// Queues the upload of host bytes (pivots, constants) to arena offset `off`. The bytes
    /// are staged before this returns, so `src` may be dropped afterwards.
    pub(crate) fn upload_bytes(&mut self, src: &[u8], off: usize) -> GResult<()> {
        let dst = self.addr(off);
        let h2d = self.lane.h2d;
        // SAFETY: `dst` lies in the arena sized for the layout; `write` packs `src` into a
        // pinned slot before returning.
        unsafe { self.lane.staging.write(src, dst, h2d) }
    }

    /// Makes the compute stream wait for the uploads queued so far.
    pub(crate) fn inputs_ready(&self) -> GResult<()> {
        self.lane.inputs_ready()
    }

    /// Registers a LAPACK `info` (an `i32` at status offset `off`): non-zero fails the call.
    pub(crate) fn info(&mut self, off: usize, what: &'static str) {
        self.infos.push((off, what));
    }

    /// Registers a non-finite check's sum (a real at status offset `off`).
    pub(crate) fn finite_sum(&mut self, off: usize, what: &'static str) {
        // A check registered before any routine's `info` reads the call's inputs.
        let input = self.infos.is_empty();
        self.finite.push((off, what, input));
    }

    /// Registers an output the routine does not read: the packed device matrix at `dev`
    /// goes into `host` (elements of `es` bytes).
    pub(crate) fn output(&mut self, dev: usize, host: HostMat, es: usize) {
        self.outs.push(Out::Mat {
            dev,
            host,
            es,
            in_place: false,
        });
    }

    /// Registers an in-place operand's result (the routine read `host` as an input).
    pub(crate) fn output_in_place(&mut self, dev: usize, host: HostMat, es: usize) {
        self.outs.push(Out::Mat {
            dev,
            host,
            es,
            in_place: true,
        });
    }

    /// Registers `len` 64-bit device pivots for the caller's pivot vector.
    pub(crate) fn output_piv(&mut self, dev: usize, piv: Piv, len: usize) {
        self.outs.push(Out::Piv { dev, piv, len });
    }

    /// Registers integers computed on the host for the caller's integer vector `out`.
    pub(crate) fn output_ints(&mut self, values: Vec<i64>, out: Piv) {
        self.outs.push(Out::Ints { values, out });
    }

    /// Reads the checks of the inputs now (after they ran on the compute stream), before any
    /// routine is queued: non-finite data goes to the CPU library without the GPU routine
    /// ever running on it (cuSOLVER's iterative eigen- and SVD solvers are not made to meet
    /// NaN). Costs one synchronisation and one small copy per call that has input checks.
    pub(crate) fn verify_inputs(&mut self) -> GResult<()> {
        // once a routine is queued the checks being added read its results (see finite_sum)
        if !self.infos.is_empty() || !self.finite.iter().any(|&(_, _, input)| input) {
            return Ok(());
        }
        self.lane.sync_all()?;
        let src = self.addr(self.status_base);
        let d2h = self.lane.d2h;
        // SAFETY: the status region lies in the arena; every stream is idle.
        let bytes = unsafe { self.lane.staging.read(src, self.status_len, d2h)? };
        let st = Status { bytes, p: self.p };
        for &(off, what, input) in &self.finite {
            let v = st.real(off);
            if input && !v.is_finite() {
                return Err(fail(
                    GpuFailKind::NonFinite,
                    format!("{what} holds NaN or infinity (check sum {v})"),
                ));
            }
        }
        Ok(())
    }

    /// Waits for the call's device work and checks it: every `info` must be 0 and every
    /// non-finite check finite. Returns the status words for the routine's own checks.
    pub(crate) fn finish(&mut self) -> GResult<Status> {
        self.finish_with(|_| Ok(()))
    }

    /// [`Exec::finish`] with a routine check. Order: the checks of the inputs (non-finite data
    /// goes to the CPU library whatever the GPU routine said of it), the `info`s, the routine
    /// check, then the checks of the results (a zero pivot gives LAPACK's `info`, not a
    /// non-finite result).
    pub(crate) fn finish_with(
        &mut self,
        check: impl FnOnce(&Status) -> GResult<()>,
    ) -> GResult<Status> {
        self.lane.sync_all()?;
        let bytes = if self.status_len > 0 {
            let src = self.addr(self.status_base);
            let d2h = self.lane.d2h;
            // SAFETY: the status region lies in the arena; every stream is idle.
            unsafe { self.lane.staging.read(src, self.status_len, d2h)? }
        } else {
            Vec::new()
        };
        let st = Status { bytes, p: self.p };
        let non_finite = |input: bool| -> GResult<()> {
            for &(off, what, is_input) in &self.finite {
                let v = st.real(off);
                if is_input == input && !v.is_finite() {
                    return Err(fail(
                        GpuFailKind::NonFinite,
                        format!("{what} holds NaN or infinity (check sum {v})"),
                    ));
                }
            }
            Ok(())
        };
        // Non-finite inputs first: whatever `info` the GPU routine gave them, LAPACK's answer to
        // such data comes from the CPU library (an `info` of theirs is not LAPACK's).
        non_finite(true)?;
        for &(off, what) in &self.infos {
            let info = st.int(off);
            if info != 0 {
                return Err(fail(GpuFailKind::Info, format!("{what}: info = {info}")));
            }
        }
        check(&st)?;
        non_finite(false)?;
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
        let mut outs = std::mem::take(&mut self.outs);
        outs.sort_by_key(|o| matches!(o, Out::Mat { in_place: true, .. }));
        let mut touched = false;
        for o in outs {
            let r = match o {
                Out::Mat {
                    dev,
                    host,
                    es,
                    in_place,
                } => {
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
                Out::Piv { dev, piv, len } => self.write_piv(dev, piv, len),
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
                return Err(if touched { lost(e) } else { e });
            }
        }
        Ok(())
    }

    fn write_piv(&mut self, dev: usize, piv: Piv, len: usize) -> GResult<()> {
        let (src, d2h) = (self.addr(dev), self.lane.d2h);
        // SAFETY: `len` i64 at `src`; streams idle.
        let bytes = unsafe { self.lane.staging.read(src, 8 * len, d2h)? };
        for (j, c) in bytes.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            let v = i64::from_ne_bytes(b);
            // SAFETY: the caller's pivot vector holds `len` integers (call contract).
            unsafe {
                match piv {
                    Piv::I32(p) => *p.add(j) = v as i32,
                    Piv::I64(p) => *p.add(j) = v,
                }
            }
        }
        Ok(())
    }
}

impl Exec<'_> {
    /// Reads `len` bytes at arena offset `off` now, synchronising the lane first (for the
    /// routines that decide on the host in the middle of a call: gelsd's rank).
    pub(crate) fn read_now(&mut self, off: usize, len: usize) -> GResult<Vec<u8>> {
        self.lane.sync_all()?;
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
