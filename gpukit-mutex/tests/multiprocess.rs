//! Multi-process tests with real processes and real signals (no GPU needed).
//!
//! The test binary re-executes itself (`std::env::current_exe()`) with `GMT_ROLE` set to play a
//! child role (see `child_entry`), so it works when the binary is copied to another host.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpukit_mutex::{CancelToken, DeviceSource, Error, GpuMutex};

mod common;
use common::*;

// ---------------------------------------------------------------- child roles

/// Entry point of re-executed children; a no-op in a normal test run.
#[test]
fn child_entry() {
    let Ok(r) = std::env::var("GMT_ROLE") else {
        return;
    };
    let out = PathBuf::from(env("GMT_OUT"));
    let tag = env("GMT_TAG");
    match r.as_str() {
        // Acquire, hold for GMT_HOLD_MS, release; GMT_ITERS times. Records intervals.
        "hold" => {
            let m = mutex_from_env();
            let n: usize = env("GMT_N").parse().unwrap_or(1);
            let iters: usize = env("GMT_ITERS").parse().unwrap_or(1);
            for _ in 0..iters {
                match m.acquire_timeout(n, env_ms("GMT_TIMEOUT_MS", 60_000)) {
                    Ok(g) => {
                        let s = mono_ns();
                        std::thread::sleep(env_ms("GMT_HOLD_MS", 10));
                        let e = mono_ns();
                        append(&out, &format!("{tag} {} {s} {e}", devs_str(g.devices())));
                        drop(g);
                    }
                    Err(e) => append(&out, &format!("{tag} ERR {e}")),
                }
            }
        }
        // Hold the join lock (an exclusive flock on the directory) until GMT_RELEASE exists.
        "flock_dir" => {
            let f = fs::File::open(env("GMT_DIR")).expect("open dir");
            use std::os::fd::AsRawFd;
            // SAFETY: plain syscall on our descriptor.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            append(&out, "flock held");
            let rel = PathBuf::from(env("GMT_RELEASE"));
            while !rel.exists() {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // Acquire, announce, hold until GMT_RELEASE exists (or until killed).
        "hold_until" => {
            let m = mutex_from_env();
            let g = m.acquire(1).expect("acquire");
            append(&out, &format!("{tag} held {}", devs_str(g.devices())));
            let rel = PathBuf::from(env("GMT_RELEASE"));
            while !rel.exists() {
                std::thread::sleep(Duration::from_millis(2));
            }
            drop(g);
        }
        // Acquire, then start a grandchild that must share the claim (mode: copy/clear/setsid).
        "tree" => {
            let m = mutex_from_env();
            let _g = m.acquire(1).expect("acquire");
            let mode = env("GMT_MODE");
            let exe = std::env::current_exe().expect("exe");
            let mut c = Command::new(exe);
            c.args([
                "--exact",
                "child_entry",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .stdout(Stdio::null());
            if mode == "clear" {
                c.env_clear();
            }
            c.env("GMT_ROLE", "tree_child")
                .env("GMT_DIR", env("GMT_DIR"))
                .env("GMT_OUT", env("GMT_OUT"))
                .env("GMT_DEVS", env("GMT_DEVS"));
            if mode == "setsid" {
                // SAFETY: setsid() is async-signal-safe and touches no Rust state.
                unsafe {
                    c.pre_exec(|| {
                        if libc::setsid() < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
            let st = c.status().expect("spawn grandchild");
            append(&out, &format!("tree grandchild exit {st}"));
        }
        "tree_child" => {
            let m = mutex_from_env();
            let t = Instant::now();
            match m.acquire_timeout(1, Duration::from_secs(3)) {
                Ok(g) => append(
                    &out,
                    &format!(
                        "child ok shared={} devs={} sid_differs={} ms={}",
                        g.is_shared(),
                        devs_str(g.devices()),
                        // SAFETY: getsid/getppid have no preconditions.
                        unsafe { libc::getsid(0) != libc::getsid(libc::getppid()) },
                        t.elapsed().as_millis()
                    ),
                ),
                Err(e) => append(&out, &format!("child err {e}")),
            }
        }
        // torchrun-style launcher: ranks are siblings. GMT_MODE=holds: the launcher holds the
        // claim; GMT_MODE=jobroot: it only exports GPUMUTEX_JOB_ROOT (the preload's way).
        "launcher" => {
            let mode = env("GMT_MODE");
            let m = mutex_from_env();
            let _g = (mode == "holds").then(|| m.acquire(1).expect("launcher acquire"));
            let mut ranks = Vec::new();
            for i in 0..2 {
                let exe = std::env::current_exe().expect("exe");
                let mut c = if mode == "torchrun_wrapped" {
                    // A wrapper script between the launcher and each rank (it carries the
                    // rank's variables, so it is not taken for the launcher).
                    let mut c = Command::new("sh");
                    c.arg("-c").arg("\"$@\"; true").arg("sh").arg(exe);
                    c
                } else {
                    Command::new(exe)
                };
                c.args([
                    "--exact",
                    "child_entry",
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .stdout(Stdio::null())
                .env("GMT_ROLE", "rank")
                .env("GMT_TAG", format!("rank{i}"))
                .env("GMT_PEER", format!("rank{}", 1 - i));
                if mode == "jobroot" {
                    c.env(
                        gpukit_mutex::ENV_JOB_ROOT,
                        gpukit_mutex::job_root_env_value().expect("job root"),
                    );
                }
                if mode == "half" {
                    if i == 0 {
                        c.env(
                            gpukit_mutex::ENV_JOB_ROOT,
                            gpukit_mutex::job_root_env_value().expect("job root"),
                        );
                    } else {
                        // Start later, and give up quickly: it must not get the device.
                        std::thread::sleep(Duration::from_millis(300));
                        c.env("GMT_RANK_TIMEOUT_MS", "500");
                    }
                }
                if mode == "torchrun" || mode == "torchrun_wrapped" {
                    c.env("LOCAL_RANK", i.to_string()).env("WORLD_SIZE", "2");
                }
                ranks.push(c.spawn().expect("spawn rank"));
            }
            for mut r in ranks {
                let _ = r.wait();
            }
        }
        "rank" => {
            let m = mutex_from_env();
            let dir = PathBuf::from(env("GMT_DIR"));
            let got = m.acquire_timeout(1, env_ms("GMT_RANK_TIMEOUT_MS", 5000));
            match &got {
                Ok(g) => append(
                    &out,
                    &format!(
                        "{tag} ok devs={} shared={}",
                        devs_str(g.devices()),
                        g.is_shared()
                    ),
                ),
                Err(e) => append(&out, &format!("{tag} err {e}")),
            }
            // Like an NCCL rendezvous: both ranks must hold their devices at the same time.
            fs::write(dir.join(format!("{tag}.up")), b"").expect("mark");
            let peer = dir.join(format!("{}.up", env("GMT_PEER")));
            let t = Instant::now();
            while !peer.exists() && t.elapsed() < Duration::from_secs(8) {
                std::thread::sleep(Duration::from_millis(2));
            }
            append(&out, &format!("{tag} rendezvous={}", peer.exists()));
        }
        // Acquire with a timeout and report what happened.
        "try" => {
            let m = mutex_from_env();
            let t = Instant::now();
            match m.acquire_timeout(1, env_ms("GMT_TIMEOUT_MS", 500)) {
                Ok(g) => append(
                    &out,
                    &format!(
                        "{tag} ok shared={} devs={} ms={}",
                        g.is_shared(),
                        devs_str(g.devices()),
                        t.elapsed().as_millis()
                    ),
                ),
                Err(e) => append(&out, &format!("{tag} err {e}")),
            }
        }
        // A shell in which LOCAL_RANK and WORLD_SIZE were exported by hand: two unrelated jobs.
        "shell" => {
            let spawn = |r: &str, t: &str| {
                let exe = std::env::current_exe().expect("exe");
                Command::new(exe)
                    .args([
                        "--exact",
                        "child_entry",
                        "--nocapture",
                        "--test-threads=1",
                        "-q",
                    ])
                    .stdout(Stdio::null())
                    .env("GMT_ROLE", r)
                    .env("GMT_TAG", t)
                    .spawn()
                    .expect("spawn job")
            };
            let mut first = spawn("hold_until", "job1");
            let t = Instant::now();
            while !read_lines(&out).iter().any(|l| l.starts_with("job1 held")) {
                assert!(t.elapsed() < Duration::from_secs(20), "job1 never held");
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = spawn("try", "job2").wait();
            let _ = first.wait();
        }
        // Acquire, fork a child that tries everything to free the parent's devices, then hold.
        "fork_unlock" => {
            let m = mutex_from_env();
            let g = m.acquire(1).expect("acquire");
            // SAFETY: fork in a single-purpose child process; the child only makes syscalls,
            // drops the guard (pid check, close) and leaves with _exit.
            let child = unsafe { libc::fork() };
            if child == 0 {
                for fd in 0..1024 {
                    // SAFETY: plain syscalls on whatever descriptors were inherited.
                    unsafe {
                        let mut fl: libc::flock = std::mem::zeroed();
                        fl.l_type = libc::F_UNLCK as libc::c_short;
                        libc::fcntl(fd, libc::F_SETLK, &mut fl);
                        libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl);
                        libc::flock(fd, libc::LOCK_UN);
                    }
                }
                drop(g);
                // SAFETY: leaves the forked child without running the parent's atexit state.
                unsafe { libc::_exit(0) };
            }
            let mut st = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(child, &mut st, 0) };
            append(&out, &format!("{tag} held {}", devs_str(g.devices())));
            let rel = PathBuf::from(env("GMT_RELEASE"));
            while !rel.exists() {
                std::thread::sleep(Duration::from_millis(2));
            }
            drop(g);
        }
        // Acquire, start a command that holds the claim (hold_in), then wait to be killed.
        "hold_in" => {
            let m = mutex_from_env();
            let g = m.acquire(1).expect("acquire");
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(format!(
                "echo \"$CUDA_VISIBLE_DEVICES $GPUMUTEX_VISIBLE_DEVICES $GPUMUTEX_NUM_DEVICES \
                 $GPUMUTEX_LOCK_DIR\" > {mark}.env; sleep 1; : > {mark}",
                mark = env("GMT_MARK")
            ));
            match env("GMT_MODE").as_str() {
                // What another launcher (Python's subprocess with env= and pass_fds=) does with
                // the two plain lists.
                "raw" => {
                    cmd.envs(g.child_env());
                    let fds = g.inheritable_fds();
                    assert!(!fds.is_empty());
                    // SAFETY: only fcntl (async-signal-safe) between fork and exec.
                    unsafe {
                        cmd.pre_exec(move || {
                            for &fd in &fds {
                                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                                    return Err(std::io::Error::last_os_error());
                                }
                            }
                            Ok(())
                        });
                    }
                }
                // Environment only: the claim ends with its holder.
                "env_only" => {
                    cmd.envs(g.child_env());
                }
                _ => {
                    g.apply(&mut cmd);
                    g.hold_in(&mut cmd);
                }
            }
            let mut child = cmd.spawn().expect("spawn");
            append(&out, &format!("{tag} spawned"));
            // The test kills this process while the command runs.
            let _ = child.wait();
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        // Plant a live ticket of this process under the name GMT_NAME.
        "ticket_at" => {
            let me = std::process::id();
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            let text = ticket_text(&env("GMT_NAME"), me, start_time(me), uid, &env("GMT_DEVS"));
            let _f = plant_locked(&PathBuf::from(env("GMT_DIR")).join(env("GMT_NAME")), &text);
            append(&out, &format!("{tag} planted"));
            let rel = PathBuf::from(env("GMT_RELEASE"));
            while !rel.exists() {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        // A process with a forged environment trying to skip the queue.
        "forge" => {
            let m = mutex_from_env();
            let r1 = m.try_acquire(1).expect("try");
            let r2 = m.acquire_timeout(1, Duration::from_millis(300));
            let verdict = match (r1, r2) {
                (None, Err(Error::Timeout { .. })) => "blocked".to_string(),
                (a, b) => format!(
                    "GOT try={} timed={:?}",
                    a.is_some(),
                    b.map(|g| g.devices().to_vec())
                ),
            };
            append(&out, &format!("forge {verdict}"));
        }
        other => panic!("unknown role {other}"),
    }
}

// ---------------------------------------------------------------- tests

fn holder(dir: &Path, out: &Path, devs: &str, tag: &str, release: &Path) -> Child {
    role("hold_until", dir, out)
        .env("GMT_DEVS", devs)
        .env("GMT_TAG", tag)
        .env("GMT_RELEASE", release)
        .spawn()
        .expect("spawn holder")
}

#[test]
fn exclusion_under_contention() {
    let (_t, dir, out) = setup();
    let mut kids = Reaper(Vec::new());
    let procs = 10;
    let iters = 4;
    for i in 0..procs {
        kids.0.push(
            role("hold", &dir, &out)
                .env("GMT_DEVS", "0,1,2")
                .env("GMT_N", if i % 3 == 0 { "2" } else { "1" })
                .env("GMT_ITERS", iters.to_string())
                .env("GMT_HOLD_MS", (2 + i % 5).to_string())
                .env("GMT_TAG", format!("p{i}"))
                .spawn()
                .expect("spawn"),
        );
    }
    for c in &mut kids.0 {
        assert!(c.wait().expect("wait").success());
    }
    let lines = read_lines(&out);
    assert_eq!(lines.len(), procs * iters, "{lines:#?}");
    let mut per_dev: std::collections::BTreeMap<u32, Vec<(u64, u64, String)>> = Default::default();
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_ne!(f[1], "ERR", "{l}");
        let (s, e): (u64, u64) = (f[2].parse().expect("s"), f[3].parse().expect("e"));
        let devs: Vec<u32> = f[1].split(',').map(|d| d.parse().expect("dev")).collect();
        let want = if f[0][1..].parse::<usize>().expect("tag") % 3 == 0 {
            2
        } else {
            1
        };
        assert_eq!(devs.len(), want, "{l}");
        for d in devs {
            assert!(d <= 2);
            per_dev.entry(d).or_default().push((s, e, f[0].to_string()));
        }
    }
    let mut overlaps = 0;
    for (d, mut iv) in per_dev {
        iv.sort();
        for w in iv.windows(2) {
            if w[1].0 < w[0].1 {
                overlaps += 1;
                eprintln!("overlap on device {d}: {:?} and {:?}", w[0], w[1]);
            }
        }
    }
    assert_eq!(overlaps, 0);
}

#[test]
fn fifo_order_and_dead_waiter_skipped() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    let order_out = t.path().join("order.txt");
    for i in 1..=5 {
        kids.0.push(
            role("hold", &dir, &order_out)
                .env("GMT_DEVS", "0")
                .env("GMT_HOLD_MS", "15")
                .env("GMT_TAG", format!("w{i}"))
                .spawn()
                .expect("spawn"),
        );
        wait_until("waiter enqueued", Duration::from_secs(20), || {
            waiters(&dir) == i
        });
    }
    // Kill waiter 3 in the middle of the queue: it must be skipped, never block the line.
    kids.0[3].kill().expect("kill");
    kids.0[3].wait().expect("reap");
    wait_until("dead waiter ignored", Duration::from_secs(5), || {
        waiters(&dir) == 4
    });
    let st = status(&dir, &[0]);
    assert_eq!(st.waiters.len(), 4);
    assert!(
        st.devices[0].busy && st.devices[0].holders.len() == 1,
        "{st}"
    );
    fs::write(&release, b"").expect("release");
    for c in kids.0.iter_mut().skip(1) {
        let _ = c.wait();
    }
    let mut lines: Vec<(u64, String)> = read_lines(&order_out)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[2].parse().expect("start"), f[0].to_string())
        })
        .collect();
    lines.sort();
    let order: Vec<String> = lines.into_iter().map(|(_, t)| t).collect();
    assert_eq!(order, ["w1", "w2", "w4", "w5"]);
}

#[test]
fn holder_killed_with_sigkill_is_released_at_once() {
    let (t, dir, out) = setup();
    let release = t.path().join("never");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    kids.0.push(
        role("hold", &dir, &out)
            .env("GMT_DEVS", "0")
            .env("GMT_HOLD_MS", "1")
            .env("GMT_TAG", "W")
            .spawn()
            .expect("spawn"),
    );
    wait_until("waiter enqueued", Duration::from_secs(20), || {
        waiters(&dir) == 1
    });
    std::thread::sleep(Duration::from_millis(50));
    let t0 = mono_ns();
    kids.0[0].kill().expect("SIGKILL holder");
    kids.0[1].wait().expect("wait");
    let line = read_lines(&out)
        .into_iter()
        .find(|l| l.starts_with("W "))
        .expect("waiter ran");
    let start: u64 = line.split(' ').nth(2).expect("start").parse().expect("num");
    let ms = (start.saturating_sub(t0)) as f64 / 1e6;
    eprintln!("SIGKILL -> next waiter granted: {ms:.2} ms");
    // Typically about a millisecond on an idle machine (the kernel drops the flock and emits a
    // close event); the bound absorbs scheduling delays on loaded CI hosts.
    assert!(ms < 1000.0, "hand-over after SIGKILL took {ms} ms");
}

#[test]
fn timeouts_try_and_cancel() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let _kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0])
        .lock_dir(&dir)
        .build()
        .expect("build");
    assert!(m.try_acquire(1).expect("try").is_none());
    let t0 = Instant::now();
    match m.acquire_timeout(1, Duration::from_millis(300)) {
        Err(Error::Timeout { requested: 1, .. }) => {}
        other => panic!("expected timeout, got {other:?}"),
    }
    let el = t0.elapsed();
    assert!(
        el >= Duration::from_millis(300) && el < Duration::from_secs(3),
        "{el:?}"
    );
    assert_eq!(waiters(&dir), 0, "a timed-out waiter must leave the queue");
    // Builder default timeout.
    let m2 = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0])
        .lock_dir(&dir)
        .timeout(Duration::from_millis(100))
        .build()
        .expect("build");
    assert!(matches!(m2.lock(), Err(Error::Timeout { .. })));
    // No deadline can be formed from Duration::MAX: it waits without limit (and cancels).
    let tok = CancelToken::new().expect("token");
    let tok2 = tok.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        tok2.cancel();
    });
    assert!(matches!(
        m.acquire_with(1, Some(Duration::MAX), Some(&tok)),
        Err(Error::Cancelled)
    ));
    h.join().expect("join");
    // Cancellation ends the wait at once.
    let tok = CancelToken::new().expect("token");
    let tok2 = tok.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        (mono_ns(), tok2.cancel()).0
    });
    let r = m.acquire_with(1, None, Some(&tok));
    let woke = mono_ns();
    let cancelled_at = h.join().expect("join");
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    let ms = woke.saturating_sub(cancelled_at) as f64 / 1e6;
    eprintln!("cancel -> wait ended: {ms:.3} ms");
    // Immediate in practice (sub-millisecond on an idle machine); the bound only absorbs
    // scheduling delays on loaded CI hosts.
    assert!(ms < 2000.0, "{ms}");
    assert_eq!(waiters(&dir), 0);
    assert!(matches!(
        m.acquire_with(1, None, Some(&tok)),
        Err(Error::Cancelled)
    ));
    fs::write(&release, b"").expect("release");
    let g = m
        .acquire_timeout(1, Duration::from_secs(20))
        .expect("acquire after release");
    assert_eq!(g.devices(), [0]);
}

