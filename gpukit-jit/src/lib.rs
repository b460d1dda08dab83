//! # gpukit-jit
//!
//! CUDA C++ in, launchable kernel out, compiled once per machine.
//!
//! - [`compile()`]: NVRTC to PTX or CUBIN for a given [`Arch`] (`sm_80`, `sm_90`, `sm_90a`)
//!   with [`CompileOptions`]: defines, include paths, in-memory headers, fast math, line info,
//!   register cap, name expressions for templates, ptxas resource reports.
//! - [`KernelCache`]: a bounded in-memory LRU over an on-disk store shared by processes
//!   (`GPUKIT_CACHE_DIR`, `GPUKIT_CACHE=off`), keyed by source, headers, options, target and
//!   NVRTC version, written atomically and checksummed.
//! - [`KernelSet`]: the loaded modules and kernels of a device (one per device per process),
//!   the only layer between the cache and launches; [`jit()`] and [`load_source`] go through it.
//! - [`Kernel::launch`]: a safe launch with typed arguments ([`Arg`]: `&array` read, `&mut
//!   array` written, scalars), checked against the signature parsed from the source, pointee
//!   types and overlapping writes included ([`typed`]). Raw device addresses
//!   ([`KernelArg::Ptr`]) launch only through the `unsafe` [`Kernel::launch_unchecked`].
//! - [`libs`] and [`testing`]: library presence checks (cudarc panics when a CUDA library is
//!   missing; gpukit returns [`Error::LibraryMissing`]) and the workspace's GPU test gate.
//!
//! # What safe code may do with CUDA source
//!
//! CUDA C++ is code that Rust cannot check, like a C library a program links. Its author
//! promises two things, and gpukit relies on them:
//!
//! 1. each kernel reads and writes only the elements of the memory it is given (within the
//!    lengths it is passed), and treats its values as the types it declares;
//! 2. the source does not redefine the language: no macro named like a keyword or like a type
//!    the launch checks read (`float`, `int`, `__half`, ...), and `__half` / `__nv_bfloat16`
//!    are the 16-bit float types.
//!
//! Given that, **safe code may compile, load and launch any source** ([`compile()`],
//! [`load_source`], [`jit()`], [`Kernel::launch`]): every argument of a safe launch is checked
//! against the parameter types of the exact function the module contains (a name expression's
//! mangled symbol, decoded by the compiler's own spelling; an `extern "C"` kernel's single
//! unconditional declaration), memory arguments are live, on the launch's device, ordered on its
//! stream and not written through an alias. A kernel whose compiled parameter types are not known
//! for sure has no checked signature and launches only unsafely.
//!
//! **Outside the boundary, and therefore `unsafe` or private:** raw device addresses
//! ([`Kernel::launch_unchecked`], [`Kernel::launch_raw`], [`Arg::raw`]); registering a program
//! under an id that other code launches unchecked ([`KernelSet::kernel`], [`KernelSet::module`]:
//! gpukit-core's built-in kernels are registered that way, and safe code must not be able to
//! replace them); serving an image for a key computed from other inputs (the keyed lookup is
//! crate-private, and disk entries are tied to their key and refused unless the directory and
//! the entry are the user's own: see [`cache`]).
//!
//! ```no_run
//! use gpukit_jit::{compile, Arch, CompileOptions, Output};
//! let src = r#"extern "C" __global__ void scale(float* x, float f, int n) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= f; }"#;
//! let m = compile(src, "scale", Arch::new(8, 0), &CompileOptions::new().output(Output::Cubin))?;
//! assert_eq!(m.kernels[0].name, "scale");
//! # Ok::<(), gpukit_jit::Error>(())
//! ```

pub mod arch;
mod args;
pub mod cache;
mod compile;
mod error;
mod kernel_set;
pub mod libs;
mod mangled;
mod module;
mod options;
pub mod signature;
pub mod testing;
pub mod typed;

pub use arch::Arch;
pub use args::{check_args, KernelArg};
pub use cache::{CacheConfig, CacheKey, CacheStats, KernelCache};
pub use compile::{compile, nvrtc_version, CompiledModule};
pub use error::{Error, Result};
pub use kernel_set::{KernelSet, ProgramSpec};
pub use module::{jit, load_source, open_context, Call, Kernel, LaunchConfig, Module};
pub use options::{CompileOptions, Output};
pub use typed::{Arg, DeviceMemory, ElemType, Element, UseGuard};

/// Re-exported so users of gpukit-jit need not depend on cudarc for contexts and streams.
pub use cudarc;
