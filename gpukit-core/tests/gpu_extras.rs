//! GPU tests of random numbers (bit-exact against the CPU Philox), softmax / log-softmax /
//! layer norm and N-d matmul (against f64 CPU references), user kernels (ElementwiseKernel,
//! ReductionKernel), pinned host arrays with non-blocking copies, device-to-device copies, and
//! the safe typed launch on arrays (pointee types, `&mut`, overlap).

mod common;

use common::*;
use gpukit_core::custom::{ElementwiseKernel, KArg, ReductionKernel};
use gpukit_core::random::{normal_cpu, uniform_cpu, uniform_cpu_f64, Generator};
use gpukit_core::{bf16, f16, s, Device, Error, GpuArray, PinnedArray, PinnedKind};

#[test]
fn random_streams_match_the_cpu_generator() {
    let Some(dev) = device("random_streams_match_the_cpu_generator") else {
        return;
    };
    for n in [1usize, 3, 4, 5, 1023, 1 << 20] {
        let g = Generator::new(1234);
        let u = g
            .uniform::<f32>(&dev, &[n], -1.0, 2.0)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(u, uniform_cpu(n, 1234, 0, -1.0, 2.0), "uniform f32 n={n}");
        // The offset moved by ceil(n / 4) blocks: the next call continues the stream.
        assert_eq!(g.offset(), n.div_ceil(4) as u64);
        let u2 = g
            .uniform::<f32>(&dev, &[8], 0.0, 1.0)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(u2, uniform_cpu(8, 1234, n.div_ceil(4) as u64, 0.0, 1.0));
        let d = Generator::new(9)
            .uniform::<f64>(&dev, &[n], 0.0, 1.0)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(d, uniform_cpu_f64(n, 9, 0, 0.0, 1.0), "uniform f64 n={n}");
        let z = Generator::new(5)
            .normal::<f32>(&dev, &[n], 1.0, 3.0)
            .unwrap()
            .to_vec()
            .unwrap();
        let zc = normal_cpu(n, 5, 0, 1.0, 3.0);
        for (i, (a, b)) in z.iter().zip(&zc).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "normal f32 n={n} [{i}]: {a} vs {b}"
            );
        }
    }
    // Reproducible, and moments right for a large draw; half types round the f32 stream.
    let a = Generator::new(77)
        .normal::<f64>(&dev, &[4_000_000], 0.0, 1.0)
        .unwrap();
    let b = Generator::new(77)
        .normal::<f64>(&dev, &[4_000_000], 0.0, 1.0)
        .unwrap();
    assert_eq!(a.to_vec().unwrap(), b.to_vec().unwrap());
    let m = a.mean().unwrap().item().unwrap();
    let sd = a.std(None, false, 0).unwrap().item().unwrap();
    assert!(m.abs() < 3e-3 && (sd - 1.0).abs() < 3e-3, "{m} {sd}");
    let h = Generator::new(3)
        .uniform::<f16>(&dev, &[1000], 0.0, 1.0)
        .unwrap()
        .to_vec()
        .unwrap();
    let hc = uniform_cpu(1000, 3, 0, 0.0, 1.0);
    assert!(h.iter().zip(&hc).all(|(x, y)| *x == f16::from_f32(*y)));
    let hb = Generator::new(3)
        .normal::<bf16>(&dev, &[1000], 0.0, 1.0)
        .unwrap()
        .to_vec()
        .unwrap();
    assert!(hb.iter().all(|x| x.to_f32().is_finite()));
    assert!(Generator::new(1)
        .uniform::<i32>(&dev, &[4], 0.0, 1.0)
        .is_err());
    assert!(Generator::new(1)
        .normal::<f32>(&dev, &[4], 0.0, -1.0)
        .is_err());
    assert!(Generator::new(1)
        .uniform::<f32>(&dev, &[4], 2.0, 1.0)
        .is_err());
}

fn softmax_ref(row: &[f64], log: bool) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
    row.iter()
        .map(|x| {
            if log {
                x - m - s.ln()
            } else {
                (x - m).exp() / s
            }
        })
        .collect()
}

