//! GPU tests of the elementwise operations against CPU references, for every element type,
//! over random shapes with NumPy broadcasting (proptest: empty, 1, primes, broadcasting pairs),
//! NaN / Inf / -0 mixed into float inputs, strided views, the `*_into` and `*_inplace` forms
//! with their aliasing rules, and the fused operators. Floats are compared with an f64
//! reference rounded to the element type (exact for + - * /, a few ulps for transcendental
//! functions); integers exactly.

mod common;

use common::*;
use gpukit_core::{
    s, BinaryOp, CompareOp, DTypeKind, Device, Error, GpuArray, LogicalOp, Predicate, UnaryOp,
};

const DIMS: [usize; 7] = [0, 1, 2, 3, 5, 7, 13];

/// An output shape and two operand shapes that broadcast to it.
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>)> {
    prop::collection::vec(prop::sample::select(DIMS.to_vec()), 0..4).prop_flat_map(|out| {
        let n = out.len();
        (
            Just(out),
            prop::collection::vec(any::<bool>(), n),
            prop::collection::vec(any::<bool>(), n),
            0..=n,
            0..=n,
        )
            .prop_map(|(out, ma, mb, da, db)| {
                let a: Vec<usize> = out
                    .iter()
                    .zip(&ma)
                    .map(|(&d, &m)| if m { 1 } else { d })
                    .collect();
                let b: Vec<usize> = out
                    .iter()
                    .zip(&mb)
                    .map(|(&d, &m)| if m { 1 } else { d })
                    .collect();
                (
                    out.clone(),
                    a[da.min(a.len())..].to_vec(),
                    b[db.min(b.len())..].to_vec(),
                )
            })
    })
}

/// The broadcast shape by an independent rule: right-aligned, the larger extent unless one is 1.
fn numpy_shape(sa: &[usize], sb: &[usize]) -> Vec<usize> {
    let n = sa.len().max(sb.len());
    let ext = |s: &[usize], i: usize| {
        if i + s.len() >= n {
            s[i + s.len() - n]
        } else {
            1
        }
    };
    (0..n)
        .map(|i| {
            let (x, y) = (ext(sa, i), ext(sb, i));
            if x == 1 {
                y
            } else {
                x
            }
        })
        .collect()
}

fn ref_binary<T: TestType>(op: BinaryOp, a: T, b: T) -> f64 {
    if T::KIND == DTypeKind::Float {
        let (x, y) = (a.to_f64(), b.to_f64());
        let r = match op {
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
            BinaryOp::Pow => x.powf(y),
            BinaryOp::Mod => {
                let r = x % y;
                if r != 0.0 && (r < 0.0) != (y < 0.0) {
                    r + y
                } else if r == 0.0 {
                    0.0f64.copysign(y)
                } else {
                    r
                }
            }
            _ => unreachable!("bitwise ops are integer-only"),
        };
        T::from_f64(r).to_f64()
    } else {
        let (x, y) = (a.to_i64() as i128, b.to_i64() as i128);
        let w = |v: i128| wrap::<T>(v).to_i64() as i128;
        let unsigned = T::KIND == DTypeKind::Unsigned;
        let r = match op {
            BinaryOp::Add => w(x + y),
            BinaryOp::Sub => w(x - y),
            BinaryOp::Mul => w(x * y),
            BinaryOp::Div => {
                if y == 0 {
                    0
                } else {
                    w(x / y)
                }
            }
            BinaryOp::Maximum => x.max(y),
            BinaryOp::Minimum => x.min(y),
            BinaryOp::Mod => {
                if y == 0 {
                    0
                } else {
                    let r = x % y;
                    if !unsigned && r != 0 && (r < 0) != (y < 0) {
                        r + y
                    } else {
                        r
                    }
                }
            }
            BinaryOp::BitAnd => w(x & y),
            BinaryOp::BitOr => w(x | y),
            BinaryOp::BitXor => w(x ^ y),
            BinaryOp::Pow => {
                if y < 0 {
                    if x == 1 {
                        1
                    } else if x == -1 {
                        if y & 1 == 1 {
                            -1
                        } else {
                            1
                        }
                    } else {
                        0
                    }
                } else {
                    let (mut r, mut base, mut e) = (1i128, x, y as u128);
                    while e > 0 {
                        if e & 1 == 1 {
                            r = w(r * base);
                        }
                        base = w(base * base);
                        e >>= 1;
                    }
                    r
                }
            }
        };
        wrap::<T>(r).to_f64()
    }
}

