//! The cost model: predicted CPU time and GPU time (copy in + compute + copy out) of a call.
//!
//! Each `(op kind, precision, backend)` has a [`Curve`]: measured seconds on a grid of the two
//! shape features of [`OpKind::features`]. A query converts the grid to *rates* (flops per second
//! of the grid point's canonical shape), interpolates `log(rate)` bilinearly in
//! `(log x1, log x2)`, clamps outside the grid (a constant rate beyond the largest measured size:
//! conservative for the GPU, whose rate still grows there), and divides the call's own flops by
//! that rate. Rectangular calls are therefore judged at their own features, not at a square call
//! of equal flops. GPU time adds the copies, priced by the measured staging throughput.

use crate::ops::{OpKind, Precision, Shape};
use foldhash::HashMap;
use serde::{Deserialize, Serialize};

/// Where a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The CPU BLAS/LAPACK.
    Cpu,
    /// cuBLAS / cuSOLVER.
    Gpu,
}

impl Backend {
    /// `cpu` or `gpu`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Gpu => "gpu",
        }
    }
}

/// Measured seconds on a feature grid: `seconds[i * x2.len() + j]` at `(x1[i], x2[j])`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// First feature values, strictly increasing, positive.
    pub x1: Vec<f64>,
    /// Second feature values, strictly increasing, positive.
    pub x2: Vec<f64>,
    /// Seconds per grid point (positive).
    pub seconds: Vec<f64>,
}

impl Curve {
    /// Checks the grid's invariants; the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let inc = |v: &[f64], name: &str| -> Result<(), String> {
            if v.is_empty() {
                return Err(format!("{name} is empty"));
            }
            if v.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
                return Err(format!("{name} has a non-positive or non-finite value"));
            }
            if v.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("{name} is not strictly increasing"));
            }
            Ok(())
        };
        inc(&self.x1, "x1")?;
        inc(&self.x2, "x2")?;
        if self.seconds.len() != self.x1.len() * self.x2.len() {
            return Err(format!(
                "{} seconds for a {}x{} grid",
                self.seconds.len(),
                self.x1.len(),
                self.x2.len()
            ));
        }
        if self.seconds.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err("a time is non-positive or non-finite".into());
        }
        Ok(())
    }

    /// Predicted seconds for a call of `kind` in `prec` with `shape`.
    pub fn predict(&self, kind: OpKind, prec: Precision, shape: Shape) -> f64 {
        let (q1, q2) = kind.features(shape);
        let rate = |i: usize, j: usize| -> f64 {
            let s = kind.canonical_shape(self.x1[i], self.x2[j]);
            (kind.flops(prec, s) / self.seconds[i * self.x2.len() + j]).ln()
        };
        let (i0, i1, t1) = bracket(&self.x1, q1);
        let (j0, j1, t2) = bracket(&self.x2, q2);
        let r00 = rate(i0, j0);
        let r01 = rate(i0, j1);
        let r10 = rate(i1, j0);
        let r11 = rate(i1, j1);
        let lr = (1.0 - t1) * ((1.0 - t2) * r00 + t2 * r01) + t1 * ((1.0 - t2) * r10 + t2 * r11);
        kind.flops(prec, shape) / lr.exp()
    }
}

/// Index pair and weight of `q` between grid values, in log space, clamped at the ends.
fn bracket(grid: &[f64], q: f64) -> (usize, usize, f64) {
    let n = grid.len();
    if n == 1 || q <= grid[0] {
        return (0, 0, 0.0);
    }
    if q >= grid[n - 1] {
        return (n - 1, n - 1, 0.0);
    }
    let i = grid.partition_point(|&g| g <= q) - 1;
    let (a, b) = (grid[i].ln(), grid[i + 1].ln());
    (i, i + 1, (q.ln() - a) / (b - a))
}

/// Host/device copy throughput through the GPU backend's pinned staging (host packing included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CopyModel {
    /// Host to device, bytes per second.
    pub h2d_bytes_per_s: f64,
    /// Device to host, bytes per second.
    pub d2h_bytes_per_s: f64,
    /// Fixed cost per GPU call (launches, synchronisation, small copies), seconds.
    pub latency_s: f64,
}

