//! GPU tests of the bandwidth paths of the contiguous kernels against CPU references: the
//! block-chunked 16-byte elementwise loop (full chunks, a partial last chunk, the scalar tail,
//! misaligned views that take the scalar path), the 16-byte mask and `where` kernels, the
//! single-pass flat scan over many tiles (exact integer references, misaligned views, segments
//! of the last axis), the warp-per-row and small-column reductions, and the shared-memory rows
//! of softmax / layer norm.

mod common;

use common::*;
use gpukit_core::{f16, where_, DType, Device, GpuArray};

/// Sizes around the elementwise chunk (4 vectors x 256 threads) and the vector tail.
const SIZES: [usize; 7] = [
    1,
    5,
    1023,
    4 * 1024 * 4 + 3,
    4096 * 17 + 1,
    (1 << 20) + 5,
    3 << 20,
];

/// `host[off..off + n]` as a contiguous view at element offset `off` of a larger array.
fn view_at<T: DType>(dev: &Device, host: &[T], off: usize, n: usize) -> GpuArray<T> {
    let g = GpuArray::from_slice(dev, &host[..off + n], &[off + n]).unwrap();
    g.slice_axis(0, off as isize..(off + n) as isize).unwrap()
}

fn f32_data(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| match i % 97 {
            13 => f32::NAN,
            29 => f32::INFINITY,
            41 => f32::NEG_INFINITY,
            _ => rng.uniform(-2.0, 2.0) as f32,
        })
        .collect()
}

fn same_f32(g: f32, w: f32) -> bool {
    (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 2e-6 * w.abs().max(1e-30)
}

#[test]
fn elementwise_vector_chunks_tails_and_misaligned_views() {
    let Some(dev) = device("elementwise_vector_chunks_tails_and_misaligned_views") else {
        return;
    };
    let mut rng = Rng(7);
    for n in SIZES {
        for off in [0usize, 1, 3] {
            let ha = f32_data(&mut rng, n + off);
            let hb = f32_data(&mut rng, n + off);
            let (a, b) = (view_at(&dev, &ha, off, n), view_at(&dev, &hb, off, n));
            let (sa, sb) = (&ha[off..], &hb[off..]);
            let what = format!("n={n} off={off}");
            let add = a.add(&b).unwrap().to_vec().unwrap();
            let ms = a.mul_scalar(2.0).unwrap().to_vec().unwrap();
            let ex = a.exp().unwrap().to_vec().unwrap();
            let cl = a.clip(-0.5, 0.5).unwrap().to_vec().unwrap();
            for i in 0..n {
                assert!(same_f32(add[i], sa[i] + sb[i]), "add {what} [{i}]");
                assert!(same_f32(ms[i], sa[i] * 2.0), "mul_scalar {what} [{i}]");
                assert!(
                    same_f32(ex[i], sa[i].exp()),
                    "exp {what} [{i}]: {} vs {}",
                    ex[i],
                    sa[i].exp()
                );
                let c = if sa[i].is_nan() {
                    sa[i]
                } else {
                    sa[i].clamp(-0.5, 0.5)
                };
                assert!(same_f32(cl[i], c), "clip {what} [{i}]");
            }
            let eq = a.eq(&a).unwrap().to_vec().unwrap();
            let nan = a.isnan().unwrap().to_vec().unwrap();
            let ma = a.gt_scalar(0.0).unwrap();
            let mb = b.gt_scalar(0.5).unwrap();
            let and = ma.logical_and(&mb).unwrap().to_vec().unwrap();
            let andf = a.logical_and(&b).unwrap().to_vec().unwrap();
            let wh = where_(&ma, &a, &b).unwrap().to_vec().unwrap();
            let h = a.astype::<f16>().unwrap().to_vec().unwrap();
            for i in 0..n {
                assert_eq!(eq[i], (sa[i] == sa[i]) as u8, "eq {what} [{i}]");
                assert_eq!(nan[i], sa[i].is_nan() as u8, "isnan {what} [{i}]");
                let (pa, pb) = (sa[i] > 0.0, sb[i] > 0.5);
                assert_eq!(and[i], (pa && pb) as u8, "logical_and u8 {what} [{i}]");
                assert_eq!(
                    andf[i],
                    (sa[i] != 0.0 && sb[i] != 0.0) as u8,
                    "logical_and f32 {what} [{i}]"
                );
                let w = if pa { sa[i] } else { sb[i] };
                assert!(same_f32(wh[i], w), "where {what} [{i}]");
                let hw = f16::from_f32(sa[i]);
                assert!(
                    h[i] == hw || (h[i].is_nan() && hw.is_nan()),
                    "astype f16 {what} [{i}]"
                );
            }
            // A mask view at an odd offset (u8: 16 elements per vector) with u8 inputs.
            let hm: Vec<u8> = (0..n + off).map(|i| (i % 3 == 0) as u8).collect();
            let hn: Vec<u8> = (0..n + off).map(|i| (i % 5 < 2) as u8 * 7).collect();
            let (m1, m2) = (view_at(&dev, &hm, off, n), view_at(&dev, &hn, off, n));
            let got = m1.logical_and(&m2).unwrap().to_vec().unwrap();
            for i in 0..n {
                let want = (hm[off + i] != 0 && hn[off + i] != 0) as u8;
                assert_eq!(got[i], want, "logical_and u8 view {what} [{i}]");
            }
        }
    }
    // 64-bit and 8-bit element types through the same loop.
    for n in [3usize, 4099, (1 << 18) + 1] {
        let a: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 7.0).collect();
        let g = GpuArray::from_slice(&dev, &a, &[n]).unwrap();
        let got = g.add(&g).unwrap().neg().unwrap().to_vec().unwrap();
        assert!(got.iter().zip(&a).all(|(g, x)| *g == -(x + x)), "f64 n={n}");
        let b: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
        let gb = GpuArray::from_slice(&dev, &b, &[n]).unwrap();
        let got = gb
            .bitwise_and(&gb.add(&gb).unwrap())
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(
            got.iter()
                .zip(&b)
                .all(|(g, x)| *g == x & x.wrapping_add(*x)),
            "u8 n={n}"
        );
    }
}

