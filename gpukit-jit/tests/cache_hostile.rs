//! A kernel cache directory shared by several users (issue 21: "in a shared GPUKIT_CACHE_DIR
//! another user can make us load their CUBIN"), with real processes running as two
//! unprivileged users: an attacker compiles first and leaves a valid entry under the key the
//! victim will look up; the victim must not load it. The shared directory is the trusted kind
//! (owned by root, mode 1777, like /tmp). Needs root to start processes as other users and
//! NVRTC to compile; skips with a printed reason otherwise (CI runs as root with NVRTC).

use gpukit_jit::{testing, Arch, CacheConfig, CompileOptions, KernelCache};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SOURCE: &str = r#"extern "C" __global__ void shared_k(float* x) { x[0] = 1.0f; }"#;
const VICTIM: u32 = 64211;
const ATTACKER: u32 = 64212;

fn cache_in(dir: &Path) -> KernelCache {
    KernelCache::new(CacheConfig {
        memory_entries: 8,
        disk_dir: Some(dir.to_path_buf()),
        disk_max_bytes: 64 << 20,
    })
}

/// Entry point of re-executed children; a no-op in a normal test run.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("GKC_ROLE") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("GKC_DIR").expect("GKC_DIR"));
    let out = PathBuf::from(std::env::var("GKC_OUT").expect("GKC_OUT"));
    assert_eq!(role, "compile");
    let cache = cache_in(&dir);
    let result = cache.get_or_compile(SOURCE, "shared_k", Arch::new(8, 0), &CompileOptions::new());
    let s = cache.stats();
    fs::write(
        &out,
        format!(
            "ok={} disk_hits={} misses={} refused={} corrupt={} write_errors={}",
            result.is_ok(),
            s.disk_hits,
            s.misses,
            s.refused_entries,
            s.corrupt_entries,
            s.disk_write_errors
        ),
    )
    .expect("report");
}

fn run_as(uid: u32, dir: &Path, out: &Path) -> String {
    let exe = std::env::current_exe().expect("current_exe");
    let status = Command::new(exe)
        .args([
            "--exact",
            "child_entry",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("GKC_ROLE", "compile")
        .env("GKC_DIR", dir)
        .env("GKC_OUT", out)
        .uid(uid)
        .gid(uid)
        .stdout(Stdio::null())
        .status()
        .expect("child runs");
    assert!(status.success(), "child as uid {uid}: {status}");
    fs::read_to_string(out).expect("child report")
}

#[test]
fn another_users_entry_in_a_shared_cache_is_never_loaded() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let why = "needs root to run children as two unprivileged users";
        // CI runs as root: there the test must run (GPUKIT_REQUIRE_ROOT=1).
        if std::env::var("GPUKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
            panic!("could not run: {why} (GPUKIT_REQUIRE_ROOT=1 requires it to)");
        }
        eprintln!("SKIPPED another_users_entry_in_a_shared_cache_is_never_loaded: {why}");
        return;
    }
    if !testing::nvrtc("another_users_entry_in_a_shared_cache_is_never_loaded") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let shared = tmp.path().join("cache");
    fs::create_dir(&shared).expect("mkdir");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).expect("chmod");
    let out = tmp.path().join("out");
    fs::create_dir(&out).expect("mkdir");
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).expect("chmod");

    let a = run_as(ATTACKER, &shared, &out.join("attacker"));
    assert!(
        a.starts_with("ok=true") && a.contains("misses=1"),
        "attacker: {a}"
    );
    let planted: Vec<_> = fs::read_dir(&shared)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.uid() == ATTACKER && m.is_file())
        })
        .collect();
    assert_eq!(planted.len(), 1, "the attacker's entry is in place");

    // The victim looks up the same key: the entry is valid, but another user wrote it.
    let v = run_as(VICTIM, &shared, &out.join("victim"));
    assert!(
        v.contains("disk_hits=0") && v.contains("refused=1") && v.contains("misses=1"),
        "victim: {v}"
    );
    assert!(v.starts_with("ok=true"), "the victim compiled its own: {v}");
    // The attacker's file is still there (sticky directory: nobody may replace it), so the
    // victim could not cache its own under that name; it never reads the attacker's.
    assert!(planted[0].path().exists());
}
