//! The lock directory: opening it without following a symbolic link, deciding whether it can
//! be trusted, and safe access to the files in it.
//!
//! Layout (all names are gpukit-specific, so a seed installation in the same directory is not
//! disturbed):
//!
//! | name                             | purpose                                                 |
//! |----------------------------------|---------------------------------------------------------|
//! | the directory itself             | join lock: `flock` held for microseconds per decision   |
//! | `gpukit-claim.<random>`          | a claim: who holds which devices (see `claims.rs`)      |
//! | `gpukit-ticket.<seq>.<random>`   | a waiter, in FIFO order of `<seq>` (see `tickets.rs`)   |
//!
//! Everything is opened relative to the directory's descriptor, with `O_NOFOLLOW | O_NONBLOCK`
//! (a FIFO, device or socket under a record's name can neither block nor be mistaken for a
//! record), checked to be a regular file, and read up to a small bound (the mechanism is
//! gpukit-trust's `Dir` and `read_bounded`).
//!
//! **Trust.** The directory and every directory on the way to it must be owned by the caller or
//! by root, and must not be writable by anybody else unless it has the sticky bit: otherwise a
//! user other than the caller could delete or replace the files that carry the locks (or the
//! directory itself, or a symbolic link leading to it) and break exclusion. Such a directory is
//! refused with [`Error::UntrustedLockDir`], which names a safe choice. The path is resolved one
//! component at a time without letting the kernel follow links, so that a link is only followed
//! from a directory that passed the check (gpukit-trust's `walk`, whose rules gpukit-jit's
//! kernel cache shares); the lock directory itself must not be a link.
//!
//! **Local file systems only.** The locks that keep records alive are the kernel's, so they
//! only mean something to processes of one machine: on NFS, SMB/CIFS, Lustre, GPFS, CephFS,
//! 9p, AFS, cluster file systems and network FUSE file systems (sshfs, s3fs, gcsfuse, rclone,
//! JuiceFS, ...), processes on two machines would not see each other's locks, take each other's
//! live claims for dead, remove them, and share devices. Such a directory is refused
//! ([`Error::NetworkLockDir`], detected by `statfs` before anything is created there) unless
//! the user opts in (`GPUMUTEX_ALLOW_NETWORK_FS=1`, [`crate::GpuMutexBuilder::allow_network_fs`]),
//! which is only right when every participant runs on this one machine. FUSE file systems not
//! known to be remote (fuse-overlayfs, lxcfs, bindfs, ...) are local: the kernel keeps their
//! locks.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use gpukit_trust::{self as trust, Dir, Walk};

use crate::error::{Error, Result};

pub(crate) use gpukit_trust::{fstat, FileId, Meta};

/// Prefix of claim records.
pub(crate) const CLAIM_PREFIX: &str = "gpukit-claim.";
/// Prefix of wait tickets.
pub(crate) const TICKET_PREFIX: &str = "gpukit-ticket.";
/// Most `gpukit-` names a listing returns; a directory with more is flooded
/// ([`Error::LockDirFlooded`]).
pub(crate) const MAX_LISTED: usize = 1 << 20;
/// Largest record this crate reads; larger files under a record name are ignored unread.
pub(crate) const MAX_RECORD_BYTES: usize = 4096;

/// How a missing lock directory may be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Create {
    /// Never (report it missing).
    No,
    /// The built-in default: mode `1777` (sticky, world-writable, like `/tmp`).
    SharedDefault,
    /// A directory the user named: mode `0700` (per user).
    Private,
}

/// An open, trusted (or, for [`LockDir::open_for_reading`], merely safely opened) lock
/// directory.
#[derive(Debug)]
pub(crate) struct LockDir {
    dir: Dir,
    id: FileId,
    /// Why the directory is not trusted (`None` when it is). Only [`LockDir::open_for_reading`]
    /// returns a directory with a reason.
    distrust: Option<String>,
}

