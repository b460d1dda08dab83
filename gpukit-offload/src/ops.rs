//! The operation catalogue: routines, precisions, shapes, flop and byte counts.
//!
//! Every decision is keyed by an [`OpKind`] (routine, plus whether eigen/singular vectors are
//! wanted, which changes the cost by several times), a [`Precision`] and a [`Shape`]. A shape maps
//! to two *features* `(x1, x2)` per routine (for gemm the output side `sqrt(m*n)` and the inner
//! dimension `k`; for solves the order `n` and the right-hand-side count `nrhs`; for
//! factorizations of rectangular matrices the short side and the aspect ratio), so a rectangular
//! call is judged by its shape, not by its flop count alone.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Element type of a call: LAPACK's s, d, c and z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// `f32`.
    S,
    /// `f64`.
    D,
    /// Complex `f32` pairs.
    C,
    /// Complex `f64` pairs.
    Z,
}

impl Precision {
    /// All four precisions, in LAPACK order.
    pub const ALL: [Precision; 4] = [Precision::S, Precision::D, Precision::C, Precision::Z];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Precision::S => 4,
            Precision::D | Precision::C => 8,
            Precision::Z => 16,
        }
    }

    /// Bytes per element of the matching real type (eigenvalues, singular values).
    pub fn real_size(self) -> usize {
        match self {
            Precision::S | Precision::C => 4,
            Precision::D | Precision::Z => 8,
        }
    }

    /// True for c and z.
    pub fn is_complex(self) -> bool {
        matches!(self, Precision::C | Precision::Z)
    }

    /// The LAPACK letter.
    pub fn letter(self) -> char {
        match self {
            Precision::S => 's',
            Precision::D => 'd',
            Precision::C => 'c',
            Precision::Z => 'z',
        }
    }

    /// Parses a LAPACK letter.
    pub fn from_letter(c: char) -> Option<Precision> {
        match c.to_ascii_lowercase() {
            's' => Some(Precision::S),
            'd' => Some(Precision::D),
            'c' => Some(Precision::C),
            'z' => Some(Precision::Z),
            _ => None,
        }
    }

    /// Real flops per complex multiply-add relative to a real one (4 for complex).
    pub fn flop_factor(self) -> f64 {
        if self.is_complex() {
            4.0
        } else {
            1.0
        }
    }

    #[inline]
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A BLAS/LAPACK routine the dispatcher knows. Real and complex variants of one algorithm are
/// one routine (`syev` / `heev`, `syevd` / `heevd`, `syevr` / `heevr`, `orgqr` / `ungqr`); the
/// Hermitian BLAS-3
/// routines `hemm` and `herk` exist in c and z only and are routines of their own (their complex
/// symmetric namesakes `csymm` / `csyrk` are [`Routine::Symm`] / [`Routine::Syrk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Routine {
    /// General matrix product.
    Gemm,
    /// Symmetric matrix times general matrix.
    Symm,
    /// Hermitian matrix times general matrix (c, z).
    Hemm,
    /// Symmetric rank-k update.
    Syrk,
    /// Hermitian rank-k update (c, z; real `alpha` and `beta`).
    Herk,
    /// Triangular solve with many right-hand sides.
    Trsm,
    /// Triangular matrix times general matrix (in place).
    Trmm,
    /// LU factorization with partial pivoting.
    Getrf,
    /// Solve with an LU factorization.
    Getrs,
    /// LU factorization and solve.
    Gesv,
    /// Inverse from an LU factorization.
    Getri,
    /// Cholesky factorization.
    Potrf,
    /// Solve with a Cholesky factorization.
    Potrs,
    /// Cholesky factorization and solve.
    Posv,
    /// Inverse from a Cholesky factorization.
    Potri,
    /// Triangular solve with a LAPACK singularity check (`info > 0` for a zero diagonal).
    Trtrs,
    /// Symmetric / Hermitian eigensolver (QR iteration, the simple driver): `syev` for s/d,
    /// `heev` for c/z (scipy's `eigh(driver="ev")`, which `pinvh` and scikit-learn's
    /// covariance estimators use). The GPU runs it as [`Routine::Syevd`]; the CPU side has curves
    /// of its own (QR iteration is several times slower than divide and conquer).
    Syev,
    /// Symmetric / Hermitian eigensolver (divide and conquer): `syevd` for s/d, `heevd` for c/z.
    Syevd,
    /// Symmetric / Hermitian eigensolver (relatively robust representations, scipy's default
    /// `eigh` driver): `syevr` for s/d, `heevr` for c/z.
    Syevr,
    /// Singular value decomposition, divide and conquer driver.
    Gesdd,
    /// Singular value decomposition, QR-iteration driver.
    Gesvd,
    /// Minimum-norm least squares through the SVD (numpy's and scipy's `lstsq`).
    Gelsd,
    /// QR factorization.
    Geqrf,
    /// The Q of a QR factorization (`orgqr` for s/d, `ungqr` for c/z).
    Orgqr,
}

