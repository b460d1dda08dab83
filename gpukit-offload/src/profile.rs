//! The per-machine profile: calibrated curves, copy throughput, GPU start-up cost and the learned
//! corrections, as versioned JSON.
//!
//! Lookup order: the path in `GPUKIT_OFFLOAD_PROFILE`, else `<config dir>/gpukit/offload-profile.json`
//! (`~/.config/gpukit/offload-profile.json` on Linux). A missing file means the embedded default
//! (calibrated on the project's H200 host) is used; a file that cannot be read or parsed is a
//! clear [`Error::Profile`] and the embedded default is used as well.

use crate::error::{Error, Result};
use crate::model::{Backend, CopyModel, Curve, Model};
use crate::ops::{OpKind, Precision};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The profile format version this crate reads and writes.
pub const PROFILE_VERSION: u32 = 1;

/// The environment variable that names the profile file.
pub const PROFILE_ENV: &str = "GPUKIT_OFFLOAD_PROFILE";

const EMBEDDED: &str = include_str!("../profiles/default.json");

/// Where a profile was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model and core count.
    pub cpu: String,
    /// GPU name ("" when none).
    pub gpu: String,
    /// The CPU BLAS/LAPACK library measured.
    pub cpu_library: String,
}

/// One calibrated curve in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveEntry {
    /// [`OpKind::key`] (`gemm`, `syevd+v`).
    pub op: String,
    /// Precision.
    pub precision: Precision,
    /// Backend.
    pub backend: Backend,
    /// The grid and its times.
    #[serde(flatten)]
    pub curve: Curve,
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
    /// Seconds to start the GPU backend.
    pub startup_s: f64,
    /// Copy throughput through pinned staging.
    pub copy: CopyModel,
    /// The calibrated curves.
    pub curves: Vec<CurveEntry>,
    /// Learned correction factors, keyed `op/precision/backend/bucket` (see [`crate::learn`]).
    #[serde(default)]
    pub corrections: BTreeMap<String, f64>,
}

impl Profile {
    /// The profile compiled into the crate.
    pub fn embedded() -> Profile {
        // The embedded file is checked by a unit test; a broken one would fail the build's tests.
        Profile::parse(EMBEDDED)
            .unwrap_or_else(|e| panic!("embedded offload profile is invalid: {e}"))
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

    /// Writes the profile atomically (temporary file and rename), creating the directory.
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
        let text = serde_json::to_string_pretty(self).map_err(|e| err(e.to_string()))?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, text).map_err(|e| err(format!("cannot write: {e}")))?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(format!("cannot replace: {e}"))
        })
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
            Some(path) if path.exists() => match Profile::load(&path) {
                Ok(p) => (p, Some(path), None),
                Err(e) => (Profile::embedded(), None, Some(e)),
            },
            _ => (Profile::embedded(), None, None),
        }
    }

    /// The cost model of this profile (corrections are applied separately by the learner).
    pub fn model(&self) -> Model {
        let mut curves = HashMap::new();
        for e in &self.curves {
            if let Some(kind) = OpKind::parse_key(&e.op) {
                curves.insert((kind, e.precision, e.backend), e.curve.clone());
            }
        }
        Model::new(curves, self.copy, self.startup_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kinds added after the embedded profile's calibration (measured by the next `calibrate`
    /// on the GPU host; until then the dispatcher keeps them on the CPU for want of a curve).
    const NOT_YET_CALIBRATED: [&str; 12] = [
        "hemm", "herk", "trmm", "getri", "potri", "trtrs", "syevr", "syevr+v", "gelsd", "orgqr",
        "gesdd+a", "gesvd+a",
    ];

    #[test]
    fn embedded_profile_is_valid_and_complete() {
        let p = Profile::embedded();
        let m = p.model();
        for kind in OpKind::all() {
            if NOT_YET_CALIBRATED.contains(&kind.key().as_str()) {
                continue;
            }
            for &prec in kind.routine.precisions() {
                for b in [Backend::Cpu, Backend::Gpu] {
                    assert!(
                        m.curve(kind, prec, b).is_some(),
                        "no curve for {kind} {prec:?} {b:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn save_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("p.json");
        let mut p = Profile::embedded();
        p.corrections.insert("gemm/d/gpu/30".into(), 1.25);
        p.save(&path).unwrap();
        let q = Profile::load(&path).unwrap();
        assert_eq!(p, q);
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
    }
}
