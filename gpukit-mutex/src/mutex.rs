//! [`GpuMutex`], its builder, and the acquisition protocol.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::cancel::CancelToken;
use crate::config::{self, Config};
use crate::error::{Error, Result};
use crate::guard::GpuGuard;
use crate::lockdir;
use crate::proc::{self, ProcId};
use crate::queue::{self, Decision, Request};
use crate::records::{self, ClaimKind, ClaimRecord, TicketRecord};
use crate::status::{self, Status};
use crate::wait::{Watcher, Woken, BACKOFF_START};

/// Builder for [`GpuMutex`]. Values set here win over the environment variables.
#[derive(Debug, Clone, Default)]
pub struct GpuMutexBuilder {
    visible: Option<Vec<u32>>,
    num_devices: Option<usize>,
    lock_dir: Option<PathBuf>,
    timeout: Option<Option<Duration>>,
    backfill: Option<bool>,
    cancel: Option<CancelToken>,
    ignore_env: bool,
}

impl GpuMutexBuilder {
    /// Devices this process may be granted, in preference order (physical indices, the
    /// `CUDA_VISIBLE_DEVICES` values that will be handed out).
    pub fn visible_devices(mut self, devices: impl IntoIterator<Item = u32>) -> Self {
        self.visible = Some(devices.into_iter().collect());
        self
    }

    /// Default request size for [`GpuMutex::lock`] (default: `GPUMUTEX_NUM_DEVICES`, else 1).
    pub fn num_devices(mut self, n: usize) -> Self {
        self.num_devices = Some(n);
        self
    }

    /// Lock directory (default: `GPUMUTEX_LOCK_DIR`, else `/tmp/libgpumutex`).
    pub fn lock_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.lock_dir = Some(dir.into());
        self
    }

    /// Default wait limit for [`GpuMutex::acquire`] and [`GpuMutex::lock`]
    /// (default: `GPUMUTEX_TIMEOUT`, else wait forever).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Some(timeout));
        self
    }

    /// Wait without limit, whatever `GPUMUTEX_TIMEOUT` says.
    pub fn no_timeout(mut self) -> Self {
        self.timeout = Some(None);
        self
    }

    /// Let this process's requests backfill (see [`crate::queue`]; default: `GPUMUTEX_BACKFILL`,
    /// else off).
    pub fn backfill(mut self, on: bool) -> Self {
        self.backfill = Some(on);
        self
    }

    /// A token that cancels every wait of the built mutex.
    pub fn cancel_token(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Do not read any `GPUMUTEX_*` configuration variable (builder values and defaults only).
    pub fn ignore_env(mut self) -> Self {
        self.ignore_env = true;
        self
    }

    fn env(&self, name: &'static str) -> Result<Option<String>> {
        if self.ignore_env {
            Ok(None)
        } else {
            config::env_var(name)
        }
    }

    /// Validates everything and prepares the lock directory (creating it if missing; see
    /// [`crate::lockdir::prepare`]). Every other setting is checked first, so a bad value
    /// leaves the file system untouched.
    pub fn build(self) -> Result<GpuMutex> {
        let visible = match &self.visible {
            Some(v) => config::check_device_slice(v)?,
            None => match self.env(config::ENV_VISIBLE_DEVICES)? {
                Some(s) => config::parse_device_list(&s)?,
                None => return Err(Error::NoVisibleDevices),
            },
        };
        let num_devices = match self.num_devices {
            Some(0) => return Err(Error::ZeroDevices),
            Some(n) => n,
            None => match self.env(config::ENV_NUM_DEVICES)? {
                Some(s) => config::parse_num_devices(config::ENV_NUM_DEVICES, &s)?,
                None => 1,
            },
        };
        if num_devices > visible.len() {
            return Err(Error::TooManyDevices {
                requested: num_devices,
                visible: visible.len(),
            });
        }
        let timeout = match self.timeout {
            Some(t) => t,
            None => match self.env(config::ENV_TIMEOUT)? {
                Some(s) if !s.trim().is_empty() => {
                    Some(config::parse_timeout_secs(config::ENV_TIMEOUT, &s)?)
                }
                _ => None,
            },
        };
        let backfill = match self.backfill {
            Some(b) => b,
            None => match self.env(config::ENV_BACKFILL)? {
                Some(s) => config::parse_bool(config::ENV_BACKFILL, &s)?,
                None => false,
            },
        };
        let (lock_dir, is_default) = match &self.lock_dir {
            Some(d) => (d.clone(), false),
            None => match self.env(config::ENV_LOCK_DIR)? {
                Some(s) => (PathBuf::from(s), false),
                None => (PathBuf::from(config::DEFAULT_LOCK_DIR), true),
            },
        };
        let lock_dir = lockdir::absolute(&lock_dir)?;
        lockdir::prepare(&lock_dir, is_default)?;
        Ok(GpuMutex {
            cfg: Config {
                visible_devices: visible,
                num_devices,
                lock_dir,
                lock_dir_is_default: is_default,
                timeout,
                backfill,
            },
            cancel: self.cancel,
            honour_job_root: !self.ignore_env,
        })
    }
}

