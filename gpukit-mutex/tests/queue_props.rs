//! Property tests of the grant policy (`gpukit_mutex::queue::decide`, and
//! `gpukit_mutex::queue::evaluate` over everything a pass can observe: waiting, gone and
//! untrusted tickets, live and dead claims, unreadable claims, a missing own ticket).

use std::collections::BTreeSet;

use gpukit_mutex::queue::{
    decide, evaluate, Decision, ObservedClaim, ObservedTicket, Outcome, Request, TicketState,
};
use proptest::prelude::*;

const DEVICES: u32 = 6;

fn request() -> impl Strategy<Value = Request> {
    (
        proptest::sample::subsequence((0..DEVICES).collect::<Vec<_>>(), 1..=DEVICES as usize),
        1usize..=3,
        any::<bool>(),
    )
        .prop_flat_map(|(cands, n, backfill)| {
            let len = cands.len();
            (Just(cands).prop_shuffle(), Just(n.min(len)), Just(backfill))
        })
        .prop_map(|(candidates, n, backfill)| Request {
            candidates,
            n,
            backfill,
        })
}

fn scenario() -> impl Strategy<Value = (Vec<Request>, BTreeSet<u32>)> {
    (
        proptest::collection::vec(request(), 0..8),
        proptest::collection::btree_set(0..DEVICES, 0..=DEVICES as usize),
    )
}

fn granted(d: &Decision) -> Option<&Vec<u32>> {
    match d {
        Decision::Grant(g) => Some(g),
        Decision::Wait => None,
    }
}

fn ticket_state() -> impl Strategy<Value = TicketState> {
    prop_oneof![
        4 => request().prop_map(TicketState::Waiting),
        1 => Just(TicketState::Gone),
        1 => Just(TicketState::Untrusted),
    ]
}

fn observed_claim() -> impl Strategy<Value = ObservedClaim> {
    (
        any::<bool>(),
        proptest::sample::subsequence((0..DEVICES).collect::<Vec<_>>(), 0..=3),
    )
        .prop_map(|(live, devices)| ObservedClaim { live, devices })
}

/// A pass: tickets (unique names; sequence numbers may repeat), claims, and possibly the caller.
fn observation() -> impl Strategy<Value = (Vec<ObservedTicket>, Vec<ObservedClaim>)> {
    (
        proptest::collection::vec((0u64..6, ticket_state()), 0..8),
        proptest::collection::vec(observed_claim(), 0..5),
    )
        .prop_map(|(ts, cs)| {
            let tickets = ts
                .into_iter()
                .enumerate()
                .map(|(i, (seq, state))| ObservedTicket {
                    seq,
                    name: format!("t{i}"),
                    state,
                })
                .collect();
            (tickets, cs)
        })
}

fn busy(claims: &[ObservedClaim]) -> BTreeSet<u32> {
    claims
        .iter()
        .filter(|c| c.live)
        .flat_map(|c| c.devices.iter().copied())
        .collect()
}

