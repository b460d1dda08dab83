//! Run-time learning: observed times correct the model, in both directions.
//!
//! * **Corrections.** A factor multiplies the model's prediction for one `(op kind, precision,
//!   backend, CPU library, shape bucket)`; the bucket is the pair of the call's two shape
//!   features rounded to half octaves, so a rectangular call is not corrected by a square one of
//!   equal flops. After each timed call the factor moves halfway (in log space) toward
//!   `observed / predicted`, clamped to `[1/20, 20]`.
//! * **Re-checks both ways.** A call sent to the GPU is re-run on the CPU once in
//!   [`RECHECK_EVERY`] per bucket while the predicted gain is modest (a too optimistic GPU
//!   estimate is found); a call kept on the CPU whose *uncorrected* model says the GPU would
//!   win is sent to the GPU once in [`RECHECK_EVERY`] (a GPU correction made too pessimistic
//!   by a slow first call is undone, and the calls move back to the GPU).
//! * **Measured CPU rates.** Every timed CPU call records its rate (flops per second) per
//!   library and bucket ([`CpuPoint`]). A library without calibrated curves gets its CPU
//!   estimate from these (the nearest bucket of the same routine), learned from the process's
//!   first calls; and the statistics call a GPU call's saving *measured* when the CPU time of
//!   its exact bucket was measured.
//!
//! What a process learned is merged into the profile file at exit
//! ([`crate::profile::merge_learned`]).

use crate::library::LibKey;
use crate::model::Backend;
use crate::ops::{OpKind, Precision};
use crate::profile::Learned;
use crate::sync::Lock;
use foldhash::HashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Re-check one call in this many (per bucket and direction).
pub const RECHECK_EVERY: u64 = 16;

/// Factors are clamped to `[1/LIMIT, LIMIT]`.
pub const LIMIT: f64 = 20.0;

/// Observation counts beyond this stop slowing a CPU rate's moving average.
const POINT_MEMORY: u32 = 8;

/// A feature rounded to half octaves.
#[inline]
pub fn bucket(x: f64) -> i16 {
    if x > 1.0 {
        (2.0 * x.log2()).round() as i16
    } else {
        0
    }
}

/// The key of a correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CorrKey {
    /// Op kind.
    pub kind: OpKind,
    /// Precision.
    pub prec: Precision,
    /// Backend whose prediction is corrected.
    pub backend: Backend,
    /// The CPU library ([`LibKey::NONE`] for GPU corrections).
    pub lib: LibKey,
    /// First feature, in half octaves.
    pub b1: i16,
    /// Second feature, in half octaves.
    pub b2: i16,
}

impl CorrKey {
    /// The key for a call with these shape features (`lib` is ignored for the GPU).
    pub fn new(
        kind: OpKind,
        prec: Precision,
        backend: Backend,
        lib: LibKey,
        features: (f64, f64),
    ) -> CorrKey {
        CorrKey {
            kind,
            prec,
            backend,
            lib: if backend == Backend::Gpu {
                LibKey::NONE
            } else {
                lib
            },
            b1: bucket(features.0),
            b2: bucket(features.1),
        }
    }

    /// `op/precision/backend/library/b1/b2`, e.g. `gemm/d/cpu/scipy_openblas64/24/18`
    /// (library `-` for the GPU).
    pub fn text(&self) -> String {
        let lib = match self.lib.as_str() {
            "" => "-",
            s => s,
        };
        format!(
            "{}/{}/{}/{lib}/{}/{}",
            self.kind.key(),
            self.prec.letter(),
            self.backend.as_str(),
            self.b1,
            self.b2
        )
    }

