//! Task specifications in Kubernetes terms, and the QoS class derived from them.

use crate::bytes::ByteSize;
use crate::error::{Error, Result};
use std::time::Duration;

/// Kubernetes quality-of-service classes.
///
/// Derived from the numbers exactly as Kubernetes does: **Guaranteed** when memory and
/// compute both have a limit and request equals limit for both; **BestEffort** when neither
/// has a request or a limit; **Burstable** otherwise. A limit given without a request makes
/// the request equal to the limit (as in Kubernetes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QosClass {
    /// Request = limit for memory and compute: its memory is committed at admission, its SM
    /// groups are its own; never preempted.
    Guaranteed,
    /// Something requested, less than its limit (or no limit): the request is committed, the
    /// rest is used when free; preempted after BestEffort tasks, and only while above request.
    Burstable,
    /// Nothing requested: runs on idle resources; preempted first.
    BestEffort,
}

impl std::fmt::Display for QosClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        })
    }
}

impl std::str::FromStr for QosClass {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "guaranteed" => Ok(QosClass::Guaranteed),
            "burstable" => Ok(QosClass::Burstable),
            "besteffort" | "best-effort" | "best_effort" => Ok(QosClass::BestEffort),
            _ => Err(Error::invalid(
                "qos class",
                s,
                "expected Guaranteed, Burstable or BestEffort",
            )),
        }
    }
}

/// What a task asks for. Build with [`TaskSpec::new`] and the setters; everything is checked
/// at submit (a bad spec is an error there and leaves no state behind).
///
/// ```
/// use gpukit_sched::{QosClass, TaskSpec};
/// let spec = TaskSpec::new("inference")
///     .memory("1GiB", "1GiB")
///     .compute(0.25, 0.25)
///     .priority(10);
/// assert_eq!(spec.resolve().unwrap().qos, QosClass::Guaranteed);
/// let batch = TaskSpec::new("batch").memory_request("512MB").compute_request(0.25);
/// assert_eq!(batch.resolve().unwrap().qos, QosClass::Burstable);
/// assert!(TaskSpec::new("x").memory("2GB", "1GB").resolve().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskSpec {
    /// A name for messages and stats.
    pub name: String,
    /// Memory committed to the task at admission.
    pub memory_request: Option<ByteSize>,
    /// Memory the task may never exceed.
    pub memory_limit: Option<ByteSize>,
    /// Fraction of the GPU's SMs the task is given (0 < x <= 1).
    pub compute_request: Option<f64>,
    /// Fraction of the GPU's SMs the task may use when idle SMs are lent to it.
    pub compute_limit: Option<f64>,
    /// Larger runs first. Default 0.
    pub priority: i32,
    /// Start-by deadline, counted from submission: queued tasks with deadlines start earliest
    /// deadline first within a priority, and a task still queued at its deadline ends with
    /// [`Error::DeadlineExpired`] (on a timer, whatever else happens).
    pub deadline: Option<Duration>,
    /// Run-time limit, counted from the task's start (it leaves the queue: the scheduler makes
    /// room in memory and readies its lane, then its closure runs): past it the task is
    /// stopped like a cancellation and ends with [`Error::TimedOut`]. A start that the driver
    /// blocks (a new green context beside a kernel that never ends) ends this way too.
    pub timeout: Option<Duration>,
    /// The partition to run in (default: the unpartitioned rest of the GPU).
    pub partition: Option<String>,
    /// An explicit QoS class; it must agree with the numbers.
    pub qos: Option<QosClass>,
    /// Bytes the task reports moving per run, for achieved-bandwidth stats (optional).
    pub reported_bytes: Option<u64>,
    /// The device (CUDA ordinal) the task must run on; `None`: where placement puts it
    /// ([`MultiScheduler`](crate::MultiScheduler)). A single-device
    /// [`Scheduler`](crate::Scheduler) accepts only its own ordinal.
    pub device: Option<usize>,
}

