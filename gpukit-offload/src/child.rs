//! Running the program `offload run` wraps, with the signal rules of a shell and of system(3):
//! while it runs, this process ignores SIGINT and SIGQUIT (a terminal sends them to the whole
//! foreground process group, the program included, and the program decides what they mean;
//! before, the wrapper died at once and left the program running behind the shell's prompt,
//! and `timeout -s INT` lost the program's last output), and passes SIGTERM and SIGHUP on to
//! the program (sent to the wrapper alone, by a job runner or `kill`, they would otherwise end
//! the wrapper and orphan the program). The program starts with the dispositions this process
//! had before: ignored stays ignored (`nohup`, a background job), anything else is the default.
//! Several programs may run at once (threads of an embedding process): the rules hold while
//! any runs, and the dispositions come back when the last ends.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

/// The signals ignored while a program runs.
const IGNORED: [libc::c_int; 2] = [libc::SIGINT, libc::SIGQUIT];
/// The signals passed on to the programs.
const FORWARDED: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGHUP];
/// Programs running at once that a forwarded signal reaches.
const SLOTS: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const FREE: AtomicI32 = AtomicI32::new(0);
/// Process ids of the running programs (0: free), read by the signal handler.
static RUNNING: [AtomicI32; SLOTS] = [FREE; SLOTS];

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
/// How many of each forwarded signal (indexed as [`FORWARDED`]) this process has received
/// while programs ran: a program's starter reads them before the fork and again once the
/// program's slot is filled, and passes on itself what came in between (the handler found no
/// slot for it then).
static RECEIVED: [AtomicU64; FORWARDED.len()] = [ZERO; FORWARDED.len()];

/// Programs running, and the dispositions to restore when none is.
struct Installed {
    users: usize,
    saved: Vec<(libc::c_int, libc::sigaction)>,
}

static STATE: Mutex<Installed> = Mutex::new(Installed {
    users: 0,
    saved: Vec::new(),
});