impl CopyModel {
    /// Seconds to move `inb` bytes in and `outb` bytes out.
    pub fn seconds(&self, inb: f64, outb: f64) -> (f64, f64) {
        (inb / self.h2d_bytes_per_s, outb / self.d2h_bytes_per_s)
    }
}

/// A prediction for one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Predicted CPU seconds (learned correction applied).
    pub cpu_s: f64,
    /// Predicted GPU seconds, copies included (learned correction applied).
    pub gpu_s: f64,
    /// Of `gpu_s` before correction: host to device copy.
    pub h2d_s: f64,
    /// Of `gpu_s` before correction: GPU compute.
    pub compute_s: f64,
    /// Of `gpu_s` before correction: device to host copy.
    pub d2h_s: f64,
}

impl Estimate {
    /// `cpu_s / gpu_s`.
    pub fn speedup(&self) -> f64 {
        self.cpu_s / self.gpu_s
    }
}

/// The required GPU speedup for each decision level 1..=10: level 1 offloads only calls predicted
/// at least 3x faster on the GPU, level 10 also calls predicted up to 10 % slower (to favour the
/// GPU where the CPU is needed for other work). The default, [`DEFAULT_LEVEL`], asks for 5 %.
pub const LEVEL_SPEEDUP: [f64; 10] = [3.0, 2.5, 2.0, 1.75, 1.5, 1.3, 1.15, 1.05, 1.0, 0.9];

/// The default decision level.
pub const DEFAULT_LEVEL: u8 = 8;

/// Required speedup of a level (clamped to 1..=10).
pub fn required_speedup(level: u8) -> f64 {
    LEVEL_SPEEDUP[(level.clamp(1, 10) - 1) as usize]
}

/// Predicted times for every op kind and precision on this machine.
#[derive(Debug, Clone)]
pub struct Model {
    curves: HashMap<(OpKind, Precision, Backend), Curve>,
    /// Copy throughput.
    pub copy: CopyModel,
    /// Seconds to start the GPU backend (context, handles, first allocations).
    pub startup_s: f64,
}

impl Model {
    /// A model from curves and copy figures.
    pub fn new(
        curves: impl IntoIterator<Item = ((OpKind, Precision, Backend), Curve)>,
        copy: CopyModel,
        startup_s: f64,
    ) -> Model {
        Model {
            curves: curves.into_iter().collect(),
            copy,
            startup_s,
        }
    }

    /// The curve used for a key: the exact one, else the same kind in the precision of the same
    /// real width (z for d, c for s, and back), else any precision of the kind.
    pub fn curve(&self, kind: OpKind, prec: Precision, backend: Backend) -> Option<&Curve> {
        let alt = match prec {
            Precision::S => [Precision::C, Precision::D, Precision::Z],
            Precision::D => [Precision::Z, Precision::S, Precision::C],
            Precision::C => [Precision::S, Precision::Z, Precision::D],
            Precision::Z => [Precision::D, Precision::C, Precision::S],
        };
        std::iter::once(prec)
            .chain(alt)
            .find_map(|p| self.curves.get(&(kind, p, backend)))
    }

    /// Every curve.
    pub fn curves(&self) -> impl Iterator<Item = (&(OpKind, Precision, Backend), &Curve)> {
        self.curves.iter()
    }

    /// Uncorrected estimate; `None` when the model has no curve for the kind.
    pub fn estimate(&self, kind: OpKind, prec: Precision, shape: Shape) -> Option<Estimate> {
        let cpu = self
            .curve(kind, prec, Backend::Cpu)?
            .predict(kind, prec, shape);
        let compute = self
            .curve(kind, prec, Backend::Gpu)?
            .predict(kind, prec, shape);
        let (inb, outb) = kind.bytes(prec, shape);
        let (h2d, d2h) = self.copy.seconds(inb, outb);
        Some(Estimate {
            cpu_s: cpu,
            gpu_s: h2d + compute + d2h + self.copy.latency_s,
            h2d_s: h2d,
            compute_s: compute,
            d2h_s: d2h,
        })
    }

