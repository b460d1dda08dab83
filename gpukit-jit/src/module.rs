//! Loading compiled modules into a CUDA context and launching their kernels.

use crate::args::{check_args, KernelArg};
use crate::compile::CompiledModule;
use crate::error::{Error, Result};
use crate::libs;
use crate::options::{CompileOptions, Output};
use crate::signature::KernelSignature;
use crate::typed::{check_typed, prepare, Arg};
use crate::KernelSet;
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Opens the primary context of device `ordinal`, or returns a typed error when there is no
/// driver or no such device (never panics).
pub fn open_context(ordinal: usize) -> Result<Arc<CudaContext>> {
    libs::ensure_driver()?;
    cudarc::driver::result::init().map_err(|e| Error::driver("initialising the CUDA driver", e))?;
    let count = cudarc::driver::result::device::get_count()
        .map_err(|e| Error::driver("counting CUDA devices", e))?;
    if ordinal >= count.max(0) as usize {
        return Err(Error::invalid(
            "device ordinal",
            ordinal.to_string(),
            format!("this machine has {count} CUDA device(s)"),
        ));
    }
    CudaContext::new(ordinal).map_err(|e| Error::driver(format!("opening device {ordinal}"), e))
}

/// The first driver version (`cuDriverGetVersion`) with `cuLaunchKernelEx`: CUDA 12.0.
pub const LAUNCH_EX_DRIVER: i32 = 12000;

/// Grid, block and dynamic shared memory of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block in bytes. Above 48 KiB the kernel's limit is raised
    /// automatically.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// One-dimensional: enough blocks of `block` threads to cover `n` elements.
    ///
    /// ```
    /// let c = gpukit_jit::LaunchConfig::for_elements(1000, 256);
    /// assert_eq!(c.grid, (4, 1, 1));
    /// ```
    pub fn for_elements(n: usize, block: u32) -> Self {
        let block = block.max(1);
        let blocks = n.div_ceil(block as usize).clamp(1, u32::MAX as usize) as u32;
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// A launch of `grid` blocks of `block` threads.
    pub fn new(grid: (u32, u32, u32), block: (u32, u32, u32)) -> Self {
        LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        }
    }

    /// Sets the dynamic shared memory.
    pub fn with_shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }
}

/// A context-independent CUDA library (`cuLibraryLoadData`), unloaded when the last
/// [`Module`] or [`Kernel`] using it is dropped.
#[derive(Debug)]
struct Library(sys::CUlibrary);

// SAFETY: a CUlibrary handle is a process-wide driver object usable from any thread.
unsafe impl Send for Library {}
// SAFETY: as above; the driver synchronises access to it.
unsafe impl Sync for Library {}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: self.0 came from cuLibraryLoadData and is unloaded exactly once; kernels
        // from it hold an Arc to this value, so none outlives the library.
        unsafe {
            sys::cuLibraryUnload(self.0);
        }
    }
}

/// A compiled module, loaded as a context-independent library so that its kernels can be
/// launched on streams of any context of the device, green contexts included.
#[derive(Debug, Clone)]
pub struct Module {
    compiled: Arc<CompiledModule>,
    library: Arc<Library>,
    device: sys::CUdevice,
    ordinal: usize,
}

