//! Job anchors: how the ranks of one launch, which are siblings rather than descendants of each
//! other, recognise that they belong together and share one claim.
//!
//! A process *declares* a job through its environment: either `GPUMUTEX_JOB_ROOT=<pid>:<start>`
//! (see [`crate::job_root_env_value`]), or the variables a launcher sets for its ranks:
//!
//! | launcher                     | a rank when                                 | local rank                   | job key                                       |
//! |------------------------------|---------------------------------------------|------------------------------|-----------------------------------------------|
//! | torchrun / torch.distributed | `LOCAL_RANK` and `WORLD_SIZE` (or `LOCAL_WORLD_SIZE`) > 1 | `LOCAL_RANK`  | `TORCHELASTIC_RUN_ID` + restart count, else `MASTER_ADDR:MASTER_PORT` |
//! | Open MPI                     | `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_SIZE` > 1 | that         | `PMIX_NAMESPACE` (or the ess job id)          |
//! | MPICH / Hydra / Intel MPI    | `MPI_LOCALRANKID`, `PMI_SIZE` > 1            | that                         | `pmi`                                         |
//! | Slurm `srun`                 | `SLURM_LOCALID`, `SLURM_STEP_NUM_TASKS` (or `SLURM_NTASKS`) > 1 | that  | `SLURM_JOB_ID.SLURM_STEP_ID`                  |
//!
//! The declaration is only a hint; what makes it count is checked against `/proc`:
//!
//! * The job's **root** is the launcher: the nearest proper ancestor whose environment does not
//!   carry the launcher's per-rank variable (or cannot be read, or is pid 1: a launcher may run
//!   as pid 1 in a container). Wrapper scripts between the launcher and the rank carry it and
//!   are skipped, so every rank of one launch finds the same root. An explicit job root must be
//!   a true ancestor, else it is ignored.
//! * A rank shares a claim only if that claim is verified (its owner and lock agree with it),
//!   belongs to the same user, names the same root and job key, its holder really descends from
//!   that root, and — for launchers that number their ranks — no live participant of the job
//!   already has the caller's local rank. The last rule is what keeps unrelated jobs apart when
//!   a shell exported `LOCAL_RANK=0 WORLD_SIZE=2` by hand: every job started from it has the same
//!   local rank, so none of them shares another's claim, while the ranks of one real launch
//!   have distinct local ranks.

use crate::config::ENV_JOB_ROOT;
use crate::error::{Error, Result};
use crate::proc::{self, ProcId};
use crate::records::JobTag;

/// What the environment declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Declared {
    /// `GPUMUTEX_JOB_ROOT`.
    Explicit(ProcId),
    /// A launcher's rank.
    Rank {
        /// The per-rank variable that marks processes of the job (see the module docs).
        marker: &'static str,
        key: String,
        local_rank: u32,
    },
}

fn positive_above_one(v: Option<String>) -> bool {
    v.and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 1)
}

fn rank_number(v: Option<String>) -> Option<u32> {
    v.and_then(|s| s.trim().parse::<u32>().ok())
}

/// Keeps a job key to printable characters without spaces (the record format's rule).
fn clean_key(s: String) -> String {
    let mut k: String = s
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    k.truncate(200);
    k
}

