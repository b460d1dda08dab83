//! The per-machine profile: calibrated curves (CPU curves per CPU library), copy throughput,
//! GPU start-up cost by phase, and what processes learned (corrections, measured CPU rates), as
//! versioned JSON.
//!
//! Lookup order: the path in `GPUKIT_OFFLOAD_PROFILE`, else `<config dir>/gpukit/offload-profile.json`
//! (`~/.config/gpukit/offload-profile.json` on Linux). A missing file means the embedded default
//! (calibrated on the project's H200 host) is used; a file that cannot be read or parsed is a
//! clear [`Error::Profile`] and the embedded default is used as well (the file is left as it is).
//!
//! **Where writes go.** `offload calibrate` writes a whole profile ([`Profile::save`]). A process
//! writes what it learned only into a profile *file that exists* ([`merge_learned`]): with the
//! embedded default (no file, or a path that names no file) nothing is written anywhere. The
//! write happens under a file lock (`<profile>.lock`), re-reads the file, and merges: a
//! correction moves by this process's own change, measured CPU rates are averaged by count, and
//! every other field, including ones this version does not know, is kept as it is on disk. If
//! the file was recalibrated since the process loaded it, the process's corrections (learned
//! against the old curves) are dropped and only its measurements are merged.
//!
//! **Another machine's profile.** The profile records the machine it was measured on. A profile
//! from another CPU is reported ([`Profile::foreign`]) and its CPU curves are not trusted: the
//! dispatcher learns CPU times from the process's own calls instead.

use crate::error::{Error, Result};
use crate::learn::{CorrKey, CpuPoint};
use crate::library::{LibKey, Library};
use crate::model::{Backend, CopyModel, Curve, Model, Startup};
use crate::ops::{OpKind, Precision};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The profile format version this crate reads and writes.
pub const PROFILE_VERSION: u32 = 1;

/// The environment variable that names the profile file.
pub const PROFILE_ENV: &str = "GPUKIT_OFFLOAD_PROFILE";

const EMBEDDED: &str = include_str!("../profiles/default.json");

/// Where a profile was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model and thread count (see [`Machine::local_cpu`]).
    pub cpu: String,
    /// GPU name ("" when none).
    pub gpu: String,
    /// The CPU library of curves without a `library` field (profiles of one library).
    pub cpu_library: String,
    /// Fields this version does not know (kept when the file is rewritten).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

impl Machine {
    /// This machine's CPU: model name and thread count, as `calibrate` records it.
    pub fn local_cpu() -> String {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        format!("{model} ({cores} threads)")
    }
}

/// One calibrated curve in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveEntry {
    /// [`OpKind::key`] (`gemm`, `syevd+v`, `gesdd+a`).
    pub op: String,
    /// Precision.
    pub precision: Precision,
    /// Backend.
    pub backend: Backend,
    /// For CPU curves: the library's key ([`Library::key`]); absent in one-library profiles,
    /// where `machine.cpu_library` names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// The grid and its times.
    #[serde(flatten)]
    pub curve: Curve,
}

/// A CPU library `calibrate` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibraryEntry {
    /// Its curve key.
    pub key: String,
    /// The file measured.
    pub path: String,
}

/// The whole profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Format version ([`PROFILE_VERSION`]).
    pub version: u32,
    /// Where it was measured.
    pub machine: Machine,
    /// Unix time of the calibration.
    pub created_unix: u64,
    /// Seconds the calibration took.
    #[serde(default)]
    pub calibration_s: f64,
    /// Seconds to start the GPU backend (context, cuBLAS, first lane).
    pub startup_s: f64,
    /// Seconds to load cuSOLVER (library and first handle) once a LAPACK call comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solver_startup_s: Option<f64>,
    /// Copy throughput through pinned staging.
    pub copy: CopyModel,
    /// The CPU libraries measured (their curves carry their keys).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libraries: Vec<LibraryEntry>,
    /// The calibrated curves.
    pub curves: Vec<CurveEntry>,
    /// Learned correction factors, keyed by [`CorrKey::text`].
    #[serde(default)]
    pub corrections: BTreeMap<String, f64>,
    /// Measured CPU rates by library and shape (see [`crate::learn`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_points: Vec<CpuPoint>,
    /// Fields this version does not know (kept when the file is rewritten).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

