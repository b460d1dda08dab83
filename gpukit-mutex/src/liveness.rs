//! How a record shows that its writer is alive: two write locks on its file, tested without
//! being touched.
//!
//! * **Byte 0, a process-owned (POSIX) write lock**, taken by the process that wrote the record.
//!   The kernel drops it when that process dies, however it dies. It is *not* inherited by
//!   `fork`, so a forked child can neither keep it nor release it (`F_UNLCK` in the child only
//!   releases the child's own locks, and `flock(LOCK_UN)` does not touch it). `F_GETLK` names
//!   the holder's pid (as seen from the reader's pid namespace, 0 if it is not visible there),
//!   which is how a record's claimed pid is checked against the kernel's view.
//! * **Byte 1 (claims only), an open-file-description (OFD) write lock**, the *tree lock*: it
//!   belongs to the open file description, so it lives for as long as any process still holds
//!   a descriptor of it. [`crate::GpuGuard::hold_in`] hands that descriptor to a command, so the
//!   claim outlives a killed holder until everything that inherited it has exited.
//!
//! Both are *write* locks on a file created `0600` and made `0644` only once they are held:
//! only the file's owner (or root) can open it for writing, so nobody else can create, prop up
//! or take over a record's liveness. Readers test with `F_GETLK`/`F_OFD_GETLK`, which change
//! nothing, so a reader (a status report, a hostile user) can never make a grant fail.
//!
//! POSIX locks have one hazard: closing *any* descriptor of the file in the holding process
//! drops them. This process therefore never opens its own records: every record and ticket
//! this process holds is registered here by identity, and scans consult the registry first.
//! (Code outside this crate must not open files in the lock directory of a process that holds a
//! guard.) The registry is fork-safe: a `pthread_atfork` handler keeps `fork` out of its
//! critical sections, and entries are tagged with the registering pid.

use std::cell::UnsafeCell;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};

use crate::error::{Error, Result};
use crate::lockdir::{FileId, LockDir, Meta};
use crate::records::{ClaimRecord, TicketRecord};

/// The process-owned liveness byte.
const OWNER_BYTE: libc::off_t = 0;
/// The tree lock byte (claims only).
const TREE_BYTE: libc::off_t = 1;

/// Who holds the owner lock of a record, as `F_GETLK` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Nobody holds a write lock on byte 0.
    None,
    /// A process visible in this pid namespace.
    Pid(u32),
    /// A process in a pid namespace this one cannot see (the kernel reports pid 0).
    Hidden,
    /// An OFD lock (pid -1): not how records are held, so it proves nothing.
    Ofd,
}

/// What the locks of a record say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockState {
    pub owner: Owner,
    /// Byte 1 is write-locked (the tree lock).
    pub tree: bool,
}

impl LockState {
    /// Whether anybody keeps the record alive (an owner of any kind, or the tree lock).
    pub fn live(&self) -> bool {
        self.owner != Owner::None || self.tree
    }
}

fn flock_struct(kind: libc::c_short, start: libc::off_t) -> libc::flock {
    // SAFETY: an all-zero `flock` is valid; the relevant fields are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = 1;
    fl
}

