//! Integration tests of the offload shim and CLI (no GPU needed): under `offload run`, numpy's
//! results are bit-identical to a run without the shim, the exit summary lists the intercepted
//! routines, bad settings are reported once without aborting, numpy's own linalg test suite
//! passes, and the shim never harms the host program (broken pipes, a reused stderr, fork from
//! a threaded parent, symbols probed in a program without BLAS, exit status by signal, profile
//! writes only into an existing file).
//!
//! Python: `GPUKIT_PYTHON`, else the CI venv `/opt/gpukit-offload-venv/bin/python`
//! (`.ci/offload-deps.sh`), else `python3`. Without numpy (or pytest for the suite) a test skips
//! with a printed reason, unless `GPUKIT_REQUIRE_NUMPY=1` or the CI venv exists.

use std::path::PathBuf;
use std::process::{Command, Output};

const CI_VENV: &str = "/opt/gpukit-offload-venv/bin/python";

fn examples_dir() -> PathBuf {
    // target/<profile>/deps/offload_shim-HASH -> target/<profile>/examples
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
}

fn offload() -> PathBuf {
    let p = examples_dir().join("offload");
    assert!(
        p.exists(),
        "{} missing: `cargo test` builds the examples first",
        p.display()
    );
    assert!(
        examples_dir().join("liboffload_preload.so").exists(),
        "liboffload_preload.so missing"
    );
    p
}

fn python() -> String {
    if let Ok(p) = std::env::var("GPUKIT_PYTHON") {
        return p;
    }
    if std::path::Path::new(CI_VENV).exists() {
        return CI_VENV.into();
    }
    "python3".into()
}

fn required() -> bool {
    std::env::var("GPUKIT_REQUIRE_NUMPY").is_ok_and(|v| v == "1")
        || std::path::Path::new(CI_VENV).exists()
}

