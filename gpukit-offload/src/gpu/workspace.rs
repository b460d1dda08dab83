//! cuSOLVER workspace sizes, asked once per (routine, shape, precision, flags) and lane.
//!
//! A size query is host work inside cuSOLVER (a few microseconds, more for the eigen- and SVD
//! solvers), paid by every call before; the answer depends only on the arguments in the key
//! and on the device, which a lane never changes. Each lane keeps its own map (no lock); a
//! lane answers a shape it has seen without asking cuSOLVER again. The map is bounded: past
//! [`MAX_ENTRIES`] it starts afresh (programs with ever-new shapes pay the query as before).

use crate::gpu::fail::GResult;
use crate::ops::Precision;
use foldhash::HashMap;

/// The most sizes a lane keeps.
pub(crate) const MAX_ENTRIES: usize = 4096;

/// Which workspace query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Query {
    Potrf,
    Potri,
    Getrf,
    Geqrf,
    Orgqr,
    Ormqr,
    Syevd,
    Syevdx,
    Gesvd,
    Gesvdp,
}

/// Everything a workspace size depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct WsKey {
    pub(crate) query: Query,
    pub(crate) p: Precision,
    /// Dimensions and other integer arguments (unused ones 0).
    pub(crate) dims: [i64; 6],
    /// Flags (uplo, jobs, modes) packed by the caller.
    pub(crate) flags: u32,
}

impl WsKey {
    pub(crate) fn new(query: Query, p: Precision, dims: &[i64], flags: u32) -> WsKey {
        let mut d = [0i64; 6];
        for (slot, v) in d.iter_mut().zip(dims) {
            *slot = *v;
        }
        WsKey {
            query,
            p,
            dims: d,
            flags,
        }
    }
}

/// A lane's sizes: `(device bytes, host bytes)` per key.
#[derive(Debug, Default)]
pub(crate) struct WsCache {
    map: HashMap<WsKey, (usize, usize)>,
}

impl WsCache {
    /// The size for `key`, from the map or from `query` (kept when it succeeds). The bool says
    /// whether cuSOLVER was asked.
    pub(crate) fn get_or(
        &mut self,
        key: WsKey,
        query: impl FnOnce() -> GResult<(usize, usize)>,
    ) -> GResult<((usize, usize), bool)> {
        if let Some(&v) = self.map.get(&key) {
            return Ok((v, false));
        }
        let v = query()?;
        if self.map.len() >= MAX_ENTRIES {
            self.map.clear();
        }
        self.map.insert(key, v);
        Ok((v, true))
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::fail::{fail, GpuFailKind};

    #[test]
    fn a_size_is_asked_once_per_key_and_failures_are_not_kept() {
        let mut c = WsCache::default();
        let k = WsKey::new(Query::Potrf, Precision::D, &[4], 1);
        let mut asked = 0;
        for i in 0..3 {
            let (v, q) = c
                .get_or(k, || {
                    asked += 1;
                    Ok((512, 16))
                })
                .unwrap();
            assert_eq!(v, (512, 16));
            assert_eq!(q, i == 0, "asked only the first time");
        }
        assert_eq!(asked, 1);
        // another shape, precision or flag is another key
        for other in [
            WsKey::new(Query::Potrf, Precision::D, &[5], 1),
            WsKey::new(Query::Potrf, Precision::S, &[4], 1),
            WsKey::new(Query::Potrf, Precision::D, &[4], 0),
            WsKey::new(Query::Getrf, Precision::D, &[4], 1),
        ] {
            assert_ne!(other, k);
            let (_, q) = c.get_or(other, || Ok((1, 0))).unwrap();
            assert!(q);
        }
        // a failed query is asked again next time
        let bad = WsKey::new(Query::Syevd, Precision::Z, &[9], 0);
        assert!(c
            .get_or(bad, || Err(fail(GpuFailKind::Error, "no")))
            .is_err());
        let (v, q) = c.get_or(bad, || Ok((7, 7))).unwrap();
        assert_eq!((v, q), ((7, 7), true));
    }

    #[test]
    fn the_map_is_bounded() {
        let mut c = WsCache::default();
        for n in 0..(MAX_ENTRIES as i64 + 10) {
            c.get_or(WsKey::new(Query::Getrf, Precision::D, &[n, n], 0), || {
                Ok((1, 1))
            })
            .unwrap();
        }
        assert!(c.len() <= MAX_ENTRIES);
    }
}