    /// Parses [`CorrKey::text`].
    pub fn parse(s: &str) -> Option<CorrKey> {
        let mut it = s.split('/');
        let kind = OpKind::parse_key(it.next()?)?;
        let prec = Precision::from_letter(it.next()?.chars().next()?)?;
        let backend = match it.next()? {
            "cpu" => Backend::Cpu,
            "gpu" => Backend::Gpu,
            _ => return None,
        };
        let lib = match it.next()? {
            "-" => LibKey::NONE,
            k => LibKey::of(k),
        };
        let b1 = it.next()?.parse().ok()?;
        let b2 = it.next()?.parse().ok()?;
        if it.next().is_some() {
            return None;
        }
        Some(CorrKey {
            kind,
            prec,
            backend,
            lib,
            b1,
            b2,
        })
    }
}

/// A measured CPU rate, as the profile stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuPoint {
    /// Library key.
    pub library: String,
    /// [`OpKind::key`].
    pub op: String,
    /// Precision.
    pub precision: Precision,
    /// First feature in half octaves.
    pub b1: i16,
    /// Second feature in half octaves.
    pub b2: i16,
    /// Flops per second (geometric mean of the observations).
    pub rate: f64,
    /// Observations behind it (capped).
    pub n: u32,
}

impl CpuPoint {
    /// Same library, kind, precision and bucket.
    pub fn same_place(&self, o: &CpuPoint) -> bool {
        self.library == o.library
            && self.op == o.op
            && self.precision == o.precision
            && self.b1 == o.b1
            && self.b2 == o.b2
    }

    /// Averages another measurement of the same place in (log rate, by count).
    pub fn absorb(&mut self, o: &CpuPoint) {
        let (a, b) = (self.n.max(1) as f64, o.n.max(1) as f64);
        self.rate = ((self.rate.ln() * a + o.rate.ln() * b) / (a + b)).exp();
        self.n = (self.n + o.n).min(4 * POINT_MEMORY);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PointKey {
    lib: LibKey,
    kind: OpKind,
    prec: Precision,
    b1: i16,
    b2: i16,
}

#[derive(Debug, Clone, Copy)]
struct Point {
    log_rate: f64,
    n: u32,
    /// This process's own observations: their summed log rate and count.
    own_sum: f64,
    own_n: u32,
}

/// The learner's state (behind one lock).
#[derive(Debug, Default)]
pub(crate) struct State {
    factors: HashMap<CorrKey, f64>,
    /// Factors as loaded (for the merge on save), keys this process changed.
    loaded: HashMap<CorrKey, f64>,
    changed: std::collections::HashSet<CorrKey, foldhash::fast::RandomState>,
    points: HashMap<PointKey, Point>,
    rechecks: HashMap<(OpKind, Precision, i16, i16, Backend), u64>,
}

/// What the learner knows about a call's CPU time without a calibrated curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuKnown {
    /// Predicted seconds.
    pub seconds: f64,
    /// True when measured in the call's own bucket (not borrowed from a neighbouring one).
    pub exact: bool,
}

/// The learned state of one process.
#[derive(Debug, Default)]
pub struct Learner {
    state: Lock<State>,
}

impl Learner {
    /// Starts from what a profile stores (unparsable corrections are ignored here and left in
    /// the file).
    pub fn from_profile(corrections: &BTreeMap<String, f64>, points: &[CpuPoint]) -> Learner {
        let factors: HashMap<CorrKey, f64> = crate::profile::parse_corrections(corrections)
            .into_iter()
            .map(|(k, v)| (k, v.clamp(1.0 / LIMIT, LIMIT)))
            .collect();
        let mut pts = HashMap::default();
        for p in points {
            let Some(kind) = OpKind::parse_key(&p.op) else {
                continue;
            };
            if !(p.rate.is_finite() && p.rate > 0.0) {
                continue;
            }
            pts.insert(
                PointKey {
                    lib: LibKey::of(&p.library),
                    kind,
                    prec: p.precision,
                    b1: p.b1,
                    b2: p.b2,
                },
                Point {
                    log_rate: p.rate.ln(),
                    n: p.n.clamp(1, POINT_MEMORY),
                    own_sum: 0.0,
                    own_n: 0,
                },
            );
        }
        Learner {
            state: Lock::new(State {
                loaded: factors.clone(),
                factors,
                points: pts,
                ..State::default()
            }),
        }
    }

