//! The on-disk level: one file per entry, written atomically, checked on every read, bounded in
//! size with least-recently-used eviction (a hit refreshes the file's mtime).
//!
//! File layout: `GPUKITK2`, the 32-byte key, then length-prefixed fields (program, target,
//! output, log, lowered names, image), then the SHA-256 of everything before it. An entry is
//! served only for its own key, program, target and output kind; one that is truncated, has a
//! bad checksum, does not parse or belongs to other inputs is deleted (when it is this user's)
//! and reported as corrupt; the caller recompiles.
//!
//! **The directory** is opened with gpukit-trust's link-safe walk (the rules gpukit-mutex
//! applies to its lock directory): it and every directory on the way must be owned by the
//! caller or root and not writable by others unless sticky, a link is only followed from a
//! directory that passed that check, and missing directories are created (mode 0700) on the
//! way. Otherwise another user could replace entries, or the directory, and make this process
//! load their CUBIN. A directory that fails is not used: the cache keeps to memory and says
//! why ([`super::KernelCache::disk_problem`]).
//!
//! **Entries.** In a trusted directory that others may write (sticky, like `/tmp`), other users
//! can still create files under names this process will look up. So an entry is read only if it
//! is a regular file (opened relative to the directory's descriptor with `O_NOFOLLOW |
//! O_NONBLOCK`: a link or a FIFO under an entry's name neither redirects nor blocks), owned by
//! the caller, writable by nobody else, and no larger than the cache's bound (checked before a
//! byte is read; the read itself is bounded too). Writers use a temporary file with an
//! unpredictable name, created exclusively without following links, and `rename` it into
//! place, so readers in other processes see either no entry or a complete one. Eviction only
//! ever removes this user's own files, and only while the name still is the file it looked at.

use super::key::CacheKey;
use crate::arch::Arch;
use crate::compile::CompiledModule;
use crate::error::Error;
use crate::options::Output;
use gpukit_trust::{self as trust, Dir, Meta, Walk};
use sha2::{Digest, Sha256};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"GPUKITK2";
const SUFFIX: &str = "kernel";
/// Temporary files of writers that died are removed by eviction once this old.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// Outcome of a disk lookup.
pub(crate) enum Lookup {
    Hit(CompiledModule),
    Miss,
    /// An entry of ours that is damaged or belongs to other inputs (deleted).
    Corrupt,
    /// Something under the entry's name that is not ours to read (left alone).
    Refused(String),
}

/// What a lookup must find: the entry of exactly these inputs.
pub(crate) struct Expect<'a> {
    pub key: &'a CacheKey,
    pub program: &'a str,
    pub target: Arch,
    pub output: Output,
    pub source: &'a str,
}

/// A directory of cached kernels.
#[derive(Debug)]
pub(crate) struct DiskCache {
    pub(crate) dir: PathBuf,
    pub(crate) max_bytes: u64,
    opened: Result<Dir, Error>,
}

impl DiskCache {
    /// Opens (creating it when missing) and checks the directory `dir` once, now: every later
    /// lookup and write goes through this descriptor.
    pub(crate) fn new(dir: PathBuf, max_bytes: u64) -> Self {
        let opened = open_dir(&dir).map_err(|source| Error::CacheDir {
            dir: dir.clone(),
            source,
        });
        DiskCache {
            dir,
            max_bytes,
            opened,
        }
    }

    /// The opened directory, or why it is not used ([`Error::CacheDir`]).
    pub(crate) fn open(&self) -> Result<&Dir, &Error> {
        self.opened.as_ref()
    }

    fn name_of(key: &CacheKey) -> String {
        format!("{}.{SUFFIX}", key.hex())
    }

    pub(crate) fn path_of(&self, key: &CacheKey) -> PathBuf {
        let base = self.open().map_or(self.dir.as_path(), |d| d.path());
        base.join(Self::name_of(key))
    }

