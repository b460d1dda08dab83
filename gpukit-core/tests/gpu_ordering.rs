//! Stream order of the uses of one array's memory (issue 21, "Ordering"): an array written on
//! one stream and read on another, copies that wait for the latest writer rather than for the
//! allocating stream, the gather of a non-contiguous download, and the allocator's cache release
//! behind a green context's work. Each test queues a write that
//! is still running (a kernel that spins first) when the next use is queued: without ordering
//! the next use reads the old values. Skips without a GPU.

mod common;

use common::slow::slow_fill;
use gpukit_core::{s, GpuArray, OwnerId, PinnedArray, PinnedKind, Stream};
use gpukit_jit::cudarc::driver::sys;
use std::sync::Arc;

const N: usize = 1 << 20;

#[test]
fn written_on_one_stream_read_on_another() {
    let Some(dev) = common::device("written_on_one_stream_read_on_another") else {
        return;
    };
    let (s1, s2) = (dev.new_stream(0).unwrap(), dev.new_stream(0).unwrap());
    let mut x = GpuArray::<f32>::zeros(&dev, &[N]).unwrap();
    dev.synchronize().unwrap();
    slow_fill(&dev, &mut x, 3.0, &s1);
    // Read on s2 (a scope of another thread's stream, as a Python thread sharing x would).
    let y = dev.with_stream(&s2, || x.mul_scalar(2.0)).unwrap();
    let got = dev.with_stream(&s2, || y.to_vec()).unwrap();
    assert!(
        got.iter().all(|&v| v == 6.0),
        "read before the write: {}",
        got[0]
    );
    // And the other way round: a write on s2 after a slow write on s1 lands last.
    slow_fill(&dev, &mut x, 5.0, &s1);
    dev.with_stream(&s2, || x.fill(7.0)).unwrap();
    dev.synchronize().unwrap();
    assert!(
        x.to_vec().unwrap().iter().all(|&v| v == 7.0),
        "writes out of order"
    );
}

#[test]
fn copy_to_host_waits_for_the_latest_writer_not_the_allocating_stream() {
    let Some(dev) =
        common::device("copy_to_host_waits_for_the_latest_writer_not_the_allocating_stream")
    else {
        return;
    };
    let s1 = dev.new_stream(0).unwrap();
    // Allocated on the device's compute stream, written on s1.
    let mut x = GpuArray::<f32>::zeros(&dev, &[N]).unwrap();
    dev.synchronize().unwrap();
    slow_fill(&dev, &mut x, 4.0, &s1);
    let mut out = vec![0.0f32; N];
    x.copy_to_host(&mut out).unwrap();
    assert!(
        out.iter().all(|&v| v == 4.0),
        "copied before the write: {}",
        out[0]
    );
    // A strided view goes through a gather first.
    slow_fill(&dev, &mut x, 9.0, &s1);
    let v = x.reshape(&[1024, 1024]).unwrap().transpose();
    assert!(v.to_vec().unwrap().iter().all(|&e| e == 9.0));
}

#[test]
fn non_contiguous_download_async_waits_for_its_gather() {
    let Some(dev) = common::device("non_contiguous_download_async_waits_for_its_gather") else {
        return;
    };
    let s2 = dev.new_stream(0).unwrap();
    let compute = dev.compute_stream().clone();
    let mut x = GpuArray::<f32>::zeros(&dev, &[1024, 1024]).unwrap();
    // Poison the block the gather will get from the pool.
    drop(GpuArray::<f32>::full(&dev, &[1024, 1024], -1.0).unwrap());
    slow_fill(&dev, &mut x, 2.0, &compute);
    // The gather runs on the current (compute) stream behind the slow fill; the copy on s2.
    let view = x.slice(&s![..;-1, ..]).unwrap();
    let mut host = PinnedArray::<f32>::zeros(&dev, N, PinnedKind::Cached).unwrap();
    view.download_async_on(&mut host, &s2).unwrap();
    let got = host.as_slice().unwrap();
    assert!(
        got.iter().all(|&v| v == 2.0),
        "copied before the gather: {}",
        got[0]
    );
}

#[test]
fn gemm_marks_its_operands_before_launching() {
    let Some(dev) = common::device("gemm_marks_its_operands_before_launching") else {
        return;
    };
    if !gpukit_jit::testing::cublas("gemm_marks_its_operands_before_launching") {
        return;
    }
    // A written on s1 (slowly), multiplied on the compute stream: the product must see A.
    let s1 = dev.new_stream(0).unwrap();
    let mut a = GpuArray::<f32>::zeros(&dev, &[256, 256]).unwrap();
    let b = GpuArray::<f32>::ones(&dev, &[256, 256]).unwrap();
    dev.synchronize().unwrap();
    slow_fill(&dev, &mut a, 1.0, &s1);
    let c = gpukit_core::gemm::matmul(&a, &b).unwrap();
    assert!(c.to_vec().unwrap().iter().all(|&v| v == 256.0));
}

