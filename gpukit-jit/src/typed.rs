//! Typed launch arguments: what a safe launch ([`Kernel::launch`](crate::Kernel::launch))
//! accepts, and how it is checked.
//!
//! A kernel parameter `float* y` takes device memory of `f32` elements that the kernel may
//! write: `&mut y` (a gpukit-core `GpuArray<f32>`, a cudarc `CudaSlice<f32>`, or anything else
//! that implements [`DeviceMemory`]). `const float* x` takes `&x` or `&mut x`. Scalars (`float
//! a`, `int n`) take Rust values of exactly that type. Before anything is queued, the launch
//! checks, against the signature parsed from the source:
//!
//! - the number of arguments;
//! - for pointer parameters: that the argument is device memory, that its element type is the
//!   pointee type (`void*` accepts any), that memory the kernel may write was passed as `&mut`,
//!   and that it lives on the stream's device;
//! - that no memory the kernel may write overlaps any other memory argument (two views of one
//!   buffer passed as `&mut a` and `&b`);
//! - for scalars: float vs integer and the width.
//!
//! What the kernel's own code does with a pointer (staying within the memory it was given) is
//! the kernel source's contract, as for any foreign code: pass it the length.

use crate::args::{check_count, check_one, mismatch, KernelArg};
use crate::error::{Error, Result};
use crate::signature::{KernelSignature, ParamKind};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};
use std::ops::Range;
use std::sync::Arc;

/// Element types of device memory, as launch checks match them against a pointer parameter's
/// pointee type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// `signed char`, `int8_t` (`char` is accepted too).
    I8,
    /// `unsigned char`, `uint8_t`.
    U8,
    /// `short`, `int16_t`.
    I16,
    /// `unsigned short`, `uint16_t`.
    U16,
    /// `int`, `int32_t`.
    I32,
    /// `unsigned int`, `uint32_t`.
    U32,
    /// `long long`, `int64_t`, `long` (64-bit on Linux).
    I64,
    /// `unsigned long long`, `uint64_t`, `size_t`.
    U64,
    /// `__half`, `half`.
    F16,
    /// `__nv_bfloat16`, `nv_bfloat16`.
    Bf16,
    /// `float`.
    F32,
    /// `double`.
    F64,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::I8 | ElemType::U8 => 1,
            ElemType::I16 | ElemType::U16 | ElemType::F16 | ElemType::Bf16 => 2,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
        }
    }

    /// The canonical C name (`float`, `__half`, `long long`, ...).
    pub fn c_name(self) -> &'static str {
        match self {
            ElemType::I8 => "signed char",
            ElemType::U8 => "unsigned char",
            ElemType::I16 => "short",
            ElemType::U16 => "unsigned short",
            ElemType::I32 => "int",
            ElemType::U32 => "unsigned int",
            ElemType::I64 => "long long",
            ElemType::U64 => "unsigned long long",
            ElemType::F16 => "__half",
            ElemType::Bf16 => "__nv_bfloat16",
            ElemType::F32 => "float",
            ElemType::F64 => "double",
        }
    }

    /// The Rust name (`f32`, `bf16`, `u8`, ...).
    pub fn rust_name(self) -> &'static str {
        match self {
            ElemType::I8 => "i8",
            ElemType::U8 => "u8",
            ElemType::I16 => "i16",
            ElemType::U16 => "u16",
            ElemType::I32 => "i32",
            ElemType::U32 => "u32",
            ElemType::I64 => "i64",
            ElemType::U64 => "u64",
            ElemType::F16 => "f16",
            ElemType::Bf16 => "bf16",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
        }
    }

    /// The element type a C type name denotes (qualifiers and `std::` allowed); `None` for
    /// `void`, pointers, structs and anything else.
    ///
    /// ```
    /// use gpukit_jit::ElemType;
    /// assert_eq!(ElemType::from_c_name("const unsigned int"), Some(ElemType::U32));
    /// assert_eq!(ElemType::from_c_name("std::int64_t"), Some(ElemType::I64));
    /// assert_eq!(ElemType::from_c_name("float4"), None);
    /// ```
    pub fn from_c_name(name: &str) -> Option<ElemType> {
        let t = name
            .split_whitespace()
            .filter(|w| !matches!(*w, "const" | "volatile"))
            .collect::<Vec<_>>()
            .join(" ");
        Some(match t.trim_start_matches("std::") {
            "char" | "signed char" | "int8_t" => ElemType::I8,
            "unsigned char" | "uint8_t" => ElemType::U8,
            "short" | "short int" | "signed short" | "int16_t" => ElemType::I16,
            "unsigned short" | "unsigned short int" | "uint16_t" => ElemType::U16,
            "int" | "signed" | "signed int" | "int32_t" => ElemType::I32,
            "unsigned" | "unsigned int" | "uint32_t" => ElemType::U32,
            "long" | "long int" | "long long" | "long long int" | "int64_t" | "ptrdiff_t"
            | "intptr_t" => ElemType::I64,
            "unsigned long"
            | "unsigned long int"
            | "unsigned long long"
            | "unsigned long long int"
            | "uint64_t"
            | "size_t"
            | "uintptr_t" => ElemType::U64,
            "half" | "__half" => ElemType::F16,
            "__nv_bfloat16" | "nv_bfloat16" => ElemType::Bf16,
            "float" => ElemType::F32,
            "double" => ElemType::F64,
            _ => return None,
        })
    }
}