fn tree_case(mode: &str) {
    let (_t, dir, out) = setup();
    let mut c = role("tree", &dir, &out)
        .env("GMT_DEVS", "0")
        .env("GMT_MODE", mode)
        .spawn()
        .expect("spawn");
    assert!(c.wait().expect("wait").success());
    let lines = read_lines(&out);
    let child = lines
        .iter()
        .find(|l| l.starts_with("child"))
        .expect("child line");
    assert!(
        child.starts_with("child ok shared=true devs=0"),
        "{mode}: {lines:?}"
    );
    if mode == "setsid" {
        assert!(child.contains("sid_differs=true"), "{child}");
    }
}

#[test]
fn descendant_shares_claim_with_copied_env() {
    tree_case("copy");
}

#[test]
fn descendant_shares_claim_with_cleared_env() {
    tree_case("clear");
}

#[test]
fn descendant_shares_claim_after_setsid() {
    tree_case("setsid");
}

fn launcher_case(mode: &str) {
    let (_t, dir, out) = setup();
    let mut c = role("launcher", &dir, &out)
        .env("GMT_DEVS", "0,1")
        .env("GMT_MODE", mode)
        .spawn()
        .expect("spawn");
    assert!(c.wait().expect("wait").success());
    let lines = read_lines(&out);
    for r in ["rank0", "rank1"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("{r} ok devs="))),
            "{mode}: {lines:?}"
        );
        assert!(
            lines.contains(&format!("{r} rendezvous=true")),
            "{mode}: {lines:?}"
        );
    }
    // Both ranks see the same devices.
    let devs: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains(" ok devs="))
        .filter_map(|l| l.split("devs=").nth(1)?.split(' ').next())
        .collect();
    assert_eq!(devs.len(), 2);
    assert_eq!(devs[0], devs[1], "{lines:?}");
}

