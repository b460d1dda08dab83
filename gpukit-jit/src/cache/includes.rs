//! The headers a compilation may read from disk, found the way NVRTC searches for them, so
//! that a cache key covers their content: a changed header is a different key, never a stale
//! hit.
//!
//! Every `#include` of the source, of the in-memory headers and (recursively) of the files found
//! is resolved against the in-memory headers, the including file's directory, the current
//! directory (for the source itself) and every include directory (`include_paths`, `-I` /
//! `--include-path` in `extra`); `--pre-include` / `-include` headers count too. Every file
//! that matches along that search path is hashed (not only the first: the key never depends on
//! which one NVRTC would pick), with its path. Conditional compilation is ignored (an include
//! inside `#if 0` still counts), which can only make keys change more often, never less. An
//! `#include MACRO` cannot be resolved by scanning: then every file under every include
//! directory is hashed.

use crate::options::CompileOptions;
use crate::signature::strip_comments;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// At most this many files are read for one key.
const MAX_FILES: usize = 4096;
/// At most this many bytes are read for one key (larger headers still change the key by size
/// and modification time).
const MAX_BYTES: u64 = 64 << 20;

/// An `#include` directive's target.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Quoted(String),
    Angled(String),
    Macro,
}

fn directives(text: &str) -> Vec<Target> {
    let clean = strip_comments(text);
    let mut out = Vec::new();
    for line in clean.lines() {
        let l = line.trim_start();
        let Some(rest) = l.strip_prefix('#') else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(rest) = rest
            .strip_prefix("include_next")
            .or_else(|| rest.strip_prefix("include"))
        else {
            continue;
        };
        let rest = rest.trim();
        let t = if let Some(r) = rest.strip_prefix('"') {
            match r.find('"') {
                Some(end) => Target::Quoted(r[..end].to_string()),
                None => Target::Macro,
            }
        } else if let Some(r) = rest.strip_prefix('<') {
            match r.find('>') {
                Some(end) => Target::Angled(r[..end].to_string()),
                None => Target::Macro,
            }
        } else {
            Target::Macro
        };
        out.push(t);
    }
    out
}

/// Include directories and pre-included headers named by the options.
fn search_setup(options: &CompileOptions) -> (Vec<PathBuf>, Vec<String>) {
    let mut dirs: Vec<PathBuf> = options.include_paths.iter().map(PathBuf::from).collect();
    let mut pre = Vec::new();
    let mut extra = options.extra.iter();
    while let Some(a) = extra.next() {
        if let Some(d) = a.strip_prefix("--include-path=") {
            dirs.push(d.into());
        } else if a == "-I" || a == "--include-path" {
            if let Some(d) = extra.next() {
                dirs.push(d.into());
            }
        } else if let Some(d) = a.strip_prefix("-I") {
            dirs.push(d.into());
        } else if let Some(h) = a.strip_prefix("--pre-include=") {
            pre.push(h.to_string());
        } else if a == "-include" || a == "--pre-include" {
            if let Some(h) = extra.next() {
                pre.push(h.clone());
            }
        }
    }
    (dirs, pre)
}

struct Hasher {
    h: Sha256,
    seen: HashSet<PathBuf>,
    files: usize,
    bytes: u64,
}

impl Hasher {
    fn field(&mut self, bytes: &[u8]) {
        self.h.update((bytes.len() as u64).to_le_bytes());
        self.h.update(bytes);
    }

    /// Hashes the file at `path` (if it exists and was not hashed yet); returns its text for
    /// scanning.
    fn file(&mut self, path: &Path) -> Option<String> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if !self.seen.insert(canon.clone()) || self.files >= MAX_FILES {
            return None;
        }
        self.files += 1;
        self.field(canon.to_string_lossy().as_bytes());
        if self.bytes + meta.len() > MAX_BYTES {
            // Too much to read: size and modification time still change the key.
            self.field(&meta.len().to_le_bytes());
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            self.field(&mtime.to_le_bytes());
            return None;
        }
        match std::fs::read(&canon) {
            Ok(bytes) => {
                self.bytes += bytes.len() as u64;
                self.field(&bytes);
                Some(String::from_utf8_lossy(&bytes).into_owned())
            }
            Err(e) => {
                self.field(format!("unreadable: {e}").as_bytes());
                None
            }
        }
    }

    fn tree(&mut self, dir: &Path, depth: usize) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                if depth < 16 {
                    self.tree(&p, depth + 1);
                }
            } else {
                self.file(&p);
            }
        }
    }
}