/// Exact running sums of small integers in f64.
fn running(v: &[f64]) -> Vec<f64> {
    v.iter()
        .scan(0.0, |s, &x| {
            *s += x;
            Some(*s)
        })
        .collect()
}

fn flat_scan_case<T: DType>(dev: &Device, n: usize, off: usize, vals: impl Fn(usize) -> f64) {
    let host: Vec<T> = (0..n + off).map(|i| T::from_f64(vals(i))).collect();
    let g = view_at(dev, &host, off, n);
    let got: Vec<f64> = g
        .cumsum(None)
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .map(|x| x.to_f64())
        .collect();
    let want = running(&host[off..].iter().map(|x| x.to_f64()).collect::<Vec<_>>());
    for i in 0..n {
        let w = T::Sum::from_f64(want[i]).to_f64();
        assert!(
            got[i] == w,
            "cumsum {} n={n} off={off} [{i}]: {} vs {w}",
            T::RUST_NAME,
            got[i]
        );
    }
}

#[test]
fn flat_cumsum_over_many_tiles_is_exact() {
    let Some(dev) = device("flat_cumsum_over_many_tiles_is_exact") else {
        return;
    };
    // Tiles: 8192 f32 / i32, 4096 f64, 16384 f16, 32768 u8 elements.
    for n in [1024usize, 8191, 8192, 8192 * 5 + 3, 300_007, 3_000_001] {
        for off in [0usize, 1] {
            // Values 0..2: every partial sum is an integer below 2^24 (exact in f32).
            flat_scan_case::<f32>(&dev, n, off, |i| (i * 7 % 3) as f64);
            flat_scan_case::<i32>(&dev, n, off, |i| (i * 13 % 7) as f64 - 3.0);
            flat_scan_case::<u8>(&dev, n, off, |i| (i * 5 % 256) as f64);
            flat_scan_case::<f64>(&dev, n, off, |i| (i * 11 % 5) as f64 - 2.0);
            flat_scan_case::<u32>(&dev, n, off, |i| (i % 1000) as f64);
            if n <= 300_007 {
                // f16 output: the f32 running sum rounded to f16.
                flat_scan_case::<f16>(&dev, n, off, |i| (i % 2) as f64);
            }
        }
    }
    // Products of +-1 over many tiles.
    let n = 100_003usize;
    let h: Vec<f32> = (0..n)
        .map(|i| if i % 4099 == 0 { -1.0 } else { 1.0 })
        .collect();
    let g = GpuArray::from_slice(&dev, &h, &[n]).unwrap();
    let got = g.cumprod(None).unwrap().to_vec().unwrap();
    let mut p = 1.0f32;
    for i in 0..n {
        p *= h[i];
        assert_eq!(got[i], p, "cumprod [{i}]");
    }
    // Segments: the last axis of [rows, l].
    for (rows, l) in [(7usize, 5000usize), (3, 100_003), (2, 8192)] {
        let h: Vec<i32> = (0..rows * l).map(|i| (i % 11) as i32 - 5).collect();
        let g = GpuArray::from_slice(&dev, &h, &[rows, l]).unwrap();
        let got = g.cumsum(Some(-1)).unwrap().to_vec().unwrap();
        for r in 0..rows {
            let mut s = 0i64;
            for j in 0..l {
                s += h[r * l + j] as i64;
                assert_eq!(got[r * l + j], s, "segment [{rows}, {l}] row {r} [{j}]");
            }
        }
    }
}

