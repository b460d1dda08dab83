//! Shared helpers of the GPU tests: the device, random data per element type, CPU references
//! and tolerances.
#![allow(dead_code)]

pub mod slow;

use gpukit_core::{bf16, f16, DType, DTypeKind, Device};
pub use proptest::prelude::*;

/// Device 0, or `None` (test skipped, or failed under GPUKIT_REQUIRE_GPU=1).
pub fn device(test: &str) -> Option<Device> {
    if !gpukit_jit::testing::gpu(test) {
        return None;
    }
    Some(Device::open(0).expect("device 0 opens"))
}

/// A tiny deterministic generator (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// Element types under test, with data generation and tolerances.
pub trait TestType: DType {
    /// A random value suited to arithmetic tests (no overflow in a product of two for ints,
    /// values away from 0 for floats used as divisors when `nonzero`).
    fn random(rng: &mut Rng, nonzero: bool) -> Self;
    /// Relative tolerance for one rounding of the result in this type (plus a little slack).
    fn rtol() -> f64;
}

macro_rules! float_test_type {
    ($t:ty, $rtol:expr) => {
        impl TestType for $t {
            fn random(rng: &mut Rng, nonzero: bool) -> Self {
                let mut v = rng.uniform(-4.0, 4.0);
                if nonzero && v.abs() < 0.25 {
                    v += 0.5f64.copysign(v);
                }
                <$t as DType>::from_f64(v)
            }
            fn rtol() -> f64 {
                $rtol
            }
        }
    };
}
float_test_type!(f32, 2e-6);
float_test_type!(f64, 1e-13);
float_test_type!(f16, 2e-3);
float_test_type!(bf16, 1.6e-2);

macro_rules! int_test_type {
    ($t:ty, $lo:expr, $hi:expr) => {
        impl TestType for $t {
            fn random(rng: &mut Rng, nonzero: bool) -> Self {
                let span = ($hi - $lo) as u64;
                let mut v = $lo + (rng.next_u64() % span) as i64;
                if nonzero && v == 0 {
                    v = 1;
                }
                <$t as DType>::from_i64(v)
            }
            fn rtol() -> f64 {
                0.0
            }
        }
    };
}
int_test_type!(i32, -1000, 1000);
int_test_type!(u32, 0, 2000);
int_test_type!(i64, -100000, 100000);
int_test_type!(u64, 0, 100000);
int_test_type!(u8, 0, 16);

/// Like [`random_vec`], with NaN, +-Inf and +-0 mixed in for floating-point types (about one
/// element in ten).
pub fn random_special<T: TestType>(rng: &mut Rng, n: usize, nonzero: bool) -> Vec<T> {
    let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0];
    (0..n)
        .map(|_| {
            if T::KIND == DTypeKind::Float && rng.next_u64().is_multiple_of(10) {
                let s = specials[(rng.next_u64() % specials.len() as u64) as usize];
                if nonzero && s == 0.0 {
                    T::from_f64(f64::INFINITY)
                } else {
                    T::from_f64(s)
                }
            } else {
                T::random(rng, nonzero)
            }
        })
        .collect()
}

/// Runs `$f::<T>(args)` for every element type.
#[macro_export]
macro_rules! for_all_dtypes {
    ($f:ident, $($arg:expr),*) => {
        $f::<f32>($($arg),*);
        $f::<f64>($($arg),*);
        $f::<gpukit_core::f16>($($arg),*);
        $f::<gpukit_core::bf16>($($arg),*);
        $f::<i32>($($arg),*);
        $f::<u32>($($arg),*);
        $f::<i64>($($arg),*);
        $f::<u64>($($arg),*);
        $f::<u8>($($arg),*);
    };
}

/// Runs `$f::<T>(args)` for the floating-point element types.
#[macro_export]
macro_rules! for_float_dtypes {
    ($f:ident, $($arg:expr),*) => {
        $f::<f32>($($arg),*);
        $f::<f64>($($arg),*);
        $f::<gpukit_core::f16>($($arg),*);
        $f::<gpukit_core::bf16>($($arg),*);
    };
}

/// A proptest runner with `cases` cases (at most `GPUKIT_TEST_CASES` when set: the sanitizer
/// runs use 1) and no persistence file.
pub fn runner(cases: u32) -> proptest::test_runner::TestRunner {
    let cap = std::env::var("GPUKIT_TEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(u32::MAX);
    proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: cases.min(cap).max(1),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })
}

/// A proptest failure from any error.
pub fn fail(e: impl std::fmt::Display) -> proptest::test_runner::TestCaseError {
    proptest::test_runner::TestCaseError::fail(e.to_string())
}

/// Element offsets, in row-major order, of a view of `shape` / `strides` at `offset`.
pub fn view_offsets(shape: &[usize], strides: &[isize], offset: usize) -> Vec<usize> {
    let n: usize = shape.iter().product();
    (0..n)
        .map(|mut i| {
            let mut off = offset as isize;
            for d in (0..shape.len()).rev() {
                off += (i % shape[d]) as isize * strides[d];
                i /= shape[d];
            }
            off as usize
        })
        .collect()
}

/// Multi-index of linear index `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d].max(1);
        i /= shape[d].max(1);
    }
    idx
}

/// Linear index of a multi-index in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

pub fn random_vec<T: TestType>(rng: &mut Rng, n: usize, nonzero: bool) -> Vec<T> {
    (0..n).map(|_| T::random(rng, nonzero)).collect()
}

/// Wraps an integer result into T's range (two's complement), as the GPU does.
pub fn wrap<T: DType>(v: i128) -> T {
    T::from_i64(v as i64)
}

/// Checks `got` against an f64 reference `want` (floats: relative tolerance with an absolute
/// floor; integers: exact). Returns the first mismatch.
pub fn check<T: TestType>(what: &str, got: &[T], want: &[f64], atol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        let ok = if T::KIND == DTypeKind::Float {
            (g.is_nan() && w.is_nan()) || g == *w || (g - w).abs() <= T::rtol() * w.abs() + atol
        } else {
            g == *w
        };
        if !ok {
            return Err(format!(
                "{what} ({}): element {i}: got {g}, expected {w}",
                T::RUST_NAME
            ));
        }
    }
    Ok(())
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// NumPy broadcasting on the CPU: the index into an array of `shape` for output index `i` of
/// `out_shape`.
pub fn bcast_index(i: usize, out_shape: &[usize], shape: &[usize]) -> usize {
    let os = strides(out_shape);
    let s = strides(shape);
    let lead = out_shape.len() - shape.len();
    let mut idx = 0;
    for d in 0..out_shape.len() {
        let c = (i / os[d]) % out_shape[d].max(1);
        if d >= lead && shape[d - lead] != 1 {
            idx += c * s[d - lead];
        }
    }
    idx
}
