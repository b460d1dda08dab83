//! Which device a task goes to when one scheduler runs several
//! ([`MultiScheduler`](crate::MultiScheduler)): a pure function over a description of the
//! devices, tested without a GPU.
//!
//! # Rules
//! 1. A task pinned to a device ([`TaskSpec::device`](crate::TaskSpec::device)) goes there
//!    (an ordinal the scheduler does not run is an error).
//! 2. Candidates are the healthy devices where the task's partition exists and its request can
//!    ever fit the partition (memory request within the quota, SM groups within its groups).
//! 3. Among candidates where it starts now (a worker slot, uncommitted memory and free groups
//!    for its request), the one with the most room left after it: the sum of the fractions of
//!    memory and of SM groups still free there once it is placed, so work spreads by free
//!    memory and SM shares; ties go to fewer running tasks, then the lower ordinal.
//! 4. If it starts nowhere now, the candidate with the shortest queue, then the fewest running
//!    tasks, then the most room, then the lower ordinal (it waits there).
//! 5. Without candidates, the first device that has the partition (else the first device):
//!    its admission then answers with the precise rejection.

use crate::sm::SmLayout;

/// One device as placement sees it, for the partition a task asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceLoad {
    /// The CUDA ordinal (or the simulated device's number).
    pub ordinal: usize,
    /// Whether the device's context is usable.
    pub healthy: bool,
    /// The task's partition on this device (`None`: it does not exist here).
    pub pool: Option<PoolLoad>,
    /// Tasks running, and the most that may (worker slots).
    pub running: usize,
    pub max_running: usize,
    /// The SM layout (a share rounds to groups by it).
    pub layout: SmLayout,
}

/// A partition (or the default pool) of one device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PoolLoad {
    pub memory_quota: u64,
    pub memory_committed: u64,
    pub groups: u32,
    pub groups_free: u32,
    pub queued: usize,
}

/// What a task asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Request {
    pub memory: u64,
    pub share: f64,
    pub device: Option<usize>,
}

/// Why no device is chosen.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NoPlace {
    /// No device has this ordinal.
    UnknownDevice { asked: usize, known: Vec<usize> },
    /// No device at all.
    Empty,
}

fn candidate(d: &DeviceLoad, r: &Request) -> Option<(PoolLoad, u32)> {
    let p = d.pool?;
    let g = d.layout.groups_for_request(r.share);
    (d.healthy && r.memory <= p.memory_quota && g <= p.groups).then_some((p, g))
}

fn fits_now(d: &DeviceLoad, p: &PoolLoad, r: &Request, g: u32) -> bool {
    d.running < d.max_running
        && p.memory_committed.saturating_add(r.memory) <= p.memory_quota
        && p.groups_free >= g
}

/// Room left after placing `r` (`g` groups): free memory and free groups, as fractions.
fn room(p: &PoolLoad, r: &Request, g: u32) -> f64 {
    let mem = if p.memory_quota == 0 {
        0.0
    } else {
        p.memory_quota
            .saturating_sub(p.memory_committed)
            .saturating_sub(r.memory) as f64
            / p.memory_quota as f64
    };
    let groups = if p.groups == 0 {
        0.0
    } else {
        p.groups_free.saturating_sub(g) as f64 / p.groups as f64
    };
    mem + groups
}

