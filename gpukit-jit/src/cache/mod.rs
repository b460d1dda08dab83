//! The kernel cache: a bounded in-memory LRU in front of an on-disk store shared by every
//! process of the user.
//!
//! Configuration (read by [`CacheConfig::from_env`]):
//! - `GPUKIT_CACHE=off` disables the disk level (`on`, the default, enables it);
//! - `GPUKIT_CACHE_DIR` overrides the directory (default `$XDG_CACHE_HOME/gpukit/kernels`, i.e.
//!   `~/.cache/gpukit/kernels` on Linux);
//! - `GPUKIT_CACHE_MAX_BYTES` bounds the disk level (default 256 MiB).
//!
//! Keys hash the content of the headers a compilation may read (in memory, or found on disk
//! through include paths), so editing a header never serves a stale kernel.
//!
//! The disk level is used only in a directory that only this user (or root) can change: one
//! owned by another user, or writable by others without the sticky bit (gpukit-trust's rules,
//! which gpukit-mutex's lock directory follows too; see `disk`), is not used at all and
//! [`KernelCache::disk_problem`] says why. In a shared sticky directory, only this user's own
//! entries are read. Every entry is tied to its key, program, target and output kind, and read
//! with a size bound.

mod disk;
mod includes;
mod key;

pub use key::CacheKey;

use crate::arch::Arch;
use crate::compile::{compile, nvrtc_version, CompiledModule};
use crate::error::{Error, Result};
use crate::options::CompileOptions;
use disk::{DiskCache, Expect, Lookup};
use lru::LruCache;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Default bound of the disk level.
pub const DEFAULT_DISK_BYTES: u64 = 256 << 20;
/// Default number of entries in the memory level.
pub const DEFAULT_MEMORY_ENTRIES: usize = 256;

/// How a [`KernelCache`] is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Entries kept in memory.
    pub memory_entries: usize,
    /// The disk directory, or `None` for no disk level.
    pub disk_dir: Option<PathBuf>,
    /// Size bound of the disk level in bytes.
    pub disk_max_bytes: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            memory_entries: DEFAULT_MEMORY_ENTRIES,
            disk_dir: default_dir(),
            disk_max_bytes: DEFAULT_DISK_BYTES,
        }
    }
}

fn default_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|d| d.join("gpukit").join("kernels"))
}

impl CacheConfig {
    /// Reads `GPUKIT_CACHE`, `GPUKIT_CACHE_DIR` and `GPUKIT_CACHE_MAX_BYTES`. A malformed value
    /// is an error that names the variable and what it accepts.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) with a custom variable source (for tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut cfg = CacheConfig::default();
        let enabled = match var("GPUKIT_CACHE").as_deref().map(str::trim) {
            None | Some("") | Some("on") | Some("1") | Some("true") => true,
            Some("off") | Some("0") | Some("false") => false,
            Some(other) => {
                return Err(Error::invalid(
                    "environment variable GPUKIT_CACHE",
                    other,
                    "expected `on` or `off`",
                ))
            }
        };
        if let Some(dir) = var("GPUKIT_CACHE_DIR").filter(|d| !d.trim().is_empty()) {
            cfg.disk_dir = Some(PathBuf::from(dir));
        }
        if let Some(max) = var("GPUKIT_CACHE_MAX_BYTES").filter(|d| !d.trim().is_empty()) {
            cfg.disk_max_bytes = max.trim().parse().map_err(|_| {
                Error::invalid(
                    "environment variable GPUKIT_CACHE_MAX_BYTES",
                    &max,
                    "expected a whole number of bytes, e.g. 268435456",
                )
            })?;
        }
        if !enabled {
            cfg.disk_dir = None;
        }
        Ok(cfg)
    }
}

/// Counters of a [`KernelCache`] (monotonic since it was created).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from memory.
    pub memory_hits: u64,
    /// Lookups answered from disk.
    pub disk_hits: u64,
    /// Lookups that compiled.
    pub misses: u64,
    /// Entries dropped from memory by the LRU bound.
    pub memory_evictions: u64,
    /// Files deleted from disk by the size bound.
    pub disk_evictions: u64,
    /// Disk entries found truncated, corrupted or written for other inputs (deleted and
    /// rebuilt).
    pub corrupt_entries: u64,
    /// Files under an entry's name that were not read: another user's, writable by others, a
    /// link, a FIFO or other non-regular file, or larger than the bound (left in place; the
    /// kernel was compiled instead).
    pub refused_entries: u64,
    /// Disk writes that failed (the compiled kernel is still returned).
    pub disk_write_errors: u64,
}

