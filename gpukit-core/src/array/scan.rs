//! Inclusive scans along an axis: `cumsum` and `cumprod` (NumPy's: without an axis the array
//! is flattened; integers widen to 64 bits, [`DType::Sum`]).
//!
//! One pass with decoupled look-back (see `kernels/scan.cu`): every tile of the scanned axis
//! publishes its total and finds the sum of its predecessors from their published totals and
//! prefixes, so the input is read once and the output written once. Works on `[outer, L, inner]`
//! for any axis of a contiguous array, with no transposition.

use super::GpuArray;
use crate::dtype::DType;
use crate::error::Result;
use crate::kernels::{self, KernelFile, BLOCK};
use crate::shape;
use gpukit_jit::{KernelArg, LaunchConfig};

/// Scans (codes shared with `kernels/scan.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanOp {
    /// Running sum.
    Sum = 0,
    /// Running product.
    Prod = 1,
}

/// Rows of the scanned axis one thread handles serially (SCAN_ITEMS in scan.cu).
const ITEMS: usize = 8;

/// `(tx_log2, rows per tile, tiles along the axis)` of a scan of `[outer, l, inner]`.
pub fn scan_launch(l: usize, inner: usize) -> (u32, usize, usize) {
    let tx = inner.next_power_of_two().clamp(1, 32);
    let rows = (BLOCK as usize / tx) * ITEMS;
    (tx.trailing_zeros(), rows, l.div_ceil(rows).max(1))
}

/// Byte offsets `(status, total, prefix, size)` of a scan's scratch for `tiles` tiles of `tx`
/// columns with accumulators of `acc` bytes (the ticket counter is at 0).
pub fn scratch_layout(tiles: usize, tx: usize, acc: usize) -> (usize, usize, usize, usize) {
    let status = 16;
    let total = (status + 4 * tiles).next_multiple_of(16);
    let prefix = (total + acc * tiles * tx).next_multiple_of(16);
    (status, total, prefix, prefix + acc * tiles * tx)
}

/// Warps per block and rows per warp of `scan_flat` (SF_WARPS, SF_ROWS in scan.cu).
const FLAT_WARPS: usize = 8;
const FLAT_ROWS: usize = 8;
/// Scanned axes at least this long (with inner == 1) take `scan_flat`.
const FLAT_MIN: usize = 1024;

/// Elements per tile of `scan_flat` for elements of `elem` bytes (a 16-byte vector per lane and
/// row).
pub fn flat_tile(elem: usize) -> usize {
    FLAT_WARPS * FLAT_ROWS * 32 * (16 / elem)
}

impl<T: DType> GpuArray<T> {
    /// `scan_flat` over `outer` contiguous segments of `l` elements (self contiguous).
    fn scan_flat(&self, op: ScanOp, out: &GpuArray<T::Sum>, outer: usize, l: usize) -> Result<()> {
        let dev = &self.dev;
        let stream = dev.stream();
        let elem = std::mem::size_of::<T>();
        let ntiles = l.div_ceil(flat_tile(elem));
        let tiles = outer * ntiles;
        if tiles > u32::MAX as usize / 2 {
            return Err(crate::Error::invalid(
                "cumsum",
                format!("too many tiles ({tiles}) for one launch"),
            ));
        }
        let desc = if std::mem::size_of::<T::ScanAcc>() == 4 {
            8
        } else {
            16
        };
        let scratch = GpuArray::<u8>::zeros(dev, &[16 + desc * tiles])?;
        let vec = self.device_ptr().is_multiple_of(16)
            && out.device_ptr().is_multiple_of(16)
            && l.is_multiple_of(16 / elem);
        self.used_on(&stream);
        out.used_on(&stream);
        scratch.used_on(&stream);
        let k = self.kernel(
            KernelFile::Scan,
            &format!("scan_flat<{}, {}>", T::NAME, op as u32),
        )?;
        kernels::launch(
            &k,
            &stream,
            LaunchConfig::new((tiles as u32, 1, 1), ((FLAT_WARPS * 32) as u32, 1, 1)),
            &[
                self.arg(),
                out.arg(),
                (l as i64).into(),
                (ntiles as i64).into(),
                (vec as i32).into(),
                KernelArg::Ptr(scratch.device_ptr()),
                KernelArg::Ptr(scratch.device_ptr() + 16),
            ],
        )
    }

