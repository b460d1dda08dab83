//! Kernel cache tests with the real NVRTC: memory and disk hits, corruption recovery, the size
//! bound, `GPUKIT_CACHE=off`, and concurrent use from threads and from several processes.

mod common;

use common::{options, temp_dir, KERNELS};
use gpukit_jit::{testing, Arch, CacheConfig, CompileOptions, KernelCache};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn cache_in(dir: &Path, max_bytes: u64) -> KernelCache {
    KernelCache::new(CacheConfig {
        memory_entries: 4,
        disk_dir: Some(dir.to_path_buf()),
        disk_max_bytes: max_bytes,
    })
}

fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// A distinct, valid source per `i` (distinct cache keys).
fn variant(i: usize) -> String {
    format!("extern \"C\" __global__ void k{i}(int* x) {{ x[threadIdx.x] += {i}; }}\n")
}

#[test]
fn memory_then_disk_hits_with_stats() {
    if !testing::nvrtc("memory_then_disk_hits_with_stats") {
        return;
    }
    let dir = temp_dir();
    let sm90 = Arch::new(9, 0);
    let c = cache_in(dir.path(), 1 << 30);
    let a = c.get_or_compile(KERNELS, "t", sm90, &options()).unwrap();
    let b = c.get_or_compile(KERNELS, "t", sm90, &options()).unwrap();
    assert!(
        Arc::ptr_eq(&a, &b),
        "second lookup is the same in-memory entry"
    );
    let s = c.stats();
    assert_eq!((s.misses, s.memory_hits, s.disk_hits), (1, 1, 0));
    // A new cache object over the same directory hits the disk and yields identical bytes.
    let c2 = cache_in(dir.path(), 1 << 30);
    let d = c2.get_or_compile(KERNELS, "t", sm90, &options()).unwrap();
    assert_eq!(d.image, a.image);
    assert_eq!(
        d.kernels, a.kernels,
        "signatures are re-parsed on a disk hit"
    );
    assert_eq!((c2.stats().misses, c2.stats().disk_hits), (0, 1));
    // Another target or option is another entry.
    c2.get_or_compile(KERNELS, "t", Arch::new(8, 0), &options())
        .unwrap();
    c2.get_or_compile(KERNELS, "t", sm90, &options().define("X", "1"))
        .unwrap();
    assert_eq!(c2.stats().misses, 2);
    assert_eq!(entries(dir.path()).len(), 3);
    // The memory level is bounded (4 entries here) and counts evictions.
    for i in 0..6 {
        c2.get_or_compile(&variant(i), "v", sm90, &CompileOptions::new())
            .unwrap();
    }
    assert!(c2.stats().memory_evictions >= 4, "{:?}", c2.stats());
}

#[test]
fn corrupted_or_truncated_entries_are_discarded_and_rebuilt() {
    if !testing::nvrtc("corrupted_or_truncated_entries_are_discarded_and_rebuilt") {
        return;
    }
    let dir = temp_dir();
    let sm = Arch::new(8, 0);
    let first = cache_in(dir.path(), 1 << 30)
        .get_or_compile(KERNELS, "t", sm, &options())
        .unwrap();
    let c = cache_in(dir.path(), 1 << 30);
    let path = c
        .disk_path(&c.key(KERNELS, "t", sm, &options()).unwrap())
        .unwrap();
    let good = std::fs::read(&path).unwrap();
    // One flipped byte in the middle of the image.
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    for damaged in [bad, good[..good.len() / 3].to_vec(), Vec::new()] {
        std::fs::write(&path, &damaged).unwrap();
        let c = cache_in(dir.path(), 1 << 30);
        let m = c.get_or_compile(KERNELS, "t", sm, &options()).unwrap();
        assert_eq!(m.image, first.image, "rebuilt image equals the original");
        let s = c.stats();
        assert_eq!(
            (s.corrupt_entries, s.misses, s.disk_hits),
            (1, 1, 0),
            "{s:?}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            good,
            "the entry was rewritten whole"
        );
    }
}

#[test]
fn disk_level_is_bounded_with_lru_eviction() {
    if !testing::nvrtc("disk_level_is_bounded_with_lru_eviction") {
        return;
    }
    let dir = temp_dir();
    let sm = Arch::new(8, 0);
    let probe = cache_in(dir.path(), 1 << 30);
    probe
        .get_or_compile(&variant(0), "v", sm, &CompileOptions::new())
        .unwrap();
    let one = probe.disk_size();
    assert!(one > 0);
    // Room for about four entries.
    let bound = one * 4 + one / 2;
    let c = cache_in(dir.path(), bound);
    for i in 1..12 {
        c.get_or_compile(&variant(i), "v", sm, &CompileOptions::new())
            .unwrap();
        // Keep entry 1 hot on disk: a new cache object reads it (refreshing its mtime).
        std::thread::sleep(std::time::Duration::from_millis(15));
        cache_in(dir.path(), bound)
            .get_or_compile(&variant(1), "v", sm, &CompileOptions::new())
            .unwrap();
    }
    assert!(c.disk_size() <= bound, "{} > {bound}", c.disk_size());
    assert!(c.stats().disk_evictions > 0);
    let hot = c
        .disk_path(&c.key(&variant(1), "v", sm, &CompileOptions::new()).unwrap())
        .unwrap();
    let newest = c
        .disk_path(
            &c.key(&variant(11), "v", sm, &CompileOptions::new())
                .unwrap(),
        )
        .unwrap();
    let oldest = c
        .disk_path(&c.key(&variant(2), "v", sm, &CompileOptions::new()).unwrap())
        .unwrap();
    assert!(hot.exists(), "the recently used entry survives");
    assert!(newest.exists(), "the newest entry survives");
    assert!(
        !oldest.exists(),
        "the least recently used entry was evicted"
    );
}

