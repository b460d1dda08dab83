//! SM groups: how the GPU's SMs are cut (once) into equal groups, how a compute share rounds
//! to groups, and sets of groups.

use crate::error::{Error, Result};

/// How the GPU's SMs are cut into groups. On the H200 (driver 580) `cuDevSmResourceSplitByCount`
/// with 8 SMs per group returns 15 groups of 8 and a remainder of 12 SMs (measured: not 16 + 4,
/// the split respects the chip's GPC structure); gpukit-sched uses the remainder as the floor
/// for BestEffort work. A split without a remainder gives up its last group as the floor
/// ([`SmLayout::with_floor`]), so BestEffort work never lands on SMs a task owns.
///
/// Without green contexts ([`SmLayout::pacing`]) the groups are *virtual*: shares of GPU time
/// (at most 64 of them), admitted, owned and lent exactly like real groups, and enforced by
/// pacing each task's launches to the time its groups stand for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmLayout {
    /// SMs on the device.
    pub total_sms: u32,
    /// SMs per group (the driver's minimum partition / alignment; 8 on Hopper).
    pub group_size: u32,
    /// Number of whole groups.
    pub groups: u32,
    /// SMs in no group.
    pub remainder_sms: u32,
    /// Whether the groups are real green contexts (false: pacing only).
    pub green: bool,
}

impl SmLayout {
    /// A layout of `total_sms` cut into groups of `group_size` (at most 64 groups).
    ///
    /// ```
    /// let l = gpukit_sched::SmLayout::new(132, 8, true).unwrap();
    /// assert_eq!((l.groups, l.remainder_sms), (16, 4));
    /// assert_eq!(l.groups_for_share(0.25), 4);
    /// assert_eq!(l.groups_for_share(0.75), 12);
    /// assert_eq!(l.groups_for_share(0.03), 0); // below one group: pacing
    /// ```
    pub fn new(total_sms: u32, group_size: u32, green: bool) -> Result<Self> {
        if group_size == 0 || total_sms < group_size {
            return Err(Error::invalid(
                "SM layout",
                format!("{total_sms} SMs in groups of {group_size}"),
                "needs at least one whole group",
            ));
        }
        let groups = total_sms / group_size;
        if groups > 64 {
            return Err(Error::invalid(
                "SM layout",
                format!("{groups} groups"),
                "at most 64 groups are supported",
            ));
        }
        Ok(SmLayout {
            total_sms,
            group_size,
            groups,
            remainder_sms: total_sms - groups * group_size,
            green,
        })
    }

    /// Groups for a fraction of the GPU: the share of the *groups* rounded to the nearest
    /// whole group, exact halves down, so that shares summing to 1 fit the groups (0.25 / 0.75
    /// of 15 groups -> 4 / 11; 0.5 / 0.25 / 0.25 -> 7 / 4 / 4). 0 means "below one group"
    /// (pacing) or nothing asked.
    pub fn groups_for_share(&self, share: f64) -> u32 {
        if share.is_nan() || share <= 0.0 {
            return 0;
        }
        let g = (share * self.groups as f64 - 0.5).ceil().max(0.0);
        (g as u32).min(self.groups)
    }

    /// A layout as a split returned it: `groups` groups of `group_size` SMs out of `total_sms`.
    ///
    /// ```
    /// // What the H200 returns for groups of 8: 15 groups and 12 SMs left over.
    /// let l = gpukit_sched::SmLayout::with_groups(132, 8, 15, true).unwrap();
    /// assert_eq!(l.remainder_sms, 12);
    /// assert_eq!((l.groups_for_share(0.25), l.groups_for_share(0.75)), (4, 11));
    /// assert_eq!((l.groups_for_share(0.5), l.groups_for_share(0.25)), (7, 4));
    /// ```
    pub fn with_groups(total_sms: u32, group_size: u32, groups: u32, green: bool) -> Result<Self> {
        if group_size == 0 || groups == 0 || groups > 64 || groups * group_size > total_sms {
            return Err(Error::invalid(
                "SM layout",
                format!("{groups} groups of {group_size} in {total_sms} SMs"),
                "needs 1..=64 groups that fit the SMs",
            ));
        }
        Ok(SmLayout {
            total_sms,
            group_size,
            groups,
            remainder_sms: total_sms - groups * group_size,
            green,
        })
    }

    /// The layout of the pacing fallback for a GPU of `total_sms` SMs: virtual groups of
    /// `ceil(total_sms / 64)` SMs (at most 64 groups), with a floor (see
    /// [`with_floor`](Self::with_floor)).
    ///
    /// ```
    /// let l = gpukit_sched::SmLayout::pacing(132).unwrap();
    /// // 44 virtual groups of 3 SMs; the last one is the BestEffort floor.
    /// assert_eq!((l.group_size, l.groups, l.remainder_sms, l.green), (3, 43, 3, false));
    /// assert_eq!(l.groups_for_request(0.25), 11);
    /// ```
    pub fn pacing(total_sms: u32) -> Result<Self> {
        let total = total_sms.max(1);
        let size = total.div_ceil(64);
        Ok(SmLayout::with_groups(total, size, total / size, false)?.with_floor())
    }

