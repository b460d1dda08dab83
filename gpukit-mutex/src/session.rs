//! One acquisition: passes over the lock directory under the join lock, each deciding to share,
//! to take devices, or to keep waiting, with sleeps in between.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::anchors;
use crate::claims::{self, OwnClaim};
use crate::devices::Device;
use crate::error::{Error, Result};
use crate::guard::GpuGuard;
use crate::joinlock;
use crate::lockdir::LockDir;
use crate::mutex::GpuMutex;
use crate::probe::Prober;
use crate::proc::{self, ProcId};
use crate::queue::{self, Outcome, Request};
use crate::records::{ClaimKind, JobTag};
use crate::tickets::{self, OwnTicket};
use crate::wait::{Waiter, Watcher, Woken, BACKOFF_START};

enum Step {
    Granted(GpuGuard),
    Wait,
    /// Something changed that is worth a new pass at once.
    Again,
}

pub(crate) struct Session<'m> {
    m: &'m GpuMutex,
    dir: Arc<LockDir>,
    join_fd: Arc<OwnedFd>,
    prober: Prober,
    ticket: Option<OwnTicket>,
    me: ProcId,
    euid: u32,
    /// This process's ancestry for the next pass, read from `/proc` *before* taking the join
    /// lock when the previous pass saw verified claims or the process declares a job (the walk
    /// takes a few `/proc` reads per ancestor; holding the join lock meanwhile would delay
    /// everybody else). `None`: read under the lock if a pass needs it.
    ancestry: Option<Vec<ProcId>>,
    saw_claims: bool,
}

impl<'m> Session<'m> {
    pub fn new(m: &'m GpuMutex) -> Result<Self> {
        let dir = m.dir.clone();
        let join_fd = Arc::new(dir.reopen()?);
        let me = proc::self_id().ok_or_else(|| {
            Error::io(
                "read",
                "/proc/self/stat",
                std::io::Error::other("cannot read this process's identity"),
            )
        })?;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        Ok(Session {
            m,
            dir,
            join_fd,
            prober: Prober::default(),
            ticket: None,
            me,
            euid,
            ancestry: None,
            saw_claims: false,
        })
    }

    fn keys(&self) -> Vec<String> {
        self.m
            .cfg
            .visible_devices
            .iter()
            .map(|d| d.key.clone())
            .collect()
    }

    fn request(&self, n: usize) -> Request<String> {
        Request {
            candidates: self.keys(),
            n,
            backfill: self.m.cfg.backfill,
        }
    }

    /// The visible devices with these keys, in the keys' order.
    fn devices_of(&self, keys: &[String]) -> Vec<Device> {
        keys.iter()
            .filter_map(|k| {
                self.m
                    .cfg
                    .visible_devices
                    .iter()
                    .find(|d| &d.key == k)
                    .cloned()
            })
            .collect()
    }

    fn guard(&self, keys: Vec<String>, claim: OwnClaim, inherited_from: Option<u32>) -> GpuGuard {
        GpuGuard::new(
            self.devices_of(&keys),
            claim,
            self.dir.clone(),
            inherited_from,
            &self.m.namespace,
        )
    }

    fn ancestry(&mut self) -> Vec<ProcId> {
        match &self.ancestry {
            Some(a) => a.clone(),
            None => {
                let a = proc::ancestry_of_self();
                self.ancestry = Some(a.clone());
                a
            }
        }
    }

    fn job_tag(&mut self) -> Option<JobTag> {
        let declared = self.m.declared.clone()?;
        let ancestry = self.ancestry();
        anchors::my_job_tag(&declared, &ancestry)
    }

