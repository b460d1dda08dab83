//! Shapes, strides and NumPy broadcasting: pure functions, testable without a GPU.

use crate::error::{Error, Result};

/// The most dimensions a strided kernel launch takes (after merging contiguous dimensions).
pub const MAX_DIMS: usize = 8;

/// Number of elements of `shape`; an error when it passes `isize::MAX` (the most elements an
/// array may have: strides, offsets and the kernels' 64-bit indices are signed).
///
/// As in NumPy, the extents other than 0 must multiply to at most `isize::MAX` even when an
/// extent of 0 makes the array empty (`[2^40, 2^40, 0]` is refused): then every product of
/// some of a shape's extents (a length, the outer and inner sizes around an axis, the count
/// of a reduced axis set) fits, for every shape an array can have.
pub fn numel(op: &str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
        .map(|n| if shape.contains(&0) { 0 } else { n })
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "shape {shape:?} has more elements than an array can hold ({})",
                    isize::MAX
                ),
            )
        })
}

/// Row-major (C order) element strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut s = 1isize;
    for (i, &d) in shape.iter().enumerate().rev() {
        strides[i] = s;
        s = s.saturating_mul(d.max(1) as isize);
    }
    strides
}

/// True when `strides` describe a row-major dense layout of `shape` (dimensions of extent 1
/// may have any stride; an empty array is contiguous).
pub fn is_contiguous(shape: &[usize], strides: &[isize]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expect = 1isize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 {
            if s != expect {
                return false;
            }
            expect *= d as isize;
        }
    }
    true
}

/// The broadcast shape of `a` and `b` under NumPy rules (align right; each pair of extents must
/// be equal or one of them 1). The error names both shapes; a result with more elements than an
/// array can hold ([`numel`]) is an error too.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0usize; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(op, a, b));
        };
    }
    numel(op, &out)?;
    Ok(out)
}

/// Strides that read an array of `shape`/`strides` as if it had `out_shape` (which must be a
/// broadcast of `shape`): broadcast dimensions get stride 0.
pub fn broadcast_strides(
    op: &str,
    shape: &[usize],
    strides: &[isize],
    out_shape: &[usize],
) -> Result<Vec<isize>> {
    if shape.len() > out_shape.len() {
        return Err(Error::shape(op, shape, out_shape));
    }
    let lead = out_shape.len() - shape.len();
    let mut out = vec![0isize; out_shape.len()];
    for (i, &od) in out_shape.iter().enumerate() {
        if i < lead {
            continue;
        }
        let d = shape[i - lead];
        if d == od {
            out[i] = if d == 1 { 0 } else { strides[i - lead] };
        } else if d == 1 {
            out[i] = 0;
        } else {
            return Err(Error::shape(op, shape, out_shape));
        }
    }
    Ok(out)
}

/// Merges adjacent dimensions that are contiguous with each other for every operand, and drops
/// dimensions of extent 1, so that a strided launch needs as few dimensions as possible.
/// Returns the merged shape and one stride row per operand.
pub fn coalesce(shape: &[usize], strides: &[Vec<isize>]) -> (Vec<usize>, Vec<Vec<isize>>) {
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<isize>> = vec![Vec::new(); strides.len()];
    for (d, &extent) in shape.iter().enumerate() {
        if extent == 1 {
            continue;
        }
        if let Some(&last) = out_shape.last() {
            let mergeable = strides
                .iter()
                .zip(&out_strides)
                .all(|(s, o)| *o.last().unwrap_or(&0) == s[d] * extent as isize);
            if mergeable {
                *out_shape.last_mut().unwrap_or(&mut 0) = last * extent;
                for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                    if let Some(l) = o.last_mut() {
                        *l = s[d];
                    }
                }
                continue;
            }
        }
        out_shape.push(extent);
        for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
            o.push(s[d]);
        }
    }
    (out_shape, out_strides)
}

