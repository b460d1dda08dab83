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
//! The fixed cost of a call: the status words lie first in the arena and the buffers after
//! them ([`Layout`]). A call whose operands fit the lane's arena (its library workspace laid
//! out last, up to [`LANE_ARENA_CAP`]) allocates nothing, and the lane's pinned bounce buffer
//! mirrors its arena: each operand is packed at its own arena offset, and the zeroed status
//! words and every operand uploaded before the first launch go up in one async copy on the
//! compute stream (an upload after device work was queued in a copy of its own, joined by
//! the adjacent ones; [`Batches`]). [`Exec::finish`] queues one async copy
//! back of each run of status words and results lying within [`COPY_GAP`] of each other
//! (usually one for the whole call), synchronises once, and [`Exec::commit`] only unpacks on
//! the host. Other calls take their device memory from the allocator; their operands that fit
//! go through their own ranges of the bounce buffer, larger ones through the pipelined
//! staging of [`crate::gpu::staging`] (the upload stream, and copies out after the check).
//! Every copy is checked against the call's buffers first ([`within`]): a copy past them
//! would overwrite the status words (the fixed-cost branch's byte uploads did, with the
//! element size applied twice: getri's flags read non-finite and gelsd read past a heap
//! block), and fails the call instead.

use crate::call::{HostMat, Piv};
use crate::gpu::fail::{cu_ok, fail, GResult, GpuFail, GpuFailKind, Inject};
use crate::gpu::finite::{flagged, Flagged, Operands};
use crate::gpu::flags::real_value;
use crate::gpu::lane::{Lane, Raw, LANE_ARENA_CAP, LANE_ARENA_MAX, LANE_ARENA_MIN};
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

/// What one upload reads from host memory.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Src<'s> {
    /// A caller's matrix of elements of the given size, packed on the way (`ld = rows` on the
    /// device).
    Mat(HostMat, usize),
    /// Host bytes as they are (pivots, constants): exactly `len()` bytes are read.
    Bytes(&'s [u8]),
}

impl Src<'_> {
    /// The source as a matrix and its element size (bytes: one column of 1-byte elements).
    pub(crate) fn as_mat(&self) -> (HostMat, usize) {
        match *self {
            Src::Mat(m, es) => (m, es),
            Src::Bytes(b) => (HostMat::input(b.as_ptr(), b.len(), 1, b.len().max(1)), 1),
        }
    }

    /// The bytes the upload reads from the host and writes to the device.
    pub(crate) fn bytes(&self) -> usize {
        let (m, es) = self.as_mat();
        packed_bytes(&m, es)
    }

    /// Packs the source into `dst`.
    ///
    /// # Safety
    /// A `Mat` source is readable for its extent; `dst` holds [`Src::bytes`] bytes.
    pub(crate) unsafe fn pack_into(&self, dst: *mut u8) {
        let (m, es) = self.as_mat();
        // SAFETY: forwarded; a `Bytes` source is a live slice of exactly that length.
        unsafe { pack(&m, es, dst) }
    }
}

/// Whether a copy of `bytes` at arena offset `off` stays inside a call's device buffers, which
/// end at `dev_end` (the status words follow them): a copy past that end would overwrite the
/// call's `info`s and check flags, or memory beyond the call's arena.
pub(crate) fn within(off: usize, bytes: usize, dev_end: usize) -> bool {
    off.checked_add(bytes).is_some_and(|end| end <= dev_end)
}

/// The error of a copy that would leave the call's device buffers (an internal fault: the call
/// runs on the CPU).
fn out_of_layout(what: &str, off: usize, bytes: usize, dev_end: usize) -> GpuFail {
    fail(
        GpuFailKind::Error,
        format!(
            "internal error: {what} of {bytes} bytes at arena offset {off} would pass the call's device buffers (they end at {dev_end}); nothing was copied"
        ),
    )
}

/// Where a call's device memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArenaUse {
    /// The lane's own arena, grown to this many bytes first when it is smaller.
    Lane(usize),
    /// A block of its own from the device allocator (charged to the caller's owner).
    Allocator,
}

