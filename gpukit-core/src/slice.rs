//! NumPy's basic indexing: an index expression ([`Index`], built with the [`s!`](crate::s!)
//! macro) applied to a shape and strides gives a view (no copy). Pure arithmetic, tested on the
//! CPU.
//!
//! Ranges are Rust ranges, as in `ndarray`: `a..b` is the set of positions `a <= i < b`
//! (negative bounds count from the end, bounds are clamped), and a step walks that set, a
//! negative step from its last position backwards: `s![..;-1]` reverses, `s![3..9;-2]` gives
//! 8, 6, 4 (NumPy's `[8:2:-2]`). NumPy's own `start:stop:step` triples, where a negative step
//! swaps the roles of start and stop, are [`Index::numpy`].
//!
//! ```
//! use gpukit_core::s;
//! use gpukit_core::slice::{resolve, Index};
//! // a[1:, ::-2, 3] of a [4, 5, 6] array
//! let idx = s![1.., ..;-2, 3];
//! let v = resolve("slice", &[4, 5, 6], &[30, 6, 1], 0, &idx).unwrap();
//! assert_eq!(v.shape, vec![3, 3]);
//! assert_eq!(v.strides, vec![30, -12]);
//! assert_eq!(v.offset, 30 + 4 * 6 + 3);
//! // The same view from NumPy's triple.
//! let np = [Index::numpy(Some(1), None, 1), Index::numpy(None, None, -2), Index::At(3)];
//! assert_eq!(resolve("slice", &[4, 5, 6], &[30, 6, 1], 0, &np).unwrap(), v);
//! ```

use crate::error::{Error, Result};

/// One entry of an index expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// One position (negative counts from the end); the axis is removed.
    At(isize),
    /// The positions `start <= i < stop` (negative bounds count from the end; clamped;
    /// `None`: 0 and the length), every `step`-th of them; a negative step starts from the last
    /// position and walks backwards. `step` must not be 0.
    Range {
        /// First position of the set (default 0).
        start: Option<isize>,
        /// End of the set, exclusive (default: the axis length).
        stop: Option<isize>,
        /// Stride through the set; negative walks it from its end.
        step: isize,
    },
    /// NumPy's `start:stop:step` exactly (Python's `slice.indices`): for a negative step the
    /// walk goes from `start` (default: the last element) down to `stop` (exclusive; default:
    /// before the first). `step` must not be 0.
    Numpy {
        /// Start (default depends on the step's sign).
        start: Option<isize>,
        /// Stop, exclusive (default depends on the step's sign).
        stop: Option<isize>,
        /// Step.
        step: isize,
    },
    /// A new axis of length 1 (NumPy's `np.newaxis`).
    NewAxis,
    /// As many full ranges as the array has unindexed axes (NumPy's `...`).
    Ellipsis,
}

/// `np.newaxis` for [`s!`](crate::s!): `s![.., NewAxis]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewAxis;

/// `...` for [`s!`](crate::s!): `s![Ellipsis, 0]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ellipsis;

impl Index {
    /// The whole axis.
    pub const ALL: Index = Index::Range {
        start: None,
        stop: None,
        step: 1,
    };

    /// NumPy's `start:stop:step` (see [`Index::Numpy`]).
    pub fn numpy(start: Option<isize>, stop: Option<isize>, step: isize) -> Index {
        Index::Numpy { start, stop, step }
    }

    /// The same range with another step (`s![1..;2]`); an `At(i)` becomes `i..` with that
    /// step.
    pub fn step(self, step: isize) -> Index {
        match self {
            Index::Range { start, stop, .. } => Index::Range { start, stop, step },
            Index::Numpy { start, stop, .. } => Index::Numpy { start, stop, step },
            Index::At(i) => Index::Range {
                start: Some(i),
                stop: None,
                step,
            },
            other => other,
        }
    }
}

impl From<NewAxis> for Index {
    fn from(_: NewAxis) -> Self {
        Index::NewAxis
    }
}
impl From<Ellipsis> for Index {
    fn from(_: Ellipsis) -> Self {
        Index::Ellipsis
    }
}
impl From<std::ops::RangeFull> for Index {
    fn from(_: std::ops::RangeFull) -> Self {
        Index::ALL
    }
}

