//! The user-facing GEMM API on GpuArray: matmul (2-D, batched, broadcast, transposed views),
//! gemm with alpha/beta/transposes, precision choice, f64/f16/bf16 through cuBLAS, empty
//! dimensions and shape errors. Against CPU f64 references. Skips without a GPU.

use gpukit_core::gemm::{self, Precision, Transpose};
use gpukit_core::{bf16, f16, Device, GpuArray};

fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// CPU f64 `a[m,k] @ b[k,n]` (row-major).
fn cpu(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p] as f64;
            for j in 0..n {
                c[i * n + j] += av * b[p * n + j] as f64;
            }
        }
    }
    c
}

fn rel(x: &[f64], r: &[f64]) -> f64 {
    let num: f64 = x.iter().zip(r).map(|(a, b)| (a - b).powi(2)).sum();
    let den: f64 = r.iter().map(|b| b * b).sum();
    (num / den.max(1e-300)).sqrt()
}

/// The default precision is process-wide and one test switches it: every test of this binary
/// holds this lock, so a test that relies on the default never runs while it is TF32.
static DEFAULT_PRECISION: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dev(test: &str) -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
    let guard = DEFAULT_PRECISION
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !gpukit_jit::testing::cublas(test) {
        return None;
    }
    Some((Device::open(0).expect("device"), guard))
}

