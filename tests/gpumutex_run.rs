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
        .env_remove("GPUMUTEX_JOB_ROOT")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NVIDIA_VISIBLE_DEVICES")
        .env_remove("CUDA_DEVICE_ORDER")
        // Device numbers are physical indices here, whatever GPUs the machine has.
        .env("GPUMUTEX_DEVICE_SOURCE", "none");
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
    // The command's own numbering: its one device is its device 0.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "cvd=3 vis=0");
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

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

fn read_ns(path: &Path) -> u128 {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .expect("ns")
}

fn alive(pid: i32) -> bool {
    // A zombie (dead, not yet reaped by init) counts as gone.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Attack 7a: `sh -c 'setsid daemon & exit 0'` used to release the device while the daemon
/// still ran. Now the runner waits for the whole tree.
#[test]
fn holds_the_devices_until_the_whole_tree_has_exited() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    let end = t.path().join("daemon-end");
    let second = t.path().join("second-start");
    let script = format!(
        "setsid sh -c 'sleep 0.8; date +%s%N > {}' < /dev/null > /dev/null 2>&1 & exit 0",
        end.display()
    );
    let t0 = Instant::now();
    let first = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--", "sh", "-c", &script],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    wait_for("claim", || {
        fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("gpukit-claim."))
            })
            .unwrap_or(false)
    });
    let mut waiter = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--",
            "sh",
            "-c",
            &format!("date +%s%N > {}", second.display()),
        ],
    )
    .spawn()
    .expect("spawn");
    let out = first.wait_with_output().expect("first");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        t0.elapsed() >= Duration::from_millis(800),
        "the runner exited before the daemon"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holding the devices until"), "{err}");
    assert!(waiter.wait().expect("waiter").success());
    assert!(
        read_ns(&second) >= read_ns(&end),
        "the next job started while the first one's daemon still ran"
    );
}

/// Attack 7b: SIGKILL of the runner handed the device to the next waiter while its command
/// kept running. Now the command dies with the runner, and a process of the tree that
/// survives keeps the devices busy until it exits.
#[test]
fn a_killed_runner_takes_its_command_along_and_survivors_keep_the_devices() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    let pidfile = t.path().join("cmd-pid");
    let mut first = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--",
            "sh",
            "-c",
            &format!("echo $$ > {}; exec sleep 30", pidfile.display()),
        ],
    )
    .spawn()
    .expect("spawn");
    wait_for("command", || {
        fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    let cmd_pid: i32 = fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    first.kill().expect("SIGKILL the runner");
    first.wait().expect("reap");
    wait_for("the command to die with its runner", || !alive(cmd_pid));
    // The device is free again (nothing of the tree survived).
    let st = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--timeout", "10", "--", "true"],
    )
    .status()
    .expect("run");
    assert!(st.success());

    // Now with a grandchild that survives the command (it kept its descriptors).
    let end = t.path().join("survivor-end");
    let ready = t.path().join("ready");
    let mut first = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--",
            "sh",
            "-c",
            &format!(
                "(sleep 1; date +%s%N > {}) & : > {}; wait",
                end.display(),
                ready.display()
            ),
        ],
    )
    .spawn()
    .expect("spawn");
    wait_for("ready", || ready.exists());
    first.kill().expect("SIGKILL the runner");
    first.wait().expect("reap");
    let killed = now_ns();
    let second = t.path().join("second");
    let st = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--timeout",
            "20",
            "--",
            "sh",
            "-c",
            &format!("date +%s%N > {}", second.display()),
        ],
    )
    .status()
    .expect("run");
    assert!(st.success());
    assert!(
        read_ns(&end) > killed,
        "the survivor must outlive the runner"
    );
    assert!(
        read_ns(&second) >= read_ns(&end),
        "the device was handed over while a survivor of the killed runner's tree still ran"
    );
}

#[test]
fn signals_reach_the_remaining_tree_after_the_command_exited() {
    let Some(bin) = runner() else { return };
    let (_t, dir) = tmp();
    let mut r = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--",
            "sh",
            "-c",
            "setsid sleep 60 < /dev/null > /dev/null 2>&1 & exit 3",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    let mut err = r.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        r.try_wait().expect("poll").is_none(),
        "the runner must wait for the daemon"
    );
    let t0 = Instant::now();
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(r.id() as i32, libc::SIGTERM) };
    let code = r.wait().expect("wait").code();
    assert_eq!(code, Some(3), "exits with the command's status");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(reader.join().expect("join").contains("remaining process"));
}

