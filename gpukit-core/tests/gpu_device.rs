//! Devices, streams, events, stream scopes and transfers on the GPU.

mod common;

use common::*;
use gpukit_core::{Device, Error, GpuArray};

#[test]
fn device_properties_and_shared_state() {
    let Some(dev) = device("device_properties_and_shared_state") else {
        return;
    };
    assert!(Device::count().unwrap() >= 1);
    assert_eq!(
        Device::open(0).unwrap(),
        dev,
        "open returns the same shared device"
    );
    assert!(!dev.name().is_empty());
    assert!(dev.compute_capability() >= (7, 0));
    assert_eq!(dev.arch().major, dev.compute_capability().0);
    assert!(dev.total_memory() > 1 << 30);
    let free = dev.free_memory().unwrap();
    assert!(free > 0 && free <= dev.total_memory());
    assert!(dev.multiprocessor_count() > 0);
    let count = Device::count().unwrap();
    match Device::open(count + 3) {
        Err(Error::InvalidDevice { ordinal, count: c }) => {
            assert_eq!((ordinal, c), (count + 3, count))
        }
        other => panic!("expected InvalidDevice, got {other:?}"),
    }
    eprintln!(
        "device 0: {} sm_{}{} {} SMs {:.1} GiB, stream priorities {:?}",
        dev.name(),
        dev.compute_capability().0,
        dev.compute_capability().1,
        dev.multiprocessor_count(),
        dev.total_memory() as f64 / (1u64 << 30) as f64,
        dev.stream_priority_range()
    );
}

#[test]
fn streams_scopes_priorities_and_events() {
    let Some(dev) = device("streams_scopes_priorities_and_events") else {
        return;
    };
    let (lowest, highest) = dev.stream_priority_range();
    assert_eq!(dev.new_stream(-1000).unwrap().priority(), highest);
    assert_eq!(dev.new_stream(1000).unwrap().priority(), lowest);
    let s = dev.new_stream(highest).unwrap();
    assert_eq!(dev.stream(), *dev.compute_stream());
    let n = 1 << 24;
    let host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let (made, timing) = dev.with_stream(&s, || {
        assert_eq!(dev.stream(), s);
        let inner = dev.new_stream(0).unwrap();
        dev.with_stream(&inner, || assert_eq!(dev.stream(), inner));
        assert_eq!(dev.stream(), s, "scopes nest and restore");
        let a = GpuArray::from_slice(&dev, &host, &[n]).unwrap();
        let e0 = s.record().unwrap();
        let mut b = a.clone();
        for _ in 0..20 {
            b = (&b + &a).eval().unwrap();
        }
        let e1 = s.record().unwrap();
        assert_eq!(
            b.buffer().stream(),
            &s,
            "results are allocated on the scope's stream"
        );
        (b, e0.elapsed_ms(&e1).unwrap())
    });
    assert_eq!(dev.stream(), *dev.compute_stream());
    assert!(timing > 0.0, "event timing {timing}");
    // Read from the compute stream while the work was queued on `s`: to_vec waits for it.
    let got = made.to_vec().unwrap();
    assert!(got.iter().zip(&host).all(|(g, h)| *g == 21.0 * h));
    // Cross-stream ordering with events.
    let s2 = dev.new_stream(0).unwrap();
    let a = GpuArray::<f32>::full(&dev, &[n], 2.0).unwrap();
    let ev = dev.compute_stream().record().unwrap();
    s2.wait(&ev).unwrap();
    let c = dev.with_stream(&s2, || a.mul_scalar(3.0).unwrap());
    assert!(c.to_vec().unwrap().iter().all(|&x| x == 6.0));
    ev.synchronize().unwrap();
    assert!(ev.is_complete().unwrap());
    dev.synchronize().unwrap();
}

#[test]
fn large_transfers_round_trip_through_the_pinned_pool() {
    let Some(dev) = device("large_transfers_round_trip_through_the_pinned_pool") else {
        return;
    };
    // Several chunks (16 MiB each) plus a tail.
    let n = (40 << 20) / 8 + 12345;
    let mut rng = Rng(9);
    let host: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    let as_i64: Vec<i64> = host.iter().map(|&x| x as i64).collect();
    let t = std::time::Instant::now();
    let g = GpuArray::from_slice(&dev, &as_i64, &[n]).unwrap();
    let back = g.to_vec().unwrap();
    let dt = t.elapsed().as_secs_f64();
    assert_eq!(back, as_i64);
    eprintln!(
        "round trip of {:.1} MB: {:.2} ms ({:.1} GB/s each way, host copies included)",
        (n * 8) as f64 / 1e6,
        dt * 1e3,
        2.0 * (n * 8) as f64 / dt / 1e9
    );
    // Into a caller-owned buffer; a wrong length is an error.
    let mut again = vec![0i64; n];
    g.copy_to_host(&mut again).unwrap();
    assert_eq!(again, as_i64);
    assert!(g.copy_to_host(&mut again[1..]).is_err());
    // Empty arrays.
    let e = GpuArray::<u8>::from_slice(&dev, &[], &[0, 4]).unwrap();
    assert!(e.to_vec().unwrap().is_empty());
}

