//! The lowest CPU priority for the background CUDA start-up thread, so that it does not slow the
//! CPU calls that run meanwhile.
//!
//! Why it matters: an OpenBLAS call on a 16-core machine runs 16 threads, one per core, and the
//! call ends when the slowest one does. A start-up thread at the normal priority gets half of
//! the core it lands on, so one OpenBLAS thread runs at half speed and the whole call with it
//! (on the H200 host a dgesv 6000 that overlapped start-up took 0.75 s instead of 0.24-0.35 s).
//!
//! Why nice 19 and not `SCHED_IDLE`: both give the thread a tiny CFS weight (15 for nice 19,
//! 3 for `SCHED_IDLE`, against 1024 at nice 0), so either bounds what it takes from a busy core
//! to about 1.5 % or 0.3 %. The difference is in the threads the CUDA driver creates during
//! context creation: they inherit the creating thread's policy and nice value, and an
//! unprivileged process cannot undo either (raising priority back needs `CAP_SYS_NICE` or a
//! `RLIMIT_NICE` allowance). A `SCHED_IDLE` driver thread never preempts and is starved outright
//! while OpenBLAS keeps every core busy; a nice-19 one still gets its share and runs at once
//! when a core is free. nice 19 is the milder of the two and nearly as effective. The driver's
//! threads are returned to the previous nice value where that is permitted
//! ([`LowPriority::release_spawned`]); where it is not they stay at 19, which the offloaded
//! calls do not depend on (they synchronise on the calling thread).
//!
//! Linux only: elsewhere nothing changes.

//! CPU priority of the background CUDA start-up thread, so that it does not slow the CPU calls
//! that run meanwhile.
//!
//! Why it matters: an OpenBLAS call on a 16-core machine runs 16 threads, one per core, and the
//! call ends when the slowest one does. A start-up thread at the normal priority gets half of
//! the core it lands on, so one OpenBLAS thread runs at half speed and the whole call with it
//! (on the H200 host a dgesv 6000 that overlapped start-up took 0.75 s instead of 0.24-0.35 s).
//!
//! Why not simply nice 19 (or `SCHED_IDLE`) for the whole start-up: between calls OpenBLAS's 15
//! worker threads keep spinning (`sched_yield` loops, about 0.1 s after each call), so every
//! core stays busy at nice 0 through a numpy program's glue as well, and a nice-19 thread (CFS
//! weight 15 against 1024) would get about 1.5 % of a core all along, `SCHED_IDLE` (weight 3)
//! 0.3 %: a start-up of ~0.7 s of CPU would take tens of seconds and the large calls of the
//! first repetitions would all miss the GPU. So the thread is at the lowest priority exactly
//! while an intercepted CPU call is in flight, and at its normal priority otherwise:
//! * where the process may raise a thread's priority back (`CAP_SYS_NICE`, or a `RLIMIT_NICE`
//!   that allows the old value), the caller sets the start-up thread to nice 19 when a CPU call
//!   starts during start-up and back when it ends ([`set_nice`] on its thread id); nice rather
//!   than `SCHED_IDLE` because threads the CUDA driver creates inherit the creating thread's
//!   setting, and a driver thread left at `SCHED_IDLE` never preempts and starves outright under
//!   load; a nice-19 one still runs; those threads are returned to the normal value when
//!   start-up ends ([`StartThread::restore_spawned`]);
//! * everywhere, the start-up thread waits at the boundaries of its steps (library loading,
//!   context, lane, each warm-up call, buffer sizing) while a CPU call is in flight, so that
//!   where the priority cannot be toggled only a step already under way can overlap a call.
//!
//! Linux only: elsewhere priorities are left alone (the waits still apply).

/// The nice value of the start-up thread while a CPU call is in flight.
pub const START_NICE: i32 = 19;

/// The start-up thread's identity and normal priority.
#[derive(Debug)]
pub struct StartThread {
    /// Kernel thread id (0 where unknown).
    pub tid: i32,
    /// Its nice value at [`StartThread::current`].
    pub normal: i32,
    /// Whether its priority may be lowered and raised back.
    pub can_toggle: bool,
    #[cfg(target_os = "linux")]
    before: Vec<i32>,
}

