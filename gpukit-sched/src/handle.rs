//! The handle of a submitted task: its admission result, live stats, cancellation, and its
//! result — by blocking ([`TaskHandle::wait`]) or as a [`Future`] that any executor can poll
//! (no executor is needed or assumed: the task's end wakes the stored waker).

use crate::error::{CancelReason, Error, Result};
use crate::plan::{Admission, TaskId};
use crate::scheduler::Inner;
use crate::stats::TaskStats;
use crate::task::{Stop, Task, TaskState};
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The handle of a submitted task.
///
/// **Dropping a handle cancels its task** (as [`cancel`](Self::cancel) does, with
/// [`CancelReason::HandleDropped`]) unless the task has ended: a service that gives up on a
/// task — a timeout around the future, an early return — leaks no GPU work. For
/// fire-and-forget, [`detach`](Self::detach) the handle: the task runs to its end and its
/// value is dropped then. [`wait`](Self::wait) and awaiting the future consume the outcome,
/// after which dropping the handle changes nothing.
///
/// ```no_run
/// # async fn doc(sched: &gpukit_sched::Scheduler) -> gpukit_sched::Result<()> {
/// use gpukit_sched::{TaskContext, TaskSpec};
/// let h = sched.submit(|_: &mut TaskContext| Ok::<_, std::io::Error>(42), TaskSpec::new("job"))?;
/// assert_eq!(h.await?, 42); // or h.wait()? on a thread that may block
/// # Ok(()) }
/// ```
pub struct TaskHandle<T> {
    pub(crate) task: Arc<Task>,
    pub(crate) value: Arc<Mutex<Option<T>>>,
    pub(crate) admission: Admission,
    pub(crate) inner: Arc<Inner>,
    /// Set by [`detach`](Self::detach): dropping does not cancel.
    pub(crate) detached: bool,
}

impl<T> Drop for TaskHandle<T> {
    fn drop(&mut self) {
        if !self.detached && !self.task.status.lock().resolved {
            self.inner
                .cancel(&self.task, Stop::Cancel(CancelReason::HandleDropped));
        }
    }
}

impl<T> std::fmt::Debug for TaskHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("id", &self.task.id)
            .field("admission", &self.admission)
            .finish()
    }
}