fn lockdir_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::LockDir {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The error for a failed walk to the parent of the lock directory `path`: a directory on the
/// way that is not trusted is [`Error::UntrustedLockDir`] naming it, anything else
/// [`Error::LockDir`] saying which component failed and how.
fn walk_err(path: &Path, e: trust::Error) -> Error {
    match e {
        trust::Error::Untrusted {
            path,
            reason: reason @ trust::Distrust::LinkOwner { .. },
        } => Error::UntrustedLockDir {
            path,
            reason: format!("a link on the way to the lock directory: {reason}"),
        },
        trust::Error::Untrusted { path, reason } => Error::UntrustedLockDir {
            path,
            reason: format!("a directory on the way to the lock directory: {reason}"),
        },
        e => lockdir_err(path, e.to_string()),
    }
}

/// The error for the lock directory `full` itself (opening, creating or checking it).
fn dir_err(full: &Path, e: trust::Error) -> Error {
    let reason = match e {
        trust::Error::SymbolicLink { .. } => "is a symbolic link (refused: a lock directory must \
             be a real directory; name the directory it points to instead)"
            .to_string(),
        trust::Error::NotADirectory { .. } => "is not a directory".to_string(),
        trust::Error::Io { op, source, .. } => format!("cannot {op}: {source}"),
        trust::Error::NoAccess { source, .. } => {
            format!("not readable, writable and searchable by this user ({source})")
        }
        e => e.to_string(),
    };
    lockdir_err(full, reason)
}

/// Splits `path` into its (absolute, not yet resolved) parent and its last component, refusing
/// `.`/`..` and empty paths. A trailing slash does not change the last component (`link/` is
/// `link`, which is then opened without following it).
fn split(path: &Path) -> Result<(PathBuf, OsString)> {
    if path.as_os_str().is_empty() {
        return Err(lockdir_err(path, "the path is empty"));
    }
    let abs = std::path::absolute(path)
        .map_err(|e| lockdir_err(path, format!("cannot make it absolute: {e}")))?;
    let last = match abs.components().next_back() {
        Some(Component::Normal(n)) => n.to_owned(),
        _ => {
            return Err(lockdir_err(
                path,
                "must name a directory by its own name (not /, . or ..)",
            ))
        }
    };
    if last.as_bytes().contains(&0) {
        return Err(lockdir_err(path, "contains a NUL byte"));
    }
    let parent = abs
        .parent()
        .ok_or_else(|| lockdir_err(path, "has no parent directory"))?
        .to_path_buf();
    Ok((parent, last))
}

/// The kind of a file system on which the kernel's locks are not shared with the other machines
/// that use it (see the module docs), by `statfs` magic number; `None` for a local one. FUSE
/// file systems are told apart by their subtype (`fuse.<subtype>` in `/proc/self/mountinfo`).
pub(crate) fn network_fs_kind(
    magic: i64,
    fuse_subtype: impl FnOnce() -> Option<String>,
) -> Option<String> {
    let kind = match magic as u32 {
        0x6969 => "NFS",
        0x517B => "SMB",
        0xFF53_4D42 => "CIFS/SMB",
        0xFE53_4D42 => "SMB2",
        0x00C3_6400 => "CephFS",
        0x0102_1997 => "9p",
        0x0BD0_0BD0 => "Lustre",
        0x4750_4653 => "GPFS (IBM Storage Scale)",
        0x5346_414F | 0x6B41_4653 => "AFS",
        0x7375_7245 => "Coda",
        0x564C => "NCP",
        0x7461_636F => "OCFS2",
        0x0116_1970 => "GFS2",
        0x1983_0326 => "BeeGFS",
        0x2003_0528 => "OrangeFS",
        0xAAD7_AAEA => "PanFS",
        0x6573_5546 => {
            let sub = fuse_subtype()?;
            const REMOTE: [&str; 24] = [
                "sshfs",
                "s3fs",
                "gcsfuse",
                "rclone",
                "goofys",
                "blobfuse",
                "blobfuse2",
                "juicefs",
                "glusterfs",
                "ceph-fuse",
                "ceph",
                "mfs",
                "moosefs",
                "lizardfs",
                "curlftpfs",
                "davfs",
                "gvfsd-fuse",
                "seaweedfs",
                "weed",
                "alluxio-fuse",
                "objectivefs",
                "cvmfs2",
                "lustre",
                "beegfs",
            ];
            if REMOTE.contains(&sub.as_str()) {
                return Some(format!("FUSE ({sub})"));
            }
            return None;
        }
        _ => return None,
    };
    Some(kind.to_string())
}

/// The FUSE subtype of the mount with device `dev` (`sshfs` for `fuse.sshfs`), from
/// `/proc/self/mountinfo`.
fn fuse_subtype(dev: u64) -> Option<String> {
    let raw = crate::proc::read_bounded("/proc/self/mountinfo", 4 << 20)?;
    let text = String::from_utf8_lossy(&raw);
    let want = format!("{}:{}", libc::major(dev), libc::minor(dev));
    text.lines().find_map(|l| {
        let mut f = l.split(' ');
        if f.nth(2)? != want {
            return None;
        }
        let (_, after) = l.split_once(" - ")?;
        let fstype = after.split(' ').next()?;
        fstype.strip_prefix("fuse.").map(str::to_string)
    })
}

/// Refuses the file system of `fd` (the lock directory, or its parent before creating it) when
/// it is a network file system and `allow` is off.
fn check_local(dir: &Dir, path: &Path, allow: bool) -> Result<()> {
    if allow {
        return Ok(());
    }
    // SAFETY: an all-zero statfs is valid for fstatfs to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor (O_PATH descriptors are accepted since Linux 3.12) and pointer.
    if unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) } != 0 {
        return Err(lockdir_err(
            path,
            format!(
                "cannot tell its file system: {}",
                io::Error::last_os_error()
            ),
        ));
    }
    let dev = dir.meta().map(|m| m.id.dev).unwrap_or(0);
    match network_fs_kind(st.f_type as i64, || fuse_subtype(dev)) {
        None => Ok(()),
        Some(fs) => Err(Error::NetworkLockDir {
            path: path.to_path_buf(),
            fs,
        }),
    }
}

