//! Raw kernel arguments ([`KernelArg`]) and their check against a parsed signature.
//!
//! A `KernelArg::Ptr` is a bare device address: launching with one is `unsafe`
//! ([`Kernel::launch_unchecked`](crate::Kernel::launch_unchecked)). Safe launches take typed
//! [`Arg`](crate::Arg)s instead.

use crate::error::{Error, Result};
use crate::signature::{KernelSignature, Param, ParamKind};

/// One argument of a kernel launch.
///
/// Scalars convert with `.into()` (`0.5f32.into()`, `n.into()` for `i32`, ...); a device
/// address is [`KernelArg::Ptr`]. Building one is safe; launching with one is not (see
/// [`Kernel::launch_unchecked`](crate::Kernel::launch_unchecked)).
#[derive(Debug, Clone, PartialEq)]
pub enum KernelArg {
    /// A device pointer.
    Ptr(u64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
    /// `__half` / `__nv_bfloat16`, as raw bits.
    F16Bits(u16),
    /// `char`, `int8_t`, `bool`.
    I8(i8),
    /// `unsigned char`, `uint8_t`.
    U8(u8),
    /// `short`.
    I16(i16),
    /// `unsigned short`.
    U16(u16),
    /// `int`.
    I32(i32),
    /// `unsigned int`.
    U32(u32),
    /// `long long`, `int64_t`.
    I64(i64),
    /// `size_t`, `unsigned long long`.
    U64(u64),
    /// A struct passed by value (its exact bytes; not checked).
    Bytes(Vec<u8>),
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for KernelArg {
            fn from(x: $t) -> Self { KernelArg::$v(x) }
        }
    )*};
}
from_scalar!(f32 => F32, f64 => F64, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32,
    u32 => U32, i64 => I64, u64 => U64);

impl From<half::f16> for KernelArg {
    fn from(x: half::f16) -> Self {
        KernelArg::F16Bits(x.to_bits())
    }
}

impl From<half::bf16> for KernelArg {
    fn from(x: half::bf16) -> Self {
        KernelArg::F16Bits(x.to_bits())
    }
}

impl From<bool> for KernelArg {
    fn from(x: bool) -> Self {
        KernelArg::I8(x as i8)
    }
}

impl KernelArg {
    /// A device pointer argument.
    pub fn ptr(device_ptr: u64) -> Self {
        KernelArg::Ptr(device_ptr)
    }

    /// A short description used in error messages.
    pub fn describe(&self) -> &'static str {
        match self {
            KernelArg::Ptr(_) => "a device pointer",
            KernelArg::F32(_) => "f32",
            KernelArg::F64(_) => "f64",
            KernelArg::F16Bits(_) => "a 16-bit float",
            KernelArg::I8(_) => "i8",
            KernelArg::U8(_) => "u8",
            KernelArg::I16(_) => "i16",
            KernelArg::U16(_) => "u16",
            KernelArg::I32(_) => "i32",
            KernelArg::U32(_) => "u32",
            KernelArg::I64(_) => "i64",
            KernelArg::U64(_) => "u64",
            KernelArg::Bytes(_) => "raw bytes",
        }
    }

    /// Pointer to the value, as `cuLaunchKernel` wants it. Valid while `self` is borrowed.
    pub(crate) fn as_param_ptr(&self) -> *mut std::ffi::c_void {
        use std::ffi::c_void;
        match self {
            KernelArg::Ptr(v) | KernelArg::U64(v) => v as *const u64 as *mut c_void,
            KernelArg::F32(v) => v as *const f32 as *mut c_void,
            KernelArg::F64(v) => v as *const f64 as *mut c_void,
            KernelArg::F16Bits(v) | KernelArg::U16(v) => v as *const u16 as *mut c_void,
            KernelArg::I8(v) => v as *const i8 as *mut c_void,
            KernelArg::U8(v) => v as *const u8 as *mut c_void,
            KernelArg::I16(v) => v as *const i16 as *mut c_void,
            KernelArg::I32(v) => v as *const i32 as *mut c_void,
            KernelArg::U32(v) => v as *const u32 as *mut c_void,
            KernelArg::I64(v) => v as *const i64 as *mut c_void,
            KernelArg::Bytes(b) => b.as_ptr() as *mut c_void,
        }
    }

    pub(crate) fn class(&self) -> (char, u32) {
        match self {
            KernelArg::Ptr(_) => ('p', 64),
            KernelArg::F32(_) => ('f', 32),
            KernelArg::F64(_) => ('f', 64),
            KernelArg::F16Bits(_) => ('f', 16),
            KernelArg::I8(_) | KernelArg::U8(_) => ('i', 8),
            KernelArg::I16(_) | KernelArg::U16(_) => ('i', 16),
            KernelArg::I32(_) | KernelArg::U32(_) => ('i', 32),
            KernelArg::I64(_) | KernelArg::U64(_) => ('i', 64),
            KernelArg::Bytes(b) => ('b', (b.len() * 8) as u32),
        }
    }
}

