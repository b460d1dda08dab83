//! Claims: who holds which devices, and which claims a process may share instead of queueing.
//!
//! A claim record `gpukit-claim.<random>` is written under the join lock by the
//! process that was granted devices (a *primary* claim) or that joined another process's claim
//! (a *shared* claim), and is kept alive by its owner lock and its tree lock (`liveness.rs`).
//! Every live claim makes its devices busy. Its holder removes it on release; a dead holder's
//! record is removed by the next process of the same user that sees it.
//!
//! **Sharing.** A process never queues behind a claim it belongs to. It shares, in this order:
//!
//! 1. the claim of its nearest ancestor (itself included: a nested acquisition), found through
//!    the kernel's parent chain in `/proc`, whatever the environment says (copied, cleared,
//!    after `setsid`);
//! 2. the claim of a sibling rank of its job (see `anchors.rs`).
//!
//! Only *verified* claims are shared: the file's owner is the uid the record names, it is from
//! this boot, and the kernel names the record's pid as the holder of its owner lock (so a
//! record naming somebody else, pid 1 for instance, or a stale record whose pid was reused,
//! proves nothing). A verified record whose holder is a true ancestor proves that the ancestor
//! took the claim; a user can only write records that their own processes hold, so the worst a
//! forger achieves is to fool their own processes, which could ignore the mutex anyway.

use std::fs::File;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::liveness::{self, OwnRecord};
use crate::lockdir::{FileId, LockDir};
use crate::probe::{Probe, SeenClaim};
use crate::proc::{self, ProcId};
use crate::records::{self, ClaimKind, ClaimRecord, JobTag};

/// A claim this process holds.
#[derive(Debug)]
pub(crate) struct OwnClaim {
    pub name: String,
    pub id: FileId,
    pub file: File,
    pub record: Arc<ClaimRecord>,
}

/// Writes a claim for `devices` and registers it as this process's own.
pub(crate) fn create(
    dir: &LockDir,
    me: ProcId,
    euid: u32,
    kind: ClaimKind,
    devices: Vec<String>,
    job: Option<JobTag>,
) -> Result<OwnClaim> {
    let since = SystemTime::now();
    let cmd = proc::self_cmdline();
    let made = std::cell::RefCell::new(None);
    let (name, file, id) = liveness::create_record(dir, true, |random| {
        let record = Arc::new(ClaimRecord {
            name: records::claim_name(random),
            boot: proc::boot_id().to_string(),
            proc_id: me,
            uid: euid,
            kind,
            devices: devices.clone(),
            job: job.clone(),
            since,
            cmd: cmd.clone(),
        });
        *made.borrow_mut() = Some(record.clone());
        (
            record.name.clone(),
            record.to_text(),
            OwnRecord::Claim(record),
        )
    })?;
    let record = made
        .into_inner()
        .ok_or_else(|| Error::io("create", dir.path(), std::io::Error::other("no record")))?;
    Ok(OwnClaim {
        name,
        id,
        file,
        record,
    })
}

/// A claim the caller may share.
#[derive(Debug, Clone)]
pub(crate) struct Share {
    /// The shared claim's holder.
    pub holder: ProcId,
    /// The shared claim's job, if it has one.
    pub job: Option<JobTag>,
    /// The shared claim's devices (keys) that the caller may use, in the caller's preference
    /// order.
    pub devices: Vec<String>,
}

fn same_job(a: &JobTag, b: &JobTag) -> bool {
    a.root == b.root && a.key == b.key
}

