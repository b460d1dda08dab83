//! Reductions over all elements or any set of axes, with `keepdims`: sum, prod, mean, max,
//! min, any, all, var, std (with `ddof`), argmax, argmin.
//!
//! Result types follow NumPy: `sum` / `prod` of integers widen to 64 bits
//! ([`DType::Sum`]: i32 -> i64, u8 / u32 -> u64), `mean` / `var` / `std` of integers are f64
//! ([`DType::Float`]), `any` / `all` give `u8` masks, `argmax` / `argmin` `i64` indices. Empty
//! reductions: sum 0, prod 1, any false, all true, mean / var / std NaN; max, min, argmax and
//! argmin of nothing are errors.
//!
//! Planning (pure, [`plan`]): after dropping axes of length 1 and merging neighbours, a
//! contiguous array reduces as `[R]` (everything: two passes), `[K, R]` (rows: a group of lanes
//! per short row, a block per long row), `[R, K]` or `[K, R, K]` (columns: tiles of up to 32
//! adjacent columns with the reduced axis split over many blocks, so few wide columns still
//! fill the GPU); any other pattern is permuted (one copy) to `[K, R]`. Accuracy: see
//! `kernels/reduce.cu`.

use super::GpuArray;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{self, KernelFile, BLOCK};
use crate::shape;
use gpukit_jit::LaunchConfig;

/// Reductions (codes shared with `kernels/reduce.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (0 for no elements); integers widen to 64 bits.
    Sum = 0,
    /// Arithmetic mean (f64 for integers; NaN for no elements).
    Mean = 1,
    /// Maximum (NaN propagates).
    Max = 2,
    /// Minimum (NaN propagates).
    Min = 3,
    /// Product (1 for no elements); integers widen to 64 bits.
    Prod = 4,
    /// Whether any element is nonzero (NaN counts), as a `u8`.
    Any = 5,
    /// Whether every element is nonzero, as a `u8`.
    All = 6,
    /// Variance `sum((x - mean)^2) / (n - ddof)` (one pass, Welford).
    Var = 7,
    /// Standard deviation, the square root of [`Var`](Self::Var).
    Std = 8,
    /// Index of the first maximum (NaN wins, as in NumPy).
    ArgMax = 9,
    /// Index of the first minimum.
    ArgMin = 10,
}

impl ReduceOp {
    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
            ReduceOp::Any => "any",
            ReduceOp::All => "all",
            ReduceOp::Var => "var",
            ReduceOp::Std => "std",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }

    /// The C name of the result element type for input element type `dtype`.
    pub fn out_name(self, dtype: &'static str) -> &'static str {
        use crate::dtype::{kind_of, sum_name, DTypeKind};
        match self {
            ReduceOp::Sum | ReduceOp::Prod => sum_name(dtype),
            ReduceOp::Mean | ReduceOp::Var | ReduceOp::Std => match kind_of(dtype) {
                DTypeKind::Float => dtype,
                _ => "double",
            },
            ReduceOp::Max | ReduceOp::Min => dtype,
            ReduceOp::Any | ReduceOp::All => "unsigned char",
            ReduceOp::ArgMax | ReduceOp::ArgMin => "long long",
        }
    }

    fn needs_elements(self) -> bool {
        matches!(
            self,
            ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin
        )
    }
}

/// How a contiguous array reduces (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// All `n` elements to one value.
    Full {
        /// Elements.
        n: usize,
    },
    /// `[rows, r]`, reduced along `r`.
    Rows {
        /// Rows (outputs).
        rows: usize,
        /// Reduced extent.
        r: usize,
    },
    /// `[outer, r, inner]`, reduced along `r`.
    Cols {
        /// Leading kept extent.
        outer: usize,
        /// Reduced extent.
        r: usize,
        /// Trailing kept extent.
        inner: usize,
    },
    /// Permute the axes to `perm` (kept axes first, in order) and reduce the copy as
    /// `[rows, r]`.
    Permute {
        /// The permutation.
        perm: Vec<usize>,
        /// Rows (outputs).
        rows: usize,
        /// Reduced extent.
        r: usize,
    },
}