/// Checks `args` against `sig`: count, pointer vs scalar, float vs integer, and width (what
/// raw arguments can be checked for: a bare address says nothing about what it points to).
pub fn check_args(sig: &KernelSignature, kernel: &str, args: &[KernelArg]) -> Result<()> {
    check_count(sig, kernel, args.len())?;
    for (i, (p, a)) in sig.params.iter().zip(args).enumerate() {
        check_one(sig, kernel, i, p, a)?;
    }
    Ok(())
}

pub(crate) fn mismatch(kernel: &str, message: String) -> Error {
    Error::ArgumentMismatch {
        kernel: kernel.to_string(),
        message,
    }
}

/// The argument count must match the parameter count.
pub(crate) fn check_count(sig: &KernelSignature, kernel: &str, given: usize) -> Result<()> {
    if given == sig.params.len() {
        return Ok(());
    }
    let names: Vec<String> = sig
        .params
        .iter()
        .map(|p| format!("{} {}", p.ty, p.name))
        .collect();
    Err(mismatch(
        kernel,
        format!(
            "expects {} argument(s) ({}), got {given}",
            sig.params.len(),
            names.join(", "),
        ),
    ))
}

/// Checks raw argument `a` (number `i`, 0-based) against parameter `p`.
pub(crate) fn check_one(
    sig: &KernelSignature,
    kernel: &str,
    i: usize,
    p: &Param,
    a: &KernelArg,
) -> Result<()> {
    let (class, bits) = a.class();
    let wrong = |expected: &str| {
        mismatch(
            kernel,
            format!(
                "argument {} (`{} {}`) expects {expected}, got {}",
                i + 1,
                p.ty,
                p.name,
                a.describe()
            ),
        )
    };
    match &p.kind {
        ParamKind::Pointer { .. } if class != 'p' => Err(wrong("a device pointer")),
        ParamKind::Float(w) if class != 'f' || bits != *w => {
            Err(wrong(&format!("a {w}-bit float")))
        }
        ParamKind::Int(w) if class != 'i' || bits != *w => {
            Err(wrong(&format!("a {w}-bit integer")))
        }
        ParamKind::Template(t) => Err(mismatch(
            kernel,
            format!(
                "argument {} has template type `{t}`; load the kernel by a name expression such \
                 as `{}<float>` so its type is known",
                i + 1,
                sig.name
            ),
        )),
        ParamKind::Opaque(_) if class == 'p' => Err(wrong("a value (by-value struct)")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::parse_kernels;

    #[test]
    fn checks_count_kind_and_width() {
        let sig = &parse_kernels(
            r#"extern "C" __global__ void scale(float* x, float factor, int n, size_t m) {}"#,
        )[0];
        let ok = [KernelArg::Ptr(1), 0.5f32.into(), 3i32.into(), 4u64.into()];
        check_args(sig, "scale", &ok).unwrap();
        let e = check_args(sig, "scale", &ok[..2]).unwrap_err().to_string();
        assert!(
            e.contains("expects 4 argument(s)") && e.contains("scale"),
            "{e}"
        );
        let e = check_args(
            sig,
            "scale",
            &[0.5f32.into(), 0.5f32.into(), 3i32.into(), 4u64.into()],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("argument 1") && e.contains("device pointer"),
            "{e}"
        );
        let e = check_args(
            sig,
            "scale",
            &[KernelArg::Ptr(1), 1i32.into(), 3i32.into(), 4u64.into()],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("argument 2") && e.contains("32-bit float") && e.contains("i32"),
            "{e}"
        );
        let e = check_args(
            sig,
            "scale",
            &[KernelArg::Ptr(1), 0.5f64.into(), 3i32.into(), 4u64.into()],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("32-bit float, got f64"), "{e}");
        let e = check_args(
            sig,
            "scale",
            &[KernelArg::Ptr(1), 0.5f32.into(), 3i32.into(), 4i32.into()],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("argument 4") && e.contains("64-bit integer"),
            "{e}"
        );
    }
}
