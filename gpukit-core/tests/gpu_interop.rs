//! Interop primitives for other libraries (DLPack, the CUDA array interface): foreign device
//! memory wrapped as a `DeviceBuffer`, views of any buffer (`GpuArray::from_buffer`), and the
//! stream handshakes with foreign streams (`Stream::raw`, `Stream::wait_raw_stream`,
//! `GpuArray::make_ready_on_raw`, the special values 1 and 2). Skips without a GPU.

mod common;

use common::slow::{self, slow_fill};
use gpukit_core::{DeviceBuffer, GpuArray, KernelArg, Stream};
use gpukit_jit::cudarc::driver::sys;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Memory from the driver directly, as another library would own it; freed when dropped, and
/// records whether the work queued on it had finished by then.
struct Foreign {
    ptr: u64,
    done_when_dropped: Arc<AtomicBool>,
    last_work: Arc<Mutex<Option<gpukit_core::Event>>>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let done = match &*self.last_work.lock().unwrap() {
            Some(e) => e.is_complete().unwrap(),
            None => true,
        };
        self.done_when_dropped.store(done, Ordering::SeqCst);
        self.drops.fetch_add(1, Ordering::SeqCst);
        // SAFETY: `ptr` came from malloc_sync below and is freed once, after gpukit released it.
        unsafe { gpukit_jit::cudarc::driver::result::free_sync(self.ptr) }.unwrap();
    }
}

fn foreign_alloc(dev: &gpukit_core::Device, bytes: usize) -> u64 {
    dev.context().bind_to_thread().unwrap();
    // SAFETY: the context is bound; the memory is owned by the Foreign value made from it.
    unsafe { gpukit_jit::cudarc::driver::result::malloc_sync(bytes) }.unwrap()
}

#[test]
fn foreign_memory_is_written_through_views_and_released_after_its_work() {
    let Some(dev) =
        common::device("foreign_memory_is_written_through_views_and_released_after_its_work")
    else {
        return;
    };
    let n = 1 << 20;
    let ptr = foreign_alloc(&dev, n * 4);
    let done = Arc::new(AtomicBool::new(false));
    let last_work = Arc::new(Mutex::new(None));
    let drops = Arc::new(AtomicUsize::new(0));
    let keep = Foreign {
        ptr,
        done_when_dropped: done.clone(),
        last_work: last_work.clone(),
        drops: drops.clone(),
    };
    // SAFETY: `ptr` is n * 4 bytes of device memory of `dev`, freed only by `keep`'s drop.
    let buf =
        Arc::new(unsafe { DeviceBuffer::from_foreign(&dev, ptr, n * 4, Box::new(keep)) }.unwrap());
    assert!(buf.is_foreign());
    assert_eq!(
        dev.allocator().owner_usage(buf.owner()).in_use,
        0,
        "not charged"
    );
    let mut x = GpuArray::<f32>::from_buffer(buf.clone(), &[1024, 1024], &[1024, 1], 0).unwrap();
    x.fill(1.5).unwrap();
    let y = x.add_scalar(1.0).unwrap();
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 2.5));
    // A transposed, offset view of the same memory, written through.
    let mut t =
        GpuArray::<f32>::from_buffer(buf.clone(), &[512, 512], &[1, 1024], 1024 * 512).unwrap();
    t.fill(-1.0).unwrap();
    let all = x.to_vec().unwrap();
    for r in 0..1024 {
        for c in 0..1024 {
            let want = if r >= 512 && c < 512 { -1.0 } else { 1.5 };
            assert_eq!(all[r * 1024 + c], want, "({r}, {c})");
        }
    }
    // Another element type over the same bytes.
    let bits = GpuArray::<u32>::from_buffer(buf.clone(), &[4], &[1], 0).unwrap();
    assert_eq!(bits.to_vec().unwrap(), vec![1.5f32.to_bits(); 4]);
    // Work still running when the last handle goes: the owner's handle waits for it.
    slow_fill(&dev, &mut x, 8.0, dev.compute_stream());
    *last_work.lock().unwrap() = Some(dev.compute_stream().record_marker().unwrap());
    drop((x, y, t, bits));
    drop(buf);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the keep-alive was released"
    );
    assert!(
        done.load(Ordering::SeqCst),
        "released while a kernel still wrote the memory"
    );
}

#[test]
fn foreign_pointers_and_views_are_checked() {
    let Some(dev) = common::device("foreign_pointers_and_views_are_checked") else {
        return;
    };
    let nothing = || Box::new(()) as Box<dyn std::any::Any + Send + Sync>;
    // SAFETY: refused by the checks before anything is wrapped.
    let e = unsafe { DeviceBuffer::from_foreign(&dev, 0, 16, nothing()) }.unwrap_err();
    assert!(e.to_string().contains("null"), "{e}");
    // SAFETY: as above.
    let e = unsafe { DeviceBuffer::from_foreign(&dev, u64::MAX - 4, 16, nothing()) }.unwrap_err();
    assert!(e.to_string().contains("end of the address space"), "{e}");
    let real = GpuArray::<f32>::zeros(&dev, &[256]).unwrap();
    let ptr = real.device_ptr();
    // SAFETY: as above.
    let e = unsafe { DeviceBuffer::from_foreign(&dev, ptr, 64 << 20, nothing()) }.unwrap_err();
    assert!(e.to_string().contains("end of their allocation"), "{e}");
    // Views of a pool buffer: inside, aligned, no repeated elements but by broadcasting.
    let buf = real.buffer_arc().clone();
    let v = GpuArray::<f32>::from_buffer(buf.clone(), &[4, 64], &[0, 1], 0).unwrap();
    assert_eq!(v.shape(), &[4, 64]);
    let err = |r: gpukit_core::Result<GpuArray<f32>>| r.unwrap_err().to_string();
    assert!(err(GpuArray::from_buffer(buf.clone(), &[257], &[1], 0)).contains("outside"));
    assert!(err(GpuArray::from_buffer(buf.clone(), &[16, 16], &[1, 1], 0)).contains("two indices"));
    assert!(err(GpuArray::from_buffer(buf.clone(), &[2], &[-1], 0)).contains("outside"));
    let e = GpuArray::<f64>::from_buffer(buf.clone(), &[2], &[1], 1).map(|_| ());
    assert!(e.is_ok(), "8-byte aligned at element 1 of f64");
    // A foreign pointer that is not 4-byte aligned cannot hold f32 elements.
    // SAFETY: inside `real`'s allocation, which outlives the buffer (dropped below).
    let odd =
        Arc::new(unsafe { DeviceBuffer::from_foreign(&dev, ptr + 2, 64, nothing()) }.unwrap());
    assert!(err(GpuArray::<f32>::from_buffer(odd.clone(), &[4], &[1], 0)).contains("aligned"));
    drop(odd);
}