    /// The smallest [`OpKind::work`] at which the GPU could pay, scanning the feature grid
    /// (with `margin` > 1 making it lower, so learning can still move the decision); `u64::MAX`
    /// when it never pays in the scanned range.
    pub fn work_threshold(&self, kind: OpKind, prec: Precision, level: u8, margin: f64) -> u64 {
        let need = required_speedup(level) / margin;
        let mut best = u64::MAX;
        let x2s: Vec<f64> = match kind.routine {
            crate::ops::Routine::Potrf | crate::ops::Routine::Syevd => vec![1.0],
            crate::ops::Routine::Getrf
            | crate::ops::Routine::Geqrf
            | crate::ops::Routine::Gesdd
            | crate::ops::Routine::Gesvd => vec![1.0, 2.0, 4.0, 8.0, 16.0],
            _ => (0..=15).map(|e| 2f64.powi(e)).collect(),
        };
        for e in 0..=60 {
            let x1 = 16.0 * 2f64.powf(e as f64 / 4.0); // 16 .. 16 * 2^15
            for &x2 in &x2s {
                let s = kind.canonical_shape(x1, x2);
                if let Some(est) = self.estimate(kind, prec, s) {
                    if est.speedup() >= need {
                        best = best.min(kind.work(s));
                    }
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Routine;
    use proptest::prelude::*;

    fn gemm() -> OpKind {
        OpKind::plain(Routine::Gemm)
    }

    /// A curve whose rate is `peak * x / (x + half)` in the first feature, flat in the second.
    fn saturating(kind: OpKind, peak: f64, half: f64) -> Curve {
        let x1 = vec![64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0];
        let x2 = vec![64.0, 512.0, 4096.0];
        let mut seconds = Vec::new();
        for &a in &x1 {
            for &b in &x2 {
                let s = kind.canonical_shape(a, b);
                seconds.push(kind.flops(Precision::D, s) / (peak * a / (a + half)));
            }
        }
        Curve { x1, x2, seconds }
    }

    fn model() -> Model {
        let mut c = HashMap::default();
        c.insert(
            (gemm(), Precision::D, Backend::Cpu),
            saturating(gemm(), 1e12, 64.0),
        );
        c.insert(
            (gemm(), Precision::D, Backend::Gpu),
            saturating(gemm(), 5e13, 2048.0),
        );
        Model::new(
            c,
            CopyModel {
                h2d_bytes_per_s: 2e10,
                d2h_bytes_per_s: 2e10,
                latency_s: 50e-6,
            },
            0.3,
        )
    }

    #[test]
    fn grid_points_are_reproduced() {
        let k = gemm();
        let c = saturating(k, 1e12, 64.0);
        for (i, &a) in c.x1.iter().enumerate() {
            for (j, &b) in c.x2.iter().enumerate() {
                let s = k.canonical_shape(a, b);
                let t = c.predict(k, Precision::D, s);
                let want = c.seconds[i * c.x2.len() + j];
                assert!((t - want).abs() / want < 1e-9, "{a} {b}: {t} vs {want}");
            }
        }
    }

    #[test]
    fn small_calls_stay_on_cpu_large_go_to_gpu() {
        let m = model();
        let small = m
            .estimate(gemm(), Precision::D, Shape::new(64, 64, 64))
            .unwrap();
        assert!(small.speedup() < 1.0, "{small:?}");
        let large = m
            .estimate(gemm(), Precision::D, Shape::new(8192, 8192, 8192))
            .unwrap();
        assert!(large.speedup() > 3.0, "{large:?}");
    }

    #[test]
    fn rectangular_shape_judged_by_features_not_flops() {
        let m = model();
        // same flops: a square call and a call with a tiny inner dimension; the latter moves far
        // more bytes per flop, so the GPU gains much less on it
        let sq = m
            .estimate(gemm(), Precision::D, Shape::new(2048, 2048, 2048))
            .unwrap();
        let flat = m
            .estimate(gemm(), Precision::D, Shape::new(16384, 16384, 32))
            .unwrap();
        let f1 = gemm().flops(Precision::D, Shape::new(2048, 2048, 2048));
        let f2 = gemm().flops(Precision::D, Shape::new(16384, 16384, 32));
        assert!((f1 - f2).abs() / f1 < 1e-9);
        assert!(flat.speedup() < sq.speedup() / 2.0, "{flat:?} {sq:?}");
    }

    #[test]
    fn precision_fallback_uses_same_width() {
        let m = model();
        assert!(m.curve(gemm(), Precision::Z, Backend::Cpu).is_some());
        assert!(m
            .curve(OpKind::plain(Routine::Potrf), Precision::D, Backend::Cpu)
            .is_none());
        assert!(m
            .estimate(
                OpKind::plain(Routine::Potrf),
                Precision::D,
                Shape::new(1, 9, 1)
            )
            .is_none());
    }

    #[test]
    fn level_table_is_monotone() {
        assert_eq!(required_speedup(1), 3.0);
        assert_eq!(required_speedup(10), 0.9);
        assert_eq!(required_speedup(0), 3.0);
        assert_eq!(required_speedup(99), 0.9);
        assert!(LEVEL_SPEEDUP.windows(2).all(|w| w[0] > w[1]));
    }

    #[test]
    fn threshold_separates_decisions() {
        let m = model();
        let thr = m.work_threshold(gemm(), Precision::D, DEFAULT_LEVEL, 1.0);
        assert!(thr > 64 * 64 * 64 && thr < 8192u64.pow(3), "{thr}");
        // with a margin the threshold only goes down
        assert!(m.work_threshold(gemm(), Precision::D, DEFAULT_LEVEL, 2.0) <= thr);
    }

    proptest! {
        #[test]
        fn prediction_positive_and_monotone_in_size(a in 1u64..20000, b in 1u64..20000, k in 1u64..20000) {
            let m = model();
            let e1 = m.estimate(gemm(), Precision::D, Shape::new(a, b, k)).unwrap();
            let e2 = m.estimate(gemm(), Precision::D, Shape::new(a * 2, b, k)).unwrap();
            prop_assert!(e1.cpu_s > 0.0 && e1.gpu_s > 0.0);
            prop_assert!(e1.cpu_s.is_finite() && e1.gpu_s.is_finite());
            // doubling a dimension never makes a call cheaper
            prop_assert!(e2.cpu_s >= e1.cpu_s * 0.999);
            prop_assert!(e2.gpu_s >= e1.gpu_s * 0.999);
        }

        #[test]
        fn higher_level_never_offloads_less(l1 in 1u8..=10, l2 in 1u8..=10, n in 16u64..10000) {
            let (lo, hi) = if l1 <= l2 { (l1, l2) } else { (l2, l1) };
            let m = model();
            let e = m.estimate(gemm(), Precision::D, Shape::new(n, n, n)).unwrap();
            let off = |l: u8| e.speedup() >= required_speedup(l);
            prop_assert!(!off(lo) || off(hi));
        }

        #[test]
        fn interpolation_stays_between_neighbours(q in 64.0f64..4096.0) {
            let k = gemm();
            let c = saturating(k, 1e12, 64.0);
            let s = k.canonical_shape(q, 512.0);
            let rate = k.flops(Precision::D, s) / c.predict(k, Precision::D, s);
            let (i, j, _) = bracket(&c.x1, q);
            let r = |i: usize| { let s = k.canonical_shape(c.x1[i], 512.0); k.flops(Precision::D, s) / c.seconds[i * 3 + 1] };
            let (lo, hi) = (r(i).min(r(j)), r(i).max(r(j)));
            prop_assert!(rate >= lo * 0.999 && rate <= hi * 1.001);
        }
    }
}