impl Routine {
    /// Every routine, in catalogue order.
    pub const ALL: [Routine; 24] = [
        Routine::Gemm,
        Routine::Symm,
        Routine::Hemm,
        Routine::Syrk,
        Routine::Herk,
        Routine::Trsm,
        Routine::Trmm,
        Routine::Getrf,
        Routine::Getrs,
        Routine::Gesv,
        Routine::Getri,
        Routine::Potrf,
        Routine::Potrs,
        Routine::Posv,
        Routine::Potri,
        Routine::Trtrs,
        Routine::Syev,
        Routine::Syevd,
        Routine::Syevr,
        Routine::Gesdd,
        Routine::Gesvd,
        Routine::Gelsd,
        Routine::Geqrf,
        Routine::Orgqr,
    ];

    /// The name without the precision letter (`gemm`, `syevd`, ...), as for s and d.
    pub fn stem(self) -> &'static str {
        self.info().stem
    }

    /// The stem of the complex variant (`heev`, `heevd`, `heevr`, `ungqr`; else
    /// [`Routine::stem`]).
    pub fn complex_stem(self) -> &'static str {
        self.info().complex_stem
    }

    /// The precisions LAPACK defines the routine in (c and z only for `hemm` / `herk`).
    pub fn precisions(self) -> &'static [Precision] {
        self.info().precisions
    }

    /// The LAPACK name for a precision (`dgemm`, `zheevd`, `cungqr`, ...).
    pub fn name(self, p: Precision) -> String {
        let stem = if p.is_complex() {
            self.complex_stem()
        } else {
            self.stem()
        };
        format!("{}{}", p.letter(), stem)
    }

    /// Parses a stem (`gemm`, `heevd`) or a LAPACK name (`dgemm`, `zheevd`) into the routine and,
    /// for a full name, the precision.
    pub fn parse(s: &str) -> Option<(Routine, Option<Precision>)> {
        let s = s.trim().to_ascii_lowercase();
        let find = |stem: &str| -> Option<Routine> {
            Routine::ALL
                .into_iter()
                .find(|r| r.stem() == stem || r.complex_stem() == stem)
        };
        if let Some(r) = find(&s) {
            return Some((r, None));
        }
        let mut chars = s.chars();
        let p = Precision::from_letter(chars.next()?)?;
        let r = find(chars.as_str())?;
        let stem = chars.as_str();
        let named_right = if p.is_complex() {
            stem == r.complex_stem() || (stem == r.stem() && r.stem() == r.complex_stem())
        } else {
            stem == r.stem()
        };
        (named_right && r.precisions().contains(&p)).then_some((r, Some(p)))
    }

    /// The variants the model distinguishes for this routine (see [`Variant`]).
    pub fn variants(self) -> &'static [Variant] {
        self.info().variants
    }

    /// True for the routines whose cost depends on whether vectors are computed.
    pub fn has_vectors(self) -> bool {
        self.variants().len() > 1
    }

    #[inline]
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// What changes the cost of a routine by several times besides its shape: eigenvectors or
/// singular vectors wanted, and for an SVD whether all of U / VT (`full_matrices=True`, job
/// `'A'`) or only the first `min(m, n)` vectors (job `'S'`) are formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// Values only (every routine without vectors).
    Plain,
    /// Eigenvectors, or the thin SVD's vectors (job `'S'`, or `'O'`).
    Vectors,
    /// The full SVD's vectors (job `'A'`).
    Full,
}

