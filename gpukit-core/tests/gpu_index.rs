//! GPU tests of views and indexing against CPU index arithmetic: slicing any axis with steps
//! (proptest), squeeze / unsqueeze / broadcast_to, integer and boolean indexing, setitem,
//! concatenate / stack / split, creation and casts, and `Display`.

mod common;

use common::*;
use gpukit_core::slice::{resolve, Index};
use gpukit_core::{bf16, concatenate, f16, s, stack, Device, Error, GpuArray};

fn slice_case<T: TestType>(
    dev: &Device,
    shape: &[usize],
    idx: &[Index],
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n: usize = shape.iter().product();
    let host: Vec<T> = random_vec(&mut rng, n, false);
    let g = GpuArray::from_slice(dev, &host, shape).map_err(fail)?;
    let strides: Vec<isize> = common::strides(shape).iter().map(|&s| s as isize).collect();
    let want_view = match resolve("t", shape, &strides, 0, idx) {
        Ok(v) => v,
        Err(_) => {
            prop_assert!(g.slice(idx).is_err());
            return Ok(());
        }
    };
    let v = g.slice(idx).map_err(fail)?;
    prop_assert_eq!(v.shape(), want_view.shape.as_slice());
    let want: Vec<f64> = view_offsets(&want_view.shape, &want_view.strides, want_view.offset)
        .into_iter()
        .map(|o| host[o].to_f64())
        .collect();
    check::<T>("slice", &v.to_vec().map_err(fail)?, &want, 0.0).map_err(fail)?;
    // setitem through the same index: write -1 (or 0 for unsigned) there, elsewhere unchanged.
    let mut w = g.astype::<T>().map_err(fail)?;
    let fillv = T::from_f64(if T::KIND == gpukit_core::DTypeKind::Unsigned {
        0.0
    } else {
        -1.0
    });
    w.fill_slice(idx, fillv).map_err(fail)?;
    let mut want_all: Vec<f64> = host.iter().map(|x| x.to_f64()).collect();
    for o in view_offsets(&want_view.shape, &want_view.strides, want_view.offset) {
        want_all[o] = fillv.to_f64();
    }
    check::<T>("fill_slice", &w.to_vec().map_err(fail)?, &want_all, 0.0).map_err(fail)?;
    Ok(())
}

fn index_entry(len: usize) -> impl Strategy<Value = Index> {
    let l = len as isize;
    prop_oneof![
        (-(l + 2)..(l + 2)).prop_map(Index::At),
        (
            prop::option::of(-(l + 2)..(l + 2)),
            prop::option::of(-(l + 2)..(l + 2)),
            prop::sample::select(vec![-3isize, -2, -1, 1, 2, 3])
        )
            .prop_map(|(start, stop, step)| Index::Range { start, stop, step }),
        (
            prop::option::of(-(l + 2)..(l + 2)),
            prop::option::of(-(l + 2)..(l + 2)),
            prop::sample::select(vec![-2isize, -1, 1, 2])
        )
            .prop_map(|(start, stop, step)| Index::numpy(start, stop, step)),
        Just(Index::NewAxis),
        Just(Index::ALL),
    ]
}

fn slices_all<T: TestType>(dev: &Device, cases: u32) {
    let strat = prop::collection::vec(prop::sample::select(vec![1usize, 2, 4, 7]), 1..4)
        .prop_flat_map(|shape| {
            let entries: Vec<_> = shape.iter().map(|&d| index_entry(d)).collect();
            (Just(shape), entries, any::<u64>())
        });
    runner(cases)
        .run(&strat, |(shape, idx, seed)| {
            slice_case::<T>(dev, &shape, &idx, seed)
        })
        .unwrap_or_else(|e| panic!("{}: {e}", T::RUST_NAME));
}

#[test]
fn slicing_with_steps_and_setitem_every_dtype() {
    let Some(dev) = device("slicing_with_steps_and_setitem_every_dtype") else {
        return;
    };
    for_all_dtypes!(slices_all, &dev, 12);
}

