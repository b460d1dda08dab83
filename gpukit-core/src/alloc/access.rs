//! Stream order of the uses of one buffer's memory: the latest stream that used it.
//!
//! Every operation that queues work reading or writing a buffer on a stream first enters that
//! stream here ([`Access::enter`]): when another stream used the buffer last, the new stream is
//! ordered after everything queued on that one (an event recorded there now, waited on by the
//! new stream), and becomes the latest user. Each change of stream waits for the previous
//! latest user, so the latest user's queue ends after every use of the buffer queued so far:
//! a reader on another stream sees the last write, a writer waits for earlier readers and
//! writers, and a foreign stream that waits for the latest user
//! ([`GpuArray::make_ready_on_raw`](crate::GpuArray::make_ready_on_raw)) waits for all of them.
//! Reads are ordered like writes (two readers on different streams run one after the other):
//! the price of keeping one stream per buffer instead of a reader set, paid only when a buffer
//! moves between streams.
//!
//! Uses are ordered in the order their host calls are made: calls ordered on the host (by a
//! lock, a join, Python's GIL) run in that order on the device. Calls on one buffer made by
//! threads without any host ordering between them may run concurrently on the device, as any
//! unsynchronised writes would; they never reach memory outside the arrays they were given.
//!
//! Work on the same stream as the latest use needs nothing (one atomic load), which is the
//! common case: every operation of a thread runs on its current stream.

use crate::stream::Stream;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The latest stream that used a buffer (see the module docs).
pub(crate) struct Access {
    /// The latest user's key, read without the lock by [`Access::enter`]'s fast path. The
    /// stream it names is kept alive by `last`, so its handle cannot be reused meanwhile.
    last_key: AtomicU64,
    last: Mutex<Stream>,
}

impl Access {
    /// A buffer first used (allocated, or handed over) on `first`.
    pub(crate) fn new(first: &Stream) -> Self {
        Access {
            last_key: AtomicU64::new(first.key()),
            last: Mutex::new(first.clone()),
        }
    }

    /// Orders `stream` after every use so far and makes it the latest user. Returns whether the
    /// latest user changed.
    pub(crate) fn enter(&self, stream: &Stream) -> bool {
        if self.last_key.load(Ordering::Acquire) == stream.key() {
            return false;
        }
        let mut last = self.last.lock();
        if *last == *stream {
            return false;
        }
        stream.order_after(&last);
        *last = stream.clone();
        self.last_key.store(stream.key(), Ordering::Release);
        true
    }

    /// The latest user: its queue ends after every use queued so far.
    pub(crate) fn last(&self) -> Stream {
        self.last.lock().clone()
    }
}