/// What the cost model keys on besides precision and shape: the routine and its [`Variant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OpKind {
    /// The routine.
    pub routine: Routine,
    /// Values only, vectors, or full SVD vectors.
    pub variant: Variant,
}

impl OpKind {
    /// A routine without vectors.
    #[inline]
    pub fn plain(routine: Routine) -> OpKind {
        OpKind {
            routine,
            variant: Variant::Plain,
        }
    }

    /// A routine in a variant.
    #[inline]
    pub fn new(routine: Routine, variant: Variant) -> OpKind {
        OpKind { routine, variant }
    }

    /// True when vectors are computed (thin or full).
    #[inline]
    pub fn vectors(self) -> bool {
        self.variant != Variant::Plain
    }

    /// The kind whose GPU routine serves this one: syev / heev run as syevd / heevd (the same
    /// results; cuSOLVER's divide and conquer), every other kind as itself.
    pub fn gpu_kind(self) -> OpKind {
        match self.routine {
            Routine::Syev => OpKind::new(Routine::Syevd, self.variant),
            _ => self,
        }
    }

    /// Every kind the model distinguishes.
    pub fn all() -> Vec<OpKind> {
        Routine::ALL
            .into_iter()
            .flat_map(|r| r.variants().iter().map(move |v| OpKind::new(r, *v)))
            .collect()
    }

    /// Stable text key: `gemm`, `syevd+v` (vectors), `gesdd+a` (full SVD).
    pub fn key(self) -> String {
        match self.variant {
            Variant::Plain => self.routine.stem().to_string(),
            Variant::Vectors => format!("{}+v", self.routine.stem()),
            Variant::Full => format!("{}+a", self.routine.stem()),
        }
    }

    /// Parses [`OpKind::key`].
    pub fn parse_key(s: &str) -> Option<OpKind> {
        let (stem, variant) = if let Some(stem) = s.strip_suffix("+v") {
            (stem, Variant::Vectors)
        } else if let Some(stem) = s.strip_suffix("+a") {
            (stem, Variant::Full)
        } else {
            (s, Variant::Plain)
        };
        let (routine, p) = Routine::parse(stem)?;
        if p.is_some() || !routine.variants().contains(&variant) {
            return None;
        }
        Some(OpKind { routine, variant })
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// Sizes of a call. Unused fields are 1. Meaning per routine:
///
/// | routine | m | n | k |
/// | --- | --- | --- | --- |
/// | gemm | rows of C | columns of C | inner dimension |
/// | symm, hemm | rows of C | columns of C | order of A (m for side L, n for side R) |
/// | syrk, herk | - | order of C | rank k |
/// | trsm, trmm | rows of B | columns of B | order of A |
/// | getrf, geqrf, gesdd, gesvd | rows | columns | - |
/// | orgqr | rows | columns | reflectors |
/// | gelsd | rows | columns | right-hand sides |
/// | getrs, gesv, potrs, posv, trtrs | - | order | right-hand sides |
/// | potrf, getri, potri, syev, syevd, syevr | - | order | - |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// See the table above.
    pub m: u64,
    /// See the table above.
    pub n: u64,
    /// See the table above.
    pub k: u64,
}

impl Shape {
    /// A shape from its three sizes.
    #[inline]
    pub fn new(m: u64, n: u64, k: u64) -> Shape {
        Shape { m, n, k }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m={} n={} k={}", self.m, self.n, self.k)
    }
}

fn f(x: u64) -> f64 {
    x as f64
}

/// How a routine's shape maps to the model's two features (see [`OpKind::features`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// gemm: `sqrt(m*n)`, `k`.
    Product,
    /// syrk, herk: order, rank.
    RankK,
    /// symm, hemm, trsm, trmm: order of A, the other dimension of B / C.
    Sided,
    /// Solves: order, right-hand sides.
    Solve,
    /// Square factorizations and inverses: order.
    Square,
    /// Rectangular factorizations: short side, aspect ratio.
    Rect,
}