    pub(crate) fn load(&self, want: &Expect<'_>) -> Lookup {
        let Ok(dir) = self.open() else {
            return Lookup::Miss;
        };
        let name = Self::name_of(want.key);
        let (file, meta) = match dir.open_entry(&name) {
            Ok(Some(f)) => f,
            Ok(None) => return Lookup::Refused("not a regular file".into()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Lookup::Miss,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Lookup::Refused("a symbolic link".into())
            }
            Err(e) => return Lookup::Refused(e.to_string()),
        };
        if let Some(reason) = trust::own_file_refusal(&meta, trust::euid(), self.max_bytes) {
            return Lookup::Refused(reason);
        }
        let decoded = trust::read_bounded(&file, &meta, self.max_bytes)
            .ok()
            .flatten()
            .and_then(|b| decode(&b, want));
        match decoded {
            Some(m) => {
                // Refresh the LRU clock; failure to do so only affects eviction order.
                let _ = file.set_modified(SystemTime::now());
                Lookup::Hit(m)
            }
            None => {
                unlink_own(dir, &name, &meta);
                Lookup::Corrupt
            }
        }
    }

    /// Writes an entry atomically, then evicts old entries past the size bound. Returns how
    /// many entries were evicted.
    pub(crate) fn store(&self, key: &CacheKey, module: &CompiledModule) -> io::Result<u64> {
        let dir = self
            .open()
            .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
        let bytes = encode(key, module);
        let (tmp, mut f) = dir.create_temp(&key.hex(), 0o600)?;
        let result = (|| {
            f.write_all(&bytes)?;
            f.sync_data()?;
            dir.rename(&tmp, &Self::name_of(key))
        })();
        if result.is_err() {
            // Best effort: the write's own error is what is reported.
            let _ = dir.unlink(&tmp);
        }
        result?;
        Ok(self.evict(dir, Some(&Self::name_of(key))))
    }

    /// Deletes this user's least-recently-used entries until they are under 90 % of the bound
    /// (`keep`, the entry just written, is removed last), and this user's temporary files left
    /// by writers that died.
    fn evict(&self, dir: &Dir, keep: Option<&str>) -> u64 {
        let now = SystemTime::now();
        for (name, meta) in own_files(dir, |n| n.starts_with('.') && n.ends_with(".tmp")) {
            if now
                .duration_since(meta.mtime)
                .is_ok_and(|age| age > STALE_TEMP)
            {
                unlink_own(dir, &name, &meta);
            }
        }
        let mut entries = own_files(dir, is_entry);
        let mut total: u64 = entries.iter().map(|e| e.1.size).sum();
        if total <= self.max_bytes {
            return 0;
        }
        let target = self.max_bytes / 10 * 9;
        entries.sort_by_key(|e| (Some(e.0.as_str()) == keep, e.1.mtime));
        let mut evicted = 0;
        for (name, meta) in entries {
            if total <= target {
                break;
            }
            if unlink_own(dir, &name, &meta) {
                total -= meta.size;
                evicted += 1;
            }
        }
        evicted
    }

    /// Total bytes of this user's entries in the directory.
    pub(crate) fn size(&self) -> u64 {
        self.open()
            .map(|d| own_files(d, is_entry).iter().map(|e| e.1.size).sum())
            .unwrap_or(0)
    }
}

/// Opens (creating missing directories, mode 0700) and checks the cache directory: see the
/// module docs.
fn open_dir(dir: &Path) -> Result<Dir, trust::Error> {
    let opened = trust::walk(dir, Walk::CREATE_PRIVATE)?.dir;
    opened.check_access()?;
    Ok(opened)
}

/// Removes `name` if it is still the file `meta` describes and this process's own (never
/// somebody else's file that took its place). Returns whether it was removed.
fn unlink_own(dir: &Dir, name: &str, meta: &Meta) -> bool {
    let me = trust::euid();
    dir.unlink_if(name, |now| now.id == meta.id && now.uid == me)
}

