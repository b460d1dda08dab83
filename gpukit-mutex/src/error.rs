//! The crate's single error type.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// What to do instead of using an untrusted lock directory (part of
/// [`Error::UntrustedLockDir`]'s message).
pub const SAFE_LOCK_DIR_ADVICE: &str = "use a directory on a local file system that only you \
can write (per user, e.g. GPUMUTEX_LOCK_DIR=$XDG_RUNTIME_DIR/gpumutex; not your home directory, \
which is network storage on most clusters), or one an \
administrator created for everybody or for one group (e.g. `install -d -o root -g root -m 1777 \
/tmp/libgpumutex`, or `install -d -o root -g gpu -m 1770 /var/lib/gpumutex` for group gpu)";

/// Everything that can go wrong in `gpukit-mutex`.
///
/// Configuration errors ([`Error::InvalidDeviceList`], [`Error::DeviceNotVisible`],
/// [`Error::AmbiguousDeviceOrder`], [`Error::DeviceDiscovery`], [`Error::InvalidConfig`],
/// [`Error::NoVisibleDevices`], [`Error::ZeroDevices`], [`Error::TooManyDevices`],
/// [`Error::LockDir`], [`Error::UntrustedLockDir`], [`Error::NetworkLockDir`]) are detected
/// before anything is written to
/// the lock directory: a bad request changes nothing on disk.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A device list (`GPUMUTEX_VISIBLE_DEVICES`, `--visible-devices`) could not be parsed.
    #[error("invalid device list {input:?}: {reason}")]
    InvalidDeviceList {
        /// The text as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration value (environment variable or builder value) is malformed.
    #[error("invalid value {value:?} for {name}: {reason}")]
    InvalidConfig {
        /// The setting, e.g. `GPUMUTEX_NUM_DEVICES`.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A device name cannot be read here: it is not one of the devices this process's CUDA
    /// would see (see `src/devices.rs`: an inherited `CUDA_VISIBLE_DEVICES` or
    /// `NVIDIA_VISIBLE_DEVICES` bounds what can be granted).
    #[error("cannot use devices {names:?}: {reason} ({context})")]
    DeviceNotVisible {
        /// The names as given.
        names: String,
        /// What is wrong.
        reason: String,
        /// Where the devices came from and which variables applied.
        context: String,
    },
    /// Device numbers cannot be mapped to GPUs without CUDA here (GPUs of different models,
    /// numbered fastest first by default).
    #[error("cannot tell which GPUs {names} means: {reason}; set CUDA_DEVICE_ORDER=PCI_BUS_ID (the order of nvidia-smi) or name the devices by UUID (nvidia-smi -L)")]
    AmbiguousDeviceOrder {
        /// The names (or variable) that use numbers.
        names: String,
        /// Why the order is unknown.
        reason: String,
    },
    /// The devices could not be read from the chosen source (`GPUMUTEX_DEVICE_SOURCE`).
    #[error("cannot read the GPU list from {source_name}: {reason} (GPUMUTEX_DEVICE_SOURCE=none uses device numbers as physical indices instead)")]
    DeviceDiscovery {
        /// The directory or program.
        source_name: String,
        /// What went wrong.
        reason: String,
    },
    /// No visible devices were configured (neither `GPUMUTEX_VISIBLE_DEVICES` nor the builder).
    #[error("no visible devices configured: set GPUMUTEX_VISIBLE_DEVICES (e.g. \"0,1\") or call visible_devices() on the builder")]
    NoVisibleDevices,
    /// A request for zero devices.
    #[error("a request must be for at least one device (got 0)")]
    ZeroDevices,
    /// A request for more devices than the visible set holds: it could never be granted.
    #[error("requested {requested} device(s) but only {visible} are visible")]
    TooManyDevices {
        /// Devices requested.
        requested: usize,
        /// Size of the visible set.
        visible: usize,
    },
    /// The lock directory cannot be used (missing parent, not a directory, a symlink, not
    /// writable, replaced while in use, ...).
    #[error("unusable lock directory {}: {reason}", path.display())]
    LockDir {
        /// The directory.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// The lock directory, or a directory on the way to it, could be changed by another user (it is
    /// owned by somebody other than the caller or root, or others may write to it and it lacks
    /// the sticky bit), or a symbolic link on the way could (another user put it in a sticky
    /// directory others may write). Such a user could delete or replace the files that carry the locks and
    /// so break exclusion; the directory is refused. See [`SAFE_LOCK_DIR_ADVICE`].
    #[error("refusing lock directory {}: {reason}; {SAFE_LOCK_DIR_ADVICE}", path.display())]
    UntrustedLockDir {
        /// The directory that is not trusted (the lock directory or one above it), or the link.
        path: PathBuf,
        /// Who could change it, and how.
        reason: String,
    },
    /// The lock directory is on a network or cluster file system, where the kernel's locks are
    /// not shared between the machines that use it (see `src/lockdir.rs`). Nothing was created.
    #[error("refusing lock directory {}: it is on {fs}, a network file system: processes on other machines that use it would not see this machine's locks, could take live claims for dead and remove them, and two jobs would share a GPU. Use a directory on a local file system (e.g. GPUMUTEX_LOCK_DIR=/tmp/libgpumutex, created once by root with mode 1777, or /var/lib/gpumutex, or $XDG_RUNTIME_DIR/gpumutex for your jobs alone); only if every process that uses this directory runs on this one machine, set GPUMUTEX_ALLOW_NETWORK_FS=1 (allow_network_fs(true) on the builder)", path.display())]
    NetworkLockDir {
        /// The directory (or the one it would be created in).
        path: PathBuf,
        /// The file system, e.g. `NFS`.
        fs: String,
    },
    /// The wait ended at its deadline before the devices were granted.
    #[error("timed out after {waited:?} waiting for {requested} device(s)")]
    Timeout {
        /// Devices requested.
        requested: usize,
        /// How long the call waited.
        waited: Duration,
    },
    /// The wait was cancelled through a [`crate::CancelToken`].
    #[error("wait for devices cancelled")]
    Cancelled,
    /// The wait was interrupted by a signal the program handles (only with
    /// [`crate::GpuMutexBuilder::interrupt_on_signals`]); nothing was granted.
    #[error("wait for devices interrupted by a signal; nothing was granted")]
    Interrupted,
    /// The caller descends from a live claim (it shares its ancestor's devices and must not
    /// queue behind them), but that claim holds fewer of the caller's visible devices than
    /// requested.
    #[error("process {holder_pid} (an ancestor of this process) holds devices {held:?}, but {requested} were requested; a descendant cannot wait for more without deadlocking on its own ancestor")]
    InheritedClaimTooSmall {
        /// The ancestor (or sibling rank) whose claim is shared.
        holder_pid: u32,
        /// The shared devices that are in the caller's visible set (indices in the caller's
        /// numbering).
        held: Vec<u32>,
        /// Devices requested.
        requested: usize,
    },
    /// The file system of the lock directory is full (no space, no inodes, or the user's quota
    /// is exhausted), so a claim or ticket could not be written. Nothing was left behind.
    #[error("cannot {op} in lock directory {}: {what}; free space there, or use a lock directory on another local file system (GPUMUTEX_LOCK_DIR)", path.display())]
    LockDirFull {
        /// What was attempted (`create`, `write`).
        op: &'static str,
        /// The lock directory.
        path: PathBuf,
        /// What ran out, in words.
        what: String,
    },
    /// The lock directory holds more entries under record names than a pass examines:
    /// somebody flooded it (a denial of service another user can always commit in a shared
    /// directory). Nothing was created.
    #[error("lock directory {} is flooded: {entries} entries under record names (at most {limit} are examined){}; they can be removed by their owner or root, or use another lock directory", path.display(), owners_text(.owners))]
    LockDirFlooded {
        /// The lock directory.
        path: PathBuf,
        /// How many entries have record names.
        entries: usize,
        /// The most that are examined.
        limit: usize,
        /// Owners of a sample of them, as `(uid, count)`, most first.
        owners: Vec<(u32, usize)>,
    },
    /// Somebody held the join lock for longer than the join timeout: a participant stopped in
    /// the middle of a decision (`SIGSTOP`, a frozen cgroup, a suspended job), or a process that
    /// holds the lock on purpose. Nothing was granted or created.
    #[error("the join lock of lock directory {} has been held for {waited:.1?} by {holder}: a process stopped or hung inside a decision (SIGSTOP, a frozen cgroup, a suspended job) holds up every acquisition; resume it (kill -CONT, or thaw its cgroup) or end it; GPUMUTEX_JOIN_TIMEOUT (seconds) sets how long to wait for the join lock", path.display())]
    JoinLockStalled {
        /// The lock directory.
        path: PathBuf,
        /// The holder's pid, when this process can see it.
        pid: Option<u32>,
        /// The holder in words (pid, uid, state, command).
        holder: String,
        /// How long the call waited for the join lock.
        waited: Duration,
    },
    /// An operating-system call on the lock directory or one of its files failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was attempted (`open`, `fcntl`, ...).
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

fn owners_text(owners: &[(u32, usize)]) -> String {
    if owners.is_empty() {
        return String::new();
    }
    let v: Vec<String> = owners
        .iter()
        .map(|(uid, n)| format!("uid {uid}: {n}"))
        .collect();
    format!(", owners of a sample: {}", v.join(", "))
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// True for errors caused by the configuration or the request (as opposed to waiting or
    /// I/O failures): these are reported before anything is touched.
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            Error::InvalidDeviceList { .. }
                | Error::DeviceNotVisible { .. }
                | Error::AmbiguousDeviceOrder { .. }
                | Error::DeviceDiscovery { .. }
                | Error::InvalidConfig { .. }
                | Error::NoVisibleDevices
                | Error::ZeroDevices
                | Error::TooManyDevices { .. }
                | Error::LockDir { .. }
                | Error::UntrustedLockDir { .. }
                | Error::NetworkLockDir { .. }
        )
    }
}