impl Profile {
    /// The profile compiled into the crate (checked by a unit test; should it ever fail to
    /// parse, an empty one: every call stays on the CPU).
    pub fn embedded() -> Profile {
        Profile::parse(EMBEDDED).unwrap_or_else(|_| Profile::empty())
    }

    /// A profile without curves (every call stays on the CPU).
    pub fn empty() -> Profile {
        Profile {
            version: PROFILE_VERSION,
            machine: Machine::default(),
            created_unix: 0,
            calibration_s: 0.0,
            startup_s: 1.0,
            solver_startup_s: None,
            copy: CopyModel {
                h2d_bytes_per_s: 1e10,
                d2h_bytes_per_s: 1e10,
                latency_s: 1e-4,
            },
            libraries: Vec::new(),
            curves: Vec::new(),
            corrections: BTreeMap::new(),
            cpu_points: Vec::new(),
            extra: Default::default(),
        }
    }

    /// Parses and validates profile JSON.
    pub fn parse(text: &str) -> std::result::Result<Profile, String> {
        let p: Profile =
            serde_json::from_str(text).map_err(|e| format!("not a valid profile: {e}"))?;
        if p.version != PROFILE_VERSION {
            return Err(format!(
                "profile version {} is not supported (this build reads version {PROFILE_VERSION}); run `offload calibrate` again",
                p.version
            ));
        }
        p.validate()?;
        Ok(p)
    }

    /// Checks every curve and figure.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let pos = |x: f64| x.is_finite() && x > 0.0;
        if !pos(self.copy.h2d_bytes_per_s) || !pos(self.copy.d2h_bytes_per_s) {
            return Err("copy throughput must be positive".into());
        }
        if !(self.copy.latency_s.is_finite() && self.copy.latency_s >= 0.0) {
            return Err("copy latency must be >= 0".into());
        }
        if !(self.startup_s.is_finite() && self.startup_s >= 0.0) {
            return Err("startup_s must be >= 0".into());
        }
        if let Some(s) = self.solver_startup_s {
            if !(s.is_finite() && s >= 0.0) {
                return Err("solver_startup_s must be >= 0".into());
            }
        }
        for e in &self.curves {
            if OpKind::parse_key(&e.op).is_none() {
                return Err(format!("unknown op {:?}", e.op));
            }
            e.curve.validate().map_err(|m| {
                format!(
                    "curve {}/{}/{}: {m}",
                    e.op,
                    e.precision.letter(),
                    e.backend.as_str()
                )
            })?;
        }
        for (k, v) in &self.corrections {
            if !(v.is_finite() && *v > 0.0) {
                return Err(format!("correction {k} = {v} is not positive"));
            }
        }
        for p in &self.cpu_points {
            if !(p.rate.is_finite() && p.rate > 0.0) {
                return Err(format!("cpu point {p:?} has a non-positive rate"));
            }
        }
        Ok(())
    }

    /// Reads a profile file.
    pub fn load(path: &Path) -> Result<Profile> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Profile {
            path: path.to_path_buf(),
            msg: format!("cannot read: {e}"),
        })?;
        Profile::parse(&text).map_err(|msg| Error::Profile {
            path: path.to_path_buf(),
            msg,
        })
    }

    /// Writes the whole profile (calibration), under the file lock, atomically (temporary file
    /// and rename), creating the directory; fields of an existing file this version does not
    /// know are carried over.
    pub fn save(&self, path: &Path) -> Result<()> {
        let err = |msg: String| Error::Profile {
            path: path.to_path_buf(),
            msg,
        };
        self.validate()
            .map_err(|m| err(format!("refusing to write an invalid profile: {m}")))?;
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| err(format!("cannot create directory: {e}")))?;
            }
        }
        let _lock = lock(path, SAVE_LOCK_WAIT)?;
        let mut out = self.clone();
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(Value::Object(old)) = serde_json::from_str::<Value>(&text) {
                let known = serde_json::to_value(Profile::empty())
                    .ok()
                    .and_then(|v| v.as_object().cloned())
                    .unwrap_or_default();
                for (k, v) in old {
                    if !known.contains_key(&k)
                        && !["solver_startup_s", "libraries", "cpu_points"].contains(&k.as_str())
                    {
                        out.extra.entry(k).or_insert(v);
                    }
                }
            }
        }
        let text = serde_json::to_string_pretty(&out).map_err(|e| err(e.to_string()))?;
        write_atomic(path, &text).map_err(err)
    }

    /// The profile path: `GPUKIT_OFFLOAD_PROFILE`, else the user's config directory.
    pub fn default_path() -> Option<PathBuf> {
        match std::env::var_os(PROFILE_ENV) {
            Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => dirs::config_dir().map(|d| d.join("gpukit").join("offload-profile.json")),
        }
    }

    /// Loads the profile from [`Profile::default_path`]. Returns the profile to use, where it came
    /// from (`None`: embedded) and the error that made it fall back to the embedded one, if any.
    pub fn resolve() -> (Profile, Option<PathBuf>, Option<Error>) {
        match Profile::default_path() {
            Some(path) if path.is_file() => match Profile::load(&path) {
                Ok(p) => (p, Some(path), None),
                Err(e) => (Profile::embedded(), None, Some(e)),
            },
            _ => (Profile::embedded(), None, None),
        }
    }

    /// Why this profile's CPU figures are not this machine's, if they are not: it was measured
    /// on another CPU.
    pub fn foreign(&self) -> Option<String> {
        let here = Machine::local_cpu();
        (self.machine.cpu != here).then(|| {
            format!(
                "the profile was measured on {} ({}), this machine is {here}",
                self.machine.cpu,
                if self.machine.gpu.is_empty() {
                    "no GPU"
                } else {
                    self.machine.gpu.as_str()
                }
            )
        })
    }

    /// The library key of a CPU curve entry.
    fn library_of(&self, e: &CurveEntry) -> LibKey {
        match &e.library {
            Some(k) => LibKey::of(k),
            None => LibKey::of(&Library::at(&self.machine.cpu_library).key),
        }
    }

    /// The cost model of this profile (corrections are applied separately by the learner).
    /// Without `trust_cpu` (a foreign profile) the CPU curves are left out.
    pub fn model(&self, trust_cpu: bool) -> Model {
        let mut cpu = Vec::new();
        let mut gpu = Vec::new();
        for e in &self.curves {
            let Some(kind) = OpKind::parse_key(&e.op) else {
                continue;
            };
            match e.backend {
                Backend::Cpu if trust_cpu => {
                    cpu.push(((self.library_of(e), kind, e.precision), e.curve.clone()))
                }
                Backend::Cpu => {}
                Backend::Gpu => gpu.push(((kind, e.precision), e.curve.clone())),
            }
        }
        Model::new(
            cpu,
            gpu,
            self.copy,
            Startup {
                start_s: self.startup_s,
                solver_s: self.solver_startup_s.unwrap_or(0.3),
            },
        )
    }
}