fn rows_case<T: TestType>(dev: &Device, rows: usize, r: usize) {
    let mut rng = Rng((rows * 31 + r) as u64);
    let host: Vec<T> = random_vec(&mut rng, rows * r, false);
    let g = GpuArray::from_slice(dev, &host, &[rows, r]).unwrap();
    let hf: Vec<f64> = host.iter().map(|x| x.to_f64()).collect();
    let tol = match T::RUST_NAME {
        "f64" => 1e-12,
        "f32" => 2e-6,
        _ => 2.0 * T::rtol(),
    };
    for log in [false, true] {
        let out = if log {
            g.log_softmax(-1)
        } else {
            g.softmax(-1)
        }
        .unwrap()
        .to_vec()
        .unwrap();
        for i in 0..rows {
            let want = softmax_ref(&hf[i * r..(i + 1) * r], log);
            for j in 0..r {
                let (a, w) = (out[i * r + j].to_f64(), want[j]);
                assert!(
                    (a - w).abs() <= tol * (1.0 + w.abs()),
                    "{} softmax log={log} [{rows}x{r}] ({i},{j}): {a} vs {w}",
                    T::RUST_NAME
                );
            }
        }
    }
    let gamma: Vec<T> = random_vec(&mut rng, r, false);
    let beta: Vec<T> = random_vec(&mut rng, r, false);
    let gg = GpuArray::from_slice(dev, &gamma, &[r]).unwrap();
    let gb = GpuArray::from_slice(dev, &beta, &[r]).unwrap();
    let ln = g
        .layer_norm(Some(&gg), Some(&gb), 1e-5)
        .unwrap()
        .to_vec()
        .unwrap();
    for i in 0..rows {
        let row = &hf[i * r..(i + 1) * r];
        let m = row.iter().sum::<f64>() / r as f64;
        let v = row.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / r as f64;
        for j in 0..r {
            let w = (row[j] - m) / (v + 1e-5).sqrt() * gamma[j].to_f64() + beta[j].to_f64();
            let a = ln[i * r + j].to_f64();
            assert!(
                (a - w).abs() <= 8.0 * tol * (1.0 + w.abs()),
                "{} layernorm [{rows}x{r}] ({i},{j}): {a} vs {w}",
                T::RUST_NAME
            );
        }
    }
}

fn rows_all<T: TestType>(dev: &Device) {
    // Register kernels (every vectors-per-thread), unaligned rows, and the two-pass kernels.
    for (rows, r) in [
        (3usize, 1usize),
        (5, 7),
        (4, 100),
        (2, 4096),
        (3, 4097),
        (2, 32768),
        (1, 70000),
    ] {
        rows_case::<T>(dev, rows, r);
    }
}

#[test]
fn softmax_and_layernorm_match_f64_references() {
    let Some(dev) = device("softmax_and_layernorm_match_f64_references") else {
        return;
    };
    for_float_dtypes!(rows_all, &dev);
    // Along another axis, an -inf row element, and integer arrays refused.
    let x =
        GpuArray::<f32>::from_slice(&dev, &[0.0, 1.0, 2.0, f32::NEG_INFINITY], &[2, 2]).unwrap();
    let s0 = x.softmax(0).unwrap().to_vec().unwrap();
    assert!(
        (s0[0] - 1.0 / (1.0 + 2f32.exp())).abs() < 1e-6 && s0[3] == 0.0,
        "{s0:?}"
    );
    assert!(matches!(
        GpuArray::<i32>::ones(&dev, &[4]).unwrap().softmax(0),
        Err(Error::UnsupportedDType { .. })
    ));
    let bad = GpuArray::<f32>::ones(&dev, &[3]).unwrap();
    assert!(x.layer_norm(Some(&bad), None, 1e-5).is_err());
}

