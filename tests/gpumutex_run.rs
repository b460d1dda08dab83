//! Tests of the `gpumutex-run` example binary (real processes, real signals, no GPU).
//! Skipped, with a reason, when the example is not built next to this test
//! (`cargo test` of this package builds it; or `cargo build --example gpumutex-run`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn runner() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe
        .parent()?
        .parent()?
        .join("examples")
        .join("gpumutex-run");
    if bin.exists() {
        Some(bin)
    } else {
        eprintln!("SKIP: gpumutex-run not built at {} (run `cargo build --example gpumutex-run --features mutex`)", bin.display());
        None
    }
}

fn run(bin: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.arg("--lock-dir")
        .arg(dir)
        .args(args)
        .env_remove("GPUMUTEX_VISIBLE_DEVICES")
        .env_remove("GPUMUTEX_NUM_DEVICES")
        .env_remove("GPUMUTEX_LOCK_DIR")
        .env_remove("GPUMUTEX_TIMEOUT")
        .env_remove("GPUMUTEX_JOB_ROOT");
    c
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().expect("tempdir");
    let d = t.path().join("locks");
    fs::create_dir(&d).expect("mkdir");
    (t, d)
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn runs_command_with_devices_and_passes_exit_status() {
    let Some(bin) = runner() else { return };
    let (_t, dir) = tmp();
    let out = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "3,1",
            "--",
            "sh",
            "-c",
            "echo cvd=$CUDA_VISIBLE_DEVICES vis=$GPUMUTEX_VISIBLE_DEVICES; exit 7",
        ],
    )
    .output()
    .expect("run");
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "cvd=3 vis=3,1");
    let out = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0,1",
            "--num-devices",
            "2",
            "--",
            "sh",
            "-c",
            "echo $CUDA_VISIBLE_DEVICES",
        ],
    )
    .output()
    .expect("run");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0,1");
    // Death by signal -> 128 + signal.
    let st = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--", "sh", "-c", "kill -9 $$"],
    )
    .status()
    .expect("run");
    assert_eq!(st.code(), Some(137));
    // Command not found -> 127.
    let st = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--", "/no/such/program"],
    )
    .stderr(Stdio::null())
    .status()
    .expect("run");
    assert_eq!(st.code(), Some(127));
}

#[test]
fn bad_input_is_a_clear_error_and_changes_nothing() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    let file = t.path().join("a-file");
    fs::write(&file, b"").expect("write");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--visible-devices", "0,,1", "--", "true"],
            "invalid device list",
        ),
        (
            vec!["--visible-devices", "0,x", "--", "true"],
            "invalid device list",
        ),
        (
            vec!["--visible-devices", "1,1", "--", "true"],
            "listed twice",
        ),
        (
            vec!["--visible-devices", "0", "--num-devices", "0", "--", "true"],
            "at least one",
        ),
        (
            vec![
                "--visible-devices",
                "0,1",
                "--num-devices",
                "3",
                "--",
                "true",
            ],
            "only 2 are visible",
        ),
        (
            vec!["--visible-devices", "0", "--timeout", "soon", "--", "true"],
            "--timeout",
        ),
        (vec!["--", "true"], "no visible devices"),
    ];
    for (args, msg) in cases {
        let out = run(&bin, &dir, &args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{args:?}: {err}");
    }
    let out = Command::new(&bin)
        .args([
            "--lock-dir",
            file.to_str().expect("utf8"),
            "--visible-devices",
            "0",
            "--",
            "true",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));
    assert!(
        fs::read_dir(&dir).expect("ls").next().is_none(),
        "bad input touched the lock dir"
    );
}

#[test]
fn timeout_exits_124_without_running_and_ctrl_c_ends_wait() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    let started = t.path().join("holder-started");
    let mut holder = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 3", started.display()),
        ],
    )
    .spawn()
    .expect("spawn");
    wait_for("holder", || started.exists());
    let marker = t.path().join("ran");
    let t0 = Instant::now();
    let out = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--timeout",
            "0.3",
            "--",
            "touch",
            marker.to_str().expect("utf8"),
        ],
    )
    .output()
    .expect("run");
    assert_eq!(out.status.code(), Some(124));
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert!(!marker.exists(), "command ran despite the timeout");
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));

    // Ctrl-C (SIGINT) while waiting ends the wait at once.
    let mut waiter = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--",
            "touch",
            marker.to_str().expect("utf8"),
        ],
    )
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn");
    let st = |d: &Path| {
        let o = Command::new(&bin)
            .args(["--lock-dir", d.to_str().expect("utf8"), "--status"])
            .output()
            .expect("status");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    wait_for("waiter queued", || st(&dir).contains("1 waiting"));
    let t1 = Instant::now();
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(waiter.id() as i32, libc::SIGINT) };
    let code = waiter.wait().expect("wait").code();
    let el = t1.elapsed();
    eprintln!("SIGINT -> gpumutex-run exited after {el:?}");
    assert_eq!(code, Some(130));
    assert!(el < Duration::from_secs(2), "{el:?}");
    assert!(!marker.exists());
    assert!(st(&dir).contains("queue: empty"));
    holder.wait().expect("holder");
}

#[test]
fn two_runners_exclude_each_other_and_status_shows_them() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    let log = t.path().join("log");
    let script = format!(
        "echo start $(date +%s%N) >> {0}; sleep 0.4; echo end $(date +%s%N) >> {0}",
        log.display()
    );
    let mut a = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--", "sh", "-c", &script],
    )
    .spawn()
    .expect("spawn");
    wait_for("first start", || {
        fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("start")
    });
    let mut b = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--", "sh", "-c", &script],
    )
    .spawn()
    .expect("spawn");
    let status = || {
        let o = Command::new(&bin)
            .args([
                "--lock-dir",
                dir.to_str().expect("utf8"),
                "--visible-devices",
                "0",
                "--status",
            ])
            .output()
            .expect("status");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    wait_for("second queued", || status().contains("1 waiting"));
    let s = status();
    assert!(s.contains(&format!("pid {}", a.id())), "{s}");
    assert!(s.contains(&format!("1. pid {}", b.id())), "{s}");
    assert!(a.wait().expect("a").success());
    assert!(b.wait().expect("b").success());
    let lines: Vec<String> = fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect();
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        ["start", "end", "start", "end"],
        "runs overlapped: {lines:?}"
    );
}
