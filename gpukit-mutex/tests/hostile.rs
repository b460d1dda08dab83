//! What another, unprivileged user can do in a shared lock directory (issue 12's attacks), with
//! real processes running as two unprivileged users (a victim and an attacker), real FIFOs and
//! real sparse files. The lock directory is the shared, trusted kind: owned by root, mode 1777.
//! Needs root to start processes as other users; every test skips with a printed reason
//! otherwise.

use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpukit_mutex::{DeviceSource, Error, GpuMutex};

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
    let dir = PathBuf::from(env("GMT_DIR"));
    let tag = env("GMT_TAG");
    let release = PathBuf::from(env("GMT_RELEASE"));
    let wait_release = || {
        while !release.exists() {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    match r.as_str() {
        // Acquire, announce, hold until the release file exists.
        "hold_until" => {
            let m = mutex_from_env();
            let g = m.acquire(1).expect("acquire");
            append(&out, &format!("{tag} held {}", devs_str(g.devices())));
            wait_release();
            drop(g);
        }
        // Acquire with a timeout and report.
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
                Err(e) => append(
                    &out,
                    &format!("{tag} err {e} ms={}", t.elapsed().as_millis()),
                ),
            }
        }
        // The attacker's shell: has a helper plant a claim naming this shell, then runs a job.
        "attacker_shell" => {
            let me = std::process::id();
            let exe = std::env::current_exe().expect("exe");
            let mut helper = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "child_entry",
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .env("GMT_ROLE", "forge")
                .env("GMT_FORGE_PID", me.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("helper");
            let t = Instant::now();
            while !read_lines(&out)
                .iter()
                .any(|l| l.starts_with("forge planted"))
            {
                assert!(t.elapsed() < Duration::from_secs(20));
                std::thread::sleep(Duration::from_millis(2));
            }
            let _ = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "child_entry",
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .env("GMT_ROLE", "try")
                .env("GMT_TAG", "attacker-job")
                .stdout(std::process::Stdio::null())
                .status();
            wait_release();
            let _ = helper.wait();
        }
        // Plant a claim naming GMT_FORGE_PID on GMT_FORGE_DEVS, kept live by this process.
        "forge" => {
            let pid: u32 = env("GMT_FORGE_PID").parse().expect("pid");
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            let name = claim_file_name(u64::from(std::process::id()));
            let text = claim_text(&name, pid, start_time(pid), uid, &env("GMT_FORGE_DEVS"));
            let _f = plant_locked(&dir.join(name), &text);
            append(&out, "forge planted");
            wait_release();
        }
        // Plant hostile files (GMT_PLANT: space-separated kind:name).
        "plant" => {
            for spec in env("GMT_PLANT").split_whitespace() {
                let (kind, name) = spec.split_once(':').expect("kind:name");
                let p = dir.join(name);
                match kind {
                    "fifo" => {
                        let c = CString::new(p.as_os_str().as_bytes()).expect("c");
                        // SAFETY: valid NUL-terminated path.
                        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "{spec}");
                    }
                    "sparse" => {
                        let f = fs::File::create(&p).expect("create");
                        f.set_len(2 << 30).expect("2 GiB sparse");
                        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).expect("chmod");
                    }
                    "symlink" => {
                        let c = CString::new(dir.join("target-fifo").as_os_str().as_bytes())
                            .expect("c");
                        // SAFETY: valid NUL-terminated path.
                        unsafe { libc::mkfifo(c.as_ptr(), 0o666) };
                        symlink(dir.join("target-fifo"), &p).expect("symlink");
                    }
                    "dir" => fs::create_dir(&p).expect("mkdir"),
                    other => panic!("unknown plant {other}"),
                }
            }
            append(&out, "planted");
            wait_release();
        }
        // Try to remove or rename every claim file and the lock directory itself.
        "vandal" => {
            let mut tried = 0;
            let mut denied = 0;
            for e in fs::read_dir(&dir).expect("ls").flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("gpukit-claim.") {
                    tried += 2;
                    denied += usize::from(fs::remove_file(e.path()).is_err());
                    denied += usize::from(fs::rename(e.path(), dir.join("stolen")).is_err());
                }
            }
            tried += 1;
            denied += usize::from(fs::rename(&dir, dir.with_extension("moved")).is_err());
            append(&out, &format!("vandal tried={tried} denied={denied}"));
        }
        // Hold the join lock (an exclusive flock on the directory) until released.
        "flock_dir" => {
            let f = fs::File::open(&dir).expect("open dir");
            // SAFETY: plain syscall on our descriptor.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            append(&out, "flock held");
            wait_release();
        }
        // Many acquisitions and status reports; report time and peak memory.
        "measure" => {
            let m = mutex_from_env();
            let t = Instant::now();
            let mut each = Vec::new();
            for _ in 0..20 {
                let t1 = Instant::now();
                drop(
                    m.acquire_timeout(1, Duration::from_secs(20))
                        .expect("acquire"),
                );
                each.push(t1.elapsed().as_millis());
            }
            for _ in 0..5 {
                let t1 = Instant::now();
                m.status().expect("status");
                each.push(t1.elapsed().as_millis());
            }
            eprintln!("measure: each call (ms): {each:?}");
            let ms = t.elapsed().as_millis();
            let hwm = fs::read_to_string("/proc/self/status")
                .expect("status")
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().to_string()))
                .unwrap_or_default();
            append(&out, &format!("measure ms={ms} hwm={hwm}"));
        }
        // Build a mutex on GMT_DIR and acquire once; report.
        "build" => {
            match GpuMutex::builder()
                .device_source(DeviceSource::None)
                .ignore_env()
                .visible_devices([0])
                .lock_dir(&dir)
                .build()
                .and_then(|m| m.acquire_timeout(1, Duration::from_secs(5)))
            {
                Ok(_) => append(&out, &format!("{tag} ok")),
                Err(e) => append(&out, &format!("{tag} err {e}")),
            }
        }
        // Wait for GMT_GO, then acquire one of GMT_DEVS (GMT_TIMEOUT_MS, default 20 s), report
        // when it was granted, hold GMT_HOLD_MS (default 30), release.
        "wait_go" => {
            let go = PathBuf::from(env("GMT_GO"));
            while !go.exists() {
                std::thread::sleep(Duration::from_millis(1));
            }
            let m = mutex_from_env();
            match m.acquire_timeout(1, env_ms("GMT_TIMEOUT_MS", 20_000)) {
                Ok(g) => {
                    append(&out, &format!("{tag} got {}", mono_ns()));
                    std::thread::sleep(env_ms("GMT_HOLD_MS", 30));
                    drop(g);
                }
                Err(e) => append(&out, &format!("{tag} err {e}")),
            }
        }
        // Acquire without any limit (no timeout configured) and report.
        "lock" => {
            let m = mutex_from_env();
            let t = Instant::now();
            match m.acquire(1) {
                Ok(_) => append(&out, &format!("{tag} ok ms={}", t.elapsed().as_millis())),
                Err(e) => append(
                    &out,
                    &format!("{tag} err {e} ms={}", t.elapsed().as_millis()),
                ),
            }
        }
        // Plant a live ticket of this process under GMT_NAME (candidates GMT_DEVS).
        "ticket_at" => {
            let me = std::process::id();
            // SAFETY: geteuid has no preconditions.
            let uid = unsafe { libc::geteuid() };
            let name = env("GMT_NAME");
            let text = ticket_text(&name, me, start_time(me), uid, &env("GMT_DEVS"));
            let _f = plant_locked(&dir.join(&name), &text);
            append(&out, &format!("{tag} planted"));
            wait_release();
        }
        // Create empty files under the names in GMT_NAMES (space-separated), or GMT_COUNT
        // record-shaped names, then report.
        "plant_names" => {
            let mut n = 0usize;
            for name in env("GMT_NAMES").split_whitespace() {
                fs::write(dir.join(name), b"").expect("plant");
                n += 1;
            }
            let count: usize = env("GMT_COUNT").parse().unwrap_or(0);
            for i in 0..count {
                let name = if i % 2 == 0 {
                    format!("gpukit-ticket.{:020}.{:032x}", i, i)
                } else {
                    format!("gpukit-claim.{:032x}", i)
                };
                fs::write(dir.join(name), b"").expect("plant");
                n += 1;
            }
            append(&out, &format!("{tag} planted {n}"));
        }
        // Take the join lock and stop (SIGSTOP) inside it; after SIGCONT, hold it until
        // GMT_RELEASE exists.
        "stop_in_join" => {
            let f = fs::File::open(&dir).expect("open dir");
            // SAFETY: plain syscall on our descriptor.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            append(&out, &format!("stopper {}", std::process::id()));
            if env("GMT_MODE") != "freeze" {
                // SAFETY: stops this process; the test resumes it.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            wait_release();
        }
        // Make a hard link GMT_LINK to GMT_TARGET (both in the lock directory) and report.
        "link" => {
            let r = fs::hard_link(dir.join(env("GMT_TARGET")), dir.join(env("GMT_LINK")));
            append(&out, &format!("link {r:?}"));
        }
        other => panic!("unknown role {other}"),
    }
}

