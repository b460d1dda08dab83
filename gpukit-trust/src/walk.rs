//! The link-safe walk: resolving a directory's path one component at a time from `/`, checking
//! every directory on the way, and following a symbolic link only from a directory that passed
//! the check.
//!
//! Letting the kernel resolve the path would follow links anywhere on the way, including a link
//! in a directory another user may write, which that user could re-point between two processes
//! (sending them to two different directories) or at a directory of their choosing. Here every
//! component is opened with `O_PATH | O_NOFOLLOW`, each directory reached is checked with
//! [`crate::rule`], and a link is read (`readlinkat`) and its target walked the same way, from
//! `/` for an absolute target, provided the link itself may be followed (one that another user
//! put in a sticky directory others may write is not: see [`crate::rule`]). `..` goes to the parent of the physical directory reached so far
//! (as the kernel does), so the returned path has no link in it.

use std::collections::VecDeque;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use crate::dir::{mkdirat, Dir};
use crate::error::{Error, Result};
use crate::meta::{euid, fstatat_raw, openat_raw};
use crate::rule::{distrust, link_distrust, Distrust};

/// Most symbolic links one walk follows (the kernel's own limit); more is a loop.
pub const MAX_LINKS: usize = 40;

/// What a walk does with a directory that cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDistrust {
    /// Stop with [`Error::Untrusted`] naming it.
    Refuse,
    /// Go on, and report the first one in [`Walked::distrust`] (for a read-only report on a
    /// directory, never for using it).
    Note,
}

/// How to walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// Create missing directories with this mode (less the umask); `None`: a missing directory
    /// is [`Error::Missing`]. Nothing is created inside a directory that is not trusted.
    pub create: Option<u32>,
    /// What to do with a directory that is not trusted.
    pub on_distrust: OnDistrust,
}

impl Walk {
    /// Every directory must exist and be trusted.
    pub const EXISTING: Walk = Walk {
        create: None,
        on_distrust: OnDistrust::Refuse,
    };
    /// Every directory must be trusted; missing ones are created with mode 0700.
    pub const CREATE_PRIVATE: Walk = Walk {
        create: Some(0o700),
        on_distrust: OnDistrust::Refuse,
    };
    /// Every directory must exist; the first one that is not trusted is reported.
    pub const REPORT: Walk = Walk {
        create: None,
        on_distrust: OnDistrust::Note,
    };
}

/// The result of a walk.
#[derive(Debug)]
pub struct Walked {
    /// The directory reached, opened with `O_PATH` (the base of descriptor-relative calls;
    /// [`Dir::entries`] and [`Dir::reopen`] open it for reading), with its physical path.
    pub dir: Dir,
    /// With [`OnDistrust::Note`]: the first directory on the way (or the directory itself, or
    /// a link followed on the way) that is not trusted, and why.
    pub distrust: Option<(PathBuf, Distrust)>,
}

const PATH_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;

/// Resolves the directory `path` (relative to the current directory unless absolute) as the
/// module docs say, creating missing directories when `how` allows, and returns it opened.
pub fn walk(path: &Path, how: Walk) -> Result<Walked> {
    if path.as_os_str().is_empty() {
        return Err(Error::BadPath {
            path: path.to_path_buf(),
            problem: "the path is empty",
        });
    }
    let abs = std::path::absolute(path).map_err(|e| Error::io("make it absolute", path, e))?;
    let mut checker = Checker {
        me: euid(),
        on_distrust: how.on_distrust,
        noted: None,
    };
    let root = || -> Result<Dir> {
        let fd = openat_raw(libc::AT_FDCWD, c"/", PATH_FLAGS, 0)
            .map_err(|e| Error::io("open", "/", e))?;
        Ok(Dir::new(fd, PathBuf::from("/")))
    };
    let mut cur = root()?;
    checker.check(&cur)?;
    let mut todo = names(&abs);
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        let c = CString::new(name.as_bytes()).map_err(|_| Error::BadPath {
            path: abs.clone(),
            problem: "contains a NUL byte",
        })?;
        if name == ".." {
            let mut up = cur.path().to_path_buf();
            up.pop();
            let fd = openat_raw(cur.as_raw_fd(), &c, PATH_FLAGS, 0)
                .map_err(|e| Error::io("open its parent", cur.path(), e))?;
            cur = Dir::new(fd, up);
            continue;
        }
        let next = cur.path().join(&name);
        // Open it as a directory without following a link: one call on the common path; only
        // when that fails, look at what is there.
        match openat_raw(cur.as_raw_fd(), &c, PATH_FLAGS, 0) {
            Ok(fd) => {
                cur = Dir::new(fd, next);
                checker.check(&cur)?;
                continue;
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
                ) => {}
            Err(e) => return Err(Error::io("open", next, e)),
        }
        let md = match fstatat_raw(cur.as_raw_fd(), &c) {
            Ok(md) => md,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // Only ever created inside a directory that passed the check.
                let Some(mode) = how.create.filter(|_| checker.noted.is_none()) else {
                    return Err(Error::Missing { path: next });
                };
                mkdirat(cur.as_raw_fd(), &c, mode).map_err(|e| Error::io("create", &next, e))?;
                fstatat_raw(cur.as_raw_fd(), &c).map_err(|e| Error::io("stat", &next, e))?
            }
            Err(e) => return Err(Error::io("stat", next, e)),
        };
        if md.is_symlink() {
            let here = cur.meta().map_err(|e| Error::io("stat", cur.path(), e))?;
            let reason = link_distrust(md.uid, here.uid, here.mode, checker.me);
            checker.judge(&next, reason)?;
            links += 1;
            if links > MAX_LINKS {
                return Err(Error::TooManyLinks { path: abs });
            }
            let target = readlinkat(cur.as_raw_fd(), &c)
                .map_err(|e| Error::io("read the link", &next, e))?;
            let mut front = names(&target);
            if target.is_absolute() {
                cur = root()?;
            }
            front.extend(todo.drain(..));
            todo = front;
            continue;
        }
        if !md.is_dir() {
            return Err(Error::NotADirectory { path: next });
        }
        // Something else took its place after the first open failed.
        let fd = openat_raw(cur.as_raw_fd(), &c, PATH_FLAGS, 0)
            .map_err(|e| Error::io("open (it changed while being opened)", &next, e))?;
        cur = Dir::new(fd, next);
        checker.check(&cur)?;
    }
    Ok(Walked {
        dir: cur,
        distrust: checker.noted,
    })
}

