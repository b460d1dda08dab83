//! GPU tests of the operations against CPU references, for every element type, over random
//! shapes (proptest: empty, 1, primes, broadcasting pairs) plus a few large and misaligned
//! cases. Floats are compared with an f64 reference within one rounding of the element type
//! (see `common::TestType::rtol`); integers exactly.

mod common;

use common::*;
use gpukit_core::{bf16, f16, BinaryOp, CompareOp, DTypeKind, Device, Error, GpuArray, UnaryOp};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

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
                // Drop some leading dimensions (NumPy aligns shapes on the right).
                (
                    out.clone(),
                    a[da.min(a.len())..].to_vec(),
                    b[db.min(b.len())..].to_vec(),
                )
            })
    })
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
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
        };
        // The GPU rounds to T once; compare against the value rounded the same way.
        T::from_f64(r).to_f64()
    } else {
        let (x, y) = (a.to_i64() as i128, b.to_i64() as i128);
        let w = |v: i128| wrap::<T>(v).to_i64() as i128;
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
        r as f64
    }
}

const BINARY_OPS: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
    BinaryOp::Pow,
];

fn binary_case<T: TestType>(
    dev: &Device,
    out: &[usize],
    sa: &[usize],
    sb: &[usize],
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let na: usize = sa.iter().product();
    let nb: usize = sb.iter().product();
    let nout: usize = out.iter().product();
    let a: Vec<T> = random_vec(&mut rng, na, false);
    let b: Vec<T> = random_vec(&mut rng, nb, true);
    let ga = GpuArray::from_slice(dev, &a, sa).map_err(fail)?;
    let gb = GpuArray::from_slice(dev, &b, sb).map_err(fail)?;
    for op in BINARY_OPS {
        let g = ga.binary(op, &gb).map_err(fail)?;
        prop_assert_eq!(g.shape(), out);
        let got = g.to_vec().map_err(fail)?;
        let want: Vec<f64> = (0..nout)
            .map(|i| ref_binary(op, a[bcast_index(i, out, sa)], b[bcast_index(i, out, sb)]))
            .collect();
        check::<T>(&format!("{op:?} {sa:?} {sb:?}"), &got, &want, 1e-30).map_err(fail)?;
    }
    // Comparisons and where on the same operands.
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
            let (x, y) = (
                a[bcast_index(i, out, sa)].to_f64(),
                b[bcast_index(i, out, sb)].to_f64(),
            );
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
    let mask = ga.gt(&gb).map_err(fail)?;
    let w = gpukit_core::where_(&mask, &ga, &gb)
        .map_err(fail)?
        .to_vec()
        .map_err(fail)?;
    for (i, v) in w.iter().enumerate() {
        let (x, y) = (a[bcast_index(i, out, sa)], b[bcast_index(i, out, sb)]);
        let want = if x.to_f64() > y.to_f64() { x } else { y };
        prop_assert_eq!(v.to_f64(), want.to_f64(), "where at {}", i);
    }
    Ok(())
}