impl LockDir {
    /// [`LockDir::open_checked`] refusing network file systems.
    #[cfg(test)]
    pub fn open(path: &Path, create: Create) -> Result<LockDir> {
        Self::open_checked(path, create, false)
    }

    /// Opens (creating it when `create` allows and it is missing) the lock directory `path` and
    /// checks that it can be trusted and (unless `allow_network`) that it is on a local file
    /// system; see the module docs. Nothing is created when the parent is not trusted or is on a
    /// network file system.
    pub fn open_checked(path: &Path, create: Create, allow_network: bool) -> Result<LockDir> {
        let me = trust::euid();
        let (parent, name) = split(path)?;
        let parent = trust::walk(&parent, Walk::EXISTING)
            .map_err(|e| walk_err(&parent.join(&name), e))?
            .dir;
        let full = parent.path().join(&name);
        let dir = match parent.open_subdir(&name).map_err(|e| dir_err(&full, e))? {
            Some(dir) => dir,
            None if create == Create::No => {
                return Err(lockdir_err(&full, "does not exist"));
            }
            None => {
                check_local(&parent, &full, allow_network)?;
                let mode = if create == Create::SharedDefault {
                    0o1777
                } else {
                    0o700
                };
                let created = parent
                    .make_subdir(&name, mode)
                    .map_err(|e| dir_err(&full, e))?;
                let dir = parent
                    .open_subdir(&name)
                    .map_err(|e| dir_err(&full, e))?
                    .ok_or_else(|| lockdir_err(&full, "vanished right after being created"))?;
                let md = dir.meta().map_err(|e| lockdir_err(&full, e.to_string()))?;
                if created && md.uid == me && create == Create::SharedDefault {
                    // We created it just now, so setting its mode (the umask cleared bits) is
                    // ours to do; the descriptor is the directory we opened without following
                    // links.
                    // SAFETY: plain syscall on a descriptor we own.
                    if unsafe { libc::fchmod(dir.as_raw_fd(), 0o1777) } != 0 {
                        return Err(lockdir_err(
                            &full,
                            format!("cannot set mode 1777: {}", io::Error::last_os_error()),
                        ));
                    }
                }
                dir
            }
        };
        let md = dir.meta().map_err(|e| lockdir_err(&full, e.to_string()))?;
        if let Some(reason) = trust::distrust(md.uid, md.mode, me) {
            return Err(Error::UntrustedLockDir {
                path: full,
                reason: reason.to_string(),
            });
        }
        check_local(&dir, &full, allow_network)?;
        dir.check_access().map_err(|e| dir_err(&full, e))?;
        Ok(LockDir {
            dir,
            id: md.id,
            distrust: None,
        })
    }