/// `(name, meta)` of the regular files in the directory owned by this process whose name `keep`
/// accepts (others' files are never touched).
fn own_files(dir: &Dir, keep: impl Fn(&str) -> bool) -> Vec<(String, Meta)> {
    let me = trust::euid();
    let Ok(entries) = dir.entries() else {
        return Vec::new();
    };
    entries
        .map_while(Result::ok)
        .filter_map(|e| {
            let name = e.name.into_string().ok().filter(|n| keep(n))?;
            let meta = dir.stat(&name).ok()?;
            (meta.is_regular() && meta.uid == me).then_some((name, meta))
        })
        .collect()
}

fn is_entry(name: &str) -> bool {
    !name.starts_with('.') && name.ends_with(&format!(".{SUFFIX}"))
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn encode(key: &CacheKey, m: &CompiledModule) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.image.len() + m.log.len() + 256);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&key.0);
    put(&mut out, m.program.as_bytes());
    put(&mut out, m.target.to_string().as_bytes());
    put(
        &mut out,
        match m.output {
            Output::Ptx => b"ptx",
            Output::Cubin => b"cubin",
        },
    );
    put(&mut out, m.log.as_bytes());
    put(&mut out, &(m.lowered_names.len() as u64).to_le_bytes());
    for (e, l) in &m.lowered_names {
        put(&mut out, e.as_bytes());
        put(&mut out, l.as_bytes());
    }
    put(&mut out, &m.image);
    let digest: [u8; 32] = Sha256::digest(&out).into();
    out.extend_from_slice(&digest);
    out
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn field(&mut self) -> Option<&'a [u8]> {
        let len_bytes: [u8; 8] = self.0.get(..8)?.try_into().ok()?;
        let len = usize::try_from(u64::from_le_bytes(len_bytes)).ok()?;
        let body = self.0.get(8..8usize.checked_add(len)?)?;
        self.0 = &self.0[8 + len..];
        Some(body)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.field()?.to_vec()).ok()
    }
}