/// The plan for reducing `axes` (sorted, distinct) of a contiguous array of `shape`.
pub fn plan(shape: &[usize], axes: &[usize]) -> Plan {
    let n: usize = shape.iter().product();
    let r: usize = axes.iter().map(|&a| shape[a]).product();
    let kept = n.checked_div(r).unwrap_or(0);
    if r == 0 {
        // Nothing to read: any layout works; one row per output.
        let outputs: usize = (0..shape.len())
            .filter(|i| !axes.contains(i))
            .map(|i| shape[i])
            .product();
        return Plan::Rows {
            rows: outputs,
            r: 0,
        };
    }
    // Groups of merged axes: (reduced?, extent), length-1 axes dropped.
    let mut groups: Vec<(bool, usize)> = Vec::new();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let red = axes.contains(&i);
        match groups.last_mut() {
            Some((g, e)) if *g == red => *e *= d,
            _ => groups.push((red, d)),
        }
    }
    let pattern: Vec<bool> = groups.iter().map(|g| g.0).collect();
    match pattern.as_slice() {
        [] | [false] => Plan::Rows { rows: kept, r: 1 },
        [true] => Plan::Full { n },
        [false, true] => Plan::Rows {
            rows: groups[0].1,
            r: groups[1].1,
        },
        [true, false] => Plan::Cols {
            outer: 1,
            r: groups[0].1,
            inner: groups[1].1,
        },
        [false, true, false] => Plan::Cols {
            outer: groups[0].1,
            r: groups[1].1,
            inner: groups[2].1,
        },
        _ => {
            let mut perm: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
            perm.extend_from_slice(axes);
            Plan::Permute {
                perm,
                rows: kept,
                r,
            }
        }
    }
}

/// Bytes of one accumulator (at most a Welford triple of f64, rounded up).
const ACC_BYTES: usize = 32;

/// `(tx_log2, splits, rows_per_split)` of a column reduction: `2^tx_log2` columns per block
/// (up to 32), the reduced axis split so that about `target_blocks` blocks run, each split
/// covering at least one row per thread row.
pub fn cols_launch(
    outer: usize,
    r: usize,
    inner: usize,
    target_blocks: usize,
) -> (u32, usize, usize) {
    let tx = inner.next_power_of_two().clamp(1, 32);
    let tx_log2 = tx.trailing_zeros();
    let ty = BLOCK as usize / tx;
    let col_blocks = outer * inner.div_ceil(tx);
    let mut splits = target_blocks.div_ceil(col_blocks.max(1)).clamp(1, 1024);
    splits = splits.min(r.div_ceil(ty).max(1)).min(65535);
    let rows_per_split = r.div_ceil(splits).max(1);
    let splits = r.div_ceil(rows_per_split).max(1);
    (tx_log2, splits, rows_per_split)
}

