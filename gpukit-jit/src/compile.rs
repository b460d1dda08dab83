//! NVRTC compilation to PTX or CUBIN.

use crate::arch::Arch;
use crate::error::{Error, Result};
use crate::libs;
use crate::options::{CompileOptions, Output};
use crate::signature::{parse_kernels, KernelSignature};
use cudarc::nvrtc::sys;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::OnceLock;

/// The result of one compilation: a loadable image plus what is needed to find and check its
/// kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledModule {
    /// The program name it was compiled under (used in messages).
    pub program: String,
    /// The target it was compiled for.
    pub target: Arch,
    /// PTX (NUL-free text) or CUBIN bytes.
    pub output: Output,
    /// The image.
    pub image: Vec<u8>,
    /// `(name expression, lowered symbol)` for every requested name expression.
    pub lowered_names: Vec<(String, String)>,
    /// NVRTC's log (warnings; with `verbose_ptxas`, ptxas's resource report).
    pub log: String,
    /// Kernel signatures parsed from the source.
    pub kernels: Vec<KernelSignature>,
}

impl CompiledModule {
    /// The symbol for `name`: a name expression's lowered name, or the name itself.
    pub fn symbol_for(&self, name: &str) -> Option<String> {
        if let Some((_, lowered)) = self.lowered_names.iter().find(|(e, _)| e == name) {
            return Some(lowered.clone());
        }
        self.kernels
            .iter()
            .any(|k| k.extern_c && k.name == name)
            .then(|| name.to_string())
    }

    /// The symbol for `name`, or [`Error::KernelNotFound`] listing what the module contains.
    pub fn resolve(&self, name: &str) -> Result<String> {
        self.symbol_for(name).ok_or_else(|| Error::KernelNotFound {
            name: name.to_string(),
            program: self.program.clone(),
            available: self.available_kernels(),
        })
    }

    /// Checks raw launch arguments for kernel `name` against its signature (count, kinds,
    /// widths; a no-op when it has none: raw launches are `unsafe` anyway).
    pub fn check_launch(&self, name: &str, args: &[crate::KernelArg]) -> Result<()> {
        self.resolve(name)?;
        match self.signature_for(name) {
            Some(sig) => crate::check_args(&sig, name, args),
            None => Ok(()),
        }
    }

    /// The signature of the exact function that kernel `name` loads, which safe launches are
    /// checked against; `None` when it cannot be known for sure (those kernels launch only
    /// through `launch_unchecked`):
    ///
    /// - a name expression (a template instance, `ns::k<float>`, `&plain`): the parameter types
    ///   are decoded from its lowered (mangled) symbol, which spells the types of the function
    ///   the compiler chose, whatever namespaces, overloads, typedefs, macros or `#if`s the
    ///   source holds; parameter names come from the parsed declaration of that function when
    ///   its types agree (see the `mangled` module);
    /// - an `extern "C"` kernel (whose symbol has no types): its parsed declaration, provided
    ///   every declaration of that name in the source agrees and none lies inside a
    ///   preprocessor conditional or a macro (C linkage admits one function per name, so a
    ///   second, different definition elsewhere would not compile; one the preprocessor may
    ///   leave out or replace could).
    pub fn signature_for(&self, name: &str) -> Option<KernelSignature> {
        if let Some((_, lowered)) = self.lowered_names.iter().find(|(e, _)| e == name) {
            if lowered.starts_with("_Z") {
                let decoded = crate::mangled::decode(lowered)?;
                let base = decoded.path.last()?;
                // Parsed declarations of that name whose types, bound to this instance, are
                // the compiled ones: the source of the parameter names.
                let named: Vec<KernelSignature> = self
                    .kernels
                    .iter()
                    .filter(|k| &k.name == base && !k.extern_c)
                    .map(|k| k.instantiate(name))
                    .filter(|k| decoded.matches(k))
                    .collect();
                let unique = match named.as_slice() {
                    [one] => Some(one),
                    _ => None,
                };
                return Some(decoded.signature(unique));
            }
            return self.extern_c_signature(lowered);
        }
        self.extern_c_signature(name)
    }

    fn extern_c_signature(&self, name: &str) -> Option<KernelSignature> {
        let mut found = self.kernels.iter().filter(|k| k.extern_c && k.name == name);
        let first = found.next()?;
        if first.conditional {
            return None;
        }
        for other in found {
            if other.conditional || other.params != first.params {
                return None;
            }
        }
        Some(first.clone())
    }

