//! Which CPU BLAS/LAPACK library a call runs on.
//!
//! numpy calls the OpenBLAS it bundles (`libscipy_openblas64_`, ILP64), scipy its own
//! (`libscipy_openblas`, LP64), other programs the system OpenBLAS, MKL or the reference
//! LAPACK; their speeds differ by several times on one machine, so the cost model keeps CPU
//! curves per library. A library is identified by its file (the object that defines the function
//! a call would run: `dladdr` of the symbol) and classified into a [`Family`]; the family's
//! [`Library::key`] names its curves in the profile.
//!
//! Libraries are interned in a process-wide registry (a fixed array: a process loads a handful)
//! so a call carries a 2-byte [`LibId`] and reading it never locks.

use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::OnceLock;

/// What a library is, as far as the cost model cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// numpy's bundled OpenBLAS (`libscipy_openblas64_`, ILP64 `scipy_…_64_` names).
    NumpyOpenblas,
    /// scipy's bundled OpenBLAS (`libscipy_openblas`, LP64 `scipy_…_` names).
    ScipyOpenblas,
    /// A system OpenBLAS (`libopenblas.so.0`, also when reached through `liblapack.so.3`).
    Openblas,
    /// Intel MKL.
    Mkl,
    /// The reference (netlib) BLAS/LAPACK.
    Reference,
    /// gpukit-offload's embedded pure-Rust backend ([`crate::embedded`]).
    Embedded,
    /// Anything else (its key is the file name).
    Other,
}

impl Family {
    /// Classifies a library by its (resolved) path.
    pub fn of_path(path: &str) -> Family {
        let name = Path::new(path)
            .file_name()
            .map(|s| s.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        let full = path.to_ascii_lowercase();
        if name.contains("scipy_openblas64") {
            Family::NumpyOpenblas
        } else if name.contains("scipy_openblas") {
            Family::ScipyOpenblas
        } else if full.contains("openblas") {
            Family::Openblas
        } else if name.contains("mkl") {
            Family::Mkl
        } else if name.starts_with("libblas")
            || name.starts_with("liblapack")
            || name.starts_with("librefblas")
            || name.starts_with("libcblas")
        {
            Family::Reference
        } else {
            Family::Other
        }
    }
}

/// One CPU library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    /// The file (resolved through symbolic links), or `embedded`.
    pub path: String,
    /// The family.
    pub family: Family,
    /// The profile key of its curves: `scipy_openblas64`, `scipy_openblas32`, `openblas`,
    /// `mkl`, `reference`, `embedded`, or the file name without version and wheel hash for
    /// other libraries.
    pub key: String,
}

impl Library {
    /// Describes the library at `path` (resolved through symbolic links when it exists).
    pub fn at(path: &str) -> Library {
        let real = std::fs::canonicalize(path)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.to_string());
        let family = Family::of_path(&real);
        let key = match family {
            Family::NumpyOpenblas => "scipy_openblas64".to_string(),
            Family::ScipyOpenblas => "scipy_openblas32".to_string(),
            Family::Openblas => "openblas".to_string(),
            Family::Mkl => "mkl".to_string(),
            Family::Reference => "reference".to_string(),
            Family::Embedded => EMBEDDED_KEY.to_string(),
            Family::Other => stem_of(&real),
        };
        Library {
            path: real,
            family,
            key,
        }
    }

    /// The embedded backend.
    pub fn embedded() -> Library {
        Library {
            path: EMBEDDED_KEY.to_string(),
            family: Family::Embedded,
            key: EMBEDDED_KEY.to_string(),
        }
    }
}

/// The key (and path) of the embedded backend.
pub const EMBEDDED_KEY: &str = "embedded";

/// `libfoo-1a2b3c4d.so.3.1` -> `libfoo`: the file name without the `.so` suffix, version and a
/// wheel's hash.
fn stem_of(path: &str) -> String {
    let name = Path::new(path)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string());
    let base = name.split(".so").next().unwrap_or(&name);
    match base.rsplit_once('-') {
        Some((head, hash))
            if hash.len() >= 6
                && hash.chars().all(|c| c.is_ascii_hexdigit())
                && !head.is_empty() =>
        {
            head.to_string()
        }
        _ => base.to_string(),
    }
}

/// A library *key* (a family of libraries sharing curves: [`Library::key`]) interned in a
/// process-wide registry, so the model and the learner key on two bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LibKey(pub u16);

static KEYS: [OnceLock<String>; MAX_LIBS] = [const { OnceLock::new() }; MAX_LIBS];

impl LibKey {
    /// No library (a call whose library could not be identified, and GPU-side learning).
    pub const NONE: LibKey = LibKey(u16::MAX);

    /// Interns a key string ([`LibKey::NONE`] for `""` or once the registry is full).
    pub fn of(key: &str) -> LibKey {
        if key.is_empty() {
            return LibKey::NONE;
        }
        for (i, slot) in KEYS.iter().enumerate() {
            if let Some(k) = slot.get() {
                if k == key {
                    return LibKey(i as u16);
                }
                continue;
            }
            let _g = REGISTER.lock();
            match slot.get() {
                Some(k) if k == key => return LibKey(i as u16),
                Some(_) => continue,
                None => {
                    let _ = slot.set(key.to_string());
                    return LibKey(i as u16);
                }
            }
        }
        LibKey::NONE
    }