impl<T: DType> GpuArray<T> {
    /// Reduces `axes` (`None`: all; negative counts from the end) with `op`; `keepdims` keeps
    /// reduced axes as length 1; `ddof` is used by var / std. `O` must be the operation's
    /// result type ([`ReduceOp::out_name`]); the typed methods (`sum`, `mean_axes`, ...) pick
    /// it for you.
    pub fn reduce<O: DType>(
        &self,
        op: ReduceOp,
        axes: Option<&[isize]>,
        keepdims: bool,
        ddof: usize,
    ) -> Result<GpuArray<O>> {
        if O::NAME != op.out_name(T::NAME) {
            return Err(Error::invalid(
                op.name(),
                format!(
                    "the result of {} over {} elements is {}, not {}",
                    op.name(),
                    T::RUST_NAME,
                    op.out_name(T::NAME),
                    O::NAME
                ),
            ));
        }
        let ax = shape::normalize_axes(op.name(), axes, self.ndim())?;
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin)
            && ax.len() > 1
            && ax.len() < self.ndim()
        {
            return Err(Error::invalid(
                op.name(),
                "argmax / argmin take one axis or all of them",
            ));
        }
        let r: usize = ax.iter().map(|&a| self.shape[a]).product();
        if r == 0 && op.needs_elements() {
            return Err(Error::EmptyReduction {
                op: op.name().into(),
                shape: self.shape.clone(),
            });
        }
        let out_shape: Vec<usize> = (0..self.ndim())
            .filter_map(|i| {
                if ax.contains(&i) {
                    keepdims.then_some(1)
                } else {
                    Some(self.shape[i])
                }
            })
            .collect();
        let stream = self.dev.stream();
        let out = GpuArray::<O>::alloc_on(&self.dev, &out_shape, &stream)?;
        if out.is_empty() {
            return Ok(out);
        }
        let src = self.contiguous()?;
        let code = op as u32;
        match plan(&src.shape, &ax) {
            Plan::Full { n } => src.reduce_full(code, n, &out, ddof)?,
            Plan::Rows { rows, r } => src.reduce_rows_into(code, rows, r, &out, ddof)?,
            Plan::Cols { outer, r, inner } => {
                src.reduce_cols_into(code, outer, r, inner, &out, ddof)?
            }
            Plan::Permute { perm, rows, r } => {
                let t = src.permute_unchecked(&perm).astype::<T>()?;
                t.reduce_rows_into(code, rows, r, &out, ddof)?
            }
        }
        Ok(out)
    }

    fn reduce_full<O: DType>(
        &self,
        code: u32,
        n: usize,
        out: &GpuArray<O>,
        ddof: usize,
    ) -> Result<()> {
        let stream = self.dev.stream();
        self.used_on(&stream);
        out.used_on(&stream);
        let sms = self.dev.multiprocessor_count().max(1) as usize;
        let vec = 16 / std::mem::size_of::<T>();
        let blocks = n.div_ceil(vec * BLOCK as usize).clamp(1, sms * 8);
        let scratch = GpuArray::<u8>::alloc_on(&self.dev, &[blocks * ACC_BYTES], &stream)?;
        let k1 = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_partial<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k1,
            &stream,
            LaunchConfig::new((blocks as u32, 1, 1), (BLOCK, 1, 1)),
            &[self.arg(), (n as i64).into(), scratch.arg()],
        )?;
        let k2 = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_finish<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k2,
            &stream,
            LaunchConfig::new((1, 1, 1), (BLOCK * 4, 1, 1)),
            &[
                scratch.arg(),
                (blocks as i32).into(),
                out.arg(),
                (n as i64).into(),
                (ddof as i64).into(),
            ],
        )
    }

    fn reduce_rows_into<O: DType>(
        &self,
        code: u32,
        rows: usize,
        r: usize,
        out: &GpuArray<O>,
        ddof: usize,
    ) -> Result<()> {
        if r > 1024 {
            // Long rows: a block per row (and the row split when there are few rows).
            return self.reduce_cols_into(code, rows, r, 1, out, ddof);
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        out.used_on(&stream);
        let vec = 16 / std::mem::size_of::<T>();
        if r.is_multiple_of(vec) && r >= 32 * vec && self.device_ptr().is_multiple_of(16) {
            // A warp per row, 16-byte loads.
            let k = self.kernel(
                KernelFile::Reduce,
                &format!("reduce_rows_vec<{}, {code}>", T::NAME),
            )?;
            return kernels::launch(
                &k,
                &stream,
                kernels::grid_for(&self.dev, rows * 32, 2048),
                &[
                    self.arg(),
                    (rows as i64).into(),
                    (r as i64).into(),
                    out.arg(),
                    (ddof as i64).into(),
                ],
            );
        }
        let lanes = r.next_power_of_two().clamp(1, 32);
        let k = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_rows<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k,
            &stream,
            kernels::grid_for(&self.dev, rows * lanes, 8),
            &[
                self.arg(),
                (rows as i64).into(),
                (r as i64).into(),
                out.arg(),
                (ddof as i64).into(),
                (lanes.trailing_zeros() as i32).into(),
            ],
        )
    }

    fn reduce_cols_into<O: DType>(
        &self,
        code: u32,
        outer: usize,
        r: usize,
        inner: usize,
        out: &GpuArray<O>,
        ddof: usize,
    ) -> Result<()> {
        let vec = 16 / std::mem::size_of::<T>();
        if outer == 1
            && inner > 1
            && inner < vec
            && vec.is_multiple_of(inner)
            && self.device_ptr().is_multiple_of(16)
        {
            return self.reduce_cols_small_into(code, r, inner, out, ddof);
        }
        let stream = self.dev.stream();
        self.used_on(&stream);
        out.used_on(&stream);
        let target = self.dev.multiprocessor_count().max(1) as usize * 8;
        let (tx_log2, splits, rows_per_split) = cols_launch(outer, r, inner, target);
        let tx = 1usize << tx_log2;
        let col_blocks = outer * inner.div_ceil(tx);
        if col_blocks > u32::MAX as usize / 2 {
            return Err(Error::invalid(
                "reduce",
                format!("too many output columns ({col_blocks} blocks) for one launch"),
            ));
        }
        let ncols = outer * inner;
        let partial = if splits > 1 {
            Some(GpuArray::<u8>::alloc_on(
                &self.dev,
                &[splits * ncols * ACC_BYTES],
                &stream,
            )?)
        } else {
            None
        };
        let partial_arg = partial
            .as_ref()
            .map_or(gpukit_jit::KernelArg::Ptr(0), |p| p.arg());
        let k = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_cols<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k,
            &stream,
            LaunchConfig::new((col_blocks as u32, splits as u32, 1), (BLOCK, 1, 1)),
            &[
                self.arg(),
                (outer as i64).into(),
                (r as i64).into(),
                (inner as i64).into(),
                (tx_log2 as i32).into(),
                (rows_per_split as i64).into(),
                partial_arg,
                out.arg(),
                (ddof as i64).into(),
            ],
        )?;
        if let Some(p) = &partial {
            let k2 = self.kernel(
                KernelFile::Reduce,
                &format!("reduce_cols_finish<{}, {code}>", T::NAME),
            )?;
            kernels::launch(
                &k2,
                &stream,
                kernels::grid_for(&self.dev, ncols * 32, 8),
                &[
                    p.arg(),
                    (splits as i32).into(),
                    (ncols as i64).into(),
                    out.arg(),
                    (r as i64).into(),
                    (ddof as i64).into(),
                ],
            )?;
        }
        Ok(())
    }
}

