//! # gpukit-offload
//!
//! A calibrated BLAS/LAPACK offload dispatcher: each call runs where this machine finishes it
//! first, the CPU library or cuBLAS/cuSOLVER, copies included.
//!
//! * [`ops`]: the catalogue (routine, precision s/d/c/z, shape, flops, bytes moved).
//! * [`model`]: predicted CPU and GPU time (copy in + compute + copy out) interpolated in log
//!   space over calibrated grids keyed by op, precision and *shape features* (so rectangular
//!   calls are judged by their shape, not their flop count); decision levels 1..10 map to a
//!   required speedup from 3.0x down to 0.9x.
//! * [`profile`]: the versioned JSON profile (embedded default calibrated on an H200 host;
//!   `offload calibrate` writes `~/.config/gpukit/offload-profile.json` or
//!   `$GPUKIT_OFFLOAD_PROFILE`). A corrupt file is a clear error and the default is used.
//! * [`learn`]: run-time corrections per op, precision and size bucket, CPU re-checks, persisted
//!   into the profile at exit.
//! * [`dispatch`]: the decision, lazy GPU start-up, fallback, statistics ([`stats`]).
//! * [`cpu`] / [`gpu`]: the backends. The CPU backend is the system OpenBLAS/LAPACK loaded at run
//!   time (exact LAPACK semantics, the library the cost model was calibrated with; see
//!   [`cpu`] for why not a pure-Rust library). The GPU backend stages through pinned memory,
//!   overlaps copies with compute and runs calls from several threads at once, each on its own
//!   lane of streams and handles.
//! * [`api`]: the typed API on host slices ([`Offload`]).
//! * [`interpose`]: the LD_PRELOAD shim's machinery and [`export_blas_symbols!`].
//! * `cli` (feature `cli`): the `offload` command line (`calibrate`, `run`, `explain`) as a
//!   function, for the `offload` example and the Python package's console script.
//!
//! ```no_run
//! use gpukit_offload::{Offload, Trans};
//! let off = Offload::global();
//! let n = 2048;
//! let a = vec![1.0f64; n * n];
//! let b = vec![1.0f64; n * n];
//! let mut c = vec![0.0f64; n * n];
//! let out = off.gemm(Trans::No, Trans::No, n, n, n, 1.0, &a, n, &b, n, 0.0, &mut c, n)?;
//! println!("ran on {:?} in {:.3}s", out.backend, out.seconds);
//! # Ok::<(), gpukit_offload::Error>(())
//! ```
//!
//! ## Environment
//! | variable | values |
//! | --- | --- |
//! | `GPUKIT_OFFLOAD_LEVEL` | 1..10 (default 8: offload when predicted at least 1.05x faster) |
//! | `GPUKIT_OFFLOAD_GPU` | `auto` (default), `off` (CPU only, calls still timed) or `always` (every supported call on the GPU) |
//! | `GPUKIT_OFFLOAD_LOG` | `off` (default), `summary` (one line per routine at exit), `calls` |
//! | `GPUKIT_OFFLOAD_PROFILE` | profile path |
//! | `GPUKIT_OFFLOAD_PERSIST` | `1` (default) / `0`: save learned corrections at exit |
//! | `GPUKIT_OFFLOAD_CPU_LIB` | CPU BLAS/LAPACK library for the typed API |
//! | `GPUKIT_OFFLOAD_SHARE` | `auto` (default) / `off`: `offload run` shares the GPU among the program's processes through a private MPS daemon ([`share`]) |
//! | `GPUKIT_OFFLOAD_INJECT_FAILURE` | tests: `oom`, `error`, `info` make every GPU call fail |

pub mod api;
pub mod calibrate;
pub mod call;
#[cfg(feature = "cli")]
mod child;
#[cfg(feature = "cli")]
pub mod cli;
pub mod cpu;
pub mod dispatch;
pub mod embedded;
mod error;
pub mod exit_hook;
pub mod ffi;
mod fork;
pub mod gpu;
pub mod interpose;
pub mod learn;
pub mod library;
pub mod model;
pub mod ops;
pub mod output;
pub mod profile;
pub mod request;
pub mod routines;
pub mod share;
pub mod stats;
mod sync;

pub use api::{c32, c64, Complex, Element, Offload};
pub use dispatch::{Config, Dispatcher, GpuMode, LogMode, Outcome, StartPolicy};
pub use error::{Error, Result};
pub use model::Backend;
pub use ops::{
    Diag, EigRange, OpKind, Precision, Routine, Shape, Side, SvdJob, Trans, Uplo, Variant,
};
pub use request::Request;
pub use stats::{Reason, StatsSnapshot};