/// A Rust type that device memory can hold elements of, with its [`ElemType`].
pub trait Element: Copy + Send + Sync + 'static {
    /// The element type.
    const ELEM: ElemType;
}

macro_rules! element {
    ($($t:ty => $e:ident),*) => {$(
        impl Element for $t { const ELEM: ElemType = ElemType::$e; }
    )*};
}
element!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32, i64 => I64,
    u64 => U64, half::f16 => F16, half::bf16 => Bf16, f32 => F32, f64 => F64);

/// What a [`DeviceMemory`] hands back while its memory is used by a launch being queued: it
/// is dropped right after the kernel was queued (cudarc records its use events then).
pub struct UseGuard<'a>(Option<SyncOnDrop<'a>>);

impl<'a> UseGuard<'a> {
    /// No action after the launch (the memory's owner already recorded the use).
    pub fn none() -> Self {
        UseGuard(None)
    }
    /// Drops cudarc's guard after the launch (records its read / write event).
    pub fn cuda(guard: SyncOnDrop<'a>) -> Self {
        UseGuard(Some(guard))
    }
}

/// Device memory that a safe launch may pass to a pointer parameter.
///
/// # Safety
///
/// An implementation promises, for as long as the value is borrowed:
/// - every byte of [`byte_range`](Self::byte_range) is memory of one live device allocation
///   on device [`device_ordinal`](Self::device_ordinal), holding elements of
///   [`elem_type`](Self::elem_type) (any bit pattern of which is a valid value);
/// - when [`is_dense`](Self::is_dense) is true, the elements the value stands for are exactly
///   the range, densely, starting at the address returned by [`read_on`](Self::read_on) /
///   [`write_on`](Self::write_on) (the kernel sees a plain C array); launches refuse values
///   that are not dense (strided or broadcast views);
/// - after `read_on` / `write_on` with a stream, the memory is neither freed nor reused by
///   another allocation before the work queued on that stream by then has completed, even if
///   the value is dropped right after the launch.
pub unsafe trait DeviceMemory {
    /// The element type.
    fn elem_type(&self) -> ElemType;
    /// The device addresses `[start, end)` the value covers (empty for no elements).
    fn byte_range(&self) -> Range<u64>;
    /// The CUDA device the memory lives on.
    fn device_ordinal(&self) -> usize;
    /// Whether the elements are one dense run (a kernel can index them as a C array).
    fn is_dense(&self) -> bool {
        true
    }
    /// Prepares a read by work about to be queued on `stream`; returns the address to pass.
    fn read_on<'s>(&'s self, stream: &'s Arc<CudaStream>) -> (u64, UseGuard<'s>);
    /// Prepares a read and write by work about to be queued on `stream`.
    fn write_on<'s>(&'s mut self, stream: &'s Arc<CudaStream>) -> (u64, UseGuard<'s>);
}

