//! The embedded pure-Rust backend (faer) against OpenBLAS on the same machine, both called
//! through the same reference Fortran ABI (`dgemm_`, `dpotrf_`, `dgesv_`, `dsyevd_`, `dgesdd_`
//! and their `s` forms), on the same random inputs.
//!
//! ```text
//! cargo run --release -p gpukit-offload --example embedded_vs_openblas -- \
//!     [--lib PATH] [--sizes 256,512,1024,2048] [--routines gemm,potrf,gesv,syevd,gesdd] [--budget SECONDS]
//! ```
//! `--lib` (or `OPENBLAS_LIB`) names the OpenBLAS library; default `libopenblas.so.0` (and the
//! LAPACK inside it). Each case runs a warm-up call per library, then alternates the two
//! libraries call by call (so that the load of the machine hits both alike) until `--budget`
//! seconds (default 2) or 7 pairs, on fresh copies of the inputs (copies not timed), and prints
//! the median of each and their ratio, plus the largest relative difference of the results
//! (C of gemm, the factor of potrf, the solution of gesv, the eigenvalues of syevd, the
//! singular values of gesdd). Threads: OpenBLAS's own setting (`OPENBLAS_NUM_THREADS`), faer's
//! rayon pool (`RAYON_NUM_THREADS`); both default to every core.

use gpukit_offload::embedded;
use std::ffi::{c_char, c_void, CString};
use std::time::Instant;

/// A real element type of the comparison.
trait Real: Copy + Default + std::fmt::Debug + 'static {
    const LETTER: char;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}
impl Real for f32 {
    const LETTER: char = 's';
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl Real for f64 {
    const LETTER: char = 'd';
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
}

type I = i32;
type Gemm<R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const I,
    *const I,
    *const I,
    *const R,
    *const R,
    *const I,
    *const R,
    *const I,
    *const R,
    *mut R,
    *const I,
);
type Potrf<R> = unsafe extern "C" fn(*const c_char, *const I, *mut R, *const I, *mut I);
type Gesv<R> =
    unsafe extern "C" fn(*const I, *const I, *mut R, *const I, *mut I, *mut R, *const I, *mut I);
type Syevd<R> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const I,
    *mut R,
    *const I,
    *mut R,
    *mut R,
    *const I,
    *mut I,
    *const I,
    *mut I,
);
type Gesdd<R> = unsafe extern "C" fn(
    *const c_char,
    *const I,
    *const I,
    *mut R,
    *const I,
    *mut R,
    *mut R,
    *const I,
    *mut R,
    *const I,
    *mut R,
    *const I,
    *mut I,
    *mut I,
);

/// The two libraries' entry points for one routine.
struct Pair {
    openblas: *const c_void,
    faer: *const c_void,
}

struct OpenBlas {
    handle: *mut c_void,
    path: String,
}

impl OpenBlas {
    fn open(path: &str) -> Result<OpenBlas, String> {
        let c = CString::new(path).map_err(|_| format!("bad library path {path:?}"))?;
        // SAFETY: a valid C string; RTLD_LOCAL keeps the library's symbols out of the global scope.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!(
                "cannot load {path}: install OpenBLAS (apt-get install libopenblas0-pthread) or pass --lib PATH"
            ));
        }
        Ok(OpenBlas {
            handle,
            path: path.to_string(),
        })
    }

    fn pair(&self, name: &str) -> Result<Pair, String> {
        let c = CString::new(name).map_err(|_| format!("bad symbol {name:?}"))?;
        // SAFETY: a live handle and a valid C string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(format!("{} has no {name}", self.path));
        }
        let faer = embedded::symbol(name).ok_or(format!("the embedded backend has no {name}"))?;
        Ok(Pair {
            openblas: p as *const c_void,
            faer,
        })
    }
}

/// A deterministic uniform generator in [-1, 1).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
    fn matrix<R: Real>(&mut self, len: usize) -> Vec<R> {
        (0..len).map(|_| R::from_f64(self.next())).collect()
    }
}