    /// Kernel names that can be loaded from this module.
    pub fn available_kernels(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .kernels
            .iter()
            .filter(|k| k.extern_c)
            .map(|k| k.name.clone())
            .collect();
        names.extend(self.lowered_names.iter().map(|(e, _)| e.clone()));
        names
    }
}

/// NVRTC's version as `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    static VERSION: OnceLock<(i32, i32)> = OnceLock::new();
    if let Some(v) = VERSION.get() {
        return Ok(*v);
    }
    libs::ensure_nvrtc()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: libnvrtc is loadable (checked above); both out-pointers are valid.
    let status = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    check("nvrtcVersion", status)?;
    Ok(*VERSION.get_or_init(|| (major, minor)))
}

fn error_string(status: sys::nvrtcResult) -> String {
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any status.
    let p = unsafe { sys::nvrtcGetErrorString(status) };
    if p.is_null() {
        format!("{status:?}")
    } else {
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn check(call: &'static str, status: sys::nvrtcResult) -> Result<()> {
    if status == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::Nvrtc {
            call,
            message: error_string(status),
        })
    }
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(what, s, "contains a NUL byte"))
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: self.0 was created by nvrtcCreateProgram and is destroyed exactly once.
        unsafe {
            sys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

/// Compiles `source` for `target` with `options` (the target in `options` is ignored).
///
/// `program` names the program in logs and errors (use the kernel's name).
pub fn compile(
    source: &str,
    program: &str,
    target: Arch,
    options: &CompileOptions,
) -> Result<CompiledModule> {
    libs::ensure_nvrtc()?;
    let c_src = cstring("kernel source", source)?;
    let c_name = cstring("program name", &format!("{program}.cu"))?;
    let header_names: Vec<CString> = options
        .headers
        .iter()
        .map(|(n, _)| cstring("header name", n))
        .collect::<Result<_>>()?;
    let header_srcs: Vec<CString> = options
        .headers
        .iter()
        .map(|(_, s)| cstring("header source", s))
        .collect::<Result<_>>()?;
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let src_ptrs: Vec<*const c_char> = header_srcs.iter().map(|c| c.as_ptr()).collect();

    let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a live NUL-terminated string owned above; the two header arrays
    // have `headers.len()` entries (or are null when empty).
    let status = unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            c_src.as_ptr(),
            c_name.as_ptr(),
            header_srcs.len() as c_int,
            if src_ptrs.is_empty() {
                std::ptr::null()
            } else {
                src_ptrs.as_ptr()
            },
            if name_ptrs.is_empty() {
                std::ptr::null()
            } else {
                name_ptrs.as_ptr()
            },
        )
    };
    check("nvrtcCreateProgram", status)?;
    let prog = Program(raw);

    let exprs: Vec<CString> = options
        .name_expressions
        .iter()
        .map(|e| cstring("name expression", e))
        .collect::<Result<_>>()?;
    for e in &exprs {
        // SAFETY: prog is live, e is NUL-terminated and outlives the call.
        check("nvrtcAddNameExpression", unsafe {
            sys::nvrtcAddNameExpression(prog.0, e.as_ptr())
        })?;
    }

    let output = options.output_kind();
    let mut args = vec![match output {
        Output::Cubin => target.sm_option(),
        Output::Ptx => target.compute_option(),
    }];
    args.extend(options.to_nvrtc_args());
    let c_args: Vec<CString> = args
        .iter()
        .map(|a| cstring("compile option", a))
        .collect::<Result<_>>()?;
    let arg_ptrs: Vec<*const c_char> = c_args.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: prog is live; arg_ptrs holds c_args.len() live C strings.
    let status =
        unsafe { sys::nvrtcCompileProgram(prog.0, arg_ptrs.len() as c_int, arg_ptrs.as_ptr()) };
    let log = program_log(&prog)?;
    if status != sys::nvrtcResult::NVRTC_SUCCESS {
        let summary = summarize_log(&log, source, program, &error_string(status));
        return Err(Error::Compile {
            program: program.to_string(),
            summary,
            log,
        });
    }

    let image = match output {
        Output::Ptx => {
            let mut size = 0usize;
            // SAFETY: prog compiled successfully; size is a valid out-pointer.
            check("nvrtcGetPTXSize", unsafe {
                sys::nvrtcGetPTXSize(prog.0, &mut size)
            })?;
            let mut buf = vec![0u8; size];
            // SAFETY: buf has the size NVRTC reported.
            check("nvrtcGetPTX", unsafe {
                sys::nvrtcGetPTX(prog.0, buf.as_mut_ptr() as *mut c_char)
            })?;
            while buf.last() == Some(&0) {
                buf.pop();
            }
            buf
        }
        Output::Cubin => {
            let mut size = 0usize;
            // SAFETY: as above.
            check("nvrtcGetCUBINSize", unsafe {
                sys::nvrtcGetCUBINSize(prog.0, &mut size)
            })?;
            let mut buf = vec![0u8; size];
            // SAFETY: buf has the size NVRTC reported.
            check("nvrtcGetCUBIN", unsafe {
                sys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr() as *mut c_char)
            })?;
            buf
        }
    };

    let mut lowered_names = Vec::with_capacity(exprs.len());
    for (expr, c_expr) in options.name_expressions.iter().zip(&exprs) {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: prog is live and compiled; c_expr was added before compilation.
        check("nvrtcGetLoweredName", unsafe {
            sys::nvrtcGetLoweredName(prog.0, c_expr.as_ptr(), &mut p)
        })?;
        // SAFETY: NVRTC returns a NUL-terminated string owned by the live program.
        let lowered = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        lowered_names.push((expr.clone(), lowered));
    }

    Ok(CompiledModule {
        program: program.to_string(),
        target,
        output,
        image,
        lowered_names,
        log,
        kernels: parse_kernels(source),
    })
}

