//! Where one call's operands lie in the lane's device arena.
//!
//! A call lays out its device buffers with [`Layout::dev`] (matrices packed with `ld = rows`),
//! the libraries' workspaces with [`Layout::workspace`], and its small status words with
//! [`Layout::status`] (LAPACK `info`s, the flag words of the non-finite checks, copied
//! diagonals). The status words follow the buffers in the arena, so one copy brings all of them
//! back after the computation. Workspace is counted apart: a tiny call whose library asks for a
//! large workspace (cuSOLVER's polar SVD) still runs in the lane's own arena.

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
}

impl Layout {
    /// Reserves `bytes` of device memory; returns its offset in the arena.
    pub(crate) fn dev(&mut self, bytes: usize) -> usize {
        let o = self.dev;
        self.dev += bytes.next_multiple_of(ALIGN).max(ALIGN);
        self.largest = self.largest.max(bytes);
        o
    }

    /// Reserves `bytes` of library workspace (never copied to or from the host); returns its
    /// offset in the arena.
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

    /// Offset of the status region in the arena.
    pub(crate) fn status_base(&self) -> usize {
        self.dev
    }

    /// Bytes of status words.
    pub(crate) fn status_len(&self) -> usize {
        self.status
    }

    /// Device bytes the call needs in all.
    pub(crate) fn total(&self) -> usize {
        self.dev + self.status
    }

    /// Device bytes of everything but the libraries' workspace (operands, results, status).
    pub(crate) fn operands(&self) -> usize {
        self.total() - self.workspace
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
    fn buffers_are_aligned_disjoint_and_status_follows() {
        let mut l = Layout::default();
        let a = l.dev(1000);
        let b = l.dev(0);
        let c = l.dev(513);
        assert_eq!((a, b, c), (0, 1024, 1536));
        assert!(c + 513 <= l.status_base());
        let s0 = l.status(4);
        let s1 = l.status(8);
        assert_eq!((s0, s1), (0, 16));
        assert_eq!(l.status_base(), 1536 + 1024);
        assert_eq!(l.total(), l.status_base() + 32);
        assert_eq!(l.largest(), 1000);
        for off in [a, b, c, l.status_base()] {
            assert_eq!(off % ALIGN, 0);
        }
        assert_eq!(l.operands(), l.total());
    }

    #[test]
    fn workspace_is_laid_out_but_counted_apart() {
        let mut l = Layout::default();
        let a = l.dev(128);
        let w = l.workspace(3 << 20);
        let b = l.dev(100);
        assert_eq!((a, w), (0, 512));
        assert_eq!(b, 512 + (3 << 20));
        let s = l.status(4);
        assert_eq!(s, 0);
        assert_eq!(l.total(), b + 512 + 16);
        assert_eq!(l.operands(), 512 + 512 + 16);
        // a workspace is never staged: it does not count as the largest buffer
        assert_eq!(l.largest(), 128);
    }

    proptest::proptest! {
        /// Any sequence of buffers: aligned, disjoint, inside the total; the status region
        /// after the buffers.
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
            proptest::prop_assert!(last.0 + last.1 <= l.status_base());
            proptest::prop_assert!(l.status_base() + st + 4 <= l.total());
        }
    }
}
