//! The device probe: one pass over the lock directory that says which claims are live (so
//! which devices are busy), which tickets wait, and how far each record can be trusted. It is
//! the crate's only reader of records: sessions use it under the join lock, status reports
//! without it.
//!
//! For every name of the right form it opens the file safely (see `lockdir.rs`), tests its
//! locks without touching them (see `liveness.rs`), and parses at most a few KiB. What it
//! concludes:
//!
//! * a **claim** is *live* when a write lock keeps it (the owner lock or the tree lock); every
//!   device a live claim names is busy, whoever wrote it (a record can only make devices look
//!   busier, never free one). It is *verified* when the file's owner is the uid the record
//!   names, the record is from this boot, and the kernel names the record's pid as the holder
//!   of its owner lock: only verified claims are ever shared.
//! * a **ticket** is *waiting* when it is live and likewise verified (its holder may also be in
//!   a pid namespace this process cannot see); a dead ticket is skipped, and one whose owner or
//!   lock disagrees with it is ignored. Tickets only order the queue, so ignoring one can delay
//!   nobody's exclusion.
//!
//! A record is only taken for what it says under the name it names (see `records.rs`): under
//! any other name (a hard link) a claim is unverified and a ticket untrusted.
//!
//! This process's own records are never opened (closing a descriptor would drop their locks);
//! their identities are looked up in the registry instead (a link to one of them under another
//! name is ignored unopened). Descriptors of other records are kept between passes (keyed by
//! name *and* identity, so a reused name is a new file), which keeps passes cheap and free of
//! inotify events; dead records of the caller's own uid are removed when the caller holds the
//! join lock.
//!
//! **Floods.** Entries a pass under the join lock found dead or unusable (not regular files,
//! unreadable, or regular files no lock keeps) stay so: every record is created, locked and
//! made readable within one hold of the join lock, and nothing revives a dead one. They are
//! remembered per process by name and inode (which the directory listing gives without a
//! system call) and skipped from then on, so thousands of files another user plants under
//! record names cost a pass almost nothing after the first. Status reports count them by owner.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::liveness::{self, LockState, OwnRecord, Owner};
use crate::lockdir::{self, FileId, LockDir, Meta};
use crate::proc;
use crate::queue::{ObservedClaim, ObservedTicket, Request, TicketState};
use crate::records::{self, ClaimRecord, TicketRecord};

/// Most entries under record names a pass examines. Honest use needs one per waiting or
/// holding process; more means the directory was flooded, and a pass refuses it at once
/// ([`crate::Error::LockDirFlooded`]) rather than crawl through it under the join lock.
pub(crate) const MAX_RECORD_ENTRIES: usize = 65536;
/// How many of them are looked at to name their owners in that error.
const FLOOD_SAMPLE: usize = 256;

/// Most descriptors a prober keeps open between passes.
const CACHE_LIMIT: usize = 1024;
/// Most dead entries remembered per lock directory.
const DEAD_LIMIT: usize = 1 << 18;
/// Most lock directories whose dead entries are remembered.
const DEAD_DIRS: usize = 16;

/// One claim file as seen by a pass.
#[derive(Debug, Clone)]
pub(crate) struct SeenClaim {
    /// Its file name.
    pub name: String,
    /// The file's owner.
    pub owner_uid: u32,
    pub locks: LockState,
    /// `None` when the content is not a valid record (or too large to read).
    pub record: Option<Arc<ClaimRecord>>,
    /// This process holds it.
    pub own: bool,
}

impl SeenClaim {
    pub fn live(&self) -> bool {
        self.own || self.locks.live()
    }

    /// Name, owner, boot and lock agree with what the record says (see the module docs).
    pub fn verified(&self) -> bool {
        if self.own {
            return true;
        }
        self.record.as_deref().is_some_and(|r| {
            r.name == self.name
                && r.uid == self.owner_uid
                && r.boot == proc::boot_id()
                && self.locks.owner == Owner::Pid(r.proc_id.pid)
        })
    }
}

