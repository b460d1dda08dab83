//! The cost model: predicted CPU time and GPU time (copy in + compute + copy out) of a call.
//!
//! CPU curves are per CPU library ([`LibKey`]: numpy's bundled OpenBLAS, scipy's, the system
//! one, ...), because the program's own library is what a call kept on the CPU runs on and their
//! speeds differ by several times; a library without curves has no CPU estimate here (the
//! dispatcher learns its times from the process's first calls instead of borrowing another
//! library's). GPU curves are per `(op kind, precision)`.
//!
//! Each curve is measured seconds on a grid of the two
//! shape features of [`OpKind::features`]. A query converts the grid to *rates* (flops per second
//! of the grid point's canonical shape), interpolates `log(rate)` bilinearly in
//! `(log x1, log x2)`, clamps outside the grid (a constant rate beyond the largest measured size:
//! conservative for the GPU, whose rate still grows there), and divides the call's own flops by
//! that rate. Rectangular calls are therefore judged at their own features, not at a square call
//! of equal flops. GPU time adds the copies, priced by the measured staging throughput.

use crate::library::LibKey;
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
    /// Predicted CPU seconds (learned correction applied); meaningful only when `cpu_known`.
    pub cpu_s: f64,
    /// False when the CPU library of the call has no curve and nothing was learned about it yet.
    pub cpu_known: bool,
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
    /// `cpu_s / gpu_s` (0 when the CPU time is unknown).
    pub fn speedup(&self) -> f64 {
        if self.cpu_known {
            self.cpu_s / self.gpu_s
        } else {
            0.0
        }
    }
}

/// What GPU start-up costs, by phase (seconds), as `calibrate` measured it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Startup {
    /// Driver, context, cuBLAS and the first lane (what every offloaded call needs).
    pub start_s: f64,
    /// cuSOLVER's library and first handle (paid once, before the first LAPACK call).
    #[serde(default = "Startup::default_solver_s")]
    pub solver_s: f64,
}

impl Startup {
    fn default_solver_s() -> f64 {
        0.3
    }
}

/// The required GPU speedup for each decision level 1..=10: level 1 offloads only calls predicted
/// at least 3x faster on the GPU, level 10 also calls predicted up to 10 % slower (to favour the
/// GPU where the CPU is needed for other work). The default, [`DEFAULT_LEVEL`], asks for 5 %.
pub const LEVEL_SPEEDUP: [f64; 10] = [3.0, 2.5, 2.0, 1.75, 1.5, 1.3, 1.15, 1.05, 1.0, 0.9];

/// An upper bound of a CPU's single-precision rate (flops per second; half of it in double
/// precision), for kinds without CPU curves: the fast-path threshold then lets every call
/// through that could lose to the GPU on any CPU.
pub const FAST_CPU_FLOPS: f64 = 4e12;

/// The default decision level.
pub const DEFAULT_LEVEL: u8 = 8;

/// Required speedup of a level (clamped to 1..=10).
pub fn required_speedup(level: u8) -> f64 {
    LEVEL_SPEEDUP[(level.clamp(1, 10) - 1) as usize]
}

/// Predicted times for every op kind and precision on this machine.
#[derive(Debug, Clone)]
pub struct Model {
    cpu: HashMap<(LibKey, OpKind, Precision), Curve>,
    gpu: HashMap<(OpKind, Precision), Curve>,
    /// Copy throughput.
    pub copy: CopyModel,
    /// GPU start-up by phase.
    pub startup: Startup,
}

/// The precisions tried for a curve, in order: the exact one, then the one of the same real
/// width (z for d, c for s, and back), then the others.
fn precision_order(prec: Precision) -> [Precision; 4] {
    match prec {
        Precision::S => [Precision::S, Precision::C, Precision::D, Precision::Z],
        Precision::D => [Precision::D, Precision::Z, Precision::S, Precision::C],
        Precision::C => [Precision::C, Precision::S, Precision::Z, Precision::D],
        Precision::Z => [Precision::Z, Precision::D, Precision::C, Precision::S],
    }
}

