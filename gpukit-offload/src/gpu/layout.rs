//! Where one call's operands lie in its device arena.
//!
//! A call lays out its device buffers with [`Layout::dev`] (matrices packed with `ld = rows`),
//! the libraries' workspaces with [`Layout::workspace`], and its small status words with
//! [`Layout::status`] (LAPACK `info`s, the flag words of the non-finite checks, copied
//! diagonals). The offsets handed out are relative: the status words go first in the arena
//! (their region, rounded up to [`ALIGN`], is [`Layout::shift`] bytes) and the buffers after
//! them in the order they were laid out, so the status words and the results that follow them
//! come back in one copy, and the zeroed status words go up with the first operands. Workspace
//! is counted apart: a tiny call whose library asks for a large workspace (cuSOLVER's polar
//! SVD) still runs in the lane's own arena; every launch code lays its workspace out last.

/// Device buffers are aligned to this (cuBLAS and cuSOLVER want 256; 512 suits everything).
pub(crate) const ALIGN: usize = 512;
/// Status words are aligned to this.
const STATUS_ALIGN: usize = 16;

/// Bump allocator for one call's device buffers and status words.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    dev: usize,
    status: usize,
    largest: usize,
    workspace: usize,
    /// End of the last buffer that is not workspace (relative to the buffers' start).
    data_end: usize,
}

impl Layout {
    /// Reserves `bytes` of device memory; returns its offset among the buffers.
    pub(crate) fn dev(&mut self, bytes: usize) -> usize {
        let o = self.dev;
        self.dev += bytes.next_multiple_of(ALIGN).max(ALIGN);
        self.largest = self.largest.max(bytes);
        self.data_end = o + bytes;
        o
    }

    /// Reserves `bytes` of library workspace (never copied to or from the host); returns its
    /// offset among the buffers.
    pub(crate) fn workspace(&mut self, bytes: usize) -> usize {
        let o = self.dev;
        let b = bytes.next_multiple_of(ALIGN).max(ALIGN);
        self.dev += b;
        self.workspace += b;
        o
    }

    /// Reserves `bytes` of status words; returns their offset in the status region.
    pub(crate) fn status(&mut self, bytes: usize) -> usize {
        let o = self.status;
        self.status += bytes.next_multiple_of(STATUS_ALIGN).max(STATUS_ALIGN);
        o
    }

    /// Bytes of status words.
    pub(crate) fn status_len(&self) -> usize {
        self.status
    }

    /// Where the buffers start in the arena: after the status region.
    pub(crate) fn shift(&self) -> usize {
        self.status.next_multiple_of(ALIGN)
    }

    /// Bytes of the buffers (their offsets lie below this).
    pub(crate) fn dev_len(&self) -> usize {
        self.dev
    }

    /// Device bytes the call needs in all.
    pub(crate) fn total(&self) -> usize {
        self.shift() + self.dev
    }

    /// Arena bytes up to the end of the last buffer that is not workspace: the status words,
    /// the operands and the results (with workspace laid out last, everything but it).
    pub(crate) fn operands(&self) -> usize {
        self.shift() + self.data_end
    }

    /// The largest single buffer but workspace (what one staged copy may move).
    pub(crate) fn largest(&self) -> usize {
        self.largest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_disjoint_and_follow_the_status_words() {
        let mut l = Layout::default();
        let a = l.dev(1000);
        let b = l.dev(0);
        let c = l.dev(513);
        assert_eq!((a, b, c), (0, 1024, 1536));
        assert_eq!(l.dev_len(), 1536 + 1024);
        assert_eq!(l.shift(), 0, "no status words: the buffers start the arena");
        let s0 = l.status(4);
        let s1 = l.status(8);
        assert_eq!((s0, s1), (0, 16));
        assert_eq!(l.status_len(), 32);
        assert_eq!(l.shift(), ALIGN);
        assert_eq!(l.total(), ALIGN + 1536 + 1024);
        assert_eq!(l.operands(), ALIGN + 1536 + 513);
        assert_eq!(l.largest(), 1000);
        for off in [a, b, c, l.shift()] {
            assert_eq!(off % ALIGN, 0);
        }
    }

    #[test]
    fn workspace_is_laid_out_but_counted_apart() {
        let mut l = Layout::default();
        let a = l.dev(128);
        let b = l.dev(100);
        let w = l.workspace(3 << 20);
        assert_eq!((a, b, w), (0, 512, 1024));
        let s = l.status(4);
        assert_eq!(s, 0);
        assert_eq!(l.total(), ALIGN + 1024 + (3 << 20));
        assert_eq!(l.operands(), ALIGN + 512 + 100);
        // a workspace is never staged: it does not count as the largest buffer
        assert_eq!(l.largest(), 128);
    }

    proptest::proptest! {
        /// Any sequence of buffers: aligned, disjoint, inside the total; the status region
        /// before the buffers.
        #[test]
        fn buffers_never_overlap(sizes in proptest::collection::vec(0usize..100_000, 1..20)) {
            let mut l = Layout::default();
            let offs: Vec<(usize, usize)> = sizes.iter().map(|&b| (l.dev(b), b)).collect();
            let st = l.status(4);
            for w in offs.windows(2) {
                proptest::prop_assert!(w[0].0 + w[0].1 <= w[1].0);
            }
            for &(o, _) in &offs {
                proptest::prop_assert_eq!(o % ALIGN, 0);
            }
            let last = offs.last().unwrap();
            proptest::prop_assert!(l.shift() + last.0 + last.1 <= l.total());
            proptest::prop_assert_eq!(l.operands(), l.shift() + last.0 + last.1);
            proptest::prop_assert!(st + 4 <= l.shift());
        }
    }
}
