//! User kernels in the style of CuPy's `ElementwiseKernel` and `ReductionKernel`: typed
//! parameters and a C expression; the indexing, broadcasting and type conversion are
//! generated ([`crate::codegen`]), compiled once per element-type binding through the device's
//! kernel set (the one kernel cache) and launched like the built-in operations.
//!
//! ```no_run
//! use gpukit_core::custom::{ElementwiseKernel, KArg, ReductionKernel};
//! use gpukit_core::{Device, GpuArray};
//! let dev = Device::open(0)?;
//! let x = GpuArray::<f32>::arange(&dev, 0.0, 6.0, 1.0)?.reshape(&[2, 3])?;
//! let y = GpuArray::<f32>::ones(&dev, &[3])?;            // broadcast over the rows
//! let axpy = ElementwiseKernel::new("T x, T y, T a", "T z", "z = a * x + y;", "axpy")?;
//! let z: GpuArray<f32> = axpy.call1(&[KArg::from(&x), KArg::from(&y), 2.0f32.into()])?;
//! let l2 = ReductionKernel::new("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "float", "l2")?;
//! let n: GpuArray<f32> = l2.call(&[KArg::from(&x)], Some(&[-1]), false)?;   // per row
//! # Ok::<(), gpukit_core::Error>(())
//! ```
//!
//! Parameters: element types by Rust, NumPy or C name (`f32`, `float32`, `float`, ...) or a
//! placeholder (`T`, bound from the first array argument declared with it; every other use must
//! agree). An argument is an array ([`KArg::from`] `&GpuArray<_>`) or a scalar (any Rust number,
//! converted to the parameter's type). Inside the operation every name is a value of its
//! compute type (f16 and bf16 compute in float); outputs are assigned; `i` is the element's
//! linear index and `n` the element count. Like any kernel source, the operation is device
//! code: it must only use the values it is given (it never sees the raw pointers).

use crate::codegen::{self, Param, Role};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels;
use crate::shape;
use crate::stream::Stream;
use crate::GpuArray;
use gpukit_jit::{CompileOptions, KernelArg, LaunchConfig, ProgramSpec};
use std::borrow::Cow;
use std::ops::Range;

mod sealed {
    pub trait Sealed {}
}

/// An array of any element type, as a user kernel argument (implemented by [`GpuArray`]).
pub trait AnyArray: sealed::Sealed {
    /// The element C type name.
    fn ctype(&self) -> &'static str;
    /// The element Rust type name.
    fn rust_name(&self) -> &'static str;
    /// The shape.
    fn shape(&self) -> &[usize];
    /// Element strides.
    fn strides(&self) -> &[isize];
    /// The device.
    fn device(&self) -> &Device;
    /// Address of the first element.
    fn device_ptr(&self) -> u64;
    /// Device addresses the elements occupy.
    fn byte_range(&self) -> Range<u64>;
    /// Whether the layout is dense row-major.
    fn is_contiguous(&self) -> bool;
    /// Records use on `stream` (the memory is not reused before the work there completes).
    fn record_use(&self, stream: &Stream);
    /// A fresh contiguous copy (for an input that overlaps an output).
    fn fresh(&self) -> Result<Box<dyn AnyArray>>;
}

impl<T: DType> sealed::Sealed for GpuArray<T> {}

impl<T: DType> AnyArray for GpuArray<T> {
    fn ctype(&self) -> &'static str {
        T::NAME
    }
    fn rust_name(&self) -> &'static str {
        T::RUST_NAME
    }
    fn shape(&self) -> &[usize] {
        GpuArray::shape(self)
    }
    fn strides(&self) -> &[isize] {
        GpuArray::strides(self)
    }
    fn device(&self) -> &Device {
        GpuArray::device(self)
    }
    fn device_ptr(&self) -> u64 {
        GpuArray::device_ptr(self)
    }
    fn byte_range(&self) -> Range<u64> {
        GpuArray::byte_range(self)
    }
    fn is_contiguous(&self) -> bool {
        GpuArray::is_contiguous(self)
    }
    fn record_use(&self, stream: &Stream) {
        self.used_on(stream)
    }
    fn fresh(&self) -> Result<Box<dyn AnyArray>> {
        Ok(Box::new(self.astype::<T>()?))
    }
}

