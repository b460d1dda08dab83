//! The `wgmma` kernel's two operands, P and Q, as views of the user's A and B.
//!
//! The kernel computes `P Q^T` per block tile ([`super::plan::Operands`]): `P = op(A)` and
//! `Q = op(B)^T`, or swapped `P = op(B)^T` and `Q = op(A)` (the kernel then stores its tile
//! transposed). Both are `rows x K` matrices read from the user's storage without a copy: the
//! operand pack and the tensor maps take them in this form.

use super::desc::RawGemm;
use super::plan::Operands;

/// A `rows x k` operand of the `wgmma` kernel in the user's storage: element `(r, p)` of batch
/// entry `e` at `ptr + 4 * (e * stride + (row_contig ? p * ld + r : r * ld + p))`, `entries`
/// batch entries (1 when the operand is broadcast over the batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OperandView {
    /// Device address of the first batch entry of this launch.
    pub ptr: u64,
    /// Rows (M for op(A), N for op(B)^T).
    pub rows: usize,
    /// The inner dimension.
    pub k: usize,
    /// Row stride of the storage, in elements.
    pub ld: usize,
    /// Elements between batch entries (0: broadcast).
    pub stride: usize,
    /// Batch entries to read (1 for a broadcast operand).
    pub entries: usize,
    /// The rows are contiguous (MN-major storage: `X[p * ld + r]`); else K is contiguous.
    pub row_contig: bool,
}

impl OperandView {
    /// True when one copy of this operand serves every batch entry.
    pub fn broadcast(&self) -> bool {
        self.stride == 0
    }
}

/// `op(A)` and `op(B)^T` of batch entries `b0 .. b0 + nb` of `g`.
pub(crate) fn a_and_bt(g: &RawGemm, b0: usize, nb: usize) -> (OperandView, OperandView) {
    let entries = |stride: usize| if stride == 0 || g.batch <= 1 { 1 } else { nb };
    let stride = |s: usize| if g.batch <= 1 { 0 } else { s };
    let a = OperandView {
        ptr: g.a + (b0 * g.stride_a * 4) as u64,
        rows: g.m,
        k: g.k,
        ld: g.lda,
        stride: stride(g.stride_a),
        entries: entries(g.stride_a),
        // op(A)[m][p] = A[p * lda + m] when A is stored transposed.
        row_contig: g.trans_a.is_yes(),
    };
    let bt = OperandView {
        ptr: g.b + (b0 * g.stride_b * 4) as u64,
        rows: g.n,
        k: g.k,
        ld: g.ldb,
        stride: stride(g.stride_b),
        entries: entries(g.stride_b),
        // op(B)^T[n][p] = op(B)[p][n] = B[p * ldb + n] when B is not transposed.
        row_contig: !g.trans_b.is_yes(),
    };
    (a, bt)
}

/// The kernel's `(P, Q)` for batch entries `b0 .. b0 + nb` of `g` under `ops`.
pub(crate) fn p_and_q(
    g: &RawGemm,
    ops: &Operands,
    b0: usize,
    nb: usize,
) -> (OperandView, OperandView) {
    let (a, bt) = a_and_bt(g, b0, nb);
    if ops.swap {
        (bt, a)
    } else {
        (a, bt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::desc::Transpose;
    use crate::gemm::plan::Source;

    #[test]
    fn views_follow_the_storage_and_the_roles() {
        let mut g = RawGemm::contiguous(3, 5, 7, 4096, 8192, 0);
        g.batch = 4;
        g.stride_b = 0;
        let (p, q) = p_and_q(&g, &Operands::PACKED, 2, 2);
        assert_eq!((p.rows, p.ld, p.row_contig, p.entries), (3, 7, false, 2));
        assert_eq!(p.ptr, 4096 + 2 * 21 * 4);
        assert_eq!((q.rows, q.ld, q.row_contig, q.entries), (5, 5, true, 1));
        assert!(q.broadcast() && q.ptr == 8192);
        let swapped = Operands {
            swap: true,
            p: Source::TmaMnMajor,
            q_tma: true,
        };
        let (p2, q2) = p_and_q(&g, &swapped, 2, 2);
        assert_eq!((p2, q2), (q, p));
        g.trans_a = Transpose::Yes;
        g.trans_b = Transpose::Yes;
        let (a, bt) = a_and_bt(&g, 0, 4);
        assert!(a.row_contig && !bt.row_contig);
        // A single product never advances by its stride.
        let g1 = RawGemm::contiguous(3, 5, 7, 0, 0, 0);
        let (a, bt) = a_and_bt(&g1, 0, 1);
        assert!(a.broadcast() && bt.broadcast() && a.entries == 1);
    }
}
