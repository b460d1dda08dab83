//! Property tests of the grant policy (`gpukit_mutex::queue::decide`).

use std::collections::BTreeSet;

use gpukit_mutex::queue::{decide, Decision, Request};
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
