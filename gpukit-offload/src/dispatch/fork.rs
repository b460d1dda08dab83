//! The dispatcher across `fork()`: the locks held over it and the child's own bookkeeping (the
//! handlers themselves are registered by [`crate::fork`]).

use super::*;

/// The dispatcher's locks, held across `fork()` ([`Dispatcher::fork_hold`]).
pub(crate) struct ForkHold<'a> {
    _warned: std::sync::MutexGuard<'a, Vec<String>>,
    _missed: std::sync::MutexGuard<'a, Vec<ShapeOnly>>,
    _wake: std::sync::MutexGuard<'a, ()>,
    _learner: std::sync::MutexGuard<'a, crate::learn::State>,
    _libs: std::sync::MutexGuard<'static, ()>,
}

impl Dispatcher {
    /// Fork handler (before): the values a call makes on first use completed, then every lock
    /// a call can take, taken in one order and held across `fork()`; dropping the hold
    /// releases them (in the parent and in the child).
    pub(crate) fn fork_hold(&self) -> ForkHold<'_> {
        // first the values made on first use, which no lock covers (see `Load::settle`)
        self.load.settle();
        ForkHold {
            _warned: self.warned.lock(),
            _missed: self.missed_calls.lock(),
            _wake: self.wake.0.lock(),
            _learner: self.learner.fork_hold(),
            _libs: LibId::fork_hold(),
        }
    }

    /// Fork handler (child, after the hold was dropped): the child's own bookkeeping (see
    /// [`crate::fork`]).
    ///
    /// `cuda_at_fork`: the parent had loaded the CUDA driver when it forked. Such a child can
    /// never use CUDA (its calls are counted as `forked` and the summary says why); a child of
    /// a parent that had not (a worker pool forked before any heavy call) is a process of its
    /// own: it starts CUDA when its own calls pay for it.
    pub(crate) fn forked_child(&self, cuda_at_fork: bool) {
        self.stats.reset();
        self.learner.forked_child();
        self.missed_ns.store(0, Relaxed);
        self.missed_calls.lock().clear();
        // the eager start is the process's own: a child does not inherit it armed
        if self.eager_armed.swap(false, Relaxed) {
            self.compute_thresholds();
        }
        // a parent whose start failed (no driver) leaves the child as it is: no GPU, `no-gpu`
        let parent_started = matches!(self.core.get(), STARTING | READY);
        if self.config.gpu != GpuMode::Off && (cuda_at_fork || parent_started) {
            self.forked.store(true, Relaxed);
            self.core.state.store(FAILED, Relaxed);
            self.solver.state.store(FAILED, Relaxed);
            self.compute_thresholds();
        }
    }

    /// True in a `fork()` child that may not use CUDA (see [`Dispatcher::forked_child`]).
    pub fn is_forked_child(&self) -> bool {
        self.forked.load(Relaxed)
    }
}
