//! The rule for which directories can be trusted.
//!
//! A directory can be trusted by the user `me` when it is owned by `me` or by root (another
//! owner can always remove or replace what is in it), and when neither its group nor everybody
//! may write to it, unless it has the sticky bit: in a sticky directory (like `/tmp`) others can
//! add names but cannot remove or rename files they do not own, so the caller's own files stay
//! the caller's. Without the sticky bit anybody who may write to the directory can remove or
//! rename any file in it, or put another file, a link or a directory in its place.
//!
//! A symbolic link in a trusted directory that others may write (sticky, like `/tmp`) is
//! followed only when it is owned by the caller or by the directory's owner: anybody else who
//! put it there can re-point it at any time (delete and re-create it: it is theirs), sending two
//! of the caller's processes to two different places. This is the kernel's own rule for path
//! resolution (`fs.protected_symlinks`), which a walk that reads links itself must apply too;
//! here it also covers directories only a group may write.

use std::fmt;

/// Why a directory cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Distrust {
    /// It is owned by somebody other than the caller and root.
    Owner {
        /// Its owner.
        owner: u32,
        /// The caller's effective uid.
        me: u32,
    },
    /// Its group or everybody may write to it, and it lacks the sticky bit.
    Writable {
        /// Its mode (permission bits, with the file type bits cleared).
        mode: u32,
    },
    /// It is a symbolic link in a sticky directory others may write, owned by somebody other
    /// than the caller and the directory's owner.
    LinkOwner {
        /// The link's owner.
        owner: u32,
        /// The caller's effective uid.
        me: u32,
    },
}

impl fmt::Display for Distrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distrust::Owner { owner, me } => write!(
                f,
                "it is owned by uid {owner} (neither you, uid {me}, nor root), who can remove or \
                 replace the files in it"
            ),
            Distrust::Writable { mode } => {
                let who = if mode & 0o002 != 0 {
                    "everybody"
                } else {
                    "its group"
                };
                write!(
                    f,
                    "it is writable by {who} (mode {mode:04o}) without the sticky bit, so they \
                     can remove or rename other users' files in it"
                )
            }
            Distrust::LinkOwner { owner, me } => write!(
                f,
                "it is a symbolic link owned by uid {owner} (neither you, uid {me}, nor the \
                 owner of the directory it is in) in a directory others may write, so its owner \
                 can re-point it at any time"
            ),
        }
    }
}

/// Why a directory with this `owner` and `mode` cannot be trusted by the user `me`, if it
/// cannot (see the module docs).
pub fn distrust(owner: u32, mode: u32, me: u32) -> Option<Distrust> {
    if owner != me && owner != 0 {
        return Some(Distrust::Owner { owner, me });
    }
    if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
        return Some(Distrust::Writable {
            mode: mode & 0o7777,
        });
    }
    None
}

/// Why a symbolic link owned by `link_owner`, in a directory with `dir_owner` and `dir_mode`
/// that the caller `me` trusts, cannot be followed, if it cannot (see the module docs).
pub fn link_distrust(link_owner: u32, dir_owner: u32, dir_mode: u32, me: u32) -> Option<Distrust> {
    let others_may_write = dir_mode & 0o022 != 0;
    if others_may_write && link_owner != me && link_owner != dir_owner {
        return Some(Distrust::LinkOwner {
            owner: link_owner,
            me,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_modes() {
        // Own or root's, not writable by others, or sticky: trusted.
        for (owner, mode, me) in [
            (1000, 0o40700, 1000),
            (1000, 0o40755, 1000),
            (0, 0o40755, 1000),
            (0, 0o41777, 1000),
            (0, 0o41770, 1000),
            (1000, 0o41777, 1000),
            (0, 0o40700, 0),
        ] {
            assert_eq!(distrust(owner, mode, me), None, "{owner} {mode:o} {me}");
        }
        // Another owner, even with a harmless mode; root trusts nobody else either.
        assert_eq!(
            distrust(1001, 0o40700, 1000),
            Some(Distrust::Owner {
                owner: 1001,
                me: 1000
            })
        );
        assert!(distrust(1001, 0o41777, 1000).is_some());
        assert!(distrust(1000, 0o40755, 0).is_some());
        // Writable by others without the sticky bit: the mode is kept without the type bits.
        assert_eq!(
            distrust(1000, 0o40777, 1000),
            Some(Distrust::Writable { mode: 0o777 })
        );
        assert_eq!(
            distrust(0, 0o42775, 1000),
            Some(Distrust::Writable { mode: 0o2775 })
        );
        assert_eq!(
            distrust(0, 0o40775, 1000),
            Some(Distrust::Writable { mode: 0o775 })
        );
        assert!(distrust(1000, 0o40722, 1000).is_some());
        assert!(distrust(1000, 0o40702, 1000).is_some());
    }

    #[test]
    fn links_in_directories_others_may_write_must_be_their_owners_or_the_callers() {
        // (link owner, directory owner, directory mode, me)
        for ok in [
            (1000, 0, 0o41777, 1000),
            (0, 0, 0o41777, 1000),
            (1000, 1000, 0o41777, 1000),
            (1001, 1001, 0o41770, 1000),
            (1001, 0, 0o40755, 1000),
            (1001, 1000, 0o40700, 1000),
        ] {
            assert_eq!(link_distrust(ok.0, ok.1, ok.2, ok.3), None, "{ok:?}");
        }
        assert_eq!(
            link_distrust(1001, 0, 0o41777, 1000),
            Some(Distrust::LinkOwner {
                owner: 1001,
                me: 1000
            })
        );
        assert!(link_distrust(1001, 0, 0o41770, 1000).is_some());
        assert!(link_distrust(1001, 0, 0o41777, 0).is_some(), "root too");
        let why = link_distrust(1001, 0, 0o41777, 1000)
            .expect("distrusted")
            .to_string();
        assert!(
            why.contains("symbolic link owned by uid 1001") && why.contains("re-point"),
            "{why}"
        );
    }

    #[test]
    fn reasons_say_who_can_do_what() {
        let owner = distrust(1001, 0o40700, 1000)
            .expect("distrusted")
            .to_string();
        assert!(
            owner.contains("uid 1001") && owner.contains("uid 1000") && owner.contains("root"),
            "{owner}"
        );
        let all = distrust(1000, 0o40777, 1000)
            .expect("distrusted")
            .to_string();
        assert!(
            all.contains("writable by everybody") && all.contains("0777") && all.contains("sticky"),
            "{all}"
        );
        let group = distrust(1000, 0o40770, 1000)
            .expect("distrusted")
            .to_string();
        assert!(group.contains("writable by its group"), "{group}");
    }
}
