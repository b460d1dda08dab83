//! Compile options: target, defines, include paths, in-memory headers, fast math, line info,
//! register cap, name expressions.

use crate::arch::Arch;

/// What NVRTC produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    /// PTX for the virtual architecture; the driver JIT-compiles it at load time.
    Ptx,
    /// Machine code (CUBIN) for the real architecture; ptxas runs at compile time, so register
    /// use and spills are known (see [`crate::CompiledModule::log`] with `verbose_ptxas`).
    Cubin,
}

/// Options for one compilation. Everything here is part of the cache key.
///
/// ```
/// use gpukit_jit::{Arch, CompileOptions, Output};
/// let opts = CompileOptions::new()
///     .target(Arch::new(8, 0))
///     .output(Output::Cubin)
///     .define("TILE", "64")
///     .header("tile.h", "#define PAD 4")
///     .fast_math(true)
///     .name_expression("axpy<float>");
/// assert!(opts.to_nvrtc_args().contains(&"-DTILE=64".to_string()));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Target architecture; `None` means "the current device's" (set by the loader).
    pub target: Option<Arch>,
    /// PTX or CUBIN (default CUBIN: errors and spills show at compile time).
    pub output: Option<Output>,
    /// `-DNAME=VALUE` (or `-DNAME` when the value is empty).
    pub defines: Vec<(String, String)>,
    /// `-I` directories.
    pub include_paths: Vec<String>,
    /// Headers given by name and content, `#include`-able from the source.
    pub headers: Vec<(String, String)>,
    /// `--use_fast_math`.
    pub fast_math: bool,
    /// `-lineinfo`.
    pub line_info: bool,
    /// `--maxrregcount=N`.
    pub max_registers: Option<u32>,
    /// Template instantiations to request and look up by their C++ name (`gemm<float,128>`).
    pub name_expressions: Vec<String>,
    /// Ask ptxas for its resource report (registers, shared memory, spills) in the log.
    pub verbose_ptxas: bool,
    /// C++ dialect, default `c++17`.
    pub std: Option<String>,
    /// Further raw NVRTC options, passed last.
    pub extra: Vec<String>,
}

impl CompileOptions {
    /// Default options: CUBIN for the current device, C++17.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the target architecture.
    pub fn target(mut self, arch: Arch) -> Self {
        self.target = Some(arch);
        self
    }
    /// Sets PTX or CUBIN output.
    pub fn output(mut self, output: Output) -> Self {
        self.output = Some(output);
        self
    }
    /// Adds `-DNAME=VALUE`.
    pub fn define(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.defines.push((name.into(), value.into()));
        self
    }
    /// Adds an include directory.
    pub fn include_path(mut self, dir: impl Into<String>) -> Self {
        self.include_paths.push(dir.into());
        self
    }
    /// Adds an in-memory header.
    pub fn header(mut self, name: impl Into<String>, content: impl Into<String>) -> Self {
        self.headers.push((name.into(), content.into()));
        self
    }
    /// Enables `--use_fast_math`.
    pub fn fast_math(mut self, on: bool) -> Self {
        self.fast_math = on;
        self
    }
    /// Enables `-lineinfo`.
    pub fn line_info(mut self, on: bool) -> Self {
        self.line_info = on;
        self
    }
    /// Caps registers per thread.
    pub fn max_registers(mut self, n: u32) -> Self {
        self.max_registers = Some(n);
        self
    }
    /// Requests a template instantiation by name expression.
    pub fn name_expression(mut self, expr: impl Into<String>) -> Self {
        self.name_expressions.push(expr.into());
        self
    }
    /// Asks ptxas for its resource report in the compile log (CUBIN only).
    pub fn verbose_ptxas(mut self, on: bool) -> Self {
        self.verbose_ptxas = on;
        self
    }
    /// Adds a raw NVRTC option.
    pub fn extra(mut self, option: impl Into<String>) -> Self {
        self.extra.push(option.into());
        self
    }

    /// The output kind in force (CUBIN unless PTX was asked for).
    pub fn output_kind(&self) -> Output {
        self.output.unwrap_or(Output::Cubin)
    }

    /// The NVRTC argument list, without the architecture option.
    pub fn to_nvrtc_args(&self) -> Vec<String> {
        let mut args = vec![format!("-std={}", self.std.as_deref().unwrap_or("c++17"))];
        for (name, value) in &self.defines {
            if value.is_empty() {
                args.push(format!("-D{name}"));
            } else {
                args.push(format!("-D{name}={value}"));
            }
        }
        for dir in &self.include_paths {
            args.push(format!("-I{dir}"));
        }
        if self.fast_math {
            args.push("--use_fast_math".into());
        }
        if self.line_info {
            args.push("-lineinfo".into());
        }
        if let Some(n) = self.max_registers {
            args.push(format!("--maxrregcount={n}"));
        }
        if self.verbose_ptxas && self.output_kind() == Output::Cubin {
            args.push("--ptxas-options=-v".into());
        }
        args.extend(self.extra.iter().cloned());
        args
    }
}
