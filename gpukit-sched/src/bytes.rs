//! Byte quantities written the way people and Kubernetes write them: `"512MB"`, `"1GiB"`,
//! `"1.5G"`, `"4096"`.

use crate::error::{Error, Result};

/// Parses a byte quantity.
///
/// Decimal units (`k`/`kB`, `M`/`MB`, `G`/`GB`, `T`/`TB`, powers of 1000) and binary units
/// (`Ki`/`KiB`, `Mi`/`MiB`, `Gi`/`GiB`, `Ti`/`TiB`, powers of 1024) as in Kubernetes; units
/// are case-insensitive, a trailing `B` is optional, spaces between number and unit are
/// allowed, fractions are allowed when the result is a whole number of bytes.
///
/// ```
/// use gpukit_sched::parse_bytes;
/// assert_eq!(parse_bytes("512MB").unwrap(), 512_000_000);
/// assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
/// assert_eq!(parse_bytes("1.5 Ki").unwrap(), 1536);
/// assert!(parse_bytes("-1GB").is_err());
/// assert!(parse_bytes("12 parsecs").is_err());
/// ```
pub fn parse_bytes(text: &str) -> Result<u64> {
    let bad = |reason: &str| Error::invalid("byte quantity", text, reason);
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("empty; write e.g. 512MB or 1GiB"));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].trim());
    if num.is_empty() {
        return Err(bad("must start with a non-negative number"));
    }
    const UNITS: [(&str, u64); 18] = [
        ("", 1),
        ("b", 1),
        ("k", 1_000),
        ("kb", 1_000),
        ("m", 1_000_000),
        ("mb", 1_000_000),
        ("g", 1_000_000_000),
        ("gb", 1_000_000_000),
        ("t", 1_000_000_000_000),
        ("tb", 1_000_000_000_000),
        ("ki", 1 << 10),
        ("kib", 1 << 10),
        ("mi", 1 << 20),
        ("mib", 1 << 20),
        ("gi", 1 << 30),
        ("gib", 1 << 30),
        ("ti", 1 << 40),
        ("tib", 1 << 40),
    ];
    let Some(&(_, multiplier)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) else {
        return Err(bad(
            "unknown unit; use B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)",
        ));
    };
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(bad("malformed number"));
    }
    let int: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| bad("number too large"))?
    };
    let whole = int
        .checked_mul(multiplier)
        .ok_or_else(|| bad("too large for 64 bits"))?;
    if frac_part.is_empty() {
        return Ok(whole);
    }
    if frac_part.len() > 18 {
        return Err(bad("too many decimal places"));
    }
    let frac: u128 = frac_part.parse().map_err(|_| bad("malformed fraction"))?;
    let scale = 10u128.pow(frac_part.len() as u32);
    let scaled = frac * multiplier as u128;
    if !scaled.is_multiple_of(scale) {
        return Err(bad("is not a whole number of bytes"));
    }
    whole
        .checked_add((scaled / scale) as u64)
        .ok_or_else(|| bad("too large for 64 bits"))
}

/// Formats bytes with a binary unit, for messages and tables (`"1.50 GiB"`).
///
/// ```
/// assert_eq!(gpukit_sched::format_bytes(3 << 29), "1.50 GiB");
/// assert_eq!(gpukit_sched::format_bytes(512), "512 B");
/// ```
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.2} {unit}")
}

/// A byte quantity given either as a number or as text; text is parsed when the task spec is
/// validated (at submit), so a bad string is an error there and leaves no state behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByteSize {
    /// A number of bytes.
    Bytes(u64),
    /// Text such as `"512MB"` (see [`parse_bytes`]).
    Text(String),
}

impl ByteSize {
    /// The number of bytes, parsing text.
    pub fn resolve(&self) -> Result<u64> {
        match self {
            ByteSize::Bytes(b) => Ok(*b),
            ByteSize::Text(t) => parse_bytes(t),
        }
    }
}

impl From<u64> for ByteSize {
    fn from(b: u64) -> Self {
        ByteSize::Bytes(b)
    }
}
impl From<usize> for ByteSize {
    fn from(b: usize) -> Self {
        ByteSize::Bytes(b as u64)
    }
}
impl From<&str> for ByteSize {
    fn from(t: &str) -> Self {
        ByteSize::Text(t.to_string())
    }
}
impl From<String> for ByteSize {
    fn from(t: String) -> Self {
        ByteSize::Text(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units() {
        for (s, v) in [
            ("0", 0u64),
            ("4096", 4096),
            ("4096B", 4096),
            ("1k", 1000),
            ("1KiB", 1024),
            ("512MB", 512_000_000),
            ("512mib", 512 << 20),
            ("1GiB", 1 << 30),
            ("2 GB", 2_000_000_000),
            ("1.5GiB", 3 << 29),
            (".5Ki", 512),
            ("1Ti", 1 << 40),
        ] {
            assert_eq!(parse_bytes(s).unwrap(), v, "{s}");
        }
    }

    #[test]
    fn rejects() {
        for s in [
            "",
            " ",
            "GB",
            "-1",
            "1.2.3G",
            "1.0000001KiB",
            "1 XB",
            "99999999999999999999",
            "20000000TB",
            "1e9",
            ".",
            "1..5M",
        ] {
            let e = parse_bytes(s).unwrap_err();
            assert!(matches!(e, Error::InvalidSpec { .. }), "{s}: {e}");
        }
    }

    proptest! {
        #[test]
        fn roundtrip_integers(n in 0u64..1_000_000, unit in 0usize..8) {
            let (u, m) = [("", 1u64), ("kB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000),
                ("KiB", 1024), ("MiB", 1 << 20), ("GiB", 1 << 30), ("B", 1)][unit];
            prop_assert_eq!(parse_bytes(&format!("{n}{u}")).unwrap(), n * m);
        }

        #[test]
        fn never_panics(s in "\\PC{0,16}") {
            let _ = parse_bytes(&s);
        }
    }
}