#[test]
fn sibling_ranks_share_launchers_claim() {
    launcher_case("holds");
}

#[test]
fn sibling_ranks_share_via_job_root_without_launcher_claim() {
    launcher_case("jobroot");
}

#[test]
fn sibling_ranks_share_via_torchrun_env_without_launcher_claim() {
    launcher_case("torchrun");
}

#[test]
fn unrelated_sibling_without_job_does_not_share_job_claim() {
    // A launcher exports a job root to one child only; the other child must queue.
    let (_t, dir, out) = setup();
    let mut c = role("launcher", &dir, &out)
        .env("GMT_DEVS", "0")
        .env("GMT_MODE", "half")
        .spawn()
        .expect("spawn");
    assert!(c.wait().expect("wait").success());
    let lines = read_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("rank0 ok devs=0 shared=false")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("rank1 err timed out")),
        "{lines:?}"
    );
}

#[test]
fn forged_environment_does_not_skip_the_queue() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    let holder_pid = kids.0[0].id();
    let forged = format!("{}:{}", holder_pid, start_time(holder_pid));
    let mut f = role("forge", &dir, &out)
        .env("GMT_DEVS", "0")
        .env(gpukit_mutex::ENV_JOB_ROOT, &forged)
        .env("CUDA_VISIBLE_DEVICES", "0")
        .env("GPUMUTEX_VISIBLE_DEVICES", "0")
        .env("LOCAL_RANK", "1")
        .env("WORLD_SIZE", "2")
        .spawn()
        .expect("spawn");
    f.wait().expect("wait");
    let lines = read_lines(&out);
    assert!(lines.contains(&"forge blocked".to_string()), "{lines:?}");
    fs::write(&release, b"").expect("release");
    kids.0[0].wait().expect("holder exit");
}

