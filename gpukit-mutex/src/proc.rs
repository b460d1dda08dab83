//! Process identity, ancestry and environment from `/proc`, and the boot id.
//!
//! A process is identified by its pid *and* its start time (field 22 of `/proc/<pid>/stat`, in
//! clock ticks since boot), so a recycled pid is never mistaken for the original process.
//! Ancestry is the `ppid` chain read from `/proc`, which the kernel maintains and no process can
//! forge (unlike environment variables). Every read is bounded.

use std::fs::File;
use std::io::Read;
use std::sync::OnceLock;

/// A process identity that survives pid reuse: pid plus start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ProcId {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub start: u64,
}

impl ProcId {
    /// `<pid>:<start>`, the form used in records and in `GPUMUTEX_JOB_ROOT`.
    pub fn to_text(self) -> String {
        format!("{}:{}", self.pid, self.start)
    }

    /// Parses `<pid>:<start>`.
    pub fn parse(s: &str) -> Option<ProcId> {
        let (p, st) = s.trim().split_once(':')?;
        Some(ProcId {
            pid: p.parse().ok()?,
            start: st.parse().ok()?,
        })
    }
}

/// The fields of `/proc/<pid>/stat` this crate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub pid: u32,
    /// Parent process id (0 for the root of a pid namespace).
    pub ppid: u32,
    pub start: u64,
}

impl ProcStat {
    pub fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start: self.start,
        }
    }
}

/// Reads at most `limit` bytes of a file (`/proc` files report size 0, so the size cannot be
/// checked first). `None` if it cannot be opened or read.
pub(crate) fn read_bounded(path: &str, limit: usize) -> Option<Vec<u8>> {
    let f = File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(limit as u64).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// Parses the contents of `/proc/<pid>/stat`. The command name (field 2) may contain spaces
/// and parentheses, so parsing starts after the *last* `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let pid: u32 = text[..open].trim().parse().ok()?;
    let close = text.rfind(')')?;
    let rest = text.get(close + 1..)?;
    let mut fields = rest.split_ascii_whitespace();
    // Fields after the command: 3 state, 4 ppid, ..., 22 starttime.
    fields.next()?;
    let ppid: u32 = fields.next()?.parse().ok()?;
    // We consumed fields 3 and 4; field 22 is 18 further on.
    let start: u64 = fields.nth(17)?.parse().ok()?;
    Some(ProcStat { pid, ppid, start })
}

fn stat_path(path: &str) -> Option<ProcStat> {
    let raw = read_bounded(path, 4096)?;
    parse_stat(&String::from_utf8_lossy(&raw))
}

/// Reads `/proc/<pid>/stat`; `None` if the process does not exist (or cannot be read).
pub(crate) fn stat(pid: u32) -> Option<ProcStat> {
    stat_path(&format!("/proc/{pid}/stat"))
}

/// The identity of the calling process, read from `/proc` once per process (the cache is keyed
/// by pid, so a `fork`ed child reads its own).
pub(crate) fn self_id() -> Option<ProcId> {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    static PID: AtomicU32 = AtomicU32::new(0);
    static START: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    if PID.load(Ordering::Acquire) == pid {
        return Some(ProcId {
            pid,
            start: START.load(Ordering::Relaxed),
        });
    }
    let id = stat_path("/proc/self/stat")?.id();
    // Every thread of this process stores the same value; `PID` is published last.
    START.store(id.start, Ordering::Relaxed);
    PID.store(id.pid, Ordering::Release);
    Some(id)
}

/// The ancestry of `first`: itself first, then its parent, grandparent, ... up to the root of
/// the pid namespace. Stops early if a `/proc` entry vanishes mid-walk (an ancestor exited).
fn ancestry_from(first: Option<ProcStat>) -> Vec<ProcId> {
    let mut out = Vec::new();
    let Some(mut cur) = first else {
        return out;
    };
    // A real chain is short; the bound only protects against a corrupt /proc.
    for _ in 0..4096 {
        out.push(cur.id());
        if cur.ppid == 0 || cur.ppid == cur.pid {
            break;
        }
        match stat(cur.ppid) {
            Some(parent) => cur = parent,
            None => break,
        }
    }
    out
}

/// The caller's ancestry: itself first, then its parent, ... (see [`ancestry_from`]).
pub(crate) fn ancestry_of_self() -> Vec<ProcId> {
    ancestry_from(stat_path("/proc/self/stat"))
}

/// The ancestry of another live process `id` (empty if it is gone or was replaced).
pub(crate) fn ancestry_of(id: ProcId) -> Vec<ProcId> {
    let first = stat(id.pid).filter(|s| s.start == id.start);
    ancestry_from(first)
}

/// Whether the environment of process `pid` defines `name`: `Some(true/false)`, or `None` when
/// it cannot be read (another user's process, or gone). Reads at most 1 MiB.
pub(crate) fn environ_has(pid: u32, name: &str) -> Option<bool> {
    let raw = read_bounded(&format!("/proc/{pid}/environ"), 1 << 20)?;
    let key = format!("{name}=");
    Some(
        raw.split(|b| *b == 0)
            .any(|kv| kv.starts_with(key.as_bytes())),
    )
}

/// The calling process's command line, read once.
pub(crate) fn self_cmdline() -> String {
    static CMD: OnceLock<String> = OnceLock::new();
    CMD.get_or_init(|| cmdline(std::process::id()).unwrap_or_default())
        .clone()
}

