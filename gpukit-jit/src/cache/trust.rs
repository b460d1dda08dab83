//! The disk cache's directory: opened without following a link, trusted only on the rules that
//! gpukit-mutex applies to its lock directory, and files in it opened and read safely.
//!
//! **Trust.** The directory and every directory on the way to it must be owned by the caller or
//! by root, and must not be writable by anybody else unless it has the sticky bit: otherwise
//! another user could replace entries (or the directory itself, or a link leading to it) and
//! make this process load their CUBIN. The path is resolved one component at a time without
//! letting the kernel follow links, so that a link is only followed from a directory that passed
//! the check; missing directories are created (mode 0700) on the way. A directory that fails is
//! not used: the cache keeps to memory and says why ([`KernelCache::disk_problem`]).
//!
//! **Entries.** In a trusted directory that others may write (sticky, like `/tmp`), other users
//! can still create files under names this process will look up. So an entry is read only if it
//! is a regular file (opened with `O_NOFOLLOW | O_NONBLOCK`: a link or a FIFO under an entry's
//! name neither redirects nor blocks), owned by the caller, writable by nobody else, and no
//! larger than the cache's bound (checked before a byte is read; the read itself is bounded too).
//! New entries are written to a temporary file with an unpredictable name, created exclusively
//! without following links, and renamed into place relative to the directory's descriptor.
//!
//! These rules and helpers follow gpukit-mutex's `lockdir.rs` (which this crate does not depend
//! on).
//!
//! [`KernelCache::disk_problem`]: super::KernelCache::disk_problem

use std::ffi::{CStr, CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// What `fstat` / `fstatat` says about a file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub mode: u32,
    pub size: u64,
}

impl Meta {
    fn from_stat(st: &libc::stat) -> Meta {
        Meta {
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            mode: st.st_mode,
            size: u64::try_from(st.st_size).unwrap_or(u64::MAX),
        }
    }
    fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
}

fn fstat(fd: RawFd) -> io::Result<Meta> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; an invalid `fd` only makes fstat fail.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Meta::from_stat(&st))
}