fn binary_all<T: TestType>(dev: &Device, cases: u32) {
    runner(cases)
        .run(
            &(broadcast_pair(), any::<u64>()),
            |((out, sa, sb), seed)| {
                // The expected shape by an independent rule: right-aligned, the larger extent unless
                // one is 1 (the generator guarantees compatibility).
                let _ = out;
                let n = sa.len().max(sb.len());
                let ext = |s: &[usize], i: usize| {
                    if i + s.len() >= n {
                        s[i + s.len() - n]
                    } else {
                        1
                    }
                };
                let out: Vec<usize> = (0..n)
                    .map(|i| {
                        let (x, y) = (ext(&sa, i), ext(&sb, i));
                        if x == 1 {
                            y
                        } else {
                            x
                        }
                    })
                    .collect();
                binary_case::<T>(dev, &out, &sa, &sb, seed)
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", T::RUST_NAME));
}

macro_rules! for_all_dtypes {
    ($f:ident, $($arg:expr),*) => {
        $f::<f32>($($arg),*);
        $f::<f64>($($arg),*);
        $f::<f16>($($arg),*);
        $f::<bf16>($($arg),*);
        $f::<i32>($($arg),*);
        $f::<u32>($($arg),*);
        $f::<i64>($($arg),*);
        $f::<u8>($($arg),*);
    };
}

#[test]
fn binary_compare_where_broadcast_every_dtype() {
    let Some(dev) = device("binary_compare_where_broadcast_every_dtype") else {
        return;
    };
    for_all_dtypes!(binary_all, &dev, 24);
}

fn scalar_and_unary<T: TestType>(dev: &Device, n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let a: Vec<T> = random_vec(&mut rng, n, true);
    let s = T::random(&mut rng, true);
    let ga = GpuArray::from_slice(dev, &a, &[n]).unwrap();
    for op in BINARY_OPS {
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
                1e-30,
            )
            .unwrap();
        }
    }
    for (op, f) in [
        (UnaryOp::Neg, (|x: f64| -x) as fn(f64) -> f64),
        (UnaryOp::Abs, f64::abs),
        (UnaryOp::Exp, f64::exp),
        (UnaryOp::Log, f64::ln),
        (UnaryOp::Sqrt, f64::sqrt),
        (UnaryOp::Tanh, f64::tanh),
        (UnaryOp::Relu, |x: f64| if x > 0.0 { x } else { 0.0 }),
        (UnaryOp::Sigmoid, |x: f64| 1.0 / (1.0 + (-x).exp())),
    ] {
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
        let want: Vec<f64> = a
            .iter()
            .map(|&x| {
                if T::KIND == DTypeKind::Float {
                    T::from_f64(f(x.to_f64())).to_f64()
                } else {
                    // neg wraps for unsigned; abs of unsigned is the value.
                    match op {
                        UnaryOp::Neg => wrap::<T>(-(x.to_i64() as i128)).to_f64(),
                        UnaryOp::Abs if T::KIND == DTypeKind::Unsigned => x.to_f64(),
                        _ => f(x.to_f64()),
                    }
                }
            })
            .collect();
        // Transcendentals in f32 are within a few ulp: allow 4 roundings.
        let atol = if T::RUST_NAME == "f32" { 1e-6 } else { 1e-30 };
        check::<T>(&format!("{op:?} n={n}"), &got, &want, atol).unwrap();
    }
}

#[test]
fn scalar_and_unary_every_dtype_and_size() {
    let Some(dev) = device("scalar_and_unary_every_dtype_and_size") else {
        return;
    };
    // Sizes: 1, a prime, one vector tail short, a large odd size (vector path + tail).
    for n in [1usize, 7, 31, 4097, (1 << 20) + 3] {
        for_all_dtypes!(scalar_and_unary, &dev, n, n as u64 * 7919);
    }
}