fn waiting_names(tickets: &[ObservedTicket]) -> Vec<String> {
    tickets
        .iter()
        .filter(|t| matches!(t.state, TicketState::Waiting(_)))
        .map(|t| t.name.clone())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// No grant ever includes a device a live claim names (trusted or not, readable or not),
    /// and grants are within the caller's candidates, exactly n of them.
    #[test]
    fn evaluate_never_grants_a_busy_device((tickets, claims) in observation(), me in request()) {
        let busy = busy(&claims);
        let mut callers: Vec<Option<String>> = vec![None];
        callers.extend(waiting_names(&tickets).into_iter().map(Some));
        for mine in callers {
            let req = match &mine {
                None => me.clone(),
                Some(n) => match &tickets.iter().find(|t| &t.name == n).map(|t| &t.state) {
                    Some(TicketState::Waiting(r)) => r.clone(),
                    _ => unreachable!(),
                },
            };
            if let Outcome::Grant(g) = evaluate(&tickets, &claims, mine.as_deref(), &req) {
                prop_assert_eq!(g.len(), req.n);
                for d in &g {
                    prop_assert!(!busy.contains(d), "granted busy device {}", d);
                    prop_assert!(req.candidates.contains(d));
                }
            }
        }
    }

    /// Gone and untrusted tickets, and dead claims, change nothing: removing them gives the
    /// same outcome for everybody.
    #[test]
    fn gone_untrusted_and_dead_entries_are_irrelevant(
        (tickets, claims) in observation(),
        me in request(),
    ) {
        let kept_t: Vec<ObservedTicket> = tickets
            .iter()
            .filter(|t| matches!(t.state, TicketState::Waiting(_)))
            .cloned()
            .collect();
        let kept_c: Vec<ObservedClaim> = claims.iter().filter(|c| c.live).cloned().collect();
        prop_assert_eq!(
            evaluate(&tickets, &claims, None, &me),
            evaluate(&kept_t, &kept_c, None, &me)
        );
        for n in waiting_names(&tickets) {
            prop_assert_eq!(
                evaluate(&tickets, &claims, Some(&n), &me),
                evaluate(&kept_t, &kept_c, Some(&n), &me)
            );
        }
    }

    /// A caller whose ticket is not among the waiting ones is told to rejoin, never to wait.
    #[test]
    fn a_missing_own_ticket_means_rejoin((tickets, claims) in observation(), me in request()) {
        for t in &tickets {
            let out = evaluate(&tickets, &claims, Some(&t.name), &me);
            let waiting = matches!(t.state, TicketState::Waiting(_));
            prop_assert_eq!(out == Outcome::Rejoin, !waiting);
        }
        prop_assert_eq!(evaluate(&tickets, &claims, Some("nobody"), &me), Outcome::Rejoin);
        prop_assert_ne!(evaluate(&tickets, &claims, None, &me), Outcome::Rejoin);
    }

    /// Every waiter evaluating the same pass: grants never overlap each other or busy devices
    /// (the join lock serialises passes; this is what makes one pass consistent).
    #[test]
    fn waiters_of_one_pass_get_disjoint_grants((tickets, claims) in observation()) {
        let mut used = busy(&claims);
        for t in &tickets {
            if let TicketState::Waiting(r) = &t.state {
                if let Outcome::Grant(g) = evaluate(&tickets, &claims, Some(&t.name), r) {
                    for d in g {
                        prop_assert!(used.insert(d), "device {} granted twice", d);
                    }
                }
            }
        }
    }

    /// Queue order is by sequence number, then name, whatever order the pass listed them in.
    #[test]
    fn order_does_not_depend_on_listing_order(
        (mut tickets, claims) in observation(),
        me in request(),
        seed in any::<u64>(),
    ) {
        let before: Vec<Outcome> = waiting_names(&tickets)
            .iter()
            .map(|n| evaluate(&tickets, &claims, Some(n), &me))
            .collect();
        let len = tickets.len().max(1);
        tickets.rotate_left((seed as usize) % len);
        tickets.reverse();
        let mut names = waiting_names(&tickets);
        names.sort_by_key(|n| n[1..].parse::<usize>().unwrap_or(0));
        let after: Vec<Outcome> = names
            .iter()
            .map(|n| evaluate(&tickets, &claims, Some(n), &me))
            .collect();
        prop_assert_eq!(before, after);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Grants are disjoint, free, within candidates, and exactly n (all or nothing).
    #[test]
    fn no_double_grant((q, free) in scenario()) {
        let ds = decide(&q, &free);
        prop_assert_eq!(ds.len(), q.len());
        let mut used = BTreeSet::new();
        for (r, d) in q.iter().zip(&ds) {
            if let Some(g) = granted(d) {
                prop_assert_eq!(g.len(), r.n);
                for dev in g {
                    prop_assert!(free.contains(dev));
                    prop_assert!(r.candidates.contains(dev));
                    prop_assert!(used.insert(*dev), "device {} granted twice", dev);
                }
            }
        }
    }

    /// The head is granted exactly when it can be: nothing ever delays it.
    #[test]
    fn head_never_delayed((q, free) in scenario()) {
        if let Some(head) = q.first() {
            let avail = head.candidates.iter().filter(|d| free.contains(d)).count();
            let ds = decide(&q, &free);
            prop_assert_eq!(granted(&ds[0]).is_some(), avail >= head.n);
        }
    }

    /// Nobody (backfill or not) is granted a device that an earlier waiting request could use:
    /// so no later grant can delay any earlier request, and the decision for a request does not
    /// depend on anything queued behind it.
    #[test]
    fn later_grants_never_touch_earlier_waiters((q, free) in scenario()) {
        let ds = decide(&q, &free);
        for j in 0..q.len() {
            let Some(g) = granted(&ds[j]) else { continue };
            for i in 0..j {
                if ds[i] == Decision::Wait {
                    for dev in g {
                        prop_assert!(!q[i].candidates.contains(dev));
                    }
                }
            }
        }
        // Prefix independence: appending requests never changes earlier decisions.
        for k in 0..q.len() {
            let prefix = decide(&q[..k], &free);
            prop_assert_eq!(&prefix[..], &ds[..k]);
        }
    }

    /// FIFO among non-backfill requests: one never overtakes an earlier waiting request whose
    /// candidates overlap its own.
    #[test]
    fn fifo_among_normal_requests((q, free) in scenario()) {
        let ds = decide(&q, &free);
        for j in 0..q.len() {
            if q[j].backfill || granted(&ds[j]).is_none() {
                continue;
            }
            for i in 0..j {
                let overlap = q[i].candidates.iter().any(|d| q[j].candidates.contains(d));
                prop_assert!(!(overlap && ds[i] == Decision::Wait));
            }
        }
    }

    /// Work conservation: a request that waits either overlaps an earlier waiter (normal) or
    /// lacks enough usable free devices.
    #[test]
    fn waits_have_a_reason((q, free) in scenario()) {
        let ds = decide(&q, &free);
        let mut taken: BTreeSet<u32> = BTreeSet::new();
        let mut blocked: BTreeSet<u32> = BTreeSet::new();
        for (r, d) in q.iter().zip(&ds) {
            match d {
                Decision::Grant(g) => taken.extend(g.iter().copied()),
                Decision::Wait => {
                    let overlap = r.candidates.iter().any(|c| blocked.contains(c));
                    let usable = r.candidates.iter()
                        .filter(|c| free.contains(*c) && !taken.contains(*c) && !blocked.contains(*c))
                        .count();
                    prop_assert!((overlap && !r.backfill) || usable < r.n);
                    blocked.extend(r.candidates.iter().copied());
                }
            }
        }
    }

    /// Device lists: whatever parses round-trips, and nothing odd parses.
    #[test]
    fn device_list_parser(s in "[0-9, a-z-]{0,12}") {
        if let Ok(v) = gpukit_mutex::parse_device_list(&s) {
            prop_assert!(!v.is_empty());
            let text = v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
            prop_assert_eq!(gpukit_mutex::parse_device_list(&text).ok(), Some(v.clone()));
            let set: BTreeSet<u32> = v.iter().copied().collect();
            prop_assert_eq!(set.len(), v.len());
        }
    }
}