fn binary_ops<T: TestType>() -> Vec<BinaryOp> {
    let mut v = vec![
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Pow,
        BinaryOp::Mod,
    ];
    if T::KIND != DTypeKind::Float {
        v.extend([BinaryOp::BitAnd, BinaryOp::BitOr, BinaryOp::BitXor]);
    }
    v
}

/// Tolerance of an operation's result (pow and transcendental functions are not correctly
/// rounded on the GPU).
fn atol_for<T: TestType>(inexact: bool) -> f64 {
    if !inexact {
        return 1e-300;
    }
    match T::RUST_NAME {
        "f32" => 1e-6,
        "f64" => 1e-14,
        _ => 1e-3,
    }
}

fn truthy(x: f64) -> bool {
    x != 0.0 || x.is_nan()
}

fn binary_case<T: TestType>(
    dev: &Device,
    sa: &[usize],
    sb: &[usize],
    seed: u64,
) -> Result<(), TestCaseError> {
    let out = numpy_shape(sa, sb);
    let mut rng = Rng(seed);
    let na: usize = sa.iter().product();
    let nb: usize = sb.iter().product();
    let nout: usize = out.iter().product();
    let a: Vec<T> = random_special(&mut rng, na, false);
    let b: Vec<T> = random_special(&mut rng, nb, true);
    let ga = GpuArray::from_slice(dev, &a, sa).map_err(fail)?;
    let gb = GpuArray::from_slice(dev, &b, sb).map_err(fail)?;
    let pa = |i: usize| a[bcast_index(i, &out, sa)];
    let pb = |i: usize| b[bcast_index(i, &out, sb)];
    for op in binary_ops::<T>() {
        let g = ga.binary(op, &gb).map_err(fail)?;
        prop_assert_eq!(g.shape(), out.as_slice());
        let want: Vec<f64> = (0..nout).map(|i| ref_binary(op, pa(i), pb(i))).collect();
        check::<T>(
            &format!("{op:?} {sa:?} {sb:?}"),
            &g.to_vec().map_err(fail)?,
            &want,
            atol_for::<T>(op == BinaryOp::Pow),
        )
        .map_err(fail)?;
    }
    for op in [
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
    ] {
        let m = ga.compare(op, &gb).map_err(fail)?.to_vec().map_err(fail)?;
        for (i, &mv) in m.iter().enumerate() {
            let (x, y) = (pa(i).to_f64(), pb(i).to_f64());
            let want = match op {
                CompareOp::Eq => x == y,
                CompareOp::Ne => x != y,
                CompareOp::Lt => x < y,
                CompareOp::Le => x <= y,
                CompareOp::Gt => x > y,
                CompareOp::Ge => x >= y,
            };
            prop_assert_eq!(mv, want as u8, "{:?} at {}", op, i);
        }
    }
    for op in [LogicalOp::And, LogicalOp::Or, LogicalOp::Xor] {
        let m = ga.logical(op, &gb).map_err(fail)?.to_vec().map_err(fail)?;
        for (i, &mv) in m.iter().enumerate() {
            let (x, y) = (truthy(pa(i).to_f64()), truthy(pb(i).to_f64()));
            let want = match op {
                LogicalOp::And => x && y,
                LogicalOp::Or => x || y,
                LogicalOp::Xor => x != y,
            };
            prop_assert_eq!(mv, want as u8, "{:?} at {}", op, i);
        }
    }
    // where with a mask of several nonzero values, broadcast against both operands.
    let mask_shape: Vec<usize> = out.iter().map(|&d| if d == 2 { 1 } else { d }).collect();
    let nm: usize = mask_shape.iter().product();
    let mask: Vec<u8> = (0..nm)
        .map(|_| [0u8, 1, 2, 255][(rng.next_u64() % 4) as usize])
        .collect();
    let gm = GpuArray::from_slice(dev, &mask, &mask_shape).map_err(fail)?;
    let w = gpukit_core::where_(&gm, &ga, &gb)
        .map_err(fail)?
        .to_vec()
        .map_err(fail)?;
    for (i, v) in w.iter().enumerate() {
        let want = if mask[bcast_index(i, &out, &mask_shape)] != 0 {
            pa(i)
        } else {
            pb(i)
        };
        let (g, e) = (v.to_f64(), want.to_f64());
        prop_assert!(
            g == e || (g.is_nan() && e.is_nan()),
            "where at {}: {} vs {}",
            i,
            g,
            e
        );
    }
    Ok(())
}

