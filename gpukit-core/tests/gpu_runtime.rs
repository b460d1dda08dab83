//! The shared runtime on the GPU: device attributes, the pinned pool, the handle cache.
//! The tests share the device's pinned pool (transfers of the handle tests go through it too),
//! and one asserts its counters, so they take a lock and run one at a time.

mod common;

use common::*;
use gpukit_core::{BlasHandle, GpuArray, OwnerId, PinnedKind, SolverHandle};
use parking_lot::Mutex;
use std::sync::Arc;

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn attributes_are_read_once_and_plausible() {
    let Some(dev) = device("attributes_are_read_once_and_plausible") else {
        return;
    };
    let _g = SERIAL.lock();
    let a = dev.attributes();
    assert_eq!(a.multiprocessor_count, dev.multiprocessor_count());
    assert_eq!(a.compute_capability, dev.compute_capability());
    assert_eq!(a.total_memory, dev.total_memory());
    assert_eq!(a.warp_size, 32);
    assert!(a.shared_memory_per_block >= 48 << 10);
    assert!(a.shared_memory_per_block_optin >= a.shared_memory_per_block);
    assert!(a.shared_memory_per_multiprocessor >= a.shared_memory_per_block_optin);
    assert!(a.l2_cache_bytes >= 1 << 20);
    assert!(a.max_threads_per_block >= 1024);
    assert!(a.registers_per_block >= 32 << 10);
    let again = gpukit_core::DeviceAttributes::of(dev.context()).unwrap();
    assert!(Arc::ptr_eq(a, &again), "one read per device");
    if dev.name().contains("H200") {
        assert_eq!(a.multiprocessor_count, 132);
        assert_eq!(a.compute_capability, (9, 0));
        assert_eq!(a.shared_memory_per_block_optin, 227 << 10);
        assert!(a.supports_wgmma());
    }
    eprintln!("{a:?}");
}

#[test]
fn pinned_buffers_round_trip_and_are_reused() {
    let Some(dev) = device("pinned_buffers_round_trip_and_are_reused") else {
        return;
    };
    let _g = SERIAL.lock();
    let pool = dev.pinned().clone();
    let n = 3 << 20; // not a power of two
    let mut rng = Rng(7);
    let data: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    let mut up = pool.acquire(n, PinnedKind::WriteCombined).unwrap();
    assert_eq!(up.len(), n);
    assert!(up.capacity() >= n);
    assert_eq!(up.kind(), PinnedKind::WriteCombined);
    up.as_mut_slice().unwrap().copy_from_slice(&data);
    let d = dev.allocator().alloc(n).unwrap();
    let s = dev.compute_stream().clone();
    // SAFETY: `up` holds n bytes; d is a device allocation of n bytes; the copy is ordered on s
    // and `up` is marked with an event after it.
    let st = unsafe {
        cudarc::driver::sys::cuMemcpyHtoDAsync_v2(
            d.ptr(),
            up.as_ptr() as *const _,
            n,
            s.cuda().cu_stream(),
        )
    };
    assert_eq!(st, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
    up.set_ready(s.record_marker().unwrap());
    let mut down = pool.acquire(n, PinnedKind::Cached).unwrap();
    // Poisoned first, so a copy that wrote nothing cannot pass.
    down.as_mut_slice().unwrap().fill(0xA5);
    // SAFETY: as above, device to host into `down` (n bytes).
    let st = unsafe {
        cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
            down.as_mut_ptr() as *mut _,
            d.ptr(),
            n,
            s.cuda().cu_stream(),
        )
    };
    assert_eq!(st, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
    down.set_ready(s.record_marker().unwrap());
    // as_slice waits for the copy: the data must be there without an explicit synchronize.
    assert!(down.as_slice().unwrap() == &data[..]);
    let before = pool.stats();
    let cap = up.capacity();
    drop(up);
    let again = pool.acquire(n - 5, PinnedKind::WriteCombined).unwrap();
    let after = pool.stats();
    assert_eq!(again.capacity(), cap);
    assert_eq!(after.hits, before.hits + 1, "same size class is reused");
    assert_eq!(after.allocations, before.allocations);
    // A bounded cache: with limit 0 nothing is kept.
    pool.set_cache_limit(0);
    drop(again);
    drop(down);
    assert_eq!(pool.stats().cached_bytes, 0);
    pool.set_cache_limit(gpukit_core::pinned::DEFAULT_CACHE_LIMIT);
}

#[test]
fn one_blas_handle_per_stream_with_workspace_charged_to_its_owner() {
    let Some(dev) = device("one_blas_handle_per_stream_with_workspace_charged_to_its_owner") else {
        return;
    };
    let _g = SERIAL.lock();
    let s = dev.new_stream(0).unwrap();
    let owner = OwnerId::new("handles-test");
    let h = dev
        .allocator()
        .with_owner(&owner, || BlasHandle::for_stream(&s))
        .unwrap();
    let h2 = BlasHandle::for_stream(&s).unwrap();
    assert!(Arc::ptr_eq(&h, &h2), "cached per stream");
    assert_eq!(h.stream(), &s);
    let ws = gpukit_core::handles::blas_workspace_bytes(dev.compute_capability());
    assert_eq!(h.workspace_bytes(), ws);
    assert!(dev.allocator().owner_usage(&owner).in_use >= ws);
    let other = dev.new_stream(0).unwrap();
    let h3 = BlasHandle::for_stream(&other).unwrap();
    assert!(!Arc::ptr_eq(&h, &h3));
    // The handle works: a cuBLAS SGEMM through it matches a CPU product.
    let (m, n, k) = (64usize, 48usize, 80usize);
    let mut rng = Rng(11);
    let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let (ga, gb, gc) = dev.with_stream(&s, || {
        (
            GpuArray::from_slice(&dev, &a, &[m, k]).unwrap(),
            GpuArray::from_slice(&dev, &b, &[k, n]).unwrap(),
            GpuArray::<f32>::full(&dev, &[m, n], f32::NAN).unwrap(),
        )
    });
    let (alpha, beta) = (1.0f32, 0.0f32);
    let status = h
        .with(|raw| {
            // SAFETY: column-major view of the row-major product: C^T = B^T A^T; the arrays
            // hold k*n, m*k and m*n floats, are ordered on s (made in its scope) and stay alive
            // until the synchronize below; alpha/beta are host scalars alive for the call.
            unsafe {
                cudarc::cublas::result::sgemm(
                    raw,
                    cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                    cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                    n as i32,
                    m as i32,
                    k as i32,
                    &alpha,
                    gb.device_ptr() as *const f32,
                    n as i32,
                    ga.device_ptr() as *const f32,
                    k as i32,
                    &beta,
                    gc.device_ptr() as *mut f32,
                    n as i32,
                )
            }
        })
        .unwrap();
    status.unwrap();
    s.synchronize().unwrap();
    let got = dev.with_stream(&s, || gc.to_vec().unwrap());
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                .sum();
            let g = got[i * n + j] as f64;
            assert!(
                (g - want).abs() < 1e-4 * (1.0 + want.abs()),
                "C[{i}][{j}] = {g}, want {want}"
            );
        }
    }
    // Dropping the last users of a stream lets the cache release its handle on the next insert.
    drop((h, h2, ga, gb, gc));
    drop(s);
    let third = dev.new_stream(0).unwrap();
    let _h4 = BlasHandle::for_stream(&third).unwrap();
    let usage = dev.allocator().owner_usage(&owner).in_use;
    assert_eq!(
        usage, 0,
        "the released handle's workspace went back ({usage} bytes still charged)"
    );
}

