//! The CPU backend for library users, calibration and the shim's no-library path: a
//! BLAS/LAPACK shared library loaded at run time, called through the routine table of
//! [`crate::ffi`] (each call's arguments filled from the [`Call`], LAPACK workspace sized by a
//! workspace query).
//!
//! Why a system library first: the shim's CPU path is, by definition, the program's own
//! BLAS/LAPACK, so the library path should give the *same* LAPACK semantics (pivoting, info
//! codes, workspace rules, eigenvector signs) and the performance the cost model is calibrated
//! with. OpenBLAS is what numpy, scipy and most distributions ship, multithreaded and tuned per
//! CPU.
//!
//! Search order: `GPUKIT_OFFLOAD_CPU_LIB` (a path; when set it is the only candidate, and a
//! library that cannot be used is an error naming it), `libopenblas.so.0`, `libopenblas.so`,
//! `liblapack.so.3` + `libblas.so.3`, and last the embedded pure-Rust backend
//! ([`crate::embedded`], on faer), which is always there: a machine without any BLAS still runs
//! every routine, several times slower than OpenBLAS on most. [`CpuBackend::describe`] says which
//! one serves. Four symbol conventions are recognised: plain LP64 (`dgemm_`), scipy's LP64 wheel
//! names (`scipy_dgemm_`), numpy's ILP64 wheel names (`scipy_dgemm_64_`) and the OpenBLAS ILP64
//! suffix (`dgemm_64_`); the integer width follows.

use crate::call::Call;
use crate::error::{Error, Result};
use crate::ffi::{for_routine, Marshal, Mode, Store, Visit};
use crate::library::LibId;
use crate::ops::{Precision, Routine};
use crate::stats::{slot, NSLOT};
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

/// The environment variable naming a CPU BLAS/LAPACK library.
pub const CPU_LIB_ENV: &str = "GPUKIT_OFFLOAD_CPU_LIB";

/// The system libraries tried, in order (each set: later files supply symbols the first lacks).
pub const SYSTEM_LIBRARIES: [&[&str]; 3] = [
    &["libopenblas.so.0"],
    &["libopenblas.so"],
    &["liblapack.so.3", "libblas.so.3"],
];

const MISSING: *mut c_void = std::ptr::dangling_mut::<c_void>();

/// A loaded CPU BLAS/LAPACK (or the embedded backend: no handles).
pub struct CpuBackend {
    /// dlopen handles; empty for the embedded backend.
    handles: Vec<*mut c_void>,
    prefix: &'static str,
    suffix: &'static str,
    ilp64: bool,
    path: String,
    lib: LibId,
    /// Resolved symbols per routine and precision (null: not looked up; [`MISSING`]: absent).
    syms: [AtomicPtr<c_void>; NSLOT],
}

// SAFETY: the handles are process-wide dlopen handles, never closed; symbol lookups and calls are
// thread-safe in every BLAS this loads (OpenBLAS / reference LAPACK are reentrant); the symbol
// cache is atomic.
unsafe impl Send for CpuBackend {}
// SAFETY: as above.
unsafe impl Sync for CpuBackend {}

fn dlopen(path: &str) -> std::result::Result<*mut c_void, String> {
    let c = CString::new(path).map_err(|_| "the path contains a NUL byte".to_string())?;
    // SAFETY: `c` is a valid C string; RTLD_NOW|RTLD_LOCAL keeps the library's symbols out of the
    // global scope (so it cannot interpose on the program's own BLAS).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns null or a NUL-terminated message owned by the loader.
        let msg = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "cannot be loaded".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(msg);
    }
    Ok(h)
}

fn dlsym(h: *mut c_void, name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    // SAFETY: `h` is a live handle from dlopen; `c` is a valid C string.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    (!p.is_null()).then_some(p)
}

impl CpuBackend {
    /// Finds a library by the search order above. The error lists what was tried.
    pub fn discover() -> Result<CpuBackend> {
        if let Some(p) = std::env::var_os(CPU_LIB_ENV).filter(|p| !p.is_empty()) {
            let p = p.to_string_lossy().into_owned();
            return CpuBackend::open(&[p.as_str()]).map_err(|e| Error::NoCpuLibrary {
                tried: format!("{CPU_LIB_ENV}={p}: {}", reason_of(&e)),
            });
        }
        for set in SYSTEM_LIBRARIES {
            if let Ok(b) = CpuBackend::open(set) {
                return Ok(b);
            }
        }
        Ok(CpuBackend::embedded())
    }

