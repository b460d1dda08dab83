//! The allocator's bookkeeping as a pure data structure (no CUDA calls): segments obtained from
//! the driver, split into blocks, with size-classed free lists per stream. The driver-facing
//! [`Allocator`](super::Allocator) wraps it; tests exercise it without a GPU.
//!
//! Rules (after PyTorch's caching allocator):
//! - every request is rounded up to a multiple of [`ROUND`] (512 B);
//! - requests up to [`SMALL_MAX`] (1 MiB) are served from the *small* pool, whose segments are
//!   [`SMALL_SEGMENT`] (2 MiB); larger requests from the *large* pool, whose segments are the
//!   request rounded up to [`LARGE_ALIGN`] (2 MiB);
//! - a free block is found best-fit (smallest that fits) on the same stream; the rest is split
//!   off when it is at least 512 B (small) or more than 1 MiB (large);
//! - freeing merges a block with free neighbours of its segment;
//! - a segment that is entirely free can be released to the driver, or handed to another stream
//!   (the caller orders the new stream after the old one).

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Allocation granularity in bytes.
pub const ROUND: usize = 512;
/// Largest request served from the small pool.
pub const SMALL_MAX: usize = 1 << 20;
/// Segment size of the small pool.
pub const SMALL_SEGMENT: usize = 2 << 20;
/// Segment granularity of the large pool.
pub const LARGE_ALIGN: usize = 2 << 20;

/// A stream's identity (its handle).
pub type StreamKey = u64;

/// `bytes` rounded up to the allocation granularity (at least one unit).
pub fn round_size(bytes: usize) -> usize {
    bytes.max(1).div_ceil(ROUND).saturating_mul(ROUND)
}

/// True when a rounded size is served from the small pool.
pub fn is_small(rounded: usize) -> bool {
    rounded <= SMALL_MAX
}

/// The driver allocation that a miss of `rounded` bytes asks for.
pub fn segment_size(rounded: usize) -> usize {
    if is_small(rounded) {
        SMALL_SEGMENT
    } else {
        rounded.div_ceil(LARGE_ALIGN).saturating_mul(LARGE_ALIGN)
    }
}

#[derive(Debug, Clone)]
struct Block {
    size: usize,
    segment: u64,
    free: bool,
}

#[derive(Debug, Clone)]
struct Segment {
    size: usize,
    stream: StreamKey,
    small: bool,
}

/// Counters of a [`Pool`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Bytes in allocated blocks.
    pub in_use: usize,
    /// Bytes in segments (held from the driver).
    pub reserved: usize,
    /// Highest `in_use` seen.
    pub peak_in_use: usize,
    /// Allocated blocks.
    pub blocks_in_use: usize,
}

/// Segments and blocks of one device.
#[derive(Debug, Default)]
pub struct Pool {
    /// Every block by its address.
    blocks: BTreeMap<u64, Block>,
    /// Free blocks: (stream, small?, size, addr).
    free: BTreeSet<(StreamKey, bool, usize, u64)>,
    /// Segments by base address.
    segments: HashMap<u64, Segment>,
    counters: PoolCounters,
}

