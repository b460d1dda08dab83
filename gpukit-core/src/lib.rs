//! # gpukit-core
//!
//! Devices, [`stream`]s and events; `GpuArray<T>` with NumPy-like operations; a caching device
//! allocator with per-owner accounting and quotas; pinned, stream-ordered transfers. GEMM lives
//! in [`gemm`].
//!
//! The shared runtime that gpukit-sched and gpukit-offload stand on lives here too, once per
//! process: [`DeviceAttributes`] (read once per device), the [`PinnedPool`] of page-locked host
//! buffers ([`Device::pinned`]) and the cuBLAS / cuSOLVER handle cache ([`handles`]).
//!
//! Every entry point checks for the CUDA driver first and returns [`Error::NoDriver`] instead of
//! panicking on a machine without one.
//!
//! ```no_run
//! use gpukit_core::{s, Device, GpuArray};
//! let dev = Device::open(0)?;
//! let a = GpuArray::<f32>::ones(&dev, &[2, 3])?;
//! let b = GpuArray::<f32>::arange(&dev, 0.0, 3.0, 1.0)?;   // shape [3], broadcast
//! let c = ((&a + &b) * 2.0).eval()?;                        // one fused kernel, one `?`
//! assert_eq!(c.to_vec()?, vec![2.0, 4.0, 6.0, 2.0, 4.0, 6.0]);
//! assert_eq!(c.sum()?.item()?, 24.0);
//! let col = c.slice(&s![.., 1])?;                           // a view: [4, 4]
//! println!("{c}");                                          // [[2. 4. 6.]\n [2. 4. 6.]]
//! # Ok::<(), gpukit_core::Error>(())
//! ```
//!
//! What is here, by module: [`GpuArray`] and its operations ([`mod@array`]: views and slicing,
//! elementwise math, fused operators, reductions with NumPy's result types, scans, indexing,
//! joining, softmax / layer norm, matmul, pinned host arrays, `Display`), [`random`] (Philox),
//! [`custom`] (CuPy-style `ElementwiseKernel` / `ReductionKernel`), [`gemm`], the [`alloc`]ator,
//! and the shared runtime.
//!
//! Kernels are CUDA C++ in `kernels/*.cu`, compiled through gpukit-jit at first use and kept
//! in the device's kernel set ([`Device::kernel_set`]).

pub mod alloc;
pub mod array;
pub mod attributes;
pub mod codegen;
pub mod custom;
mod device;
pub mod dtype;
pub mod dynamic;
mod error;
pub mod gemm;
pub mod handles;
pub mod kernels;
pub mod pinned;
pub mod random;
pub mod shape;
pub mod slice;
pub mod stream;
pub mod topology;
mod transfer;

pub use alloc::{
    current_owner, AllocHook, AllocStats, Allocator, DeviceBuffer, OwnerId, OwnerUsage,
};
pub use array::host::PinnedArray;
pub use array::join::{concatenate, stack};
pub use array::{
    where_, BinaryOp, CompareOp, Expr, GpuArray, LogicalOp, Predicate, ReduceOp, ScanOp, UnaryOp,
};
pub use attributes::DeviceAttributes;
pub use device::{Device, HostWait};
pub use dtype::{DType, DTypeKind};
pub use error::{Error, Result};
pub use gpukit_jit::{Arch, CompileOptions, Kernel, KernelArg, LaunchConfig};
pub use half::{bf16, f16};
pub use handles::{BlasHandle, SolverHandle};
pub use pinned::{PinnedBuffer, PinnedKind, PinnedPool};
pub use random::Generator;
pub use slice::{Ellipsis, Index, NewAxis};
pub use stream::{Event, ForeignStream, Stream};
pub use topology::DeviceIdentity;

#[cfg(test)]
mod layering {
    /// The code of `src` without comment lines.
    fn code(src: &str) -> Vec<&str> {
        src.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect()
    }

    /// The runtime below `Device` imports one way: `stream` <- `pinned` <- `transfer`, and
    /// `stream` <- `alloc`; none of them reaches up to `device` (it used to: `Stream` lived in
    /// `device.rs` and the allocator opened the `Device` on every allocation).
    #[test]
    fn the_runtime_modules_import_one_way() {
        let modules: [(&str, &str, &[&str]); 6] = [
            (
                "stream",
                include_str!("stream.rs"),
                &["crate::alloc", "crate::pinned", "crate::transfer"],
            ),
            (
                "alloc",
                include_str!("alloc/mod.rs"),
                &["crate::pinned", "crate::transfer"],
            ),
            (
                "alloc/access",
                include_str!("alloc/access.rs"),
                &["crate::alloc"],
            ),
            ("alloc/pool", include_str!("alloc/pool.rs"), &["crate::"]),
            (
                "pinned",
                include_str!("pinned.rs"),
                &["crate::alloc", "crate::transfer"],
            ),
            ("transfer", include_str!("transfer.rs"), &["crate::alloc"]),
        ];
        for (name, src, forbidden) in modules {
            for line in code(src) {
                for f in forbidden
                    .iter()
                    .chain(&["crate::device", "crate::Device", "Device::open"])
                {
                    assert!(!line.contains(f), "{name} reaches up to {f}: {line}");
                }
                // Also through grouped imports (`use crate::{device::Device, ...}`), `super::`
                // paths or a re-export: no path segment `device` and no type `Device`.
                for word in ["device", "Device"] {
                    assert!(
                        !has_path_word(line, word),
                        "{name} names `{word}` as a path or type: {line}"
                    );
                }
            }
        }
    }

    /// Whether `line` has `word` as a whole identifier used as a path segment or type (followed
    /// by `::`, or for `Device` standing alone: not part of `DeviceBuffer`, `device_ptr`, ...),
    /// outside string literals.
    fn has_path_word(line: &str, word: &str) -> bool {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let mut in_str = false;
        let chars: Vec<char> = line.chars().collect();
        let w: Vec<char> = word.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '"' && (i == 0 || chars[i - 1] != '\\') {
                in_str = !in_str;
            }
            let starts = !in_str
                && chars[i..].starts_with(&w)
                && (i == 0 || !ident(chars[i - 1]))
                && chars.get(i + w.len()).is_none_or(|&c| !ident(c));
            if starts {
                let rest: String = chars[i + w.len()..].iter().collect();
                if word == "Device" || rest.starts_with("::") {
                    return true;
                }
            }
            i += 1;
        }
        false
    }

    #[test]
    fn the_import_check_sees_grouped_imports_and_types() {
        assert!(has_path_word(
            "use crate::{alloc, device::Device};",
            "device"
        ));
        assert!(has_path_word("fn f(d: &Device) {}", "Device"));
        assert!(has_path_word("use super::super::device::open;", "device"));
        assert!(!has_path_word("let p = buf.device_ptr();", "device"));
        assert!(!has_path_word(
            "fn f(b: DeviceBuffer, o: device_ordinal) {}",
            "Device"
        ));
        assert!(!has_path_word(
            "let device = 3; x.ctx(\"the Device\")",
            "Device"
        ));
        assert!(!has_path_word("let device = 3;", "device"));
    }
}