/// The claim the caller should share, if any (see the module docs). `visible`: the caller's
/// devices in preference order; `ancestry`: the caller's ancestry, itself first; `tag`: the
/// caller's job; `euid`: the caller's effective uid. `holder_ancestry` gives a process's
/// ancestry (the real `/proc` in use, a table in tests).
pub(crate) fn find_share(
    probe: &Probe,
    visible: &[String],
    ancestry: &[ProcId],
    tag: Option<&JobTag>,
    euid: u32,
    holder_ancestry: impl Fn(ProcId) -> Vec<ProcId>,
) -> Option<Share> {
    let usable = |c: &&SeenClaim| {
        c.live()
            && c.verified()
            && c.record
                .as_ref()
                .is_some_and(|r| r.devices.iter().any(|d| visible.contains(d)))
    };
    // Under a launcher that numbers its ranks, a rank whose local rank another live participant
    // already has is not part of that launch (an unrelated job with a copied environment).
    let rank_taken = tag.is_some_and(|t| {
        t.local_rank.is_some()
            && probe.claims.iter().filter(usable).any(|c| {
                c.record.as_ref().is_some_and(|r| {
                    r.job
                        .as_ref()
                        .is_some_and(|j| same_job(j, t) && j.local_rank == t.local_rank)
                        && r.proc_id != ancestry[0]
                })
            })
    });
    let mut best: Option<(usize, &ClaimRecord)> = None;
    for c in probe.claims.iter().filter(usable) {
        let Some(r) = c.record.as_deref() else {
            continue;
        };
        let rank = match ancestry.iter().position(|a| *a == r.proc_id) {
            Some(i) => i,
            None => {
                let (Some(t), Some(j)) = (tag, r.job.as_ref()) else {
                    continue;
                };
                if rank_taken
                    || !same_job(j, t)
                    || c.owner_uid != euid
                    || (t.local_rank.is_some() && j.local_rank == t.local_rank)
                    || !holder_ancestry(r.proc_id).contains(&t.root)
                {
                    continue;
                }
                match ancestry.iter().position(|a| *a == t.root) {
                    Some(i) => i,
                    None => continue,
                }
            }
        };
        if best.is_none_or(|(b, _)| rank < b) {
            best = Some((rank, r));
        }
    }
    best.map(|(_, r)| Share {
        holder: r.proc_id,
        job: r.job.clone(),
        devices: visible
            .iter()
            .filter(|d| r.devices.contains(d))
            .cloned()
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::liveness::{LockState, Owner};

    fn id(pid: u32) -> ProcId {
        ProcId {
            pid,
            start: 1000 + u64::from(pid),
        }
    }

    fn claim(
        holder: u32,
        file_uid: u32,
        rec_uid: u32,
        lock: Owner,
        job: Option<JobTag>,
    ) -> SeenClaim {
        let name = records::claim_name(&format!("{holder:032x}"));
        SeenClaim {
            name: name.clone(),
            owner_uid: file_uid,
            locks: LockState {
                owner: lock,
                tree: true,
            },
            record: Some(Arc::new(ClaimRecord {
                name,
                boot: proc::boot_id().to_string(),
                proc_id: id(holder),
                uid: rec_uid,
                kind: ClaimKind::Primary,
                devices: vec!["0".into(), "1".into()],
                job,
                since: SystemTime::now(),
                cmd: String::new(),
            })),
            own: false,
        }
    }

    fn k(d: &[u32]) -> Vec<String> {
        d.iter().map(|x| x.to_string()).collect()
    }

    fn tag(root: u32, rank: Option<u32>) -> JobTag {
        JobTag {
            root: id(root),
            key: "torch:x".into(),
            local_rank: rank,
        }
    }

    fn probe(claims: Vec<SeenClaim>) -> Probe {
        Probe {
            claims,
            ..Probe::default()
        }
    }

    /// Process tree: 1 <- 10 (shell) <- 20 (launcher) <- {30, 31, 32} (ranks).
    fn tree(p: ProcId) -> Vec<ProcId> {
        match p.pid {
            30..=39 => vec![p, id(20), id(10), id(1)],
            20 => vec![p, id(10), id(1)],
            10 => vec![p, id(1)],
            _ => vec![p, id(1)],
        }
    }

    #[test]
    fn shares_only_verified_claims_of_ancestors() {
        let me = tree(id(30));
        let share = |c: SeenClaim| find_share(&probe(vec![c]), &k(&[1, 0]), &me, None, 1000, tree);
        // The launcher's genuine claim: shared, devices in the caller's order.
        let s = share(claim(20, 1000, 1000, Owner::Pid(20), None)).expect("share");
        assert_eq!((s.holder, s.devices), (id(20), k(&[1, 0])));
        // A record naming the launcher, held by another process: not shared.
        assert!(share(claim(20, 1000, 1000, Owner::Pid(99), None)).is_none());
        // A record naming pid 1 (everybody's ancestor), held by somebody else.
        assert!(share(claim(1, 1001, 1001, Owner::Pid(4242), None)).is_none());
        // A record whose owner is not the uid it claims.
        assert!(share(claim(20, 1001, 1000, Owner::Pid(20), None)).is_none());
        // Only a read lock / an OFD lock / a hidden holder.
        assert!(share(claim(20, 1000, 1000, Owner::Ofd, None)).is_none());
        assert!(share(claim(20, 1000, 1000, Owner::Hidden, None)).is_none());
        // The launcher's genuine claim read under another name (a hard link): not shared.
        let mut linked = claim(20, 1000, 1000, Owner::Pid(20), None);
        linked.name = records::claim_name(&"f".repeat(32));
        assert!(share(linked).is_none());
        // A genuine claim of an unrelated process.
        assert!(share(claim(77, 1000, 1000, Owner::Pid(77), None)).is_none());
        // An ancestor of another user (sudo): the kernel vouches for it.
        assert!(share(claim(10, 0, 0, Owner::Pid(10), None)).is_some());
        // Nearest ancestor wins.
        let both = probe(vec![
            claim(10, 1000, 1000, Owner::Pid(10), None),
            claim(20, 1000, 1000, Owner::Pid(20), None),
        ]);
        assert_eq!(
            find_share(&both, &k(&[0]), &me, None, 1000, tree).map(|s| s.holder),
            Some(id(20))
        );
        // A claim on none of the caller's devices.
        assert!(find_share(
            &probe(vec![claim(20, 1000, 1000, Owner::Pid(20), None)]),
            &k(&[5]),
            &me,
            None,
            1000,
            tree
        )
        .is_none());
    }

    #[test]
    fn sibling_ranks_share_and_unrelated_jobs_do_not() {
        let me = tree(id(31));
        let rank0 = |rank: Option<u32>| claim(30, 1000, 1000, Owner::Pid(30), Some(tag(20, rank)));
        let share = |cs: Vec<SeenClaim>, t: JobTag| {
            find_share(&probe(cs), &k(&[0, 1]), &me, Some(&t), 1000, tree)
        };
        // Rank 1 shares rank 0's claim.
        assert_eq!(
            share(vec![rank0(Some(0))], tag(20, Some(1))).map(|s| s.holder),
            Some(id(30))
        );
        // Same local rank: an unrelated job with a copied environment.
        assert!(share(vec![rank0(Some(0))], tag(20, Some(0))).is_none());
        // Another launch (other root) or another job key.
        assert!(share(vec![rank0(Some(0))], tag(21, Some(1))).is_none());
        let mut other = tag(20, Some(1));
        other.key = "torch:y".into();
        assert!(share(vec![rank0(Some(0))], other).is_none());
        // Another user's rank.
        let foreign = claim(30, 1001, 1001, Owner::Pid(30), Some(tag(20, Some(0))));
        assert!(share(vec![foreign], tag(20, Some(1))).is_none());
        // Somebody already has my local rank: I am a duplicate, not a rank of this launch.
        let dup = claim(32, 1000, 1000, Owner::Pid(32), Some(tag(20, Some(1))));
        assert!(share(vec![rank0(Some(0)), dup], tag(20, Some(1))).is_none());
        // A holder that does not descend from the root it names.
        let stray = claim(77, 1000, 1000, Owner::Pid(77), Some(tag(20, Some(0))));
        assert!(share(vec![stray], tag(20, Some(1))).is_none());
        // Explicit job roots have no local ranks.
        let ex = claim(30, 1000, 1000, Owner::Pid(30), Some(tag(20, None)));
        assert!(share(vec![ex], tag(20, None)).is_some());
    }
}
