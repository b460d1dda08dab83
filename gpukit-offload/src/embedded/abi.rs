//! The reference BLAS/LAPACK calling convention every exported routine shares: reading
//! arguments through pointers, the outcome of a call (LAPACK `info`, or the recorded BLAS
//! argument error), the panic guard at the `extern "C"` boundary, the element types, private
//! buffers and views of the caller's column-major arrays.

use super::INTERNAL_FAILURE_INFO;
use faer::dyn_stack::{MemBuffer, MemStack, StackReq};
use faer::{c32, c64, MatMut, MatRef, Par};
use std::cell::RefCell;
use std::ffi::c_char;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The Fortran `INTEGER` of the LP64 convention.
pub(crate) type Int = i32;

/// Why a routine stopped before computing anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fail {
    /// LAPACK's bad-argument outcome: the 1-based position of the first bad argument.
    Arg(i32),
    /// A private buffer could not be allocated, or a panic was caught at the boundary.
    Internal,
}

/// The result of a routine's body: LAPACK's `info` (0 or positive) or why it did not run.
pub(crate) type Outcome<T> = Result<T, Fail>;

/// A BLAS routine's argument error (BLAS routines have no `info`: the reference library calls
/// `xerbla`, which prints and stops the program; this backend records it instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlasError {
    /// The routine's name, lower case with its precision letter (`"dgemm"`).
    pub routine: String,
    /// The 1-based position of the bad argument, or [`INTERNAL_FAILURE_INFO`] when the routine
    /// failed internally (out of memory, or a panic caught at the boundary).
    pub argument: i32,
}

impl std::fmt::Display for BlasError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.argument == INTERNAL_FAILURE_INFO {
            write!(
                f,
                "{}: internal failure (out of memory or a caught panic); outputs untouched",
                self.routine
            )
        } else {
            write!(
                f,
                "{}: parameter number {} had an illegal value; outputs untouched",
                self.routine, self.argument
            )
        }
    }
}

thread_local! {
    static LAST_BLAS_ERROR: RefCell<Option<BlasError>> = const { RefCell::new(None) };
}

/// Takes (and clears) the last BLAS argument error or internal failure of this thread.
pub fn take_blas_error() -> Option<BlasError> {
    LAST_BLAS_ERROR.with(|e| e.borrow_mut().take())
}

#[cfg(test)]
thread_local! {
    /// Tests: the routine (base name, e.g. `"gemm"`) whose next call panics right before it would
    /// write its results.
    pub(crate) static INJECT_PANIC: std::cell::Cell<Option<&'static str>> =
        const { std::cell::Cell::new(None) };
}

/// The last point before a routine writes to the caller's memory; tests inject a panic here to
/// prove that a failure leaves every output untouched.
#[inline]
pub(crate) fn before_write(routine: &'static str) {
    #[cfg(test)]
    INJECT_PANIC.with(|p| {
        if p.get() == Some(routine) {
            p.set(None);
            panic!("injected panic in {routine}");
        }
    });
    #[cfg(not(test))]
    let _ = routine;
}

/// Runs a BLAS routine's body behind the panic guard; argument errors and internal failures are
/// recorded for [`take_blas_error`].
pub(crate) fn blas<T: Scalar>(routine: &'static str, body: impl FnOnce() -> Outcome<()>) {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or(Err(Fail::Internal));
    if let Err(fail) = outcome {
        let argument = match fail {
            Fail::Arg(p) => p,
            Fail::Internal => INTERNAL_FAILURE_INFO,
        };
        let err = BlasError {
            routine: format!("{}{routine}", T::LETTER),
            argument,
        };
        // `try_with`: the thread-local may already be gone when a thread's destructors call BLAS.
        let _ = LAST_BLAS_ERROR.try_with(|e| *e.borrow_mut() = Some(err));
    }
}

/// Runs a LAPACK routine's body behind the panic guard and writes `info`.
///
/// # Safety
/// `info` is null or valid for one write.
pub(crate) unsafe fn lapack(info: *mut Int, body: impl FnOnce() -> Outcome<i32>) {
    let code = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(i)) => i,
        Ok(Err(Fail::Arg(p))) => -p,
        Ok(Err(Fail::Internal)) | Err(_) => INTERNAL_FAILURE_INFO,
    };
    if !info.is_null() {
        // SAFETY: non-null and valid for a write by the caller's contract.
        unsafe { *info = code };
    }
}