/// One argument of a user kernel call.
pub enum KArg<'a> {
    /// An array of any element type.
    Array(&'a dyn AnyArray),
    /// A scalar, as `(f64, i64)` (converted to the parameter's type in the kernel).
    Scalar(f64, i64),
}

impl<'a, T: DType> From<&'a GpuArray<T>> for KArg<'a> {
    fn from(a: &'a GpuArray<T>) -> Self {
        KArg::Array(a)
    }
}

macro_rules! scalar_karg {
    ($($t:ty),*) => {$(
        impl From<$t> for KArg<'_> {
            fn from(x: $t) -> Self {
                KArg::Scalar(<$t as DType>::to_f64(x), <$t as DType>::to_i64(x))
            }
        }
    )*};
}
scalar_karg!(f32, f64, i32, u32, i64, u64, u8, half::f16, half::bf16);

/// Declared `(type, name)` parameters resolved against arguments.
struct Binding {
    /// Placeholder name -> C type.
    placeholders: Vec<(String, &'static str)>,
}

impl Binding {
    fn resolve(
        &mut self,
        ty: &str,
        actual: Option<&'static str>,
        what: &str,
    ) -> Result<&'static str> {
        if let Some(c) = codegen::c_type(ty) {
            if let Some(a) = actual {
                if a != c {
                    return Err(Error::invalid(
                        what,
                        format!("is declared `{ty}` ({c}) but the array holds {a}; convert it with astype"),
                    ));
                }
            }
            return Ok(c);
        }
        if let Some((_, c)) = self.placeholders.iter().find(|(p, _)| p == ty) {
            if let Some(a) = actual {
                if a != *c {
                    return Err(Error::invalid(
                        what,
                        format!(
                            "`{ty}` is bound to {c} by an earlier argument, this array holds {a}"
                        ),
                    ));
                }
            }
            return Ok(c);
        }
        match actual {
            Some(a) => {
                self.placeholders.push((ty.to_string(), a));
                Ok(a)
            }
            None => Err(Error::invalid(
                what,
                format!("the type placeholder `{ty}` is not bound by any array argument"),
            )),
        }
    }
}

/// The C types of `outputs` for a call with `args`: placeholders bound by the array arguments
/// of `inputs` (as a call binds them), concrete types as declared.
fn output_ctypes(
    op: &str,
    inputs: &[(String, String)],
    outputs: &[(String, String)],
    args: &[KArg<'_>],
) -> Result<Vec<&'static str>> {
    if args.len() != inputs.len() {
        return Err(Error::invalid(
            op,
            format!("takes {} input(s), got {}", inputs.len(), args.len()),
        ));
    }
    let mut bind = Binding {
        placeholders: Vec::new(),
    };
    for ((ty, name), a) in inputs.iter().zip(args) {
        if let KArg::Array(x) = a {
            bind.resolve(ty, Some(x.ctype()), &format!("{op}: input `{name}`"))?;
        }
    }
    outputs
        .iter()
        .map(|(ty, name)| bind.resolve(ty, None, &format!("{op}: output `{name}`")))
        .collect()
}

/// The parts every generated kernel call shares: device, output shape, launch of the arrays.
fn common_device<'a>(op: &str, arrays: &[&'a dyn AnyArray]) -> Result<&'a Device> {
    let first = arrays.first().ok_or_else(|| {
        Error::invalid(
            op,
            "needs at least one array argument (the device and shape come from them)",
        )
    })?;
    for a in arrays {
        if a.device() != first.device() {
            return Err(Error::DeviceMismatch {
                op: op.to_string(),
                lhs: first.device().ordinal(),
                rhs: a.device().ordinal(),
            });
        }
    }
    Ok(first.device())
}

fn ranges_overlap(a: &Range<u64>, b: &Range<u64>) -> bool {
    gpukit_jit::typed::ranges_overlap(a, b)
}

/// An elementwise kernel from typed parameters and an operation (see the module docs).
#[derive(Debug, Clone)]
pub struct ElementwiseKernel {
    name: String,
    inputs: Vec<(String, String)>,
    outputs: Vec<(String, String)>,
    operation: String,
    preamble: String,
}