// SAFETY: the fields are an Arc'd immutable compiled module, a Send+Sync library handle and a
// device ordinal handle (a plain integer).
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl Module {
    /// Loads `compiled` for the device of `ctx`.
    pub fn load(ctx: &Arc<CudaContext>, compiled: Arc<CompiledModule>) -> Result<Self> {
        // A CUBIN is loaded from the cached bytes as they are; PTX must be NUL-terminated text,
        // which the compiler's output is not, so only PTX is copied.
        let image: std::borrow::Cow<[u8]> =
            if compiled.output == Output::Ptx && compiled.image.last() != Some(&0) {
                let mut text = Vec::with_capacity(compiled.image.len() + 1);
                text.extend_from_slice(&compiled.image);
                text.push(0);
                std::borrow::Cow::Owned(text)
            } else {
                std::borrow::Cow::Borrowed(&compiled.image)
            };
        ctx.bind_to_thread()
            .map_err(|e| Error::driver("binding the context", e))?;
        let mut lib: sys::CUlibrary = std::ptr::null_mut();
        // SAFETY: the driver is initialised (a context exists); `image` is a complete CUBIN or
        // NUL-terminated PTX that outlives the call; no JIT or library options are passed.
        let status = unsafe {
            sys::cuLibraryLoadData(
                &mut lib,
                image.as_ptr() as *const std::ffi::c_void,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        status.result().map_err(|e| {
            Error::driver(
                format!(
                    "loading module `{}` (compiled for {})",
                    compiled.program, compiled.target
                ),
                e,
            )
        })?;
        Ok(Module {
            compiled,
            library: Arc::new(Library(lib)),
            device: ctx.cu_device(),
            ordinal: ctx.ordinal(),
        })
    }

    /// The compiled module this was loaded from.
    pub fn compiled(&self) -> &Arc<CompiledModule> {
        &self.compiled
    }

    /// A kernel by its `extern "C"` name or by a name expression given at compile time (a
    /// driver lookup: callers that launch often keep the [`Kernel`], or use a [`KernelSet`]).
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let not_found = || Error::KernelNotFound {
            name: name.to_string(),
            program: self.compiled.program.clone(),
            available: self.compiled.available_kernels(),
        };
        let symbol = self.compiled.resolve(name)?;
        let c_symbol = std::ffi::CString::new(symbol).map_err(|_| not_found())?;
        let mut kernel: sys::CUkernel = std::ptr::null_mut();
        // SAFETY: the library is live (we hold an Arc); c_symbol is NUL-terminated.
        let status =
            unsafe { sys::cuLibraryGetKernel(&mut kernel, self.library.0, c_symbol.as_ptr()) };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(not_found());
        }
        Ok(Kernel(Arc::new(KernelInner {
            name: name.to_string(),
            kernel,
            device: self.device,
            ordinal: self.ordinal,
            _library: self.library.clone(),
            signature: self.compiled.signature_for(name),
            smem_limit: AtomicU32::new(48 * 1024),
        })))
    }
}

/// A launchable kernel with its parsed signature. Context-independent: it can be launched on
/// any stream of its device (the primary context's or a green context's). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Kernel(Arc<KernelInner>);

#[derive(Debug)]
struct KernelInner {
    name: String,
    kernel: sys::CUkernel,
    device: sys::CUdevice,
    ordinal: usize,
    _library: Arc<Library>,
    signature: Option<KernelSignature>,
    smem_limit: AtomicU32,
}

// SAFETY: a CUkernel is a context-independent driver handle usable from any thread; the
// library it belongs to is kept alive by the Arc; the other fields are plain data.
unsafe impl Send for KernelInner {}
// SAFETY: as above (the shared-memory limit is an atomic).
unsafe impl Sync for KernelInner {}

impl Kernel {
    /// The kernel's name (as asked for).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The signature safe launches are checked against: that of the exact compiled function
    /// (see [`CompiledModule::signature_for`](crate::CompiledModule::signature_for)); `None`
    /// when it cannot be known for sure (then only `launch_unchecked` launches it).
    pub fn signature(&self) -> Option<&KernelSignature> {
        self.0.signature.as_ref()
    }

    /// The ordinal of the device the kernel was loaded for.
    pub fn device_ordinal(&self) -> usize {
        self.0.ordinal
    }

    /// The kernel's function handle in the context current on this thread (for occupancy
    /// queries and attributes).
    pub fn function_in_current_context(&self) -> Result<sys::CUfunction> {
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: self.0.kernel is a live CUkernel (its library is held).
        unsafe { sys::cuKernelGetFunction(&mut f, self.0.kernel) }
            .result()
            .map_err(|e| {
                Error::driver(
                    format!("getting kernel `{}` in the current context", self.0.name),
                    e,
                )
            })?;
        Ok(f)
    }

    /// Sets a function attribute for this kernel on its device.
    pub fn set_attribute(&self, attribute: sys::CUfunction_attribute, value: i32) -> Result<()> {
        // SAFETY: the kernel is live; the device handle came from the loading context.
        unsafe { sys::cuKernelSetAttribute(attribute, value, self.0.kernel, self.0.device) }
            .result()
            .map_err(|source| Error::Launch {
                kernel: self.0.name.clone(),
                source,
            })
    }

    /// Checks raw `args` against the signature (count, kinds, widths) without launching.
    pub fn check(&self, args: &[KernelArg]) -> Result<()> {
        match &self.0.signature {
            Some(sig) => check_args(sig, &self.0.name, args),
            None => Ok(()),
        }
    }