// ---------------------------------------------------------------- helpers

fn find<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no line {prefix:?} in {lines:?}"))
}

fn victim_holds(s: &Shared, u: &Users, out: &Path, devs: &str, release: &Path) -> Reaper {
    let kids = Reaper(vec![role_as("hold_until", &s.locks, out, u.victim)
        .env("GMT_DEVS", devs)
        .env("GMT_TAG", "V")
        .env("GMT_RELEASE", release)
        .spawn()
        .expect("spawn victim")]);
    wait_line(out, "V held");
    kids
}

// ---------------------------------------------------------------- tests

/// Attack 1: forged claim records, one naming the attacker's own shell (held by a helper), one
/// naming pid 1. Before: the attacker's jobs shared device 0 with the victim, and the pid-1
/// record turned off exclusion for everybody.
#[test]
fn forged_claims_are_never_shared() {
    let Some(u) = users("forged_claims_are_never_shared") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let mut kids = victim_holds(&s, &u, &out, "0", &release);
    // The attacker's shell, a forged record naming it, and a job started from it.
    kids.0.push(
        role_as("attacker_shell", &s.locks, &out, u.attacker)
            .env("GMT_DEVS", "0")
            .env("GMT_FORGE_DEVS", "0")
            .env("GMT_RELEASE", &release)
            .spawn()
            .expect("spawn"),
    );
    wait_line(&out, "attacker-job ");
    // A forged record naming pid 1 (everybody's ancestor), held live by the attacker.
    let out1 = s.out_file("out1");
    kids.0.push(
        role_as("forge", &s.locks, &out1, u.attacker)
            .env("GMT_FORGE_PID", "1")
            .env("GMT_FORGE_DEVS", "0,1")
            .env("GMT_RELEASE", &release)
            .spawn()
            .expect("spawn"),
    );
    wait_line(&out1, "forge planted");
    for (who, uid) in [("victim-job", u.victim), ("attacker-job2", u.attacker)] {
        role_as("try", &s.locks, &out, uid)
            .env("GMT_DEVS", "0,1")
            .env("GMT_TAG", who)
            .status()
            .expect("try");
    }
    let st = status(&s.locks, &[0, 1]);
    let text = st.to_string();
    fs::write(&release, b"").expect("release");
    for c in &mut kids.0 {
        let _ = c.wait();
    }
    let lines = read_lines(&out);
    for job in ["attacker-job ", "victim-job ", "attacker-job2 "] {
        let l = find(&lines, job);
        assert!(l.contains("err timed out"), "{job} was not refused: {l}");
    }
    // The forged records are shown, marked unverified; the victim's is verified.
    assert!(text.contains("(unverified record)"), "{text}");
    let d0 = &st.devices[0];
    assert!(
        d0.holders.iter().any(|h| h.verified && h.uid == u.victim),
        "{text}"
    );
    assert!(d0
        .holders
        .iter()
        .filter(|h| !h.verified)
        .all(|h| h.uid == u.attacker));
}