#[test]
fn matmul_broadcasts_batches_like_numpy() {
    let Some(dev) = device("matmul_broadcasts_batches_like_numpy") else {
        return;
    };
    let cases: [(&[usize], &[usize]); 6] = [
        (&[3, 4], &[4, 5]),
        (&[4], &[4, 5]),
        (&[3, 4], &[4]),
        (&[2, 1, 3, 4], &[5, 4, 2]),
        (&[6, 3, 4], &[4, 2]),
        (&[2, 3, 3, 4], &[2, 3, 4, 2]),
    ];
    for (sa, sb) in cases {
        let mut rng = Rng(sa.len() as u64 * 7 + sb.len() as u64);
        let a: Vec<f64> = random_vec(&mut rng, sa.iter().product(), false);
        let b: Vec<f64> = random_vec(&mut rng, sb.iter().product(), false);
        let ga = GpuArray::from_slice(&dev, &a, sa).unwrap();
        let gb = GpuArray::from_slice(&dev, &b, sb).unwrap();
        let c = ga.matmul(&gb).unwrap();
        let (batch, m, k, n, out) = gpukit_core::array::matmul::matmul_nd_shapes(sa, sb).unwrap();
        assert_eq!(c.shape(), out.as_slice(), "{sa:?} @ {sb:?}");
        let cv = c.to_vec().unwrap();
        // CPU: broadcast batch index into each operand's batch dims.
        let a2: Vec<usize> = if sa.len() == 1 {
            vec![1, sa[0]]
        } else {
            sa.to_vec()
        };
        let b2: Vec<usize> = if sb.len() == 1 {
            vec![sb[0], 1]
        } else {
            sb.to_vec()
        };
        let nb: usize = batch.iter().product();
        for bi in 0..nb {
            let ia = bcast_index(bi, &batch, &a2[..a2.len() - 2]);
            let ib = bcast_index(bi, &batch, &b2[..b2.len() - 2]);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|t| a[ia * m * k + i * k + t] * b[ib * k * n + t * n + j])
                        .sum();
                    let got = cv[(bi * m + i) * n + j];
                    assert!(
                        (got - want).abs() < 1e-12 * (1.0 + want.abs()),
                        "{sa:?}@{sb:?} [{bi},{i},{j}]: {got} vs {want}"
                    );
                }
            }
        }
    }
    let a = GpuArray::<f32>::ones(&dev, &[2, 3]).unwrap();
    assert!(a.matmul(&a).is_err());
    assert!(GpuArray::<i32>::ones(&dev, &[2, 2])
        .unwrap()
        .matmul(&GpuArray::<i32>::ones(&dev, &[2, 2]).unwrap())
        .is_err());
}