impl StartThread {
    /// The calling thread; remembers the process's threads so that those created from here on
    /// can be told apart.
    pub fn current() -> StartThread {
        #[cfg(target_os = "linux")]
        {
            let tid = linux::gettid();
            let normal = linux::nice_of(tid).unwrap_or(0);
            StartThread {
                tid,
                normal,
                can_toggle: normal < START_NICE && linux::may_raise_to(normal),
                before: linux::tasks(),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            StartThread {
                tid: 0,
                normal: 0,
                can_toggle: false,
            }
        }
    }

    /// Sets the threads created since [`StartThread::current`] whose name says the CUDA driver
    /// made them (`cuda*`) and whose nice value is above the normal one back to the normal one,
    /// where permitted. Returns `(found, restored)`.
    pub fn restore_spawned(&self) -> (usize, usize) {
        #[cfg(target_os = "linux")]
        {
            let (mut found, mut restored) = (0, 0);
            for t in linux::tasks() {
                if t == self.tid || self.before.contains(&t) {
                    continue;
                }
                if !linux::comm(t).is_some_and(|c| c.starts_with("cuda")) {
                    continue;
                }
                if linux::nice_of(t).is_none_or(|n| n <= self.normal) {
                    continue;
                }
                found += 1;
                if set_nice(t, self.normal) {
                    restored += 1;
                }
            }
            (found, restored)
        }
        #[cfg(not(target_os = "linux"))]
        {
            (0, 0)
        }
    }
}

/// Sets a thread's nice value (Linux: `setpriority(PRIO_PROCESS, tid)` acts on that one
/// thread); false when refused or not supported.
pub fn set_nice(tid: i32, nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        linux::set_nice(tid, nice)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (tid, nice);
        false
    }
}

/// A thread's nice value, where known.
pub fn nice_of(tid: i32) -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        linux::nice_of(tid)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = tid;
        None
    }
}

#[cfg(target_os = "linux")]
mod linux {
    /// The kernel thread id of the calling thread.
    pub fn gettid() -> i32 {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as i32 }
    }

    /// The thread ids of this process.
    pub fn tasks() -> Vec<i32> {
        std::fs::read_dir("/proc/self/task")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A thread's name.
    pub fn comm(tid: i32) -> Option<String> {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// A thread's nice value (Linux's `setpriority`/`getpriority` with `PRIO_PROCESS` and a
    /// thread id act on that one thread).
    pub fn nice_of(tid: i32) -> Option<i32> {
        // SAFETY: errno is thread-local; resetting it distinguishes a nice value of -1 from an
        // error, as getpriority(2) documents.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: a plain query; an unknown tid is an error return, not undefined behaviour.
        let v = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
        // SAFETY: as above.
        let err = unsafe { *libc::__errno_location() };
        (v != -1 || err == 0).then_some(v)
    }

    /// Whether this process may set a thread's nice value down to `nice` after raising it:
    /// `CAP_SYS_NICE` in the effective set, or a `RLIMIT_NICE` soft limit of at least `20 - nice`.
    pub fn may_raise_to(nice: i32) -> bool {
        let cap = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let l = s.lines().find(|l| l.starts_with("CapEff:"))?;
                u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok()
            })
            .is_some_and(|caps| caps & (1 << 23) != 0); // CAP_SYS_NICE
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut r) } == 0;
        cap || (ok && r.rlim_cur >= (20 - nice).max(0) as libc::rlim_t)
    }

    /// Sets a thread's nice value; false when refused (raising priority without permission).
    pub fn set_nice(tid: i32, nice: i32) -> bool {
        // SAFETY: a plain setting on a thread of this process.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn toggles_only_the_given_thread_and_restores_cuda_named_children() {
        let outer = nice_of(linux::gettid());
        std::thread::spawn(|| {
            let me = StartThread::current();
            if me.can_toggle {
                assert!(set_nice(me.tid, START_NICE));
                assert_eq!(nice_of(me.tid), Some(START_NICE));
            }
            // threads spawned now inherit the setting (as the CUDA driver's threads do)
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let spawn = |name: &str, rx: std::sync::mpsc::Receiver<()>| {
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || {
                        let n = nice_of(linux::gettid());
                        let _ = rx.recv();
                        (n, nice_of(linux::gettid()))
                    })
                    .unwrap()
            };
            let (tx2, rx2) = std::sync::mpsc::channel::<()>();
            let cuda = spawn("cuda-EvtHandlr", rx);
            let other = spawn("worker", rx2);
            std::thread::sleep(std::time::Duration::from_millis(30));
            if me.can_toggle {
                assert!(set_nice(me.tid, me.normal));
                assert_eq!(nice_of(me.tid), Some(me.normal));
            }
            let (found, restored) = me.restore_spawned();
            tx.send(()).unwrap();
            tx2.send(()).unwrap();
            let (c0, c1) = cuda.join().unwrap();
            let (o0, o1) = other.join().unwrap();
            if me.can_toggle {
                assert_eq!((c0, o0), (Some(START_NICE), Some(START_NICE)));
                assert_eq!((found, restored), (1, 1));
                assert_eq!(c1, Some(me.normal), "cuda* thread restored");
                assert_eq!(o1, Some(START_NICE), "other threads left alone");
            } else {
                assert_eq!((found, restored), (0, 0));
            }
        })
        .join()
        .unwrap();
        assert_eq!(
            nice_of(linux::gettid()),
            outer,
            "the spawning thread is untouched"
        );
    }
}
