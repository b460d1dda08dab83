//! The crate's single error type.

use std::io;
use std::path::{Path, PathBuf};

use crate::rule::Distrust;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a directory cannot be used. Every variant names the directory (or the component of
/// the path) concerned; the caller adds what to do instead, which depends on what the
/// directory is for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A directory (the one asked for, or one on the way to it), or a symbolic link on the way,
    /// could be changed by another user: see [`crate::rule`].
    #[error("{}: {reason}", path.display())]
    Untrusted {
        /// The directory (or link) that is not trusted.
        path: PathBuf,
        /// Who could change it, and how.
        reason: Distrust,
    },
    /// The path cannot name a directory: it is empty, contains a NUL byte, or ends in `/`,
    /// `.` or `..` where a directory's own name is needed.
    #[error("{:?}: {problem}", path)]
    BadPath {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A directory on the way does not exist (and was not to be created).
    #[error("{} does not exist", path.display())]
    Missing {
        /// The first missing directory.
        path: PathBuf,
    },
    /// Something on the way, or the directory itself, is not a directory.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// What is there instead.
        path: PathBuf,
    },
    /// The directory itself is a symbolic link where a real directory is required
    /// ([`crate::Dir::open_subdir`]).
    #[error("{} is a symbolic link (refused: name the directory it points to instead)", path.display())]
    SymbolicLink {
        /// The link.
        path: PathBuf,
    },
    /// Resolving the path met more than [`crate::MAX_LINKS`] symbolic links (a loop of links).
    #[error("{}: more than {} symbolic links on the way (a loop of links?)", path.display(), crate::MAX_LINKS)]
    TooManyLinks {
        /// The path being resolved.
        path: PathBuf,
    },
    /// A system call failed.
    #[error("{}: cannot {op}: {source}", path.display())]
    Io {
        /// What was being done (`open`, `create`, `read the link`, ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The directory cannot be read, written and searched by this process's effective user.
    #[error("{}: not readable, writable and searchable by this user ({source})", path.display())]
    NoAccess {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The directory, file or path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Untrusted { path, .. }
            | Error::BadPath { path, .. }
            | Error::Missing { path }
            | Error::NotADirectory { path }
            | Error::SymbolicLink { path }
            | Error::TooManyLinks { path }
            | Error::Io { path, .. }
            | Error::NoAccess { path, .. } => path,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