#[test]
fn cache_off_writes_nothing() {
    if !testing::nvrtc("cache_off_writes_nothing") {
        return;
    }
    let dir = temp_dir();
    let vars = |k: &str| match k {
        "GPUKIT_CACHE" => Some("off".to_string()),
        "GPUKIT_CACHE_DIR" => Some(dir.path().to_string_lossy().into_owned()),
        _ => None,
    };
    let c = KernelCache::new(CacheConfig::from_vars(vars).unwrap());
    assert!(c.disk_dir().is_none());
    c.get_or_compile(KERNELS, "t", Arch::new(8, 0), &options())
        .unwrap();
    c.get_or_compile(KERNELS, "t", Arch::new(8, 0), &options())
        .unwrap();
    assert_eq!((c.stats().misses, c.stats().memory_hits), (1, 1));
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn threads_share_one_compile_per_key() {
    if !testing::nvrtc("threads_share_one_compile_per_key") {
        return;
    }
    let dir = temp_dir();
    let c = Arc::new(cache_in(dir.path(), 1 << 30));
    let images: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                s.spawn(move || {
                    c.get_or_compile(KERNELS, "t", Arch::new(9, 0), &options())
                        .unwrap()
                        .image
                        .clone()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(images.windows(2).all(|w| w[0] == w[1]));
    let s = c.stats();
    assert_eq!(s.misses, 1, "{s:?}");
    assert_eq!(s.memory_hits + s.disk_hits, 7, "{s:?}");
}

const CHILD_ENV: &str = "GPUKIT_JIT_TEST_CHILD_DIR";

/// Child role of `processes_share_the_disk_cache`: compiles six kernels into the shared
/// directory and prints a digest of each image.
#[test]
fn child_compile_worker() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // Only meaningful when started by the parent test.
    };
    let c = cache_in(Path::new(&dir), 1 << 30);
    for i in 0..6 {
        let m = c
            .get_or_compile(&variant(i), "v", Arch::new(8, 0), &CompileOptions::new())
            .unwrap();
        let sum: u64 = m.image.iter().map(|&b| b as u64).sum();
        println!("IMAGE {i} {} {sum}", m.image.len());
    }
}

#[test]
fn processes_share_the_disk_cache() {
    if !testing::nvrtc("processes_share_the_disk_cache") {
        return;
    }
    let dir = temp_dir();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_compile_worker",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Vec<String>> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "a child failed");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                // libtest may print "test child_compile_worker ... " on the same line.
                .filter_map(|l| l.find("IMAGE ").map(|i| l[i..].to_string()))
                .collect()
        })
        .collect();
    assert_eq!(outputs[0].len(), 6);
    assert!(
        outputs.windows(2).all(|w| w[0] == w[1]),
        "every process saw the same images"
    );
    let files = entries(dir.path());
    assert_eq!(
        files.len(),
        6,
        "one entry per kernel and no temporary files: {files:?}"
    );
    // Every entry is valid: a fresh cache hits all six from disk.
    let c = cache_in(dir.path(), 1 << 30);
    for i in 0..6 {
        c.get_or_compile(&variant(i), "v", Arch::new(8, 0), &CompileOptions::new())
            .unwrap();
    }
    assert_eq!(
        (
            c.stats().disk_hits,
            c.stats().misses,
            c.stats().corrupt_entries
        ),
        (6, 0, 0)
    );
}

#[test]
fn a_header_edited_behind_an_include_path_is_recompiled_not_served_stale() {
    if !testing::nvrtc("a_header_edited_behind_an_include_path_is_recompiled_not_served_stale") {
        return;
    }
    use gpukit_jit::Output;
    let dir = temp_dir();
    let inc = temp_dir();
    std::fs::create_dir_all(inc.path().join("sub")).unwrap();
    std::fs::write(inc.path().join("top.cuh"), "#include \"sub/value.cuh\"\n").unwrap();
    std::fs::write(inc.path().join("sub/value.cuh"), "#define VALUE 12345\n").unwrap();
    let src = "#include \"top.cuh\"\nextern \"C\" __global__ void k(int* x) { x[0] = VALUE; }\n";
    let opts = CompileOptions::new()
        .include_path(inc.path().to_string_lossy())
        .output(Output::Ptx);
    let c = cache_in(dir.path(), 1 << 30);
    let sm80 = Arch::new(8, 0);
    let first = c.get_or_compile(src, "inc", sm80, &opts).unwrap();
    assert!(String::from_utf8_lossy(&first.image).contains("12345"));
    // Same inputs: a memory hit; a fresh cache: a disk hit.
    c.get_or_compile(src, "inc", sm80, &opts).unwrap();
    assert_eq!((c.stats().misses, c.stats().memory_hits), (1, 1));
    // Editing the nested header (the include-path strings are unchanged) recompiles.
    std::fs::write(inc.path().join("sub/value.cuh"), "#define VALUE 67890\n").unwrap();
    let second = c.get_or_compile(src, "inc", sm80, &opts).unwrap();
    assert_eq!(c.stats().misses, 2);
    let text = String::from_utf8_lossy(&second.image);
    assert!(
        text.contains("67890") && !text.contains("12345"),
        "stale kernel served"
    );
    // A second cache over the same directory sees the new content too.
    let c2 = cache_in(dir.path(), 1 << 30);
    let third = c2.get_or_compile(src, "inc", sm80, &opts).unwrap();
    assert_eq!(third.image, second.image);
    assert_eq!(c2.stats().disk_hits, 1);
}