impl<T: DType> GpuArray<T> {
    /// Axis 0 of a contiguous, 16-byte aligned `[r, inner]` array whose `inner` divides the
    /// vector width (`reduce_cols_small`, then `reduce_cols_finish` over the block partials).
    fn reduce_cols_small_into<O: DType>(
        &self,
        code: u32,
        r: usize,
        inner: usize,
        out: &GpuArray<O>,
        ddof: usize,
    ) -> Result<()> {
        let stream = self.dev.stream();
        self.used_on(&stream);
        out.used_on(&stream);
        let n = r * inner;
        let sms = self.dev.multiprocessor_count().max(1) as usize;
        let vec = 16 / std::mem::size_of::<T>();
        let blocks = n.div_ceil(vec * BLOCK as usize).clamp(1, sms * 8);
        let partial = GpuArray::<u8>::alloc_on(&self.dev, &[blocks * inner * ACC_BYTES], &stream)?;
        let k1 = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_cols_small<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k1,
            &stream,
            LaunchConfig::new((blocks as u32, 1, 1), (BLOCK, 1, 1)),
            &[
                self.arg(),
                (n as i64).into(),
                (inner as i32).into(),
                partial.arg(),
            ],
        )?;
        let k2 = self.kernel(
            KernelFile::Reduce,
            &format!("reduce_cols_finish<{}, {code}>", T::NAME),
        )?;
        kernels::launch(
            &k2,
            &stream,
            kernels::grid_for(&self.dev, inner * 32, 8),
            &[
                partial.arg(),
                (blocks as i32).into(),
                (inner as i64).into(),
                out.arg(),
                (r as i64).into(),
                (ddof as i64).into(),
            ],
        )
    }
}