/// Where a call of `operands` bytes (operands, results, status words) and `total` bytes (with
/// the libraries' workspace) runs, on a lane whose arena holds `have` bytes.
pub(crate) fn arena_use(operands: usize, total: usize, have: usize) -> ArenaUse {
    if operands > LANE_ARENA_MAX || total > LANE_ARENA_CAP {
        return ArenaUse::Allocator;
    }
    if have >= total {
        ArenaUse::Lane(have)
    } else {
        ArenaUse::Lane(
            total
                .max(LANE_ARENA_MIN)
                .next_power_of_two()
                .min(LANE_ARENA_CAP),
        )
    }
}

/// Two ranges of a coalesced copy may be this far apart (the bytes between them travel too).
pub(crate) const COPY_GAP: usize = 64 << 10;

/// The copies that move `ranges` (arena byte ranges, any order, possibly empty ones): ranges
/// at most `gap` apart (or overlapping) are moved by one copy of their hull.
pub(crate) fn coalesce(ranges: &[(usize, usize)], gap: usize) -> Vec<(usize, usize)> {
    let mut r: Vec<(usize, usize)> = ranges.iter().copied().filter(|&(lo, hi)| hi > lo).collect();
    r.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(r.len());
    for (lo, hi) in r {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(gap) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// Which arena ranges of a call's mirrored uploads go up in one copy. Before any device work
/// every byte between two operands is unused, so a batch spans gaps of up to [`COPY_GAP`]
/// (their garbage goes up too and is overwritten or never read); after it, a batch grows only
/// by a range that starts inside it or where it ends.
#[derive(Debug, Default)]
pub(crate) struct Batches {
    /// The range packed into the bounce buffer and not yet copied.
    batch: Option<(usize, usize)>,
    /// The ranges copied since the lane was last known idle.
    sent: Vec<(usize, usize)>,
    /// Device work may have been queued.
    launched: bool,
}

/// What [`Batches::stage`] asks of the caller, in this order, before it packs the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Staged {
    /// Queue the copy of this range (the batch the new range does not join).
    pub(crate) send: Option<(usize, usize)>,
    /// Then wait for the copies queued so far: one of them still reads the bounce bytes the
    /// new range is packed into (a range uploaded twice; no launch code does this).
    pub(crate) wait: bool,
}

impl Batches {
    /// Adds the range `lo..hi` (packed next).
    pub(crate) fn stage(&mut self, lo: usize, hi: usize) -> Staged {
        let joins = |(blo, bhi): (usize, usize)| {
            lo >= blo
                && if self.launched {
                    lo <= bhi
                } else {
                    lo <= bhi.saturating_add(COPY_GAP)
                }
        };
        match self.batch {
            Some(b) if joins(b) => {
                self.batch = Some((b.0, b.1.max(hi)));
                Staged {
                    send: None,
                    wait: false,
                }
            }
            _ => {
                let send = self.flush();
                let wait = self.sent.iter().any(|&(a, b)| lo < b && a < hi);
                if wait {
                    self.sent.clear();
                }
                self.batch = Some((lo, hi));
                Staged { send, wait }
            }
        }
    }

    /// Takes the batch for its copy (device work may follow).
    pub(crate) fn flush(&mut self) -> Option<(usize, usize)> {
        let b = self.batch.take();
        if let Some(r) = b {
            self.launched = true;
            self.sent.push(r);
        }
        b
    }

    /// Device work may have been queued.
    pub(crate) fn launched(&mut self) {
        self.launched = true;
    }

    /// True when nothing is packed but not yet queued.
    pub(crate) fn idle(&self) -> bool {
        self.batch.is_none()
    }
}

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

impl Out {
    /// The device range (buffer offset, bytes) a copied result comes from.
    fn source(&self) -> Option<(usize, usize)> {
        match self {
            Out::Mat { dev, host, es, .. } => Some((*dev, packed_bytes(host, *es))),
            Out::Piv { dev, len, .. } => Some((*dev, 8 * *len)),
            Out::Ints { .. } => None,
        }
    }

    fn set_staged(&mut self, at: usize) {
        match self {
            Out::Mat { staged, .. } | Out::Piv { staged, .. } => *staged = Some(at),
            Out::Ints { .. } => {}
        }
    }
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

/// How a call's small copies go (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copies {
    /// The bounce buffer mirrors the arena below [`Layout::operands`] (a byte at arena offset
    /// `o` is staged at bounce offset `o`): uploads are batched into one copy per run of
    /// adjacent operands, results and status words come back in one copy per run.
    Mirrored,
    /// Each operand that fits takes its own range of the bounce buffer; larger ones go through
    /// the pipelined staging.
    Ranges,
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
    copies: Copies,
    /// Mirrored: the uploads' batches.
    batches: Batches,
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
    /// The arena's device address: the status words lie there, the buffers `shift` after.
    base: cu::CUdeviceptr,
    shift: usize,
    /// Bytes of the buffers (every buffer offset lies below).
    dev_len: usize,
    /// Arena bytes up to the last buffer that is not workspace (what the bounce mirrors).
    operands: usize,
    status_len: usize,
    infos: Vec<(usize, &'static str)>,
    /// Non-finite check flags: (status offset, the operands' names, whether they are inputs).
    finite: Vec<(usize, Operands, bool)>,
    outs: Vec<Out>,
    /// Bytes of cuSOLVER host workspace handed out ([`Exec::host_ws`]); the guard zone
    /// after them is checked once the call's work has finished.
    host_ws: Option<usize>,
}

/// Bytes after a call's cuSOLVER host workspace that are filled with [`GUARD_BYTE`] and
/// checked after the call: a library that writes past the size it reported is caught there
/// (the call fails and goes to the CPU library) instead of corrupting the process's heap.
const HOST_WS_GUARD: usize = 4096;
const GUARD_BYTE: u8 = 0xA5;

/// Whether the guard zone after `used` bytes of `buf` still holds [`GUARD_BYTE`] everywhere.
pub(crate) fn guard_intact(buf: &[u8], used: usize) -> bool {
    buf.get(used..used + HOST_WS_GUARD)
        .is_some_and(|g| g.iter().all(|&b| b == GUARD_BYTE))
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
        let have = lane.arena.as_ref().map_or(0, |a| a.len_bytes());
        let use_ = arena_use(lay.operands(), total, have);
        let (arena, base) = match use_ {
            ArenaUse::Lane(size) => {
                if size > have {
                    // the old arena was last used by a finished call on the compute stream
                    lane.arena = None;
                    lane.arena = Some(backend.lane_arena(size, lane)?);
                    lane.clock.t.allocations += 1;
                }
                let base = lane.arena.as_ref().map_or(0, |a| a.ptr());
                (None, base)
            }
            ArenaUse::Allocator => {
                let b = backend.device_block(total, lane)?;
                lane.clock.t.allocations += 1;
                let base = b.ptr();
                (Some(b), base)
            }
        };
        lane.mark(Phase::Alloc);
        let copies = if matches!(use_, ArenaUse::Lane(_)) && lay.operands() <= lane.bounce.size() {
            Copies::Mirrored
        } else {
            Copies::Ranges
        };
        let status_len = lay.status_len();
        let mut batches = Batches::default();
        if status_len > 0 {
            match copies {
                Copies::Mirrored => {
                    // the zeroed status words go up with the first operands
                    let first = batches.stage(0, status_len);
                    debug_assert_eq!(first.send, None);
                    // SAFETY: the bounce buffer holds `operands` >= `status_len` bytes and no
                    // queued copy uses it (the lane is idle at a call's start).
                    unsafe { std::ptr::write_bytes(lane.bounce.at(0), 0, status_len) };
                }
                Copies::Ranges => {
                    cu_ok(
                        // SAFETY: the status region starts the arena laid out for `lay`.
                        unsafe { cu::cuMemsetD8Async(base, 0, status_len, lane.compute_raw) },
                        "status reset",
                    )?;
                    batches.launched();
                }
            }
        }
        Ok(Exec {
            backend,
            lane,
            raw,
            arena,
            copies,
            batches,
            pending_h2d: false,
            used_h2d: false,
            arrival,
            p,
            es: p.size(),
            base,
            shift: lay.shift(),
            dev_len: lay.dev_len(),
            operands: lay.operands(),
            status_len,
            infos: Vec::new(),
            finite: Vec::new(),
            outs: Vec::new(),
            host_ws: None,
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

    /// Device address of status offset `off`.
    pub(crate) fn status_addr(&self, off: usize) -> cu::CUdeviceptr {
        self.base + off as u64
    }

    /// Device address of buffer offset `off`.
    pub(crate) fn addr(&self, off: usize) -> cu::CUdeviceptr {
        self.base + (self.shift + off) as u64
    }

    /// Typed device pointer at buffer offset `off`.
    pub(crate) fn ptr<T>(&self, off: usize) -> *mut T {
        self.addr(off) as usize as *mut T
    }

    /// Typed device pointer at status offset `off`.
    pub(crate) fn status_ptr<T>(&self, off: usize) -> *mut T {
        self.status_addr(off) as usize as *mut T
    }

    /// True for a small call: it runs in the lane's arena and its copies are batched (an
    /// upload costs no copy of its own, so overlapping one with device work gains nothing).
    pub(crate) fn small(&self) -> bool {
        self.copies == Copies::Mirrored
    }

    /// True when every upload packed so far has been queued (device work may follow).
    pub(crate) fn uploads_queued(&self) -> bool {
        self.batches.idle()
    }

    /// The lane's cuBLAS handle (held locked by this call).
    pub(crate) fn blas(&self) -> cb::cublasHandle_t {
        debug_assert!(
            self.uploads_queued(),
            "a library launch before Exec::inputs_ready"
        );
        self.raw.blas
    }

    /// The lane's cuSOLVER handle and parameters (held locked by this call).
    pub(crate) fn solver(&self) -> GResult<(cs::cusolverDnHandle_t, cs::cusolverDnParams_t)> {
        if !self.uploads_queued() {
            return Err(fail(
                GpuFailKind::Error,
                "internal error: a cuSOLVER launch before the call's uploads were queued",
            ));
        }
        self.raw
            .solver
            .ok_or_else(|| fail(GpuFailKind::Error, "cuSOLVER handle not held by this call"))
    }

    /// Host workspace of at least `bytes` (cuSOLVER's `bufferOnHost`), followed by a guard
    /// zone ([`HOST_WS_GUARD`]) that [`Exec::finish`] checks. One call asks once (every
    /// routine of the call shares the largest size).
    pub(crate) fn host_ws(&mut self, bytes: usize) -> *mut std::ffi::c_void {
        let used = bytes.max(1);
        let ws = &mut self.lane.host_ws;
        if ws.len() < used + HOST_WS_GUARD {
            ws.resize(used + HOST_WS_GUARD, 0);
        }
        ws[used..used + HOST_WS_GUARD].fill(GUARD_BYTE);
        self.host_ws = Some(used);
        ws.as_mut_ptr() as *mut std::ffi::c_void
    }

    /// Fails the call when a library wrote into the guard zone after its host workspace.
    fn check_host_ws(&self) -> GResult<()> {
        match self.host_ws {
            Some(used) if !guard_intact(&self.lane.host_ws, used) => Err(fail(
                GpuFailKind::Error,
                format!(
                    "cuSOLVER wrote past the {used} bytes of host workspace it asked for (caught in the guard zone after them)"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Queues the upload of a caller's matrix (packed) to buffer offset `off`. Mirrored, it is
    /// packed into the bounce buffer at its own arena offset and goes up with its batch (at
    /// the latest at [`Exec::inputs_ready`]); otherwise one async copy from its own bounce
    /// range on the compute stream when it fits there, else the pipelined staging on the
    /// upload stream (the compute stream waits for it at [`Exec::inputs_ready`]).
    ///
    /// # Safety
    /// `m` is readable for its extent (the call's contract).
    pub(crate) unsafe fn upload(&mut self, m: &HostMat, off: usize) -> GResult<()> {
        // SAFETY: forwarded.
        unsafe { self.stage(Src::Mat(*m, self.es), off) }
    }

    /// Queues the upload of `src` to buffer offset `off` (see [`Exec::upload`]).
    ///
    /// # Safety
    /// A matrix source is readable for its extent (the call's contract).
    unsafe fn stage(&mut self, src: Src, off: usize) -> GResult<()> {
        self.lane.mark(Phase::Launch);
        let bytes = src.bytes();
        if !within(off, bytes, self.dev_len) {
            return Err(out_of_layout("an upload", off, bytes, self.dev_len));
        }
        let r = if bytes == 0 {
            Ok(())
        } else if self.copies == Copies::Mirrored {
            // SAFETY: forwarded.
            unsafe { self.stage_mirrored(src, self.shift + off, bytes) }
        } else if let Some(b) = self.lane.bounce.take(bytes) {
            let to = self.lane.bounce.at(b);
            // SAFETY: the source is readable (contract); the bounce range holds `bytes` and no
            // queued copy uses it (handed out for this call).
            unsafe { src.pack_into(to) };
            self.batches.launched();
            self.lane.clock.t.copies_in += 1;
            h2d(self.addr(off), to, bytes, self.lane.compute_raw)
        } else {
            self.record(true);
            self.pending_h2d = true;
            self.used_h2d = true;
            self.lane.clock.t.copies_in += 1;
            let h2d = self.lane.h2d;
            let (m, es) = src.as_mat();
            // SAFETY: forwarded; the copies finish before `run` returns (finish synchronises).
            unsafe { self.lane.staging.upload(&m, es, self.addr(off), h2d) }
        };
        self.lane.mark(Phase::CopyIn);
        r
    }

    /// Packs `src` into the bounce buffer at arena offset `at` and adds it to the batch.
    ///
    /// # Safety
    /// As [`Exec::stage`].
    unsafe fn stage_mirrored(&mut self, src: Src, at: usize, bytes: usize) -> GResult<()> {
        let (lo, hi) = (at, at + bytes);
        if hi > self.operands {
            return Err(out_of_layout("an upload", at, bytes, self.operands));
        }
        let step = self.batches.stage(lo, hi);
        if let Some(r) = step.send {
            self.send(r)?;
        }
        if step.wait {
            self.lane.sync_compute(false)?;
        }
        // SAFETY: the source is readable (contract); the bounce buffer mirrors the arena up
        // to `operands` >= `hi`, and no queued copy reads `lo..hi` of it (`Batches::stage`
        // had us wait for any that did).
        unsafe { src.pack_into(self.lane.bounce.at(lo)) };
        Ok(())
    }

    /// Queues the copy of the arena range `lo..hi` from its mirror in the bounce buffer.
    fn send(&mut self, (lo, hi): (usize, usize)) -> GResult<()> {
        self.lane.clock.t.copies_in += 1;
        h2d(
            self.status_addr(lo),
            self.lane.bounce.at(lo),
            hi - lo,
            self.lane.compute_raw,
        )
    }

    /// Queues the copy of the batch being packed, if any.
    fn flush(&mut self) -> GResult<()> {
        match self.batches.flush() {
            Some(r) => self.send(r),
            None => Ok(()),
        }
    }

    /// Queues the upload of host bytes (pivots, constants) to buffer offset `off`: exactly
    /// `src.len()` bytes (not elements of the call's type). The bytes are staged before this
    /// returns, so `src` may be dropped afterwards.
    pub(crate) fn upload_bytes(&mut self, src: &[u8], off: usize) -> GResult<()> {
        // SAFETY: `src` is readable for its length; it is packed (into the bounce buffer or a
        // staging slot) before this returns.
        unsafe { self.stage(Src::Bytes(src), off) }
    }

    /// Queues every upload packed so far (the batch of mirrored ones) and makes the compute
    /// stream wait for those queued on the upload stream: the launch code calls it after its
    /// uploads, before the work that reads them.
    pub(crate) fn inputs_ready(&mut self) -> GResult<()> {
        self.lane.mark(Phase::Launch);
        let r = self.flush();
        self.lane.mark(Phase::CopyIn);
        r?;
        self.batches.launched();
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
    pub(crate) fn finite_flag(&mut self, off: usize, names: Operands, input: bool) {
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

    /// Queues the copies of the status words and of the results that fit the bounce buffer
    /// behind the routines, synchronises once, and checks. Order of the checks: the inputs'
    /// flags (non-finite data goes to the CPU library whatever the GPU routine said of it),
    /// the `info`s, the routine check, then the results' flags (a zero pivot gives LAPACK's
    /// `info`, not a non-finite result).
    pub(crate) fn finish_with(
        &mut self,
        check: impl FnOnce(&Status) -> GResult<()>,
    ) -> GResult<Status> {
        self.lane.mark(Phase::Launch);
        // (a launch code that queued no work after its uploads)
        self.flush()?;
        let mut outs = std::mem::take(&mut self.outs);
        let queued = self.queue_results(&mut outs);
        self.outs = outs;
        let status_at = queued?;
        self.lane.mark(Phase::CopyOut);
        self.lane.sync_compute(self.used_h2d)?;
        self.check_host_ws()?;
        let bytes = match status_at {
            Some(b) => {
                // SAFETY: the bounce range holds the status words, copied before the sync.
                unsafe { std::slice::from_raw_parts(self.lane.bounce.at(b), self.status_len) }
                    .to_vec()
            }
            None if self.status_len > 0 => {
                self.record(false);
                let src = self.status_addr(0);
                let d2h = self.lane.d2h;
                self.lane.clock.t.copies_out += 1;
                self.lane.clock.t.syncs += 1;
                // SAFETY: the status region starts the arena; every stream is idle.
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
                match flagged(st.flag(off), names) {
                    Flagged::None => {}
                    Flagged::Operand(what) => {
                        return Err(fail(
                            GpuFailKind::NonFinite,
                            format!("{what} holds NaN or infinity"),
                        ))
                    }
                    Flagged::Stray(bits) => {
                        return Err(fail(
                            GpuFailKind::Error,
                            format!(
                                "internal error: a non-finite check's flag word reads {bits:#x}, bits for no operand it checks (the call's status words were overwritten)"
                            ),
                        ))
                    }
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

    /// Queues the device-to-host copies of the status words and of the results into the
    /// bounce buffer (those that fit; the others are copied at the commit) and marks each
    /// result's bounce offset. Returns the status words' bounce offset when they were queued.
    fn queue_results(&mut self, outs: &mut [Out]) -> GResult<Option<usize>> {
        let compute = self.lane.compute_raw;
        for o in outs.iter() {
            if let Some((dev, bytes)) = o.source() {
                if !within(dev, bytes, self.dev_len) {
                    return Err(out_of_layout("a result", dev, bytes, self.dev_len));
                }
            }
        }
        if self.copies == Copies::Mirrored {
            // every result and the status words at their own arena offsets, one copy per run
            let mut ranges = Vec::with_capacity(outs.len() + 1);
            ranges.push((0, self.status_len));
            for o in outs.iter_mut() {
                if let Some((dev, bytes)) = o.source() {
                    let at = self.shift + dev;
                    if at + bytes > self.operands {
                        return Err(out_of_layout("a result", at, bytes, self.operands));
                    }
                    ranges.push((at, at + bytes));
                    o.set_staged(at);
                }
            }
            for (lo, hi) in coalesce(&ranges, COPY_GAP) {
                d2h(
                    self.lane.bounce.at(lo),
                    self.status_addr(lo),
                    hi - lo,
                    compute,
                )?;
                self.lane.clock.t.copies_out += 1;
            }
            return Ok((self.status_len > 0).then_some(0));
        }
        for o in outs.iter_mut() {
            let Some((dev, bytes)) = o.source() else {
                continue;
            };
            if let Some(b) = self.lane.bounce.take(bytes) {
                d2h(self.lane.bounce.at(b), self.addr(dev), bytes, compute)?;
                self.lane.clock.t.copies_out += 1;
                o.set_staged(b);
            }
        }
        if self.status_len == 0 {
            return Ok(None);
        }
        let b = self.lane.bounce.take(self.status_len);
        if let Some(b) = b {
            d2h(
                self.lane.bounce.at(b),
                self.status_addr(0),
                self.status_len,
                compute,
            )?;
            self.lane.clock.t.copies_out += 1;
        }
        Ok(b)
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

/// Queues a host-to-device copy of `bytes` on `stream`.
fn h2d(dst: cu::CUdeviceptr, src: *mut u8, bytes: usize, stream: cu::CUstream) -> GResult<()> {
    cu_ok(
        // SAFETY: callers pass a pinned source of `bytes` (a bounce range nothing else writes
        // until the copy ran) and a destination inside the call's arena.
        unsafe { cu::cuMemcpyHtoDAsync_v2(dst, src as *const std::ffi::c_void, bytes, stream) },
        "host-to-device copy",
    )
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
        if !within(off, len, self.dev_len) {
            return Err(out_of_layout("a read", off, len, self.dev_len));
        }
        self.lane.sync_compute(self.used_h2d)?;
        self.check_host_ws()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The host workspace's guard zone reads intact until any byte of it changes, and a buffer
    /// too short to hold it never reads intact.
    #[test]
    fn the_host_workspace_guard_sees_every_stray_byte() {
        let used = 100;
        let mut buf = vec![0u8; used + HOST_WS_GUARD];
        buf[used..].fill(GUARD_BYTE);
        assert!(guard_intact(&buf, used));
        // writes inside the workspace are the library's own
        buf[..used].fill(7);
        assert!(guard_intact(&buf, used));
        for at in [
            used,
            used + 1,
            used + HOST_WS_GUARD / 2,
            used + HOST_WS_GUARD - 1,
        ] {
            let mut b = buf.clone();
            b[at] = 0;
            assert!(!guard_intact(&b, used), "a write at {at} is seen");
        }
        assert!(!guard_intact(&buf[..used + HOST_WS_GUARD - 1], used));
    }

    /// A byte upload moves exactly its bytes whatever the call's element size: packed into a
    /// guarded buffer it writes `len` bytes and reads no more (the fixed-cost branch read and
    /// wrote `len * element size`: getri's and gelsd's status words were overwritten with host
    /// memory past the source, and gelsd ran past its source's heap block; valgrind sees any
    /// over-read here).
    #[test]
    fn a_byte_upload_moves_exactly_its_bytes() {
        for len in [1usize, 24, 456, 4096 + 3] {
            let src: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let s = Src::Bytes(&src);
            assert_eq!(s.bytes(), len);
            let (m, es) = s.as_mat();
            assert_eq!((es, m.rows, m.cols), (1, len, 1));
            let mut dst = vec![0xEEu8; len + 64];
            // SAFETY: `dst` holds `len` bytes and more; a byte source is its own slice.
            unsafe { s.pack_into(dst.as_mut_ptr()) };
            assert_eq!(&dst[..len], &src[..]);
            assert!(dst[len..].iter().all(|&b| b == 0xEE), "written past {len}");
        }
        // a matrix source packs its used part, elements of its own size
        let a: Vec<u8> = (0..5 * 3 * 16).map(|i| i as u8).collect();
        let m = HostMat::input(a.as_ptr(), 4, 3, 5);
        let s = Src::Mat(m, 16);
        assert_eq!(s.bytes(), 4 * 3 * 16);
        let mut dst = vec![0u8; 4 * 3 * 16];
        // SAFETY: `a` holds the 5 x 3 matrix of 16-byte elements; `dst` its packed size.
        unsafe { s.pack_into(dst.as_mut_ptr()) };
        for j in 0..3 {
            assert_eq!(&dst[j * 64..(j + 1) * 64], &a[j * 80..j * 80 + 64]);
        }
    }

    #[test]
    fn results_near_each_other_come_back_in_one_copy() {
        assert_eq!(coalesce(&[], COPY_GAP), vec![]);
        assert_eq!(coalesce(&[(0, 0), (5, 5)], 0), vec![]);
        // status words, then A right after them, then pivots: one copy
        assert_eq!(
            coalesce(&[(512, 640), (0, 16), (1024, 1056)], COPY_GAP),
            vec![(0, 1056)]
        );
        // a result far behind a large workspace-free gap: its own copy
        assert_eq!(
            coalesce(
                &[(0, 16), (512 + COPY_GAP + 1, 600 + COPY_GAP + 1)],
                COPY_GAP
            ),
            vec![(0, 16), (512 + COPY_GAP + 1, 600 + COPY_GAP + 1)]
        );
        // overlapping and nested ranges (gesdd's U is also what A receives)
        assert_eq!(
            coalesce(&[(100, 200), (150, 180), (190, 300)], 0),
            vec![(100, 300)]
        );
        assert_eq!(coalesce(&[(0, 10), (11, 20)], 0), vec![(0, 10), (11, 20)]);
        assert_eq!(coalesce(&[(0, 10), (11, 20)], 1), vec![(0, 20)]);
    }

    /// The uploads of a 57 x 57 getri (single precision), as its launch code makes them: the
    /// status words, A, the pivots and the ones vector go up in one copy (the inverse's
    /// buffer between them holds nothing yet).
    #[test]
    fn a_calls_first_uploads_go_up_in_one_copy() {
        let (n, es) = (57usize, 4usize);
        let mut lay = Layout::default();
        let oa = lay.dev(n * n * es);
        let op = lay.dev(8 * n);
        let _ox = lay.dev(n * n * es);
        let ones = lay.dev(n * es);
        let _oi = lay.status(4);
        let _od = lay.status(n * es);
        let sh = lay.shift();
        let mut b = Batches::default();
        let nothing = Staged {
            send: None,
            wait: false,
        };
        assert_eq!(b.stage(0, lay.status_len()), nothing);
        for (off, len) in [(oa, n * n * es), (op, 8 * n), (ones, n * es)] {
            assert_eq!(b.stage(sh + off, sh + off + len), nothing);
        }
        assert!(!b.idle());
        assert_eq!(b.flush(), Some((0, sh + ones + n * es)));
        assert!(b.idle());
        assert_eq!(b.flush(), None);
    }

    /// gesv: B goes up after the factorization was queued, in a copy of its own; after device
    /// work a batch never spans bytes between operands.
    #[test]
    fn uploads_after_device_work_span_no_gap() {
        let mut b = Batches::default();
        b.stage(0, 16);
        b.stage(512, 640);
        assert_eq!(b.flush(), Some((0, 640)));
        b.launched();
        let s = b.stage(2048, 2080);
        assert_eq!(
            s,
            Staged {
                send: None,
                wait: false
            }
        );
        // adjacent: joins; one byte apart: a new copy
        assert_eq!(b.stage(2080, 2100).send, None);
        let s = b.stage(2101, 2200);
        assert_eq!(s.send, Some((2048, 2100)));
        assert!(!s.wait);
        assert_eq!(b.flush(), Some((2101, 2200)));
    }

    /// A range packed again while a queued copy may still read its bounce bytes waits first.
    #[test]
    fn a_range_uploaded_twice_waits_for_its_first_copy() {
        let mut b = Batches::default();
        b.stage(0, 100);
        assert_eq!(b.flush(), Some((0, 100)));
        let s = b.stage(50, 60);
        assert_eq!(
            s,
            Staged {
                send: None,
                wait: true
            }
        );
        // the batch being packed is not queued yet: packing into it again needs no wait
        let s = b.stage(55, 58);
        assert!(!s.wait && s.send.is_none());
        // a new range that overlaps the batch it cannot join: the batch goes, then a wait
        b.launched();
        let s = b.stage(52, 70);
        assert_eq!(s.send, None, "joins: starts inside the batch, which grows");
        let s = b.stage(10, 20);
        assert_eq!(s.send, Some((50, 70)));
        assert!(!s.wait, "10..20 overlaps nothing queued since the wait");
        let s = b.stage(60, 65);
        assert_eq!(s.send, Some((10, 20)));
        assert!(s.wait, "60..65 is in the 50..70 copy");
    }

    #[test]
    fn copies_stay_inside_the_calls_buffers() {
        assert!(within(0, 512, 512));
        assert!(within(512, 0, 512));
        assert!(!within(0, 513, 512));
        assert!(!within(usize::MAX, 2, usize::MAX));
        // getri n = 57 in single precision, as laid out: the ones vector's 228 bytes fit its
        // slot; 228 * 4 (the bug) pass the buffers' end into the status words
        let mut lay = Layout::default();
        let (n, es) = (57usize, 4usize);
        let _a = lay.dev(n * n * es);
        let _piv = lay.dev(8 * n);
        let _x = lay.dev(n * n * es);
        let ones = lay.dev(n * es);
        let end = lay.dev_len();
        assert!(within(ones, n * es, end));
        assert!(!within(ones, n * es * es, end));
    }

    #[test]
    fn small_calls_run_in_the_lanes_arena_workspace_and_all() {
        const MIB: usize = 1 << 20;
        // a 4 x 4 call: the arena's smallest size at first, kept once it is large enough
        assert_eq!(arena_use(4096, 8192, 0), ArenaUse::Lane(LANE_ARENA_MIN));
        assert_eq!(
            arena_use(4096, 8192, LANE_ARENA_MIN),
            ArenaUse::Lane(LANE_ARENA_MIN)
        );
        // a tiny SVD whose workspace is several MiB: the arena grows once, then serves it
        assert_eq!(
            arena_use(8192, 5 * MIB, LANE_ARENA_MIN),
            ArenaUse::Lane(8 * MIB)
        );
        assert_eq!(arena_use(8192, 5 * MIB, 8 * MIB), ArenaUse::Lane(8 * MIB));
        assert_eq!(
            arena_use(8192, LANE_ARENA_CAP, 0),
            ArenaUse::Lane(LANE_ARENA_CAP)
        );
        // operands beyond the arena's bound, or a workspace beyond its cap: the allocator
        // (charged to the caller's owner)
        assert_eq!(
            arena_use(LANE_ARENA_MAX + 1, LANE_ARENA_MAX + 1, 64 * MIB),
            ArenaUse::Allocator
        );
        assert_eq!(arena_use(8192, LANE_ARENA_CAP + 1, 0), ArenaUse::Allocator);
        // a 512 x 512 potrf (the owner test's call): 2 MiB of operands
        assert_eq!(arena_use(2 * MIB, 2 * MIB + 4096, 0), ArenaUse::Allocator);
    }
}