/// PyTorch's IntDivider for a divisor `d` in `1..2^31`: `(magic, shift)` such that for every
/// `n < 2^31`, `n / d == (umulhi(n, magic) + n) >> shift` (what the kernels compute).
pub fn magic_divisor(d: u32) -> (u32, u32) {
    let d = d.max(1);
    let mut shift = 0u32;
    while shift < 32 && (1u64 << shift) < d as u64 {
        shift += 1;
    }
    let magic = ((1u64 << 32) * ((1u64 << shift) - d as u64)) / d as u64 + 1;
    (magic as u32, shift)
}

/// `n / d` as the kernels compute it with [`magic_divisor`] (for tests and the CPU side).
pub fn magic_div(n: u32, (magic, shift): (u32, u32)) -> u32 {
    let t = ((n as u64 * magic as u64) >> 32) as u32;
    ((t as u64 + n as u64) >> shift) as u32
}

/// The by-value `Layout<K>` struct of the kernels (common.cuh), little-endian: `ndim`, `use32`
/// (every linear index below 2^31: the kernels then split indices with [`magic_divisor`]),
/// `shape[8]` (i64), `magic_shift[8][2]` (u32 pairs), then `K` rows of 8 strides (i64), one per
/// operand. Dimensions are coalesced first; more than [`MAX_DIMS`] remaining dimensions is an
/// error.
pub fn layout_bytes(op: &str, shape: &[usize], strides: &[Vec<isize>]) -> Result<Vec<u8>> {
    let n = numel(op, shape)?;
    let (shape, strides) = coalesce(shape, strides);
    if shape.len() > MAX_DIMS {
        return Err(Error::invalid(
            op,
            format!(
                "strided operations support at most {MAX_DIMS} non-mergeable dimensions, got {} \
                 (make the operands contiguous first)",
                shape.len()
            ),
        ));
    }
    let use32 = n < (1usize << 31);
    let mut out = Vec::with_capacity(8 * (2 + 2 * MAX_DIMS + MAX_DIMS * strides.len()));
    out.extend_from_slice(&(shape.len() as i64).to_le_bytes());
    out.extend_from_slice(&(use32 as i64).to_le_bytes());
    for i in 0..MAX_DIMS {
        let d = shape.get(i).copied().unwrap_or(1);
        out.extend_from_slice(&(d as i64).to_le_bytes());
    }
    for i in 0..MAX_DIMS {
        let d = shape.get(i).copied().unwrap_or(1);
        let (m, sh) = if use32 {
            magic_divisor(d as u32)
        } else {
            (0, 0)
        };
        out.extend_from_slice(&m.to_le_bytes());
        out.extend_from_slice(&sh.to_le_bytes());
    }
    for row in &strides {
        for i in 0..MAX_DIMS {
            let s = row.get(i).copied().unwrap_or(0);
            out.extend_from_slice(&(s as i64).to_le_bytes());
        }
    }
    Ok(out)
}

/// The element offsets a `Layout` gives for linear index `i`: what `layout_offsets` computes on
/// the GPU (same coalescing, same magic division), for the CPU tests of the layout.
pub fn layout_offsets_cpu(shape: &[usize], strides: &[Vec<isize>], i: usize) -> Vec<isize> {
    let n: usize = shape.iter().product();
    let (shape, strides) = coalesce(shape, strides);
    let mut off = vec![0isize; strides.len()];
    if n < (1usize << 31) {
        let mut q = i as u32;
        for d in (0..shape.len()).rev() {
            let next = magic_div(q, magic_divisor(shape[d] as u32));
            let c = (q - next * shape[d] as u32) as isize;
            q = next;
            for (k, row) in strides.iter().enumerate() {
                off[k] += c * row[d];
            }
        }
    } else {
        let mut q = i;
        for d in (0..shape.len()).rev() {
            let c = (q % shape[d]) as isize;
            q /= shape[d];
            for (k, row) in strides.iter().enumerate() {
                off[k] += c * row[d];
            }
        }
    }
    off
}