impl ElementwiseKernel {
    /// A kernel with inputs `in_params` (`"T x, float32 y"`), outputs `out_params`, C
    /// statements `operation` assigning the outputs, and a `name` (a C identifier, used for the
    /// generated function and in messages).
    pub fn new(in_params: &str, out_params: &str, operation: &str, name: &str) -> Result<Self> {
        let bad = |reason: String| Error::invalid(format!("ElementwiseKernel `{name}`"), reason);
        if !codegen::is_identifier(name) {
            return Err(bad(format!("`{name}` is not a C identifier")));
        }
        let inputs = codegen::parse_params(in_params, &[]).map_err(bad)?;
        let outputs = codegen::parse_params(out_params, &[]).map_err(bad)?;
        if outputs.is_empty() {
            return Err(bad("needs at least one output parameter".into()));
        }
        if let Some((_, n)) = outputs
            .iter()
            .find(|(_, n)| inputs.iter().any(|(_, m)| m == n))
        {
            return Err(bad(format!("`{n}` is both an input and an output")));
        }
        Ok(ElementwiseKernel {
            name: name.to_string(),
            inputs,
            outputs,
            operation: operation.to_string(),
            preamble: String::new(),
        })
    }

    /// Device code placed before the kernel (helper functions, constants).
    pub fn with_preamble(mut self, code: &str) -> Self {
        self.preamble = code.to_string();
        self
    }