/// Applies the trust rule to each directory the walk reaches.
struct Checker {
    me: u32,
    on_distrust: OnDistrust,
    /// The first directory or link found untrusted (with [`OnDistrust::Note`]).
    noted: Option<(PathBuf, Distrust)>,
}

impl Checker {
    /// Checks a directory the walk reached.
    fn check(&mut self, dir: &Dir) -> Result<()> {
        let md = dir.meta().map_err(|e| Error::io("stat", dir.path(), e))?;
        self.judge(dir.path(), distrust(md.uid, md.mode, self.me))
    }

    /// Refuses or notes `path` when there is a `reason` not to trust it.
    fn judge(&mut self, path: &Path, reason: Option<Distrust>) -> Result<()> {
        let Some(reason) = reason else {
            return Ok(());
        };
        if self.on_distrust == OnDistrust::Refuse {
            return Err(Error::Untrusted {
                path: path.to_path_buf(),
                reason,
            });
        }
        self.noted
            .get_or_insert_with(|| (path.to_path_buf(), reason));
        Ok(())
    }
}

/// The components of `path` as names, `..` kept (`/` and `.` dropped).
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// The target of the link `name` in `dirfd`.
fn readlinkat(dirfd: RawFd, name: &std::ffi::CStr) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `name` is NUL-terminated and `buf` is writable for its stated length.
    let n = unsafe { libc::readlinkat(dirfd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n.unsigned_abs());
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn canon(p: &Path) -> PathBuf {
        fs::canonicalize(p).expect("canonicalize")
    }

    #[test]
    fn links_from_trusted_directories_are_followed_to_the_physical_path() {
        let t = tempfile::tempdir().expect("tempdir");
        let real = t.path().join("real");
        fs::create_dir_all(real.join("locks")).expect("mkdir");
        // (link, target): absolute, relative, and one inside the tree pointing up and back down.
        for (link, target) in [
            (t.path().join("abs"), real.clone()),
            (t.path().join("rel"), PathBuf::from("real")),
            (real.join("up"), PathBuf::from("../real/locks")),
        ] {
            symlink(&target, &link).expect("symlink");
        }
        for p in [
            "abs/locks",
            "rel/locks",
            "rel/../real/locks",
            "real/up",
            "abs/./locks",
        ] {
            let w = walk(&t.path().join(p), Walk::EXISTING).expect(p);
            assert_eq!(w.dir.path(), canon(&real.join("locks")), "{p}");
            assert!(w.distrust.is_none());
        }
        // `..` after a link goes up from where the link led (the kernel's rule).
        let w = walk(&t.path().join("real/up/.."), Walk::EXISTING).expect("..");
        assert_eq!(w.dir.path(), canon(&real));
        // The directory itself may be a link (followed from a trusted directory).
        let w = walk(&t.path().join("abs"), Walk::EXISTING).expect("link itself");
        assert_eq!(w.dir.path(), canon(&real));
        let w = walk(Path::new("/"), Walk::EXISTING).expect("/");
        assert_eq!(w.dir.path(), Path::new("/"));
    }

    #[test]
    fn missing_directories_are_created_only_when_asked_and_private() {
        let t = tempfile::tempdir().expect("tempdir");
        let deep = t.path().join("a/b/c");
        match walk(&deep, Walk::EXISTING) {
            Err(Error::Missing { path }) => assert_eq!(path, canon(t.path()).join("a")),
            other => panic!("{other:?}"),
        }
        assert!(!t.path().join("a").exists(), "nothing created");
        let w = walk(&deep, Walk::CREATE_PRIVATE).expect("create");
        assert_eq!(w.dir.path(), canon(&deep));
        for p in ["a", "a/b", "a/b/c"] {
            let mode = fs::metadata(t.path().join(p))
                .expect("md")
                .permissions()
                .mode();
            assert_eq!(mode & 0o7777, 0o700, "{p}");
        }
        // Through a link to a directory that does not exist yet: created at the target.
        symlink(t.path().join("target"), t.path().join("dangling")).expect("symlink");
        let w = walk(&t.path().join("dangling/x"), Walk::CREATE_PRIVATE).expect("create");
        assert_eq!(w.dir.path(), canon(&t.path().join("target/x")));
    }

    #[test]
    fn untrusted_directories_stop_the_walk_or_are_noted() {
        let t = tempfile::tempdir().expect("tempdir");
        let open = t.path().join("open");
        fs::create_dir_all(open.join("inner")).expect("mkdir");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod");
        match walk(&open.join("inner"), Walk::EXISTING) {
            Err(Error::Untrusted { path, reason }) => {
                assert_eq!(path, canon(&open));
                assert_eq!(reason, Distrust::Writable { mode: 0o777 });
            }
            other => panic!("{other:?}"),
        }
        // Nothing is created below it, even when creation is asked for.
        assert!(matches!(
            walk(&open.join("new"), Walk::CREATE_PRIVATE),
            Err(Error::Untrusted { .. })
        ));
        assert!(!open.join("new").exists());
        // Noted, and the walk goes on; still nothing created.
        let w = walk(&open.join("inner"), Walk::REPORT).expect("report");
        assert_eq!(w.dir.path(), canon(&open.join("inner")));
        let (path, reason) = w.distrust.expect("noted");
        assert_eq!(path, canon(&open));
        assert!(reason.to_string().contains("writable by everybody"));
        let noting_create = Walk {
            create: Some(0o700),
            on_distrust: OnDistrust::Note,
        };
        assert!(matches!(
            walk(&open.join("new"), noting_create),
            Err(Error::Missing { .. })
        ));
        assert!(!open.join("new").exists());
        // A link placed in that directory is not followed.
        let real = t.path().join("real");
        fs::create_dir(&real).expect("mkdir");
        symlink(&real, open.join("link")).expect("symlink");
        match walk(&open.join("link"), Walk::EXISTING) {
            Err(Error::Untrusted { path, .. }) => assert_eq!(path, canon(&open)),
            other => panic!("{other:?}"),
        }
        // Group-writable without the sticky bit: refused; with it: trusted.
        let group = t.path().join("group");
        fs::create_dir(&group).expect("mkdir");
        fs::set_permissions(&group, fs::Permissions::from_mode(0o770)).expect("chmod");
        let e = walk(&group, Walk::EXISTING).expect_err("group-writable");
        assert!(e.to_string().contains("writable by its group"), "{e}");
        fs::set_permissions(&group, fs::Permissions::from_mode(0o1770)).expect("chmod");
        walk(&group, Walk::EXISTING).expect("sticky");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).expect("chmod");
        walk(&open.join("inner"), Walk::EXISTING).expect("sticky");
    }

    #[test]
    fn loops_files_and_bad_paths_end_with_errors() {
        let t = tempfile::tempdir().expect("tempdir");
        symlink(t.path().join("loop2"), t.path().join("loop1")).expect("symlink");
        symlink(t.path().join("loop1"), t.path().join("loop2")).expect("symlink");
        assert!(matches!(
            walk(&t.path().join("loop1/x"), Walk::CREATE_PRIVATE),
            Err(Error::TooManyLinks { .. })
        ));
        symlink("self", t.path().join("self")).expect("symlink");
        assert!(matches!(
            walk(&t.path().join("self"), Walk::EXISTING),
            Err(Error::TooManyLinks { .. })
        ));
        fs::write(t.path().join("file"), b"x").expect("write");
        for p in ["file", "file/x"] {
            match walk(&t.path().join(p), Walk::CREATE_PRIVATE) {
                Err(Error::NotADirectory { path }) => {
                    assert_eq!(path, canon(&t.path().join("file")))
                }
                other => panic!("{p}: {other:?}"),
            }
        }
        symlink(t.path().join("file"), t.path().join("to_file")).expect("symlink");
        assert!(matches!(
            walk(&t.path().join("to_file"), Walk::EXISTING),
            Err(Error::NotADirectory { .. })
        ));
        assert!(matches!(
            walk(Path::new(""), Walk::EXISTING),
            Err(Error::BadPath { .. })
        ));
        let e = walk(&t.path().join("a\0b"), Walk::EXISTING).expect_err("NUL");
        assert!(matches!(e, Error::BadPath { .. }), "{e}");
    }

    #[test]
    fn relative_paths_start_at_the_current_directory() {
        // The current directory of a test process is the crate's directory.
        let here = std::env::current_dir().expect("cwd");
        let w = walk(Path::new("src"), Walk::EXISTING).expect("src");
        assert_eq!(w.dir.path(), canon(&here.join("src")));
    }
}