impl Model {
    /// A model from CPU curves (per library), GPU curves and copy figures.
    pub fn new(
        cpu: impl IntoIterator<Item = ((LibKey, OpKind, Precision), Curve)>,
        gpu: impl IntoIterator<Item = ((OpKind, Precision), Curve)>,
        copy: CopyModel,
        startup: Startup,
    ) -> Model {
        Model {
            cpu: cpu.into_iter().collect(),
            gpu: gpu.into_iter().collect(),
            copy,
            startup,
        }
    }

    /// The CPU curve for a library: the exact precision, else the nearest one measured on the
    /// same library (never another library's).
    pub fn cpu_curve(&self, lib: LibKey, kind: OpKind, prec: Precision) -> Option<&Curve> {
        precision_order(prec)
            .into_iter()
            .find_map(|p| self.cpu.get(&(lib, kind, p)))
    }

    /// The GPU curve: the exact precision, else the nearest one; for a kind the GPU runs as
    /// another ([`OpKind::gpu_kind`]: syev as syevd), that kind's curve when it has none of
    /// its own.
    pub fn gpu_curve(&self, kind: OpKind, prec: Precision) -> Option<&Curve> {
        let find = |k: OpKind| {
            precision_order(prec)
                .into_iter()
                .find_map(|p| self.gpu.get(&(k, p)))
        };
        find(kind).or_else(|| find(kind.gpu_kind()))
    }