#[test]
fn std_ops_and_error_messages() {
    let Some(dev) = device("std_ops_and_error_messages") else {
        return;
    };
    let a = GpuArray::<f32>::from_slice(&dev, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = GpuArray::<f32>::from_slice(&dev, &[10.0, 20.0, 30.0], &[3]).unwrap();
    assert_eq!(
        (&a + &b).unwrap().to_vec().unwrap(),
        vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
    );
    assert_eq!((&a - &b).unwrap().to_vec().unwrap()[0], -9.0);
    assert_eq!(
        (&a * 2.0).unwrap().to_vec().unwrap(),
        vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
    assert_eq!((&a / 2.0).unwrap().to_vec().unwrap()[1], 1.0);
    assert_eq!((-&a).unwrap().to_vec().unwrap()[2], -3.0);
    let c = GpuArray::<f32>::zeros(&dev, &[4]).unwrap();
    let e = (&a + &c).unwrap_err();
    match &e {
        Error::ShapeMismatch { lhs, rhs, .. } => {
            assert_eq!(
                (lhs.as_slice(), rhs.as_slice()),
                (&[2usize, 3][..], &[4usize][..])
            )
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("[2, 3]") && msg.contains("[4]"), "{msg}");
    let i = GpuArray::<i32>::ones(&dev, &[3]).unwrap();
    assert!(matches!(i.exp(), Err(Error::UnsupportedDType { .. })));
    assert!(i.item().is_err());
    assert!(a.reshape(&[4]).is_err());
    assert!(a.permute(&[0, 0]).is_err());
    assert!(a.slice(1..3).is_err());
    assert!(matches!(a.sum_axis(2), Err(Error::AxisOutOfRange { .. })));
    let empty = GpuArray::<f32>::zeros(&dev, &[0, 3]).unwrap();
    assert!(matches!(empty.max(), Err(Error::EmptyReduction { .. })));
    assert_eq!(empty.sum().unwrap().item().unwrap(), 0.0);
    assert!(GpuArray::<f32>::from_slice(&dev, &[1.0, 2.0], &[3]).is_err());
}

#[test]
fn creation_views_and_casts() {
    let Some(dev) = device("creation_views_and_casts") else {
        return;
    };
    for n in [0usize, 1, 5, 1000003] {
        assert!(GpuArray::<f64>::zeros(&dev, &[n])
            .unwrap()
            .to_vec()
            .unwrap()
            .iter()
            .all(|&x| x == 0.0));
        assert!(GpuArray::<u8>::ones(&dev, &[n])
            .unwrap()
            .to_vec()
            .unwrap()
            .iter()
            .all(|&x| x == 1));
        let f = GpuArray::<bf16>::full(&dev, &[n], bf16::from_f32(1.5))
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(f.iter().all(|&x| x.to_f32() == 1.5));
    }
    let r = GpuArray::<i64>::arange(&dev, -5, 1 << 40, 1 << 38)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(r, (0..5).map(|i| -5 + i * (1i64 << 38)).collect::<Vec<_>>());
    let r = GpuArray::<f32>::arange(&dev, 0.0, 1.0, 0.25)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(r, vec![0.0, 0.25, 0.5, 0.75]);
    assert_eq!(GpuArray::<u32>::arange(&dev, 5, 0, 1).unwrap().len(), 0);
    assert!(GpuArray::<f32>::arange(&dev, 0.0, 1.0, 0.0).is_err());

    // Transpose / permute / slice / reshape against CPU index arithmetic.
    let (p, q, r3) = (3usize, 5usize, 7usize);
    let host: Vec<i32> = (0..(p * q * r3) as i32).collect();
    let a = GpuArray::from_slice(&dev, &host, &[p, q, r3]).unwrap();
    let t = a.permute(&[2, 0, 1]).unwrap();
    assert!(!t.is_contiguous());
    assert_eq!(t.shape(), &[r3, p, q]);
    let tv = t.to_vec().unwrap();
    for k in 0..r3 {
        for i in 0..p {
            for j in 0..q {
                assert_eq!(tv[(k * p + i) * q + j], host[(i * q + j) * r3 + k]);
            }
        }
    }
    let m = GpuArray::from_slice(&dev, &host[..q * r3], &[q, r3]).unwrap();
    let mt = m.transpose().to_vec().unwrap();
    assert_eq!(mt[1], host[r3]);
    let s = a.slice(1..3).unwrap();
    assert_eq!(s.to_vec().unwrap(), host[q * r3..3 * q * r3].to_vec());
    let rs = t.reshape(&[r3 * p * q]).unwrap();
    assert_eq!(rs.to_vec().unwrap(), tv);
    // Operations on non-contiguous views use the strided path.
    let sum = (&t + &t).unwrap().to_vec().unwrap();
    assert_eq!(sum, tv.iter().map(|x| 2 * x).collect::<Vec<_>>());
    let neg = t.neg().unwrap().to_vec().unwrap();
    assert_eq!(neg, tv.iter().map(|x| -x).collect::<Vec<_>>());

    // Misaligned (offset by one element) views take the scalar path of contiguous kernels.
    let v: Vec<f32> = (0..1001).map(|i| i as f32 * 0.5).collect();
    let g = GpuArray::from_slice(&dev, &v, &[1001, 1]).unwrap();
    let off = g.slice(1..1001).unwrap();
    assert!(off.is_contiguous() && off.device_ptr() % 16 != 0);
    let d = (&off + &off).unwrap().to_vec().unwrap();
    assert_eq!(d, v[1..].iter().map(|x| x * 2.0).collect::<Vec<_>>());
    assert_eq!(
        off.sum().unwrap().item().unwrap(),
        v[1..].iter().sum::<f32>()
    );

    // Casts.
    let x = GpuArray::<f32>::from_slice(&dev, &[-2.7, -0.5, 0.0, 3.9, 300.25], &[5]).unwrap();
    assert_eq!(
        x.astype::<i32>().unwrap().to_vec().unwrap(),
        vec![-2, 0, 0, 3, 300]
    );
    assert_eq!(x.astype::<f64>().unwrap().to_vec().unwrap()[4], 300.25);
    assert_eq!(
        x.astype::<f16>().unwrap().to_vec().unwrap()[1],
        f16::from_f32(-0.5)
    );
    assert_eq!(
        x.astype::<bf16>()
            .unwrap()
            .astype::<f32>()
            .unwrap()
            .to_vec()
            .unwrap()[3],
        bf16::from_f32(3.9).to_f32()
    );
    let big = GpuArray::<i64>::from_slice(&dev, &[(1 << 40) + 3], &[1]).unwrap();
    assert_eq!(big.astype::<u8>().unwrap().to_vec().unwrap(), vec![3]);
    assert_eq!(
        t.astype::<f64>().unwrap().to_vec().unwrap()[3],
        tv[3] as f64
    );

    // copy_from writes through a view.
    let mut dst = GpuArray::<i32>::zeros(&dev, &[4, 3]).unwrap();
    let src = GpuArray::<i32>::from_slice(&dev, &[7, 8, 9], &[3]).unwrap();
    let mut rows = dst.slice(1..3).unwrap();
    rows.copy_from(&src).unwrap();
    assert_eq!(
        dst.to_vec().unwrap(),
        vec![0, 0, 0, 7, 8, 9, 7, 8, 9, 0, 0, 0]
    );
    let bad = GpuArray::<i32>::zeros(&dev, &[2]).unwrap();
    assert!(dst.copy_from(&bad).is_err());
}

fn reduce_case<T: TestType>(dev: &Device, shape: &[usize], seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n: usize = shape.iter().product();
    let a: Vec<T> = random_vec(&mut rng, n, false);
    let g = GpuArray::from_slice(dev, &a, shape).map_err(fail)?;
    let is_float = T::KIND == DTypeKind::Float;
    let sum_ref = |xs: &[T]| -> f64 {
        if is_float {
            xs.iter().map(|x| x.to_f64()).sum()
        } else {
            wrap::<T>(xs.iter().map(|x| x.to_i64() as i128).sum()).to_f64()
        }
    };
    let abs_sum = |xs: &[T]| xs.iter().map(|x| x.to_f64().abs()).sum::<f64>();
    let eps = T::rtol();
    let mean_ref = |xs: &[T]| -> f64 {
        if is_float {
            xs.iter().map(|x| x.to_f64()).sum::<f64>() / xs.len() as f64
        } else {
            let s: i128 = xs.iter().map(|x| x.to_i64() as i128).sum();
            wrap::<T>(s / xs.len() as i128).to_f64()
        }
    };
    let first_arg = |xs: &[T], max: bool| -> i64 {
        let mut best = 0;
        for (i, x) in xs.iter().enumerate() {
            let (v, b) = (x.to_f64(), xs[best].to_f64());
            if (max && v > b) || (!max && v < b) {
                best = i;
            }
        }
        best as i64
    };
    // All elements.
    let s = g.sum().map_err(fail)?.item().map_err(fail)?;
    check::<T>("sum", &[s], &[sum_ref(&a)], 4.0 * eps * abs_sum(&a) + 1e-30).map_err(fail)?;
    if n > 0 {
        let m = g.mean().map_err(fail)?.item().map_err(fail)?;
        check::<T>(
            "mean",
            &[m],
            &[mean_ref(&a)],
            4.0 * eps * abs_sum(&a) / n as f64 + 1e-30,
        )
        .map_err(fail)?;
        let mx = g.max().map_err(fail)?.item().map_err(fail)?;
        let mn = g.min().map_err(fail)?.item().map_err(fail)?;
        let fmax = a
            .iter()
            .map(|x| x.to_f64())
            .fold(f64::NEG_INFINITY, f64::max);
        let fmin = a.iter().map(|x| x.to_f64()).fold(f64::INFINITY, f64::min);
        prop_assert_eq!((mx.to_f64(), mn.to_f64()), (fmax, fmin));
        prop_assert_eq!(
            g.argmax().map_err(fail)?.item().map_err(fail)?,
            first_arg(&a, true)
        );
        prop_assert_eq!(
            g.argmin().map_err(fail)?.item().map_err(fail)?,
            first_arg(&a, false)
        );
    }
    // Each axis.
    for axis in 0..shape.len() {
        let (outer, r, inner): (usize, usize, usize) = (
            shape[..axis].iter().product(),
            shape[axis],
            shape[axis + 1..].iter().product(),
        );
        let lane =
            |o: usize, i: usize| -> Vec<T> { (0..r).map(|k| a[(o * r + k) * inner + i]).collect() };
        let gs = g.sum_axis(axis).map_err(fail)?.to_vec().map_err(fail)?;
        prop_assert_eq!(gs.len(), outer * inner);
        for o in 0..outer {
            for i in 0..inner {
                let l = lane(o, i);
                check::<T>(
                    &format!("sum_axis {axis} of {shape:?}"),
                    &[gs[o * inner + i]],
                    &[sum_ref(&l)],
                    4.0 * eps * abs_sum(&l) + 1e-30,
                )
                .map_err(fail)?;
            }
        }
        if r == 0 {
            prop_assert!(g.max_axis(axis).is_err());
            continue;
        }
        let gm = g.mean_axis(axis).map_err(fail)?.to_vec().map_err(fail)?;
        let gx = g.max_axis(axis).map_err(fail)?.to_vec().map_err(fail)?;
        let gn = g.min_axis(axis).map_err(fail)?.to_vec().map_err(fail)?;
        let ga = g.argmax_axis(axis).map_err(fail)?.to_vec().map_err(fail)?;
        let gi = g.argmin_axis(axis).map_err(fail)?.to_vec().map_err(fail)?;
        for o in 0..outer {
            for i in 0..inner {
                let l = lane(o, i);
                let c = o * inner + i;
                check::<T>(
                    "mean_axis",
                    &[gm[c]],
                    &[mean_ref(&l)],
                    4.0 * eps * abs_sum(&l) / r as f64 + 1e-30,
                )
                .map_err(fail)?;
                let fmax = l
                    .iter()
                    .map(|x| x.to_f64())
                    .fold(f64::NEG_INFINITY, f64::max);
                let fmin = l.iter().map(|x| x.to_f64()).fold(f64::INFINITY, f64::min);
                prop_assert_eq!(
                    (gx[c].to_f64(), gn[c].to_f64()),
                    (fmax, fmin),
                    "max/min axis {} of {:?}",
                    axis,
                    shape
                );
                prop_assert_eq!(
                    (ga[c], gi[c]),
                    (first_arg(&l, true), first_arg(&l, false)),
                    "argmax/argmin axis {} of {:?}",
                    axis,
                    shape
                );
            }
        }
    }
    Ok(())
}

fn reduce_all<T: TestType>(dev: &Device, cases: u32) {
    let shapes = prop::collection::vec(
        prop::sample::select(vec![0usize, 1, 2, 3, 5, 13, 31, 257, 1031]),
        1..4,
    )
    .prop_filter("at most ~300k elements", |s| {
        s.iter().product::<usize>() <= 300_000
    });
    runner(cases)
        .run(&(shapes, any::<u64>()), |(shape, seed)| {
            reduce_case::<T>(dev, &shape, seed)
        })
        .unwrap_or_else(|e| panic!("{}: {e}", T::RUST_NAME));
}

#[test]
fn reductions_every_dtype_all_and_axis() {
    let Some(dev) = device("reductions_every_dtype_all_and_axis") else {
        return;
    };
    for_all_dtypes!(reduce_all, &dev, 16);
    // Large single reductions (vector path, many blocks).
    reduce_case::<f32>(&dev, &[3_000_017], 1).unwrap();
    reduce_case::<u8>(&dev, &[2_000_003], 2).unwrap();
    reduce_case::<f64>(&dev, &[1000, 1001], 3).unwrap();
}

#[test]
fn sum_of_1e8_f32_has_no_catastrophic_error() {
    let Some(dev) = device("sum_of_1e8_f32_has_no_catastrophic_error") else {
        return;
    };
    let n = 100_000_000usize;
    let mut rng = Rng(42);
    let host: Vec<f32> = (0..n).map(|_| rng.uniform(0.0, 1.0) as f32).collect();
    let exact: f64 = host.iter().map(|&x| x as f64).sum();
    let naive: f32 = host.iter().sum();
    let g = GpuArray::from_slice(&dev, &host, &[n]).unwrap();
    let s = g.sum().unwrap().item().unwrap() as f64;
    let m = g.mean().unwrap().item().unwrap() as f64;
    let rel = (s - exact).abs() / exact;
    eprintln!(
        "sum of 1e8 uniform f32: exact {exact:.1}, gpukit {s:.1} (rel {rel:.2e}), naive sequential f32 {naive:.1} (rel {:.2e})",
        (naive as f64 - exact).abs() / exact
    );
    assert!(rel < 1e-6, "relative error {rel:e}");
    assert!((m - exact / n as f64).abs() / (exact / n as f64) < 1e-6);
    // Axis sum over 1e4 x 1e4 columns (column path) as well.
    let g2 = g.reshape(&[10_000, 10_000]).unwrap();
    let cols = g2.sum_axis(0).unwrap().to_vec().unwrap();
    let exact0: f64 = (0..10_000).map(|r| host[r * 10_000] as f64).sum();
    assert!((cols[0] as f64 - exact0).abs() / exact0 < 1e-5);
}
