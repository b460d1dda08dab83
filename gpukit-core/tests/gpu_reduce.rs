//! GPU tests of reductions and scans against f64 CPU references: every element type, random
//! shapes and axis sets with keepdims (proptest), NumPy's result types (integer sums widen),
//! NaN propagation, empty inputs, the column case of the issue ([1e7, 2] along axis 0), and
//! accuracy at 1e8 elements.

mod common;

use common::*;
use gpukit_core::{DType, DTypeKind, Device, Error, GpuArray, ReduceOp};

/// CPU reduction of `a` (shape `shape`) over `axes` into the kept shape (row-major).
fn cpu_reduce(a: &[f64], shape: &[usize], axes: &[usize], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
    let kshape: Vec<usize> = kept.iter().map(|&i| shape[i]).collect();
    let nk: usize = kshape.iter().product();
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); nk];
    for (i, &v) in a.iter().enumerate() {
        let idx = unravel(i, shape);
        let k: Vec<usize> = kept.iter().map(|&d| idx[d]).collect();
        groups[ravel(&k, &kshape)].push(v);
    }
    groups.iter().map(|g| f(g)).collect()
}

fn nan_max(g: &[f64]) -> f64 {
    g.iter().fold(f64::NEG_INFINITY, |m, &x| {
        if m.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            m.max(x)
        }
    })
}
fn nan_min(g: &[f64]) -> f64 {
    g.iter().fold(f64::INFINITY, |m, &x| {
        if m.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            m.min(x)
        }
    })
}
fn arg_of(g: &[f64], max: bool) -> f64 {
    let mut best = 0usize;
    for (i, &x) in g.iter().enumerate() {
        let b = g[best];
        if b.is_nan() {
            break;
        }
        if x.is_nan() || (max && x > b) || (!max && x < b) {
            best = i;
        }
    }
    best as f64
}

/// Relative tolerance of a sum of `n` terms in the accumulator of `T` (f32 for the 16-bit and
/// 32-bit floats, f64 otherwise), plus the rounding of the result to `T`.
fn sum_tol<T: TestType>(n: usize, abs_sum: f64) -> f64 {
    let eps = match T::RUST_NAME {
        "f64" => 1.2e-16,
        "f32" | "f16" | "bf16" => 6e-8,
        _ => 0.0,
    };
    let out = if T::KIND == DTypeKind::Float {
        T::rtol()
    } else {
        0.0
    };
    (4.0 * eps * ((n as f64).sqrt() + 40.0) + out) * abs_sum + 1e-30
}

