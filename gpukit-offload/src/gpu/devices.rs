//! Several visible GPUs (issue 24, item 6 of issue 22's follow-up): one backend (and so its own
//! lanes) per GPU, whole calls placed on the GPU with the least compute queued by this process,
//! and a very large product split by columns of B and C across GPUs where
//! [`crate::dispatch::placement::split_product`] says that finishes sooner.
//!
//! With one GPU every call goes to it whole, through the same [`Runner::run_call`] as before
//! (no gate, no thread): one GPU behaves exactly as without this module.
//!
//! A split product keeps the caller's buffers written only after success: each part runs on
//! its own GPU and thread up to its commit, where it waits at a [`Gate`] for every other part;
//! the parts write their columns of C only when all of them got there without a failure, else
//! none does and the CPU runs the whole call on the untouched operands. A part whose copy-out
//! fails after another part wrote its columns makes the call [`GpuFailKind::Lost`].

use crate::call::{Call, HostMat, Op};
use crate::dispatch::placement::{place, split_product, ProductCost};
use crate::gpu::fail::{fail, GResult, GpuFailKind};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The rendezvous of the parts of one split call at their commits.
#[derive(Debug)]
pub struct Gate {
    parts: usize,
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl Gate {
    /// A gate for `parts` parts.
    pub fn new(parts: usize) -> Arc<Gate> {
        Arc::new(Gate {
            parts,
            state: Mutex::new((0, true)),
            cv: Condvar::new(),
        })
    }

    /// One part arrives (`ok`: it may commit); waits for the others; true when every part
    /// arrived ok.
    fn arrive(&self, ok: bool) -> bool {
        let mut s = self.state.lock();
        s.0 += 1;
        s.1 &= ok;
        if s.0 >= self.parts {
            self.cv.notify_all();
        } else {
            while s.0 < self.parts {
                self.cv.wait(&mut s);
            }
        }
        s.1
    }
}

/// One part's place at a [`Gate`]: arrives exactly once, `false` if dropped before
/// [`Arrival::commit`] (an error or a panic before the commit releases the other parts).
#[derive(Debug)]
pub struct Arrival(Option<Arc<Gate>>);

impl Arrival {
    /// A part's arrival at `gate`.
    pub fn at(gate: &Arc<Gate>) -> Arrival {
        Arrival(Some(gate.clone()))
    }

    /// Arrives ready to commit: true when every part may commit.
    pub fn commit(mut self) -> bool {
        self.0.take().is_some_and(|g| g.arrive(true))
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        if let Some(g) = self.0.take() {
            g.arrive(false);
        }
    }
}

/// What runs one call on one GPU: the backend, or a stand-in in tests.
pub trait Runner: Send + Sync {
    /// Runs `call`; a part of a split call carries its `arrival` and commits only when
    /// [`Arrival::commit`] says every part may.
    ///
    /// # Safety
    /// As [`crate::gpu::GpuBackend::run`].
    unsafe fn run_call(&self, call: &Call, arrival: Option<Arrival>) -> GResult<()>;
}

impl Runner for crate::gpu::GpuBackend {
    unsafe fn run_call(&self, call: &Call, arrival: Option<Arrival>) -> GResult<()> {
        // SAFETY: forwarded.
        unsafe { self.run_gated(call, arrival) }
    }
}

/// A call handed to the scoped thread that runs it.
struct Sent(Call);

// SAFETY: a call's pointers are the caller's operands, valid for the whole of the function
// that spawns the (scoped) threads; the parts of a split call only read A and B and write
// disjoint columns of C.
unsafe impl Send for Sent {}
// SAFETY: as above; shared references only read the call.
unsafe impl Sync for Sent {}

impl Sent {
    /// Method access, so closures capture the whole (Send) wrapper.
    fn call(&self) -> &Call {
        &self.0
    }
}

/// The GPUs of a process: one runner per visible GPU (ordinal order) and the compute this
/// process has queued on each.
pub struct Devices<R> {
    runners: Vec<Arc<R>>,
    queued_ns: Vec<AtomicU64>,
}

/// A call's compute in flight on one GPU (taken back when dropped).
struct Queued<'a> {
    slot: &'a AtomicU64,
    ns: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.slot.fetch_sub(self.ns, Ordering::Relaxed);
    }
}

impl<R: Runner> Devices<R> {
    /// The set of `runners` (at least one).
    pub fn new(runners: Vec<Arc<R>>) -> Devices<R> {
        let queued_ns = runners.iter().map(|_| AtomicU64::new(0)).collect();
        Devices { runners, queued_ns }
    }

