//! The arithmetic operators: `+ - * /` and unary `-` on arrays (owned or borrowed), scalars and
//! expressions build an [`Expr`], which [`Expr::eval`] runs as **one** generated kernel
//! (broadcasting included) and which is where the only `?` goes:
//!
//! ```no_run
//! # use gpukit_core::{Device, GpuArray};
//! # let dev = Device::open(0)?;
//! let x = GpuArray::<f32>::ones(&dev, &[4, 3])?;
//! let b = GpuArray::<f32>::arange(&dev, 0.0, 3.0, 1.0)?;   // broadcast over rows
//! let y = (2.0 * &x + &b * &b - 1.0).eval()?;              // one kernel, one `?`
//! let z = (-&y / 4.0).exp().maximum(0.5).eval()?;         // functions fuse too
//! # Ok::<(), gpukit_core::Error>(())
//! ```
//!
//! Why an expression and not `Result<GpuArray>` from each operator: a `Result` cannot be the
//! left operand of an operator with a scalar on the right (Rust's orphan rule forbids `impl
//! Mul<f32> for Result<..>`), so chains would need a `?` per operator; and evaluating each
//! operator alone reads and writes the whole array once per operator, where the fused kernel
//! does it once. Nothing fails while an expression is built; every error (shapes that do not
//! broadcast, arrays on different devices, a function the element type lacks) is returned by
//! `eval`, before anything is queued. The named methods (`x.add(&y)?`, `x.mul_scalar(2.0)?`,
//! `x.add_into(&y, &mut out)?`) stay eager, one built-in kernel each; an expression computes
//! exactly what they compute (the operations are one shared definition,
//! `kernels/elementwise.cuh`), except that a chain of operations on f16 / bf16 rounds once, at
//! the end, instead of after every operation.
//!
//! Besides the operators, an expression takes the unary functions of [`UnaryOp`]
//! (`e.exp()`, `e.sqrt()`, ..., or [`Expr::unary`]) and the binary ones of [`BinaryOp`]
//! (`e.maximum(x)`, `e.pow(2.0)`, ..., or [`Expr::binary`]); start from an array with
//! [`GpuArray::expr`] (`a.expr().exp()`).
//!
//! Integer arithmetic wraps around and division by zero gives 0 (as the built-in methods);
//! floats follow IEEE. The generated kernel for an expression shape and element type is
//! compiled once per process (cached on disk across processes) and found again by its text.
//!
//! # The two kernels
//!
//! Where the output is contiguous and 16-byte aligned and every array of the expression is read
//! in one of the [`LeafMode`]s (the same shape and contiguous; a contiguous block repeated along
//! the leading dimensions, such as a bias row; one element per run of output elements, such as
//! a column or a per-channel value; a single element), the expression runs in the **vector
//! kernel**: the loop of the built-in contiguous kernels (`ew_loop`: 16-byte loads and stores,
//! a block-contiguous chunk per block, several vectors per thread in flight), with the index of
//! a broadcast operand computed once per vector by 32-bit multiply-shift division (PyTorch's
//! `IntDivider`) instead of per element through the strides. Anything else (strided views,
//! outputs that are views, broadcasts of other forms, misaligned pointers) runs in the
//! **general kernel**: one element per thread and step, offsets through the layout's strides.
//! On the H200 the general kernel was the only one before: `&a + &b` moved 73 % and `&a * 2.0`
//! 60 % of copy bandwidth on 1 GiB of f32 where the named methods moved 104 %.

use super::ops::{check_out, same_device, unalias, BinaryOp, UnaryOp};
use super::GpuArray;
use crate::codegen::{self, Param, Role};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels;
use crate::shape;
use gpukit_jit::{CompileOptions, KernelArg, ProgramSpec};
use std::borrow::Cow;
use std::fmt::Write as _;

/// Most distinct arrays one generated kernel reads.
pub const MAX_LEAVES: usize = 16;

#[derive(Debug, Clone)]
enum Node {
    Leaf(usize),
    Scalar(usize),
    Unary(UnaryOp, Box<Node>),
    Bin(BinaryOp, Box<Node>, Box<Node>),
}

impl Node {
    fn shift(self, scalars: usize) -> Node {
        match self {
            Node::Scalar(i) => Node::Scalar(i + scalars),
            Node::Unary(op, a) => Node::Unary(op, Box::new(a.shift(scalars))),
            Node::Bin(op, a, b) => {
                Node::Bin(op, Box::new(a.shift(scalars)), Box::new(b.shift(scalars)))
            }
            leaf => leaf,
        }
    }

    /// Renumbers leaves (`Leaf(i)` -> `Leaf(map[i])`).
    fn remap(self, map: &[usize]) -> Node {
        match self {
            Node::Leaf(i) => Node::Leaf(map[i]),
            Node::Unary(op, a) => Node::Unary(op, Box::new(a.remap(map))),
            Node::Bin(op, a, b) => Node::Bin(op, Box::new(a.remap(map)), Box::new(b.remap(map))),
            s => s,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Node::Leaf(i) => {
                let _ = write!(out, "x{i}");
            }
            Node::Scalar(i) => {
                let _ = write!(out, "s{i}");
            }
            Node::Unary(op, a) => {
                let _ = write!(out, "gk_una<{}>(", *op as u32);
                a.write(out);
                out.push(')');
            }
            Node::Bin(op, a, b) => {
                // + - * as the wrapping helpers (what `bin` computes for them); the others
                // through `bin` itself.
                match op {
                    BinaryOp::Add => out.push_str("wrap_add("),
                    BinaryOp::Sub => out.push_str("wrap_sub("),
                    BinaryOp::Mul => out.push_str("wrap_mul("),
                    other => {
                        let _ = write!(out, "gk_bin<{}>(", *other as u32);
                    }
                }
                a.write(out);
                out.push_str(", ");
                b.write(out);
                out.push(')');
            }
        }
    }

