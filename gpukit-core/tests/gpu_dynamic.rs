//! GPU tests of `DynArray`: NumPy's result types and values for every pair of element types
//! (arithmetic, true and floor division, comparisons, reductions, casts), against a CPU
//! reference computed in f64 / i128 and rounded to the result type.

mod common;

use common::*;
use gpukit_core::dynamic::ops::{arith, arith_inplace, compare, Arith, Operand};
use gpukit_core::dynamic::{DynArray, ElementType, Scalar};
use gpukit_core::{CompareOp, ReduceOp};

const TYPES: [ElementType; 10] = ElementType::ALL;

/// A reference value: floats as f64, integers and bools exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    F(f64),
    I(i128),
}

impl V {
    fn f(self) -> f64 {
        match self {
            V::F(x) => x,
            V::I(i) => i as f64,
        }
    }
}

/// Small random values of type `t` (integers in 0..50 so that every type holds every sum and
/// product of two; floats with two decimals, exact in f16 after rounding is applied below).
fn values(t: ElementType, n: usize, rng: &mut Rng, nonzero: bool) -> Vec<V> {
    (0..n)
        .map(|_| {
            let mut v = if t == ElementType::Bool {
                V::I((rng.next_u64() % 2) as i128)
            } else if t.is_float() {
                V::F(round_to(t, (rng.uniform(-8.0, 8.0) * 4.0).round() / 4.0))
            } else if t.kind() == gpukit_core::dynamic::ElementKind::Signed {
                V::I((rng.next_u64() % 100) as i128 - 50)
            } else {
                V::I((rng.next_u64() % 50) as i128)
            };
            if nonzero && v.f() == 0.0 {
                v = if t.is_float() { V::F(1.0) } else { V::I(1) };
            }
            v
        })
        .collect()
}

fn round_to(t: ElementType, x: f64) -> f64 {
    match t {
        ElementType::F16 => half::f16::from_f64(x).to_f64(),
        ElementType::BF16 => half::bf16::from_f64(x).to_f64(),
        ElementType::F32 => x as f32 as f64,
        _ => x,
    }
}

fn to_bytes(t: ElementType, vals: &[V]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vals {
        match t {
            ElementType::Bool | ElementType::U8 => out.push(v.f() as u8),
            ElementType::I32 => out.extend((v.f() as i32).to_ne_bytes()),
            ElementType::U32 => out.extend((v.f() as u32).to_ne_bytes()),
            ElementType::I64 => out.extend((v.f() as i64).to_ne_bytes()),
            ElementType::U64 => out.extend((v.f() as u64).to_ne_bytes()),
            ElementType::F16 => out.extend(half::f16::from_f64(v.f()).to_ne_bytes()),
            ElementType::BF16 => out.extend(half::bf16::from_f64(v.f()).to_ne_bytes()),
            ElementType::F32 => out.extend((v.f() as f32).to_ne_bytes()),
            ElementType::F64 => out.extend(v.f().to_ne_bytes()),
        }
    }
    out
}

fn from_bytes(t: ElementType, b: &[u8]) -> Vec<f64> {
    b.chunks(t.itemsize())
        .map(|c| match t {
            ElementType::Bool | ElementType::U8 => c[0] as f64,
            ElementType::I32 => i32::from_ne_bytes(c.try_into().unwrap()) as f64,
            ElementType::U32 => u32::from_ne_bytes(c.try_into().unwrap()) as f64,
            ElementType::I64 => i64::from_ne_bytes(c.try_into().unwrap()) as f64,
            ElementType::U64 => u64::from_ne_bytes(c.try_into().unwrap()) as f64,
            ElementType::F16 => half::f16::from_ne_bytes(c.try_into().unwrap()).to_f64(),
            ElementType::BF16 => half::bf16::from_ne_bytes(c.try_into().unwrap()).to_f64(),
            ElementType::F32 => f32::from_ne_bytes(c.try_into().unwrap()) as f64,
            ElementType::F64 => f64::from_ne_bytes(c.try_into().unwrap()),
        })
        .collect()
}