/// Attack 2: removing or replacing what carries the lock. There are no lock files any more: a
/// claim is its record, which only its owner may remove in a sticky directory, and the join
/// lock is the directory, which the attacker cannot rename. A join lock held forever only
/// delays (bounded by the timeout) and never blocks a status report.
#[test]
fn held_claims_cannot_be_removed_or_replaced_and_a_held_join_lock_only_delays() {
    let Some(u) =
        users("held_claims_cannot_be_removed_or_replaced_and_a_held_join_lock_only_delays")
    else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let mut kids = victim_holds(&s, &u, &out, "0", &release);
    role_as("vandal", &s.locks, &out, u.attacker)
        .status()
        .expect("vandal");
    let l = find(&read_lines(&out), "vandal").to_string();
    assert_eq!(l, "vandal tried=3 denied=3", "{l}");
    role_as("try", &s.locks, &out, u.victim)
        .env("GMT_DEVS", "0")
        .env("GMT_TAG", "second")
        .status()
        .expect("try");
    assert!(
        find(&read_lines(&out), "second ").contains("err timed out"),
        "{:?}",
        read_lines(&out)
    );
    // The attacker holds the join lock: a free device cannot be taken, but the wait ends at its
    // timeout, and status reports still work.
    let out2 = s.out_file("out2");
    let release2 = s.out.join("release2");
    kids.0.push(
        role_as("flock_dir", &s.locks, &out2, u.attacker)
            .env("GMT_RELEASE", &release2)
            .spawn()
            .expect("spawn"),
    );
    wait_line(&out2, "flock held");
    role_as("try", &s.locks, &out2, u.victim)
        .env("GMT_DEVS", "1")
        .env("GMT_TAG", "blocked")
        .env("GMT_TIMEOUT_MS", "300")
        .status()
        .expect("try");
    let l = find(&read_lines(&out2), "blocked ").to_string();
    assert!(l.contains("err timed out"), "{l}");
    let ms: u64 = l
        .rsplit("ms=")
        .next()
        .and_then(|v| v.parse().ok())
        .expect("ms");
    assert!((300..5000).contains(&ms), "{l}");
    let t = Instant::now();
    status(&s.locks, &[0]);
    assert!(t.elapsed() < Duration::from_secs(2));
    fs::write(&release2, b"").expect("release");
    fs::write(&release, b"").expect("release");
    for c in &mut kids.0 {
        let _ = c.wait();
    }
}

/// Attack 3: FIFOs (and a symbolic link to one, and a directory) under every name a
/// participant opens. Before: every acquire and `--status` hung inside `open()`.
#[test]
fn fifos_and_links_under_record_names_block_nothing() {
    let Some(u) = users("fifos_and_links_under_record_names_block_nothing") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let plant = format!(
        "fifo:{} fifo:{} fifo:gpukit-dev0.lock fifo:gpukit-queue.lock symlink:{} dir:{}",
        ticket_file_name(0, true),
        claim_file_name(1),
        claim_file_name(2),
        ticket_file_name(1, false)
    );
    let mut kids = Reaper(vec![role_as("plant", &s.locks, &out, u.attacker)
        .env("GMT_PLANT", &plant)
        .env("GMT_RELEASE", &release)
        .spawn()
        .expect("plant")]);
    wait_line(&out, "planted");
    let t = Instant::now();
    role_as("try", &s.locks, &out, u.victim)
        .env("GMT_DEVS", "0")
        .env("GMT_TAG", "free")
        .status()
        .expect("try");
    assert!(find(&read_lines(&out), "free ").contains("ok shared=false devs=0"));
    let st = status(&s.locks, &[0]);
    assert!(st.ignored >= 4, "{st}");
    // A busy device: the wait ends at its timeout.
    kids.0.push(
        role_as("hold_until", &s.locks, &out, u.victim)
            .env("GMT_DEVS", "0")
            .env("GMT_TAG", "V")
            .env("GMT_RELEASE", &release)
            .spawn()
            .expect("hold"),
    );
    wait_line(&out, "V held");
    role_as("try", &s.locks, &out, u.victim)
        .env("GMT_DEVS", "0")
        .env("GMT_TAG", "busy")
        .env("GMT_TIMEOUT_MS", "300")
        .status()
        .expect("try");
    assert!(find(&read_lines(&out), "busy ").contains("err timed out"));
    assert!(t.elapsed() < Duration::from_secs(20));
    fs::write(&release, b"").expect("release");
}