#[derive(Default)]
struct Counters {
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    misses: AtomicU64,
    memory_evictions: AtomicU64,
    disk_evictions: AtomicU64,
    corrupt_entries: AtomicU64,
    refused_entries: AtomicU64,
    disk_write_errors: AtomicU64,
}

/// A two-level cache of compiled kernels. Thread-safe; share it freely.
///
/// ```no_run
/// use gpukit_jit::{Arch, CompileOptions, KernelCache};
/// let cache = KernelCache::from_env()?;
/// let src = r#"extern "C" __global__ void k(float* x) { x[0] = 1.0f; }"#;
/// let m = cache.get_or_compile(src, "k", Arch::new(9, 0), &CompileOptions::new())?;
/// assert!(!m.image.is_empty());
/// # Ok::<(), gpukit_jit::Error>(())
/// ```
pub struct KernelCache {
    memory: Mutex<LruCache<CacheKey, Arc<CompiledModule>>>,
    disk: Option<DiskCache>,
    in_flight: Mutex<HashMap<CacheKey, Arc<Mutex<()>>>>,
    counters: Counters,
    /// The file and reason of the latest refused entry.
    last_refusal: Mutex<Option<String>>,
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("disk", &self.disk)
            .field("stats", &self.stats())
            .finish()
    }
}

impl KernelCache {
    /// A cache with this configuration. The disk directory is opened (created when missing)
    /// and checked here, once (see [`disk_problem`](Self::disk_problem)).
    pub fn new(config: CacheConfig) -> Self {
        let cap = NonZeroUsize::new(config.memory_entries.max(1)).unwrap_or(NonZeroUsize::MIN);
        KernelCache {
            memory: Mutex::new(LruCache::new(cap)),
            disk: config
                .disk_dir
                .map(|dir| DiskCache::new(dir, config.disk_max_bytes)),
            in_flight: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            last_refusal: Mutex::new(None),
        }
    }

    /// A cache configured from the environment (see the module docs).
    pub fn from_env() -> Result<Self> {
        Ok(Self::new(CacheConfig::from_env()?))
    }

