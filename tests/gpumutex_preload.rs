//! Tests of the `gpumutex_preload` cdylib example under `LD_PRELOAD`, against a fake libcuda
//! compiled here with `cc` (no GPU needed). Skipped, with a reason, when `cc` or the built
//! example is missing (`cargo test` of this package builds the example; or run
//! `cargo build --example gpumutex_preload` first).

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAKE_LIBCUDA: &str = include_str!("../gpukit-mutex/tests/fixtures/fake_libcuda.c");
const FAKE_APP: &str = include_str!("../gpukit-mutex/tests/fixtures/fake_app.c");
const FAKE_LIBCUDA_MAP: &str = include_str!("../gpukit-mutex/tests/fixtures/fake_libcuda.map");
const FAKE_USER: &str = include_str!("../gpukit-mutex/tests/fixtures/fake_user.c");
const DL_NEXT_A: &str = include_str!("../gpukit-mutex/tests/fixtures/dl_next_a.c");
const DL_NEXT_B: &str = include_str!("../gpukit-mutex/tests/fixtures/dl_next_b.c");
const DL_ORIGIN: &str = include_str!("../gpukit-mutex/tests/fixtures/dl_origin.c");
const DL_SUB: &str = include_str!("../gpukit-mutex/tests/fixtures/dl_sub.c");
const DL_APP: &str = include_str!("../gpukit-mutex/tests/fixtures/dl_app.c");

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
    user: PathBuf,
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
    fs::write(root.join("fake_user.c"), FAKE_USER).expect("write");
    fs::write(root.join("fake_libcuda.map"), FAKE_LIBCUDA_MAP).expect("write");
    let map = format!(
        "-Wl,--version-script={}",
        root.join("fake_libcuda.map").display()
    );
    let lib = root.join("libcuda.so.1");
    let app = root.join("fake_app");
    let user = root.join("libfake_user.so");
    let r = cc(&[
        "-shared",
        "-fPIC",
        "-O1",
        "-o",
        lib.to_str().expect("utf8"),
        root.join("fake_libcuda.c").to_str().expect("utf8"),
        &map,
    ])
    .and_then(|_| {
        cc(&[
            "-O1",
            "-o",
            app.to_str().expect("utf8"),
            root.join("fake_app.c").to_str().expect("utf8"),
            "-ldl",
        ])
    })
    .and_then(|_| {
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            user.to_str().expect("utf8"),
            root.join("fake_user.c").to_str().expect("utf8"),
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
        user,
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
            .env("FAKE_USER_LIB", &self.user)
            .env_remove("GPUMUTEX_NUM_DEVICES")
            .env_remove("GPUMUTEX_TIMEOUT")
            .env_remove("GPUMUTEX_JOB_ROOT")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NVIDIA_VISIBLE_DEVICES")
            .env_remove("CUDA_DEVICE_ORDER")
            // Device numbers are physical indices here, whatever GPUs the machine has.
            .env("GPUMUTEX_DEVICE_SOURCE", "none")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        match visible {
            Some(v) => c.env("GPUMUTEX_VISIBLE_DEVICES", v),
            None => c.env_remove("GPUMUTEX_VISIBLE_DEVICES"),
        };
        c
    }

    /// The whole result lines of the app runs.
    fn app_lines(&self) -> Vec<String> {
        fs::read_to_string(self.root.join("apps.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
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
    for mode in ["dlsym", "dlvsym", "procaddr", "procaddr_v2"] {
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

fn field(line: &str, key: &str) -> String {
    line.split(' ')
        .find_map(|f| f.strip_prefix(key))
        .unwrap_or_default()
        .to_string()
}

/// Attack 8: a program waiting inside `cuInit` ignored Ctrl-C until it was granted the device.
/// Now the signal (the program handles it, as Python does) ends the wait: the handler ran,
/// cuInit returned CUDA_ERROR_DEVICE_UNAVAILABLE and the driver was never initialised.
#[test]
fn ctrl_c_interrupts_a_wait_inside_cuinit() {
    let Some(env) = setup() else { return };
    let mut holder = env.cmd("dlsym", 3000, Some("0")).spawn().expect("spawn");
    let t = Instant::now();
    while env.cuda_calls().is_empty() {
        assert!(t.elapsed().as_secs() < 20, "holder never initialised");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut waiter = env.cmd("sigint", 0, Some("0")).spawn().expect("spawn");
    let dir = env.root.join("locks");
    while gpukit::mutex::status(&dir, &[])
        .expect("status")
        .waiters
        .is_empty()
    {
        assert!(t.elapsed().as_secs() < 20, "waiter never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t1 = Instant::now();
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(waiter.id() as i32, libc::SIGINT) };
    let st = waiter.wait().expect("wait");
    let el = t1.elapsed();
    assert!(
        st.success(),
        "the program must survive (it handles SIGINT): {st}"
    );
    assert!(
        el < Duration::from_secs(2),
        "SIGINT took {el:?} to end the wait"
    );
    let lines = env.app_lines();
    let mine = lines
        .iter()
        .find(|l| field(l, "sig=") == "1")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(field(mine, "rc="), "46", "{mine}");
    assert_eq!(
        env.cuda_calls().len(),
        1,
        "nothing granted: {:?}",
        env.cuda_calls()
    );
    assert!(gpukit::mutex::status(&dir, &[])
        .expect("status")
        .waiters
        .is_empty());
    holder.wait().expect("holder");
}

/// A libcuda that is unloaded and loaded again: cuInit fails cleanly while it is gone (no call
/// into unmapped code) and works again afterwards.
#[test]
fn dlclose_forgets_an_unloaded_libcuda() {
    let Some(env) = setup() else { return };
    let st = env.cmd("dlclose", 0, Some("0")).status().expect("run");
    assert!(st.success(), "{st}");
    let lines = env.app_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(field(&lines[0], "rc="), "0", "{lines:?}");
    assert_eq!(
        field(&lines[0], "rc2="),
        "3",
        "CUDA_ERROR_NOT_INITIALIZED: {lines:?}"
    );
    assert_eq!(field(&lines[0], "rc3="), "0", "{lines:?}");
    assert_eq!(env.cuda_calls().len(), 2, "{:?}", env.cuda_calls());
}

/// A libcuda dlopened privately under a path (no soname to find it by): cuInit called from a
/// library that just references it still reaches it (the dlopen hook noted its name).
#[test]
fn a_privately_loaded_libcuda_is_found_through_dlopen() {
    let Some(env) = setup() else { return };
    let out = env.cmd("private", 0, Some("0")).output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = env.app_lines();
    assert_eq!(field(&lines[0], "rc="), "0", "{lines:?}");
    assert_eq!(field(&lines[0], "cvd="), "0", "{lines:?}");
    assert_eq!(env.cuda_calls().len(), 1);
}

/// Other libraries' caller-relative lookups mean what they mean without the preload:
/// `dlsym`/`dlvsym(RTLD_NEXT)` from another interposer, and `dlopen` through the calling
/// library's RUNPATH (`$ORIGIN`). Before, RTLD_NEXT was taken relative to the preload (an
/// interposer after it found itself again and recursed until it crashed).
#[test]
fn caller_relative_lookups_are_kept_for_other_libraries() {
    let Some(so) = preload_so() else {
        eprintln!(
            "SKIPPED caller_relative_lookups_are_kept_for_other_libraries: preload not built"
        );
        return;
    };
    let t = tempfile::tempdir().expect("tempdir");
    let d = t.path();
    fs::create_dir(d.join("sub")).expect("mkdir");
    for (name, src) in [
        ("dl_next_a.c", DL_NEXT_A),
        ("dl_next_b.c", DL_NEXT_B),
        ("dl_origin.c", DL_ORIGIN),
        ("dl_sub.c", DL_SUB),
        ("dl_app.c", DL_APP),
    ] {
        fs::write(d.join(name), src).expect("write");
    }
    let p = |n: &str| d.join(n).to_str().expect("utf8").to_string();
    let rpath = format!("-Wl,-rpath,{}", d.display());
    let built = cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &p("libdl_next_a.so"),
        &p("dl_next_a.c"),
        "-ldl",
    ])
    .and_then(|_| {
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            &p("libdl_next_b.so"),
            &p("dl_next_b.c"),
        ])
    })
    .and_then(|_| {
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            &p("sub/libdl_sub.so"),
            &p("dl_sub.c"),
        ])
    })
    .and_then(|_| {
        cc(&[
            "-shared",
            "-fPIC",
            "-o",
            &p("libdl_origin.so"),
            &p("dl_origin.c"),
            "-ldl",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/sub",
        ])
    })
    .and_then(|_| {
        cc(&[
            "-o",
            &p("dl_app"),
            &p("dl_app.c"),
            "-Wl,--no-as-needed",
            "-L",
            d.to_str().expect("utf8"),
            "-ldl_next_a",
            "-ldl_next_b",
            "-ldl",
            &rpath,
        ])
    });
    if let Err(e) = built {
        eprintln!("SKIPPED caller_relative_lookups_are_kept_for_other_libraries: {e}");
        return;
    }
    let run = |preload: bool| {
        let mut c = Command::new(d.join("dl_app"));
        c.arg(d.join("libdl_origin.so"))
            .env("GPUMUTEX_VISIBLE_DEVICES", "0")
            .env("GPUMUTEX_LOCK_DIR", d.join("locks"));
        if preload {
            c.env("LD_PRELOAD", &so);
        }
        let out = c.output().expect("run");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    };
    let (st, base) = run(false);
    assert!(st.success());
    assert_eq!(base, "next=107 vnext=207 origin=1", "the fixture itself");
    let (st, with) = run(true);
    assert!(st.success(), "under the preload: {st}");
    assert_eq!(with, base);
}

/// A fake `/proc/driver/nvidia/gpus` with `n` GPUs of one model; returns its
/// `GPUMUTEX_DEVICE_SOURCE` value.
fn fake_gpus(root: &std::path::Path, n: usize) -> String {
    let dir = root.join("gpus");
    for i in 0..n {
        let bus = format!("0000:{:02x}:00.0", 0x18 + i * 0x10);
        fs::create_dir_all(dir.join(&bus)).expect("mkdir");
        fs::write(
            dir.join(&bus).join("information"),
            format!(
                "Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-{i:08x}-1111-2222-3333-444444444444\n\
                 Bus Location: \t {bus}\n"
            ),
        )
        .expect("write");
    }
    format!("proc:{}", dir.display())
}

/// Issue 24 (device locks through the preload, simulated): on a 4-GPU machine (a fake driver
/// tree) three programs that each need 2 devices (`GPUMUTEX_NUM_DEVICES=2`) start together:
/// two run side by side on disjoint pairs, the third starts only when a pair is free; each
/// sees its pair in `CUDA_VISIBLE_DEVICES` in the numbering its CUDA applies it to (one of them
/// inherits the view `CUDA_VISIBLE_DEVICES=3,2,1,0`).
#[test]
fn num_devices_2_gives_disjoint_pairs_and_a_third_waits() {
    let Some(env) = setup() else { return };
    let source = fake_gpus(&env.root, 4);
    let mut kids = Vec::new();
    for view in [None, Some("3,2,1,0"), None] {
        let mut c = env.cmd("procaddr_v2", 700, Some("all"));
        c.env("GPUMUTEX_DEVICE_SOURCE", &source)
            .env("GPUMUTEX_NUM_DEVICES", "2");
        if let Some(v) = view {
            c.env("CUDA_VISIBLE_DEVICES", v);
        }
        kids.push(c.spawn().expect("spawn"));
    }
    for k in &mut kids {
        let st = k.wait().expect("wait");
        assert!(st.success(), "app failed: {st}");
    }
    let mut apps = env.apps();
    assert_eq!(apps.len(), 3, "{apps:?}");
    apps.sort_by_key(|a| a.2);
    let pair = |cvd: &str| -> Vec<u32> {
        let mut v: Vec<u32> = cvd.split(',').map(|x| x.parse().expect("index")).collect();
        assert_eq!(v.len(), 2, "a pair: {cvd}");
        v.sort();
        v
    };
    let pairs: Vec<Vec<u32>> = apps.iter().map(|a| pair(&a.1)).collect();
    // The first two ran side by side, on disjoint pairs.
    assert!(apps[0].2 < apps[1].3 && apps[1].2 < apps[0].3, "{apps:?}");
    assert!(pairs[0].iter().all(|d| !pairs[1].contains(d)), "{apps:?}");
    // The third waited for a pair and never shared a GPU with a program still running.
    let first_end = apps[0].3.min(apps[1].3);
    assert!(apps[2].2 >= first_end, "a third pair on 4 GPUs: {apps:?}");
    for other in 0..2 {
        if apps[other].3 > apps[2].2 {
            assert!(
                pairs[2].iter().all(|d| !pairs[other].contains(d)),
                "{apps:?}"
            );
        }
    }
    // The program with the reversed view names its pair in its own preference order (as CUDA
    // will number them: its device 0 is the higher GPU), the others in ascending order.
    let descending = apps
        .iter()
        .filter(|a| {
            let v: Vec<u32> = a.1.split(',').map(|x| x.parse().expect("index")).collect();
            v[0] > v[1]
        })
        .count();
    assert_eq!(descending, 1, "{apps:?}");
}

/// The preload in a program that `gpumutex-run` started shares the runner's claim, in any
/// numbering: the runner inherits a Slurm-like view (`CUDA_VISIBLE_DEVICES=2,3` on a fake
/// 4-GPU machine) and is granted both; the program (with the runner's `GPUMUTEX_*` and
/// `CUDA_VISIBLE_DEVICES`) reads its devices as 0 and 1, finds the same GPUs, and starts at
/// once on them instead of queueing behind its own runner.
#[test]
fn the_preload_under_gpumutex_run_shares_its_pair() {
    let Some(env) = setup() else { return };
    let runner = env.so.with_file_name("gpumutex-run");
    if !runner.exists() {
        eprintln!(
            "SKIPPED the_preload_under_gpumutex_run_shares_its_pair: {} not built",
            runner.display()
        );
        return;
    }
    let source = fake_gpus(&env.root, 4);
    let app = env.cmd("dlsym", 10, None);
    let mut c = Command::new(&runner);
    c.args(["--visible-devices", "all", "--num-devices", "2", "--"])
        .arg(app.get_program())
        .args(app.get_args());
    for (k, v) in app.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.env("GPUMUTEX_DEVICE_SOURCE", &source)
        .env("CUDA_VISIBLE_DEVICES", "2,3")
        .env("GPUMUTEX_TIMEOUT", "5")
        .stdout(Stdio::null());
    let t = Instant::now();
    let st = c.status().expect("runner");
    assert!(st.success(), "{st}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    let apps = env.apps();
    assert_eq!(apps.len(), 1, "{apps:?}");
    assert_eq!((apps[0].0, apps[0].1.as_str()), (0, "2,3"), "{apps:?}");
}
