//! `libgpumutex_preload.so`: take the GPU lock lazily at a program's first `cuInit`.
//!
//! ```text
//! cargo build --release --example gpumutex_preload
//! LD_PRELOAD=target/release/examples/libgpumutex_preload.so GPUMUTEX_VISIBLE_DEVICES=0,1 \
//!     python3 -c "import torch; torch.zeros(1).cuda()"
//! ```
//!
//! * Inert (a pure pass-through) unless `GPUMUTEX_VISIBLE_DEVICES` is set.
//! * Interposes `cuInit`, `cuGetProcAddress`, `cuGetProcAddress_v2`, and the dynamic linker's
//!   `dlsym`, `dlvsym`, `dlopen` and `dlclose`, so the hook also works when libcuda is
//!   `dlopen`ed and reached through `dlsym`/`dlvsym` or `cuGetProcAddress`, as the CUDA runtime
//!   and PyTorch do:
//!   * `dlsym`/`dlvsym` on a library handle return our wrappers for the hooked CUDA entry points
//!     (and remember the real ones). With `RTLD_NEXT` or `RTLD_DEFAULT`, whose meaning depends
//!     on *who calls*, they jump straight into the real function with the caller's own return
//!     address, so other libraries (other interposers, plugins) get exactly what they would get
//!     without this library.
//!   * `dlopen` likewise jumps into the real `dlopen` with the caller's return address (so the
//!     caller's `RUNPATH`, `$ORIGIN` and namespace apply), after noting the name of any libcuda
//!     the program loads: a libcuda loaded privately under an unusual path is then still found.
//!   * `dlclose` forgets remembered entry points of a libcuda that was unloaded (no call into
//!     unmapped code if it is loaded again elsewhere).
//!
//!   The real `dlsym` and friends are found by reading the dynamic symbol tables of the loaded
//!   objects (`dl_iterate_phdr`), since asking `dlsym` would reach this library. The `dl*`
//!   hooks need x86-64 (their entry code is written in assembly to keep the caller's return
//!   address); elsewhere only the CUDA entry points are interposed.
//! * The first `cuInit` acquires `GPUMUTEX_NUM_DEVICES` devices (configuration as in
//!   [`gpukit::mutex`], including `GPUMUTEX_TIMEOUT` and `GPUMUTEX_BACKFILL`), sets
//!   `CUDA_VISIBLE_DEVICES` to them, then calls the real `cuInit`. The claim is held until the
//!   process exits. Child processes share it (by ancestry), and the ranks of torchrun, MPI and
//!   Slurm launchers share one claim (see the crate docs on job anchors). Threads that call
//!   `cuInit` while the first waits wait too and share its claim.
//! * **Signals.** While `cuInit` waits, a signal the program handles (Ctrl-C under Python,
//!   `SIGTERM`, `SIGHUP`, `SIGQUIT`, `SIGALRM`, `SIGUSR1/2` with a handler) ends the wait: the
//!   handler runs, nothing is granted, and `cuInit` returns `CUDA_ERROR_DEVICE_UNAVAILABLE`
//!   (46), which the program sees as a CUDA initialisation error (Python then raises
//!   `KeyboardInterrupt`). A later `cuInit` may wait again.
//! * It never aborts the host program. A bad configuration prints one message to stderr and
//!   makes every `cuInit` return `CUDA_ERROR_INVALID_VALUE` (1) without calling the driver; a
//!   timeout, an interrupted wait or an inherited claim that is too small returns
//!   `CUDA_ERROR_DEVICE_UNAVAILABLE` (46); other lock errors (lock directory I/O, an untrusted
//!   lock directory) return `CUDA_ERROR_OPERATING_SYSTEM` (304) or, for configuration,
//!   `CUDA_ERROR_INVALID_VALUE`.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Write;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

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

static REAL_CUINIT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_GETPROC: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_GETPROC_V2: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

fn say(msg: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "gpumutex_preload[{}]: {msg}",
        std::process::id()
    );
}

