//! A lock directory on a network file system is refused unless the user opts in. Checked on a
//! real mount: a minimal FUSE file system served by this test (root, `/dev/fuse`), mounted as
//! `fuse.sshfs` (a network file system the kernel reports as FUSE with that subtype) and as a
//! local FUSE file system. NFS, SMB, Lustre, GPFS, CephFS and 9p are recognised by their
//! `statfs` magic numbers (unit test `network_file_systems_are_recognised`); they cannot be
//! mounted here without a server. Skips with the reason when not root or without FUSE.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpukit_mutex::{DeviceSource, Error, GpuMutex};

const FUSE_LOOKUP: u32 = 1;
const FUSE_GETATTR: u32 = 3;
const FUSE_MKDIR: u32 = 9;
const FUSE_STATFS: u32 = 17;
const FUSE_INIT: u32 = 26;
const FUSE_OPENDIR: u32 = 27;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_FORGET: u32 = 2;
const FUSE_BATCH_FORGET: u32 = 42;
const FUSE_INTERRUPT: u32 = 36;

/// A FUSE file system with one empty root directory (root-owned, mode 0755), served by a
/// thread of this process; unmounted on drop. Records the operations it was asked for.
struct FakeFs {
    at: PathBuf,
    seen: Arc<Mutex<Vec<u32>>>,
    stop: Arc<AtomicBool>,
}

fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

fn reply(dev: &mut File, unique: u64, error: i32, body: &[u8]) {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&le32((16 + body.len()) as u32));
    out.extend_from_slice(&error.to_le_bytes());
    out.extend_from_slice(&unique.to_le_bytes());
    out.extend_from_slice(body);
    let _ = dev.write_all(&out);
}

fn root_attr() -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&1u64.to_le_bytes()); // attr_valid
    a.extend_from_slice(&0u32.to_le_bytes()); // attr_valid_nsec
    a.extend_from_slice(&0u32.to_le_bytes()); // dummy
    a.extend_from_slice(&1u64.to_le_bytes()); // ino
    a.extend_from_slice(&0u64.to_le_bytes()); // size
    a.extend_from_slice(&0u64.to_le_bytes()); // blocks
    for _ in 0..3 {
        a.extend_from_slice(&0u64.to_le_bytes()); // atime, mtime, ctime
    }
    for _ in 0..3 {
        a.extend_from_slice(&0u32.to_le_bytes()); // nsecs
    }
    a.extend_from_slice(&le32(0o040755)); // mode
    a.extend_from_slice(&le32(2)); // nlink
    a.extend_from_slice(&le32(0)); // uid
    a.extend_from_slice(&le32(0)); // gid
    a.extend_from_slice(&le32(0)); // rdev
    a.extend_from_slice(&le32(4096)); // blksize
    a.extend_from_slice(&le32(0)); // flags
    a
}

impl FakeFs {
    fn mount(at: &Path, fstype: &str) -> Result<FakeFs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("needs root to mount a FUSE file system".into());
        }
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| format!("cannot open /dev/fuse: {e}"))?;
        let target = CString::new(at.as_os_str().as_bytes()).expect("c");
        let ty = CString::new(fstype).expect("c");
        let opts = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            dev.as_raw_fd()
        ))
        .expect("c");
        // SAFETY: valid NUL-terminated strings; the options name an open /dev/fuse descriptor.
        let rc = unsafe {
            libc::mount(
                c"gpukit-test".as_ptr(),
                target.as_ptr(),
                ty.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                opts.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(format!(
                "cannot mount {fstype}: {}",
                std::io::Error::last_os_error()
            ));
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        // SAFETY: dup of an open descriptor; the result is owned by the new File.
        let mut dev2 = unsafe { File::from_raw_fd(libc::dup(dev.as_raw_fd())) };
        drop(dev);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; (1 << 20) + 4096];
            while !stop2.load(Ordering::SeqCst) {
                let n = match dev2.read(&mut buf) {
                    Ok(n) if n >= 40 => n,
                    Ok(_) => continue,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(_) => return,
                };
                let _ = n;
                let op = u32::from_le_bytes(buf[4..8].try_into().expect("4"));
                let unique = u64::from_le_bytes(buf[8..16].try_into().expect("8"));
                seen2.lock().expect("seen").push(op);
                match op {
                    FUSE_INIT => {
                        let mut b = Vec::new();
                        b.extend_from_slice(&le32(7)); // major
                        b.extend_from_slice(&le32(22)); // minor
                        b.extend_from_slice(&le32(0)); // max_readahead
                        b.extend_from_slice(&le32(0)); // flags
                        b.extend_from_slice(&16u16.to_le_bytes()); // max_background
                        b.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
                        b.extend_from_slice(&le32(65536)); // max_write
                        reply(&mut dev2, unique, 0, &b);
                    }
                    FUSE_GETATTR => reply(&mut dev2, unique, 0, &root_attr()),
                    FUSE_OPENDIR => reply(&mut dev2, unique, 0, &[0u8; 16]),
                    FUSE_RELEASEDIR => reply(&mut dev2, unique, 0, &[]),
                    FUSE_STATFS => {
                        let mut b = vec![0u8; 80];
                        b[40..44].copy_from_slice(&le32(4096)); // bsize
                        b[44..48].copy_from_slice(&le32(255)); // namelen
                        b[48..52].copy_from_slice(&le32(4096)); // frsize
                        reply(&mut dev2, unique, 0, &b);
                    }
                    FUSE_LOOKUP => reply(&mut dev2, unique, -libc::ENOENT, &[]),
                    FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT => {}
                    _ => reply(&mut dev2, unique, -libc::ENOSYS, &[]),
                }
            }
        });
        Ok(FakeFs {
            at: at.to_path_buf(),
            seen,
            stop,
        })
    }

    fn saw(&self, op: u32) -> bool {
        self.seen.lock().expect("seen").contains(&op)
    }
}