    /// The system libraries only (no embedded fallback): what [`CpuBackend::discover`] finds
    /// before the embedded backend. The error lists what was tried.
    pub fn system() -> Result<CpuBackend> {
        let mut tried = Vec::new();
        for set in SYSTEM_LIBRARIES {
            match CpuBackend::open(set) {
                Ok(b) => return Ok(b),
                Err(e) => tried.push(format!("{} ({})", set.join(" + "), reason_of(&e))),
            }
        }
        Err(Error::NoCpuLibrary {
            tried: tried.join(", "),
        })
    }

    /// The embedded pure-Rust backend ([`crate::embedded`]; LP64, plain names).
    pub fn embedded() -> CpuBackend {
        CpuBackend {
            handles: Vec::new(),
            prefix: "",
            suffix: "_",
            ilp64: false,
            path: crate::library::EMBEDDED_KEY.to_string(),
            lib: LibId::embedded(),
            syms: [const { AtomicPtr::new(std::ptr::null_mut()) }; NSLOT],
        }
    }

    /// True for the embedded backend.
    pub fn is_embedded(&self) -> bool {
        self.handles.is_empty()
    }

    /// One line saying which library this is: its path, family and integer width.
    pub fn describe(&self) -> String {
        if self.is_embedded() {
            return "embedded pure-Rust backend (faer; no BLAS library found: `apt-get install libopenblas0` is several times faster)".into();
        }
        let fam = self
            .lib
            .get()
            .map(|l| format!("{:?}", l.family))
            .unwrap_or_else(|| "unknown".into());
        format!(
            "{} ({fam}, {})",
            self.path,
            if self.ilp64 { "ILP64" } else { "LP64" }
        )
    }

    /// Opens these libraries (later ones supply symbols the first lacks) and detects the
    /// symbol convention.
    pub fn open(paths: &[&str]) -> Result<CpuBackend> {
        let mut handles = Vec::new();
        for p in paths {
            handles.push(dlopen(p).map_err(|e| Error::NoCpuLibrary {
                tried: format!("{p}: {e}"),
            })?);
        }
        if handles.is_empty() {
            return Err(Error::NoCpuLibrary {
                tried: "no library named".into(),
            });
        }
        for (prefix, suffix, ilp64) in [
            ("", "_", false),
            ("scipy_", "_", false),
            ("scipy_", "_64_", true),
            ("", "_64_", true),
        ] {
            let b = CpuBackend {
                handles: handles.clone(),
                prefix,
                suffix,
                ilp64,
                path: paths.join(" + "),
                lib: LibId::of_path(paths[0]),
                syms: [const { AtomicPtr::new(std::ptr::null_mut()) }; NSLOT],
            };
            if b.lookup("dgemm").is_some() && b.lookup("dgetrf").is_some() {
                return Ok(b);
            }
        }
        Err(Error::NoCpuLibrary {
            tried: format!(
                "{}: no BLAS/LAPACK symbols (dgemm, dgetrf) in any known naming convention",
                paths.join(" + ")
            ),
        })
    }

    /// The library path(s).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The library's identity (the cost model's CPU curves are per library).
    pub fn lib(&self) -> LibId {
        self.lib
    }

    /// True for 64-bit integer (ILP64) libraries.
    pub fn ilp64(&self) -> bool {
        self.ilp64
    }

    fn lookup(&self, name: &str) -> Option<*mut c_void> {
        let full = format!("{}{}{}", self.prefix, name, self.suffix);
        if self.is_embedded() {
            return crate::embedded::symbol(&full).map(|p| p as *mut c_void);
        }
        self.handles.iter().find_map(|h| dlsym(*h, &full))
    }

    /// The library's function for a routine in a precision.
    pub fn symbol(&self, r: Routine, p: Precision) -> Result<*mut c_void> {
        let cell = &self.syms[slot(r, p)];
        let mut f = cell.load(Relaxed);
        if f.is_null() {
            f = self.lookup(&r.name(p)).unwrap_or(MISSING);
            cell.store(f, Relaxed);
        }
        if f == MISSING {
            return Err(Error::MissingSymbol {
                library: self.path.clone(),
                routine: r.name(p),
            });
        }
        Ok(f)
    }