impl<T> TaskHandle<T> {
    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task.id
    }
    /// The admission result, decided at submit.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }
    /// Live statistics.
    pub fn stats(&self) -> TaskStats {
        self.inner.task_stats(&self.task)
    }
    /// The state now.
    pub fn state(&self) -> TaskState {
        self.task.status.lock().state
    }
    /// Whether it has its outcome, i.e. its state is final (the closure may still run when
    /// the outcome came from a stop past its grace period, see [`TaskStats::detached`]).
    pub fn is_done(&self) -> bool {
        self.task.status.lock().resolved
    }

    /// Calls `f` once with the task's final state when the task has its outcome.
    ///
    /// - If the task already has it, `f` runs at once, on the calling thread, before this
    ///   returns.
    /// - Otherwise `f` runs on the thread that decides the outcome, after the scheduler's
    ///   locks are released: a scheduler worker (the closure returned, or the task failed to
    ///   start), the scheduler's timer thread (a queued task's deadline passed, a stopped task
    ///   reached no safe point within the grace period), or the thread that called
    ///   [`cancel`](Self::cancel) or [`Scheduler::shutdown`](crate::Scheduler::shutdown) (a
    ///   queued task cancelled). Keep it short (set a flag, complete a future, send on a
    ///   channel): a worker runs it before it takes its next task.
    ///
    /// Callbacks run in the order they were registered, after blocking waiters were woken.
    /// The outcome is still there for [`wait`](Self::wait) or
    /// [`take_result`](Self::take_result). A panic in `f` is contained (caught, counted in
    /// [`SchedulerStats::callback_panics`](crate::SchedulerStats::callback_panics)); it never
    /// reaches the scheduler thread's other work, nor the caller when `f` runs at once.
    pub fn on_complete(&self, f: impl FnOnce(TaskState) + Send + 'static) {
        let state = {
            let mut s = self.task.status.lock();
            if !s.resolved {
                s.callbacks.push(Box::new(f));
                return;
            }
            s.state
        };
        if crate::task::run_callback(Box::new(f), state) {
            self.inner.callback_panics.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits at most `timeout` for the task's outcome without consuming the handle: its final
    /// state, or `None` when it has none yet. Any duration is accepted (`Duration::MAX` waits
    /// without a bound). Take the outcome with [`take_result`](Self::take_result).
    pub fn wait_for(&self, timeout: Duration) -> Option<TaskState> {
        let deadline = Instant::now().checked_add(timeout);
        let mut s = self.task.status.lock();
        while !s.resolved {
            match deadline {
                Some(d) => {
                    if self.task.done.wait_until(&mut s, d).timed_out() && !s.resolved {
                        return None;
                    }
                }
                None => self.task.done.wait(&mut s),
            }
        }
        Some(s.state)
    }

    /// The outcome, moved out, once the task has it: `None` while it has none;
    /// `Some(Err(Error::ResultTaken))` when it was already taken (by this,
    /// [`wait`](Self::wait) or the future).
    pub fn take_result(&self) -> Option<Result<T>> {
        if !self.is_done() {
            return None;
        }
        Some(self.take())
    }

    /// Lets the task run to its end without a handle (fire-and-forget): dropping a handle
    /// otherwise cancels its task. The task's value, if any, is dropped when it ends.
    pub fn detach(mut self) {
        self.detached = true;
    }

    /// Cancels the task. A queued task ends [`TaskState::Cancelled`] at once; a running one
    /// at its next safe point (allocation, launch,
    /// [`TaskContext::check`](crate::TaskContext::check)), or — if it reaches none — when the
    /// stop grace period
    /// ([`SchedulerConfig::stop_grace`](crate::SchedulerConfig::stop_grace)) has passed
    /// (detached). A closure that returns `Ok` before seeing the cancellation keeps its
    /// result. Returns false when the task had already ended or was already asked to stop.
    pub fn cancel(&self) -> bool {
        self.inner
            .cancel(&self.task, Stop::Cancel(CancelReason::Requested))
    }

    /// Blocks until the task has its outcome and returns it: the closure's value, its error
    /// (a gpukit-sched error as itself, any other as [`Error::TaskFailed`]), or why it did not
    /// run to the end (rejected, expired, cancelled, timed out, preempted, panicked).
    pub fn wait(self) -> Result<T> {
        {
            let mut s = self.task.status.lock();
            while !s.resolved {
                self.task.done.wait(&mut s);
            }
        }
        self.take()
    }

    /// Like [`wait`](Self::wait) with a timeout; `Err(self)` when it has no outcome yet. Any
    /// duration is accepted (`Duration::MAX` waits without a bound).
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<Result<T>, Self> {
        if self.wait_for(timeout).is_none() {
            return Err(self);
        }
        Ok(self.take())
    }

    /// Moves the outcome out (once).
    fn take(&self) -> Result<T> {
        let (state, error) = {
            let mut s = self.task.status.lock();
            if s.taken {
                return Err(Error::ResultTaken {
                    task: self.task.spec.name.clone(),
                });
            }
            s.taken = true;
            (s.state, s.error.take())
        };
        match (state, error) {
            (TaskState::Succeeded, _) => self.value.lock().take().ok_or_else(|| {
                Error::internal("taking a task's result", "succeeded without a value")
            }),
            (_, Some(e)) => Err(e),
            (state, None) => Err(Error::internal(
                "taking a task's result",
                format!("ended {state:?} without an error"),
            )),
        }
    }
}

impl<T> Future for TaskHandle<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        {
            let mut s = self.task.status.lock();
            if !s.resolved {
                let w = cx.waker();
                if !s.waker.as_ref().is_some_and(|old| old.will_wake(w)) {
                    s.waker = Some(w.clone());
                }
                return Poll::Pending;
            }
        }
        Poll::Ready(self.take())
    }
}
