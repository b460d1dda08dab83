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
