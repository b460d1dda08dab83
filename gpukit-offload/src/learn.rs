//! Run-time learning: observed times correct the model.
//!
//! A correction factor multiplies the model's prediction for one `(op kind, precision, backend,
//! size bucket)`, where the bucket is `floor(log2(flops))`. After each timed call the factor moves
//! halfway (in log space) toward `observed / predicted`, clamped to `[1/20, 20]`. Calls the model
//! sends to the GPU are re-checked on the CPU once in [`RECHECK_EVERY`] per bucket while the
//! predicted gain is modest, so a too optimistic GPU estimate is found. The factors are written
//! into the profile (`corrections`) at exit or on request, so they persist across runs.

use crate::model::Backend;
use crate::ops::{OpKind, Precision};
use foldhash::HashMap;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Re-check one GPU-bound call in this many on the CPU (per bucket).
pub const RECHECK_EVERY: u64 = 16;

/// Factors are clamped to `[1/LIMIT, LIMIT]`.
pub const LIMIT: f64 = 20.0;

/// The key of a correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CorrKey {
    /// Op kind.
    pub kind: OpKind,
    /// Precision.
    pub prec: Precision,
    /// Backend whose prediction is corrected.
    pub backend: Backend,
    /// `floor(log2(flops))`.
    pub bucket: i32,
}

impl CorrKey {
    /// The key for a call of `flops` flops.
    pub fn new(kind: OpKind, prec: Precision, backend: Backend, flops: f64) -> CorrKey {
        CorrKey {
            kind,
            prec,
            backend,
            bucket: bucket(flops),
        }
    }

    /// `op/precision/backend/bucket`, e.g. `gemm/d/gpu/34`.
    pub fn text(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.kind.key(),
            self.prec.letter(),
            self.backend.as_str(),
            self.bucket
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
        let bucket = it.next()?.parse().ok()?;
        if it.next().is_some() {
            return None;
        }
        Some(CorrKey {
            kind,
            prec,
            backend,
            bucket,
        })
    }
}

/// `floor(log2(flops))`, at least 0.
pub fn bucket(flops: f64) -> i32 {
    if flops >= 1.0 {
        flops.log2().floor() as i32
    } else {
        0
    }
}

#[derive(Debug, Default)]
struct State {
    factors: HashMap<CorrKey, f64>,
    rechecks: HashMap<(OpKind, Precision, i32), u64>,
    dirty: bool,
}

/// The learned corrections of one process.
#[derive(Debug, Default)]
pub struct Learner {
    state: Mutex<State>,
}

impl Learner {
    /// Starts from the corrections stored in a profile (unparsable keys are ignored).
    pub fn from_map(map: &BTreeMap<String, f64>) -> Learner {
        let factors = map
            .iter()
            .filter_map(|(k, v)| Some((CorrKey::parse(k)?, v.clamp(1.0 / LIMIT, LIMIT))))
            .collect();
        Learner {
            state: Mutex::new(State {
                factors,
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
        st.dirty = true;
        nf
    }

    /// Whether this GPU-bound call should be re-checked on the CPU (one in [`RECHECK_EVERY`] per
    /// bucket; the first call of a bucket is never re-checked).
    pub fn take_recheck(&self, kind: OpKind, prec: Precision, flops: f64) -> bool {
        let mut st = self.state.lock();
        let c = st.rechecks.entry((kind, prec, bucket(flops))).or_insert(0);
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

    /// True when something was learned since the last [`Learner::mark_saved`].
    pub fn dirty(&self) -> bool {
        self.state.lock().dirty
    }

    /// Marks the current factors as persisted.
    pub fn mark_saved(&self) {
        self.state.lock().dirty = false;
    }

    /// Fork handler: takes the lock (released by [`Learner::fork_unlock`]).
    pub(crate) fn fork_lock(&self) {
        std::mem::forget(self.state.lock());
    }

    /// Fork handler: releases the lock [`Learner::fork_lock`] took.
    ///
    /// # Safety
    /// Only after `fork_lock` on this thread (or in the forked child).
    pub(crate) unsafe fn fork_unlock(&self) {
        // SAFETY: forwarded: the lock is held by `fork_lock`'s forgotten guard.
        unsafe { self.state.force_unlock() };
    }

    /// In a forked child: what the parent learned stays, but only what the child learns itself
    /// counts as unsaved.
    pub(crate) fn forked_child(&self) {
        let mut st = self.state.lock();
        st.dirty = false;
        st.rechecks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Routine;
    use proptest::prelude::*;

    fn key(b: Backend) -> CorrKey {
        CorrKey::new(OpKind::plain(Routine::Gemm), Precision::D, b, 1e9)
    }

    #[test]
    fn key_text_round_trip() {
        for k in OpKind::all() {
            let key = CorrKey::new(k, Precision::Z, Backend::Gpu, 3e12);
            assert_eq!(CorrKey::parse(&key.text()), Some(key));
        }
        assert_eq!(CorrKey::parse("gemm/d/tpu/3"), None);
        assert_eq!(CorrKey::parse("gemm/d/cpu/3/4"), None);
        assert_eq!(key(Backend::Cpu).bucket, 29);
    }

    #[test]
    fn converges_to_observed_ratio() {
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
    }

    #[test]
    fn rechecks_one_in_sixteen() {
        let l = Learner::default();
        let k = OpKind::plain(Routine::Potrf);
        let n = (0..64)
            .filter(|_| l.take_recheck(k, Precision::D, 1e10))
            .count();
        assert_eq!(n, 4);
    }

    #[test]
    fn snapshot_restores() {
        let l = Learner::default();
        l.observe(key(Backend::Gpu), 1.0, 4.0);
        let snap = l.snapshot();
        let m = Learner::from_map(&snap);
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
