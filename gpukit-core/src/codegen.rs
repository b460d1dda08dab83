//! CUDA source generation for elementwise and reduction kernels from an operation and typed
//! parameters: the one generator behind the fused operators ([`crate::Expr`]) and the user
//! kernels ([`crate::custom`]). Everything here is text: tested on the CPU, compiled by NVRTC in
//! the tests.
//!
//! Generated elementwise kernels take, in order: one pointer per array parameter (inputs
//! `const`), two values per scalar parameter (`double`, `long long`: floats travel as the
//! first, integers exactly as the second), the output element count, a `contig` flag (every
//! array dense in the output's order: the linear index addresses every operand) and a
//! `Layout<K>` of the operands' strides in the output's shape. In the operation, every
//! parameter name is a value of its compute type (float for f16 / bf16), outputs are assigned,
//! and `i` (the linear index) and `n` are available. The raw pointers carry a `_gk_` prefix
//! the operation does not need to see.

/// One parameter of a generated kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The name the operation uses.
    pub name: String,
    /// The element C type (`float`, `__half`, `long long`, ...).
    pub ctype: &'static str,
    /// Array or scalar, input or output.
    pub role: Role,
}

/// What a parameter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An input array (read through its strides, broadcast).
    In,
    /// An input scalar.
    Scalar,
    /// An output array.
    Out,
}

/// The C names of the element types, by the spellings parameter lists may use.
pub fn c_type(name: &str) -> Option<&'static str> {
    Some(match name {
        "f32" | "float32" | "float" => "float",
        "f64" | "float64" | "double" => "double",
        "f16" | "float16" | "half" | "__half" => "__half",
        "bf16" | "bfloat16" | "__nv_bfloat16" => "__nv_bfloat16",
        "i32" | "int32" | "int" => "int",
        "u32" | "uint32" | "unsigned int" | "uint" => "unsigned int",
        "i64" | "int64" | "long long" => "long long",
        "u64" | "uint64" | "unsigned long long" => "unsigned long long",
        "u8" | "uint8" | "unsigned char" | "bool" => "unsigned char",
        _ => return None,
    })
}

/// True for a valid C identifier that is not reserved by the generated code.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("_gk_")
        && !matches!(s, "i" | "n" | "contig")
}

/// Names a reduction's parameters may not take: `reduce_expr` and `post_map` read the two
/// operands as `a` and `b`.
pub const REDUCTION_OPERANDS: [&str; 2] = ["a", "b"];

fn array_params(params: &[Param]) -> Vec<&Param> {
    params.iter().filter(|p| p.role != Role::Scalar).collect()
}

/// The kernel's parameter list (see the module docs); `k` is the Layout's operand count.
fn signature(params: &[Param], extra: &str) -> String {
    let mut sig = Vec::new();
    for p in params.iter().filter(|p| p.role != Role::Scalar) {
        let q = if p.role == Role::In { "const " } else { "" };
        sig.push(format!("{q}{}* _gk_p_{}", p.ctype, p.name));
    }
    for p in params.iter().filter(|p| p.role == Role::Scalar) {
        sig.push(format!("double _gk_sf_{0}, long long _gk_si_{0}", p.name));
    }
    sig.push(extra.to_string());
    sig.join(", ")
}

/// Loads of inputs and scalars (as compute-type values) and declarations of outputs, for the
/// element at offsets `off`.
fn prologue(params: &[Param]) -> String {
    let mut s = String::new();
    for (k, p) in array_params(params).iter().enumerate() {
        match p.role {
            Role::In => s.push_str(&format!(
                "        const typename Cv<{t}>::C {n} = Cv<{t}>::up(_gk_p_{n}[_gk_off[{k}]]);\n",
                t = p.ctype,
                n = p.name
            )),
            Role::Out => s.push_str(&format!(
                "        typename Cv<{t}>::C {n} = (typename Cv<{t}>::C)0;\n",
                t = p.ctype,
                n = p.name
            )),
            Role::Scalar => {}
        }
    }
    for p in params.iter().filter(|p| p.role == Role::Scalar) {
        s.push_str(&format!(
            "        const typename Cv<{t}>::C {n} = scalar_arg<{t}>(_gk_sf_{n}, _gk_si_{n});\n",
            t = p.ctype,
            n = p.name
        ));
    }
    s
}