    /// The factor for a key (1 when nothing was learned).
    pub fn factor(&self, key: CorrKey) -> f64 {
        self.state.lock().factors.get(&key).copied().unwrap_or(1.0)
    }

    /// The factors of two keys under one lock (the CPU and GPU corrections of a call).
    pub fn factors(&self, a: CorrKey, b: CorrKey) -> (f64, f64) {
        let st = self.state.lock();
        let f = |k: &CorrKey| st.factors.get(k).copied().unwrap_or(1.0);
        (f(&a), f(&b))
    }

    /// Records an observation: `predicted` is the prediction *with* the current factor applied.
    /// Returns the new factor.
    pub fn observe(&self, key: CorrKey, predicted: f64, observed: f64) -> f64 {
        let mut st = self.state.lock();
        let f = st.factors.get(&key).copied().unwrap_or(1.0);
        if !(predicted.is_finite() && predicted > 0.0 && observed.is_finite() && observed > 0.0) {
            return f;
        }
        let nf = (f * (observed / predicted).sqrt()).clamp(1.0 / LIMIT, LIMIT);
        st.factors.insert(key, nf);
        st.changed.insert(key);
        nf
    }

    /// Records a timed CPU call's rate.
    pub fn observe_cpu(
        &self,
        lib: LibKey,
        kind: OpKind,
        prec: Precision,
        features: (f64, f64),
        flops: f64,
        seconds: f64,
    ) {
        if lib == LibKey::NONE || !(seconds > 0.0 && flops > 0.0 && seconds.is_finite()) {
            return;
        }
        let lr = (flops / seconds).ln();
        let key = PointKey {
            lib,
            kind,
            prec,
            b1: bucket(features.0),
            b2: bucket(features.1),
        };
        let mut st = self.state.lock();
        let p = st.points.entry(key).or_insert(Point {
            log_rate: lr,
            n: 0,
            own_sum: 0.0,
            own_n: 0,
        });
        let n = p.n.min(POINT_MEMORY) as f64;
        p.log_rate = (p.log_rate * n + lr) / (n + 1.0);
        p.n = (p.n + 1).min(POINT_MEMORY);
        p.own_sum += lr;
        p.own_n += 1;
    }

    /// The CPU time of a call from measured rates: its own bucket (`exact`), else the nearest
    /// measured bucket of the same library, kind and precision; `None` when none was measured.
    pub fn cpu_known(
        &self,
        lib: LibKey,
        kind: OpKind,
        prec: Precision,
        features: (f64, f64),
        flops: f64,
    ) -> Option<CpuKnown> {
        let (b1, b2) = (bucket(features.0), bucket(features.1));
        let st = self.state.lock();
        let exact = PointKey {
            lib,
            kind,
            prec,
            b1,
            b2,
        };
        if let Some(p) = st.points.get(&exact) {
            return Some(CpuKnown {
                seconds: flops / p.log_rate.exp(),
                exact: true,
            });
        }
        st.points
            .iter()
            .filter(|(k, _)| k.lib == lib && k.kind == kind && k.prec == prec)
            .min_by_key(|(k, _)| (k.b1 - b1).abs() as i32 + (k.b2 - b2).abs() as i32)
            .map(|(_, p)| CpuKnown {
                seconds: flops / p.log_rate.exp(),
                exact: false,
            })
    }

    /// Whether this call should be re-checked on the other backend (`toward`): one in
    /// [`RECHECK_EVERY`] per bucket and direction; the first call of a bucket never is.
    pub fn take_recheck(
        &self,
        kind: OpKind,
        prec: Precision,
        features: (f64, f64),
        toward: Backend,
    ) -> bool {
        let mut st = self.state.lock();
        let c = st
            .rechecks
            .entry((kind, prec, bucket(features.0), bucket(features.1), toward))
            .or_insert(0);
        *c += 1;
        (*c).is_multiple_of(RECHECK_EVERY)
    }