macro_rules! reductions {
    ($($all:ident, $axis:ident, $axes:ident, $op:ident, $out:ty, $doc:literal;)*) => {
        impl<T: DType> GpuArray<T> {
            $(
                #[doc = concat!($doc, " of all elements (a 0-dimensional array; `.item()` reads it).")]
                pub fn $all(&self) -> Result<GpuArray<$out>> {
                    self.reduce(ReduceOp::$op, None, false, 0)
                }
                #[doc = concat!($doc, " along `axis` (negative counts from the end), which is removed.")]
                pub fn $axis(&self, axis: isize) -> Result<GpuArray<$out>> {
                    self.reduce(ReduceOp::$op, Some(&[axis]), false, 0)
                }
                #[doc = concat!($doc, " over `axes` (`None`: all), keeping them as length 1 with `keepdims`.")]
                pub fn $axes(&self, axes: Option<&[isize]>, keepdims: bool) -> Result<GpuArray<$out>> {
                    self.reduce(ReduceOp::$op, axes, keepdims, 0)
                }
            )*
        }
    };
}

reductions! {
    sum, sum_axis, sum_axes, Sum, T::Sum, "Sum (integers widen to 64 bits)";
    prod, prod_axis, prod_axes, Prod, T::Sum, "Product (integers widen to 64 bits)";
    mean, mean_axis, mean_axes, Mean, T::Float, "Mean (f64 for integers)";
    max, max_axis, max_axes, Max, T, "Maximum (NaN propagates)";
    min, min_axis, min_axes, Min, T, "Minimum (NaN propagates)";
    any, any_axis, any_axes, Any, u8, "Whether any element is nonzero";
    all, all_axis, all_axes, All, u8, "Whether every element is nonzero";
}

