//! The lock directory: validation, creation and safe file access.
//!
//! Layout (all names are gpukit-specific, so a seed installation in the same directory is not
//! disturbed):
//!
//! | file                         | purpose                                                        |
//! |------------------------------|----------------------------------------------------------------|
//! | `gpukit-queue.lock`          | global join lock, held for microseconds around every decision  |
//! | `gpukit-dev<N>.lock`         | device N: `flock` shared by the claiming process tree          |
//! | `gpukit-claim.<pid>.<start>` | who holds which devices (one file per participating process)   |
//! | `gpukit-ticket.<seq>.<pid>`  | a waiter, in FIFO order of `<seq>`; its owner holds `flock` on it |
//!
//! Files are opened with `O_NOFOLLOW | O_CLOEXEC` and created `0644` (lock files are opened
//! read-only by everyone: `flock` needs no write access, so several users can share a directory).

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Name of the global join lock.
pub const QUEUE_LOCK: &str = "gpukit-queue.lock";
/// Prefix of claim records.
pub const CLAIM_PREFIX: &str = "gpukit-claim.";
/// Prefix of wait tickets.
pub const TICKET_PREFIX: &str = "gpukit-ticket.";

/// File name of device `dev`'s lock file.
pub fn device_lock_name(dev: u32) -> String {
    format!("gpukit-dev{dev}.lock")
}

/// Parses a device lock file name back to its device index.
pub fn parse_device_lock_name(name: &str) -> Option<u32> {
    name.strip_prefix("gpukit-dev")?
        .strip_suffix(".lock")?
        .parse()
        .ok()
}

fn cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::LockDir {
        path: path.to_path_buf(),
        reason: "path contains a NUL byte".into(),
    })
}

fn lockdir_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::LockDir {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Makes `path` absolute (without resolving symlinks).
pub fn absolute(path: &Path) -> Result<PathBuf> {
    if path.as_os_str().is_empty() {
        return Err(lockdir_err(path, "the path is empty"));
    }
    std::path::absolute(path).map_err(|e| lockdir_err(path, format!("cannot make absolute: {e}")))
}

/// Checks that an existing `path` is usable: a real directory (not a symlink), readable,
/// writable and searchable by this user. Never changes it.
pub fn validate_existing(path: &Path) -> Result<()> {
    let md = fs::symlink_metadata(path).map_err(|e| lockdir_err(path, e.to_string()))?;
    if md.file_type().is_symlink() {
        return Err(lockdir_err(
            path,
            "is a symbolic link (refused: a lock directory must be a real directory)",
        ));
    }
    if !md.is_dir() {
        return Err(lockdir_err(path, "is not a directory"));
    }
    let c = cstring(path)?;
    // SAFETY: `c` is a valid NUL-terminated path; access() only reads it.
    let rc = unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK | libc::X_OK) };
    if rc != 0 {
        return Err(lockdir_err(
            path,
            format!(
                "not readable, writable and searchable by this user ({})",
                io::Error::last_os_error()
            ),
        ));
    }
    Ok(())
}

/// Validates the lock directory, creating it if it does not exist (only the last component; its
/// parent must exist). The built-in default directory is created with mode `1777` (sticky,
/// world-writable, like `/tmp`) because it is shared by every user of the machine; a directory
/// the user named is created with the process umask and never `chmod`ed, and an existing one is
/// never modified.
pub fn prepare(path: &Path, is_default: bool) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(_) => return validate_existing(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(lockdir_err(path, e.to_string())),
    }
    let parent = path
        .parent()
        .ok_or_else(|| lockdir_err(path, "has no parent directory"))?;
    match fs::metadata(parent) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => return Err(lockdir_err(path, "its parent is not a directory")),
        Err(e) => {
            return Err(lockdir_err(
                path,
                format!(
                    "does not exist and its parent {} is unusable: {e}",
                    parent.display()
                ),
            ))
        }
    }
    let c = cstring(path)?;
    let mode = if is_default { 0o1777 } else { 0o777 };
    // SAFETY: `c` is a valid NUL-terminated path.
    let rc = unsafe { libc::mkdir(c.as_ptr(), mode) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) {
            // Somebody else created it concurrently: treat it like any existing directory.
            return validate_existing(path);
        }
        return Err(lockdir_err(path, format!("cannot create: {e}")));
    }
    if is_default {
        // We created this directory just now, so setting its mode (the umask cleared bits) is
        // ours to do. Go through an O_NOFOLLOW descriptor so a swapped-in symlink is not followed.
        // SAFETY: valid path; the returned fd is checked and owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(lockdir_err(
                path,
                format!("cannot open after creating: {}", io::Error::last_os_error()),
            ));
        }
        // SAFETY: `fd` is a freshly opened descriptor that nothing else owns.
        let dir = unsafe { File::from_raw_fd(fd) };
        dir.set_permissions(fs::Permissions::from_mode(0o1777))
            .map_err(|e| lockdir_err(path, format!("cannot set mode 1777: {e}")))?;
    }
    validate_existing(path)
}