// SAFETY: a CudaSlice is one live allocation of `len` elements of T on its stream's device;
// cudarc's event tracking (device_ptr / device_ptr_mut and the guard dropped after the launch)
// makes the slice's free wait for work queued on other streams, and its own stream is ordered.
unsafe impl<T: Element> DeviceMemory for CudaSlice<T> {
    fn elem_type(&self) -> ElemType {
        T::ELEM
    }
    fn byte_range(&self) -> Range<u64> {
        // cudarc exposes the address only through device_ptr; on the slice's own stream that
        // waits for nothing new and records a read on its own stream (harmless ordering).
        let (start, _guard) = self.device_ptr(self.stream());
        start..start + self.num_bytes() as u64
    }
    fn device_ordinal(&self) -> usize {
        self.stream().context().ordinal()
    }
    fn read_on<'s>(&'s self, stream: &'s Arc<CudaStream>) -> (u64, UseGuard<'s>) {
        let (p, g) = self.device_ptr(stream);
        (p, UseGuard::cuda(g))
    }
    fn write_on<'s>(&'s mut self, stream: &'s Arc<CudaStream>) -> (u64, UseGuard<'s>) {
        let (p, g) = self.device_ptr_mut(stream);
        (p, UseGuard::cuda(g))
    }
}

enum Repr<'a> {
    Value(KernelArg),
    Read(&'a dyn DeviceMemory),
    Write(&'a mut dyn DeviceMemory),
    Raw(KernelArg),
}

/// One argument of a safe launch: device memory (`&x` read, `&mut x` read and write) or a
/// scalar. Build them with `.into()` or the [`args!`](crate::args!) macro.
pub struct Arg<'a>(Repr<'a>);

impl std::fmt::Debug for Arg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Value(v) => write!(f, "Arg({v:?})"),
            Repr::Read(m) => write!(f, "Arg(&{} memory)", m.elem_type().rust_name()),
            Repr::Write(m) => write!(f, "Arg(&mut {} memory)", m.elem_type().rust_name()),
            Repr::Raw(v) => write!(f, "Arg(raw {v:?})"),
        }
    }
}

impl<'a, M: DeviceMemory> From<&'a M> for Arg<'a> {
    fn from(m: &'a M) -> Self {
        Arg(Repr::Read(m))
    }
}

impl<'a, M: DeviceMemory> From<&'a mut M> for Arg<'a> {
    fn from(m: &'a mut M) -> Self {
        Arg(Repr::Write(m))
    }
}

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        impl From<$t> for Arg<'_> {
            fn from(x: $t) -> Self { Arg(Repr::Value(KernelArg::from(x))) }
        }
    )*};
}
scalar_arg!(
    f32,
    f64,
    i8,
    u8,
    i16,
    u16,
    i32,
    u32,
    i64,
    u64,
    bool,
    half::f16,
    half::bf16
);

impl<'a> Arg<'a> {
    /// A raw argument: a bare device address or the bytes of a by-value struct, passed without
    /// the typed checks (its count and width are still checked).
    ///
    /// # Safety
    /// A [`KernelArg::Ptr`] (and any device address inside [`KernelArg::Bytes`]) must be valid
    /// device memory of the launch's device for every access the kernel makes through it, until
    /// the launched work has completed, and must not be written by other work meanwhile unless
    /// the kernel tolerates it.
    pub unsafe fn raw(arg: KernelArg) -> Arg<'a> {
        Arg(Repr::Raw(arg))
    }

    fn memory(&self) -> Option<(&dyn DeviceMemory, bool)> {
        match &self.0 {
            Repr::Read(m) => Some((*m, false)),
            Repr::Write(m) => Some((&**m, true)),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match &self.0 {
            Repr::Value(v) | Repr::Raw(v) => v.describe().to_string(),
            Repr::Read(m) => format!("&{} memory", m.elem_type().rust_name()),
            Repr::Write(m) => format!("&mut {} memory", m.elem_type().rust_name()),
        }
    }
}

/// Builds the argument array of a safe launch: `args![&x, &mut y, 0.5f32, n as i32]`.
#[macro_export]
macro_rules! args {
    ($($e:expr),* $(,)?) => { [$($crate::Arg::from($e)),*] };
}

