//! Tests of the embedded backend, through [`super::symbol`] and the Fortran prototypes, against
//! an `f64` (complex `f64`) reference computed here.

mod blas3;
mod cholesky;
mod eigen;
mod errors;
mod lstsq;
mod lu;
mod qr;
mod svd;

use super::abi::Scalar;
use faer::{c32, c64};
use std::ffi::c_char;

/// A small deterministic generator (splitmix64).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub(super) fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// The element types under test, with conversions to the `c64` reference.
pub(super) trait T: Scalar {
    /// Machine epsilon of the type.
    const EPS: f64;
    fn to_c(self) -> c64;
    fn from_c(v: c64) -> Self;
    fn random(rng: &mut Rng) -> Self;
}

impl T for f32 {
    const EPS: f64 = f32::EPSILON as f64;
    fn to_c(self) -> c64 {
        c64::new(self as f64, 0.0)
    }
    fn from_c(v: c64) -> f32 {
        v.re as f32
    }
    fn random(rng: &mut Rng) -> f32 {
        rng.uniform() as f32
    }
}
impl T for f64 {
    const EPS: f64 = f64::EPSILON;
    fn to_c(self) -> c64 {
        c64::new(self, 0.0)
    }
    fn from_c(v: c64) -> f64 {
        v.re
    }
    fn random(rng: &mut Rng) -> f64 {
        rng.uniform()
    }
}
impl T for c32 {
    const EPS: f64 = f32::EPSILON as f64;
    fn to_c(self) -> c64 {
        c64::new(self.re as f64, self.im as f64)
    }
    fn from_c(v: c64) -> c32 {
        c32::new(v.re as f32, v.im as f32)
    }
    fn random(rng: &mut Rng) -> c32 {
        c32::new(rng.uniform() as f32, rng.uniform() as f32)
    }
}
impl T for c64 {
    const EPS: f64 = f64::EPSILON;
    fn to_c(self) -> c64 {
        self
    }
    fn from_c(v: c64) -> c64 {
        v
    }
    fn random(rng: &mut Rng) -> c64 {
        c64::new(rng.uniform(), rng.uniform())
    }
}

/// The value written into padding and unreferenced parts: must come back unchanged.
pub(super) fn poison<E: T>() -> E {
    E::from_c(c64::new(777.0, -555.0))
}

/// NaN of the type (real and imaginary parts).
pub(super) fn nan<E: T>() -> E {
    E::from_c(c64::new(f64::NAN, f64::NAN))
}

/// A caller-side column-major matrix with a leading dimension beyond its rows (padding holds
/// [`poison`]).
#[derive(Clone, Debug)]
pub(super) struct Mat<E> {
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) ld: usize,
    pub(super) data: Vec<E>,
}

impl<E: T> Mat<E> {
    pub(super) fn random(rng: &mut Rng, rows: usize, cols: usize, pad: usize) -> Mat<E> {
        let ld = rows.max(1) + pad;
        let mut data = vec![poison::<E>(); ld * cols.max(1)];
        for j in 0..cols {
            for i in 0..rows {
                data[i + j * ld] = E::random(rng);
            }
        }
        Mat {
            rows,
            cols,
            ld,
            data,
        }
    }
    pub(super) fn filled(rows: usize, cols: usize, pad: usize, v: E) -> Mat<E> {
        let ld = rows.max(1) + pad;
        let mut m = Mat {
            rows,
            cols,
            ld,
            data: vec![poison::<E>(); ld * cols.max(1)],
        };
        for j in 0..cols {
            for i in 0..rows {
                m.data[i + j * ld] = v;
            }
        }
        m
    }
    pub(super) fn from_ref(r: &Ref, pad: usize) -> Mat<E> {
        let mut m = Mat::filled(r.rows, r.cols, pad, E::zero());
        for j in 0..r.cols {
            for i in 0..r.rows {
                m.set(i, j, E::from_c(r.at(i, j)));
            }
        }
        m
    }
    pub(super) fn at(&self, i: usize, j: usize) -> E {
        self.data[i + j * self.ld]
    }
    pub(super) fn set(&mut self, i: usize, j: usize, v: E) {
        self.data[i + j * self.ld] = v;
    }
    pub(super) fn ptr(&mut self) -> *mut E {
        self.data.as_mut_ptr()
    }
    pub(super) fn ld(&self) -> i32 {
        self.ld as i32
    }
    /// The `rows x cols` content in the reference type.
    pub(super) fn to_ref(&self) -> Ref {
        let mut r = Ref::zeros(self.rows, self.cols);
        for j in 0..self.cols {
            for i in 0..self.rows {
                r.set(i, j, self.at(i, j).to_c());
            }
        }
        r
    }
    /// The padding rows are untouched.
    pub(super) fn assert_padding(&self) {
        for j in 0..self.cols {
            for i in self.rows..self.ld {
                assert_eq!(
                    self.data[i + j * self.ld].to_c(),
                    poison::<E>().to_c(),
                    "padding ({i},{j}) written"
                );
            }
        }
    }
}

