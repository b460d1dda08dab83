//! Pinned staging between the caller's (pageable) matrices and device memory.
//!
//! Two pinned slots carry every copy in pieces: while the DMA engine moves one piece, host
//! threads pack the next one into (upload) or unpack the previous one out of (copy-out) the
//! other slot. A piece is a byte range of the matrix as it lies packed on the device
//! (`ld = rows`): any range when the host matrix is contiguous too, whole columns otherwise.
//! The slots come from the device's pinned pool (gpukit-core's [`PinnedPool`]) on first use,
//! sized for what the call moves (at most [`SLOT_BYTES`] each unless one column is larger):
//! nothing is pinned before a call needs it, and a slot given back returns to the pool.

use crate::call::HostMat;
use crate::gpu::fail::{cu_ok, GResult, GpuFail};
use crate::gpu::lane::core_fail;
use cudarc::driver::sys as cu;
use gpukit_core::{PinnedBuffer, PinnedKind, PinnedPool};
use std::ffi::c_void;

/// The lane's bounce buffer (bytes): twice the most operands a call in the lane's arena has, so
/// such a call moves every operand and every result through it.
pub const BOUNCE_BYTES: usize = 2 * crate::gpu::lane::LANE_ARENA_MAX;
/// Offsets in the bounce buffer are aligned to this.
const BOUNCE_ALIGN: usize = 256;

/// The largest staging slot (bytes), unless a single column needs more.
pub const SLOT_BYTES: usize = 16 << 20;
/// Slots are allocated in multiples of this.
const SLOT_GRAIN: usize = 1 << 20;

/// A slot: a pinned buffer of gpukit-core's pool (cached kind: the CPU reads results back
/// from it) and its address.
struct Slot {
    buf: Option<PinnedBuffer>,
    ptr: *mut u8,
    size: usize,
}

impl Slot {
    const fn empty() -> Slot {
        Slot {
            buf: None,
            ptr: std::ptr::null_mut(),
            size: 0,
        }
    }
}

/// The bytes one slot must hold to move a matrix of `total` packed bytes whose columns are
/// `col` bytes (`contiguous`: the host matrix has `ld = rows`, so any byte range is a piece).
pub(crate) fn slot_need(total: usize, col: usize, contiguous: bool) -> usize {
    let want = if contiguous {
        total.min(SLOT_BYTES)
    } else {
        col.max(total.min(SLOT_BYTES))
    };
    want.next_multiple_of(SLOT_GRAIN)
}

/// The pieces (packed byte ranges) a copy of `total` bytes with `col`-byte columns moves
/// through slots of `slot` bytes; column-aligned unless `contiguous`.
pub(crate) fn pieces(
    total: usize,
    col: usize,
    contiguous: bool,
    slot: usize,
) -> Vec<(usize, usize)> {
    if total == 0 {
        return Vec::new();
    }
    let step = if contiguous || col == 0 {
        slot.max(1)
    } else {
        (slot / col).max(1) * col
    };
    (0..total)
        .step_by(step)
        .map(|lo| (lo, (lo + step).min(total)))
        .collect()
}

/// Packed size, column size and contiguity of a host matrix with elements of `es` bytes.
fn geometry(m: &HostMat, es: usize) -> (usize, usize, bool) {
    let col = m.rows * es;
    (col * m.cols, col, m.ld == m.rows || m.cols <= 1)
}

#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: only used to hand disjoint ranges of one buffer to scoped threads.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// Method access, so closures capture the whole (Send + Sync) wrapper.
    fn get(&self) -> *mut u8 {
        self.0
    }
}

/// Bytes one packing thread handles at least.
const BYTES_PER_THREAD: usize = 4 << 20;

/// Threads that pack or unpack a piece of `bytes` (1 below two threads' worth: no thread is
/// started, and the core count is not read).
fn threads_for(bytes: usize) -> usize {
    let want = bytes / BYTES_PER_THREAD;
    if want <= 1 {
        return 1;
    }
    want.min(cores().min(8))
}