impl Routine {
    /// How the routine's shape maps to the model's features.
    pub fn family(self) -> Family {
        self.info().family
    }

    /// The model's shape of a call of this routine from its dimensions (one convention per
    /// family, read by [`crate::call::Call::shape`] and the shim's fast path): `m`, `n` as the
    /// routine names them, `k` its third dimension (a product's inner dimension, an update's
    /// rank, the right-hand sides, the reflectors; 1 where it has none), `left` a sided
    /// routine's A on the left (its order is then `m`, else `n`).
    #[inline]
    pub fn shape(self, m: u64, n: u64, k: u64, left: bool) -> Shape {
        match self.family() {
            Family::Product | Family::Rect => Shape::new(m, n, k),
            Family::Sided => Shape::new(m, n, if left { m } else { n }),
            Family::RankK | Family::Solve => Shape::new(1, n, k),
            Family::Square => Shape::new(1, n, 1),
        }
    }

    /// True when the model's second feature is always 1 (square factorizations, inverses and
    /// eigensolvers).
    pub fn one_feature(self) -> bool {
        self.family() == Family::Square
    }

    /// True when the second feature is an aspect ratio (rectangular factorizations).
    pub fn aspect_feature(self) -> bool {
        self.family() == Family::Rect
    }
}

impl OpKind {
    /// Floating point operations of a call (real flops; complex counted as 4 real multiply-adds
    /// per complex one). The usual LAPACK working-note counts, leading terms.
    pub fn flops(self, p: Precision, s: Shape) -> f64 {
        let (m, n, k) = (f(s.m), f(s.n), f(s.k));
        let mn = m.min(n);
        let mx = m.max(n);
        let base = match self.routine {
            Routine::Gemm => 2.0 * m * n * k,
            Routine::Symm | Routine::Hemm => 2.0 * m * n * k,
            Routine::Syrk | Routine::Herk => n * n * k,
            Routine::Trsm | Routine::Trmm => m * n * k,
            Routine::Getrf => m * n * mn - (m + n) * mn * mn / 2.0 + 2.0 * mn * mn * mn / 3.0,
            Routine::Getrs | Routine::Potrs => 2.0 * n * n * k,
            Routine::Trtrs => n * n * k,
            Routine::Gesv => 2.0 * n * n * n / 3.0 + 2.0 * n * n * k,
            Routine::Getri => 4.0 * n * n * n / 3.0,
            Routine::Potrf => n * n * n / 3.0,
            Routine::Posv => n * n * n / 3.0 + 2.0 * n * n * k,
            Routine::Potri => 2.0 * n * n * n / 3.0,
            Routine::Syev => {
                if self.vectors() {
                    // tridiagonal reduction (4/3 n^3), forming Q (4/3 n^3), implicit QL/QR
                    // iterations applied to Q (about 6 n^3)
                    26.0 * n * n * n / 3.0
                } else {
                    4.0 * n * n * n / 3.0
                }
            }
            Routine::Syevd | Routine::Syevr => {
                if self.vectors() {
                    // tridiagonal reduction + tridiagonal solver + back transformation
                    4.0 * n * n * n
                } else {
                    4.0 * n * n * n / 3.0
                }
            }
            Routine::Gesdd | Routine::Gesvd => match self.variant {
                Variant::Plain => 4.0 * mx * mn * mn - 4.0 * mn * mn * mn / 3.0,
                Variant::Vectors => 4.0 * mx * mn * mn + 8.0 * mn * mn * mn,
                // forming all max(m, n) vectors of the long side adds 4 mx^2 mn
                Variant::Full => 4.0 * mx * mx * mn + 4.0 * mx * mn * mn + 8.0 * mn * mn * mn,
            },
            Routine::Gelsd => {
                // bidiagonalization, reflectors applied to B, divide and conquer on the
                // bidiagonal with the right-hand sides
                4.0 * mx * mn * mn - 4.0 * mn * mn * mn / 3.0 + 4.0 * mx * mn * k
            }
            Routine::Geqrf => 2.0 * mx * mn * mn - 2.0 * mn * mn * mn / 3.0,
            Routine::Orgqr => 4.0 * m * n * k - 2.0 * (m + n) * k * k + 4.0 * k * k * k / 3.0,
        };
        base.max(1.0) * p.flop_factor()
    }

