//! Calibration: measures this machine's CPU library and GPU on a grid of shapes per op kind and
//! precision, and the staging copy throughput, and builds a [`Profile`].
//!
//! Quick mode (`quick = true`) measures smaller grids, one repetition for calls over 50 ms, and
//! stops adding larger sizes once its time budget is used (the grids measured so far are kept;
//! an op kind never reached keeps the embedded default's curves). The GPU curve stores compute
//! time: the measured GPU call time minus the copy time the copy model predicts for it, so the
//! model reproduces the measured totals at every grid point.

use crate::call::{Call, HostMat, Op, Piv, Scalar};
use crate::cpu::CpuBackend;
use crate::error::{Error, Result};
use crate::gpu::GpuBackend;
use crate::model::{Backend, CopyModel, Curve};
use crate::ops::{
    Diag, EigRange, Family, OpKind, Precision, Routine, Side, SvdJob, Trans, Uplo, Variant,
};
use crate::profile::{CurveEntry, LibraryEntry, Machine, Profile, PROFILE_VERSION};
use std::time::{Duration, Instant};

/// Calibration settings.
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    /// Smaller grids and a time budget.
    pub quick: bool,
    /// Stop adding larger sizes after this long (quick default: 150 s).
    pub budget: Duration,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// Only these op kinds (empty: all).
    pub only: Vec<OpKind>,
    /// Print one line per measured grid point on stderr (for logs; the progress bar is for
    /// terminals).
    pub log_points: bool,
    /// Leave out grid sizes (first feature) above this (`None`: the whole grid).
    pub max_x1: Option<f64>,
}

/// A grid point's CPU time is extrapolated from the previous size (same `x2`) instead of measured
/// when the GPU, copies included, was at least this many times faster there and the CPU call took
/// at least [`DOMINATED_MIN_S`]: the GPU's advantage only grows with size, so the decision cannot
/// flip, and the CPU side of large calls (the slow part of a calibration) is not paid for twice.
pub const DOMINATED_SPEEDUP: f64 = 4.0;
/// See [`DOMINATED_SPEEDUP`].
pub const DOMINATED_MIN_S: f64 = 0.02;

impl CalibrateOptions {
    /// Quick (`true`) or full settings.
    pub fn new(quick: bool) -> CalibrateOptions {
        CalibrateOptions {
            quick,
            budget: Duration::from_secs(if quick { 150 } else { 1500 }),
            progress: true,
            only: Vec::new(),
            log_points: false,
            max_x1: None,
        }
    }
}

/// Share of the budget the GPU points may use before larger GPU sizes are left out.
const GPU_BUDGET_SHARE: f64 = 0.5;

/// The feature grid measured for an op kind and precision.
pub fn grid(kind: OpKind, p: Precision, quick: bool) -> (Vec<f64>, Vec<f64>) {
    let cplx = p.is_complex();
    let v = |x: &[f64]| x.to_vec();
    let heavy = matches!(
        kind.routine,
        Routine::Syev
            | Routine::Syevd
            | Routine::Syevr
            | Routine::Gesdd
            | Routine::Gesvd
            | Routine::Gelsd
    );
    let x1: Vec<f64> = if heavy {
        match (
            quick,
            cplx,
            kind.routine == Routine::Gesvd || kind.vectors(),
        ) {
            (true, true, _) => v(&[128.0, 384.0, 1024.0]),
            (true, false, true) => v(&[128.0, 384.0, 1024.0, 2048.0]),
            (true, false, false) => v(&[128.0, 512.0, 1024.0, 2048.0]),
            (false, _, _) => v(&[128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0]),
        }
    } else if quick {
        if cplx {
            v(&[128.0, 512.0, 1024.0, 2048.0])
        } else {
            v(&[128.0, 512.0, 1024.0, 2048.0, 4096.0, 6144.0])
        }
    } else {
        v(&[64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0])
    };
    let x2 = match kind.routine.family() {
        Family::Square => vec![1.0],
        Family::Rect => {
            if quick {
                vec![1.0, 3.0]
            } else {
                vec![1.0, 2.0, 4.0]
            }
        }
        Family::Solve => {
            if quick {
                vec![1.0, 64.0, 1024.0]
            } else {
                vec![1.0, 16.0, 128.0, 1024.0, 4096.0]
            }
        }
        Family::Product | Family::RankK | Family::Sided => {
            if quick {
                vec![32.0, 512.0, 4096.0]
            } else {
                vec![16.0, 128.0, 512.0, 2048.0, 8192.0]
            }
        }
    };
    (x1, x2)
}

/// Deterministic fast random numbers in [-1, 1).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// A column-major test matrix in one precision, stored as bytes.
pub(crate) struct Buf {
    pub(crate) bytes: Vec<u8>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    p: Precision,
}

impl Buf {
    pub(crate) fn zeros(p: Precision, rows: usize, cols: usize) -> Buf {
        Buf {
            bytes: vec![0u8; rows.max(1) * cols.max(1) * p.size()],
            rows,
            cols,
            p,
        }
    }

    fn set(&mut self, i: usize, j: usize, re: f64, im: f64) {
        let es = self.p.size();
        let o = (i + j * self.rows) * es;
        let b = &mut self.bytes[o..o + es];
        match self.p {
            Precision::S => b.copy_from_slice(&(re as f32).to_ne_bytes()),
            Precision::D => b.copy_from_slice(&re.to_ne_bytes()),
            Precision::C => {
                b[..4].copy_from_slice(&(re as f32).to_ne_bytes());
                b[4..].copy_from_slice(&(im as f32).to_ne_bytes());
            }
            Precision::Z => {
                b[..8].copy_from_slice(&re.to_ne_bytes());
                b[8..].copy_from_slice(&im.to_ne_bytes());
            }
        }
    }

    /// Random entries in [-1, 1).
    pub(crate) fn random(p: Precision, rows: usize, cols: usize, seed: u64) -> Buf {
        let mut b = Buf::zeros(p, rows, cols);
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let cplx = p.is_complex();
        for j in 0..cols {
            for i in 0..rows {
                let re = r.next();
                let im = if cplx { r.next() } else { 0.0 };
                b.set(i, j, re, im);
            }
        }
        b
    }

    /// Symmetric (Hermitian for complex) random matrix with `diag` added on the diagonal
    /// (diagonally dominant, hence positive definite, when `diag > n`).
    pub(crate) fn symmetric(p: Precision, n: usize, diag: f64, seed: u64) -> Buf {
        let mut b = Buf::zeros(p, n, n);
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let cplx = p.is_complex();
        for j in 0..n {
            for i in j..n {
                let re = r.next();
                let im = if cplx && i != j { r.next() } else { 0.0 };
                if i == j {
                    b.set(i, i, re + diag, 0.0);
                } else {
                    b.set(i, j, re, im);
                    b.set(j, i, re, -im);
                }
            }
        }
        b
    }