/// Reads a scalar argument; a null pointer is a bad argument at `pos`.
///
/// # Safety
/// `p` is null or valid for a read.
#[inline]
pub(crate) unsafe fn read<V: Copy>(p: *const V, pos: i32) -> Outcome<V> {
    if p.is_null() {
        Err(Fail::Arg(pos))
    } else {
        // SAFETY: non-null and readable by the caller's contract.
        Ok(unsafe { *p })
    }
}

/// Reads a character argument, upper-cased (LAPACK's `LSAME` ignores case).
///
/// # Safety
/// `p` is null or valid for a read.
#[inline]
pub(crate) unsafe fn read_char(p: *const c_char, pos: i32) -> Outcome<u8> {
    // SAFETY: forwarded.
    Ok((unsafe { read(p, pos) }? as u8).to_ascii_uppercase())
}

/// Reads a leading dimension and requires `ld >= max(1, rows)`.
///
/// # Safety
/// `p` is null or valid for a read.
#[inline]
pub(crate) unsafe fn read_ld(p: *const Int, rows: usize, pos: i32) -> Outcome<usize> {
    // SAFETY: forwarded.
    let ld = unsafe { read(p, pos) }?;
    check(ld >= 1 && ld as usize >= rows, pos)?;
    Ok(ld as usize)
}

/// `ok`, or a bad argument at `pos`.
#[inline]
pub(crate) fn check(ok: bool, pos: i32) -> Outcome<()> {
    if ok {
        Ok(())
    } else {
        Err(Fail::Arg(pos))
    }
}

/// Requires an array pointer to be non-null when it has elements.
#[inline]
pub(crate) fn need<V>(p: *const V, elements: usize, pos: i32) -> Outcome<()> {
    check(elements == 0 || !p.is_null(), pos)
}

/// `op(A)` of the BLAS `trans` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `A`
    N,
    /// `A^T`
    T,
    /// `A^H` (`A^T` for real types)
    C,
}

/// Parses a `trans` argument: `N`, `T` and, where allowed, `C`.
pub(crate) fn op(c: u8, allow_c: bool, pos: i32) -> Outcome<Op> {
    match c {
        b'N' => Ok(Op::N),
        b'T' => Ok(Op::T),
        b'C' if allow_c => Ok(Op::C),
        _ => Err(Fail::Arg(pos)),
    }
}

/// Parses `uplo`: true for lower.
pub(crate) fn lower(c: u8, pos: i32) -> Outcome<bool> {
    match c {
        b'L' => Ok(true),
        b'U' => Ok(false),
        _ => Err(Fail::Arg(pos)),
    }
}

/// A BLAS/LAPACK element: `f32`, `f64`, `c32`, `c64` (the Fortran `REAL`, `DOUBLE PRECISION`,
/// `COMPLEX`, `COMPLEX*16` layouts).
pub(crate) trait Scalar:
    faer::traits::ComplexField
    + Copy
    + Send
    + Sync
    + PartialEq
    + std::fmt::Debug
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + MulAssign
    + AddAssign
    + DivAssign
    + SubAssign
{
    /// The real type of the same precision.
    type R: RealScalar;
    /// True for the complex types.
    const COMPLEX: bool;
    /// The precision letter of the routine names (`s d c z`).
    const LETTER: char;
    /// Zero.
    fn zero() -> Self;
    /// One.
    fn one() -> Self;
    /// From a real value.
    fn from_re(re: Self::R) -> Self;
    /// Real part.
    fn re(self) -> Self::R;
    /// Complex conjugate.
    fn cj(self) -> Self;
    /// `|re| + |im|`: the pivot measure of `i?amax` (`dcabs1`).
    fn abs1(self) -> Self::R;
    /// The modulus.
    fn modulus(self) -> Self::R;
    /// Neither part infinite nor NaN.
    fn finite(self) -> bool;
    /// A workspace size as LAPACK writes it into `work(1)`.
    fn size(n: usize) -> Self {
        Self::from_re(Self::R::from_f64(n as f64))
    }
}