#[test]
fn warp_rows_and_small_column_reductions() {
    let Some(dev) = device("warp_rows_and_small_column_reductions") else {
        return;
    };
    let mut rng = Rng(99);
    // Rows of 128 .. 1024 f32 (a warp per row), f64 rows of 64.
    for (rows, r) in [(1usize, 1024usize), (333, 1024), (5000, 128), (77, 516)] {
        let h: Vec<f32> = (0..rows * r)
            .map(|_| rng.uniform(-1.0, 1.0) as f32)
            .collect();
        let g = GpuArray::from_slice(&dev, &h, &[rows, r]).unwrap();
        let s = g.sum_axis(1).unwrap().to_vec().unwrap();
        let mx = g.max_axis(1).unwrap().to_vec().unwrap();
        let am = g.argmax_axis(1).unwrap().to_vec().unwrap();
        let v = g.var(Some(&[1]), false, 0).unwrap().to_vec().unwrap();
        for i in 0..rows {
            let row = &h[i * r..(i + 1) * r];
            let ws: f64 = row.iter().map(|&x| x as f64).sum();
            assert!(
                (s[i] as f64 - ws).abs() < 1e-4,
                "sum rows [{rows}, {r}] {i}"
            );
            let (mut bi, mut bv) = (0usize, f32::NEG_INFINITY);
            for (j, &x) in row.iter().enumerate() {
                if x > bv {
                    bi = j;
                    bv = x;
                }
            }
            assert_eq!(mx[i], bv, "max rows {i}");
            assert_eq!(am[i], bi as i64, "argmax rows {i}");
            let m = ws / r as f64;
            let wv = row.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / r as f64;
            assert!((v[i] as f64 - wv).abs() < 1e-5, "var rows {i}");
        }
    }
    let h: Vec<f64> = (0..300 * 64).map(|i| (i % 17) as f64).collect();
    let g = GpuArray::from_slice(&dev, &h, &[300, 64]).unwrap();
    let s = g.sum_axis(1).unwrap().to_vec().unwrap();
    for i in 0..300 {
        assert_eq!(
            s[i],
            h[i * 64..(i + 1) * 64].iter().sum::<f64>(),
            "f64 rows {i}"
        );
    }
    // A NaN in a row propagates through max.
    let mut h: Vec<f32> = vec![0.5; 4 * 256];
    h[256 + 100] = f32::NAN;
    let g = GpuArray::from_slice(&dev, &h, &[4, 256]).unwrap();
    let mx = g.max_axis(1).unwrap().to_vec().unwrap();
    assert!(mx[1].is_nan() && mx[0] == 0.5 && mx[2] == 0.5);
    // Axis 0 of [rows, inner] with inner dividing the vector width (f32: 2; f16: 2, 4; u8: 4),
    // odd row counts leave a scalar tail.
    for rows in [1usize, 3, 1001, 250_001] {
        for inner in [2usize] {
            let h: Vec<f32> = (0..rows * inner)
                .map(|i| ((i * 37 % 101) as f32) * 0.01 - 0.5)
                .collect();
            let g = GpuArray::from_slice(&dev, &h, &[rows, inner]).unwrap();
            let s = g.sum_axis(0).unwrap().to_vec().unwrap();
            let am = g.argmax_axis(0).unwrap().to_vec().unwrap();
            let mn = g.min_axis(0).unwrap().to_vec().unwrap();
            let me = g.mean_axis(0).unwrap().to_vec().unwrap();
            for c in 0..inner {
                let col: Vec<f32> = (0..rows).map(|r| h[r * inner + c]).collect();
                let ws: f64 = col.iter().map(|&x| x as f64).sum();
                assert!(
                    (s[c] as f64 - ws).abs() < 1e-5 * (rows as f64).max(1.0),
                    "sum axis0 [{rows}, {inner}] col {c}: {} vs {ws}",
                    s[c]
                );
                assert!(
                    (me[c] as f64 - ws / rows as f64).abs() < 1e-5,
                    "mean col {c}"
                );
                let (mut bi, mut bv) = (0usize, f32::NEG_INFINITY);
                let mut lo = f32::INFINITY;
                for (r, &x) in col.iter().enumerate() {
                    if x > bv {
                        bi = r;
                        bv = x;
                    }
                    lo = lo.min(x);
                }
                assert_eq!(am[c], bi as i64, "argmax axis0 [{rows}, {inner}] col {c}");
                assert_eq!(mn[c], lo, "min axis0 col {c}");
            }
        }
        for inner in [2usize, 4] {
            let h: Vec<f16> = (0..rows * inner)
                .map(|i| f16::from_f32((i % 5) as f32))
                .collect();
            let g = GpuArray::from_slice(&dev, &h, &[rows, inner]).unwrap();
            let s = g.sum_axis(0).unwrap().to_vec().unwrap();
            for c in 0..inner {
                let ws: f32 = (0..rows).map(|r| h[r * inner + c].to_f32()).sum();
                assert_eq!(
                    s[c],
                    f16::from_f32(ws),
                    "f16 axis0 [{rows}, {inner}] col {c}"
                );
            }
            let hu: Vec<u8> = (0..rows * inner).map(|i| (i % 251) as u8).collect();
            let g = GpuArray::from_slice(&dev, &hu, &[rows, inner]).unwrap();
            let s = g.sum_axis(0).unwrap().to_vec().unwrap();
            for c in 0..inner {
                let ws: u64 = (0..rows).map(|r| hu[r * inner + c] as u64).sum();
                assert_eq!(s[c], ws, "u8 axis0 [{rows}, {inner}] col {c}");
            }
        }
    }
    // A misaligned [rows, 2] view (offset of one row) takes the general column kernel.
    let h: Vec<f32> = (0..2 * 1001).map(|i| (i % 7) as f32).collect();
    let g = GpuArray::from_slice(&dev, &h, &[1001, 2]).unwrap();
    let v = g.slice_axis(0, 1isize..1001).unwrap();
    let s = v.sum_axis(0).unwrap().to_vec().unwrap();
    for c in 0..2 {
        let ws: f32 = (1..1001).map(|r| h[r * 2 + c]).sum();
        assert_eq!(s[c], ws, "misaligned axis0 col {c}");
    }
}

