//! Sleeping until something in the lock directory may have changed, interruptibly.
//!
//! Waiters watch the lock directory with inotify: a releasing holder removes its claim record
//! (a delete event), a holder that dies has its record's descriptor closed by the kernel (a
//! close-after-write event, which comes after the kernel dropped its process-owned lock), a
//! departing waiter removes its ticket, and a new claim (a sibling rank that may be shared) is
//! a create event. Waiters keep the descriptors of records they examine open, so their checks
//! generate no events that matter. Because the tree lock of a dead holder's record is dropped
//! only after the close event, and inotify may be unavailable (per-user instance limit), waits
//! also time out on a short exponential backoff (a quarter millisecond doubling to a cap), so a
//! release is never missed for long.
//!
//! **Every sleep ends at the deadline, on cancellation, and (with
//! [`crate::GpuMutexBuilder::interrupt_on_signals`]) when a signal the program handles
//! arrives.** Sleeping is `ppoll(2)` on the inotify descriptor and the cancel tokens' pipes. In
//! signal mode the waiting thread blocks the interrupting signals (`SIGINT`, `SIGTERM`,
//! `SIGHUP`, `SIGQUIT`, `SIGALRM`, `SIGUSR1`, `SIGUSR2` that have a handler installed) for the
//! whole acquisition and lets only them through inside `ppoll`, with every other signal held
//! back there: a `ppoll` that fails with `EINTR` was then interrupted by one of them (and the
//! program's handler has run), and one that arrives between two sleeps stays pending until the
//! next `ppoll`, which it interrupts at once. Other signals are delivered when `ppoll` returns
//! (within one backoff step). Process-directed signals go to the main thread first, so this
//! works when the waiting thread is the one the signal is delivered to.
//!
//! **Inotify instances are pooled per process, never closed after a wait.** Closing an inotify
//! instance that has had a watch blocks the closing thread for a kernel timer tick plus an SRCU
//! grace period (`fsnotify_destroy_group` waits for the mark reaper): 7-20 ms on the VMs this
//! was measured on. When every acquire created and closed its own instance, that close ran on
//! the waiter's thread right after the grant, before `acquire` returned, and it *was* the
//! hand-over latency (~13 ms median). A [`Watcher`] now takes an idle instance from a small
//! process-wide pool (or creates one), adds its watch, and on drop removes the watch
//! (`inotify_rm_watch`, microseconds, does not wait) and returns the instance to the pool. Idle
//! pooled instances have no watch, so they receive no events and cost no kernel work. Pool
//! entries are tagged with the pid that created them: a `fork`ed child never uses an instance
//! it inherited (it would share the parent's event queue) and just closes its copy.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::lockdir::{LockDir, CLAIM_PREFIX, TICKET_PREFIX};

/// First re-check delay after a wake-up.
pub(crate) const BACKOFF_START: Duration = Duration::from_micros(250);
/// Re-check cap while inotify works. Releases, deaths, departures and new claims all arrive as
/// events (a wake resets the backoff to [`BACKOFF_START`], which covers a dead holder's tree
/// lock outliving its close event), so the timer is only a safety net. Every re-check takes the
/// join lock for a fraction of a millisecond, so a short cap would make many waiters crowd out
/// each other.
const BACKOFF_CAP_INOTIFY: Duration = Duration::from_millis(20);
/// Re-check cap when inotify is unavailable (pure polling).
const BACKOFF_CAP_POLLING: Duration = Duration::from_millis(2);

/// Why a sleep ended (cancellation, interruption and the deadline are errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Something changed in the directory.
    Event,
    /// The sleep's own duration passed.
    Timeout,
}

/// Idle inotify instances of this process (see the module docs). Each slot is empty
/// ([`POOL_EMPTY`]) or holds `pid << 32 | fd`: the pid of the process that put the descriptor
/// there. Lock-free, so a `fork` in the middle of a pool operation cannot leave a lock held in
/// the child.
static POOL: [AtomicU64; POOL_SLOTS] = [const { AtomicU64::new(POOL_EMPTY) }; POOL_SLOTS];
/// Pool size: the number of threads of one process that can wait at the same time without
/// creating a new instance (more are served, just not pooled).
const POOL_SLOTS: usize = 8;
const POOL_EMPTY: u64 = u64::MAX;

