//! Random numbers from a counter-based generator: Philox4x32-10 (the generator of cuRAND's
//! and PyTorch's Philox), seeded and reproducible.
//!
//! Element `e` of a call depends only on the seed, the generator's offset at the call and `e`:
//! the same seed and sequence of calls give the same numbers on any GPU, grid or stream. Each
//! call advances the offset by the Philox blocks it used (a block gives four f32 / f16 / bf16
//! or two f64 values), so consecutive calls never reuse a counter. [`philox4x32_10`] and
//! [`uniform_cpu`] are the same generator on the CPU (the GPU's uniforms are bit-identical to
//! them).
//!
//! ```no_run
//! use gpukit_core::{random::Generator, Device};
//! let dev = Device::open(0)?;
//! let rng = Generator::new(42);
//! let u = rng.uniform::<f32>(&dev, &[1000], 0.0, 1.0)?;   // U[0, 1)
//! let z = rng.normal::<f64>(&dev, &[10, 10], 0.0, 1.0)?;  // N(0, 1)
//! # Ok::<(), gpukit_core::Error>(())
//! ```

use crate::device::Device;
use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use crate::kernels::{self, KernelFile};
use crate::GpuArray;
use std::sync::atomic::{AtomicU64, Ordering};

/// A seeded Philox generator (see the module docs). Thread-safe: concurrent calls get
/// disjoint counter ranges.
#[derive(Debug)]
pub struct Generator {
    seed: u64,
    offset: AtomicU64,
}

impl Generator {
    /// A generator with `seed`, at offset 0.
    pub fn new(seed: u64) -> Self {
        Generator {
            seed,
            offset: AtomicU64::new(0),
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The Philox block the next call starts at.
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Relaxed)
    }

    /// Moves the generator to `offset` (replays a sequence of calls, or skips ahead).
    pub fn set_offset(&self, offset: u64) {
        self.offset.store(offset, Ordering::Relaxed);
    }

    fn reserve<T: DType>(&self, n: usize) -> u64 {
        let per = values_per_block(std::mem::size_of::<T>()) as u64;
        self.offset
            .fetch_add((n as u64).div_ceil(per), Ordering::Relaxed)
    }

    /// Uniform values in `[low, high)` (rounding can give `high` for f16 / bf16 / f32 when
    /// the span is wide), floating-point `T` only.
    pub fn uniform<T: DType>(
        &self,
        dev: &Device,
        shape: &[usize],
        low: f64,
        high: f64,
    ) -> Result<GpuArray<T>> {
        let mut out = GpuArray::<T>::empty(dev, shape)?;
        self.uniform_into(&mut out, low, high)?;
        Ok(out)
    }

    /// Normal values with `mean` and standard deviation `std` (Box-Muller), floating-point `T`
    /// only.
    pub fn normal<T: DType>(
        &self,
        dev: &Device,
        shape: &[usize],
        mean: f64,
        std: f64,
    ) -> Result<GpuArray<T>> {
        let mut out = GpuArray::<T>::empty(dev, shape)?;
        self.normal_into(&mut out, mean, std)?;
        Ok(out)
    }

    /// Fills the contiguous `out` with uniform values.
    pub fn uniform_into<T: DType>(&self, out: &mut GpuArray<T>, low: f64, high: f64) -> Result<()> {
        if !(low.is_finite() && high.is_finite() && low <= high) {
            return Err(Error::invalid(
                "uniform",
                format!("needs finite bounds with low <= high, got [{low}, {high})"),
            ));
        }
        self.fill("uniform", out, low, high)
    }

    /// Fills the contiguous `out` with normal values.
    pub fn normal_into<T: DType>(&self, out: &mut GpuArray<T>, mean: f64, std: f64) -> Result<()> {
        if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
            return Err(Error::invalid(
                "normal",
                format!("needs a finite mean and a finite std >= 0, got mean {mean}, std {std}"),
            ));
        }
        self.fill("normal", out, mean, std)
    }

    fn fill<T: DType>(&self, op: &str, out: &mut GpuArray<T>, a: f64, b: f64) -> Result<()> {
        if T::KIND != DTypeKind::Float {
            return Err(Error::UnsupportedDType {
                op: op.to_string(),
                dtype: T::RUST_NAME,
            });
        }
        if !out.is_contiguous() {
            return Err(Error::invalid(
                op,
                "the output must be contiguous (fill a fresh array and copy it into the view)",
            ));
        }
        let n = out.len();
        let offset = self.reserve::<T>(n);
        if n == 0 {
            return Ok(());
        }
        let dev = out.device().clone();
        let stream = dev.stream();
        out.used_on(&stream);
        let k = out.kernel(KernelFile::Random, &format!("{op}<{}>", T::NAME))?;
        let blocks = n.div_ceil(values_per_block(std::mem::size_of::<T>()));
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&dev, blocks, 16),
            &[
                out.arg(),
                (n as i64).into(),
                self.seed.into(),
                offset.into(),
                a.into(),
                b.into(),
            ],
        )
    }
}

/// Values one Philox block gives for elements of `size` bytes.
pub fn values_per_block(size: usize) -> usize {
    if size == 8 {
        2
    } else {
        4
    }
}