/// A raw stream of the device's primary context, destroyed on drop.
struct RawStream(sys::CUstream);
impl RawStream {
    fn new(dev: &gpukit_core::Device) -> RawStream {
        dev.context().bind_to_thread().unwrap();
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: the context is bound; `s` is a valid out-pointer.
        unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }
            .result()
            .unwrap();
        RawStream(s)
    }
    fn handle(&self) -> u64 {
        self.0 as u64
    }
    fn sync(&self) {
        // SAFETY: live stream.
        unsafe { sys::cuStreamSynchronize(self.0) }
            .result()
            .unwrap();
    }
}
impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: created above, destroyed once.
        unsafe {
            sys::cuStreamSynchronize(self.0);
            sys::cuStreamDestroy_v2(self.0);
        }
    }
}

/// `x[:] = v` after spinning, queued on a raw stream handle (as another library would).
fn raw_slow_fill(dev: &gpukit_core::Device, x: &GpuArray<f32>, v: f32, stream: u64) {
    let n = x.len();
    dev.context().bind_to_thread().unwrap();
    // SAFETY: x is a live contiguous f32 array of n elements of this device that outlives the
    // work (the tests synchronise before dropping it).
    unsafe {
        slow::kernel(dev).launch_raw(
            stream as usize as sys::CUstream,
            slow::config(n),
            &[
                KernelArg::Ptr(x.device_ptr()),
                v.into(),
                (n as i64).into(),
                slow::SPIN.into(),
            ],
        )
    }
    .unwrap();
}

#[test]
fn foreign_streams_are_ordered_both_ways() {
    let Some(dev) = common::device("foreign_streams_are_ordered_both_ways") else {
        return;
    };
    let raw = RawStream::new(&dev);
    let ours: Stream = dev.compute_stream().clone();
    assert_eq!(ours.raw(), ours.cuda().cu_stream() as u64);
    let x = GpuArray::<f32>::zeros(&dev, &[1 << 20]).unwrap();
    dev.synchronize().unwrap();
    // Produced on the foreign stream, consumed on ours.
    raw_slow_fill(&dev, &x, 6.0, raw.handle());
    // SAFETY: a live stream of this device.
    unsafe { ours.wait_raw_stream(raw.handle()) }.unwrap();
    assert!(
        x.to_vec().unwrap().iter().all(|&v| v == 6.0),
        "read before the foreign write"
    );
    // Produced on ours (a stream scope other than the compute stream), consumed on the foreign.
    let s2 = dev.new_stream(0).unwrap();
    let mut y = GpuArray::<f32>::zeros(&dev, &[1 << 20]).unwrap();
    dev.synchronize().unwrap();
    slow_fill(&dev, &mut y, 7.0, &s2);
    // SAFETY: a live stream of this device.
    unsafe { y.make_ready_on_raw(raw.handle()) }.unwrap();
    let mut host = vec![0.0f32; 1 << 20];
    // SAFETY: host holds the bytes copied; the raw stream is synchronised before host is read.
    unsafe { sys::cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), y.device_ptr(), 4 << 20, raw.0) }
        .result()
        .unwrap();
    raw.sync();
    assert!(
        host.iter().all(|&v| v == 7.0),
        "the foreign stream read before our write"
    );
}

#[test]
fn the_special_stream_values_follow_dlpack() {
    let Some(dev) = common::device("the_special_stream_values_follow_dlpack") else {
        return;
    };
    let ours = dev.compute_stream().clone();
    // SAFETY: 0 is refused before any driver call.
    let e = unsafe { ours.wait_raw_stream(0) }.unwrap_err();
    assert!(e.to_string().contains("ambiguous"), "{e}");
    let x = GpuArray::<f32>::zeros(&dev, &[1 << 20]).unwrap();
    dev.synchronize().unwrap();
    for special in [1u64, 2] {
        // Produced on the legacy / per-thread default stream of this thread, consumed on ours
        // (a non-blocking stream, which the legacy stream does not synchronise with).
        raw_slow_fill(&dev, &x, special as f32, special);
        // SAFETY: the special handles name this thread's default streams.
        unsafe { ours.wait_raw_stream(special) }.unwrap();
        let got = x.to_vec().unwrap();
        assert!(
            got.iter().all(|&v| v == special as f32),
            "stream {special}: {}",
            got[0]
        );
        // SAFETY: as above.
        unsafe { x.make_ready_on_raw(special) }.unwrap();
    }
    // SAFETY: 0 is refused before any driver call.
    assert!(unsafe { x.make_ready_on_raw(0) }.is_err());
    dev.synchronize().unwrap();
}
