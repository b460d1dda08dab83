//! The arithmetic operators: `+ - * /` and unary `-` on arrays (owned or borrowed), scalars and
//! expressions build an [`Expr`], which [`Expr::eval`] runs as **one** generated kernel
//! (broadcasting included) and which is where the only `?` goes:
//!
//! ```no_run
//! # use gpukit_core::{Device, GpuArray};
//! # let dev = Device::open(0)?;
//! let x = GpuArray::<f32>::ones(&dev, &[4, 3])?;
//! let b = GpuArray::<f32>::arange(&dev, 0.0, 3.0, 1.0)?;   // broadcast over rows
//! let y = (2.0 * &x + &b * &b - 1.0).eval()?;              // one kernel, one `?`
//! let z = (-&y / 4.0).eval()?;
//! # Ok::<(), gpukit_core::Error>(())
//! ```
//!
//! Why an expression and not `Result<GpuArray>` from each operator: a `Result` cannot be the
//! left operand of an operator with a scalar on the right (Rust's orphan rule forbids `impl
//! Mul<f32> for Result<..>`), so chains would need a `?` per operator; and evaluating each
//! operator alone reads and writes the whole array once per operator, where the fused kernel
//! does it once. Nothing fails while an expression is built; every error (shapes that do not
//! broadcast, arrays on different devices) is returned by `eval`, before anything is queued.
//! The named methods (`x.add(&y)?`, `x.mul_scalar(2.0)?`, `x.add_into(&y, &mut out)?`) stay
//! eager, one built-in kernel each.
//!
//! Integer arithmetic wraps around and division by zero gives 0 (as the built-in methods);
//! floats follow IEEE. The
//! generated kernel for an expression shape and element type is compiled once per process
//! (cached on disk across processes) and found again by its text.

use super::ops::{check_out, same_device, unalias};
use super::GpuArray;
use crate::codegen::{self, Param, Role};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels;
use crate::shape;
use gpukit_jit::{CompileOptions, KernelArg, ProgramSpec};
use std::borrow::Cow;
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone)]
enum Node {
    Leaf(usize),
    Scalar(usize),
    Neg(Box<Node>),
    Bin(Op, Box<Node>, Box<Node>),
}

impl Node {
    fn shift(self, leaves: usize, scalars: usize) -> Node {
        match self {
            Node::Leaf(i) => Node::Leaf(i + leaves),
            Node::Scalar(i) => Node::Scalar(i + scalars),
            Node::Neg(a) => Node::Neg(Box::new(a.shift(leaves, scalars))),
            Node::Bin(op, a, b) => Node::Bin(
                op,
                Box::new(a.shift(leaves, scalars)),
                Box::new(b.shift(leaves, scalars)),
            ),
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Node::Leaf(i) => {
                let _ = write!(out, "x{i}");
            }
            Node::Scalar(i) => {
                let _ = write!(out, "s{i}");
            }
            Node::Neg(a) => {
                out.push_str("wrap_sub(decltype(");
                a.write(out);
                out.push_str(")(0), ");
                a.write(out);
                out.push(')');
            }
            Node::Bin(Op::Div, a, b) => {
                out.push_str("_gk_div(");
                a.write(out);
                out.push_str(", ");
                b.write(out);
                out.push(')');
            }
            Node::Bin(op, a, b) => {
                // Integer arithmetic wraps (no signed overflow); floats are plain + - *.
                out.push_str(match op {
                    Op::Add => "wrap_add(",
                    Op::Sub => "wrap_sub(",
                    _ => "wrap_mul(",
                });
                a.write(out);
                out.push_str(", ");
                b.write(out);
                out.push(')');
            }
        }
    }
}

/// An unevaluated elementwise expression over arrays of `T` and scalars (see the module docs).
#[derive(Debug, Clone)]
pub struct Expr<T: DType> {
    node: Node,
    leaves: Vec<GpuArray<T>>,
    scalars: Vec<T>,
}

impl<T: DType> Expr<T> {
    /// The expression that is just `a` (a view, nothing copied).
    pub fn of(a: &GpuArray<T>) -> Self {
        Expr {
            node: Node::Leaf(0),
            leaves: vec![a.clone()],
            scalars: Vec::new(),
        }
    }

    fn scalar(s: T) -> Self {
        Expr {
            node: Node::Scalar(0),
            leaves: Vec::new(),
            scalars: vec![s],
        }
    }

    fn combine(self, op: Op, rhs: Expr<T>) -> Expr<T> {
        let (nl, ns) = (self.leaves.len(), self.scalars.len());
        let mut leaves = self.leaves;
        let mut scalars = self.scalars;
        // The same view used twice is loaded once.
        let mut map = Vec::with_capacity(rhs.leaves.len());
        for l in rhs.leaves {
            match leaves.iter().position(|x| same_view(x, &l)) {
                Some(p) => map.push(p),
                None => {
                    map.push(leaves.len());
                    leaves.push(l);
                }
            }
        }
        scalars.extend(rhs.scalars);
        let right = remap(rhs.node.shift(0, ns), &map, nl);
        Expr {
            node: Node::Bin(op, Box::new(self.node), Box::new(right)),
            leaves,
            scalars,
        }
    }