/// Philox4x32-10 of `counter` (as the words `(lo, hi, 0, 0)`) under `key` (as `(lo, hi)`).
pub fn philox4x32_10(counter: u64, key: u64) -> [u32; 4] {
    philox4x32_10_words([counter as u32, (counter >> 32) as u32, 0, 0], key)
}

/// Philox4x32-10 of a full 128-bit counter (for the Random123 known-answer tests).
pub fn philox4x32_10_words(ctr: [u32; 4], key: u64) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = ctr;
    let (mut k0, mut k1) = (key as u32, (key >> 32) as u32);
    for r in 0..10 {
        if r > 0 {
            k0 = k0.wrapping_add(0x9E37_79B9);
            k1 = k1.wrapping_add(0xBB67_AE85);
        }
        let p0 = 0xD251_1F53u64 * c0 as u64;
        let p1 = 0xCD9E_8D57u64 * c2 as u64;
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        let n0 = hi1 ^ c1 ^ k0;
        let n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    [c0, c1, c2, c3]
}

/// The first `n` values of `uniform::<f32>(.., low, high)` from a generator with `seed` at
/// `offset`, computed on the CPU exactly as the GPU does (for f32 the results are
/// bit-identical).
pub fn uniform_cpu(n: usize, seed: u64, offset: u64, low: f32, high: f32) -> Vec<f32> {
    let span = high - low;
    (0..n)
        .map(|e| {
            let w = philox4x32_10(offset + (e / 4) as u64, seed)[e % 4];
            let u = (w >> 8) as f32 * 5.960_464_5e-8;
            span.mul_add(u, low)
        })
        .collect()
}

/// The first `n` values of `uniform::<f64>(.., low, high)` on the CPU (bit-identical).
pub fn uniform_cpu_f64(n: usize, seed: u64, offset: u64, low: f64, high: f64) -> Vec<f64> {
    let span = high - low;
    (0..n)
        .map(|e| {
            let w = philox4x32_10(offset + (e / 2) as u64, seed);
            let k = 2 * (e % 2);
            let bits = ((w[k] as u64) << 21) ^ ((w[k + 1] >> 11) as u64);
            span.mul_add(bits as f64 * 1.110_223_024_625_156_5e-16, low)
        })
        .collect()
}

/// The first `n` values of `normal::<f32>(.., mean, std)` on the CPU, computed in f64 (the
/// GPU's single-precision logf / sincospif agree within a few f32 ulps).
pub fn normal_cpu(n: usize, seed: u64, offset: u64, mean: f32, std: f32) -> Vec<f32> {
    (0..n)
        .map(|e| {
            let w = philox4x32_10(offset + (e / 4) as u64, seed);
            let h = (e % 4) / 2;
            let u1 = ((w[2 * h] >> 8) + 1) as f64 * 5.960_464_477_539_063e-8;
            let u2 = (w[2 * h + 1] >> 8) as f64 * 5.960_464_477_539_063e-8;
            let r = (-2.0 * u1.ln()).sqrt();
            let t = 2.0 * std::f64::consts::PI * u2;
            let z = if e % 2 == 0 { r * t.cos() } else { r * t.sin() };
            (std as f64 * z + mean as f64) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random123_known_answers() {
        // Random123's kat_vectors for philox4x32 with 10 rounds.
        assert_eq!(
            philox4x32_10_words([0, 0, 0, 0], 0),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10_words([u32::MAX; 4], u64::MAX),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10_words(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                0x299f31d0_a4093822
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn cpu_streams_are_in_range_and_depend_on_seed_and_offset() {
        // Miri interprets every instruction: fewer draws there, the same checks.
        let (nu, nz) = if cfg!(miri) {
            (2_000, 20_000)
        } else {
            (10_000, 100_000)
        };
        let u = uniform_cpu(nu, 7, 0, -2.0, 3.0);
        assert!(u.iter().all(|&x| (-2.0..3.0).contains(&x)));
        let mean = u.iter().map(|&x| x as f64).sum::<f64>() / u.len() as f64;
        assert!((mean - 0.5).abs() < 0.1, "{mean}");
        // The offset is in blocks of four values.
        assert_eq!(
            uniform_cpu(8, 7, 0, 0.0, 1.0)[4..],
            uniform_cpu(4, 7, 1, 0.0, 1.0)[..]
        );
        assert_ne!(
            uniform_cpu(4, 7, 0, 0.0, 1.0),
            uniform_cpu(4, 8, 0, 0.0, 1.0)
        );
        let d = uniform_cpu_f64(1000, 3, 5, 0.0, 1.0);
        assert!(d.iter().all(|&x| (0.0..1.0).contains(&x)));
        let z = normal_cpu(nz, 11, 0, 1.0, 2.0);
        let m = z.iter().map(|&x| x as f64).sum::<f64>() / z.len() as f64;
        let v = z.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / z.len() as f64;
        assert!((m - 1.0).abs() < 0.06 && (v - 4.0).abs() < 0.25, "{m} {v}");
        assert!(z.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn offsets_advance_by_blocks() {
        let g = Generator::new(1);
        assert_eq!(g.reserve::<f32>(10), 0);
        assert_eq!(g.offset(), 3);
        assert_eq!(g.reserve::<f64>(3), 3);
        assert_eq!(g.offset(), 5);
        g.set_offset(100);
        assert_eq!(g.reserve::<half::f16>(0), 100);
        assert_eq!(g.offset(), 100);
    }
}