#[test]
fn user_kernels_take_arrays_as_arguments() {
    let Some(dev) = device("user_kernels_take_arrays_as_arguments") else {
        return;
    };
    let src = r#"extern "C" __global__ void scale(float* x, float f, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= f; }"#;
    let k = dev
        .load_kernel(
            src,
            "scale_test",
            &gpukit_core::CompileOptions::new(),
            "scale",
        )
        .unwrap();
    let mut a = GpuArray::<f32>::full(&dev, &[1000], 4.0).unwrap();
    let cfg = gpukit_core::LaunchConfig::for_elements(1000, 256);
    let stream = dev.stream();
    k.launch(
        stream.cuda(),
        cfg,
        gpukit_jit::args![&mut a, 0.5f32, 1000i32],
    )
    .unwrap();
    assert!(a.to_vec().unwrap().iter().all(|&x| x == 2.0));
    // Checked before anything runs: a read-only array for `float* x`, the wrong element type,
    // a strided view.
    let e = k
        .launch(stream.cuda(), cfg, gpukit_jit::args![&a, 0.5f32, 1000i32])
        .unwrap_err()
        .to_string();
    assert!(e.contains("&mut"), "{e}");
    let mut d = GpuArray::<f64>::full(&dev, &[1000], 4.0).unwrap();
    let e = k
        .launch(
            stream.cuda(),
            cfg,
            gpukit_jit::args![&mut d, 0.5f32, 1000i32],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("f32") && e.contains("f64"), "{e}");
    let mut t = GpuArray::<f32>::full(&dev, &[10, 100], 4.0)
        .unwrap()
        .transpose();
    let e = k
        .launch(
            stream.cuda(),
            cfg,
            gpukit_jit::args![&mut t, 0.5f32, 1000i32],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("contiguous"), "{e}");
    assert!(a.to_vec().unwrap().iter().all(|&x| x == 2.0));
}

/// `set_host_wait` sets the context's scheduling bits and nothing else, and work still
/// completes and is waited for under every setting; a yielding or blocking wait leaves the
/// core to other threads (a waiting thread's CPU time stays well under the wall time of the
/// wait, where a spinning one uses nearly all of it).
#[test]
fn host_wait_sets_the_scheduling_flags_and_frees_the_core() {
    use gpukit_core::HostWait;
    let Some(dev) = device("host_wait_sets_the_scheduling_flags_and_frees_the_core") else {
        return;
    };
    let flags = || {
        dev.context().bind_to_thread().unwrap();
        let mut f = 0u32;
        // SAFETY: the context is current on this thread; the call writes one u32.
        let r = unsafe { cudarc::driver::sys::cuCtxGetFlags(&mut f) };
        assert_eq!(r, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
        f
    };
    let before = flags();
    let cpu_s = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    let mut x = GpuArray::<f32>::zeros(&dev, &[1 << 20]).unwrap();
    for (w, bits) in [
        (HostWait::Spin, 1u32),
        (HostWait::Yield, 2),
        (HostWait::Block, 4),
        (HostWait::Auto, 0),
    ] {
        dev.set_host_wait(w).unwrap();
        let f = flags();
        assert_eq!(f & 7, bits, "{w:?}: flags {f:#x}");
        assert_eq!(
            f & !7,
            before & !7,
            "{w:?} changed other flags: {f:#x} vs {before:#x}"
        );
        // about 0.3 s of GPU work, then a host wait for it
        common::slow::slow_fill_for(&dev, &mut x, 1.0, &dev.stream(), 3 * common::slow::SPIN);
        let (t, c) = (std::time::Instant::now(), cpu_s());
        dev.synchronize().unwrap();
        let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu_s() - c);
        assert_eq!(x.to_vec().unwrap()[12345], 1.0, "{w:?}");
        println!("{w:?}: waited {wall:.3} s, {cpu:.3} s of this thread's CPU time");
        if w == HostWait::Block {
            assert!(
                cpu < 0.5 * wall,
                "a blocking wait used {cpu:.3} s of CPU in {wall:.3} s"
            );
        }
    }
    dev.set_host_wait(HostWait::Auto).unwrap();
}
