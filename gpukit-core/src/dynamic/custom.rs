//! User kernels ([`ElementwiseKernel`], [`ReductionKernel`]) whose output types are chosen at
//! run time from the arguments, giving [`DynArray`]s.

use super::{for_type, with, DynArray, ElementType};
use crate::custom::{ElementwiseKernel, KArg, ReductionKernel};
use crate::error::{Error, Result};

/// The element type of a C type name of the generated code.
fn element_of(ctype: &str) -> Result<ElementType> {
    ElementType::ALL
        .into_iter()
        .find(|t| t.c_name() == ctype && *t != ElementType::Bool)
        .ok_or_else(|| Error::invalid("user kernel", format!("no element type for `{ctype}`")))
}

/// A kernel argument: an array of any type, or a scalar.
pub enum DynKArg<'a> {
    /// An array.
    Array(&'a DynArray),
    /// A scalar as `(f64, i64)` (converted to the parameter's type in the kernel).
    Scalar(f64, i64),
}

fn kargs<'a>(args: &'a [DynKArg<'a>]) -> Vec<KArg<'a>> {
    args.iter()
        .map(|a| match a {
            DynKArg::Array(x) => with!(*x, y => KArg::from(y)),
            DynKArg::Scalar(f, i) => KArg::Scalar(*f, *i),
        })
        .collect()
}

/// Runs an elementwise kernel, allocating each output (broadcast shape of the array
/// arguments) in the type the call binds it to.
pub fn call_elementwise(k: &ElementwiseKernel, args: &[DynKArg<'_>]) -> Result<Vec<DynArray>> {
    let ka = kargs(args);
    let types = k.output_ctypes(&ka)?;
    if types.len() == 1 {
        let t = element_of(types[0])?;
        return for_type!(t, T => k.call1::<T>(&ka).map(|a| vec![DynArray::from_typed(a)]));
    }
    let mut shape: Vec<usize> = Vec::new();
    let mut dev = None;
    for a in args {
        if let DynKArg::Array(x) = a {
            shape = crate::shape::broadcast_shapes("ElementwiseKernel", &shape, x.shape())?;
            dev = Some(x.device().clone());
        }
    }
    let dev = dev
        .ok_or_else(|| Error::invalid("ElementwiseKernel", "needs at least one array argument"))?;
    let mut outs = types
        .iter()
        .map(|c| element_of(c).and_then(|t| DynArray::empty(&dev, &shape, t)))
        .collect::<Result<Vec<_>>>()?;
    {
        let mut refs: Vec<&mut dyn crate::custom::AnyArray> = outs
            .iter_mut()
            .map(|o| with!(o, y => y as &mut dyn crate::custom::AnyArray))
            .collect();
        k.call_into(&ka, &mut refs)?;
    }
    Ok(outs)
}

/// Runs a reduction kernel over `axes` (`None`: all).
pub fn call_reduction(
    k: &ReductionKernel,
    args: &[DynKArg<'_>],
    axes: Option<&[isize]>,
    keepdims: bool,
) -> Result<DynArray> {
    let ka = kargs(args);
    let t = element_of(k.output_ctype(&ka)?)?;
    for_type!(t, T => k.call::<T>(&ka, axes, keepdims).map(DynArray::from_typed))
}
