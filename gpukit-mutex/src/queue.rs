//! The grant policy as pure functions.
//!
//! Every waiter evaluates [`evaluate`] on what one pass over the lock directory observed (the
//! tickets and the claims, in the states below), under the join lock, and acts only on its own
//! entry. [`evaluate`] reduces the observation to the queue of waiting requests and the set of
//! free devices and applies [`decide`].
//!
//! States of what a pass observes:
//!
//! * a ticket is [`TicketState::Waiting`] (live, and its name, owner and lock agree with it),
//!   [`TicketState::Gone`] (nothing holds it: its waiter left or died),
//!   [`TicketState::Untrusted`] (live, but unreadable or contradicted by its name, owner or
//!   lock) or [`TicketState::Suspended`] (a waiting ticket whose process is stopped or frozen).
//!   Only waiting tickets form the queue, in order of their sequence number (ties by name): a
//!   suspended waiter keeps its place but holds up nobody until it runs again.
//! * a claim is live or dead; every device a live claim names is busy, whether or not the claim
//!   can be trusted (an untrusted claim can only make devices look busier).
//! * the caller's own ticket must be among the waiting ones; if it vanished (removed by hand,
//!   replaced) the outcome is [`Outcome::Rejoin`], never an endless wait.
//!
//! Rules, in queue order:
//!
//! * **FIFO among overlapping requests.** A normal (non-backfill) request waits while any
//!   earlier request that is still waiting could use one of its devices (their candidate sets
//!   intersect). Requests whose candidate sets are disjoint never hold each other up.
//! * **Backfill that cannot delay anyone ahead.** A backfill request may overtake earlier waiting
//!   requests, but only with free devices that none of them could use (outside the union of their
//!   candidate sets). Whether an earlier request can start depends only on the free devices in its
//!   own candidate set, which a backfill grant never touches, so the head of the queue (and every
//!   other earlier request) starts exactly when it would have without the backfill.
//! * **All or nothing.** A request is granted `n` devices at once or nothing; nothing is held
//!   while waiting, so there is no lock-order deadlock.
//! * Devices are chosen in the request's preference order (its visible-device order).
//!
//! The functions are generic over how a device is named (`D`): the crate uses device keys
//! (`String`: UUIDs, see `src/devices.rs`); plain indices (`u32`, the default) are easier to
//! reason about and to test.

use std::collections::BTreeSet;

/// One waiting request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<D = u32> {
    /// Devices this request may be given, in preference order.
    pub candidates: Vec<D>,
    /// How many it needs.
    pub n: usize,
    /// Whether it may backfill.
    pub backfill: bool,
}

/// What a request gets in this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<D = u32> {
    /// Take exactly these devices now.
    Grant(Vec<D>),
    /// Keep waiting.
    Wait,
}

/// What one pass observed of a ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketState<D = u32> {
    /// A live, trusted waiter asking for this.
    Waiting(Request<D>),
    /// Nothing holds it any more: skipped.
    Gone,
    /// Live but unreadable, or its name, owner or lock disagrees with it: ignored.
    Untrusted,
    /// A trusted waiter whose process is stopped (`SIGSTOP`, Ctrl-Z) or whose cgroup is
    /// frozen: skipped while it cannot take a grant (it keeps its place for when it runs).
    Suspended,
}

/// One ticket file as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedTicket<D = u32> {
    /// Its sequence number (queue position).
    pub seq: u64,
    /// Its file name (breaks ties between equal sequence numbers).
    pub name: String,
    /// What it is.
    pub state: TicketState<D>,
}

/// One claim file as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedClaim<D = u32> {
    /// Whether a lock keeps it alive.
    pub live: bool,
    /// The devices its record names (empty if the record is unreadable).
    pub devices: Vec<D>,
}

/// What the caller should do after a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<D = u32> {
    /// Take exactly these devices now.
    Grant(Vec<D>),
    /// Keep waiting.
    Wait,
    /// The caller's own ticket is not among the waiting tickets: queue again.
    Rejoin,
}