    /// Runs a checked call; returns LAPACK's `info` (0 for BLAS).
    ///
    /// # Safety
    /// Every pointer in `call` must be valid for the extents its dimensions describe, and
    /// [`Call::check`] must have passed.
    pub unsafe fn run(&self, call: &Call) -> Result<i64> {
        let f = self.symbol(call.routine(), call.prec)?;
        // The library runs on at least LIBRARY_STACK bytes of stack: this thread's when that
        // much is left, else a fresh one on the heap for the call. The system OpenBLAS 0.3.21
        // (Debian / Ubuntu, pthreads) crashed inside threaded LU and solve calls (cgesv at
        // n = 24: SIGSEGV in ctrsv_NLU, in half of the runs) from a thread with Rust's default
        // 2 MiB stack, and never with 64 MiB stacks or with one OpenBLAS thread.
        // SAFETY: forwarded from this function's contract; `f` is this library's entry for the
        // call's routine and precision.
        stacker::maybe_grow(LIBRARY_STACK, LIBRARY_STACK, || unsafe {
            self.run_here(call, f)
        })
    }

    /// [`CpuBackend::run`] on the current stack.
    ///
    /// # Safety
    /// As for [`CpuBackend::run`]; `f` is this library's entry for the call's routine.
    unsafe fn run_here(&self, call: &Call, f: *mut c_void) -> Result<i64> {
        for_routine(
            call.routine(),
            RunOn {
                call,
                f,
                ilp64: self.ilp64,
            },
        )
    }
}

/// Stack a CPU-library call gets at least (see [`CpuBackend::run`]).
const LIBRARY_STACK: usize = 16 << 20;

/// The part of a [`Error::NoCpuLibrary`] after "tried".
fn reason_of(e: &Error) -> String {
    match e {
        Error::NoCpuLibrary { tried } => tried.clone(),
        e => e.to_string(),
    }
}

struct RunOn<'a> {
    call: &'a Call,
    f: *mut c_void,
    ilp64: bool,
}

impl Visit for RunOn<'_> {
    type Out = Result<i64>;
    fn visit<A: Marshal>(self) -> Result<i64> {
        // SAFETY: `run`'s contract covers the call's pointers; `f` is the library's function of
        // routine A in the call's precision and convention.
        unsafe {
            if self.ilp64 {
                run_args::<A, i64>(self.call, self.f)
            } else {
                run_args::<A, i32>(self.call, self.f)
            }
        }
    }
}

/// Fills the routine's arguments from the call, runs the workspace query if the routine takes
/// workspace, then the call; returns `info`.
unsafe fn run_args<A: Marshal, I: FInt>(call: &Call, f: *mut c_void) -> Result<i64> {
    let cplx = call.prec.is_complex();
    let mismatch = || {
        Error::arg(
            call.name(),
            "(operation)",
            "the operation does not belong to this routine",
        )
    };
    let mut st = Store::<I>::new(call.prec);
    st.begin(Mode::Query);
    let mut a = A::fill(&call.op, &mut st).ok_or_else(mismatch)?;
    if st.wants_query() {
        // SAFETY: the query touches only the store's query buffers and reads the dimensions.
        unsafe { a.invoke(f, cplx) };
        if st.info_value() != 0 {
            return Ok(st.info_value());
        }
        st.size_from_query();
        st.begin(Mode::Run);
        a = A::fill(&call.op, &mut st).ok_or_else(mismatch)?;
    }
    // SAFETY: the caller's contract for the call's pointers; the store's for everything else.
    unsafe { a.invoke(f, cplx) };
    st.finish();
    Ok(st.info_value())
}

/// A Fortran integer: `i32` (LP64) or `i64` (ILP64). Implemented for those two only.
pub trait FInt: Copy + 'static {
    /// From a size (saturating).
    fn from_usize(x: usize) -> Self;
    /// From an `i64` (saturating).
    fn from_i64(x: i64) -> Self;
    /// To `i64`.
    fn to_i64(self) -> i64;
    /// To a size (negative: 0).
    #[inline]
    fn to_usize(self) -> usize {
        self.to_i64().max(0) as usize
    }
}
impl FInt for i32 {
    #[inline]
    fn from_usize(x: usize) -> i32 {
        x.min(i32::MAX as usize) as i32
    }
    #[inline]
    fn from_i64(x: i64) -> i32 {
        x.clamp(i32::MIN as i64, i32::MAX as i64) as i32
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
}
impl FInt for i64 {
    #[inline]
    fn from_usize(x: usize) -> i64 {
        x.min(i64::MAX as usize) as i64
    }
    #[inline]
    fn from_i64(x: i64) -> i64 {
        x
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self
    }
}
