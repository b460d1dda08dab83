//! Unpredictable name parts, so that nobody can plant a file or a link under a name this
//! process is about to create.

use std::io;

/// Length of [`random_hex`]'s result: 128 bits in hex digits.
pub const RANDOM_HEX_LEN: usize = 32;

/// 128 bits from the kernel's random generator (`getrandom(2)`), as lowercase hex.
pub fn random_hex() -> io::Result<String> {
    let mut buf = [0u8; RANDOM_HEX_LEN / 2];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: writes at most the stated number of bytes into the unfilled tail of `buf`.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        got += n.unsigned_abs();
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(RANDOM_HEX_LEN);
    for b in buf {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_of_the_stated_length_and_never_repeated() {
        let names: std::collections::HashSet<String> = (0..1000)
            .map(|_| random_hex().expect("getrandom"))
            .collect();
        assert_eq!(names.len(), 1000);
        for n in &names {
            assert_eq!(n.len(), RANDOM_HEX_LEN);
            assert!(
                n.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{n}"
            );
        }
        // Every hex digit turns up in every position over 1000 draws (a stuck nibble would not).
        for pos in 0..RANDOM_HEX_LEN {
            let seen: std::collections::HashSet<u8> =
                names.iter().map(|n| n.as_bytes()[pos]).collect();
            assert_eq!(seen.len(), 16, "position {pos}");
        }
    }
}