/// How long [`Profile::save`] (a calibration's result) waits for the profile's lock.
pub const SAVE_LOCK_WAIT: Duration = Duration::from_secs(60);
/// How long [`merge_learned`] (a process's exit) waits for the profile's lock: a process must
/// never hang at exit because another one holds the file (a stopped process, a network file
/// system); what it learned is then not saved, and it says so.
pub const MERGE_LOCK_WAIT: Duration = Duration::from_secs(2);

/// Takes the profile's write lock (`<profile>.lock`, flock), held until the returned file is
/// dropped; gives up after `wait` with an error naming the lock file.
fn lock(path: &Path, wait: Duration) -> Result<std::fs::File> {
    let lp = path.with_extension("json.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lp)
        .map_err(|e| Error::Io {
            what: format!("opening the profile lock {}", lp.display()),
            source: e,
        })?;
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(1);
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Profile {
                    path: path.to_path_buf(),
                    msg: format!(
                        "another process held the lock {} for {:.1}s; not written",
                        lp.display(),
                        wait.as_secs_f64()
                    ),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::Io {
                    what: format!("locking {}", lp.display()),
                    source: e,
                })
            }
        }
    }
}

fn write_atomic(path: &Path, text: &str) -> std::result::Result<(), String> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write: {e}"))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot replace: {e}")
    })
}

/// What one process learned, for [`merge_learned`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Learned {
    /// Corrections this process changed: key text -> (factor when loaded, factor now).
    pub corrections: BTreeMap<String, (f64, f64)>,
    /// CPU rates this process measured (its own observations only).
    pub points: Vec<CpuPoint>,
}