    /// Opens an existing directory for a status report: the same safe opening, but a directory
    /// that is not trusted is still opened; [`LockDir::distrust`] says why it is not trusted.
    pub fn open_for_reading(path: &Path) -> Result<LockDir> {
        let (parent, name) = split(path)?;
        let walked =
            trust::walk(&parent, Walk::REPORT).map_err(|e| walk_err(&parent.join(&name), e))?;
        let mut distrust = walked
            .distrust
            .map(|(path, reason)| format!("{}: {reason}", path.display()));
        let full = walked.dir.path().join(&name);
        let dir = walked
            .dir
            .open_subdir(&name)
            .map_err(|e| dir_err(&full, e))?
            .ok_or_else(|| lockdir_err(&full, "does not exist"))?;
        let md = dir.meta().map_err(|e| lockdir_err(&full, e.to_string()))?;
        if let Some(reason) = trust::distrust(md.uid, md.mode, trust::euid()) {
            distrust = Some(reason.to_string());
        }
        Ok(LockDir {
            dir,
            id: md.id,
            distrust,
        })
    }

    /// The directory's path (absolute, parent canonical).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The directory's identity.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// The directory's descriptor.
    pub fn raw_fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Why the directory is not trusted, for a directory opened for reading only.
    pub fn distrust(&self) -> Option<&str> {
        self.distrust.as_deref()
    }

    /// A new open file description of the directory (for the join lock: `flock` locks belong
    /// to open file descriptions, so each session needs its own).
    pub fn reopen(&self) -> Result<std::os::fd::OwnedFd> {
        self.dir
            .reopen()
            .map_err(|e| Error::io("open", self.path(), e))
    }

    /// Checks that the directory's path still names the directory this descriptor refers to
    /// (so everybody who opens it by name meets in the same directory).
    pub fn check_identity(&self) -> Result<()> {
        match trust::lstat(self.path()) {
            Ok(md) if md.id == self.id => Ok(()),
            Ok(_) => Err(lockdir_err(
                self.path(),
                "was replaced or moved while in use (its name now refers to another directory)",
            )),
            Err(e) => Err(lockdir_err(
                self.path(),
                format!("vanished while in use: {e}"),
            )),
        }
    }

    /// `fstatat` of `name` in the directory, without following a symbolic link.
    pub fn stat(&self, name: &str) -> io::Result<Meta> {
        self.dir.stat(name)
    }

    /// Opens `name` read-only for inspection: without following a link, without blocking (a
    /// FIFO returns at once), and only if it is a regular file (`Ok(None)` otherwise).
    pub fn open_entry(&self, name: &str) -> io::Result<Option<(File, Meta)>> {
        self.dir.open_entry(name)
    }