/// The command line of `pid` (arguments joined by spaces, at most 1 KiB), or `None` if
/// unreadable. Kernel threads and zombies have an empty command line; their name is used instead.
pub(crate) fn cmdline(pid: u32) -> Option<String> {
    let raw = read_bounded(&format!("/proc/{pid}/cmdline"), 1024)?;
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if parts.is_empty() {
        let comm = read_bounded(&format!("/proc/{pid}/comm"), 64)?;
        return Some(format!("[{}]", String::from_utf8_lossy(&comm).trim_end()));
    }
    Some(parts.join(" "))
}

/// What another process is doing, in words, for reports: its effective uid (`None` if
/// unreadable), its state and its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcInfo {
    pub uid: Option<u32>,
    pub state: String,
    pub cmd: String,
}

/// Describes process `pid` (see [`ProcInfo`]); `None` if it is gone. A process whose cgroup is
/// frozen (cgroup v2 `cgroup.freeze`, or the v1 freezer) is reported as frozen whatever its
/// scheduler state says.
pub(crate) fn info(pid: u32) -> Option<ProcInfo> {
    let stat = read_bounded(&format!("/proc/{pid}/stat"), 4096)?;
    let stat = String::from_utf8_lossy(&stat);
    let letter = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next())?;
    let mut state = match letter {
        'R' => "running",
        'S' => "sleeping",
        'D' => "in uninterruptible sleep",
        'T' => "stopped",
        't' => "stopped by a debugger",
        'Z' => "a zombie",
        'X' => "dead",
        'I' => "idle",
        _ => "in an unknown state",
    }
    .to_string();
    if is_frozen(pid) {
        state = "frozen by its cgroup".into();
    }
    let uid = read_bounded(&format!("/proc/{pid}/status"), 8192).and_then(|b| {
        String::from_utf8_lossy(&b).lines().find_map(|l| {
            l.strip_prefix("Uid:")?
                .split_ascii_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
    });
    Some(ProcInfo {
        uid,
        state,
        cmd: cmdline(pid).unwrap_or_default(),
    })
}

/// Whether process `pid` cannot run: stopped (`SIGSTOP`, Ctrl-Z, a debugger) or frozen by its
/// cgroup.
pub(crate) fn is_suspended(pid: u32) -> bool {
    let Some(stat) = read_bounded(&format!("/proc/{pid}/stat"), 4096) else {
        return false;
    };
    let stat = String::from_utf8_lossy(&stat);
    let letter = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    matches!(letter, Some('T' | 't')) || is_frozen(pid)
}

/// Whether the cgroup of `pid` is frozen (cgroup v2 `cgroup.events`, or the v1 freezer).
fn is_frozen(pid: u32) -> bool {
    let Some(raw) = read_bounded(&format!("/proc/{pid}/cgroup"), 8192) else {
        return false;
    };
    let text = String::from_utf8_lossy(&raw);
    let safe = |p: &str| !p.split('/').any(|c| c == "..");
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if !safe(path) {
            continue;
        }
        let frozen = if ctrl.is_empty() {
            // The unified hierarchy: at /sys/fs/cgroup, or beside the v1 ones (hybrid systems).
            ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
                .iter()
                .any(|root| {
                    read_bounded(&format!("{root}{path}/cgroup.events"), 4096).is_some_and(|b| {
                        String::from_utf8_lossy(&b).lines().any(|l| l == "frozen 1")
                    })
                })
        } else if ctrl.split(',').any(|c| c == "freezer") {
            read_bounded(&format!("/sys/fs/cgroup/freezer{path}/freezer.state"), 64)
                .is_some_and(|b| String::from_utf8_lossy(&b).trim() == "FROZEN")
        } else {
            false
        };
        if frozen {
            return true;
        }
    }
    false
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or `"unknown"`. Records carry it: a
/// record from another boot (or, on a shared file system, another machine) is never trusted.
pub(crate) fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        read_bounded("/proc/sys/kernel/random/boot_id", 64)
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .filter(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-'))
            .unwrap_or_else(|| "unknown".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_weird_comm() {
        let line = "1234 (a) b (c)) S 77 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let s = parse_stat(line).expect("parse");
        assert_eq!(s.pid, 1234);
        assert_eq!(s.ppid, 77);
        assert_eq!(s.start, 987654);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_stat("").is_none());
        assert!(parse_stat("12 (x) S").is_none());
        assert!(parse_stat("x (y) S 1 2").is_none());
        assert!(ProcId::parse("12").is_none());
        assert!(ProcId::parse("a:1").is_none());
        assert_eq!(
            ProcId::parse(" 12:34 "),
            Some(ProcId { pid: 12, start: 34 })
        );
    }

    #[test]
    fn self_is_alive_and_first_in_ancestry() {
        let me = self_id().expect("self");
        assert_eq!(me.pid, std::process::id());
        assert!(ancestry_of(ProcId {
            pid: me.pid,
            start: me.start + 1
        })
        .is_empty());
        let chain = ancestry_of_self();
        assert_eq!(chain.first().copied(), Some(me));
        assert!(chain.len() >= 2, "{chain:?}");
        assert_eq!(ancestry_of(me), chain);
        assert!(cmdline(me.pid).is_some());
        assert_eq!(
            environ_has(me.pid, "GPUKIT_NO_SUCH_VARIABLE_X"),
            Some(false)
        );
        assert_ne!(boot_id(), "unknown");
    }
}
