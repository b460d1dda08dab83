//! `gpukit.jit(src, func=..., options=[...], block_size=256)`: CUDA C++ kernels compiled with
//! NVRTC (through gpukit-jit's kernel cache) and called with arrays and scalars, checked against
//! the signature parsed from the source before launch; and `ElementwiseKernel` /
//! `ReductionKernel` from expressions (gpukit-core's `custom`).

use crate::array::Array;
use crate::convert;
use crate::errors::CoreResult;
use gpukit_core::custom;
use gpukit_core::dynamic::custom::{call_elementwise, call_reduction, DynKArg};
use gpukit_core::dynamic::{DynArray, ElementType, ScalarValue};
use gpukit_jit::signature::{parse_kernels, KernelSignature, ParamKind};
use gpukit_jit::{Arg, CompileOptions, LaunchConfig};
use parking_lot::Mutex;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::collections::HashMap;

/// A CUDA kernel compiled from source at first use.
///
/// Call it with arrays and scalars, positionally or by parameter name:
/// ``kernel(x, factor=0.5, n=x.size)``. Each argument is checked against the parameter it
/// binds before launch: an array's element type must be the pointer's element type (a
/// ``const`` pointer may receive any array of that type, a non-``const`` one is written), a
/// scalar must fit the parameter's type (a float for an integer parameter, or a NumPy scalar
/// of another width, is a ``TypeError``). The grid covers the largest array argument with
/// ``block_size`` threads per block, unless ``grid=`` / ``block=`` / ``shared_mem=`` are given
/// (keyword-only launch options).
#[pyclass(module = "gpukit", name = "Kernel", frozen)]
pub struct PyKernel {
    name: String,
    source: String,
    options: Vec<String>,
    block_size: u32,
    signature: KernelSignature,
    compiled: Mutex<HashMap<usize, gpukit_jit::Kernel>>,
}

