//! The loaded kernels of one device: the one layer between the compiled-image cache
//! ([`KernelCache`]: memory + disk) and launches.
//!
//! Every loaded module of the process lives in its device's [`KernelSet`], whoever loaded it:
//! gpukit-core's built-in kernels and GEMM kernels (by a program id they choose, so a lookup
//! costs two map probes and no hashing of the source; registering under an id is `unsafe`,
//! since its users launch its kernels unchecked), user kernels through [`load_source`]
//! / [`jit`](crate::jit) and gpukit-core's `Device::load_kernel` (by the content-hashed
//! [`CacheKey`](crate::CacheKey), so two different sources never share an entry). A miss
//! compiles through [`KernelCache::global`] (which answers from memory or disk when it can)
//! and loads the image once per device: modules are context-independent libraries, so one
//! load serves every context of the device, green contexts included.
//!
//! [`load_source`]: crate::load_source

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::module::{Kernel, Module};
use crate::options::CompileOptions;
use crate::KernelCache;
use cudarc::driver::CudaContext;
use parking_lot::{Mutex, RwLock};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// What [`KernelSet::kernel`] compiles when its program is not loaded yet.
#[derive(Debug, Clone)]
pub struct ProgramSpec<'s> {
    /// The CUDA source (borrowed for built-in sources, owned for generated ones).
    pub source: Cow<'s, str>,
    /// The program name (used in logs and errors).
    pub program: Cow<'s, str>,
    /// Compile options (name expressions, headers, ...); the target defaults to the device's.
    pub options: CompileOptions,
}

struct Loaded {
    module: Module,
    kernels: RwLock<HashMap<String, Kernel>>,
}

/// The loaded modules and kernels of one device (see the module docs). One per device per
/// process: [`KernelSet::of`].
pub struct KernelSet {
    ctx: Arc<CudaContext>,
    arch: Arch,
    programs: RwLock<HashMap<String, Arc<Loaded>>>,
}

impl std::fmt::Debug for KernelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSet")
            .field("device", &self.ctx.ordinal())
            .field("arch", &self.arch)
            .field("programs", &self.programs.read().len())
            .finish()
    }
}