fn close(g: f64, w: f64, tol: f64) -> bool {
    (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol
}

fn reduce_case<T: TestType>(
    dev: &Device,
    shape: &[usize],
    mask: u8,
    keepdims: bool,
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n: usize = shape.iter().product();
    let a: Vec<T> = random_special(&mut rng, n, false);
    let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
    let g = GpuArray::from_slice(dev, &a, shape).map_err(fail)?;
    let axes: Vec<usize> = (0..shape.len()).filter(|i| mask >> i & 1 == 1).collect();
    let axes_i: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let r: usize = axes.iter().map(|&i| shape[i]).product();
    let expect_shape: Vec<usize> = (0..shape.len())
        .filter_map(|i| {
            if axes.contains(&i) {
                keepdims.then_some(1)
            } else {
                Some(shape[i])
            }
        })
        .collect();
    let all = Some(axes_i.as_slice());
    // sum: widened output type.
    let s = g.sum_axes(all, keepdims).map_err(fail)?;
    prop_assert_eq!(s.shape(), expect_shape.as_slice());
    prop_assert_eq!(<T::Sum as DType>::NAME, ReduceOp::Sum.out_name(T::NAME));
    let got: Vec<f64> = s
        .to_vec()
        .map_err(fail)?
        .iter()
        .map(|v| v.to_f64())
        .collect();
    let want = cpu_reduce(&af, shape, &axes, |g| g.iter().sum());
    let abs = cpu_reduce(&af, shape, &axes, |g| {
        g.iter().map(|x| x.abs()).filter(|x| x.is_finite()).sum()
    });
    for i in 0..want.len() {
        let w = if T::KIND == DTypeKind::Float {
            T::Sum::from_f64(want[i]).to_f64()
        } else {
            want[i]
        };
        prop_assert!(
            close(got[i], w, sum_tol::<T>(r, abs[i])),
            "sum {:?} axes {:?} [{}]: {} vs {}",
            shape,
            axes,
            i,
            got[i],
            w
        );
    }
    // mean: f64 for integers.
    if r > 0 {
        let m: Vec<f64> = g
            .mean_axes(all, keepdims)
            .map_err(fail)?
            .to_vec()
            .map_err(fail)?
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let want = cpu_reduce(&af, shape, &axes, |g| {
            g.iter().sum::<f64>() / g.len() as f64
        });
        for i in 0..want.len() {
            let tol = sum_tol::<T>(r, abs[i]) / r as f64 + 1e-12 * want[i].abs();
            prop_assert!(
                close(got_or(&m, i), T::Float::from_f64(want[i]).to_f64(), tol),
                "mean [{}]: {} vs {}",
                i,
                m[i],
                want[i]
            );
        }
        // max / min propagate NaN.
        let mx: Vec<f64> = g
            .max_axes(all, keepdims)
            .map_err(fail)?
            .to_vec()
            .map_err(fail)?
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let mn: Vec<f64> = g
            .min_axes(all, keepdims)
            .map_err(fail)?
            .to_vec()
            .map_err(fail)?
            .iter()
            .map(|v| v.to_f64())
            .collect();
        prop_assert_eq!(fmt(&mx), fmt(&cpu_reduce(&af, shape, &axes, nan_max)));
        prop_assert_eq!(fmt(&mn), fmt(&cpu_reduce(&af, shape, &axes, nan_min)));
        // var / std with ddof 0 and 1.
        for ddof in [0usize, 1] {
            let v: Vec<f64> = g
                .var(all, keepdims, ddof)
                .map_err(fail)?
                .to_vec()
                .map_err(fail)?
                .iter()
                .map(|x| x.to_f64())
                .collect();
            let sd: Vec<f64> = g
                .std(all, keepdims, ddof)
                .map_err(fail)?
                .to_vec()
                .map_err(fail)?
                .iter()
                .map(|x| x.to_f64())
                .collect();
            let want = cpu_reduce(&af, shape, &axes, |g| {
                let m = g.iter().sum::<f64>() / g.len() as f64;
                g.iter().map(|x| (x - m) * (x - m)).sum::<f64>()
                    / (g.len() as f64 - ddof as f64).max(0.0)
            });
            for i in 0..want.len() {
                let w = want[i];
                let tol = if T::KIND == DTypeKind::Float {
                    64.0 * T::rtol() * w.abs().max(1e-3) * (r as f64).sqrt()
                } else {
                    1e-9 * w.abs()
                };
                prop_assert!(
                    close(v[i], T::Float::from_f64(w).to_f64(), tol)
                        || (w.is_infinite() && v[i].is_infinite()),
                    "var ddof {} [{}]: {} vs {}",
                    ddof,
                    i,
                    v[i],
                    w
                );
                let ws = w.sqrt();
                prop_assert!(
                    close(sd[i], T::Float::from_f64(ws).to_f64(), tol.sqrt().max(tol))
                        || (ws.is_infinite() && sd[i].is_infinite()),
                    "std [{}]: {} vs {}",
                    i,
                    sd[i],
                    ws
                );
            }
        }
    }
    // any / all: NaN counts as true.
    let an = g
        .any_axes(all, keepdims)
        .map_err(fail)?
        .to_vec()
        .map_err(fail)?;
    let al = g
        .all_axes(all, keepdims)
        .map_err(fail)?
        .to_vec()
        .map_err(fail)?;
    let t = |x: &f64| *x != 0.0 || x.is_nan();
    let want_any = cpu_reduce(&af, shape, &axes, |g| g.iter().any(t) as u8 as f64);
    let want_all = cpu_reduce(&af, shape, &axes, |g| g.iter().all(t) as u8 as f64);
    prop_assert_eq!(an.iter().map(|&x| x as f64).collect::<Vec<_>>(), want_any);
    prop_assert_eq!(al.iter().map(|&x| x as f64).collect::<Vec<_>>(), want_all);
    // prod on small values (exact for integers: they widen and wrap like the reference).
    let small: Vec<T> = (0..n)
        .map(|i| T::from_f64([1.0, 2.0, 1.0, 3.0][i % 4]))
        .collect();
    let gs = GpuArray::from_slice(dev, &small, shape).map_err(fail)?;
    let p: Vec<f64> = gs
        .prod_axes(all, keepdims)
        .map_err(fail)?
        .to_vec()
        .map_err(fail)?
        .iter()
        .map(|v| v.to_f64())
        .collect();
    let sf: Vec<f64> = small.iter().map(|x| x.to_f64()).collect();
    // Integer products wrap in the 64-bit sum type (NumPy's int64 / uint64): the reference
    // multiplies the same way (the values are 1..3, so the bits are the same for both
    // signednesses) instead of in f64, whose product saturates on conversion.
    let signed = T::Sum::from_f64(-1.0).to_f64() < 0.0;
    let want = if T::KIND == DTypeKind::Float {
        cpu_reduce(&sf, shape, &axes, |g| g.iter().product())
    } else {
        cpu_reduce(&sf, shape, &axes, |g| {
            let p = g.iter().fold(1u64, |p, &x| p.wrapping_mul(x as u64));
            if signed {
                p as i64 as f64
            } else {
                p as f64
            }
        })
    };
    for i in 0..want.len() {
        let w = if T::KIND == DTypeKind::Float {
            T::Sum::from_f64(want[i]).to_f64()
        } else {
            want[i]
        };
        prop_assert!(
            close(p[i], w, 1e-6 * w.abs() * r as f64),
            "prod [{}]: {} vs {}",
            i,
            p[i],
            w
        );
    }
    // argmax / argmin along one axis.
    if axes.len() == 1 && r > 0 {
        let ax = axes[0];
        let am = g
            .argmax_axis(ax as isize)
            .map_err(fail)?
            .to_vec()
            .map_err(fail)?;
        let ai = g
            .argmin_axis(ax as isize)
            .map_err(fail)?
            .to_vec()
            .map_err(fail)?;
        prop_assert_eq!(
            am.iter().map(|&x| x as f64).collect::<Vec<_>>(),
            cpu_reduce(&af, shape, &axes, |g| arg_of(g, true))
        );
        prop_assert_eq!(
            ai.iter().map(|&x| x as f64).collect::<Vec<_>>(),
            cpu_reduce(&af, shape, &axes, |g| arg_of(g, false))
        );
    }
    Ok(())
}

fn got_or(v: &[f64], i: usize) -> f64 {
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// Exact text of each value, NaN as "nan" and both zeros as "0": +0 and -0 compare equal, so
/// which one a max / min returns depends on the order of comparisons (NumPy's too).
fn fmt(v: &[f64]) -> Vec<String> {
    v.iter()
        .map(|x| {
            if x.is_nan() {
                "nan".into()
            } else if *x == 0.0 {
                "0".into()
            } else {
                x.to_string()
            }
        })
        .collect()
}

fn reduce_all<T: TestType>(dev: &Device, cases: u32) {
    // At most 2^20 elements a case: four axes of 130 (2.9e8 elements) made the CPU reference
    // take minutes a dtype (234 s on the H100 run of 2026-12-06) without testing more of the
    // axis-set logic than 130 x 17 x 5 x 3 does.
    let shapes = prop::collection::vec(
        prop::sample::select(vec![0usize, 1, 2, 3, 5, 17, 130]),
        1..5,
    )
    .prop_filter("at most 2^20 elements", |s| {
        s.iter().product::<usize>() <= 1 << 20
    });
    runner(cases)
        .run(
            &(shapes, any::<u8>(), any::<bool>(), any::<u64>()),
            |(shape, mask, keep, seed)| {
                let mask = mask & ((1u8 << shape.len()) - 1);
                let mask = if mask == 0 {
                    (1 << shape.len()) - 1
                } else {
                    mask
                };
                reduce_case::<T>(dev, &shape, mask, keep, seed)
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", T::RUST_NAME));
}

#[test]
fn reductions_over_axis_sets_every_dtype() {
    let Some(dev) = device("reductions_over_axis_sets_every_dtype") else {
        return;
    };
    for_all_dtypes!(reduce_all, &dev, 10);
}

#[test]
fn column_reduction_of_a_tall_narrow_array_is_parallel_and_correct() {
    let Some(dev) = device("column_reduction_of_a_tall_narrow_array_is_parallel_and_correct")
    else {
        return;
    };
    // The case: axis 0 of [1e7, 2].
    let n = 10_000_000usize;
    let host: Vec<f32> = (0..2 * n)
        .map(|i| ((i % 1000) as f32) * 0.001 - 0.25)
        .collect();
    let g = GpuArray::from_slice(&dev, &host, &[n, 2]).unwrap();
    let want: Vec<f64> = (0..2)
        .map(|c| (0..n).map(|r| host[2 * r + c] as f64).sum())
        .collect();
    // (The launch shape, ~1000 blocks instead of 2 threads, is checked on the CPU by the
    // planner's unit tests; its speed is in core_bench beside torch.)
    let got = g.sum_axis(0).unwrap().to_vec().unwrap();
    for c in 0..2 {
        assert!(
            (got[c] as f64 - want[c]).abs() < 1e-5 * want[c].abs().max(n as f64 * 0.25),
            "{c}: {} vs {}",
            got[c],
            want[c]
        );
    }
    let m = g.mean_axis(0).unwrap().to_vec().unwrap();
    assert!((m[1] as f64 - want[1] / n as f64).abs() < 1e-5);
    // The maximum 0.749 first appears at row 499 in both columns.
    let am = g.argmax_axis(0).unwrap().to_vec().unwrap();
    assert_eq!(am, vec![499, 499]);
    let v = g.var(Some(&[0]), true, 0).unwrap();
    assert_eq!(v.shape(), &[1, 2]);
}

#[test]
fn integer_sums_widen_and_means_are_f64() {
    let Some(dev) = device("integer_sums_widen_and_means_are_f64") else {
        return;
    };
    // 3e6 copies of 1e3 overflow i32 but not the i64 result.
    let n = 3_000_000usize;
    let x = GpuArray::<i32>::full(&dev, &[n], 1000).unwrap();
    let s: GpuArray<i64> = x.sum().unwrap();
    assert_eq!(s.item().unwrap(), 3_000_000_000);
    let u = GpuArray::<u8>::full(&dev, &[n], 255).unwrap();
    let su: GpuArray<u64> = u.sum().unwrap();
    assert_eq!(su.item().unwrap(), 255 * n as u64);
    let m: GpuArray<f64> = GpuArray::<i32>::from_slice(&dev, &[1, 2], &[2])
        .unwrap()
        .mean()
        .unwrap();
    assert_eq!(m.item().unwrap(), 1.5);
    let c: GpuArray<i64> = GpuArray::<i32>::full(&dev, &[n], 1000)
        .unwrap()
        .cumsum(None)
        .unwrap();
    assert_eq!(
        c.slice(&gpukit_core::s![-1]).unwrap().item().unwrap(),
        3_000_000_000
    );
    // The typed entry point refuses a wrong result type.
    assert!(matches!(
        x.reduce::<i32>(ReduceOp::Sum, None, false, 0),
        Err(Error::InvalidArgument { .. })
    ));
    // Empty: sum 0, prod 1, all true, any false, mean NaN; max is an error.
    let e = GpuArray::<f32>::zeros(&dev, &[0, 4]).unwrap();
    assert_eq!(e.sum_axis(0).unwrap().to_vec().unwrap(), vec![0.0; 4]);
    assert_eq!(e.prod_axis(0).unwrap().to_vec().unwrap(), vec![1.0; 4]);
    assert_eq!(e.all_axis(0).unwrap().to_vec().unwrap(), vec![1; 4]);
    assert_eq!(e.any_axis(0).unwrap().to_vec().unwrap(), vec![0; 4]);
    assert!(e.mean().unwrap().item().unwrap().is_nan());
    assert!(matches!(e.max_axis(0), Err(Error::EmptyReduction { .. })));
    assert_eq!(e.sum_axis(1).unwrap().shape(), &[0]);
}

#[test]
fn sum_of_1e8_f32_has_no_catastrophic_error() {
    let Some(dev) = device("sum_of_1e8_f32_has_no_catastrophic_error") else {
        return;
    };
    let n = 100_000_000usize;
    let x = GpuArray::<f32>::full(&dev, &[n], 0.1).unwrap();
    let s = x.sum().unwrap().item().unwrap() as f64;
    let want = n as f64 * 0.1f32 as f64;
    assert!((s - want).abs() / want < 1e-5, "{s} vs {want}");
    let rows = x.reshape(&[10_000, 10_000]).unwrap();
    let r = rows.sum_axis(1).unwrap().to_vec().unwrap();
    assert!(
        r.iter()
            .all(|&v| ((v as f64) - 10_000.0 * 0.1f32 as f64).abs() < 1e-3),
        "{}",
        r[0]
    );
    let c = rows.sum_axis(0).unwrap().to_vec().unwrap();
    assert!(
        c.iter()
            .all(|&v| ((v as f64) - 10_000.0 * 0.1f32 as f64).abs() < 1e-3),
        "{}",
        c[0]
    );
}

fn scan_case<T: TestType>(
    dev: &Device,
    shape: &[usize],
    axis: Option<usize>,
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n: usize = shape.iter().product();
    let a: Vec<T> = random_vec(&mut rng, n, false);
    let g = GpuArray::from_slice(dev, &a, shape).map_err(fail)?;
    let got: Vec<f64> = g
        .cumsum(axis.map(|x| x as isize))
        .map_err(fail)?
        .to_vec()
        .map_err(fail)?
        .iter()
        .map(|v| v.to_f64())
        .collect();
    let af: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
    let want: Vec<f64> = match axis {
        None => af
            .iter()
            .scan(0.0, |s, &x| {
                *s += x;
                Some(*s)
            })
            .collect(),
        Some(ax) => {
            let mut w = af.clone();
            for i in 0..n {
                let mut idx = unravel(i, shape);
                if idx[ax] > 0 {
                    idx[ax] -= 1;
                    w[i] += w[ravel(&idx, shape)];
                }
            }
            w
        }
    };
    let l = axis.map_or(n, |ax| shape[ax]);
    for i in 0..n {
        let w = if T::KIND == DTypeKind::Float {
            T::Sum::from_f64(want[i]).to_f64()
        } else {
            want[i]
        };
        let tol = sum_tol::<T>(l, 4.0 * l as f64) + T::rtol() * w.abs();
        prop_assert!(
            close(got[i], w, tol),
            "cumsum {:?} axis {:?} [{}]: {} vs {}",
            shape,
            axis,
            i,
            got[i],
            w
        );
    }
    Ok(())
}

fn scan_all<T: TestType>(dev: &Device, cases: u32) {
    let shapes = prop::collection::vec(
        prop::sample::select(vec![1usize, 2, 3, 7, 33, 300, 2100]),
        1..4,
    );
    runner(cases)
        .run(&(shapes, any::<u8>(), any::<u64>()), |(shape, ax, seed)| {
            let n: usize = shape.iter().product();
            prop_assume!(n <= 3_000_000);
            let axis = if ax as usize % (shape.len() + 1) == shape.len() {
                None
            } else {
                Some(ax as usize % shape.len())
            };
            scan_case::<T>(dev, &shape, axis, seed)
        })
        .unwrap_or_else(|e| panic!("{}: {e}", T::RUST_NAME));
}

#[test]
fn cumsum_and_cumprod_every_dtype_and_axis() {
    let Some(dev) = device("cumsum_and_cumprod_every_dtype_and_axis") else {
        return;
    };
    for_all_dtypes!(scan_all, &dev, 8);
    // A single row of 3e6 elements needs two levels of tile totals.
    let n = 3_000_000usize;
    let ones = GpuArray::<f64>::ones(&dev, &[n]).unwrap();
    let c = ones.cumsum(None).unwrap().to_vec().unwrap();
    assert!(c.iter().enumerate().all(|(i, &v)| v == (i + 1) as f64));
    let p = GpuArray::<i64>::from_slice(&dev, &[1, 2, 3, 4, 5], &[5]).unwrap();
    assert_eq!(
        p.cumprod(None).unwrap().to_vec().unwrap(),
        vec![1, 2, 6, 24, 120]
    );
    let m = GpuArray::<u8>::from_slice(&dev, &[1, 0, 2, 255], &[2, 2]).unwrap();
    let cm: GpuArray<u64> = m.cumsum(Some(0)).unwrap();
    assert_eq!(cm.to_vec().unwrap(), vec![1, 0, 3, 255]);
}