fn program_log(prog: &Program) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: prog is live; size is a valid out-pointer.
    check("nvrtcGetProgramLogSize", unsafe {
        sys::nvrtcGetProgramLogSize(prog.0, &mut size)
    })?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: buf holds at least the reported size.
    check("nvrtcGetProgramLog", unsafe {
        sys::nvrtcGetProgramLog(prog.0, buf.as_mut_ptr() as *mut c_char)
    })?;
    while buf.last() == Some(&0) {
        buf.pop();
    }
    Ok(String::from_utf8_lossy(&buf).trim_end().to_string())
}

/// The first error of an NVRTC log with its source line quoted:
///
/// ```text
/// scale.cu:3: error: identifier "fator" is undefined
///     3 |     if (idx < n) x[idx] *= fator;
/// ```
pub(crate) fn summarize_log(log: &str, source: &str, program: &str, status: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    for entry in log.lines() {
        if !entry.contains("error") {
            continue;
        }
        // NVRTC writes `name.cu(LINE): error: message`.
        if let Some(open) = entry.find('(') {
            if let Some(close) = entry[open..].find(')') {
                if let Ok(line_no) = entry[open + 1..open + close].parse::<usize>() {
                    let message = entry[open + close + 1..].trim_start_matches(':').trim();
                    let quoted = lines
                        .get(line_no.wrapping_sub(1))
                        .map(|l| format!("\n{line_no:>5} | {l}"))
                        .unwrap_or_default();
                    return format!("{program}.cu:{line_no}: {message}{quoted}");
                }
            }
        }
        return format!("{program}.cu: {}", entry.trim());
    }
    format!("{program}.cu: {status}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_summary_quotes_the_failing_line() {
        let src = "extern \"C\" __global__ void k(float* x) {\n  x[0] = fator;\n}\n";
        let log = "k.cu(2): error: identifier \"fator\" is undefined\n\n1 error detected";
        let s = summarize_log(log, src, "k", "NVRTC_ERROR_COMPILATION");
        assert!(
            s.starts_with("k.cu:2: error: identifier \"fator\" is undefined"),
            "{s}"
        );
        assert!(s.contains("    2 |   x[0] = fator;"), "{s}");
        assert_eq!(summarize_log("", src, "k", "X"), "k.cu: X");
    }
}

#[cfg(test)]
mod signature_tests {
    use super::*;
    use crate::signature::ParamKind;
    use crate::{Arg, DeviceMemory, ElemType, UseGuard};

