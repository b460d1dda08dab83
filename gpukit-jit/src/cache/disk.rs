//! The on-disk level: one file per entry, written atomically, checked on every read, bounded in
//! size with least-recently-used eviction (a hit refreshes the file's mtime).
//!
//! File layout: `GPUKITK1`, then length-prefixed fields (program, target, output, log,
//! lowered names, image), then the SHA-256 of everything before it. A file that is truncated,
//! has a bad checksum or does not parse is deleted and reported as corrupt; the caller recompiles.
//! Writers use a unique temporary file in the same directory and `rename` it into place, so
//! readers in other processes see either no entry or a complete one.

use super::key::CacheKey;
use crate::arch::Arch;
use crate::compile::CompiledModule;
use crate::options::Output;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

const MAGIC: &[u8; 8] = b"GPUKITK1";
const SUFFIX: &str = "kernel";

/// Outcome of a disk lookup.
pub(crate) enum Lookup {
    Hit(CompiledModule),
    Miss,
    Corrupt,
}

/// A directory of cached kernels.
#[derive(Debug)]
pub(crate) struct DiskCache {
    pub(crate) dir: PathBuf,
    pub(crate) max_bytes: u64,
}

impl DiskCache {
    pub(crate) fn path_of(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.{SUFFIX}", key.hex()))
    }

    pub(crate) fn load(&self, key: &CacheKey, source: &str) -> Lookup {
        let path = self.path_of(key);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(_) => return Lookup::Miss,
        };
        match decode(&bytes, source) {
            Some(m) => {
                // Refresh the LRU clock; failure to do so only affects eviction order.
                if let Ok(f) = fs::File::options().write(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Lookup::Hit(m)
            }
            None => {
                let _ = fs::remove_file(&path);
                Lookup::Corrupt
            }
        }
    }

    /// Writes an entry atomically, then evicts old entries past the size bound. Returns how
    /// many entries were evicted.
    pub(crate) fn store(&self, key: &CacheKey, module: &CompiledModule) -> io::Result<u64> {
        fs::create_dir_all(&self.dir)?;
        let bytes = encode(module);
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            key.hex(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_data()?;
            fs::rename(&tmp, self.path_of(key))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        Ok(self.evict(Some(&self.path_of(key))))
    }

    /// Deletes least-recently-used entries until the directory is under 90 % of the bound.
    /// `keep` (the entry just written) is removed last.
    pub(crate) fn evict(&self, keep: Option<&Path>) -> u64 {
        let Ok(read) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = read
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == SUFFIX))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        if total <= self.max_bytes {
            return 0;
        }
        let target = self.max_bytes / 10 * 9;
        entries.sort_by_key(|e| (Some(e.2.as_path()) == keep, e.0));
        let mut evicted = 0;
        for (_, len, path) in entries {
            if total <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
                evicted += 1;
            }
        }
        evicted
    }

    /// Total bytes of entries in the directory.
    pub(crate) fn size(&self) -> u64 {
        fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == SUFFIX))
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn encode(m: &CompiledModule) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.image.len() + m.log.len() + 256);
    out.extend_from_slice(MAGIC);
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

fn decode(bytes: &[u8], source: &str) -> Option<CompiledModule> {
    if bytes.len() < MAGIC.len() + 32 || &bytes[..8] != MAGIC {
        return None;
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return None;
    }
    let mut r = Reader(&body[8..]);
    let program = r.string()?;
    let target: Arch = r.string()?.parse().ok()?;
    let output = match r.field()? {
        b"ptx" => Output::Ptx,
        b"cubin" => Output::Cubin,
        _ => return None,
    };
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
        kernels: crate::signature::parse_kernels(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn round_trip_and_every_single_byte_corruption_is_caught() {
        let m = sample();
        let bytes = encode(&m);
        assert_eq!(decode(&bytes, "").as_ref(), Some(&m));
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x5a;
            assert!(decode(&bad, "").is_none(), "flip at {i} not detected");
        }
        for cut in [0, 5, 8, 40, bytes.len() - 1] {
            assert!(decode(&bytes[..cut], "").is_none(), "truncation at {cut}");
        }
    }
}