/// Fair, crash-safe, exclusive access to GPU devices for a process tree. See the crate docs.
#[derive(Debug, Clone)]
pub struct GpuMutex {
    cfg: Config,
    cancel: Option<CancelToken>,
    honour_job_root: bool,
}

impl GpuMutex {
    /// A builder; values set on it win over the environment.
    pub fn builder() -> GpuMutexBuilder {
        GpuMutexBuilder::default()
    }

    /// Configuration from the environment only (`GPUMUTEX_VISIBLE_DEVICES` is required).
    pub fn from_env() -> Result<Self> {
        Self::builder().build()
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Acquires the configured number of devices (`num_devices`), waiting up to the configured
    /// timeout (forever if none).
    pub fn lock(&self) -> Result<GpuGuard> {
        self.acquire(self.cfg.num_devices)
    }

    /// Acquires `n` devices, waiting in FIFO order up to the configured timeout (forever if
    /// none). Returns [`Error::Timeout`] at the deadline and [`Error::Cancelled`] if the
    /// builder's cancel token fires.
    pub fn acquire(&self, n: usize) -> Result<GpuGuard> {
        self.acquire_with(n, self.cfg.timeout, None)
    }

    /// Acquires `n` devices, waiting at most `timeout`.
    pub fn acquire_timeout(&self, n: usize, timeout: Duration) -> Result<GpuGuard> {
        self.acquire_with(n, Some(timeout), None)
    }

    /// Takes `n` devices if that is possible right now without overtaking anybody in the
    /// queue (or by sharing an ancestor's claim); `Ok(None)` otherwise. Never waits, except for
    /// the microseconds of the join lock.
    pub fn try_acquire(&self, n: usize) -> Result<Option<GpuGuard>> {
        self.check_request(n)?;
        let mut s = Session::open(self)?;
        s.try_once(n)
    }

    /// Acquires `n` devices, waiting at most `timeout` (`None`: forever), cancellable through
    /// `cancel` as well as through the builder's token.
    pub fn acquire_with(
        &self,
        n: usize,
        timeout: Option<Duration>,
        cancel: Option<&CancelToken>,
    ) -> Result<GpuGuard> {
        self.check_request(n)?;
        let started = Instant::now();
        let deadline = timeout.map(|t| started + t);
        let mut s = Session::open(self)?;
        s.cancels = [self.cancel.clone(), cancel.cloned()]
            .into_iter()
            .flatten()
            .collect();
        s.acquire(n, started, deadline)
    }

    /// Who holds each visible device (and any other device with a lock file in the directory)
    /// and who waits, in queue order.
    pub fn status(&self) -> Result<Status> {
        status::read_status(&self.cfg.lock_dir, &self.cfg.visible_devices)
    }

    fn check_request(&self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(Error::ZeroDevices);
        }
        if n > self.cfg.visible_devices.len() {
            return Err(Error::TooManyDevices {
                requested: n,
                visible: self.cfg.visible_devices.len(),
            });
        }
        Ok(())
    }
}

/// The `GPUMUTEX_JOB_ROOT` value naming the calling process (`<pid>:<starttime>`). A launcher
/// that exports it makes its whole subtree share the first claim any of its descendants takes
/// (torchrun-style ranks that are siblings); the value is honoured only by true descendants.
pub fn job_root_env_value() -> Option<String> {
    proc::self_id().map(|id| format!("{}:{}", id.pid, id.start))
}