    /// The C expression of this tree (`((x0 + s0) * x1)`), as the generated kernel uses it.
    pub fn code(&self) -> String {
        let mut s = String::new();
        self.node.write(&mut s);
        s
    }

    /// The broadcast shape of the arrays in the expression.
    pub fn shape(&self) -> Result<Vec<usize>> {
        let mut s: Vec<usize> = Vec::new();
        for l in &self.leaves {
            s = shape::broadcast_shapes("expression", &s, &l.shape)?;
        }
        Ok(s)
    }

    /// Runs the expression as one kernel into a fresh contiguous array.
    pub fn eval(&self) -> Result<GpuArray<T>> {
        let first = self.first()?;
        let shape = self.shape()?;
        let out = GpuArray::<T>::alloc_on(&first.dev, &shape, &first.dev.stream())?;
        self.launch(&self.leaves, &out)?;
        Ok(out)
    }

    /// Runs the expression into `out` (which must have the broadcast shape; it may be one of the
    /// arrays of the expression, element for element, as in `x = 2 * x + 1`).
    pub fn eval_into(&self, out: &mut GpuArray<T>) -> Result<()> {
        let first = self.first()?;
        let shape = self.shape()?;
        check_out("expression", first, out, &shape)?;
        let leaves: Vec<GpuArray<T>> = self
            .leaves
            .iter()
            .map(|l| unalias(l, out))
            .collect::<Result<_>>()?;
        self.launch(&leaves, out)
    }

    fn first(&self) -> Result<&GpuArray<T>> {
        let first = self.leaves.first().ok_or_else(|| {
            Error::invalid(
                "expression",
                "has no array (a scalar alone has no device or shape)",
            )
        })?;
        for l in &self.leaves {
            same_device("expression", first, l)?;
        }
        Ok(first)
    }

    fn launch(&self, leaves: &[GpuArray<T>], out: &GpuArray<T>) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        if leaves.len() > 16 {
            return Err(Error::invalid(
                "expression",
                format!(
                    "uses {} distinct arrays; at most 16 fit one kernel (evaluate part of it first)",
                    leaves.len()
                ),
            ));
        }
        let dev = out.dev.clone();
        let code = self.code();
        let id = format!(
            "gpukit-core/expr/{}/{}/{}/{code}",
            T::NAME,
            leaves.len(),
            self.scalars.len()
        );
        let params = || -> Vec<Param> {
            let mut p: Vec<Param> = (0..leaves.len())
                .map(|i| Param {
                    name: format!("x{i}"),
                    ctype: T::NAME,
                    role: Role::In,
                })
                .collect();
            p.extend((0..self.scalars.len()).map(|i| Param {
                name: format!("s{i}"),
                ctype: T::NAME,
                role: Role::Scalar,
            }));
            p.push(Param {
                name: "y".into(),
                ctype: T::NAME,
                role: Role::Out,
            });
            p
        };
        // SAFETY: the id spells the element type, the operand counts and the generated code
        // (all the source depends on); no other crate registers `gpukit-core/` ids.
        let kernel = unsafe {
            dev.kernel_set().kernel(&id, "gk_expr", || ProgramSpec {
                source: Cow::Owned(codegen::elementwise_source(
                    "gk_expr",
                    &params(),
                    &format!("y = {code};"),
                    "",
                )),
                program: Cow::Borrowed("gk_expr"),
                options: CompileOptions::new().header("common.cuh", kernels::COMMON_H),
            })
        }?;
        let stream = dev.stream();
        let mut strides = Vec::with_capacity(leaves.len() + 1);
        let mut contig = out.is_contiguous();
        let mut args: Vec<KernelArg> =
            Vec::with_capacity(leaves.len() + 2 * self.scalars.len() + 4);
        for l in leaves {
            contig &= l.shape == out.shape && l.is_contiguous();
            strides.push(l.strides_for("expression", &out.shape)?);
            l.used_on(&stream);
            args.push(l.arg());
        }
        strides.push(out.strides.clone());
        out.used_on(&stream);
        args.push(out.arg());
        for s in &self.scalars {
            let (f, i) = s.scalar_args();
            args.push(f.into());
            args.push(i.into());
        }
        args.push((n as i64).into());
        args.push((contig as i32).into());
        args.push(KernelArg::Bytes(shape::layout_bytes(
            "expression",
            &out.shape,
            &strides,
        )?));
        kernels::launch(&kernel, &stream, kernels::grid_for(&dev, n, 32), &args)
    }
}

fn same_view<T: DType>(a: &GpuArray<T>, b: &GpuArray<T>) -> bool {
    a.device_ptr() == b.device_ptr()
        && a.shape == b.shape
        && a.strides == b.strides
        && a.dev == b.dev
}