    /// The two shape features the model interpolates over (see the module docs).
    pub fn features(self, s: Shape) -> (f64, f64) {
        let (m, n, k) = (f(s.m).max(1.0), f(s.n).max(1.0), f(s.k).max(1.0));
        match self.routine.family() {
            Family::Product => ((m * n).sqrt(), k),
            Family::RankK => (n, k),
            // order of A, and the other dimension of B / C
            Family::Sided => (k, if s.k == s.m { n } else { m }),
            Family::Solve => (n, k),
            Family::Square => (n, 1.0),
            Family::Rect => (m.min(n), m.max(n) / m.min(n)),
        }
    }

    /// A representative shape for a feature pair (the inverse of [`OpKind::features`]).
    pub fn canonical_shape(self, x1: f64, x2: f64) -> Shape {
        let r = |x: f64| x.round().max(1.0) as u64;
        match self.routine.family() {
            Family::Product => Shape::new(r(x1), r(x1), r(x2)),
            Family::RankK => Shape::new(1, r(x1), r(x2)),
            Family::Sided => Shape::new(r(x1), r(x2), r(x1)),
            Family::Solve => Shape::new(1, r(x1), r(x2)),
            Family::Square => Shape::new(1, r(x1), 1),
            Family::Rect => match self.routine {
                // Q with as many columns as reflectors (numpy's reduced `qr`)
                Routine::Orgqr => Shape::new(r(x1 * x2), r(x1), r(x1)),
                _ => Shape::new(r(x1 * x2), r(x1), 1),
            },
        }
    }

    /// Bytes copied host to device and device to host by the GPU path: (in, out).
    pub fn bytes(self, p: Precision, s: Shape) -> (f64, f64) {
        let e = p.size() as f64;
        let re = p.real_size() as f64;
        let (m, n, k) = (f(s.m), f(s.n), f(s.k));
        let mn = m.min(n);
        let mx = m.max(n);
        match self.routine {
            // A, B, C in (C assumed read), C out
            Routine::Gemm => ((m * k + k * n + m * n) * e, m * n * e),
            Routine::Symm | Routine::Hemm => ((k * k + 2.0 * m * n) * e, m * n * e),
            Routine::Syrk | Routine::Herk => ((n * k + n * n) * e, n * n * e),
            Routine::Trsm | Routine::Trmm => ((k * k + m * n) * e, m * n * e),
            Routine::Getrf => (m * n * e, m * n * e + 8.0 * mn),
            Routine::Getrs => ((n * n + n * k) * e + 8.0 * n, n * k * e),
            Routine::Gesv => ((n * n + n * k) * e, (n * n + n * k) * e + 8.0 * n),
            Routine::Getri => (n * n * e + 8.0 * n, n * n * e),
            Routine::Potrf | Routine::Potri => (n * n * e, n * n * e),
            Routine::Potrs | Routine::Trtrs => ((n * n + n * k) * e, n * k * e),
            Routine::Posv => ((n * n + n * k) * e, (n * n + n * k) * e),
            Routine::Syev | Routine::Syevd | Routine::Syevr => (
                n * n * e,
                if self.vectors() { n * n * e } else { 0.0 } + n * re,
            ),
            Routine::Gesdd | Routine::Gesvd => (
                m * n * e,
                mn * re
                    + match self.variant {
                        Variant::Plain => 0.0,
                        Variant::Vectors => (m * mn + mn * n) * e,
                        Variant::Full => (m * m + n * n) * e,
                    },
            ),
            Routine::Gelsd => ((m * n + mx * k) * e, mx * k * e + mn * re),
            Routine::Geqrf => (m * n * e, m * n * e + mn * e),
            Routine::Orgqr => ((m * n + k) * e, m * n * e),
        }
    }