fn download(a: &DynArray) -> Vec<f64> {
    let mut b = vec![0u8; a.len() * a.itemsize()];
    a.copy_to_bytes(&mut b).unwrap();
    from_bytes(a.dtype(), &b)
}

fn tol(t: ElementType) -> f64 {
    match t {
        ElementType::F16 => 2e-3,
        ElementType::BF16 => 1.6e-2,
        ElementType::F32 => 2e-6,
        ElementType::F64 => 1e-13,
        _ => 0.0,
    }
}

fn close(t: ElementType, got: f64, want: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    (got - want).abs() <= tol(t) * want.abs().max(1.0)
}

fn numpy_floor_div(a: f64, b: f64, float: bool) -> f64 {
    if !float {
        if b == 0.0 {
            return 0.0;
        }
        return (a / b).floor();
    }
    (a / b).floor()
}

#[test]
fn every_pair_of_types_promotes_and_computes_as_numpy() {
    let Some(dev) = device("every_pair_of_types_promotes_and_computes_as_numpy") else {
        return;
    };
    let mut rng = Rng(7);
    let n = 37;
    for ta in TYPES {
        for tb in TYPES {
            let (va, vb) = (
                values(ta, n, &mut rng, false),
                values(tb, n, &mut rng, true),
            );
            let a = DynArray::from_bytes(&dev, &to_bytes(ta, &va), &[n], ta).unwrap();
            let b = DynArray::from_bytes(&dev, &to_bytes(tb, &vb), &[n], tb).unwrap();
            let t = ElementType::promote(ta, tb);
            for op in [
                Arith::Add,
                Arith::Mul,
                Arith::TrueDivide,
                Arith::FloorDivide,
                Arith::Maximum,
            ] {
                let r = arith(op, Operand::Array(&a), Operand::Array(&b));
                let bool_err = t == ElementType::Bool && op == Arith::FloorDivide;
                if bool_err {
                    assert!(r.is_err(), "{op:?} on bool must be refused");
                    continue;
                }
                let r = r.unwrap_or_else(|e| panic!("{ta} {op:?} {tb}: {e}"));
                let want_t = if op == Arith::TrueDivide && !t.is_float() {
                    ElementType::F64
                } else {
                    t
                };
                assert_eq!(r.dtype(), want_t, "{ta} {op:?} {tb}");
                let got = download(&r);
                for i in 0..n {
                    let (x, y) = (va[i].f(), vb[i].f());
                    let want = match (op, t) {
                        (Arith::Add, ElementType::Bool) => ((x != 0.0) || (y != 0.0)) as u8 as f64,
                        (Arith::Mul, ElementType::Bool) => ((x != 0.0) && (y != 0.0)) as u8 as f64,
                        (Arith::Maximum, ElementType::Bool) => {
                            ((x != 0.0) || (y != 0.0)) as u8 as f64
                        }
                        (Arith::Add, _) => x + y,
                        (Arith::Mul, _) => x * y,
                        (Arith::TrueDivide, _) => x / y,
                        (Arith::FloorDivide, _) => numpy_floor_div(x, y, t.is_float()),
                        (Arith::Maximum, _) => x.max(y),
                        _ => unreachable!(),
                    };
                    let want = if want_t.is_integer() {
                        // unsigned results wrap as NumPy's
                        match want_t {
                            ElementType::U8 => (want as i64).rem_euclid(256) as f64,
                            ElementType::U32 => (want as i64).rem_euclid(1 << 32) as f64,
                            ElementType::U64 => (want as i64) as u64 as f64,
                            _ => want,
                        }
                    } else {
                        round_to(want_t, want)
                    };
                    assert!(
                        close(want_t, got[i], want),
                        "{ta} {op:?} {tb} at {i}: {x} , {y} -> {} want {want}",
                        got[i]
                    );
                }
            }
            let c = compare(CompareOp::Lt, Operand::Array(&a), Operand::Array(&b)).unwrap();
            assert_eq!(c.dtype(), ElementType::Bool);
            let got = download(&c);
            for i in 0..n {
                assert_eq!(
                    got[i],
                    (va[i].f() < vb[i].f()) as u8 as f64,
                    "{ta} < {tb} at {i}"
                );
            }
        }
    }
}