#[test]
fn backfill_uses_only_devices_the_head_cannot_use() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    // Head: pinned to busy device 0.
    kids.0.push(
        role("hold", &dir, &out)
            .env("GMT_DEVS", "0")
            .env("GMT_HOLD_MS", "1")
            .env("GMT_TAG", "head")
            .spawn()
            .expect("spawn"),
    );
    wait_until("head queued", Duration::from_secs(20), || {
        waiters(&dir) == 1
    });
    // Without backfill, a request for {0,1} waits behind the head (FIFO) ...
    let strict = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0, 1])
        .lock_dir(&dir)
        .build()
        .expect("build");
    assert!(strict.try_acquire(1).expect("try").is_none());
    // ... with backfill it takes device 1, which the head cannot use.
    let bf = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0, 1])
        .lock_dir(&dir)
        .backfill(true)
        .build()
        .expect("build");
    let g = bf.try_acquire(1).expect("try").expect("backfilled");
    assert_eq!(g.devices(), [1]);
    // Backfill never takes device 0 from the head: release H, the head gets it.
    fs::write(&release, b"").expect("release");
    kids.0[1].wait().expect("head done");
    assert!(read_lines(&out).iter().any(|l| l.starts_with("head 0 ")));
    drop(g);
}

#[test]
fn all_or_nothing_multi_device() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0,1", "H", &release)]);
    wait_line(&out, "H held 0");
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0, 1])
        .lock_dir(&dir)
        .build()
        .expect("build");
    // Device 1 is free but the request needs both: nothing is taken while waiting.
    assert!(m.try_acquire(2).expect("try").is_none());
    assert!(!busy(&dir, 1));
    let one = m.try_acquire(1).expect("try").expect("device 1 free");
    assert_eq!(one.devices(), [1]);
    drop(one);
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        fs::write(&release, b"").expect("release");
    });
    let g = m.acquire_timeout(2, Duration::from_secs(20)).expect("both");
    assert_eq!(g.devices(), [0, 1]);
    assert_eq!(g.cuda_visible_devices(), "0,1");
    h.join().expect("join");
    kids.0[0].wait().expect("holder exit");
}

