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

use gpukit_mutex::{Error, GpuMutex};

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
            let text = claim_text(pid, start_time(pid), uid, &env("GMT_FORGE_DEVS"));
            let name = format!(
                "gpukit-claim.{pid}.{}.{}",
                start_time(pid),
                std::process::id()
            );
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
            for _ in 0..20 {
                drop(
                    m.acquire_timeout(1, Duration::from_secs(20))
                        .expect("acquire"),
                );
            }
            for _ in 0..5 {
                m.status().expect("status");
            }
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
    let st = gpukit_mutex::status(&s.locks, &[0, 1]).expect("status");
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
    gpukit_mutex::status(&s.locks, &[0]).expect("status");
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
    let plant = "fifo:gpukit-ticket.00000000000000000000.1 fifo:gpukit-claim.1.1.1 \
                 fifo:gpukit-dev0.lock fifo:gpukit-queue.lock \
                 symlink:gpukit-claim.2.2.2 dir:gpukit-ticket.00000000000000000001.2";
    let mut kids = Reaper(vec![role_as("plant", &s.locks, &out, u.attacker)
        .env("GMT_PLANT", plant)
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
    let st = gpukit_mutex::status(&s.locks, &[0]).expect("status");
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
            "sparse:gpukit-claim.1.1.1 sparse:gpukit-ticket.00000000000000000000.1",
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
    let st = gpukit_mutex::status(&s.locks, &[]).expect("status");
    let d3 = st.devices.iter().find(|d| d.device == 3).expect("device 3");
    assert!(d3.busy);
    assert_eq!(d3.holders[0].uid, u.attacker);
    assert!(!d3.holders[0].verified);
    fs::write(&release, b"").expect("release");
    // Once the forger is gone its record is dead and frees nothing and blocks nothing.
    wait_until("forger gone", Duration::from_secs(20), || {
        !gpukit_mutex::status(&s.locks, &[3])
            .expect("status")
            .devices[0]
            .busy
    });
    let m = GpuMutex::builder()
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