/// Reads the declaration from `env` (a variable lookup, so tests can supply their own).
/// A malformed `GPUMUTEX_JOB_ROOT` is a configuration error; malformed launcher variables just
/// mean "not a rank".
pub(crate) fn declared(env: impl Fn(&str) -> Option<String>) -> Result<Option<Declared>> {
    if let Some(v) = env(ENV_JOB_ROOT) {
        return match ProcId::parse(&v) {
            Some(id) => Ok(Some(Declared::Explicit(id))),
            None => Err(Error::InvalidConfig {
                name: ENV_JOB_ROOT,
                value: v,
                reason: "expected <pid>:<start time>, as printed by job_root_env_value()".into(),
            }),
        };
    }
    if let Some(lr) = rank_number(env("LOCAL_RANK")) {
        if positive_above_one(env("WORLD_SIZE")) || positive_above_one(env("LOCAL_WORLD_SIZE")) {
            let (marker, key) = match env("TORCHELASTIC_RUN_ID") {
                Some(run) => (
                    "TORCHELASTIC_RUN_ID",
                    format!(
                        "torch:{run}:{}",
                        env("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|| "0".into())
                    ),
                ),
                None => (
                    "LOCAL_RANK",
                    format!(
                        "torch:{}:{}",
                        env("MASTER_ADDR").unwrap_or_default(),
                        env("MASTER_PORT").unwrap_or_default()
                    ),
                ),
            };
            return Ok(Some(Declared::Rank {
                marker,
                key: clean_key(key),
                local_rank: lr,
            }));
        }
    }
    if let Some(lr) = rank_number(env("OMPI_COMM_WORLD_LOCAL_RANK")) {
        if positive_above_one(env("OMPI_COMM_WORLD_SIZE")) {
            let job = env("PMIX_NAMESPACE")
                .or_else(|| env("OMPI_MCA_ess_base_jobid"))
                .unwrap_or_default();
            return Ok(Some(Declared::Rank {
                marker: "OMPI_COMM_WORLD_RANK",
                key: clean_key(format!("ompi:{job}")),
                local_rank: lr,
            }));
        }
    }
    if let Some(lr) = rank_number(env("MPI_LOCALRANKID")) {
        if positive_above_one(env("PMI_SIZE")) {
            return Ok(Some(Declared::Rank {
                marker: "PMI_RANK",
                key: "pmi".into(),
                local_rank: lr,
            }));
        }
    }
    if let Some(lr) = rank_number(env("SLURM_LOCALID")) {
        if positive_above_one(env("SLURM_STEP_NUM_TASKS"))
            || positive_above_one(env("SLURM_NTASKS"))
        {
            return Ok(Some(Declared::Rank {
                marker: "SLURM_PROCID",
                key: clean_key(format!(
                    "slurm:{}.{}",
                    env("SLURM_JOB_ID").unwrap_or_default(),
                    env("SLURM_STEP_ID").unwrap_or_default()
                )),
                local_rank: lr,
            }));
        }
    }
    Ok(None)
}

/// The job tag of a declaration, given the caller's ancestry (itself first). `environ_has`
/// says whether a process's environment defines a variable (`None`: unreadable).
pub(crate) fn job_tag(
    declared: &Declared,
    ancestry: &[ProcId],
    environ_has: impl Fn(u32, &str) -> Option<bool>,
) -> Option<JobTag> {
    match declared {
        Declared::Explicit(id) => ancestry.contains(id).then(|| JobTag {
            root: *id,
            key: "explicit".into(),
            local_rank: None,
        }),
        Declared::Rank {
            marker,
            key,
            local_rank,
        } => {
            let mut root = None;
            for a in ancestry.iter().skip(1) {
                root = Some(*a);
                if a.pid == 1 || environ_has(a.pid, marker) != Some(true) {
                    break;
                }
            }
            root.map(|root| JobTag {
                root,
                key: key.clone(),
                local_rank: Some(*local_rank),
            })
        }
    }
}

/// [`job_tag`] with the real `/proc`.
pub(crate) fn my_job_tag(declared: &Declared, ancestry: &[ProcId]) -> Option<JobTag> {
    job_tag(declared, ancestry, proc::environ_has)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn id(pid: u32) -> ProcId {
        ProcId {
            pid,
            start: 100 + pid as u64,
        }
    }

    #[test]
    fn declarations() {
        assert_eq!(declared(env_of(&[])).expect("ok"), None);
        assert!(matches!(
            declared(env_of(&[("GPUMUTEX_JOB_ROOT", "12")])),
            Err(Error::InvalidConfig { .. })
        ));
        assert_eq!(
            declared(env_of(&[("GPUMUTEX_JOB_ROOT", "12:34")])).expect("ok"),
            Some(Declared::Explicit(ProcId { pid: 12, start: 34 }))
        );
        // One process is not a job.
        assert_eq!(
            declared(env_of(&[("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")])).expect("ok"),
            None
        );
        let d = declared(env_of(&[
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("TORCHELASTIC_RUN_ID", "a b"),
        ]))
        .expect("ok");
        assert_eq!(
            d,
            Some(Declared::Rank {
                marker: "TORCHELASTIC_RUN_ID",
                key: "torch:a_b:0".into(),
                local_rank: 1
            })
        );
        let d = declared(env_of(&[
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "0"),
        ]))
        .expect("ok");
        assert!(
            matches!(d, Some(Declared::Rank { marker: "SLURM_PROCID", ref key, local_rank: 0 }) if key == "slurm:7.0")
        );
        let d = declared(env_of(&[
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "ns"),
        ]))
        .expect("ok");
        assert!(matches!(d, Some(Declared::Rank { local_rank: 2, .. })));
    }

    #[test]
    fn root_skips_wrappers_and_may_be_pid_1() {
        let d = Declared::Rank {
            marker: "LOCAL_RANK",
            key: "k".into(),
            local_rank: 0,
        };
        // rank 40 <- wrapper 30 (has the marker) <- launcher 20 (has not) <- shell 10
        let chain = [id(40), id(30), id(20), id(10), id(1)];
        let has = |pid: u32, _: &str| Some(pid == 30);
        assert_eq!(job_tag(&d, &chain, has).map(|t| t.root), Some(id(20)));
        // A launcher running as pid 1 (containers).
        let chain = [id(40), id(1)];
        assert_eq!(
            job_tag(&d, &chain, |_, _| Some(true)).map(|t| t.root),
            Some(id(1))
        );
        // An unreadable environment (another user's launcher, e.g. slurmstepd) ends the walk.
        let chain = [id(40), id(30), id(20)];
        assert_eq!(
            job_tag(&d, &chain, |_, _| None).map(|t| t.root),
            Some(id(30))
        );
        // No ancestor at all.
        assert_eq!(job_tag(&d, &[id(40)], |_, _| None), None);
        // An explicit root must be an ancestor.
        let e = Declared::Explicit(id(20));
        assert!(job_tag(&e, &[id(40), id(20)], |_, _| None).is_some());
        assert!(job_tag(&e, &[id(40), id(21)], |_, _| None).is_none());
    }
}