    /// The unit-less size product the shim's fast path compares against its threshold (no
    /// floating point, saturating): the dominant flop term without constants.
    #[inline]
    pub fn work(self, s: Shape) -> u64 {
        let (m, n, k) = (s.m.max(1), s.n.max(1), s.k.max(1));
        match self.routine {
            Routine::Gemm | Routine::Symm | Routine::Hemm | Routine::Trsm | Routine::Trmm => {
                m.saturating_mul(n).saturating_mul(k)
            }
            Routine::Syrk | Routine::Herk => n.saturating_mul(n).saturating_mul(k),
            Routine::Getrf | Routine::Geqrf | Routine::Gesdd | Routine::Gesvd | Routine::Gelsd => {
                m.saturating_mul(n).saturating_mul(m.min(n))
            }
            Routine::Orgqr => m.saturating_mul(n).saturating_mul(k),
            Routine::Getrs | Routine::Potrs | Routine::Trtrs => {
                n.saturating_mul(n).saturating_mul(k)
            }
            Routine::Gesv | Routine::Posv => {
                n.saturating_mul(n).saturating_mul(n.saturating_add(k))
            }
            Routine::Potrf
            | Routine::Getri
            | Routine::Potri
            | Routine::Syev
            | Routine::Syevd
            | Routine::Syevr => n.saturating_mul(n).saturating_mul(n),
        }
    }
}

/// Transpose flag of a BLAS operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trans {
    /// As stored (`'N'`).
    No,
    /// Transposed (`'T'`).
    Trans,
    /// Conjugate transposed (`'C'`; same as `'T'` for real types).
    Conj,
}

/// Which triangle of a symmetric or triangular matrix is referenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Uplo {
    /// Upper triangle (`'U'`).
    Upper,
    /// Lower triangle (`'L'`).
    Lower,
}

/// Side of the special matrix in symm and trsm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// `op(A) * B` (`'L'`).
    Left,
    /// `B * op(A)` (`'R'`).
    Right,
}

/// Whether a triangular matrix has a unit diagonal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Diag {
    /// Diagonal read from A (`'N'`).
    NonUnit,
    /// Diagonal assumed to be ones (`'U'`).
    Unit,
}

/// Which singular vectors an SVD computes (LAPACK's `'N'`, `'S'`, `'A'`; `'O'` is only accepted
/// by the shim, which keeps it on the CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SvdJob {
    /// No vectors.
    None,
    /// The first `min(m, n)` vectors (thin SVD).
    Thin,
    /// All vectors.
    Full,
    /// Overwrite A with the vectors (shim only; never offloaded).
    Overwrite,
}

/// Which eigenvalues `syevr` / `heevr` compute (LAPACK's `range`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EigRange {
    /// All eigenvalues (`'A'`).
    All,
    /// Those in the half-open interval `(vl, vu]` (`'V'`).
    Values {
        /// Lower bound (exclusive).
        vl: f64,
        /// Upper bound (inclusive).
        vu: f64,
    },
    /// The `il`-th through `iu`-th smallest, 1-based (`'I'`).
    Index {
        /// First index (1-based).
        il: usize,
        /// Last index (1-based).
        iu: usize,
    },
}

