//! An open directory and everything done relative to its descriptor: files are opened without
//! following a link and without blocking, only regular files are handed out, new files are
//! created exclusively, and a name is removed only while it still is the file meant.

use std::ffi::{CStr, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::meta::{cname, euid, fstat_raw, fstatat_raw, openat_raw, Meta};
use crate::rule::{distrust, Distrust};

/// An open directory and its physical path (every link on the way resolved). Obtained from
/// [`crate::walk()`] or [`Dir::open_subdir`]; the descriptor, not the path, is what every
/// operation uses, so renaming or replacing a directory on the way afterwards changes nothing.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    pub(crate) fn new(fd: OwnedFd, path: PathBuf) -> Dir {
        Dir { fd, path }
    }

    /// The directory's physical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `fstat` of the directory.
    pub fn meta(&self) -> io::Result<Meta> {
        fstat_raw(self.raw())
    }

    /// Why the directory cannot be trusted by this process's effective user (see
    /// [`crate::rule`]), if it cannot.
    pub fn distrust(&self) -> io::Result<Option<Distrust>> {
        let md = self.meta()?;
        Ok(distrust(md.uid, md.mode, euid()))
    }

    /// Checks that this process's effective user may read, write and search the directory.
    pub fn check_access(&self) -> Result<()> {
        // SAFETY: "." is NUL-terminated and the descriptor is an open directory; AT_EACCESS
        // checks the effective ids.
        let rc = unsafe {
            libc::faccessat(
                self.raw(),
                c".".as_ptr(),
                libc::R_OK | libc::W_OK | libc::X_OK,
                libc::AT_EACCESS,
            )
        };
        if rc != 0 {
            return Err(Error::NoAccess {
                path: self.path.clone(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Opens the directory `name` inside this one for reading, without following a link:
    /// `Ok(None)` when nothing is there, [`Error::SymbolicLink`] for a link and
    /// [`Error::NotADirectory`] for anything else but a directory. Its trust is not checked
    /// here (see [`Dir::distrust`]).
    pub fn open_subdir(&self, name: &OsStr) -> Result<Option<Dir>> {
        let path = self.path.join(name);
        let c = cname(name).map_err(|_| Error::BadPath {
            path: path.clone(),
            problem: "contains a NUL byte",
        })?;
        match fstatat_raw(self.raw(), &c) {
            Ok(md) if md.is_symlink() => return Err(Error::SymbolicLink { path }),
            Ok(md) if !md.is_dir() => return Err(Error::NotADirectory { path }),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(Error::io("stat", path, e)),
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        match openat_raw(self.raw(), &c, flags, 0) {
            Ok(fd) => Ok(Some(Dir { fd, path })),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Error::SymbolicLink { path }),
            Err(e) => Err(Error::io("open", path, e)),
        }
    }

    /// Creates the directory `name` inside this one with `mode` (less the umask). Returns
    /// whether it was created (`false`: something already had the name).
    pub fn make_subdir(&self, name: &OsStr, mode: u32) -> Result<bool> {
        let path = || self.path.join(name);
        let c = cname(name).map_err(|_| Error::BadPath {
            path: path(),
            problem: "contains a NUL byte",
        })?;
        mkdirat(self.raw(), &c, mode).map_err(|e| Error::io("create", path(), e))
    }

    /// A new open file description of the directory, for reading (listing, `flock`).
    pub fn reopen(&self) -> io::Result<OwnedFd> {
        openat_raw(self.raw(), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
    }

    /// `fstatat` of `name` in the directory, without following a symbolic link.
    pub fn stat(&self, name: &str) -> io::Result<Meta> {
        fstatat_raw(self.raw(), &cname(name)?)
    }

    /// Opens `name` read-only for inspection: without following a link (a link is an `ELOOP`
    /// error), without blocking (a FIFO returns at once) and without becoming a controlling
    /// terminal. Returns the file only if it is a regular file (`Ok(None)` otherwise); its
    /// owner and mode are the caller's to judge.
    pub fn open_entry(&self, name: &str) -> io::Result<Option<(File, Meta)>> {
        let fd = openat_raw(
            self.raw(),
            &cname(name)?,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )?;
        let md = fstat_raw(fd.as_raw_fd())?;
        if !md.is_regular() {
            return Ok(None);
        }
        Ok(Some((File::from(fd), md)))
    }

    /// Creates `name` exclusively (`EEXIST` if anything has that name, a link included),
    /// read-write, with `mode` (less the umask).
    pub fn create_new(&self, name: &str, mode: u32) -> io::Result<File> {
        let fd = openat_raw(
            self.raw(),
            &cname(name)?,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            mode,
        )?;
        Ok(File::from(fd))
    }

    /// Renames `from` to `to` inside the directory (atomically replacing `to`).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (f, t) = (cname(from)?, cname(to)?);
        // SAFETY: both names are NUL-terminated and relative to our directory descriptor.
        let rc = unsafe { libc::renameat(self.raw(), f.as_ptr(), self.raw(), t.as_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes `name` if what is under it now passes `still` (say: still the file this process
    /// created, by identity), so that never somebody else's file that took its place is
    /// removed. Returns whether it was removed.
    pub fn unlink_if(&self, name: &str, still: impl FnOnce(&Meta) -> bool) -> bool {
        let Ok(c) = cname(name) else { return false };
        match fstatat_raw(self.raw(), &c) {
            // SAFETY: `c` is NUL-terminated; unlinkat on a name in our directory descriptor.
            Ok(md) if still(&md) => unsafe { libc::unlinkat(self.raw(), c.as_ptr(), 0) == 0 },
            _ => false,
        }
    }

    /// Removes `name` whatever it is now: only for a file this process created a moment ago
    /// under an unpredictable name.
    pub fn unlink(&self, name: &str) -> io::Result<()> {
        let c = cname(name)?;
        // SAFETY: `c` is NUL-terminated; unlinkat on a name in our directory descriptor.
        if unsafe { libc::unlinkat(self.raw(), c.as_ptr(), 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The names in the directory (`.` and `..` left out), with their inode numbers, read
    /// through a fresh descriptor.
    pub fn entries(&self) -> io::Result<Entries> {
        let fd = self.reopen()?;
        // SAFETY: `fd` is an open directory descriptor; fdopendir takes ownership of it on
        // success.
        let dir = unsafe { libc::fdopendir(fd.as_raw_fd()) };
        if dir.is_null() {
            return Err(io::Error::last_os_error());
        }
        // The DIR stream owns the descriptor now (closedir closes it).
        std::mem::forget(fd);
        Ok(Entries { dir, done: false })
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Dir {
    fn as_raw_fd(&self) -> RawFd {
        self.raw()
    }
}

/// `mkdirat`; `Ok(false)` when the name exists already.
pub(crate) fn mkdirat(dirfd: RawFd, name: &CStr, mode: u32) -> io::Result<bool> {
    // SAFETY: `name` is NUL-terminated; an invalid `dirfd` only makes the call fail.
    if unsafe { libc::mkdirat(dirfd, name.as_ptr(), mode) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EEXIST) {
        return Ok(false);
    }
    Err(e)
}

/// One name in a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name (not necessarily UTF-8).
    pub name: OsString,
    /// Its inode number.
    pub ino: u64,
}

/// The names of a directory ([`Dir::entries`]); ends after the first error.
#[derive(Debug)]
pub struct Entries {
    dir: *mut libc::DIR,
    done: bool,
}

impl Iterator for Entries {
    type Item = io::Result<Entry>;

    fn next(&mut self) -> Option<io::Result<Entry>> {
        while !self.done {
            // SAFETY: errno is thread-local; clearing it tells the end of the stream (errno
            // unchanged) from an error.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `self.dir` is a valid DIR stream, used by this thread only (`Entries` is
            // neither Send nor Sync).
            let ent = unsafe { libc::readdir(self.dir) };
            if ent.is_null() {
                self.done = true;
                let e = io::Error::last_os_error();
                if e.raw_os_error().unwrap_or(0) != 0 {
                    return Some(Err(e));
                }
                return None;
            }
            // SAFETY: readdir returned a valid dirent, valid until the next readdir; its d_name
            // is NUL-terminated.
            let (name, ino) = unsafe { (CStr::from_ptr((*ent).d_name.as_ptr()), (*ent).d_ino) };
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            return Some(Ok(Entry {
                name: OsString::from_vec(bytes.to_vec()),
                ino,
            }));
        }
        None
    }
}

impl Drop for Entries {
    fn drop(&mut self) {
        // SAFETY: the DIR came from fdopendir and is closed exactly once, here.
        unsafe { libc::closedir(self.dir) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{walk, Walk};
    use std::ffi::CString;
    use std::fs;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn open(p: &Path) -> Dir {
        walk(p, Walk::EXISTING).expect("walk").dir
    }

    #[test]
    fn entries_are_opened_without_following_links_or_blocking() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = open(t.path());
        fs::write(t.path().join("small"), b"hello").expect("write");
        let fifo = CString::new(t.path().join("fifo").as_os_str().as_bytes()).expect("c");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        symlink(t.path().join("small"), t.path().join("link")).expect("symlink");
        fs::create_dir(t.path().join("sub")).expect("mkdir");
        let (_, m) = d.open_entry("small").expect("open").expect("regular");
        assert_eq!(m.size, 5);
        // A FIFO opens at once (O_NONBLOCK) and is not handed out as a file.
        assert!(d.open_entry("fifo").expect("open").is_none());
        assert!(d.open_entry("sub").expect("open").is_none());
        let e = d.open_entry("link").expect_err("a link is never followed");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert_eq!(
            d.open_entry("none").expect_err("missing").kind(),
            io::ErrorKind::NotFound
        );
        assert!(d.stat("link").expect("stat").is_symlink());
        let mut names: Vec<_> = d
            .entries()
            .expect("list")
            .map(|e| e.expect("entry").name)
            .collect();
        names.sort();
        assert_eq!(names, ["fifo", "link", "small", "sub"]);
    }

    #[test]
    fn creation_is_exclusive_and_removal_checks_identity() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = open(t.path());
        fs::write(t.path().join("victim"), b"precious").expect("write");
        symlink(t.path().join("victim"), t.path().join("planted")).expect("symlink");
        // A link planted under the name: not followed, not overwritten.
        assert_eq!(
            d.create_new("planted", 0o600).expect_err("exists").kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(
            fs::read(t.path().join("victim")).expect("read"),
            b"precious"
        );
        let f = d.create_new("new", 0o600).expect("create");
        let id = crate::fstat(&f).expect("fstat").id;
        assert_eq!(
            fs::metadata(t.path().join("new"))
                .expect("md")
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        d.rename("new", "moved").expect("rename");
        // Another file under the name is not removed; the one meant is.
        fs::write(t.path().join("other"), b"x").expect("write");
        assert!(!d.unlink_if("other", |m| m.id == id));
        assert!(t.path().join("other").exists());
        assert!(d.unlink_if("moved", |m| m.id == id));
        assert!(!t.path().join("moved").exists());
        assert!(!d.unlink_if("moved", |_| true), "already gone");
        d.unlink("other").expect("unlink");
        assert!(d.unlink("other").is_err());
    }

    #[test]
    fn subdirectories_must_be_real_directories() {
        let t = tempfile::tempdir().expect("tempdir");
        let d = open(t.path());
        assert!(d.make_subdir(OsStr::new("sub"), 0o700).expect("mkdir"));
        assert!(!d.make_subdir(OsStr::new("sub"), 0o700).expect("exists"));
        let sub = d
            .open_subdir(OsStr::new("sub"))
            .expect("open")
            .expect("there");
        assert_eq!(sub.path(), t.path().join("sub"));
        assert_eq!(sub.distrust().expect("stat"), None);
        sub.check_access().expect("rwx");
        symlink(t.path().join("sub"), t.path().join("link")).expect("symlink");
        assert!(matches!(
            d.open_subdir(OsStr::new("link")),
            Err(Error::SymbolicLink { .. })
        ));
        fs::write(t.path().join("file"), b"").expect("write");
        assert!(matches!(
            d.open_subdir(OsStr::new("file")),
            Err(Error::NotADirectory { .. })
        ));
        assert!(d.open_subdir(OsStr::new("none")).expect("ok").is_none());
        fs::set_permissions(t.path().join("sub"), fs::Permissions::from_mode(0o777))
            .expect("chmod");
        assert_eq!(
            sub.distrust().expect("stat"),
            Some(Distrust::Writable { mode: 0o777 })
        );
    }
}