/// True when `python` can import all modules; else skips (prints) or panics when required.
fn have(test: &str, modules: &str) -> bool {
    let ok = Command::new(python())
        .args(["-c", &format!("import {modules}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if required() {
            panic!("{test}: {} cannot import {modules} but numpy tests are required (GPUKIT_REQUIRE_NUMPY=1 or the CI venv)", python());
        }
        eprintln!("SKIPPED {test}: {} cannot import {modules} (run .ci/offload-deps.sh or set GPUKIT_PYTHON)", python());
    }
    ok
}

const SCRIPT: &str = r#"
import hashlib, numpy as np
rng = np.random.default_rng(7)
out = []
for n in (3, 50, 300):
    a = rng.standard_normal((n, n)); b = rng.standard_normal((n, n))
    s = a @ a.T + n * np.eye(n)
    out += [a @ b, a.astype(np.float32) @ b.astype(np.float32), np.linalg.solve(a, b), np.linalg.cholesky(s),
            np.linalg.eigh(s)[0], np.linalg.svd(a, compute_uv=False), np.linalg.svd(a)[0], np.linalg.qr(a)[1],
            a @ a.T, np.linalg.inv(a), np.linalg.det(a)]
    c = a + 1j * b
    out += [c @ c, np.linalg.solve(c, c.T), np.linalg.eigh(c @ c.conj().T)[0], c.astype(np.complex64) @ c.astype(np.complex64)]
print(hashlib.sha256(b"".join(np.ascontiguousarray(x).tobytes() for x in out)).hexdigest())
"#;

/// The exit summary's line for routine `r` (`dgemm`) in a shim run's stderr, and its call count.
fn summary_line<'a>(err: &'a str, r: &str) -> (&'a str, u64) {
    let line = err
        .lines()
        .find(|l| l.starts_with(&format!("gpukit-offload: {r} calls=")))
        .unwrap_or_else(|| panic!("no summary line for {r} in:\n{err}"));
    let calls = line
        .split("calls=")
        .nth(1)
        .and_then(|x| x.split(' ').next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no call count in {line}"));
    (line, calls)
}

fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("spawn");
    assert!(
        o.status.success(),
        "{:?} failed: {}\n{}",
        cmd,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The embedded profile as if measured on this machine (so its CPU curves are trusted and the
/// fast-path thresholds let medium calls through to the dispatcher), written into `dir`.
fn local_profile(dir: &tempfile::TempDir) -> PathBuf {
    use gpukit::offload::profile::{Machine, Profile};
    let mut p = Profile::embedded();
    p.machine.cpu = Machine::local_cpu();
    let path = dir.path().join("local-profile.json");
    p.save(&path).expect("write the local profile");
    path
}

fn isolated(cmd: &mut Command, dir: &tempfile::TempDir) {
    // never touch the user's profile; every call on the CPU library: bit-identity is the CPU
    // path's property (on a GPU host `offload run` sends this script's larger calls to the
    // GPU, whose results gpukit-offload's gpu_tests check against the CPU's with tolerances)
    cmd.env("GPUKIT_OFFLOAD_PROFILE", dir.path().join("profile.json"))
        .env("GPUKIT_OFFLOAD_PERSIST", "0")
        .env("GPUKIT_OFFLOAD_GPU", "off");
}

#[test]
fn numpy_results_bit_identical_and_summary_lists_calls() {
    if !have(
        "numpy_results_bit_identical_and_summary_lists_calls",
        "numpy",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = run(Command::new(python()).args(["-c", SCRIPT]));
    let mut c = Command::new(offload());
    c.args(["run", &python(), "-c", SCRIPT]);
    isolated(&mut c, &dir);
    let shim = run(&mut c);
    let (h0, h1) = (
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&shim.stdout),
    );
    assert_eq!(h0.trim().len(), 64, "{h0}");
    assert_eq!(h0, h1, "numpy results differ under the shim");
    let err = String::from_utf8_lossy(&shim.stderr);
    for r in [
        "dgemm", "sgemm", "zgemm", "cgemm", "dsyrk", "dgesv", "zgesv", "dpotrf", "dsyevd",
        "zheevd", "dgesdd", "dgeqrf", "dgetrf",
    ] {
        let (line, calls) = summary_line(&err, r);
        assert!(calls >= 1, "{line}");
        assert!(
            line.contains(" gpu=") && line.contains(" cpu=") && line.contains(" saved="),
            "{line}"
        );
    }
}

/// scipy's simple eigensolver driver (`eigh(driver="ev")`, which `pinvh` and scikit-learn's
/// covariance estimators call): syev / heev in every precision, intercepted (the summary lists
/// them) and bit-identical on the CPU path.
const SCRIPT_EV: &str = r#"
import hashlib, numpy as np, scipy.linalg as sla
rng = np.random.default_rng(5)
out = []
for n in (1, 4, 60, 300):
    a = rng.standard_normal((n, n)); s = a @ a.T + np.eye(n)
    w, v = sla.eigh(s, driver="ev")
    out += [w, v, sla.eigh(s, driver="ev", eigvals_only=True, lower=False), sla.pinvh(s)]
    c = a + 1j * rng.standard_normal((n, n)); h = c @ c.conj().T + np.eye(n)
    out += [sla.eigh(h, driver="ev")[1], sla.eigh(h.astype(np.complex64), driver="ev", eigvals_only=True),
            sla.eigh(s.astype(np.float32), driver="ev")[1]]
print(hashlib.sha256(b"".join(np.ascontiguousarray(x).tobytes() for x in out)).hexdigest())
"#;

#[test]
fn scipy_simple_eigh_driver_is_intercepted_and_bit_identical() {
    if !have(
        "scipy_simple_eigh_driver_is_intercepted_and_bit_identical",
        "numpy, scipy",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = run(Command::new(python()).args(["-c", SCRIPT_EV]));
    let mut c = Command::new(offload());
    c.args(["run", &python(), "-c", SCRIPT_EV]);
    isolated(&mut c, &dir);
    let shim = run(&mut c);
    let (h0, h1) = (
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&shim.stdout),
    );
    assert_eq!(h0.trim().len(), 64, "{h0}");
    assert_eq!(h0, h1, "scipy results differ under the shim");
    let err = String::from_utf8_lossy(&shim.stderr);
    for (r, at_least) in [("dsyev", 12), ("zheev", 4), ("cheev", 4), ("ssyev", 4)] {
        let (line, calls) = summary_line(&err, r);
        assert!(calls >= at_least, "{line}");
    }
}

/// `calibrate --only` with a key the model does not know fails at once, names the option and
/// the key, and writes no profile (no GPU or Python needed: the keys are checked first).
#[test]
fn calibrate_only_with_an_unknown_kind_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    for bad in ["syev,eigh", "syevd+a", " , "] {
        let o = Command::new(offload())
            .args(["calibrate", "--only", bad, "--output"])
            .arg(&out)
            .env("GPUKIT_OFFLOAD_PROFILE", dir.path().join("profile.json"))
            .output()
            .expect("spawn");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains("--only"), "{bad}: {err}");
        assert!(!out.exists() && !dir.path().join("profile.json").exists());
    }
}

#[test]
fn bad_settings_are_reported_and_the_program_runs() {
    if !have("bad_settings_are_reported_and_the_program_runs", "numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let corrupt = dir.path().join("corrupt.json");
    std::fs::write(&corrupt, "{ not json").unwrap();
    let plain = run(Command::new(python()).args(["-c", SCRIPT]));
    let o = run(Command::new(offload())
        .args(["run", &python(), "-c", SCRIPT])
        .env("GPUKIT_OFFLOAD_LEVEL", "eleven")
        .env("GPUKIT_OFFLOAD_LOG", "loud")
        .env("GPUKIT_OFFLOAD_PROFILE", &corrupt)
        .env("GPUKIT_OFFLOAD_PERSIST", "0")
        .env("GPUKIT_OFFLOAD_GPU", "off"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("GPUKIT_OFFLOAD_LEVEL=\"eleven\"") && err.contains("1 to 10"),
        "{err}"
    );
    assert!(err.contains("GPUKIT_OFFLOAD_LOG=\"loud\""), "{err}");
    assert!(
        err.contains("corrupt.json") && err.contains("built-in default profile"),
        "{err}"
    );
    assert_eq!(plain.stdout, o.stdout);
    // the corrupt file was left for the user to see
    assert_eq!(std::fs::read_to_string(&corrupt).unwrap(), "{ not json");
    // LOG=off prints nothing
    let o = run(Command::new(offload())
        .args(["run", &python(), "-c", SCRIPT])
        .env("GPUKIT_OFFLOAD_LOG", "off")
        .env("GPUKIT_OFFLOAD_PERSIST", "0"));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("gpukit-offload:"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn numpy_linalg_suite_passes_under_the_shim() {
    if !have(
        "numpy_linalg_suite_passes_under_the_shim",
        "numpy, pytest, hypothesis",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(offload());
    c.args([
        "run",
        &python(),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--pyargs",
        "numpy.linalg",
    ])
    .current_dir(dir.path());
    isolated(&mut c, &dir);
    // the suite checks results with tolerances: the GPU may take the calls it wins
    c.env("GPUKIT_OFFLOAD_GPU", "auto");
    let o = c.output().expect("spawn");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "numpy.linalg tests failed under the shim:\n{out}\n{err}"
    );
    assert!(out.contains("passed"), "{out}");
    assert!(err.contains("gpukit-offload: dgesv calls="), "{err}");
    eprintln!("{}", out.lines().last().unwrap_or(""));
}

#[test]
fn cli_explain_and_missing_command() {
    let dir = tempfile::tempdir().unwrap();
    // with a profile of this machine: one row per kind, precision and library
    let mut c = Command::new(offload());
    c.arg("explain")
        .env("GPUKIT_OFFLOAD_PROFILE", local_profile(&dir))
        .env("GPUKIT_OFFLOAD_PERSIST", "0");
    let o = run(&mut c);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("local-profile.json") && out.contains("gemm") && out.contains("gesdd+a"),
        "{out}"
    );
    // the built-in default measured elsewhere: its CPU curves are not used here
    let mut c = Command::new(offload());
    c.arg("explain");
    isolated(&mut c, &dir);
    let o = run(&mut c);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("built-in default"), "{out}");
    let o = Command::new(offload())
        .args(["run", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot run"));
}

/// `offload run` keeps the program's exit status, and 128 + the signal that killed it.
#[test]
fn exit_status_and_signals_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    for (code, want) in [
        ("import sys; sys.exit(3)", 3),
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
            128 + 15,
        ),
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            128 + 9,
        ),
    ] {
        let mut c = Command::new(offload());
        c.args(["run", "python3", "-c", code]);
        isolated(&mut c, &dir);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(want), "{code}: {o:?}");
    }
}

/// A closed pipe on stderr/stdout: no abort of the host program (its exit status stays 0) and no
/// panic of `offload` itself.
#[test]
fn broken_pipes_never_panic() {
    if !have("broken_pipes_never_panic", "numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    use std::process::Stdio;
    let mut c = Command::new(offload());
    c.args([
        "run",
        &python(),
        "-c",
        "import numpy as np, time; a = np.random.rand(300, 300); a @ a; time.sleep(0.5)",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    isolated(&mut c, &dir);
    let mut child = c.spawn().unwrap();
    // close both read ends before the program prints its summary
    drop(child.stdout.take());
    drop(child.stderr.take());
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(0), "{st:?}");
    // offload explain | head -1
    let mut c = Command::new(offload());
    c.arg("explain")
        .env("GPUKIT_OFFLOAD_PROFILE", local_profile(&dir))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut first = [0u8; 8];
    use std::io::Read;
    let _ = child.stdout.as_mut().unwrap().read(&mut first);
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// With stderr closed, a file the program opens takes descriptor 2: the exit summary must not
/// land in it (it goes to the stderr the shim saw when it was loaded).
#[test]
fn the_summary_never_goes_into_a_reused_descriptor() {
    if !have("the_summary_never_goes_into_a_reused_descriptor", "numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.txt");
    let script = format!(
        "import os, numpy as np\nos.close(2)\nfd = os.open({:?}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\nassert fd == 2, fd\na = np.random.rand(400, 400)\nb = a @ a\nos.write(fd, b'data')\n",
        data.display().to_string()
    );
    let mut c = Command::new(python());
    c.args(["-c", &script])
        .env("LD_PRELOAD", examples_dir().join("liboffload_preload.so"))
        .env("GPUKIT_OFFLOAD_LOG", "summary");
    isolated(&mut c, &dir);
    let o = run(&mut c);
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "data");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("gpukit-offload: dgemm calls="), "{err}");
}

/// A parent with three threads doing linear algebra forks children: none hangs (the fork
/// handlers keep the dispatcher's locks consistent and its first-use values complete), and each
/// child's summary has its own counts. The parent's threads multiply through scipy's OpenBLAS,
/// the children through numpy's, another copy: OpenBLAS's own buffer lock (`alloc_lock` in
/// `blas_memory_alloc`) is not fork-safe, and a child calling into the copy whose lock a parent
/// thread held at the fork hangs there with or without the shim (seen here: the child blocked in
/// `blas_memory_alloc`); both copies' calls go through the one dispatcher.
#[test]
fn fork_from_a_threaded_parent_never_hangs() {
    if !have("fork_from_a_threaded_parent_never_hangs", "numpy, scipy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The children leave through C's exit() (the summary's atexit hook runs; Python's own
    // finalization in a forked child of a threaded parent can block on the import lock), and
    // OpenBLAS runs single-threaded: its own thread pool does not survive fork() (the plain
    // program hangs with it too).
    let script = r#"
import os, sys, threading, ctypes, numpy as np
from scipy.linalg import blas
libc_exit = ctypes.CDLL(None).exit
stop = False
def work():
    a = np.asfortranarray(np.random.rand(300, 300))
    while not stop:
        blas.dgemm(1.0, a, a)
ts = [threading.Thread(target=work) for _ in range(3)]
for t in ts: t.start()
for i in range(40):
    pid = os.fork()
    if pid == 0:
        b = np.ones((300, 300))
        b @ b
        libc_exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
stop = True
for t in ts: t.join()
print("forked 40")
"#;
    for round in 0..3 {
        let mut c = Command::new(python());
        c.args(["-c", script])
            .env("LD_PRELOAD", examples_dir().join("liboffload_preload.so"))
            .env("GPUKIT_OFFLOAD_LOG", "summary")
            .env("GPUKIT_OFFLOAD_GPU", "off")
            .env("GPUKIT_OFFLOAD_PERSIST", "0")
            .env("OPENBLAS_NUM_THREADS", "1")
            .env("GPUKIT_OFFLOAD_PROFILE", local_profile(&dir));
        let (o, stacks) = output_or_stacks(&mut c, std::time::Duration::from_secs(120));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(0),
            "round {round} (None: hung; the stacks of the hung processes follow the output):\n{err}\n{stacks}"
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("forked 40"));
        // 40 children's summaries with their own single call, and the parent's with many
        let child_lines = err
            .lines()
            .filter(|l| l.starts_with("gpukit-offload: dgemm calls=1 "))
            .count();
        assert_eq!(child_lines, 40, "round {round}:\n{err}");
    }
}

/// Runs `cmd` to completion, or for at most `limit`: a process tree still running then has the
/// stacks of every process in it taken with gdb (where gdb is installed; a hang seen rarely
/// on a loaded CI machine is then diagnosable from the log) and is killed. Returns the output
/// (exit status `None` when killed) and the stacks ("" when it finished).
fn output_or_stacks(cmd: &mut Command, limit: std::time::Duration) -> (Output, String) {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // the pipes are read as the program writes (a full pipe would stall it)
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let t0 = std::time::Instant::now();
    let mut stacks = String::new();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > limit {
            // the tree from /proc (every process's parent), the program first
            let parents = process_parents();
            let mut pids = vec![child.id()];
            let mut i = 0;
            while i < pids.len() {
                let p = pids[i];
                pids.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
                i += 1;
            }
            for pid in &pids {
                let bt = Command::new("timeout")
                    .args([
                        "60",
                        "gdb",
                        "-p",
                        &pid.to_string(),
                        "-batch",
                        "-ex",
                        "thread apply all bt",
                    ])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_else(|e| format!("(no gdb: {e})"));
                let keep: Vec<&str> = bt
                    .lines()
                    .filter(|l| l.starts_with('#') || l.starts_with("Thread"))
                    .collect();
                stacks += &format!("=== process {pid}\n{}\n", keep.join("\n"));
            }
            // the parent first: it can then start nothing more in its children's place
            for pid in &pids {
                // SAFETY: kill(2) of a process of this test's own tree; no memory involved.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            }
            break child.wait().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let o = Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    };
    (o, stacks)
}

/// (pid, parent pid) of every process in /proc.
fn process_parents() -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // "pid (comm) state ppid ...": the name may hold spaces and parentheses
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            v.push((pid, ppid));
        }
    }
    v
}