fn binary_all<T: TestType>(dev: &Device, cases: u32) {
    runner(cases)
        .run(&(broadcast_pair(), any::<u64>()), |((_, sa, sb), seed)| {
            binary_case::<T>(dev, &sa, &sb, seed)
        })
        .unwrap_or_else(|e| panic!("{}: {e}", T::RUST_NAME));
}

#[test]
fn binary_compare_logical_where_broadcast_every_dtype() {
    let Some(dev) = device("binary_compare_logical_where_broadcast_every_dtype") else {
        return;
    };
    for_all_dtypes!(binary_all, &dev, 12);
}

fn ref_unary<T: TestType>(op: UnaryOp, x: T) -> f64 {
    let v = x.to_f64();
    if T::KIND != DTypeKind::Float {
        let i = x.to_i64() as i128;
        let r: i128 = match op {
            UnaryOp::Neg => -i,
            UnaryOp::Abs => i.abs(),
            UnaryOp::Relu => i.max(0),
            UnaryOp::BitNot => !i,
            UnaryOp::Sign => i.signum(),
            _ => i, // floor, ceil, round, trunc of an integer
        };
        if op == UnaryOp::Abs && T::KIND == DTypeKind::Unsigned {
            return v;
        }
        return wrap::<T>(r).to_f64();
    }
    let r = match op {
        UnaryOp::Neg => -v,
        UnaryOp::Abs => v.abs(),
        UnaryOp::Exp => v.exp(),
        UnaryOp::Log => v.ln(),
        UnaryOp::Sqrt => v.sqrt(),
        UnaryOp::Tanh => v.tanh(),
        UnaryOp::Relu => {
            if v > 0.0 || v.is_nan() {
                v
            } else {
                0.0
            }
        }
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-v).exp()),
        UnaryOp::Sin => v.sin(),
        UnaryOp::Cos => v.cos(),
        UnaryOp::Floor => v.floor(),
        UnaryOp::Ceil => v.ceil(),
        UnaryOp::Round => v.round_ties_even(),
        UnaryOp::Trunc => v.trunc(),
        UnaryOp::Sign => {
            if v.is_nan() {
                v
            } else if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::BitNot => unreachable!("integer-only"),
    };
    T::from_f64(r).to_f64()
}

const UNARY_OPS: [UnaryOp; 16] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Tanh,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Trunc,
    UnaryOp::BitNot,
    UnaryOp::Sign,
];