impl EigRange {
    /// The LAPACK character.
    pub fn to_char(self) -> u8 {
        match self {
            EigRange::All => b'A',
            EigRange::Values { .. } => b'V',
            EigRange::Index { .. } => b'I',
        }
    }
}

impl Trans {
    /// Parses a BLAS character.
    pub fn from_char(c: u8) -> Option<Trans> {
        match c.to_ascii_uppercase() {
            b'N' => Some(Trans::No),
            b'T' => Some(Trans::Trans),
            b'C' => Some(Trans::Conj),
            _ => None,
        }
    }
    /// The BLAS character.
    pub fn to_char(self) -> u8 {
        match self {
            Trans::No => b'N',
            Trans::Trans => b'T',
            Trans::Conj => b'C',
        }
    }
}

impl Uplo {
    /// Parses a BLAS character.
    pub fn from_char(c: u8) -> Option<Uplo> {
        match c.to_ascii_uppercase() {
            b'U' => Some(Uplo::Upper),
            b'L' => Some(Uplo::Lower),
            _ => None,
        }
    }
    /// The BLAS character.
    pub fn to_char(self) -> u8 {
        match self {
            Uplo::Upper => b'U',
            Uplo::Lower => b'L',
        }
    }
    /// The other triangle.
    pub fn flip(self) -> Uplo {
        match self {
            Uplo::Upper => Uplo::Lower,
            Uplo::Lower => Uplo::Upper,
        }
    }
}

impl Side {
    /// Parses a BLAS character.
    pub fn from_char(c: u8) -> Option<Side> {
        match c.to_ascii_uppercase() {
            b'L' => Some(Side::Left),
            b'R' => Some(Side::Right),
            _ => None,
        }
    }
    /// The BLAS character.
    pub fn to_char(self) -> u8 {
        match self {
            Side::Left => b'L',
            Side::Right => b'R',
        }
    }
    /// The other side.
    pub fn flip(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }
}

impl Diag {
    /// Parses a BLAS character.
    pub fn from_char(c: u8) -> Option<Diag> {
        match c.to_ascii_uppercase() {
            b'N' => Some(Diag::NonUnit),
            b'U' => Some(Diag::Unit),
            _ => None,
        }
    }
    /// The BLAS character.
    pub fn to_char(self) -> u8 {
        match self {
            Diag::NonUnit => b'N',
            Diag::Unit => b'U',
        }
    }
}

