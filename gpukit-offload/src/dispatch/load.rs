//! The machine as it is at the moment of a decision: how many CPU-library calls of this process
//! are in flight beside the one being decided, and how much GPU work is queued ahead of it, in
//! this process and in the other processes that offload to the same GPU (a small shared load
//! board, [`Board`]). The calibrated profile prices each call as if it had the machine to
//! itself; [`price`] turns that estimate into the present one:
//!
//! * CPU: `k` CPU-library calls running at once (this one included) share the cores, each at
//!   about `1/k` of its calibrated speed (the library's threads are spread over all cores), so
//!   the CPU time is multiplied by `k`, at most by the number of cores;
//! * GPU: the call starts after the compute queued ahead of it (the GPU runs concurrent large
//!   calls side by side, but each of them alone fills it), so the queued seconds are added.
//!
//! Learning from times measured under contention would write the contention into the profile
//! as if it were the machine's speed (and every process merges its learning at exit,
//! compounding): a call measured while others were in flight is not learned from.
//!
//! The board: one file per user and GPU under `/dev/shm`, 64 slots of 32 bytes (process id,
//! queued GPU nanoseconds, the time of the last update), mapped shared. A process claims a slot
//! at its first GPU call (a free one, or one whose process is gone), adds and subtracts the
//! predicted compute time of its calls around each GPU run, and clears the slot at exit. Readers
//! sum the other live slots; an entry not updated for longer than what it claims plus
//! [`BOARD_STALE`] is ignored (a process killed mid-call). Processes of other users, and GPU work
//! that does not go through gpukit-offload, are not seen.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Slots on a board.
pub const BOARD_SLOTS: usize = 64;
const SLOT_BYTES: usize = 32;
const BOARD_BYTES: usize = BOARD_SLOTS * SLOT_BYTES;
/// An entry older than what it claims plus this is ignored.
pub const BOARD_STALE: Duration = Duration::from_secs(2);

/// The load seen by one decision.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Snapshot {
    /// Other CPU-library calls of this process in flight.
    pub cpu_others: u32,
    /// GPU compute seconds queued by this process's calls in flight.
    pub gpu_queued_s: f64,
    /// GPU compute seconds queued by other processes on the same GPU (the board).
    pub gpu_others_s: f64,
    /// Threads of this process that have made a call decided here (this one's included once
    /// it has): several mean a thread pool, whose other threads call the library, and take
    /// cores for their other work, at any moment.
    pub callers: u32,
}

impl Snapshot {
    /// True when nothing else runs: what is measured now is the machine's own speed.
    pub fn quiet(&self) -> bool {
        self.cpu_others == 0 && self.gpu_queued_s <= 0.0 && self.gpu_others_s <= 0.0
    }
}

/// The present times of an estimate: `(cpu_s, gpu_s)` under `load` on a machine with `cores`
/// cores (see the module docs).
pub fn price(cpu_s: f64, gpu_s: f64, load: &Snapshot, cores: usize) -> (f64, f64) {
    let k = (1 + load.cpu_others as usize).min(cores.max(1)) as f64;
    (
        cpu_s * k,
        gpu_s + load.gpu_queued_s.max(0.0) + load.gpu_others_s.max(0.0),
    )
}

/// Threads running beside a call at the moment of its decision (see [`running_beside`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Beside {
    /// Runnable threads of other processes.
    pub other_processes: u32,
    /// Running threads of this process that are none of: the calling thread, gpukit's own
    /// threads (named `gpukit-*`), the CUDA driver's (`cuda*`), and the CPU library's team of
    /// worker threads (see [`app_threads`]): the program's other threads at work (a thread pool
    /// making its next request's data, a loader), which hold cores the library's team needs.
    pub own: u32,
}

/// How long after a CPU-library call ends its team of worker threads may still spin waiting
/// for the next one: OpenBLAS spins 2^28 time-stamp cycles (0.1-0.15 s at 2-3 GHz) before it
/// sleeps, Intel's OpenMP runtime 200 ms (`KMP_BLOCKTIME`), GNU's far less.
pub const TEAM_SPIN: Duration = Duration::from_millis(300);

