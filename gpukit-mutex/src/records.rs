//! On-disk records: claims (who holds what) and tickets (who waits), and their file names. A
//! small line-based text format (`key value` per line) that `cat` can read. Parsing is strict
//! and bounded: the caller reads at most [`crate::lockdir::MAX_RECORD_BYTES`], and a record
//! with a missing or malformed field, an impossible request or a device index out of range is
//! rejected as a whole.
//!
//! **Names cannot be predicted or borrowed.** A claim is `gpukit-claim.<r>` and a ticket
//! `gpukit-ticket.<seq>.<r>`, where `<r>` is 128 bits from the kernel's random source
//! (`getrandom(2)`) in hex: nobody can plant files under the names a process will use next
//! (such files once made its creation give up). And every record names its own file: a record
//! read under another name (a hard link another user made to somebody's live ticket, which the
//! kernel allows where `protected_hardlinks` is 0) does not verify, so a link can neither put
//! a waiter in the queue twice nor borrow its place.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::MAX_DEVICE_INDEX;
use crate::lockdir::{CLAIM_PREFIX, TICKET_PREFIX};
use crate::proc::ProcId;

const CLAIM_MAGIC: &str = "gpukit-mutex claim v3";
const TICKET_MAGIC: &str = "gpukit-mutex ticket v3";

/// How a process came to hold its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimKind {
    /// Granted through the queue.
    Primary,
    /// Joined the claim of an ancestor or of a sibling rank.
    Shared,
}

/// The job a rank belongs to (see `anchors.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobTag {
    /// The launcher: the nearest ancestor that is not itself part of the job.
    pub root: ProcId,
    /// Which launcher scheme and job, e.g. `torch:<run id>` or `explicit`.
    pub key: String,
    /// The rank's local rank, when the launcher numbers them.
    pub local_rank: Option<u32>,
}

/// A claim record: one per process that holds (or shares) devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimRecord {
    /// The file name the record was written under.
    pub name: String,
    pub boot: String,
    pub proc_id: ProcId,
    /// The writer's effective uid (must equal the file's owner).
    pub uid: u32,
    pub kind: ClaimKind,
    /// Device keys (see `devices.rs`).
    pub devices: Vec<String>,
    pub job: Option<JobTag>,
    pub since: SystemTime,
    pub cmd: String,
}

/// A ticket record: one per waiting process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TicketRecord {
    /// The file name the record was written under.
    pub name: String,
    pub boot: String,
    pub proc_id: ProcId,
    pub uid: u32,
    pub n: usize,
    /// Device keys.
    pub candidates: Vec<String>,
    pub backfill: bool,
    pub since: SystemTime,
    pub cmd: String,
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn from_nanos(n: u128) -> Option<SystemTime> {
    let secs = u64::try_from(n / 1_000_000_000).ok()?;
    let sub = (n % 1_000_000_000) as u32;
    UNIX_EPOCH.checked_add(Duration::new(secs, sub))
}

fn devs(d: &[String]) -> String {
    d.join(",")
}

/// A device key: a physical index up to [`MAX_DEVICE_INDEX`] or a `GPU-`/`MIG-` UUID.
pub(crate) fn is_device_key(k: &str) -> bool {
    if k.bytes().all(|b| b.is_ascii_digit()) {
        return !k.is_empty()
            && k.len() <= 10
            && k.parse::<u32>().is_ok_and(|i| i <= MAX_DEVICE_INDEX);
    }
    crate::devices::is_uuid_name(k) && k.len() > 4
}

/// A device list: distinct keys (possibly empty).
fn parse_devs(s: &str) -> Option<Vec<String>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    let mut out: Vec<String> = Vec::new();
    for x in s.split(',') {
        if !is_device_key(x) || out.iter().any(|o| o == x) {
            return None;
        }
        out.push(x.to_string());
    }
    Some(out)
}

/// Keeps a free-text field on one line and short.
fn one_line(s: &str) -> String {
    let mut t: String = s.replace(['\n', '\r'], " ");
    if t.len() > 1024 {
        let mut cut = 1024;
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        t.truncate(cut);
    }
    t
}

/// A field value without spaces (boot id, job key): anything else is rejected when written.
fn token_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| b.is_ascii_graphic())
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
            .map(|l| l.split_once(' ').unwrap_or((l, "")))
            .collect::<Vec<_>>();
        Some(Fields { lines })
    }

    /// The value of `key`; a key given twice makes the record invalid.
    fn get(&self, key: &str) -> Option<&'a str> {
        let mut it = self.lines.iter().filter(|(k, _)| *k == key);
        let v = it.next()?.1;
        it.next().is_none().then_some(v)
    }

    fn proc_id(&self) -> Option<ProcId> {
        Some(ProcId {
            pid: self.get("pid")?.parse().ok()?,
            start: self.get("start")?.parse().ok()?,
        })
    }
}

