//! Tests of the `gpumutex_preload` cdylib example under `LD_PRELOAD`, against a fake libcuda
//! compiled here with `cc` (no GPU needed). Skipped, with a reason, when `cc` or the built
//! example is missing (`cargo test` of this package builds the example; or run
//! `cargo build --example gpumutex_preload` first).

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const FAKE_LIBCUDA: &str = include_str!("../gpukit-mutex/tests/fixtures/fake_libcuda.c");
const FAKE_APP: &str = include_str!("../gpukit-mutex/tests/fixtures/fake_app.c");

fn preload_so() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/<test> -> target/<profile>/examples/libgpumutex_preload.so
    let so = exe
        .parent()?
        .parent()?
        .join("examples")
        .join("libgpumutex_preload.so");
    so.exists().then_some(so)
}

struct Env {
    _t: tempfile::TempDir,
    root: PathBuf,
    lib: PathBuf,
    app: PathBuf,
    so: PathBuf,
}

fn cc(args: &[&str]) -> Result<(), String> {
    let out = Command::new("cc")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn setup() -> Option<Env> {
    let Some(so) = preload_so() else {
        eprintln!("SKIP: libgpumutex_preload.so not built next to this test (run `cargo build --example gpumutex_preload --features mutex`)");
        return None;
    };
    let t = tempfile::tempdir().expect("tempdir");
    let root = t.path().to_path_buf();
    fs::write(root.join("fake_libcuda.c"), FAKE_LIBCUDA).expect("write");
    fs::write(root.join("fake_app.c"), FAKE_APP).expect("write");
    let lib = root.join("libcuda.so.1");
    let app = root.join("fake_app");
    let r = cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-o",
        lib.to_str().expect("utf8"),
        root.join("fake_libcuda.c").to_str().expect("utf8"),
    ])
    .and_then(|_| {
        cc(&[
            "-O1",
            "-o",
            app.to_str().expect("utf8"),
            root.join("fake_app.c").to_str().expect("utf8"),
            "-ldl",
        ])
    });
    if let Err(e) = r {
        eprintln!("SKIP: {e}");
        return None;
    }
    fs::create_dir(root.join("locks")).expect("mkdir");
    Some(Env {
        _t: t,
        root,
        lib,
        app,
        so,
    })
}

impl Env {
    fn cmd(&self, mode: &str, hold_ms: u32, visible: Option<&str>) -> Command {
        let mut c = Command::new(&self.app);
        c.arg(&self.lib)
            .arg(mode)
            .arg(hold_ms.to_string())
            .arg(self.root.join("apps.txt"))
            .env("LD_PRELOAD", &self.so)
            .env("FAKE_CUDA_LOG", self.root.join("cuda.txt"))
            .env("GPUMUTEX_LOCK_DIR", self.root.join("locks"))
            .env_remove("GPUMUTEX_NUM_DEVICES")
            .env_remove("GPUMUTEX_TIMEOUT")
            .env_remove("GPUMUTEX_JOB_ROOT")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        match visible {
            Some(v) => c.env("GPUMUTEX_VISIBLE_DEVICES", v),
            None => c.env_remove("GPUMUTEX_VISIBLE_DEVICES"),
        };
        c
    }

    /// (rc, cvd, start, end) per app run.
    fn apps(&self) -> Vec<(i32, String, u64, u64)> {
        fs::read_to_string(self.root.join("apps.txt"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let get = |k: &str| {
                    l.split(' ')
                        .find_map(|f| f.strip_prefix(k))
                        .unwrap_or_default()
                        .to_string()
                };
                (
                    get("rc=").parse().expect("rc"),
                    get("cvd="),
                    get("start=").parse().expect("start"),
                    get("end=").parse().expect("end"),
                )
            })
            .collect()
    }