    /// Checks typed `args` as [`launch`](Self::launch) does, for a launch on device `device`,
    /// without launching.
    pub fn check_typed(&self, device: usize, args: &[Arg<'_>]) -> Result<()> {
        let sig = self
            .0
            .signature
            .as_ref()
            .ok_or_else(|| Error::ArgumentMismatch {
                kernel: self.0.name.clone(),
                message: "the parameter types of the compiled function are not known for sure \
                      (not declared in the source as `__global__ void name(T* p, ...)`, \
                      declared differently in several places, inside an #if or a macro, or a \
                      mangled symbol the checker does not decode), so a safe launch cannot \
                      check the arguments; load it through a name expression (`&name` or \
                      `name<T>`), declare it once unconditionally, or use launch_unchecked"
                    .into(),
            })?;
        check_typed(sig, &self.0.name, device, args)
    }

    /// Launches on `stream` with typed arguments, checked against the parsed signature first
    /// (see [`crate::typed`]): device memory as `&array` (read) or `&mut array` (written),
    /// scalars by value. Nothing is queued when a check fails.
    ///
    /// ```no_run
    /// # use gpukit_jit::*;
    /// # fn f(k: &Kernel, s: &std::sync::Arc<cudarc::driver::CudaStream>,
    /// #      x: &mut cudarc::driver::CudaSlice<f32>) -> Result<()> {
    /// k.launch(s, LaunchConfig::for_elements(1024, 256), args![x, 0.5f32, 1024i32])
    /// # }
    /// ```
    pub fn launch<'a>(
        &self,
        stream: &Arc<CudaStream>,
        cfg: LaunchConfig,
        mut args: impl AsMut<[Arg<'a>]>,
    ) -> Result<()> {
        let args = args.as_mut();
        self.check_typed(stream.context().ordinal(), args)?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| Error::driver("binding the context", e))?;
        let (raw, guards) = prepare(args, stream);
        // SAFETY: the stream belongs to the bound context and is live for this call. Every
        // pointer comes from a DeviceMemory of the stream's device whose element type, access
        // and range were checked against the signature above, with no written range
        // overlapping another argument; `prepare` recorded the use on `stream`, so the memory
        // outlives the queued work (the DeviceMemory contract). Raw arguments carry their
        // creator's `Arg::raw` guarantee; count and widths were checked by check_typed.
        let result = unsafe { self.enqueue(stream.cu_stream(), cfg, &raw, false) };
        drop(guards);
        result
    }