fn open_raw(path: &Path, flags: libc::c_int, mode: libc::c_uint) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: valid NUL-terminated path; the result is checked before use.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens (creating if needed) a lock file read-only, without following symlinks. A file this
/// call creates gets mode `0644` regardless of the umask, so other users can open it too.
pub fn open_lock_file(path: &Path) -> Result<File> {
    // Common case first: the file exists.
    if let Ok(fd) = open_raw(path, libc::O_RDONLY, 0) {
        return Ok(File::from(fd));
    }
    loop {
        match open_raw(path, libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL, 0o644) {
            Ok(fd) => {
                let f = File::from(fd);
                // Best effort: a umask of 077 would otherwise lock other users out.
                let _ = f.set_permissions(fs::Permissions::from_mode(0o644));
                return Ok(f);
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(Error::io("create", path, e)),
        }
        match open_raw(path, libc::O_RDONLY, 0) {
            Ok(fd) => return Ok(File::from(fd)),
            // Deleted between the two calls: try again.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(Error::io("open", path, e)),
        }
    }
}

/// Opens an existing file read-only without following symlinks.
pub fn open_existing(path: &Path) -> io::Result<File> {
    open_raw(path, libc::O_RDONLY, 0).map(File::from)
}

/// Creates a new file exclusively (mode `0644`), for writing, without following symlinks.
pub fn create_new(path: &Path) -> Result<File> {
    let fd = open_raw(path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o644)
        .map_err(|e| Error::io("create", path, e))?;
    let f = File::from(fd);
    let _ = f.set_permissions(fs::Permissions::from_mode(0o644));
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn default_dir_is_created_sticky_world_writable() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("libgpumutex");
        prepare(&p, true).expect("prepare");
        let mode = fs::metadata(&p).expect("md").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777);
    }

    #[test]
    fn user_dir_is_never_chmodded() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("mine");
        fs::create_dir(&p).expect("mkdir");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o700)).expect("chmod");
        prepare(&p, false).expect("prepare");
        let mode = fs::metadata(&p).expect("md").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        // Even if it is named like the default, an existing dir is left alone.
        prepare(&p, true).expect("prepare");
        let mode = fs::metadata(&p).expect("md").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn refuses_symlink_file_and_missing_parent() {
        let t = tempfile::tempdir().expect("tempdir");
        let real = t.path().join("real");
        fs::create_dir(&real).expect("mkdir");
        let link = t.path().join("link");
        symlink(&real, &link).expect("symlink");
        assert!(matches!(prepare(&link, false), Err(Error::LockDir { .. })));
        let file = t.path().join("file");
        fs::write(&file, b"x").expect("write");
        assert!(matches!(prepare(&file, false), Err(Error::LockDir { .. })));
        let deep = t.path().join("no/such/dir");
        assert!(matches!(prepare(&deep, false), Err(Error::LockDir { .. })));
        assert!(!t.path().join("no").exists());
    }

    #[test]
    fn lock_files_refuse_symlinks() {
        let t = tempfile::tempdir().expect("tempdir");
        let target = t.path().join("target");
        fs::write(&target, b"").expect("write");
        let p = t.path().join(device_lock_name(0));
        symlink(&target, &p).expect("symlink");
        assert!(matches!(open_lock_file(&p), Err(Error::Io { .. })));
        assert_eq!(parse_device_lock_name(&device_lock_name(17)), Some(17));
    }
}