    fn cuda_calls(&self) -> Vec<String> {
        fs::read_to_string(self.root.join("cuda.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn overlaps(a: &[(i32, String, u64, u64)]) -> bool {
    a.len() == 2 && a[0].2 < a[1].3 && a[1].2 < a[0].3
}

fn run_pair(
    env: &Env,
    mode: &str,
    visible: Option<&str>,
    hold_ms: u32,
) -> Vec<(i32, String, u64, u64)> {
    let mut a = env.cmd(mode, hold_ms, visible).spawn().expect("spawn");
    let mut b = env.cmd(mode, hold_ms, visible).spawn().expect("spawn");
    for c in [&mut a, &mut b] {
        let st = c.wait().expect("wait");
        assert!(st.success(), "{mode}: app failed: {st}");
    }
    env.apps()
}

#[test]
fn two_processes_serialise_on_one_device_via_every_lookup_path() {
    for mode in ["dlsym", "procaddr", "procaddr_v2"] {
        let Some(env) = setup() else { return };
        let apps = run_pair(&env, mode, Some("0"), 300);
        assert_eq!(apps.len(), 2, "{mode}: {apps:?}");
        for a in &apps {
            assert_eq!(a.0, 0, "{mode}: cuInit rc: {apps:?}");
            assert_eq!(a.1, "0", "{mode}: CUDA_VISIBLE_DEVICES: {apps:?}");
        }
        assert!(
            !overlaps(&apps),
            "{mode}: the two processes overlapped: {apps:?}"
        );
        let calls = env.cuda_calls();
        assert_eq!(calls.len(), 2, "{mode}: {calls:?}");
        // The driver saw the rewritten variable at cuInit time.
        assert!(calls.iter().all(|c| c.contains(" cvd=0 ")), "{calls:?}");
    }
}

#[test]
fn two_devices_run_concurrently_on_different_devices() {
    let Some(env) = setup() else { return };
    let apps = run_pair(&env, "procaddr_v2", Some("0,1"), 400);
    let mut cvds: Vec<&str> = apps.iter().map(|a| a.1.as_str()).collect();
    cvds.sort();
    assert_eq!(cvds, ["0", "1"], "{apps:?}");
}

#[test]
fn inert_without_visible_devices() {
    let Some(env) = setup() else { return };
    let apps = run_pair(&env, "dlsym", None, 400);
    assert!(apps.iter().all(|a| a.0 == 0 && a.1 == "-"), "{apps:?}");
    assert!(
        overlaps(&apps),
        "without configuration nothing is serialised: {apps:?}"
    );
    assert!(fs::read_dir(env.root.join("locks"))
        .expect("ls")
        .next()
        .is_none());
}

#[test]
fn bad_config_fails_cuinit_without_aborting() {
    let Some(env) = setup() else { return };
    let out = env.cmd("dlsym", 0, Some("0,zero")).output().expect("run");
    assert!(
        out.status.success(),
        "host program must not abort: {:?}",
        out.status
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad configuration") && err.contains("zero"),
        "{err}"
    );
    let apps = env.apps();
    assert_eq!(
        apps[0].0, 1,
        "cuInit must return CUDA_ERROR_INVALID_VALUE: {apps:?}"
    );
    assert!(
        env.cuda_calls().is_empty(),
        "the driver must not be initialised"
    );
}

#[test]
fn timeout_fails_cuinit_with_device_unavailable() {
    let Some(env) = setup() else { return };
    let mut holder = env.cmd("dlsym", 2000, Some("0")).spawn().expect("spawn");
    // Wait until the holder has the device.
    let t = std::time::Instant::now();
    while env.cuda_calls().is_empty() {
        assert!(t.elapsed().as_secs() < 20, "holder never initialised");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = env
        .cmd("dlsym", 0, Some("0"))
        .env("GPUMUTEX_TIMEOUT", "0.2")
        .output()
        .expect("run");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("timed out"), "{err}");
    holder.wait().expect("holder");
    let rcs: Vec<i32> = env.apps().iter().map(|a| a.0).collect();
    assert!(rcs.contains(&46), "{rcs:?}");
    assert!(rcs.contains(&0), "{rcs:?}");
}
