//! Reading a whole file up to a bound.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::meta::Meta;

/// How much is read at a time once the file turns out larger than `fstat` said.
const CHUNK: usize = 1 << 16;

/// Reads all of `file`, whose `fstat` is `meta`, if it holds at most `max` bytes: `Ok(None)`
/// when it is larger. The size is checked before a byte is read (a huge sparse file costs
/// nothing), and the read stops one byte past `max` (a file that grows meanwhile, say a
/// writer appending without end, is refused after at most `max + 1` bytes). Reads from offset
/// 0 whatever the file position.
pub fn read_bounded(file: &File, meta: &Meta, max: u64) -> io::Result<Option<Vec<u8>>> {
    if meta.size > max {
        return Ok(None);
    }
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    // `meta.size <= max`, so this fits; one byte more lets the first read meet the end.
    let expected = usize::try_from(meta.size).unwrap_or(limit);
    let mut buf = vec![0u8; expected.saturating_add(1)];
    let mut len = 0;
    loop {
        if len == buf.len() {
            if len > limit {
                return Ok(None);
            }
            let room = limit.saturating_add(1) - len;
            buf.resize(len + room.min(CHUNK), 0);
        }
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    if len > limit {
        return Ok(None);
    }
    buf.truncate(len);
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::{Seek, Write};

    #[test]
    fn reads_up_to_the_bound_and_refuses_more() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("f");
        let body: Vec<u8> = (0..200_000u32).map(|i| (i * 31) as u8).collect();
        fs::write(&p, &body).expect("write");
        let mut f = fs::File::open(&p).expect("open");
        f.seek(io::SeekFrom::Start(777)).expect("seek");
        let m = crate::fstat(&f).expect("fstat");
        assert_eq!(read_bounded(&f, &m, 200_000).expect("read"), Some(body));
        assert_eq!(read_bounded(&f, &m, 199_999).expect("read"), None);
        let e = t.path().join("empty");
        fs::write(&e, b"").expect("write");
        let f = fs::File::open(&e).expect("open");
        let m = crate::fstat(&f).expect("fstat");
        assert_eq!(read_bounded(&f, &m, 0).expect("read"), Some(vec![]));
    }

    #[test]
    fn a_huge_sparse_file_is_refused_unread() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("sparse");
        let f = fs::File::create(&p).expect("create");
        f.set_len(1 << 40).expect("sparse");
        let f = fs::File::open(&p).expect("open");
        let m = crate::fstat(&f).expect("fstat");
        assert_eq!(read_bounded(&f, &m, 4096).expect("read"), None);
    }

    #[test]
    fn a_file_that_grew_after_its_stat_is_refused_at_the_bound() {
        let t = tempfile::tempdir().expect("tempdir");
        let p = t.path().join("grows");
        fs::write(&p, b"small").expect("write");
        let f = fs::File::open(&p).expect("open");
        let stale = crate::fstat(&f).expect("fstat");
        // Grows to 1 MiB (sparse) after the stat: the stale size passes the first check.
        let mut w = fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .expect("open for append");
        w.write_all(b"more").expect("append");
        w.set_len(1 << 20).expect("grow");
        assert_eq!(read_bounded(&f, &stale, 4096).expect("read"), None);
        // With a bound it fits, it is read whole, past the stale size.
        let got = read_bounded(&f, &stale, 1 << 20)
            .expect("read")
            .expect("fits");
        assert_eq!(got.len(), 1 << 20);
        assert_eq!(&got[..9], b"smallmore");
    }
}