/// Integer-safe division for generated expressions (0 for an integer division by zero, as the
/// built-in `div`), and the preamble every generated source starts with.
pub const PREAMBLE: &str = r#"#include "common.cuh"
template <typename C> __device__ __forceinline__ C _gk_div(C a, C b) {
    if constexpr (Cv<C>::is_int) return b == (C)0 ? (C)0 : (C)(a / b);
    else return a / b;
}
"#;

/// An elementwise kernel named `name` running `operation` (C statements) for each element.
pub fn elementwise_source(name: &str, params: &[Param], operation: &str, preamble: &str) -> String {
    let k = array_params(params).len();
    let mut src = String::from(PREAMBLE);
    src.push_str(preamble);
    src.push('\n');
    src.push_str(&format!(
        "extern \"C\" __global__ void {name}({}) {{\n",
        signature(
            params,
            &format!("long long n, int contig, Layout<{k}> _gk_l")
        )
    ));
    src.push_str("    for (long long i = global_tid(); i < n; i += grid_threads()) {\n");
    src.push_str(&format!("        long long _gk_off[{k}];\n"));
    src.push_str(&format!(
        "        if (contig) {{ for (int _gk_k = 0; _gk_k < {k}; ++_gk_k) _gk_off[_gk_k] = i; }}\n"
    ));
    src.push_str(&format!(
        "        else layout_offsets<{k}>(_gk_l, i, _gk_off);\n"
    ));
    src.push_str(&prologue(params));
    src.push_str("        {\n");
    src.push_str(operation);
    src.push_str("\n        }\n");
    for (j, p) in array_params(params).iter().enumerate() {
        if p.role == Role::Out {
            src.push_str(&format!(
                "        _gk_p_{n}[_gk_off[{j}]] = Cv<{t}>::down((typename Cv<{t}>::C){n});\n",
                n = p.name,
                t = p.ctype
            ));
        }
    }
    src.push_str("    }\n}\n");
    src
}

