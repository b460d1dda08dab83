//! Validates the green-context layer on a real GPU and prints what it saw: the split, the SMs
//! each green context's kernels touched (%smid), launches with the primary vs the green context
//! current, core allocations/ops/events on green streams, isolation, and cuBLAS confinement.
//!
//! `cargo run -p gpukit-sched --release --example green_probe`

use gpukit_core::handles::BlasHandle;
use gpukit_core::{Device, GpuArray, Stream};
use gpukit_jit::{KernelArg, LaunchConfig};
use gpukit_sched::green::{probe, GreenContext, GreenStream, SmSplit};
use gpukit_sched::kernels::TestKernels;
use gpukit_sched::GroupSet;
use std::collections::BTreeSet;
use std::time::Instant;

type R<T> = Result<T, Box<dyn std::error::Error>>;

fn smids(
    dev: &Device,
    k: &TestKernels,
    gs: &GreenStream,
    bind_green: bool,
    blocks: u32,
) -> R<BTreeSet<u32>> {
    let s = Stream::from_cuda(gs.cuda().clone());
    dev.with_stream(&s, || -> R<BTreeSet<u32>> {
        let out = GpuArray::<u32>::full(dev, &[blocks as usize], u32::MAX)?;
        if bind_green {
            gpukit_sched::green::GreenContext::make_current_raw(gs.cu_ctx())?;
        } else {
            dev.context().bind_to_thread()?;
        }
        // SAFETY: `out` holds `blocks` u32; the stream is live.
        unsafe {
            k.record_smid.launch_raw(
                gs.raw(),
                LaunchConfig::new((blocks, 1, 1), (128, 1, 1)),
                &[
                    out.as_kernel_arg(),
                    KernelArg::I32(blocks as i32),
                    KernelArg::I64(20_000),
                ],
            )?
        };
        let v = out.to_vec()?;
        if v.contains(&u32::MAX) {
            return Err("a block did not write its smid".into());
        }
        Ok(v.into_iter().collect())
    })
}

