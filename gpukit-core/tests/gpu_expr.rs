//! GPU tests of the fused operators (array/expr.rs) against a CPU reference, for every element
//! type: random expression trees (the arithmetic operators, maximum / minimum, bitwise
//! operations, unary functions; scalars on either side) over operands read in every way the
//! kernels know (the output's shape, a repeated row, a column or channel, one element, random
//! broadcasts, misaligned and transposed views), evaluated into fresh arrays, into strided views
//! and in place. The vector kernel runs where the operands allow it, the general kernel
//! elsewhere; both must give the reference's values. A tree with an operation the element type
//! lacks must fail at `eval` with `UnsupportedDType`, before anything runs.
//!
//! The reference computes each operation in the kernels' compute type (f32 for f32 / f16 / bf16,
//! rounded after every operation; f64; integers wrapping in their width) and rounds to the
//! element type once at the end, as the fused kernel does. Floats are compared within a few ulps
//! of the compute type times the largest intermediate magnitude (the functions are not correctly
//! rounded on the GPU), integers exactly.

mod common;

use common::*;
use gpukit_core::array::expr::IntoExpr;
use gpukit_core::{s, BinaryOp, DType, DTypeKind, Device, Error, Expr, GpuArray, UnaryOp};

/// An expression tree over leaves `0..` and scalars `0..`.
#[derive(Debug, Clone)]
enum E {
    Leaf(usize),
    Scalar(usize),
    Un(UnaryOp, Box<E>),
    Bin(BinaryOp, Box<E>, Box<E>),
}

/// Functions whose result jumps (rounding, sign): applied to leaves only, whose values are
/// exact, so that the GPU's few-ulp differences never cross a jump.
const DISCRETE: [UnaryOp; 4] = [
    UnaryOp::Floor,
    UnaryOp::Round,
    UnaryOp::Sign,
    UnaryOp::BitNot,
];
const SMOOTH: [UnaryOp; 6] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Relu,
];
const BINARY: [BinaryOp; 8] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
    BinaryOp::BitAnd,
    BinaryOp::BitXor,
];

fn tree(leaves: usize) -> impl Strategy<Value = E> {
    let leaf = prop_oneof![
        3 => (0..leaves).prop_map(E::Leaf),
        1 => (0usize..3).prop_map(E::Scalar),
        1 => ((0..leaves), prop::sample::select(DISCRETE.to_vec()))
            .prop_map(|(i, op)| E::Un(op, Box::new(E::Leaf(i)))),
    ];
    leaf.prop_recursive(3, 10, 2, |inner| {
        prop_oneof![
            1 => (prop::sample::select(SMOOTH.to_vec()), inner.clone())
                .prop_map(|(op, a)| E::Un(op, Box::new(a))),
            3 => (prop::sample::select(BINARY.to_vec()), inner.clone(), inner)
                .prop_map(|(op, a, b)| E::Bin(op, Box::new(a), Box::new(b))),
        ]
    })
    .prop_map(|e| {
        // At least one array (a scalar alone has no shape), and leaf 0 always (so that the
        // output has the full shape).
        E::Bin(BinaryOp::Add, Box::new(E::Leaf(0)), Box::new(e))
    })
}

impl E {
    fn build<T: DType + IntoExpr<T>>(&self, leaves: &[GpuArray<T>], scalars: &[T]) -> Expr<T> {
        match self {
            E::Leaf(i) => leaves[*i].expr(),
            E::Scalar(i) => scalars[*i].into_expr(),
            E::Un(op, a) => a.build(leaves, scalars).unary(*op),
            E::Bin(op, a, b) => a
                .build(leaves, scalars)
                .binary(*op, b.build(leaves, scalars)),
        }
    }

    fn supported(&self, kind: DTypeKind) -> bool {
        match self {
            E::Un(op, a) => op.supports(kind) && a.supported(kind),
            E::Bin(op, a, b) => op.supports(kind) && a.supported(kind) && b.supported(kind),
            _ => true,
        }
    }

    fn ops(&self) -> usize {
        match self {
            E::Un(_, a) => 1 + a.ops(),
            E::Bin(_, a, b) => 1 + a.ops() + b.ops(),
            _ => 0,
        }
    }
}

