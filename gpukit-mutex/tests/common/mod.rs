//! Helpers shared by the multi-process tests: child roles (the test binary re-executes itself
//! with `GMT_ROLE` set), second users, output files and waiting.

#![allow(dead_code)]

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpukit_mutex::{DeviceSource, GpuMutex};

pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn append(path: &Path, line: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open out file");
    f.write_all(format!("{line}\n").as_bytes()).expect("append");
}

pub fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

pub fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(env(name).parse().unwrap_or(default))
}

pub fn devs_str(d: &[u32]) -> String {
    d.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Field 22 of `/proc/<pid>/stat` (start time), as records and `GPUMUTEX_JOB_ROOT` use it.
pub fn start_time(pid: u32) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &text[text.rfind(')').expect("comm") + 2..];
    after
        .split(' ')
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("number")
}

pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("boot id")
        .trim()
        .to_string()
}

/// A claim record in the on-disk format (protocol v3) for the file `name`, for forgeries.
pub fn claim_text(name: &str, pid: u32, start: u64, uid: u32, devices: &str) -> String {
    format!(
        "gpukit-mutex claim v3\nname {name}\nboot {}\npid {pid}\nstart {start}\nuid {uid}\n\
         kind primary\ndevices {devices}\njob_root -\njob -\nlocal_rank -\nsince_ns 1\n\
         cmd forged\n",
        boot_id()
    )
}

/// A ticket record in the on-disk format, for the file `name`.
pub fn ticket_text(name: &str, pid: u32, start: u64, uid: u32, candidates: &str) -> String {
    format!(
        "gpukit-mutex ticket v3\nname {name}\nboot {}\npid {pid}\nstart {start}\nuid {uid}\n\
         n 1\ncandidates {candidates}\nbackfill 0\nsince_ns 1\ncmd planted\n",
        boot_id()
    )
}

/// Writes `text` to a new file `path` and holds a process-owned write lock on its byte 0 (what
/// makes a record live) for as long as the returned file is open.
pub fn plant_locked(path: &Path, text: &str) -> std::fs::File {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .expect("plant");
    f.write_all(text.as_bytes()).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
    // SAFETY: an all-zero flock is valid; fields set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    use std::os::fd::AsRawFd;
    // SAFETY: valid descriptor and flock structure.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &mut fl) };
    assert_eq!(rc, 0, "lock planted record");
    f
}