    /// The process-wide cache, configured from the environment on first use.
    pub fn global() -> Result<&'static KernelCache> {
        static GLOBAL: OnceLock<KernelCache> = OnceLock::new();
        if let Some(c) = GLOBAL.get() {
            return Ok(c);
        }
        let cache = KernelCache::from_env()?;
        Ok(GLOBAL.get_or_init(|| cache))
    }

    /// The disk directory configured, if any (see [`disk_problem`](Self::disk_problem) for
    /// whether it is used).
    pub fn disk_dir(&self) -> Option<&std::path::Path> {
        self.disk.as_ref().map(|d| d.dir.as_path())
    }

    /// Why the configured disk directory is not used (the cache then keeps to memory): a
    /// directory on the way that another user could change, or one that cannot be created or
    /// opened. `None` when it is used, or when there is none. Checked once, when the cache is
    /// made.
    pub fn disk_problem(&self) -> Option<String> {
        let d = self.disk.as_ref()?;
        d.open().err().map(ToString::to_string)
    }

    /// Bytes currently stored in the disk level.
    pub fn disk_size(&self) -> u64 {
        self.disk.as_ref().map(|d| d.size()).unwrap_or(0)
    }

    /// The latest file under an entry's name that was not read (see
    /// [`CacheStats::refused_entries`]), and why: another user's entry in a shared directory, a
    /// link, a FIFO, a file larger than the bound.
    pub fn last_refused_entry(&self) -> Option<String> {
        self.last_refusal.lock().clone()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            memory_hits: l(&c.memory_hits),
            disk_hits: l(&c.disk_hits),
            misses: l(&c.misses),
            memory_evictions: l(&c.memory_evictions),
            disk_evictions: l(&c.disk_evictions),
            corrupt_entries: l(&c.corrupt_entries),
            refused_entries: l(&c.refused_entries),
            disk_write_errors: l(&c.disk_write_errors),
        }
    }

    /// Drops every in-memory entry (the disk level is kept).
    pub fn clear_memory(&self) {
        self.memory.lock().clear();
    }

    /// Returns the compiled module for this source and options, compiling at most once per key
    /// in this process (concurrent callers of the same key wait for the first).
    pub fn get_or_compile(
        &self,
        source: &str,
        program: &str,
        target: Arch,
        options: &CompileOptions,
    ) -> Result<Arc<CompiledModule>> {
        let key = self.key(source, program, target, options)?;
        self.get_or_compile_keyed(key, source, program, target, options)
    }

    /// [`get_or_compile`](Self::get_or_compile) with the key already computed by
    /// [`key`](Self::key) for the same inputs (saves hashing the source twice). Crate-private:
    /// a key that does not belong to the source would store (and serve) the wrong image under
    /// that key, to every later caller of the key.
    ///
    /// ```compile_fail,E0624
    /// # use gpukit_jit::{Arch, CacheKey, CompileOptions, KernelCache};
    /// fn poison(cache: &KernelCache, key_of_another_source: CacheKey) {
    ///     let _ = cache.get_or_compile_keyed(key_of_another_source, "evil", "k",
    ///         Arch::new(9, 0), &CompileOptions::new());
    /// }
    /// ```
    pub(crate) fn get_or_compile_keyed(
        &self,
        key: CacheKey,
        source: &str,
        program: &str,
        target: Arch,
        options: &CompileOptions,
    ) -> Result<Arc<CompiledModule>> {
        debug_assert!(self.key(source, program, target, options).ok() == Some(key));
        if let Some(m) = self.memory.lock().get(&key) {
            self.counters.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(m.clone());
        }
        // Single flight per key inside this process.
        let gate = self.in_flight.lock().entry(key).or_default().clone();
        let _guard = gate.lock();
        let result = self.fill(key, source, program, target, options);
        self.in_flight.lock().remove(&key);
        result
    }

    fn fill(
        &self,
        key: CacheKey,
        source: &str,
        program: &str,
        target: Arch,
        options: &CompileOptions,
    ) -> Result<Arc<CompiledModule>> {
        if let Some(m) = self.memory.lock().get(&key) {
            self.counters.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(m.clone());
        }
        if let Some(disk) = &self.disk {
            let want = Expect {
                key: &key,
                program,
                target,
                output: options.output_kind(),
                source,
            };
            match disk.load(&want) {
                Lookup::Hit(m) => {
                    self.counters.disk_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(self.remember(key, Arc::new(m)));
                }
                Lookup::Corrupt => {
                    self.counters
                        .corrupt_entries
                        .fetch_add(1, Ordering::Relaxed);
                }
                Lookup::Refused(reason) => {
                    self.counters
                        .refused_entries
                        .fetch_add(1, Ordering::Relaxed);
                    *self.last_refusal.lock() =
                        Some(format!("{}: {reason}", disk.path_of(&key).display()));
                }
                Lookup::Miss => {}
            }
        }
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        let module = Arc::new(compile(source, program, target, options)?);
        if let Some(disk) = &self.disk {
            match disk.store(&key, &module) {
                Ok(evicted) => {
                    self.counters
                        .disk_evictions
                        .fetch_add(evicted, Ordering::Relaxed);
                }
                Err(_) => {
                    self.counters
                        .disk_write_errors
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(self.remember(key, module))
    }

    fn remember(&self, key: CacheKey, module: Arc<CompiledModule>) -> Arc<CompiledModule> {
        if let Some((old, _)) = self.memory.lock().push(key, module.clone()) {
            if old != key {
                self.counters
                    .memory_evictions
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        module
    }

    /// The file that holds (or would hold) this key on disk.
    pub fn disk_path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.disk.as_ref().map(|d| d.path_of(key))
    }

    /// The key for these inputs (as [`get_or_compile`](Self::get_or_compile) computes it).
    pub fn key(
        &self,
        source: &str,
        program: &str,
        target: Arch,
        options: &CompileOptions,
    ) -> Result<CacheKey> {
        Ok(CacheKey::new(
            source,
            program,
            target,
            options,
            nvrtc_version()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_parsing() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let c = CacheConfig::from_vars(env(&[("GPUKIT_CACHE_DIR", "/x/y")])).unwrap();
        assert_eq!(c.disk_dir, Some(PathBuf::from("/x/y")));
        let c = CacheConfig::from_vars(env(&[("GPUKIT_CACHE", "off"), ("GPUKIT_CACHE_DIR", "/x")]))
            .unwrap();
        assert_eq!(c.disk_dir, None);
        let e = CacheConfig::from_vars(env(&[("GPUKIT_CACHE", "maybe")])).unwrap_err();
        assert!(e.to_string().contains("GPUKIT_CACHE"), "{e}");
        let e = CacheConfig::from_vars(env(&[("GPUKIT_CACHE_MAX_BYTES", "lots")])).unwrap_err();
        assert!(e.to_string().contains("GPUKIT_CACHE_MAX_BYTES"), "{e}");
        let c = CacheConfig::from_vars(env(&[("GPUKIT_CACHE_MAX_BYTES", "1024")])).unwrap();
        assert_eq!(c.disk_max_bytes, 1024);
    }
}
