//! The description of one (batched) GEMM on raw device pointers ([`RawGemm`]), the arithmetic it
//! asks for ([`Precision`]), and its validation.
//!
//! Everything is row-major: `C[m x n] = alpha * op(A) * op(B) + beta * C`, with
//! `op(A)[i][p] = A[i*lda + p]` (or `A[p*lda + i]` when `trans_a`) and likewise for B.
//! `batch` products use element strides between consecutive A, B and C matrices (a stride of 0
//! broadcasts an operand). `beta == 0` never reads C, so C may hold garbage (or NaN).

use crate::error::{Error, Result};

/// Single-precision arithmetic of an f32 product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// FP32 accuracy, like NumPy. The default. Runs the FP32 SIMT kernel, or, on devices where
    /// the 3xTF32 tensor-core kernel was measured both faster and as accurate as cuBLAS SGEMM
    /// (compute capability 9.0 with K >= 256: see [`Precision::Tf32x3`] and GEMM_NOTES.md), that
    /// kernel for the shapes where the planner estimates it faster.
    #[default]
    Fp32,
    /// Tensor cores on inputs rounded to TF32 (10-bit mantissa, round to nearest: ties away from
    /// zero, or ties to even where the Hopper copy engine rounds the operands on their way into
    /// shared memory), f32 accumulation; like PyTorch's `allow_tf32`. About 3e-4 normwise
    /// relative error.
    Tf32,
    /// FP32 accuracy from TF32 tensor cores ("3xTF32"): each operand is split into a TF32 big
    /// part and a TF32 remainder, and `small*big + big*small + big*big` is accumulated in f32
    /// (the long sum over K with round-to-nearest adds outside the tensor cores). Its normwise
    /// error is about 2.4e-7 to 3.7e-7 whatever K (measured on the H200: below cuBLAS SGEMM's
    /// from K = 256 up, up to 1.7x above it at K = 64). On devices without the Hopper `wgmma`
    /// kernel this runs the FP32 SIMT kernel (same accuracy class).
    Tf32x3,
}

/// Whether an operand is used as stored or transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transpose {
    /// `op(X) = X`.
    #[default]
    No,
    /// `op(X) = X^T`.
    Yes,
}

impl Transpose {
    /// True for [`Transpose::Yes`].
    pub fn is_yes(self) -> bool {
        self == Transpose::Yes
    }
}

/// One (batched) GEMM on raw device pointers; dimensions, leading dimensions and strides are in
/// elements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawGemm {
    /// Rows of `op(A)` and C.
    pub m: usize,
    /// Columns of `op(B)` and C.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// Transpose of A.
    pub trans_a: Transpose,
    /// Transpose of B.
    pub trans_b: Transpose,
    /// Device address of A.
    pub a: u64,
    /// Row stride of A as stored.
    pub lda: usize,
    /// Element stride between batch entries of A (0 broadcasts).
    pub stride_a: usize,
    /// Device address of B.
    pub b: u64,
    /// Row stride of B as stored.
    pub ldb: usize,
    /// Element stride between batch entries of B (0 broadcasts).
    pub stride_b: usize,
    /// Device address of C.
    pub c: u64,
    /// Row stride of C.
    pub ldc: usize,
    /// Element stride between batch entries of C.
    pub stride_c: usize,
    /// Scale of the product.
    pub alpha: f64,
    /// Scale of the old C (0: C is not read).
    pub beta: f64,
    /// Number of products.
    pub batch: usize,
}

impl RawGemm {
    /// A single `C = A * B` on contiguous row-major matrices (`lda = k`, `ldb = ldc = n`).
    pub fn contiguous(m: usize, n: usize, k: usize, a: u64, b: u64, c: u64) -> Self {
        RawGemm {
            m,
            n,
            k,
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            a,
            lda: k,
            stride_a: m * k,
            b,
            ldb: n,
            stride_b: k * n,
            c,
            ldc: n,
            stride_c: m * n,
            alpha: 1.0,
            beta: 0.0,
            batch: 1,
        }
    }