/// The cores this process may use, read once: `available_parallelism` reads the cgroup files
/// at every call (about 17 us on the H200 host, 45 us on the build VM), which every small copy
/// paid before.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
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
        for k in 1..t {
            let f = &f;
            let lo = k * per;
            let hi = ((k + 1) * per).min(n);
            if lo < hi {
                s.spawn(move || f(lo, hi));
            }
        }
        f(0, per.min(n));
    });
}

/// Direction of a piece copy between the caller's matrix and a packed buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Caller's matrix to the packed buffer.
    Pack,
    /// Packed buffer to the caller's matrix.
    Unpack,
}

/// Copies the packed byte range `lo..hi` of `m` between the caller's matrix and `buf` (which
/// holds that range from its start).
///
/// # Safety
/// `m` is valid (readable for `Pack`, writable for `Unpack`) for its extent; `buf` holds
/// `hi - lo` bytes; for a non-contiguous `m` the range is column-aligned.
unsafe fn transfer(m: &HostMat, es: usize, lo: usize, hi: usize, buf: *mut u8, dir: Dir) {
    let (_, col, contiguous) = geometry(m, es);
    let (host, b) = (SendPtr(m.ptr), SendPtr(buf));
    let copy = move |from: *const u8, to: *mut u8, len: usize| {
        // SAFETY: callers below pass disjoint in-bounds ranges (function contract).
        unsafe { std::ptr::copy_nonoverlapping(from, to, len) }
    };
    if contiguous {
        par_ranges(hi - lo, threads_for(hi - lo), |a, z| {
            // SAFETY: bytes lo+a..lo+z of the contiguous matrix and a..z of the buffer.
            let (h, p) = unsafe { (host.get().add(lo + a), b.get().add(a)) };
            match dir {
                Dir::Pack => copy(h, p, z - a),
                Dir::Unpack => copy(p, h, z - a),
            }
        });
    } else {
        let (c0, c1) = (lo / col, hi / col);
        let ld = m.ld * es;
        par_ranges(c1 - c0, threads_for(hi - lo), |a, z| {
            for j in a..z {
                // SAFETY: column c0+j of the caller's matrix (inside its extent) and slot
                // column j of the buffer.
                let (h, p) = unsafe { (host.get().add((c0 + j) * ld), b.get().add(j * col)) };
                match dir {
                    Dir::Pack => copy(h, p, col),
                    Dir::Unpack => copy(p, h, col),
                }
            }
        });
    }
}

/// A lane's pinned bounce buffer: small operands are packed into it and go up with async
/// copies on the compute stream, small results come down into it the same way. A call in the
/// lane's arena uses it as a mirror of the arena (see [`crate::gpu::exec`]); another takes
/// ranges of it in call order ([`Bounce::take`]). Everything is given back at once when the
/// next call starts ([`Bounce::reset`]), when the previous call's copies are known to be
/// finished.
pub(crate) struct Bounce {
    pool: PinnedPool,
    buf: Option<PinnedBuffer>,
    ptr: *mut u8,
    size: usize,
    used: usize,
}

// SAFETY: the address points into the PinnedBuffer the bounce owns; it moves with its lane,
// which one thread uses at a time.
unsafe impl Send for Bounce {}

impl Bounce {
    /// No memory until [`Bounce::ensure`].
    pub(crate) fn new(pool: PinnedPool) -> Bounce {
        Bounce {
            pool,
            buf: None,
            ptr: std::ptr::null_mut(),
            size: 0,
            used: 0,
        }
    }

    /// Takes the pinned buffer from the pool the first time (true when it did).
    pub(crate) fn ensure(&mut self) -> GResult<bool> {
        if self.buf.is_some() {
            return Ok(false);
        }
        let mut buf = self
            .pool
            .acquire(BOUNCE_BYTES, PinnedKind::Cached)
            .map_err(|e| core_fail("pinned bounce buffer", e))?;
        self.ptr = buf.as_mut_ptr();
        self.size = buf.capacity();
        self.buf = Some(buf);
        Ok(true)
    }