    /// One pass under the join lock.
    fn pass(&mut self, n: usize, waiter: &Waiter, may_queue: bool) -> Result<Step> {
        let dir = self.dir.clone();
        let join_fd = self.join_fd.clone();
        let _join = joinlock::lock(&join_fd, &dir, waiter, self.m.cfg.join_timeout)?;
        let probe = self.prober.probe(&dir, true, || waiter.check())?;
        self.saw_claims = probe.claims.iter().any(|c| c.live() && c.verified());
        if self.saw_claims {
            let ancestry = self.ancestry();
            let tag = self.job_tag();
            let share = claims::find_share(
                &probe,
                &self.keys(),
                &ancestry,
                tag.as_ref(),
                self.euid,
                proc::ancestry_of,
            );
            if let Some(share) = share {
                if share.devices.len() < n {
                    return Err(Error::InheritedClaimTooSmall {
                        holder_pid: share.holder.pid,
                        held: self
                            .devices_of(&share.devices)
                            .iter()
                            .map(|d| d.index)
                            .collect(),
                        requested: n,
                    });
                }
                let job = tag.or(share.job);
                let claim = claims::create(
                    &dir,
                    self.me,
                    self.euid,
                    ClaimKind::Shared,
                    share.devices.clone(),
                    job,
                )?;
                self.ticket = None;
                return Ok(Step::Granted(self.guard(
                    share.devices,
                    claim,
                    Some(share.holder.pid),
                )));
            }
        }
        let request = self.request(n);
        let mine = self.ticket.as_ref().map(|t| t.name().to_owned());
        let mut tickets = probe.observed_tickets();
        let claims = probe.observed_claims();
        let mut outcome = queue::evaluate(&tickets, &claims, mine.as_deref(), &request);
        if outcome == Outcome::Wait
            && queue::has_free_candidate(&claims, &request)
            && probe.mark_suspended(&mut tickets)
        {
            // Somebody ahead could have taken a free device and has not because it is stopped
            // or frozen: it holds up nobody while it cannot run.
            outcome = queue::evaluate(&tickets, &claims, mine.as_deref(), &request);
        }
        match outcome {
            Outcome::Grant(devices) => {
                let job = self.job_tag();
                let claim = claims::create(
                    &dir,
                    self.me,
                    self.euid,
                    ClaimKind::Primary,
                    devices.clone(),
                    job,
                )?;
                self.ticket = None;
                Ok(Step::Granted(self.guard(devices, claim, None)))
            }
            Outcome::Wait => {
                if self.ticket.is_none() && may_queue {
                    self.ticket = Some(OwnTicket::create(
                        &dir,
                        probe.next_seq(tickets::boot_clock_ns()),
                        self.me,
                        self.euid,
                        &request,
                    )?);
                }
                Ok(Step::Wait)
            }
            Outcome::Rejoin => {
                // Our ticket was removed or replaced: queue again, at the back.
                self.ticket = None;
                self.ticket = Some(OwnTicket::create(
                    &dir,
                    probe.next_seq(tickets::boot_clock_ns()),
                    self.me,
                    self.euid,
                    &request,
                )?);
                Ok(Step::Again)
            }
        }
    }

    /// The ancestry walk for the next pass, outside the join lock (see [`Session::ancestry`]).
    fn prepare_pass(&mut self) {
        self.ancestry = (self.saw_claims || self.m.declared.is_some()).then(proc::ancestry_of_self);
    }

    /// Takes devices now if that needs no waiting (or shares a claim); never queues.
    pub fn try_once(&mut self, n: usize, waiter: &Waiter) -> Result<Option<GpuGuard>> {
        self.prepare_pass();
        match self.pass(n, waiter, false)? {
            Step::Granted(g) => Ok(Some(g)),
            Step::Wait | Step::Again => Ok(None),
        }
    }

    /// Waits for `n` devices within the limits of `waiter`.
    pub fn acquire(&mut self, n: usize, waiter: &Waiter) -> Result<GpuGuard> {
        let mut watcher: Option<Watcher> = None;
        let mut backoff = BACKOFF_START;
        loop {
            waiter.check()?;
            self.prepare_pass();
            match self.pass(n, waiter, true)? {
                Step::Granted(g) => return Ok(g),
                Step::Again => continue,
                Step::Wait => {}
            }
            let Some(w) = &watcher else {
                // Watch from now on, and look once more at once: whatever changed before the
                // watch existed is seen by that pass, everything after it is an event.
                watcher = Some(Watcher::new(&self.dir));
                continue;
            };
            match waiter.sleep(backoff, Some(w))? {
                Woken::Event => backoff = BACKOFF_START,
                Woken::Timeout => backoff = (backoff * 2).min(w.backoff_cap()),
            }
        }
    }
}