#[test]
fn status_reports_holders_and_queue_in_order() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    for i in 1..=2 {
        kids.0.push(
            role("hold", &dir, &out)
                .env("GMT_DEVS", "0")
                .env("GMT_TAG", format!("w{i}"))
                .spawn()
                .expect("spawn"),
        );
        wait_until("queued", Duration::from_secs(20), || waiters(&dir) == i);
    }
    let st = status(&dir, &[0, 1]);
    let d0 = &st.devices[0];
    assert!(d0.busy);
    assert_eq!(d0.holders[0].pid, kids.0[0].id());
    assert!(!d0.holders[0].shared);
    assert!(
        d0.holders[0].cmd.contains("child_entry"),
        "{}",
        d0.holders[0].cmd
    );
    assert!(d0.holders[0].since <= std::time::SystemTime::now());
    assert!(!st.devices[1].busy);
    let pids: Vec<u32> = st.waiters.iter().map(|w| w.pid).collect();
    assert_eq!(pids, [kids.0[1].id(), kids.0[2].id()]);
    let text = st.to_string();
    assert!(
        text.contains("device 0:") && text.contains("queue (2 waiting"),
        "{text}"
    );
    fs::write(&release, b"").expect("release");
}

#[test]
fn nested_acquire_in_same_process_shares() {
    let (_t, dir, _out) = setup();
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([3, 5])
        .lock_dir(&dir)
        .build()
        .expect("build");
    let a = m.acquire(1).expect("first");
    assert_eq!(a.devices(), [3]);
    let b = m
        .acquire_timeout(1, Duration::from_secs(2))
        .expect("nested");
    assert!(b.is_shared());
    assert_eq!(b.devices(), [3]);
    assert!(matches!(
        m.acquire_timeout(2, Duration::from_secs(1)),
        Err(Error::InheritedClaimTooSmall { .. })
    ));
    drop(a);
    // The sharer still holds device 3.
    assert!(busy(&dir, 3));
    drop(b);
    assert!(!busy(&dir, 3));
}

#[test]
fn sibling_ranks_share_through_a_wrapper_script() {
    launcher_case("torchrun_wrapped");
}

