//! `gpukit_mutex::cli::main_with_args` called from inside a process, as an embedding (the
//! Python package's console script) calls it: exit codes are returned, never exited with; the
//! signal handlers and the subreaper flag are the caller's again afterwards; children the
//! caller already had are left alone; a signal during the wait ends the call, leaving nothing
//! behind. One test function, because the calls install process-wide signal handlers.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gpukit_mutex::cli::main_with_args;
use gpukit_mutex::{DeviceSource, GpuMutex};

static OURS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn our_handler(_sig: libc::c_int) {
    OURS.fetch_add(1, Ordering::SeqCst);
}

fn disposition(sig: libc::c_int) -> usize {
    // SAFETY: an all-zero sigaction is valid for sigaction to overwrite; query only.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut sa), 0);
        sa.sa_sigaction
    }
}

fn subreaper() -> libc::c_int {
    let mut v: libc::c_int = -1;
    // SAFETY: writes an int through a valid pointer.
    unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut v as *mut libc::c_int) };
    v
}

fn call(args: &[&str]) -> i32 {
    let mut v: Vec<OsString> = vec!["gpumutex-run".into()];
    v.extend(args.iter().map(OsString::from));
    main_with_args(v)
}

fn tickets(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("gpukit-ticket.")
        })
        .count()
}

/// Child role: hold device 0 of `GMT_DIR` until stdin closes.
#[test]
fn child_entry() {
    if std::env::var("GMT_ROLE").as_deref() != Ok("hold") {
        return;
    }
    let m = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .ignore_env()
        .visible_devices([0])
        .lock_dir(std::env::var("GMT_DIR").expect("dir"))
        .build()
        .expect("build");
    let _g = m.acquire(1).expect("acquire");
    println!("held");
    let mut s = String::new();
    let _ = std::io::stdin().read_line(&mut s);
}

#[test]
fn embedded_calls_return_codes_and_restore_the_callers_process_state() {
    if std::env::var("GMT_ROLE").is_ok() {
        return;
    }
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("locks");
    std::fs::create_dir(&dir).expect("mkdir");
    let d = dir.to_str().expect("utf-8");
    // The caller's own SIGTERM handler; SIGHUP and SIGINT as the harness left them.
    // SAFETY: installs a handler that only touches an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = our_handler as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut()), 0);
    }
    let before = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP].map(disposition);
    let reaper_before = subreaper();
    let check_restored = |what: &str| {
        assert_eq!(
            [libc::SIGINT, libc::SIGTERM, libc::SIGHUP].map(disposition),
            before,
            "{what}: signal handlers restored"
        );
        assert_eq!(
            subreaper(),
            reaper_before,
            "{what}: subreaper flag restored"
        );
    };

    // Help and usage errors: returned, not exited.
    assert_eq!(call(&["--help"]), 0);
    assert_eq!(call(&["--no-such-option"]), 2);
    assert_eq!(
        call(&["--lock-dir", d, "--visible-devices", "0,,1", "--", "true"]),
        2
    );
    assert_eq!(call(&["--lock-dir", d, "--visible-devices", "0"]), 2);
    check_restored("usage errors");

    // A child the caller already has is neither waited for nor reaped.
    let mut mine = Command::new("sleep").arg("3").spawn().expect("sleep");
    let t0 = Instant::now();
    assert_eq!(
        call(&[
            "--lock-dir",
            d,
            "--visible-devices",
            "0",
            "--",
            "sh",
            "-c",
            "exit 7"
        ]),
        7
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "waited for the caller's own child: {:?}",
        t0.elapsed()
    );
    check_restored("a command run");
    // Still ours to reap (ECHILD would mean the runner reaped it).
    let _ = mine.kill();
    mine.wait().expect("the caller's child is still its own");
    assert_eq!(
        call(&["--lock-dir", d, "--visible-devices", "0", "--", "/no/such"]),
        127
    );
    check_restored("command not found");

    // A signal during the wait ends the call with 128 + signal; no ticket is left; the
    // caller's handler did not see it (the runner's handled it) and is back afterwards.
    let mut holder = Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "child_entry", "--nocapture", "-q"])
        .env("GMT_ROLE", "hold")
        .env("GMT_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("holder");
    let mut from_holder = BufReader::new(holder.stdout.take().expect("stdout"));
    let mut line = String::new();
    while line.trim() != "held" {
        line.clear();
        assert!(
            from_holder.read_line(&mut line).expect("read") > 0,
            "the holder ended without holding"
        );
    }
    let dir2 = dir.clone();
    let killer = std::thread::spawn(move || {
        let t = Instant::now();
        while tickets(&dir2) == 0 {
            assert!(t.elapsed() < Duration::from_secs(20), "never queued");
            std::thread::sleep(Duration::from_millis(2));
        }
        // SAFETY: signals our own process.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        Instant::now()
    });
    let code = call(&["--lock-dir", d, "--visible-devices", "0", "--", "true"]);
    let sent = killer.join().expect("killer");
    assert_eq!(code, 128 + libc::SIGTERM);
    assert!(
        sent.elapsed() < Duration::from_millis(500),
        "the wait ended {:?} after the signal",
        sent.elapsed()
    );
    assert_eq!(tickets(&dir), 0, "the ticket was removed");
    assert_eq!(OURS.load(Ordering::SeqCst), 0);
    check_restored("an interrupted wait");
    // SAFETY: signals our own process; our handler is installed again.
    unsafe { libc::raise(libc::SIGTERM) };
    assert_eq!(OURS.load(Ordering::SeqCst), 1);
    drop(holder.stdin.take());
    holder.wait().expect("holder");
    drop(from_holder);
}