/// Renumbers the right operand's leaves (`Leaf(i)` -> `Leaf(map[i])`).
fn remap(node: Node, map: &[usize], _left: usize) -> Node {
    match node {
        Node::Leaf(i) => Node::Leaf(map[i]),
        Node::Neg(a) => Node::Neg(Box::new(remap(*a, map, _left))),
        Node::Bin(op, a, b) => Node::Bin(
            op,
            Box::new(remap(*a, map, _left)),
            Box::new(remap(*b, map, _left)),
        ),
        s => s,
    }
}

/// Anything an operator accepts: arrays (owned or borrowed) and expressions.
pub trait IntoExpr<T: DType> {
    /// The expression.
    fn into_expr(self) -> Expr<T>;
}

impl<T: DType> IntoExpr<T> for Expr<T> {
    fn into_expr(self) -> Expr<T> {
        self
    }
}
impl<T: DType> IntoExpr<T> for &Expr<T> {
    fn into_expr(self) -> Expr<T> {
        self.clone()
    }
}
impl<T: DType> IntoExpr<T> for GpuArray<T> {
    fn into_expr(self) -> Expr<T> {
        Expr {
            node: Node::Leaf(0),
            leaves: vec![self],
            scalars: Vec::new(),
        }
    }
}
impl<T: DType> IntoExpr<T> for &GpuArray<T> {
    fn into_expr(self) -> Expr<T> {
        Expr::of(self)
    }
}

macro_rules! operators {
    ($($tr:ident, $m:ident, $op:ident;)*) => {$(
        // array / expression OP array / expression
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for Expr<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { self.combine(Op::$op, rhs.into_expr()) }
        }
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for &Expr<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { self.clone().combine(Op::$op, rhs.into_expr()) }
        }
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for GpuArray<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { self.into_expr().combine(Op::$op, rhs.into_expr()) }
        }
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for &GpuArray<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { Expr::of(self).combine(Op::$op, rhs.into_expr()) }
        }
    )*};
}
operators! { Add, add, Add; Sub, sub, Sub; Mul, mul, Mul; Div, div, Div; }

/// Scalars on either side, for each element type.
macro_rules! scalar_types {
    ($($t:ty),*) => {$(
        impl IntoExpr<$t> for $t {
            fn into_expr(self) -> Expr<$t> { Expr::scalar(self) }
        }
        scalar_ops_only!($t, Add, add, Add);
        scalar_ops_only!($t, Sub, sub, Sub);
        scalar_ops_only!($t, Mul, mul, Mul);
        scalar_ops_only!($t, Div, div, Div);
    )*};
}
macro_rules! scalar_ops_only {
    ($t:ty, $tr:ident, $m:ident, $op:ident) => {
        impl std::ops::$tr<Expr<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: Expr<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(Op::$op, rhs)
            }
        }
        impl std::ops::$tr<&Expr<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: &Expr<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(Op::$op, rhs.clone())
            }
        }
        impl std::ops::$tr<GpuArray<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: GpuArray<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(Op::$op, rhs.into_expr())
            }
        }
        impl std::ops::$tr<&GpuArray<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: &GpuArray<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(Op::$op, Expr::of(rhs))
            }
        }
    };
}
scalar_types!(f32, f64, i32, u32, i64, u64, u8, half::f16, half::bf16);

impl<T: DType> std::ops::Neg for Expr<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        Expr {
            node: Node::Neg(Box::new(self.node)),
            leaves: self.leaves,
            scalars: self.scalars,
        }
    }
}
impl<T: DType> std::ops::Neg for &Expr<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        -self.clone()
    }
}
impl<T: DType> std::ops::Neg for &GpuArray<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        -Expr::of(self)
    }
}
impl<T: DType> std::ops::Neg for GpuArray<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        -self.into_expr()
    }
}

impl<T: DType> GpuArray<T> {
    /// This array as an expression (for building one explicitly; the operators do it for you).
    pub fn expr(&self) -> Expr<T> {
        Expr::of(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(i: usize) -> Node {
        Node::Leaf(i)
    }

    #[test]
    fn code_of_trees() {
        let n = Node::Bin(
            Op::Add,
            Box::new(Node::Bin(
                Op::Mul,
                Box::new(Node::Scalar(0)),
                Box::new(leaf(0)),
            )),
            Box::new(Node::Neg(Box::new(Node::Bin(
                Op::Div,
                Box::new(leaf(1)),
                Box::new(Node::Scalar(1)),
            )))),
        );
        let mut s = String::new();
        n.write(&mut s);
        assert_eq!(
            s,
            "wrap_add(wrap_mul(s0, x0), wrap_sub(decltype(_gk_div(x1, s1))(0), _gk_div(x1, s1)))"
        );
        // Shifting and remapping renumber the right operand.
        let r = remap(
            Node::Bin(Op::Sub, Box::new(leaf(0)), Box::new(Node::Scalar(0))).shift(0, 2),
            &[3],
            0,
        );
        let mut s = String::new();
        r.write(&mut s);
        assert_eq!(s, "wrap_sub(x3, s2)");
    }
}
