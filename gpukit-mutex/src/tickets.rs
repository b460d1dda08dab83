//! The caller's own wait ticket: `gpukit-ticket.<seq>.<pid>`, created under the join lock with
//! the next sequence number, kept alive by its owner lock (see `liveness.rs`) for as long as the
//! waiter waits, and removed when it is granted, gives up, or dies (then by the next process of
//! the same user that sees it dead; others skip it).
//!
//! A waiter checks on every pass that its ticket is still there under its name; if it was
//! removed or replaced, the policy says [`crate::queue::Outcome::Rejoin`] and the waiter
//! creates a new one at the back of the queue, so it never waits for a grant nobody can give.

use std::fs::File;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::liveness::{self, OwnRecord};
use crate::lockdir::{FileId, LockDir};
use crate::proc::{self, ProcId};
use crate::queue::Request;
use crate::records::{self, TicketRecord};

/// A ticket this process holds; removed on drop.
pub(crate) struct OwnTicket {
    dir: Arc<LockDir>,
    name: String,
    id: FileId,
    // Keeps the owner lock; closed after the file is unlinked.
    _file: File,
}

/// Whether `e` is "the name already exists".
pub(crate) fn is_exists(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EEXIST))
}

impl OwnTicket {
    /// Queues at sequence number `seq` (or the next free one after it).
    pub fn create(
        dir: &Arc<LockDir>,
        seq: u64,
        me: ProcId,
        euid: u32,
        req: &Request,
    ) -> Result<OwnTicket> {
        let record = Arc::new(TicketRecord {
            boot: proc::boot_id().to_string(),
            proc_id: me,
            uid: euid,
            n: req.n,
            candidates: req.candidates.clone(),
            backfill: req.backfill,
            since: SystemTime::now(),
            cmd: proc::self_cmdline(),
        });
        let text = record.to_text();
        let mut seq = seq;
        // A name can only be taken by a leftover of ours or a file somebody planted; move on.
        for _ in 0..64 {
            let name = records::ticket_name(seq, me.pid);
            match liveness::write_locked(
                dir,
                &name,
                &text,
                false,
                OwnRecord::Ticket(record.clone()),
            ) {
                Ok((file, id)) => {
                    return Ok(OwnTicket {
                        dir: dir.clone(),
                        name,
                        id,
                        _file: file,
                    });
                }
                Err(e) if is_exists(&e) => seq = seq.saturating_add(1),
                Err(e) => return Err(e),
            }
        }
        Err(Error::io(
            "create",
            dir.path().join(records::ticket_name(seq, me.pid)),
            std::io::Error::other("no free ticket name after 64 attempts"),
        ))
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