/// The real element types `f32`, `f64`.
pub(crate) trait RealScalar: Scalar<R = Self> + PartialOrd {
    /// Machine epsilon as LAPACK's `dlamch('E')`: half the spacing of 1 (`2^-53` for `f64`).
    const EPS: Self;
    /// LAPACK's `dlamch('S')`: the smallest number whose reciprocal does not overflow.
    const SAFE_MIN: Self;
    /// From an `f64`.
    fn from_f64(x: f64) -> Self;
}

macro_rules! real_scalar {
    ($t:ty, $letter:literal) => {
        impl Scalar for $t {
            type R = $t;
            const COMPLEX: bool = false;
            const LETTER: char = $letter;
            #[inline]
            fn zero() -> Self {
                0.0
            }
            #[inline]
            fn one() -> Self {
                1.0
            }
            #[inline]
            fn from_re(re: $t) -> Self {
                re
            }
            #[inline]
            fn re(self) -> $t {
                self
            }
            #[inline]
            fn cj(self) -> Self {
                self
            }
            #[inline]
            fn abs1(self) -> $t {
                self.abs()
            }
            #[inline]
            fn modulus(self) -> $t {
                self.abs()
            }
            #[inline]
            fn finite(self) -> bool {
                self.is_finite()
            }
        }
        impl RealScalar for $t {
            const EPS: $t = <$t>::EPSILON * 0.5;
            const SAFE_MIN: $t = <$t>::MIN_POSITIVE;
            #[inline]
            fn from_f64(x: f64) -> $t {
                x as $t
            }
        }
    };
}
real_scalar!(f32, 's');
real_scalar!(f64, 'd');

macro_rules! complex_scalar {
    ($t:ty, $r:ty, $letter:literal) => {
        impl Scalar for $t {
            type R = $r;
            const COMPLEX: bool = true;
            const LETTER: char = $letter;
            #[inline]
            fn zero() -> Self {
                <$t>::new(0.0, 0.0)
            }
            #[inline]
            fn one() -> Self {
                <$t>::new(1.0, 0.0)
            }
            #[inline]
            fn from_re(re: $r) -> Self {
                <$t>::new(re, 0.0)
            }
            #[inline]
            fn re(self) -> $r {
                self.re
            }
            #[inline]
            fn cj(self) -> Self {
                <$t>::new(self.re, -self.im)
            }
            #[inline]
            fn abs1(self) -> $r {
                self.re.abs() + self.im.abs()
            }
            #[inline]
            fn modulus(self) -> $r {
                self.re.hypot(self.im)
            }
            #[inline]
            fn finite(self) -> bool {
                self.re.is_finite() && self.im.is_finite()
            }
        }
    };
}
complex_scalar!(c32, f32, 'c');
complex_scalar!(c64, f64, 'z');

/// The parallelism for a call of about `flops` floating-point operations: sequential below a
/// few million (thread start-up would dominate), otherwise every thread of the rayon pool.
///
/// After a `fork`, the child has the parent's rayon pool without its threads, and work sent to
/// it would never run: the pool is used only in the process that first used it (its pid is
/// recorded), and a forked child runs every call on its calling thread.
pub(crate) fn par(flops: f64) -> Par {
    if flops < 4.0e6 || !pool_is_ours() {
        return Par::Seq;
    }
    match Par::rayon(0) {
        p if p.degree() < 2 => Par::Seq,
        p => p,
    }
}

/// The process that first used the rayon pool (0: none yet).
static POOL_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// True in the process that first used the pool (recording it on the first call).
fn pool_is_ours() -> bool {
    use std::sync::atomic::Ordering;
    let me = std::process::id();
    match POOL_PID.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(owner) => owner == me,
    }
}

/// Scratch memory for a faer routine, allocated fallibly.
pub(crate) fn scratch(req: StackReq) -> Outcome<MemBuffer> {
    MemBuffer::try_new(req).map_err(|_| Fail::Internal)
}

/// A faer stack over a scratch buffer.
pub(crate) fn stack(buf: &mut MemBuffer) -> &mut MemStack {
    MemStack::new(buf)
}

/// A fallibly allocated vector of `len` copies of `v`.
pub(crate) fn vec_of<V: Clone>(len: usize, v: V) -> Outcome<Vec<V>> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Fail::Internal)?;
    out.resize(len, v);
    Ok(out)
}