    /// Rows and columns of A as stored.
    pub fn a_stored(&self) -> (usize, usize) {
        if self.trans_a.is_yes() {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }

    /// Rows and columns of B as stored.
    pub fn b_stored(&self) -> (usize, usize) {
        if self.trans_b.is_yes() {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }

    /// Number of elements one batch entry of each operand spans: `(A, B, C)`.
    pub fn spans(&self) -> (usize, usize, usize) {
        let span = |(r, c): (usize, usize), ld: usize| {
            if r == 0 || c == 0 {
                0
            } else {
                (r - 1) * ld + c
            }
        };
        (
            span(self.a_stored(), self.lda),
            span(self.b_stored(), self.ldb),
            span((self.m, self.n), self.ldc),
        )
    }

    /// Elements each operand needs from its base address, over all batch entries: `(A, B, C)`.
    pub fn required_len(&self) -> (usize, usize, usize) {
        let (sa, sb, sc) = self.spans();
        let over = |span: usize, stride: usize| {
            if span == 0 || self.batch == 0 {
                0
            } else {
                (self.batch - 1) * stride + span
            }
        };
        (
            over(sa, self.stride_a),
            over(sb, self.stride_b),
            over(sc, self.stride_c),
        )
    }

    /// Checks dimensions, leading dimensions and strides (not the pointers).
    pub fn validate(&self) -> Result<()> {
        let op = "gemm";
        let limit = i32::MAX as usize;
        for (name, v) in [
            ("m", self.m),
            ("n", self.n),
            ("k", self.k),
            ("lda", self.lda),
            ("ldb", self.ldb),
            ("ldc", self.ldc),
        ] {
            if v > limit {
                return Err(Error::invalid(
                    op,
                    format!("{name} = {v} exceeds the 32-bit limit {limit}"),
                ));
            }
        }
        for (name, (r, c), ld) in [
            ("lda", self.a_stored(), self.lda),
            ("ldb", self.b_stored(), self.ldb),
            ("ldc", (self.m, self.n), self.ldc),
        ] {
            if r > 0 && c > 0 && ld < c {
                return Err(Error::invalid(
                    op,
                    format!("{name} = {ld} is smaller than the {c} columns of a {r}x{c} operand"),
                ));
            }
        }
        let (_, _, sc) = self.spans();
        if self.batch > 1 && sc > 0 && self.stride_c < sc {
            return Err(Error::invalid(
                op,
                format!(
                    "stride_c = {} makes the {} outputs of {} elements overlap",
                    self.stride_c, self.batch, sc
                ),
            ));
        }
        for (name, v) in [
            ("stride_a", self.stride_a),
            ("stride_b", self.stride_b),
            ("stride_c", self.stride_c),
        ] {
            if v > i64::MAX as usize / 2 {
                return Err(Error::invalid(op, format!("{name} = {v} is too large")));
            }
        }
        Ok(())
    }

    /// True when the aligned 16-byte path of our kernels applies to A and B: addresses 16-byte
    /// aligned, leading dimensions and batch strides multiples of 4.
    pub fn ab_vectorizable(&self) -> bool {
        self.a_vectorizable() && self.b_vectorizable()
    }

    /// Whether every row (and batch entry) of the f32 matrix at `addr` with leading dimension
    /// `ld` and batch stride `stride` starts on a multiple of `bytes`.
    fn rows_aligned(&self, addr: u64, ld: usize, stride: usize, bytes: usize) -> bool {
        let elems = bytes / 4;
        addr.is_multiple_of(bytes as u64)
            && ld.is_multiple_of(elems)
            && (self.batch <= 1 || stride.is_multiple_of(elems))
    }

    /// The A half of [`ab_vectorizable`](Self::ab_vectorizable).
    pub fn a_vectorizable(&self) -> bool {
        self.rows_aligned(self.a, self.lda, self.stride_a, 16)
    }

    /// The B half of [`ab_vectorizable`](Self::ab_vectorizable).
    pub fn b_vectorizable(&self) -> bool {
        self.rows_aligned(self.b, self.ldb, self.stride_b, 16)
    }

    /// True when every row of A starts on a 32-byte L2 sector: address, leading dimension and
    /// batch stride multiples of 32 bytes. The tensor copies of rows that straddle sectors run
    /// slower (GEMM_NOTES.md, version 15: 2500x2500x500 against 2504x2504x504 on an H100).
    pub fn a_sector_aligned(&self) -> bool {
        self.rows_aligned(self.a, self.lda, self.stride_a, 32)
    }

    /// The same for B.
    pub fn b_sector_aligned(&self) -> bool {
        self.rows_aligned(self.b, self.ldb, self.stride_b, 32)
    }

    /// True when C also allows vector stores (same conditions).
    pub fn c_vectorizable(&self) -> bool {
        self.rows_aligned(self.c, self.ldc, self.stride_c, 16)
    }

    /// True when the `wgmma` kernel can read A in place through a tensor map (TMA), stored either
    /// way: 16-byte aligned, with leading dimension and batch stride multiples of 4 elements (the
    /// tensor map's 16-byte stride rules).
    pub fn a_tensor_mappable(&self) -> bool {
        self.a_vectorizable()
    }

    /// The same for B.
    pub fn b_tensor_mappable(&self) -> bool {
        self.b_vectorizable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> RawGemm {
        RawGemm::contiguous(3, 5, 7, 0, 0, 0)
    }

    /// Sector alignment: address, leading dimension and batch stride in 32-byte steps (the
    /// stride only when there is a batch).
    #[test]
    fn sector_alignment_needs_address_pitch_and_stride() {
        let g = RawGemm::contiguous(4, 8, 16, 0, 0, 0);
        assert!(g.a_sector_aligned() && g.b_sector_aligned());
        let odd_k = RawGemm::contiguous(4, 8, 12, 0, 0, 0);
        assert!(!odd_k.a_sector_aligned() && odd_k.a_tensor_mappable());
        assert!(odd_k.b_sector_aligned());
        let shifted = RawGemm { a: 16, ..g };
        assert!(!shifted.a_sector_aligned() && shifted.a_tensor_mappable());
        let batched = RawGemm {
            batch: 2,
            stride_a: 4 * 16 + 4,
            ..g
        };
        assert!(!batched.a_sector_aligned());
        assert!(RawGemm {
            batch: 1,
            ..batched
        }
        .a_sector_aligned());
    }

    #[test]
    fn validation_names_the_bad_leading_dimension() {
        base().validate().unwrap();
        let mut g = base();
        g.lda = 6;
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("lda = 6") && e.contains("3x7"), "{e}");
        let mut g = base();
        g.trans_b = Transpose::Yes; // B stored 5x7: ldb 5 is too small
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("ldb = 5") && e.contains("5x7"), "{e}");
        let mut g = base();
        g.ldc = 4;
        assert!(g.validate().unwrap_err().to_string().contains("ldc = 4"));
        // Empty operands accept any leading dimension.
        let mut g = RawGemm::contiguous(0, 5, 7, 0, 0, 0);
        g.lda = 0;
        g.validate().unwrap();
    }

    #[test]
    fn validation_rejects_overlapping_batches_and_huge_dims() {
        let mut g = base();
        g.batch = 2;
        g.stride_c = 14; // one C spans 15 elements
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains("overlap"), "{e}");
        g.stride_c = 15;
        g.validate().unwrap();
        g.stride_a = 0; // broadcasting A is fine
        g.validate().unwrap();
        let mut g = base();
        g.m = 1 << 31;
        assert!(g.validate().unwrap_err().to_string().contains("32-bit"));
    }