/// The threads running beside the calling thread now: other processes' runnable threads (the
/// kernel's count of runnable tasks, `/proc/loadavg`'s fourth field `running/total`, less this
/// process's own running threads, `/proc/self/task/*/stat` state `R`), and this process's own
/// (see [`Beside::own`]), where the CPU library's team has `team` threads and may be spinning
/// (`team_may_spin`: a call ended within [`TEAM_SPIN`]). `None` where `/proc` cannot be read.
/// A few hundred microseconds with a hundred threads: for decisions about calls of
/// milliseconds and more.
pub fn running_beside(team: u32, team_may_spin: bool) -> Option<Beside> {
    let all = runnable_tasks(&std::fs::read_to_string("/proc/loadavg").ok()?)?;
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() }.to_string();
    let tasks = std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            (t.file_name().to_string_lossy().into_owned(), stat)
        });
    let (own_running, others) = running_tasks(tasks, &me);
    Some(Beside {
        other_processes: all.saturating_sub(own_running),
        own: app_threads(others, team.saturating_sub(1), team_may_spin),
    })
}

/// Of this process's tasks (`(tid, stat line)`): how many are running (state `R`), and how
/// many of those are neither the calling thread `me` nor gpukit's (`gpukit-*`) nor the CUDA
/// driver's (`cuda*`) threads.
fn running_tasks(tasks: impl Iterator<Item = (String, String)>, me: &str) -> (u32, u32) {
    let (mut running, mut others) = (0u32, 0u32);
    for (tid, stat) in tasks {
        if task_state(&stat) != Some('R') {
            continue;
        }
        running += 1;
        let name = task_name(&stat).unwrap_or("");
        if tid != me && !name.starts_with("gpukit-") && !name.starts_with("cuda") {
            others += 1;
        }
    }
    (running, others)
}

/// Of `running` threads of this process (the caller and gpukit's excluded), those that are not
/// the CPU library's `workers` (its team less the calling thread). The team cannot be told
/// apart by name (OpenBLAS does not name its threads), but its spinning shows as a whole: right
/// after a call (`may_spin`) up to `workers` running threads are taken for the team; otherwise
/// the team is asleep, unless as many threads as it has are running (a team spinning after
/// its creation, or after a call made outside gpukit), and then they are taken for it.
pub fn app_threads(running: u32, workers: u32, may_spin: bool) -> u32 {
    if may_spin || running >= workers {
        running.saturating_sub(workers)
    } else {
        running
    }
}

/// The threads of the program's CPU library's team: the thread count its environment sets
/// (`OPENBLAS_NUM_THREADS`, `GOTO_NUM_THREADS`, `MKL_NUM_THREADS`, `OMP_NUM_THREADS`, in the
/// order OpenBLAS reads them; the first entry of an OpenMP list), else one per core.
pub fn team_size(cores: usize, env: impl Fn(&str) -> Option<String>) -> u32 {
    [
        "OPENBLAS_NUM_THREADS",
        "GOTO_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OMP_NUM_THREADS",
    ]
    .iter()
    .find_map(|k| {
        env(k)?
            .split(',')
            .next()?
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
    })
    .unwrap_or(cores.max(1) as u32)
}

/// The runnable tasks of a `/proc/loadavg` line (`0.52 0.58 0.59 3/1234 5678` -> 3).
fn runnable_tasks(loadavg: &str) -> Option<u32> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split('/')
        .next()?
        .parse()
        .ok()
}