    /// All factors, as profile keys.
    pub fn snapshot(&self) -> BTreeMap<String, f64> {
        self.state
            .lock()
            .factors
            .iter()
            .map(|(k, v)| (k.text(), *v))
            .collect()
    }

    /// What this process learned since it loaded (or last saved): its changed corrections and
    /// its own CPU measurements.
    pub fn learned(&self) -> Learned {
        let st = self.state.lock();
        let corrections = st
            .changed
            .iter()
            .filter_map(|k| {
                let now = *st.factors.get(k)?;
                let before = st.loaded.get(k).copied().unwrap_or(1.0);
                Some((k.text(), (before, now)))
            })
            .collect();
        let points = st
            .points
            .iter()
            .filter(|(k, p)| p.own_n > 0 && k.lib != LibKey::NONE)
            .map(|(k, p)| CpuPoint {
                library: k.lib.as_str().to_string(),
                op: k.kind.key(),
                precision: k.prec,
                b1: k.b1,
                b2: k.b2,
                rate: (p.own_sum / p.own_n as f64).exp(),
                n: p.own_n.min(POINT_MEMORY),
            })
            .collect();
        Learned {
            corrections,
            points,
        }
    }

    /// True when something was learned since the last [`Learner::mark_saved`].
    pub fn dirty(&self) -> bool {
        let st = self.state.lock();
        !st.changed.is_empty() || st.points.values().any(|p| p.own_n > 0)
    }

    /// Marks what was learned as persisted.
    pub fn mark_saved(&self) {
        let mut st = self.state.lock();
        let st = &mut *st;
        for k in st.changed.drain() {
            if let Some(v) = st.factors.get(&k) {
                st.loaded.insert(k, *v);
            }
        }
        for p in st.points.values_mut() {
            p.own_sum = 0.0;
            p.own_n = 0;
        }
    }