    /// How many GPUs.
    pub fn len(&self) -> usize {
        self.runners.len()
    }

    /// True for an empty set.
    pub fn is_empty(&self) -> bool {
        self.runners.is_empty()
    }

    /// The runner of GPU `i`.
    pub fn runner(&self, i: usize) -> &Arc<R> {
        &self.runners[i]
    }

    /// Seconds of compute this process has queued on each GPU.
    pub fn queued_s(&self) -> Vec<f64> {
        self.queued_ns
            .iter()
            .map(|q| q.load(Ordering::Relaxed) as f64 / 1e9)
            .collect()
    }

    fn enqueue(&self, i: usize, seconds: f64) -> Queued<'_> {
        let ns = (seconds.max(0.0) * 1e9) as u64;
        self.queued_ns[i].fetch_add(ns, Ordering::Relaxed);
        Queued {
            slot: &self.queued_ns[i],
            ns,
        }
    }

    /// Runs `call` whole on the least queued GPU (`compute_s`: its predicted compute); returns
    /// the GPU used.
    ///
    /// # Safety
    /// As [`crate::gpu::GpuBackend::run`].
    pub unsafe fn run(&self, call: &Call, compute_s: f64) -> (usize, GResult<()>) {
        let g = if self.runners.len() == 1 {
            0
        } else {
            place(&self.queued_s()).unwrap_or(0)
        };
        let _q = self.enqueue(g, compute_s);
        // SAFETY: forwarded.
        (g, unsafe { self.runners[g].run_call(call, None) })
    }

    /// Runs a product (a gemm) whole or split by columns of B and C across GPUs as
    /// [`split_product`] decides for `cost` and the present queues; returns the parts
    /// `(gpu, columns)` it ran.
    ///
    /// # Safety
    /// As [`crate::gpu::GpuBackend::run`].
    pub unsafe fn run_product(
        &self,
        call: &Call,
        cost: ProductCost,
    ) -> (Vec<(usize, usize, usize)>, GResult<()>) {
        let plan = if self.runners.len() == 1 {
            vec![(0, 1.0)]
        } else {
            split_product(cost, &self.queued_s())
        };
        let parts = column_parts(call, &plan);
        if parts.len() <= 1 {
            let g = plan.first().map_or(0, |p| p.0);
            let _q = self.enqueue(g, cost.compute_s);
            let n = gemm_cols(call).unwrap_or(0);
            // SAFETY: forwarded.
            let r = unsafe { self.runners[g].run_call(call, None) };
            return (vec![(g, 0, n)], r);
        }
        let gate = Gate::new(parts.len());
        let total = gemm_cols(call).unwrap_or(1).max(1) as f64;
        let results: Vec<GResult<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .iter()
                .map(|&(g, j0, j1, ref part)| {
                    let arrival = Arrival::at(&gate);
                    let runner = &self.runners[g];
                    let q = self.enqueue(g, cost.compute_s * (j1 - j0) as f64 / total);
                    let part = Sent(*part);
                    s.spawn(move || {
                        let _q = q;
                        // SAFETY: the part is the caller's call on a column range of B and C
                        // (inside their extents); the caller's contract covers it.
                        unsafe { runner.run_call(part.call(), Some(arrival)) }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(fail(
                            GpuFailKind::Error,
                            "a part of a split product panicked",
                        ))
                    })
                })
                .collect()
        });
        let done: Vec<(usize, usize, usize)> = parts.iter().map(|p| (p.0, p.1, p.2)).collect();
        (done, combine(results))
    }
}

/// The outcome of a split call from its parts': every part ok, or every part failed before
/// writing (the first failure: the CPU may run the call), or some wrote and some failed
/// ([`GpuFailKind::Lost`]).
pub(crate) fn combine(results: Vec<GResult<()>>) -> GResult<()> {
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let lost = results
        .iter()
        .any(|r| matches!(r, Err(e) if e.kind == GpuFailKind::Lost));
    match results.into_iter().find_map(Result::err) {
        None => Ok(()),
        Some(e) if ok == 0 && !lost => Err(e),
        Some(e) => Err(fail(
            GpuFailKind::Lost,
            format!("a part of a split product failed after another wrote its columns ({e})"),
        )),
    }
}