#[test]
fn ranks_share_under_a_launcher_that_is_pid_1() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(
            "ranks_share_under_a_launcher_that_is_pid_1",
            "needs root for a pid namespace",
        );
        return;
    }
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        skip_env(
            "ranks_share_under_a_launcher_that_is_pid_1",
            "unshare --pid not available",
        );
        return;
    }
    let (_t, dir, out) = setup();
    let exe = std::env::current_exe().expect("exe");
    let st = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(exe)
        .args([
            "--exact",
            "child_entry",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("GMT_ROLE", "launcher")
        .env("GMT_DIR", &dir)
        .env("GMT_OUT", &out)
        .env("GMT_DEVS", "0")
        .env("GMT_MODE", "torchrun")
        .env_remove("GPUMUTEX_JOB_ROOT")
        .stdout(Stdio::null())
        .status()
        .expect("unshare");
    assert!(st.success());
    let lines = read_lines(&out);
    for r in ["rank0", "rank1"] {
        assert!(lines.contains(&format!("{r} rendezvous=true")), "{lines:?}");
    }
    assert!(
        lines.iter().any(|l| l.contains("shared=true")),
        "the second rank shares the first's claim: {lines:?}"
    );
}

#[test]
fn rank_variables_exported_in_a_shell_do_not_join_unrelated_jobs() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut shell = role("shell", &dir, &out)
        .env("GMT_DEVS", "0")
        .env("GMT_RELEASE", &release)
        .env("GMT_TIMEOUT_MS", "600")
        .env("LOCAL_RANK", "0")
        .env("WORLD_SIZE", "2")
        .spawn()
        .expect("spawn");
    wait_line(&out, "job2 ");
    fs::write(&release, b"").expect("release");
    assert!(shell.wait().expect("wait").success());
    let lines = read_lines(&out);
    assert!(
        lines.iter().any(|l| l.starts_with("job2 err timed out")),
        "job2 must queue behind job1, not share it: {lines:?}"
    );
}

#[test]
fn a_forked_child_cannot_free_its_parents_devices() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![role("fork_unlock", &dir, &out)
        .env("GMT_DEVS", "0")
        .env("GMT_TAG", "P")
        .env("GMT_RELEASE", &release)
        .spawn()
        .expect("spawn")]);
    wait_line(&out, "P held 0");
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0])
        .lock_dir(&dir)
        .build()
        .expect("build");
    assert!(matches!(
        m.acquire_timeout(1, Duration::from_millis(400)),
        Err(Error::Timeout { .. })
    ));
    assert!(busy(&dir, 0));
    fs::write(&release, b"").expect("release");
    kids.0[0].wait().expect("wait");
    let g = m
        .acquire_timeout(1, Duration::from_secs(20))
        .expect("after release");
    assert_eq!(g.devices(), [0]);
}

#[test]
fn a_waiter_whose_ticket_vanished_rejoins_instead_of_waiting_forever() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    kids.0.push(
        role("hold", &dir, &out)
            .env("GMT_DEVS", "0")
            .env("GMT_TAG", "W")
            .env("GMT_TIMEOUT_MS", "20000")
            .spawn()
            .expect("spawn"),
    );
    wait_until("queued", Duration::from_secs(20), || waiters(&dir) == 1);
    // Remove the waiter's ticket by hand.
    for e in fs::read_dir(&dir).expect("ls").flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with("gpukit-ticket.")
        {
            fs::remove_file(e.path()).expect("rm ticket");
        }
    }
    // It notices on its next pass and queues again.
    wait_until("ticket recreated", Duration::from_secs(20), || {
        waiters(&dir) == 1
    });
    fs::write(&release, b"").expect("release");
    kids.0[1].wait().expect("waiter");
    assert!(
        read_lines(&out).iter().any(|l| l.starts_with("W 0 ")),
        "{:?}",
        read_lines(&out)
    );
}

#[test]
fn status_never_disturbs_grants() {
    let (_t, dir, out) = setup();
    let mut kids = Reaper(Vec::new());
    for i in 0..3 {
        kids.0.push(
            role("hold", &dir, &out)
                .env("GMT_DEVS", "0")
                .env("GMT_ITERS", "25")
                .env("GMT_HOLD_MS", "1")
                .env("GMT_TAG", format!("p{i}"))
                .spawn()
                .expect("spawn"),
        );
    }
    let mut reads = 0;
    while read_lines(&out).len() < 75 {
        status(&dir, &[0]);
        reads += 1;
        assert!(reads < 2_000_000, "{:?}", read_lines(&out));
    }
    for c in &mut kids.0 {
        assert!(c.wait().expect("wait").success());
    }
    let lines = read_lines(&out);
    assert!(lines.iter().all(|l| !l.contains("ERR")), "{lines:?}");
    let mut iv: Vec<(u64, u64)> = lines
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[2].parse().expect("s"), f[3].parse().expect("e"))
        })
        .collect();
    iv.sort();
    assert!(iv.windows(2).all(|w| w[1].0 >= w[0].1), "overlap");
    eprintln!("{reads} status reads during 75 grants");
}