impl<T: DType> GpuArray<T> {
    /// Variance over `axes` (`None`: all) with `ddof` delta degrees of freedom (0: population
    /// variance, NumPy's default; 1: sample variance).
    pub fn var(
        &self,
        axes: Option<&[isize]>,
        keepdims: bool,
        ddof: usize,
    ) -> Result<GpuArray<T::Float>> {
        self.reduce(ReduceOp::Var, axes, keepdims, ddof)
    }
    /// Standard deviation (see [`var`](Self::var)).
    pub fn std(
        &self,
        axes: Option<&[isize]>,
        keepdims: bool,
        ddof: usize,
    ) -> Result<GpuArray<T::Float>> {
        self.reduce(ReduceOp::Std, axes, keepdims, ddof)
    }
    /// Flat index of the (first) maximum (NaN counts as the maximum, as in NumPy).
    pub fn argmax(&self) -> Result<GpuArray<i64>> {
        self.reduce(ReduceOp::ArgMax, None, false, 0)
    }
    /// Flat index of the (first) minimum.
    pub fn argmin(&self) -> Result<GpuArray<i64>> {
        self.reduce(ReduceOp::ArgMin, None, false, 0)
    }
    /// Index of the maximum along `axis`.
    pub fn argmax_axis(&self, axis: isize) -> Result<GpuArray<i64>> {
        self.reduce(ReduceOp::ArgMax, Some(&[axis]), false, 0)
    }
    /// Index of the minimum along `axis`.
    pub fn argmin_axis(&self, axis: isize) -> Result<GpuArray<i64>> {
        self.reduce(ReduceOp::ArgMin, Some(&[axis]), false, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plans_for_common_layouts() {
        assert_eq!(plan(&[10], &[0]), Plan::Full { n: 10 });
        assert_eq!(plan(&[4, 5], &[0, 1]), Plan::Full { n: 20 });
        assert_eq!(plan(&[4, 5], &[1]), Plan::Rows { rows: 4, r: 5 });
        assert_eq!(
            plan(&[10_000_000, 2], &[0]),
            Plan::Cols {
                outer: 1,
                r: 10_000_000,
                inner: 2
            }
        );
        assert_eq!(
            plan(&[2, 3, 4], &[1]),
            Plan::Cols {
                outer: 2,
                r: 3,
                inner: 4
            }
        );
        assert_eq!(plan(&[2, 3, 4], &[1, 2]), Plan::Rows { rows: 2, r: 12 });
        assert_eq!(
            plan(&[2, 3, 4], &[0, 1]),
            Plan::Cols {
                outer: 1,
                r: 6,
                inner: 4
            }
        );
        assert_eq!(
            plan(&[2, 3, 4], &[0, 2]),
            Plan::Permute {
                perm: vec![1, 0, 2],
                rows: 3,
                r: 8
            }
        );
        // Length-1 axes do not block merging.
        assert_eq!(plan(&[2, 1, 3, 4], &[2, 3]), Plan::Rows { rows: 2, r: 12 });
        assert_eq!(plan(&[5, 1], &[1]), Plan::Rows { rows: 5, r: 1 });
        // Empty reduced extent: one row per output.
        assert_eq!(plan(&[3, 0], &[1]), Plan::Rows { rows: 3, r: 0 });
    }

    #[test]
    fn axis_zero_of_a_tall_two_column_array_uses_many_blocks() {
        // The case: [1e7, 2] along axis 0 must not run on 2 threads.
        let (tx_log2, splits, rows) = cols_launch(1, 10_000_000, 2, 132 * 8);
        assert_eq!(tx_log2, 1);
        assert!(splits >= 1000, "{splits}");
        assert!(rows * splits >= 10_000_000);
        // Wide outputs need no split.
        let (_, splits, _) = cols_launch(1, 100, 1 << 20, 132 * 8);
        assert_eq!(splits, 1);
    }

    proptest! {
        #[test]
        fn plans_cover_every_element_once(
            shape in prop::collection::vec(1usize..4, 1..5),
            mask in any::<u8>(),
        ) {
            let axes: Vec<usize> = (0..shape.len()).filter(|i| mask >> i & 1 == 1).collect();
            prop_assume!(!axes.is_empty());
            let n: usize = shape.iter().product();
            let r: usize = axes.iter().map(|&a| shape[a]).product();
            match plan(&shape, &axes) {
                Plan::Full { n: m } => prop_assert_eq!(m, n),
                Plan::Rows { rows, r: rr } => prop_assert_eq!((rows * rr, rr), (n, r)),
                Plan::Cols { outer, r: rr, inner } => prop_assert_eq!((outer * rr * inner, rr), (n, r)),
                Plan::Permute { perm, rows, r: rr } => {
                    prop_assert_eq!((rows * rr, rr), (n, r));
                    prop_assert!(shape::check_permutation("p", &perm, shape.len()).is_ok());
                }
            }
        }

        #[test]
        fn column_launches_cover_the_reduced_axis(
            outer in 1usize..50, r in 1usize..100_000, inner in 1usize..3000,
        ) {
            let (tx_log2, splits, rows) = cols_launch(outer, r, inner, 1056);
            prop_assert!(tx_log2 <= 5);
            prop_assert!((1..=65535).contains(&splits));
            prop_assert!(rows * splits >= r && rows * (splits - 1) < r);
        }
    }
}