/// A dense `c64` reference matrix.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Ref {
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) data: Vec<c64>,
}

impl Ref {
    pub(super) fn zeros(rows: usize, cols: usize) -> Ref {
        Ref {
            rows,
            cols,
            data: vec![c64::new(0.0, 0.0); rows * cols],
        }
    }
    pub(super) fn identity(n: usize) -> Ref {
        let mut r = Ref::zeros(n, n);
        for i in 0..n {
            r.set(i, i, c64::new(1.0, 0.0));
        }
        r
    }
    pub(super) fn at(&self, i: usize, j: usize) -> c64 {
        self.data[i + j * self.rows]
    }
    pub(super) fn set(&mut self, i: usize, j: usize, v: c64) {
        self.data[i + j * self.rows] = v;
    }
    pub(super) fn mul(&self, b: &Ref) -> Ref {
        assert_eq!(self.cols, b.rows);
        let mut c = Ref::zeros(self.rows, b.cols);
        for j in 0..b.cols {
            for l in 0..self.cols {
                let blj = b.at(l, j);
                for i in 0..self.rows {
                    c.data[i + j * self.rows] += self.at(i, l) * blj;
                }
            }
        }
        c
    }
    pub(super) fn t(&self) -> Ref {
        let mut r = Ref::zeros(self.cols, self.rows);
        for j in 0..self.cols {
            for i in 0..self.rows {
                r.set(j, i, self.at(i, j));
            }
        }
        r
    }
    pub(super) fn h(&self) -> Ref {
        let mut r = self.t();
        for v in &mut r.data {
            *v = v.conj();
        }
        r
    }
    /// `op(self)` for a BLAS `trans` character.
    pub(super) fn op(&self, trans: u8) -> Ref {
        match trans {
            b'N' => self.clone(),
            b'T' => self.t(),
            _ => self.h(),
        }
    }
    pub(super) fn scale(&self, s: c64) -> Ref {
        let mut r = self.clone();
        for v in &mut r.data {
            *v *= s;
        }
        r
    }
    pub(super) fn add(&self, b: &Ref) -> Ref {
        let mut r = self.clone();
        for (x, y) in r.data.iter_mut().zip(&b.data) {
            *x += y;
        }
        r
    }
    pub(super) fn sub(&self, b: &Ref) -> Ref {
        self.add(&b.scale(c64::new(-1.0, 0.0)))
    }
    /// Frobenius norm.
    pub(super) fn norm(&self) -> f64 {
        self.data.iter().map(|v| v.norm_sqr()).sum::<f64>().sqrt()
    }
    /// Columns `c0..c1`.
    pub(super) fn cols(&self, c0: usize, c1: usize) -> Ref {
        let mut r = Ref::zeros(self.rows, c1 - c0);
        for j in c0..c1 {
            for i in 0..self.rows {
                r.set(i, j - c0, self.at(i, j));
            }
        }
        r
    }
    /// Rows `r0..r1`.
    pub(super) fn rows(&self, r0: usize, r1: usize) -> Ref {
        let mut r = Ref::zeros(r1 - r0, self.cols);
        for j in 0..self.cols {
            for i in r0..r1 {
                r.set(i - r0, j, self.at(i, j));
            }
        }
        r
    }
    /// The lower (`lower`) or upper triangle, zeros elsewhere; `unit` puts ones on the diagonal.
    pub(super) fn triangle(&self, lower: bool, unit: bool) -> Ref {
        let mut r = Ref::zeros(self.rows, self.cols);
        for j in 0..self.cols {
            for i in 0..self.rows {
                let keep = if lower { i >= j } else { i <= j };
                if i == j && unit {
                    r.set(i, j, c64::new(1.0, 0.0));
                } else if keep {
                    r.set(i, j, self.at(i, j));
                }
            }
        }
        r
    }
    /// The symmetric (`herm = false`) or Hermitian matrix stored in one triangle.
    pub(super) fn expand_triangle(&self, lower: bool, herm: bool) -> Ref {
        let n = self.rows;
        let mut r = Ref::zeros(n, n);
        for j in 0..n {
            for i in 0..n {
                let stored = if lower { i >= j } else { i <= j };
                let v = if stored {
                    self.at(i, j)
                } else if herm {
                    self.at(j, i).conj()
                } else {
                    self.at(j, i)
                };
                r.set(
                    i,
                    j,
                    if herm && i == j {
                        c64::new(v.re, 0.0)
                    } else {
                        v
                    },
                );
            }
        }
        r
    }
}

