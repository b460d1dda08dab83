//! `libgpumutex_preload.so`: take the GPU lock lazily at a program's first `cuInit`.
//!
//! ```text
//! cargo build --release --example gpumutex_preload
//! LD_PRELOAD=target/release/examples/libgpumutex_preload.so GPUMUTEX_VISIBLE_DEVICES=0,1 \
//!     python3 -c "import torch; torch.zeros(1).cuda()"
//! ```
//!
//! * Inert (a pure pass-through) unless `GPUMUTEX_VISIBLE_DEVICES` is set.
//! * Interposes `cuInit`, `cuGetProcAddress`, `cuGetProcAddress_v2` and `dlsym`, so the hook
//!   also works when libcuda is `dlopen`ed and reached through `dlsym` or `cuGetProcAddress`,
//!   as the CUDA runtime and PyTorch do. (`dlvsym` is not interposed: this library needs the
//!   real `dlvsym` to find the real `dlsym`.)
//! * The first `cuInit` in the process acquires `GPUMUTEX_NUM_DEVICES` devices (configuration as
//!   in [`gpukit::mutex`], including `GPUMUTEX_TIMEOUT` and `GPUMUTEX_BACKFILL`), sets
//!   `CUDA_VISIBLE_DEVICES` to them, then calls the real `cuInit`. Concurrent first calls from
//!   several threads wait for that one acquisition. The claim is held until the process exits.
//!   Child processes share it (by ancestry), and torchrun-style sibling ranks share one claim
//!   (see the crate docs on job anchors).
//! * It never aborts the host program. A bad configuration prints one message to stderr and
//!   makes every `cuInit` return `CUDA_ERROR_INVALID_VALUE` (1) without calling the driver; a
//!   timeout or an inherited claim that is too small returns `CUDA_ERROR_DEVICE_UNAVAILABLE`
//!   (46); other lock errors (lock directory I/O) return `CUDA_ERROR_OPERATING_SYSTEM` (304).
//!   The program sees an ordinary CUDA initialisation failure.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Write;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use gpukit::mutex::{Error, GpuGuard, GpuMutex, ENV_VISIBLE_DEVICES};

type CuResult = c_int;
const CUDA_SUCCESS: CuResult = 0;
const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
const CUDA_ERROR_DEVICE_UNAVAILABLE: CuResult = 46;
const CUDA_ERROR_OPERATING_SYSTEM: CuResult = 304;

type CuInitFn = unsafe extern "C" fn(c_uint) -> CuResult;
type GetProcFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
type GetProcV2Fn =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_CUINIT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_GETPROC: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_GETPROC_V2: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The outcome of the one acquisition, and the guard kept for the life of the process.
static CLAIM: OnceLock<(CuResult, Option<GpuGuard>)> = OnceLock::new();

fn say(msg: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "gpumutex_preload[{}]: {msg}",
        std::process::id()
    );
}

/// The real `dlsym`, found through `dlvsym` so that our own `dlsym` is skipped.
fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        for ver in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17", c"GLIBC_2.0"] {
            // SAFETY: valid NUL-terminated strings; RTLD_NEXT searches the objects after this one.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), ver.as_ptr()) };
            if !p.is_null() {
                break;
            }
        }
        if p.is_null() {
            return None;
        }
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: `p` is glibc's dlsym, whose signature is DlsymFn.
    Some(unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
}

fn ours() -> [(&'static CStr, *mut c_void, &'static AtomicPtr<c_void>); 3] {
    [
        (c"cuInit", cuInit as *const () as *mut c_void, &REAL_CUINIT),
        (
            c"cuGetProcAddress",
            cuGetProcAddress as *const () as *mut c_void,
            &REAL_GETPROC,
        ),
        (
            c"cuGetProcAddress_v2",
            cuGetProcAddress_v2 as *const () as *mut c_void,
            &REAL_GETPROC_V2,
        ),
    ]
}

/// If `name` is one of the hooked entry points, remembers `real` and returns our wrapper.
fn hook(name: &CStr, real: *mut c_void) -> *mut c_void {
    if real.is_null() {
        return real;
    }
    for (n, wrapper, slot) in ours() {
        if n == name {
            if real != wrapper {
                slot.store(real, Ordering::Release);
            }
            return wrapper;
        }
    }
    real
}