fn scalar_unary_clip<T: TestType>(dev: &Device, n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut a: Vec<T> = random_special(&mut rng, n, true);
    if T::KIND == DTypeKind::Float && n > 4 {
        // Exact halves exercise round-half-to-even.
        a[0] = T::from_f64(2.5);
        a[1] = T::from_f64(-0.5);
    }
    let s = T::random(&mut rng, true);
    let ga = GpuArray::from_slice(dev, &a, &[n]).unwrap();
    for op in binary_ops::<T>() {
        for left in [false, true] {
            let got = ga.binary_scalar(op, s, left).unwrap().to_vec().unwrap();
            let want: Vec<f64> = a
                .iter()
                .map(|&x| {
                    if left {
                        ref_binary(op, s, x)
                    } else {
                        ref_binary(op, x, s)
                    }
                })
                .collect();
            check::<T>(
                &format!("{op:?} scalar left={left} n={n}"),
                &got,
                &want,
                atol_for::<T>(op == BinaryOp::Pow),
            )
            .unwrap();
        }
    }
    for op in UNARY_OPS {
        let r = ga.unary(op);
        if !op.supports(T::KIND) {
            assert!(
                matches!(r, Err(Error::UnsupportedDType { .. })),
                "{op:?} on {} must be refused",
                T::RUST_NAME
            );
            continue;
        }
        let got = r.unwrap().to_vec().unwrap();
        let want: Vec<f64> = a.iter().map(|&x| ref_unary(op, x)).collect();
        let inexact = matches!(
            op,
            UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Tanh
                | UnaryOp::Sigmoid
                | UnaryOp::Sin
                | UnaryOp::Cos
        );
        check::<T>(
            &format!("{op:?} n={n}"),
            &got,
            &want,
            atol_for::<T>(inexact),
        )
        .unwrap();
    }
    let (lo, hi) = (T::from_f64(1.0), T::from_f64(3.0));
    let got = ga.clip(lo, hi).unwrap().to_vec().unwrap();
    let want: Vec<f64> = a
        .iter()
        .map(|&x| {
            let v = x.to_f64();
            if v.is_nan() {
                v
            } else {
                v.clamp(1.0, 3.0)
            }
        })
        .collect();
    check::<T>("clip", &got, &want, 1e-300).unwrap();
    for p in [
        Predicate::IsNan,
        Predicate::IsInf,
        Predicate::IsFinite,
        Predicate::LogicalNot,
    ] {
        let got = ga.predicate(p).unwrap().to_vec().unwrap();
        for (i, (&g, &x)) in got.iter().zip(&a).enumerate() {
            let v = x.to_f64();
            let want = match p {
                Predicate::IsNan => v.is_nan(),
                Predicate::IsInf => v.is_infinite(),
                Predicate::IsFinite => v.is_finite(),
                Predicate::LogicalNot => !truthy(v),
            };
            assert_eq!(g, want as u8, "{p:?} at {i} ({v}) for {}", T::RUST_NAME);
        }
    }
}

#[test]
fn scalar_unary_clip_predicates_every_dtype_and_size() {
    let Some(dev) = device("scalar_unary_clip_predicates_every_dtype_and_size") else {
        return;
    };
    // Sizes: 1, a prime, one vector tail short, a large odd size (vector path + tail).
    for n in [1usize, 7, 31, 4097, (1 << 20) + 3] {
        for_all_dtypes!(scalar_unary_clip, &dev, n, n as u64 * 7919);
    }
}