/// One ticket file as seen by a pass.
#[derive(Debug, Clone)]
pub(crate) struct SeenTicket {
    pub name: String,
    pub seq: u64,
    pub owner_uid: u32,
    pub locks: LockState,
    pub record: Option<Arc<TicketRecord>>,
    pub own: bool,
}

impl SeenTicket {
    pub fn state(&self) -> TicketState<String> {
        if !self.own && !self.locks.live() {
            return TicketState::Gone;
        }
        let Some(r) = &self.record else {
            return TicketState::Untrusted;
        };
        let lock_agrees = self.own
            || match self.locks.owner {
                Owner::Pid(p) => p == r.proc_id.pid,
                // A waiter in a pid namespace we cannot see: its pid cannot be checked, but
                // only its owner could have taken the write lock.
                Owner::Hidden => true,
                Owner::None | Owner::Ofd => false,
            };
        if lock_agrees
            && r.name == self.name
            && r.uid == self.owner_uid
            && r.boot == proc::boot_id()
        {
            TicketState::Waiting(Request {
                candidates: r.candidates.clone(),
                n: r.n,
                backfill: r.backfill,
            })
        } else {
            TicketState::Untrusted
        }
    }
}

/// The result of one pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probe {
    pub claims: Vec<SeenClaim>,
    /// In queue order (sequence number, then name).
    pub tickets: Vec<SeenTicket>,
    /// Names of the right form that are not regular files, could not be opened, vanished, are
    /// known dead (another user's), or are links to this process's own records.
    pub unusable: usize,
    /// How many of the unusable entries each uid owns (where the owner is known).
    pub unusable_by: BTreeMap<u32, usize>,
}