/// ``gpukit.jit(src, func="name", options=[...], block_size=256)``: a callable kernel (see
/// :class:`Kernel`). A ``func`` not defined as a ``__global__`` function in ``src`` raises
/// ``ValueError`` naming it; compilation happens at the first call (or :meth:`Kernel.compile`).
#[pyfunction]
#[pyo3(signature = (src, func, options=None, block_size=256))]
pub fn jit(
    src: &str,
    func: &str,
    options: Option<Vec<String>>,
    block_size: u32,
) -> PyResult<PyKernel> {
    if block_size == 0 || block_size > 1024 {
        return Err(PyValueError::new_err(format!(
            "block_size must be between 1 and 1024 threads, got {block_size}"
        )));
    }
    let sigs = parse_kernels(src);
    let bare = func.split('<').next().unwrap_or(func).trim();
    let matching: Vec<&KernelSignature> = sigs.iter().filter(|s| s.name == bare).collect();
    let sig = match matching.as_slice() {
        [] => {
            let names: Vec<&str> = sigs.iter().map(|s| s.name.as_str()).collect();
            return Err(PyValueError::new_err(format!(
                "function {func:?} is not a __global__ function of the source (it defines: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        }
        [one] => {
            if func.contains('<') {
                one.instantiate(func)
            } else {
                (*one).clone()
            }
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "function {func:?} is defined more than once in the source (overloads, namespaces \
                 or #if branches); give it a unique name"
            )))
        }
    };
    Ok(PyKernel {
        name: func.to_string(),
        source: src.to_string(),
        options: options.unwrap_or_default(),
        block_size,
        signature: sig,
        compiled: Mutex::new(HashMap::new()),
    })
}

impl PyKernel {
    fn compile_options(&self) -> PyResult<CompileOptions> {
        let mut o = CompileOptions::new();
        for opt in &self.options {
            o = o.extra(opt.clone());
        }
        if self.name.contains('<') {
            o = o.name_expression(self.name.clone());
        }
        Ok(o)
    }

    /// The compiled kernel for `dev` (compiling and loading on first use).
    fn kernel_for(
        &self,
        py: Python<'_>,
        dev: &gpukit_core::Device,
    ) -> PyResult<gpukit_jit::Kernel> {
        if let Some(k) = self.compiled.lock().get(&dev.ordinal()) {
            return Ok(k.clone());
        }
        let opts = self.compile_options()?;
        let program = self
            .name
            .split('<')
            .next()
            .unwrap_or(&self.name)
            .to_string();
        let (src, name, dev2) = (self.source.clone(), self.name.clone(), dev.clone());
        let k = py
            .detach(move || dev2.load_kernel(&src, &program, &opts, &name))
            .py()?;
        self.compiled.lock().insert(dev.ordinal(), k.clone());
        Ok(k)
    }
}

/// A scalar argument converted to the parameter's exact type.
fn scalar_arg<'a>(param: &gpukit_jit::signature::Param, v: &Bound<'_, PyAny>) -> PyResult<Arg<'a>> {
    let s = convert::scalar(v)?.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "parameter `{}` ({}) takes a number, got {}",
            param.name,
            param.ty,
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let wrong = |what: &str| {
        PyTypeError::new_err(format!(
            "parameter `{} ({})` cannot take {what}",
            param.name, param.ty
        ))
    };
    let ty = param.ty.as_str();
    match &param.kind {
        ParamKind::Float(bits) => {
            if let Some(t) = s.dtype {
                if !t.is_float() || t.itemsize() * 8 != *bits as usize {
                    return Err(wrong(&format!(
                        "a {t} scalar (a {bits}-bit float is needed)"
                    )));
                }
            }
            let x = match s.value {
                ScalarValue::Float(x) => x,
                ScalarValue::Int(i) => i as f64,
                ScalarValue::Bool(_) => return Err(wrong("a bool")),
            };
            Ok(match bits {
                16 if ty.contains("bfloat") => Arg::from(half::bf16::from_f64(x)),
                16 => Arg::from(half::f16::from_f64(x)),
                32 => Arg::from(x as f32),
                _ => Arg::from(x),
            })
        }
        ParamKind::Int(bits) => {
            let i = match s.value {
                ScalarValue::Int(i) => i,
                ScalarValue::Bool(b) => b as i128,
                ScalarValue::Float(_) => return Err(wrong("a float (an integer is needed)")),
            };
            let unsigned = ty.contains("unsigned") || ty.starts_with('u') || ty == "size_t";
            if let Some(t) = s.dtype {
                if !(t.is_integer() || t == ElementType::Bool) || t.itemsize() * 8 != *bits as usize
                {
                    return Err(wrong(&format!(
                        "a {t} scalar (a {bits}-bit integer is needed)"
                    )));
                }
            }
            let range_err = || {
                PyOverflowError::new_err(format!(
                    "{i} does not fit parameter `{} ({})`",
                    param.name, param.ty
                ))
            };
            Ok(match (bits, unsigned, ty == "bool") {
                (8, _, true) => Arg::from(i != 0),
                (8, true, _) => Arg::from(u8::try_from(i).map_err(|_| range_err())?),
                (8, false, _) => Arg::from(i8::try_from(i).map_err(|_| range_err())?),
                (16, true, _) => Arg::from(u16::try_from(i).map_err(|_| range_err())?),
                (16, false, _) => Arg::from(i16::try_from(i).map_err(|_| range_err())?),
                (32, true, _) => Arg::from(u32::try_from(i).map_err(|_| range_err())?),
                (32, false, _) => Arg::from(i32::try_from(i).map_err(|_| range_err())?),
                (_, true, _) => Arg::from(u64::try_from(i).map_err(|_| range_err())?),
                (_, false, _) => Arg::from(i64::try_from(i).map_err(|_| range_err())?),
            })
        }
        other => Err(PyTypeError::new_err(format!(
            "parameter `{}` has type {} ({other:?}), which a Python call cannot pass",
            param.name, param.ty
        ))),
    }
}

fn dims(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u32, u32, u32)>> {
    let Some(o) = obj else { return Ok(None) };
    if o.is_none() {
        return Ok(None);
    }
    if let Ok(x) = o.extract::<u32>() {
        return Ok(Some((x, 1, 1)));
    }
    let v: Vec<u32> = o.extract()?;
    match v.as_slice() {
        [x] => Ok(Some((*x, 1, 1))),
        [x, y] => Ok(Some((*x, *y, 1))),
        [x, y, z] => Ok(Some((*x, *y, *z))),
        _ => Err(PyValueError::new_err(
            "grid and block take 1 to 3 dimensions",
        )),
    }
}

#[pymethods]
impl PyKernel {
    /// The function's name (with its template arguments when given).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The CUDA C++ source.
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    /// The NVRTC options.
    #[getter]
    fn options(&self) -> Vec<String> {
        self.options.clone()
    }

    /// Threads per block of the default launch.
    #[getter]
    fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Whether the kernel has been compiled and loaded for the default device.
    #[getter]
    fn is_compiled(&self) -> bool {
        let ord = crate::array::device(None).map(|d| d.ordinal()).unwrap_or(0);
        self.compiled.lock().contains_key(&ord)
    }

    /// The parameters as ``(name, type)`` pairs, as parsed from the source.
    #[getter]
    fn signature(&self) -> Vec<(String, String)> {
        self.signature
            .params
            .iter()
            .map(|p| (p.name.clone(), p.ty.clone()))
            .collect()
    }

    /// Compiles and loads the kernel for ``device`` (default: the default device) now.
    #[pyo3(signature = (device=None))]
    fn compile(&self, py: Python<'_>, device: Option<usize>) -> PyResult<()> {
        let dev = crate::array::device(device)?;
        self.kernel_for(py, &dev).map(|_| ())
    }

