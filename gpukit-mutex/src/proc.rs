//! Process identity and ancestry from `/proc`.
//!
//! A process is identified by its pid *and* its start time (field 22 of `/proc/<pid>/stat`, in
//! clock ticks since boot), so a recycled pid is never mistaken for the original process.
//! Ancestry is the `ppid` chain read from `/proc`, which the kernel maintains and no process can
//! forge (unlike environment variables).

use std::fs;

/// A process identity that survives pid reuse: pid plus start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcId {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub start: u64,
}

/// The fields of `/proc/<pid>/stat` this crate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id.
    pub pid: u32,
    /// One-letter state (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Parent process id (0 for the root of a pid namespace).
    pub ppid: u32,
    /// Start time in clock ticks after boot.
    pub start: u64,
}

impl ProcStat {
    /// The identity of this process.
    pub fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start: self.start,
        }
    }
}

/// Parses the contents of `/proc/<pid>/stat`. The command name (field 2) may contain spaces
/// and parentheses, so parsing starts after the *last* `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let pid: u32 = text[..open].trim().parse().ok()?;
    let close = text.rfind(')')?;
    let rest = text.get(close + 1..)?;
    let mut fields = rest.split_ascii_whitespace();
    // Fields after the command: 3 state, 4 ppid, ..., 22 starttime.
    let state = fields.next()?.chars().next()?;
    let ppid: u32 = fields.next()?.parse().ok()?;
    // We consumed fields 3 and 4; field 22 is 18 further on.
    let start: u64 = fields.nth(17)?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        start,
    })
}

/// Reads `/proc/<pid>/stat`; `None` if the process does not exist (or cannot be read).
pub fn stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The identity of the calling process.
pub fn self_id() -> Option<ProcId> {
    let text = fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&text).map(|s| s.id())
}

/// [`self_id`], read from `/proc` once per process (the cache is keyed by pid, so a `fork`ed
/// child reads its own).
pub fn self_id_cached() -> Option<ProcId> {
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
    let id = self_id()?;
    // Every thread of this process stores the same value; `PID` is published last.
    START.store(id.start, Ordering::Relaxed);
    PID.store(id.pid, Ordering::Release);
    Some(id)
}

/// True if the process `id` is alive (exists with the same start time and is not a zombie).
pub fn is_alive(id: ProcId) -> bool {
    match stat(id.pid) {
        Some(s) => s.start == id.start && s.state != 'Z' && s.state != 'X',
        None => false,
    }
}

/// The caller's ancestry: itself first, then its parent, grandparent, ... up to the root of
/// its pid namespace. Stops early if a `/proc` entry vanishes mid-walk (an ancestor exited).
pub fn ancestry_of_self() -> Vec<ProcId> {
    let mut out = Vec::new();
    let Ok(text) = fs::read_to_string("/proc/self/stat") else {
        return out;
    };
    let Some(mut cur) = parse_stat(&text) else {
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

/// The calling process's command line, read once.
pub fn self_cmdline() -> String {
    static CMD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CMD.get_or_init(|| cmdline(std::process::id()).unwrap_or_default())
        .clone()
}

/// The command line of `pid` (arguments joined by spaces), or `None` if unreadable. Kernel
/// threads and zombies have an empty command line; their name from `stat` is used instead.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if parts.is_empty() {
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        return Some(format!("[{}]", comm.trim_end()));
    }
    Some(parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_weird_comm() {
        let line = "1234 (a) b (c)) S 77 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        let s = parse_stat(line).expect("parse");
        assert_eq!(s.pid, 1234);
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 77);
        assert_eq!(s.start, 987654);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_stat("").is_none());
        assert!(parse_stat("12 (x) S").is_none());
        assert!(parse_stat("x (y) S 1 2").is_none());
    }

    #[test]
    fn self_is_alive_and_first_in_ancestry() {
        let me = self_id().expect("self");
        assert_eq!(me.pid, std::process::id());
        assert!(is_alive(me));
        assert!(!is_alive(ProcId {
            pid: me.pid,
            start: me.start + 1
        }));
        let chain = ancestry_of_self();
        assert_eq!(chain.first().copied(), Some(me));
        assert!(chain.len() >= 2, "{chain:?}");
        assert!(cmdline(me.pid).is_some());
    }
}