/// A private column-major matrix (leading dimension = rows): every result is computed here and
/// copied to the caller's arrays only once the whole computation succeeded.
pub(crate) struct Buf<T> {
    data: Vec<T>,
    rows: usize,
    cols: usize,
}

impl<T: Scalar> Buf<T> {
    /// A zero matrix (fallible allocation).
    pub(crate) fn zeros(rows: usize, cols: usize) -> Outcome<Buf<T>> {
        let len = rows.checked_mul(cols).ok_or(Fail::Internal)?;
        Ok(Buf {
            data: vec_of(len, T::zero())?,
            rows,
            cols,
        })
    }

    /// A copy of the caller's `rows x cols` matrix at `p` with leading dimension `ld`.
    ///
    /// # Safety
    /// `p` is valid for reads of the extent `rows x cols` with leading dimension `ld >= rows`
    /// (non-null when the matrix has elements).
    pub(crate) unsafe fn load(p: *const T, rows: usize, cols: usize, ld: usize) -> Outcome<Buf<T>> {
        let mut b = Buf::zeros(rows, cols)?;
        for j in 0..cols {
            for i in 0..rows {
                // SAFETY: inside the extent by the caller's contract.
                b.data[i + j * rows] = unsafe { *p.add(i + j * ld) };
            }
        }
        Ok(b)
    }

    /// The Hermitian (`herm`) or symmetric matrix whose `lower`/upper triangle is stored at `p`,
    /// as a full matrix with both triangles filled (a Hermitian diagonal is made real, as LAPACK
    /// reads only its real part).
    ///
    /// # Safety
    /// As [`Buf::load`] for an `n x n` matrix.
    pub(crate) unsafe fn load_full(
        p: *const T,
        n: usize,
        ld: usize,
        lower: bool,
        herm: bool,
    ) -> Outcome<Buf<T>> {
        let mut b = Buf::zeros(n, n)?;
        for j in 0..n {
            let (lo, hi) = if lower { (j, n) } else { (0, j + 1) };
            for i in lo..hi {
                // SAFETY: inside the extent by the caller's contract.
                let v = unsafe { *p.add(i + j * ld) };
                if i == j {
                    b.data[i + j * n] = if herm { T::from_re(v.re()) } else { v };
                } else {
                    b.data[i + j * n] = v;
                    b.data[j + i * n] = if herm { v.cj() } else { v };
                }
            }
        }
        Ok(b)
    }

    /// The referenced triangle of the caller's Hermitian matrix as the lower triangle of a
    /// private matrix (the upper triangle `U` becomes `L = U^H`), zeros above; the diagonal's
    /// imaginary part is dropped as LAPACK does.
    ///
    /// # Safety
    /// As [`Buf::load`] for an `n x n` matrix.
    pub(crate) unsafe fn load_lower(
        p: *const T,
        n: usize,
        ld: usize,
        lower: bool,
    ) -> Outcome<Buf<T>> {
        let mut b = Buf::zeros(n, n)?;
        for j in 0..n {
            for i in j..n {
                let (r, c) = if lower { (i, j) } else { (j, i) };
                // SAFETY: inside the extent by the caller's contract.
                let v = unsafe { *p.add(r + c * ld) };
                b.data[i + j * n] = if i == j {
                    T::from_re(v.re())
                } else if lower {
                    v
                } else {
                    v.cj()
                };
            }
        }
        Ok(b)
    }

    /// Rows.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Whether every element is finite.
    pub(crate) fn all_finite(&self) -> bool {
        self.data.iter().all(|v| v.finite())
    }

    /// Element `(i, j)`.
    #[inline]
    pub(crate) fn at(&self, i: usize, j: usize) -> T {
        self.data[i + j * self.rows]
    }

    /// Sets element `(i, j)`.
    #[inline]
    pub(crate) fn set(&mut self, i: usize, j: usize, v: T) {
        self.data[i + j * self.rows] = v;
    }

    /// Multiplies every element by `s`.
    pub(crate) fn scale(&mut self, s: T) {
        for v in &mut self.data {
            *v = s * *v;
        }
    }