    /// Creates `name` exclusively, read-write, mode `0600` (so nobody else can open it before
    /// its locks are taken; the caller then makes it `0644`).
    pub fn create_entry(&self, name: &str) -> Result<File> {
        self.dir
            .create_new(name, 0o600)
            .map_err(|e| self.write_error("create", name, e))
    }

    /// The error for a failed `op` (creating or writing `name`): [`Error::LockDirFull`] when
    /// the file system is full or the quota exhausted, saying which, else [`Error::Io`].
    pub fn write_error(&self, op: &'static str, name: &str, e: io::Error) -> Error {
        let what = match e.raw_os_error() {
            Some(libc::EDQUOT) => "the file system is full for you (disk quota exceeded)",
            Some(libc::ENOSPC) => {
                // SAFETY: an all-zero statvfs is valid for fstatvfs to overwrite.
                let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
                // SAFETY: valid descriptor and out-pointer.
                let known = unsafe { libc::fstatvfs(self.raw_fd(), &mut st) } == 0;
                if known && st.f_files > 0 && st.f_ffree == 0 {
                    "the file system is full (no free inodes left)"
                } else if known && st.f_bavail == 0 {
                    "the file system is full (no free space left)"
                } else {
                    "the file system is full (no space or no inodes left)"
                }
            }
            _ => return Error::io(op, self.path().join(name), e),
        };
        Error::LockDirFull {
            op,
            path: self.path().to_path_buf(),
            what: what.to_string(),
        }
    }

    /// Removes `name` if it still is the file `id` (never somebody else's file that took its
    /// place). Returns whether it was removed.
    pub fn unlink_if(&self, name: &str, id: FileId) -> bool {
        self.dir.unlink_if(name, |md| md.id == id)
    }

    /// Removes `name` whatever it is now (only for a file this process created a moment ago and
    /// could not even `fstat`).
    pub fn unlink_if_unchecked(&self, name: &str) {
        // Best effort: the caller is already reporting the failure that brought it here.
        let _ = self.dir.unlink(name);
    }

    /// Names in the directory that start with `gpukit-` (others are never looked at), with
    /// their inode numbers. `keep_going` is asked every 1024 entries; listing stops when it
    /// returns an error.
    pub fn list(&self, mut keep_going: impl FnMut() -> Result<()>) -> Result<Vec<(String, u64)>> {
        let entries = self
            .dir
            .entries()
            .map_err(|e| Error::io("opendir", self.path(), e))?;
        let mut out = Vec::new();
        for (seen, entry) in entries.enumerate() {
            if (seen + 1).is_multiple_of(1024) {
                keep_going()?;
            }
            let entry = entry.map_err(|e| Error::io("readdir", self.path(), e))?;
            if !entry.name.as_bytes().starts_with(b"gpukit-") {
                continue;
            }
            if out.len() >= MAX_LISTED {
                return Err(Error::LockDirFlooded {
                    path: self.path().to_path_buf(),
                    entries: out.len() + 1,
                    limit: MAX_LISTED,
                    owners: Vec::new(),
                });
            }
            if let Ok(s) = entry.name.into_string() {
                out.push((s, entry.ino));
            }
        }
        Ok(out)
    }
}