/// The state letter of a `/proc/<pid>/task/<tid>/stat` line: the field after the command
/// name, which is in parentheses and may itself hold spaces and parentheses.
fn task_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The command name of a `/proc/<pid>/task/<tid>/stat` line (between the first `(` and the
/// last `)`).
fn task_name(stat: &str) -> Option<&str> {
    stat.get(stat.find('(')? + 1..stat.rfind(')')?)
}

/// This process's load counters and its slot on the GPU's board.
#[derive(Default)]
pub struct Load {
    cpu_inflight: AtomicU32,
    callers: AtomicU32,
    /// This load's key in the threads' [`CALLED_THROUGH`] lists (given at the first call).
    key: std::sync::OnceLock<u64>,
    /// What [`Load::beside`] reports instead of the machine's figure (tests: the machine they
    /// run on is not quiet).
    beside_fixed: std::sync::OnceLock<Option<Beside>>,
    /// When the last CPU-library call of this process ended (monotonic nanoseconds; 0: none
    /// yet): its team may spin for [`TEAM_SPIN`] after it.
    cpu_ended_ns: AtomicU64,
    team: std::sync::OnceLock<u32>,
    gpu_queued_ns: AtomicI64,
    board: std::sync::OnceLock<Option<Board>>,
    cores: std::sync::OnceLock<usize>,
}

/// Keys of loads (one per dispatcher) given out so far.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The loads (their keys) this thread has made a call through.
    static CALLED_THROUGH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Counts a CPU-library call in flight while it lives.
pub struct CpuTurn<'a>(&'a Load);

impl Drop for CpuTurn<'_> {
    fn drop(&mut self) {
        self.0.cpu_ended_ns.store(monotonic_ns(), Relaxed);
        self.0.cpu_inflight.fetch_sub(1, Relaxed);
    }
}

/// Counts a GPU call's predicted compute as queued while it lives (and publishes it).
pub struct GpuTurn<'a> {
    load: &'a Load,
    ns: i64,
}

impl Drop for GpuTurn<'_> {
    fn drop(&mut self) {
        let now = self.load.gpu_queued_ns.fetch_sub(self.ns, Relaxed) - self.ns;
        if let Some(Some(b)) = self.load.board.get() {
            b.publish(now.max(0) as u64);
        }
    }
}

impl Load {
    /// Completes the values a call computes on first use (the cores, the library's team, this
    /// load's key): the fork handler's first step ([`crate::fork`]). A `fork()` while another
    /// thread was computing one of them left it half-made in the child, whose next call then
    /// waited for it forever (seen: the child of a threaded parent hung in [`Load::cores`]);
    /// computing or waiting for them here, before the fork, leaves them complete in both. None
    /// has side effects (an affinity and environment read, a counter).
    pub fn settle(&self) {
        self.cores();
        self.team
            .get_or_init(|| team_size(self.cores(), |k| std::env::var(k).ok()));
        self.key.get_or_init(|| NEXT_KEY.fetch_add(1, Relaxed));
    }