/// The real dynamic-linker functions, found without calling `dlsym` (which is ours).
mod dl {
    use std::ffi::{c_char, c_int, c_void, CStr};
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
    pub type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
    pub type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

    pub static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    pub static REAL_DLVSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    pub static REAL_DLOPEN: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    pub static REAL_DLCLOSE: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }

    #[repr(C)]
    struct Sym {
        name: u32,
        info: u8,
        other: u8,
        shndx: u16,
        value: u64,
        size: u64,
    }

    const DT_NULL: i64 = 0;
    const DT_HASH: i64 = 4;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_GNU_HASH: i64 = 0x6fff_fef5;
    const DT_VERSYM: i64 = 0x6fff_fff0;
    const STT_FUNC: u8 = 2;

    fn gnu_hash(name: &[u8]) -> u32 {
        name.iter().fold(5381u32, |h, &c| {
            h.wrapping_mul(33).wrapping_add(u32::from(c))
        })
    }

    fn sysv_hash(name: &[u8]) -> u32 {
        let mut h: u32 = 0;
        for &c in name {
            h = (h << 4).wrapping_add(u32::from(c));
            let g = h & 0xf000_0000;
            if g != 0 {
                h ^= g >> 24;
            }
            h &= !g;
        }
        h
    }

    /// The address of function `name` defined in the object at `base` with dynamic section
    /// `dynamic`; a default (non-hidden) version is preferred.
    ///
    /// # Safety
    /// `base` and `dynamic` must describe an object the dynamic linker has loaded.
    unsafe fn lookup(base: usize, dynamic: *const Dyn, name: &CStr) -> Option<usize> {
        let (mut symtab, mut strtab, mut gnu, mut sysv, mut versym) = (0usize, 0, 0, 0, 0);
        let mut d = dynamic;
        for _ in 0..4096 {
            // SAFETY: the dynamic section is an array of entries ending with DT_NULL.
            let e = unsafe { &*d };
            match e.tag {
                DT_NULL => break,
                DT_SYMTAB => symtab = e.val as usize,
                DT_STRTAB => strtab = e.val as usize,
                DT_GNU_HASH => gnu = e.val as usize,
                DT_HASH => sysv = e.val as usize,
                DT_VERSYM => versym = e.val as usize,
                _ => {}
            }
            // SAFETY: still inside the array (DT_NULL not reached yet).
            d = unsafe { d.add(1) };
        }
        // The loader relocates these to absolute addresses on most targets; some objects (the
        // vDSO) keep them relative to the base.
        let fix = |p: usize| if p != 0 && p < base { p + base } else { p };
        let (symtab, strtab, gnu, sysv, versym) =
            (fix(symtab), fix(strtab), fix(gnu), fix(sysv), fix(versym));
        if symtab == 0 || strtab == 0 {
            return None;
        }
        let want = name.to_bytes();
        let mut fallback = None;
        let mut check = |i: u32| -> Option<usize> {
            // SAFETY: `i` is a symbol index taken from the object's own hash table.
            let sym = unsafe { &*(symtab as *const Sym).add(i as usize) };
            if sym.shndx == 0 || sym.value == 0 || sym.info & 0xf != STT_FUNC {
                return None;
            }
            // SAFETY: st_name is an offset into the NUL-terminated string table.
            let n = unsafe { CStr::from_ptr((strtab + sym.name as usize) as *const c_char) };
            if n.to_bytes() != want {
                return None;
            }
            let hidden = versym != 0
                // SAFETY: the version table has one entry per symbol.
                && unsafe { *(versym as *const u16).add(i as usize) } & 0x8000 != 0;
            let addr = base + sym.value as usize;
            if hidden {
                fallback.get_or_insert(addr);
                None
            } else {
                Some(addr)
            }
        };
        if gnu != 0 {
            let hdr = gnu as *const u32;
            // SAFETY: the GNU hash header is four 32-bit words followed by the bloom filter
            // (64-bit words), the buckets and the chains.
            let (nbuckets, symoffset, bloom_size) = unsafe { (*hdr, *hdr.add(1), *hdr.add(2)) };
            if nbuckets == 0 {
                return None;
            }
            let buckets = (gnu + 16 + 8 * bloom_size as usize) as *const u32;
            // SAFETY: as above.
            let chains = unsafe { buckets.add(nbuckets as usize) };
            let h = gnu_hash(want);
            // SAFETY: index below nbuckets.
            let mut i = unsafe { *buckets.add((h % nbuckets) as usize) };
            if i < symoffset {
                return fallback;
            }
            loop {
                // SAFETY: chain entries exist for every symbol from symoffset on; the last one
                // of a bucket has its low bit set.
                let ch = unsafe { *chains.add((i - symoffset) as usize) };
                if ch | 1 == h | 1 {
                    if let Some(a) = check(i) {
                        return Some(a);
                    }
                }
                if ch & 1 != 0 {
                    break;
                }
                i += 1;
            }
        } else if sysv != 0 {
            let hdr = sysv as *const u32;
            // SAFETY: the SysV hash header is nbucket, nchain, then the buckets and chains.
            let (nbucket, nchain) = unsafe { (*hdr, *hdr.add(1)) };
            if nbucket == 0 {
                return None;
            }
            // SAFETY: as above.
            let bucket = unsafe { hdr.add(2) };
            // SAFETY: as above.
            let chain = unsafe { bucket.add(nbucket as usize) };
            // SAFETY: index below nbucket.
            let mut i = unsafe { *bucket.add((sysv_hash(want) % nbucket) as usize) };
            let mut steps = 0;
            while i != 0 && i < nchain && steps < nchain {
                if let Some(a) = check(i) {
                    return Some(a);
                }
                // SAFETY: i < nchain.
                i = unsafe { *chain.add(i as usize) };
                steps += 1;
            }
        }
        fallback
    }

    struct Search<'a> {
        name: &'a CStr,
        /// An address inside this library.
        ours: usize,
        seen_ours: bool,
        after: usize,
        before: usize,
    }

    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Search passed to dl_iterate_phdr by `find`, `info` the
        // loader's description of one loaded object, valid during the callback.
        let (s, info) = unsafe { (&mut *(data as *mut Search), &*info) };
        let base = info.dlpi_addr as usize;
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: the loader provides dlpi_phnum program headers at dlpi_phdr.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let mut dynamic = 0usize;
        for ph in phdrs {
            if ph.p_type == libc::PT_LOAD {
                let lo = base + ph.p_vaddr as usize;
                if (lo..lo + ph.p_memsz as usize).contains(&s.ours) {
                    s.seen_ours = true;
                    return 0;
                }
            }
            if ph.p_type == libc::PT_DYNAMIC {
                dynamic = base + ph.p_vaddr as usize;
            }
        }
        if dynamic == 0 {
            return 0;
        }
        // SAFETY: base and dynamic section of a loaded object.
        if let Some(addr) = unsafe { lookup(base, dynamic as *const Dyn, s.name) } {
            if s.seen_ours {
                if s.after == 0 {
                    s.after = addr;
                }
            } else if s.before == 0 {
                s.before = addr;
            }
        }
        0
    }

    /// The definition of `name` that follows this library in load order (the one `RTLD_NEXT`
    /// from here would find), else the first one before it.
    fn find(name: &CStr) -> *mut c_void {
        let mut s = Search {
            name,
            ours: find as fn(&CStr) -> *mut c_void as usize,
            seen_ours: false,
            after: 0,
            before: 0,
        };
        // SAFETY: `visit` matches dl_iterate_phdr's callback type and only reads loader data;
        // `s` outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(visit), (&mut s as *mut Search).cast()) };
        let a = if s.after != 0 { s.after } else { s.before };
        a as *mut c_void
    }

    /// Finds the four real functions (once; cheap afterwards). Returns the real `dlsym`.
    pub extern "C" fn init() -> *mut c_void {
        let r = std::panic::catch_unwind(|| {
            for (name, slot) in [
                (c"dlsym", &REAL_DLSYM),
                (c"dlvsym", &REAL_DLVSYM),
                (c"dlopen", &REAL_DLOPEN),
                (c"dlclose", &REAL_DLCLOSE),
            ] {
                if slot.load(Ordering::Acquire).is_null() {
                    slot.store(find(name), Ordering::Release);
                }
            }
        });
        if r.is_err() {
            return std::ptr::null_mut();
        }
        REAL_DLSYM.load(Ordering::Acquire)
    }

    fn get(slot: &AtomicPtr<c_void>) -> *mut c_void {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        init();
        slot.load(Ordering::Acquire)
    }

    pub fn real_dlsym() -> Option<DlsymFn> {
        let p = get(&REAL_DLSYM);
        // SAFETY: `p` is the C library's dlsym, whose signature is DlsymFn.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlsymFn>(p) })
    }

    pub fn real_dlopen() -> Option<DlopenFn> {
        let p = get(&REAL_DLOPEN);
        // SAFETY: the C library's dlopen.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlopenFn>(p) })
    }

    pub fn real_dlclose() -> Option<DlcloseFn> {
        let p = get(&REAL_DLCLOSE);
        // SAFETY: the C library's dlclose.
        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlcloseFn>(p) })
    }

    /// Names under which the program loaded a libcuda (leaked C strings, never freed).
    static NAMES: [AtomicPtr<c_char>; 8] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 8];
    static NAME_COUNT: AtomicUsize = AtomicUsize::new(0);

    /// Remembers `file` if it names a libcuda (its file name starts with `libcuda`).
    pub fn note(file: &CStr) {
        let bytes = file.to_bytes();
        let base = bytes.rsplit(|b| *b == b'/').next().unwrap_or(bytes);
        if !base.starts_with(b"libcuda") || bytes.len() > 4096 {
            return;
        }
        if known_names().iter().any(|n| n.to_bytes() == bytes) {
            return;
        }
        let i = NAME_COUNT.fetch_add(1, Ordering::AcqRel);
        if i < NAMES.len() {
            NAMES[i].store(file.to_owned().into_raw(), Ordering::Release);
        }
    }

    /// The libcuda names noted so far.
    pub fn known_names() -> Vec<&'static CStr> {
        NAMES
            .iter()
            .map(|p| p.load(Ordering::Acquire))
            .filter(|p| !p.is_null())
            // SAFETY: every non-null slot holds a leaked, never-freed CString.
            .map(|p| unsafe { CStr::from_ptr(p) })
            .collect()
    }
}