/// A value of the compute type: floats in f64 (rounded to f32 after every operation for the
/// f32 family), integers in i128 wrapped to the element type after every operation.
#[derive(Clone, Copy, Debug)]
enum V {
    F(f64),
    I(i128),
}

struct Reference<T> {
    leaves: Vec<(Vec<T>, Vec<usize>)>,
    scalars: Vec<T>,
    out: Vec<usize>,
}

impl<T: TestType> Reference<T> {
    fn round(x: f64) -> f64 {
        if T::RUST_NAME == "f64" {
            x
        } else {
            x as f32 as f64
        }
    }

    /// `x` wrapped to the element type's width, as the value it denotes (unsigned types
    /// non-negative, signed ones sign-extended).
    fn wrap(x: i128) -> i128 {
        let bits = 8 * std::mem::size_of::<T>() as u32;
        let low = x & ((1i128 << bits) - 1);
        if T::KIND == DTypeKind::Signed && low >> (bits - 1) == 1 {
            low - (1i128 << bits)
        } else {
            low
        }
    }

    fn value(t: T) -> V {
        if T::KIND == DTypeKind::Float {
            V::F(t.to_f64())
        } else {
            V::I(Self::wrap(t.to_i64() as i128))
        }
    }

    /// The value of `e` at output element `i`, and the largest magnitude met on the way.
    fn eval(&self, e: &E, i: usize, mag: &mut f64) -> V {
        let v = match e {
            E::Leaf(j) => {
                let (data, shape) = &self.leaves[*j];
                Self::value(data[bcast_index(i, &self.out, shape)])
            }
            E::Scalar(j) => Self::value(self.scalars[*j]),
            E::Un(op, a) => match self.eval(a, i, mag) {
                V::F(x) => V::F(Self::round(match op {
                    UnaryOp::Neg => -x,
                    UnaryOp::Abs => x.abs(),
                    UnaryOp::Exp => x.exp(),
                    UnaryOp::Log => x.ln(),
                    UnaryOp::Sqrt => x.sqrt(),
                    UnaryOp::Relu => {
                        if x > 0.0 || x.is_nan() {
                            x
                        } else {
                            0.0
                        }
                    }
                    UnaryOp::Floor => x.floor(),
                    UnaryOp::Round => x.round_ties_even(),
                    UnaryOp::Sign => {
                        if x.is_nan() {
                            x
                        } else if x > 0.0 {
                            1.0
                        } else if x < 0.0 {
                            -1.0
                        } else {
                            0.0
                        }
                    }
                    other => unreachable!("{other:?} on floats"),
                })),
                V::I(x) => V::I(Self::wrap(match op {
                    UnaryOp::Neg => -x,
                    UnaryOp::Abs => x.abs(),
                    UnaryOp::Relu => x.max(0),
                    UnaryOp::Floor | UnaryOp::Round => x,
                    UnaryOp::Sign => x.signum(),
                    UnaryOp::BitNot => !x,
                    other => unreachable!("{other:?} on integers"),
                })),
            },
            E::Bin(op, a, b) => match (self.eval(a, i, mag), self.eval(b, i, mag)) {
                (V::F(x), V::F(y)) => V::F(Self::round(match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => x / y,
                    BinaryOp::Maximum => {
                        if x.is_nan() || x > y {
                            x
                        } else {
                            y
                        }
                    }
                    BinaryOp::Minimum => {
                        if x.is_nan() || x < y {
                            x
                        } else {
                            y
                        }
                    }
                    other => unreachable!("{other:?} on floats"),
                })),
                (V::I(x), V::I(y)) => V::I(Self::wrap(match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => {
                        if y == 0 {
                            0
                        } else {
                            x / y
                        }
                    }
                    BinaryOp::Maximum => x.max(y),
                    BinaryOp::Minimum => x.min(y),
                    BinaryOp::BitAnd => x & y,
                    BinaryOp::BitXor => x ^ y,
                    other => unreachable!("{other:?} on integers"),
                })),
                _ => unreachable!("one compute type per tree"),
            },
        };
        if let V::F(x) = v {
            if x.is_finite() {
                *mag = mag.max(x.abs());
            }
        }
        v
    }
}