#[test]
fn solver_handle_is_cached_and_usable() {
    let Some(dev) = device("solver_handle_is_cached_and_usable") else {
        return;
    };
    let _g = SERIAL.lock();
    if !gpukit_jit::libs::cusolver_present() {
        assert!(
            std::env::var("GPUKIT_REQUIRE_GPU").as_deref() != Ok("1"),
            "cuSOLVER missing on a GPU host"
        );
        eprintln!("SKIPPED solver_handle_is_cached_and_usable: cuSOLVER not available");
        return;
    }
    let s = dev.new_stream(0).unwrap();
    let h = SolverHandle::for_stream(&s).unwrap();
    assert!(Arc::ptr_eq(&h, &SolverHandle::for_stream(&s).unwrap()));
    // Cholesky of a 2x2 SPD matrix through the X API's buffer-size query: proves the handle
    // and its params are live and bound.
    let (dev_bytes, host_bytes) = h
        .with(|raw, params| {
            let mut d = 0usize;
            let mut hst = 0usize;
            // SAFETY: live handle and params; a size query reads no matrix (null A is allowed
            // for the query with n = 2, lda = 2).
            let st = unsafe {
                cudarc::cusolver::sys::cusolverDnXpotrf_bufferSize(
                    raw,
                    params,
                    cudarc::cusolver::sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
                    2,
                    cudarc::cusolver::sys::cudaDataType::CUDA_R_64F,
                    std::ptr::null(),
                    2,
                    cudarc::cusolver::sys::cudaDataType::CUDA_R_64F,
                    &mut d,
                    &mut hst,
                )
            };
            (st, d, hst)
        })
        .map(|(st, d, hst)| {
            assert_eq!(
                st,
                cudarc::cusolver::sys::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS
            );
            (d, hst)
        })
        .unwrap();
    eprintln!("potrf workspace for n=2: device {dev_bytes} B, host {host_bytes} B");
}