/// A symmetric positive definite `n x n` matrix: `M M^T / n + I`, built in f64.
fn spd<R: Real>(rng: &mut Rng, n: usize) -> Vec<R> {
    let m: Vec<f64> = (0..n * n).map(|_| rng.next()).collect();
    let mut a = vec![0.0f64; n * n];
    // a = m m^T / n + I through the embedded dgemm (fast enough here; only the input)
    let f: Gemm<f64> = unsafe_cast(embedded::symbol("dgemm_").expect("dgemm_"));
    let (ni, alpha, beta) = (n as I, 1.0 / n as f64, 0.0);
    // SAFETY: n x n arrays.
    unsafe {
        f(
            &(b'N' as c_char),
            &(b'T' as c_char),
            &ni,
            &ni,
            &ni,
            &alpha,
            m.as_ptr(),
            &ni,
            m.as_ptr(),
            &ni,
            &beta,
            a.as_mut_ptr(),
            &ni,
        )
    };
    for i in 0..n {
        a[i + i * n] += 1.0;
    }
    a.into_iter().map(R::from_f64).collect()
}

/// A symbol as its prototype.
fn unsafe_cast<F: Copy>(p: *const c_void) -> F {
    assert_eq!(
        std::mem::size_of::<F>(),
        std::mem::size_of::<*const c_void>()
    );
    // SAFETY: every caller names the prototype of the symbol it passes (an `unsafe extern "C"`
    // function pointer, the size of a code pointer).
    unsafe { std::mem::transmute_copy(&p) }
}

/// One timed call of a library on fresh inputs: returns (seconds, result to compare).
type Run<'a> = dyn FnMut(*const c_void) -> (f64, Vec<f64>) + 'a;