#[test]
fn timeout_values_never_panic_and_bad_ones_create_nothing() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    let st = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--timeout", "1e19", "--", "true"],
    )
    .status()
    .expect("run");
    assert_eq!(st.code(), Some(0));
    let missing = t.path().join("never-created");
    for bad in ["nan", "inf", "-1", "1e20", "1e400"] {
        let out = Command::new(&bin)
            .args(["--lock-dir", missing.to_str().expect("utf8")])
            .args(["--visible-devices", "0", "--timeout", bad, "--", "true"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--timeout"),
            "{bad}"
        );
        assert!(!missing.exists(), "{bad} created the lock directory");
    }
    let out = Command::new(&bin)
        .env("GPUMUTEX_TIMEOUT", "NaN")
        .args(["--lock-dir", missing.to_str().expect("utf8")])
        .args(["--visible-devices", "0", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(!missing.exists());
}

#[test]
fn an_untrusted_lock_directory_is_refused_with_a_safe_choice() {
    let Some(bin) = runner() else { return };
    let (t, _dir) = tmp();
    let open = t.path().join("open");
    fs::create_dir(&open).expect("mkdir");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = run(&bin, &open, &["--visible-devices", "0", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing lock directory") && err.contains("per user"),
        "{err}"
    );
    assert!(fs::read_dir(&open).expect("ls").next().is_none());
    // --status still reads it, and says so.
    let out = run(&bin, &open, &["--status"]).output().expect("status");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT TRUSTED"));
}

/// Attack 3 through the CLI: FIFOs under record names hung `--status`, every run, and made
/// `--timeout` and Ctrl-C ineffective.
#[test]
fn fifos_in_the_lock_directory_hang_nothing() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    for name in [
        "gpukit-claim.00000000000000000000000000000001",
        "gpukit-ticket.00000000000000000000.00000000000000000000000000000001",
        "gpukit-dev0.lock",
        "gpukit-queue.lock",
    ] {
        let c = std::ffi::CString::new(dir.join(name).to_str().expect("utf8")).expect("c");
        // SAFETY: valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }
    let t0 = Instant::now();
    let out = run(&bin, &dir, &["--status"]).output().expect("status");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("ignored: "));
    let started = t.path().join("started");
    let mut holder = run(
        &bin,
        &dir,
        &[
            "--visible-devices",
            "0",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 2", started.display()),
        ],
    )
    .spawn()
    .expect("spawn");
    wait_for("holder", || started.exists());
    let st = run(
        &bin,
        &dir,
        &["--visible-devices", "0", "--timeout", "0.3", "--", "true"],
    )
    .stderr(Stdio::null())
    .status()
    .expect("run");
    assert_eq!(st.code(), Some(124));
    let mut waiter = run(&bin, &dir, &["--visible-devices", "0", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(waiter.id() as i32, libc::SIGHUP) };
    assert_eq!(waiter.wait().expect("wait").code(), Some(129));
    assert!(t0.elapsed() < Duration::from_secs(10));
    holder.wait().expect("holder");
}

/// The UUID the fake driver tree gives GPU `i`.
fn fake_uuid(i: usize) -> String {
    format!("GPU-{i:08x}-1111-2222-3333-{:012x}", 0xabc000 + i)
}

/// A fake `/proc/driver/nvidia/gpus` with `n` GPUs of one model; returns its
/// `GPUMUTEX_DEVICE_SOURCE` value.
fn fake_gpus(root: &Path, n: usize) -> String {
    let dir = root.join("gpus");
    for i in 0..n {
        let bus = format!("0000:{:02x}:00.0", 0x18 + i * 0x10);
        fs::create_dir_all(dir.join(&bus)).expect("mkdir");
        fs::write(
            dir.join(&bus).join("information"),
            format!(
                "Model: \t\t NVIDIA H200\nGPU UUID: \t {}\nBus Location: \t {bus}\n",
                fake_uuid(i)
            ),
        )
        .expect("write");
    }
    format!("proc:{}", dir.display())
}

/// Issue 24 (device locks, simulated): on a 4-GPU machine (a fake driver tree), two jobs
/// under `gpumutex-run --num-devices 2` get disjoint pairs and run side by side, a third
/// waits until a pair is free; each command sees its pair in `CUDA_VISIBLE_DEVICES` in its
/// own numbering, and its `GPUMUTEX_VISIBLE_DEVICES` is `0,1`. The runners inherit different
/// views (none; `CUDA_VISIBLE_DEVICES=3,2,1,0`; `0,1,2,3`): the pairs are disjoint physical
/// GPUs all the same.
#[test]
fn num_devices_2_gives_two_jobs_disjoint_pairs_and_a_third_waits() {
    let Some(bin) = runner() else { return };
    let (t, dir) = tmp();
    let source = fake_gpus(t.path(), 4);
    let release = t.path().join("release");
    // Whatever happens, the commands end (and the runners with them) when the test does.
    struct Release(PathBuf);
    impl Drop for Release {
        fn drop(&mut self) {
            let _ = fs::write(&self.0, b"");
        }
    }
    let _end = Release(release.clone());
    let job = |tag: &str, view: Option<&str>| {
        let out = t.path().join(format!("{tag}.out"));
        let script = format!(
            "echo \"$CUDA_VISIBLE_DEVICES $GPUMUTEX_VISIBLE_DEVICES $GPUMUTEX_NUM_DEVICES\" > {out}.tmp; \
             mv {out}.tmp {out}; while [ ! -e {rel} ]; do sleep 0.02; done",
            out = out.display(),
            rel = release.display()
        );
        let mut c = run(
            &bin,
            &dir,
            &[
                "--visible-devices",
                "all",
                "--num-devices",
                "2",
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        c.env("GPUMUTEX_DEVICE_SOURCE", &source);
        if let Some(v) = view {
            c.env("CUDA_VISIBLE_DEVICES", v);
        }
        (c.spawn().expect("spawn"), out)
    };
    let read = |p: &Path| fs::read_to_string(p).unwrap_or_default().trim().to_string();
    let (mut j1, o1) = job("j1", None);
    wait_for("job 1 runs", || o1.exists());
    let (mut j2, o2) = job("j2", Some("3,2,1,0"));
    wait_for("job 2 runs", || o2.exists());
    let (l1, l2) = (read(&o1), read(&o2));
    // Without an inherited view the fake driver's order is CUDA's: indices are physical.
    assert_eq!(l1, "0,1 0,1 2", "job 1");
    assert_eq!(l2, "3,2 0,1 2", "job 2 (its view starts with GPU 3)");
    // The third job waits: queued, its command not run.
    let (mut j3, o3) = job("j3", Some("0,1,2,3"));
    let status = || {
        let o = Command::new(&bin)
            .args(["--lock-dir", dir.to_str().expect("utf8"), "--status"])
            .env("GPUMUTEX_DEVICE_SOURCE", &source)
            // the simulated machine's view, not the host's (a GPU container sets these)
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("NVIDIA_VISIBLE_DEVICES")
            .env_remove("CUDA_DEVICE_ORDER")
            .output()
            .expect("status");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    wait_for("job 3 queued", || status().contains("1 waiting"));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!o3.exists(), "a third pair was granted on a 4-GPU machine");
    let s = status();
    for i in 0..4 {
        assert!(
            s.contains(&format!("device {i} ({}): pid", fake_uuid(i))),
            "GPU {i} busy: {s}"
        );
    }
    // Job 1 ends: job 3 gets its pair.
    let rel1 = t.path().join("rel1");
    fs::write(&rel1, b"").expect("touch");
    fs::rename(&rel1, &release).expect("release all");
    assert!(j1.wait().expect("j1").success());
    assert!(j2.wait().expect("j2").success());
    wait_for("job 3 runs", || o3.exists());
    let l3 = read(&o3);
    assert!(
        l3 == "0,1 0,1 2" || l3 == "2,3 0,1 2" || l3 == "3,2 0,1 2",
        "job 3 got a pair in its own numbering: {l3}"
    );
    assert!(j3.wait().expect("j3").success());
}