impl Pool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counters.
    pub fn counters(&self) -> PoolCounters {
        self.counters
    }

    /// Takes a free block of at least `rounded` bytes (a multiple of [`ROUND`]) on `stream`,
    /// splitting off the rest; returns its address, or `None` on a miss.
    pub fn alloc(&mut self, stream: StreamKey, rounded: usize) -> Option<u64> {
        let small = is_small(rounded);
        let &(s, sm, size, addr) = self
            .free
            .range((stream, small, rounded, 0)..=(stream, small, usize::MAX, u64::MAX))
            .next()?;
        debug_assert_eq!((s, sm), (stream, small));
        self.free.remove(&(s, sm, size, addr));
        let rest = size - rounded;
        let split = if small {
            rest >= ROUND
        } else {
            rest > SMALL_MAX
        };
        let seg = self.blocks[&addr].segment;
        let taken = if split {
            let tail = addr + rounded as u64;
            self.blocks.insert(
                tail,
                Block {
                    size: rest,
                    segment: seg,
                    free: true,
                },
            );
            self.free.insert((stream, small, rest, tail));
            rounded
        } else {
            size
        };
        let b = self
            .blocks
            .get_mut(&addr)
            .expect("free block is in the block map");
        b.size = taken;
        b.free = false;
        self.counters.in_use += taken;
        self.counters.blocks_in_use += 1;
        self.counters.peak_in_use = self.counters.peak_in_use.max(self.counters.in_use);
        Some(addr)
    }

    /// The size of the allocated block at `addr` (what [`alloc`](Self::alloc) charged).
    pub fn block_size(&self, addr: u64) -> Option<usize> {
        self.blocks.get(&addr).filter(|b| !b.free).map(|b| b.size)
    }

    /// Adds a segment obtained from the driver, wholly free, to `stream`'s lists.
    pub fn add_segment(&mut self, base: u64, size: usize, stream: StreamKey, small: bool) {
        self.segments.insert(
            base,
            Segment {
                size,
                stream,
                small,
            },
        );
        self.blocks.insert(
            base,
            Block {
                size,
                segment: base,
                free: true,
            },
        );
        self.free.insert((stream, small, size, base));
        self.counters.reserved += size;
    }

    /// Returns the block at `addr` to its stream's free list, merging with free neighbours.
    /// Returns the bytes freed, or `None` when `addr` is not an allocated block.
    pub fn free(&mut self, addr: u64) -> Option<usize> {
        let b = self.blocks.get(&addr)?;
        if b.free {
            return None;
        }
        let freed = b.size;
        let (mut start, mut size, seg_base) = (addr, b.size, b.segment);
        let seg = self.segments[&seg_base].clone();
        self.counters.in_use -= size;
        self.counters.blocks_in_use -= 1;
        // Merge with the next block.
        let next = start + size as u64;
        if next < seg_base + seg.size as u64 {
            if let Some(nb) = self.blocks.get(&next).cloned() {
                if nb.free {
                    self.free.remove(&(seg.stream, seg.small, nb.size, next));
                    self.blocks.remove(&next);
                    size += nb.size;
                }
            }
        }
        // Merge with the previous block.
        if start > seg_base {
            if let Some((&paddr, pb)) = self.blocks.range(..start).next_back() {
                if pb.free && pb.segment == seg_base && paddr + pb.size as u64 == start {
                    let psize = pb.size;
                    self.free.remove(&(seg.stream, seg.small, psize, paddr));
                    self.blocks.remove(&start);
                    start = paddr;
                    size += psize;
                }
            }
        }
        let blk = self.blocks.get_mut(&start).expect("merged block exists");
        blk.size = size;
        blk.free = true;
        self.free.insert((seg.stream, seg.small, size, start));
        Some(freed)
    }

    /// Segments that are entirely free and match `filter(stream)`: removed from the pool and
    /// returned as `(base, size)` for the caller to release to the driver.
    pub fn take_free_segments(
        &mut self,
        mut filter: impl FnMut(StreamKey) -> bool,
    ) -> Vec<(u64, usize)> {
        let whole: Vec<(u64, usize, StreamKey, bool)> = self
            .segments
            .iter()
            .filter(|(base, seg)| {
                filter(seg.stream)
                    && self
                        .blocks
                        .get(base)
                        .is_some_and(|b| b.free && b.size == seg.size)
            })
            .map(|(&base, seg)| (base, seg.size, seg.stream, seg.small))
            .collect();
        for &(base, size, stream, small) in &whole {
            self.free.remove(&(stream, small, size, base));
            self.blocks.remove(&base);
            self.segments.remove(&base);
            self.counters.reserved -= size;
        }
        whole.into_iter().map(|(b, s, _, _)| (b, s)).collect()
    }

    /// Moves the smallest entirely free segment of another stream that `from` allows and that
    /// can serve `rounded` bytes to `stream`; returns the stream it came from. The caller must
    /// order `stream` after the old stream before using the memory.
    pub fn adopt_free_segment(
        &mut self,
        stream: StreamKey,
        rounded: usize,
        from: impl Fn(StreamKey) -> bool,
    ) -> Option<StreamKey> {
        let small = is_small(rounded);
        let (base, size, old) = self
            .segments
            .iter()
            .filter(|(base, seg)| {
                seg.stream != stream
                    && from(seg.stream)
                    && seg.small == small
                    && seg.size >= rounded
                    && self
                        .blocks
                        .get(base)
                        .is_some_and(|b| b.free && b.size == seg.size)
            })
            .min_by_key(|(base, seg)| (seg.size, **base))
            .map(|(&base, seg)| (base, seg.size, seg.stream))?;
        self.free.remove(&(old, small, size, base));
        self.free.insert((stream, small, size, base));
        if let Some(seg) = self.segments.get_mut(&base) {
            seg.stream = stream;
        }
        Some(old)
    }

    /// True when no block of any segment that belongs to `stream` is allocated (its segments,
    /// if any, are wholly free).
    pub fn stream_is_idle(&self, stream: StreamKey) -> bool {
        self.segments.iter().all(|(base, seg)| {
            seg.stream != stream
                || self
                    .blocks
                    .get(base)
                    .is_some_and(|b| b.free && b.size == seg.size)
        })
    }

    /// Bytes of the segments that belong to `stream` (its blocks in use and its cached ones).
    pub fn stream_reserved(&self, stream: StreamKey) -> usize {
        self.segments
            .values()
            .filter(|seg| seg.stream == stream)
            .map(|seg| seg.size)
            .sum()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Checks the internal invariants (blocks tile every segment exactly, free lists match the
    /// blocks, counters add up); returns a description of the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut in_use = 0usize;
        let mut reserved = 0usize;
        let mut free_count = 0usize;
        for (&base, seg) in &self.segments {
            reserved += seg.size;
            let mut at = base;
            let end = base + seg.size as u64;
            let mut prev_free = false;
            while at < end {
                let b = self
                    .blocks
                    .get(&at)
                    .ok_or(format!("segment {base:#x}: no block at {at:#x}"))?;
                if b.segment != base {
                    return Err(format!("block {at:#x} names segment {:#x}", b.segment));
                }
                if b.free {
                    if prev_free {
                        return Err(format!("adjacent free blocks at {at:#x} not merged"));
                    }
                    if !self.free.contains(&(seg.stream, seg.small, b.size, at)) {
                        return Err(format!("free block {at:#x} missing from the free list"));
                    }
                    free_count += 1;
                } else {
                    in_use += b.size;
                }
                prev_free = b.free;
                at += b.size as u64;
            }
            if at != end {
                return Err(format!("blocks overrun segment {base:#x}"));
            }
        }
        if free_count != self.free.len() {
            return Err(format!(
                "{} free-list entries for {free_count} free blocks",
                self.free.len()
            ));
        }
        if in_use != self.counters.in_use || reserved != self.counters.reserved {
            return Err(format!(
                "counters say in_use {} reserved {}, blocks say {in_use} / {reserved}",
                self.counters.in_use, self.counters.reserved
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A fake driver: hands out increasing, 2 MiB-aligned addresses.
    struct Fake {
        pool: Pool,
        next: u64,
        driver_allocs: usize,
    }

    impl Fake {
        fn new() -> Self {
            Fake {
                pool: Pool::new(),
                next: 1 << 32,
                driver_allocs: 0,
            }
        }
        fn alloc(&mut self, stream: StreamKey, bytes: usize) -> (u64, usize) {
            let r = round_size(bytes);
            if let Some(a) = self.pool.alloc(stream, r) {
                return (a, self.pool.block_size(a).unwrap());
            }
            let seg = segment_size(r);
            let base = self.next;
            self.next += seg as u64 + LARGE_ALIGN as u64;
            self.driver_allocs += 1;
            self.pool.add_segment(base, seg, stream, is_small(r));
            let a = self
                .pool
                .alloc(stream, r)
                .expect("fresh segment serves the request");
            (a, self.pool.block_size(a).unwrap())
        }
    }

    #[test]
    fn rounding_and_classes() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(513), 1024);
        assert!(is_small(1 << 20));
        assert!(!is_small((1 << 20) + 512));
        assert_eq!(segment_size(512), 2 << 20);
        assert_eq!(segment_size((2 << 20) + 512), 4 << 20);
    }

    #[test]
    fn small_blocks_share_a_segment_and_reuse_without_the_driver() {
        let mut f = Fake::new();
        let (a, sa) = f.alloc(1, 1000);
        let (b, _) = f.alloc(1, 1000);
        assert_eq!(sa, 1024);
        assert_eq!(b, a + 1024);
        assert_eq!(f.driver_allocs, 1);
        f.pool.free(a).unwrap();
        let (c, _) = f.alloc(1, 600);
        assert_eq!(c, a, "best fit reuses the freed block");
        assert_eq!(f.driver_allocs, 1);
        f.pool.check_invariants().unwrap();
    }

    #[test]
    fn streams_do_not_share_blocks_until_a_segment_is_adopted() {
        let mut f = Fake::new();
        let (a, _) = f.alloc(1, 4096);
        f.pool.free(a).unwrap();
        let (b, _) = f.alloc(2, 4096);
        assert_ne!(a, b);
        assert_eq!(f.driver_allocs, 2);
        f.pool.free(b).unwrap();
        // Stream 3: no segment of its own; adopt a free one.
        assert!(f.pool.alloc(3, 4096).is_none());
        // A filter that allows no stream adopts nothing; one that excludes stream 1 (a retired
        // stream, say) takes stream 2's segment.
        assert!(f.pool.adopt_free_segment(3, 4096, |_| false).is_none());
        assert_eq!(f.pool.adopt_free_segment(3, 4096, |s| s != 1), Some(2));
        assert!(f.pool.alloc(3, 4096).is_some());
        f.pool.check_invariants().unwrap();
    }

    #[test]
    fn large_blocks_split_and_merge() {
        let mut f = Fake::new();
        let (a, sa) = f.alloc(1, 5 << 20);
        // The 1 MiB remainder is not more than 1 MiB: not split off.
        assert_eq!(sa, 6 << 20);
        assert_eq!(f.pool.counters().reserved, 6 << 20);
        f.pool.free(a).unwrap();
        // 6 MiB free now; 2 MiB + 1 leaves > 1 MiB: split.
        let (b, sb) = f.alloc(1, (2 << 20) + 1);
        assert_eq!((b, sb), (a, (2 << 20) + 512));
        let (c, _) = f.alloc(1, 3 << 20);
        assert_eq!(c, a + sb as u64);
        f.pool.free(b).unwrap();
        f.pool.free(c).unwrap();
        f.pool.check_invariants().unwrap();
        assert_eq!(f.pool.take_free_segments(|_| true), vec![(a, 6 << 20)]);
        assert_eq!(f.pool.counters().reserved, 0);
    }

    #[test]
    fn stream_reserved_counts_the_streams_segments_used_or_cached() {
        let mut f = Fake::new();
        assert_eq!(f.pool.stream_reserved(1), 0);
        let (a, _) = f.alloc(1, 4096);
        let (b, _) = f.alloc(1, 3 << 20);
        f.alloc(2, 4096);
        // A small segment (2 MiB) and a large one (4 MiB) on stream 1.
        assert_eq!(f.pool.stream_reserved(1), (2 << 20) + (4 << 20));
        f.pool.free(a).unwrap();
        f.pool.free(b).unwrap();
        assert_eq!(f.pool.stream_reserved(1), (2 << 20) + (4 << 20), "cached");
        assert_eq!(f.pool.stream_reserved(2), 2 << 20);
        f.pool.take_free_segments(|s| s == 1);
        assert_eq!(f.pool.stream_reserved(1), 0);
    }

    #[test]
    fn stream_is_idle_until_every_block_of_its_segments_is_free() {
        let mut f = Fake::new();
        assert!(f.pool.stream_is_idle(1), "no segments: idle");
        let (a, _) = f.alloc(1, 4096);
        let (b, _) = f.alloc(1, 3 << 20);
        let (c, _) = f.alloc(2, 4096);
        assert!(!f.pool.stream_is_idle(1));
        f.pool.free(a).unwrap();
        assert!(
            !f.pool.stream_is_idle(1),
            "the large block is still allocated"
        );
        f.pool.free(b).unwrap();
        assert!(f.pool.stream_is_idle(1));
        assert!(!f.pool.stream_is_idle(2), "other streams are not affected");
        assert_eq!(f.pool.take_free_segments(|s| s == 1).len(), 2);
        f.pool.free(c).unwrap();
        assert!(f.pool.stream_is_idle(2));
        f.pool.check_invariants().unwrap();
    }

    #[test]
    fn double_free_is_refused() {
        let mut f = Fake::new();
        let (a, _) = f.alloc(1, 100);
        assert!(f.pool.free(a).is_some());
        assert!(f.pool.free(a).is_none());
        assert!(f.pool.free(12345).is_none());
    }

    proptest! {
        #[test]
        fn random_alloc_free_keeps_invariants_and_bounded_reserve(
            ops in prop::collection::vec((0usize..3, 1usize..(5 << 20), any::<bool>()), 1..200)
        ) {
            let mut f = Fake::new();
            let mut live: Vec<(u64, usize)> = Vec::new();
            let mut max_live = 0usize;
            for (stream, bytes, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (a, _) = live.swap_remove(bytes % live.len());
                    prop_assert!(f.pool.free(a).is_some());
                } else {
                    let (a, size) = f.alloc(stream as u64, bytes);
                    prop_assert!(size >= bytes);
                    // No overlap with a live block.
                    for &(b, bs) in &live {
                        prop_assert!(a + size as u64 <= b || b + bs as u64 <= a);
                    }
                    live.push((a, size));
                }
                max_live = max_live.max(live.iter().map(|l| l.1).sum());
                f.pool.check_invariants().map_err(TestCaseError::fail)?;
            }
            for (a, _) in live.drain(..) {
                prop_assert!(f.pool.free(a).is_some());
            }
            f.pool.check_invariants().map_err(TestCaseError::fail)?;
            prop_assert_eq!(f.pool.counters().in_use, 0);
            // Everything can be given back.
            f.pool.take_free_segments(|_| true);
            prop_assert_eq!(f.pool.counters().reserved, 0);
            prop_assert_eq!(f.pool.segment_count(), 0);
        }

        #[test]
        fn repeated_cycles_keep_reserved_bounded(sizes in prop::collection::vec(1usize..(24 << 20), 1..64)) {
            // Every cycle starts from wholly free segments, so a cycle without a driver
            // allocation is a fixed point; growth before that is bounded by one segment per
            // request, i.e. at most 2x the first cycle.
            let mut f = Fake::new();
            let mut reserved = Vec::new();
            for _ in 0..(sizes.len() + 2) {
                let before = f.driver_allocs;
                let live: Vec<u64> = sizes.iter().map(|&s| f.alloc(7, s).0).collect();
                for a in live { f.pool.free(a); }
                reserved.push(f.pool.counters().reserved);
                if f.driver_allocs == before && reserved.len() > 1 {
                    break;
                }
            }
            let last = *reserved.last().unwrap();
            prop_assert!(last <= 2 * reserved[0] + SMALL_SEGMENT, "{:?}", reserved);
            // The fixed point holds.
            let before = f.driver_allocs;
            let live: Vec<u64> = sizes.iter().map(|&s| f.alloc(7, s).0).collect();
            for a in live { f.pool.free(a); }
            prop_assert_eq!(f.driver_allocs, before, "{:?}", reserved);
            prop_assert_eq!(f.pool.counters().reserved, last);
        }
    }
}