impl TaskSpec {
    /// A BestEffort spec (nothing requested) named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        TaskSpec {
            name: name.into(),
            ..Default::default()
        }
    }
    /// Memory request and limit (`u64` bytes or text such as `"512MB"`).
    pub fn memory(mut self, request: impl Into<ByteSize>, limit: impl Into<ByteSize>) -> Self {
        self.memory_request = Some(request.into());
        self.memory_limit = Some(limit.into());
        self
    }
    /// Memory request only.
    pub fn memory_request(mut self, request: impl Into<ByteSize>) -> Self {
        self.memory_request = Some(request.into());
        self
    }
    /// Memory limit only (the request then equals the limit, as in Kubernetes).
    pub fn memory_limit(mut self, limit: impl Into<ByteSize>) -> Self {
        self.memory_limit = Some(limit.into());
        self
    }
    /// Compute request and limit as fractions of the GPU.
    pub fn compute(mut self, request: f64, limit: f64) -> Self {
        self.compute_request = Some(request);
        self.compute_limit = Some(limit);
        self
    }
    /// Compute request only.
    pub fn compute_request(mut self, request: f64) -> Self {
        self.compute_request = Some(request);
        self
    }
    /// Compute limit only (the request then equals the limit).
    pub fn compute_limit(mut self, limit: f64) -> Self {
        self.compute_limit = Some(limit);
        self
    }
    /// Priority (larger first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    /// Start-by deadline from submission.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }
    /// Run-time limit from its start (see [`TaskSpec::timeout`](Self#structfield.timeout)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Runs in the named partition.
    pub fn partition(mut self, name: impl Into<String>) -> Self {
        self.partition = Some(name.into());
        self
    }
    /// Asserts a QoS class; submit fails when the numbers say otherwise.
    pub fn qos(mut self, qos: QosClass) -> Self {
        self.qos = Some(qos);
        self
    }
    /// Bytes the task moves (for the achieved-bandwidth figure in its stats).
    pub fn reports_bytes(mut self, bytes: u64) -> Self {
        self.reported_bytes = Some(bytes);
        self
    }
    /// Pins the task to device `ordinal` (see [`TaskSpec::device`](Self#structfield.device)).
    pub fn device(mut self, ordinal: usize) -> Self {
        self.device = Some(ordinal);
        self
    }

    /// Checks the spec and derives the QoS class.
    pub fn resolve(&self) -> Result<ResolvedSpec> {
        let mem_req = self
            .memory_request
            .as_ref()
            .map(ByteSize::resolve)
            .transpose()?;
        let mem_lim = self
            .memory_limit
            .as_ref()
            .map(ByteSize::resolve)
            .transpose()?;
        let share = |what: &str, v: Option<f64>| -> Result<Option<f64>> {
            match v {
                None => Ok(None),
                Some(x) if x.is_finite() && x > 0.0 && x <= 1.0 => Ok(Some(x)),
                Some(x) => Err(Error::invalid(
                    what,
                    x,
                    "must be a fraction of the GPU in (0, 1]",
                )),
            }
        };
        let cpu_req = share("compute request", self.compute_request)?;
        let cpu_lim = share("compute limit", self.compute_limit)?;
        if let Some(0) = mem_lim {
            return Err(Error::invalid(
                "memory limit",
                0,
                "must be positive (omit it for no limit)",
            ));
        }
        // Kubernetes: a limit without a request makes request = limit.
        let mem_request = mem_req.or(mem_lim).unwrap_or(0);
        let compute_request = cpu_req.or(cpu_lim).unwrap_or(0.0);
        if let Some(l) = mem_lim {
            if mem_request > l {
                return Err(Error::invalid(
                    "memory request",
                    mem_request,
                    format!("exceeds the memory limit {l}"),
                ));
            }
        }
        if let Some(l) = cpu_lim {
            if compute_request > l {
                return Err(Error::invalid(
                    "compute request",
                    compute_request,
                    format!("exceeds the compute limit {l}"),
                ));
            }
        }
        let nothing =
            mem_req.is_none() && mem_lim.is_none() && cpu_req.is_none() && cpu_lim.is_none();
        let qos = if nothing {
            QosClass::BestEffort
        } else if mem_lim.is_some()
            && cpu_lim.is_some()
            && Some(mem_request) == mem_lim
            && Some(compute_request) == cpu_lim
        {
            QosClass::Guaranteed
        } else {
            QosClass::Burstable
        };
        if let Some(explicit) = self.qos {
            if explicit != qos {
                return Err(Error::invalid(
                    "qos",
                    explicit,
                    format!(
                        "contradicts the numbers, which make the task {qos} (Guaranteed needs request = limit for memory and compute, BestEffort needs no request or limit at all)"
                    ),
                ));
            }
        }
        if self.deadline == Some(Duration::ZERO) {
            return Err(Error::invalid(
                "deadline",
                "0s",
                "must be positive (omit it for none)",
            ));
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(Error::invalid(
                "timeout",
                "0s",
                "must be positive (omit it for none)",
            ));
        }
        if let Some(p) = &self.partition {
            if p.trim().is_empty() {
                return Err(Error::invalid("partition", p, "name is empty"));
            }
        }
        Ok(ResolvedSpec {
            name: self.name.clone(),
            qos,
            memory_request: mem_request,
            memory_limit: mem_lim,
            compute_request,
            compute_limit: cpu_lim,
            priority: self.priority,
            deadline: self.deadline,
            timeout: self.timeout,
            partition: self.partition.clone(),
            reported_bytes: self.reported_bytes,
            device: self.device,
        })
    }
}