fn strided_and_inplace<T: TestType>(dev: &Device) {
    let mut rng = Rng(17);
    let (r, c) = (37usize, 29usize);
    let host: Vec<T> = random_special(&mut rng, r * c, true);
    let a = GpuArray::from_slice(dev, &host, &[r, c]).unwrap();
    // A reversed, transposed view: every operand path through strides.
    let v = a.slice(&s![..;-1, 1..;2]).unwrap().transpose();
    let offs = view_offsets(v.shape(), v.strides(), 0);
    let vr: Vec<T> = {
        // The view's elements on the CPU: reversed rows, every other column from 1, transposed.
        let mut out = Vec::new();
        for j in (1..c).step_by(2) {
            for i in (0..r).rev() {
                out.push(host[i * c + j]);
            }
        }
        out
    };
    assert_eq!(v.to_vec().unwrap().len(), offs.len());
    let got = v.to_vec().unwrap();
    for (g, w) in got.iter().zip(&vr) {
        assert!(g.to_f64() == w.to_f64() || g.to_f64().is_nan());
    }
    // Binary on views writes a fresh contiguous array.
    let sum = v.add(&v).unwrap();
    assert!(sum.is_contiguous());
    let want: Vec<f64> = vr
        .iter()
        .map(|&x| ref_binary(BinaryOp::Add, x, x))
        .collect();
    check::<T>("view + view", &sum.to_vec().unwrap(), &want, 0.0).unwrap();
    // out= into a strided view of a fresh array.
    let dst = GpuArray::<T>::zeros(dev, &[v.shape()[1], v.shape()[0]]).unwrap();
    let mut dst_t = dst.transpose();
    v.mul_into(&v, &mut dst_t).unwrap();
    let want_t: Vec<f64> = vr
        .iter()
        .map(|&x| ref_binary(BinaryOp::Mul, x, x))
        .collect();
    check::<T>(
        "mul_into a transposed view",
        &dst_t.to_vec().unwrap(),
        &want_t,
        0.0,
    )
    .unwrap();
    // In place, broadcasting a row.
    let row: Vec<T> = random_vec(&mut rng, c, true);
    let grow = GpuArray::from_slice(dev, &row, &[c]).unwrap();
    let mut x = a.astype::<T>().unwrap();
    x.sub_inplace(&grow).unwrap();
    let want: Vec<f64> = (0..r * c)
        .map(|i| ref_binary(BinaryOp::Sub, host[i], row[i % c]))
        .collect();
    check::<T>("sub_inplace", &x.to_vec().unwrap(), &want, 0.0).unwrap();
    // x[1:] += x[:-1]: the overlapping input is read before anything is written (as NumPy).
    let flat: Vec<T> = random_vec(&mut rng, 100, true);
    let f = GpuArray::from_slice(dev, &flat, &[100]).unwrap();
    let tail = f.slice(&s![..-1]).unwrap();
    let mut head = f.slice(&s![1..]).unwrap();
    let h2 = head.clone();
    h2.add_into(&tail, &mut head).unwrap();
    let got = f.to_vec().unwrap();
    let mut want: Vec<f64> = vec![flat[0].to_f64()];
    want.extend((1..100).map(|i| ref_binary(BinaryOp::Add, flat[i], flat[i - 1])));
    check::<T>("x[1:] += x[:-1]", &got, &want, 0.0).unwrap();
    // Unary and clip in place.
    let mut y = GpuArray::from_slice(dev, &flat, &[100]).unwrap();
    y.neg_inplace().unwrap();
    let want: Vec<f64> = flat.iter().map(|&v| ref_unary(UnaryOp::Neg, v)).collect();
    check::<T>("neg_inplace", &y.to_vec().unwrap(), &want, 0.0).unwrap();
    y.clip_inplace(T::from_f64(0.0), T::from_f64(2.0)).unwrap();
    assert!(y
        .to_vec()
        .unwrap()
        .iter()
        .all(|v| (0.0..=2.0).contains(&v.to_f64())));
    // A broadcast view cannot be an output; a wrong out shape is an error.
    let mut bview = grow.broadcast_to(&[3, c]).unwrap();
    assert!(a
        .slice(&s![..3])
        .unwrap()
        .add_into(&bview.clone(), &mut bview)
        .is_err());
    let mut wrong = GpuArray::<T>::zeros(dev, &[2, 2]).unwrap();
    assert!(matches!(
        a.add_into(&a, &mut wrong),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn strided_views_into_and_inplace_every_dtype() {
    let Some(dev) = device("strided_views_into_and_inplace_every_dtype") else {
        return;
    };
    for_all_dtypes!(strided_and_inplace, &dev);
}

#[test]
fn operators_fuse_into_one_expression() {
    let Some(dev) = device("operators_fuse_into_one_expression") else {
        return;
    };
    let a = GpuArray::<f32>::from_slice(&dev, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = GpuArray::<f32>::from_slice(&dev, &[10.0, 20.0, 30.0], &[3]).unwrap();
    // Owned and borrowed operands, scalars on either side, one `?`.
    let y = (2.0 * &a + &b * &b - 1.0).eval().unwrap();
    let want: Vec<f32> = (0..6)
        .map(|i| 2.0 * (i as f32 + 1.0) + [100.0f32, 400.0, 900.0][i % 3] - 1.0)
        .collect();
    assert_eq!(y.to_vec().unwrap(), want);
    let z = (-(a.clone() / 4.0) + b.clone()).eval().unwrap();
    assert_eq!(z.to_vec().unwrap()[4], -1.25 + 20.0);
    let chained = (&y - &y * 0.5).eval().unwrap();
    assert_eq!(chained.to_vec().unwrap()[0], want[0] * 0.5);
    // The same array used twice is one leaf.
    let e = &a * &a + &a;
    assert_eq!(e.code(), "wrap_add(wrap_mul(x0, x0), x0)");
    // Errors surface at eval, before anything runs.
    let c = GpuArray::<f32>::zeros(&dev, &[4]).unwrap();
    let err = (&a + &c).eval().unwrap_err();
    match &err {
        Error::ShapeMismatch { lhs, rhs, .. } => {
            assert_eq!(
                (lhs.as_slice(), rhs.as_slice()),
                (&[2usize, 3][..], &[4usize][..])
            )
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
    // In place: x = 2 * x + 1 through eval_into.
    let mut x = a.astype::<f32>().unwrap();
    let e = 2.0 * &x + 1.0;
    e.eval_into(&mut x).unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![3.0, 5.0, 7.0, 9.0, 11.0, 13.0]);
    // Integers: division by zero is 0, as the built-in div.
    let i = GpuArray::<i32>::from_slice(&dev, &[7, -7, 3], &[3]).unwrap();
    let zero = GpuArray::<i32>::zeros(&dev, &[3]).unwrap();
    assert_eq!(
        (&i / &zero + 1).eval().unwrap().to_vec().unwrap(),
        vec![1, 1, 1]
    );
    assert_eq!((&i / 2).eval().unwrap().to_vec().unwrap(), vec![3, -3, 1]);
    // f16 computes in float and rounds once.
    let h = GpuArray::<gpukit_core::f16>::from_slice(
        &dev,
        &[
            gpukit_core::f16::from_f32(1.5),
            gpukit_core::f16::from_f32(-2.0),
        ],
        &[2],
    )
    .unwrap();
    let hh = (&h * &h + gpukit_core::f16::from_f32(0.25))
        .eval()
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(hh[0].to_f32(), 2.5);
    // Random shapes: the fused result equals the named methods' result, for broadcasting pairs.
    runner(16)
        .run(&(broadcast_pair(), any::<u64>()), |((_, sa, sb), seed)| {
            let mut rng = Rng(seed);
            let x: Vec<f64> = random_special(&mut rng, sa.iter().product(), false);
            let y: Vec<f64> = random_special(&mut rng, sb.iter().product(), true);
            let gx = GpuArray::from_slice(&dev, &x, &sa).map_err(fail)?;
            let gy = GpuArray::from_slice(&dev, &y, &sb).map_err(fail)?;
            let fused = ((&gx - &gy) * 3.0 / &gy)
                .eval()
                .map_err(fail)?
                .to_vec()
                .map_err(fail)?;
            let eager = gx.sub(&gy).map_err(fail)?.mul_scalar(3.0).map_err(fail)?;
            let eager = eager.div(&gy).map_err(fail)?.to_vec().map_err(fail)?;
            prop_assert_eq!(fused.len(), eager.len());
            for (f, e) in fused.iter().zip(&eager) {
                prop_assert!(f == e || (f.is_nan() && e.is_nan()), "{} vs {}", f, e);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn errors_name_what_is_wrong() {
    let Some(dev) = device("errors_name_what_is_wrong") else {
        return;
    };
    let a = GpuArray::<f32>::from_slice(&dev, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let c = GpuArray::<f32>::zeros(&dev, &[4]).unwrap();
    let msg = a.add(&c).unwrap_err().to_string();
    assert!(msg.contains("[2, 3]") && msg.contains("[4]"), "{msg}");
    let i = GpuArray::<i32>::ones(&dev, &[3]).unwrap();
    assert!(matches!(i.exp(), Err(Error::UnsupportedDType { .. })));
    assert!(matches!(
        a.bitwise_and(&a),
        Err(Error::UnsupportedDType { .. })
    ));
    assert!(matches!(
        a.bitwise_not(),
        Err(Error::UnsupportedDType { .. })
    ));
    assert!(i.item().is_err());
    assert!(a.reshape(&[4]).is_err());
    assert!(a.permute(&[0, 0]).is_err());
    assert!(a.slice(&s![3]).is_err());
    assert!(matches!(a.sum_axis(2), Err(Error::AxisOutOfRange { .. })));
    let empty = GpuArray::<f32>::zeros(&dev, &[0, 3]).unwrap();
    assert!(matches!(empty.max(), Err(Error::EmptyReduction { .. })));
    assert_eq!(empty.sum().unwrap().item().unwrap(), 0.0);
    assert!(GpuArray::<f32>::from_slice(&dev, &[1.0, 2.0], &[3]).is_err());
}