/// Takes an idle instance of this process from the pool. Instances inherited over `fork` are
/// closed instead (dropping this process's reference only; the parent keeps using its own).
fn pool_take() -> Option<OwnedFd> {
    let pid = std::process::id();
    for slot in &POOL {
        let v = slot.swap(POOL_EMPTY, Ordering::AcqRel);
        if v == POOL_EMPTY {
            continue;
        }
        let raw = (v & 0xffff_ffff) as u32 as RawFd;
        // SAFETY: the pool owned this descriptor (it was put there by `pool_put` through
        // `into_raw_fd`, in this process or in a parent before `fork`, which copied it into our
        // descriptor table), and the swap above made us its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if (v >> 32) as u32 == pid {
            return Some(fd);
        }
        drop(fd);
    }
    None
}

/// Returns an idle instance (without watches) to the pool. When the pool is full the instance
/// is closed on a short-lived thread, so the caller does not wait for the kernel's teardown.
fn pool_put(fd: OwnedFd) {
    let v = (u64::from(std::process::id()) << 32) | u64::from(fd.as_raw_fd() as u32);
    for slot in &POOL {
        if slot
            .compare_exchange(POOL_EMPTY, v, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // The pool owns it now.
            let _ = fd.into_raw_fd();
            return;
        }
    }
    // If the thread cannot be started, the closure (and so the descriptor) is dropped here.
    let _ = std::thread::Builder::new()
        .name("gpukit-inotify-close".into())
        .spawn(move || drop(fd));
}

/// An inotify watch on the lock directory (or nothing, when inotify is unavailable).
#[derive(Debug)]
pub(crate) struct Watcher {
    fd: Option<OwnedFd>,
    wd: libc::c_int,
}

impl Watcher {
    /// Watches the directory `dir` refers to (through its descriptor, so a directory that was
    /// renamed or replaced meanwhile is not watched by mistake). Falls back to plain timed sleeps
    /// when inotify cannot be set up.
    pub fn new(dir: &LockDir) -> Watcher {
        let polling = Watcher { fd: None, wd: -1 };
        let Ok(path) = std::ffi::CString::new(format!("/proc/self/fd/{}", dir.raw_fd())) else {
            return polling;
        };
        let fd = match pool_take() {
            Some(fd) => fd,
            None => {
                // SAFETY: plain syscall with constant flags; the result is checked.
                let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
                if fd < 0 {
                    return polling;
                }
                // SAFETY: `fd` was just returned by inotify_init1 and is owned by nobody else.
                unsafe { OwnedFd::from_raw_fd(fd) }
            }
        };
        // A pooled instance may still hold the IN_IGNORED of its previous watch.
        discard_pending(&fd);
        let mask = libc::IN_CLOSE_WRITE
            | libc::IN_CLOSE_NOWRITE
            | libc::IN_CREATE
            | libc::IN_DELETE
            | libc::IN_MOVED_FROM
            | libc::IN_ONLYDIR;
        // SAFETY: valid inotify fd and NUL-terminated path (a magic link to our directory).
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) };
        if wd < 0 {
            pool_put(fd);
            return polling;
        }
        Watcher { fd: Some(fd), wd }
    }

    /// The backoff cap that suits this watcher.
    pub fn backoff_cap(&self) -> Duration {
        if self.fd.is_some() {
            BACKOFF_CAP_INOTIFY
        } else {
            BACKOFF_CAP_POLLING
        }
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// Reads all pending events; true if any of them can change a decision. Events that only
    /// reflect somebody *reading* the directory (listing it, reading a record) are ignored, or
    /// every check by any waiter would wake every other waiter.
    fn drain(&self) -> bool {
        let Some(fd) = &self.fd else { return false };
        let mut relevant = false;
        // Aligned for inotify_event.
        let mut buf = [0u64; 1024];
        let hdr = std::mem::size_of::<libc::inotify_event>();
        loop {
            let bytes = std::mem::size_of_val(&buf);
            // SAFETY: reads into a valid local buffer of the stated length.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), bytes) };
            if n <= 0 {
                let e = io::Error::last_os_error();
                if n < 0 && e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return relevant;
            }
            let n = n as usize;
            // SAFETY: the kernel wrote `n` bytes of whole inotify_event records into `buf`.
            let data = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
            let mut off = 0;
            while off + hdr <= n {
                // SAFETY: `off + hdr <= n`; read_unaligned copes with any offset.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(data[off..].as_ptr().cast()) };
                let name_end = (off + hdr + ev.len as usize).min(n);
                let raw = &data[off + hdr..name_end];
                let name = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
                relevant |= is_relevant(ev.mask, name);
                off = name_end;
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            // SAFETY: valid inotify fd; `wd` is the watch this Watcher added (EINVAL if the
            // kernel already removed it, e.g. because the directory was deleted: harmless).
            unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), self.wd) };
            pool_put(fd);
        }
    }
}