#[test]
fn weak_scalars_keep_the_array_type_and_overflow_is_an_error() {
    let Some(dev) = device("weak_scalars_keep_the_array_type_and_overflow_is_an_error") else {
        return;
    };
    let a = DynArray::arange(&dev, 0.0, 10.0, 1.0, ElementType::U8).unwrap();
    let r = arith(
        Arith::Mul,
        Operand::Array(&a),
        Operand::Scalar(Scalar::int(2)),
    )
    .unwrap();
    assert_eq!(r.dtype(), ElementType::U8);
    assert_eq!(
        download(&r),
        (0..10).map(|i| (2 * i) as f64).collect::<Vec<_>>()
    );
    let e = arith(
        Arith::Add,
        Operand::Array(&a),
        Operand::Scalar(Scalar::int(300)),
    )
    .unwrap_err();
    assert!(
        matches!(e, gpukit_core::Error::ScalarOutOfRange { .. }),
        "{e}"
    );
    let f = arith(
        Arith::Add,
        Operand::Array(&a),
        Operand::Scalar(Scalar::float(0.5)),
    )
    .unwrap();
    assert_eq!(f.dtype(), ElementType::F64);
    // scalar on the left
    let d = arith(
        Arith::Sub,
        Operand::Scalar(Scalar::int(20)),
        Operand::Array(&a),
    )
    .unwrap();
    assert_eq!(
        download(&d),
        (0..10).map(|i| (20 - i) as f64).collect::<Vec<_>>()
    );
    // out-of-range comparisons are exact
    let c = compare(
        CompareOp::Lt,
        Operand::Array(&a),
        Operand::Scalar(Scalar::int(300)),
    )
    .unwrap();
    assert!(download(&c).iter().all(|&x| x == 1.0));
    // in place: same_kind
    let x = DynArray::zeros(&dev, &[4], ElementType::I32).unwrap();
    assert!(arith_inplace(Arith::Add, &x, Operand::Scalar(Scalar::float(1.5))).is_err());
    arith_inplace(Arith::Add, &x, Operand::Scalar(Scalar::int(3))).unwrap();
    assert_eq!(download(&x), vec![3.0; 4]);
    let y = DynArray::zeros(&dev, &[4], ElementType::F32).unwrap();
    let z = DynArray::full(&dev, &[4], ElementType::F64, &Scalar::float(0.25)).unwrap();
    arith_inplace(Arith::Add, &y, Operand::Array(&z)).unwrap();
    assert_eq!(y.dtype(), ElementType::F32);
    assert_eq!(download(&y), vec![0.25; 4]);
}

