//! The rule for which files in a trusted directory are read as the caller's own, and how the
//! caller writes one without a race.
//!
//! A file is read as ours only when it is a regular file (not a FIFO that would block a read, a
//! device such as `/dev/zero` that never ends, or a directory), owned by the caller, writable by
//! nobody else, and no larger than the reader's bound. A new file is written under an
//! unpredictable hidden name created exclusively (a name planted in advance, a link included,
//! makes the creation fail instead of being followed), then renamed over its real name, so that
//! readers in other processes see the old file or the new one, never a torn one.

use std::fs::File;
use std::io;

use crate::dir::Dir;
use crate::meta::Meta;
use crate::random::random_hex;

/// Why a file with this `meta` cannot be read as one of the caller's (`me`) own within
/// `max_bytes`, if it cannot (see the module docs).
pub fn own_file_refusal(meta: &Meta, me: u32, max_bytes: u64) -> Option<String> {
    if !meta.is_regular() {
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
            "{} bytes, more than the bound of {max_bytes}",
            meta.size
        ));
    }
    None
}

impl Dir {
    /// Creates a new file for `stem` under an unpredictable hidden name (`.{stem}.{random}.tmp`),
    /// exclusively, without following links, with `mode` (less the umask); returns its name and
    /// the file. Gives up after 16 names that were all taken.
    pub fn create_temp(&self, stem: &str, mode: u32) -> io::Result<(String, File)> {
        for _ in 0..16 {
            let name = format!(".{stem}.{}.tmp", random_hex()?);
            match self.create_new(&name, mode) {
                Ok(f) => return Ok((name, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "16 random temporary names were all taken",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::FileId;
    use crate::walk::{walk, Walk};
    use std::time::SystemTime;

    fn m(uid: u32, mode: u32, size: u64) -> Meta {
        Meta {
            id: FileId { dev: 0, ino: 0 },
            uid,
            mode,
            size,
            mtime: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn only_own_regular_files_no_one_else_may_write_within_the_bound_are_read() {
        assert!(own_file_refusal(&m(1000, 0o100600, 10), 1000, 100).is_none());
        assert!(own_file_refusal(&m(1000, 0o100644, 10), 1000, 100).is_none());
        assert!(own_file_refusal(&m(1000, 0o100600, 100), 1000, 100).is_none());
        let reason = |meta| own_file_refusal(&meta, 1000, 100).expect("refused");
        assert!(reason(m(1001, 0o100600, 10)).contains("uid 1001"));
        assert!(reason(m(1000, 0o100666, 10)).contains("writable by others"));
        assert!(reason(m(1000, 0o100620, 10)).contains("writable by others"));
        assert!(reason(m(1000, 0o100602, 10)).contains("writable by others"));
        assert!(reason(m(1000, 0o100600, 101)).contains("more than the bound of 100"));
        assert!(reason(m(1000, 0o010600, 0)).contains("regular"), "FIFO");
        assert!(reason(m(1000, 0o020600, 0)).contains("regular"), "device");
        assert!(
            reason(m(1000, 0o040700, 0)).contains("regular"),
            "directory"
        );
        assert!(reason(m(1000, 0o120777, 0)).contains("regular"), "link");
    }

    #[test]
    fn temporary_names_are_fresh_hidden_and_never_follow_a_planted_link() {
        let base = std::env::temp_dir().join(format!("gpukit-trust-temp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = walk(&base, Walk::CREATE_PRIVATE).expect("walk").dir;
        let (a, _fa) = dir.create_temp("entry", 0o600).expect("first");
        let (b, _fb) = dir.create_temp("entry", 0o600).expect("second");
        assert_ne!(a, b);
        for n in [&a, &b] {
            assert!(n.starts_with(".entry.") && n.ends_with(".tmp"), "{n}");
            let meta = dir.stat(n).expect("stat");
            assert!(meta.is_regular());
            assert_eq!(meta.mode & 0o077, 0, "{n}: {:o}", meta.mode);
        }
        // A link planted under the name create_new is asked for is refused, not followed.
        std::os::unix::fs::symlink("/dev/null", base.join("planted")).expect("symlink");
        assert!(dir.create_new("planted", 0o600).is_err());
        std::fs::remove_dir_all(&base).expect("cleanup");
    }
}