    /// This layout with a floor for BestEffort work: when no SMs are left over and there are
    /// at least two groups, the last group becomes the floor (`remainder_sms`) and is never
    /// given to a task. Unchanged otherwise.
    ///
    /// ```
    /// let l = gpukit_sched::SmLayout::with_groups(128, 8, 16, true).unwrap().with_floor();
    /// assert_eq!((l.groups, l.remainder_sms), (15, 8));
    /// let h = gpukit_sched::SmLayout::with_groups(132, 8, 15, true).unwrap();
    /// assert_eq!(h.with_floor(), h);
    /// ```
    pub fn with_floor(self) -> Self {
        if self.remainder_sms > 0 || self.groups < 2 {
            return self;
        }
        SmLayout {
            groups: self.groups - 1,
            remainder_sms: self.group_size,
            ..self
        }
    }

    /// Groups a task with compute request `share` owns:
    /// [`groups_for_share`](Self::groups_for_share), but at least one for any positive share, so that a share
    /// below one group is admitted with a whole group of its own (and paced within it to its
    /// limit), never left without SMs of its own.
    ///
    /// ```
    /// let l = gpukit_sched::SmLayout::with_groups(132, 8, 15, true).unwrap();
    /// assert_eq!((l.groups_for_request(0.02), l.groups_for_request(0.0)), (1, 0));
    /// ```
    pub fn groups_for_request(&self, share: f64) -> u32 {
        if share.is_nan() || share <= 0.0 {
            0
        } else {
            self.groups_for_share(share).max(1)
        }
    }

    /// SMs in `groups` groups.
    pub fn sms(&self, groups: u32) -> u32 {
        groups * self.group_size
    }

    /// The fraction of the GPU's SMs that `groups` groups are.
    pub fn share_of(&self, groups: u32) -> f64 {
        self.sms(groups) as f64 / self.total_sms as f64
    }

    /// All groups.
    pub fn all(&self) -> GroupSet {
        GroupSet::first(self.groups)
    }
}

/// A set of SM groups (bit i = group i).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct GroupSet(pub u64);

impl GroupSet {
    /// The empty set.
    pub const EMPTY: GroupSet = GroupSet(0);
    /// Groups 0..n.
    pub fn first(n: u32) -> Self {
        if n >= 64 {
            GroupSet(u64::MAX)
        } else {
            GroupSet((1u64 << n) - 1)
        }
    }
    /// Number of groups.
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }
    /// Whether empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Union.
    pub fn union(self, o: GroupSet) -> GroupSet {
        GroupSet(self.0 | o.0)
    }
    /// Intersection.
    pub fn intersect(self, o: GroupSet) -> GroupSet {
        GroupSet(self.0 & o.0)
    }
    /// Difference.
    pub fn minus(self, o: GroupSet) -> GroupSet {
        GroupSet(self.0 & !o.0)
    }
    /// Whether `o` is a subset.
    pub fn contains(self, o: GroupSet) -> bool {
        o.0 & !self.0 == 0
    }
    /// The lowest `n` groups of this set (all of it if it has fewer).
    pub fn take(self, n: u32) -> GroupSet {
        let mut out = 0u64;
        let mut rest = self.0;
        for _ in 0..n {
            if rest == 0 {
                break;
            }
            let bit = rest & rest.wrapping_neg();
            out |= bit;
            rest &= !bit;
        }
        GroupSet(out)
    }
    /// Group indices, ascending.
    pub fn indices(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |i| self.0 >> i & 1 == 1)
    }
}

impl std::fmt::Display for GroupSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v: Vec<String> = self.indices().map(|i| i.to_string()).collect();
        write!(f, "{{{}}}", v.join(","))
    }
}

/// How a task's compute share is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// Its kernels run on green-context streams confined to its SM groups (plus groups lent
    /// to it while idle). A limit below its own groups' SMs (a share below one group) is
    /// enforced by pacing within them ([`ComputeGrant::pace`]).
    GreenContext,
    /// It asked for no compute: it runs on the floor (the SMs in no group) plus idle groups
    /// lent to it.
    Floor,
    /// This GPU/driver has no green contexts (or they are turned off): groups are shares of
    /// GPU time, and launches are paced so that the task's measured GPU time stays within the
    /// time its own and lent groups stand for (work-conserving: a task alone on an idle GPU is
    /// lent every group and not slowed).
    Pacing,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::GreenContext => "green-context",
            Mechanism::Floor => "floor+lent",
            Mechanism::Pacing => "pacing",
        })
    }
}