    #[test]
    fn spans_and_vector_path_conditions() {
        let mut g = RawGemm::contiguous(4, 8, 12, 256, 512, 1024);
        assert_eq!(g.spans(), (48, 96, 32));
        g.batch = 3;
        assert_eq!(g.required_len(), (3 * 48, 3 * 96, 3 * 32));
        assert!(g.ab_vectorizable() && g.c_vectorizable() && g.a_tensor_mappable());
        g.lda = 13;
        assert!(!g.ab_vectorizable() && !g.a_tensor_mappable() && g.b_vectorizable());
        let mut g = RawGemm::contiguous(4, 8, 12, 256 + 4, 512, 1024);
        assert!(!g.ab_vectorizable());
        g.a = 256;
        g.c = 1024 + 8;
        assert!(g.ab_vectorizable() && !g.c_vectorizable());
        // Either storage order maps (the kernel reads K-major and MN-major tiles).
        g.trans_a = Transpose::Yes;
        assert!(g.a_tensor_mappable() && g.b_tensor_mappable());
        let mut t = RawGemm::contiguous(4, 8, 12, 0, 0, 0);
        t.trans_a = Transpose::Yes;
        assert_eq!(t.a_stored(), (12, 4));
        // A batch stride that breaks 16-byte alignment of later entries rules out TMA.
        let mut g = RawGemm::contiguous(4, 8, 12, 256, 512, 1024);
        g.batch = 2;
        g.stride_a = 50;
        assert!(!g.a_tensor_mappable() && g.b_tensor_mappable());
        g.stride_b = 50;
        assert!(!g.b_tensor_mappable());
    }
}