extern "C" fn forward(sig: libc::c_int) {
    // counted first, so that a starter that reads the count after filling its slot sees every
    // signal this handler may have missed it for
    if let Some(i) = FORWARDED.iter().position(|s| *s == sig) {
        RECEIVED[i].fetch_add(1, SeqCst);
    }
    for slot in &RUNNING {
        let pid = slot.load(SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe; `pid` is a child of this process that has not
            // been reaped (its slot is cleared before it is).
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Sets `sig`'s handler, returning the previous disposition.
fn set(sig: libc::c_int, handler: libc::sighandler_t) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain data; zeroed is a valid empty value for it.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler;
    new.sa_flags = libc::SA_RESTART;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `new` and `old` are valid sigaction values owned by this frame; sigemptyset and
    // sigaction only write them (and the process's dispositions); `handler` is SIG_IGN or an
    // `extern "C" fn(c_int)` that only calls async-signal-safe functions.
    let r = unsafe {
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(sig, &new, &mut old)
    };
    if r == 0 {
        Ok(old)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn restore(saved: &[(libc::c_int, libc::sigaction)]) {
    for (sig, old) in saved {
        // SAFETY: `old` is a disposition sigaction returned for `sig` earlier.
        unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
    }
}

/// The first program installs the rules; returns whether each of IGNORED and FORWARDED was
/// ignored before, for the program's own start.
fn enter() -> io::Result<Vec<(libc::c_int, bool)>> {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if st.users == 0 {
        let mut saved = Vec::new();
        let plan = IGNORED.iter().map(|s| (*s, libc::SIG_IGN)).chain(
            FORWARDED
                .iter()
                .map(|s| (*s, forward as *const () as libc::sighandler_t)),
        );
        for (sig, h) in plan {
            match set(sig, h) {
                Ok(old) => saved.push((sig, old)),
                Err(e) => {
                    restore(&saved);
                    return Err(e);
                }
            }
        }
        st.saved = saved;
    }
    st.users += 1;
    Ok(st
        .saved
        .iter()
        .map(|(s, old)| (*s, old.sa_sigaction == libc::SIG_IGN))
        .collect())
}

fn leave() {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    st.users -= 1;
    if st.users == 0 {
        restore(&st.saved);
        st.saved.clear();
    }
}

/// Tests: where this process started with any of the signals the rules touch ignored (a test
/// binary started in the background by a non-interactive shell has SIGINT and SIGQUIT ignored,
/// one under `nohup` SIGHUP too), makes them the default, in the dispositions saved while
/// programs run as well, so that a test sees a wrapper started as from a terminal.
#[cfg(test)]
pub(crate) fn unignore_for_tests() {
    let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if st.users > 0 {
        for (_, old) in st.saved.iter_mut() {
            if old.sa_sigaction == libc::SIG_IGN {
                old.sa_sigaction = libc::SIG_DFL;
            }
        }
        return;
    }
    for sig in IGNORED.iter().chain(&FORWARDED) {
        if let Ok(old) = set(*sig, libc::SIG_DFL) {
            if old.sa_sigaction != libc::SIG_IGN {
                restore(&[(*sig, old)]);
            }
        }
    }
}

/// Runs `cmd` to its end under the rules of the module docs and returns its status.
pub(crate) fn run(cmd: &mut Command) -> io::Result<ExitStatus> {
    let before = enter()?;
    // SAFETY: the closure runs in the child between fork and exec: it only reads `before`
    // (moved in, no allocation) and calls sigemptyset and sigaction, which are
    // async-signal-safe, on values of its own frame.
    unsafe {
        cmd.pre_exec(move || {
            for (sig, ignored) in &before {
                let mut a: libc::sigaction = std::mem::zeroed();
                a.sa_sigaction = if *ignored {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                };
                libc::sigemptyset(&mut a.sa_mask);
                if libc::sigaction(*sig, &a, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        })
    };
    let seen: [u64; FORWARDED.len()] = std::array::from_fn(|i| RECEIVED[i].load(SeqCst));
    let result = cmd.spawn().and_then(|mut child| {
        let pid = child.id() as i32;
        #[cfg(test)]
        tests::BEFORE_SLOT.with(|h| {
            if let Some(f) = h.borrow_mut().take() {
                f();
            }
        });
        let slot = RUNNING
            .iter()
            .find(|s| s.compare_exchange(0, pid, SeqCst, SeqCst).is_ok());
        // a forwarded signal that came between the fork and the slot's filling reached nobody
        // (the program may already have run far enough to send one itself, as the tests'
        // `kill -TERM $PPID` does on a busy machine): pass it on now. One that comes after the
        // slot is filled and before this count is read reaches the program twice (it ends, or
        // runs its handler, on the first).
        for (i, sig) in FORWARDED.iter().enumerate() {
            if RECEIVED[i].load(SeqCst) != seen[i] {
                // SAFETY: kill on our own child, not yet reaped (it is reaped below).
                unsafe { libc::kill(pid, *sig) };
            }
        }
        // wait for the end without reaping, clear the slot, then reap: the pid cannot be reused
        // by another process while a forwarded signal may still be sent to it
        loop {
            // SAFETY: siginfo_t is plain data; zeroed is a valid value for it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid writes `info`, owned by this frame, for our own child `pid`
            // (WNOWAIT: it stays unreaped for `child.wait` below).
            let r = unsafe {
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                )
            };
            if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        if let Some(s) = slot {
            s.store(0, SeqCst);
        }
        child.wait()
    });
    leave();
    result
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::time::{Duration, Instant};

    thread_local! {
        /// Runs on this thread between the fork and the filling of the program's slot.
        pub(crate) static BEFORE_SLOT: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    /// Tests that run programs or send this process forwarded signals take turns (a forwarded
    /// signal reaches every running program of the process, another test's too).
    pub(crate) static PROGRAMS: Mutex<()> = Mutex::new(());

    /// A SIGTERM that reaches the wrapper after the fork but before the program's slot is filled
    /// (on a busy machine the program can get that far: CI saw `kill -TERM $PPID` lost, status
    /// 9 for 5) is passed on once the slot is filled. The window is held open here until the
    /// program has set its trap, and the signal raised inside it (sh runs the trap once its
    /// `sleep` ends).
    #[test]
    fn a_signal_between_the_fork_and_the_slot_reaches_the_program() {
        let _turn = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner());
        unignore_for_tests();
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let r = ready.clone();
        BEFORE_SLOT.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                let t0 = Instant::now();
                while !r.exists() && t0.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                // SAFETY: raise only delivers the signal to this thread; its handler is
                // `forward`, installed by `run` (async-signal-safe: atomics and kill).
                unsafe { libc::raise(libc::SIGTERM) };
            }));
        });
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!(
            "trap 'exit 5' TERM; touch '{}'; sleep 2; exit 9",
            ready.display()
        ));
        let status = run(&mut cmd).unwrap();
        assert!(ready.exists(), "the program never got going");
        assert_eq!(status.code(), Some(5), "{status:?}");
    }
}