/// Reads and drops whatever events are queued on a non-blocking inotify descriptor.
fn discard_pending(fd: &OwnedFd) {
    let mut buf = [0u64; 512];
    loop {
        // SAFETY: reads into a valid local buffer of the stated length.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                std::mem::size_of_val(&buf),
            )
        };
        if n > 0 {
            continue;
        }
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return;
    }
}

/// Which directory events may free a device, shorten the queue or create a shareable claim.
pub(crate) fn is_relevant(mask: u32, name: &[u8]) -> bool {
    if mask & libc::IN_Q_OVERFLOW != 0 {
        return true;
    }
    if name.starts_with(CLAIM_PREFIX.as_bytes()) {
        // Released (removed), its holder died (the kernel closed its read-write descriptor), or
        // a new claim that a sibling may share.
        return mask
            & (libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_CLOSE_WRITE | libc::IN_CREATE)
            != 0;
    }
    if name.starts_with(TICKET_PREFIX.as_bytes()) {
        // A waiter left (removed, or died); plain reads by other processes are ignored.
        return mask & (libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_CLOSE_WRITE) != 0;
    }
    false
}

/// The signals that end a wait in signal mode, when the program handles them.
const INTERRUPTING: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGALRM,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Signal mode for one acquisition (see the module docs): blocks the interrupting signals that
/// have a handler in this thread until dropped, and knows the mask to sleep with.
pub(crate) struct SignalMode {
    /// The thread's mask before, restored on drop.
    old: libc::sigset_t,
    /// The kernel mask (`_NSIG / 8` = 8 bytes) for `ppoll`: everything blocked except the
    /// interrupting signals this program handles and the thread did not block before.
    sleep_mask: u64,
}

impl SignalMode {
    pub fn enter() -> Result<SignalMode> {
        // SAFETY: sigset_t values are initialised by sigemptyset before use.
        let mut block: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to local sigsets.
        unsafe {
            libc::sigemptyset(&mut block);
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut old);
        }
        let mut sleep_mask = u64::MAX;
        for sig in INTERRUPTING {
            // SAFETY: an all-zero sigaction is valid for sigaction to overwrite.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: queries the disposition only (no new action).
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut sa) } != 0 {
                continue;
            }
            let handled = sa.sa_sigaction != libc::SIG_DFL && sa.sa_sigaction != libc::SIG_IGN;
            // SAFETY: valid sigset and signal number.
            let blocked_before = unsafe { libc::sigismember(&old, sig) } == 1;
            if handled && !blocked_before {
                // SAFETY: valid sigset and signal number.
                unsafe { libc::sigaddset(&mut block, sig) };
                sleep_mask &= !(1u64 << (sig - 1));
            }
        }
        // SAFETY: valid sigset pointers; only this thread's mask changes.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &block, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(Error::io(
                "pthread_sigmask",
                "(signal mode)",
                io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(SignalMode { old, sleep_mask })
    }
}