/// How one operand of a case is stored.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// The output's shape, contiguous (dense).
    Same,
    /// The trailing dimensions only (a repeated row).
    Row,
    /// The leading dimensions with the last one 1 (a column).
    Col,
    /// One element.
    One,
    /// Random dimensions set to 1 (any broadcast).
    Mask(u64),
    /// The output's shape, contiguous but one element past a 16-byte boundary.
    Misaligned,
    /// The output's shape as the transpose of a contiguous array.
    Transposed,
}

const EXTENTS: [usize; 9] = [1, 2, 3, 4, 8, 16, 17, 32, 33];

fn case_strategy() -> impl Strategy<Value = (Vec<usize>, Vec<Kind>, E, u64, u8)> {
    let kind = prop_oneof![
        3 => Just(Kind::Same),
        2 => Just(Kind::Row),
        2 => Just(Kind::Col),
        1 => Just(Kind::One),
        1 => any::<u64>().prop_map(Kind::Mask),
        1 => Just(Kind::Misaligned),
        1 => Just(Kind::Transposed),
    ];
    (
        prop::collection::vec(prop::sample::select(EXTENTS.to_vec()), 1..=3),
        prop::collection::vec(kind, 1..=3),
        any::<u64>(),
        0u8..3,
    )
        .prop_flat_map(|(out, kinds, seed, target)| {
            let n = kinds.len();
            (Just(out), Just(kinds), tree(n), Just(seed), Just(target))
        })
}

/// Uploads `data` (logical values of `shape`) as an operand stored as `kind` says.
fn operand<T: TestType>(dev: &Device, data: &[T], shape: &[usize], kind: Kind) -> GpuArray<T> {
    match kind {
        Kind::Misaligned => {
            let mut padded = vec![T::zero()];
            padded.extend_from_slice(data);
            GpuArray::from_slice(dev, &padded, &[padded.len()])
                .unwrap()
                .slice(&s![1..])
                .unwrap()
                .reshape(shape)
                .unwrap()
        }
        Kind::Transposed if shape.len() == 2 => {
            let (r, c) = (shape[0], shape[1]);
            let t: Vec<T> = (0..r * c).map(|k| data[(k % r) * c + k / r]).collect();
            let g = GpuArray::from_slice(dev, &t, &[c, r]).unwrap().transpose();
            assert_eq!(g.shape(), shape);
            g
        }
        _ => GpuArray::from_slice(dev, data, shape).unwrap(),
    }
}

fn leaf_shape(out: &[usize], kind: Kind) -> Vec<usize> {
    match kind {
        Kind::Row => out[out.len() / 2..].to_vec(),
        Kind::Col => {
            let mut s = out.to_vec();
            if let Some(l) = s.last_mut() {
                *l = 1;
            }
            s
        }
        Kind::One => vec![1],
        Kind::Mask(bits) => out
            .iter()
            .enumerate()
            .map(|(d, &e)| if bits >> d & 1 == 1 { 1 } else { e })
            .collect(),
        _ => out.to_vec(),
    }
}

fn tolerance<T: TestType>(ops: usize, mag: f64) -> f64 {
    let eps = if T::RUST_NAME == "f64" {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    };
    8.0 * eps * (ops + 1) as f64 * mag
}

