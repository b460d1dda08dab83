//! Partitions: named slices of the GPU with a memory quota, a compute share (whole SM groups)
//! and a priority band, carved out of the default pool and given back when removed.
//!
//! A partition's quota is taken from the default pool's *commitments* (requests of running
//! tasks); memory that default-pool tasks merely use above their requests stays lent: the
//! partition's tasks evict those tasks when they need it (eviction across pools, see
//! [`crate::ledger`]).

use crate::bytes::ByteSize;
use crate::error::Result;
use crate::plan::PoolInfo;
use crate::scheduler::Scheduler;

/// A partition to create or resize: name, memory quota, compute share, priority band.
///
/// ```
/// let p = gpukit_sched::Partition::new("realtime").memory("8GiB").compute(0.25).priority_band(1);
/// assert_eq!(p.compute, 0.25);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Name.
    pub name: String,
    /// Memory quota.
    pub memory: ByteSize,
    /// Compute share (rounded to SM groups, at least one).
    pub compute: f64,
    /// Priority band: pools with a larger band are served first when worker slots are short.
    pub priority_band: i32,
}

impl Partition {
    /// A partition with no memory and no compute yet.
    pub fn new(name: impl Into<String>) -> Self {
        Partition {
            name: name.into(),
            memory: ByteSize::Bytes(0),
            compute: 0.0,
            priority_band: 0,
        }
    }
    /// Memory quota.
    pub fn memory(mut self, b: impl Into<ByteSize>) -> Self {
        self.memory = b.into();
        self
    }
    /// Compute share.
    pub fn compute(mut self, share: f64) -> Self {
        self.compute = share;
        self
    }
    /// Priority band.
    pub fn priority_band(mut self, band: i32) -> Self {
        self.priority_band = band;
        self
    }
}

impl Scheduler {
    /// Creates a partition out of default-pool memory that no running task has committed and
    /// SM groups no running task owns.
    pub fn create_partition(&self, p: &Partition) -> Result<PoolInfo> {
        self.inner
            .change_pools(|planner, _| planner.create_partition(p).map(|i| (i, Vec::new())))
    }

    /// Resizes a partition that has no admitted or queued tasks (on failure it stays as it
    /// was).
    pub fn resize_partition(&self, p: &Partition) -> Result<PoolInfo> {
        self.inner
            .change_pools(|planner, now| planner.resize_partition(p, now))
    }

    /// Removes a partition that has no admitted or queued tasks; its memory and groups return
    /// to the default pool. Buffers that ended tasks of the partition still hold stay counted
    /// in the default pool until freed.
    pub fn remove_partition(&self, name: &str) -> Result<()> {
        self.inner
            .change_pools(|planner, now| planner.remove_partition(name, now).map(|e| ((), e)))
    }
}