impl Learned {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.corrections.is_empty() && self.points.is_empty()
    }
}

/// Merges a process's learning into the profile file at `path` (see the module docs). Writes
/// nothing when the file does not exist or does not hold a valid profile (a corrupt file is left
/// for the user to see); returns whether it wrote.
pub fn merge_learned(path: &Path, loaded_created_unix: u64, learned: &Learned) -> Result<bool> {
    if learned.is_empty() || !path.is_file() {
        return Ok(false);
    }
    let err = |msg: String| Error::Profile {
        path: path.to_path_buf(),
        msg,
    };
    let _lock = lock(path, MERGE_LOCK_WAIT)?;
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    if Profile::parse(&text).is_err() {
        return Ok(false);
    }
    let mut doc: Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    let obj = doc
        .as_object_mut()
        .ok_or_else(|| err("not a JSON object".into()))?;
    let recalibrated =
        obj.get("created_unix").and_then(|v| v.as_u64()) != Some(loaded_created_unix);
    if !recalibrated {
        let corr = obj
            .entry("corrections")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(map) = corr.as_object_mut() {
            for (k, (before, now)) in &learned.corrections {
                let disk = map.get(k).and_then(|v| v.as_f64()).unwrap_or(*before);
                let v = (disk * now / before.max(1e-300))
                    .clamp(1.0 / crate::learn::LIMIT, crate::learn::LIMIT);
                map.insert(k.clone(), Value::from(v));
            }
        }
    }
    let mut points: Vec<CpuPoint> = obj
        .get("cpu_points")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    for p in &learned.points {
        match points.iter_mut().find(|q| q.same_place(p)) {
            Some(q) => q.absorb(p),
            None => points.push(p.clone()),
        }
    }
    obj.insert(
        "cpu_points".into(),
        serde_json::to_value(&points).map_err(|e| err(e.to_string()))?,
    );
    let text = serde_json::to_string_pretty(&doc).map_err(|e| err(e.to_string()))?;
    Profile::parse(&text).map_err(|m| err(format!("refusing to write an invalid profile: {m}")))?;
    write_atomic(path, &text).map_err(err)?;
    Ok(true)
}