#[test]
fn user_elementwise_and_reduction_kernels() {
    let Some(dev) = device("user_elementwise_and_reduction_kernels") else {
        return;
    };
    let x = GpuArray::<f32>::arange(&dev, 0.0, 6.0, 1.0)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap();
    let y = GpuArray::<f32>::from_slice(&dev, &[10.0, 20.0, 30.0], &[3]).unwrap();
    let axpy = ElementwiseKernel::new("T x, T y, T a", "T z", "z = a * x + y;", "axpy").unwrap();
    let z: GpuArray<f32> = axpy
        .call1(&[KArg::from(&x), KArg::from(&y), 2.0f32.into()])
        .unwrap();
    assert_eq!(
        z.to_vec().unwrap(),
        vec![10.0, 22.0, 34.0, 16.0, 28.0, 40.0]
    );
    // f16 computes in float; the index variable `i` is available.
    let h = GpuArray::<f16>::full(&dev, &[4], f16::from_f32(0.5)).unwrap();
    let idx =
        ElementwiseKernel::new("T x", "float32 z", "z = x + (float)i;", "plus_index").unwrap();
    assert_eq!(
        idx.call1::<f32>(&[KArg::from(&h)])
            .unwrap()
            .to_vec()
            .unwrap(),
        vec![0.5, 1.5, 2.5, 3.5]
    );
    // Into a strided output, and aliasing the input element for element (in place).
    let out = GpuArray::<f32>::zeros(&dev, &[3, 2]).unwrap();
    let mut out_t = out.transpose();
    axpy.call_into(
        &[KArg::from(&x), KArg::from(&y), 1.0f32.into()],
        &mut [&mut out_t],
    )
    .unwrap();
    assert_eq!(
        out.to_vec().unwrap(),
        vec![10.0, 13.0, 21.0, 24.0, 32.0, 35.0]
    );
    let mut w = x.astype::<f32>().unwrap();
    let w2 = w.clone();
    let sq = ElementwiseKernel::new("T x", "T y", "y = x * x;", "square").unwrap();
    sq.call_into(&[KArg::from(&w2)], &mut [&mut w]).unwrap();
    assert_eq!(w.to_vec().unwrap(), vec![0.0, 1.0, 4.0, 9.0, 16.0, 25.0]);
    // Type errors are reported before anything runs.
    let i = GpuArray::<i32>::ones(&dev, &[3]).unwrap();
    let e = axpy
        .call1::<f32>(&[KArg::from(&x), KArg::from(&i), 1.0f32.into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("bound to float") && e.contains("int"), "{e}");
    assert!(axpy
        .call1::<f64>(&[KArg::from(&x), KArg::from(&y), 1.0f32.into()])
        .is_err());
    assert!(axpy.call1::<f32>(&[KArg::from(&x)]).is_err());
    // Reductions: per row, over everything (split over blocks), keepdims.
    let l2 = ReductionKernel::new(
        "T x",
        "T y",
        "x * x",
        "a + b",
        "y = sqrt(a)",
        "0",
        "float",
        "l2",
    )
    .unwrap();
    let rows: GpuArray<f32> = l2.call(&[KArg::from(&x)], Some(&[-1]), false).unwrap();
    let want = [5.0f32.sqrt(), 50.0f32.sqrt()];
    let got = rows.to_vec().unwrap();
    assert!(
        (got[0] - want[0]).abs() < 1e-6 && (got[1] - want[1]).abs() < 1e-5,
        "{got:?}"
    );
    let n = 3_000_000usize;
    let ones = GpuArray::<f64>::ones(&dev, &[n]).unwrap();
    let cnt =
        ReductionKernel::new("T x", "T y", "x", "a + b", "y = a", "0", "double", "count").unwrap();
    assert_eq!(
        cnt.call::<f64>(&[KArg::from(&ones)], None, true)
            .unwrap()
            .to_vec()
            .unwrap(),
        vec![n as f64]
    );
    let dot = ReductionKernel::new(
        "T x, T y", "T z", "x * y", "a + b", "z = a", "0", "T", "dot",
    )
    .unwrap();
    let d: GpuArray<f32> = dot
        .call(&[KArg::from(&x), KArg::from(&y)], Some(&[0]), false)
        .unwrap();
    assert_eq!(d.to_vec().unwrap(), vec![30.0, 100.0, 210.0]);
}

#[test]
fn pinned_arrays_and_non_blocking_copies() {
    let Some(dev) = device("pinned_arrays_and_non_blocking_copies") else {
        return;
    };
    let n = 3 << 20;
    let host: Vec<f32> = (0..n).map(|i| (i % 977) as f32).collect();
    let mut up = PinnedArray::<f32>::from_slice(&dev, &host, PinnedKind::WriteCombined).unwrap();
    let mut x = GpuArray::<f32>::empty(&dev, &[n]).unwrap();
    x.upload_async(&mut up).unwrap();
    let y = x.mul_scalar(2.0).unwrap();
    let mut back = PinnedArray::<f32>::zeros(&dev, n, PinnedKind::Cached).unwrap();
    y.download_async(&mut back).unwrap();
    // Reading waits for the copy.
    assert!(back
        .as_slice()
        .unwrap()
        .iter()
        .zip(&host)
        .all(|(a, b)| *a == 2.0 * b));
    // Writing the upload buffer waits for its copy too; reuse it.
    up.as_mut_slice().unwrap().fill(1.0);
    let mut x2 = GpuArray::<f32>::empty(&dev, &[n]).unwrap();
    x2.upload_async(&mut up).unwrap();
    assert!(x2.to_vec().unwrap().iter().all(|&v| v == 1.0));
    // On another stream, ordered by the caller.
    let s = dev.new_stream(0).unwrap();
    let mut back2 = PinnedArray::<f32>::zeros(&dev, n, PinnedKind::Cached).unwrap();
    s.wait_stream(&dev.stream()).unwrap();
    x2.download_async_on(&mut back2, &s).unwrap();
    assert!(back2.as_slice().unwrap().iter().all(|&v| v == 1.0));
    // Views download through a contiguous copy; length and layout errors.
    let t = GpuArray::<f32>::arange(&dev, 0.0, 6.0, 1.0)
        .unwrap()
        .reshape(&[2, 3])
        .unwrap()
        .transpose();
    let mut small = PinnedArray::<f32>::zeros(&dev, 6, PinnedKind::Cached).unwrap();
    t.download_async(&mut small).unwrap();
    assert_eq!(small.as_slice().unwrap(), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let mut tt = t.clone();
    assert!(tt.upload_async(&mut small).is_err());
    assert!(x.download_async(&mut small).is_err());
    // Device-to-device copies.
    let mut dst = GpuArray::<f32>::zeros(&dev, &[n]).unwrap();
    dst.copy_from_device(&y).unwrap();
    assert_eq!(dst.to_vec().unwrap(), y.to_vec().unwrap());
    let same = y.to_device(&dev).unwrap();
    assert_eq!(same.to_vec().unwrap()[5], 10.0);
    if Device::count().unwrap() > 1 {
        let other = Device::open(1).unwrap();
        let moved = y.to_device(&other).unwrap();
        assert_eq!(moved.to_vec().unwrap(), y.to_vec().unwrap());
    }
}

#[test]
fn safe_launch_checks_arrays_against_the_signature() {
    let Some(dev) = device("safe_launch_checks_arrays_against_the_signature") else {
        return;
    };
    let src = r#"extern "C" __global__ void shift(float* y, const float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + 1.0f; }"#;
    let k = dev
        .load_kernel(
            src,
            "shift_test",
            &gpukit_core::CompileOptions::new(),
            "shift",
        )
        .unwrap();
    let stream = dev.stream();
    let cfg = gpukit_core::LaunchConfig::for_elements(100, 128);
    let x = GpuArray::<f32>::arange(&dev, 0.0, 100.0, 1.0).unwrap();
    let mut y = GpuArray::<f32>::zeros(&dev, &[100]).unwrap();
    k.launch(stream.cuda(), cfg, gpukit_jit::args![&mut y, &x, 100i32])
        .unwrap();
    assert_eq!(y.to_vec().unwrap()[99], 100.0);
    // Two views of one buffer, one written: refused (the kernel's pointers are distinct).
    let base = GpuArray::<f32>::zeros(&dev, &[200]).unwrap();
    let mut lo = base.slice(&s![..100]).unwrap();
    let hi = base.slice(&s![50..150]).unwrap();
    let e = k
        .launch(stream.cuda(), cfg, gpukit_jit::args![&mut lo, &hi, 100i32])
        .unwrap_err();
    assert!(matches!(e, gpukit_jit::Error::Aliasing { .. }), "{e}");
    // Disjoint views of one buffer are fine.
    let upper = base.slice(&s![100..]).unwrap();
    k.launch(
        stream.cuda(),
        cfg,
        gpukit_jit::args![&mut lo, &upper, 100i32],
    )
    .unwrap();
    assert!(base.to_vec().unwrap()[..100].iter().all(|&v| v == 1.0));
    // Wrong element type for a pointer parameter.
    let xi = GpuArray::<i32>::ones(&dev, &[100]).unwrap();
    let e = k
        .launch(stream.cuda(), cfg, gpukit_jit::args![&mut y, &xi, 100i32])
        .unwrap_err();
    assert!(
        e.to_string().contains("argument 2") && e.to_string().contains("i32"),
        "{e}"
    );
    // copy_from with an overlapping source reads it completely first.
    let mut r = GpuArray::<f32>::arange(&dev, 0.0, 10.0, 1.0).unwrap();
    let mut tail = r.slice(&s![2..]).unwrap();
    let head = r.slice(&s![..8]).unwrap();
    tail.copy_from(&head).unwrap();
    assert_eq!(
        r.to_vec().unwrap(),
        vec![0.0, 1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    );
    assert!(head.overlaps(&tail) && !head.overlaps(&r.slice(&s![8..]).unwrap()));
    let _ = &mut r;
    let e: Error = GpuArray::<f32>::zeros(&dev, &[2])
        .unwrap()
        .copy_from(&x)
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }));
}