struct Row {
    routine: String,
    n: usize,
    openblas: f64,
    faer: f64,
    pairs: usize,
    diff: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Warm-up, then alternating timed calls until the budget or 7 pairs.
fn measure(routine: String, n: usize, pair: &Pair, budget: f64, run: &mut Run<'_>) -> Row {
    let (_, ref_a) = run(pair.openblas);
    let (_, ref_b) = run(pair.faer);
    let scale = ref_a
        .iter()
        .fold(0.0f64, |m, x| m.max(x.abs()))
        .max(f64::MIN_POSITIVE);
    let diff = ref_a
        .iter()
        .zip(&ref_b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale;
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while ta.len() < 7 && (ta.is_empty() || start.elapsed().as_secs_f64() < budget) {
        ta.push(run(pair.openblas).0);
        tb.push(run(pair.faer).0);
    }
    Row {
        routine,
        n,
        pairs: ta.len(),
        openblas: median(ta),
        faer: median(tb),
        diff,
    }
}

fn ch(c: u8) -> c_char {
    c as c_char
}

fn cases<R: Real>(
    lib: &OpenBlas,
    routines: &[String],
    sizes: &[usize],
    budget: f64,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let p = R::LETTER;
    for &n in sizes {
        let ni = n as I;
        let rng = &mut Rng(n as u64 * 31 + p as u64);
        for r in routines {
            let name = format!("{p}{r}_");
            let pair = lib.pair(&name)?;
            let label = format!("{p}{r}");
            let row = match r.as_str() {
                "gemm" => {
                    let (a, b) = (rng.matrix::<R>(n * n), rng.matrix::<R>(n * n));
                    let mut run = |f: *const c_void| {
                        let g: Gemm<R> = unsafe_cast(f);
                        let mut c = vec![R::default(); n * n];
                        let (one, zero) = (R::from_f64(1.0), R::from_f64(0.0));
                        let t = Instant::now();
                        // SAFETY: n x n arrays.
                        unsafe {
                            g(
                                &ch(b'N'),
                                &ch(b'N'),
                                &ni,
                                &ni,
                                &ni,
                                &one,
                                a.as_ptr(),
                                &ni,
                                b.as_ptr(),
                                &ni,
                                &zero,
                                c.as_mut_ptr(),
                                &ni,
                            )
                        };
                        (
                            t.elapsed().as_secs_f64(),
                            c.iter().map(|x| x.to_f64()).collect(),
                        )
                    };
                    measure(label, n, &pair, budget, &mut run)
                }
                "potrf" => {
                    let a0 = spd::<R>(rng, n);
                    let mut run = |f: *const c_void| {
                        let g: Potrf<R> = unsafe_cast(f);
                        let mut a = a0.clone();
                        let mut info = 0;
                        let t = Instant::now();
                        // SAFETY: an n x n array.
                        unsafe { g(&ch(b'L'), &ni, a.as_mut_ptr(), &ni, &mut info) };
                        let s = t.elapsed().as_secs_f64();
                        assert_eq!(info, 0, "{name}");
                        let lower = (0..n)
                            .flat_map(|j| (j..n).map(move |i| i + j * n))
                            .map(|k| a[k].to_f64())
                            .collect();
                        (s, lower)
                    };
                    measure(label, n, &pair, budget, &mut run)
                }
                "gesv" => {
                    let (a0, b0) = (rng.matrix::<R>(n * n), rng.matrix::<R>(n));
                    let mut run = |f: *const c_void| {
                        let g: Gesv<R> = unsafe_cast(f);
                        let (mut a, mut b) = (a0.clone(), b0.clone());
                        let mut ipiv = vec![0; n];
                        let mut info = 0;
                        let t = Instant::now();
                        // SAFETY: arrays sized for n and one right-hand side.
                        unsafe {
                            g(
                                &ni,
                                &1,
                                a.as_mut_ptr(),
                                &ni,
                                ipiv.as_mut_ptr(),
                                b.as_mut_ptr(),
                                &ni,
                                &mut info,
                            )
                        };
                        let s = t.elapsed().as_secs_f64();
                        assert_eq!(info, 0, "{name}");
                        (s, b.iter().map(|x| x.to_f64()).collect())
                    };
                    measure(label, n, &pair, budget, &mut run)
                }
                "syevd" => {
                    let a0 = spd::<R>(rng, n);
                    let mut run = |f: *const c_void| {
                        let g: Syevd<R> = unsafe_cast(f);
                        let mut a = a0.clone();
                        let mut w = vec![R::default(); n];
                        let (mut q, mut iq, mut info) = ([R::default()], [0], 0);
                        // SAFETY: a query, then arrays of the answered sizes.
                        unsafe {
                            g(
                                &ch(b'V'),
                                &ch(b'L'),
                                &ni,
                                a.as_mut_ptr(),
                                &ni,
                                w.as_mut_ptr(),
                                q.as_mut_ptr(),
                                &-1,
                                iq.as_mut_ptr(),
                                &-1,
                                &mut info,
                            )
                        };
                        let lw = q[0].to_f64() as usize + 1;
                        let mut work = vec![R::default(); lw];
                        let mut iwork = vec![0; iq[0] as usize];
                        let t = Instant::now();
                        // SAFETY: as above.
                        unsafe {
                            g(
                                &ch(b'V'),
                                &ch(b'L'),
                                &ni,
                                a.as_mut_ptr(),
                                &ni,
                                w.as_mut_ptr(),
                                work.as_mut_ptr(),
                                &(lw as I),
                                iwork.as_mut_ptr(),
                                &iq[0],
                                &mut info,
                            )
                        };
                        let s = t.elapsed().as_secs_f64();
                        assert_eq!(info, 0, "{name}");
                        (s, w.iter().map(|x| x.to_f64()).collect())
                    };
                    measure(label, n, &pair, budget, &mut run)
                }
                "gesdd" => {
                    let a0 = rng.matrix::<R>(n * n);
                    let mut run = |f: *const c_void| {
                        let g: Gesdd<R> = unsafe_cast(f);
                        let mut a = a0.clone();
                        let mut s = vec![R::default(); n];
                        let (mut u, mut vt) =
                            (vec![R::default(); n * n], vec![R::default(); n * n]);
                        let mut iwork = vec![0; 8 * n];
                        let (mut q, mut info) = ([R::default()], 0);
                        // SAFETY: a query, then arrays of the answered size.
                        unsafe {
                            g(
                                &ch(b'S'),
                                &ni,
                                &ni,
                                a.as_mut_ptr(),
                                &ni,
                                s.as_mut_ptr(),
                                u.as_mut_ptr(),
                                &ni,
                                vt.as_mut_ptr(),
                                &ni,
                                q.as_mut_ptr(),
                                &-1,
                                iwork.as_mut_ptr(),
                                &mut info,
                            )
                        };
                        let lw = q[0].to_f64() as usize + 1;
                        let mut work = vec![R::default(); lw];
                        let t = Instant::now();
                        // SAFETY: as above.
                        unsafe {
                            g(
                                &ch(b'S'),
                                &ni,
                                &ni,
                                a.as_mut_ptr(),
                                &ni,
                                s.as_mut_ptr(),
                                u.as_mut_ptr(),
                                &ni,
                                vt.as_mut_ptr(),
                                &ni,
                                work.as_mut_ptr(),
                                &(lw as I),
                                iwork.as_mut_ptr(),
                                &mut info,
                            )
                        };
                        let secs = t.elapsed().as_secs_f64();
                        assert_eq!(info, 0, "{name}");
                        (secs, s.iter().map(|x| x.to_f64()).collect())
                    };
                    measure(label, n, &pair, budget, &mut run)
                }
                other => {
                    return Err(format!(
                        "unknown routine {other} (gemm, potrf, gesv, syevd, gesdd)"
                    ))
                }
            };
            println!(
                "{:<7} n={:<5} openblas {:>9.4}s  faer {:>9.4}s  faer/openblas {:>6.2}  pairs {}  max rel diff {:.1e}",
                row.routine, row.n, row.openblas, row.faer, row.faer / row.openblas, row.pairs, row.diff
            );
            rows.push(row);
        }
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("embedded_vs_openblas: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut lib = std::env::var("OPENBLAS_LIB").unwrap_or_else(|_| "libopenblas.so.0".into());
    let mut sizes = vec![256, 512, 1024, 2048];
    let mut routines: Vec<String> = ["gemm", "potrf", "gesv", "syevd", "gesdd"]
        .map(String::from)
        .to_vec();
    let mut precisions = vec!["d".to_string(), "s".to_string()];
    let mut budget = 2.0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--lib" => lib = value()?,
            "--sizes" => {
                sizes = value()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|_| format!("bad size {s:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--routines" => routines = value()?.split(',').map(|s| s.trim().to_string()).collect(),
            "--precisions" => {
                precisions = value()?.split(',').map(|s| s.trim().to_string()).collect()
            }
            "--budget" => budget = value()?.parse().map_err(|_| "bad --budget".to_string())?,
            "-h" | "--help" => {
                println!("usage: embedded_vs_openblas [--lib PATH] [--sizes 256,512,1024,2048] [--routines gemm,potrf,gesv,syevd,gesdd] [--precisions d,s] [--budget SECONDS]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other} (see --help)")),
        }
    }
    let lib = OpenBlas::open(&lib)?;
    println!(
        "embedded (faer 0.24, {} rayon threads) vs {} (OPENBLAS_NUM_THREADS={}), {} CPUs",
        faer::Par::rayon(0).degree(),
        lib.path,
        std::env::var("OPENBLAS_NUM_THREADS").unwrap_or_else(|_| "unset".into()),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut rows = Vec::new();
    for p in &precisions {
        match p.as_str() {
            "d" => cases::<f64>(&lib, &routines, &sizes, budget, &mut rows)?,
            "s" => cases::<f32>(&lib, &routines, &sizes, budget, &mut rows)?,
            other => return Err(format!("unknown precision {other} (d, s)")),
        }
    }
    println!("\n| routine | n | OpenBLAS s | faer s | faer / OpenBLAS |");
    println!("| --- | --- | --- | --- | --- |");
    for r in &rows {
        println!(
            "| {} | {} | {:.4} | {:.4} | {:.2} |",
            r.routine,
            r.n,
            r.openblas,
            r.faer,
            r.faer / r.openblas
        );
    }
    Ok(())
}