/// Corrections of a profile that parse as [`CorrKey`]s (others are left in the file, unused).
pub fn parse_corrections(map: &BTreeMap<String, f64>) -> Vec<(CorrKey, f64)> {
    map.iter()
        .filter_map(|(k, v)| Some((CorrKey::parse(k)?, *v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded profile has GPU curves for every kind and precision, and CPU curves for
    /// every kind and precision of the libraries numpy and scipy call (the system OpenBLAS's
    /// curves predate the newer routines: those are learned at run time).
    #[test]
    fn embedded_profile_is_valid_and_complete() {
        let p = Profile::parse(EMBEDDED).expect("the embedded profile parses");
        assert!(p.foreign().is_some() || p.machine.gpu == "NVIDIA H200");
        let m = p.model(true);
        let libs = [
            LibKey::of("scipy_openblas64"),
            LibKey::of("scipy_openblas32"),
        ];
        for lib in libs {
            assert!(m.libraries().contains(&lib), "{}", lib.as_str());
        }
        for kind in OpKind::all() {
            for &prec in kind.routine.precisions() {
                assert!(
                    m.gpu_curve(kind, prec).is_some(),
                    "no GPU curve for {kind} {prec:?}"
                );
                for lib in libs {
                    let c = m.cpu_curve(lib, kind, prec);
                    assert!(
                        c.is_some_and(|c| c.x1.len() >= 2),
                        "no CPU curve for {kind} {prec:?} on {}",
                        lib.as_str()
                    );
                }
            }
        }
    }

    #[test]
    fn save_load_round_trip_keeps_unknown_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("p.json");
        let mut p = Profile::embedded();
        p.corrections.insert("gemm/d/gpu/-/20/20".into(), 1.25);
        p.extra.insert("note".into(), Value::from("kept"));
        p.machine
            .extra
            .insert("owner".into(), Value::from("someone"));
        p.save(&path).unwrap();
        let q = Profile::load(&path).unwrap();
        assert_eq!(p, q);
        // a recalibration keeps a top-level field it does not know
        let mut r = Profile::embedded();
        r.created_unix += 1;
        r.save(&path).unwrap();
        let s = Profile::load(&path).unwrap();
        assert_eq!(s.extra.get("note"), Some(&Value::from("kept")));
    }

    #[test]
    fn corrupt_profile_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(&path, "{ this is not json").unwrap();
        let e = Profile::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("p.json") && e.contains("not a valid profile"),
            "{e}"
        );

        let mut p = Profile::embedded();
        p.version = 99;
        std::fs::write(&path, serde_json::to_string(&p).unwrap()).unwrap();
        let e = Profile::load(&path).unwrap_err().to_string();
        assert!(e.contains("version 99"), "{e}");

        let mut p = Profile::embedded();
        p.curves[0].curve.seconds[0] = -1.0;
        std::fs::write(&path, serde_json::to_string(&p).unwrap()).unwrap();
        let e = Profile::load(&path).unwrap_err().to_string();
        assert!(e.contains("non-positive"), "{e}");
        // an invalid profile is never written
        assert!(p.save(&path).is_err());
        // and learning is never merged into a corrupt file
        std::fs::write(&path, "{ this is not json").unwrap();
        let mut l = Learned::default();
        l.corrections
            .insert("gemm/d/gpu/-/20/20".into(), (1.0, 2.0));
        assert!(!merge_learned(&path, 0, &l).unwrap());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{ this is not json"
        );
    }

    #[test]
    fn learning_is_written_only_into_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.json");
        let mut l = Learned::default();
        l.corrections
            .insert("gemm/d/gpu/-/20/20".into(), (1.0, 2.0));
        assert!(!merge_learned(&path, 0, &l).unwrap());
        assert!(!path.exists());
        assert!(!dir.path().join("absent.json.lock").exists());
    }

    #[test]
    fn merge_applies_each_process_change_and_keeps_unknown_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let mut p = Profile::embedded();
        p.corrections.insert("gemm/d/gpu/-/20/20".into(), 2.0);
        p.extra.insert("note".into(), Value::from("kept"));
        p.save(&path).unwrap();
        let key = "gemm/d/gpu/-/20/20".to_string();
        // two processes loaded 2.0; one moved it to 4.0, the other to 1.0: both changes apply
        let mut a = Learned::default();
        a.corrections.insert(key.clone(), (2.0, 4.0));
        let mut b = Learned::default();
        b.corrections.insert(key.clone(), (2.0, 1.0));
        assert!(merge_learned(&path, p.created_unix, &a).unwrap());
        assert!(merge_learned(&path, p.created_unix, &b).unwrap());
        let q = Profile::load(&path).unwrap();
        assert!(
            (q.corrections[&key] - 2.0).abs() < 1e-12,
            "{:?}",
            q.corrections
        );
        assert_eq!(q.extra.get("note"), Some(&Value::from("kept")));
        // after a recalibration an old process's corrections are dropped
        let mut r = Profile::embedded();
        r.created_unix = p.created_unix + 10;
        r.save(&path).unwrap();
        assert!(merge_learned(&path, p.created_unix, &a).unwrap());
        let s = Profile::load(&path).unwrap();
        assert!(!s.corrections.contains_key(&key), "{:?}", s.corrections);
    }

    /// A lock another process keeps (a stopped process): the exit merge gives up after its
    /// wait with an error naming the lock, the file unchanged; once released it merges.
    #[test]
    fn a_held_lock_makes_the_merge_give_up_instead_of_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let p = Profile::embedded();
        p.save(&path).unwrap();
        let before = std::fs::read_to_string(&path).unwrap();
        // a second open file description: flock conflicts with it as with another process
        let holder = std::fs::OpenOptions::new()
            .write(true)
            .open(path.with_extension("json.lock"))
            .unwrap();
        holder.lock().unwrap();
        let mut l = Learned::default();
        l.corrections
            .insert("gemm/d/gpu/-/20/20".into(), (1.0, 2.0));
        let e = merge_learned(&path, p.created_unix, &l)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("held the lock") && e.contains("p.json.lock"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
        holder.unlock().unwrap();
        assert!(merge_learned(&path, p.created_unix, &l).unwrap());
    }
}
