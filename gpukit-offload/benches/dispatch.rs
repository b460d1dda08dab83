#![allow(missing_docs)] // criterion_group! generates an undocumented public function
//! The shim's cost on a call that stays on the CPU: a `dgemm_` through the same entry point the
//! exported wrapper uses (fast path: dimension reads, one threshold load and compare, one relaxed
//! counter increment, the indirect call) against the bare indirect call of the same function.
//! Both sides call a trivial stand-in for the real `dgemm_`, so the difference is the overhead.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use gpukit_offload::ffi::args::Gemm;
use gpukit_offload::interpose::{fortran, RealFn};
use gpukit_offload::Precision;
use std::ffi::{c_char, c_void};

type P = *const c_void;
type FGemm = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const i32,
    P,
    P,
    *const i32,
    P,
    *const i32,
    P,
    *mut c_void,
    *const i32,
    usize,
    usize,
);

#[inline(never)]
/// A stand-in for the real `dgemm_`.
unsafe extern "C" fn fake_dgemm(
    _: *const c_char,
    _: *const c_char,
    m: *const i32,
    _: *const i32,
    _: *const i32,
    _: P,
    _: P,
    _: *const i32,
    _: P,
    _: *const i32,
    _: P,
    c: *mut c_void,
    _: *const i32,
    _: usize,
    _: usize,
) {
    // SAFETY: the bench passes valid pointers.
    unsafe { *(c as *mut f64) += *m as f64 };
}

static REAL: RealFn = RealFn::new("fake_dgemm\0", "dgemm_\0");

/// One group: the bare indirect call of `fake_dgemm` (baseline) and the same `n x n x n` call
/// through the shim entry, named `shim_name`.
fn bench_pair(c: &mut Criterion, group: &str, shim_name: &str, n: i32) {
    let (ta, tb) = (b'N' as c_char, b'N' as c_char);
    let a = vec![1.0f64; (n * n) as usize];
    let mut cc = vec![0.0f64; (n * n) as usize];
    let alpha = 1.0f64;
    let direct: FGemm = black_box(fake_dgemm as FGemm);
    let mut g = c.benchmark_group(group);
    g.bench_function("bare indirect call (baseline)", |b| {
        b.iter(|| {
            // SAFETY: valid pointers to locals of the right size.
            unsafe {
                direct(
                    &ta,
                    &tb,
                    &n,
                    &n,
                    &n,
                    &alpha as *const f64 as P,
                    a.as_ptr() as P,
                    &n,
                    a.as_ptr() as P,
                    &n,
                    &alpha as *const f64 as P,
                    cc.as_mut_ptr() as *mut c_void,
                    &n,
                    1,
                    1,
                )
            }
        })
    });
    g.bench_function(shim_name, |b| {
        b.iter(|| {
            // SAFETY: as above; REAL points to fake_dgemm.
            unsafe {
                fortran::<Gemm, i32>(
                    black_box(&REAL),
                    Precision::D,
                    Gemm {
                        transa: &ta as *const c_char as *mut c_void,
                        transb: &tb as *const c_char as *mut c_void,
                        m: &n as *const i32 as *mut c_void,
                        n: &n as *const i32 as *mut c_void,
                        k: &n as *const i32 as *mut c_void,
                        alpha: &alpha as *const f64 as *mut c_void,
                        a: a.as_ptr() as *mut c_void,
                        lda: &n as *const i32 as *mut c_void,
                        b: a.as_ptr() as *mut c_void,
                        ldb: &n as *const i32 as *mut c_void,
                        beta: &alpha as *const f64 as *mut c_void,
                        c: cc.as_mut_ptr() as *mut c_void,
                        ldc: &n as *const i32 as *mut c_void,
                        h1: 1,
                        h2: 1,
                    },
                )
            }
        })
    });
    g.finish();
    black_box(cc);
}

fn bench(c: &mut Criterion) {
    REAL.set(fake_dgemm as *mut c_void);
    // make sure the dispatcher exists before timing (the shim creates it at load)
    let d = gpukit_offload::Dispatcher::global();
    let t = d.threshold(gpukit_offload::Routine::Gemm, Precision::D);
    eprintln!("fast-path threshold for dgemm (m*n*k): {t}");
    bench_pair(
        c,
        "dgemm 8x8 that stays on the CPU",
        "through the shim entry (fast path)",
        8,
    );

    // A call above the fast-path threshold that the model keeps on the CPU: the full decision
    // (model estimate with learned corrections, decision, timing, learning, statistics). The
    // shim pays this on the small-but-not-tiny calls of a many-small-matrices workload.
    // Without a usable GPU every call is fast-path (threshold u64::MAX): then time a 64^3 call
    // (run with GPUKIT_OFFLOAD_GPU=off to send it through the model on such a machine).
    let nb = if t == u64::MAX {
        64
    } else {
        ((t as f64).cbrt().ceil() as i32 + 1).clamp(9, 1024)
    };
    eprintln!("model-path dgemm: {nb}x{nb}x{nb}");
    bench_pair(
        c,
        &format!("dgemm {nb}^3 kept on the CPU by the model"),
        "through the shim entry (model path)",
        nb,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
