//! What the kernel says about a file (`fstat`, and `fstatat` without following a link), and the
//! raw descriptor-relative calls the other modules are built on.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A file's identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// The device it is on.
    pub dev: u64,
    /// Its inode number.
    pub ino: u64,
}

/// What `fstat` / `fstatat` says about a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Its identity.
    pub id: FileId,
    /// Its owner.
    pub uid: u32,
    /// Its type and permission bits (`st_mode`).
    pub mode: u32,
    /// Its size in bytes.
    pub size: u64,
    /// Its last modification.
    pub mtime: SystemTime,
}

impl Meta {
    fn from_stat(st: &libc::stat) -> Meta {
        let mtime = match (u64::try_from(st.st_mtime), u32::try_from(st.st_mtime_nsec)) {
            (Ok(s), Ok(ns)) => UNIX_EPOCH + Duration::new(s, ns),
            _ => UNIX_EPOCH,
        };
        Meta {
            id: FileId {
                dev: st.st_dev,
                ino: st.st_ino,
            },
            uid: st.st_uid,
            mode: st.st_mode,
            size: u64::try_from(st.st_size).unwrap_or(u64::MAX),
            mtime,
        }
    }

    /// The file type bits (`S_IFREG`, `S_IFDIR`, `S_IFLNK`, ...).
    pub fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    /// Whether it is a regular file.
    pub fn is_regular(&self) -> bool {
        self.kind() == libc::S_IFREG
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind() == libc::S_IFDIR
    }

    /// Whether it is a symbolic link (only `fstatat`/[`lstat`] can say so).
    pub fn is_symlink(&self) -> bool {
        self.kind() == libc::S_IFLNK
    }
}

/// The effective uid of this process: the user whose files are trusted.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

/// `fstat` of an open file or directory.
pub fn fstat(fd: impl AsFd) -> io::Result<Meta> {
    fstat_raw(fd.as_fd().as_raw_fd())
}

/// `lstat` of a path: the link itself when it is a symbolic link.
pub fn lstat(path: &Path) -> io::Result<Meta> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    fstatat_raw(libc::AT_FDCWD, &c)
}

pub(crate) fn fstat_raw(fd: RawFd) -> io::Result<Meta> {
    // SAFETY: an all-zero `stat` (plain integers) is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; an invalid `fd` only makes fstat fail.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Meta::from_stat(&st))
}

/// `fstatat` of `name` in the directory `dirfd` (or `AT_FDCWD`), not following a link.
pub(crate) fn fstatat_raw(dirfd: RawFd, name: &CStr) -> io::Result<Meta> {
    // SAFETY: as in `fstat_raw`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` a valid out-pointer; an invalid `dirfd` only makes
    // the call fail; AT_SYMLINK_NOFOLLOW stats a symbolic link itself.
    if unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Meta::from_stat(&st))
}

/// `openat` with `O_CLOEXEC` added.
pub(crate) fn openat_raw(
    dirfd: RawFd,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::c_uint,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the result is checked before use.
    let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A file name as a C string (a NUL inside is an `InvalidInput` error).
pub(crate) fn cname(name: impl AsRef<std::ffi::OsStr>) -> io::Result<CString> {
    CString::new(name.as_ref().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a file name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn stat_reports_kind_owner_size_and_identity() {
        let t = tempfile::tempdir().expect("tempdir");
        let f = t.path().join("f");
        fs::write(&f, b"12345").expect("write");
        std::os::unix::fs::symlink(&f, t.path().join("l")).expect("symlink");
        let file = fs::File::open(&f).expect("open");
        let m = fstat(&file).expect("fstat");
        assert!(m.is_regular() && !m.is_dir() && !m.is_symlink());
        assert_eq!((m.size, m.uid), (5, euid()));
        assert!(m.mtime > UNIX_EPOCH);
        assert_eq!(lstat(&f).expect("lstat").id, m.id);
        let l = lstat(&t.path().join("l")).expect("lstat");
        assert!(l.is_symlink());
        assert_ne!(l.id, m.id);
        assert!(fstat(fs::File::open(t.path()).expect("dir"))
            .expect("fstat")
            .is_dir());
        assert_eq!(
            lstat(&t.path().join("none")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(cname("a\0b").is_err());
    }
}