/// The hang guard above: a process tree past its limit is killed, whole, and its processes'
/// stacks come back.
#[test]
fn a_hung_process_tree_is_killed_with_its_stacks() {
    let mut c = Command::new("sh");
    c.args(["-c", "sleep 300 & sleep 300; echo never"]);
    let t0 = std::time::Instant::now();
    let (o, stacks) = output_or_stacks(&mut c, std::time::Duration::from_secs(1));
    assert_eq!(o.status.code(), None, "killed by a signal");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("never"));
    // the shell and both sleeps
    assert_eq!(stacks.matches("=== process ").count(), 3, "{stacks}");
    // the background sleep held the pipes too: it was killed, or this would wait 300 s
    assert!(t0.elapsed() < std::time::Duration::from_secs(200));
}

/// A program without any BLAS that finds the shim's symbols (`ctypes.CDLL(None)`) gets a
/// correct result from the CPU path, not a crash.
#[test]
fn probed_symbols_work_in_a_program_without_blas() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import ctypes
lib = ctypes.CDLL(None)
for name, I in (("dgemm_64_", ctypes.c_int64), ("dgemm_", ctypes.c_int32), ("scipy_dgemm_64_", ctypes.c_int64)):
    f = getattr(lib, name)
    n = I(2)
    one, zero = ctypes.c_double(1.0), ctypes.c_double(0.0)
    A = (ctypes.c_double * 4)(1, 2, 3, 4)
    B = (ctypes.c_double * 4)(5, 6, 7, 8)
    C = (ctypes.c_double * 4)()
    t = ctypes.c_char(b"N")
    r = ctypes.byref
    f(r(t), r(t), r(n), r(n), r(n), r(one), A, r(n), B, r(n), r(zero), C, r(n))
    assert list(C) == [23.0, 34.0, 31.0, 46.0], (name, list(C))