/// A reduction kernel pair: `{name}` maps each element of `[outputs, R]` (through the layout of
/// the inputs permuted to kept axes first, reduced last) with `map_expr`, combines with
/// `reduce_expr` over `a` and `b` in `reduce_type`, and for each output applies `post_map`
/// (statements reading `a`, assigning the output parameter). With `splits > 1` each block
/// handles a chunk of R and writes its accumulator to `_gk_partial[o * splits + s]`, which
/// `{name}_combine` reduces.
#[allow(clippy::too_many_arguments)]
pub fn reduction_source(
    name: &str,
    params: &[Param],
    map_expr: &str,
    reduce_expr: &str,
    post_map: &str,
    identity: &str,
    reduce_type: &str,
    preamble: &str,
) -> String {
    let inputs: Vec<Param> = params
        .iter()
        .filter(|p| p.role != Role::Out)
        .cloned()
        .collect();
    let out = params.iter().find(|p| p.role == Role::Out);
    let (oname, otype) = out.map_or(("_gk_none", "float"), |p| (p.name.as_str(), p.ctype));
    let k = array_params(&inputs).len().max(1);
    let rt = reduce_type;
    let mut src = String::from(PREAMBLE);
    src.push_str(preamble);
    src.push('\n');
    // Block-wide combine through shared memory; the result is in thread 0.
    src.push_str(&format!(
        "__device__ __forceinline__ {rt} _gk_block_{name}({rt} v) {{
    __shared__ {rt} _gk_sh[256];
    _gk_sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {{
        if (threadIdx.x < s) {{ const {rt} a = _gk_sh[threadIdx.x], b = _gk_sh[threadIdx.x + s]; _gk_sh[threadIdx.x] = ({reduce_expr}); }}
        __syncthreads();
    }}
    const {rt} r = _gk_sh[0];
    __syncthreads();
    return r;
}}
"
    ));
    let finish = format!(
        "            typename Cv<{otype}>::C {oname} = (typename Cv<{otype}>::C)0;
            {{ const {rt} a = _gk_acc; {post_map}; }}
            _gk_out[_gk_o] = Cv<{otype}>::down((typename Cv<{otype}>::C){oname});\n"
    );
    src.push_str(&format!(
        "extern \"C\" __global__ void {name}({}) {{\n",
        signature(
            &inputs,
            &format!(
                "{otype}* _gk_out, {rt}* _gk_partial, long long _gk_outputs, long long _gk_R, \
                 long long _gk_chunk, int _gk_splits, int contig, Layout<{k}> _gk_l"
            )
        )
    ));
    src.push_str(&format!(
        "    const long long _gk_r0 = (long long)blockIdx.y * _gk_chunk;
    const long long _gk_r1 = _gk_r0 + _gk_chunk < _gk_R ? _gk_r0 + _gk_chunk : _gk_R;
    for (long long _gk_o = blockIdx.x; _gk_o < _gk_outputs; _gk_o += gridDim.x) {{
        {rt} _gk_acc = ({rt})({identity});
        for (long long _gk_r = _gk_r0 + threadIdx.x; _gk_r < _gk_r1; _gk_r += blockDim.x) {{
            const long long i = _gk_o * _gk_R + _gk_r;
            long long _gk_off[{k}];
            if (contig) {{ for (int _gk_k = 0; _gk_k < {k}; ++_gk_k) _gk_off[_gk_k] = i; }}
            else layout_offsets<{k}>(_gk_l, i, _gk_off);
"
    ));
    src.push_str(&prologue(&inputs).replace("        ", "            "));
    src.push_str(&format!(
        "            const {rt} b = ({rt})({map_expr});
            {{ const {rt} a = _gk_acc; _gk_acc = ({reduce_expr}); }}
        }}
        _gk_acc = _gk_block_{name}(_gk_acc);
        if (threadIdx.x == 0) {{
            if (_gk_splits > 1) _gk_partial[_gk_o * _gk_splits + blockIdx.y] = _gk_acc;
            else {{
{finish}            }}
        }}
    }}
}}
"
    ));
    src.push_str(&format!(
        "extern \"C\" __global__ void {name}_combine(const {rt}* _gk_partial, {otype}* _gk_out, long long _gk_outputs, int _gk_splits) {{
    for (long long _gk_o = blockIdx.x; _gk_o < _gk_outputs; _gk_o += gridDim.x) {{
        {rt} _gk_acc = ({rt})({identity});
        for (int s = threadIdx.x; s < _gk_splits; s += blockDim.x) {{
            const {rt} b = _gk_partial[_gk_o * _gk_splits + s];
            {{ const {rt} a = _gk_acc; _gk_acc = ({reduce_expr}); }}
        }}
        _gk_acc = _gk_block_{name}(_gk_acc);
        if (threadIdx.x == 0) {{
{finish}        }}
    }}
}}
"
    ));
    src
}

/// Parses a parameter list such as `"float32 x, T y"` into `(type, name)` pairs; `T`-like
/// placeholders (one upper-case identifier, not an element type) are returned as types too.
/// `reserved`: names the kernel's own code uses besides `i`, `n` and `contig`
/// ([`REDUCTION_OPERANDS`] for a reduction).
pub fn parse_params(list: &str, reserved: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let words: Vec<&str> = part.split_whitespace().collect();
        let (ty, name) = match words.as_slice() {
            [t, n] => (t.to_string(), n.to_string()),
            [t1, t2, n] => (format!("{t1} {t2}"), n.to_string()),
            [t1, t2, t3, n] => (format!("{t1} {t2} {t3}"), n.to_string()),
            _ => return Err(format!("`{part}` is not `<type> <name>`")),
        };
        if !is_identifier(&name) || reserved.contains(&name.as_str()) {
            let mut taken = vec!["`i`", "`n`", "`contig`"];
            let extra: Vec<String> = reserved.iter().map(|r| format!("`{r}`")).collect();
            taken.extend(extra.iter().map(String::as_str));
            return Err(format!(
                "`{name}` is not a usable parameter name (a C identifier, not {} or starting \
                 with `_gk_`)",
                taken.join(", ")
            ));
        }
        if c_type(&ty).is_none() && !is_placeholder(&ty) {
            return Err(format!(
                "`{ty}` is not an element type (f32 f64 f16 bf16 i32 u32 i64 u64 u8, or the \
                 NumPy / C spellings) or a type placeholder (an upper-case name such as T)"
            ));
        }
        if out.iter().any(|(_, n): &(String, String)| *n == name) {
            return Err(format!("parameter `{name}` is declared twice"));
        }
        out.push((ty, name));
    }
    Ok(out)
}