/// Decides the caller's request `me` given what a pass observed. `mine` names the caller's
/// ticket; `None` means the caller has not queued yet and is evaluated as if it were at the end
/// of the queue (the fast path of an acquisition).
pub fn evaluate<D: Ord + Clone>(
    tickets: &[ObservedTicket<D>],
    claims: &[ObservedClaim<D>],
    mine: Option<&str>,
    me: &Request<D>,
) -> Outcome<D> {
    let mut waiting: Vec<(&u64, &str, &Request<D>)> = tickets
        .iter()
        .filter_map(|t| match &t.state {
            TicketState::Waiting(r) => Some((&t.seq, t.name.as_str(), r)),
            _ => None,
        })
        .collect();
    waiting.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut queue: Vec<Request<D>> = waiting.iter().map(|(_, _, r)| (*r).clone()).collect();
    let index = match mine {
        Some(name) => match waiting.iter().position(|(_, n, _)| *n == name) {
            Some(i) => i,
            None => return Outcome::Rejoin,
        },
        None => {
            queue.push(me.clone());
            queue.len() - 1
        }
    };
    let busy: BTreeSet<&D> = claims
        .iter()
        .filter(|c| c.live)
        .flat_map(|c| c.devices.iter())
        .collect();
    let free: BTreeSet<D> = queue
        .iter()
        .flat_map(|r| r.candidates.iter())
        .filter(|d| !busy.contains(d))
        .cloned()
        .collect();
    match decide(&queue, &free).swap_remove(index) {
        Decision::Grant(d) => Outcome::Grant(d),
        Decision::Wait => Outcome::Wait,
    }
}

/// Whether one of `me`'s candidates is named by no live claim.
pub fn has_free_candidate<D: PartialEq>(claims: &[ObservedClaim<D>], me: &Request<D>) -> bool {
    me.candidates
        .iter()
        .any(|d| !claims.iter().any(|c| c.live && c.devices.contains(d)))
}

/// Decides every request of `queue` (FIFO order) given the currently `free` devices.
pub fn decide<D: Ord + Clone>(queue: &[Request<D>], free: &BTreeSet<D>) -> Vec<Decision<D>> {
    let mut free = free.clone();
    // Union of the candidate sets of earlier requests that wait in this round.
    let mut blocked: BTreeSet<D> = BTreeSet::new();
    let mut out = Vec::with_capacity(queue.len());
    for r in queue {
        let overlaps = r.candidates.iter().any(|d| blocked.contains(d));
        let decision = if overlaps && !r.backfill {
            Decision::Wait
        } else {
            let avail: Vec<D> = r
                .candidates
                .iter()
                .filter(|d| free.contains(*d) && !blocked.contains(*d))
                .cloned()
                .collect();
            if r.n > 0 && avail.len() >= r.n {
                let take: Vec<D> = avail[..r.n].to_vec();
                for d in &take {
                    free.remove(d);
                }
                Decision::Grant(take)
            } else {
                Decision::Wait
            }
        };
        if decision == Decision::Wait {
            blocked.extend(r.candidates.iter().cloned());
        }
        out.push(decision);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(c: &[u32], n: usize, backfill: bool) -> Request {
        Request {
            candidates: c.to_vec(),
            n,
            backfill,
        }
    }

    #[test]
    fn head_of_line_without_backfill_and_with() {
        let free: BTreeSet<u32> = [1].into_iter().collect();
        // Head pinned to busy device 0; second wants 0 or 1.
        let q = [req(&[0], 1, false), req(&[0, 1], 1, false)];
        assert_eq!(decide(&q, &free), vec![Decision::Wait, Decision::Wait]);
        let q = [req(&[0], 1, false), req(&[0, 1], 1, true)];
        assert_eq!(
            decide(&q, &free),
            vec![Decision::Wait, Decision::Grant(vec![1])]
        );
    }

    #[test]
    fn backfill_never_takes_what_the_head_could_use() {
        // Head needs 2 of {0,1}; only 0 is free. A backfiller must not take 0.
        let free: BTreeSet<u32> = [0].into_iter().collect();
        let q = [req(&[0, 1], 2, false), req(&[0], 1, true)];
        assert_eq!(decide(&q, &free), vec![Decision::Wait, Decision::Wait]);
    }

    #[test]
    fn disjoint_requests_do_not_block() {
        let free: BTreeSet<u32> = [2].into_iter().collect();
        let q = [req(&[0, 1], 1, false), req(&[2], 1, false)];
        assert_eq!(
            decide(&q, &free),
            vec![Decision::Wait, Decision::Grant(vec![2])]
        );
    }

    #[test]
    fn preference_order_and_all_or_nothing() {
        let free: BTreeSet<u32> = [0, 1, 2, 3].into_iter().collect();
        let q = [req(&[3, 1, 0], 2, false), req(&[0, 1, 2], 3, false)];
        assert_eq!(
            decide(&q, &free),
            vec![Decision::Grant(vec![3, 1]), Decision::Wait]
        );
    }
}