    /// Launches on `stream` with raw arguments, checked for count, kinds and widths only.
    ///
    /// # Safety
    /// Every [`KernelArg::Ptr`] (and device address inside [`KernelArg::Bytes`]) must be
    /// device memory of the stream's device that is valid for every access the kernel makes
    /// through it, stays allocated until the launched work has completed, and holds values of
    /// the types the kernel reads; memory the kernel writes must not be read or written by
    /// other work that may run concurrently, and must not overlap another argument that the
    /// kernel assumes distinct (`__restrict__`).
    ///
    /// ```no_run
    /// # use gpukit_jit::*;
    /// # fn f(k: &Kernel, s: &std::sync::Arc<cudarc::driver::CudaStream>, x: u64) -> Result<()> {
    /// // SAFETY: `x` is a live allocation of 1024 f32 on this device, used by nothing else.
    /// unsafe {
    ///     k.launch_unchecked(s, LaunchConfig::for_elements(1024, 256),
    ///                        &[KernelArg::Ptr(x), 0.5f32.into(), 1024i32.into()])
    /// }
    /// # }
    /// ```
    pub unsafe fn launch_unchecked(
        &self,
        stream: &CudaStream,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.bind_and_enqueue(stream, cfg, args, false) }
    }

    /// Launches like [`launch_unchecked`](Self::launch_unchecked), with programmatic dependent
    /// launch allowed (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, compute
    /// capability 9.0): the kernel's blocks may start as soon as every block of the kernel before
    /// it on `stream` has executed `griddepcontrol.launch_dependents` (or exited), instead of
    /// after that kernel has completed. Where the driver is older than CUDA 12.0 (no
    /// `cuLaunchKernelEx`) it is a plain launch.
    ///
    /// # Safety
    /// As for [`launch_unchecked`](Self::launch_unchecked), and: the kernel executes
    /// `griddepcontrol.wait` (which returns once the previous kernel has completed and its memory
    /// operations are visible) before any access to memory, so that nothing it reads or writes
    /// can race with the kernel before it; on a device below compute capability 9.0 the launch
    /// must not be made (the instruction does not exist there).
    pub unsafe fn launch_programmatic_unchecked(
        &self,
        stream: &CudaStream,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        let programmatic = crate::libs::driver_version() >= LAUNCH_EX_DRIVER;
        // SAFETY: forwarded from the caller (the kernel waits on the grid before it before
        // touching memory); `programmatic` only where the driver has cuLaunchKernelEx.
        unsafe { self.bind_and_enqueue(stream, cfg, args, programmatic) }
    }

    /// Checks the arguments, binds the stream's context to this thread and queues the launch.
    ///
    /// # Safety
    /// As for [`launch_unchecked`](Self::launch_unchecked); with `programmatic`, as for
    /// [`launch_programmatic_unchecked`](Self::launch_programmatic_unchecked) and a driver of at
    /// least [`LAUNCH_EX_DRIVER`].
    unsafe fn bind_and_enqueue(
        &self,
        stream: &CudaStream,
        cfg: LaunchConfig,
        args: &[KernelArg],
        programmatic: bool,
    ) -> Result<()> {
        self.check(args)?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| Error::driver("binding the context", e))?;
        // SAFETY: the stream belongs to the bound context and is live for this call; the
        // arguments carry the caller's guarantee and were checked above; `programmatic` as the
        // caller guarantees.
        unsafe { self.enqueue(stream.cu_stream(), cfg, args, programmatic) }
    }

    /// Launches on a raw stream handle (for example a green-context stream) after checking the
    /// arguments' count, kinds and widths.
    ///
    /// # Safety
    /// `stream` must be a live stream of a context of this kernel's device, and that context
    /// must be current on this thread; the arguments must satisfy the contract of
    /// [`launch_unchecked`](Self::launch_unchecked).
    pub unsafe fn launch_raw(
        &self,
        stream: sys::CUstream,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        self.check(args)?;
        // SAFETY: forwarded from the caller; the arguments were checked above.
        unsafe { self.enqueue(stream, cfg, args, false) }
    }

    /// Queues the launch (arguments already checked); `programmatic`: through
    /// `cuLaunchKernelEx` with programmatic stream serialization allowed.
    ///
    /// # Safety
    /// As for [`launch_raw`](Self::launch_raw), with `args` checked against the signature; with
    /// `programmatic`, as for [`launch_programmatic_unchecked`](Self::launch_programmatic_unchecked)
    /// and a driver of at least [`LAUNCH_EX_DRIVER`].
    unsafe fn enqueue(
        &self,
        stream: sys::CUstream,
        cfg: LaunchConfig,
        args: &[KernelArg],
        programmatic: bool,
    ) -> Result<()> {
        if cfg.grid.0 == 0 || cfg.grid.1 == 0 || cfg.grid.2 == 0 {
            return Ok(());
        }
        let inner = &self.0;
        if cfg.shared_mem_bytes > inner.smem_limit.load(Ordering::Relaxed) {
            self.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                cfg.shared_mem_bytes as i32,
            )?;
            inner
                .smem_limit
                .fetch_max(cfg.shared_mem_bytes, Ordering::Relaxed);
        }
        let mut params: Vec<*mut std::ffi::c_void> =
            args.iter().map(KernelArg::as_param_ptr).collect();
        let launched = if programmatic {
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                // SAFETY: an all-zero union is a valid value of every member (plain integers).
                value: unsafe { std::mem::zeroed() },
            };
            attr.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: cfg.grid.0,
                gridDimY: cfg.grid.1,
                gridDimZ: cfg.grid.2,
                blockDimX: cfg.block.0,
                blockDimY: cfg.block.1,
                blockDimZ: cfg.block.2,
                sharedMemBytes: cfg.shared_mem_bytes,
                hStream: stream,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as for cuLaunchKernel below; `config` and the one attribute it points to
            // live on this frame through the call (the driver copies them), and the driver has
            // cuLaunchKernelEx (the caller's guarantee: version >= LAUNCH_EX_DRIVER), so cudarc
            // finds the entry point.
            unsafe {
                sys::cuLaunchKernelEx(
                    &config,
                    inner.kernel as sys::CUfunction,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .result()
        } else {
            // SAFETY: the caller guarantees stream/context validity and the arguments; `params`
            // holds one pointer per kernel parameter (count and widths checked against the
            // signature when known), each pointing into `args`, which outlives this call;
            // cuLaunchKernel copies the values.
            unsafe {
                cudarc::driver::result::launch_kernel(
                    // A CUkernel may be passed wherever a CUfunction is expected; the driver
                    // launches it in the stream's context.
                    inner.kernel as sys::CUfunction,
                    cfg.grid,
                    cfg.block,
                    cfg.shared_mem_bytes,
                    stream,
                    &mut params,
                )
            }
        };
        launched.map_err(|source| Error::Launch {
            kernel: inner.name.clone(),
            source,
        })
    }

    /// A launch with arguments given by parameter name, like the seed's
    /// `kernel(x, factor=0.5, n=x.size)`:
    ///
    /// ```no_run
    /// # use gpukit_jit::*;
    /// # fn f(k: &Kernel, s: &std::sync::Arc<cudarc::driver::CudaStream>,
    /// #      x: &mut cudarc::driver::CudaSlice<f32>) -> Result<()> {
    /// k.call().arg("x", x).arg("factor", 0.5f32).arg("n", 1024i32)
    ///     .launch(s, LaunchConfig::for_elements(1024, 256))
    /// # }
    /// ```
    pub fn call<'a>(&self) -> Call<'_, 'a> {
        Call {
            kernel: self,
            named: Vec::new(),
        }
    }
}