    /// Visits every operation: `Err` for the first one the element kind lacks.
    fn check(&self, kind: crate::dtype::DTypeKind, dtype: &'static str) -> Result<()> {
        let unsupported = |op: &str| Error::UnsupportedDType {
            op: op.to_string(),
            dtype,
        };
        match self {
            Node::Unary(op, a) => {
                if !op.supports(kind) {
                    return Err(unsupported(op.name()));
                }
                a.check(kind, dtype)
            }
            Node::Bin(op, a, b) => {
                if !op.supports(kind) {
                    return Err(unsupported(op.name()));
                }
                a.check(kind, dtype)?;
                b.check(kind, dtype)
            }
            _ => Ok(()),
        }
    }

    /// True when the tree holds an operation whose built-in kernel runs one vector per thread
    /// ([`kernels::EW_UNROLL_HEAVY`]: logarithm, power), or an integer division or remainder
    /// (a 64-bit one spilled registers at four vectors per thread).
    fn heavy(&self, int: bool) -> bool {
        match self {
            Node::Unary(op, a) => op.unroll() == kernels::EW_UNROLL_HEAVY || a.heavy(int),
            Node::Bin(op, a, b) => {
                op.unroll() == kernels::EW_UNROLL_HEAVY
                    || (int && matches!(op, BinaryOp::Div | BinaryOp::Mod))
                    || a.heavy(int)
                    || b.heavy(int)
            }
            _ => false,
        }
    }
}

/// How the vector kernel reads one array of an expression, for an output of `n` elements that
/// is contiguous (element `e` of the output is the `e`-th in memory). `v` below is the vector
/// width (16 bytes of elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeafMode {
    /// The output's shape, contiguous: vector `i` of the output reads vector `i` of the array.
    Dense,
    /// A contiguous block of `m` elements (a multiple of `v`) repeated along the leading
    /// dimensions (a bias row broadcast over rows): element `e` reads element `e % m`, a whole
    /// vector at a time.
    Repeat {
        /// The block's length.
        m: usize,
    },
    /// Each element covers a run of `d` consecutive output elements (`d` a multiple of `v`), the
    /// runs cycling through `m` elements (a column `[R, 1]` over `[R, C]`: `d = C`, `m = R`; a
    /// per-channel `[1, C, 1]` over `[B, C, H]`: `d = H`, `m = C`): element `e` reads element
    /// `(e / d) % m`, one load per vector.
    Splat {
        /// The run length.
        d: usize,
        /// The cycle length.
        m: usize,
    },
    /// A single element, read once per thread.
    Const,
}

impl LeafMode {
    /// One letter per mode, for the kernel's cache id.
    pub fn tag(self) -> char {
        match self {
            LeafMode::Dense => 'D',
            LeafMode::Repeat { .. } => 'R',
            LeafMode::Splat { .. } => 'S',
            LeafMode::Const => 'C',
        }
    }

    /// Whether the vector kernel reads this array with 16-byte loads (its pointer must then be
    /// 16-byte aligned).
    pub fn vector_loads(self) -> bool {
        matches!(self, LeafMode::Dense | LeafMode::Repeat { .. })
    }