    /// Fork handler: the lock, held across `fork()` (see [`crate::sync`]).
    pub(crate) fn fork_hold(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// In a forked child: what the parent learned stays known, but only what the child learns
    /// itself is the child's to save.
    pub(crate) fn forked_child(&self) {
        self.mark_saved();
        self.state.lock().rechecks.clear();
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

    fn key(b: Backend) -> CorrKey {
        CorrKey::new(
            gemm(),
            Precision::D,
            b,
            LibKey::of("openblas"),
            (1000.0, 1000.0),
        )
    }

    #[test]
    fn key_text_round_trip_and_shape_buckets() {
        for k in OpKind::all() {
            for b in [Backend::Cpu, Backend::Gpu] {
                let key = CorrKey::new(k, Precision::Z, b, LibKey::of("mkl"), (3000.0, 7.0));
                assert_eq!(CorrKey::parse(&key.text()), Some(key), "{}", key.text());
            }
        }
        assert_eq!(
            key(Backend::Cpu).text(),
            "gemm/d/cpu/openblas/20/20".to_string()
        );
        assert_eq!(key(Backend::Gpu).text(), "gemm/d/gpu/-/20/20".to_string());
        assert_eq!(CorrKey::parse("gemm/d/tpu/-/3/4"), None);
        assert_eq!(CorrKey::parse("gemm/d/cpu/openblas/3/4/5"), None);
        assert_eq!(
            CorrKey::parse("gemm/d/cpu/34"),
            None,
            "old flop-bucket keys"
        );
        // equal flops, different shapes: different keys
        let a = CorrKey::new(
            gemm(),
            Precision::D,
            Backend::Gpu,
            LibKey::NONE,
            (4096.0, 64.0),
        );
        let b = CorrKey::new(
            gemm(),
            Precision::D,
            Backend::Gpu,
            LibKey::NONE,
            (1024.0, 1024.0),
        );
        assert_ne!(a, b);
    }

    #[test]
    fn converges_to_observed_ratio_and_reports_its_changes() {
        let l = Learner::default();
        let k = key(Backend::Gpu);
        let base = 0.010; // model says 10 ms, machine takes 25 ms
        for _ in 0..30 {
            let pred = base * l.factor(k);
            l.observe(k, pred, 0.025);
        }
        assert!((l.factor(k) - 2.5).abs() < 1e-3, "{}", l.factor(k));
        assert!(l.dirty());
        // other keys untouched
        assert_eq!(l.factor(key(Backend::Cpu)), 1.0);
        let learned = l.learned();
        let (before, now) = learned.corrections[&k.text()];
        assert_eq!(before, 1.0);
        assert!((now - 2.5).abs() < 1e-3);
        l.mark_saved();
        assert!(!l.dirty());
        assert!(l.learned().is_empty());
    }

    #[test]
    fn rechecks_one_in_sixteen_per_direction() {
        let l = Learner::default();
        let k = OpKind::plain(Routine::Potrf);
        let f = (3000.0, 1.0);
        let n = (0..64)
            .filter(|_| l.take_recheck(k, Precision::D, f, Backend::Cpu))
            .count();
        assert_eq!(n, 4);
        let n = (0..32)
            .filter(|_| l.take_recheck(k, Precision::D, f, Backend::Gpu))
            .count();
        assert_eq!(n, 2);
    }

    #[test]
    fn cpu_rates_are_learned_per_library_and_shape() {
        let l = Learner::default();
        let (lib, other) = (LibKey::of("mkl"), LibKey::of("openblas"));
        let k = OpKind::plain(Routine::Potrf);
        assert_eq!(l.cpu_known(lib, k, Precision::D, (4000.0, 1.0), 1e10), None);
        // 1e10 flops in 0.5 s: 2e10 flop/s
        l.observe_cpu(lib, k, Precision::D, (4000.0, 1.0), 1e10, 0.5);
        let e = l
            .cpu_known(lib, k, Precision::D, (4000.0, 1.0), 1e10)
            .unwrap();
        assert!(e.exact && (e.seconds - 0.5).abs() < 1e-9, "{e:?}");
        // a neighbouring size borrows the nearest measured rate, marked as not exact
        let e = l
            .cpu_known(lib, k, Precision::D, (8000.0, 1.0), 8e10)
            .unwrap();
        assert!(!e.exact && (e.seconds - 4.0).abs() < 1e-9, "{e:?}");
        // never another library's
        assert_eq!(
            l.cpu_known(other, k, Precision::D, (4000.0, 1.0), 1e10),
            None
        );
        let learned = l.learned();
        assert_eq!(learned.points.len(), 1);
        assert_eq!(learned.points[0].library, "mkl");
        // restored from the profile form
        let m = Learner::from_profile(&BTreeMap::new(), &learned.points);
        assert!(m
            .cpu_known(lib, k, Precision::D, (4000.0, 1.0), 1e10)
            .is_some_and(|e| e.exact && (e.seconds - 0.5).abs() < 1e-6));
        assert!(!m.dirty());
    }

    #[test]
    fn snapshot_restores() {
        let l = Learner::default();
        l.observe(key(Backend::Gpu), 1.0, 4.0);
        let snap = l.snapshot();
        let m = Learner::from_profile(&snap, &[]);
        assert_eq!(m.factor(key(Backend::Gpu)), 2.0);
        assert!(!m.dirty());
    }

    proptest! {
        #[test]
        fn factor_bounded_and_moves_toward_observation(obs in 1e-6f64..1e3, pred in 1e-6f64..1e3, steps in 1usize..50) {
            let l = Learner::default();
            let k = key(Backend::Cpu);
            let mut prev = 1.0f64;
            for _ in 0..steps {
                let p = pred * l.factor(k);
                let target = obs / pred; // the factor that would make predictions exact
                let f = l.observe(k, p, obs);
                prop_assert!((1.0 / LIMIT..=LIMIT).contains(&f));
                let t = target.clamp(1.0 / LIMIT, LIMIT);
                // never overshoots: moves toward the target or stays
                prop_assert!((f.ln() - t.ln()).abs() <= (prev.ln() - t.ln()).abs() + 1e-9);
                prev = f;
            }
        }
    }
}
