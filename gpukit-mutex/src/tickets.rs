//! The caller's own wait ticket: `gpukit-ticket.<seq>.<random>`, created under the join lock,
//! kept alive by its owner lock (see `liveness.rs`) for as long as the waiter waits, and
//! removed when it is granted, gives up, or dies (then by the next process of the same user
//! that sees it dead; others skip it).
//!
//! **Queue order.** Tickets are served in order of `<seq>` (ties, which only a forged ticket
//! can cause, by name). A new ticket's `<seq>` is [`next_seq`]: the time since boot in
//! nanoseconds (`CLOCK_BOOTTIME`, one clock for every process of the machine that never goes
//! back), raised above every waiting ticket that is not from the future, so that tickets made
//! one after the other under the join lock always get increasing numbers. A ticket numbered in
//! the future can only be a forgery: it is not followed (it once made every later number
//! saturate at `u64::MAX`, after which order fell back to the file names and a chosen user
//! starved), and it waits behind every honest ticket until the clock reaches it, centuries
//! from now. What a forger *can* do is number their own ticket in the past and stand at the
//! front of the queue: the same denial of service as writing a claim of their own, which a
//! cooperative lock cannot prevent (see the crate docs). Processes in a time namespace with a
//! boot-time offset (not used by container runtimes by default) would be ordered by their
//! shifted clock.
//!
//! A waiter checks on every pass that its ticket is still there under its name; if it was
//! removed or replaced, the policy says [`crate::queue::Outcome::Rejoin`] and the waiter
//! creates a new one at the back of the queue, so it never waits for a grant nobody can give.

use std::fs::File;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::Result;
use crate::liveness::{self, OwnRecord};
use crate::lockdir::{FileId, LockDir};
use crate::proc::{self, ProcId};
use crate::queue::Request;
use crate::records::{self, TicketRecord};

/// Nanoseconds since boot (`CLOCK_BOOTTIME`: includes suspend, never goes back, the same for
/// every process of the machine).
pub(crate) fn boot_clock_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The sequence number of a ticket created now (see the module docs): `now`, raised above
/// every number in `waiting` that is not later than `now`.
pub(crate) fn next_seq(now: u64, waiting: impl IntoIterator<Item = u64>) -> u64 {
    waiting
        .into_iter()
        .filter(|s| *s <= now)
        .map(|s| s + 1)
        .fold(now, u64::max)
}

/// A ticket this process holds; removed on drop.
pub(crate) struct OwnTicket {
    dir: Arc<LockDir>,
    name: String,
    id: FileId,
    // Keeps the owner lock; closed after the file is unlinked.
    _file: File,
}

impl OwnTicket {
    /// Queues with sequence number `seq`.
    pub fn create(
        dir: &Arc<LockDir>,
        seq: u64,
        me: ProcId,
        euid: u32,
        req: &Request<String>,
    ) -> Result<OwnTicket> {
        let since = SystemTime::now();
        let cmd = proc::self_cmdline();
        let (name, file, id) = liveness::create_record(dir, false, |random| {
            let record = Arc::new(TicketRecord {
                name: records::ticket_name(seq, random),
                boot: proc::boot_id().to_string(),
                proc_id: me,
                uid: euid,
                n: req.n,
                candidates: req.candidates.clone(),
                backfill: req.backfill,
                since,
                cmd: cmd.clone(),
            });
            (
                record.name.clone(),
                record.to_text(),
                OwnRecord::Ticket(record),
            )
        })?;
        Ok(OwnTicket {
            dir: dir.clone(),
            name,
            id,
            _file: file,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for OwnTicket {
    fn drop(&mut self) {
        // Unlink first, then close (which drops the lock): others see the ticket gone at once.
        self.dir.unlink_if(&self.name, self.id);
        liveness::own_remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_increase_and_ignore_the_future() {
        assert_eq!(next_seq(100, []), 100);
        // Raised above waiting tickets (the clock may not have moved since the last one).
        assert_eq!(next_seq(100, [100, 40]), 101);
        // A ticket from the future (a forgery near u64::MAX) is not followed.
        assert_eq!(next_seq(100, [u64::MAX - 1, u64::MAX, 99]), 100);
        let a = boot_clock_ns();
        let b = boot_clock_ns();
        assert!(a > 0 && b >= a);
    }
}