impl Probe {
    /// The claims in the form the queue policy takes.
    pub fn observed_claims(&self) -> Vec<ObservedClaim<String>> {
        self.claims
            .iter()
            .map(|c| ObservedClaim {
                live: c.live(),
                devices: c
                    .record
                    .as_ref()
                    .map(|r| r.devices.clone())
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// The tickets in the form the queue policy takes.
    pub fn observed_tickets(&self) -> Vec<ObservedTicket<String>> {
        self.tickets
            .iter()
            .map(|t| ObservedTicket {
                seq: t.seq,
                name: t.name.clone(),
                state: t.state(),
            })
            .collect()
    }

    /// Marks, in `observed` (from [`Probe::observed_tickets`]), the waiting tickets of other
    /// processes that are stopped or frozen as [`TicketState::Suspended`]; returns whether any
    /// was. Only worth its `/proc` reads when a waiter ahead could take free devices and has
    /// not.
    pub fn mark_suspended(&self, observed: &mut [ObservedTicket<String>]) -> bool {
        let mut any = false;
        for (t, o) in self.tickets.iter().zip(observed.iter_mut()) {
            if let (false, Owner::Pid(pid), TicketState::Waiting(_)) =
                (t.own, t.locks.owner, &o.state)
            {
                if proc::is_suspended(pid) {
                    o.state = TicketState::Suspended;
                    any = true;
                }
            }
        }
        any
    }

    /// The sequence number of a ticket created now (see `tickets.rs`).
    pub fn next_seq(&self, now: u64) -> u64 {
        crate::tickets::next_seq(
            now,
            self.tickets
                .iter()
                .filter(|t| !matches!(t.state(), TicketState::Gone))
                .map(|t| t.seq),
        )
    }

    fn unusable(&mut self, owner: Option<u32>) {
        self.unusable += 1;
        if let Some(uid) = owner {
            *self.unusable_by.entry(uid).or_default() += 1;
        }
    }
}

struct Cached {
    id: FileId,
    meta: Meta,
    file: File,
    text: Option<String>,
}

/// Dead or unusable entries of one lock directory: name -> (inode, owner uid, seen in pass).
#[derive(Default)]
struct DeadSet {
    by_name: HashMap<String, (u64, u32, u64)>,
    passes: u64,
}

/// Per process (see the module docs). Only ever `try_lock`ed: a process forked while another
/// thread held it just does without.
static DEAD: Mutex<Vec<(FileId, DeadSet)>> = Mutex::new(Vec::new());

/// Reads the directory, keeping descriptors between passes.
#[derive(Default)]
pub(crate) struct Prober {
    cache: HashMap<String, Cached>,
}

enum Kind {
    Claim,
    Ticket(u64),
}

impl Prober {
    /// One pass. `clean`: the caller holds the join lock; remove dead records of this process's
    /// effective uid and remember dead entries of others. `keep_going` is asked periodically
    /// and ends the pass early with its error (deadline, cancellation).
    pub fn probe(
        &mut self,
        dir: &LockDir,
        clean: bool,
        mut keep_going: impl FnMut() -> Result<()>,
    ) -> Result<Probe> {
        let mut names = dir.list(&mut keep_going)?;
        names.sort_unstable();
        let records = names
            .iter()
            .filter(|(n, _)| records::is_claim_name(n) || records::parse_ticket_name(n).is_some())
            .count();
        if records > MAX_RECORD_ENTRIES {
            return Err(flooded(dir, &names, records));
        }
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        self.cache
            .retain(|k, _| names.binary_search_by(|(n, _)| n.as_str().cmp(k)).is_ok());
        let mut dead_guard = DEAD.try_lock().ok();
        let dead: Option<&mut DeadSet> = dead_guard.as_mut().map(|v| {
            let at = match v.iter().position(|(id, _)| *id == dir.id()) {
                Some(i) => i,
                None => {
                    if v.len() >= DEAD_DIRS {
                        v.clear();
                    }
                    v.push((dir.id(), DeadSet::default()));
                    v.len() - 1
                }
            };
            &mut v[at].1
        });
        let mut dead = dead;
        let pass = dead.as_mut().map_or(0, |d| {
            d.passes += 1;
            d.passes
        });
        let mut out = Probe::default();
        for (i, (name, ino)) in names.iter().enumerate() {
            if i % 256 == 255 {
                keep_going()?;
            }
            if let Some(d) = dead.as_mut() {
                if let Some(e) = d.by_name.get_mut(name) {
                    if e.0 == *ino {
                        e.2 = pass;
                        out.unusable(Some(e.1));
                        continue;
                    }
                }
            }
            let kind = if records::is_claim_name(name) {
                Kind::Claim
            } else if let Some(seq) = records::parse_ticket_name(name) {
                Kind::Ticket(seq)
            } else {
                continue;
            };
            // Remembers a dead or unusable entry (only from a pass under the join lock).
            let mut remember = |owner: u32, ino: u64| {
                if let Some(d) = dead.as_mut() {
                    if clean && d.by_name.len() < DEAD_LIMIT {
                        d.by_name.insert(name.clone(), (ino, owner, pass));
                    }
                }
            };
            let Ok(meta) = dir.stat(name) else {
                out.unusable(None);
                continue;
            };
            if let Some((own, same_name)) = liveness::own_get(meta.id, name) {
                self.cache.remove(name);
                match (own, &kind, same_name) {
                    (OwnRecord::Claim(r), Kind::Claim, true) => out.claims.push(SeenClaim {
                        name: name.clone(),
                        owner_uid: meta.uid,
                        locks: LockState {
                            owner: Owner::Pid(std::process::id()),
                            tree: true,
                        },
                        record: Some(r),
                        own: true,
                    }),
                    (OwnRecord::Ticket(r), Kind::Ticket(seq), true) => {
                        out.tickets.push(SeenTicket {
                            name: name.clone(),
                            seq: *seq,
                            owner_uid: meta.uid,
                            locks: LockState {
                                owner: Owner::Pid(std::process::id()),
                                tree: false,
                            },
                            record: Some(r),
                            own: true,
                        })
                    }
                    // Another name for one of ours (a hard link), or the wrong kind: ignored,
                    // and never opened (closing it would drop our locks).
                    _ => out.unusable(Some(meta.uid)),
                }
                continue;
            }
            if !meta.is_regular() {
                self.cache.remove(name);
                remember(meta.uid, meta.id.ino);
                out.unusable(Some(meta.uid));
                continue;
            }
            let fresh = match self.cache.get(name) {
                Some(c) if c.id == meta.id => None,
                _ => match liveness::open_foreign(dir, name) {
                    Ok(Some((file, m))) => {
                        let text = lockdir::read_record(&file, &m);
                        Some(Cached {
                            id: m.id,
                            meta: m,
                            file,
                            text,
                        })
                    }
                    Err(e) => {
                        self.cache.remove(name);
                        if e.raw_os_error() == Some(libc::EACCES) {
                            remember(meta.uid, meta.id.ino);
                        }
                        out.unusable(Some(meta.uid));
                        continue;
                    }
                    Ok(None) => {
                        self.cache.remove(name);
                        out.unusable(Some(meta.uid));
                        continue;
                    }
                },
            };
            let entry = match fresh {
                Some(c) => {
                    if self.cache.len() < CACHE_LIMIT || self.cache.contains_key(name) {
                        self.cache.insert(name.clone(), c);
                        CachedRef::Kept(name)
                    } else {
                        CachedRef::Once(c)
                    }
                }
                None => CachedRef::Kept(name),
            };
            let c: &Cached = match &entry {
                CachedRef::Kept(n) => match self.cache.get(*n) {
                    Some(c) => c,
                    None => continue,
                },
                CachedRef::Once(c) => c,
            };
            let Ok(locks) = liveness::probe(&c.file) else {
                out.unusable(Some(c.meta.uid));
                continue;
            };
            let owner_uid = c.meta.uid;
            let (id, text) = (c.id, c.text.clone());
            if !locks.live() {
                // Nothing keeps it: ours to remove, or another user's to skip from now on.
                self.cache.remove(name);
                if clean && owner_uid == euid {
                    dir.unlink_if(name, id);
                } else {
                    remember(owner_uid, id.ino);
                    out.unusable(Some(owner_uid));
                }
                continue;
            }
            match kind {
                Kind::Claim => out.claims.push(SeenClaim {
                    name: name.clone(),
                    owner_uid,
                    locks,
                    record: text.as_deref().and_then(ClaimRecord::parse).map(Arc::new),
                    own: false,
                }),
                Kind::Ticket(seq) => out.tickets.push(SeenTicket {
                    name: name.clone(),
                    seq,
                    owner_uid,
                    locks,
                    record: text.as_deref().and_then(TicketRecord::parse).map(Arc::new),
                    own: false,
                }),
            }
        }
        if let Some(d) = dead.as_mut() {
            // Forget entries that are gone (a name can come back as a new file).
            d.by_name.retain(|_, e| e.2 == pass);
        }
        out.tickets
            .sort_by(|a, b| (a.seq, &a.name).cmp(&(b.seq, &b.name)));
        Ok(out)
    }
}

/// The error for a flooded directory, with the owners of a sample of its record entries.
fn flooded(dir: &LockDir, names: &[(String, u64)], entries: usize) -> Error {
    let step = (entries / FLOOD_SAMPLE).max(1);
    let mut owners: BTreeMap<u32, usize> = BTreeMap::new();
    for (name, _) in names
        .iter()
        .filter(|(n, _)| records::is_claim_name(n) || records::parse_ticket_name(n).is_some())
        .step_by(step)
        .take(FLOOD_SAMPLE)
    {
        if let Ok(m) = dir.stat(name) {
            *owners.entry(m.uid).or_default() += 1;
        }
    }
    let mut owners: Vec<(u32, usize)> = owners.into_iter().collect();
    owners.sort_by_key(|(uid, n)| (std::cmp::Reverse(*n), *uid));
    Error::LockDirFlooded {
        path: dir.path().to_path_buf(),
        entries,
        limit: MAX_RECORD_ENTRIES,
        owners,
    }
}

enum CachedRef<'a> {
    Kept(&'a String),
    Once(Cached),
}