    /// The cores CPU calls share (the process's affinity mask).
    pub fn cores(&self) -> usize {
        *self
            .cores
            .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The load a decision made now sees (the board is read once the GPU is in use).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            cpu_others: self.cpu_inflight.load(Relaxed),
            gpu_queued_s: self.gpu_queued_ns.load(Relaxed).max(0) as f64 * 1e-9,
            gpu_others_s: match self.board.get() {
                Some(Some(b)) => b.others_s(),
                _ => 0.0,
            },
            callers: self.callers.load(Relaxed),
        }
    }

    /// The threads running beside the calling thread now ([`running_beside`]), with this
    /// process's CPU-library team ([`team_size`]) taken as possibly spinning within
    /// [`TEAM_SPIN`] of its last call (or during one).
    pub fn beside(&self) -> Option<Beside> {
        if let Some(fixed) = self.beside_fixed.get() {
            return *fixed;
        }
        let team = *self
            .team
            .get_or_init(|| team_size(self.cores(), |k| std::env::var(k).ok()));
        let ended = self.cpu_ended_ns.load(Relaxed);
        let may_spin = self.cpu_inflight.load(Relaxed) > 0
            || (ended > 0 && monotonic_ns().saturating_sub(ended) < TEAM_SPIN.as_nanos() as u64);
        running_beside(team, may_spin)
    }

    /// Makes [`Load::beside`] report `b` from now on (tests).
    #[cfg(test)]
    pub fn fix_beside(&self, b: Option<Beside>) {
        let _ = self.beside_fixed.set(b);
    }

    /// The calling thread makes a call decided here: counted among the callers once.
    pub fn note_caller(&self) {
        let key = *self.key.get_or_init(|| NEXT_KEY.fetch_add(1, Relaxed));
        let first = CALLED_THROUGH
            .try_with(|c| {
                let mut c = c.borrow_mut();
                let first = !c.contains(&key);
                if first {
                    c.push(key);
                }
                first
            })
            .unwrap_or(false);
        if first {
            self.callers.fetch_add(1, Relaxed);
        }
    }

    /// A CPU-library call starts.
    pub fn cpu_turn(&self) -> CpuTurn<'_> {
        self.cpu_inflight.fetch_add(1, Relaxed);
        CpuTurn(self)
    }

    /// A GPU call predicted to compute for `compute_s` starts; `board` opens the GPU's board
    /// at the first call (`None`: none).
    pub fn gpu_turn(&self, compute_s: f64, board: impl FnOnce() -> Option<Board>) -> GpuTurn<'_> {
        let ns = (compute_s.max(0.0) * 1e9) as i64;
        let now = self.gpu_queued_ns.fetch_add(ns, Relaxed) + ns;
        if let Some(b) = self.board.get_or_init(board) {
            b.publish(now.max(0) as u64);
        }
        GpuTurn { load: self, ns }
    }

    /// Clears this process's board slot (exit).
    pub fn leave_board(&self) {
        if let Some(Some(b)) = self.board.get() {
            b.leave();
        }
    }
}

/// The board file of a GPU for this user: `dir/gpukit-offload-load-UID-DEVICE`.
pub fn board_path(dir: &Path, device: &str) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dev: String = device
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    dir.join(format!("gpukit-offload-load-{uid}-{dev}"))
}