#[test]
fn squeeze_unsqueeze_broadcast_to_and_join() {
    let Some(dev) = device("squeeze_unsqueeze_broadcast_to_and_join") else {
        return;
    };
    let host: Vec<i32> = (0..24).collect();
    let a = GpuArray::from_slice(&dev, &host, &[2, 1, 3, 4]).unwrap();
    assert_eq!(a.squeeze(None).unwrap().shape(), &[2, 3, 4]);
    assert_eq!(a.squeeze(Some(&[1])).unwrap().shape(), &[2, 3, 4]);
    assert!(a.squeeze(Some(&[0])).is_err());
    let u = a.unsqueeze(-1).unwrap();
    assert_eq!(u.shape(), &[2, 1, 3, 4, 1]);
    assert_eq!(u.to_vec().unwrap(), host);
    let row = GpuArray::from_slice(&dev, &[1i32, 2, 3], &[3]).unwrap();
    let b = row.broadcast_to(&[2, 3]).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![1, 2, 3, 1, 2, 3]);
    assert!(row.broadcast_to(&[2, 4]).is_err());
    // concatenate along each axis, stack, split.
    let x = GpuArray::from_slice(&dev, &[1i32, 2, 3, 4], &[2, 2]).unwrap();
    let y = GpuArray::from_slice(&dev, &[5i32, 6], &[1, 2]).unwrap();
    assert_eq!(
        concatenate(&[&x, &y], 0).unwrap().to_vec().unwrap(),
        vec![1, 2, 3, 4, 5, 6]
    );
    let yt = y.transpose();
    assert_eq!(
        concatenate(&[&x, &yt], -1).unwrap().to_vec().unwrap(),
        vec![1, 2, 5, 3, 4, 6]
    );
    assert!(concatenate(&[&x, &y], 1).is_err());
    let st = stack(&[&x, &x], 1).unwrap();
    assert_eq!(st.shape(), &[2, 2, 2]);
    assert_eq!(st.to_vec().unwrap(), vec![1, 2, 1, 2, 3, 4, 3, 4]);
    let parts = a.reshape(&[6, 4]).unwrap().split(3, 0).unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[2].to_vec().unwrap(), host[16..].to_vec());
    let uneven = a.reshape(&[24]).unwrap().split_at(&[5, 9, 100], 0).unwrap();
    let lens: Vec<usize> = uneven.iter().map(|p| p.len()).collect();
    assert_eq!(lens, vec![5, 4, 15, 0]);
    assert!(a.split(5, 3).is_err());
    // Views share memory: writing a split part writes the original.
    let mut whole = GpuArray::<f32>::zeros(&dev, &[4, 2]).unwrap();
    let mut part = whole.split(2, 0).unwrap().remove(1);
    part.fill(7.0).unwrap();
    assert_eq!(
        whole.to_vec().unwrap(),
        vec![0.0, 0.0, 0.0, 0.0, 7.0, 7.0, 7.0, 7.0]
    );
    whole
        .set(
            &s![.., 0],
            &GpuArray::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap(),
        )
        .unwrap();
    assert_eq!(
        whole.to_vec().unwrap(),
        vec![1.0, 0.0, 2.0, 0.0, 3.0, 7.0, 4.0, 7.0]
    );
    // setitem from an overlapping view of itself: as if read first.
    let mut r = GpuArray::<f32>::arange(&dev, 0.0, 6.0, 1.0).unwrap();
    let src = r.slice(&s![..;-1]).unwrap();
    r.set(&s![..], &src).unwrap();
    assert_eq!(r.to_vec().unwrap(), vec![5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
}

fn indexing_case<T: TestType>(dev: &Device) {
    let mut rng = Rng(99);
    let (p, q, r) = (4usize, 6usize, 5usize);
    let host: Vec<T> = random_vec(&mut rng, p * q * r, true);
    let g = GpuArray::from_slice(dev, &host, &[p, q, r]).unwrap();
    // take along the middle axis, negative indices, repeated indices, 2-D index array.
    let idx = [5i64, -1, 0, 2, 2, -6];
    let gi = GpuArray::from_slice(dev, &idx, &[2, 3]).unwrap();
    let t = g.take(&gi, 1).unwrap();
    assert_eq!(t.shape(), &[p, 2, 3, r]);
    let tv = t.to_vec().unwrap();
    for a in 0..p {
        for (j, &k) in idx.iter().enumerate() {
            let k = if k < 0 { k + q as i64 } else { k } as usize;
            for c in 0..r {
                assert_eq!(
                    tv[(a * 6 + j) * r + c].to_f64(),
                    host[(a * q + k) * r + c].to_f64()
                );
            }
        }
    }
    assert_eq!(
        g.take_indices(1, &idx)
            .unwrap()
            .reshape(&[p, 2, 3, r])
            .unwrap()
            .to_vec()
            .unwrap()
            .len(),
        tv.len()
    );
    let bad = GpuArray::from_slice(dev, &[0i64, 6], &[2]).unwrap();
    assert!(matches!(
        g.take(&bad, 1),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(g.take_indices(1, &[-7]).is_err());
    // Boolean indexing: a[mask], flatnonzero, masked_fill, masked_assign.
    let mask_host: Vec<u8> = (0..p * q * r).map(|i| ((i * 7) % 3 == 0) as u8).collect();
    let mask = GpuArray::from_slice(dev, &mask_host, &[p, q, r]).unwrap();
    let sel = g.masked_select(&mask).unwrap();
    let want: Vec<f64> = host
        .iter()
        .zip(&mask_host)
        .filter(|(_, &m)| m != 0)
        .map(|(x, _)| x.to_f64())
        .collect();
    check::<T>("masked_select", &sel.to_vec().unwrap(), &want, 0.0).unwrap();
    let nz = mask.flatnonzero().unwrap().to_vec().unwrap();
    let want_nz: Vec<i64> = (0..p * q * r)
        .filter(|&i| mask_host[i] != 0)
        .map(|i| i as i64)
        .collect();
    assert_eq!(nz, want_nz);
    let mut f = g.astype::<T>().unwrap();
    f.masked_fill(&mask, T::from_f64(3.0)).unwrap();
    let want: Vec<f64> = host
        .iter()
        .zip(&mask_host)
        .map(|(x, &m)| if m != 0 { 3.0 } else { x.to_f64() })
        .collect();
    check::<T>("masked_fill", &f.to_vec().unwrap(), &want, 0.0).unwrap();
    let vals: Vec<T> = (0..want_nz.len())
        .map(|i| T::from_f64((i % 9) as f64))
        .collect();
    let gv = GpuArray::from_slice(dev, &vals, &[vals.len()]).unwrap();
    let mut h = g.astype::<T>().unwrap();
    h.masked_assign(&mask, &gv).unwrap();
    let mut want: Vec<f64> = host.iter().map(|x| x.to_f64()).collect();
    for (k, &i) in want_nz.iter().enumerate() {
        want[i as usize] = vals[k].to_f64();
    }
    check::<T>("masked_assign", &h.to_vec().unwrap(), &want, 0.0).unwrap();
    // put along axis 2 of a strided view (scatter into a copy, written back).
    let base = g.astype::<T>().unwrap();
    let mut view = base.slice(&s![.., ..;2, ..]).unwrap();
    let pi = GpuArray::from_slice(dev, &[4i64, 0], &[2]).unwrap();
    let pv = GpuArray::<T>::full(dev, &[1], T::from_f64(1.0)).unwrap();
    view.put(2, &pi, &pv).unwrap();
    let bv = base.to_vec().unwrap();
    for a in 0..p {
        for b in 0..q {
            for c in 0..r {
                let i = (a * q + b) * r + c;
                let want = if b % 2 == 0 && (c == 4 || c == 0) {
                    1.0
                } else {
                    host[i].to_f64()
                };
                assert_eq!(bv[i].to_f64(), want, "put at {a},{b},{c}");
            }
        }
    }
    assert!(view.put(2, &bad.add_scalar(10).unwrap(), &pv).is_err());
}

#[test]
fn integer_and_boolean_indexing_every_dtype() {
    let Some(dev) = device("integer_and_boolean_indexing_every_dtype") else {
        return;
    };
    for_all_dtypes!(indexing_case, &dev);
}

#[test]
fn creation_casts_and_display() {
    let Some(dev) = device("creation_casts_and_display") else {
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
    let r = GpuArray::<u64>::arange(&dev, 3, 12, 4)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(r, vec![3, 7, 11]);
    assert!(GpuArray::<f32>::arange(&dev, 0.0, 1.0, 0.0).is_err());
    let x = GpuArray::<f32>::from_slice(&dev, &[-2.7, -0.5, 0.0, 3.9, 300.25], &[5]).unwrap();
    assert_eq!(
        x.astype::<i32>().unwrap().to_vec().unwrap(),
        vec![-2, 0, 0, 3, 300]
    );
    assert_eq!(
        x.astype::<f16>().unwrap().to_vec().unwrap()[1],
        f16::from_f32(-0.5)
    );
    let big = GpuArray::<i64>::from_slice(&dev, &[(1 << 40) + 3], &[1]).unwrap();
    assert_eq!(big.astype::<u8>().unwrap().to_vec().unwrap(), vec![3]);
    assert_eq!(
        big.astype::<u64>().unwrap().to_vec().unwrap(),
        vec![(1 << 40) + 3]
    );
    // Display: NumPy's str, with summaries of large arrays (only the edges are copied).
    let m = GpuArray::<f32>::from_slice(&dev, &[1.5, 2.0, 10.25, f32::NAN], &[2, 2]).unwrap();
    assert_eq!(m.to_string(), "[[ 1.5   2.  ]\n [10.25   nan]]");
    let big = GpuArray::<i64>::arange(&dev, 0, 2000, 1)
        .unwrap()
        .reshape(&[1000, 2])
        .unwrap();
    assert_eq!(
        big.to_string(),
        "[[   0    1]\n [   2    3]\n [   4    5]\n ...\n [1994 1995]\n [1996 1997]\n [1998 1999]]"
    );
    assert_eq!(GpuArray::<u8>::full(&dev, &[], 7).unwrap().to_string(), "7");
    // Views print their own elements.
    let t = GpuArray::<i32>::from_slice(&dev, &[1, 2, 3, 4], &[2, 2])
        .unwrap()
        .transpose();
    assert_eq!(format!("{t}"), "[[1 3]\n [2 4]]");
}