/// `|got - want|_F <= tol`, with a message naming the case.
#[track_caller]
pub(super) fn assert_close(got: &Ref, want: &Ref, tol: f64, what: &str) {
    assert_eq!(
        (got.rows, got.cols),
        (want.rows, want.cols),
        "{what}: shape"
    );
    let err = got.sub(want).norm();
    assert!(
        err <= tol,
        "{what}: error {err:e} > tolerance {tol:e}\n got {got:?}\nwant {want:?}"
    );
}

/// The routine's function pointer as its prototype `F`.
pub(super) fn sym<F: Copy>(name: &str) -> F {
    let p = super::symbol(name).unwrap_or_else(|| panic!("{name} not served"));
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*const ()>());
    // SAFETY: `F` is the `unsafe extern "C" fn` prototype of `name` (each test names both), the
    // same size as a code pointer.
    unsafe { std::mem::transmute_copy::<*const std::ffi::c_void, F>(&p) }
}

/// The routine name for this element type (`"gemm"` -> `"dgemm_"`).
pub(super) fn name<E: T>(base: &str) -> String {
    format!("{}{base}_", E::LETTER)
}

/// A character argument.
pub(super) fn ch(c: u8) -> c_char {
    c as c_char
}

/// A random scalar of a kind: 0 zero, 1 one, otherwise random.
pub(super) fn pick<E: T>(rng: &mut Rng, kind: u8) -> E {
    match kind {
        0 => E::zero(),
        1 => E::one(),
        _ => E::random(rng),
    }
}

/// Instantiates a generic test body `$f::<E>` once per element type, as proptest cases.
macro_rules! per_type {
    ($cases:expr, $name:ident, $f:ident, ($($arg:ident in $strat:expr),* $(,)?)) => {
        mod $name {
            use super::*;
            use proptest::prelude::*;
            proptest! {
                #![proptest_config(ProptestConfig::with_cases($cases))]
                #[test]
                fn s($($arg in $strat),*) { $f::<f32>($($arg),*) }
                #[test]
                fn d($($arg in $strat),*) { $f::<f64>($($arg),*) }
                #[test]
                fn c($($arg in $strat),*) { $f::<faer::c32>($($arg),*) }
                #[test]
                fn z($($arg in $strat),*) { $f::<faer::c64>($($arg),*) }
            }
        }
    };
}
pub(super) use per_type;

/// As [`per_type`], for the routines that exist only in complex precisions.
macro_rules! complex_only {
    ($cases:expr, $name:ident, $f:ident, ($($arg:ident in $strat:expr),* $(,)?)) => {
        mod $name {
            use super::*;
            use proptest::prelude::*;
            proptest! {
                #![proptest_config(ProptestConfig::with_cases($cases))]
                #[test]
                fn c($($arg in $strat),*) { $f::<faer::c32>($($arg),*) }
                #[test]
                fn z($($arg in $strat),*) { $f::<faer::c64>($($arg),*) }
            }
        }
    };
}
pub(super) use complex_only;

/// A `rows x cols` matrix with orthonormal columns (`cols <= rows`), by modified Gram-Schmidt
/// twice over random columns.
pub(super) fn orthonormal(rng: &mut Rng, rows: usize, cols: usize, complex: bool) -> Ref {
    assert!(cols <= rows);
    let mut q = Ref::zeros(rows, cols);
    for j in 0..cols {
        for i in 0..rows {
            let im = if complex { rng.uniform() } else { 0.0 };
            q.set(i, j, c64::new(rng.uniform(), im));
        }
        for _ in 0..2 {
            for p in 0..j {
                let mut d = c64::new(0.0, 0.0);
                for i in 0..rows {
                    d += q.at(i, p).conj() * q.at(i, j);
                }
                for i in 0..rows {
                    let v = q.at(i, j) - d * q.at(i, p);
                    q.set(i, j, v);
                }
            }
            let norm = (0..rows).map(|i| q.at(i, j).norm_sqr()).sum::<f64>().sqrt();
            for i in 0..rows {
                let v = q.at(i, j) / norm;
                q.set(i, j, v);
            }
        }
    }
    q
}

/// A diagonal matrix.
pub(super) fn diag(d: &[f64]) -> Ref {
    let mut r = Ref::zeros(d.len(), d.len());
    for (i, &x) in d.iter().enumerate() {
        r.set(i, i, c64::new(x, 0.0));
    }
    r
}