    /// The mode in which the vector kernel can read an array whose strides in the output's shape
    /// (broadcast strides: 0 along broadcast dimensions) are `strides`, for a contiguous output of
    /// `shape` and `v` elements per vector; `None` when no mode fits (then the general kernel
    /// runs the expression). The divisions the kernel makes must be exact in 32 bits: the
    /// output's vector count below 2^31 unless every array is dense or constant.
    pub fn of(shape: &[usize], strides: &[isize], v: usize) -> Option<LeafMode> {
        let n: usize = shape.iter().product();
        let out = shape::contiguous_strides(shape);
        let (cs, rows) = shape::coalesce(shape, &[out, strides.to_vec()]);
        let ls = &rows[1];
        let nonzero: Vec<usize> = (0..cs.len()).filter(|&d| ls[d] != 0).collect();
        let mode = match nonzero.as_slice() {
            [] => LeafMode::Const,
            [j] if ls[*j] == 1 => {
                let m = cs[*j];
                let d: usize = cs[j + 1..].iter().product();
                if d == 1 && m == n {
                    LeafMode::Dense
                } else if d == 1 && m % v == 0 {
                    LeafMode::Repeat { m }
                } else if d > 1 && d.is_multiple_of(v) {
                    LeafMode::Splat { d, m }
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        const LIMIT: usize = (1 << 31) - 1;
        let fits = match mode {
            LeafMode::Repeat { m } => m / v <= LIMIT && n / v <= LIMIT,
            LeafMode::Splat { d, m } => d / v <= LIMIT && m <= LIMIT && n / v <= LIMIT,
            _ => true,
        };
        fits.then_some(mode)
    }

    /// The six words of this array's row in the vector kernel's divisor table (`GkDiv<K>`):
    /// `(magic, shift, divisor)` of the vector index's first and second division.
    fn divisors(self, v: usize) -> [u32; 6] {
        let row = |d: usize| {
            let (m, s) = shape::magic_divisor(d as u32);
            [m, s, d as u32]
        };
        match self {
            LeafMode::Repeat { m } => {
                let a = row(m / v);
                [a[0], a[1], a[2], 0, 0, 0]
            }
            LeafMode::Splat { d, m } => {
                let (a, b) = (row(d / v), row(m));
                [a[0], a[1], a[2], b[0], b[1], b[2]]
            }
            _ => [0; 6],
        }
    }

    /// The element this array supplies to output element `e` of `n`, as the vector kernel
    /// computes it (its 32-bit divisions on vectors, 64-bit ones on the tail of `n % v`
    /// elements): what the CPU tests compare with the strides.
    pub fn element(self, e: usize, n: usize, v: usize) -> usize {
        let div = |x: u32, d: usize| shape::magic_div(x, shape::magic_divisor(d as u32)) as usize;
        let vector = e < n / v * v;
        match self {
            LeafMode::Dense => e,
            LeafMode::Const => 0,
            LeafMode::Repeat { m } if vector => {
                let (i, mv) = (e / v, m / v);
                (i - div(i as u32, mv) * mv) * v + e % v
            }
            LeafMode::Repeat { m } => e % m,
            LeafMode::Splat { d, m } if vector => {
                let q = div((e / v) as u32, d / v);
                q - div(q as u32, m) * m
            }
            LeafMode::Splat { d, m } => (e / d) % m,
        }
    }
}

/// The CUDA source of the **vector kernel** `gk_expr_v` for an expression whose C text is
/// `code` (over `x0..` and `s0..`, as [`Expr::code`] writes it) on arrays of C type `ctype`
/// read in `modes`, with `scalars` scalars and `unroll` vectors per thread (see the module
/// docs). Parameters: the arrays' pointers, the output's, two values per scalar (as in
/// [`codegen`]), the element count, then the divisor table `GkDiv<K>` (six `u32` per array).
pub fn vector_source(
    ctype: &str,
    code: &str,
    modes: &[LeafMode],
    scalars: usize,
    unroll: usize,
) -> String {
    let k = modes.len().max(1);
    let mut s = String::from(codegen::PREAMBLE);
    s.push_str("#include \"elementwise.cuh\"\n");
    let _ = writeln!(
        s,
        "template <int K> struct GkDiv {{ unsigned int w[K][6]; }};
__device__ __forceinline__ unsigned int gk_fdiv(unsigned int n, const unsigned int* d) {{
    return (__umulhi(n, d[0]) + n) >> d[1];
}}
typedef {ctype} T;
typedef Cv<T>::C C;
constexpr int V = 16 / sizeof(T);
typedef Pack<T, V> P;"
    );
    // What one vector step loads: a vector per dense / repeated array, an element per splat.
    s.push_str("struct GkIn {");
    for (j, m) in modes.iter().enumerate() {
        match m {
            LeafMode::Dense | LeafMode::Repeat { .. } => {
                let _ = write!(s, " P x{j};");
            }
            LeafMode::Splat { .. } => {
                let _ = write!(s, " T x{j};");
            }
            LeafMode::Const => {}
        }
    }
    s.push_str(" };\n");
    let mut sig: Vec<String> = (0..modes.len())
        .map(|j| format!("const T* _gk_p_x{j}"))
        .collect();
    sig.push("T* _gk_p_y".into());
    for i in 0..scalars {
        sig.push(format!("double _gk_sf_s{i}, long long _gk_si_s{i}"));
    }
    sig.push("long long n".into());
    sig.push(format!("GkDiv<{k}> _gk_d"));
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__(128) gk_expr_v({}) {{",
        sig.join(", ")
    );
    for i in 0..scalars {
        let _ = writeln!(
            s,
            "    const C s{i} = scalar_arg<T>(_gk_sf_s{i}, _gk_si_s{i});"
        );
    }
    for (j, m) in modes.iter().enumerate() {
        if *m == LeafMode::Const {
            let _ = writeln!(s, "    const C _gk_c{j} = Cv<T>::up(_gk_p_x{j}[0]);");
        }
    }
    s.push_str("    const long long nv = n / V;\n");
    let _ = writeln!(s, "    ew_loop<{unroll}>(\n        nv,");
    s.push_str("        [&](long long i) {\n            GkIn r;\n");
    for (j, m) in modes.iter().enumerate() {
        match m {
            LeafMode::Dense => {
                let _ = writeln!(
                    s,
                    "            r.x{j} = reinterpret_cast<const P*>(_gk_p_x{j})[i];"
                );
            }
            LeafMode::Repeat { .. } => {
                let _ = writeln!(
                    s,
                    "            {{ const unsigned int u = (unsigned int)i; \
                     r.x{j} = reinterpret_cast<const P*>(_gk_p_x{j})[u - gk_fdiv(u, _gk_d.w[{j}]) * _gk_d.w[{j}][2]]; }}"
                );
            }
            LeafMode::Splat { .. } => {
                let _ = writeln!(
                    s,
                    "            {{ const unsigned int q = gk_fdiv((unsigned int)i, _gk_d.w[{j}]); \
                     r.x{j} = _gk_p_x{j}[q - gk_fdiv(q, _gk_d.w[{j}] + 3) * _gk_d.w[{j}][5]]; }}"
                );
            }
            LeafMode::Const => {}
        }
    }
    s.push_str("            return r;\n        },\n");
    s.push_str("        [&](long long i, GkIn r) {\n            P o;\n#pragma unroll\n");
    s.push_str("            for (int _gk_e = 0; _gk_e < V; ++_gk_e) {\n");
    for (j, m) in modes.iter().enumerate() {
        let value = match m {
            LeafMode::Dense | LeafMode::Repeat { .. } => format!("Cv<T>::up(r.x{j}.v[_gk_e])"),
            LeafMode::Splat { .. } => format!("Cv<T>::up(r.x{j})"),
            LeafMode::Const => format!("_gk_c{j}"),
        };
        let _ = writeln!(s, "                const C x{j} = {value};");
    }
    let _ = writeln!(
        s,
        "                o.v[_gk_e] = Cv<T>::down((C)({code}));\n            }}\n            \
         reinterpret_cast<P*>(_gk_p_y)[i] = o;\n        }});"
    );
    // The last n % V elements, one per thread, with 64-bit index arithmetic.
    s.push_str("    for (long long j = nv * V + global_tid(); j < n; j += grid_threads()) {\n");
    for (j, m) in modes.iter().enumerate() {
        let index = match m {
            LeafMode::Dense => "j".to_string(),
            LeafMode::Repeat { .. } => format!("j % ((long long)_gk_d.w[{j}][2] * V)"),
            LeafMode::Splat { .. } => {
                format!("(j / ((long long)_gk_d.w[{j}][2] * V)) % (long long)_gk_d.w[{j}][5]")
            }
            LeafMode::Const => String::new(),
        };
        if *m == LeafMode::Const {
            let _ = writeln!(s, "        const C x{j} = _gk_c{j};");
        } else {
            let _ = writeln!(s, "        const C x{j} = Cv<T>::up(_gk_p_x{j}[{index}]);");
        }
    }
    let _ = writeln!(
        s,
        "        _gk_p_y[j] = Cv<T>::down((C)({code}));\n    }}\n}}"
    );
    s
}

/// The CUDA source of the **general kernel** `gk_expr` (any strides and broadcasts, one element
/// per thread and step; [`codegen::elementwise_source`]) for `code` on `leaves` arrays and
/// `scalars` scalars of C type `ctype`.
pub fn general_source(ctype: &'static str, code: &str, leaves: usize, scalars: usize) -> String {
    let mut p: Vec<Param> = (0..leaves)
        .map(|i| Param {
            name: format!("x{i}"),
            ctype,
            role: Role::In,
        })
        .collect();
    p.extend((0..scalars).map(|i| Param {
        name: format!("s{i}"),
        ctype,
        role: Role::Scalar,
    }));
    p.push(Param {
        name: "y".into(),
        ctype,
        role: Role::Out,
    });
    codegen::elementwise_source(
        "gk_expr",
        &p,
        &format!("y = {code};"),
        "#include \"elementwise.cuh\"\n",
    )
}

/// Vectors per thread of the vector kernel for `loads` arrays read with vector loads: four as
/// the built-in kernels (two inputs), fewer as the arrays grow (registers), one where the
/// expression holds a logarithm or a power ([`kernels::EW_UNROLL_HEAVY`]).
pub fn vector_unroll(loads: usize, heavy: bool) -> usize {
    if heavy {
        kernels::EW_UNROLL_HEAVY
    } else if loads <= 3 {
        kernels::EW_UNROLL
    } else if loads <= 6 {
        2
    } else {
        1
    }
}

/// Compile options of the generated kernels (the shared headers).
fn options() -> CompileOptions {
    CompileOptions::new()
        .header("common.cuh", kernels::COMMON_H)
        .header("elementwise.cuh", kernels::ELEMENTWISE_H)
}

/// An unevaluated elementwise expression over arrays of `T` and scalars (see the module docs).
#[derive(Debug, Clone)]
pub struct Expr<T: DType> {
    node: Node,
    leaves: Vec<GpuArray<T>>,
    scalars: Vec<T>,
}

impl<T: DType> Expr<T> {
    /// The expression that is just `a` (a view, nothing copied).
    pub fn of(a: &GpuArray<T>) -> Self {
        Expr {
            node: Node::Leaf(0),
            leaves: vec![a.clone()],
            scalars: Vec::new(),
        }
    }

    fn scalar(s: T) -> Self {
        Expr {
            node: Node::Scalar(0),
            leaves: Vec::new(),
            scalars: vec![s],
        }
    }

    fn combine(self, op: BinaryOp, rhs: Expr<T>) -> Expr<T> {
        let ns = self.scalars.len();
        let mut leaves = self.leaves;
        let mut scalars = self.scalars;
        // The same view used twice is loaded once.
        let mut map = Vec::with_capacity(rhs.leaves.len());
        for l in rhs.leaves {
            match leaves.iter().position(|x| same_view(x, &l)) {
                Some(p) => map.push(p),
                None => {
                    map.push(leaves.len());
                    leaves.push(l);
                }
            }
        }
        scalars.extend(rhs.scalars);
        let right = rhs.node.shift(ns).remap(&map);
        Expr {
            node: Node::Bin(op, Box::new(self.node), Box::new(right)),
            leaves,
            scalars,
        }
    }

    /// `op(self)` for a unary function ([`UnaryOp`]); a function the element type lacks
    /// (`exp` of integers) is an [`Error::UnsupportedDType`] from `eval`.
    pub fn unary(self, op: UnaryOp) -> Expr<T> {
        Expr {
            node: Node::Unary(op, Box::new(self.node)),
            leaves: self.leaves,
            scalars: self.scalars,
        }
    }

    /// `self OP rhs` for any [`BinaryOp`] (`rhs` an array, an expression or a scalar); an
    /// operation the element type lacks (bitwise and of floats) is an
    /// [`Error::UnsupportedDType`] from `eval`.
    pub fn binary(self, op: BinaryOp, rhs: impl IntoExpr<T>) -> Expr<T> {
        self.combine(op, rhs.into_expr())
    }

    /// Elementwise `maximum(self, rhs)` (NaN propagates).
    pub fn maximum(self, rhs: impl IntoExpr<T>) -> Expr<T> {
        self.binary(BinaryOp::Maximum, rhs)
    }
    /// Elementwise `minimum(self, rhs)` (NaN propagates).
    pub fn minimum(self, rhs: impl IntoExpr<T>) -> Expr<T> {
        self.binary(BinaryOp::Minimum, rhs)
    }
    /// Elementwise `self ** rhs` (as [`BinaryOp::Pow`]).
    pub fn pow(self, rhs: impl IntoExpr<T>) -> Expr<T> {
        self.binary(BinaryOp::Pow, rhs)
    }
    /// Elementwise `numpy.remainder(self, rhs)`.
    pub fn remainder(self, rhs: impl IntoExpr<T>) -> Expr<T> {
        self.binary(BinaryOp::Mod, rhs)
    }

    /// The C expression of this tree (`wrap_mul(wrap_add(x0, s0), x1)`), as the generated
    /// kernels use it.
    pub fn code(&self) -> String {
        let mut s = String::new();
        self.node.write(&mut s);
        s
    }

    /// The broadcast shape of the arrays in the expression.
    pub fn shape(&self) -> Result<Vec<usize>> {
        let mut s: Vec<usize> = Vec::new();
        for l in &self.leaves {
            s = shape::broadcast_shapes("expression", &s, &l.shape)?;
        }
        Ok(s)
    }

    /// Runs the expression as one kernel into a fresh contiguous array.
    pub fn eval(&self) -> Result<GpuArray<T>> {
        let first = self.first()?;
        let shape = self.shape()?;
        let out = GpuArray::<T>::alloc_on(&first.dev, &shape, &first.dev.stream())?;
        self.launch(&self.leaves, &out)?;
        Ok(out)
    }

    /// Runs the expression into `out` (which must have the broadcast shape; it may be one of the
    /// arrays of the expression, element for element, as in `x = 2 * x + 1`).
    pub fn eval_into(&self, out: &mut GpuArray<T>) -> Result<()> {
        let first = self.first()?;
        let shape = self.shape()?;
        check_out("expression", first, out, &shape)?;
        let leaves: Vec<GpuArray<T>> = self
            .leaves
            .iter()
            .map(|l| unalias(l, out))
            .collect::<Result<_>>()?;
        self.launch(&leaves, out)
    }

    /// Checks what `eval` checks before anything is allocated: arrays on one device, every
    /// operation defined for `T`, at most [`MAX_LEAVES`] arrays.
    fn first(&self) -> Result<&GpuArray<T>> {
        let first = self.leaves.first().ok_or_else(|| {
            Error::invalid(
                "expression",
                "has no array (a scalar alone has no device or shape)",
            )
        })?;
        for l in &self.leaves {
            same_device("expression", first, l)?;
        }
        self.node.check(T::KIND, T::RUST_NAME)?;
        if self.leaves.len() > MAX_LEAVES {
            return Err(Error::invalid(
                "expression",
                format!(
                    "uses {} distinct arrays; at most {MAX_LEAVES} fit one kernel (evaluate part \
                     of it first)",
                    self.leaves.len()
                ),
            ));
        }
        Ok(first)
    }

    /// The vector kernel's modes for these leaves and output, or `None` (general kernel).
    fn vector_modes(
        &self,
        leaves: &[GpuArray<T>],
        out: &GpuArray<T>,
    ) -> Result<Option<Vec<LeafMode>>> {
        let v = 16 / std::mem::size_of::<T>();
        let aligned = |p: u64| p.is_multiple_of(16);
        if !out.is_contiguous() || !aligned(out.device_ptr()) {
            return Ok(None);
        }
        let mut modes = Vec::with_capacity(leaves.len());
        for l in leaves {
            let strides = l.strides_for("expression", &out.shape)?;
            match LeafMode::of(&out.shape, &strides, v) {
                Some(m) if !m.vector_loads() || aligned(l.device_ptr()) => modes.push(m),
                _ => return Ok(None),
            }
        }
        Ok(Some(modes))
    }

    fn launch(&self, leaves: &[GpuArray<T>], out: &GpuArray<T>) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        match self.vector_modes(leaves, out)? {
            Some(modes) => self.launch_vector(leaves, out, &modes),
            None => self.launch_general(leaves, out),
        }
    }

    fn launch_vector(
        &self,
        leaves: &[GpuArray<T>],
        out: &GpuArray<T>,
        modes: &[LeafMode],
    ) -> Result<()> {
        let n = out.len();
        let dev = out.dev.clone();
        let v = 16 / std::mem::size_of::<T>();
        let code = self.code();
        let loads = modes.iter().filter(|m| m.vector_loads()).count();
        let unroll = vector_unroll(
            loads,
            self.node.heavy(T::KIND != crate::dtype::DTypeKind::Float),
        );
        let tags: String = modes.iter().map(|m| m.tag()).collect();
        let id = format!(
            "gpukit-core/expr-v/{}/{tags}/{}/u{unroll}/{code}",
            T::NAME,
            self.scalars.len()
        );
        // SAFETY: the id spells the element type, the operand modes, the scalar count, the
        // unroll and the generated code (all the source depends on); no other crate registers
        // `gpukit-core/` ids.
        let kernel = unsafe {
            dev.kernel_set().kernel(&id, "gk_expr_v", || ProgramSpec {
                source: Cow::Owned(vector_source(
                    T::NAME,
                    &code,
                    modes,
                    self.scalars.len(),
                    unroll,
                )),
                program: Cow::Borrowed("gk_expr_v"),
                options: options(),
            })
        }?;
        let stream = dev.stream();
        let mut args: Vec<KernelArg> =
            Vec::with_capacity(leaves.len() + 2 * self.scalars.len() + 3);
        for l in leaves {
            l.used_on(&stream);
            args.push(l.arg());
        }
        out.used_on(&stream);
        args.push(out.arg());
        for s in &self.scalars {
            let (f, i) = s.scalar_args();
            args.push(f.into());
            args.push(i.into());
        }
        args.push((n as i64).into());
        let mut table = Vec::with_capacity(24 * modes.len().max(1));
        for m in modes {
            for w in m.divisors(v) {
                table.extend_from_slice(&w.to_le_bytes());
            }
        }
        if modes.is_empty() {
            table.extend_from_slice(&[0u8; 24]);
        }
        args.push(KernelArg::Bytes(table));
        kernels::launch(
            &kernel,
            &stream,
            kernels::grid_vec(&dev, n / v, unroll),
            &args,
        )
    }

    fn launch_general(&self, leaves: &[GpuArray<T>], out: &GpuArray<T>) -> Result<()> {
        let n = out.len();
        let dev = out.dev.clone();
        let code = self.code();
        let id = format!(
            "gpukit-core/expr/{}/{}/{}/{code}",
            T::NAME,
            leaves.len(),
            self.scalars.len()
        );
        // SAFETY: the id spells the element type, the operand counts and the generated code
        // (all the source depends on); no other crate registers `gpukit-core/` ids.
        let kernel = unsafe {
            dev.kernel_set().kernel(&id, "gk_expr", || ProgramSpec {
                source: Cow::Owned(general_source(
                    T::NAME,
                    &code,
                    leaves.len(),
                    self.scalars.len(),
                )),
                program: Cow::Borrowed("gk_expr"),
                options: options(),
            })
        }?;
        let stream = dev.stream();
        let mut strides = Vec::with_capacity(leaves.len() + 1);
        let mut contig = out.is_contiguous();
        let mut args: Vec<KernelArg> =
            Vec::with_capacity(leaves.len() + 2 * self.scalars.len() + 4);
        for l in leaves {
            contig &= l.shape == out.shape && l.is_contiguous();
            strides.push(l.strides_for("expression", &out.shape)?);
            l.used_on(&stream);
            args.push(l.arg());
        }
        strides.push(out.strides.clone());
        out.used_on(&stream);
        args.push(out.arg());
        for s in &self.scalars {
            let (f, i) = s.scalar_args();
            args.push(f.into());
            args.push(i.into());
        }
        args.push((n as i64).into());
        args.push((contig as i32).into());
        args.push(KernelArg::Bytes(shape::layout_bytes(
            "expression",
            &out.shape,
            &strides,
        )?));
        kernels::launch(&kernel, &stream, kernels::grid_for(&dev, n, 32), &args)
    }
}

/// `out = a OP b` through the expression's **vector kernel** when it reads `a`, `b` and `out`
/// (see [`LeafMode`]): the path of the named binary methods (`a.add(&b)`, `a.mul_into(..)`)
/// for the broadcasts their contiguous kernel does not take, so that they and the operators run
/// the same kernel. `Ok(false)` (nothing queued) when the vector kernel does not apply. Shapes,
/// devices and the operation's element type are the caller's to have checked; `out` distinct
/// from the inputs or identical to them, element for element.
pub(crate) fn write_binary_vector<T: DType>(
    op: BinaryOp,
    a: &GpuArray<T>,
    b: &GpuArray<T>,
    out: &GpuArray<T>,
) -> Result<bool> {
    let e = Expr::of(a).combine(op, Expr::of(b));
    match e.vector_modes(&e.leaves, out)? {
        Some(modes) if !out.is_empty() => {
            e.launch_vector(&e.leaves, out, &modes)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

macro_rules! unary_functions {
    ($($name:ident, $op:ident;)*) => {
        impl<T: DType> Expr<T> {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` of the expression (see [`UnaryOp`]).")]
                pub fn $name(self) -> Expr<T> {
                    self.unary(UnaryOp::$op)
                }
            )*
        }
    };
}

unary_functions! {
    abs, Abs; exp, Exp; log, Log; sqrt, Sqrt; tanh, Tanh; relu, Relu; sigmoid, Sigmoid;
    sin, Sin; cos, Cos; floor, Floor; ceil, Ceil; round, Round; trunc, Trunc;
    bitwise_not, BitNot; sign, Sign;
}

fn same_view<T: DType>(a: &GpuArray<T>, b: &GpuArray<T>) -> bool {
    a.device_ptr() == b.device_ptr()
        && a.shape == b.shape
        && a.strides == b.strides
        && a.dev == b.dev
}

/// Anything an operator accepts: arrays (owned or borrowed) and expressions.
pub trait IntoExpr<T: DType> {
    /// The expression.
    fn into_expr(self) -> Expr<T>;
}

impl<T: DType> IntoExpr<T> for Expr<T> {
    fn into_expr(self) -> Expr<T> {
        self
    }
}
impl<T: DType> IntoExpr<T> for &Expr<T> {
    fn into_expr(self) -> Expr<T> {
        self.clone()
    }
}
impl<T: DType> IntoExpr<T> for GpuArray<T> {
    fn into_expr(self) -> Expr<T> {
        Expr {
            node: Node::Leaf(0),
            leaves: vec![self],
            scalars: Vec::new(),
        }
    }
}
impl<T: DType> IntoExpr<T> for &GpuArray<T> {
    fn into_expr(self) -> Expr<T> {
        Expr::of(self)
    }
}

macro_rules! operators {
    ($($tr:ident, $m:ident, $op:ident;)*) => {$(
        // array / expression OP array / expression
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for Expr<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { self.combine(BinaryOp::$op, rhs.into_expr()) }
        }
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for &Expr<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { self.clone().combine(BinaryOp::$op, rhs.into_expr()) }
        }
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for GpuArray<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { self.into_expr().combine(BinaryOp::$op, rhs.into_expr()) }
        }
        impl<T: DType, R: IntoExpr<T>> std::ops::$tr<R> for &GpuArray<T> {
            type Output = Expr<T>;
            fn $m(self, rhs: R) -> Expr<T> { Expr::of(self).combine(BinaryOp::$op, rhs.into_expr()) }
        }
    )*};
}
operators! { Add, add, Add; Sub, sub, Sub; Mul, mul, Mul; Div, div, Div; }

/// Scalars on either side, for each element type.
macro_rules! scalar_types {
    ($($t:ty),*) => {$(
        impl IntoExpr<$t> for $t {
            fn into_expr(self) -> Expr<$t> { Expr::scalar(self) }
        }
        scalar_ops_only!($t, Add, add, Add);
        scalar_ops_only!($t, Sub, sub, Sub);
        scalar_ops_only!($t, Mul, mul, Mul);
        scalar_ops_only!($t, Div, div, Div);
    )*};
}
macro_rules! scalar_ops_only {
    ($t:ty, $tr:ident, $m:ident, $op:ident) => {
        impl std::ops::$tr<Expr<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: Expr<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(BinaryOp::$op, rhs)
            }
        }
        impl std::ops::$tr<&Expr<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: &Expr<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(BinaryOp::$op, rhs.clone())
            }
        }
        impl std::ops::$tr<GpuArray<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: GpuArray<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(BinaryOp::$op, rhs.into_expr())
            }
        }
        impl std::ops::$tr<&GpuArray<$t>> for $t {
            type Output = Expr<$t>;
            fn $m(self, rhs: &GpuArray<$t>) -> Expr<$t> {
                Expr::scalar(self).combine(BinaryOp::$op, Expr::of(rhs))
            }
        }
    };
}
scalar_types!(f32, f64, i32, u32, i64, u64, u8, half::f16, half::bf16);

impl<T: DType> std::ops::Neg for Expr<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        self.unary(UnaryOp::Neg)
    }
}
impl<T: DType> std::ops::Neg for &Expr<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        -self.clone()
    }
}
impl<T: DType> std::ops::Neg for &GpuArray<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        -Expr::of(self)
    }
}
impl<T: DType> std::ops::Neg for GpuArray<T> {
    type Output = Expr<T>;
    fn neg(self) -> Expr<T> {
        -self.into_expr()
    }
}

impl<T: DType> GpuArray<T> {
    /// This array as an expression (for building one explicitly; the operators do it for you).
    pub fn expr(&self) -> Expr<T> {
        Expr::of(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn leaf(i: usize) -> Node {
        Node::Leaf(i)
    }

    #[test]
    fn code_of_trees() {
        let n = Node::Bin(
            BinaryOp::Add,
            Box::new(Node::Bin(
                BinaryOp::Mul,
                Box::new(Node::Scalar(0)),
                Box::new(leaf(0)),
            )),
            Box::new(Node::Unary(
                UnaryOp::Neg,
                Box::new(Node::Bin(
                    BinaryOp::Div,
                    Box::new(leaf(1)),
                    Box::new(Node::Scalar(1)),
                )),
            )),
        );
        let mut s = String::new();
        n.write(&mut s);
        assert_eq!(
            s,
            "wrap_add(wrap_mul(s0, x0), gk_una<0>(gk_bin<3>(x1, s1)))"
        );
        // Shifting and remapping renumber the right operand.
        let r = Node::Bin(
            BinaryOp::Maximum,
            Box::new(leaf(0)),
            Box::new(Node::Unary(UnaryOp::Exp, Box::new(Node::Scalar(0)))),
        )
        .shift(2)
        .remap(&[3]);
        let mut s = String::new();
        r.write(&mut s);
        assert_eq!(s, "gk_bin<4>(x3, gk_una<2>(s2))");
        assert!(!r.heavy(false));
        assert!(Node::Unary(UnaryOp::Log, Box::new(leaf(0))).heavy(false));
        assert!(Node::Bin(BinaryOp::Pow, Box::new(leaf(0)), Box::new(leaf(1))).heavy(false));
        let div = Node::Bin(BinaryOp::Div, Box::new(leaf(0)), Box::new(leaf(1)));
        assert!(div.heavy(true) && !div.heavy(false));
    }

    #[test]
    fn operations_the_type_lacks_are_named() {
        use crate::dtype::DTypeKind;
        let e = Node::Unary(UnaryOp::Exp, Box::new(leaf(0)));
        assert!(e.check(DTypeKind::Float, "f32").is_ok());
        match e.check(DTypeKind::Signed, "i32") {
            Err(Error::UnsupportedDType { op, dtype }) => {
                assert_eq!((op.as_str(), dtype), ("exp", "i32"))
            }
            other => panic!("{other:?}"),
        }
        let b = Node::Bin(BinaryOp::BitAnd, Box::new(leaf(0)), Box::new(leaf(1)));
        assert!(b.check(DTypeKind::Unsigned, "u8").is_ok());
        assert!(matches!(
            Node::Unary(UnaryOp::Sqrt, Box::new(b)).check(DTypeKind::Float, "f32"),
            Err(Error::UnsupportedDType { .. })
        ));
    }

    /// Contiguous strides of a leaf of shape `leaf` broadcast to `out`.
    fn broadcast(leaf: &[usize], out: &[usize]) -> Vec<isize> {
        shape::broadcast_strides("test", leaf, &shape::contiguous_strides(leaf), out).unwrap()
    }

    #[test]
    fn the_usual_broadcasts_take_the_vector_kernel() {
        let m = |leaf: &[usize], out: &[usize], v| LeafMode::of(out, &broadcast(leaf, out), v);
        assert_eq!(m(&[8, 12], &[8, 12], 4), Some(LeafMode::Dense));
        assert_eq!(m(&[7], &[7], 4), Some(LeafMode::Dense));
        // A bias row over rows.
        assert_eq!(m(&[12], &[8, 12], 4), Some(LeafMode::Repeat { m: 12 }));
        assert_eq!(
            m(&[1, 12], &[3, 8, 12], 4),
            Some(LeafMode::Repeat { m: 12 })
        );
        // Not a whole number of vectors: the general kernel.
        assert_eq!(m(&[3], &[8, 3], 4), None);
        // A column over columns, a channel over [B, C, H].
        assert_eq!(
            m(&[8, 1], &[8, 12], 4),
            Some(LeafMode::Splat { d: 12, m: 8 })
        );
        assert_eq!(
            m(&[1, 5, 1], &[2, 5, 16], 8),
            Some(LeafMode::Splat { d: 16, m: 5 })
        );
        assert_eq!(m(&[8, 1], &[8, 6], 4), None);
        // One element.
        assert_eq!(m(&[1], &[8, 12], 4), Some(LeafMode::Const));
        assert_eq!(m(&[1, 1], &[1, 5], 2), Some(LeafMode::Const));
        // Two separate broadcast blocks ([R, 1, C] over [R, K, C]) or a transposed view.
        assert_eq!(m(&[4, 1, 8], &[4, 3, 8], 4), None);
        let t = shape::broadcast_strides("t", &[8, 4], &[1, 8], &[8, 4]).unwrap();
        assert_eq!(LeafMode::of(&[8, 4], &t, 4), None);
        // The vector count must stay below 2^31 where the kernel divides it.
        let big = [1usize << 31, 8];
        assert_eq!(m(&[8], &big, 4), None);
        assert_eq!(m(&big, &big, 4), Some(LeafMode::Dense));
        assert_eq!(m(&[1], &big, 4), Some(LeafMode::Const));
    }

    fn shapes() -> impl Strategy<Value = (Vec<usize>, Vec<bool>, usize, usize)> {
        (1usize..=4)
            .prop_flat_map(|nd| {
                (
                    prop::collection::vec(1usize..=6, nd),
                    prop::collection::vec(any::<bool>(), nd),
                    0..=nd,
                    prop::sample::select(vec![2usize, 4, 8, 16]),
                )
            })
            .prop_map(|(mut out, keep, drop, v)| {
                // Make the last dimension a multiple of the vector width often enough that the
                // repeated and splat modes are exercised.
                if let Some(l) = out.last_mut() {
                    if *l % 2 == 0 {
                        *l *= v;
                    }
                }
                (out, keep, drop, v)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        /// Every mode's index arithmetic (32-bit divisions on vectors, 64-bit on the tail)
        /// reads, for every output element, the element the strides name.
        #[test]
        fn leaf_modes_read_what_the_strides_name((out, keep, drop, v) in shapes()) {
            // The leaf: the output's shape with some dimensions broadcast (1) and `drop`
            // leading dimensions removed.
            let leaf: Vec<usize> = out
                .iter()
                .zip(&keep)
                .map(|(&d, &k)| if k { d } else { 1 })
                .skip(drop)
                .collect();
            let strides = broadcast(&leaf, &out);
            let n: usize = out.iter().product();
            if let Some(mode) = LeafMode::of(&out, &strides, v) {
                for e in 0..n {
                    let want = shape::layout_offsets_cpu(&out, std::slice::from_ref(&strides), e)[0];
                    prop_assert_eq!(mode.element(e, n, v) as isize, want, "{:?} e={}", mode, e);
                }
                if leaf == out && n > 1 {
                    prop_assert_eq!(mode, LeafMode::Dense);
                }
            } else {
                // A leaf of the output's own shape is always dense.
                prop_assert!(leaf != out, "{:?} fell back", leaf);
            }
        }
    }

    #[test]
    fn vector_source_reads_each_mode_as_documented() {
        let modes = [
            LeafMode::Dense,
            LeafMode::Repeat { m: 8 },
            LeafMode::Splat { d: 8, m: 3 },
            LeafMode::Const,
        ];
        let src = vector_source(
            "float",
            "wrap_add(wrap_mul(x0, x1), gk_bin<4>(x2, wrap_sub(x3, s0)))",
            &modes,
            1,
            2,
        );
        let sig = gpukit_jit::signature::parse_kernels(&src);
        assert_eq!(sig.len(), 1);
        assert_eq!(sig[0].name, "gk_expr_v");
        let kinds: Vec<String> = sig[0].params.iter().map(|p| p.ty.clone()).collect();
        assert_eq!(
            kinds,
            [
                "T*",
                "T*",
                "T*",
                "T*",
                "T*",
                "double",
                "long long",
                "long long",
                "GkDiv<4>"
            ]
        );
        assert!(src.contains("r.x0 = reinterpret_cast<const P*>(_gk_p_x0)[i];"));
        assert!(src.contains("_gk_d.w[1][2]"));
        assert!(src.contains("r.x2 = _gk_p_x2[q - gk_fdiv(q, _gk_d.w[2] + 3) * _gk_d.w[2][5]]"));
        assert!(src.contains("const C _gk_c3 = Cv<T>::up(_gk_p_x3[0]);"));
        assert!(src.contains("ew_loop<2>("));
        // The divisor table: six words per array, the modes' divisions.
        assert_eq!(LeafMode::Dense.divisors(4), [0; 6]);
        let r = LeafMode::Repeat { m: 12 }.divisors(4);
        assert_eq!(r[2], 3);
        let s = LeafMode::Splat { d: 16, m: 5 }.divisors(4);
        assert_eq!((s[2], s[5]), (4, 5));
        assert_eq!(vector_unroll(2, false), 4);
        assert_eq!(vector_unroll(5, false), 2);
        assert_eq!(vector_unroll(9, false), 1);
        assert_eq!(vector_unroll(1, true), 1);
    }
}