/// Checks typed arguments against a signature (see the module docs): count, kinds, pointee
/// types, writability, device and overlap. `device` is the ordinal of the launch's stream.
pub fn check_typed(
    sig: &KernelSignature,
    kernel: &str,
    device: usize,
    args: &[Arg<'_>],
) -> Result<()> {
    check_count(sig, kernel, args.len())?;
    for (i, (p, a)) in sig.params.iter().zip(args).enumerate() {
        let what = || format!("argument {} (`{} {}`)", i + 1, p.ty, p.name);
        match (&p.kind, &a.0) {
            (_, Repr::Raw(raw)) => check_one(sig, kernel, i, p, raw)?,
            (ParamKind::Pointer { pointee, writable }, _) => {
                let Some((mem, write)) = a.memory() else {
                    return Err(mismatch(
                        kernel,
                        format!(
                            "{} expects device memory (`&array` or `&mut array`), got {}",
                            what(),
                            a.describe()
                        ),
                    ));
                };
                let elem = mem.elem_type();
                if pointee.trim() != "void" && pointee.trim() != "const void" {
                    match ElemType::from_c_name(pointee) {
                        Some(want) if want == elem => {}
                        // `char` is as good as `signed char` / `unsigned char` for bytes.
                        Some(ElemType::I8) if elem == ElemType::U8 && pointee.trim() == "char" => {}
                        Some(want) => {
                            return Err(mismatch(
                                kernel,
                                format!(
                                    "{} points to {} elements ({}), got {}",
                                    what(),
                                    want.rust_name(),
                                    want.c_name(),
                                    a.describe()
                                ),
                            ))
                        }
                        None => {
                            return Err(mismatch(
                                kernel,
                                format!(
                                    "{} points to `{pointee}`, which a safe launch cannot match \
                                     to an element type (use a scalar element pointer, bind the \
                                     template with a name expression, or launch_unchecked)",
                                    what()
                                ),
                            ))
                        }
                    }
                }
                if *writable && !write {
                    return Err(mismatch(
                        kernel,
                        format!(
                            "{} may be written by the kernel: pass the memory as `&mut` (or \
                             declare the parameter `const {}*`)",
                            what(),
                            pointee
                        ),
                    ));
                }
                if !mem.is_dense() {
                    return Err(mismatch(
                        kernel,
                        format!(
                            "{} got a strided or broadcast view, but the kernel indexes a plain \
                             array: pass a contiguous copy (`.contiguous()`)",
                            what()
                        ),
                    ));
                }
                if mem.device_ordinal() != device {
                    return Err(mismatch(
                        kernel,
                        format!(
                            "{} lives on device {}, the launch stream on device {device}",
                            what(),
                            mem.device_ordinal()
                        ),
                    ));
                }
            }
            (ParamKind::Opaque(ty), Repr::Value(v)) => {
                return Err(mismatch(
                    kernel,
                    format!(
                        "{} is a by-value `{ty}`, which a safe launch cannot build from {}: \
                         pass its exact bytes with `unsafe {{ Arg::raw(KernelArg::Bytes(..)) }}`",
                        what(),
                        v.describe()
                    ),
                ))
            }
            (_, Repr::Value(v)) => check_one(sig, kernel, i, p, v)?,
            (_, Repr::Read(_) | Repr::Write(_)) => {
                return Err(mismatch(
                    kernel,
                    format!(
                        "{} expects a value, got {} (a by-value struct needs `Arg::raw`)",
                        what(),
                        a.describe()
                    ),
                ))
            }
        }
    }
    check_overlap(kernel, args)
}

/// True when two half-open ranges share a byte.
pub fn ranges_overlap(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < a.end && b.start < b.end && a.start < b.end && b.start < a.end
}

fn check_overlap(kernel: &str, args: &[Arg<'_>]) -> Result<()> {
    let mems: Vec<(usize, Range<u64>, bool)> = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.memory().map(|(m, w)| (i, m.byte_range(), w)))
        .collect();
    for (x, (i, ri, wi)) in mems.iter().enumerate() {
        for (j, rj, wj) in &mems[x + 1..] {
            if (*wi || *wj) && ranges_overlap(ri, rj) {
                return Err(Error::Aliasing {
                    kernel: kernel.to_string(),
                    message: format!(
                        "arguments {} and {} overlap in device memory ({:#x}..{:#x} and \
                         {:#x}..{:#x}) and the kernel may write {}; pass a copy (e.g. \
                         `.contiguous()` of a fresh array) instead",
                        i + 1,
                        j + 1,
                        ri.start,
                        ri.end,
                        rj.start,
                        rj.end,
                        if *wi { "the first" } else { "the second" }
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The raw argument values of checked typed arguments, with the guards to drop after the
/// launch. Memory arguments are prepared for `stream` here (this is where their use is
/// recorded).
pub(crate) fn prepare<'s>(
    args: &'s mut [Arg<'_>],
    stream: &'s Arc<CudaStream>,
) -> (Vec<KernelArg>, Vec<UseGuard<'s>>) {
    let mut raw = Vec::with_capacity(args.len());
    let mut guards = Vec::new();
    for a in args.iter_mut() {
        match &mut a.0 {
            Repr::Value(v) | Repr::Raw(v) => raw.push(v.clone()),
            Repr::Read(m) => {
                let (p, g) = m.read_on(stream);
                raw.push(KernelArg::Ptr(p));
                if g.0.is_some() {
                    guards.push(g);
                }
            }
            Repr::Write(m) => {
                let (p, g) = m.write_on(stream);
                raw.push(KernelArg::Ptr(p));
                if g.0.is_some() {
                    guards.push(g);
                }
            }
        }
    }
    (raw, guards)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::parse_kernels;

    /// Fake device memory for the checks (never launched).
    struct Fake {
        elem: ElemType,
        range: Range<u64>,
        device: usize,
    }

    // SAFETY: only used by check_typed in these tests, which never dereferences or launches.
    unsafe impl DeviceMemory for Fake {
        fn elem_type(&self) -> ElemType {
            self.elem
        }
        fn byte_range(&self) -> Range<u64> {
            self.range.clone()
        }
        fn device_ordinal(&self) -> usize {
            self.device
        }
        fn read_on<'s>(&'s self, _: &'s Arc<CudaStream>) -> (u64, UseGuard<'s>) {
            (self.range.start, UseGuard::none())
        }
        fn write_on<'s>(&'s mut self, _: &'s Arc<CudaStream>) -> (u64, UseGuard<'s>) {
            (self.range.start, UseGuard::none())
        }
    }

    fn fake(elem: ElemType, start: u64, bytes: u64) -> Fake {
        Fake {
            elem,
            range: start..start + bytes,
            device: 0,
        }
    }

    fn sig() -> KernelSignature {
        parse_kernels(
            r#"extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {}"#,
        )
        .remove(0)
    }

    fn err(args: &[Arg<'_>]) -> String {
        check_typed(&sig(), "axpy", 0, args)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn typed_arguments_pass_when_everything_matches() {
        let mut y = fake(ElemType::F32, 0x1000, 400);
        let x = fake(ElemType::F32, 0x2000, 400);
        check_typed(&sig(), "axpy", 0, &args![&mut y, &x, 2.0f32, 100i32]).unwrap();
        // A writable array may go to a const parameter too.
        let mut x2 = fake(ElemType::F32, 0x3000, 400);
        check_typed(&sig(), "axpy", 0, &args![&mut y, &mut x2, 2.0f32, 100i32]).unwrap();
    }

    #[test]
    fn pointee_type_writability_device_and_kind_are_checked() {
        let mut y = fake(ElemType::F32, 0x1000, 400);
        let xd = fake(ElemType::F64, 0x2000, 800);
        let e = err(&args![&mut y, &xd, 2.0f32, 100i32]);
        assert!(
            e.contains("argument 2") && e.contains("f32") && e.contains("&f64 memory"),
            "{e}"
        );
        let y_ro = fake(ElemType::F32, 0x1000, 400);
        let x = fake(ElemType::F32, 0x2000, 400);
        let e = err(&args![&y_ro, &x, 2.0f32, 100i32]);
        assert!(e.contains("argument 1") && e.contains("&mut"), "{e}");
        let e = err(&args![&mut y, 3.0f32, 2.0f32, 100i32]);
        assert!(e.contains("expects device memory"), "{e}");
        let e = err(&args![&mut y, &x, &x, 100i32]);
        assert!(
            e.contains("argument 3") && e.contains("expects a value"),
            "{e}"
        );
        let e = err(&args![&mut y, &x, 2.0f64, 100i32]);
        assert!(e.contains("32-bit float"), "{e}");
        let e = err(&args![&mut y, &x, 2.0f32]);
        assert!(e.contains("expects 4 argument(s)"), "{e}");
        let mut other = Fake {
            device: 1,
            ..fake(ElemType::F32, 0x9000, 40)
        };
        let e = err(&args![&mut other, &x, 2.0f32, 1i32]);
        assert!(e.contains("device 1") && e.contains("device 0"), "{e}");
    }

    #[test]
    fn overlapping_writes_are_refused_and_disjoint_or_read_only_overlaps_pass() {
        let mut y = fake(ElemType::F32, 0x1000, 400);
        let x = fake(ElemType::F32, 0x1000 + 396, 400); // shares the last element of y
        let e = err(&args![&mut y, &x, 2.0f32, 100i32]);
        assert!(
            e.contains("overlap") && e.contains("arguments 1 and 2"),
            "{e}"
        );
        let x = fake(ElemType::F32, 0x1000 + 400, 400); // adjacent, no shared byte
        check_typed(&sig(), "axpy", 0, &args![&mut y, &x, 2.0f32, 100i32]).unwrap();
        // Two reads of one buffer are fine.
        let s = parse_kernels(
            r#"extern "C" __global__ void dot(const float* a, const float* b, float* out) {}"#,
        )
        .remove(0);
        let a = fake(ElemType::F32, 0x1000, 400);
        let mut out = fake(ElemType::F32, 0x8000, 4);
        check_typed(&s, "dot", 0, &args![&a, &a, &mut out]).unwrap();
        // Empty memory overlaps nothing.
        let mut empty = fake(ElemType::F32, 0x1000, 0);
        check_typed(&s, "dot", 0, &args![&a, &a, &mut empty]).unwrap();
    }

    #[test]
    fn unmatchable_pointees_and_void() {
        let s = parse_kernels(
            r#"struct P { float* p; };
            extern "C" __global__ void k(float4* v, void* any, P p) {}"#,
        )
        .remove(0);
        let mut v = fake(ElemType::F32, 0x1000, 64);
        let mut any = fake(ElemType::U8, 0x2000, 64);
        let e = check_typed(&s, "k", 0, &args![&mut v, &mut any, 0i32])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("float4") && e.contains("launch_unchecked"),
            "{e}"
        );
        let s = parse_kernels(r#"extern "C" __global__ void k(void* any, P p) {}"#).remove(0);
        // A by-value struct only goes through an unsafe raw argument.
        let e = check_typed(&s, "k", 0, &args![&mut any, 0i32])
            .unwrap_err()
            .to_string();
        assert!(e.contains("by-value `P`") && e.contains("Arg::raw"), "{e}");
        // SAFETY: checked only, never launched.
        let raw = unsafe { Arg::raw(KernelArg::Bytes(vec![0; 8])) };
        check_typed(&s, "k", 0, &[Arg::from(&mut any), raw]).unwrap();
    }

    #[test]
    fn c_names() {
        for e in [
            ElemType::I8,
            ElemType::U8,
            ElemType::I16,
            ElemType::U16,
            ElemType::I32,
            ElemType::U32,
            ElemType::I64,
            ElemType::U64,
            ElemType::F16,
            ElemType::Bf16,
            ElemType::F32,
            ElemType::F64,
        ] {
            assert_eq!(ElemType::from_c_name(e.c_name()), Some(e));
            assert_eq!(
                ElemType::from_c_name(&format!("const {}", e.c_name())),
                Some(e)
            );
        }
        assert_eq!(ElemType::from_c_name("size_t"), Some(ElemType::U64));
        assert_eq!(ElemType::from_c_name("void"), None);
        assert_eq!(<half::bf16 as Element>::ELEM.size(), 2);
    }
}