    /// LU factors of a well-conditioned matrix as `getrf` leaves them with identity pivots: a
    /// unit lower triangle with small entries (random / n) below a diagonally dominant upper
    /// triangle.
    pub(crate) fn lu_factors(p: Precision, n: usize, seed: u64) -> Buf {
        let mut b = Buf::symmetric(p, n, n as f64 + 1.0, seed);
        let es = p.size();
        let scale = 1.0 / n.max(1) as f64;
        for j in 0..n {
            for i in j + 1..n {
                let o = (i + j * n) * es;
                let (re, im) = b.get(o);
                b.set(i, j, re * scale, im * scale);
            }
        }
        b
    }

    fn get(&self, o: usize) -> (f64, f64) {
        let es = self.p.size();
        let b = &self.bytes[o..o + es];
        let f4 = |k: usize| f32::from_ne_bytes(b[k..k + 4].try_into().unwrap_or([0; 4])) as f64;
        let f8 = |k: usize| f64::from_ne_bytes(b[k..k + 8].try_into().unwrap_or([0; 8]));
        match self.p {
            Precision::S => (f4(0), 0.0),
            Precision::D => (f8(0), 0.0),
            Precision::C => (f4(0), f4(4)),
            Precision::Z => (f8(0), f8(8)),
        }
    }

    /// Householder scalars for the reflectors stored below the diagonal of this `m x n` matrix
    /// (`v = (1, A[j+1.., j])`): `tau = 2 / ||v||^2`, which makes every reflector unitary, so the
    /// Q that `orgqr` forms from them is too.
    pub(crate) fn reflector_taus(&self, k: usize) -> Buf {
        let mut t = Buf::zeros(self.p, k, 1);
        for j in 0..k {
            let mut norm2 = 1.0;
            for i in j + 1..self.rows {
                let (re, im) = self.get((i + j * self.rows) * self.p.size());
                norm2 += re * re + im * im;
            }
            t.set(j, 0, 2.0 / norm2, 0.0);
        }
        t
    }

    pub(crate) fn mat(&mut self) -> HostMat {
        HostMat::new(
            self.bytes.as_mut_ptr(),
            self.rows,
            self.cols,
            self.rows.max(1),
        )
    }
}

/// The operands of one measurement: pristine inputs and working copies.
///
/// `bufs` holds the inputs first (A, then B / C / tau as the routine takes them) and then the
/// outputs: w (eigenvalues) and Z for the eigensolvers, s, U, VT for an SVD, s for gelsd, tau
/// for geqrf. `piv` is the pivot vector (identity for getrs and getri), `ints` the integer
/// outputs (syevr: the count found, then `isuppz`; gelsd: the rank).
pub(crate) struct Case {
    pub(crate) bufs: Vec<Buf>,
    pub(crate) pristine: Vec<Vec<u8>>,
    pub(crate) piv: Vec<i32>,
    pub(crate) ints: Vec<i32>,
}

fn sc(p: Precision, v: f64) -> Scalar {
    match p {
        Precision::S => Scalar::of(v as f32),
        Precision::D => Scalar::of(v),
        Precision::C => Scalar::of([v as f32, 0.0]),
        Precision::Z => Scalar::of([v, 0.0]),
    }
}

/// A real scalar of the precision's real width (herk's alpha and beta).
fn sc_real(p: Precision, v: f64) -> Scalar {
    if p.real_size() == 4 {
        Scalar::of(v as f32)
    } else {
        Scalar::of(v)
    }
}

/// The real type of a precision (for eigenvalue and singular value buffers).
fn real_of(p: Precision) -> Precision {
    if p.real_size() == 4 {
        Precision::S
    } else {
        Precision::D
    }
}

impl Case {
    pub(crate) fn new(kind: OpKind, p: Precision, x1: f64, x2: f64) -> Case {
        let s = kind.canonical_shape(x1, x2);
        let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
        let tri = |order: usize| Buf::symmetric(p, order, order as f64 + 1.0, 1);
        let bufs = match kind.routine {
            Routine::Gemm => vec![
                Buf::random(p, m, k, 1),
                Buf::random(p, k, n, 2),
                Buf::random(p, m, n, 3),
            ],
            Routine::Symm | Routine::Hemm => vec![
                Buf::symmetric(p, m, 0.0, 1),
                Buf::random(p, m, n, 2),
                Buf::random(p, m, n, 3),
            ],
            Routine::Syrk | Routine::Herk => {
                vec![Buf::random(p, n, k, 1), Buf::symmetric(p, n, 0.0, 2)]
            }
            Routine::Trsm | Routine::Trmm => vec![tri(k), Buf::random(p, m, n, 2)],
            Routine::Trtrs => vec![tri(n), Buf::random(p, n, k, 2)],
            Routine::Getrf | Routine::Geqrf | Routine::Gesdd | Routine::Gesvd => {
                vec![Buf::random(p, m, n, 1)]
            }
            Routine::Getrs => vec![Buf::lu_factors(p, n, 1), Buf::random(p, n, k, 2)],
            Routine::Gesv => vec![
                Buf::symmetric(p, n, n as f64 + 1.0, 1),
                Buf::random(p, n, k, 2),
            ],
            Routine::Getri => vec![Buf::lu_factors(p, n, 1)],
            Routine::Potrf | Routine::Potrs | Routine::Posv => {
                vec![
                    Buf::symmetric(p, n, n as f64 + 1.0, 1),
                    Buf::random(p, n, k.max(1), 2),
                ]
            }
            // the triangle read is a well-conditioned Cholesky factor
            Routine::Potri => vec![tri(n)],
            Routine::Syev | Routine::Syevd | Routine::Syevr => vec![Buf::symmetric(p, n, 0.0, 1)],
            Routine::Gelsd => vec![Buf::random(p, m, n, 1), Buf::random(p, m.max(n), k, 2)],
            Routine::Orgqr => {
                let a = Buf::random(p, m, n, 1);
                let tau = a.reflector_taus(k);
                vec![a, tau]
            }
        };
        let mut c = Case {
            pristine: bufs.iter().map(|b| b.bytes.clone()).collect(),
            bufs,
            piv: (1..=m.max(n).max(1) as i32).collect(),
            ints: Vec::new(),
        };
        // outputs
        let mn = m.min(n);
        match kind.routine {
            Routine::Syev | Routine::Syevd => c.bufs.push(Buf::zeros(real_of(p), n, 1)),
            Routine::Syevr => {
                c.bufs.push(Buf::zeros(real_of(p), n, 1));
                c.bufs.push(Buf::zeros(p, n, n));
                c.ints = vec![0; 1 + 2 * n.max(1)];
            }
            Routine::Gesdd | Routine::Gesvd => {
                c.bufs.push(Buf::zeros(real_of(p), mn, 1));
                if kind.variant == Variant::Full {
                    c.bufs.push(Buf::zeros(p, m, m));
                    c.bufs.push(Buf::zeros(p, n, n));
                } else {
                    c.bufs.push(Buf::zeros(p, m, mn));
                    c.bufs.push(Buf::zeros(p, mn, n));
                }
            }
            Routine::Gelsd => {
                c.bufs.push(Buf::zeros(real_of(p), mn, 1));
                c.ints = vec![0; 1];
            }
            Routine::Geqrf => c.bufs.push(Buf::zeros(p, mn, 1)),
            _ => {}
        }
        c
    }