/// A checked [`TaskSpec`] with its QoS class.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedSpec {
    /// The task's name.
    pub name: String,
    /// The derived class.
    pub qos: QosClass,
    /// Committed bytes (0 for BestEffort).
    pub memory_request: u64,
    /// Upper bound on bytes (None: no limit).
    pub memory_limit: Option<u64>,
    /// Requested fraction of the GPU (0 for none).
    pub compute_request: f64,
    /// Upper bound on the fraction (None: no limit).
    pub compute_limit: Option<f64>,
    /// Larger first.
    pub priority: i32,
    /// Start-by deadline from submission.
    pub deadline: Option<Duration>,
    /// Run-time limit from its start.
    pub timeout: Option<Duration>,
    /// Partition name.
    pub partition: Option<String>,
    /// Bytes moved per run, when reported.
    pub reported_bytes: Option<u64>,
    /// The device it is pinned to.
    pub device: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn qos_derivation() {
        let g = TaskSpec::new("g")
            .memory("1GiB", 1u64 << 30)
            .compute(0.5, 0.5);
        assert_eq!(g.resolve().unwrap().qos, QosClass::Guaranteed);
        // Limits alone: requests default to limits -> Guaranteed.
        let g2 = TaskSpec::new("g2").memory_limit("1GB").compute_limit(0.25);
        let r = g2.resolve().unwrap();
        assert_eq!(
            (r.qos, r.memory_request, r.compute_request),
            (QosClass::Guaranteed, 1_000_000_000, 0.25)
        );
        assert_eq!(
            TaskSpec::new("b").resolve().unwrap().qos,
            QosClass::BestEffort
        );
        for b in [
            TaskSpec::new("b").memory_request("1GB"),
            TaskSpec::new("b").memory("1GB", "2GB").compute(0.5, 0.5),
            TaskSpec::new("b").memory("1GB", "1GB"),
            TaskSpec::new("b").compute(0.25, 0.5),
            TaskSpec::new("b").memory_limit("1GB"),
        ] {
            assert_eq!(b.resolve().unwrap().qos, QosClass::Burstable, "{b:?}");
        }
    }

    #[test]
    fn contradictions_are_errors() {
        let e = TaskSpec::new("x")
            .memory_request("1GB")
            .qos(QosClass::Guaranteed)
            .resolve();
        assert!(matches!(e, Err(Error::InvalidSpec { ref what, .. }) if what == "qos"));
        assert!(TaskSpec::new("x")
            .qos(QosClass::Burstable)
            .resolve()
            .is_err());
        assert!(TaskSpec::new("x").compute(0.6, 0.5).resolve().is_err());
        assert!(TaskSpec::new("x").compute_request(0.0).resolve().is_err());
        assert!(TaskSpec::new("x").compute_request(1.5).resolve().is_err());
        assert!(TaskSpec::new("x")
            .compute_request(f64::NAN)
            .resolve()
            .is_err());
        assert!(TaskSpec::new("x").memory_request("lots").resolve().is_err());
        assert!(TaskSpec::new("x").memory_limit(0u64).resolve().is_err());
        assert!(TaskSpec::new("x").partition(" ").resolve().is_err());
        assert!(TaskSpec::new("x")
            .timeout(Duration::ZERO)
            .resolve()
            .is_err());
        assert_eq!(
            TaskSpec::new("x")
                .timeout(Duration::from_millis(5))
                .resolve()
                .unwrap()
                .timeout,
            Some(Duration::from_millis(5))
        );
        assert!("gold".parse::<QosClass>().is_err());
        assert_eq!(
            "best-effort".parse::<QosClass>().unwrap(),
            QosClass::BestEffort
        );
    }

    proptest! {
        /// The derived class always agrees with the Kubernetes rule, and an explicit class is
        /// accepted exactly when it equals the derived one.
        #[test]
        fn derivation_matches_rule(mr in proptest::option::of(0u64..10), ml in proptest::option::of(1u64..10),
                                   cr in proptest::option::of(1u32..10), cl in proptest::option::of(1u32..10),
                                   explicit in 0usize..3) {
            let mut s = TaskSpec::new("p");
            s.memory_request = mr.map(ByteSize::Bytes);
            s.memory_limit = ml.map(ByteSize::Bytes);
            s.compute_request = cr.map(|c| c as f64 / 10.0);
            s.compute_limit = cl.map(|c| c as f64 / 10.0);
            let valid = mr.zip(ml).is_none_or(|(r, l)| r <= l) && cr.zip(cl).is_none_or(|(r, l)| r <= l);
            match s.resolve() {
                Err(_) => prop_assert!(!valid),
                Ok(r) => {
                    prop_assert!(valid);
                    let expect = if mr.is_none() && ml.is_none() && cr.is_none() && cl.is_none() {
                        QosClass::BestEffort
                    } else if ml.is_some() && cl.is_some() && mr.is_none_or(|m| Some(m) == ml) && cr.is_none_or(|c| Some(c) == cl) {
                        QosClass::Guaranteed
                    } else { QosClass::Burstable };
                    prop_assert_eq!(r.qos, expect);
                    let q = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort][explicit];
                    prop_assert_eq!(s.clone().qos(q).resolve().is_ok(), q == expect);
                }
            }
        }
    }
}