/// Attack 4: 2 GiB sparse files under record names. Before: every scan read them whole
/// (2.1 GB resident, seconds per scan).
#[test]
fn huge_sparse_records_are_not_read() {
    let Some(u) = users("huge_sparse_records_are_not_read") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let _kids = Reaper(vec![role_as("plant", &s.locks, &out, u.attacker)
        .env(
            "GMT_PLANT",
            format!(
                "sparse:{} sparse:{}",
                claim_file_name(1),
                ticket_file_name(0, true)
            ),
        )
        .env("GMT_RELEASE", &release)
        .spawn()
        .expect("plant")]);
    wait_line(&out, "planted");
    role_as("measure", &s.locks, &out, u.victim)
        .env("GMT_DEVS", "0")
        .status()
        .expect("measure");
    let l = find(&read_lines(&out), "measure").to_string();
    eprintln!("{l}");
    let ms: u64 = l
        .split("ms=")
        .nth(1)
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("ms");
    let kb: u64 = l
        .split("hwm=")
        .nth(1)
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("hwm");
    assert!(
        ms < 5000,
        "20 acquisitions and 5 status reports took {ms} ms"
    );
    assert!(kb < 64 * 1024, "peak memory {kb} kB");
    fs::write(&release, b"").expect("release");
}

/// Attack 5: lock directories another user could change, and symbolic links (also written
/// `link/`). Before: used without a word.
#[test]
fn untrusted_lock_directories_are_refused_with_a_safe_choice() {
    let Some(u) = users("untrusted_lock_directories_are_refused_with_a_safe_choice") else {
        return;
    };
    let s = Shared::new();
    let base = s.tmp.path();
    let mk = |name: &str, owner: u32, mode: u32| -> PathBuf {
        let p = base.join(name);
        fs::create_dir_all(&p).expect("mkdir");
        std::os::unix::fs::chown(&p, Some(owner), Some(owner)).expect("chown");
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
        p
    };
    let adir = mk("adir", u.attacker, 0o755);
    let inner = mk("adir/locks", u.victim, 0o700);
    let link = base.join("link");
    symlink(&s.locks, &link).expect("symlink");
    let slash = PathBuf::from(format!("{}/", link.display()));
    let all: Vec<(PathBuf, Option<&str>)> = vec![
        (mk("evil", u.attacker, 0o777), Some("owned by uid 64102")),
        (
            mk("evil_sticky", u.attacker, 0o1777),
            Some("owned by uid 64102"),
        ),
        (
            mk("group_writable", 0, 0o775),
            Some("writable by its group"),
        ),
        (
            mk("world_writable", 0, 0o777),
            Some("writable by everybody"),
        ),
        (adir, Some("owned by uid 64102")),
        (
            inner.clone(),
            Some("a directory on the way to the lock directory"),
        ),
        (slash, Some("symbolic link")),
        (link, Some("symbolic link")),
        (s.locks.clone(), None),
        (mk("mine", u.victim, 0o700), None),
    ];
    for (i, (p, expect)) in all.iter().enumerate() {
        let out = s.out_file(&format!("o{i}"));
        role_as("build", p, &out, u.victim)
            .env("GMT_TAG", format!("case{i}"))
            .status()
            .expect("build");
        let l = find(&read_lines(&out), &format!("case{i}")).to_string();
        match expect {
            None => assert!(l.ends_with(" ok"), "{}: {l}", p.display()),
            Some(why) => {
                assert!(
                    l.contains(" err ") && l.contains(why),
                    "{}: {l}",
                    p.display()
                );
                if !why.contains("symbolic") {
                    assert!(l.contains("per user"), "names a safe choice: {l}");
                }
            }
        }
    }
    // Nothing was created in a refused directory.
    for p in [base.join("evil"), base.join("evil_sticky"), inner] {
        assert!(
            fs::read_dir(&p).expect("ls").next().is_none(),
            "{}",
            p.display()
        );
    }
}

/// The forged records of attack 1 and a planted live ticket do not make status lie about the
/// uid: it reports the owner of the file, not what the record claims.
#[test]
fn status_reports_file_owners_not_claimed_uids() {
    let Some(u) = users("status_reports_file_owners_not_claimed_uids") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let _kids = Reaper(vec![role_as("forge", &s.locks, &out, u.attacker)
        .env("GMT_FORGE_PID", "1")
        .env("GMT_FORGE_DEVS", "3")
        .env("GMT_RELEASE", &release)
        .spawn()
        .expect("forge")]);
    wait_line(&out, "forge planted");
    let st = status(&s.locks, &[]);
    let d3 = st
        .devices
        .iter()
        .find(|d| d.index == Some(3))
        .expect("device 3");
    assert!(d3.busy);
    assert_eq!(d3.holders[0].uid, u.attacker);
    assert!(!d3.holders[0].verified);
    fs::write(&release, b"").expect("release");
    // Once the forger is gone its record is dead and frees nothing and blocks nothing.
    wait_until("forger gone", Duration::from_secs(20), || {
        !status(&s.locks, &[3]).devices[0].busy
    });
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .ignore_env()
        .visible_devices([3])
        .lock_dir(&s.locks)
        .build()
        .expect("build");
    let g = m
        .acquire_timeout(1, Duration::from_secs(10))
        .expect("device 3 free");
    assert_eq!(g.devices(), [3]);
    assert!(matches!(m.try_acquire(1), Ok(Some(_))), "nested: shares");
    drop(g);
    assert!(!matches!(
        m.try_acquire(1),
        Err(Error::Timeout { .. }) | Ok(None)
    ));
}

