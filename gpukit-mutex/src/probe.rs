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
//! This process's own records are never opened (closing a descriptor would drop their locks);
//! their identities are looked up in the registry instead. Descriptors of other records are
//! kept between passes (keyed by name *and* identity, so a reused name is a new file), which
//! keeps passes cheap and free of inotify events; dead records of the caller's own uid are
//! removed when the caller holds the join lock.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use crate::error::Result;
use crate::liveness::{self, LockState, OwnRecord, Owner};
use crate::lockdir::{self, FileId, LockDir, Meta};
use crate::proc;
use crate::queue::{ObservedClaim, ObservedTicket, Request, TicketState};
use crate::records::{self, ClaimRecord, TicketRecord};

/// Most descriptors a prober keeps open between passes.
const CACHE_LIMIT: usize = 1024;

/// One claim file as seen by a pass.
#[derive(Debug, Clone)]
pub(crate) struct SeenClaim {
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

    /// Owner, boot and lock agree with what the record says (see the module docs).
    pub fn verified(&self) -> bool {
        if self.own {
            return true;
        }
        self.record.as_deref().is_some_and(|r| {
            r.uid == self.owner_uid
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
    pub fn state(&self) -> TicketState {
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
        if lock_agrees && r.uid == self.owner_uid && r.boot == proc::boot_id() {
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
    /// In file-name order (`<seq>` is zero-padded, so this is queue order).
    pub tickets: Vec<SeenTicket>,
    /// Names of the right form that are not regular files, could not be opened, or vanished.
    pub unusable: usize,
}

impl Probe {
    /// The claims in the form the queue policy takes.
    pub fn observed_claims(&self) -> Vec<ObservedClaim> {
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
    pub fn observed_tickets(&self) -> Vec<ObservedTicket> {
        self.tickets
            .iter()
            .map(|t| ObservedTicket {
                seq: t.seq,
                name: t.name.clone(),
                state: t.state(),
            })
            .collect()
    }

    /// The next free ticket sequence number (after every ticket that waits or might).
    pub fn next_seq(&self) -> u64 {
        self.tickets
            .iter()
            .filter(|t| !matches!(t.state(), TicketState::Gone))
            .map(|t| t.seq.saturating_add(1))
            .max()
            .unwrap_or(0)
    }
}

struct Cached {
    id: FileId,
    meta: Meta,
    file: File,
    text: Option<String>,
}

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
    /// One pass. `clean`: remove dead records of this process's effective uid (only under the
    /// join lock). `keep_going` is asked periodically and ends the pass early with its error
    /// (deadline, cancellation).
    pub fn probe(
        &mut self,
        dir: &LockDir,
        clean: bool,
        mut keep_going: impl FnMut() -> Result<()>,
    ) -> Result<Probe> {
        let mut names = dir.list(&mut keep_going)?;
        names.sort();
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        self.cache.retain(|k, _| names.binary_search(k).is_ok());
        let mut out = Probe::default();
        for (i, name) in names.iter().enumerate() {
            if i % 256 == 255 {
                keep_going()?;
            }
            let kind = if records::is_claim_name(name) {
                Kind::Claim
            } else if let Some(seq) = records::parse_ticket_name(name) {
                Kind::Ticket(seq)
            } else {
                continue;
            };
            let Ok(meta) = dir.stat(name) else {
                out.unusable += 1;
                continue;
            };
            if let Some(own) = liveness::own_get(meta.id) {
                self.cache.remove(name);
                match (own, &kind) {
                    (OwnRecord::Claim(r), Kind::Claim) => out.claims.push(SeenClaim {
                        owner_uid: meta.uid,
                        locks: LockState {
                            owner: Owner::Pid(std::process::id()),
                            tree: true,
                        },
                        record: Some(r),
                        own: true,
                    }),
                    (OwnRecord::Ticket(r), Kind::Ticket(seq)) => out.tickets.push(SeenTicket {
                        name: name.clone(),
                        seq: *seq,
                        owner_uid: meta.uid,
                        locks: LockState {
                            owner: Owner::Pid(std::process::id()),
                            tree: false,
                        },
                        record: Some(r),
                        own: true,
                    }),
                    _ => out.unusable += 1,
                }
                continue;
            }
            if !meta.is_regular() {
                self.cache.remove(name);
                out.unusable += 1;
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
                    _ => {
                        self.cache.remove(name);
                        out.unusable += 1;
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
                out.unusable += 1;
                continue;
            };
            let owner_uid = c.meta.uid;
            let (id, text) = (c.id, c.text.clone());
            match kind {
                Kind::Claim => {
                    let record = text.as_deref().and_then(ClaimRecord::parse).map(Arc::new);
                    let seen = SeenClaim {
                        owner_uid,
                        locks,
                        record,
                        own: false,
                    };
                    if clean && !seen.live() && owner_uid == euid {
                        // A crashed holder's record: nothing keeps it, and it is ours to remove.
                        dir.unlink_if(name, id);
                        self.cache.remove(name);
                        continue;
                    }
                    out.claims.push(seen);
                }
                Kind::Ticket(seq) => {
                    let record = text.as_deref().and_then(TicketRecord::parse).map(Arc::new);
                    let seen = SeenTicket {
                        name: name.clone(),
                        seq,
                        owner_uid,
                        locks,
                        record,
                        own: false,
                    };
                    if clean && !seen.locks.live() && owner_uid == euid {
                        dir.unlink_if(name, id);
                        self.cache.remove(name);
                        continue;
                    }
                    out.tickets.push(seen);
                }
            }
        }
        out.tickets
            .sort_by(|a, b| (a.seq, &a.name).cmp(&(b.seq, &b.name)));
        Ok(out)
    }
}

enum CachedRef<'a> {
    Kept(&'a String),
    Once(Cached),
}