fn fstatat(dirfd: RawFd, name: &CStr) -> io::Result<Meta> {
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` a valid out-pointer; AT_SYMLINK_NOFOLLOW stats a
    // symbolic link itself.
    if unsafe { libc::fstatat(dirfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Meta::from_stat(&st))
}

fn openat(
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

fn cname(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why a directory with this owner and mode cannot be trusted by `me`, if it cannot (the rule of
/// gpukit-mutex's lock directory).
pub(crate) fn distrust_reason(owner: u32, mode: u32, me: u32) -> Option<String> {
    if owner != me && owner != 0 {
        return Some(format!(
            "it is owned by uid {owner} (neither you, uid {me}, nor root), who can replace the \
             kernels in it"
        ));
    }
    if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
        let who = if mode & 0o002 != 0 {
            "everybody"
        } else {
            "its group"
        };
        return Some(format!(
            "it is writable by {who} (mode {:04o}) without the sticky bit, so they can replace \
             other users' kernels in it",
            mode & 0o7777
        ));
    }
    None
}

/// Why an entry file cannot be read as one of ours, if it cannot.
pub(crate) fn entry_distrust(meta: &Meta, me: u32, max_bytes: u64) -> Option<String> {
    if meta.kind() != libc::S_IFREG {
        return Some("not a regular file".into());
    }
    if meta.uid != me {
        return Some(format!(
            "owned by uid {} (this process runs as uid {me})",
            meta.uid
        ));
    }
    if meta.mode & 0o022 != 0 {
        return Some(format!(
            "writable by others (mode {:04o})",
            meta.mode & 0o7777
        ));
    }
    if meta.size > max_bytes {
        return Some(format!(
            "{} bytes, more than the cache's bound of {max_bytes}",
            meta.size
        ));
    }
    None
}

/// An opened, trusted cache directory.
#[derive(Debug)]
pub(crate) struct CacheDir {
    path: PathBuf,
    fd: OwnedFd,
}

/// The components of `path` (absolute) as names, `..` kept.
fn components(path: &Path) -> std::collections::VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

impl CacheDir {
    /// Opens the directory `path`, creating missing directories (mode 0700) on the way, after
    /// checking every directory from `/` on (see the module docs). The error says which
    /// directory failed and why.
    pub(crate) fn open(path: &Path) -> Result<CacheDir, String> {
        let me = euid();
        let abs = std::path::absolute(path)
            .map_err(|e| format!("{}: cannot make it absolute: {e}", path.display()))?;
        let walk = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let root =
            || openat(libc::AT_FDCWD, c"/", walk, 0).map_err(|e| format!("cannot open /: {e}"));
        let check = |fd: &OwnedFd, here: &Path| -> Result<(), String> {
            let md = fstat(fd.as_raw_fd()).map_err(|e| format!("{}: {e}", here.display()))?;
            match distrust_reason(md.uid, md.mode, me) {
                Some(reason) => Err(format!("{}: {reason}", here.display())),
                None => Ok(()),
            }
        };
        let mut fd = root()?;
        let mut here = PathBuf::from("/");
        check(&fd, &here)?;
        let mut todo = components(&abs);
        let mut links = 0;
        while let Some(name) = todo.pop_front() {
            let c =
                CString::new(name.as_bytes()).map_err(|_| "a NUL byte in the path".to_string())?;
            if name == ".." {
                fd = openat(fd.as_raw_fd(), &c, walk, 0)
                    .map_err(|e| format!("{}: cannot open its parent: {e}", here.display()))?;
                here.pop();
                continue;
            }
            let next = here.join(&name);
            // Open it as a directory without following a link (one call on the common path);
            // only when that fails, look at what is there.
            match openat(fd.as_raw_fd(), &c, walk, 0) {
                Ok(dir) => {
                    fd = dir;
                    here = next;
                    check(&fd, &here)?;
                    continue;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
                    ) => {}
                Err(e) => return Err(format!("{}: {e}", next.display())),
            }
            let md = match fstatat(fd.as_raw_fd(), &c) {
                Ok(md) => md,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    // SAFETY: `c` is NUL-terminated and `fd` a directory descriptor that passed
                    // the trust check.
                    let rc = unsafe { libc::mkdirat(fd.as_raw_fd(), c.as_ptr(), 0o700) };
                    let err = io::Error::last_os_error();
                    if rc != 0 && err.raw_os_error() != Some(libc::EEXIST) {
                        return Err(format!("{}: cannot create: {err}", next.display()));
                    }
                    fstatat(fd.as_raw_fd(), &c).map_err(|e| format!("{}: {e}", next.display()))?
                }
                Err(e) => return Err(format!("{}: {e}", next.display())),
            };
            if md.kind() == libc::S_IFLNK {
                links += 1;
                if links > 40 {
                    return Err(format!(
                        "{}: too many levels of symbolic links",
                        abs.display()
                    ));
                }
                let mut buf = vec![0u8; libc::PATH_MAX as usize];
                // SAFETY: `c` is NUL-terminated and `buf` is writable for its length.
                let n = unsafe {
                    libc::readlinkat(
                        fd.as_raw_fd(),
                        c.as_ptr(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                    )
                };
                if n < 0 {
                    return Err(format!(
                        "{}: {}",
                        next.display(),
                        io::Error::last_os_error()
                    ));
                }
                buf.truncate(n as usize);
                let target = PathBuf::from(OsString::from_vec(buf));
                let mut front = components(&target);
                if target.is_absolute() {
                    fd = root()?;
                    here = PathBuf::from("/");
                }
                front.extend(todo.drain(..));
                todo = front;
                continue;
            }
            if md.kind() != libc::S_IFDIR {
                return Err(format!("{} is not a directory", next.display()));
            }
            fd = openat(fd.as_raw_fd(), &c, walk, 0)
                .map_err(|e| format!("{}: changed while being opened: {e}", next.display()))?;
            here = next;
            check(&fd, &here)?;
        }
        // The directory itself, opened for listing and as the base of every file operation.
        let dir = openat(fd.as_raw_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| format!("{}: cannot open: {e}", here.display()))?;
        // SAFETY: `dir` is an open directory; faccessat with AT_EACCESS checks this process's
        // effective ids.
        let rc = unsafe {
            libc::faccessat(
                dir.as_raw_fd(),
                c".".as_ptr(),
                libc::R_OK | libc::W_OK | libc::X_OK,
                libc::AT_EACCESS,
            )
        };
        if rc != 0 {
            return Err(format!(
                "{}: not readable, writable and searchable by this user ({})",
                here.display(),
                io::Error::last_os_error()
            ));
        }
        Ok(CacheDir {
            path: here,
            fd: dir,
        })
    }

    /// The directory's physical path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens entry `name` for reading when it can be trusted (see the module docs): `Ok(None)`
    /// when it does not exist, `Err(reason)` when something else is under its name.
    pub(crate) fn open_entry(
        &self,
        name: &str,
        max_bytes: u64,
    ) -> Result<Option<(File, Meta)>, String> {
        let c = cname(name).map_err(|e| e.to_string())?;
        let fd = match openat(
            self.fd.as_raw_fd(),
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        ) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err("a symbolic link".into()),
            Err(e) => return Err(e.to_string()),
        };
        let md = fstat(fd.as_raw_fd()).map_err(|e| e.to_string())?;
        if let Some(reason) = entry_distrust(&md, euid(), max_bytes) {
            return Err(reason);
        }
        Ok(Some((File::from(fd), md)))
    }

    /// Creates a new file for an entry under an unpredictable hidden name, exclusively, without
    /// following links, mode 0600; returns its name and the file.
    pub(crate) fn create_temp(&self, stem: &str) -> io::Result<(String, File)> {
        for _ in 0..16 {
            let name = format!(".{stem}.{}.tmp", random_hex()?);
            let c = cname(&name)?;
            match openat(
                self.fd.as_raw_fd(),
                &c,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                0o600,
            ) {
                Ok(fd) => return Ok((name, File::from(fd))),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "16 random temporary names were all taken",
        ))
    }

    /// Renames `from` to `to` inside the directory (atomic replacement).
    pub(crate) fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let (f, t) = (cname(from)?, cname(to)?);
        // SAFETY: both names are NUL-terminated and relative to our directory descriptor.
        let rc = unsafe {
            libc::renameat(
                self.fd.as_raw_fd(),
                f.as_ptr(),
                self.fd.as_raw_fd(),
                t.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes `name` if it is still the file `meta` describes and this process's own (never
    /// somebody else's file that took its place). Returns whether it was removed.
    pub(crate) fn unlink_if(&self, name: &str, meta: &Meta) -> bool {
        let Ok(c) = cname(name) else { return false };
        match fstatat(self.fd.as_raw_fd(), &c) {
            Ok(md) if md.dev == meta.dev && md.ino == meta.ino && md.uid == euid() => {
                // SAFETY: `c` is NUL-terminated; unlinkat on a name in our directory descriptor.
                unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) == 0 }
            }
            _ => false,
        }
    }

    /// Removes `name` whatever it is (a temporary file this process created a moment ago).
    pub(crate) fn unlink(&self, name: &str) {
        if let Ok(c) = cname(name) {
            // SAFETY: `c` is NUL-terminated; unlinkat on a name in our directory descriptor.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        }
    }

    /// `(name, meta, mtime)` of the regular files in the directory owned by this process whose
    /// name `keep` accepts (others' files are never touched).
    pub(crate) fn own_files(
        &self,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<(String, Meta, std::time::SystemTime)> {
        let Ok(fd) = openat(
            self.fd.as_raw_fd(),
            c".",
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
        ) else {
            return Vec::new();
        };
        // SAFETY: `fd` is an open directory descriptor; fdopendir takes ownership of it.
        let dir = unsafe { libc::fdopendir(fd.as_raw_fd()) };
        if dir.is_null() {
            return Vec::new();
        }
        // The DIR owns the descriptor now.
        std::mem::forget(fd);
        struct Closer(*mut libc::DIR);
        impl Drop for Closer {
            fn drop(&mut self) {
                // SAFETY: the DIR came from fdopendir and is closed exactly once.
                unsafe { libc::closedir(self.0) };
            }
        }
        let dir = Closer(dir);
        let me = euid();
        let mut out = Vec::new();
        loop {
            // SAFETY: `dir.0` is a valid DIR stream used by this thread only.
            let ent = unsafe { libc::readdir(dir.0) };
            if ent.is_null() {
                return out;
            }
            // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated.
            let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
            let Ok(name) = std::str::from_utf8(name.to_bytes()) else {
                continue;
            };
            if !keep(name) {
                continue;
            }
            let Ok(c) = cname(name) else { continue };
            let mut st: libc::stat = unsafe_zeroed_stat();
            // SAFETY: `c` is NUL-terminated, `st` a valid out-pointer.
            let rc = unsafe {
                libc::fstatat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if rc != 0 {
                continue;
            }
            let md = Meta::from_stat(&st);
            if md.kind() != libc::S_IFREG || md.uid != me {
                continue;
            }
            let mtime = std::time::UNIX_EPOCH
                + std::time::Duration::new(
                    u64::try_from(st.st_mtime).unwrap_or(0),
                    u32::try_from(st.st_mtime_nsec).unwrap_or(0),
                );
            out.push((name.to_string(), md, mtime));
        }
    }
}

fn unsafe_zeroed_stat() -> libc::stat {
    // SAFETY: an all-zero `stat` is a valid value (plain integers).
    unsafe { std::mem::zeroed() }
}

/// 128 random bits as hex, from the kernel's generator.
fn random_hex() -> io::Result<String> {
    let mut b = [0u8; 16];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: writes at most `b.len() - got` bytes into the unfilled tail of `b`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Reads all of `file` (whose size `meta` gave, at most `max_bytes`), refusing a file that grew
/// past the bound meanwhile.
pub(crate) fn read_bounded(file: &File, max_bytes: u64) -> Option<Vec<u8>> {
    let cap = usize::try_from(max_bytes).ok()?.saturating_add(1);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        // SAFETY: reads into `chunk`, whose length is stated; the offset is the bytes read.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                chunk.as_mut_ptr().cast(),
                chunk.len(),
                buf.len() as libc::off_t,
            )
        };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
        if n == 0 {
            return Some(buf);
        }
        buf.extend_from_slice(&chunk[..n as usize]);
        if buf.len() >= cap {
            return None;
        }
    }
}

/// Sets a file's modification time to now (the disk level's LRU clock).
pub(crate) fn touch(file: &File) {
    // SAFETY: a null `times` means "now" for both times; the descriptor is open.
    unsafe { libc::futimens(file.as_raw_fd(), std::ptr::null()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distrust_rules_are_the_lock_directorys() {
        assert!(distrust_reason(1000, 0o40700, 1000).is_none());
        assert!(distrust_reason(0, 0o41777, 1000).is_none());
        assert!(distrust_reason(0, 0o40755, 1000).is_none());
        assert!(distrust_reason(1001, 0o40700, 1000).is_some());
        assert!(distrust_reason(1001, 0o41777, 1000).is_some());
        assert!(distrust_reason(1000, 0o40777, 1000).is_some());
        assert!(distrust_reason(0, 0o40775, 1000).is_some());
        let m = |uid, mode, size| Meta {
            dev: 0,
            ino: 0,
            uid,
            mode,
            size,
        };
        assert!(entry_distrust(&m(1000, 0o100600, 10), 1000, 100).is_none());
        assert!(entry_distrust(&m(1000, 0o100644, 10), 1000, 100).is_none());
        assert!(entry_distrust(&m(1001, 0o100600, 10), 1000, 100).is_some());
        assert!(entry_distrust(&m(1000, 0o100666, 10), 1000, 100).is_some());
        assert!(entry_distrust(&m(1000, 0o100600, 101), 1000, 100).is_some());
        assert!(
            entry_distrust(&m(1000, 0o010600, 0), 1000, 100).is_some(),
            "FIFO"
        );
    }
}