#[test]
fn reductions_have_numpy_result_types() {
    let Some(dev) = device("reductions_have_numpy_result_types") else {
        return;
    };
    let mut rng = Rng(11);
    for t in TYPES {
        let v = values(t, 24, &mut rng, false);
        let a = DynArray::from_bytes(&dev, &to_bytes(t, &v), &[4, 6], t).unwrap();
        let s = a.reduce(ReduceOp::Sum, Some(&[1]), true, 0).unwrap();
        assert_eq!(s.dtype(), t.sum_type(), "sum of {t}");
        assert_eq!(s.shape(), &[4, 1]);
        let got = download(&s);
        for r in 0..4 {
            let want: f64 = (0..6).map(|c| v[r * 6 + c].f()).sum();
            assert!(
                close(t.sum_type(), got[r], round_to(t.sum_type(), want))
                    || t.is_float() && (got[r] - want).abs() < 0.1,
                "{t} row {r}: {} vs {want}",
                got[r]
            );
        }
        let m = a.reduce(ReduceOp::Mean, None, false, 0).unwrap();
        assert_eq!(m.dtype(), t.mean_type(), "mean of {t}");
        let mx = a.reduce(ReduceOp::Max, Some(&[0]), false, 0).unwrap();
        assert_eq!(mx.dtype(), t);
        let am = a.reduce(ReduceOp::ArgMax, Some(&[1]), false, 0).unwrap();
        assert_eq!(am.dtype(), ElementType::I64);
        let any = a.reduce(ReduceOp::Any, None, false, 0).unwrap();
        assert_eq!(any.dtype(), ElementType::Bool);
        // float-only functions compute in NumPy's float type
        let e = a.unary(gpukit_core::UnaryOp::Exp);
        assert_eq!(e.unwrap().dtype(), t.to_float());
        // casts round-trip through bool as x != 0
        let b = a.astype(ElementType::Bool).unwrap();
        let got = download(&b);
        for (i, x) in v.iter().enumerate() {
            assert_eq!(got[i], (x.f() != 0.0) as u8 as f64);
        }
    }
}

/// Integer positions (`a[idx]`, `a[idx] = v`) are checked once, as NumPy checks them: a
/// position outside `[-len, len)` is an error, whatever its type. Before: positions in
/// `[-2 len, -len)` were counted from the end twice (`-2 * len + 1` read element 1), and `u64`
/// positions past `i64::MAX` became negative in the conversion (`u64::MAX` read the last
/// element).
#[test]
fn integer_positions_outside_the_axis_are_errors_whatever_their_type() {
    let Some(dev) = device("integer_positions_outside_the_axis_are_errors_whatever_their_type")
    else {
        return;
    };
    let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let a =
        DynArray::from_bytes(&dev, &f32s(&[1.0, 2.0, 3.0, 4.0]), &[4], ElementType::F32).unwrap();
    let pos = |t: ElementType, p: i128| -> DynArray {
        let b: Vec<u8> = match t {
            ElementType::U64 => (p as u64).to_le_bytes().to_vec(),
            ElementType::I64 => (p as i64).to_le_bytes().to_vec(),
            ElementType::I32 => (p as i32).to_le_bytes().to_vec(),
            other => panic!("{other}"),
        };
        DynArray::from_bytes(&dev, &b, &[1], t).unwrap()
    };
    let bad: [(ElementType, i128); 7] = [
        (ElementType::U64, u64::MAX as i128),
        (ElementType::U64, 1 << 63),
        (ElementType::U64, (1 << 63) + 2),
        (ElementType::I64, -7),
        (ElementType::I64, -5),
        (ElementType::I32, -8),
        (ElementType::I64, 4),
    ];
    for (t, p) in bad {
        let e = a.take(&pos(t, p), 0).unwrap_err().to_string();
        assert!(e.contains("out of bounds"), "take {t} {p}: {e}");
        let v = DynArray::from_bytes(&dev, &f32s(&[9.0]), &[1], ElementType::F32).unwrap();
        assert!(a.put(&pos(t, p), &v).is_err(), "put {t} {p}");
        assert_eq!(download(&a), [1.0, 2.0, 3.0, 4.0], "put {t} {p} wrote");
    }
    // Inside the axis: positions from the end once, any integer type.
    for (t, p, want) in [
        (ElementType::U64, 3, 4.0),
        (ElementType::I64, -4, 1.0),
        (ElementType::I32, -1, 4.0),
        (ElementType::I64, 1, 2.0),
    ] {
        assert_eq!(download(&a.take(&pos(t, p), 0).unwrap()), [want], "{t} {p}");
    }
}