// ---------------------------------------------------------------- issue 21

fn wait_line_or(out: &Path, prefix: &str, or: &str, limit: Duration) {
    wait_until(prefix, limit, || {
        read_lines(out)
            .iter()
            .any(|l| l.starts_with(prefix) || l.starts_with(or))
    });
}

/// The grant time a `wait_go` child reported.
fn got_at(lines: &[String], tag: &str) -> u64 {
    let l = find(lines, &format!("{tag} "));
    l.strip_prefix(&format!("{tag} got "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{tag} was not granted: {l}"))
}

/// Issue 21, first attack: a live ticket of another user numbered near `u64::MAX`. Before:
/// every later ticket's number saturated at `u64::MAX` and the queue fell back to ordering by
/// an unpadded pid string, so a waiter that queued later overtook one that queued earlier
/// whenever its pid sorted first as text (a chosen user starved). Two waiters queue one after
/// the other, the one whose pid sorts *last* as text first; they must be granted in that order.
#[test]
fn a_ticket_numbered_near_the_top_does_not_break_fifo_for_others() {
    let Some(u) = users("a_ticket_numbered_near_the_top_does_not_break_fifo_for_others") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let mut kids = victim_holds(&s, &u, &out, "0", &release);
    // The attacker's own live ticket, on a device nobody else asks for (so it delays nobody).
    kids.0.push(
        role_as("ticket_at", &s.locks, &out, u.attacker)
            .env("GMT_NAME", ticket_file_name(u64::MAX - 1, false))
            .env("GMT_DEVS", "7")
            .env("GMT_TAG", "A")
            .env("GMT_RELEASE", &release)
            .spawn()
            .expect("attacker"),
    );
    wait_line(&out, "A planted");
    let go = [s.out.join("go-a"), s.out.join("go-b")];
    let mut waiters: Vec<(u32, &str, &PathBuf)> = Vec::new();
    for (tag, g) in [("Wa", &go[0]), ("Wb", &go[1])] {
        let c = role_as("wait_go", &s.locks, &out, u.victim)
            .env("GMT_DEVS", "0")
            .env("GMT_TAG", tag)
            .env("GMT_GO", g)
            .spawn()
            .expect("waiter");
        waiters.push((c.id(), tag, g));
        kids.0.push(c);
    }
    // The one whose pid sorts last as text queues first.
    waiters.sort_by_key(|(pid, _, _)| std::cmp::Reverse(pid.to_string()));
    for (i, (_, _, g)) in waiters.iter().enumerate() {
        fs::write(g, b"").expect("go");
        wait_until("the waiter's ticket", Duration::from_secs(20), || {
            ticket_names(&s.locks).len() == i + 2
        });
    }
    fs::write(&release, b"").expect("release");
    wait_line(&out, &format!("{} ", waiters[1].1));
    wait_line(&out, &format!("{} ", waiters[0].1));
    let lines = read_lines(&out);
    let (first, second) = (got_at(&lines, waiters[0].1), got_at(&lines, waiters[1].1));
    assert!(
        first < second,
        "the waiter that queued first (pid {}) was granted after the one that queued second \
         (pid {}): {lines:?}",
        waiters[0].0,
        waiters[1].0
    );
}

/// Issue 21, second attack: claim and ticket names were predictable (pid, start time and a
/// counter; the next sequence number and the pid) and creation gave up after 64 names were
/// taken, so 64 files planted under a chosen process's next names made its acquisition fail
/// (both when the device is free and when it has to queue). Anybody can read the victim's pid
/// and start time in `/proc`.
#[test]
fn planted_file_names_cannot_make_a_chosen_process_fail() {
    let Some(u) = users("planted_file_names_cannot_make_a_chosen_process_fail") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let mut kids = victim_holds(&s, &u, &out, "1", &release);
    let go = s.out.join("go");
    let mut names = Vec::new();
    let mut pids = Vec::new();
    for (tag, devs) in [("Vfree", "0"), ("Vqueue", "1")] {
        let c = role_as("wait_go", &s.locks, &out, u.victim)
            .env("GMT_DEVS", devs)
            .env("GMT_TAG", tag)
            .env("GMT_GO", &go)
            .spawn()
            .expect("victim");
        let (pid, start) = (c.id(), start_time(c.id()));
        pids.push(pid);
        for k in 0..64u64 {
            names.push(format!("gpukit-claim.{pid}.{start}.{k}"));
            names.push(format!("gpukit-ticket.{k:020}.{pid}"));
        }
        kids.0.push(c);
    }
    role_as("plant_names", &s.locks, &out, u.attacker)
        .env("GMT_NAMES", names.join(" "))
        .env("GMT_TAG", "A")
        .status()
        .expect("plant");
    wait_line(&out, "A planted");
    let planted = ticket_names(&s.locks).len();
    fs::write(&go, b"").expect("go");
    // The free device is granted at once; the queued victim must get a ticket, then the
    // device once the holder releases it.
    wait_line_or(&out, "Vfree ", "Vfree ", Duration::from_secs(20));
    wait_until(
        "the queued victim's ticket",
        Duration::from_secs(20),
        || {
            ticket_names(&s.locks).len() > planted
                || read_lines(&out).iter().any(|l| l.starts_with("Vqueue "))
        },
    );
    fs::write(&release, b"").expect("release");
    wait_line(&out, "Vqueue ");
    let lines = read_lines(&out);
    got_at(&lines, "Vfree");
    got_at(&lines, "Vqueue");
}

/// Issue 21, third attack: where `protected_hardlinks` is 0 another user may hard-link a
/// victim's live ticket under an earlier number. Before: the link was taken for a second,
/// earlier ticket of the victim, so the victim waited behind itself and the queue stalled.
/// (Where `protected_hardlinks` is 1, as on most systems, the kernel refuses the link to the
/// attacker; root then makes the same link, which leaves the directory exactly as an attacker
/// on a system with the protection off would.)
#[test]
fn a_hard_link_to_a_live_ticket_cannot_stall_the_queue() {
    let Some(u) = users("a_hard_link_to_a_live_ticket_cannot_stall_the_queue") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let go = s.out.join("go");
    let mut kids = victim_holds(&s, &u, &out, "0", &release);
    fs::write(&go, b"").expect("go");
    kids.0.push(
        role_as("wait_go", &s.locks, &out, u.victim)
            .env("GMT_DEVS", "0")
            .env("GMT_TAG", "W")
            .env("GMT_GO", &go)
            .env("GMT_TIMEOUT_MS", "60000")
            .spawn()
            .expect("waiter"),
    );
    // the waiter queued (its ticket complete, as status reads it), not merely its ticket file
    // created: a link to a ticket still being written left both names unreadable and the
    // status without a waiter (CI, 1 run in 5)
    wait_until("the waiter's ticket", Duration::from_secs(20), || {
        ticket_names(&s.locks).len() == 1 && status(&s.locks, &[0]).waiters.len() == 1
    });
    let target = ticket_names(&s.locks).remove(0);
    let seq = ticket_seq(&target);
    let link = if seq > 0 {
        ticket_file_name(seq - 1, false)
    } else {
        ticket_file_name(seq, true)
    };
    let protected = fs::read_to_string("/proc/sys/fs/protected_hardlinks")
        .map(|v| v.trim() != "0")
        .unwrap_or(true);
    if protected {
        eprintln!(
            "a_hard_link_to_a_live_ticket_cannot_stall_the_queue: protected_hardlinks is on, so \
             root makes the attacker's link"
        );
        fs::hard_link(s.locks.join(&target), s.locks.join(&link)).expect("link");
    } else {
        role_as("link", &s.locks, &out, u.attacker)
            .env("GMT_TARGET", &target)
            .env("GMT_LINK", &link)
            .status()
            .expect("link");
        assert!(find(&read_lines(&out), "link ").contains("Ok"));
    }
    let st = status(&s.locks, &[0]);
    assert_eq!(st.waiters.len(), 1, "the link is not a second waiter: {st}");
    fs::write(&release, b"").expect("release");
    wait_line(&out, "W ");
    got_at(&read_lines(&out), "W");
}

/// Issue 21, fourth attack: a participant stopped (SIGSTOP, a frozen cgroup, a suspended job)
/// while it holds the join lock. Before: every acquisition without a timeout (the default)
/// waited forever, and `status` could not say why. Now the join-lock wait is bounded by
/// default and the error and the status report name the holder and its state.
#[test]
fn a_participant_stopped_in_the_join_lock_is_named_and_stalls_nobody_forever() {
    let Some(u) =
        users("a_participant_stopped_in_the_join_lock_is_named_and_stalls_nobody_forever")
    else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let mut kids = Reaper(vec![role_as("stop_in_join", &s.locks, &out, u.attacker)
        .env("GMT_RELEASE", &release)
        .spawn()
        .expect("stopper")]);
    wait_line(&out, "stopper ");
    let spid: u32 = find(&read_lines(&out), "stopper ")
        .trim_start_matches("stopper ")
        .parse()
        .expect("pid");
    wait_until("the stopper to stop", Duration::from_secs(20), || {
        proc_state(spid) == 'T'
    });
    // An acquisition with no limit configured at all.
    kids.0.push(
        role_as("lock", &s.locks, &out, u.victim)
            .env("GMT_DEVS", "0")
            .env("GMT_TAG", "V")
            .spawn()
            .expect("victim"),
    );
    let text = status(&s.locks, &[0]).to_string();
    assert!(
        text.contains(&format!("join lock: held by pid {spid}")) && text.contains("stopped"),
        "status names the stopped holder: {text}"
    );
    wait_line_or(&out, "V ", "V ", Duration::from_secs(40));
    let l = find(&read_lines(&out), "V ").to_string();
    eprintln!("{text}{l}");
    assert!(
        l.starts_with("V err") && l.contains(&format!("pid {spid}")) && l.contains("stopped"),
        "{l}"
    );
    // SAFETY: resumes our own child.
    unsafe { libc::kill(spid as i32, libc::SIGCONT) };
    fs::write(&release, b"").expect("release");
    kids.0[0].wait().expect("stopper ends");
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .ignore_env()
        .visible_devices([0])
        .lock_dir(&s.locks)
        .build()
        .expect("build");
    m.acquire_timeout(1, Duration::from_secs(20))
        .expect("granted once the holder is gone");
}

/// A cgroup (v2 where it can freeze, else the v1 freezer) holding one process, frozen; thawed
/// and removed on drop.
struct Frozen {
    dir: PathBuf,
    v2: bool,
    pid: u32,
}

impl Frozen {
    fn new(pid: u32) -> Result<Frozen, String> {
        let name = format!("gpukit-test-{}", std::process::id());
        for (root, v2) in [
            ("/sys/fs/cgroup", true),
            ("/sys/fs/cgroup/unified", true),
            ("/sys/fs/cgroup/freezer", false),
        ] {
            let root = Path::new(root);
            let probe = if v2 { "cgroup.procs" } else { "freezer.state" };
            if v2 && !root.join("cgroup.controllers").exists() {
                continue;
            }
            let dir = root.join(&name);
            if fs::create_dir(&dir).is_err() {
                continue;
            }
            let f = Frozen { dir, v2, pid };
            if !f.dir.join(probe).exists() && !f.dir.join("cgroup.freeze").exists() {
                continue;
            }
            let (procs, freeze, value) = if v2 {
                ("cgroup.procs", "cgroup.freeze", "1")
            } else {
                ("tasks", "freezer.state", "FROZEN")
            };
            if fs::write(f.dir.join(procs), pid.to_string()).is_ok()
                && fs::write(f.dir.join(freeze), value).is_ok()
            {
                return Ok(f);
            }
        }
        Err("no cgroup freezer that root can use here".into())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let (procs, freeze, value) = if self.v2 {
            ("cgroup.procs", "cgroup.freeze", "0")
        } else {
            ("tasks", "freezer.state", "THAWED")
        };
        let _ = fs::write(self.dir.join(freeze), value);
        if let Some(parent) = self.dir.parent() {
            let _ = fs::write(parent.join(procs), self.pid.to_string());
        }
        for _ in 0..100 {
            if fs::remove_dir(&self.dir).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The same with a participant whose cgroup is frozen inside the join lock (how a batch system
/// suspends a job), and a join timeout set through `GPUMUTEX_JOIN_TIMEOUT`.
#[test]
fn a_participant_frozen_in_the_join_lock_is_named() {
    let Some(u) = users("a_participant_frozen_in_the_join_lock_is_named") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    let release = s.out.join("release");
    let mut kids = Reaper(vec![role_as("stop_in_join", &s.locks, &out, u.attacker)
        .env("GMT_RELEASE", &release)
        .env("GMT_MODE", "freeze")
        .spawn()
        .expect("holder")]);
    wait_line(&out, "stopper ");
    let pid = kids.0[0].id();
    let frozen = match Frozen::new(pid) {
        Ok(f) => f,
        Err(why) => {
            skip_env("a_participant_frozen_in_the_join_lock_is_named", &why);
            return;
        }
    };
    role_as("lock", &s.locks, &out, u.victim)
        .env("GMT_DEVS", "0")
        .env("GMT_TAG", "V")
        .env("GPUMUTEX_JOIN_TIMEOUT", "1")
        .status()
        .expect("victim");
    let text = status(&s.locks, &[0]).to_string();
    let l = find(&read_lines(&out), "V ").to_string();
    eprintln!("{text}{l}");
    assert!(
        text.contains(&format!("join lock: held by pid {pid}")) && text.contains("frozen"),
        "{text}"
    );
    assert!(
        l.starts_with("V err") && l.contains(&format!("pid {pid}")) && l.contains("frozen"),
        "{l}"
    );
    let ms: u64 = l
        .rsplit("ms=")
        .next()
        .and_then(|v| v.parse().ok())
        .expect("ms");
    assert!((1000..8000).contains(&ms), "GPUMUTEX_JOIN_TIMEOUT=1: {l}");
    drop(frozen);
    fs::write(&release, b"").expect("release");
    kids.0[0].wait().expect("holder ends");
}

/// A tmpfs mounted for one test, unmounted on drop.
struct Mount(PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let c = CString::new(self.0.as_os_str().as_bytes()).expect("c");
        // SAFETY: valid NUL-terminated path; MNT_DETACH never blocks.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn mount_tmpfs(at: &Path, opts: &str) -> Result<Mount, std::io::Error> {
    let c = CString::new(at.as_os_str().as_bytes()).expect("c");
    let o = CString::new(opts).expect("c");
    // SAFETY: valid NUL-terminated strings.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            o.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Mount(at.to_path_buf()))
}

/// The names in `dir` that belong to the lock (everything else was made by the test).
fn lock_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gpukit-"))
        .collect();
    v.sort();
    v
}

/// Issue 21: a full file system (no inodes left, then no blocks left) under the lock
/// directory. Acquisitions that need a new claim (free device) or a ticket (busy device) end
/// at once with an error that says what is wrong and what to do, and leave no file behind;
/// releasing still works, and once space is back everything works.
#[test]
fn a_full_file_system_is_a_clear_error_and_leaves_nothing_behind() {
    let Some(u) = users("a_full_file_system_is_a_clear_error_and_leaves_nothing_behind") else {
        return;
    };
    let s = Shared::new();
    let fsdir = s.tmp.path().join("small");
    fs::create_dir(&fsdir).expect("mkdir");
    let _m = match mount_tmpfs(&fsdir, "size=64k,nr_inodes=24,mode=1777") {
        Ok(m) => m,
        Err(e) => {
            skip_env(
                "a_full_file_system_is_a_clear_error_and_leaves_nothing_behind",
                &format!("cannot mount a small tmpfs ({e}); needs root with CAP_SYS_ADMIN"),
            );
            return;
        }
    };
    let out = s.out_file("out");
    let release = s.out.join("release");
    let mut kids = Reaper(vec![role_as("hold_until", &fsdir, &out, u.victim)
        .env("GMT_DEVS", "0")
        .env("GMT_TAG", "H")
        .env("GMT_RELEASE", &release)
        .spawn()
        .expect("holder")]);
    wait_line(&out, "H held");
    let held = lock_files(&fsdir);
    assert_eq!(held.len(), 1, "{held:?}");
    let attempt = |tag: &str, devs: &str| -> String {
        role_as("try", &fsdir, &out, u.victim)
            .env("GMT_DEVS", devs)
            .env("GMT_TAG", tag)
            .env("GMT_TIMEOUT_MS", "2000")
            .status()
            .expect("try");
        find(&read_lines(&out), &format!("{tag} ")).to_string()
    };
    let full = |l: &str, what: &str| {
        eprintln!("{l}");
        assert!(
            l.contains(" err ") && l.contains("file system is full") && l.contains(what),
            "a clear error naming the cause: {l}"
        );
        let ms: u64 = l
            .rsplit("ms=")
            .next()
            .and_then(|v| v.parse().ok())
            .expect("ms");
        assert!(ms < 1500, "it must fail at once, not wait: {l}");
    };
    // No inodes left.
    let mut i = 0;
    while fs::write(fsdir.join(format!("fill{i}")), b"").is_ok() {
        i += 1;
    }
    full(&attempt("free-noinode", "1"), "inodes");
    full(&attempt("busy-noinode", "0"), "inodes");
    assert_eq!(lock_files(&fsdir), held, "nothing left behind");
    // Inodes back, no blocks left.
    for j in 0..i {
        fs::remove_file(fsdir.join(format!("fill{j}"))).expect("rm");
    }
    {
        use std::io::Write;
        let mut f = fs::File::create(fsdir.join("big")).expect("big");
        while f.write_all(&[7u8; 4096]).is_ok() {}
    }
    full(&attempt("free-noblock", "1"), "");
    full(&attempt("busy-noblock", "0"), "");
    assert_eq!(lock_files(&fsdir), held, "nothing left behind");
    // Space back: everything works again; the holder could release meanwhile.
    fs::remove_file(fsdir.join("big")).expect("rm");
    let l = attempt("free-again", "1");
    assert!(l.contains(" ok "), "{l}");
    fs::write(&release, b"").expect("release");
    kids.0[0].wait().expect("holder");
    assert!(lock_files(&fsdir).is_empty(), "{:?}", lock_files(&fsdir));
}

/// Issue 21: a lock directory flooded with entries under record names by another user.
/// A moderate flood costs acquisitions little (entries already known dead are not opened
/// again); a flood beyond what a pass examines is refused at once with an error that names
/// the flood and its owner, instead of every pass crawling through it under the join lock.
#[test]
fn a_flooded_lock_directory_stays_usable_or_is_refused_clearly() {
    let Some(u) = users("a_flooded_lock_directory_stays_usable_or_is_refused_clearly") else {
        return;
    };
    let s = Shared::new();
    let out = s.out_file("out");
    role_as("plant_names", &s.locks, &out, u.attacker)
        .env("GMT_COUNT", "8000")
        .env("GMT_TAG", "A")
        .status()
        .expect("plant");
    wait_line(&out, "A planted");
    role_as("measure", &s.locks, &out, u.victim)
        .env("GMT_DEVS", "0")
        .status()
        .expect("measure");
    let l = find(&read_lines(&out), "measure").to_string();
    eprintln!("8000 planted entries: {l}");
    let ms: u64 = l
        .split("ms=")
        .nth(1)
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("ms");
    assert!(
        ms < 5000,
        "20 acquisitions and 5 status reports took {ms} ms"
    );
    let out2 = s.out_file("out2");
    role_as("plant_names", &s.locks, &out2, u.attacker)
        .env("GMT_COUNT", "70000")
        .env("GMT_TAG", "A")
        .status()
        .expect("plant");
    wait_line(&out2, "A planted");
    role_as("try", &s.locks, &out2, u.victim)
        .env("GMT_DEVS", "0")
        .env("GMT_TAG", "V")
        .env("GMT_TIMEOUT_MS", "20000")
        .status()
        .expect("try");
    let l = find(&read_lines(&out2), "V ").to_string();
    assert!(
        l.contains(" err ") && l.contains("flooded") && l.contains(&format!("uid {}", u.attacker)),
        "{l}"
    );
    let ms: u64 = l
        .rsplit("ms=")
        .next()
        .and_then(|v| v.parse().ok())
        .expect("ms");
    assert!(ms < 5000, "refused after {ms} ms");
    match gpukit_mutex::status_with(&s.locks, None, &DeviceSource::None) {
        Err(e) => assert!(e.to_string().contains("flooded"), "{e}"),
        Ok(st) => panic!("status of a flooded directory: {st}"),
    }
    let mine: Vec<String> = fs::read_dir(&s.locks)
        .expect("ls")
        .flatten()
        .filter(|e| {
            use std::os::unix::fs::MetadataExt;
            e.metadata().map(|m| m.uid() == u.victim).unwrap_or(false)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(mine.is_empty(), "the victim left {mine:?}");
}