    /// The PTX NVRTC makes of the kernel for ``arch`` (``"sm_80"``, ``"sm_90a"``, ...), without
    /// a GPU (NVRTC only); a compile error raises ``CompileError`` with the log.
    #[pyo3(signature = (arch="sm_90"))]
    fn ptx(&self, py: Python<'_>, arch: &str) -> PyResult<String> {
        let target: gpukit_jit::Arch = arch
            .parse()
            .map_err(|e: gpukit_jit::Error| PyValueError::new_err(e.to_string()))?;
        let opts = self.compile_options()?.output(gpukit_jit::Output::Ptx);
        let program = self
            .name
            .split('<')
            .next()
            .unwrap_or(&self.name)
            .to_string();
        let src = self.source.clone();
        let m = py
            .detach(move || gpukit_jit::compile(&src, &program, target, &opts))
            .py()?;
        String::from_utf8(m.image.clone()).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn __repr__(&self) -> String {
        format!(
            "gpukit.Kernel({:?}, block_size={}, options={:?})",
            self.name, self.block_size, self.options
        )
    }

    /// Launches the kernel on the calling thread's current stream (see the class docs).
    #[pyo3(signature = (*args, grid=None, block=None, shared_mem=0, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        grid: Option<&Bound<'_, PyAny>>,
        block: Option<&Bound<'_, PyAny>>,
        shared_mem: u32,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let params = &self.signature.params;
        let mut given: Vec<Option<Bound<'_, PyAny>>> = vec![None; params.len()];
        if args.len() > params.len() {
            return Err(PyTypeError::new_err(format!(
                "{} takes {} arguments, {} given",
                self.name,
                params.len(),
                args.len()
            )));
        }
        for (i, a) in args.iter().enumerate() {
            given[i] = Some(a);
        }
        if let Some(kw) = kwargs {
            for (k, v) in kw.iter() {
                let name: String = k.extract()?;
                let i = params.iter().position(|p| p.name == name).ok_or_else(|| {
                    let known: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
                    PyTypeError::new_err(format!(
                        "{} has no parameter `{name}` (parameters: {})",
                        self.name,
                        known.join(", ")
                    ))
                })?;
                if given[i].replace(v).is_some() {
                    return Err(PyTypeError::new_err(format!(
                        "{}: parameter `{name}` given twice",
                        self.name
                    )));
                }
            }
        }
        let missing: Vec<&str> = params
            .iter()
            .zip(&given)
            .filter(|(_, g)| g.is_none())
            .map(|(p, _)| p.name.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(PyTypeError::new_err(format!(
                "{}: missing argument(s): {}",
                self.name,
                missing.join(", ")
            )));
        }
        // arrays first (owned clones the launch arguments borrow), then scalars
        let mut arrays: Vec<Option<DynArray>> = Vec::with_capacity(params.len());
        let mut dev: Option<gpukit_core::Device> = None;
        let mut largest = 0usize;
        for (p, g) in params.iter().zip(&given) {
            let v = g
                .as_ref()
                .ok_or_else(|| PyTypeError::new_err("missing argument"))?;
            if matches!(p.kind, ParamKind::Pointer { .. }) {
                let a = convert::array(v, &format!("{} parameter `{}`", self.name, p.name))?;
                if let Some(d) = &dev {
                    if d != a.device() {
                        return Err(PyValueError::new_err(format!(
                            "{}: arrays on devices {} and {}",
                            self.name,
                            d.ordinal(),
                            a.device().ordinal()
                        )));
                    }
                } else {
                    dev = Some(a.device().clone());
                }
                largest = largest.max(a.len());
                arrays.push(Some(a));
            } else {
                arrays.push(None);
            }
        }
        let dev = match dev {
            Some(d) => d,
            None => crate::array::device(None)?,
        };
        let kernel = self.kernel_for(py, &dev)?;
        let mut launch_args: Vec<Arg<'_>> = Vec::with_capacity(params.len());
        for ((p, g), a) in params.iter().zip(&given).zip(arrays.iter_mut()) {
            match (a, &p.kind) {
                (Some(arr), ParamKind::Pointer { writable, .. }) => {
                    launch_args.push(if *writable {
                        arr.as_arg_mut()
                    } else {
                        arr.as_arg()
                    });
                }
                _ => {
                    let v = g
                        .as_ref()
                        .ok_or_else(|| PyTypeError::new_err("missing argument"))?;
                    launch_args.push(scalar_arg(p, v)?);
                }
            }
        }
        let block = dims(block)?.unwrap_or((self.block_size, 1, 1));
        let grid = match dims(grid)? {
            Some(g) => g,
            None => {
                let threads = block.0 as usize * block.1 as usize * block.2 as usize;
                let blocks = largest.div_ceil(threads.max(1)).max(1);
                let blocks = u32::try_from(blocks).map_err(|_| {
                    PyValueError::new_err(
                        "the array is too large for a one-dimensional grid; pass grid=",
                    )
                })?;
                (blocks, 1, 1)
            }
        };
        let cfg = LaunchConfig::new(grid, block).with_shared_mem(shared_mem);
        let stream = dev.stream();
        kernel.launch(stream.cuda(), cfg, launch_args).py()
    }
}

