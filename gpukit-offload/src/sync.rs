//! The lock used for the dispatcher's state: `std::sync::Mutex` without poisoning.
//!
//! Why not parking_lot here: a forked child must be able to release a lock its parent's fork
//! handler took (see [`crate::fork`]). Releasing a parking_lot mutex that other threads were
//! parked on at the fork can hand it to one of those threads (which do not exist in the child)
//! or wait on the parking lot's own bucket locks; the child then blocks forever on its next
//! lock (seen: a forked child hung in the learner). `std`'s futex mutex just stores 0 and wakes
//! nobody, so dropping the guard in the child leaves it free.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A mutex whose guard is taken whatever a panicking holder left (the state stays usable:
/// every critical section here is a few map updates).
#[derive(Debug, Default)]
pub(crate) struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    /// A new lock.
    pub(crate) const fn new(v: T) -> Lock<T> {
        Lock(Mutex::new(v))
    }

    /// Takes the lock.
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