impl KernelSet {
    /// The set of the device `ctx` belongs to, created on first use (it keeps `ctx` to load
    /// libraries with; any context of the device serves).
    pub fn of(ctx: &Arc<CudaContext>) -> Result<&'static KernelSet> {
        static SETS: OnceLock<Mutex<HashMap<usize, &'static KernelSet>>> = OnceLock::new();
        let sets = SETS.get_or_init(|| Mutex::new(HashMap::new()));
        let ordinal = ctx.ordinal();
        if let Some(s) = sets.lock().get(&ordinal) {
            return Ok(s);
        }
        let arch = Arch::of_context(ctx)?;
        let mut map = sets.lock();
        Ok(*map.entry(ordinal).or_insert_with(|| {
            // One per device for the life of the process (bounded by the device count).
            Box::leak(Box::new(KernelSet {
                ctx: ctx.clone(),
                arch,
                programs: RwLock::new(HashMap::new()),
            }))
        }))
    }

    /// The device's architecture (the default compile target).
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The number of loaded programs.
    pub fn len(&self) -> usize {
        self.programs.read().len()
    }

    /// Whether nothing is loaded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Kernel `name` (an `extern "C"` name or a name expression) of the program `id`; on the
    /// first use of `id` the program `spec()` describes is compiled (through the global cache)
    /// and loaded. A lookup costs two map probes and no hashing of the source.
    ///
    /// Sources not known at build time go through [`load_source`](Self::load_source), which
    /// keys by content and is safe. Registering under an id takes `unsafe`: safe code cannot
    /// put its own program under an id that others launch unchecked.
    ///
    /// ```compile_fail,E0133
    /// # use gpukit_jit::{KernelSet, ProgramSpec, CompileOptions};
    /// fn replace_a_builtin(set: &KernelSet) {
    ///     let _ = set.kernel("gpukit-core/gpukit_copy_float", "fill<float>", || ProgramSpec {
    ///         source: "extern \"C\" __global__ void k(double* x) {}".into(),
    ///         program: "k".into(),
    ///         options: CompileOptions::new(),
    ///     });
    /// }
    /// ```
    ///
    /// # Safety
    /// `id` must stand for one program in the whole process: every call with `id`, by any
    /// caller, passes a spec of the same source and options (use a crate-specific prefix:
    /// `gpukit-core/elementwise/float`; ids starting with `sha256:` belong to
    /// [`load_source`](Self::load_source)). The first spec registered under an id is the one
    /// compiled, and the kernels of an id are launched by its users with raw arguments
    /// (`launch_unchecked`) on the strength of this promise: a different program registered
    /// first under another crate's id would receive arguments meant for other code.
    pub unsafe fn kernel<'s>(
        &self,
        id: &str,
        name: &str,
        spec: impl FnOnce() -> ProgramSpec<'s>,
    ) -> Result<Kernel> {
        if let Some(loaded) = self.programs.read().get(id) {
            if let Some(k) = loaded.kernels.read().get(name) {
                return Ok(k.clone());
            }
        }
        let loaded = self.loaded(id, spec)?;
        let k = loaded.module.kernel(name)?;
        let mut kernels = loaded.kernels.write();
        Ok(kernels.entry(name.to_string()).or_insert(k).clone())
    }

    /// The module of program `id` (see [`kernel`](Self::kernel)).
    ///
    /// # Safety
    /// As for [`kernel`](Self::kernel).
    pub unsafe fn module<'s>(
        &self,
        id: &str,
        spec: impl FnOnce() -> ProgramSpec<'s>,
    ) -> Result<Module> {
        Ok(self.loaded(id, spec)?.module.clone())
    }

    fn loaded<'s>(&self, id: &str, spec: impl FnOnce() -> ProgramSpec<'s>) -> Result<Arc<Loaded>> {
        if let Some(l) = self.programs.read().get(id) {
            return Ok(l.clone());
        }
        let spec = spec();
        let module = self.compile_and_load(&spec.source, &spec.program, &spec.options, None)?;
        Ok(self.insert(id, module))
    }

    /// Compiles (through the global cache) and loads `source`, keyed by its content-hashed
    /// cache key: the module a second call with the same inputs finds loaded.
    pub fn load_source(
        &self,
        source: &str,
        program: &str,
        options: &CompileOptions,
    ) -> Result<Module> {
        let cache = KernelCache::global()?;
        let target = self.target_for(source, options);
        let key = cache.key(source, program, target, options)?;
        // Content keys live in their own namespace of ids (`sha256:`), which no caller of
        // `kernel` may use (ids there are crate-prefixed names).
        let id = format!("sha256:{}", key.hex());
        if let Some(l) = self.programs.read().get(&id) {
            return Ok(l.module.clone());
        }
        let module = self.compile_and_load(source, program, options, Some(key))?;
        Ok(self.insert(&id, module).module.clone())
    }

    fn target_for(&self, source: &str, options: &CompileOptions) -> Arch {
        options
            .target
            .unwrap_or_else(|| self.arch.for_source(source))
    }

    fn compile_and_load(
        &self,
        source: &str,
        program: &str,
        options: &CompileOptions,
        key: Option<crate::CacheKey>,
    ) -> Result<Module> {
        let cache = KernelCache::global()?;
        let target = self.target_for(source, options);
        let key = match key {
            Some(k) => k,
            None => cache.key(source, program, target, options)?,
        };
        let compiled = cache.get_or_compile_keyed(key, source, program, target, options)?;
        Module::load(&self.ctx, compiled).map_err(|e| match e {
            Error::Driver { action, source } => Error::Driver {
                action: format!("{action} into the device's kernel set"),
                source,
            },
            other => other,
        })
    }

    fn insert(&self, id: &str, module: Module) -> Arc<Loaded> {
        // Two threads may race to load the same program: keep the first, drop the other's copy.
        self.programs
            .write()
            .entry(id.to_string())
            .or_insert_with(|| {
                Arc::new(Loaded {
                    module,
                    kernels: RwLock::new(HashMap::new()),
                })
            })
            .clone()
    }
}