fn fcntl_lock(fd: RawFd, cmd: libc::c_int, fl: &mut libc::flock) -> io::Result<()> {
    loop {
        // SAFETY: `fl` is a valid flock structure for the duration of the call.
        if unsafe { libc::fcntl(fd, cmd, fl as *mut libc::flock) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Tests the locks of a record through any descriptor of it (read-only is enough).
pub(crate) fn probe(fd: &impl AsRawFd) -> io::Result<LockState> {
    let mut fl = flock_struct(libc::F_WRLCK as libc::c_short, OWNER_BYTE);
    fcntl_lock(fd.as_raw_fd(), libc::F_GETLK, &mut fl)?;
    // Only a *write* lock counts: a read lock can be taken by anybody who can read the file,
    // and it cannot coexist with the owner's write lock, so it means the owner is gone.
    let owner = if fl.l_type == libc::F_WRLCK as libc::c_short {
        match fl.l_pid {
            p if p > 0 => Owner::Pid(p as u32),
            0 => Owner::Hidden,
            _ => Owner::Ofd,
        }
    } else {
        Owner::None
    };
    let mut fl = flock_struct(libc::F_WRLCK as libc::c_short, TREE_BYTE);
    fcntl_lock(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl)?;
    Ok(LockState {
        owner,
        tree: fl.l_type == libc::F_WRLCK as libc::c_short,
    })
}

/// Takes the owner lock (and for claims the tree lock) on a freshly created record opened
/// read-write. Never waits: the file is new and `0600`, so a conflict means something is wrong.
pub(crate) fn take(fd: &impl AsRawFd, tree: bool) -> io::Result<()> {
    let mut fl = flock_struct(libc::F_WRLCK as libc::c_short, OWNER_BYTE);
    fcntl_lock(fd.as_raw_fd(), libc::F_SETLK, &mut fl)?;
    if tree {
        let mut fl = flock_struct(libc::F_WRLCK as libc::c_short, TREE_BYTE);
        fcntl_lock(fd.as_raw_fd(), libc::F_OFD_SETLK, &mut fl)?;
    }
    Ok(())
}

/// Creates record `name` in `dir` holding `text` and registers it as this process's `record`,
/// with its locks taken (`tree`: also the tree lock) before anybody else may open it: the file
/// is created `0600`, registered, locked, written, and only then made `0644`. Its name is
/// checked to still refer to it afterwards. On failure nothing is left behind.
///
/// Creation and registration happen under the registry's lock, and [`open_foreign`] opens under
/// it too: so no other thread of this process can open (and later close, which would drop the
/// locks) a record of ours that is not registered yet.
pub(crate) fn write_locked(
    dir: &LockDir,
    name: &str,
    text: &str,
    tree: bool,
    record: OwnRecord,
) -> Result<(File, FileId)> {
    let path = || dir.path().join(name);
    install_fork_guard();
    let pid = std::process::id();
    let (mut file, id) = OWN.with(|v| -> Result<(File, FileId)> {
        let file = dir.create_entry(name)?;
        let meta = crate::lockdir::fstat(&file).map_err(|e| {
            dir.unlink_if_unchecked(name);
            Error::io("fstat", path(), e)
        })?;
        v.retain(|e| e.pid == pid && e.id != meta.id);
        v.push(OwnEntry {
            id: meta.id,
            name: name.to_string(),
            pid,
            record,
        });
        Ok((file, meta.id))
    })?;
    let fail = |file: File, op: &'static str, e: io::Error| {
        dir.unlink_if(name, id);
        own_remove(id);
        drop(file);
        dir.write_error(op, name, e)
    };
    if let Err(e) = take(&file, tree) {
        return Err(fail(file, "fcntl(F_SETLK)", e));
    }
    if let Err(e) = file.write_all(text.as_bytes()) {
        return Err(fail(file, "write", e));
    }
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::fchmod(file.as_raw_fd(), 0o644) } != 0 {
        let e = io::Error::last_os_error();
        return Err(fail(file, "fchmod", e));
    }
    match dir.stat(name) {
        Ok(m) if m.id == id => Ok((file, id)),
        Ok(_) => Err(fail(
            file,
            "create",
            io::Error::other("the new file was replaced under its name"),
        )),
        Err(e) => Err(fail(file, "stat", e)),
    }
}

/// Whether `e` is "the name already exists".
fn is_exists(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EEXIST))
}

/// How many fresh random names [`create_record`] tries. A name is 128 random bits, so a
/// taken one means a broken random source, not bad luck or an attacker (who cannot know the
/// name in advance).
const CREATE_ATTEMPTS: usize = 4;

/// Creates a record under a fresh random name (see `records.rs`): `make` gets the random part
/// and returns the file name, the text and the registry entry. Returns the name, the open file
/// and its identity.
pub(crate) fn create_record(
    dir: &LockDir,
    tree: bool,
    make: impl Fn(&str) -> (String, String, OwnRecord),
) -> Result<(String, File, FileId)> {
    let mut last = None;
    for _ in 0..CREATE_ATTEMPTS {
        let random =
            crate::records::random_part().map_err(|e| Error::io("getrandom", dir.path(), e))?;
        let (name, text, record) = make(&random);
        match write_locked(dir, &name, &text, tree, record) {
            Ok((file, id)) => return Ok((name, file, id)),
            Err(e) if is_exists(&e) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::io("create", dir.path(), io::Error::other("no name"))))
}