    pub(crate) fn reset(&mut self) {
        for (b, p) in self.bufs.iter_mut().zip(&self.pristine) {
            b.bytes.copy_from_slice(p);
        }
        let n = self.piv.len();
        for (i, v) in self.piv.iter_mut().enumerate() {
            *v = (i + 1).min(n) as i32;
        }
        self.ints.iter_mut().for_each(|v| *v = 0);
    }

    pub(crate) fn call(&mut self, kind: OpKind, p: Precision, x1: f64, x2: f64) -> Call {
        let s = kind.canonical_shape(x1, x2);
        let (m, n, k) = (s.m as usize, s.n as usize, s.k as usize);
        let piv = Piv::I32(self.piv.as_mut_ptr());
        let ints = self.ints.as_mut_ptr();
        let (one, zero) = (sc(p, 1.0), sc(p, 0.0));
        let b = &mut self.bufs;
        let none = || HostMat::new(std::ptr::null_mut(), 0, 0, 1);
        let op = match kind.routine {
            Routine::Gemm => Op::Gemm {
                ta: Trans::No,
                tb: Trans::No,
                m,
                n,
                k,
                alpha: one,
                a: b[0].mat(),
                b: b[1].mat(),
                beta: one,
                c: b[2].mat(),
            },
            Routine::Symm => Op::Symm {
                side: Side::Left,
                uplo: Uplo::Lower,
                m,
                n,
                alpha: one,
                a: b[0].mat(),
                b: b[1].mat(),
                beta: one,
                c: b[2].mat(),
            },
            Routine::Hemm => Op::Hemm {
                side: Side::Left,
                uplo: Uplo::Lower,
                m,
                n,
                alpha: one,
                a: b[0].mat(),
                b: b[1].mat(),
                beta: one,
                c: b[2].mat(),
            },
            Routine::Syrk => Op::Syrk {
                uplo: Uplo::Lower,
                trans: Trans::No,
                n,
                k,
                alpha: one,
                a: b[0].mat(),
                beta: zero,
                c: b[1].mat(),
            },
            Routine::Herk => Op::Herk {
                uplo: Uplo::Lower,
                trans: Trans::No,
                n,
                k,
                alpha: sc_real(p, 1.0),
                a: b[0].mat(),
                beta: sc_real(p, 0.5),
                c: b[1].mat(),
            },
            Routine::Trsm => Op::Trsm {
                side: Side::Left,
                uplo: Uplo::Lower,
                ta: Trans::No,
                diag: Diag::NonUnit,
                m,
                n,
                alpha: one,
                a: b[0].mat(),
                b: b[1].mat(),
            },
            Routine::Trmm => Op::Trmm {
                side: Side::Left,
                uplo: Uplo::Lower,
                ta: Trans::No,
                diag: Diag::NonUnit,
                m,
                n,
                alpha: one,
                a: b[0].mat(),
                b: b[1].mat(),
            },
            Routine::Trtrs => Op::Trtrs {
                uplo: Uplo::Lower,
                trans: Trans::No,
                diag: Diag::NonUnit,
                n,
                nrhs: k,
                a: b[0].mat(),
                b: b[1].mat(),
            },
            Routine::Getrf => Op::Getrf {
                m,
                n,
                a: b[0].mat(),
                ipiv: piv,
            },
            Routine::Getrs => Op::Getrs {
                trans: Trans::No,
                n,
                nrhs: k,
                a: b[0].mat(),
                ipiv: piv,
                b: b[1].mat(),
            },
            Routine::Gesv => Op::Gesv {
                n,
                nrhs: k,
                a: b[0].mat(),
                ipiv: piv,
                b: b[1].mat(),
            },
            Routine::Getri => Op::Getri {
                n,
                a: b[0].mat(),
                ipiv: piv,
            },
            Routine::Potrf => Op::Potrf {
                uplo: Uplo::Lower,
                n,
                a: b[0].mat(),
            },
            Routine::Potrs => Op::Potrs {
                uplo: Uplo::Lower,
                n,
                nrhs: k,
                a: b[0].mat(),
                b: b[1].mat(),
            },
            Routine::Posv => Op::Posv {
                uplo: Uplo::Lower,
                n,
                nrhs: k,
                a: b[0].mat(),
                b: b[1].mat(),
            },
            Routine::Potri => Op::Potri {
                uplo: Uplo::Lower,
                n,
                a: b[0].mat(),
            },
            Routine::Syev | Routine::Syevd => Op::Syevd {
                routine: kind.routine,
                vectors: kind.vectors(),
                uplo: Uplo::Lower,
                n,
                a: b[0].mat(),
                w: b[1].bytes.as_mut_ptr(),
            },
            Routine::Syevr => Op::Syevr {
                vectors: kind.vectors(),
                range: EigRange::All,
                uplo: Uplo::Lower,
                n,
                a: b[0].mat(),
                abstol: 0.0,
                found: Piv::I32(ints),
                w: b[1].bytes.as_mut_ptr(),
                z: if kind.vectors() { b[2].mat() } else { none() },
                // SAFETY: `ints` holds 1 + 2n integers (made in `new`).
                isuppz: Piv::I32(unsafe { ints.add(1) }),
            },
            Routine::Gesdd | Routine::Gesvd => {
                let job = match kind.variant {
                    Variant::Plain => SvdJob::None,
                    Variant::Vectors => SvdJob::Thin,
                    Variant::Full => SvdJob::Full,
                };
                let s_ptr = b[1].bytes.as_mut_ptr();
                let (u, vt) = if kind.vectors() {
                    (b[2].mat(), b[3].mat())
                } else {
                    (none(), none())
                };
                Op::Svd {
                    routine: kind.routine,
                    jobu: job,
                    jobvt: job,
                    m,
                    n,
                    a: b[0].mat(),
                    s: s_ptr,
                    u,
                    vt,
                }
            }
            Routine::Gelsd => Op::Gelsd {
                m,
                n,
                nrhs: k,
                a: b[0].mat(),
                b: b[1].mat(),
                s: b[2].bytes.as_mut_ptr(),
                rcond: -1.0,
                rank: Piv::I32(ints),
            },
            Routine::Geqrf => Op::Geqrf {
                m,
                n,
                a: b[0].mat(),
                tau: b[1].bytes.as_mut_ptr(),
            },
            Routine::Orgqr => Op::Orgqr {
                m,
                n,
                k,
                a: b[0].mat(),
                tau: b[1].bytes.as_mut_ptr(),
            },
        };
        Call { prec: p, op }
    }
}

/// Times one backend on one grid point: the minimum over repetitions (one repetition for calls
/// over 50 ms in quick mode, three otherwise).
fn time_point(
    case: &mut Case,
    kind: OpKind,
    p: Precision,
    x1: f64,
    x2: f64,
    quick: bool,
    run: &mut dyn FnMut(&Call) -> Result<()>,
) -> Result<f64> {
    let mut best = f64::MAX;
    let mut reps = 0;
    loop {
        case.reset();
        let call = case.call(kind, p, x1, x2);
        let t = Instant::now();
        run(&call)?;
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt);
        reps += 1;
        let want = if (dt > 0.05 && quick) || dt > 0.5 {
            1
        } else if dt < 0.002 {
            5
        } else {
            3
        };
        // the first run of a small call also pays for warm-up: always repeat those
        if reps >= want && !(reps == 1 && dt < 0.05) {
            break;
        }
    }
    Ok(best.max(1e-7))
}