    /// Gives every range back (the lane is idle: no copy uses the buffer).
    pub(crate) fn reset(&mut self) {
        self.used = 0;
    }

    /// `bytes` of the buffer for one copy, if they are left: the offset.
    pub(crate) fn take(&mut self, bytes: usize) -> Option<usize> {
        let off = self.used.next_multiple_of(BOUNCE_ALIGN);
        if self.buf.is_none() || bytes == 0 || off + bytes > self.size {
            return None;
        }
        self.used = off + bytes;
        Some(off)
    }

    /// Pinned bytes held.
    pub(crate) fn pinned_bytes(&self) -> usize {
        if self.buf.is_some() {
            self.size
        } else {
            0
        }
    }

    /// Bytes the buffer holds (0 before [`Bounce::ensure`]).
    pub(crate) fn size(&self) -> usize {
        self.pinned_bytes()
    }

    /// The address of offset `off`.
    pub(crate) fn at(&self, off: usize) -> *mut u8 {
        // SAFETY: callers pass offsets handed out by `take` (inside the buffer).
        unsafe { self.ptr.add(off) }
    }
}

/// Packs the caller's matrix `m` into `dst` (its packed bytes, `ld = rows`).
///
/// # Safety
/// `m` is readable for its extent; `dst` holds its packed size.
pub(crate) unsafe fn pack(m: &HostMat, es: usize, dst: *mut u8) {
    let (total, ..) = geometry(m, es);
    // SAFETY: forwarded; the whole range 0..total.
    unsafe { transfer(m, es, 0, total, dst, Dir::Pack) }
}

/// Unpacks `src` (the packed bytes of a matrix shaped as `m`) into the caller's matrix `m`.
///
/// # Safety
/// `m` is writable for its extent; `src` holds its packed size.
pub(crate) unsafe fn unpack(src: *mut u8, m: &HostMat, es: usize) {
    let (total, ..) = geometry(m, es);
    // SAFETY: forwarded; the whole range 0..total.
    unsafe { transfer(m, es, 0, total, src, Dir::Unpack) }
}

/// Packed bytes of a host matrix of `es`-byte elements.
pub(crate) fn packed_bytes(m: &HostMat, es: usize) -> usize {
    geometry(m, es).0
}

/// The two staging slots of a lane and the events that say when each is free again. A slot
/// is given back to the pool (or replaced) only after its event completed.
pub(crate) struct Staging {
    pool: PinnedPool,
    slots: [Slot; 2],
    ev: [cu::CUevent; 2],
    next: usize,
}

// SAFETY: the slots' addresses point into the PinnedBuffers the staging owns; the staging
// moves with its lane, which one thread uses at a time.
unsafe impl Send for Staging {}

impl Staging {
    /// Two unallocated slots from `pool`; `ev` are two events of the lane's context.
    pub(crate) fn new(pool: PinnedPool, ev: [cu::CUevent; 2]) -> Staging {
        Staging {
            pool,
            slots: [Slot::empty(), Slot::empty()],
            ev,
            next: 0,
        }
    }