static CLAIM_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Held join lock; unlocks on drop.
pub(crate) struct QueueLock<'a> {
    file: &'a File,
}

impl Drop for QueueLock<'_> {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Takes the join lock, spinning briefly (it is held for microseconds at a time) and giving up
/// at `deadline` or on cancellation.
pub(crate) fn lock_queue<'a>(
    file: &'a File,
    path: &Path,
    deadline: Option<Instant>,
    cancels: &[CancelToken],
    requested: usize,
    started: Instant,
) -> Result<QueueLock<'a>> {
    // The lock is held for tens of microseconds: yield-spin first (sleeping, even for
    // microseconds, can cost a whole timer tick on VMs without fine-grained timers), then
    // back off with short sleeps so a stuck holder does not burn a core.
    let spin_until = Instant::now() + Duration::from_millis(2);
    let mut pause = Duration::from_micros(50);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(QueueLock { file }),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(Error::io("flock", path, e)),
        }
        if cancels.iter().any(|c| c.is_cancelled()) {
            return Err(Error::Cancelled);
        }
        if let Some(d) = deadline {
            if Instant::now() >= d {
                return Err(Error::Timeout {
                    requested,
                    waited: started.elapsed(),
                });
            }
        }
        if Instant::now() < spin_until {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}

struct CachedTicket {
    file: File,
    record: Option<TicketRecord>,
}

struct OwnTicket {
    name: String,
    path: PathBuf,
    file: Option<File>,
    record: TicketRecord,
}

impl Drop for OwnTicket {
    fn drop(&mut self) {
        // Unlink first, then close (which drops our flock): other waiters see the ticket gone.
        let _ = fs::remove_file(&self.path);
        self.file.take();
    }
}

/// One acquisition attempt's state: descriptors are kept open for the whole wait so that the
/// periodic checks create no inotify events (see [`crate::wait`]).
struct Session<'m> {
    m: &'m GpuMutex,
    dir: PathBuf,
    queue_path: PathBuf,
    queue_file: File,
    dev_files: HashMap<u32, File>,
    tickets: HashMap<String, CachedTicket>,
    cancels: Vec<CancelToken>,
    me: ProcId,
    uid: u32,
    /// This process's ancestry for the current check, read from `/proc` *before* taking the
    /// join lock when the previous check saw live claims (the walk takes a few `/proc` reads per
    /// ancestor; holding the join lock meanwhile delays releases and other waiters). `None`:
    /// read lazily, under the lock, only if the check finds a claim.
    ancestry: Option<Vec<ProcId>>,
    /// Whether the last check saw any live claim record.
    saw_claims: bool,
}

struct Scan {
    /// Live tickets in FIFO order (name, record).
    live: Vec<(String, TicketRecord)>,
    max_seq: Option<u64>,
}

impl<'m> Session<'m> {
    fn open(m: &'m GpuMutex) -> Result<Self> {
        let dir = m.cfg.lock_dir.clone();
        lockdir::validate_existing(&dir)?;
        let queue_path = dir.join(lockdir::QUEUE_LOCK);
        let queue_file = lockdir::open_lock_file(&queue_path)?;
        let me = proc::self_id_cached().ok_or_else(|| {
            Error::io(
                "read",
                "/proc/self/stat",
                std::io::Error::other("cannot read own process identity"),
            )
        })?;
        // SAFETY: getuid() cannot fail and has no preconditions.
        let uid = unsafe { libc::getuid() };
        Ok(Session {
            m,
            dir,
            queue_path,
            queue_file,
            dev_files: HashMap::new(),
            tickets: HashMap::new(),
            cancels: Vec::new(),
            me,
            uid,
            ancestry: None,
            saw_claims: false,
        })
    }

    fn cancelled(&self) -> bool {
        self.cancels.iter().any(|c| c.is_cancelled())
    }

    fn my_request(&self, n: usize) -> Request {
        Request {
            candidates: self.m.cfg.visible_devices.clone(),
            n,
            backfill: self.m.cfg.backfill,
        }
    }