/// The GPU start-up figures the caller measured when it started the backend it hands to
/// [`calibrate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartupFigures {
    /// `GpuBackend::start`: driver, context, cuBLAS, first lane.
    pub start_s: f64,
    /// cuSOLVER's library and first handle.
    pub solver_s: f64,
}

/// One measured CPU figure: seconds, and how it was obtained.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Got {
    Measured(f64),
    /// Scaled by flops from the size below (the GPU was far faster there, or the budget ran
    /// out).
    Extrapolated(f64),
    /// The library has no such routine.
    Missing,
}

impl Got {
    fn seconds(self) -> Option<f64> {
        match self {
            Got::Measured(s) | Got::Extrapolated(s) => Some(s),
            Got::Missing => None,
        }
    }
}

/// Measures the machine and returns the profile: GPU curves for every kind first (every grid
/// point is measured: GPU calls are fast), then each CPU library's curves, smallest sizes of
/// every kind first, until the budget is used; CPU points left when it runs out, and those where
/// the GPU with copies was at least [`DOMINATED_SPEEDUP`] times faster one size below, are
/// extrapolated by flops from the size below. The GPU curve stores compute time: the measured
/// GPU call minus the copy time the copy model predicts for it.
pub fn calibrate(
    libs: &[&CpuBackend],
    gpu: &GpuBackend,
    startup: StartupFigures,
    opts: &CalibrateOptions,
) -> Result<Profile> {
    let t_start = Instant::now();
    let (h2d, d2h) = gpu.measure_copies(256 << 20)?;
    let copy = CopyModel {
        h2d_bytes_per_s: h2d,
        d2h_bytes_per_s: d2h,
        latency_s: 60e-6,
    };
    calibrate_with(
        libs,
        &mut |c| {
            // a panic in a GPU path loses that kind's GPU curve, not the calibration
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: every call calibration makes is built by a `Case` that owns its
                // buffers, with the dimensions the call describes.
                unsafe { gpu.run(c) }
            }));
            match r {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(Error::Gpu {
                    what: "calibration",
                    detail: format!("{}: {e}", c.name()),
                }),
                Err(_) => Err(Error::Gpu {
                    what: "calibration",
                    detail: format!("{}: the GPU path panicked", c.name()),
                }),
            }
        },
        gpu.name(),
        copy,
        startup,
        opts,
        t_start,
    )
}