/// A position as `isize`: signed types exactly (on 64-bit targets), unsigned ones saturating at
/// `isize::MAX`, which lies past the end of every axis (an array holds at most `isize::MAX`
/// elements): a position `>= 2^63` is out of bounds, never a count from the end.
trait ToPosition: Copy {
    fn position(self) -> isize;
}
impl ToPosition for i32 {
    fn position(self) -> isize {
        self as isize
    }
}
impl ToPosition for i64 {
    fn position(self) -> isize {
        isize::try_from(self).unwrap_or(if self < 0 { isize::MIN } else { isize::MAX })
    }
}
impl ToPosition for isize {
    fn position(self) -> isize {
        self
    }
}
impl ToPosition for usize {
    fn position(self) -> isize {
        isize::try_from(self).unwrap_or(isize::MAX)
    }
}

/// The exclusive stop of an inclusive end: `-1` ("through the last element") is no stop.
fn inclusive_stop(end: isize) -> Option<isize> {
    (end != -1).then(|| end.saturating_add(1))
}

macro_rules! int_index {
    ($($t:ty),*) => {$(
        impl From<$t> for Index {
            fn from(i: $t) -> Self { Index::At(i.position()) }
        }
        impl From<std::ops::Range<$t>> for Index {
            fn from(r: std::ops::Range<$t>) -> Self {
                Index::Range {
                    start: Some(r.start.position()),
                    stop: Some(r.end.position()),
                    step: 1,
                }
            }
        }
        impl From<std::ops::RangeFrom<$t>> for Index {
            fn from(r: std::ops::RangeFrom<$t>) -> Self {
                Index::Range { start: Some(r.start.position()), stop: None, step: 1 }
            }
        }
        impl From<std::ops::RangeTo<$t>> for Index {
            fn from(r: std::ops::RangeTo<$t>) -> Self {
                Index::Range { start: None, stop: Some(r.end.position()), step: 1 }
            }
        }
        impl From<std::ops::RangeInclusive<$t>> for Index {
            fn from(r: std::ops::RangeInclusive<$t>) -> Self {
                // `a..=-1` means "through the last element".
                Index::Range {
                    start: Some(r.start().position()),
                    stop: inclusive_stop(r.end().position()),
                    step: 1,
                }
            }
        }
        impl From<std::ops::RangeToInclusive<$t>> for Index {
            fn from(r: std::ops::RangeToInclusive<$t>) -> Self {
                Index::Range { start: None, stop: inclusive_stop(r.end.position()), step: 1 }
            }
        }
    )*};
}
int_index!(i32, i64, isize, usize);

/// An index expression: `s![.., 1..5;2, -1, NewAxis, Ellipsis]` (`;step` after a range or
/// position sets its step). Produces an array of [`Index`].
#[macro_export]
macro_rules! s {
    ($($e:expr $(; $step:expr)?),* $(,)?) => {
        [$( $crate::slice::Index::from($e) $( .step($step as isize) )? ),*]
    };
}

/// A view: shape, element strides and element offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The shape.
    pub shape: Vec<usize>,
    /// Element strides (may be negative or zero).
    pub strides: Vec<isize>,
    /// Element offset of the first element in the buffer.
    pub offset: usize,
}

/// `(first position, length, step)` of a Rust-style range on an axis of `len` elements (see
/// the module docs).
pub fn set_on_axis(
    start: Option<isize>,
    stop: Option<isize>,
    step: isize,
    len: usize,
) -> (isize, usize, isize) {
    let l = len.min(isize::MAX as usize) as isize;
    let adjust = |v: isize| (if v < 0 { v.saturating_add(l) } else { v }).clamp(0, l);
    let s = start.map_or(0, adjust);
    let e = stop.map_or(l, adjust);
    // |step| as usize: isize::MIN has no positive isize.
    let n = count(e - s, step.unsigned_abs());
    let first = if step > 0 { s } else { e - 1 };
    (first, n, step)
}

/// Positions in a run of `span` (when positive) taken every `k`-th: without the overflow of
/// `(span + k - 1) / k` for large steps.
fn count(span: isize, k: usize) -> usize {
    if span <= 0 || k == 0 {
        0
    } else {
        (span as usize - 1) / k + 1
    }
}

/// `(start, length, step)` of a NumPy slice on an axis of `len` elements, as Python's
/// `slice.indices`.
pub fn range_on_axis(
    start: Option<isize>,
    stop: Option<isize>,
    step: isize,
    len: usize,
) -> (isize, usize, isize) {
    let len = len.min(isize::MAX as usize) as isize;
    let adjust = |v: isize, lo: isize, hi: isize| -> isize {
        let v = if v < 0 { v.saturating_add(len) } else { v };
        v.clamp(lo, hi)
    };
    let k = step.unsigned_abs();
    if step > 0 {
        let s = start.map_or(0, |v| adjust(v, 0, len));
        let e = stop.map_or(len, |v| adjust(v, 0, len));
        (s, count(e - s, k), step)
    } else {
        let s = start.map_or(len - 1, |v| adjust(v, -1, len - 1));
        let e = stop.map_or(-1, |v| adjust(v, -1, len - 1));
        (s, count(s - e, k), step)
    }
}