/// The board key of the GPU a process uses: the first entry of `CUDA_VISIBLE_DEVICES` (its
/// ordinal 0), else "0".
pub fn device_key() -> String {
    std::env::var("CUDA_VISIBLE_DEVICES")
        .ok()
        .and_then(|v| v.split(',').next().map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0".into())
}

/// A shared load board (see the module docs), mapped.
pub struct Board {
    base: *mut u8,
    slot: usize,
    pid: u32,
}

// SAFETY: the mapping is only accessed through atomics; it lives as long as the Board.
unsafe impl Send for Board {}
// SAFETY: as above.
unsafe impl Sync for Board {}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid != 0
        && (unsafe { libc::kill(pid as i32, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

impl Board {
    /// Opens (creating, mode 0600) the board at `path` and claims a slot for this process;
    /// `None` when the file cannot be used or every slot belongs to a live process.
    pub fn open(path: &Path) -> Option<Board> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .ok()?;
        if f.metadata().ok()?.len() < BOARD_BYTES as u64 {
            f.set_len(BOARD_BYTES as u64).ok()?;
        }
        // SAFETY: a shared read-write mapping of the file's first BOARD_BYTES bytes (the file
        // was sized above); the descriptor may be closed afterwards.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BOARD_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let mut b = Board {
            base: base as *mut u8,
            slot: usize::MAX,
            pid: std::process::id(),
        };
        for s in 0..BOARD_SLOTS {
            let (pid, _, _) = b.slot(s);
            let cur = pid.load(Relaxed);
            let free = cur == 0 || (cur != b.pid && !alive(cur));
            if free && pid.compare_exchange(cur, b.pid, Relaxed, Relaxed).is_ok() {
                b.slot = s;
                break;
            }
            if cur == b.pid {
                b.slot = s;
                break;
            }
        }
        if b.slot == usize::MAX {
            return None;
        }
        b.publish(0);
        Some(b)
    }

    fn slot(&self, s: usize) -> (&AtomicU32, &AtomicU64, &AtomicU64) {
        // SAFETY: slot `s` < BOARD_SLOTS lies in the mapping; its fields are 4-, 8- and
        // 8-byte aligned (the mapping is page aligned, slots are 32 bytes) and only accessed
        // atomically by every process.
        unsafe {
            let p = self.base.add(s * SLOT_BYTES);
            (
                &*(p as *const AtomicU32),
                &*(p.add(8) as *const AtomicU64),
                &*(p.add(16) as *const AtomicU64),
            )
        }
    }

    fn publish(&self, queued_ns: u64) {
        let (_, q, t) = self.slot(self.slot);
        q.store(queued_ns, Relaxed);
        t.store(monotonic_ns(), Relaxed);
    }

    /// Seconds of GPU compute the other live entries have queued.
    pub fn others_s(&self) -> f64 {
        let now = monotonic_ns();
        let stale = BOARD_STALE.as_nanos() as u64;
        let mut sum = 0u64;
        for s in 0..BOARD_SLOTS {
            if s == self.slot {
                continue;
            }
            let (pid, q, t) = self.slot(s);
            if pid.load(Relaxed) == 0 {
                continue;
            }
            let queued = q.load(Relaxed);
            if queued > 0 && now.saturating_sub(t.load(Relaxed)) <= queued.saturating_add(stale) {
                sum = sum.saturating_add(queued);
            }
        }
        sum as f64 * 1e-9
    }

    fn leave(&self) {
        let (pid, q, _) = self.slot(self.slot);
        q.store(0, Relaxed);
        let _ = pid.compare_exchange(self.pid, 0, Relaxed, Relaxed);
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        self.leave();
        // SAFETY: unmaps the mapping made in `open`; no reference into it outlives `self`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, BOARD_BYTES) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fork handler's first step leaves every value a call makes on first use made, and
    /// the same values a call would have made.
    #[test]
    fn settle_makes_the_first_use_values() {
        let a = Load::default();
        assert!(a.cores.get().is_none() && a.team.get().is_none() && a.key.get().is_none());
        a.settle();
        assert_eq!(
            a.cores.get().copied(),
            Some(std::thread::available_parallelism().map_or(1, |n| n.get()))
        );
        assert_eq!(
            a.team.get().copied(),
            Some(team_size(a.cores(), |k| std::env::var(k).ok()))
        );
        let key = a.key.get().copied().expect("a key");
        // settling again changes nothing; another load gets another key
        a.settle();
        assert_eq!(a.key.get().copied(), Some(key));
        let b = Load::default();
        b.settle();
        assert_ne!(b.key.get().copied(), Some(key));
    }

    fn snap(cpu_others: u32, mine: f64, others: f64) -> Snapshot {
        Snapshot {
            cpu_others,
            gpu_queued_s: mine,
            gpu_others_s: others,
            callers: 1,
        }
    }

    /// `/proc`'s lines parsed, hostile command names included.
    #[test]
    fn loadavg_and_task_states_are_parsed() {
        assert_eq!(runnable_tasks("0.52 0.58 0.59 3/1234 5678\n"), Some(3));
        assert_eq!(runnable_tasks("0.52 0.58"), None);
        assert_eq!(runnable_tasks("a b c x/1 2"), None);
        assert_eq!(task_state("42 (python3) R 1 42"), Some('R'));
        assert_eq!(task_state("42 (a) b) S 1 42"), Some('S'));
        assert_eq!(task_state("42 (no end"), None);
        assert_eq!(task_state(""), None);
        assert_eq!(task_name("42 (a) b) S 1 42"), Some("a) b"));
        assert_eq!(task_name("42 (cuda-EvtHandlr) S 1"), Some("cuda-EvtHandlr"));
        assert_eq!(task_name("42 no name"), None);
    }

    /// This process's running threads are told apart: three spinning threads of the program
    /// count, three named as gpukit's, one named as the driver's and the caller do not (looked
    /// at through their own `/proc` entries: the test harness runs other tests' threads beside
    /// them); other processes' runnable threads are counted as theirs: three spinning child
    /// processes show, the spinning threads of this process do not.
    #[test]
    fn running_threads_are_told_apart() {
        if running_beside(16, false).is_none() {
            eprintln!("SKIPPED: no /proc here");
            return;
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel();
        let (counted, others) = std::thread::scope(|s| {
            for i in 0..7 {
                let name = match i {
                    0..=2 => "app",
                    3..=5 => "gpukit-test",
                    _ => "cuda-EvtHandlr",
                };
                let (tx, stop) = (tx.clone(), &stop);
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(s, move || {
                        // SAFETY: gettid has no preconditions.
                        tx.send(unsafe { libc::gettid() }.to_string()).unwrap();
                        while !stop.load(Relaxed) {
                            std::hint::spin_loop();
                        }
                    })
                    .unwrap();
            }
            // SAFETY: gettid has no preconditions.
            let me = unsafe { libc::gettid() }.to_string();
            let mut tids: Vec<String> = (0..7).map(|_| rx.recv().unwrap()).collect();
            tids.push(me.clone());
            let read = |tid: &String| {
                let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
                (tid.clone(), stat)
            };
            let counted = running_tasks(tids.iter().map(read), &me);
            let others = (0..20)
                .map(|_| running_beside(64, false).unwrap().other_processes)
                .min()
                .unwrap();
            stop.store(true, Relaxed);
            (counted, others)
        });
        assert_eq!(
            counted,
            (8, 3),
            "(running, counted): eight running, the three of the program counted"
        );
        assert!(
            others < 3,
            "this process's own threads counted as others': {others}"
        );
        let mut kids: Vec<_> = (0..3)
            .map(|_| {
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .expect("sh")
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let with_kids = (0..20)
            .map(|_| running_beside(64, false).unwrap().other_processes)
            .max()
            .unwrap();
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        assert!(with_kids >= 3, "three spinning processes, {with_kids} seen");
    }

    /// The CPU library's team: right after a call up to its workers are taken for it; else
    /// only when as many as it has run (all spinning, as after its creation); the program's
    /// threads beyond it are counted either way.
    #[test]
    fn the_library_team_is_told_from_the_programs_threads() {
        // OpenBLAS's team of 16 on 16 cores: 15 workers
        for (running, may_spin, own) in [
            (0, false, 0),
            (3, false, 3),  // a pool's three threads, the team asleep
            (15, false, 0), // the team spinning after its creation
            (18, false, 3), // ... beside the pool's three
            (10, true, 0),  // the team after a call, some asleep already
            (15, true, 0),
            (17, true, 2),
        ] {
            assert_eq!(
                app_threads(running, 15, may_spin),
                own,
                "{running} {may_spin}"
            );
        }
        // a single-threaded library has no team to discount
        assert_eq!(app_threads(2, 0, true), 2);
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                set.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(team_size(16, env(&[])), 16);
        assert_eq!(team_size(16, env(&[("OMP_NUM_THREADS", "4,2")])), 4);
        assert_eq!(
            team_size(
                16,
                env(&[("OMP_NUM_THREADS", "4"), ("OPENBLAS_NUM_THREADS", "2")])
            ),
            2
        );
        assert_eq!(team_size(16, env(&[("MKL_NUM_THREADS", "0")])), 16);
        assert_eq!(team_size(16, env(&[("GOTO_NUM_THREADS", "x")])), 16);
        assert_eq!(team_size(0, env(&[])), 1);
    }

    /// Each thread counts once per load, however many calls it makes, and not for another load.
    #[test]
    fn callers_are_threads_counted_once() {
        let (a, b) = (Load::default(), Load::default());
        assert_eq!(a.snapshot().callers, 0);
        a.note_caller();
        a.note_caller();
        assert_eq!(a.snapshot().callers, 1);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    a.note_caller();
                    a.note_caller();
                });
            }
        });
        assert_eq!(a.snapshot().callers, 4);
        b.note_caller();
        assert_eq!((a.snapshot().callers, b.snapshot().callers), (4, 1));
    }

    /// Four concurrent CPU callers on 16 cores: each call at a quarter of its speed; the GPU
    /// behind 0.3 s of queued work; alone, the calibrated figures.
    #[test]
    fn price_follows_the_simulated_load() {
        assert_eq!(price(1.0, 0.2, &Snapshot::default(), 16), (1.0, 0.2));
        assert!(Snapshot::default().quiet());
        let (c, g) = price(1.0, 0.2, &snap(3, 0.0, 0.0), 16);
        assert_eq!((c, g), (4.0, 0.2));
        // never more than the cores
        assert_eq!(price(1.0, 0.2, &snap(40, 0.0, 0.0), 8).0, 8.0);
        let (c, g) = price(1.0, 0.2, &snap(0, 0.1, 0.2), 16);
        assert!((c - 1.0).abs() < 1e-12 && (g - 0.5).abs() < 1e-12, "{g}");
        assert!(!snap(0, 0.0, 0.1).quiet());
    }

    /// The counters follow calls in flight from real threads (CPU turns and GPU turns).
    #[test]
    fn turns_count_calls_in_flight_from_threads() {
        let load = std::sync::Arc::new(Load::default());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(5));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (l, b) = (load.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let _t = l.cpu_turn();
                    b.wait(); // all four in flight
                    b.wait(); // the main thread has looked
                })
            })
            .collect();
        barrier.wait();
        assert_eq!(load.snapshot().cpu_others, 4);
        barrier.wait();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(load.snapshot().cpu_others, 0);
        {
            let _a = load.gpu_turn(0.25, || None);
            let _b = load.gpu_turn(0.5, || None);
            assert!((load.snapshot().gpu_queued_s - 0.75).abs() < 1e-9);
        }
        assert_eq!(load.snapshot().gpu_queued_s, 0.0);
    }

    /// Two processes' boards (two mappings of one file): each sees the other's queued work,
    /// not its own; a cleared or stale entry is not counted; a dead process's slot is reused.
    #[test]
    fn the_board_shows_other_processes_queues() {
        let dir = tempfile::tempdir().unwrap();
        let path = board_path(dir.path(), "GPU-1234/abc");
        assert!(path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .ends_with("GPU_1234_abc"));
        let a = Board::open(&path).unwrap();
        // a second "process": same pid here, so fake another live one (our parent)
        let mut b = Board::open(&path).unwrap();
        assert_eq!(a.slot, b.slot, "one slot per process");
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        b.slot = (a.slot + 1) % BOARD_SLOTS;
        b.pid = parent;
        b.slot(b.slot).0.store(parent, Relaxed);
        b.publish(300_000_000);
        assert!((a.others_s() - 0.3).abs() < 1e-9, "{}", a.others_s());
        a.publish(100_000_000);
        assert!((b.others_s() - 0.1).abs() < 1e-9);
        // stale: not updated for longer than it claims plus BOARD_STALE
        let (_, _, t) = b.slot(b.slot);
        t.store(monotonic_ns() - 10_000_000_000, Relaxed);
        assert_eq!(a.others_s(), 0.0);
        b.publish(0);
        assert_eq!(a.others_s(), 0.0);
        // a slot of a process that is gone is claimed again
        let (pid, _, _) = b.slot(b.slot);
        pid.store(0x7fff_fff0, Relaxed); // no such process
        b.slot(a.slot).0.store(0x7fff_fff1, Relaxed);
        let c = Board::open(&path).unwrap();
        assert!(c.slot == a.slot || c.slot == b.slot, "{}", c.slot);
        std::mem::forget(b);
    }
}