impl Drop for SignalMode {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `enter` for this thread; signals that arrived
        // meanwhile are delivered now, to the program's handlers.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// The limits of one acquisition: its deadline, its cancel tokens and its signal mode.
pub(crate) struct Waiter<'a> {
    pub started: Instant,
    /// `None`: no deadline (no timeout, or one too far away to represent).
    pub deadline: Option<Instant>,
    pub requested: usize,
    pub cancels: &'a [CancelToken],
    pub signals: Option<&'a SignalMode>,
}

impl Waiter<'_> {
    /// Errs with `Cancelled` or `Timeout` when the wait must end now.
    pub fn check(&self) -> Result<()> {
        if self.cancels.iter().any(|c| c.is_cancelled()) {
            return Err(Error::Cancelled);
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(self.timeout());
        }
        Ok(())
    }

    pub fn timeout(&self) -> Error {
        Error::Timeout {
            requested: self.requested,
            waited: self.started.elapsed(),
        }
    }

    /// Sleeps up to `dur` (never past the deadline) or until the watcher sees a relevant event.
    /// Errs on cancellation, interruption (signal mode) or when the deadline has passed.
    pub fn sleep(&self, dur: Duration, watcher: Option<&Watcher>) -> Result<Woken> {
        let until = Instant::now() + dur.min(Duration::from_secs(3600));
        loop {
            self.check()?;
            let mut left = until.saturating_duration_since(Instant::now());
            if let Some(d) = self.deadline {
                left = left.min(d.saturating_duration_since(Instant::now()));
            }
            if left.is_zero() {
                self.check()?;
                return Ok(Woken::Timeout);
            }
            let mut fds: Vec<libc::pollfd> = Vec::with_capacity(1 + self.cancels.len());
            fds.push(libc::pollfd {
                fd: watcher.map_or(-1, |w| w.raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            });
            for c in self.cancels {
                fds.push(libc::pollfd {
                    fd: c.poll_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            let ts = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            let mask: *const u64 = match self.signals {
                Some(s) => &s.sleep_mask,
                None => std::ptr::null(),
            };
            // SAFETY: `fds` and `ts` are valid for the call; `mask` is null or points to an
            // 8-byte kernel signal set (the size passed); negative fds are ignored by ppoll.
            // The raw syscall is used so that the C library does not edit the mask.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_ppoll,
                    fds.as_mut_ptr(),
                    fds.len() as libc::c_ulong,
                    &ts as *const libc::timespec,
                    mask,
                    8usize,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    if self.signals.is_some() {
                        // Only the interrupting signals can get through this mask.
                        return Err(Error::Interrupted);
                    }
                    // A signal: re-check cancellation and the deadline, then the directory.
                    return Ok(Woken::Event);
                }
                return Err(Error::io("ppoll", "(lock directory watch)", e));
            }
            if fds[1..].iter().any(|f| f.revents != 0) {
                return Err(Error::Cancelled);
            }
            if rc == 0 {
                continue;
            }
            if fds[0].revents != 0 && watcher.is_some_and(|w| w.drain()) {
                return Ok(Woken::Event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lockdir::Create;
    use std::fs::File;

    fn waiter<'a>(cancels: &'a [CancelToken], signals: Option<&'a SignalMode>) -> Waiter<'a> {
        Waiter {
            started: Instant::now(),
            deadline: Some(Instant::now() + Duration::from_secs(30)),
            requested: 1,
            cancels,
            signals,
        }
    }

    #[test]
    fn pooled_watcher_is_reused_and_still_sees_events() {
        let a = tempfile::tempdir().expect("tempdir");
        let b = tempfile::tempdir().expect("tempdir");
        let w0 = waiter(&[], None);
        for path in [a.path(), b.path(), a.path()] {
            let dir = LockDir::open(path, Create::No).expect("dir");
            let w = Watcher::new(&dir);
            if w.fd.is_none() {
                eprintln!("SKIPPED pooled_watcher_is_reused_and_still_sees_events: no inotify");
                return;
            }
            // Nothing pending from the previous use (its watch's IN_IGNORED was discarded).
            assert_eq!(
                w0.sleep(Duration::from_millis(1), Some(&w)).expect("sleep"),
                Woken::Timeout
            );
            let name = path.join("gpukit-claim.1.2.3");
            drop(File::create(&name).expect("create"));
            assert_eq!(
                w0.sleep(Duration::from_secs(5), Some(&w)).expect("sleep"),
                Woken::Event
            );
            std::fs::remove_file(&name).expect("rm");
        }
    }

    /// Dropping a watcher must not wait for the kernel's inotify teardown (7-20 ms per closed
    /// instance on the VMs this was measured on): it used to delay every contended `acquire`.
    #[test]
    fn dropping_a_watcher_does_not_block() {
        let t = tempfile::tempdir().expect("tempdir");
        let dir = LockDir::open(t.path(), Create::No).expect("dir");
        let mut v: Vec<Duration> = (0..9)
            .map(|_| {
                let w = Watcher::new(&dir);
                let s = Instant::now();
                drop(w);
                s.elapsed()
            })
            .collect();
        v.sort();
        assert!(v[4] < Duration::from_millis(2), "median drop {:?}", v[4]);
    }

    #[test]
    fn sleeps_end_at_deadline_and_on_cancel() {
        let tok = CancelToken::new().expect("token");
        let toks = [tok.clone()];
        let mut w = waiter(&toks, None);
        w.deadline = Some(Instant::now() + Duration::from_millis(30));
        let t0 = Instant::now();
        assert!(matches!(
            w.sleep(Duration::from_secs(100), None),
            Err(Error::Timeout { .. })
        ));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        w.deadline = None;
        let t2 = tok.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            t2.cancel();
        });
        assert!(matches!(
            w.sleep(Duration::from_secs(100), None),
            Err(Error::Cancelled)
        ));
        h.join().expect("join");
    }

    static USR1: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static WINCH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    extern "C" fn count(sig: libc::c_int) {
        let c = if sig == libc::SIGUSR1 { &USR1 } else { &WINCH };
        c.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn signal_mode_ends_sleeps_on_handled_signals_only() {
        for sig in [libc::SIGUSR1, libc::SIGWINCH] {
            // SAFETY: installs a handler that only touches atomics; a zeroed sigaction with
            // an empty mask is valid.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = count as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let mode = SignalMode::enter().expect("signal mode");
        let w = waiter(&[], Some(&mode));
        // A signal that arrives between two sleeps stays pending and ends the next sleep.
        // SAFETY: signals this very thread.
        unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
        assert_eq!(USR1.load(Ordering::SeqCst), 0, "blocked outside the sleep");
        let t0 = Instant::now();
        assert!(matches!(
            w.sleep(Duration::from_secs(30), None),
            Err(Error::Interrupted)
        ));
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert_eq!(USR1.load(Ordering::SeqCst), 1, "the program's handler ran");
        // An unhandled-by-policy signal (SIGWINCH) does not end the sleep; SIGUSR1 does.
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: signals the test thread, which is alive until it joins us.
            unsafe { libc::pthread_kill(me, libc::SIGWINCH) };
            std::thread::sleep(Duration::from_millis(60));
            // SAFETY: as above.
            unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
        });
        let t1 = Instant::now();
        assert!(matches!(
            w.sleep(Duration::from_secs(30), None),
            Err(Error::Interrupted)
        ));
        assert!(
            t1.elapsed() >= Duration::from_millis(80),
            "{:?}",
            t1.elapsed()
        );
        h.join().expect("join");
        assert_eq!(
            WINCH.load(Ordering::SeqCst),
            1,
            "SIGWINCH delivered after the sleep"
        );
        drop(mode);
        // Without signal mode a signal just wakes the sleep to re-check.
        let plain = waiter(&[], None);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: as above.
            unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
        });
        assert_eq!(
            plain.sleep(Duration::from_secs(30), None).expect("sleep"),
            Woken::Event
        );
        h.join().expect("join");
    }
}