    /// A module as `compile` returns it, with NVRTC 13.0's lowered names for `exprs` (recorded
    /// from a real compilation of `source`; tests/signatures.rs checks them with NVRTC).
    fn module(source: &str, lowered: &[(&str, &str)]) -> CompiledModule {
        CompiledModule {
            program: "t".into(),
            target: Arch::new(9, 0),
            output: Output::Cubin,
            image: Vec::new(),
            lowered_names: lowered
                .iter()
                .map(|(e, l)| (e.to_string(), l.to_string()))
                .collect(),
            log: String::new(),
            kernels: parse_kernels(source),
        }
    }

    struct Mem(ElemType);
    // SAFETY: only checked here, never launched.
    unsafe impl DeviceMemory for Mem {
        fn elem_type(&self) -> ElemType {
            self.0
        }
        fn byte_range(&self) -> std::ops::Range<u64> {
            0x1000..0x2000
        }
        fn device_ordinal(&self) -> usize {
            0
        }
        fn read_on<'s>(
            &'s self,
            _: &'s std::sync::Arc<cudarc::driver::CudaStream>,
        ) -> (u64, UseGuard<'s>) {
            (0x1000, UseGuard::none())
        }
        fn write_on<'s>(
            &'s mut self,
            _: &'s std::sync::Arc<cudarc::driver::CudaStream>,
        ) -> (u64, UseGuard<'s>) {
            (0x1000, UseGuard::none())
        }
    }

    pub(crate) const NAMESPACES: &str = r#"
        namespace a { template <typename T> __global__ void k(T* x, int n) {} }
        namespace b { template <typename T> __global__ void k(double* x, T n) {} }
    "#;

    #[test]
    fn a_namespaced_kernel_is_checked_against_itself_not_a_namesake() {
        let m = module(
            NAMESPACES,
            &[
                ("a::k<float>", "_ZN1a1kIfEEvPT_i"),
                ("b::k<int>", "_ZN1b1kIiEEvPdT_"),
            ],
        );
        // b::k<int> writes doubles: the first `k` of the source (a::k, bound to int) said int*.
        let sig = m.signature_for("b::k<int>").unwrap();
        assert_eq!(
            sig.params[0].kind,
            ParamKind::Pointer {
                pointee: "double".into(),
                writable: true
            }
        );
        assert_eq!(sig.params[0].name, "x", "names from b::k's declaration");
        let mut ints = Mem(ElemType::I32);
        let e =
            crate::typed::check_typed(&sig, "b::k<int>", 0, &[Arg::from(&mut ints), 4i32.into()])
                .unwrap_err()
                .to_string();
        assert!(e.contains("f64"), "{e}");
        let mut doubles = Mem(ElemType::F64);
        crate::typed::check_typed(
            &sig,
            "b::k<int>",
            0,
            &[Arg::from(&mut doubles), 4i32.into()],
        )
        .unwrap();
        let sig = m.signature_for("a::k<float>").unwrap();
        assert_eq!(
            sig.params[0].kind,
            ParamKind::Pointer {
                pointee: "float".into(),
                writable: true
            }
        );
    }

    pub(crate) const BRANCHES: &str = r#"
        #ifdef USE_DOUBLE
        extern "C" __global__ void scale(double* x, double f, int n) {}
        #else
        extern "C" __global__ void scale(float* x, float f, int n) {}
        #endif
        #if 0
        extern "C" __global__ void only_maybe(float* x) {}
        #endif
        #define MAKE(name) extern "C" __global__ void name(float* x) {}
        MAKE(made)
        #ifndef GUARD_H
        #define GUARD_H
        extern "C" __global__ void guarded(float* x, int n) {}
        extern "C" __global__ void declared_twice(float* x);
        extern "C" __global__ void declared_twice(float* x) {}
        #endif
    "#;

    #[test]
    fn extern_c_kernels_behind_the_preprocessor_have_no_checked_signature() {
        let m = module(BRANCHES, &[]);
        // Which `scale` is compiled is the preprocessor's choice: no safe launch.
        assert!(m.signature_for("scale").is_none());
        assert!(m.signature_for("only_maybe").is_none());
        // Declared through a macro: the parser sees only the macro's text.
        assert!(m.signature_for("made").is_none());
        assert!(m.signature_for("name").is_none());
        // An include guard is not a condition; a declaration and its definition agree.
        assert_eq!(m.signature_for("guarded").unwrap().params.len(), 2);
        assert_eq!(m.signature_for("declared_twice").unwrap().params.len(), 1);
        assert!(parse_kernels(BRANCHES)
            .iter()
            .filter(|k| k.name == "scale")
            .all(|k| k.conditional));
    }
}
