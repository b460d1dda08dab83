//! Integration tests of the offload shim and CLI (no GPU needed): under `offload run`, numpy's
//! results are bit-identical to a run without the shim, the exit summary lists the intercepted
//! routines, bad settings are reported without aborting, and numpy's own linalg test suite passes.
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

fn isolated(cmd: &mut Command, dir: &tempfile::TempDir) {
    // never touch the user's profile; no GPU decisions depend on the machine's config
    cmd.env("GPUKIT_OFFLOAD_PROFILE", dir.path().join("profile.json"))
        .env("GPUKIT_OFFLOAD_PERSIST", "0");
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
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("gpukit-offload: {r} calls=")))
            .unwrap_or_else(|| panic!("no summary line for {r} in:\n{err}"));
        let calls: u64 = line
            .split("calls=")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(calls >= 1, "{line}");
        assert!(
            line.contains(" gpu=") && line.contains(" cpu=") && line.contains(" saved="),
            "{line}"
        );
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
        .env("GPUKIT_OFFLOAD_PERSIST", "0"));
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
    let mut c = Command::new(offload());
    c.arg("explain");
    isolated(&mut c, &dir);
    let o = run(&mut c);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("built-in default") && out.contains("gemm") && out.contains("syevd+v"),
        "{out}"
    );
    let o = Command::new(offload())
        .args(["run", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot run"));
}