fn decode(bytes: &[u8], want: &Expect<'_>) -> Option<CompiledModule> {
    if bytes.len() < MAGIC.len() + 32 + 32 || &bytes[..8] != MAGIC {
        return None;
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return None;
    }
    // The entry of another key (a file copied or renamed under this key's name) is refused:
    // the checksum covers the key it was written for.
    if body[8..40] != want.key.0 {
        return None;
    }
    let mut r = Reader(&body[40..]);
    let program = r.string()?;
    let target: Arch = r.string()?.parse().ok()?;
    let output = match r.field()? {
        b"ptx" => Output::Ptx,
        b"cubin" => Output::Cubin,
        _ => return None,
    };
    if program != want.program || target != want.target || output != want.output {
        return None;
    }
    let log = r.string()?;
    let n = u64::from_le_bytes(r.field()?.try_into().ok()?);
    let mut lowered_names = Vec::new();
    for _ in 0..n {
        lowered_names.push((r.string()?, r.string()?));
    }
    let image = r.field()?.to_vec();
    if !r.0.is_empty() {
        return None;
    }
    Some(CompiledModule {
        program,
        target,
        output,
        image,
        lowered_names,
        log,
        kernels: crate::signature::parse_kernels(want.source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    fn sample() -> CompiledModule {
        CompiledModule {
            program: "k".into(),
            target: Arch::new(9, 0).specific(),
            output: Output::Cubin,
            image: (0..1000u32).map(|i| (i * 7) as u8).collect(),
            lowered_names: vec![("f<int>".into(), "_Z1fIiEvv".into())],
            log: "ptxas info".into(),
            kernels: vec![],
        }
    }

    fn key(n: u8) -> CacheKey {
        CacheKey([n; 32])
    }

    fn want(k: &CacheKey) -> Expect<'_> {
        Expect {
            key: k,
            program: "k",
            target: Arch::new(9, 0).specific(),
            output: Output::Cubin,
            source: "",
        }
    }

    /// A private cache directory (mode 0700) under a fresh temporary directory.
    fn cache() -> (tempfile::TempDir, DiskCache) {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("kernels");
        (t, DiskCache::new(dir, 1 << 20))
    }

    /// Whether this process is root; when it is not and `GPUKIT_REQUIRE_ROOT=1` (CI runs as
    /// root), the test fails instead of skipping its root-only part.
    fn is_root() -> bool {
        let root = trust::euid() == 0;
        if !root && std::env::var("GPUKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
            panic!("needs root to give files to another uid (GPUKIT_REQUIRE_ROOT=1 requires it)");
        }
        root
    }

    #[test]
    fn round_trip_and_every_single_byte_corruption_is_caught() {
        let m = sample();
        let k = key(1);
        let bytes = encode(&k, &m);
        assert_eq!(decode(&bytes, &want(&k)).as_ref(), Some(&m));
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x5a;
            assert!(
                decode(&bad, &want(&k)).is_none(),
                "flip at {i} not detected"
            );
        }
        for cut in [0, 5, 8, 40, bytes.len() - 1] {
            assert!(
                decode(&bytes[..cut], &want(&k)).is_none(),
                "truncation at {cut}"
            );
        }
    }

    #[test]
    fn an_entry_serves_only_its_own_key_program_target_and_output() {
        let (_t, c) = cache();
        let (k1, k2) = (key(1), key(2));
        c.store(&k1, &sample()).unwrap();
        assert!(matches!(c.load(&want(&k1)), Lookup::Hit(_)));
        // The same file under another key's name (copied, renamed, or planted): its checksum is
        // good, but it was written for k1. It is refused and removed.
        let dir = c.open().unwrap().path().to_path_buf();
        fs::copy(
            dir.join(DiskCache::name_of(&k1)),
            dir.join(DiskCache::name_of(&k2)),
        )
        .unwrap();
        assert!(matches!(c.load(&want(&k2)), Lookup::Corrupt));
        assert!(!dir.join(DiskCache::name_of(&k2)).exists());
        // Asked for with another target, output or program: not served.
        for w in [
            Expect {
                target: Arch::new(8, 0),
                ..want(&k1)
            },
            Expect {
                output: Output::Ptx,
                ..want(&k1)
            },
            Expect {
                program: "other",
                ..want(&k1)
            },
        ] {
            c.store(&k1, &sample()).unwrap();
            assert!(matches!(c.load(&w), Lookup::Corrupt));
        }
    }

    #[test]
    fn hostile_files_under_an_entrys_name_are_never_read() {
        let (_t, c) = cache();
        let dir = c.open().unwrap().path().to_path_buf();
        let at = |n: u8| dir.join(DiskCache::name_of(&key(n)));
        // A FIFO: opening it for reading would block until a writer comes.
        let fifo = std::ffi::CString::new(at(1).as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        // A link to /dev/zero: reading it never ends.
        symlink("/dev/zero", at(2)).unwrap();
        // A file others may write.
        c.store(&key(4), &sample()).unwrap();
        fs::set_permissions(at(4), fs::Permissions::from_mode(0o666)).unwrap();
        // A huge sparse file: reading it would take all memory (made after the store above,
        // whose eviction would remove it: it is this user's file).
        fs::File::create(at(3)).unwrap().set_len(8 << 30).unwrap();
        // A directory.
        fs::create_dir(at(5)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for n in 1..=5 {
                let r = match c.load(&want(&key(n))) {
                    Lookup::Refused(reason) => Ok(reason),
                    Lookup::Hit(_) => Err("hit"),
                    Lookup::Corrupt => Err("read as corrupt"),
                    Lookup::Miss => Err("miss"),
                };
                tx.send((n, r)).unwrap();
            }
        });
        for _ in 1..=5 {
            let (n, r) = rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .expect("a lookup blocked or ran away");
            let reason = r.unwrap_or_else(|e| panic!("entry {n}: {e}"));
            let expect = ["", "regular", "link", "bound", "writable", "regular"][n as usize];
            assert!(reason.contains(expect), "entry {n}: {reason}");
        }
        assert!(
            at(1).exists() && at(3).exists(),
            "others' files are left alone"
        );
    }

    #[test]
    fn another_users_entry_is_refused_even_when_it_is_valid() {
        if !is_root() {
            eprintln!(
                "SKIPPED another_users_entry_is_refused_even_when_it_is_valid: needs root to give \
                 a file to another uid"
            );
            return;
        }
        let (_t, c) = cache();
        let k = key(7);
        c.store(&k, &sample()).unwrap();
        let path = c.open().unwrap().path().join(DiskCache::name_of(&k));
        std::os::unix::fs::chown(&path, Some(64203), Some(64203)).unwrap();
        match c.load(&want(&k)) {
            Lookup::Refused(reason) => assert!(reason.contains("uid 64203"), "{reason}"),
            _ => panic!("another user's entry was read"),
        }
        // Eviction never removes it either.
        assert_eq!(c.size(), 0);
        assert!(path.exists());
    }

    #[test]
    fn untrusted_directories_are_not_used() {
        let t = tempfile::tempdir().unwrap();
        // Writable by everybody, no sticky bit: anybody could swap the entries.
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let c = DiskCache::new(open.join("kernels"), 1 << 20);
        let e = c.open().unwrap_err().to_string();
        assert!(
            e.contains("writable by everybody") && e.contains("open"),
            "{e}"
        );
        assert!(!open.join("kernels").exists(), "nothing created under it");
        assert!(c.store(&key(1), &sample()).is_err());
        assert!(matches!(c.load(&want(&key(1))), Lookup::Miss));
        // A link on the way, placed in that directory.
        let real = t.path().join("real");
        fs::create_dir(&real).unwrap();
        symlink(&real, open.join("link")).unwrap();
        let c = DiskCache::new(open.join("link/kernels"), 1 << 20);
        assert!(c.open().is_err());
        // A link from a trusted directory is followed; the directory is created 0700.
        symlink(&real, t.path().join("ok")).unwrap();
        let c = DiskCache::new(t.path().join("ok/a/b"), 1 << 20);
        let d = c.open().unwrap();
        assert_eq!(d.path(), fs::canonicalize(real.join("a/b")).unwrap());
        let mode = fs::metadata(real.join("a/b")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        // The cache directory itself a sticky, world-writable one (like /tmp): used.
        let sticky = t.path().join("sticky");
        fs::create_dir(&sticky).unwrap();
        fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(DiskCache::new(sticky, 1 << 20).open().is_ok());
        if is_root() {
            let theirs = t.path().join("theirs");
            fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(64203), Some(64203)).unwrap();
            let e = DiskCache::new(theirs, 1 << 20)
                .open()
                .unwrap_err()
                .to_string();
            assert!(e.contains("owned by uid 64203"), "{e}");
        } else {
            eprintln!(
                "SKIPPED the other-owner part of untrusted_directories_are_not_used: needs root"
            );
        }
    }

    #[test]
    fn writes_go_through_unpredictable_exclusive_temporary_files() {
        let (_t, c) = cache();
        let dir = c.open().unwrap().path().to_path_buf();
        let k = key(9);
        // The old writer's temporary names were `.<key>.<pid>.<n>.tmp`: links planted there
        // pointed its write at any file the user can write.
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").unwrap();
        for n in 0..64 {
            symlink(
                &victim,
                dir.join(format!(".{}.{}.{n}.tmp", k.hex(), std::process::id())),
            )
            .unwrap();
        }
        c.store(&k, &sample()).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(matches!(c.load(&want(&k)), Lookup::Hit(_)));
        let entry = fs::metadata(dir.join(DiskCache::name_of(&k))).unwrap();
        assert_eq!(entry.mode() & 0o777, 0o600);
        // No temporary file of ours is left behind.
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn eviction_keeps_under_the_bound_and_removes_only_own_entries() {
        let t = tempfile::tempdir().unwrap();
        let c = DiskCache::new(t.path().join("k"), 2500);
        for n in 0..5 {
            c.store(&key(n), &sample()).unwrap();
        }
        assert!(c.size() <= 2500, "{}", c.size());
        assert!(
            matches!(c.load(&want(&key(4))), Lookup::Hit(_)),
            "the newest stays"
        );
    }
}