#[test]
fn softmax_and_layernorm_rows_of_32k_in_shared_memory() {
    let Some(dev) = device("softmax_and_layernorm_rows_of_32k_in_shared_memory") else {
        return;
    };
    let mut rng = Rng(3);
    // Shared-memory rows: 16-byte vectors (32768, 20000) and element by element (20001).
    for (rows, r) in [(3usize, 32768usize), (2, 20000), (2, 20001)] {
        let h: Vec<f32> = (0..rows * r)
            .map(|_| rng.uniform(-4.0, 4.0) as f32)
            .collect();
        let g = GpuArray::from_slice(&dev, &h, &[rows, r]).unwrap();
        let sm = g.softmax(-1).unwrap().to_vec().unwrap();
        let gam: Vec<f32> = (0..r).map(|j| 0.5 + (j % 3) as f32 * 0.25).collect();
        let bet: Vec<f32> = (0..r).map(|j| (j % 5) as f32 * 0.1).collect();
        let gg = GpuArray::from_slice(&dev, &gam, &[r]).unwrap();
        let gb = GpuArray::from_slice(&dev, &bet, &[r]).unwrap();
        let ln = g
            .layer_norm(Some(&gg), Some(&gb), 1e-5)
            .unwrap()
            .to_vec()
            .unwrap();
        for i in 0..rows {
            let row: Vec<f64> = h[i * r..(i + 1) * r].iter().map(|&x| x as f64).collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
            let mean = row.iter().sum::<f64>() / r as f64;
            let var = row.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / r as f64;
            let rstd = 1.0 / (var + 1e-5).sqrt();
            for j in 0..r {
                let w = (row[j] - m).exp() / z;
                let got = sm[i * r + j] as f64;
                assert!(
                    (got - w).abs() <= 1e-5 * w + 1e-12,
                    "softmax [{rows}, {r}] ({i}, {j})"
                );
                let w = (row[j] - mean) * rstd * gam[j] as f64 + bet[j] as f64;
                let got = ln[i * r + j] as f64;
                assert!(
                    (got - w).abs() <= 1e-4,
                    "layernorm [{rows}, {r}] ({i}, {j}): {got} vs {w}"
                );
            }
        }
    }
    // f64 rows of 16384 (128 KiB in shared memory).
    let r = 16384usize;
    let h: Vec<f64> = (0..2 * r)
        .map(|i| ((i * 17 % 1000) as f64) * 0.003)
        .collect();
    let g = GpuArray::from_slice(&dev, &h, &[2, r]).unwrap();
    let sm = g.softmax(-1).unwrap().to_vec().unwrap();
    for i in 0..2 {
        let row = &h[i * r..(i + 1) * r];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
        for j in 0..r {
            let w = (row[j] - m).exp() / z;
            assert!(
                (sm[i * r + j] - w).abs() <= 1e-12 * w.max(1e-300) + 1e-15,
                "f64 softmax ({i}, {j})"
            );
        }
    }
}