# a LAPACK routine with info: dgesv_64_
f = lib.dgesv_64_
n, nrhs, info = ctypes.c_int64(2), ctypes.c_int64(1), ctypes.c_int64(99)
A = (ctypes.c_double * 4)(4, 1, 2, 3)
b = (ctypes.c_double * 2)(1, 2)
piv = (ctypes.c_int64 * 2)()
f(ctypes.byref(n), ctypes.byref(nrhs), A, ctypes.byref(n), piv, b, ctypes.byref(n), ctypes.byref(info))
assert info.value == 0, info.value
# [[4, 2], [1, 3]] x = [1, 2]  ->  x = [-0.1, 0.7]
assert abs(b[0] + 0.1) < 1e-12 and abs(b[1] - 0.7) < 1e-12, list(b)
print("ok")
"#;
    let mut c = Command::new("python3");
    c.args(["-c", script])
        .env("LD_PRELOAD", examples_dir().join("liboffload_preload.so"));
    isolated(&mut c, &dir);
    let o = run(&mut c);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok");
}

/// A bad setting is named once in a process tree (not again by each child), and a profile path
/// that names no file is never created.
#[test]
fn bad_settings_named_once_and_no_stray_profile() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("missing").join("profile.json");
    let o = run(Command::new(offload())
        .args([
            "run",
            "python3",
            "-c",
            "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import subprocess, sys; subprocess.run([sys.executable, \"-c\", \"pass\"])'], check=True)",
        ])
        .env("GPUKIT_OFFLOAD_INJECT_FAILURE", "garbage")
        .env("GPUKIT_OFFLOAD_CPU_LIB", "/nonexistent/libopenblas.so")
        .env("GPUKIT_OFFLOAD_PROFILE", &nowhere)
        .env("GPUKIT_OFFLOAD_PERSIST", "1"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("GPUKIT_OFFLOAD_INJECT_FAILURE=\"garbage\"")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(
        err.matches("GPUKIT_OFFLOAD_CPU_LIB=\"/nonexistent/libopenblas.so\"")
            .count(),
        1,
        "{err}"
    );
    assert!(!nowhere.exists() && !nowhere.parent().unwrap().exists());
}

/// Learning merged into an existing profile keeps fields this version does not know.
#[test]
fn learning_keeps_unknown_profile_fields() {
    if !have("learning_keeps_unknown_profile_fields", "numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = local_profile(&dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen('{', "{\n  \"site_note\": \"kept by every rewrite\",", 1);
    std::fs::write(&path, text).unwrap();
    run(Command::new(offload())
        .args([
            "run",
            &python(),
            "-c",
            "import numpy as np; a = np.random.rand(500, 500); [a @ a for _ in range(3)]",
        ])
        .env("GPUKIT_OFFLOAD_PROFILE", &path)
        .env("GPUKIT_OFFLOAD_GPU", "off")
        .env("GPUKIT_OFFLOAD_PERSIST", "1"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("\"site_note\": \"kept by every rewrite\""),
        "{text}"
    );
    assert!(
        text.contains("\"cpu_points\": [") && text.contains("\"library\": \"scipy_openblas64\""),
        "nothing learned was written"
    );
}

/// A panic in the GPU start-up (injected; runs even without a driver) with the GPU forced:
/// the program neither hangs (the phase ends FAILED and calls run on the CPU) nor gets the
/// panic's message in the file it opened on descriptor 2 (the shim's panic hook writes to its
/// private stderr).
#[test]
fn a_start_up_panic_neither_hangs_nor_writes_to_a_reused_fd_2() {
    if !have(
        "a_start_up_panic_neither_hangs_nor_writes_to_a_reused_fd_2",
        "numpy",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.txt");
    let script = format!(
        "import os, time, numpy as np\nos.close(2)\nfd = os.open({:?}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\nassert fd == 2, fd\ntime.sleep(0.3)\na = np.random.rand(300, 300)\nfor _ in range(3):\n    b = a @ a\nos.write(fd, b'data')\nprint('done')\n",
        data.display().to_string()
    );
    let mut c = Command::new("timeout");
    c.args(["60", &python(), "-c", &script])
        .env("LD_PRELOAD", examples_dir().join("liboffload_preload.so"))
        .env("GPUKIT_OFFLOAD_LOG", "summary")
        .env("GPUKIT_OFFLOAD_START", "eager")
        .env("GPUKIT_OFFLOAD_INJECT_FAILURE", "start-panic");
    isolated(&mut c, &dir);
    c.env("GPUKIT_OFFLOAD_GPU", "always");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "(124: hung)\n{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "done");
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "data");
    assert!(
        err.contains("gpukit-offload: internal error") && err.contains("injected panic"),
        "{err}"
    );
    // (once the GPU is known to be unusable the fast path keeps every call: `small`)
    let (line, calls) = summary_line(&err, "dgemm");
    assert_eq!(calls, 3, "{line}");
    assert!(line.contains(" gpu=0 "), "{line}");
}

/// getri through scipy's own LAPACK symbol with the GPU forced: a workspace below the
/// library's minimum gets LAPACK's `info = -6` (it ran on the library), and the optimum the
/// inverse with `WORK(1)` = the optimum, on either backend.
#[test]
fn getri_honours_lwork_and_sets_work1_with_the_gpu_forced() {
    if !have(
        "getri_honours_lwork_and_sets_work1_with_the_gpu_forced",
        "numpy, scipy.linalg",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import ctypes, numpy as np, scipy.linalg
lib = ctypes.CDLL(None)
f = lib.scipy_dgetri_
n = 600
rng = np.random.default_rng(3)
a0 = rng.standard_normal((n, n)) + n * np.eye(n)
lu, piv = scipy.linalg.lu_factor(a0)
I = ctypes.c_int32
def getri(lwork, work_len):
    a = np.asfortranarray(lu.copy())
    p = (piv + 1).astype(np.int32)
    work = np.zeros(max(work_len, 1))
    info = I(99)
    f(ctypes.byref(I(n)), a.ctypes.data_as(ctypes.c_void_p), ctypes.byref(I(n)),
      p.ctypes.data_as(ctypes.c_void_p), work.ctypes.data_as(ctypes.c_void_p),
      ctypes.byref(I(lwork)), ctypes.byref(info))
    return a, work, info.value
_, w, info = getri(-1, 1)
assert info == 0, info
opt = int(w[0])
assert opt >= n, opt
_, _, info = getri(n - 1, n - 1)
assert info == -6, info
a, w, info = getri(opt, opt)
assert info == 0, info
assert w[0] == opt, (w[0], opt)
assert np.allclose(a @ a0, np.eye(n), atol=1e-8)
print("ok")
"#;
    let mut c = Command::new("timeout");
    c.args(["120", &python(), "-c", script])
        .env("LD_PRELOAD", examples_dir().join("liboffload_preload.so"))
        .env("GPUKIT_OFFLOAD_LOG", "summary");
    isolated(&mut c, &dir);
    c.env("GPUKIT_OFFLOAD_GPU", "always");
    let o = run(&mut c);
    // (the library's XERBLA prints its own message for the short workspace first)
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().last(), Some("ok"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    let (line, _) = summary_line(&err, "dgetri");
    // on a GPU host the query and the optimum ran on the GPU and the short workspace on the
    // library (`workspace-short`); without a GPU every call stays on the CPU
    if std::env::var("GPUKIT_REQUIRE_GPU").is_ok_and(|v| v == "1") || !line.contains(" gpu=0 ") {
        assert!(
            line.contains("workspace-short:1") && line.contains(" gpu=1 "),
            "{line}"
        );
    }
}

/// The start policy of each process in a tree, from the `calls` log's first line per process.
fn policies(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| l.contains(") start policy "))
        .filter_map(|l| l.rsplit(' ').next())
        .collect()
}

/// A shell script that starts many short Python processes under `offload run`: only the
/// process `offload run` starts (the shell) is eager; every Python child starts CUDA only at a
/// call that pays on the GPU (`lazy`; these calls do not), runs, and prints its own summary.
#[test]
fn a_shell_script_of_short_processes_starts_cuda_only_where_it_pays() {
    if !have(
        "a_shell_script_of_short_processes_starts_cuda_only_where_it_pays",
        "numpy",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "for i in 1 2 3 4 5 6; do {} -c 'import numpy as np; a = np.random.rand(200, 200); print(float((a @ a).sum()) > 0)' || exit 1; done",
        python()
    );
    let mut c = Command::new(offload());
    c.args(["run", "sh", "-c", &script])
        .env("GPUKIT_OFFLOAD_LOG", "calls")
        .env_remove("GPUKIT_OFFLOAD_START");
    isolated(&mut c, &dir);
    c.env_remove("GPUKIT_OFFLOAD_GPU");
    let o = run(&mut c);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).matches("True").count(),
        6
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let p = policies(&err);
    assert_eq!(p.len(), 7, "{err}");
    assert_eq!(p.iter().filter(|s| **s == "eager").count(), 1, "{p:?}");
    assert_eq!(p.iter().filter(|s| **s == "lazy").count(), 6, "{p:?}");
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("gpukit-offload: dgemm calls=1 "))
            .count(),
        6,
        "{err}"
    );
}

/// Python's multiprocessing with spawn under `offload run`: the main process is eager, each
/// worker (and multiprocessing's helper process) starts CUDA only at a call that pays on the
/// GPU (`lazy`), and every result is right. (Pool workers leave through `os._exit`, which runs no exit hook: they print
/// no summary.)
#[test]
fn multiprocessing_spawn_workers_start_cuda_only_where_it_pays() {
    if !have(
        "multiprocessing_spawn_workers_start_cuda_only_where_it_pays",
        "numpy",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("pool.py");
    std::fs::write(
        &prog,
        r#"
import multiprocessing as mp, numpy as np
def work(i):
    a = np.random.default_rng(i).standard_normal((150, 150))
    return float(np.linalg.solve(a @ a.T + 150 * np.eye(150), np.ones(150)).sum())
if __name__ == "__main__":
    with mp.get_context("spawn").Pool(3) as pool:
        r = pool.map(work, range(12))
    assert len(r) == 12 and all(np.isfinite(r))
    print("pool ok")
"#,
    )
    .unwrap();
    let mut c = Command::new("timeout");
    c.args(["300"])
        .arg(offload())
        .args(["run", &python()])
        .arg(&prog)
        .env("GPUKIT_OFFLOAD_LOG", "calls")
        .env_remove("GPUKIT_OFFLOAD_START");
    isolated(&mut c, &dir);
    c.env_remove("GPUKIT_OFFLOAD_GPU");
    let o = run(&mut c);
    assert!(String::from_utf8_lossy(&o.stdout).contains("pool ok"));
    let err = String::from_utf8_lossy(&o.stderr);
    let p = policies(&err);
    assert!(p.len() >= 4, "{err}");
    assert_eq!(p.iter().filter(|s| **s == "eager").count(), 1, "{p:?}");
    assert!(p.iter().skip(1).all(|s| *s == "lazy"), "{p:?}");
}

/// Short programs that exit at every moment of the eager GPU start-up (which begins at load;
/// they exit 0 to 700 ms after their first BLAS call, before and after the start has ended) end
/// cleanly with their summary: the CUDA libraries' exit handlers registered on the start-up
/// threads run only after the exit hook, which waits for those threads (about one such run in
/// twenty ended in SIGSEGV without a summary on the H100, 2026-12-06). Meaningful on a GPU
/// host; elsewhere the start fails at once.
#[test]
fn programs_that_exit_during_the_gpu_start_up_end_cleanly() {
    if !have(
        "programs_that_exit_during_the_gpu_start_up_end_cleanly",
        "numpy",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    for round in 0..2 {
        for delay_ms in [0u32, 10, 30, 60, 100, 150, 200, 300, 450, 700] {
            let script = format!(
                "import time, numpy as np\na = np.ones((200, 200))\nb = a @ a\ntime.sleep({})\nprint('done')\n",
                f64::from(delay_ms) / 1000.0
            );
            let mut c = Command::new("timeout");
            c.args(["60", &python(), "-c", &script])
                .env("LD_PRELOAD", examples_dir().join("liboffload_preload.so"))
                .env("GPUKIT_OFFLOAD_LOG", "summary")
                .env("GPUKIT_OFFLOAD_START", "eager");
            isolated(&mut c, &dir);
            c.env_remove("GPUKIT_OFFLOAD_GPU");
            let o = c.output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            let out = String::from_utf8_lossy(&o.stdout);
            let summary = err
                .lines()
                .any(|l| l.starts_with("gpukit-offload: dgemm calls=1 "));
            if o.status.code() != Some(0) || out.trim() != "done" || !summary {
                bad.push(format!(
                    "round {round}, exit after {delay_ms} ms: {:?}, stdout {out:?}, stderr:\n{err}",
                    o.status
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of 20 runs ended badly:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// A stand-in for nvidia-cuda-mps-control in a directory of its own (for `PATH`): `-f` makes a
/// FIFO where the control socket goes and waits on it for a command; the client mode writes its
/// standard input into the FIFO. What it does is appended to `record`. `start` replaces the
/// daemon's body (a daemon that fails).
fn fake_mps_control(dir: &std::path::Path, start: Option<&str>) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let record = dir.join("record");
    let serve = "mkfifo \"$CUDA_MPS_PIPE_DIRECTORY/control\"; read cmd < \"$CUDA_MPS_PIPE_DIRECTORY/control\"; echo \"took $cmd\" >> \"$R\"";
    let prog = dir.join("nvidia-cuda-mps-control");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/sh\nR='{}'\nif [ \"$1\" = -f ]; then\n  echo \"daemon $CUDA_MPS_PIPE_DIRECTORY\" >> \"$R\"\n  {}\nelse\n  read cmd; echo \"$cmd\" > \"$CUDA_MPS_PIPE_DIRECTORY/control\"\nfi\n",
            record.display(),
            start.unwrap_or(serve)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    record
}

/// `offload run` with `fake` first on PATH, a program of `sh -c script`; its output.
fn run_with_fake_mps(fake: &std::path::Path, script: &str, env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::join_paths(std::iter::once(fake.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let mut c = Command::new(offload());
    c.args(["run", "sh", "-c", script]).env("PATH", path);
    isolated(&mut c, &dir);
    c.env_remove("GPUKIT_OFFLOAD_GPU")
        .env_remove("GPUKIT_OFFLOAD_SHARE")
        .env_remove("CUDA_MPS_PIPE_DIRECTORY")
        .env_remove("GPUKIT_OFFLOAD_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawn offload")
}

/// Under `offload run` the program's processes are pointed at an MPS daemon of its own: a
/// fresh directory of mode 0700 named by `CUDA_MPS_PIPE_DIRECTORY` (and the log directory), the
/// same for a child of the program, the daemon ready before the program starts; when the
/// program ends the daemon is told to quit and the directory is gone, and the exit status is
/// the program's. `GPUKIT_OFFLOAD_SHARE=off`, a daemon the environment already names and
/// `GPUKIT_OFFLOAD_GPU=off` start none; a daemon that fails to start is reported (not under
/// `GPUKIT_OFFLOAD_LOG=off`) and the program runs without one. (A stand-in daemon: no GPU
/// needed.)
#[test]
fn the_program_tree_shares_a_private_mps_daemon() {
    let script = "echo \"pipe=$CUDA_MPS_PIPE_DIRECTORY\"; echo \"log=$CUDA_MPS_LOG_DIRECTORY\"; \
                  [ -p \"$CUDA_MPS_PIPE_DIRECTORY/control\" ] && echo ready; \
                  stat -c 'mode=%a' \"$CUDA_MPS_PIPE_DIRECTORY/..\" 2>/dev/null; \
                  sh -c 'echo \"child=$CUDA_MPS_PIPE_DIRECTORY\"'; exit 7";
    let value = |out: &str, key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_default()
            .to_string()
    };
    let fake = tempfile::tempdir().unwrap();
    let record = fake_mps_control(fake.path(), None);
    let o = run_with_fake_mps(fake.path(), script, &[]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{out}\n{err}");
    let pipe = value(&out, "pipe=");
    assert!(pipe.ends_with("/pipe"), "{out}\n{err}");
    assert_eq!(value(&out, "log="), pipe.replace("/pipe", "/log"));
    assert!(out.contains("\nready\n"), "{out}");
    assert_eq!(value(&out, "mode="), "700", "{out}");
    assert_eq!(value(&out, "child="), pipe);
    let rec = std::fs::read_to_string(&record).unwrap();
    assert!(rec.contains(&format!("daemon {pipe}")), "{rec}");
    assert!(rec.contains("took quit"), "{rec}");
    assert!(!std::path::Path::new(&pipe).parent().unwrap().exists());
    assert!(!err.contains("share the GPU"), "{err}");

    for env in [
        &[("GPUKIT_OFFLOAD_SHARE", "off")][..],
        &[("GPUKIT_OFFLOAD_GPU", "off")][..],
        &[("CUDA_MPS_PIPE_DIRECTORY", "/run/their-mps")][..],
    ] {
        let fake = tempfile::tempdir().unwrap();
        let record = fake_mps_control(fake.path(), None);
        let o = run_with_fake_mps(fake.path(), script, env);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert_eq!(o.status.code(), Some(7));
        let expected = if env[0].0 == "CUDA_MPS_PIPE_DIRECTORY" {
            env[0].1
        } else {
            ""
        };
        assert_eq!(value(&out, "pipe="), expected, "{env:?}: {out}");
        assert!(!record.exists(), "{env:?}: a daemon was started");
    }

    let fake = tempfile::tempdir().unwrap();
    fake_mps_control(fake.path(), Some("exit 3"));
    let o = run_with_fake_mps(fake.path(), script, &[]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(value(&out, "pipe="), "", "{out}");
    assert!(
        err.contains("do not share the GPU") && err.contains("exited at start"),
        "{err}"
    );
    let o = run_with_fake_mps(fake.path(), script, &[("GPUKIT_OFFLOAD_LOG", "off")]);
    assert_eq!(o.status.code(), Some(7));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Whether a process whose command line holds `what` runs with `dir` in its environment (its
/// own, or its parent's: the MPS server is the control daemon's child).
fn mps_process_with(what: &str, dir: &str) -> bool {
    let read = |pid: &str, f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
    let holds = |b: &[u8], s: &str| b.windows(s.len()).any(|w| w == s.as_bytes());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let pid = e.file_name().to_string_lossy().to_string();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || !holds(&read(&pid, "cmdline"), what) {
            return false;
        }
        let ppid = String::from_utf8_lossy(&read(&pid, "stat"))
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().nth(1).map(str::to_string))
            .unwrap_or_default();
        holds(&read(&pid, "environ"), dir) || holds(&read(&ppid, "environ"), dir)
    })
}

/// On a GPU host with nvidia-cuda-mps-control: two Python processes of one program under
/// `offload run` with the GPU forced run their products on the GPU through the program's own
/// MPS server (a `nvidia-cuda-mps-server` of its daemon, told apart by the program's pipe
/// directory in its environment or its parent's, runs while they compute, and every result is
/// right); when the program ends the daemon and the server are gone and so is the
/// directory. Skips (printed) without a GPU or without the control program.
#[test]
fn the_program_tree_runs_on_one_mps_server_on_the_gpu() {
    let name = "the_program_tree_runs_on_one_mps_server_on_the_gpu";
    if !have(name, "numpy") {
        return;
    }
    if gpukit::offload::share::on_path(gpukit::offload::share::CONTROL).is_none() {
        eprintln!("SKIPPED {name}: nvidia-cuda-mps-control is not on PATH");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("child.py");
    std::fs::write(
        &child,
        r#"
import os, numpy as np
rng = np.random.default_rng(int(os.environ["K"]))
a = rng.standard_normal((1500, 1500))
c = a @ a
assert np.allclose(c[:4], a[:4] @ a), "wrong product"
d = os.environ["CUDA_MPS_PIPE_DIRECTORY"].encode()
def env_has(pid):
    try:
        return d in open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        return False
seen = False
for p in os.listdir("/proc"):
    try:
        if p.isdigit() and b"nvidia-cuda-mps-server" in open(f"/proc/{p}/cmdline", "rb").read():
            ppid = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]
            seen = seen or env_has(p) or env_has(ppid)
    except OSError:
        pass
# One write(2) per line (below PIPE_BUF: atomic), so that the two children's lines never
# interleave, whatever buffering PYTHONUNBUFFERED asks print() for.
os.write(1, f"pipe={d.decode()} server={seen}\n".encode())
"#,
    )
    .unwrap();
    let script = format!(
        "K=1 {py} {child} & K=2 {py} {child}; wait",
        py = python(),
        child = child.display()
    );
    let mut c = Command::new("timeout");
    c.args([
        "120",
        offload().to_str().unwrap(),
        "run",
        "sh",
        "-c",
        &script,
    ]);
    isolated(&mut c, &dir);
    c.env("GPUKIT_OFFLOAD_GPU", "always")
        .env("GPUKIT_OFFLOAD_LOG", "summary")
        .env_remove("GPUKIT_OFFLOAD_SHARE")
        .env_remove("CUDA_MPS_PIPE_DIRECTORY");
    let o = run(&mut c);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("pipe=")).collect();
    assert_eq!(lines.len(), 2, "{out}\n{err}");
    let gpu_lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("gpukit-offload: dgemm calls="))
        .collect();
    if gpu_lines.is_empty() || gpu_lines.iter().any(|l| l.contains(" gpu=0 ")) {
        assert!(
            !std::env::var("GPUKIT_REQUIRE_GPU").is_ok_and(|v| v == "1"),
            "{name}: the products did not run on the GPU: {err}"
        );
        eprintln!("SKIPPED {name}: no GPU ran the products ({gpu_lines:?})");
        return;
    }
    assert_eq!(gpu_lines.len(), 2, "{err}");
    let pipe = lines[0]
        .split(' ')
        .next()
        .unwrap()
        .trim_start_matches("pipe=");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with(&format!("pipe={pipe} "))),
        "{out}"
    );
    assert!(
        lines.iter().all(|l| l.ends_with("server=True")),
        "{out}\n{err}"
    );
    // gone once the program has ended (the daemon had no client left)
    let t0 = std::time::Instant::now();
    while mps_process_with("nvidia-cuda-mps", pipe) && t0.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !mps_process_with("nvidia-cuda-mps", pipe),
        "the daemon outlived the program"
    );
    assert!(!std::path::Path::new(pipe).exists());
}