/// A type placeholder: an identifier starting with an upper-case letter.
pub fn is_placeholder(ty: &str) -> bool {
    ty.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && ty.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Vec<Param> {
        vec![
            Param {
                name: "x".into(),
                ctype: "float",
                role: Role::In,
            },
            Param {
                name: "y".into(),
                ctype: "__half",
                role: Role::In,
            },
            Param {
                name: "a".into(),
                ctype: "float",
                role: Role::Scalar,
            },
            Param {
                name: "z".into(),
                ctype: "float",
                role: Role::Out,
            },
        ]
    }

    #[test]
    fn elementwise_source_has_the_signature_the_launch_passes() {
        let src = elementwise_source("k", &params(), "z = a * x + y;", "");
        let sig = gpukit_jit::signature::parse_kernels(&src);
        assert_eq!(sig.len(), 1);
        let kinds: Vec<String> = sig[0].params.iter().map(|p| p.ty.clone()).collect();
        assert_eq!(
            kinds,
            [
                "float*",
                "__half*",
                "float*",
                "double",
                "long long",
                "long long",
                "int",
                "Layout<3>"
            ]
        );
        assert!(
            src.contains("const typename Cv<__half>::C y = Cv<__half>::up(_gk_p_y[_gk_off[1]]);")
        );
        assert!(src.contains("_gk_p_z[_gk_off[2]] = Cv<float>::down"));
    }

    #[test]
    fn reduction_source_has_both_kernels() {
        let p = vec![
            Param {
                name: "x".into(),
                ctype: "float",
                role: Role::In,
            },
            Param {
                name: "y".into(),
                ctype: "double",
                role: Role::Out,
            },
        ];
        let src = reduction_source("r", &p, "x * x", "a + b", "y = sqrt(a)", "0", "double", "");
        let sig = gpukit_jit::signature::parse_kernels(&src);
        let names: Vec<&str> = sig.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["r", "r_combine"]);
        assert_eq!(sig[0].params.len(), 1 + 8);
        assert_eq!(sig[1].params.len(), 4);
    }

    #[test]
    fn parameter_lists() {
        assert_eq!(
            parse_params("float32 x, T y, unsigned int n2", &[]).unwrap(),
            vec![
                ("float32".to_string(), "x".to_string()),
                ("T".to_string(), "y".to_string()),
                ("unsigned int".to_string(), "n2".to_string())
            ]
        );
        assert!(parse_params("float32", &[])
            .unwrap_err()
            .contains("<type> <name>"));
        assert!(parse_params("float32 i", &[])
            .unwrap_err()
            .contains("not a usable"));
        assert!(parse_params("quux x", &[])
            .unwrap_err()
            .contains("not an element type"));
        assert!(parse_params("f32 x, f32 x", &[])
            .unwrap_err()
            .contains("twice"));
        assert!(parse_params("", &[]).unwrap().is_empty());
        // `a` and `b` are a reduction's operands only: an elementwise kernel may use them.
        assert!(parse_params("T x, T a", &[]).is_ok());
        let e = parse_params("T x, T a", &REDUCTION_OPERANDS).unwrap_err();
        assert!(
            e.contains("`a` is not a usable") && e.contains("`b`"),
            "{e}"
        );
        assert_eq!(c_type("bfloat16"), Some("__nv_bfloat16"));
        assert!(is_placeholder("T") && is_placeholder("Acc") && !is_placeholder("float"));
    }
}