/// The lowest and highest element offsets a view of `shape` / `strides` starting at `offset`
/// touches, or `None` for an empty view. Negative strides count downwards from `offset`.
pub fn extent(shape: &[usize], strides: &[isize], offset: usize) -> Option<(usize, usize)> {
    if shape.contains(&0) {
        return None;
    }
    let (mut lo, mut hi) = (offset as isize, offset as isize);
    for (&d, &s) in shape.iter().zip(strides) {
        let span = (d as isize - 1) * s;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    Some((lo.max(0) as usize, hi.max(0) as usize))
}

/// Checks that a view of `shape` / `strides` (elements) starting at element `offset` of a
/// buffer of `buf_bytes` bytes, with elements of `elem_size` bytes, lies inside the buffer and
/// has no element reached by two indices except through broadcasting (an axis of stride 0):
/// what every view gpukit-core makes satisfies and its kernels rely on. Sufficient layouts for
/// the second rule: the axes sorted by stride, each stride longer than the span of the axes
/// below it (every dense, sliced, transposed or broadcast layout). Also checks that the element
/// count fits in `isize` (see [`numel`]).
pub fn check_view(
    op: &str,
    shape: &[usize],
    strides: &[isize],
    offset: usize,
    elem_size: usize,
    buf_bytes: usize,
) -> Result<()> {
    if shape.len() != strides.len() {
        return Err(Error::invalid(
            op,
            format!(
                "shape {shape:?} has {} axes but strides {strides:?} have {}",
                shape.len(),
                strides.len()
            ),
        ));
    }
    numel(op, shape)?;
    let elems = (buf_bytes / elem_size.max(1)) as i128;
    if shape.contains(&0) {
        if offset as i128 > elems {
            return Err(Error::invalid(
                op,
                format!("offset {offset} lies past the buffer's {elems} elements"),
            ));
        }
        return Ok(());
    }
    // The lowest and highest element reached, exactly (i128: no wrapping).
    let (mut lo, mut hi) = (offset as i128, offset as i128);
    for (&d, &s) in shape.iter().zip(strides) {
        let span = (d as i128 - 1) * s as i128;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if lo < 0 || hi >= elems {
        return Err(Error::invalid(
            op,
            format!(
                "the view (shape {shape:?}, strides {strides:?}, offset {offset}) reaches elements                  {lo}..={hi}, outside the buffer's {elems} elements of {elem_size} bytes"
            ),
        ));
    }
    let mut axes: Vec<(u128, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(&d, &s)| d > 1 && s != 0)
        .map(|(&d, &s)| (s.unsigned_abs() as u128, d))
        .collect();
    axes.sort_unstable();
    let mut span: u128 = 0;
    for (s, d) in axes {
        if s <= span {
            return Err(Error::invalid(
                op,
                format!(
                    "the view (shape {shape:?}, strides {strides:?}) reaches some elements through                      two indices; only broadcasting (stride 0) may repeat elements"
                ),
            ));
        }
        span += s * (d as u128 - 1);
    }
    Ok(())
}

/// True when two different indices of a view of `shape` / `strides` reach the same element (a
/// broadcast view: an axis longer than 1 with stride 0). The views gpukit-core makes cannot
/// overlap otherwise.
pub fn has_repeated_elements(shape: &[usize], strides: &[isize]) -> bool {
    !shape.contains(&0) && shape.iter().zip(strides).any(|(&d, &s)| d > 1 && s == 0)
}

/// Normalises a possibly negative axis (`-1` is the last) of an array of `ndim` dimensions.
pub fn normalize_axis(op: &str, axis: isize, ndim: usize) -> Result<usize> {
    let a = if axis < 0 { axis + ndim as isize } else { axis };
    if a < 0 || a >= ndim as isize {
        return Err(Error::AxisOutOfRange {
            op: op.to_string(),
            axis: axis.unsigned_abs(),
            ndim,
        });
    }
    Ok(a as usize)
}

/// Normalises a list of axes (negative allowed); `None` means every axis. Errors on repeats.
pub fn normalize_axes(op: &str, axes: Option<&[isize]>, ndim: usize) -> Result<Vec<usize>> {
    let Some(axes) = axes else {
        return Ok((0..ndim).collect());
    };
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(op, a, ndim)?;
        if out.contains(&n) {
            return Err(Error::invalid(
                op,
                format!("axis {a} is repeated in {axes:?}"),
            ));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// Checks and normalises an axis.
pub fn check_axis(op: &str, axis: usize, ndim: usize) -> Result<usize> {
    if axis < ndim {
        Ok(axis)
    } else {
        Err(Error::AxisOutOfRange {
            op: op.to_string(),
            axis,
            ndim,
        })
    }
}

/// Checks that `perm` is a permutation of `0..ndim`.
pub fn check_permutation(op: &str, perm: &[usize], ndim: usize) -> Result<()> {
    let mut seen = vec![false; ndim];
    if perm.len() != ndim {
        return Err(Error::invalid(
            op,
            format!(
                "permutation {perm:?} has {} axes, the array has {ndim}",
                perm.len()
            ),
        ));
    }
    for &p in perm {
        if p >= ndim || std::mem::replace(&mut seen[p], true) {
            return Err(Error::invalid(
                op,
                format!("{perm:?} is not a permutation of 0..{ndim}"),
            ));
        }
    }
    Ok(())
}

/// Splits a contiguous `shape` around `axis` into `(outer, extent, inner)`.
pub fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes("add", &[3, 1], &[4]).unwrap(), vec![3, 4]);
        assert_eq!(broadcast_shapes("add", &[], &[2, 3]).unwrap(), vec![2, 3]);
        assert_eq!(
            broadcast_shapes("add", &[0, 1], &[1, 5]).unwrap(),
            vec![0, 5]
        );
        assert_eq!(
            broadcast_shapes("add", &[5, 1, 7], &[6, 1]).unwrap(),
            vec![5, 6, 7]
        );
        let e = broadcast_shapes("add", &[3, 4], &[5])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[3, 4]") && e.contains("[5]") && e.contains("add"),
            "{e}"
        );
        assert!(broadcast_shapes("mul", &[2, 0], &[2, 3]).is_err());
    }

    #[test]
    fn strides_and_contiguity() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert!(is_contiguous(&[2, 3], &[3, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
        assert!(is_contiguous(&[1, 3], &[99, 1]));
        assert!(is_contiguous(&[0, 3], &[7, 7]));
        assert_eq!(
            broadcast_strides("add", &[3, 1], &[1, 1], &[2, 3, 4]).unwrap(),
            vec![0, 1, 0]
        );
        assert!(broadcast_strides("add", &[3, 2], &[2, 1], &[3, 4]).is_err());
    }

    #[test]
    fn coalesce_merges_contiguous_dims() {
        let (s, st) = coalesce(&[2, 3, 4], &[vec![12, 4, 1], vec![12, 4, 1]]);
        assert_eq!((s, st), (vec![24], vec![vec![1], vec![1]]));
        // A broadcast dimension blocks merging for that operand.
        let (s, st) = coalesce(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 4, 1]]);
        assert_eq!(s, vec![2, 12]);
        assert_eq!(st, vec![vec![12, 1], vec![0, 1]]);
        let (s, _) = coalesce(&[1, 1], &[vec![1, 1]]);
        assert!(s.is_empty());
    }

    #[test]
    fn layout_bytes_match_the_c_struct() {
        let b = layout_bytes("x", &[2, 3], &[vec![1, 2], vec![3, 1]]).unwrap();
        assert_eq!(b.len(), 8 * (2 + 8 + 8 + 8 * 2));
        let w: Vec<i64> = b
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w[0], 2);
        assert_eq!(w[1], 1, "small layouts use 32-bit indexing");
        assert_eq!(&w[2..4], &[2, 3]);
        assert_eq!(w[4..10], [1; 6], "unused extents are 1");
        let ms = |i: usize| {
            let word = b[8 * (10 + i)..8 * (11 + i)].to_vec();
            (
                u32::from_le_bytes(word[..4].try_into().unwrap()),
                u32::from_le_bytes(word[4..].try_into().unwrap()),
            )
        };
        assert_eq!(ms(0), magic_divisor(2));
        assert_eq!(ms(1), magic_divisor(3));
        assert_eq!(&w[18..20], &[1, 2]);
        assert_eq!(&w[26..28], &[3, 1]);
        // Nine dimensions that cannot merge are refused.
        let shape = vec![2usize; 9];
        let strides: Vec<isize> = (0..9).map(|i| 1isize << (2 * (8 - i))).collect();
        let e = layout_bytes("x", &shape, &[strides])
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 8"), "{e}");
        // Past 2^31 elements the kernels divide in 64 bits.
        let big = layout_bytes("x", &[1 << 16, 1 << 16], &[vec![1 << 17, 1]]).unwrap();
        assert_eq!(i64::from_le_bytes(big[8..16].try_into().unwrap()), 0);
    }

    #[test]
    fn magic_division_is_exact_at_the_edges() {
        for d in [
            1u32,
            2,
            3,
            5,
            7,
            10,
            255,
            256,
            1000,
            65537,
            (1 << 31) - 1,
            1 << 30,
        ] {
            let m = magic_divisor(d);
            for n in [
                0u32,
                1,
                d - 1,
                d,
                d + 1,
                (1 << 31) - 1,
                (1 << 31) - 2,
                12345678,
            ] {
                if n < (1 << 31) {
                    assert_eq!(magic_div(n, m), n / d, "n={n} d={d}");
                }
            }
        }
    }

    #[test]
    fn axes_and_permutations() {
        assert!(check_axis("sum", 2, 2).is_err());
        assert_eq!(check_axis("sum", 1, 2).unwrap(), 1);
        assert!(check_permutation("permute", &[1, 0], 2).is_ok());
        assert!(check_permutation("permute", &[1, 1], 2).is_err());
        assert!(check_permutation("permute", &[0], 2).is_err());
        assert_eq!(split_at_axis(&[2, 3, 4], 1), (2, 3, 4));
        assert!(numel("x", &[usize::MAX, 2]).is_err());
    }

    #[test]
    fn element_counts_past_isize_are_refused() {
        // Each product wrapped or passed isize::MAX before: len() of a broadcast view of such a
        // shape wrapped in release builds.
        assert!(numel("x", &[1 << 32, 1 << 32]).is_err());
        assert!(
            numel("x", &[1 << 62, 2]).is_err(),
            "2^63 elements do not fit in isize"
        );
        assert_eq!(numel("x", &[1 << 62]).unwrap(), 1 << 62);
        assert_eq!(numel("x", &[1 << 62, 0, 1]).unwrap(), 0);
        assert_eq!(numel("x", &[0, 0]).unwrap(), 0);
        // Empty, but its other extents multiply past isize::MAX (NumPy refuses it too): the
        // sub-products an operation computes from such a shape (len() before, the outer size
        // of a reduction or a scan) would overflow.
        for shape in [
            &[usize::MAX, 2, 0][..],
            &[1 << 40, 1 << 40, 0],
            &[1 << 40, 0, 1 << 40],
            &[0, 1 << 63],
        ] {
            assert!(numel("x", shape).is_err(), "{shape:?}");
        }
        let e = broadcast_shapes("add", &[1, 1 << 40], &[1 << 40, 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("more elements"), "{e}");
        assert!(broadcast_shapes("add", &[1, 1 << 20], &[1 << 20, 1]).is_ok());
    }

    #[test]
    fn views_must_lie_inside_their_buffer_and_not_repeat_elements() {
        // A 4 x 6 f32 buffer (96 bytes).
        let ok = |shape: &[usize], strides: &[isize], offset: usize| {
            check_view("v", shape, strides, offset, 4, 96)
        };
        ok(&[4, 6], &[6, 1], 0).unwrap();
        ok(&[6, 4], &[1, 6], 0).unwrap(); // transposed
        ok(&[2, 3], &[12, 2], 1).unwrap(); // every other row and column from (0, 1)
        ok(&[4, 6], &[6, -1], 5).unwrap(); // columns reversed
        ok(&[3, 4, 6], &[0, 6, 1], 0).unwrap(); // broadcast axis
        ok(&[0, 6], &[6, 1], 24).unwrap(); // empty, offset at the end
        ok(&[1], &[1], 23).unwrap();
        let err = |shape: &[usize], strides: &[isize], offset: usize| {
            check_view("v", shape, strides, offset, 4, 96)
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[1], &[1], 24).contains("outside"));
        assert!(err(&[4, 7], &[6, 1], 0).contains("outside"));
        assert!(err(&[4, 6], &[6, -1], 0).contains("outside"), "negative");
        assert!(err(&[2], &[isize::MAX], 0).contains("outside"), "no wrap");
        assert!(err(&[3, 3], &[1, 1], 0).contains("two indices"));
        assert!(err(&[2, 4], &[2, 1], 0).contains("two indices"));
        assert!(err(&[4, 6], &[6], 0).contains("axes"));
        assert!(err(&[0], &[1], 25).contains("past"));
        assert!(err(&[1 << 62, 4], &[0, 0], 0).contains("more elements"));
    }

    fn cpu_offsets(shape: &[usize], strides: &[isize]) -> Vec<isize> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut i| {
                let mut off = 0;
                for d in (0..shape.len()).rev() {
                    off += (i % shape[d]) as isize * strides[d];
                    i /= shape[d];
                }
                off
            })
            .collect()
    }

    proptest! {
        #[test]
        fn every_product_of_an_accepted_shapes_extents_fits(
            exps in prop::collection::vec((0u32..64, 0u8..4), 0..6),
            mask in any::<u8>(),
        ) {
            // Extents of any size (2^k - 1, 2^k, 2^k + 1) and zeros.
            let shape: Vec<usize> = exps
                .iter()
                .map(|&(k, v)| match v {
                    0 => 0,
                    1 => (1usize << k).wrapping_sub(1),
                    2 => 1usize << k,
                    _ => (1usize << k).saturating_add(1),
                })
                .collect();
            let exact: Option<u128> = shape
                .iter()
                .try_fold(1u128, |a, &d| a.checked_mul(d as u128));
            let nonzero: Option<u128> = shape
                .iter()
                .filter(|&&d| d != 0)
                .try_fold(1u128, |a, &d| a.checked_mul(d as u128));
            match numel("x", &shape) {
                Ok(n) => {
                    prop_assert_eq!(Some(n as u128), exact);
                    prop_assert!(nonzero.is_some_and(|p| p <= isize::MAX as u128));
                    // Any subset of the extents (the axes of a reduction, the outer and inner
                    // sizes around an axis) multiplies without overflow, in usize.
                    let sub: Option<usize> = shape
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| (mask >> i) & 1 == 1)
                        .try_fold(1usize, |a, (_, &d)| a.checked_mul(d));
                    prop_assert!(sub.is_some_and(|p| p <= isize::MAX as usize));
                }
                Err(_) => prop_assert!(nonzero.is_none_or(|p| p > isize::MAX as u128)),
            }
        }

        #[test]
        fn magic_division_matches_division(d in 1u32..(1 << 31), n in 0u32..(1 << 31)) {
            prop_assert_eq!(magic_div(n, magic_divisor(d)), n / d);
        }

        #[test]
        fn kernel_offsets_match_the_strides(
            shape in prop::collection::vec(1usize..5, 0..6),
            seed in any::<u64>(),
        ) {
            // Three operands: contiguous, broadcast (0 strides), reversed (negative strides).
            let a = contiguous_strides(&shape);
            let b: Vec<isize> = a.iter().enumerate()
                .map(|(i, &s)| if (seed >> i) & 1 == 1 { 0 } else { s }).collect();
            let c: Vec<isize> = a.iter().map(|&s| -s).collect();
            let rows = [a.clone(), b.clone(), c.clone()];
            let want = [cpu_offsets(&shape, &a), cpu_offsets(&shape, &b), cpu_offsets(&shape, &c)];
            let n: usize = shape.iter().product();
            for i in 0..n {
                let got = layout_offsets_cpu(&shape, &rows, i);
                for (k, w) in want.iter().enumerate() {
                    prop_assert_eq!(got[k], w[i]);
                }
            }
        }

        #[test]
        fn coalescing_preserves_every_offset(
            shape in prop::collection::vec(1usize..4, 0..6),
            seed in any::<u64>(),
        ) {
            // Two operands: one contiguous, one with some broadcast (0) dimensions.
            let a = contiguous_strides(&shape);
            let b: Vec<isize> = a.iter().enumerate()
                .map(|(i, &s)| if (seed >> i) & 1 == 1 { 0 } else { s }).collect();
            let (cs, cst) = coalesce(&shape, &[a.clone(), b.clone()]);
            prop_assert_eq!(cpu_offsets(&shape, &a), cpu_offsets(&cs, &cst[0]));
            prop_assert_eq!(cpu_offsets(&shape, &b), cpu_offsets(&cs, &cst[1]));
        }

        #[test]
        fn every_sliced_view_passes_and_its_elements_are_distinct(
            shape in prop::collection::vec(1usize..5, 1..4),
            seed in any::<u64>(),
        ) {
            // Slices with steps and reversals of a contiguous buffer, some axes transposed.
            let strides = contiguous_strides(&shape);
            let mut idx = Vec::new();
            for (i, &d) in shape.iter().enumerate() {
                let step = [1isize, 2, -1, -3][((seed >> (4 * i)) & 3) as usize];
                let start = ((seed >> (4 * i + 2)) as usize % d) as isize;
                idx.push(crate::slice::Index::numpy(Some(start), None, step));
            }
            let n: usize = shape.iter().product();
            let v = crate::slice::resolve("t", &shape, &strides, 0, &idx).unwrap();
            let (mut vs, mut vst) = (v.shape.clone(), v.strides.clone());
            if seed & 1 == 1 {
                vs.reverse();
                vst.reverse();
            }
            prop_assert!(check_view("t", &vs, &vst, v.offset, 8, n * 8).is_ok());
            let offs = cpu_offsets(&vs, &vst);
            let mut seen: Vec<isize> = offs.iter().map(|o| o + v.offset as isize).collect();
            prop_assert!(seen.iter().all(|&o| o >= 0 && (o as usize) < n));
            seen.sort_unstable();
            seen.dedup();
            prop_assert_eq!(seen.len(), offs.len());
        }

        #[test]
        fn check_view_never_accepts_a_view_that_leaves_the_buffer_or_repeats(
            shape in prop::collection::vec(1usize..4, 1..4),
            strides in prop::collection::vec(-7isize..8, 3),
            offset in 0usize..40,
            elems in 1usize..40,
        ) {
            let strides = &strides[..shape.len()];
            if check_view("t", &shape, strides, offset, 2, elems * 2).is_ok() {
                let offs = cpu_offsets(&shape, strides);
                let abs: Vec<isize> = offs.iter().map(|o| o + offset as isize).collect();
                prop_assert!(abs.iter().all(|&o| o >= 0 && (o as usize) < elems), "{:?}", abs);
                if !has_repeated_elements(&shape, strides) {
                    let mut u = abs.clone();
                    u.sort_unstable();
                    u.dedup();
                    prop_assert_eq!(u.len(), abs.len());
                }
            }
        }

        #[test]
        fn broadcast_is_symmetric_and_compatible(
            a in prop::collection::vec(prop::sample::select(vec![1usize, 2, 3]), 0..5),
            b in prop::collection::vec(prop::sample::select(vec![1usize, 2, 3]), 0..5),
        ) {
            let ab = broadcast_shapes("op", &a, &b);
            let ba = broadcast_shapes("op", &b, &a);
            prop_assert_eq!(ab.is_ok(), ba.is_ok());
            if let (Ok(ab), Ok(ba)) = (ab, ba) {
                prop_assert_eq!(&ab, &ba);
                prop_assert!(broadcast_strides("op", &a, &contiguous_strides(&a), &ab).is_ok());
                prop_assert!(broadcast_strides("op", &b, &contiguous_strides(&b), &ab).is_ok());
            }
        }
    }
}