    /// A faer view.
    pub(crate) fn mat(&self) -> MatRef<'_, T> {
        MatRef::from_column_major_slice(&self.data, self.rows, self.cols)
    }

    /// A mutable faer view.
    pub(crate) fn mat_mut(&mut self) -> MatMut<'_, T> {
        MatMut::from_column_major_slice_mut(&mut self.data, self.rows, self.cols)
    }

    /// Copies the whole matrix to the caller's `p` (leading dimension `ld`).
    ///
    /// # Safety
    /// `p` is valid for writes of the extent `rows x cols` with leading dimension `ld >= rows`.
    pub(crate) unsafe fn store(&self, p: *mut T, ld: usize) {
        // SAFETY: forwarded.
        unsafe { self.store_block(p, ld, self.rows, self.cols) }
    }

    /// Copies the leading `rows x cols` block to the caller's `p`.
    ///
    /// # Safety
    /// `p` is valid for writes of that extent with leading dimension `ld >= rows`, and the block
    /// lies inside this matrix.
    pub(crate) unsafe fn store_block(&self, p: *mut T, ld: usize, rows: usize, cols: usize) {
        for j in 0..cols {
            for i in 0..rows {
                // SAFETY: inside the extent by the caller's contract.
                unsafe { *p.add(i + j * ld) = self.data[i + j * self.rows] };
            }
        }
    }

    /// Copies the `lower`/upper triangle (diagonal included) to the caller's `p`.
    ///
    /// # Safety
    /// As [`Buf::store`] for an `n x n` matrix.
    pub(crate) unsafe fn store_triangle(&self, p: *mut T, ld: usize, lower: bool) {
        let n = self.rows;
        for j in 0..n {
            let (lo, hi) = if lower { (j, n) } else { (0, j + 1) };
            for i in lo..hi {
                // SAFETY: inside the extent by the caller's contract.
                unsafe { *p.add(i + j * ld) = self.data[i + j * n] };
            }
        }
    }

    /// Copies this private lower triangle back to the caller's triangle: to the lower one as it
    /// is, to the upper one conjugate-transposed (the inverse of [`Buf::load_lower`]).
    ///
    /// # Safety
    /// As [`Buf::store`] for an `n x n` matrix.
    pub(crate) unsafe fn store_lower_as(&self, p: *mut T, ld: usize, lower: bool) {
        let n = self.rows;
        for j in 0..n {
            for i in j..n {
                let v = self.data[i + j * n];
                let (r, c, v) = if lower { (i, j, v) } else { (j, i, v.cj()) };
                // SAFETY: inside the extent by the caller's contract.
                unsafe { *p.add(r + c * ld) = v };
            }
        }
    }
}

/// A faer view of the caller's `rows x cols` matrix at `p` with leading dimension `ld`.
///
/// # Safety
/// `p` is valid for reads of that extent (non-null when it has elements), `ld >= max(1, rows)`,
/// and nothing writes that memory while the view lives.
pub(crate) unsafe fn view<'a, T: Scalar>(
    p: *const T,
    rows: usize,
    cols: usize,
    ld: usize,
) -> MatRef<'a, T> {
    let p = if rows == 0 || cols == 0 || p.is_null() {
        std::ptr::NonNull::<T>::dangling().as_ptr() as *const T
    } else {
        p
    };
    // SAFETY: forwarded; an empty matrix gets a dangling (never read) non-null pointer.
    unsafe { MatRef::from_raw_parts(p, rows, cols, 1, ld as isize) }
}

/// `op(A)` of a view and whether it is conjugated.
pub(crate) fn apply_op<T: Scalar>(a: MatRef<'_, T>, op: Op) -> (MatRef<'_, T>, faer::Conj) {
    match op {
        Op::N => (a, faer::Conj::No),
        Op::T => (a.transpose(), faer::Conj::No),
        Op::C => (a.transpose(), faer::Conj::Yes),
    }
}

/// Writes LAPACK's `work(1)` answer (the workspace size) when `work` is non-null.
///
/// # Safety
/// `work` is null or valid for one write.
pub(crate) unsafe fn answer<V>(work: *mut V, v: V) {
    if !work.is_null() {
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *work = v };
    }
}

/// A non-negative `i32` as a size.
#[inline]
pub(crate) fn sz(x: i32) -> usize {
    x.max(0) as usize
}