    /// The key string (`""` for [`LibKey::NONE`]).
    pub fn as_str(self) -> &'static str {
        KEYS.get(self.0 as usize)
            .and_then(|s| s.get())
            .map(|s| s.as_str())
            .unwrap_or("")
    }
}

/// A library in the process-wide registry ([`LibId::UNKNOWN`] when the library could not be
/// identified).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LibId(pub u16);

const MAX_LIBS: usize = 64;
static LIBS: [OnceLock<Library>; MAX_LIBS] = [const { OnceLock::new() }; MAX_LIBS];
/// The interned key of each registered library (`u16::MAX` until registered).
static KEY_OF: [AtomicU16; MAX_LIBS] = [const { AtomicU16::new(u16::MAX) }; MAX_LIBS];
static REGISTER: crate::sync::Lock<()> = crate::sync::Lock::new(());

impl LibId {
    /// No library identified (a call whose real function could not be placed).
    pub const UNKNOWN: LibId = LibId(u16::MAX);

    /// Interns the library at `path` (the same resolved path gives the same id).
    pub fn of_path(path: &str) -> LibId {
        LibId::intern(Library::at(path))
    }

    /// Interns the embedded backend.
    pub fn embedded() -> LibId {
        LibId::intern(Library::embedded())
    }

    /// Interns a library; [`LibId::UNKNOWN`] once the registry is full.
    pub fn intern(lib: Library) -> LibId {
        let key = LibKey::of(&lib.key);
        let _g = REGISTER.lock();
        for (i, slot) in LIBS.iter().enumerate() {
            match slot.get() {
                Some(l) if l.path == lib.path => return LibId(i as u16),
                Some(_) => continue,
                None => {
                    let _ = slot.set(lib);
                    KEY_OF[i].store(key.0, Relaxed);
                    return LibId(i as u16);
                }
            }
        }
        LibId::UNKNOWN
    }

    /// The library (`None` for [`LibId::UNKNOWN`]).
    pub fn get(self) -> Option<&'static Library> {
        LIBS.get(self.0 as usize).and_then(|s| s.get())
    }

    /// Fork handler: the registry lock, held across `fork()` (see [`crate::sync`]).
    pub(crate) fn fork_hold() -> std::sync::MutexGuard<'static, ()> {
        REGISTER.lock()
    }

    /// The library's curve key (`""` when unknown).
    pub fn key(self) -> &'static str {
        self.get().map(|l| l.key.as_str()).unwrap_or("")
    }

    /// The library's interned curve key.
    #[inline]
    pub fn key_id(self) -> LibKey {
        KEY_OF
            .get(self.0 as usize)
            .map(|k| LibKey(k.load(Relaxed)))
            .unwrap_or(LibKey::NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_keys_of_real_library_names() {
        for (path, family, key) in [
            (
                "/venv/lib/python3.12/site-packages/numpy.libs/libscipy_openblas64_-32a4b2a6.so",
                Family::NumpyOpenblas,
                "scipy_openblas64",
            ),
            (
                "/venv/lib/python3.12/site-packages/scipy.libs/libscipy_openblas-6cdc3b4a.so",
                Family::ScipyOpenblas,
                "scipy_openblas32",
            ),
            (
                "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.26.so",
                Family::Openblas,
                "openblas",
            ),
            (
                "/usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so.3",
                Family::Openblas,
                "openblas",
            ),
            (
                "/opt/intel/oneapi/mkl/lib/libmkl_rt.so.2",
                Family::Mkl,
                "mkl",
            ),
            (
                "/usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3.12.0",
                Family::Reference,
                "reference",
            ),
            (
                "/opt/x/libflexiblas-0a1b2c3d.so.3",
                Family::Other,
                "libflexiblas",
            ),
        ] {
            let l = Library::at(path);
            assert_eq!((l.family, l.key.as_str()), (family, key), "{path}");
        }
    }

    #[test]
    fn interning_is_stable() {
        let a = LibId::of_path("/nonexistent/libscipy_openblas64_-abcdef12.so");
        let b = LibId::of_path("/nonexistent/libscipy_openblas64_-abcdef12.so");
        let c = LibId::of_path("/nonexistent/libopenblas.so.0");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.key(), "scipy_openblas64");
        assert_eq!(LibId::UNKNOWN.key(), "");
        assert!(LibId::UNKNOWN.get().is_none());
        assert_eq!(LibId::embedded().key(), "embedded");
        assert_eq!(a.key_id(), LibKey::of("scipy_openblas64"));
        assert_eq!(a.key_id().as_str(), "scipy_openblas64");
        assert_ne!(a.key_id(), c.key_id());
        assert_eq!(LibId::UNKNOWN.key_id(), LibKey::NONE);
    }
}