/// A launch under construction with named arguments (see [`Kernel::call`]).
#[derive(Debug)]
pub struct Call<'k, 'a> {
    kernel: &'k Kernel,
    named: Vec<(String, Arg<'a>)>,
}

impl<'a> Call<'_, 'a> {
    /// Sets the parameter called `name`.
    pub fn arg(mut self, name: &str, value: impl Into<Arg<'a>>) -> Self {
        self.named.push((name.to_string(), value.into()));
        self
    }

    /// Orders the arguments by the signature; errors name unknown, repeated or missing ones.
    pub fn resolve(self) -> Result<Vec<Arg<'a>>> {
        let kernel = &self.kernel.0;
        let sig = kernel
            .signature
            .as_ref()
            .ok_or_else(|| Error::ArgumentMismatch {
                kernel: kernel.name.clone(),
                message: "named arguments need a parsed signature; pass arguments in order".into(),
            })?;
        let err = |message: String| Error::ArgumentMismatch {
            kernel: kernel.name.clone(),
            message,
        };
        if sig.params.iter().any(|p| p.name.is_empty()) {
            return Err(err(
                "named arguments need the parameter names, and no declaration in the source \
                 matches the compiled function's types; pass arguments in order"
                    .into(),
            ));
        }
        let mut ordered: Vec<Option<Arg<'a>>> = (0..sig.params.len()).map(|_| None).collect();
        for (name, value) in self.named {
            let idx = sig
                .params
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = sig.params.iter().map(|p| p.name.as_str()).collect();
                    err(format!(
                        "has no parameter `{name}` (parameters: {})",
                        known.join(", ")
                    ))
                })?;
            if ordered[idx].replace(value).is_some() {
                return Err(err(format!("parameter `{name}` given twice")));
            }
        }
        let missing: Vec<&str> = sig
            .params
            .iter()
            .zip(&ordered)
            .filter(|(_, a)| a.is_none())
            .map(|(p, _)| p.name.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(err(format!("missing argument(s): {}", missing.join(", "))));
        }
        Ok(ordered.into_iter().flatten().collect())
    }

    /// Launches with the named arguments (checked as [`Kernel::launch`] checks them).
    pub fn launch(self, stream: &Arc<CudaStream>, cfg: LaunchConfig) -> Result<()> {
        let kernel = self.kernel;
        let args = self.resolve()?;
        kernel.launch(stream, cfg, args)
    }
}

/// Compiles (through the global cache) and loads `source` for the device of `ctx`, returning
/// the module. The target is the device's architecture, arch-specific when the source needs
/// it, unless `options.target` says otherwise. Loaded modules are kept in the device's
/// [`KernelSet`] (keyed by the content-hashed cache key), so a second call loads nothing.
pub fn load_source(
    ctx: &Arc<CudaContext>,
    source: &str,
    program: &str,
    options: &CompileOptions,
) -> Result<Module> {
    KernelSet::of(ctx)?.load_source(source, program, options)
}

/// The one-call path, like the seed's `gp.jit(src, func="scale")`: compile `source` (cached),
/// load it into `ctx` and return kernel `name`.
///
/// ```no_run
/// use gpukit_jit::{args, jit, open_context, LaunchConfig};
/// let ctx = open_context(0)?;
/// let src = r#"extern "C" __global__ void scale(float* x, float factor, int n) {
///     int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= factor; }"#;
/// let scale = jit(&ctx, src, "scale")?;
/// let stream = ctx.default_stream();
/// let mut x = stream.clone_htod(&[1.0f32; 1024]).unwrap();
/// scale.call().arg("x", &mut x).arg("factor", 0.5f32).arg("n", 1024i32)
///     .launch(&stream, LaunchConfig::for_elements(1024, 256))?;
/// # Ok::<(), gpukit_jit::Error>(())
/// ```
pub fn jit(ctx: &Arc<CudaContext>, source: &str, name: &str) -> Result<Kernel> {
    let program = name.split('<').next().unwrap_or(name);
    let mut options = CompileOptions::new();
    if name.contains('<') {
        options = options.name_expression(name);
    }
    load_source(ctx, source, program, &options)?.kernel(name)
}