/// The digest of every header the compilation may read from disk, or `None` when it can read
/// none (no include directories and nothing on disk named by the source's includes).
pub(crate) fn disk_header_digest(source: &str, options: &CompileOptions) -> Option<[u8; 32]> {
    let (dirs, pre) = search_setup(options);
    let cwd = std::env::current_dir().ok();
    let mut h = Hasher {
        h: Sha256::new(),
        seen: HashSet::new(),
        files: 0,
        bytes: 0,
    };
    h.field(b"gpukit-jit disk headers v1");
    let mut any_macro = false;
    // (text, directory of the file it came from, whether it is the main source)
    let mut work: Vec<(String, Option<PathBuf>, bool)> = vec![(source.to_string(), None, true)];
    for (_, content) in &options.headers {
        work.push((content.clone(), None, false));
    }
    let mut pending: Vec<(Target, Option<PathBuf>, bool)> = pre
        .into_iter()
        .map(|p| (Target::Quoted(p), None, true))
        .collect();
    while !work.is_empty() || !pending.is_empty() {
        while let Some((text, dir, main)) = work.pop() {
            for t in directives(&text) {
                pending.push((t, dir.clone(), main));
            }
        }
        let Some((target, dir, main)) = pending.pop() else {
            break;
        };
        let (name, quoted) = match target {
            Target::Quoted(n) => (n, true),
            Target::Angled(n) => (n, false),
            Target::Macro => {
                any_macro = true;
                continue;
            }
        };
        let in_memory = options.headers.iter().any(|(n, _)| *n == name);
        let mut candidates: Vec<PathBuf> = Vec::new();
        if Path::new(&name).is_absolute() {
            candidates.push(PathBuf::from(&name));
        } else {
            if quoted {
                if let Some(d) = &dir {
                    candidates.push(d.join(&name));
                } else if main && !in_memory {
                    if let Some(c) = &cwd {
                        candidates.push(c.join(&name));
                    }
                }
            }
            candidates.extend(dirs.iter().map(|d| d.join(&name)));
        }
        let mut found = false;
        for c in candidates {
            if let Some(text) = h.file(&c) {
                found = true;
                work.push((text, c.parent().map(Path::to_path_buf), false));
            }
        }
        if !found {
            // In memory (already in the key), built into NVRTC, or missing (the compile fails).
            h.field(format!("not on disk: {name}").as_bytes());
        }
    }
    if any_macro {
        h.field(b"macro include: every file of the include directories");
        for d in &dirs {
            h.tree(d, 0);
        }
    }
    if h.files == 0 && !any_macro {
        return None;
    }
    Some(h.h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_are_found_outside_comments() {
        let src = "#include \"a.h\"\n  #  include <b/c.h>\n// #include \"no.h\"\n/* #include \"no2.h\" */\n#include MACRO\n#define include x\n";
        assert_eq!(
            directives(src),
            vec![
                Target::Quoted("a.h".into()),
                Target::Angled("b/c.h".into()),
                Target::Macro
            ]
        );
    }

    #[test]
    fn include_dirs_from_extra_options() {
        let o = CompileOptions::new()
            .include_path("/a")
            .extra("-I/b")
            .extra("--include-path=/c")
            .extra("-I")
            .extra("/d")
            .extra("--pre-include=pre.h");
        let (dirs, pre) = search_setup(&o);
        assert_eq!(dirs, ["/a", "/b", "/c", "/d"].map(PathBuf::from).to_vec());
        assert_eq!(pre, vec!["pre.h".to_string()]);
    }

    #[test]
    fn header_content_nested_includes_and_macros_change_the_digest() {
        let dir = tempfile::tempdir().unwrap();
        let inc = dir.path().join("inc");
        std::fs::create_dir_all(inc.join("sub")).unwrap();
        std::fs::write(inc.join("top.h"), "#include \"sub/nested.h\"\n").unwrap();
        std::fs::write(inc.join("sub/nested.h"), "#define V 1\n").unwrap();
        let opts = CompileOptions::new().include_path(inc.to_string_lossy());
        let src = "#include \"top.h\"\n";
        let d1 = disk_header_digest(src, &opts).unwrap();
        assert_eq!(Some(d1), disk_header_digest(src, &opts), "deterministic");
        // Editing the nested header (found relative to top.h) changes the digest.
        std::fs::write(inc.join("sub/nested.h"), "#define V 2\n").unwrap();
        let d2 = disk_header_digest(src, &opts).unwrap();
        assert_ne!(d1, d2);
        // A source that includes nothing from disk has no digest (fast path).
        assert_eq!(disk_header_digest("int x;", &CompileOptions::new()), None);
        // An include through a macro hashes every file of the include directories.
        let m1 = disk_header_digest("#include HEADER\n", &opts).unwrap();
        std::fs::write(inc.join("unrelated.h"), "x").unwrap();
        let m2 = disk_header_digest("#include HEADER\n", &opts).unwrap();
        assert_ne!(m1, m2);
        // In-memory headers that include disk headers are followed too.
        let mem = opts.clone().header("mem.h", "#include <top.h>\n");
        let d3 = disk_header_digest("#include \"mem.h\"\n", &mem).unwrap();
        std::fs::write(inc.join("sub/nested.h"), "#define V 3\n").unwrap();
        assert_ne!(
            d3,
            disk_header_digest("#include \"mem.h\"\n", &mem).unwrap()
        );
    }
}