    /// Bytes pinned by the slots.
    pub(crate) fn pinned_bytes(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.buf.is_some())
            .map(|s| s.size)
            .sum()
    }

    fn wait(&self, s: usize) -> GResult<()> {
        cu_ok(
            // SAFETY: a live event of this lane (never recorded: returns at once).
            unsafe { cu::cuEventSynchronize(self.ev[s]) },
            "staging slot wait",
        )
    }

    /// Makes both slots hold at least `need` bytes (waiting for their copies first).
    pub(crate) fn ensure(&mut self, need: usize) -> GResult<()> {
        if self.slots[0].size >= need && self.slots[1].size >= need {
            return Ok(());
        }
        for s in 0..2 {
            self.wait(s)?;
            if self.slots[s].size < need {
                // the old buffer's copies finished (waited above): back to the pool first
                self.slots[s] = Slot::empty();
                let mut buf = self
                    .pool
                    .acquire(need, PinnedKind::Cached)
                    .map_err(|e| core_fail("pinned staging", e))?;
                self.slots[s] = Slot {
                    ptr: buf.as_mut_ptr(),
                    size: buf.capacity(),
                    buf: Some(buf),
                };
            }
        }
        Ok(())
    }

    /// Queues the upload of `m` (packed, `ld = rows`) to `dst` on `stream`; the host packing
    /// of each piece overlaps the DMA of the one before.
    ///
    /// # Safety
    /// `m` is readable for its extent until `stream` has finished the copies (the caller
    /// synchronises before returning to its own caller); `dst` holds the packed matrix.
    pub(crate) unsafe fn upload(
        &mut self,
        m: &HostMat,
        es: usize,
        dst: cu::CUdeviceptr,
        stream: cu::CUstream,
    ) -> GResult<()> {
        let (total, col, contiguous) = geometry(m, es);
        if total == 0 {
            return Ok(());
        }
        self.ensure(slot_need(total, col, contiguous))?;
        for (lo, hi) in pieces(total, col, contiguous, self.slots[0].size) {
            let s = self.next;
            self.next ^= 1;
            self.wait(s)?;
            // SAFETY: the slot holds >= hi-lo bytes and its previous DMA finished; the range
            // is column-aligned for a strided matrix (`pieces`).
            unsafe { transfer(m, es, lo, hi, self.slots[s].ptr, Dir::Pack) };
            // SAFETY: pinned source of hi-lo bytes; destination inside the packed matrix.
            unsafe {
                cu_ok(
                    cu::cuMemcpyHtoDAsync_v2(
                        dst + lo as u64,
                        self.slots[s].ptr as *const c_void,
                        hi - lo,
                        stream,
                    ),
                    "host-to-device copy",
                )?;
                cu_ok(cu::cuEventRecord(self.ev[s], stream), "event record")?;
            }
        }
        Ok(())
    }

    /// Copies the packed matrix at `src` into the caller's `m` on `stream`, the DMA of each
    /// piece overlapping the host unpacking of the one before; returns when `m` is written.
    /// On failure the error says whether any part of `m` was written already.
    ///
    /// # Safety
    /// `m` is writable for its extent; `src` holds the packed matrix and no queued work
    /// still writes it.
    pub(crate) unsafe fn copy_out(
        &mut self,
        src: cu::CUdeviceptr,
        m: &HostMat,
        es: usize,
        stream: cu::CUstream,
    ) -> Result<(), (GpuFail, bool)> {
        let (total, col, contiguous) = geometry(m, es);
        if total == 0 {
            return Ok(());
        }
        self.ensure(slot_need(total, col, contiguous))
            .map_err(|e| (e, false))?;
        let ps = pieces(total, col, contiguous, self.slots[0].size);
        let mut written = false;
        let mut pending: Option<(usize, usize, usize)> = None; // (slot, lo, hi)
        for &(lo, hi) in ps.iter().chain(std::iter::once(&(0, 0))) {
            if hi > lo {
                let s = self.next;
                self.next ^= 1;
                self.wait(s).map_err(|e| (e, written))?;
                // SAFETY: the slot holds >= hi-lo bytes and is idle; `src` holds the range.
                unsafe {
                    cu_ok(
                        cu::cuMemcpyDtoHAsync_v2(
                            self.slots[s].ptr as *mut c_void,
                            src + lo as u64,
                            hi - lo,
                            stream,
                        ),
                        "device-to-host copy",
                    )
                    .and_then(|()| cu_ok(cu::cuEventRecord(self.ev[s], stream), "event record"))
                    .map_err(|e| (e, written))?;
                }
                if let Some(prev) = pending.replace((s, lo, hi)) {
                    self.unpack(prev, m, es).map_err(|e| (e, written))?;
                    written = true;
                }
            } else if let Some(prev) = pending.take() {
                self.unpack(prev, m, es).map_err(|e| (e, written))?;
                written = true;
            }
        }
        Ok(())
    }

    /// Waits for the DMA into slot `s` and unpacks the range it holds into `m`.
    fn unpack(&self, (s, lo, hi): (usize, usize, usize), m: &HostMat, es: usize) -> GResult<()> {
        self.wait(s)?;
        // SAFETY: the slot holds the range (its DMA finished); `m` is the caller's writable
        // matrix (copy_out's contract).
        unsafe { transfer(m, es, lo, hi, self.slots[s].ptr, Dir::Unpack) };
        Ok(())
    }

    /// Copies `bytes` from the device into a new vector (small results: infos, checks).
    ///
    /// # Safety
    /// `src` holds `bytes` bytes and no queued work still writes them.
    pub(crate) unsafe fn read(
        &mut self,
        src: cu::CUdeviceptr,
        bytes: usize,
        stream: cu::CUstream,
    ) -> GResult<Vec<u8>> {
        let mut v = vec![0u8; bytes];
        let m = HostMat::new(v.as_mut_ptr(), bytes, 1, bytes.max(1));
        // SAFETY: `v` is writable for `bytes`; `src` per the contract.
        unsafe { self.copy_out(src, &m, 1, stream) }.map_err(|(e, _)| e)?;
        Ok(v)
    }

    /// The events, for the lane to destroy.
    pub(crate) fn events(&self) -> [cu::CUevent; 2] {
        self.ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn slots_are_sized_for_the_copy_and_bounded() {
        // a small contiguous copy gets a small slot
        assert_eq!(slot_need(1000, 100, true), MIB);
        // a large one gets the maximum
        assert_eq!(slot_need(300 * MIB, 48_000, true), SLOT_BYTES);
        // a strided matrix needs at least one column per slot
        assert_eq!(slot_need(64 * MIB, 32 * MIB, false), 32 * MIB);
        assert_eq!(slot_need(64 * MIB, 8, false), SLOT_BYTES);
    }

    #[test]
    fn small_copies_start_no_thread_and_large_ones_are_bounded() {
        for bytes in [0, 1, 4096, BYTES_PER_THREAD, 2 * BYTES_PER_THREAD - 1] {
            assert_eq!(threads_for(bytes), 1, "{bytes}");
        }
        let big = threads_for(1 << 30);
        assert!((1..=8).contains(&big), "{big}");
        assert_eq!(big, cores().min(8));
        assert_eq!(threads_for(3 * BYTES_PER_THREAD), 3usize.min(cores()));
    }

    #[test]
    fn pieces_cover_the_matrix_exactly() {
        for (total, col, contiguous, slot) in [
            (10_000usize, 100usize, true, 4096usize),
            (10_000, 100, false, 4096),
            (10_000, 3000, false, 4096),
            (10_000, 20_000, false, 4096),
            (1, 1, true, MIB),
        ] {
            let ps = pieces(total, col, contiguous, slot);
            assert_eq!(ps.first().unwrap().0, 0);
            assert_eq!(ps.last().unwrap().1, total);
            for w in ps.windows(2) {
                assert_eq!(w[0].1, w[1].0, "gap or overlap");
            }
            for &(lo, hi) in &ps {
                assert!(hi > lo);
                if !contiguous {
                    assert_eq!(lo % col, 0, "column-aligned");
                    assert!(hi % col == 0 || hi == total);
                    assert!(hi - lo <= slot.max(col));
                } else {
                    assert!(hi - lo <= slot);
                }
            }
        }
        assert!(pieces(0, 10, true, 100).is_empty());
    }

    /// Packing every piece of a strided matrix and unpacking it into another strided matrix
    /// reproduces the used part and leaves the padding rows alone.
    #[test]
    fn pack_and_unpack_round_trip_with_leading_dimensions() {
        let (rows, cols, ld, es) = (7usize, 5usize, 11usize, 8usize);
        let src: Vec<u8> = (0..ld * cols * es).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0xEEu8; ld * cols * es];
        let a = HostMat::input(src.as_ptr(), rows, cols, ld);
        let b = HostMat::new(dst.as_mut_ptr(), rows, cols, ld);
        let (total, col, contiguous) = geometry(&a, es);
        assert!(!contiguous);
        let mut packed = vec![0u8; total];
        for (lo, hi) in pieces(total, col, contiguous, 2 * col) {
            // SAFETY: `a` covers its extent; the piece fits in `packed` from `lo`.
            unsafe { transfer(&a, es, lo, hi, packed.as_mut_ptr().add(lo), Dir::Pack) };
        }
        for j in 0..cols {
            assert_eq!(
                &packed[j * col..(j + 1) * col],
                &src[j * ld * es..j * ld * es + col]
            );
        }
        for (lo, hi) in pieces(total, col, contiguous, 3 * col) {
            // SAFETY: `b` is writable for its extent.
            unsafe { transfer(&b, es, lo, hi, packed.as_mut_ptr().add(lo), Dir::Unpack) };
        }
        for j in 0..cols {
            for i in 0..ld * es {
                let k = j * ld * es + i;
                if i < col {
                    assert_eq!(dst[k], src[k]);
                } else {
                    assert_eq!(dst[k], 0xEE, "padding row written at column {j}");
                }
            }
        }
    }

    #[test]
    fn contiguous_pieces_may_split_columns() {
        let (rows, cols, es) = (1000usize, 3usize, 4usize);
        let src: Vec<u8> = (0..rows * cols * es).map(|i| (i * 7 % 256) as u8).collect();
        let a = HostMat::input(src.as_ptr(), rows, cols, rows);
        let mut out = vec![0u8; src.len()];
        for (lo, hi) in pieces(src.len(), rows * es, true, 777) {
            // SAFETY: `a` covers its extent; the piece fits in `out` from `lo`.
            unsafe { transfer(&a, es, lo, hi, out.as_mut_ptr().add(lo), Dir::Pack) };
        }
        assert_eq!(out, src);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any geometry: the pieces tile the packed matrix, and packing then unpacking every
        /// piece through slot-sized buffers reproduces the used part and leaves padding alone.
        #[test]
        fn any_geometry_round_trips(
            rows in 1usize..40,
            cols in 1usize..12,
            pad in 0usize..5,
            es in proptest::sample::select(vec![4usize, 8, 16]),
            slot in 1usize..2000,
        ) {
            let ld = rows + pad;
            let src: Vec<u8> = (0..ld * cols * es).map(|i| (i * 31 % 253) as u8).collect();
            let a = HostMat::input(src.as_ptr(), rows, cols, ld);
            let (total, col, contiguous) = geometry(&a, es);
            let slot = slot.max(if contiguous { 1 } else { col });
            let ps = pieces(total, col, contiguous, slot);
            proptest::prop_assert_eq!(ps.first().map(|p| p.0), Some(0));
            proptest::prop_assert_eq!(ps.last().map(|p| p.1), Some(total));
            let mut dst = vec![0xEEu8; src.len()];
            let b = HostMat::new(dst.as_mut_ptr(), rows, cols, ld);
            let mut buf = vec![0u8; slot];
            for &(lo, hi) in &ps {
                proptest::prop_assert!(hi - lo <= slot);
                // SAFETY: `a` and `b` cover their extents; the buffer holds the piece.
                unsafe {
                    transfer(&a, es, lo, hi, buf.as_mut_ptr(), Dir::Pack);
                    transfer(&b, es, lo, hi, buf.as_mut_ptr(), Dir::Unpack);
                }
            }
            for j in 0..cols {
                for i in 0..ld * es {
                    let k = j * ld * es + i;
                    if i < col {
                        proptest::prop_assert_eq!(dst[k], src[k]);
                    } else {
                        proptest::prop_assert_eq!(dst[k], 0xEE);
                    }
                }
            }
        }
    }
}