fn median(mut v: Vec<f32>) -> f32 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() -> R<()> {
    let dev = Device::open(0)?;
    let entry = gpukit_sched::entry::EntryPoints::probe(&gpukit_sched::entry::LoadedDriver)?;
    println!("entry points: {entry:?}");
    let sup = probe(&dev, &entry);
    println!("probe: {sup:?}");
    let k = TestKernels::load(&dev)?;
    let t = Instant::now();
    let split = SmSplit::new(&dev, None, &entry)?;
    println!(
        "split: {:?} in {:.2} ms",
        split.layout(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let l = split.layout();
    let mk = |g: GroupSet, rem: bool| -> R<(GreenContext, GreenStream, f64)> {
        let t = Instant::now();
        let c = split.create(g, rem)?;
        let s = c.create_stream(0)?;
        Ok((c, s, t.elapsed().as_secs_f64() * 1e3))
    };
    let a = mk(GroupSet::first(4), false)?;
    let b = mk(GroupSet::first(l.groups).minus(GroupSet::first(4)), false)?;
    let f = if split.has_remainder() {
        Some(mk(GroupSet::EMPTY, true)?)
    } else {
        None
    };
    let one = mk(GroupSet(1 << (l.groups - 1)), false)?;
    println!(
        "contexts: A {} SMs ({:.2} ms), B {} SMs ({:.2} ms), one-group {} SMs, floor {:?} SMs",
        a.0.sms(),
        a.2,
        b.0.sms(),
        b.2,
        one.0.sms(),
        f.as_ref().map(|x| x.0.sms())
    );
    for (name, ctx, bind) in [
        ("A/primary-current", &a, false),
        ("A/green-current", &a, true),
        ("B/primary-current", &b, false),
        ("one/primary-current", &one, false),
    ] {
        match smids(&dev, &k, &ctx.1, bind, 4096) {
            Ok(s) => println!(
                "smid {name}: {} distinct SMs (context has {}) -> {}",
                s.len(),
                ctx.0.sms(),
                if s.len() as u32 == ctx.0.sms() {
                    "PASS"
                } else {
                    "FAIL"
                }
            ),
            Err(e) => println!("smid {name}: ERROR {e}"),
        }
    }
    if let (Ok(sa), Ok(sb)) = (
        smids(&dev, &k, &a.1, false, 4096),
        smids(&dev, &k, &b.1, false, 4096),
    ) {
        println!(
            "A and B disjoint: {}",
            if sa.is_disjoint(&sb) { "PASS" } else { "FAIL" }
        );
    }
    if let Some(fl) = &f {
        match smids(&dev, &k, &fl.1, false, 1024) {
            Ok(s) => println!("smid floor: {} distinct SMs {:?}", s.len(), s),
            Err(e) => println!("smid floor: ERROR {e}"),
        }
    }
    // Core events (primary-context events) on a green stream.
    let cs = Stream::from_cuda(a.1.cuda().clone());
    let r: R<f32> = (|| {
        let e0 = cs.record()?;
        dev.context().bind_to_thread()?;
        // SAFETY: no pointer args.
        unsafe {
            k.spin_cycles.launch_raw(
                a.1.raw(),
                LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                &[KernelArg::Ptr(0), KernelArg::I64(2_000_000)],
            )?
        };
        let e1 = cs.record()?;
        e1.synchronize()?;
        Ok(e0.elapsed_ms(&e1)?)
    })();
    println!("core event on green stream: {r:?} ms for a 2M-cycle spin");
    // Core elementwise op on the green stream.
    let r: R<f32> = dev.with_stream(&cs, || {
        let x = GpuArray::<f32>::full(&dev, &[1 << 20], 2.0)?;
        let y = x.add(&x)?;
        Ok(y.to_vec()?[12345])
    });
    println!("core op on green stream: {r:?} (expect Ok(4.0))");
    // Isolation: hog on B (or primary), probe on A (or primary high priority).
    let (least, greatest) = dev.stream_priority_range();
    let hog_s = dev.new_stream(least)?;
    let hi_s = dev.new_stream(greatest)?;
    let probe_once = |raw: cudarc::driver::sys::CUstream, s: &Stream| -> R<f32> {
        let e0 = s.record()?;
        dev.context().bind_to_thread()?;
        // SAFETY: no pointer args.
        unsafe {
            k.spin_cycles.launch_raw(
                raw,
                LaunchConfig::new((1, 1, 1), (32, 1, 1)),
                &[KernelArg::Ptr(0), KernelArg::I64(10_000)],
            )?
        };
        let e1 = s.record()?;
        e1.synchronize()?;
        Ok(e0.elapsed_ms(&e1)?)
    };
    let hog = |raw: cudarc::driver::sys::CUstream| -> R<()> {
        dev.context().bind_to_thread()?;
        for _ in 0..40 {
            // SAFETY: no pointer args.
            unsafe {
                k.spin_cycles.launch_raw(
                    raw,
                    LaunchConfig::new((132 * 16, 1, 1), (256, 1, 1)),
                    &[KernelArg::Ptr(0), KernelArg::I64(1_000_000)],
                )?
            };
        }
        Ok(())
    };
    let alone: Vec<f32> = (0..20)
        .map(|_| probe_once(hi_s.cuda().cu_stream(), &hi_s))
        .collect::<R<_>>()?;
    hog(hog_s.cuda().cu_stream())?;
    std::thread::sleep(std::time::Duration::from_millis(2));
    let shared: Vec<f32> = (0..20)
        .map(|_| probe_once(hi_s.cuda().cu_stream(), &hi_s))
        .collect::<R<_>>()?;
    hog_s.synchronize()?;
    hog(b.1.raw())?;
    std::thread::sleep(std::time::Duration::from_millis(2));
    let green: Vec<f32> = (0..20)
        .map(|_| probe_once(a.1.raw(), &cs))
        .collect::<R<_>>()?;
    b.1.synchronize()?;
    println!(
        "isolation probe ms: alone {:.4}, shared(hi-prio) {:.4}, green(hog on B) {:.4}",
        median(alone),
        median(shared),
        median(green)
    );
    // cuBLAS confinement: sgemm 4096 on a one-group green stream vs on the primary stream.
    let r: R<(f32, f32)> = (|| {
        let n = 4096usize;
        let x = GpuArray::<f32>::full(&dev, &[n * n], 1.0)?;
        let y = GpuArray::<f32>::zeros(&dev, &[n * n])?;
        dev.synchronize()?;
        let sgemm = |h: &BlasHandle| -> R<()> {
            let (alpha, beta) = (1.0f32, 0.0f32);
            let nn = n as i32;
            h.with(|raw| {
                // SAFETY: x and y hold n*n floats and live until the synchronize below; the
                // scalars are read during the call.
                unsafe {
                    cudarc::cublas::result::sgemm(
                        raw,
                        cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                        cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                        nn,
                        nn,
                        nn,
                        &alpha,
                        x.device_ptr() as *const f32,
                        nn,
                        x.device_ptr() as *const f32,
                        nn,
                        &beta,
                        y.device_ptr() as *mut f32,
                        nn,
                    )
                }
            })??;
            Ok(())
        };
        let time = |ctx: cudarc::driver::sys::CUcontext, s: &Stream| -> R<f32> {
            gpukit_sched::green::GreenContext::make_current_raw(ctx)?;
            let h = BlasHandle::create(s)?;
            sgemm(&h)?;
            let e0 = s.record()?;
            for _ in 0..3 {
                sgemm(&h)?;
            }
            let e1 = s.record()?;
            e1.synchronize()?;
            Ok(e0.elapsed_ms(&e1)? / 3.0)
        };
        let full_s = dev.new_stream(0)?;
        let full = time(dev.context().cu_ctx(), &full_s)?;
        let ones = Stream::from_cuda(one.1.cuda().clone());
        let g = time(one.1.cu_ctx(), &ones)?;
        Ok((full, g))
    })();
    match r {
        Ok((full, g)) => println!("cublas sgemm 4096: full GPU {full:.3} ms, one-group green {g:.3} ms, ratio {:.1} (confined if ~{:.0})", g / full, l.groups as f32),
        Err(e) => println!("cublas: ERROR {e}"),
    }
    println!("probe done");
    Ok(())
}