/// ``gpukit.ElementwiseKernel(in_params, out_params, operation, name, preamble="")``: a kernel
/// from typed parameters and a C expression, as CuPy's (indexing, broadcasting and conversions
/// are generated). Calling it with the inputs returns the output array (a tuple for several).
#[pyclass(module = "gpukit", name = "ElementwiseKernel", frozen)]
pub struct PyElementwiseKernel(custom::ElementwiseKernel);

#[pymethods]
impl PyElementwiseKernel {
    #[new]
    #[pyo3(signature = (in_params, out_params, operation, name, preamble=""))]
    fn py_new(
        in_params: &str,
        out_params: &str,
        operation: &str,
        name: &str,
        preamble: &str,
    ) -> PyResult<Self> {
        let k = custom::ElementwiseKernel::new(in_params, out_params, operation, name)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyElementwiseKernel(k.with_preamble(preamble)))
    }

    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        let owned = owned_args(args)?;
        let dargs = dyn_args(&owned);
        let outs = call_elementwise(&self.0, &dargs).py()?;
        if outs.len() == 1 {
            let one = outs
                .into_iter()
                .next()
                .ok_or_else(|| PyValueError::new_err("no output"))?;
            return Ok(Py::new(py, Array::new(one))?.into_any());
        }
        let items = outs.into_iter().map(Array::new).collect::<Vec<_>>();
        Ok(PyTuple::new(py, items)?.into_any().unbind())
    }
}

/// ``gpukit.ReductionKernel(in_params, out_params, map_expr, reduce_expr, post_map_expr,
/// identity, reduce_type, name, preamble="")``: a reduction from expressions, as CuPy's.
/// Called as ``k(*inputs, axis=None, keepdims=False)``.
#[pyclass(module = "gpukit", name = "ReductionKernel", frozen)]
pub struct PyReductionKernel(custom::ReductionKernel);

#[pymethods]
impl PyReductionKernel {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, reduce_type, name, preamble=""))]
    fn py_new(
        in_params: &str,
        out_params: &str,
        map_expr: &str,
        reduce_expr: &str,
        post_map_expr: &str,
        identity: &str,
        reduce_type: &str,
        name: &str,
        preamble: &str,
    ) -> PyResult<Self> {
        let k = custom::ReductionKernel::new(
            in_params,
            out_params,
            map_expr,
            reduce_expr,
            post_map_expr,
            identity,
            reduce_type,
            name,
        )
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyReductionKernel(k.with_preamble(preamble)))
    }

    #[pyo3(signature = (*args, axis=None, keepdims=false))]
    fn __call__(
        &self,
        args: &Bound<'_, PyTuple>,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
    ) -> PyResult<Array> {
        let owned = owned_args(args)?;
        let dargs = dyn_args(&owned);
        let axes = convert::axes(axis)?;
        Ok(Array::new(
            call_reduction(&self.0, &dargs, axes.as_deref(), keepdims).py()?,
        ))
    }
}

/// Kernel arguments: arrays (owned clones) and scalars.
enum Owned {
    Array(DynArray),
    Scalar(f64, i64),
}

fn owned_args(args: &Bound<'_, PyTuple>) -> PyResult<Vec<Owned>> {
    args.iter()
        .map(
            |a| match convert::required_operand(&a, "kernel argument")? {
                convert::Operand::Array(x) => Ok(Owned::Array(x)),
                convert::Operand::Scalar(s) => Ok(match s.value {
                    ScalarValue::Float(f) => Owned::Scalar(f, f as i64),
                    ScalarValue::Int(i) => Owned::Scalar(i as f64, i as i64),
                    ScalarValue::Bool(b) => Owned::Scalar(b as u8 as f64, b as i64),
                }),
            },
        )
        .collect()
}

fn dyn_args(owned: &[Owned]) -> Vec<DynKArg<'_>> {
    owned
        .iter()
        .map(|o| match o {
            Owned::Array(a) => DynKArg::Array(a),
            Owned::Scalar(f, i) => DynKArg::Scalar(*f, *i),
        })
        .collect()
}

/// Registers the kernel classes and `jit`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKernel>()?;
    m.add_class::<PyElementwiseKernel>()?;
    m.add_class::<PyReductionKernel>()?;
    m.add_function(wrap_pyfunction!(jit, m)?)?;
    Ok(())
}
