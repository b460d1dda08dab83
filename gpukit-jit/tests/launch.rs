//! Launch tests: they need a GPU (skipped with a printed reason elsewhere; they fail instead
//! under GPUKIT_REQUIRE_GPU=1).

mod common;

use common::{options, KERNELS};
use gpukit_jit::cudarc::driver::{CudaStream, DevicePtr};
use gpukit_jit::{args, load_source, open_context, testing, Arg, Error, KernelArg, LaunchConfig};
use std::sync::Arc;

fn ptr<T>(s: &gpukit_jit::cudarc::driver::CudaSlice<T>, stream: &Arc<CudaStream>) -> KernelArg {
    let (p, _sync) = s.device_ptr(stream);
    KernelArg::Ptr(p)
}

#[test]
fn scale_kernel_end_to_end() {
    if !testing::gpu("scale_kernel_end_to_end") {
        return;
    }
    let ctx = open_context(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let kernel = gpukit_jit::load_source(&ctx, KERNELS, "t", &options())
        .unwrap()
        .kernel("scale")
        .unwrap();
    for n in [1usize, 255, 256, 257, 1 << 20] {
        let host: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
        let mut x = stream.clone_htod(&host).unwrap();
        kernel
            .call()
            .arg("x", &mut x)
            .arg("factor", -0.5f32)
            .arg("n", n as i32)
            .launch(&stream, LaunchConfig::for_elements(n, 256))
            .unwrap();
        let back = stream.clone_dtoh(&x).unwrap();
        for (i, (b, h)) in back.iter().zip(&host).enumerate() {
            assert_eq!(*b, h * -0.5, "n={n} i={i}");
        }
    }
}

#[test]
fn templated_kernel_by_name_expression() {
    if !testing::gpu("templated_kernel_by_name_expression") {
        return;
    }
    let ctx = open_context(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let opts = options()
        .name_expression("axpy<float>")
        .name_expression("axpy<double>");
    let module = load_source(&ctx, KERNELS, "t", &opts).unwrap();
    let n = 1000;
    let xs: Vec<f64> = (0..n).map(|i| i as f64 * 0.25).collect();
    let ys: Vec<f64> = (0..n).map(|i| 1.0 - i as f64).collect();
    let x = stream.clone_htod(&xs).unwrap();
    let mut y = stream.clone_htod(&ys).unwrap();
    let k = module.kernel("axpy<double>").unwrap();
    k.launch(
        &stream,
        LaunchConfig::for_elements(n, 128),
        args![&mut y, &x, 3.0f64, n as i32],
    )
    .unwrap();
    let out = stream.clone_dtoh(&y).unwrap();
    for i in 0..n {
        assert_eq!(out[i], ys[i] + 3.0 * xs[i]);
    }
    // The float instantiation with double memory is caught before the launch (pointee type).
    let kf = module.kernel("axpy<float>").unwrap();
    let e = kf
        .launch(
            &stream,
            LaunchConfig::for_elements(n, 128),
            args![&mut y, &x, 3.0f32, n as i32],
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::ArgumentMismatch { .. }) && e.to_string().contains("f32"),
        "{e}"
    );
    // The raw path checks what it can (a double scalar for a float) and is `unsafe`.
    let (yp, _s) = y.device_ptr(&stream);
    // SAFETY: the launch is refused by the width check before anything is queued.
    let e = unsafe {
        kf.launch_unchecked(
            &stream,
            LaunchConfig::for_elements(n, 128),
            &[
                KernelArg::Ptr(yp),
                ptr(&x, &stream),
                3.0f64.into(),
                (n as i32).into(),
            ],
        )
    }
    .unwrap_err();
    assert!(e.to_string().contains("32-bit float"), "{e}");
    drop(_s);
    // Nothing ran: y still holds the first result.
    assert_eq!(stream.clone_dtoh(&y).unwrap(), out);
}

#[test]
fn wrong_arguments_are_errors_before_launch() {
    if !testing::gpu("wrong_arguments_are_errors_before_launch") {
        return;
    }
    let ctx = open_context(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let k = gpukit_jit::jit(
        &ctx,
        &KERNELS.replace("#include \"scale_factor.h\"", "#define SCALE_UNIT 1.0f"),
        "scale",
    )
    .unwrap();
    let mut x = stream.clone_htod(&[1.0f32; 16]).unwrap();
    let xd = stream.clone_htod(&[1.0f64; 16]).unwrap();
    let cfg = LaunchConfig::for_elements(16, 16);
    let needles = [
        "expects 3 argument(s)",
        "device memory",
        "f32",
        "&mut",
        "32-bit float",
        "32-bit integer",
    ];
    for (case, needle) in needles.iter().enumerate() {
        let args: Vec<Arg<'_>> = match case {
            0 => args![&mut x, 0.5f32].into(),
            1 => args![0.5f32, 0.5f32, 16i32].into(),
            2 => args![&xd, 0.5f32, 16i32].into(),
            3 => args![&x, 0.5f32, 16i32].into(),
            4 => args![&mut x, 1i32, 16i32].into(),
            _ => args![&mut x, 0.5f32, 16.0f32].into(),
        };
        let e = k.launch(&stream, cfg, args).unwrap_err().to_string();
        assert!(e.contains("scale") && e.contains(needle), "{e}");
    }
    let e = k
        .call()
        .arg("x", &mut x)
        .arg("factr", 1.0f32)
        .arg("n", 16i32)
        .launch(&stream, cfg)
        .unwrap_err();
    assert!(e.to_string().contains("no parameter `factr`"), "{e}");
    // Nothing ran: the buffer is unchanged.
    assert_eq!(stream.clone_dtoh(&x).unwrap(), vec![1.0f32; 16]);
    // A launch the driver rejects surfaces with the kernel's name.
    let bad = LaunchConfig::new((1, 1, 1), (4096, 1, 1));
    let e = k
        .launch(&stream, bad, args![&mut x, 0.5f32, 16i32])
        .unwrap_err();
    assert!(
        matches!(e, Error::Launch { ref kernel, .. } if kernel == "scale"),
        "{e}"
    );
}

#[test]
fn dynamic_shared_memory_above_48k() {
    if !testing::gpu("dynamic_shared_memory_above_48k") {
        return;
    }
    let ctx = open_context(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let k = load_source(&ctx, KERNELS, "t", &options())
        .unwrap()
        .kernel("reverse_smem")
        .unwrap();
    let n = 24 * 1024; // 96 KiB of floats
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let input = stream.clone_htod(&host).unwrap();
    let mut out = stream.alloc_zeros::<f32>(n).unwrap();
    let cfg = LaunchConfig::new((1, 1, 1), (256, 1, 1)).with_shared_mem((n * 4) as u32);
    k.launch(&stream, cfg, args![&input, &mut out, n as i32])
        .unwrap();
    let back = stream.clone_dtoh(&out).unwrap();
    assert!(back
        .iter()
        .enumerate()
        .all(|(i, v)| *v == (n - 1 - i) as f32));
}

#[test]
fn no_panic_without_a_driver() {
    // Everywhere: without a driver these are typed errors; with one they succeed.
    match open_context(0) {
        Ok(_) => assert!(gpukit_jit::libs::gpu_available()),
        Err(e) => {
            assert!(!gpukit_jit::libs::gpu_available());
            assert!(
                matches!(e, Error::LibraryMissing { .. } | Error::Driver { .. }),
                "{e}"
            );
        }
    }
    if gpukit_jit::libs::gpu_available() {
        let e = open_context(10_000).unwrap_err();
        assert!(e.to_string().contains("device"), "{e}");
    }
}
