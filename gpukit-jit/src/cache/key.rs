//! Cache keys: a SHA-256 over everything that changes the compiled image.

use crate::arch::Arch;
use crate::options::{CompileOptions, Output};
use sha2::{Digest, Sha256};
use std::fmt;

/// Identifies one compilation: source, in-memory headers, the content of every header the
/// compilation may read from disk (see `includes`), options, name expressions, program name,
/// target, output kind and NVRTC version.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// Computes the key.
    pub fn new(
        source: &str,
        program: &str,
        target: Arch,
        options: &CompileOptions,
        nvrtc_version: (i32, i32),
    ) -> Self {
        let mut h = Sha256::new();
        // Every field is length-prefixed so that no two different inputs concatenate to the
        // same bytes. Fields are hashed in place (no formatting): this runs on every lookup,
        // including in-memory hits.
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(b"gpukit-jit cache key v3");
        field(source.as_bytes());
        field(program.as_bytes());
        field(&[
            target.major as u8,
            target.minor as u8,
            target.arch_specific as u8,
            match options.output_kind() {
                Output::Ptx => 0,
                Output::Cubin => 1,
            },
            options.fast_math as u8,
            options.line_info as u8,
            options.verbose_ptxas as u8,
        ]);
        field(&(nvrtc_version.0 as i64).to_le_bytes());
        field(&(nvrtc_version.1 as i64).to_le_bytes());
        field(
            &options
                .max_registers
                .map(|r| r as i64)
                .unwrap_or(-1)
                .to_le_bytes(),
        );
        field(options.std.as_deref().unwrap_or("c++17").as_bytes());
        let mut list = |tag: &[u8], items: &mut dyn Iterator<Item = &str>| {
            field(tag);
            for item in items {
                field(item.as_bytes());
            }
        };
        list(
            b"headers",
            &mut options
                .headers
                .iter()
                .flat_map(|(n, c)| [n.as_str(), c.as_str()]),
        );
        list(
            b"defines",
            &mut options
                .defines
                .iter()
                .flat_map(|(n, v)| [n.as_str(), v.as_str()]),
        );
        list(
            b"includes",
            &mut options.include_paths.iter().map(String::as_str),
        );
        list(
            b"names",
            &mut options.name_expressions.iter().map(String::as_str),
        );
        list(b"extra", &mut options.extra.iter().map(String::as_str));
        // Headers found on disk through include paths: by content, not by path string.
        match super::includes::disk_header_digest(source, options) {
            Some(d) => h.update(d),
            None => h.update([0u8; 1]),
        }
        CacheKey(h.finalize().into())
    }

    /// Lower-case hex, used as the file name on disk.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", &self.hex()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_changes_the_key() {
        let base = CompileOptions::new();
        let a = Arch::new(9, 0);
        let k = |src: &str, prog: &str, arch: Arch, o: &CompileOptions, v: (i32, i32)| {
            CacheKey::new(src, prog, arch, o, v)
        };
        let k0 = k("s", "p", a, &base, (13, 0));
        assert_eq!(k0, k("s", "p", a, &base, (13, 0)));
        assert_ne!(k0, k("t", "p", a, &base, (13, 0)));
        assert_ne!(k0, k("s", "q", a, &base, (13, 0)));
        assert_ne!(k0, k("s", "p", a.specific(), &base, (13, 0)));
        assert_ne!(k0, k("s", "p", a, &base, (13, 1)));
        assert_ne!(k0, k("s", "p", a, &base.clone().define("X", "1"), (13, 0)));
        assert_ne!(
            k0,
            k("s", "p", a, &base.clone().header("h.h", "x"), (13, 0))
        );
        assert_ne!(
            k0,
            k("s", "p", a, &base.clone().output(Output::Ptx), (13, 0))
        );
        assert_ne!(
            k0,
            k(
                "s",
                "p",
                a,
                &base.clone().name_expression("f<int>"),
                (13, 0)
            )
        );
        // Length prefixes: moving bytes between fields changes the key.
        assert_ne!(
            k("ab", "c", a, &base, (13, 0)),
            k("a", "bc", a, &base, (13, 0))
        );
        assert_eq!(k0.hex().len(), 64);
    }

    #[test]
    fn a_changed_header_behind_an_include_path_changes_the_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("h.cuh"), "#define A 1\n").unwrap();
        let o = CompileOptions::new().include_path(dir.path().to_string_lossy());
        let src = "#include \"h.cuh\"\n__global__ void k() {}";
        let a = Arch::new(9, 0);
        let k1 = CacheKey::new(src, "p", a, &o, (13, 0));
        assert_eq!(k1, CacheKey::new(src, "p", a, &o, (13, 0)));
        std::fs::write(dir.path().join("h.cuh"), "#define A 2\n").unwrap();
        assert_ne!(k1, CacheKey::new(src, "p", a, &o, (13, 0)));
    }
}