    /// The C element types of the outputs for a call with `args` (for callers that choose the
    /// output arrays' types at run time).
    pub fn output_ctypes(&self, args: &[KArg<'_>]) -> Result<Vec<&'static str>> {
        output_ctypes(
            &format!("ElementwiseKernel `{}`", self.name),
            &self.inputs,
            &self.outputs,
            args,
        )
    }

    /// Runs the kernel on `args` and returns its single output, allocated with the broadcast
    /// shape of the array arguments; `O` must be the output's element type.
    pub fn call1<O: DType>(&self, args: &[KArg<'_>]) -> Result<GpuArray<O>> {
        if self.outputs.len() != 1 {
            return Err(Error::invalid(
                format!("ElementwiseKernel `{}`", self.name),
                format!("has {} outputs: use call_into", self.outputs.len()),
            ));
        }
        let arrays: Vec<&dyn AnyArray> = args
            .iter()
            .filter_map(|a| match a {
                KArg::Array(x) => Some(*x),
                KArg::Scalar(..) => None,
            })
            .collect();
        let dev = common_device(&self.name, &arrays)?;
        let mut shape_out: Vec<usize> = Vec::new();
        for a in &arrays {
            shape_out = shape::broadcast_shapes(&self.name, &shape_out, a.shape())?;
        }
        let mut out = GpuArray::<O>::alloc_on(dev, &shape_out, &dev.stream())?;
        self.call_into(args, &mut [&mut out])?;
        Ok(out)
    }

    /// Runs the kernel writing into `outs` (one per output parameter, all of the broadcast
    /// shape of the inputs; they may be strided views, and inputs may alias them element for
    /// element; any other overlap is copied first).
    pub fn call_into(&self, args: &[KArg<'_>], outs: &mut [&mut dyn AnyArray]) -> Result<()> {
        let op = format!("ElementwiseKernel `{}`", self.name);
        if args.len() != self.inputs.len() || outs.len() != self.outputs.len() {
            return Err(Error::invalid(
                &op,
                format!(
                    "takes {} input(s) and {} output(s), got {} and {}",
                    self.inputs.len(),
                    self.outputs.len(),
                    args.len(),
                    outs.len()
                ),
            ));
        }
        let mut bind = Binding {
            placeholders: Vec::new(),
        };
        let mut params = Vec::new();
        for ((ty, name), a) in self.inputs.iter().zip(args) {
            let what = format!("{op}: input `{name}`");
            let (actual, role) = match a {
                KArg::Array(x) => (Some(x.ctype()), Role::In),
                KArg::Scalar(..) => (None, Role::Scalar),
            };
            // Scalars bind nothing; resolve them after the arrays.
            if role == Role::In {
                let c = bind.resolve(ty, actual, &what)?;
                params.push(Param {
                    name: name.clone(),
                    ctype: c,
                    role,
                });
            } else {
                params.push(Param {
                    name: name.clone(),
                    ctype: "",
                    role,
                });
            }
        }
        for ((ty, name), o) in self.outputs.iter().zip(outs.iter()) {
            let c = bind.resolve(ty, Some(o.ctype()), &format!("{op}: output `{name}`"))?;
            params.push(Param {
                name: name.clone(),
                ctype: c,
                role: Role::Out,
            });
        }
        for ((ty, name), p) in self.inputs.iter().zip(params.iter_mut()) {
            if p.role == Role::Scalar {
                p.ctype = bind.resolve(ty, None, &format!("{op}: scalar `{name}`"))?;
            }
        }
        // Shapes, devices, aliasing.
        let in_arrays: Vec<&dyn AnyArray> = args
            .iter()
            .filter_map(|a| match a {
                KArg::Array(x) => Some(*x),
                KArg::Scalar(..) => None,
            })
            .collect();
        let mut all: Vec<&dyn AnyArray> = in_arrays.clone();
        all.extend(outs.iter().map(|o| &**o as &dyn AnyArray));
        let dev = common_device(&op, &all)?.clone();
        let mut out_shape: Vec<usize> = Vec::new();
        for a in &in_arrays {
            out_shape = shape::broadcast_shapes(&op, &out_shape, a.shape())?;
        }
        for o in outs.iter() {
            if o.shape() != out_shape.as_slice() {
                return Err(Error::ShapeMismatch {
                    op: format!("{op} (outputs must have the inputs' broadcast shape)"),
                    lhs: out_shape.clone(),
                    rhs: o.shape().to_vec(),
                });
            }
            if shape::has_repeated_elements(o.shape(), o.strides()) {
                return Err(Error::invalid(
                    &op,
                    "an output is a broadcast view with repeated elements",
                ));
            }
        }
        for (i, a) in outs.iter().enumerate() {
            for b in &outs[i + 1..] {
                if ranges_overlap(&a.byte_range(), &b.byte_range()) {
                    return Err(Error::invalid(&op, "two outputs share memory"));
                }
            }
        }
        let mut fresh: Vec<Box<dyn AnyArray>> = Vec::new();
        let mut inputs: Vec<&dyn AnyArray> = Vec::new();
        let mut copies: Vec<usize> = Vec::new();
        for (k, a) in in_arrays.iter().enumerate() {
            let strides = shape::broadcast_strides(&op, a.shape(), a.strides(), &out_shape)?;
            let clash = outs.iter().any(|o| {
                ranges_overlap(&a.byte_range(), &o.byte_range())
                    && !(a.device_ptr() == o.device_ptr()
                        && a.ctype() == o.ctype()
                        && strides == o.strides())
            });
            if clash {
                fresh.push(a.fresh()?);
                copies.push(k);
            }
        }
        let mut next_fresh = fresh.iter();
        for (k, a) in in_arrays.iter().enumerate() {
            if copies.contains(&k) {
                if let Some(f) = next_fresh.next() {
                    inputs.push(&**f);
                    continue;
                }
            }
            inputs.push(*a);
        }
        let n = shape::numel(&op, &out_shape)?;
        if n == 0 {
            return Ok(());
        }
        // Operands in parameter order (arrays only): inputs, then outputs.
        let mut operands: Vec<&dyn AnyArray> = inputs.clone();
        operands.extend(outs.iter().map(|o| &**o as &dyn AnyArray));
        let contig = operands
            .iter()
            .all(|a| a.is_contiguous() && a.shape() == out_shape.as_slice());
        let strides: Vec<Vec<isize>> = operands
            .iter()
            .map(|a| shape::broadcast_strides(&op, a.shape(), a.strides(), &out_shape))
            .collect::<Result<_>>()?;
        let layout = shape::layout_bytes(&op, &out_shape, &strides)?;
        let binding: Vec<&str> = params.iter().map(|p| p.ctype).collect();
        let id = format!(
            "gpukit-core/elementwise/{}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.name, self.inputs, self.outputs, self.operation, self.preamble, binding
        );
        // SAFETY: the id spells every input of the generated source and its options (the name,
        // the parameters, the operation and preamble quoted and escaped by `{:?}`, so two
        // different kernels never share an id, and the element-type binding); no other crate
        // registers `gpukit-core/` ids (the kernel set's contract).
        let kernel = unsafe {
            dev.kernel_set().kernel(&id, &self.name, || ProgramSpec {
                source: Cow::Owned(codegen::elementwise_source(
                    &self.name,
                    &params,
                    &self.operation,
                    &self.preamble,
                )),
                program: Cow::Borrowed(self.name.as_str()),
                options: CompileOptions::new().header("common.cuh", kernels::COMMON_H),
            })
        }?;
        let stream = dev.stream();
        let mut kargs: Vec<KernelArg> = Vec::new();
        for a in &operands {
            a.record_use(&stream);
            kargs.push(KernelArg::Ptr(a.device_ptr()));
        }
        for (p, a) in params.iter().zip(args) {
            if p.role == Role::Scalar {
                if let KArg::Scalar(f, i) = a {
                    kargs.push((*f).into());
                    kargs.push((*i).into());
                }
            }
        }
        kargs.push((n as i64).into());
        kargs.push((contig as i32).into());
        kargs.push(KernelArg::Bytes(layout));
        kernels::launch(&kernel, &stream, kernels::grid_for(&dev, n, 32), &kargs)
    }
}

/// A reduction kernel (see the module docs): each element is mapped with `map_expr`, values
/// are combined with `reduce_expr` (over `a` and `b`, in `reduce_type`, starting from
/// `identity`), and `post_map` (statements reading `a`) assigns the output.
#[derive(Debug, Clone)]
pub struct ReductionKernel {
    name: String,
    inputs: Vec<(String, String)>,
    output: (String, String),
    map_expr: String,
    reduce_expr: String,
    post_map: String,
    identity: String,
    reduce_type: String,
    preamble: String,
}

impl ReductionKernel {
    /// A reduction with inputs `in_params`, one output `out_param`, and the four expressions;
    /// `reduce_type` is an element type or a placeholder of the inputs.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        in_params: &str,
        out_param: &str,
        map_expr: &str,
        reduce_expr: &str,
        post_map: &str,
        identity: &str,
        reduce_type: &str,
        name: &str,
    ) -> Result<Self> {
        let bad = |reason: String| Error::invalid(format!("ReductionKernel `{name}`"), reason);
        if !codegen::is_identifier(name) {
            return Err(bad(format!("`{name}` is not a C identifier")));
        }
        let inputs = codegen::parse_params(in_params, &codegen::REDUCTION_OPERANDS).map_err(bad)?;
        let mut outs =
            codegen::parse_params(out_param, &codegen::REDUCTION_OPERANDS).map_err(bad)?;
        if outs.len() != 1 {
            return Err(bad(format!("needs exactly one output, got `{out_param}`")));
        }
        if codegen::c_type(reduce_type).is_none() && !codegen::is_placeholder(reduce_type) {
            return Err(bad(format!(
                "`{reduce_type}` is not an element type or placeholder"
            )));
        }
        let output = outs.remove(0);
        if inputs.iter().any(|(_, n)| *n == output.1) {
            return Err(bad(format!(
                "`{}` is both an input and the output",
                output.1
            )));
        }
        Ok(ReductionKernel {
            name: name.to_string(),
            inputs,
            output,
            map_expr: map_expr.to_string(),
            reduce_expr: reduce_expr.to_string(),
            post_map: post_map.to_string(),
            identity: identity.to_string(),
            reduce_type: reduce_type.to_string(),
            preamble: String::new(),
        })
    }

    /// Device code placed before the kernels.
    pub fn with_preamble(mut self, code: &str) -> Self {
        self.preamble = code.to_string();
        self
    }

    /// The C element type of the output for a call with `args`.
    pub fn output_ctype(&self, args: &[KArg<'_>]) -> Result<&'static str> {
        let op = format!("ReductionKernel `{}`", self.name);
        let outs = output_ctypes(&op, &self.inputs, std::slice::from_ref(&self.output), args)?;
        outs.first()
            .copied()
            .ok_or_else(|| Error::invalid(op, "has no output"))
    }

    /// Reduces over `axes` of the inputs' broadcast shape (`None`: all), keeping them as
    /// length 1 with `keepdims`; `O` must be the output's element type.
    pub fn call<O: DType>(
        &self,
        args: &[KArg<'_>],
        axes: Option<&[isize]>,
        keepdims: bool,
    ) -> Result<GpuArray<O>> {
        let op = format!("ReductionKernel `{}`", self.name);
        if args.len() != self.inputs.len() {
            return Err(Error::invalid(
                &op,
                format!("takes {} input(s), got {}", self.inputs.len(), args.len()),
            ));
        }
        let mut bind = Binding {
            placeholders: Vec::new(),
        };
        let mut params = Vec::new();
        for ((ty, name), a) in self.inputs.iter().zip(args) {
            if let KArg::Array(x) = a {
                let c = bind.resolve(ty, Some(x.ctype()), &format!("{op}: input `{name}`"))?;
                params.push(Param {
                    name: name.clone(),
                    ctype: c,
                    role: Role::In,
                });
            } else {
                params.push(Param {
                    name: name.clone(),
                    ctype: "",
                    role: Role::Scalar,
                });
            }
        }
        for ((ty, name), p) in self.inputs.iter().zip(params.iter_mut()) {
            if p.role == Role::Scalar {
                p.ctype = bind.resolve(ty, None, &format!("{op}: scalar `{name}`"))?;
            }
        }
        let oc = bind.resolve(&self.output.0, Some(O::NAME), &format!("{op}: output"))?;
        let rt = bind.resolve(&self.reduce_type, None, &format!("{op}: reduce type"))?;
        params.push(Param {
            name: self.output.1.clone(),
            ctype: oc,
            role: Role::Out,
        });
        let arrays: Vec<&dyn AnyArray> = args
            .iter()
            .filter_map(|a| match a {
                KArg::Array(x) => Some(*x),
                KArg::Scalar(..) => None,
            })
            .collect();
        let dev = common_device(&op, &arrays)?.clone();
        let mut full: Vec<usize> = Vec::new();
        for a in &arrays {
            full = shape::broadcast_shapes(&op, &full, a.shape())?;
        }
        let ax = shape::normalize_axes(&op, axes, full.len())?;
        let kept: Vec<usize> = (0..full.len()).filter(|i| !ax.contains(i)).collect();
        let out_shape: Vec<usize> = (0..full.len())
            .filter_map(|i| {
                if ax.contains(&i) {
                    keepdims.then_some(1)
                } else {
                    Some(full[i])
                }
            })
            .collect();
        let outputs: usize = kept.iter().map(|&i| full[i]).product();
        let r: usize = ax.iter().map(|&i| full[i]).product();
        let stream = dev.stream();
        let out = GpuArray::<O>::alloc_on(&dev, &out_shape, &stream)?;
        if outputs == 0 {
            return Ok(out);
        }
        // The inputs read as [kept..., reduced...]: permute their broadcast strides.
        let perm: Vec<usize> = kept.iter().chain(ax.iter()).copied().collect();
        let pshape: Vec<usize> = perm.iter().map(|&i| full[i]).collect();
        let mut strides = Vec::new();
        let mut contig = true;
        for a in &arrays {
            let s = shape::broadcast_strides(&op, a.shape(), a.strides(), &full)?;
            let ps: Vec<isize> = perm.iter().map(|&i| s[i]).collect();
            contig &=
                shape::is_contiguous(&pshape, &ps) && !shape::has_repeated_elements(&pshape, &ps);
            strides.push(ps);
        }
        if strides.is_empty() {
            strides.push(vec![0; pshape.len()]);
        }
        let layout = shape::layout_bytes(&op, &pshape, &strides)?;
        let binding: Vec<&str> = params.iter().map(|p| p.ctype).collect();
        let id = format!(
            "gpukit-core/reduction/{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{rt}",
            self.name,
            self.inputs,
            self.output,
            self.map_expr,
            self.reduce_expr,
            self.post_map,
            self.identity,
            self.reduce_type,
            self.preamble,
            binding
        );
        let spec = || ProgramSpec {
            source: Cow::Owned(codegen::reduction_source(
                &self.name,
                &params,
                &self.map_expr,
                &self.reduce_expr,
                &self.post_map,
                &self.identity,
                rt,
                &self.preamble,
            )),
            program: Cow::Borrowed(self.name.as_str()),
            options: CompileOptions::new().header("common.cuh", kernels::COMMON_H),
        };
        // SAFETY: the id spells every input of the generated source and its options (free text
        // quoted and escaped by `{:?}`, the element types, the reduction type); no other crate
        // registers `gpukit-core/` ids (the kernel set's contract).
        let kernel = unsafe { dev.kernel_set().kernel(&id, &self.name, spec) }?;
        // Few outputs over a long reduced axis: split it over grid.y and combine.
        let sms = dev.multiprocessor_count().max(1) as usize;
        let splits = if outputs < 2 * sms && r > 65536 {
            (4 * sms)
                .div_ceil(outputs)
                .min(r.div_ceil(16384))
                .clamp(1, 1024)
        } else {
            1
        };
        let chunk = r.div_ceil(splits).max(1);
        let elem = std::mem::size_of::<f64>();
        let partial = if splits > 1 {
            Some(GpuArray::<u8>::alloc_on(
                &dev,
                &[outputs * splits * elem],
                &stream,
            )?)
        } else {
            None
        };
        let mut kargs: Vec<KernelArg> = Vec::new();
        for a in &arrays {
            a.record_use(&stream);
            kargs.push(KernelArg::Ptr(a.device_ptr()));
        }
        for (p, a) in params.iter().zip(args) {
            if p.role == Role::Scalar {
                if let KArg::Scalar(f, i) = a {
                    kargs.push((*f).into());
                    kargs.push((*i).into());
                }
            }
        }
        out.used_on(&stream);
        kargs.push(out.arg());
        kargs.push(partial.as_ref().map_or(KernelArg::Ptr(0), |p| p.arg()));
        kargs.push((outputs as i64).into());
        kargs.push((r as i64).into());
        kargs.push((chunk as i64).into());
        kargs.push((splits as i32).into());
        kargs.push((contig as i32).into());
        kargs.push(KernelArg::Bytes(layout));
        let blocks = outputs.min(65535 * 4) as u32;
        kernels::launch(
            &kernel,
            &stream,
            LaunchConfig::new((blocks, splits as u32, 1), (256, 1, 1)),
            &kargs,
        )?;
        if let Some(p) = &partial {
            // SAFETY: as above (the same id and spec).
            let combine = unsafe {
                dev.kernel_set()
                    .kernel(&id, &format!("{}_combine", self.name), spec)
            }?;
            kernels::launch(
                &combine,
                &stream,
                LaunchConfig::new((blocks, 1, 1), (256, 1, 1)),
                &[
                    p.arg(),
                    out.arg(),
                    (outputs as i64).into(),
                    (splits as i32).into(),
                ],
            )?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_checked_when_made() {
        assert!(ElementwiseKernel::new("T x", "T y", "y = x;", "copy").is_ok());
        let e = ElementwiseKernel::new("T x", "", "", "k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least one output"), "{e}");
        let e = ElementwiseKernel::new("T x", "T x", "", "k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("both an input and an output"), "{e}");
        let e = ElementwiseKernel::new("T x", "T y", "", "1bad")
            .unwrap_err()
            .to_string();
        assert!(e.contains("C identifier"), "{e}");
        let e = ReductionKernel::new("T x", "T y, T z", "x", "a+b", "y=a", "0", "T", "r")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly one output"), "{e}");
        let e = ReductionKernel::new("T x", "T y", "x", "a+b", "y=a", "0", "word", "r")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`word`"), "{e}");
    }

    #[test]
    fn placeholders_bind_once() {
        let mut b = Binding {
            placeholders: Vec::new(),
        };
        assert_eq!(b.resolve("T", Some("float"), "x").unwrap(), "float");
        assert_eq!(b.resolve("T", None, "s").unwrap(), "float");
        let e = b.resolve("T", Some("double"), "y").unwrap_err().to_string();
        assert!(e.contains("bound to float"), "{e}");
        let e = b
            .resolve("float32", Some("int"), "z")
            .unwrap_err()
            .to_string();
        assert!(e.contains("astype"), "{e}");
        assert!(b.resolve("U", None, "w").is_err());
    }
}
