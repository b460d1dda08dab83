//! Criterion benches: uncontended acquire+release (target < 50 us) and hand-over latency from
//! a holder's release to the next waiter's return from `acquire` in another process
//! (target < 5 ms; the seed polled every 50 ms). Also prints a percentile summary.
//!
//! `cargo bench -p gpukit-mutex --bench mutex`; the summary alone (no criterion runs):
//! `cargo bench -p gpukit-mutex --bench mutex -- no-such-bench`. `GPUKIT_MUTEX_BENCH_UNCONTENDED`
//! and `GPUKIT_MUTEX_BENCH_HANDOVERS` set the summary's sample counts (default 2000 and 300).
//!
//! The hand-over time ends when `acquire` returns, so it includes everything the waiter does
//! after the grant (it once included ~13 ms of inotify teardown; see `src/wait.rs`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::Criterion;
use gpukit_mutex::{DeviceSource, GpuMutex};

const ROLE: &str = "GPUKIT_MUTEX_BENCH_ROLE";

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mutex(dir: &Path) -> GpuMutex {
    GpuMutex::builder()
        .device_source(DeviceSource::None)
        .ignore_env()
        .visible_devices([0])
        .lock_dir(dir)
        .build()
        .expect("build")
}

fn tickets(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("gpukit-ticket.")
                })
                .count()
        })
        .unwrap_or(0)
}

/// The peer process: on "hold", acquire; once somebody queues, release and report the time.
fn peer() {
    let dir = PathBuf::from(std::env::var("GPUKIT_MUTEX_BENCH_DIR").expect("dir"));
    let m = mutex(&dir);
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line != "hold" {
            break;
        }
        let g = m.acquire(1).expect("peer acquire");
        writeln!(out, "held").expect("write");
        out.flush().expect("flush");
        let t = Instant::now();
        while tickets(&dir) == 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_micros(200));
        }
        // Let the waiter settle into its sleep.
        std::thread::sleep(Duration::from_micros(500));
        let t0 = mono_ns();
        drop(g);
        writeln!(out, "released {t0}").expect("write");
        out.flush().expect("flush");
    }
}

struct Peer {
    child: Child,
    tx: ChildStdin,
    rx: BufReader<ChildStdout>,
}

impl Peer {
    fn spawn(dir: &Path) -> Peer {
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .env(ROLE, "peer")
            .env("GPUKIT_MUTEX_BENCH_DIR", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn peer");
        let tx = child.stdin.take().expect("stdin");
        let rx = BufReader::new(child.stdout.take().expect("stdout"));
        Peer { child, tx, rx }
    }

    /// One hand-over: the peer holds, we queue, the peer releases; returns release->grant.
    fn handover(&mut self, m: &GpuMutex) -> Duration {
        writeln!(self.tx, "hold").expect("send");
        self.tx.flush().expect("flush");
        let mut line = String::new();
        self.rx.read_line(&mut line).expect("read");
        assert_eq!(line.trim(), "held");
        let g = m.acquire(1).expect("acquire");
        let t1 = mono_ns();
        line.clear();
        self.rx.read_line(&mut line).expect("read");
        let t0: u64 = line
            .trim()
            .strip_prefix("released ")
            .and_then(|s| s.parse().ok())
            .expect("t0");
        drop(g);
        Duration::from_nanos(t1.saturating_sub(t0))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = writeln!(self.tx, "quit");
        let _ = self.child.wait();
    }
}

fn percentiles(label: &str, mut v: Vec<Duration>) {
    v.sort();
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    println!(
        "{label}: n={} p50={:?} p90={:?} p99={:?} max={:?}",
        v.len(),
        p(0.5),
        p(0.9),
        p(0.99),
        v[v.len() - 1]
    );
}

fn main() {
    if std::env::var(ROLE).as_deref() == Ok("peer") {
        peer();
        return;
    }
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().to_path_buf();
    let m = mutex(&dir);

    // Summary first (plain numbers, independent of criterion's statistics).
    let count = |var: &str, dflt: usize| {
        std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(dflt)
    };
    let mut v = Vec::new();
    for _ in 0..count("GPUKIT_MUTEX_BENCH_UNCONTENDED", 2000) {
        let s = Instant::now();
        drop(m.acquire(1).expect("acquire"));
        v.push(s.elapsed());
    }
    percentiles("uncontended acquire+release (target < 50us)", v);
    let mut peer = Peer::spawn(&dir);
    let v: Vec<Duration> = (0..count("GPUKIT_MUTEX_BENCH_HANDOVERS", 300))
        .map(|_| peer.handover(&m))
        .collect();
    percentiles("hand-over release -> next waiter (target < 5ms)", v);

    let mut c = Criterion::default().configure_from_args();
    c.bench_function("uncontended_acquire_release", |b| {
        b.iter(|| drop(m.acquire(1).expect("acquire")))
    });
    c.bench_function("handover_latency", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| peer.handover(&m)).sum())
    });
    c.final_summary();
}