#[test]
fn a_lock_directory_replaced_while_in_use_is_refused() {
    let (t, dir, _out) = setup();
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0])
        .lock_dir(&dir)
        .build()
        .expect("build");
    drop(m.acquire(1).expect("acquire"));
    fs::rename(&dir, t.path().join("moved")).expect("rename");
    fs::create_dir(&dir).expect("mkdir");
    match m.acquire_timeout(1, Duration::from_secs(2)) {
        Err(e @ Error::LockDir { .. }) => assert!(e.to_string().contains("replaced"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// Kills a holder that started a command in `mode` (see the `hold_in` role) and returns
/// whether the command had finished when the device was granted next, and the environment the
/// command saw.
fn kill_holder_of_a_command(mode: &str) -> (bool, String) {
    let (t, dir, out) = setup();
    let mark = t.path().join("command-done");
    let mut kids = Reaper(vec![role("hold_in", &dir, &out)
        .env("GMT_DEVS", "2,0")
        .env("GMT_TAG", "H")
        .env("GMT_MARK", &mark)
        .env("GMT_MODE", mode)
        .spawn()
        .expect("spawn")]);
    wait_line(&out, "H spawned");
    wait_until("the command's environment", Duration::from_secs(20), || {
        fs::read_to_string(mark.with_extension("env")).is_ok_and(|s| s.ends_with('\n'))
    });
    kids.0[0].kill().expect("SIGKILL the holder");
    kids.0[0].wait().expect("reap");
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .ignore_env()
        .visible_devices([2])
        .lock_dir(&dir)
        .build()
        .expect("build");
    let g = m
        .acquire_timeout(1, Duration::from_secs(20))
        .expect("acquire");
    let done = mark.exists();
    drop(g);
    // The command (no longer anybody's child) ends on its own; let it, before the directory goes.
    wait_until("the command's end", Duration::from_secs(20), || {
        mark.exists()
    });
    let env = fs::read_to_string(mark.with_extension("env")).expect("env");
    (done, env.trim().to_string())
}

#[test]
fn a_command_given_the_claim_keeps_it_after_its_holder_is_killed() {
    let (done, env) = kill_holder_of_a_command("");
    assert!(
        done,
        "the device was granted while the killed holder's command still ran"
    );
    assert!(env.starts_with("2 0 1 /"), "{env}");
}

/// `child_env` and `inheritable_fds` are all another launcher needs: the command sees the
/// same environment `apply` sets, and the passed descriptors keep the claim alive after the
/// holder is killed; without them (environment only) the claim ends with the holder.
#[test]
fn child_env_and_inheritable_fds_share_the_claim_with_any_launcher() {
    let (done, env) = kill_holder_of_a_command("raw");
    assert!(done, "the passed descriptors did not keep the claim");
    assert!(env.starts_with("2 0 1 /"), "{env}");
    let (done, env) = kill_holder_of_a_command("env_only");
    assert!(
        !done,
        "without the descriptors the claim must end with its holder"
    );
    assert!(env.starts_with("2 0 1 /"), "{env}");
}

#[test]
fn a_reused_ticket_name_is_a_new_ticket() {
    let (t, dir, out) = setup();
    let release_h = t.path().join("release-h");
    let release_r = t.path().join("release-r");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release_h)]);
    wait_line(&out, "H held");
    let order = t.path().join("order.txt");
    for tag in ["W1", "W2"] {
        kids.0.push(
            role("hold", &dir, &order)
                .env("GMT_DEVS", "0")
                .env("GMT_TAG", tag)
                .env("GMT_HOLD_MS", "1")
                .spawn()
                .expect("spawn"),
        );
        let n = kids.0.len() - 1;
        wait_until("queued", Duration::from_secs(20), || waiters(&dir) == n);
    }
    // W1 queued first: its ticket is first in queue (name) order.
    let n1 = ticket_names(&dir).remove(0);
    // W2 pauses (it has already seen W1's ticket); W1 dies; its name is taken by a new ticket.
    // SAFETY: signals to our own children.
    unsafe { libc::kill(kids.0[2].id() as i32, libc::SIGSTOP) };
    let w2 = kids.0[2].id();
    wait_until("W2 stopped", Duration::from_secs(20), || {
        let st = fs::read_to_string(format!("/proc/{w2}/stat")).unwrap_or_default();
        st.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('T'))
    });
    kids.0[1].kill().expect("kill W1");
    kids.0[1].wait().expect("reap W1");
    fs::remove_file(dir.join(&n1)).expect("rm");
    kids.0.push(
        role("ticket_at", &dir, &out)
            .env("GMT_DEVS", "0")
            .env("GMT_NAME", &n1)
            .env("GMT_TAG", "R")
            .env("GMT_RELEASE", &release_r)
            .spawn()
            .expect("spawn"),
    );
    wait_line(&out, "R planted");
    let ino = |name: &str| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(dir.join(name)).expect("md").ino()
    };
    let planted = ino(&n1);
    // SAFETY: as above.
    unsafe { libc::kill(kids.0[2].id() as i32, libc::SIGCONT) };
    // The holder leaves: W2 must not take the device ahead of the new ticket, nor remove it.
    fs::write(&release_h, b"").expect("release H");
    kids.0[0].wait().expect("H");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(ino(&n1), planted, "W2 removed a live ticket");
    assert!(
        read_lines(&order).is_empty(),
        "W2 overtook: {:?}",
        read_lines(&order)
    );
    fs::write(&release_r, b"").expect("release R");
    kids.0[2].wait().expect("W2");
    assert!(read_lines(&order).iter().any(|l| l.starts_with("W2 0 ")));
}

/// Status reports in one thread while another thread of the same process takes and releases
/// claims: the reports must never close a descriptor of this process's own records (that would
/// drop their locks and let another process in). Checked against a competing process.
#[test]
fn in_process_status_never_drops_a_threads_claim() {
    let (_t, dir, out) = setup();
    // The competitor must not descend from this process (a descendant shares our claim by
    // design): start it through a shell that exits at once, so it is re-parented away.
    let exe = std::env::current_exe().expect("exe");
    let st = Command::new("sh")
        .arg("-c")
        .arg("\"$@\" > /dev/null 2>&1 < /dev/null &")
        .arg("sh")
        .arg(exe)
        .args([
            "--exact",
            "child_entry",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("GMT_ROLE", "hold")
        .env("GMT_DIR", &dir)
        .env("GMT_OUT", &out)
        .env("GMT_DEVS", "0")
        .env("GMT_ITERS", "60")
        .env("GMT_HOLD_MS", "1")
        .env("GMT_TAG", "W")
        .status()
        .expect("spawn");
    assert!(st.success());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                status(&dir, &[0]);
                n += 1;
            }
            n
        })
    };
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0])
        .lock_dir(&dir)
        .build()
        .expect("build");
    let mut mine = Vec::new();
    for _ in 0..60 {
        let g = m
            .acquire_timeout(1, Duration::from_secs(30))
            .expect("acquire");
        let s = mono_ns();
        std::thread::sleep(Duration::from_millis(1));
        mine.push((s, mono_ns()));
        drop(g);
    }
    wait_until("the competitor's 60 turns", Duration::from_secs(60), || {
        read_lines(&out).len() >= 60
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("reader");
    let theirs: Vec<(u64, u64)> = read_lines(&out)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[2].parse().expect("s"), f[3].parse().expect("e"))
        })
        .collect();
    assert_eq!(theirs.len(), 60);
    for a in &mine {
        for b in &theirs {
            assert!(a.1 <= b.0 || b.1 <= a.0, "overlap {a:?} {b:?}");
        }
    }
    eprintln!("{reads} in-process status reads");
}

