//! Inclusive scans along an axis: `cumsum` and `cumprod` (NumPy's: without an axis the array
//! is flattened; integers widen to 64 bits, [`DType::Sum`]).
//!
//! Three phases over tiles of the scanned axis (see `kernels/scan.cu`): tile totals, a scan of
//! the totals (recursively, so a single row of 1e8 elements needs two levels), and the tiles'
//! own scans with the preceding total added. Works in place of `[outer, L, inner]` for any axis
//! of a contiguous array, with no transposition.

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

/// `(tx_log2, rows per tile, tiles)` of a scan of `[outer, l, inner]`.
pub fn scan_launch(l: usize, inner: usize) -> (u32, usize, usize) {
    let tx = inner.next_power_of_two().clamp(1, 32);
    let rows = (BLOCK as usize / tx) * ITEMS;
    (tx.trailing_zeros(), rows, l.div_ceil(rows).max(1))
}

impl<T: DType> GpuArray<T> {
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
        let out = GpuArray::<T::Sum>::alloc_on(&self.dev, &shape_out, &self.dev.stream())?;
        if out.is_empty() {
            return Ok(out);
        }
        scan_raw::<T>(&src, op, outer, l, inner, out.device_ptr(), &out)?;
        Ok(out)
    }
}

/// Scans the contiguous `src` viewed as `[outer, l, inner]` into device address `dst` (of the
/// scan output type of `T`, `outer * l * inner` elements; `keep` owns it).
fn scan_raw<T: DType>(
    src: &GpuArray<T>,
    op: ScanOp,
    outer: usize,
    l: usize,
    inner: usize,
    dst: u64,
    keep: &dyn ScanOutput,
) -> Result<()> {
    let dev = src.device().clone();
    let stream = dev.stream();
    src.used_on(&stream);
    keep.used_on_stream(&stream);
    let code = op as u32;
    let (tx_log2, _rows, ntiles) = scan_launch(l, inner);
    let tx = 1usize << tx_log2;
    let blocks = outer * inner.div_ceil(tx) * ntiles;
    let cfg = LaunchConfig::new((blocks as u32, 1, 1), (BLOCK, 1, 1));
    let scanned = if ntiles > 1 {
        let totals = GpuArray::<T::ScanAcc>::alloc_on(&dev, &[outer, ntiles, inner], &stream)?;
        let k = src.kernel(
            KernelFile::Scan,
            &format!("scan_tiles<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k,
            &stream,
            cfg,
            &[
                src.arg(),
                (outer as i64).into(),
                (l as i64).into(),
                (inner as i64).into(),
                (tx_log2 as i32).into(),
                (ntiles as i64).into(),
                totals.arg(),
            ],
        )?;
        let scanned = GpuArray::<T::ScanAcc>::alloc_on(&dev, &[outer, ntiles, inner], &stream)?;
        scan_raw::<T::ScanAcc>(
            &totals,
            op,
            outer,
            ntiles,
            inner,
            scanned.device_ptr(),
            &scanned,
        )?;
        Some(scanned)
    } else {
        None
    };
    let k = src.kernel(
        KernelFile::Scan,
        &format!("scan_apply<{}, {code}>", T::NAME),
    )?;
    kernels::launch(
        &k,
        &stream,
        cfg,
        &[
            src.arg(),
            KernelArg::Ptr(dst),
            (outer as i64).into(),
            (l as i64).into(),
            (inner as i64).into(),
            (tx_log2 as i32).into(),
            (ntiles as i64).into(),
            scanned.as_ref().map_or(KernelArg::Ptr(0), |s| s.arg()),
        ],
    )
}

/// The output array of a scan, whatever its element type (only its stream use is recorded).
trait ScanOutput {
    fn used_on_stream(&self, stream: &crate::Stream);
}

impl<U: DType> ScanOutput for GpuArray<U> {
    fn used_on_stream(&self, stream: &crate::Stream) {
        self.used_on(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::scan_launch;

    #[test]
    fn tiles_cover_the_axis() {
        assert_eq!(scan_launch(100_000_000, 1), (0, 2048, 48829));
        assert_eq!(scan_launch(10, 3), (2, 512, 1));
        let (tx, rows, tiles) = scan_launch(1000, 1000);
        assert_eq!((tx, rows), (5, 64));
        assert!(tiles * rows >= 1000);
    }
}