#[test]
fn matmul_2d_both_precisions_and_default_switch() {
    let Some((dev, _default_lock)) = dev("matmul_2d_both_precisions_and_default_switch") else {
        return;
    };
    let (m, n, k) = (77, 131, 300);
    let (a, b) = (data(1, m * k), data(2, k * n));
    let want = cpu(&a, &b, m, n, k);
    let ga = GpuArray::from_slice(&dev, &a, &[m, k]).unwrap();
    let gb = GpuArray::from_slice(&dev, &b, &[k, n]).unwrap();
    let to64 = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
    let c = gemm::matmul(&ga, &gb).unwrap();
    assert_eq!(c.shape(), &[m, n]);
    let e32 = rel(&to64(c.to_vec().unwrap()), &want);
    assert!(e32 < 1e-5, "{e32}");
    let etf = rel(
        &to64(
            gemm::matmul_with(&ga, &gb, Precision::Tf32)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
        &want,
    );
    assert!(etf < 1e-3 && etf > 1e-5, "tf32 error {etf}");
    // 3xTF32: FP32 accuracy from the tensor cores (the SIMT kernel on GPUs without wgmma).
    let e3 = rel(
        &to64(
            gemm::matmul_with(&ga, &gb, Precision::Tf32x3)
                .unwrap()
                .to_vec()
                .unwrap(),
        ),
        &want,
    );
    assert!(e3 < 1e-5, "3xTF32 error {e3}");
    gemm::set_default_precision(Precision::Tf32);
    let edef = rel(
        &to64(gemm::matmul(&ga, &gb).unwrap().to_vec().unwrap()),
        &want,
    );
    gemm::set_default_precision(Precision::Fp32);
    assert!(edef > 1e-5 && edef < 1e-3, "default Tf32 not used: {edef}");
}

#[test]
fn batched_broadcast_and_transposed_views() {
    let Some((dev, _default_lock)) = dev("batched_broadcast_and_transposed_views") else {
        return;
    };
    let (bt, m, n, k) = (3, 20, 33, 45);
    let a = data(3, bt * m * k);
    let b = data(4, k * n);
    let ga = GpuArray::from_slice(&dev, &a, &[bt, m, k]).unwrap();
    let gb = GpuArray::from_slice(&dev, &b, &[k, n]).unwrap();
    let c = gemm::matmul(&ga, &gb).unwrap();
    assert_eq!(c.shape(), &[bt, m, n]);
    let got: Vec<f64> = c.to_vec().unwrap().into_iter().map(f64::from).collect();
    for i in 0..bt {
        let want = cpu(&a[i * m * k..(i + 1) * m * k], &b, m, n, k);
        assert!(rel(&got[i * m * n..(i + 1) * m * n], &want) < 1e-5);
    }
    // A transposed view (no copy: handled as a transpose flag): (B^T)^T @ ... via gemm.
    let at = GpuArray::from_slice(&dev, &data(5, k * m), &[k, m]).unwrap();
    let view = at.transpose(); // [m, k], unit row stride
    let host_t = at.to_vec().unwrap();
    let mut a_rm = vec![0.0f32; m * k];
    for p in 0..k {
        for i in 0..m {
            a_rm[i * k + p] = host_t[p * m + i];
        }
    }
    let want = cpu(&a_rm, &b, m, n, k);
    let c = gemm::matmul(&view, &gb).unwrap();
    let got: Vec<f64> = c.to_vec().unwrap().into_iter().map(f64::from).collect();
    assert!(rel(&got, &want) < 1e-5);
    // The same through gemm with an explicit transpose flag, alpha and beta.
    let mut c2 = GpuArray::from_slice(&dev, &vec![1.0f32; m * n], &[m, n]).unwrap();
    gemm::gemm(2.0, &at, Transpose::Yes, &gb, Transpose::No, -1.0, &mut c2).unwrap();
    let got: Vec<f64> = c2.to_vec().unwrap().into_iter().map(f64::from).collect();
    let want2: Vec<f64> = want.iter().map(|x| 2.0 * x - 1.0).collect();
    assert!(rel(&got, &want2) < 1e-5);
}

#[test]
fn f64_f16_bf16_through_cublas() {
    let Some((dev, _default_lock)) = dev("f64_f16_bf16_through_cublas") else {
        return;
    };
    let (m, n, k) = (40, 24, 64);
    let (a, b) = (data(6, m * k), data(7, k * n));
    let want = cpu(&a, &b, m, n, k);
    let a64: Vec<f64> = a.iter().map(|&x| x as f64).collect();
    let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
    let c = gemm::matmul(
        &GpuArray::from_slice(&dev, &a64, &[m, k]).unwrap(),
        &GpuArray::from_slice(&dev, &b64, &[k, n]).unwrap(),
    )
    .unwrap();
    assert!(rel(&c.to_vec().unwrap(), &want) < 1e-12);
    let ah: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
    let bh: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
    let c = gemm::matmul(
        &GpuArray::from_slice(&dev, &ah, &[m, k]).unwrap(),
        &GpuArray::from_slice(&dev, &bh, &[k, n]).unwrap(),
    )
    .unwrap();
    let got: Vec<f64> = c.to_vec().unwrap().iter().map(|x| x.to_f64()).collect();
    assert!(rel(&got, &want) < 3e-3, "f16 {}", rel(&got, &want));
    let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
    let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
    let c = gemm::matmul(
        &GpuArray::from_slice(&dev, &ab, &[m, k]).unwrap(),
        &GpuArray::from_slice(&dev, &bb, &[k, n]).unwrap(),
    )
    .unwrap();
    let got: Vec<f64> = c.to_vec().unwrap().iter().map(|x| x.to_f64()).collect();
    assert!(rel(&got, &want) < 2e-2, "bf16 {}", rel(&got, &want));
}

#[test]
fn shape_errors_empty_dims_and_unsupported_types() {
    let Some((dev, _default_lock)) = dev("shape_errors_empty_dims_and_unsupported_types") else {
        return;
    };
    let a = GpuArray::<f32>::zeros(&dev, &[2, 3]).unwrap();
    let b = GpuArray::<f32>::zeros(&dev, &[4, 5]).unwrap();
    let e = gemm::matmul(&a, &b).unwrap_err().to_string();
    assert!(e.contains("[2, 3]") && e.contains("[4, 5]"), "{e}");
    let mut c = GpuArray::<f32>::zeros(&dev, &[2, 6]).unwrap();
    let b2 = GpuArray::<f32>::zeros(&dev, &[3, 5]).unwrap();
    let e = gemm::gemm(1.0, &a, Transpose::No, &b2, Transpose::No, 0.0, &mut c)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[2, 5]") && e.contains("[2, 6]"), "{e}");
    // Empty m: empty result; k == 0: zeros; k == 0 with beta: beta-scaled.
    let z = gemm::matmul(
        &GpuArray::<f32>::zeros(&dev, &[0, 3]).unwrap(),
        &GpuArray::<f32>::zeros(&dev, &[3, 4]).unwrap(),
    )
    .unwrap();
    assert_eq!(z.shape(), &[0, 4]);
    let a0 = GpuArray::<f32>::zeros(&dev, &[2, 0]).unwrap();
    let b0 = GpuArray::<f32>::zeros(&dev, &[0, 3]).unwrap();
    assert_eq!(
        gemm::matmul(&a0, &b0).unwrap().to_vec().unwrap(),
        vec![0.0; 6]
    );
    let mut c = GpuArray::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    gemm::gemm(1.0, &a0, Transpose::No, &b0, Transpose::No, 0.5, &mut c).unwrap();
    assert_eq!(c.to_vec().unwrap(), vec![0.5, 1.0, 1.5, 2.0, 2.5, 3.0]);
    let ai = GpuArray::<i32>::zeros(&dev, &[2, 2]).unwrap();
    let e = gemm::matmul(&ai, &ai).unwrap_err().to_string();
    assert!(e.contains("i32"), "{e}");
}