fn ticket_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("gpukit-ticket.")
        })
        .count()
}

/// Cancels `tok` from another thread once `ready` holds, and returns when it did.
fn cancel_when(
    tok: &CancelToken,
    ready: impl Fn() -> bool + Send + 'static,
) -> std::thread::JoinHandle<Instant> {
    let tok = tok.clone();
    std::thread::spawn(move || {
        wait_until("the wait to be under way", Duration::from_secs(20), &ready);
        // Let the waiter settle into its sleep.
        std::thread::sleep(Duration::from_millis(20));
        tok.cancel();
        Instant::now()
    })
}

/// An acquisition waiting in one thread (queued behind another process's claim, or waiting
/// for the join lock another process holds) ends promptly when a token is cancelled from
/// another thread, and leaves nothing behind: its ticket is removed.
#[test]
fn cancel_from_another_thread_ends_a_queued_or_joining_wait_and_leaves_nothing() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .ignore_env()
        .visible_devices([0])
        .lock_dir(&dir)
        .build()
        .expect("build");
    // Queued behind the holder: the ticket exists, then the token fires.
    let tok = CancelToken::new().expect("token");
    let d2 = dir.clone();
    let h = cancel_when(&tok, move || ticket_files(&d2) == 1);
    let r = m.acquire_with(1, None, Some(&tok));
    let woke = Instant::now();
    let cancelled = h.join().expect("join");
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    let lag = woke.saturating_duration_since(cancelled);
    eprintln!("queued wait: cancel -> return {lag:?}");
    assert!(lag < Duration::from_millis(500), "{lag:?}");
    assert_eq!(ticket_files(&dir), 0, "the ticket was removed");
    // Waiting for the join lock another process holds (device 1 is free, but no decision can
    // be made): the same.
    let out2 = t.path().join("out2.txt");
    let release2 = t.path().join("release2");
    kids.0.push(
        role("flock_dir", &dir, &out2)
            .env("GMT_RELEASE", &release2)
            .spawn()
            .expect("flock"),
    );
    wait_line(&out2, "flock held");
    let m1 = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .ignore_env()
        .visible_devices([1])
        .lock_dir(&dir)
        .build()
        .expect("build");
    let tok = CancelToken::new().expect("token");
    let started = Instant::now();
    let h = cancel_when(&tok, move || started.elapsed() > Duration::from_millis(100));
    let r = m1.acquire_with(1, None, Some(&tok));
    let woke = Instant::now();
    let cancelled = h.join().expect("join");
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    let lag = woke.saturating_duration_since(cancelled);
    eprintln!("join-lock wait: cancel -> return {lag:?}");
    assert!(lag < Duration::from_millis(500), "{lag:?}");
    fs::write(&release2, b"").expect("release");
    let names: Vec<String> = fs::read_dir(&dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with("gpukit-claim.")),
        "only the holder's claim is left: {names:?}"
    );
    // The holder was not disturbed, and the device is granted after its release.
    assert!(busy(&dir, 0));
    fs::write(&release, b"").expect("release");
    let g = m
        .acquire_timeout(1, Duration::from_secs(20))
        .expect("acquire after release");
    assert_eq!(g.devices(), [0]);
}

/// A waiter at the head of the queue that is stopped (Ctrl-Z, SIGSTOP) or frozen holds up
/// nobody while it cannot take a grant: the next waiter gets the free device, status marks the
/// stopped one, and it keeps its place for when it runs again. Before: everybody behind it
/// waited for as long as it stayed stopped.
#[test]
fn a_stopped_waiter_at_the_head_does_not_stall_the_queue() {
    let (t, dir, out) = setup();
    let release = t.path().join("release");
    let mut kids = Reaper(vec![holder(&dir, &out, "0", "H", &release)]);
    wait_line(&out, "H held");
    let order = t.path().join("order.txt");
    for (i, tag) in ["W1", "W2"].into_iter().enumerate() {
        kids.0.push(
            role("hold", &dir, &order)
                .env("GMT_DEVS", "0")
                .env("GMT_TAG", tag)
                .env("GMT_HOLD_MS", "200")
                .spawn()
                .expect("spawn"),
        );
        wait_until("queued", Duration::from_secs(20), || waiters(&dir) == i + 1);
    }
    let w1 = kids.0[1].id();
    // SAFETY: signals our own child.
    unsafe { libc::kill(w1 as i32, libc::SIGSTOP) };
    wait_until("W1 stopped", Duration::from_secs(20), || {
        proc_state(w1) == 'T'
    });
    let st = status(&dir, &[0]);
    assert!(st.waiters[0].suspended && !st.waiters[1].suspended, "{st}");
    assert!(st.to_string().contains("stopped or frozen"), "{st}");
    fs::write(&release, b"").expect("release");
    wait_until("W2 granted", Duration::from_secs(20), || {
        read_lines(&order).iter().any(|l| l.starts_with("W2 "))
    });
    // SAFETY: as above.
    unsafe { libc::kill(w1 as i32, libc::SIGCONT) };
    wait_until("W1 granted", Duration::from_secs(20), || {
        read_lines(&order).iter().any(|l| l.starts_with("W1 "))
    });
    let lines = read_lines(&order);
    assert!(
        lines[0].starts_with("W2 ") && lines[1].starts_with("W1 "),
        "{lines:?}"
    );
}