    fn try_once(&mut self, n: usize) -> Result<Option<GpuGuard>> {
        let started = Instant::now();
        let queue_file = self
            .queue_file
            .try_clone()
            .map_err(|e| Error::io("dup", &self.queue_path, e))?;
        let _q = lock_queue(&queue_file, &self.queue_path, None, &[], n, started)?;
        let names = self.list_dir()?;
        if let Some(g) = self.try_inherit(n, &names)? {
            return Ok(Some(g));
        }
        let scan = self.scan(None, &names)?;
        let mut reqs: Vec<Request> = scan.live.iter().map(|(_, t)| to_request(t)).collect();
        reqs.push(self.my_request(n));
        let free = self.free_devices(&reqs)?;
        match queue::decide(&reqs, &free).pop() {
            Some(Decision::Grant(devs)) => self.grant(&devs).map(Some),
            _ => Ok(None),
        }
    }

    fn acquire(
        &mut self,
        n: usize,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Result<GpuGuard> {
        if self.cancelled() {
            return Err(Error::Cancelled);
        }
        let queue_file = self
            .queue_file
            .try_clone()
            .map_err(|e| Error::io("dup", &self.queue_path, e))?;
        let timeout_err = || Error::Timeout {
            requested: n,
            waited: started.elapsed(),
        };
        // Fast path, and creation of the ticket, under one hold of the join lock.
        let (own, watcher) = {
            let _q = lock_queue(
                &queue_file,
                &self.queue_path,
                deadline,
                &self.cancels,
                n,
                started,
            )?;
            let names = self.list_dir()?;
            if let Some(g) = self.try_inherit(n, &names)? {
                return Ok(g);
            }
            let scan = self.scan(None, &names)?;
            let mut reqs: Vec<Request> = scan.live.iter().map(|(_, t)| to_request(t)).collect();
            reqs.push(self.my_request(n));
            let free = self.free_devices(&reqs)?;
            if let Some(Decision::Grant(devs)) = queue::decide(&reqs, &free).pop() {
                return self.grant(&devs);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timeout_err());
            }
            // Watch before the join lock is released: every later release needs the join lock,
            // so its events come after this point.
            let watcher = Watcher::new(&self.dir)?;
            let own = self.create_ticket(scan.max_seq.map_or(0, |s| s + 1), n)?;
            (own, watcher)
        };
        let cancel_fd = self.cancels.first().map(|c| c.poll_fd());
        let extra_cancels: Vec<CancelToken> = self.cancels.iter().skip(1).cloned().collect();
        let cap = watcher.backoff_cap();
        let mut backoff = BACKOFF_START;
        loop {
            // The ancestry walk happens here, outside the join lock (see `Session::ancestry`).
            self.ancestry = (self.saw_claims || wants_job_root()).then(proc::ancestry_of_self);
            {
                let _q = lock_queue(
                    &queue_file,
                    &self.queue_path,
                    deadline,
                    &self.cancels,
                    n,
                    started,
                )?;
                let names = self.list_dir()?;
                if let Some(g) = self.try_inherit(n, &names)? {
                    drop(own);
                    return Ok(g);
                }
                let scan = self.scan(Some(&own), &names)?;
                let reqs: Vec<Request> = scan.live.iter().map(|(_, t)| to_request(t)).collect();
                let free = self.free_devices(&reqs)?;
                let decisions = queue::decide(&reqs, &free);
                let mine = scan.live.iter().position(|(name, _)| *name == own.name);
                if let Some(Decision::Grant(devs)) = mine.and_then(|i| decisions.get(i)) {
                    let devs = devs.clone();
                    let g = self.grant(&devs)?;
                    drop(own);
                    return Ok(g);
                }
            }
            if self.cancelled() {
                return Err(Error::Cancelled);
            }
            let mut sleep = backoff;
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return Err(timeout_err());
                }
                sleep = sleep.min(d - now);
            }
            // A second token (builder + call) is checked by flag only, at backoff granularity.
            if !extra_cancels.is_empty() {
                sleep = sleep.min(Duration::from_millis(5));
            }
            match watcher.wait(sleep, cancel_fd) {
                Woken::Cancelled => return Err(Error::Cancelled),
                Woken::Event => backoff = BACKOFF_START,
                Woken::Timeout => backoff = (backoff * 2).min(cap),
            }
        }
    }

    fn dev_file(&mut self, dev: u32) -> Result<&File> {
        if !self.dev_files.contains_key(&dev) {
            let f = lockdir::open_lock_file(&self.dir.join(lockdir::device_lock_name(dev)))?;
            self.dev_files.insert(dev, f);
        }
        Ok(&self.dev_files[&dev])
    }

    /// Probes every device any request could use; must run under the join lock.
    fn free_devices(&mut self, reqs: &[Request]) -> Result<BTreeSet<u32>> {
        let all: BTreeSet<u32> = reqs
            .iter()
            .flat_map(|r| r.candidates.iter().copied())
            .collect();
        let mut free = BTreeSet::new();
        for d in all {
            let path = self.dir.join(lockdir::device_lock_name(d));
            let f = self.dev_file(d)?;
            match f.try_lock() {
                Ok(()) => {
                    f.unlock().map_err(|e| Error::io("flock", &path, e))?;
                    free.insert(d);
                }
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(Error::io("flock", &path, e)),
            }
        }
        Ok(free)
    }

    /// The names in the lock directory (one listing per check, shared by the claim and ticket
    /// scans). Must run under the join lock.
    fn list_dir(&self) -> Result<Vec<String>> {
        let rd = fs::read_dir(&self.dir).map_err(|e| Error::io("read_dir", &self.dir, e))?;
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| Error::io("read_dir", &self.dir, e))?;
            if let Some(name) = ent.file_name().to_str() {
                out.push(name.to_owned());
            }
        }
        Ok(out)
    }

    /// Lists live tickets in FIFO order, removing dead ones it may remove.
    fn scan(&mut self, own: Option<&OwnTicket>, listing: &[String]) -> Result<Scan> {
        let mut names: Vec<(u64, String)> = listing
            .iter()
            .filter_map(|name| records::parse_ticket_name(name).map(|seq| (seq, name.clone())))
            .collect();
        names.sort();
        let max_seq = names.last().map(|(s, _)| *s);
        self.tickets
            .retain(|k, _| names.iter().any(|(_, n)| n == k));
        let mut live = Vec::new();
        for (_, name) in names {
            if let Some(o) = own {
                if o.name == name {
                    live.push((name, o.record.clone()));
                    continue;
                }
            }
            let path = self.dir.join(&name);
            if !self.tickets.contains_key(&name) {
                match lockdir::open_existing(&path) {
                    Ok(file) => {
                        self.tickets
                            .insert(name.clone(), CachedTicket { file, record: None });
                    }
                    Err(_) => continue,
                }
            }
            let Some(t) = self.tickets.get_mut(&name) else {
                continue;
            };
            match t.file.try_lock_shared() {
                Ok(()) => {
                    // Its owner's exclusive flock is gone: the waiter died. Skip it, and
                    // remove the file if we may (a sticky directory only lets the owner).
                    let _ = t.file.unlock();
                    self.tickets.remove(&name);
                    let _ = fs::remove_file(&path);
                    continue;
                }
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(_)) => continue,
            }
            if t.record.is_none() {
                let mut text = String::new();
                if t.file.seek(SeekFrom::Start(0)).is_ok()
                    && t.file.read_to_string(&mut text).is_ok()
                {
                    t.record = TicketRecord::parse(&text);
                }
            }
            if let Some(r) = &t.record {
                live.push((name, r.clone()));
            }
        }
        Ok(Scan { live, max_seq })
    }

    fn create_ticket(&mut self, seq: u64, n: usize) -> Result<OwnTicket> {
        let name = records::ticket_name(seq, self.me.pid);
        let path = self.dir.join(&name);
        let mut file = lockdir::create_new(&path)?;
        let mut own = OwnTicket {
            name,
            path: path.clone(),
            file: None,
            record: TicketRecord {
                proc_id: self.me,
                uid: self.uid,
                n,
                candidates: self.m.cfg.visible_devices.clone(),
                backfill: self.m.cfg.backfill,
                since: SystemTime::now(),
                cmd: proc::self_cmdline(),
            },
        };
        // Liveness: the exclusive flock on our own ticket lasts exactly as long as we do.
        file.try_lock().map_err(|e| match e {
            TryLockError::Error(e) => Error::io("flock", &path, e),
            TryLockError::WouldBlock => Error::io(
                "flock",
                &path,
                std::io::Error::other("new ticket already locked"),
            ),
        })?;
        file.write_all(own.record.to_text().as_bytes())
            .map_err(|e| Error::io("write", &path, e))?;
        own.file = Some(file);
        Ok(own)
    }

    /// This process's job anchor: `GPUMUTEX_JOB_ROOT` if it names a live ancestor (or this
    /// process), else, for a torchrun-style rank (`LOCAL_RANK` and `WORLD_SIZE` set), its parent
    /// (the launcher). Never pid 1 (everything orphaned ends up there).
    fn job_root(&self, ancestry: &[ProcId]) -> Option<ProcId> {
        if !self.m.honour_job_root {
            return None;
        }
        let explicit = std::env::var(crate::config::ENV_JOB_ROOT)
            .ok()
            .and_then(|v| {
                let (p, s) = v.trim().split_once(':')?;
                let id = ProcId {
                    pid: p.parse().ok()?,
                    start: s.parse().ok()?,
                };
                ancestry.contains(&id).then_some(id)
            });
        let rank_parent = || {
            let is_rank = std::env::var_os("LOCAL_RANK").is_some()
                && std::env::var("WORLD_SIZE")
                    .ok()
                    .and_then(|w| w.trim().parse::<u32>().ok())
                    .is_some_and(|w| w > 1);
            if is_rank {
                ancestry.get(1).copied()
            } else {
                None
            }
        };
        explicit.or_else(rank_parent).filter(|id| id.pid > 1)
    }

    fn live_claims(&self, listing: &[String]) -> Vec<ClaimRecord> {
        let mut out = Vec::new();
        for name in listing {
            if !name.starts_with(lockdir::CLAIM_PREFIX) {
                continue;
            }
            let path = self.dir.join(name);
            let Ok(mut f) = lockdir::open_existing(&path) else {
                continue;
            };
            let mut text = String::new();
            if f.read_to_string(&mut text).is_err() {
                continue;
            }
            drop(f);
            let Some(rec) = ClaimRecord::parse(&text) else {
                continue;
            };
            if proc::is_alive(rec.proc_id) {
                out.push(rec);
            } else if rec.uid == self.uid {
                // A crashed holder's record; its flocks are already gone.
                let _ = fs::remove_file(&path);
            }
        }
        out
    }

    /// Shares the claim of the nearest live ancestor (or of the job root's subtree), if any
    /// covers some of our visible devices. Must run under the join lock.
    fn try_inherit(&mut self, n: usize, listing: &[String]) -> Result<Option<GpuGuard>> {
        let claims = self.live_claims(listing);
        self.saw_claims = !claims.is_empty();
        if claims.is_empty() {
            return Ok(None);
        }
        let ancestry = match &self.ancestry {
            Some(a) => a.clone(),
            None => {
                let a = proc::ancestry_of_self();
                self.ancestry = Some(a.clone());
                a
            }
        };
        let my_anchor = self.job_root(&ancestry);
        let rank_of = |id: ProcId| ancestry.iter().position(|a| *a == id);
        let mut best: Option<(usize, ClaimRecord)> = None;
        for c in claims {
            let r1 = rank_of(c.proc_id);
            // A job anchor is shared only by processes that declare the same job themselves
            // (an ancestor is not enough: a shell's other children must still queue).
            let r2 = c.anchor.filter(|a| Some(*a) == my_anchor).and_then(rank_of);
            let rank = match (r1, r2) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => continue,
            };
            let covers = c
                .devices
                .iter()
                .any(|d| self.m.cfg.visible_devices.contains(d));
            if covers && best.as_ref().is_none_or(|(br, _)| rank < *br) {
                best = Some((rank, c));
            }
        }
        let Some((_, claim)) = best else {
            return Ok(None);
        };
        let devices: Vec<u32> = self
            .m
            .cfg
            .visible_devices
            .iter()
            .copied()
            .filter(|d| claim.devices.contains(d))
            .collect();
        if devices.len() < n {
            return Err(Error::InheritedClaimTooSmall {
                holder_pid: claim.proc_id.pid,
                held: devices,
                requested: n,
            });
        }
        let mut files = Vec::new();
        for &d in &devices {
            let path = self.dir.join(lockdir::device_lock_name(d));
            let f = self.take_dev_file(d)?;
            match f.try_lock_shared() {
                Ok(()) => files.push(f),
                Err(TryLockError::WouldBlock) => {
                    // Not in the state the record claims (held exclusively by someone else):
                    // do not trust it; fall back to queueing.
                    return Ok(None);
                }
                Err(TryLockError::Error(e)) => return Err(Error::io("flock", &path, e)),
            }
        }
        let anchor = claim.anchor.or(my_anchor);
        self.finish_claim(
            devices,
            files,
            ClaimKind::Shared,
            anchor,
            Some(claim.proc_id.pid),
        )
        .map(Some)
    }

    fn take_dev_file(&mut self, dev: u32) -> Result<File> {
        self.dev_file(dev)?;
        self.dev_files.remove(&dev).ok_or_else(|| {
            Error::io(
                "open",
                self.dir.join(lockdir::device_lock_name(dev)),
                std::io::Error::other("lost descriptor"),
            )
        })
    }

    /// Takes the devices chosen by the policy. Must run under the join lock.
    fn grant(&mut self, devs: &[u32]) -> Result<GpuGuard> {
        let mut files: Vec<File> = Vec::new();
        for &d in devs {
            let path = self.dir.join(lockdir::device_lock_name(d));
            let f = self.take_dev_file(d)?;
            // Exclusive first (proves nobody holds it), then convert to shared so that the
            // holder's descendants can join. Nobody can slip in between: every lock attempt
            // happens under the join lock, which we hold.
            match f.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    for g in &files {
                        let _ = g.unlock();
                    }
                    return Err(Error::io(
                        "flock",
                        &path,
                        std::io::Error::other(
                            "device taken outside the join lock (a foreign process holds it)",
                        ),
                    ));
                }
                Err(TryLockError::Error(e)) => return Err(Error::io("flock", &path, e)),
            }
            f.lock_shared().map_err(|e| Error::io("flock", &path, e))?;
            files.push(f);
        }
        let anchor = if wants_job_root() {
            let ancestry = match self.ancestry.take() {
                Some(a) => a,
                None => proc::ancestry_of_self(),
            };
            self.job_root(&ancestry)
        } else {
            None
        };
        self.finish_claim(devs.to_vec(), files, ClaimKind::Primary, anchor, None)
    }

    fn finish_claim(
        &mut self,
        devices: Vec<u32>,
        files: Vec<File>,
        kind: ClaimKind,
        anchor: Option<ProcId>,
        inherited_from: Option<u32>,
    ) -> Result<GpuGuard> {
        let k = CLAIM_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}.{k}", records::claim_name(self.me));
        let path = self.dir.join(name);
        let since = SystemTime::now();
        let rec = ClaimRecord {
            proc_id: self.me,
            uid: self.uid,
            kind,
            devices: devices.clone(),
            anchor,
            since,
            cmd: proc::self_cmdline(),
        };
        let write = (|| {
            let mut f = lockdir::create_new(&path)?;
            f.write_all(rec.to_text().as_bytes())
                .map_err(|e| Error::io("write", &path, e))
        })();
        if let Err(e) = write {
            let _ = fs::remove_file(&path);
            for f in &files {
                let _ = f.unlock();
            }
            return Err(e);
        }
        Ok(GpuGuard::new(
            devices,
            files,
            path,
            self.queue_path.clone(),
            self.me.pid,
            since,
            inherited_from,
        ))
    }
}

/// Whether the environment declares a job anchor at all (saves the `/proc` walk otherwise).
fn wants_job_root() -> bool {
    std::env::var_os(crate::config::ENV_JOB_ROOT).is_some()
        || std::env::var_os("LOCAL_RANK").is_some()
}

fn to_request(t: &TicketRecord) -> Request {
    Request {
        candidates: t.candidates.clone(),
        n: t.n,
        backfill: t.backfill,
    }
}