/// Looks `name` up in the library that defines `known` (a real driver entry point we already
/// hold): `dlsym` on that library's handle searches the library itself first, which finds the
/// driver's own definition even where a global lookup would find our interposed wrapper.
fn lookup_beside(known: *mut c_void, name: &CStr, dlsym_real: DlsymFn) -> *mut c_void {
    // SAFETY: an all-zero Dl_info is valid; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `known` is a code address returned by the dynamic linker; `info` is valid.
    if unsafe { libc::dladdr(known.cast_const(), &mut info) } == 0 || info.dli_fname.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dli_fname is the NUL-terminated path of a loaded object; RTLD_NOLOAD never loads.
    let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `h` is a valid handle, `name` is NUL-terminated.
    let p = unsafe { dlsym_real(h, name.as_ptr()) };
    // SAFETY: balances the reference taken by dlopen(RTLD_NOLOAD); the object stays loaded.
    unsafe { libc::dlclose(h) };
    p
}

/// The real implementation of `name`: remembered from a `dlsym`/`cuGetProcAddress` result;
/// else found beside another real entry point we know (a dlopen'ed libcuda whose internal
/// references resolve to our wrappers); else the next definition after this library (libcuda
/// linked directly); else libcuda if it is already loaded.
fn resolve(name: &CStr, slot: &AtomicPtr<c_void>, wrapper: *mut c_void) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    let Some(dlsym_real) = real_dlsym() else {
        return std::ptr::null_mut();
    };
    let usable = |p: *mut c_void| !p.is_null() && p != wrapper;
    let mut found = std::ptr::null_mut();
    for (_, _, other) in ours() {
        let known = other.load(Ordering::Acquire);
        if !known.is_null() {
            let p = lookup_beside(known, name, dlsym_real);
            if usable(p) {
                found = p;
                break;
            }
        }
    }
    if !usable(found) {
        // SAFETY: valid handle constant and NUL-terminated name.
        found = unsafe { dlsym_real(libc::RTLD_NEXT, name.as_ptr()) };
    }
    if !usable(found) {
        // SAFETY: RTLD_NOLOAD only returns a handle if libcuda is already loaded.
        let h = unsafe {
            libc::dlopen(
                c"libcuda.so.1".as_ptr(),
                libc::RTLD_LAZY | libc::RTLD_NOLOAD,
            )
        };
        if !h.is_null() {
            // SAFETY: `h` is a valid handle and `name` is NUL-terminated.
            found = unsafe { dlsym_real(h, name.as_ptr()) };
            // SAFETY: balances the dlopen above.
            unsafe { libc::dlclose(h) };
        }
    }
    if !usable(found) {
        return std::ptr::null_mut();
    }
    slot.store(found, Ordering::Release);
    found
}

fn acquire_once() -> CuResult {
    CLAIM
        .get_or_init(|| {
            if std::env::var_os(ENV_VISIBLE_DEVICES).is_none() {
                return (CUDA_SUCCESS, None);
            }
            let mutex = match GpuMutex::from_env() {
                Ok(m) => m,
                Err(e) => {
                    say(&format!(
                        "bad configuration: {e}; cuInit fails with CUDA_ERROR_INVALID_VALUE"
                    ));
                    return (CUDA_ERROR_INVALID_VALUE, None);
                }
            };
            match mutex.lock() {
                Ok(g) => {
                    let v = std::ffi::CString::new(g.cuda_visible_devices()).unwrap_or_default();
                    // SAFETY: both strings are NUL-terminated. setenv is not thread-safe against
                    // concurrent getenv; this runs before the real cuInit (which reads it) and the
                    // seed does the same. Other threads calling cuInit wait on the OnceLock.
                    unsafe { libc::setenv(c"CUDA_VISIBLE_DEVICES".as_ptr(), v.as_ptr(), 1) };
                    (CUDA_SUCCESS, Some(g))
                }
                Err(
                    e @ (Error::Timeout { .. }
                    | Error::Cancelled
                    | Error::InheritedClaimTooSmall { .. }),
                ) => {
                    say(&format!(
                        "{e}; cuInit fails with CUDA_ERROR_DEVICE_UNAVAILABLE"
                    ));
                    (CUDA_ERROR_DEVICE_UNAVAILABLE, None)
                }
                Err(e) if e.is_config_error() => {
                    say(&format!(
                        "bad configuration: {e}; cuInit fails with CUDA_ERROR_INVALID_VALUE"
                    ));
                    (CUDA_ERROR_INVALID_VALUE, None)
                }
                Err(e) => {
                    say(&format!(
                        "{e}; cuInit fails with CUDA_ERROR_OPERATING_SYSTEM"
                    ));
                    (CUDA_ERROR_OPERATING_SYSTEM, None)
                }
            }
        })
        .0
}

