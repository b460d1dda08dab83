//! On-disk records: claims (who holds what) and tickets (who waits). A small line-based text
//! format (`key value` per line) that `cat` can read.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::proc::ProcId;

const CLAIM_MAGIC: &str = "gpukit-mutex claim v1";
const TICKET_MAGIC: &str = "gpukit-mutex ticket v1";

/// How a process came to hold its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    /// Granted through the queue.
    Primary,
    /// Joined the claim of an ancestor (or of its job root).
    Shared,
}

/// A claim record: one per process that holds (or shares) devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// The participating process.
    pub proc_id: ProcId,
    /// Its real uid.
    pub uid: u32,
    /// Primary or shared.
    pub kind: ClaimKind,
    /// Devices held.
    pub devices: Vec<u32>,
    /// Job root whose whole subtree shares the claim, if any (see [`crate::ENV_JOB_ROOT`]).
    pub anchor: Option<ProcId>,
    /// When the claim was taken.
    pub since: SystemTime,
    /// The holder's command line.
    pub cmd: String,
}

/// A ticket record: one per waiting process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketRecord {
    /// The waiting process.
    pub proc_id: ProcId,
    /// Its real uid.
    pub uid: u32,
    /// Devices requested.
    pub n: usize,
    /// Candidate devices in preference order.
    pub candidates: Vec<u32>,
    /// Backfill allowed.
    pub backfill: bool,
    /// When it joined the queue.
    pub since: SystemTime,
    /// The waiter's command line.
    pub cmd: String,
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn from_nanos(n: u128) -> SystemTime {
    let secs = (n / 1_000_000_000) as u64;
    let sub = (n % 1_000_000_000) as u32;
    UNIX_EPOCH + Duration::new(secs, sub)
}

fn devs(d: &[u32]) -> String {
    d.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_devs(s: &str) -> Option<Vec<u32>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    s.split(',').map(|x| x.parse().ok()).collect()
}

fn parse_proc_id(s: &str) -> Option<ProcId> {
    let (p, st) = s.split_once(':')?;
    Some(ProcId {
        pid: p.parse().ok()?,
        start: st.parse().ok()?,
    })
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

struct Fields<'a> {
    lines: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(text: &'a str, magic: &str) -> Option<Self> {
        let mut it = text.lines();
        if it.next()? != magic {
            return None;
        }
        let lines = it
            .filter_map(|l| l.split_once(' ').or(Some((l, ""))))
            .collect();
        Some(Fields { lines })
    }
    fn get(&self, key: &str) -> Option<&'a str> {
        self.lines.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

impl ClaimRecord {
    /// Serializes the record.
    pub fn to_text(&self) -> String {
        format!(
            "{CLAIM_MAGIC}\npid {}\nstart {}\nuid {}\nkind {}\ndevices {}\nanchor {}\nsince_ns {}\ncmd {}\n",
            self.proc_id.pid,
            self.proc_id.start,
            self.uid,
            match self.kind {
                ClaimKind::Primary => "primary",
                ClaimKind::Shared => "shared",
            },
            devs(&self.devices),
            self.anchor
                .map(|a| format!("{}:{}", a.pid, a.start))
                .unwrap_or_else(|| "-".into()),
            nanos(self.since),
            one_line(&self.cmd),
        )
    }

    /// Parses a record; `None` if it is incomplete or malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let f = Fields::parse(text, CLAIM_MAGIC)?;
        Some(ClaimRecord {
            proc_id: ProcId {
                pid: f.get("pid")?.parse().ok()?,
                start: f.get("start")?.parse().ok()?,
            },
            uid: f.get("uid")?.parse().ok()?,
            kind: match f.get("kind")? {
                "primary" => ClaimKind::Primary,
                "shared" => ClaimKind::Shared,
                _ => return None,
            },
            devices: parse_devs(f.get("devices")?)?,
            anchor: match f.get("anchor")? {
                "-" => None,
                a => Some(parse_proc_id(a)?),
            },
            since: from_nanos(f.get("since_ns")?.parse().ok()?),
            cmd: f.get("cmd").unwrap_or("").to_string(),
        })
    }
}

impl TicketRecord {
    /// Serializes the record.
    pub fn to_text(&self) -> String {
        format!(
            "{TICKET_MAGIC}\npid {}\nstart {}\nuid {}\nn {}\ncandidates {}\nbackfill {}\nsince_ns {}\ncmd {}\n",
            self.proc_id.pid,
            self.proc_id.start,
            self.uid,
            self.n,
            devs(&self.candidates),
            u8::from(self.backfill),
            nanos(self.since),
            one_line(&self.cmd),
        )
    }

    /// Parses a record; `None` if it is incomplete or malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let f = Fields::parse(text, TICKET_MAGIC)?;
        Some(TicketRecord {
            proc_id: ProcId {
                pid: f.get("pid")?.parse().ok()?,
                start: f.get("start")?.parse().ok()?,
            },
            uid: f.get("uid")?.parse().ok()?,
            n: f.get("n")?.parse().ok()?,
            candidates: parse_devs(f.get("candidates")?)?,
            backfill: f.get("backfill")? == "1",
            since: from_nanos(f.get("since_ns")?.parse().ok()?),
            cmd: f.get("cmd").unwrap_or("").to_string(),
        })
    }
}

/// Parses a ticket file name `gpukit-ticket.<seq>.<pid>` into its sequence number.
pub fn parse_ticket_name(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(crate::lockdir::TICKET_PREFIX)?;
    let (seq, pid) = rest.split_once('.')?;
    pid.parse::<u32>().ok()?;
    seq.parse().ok()
}

/// The file name of a ticket.
pub fn ticket_name(seq: u64, pid: u32) -> String {
    format!("{}{seq:020}.{pid}", crate::lockdir::TICKET_PREFIX)
}

/// The file name of a claim.
pub fn claim_name(id: ProcId) -> String {
    format!("{}{}.{}", crate::lockdir::CLAIM_PREFIX, id.pid, id.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let c = ClaimRecord {
            proc_id: ProcId { pid: 5, start: 9 },
            uid: 1000,
            kind: ClaimKind::Shared,
            devices: vec![2, 0],
            anchor: Some(ProcId { pid: 3, start: 4 }),
            since: from_nanos(1_700_000_000_123_456_789),
            cmd: "python -c\nx".into(),
        };
        let back = ClaimRecord::parse(&c.to_text()).expect("parse");
        assert_eq!(back.cmd, "python -c x");
        assert_eq!(back.devices, c.devices);
        assert_eq!(back.anchor, c.anchor);
        assert_eq!(back.since, c.since);
        let t = TicketRecord {
            proc_id: ProcId { pid: 5, start: 9 },
            uid: 0,
            n: 2,
            candidates: vec![0, 1, 3],
            backfill: true,
            since: from_nanos(7),
            cmd: String::new(),
        };
        assert_eq!(TicketRecord::parse(&t.to_text()), Some(t));
        assert!(ClaimRecord::parse("garbage").is_none());
        assert!(TicketRecord::parse("gpukit-mutex ticket v1\npid 1\n").is_none());
        assert_eq!(parse_ticket_name(&ticket_name(42, 7)), Some(42));
    }
}