/// A command that runs this test binary in a child role.
pub fn role(role: &str, dir: &Path, out: &Path) -> Command {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new(exe);
    c.args([
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env("GMT_ROLE", role)
    .env("GMT_DIR", dir)
    .env("GMT_OUT", out)
    .env_remove("GPUMUTEX_JOB_ROOT")
    .env_remove("GPUMUTEX_VISIBLE_DEVICES")
    .env_remove("GPUMUTEX_NUM_DEVICES")
    .env_remove("GPUMUTEX_LOCK_DIR")
    .env_remove("GPUMUTEX_TIMEOUT")
    .env_remove("GPUMUTEX_BACKFILL")
    .env_remove("LOCAL_RANK")
    .env_remove("WORLD_SIZE")
    .env_remove("LOCAL_WORLD_SIZE")
    .env_remove("TORCHELASTIC_RUN_ID")
    // Device numbers are physical indices here, whatever GPUs the machine has.
    .env("GPUMUTEX_DEVICE_SOURCE", "none")
    .env_remove("CUDA_VISIBLE_DEVICES")
    .env_remove("NVIDIA_VISIBLE_DEVICES")
    .env_remove("CUDA_DEVICE_ORDER")
    .stdout(Stdio::null());
    c
}

/// The same, as another user (`uid`, with gid = uid and no supplementary groups).
pub fn role_as(r: &str, dir: &Path, out: &Path, uid: u32) -> Command {
    let mut c = role(r, dir, out);
    c.uid(uid).gid(uid);
    c
}

pub fn mutex_from_env() -> GpuMutex {
    let devs = gpukit_mutex::parse_device_list(&env("GMT_DEVS")).expect("GMT_DEVS");
    GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices(devs)
        .lock_dir(env("GMT_DIR"))
        .backfill(env("GMT_BACKFILL") == "1")
        .build()
        .expect("build")
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub fn wait_line(out: &Path, prefix: &str) {
    wait_until(prefix, Duration::from_secs(30), || {
        read_lines(out).iter().any(|l| l.starts_with(prefix))
    });
}

/// A status report with device numbers read as physical indices (as the children use them).
pub fn status(dir: &Path, devs: &[u32]) -> gpukit_mutex::Status {
    let spec = gpukit_mutex::VisibleSpec::Names(
        devs.iter()
            .map(|d| gpukit_mutex::DeviceName::Index(*d))
            .collect(),
    );
    gpukit_mutex::status_with(dir, Some(&spec), &DeviceSource::None).expect("status")
}

pub fn waiters(dir: &Path) -> usize {
    status(dir, &[]).waiters.len()
}

pub fn busy(dir: &Path, dev: u32) -> bool {
    status(dir, &[dev])
        .devices
        .iter()
        .any(|d| d.index == Some(dev) && d.busy)
}

/// Kills and reaps its children on drop.
pub struct Reaper(pub Vec<Child>);
impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("locks");
    fs::create_dir(&dir).expect("mkdir");
    let out = t.path().join("out.txt");
    (t, dir, out)
}

/// Two unprivileged users for hostile tests, or `None` (with the reason printed) when this
/// process cannot start processes as other users.
pub struct Users {
    pub victim: u32,
    pub attacker: u32,
}

/// Reports a test (or a part of one) that cannot run on this machine: prints `SKIPPED`, or
/// fails the test when `GPUKIT_REQUIRE_ROOT=1` (CI runs as root, where every test that needs
/// root, a second user, a mount, a cgroup or a namespace must really run).
pub fn skip(test: &str, why: &str) {
    if std::env::var("GPUKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
        panic!("{test} could not run: {why} (GPUKIT_REQUIRE_ROOT=1 requires it to)");
    }
    eprintln!("SKIPPED {test}: {why}");
}

/// Prints why `test` is skipped when this machine lacks a kernel feature it needs even as root
/// (a mount in a container without CAP_SYS_ADMIN, no writable cgroup, no `/dev/fuse`):
/// `GPUKIT_REQUIRE_ROOT=1` asks for root, not for every kernel feature, so this never fails;
/// `GPUKIT_REQUIRE_KERNEL_FEATURES=1` makes it fail where they are known to exist.
pub fn skip_env(test: &str, why: &str) {
    if std::env::var("GPUKIT_REQUIRE_KERNEL_FEATURES").is_ok_and(|v| v == "1") {
        panic!("{test} could not run: {why} (GPUKIT_REQUIRE_KERNEL_FEATURES=1 requires it to)");
    }
    eprintln!("SKIPPED {test}: {why}");
}

pub fn users(test: &str) -> Option<Users> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(
            test,
            "needs root to run children as a second, unprivileged user",
        );
        return None;
    }
    Some(Users {
        victim: 64101,
        attacker: 64102,
    })
}

/// A directory tree every test user can use: `<tmp>/` (root, 0755) holding `locks/` (root,
/// sticky 1777: the shared, trusted kind) and `out/` (0777, for the children's reports).
pub struct Shared {
    pub tmp: tempfile::TempDir,
    pub locks: PathBuf,
    pub out: PathBuf,
}

impl Shared {
    pub fn new() -> Shared {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let locks = tmp.path().join("locks");
        fs::create_dir(&locks).expect("mkdir");
        fs::set_permissions(&locks, fs::Permissions::from_mode(0o1777)).expect("chmod");
        let out = tmp.path().join("out");
        fs::create_dir(&out).expect("mkdir");
        fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).expect("chmod");
        Shared { tmp, locks, out }
    }

    /// An output file any user may append to.
    pub fn out_file(&self, name: &str) -> PathBuf {
        let p = self.out.join(name);
        fs::write(&p, b"").expect("create out");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o666)).expect("chmod");
        p
    }
}

/// The ticket files in `dir`, sorted by name (queue order).
pub fn ticket_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gpukit-ticket."))
        .collect();
    v.sort();
    v
}

/// The sequence number in a ticket name `gpukit-ticket.<seq>.<suffix>`.
pub fn ticket_seq(name: &str) -> u64 {
    name.strip_prefix("gpukit-ticket.")
        .and_then(|r| r.split('.').next())
        .and_then(|s| s.parse().ok())
        .expect("ticket seq")
}

/// A ticket file name in the current protocol's form with sequence number `seq`; `first`:
/// the suffix sorts before every other suffix (else after).
pub fn ticket_file_name(seq: u64, first: bool) -> String {
    let suffix = if first { "0" } else { "f" }.repeat(32);
    format!("gpukit-ticket.{seq:020}.{suffix}")
}

/// A claim file name in the current protocol's form, made from `n`.
pub fn claim_file_name(n: u64) -> String {
    format!("gpukit-claim.{n:032x}")
}

/// The state letter of `/proc/<pid>/stat` (`T`: stopped).
pub fn proc_state(pid: u32) -> char {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    text.rfind(')')
        .and_then(|i| text[i + 1..].trim_start().chars().next())
        .unwrap_or('?')
}
