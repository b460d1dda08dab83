//! SM groups: how the GPU's SMs are cut (once) into equal groups, how a compute share rounds
//! to groups, and sets of groups.

use crate::error::{Error, Result};

/// How the GPU's SMs are cut into groups. On the H200 (driver 580) `cuDevSmResourceSplitByCount`
/// with 8 SMs per group returns 15 groups of 8 and a remainder of 12 SMs (measured: not 16 + 4,
/// the split respects the chip's GPC structure); gpukit-sched uses the remainder as the floor
/// for BestEffort work.
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
    /// to it while idle).
    GreenContext,
    /// It asked for no compute: it runs on the floor (the SMs in no group) plus idle groups
    /// lent to it; where there is no floor it is paced.
    Floor,
    /// Its share is below one SM group, or this GPU/driver has no green contexts: launches
    /// are paced so that its measured GPU time stays within its share of wall time.
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
        #[test]
        fn take_is_subset(bits in any::<u64>(), n in 0u32..70) {
            let s = GroupSet(bits);
            let t = s.take(n);
            prop_assert!(s.contains(t));
            prop_assert_eq!(t.len(), n.min(s.len()));
        }
    }
}