/// A green context over the first 8-SM group of the device and one stream of it, made with the
/// driver directly (as gpukit-sched does); the stream is wrapped with the primary context, as
/// gpukit-core's stream scopes expect. Destroyed on drop.
struct Green {
    ctx: sys::CUgreenCtx,
    raw: sys::CUstream,
    stream: Stream,
}

impl Green {
    fn new(dev: &gpukit_core::Device) -> Option<Green> {
        dev.context().bind_to_thread().ok()?;
        let device = dev.context().cu_device();
        // SAFETY: valid out-pointers, resources of this device, flags as documented; each
        // result is checked before use; wrap_borrowed_stream's stream outlives its wrapper
        // (destroyed in drop, after the test's last use).
        unsafe {
            let mut input: sys::CUdevResource = std::mem::zeroed();
            sys::cuDeviceGetDevResource(
                device,
                &mut input,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
            )
            .result()
            .ok()?;
            let mut group: sys::CUdevResource = std::mem::zeroed();
            let mut rest: sys::CUdevResource = std::mem::zeroed();
            let mut n = 1u32;
            sys::cuDevSmResourceSplitByCount(&mut group, &mut n, &input, &mut rest, 0, 8)
                .result()
                .ok()?;
            let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
            sys::cuDevResourceGenerateDesc(&mut desc, &mut group, 1)
                .result()
                .ok()?;
            let mut ctx: sys::CUgreenCtx = std::ptr::null_mut();
            sys::cuGreenCtxCreate(
                &mut ctx,
                desc,
                device,
                sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
            )
            .result()
            .ok()?;
            let mut raw: sys::CUstream = std::ptr::null_mut();
            sys::cuGreenCtxStreamCreate(
                &mut raw,
                ctx,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                0,
            )
            .result()
            .ok()?;
            let stream = Stream::from_cuda(dev.context().wrap_borrowed_stream(raw));
            Some(Green { ctx, raw, stream })
        }
    }
}

impl Drop for Green {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, the stream before its context.
        unsafe {
            sys::cuStreamSynchronize(self.raw);
            sys::cuStreamDestroy_v2(self.raw);
            sys::cuGreenCtxDestroy(self.ctx);
        }
    }
}

#[test]
fn empty_cache_waits_for_streams_of_green_contexts() {
    let Some(dev) = common::device("empty_cache_waits_for_streams_of_green_contexts") else {
        return;
    };
    let green = Green::new(&dev).expect("a green context of 8 SMs (compute capability 9.0)");
    dev.allocator().empty_cache().unwrap();
    // A block of its own segment, used only on the green stream: freed to that stream's list
    // at once when dropped, while a kernel still writes it.
    let buf = dev
        .allocator()
        .alloc_for(&OwnerId::new("green"), 64 << 20, &green.stream)
        .unwrap();
    let mut x = GpuArray::<f32>::from_buffer(Arc::new(buf), &[16 << 20], &[1], 0).unwrap();
    slow_fill(&dev, &mut x, 1.0, &green.stream);
    let done = green.stream.record_marker().unwrap();
    drop(x);
    // Releasing the cached segment to the driver must wait for that kernel first (the primary
    // context's synchronisation does not cover a green context's stream).
    dev.allocator().empty_cache().unwrap();
    assert!(
        done.is_complete().unwrap(),
        "the segment was released while a green-context kernel still wrote it"
    );
    assert!(dev.allocator().release_stream(&green.stream).unwrap());
}

/// The out-of-memory retry releases the cached segments as `empty_cache` does, and must wait
/// the same way for a green context's stream first (before: only `cuCtxSynchronize` of the
/// primary context, which does not cover it).
#[test]
fn out_of_memory_retry_waits_for_streams_of_green_contexts() {
    let Some(dev) = common::device("out_of_memory_retry_waits_for_streams_of_green_contexts")
    else {
        return;
    };
    let green = Green::new(&dev).expect("a green context of 8 SMs (compute capability 9.0)");
    let buf = dev
        .allocator()
        .alloc_for(&OwnerId::new("green-oom"), 64 << 20, &green.stream)
        .unwrap();
    let mut x = GpuArray::<f32>::from_buffer(Arc::new(buf), &[16 << 20], &[1], 0).unwrap();
    slow_fill(&dev, &mut x, 1.0, &green.stream);
    let done = green.stream.record_marker().unwrap();
    drop(x);
    // 1 TiB: the driver refuses it, the allocator releases its cache and retries once.
    match dev.allocator().alloc(1 << 40) {
        Err(gpukit_core::Error::OutOfMemory { .. }) => {}
        other => panic!("expected OutOfMemory for 1 TiB, got {other:?}"),
    }
    assert!(
        done.is_complete().unwrap(),
        "the out-of-memory retry released a segment while a green-context kernel still wrote it"
    );
    assert!(dev.allocator().release_stream(&green.stream).unwrap());
}