/// The columns of C of a gemm call.
fn gemm_cols(call: &Call) -> Option<usize> {
    match call.op {
        Op::Gemm { n, .. } => Some(n),
        _ => None,
    }
}

/// Columns `j0..j1` of a host matrix of `es`-byte elements.
fn cols(m: HostMat, j0: usize, j1: usize, es: usize) -> HostMat {
    HostMat {
        // SAFETY: column j0 lies inside the matrix (j0 < cols) or the view is empty; only the
        // address is computed.
        ptr: unsafe { m.ptr.add(j0 * m.ld * es) },
        cols: j1 - j0,
        ..m
    }
}

/// Rows `i0..i1` of a host matrix of `es`-byte elements.
fn rows(m: HostMat, i0: usize, i1: usize, es: usize) -> HostMat {
    HostMat {
        // SAFETY: row i0 lies inside the matrix (i0 < rows); only the address is computed.
        ptr: unsafe { m.ptr.add(i0 * es) },
        rows: i1 - i0,
        ..m
    }
}

/// The parts `(gpu, j0, j1, call)` of a gemm split by `plan` (`(gpu, share)`): each the same
/// product on columns `j0..j1` of op(B) and C. Empty shares are left out; anything but a gemm
/// (or a one-part plan) is one part, the call itself.
pub(crate) fn column_parts(call: &Call, plan: &[(usize, f64)]) -> Vec<(usize, usize, usize, Call)> {
    let Op::Gemm {
        ta,
        tb,
        m,
        n,
        k,
        alpha,
        a,
        b,
        beta,
        c,
    } = call.op
    else {
        return vec![(plan.first().map_or(0, |p| p.0), 0, 0, *call)];
    };
    if plan.len() <= 1 || n == 0 {
        return vec![(plan.first().map_or(0, |p| p.0), 0, n, *call)];
    }
    let es = call.prec.size();
    let mut out = Vec::new();
    let mut j0 = 0usize;
    let mut acc = 0.0;
    for (idx, &(g, share)) in plan.iter().enumerate() {
        acc += share;
        let j1 = if idx + 1 == plan.len() {
            n
        } else {
            ((acc * n as f64).round() as usize).clamp(j0, n)
        };
        if j1 > j0 {
            // op(B)'s columns j0..j1: B's columns when not transposed, else its rows
            let bp = if tb == crate::ops::Trans::No {
                cols(b, j0, j1, es)
            } else {
                rows(b, j0, j1, es)
            };
            out.push((
                g,
                j0,
                j1,
                Call {
                    prec: call.prec,
                    op: Op::Gemm {
                        ta,
                        tb,
                        m,
                        n: j1 - j0,
                        k,
                        alpha,
                        a,
                        b: bp,
                        beta,
                        c: cols(c, j0, j1, es),
                    },
                },
            ));
        }
        j0 = j1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Scalar;
    use crate::ops::{Precision, Trans};
    use std::sync::atomic::AtomicUsize;

    /// A stand-in GPU: runs a gemm on the host (f64), writes C only when its arrival commits,
    /// and can fail before or after committing.
    struct FakeGpu {
        id: usize,
        calls: AtomicUsize,
        fail_before: bool,
        fail_after: bool,
        hold: Option<Arc<std::sync::Barrier>>,
    }

    impl FakeGpu {
        fn new(id: usize) -> FakeGpu {
            FakeGpu {
                id,
                calls: AtomicUsize::new(0),
                fail_before: false,
                fail_after: false,
                hold: None,
            }
        }
    }

    impl Runner for FakeGpu {
        unsafe fn run_call(&self, call: &Call, arrival: Option<Arrival>) -> GResult<()> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            if let Some(b) = &self.hold {
                b.wait();
            }
            let Op::Gemm {
                tb,
                m,
                n,
                k,
                a,
                b,
                c,
                ..
            } = call.op
            else {
                return Ok(());
            };
            // C = A op(B) (alpha 1, beta 0), computed before the commit
            let at = |x: &HostMat, i: usize, j: usize| -> f64 {
                // SAFETY: test matrices of f64 inside their extents.
                unsafe { *(x.ptr as *const f64).add(i + j * x.ld) }
            };
            let mut out = vec![0.0; m * n];
            for j in 0..n {
                for i in 0..m {
                    out[i + j * m] = (0..k)
                        .map(|l| {
                            let bv = if tb == Trans::No {
                                at(&b, l, j)
                            } else {
                                at(&b, j, l)
                            };
                            at(&a, i, l) * bv
                        })
                        .sum();
                }
            }
            if self.fail_before {
                return Err(fail(GpuFailKind::Error, format!("gpu {} failed", self.id)));
            }
            if let Some(arr) = arrival {
                if !arr.commit() {
                    return Err(fail(GpuFailKind::Error, "another part failed"));
                }
            }
            for j in 0..n {
                for i in 0..m {
                    // SAFETY: C's extent.
                    unsafe { *(c.ptr as *mut f64).add(i + j * c.ld) = out[i + j * m] };
                }
            }
            if self.fail_after {
                return Err(fail(GpuFailKind::Lost, "copy out failed"));
            }
            Ok(())
        }
    }

    fn gemm(
        a: &mut [f64],
        b: &mut [f64],
        c: &mut [f64],
        m: usize,
        n: usize,
        k: usize,
        tb: Trans,
    ) -> Call {
        let (br, bc) = if tb == Trans::No { (k, n) } else { (n, k) };
        Call {
            prec: Precision::D,
            op: Op::Gemm {
                ta: Trans::No,
                tb,
                m,
                n,
                k,
                alpha: Scalar::of(1.0f64),
                a: HostMat::new(a.as_mut_ptr() as *mut u8, m, k, m),
                b: HostMat::new(b.as_mut_ptr() as *mut u8, br, bc, br),
                beta: Scalar::of(0.0f64),
                c: HostMat::new(c.as_mut_ptr() as *mut u8, m, n, m),
            },
        }
    }

    fn reference(a: &[f64], b: &[f64], m: usize, n: usize, k: usize, tb: Trans) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for j in 0..n {
            for i in 0..m {
                out[i + j * m] = (0..k)
                    .map(|l| {
                        a[i + l * m]
                            * if tb == Trans::No {
                                b[l + j * k]
                            } else {
                                b[j + l * n]
                            }
                    })
                    .sum();
            }
        }
        out
    }

    const BIG: ProductCost = ProductCost {
        a_copy_s: 0.01,
        bc_copy_s: 0.02,
        compute_s: 1.0,
    };

    /// One GPU: every call whole on it, without a gate, exactly as the backend alone.
    #[test]
    fn one_gpu_runs_everything_whole() {
        let d = Devices::new(vec![Arc::new(FakeGpu::new(0))]);
        let (m, n, k) = (5, 9, 4);
        let (mut a, mut b) = (vec![1.5; m * k], vec![0.5; k * n]);
        let mut c = vec![0.0; m * n];
        let call = gemm(&mut a, &mut b, &mut c, m, n, k, Trans::No);
        // SAFETY: the call's buffers live in this test.
        let (parts, r) = unsafe { d.run_product(&call, BIG) };
        assert!(r.is_ok());
        assert_eq!(parts, vec![(0, 0, n)]);
        // SAFETY: as above.
        let (g, r) = unsafe { d.run(&call, 1.0) };
        assert_eq!((g, r.is_ok()), (0, true));
        assert_eq!(d.runner(0).calls.load(Ordering::Relaxed), 2);
        assert_eq!(c, reference(&a, &b, m, n, k, Trans::No));
        assert_eq!(d.queued_s(), vec![0.0]);
    }

    /// Concurrent calls in flight spread over the GPUs by queue: four calls held inside their
    /// GPUs at once on two GPUs run two on each.
    #[test]
    fn concurrent_calls_spread_by_queue() {
        let hold = Arc::new(std::sync::Barrier::new(4));
        let mk = |id| {
            Arc::new(FakeGpu {
                hold: Some(hold.clone()),
                ..FakeGpu::new(id)
            })
        };
        let d = Devices::new(vec![mk(0), mk(1)]);
        let call = Call {
            prec: Precision::D,
            op: Op::Potrf {
                uplo: crate::ops::Uplo::Lower,
                n: 0,
                a: HostMat::new(std::ptr::null_mut(), 0, 0, 1),
            },
        };
        let call = Sent(call);
        let used: Vec<usize> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let (d, call) = (&d, &call);
                    // started one after another, so each sees the queues of those before
                    std::thread::sleep(std::time::Duration::from_millis(20 * (i > 0) as u64));
                    // SAFETY: a stand-in GPU reads nothing of a potrf call.
                    s.spawn(move || unsafe { d.run(call.call(), 1.0) }.0)
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(used.iter().filter(|&&g| g == 0).count(), 2, "{used:?}");
        assert_eq!(d.queued_s(), vec![0.0, 0.0]);
    }

    /// A large product splits over idle GPUs by columns (and by rows of a transposed B): the
    /// parts tile C's columns, each GPU computes its part, and C is the whole product.
    #[test]
    fn a_split_product_tiles_c_and_equals_the_whole() {
        for tb in [Trans::No, Trans::Trans] {
            for gpus in [2usize, 3, 4] {
                let d = Devices::new((0..gpus).map(|i| Arc::new(FakeGpu::new(i))).collect());
                let (m, n, k) = (7, 23, 5);
                let mut a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
                let mut b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
                let mut c = vec![f64::NAN; m * n];
                let call = gemm(&mut a, &mut b, &mut c, m, n, k, tb);
                // SAFETY: the call's buffers live in this test.
                let (parts, r) = unsafe { d.run_product(&call, BIG) };
                assert!(r.is_ok(), "{r:?}");
                assert_eq!(parts.len(), gpus, "{parts:?}");
                assert_eq!(parts.first().map(|p| p.1), Some(0));
                assert_eq!(parts.last().map(|p| p.2), Some(n));
                assert!(parts.windows(2).all(|w| w[0].2 == w[1].1));
                for g in 0..gpus {
                    assert_eq!(d.runner(g).calls.load(Ordering::Relaxed), 1);
                }
                let want = reference(&a, &b, m, n, k, tb);
                assert!(
                    c.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-12),
                    "{tb:?} {gpus}"
                );
            }
        }
    }

    /// A part that fails before its commit: no part writes C, the failure is the part's own
    /// (the CPU may run the whole call); a part that fails after others wrote: Lost.
    #[test]
    fn a_failed_part_leaves_c_untouched_or_reports_lost() {
        let (m, n, k) = (4, 12, 3);
        let mut a = vec![1.0; m * k];
        let mut b = vec![2.0; k * n];
        let mut c = vec![-7.0; m * n];
        let call = gemm(&mut a, &mut b, &mut c, m, n, k, Trans::No);
        let d = Devices::new(vec![
            Arc::new(FakeGpu::new(0)),
            Arc::new(FakeGpu {
                fail_before: true,
                ..FakeGpu::new(1)
            }),
        ]);
        // SAFETY: the call's buffers live in this test.
        let (parts, r) = unsafe { d.run_product(&call, BIG) };
        assert_eq!(parts.len(), 2);
        let e = r.unwrap_err();
        assert_eq!(e.kind, GpuFailKind::Error, "{e}");
        assert!(
            c.iter().all(|&v| v == -7.0),
            "C written after a failed part"
        );
        let d = Devices::new(vec![
            Arc::new(FakeGpu::new(0)),
            Arc::new(FakeGpu {
                fail_after: true,
                ..FakeGpu::new(1)
            }),
        ]);
        // SAFETY: as above.
        let (_, r) = unsafe { d.run_product(&call, BIG) };
        assert_eq!(r.unwrap_err().kind, GpuFailKind::Lost);
    }

    #[test]
    fn outcomes_combine_as_the_callers_buffers_allow() {
        let e = || Err(fail(GpuFailKind::OutOfMemory, "x"));
        assert!(combine(vec![Ok(()), Ok(())]).is_ok());
        assert_eq!(
            combine(vec![e(), e()]).unwrap_err().kind,
            GpuFailKind::OutOfMemory
        );
        assert_eq!(
            combine(vec![Ok(()), e()]).unwrap_err().kind,
            GpuFailKind::Lost
        );
        let lost = || Err(fail(GpuFailKind::Lost, "y"));
        assert_eq!(
            combine(vec![lost(), e()]).unwrap_err().kind,
            GpuFailKind::Lost
        );
    }

    /// Dropped arrivals release the other parts with "do not commit".
    #[test]
    fn a_dropped_arrival_releases_the_others() {
        let g = Gate::new(3);
        let a1 = Arrival::at(&g);
        let a2 = Arrival::at(&g);
        let a3 = Arrival::at(&g);
        let t = std::thread::spawn(move || a1.commit());
        let t2 = std::thread::spawn(move || a2.commit());
        drop(a3);
        assert!(!t.join().unwrap());
        assert!(!t2.join().unwrap());
        let g = Gate::new(2);
        let (a, b) = (Arrival::at(&g), Arrival::at(&g));
        let t = std::thread::spawn(move || a.commit());
        assert!(b.commit());
        assert!(t.join().unwrap());
    }
}