fn expression_case<T: TestType + IntoExpr<T>>(
    dev: &Device,
    (out, kinds, tree, seed, target): (Vec<usize>, Vec<Kind>, E, u64, u8),
) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n: usize = out.iter().product();
    let mut leaves = Vec::new();
    let mut host = Vec::new();
    for &k in &kinds {
        let k = if leaves.is_empty() { Kind::Same } else { k };
        let shape = leaf_shape(&out, k);
        let data: Vec<T> = random_special(&mut rng, shape.iter().product(), false);
        leaves.push(operand(dev, &data, &shape, k));
        host.push((data, shape));
    }
    let scalars: Vec<T> = (0..3).map(|_| T::random(&mut rng, true)).collect();
    let expr = tree.build(&leaves, &scalars);
    if !tree.supported(T::KIND) {
        match expr.eval() {
            Err(Error::UnsupportedDType { dtype, .. }) => prop_assert_eq!(dtype, T::RUST_NAME),
            other => prop_assert!(
                false,
                "{:?}: expected UnsupportedDType, got {:?}",
                tree,
                other.map(|_| ())
            ),
        }
        return Ok(());
    }
    let reference = Reference::<T> {
        leaves: host,
        scalars,
        out: out.clone(),
    };
    let got: Vec<T> = match target {
        // A fresh array.
        0 => expr.eval().map_err(fail)?.to_vec().map_err(fail)?,
        // Every other element of a larger array (a strided output: the general kernel).
        1 => {
            let mut wide_shape = out.clone();
            *wide_shape.last_mut().unwrap() *= 2;
            let poison = T::from_i64(77);
            let wide = GpuArray::full(dev, &wide_shape, poison).map_err(fail)?;
            let last = out.len() as isize - 1;
            let mut view = wide
                .slice_axis(last, gpukit_core::Index::from(..).step(2))
                .map_err(fail)?;
            expr.eval_into(&mut view).map_err(fail)?;
            let all = wide.to_vec().map_err(fail)?;
            // The elements between stay untouched.
            for (k, v) in all.iter().enumerate().filter(|(k, _)| k % 2 == 1) {
                prop_assert_eq!(v.to_f64(), poison.to_f64(), "element {} was written", k);
            }
            all.into_iter().step_by(2).collect()
        }
        // In place into leaf 0 (the output's shape, contiguous, read element for element).
        _ => {
            let mut x = leaves[0].clone();
            expr.eval_into(&mut x).map_err(fail)?;
            x.to_vec().map_err(fail)?
        }
    };
    prop_assert_eq!(got.len(), n);
    for (i, g) in got.iter().enumerate() {
        let mut mag = 0.0f64;
        let want = reference.eval(&tree, i, &mut mag);
        match want {
            V::I(w) => prop_assert_eq!(
                g.to_i64(),
                T::from_i64(w as i64).to_i64(),
                "element {} of {:?}",
                i,
                tree
            ),
            V::F(w) => {
                let g = g.to_f64();
                let w = T::from_f64(w).to_f64();
                let ok = (g.is_nan() && w.is_nan())
                    || g == w
                    || (g - w).abs() <= tolerance::<T>(tree.ops(), mag) + T::rtol() * w.abs();
                prop_assert!(
                    ok,
                    "element {} of {:?} {:?}: got {}, expected {}",
                    i,
                    kinds,
                    tree,
                    g,
                    w
                );
            }
        }
    }
    Ok(())
}

fn expressions<T: TestType + IntoExpr<T>>(dev: &Device, cases: u32) {
    runner(cases)
        .run(&case_strategy(), |case| expression_case::<T>(dev, case))
        .unwrap_or_else(|e| panic!("{}: {e}", T::RUST_NAME));
}

#[test]
fn fused_expressions_match_a_cpu_reference_every_dtype() {
    let Some(dev) = device("fused_expressions_match_a_cpu_reference_every_dtype") else {
        return;
    };
    for_all_dtypes!(expressions, &dev, 48);
}

