//! Operations whose output shares memory with an input (issue 21, "undefined behaviour from safe
//! code"): GEMM's C overlapping A or B (the kernels take C as `__restrict__`), `put` with indices
//! that are a view of the output, and element counts that do not fit. The results must be those
//! of the same operation on copies. Skips without a GPU.

mod common;

use gpukit_core::gemm::{self, Transpose};
use gpukit_core::{s, GpuArray};

fn data(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = common::Rng(seed);
    (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn gemm_into_an_operand_reads_it_before_writing() {
    let Some(dev) = common::device("gemm_into_an_operand_reads_it_before_writing") else {
        return;
    };
    if !gpukit_jit::testing::cublas("gemm_into_an_operand_reads_it_before_writing") {
        return;
    }
    let n = 512;
    let (ah, bh) = (data(1, n * n), data(2, n * n));
    let a = GpuArray::<f32>::from_slice(&dev, &ah, &[n, n]).unwrap();
    let b = GpuArray::<f32>::from_slice(&dev, &bh, &[n, n]).unwrap();
    let want_ab = gemm::matmul(&a, &b).unwrap().to_vec().unwrap();
    // C is A itself (`let mut c = a.clone()`: a view of the same buffer), beta = 0 and 1.
    let mut c = a.clone();
    gemm::gemm(1.0, &a, Transpose::No, &b, Transpose::No, 0.0, &mut c).unwrap();
    let d = max_diff(&c.to_vec().unwrap(), &want_ab);
    assert!(d < 1e-3, "C = A @ B into A: max difference {d}");
    let a = GpuArray::<f32>::from_slice(&dev, &ah, &[n, n]).unwrap();
    let mut c = a.clone();
    gemm::gemm(1.0, &a, Transpose::No, &b, Transpose::No, 1.0, &mut c).unwrap();
    let want: Vec<f32> = want_ab.iter().zip(&ah).map(|(p, x)| p + x).collect();
    let d = max_diff(&c.to_vec().unwrap(), &want);
    assert!(d < 1e-3, "C = A @ B + C into A: max difference {d}");
    // C is B, read transposed; and C a half of A's buffer while A is the other half's view.
    let b = GpuArray::<f32>::from_slice(&dev, &bh, &[n, n]).unwrap();
    let a = GpuArray::<f32>::from_slice(&dev, &ah, &[n, n]).unwrap();
    let want = gemm::matmul(&a, &b.transpose()).unwrap().to_vec().unwrap();
    let mut c = b.clone();
    gemm::gemm(1.0, &a, Transpose::No, &b, Transpose::Yes, 0.0, &mut c).unwrap();
    let d = max_diff(&c.to_vec().unwrap(), &want);
    assert!(d < 1e-3, "C = A @ B^T into B: max difference {d}");
    let big = GpuArray::<f32>::from_slice(&dev, &data(3, 2 * n * n), &[2 * n, n]).unwrap();
    let top = big.slice(&s![..n, ..]).unwrap();
    let bottom_rows = big.slice(&s![n / 2..n / 2 + n, ..]).unwrap(); // overlaps top's second half
    let want = gemm::matmul(&top, &b).unwrap().to_vec().unwrap();
    let mut c = bottom_rows.clone();
    gemm::gemm(1.0, &top, Transpose::No, &b, Transpose::No, 0.0, &mut c).unwrap();
    let d = max_diff(&c.to_vec().unwrap(), &want);
    assert!(d < 1e-3, "C overlapping half of A: max difference {d}");
}

#[test]
fn put_with_indices_that_are_the_output_reads_them_first() {
    let Some(dev) = common::device("put_with_indices_that_are_the_output_reads_them_first") else {
        return;
    };
    // x holds a permutation of its positions; x[x] = values, with the indices read from x
    // before anything is written (NumPy's semantics). Values are valid negative indices, so a
    // thread that read an index another thread had overwritten would write elsewhere.
    let n = 1usize << 22;
    let perm: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % n as i64).collect();
    let values: Vec<i64> = (0..n as i64).map(|i| -1 - i).collect();
    let mut x = GpuArray::<i64>::from_slice(&dev, &perm, &[n]).unwrap();
    let vals = GpuArray::<i64>::from_slice(&dev, &values, &[n]).unwrap();
    let idx = x.clone();
    x.put(0, &idx, &vals).unwrap();
    let got = x.to_vec().unwrap();
    let mut want = vec![0i64; n];
    for i in 0..n {
        want[perm[i] as usize] = values[i];
    }
    let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(
        wrong, 0,
        "{wrong} elements written through overwritten indices"
    );
}

#[test]
fn element_counts_past_isize_are_errors_not_wrapped_lengths() {
    let Some(dev) = common::device("element_counts_past_isize_are_errors_not_wrapped_lengths")
    else {
        return;
    };
    let one = GpuArray::<f32>::ones(&dev, &[1, 1]).unwrap();
    let e = one
        .broadcast_to(&[1 << 32, 1 << 32])
        .unwrap_err()
        .to_string();
    assert!(e.contains("more elements"), "{e}");
    assert!(one.broadcast_to(&[1 << 62, 2]).is_err());
    let v = one.broadcast_to(&[1 << 31, 1 << 31]).unwrap();
    assert_eq!(v.len(), 1 << 62);
    let e = one.slice(&s![usize::MAX, ..]).unwrap_err().to_string();
    assert!(e.contains("out of bounds"), "{e}");
}