impl Drop for FakeFs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let c = CString::new(self.at.as_os_str().as_bytes()).expect("c");
        // SAFETY: valid NUL-terminated path; MNT_DETACH never blocks.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn build(dir: &Path, allow: Option<bool>) -> gpukit_mutex::Result<GpuMutex> {
    let mut b = GpuMutex::builder()
        .ignore_env()
        .device_source(DeviceSource::None)
        .visible_devices([0])
        .lock_dir(dir);
    if let Some(a) = allow {
        b = b.allow_network_fs(a);
    }
    b.build()
}

/// Child role: build from the environment (GPUMUTEX_ALLOW_NETWORK_FS) and report.
#[test]
fn child_entry() {
    let Ok(dir) = std::env::var("GMT_NET_DIR") else {
        return;
    };
    let r = GpuMutex::builder()
        .device_source(DeviceSource::None)
        .visible_devices([0])
        .lock_dir(&dir)
        .build();
    print!("{}", if r.is_ok() { "ok" } else { "refused" });
}

fn child_build(dir: &Path, env: Option<&str>) -> String {
    let mut c = std::process::Command::new(std::env::current_exe().expect("exe"));
    c.args(["--exact", "child_entry", "--nocapture", "-q"])
        .env("GMT_NET_DIR", dir)
        .stderr(std::process::Stdio::null());
    match env {
        Some(v) => c.env("GPUMUTEX_ALLOW_NETWORK_FS", v),
        None => c.env_remove("GPUMUTEX_ALLOW_NETWORK_FS"),
    };
    let out = c.output().expect("child");
    let s = String::from_utf8_lossy(&out.stdout);
    if s.contains("refused") {
        "refused".into()
    } else if s.contains("ok") {
        "ok".into()
    } else {
        format!("unexpected: {s}")
    }
}

#[test]
fn a_lock_directory_on_a_network_file_system_is_refused_unless_allowed() {
    if std::env::var("GMT_NET_DIR").is_ok() {
        return;
    }
    let t = tempfile::tempdir().expect("tempdir");
    let remote = t.path().join("remote");
    std::fs::create_dir(&remote).expect("mkdir");
    let fs = match FakeFs::mount(&remote, "fuse.sshfs") {
        Ok(f) => f,
        Err(why) => {
            // Not root: GPUKIT_REQUIRE_ROOT=1 fails here. Root without /dev/fuse or the right
            // to mount (a container): a missing kernel feature, skipped unless
            // GPUKIT_REQUIRE_KERNEL_FEATURES=1.
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let var = if root {
                "GPUKIT_REQUIRE_KERNEL_FEATURES"
            } else {
                "GPUKIT_REQUIRE_ROOT"
            };
            if std::env::var(var).is_ok_and(|v| v == "1") {
                panic!(
                    "a_lock_directory_on_a_network_file_system_is_refused_unless_allowed could \
                     not run: {why} ({var}=1 requires it to)"
                );
            }
            eprintln!(
                "SKIPPED a_lock_directory_on_a_network_file_system_is_refused_unless_allowed: {why}"
            );
            return;
        }
    };
    // The directory itself, and one that would be created there: refused, nothing created.
    for dir in [remote.clone(), remote.join("gpumutex")] {
        match build(&dir, None) {
            Err(e @ Error::NetworkLockDir { .. }) => {
                let m = e.to_string();
                eprintln!("{m}");
                assert!(m.contains("FUSE (sshfs)"), "{m}");
                assert!(m.contains("local file system"), "names what to use: {m}");
                assert!(m.contains("GPUMUTEX_ALLOW_NETWORK_FS=1"), "{m}");
                assert!(e.is_config_error());
            }
            other => panic!("{}: {other:?}", dir.display()),
        }
    }
    assert!(
        !fs.saw(FUSE_MKDIR),
        "nothing is created on a refused file system"
    );
    // Opting in: the builder method and the environment variable.
    build(&remote, Some(true)).expect("allowed through the builder");
    assert!(matches!(
        build(&remote, Some(false)),
        Err(Error::NetworkLockDir { .. })
    ));
    assert_eq!(child_build(&remote, None), "refused");
    assert_eq!(child_build(&remote, Some("1")), "ok");
    assert_eq!(child_build(&remote, Some("0")), "refused");
    drop(fs);
    // A FUSE file system not known to be remote (fuse-overlayfs, lxcfs, ...) is local.
    let local = t.path().join("local");
    std::fs::create_dir(&local).expect("mkdir");
    let _fs = FakeFs::mount(&local, "fuse.fuse-overlayfs").expect("mount");
    build(&local, None).expect("a local FUSE file system is accepted");
    std::thread::sleep(Duration::from_millis(10));
}