impl ClaimRecord {
    /// Serializes the record.
    pub fn to_text(&self) -> String {
        let (root, key, rank) = match &self.job {
            Some(j) if token_ok(&j.key) => (
                j.root.to_text(),
                j.key.clone(),
                j.local_rank
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
            _ => ("-".into(), "-".into(), "-".into()),
        };
        format!(
            "{CLAIM_MAGIC}\nname {}\nboot {}\npid {}\nstart {}\nuid {}\nkind {}\ndevices {}\njob_root {root}\njob {key}\nlocal_rank {rank}\nsince_ns {}\ncmd {}\n",
            self.name,
            self.boot,
            self.proc_id.pid,
            self.proc_id.start,
            self.uid,
            match self.kind {
                ClaimKind::Primary => "primary",
                ClaimKind::Shared => "shared",
            },
            devs(&self.devices),
            nanos(self.since),
            one_line(&self.cmd),
        )
    }

    /// Parses a record; `None` if it is incomplete or malformed.
    pub fn parse(text: &str) -> Option<Self> {
        let f = Fields::parse(text, CLAIM_MAGIC)?;
        let job = match (f.get("job_root")?, f.get("job")?, f.get("local_rank")?) {
            ("-", "-", "-") => None,
            (root, key, rank) if token_ok(key) && key != "-" => Some(JobTag {
                root: ProcId::parse(root)?,
                key: key.to_string(),
                local_rank: match rank {
                    "-" => None,
                    r => Some(r.parse().ok()?),
                },
            }),
            _ => return None,
        };
        let boot = f.get("boot")?;
        let name = f.get("name")?;
        Some(ClaimRecord {
            name: is_claim_name(name).then(|| name.to_string())?,
            boot: token_ok(boot).then(|| boot.to_string())?,
            proc_id: f.proc_id()?,
            uid: f.get("uid")?.parse().ok()?,
            kind: match f.get("kind")? {
                "primary" => ClaimKind::Primary,
                "shared" => ClaimKind::Shared,
                _ => return None,
            },
            devices: parse_devs(f.get("devices")?)?,
            job,
            since: from_nanos(f.get("since_ns")?.parse().ok()?)?,
            cmd: f.get("cmd").unwrap_or("").to_string(),
        })
    }
}

impl TicketRecord {
    /// Serializes the record.
    pub fn to_text(&self) -> String {
        format!(
            "{TICKET_MAGIC}\nname {}\nboot {}\npid {}\nstart {}\nuid {}\nn {}\ncandidates {}\nbackfill {}\nsince_ns {}\ncmd {}\n",
            self.name,
            self.boot,
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

    /// Parses a record; `None` if it is incomplete, malformed or asks for the impossible
    /// (no devices, or more than its candidates).
    pub fn parse(text: &str) -> Option<Self> {
        let f = Fields::parse(text, TICKET_MAGIC)?;
        let boot = f.get("boot")?;
        let name = f.get("name")?;
        parse_ticket_name(name)?;
        let n: usize = f.get("n")?.parse().ok()?;
        let candidates = parse_devs(f.get("candidates")?)?;
        if n == 0 || n > candidates.len() {
            return None;
        }
        Some(TicketRecord {
            name: name.to_string(),
            boot: token_ok(boot).then(|| boot.to_string())?,
            proc_id: f.proc_id()?,
            uid: f.get("uid")?.parse().ok()?,
            n,
            candidates,
            backfill: match f.get("backfill")? {
                "1" => true,
                "0" => false,
                _ => return None,
            },
            since: from_nanos(f.get("since_ns")?.parse().ok()?)?,
            cmd: f.get("cmd").unwrap_or("").to_string(),
        })
    }
}

/// Length of the random part of a file name (hex digits of 128 bits).
const RANDOM_HEX: usize = gpukit_trust::RANDOM_HEX_LEN;

fn is_random_part(s: &str) -> bool {
    s.len() == RANDOM_HEX && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A fresh random name part: 128 bits from `getrandom(2)`, in hex.
pub(crate) fn random_part() -> std::io::Result<String> {
    gpukit_trust::random_hex()
}

/// Parses a ticket file name `gpukit-ticket.<seq>.<random>` (`<seq>` zero-padded to 20 digits)
/// into its sequence number.
pub(crate) fn parse_ticket_name(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(TICKET_PREFIX)?;
    let (seq, random) = rest.split_once('.')?;
    if seq.len() != 20 || !seq.bytes().all(|b| b.is_ascii_digit()) || !is_random_part(random) {
        return None;
    }
    seq.parse().ok()
}

/// The file name of a ticket.
pub(crate) fn ticket_name(seq: u64, random: &str) -> String {
    format!("{TICKET_PREFIX}{seq:020}.{random}")
}

/// Whether `name` has the form of a claim file name (`gpukit-claim.<random>`).
pub(crate) fn is_claim_name(name: &str) -> bool {
    name.strip_prefix(CLAIM_PREFIX).is_some_and(is_random_part)
}

/// The file name of a claim.
pub(crate) fn claim_name(random: &str) -> String {
    format!("{CLAIM_PREFIX}{random}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u128) -> SystemTime {
        from_nanos(n).expect("time")
    }

    #[test]
    fn roundtrip() {
        let r = random_part().expect("random");
        assert!(is_random_part(&r));
        assert_ne!(r, random_part().expect("random"));
        let c = ClaimRecord {
            name: claim_name(&r),
            boot: "0f1e-2d".into(),
            proc_id: ProcId { pid: 5, start: 9 },
            uid: 1000,
            kind: ClaimKind::Shared,
            devices: vec!["2".into(), "GPU-12ab".into()],
            job: Some(JobTag {
                root: ProcId { pid: 3, start: 4 },
                key: "torch:abc".into(),
                local_rank: Some(1),
            }),
            since: t(1_700_000_000_123_456_789),
            cmd: "python -c\nx".into(),
        };
        let back = ClaimRecord::parse(&c.to_text()).expect("parse");
        assert_eq!(back.cmd, "python -c x");
        assert_eq!(
            ClaimRecord {
                cmd: c.cmd.clone(),
                ..back
            },
            c
        );
        let tk = TicketRecord {
            name: ticket_name(42, &r),
            boot: "b".into(),
            proc_id: ProcId { pid: 5, start: 9 },
            uid: 0,
            n: 2,
            candidates: vec!["0".into(), "1".into(), "MIG-9f".into()],
            backfill: true,
            since: t(7),
            cmd: String::new(),
        };
        assert_eq!(TicketRecord::parse(&tk.to_text()), Some(tk.clone()));
        assert_eq!(parse_ticket_name(&ticket_name(42, &r)), Some(42));
        assert_eq!(
            parse_ticket_name(&ticket_name(u64::MAX, &r)),
            Some(u64::MAX)
        );
        assert!(is_claim_name(&claim_name(&r)));
    }

    #[test]
    fn rejects_malformed_and_impossible_records() {
        assert!(ClaimRecord::parse("garbage").is_none());
        assert!(TicketRecord::parse("gpukit-mutex ticket v2\npid 1\n").is_none());
        let tk = TicketRecord {
            name: ticket_name(3, &"a".repeat(32)),
            boot: "b".into(),
            proc_id: ProcId { pid: 5, start: 9 },
            uid: 0,
            n: 1,
            candidates: vec!["0".into()],
            backfill: false,
            since: t(7),
            cmd: String::new(),
        };
        let good = tk.to_text();
        for (from, to) in [
            ("n 1", "n 0"),
            ("n 1", "n 2"),
            ("candidates 0", "candidates 0,0"),
            ("candidates 0", "candidates 99999"),
            ("candidates 0", "candidates GPU-"),
            ("candidates 0", "candidates gpu-1"),
            ("backfill 0", "backfill x"),
            ("boot b", "boot"),
            ("since_ns 7", "since_ns 999999999999999999999999999999"),
            ("name gpukit-ticket.", "name gpukit-claim."),
            (".aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ".1"),
        ] {
            let bad = good.replace(from, to);
            assert!(TicketRecord::parse(&bad).is_none(), "{bad}");
        }
        let dup = format!("{good}pid 6\n");
        assert!(TicketRecord::parse(&dup).is_none(), "duplicate key");
        // A record without its own name, or from a previous protocol, is not current.
        let no_name = good
            .lines()
            .filter(|l| !l.starts_with("name "))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(TicketRecord::parse(&no_name).is_none());
        assert!(ClaimRecord::parse("gpukit-mutex claim v1\npid 1\n").is_none());
        assert!(TicketRecord::parse(&good.replace(" v3", " v2")).is_none());
        let a32 = "a".repeat(32);
        for bad in [
            "gpukit-ticket.1".to_string(),
            format!("gpukit-ticket.1.{a32}"),
            format!("gpukit-ticket.0000000000000000000x.{a32}"),
            format!("gpukit-ticket.+0000000000000000001.{a32}"),
            "gpukit-ticket.00000000000000000001.1".to_string(),
            format!("gpukit-ticket.00000000000000000001.{}", "A".repeat(32)),
            // The previous protocol's names.
            "gpukit-ticket.00000000000000000001.4242".to_string(),
        ] {
            assert!(parse_ticket_name(&bad).is_none(), "{bad}");
        }
        for bad in [
            "gpukit-claim.1.2.3".to_string(),
            format!("gpukit-claim.{}", "a".repeat(31)),
            format!("gpukit-claim.{}", "g".repeat(32)),
            format!("gpukit-claim.{a32}.1"),
        ] {
            assert!(!is_claim_name(&bad), "{bad}");
        }
    }
}