    /// Running sums along `axis` (`None`: of the flattened array).
    pub fn cumsum(&self, axis: Option<isize>) -> Result<GpuArray<T::Sum>> {
        self.scan(ScanOp::Sum, axis)
    }

    /// Running products along `axis` (`None`: of the flattened array).
    pub fn cumprod(&self, axis: Option<isize>) -> Result<GpuArray<T::Sum>> {
        self.scan(ScanOp::Prod, axis)
    }

    /// The inclusive scan `op` along `axis` (`None`: flattened).
    pub fn scan(&self, op: ScanOp, axis: Option<isize>) -> Result<GpuArray<T::Sum>> {
        let src = self.contiguous()?;
        let (shape_out, outer, l, inner) = match axis {
            None => (vec![self.len()], 1, self.len(), 1),
            Some(a) => {
                let ax = shape::normalize_axis("cumsum", a, self.ndim())?;
                let (o, l, i) = shape::split_at_axis(&self.shape, ax);
                (self.shape.clone(), o, l, i)
            }
        };
        let dev = self.dev.clone();
        let stream = dev.stream();
        let out = GpuArray::<T::Sum>::alloc_on(&dev, &shape_out, &stream)?;
        if out.is_empty() {
            return Ok(out);
        }
        if inner == 1 && l >= FLAT_MIN {
            src.scan_flat(op, &out, outer, l)?;
            return Ok(out);
        }
        let (tx_log2, _rows, ntiles) = scan_launch(l, inner);
        let tx = 1usize << tx_log2;
        let tiles = outer * inner.div_ceil(tx) * ntiles;
        if tiles > u32::MAX as usize / 2 {
            return Err(crate::Error::invalid(
                "cumsum",
                format!("too many tiles ({tiles}) for one launch"),
            ));
        }
        let acc = std::mem::size_of::<T::ScanAcc>();
        let (st, tot, pre, size) = scratch_layout(tiles, tx, acc);
        let scratch = GpuArray::<u8>::zeros(&dev, &[size])?;
        src.used_on(&stream);
        out.used_on(&stream);
        scratch.used_on(&stream);
        let at = |off: usize| KernelArg::Ptr(scratch.device_ptr() + off as u64);
        let k = src.kernel(
            KernelFile::Scan,
            &format!("scan_onepass<{}, {}>", T::NAME, op as u32),
        )?;
        kernels::launch(
            &k,
            &stream,
            LaunchConfig::new((tiles as u32, 1, 1), (BLOCK, 1, 1)),
            &[
                src.arg(),
                out.arg(),
                (outer as i64).into(),
                (l as i64).into(),
                (inner as i64).into(),
                (tx_log2 as i32).into(),
                (ntiles as i64).into(),
                at(0),
                at(st),
                at(tot),
                at(pre),
            ],
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{scan_launch, scratch_layout};

    #[test]
    fn tiles_cover_the_axis_and_scratch_regions_do_not_overlap() {
        assert_eq!(scan_launch(100_000_000, 1), (0, 2048, 48829));
        assert_eq!(scan_launch(10, 3), (2, 512, 1));
        let (tx, rows, tiles) = scan_launch(1000, 1000);
        assert_eq!((tx, rows), (5, 64));
        assert!(tiles * rows >= 1000);
        for (tiles, tx, acc) in [
            (1usize, 1usize, 4usize),
            (48829, 1, 8),
            (7, 32, 8),
            (3, 4, 4),
        ] {
            let (st, tot, pre, size) = scratch_layout(tiles, tx, acc);
            assert!(st >= 4 && st + 4 * tiles <= tot && tot + acc * tiles * tx <= pre);
            assert_eq!(size, pre + acc * tiles * tx);
            assert!(tot % 16 == 0 && pre % 16 == 0);
        }
    }
}