/// Runs the real-function lookup as early as possible (it also runs on first use).
#[used]
#[link_section = ".init_array"]
static INIT_REAL_DL: extern "C" fn() = init_ctor;

extern "C" fn init_ctor() {
    dl::init();
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
    if real.is_null() || !name.to_bytes().starts_with(b"cu") {
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
fn lookup_beside(known: *mut c_void, name: &CStr, dlsym_real: dl::DlsymFn) -> *mut c_void {
    // SAFETY: an all-zero Dl_info is valid; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `known` is a code address returned by the dynamic linker; `info` is valid.
    if unsafe { libc::dladdr(known.cast_const(), &mut info) } == 0 || info.dli_fname.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dli_fname is the NUL-terminated path of a loaded object.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    in_loaded(path, name, dlsym_real)
}

/// `name` in the already loaded object `lib` (never loads anything).
fn in_loaded(lib: &CStr, name: &CStr, dlsym_real: dl::DlsymFn) -> *mut c_void {
    let (Some(open), Some(close)) = (dl::real_dlopen(), dl::real_dlclose()) else {
        return std::ptr::null_mut();
    };
    // SAFETY: `lib` is NUL-terminated; RTLD_NOLOAD only returns a handle to a loaded object.
    let h = unsafe { open(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `h` is a valid handle, `name` is NUL-terminated.
    let p = unsafe { dlsym_real(h, name.as_ptr()) };
    // SAFETY: balances the reference taken by dlopen(RTLD_NOLOAD); the object stays loaded.
    unsafe { close(h) };
    p
}

/// The real implementation of `name`: remembered from a `dlsym`/`cuGetProcAddress` result;
/// else found beside another real entry point we know (a dlopen'ed libcuda whose internal
/// references resolve to our wrappers); else the next definition after this library (libcuda
/// linked directly); else in a libcuda the program loaded (under a name `dlopen` noted, or as
/// `libcuda.so.1`).
fn resolve(name: &CStr, slot: &AtomicPtr<c_void>, wrapper: *mut c_void) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    let Some(dlsym_real) = dl::real_dlsym() else {
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
        // SAFETY: valid handle constant and NUL-terminated name; called from this library, so
        // RTLD_NEXT means "after this library".
        found = unsafe { dlsym_real(libc::RTLD_NEXT, name.as_ptr()) };
    }
    if !usable(found) {
        for lib in dl::known_names()
            .into_iter()
            .chain(std::iter::once(c"libcuda.so.1"))
        {
            found = in_loaded(lib, name, dlsym_real);
            if usable(found) {
                break;
            }
        }
    }
    if !usable(found) {
        return std::ptr::null_mut();
    }
    slot.store(found, Ordering::Release);
    found
}

/// Forgets remembered entry points whose library is no longer mapped.
fn forget_unmapped() {
    for (_, _, slot) in ours() {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: an all-zero Dl_info is valid for dladdr to fill.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only looks the address up in the loader's tables.
        if unsafe { libc::dladdr(p.cast_const(), &mut info) } == 0 {
            slot.store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

/// The process's claim: the mutex (or the configuration error that made it impossible) and
/// the guards, kept until the process exits.
struct Claim {
    mutex: Option<Result<GpuMutex, CuResult>>,
    guards: Vec<GpuGuard>,
}

static CLAIM: Mutex<Claim> = Mutex::new(Claim {
    mutex: None,
    guards: Vec::new(),
});

fn acquire_once() -> CuResult {
    if std::env::var_os(ENV_VISIBLE_DEVICES).is_none() {
        return CUDA_SUCCESS;
    }
    let mutex = {
        let mut c = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
        if !c.guards.is_empty() {
            return CUDA_SUCCESS;
        }
        match &c.mutex {
            Some(Ok(m)) => m.clone(),
            Some(Err(rc)) => return *rc,
            None => match GpuMutex::builder().interrupt_on_signals(true).build() {
                Ok(m) => {
                    c.mutex = Some(Ok(m.clone()));
                    m
                }
                Err(e) => {
                    let rc = if e.is_config_error() {
                        CUDA_ERROR_INVALID_VALUE
                    } else {
                        CUDA_ERROR_OPERATING_SYSTEM
                    };
                    say(&format!(
                        "bad configuration: {e}; cuInit fails with error {rc}"
                    ));
                    c.mutex = Some(Err(rc));
                    return rc;
                }
            },
        }
    };
    // Waits without holding CLAIM: another thread calling cuInit meanwhile waits too and
    // shares this process's claim once it exists.
    match mutex.lock() {
        Ok(g) => {
            let mut c = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
            if c.guards.is_empty() {
                let v = std::ffi::CString::new(g.cuda_visible_devices()).unwrap_or_default();
                // SAFETY: both strings are NUL-terminated. setenv is not thread-safe against
                // concurrent getenv; this runs before the real cuInit (which reads it), as the
                // seed does.
                unsafe { libc::setenv(c"CUDA_VISIBLE_DEVICES".as_ptr(), v.as_ptr(), 1) };
            }
            c.guards.push(g);
            CUDA_SUCCESS
        }
        Err(e @ Error::Interrupted) => {
            say(&format!(
                "{e}; cuInit fails with CUDA_ERROR_DEVICE_UNAVAILABLE"
            ));
            CUDA_ERROR_DEVICE_UNAVAILABLE
        }
        Err(
            e @ (Error::Timeout { .. } | Error::Cancelled | Error::InheritedClaimTooSmall { .. }),
        ) => {
            say(&format!(
                "{e}; cuInit fails with CUDA_ERROR_DEVICE_UNAVAILABLE"
            ));
            CUDA_ERROR_DEVICE_UNAVAILABLE
        }
        Err(e) if e.is_config_error() => {
            say(&format!(
                "bad configuration: {e}; cuInit fails with CUDA_ERROR_INVALID_VALUE"
            ));
            CUDA_ERROR_INVALID_VALUE
        }
        Err(e) => {
            say(&format!(
                "{e}; cuInit fails with CUDA_ERROR_OPERATING_SYSTEM"
            ));
            CUDA_ERROR_OPERATING_SYSTEM
        }
    }
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
    let p = std::panic::catch_unwind(|| {
        resolve(c"cuInit", &REAL_CUINIT, cuInit as *const () as *mut c_void)
    })
    .unwrap_or(std::ptr::null_mut());
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
    let p = std::panic::catch_unwind(|| {
        resolve(
            c"cuGetProcAddress",
            &REAL_GETPROC,
            cuGetProcAddress as *const () as *mut c_void,
        )
    })
    .unwrap_or(std::ptr::null_mut());
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
    let p = std::panic::catch_unwind(|| {
        resolve(
            c"cuGetProcAddress_v2",
            &REAL_GETPROC_V2,
            cuGetProcAddress_v2 as *const () as *mut c_void,
        )
    })
    .unwrap_or(std::ptr::null_mut());
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

/// The `dl*` hooks, x86-64 only (see the module docs).
#[cfg(target_arch = "x86_64")]
mod dl_hooks {
    use super::{dl, forget_unmapped, hook};
    use std::ffi::{c_char, c_int, c_void, CStr};
    use std::sync::atomic::Ordering;

    type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

    /// `dlsym` for a library handle: the real lookup, then our wrappers for hooked names.
    unsafe extern "C" fn dlsym_on_handle(handle: *mut c_void, name: *const c_char) -> *mut c_void {
        let Some(real) = dl::real_dlsym() else {
            return std::ptr::null_mut();
        };
        // SAFETY: forwarding the caller's arguments under dlsym's contract.
        let p = unsafe { real(handle, name) };
        if p.is_null() || name.is_null() {
            return p;
        }
        // SAFETY: `name` is the caller's NUL-terminated symbol name (dlsym's contract).
        let cname = unsafe { CStr::from_ptr(name) };
        std::panic::catch_unwind(|| hook(cname, p)).unwrap_or(p)
    }

    /// `dlvsym` for a library handle.
    unsafe extern "C" fn dlvsym_on_handle(
        handle: *mut c_void,
        name: *const c_char,
        version: *const c_char,
    ) -> *mut c_void {
        let p = dl::REAL_DLVSYM.load(Ordering::Acquire);
        if p.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: the C library's dlvsym.
        let real = unsafe { std::mem::transmute::<*mut c_void, DlvsymFn>(p) };
        // SAFETY: forwarding the caller's arguments under dlvsym's contract.
        let p = unsafe { real(handle, name, version) };
        if p.is_null() || name.is_null() {
            return p;
        }
        // SAFETY: as in dlsym_on_handle.
        let cname = unsafe { CStr::from_ptr(name) };
        std::panic::catch_unwind(|| hook(cname, p)).unwrap_or(p)
    }

    /// Called by the `dlopen` entry code before it jumps to the real `dlopen`: notes libcuda
    /// names and returns the real `dlopen` (null if it cannot be found).
    unsafe extern "C" fn dlopen_prepare(file: *const c_char) -> *mut c_void {
        if !file.is_null() {
            // SAFETY: `file` is the caller's NUL-terminated path (dlopen's contract).
            let f = unsafe { CStr::from_ptr(file) };
            let _ = std::panic::catch_unwind(|| dl::note(f));
        }
        dl::real_dlopen().map_or(std::ptr::null_mut(), |f| f as *mut c_void)
    }

    extern "C" fn init_all() {
        dl::init();
    }

    /// Hooked `dlsym`. For `RTLD_NEXT` (-1) and `RTLD_DEFAULT` (0) it jumps into the real
    /// `dlsym` with the caller's return address still on the stack, so the C library sees the
    /// real caller; for a library handle it substitutes our CUDA wrappers.
    ///
    /// # Safety
    /// Same contract as `dlsym(3)`.
    #[unsafe(naked)]
    #[no_mangle]
    pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
        core::arch::naked_asm!(
            "mov rax, qword ptr [rip + {real}]",
            "test rax, rax",
            "jnz 2f",
            // Not found yet: find it (keeping the arguments; the stack stays 16-byte aligned
            // at the call: 8 on entry + 3 pushes).
            "push rdi",
            "push rsi",
            "push rdx",
            "call {init}",
            "pop rdx",
            "pop rsi",
            "pop rdi",
            "mov rax, qword ptr [rip + {real}]",
            "test rax, rax",
            "jz 3f",
            "2:",
            "cmp rdi, -1",
            "je 4f",
            "test rdi, rdi",
            "je 4f",
            "jmp {on_handle}",
            "4:",
            "jmp rax",
            "3:",
            "xor eax, eax",
            "ret",
            real = sym dl::REAL_DLSYM,
            init = sym init_all,
            on_handle = sym dlsym_on_handle,
        )
    }

    /// Hooked `dlvsym`, like [`dlsym`].
    ///
    /// # Safety
    /// Same contract as `dlvsym(3)`.
    #[unsafe(naked)]
    #[no_mangle]
    pub unsafe extern "C" fn dlvsym(
        handle: *mut c_void,
        name: *const c_char,
        version: *const c_char,
    ) -> *mut c_void {
        core::arch::naked_asm!(
            "mov rax, qword ptr [rip + {real}]",
            "test rax, rax",
            "jnz 2f",
            "push rdi",
            "push rsi",
            "push rdx",
            "call {init}",
            "pop rdx",
            "pop rsi",
            "pop rdi",
            "mov rax, qword ptr [rip + {real}]",
            "test rax, rax",
            "jz 3f",
            "2:",
            "cmp rdi, -1",
            "je 4f",
            "test rdi, rdi",
            "je 4f",
            "jmp {on_handle}",
            "4:",
            "jmp rax",
            "3:",
            "xor eax, eax",
            "ret",
            real = sym dl::REAL_DLVSYM,
            init = sym init_all,
            on_handle = sym dlvsym_on_handle,
        )
    }

    /// Hooked `dlopen`: notes libcuda names, then jumps into the real `dlopen` with the
    /// caller's return address, so the caller's search path, `$ORIGIN` and namespace apply.
    ///
    /// # Safety
    /// Same contract as `dlopen(3)`.
    #[unsafe(naked)]
    #[no_mangle]
    pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
        core::arch::naked_asm!(
            // 8 on entry + 2 pushes + 8 = 16-byte aligned at the call.
            "push rdi",
            "push rsi",
            "sub rsp, 8",
            "call {prepare}",
            "add rsp, 8",
            "pop rsi",
            "pop rdi",
            "test rax, rax",
            "jz 3f",
            "jmp rax",
            "3:",
            "xor eax, eax",
            "ret",
            prepare = sym dlopen_prepare,
        )
    }

    /// Hooked `dlclose`: closes, then forgets entry points of a libcuda that was unloaded.
    ///
    /// # Safety
    /// Same contract as `dlclose(3)`.
    #[no_mangle]
    pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
        let Some(real) = dl::real_dlclose() else {
            return -1;
        };
        // SAFETY: forwarding the caller's handle under dlclose's contract.
        let rc = unsafe { real(handle) };
        let _ = std::panic::catch_unwind(forget_unmapped);
        rc
    }
}