/// The index in `loads` of the device the task goes to (see the module docs).
pub(crate) fn place(loads: &[DeviceLoad], r: &Request) -> Result<usize, NoPlace> {
    if loads.is_empty() {
        return Err(NoPlace::Empty);
    }
    if let Some(asked) = r.device {
        return loads
            .iter()
            .position(|d| d.ordinal == asked)
            .ok_or_else(|| NoPlace::UnknownDevice {
                asked,
                known: loads.iter().map(|d| d.ordinal).collect(),
            });
    }
    let cands: Vec<(usize, &DeviceLoad, PoolLoad, u32)> = loads
        .iter()
        .enumerate()
        .filter_map(|(i, d)| candidate(d, r).map(|(p, g)| (i, d, p, g)))
        .collect();
    let now = cands
        .iter()
        .filter(|(_, d, p, g)| fits_now(d, p, r, *g))
        .max_by(|a, b| {
            room(&a.2, r, a.3)
                .total_cmp(&room(&b.2, r, b.3))
                .then(b.1.running.cmp(&a.1.running))
                .then(b.1.ordinal.cmp(&a.1.ordinal))
        });
    if let Some((i, ..)) = now {
        return Ok(*i);
    }
    let wait = cands.iter().min_by(|a, b| {
        (a.2.queued, a.1.running)
            .cmp(&(b.2.queued, b.1.running))
            .then(room(&b.2, r, b.3).total_cmp(&room(&a.2, r, a.3)))
            .then(a.1.ordinal.cmp(&b.1.ordinal))
    });
    if let Some((i, ..)) = wait {
        return Ok(*i);
    }
    Ok(loads.iter().position(|d| d.pool.is_some()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h200() -> SmLayout {
        SmLayout::with_groups(132, 8, 15, true).unwrap()
    }

    fn empty(ordinal: usize, memory: u64) -> DeviceLoad {
        DeviceLoad {
            ordinal,
            healthy: true,
            pool: Some(PoolLoad {
                memory_quota: memory,
                memory_committed: 0,
                groups: 15,
                groups_free: 15,
                queued: 0,
            }),
            running: 0,
            max_running: 8,
            layout: h200(),
        }
    }

    fn req(memory: u64, share: f64) -> Request {
        Request {
            memory,
            share,
            device: None,
        }
    }

    /// Places `r` on device `i` as its scheduler would admit it.
    fn commit(d: &mut DeviceLoad, r: &Request) {
        let g = d.layout.groups_for_request(r.share);
        let p = d.pool.as_mut().unwrap();
        p.memory_committed += r.memory;
        p.groups_free -= g;
        d.running += 1;
    }

    #[test]
    fn pinned_unknown_and_empty() {
        let loads = vec![empty(0, 100), empty(3, 100)];
        let mut r = req(10, 0.25);
        r.device = Some(3);
        assert_eq!(place(&loads, &r), Ok(1));
        r.device = Some(1);
        assert_eq!(
            place(&loads, &r),
            Err(NoPlace::UnknownDevice {
                asked: 1,
                known: vec![0, 3]
            })
        );
        assert_eq!(place(&[], &req(1, 0.1)), Err(NoPlace::Empty));
    }

    #[test]
    fn free_memory_and_sms_decide_and_unhealthy_devices_take_nothing() {
        let mut a = empty(0, 100);
        let b = empty(1, 100);
        a.pool.as_mut().unwrap().memory_committed = 50;
        assert_eq!(place(&[a.clone(), b.clone()], &req(10, 0.25)), Ok(1));
        a.pool.as_mut().unwrap().memory_committed = 0;
        a.pool.as_mut().unwrap().groups_free = 7;
        assert_eq!(place(&[a.clone(), b.clone()], &req(10, 0.25)), Ok(1));
        let mut sick = b.clone();
        sick.healthy = false;
        assert_eq!(place(&[a, sick], &req(10, 0.25)), Ok(0));
        // No partition there: the device that has it, even when fuller.
        let mut c = empty(2, 100);
        c.pool = None;
        let mut d = empty(3, 100);
        d.pool.as_mut().unwrap().memory_committed = 90;
        assert_eq!(place(&[c, d], &req(5, 0.25)), Ok(1));
    }

    #[test]
    fn nothing_fits_now_goes_to_the_shortest_queue() {
        let mut a = empty(0, 100);
        let mut b = empty(1, 100);
        for d in [&mut a, &mut b] {
            d.pool.as_mut().unwrap().memory_committed = 95;
        }
        a.pool.as_mut().unwrap().queued = 3;
        b.pool.as_mut().unwrap().queued = 1;
        assert_eq!(place(&[a.clone(), b.clone()], &req(10, 0.25)), Ok(1));
        // Never fits anywhere: the first device answers (with its rejection).
        assert_eq!(place(&[a, b], &req(1000, 0.25)), Ok(0));
    }

    fn device() -> impl Strategy<Value = DeviceLoad> {
        (
            0usize..8,
            1u64..1000,
            0u64..1000,
            1u32..=15,
            0u32..=15,
            0usize..10,
            0usize..9,
            1usize..9,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(ordinal, quota, committed, groups, free, queued, running, max, healthy, has)| {
                    DeviceLoad {
                        ordinal,
                        healthy: healthy || ordinal % 2 == 0,
                        pool: has.then_some(PoolLoad {
                            memory_quota: quota,
                            memory_committed: committed.min(quota),
                            groups,
                            groups_free: free.min(groups),
                            queued,
                        }),
                        running: running.min(max),
                        max_running: max,
                        layout: SmLayout::with_groups(132, 8, groups, true).unwrap(),
                    }
                },
            )
    }

    fn devices() -> impl Strategy<Value = Vec<DeviceLoad>> {
        prop::collection::vec(device(), 1..6).prop_map(|mut v| {
            for (i, d) in v.iter_mut().enumerate() {
                d.ordinal = i;
            }
            v
        })
    }

    proptest! {
        /// The chosen device is a candidate whenever one exists; it starts the task now
        /// whenever any candidate could; among those it leaves the most room.
        #[test]
        fn placement_is_a_best_fit(loads in devices(), memory in 0u64..1200, share in 0.0f64..=1.0) {
            let r = req(memory, share);
            let i = place(&loads, &r).unwrap();
            prop_assert!(i < loads.len());
            let cand = |d: &DeviceLoad| candidate(d, &r);
            let any_cand = loads.iter().any(|d| cand(d).is_some());
            let now = |d: &DeviceLoad| cand(d).is_some_and(|(p, g)| fits_now(d, &p, &r, g));
            if any_cand {
                prop_assert!(cand(&loads[i]).is_some(), "not a candidate");
            }
            if loads.iter().any(now) {
                prop_assert!(now(&loads[i]), "a device could start it now");
                let (p, g) = cand(&loads[i]).unwrap();
                let mine = room(&p, &r, g);
                for d in loads.iter().filter(|d| now(d)) {
                    let (q, h) = cand(d).unwrap();
                    prop_assert!(mine >= room(&q, &r, h), "device {} leaves more room", d.ordinal);
                }
            }
        }

        /// The choice does not depend on the order the devices are listed in.
        #[test]
        fn placement_ignores_the_listing_order(loads in devices(), memory in 0u64..1200,
                                               share in 0.0f64..=1.0, seed in any::<u64>()) {
            let r = req(memory, share);
            let chosen = loads[place(&loads, &r).unwrap()].ordinal;
            let mut shuffled = loads.clone();
            let n = shuffled.len();
            let mut x = seed | 1;
            for i in (1..n).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let again = shuffled[place(&shuffled, &r).unwrap()].ordinal;
            // The fallback (no candidate) is positional by design.
            if loads.iter().any(|d| candidate(d, &r).is_some()) {
                prop_assert_eq!(chosen, again);
            }
        }

        /// Identical tasks on identical devices spread: the counts per device never differ by
        /// more than one while they fit.
        #[test]
        fn identical_tasks_spread(n in 1usize..6, tasks in 1usize..30, groups in 1u32..=4) {
            let mut loads: Vec<DeviceLoad> = (0..n).map(|i| empty(i, 1 << 30)).collect();
            let share = groups as f64 / 15.0;
            let r = req(1 << 20, share);
            let mut counts = vec![0usize; n];
            for _ in 0..tasks {
                let i = place(&loads, &r).unwrap();
                let (p, g) = candidate(&loads[i], &r).unwrap();
                if !fits_now(&loads[i], &p, &r, g) {
                    break;
                }
                commit(&mut loads[i], &r);
                counts[i] += 1;
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                prop_assert!(hi - lo <= 1, "{counts:?}");
            }
        }

        /// A pinned task goes to its device whatever the loads.
        #[test]
        fn pinned_tasks_go_where_they_ask(loads in devices(), pick in 0usize..6) {
            let pick = pick % loads.len();
            let mut r = req(1, 0.1);
            r.device = Some(loads[pick].ordinal);
            prop_assert_eq!(place(&loads, &r), Ok(pick));
        }
    }
}