impl SvdJob {
    /// Parses a LAPACK job character.
    pub fn from_char(c: u8) -> Option<SvdJob> {
        match c.to_ascii_uppercase() {
            b'N' => Some(SvdJob::None),
            b'S' => Some(SvdJob::Thin),
            b'A' => Some(SvdJob::Full),
            b'O' => Some(SvdJob::Overwrite),
            _ => None,
        }
    }
    /// The LAPACK job character.
    pub fn to_char(self) -> u8 {
        match self {
            SvdJob::None => b'N',
            SvdJob::Thin => b'S',
            SvdJob::Full => b'A',
            SvdJob::Overwrite => b'O',
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in Routine::ALL {
            for &p in r.precisions() {
                let name = r.name(p);
                assert_eq!(Routine::parse(&name), Some((r, Some(p))), "{name}");
            }
            assert_eq!(Routine::parse(r.stem()), Some((r, None)));
            assert_eq!(Routine::parse(r.complex_stem()), Some((r, None)));
        }
        assert_eq!(Routine::name(Routine::Syevd, Precision::Z), "zheevd");
        assert_eq!(Routine::name(Routine::Syev, Precision::D), "dsyev");
        assert_eq!(Routine::name(Routine::Syev, Precision::C), "cheev");
        assert_eq!(
            Routine::parse("zheev"),
            Some((Routine::Syev, Some(Precision::Z)))
        );
        assert_eq!(Routine::name(Routine::Syevr, Precision::C), "cheevr");
        assert_eq!(Routine::name(Routine::Orgqr, Precision::Z), "zungqr");
        assert_eq!(Routine::name(Routine::Orgqr, Precision::D), "dorgqr");
        assert_eq!(
            Routine::parse("csyrk"),
            Some((Routine::Syrk, Some(Precision::C)))
        );
        assert_eq!(
            Routine::parse("zherk"),
            Some((Routine::Herk, Some(Precision::Z)))
        );
        // names LAPACK does not have
        for bad in [
            "xgemm", "dherk", "shemm", "dheevd", "zorgqr", "sungqr", "zsyevd", "dheev", "csyev",
        ] {
            assert_eq!(Routine::parse(bad), None, "{bad}");
        }
        for k in OpKind::all() {
            assert_eq!(OpKind::parse_key(&k.key()), Some(k));
        }
        assert_eq!(OpKind::parse_key("gemm+v"), None);
        assert_eq!(OpKind::parse_key("syevd+a"), None);
        assert_eq!(
            OpKind::parse_key("gesdd+a"),
            Some(OpKind::new(Routine::Gesdd, Variant::Full))
        );
        // one key per (routine, variant)
        let keys: std::collections::BTreeSet<String> =
            OpKind::all().into_iter().map(|k| k.key()).collect();
        assert_eq!(keys.len(), OpKind::all().len());
    }

    #[test]
    fn canonical_shapes_invert_features() {
        for k in OpKind::all() {
            for (x1, x2) in [(64.0, 1.0), (512.0, 2.0), (1000.0, 3.0), (2048.0, 4096.0)] {
                let x2 = if k.routine.one_feature() { 1.0 } else { x2 };
                let s = k.canonical_shape(x1, x2);
                let (y1, y2) = k.features(s);
                assert!((y1 - x1).abs() / x1 < 0.01, "{k} {x1} {y1}");
                assert!((y2 - x2).abs() / x2 < 0.01, "{k} {x2} {y2}");
            }
        }
    }

    #[test]
    fn flops_match_textbook_counts() {
        let g = OpKind::plain(Routine::Gemm);
        assert_eq!(g.flops(Precision::D, Shape::new(10, 20, 30)), 12000.0);
        assert_eq!(g.flops(Precision::Z, Shape::new(10, 20, 30)), 48000.0);
        let lu = OpKind::plain(Routine::Getrf);
        let n = 300.0;
        let want = 2.0 * n * n * n / 3.0;
        let got = lu.flops(Precision::D, Shape::new(300, 300, 1));
        assert!((got - want).abs() / want < 1e-9);
        // orgqr of a square Q: 4/3 n^3
        let q = OpKind::plain(Routine::Orgqr).flops(Precision::D, Shape::new(300, 300, 300));
        assert!((q - 4.0 * n * n * n / 3.0).abs() / q < 1e-9, "{q}");
        // rectangular calls with the same flops but different shapes have different features
        let a = g.features(Shape::new(4096, 4096, 64));
        let b = g.features(Shape::new(1024, 1024, 1024));
        assert!(a.0 > b.0 && a.1 < b.1);
        // a full SVD costs more than a thin one, which costs more than values only, and moves
        // more bytes when the matrix is tall
        let s = Shape::new(6000, 500, 1);
        let [v, t, a] = [Variant::Plain, Variant::Vectors, Variant::Full]
            .map(|x| OpKind::new(Routine::Gesdd, x));
        assert!(v.flops(Precision::D, s) < t.flops(Precision::D, s));
        assert!(t.flops(Precision::D, s) < a.flops(Precision::D, s));
        assert!(t.bytes(Precision::D, s).1 < a.bytes(Precision::D, s).1);
        // m < n and m > n are the same work
        let st = Shape::new(500, 6000, 1);
        assert_eq!(a.flops(Precision::D, s), a.flops(Precision::D, st));
        assert_eq!(a.features(s), a.features(st));
    }
}