/// [`calibrate`] with the GPU as a function that runs a call (tests stand a CPU library in for
/// it) and the copy figures measured.
pub(crate) fn calibrate_with(
    libs: &[&CpuBackend],
    gpu_run: &mut dyn FnMut(&Call) -> Result<()>,
    gpu_name: &str,
    copy: CopyModel,
    startup: StartupFigures,
    opts: &CalibrateOptions,
    t_start: Instant,
) -> Result<Profile> {
    let say = |msg: String| {
        if opts.log_points {
            crate::output::line(&format!("calibrate: {msg}"));
        }
    };
    let plan = make_plan(opts);
    let points: usize = plan.iter().map(|(_, _, a, b)| a.len() * b.len()).sum();
    let bar = if opts.progress {
        let b = indicatif::ProgressBar::new((points * (1 + libs.len())) as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "calibrating {bar:40} {pos}/{len} {msg} [{elapsed}]",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    // A kind the GPU runs as another (syev as syevd, OpKind::gpu_kind) is timed once, as that
    // kind, when the plan measures it on the same grid: gpu_src[idx] is the entry whose GPU
    // times serve entry idx (the model's gpu_curve falls back the same way).
    let gpu_src: Vec<usize> = plan
        .iter()
        .enumerate()
        .map(|(idx, (kind, p, x1, x2))| {
            plan.iter()
                .position(|(k, q, a, b)| {
                    *k == kind.gpu_kind() && *k != *kind && q == p && a == x1 && b == x2
                })
                .unwrap_or(idx)
        })
        .collect();
    // warm-up: every GPU kernel once, untimed (each CPU library warms up before its turn)
    for (idx, (kind, p, x1, x2)) in plan.iter().enumerate() {
        if gpu_src[idx] != idx {
            continue;
        }
        let mut case = Case::new(*kind, *p, x1[0], x2[0]);
        case.reset();
        let call = case.call(*kind, *p, x1[0], x2[0]);
        let _ = gpu_run(&call);
    }
    // phase 1: the GPU, every kind's smallest size first, until its share of the budget is
    // used. gpu_t[idx][row][col] = seconds with copies
    let mut gpu_t: Vec<Vec<Vec<f64>>> = plan.iter().map(|_| Vec::new()).collect();
    let mut gpu_failed = vec![false; plan.len()];
    let max_rows = plan.iter().map(|(_, _, a, _)| a.len()).max().unwrap_or(0);
    let gpu_budget = opts.budget.mul_f64(GPU_BUDGET_SHARE);
    for row in 0..max_rows {
        if row > 0 && t_start.elapsed() > gpu_budget {
            say(format!(
                "GPU share of the budget used after the x1 row {}: larger GPU sizes left out",
                row - 1
            ));
            break;
        }
        for (idx, (kind, p, x1, x2)) in plan.iter().enumerate() {
            if row >= x1.len() || gpu_failed[idx] || gpu_t[idx].len() < row || gpu_src[idx] != idx {
                continue;
            }
            let a = x1[row];
            let mut cells = Vec::new();
            for &b in x2 {
                bar.set_message(format!("gpu {kind} {} x1={a} x2={b}", p.letter()));
                let mut case = Case::new(*kind, *p, a, b);
                let r = time_point(&mut case, *kind, *p, a, b, opts.quick, gpu_run);
                bar.inc(1);
                match r {
                    Ok(t) => cells.push(t),
                    Err(e) => {
                        say(format!(
                            "{kind} {} x1={a}: GPU failed ({e}); no larger GPU sizes",
                            p.letter()
                        ));
                        gpu_failed[idx] = true;
                        break;
                    }
                }
            }
            if cells.len() == x2.len() {
                gpu_t[idx].push(cells);
            }
        }
    }
    say(format!(
        "GPU points done at {:.1}s",
        t_start.elapsed().as_secs_f64()
    ));
    // phase 2: each library in turn (never interleaved: a library's spinning OpenBLAS threads
    // would slow the next one's small calls), with an equal share of the budget left
    let gpu_of = |idx: usize, row: usize, col: usize| -> Option<f64> {
        gpu_t[gpu_src[idx]]
            .get(row)
            .and_then(|r| r.get(col))
            .copied()
    };
    let cpu_t = measure_cpu(libs, &plan, &gpu_of, opts, t_start, &bar, &say);
    bar.finish_and_clear();
    let mut curves = Vec::new();
    for (idx, (kind, p, x1, x2)) in plan.iter().enumerate() {
        if gpu_t[idx].is_empty() {
            continue;
        }
        let rows = &gpu_t[idx];
        let mut seconds = Vec::new();
        for (ri, r) in rows.iter().enumerate() {
            for (bi, &tg) in r.iter().enumerate() {
                let s = kind.canonical_shape(x1[ri], x2[bi]);
                let (inb, outb) = kind.bytes(*p, s);
                let (ci, co) = copy.seconds(inb, outb);
                seconds.push((tg - ci - co - copy.latency_s).max(0.1 * tg));
            }
        }
        curves.push(CurveEntry {
            op: kind.key(),
            precision: *p,
            backend: Backend::Gpu,
            library: None,
            curve: Curve {
                x1: x1[..rows.len()].to_vec(),
                x2: x2.clone(),
                seconds,
            },
        });
    }
    curves.extend(cpu_curves(libs, &plan, &cpu_t));
    let profile = Profile {
        version: PROFILE_VERSION,
        machine: Machine {
            cpu: Machine::local_cpu(),
            gpu: gpu_name.to_string(),
            cpu_library: libs
                .first()
                .map(|c| c.path().to_string())
                .unwrap_or_default(),
            extra: Default::default(),
        },
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        calibration_s: t_start.elapsed().as_secs_f64(),
        startup_s: startup.start_s,
        solver_startup_s: Some(startup.solver_s),
        copy,
        libraries: libs
            .iter()
            .map(|c| LibraryEntry {
                key: c.lib().key().to_string(),
                path: c.path().to_string(),
            })
            .collect(),
        curves,
        corrections: Default::default(),
        cpu_points: Vec::new(),
        extra: Default::default(),
    };
    profile.validate().map_err(|msg| Error::Profile {
        path: "(calibration)".into(),
        msg,
    })?;
    Ok(profile)
}

/// One measured kind: `(kind, precision, x1 grid, x2 grid)`.
type PlanEntry = (OpKind, Precision, Vec<f64>, Vec<f64>);

/// The CPU side of a calibration: each library in turn, every kind's smallest size first, with
/// an equal share of the budget still left; points where the GPU (`gpu_of(plan index, row,
/// column)`: seconds with copies) was at least [`DOMINATED_SPEEDUP`] times faster one size
/// below, and every point after the library's share is used, are extrapolated by flops from the
/// size below. Returns `[library][plan index][row][column]`.
fn measure_cpu(
    libs: &[&CpuBackend],
    plan: &[PlanEntry],
    gpu_of: &dyn Fn(usize, usize, usize) -> Option<f64>,
    opts: &CalibrateOptions,
    t_start: Instant,
    bar: &indicatif::ProgressBar,
    say: &dyn Fn(String),
) -> Vec<Vec<Vec<Vec<Got>>>> {
    let max_rows = plan.iter().map(|(_, _, a, _)| a.len()).max().unwrap_or(0);
    let mut all = Vec::new();
    for (li, cpu) in libs.iter().enumerate() {
        let share = opts.budget.saturating_sub(t_start.elapsed()) / (libs.len() - li) as u32;
        let lib_start = Instant::now();
        // the previous library's threads go idle before this one is timed
        std::thread::sleep(Duration::from_millis(300));
        for (kind, p, x1, x2) in plan {
            let mut case = Case::new(*kind, *p, x1[0], x2[0]);
            case.reset();
            let call = case.call(*kind, *p, x1[0], x2[0]);
            // SAFETY: the call's buffers belong to `case`.
            let _ = unsafe { cpu.run(&call) };
        }
        let mut cpu_t: Vec<Vec<Vec<Got>>> = plan.iter().map(|_| Vec::new()).collect();
        let mut extrapolated = 0usize;
        let mut cut = false;
        for row in 0..max_rows {
            for (idx, (kind, p, x1, x2)) in plan.iter().enumerate() {
                if row >= x1.len() {
                    continue;
                }
                if !cut && lib_start.elapsed() > share {
                    cut = true;
                    say(format!(
                        "{}: its {:.0}s of the budget used in the x1 row {row} (at {kind} {}): larger CPU points are extrapolated",
                        cpu.lib().key(),
                        share.as_secs_f64(),
                        p.letter()
                    ));
                }
                let mut got = Vec::new();
                for (bi, &b) in x2.iter().enumerate() {
                    let a = x1[row];
                    let flops = kind.flops(*p, kind.canonical_shape(a, b));
                    let below = row
                        .checked_sub(1)
                        .and_then(|r| cpu_t[idx].get(r))
                        .and_then(|r| r.get(bi).copied())
                        .and_then(Got::seconds);
                    let dominated =
                        match (below, row.checked_sub(1).and_then(|r| gpu_of(idx, r, bi))) {
                            (Some(tc0), Some(tg0)) => {
                                tc0 >= DOMINATED_MIN_S && tc0 >= DOMINATED_SPEEDUP * tg0
                            }
                            _ => false,
                        };
                    let g = match below {
                        Some(tc0) if cut || dominated => {
                            extrapolated += 1;
                            let f0 = kind.flops(*p, kind.canonical_shape(x1[row - 1], b));
                            Got::Extrapolated(tc0 * flops / f0.max(1.0))
                        }
                        _ if cut && row > 0 => Got::Missing,
                        _ => {
                            bar.set_message(format!(
                                "{} {kind} {} x1={a} x2={b}",
                                cpu.lib().key(),
                                p.letter()
                            ));
                            let mut case = Case::new(*kind, *p, a, b);
                            let r = time_point(&mut case, *kind, *p, a, b, opts.quick, &mut |c| {
                                // SAFETY: the call's buffers belong to `case`.
                                let info = unsafe { cpu.run(c)? };
                                if info != 0 {
                                    return Err(Error::Lapack {
                                        routine: c.name(),
                                        info,
                                        meaning: "calibration input rejected",
                                    });
                                }
                                Ok(())
                            });
                            match r {
                                Ok(t) => Got::Measured(t),
                                Err(e) => {
                                    say(format!(
                                        "{} {kind} {}: {e}; no CPU curve",
                                        cpu.lib().key(),
                                        p.letter()
                                    ));
                                    Got::Missing
                                }
                            }
                        }
                    };
                    if let Some(tc) = g.seconds() {
                        say(format!(
                            "{} {kind} {} x1={a} x2={b} cpu={tc:.4}s ({}) gpu={} at {:.1}s",
                            cpu.lib().key(),
                            p.letter(),
                            if matches!(g, Got::Measured(_)) {
                                "measured"
                            } else {
                                "extrapolated"
                            },
                            gpu_of(idx, row, bi)
                                .map(|t| format!("{t:.4}s"))
                                .unwrap_or_else(|| "-".into()),
                            t_start.elapsed().as_secs_f64()
                        ));
                    }
                    bar.inc(1);
                    got.push(g);
                }
                cpu_t[idx].push(got);
            }
        }
        say(format!(
            "{}: {extrapolated} CPU points extrapolated (GPU >= {DOMINATED_SPEEDUP}x faster one size below, or the budget), {:.1}s",
            cpu.lib().key(),
            lib_start.elapsed().as_secs_f64()
        ));
        all.push(cpu_t);
    }
    all
}

/// The CPU curves of `libs` on this machine, added to `base` (a profile of this machine's
/// GPU): its GPU curves, copy and start-up figures are kept and give the GPU side of the rule
/// that skips CPU points the GPU dominates; curves of other libraries are kept, those of `libs`
/// replaced. No GPU is needed (`offload calibrate --cpu-only --from PROFILE`).
pub fn calibrate_cpu(
    libs: &[&CpuBackend],
    base: &Profile,
    opts: &CalibrateOptions,
) -> Result<Profile> {
    let t_start = Instant::now();
    let say = |msg: String| {
        if opts.log_points {
            crate::output::line(&format!("calibrate: {msg}"));
        }
    };
    let plan = make_plan(opts);
    let model = base.model(true);
    let gpu_of = |idx: usize, row: usize, col: usize| -> Option<f64> {
        let (kind, p, x1, x2) = &plan[idx];
        let s = kind.canonical_shape(*x1.get(row)?, *x2.get(col)?);
        model.gpu_estimate(*kind, *p, s).map(|e| e.gpu_s)
    };
    let bar = indicatif::ProgressBar::hidden();
    let cpu_t = measure_cpu(libs, &plan, &gpu_of, opts, t_start, &bar, &say);
    let keys: Vec<String> = libs.iter().map(|c| c.lib().key().to_string()).collect();
    // with `only`, the libraries' curves (and learned figures) of the other kinds are kept
    let measured = |op: &str| {
        opts.only.is_empty() || OpKind::parse_key(op).is_some_and(|k| opts.only.contains(&k))
    };
    let mut out = base.clone();
    out.curves.retain(|c| {
        c.backend == Backend::Gpu
            || !measured(&c.op)
            || !keys.contains(
                &c.library
                    .clone()
                    .unwrap_or_else(|| crate::library::Library::at(&base.machine.cpu_library).key),
            )
    });
    // a curve without its library field belonged to machine.cpu_library: name it
    for c in out.curves.iter_mut() {
        if c.backend == Backend::Cpu && c.library.is_none() {
            c.library = Some(crate::library::Library::at(&base.machine.cpu_library).key);
        }
    }
    out.curves.extend(cpu_curves(libs, &plan, &cpu_t));
    out.libraries.retain(|l| !keys.contains(&l.key));
    out.libraries.extend(libs.iter().map(|c| LibraryEntry {
        key: c.lib().key().to_string(),
        path: c.path().to_string(),
    }));
    out.cpu_points
        .retain(|p| !measured(&p.op) || !keys.contains(&p.library));
    out.corrections.retain(|k, _| {
        crate::learn::CorrKey::parse(k).is_some_and(|c| {
            c.backend == Backend::Gpu
                || !measured(&c.kind.key())
                || !keys.contains(&c.lib.as_str().to_string())
        })
    });
    out.machine.cpu = Machine::local_cpu();
    out.created_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    out.calibration_s = t_start.elapsed().as_secs_f64();
    out.validate().map_err(|msg| Error::Profile {
        path: "(calibration)".into(),
        msg,
    })?;
    Ok(out)
}

/// `measured` (a calibration of some kinds, sizes, backends or libraries) merged into `base`
/// (a profile of the same GPU): every measured curve replaces the rows of the base's curve of
/// the same op kind, precision, backend and library that it measured, and the base's other
/// rows and curves stay; a curve the base lacks is added. Where the two grids' second features
/// differ, the rows cannot be mixed: the measured curve replaces the base's when it reaches at
/// least as far, else the base's is kept. The base's copy, start-up figures, learned figures
/// and other fields stay (they are the machine's, measured on its whole range). Returns the
/// merged profile and one line per curve saying what happened.
pub fn merge_into(base: &Profile, measured: &Profile) -> Result<(Profile, Vec<String>)> {
    if !base.machine.gpu.is_empty()
        && !measured.machine.gpu.is_empty()
        && base.machine.gpu != measured.machine.gpu
    {
        return Err(Error::Profile {
            path: "(merge)".into(),
            msg: format!(
                "the profile to merge into was measured on {}, this calibration on {}: merge only profiles of one machine",
                base.machine.gpu, measured.machine.gpu
            ),
        });
    }
    let lib_of = |c: &CurveEntry, p: &Profile| -> Option<String> {
        match c.backend {
            Backend::Gpu => None,
            Backend::Cpu => Some(
                c.library
                    .clone()
                    .unwrap_or_else(|| crate::library::Library::at(&p.machine.cpu_library).key),
            ),
        }
    };
    let mut out = base.clone();
    // a CPU curve without its library field belonged to machine.cpu_library: name it
    for c in out.curves.iter_mut() {
        if c.backend == Backend::Cpu && c.library.is_none() {
            c.library = Some(crate::library::Library::at(&base.machine.cpu_library).key);
        }
    }
    let mut notes = Vec::new();
    for m in &measured.curves {
        let lib = lib_of(m, measured);
        let name = format!(
            "{}/{}/{}{}",
            m.op,
            m.precision.letter(),
            m.backend.as_str(),
            lib.as_deref().map(|l| format!("/{l}")).unwrap_or_default()
        );
        let slot = out.curves.iter_mut().find(|c| {
            c.op == m.op && c.precision == m.precision && c.backend == m.backend && c.library == lib
        });
        match slot {
            None => {
                out.curves.push(CurveEntry {
                    library: lib,
                    ..m.clone()
                });
                notes.push(format!("{name}: added ({} rows)", m.curve.x1.len()));
            }
            Some(b) => match merge_rows(&b.curve, &m.curve) {
                Some(c) => {
                    notes.push(format!(
                        "{name}: {} measured rows merged into {} ({} rows now)",
                        m.curve.x1.len(),
                        b.curve.x1.len(),
                        c.x1.len()
                    ));
                    b.curve = c;
                }
                None if m.curve.x1.last() >= b.curve.x1.last() => {
                    notes.push(format!("{name}: replaced (another second-feature grid)"));
                    b.curve = m.curve.clone();
                }
                None => notes.push(format!(
                    "{name}: kept the profile's (the measured grid's second features differ and it reaches only {:?})",
                    m.curve.x1.last()
                )),
            },
        }
    }
    for l in &measured.libraries {
        out.libraries.retain(|b| b.key != l.key);
        out.libraries.push(l.clone());
    }
    out.created_unix = measured.created_unix;
    out.calibration_s = measured.calibration_s;
    out.validate().map_err(|msg| Error::Profile {
        path: "(merge)".into(),
        msg,
    })?;
    Ok((out, notes))
}

/// The rows of `base` with those `new` measured replaced (and new ones inserted in order), when
/// both have the same second-feature grid; `None` otherwise.
fn merge_rows(base: &Curve, new: &Curve) -> Option<Curve> {
    if base.x2 != new.x2 {
        return None;
    }
    let w = base.x2.len();
    let mut rows: Vec<(f64, &[f64])> = base
        .x1
        .iter()
        .enumerate()
        .filter(|(_, x)| !new.x1.contains(x))
        .map(|(i, &x)| (x, &base.seconds[i * w..(i + 1) * w]))
        .chain(
            new.x1
                .iter()
                .enumerate()
                .map(|(i, &x)| (x, &new.seconds[i * w..(i + 1) * w])),
        )
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(Curve {
        x1: rows.iter().map(|r| r.0).collect(),
        x2: base.x2.clone(),
        seconds: rows.iter().flat_map(|r| r.1.iter().copied()).collect(),
    })
}

/// The kinds and grids a calibration measures.
fn make_plan(opts: &CalibrateOptions) -> Vec<PlanEntry> {
    let kinds: Vec<OpKind> = if opts.only.is_empty() {
        OpKind::all()
    } else {
        opts.only.clone()
    };
    let mut plan = Vec::new();
    // double and single precision first: a budget cut in a row hits the complex kinds
    for prec in [Precision::D, Precision::S, Precision::Z, Precision::C] {
        for kind in &kinds {
            if !kind.routine.precisions().contains(&prec) {
                continue;
            }
            let (mut x1, x2) = grid(*kind, prec, opts.quick);
            if let Some(max) = opts.max_x1 {
                x1.retain(|&x| x <= max);
            }
            if !x1.is_empty() {
                plan.push((*kind, prec, x1, x2));
            }
        }
    }
    plan
}

/// The CPU curves of the measured libraries: the rows whose every column has a figure.
fn cpu_curves(
    libs: &[&CpuBackend],
    plan: &[PlanEntry],
    cpu_t: &[Vec<Vec<Vec<Got>>>],
) -> Vec<CurveEntry> {
    let mut curves = Vec::new();
    for (li, cpu) in libs.iter().enumerate() {
        for (idx, (kind, p, x1, x2)) in plan.iter().enumerate() {
            let rows: Vec<&Vec<Got>> = cpu_t[li][idx]
                .iter()
                .take_while(|r| r.iter().all(|g| g.seconds().is_some()))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let seconds = rows
                .iter()
                .flat_map(|r| r.iter().filter_map(|g| g.seconds()))
                .collect();
            curves.push(CurveEntry {
                op: kind.key(),
                precision: *p,
                backend: Backend::Cpu,
                library: Some(cpu.lib().key().to_string()),
                curve: Curve {
                    x1: x1[..rows.len()].to_vec(),
                    x2: x2.clone(),
                    seconds,
                },
            });
        }
    }
    curves
}

/// The BLAS/LAPACK libraries the numpy and scipy of `python` use: the files of those names
/// mapped into a `python` process after importing `numpy.linalg` and `scipy.linalg` (OpenBLAS,
/// MKL, reference, FlexiBLAS, BLIS). Empty when `python` cannot run or has neither package.
pub fn python_libraries(python: &str) -> Vec<String> {
    const SCRIPT: &str = r#"
import os, re
try:
    import numpy.linalg
except Exception:
    pass
try:
    import scipy.linalg
except Exception:
    pass
seen = []
for line in open('/proc/self/maps'):
    parts = line.split()
    if len(parts) < 6:
        continue
    path = parts[-1]
    name = os.path.basename(path)
    if re.search(r'(openblas|mkl_rt|mkl_core|libblas|liblapack|flexiblas|blis)', name) and path not in seen:
        seen.append(path)
print('\n'.join(seen))
"#;
    let Ok(out) = std::process::Command::new(python)
        .args(["-c", SCRIPT])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_are_valid_and_quick_is_smaller() {
        for k in OpKind::all() {
            for p in Precision::ALL {
                let (a, b) = grid(k, p, true);
                let (c, d) = grid(k, p, false);
                let cv = Curve {
                    x1: a.clone(),
                    x2: b.clone(),
                    seconds: vec![1.0; a.len() * b.len()],
                };
                cv.validate().unwrap();
                assert!(a.len() * b.len() <= c.len() * d.len(), "{k} {p:?}");
            }
        }
    }

    #[test]
    fn symmetric_buffers_are_symmetric() {
        let b = Buf::symmetric(Precision::Z, 5, 6.0, 3);
        let at = |i: usize, j: usize| {
            let o = (i + j * 5) * 16;
            (
                f64::from_ne_bytes(b.bytes[o..o + 8].try_into().unwrap()),
                f64::from_ne_bytes(b.bytes[o + 8..o + 16].try_into().unwrap()),
            )
        };
        for i in 0..5 {
            for j in 0..5 {
                let (x, y) = (at(i, j), at(j, i));
                assert_eq!(x.0, y.0);
                assert_eq!(x.1, -y.1);
            }
            assert!(at(i, i).0 > 4.0);
        }
    }

    /// The whole calibration loop with a CPU library standing in for the GPU (small sizes, a
    /// few kinds): a valid profile with GPU and per-library CPU curves, the machine recorded,
    /// and a later kind still measured when the budget is cut.
    #[test]
    fn calibration_loop_builds_a_valid_profile() {
        let cpu = CpuBackend::embedded();
        let kinds = vec![
            OpKind::plain(Routine::Gemm),
            OpKind::plain(Routine::Potrf),
            OpKind::new(Routine::Gesdd, Variant::Full),
            OpKind::plain(Routine::Getri),
        ];
        let mut opts = CalibrateOptions::new(true);
        opts.progress = false;
        opts.only = kinds.clone();
        opts.max_x1 = Some(128.0);
        let mut gpu_calls = 0usize;
        let copy = CopyModel {
            h2d_bytes_per_s: 2e10,
            d2h_bytes_per_s: 2e10,
            latency_s: 60e-6,
        };
        let p = calibrate_with(
            &[&cpu],
            &mut |c| {
                gpu_calls += 1;
                // SAFETY: calibration calls own their buffers.
                unsafe { cpu.run(c) }.map(|_| ())
            },
            "stand-in GPU",
            copy,
            StartupFigures {
                start_s: 0.5,
                solver_s: 0.2,
            },
            &opts,
            Instant::now(),
        )
        .unwrap();
        p.validate().unwrap();
        assert!(gpu_calls > 0);
        assert_eq!(p.machine.gpu, "stand-in GPU");
        assert_eq!(p.machine.cpu, Machine::local_cpu());
        assert_eq!(p.solver_startup_s, Some(0.2));
        assert_eq!(p.libraries.len(), 1);
        let m = p.model(true);
        let lib = cpu.lib().key_id();
        for k in &kinds {
            for &prec in k.routine.precisions() {
                assert!(m.gpu_curve(*k, prec).is_some(), "{k} {prec:?} gpu");
                assert!(m.cpu_curve(lib, *k, prec).is_some(), "{k} {prec:?} cpu");
            }
        }
        // a zero budget: the first row of every kind is still measured
        opts.budget = Duration::ZERO;
        opts.only = vec![OpKind::plain(Routine::Potrf), OpKind::plain(Routine::Trtrs)];
        let p = calibrate_with(
            &[&cpu],
            // SAFETY: calibration calls own their buffers.
            &mut |c| unsafe { cpu.run(c) }.map(|_| ()),
            "stand-in GPU",
            copy,
            StartupFigures {
                start_s: 0.5,
                solver_s: 0.2,
            },
            &opts,
            Instant::now(),
        )
        .unwrap();
        let m = p.model(true);
        for k in &opts.only {
            let c = m.cpu_curve(lib, *k, Precision::D).unwrap();
            assert!(!c.x1.is_empty());
            assert!(m.gpu_curve(*k, Precision::D).is_some());
        }
        // the CPU side alone, added to that profile: GPU curves kept, this library's replaced,
        // another library's kept
        let mut base = p.clone();
        let other = base
            .curves
            .iter()
            .find(|c| c.backend == Backend::Cpu)
            .cloned()
            .map(|mut c| {
                c.library = Some("mkl".into());
                c
            })
            .unwrap();
        base.curves.push(other);
        opts.only = vec![OpKind::plain(Routine::Potri)];
        opts.budget = Duration::from_secs(60);
        let q = calibrate_cpu(&[&cpu], &base, &opts).unwrap();
        let m = q.model(true);
        assert!(m
            .cpu_curve(lib, OpKind::plain(Routine::Potri), Precision::Z)
            .is_some());
        // potrf's curve of this library is the base's (`only` measured potri alone); mkl's is
        // kept; the GPU curves are the base's
        let key = |q: &Profile| {
            q.curves
                .iter()
                .find(|c| {
                    c.backend == Backend::Cpu
                        && c.op == "potrf"
                        && c.precision == Precision::D
                        && c.library.as_deref() == Some(lib.as_str())
                })
                .map(|c| c.curve.clone())
        };
        assert!(key(&q).is_some());
        assert_eq!(key(&q), key(&base));
        assert!(m
            .cpu_curve(
                crate::library::LibKey::of("mkl"),
                OpKind::plain(Routine::Potrf),
                Precision::D
            )
            .is_some());
        assert_eq!(
            q.curves
                .iter()
                .filter(|c| c.backend == Backend::Gpu)
                .count(),
            base.curves
                .iter()
                .filter(|c| c.backend == Backend::Gpu)
                .count()
        );
        assert_eq!(q.machine.gpu, "stand-in GPU");
    }

    /// `--merge-into`: a GPU-only calibration of small sizes (a CPU library standing in for
    /// the GPU) merged into the embedded profile replaces the GPU rows it measured and keeps
    /// every other row and curve; a profile of another GPU is refused; a curve of another
    /// second-feature grid is kept unless the measured one reaches as far.
    #[test]
    fn merge_into_replaces_the_measured_rows_only() {
        let cpu = CpuBackend::embedded();
        let base = Profile::embedded();
        let mut opts = CalibrateOptions::new(true);
        opts.progress = false;
        opts.only = vec![OpKind::plain(Routine::Gemm), OpKind::plain(Routine::Potrf)];
        opts.max_x1 = Some(128.0);
        let copy = base.copy;
        let measured = calibrate_with(
            &[],
            // SAFETY: calibration calls own their buffers.
            &mut |c| unsafe { cpu.run(c) }.map(|_| ()),
            "stand-in GPU",
            copy,
            StartupFigures {
                start_s: 0.5,
                solver_s: 0.2,
            },
            &opts,
            Instant::now(),
        )
        .unwrap();
        assert!(measured.curves.iter().all(|c| c.backend == Backend::Gpu));
        let e = merge_into(&base, &measured).unwrap_err().to_string();
        assert!(
            e.contains("stand-in GPU") && e.contains("one machine"),
            "{e}"
        );
        let mut measured = measured;
        measured.machine.gpu = base.machine.gpu.clone();
        let (merged, notes) = merge_into(&base, &measured).unwrap();
        merged.validate().unwrap();
        assert_eq!(merged.curves.len(), base.curves.len(), "{notes:?}");
        assert_eq!(notes.len(), measured.curves.len());
        for m in &measured.curves {
            let find = |p: &Profile| {
                p.curves
                    .iter()
                    .find(|c| c.op == m.op && c.precision == m.precision && c.backend == m.backend)
                    .map(|c| c.curve.clone())
                    .unwrap()
            };
            let (b, g) = (find(&base), find(&merged));
            // the embedded profile was built on the quick grids: the rows merge
            assert_eq!(b.x2, m.curve.x2, "{} {:?}", m.op, m.precision);
            let w = b.x2.len();
            let row = |c: &Curve, x: f64| {
                let i = c.x1.iter().position(|&v| v == x)?;
                Some(c.seconds[i * w..(i + 1) * w].to_vec())
            };
            for &x in &g.x1 {
                let want = row(&m.curve, x).or_else(|| row(&b, x)).unwrap();
                assert_eq!(row(&g, x).unwrap(), want, "{} row {x}", m.op);
            }
            assert_eq!(g.x1.last(), b.x1.last(), "larger rows kept");
            assert!(g.x1.windows(2).all(|w| w[0] < w[1]));
        }
        // CPU curves, copies and start-up figures are the base's
        let cpu_of = |p: &Profile| -> Vec<CurveEntry> {
            p.curves
                .iter()
                .filter(|c| c.backend == Backend::Cpu)
                .cloned()
                .collect()
        };
        assert_eq!(cpu_of(&merged), cpu_of(&base));
        assert_eq!(
            (merged.copy, merged.startup_s, merged.solver_startup_s),
            (base.copy, base.startup_s, base.solver_startup_s)
        );
        // another second-feature grid: kept when the measured curve is shorter, replaced when
        // it reaches as far
        let mut other = measured.clone();
        for c in other.curves.iter_mut() {
            c.curve.x2 = c.curve.x2.iter().map(|v| v * 1.5).collect();
        }
        let (kept, notes) = merge_into(&base, &other).unwrap();
        assert!(
            notes.iter().all(|n| n.contains("kept the profile's")),
            "{notes:?}"
        );
        assert_eq!(kept.curves, base.curves);
    }

    #[test]
    fn rows_merge_in_order_and_grids_must_agree() {
        let base = Curve {
            x1: vec![1.0, 4.0, 16.0],
            x2: vec![1.0, 2.0],
            seconds: vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
        };
        let new = Curve {
            x1: vec![2.0, 4.0],
            x2: vec![1.0, 2.0],
            seconds: vec![0.1, 0.2, 0.4, 0.8],
        };
        let m = merge_rows(&base, &new).unwrap();
        assert_eq!(m.x1, vec![1.0, 2.0, 4.0, 16.0]);
        assert_eq!(m.seconds, vec![1.0, 2.0, 0.1, 0.2, 0.4, 0.8, 16.0, 32.0]);
        m.validate().unwrap();
        let other = Curve {
            x2: vec![1.0, 3.0],
            ..new
        };
        assert!(merge_rows(&base, &other).is_none());
    }

    /// Runs every op kind on the CPU backend through the calibration cases (small sizes): the
    /// cases are valid inputs (info = 0) in every precision.
    #[test]
    fn calibration_cases_run_on_the_cpu() {
        let Ok(cpu) = CpuBackend::discover() else {
            eprintln!("SKIPPED calibration_cases_run_on_the_cpu: no CPU BLAS/LAPACK library");
            return;
        };
        for k in OpKind::all() {
            for &p in k.routine.precisions() {
                let x2 = match k.routine.family() {
                    Family::Square => 1.0,
                    Family::Rect => 2.0,
                    _ => 7.0,
                };
                let mut case = Case::new(k, p, 24.0, x2);
                case.reset();
                let call = case.call(k, p, 24.0, x2);
                call.check().unwrap();
                // SAFETY: buffers owned by `case`.
                let info = unsafe { cpu.run(&call) }.unwrap();
                assert_eq!(info, 0, "{k} {p:?}");
            }
        }
    }
}