/// An operator computes exactly what its named method computes (one definition of each
/// operation), on sizes around the vector width and with a broadcast row, for a float, a
/// 16-bit float and an integer type.
fn operators_equal_methods<T: TestType + IntoExpr<T>>(dev: &Device) {
    let mut rng = Rng(7);
    for n in [1usize, 3, 4, 7, 8, 17, 1000, 4099] {
        let a: Vec<T> = random_special(&mut rng, n, false);
        let b: Vec<T> = random_special(&mut rng, n, true);
        let ga = GpuArray::from_slice(dev, &a, &[n]).unwrap();
        let gb = GpuArray::from_slice(dev, &b, &[n]).unwrap();
        let s = T::random(&mut rng, true);
        let same = |x: GpuArray<T>, y: GpuArray<T>, what: &str| {
            let (x, y) = (x.to_vec().unwrap(), y.to_vec().unwrap());
            for (i, (p, q)) in x.iter().zip(&y).enumerate() {
                let (p, q) = (p.to_f64(), q.to_f64());
                assert!(
                    p == q || (p.is_nan() && q.is_nan()),
                    "{} n={n} {what} at {i}: operator {p}, method {q}",
                    T::RUST_NAME
                );
            }
        };
        same((&ga + &gb).eval().unwrap(), ga.add(&gb).unwrap(), "a + b");
        same((&ga - &gb).eval().unwrap(), ga.sub(&gb).unwrap(), "a - b");
        same((&ga * &gb).eval().unwrap(), ga.mul(&gb).unwrap(), "a * b");
        same((&ga / &gb).eval().unwrap(), ga.div(&gb).unwrap(), "a / b");
        same(
            (&ga * s).eval().unwrap(),
            ga.mul_scalar(s).unwrap(),
            "a * s",
        );
        same(
            (s.into_expr() - &ga).eval().unwrap(),
            ga.rsub_scalar(s).unwrap(),
            "s - a",
        );
        same(
            (s.into_expr() / &ga).eval().unwrap(),
            ga.rdiv_scalar(s).unwrap(),
            "s / a",
        );
        same((-&ga).eval().unwrap(), ga.neg().unwrap(), "-a");
        same(
            ga.expr().maximum(&gb).eval().unwrap(),
            ga.maximum(&gb).unwrap(),
            "maximum",
        );
        same(
            ga.expr().remainder(&gb).eval().unwrap(),
            ga.remainder(&gb).unwrap(),
            "remainder",
        );
        if T::KIND == DTypeKind::Float {
            same(ga.expr().exp().eval().unwrap(), ga.exp().unwrap(), "exp");
            same(gb.expr().log().eval().unwrap(), gb.log().unwrap(), "log");
            same(
                ga.expr().pow(&gb).eval().unwrap(),
                ga.pow(&gb).unwrap(),
                "pow",
            );
        }
        // A row broadcast over rows (the repeated mode where n is a whole number of vectors).
        let m = GpuArray::from_slice(dev, &random_special::<T>(&mut rng, 3 * n, false), &[3, n])
            .unwrap();
        same((&m + &gb).eval().unwrap(), m.add(&gb).unwrap(), "rows + b");
        let col = gb.reshape(&[n, 1]).unwrap();
        let wide = GpuArray::from_slice(dev, &random_special::<T>(&mut rng, 8 * n, false), &[n, 8])
            .unwrap();
        same(
            (&wide * &col).eval().unwrap(),
            wide.mul(&col).unwrap(),
            "matrix * column",
        );
    }
}

#[test]
fn operators_compute_what_the_named_methods_compute() {
    let Some(dev) = device("operators_compute_what_the_named_methods_compute") else {
        return;
    };
    operators_equal_methods::<f32>(&dev);
    operators_equal_methods::<f64>(&dev);
    operators_equal_methods::<gpukit_core::f16>(&dev);
    operators_equal_methods::<i32>(&dev);
    operators_equal_methods::<u8>(&dev);
}

/// A large array (2^31 + 3072 f32 elements: 64-bit element counts, 2^29 vectors) with a
/// broadcast row and a broadcast column in one vector kernel; sampled rows checked.
#[test]
fn large_arrays_with_broadcast_rows_and_columns() {
    let Some(dev) = device("large_arrays_with_broadcast_rows_and_columns") else {
        return;
    };
    let rows = (1usize << 21) + 3;
    let cols = 1024;
    let m = GpuArray::<f32>::full(&dev, &[rows, cols], 1.5).unwrap();
    let row: Vec<f32> = (0..cols).map(|j| j as f32).collect();
    let r = GpuArray::from_slice(&dev, &row, &[cols]).unwrap();
    let col: Vec<f32> = (0..rows).map(|i| (i % 7) as f32).collect();
    let c = GpuArray::from_slice(&dev, &col, &[rows, 1]).unwrap();
    let y = (&m * 2.0 + &r - &c).eval().unwrap();
    for i in [0usize, 1, rows / 2, rows - 2, rows - 1] {
        let got = y.slice(&s![i as isize, ..]).unwrap().to_vec().unwrap();
        for (j, g) in got.iter().enumerate() {
            let want = 3.0 + j as f32 - (i % 7) as f32;
            assert_eq!(*g, want, "({i}, {j})");
        }
    }
}