/// What compute a task was given, as told to the task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComputeGrant {
    /// The fraction it asked for.
    pub requested_share: f64,
    /// Its own groups.
    pub groups: GroupSet,
    /// SMs in its own groups.
    pub sms: u32,
    /// The fraction of the GPU's SMs it got (`sms / total`).
    pub granted_share: f64,
    /// How it is enforced.
    pub mechanism: Mechanism,
    /// With green contexts: the fraction of its own groups' time it may use when its limit is
    /// below them (`None`: not paced). Without: `None` (the pace follows its groups).
    pub pace: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn h200_layout() {
        let l = SmLayout::new(132, 8, true).unwrap();
        assert_eq!((l.groups, l.remainder_sms, l.sms(16)), (16, 4, 128));
        assert_eq!(l.groups_for_share(0.5), 8);
        assert_eq!(l.groups_for_share(1.0), 16);
        assert_eq!(l.groups_for_share(1.0 / 16.0), 1);
        assert_eq!(l.groups_for_share(0.031), 0);
        assert_eq!(l.groups_for_share(1.5 / 16.0), 1, "halves round down");
        let h = SmLayout::with_groups(132, 8, 15, true).unwrap();
        assert_eq!(
            [0.25, 0.75]
                .map(|s| h.groups_for_share(s))
                .iter()
                .sum::<u32>(),
            15
        );
        assert_eq!(
            [0.5, 0.25, 0.25]
                .map(|s| h.groups_for_share(s))
                .iter()
                .sum::<u32>(),
            15
        );
        assert!(SmLayout::with_groups(132, 8, 17, true).is_err());
        assert_eq!(l.groups_for_share(0.0), 0);
        assert_eq!(l.groups_for_share(f64::NAN), 0);
        assert!(SmLayout::new(4, 8, true).is_err());
        assert_eq!(l.groups_for_request(0.001), 1);
        assert_eq!(l.groups_for_request(f64::NAN), 0);
        let p = SmLayout::pacing(1).unwrap();
        assert_eq!((p.groups, p.remainder_sms), (1, 0), "one group: no floor");
        let p = SmLayout::pacing(64).unwrap();
        assert_eq!((p.group_size, p.groups, p.remainder_sms), (1, 63, 1));
        assert!(SmLayout::new(8 * 65, 8, true).is_err());
    }

    #[test]
    fn sets() {
        let a = GroupSet::first(4);
        assert_eq!(a.len(), 4);
        assert_eq!(GroupSet(0b1011_0100).take(2), GroupSet(0b0001_0100));
        assert_eq!(a.minus(GroupSet(0b10)).to_string(), "{0,2,3}");
        assert!(a.contains(GroupSet(0b1001)));
        assert!(!a.contains(GroupSet(0b1_0000)));
        assert_eq!(GroupSet::first(64).len(), 64);
    }

    proptest! {
        /// Rounding never exceeds the GPU, is monotone, and is within half a group of the ask.
        #[test]
        fn rounding(a in 0.0f64..=1.0, b in 0.0f64..=1.0, sms in 8u32..200) {
            let l = SmLayout::new(sms, 8, true).unwrap();
            let (ga, gb) = (l.groups_for_share(a), l.groups_for_share(b));
            prop_assert!(ga <= l.groups);
            if a <= b { prop_assert!(ga <= gb); }
            prop_assert!((ga as f64 - a * l.groups as f64).abs() <= 0.5 + 1e-9);
        }
        /// Shares that sum to at most 1 never need more groups than there are, for two tasks.
        #[test]
        fn two_shares_fit(a in 0.0f64..=1.0, groups in 1u32..=20) {
            let l = SmLayout::with_groups(groups * 8 + 4, 8, groups, true).unwrap();
            let b = 1.0 - a;
            prop_assert!(l.groups_for_share(a) + l.groups_for_share(b) <= groups);
        }
        /// The pacing layout covers every SM, has at most 64 groups and a floor whenever it has
        /// more than one group.
        #[test]
        fn pacing_layout(sms in 1u32..2000) {
            let l = SmLayout::pacing(sms).unwrap();
            prop_assert!(l.groups >= 1 && l.groups <= 64);
            prop_assert_eq!(l.groups * l.group_size + l.remainder_sms, sms);
            prop_assert!(!l.green);
            if sms / l.group_size >= 2 { prop_assert!(l.remainder_sms > 0); }
        }
        #[test]
        fn take_is_subset(bits in any::<u64>(), n in 0u32..70) {
            let s = GroupSet(bits);
            let t = s.take(n);
            prop_assert!(s.contains(t));
            prop_assert_eq!(t.len(), n.min(s.len()));
        }
    }
}