    /// The libraries with CPU curves.
    pub fn libraries(&self) -> Vec<LibKey> {
        let mut v: Vec<LibKey> = self.cpu.keys().map(|k| k.0).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Every CPU curve.
    pub fn cpu_curves(&self) -> impl Iterator<Item = (&(LibKey, OpKind, Precision), &Curve)> {
        self.cpu.iter()
    }

    /// Every GPU curve.
    pub fn gpu_curves(&self) -> impl Iterator<Item = (&(OpKind, Precision), &Curve)> {
        self.gpu.iter()
    }

    /// The GPU side alone: copies, compute, latency. `None` without a GPU curve.
    pub fn gpu_estimate(&self, kind: OpKind, prec: Precision, shape: Shape) -> Option<Estimate> {
        let compute = self.gpu_curve(kind, prec)?.predict(kind, prec, shape);
        let (inb, outb) = kind.bytes(prec, shape);
        let (h2d, d2h) = self.copy.seconds(inb, outb);
        Some(Estimate {
            cpu_s: 0.0,
            cpu_known: false,
            gpu_s: h2d + compute + d2h + self.copy.latency_s,
            h2d_s: h2d,
            compute_s: compute,
            d2h_s: d2h,
        })
    }

    /// Uncorrected estimate for a call on CPU library `lib`; `None` when the model has no GPU
    /// curve for the kind. The CPU side is unknown (`cpu_known` false) when `lib` has no curve.
    pub fn estimate(
        &self,
        kind: OpKind,
        prec: Precision,
        shape: Shape,
        lib: LibKey,
    ) -> Option<Estimate> {
        let mut e = self.gpu_estimate(kind, prec, shape)?;
        if let Some(c) = self.cpu_curve(lib, kind, prec) {
            e.cpu_s = c.predict(kind, prec, shape);
            e.cpu_known = true;
        }
        Some(e)
    }

    /// The smallest [`OpKind::work`] at which the GPU could pay on any library with curves,
    /// scanning the feature grid (with `margin` > 1 making it lower, so learning can still move
    /// the decision); `u64::MAX` when it never pays in the scanned range. Where no library has
    /// a curve for the kind, the CPU is assumed as fast as [`FAST_CPU_FLOPS`] (so calls a
    /// library without curves could lose to the GPU reach the dispatcher and are measured).
    pub fn work_threshold(&self, kind: OpKind, prec: Precision, level: u8, margin: f64) -> u64 {
        let need = required_speedup(level) / margin;
        let mut best = u64::MAX;
        let x2s: Vec<f64> = if kind.routine.one_feature() {
            vec![1.0]
        } else if kind.routine.aspect_feature() {
            vec![1.0, 2.0, 4.0, 8.0, 16.0]
        } else {
            (0..=15).map(|e| 2f64.powi(e)).collect()
        };
        let libs: Vec<LibKey> = self
            .libraries()
            .into_iter()
            .filter(|&l| self.cpu_curve(l, kind, prec).is_some())
            .collect();
        let fast = FAST_CPU_FLOPS / if prec.real_size() == 4 { 1.0 } else { 2.0 };
        for e in 0..=60 {
            let x1 = 16.0 * 2f64.powf(e as f64 / 4.0); // 16 .. 16 * 2^15
            for &x2 in &x2s {
                let s = kind.canonical_shape(x1, x2);
                let pays = if libs.is_empty() {
                    self.gpu_estimate(kind, prec, s)
                        .is_some_and(|g| kind.flops(prec, s) / fast >= need * g.gpu_s)
                } else {
                    libs.iter().any(|&lib| {
                        self.estimate(kind, prec, s, lib)
                            .is_some_and(|est| est.cpu_known && est.speedup() >= need)
                    })
                };
                if pays {
                    best = best.min(kind.work(s));
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

    fn lib() -> LibKey {
        LibKey::of("openblas")
    }

    fn model() -> Model {
        Model::new(
            [(
                (lib(), gemm(), Precision::D),
                saturating(gemm(), 1e12, 64.0),
            )],
            [((gemm(), Precision::D), saturating(gemm(), 5e13, 2048.0))],
            CopyModel {
                h2d_bytes_per_s: 2e10,
                d2h_bytes_per_s: 2e10,
                latency_s: 50e-6,
            },
            Startup {
                start_s: 0.3,
                solver_s: 0.2,
            },
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
            .estimate(gemm(), Precision::D, Shape::new(64, 64, 64), lib())
            .unwrap();
        assert!(small.speedup() < 1.0, "{small:?}");
        let large = m
            .estimate(gemm(), Precision::D, Shape::new(8192, 8192, 8192), lib())
            .unwrap();
        assert!(large.speedup() > 3.0, "{large:?}");
    }

    #[test]
    fn rectangular_shape_judged_by_features_not_flops() {
        let m = model();
        // same flops: a square call and a call with a tiny inner dimension; the latter moves far
        // more bytes per flop, so the GPU gains much less on it
        let sq = m
            .estimate(gemm(), Precision::D, Shape::new(2048, 2048, 2048), lib())
            .unwrap();
        let flat = m
            .estimate(gemm(), Precision::D, Shape::new(16384, 16384, 32), lib())
            .unwrap();
        let f1 = gemm().flops(Precision::D, Shape::new(2048, 2048, 2048));
        let f2 = gemm().flops(Precision::D, Shape::new(16384, 16384, 32));
        assert!((f1 - f2).abs() / f1 < 1e-9);
        assert!(flat.speedup() < sq.speedup() / 2.0, "{flat:?} {sq:?}");
    }

    #[test]
    fn precision_fallback_stays_within_a_library() {
        let m = model();
        assert!(m.cpu_curve(lib(), gemm(), Precision::Z).is_some());
        assert!(m.gpu_curve(gemm(), Precision::Z).is_some());
        assert!(m
            .cpu_curve(lib(), OpKind::plain(Routine::Potrf), Precision::D)
            .is_none());
        assert!(m
            .estimate(
                OpKind::plain(Routine::Potrf),
                Precision::D,
                Shape::new(1, 9, 1),
                lib()
            )
            .is_none());
        // another library has no CPU estimate: never borrowed from openblas
        let other = LibKey::of("mkl");
        let e = m
            .estimate(gemm(), Precision::D, Shape::new(512, 512, 512), other)
            .unwrap();
        assert!(!e.cpu_known && e.gpu_s > 0.0);
        assert_eq!(e.speedup(), 0.0);
        let e = m
            .estimate(gemm(), Precision::D, Shape::new(512, 512, 512), lib())
            .unwrap();
        assert!(e.cpu_known && e.cpu_s > 0.0);
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
            let e1 = m.estimate(gemm(), Precision::D, Shape::new(a, b, k), lib()).unwrap();
            let e2 = m.estimate(gemm(), Precision::D, Shape::new(a * 2, b, k), lib()).unwrap();
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
            let e = m.estimate(gemm(), Precision::D, Shape::new(n, n, n), lib()).unwrap();
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