/// Opens a record that is not this process's own (see [`write_locked`]): `Ok(None)` when `name`
/// turns out to be one of ours (its descriptor is then kept open for good, since closing it
/// would drop our locks) or is not a regular file.
pub(crate) fn open_foreign(dir: &LockDir, name: &str) -> io::Result<Option<(File, Meta)>> {
    let pid = std::process::id();
    OWN.with(|v| {
        let Some((file, meta)) = dir.open_entry(name)? else {
            return Ok(None);
        };
        if v.iter().any(|e| e.pid == pid && e.id == meta.id) {
            std::mem::forget(file);
            return Ok(None);
        }
        Ok(Some((file, meta)))
    })
}

/// A record or ticket this process holds.
#[derive(Debug, Clone)]
pub(crate) enum OwnRecord {
    Claim(Arc<ClaimRecord>),
    Ticket(Arc<TicketRecord>),
}

#[derive(Debug)]
struct OwnEntry {
    id: FileId,
    /// The name it was created under (a hard link under another name is not it).
    name: String,
    pid: u32,
    record: OwnRecord,
}

/// A tiny spin lock whose critical sections `fork` never interrupts (see [`own_insert`]).
struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` only happens while `locked` is held (see `with`).
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    fn lock_raw(&self) {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    fn unlock_raw(&self) {
        self.locked.store(false, Ordering::Release);
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.lock_raw();
        struct Unlock<'a, T>(&'a SpinLock<T>);
        impl<T> Drop for Unlock<'_, T> {
            fn drop(&mut self) {
                self.0.unlock_raw();
            }
        }
        let _u = Unlock(self);
        // SAFETY: the lock is held until `_u` drops, so this is the only reference.
        f(unsafe { &mut *self.value.get() })
    }
}

/// This process's own live records and tickets, by file identity.
static OWN: SpinLock<Vec<OwnEntry>> = SpinLock::new(Vec::new());

fn install_fork_guard() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        extern "C" fn prepare() {
            OWN.lock_raw();
        }
        extern "C" fn after() {
            OWN.unlock_raw();
        }
        // SAFETY: the handlers only touch an atomic flag. `prepare` takes the registry's lock
        // so `fork` never copies it half-updated; both sides release it afterwards.
        unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
    });
}

/// Forgets a record or ticket this process no longer holds.
pub(crate) fn own_remove(id: FileId) {
    let pid = std::process::id();
    OWN.with(|v| v.retain(|e| e.pid == pid && e.id != id));
}

/// The record or ticket with identity `id`, if this process holds it, and whether `name` is
/// the name it was created under (otherwise `name` is another link to it).
pub(crate) fn own_get(id: FileId, name: &str) -> Option<(OwnRecord, bool)> {
    let pid = std::process::id();
    OWN.with(|v| {
        v.iter()
            .find(|e| e.pid == pid && e.id == id)
            .map(|e| (e.record.clone(), e.name == name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    #[test]
    fn locks_are_seen_by_others_not_by_self_and_survive_a_forked_unlock() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("rec");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .expect("create");
        let reader = std::fs::File::open(&p).expect("open");
        assert_eq!(
            probe(&reader).expect("probe"),
            LockState {
                owner: Owner::None,
                tree: false
            }
        );
        take(&f, true).expect("take");
        // The owner lock is this process's own: F_GETLK does not report it to us; the tree
        // lock belongs to another open file description and is reported.
        let st = probe(&reader).expect("probe");
        assert_eq!(st.owner, Owner::None);
        assert!(st.tree && st.live());
        // SAFETY: fork in a test; the child only calls async-signal-safe functions and _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // Child: try to free the parent's locks through the inherited descriptor.
            let mut fl = flock_struct(libc::F_UNLCK as libc::c_short, 0);
            fl.l_len = 0;
            // SAFETY: plain syscalls on an inherited descriptor.
            unsafe {
                libc::fcntl(f.as_raw_fd(), libc::F_SETLK, &mut fl);
                libc::flock(f.as_raw_fd(), libc::LOCK_UN);
                let st = probe(&reader).map(|s| s.owner == Owner::Pid(libc::getppid() as u32));
                libc::_exit(if matches!(st, Ok(true)) { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