/// Hooked `cuInit`: acquires the devices once, then calls the real `cuInit`.
///
/// # Safety
/// Same contract as the CUDA driver's `cuInit`.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CuResult {
    let r = std::panic::catch_unwind(acquire_once).unwrap_or(CUDA_ERROR_OPERATING_SYSTEM);
    if r != CUDA_SUCCESS {
        return r;
    }
    let p = resolve(c"cuInit", &REAL_CUINIT, cuInit as *const () as *mut c_void);
    if p.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: `p` is the driver's cuInit (never our wrapper), whose signature is CuInitFn.
    let real = unsafe { std::mem::transmute::<*mut c_void, CuInitFn>(p) };
    // SAFETY: forwarding the caller's arguments under the caller's contract.
    unsafe { real(flags) }
}

/// Hooked `cuGetProcAddress` (CUDA 11.3+): hands out our wrappers for hooked entry points.
///
/// # Safety
/// Same contract as the CUDA driver's `cuGetProcAddress`.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CuResult {
    let p = resolve(
        c"cuGetProcAddress",
        &REAL_GETPROC,
        cuGetProcAddress as *const () as *mut c_void,
    );
    if p.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: `p` is the driver's cuGetProcAddress, whose signature is GetProcFn.
    let real = unsafe { std::mem::transmute::<*mut c_void, GetProcFn>(p) };
    // SAFETY: forwarding the caller's arguments under the caller's contract.
    let r = unsafe { real(symbol, pfn, cuda_version, flags) };
    if r == CUDA_SUCCESS && !symbol.is_null() && !pfn.is_null() {
        // SAFETY: on success the driver wrote a function pointer to `*pfn`; `symbol` is the
        // caller's NUL-terminated name.
        unsafe { *pfn = hook(CStr::from_ptr(symbol), *pfn) };
    }
    r
}

/// Hooked `cuGetProcAddress_v2` (CUDA 12+).
///
/// # Safety
/// Same contract as the CUDA driver's `cuGetProcAddress_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> CuResult {
    let p = resolve(
        c"cuGetProcAddress_v2",
        &REAL_GETPROC_V2,
        cuGetProcAddress_v2 as *const () as *mut c_void,
    );
    if p.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: `p` is the driver's cuGetProcAddress_v2, whose signature is GetProcV2Fn.
    let real = unsafe { std::mem::transmute::<*mut c_void, GetProcV2Fn>(p) };
    // SAFETY: forwarding the caller's arguments under the caller's contract.
    let r = unsafe { real(symbol, pfn, cuda_version, flags, symbol_status) };
    if r == CUDA_SUCCESS && !symbol.is_null() && !pfn.is_null() {
        // SAFETY: as in cuGetProcAddress.
        unsafe { *pfn = hook(CStr::from_ptr(symbol), *pfn) };
    }
    r
}

/// Hooked `dlsym`: forwards to the real one and substitutes our wrappers for the hooked CUDA
/// entry points (so `dlopen("libcuda.so.1")` + `dlsym(h, "cuInit")` reaches us).
///
/// # Safety
/// Same contract as `dlsym(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarding the caller's arguments under the caller's contract.
    let p = unsafe { real(handle, name) };
    if p.is_null() || name.is_null() {
        return p;
    }
    // SAFETY: `name` is the caller's NUL-terminated symbol name (dlsym's contract).
    let cname = unsafe { CStr::from_ptr(name) };
    // Cheap filter: everything that is not a CUDA driver symbol passes straight through.
    if !cname.to_bytes().starts_with(b"cu") {
        return p;
    }
    hook(cname, p)
}