/// Applies `index` to a view of `shape` / `strides` at `offset`. Errors name the axis and the
/// bounds.
pub fn resolve(
    op: &str,
    shape: &[usize],
    strides: &[isize],
    offset: usize,
    index: &[Index],
) -> Result<View> {
    let ellipses = index.iter().filter(|i| **i == Index::Ellipsis).count();
    if ellipses > 1 {
        return Err(Error::invalid(
            op,
            "an index can have only one Ellipsis (`...`)",
        ));
    }
    let used = index
        .iter()
        .filter(|i| !matches!(i, Index::NewAxis | Index::Ellipsis))
        .count();
    if used > shape.len() {
        return Err(Error::invalid(
            op,
            format!(
                "too many indices ({used}) for an array of {} dimension(s) (shape {shape:?})",
                shape.len()
            ),
        ));
    }
    let mut expanded: Vec<Index> = Vec::with_capacity(index.len() + shape.len());
    for &i in index {
        if i == Index::Ellipsis {
            expanded.extend(std::iter::repeat_n(Index::ALL, shape.len() - used));
        } else {
            expanded.push(i);
        }
    }
    if ellipses == 0 {
        expanded.extend(std::iter::repeat_n(Index::ALL, shape.len() - used));
    }
    let mut out = View {
        shape: Vec::new(),
        strides: Vec::new(),
        offset,
    };
    let mut off = offset as isize;
    let mut axis = 0usize;
    for i in expanded {
        match i {
            Index::NewAxis => {
                out.shape.push(1);
                out.strides.push(0);
            }
            Index::At(p) => {
                let len = shape[axis];
                let q = if p < 0 { p + len as isize } else { p };
                if q < 0 || q >= len as isize {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "index {p} is out of bounds for axis {axis} with size {len} \
                             (shape {shape:?})"
                        ),
                    ));
                }
                off += q * strides[axis];
                axis += 1;
            }
            Index::Range { start, stop, step } | Index::Numpy { start, stop, step } => {
                if step == 0 {
                    return Err(Error::invalid(
                        op,
                        format!("slice step on axis {axis} must not be 0"),
                    ));
                }
                let (s, n, st) = if matches!(i, Index::Numpy { .. }) {
                    range_on_axis(start, stop, step, shape[axis])
                } else {
                    set_on_axis(start, stop, step, shape[axis])
                };
                if n > 0 {
                    off += s * strides[axis];
                }
                out.shape.push(n);
                out.strides.push(if n > 1 {
                    strides[axis] * st
                } else {
                    strides[axis]
                });
                axis += 1;
            }
            Index::Ellipsis => unreachable!("expanded above"),
        }
    }
    if out.shape.contains(&0) {
        off = offset as isize;
    }
    out.offset = off.max(0) as usize;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Python's `list(range(*slice(start, stop, step).indices(len)))`, written out directly.
    fn python_indices(
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
        len: usize,
    ) -> Vec<isize> {
        let n = len as isize;
        let norm = |v: isize| if v < 0 { v + n } else { v };
        let mut out = Vec::new();
        if step > 0 {
            let mut i = start.map_or(0, norm).max(0);
            let e = stop.map_or(n, norm).min(n);
            while i < e {
                out.push(i);
                i += step;
            }
        } else {
            let mut i = start.map_or(n - 1, norm).min(n - 1);
            let e = stop.map_or(-1, norm).max(-1);
            while i > e {
                if i >= 0 {
                    out.push(i);
                }
                i += step;
            }
        }
        out
    }

    #[test]
    fn numpy_slices_of_ten() {
        let pick = |idx: Index| -> Vec<isize> {
            let v = resolve("t", &[10], &[1], 0, &[idx]).unwrap();
            (0..v.shape[0] as isize)
                .map(|k| v.offset as isize + k * v.strides[0])
                .collect()
        };
        // Rust ranges (ndarray's convention).
        assert_eq!(pick(Index::ALL.step(-1)), (0..10).rev().collect::<Vec<_>>());
        assert_eq!(pick(Index::from(3..9).step(-2)), vec![8, 6, 4]);
        assert_eq!(pick(Index::from(2..7).step(-1)), vec![6, 5, 4, 3, 2]);
        assert_eq!(pick(Index::ALL.step(-2)), vec![9, 7, 5, 3, 1]);
        assert_eq!(pick(Index::from(-3..)), vec![7, 8, 9]);
        assert_eq!(pick(Index::from(5..100)), vec![5, 6, 7, 8, 9]);
        assert_eq!(pick(Index::from(-100..3)), vec![0, 1, 2]);
        assert_eq!(pick(Index::ALL.step(3)), vec![0, 3, 6, 9]);
        assert!(pick(Index::from(3..3)).is_empty());
        let reversed = Index::Range {
            start: Some(7),
            stop: Some(2),
            step: 1,
        };
        assert!(pick(reversed).is_empty());
        assert_eq!(pick(Index::from(2..=4)), vec![2, 3, 4]);
        assert_eq!(pick(Index::from(..=-1)), (0..10).collect::<Vec<_>>());
        // NumPy's triples.
        assert_eq!(pick(Index::numpy(Some(8), Some(2), -2)), vec![8, 6, 4]);
        assert_eq!(pick(Index::numpy(None, Some(-3), -1)), vec![9, 8]);
        assert!(pick(Index::numpy(Some(2), Some(7), -1)).is_empty());
        assert_eq!(pick(Index::numpy(None, None, -3)), vec![9, 6, 3, 0]);
    }

    #[test]
    fn positions_new_axes_ellipsis_and_errors() {
        // [2, 3, 4] contiguous: a[..., 1] -> shape [2, 3], strides [12, 4], offset 1.
        let v = resolve("t", &[2, 3, 4], &[12, 4, 1], 0, &s![Ellipsis, 1]).unwrap();
        assert_eq!((v.shape, v.strides, v.offset), (vec![2, 3], vec![12, 4], 1));
        let v = resolve("t", &[2, 3], &[3, 1], 0, &s![NewAxis, -1, .., NewAxis]).unwrap();
        assert_eq!(
            (v.shape, v.strides, v.offset),
            (vec![1, 3, 1], vec![0, 1, 0], 3)
        );
        let e = resolve("t", &[2, 3], &[3, 1], 0, &s![2])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("index 2 is out of bounds for axis 0 with size 2"),
            "{e}"
        );
        let e = resolve("t", &[2], &[1], 0, &s![0, 0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("too many indices"), "{e}");
        let e = resolve("t", &[2], &[1], 0, &s![..;0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("step"), "{e}");
        assert!(resolve("t", &[2], &[1], 0, &s![Ellipsis, Ellipsis]).is_err());
        // An empty result keeps the offset inside the buffer.
        let v = resolve("t", &[4], &[1], 0, &s![9..]).unwrap();
        assert_eq!((v.shape, v.offset), (vec![0], 0));
    }

    #[test]
    fn extreme_steps_and_huge_positions_do_not_wrap() {
        // A step of isize::MIN negated overflowed (a panic in debug builds, a wrapped length in
        // release builds); large steps overflowed `span + step - 1`.
        for step in [
            isize::MIN,
            isize::MIN + 1,
            isize::MAX,
            isize::MAX - 1,
            1 << 62,
        ] {
            let from_3 = Index::numpy(Some(3), if step > 0 { None } else { Some(-100) }, step);
            let end = if step > 0 { 0 } else { 9 };
            for (idx, first) in [
                (Index::ALL.step(step), end),
                (Index::numpy(None, None, step), end),
                (from_3, 3),
            ] {
                let v = resolve("t", &[10], &[1], 0, &[idx]).unwrap();
                assert_eq!((v.shape, v.offset), (vec![1], first), "{idx:?}");
            }
        }
        // A position >= 2^63 is out of bounds, not a count from the end (it wrapped to a
        // negative isize: `u64::MAX` read as -1, the last element).
        let huge: usize = usize::MAX;
        let e = resolve("t", &[10], &[1], 0, &[Index::from(huge)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("out of bounds"), "{e}");
        assert!(resolve("t", &[10], &[1], 0, &[Index::from(1usize << 63)]).is_err());
        let v = resolve("t", &[10], &[1], 0, &[Index::from(huge - 5..huge)]).unwrap();
        assert_eq!(v.shape, vec![0], "a range past the end is empty");
        let v = resolve("t", &[10], &[1], 0, &[Index::from(3..huge)]).unwrap();
        assert_eq!(
            (v.shape, v.offset),
            (vec![7], 3),
            "an end past the axis is clamped"
        );
        let v = resolve("t", &[10], &[1], 0, &[Index::from(3..=huge)]).unwrap();
        assert_eq!(v.shape, vec![7]);
        assert_eq!(
            Index::from(5i64..=i64::MAX),
            Index::from(5isize..=isize::MAX)
        );
        let v = resolve("t", &[10], &[1], 0, &[Index::from(i64::MIN)]);
        assert!(v.is_err());
    }

    proptest! {
        #[test]
        fn huge_unsigned_positions_never_count_from_the_end(
            len in 0usize..12,
            pos in (1usize << 63)..=usize::MAX,
        ) {
            prop_assert!(resolve("t", &[len], &[1], 0, &[Index::from(pos)]).is_err());
            let v = resolve("t", &[len], &[1], 0, &[Index::from(pos..)]).unwrap();
            prop_assert_eq!(v.shape, vec![0]);
            let v = resolve("t", &[len], &[1], 0, &[Index::from(..pos)]).unwrap();
            prop_assert_eq!(v.shape, vec![len]);
        }

        #[test]
        fn any_step_gives_the_positions_of_a_walk(
            len in 0usize..12,
            start in prop::option::of(any::<isize>()),
            stop in prop::option::of(any::<isize>()),
            step in any::<isize>().prop_filter("non-zero", |s| *s != 0),
        ) {
            for idx in [Index::Range { start, stop, step }, Index::numpy(start, stop, step)] {
                let v = resolve("t", &[len], &[1], 0, &[idx]).unwrap();
                let n = v.shape[0];
                prop_assert!(n <= len);
                for k in 0..n as isize {
                    let p = v.offset as isize + k * if n > 1 { v.strides[0] } else { 1 };
                    prop_assert!(p >= 0 && (p as usize) < len, "{:?}: {}", idx, p);
                }
                if step.unsigned_abs() >= len.max(1) {
                    prop_assert!(n <= 1);
                }
            }
        }

        #[test]
        fn rust_ranges_walk_their_set(
            len in 0usize..12,
            start in prop::option::of(-15isize..15),
            stop in prop::option::of(-15isize..15),
            step in prop::sample::select(vec![-4isize, -3, -2, -1, 1, 2, 3, 5]),
        ) {
            // The set {start <= i < stop} (normalised, clamped), walked by |step| from its first
            // element, reversed for a negative step: reversing the forward walk from the end.
            let l = len as isize;
            let norm = |v: isize| (if v < 0 { v + l } else { v }).clamp(0, l);
            let (s, e) = (start.map_or(0, norm), stop.map_or(l, norm));
            let set: Vec<isize> = (s..e).collect();
            let want: Vec<isize> = if step > 0 {
                set.iter().copied().step_by(step as usize).collect()
            } else {
                set.iter().rev().copied().step_by((-step) as usize).collect()
            };
            let v = resolve("t", &[len], &[1], 0, &[Index::Range { start, stop, step }]).unwrap();
            let got: Vec<isize> = (0..v.shape[0] as isize)
                .map(|k| v.offset as isize + k * v.strides[0])
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn ranges_match_python(
            len in 0usize..12,
            start in prop::option::of(-15isize..15),
            stop in prop::option::of(-15isize..15),
            step in prop::sample::select(vec![-4isize, -3, -2, -1, 1, 2, 3, 5]),
        ) {
            let want = python_indices(start, stop, step, len);
            let v = resolve("t", &[len], &[1], 0, &[Index::numpy(start, stop, step)]).unwrap();
            let got: Vec<isize> = (0..v.shape[0] as isize)
                .map(|k| v.offset as isize + k * v.strides[0])
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn two_dimensional_views_pick_the_right_elements(
            rows in 1usize..6, cols in 1usize..6,
            r in (prop::option::of(-7isize..7), prop::option::of(-7isize..7),
                  prop::sample::select(vec![-2isize, -1, 1, 2])),
            c in (prop::option::of(-7isize..7), prop::option::of(-7isize..7),
                  prop::sample::select(vec![-3isize, -1, 1, 3])),
        ) {
            let v = resolve(
                "t", &[rows, cols], &[cols as isize, 1], 0,
                &[Index::numpy(r.0, r.1, r.2), Index::numpy(c.0, c.1, c.2)],
            ).unwrap();
            let ri = python_indices(r.0, r.1, r.2, rows);
            let ci = python_indices(c.0, c.1, c.2, cols);
            prop_assert_eq!(v.shape.clone(), vec![ri.len(), ci.len()]);
            for (a, &i) in ri.iter().enumerate() {
                for (b, &j) in ci.iter().enumerate() {
                    let off = v.offset as isize + a as isize * v.strides[0] + b as isize * v.strides[1];
                    prop_assert_eq!(off, i * cols as isize + j);
                }
            }
        }
    }
}
