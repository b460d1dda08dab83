//! The tail of a persistent `wgmma` grid cut along K (a stream-K tail,
//! [`super::plan::Plan::tail`]): when a product's work units are not a whole number of waves,
//! the last, partial wave leaves most SMs idle while a few blocks run whole tiles. The kernel
//! then cuts each of those tail tiles into [`super::plan::tail_pieces`] pieces of whole k tiles,
//! one block each; every piece writes its partial tile to a slot of this workspace and counts
//! itself on the tile's counter, and the piece that counts last sums the tile's slots in piece
//! order and stores the tile (`gemm_wgmma.cu`, `work_unit` and the tail epilogue). The counters
//! start at zero for each launch (a memset on the launch's stream); the workspace comes from
//! the device's caching allocator under the current owner, like the pack buffer, and returns
//! to it in stream order.

use super::plan::{self, TileConfig};
use crate::alloc::{current_owner, DeviceBuffer};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::Stream;

/// Bytes before the slots: the counters, rounded up so that the slots are 16-byte aligned.
fn counter_bytes(tiles: u64) -> u64 {
    (tiles * 4).div_ceil(256) * 256
}

/// The tail of one launch: units from `from` on are pieces, `pieces` per tail tile; the
/// counters at `counters`, the slots at `slots` (0 for both without a tail).
pub(crate) struct Tail {
    _buf: Option<DeviceBuffer>,
    /// First unit of the tail (the units before it are whole tiles).
    pub from: u64,
    /// Pieces per tail tile (0: no tail).
    pub pieces: u32,
    /// One u32 counter per tail tile and block of a cluster.
    pub counters: u64,
    /// `pieces` slots of BM x BN floats per tail tile and block of a cluster.
    pub slots: u64,
}

impl Tail {
    /// No tail: every unit is a whole tile.
    pub fn none() -> Tail {
        Tail {
            _buf: None,
            from: 0,
            pieces: 0,
            counters: 0,
            slots: 0,
        }
    }

    /// The tail of a launch of `units` work units (clusters' tiles) of `nkt` k tiles each on a
    /// grid of `grid_units` units, for configuration `cfg`: its workspace allocated and its
    /// counters zeroed on `stream`, or [`Tail::none`] where [`plan::tail_pieces`] keeps whole
    /// tiles.
    pub fn prepare(
        stream: &Stream,
        dev: &Device,
        cfg: &TileConfig,
        units: u64,
        grid_units: u64,
        nkt: u32,
    ) -> Result<Tail> {
        let pieces = plan::tail_pieces(units, grid_units, nkt);
        if pieces < 2 {
            return Ok(Tail::none());
        }
        let from = units - units % grid_units;
        let tiles = (units - from) * cfg.cluster.max(1) as u64;
        let slot = cfg.bm as u64 * cfg.bn as u64 * 4;
        let head = counter_bytes(tiles);
        let bytes = head + tiles * pieces as u64 * slot;
        let len = usize::try_from(bytes).map_err(|_| {
            Error::invalid(
                "gemm",
                format!("a tail workspace of {bytes} bytes does not fit this host"),
            )
        })?;
        let buf = dev.allocator().alloc_for(&current_owner(), len, stream)?;
        // The counters are ordered on `stream` before the kernel that reads them.
        buf.zero_async(head as usize, stream)?;
        Ok(Tail {
            counters: buf.ptr(),
            slots: buf.ptr() + head,
            _buf: Some(buf),
            from,
            pieces,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_whole_aligned_counters() {
        assert_eq!(counter_bytes(1), 256);
        assert_eq!(counter_bytes(64), 256);
        assert_eq!(counter_bytes(65), 512);
    }
}