/// Reads a whole record file of at most [`MAX_RECORD_BYTES`]; `None` if it is larger (checked
/// before reading a byte), not UTF-8, or unreadable.
pub(crate) fn read_record(file: &File, meta: &Meta) -> Option<String> {
    let bytes = trust::read_bounded(file, meta, MAX_RECORD_BYTES as u64).ok()??;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpukit_trust::euid;
    use std::ffi::CString;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn default_dir_is_created_sticky_world_writable() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("libgpumutex");
        LockDir::open(&p, Create::SharedDefault).expect("open");
        let mode = fs::metadata(&p).expect("md").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777);
        let q = t.path().join("mine");
        LockDir::open(&q, Create::Private).expect("open");
        let mode = fs::metadata(&q).expect("md").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn existing_dir_is_never_chmodded() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("mine");
        fs::create_dir(&p).expect("mkdir");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o750)).expect("chmod");
        LockDir::open(&p, Create::SharedDefault).expect("open");
        let mode = fs::metadata(&p).expect("md").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750);
    }

    #[test]
    fn refuses_symlinks_with_or_without_trailing_slash_files_and_missing_parents() {
        let t = tempfile::tempdir().expect("tempdir");
        let real = t.path().join("real");
        fs::create_dir(&real).expect("mkdir");
        let link = t.path().join("link");
        symlink(&real, &link).expect("symlink");
        let slash = PathBuf::from(format!("{}/", link.display()));
        let dot = PathBuf::from(format!("{}/.", link.display()));
        for p in [&link, &slash, &dot] {
            match LockDir::open(p, Create::Private) {
                Err(e @ Error::LockDir { .. }) => {
                    assert!(e.to_string().contains("symbolic link"), "{p:?}: {e}")
                }
                other => panic!("{p:?}: {other:?}"),
            }
        }
        let file = t.path().join("file");
        fs::write(&file, b"x").expect("write");
        assert!(matches!(
            LockDir::open(&file, Create::Private),
            Err(Error::LockDir { .. })
        ));
        let deep = t.path().join("no/such/dir");
        assert!(matches!(
            LockDir::open(&deep, Create::Private),
            Err(Error::LockDir { .. })
        ));
        assert!(!t.path().join("no").exists());
        assert!(matches!(
            LockDir::open(Path::new("/"), Create::No),
            Err(Error::LockDir { .. })
        ));
    }

    #[test]
    fn links_on_the_way_are_followed_only_from_trusted_directories() {
        let t = tempfile::tempdir().expect("tempdir");
        let real = t.path().join("real");
        fs::create_dir_all(real.join("locks")).expect("mkdir");
        symlink(&real, t.path().join("ok")).expect("symlink");
        symlink("real", t.path().join("rel")).expect("symlink");
        let d = LockDir::open(&t.path().join("ok/locks"), Create::No).expect("open");
        assert_eq!(
            d.path(),
            fs::canonicalize(real.join("locks")).expect("canon")
        );
        let d = LockDir::open(&t.path().join("rel/../real/locks"), Create::No).expect("open");
        assert_eq!(
            d.path(),
            fs::canonicalize(real.join("locks")).expect("canon")
        );
        // A link in a directory everybody may write could be re-pointed: refused.
        let open = t.path().join("open");
        fs::create_dir(&open).expect("mkdir");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod");
        symlink(&real, open.join("link")).expect("symlink");
        match LockDir::open(&open.join("link/locks"), Create::No) {
            Err(Error::UntrustedLockDir { path, .. }) => {
                assert_eq!(path, fs::canonicalize(&open).expect("c"))
            }
            other => panic!("{other:?}"),
        }
        // A loop of links ends with an error.
        symlink(t.path().join("loop2"), t.path().join("loop1")).expect("symlink");
        symlink(t.path().join("loop1"), t.path().join("loop2")).expect("symlink");
        assert!(matches!(
            LockDir::open(&t.path().join("loop1/x"), Create::No),
            Err(Error::LockDir { .. })
        ));
    }

    #[test]
    fn a_link_somebody_else_owns_in_a_sticky_directory_is_not_followed() {
        if euid() != 0 {
            let why = "needs root to give a link to another uid";
            if std::env::var("GPUKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
                panic!("could not run: {why} (GPUKIT_REQUIRE_ROOT=1 requires it to)");
            }
            eprintln!(
                "SKIPPED a_link_somebody_else_owns_in_a_sticky_directory_is_not_followed: {why}"
            );
            return;
        }
        let t = tempfile::tempdir().expect("tempdir");
        let shared = t.path().join("shared");
        fs::create_dir(&shared).expect("mkdir");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).expect("chmod");
        let real = t.path().join("real");
        fs::create_dir_all(real.join("locks")).expect("mkdir");
        symlink(&real, shared.join("link")).expect("symlink");
        std::os::unix::fs::lchown(shared.join("link"), Some(64102), Some(64102)).expect("lchown");
        match LockDir::open(&shared.join("link/locks"), Create::No) {
            Err(e @ Error::UntrustedLockDir { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("a link on the way") && msg.contains("uid 64102"),
                    "{msg}"
                );
            }
            other => panic!("{other:?}"),
        }
        // The status report still reaches it, and says why it is not trusted.
        let d = LockDir::open_for_reading(&shared.join("link/locks")).expect("report");
        assert!(d.distrust().is_some_and(|r| r.contains("symbolic link")));
        // The directory owner's link is followed.
        std::os::unix::fs::lchown(shared.join("link"), Some(0), Some(0)).expect("lchown");
        LockDir::open(&shared.join("link/locks"), Create::No).expect("root's link");
    }

    #[test]
    fn network_file_systems_are_recognised() {
        for (magic, kind) in [
            (0x6969, "NFS"),
            (0xFF53_4D42u32 as i64, "CIFS/SMB"),
            (0x0BD0_0BD0, "Lustre"),
            (0x4750_4653, "GPFS (IBM Storage Scale)"),
            (0x00C3_6400, "CephFS"),
            (0x0102_1997, "9p"),
        ] {
            assert_eq!(network_fs_kind(magic, || None).as_deref(), Some(kind));
        }
        // tmpfs, ext4, xfs, btrfs, overlayfs: local.
        for magic in [0x0102_1994, 0xEF53, 0x5846_5342, 0x9123_683E, 0x794C_7630] {
            assert_eq!(network_fs_kind(magic, || None), None, "{magic:x}");
        }
        let fuse = 0x6573_5546;
        assert_eq!(
            network_fs_kind(fuse, || Some("sshfs".into())).as_deref(),
            Some("FUSE (sshfs)")
        );
        assert_eq!(
            network_fs_kind(fuse, || Some("fuse-overlayfs".into())),
            None
        );
        assert_eq!(network_fs_kind(fuse, || None), None);
        // The directory this test runs in is local.
        let t = tempfile::tempdir().expect("tempdir");
        LockDir::open(t.path(), Create::No).expect("local");
    }

    #[test]
    fn entries_are_opened_safely_and_read_bounded() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = LockDir::open(t.path(), Create::No).expect("open");
        fs::write(t.path().join("gpukit-claim.small"), b"hello").expect("write");
        let big = fs::File::create(t.path().join("gpukit-claim.big")).expect("create");
        big.set_len(1 << 31).expect("sparse");
        let fifo =
            CString::new(t.path().join("gpukit-ticket.fifo").as_os_str().as_bytes()).expect("c");
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        symlink("/etc/passwd", t.path().join("gpukit-claim.link")).expect("symlink");
        let (f, m) = d
            .open_entry("gpukit-claim.small")
            .expect("open")
            .expect("reg");
        assert_eq!(read_record(&f, &m).as_deref(), Some("hello"));
        let (f, m) = d
            .open_entry("gpukit-claim.big")
            .expect("open")
            .expect("reg");
        assert_eq!(read_record(&f, &m), None);
        // A FIFO opens at once (O_NONBLOCK) and is not a regular file.
        assert!(d.open_entry("gpukit-ticket.fifo").expect("open").is_none());
        assert!(d.open_entry("gpukit-claim.link").is_err());
        let mut names: Vec<String> = d
            .list(|| Ok(()))
            .expect("list")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "gpukit-claim.big",
                "gpukit-claim.link",
                "gpukit-claim.small",
                "gpukit-ticket.fifo"
            ]
        );
        d.check_identity().expect("same dir");
    }
}
