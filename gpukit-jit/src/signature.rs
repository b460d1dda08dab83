//! Kernel signatures parsed from CUDA C++ source, so that launches can be checked before they
//! reach the driver.
//!
//! The parser understands what kernels are usually written as: `extern "C" __global__ void
//! name(T* p, float a, int n)`, `__launch_bounds__` and `__cluster_dims__`, `const` /
//! `__restrict__` qualifiers, and
//! `template <typename T, int N> __global__ void name(...)` whose type parameters are bound from
//! a name expression (`name<float, 4>`). Parameters of other types (structs, unknown typedefs)
//! are recorded as [`ParamKind::Opaque`] and accept any by-value argument.

/// What one kernel parameter is, as far as launch checking is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamKind {
    /// A pointer (device memory) to elements of type `pointee` (as written, qualifiers removed:
    /// `float`, `__half`, `T` before a template is bound, `float*` for a pointer to pointers).
    Pointer {
        /// The pointed-to type.
        pointee: String,
        /// False when the pointee is `const` (`const float* x`, `float const* x`): the kernel
        /// only reads through it.
        writable: bool,
    },
    /// A floating-point scalar of this many bits (16 covers half and bfloat16).
    Float(u32),
    /// An integer (or bool) scalar of this many bits.
    Int(u32),
    /// A template type parameter not bound yet.
    Template(String),
    /// A type the parser cannot classify (a struct passed by value, a typedef).
    Opaque(String),
}

/// One parameter of a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The parameter's name in the source.
    pub name: String,
    /// Its type as written, qualifiers removed.
    pub ty: String,
    /// Its classification.
    pub kind: ParamKind,
}

/// A `__global__` function found in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSignature {
    /// The function name as written.
    pub name: String,
    /// Declared `extern "C"` (its symbol is its name).
    pub extern_c: bool,
    /// Template type parameter names, in order (empty when not a template).
    pub template_params: Vec<TemplateParam>,
    /// The parameters.
    pub params: Vec<Param>,
    /// Declared inside a preprocessor conditional (`#if`, `#ifdef`, ... other than an include
    /// guard) or a macro definition: whether it is compiled, and as written, is the
    /// preprocessor's decision, which the parser does not make. Launch checks do not rely on
    /// such a declaration.
    pub conditional: bool,
}

/// One template parameter of a kernel template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateParam {
    /// Its name.
    pub name: String,
    /// True for `typename T` / `class T`, false for values (`int N`).
    pub is_type: bool,
}

impl KernelSignature {
    /// Binds template type parameters from a name expression such as `scale<float, 4>` and
    /// returns the concrete signature. Non-template kernels are returned unchanged.
    pub fn instantiate(&self, name_expression: &str) -> KernelSignature {
        let args = match (name_expression.find('<'), name_expression.rfind('>')) {
            (Some(open), Some(close)) if close > open => {
                split_top_level(&name_expression[open + 1..close], ',')
            }
            _ => Vec::new(),
        };
        let mut out = self.clone();
        for p in &mut out.params {
            if let ParamKind::Template(t) = &p.kind {
                let idx = self.template_params.iter().position(|tp| &tp.name == t);
                if let Some(arg) = idx.and_then(|i| args.get(i)) {
                    p.ty = replace_word(&p.ty, t, arg.trim());
                    p.kind = classify(arg.trim());
                }
            } else if let ParamKind::Pointer { pointee, .. } = &mut p.kind {
                for (tp, arg) in self.template_params.iter().zip(&args) {
                    if tp.is_type {
                        *pointee = replace_word(pointee, &tp.name, arg.trim());
                        p.ty = replace_word(&p.ty, &tp.name, arg.trim());
                    }
                }
            }
        }
        out
    }
}

/// Finds every `__global__` function in `source`.
///
/// ```
/// use gpukit_jit::signature::{parse_kernels, ParamKind};
/// let k = parse_kernels(r#"extern "C" __global__ void scale(float* x, float f, int n) {}"#);
/// assert_eq!(k[0].name, "scale");
/// assert_eq!(k[0].params[1].kind, ParamKind::Float(32));
/// ```
pub fn parse_kernels(source: &str) -> Vec<KernelSignature> {
    let src = strip_comments(source);
    let regions = preprocessor_regions(&src);
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(pos) = src[search..].find("__global__") {
        let at = search + pos;
        search = at + "__global__".len();
        if let Some(mut sig) = parse_one(&src, at) {
            sig.conditional = regions.iter().any(|r| r.contains(&at));
            out.push(sig);
        }
    }
    out
}

/// Byte ranges of `src` (comments stripped) whose compilation the preprocessor decides: the
/// bodies of `#if` / `#ifdef` / `#ifndef` blocks (an include guard, `#ifndef X` followed by
/// `#define X`, excepted) and macro definitions (with their continuation lines).
fn preprocessor_regions(src: &str) -> Vec<std::ops::Range<usize>> {
    let mut lines: Vec<(usize, &str)> = Vec::new();
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        lines.push((at, line));
        at += line.len();
    }
    let directive = |line: &str| -> Option<(String, String)> {
        let rest = line.trim_start().strip_prefix('#')?.trim_start();
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        let arg = rest[word.len()..].trim().to_string();
        Some((word, arg))
    };
    let mut regions = Vec::new();
    // Open conditionals: (start of the block's first line, include guard?).
    let mut open: Vec<(usize, bool)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (start, line) = lines[i];
        let end = start + line.len();
        match directive(line) {
            Some((w, arg)) if w == "if" || w == "ifdef" || w == "ifndef" => {
                let next = lines[i + 1..]
                    .iter()
                    .find(|(_, l)| !l.trim().is_empty())
                    .and_then(|(_, l)| directive(l));
                let guard = w == "ifndef"
                    && next.is_some_and(|(nw, na)| {
                        nw == "define" && na.split_whitespace().next() == Some(arg.as_str())
                    });
                open.push((end, guard));
            }
            Some((w, _)) if w == "endif" => {
                if let Some((from, guard)) = open.pop() {
                    if !guard {
                        regions.push(from..start);
                    }
                }
            }
            Some((w, _)) if w == "define" => {
                // A macro body, continued while lines end with a backslash.
                let mut j = i;
                while lines[j].1.trim_end().ends_with('\\') && j + 1 < lines.len() {
                    j += 1;
                }
                regions.push(start..lines[j].0 + lines[j].1.len());
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    for (from, guard) in open {
        if !guard {
            regions.push(from..src.len());
        }
    }
    regions
}

fn parse_one(src: &str, at: usize) -> Option<KernelSignature> {
    // The declaration's prefix: from the end of the previous statement or block.
    let prefix_start = src[..at].rfind([';', '}', '{']).map(|i| i + 1).unwrap_or(0);
    let prefix = &src[prefix_start..at];
    let extern_c = prefix.contains("extern \"C\"") || inside_extern_c_block(src, at);
    let template_params = prefix
        .find("template")
        .and_then(|t| {
            let rest = &prefix[t..];
            let open = rest.find('<')?;
            let close = matching(rest, open, '<', '>')?;
            Some(parse_template_params(&rest[open + 1..close]))
        })
        .unwrap_or_default();

    // After `__global__`: qualifiers, `__launch_bounds__(...)` / `__cluster_dims__(...)`, the
    // return type, the name, '('.
    let bytes = src.as_bytes();
    let mut i = at + "__global__".len();
    let mut last_ident = String::new();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() {
            return None;
        }
        let c = bytes[i] as char;
        if c == '(' {
            if last_ident == "__launch_bounds__" || last_ident == "__cluster_dims__" {
                i = matching(src, i, '(', ')')? + 1;
                last_ident.clear();
                continue;
            }
            break;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            last_ident = src[start..i].to_string();
        } else if c == ':' || c == '*' || c == '&' {
            i += 1;
        } else {
            return None;
        }
    }
    if last_ident.is_empty()
        || last_ident == "__launch_bounds__"
        || last_ident == "__cluster_dims__"
    {
        return None;
    }
    let close = matching(src, i, '(', ')')?;
    let type_names: Vec<&str> = template_params
        .iter()
        .filter(|p| p.is_type)
        .map(|p| p.name.as_str())
        .collect();
    let params = split_top_level(&src[i + 1..close], ',')
        .into_iter()
        .filter(|p| !p.trim().is_empty() && p.trim() != "void")
        .map(|p| parse_param(&p, &type_names))
        .collect();
    Some(KernelSignature {
        name: last_ident,
        extern_c,
        template_params,
        params,
        conditional: false,
    })
}

fn inside_extern_c_block(src: &str, at: usize) -> bool {
    // An `extern "C" {` whose block is still open at `at`.
    let mut search = 0;
    while let Some(p) = src[search..at].find("extern \"C\"") {
        let start = search + p;
        search = start + 10;
        let after = src[search..at].trim_start();
        if after.starts_with('{') {
            let open = at - after.len();
            match matching(src, open, '{', '}') {
                Some(close) if close > at => return true,
                None => return true,
                _ => {}
            }
        }
    }
    false
}

fn parse_template_params(list: &str) -> Vec<TemplateParam> {
    split_top_level(list, ',')
        .into_iter()
        .filter_map(|p| {
            let p = p.split('=').next()?.trim().to_string();
            let name = p.split_whitespace().last()?.to_string();
            let is_type = p.starts_with("typename") || p.starts_with("class");
            Some(TemplateParam { name, is_type })
        })
        .collect()
}

/// `text` with every whole-word occurrence of `word` replaced by `with`.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(word)
            && (i == 0 || !is_ident(bytes[i - 1]))
            && bytes.get(i + word.len()).is_none_or(|&b| !is_ident(b))
        {
            out.push_str(with);
            i += word.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The pointee of a pointer parameter written as `text` (name included): its type with
/// qualifiers removed and whether it may be written (no `const` before the first `*`).
fn pointee_of(text: &str, name: &str) -> (String, bool) {
    let (before, after) = match text.find(['*', '[', '&']) {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, ""),
    };
    let writable = !before.split_whitespace().any(|w| w == "const");
    let base: Vec<&str> = before
        .split_whitespace()
        .filter(|w| {
            !matches!(
                *w,
                "const" | "volatile" | "__restrict__" | "restrict" | "__restrict" | "struct"
            )
        })
        .collect();
    let mut pointee = if base.len() > 1 && base.last() == Some(&name) {
        // `float x[]`: the name comes before the bracket.
        base[..base.len() - 1].join(" ")
    } else {
        base.join(" ")
    };
    // Further levels of indirection belong to the pointee (`float** p` points to `float*`).
    for _ in 0..after.chars().filter(|&c| c == '*').count() {
        pointee.push('*');
    }
    (pointee, writable)
}

fn parse_param(text: &str, type_params: &[&str]) -> Param {
    let text = text.split('=').next().unwrap_or("").trim();
    let pointer = text.contains('*') || text.contains('&') || text.contains('[');
    let cleaned = text.replace(['*', '&'], " * ");
    let words: Vec<&str> = cleaned
        .split_whitespace()
        .filter(|w| {
            !matches!(
                *w,
                "const" | "volatile" | "__restrict__" | "restrict" | "__restrict" | "struct"
            )
        })
        .collect();
    let (name, ty_words) = match words.split_last() {
        Some((last, rest)) if !rest.is_empty() && *last != "*" => (last.to_string(), rest.to_vec()),
        _ => (String::new(), words.clone()),
    };
    let name = name.split('[').next().unwrap_or("").to_string();
    let ty = ty_words.join(" ").replace(" *", "*");
    let base: String = ty_words
        .iter()
        .filter(|w| **w != "*")
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let kind = if pointer {
        let (pointee, writable) = pointee_of(text, &name);
        ParamKind::Pointer { pointee, writable }
    } else if type_params.contains(&base.as_str()) {
        ParamKind::Template(base.clone())
    } else {
        classify(&base)
    };
    Param { name, ty, kind }
}

/// Classifies a scalar type name.
pub fn classify(ty: &str) -> ParamKind {
    let t = ty
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "volatile"))
        .collect::<Vec<_>>()
        .join(" ");
    let t = t.trim_start_matches("std::");
    match t {
        "float" => ParamKind::Float(32),
        "double" => ParamKind::Float(64),
        "half" | "__half" | "__nv_bfloat16" | "nv_bfloat16" => ParamKind::Float(16),
        "bool" | "char" | "signed char" | "unsigned char" | "int8_t" | "uint8_t" => {
            ParamKind::Int(8)
        }
        "short" | "unsigned short" | "short int" | "int16_t" | "uint16_t" => ParamKind::Int(16),
        "int" | "signed" | "signed int" | "unsigned" | "unsigned int" | "int32_t" | "uint32_t" => {
            ParamKind::Int(32)
        }
        "long"
        | "long int"
        | "unsigned long"
        | "long long"
        | "long long int"
        | "unsigned long long"
        | "unsigned long long int"
        | "int64_t"
        | "uint64_t"
        | "size_t"
        | "ptrdiff_t"
        | "intptr_t"
        | "uintptr_t" => ParamKind::Int(64),
        other => ParamKind::Opaque(other.to_string()),
    }
}

/// Index of the bracket that closes the one at `open`.
fn matching(s: &str, open: usize, o: char, c: char) -> Option<usize> {
    let mut depth = 0i32;
    for (i, ch) in s[open..].char_indices() {
        if ch == o {
            depth += 1;
        } else if ch == c {
            depth -= 1;
            if depth == 0 {
                return Some(open + i);
            }
        }
    }
    None
}

/// Splits on `sep` outside (), <>, [] and {}.
fn split_top_level(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '(' | '<' | '[' | '{' => depth += 1,
            ')' | '>' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if ch == sep && depth == 0 {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

/// Replaces comments with spaces (newlines kept, so line numbers stay right).
pub(crate) fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_str = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                    }
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_scale_kernel() {
        let src = r#"
            // a comment with __global__ in it
            extern "C" __global__
            void scale(float* x, float factor, int n) {
                int idx = blockIdx.x * blockDim.x + threadIdx.x;
                if (idx < n) x[idx] *= factor;
            }"#;
        let ks = parse_kernels(src);
        assert_eq!(ks.len(), 1);
        let k = &ks[0];
        assert!(k.extern_c);
        assert_eq!(k.name, "scale");
        let kinds: Vec<_> = k.params.iter().map(|p| p.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                ParamKind::Pointer {
                    pointee: "float".into(),
                    writable: true
                },
                ParamKind::Float(32),
                ParamKind::Int(32)
            ]
        );
        assert_eq!(k.params[2].name, "n");
    }

    #[test]
    fn qualifiers_launch_bounds_blocks_and_templates() {
        let src = r#"
            struct P { int a; };
            extern "C" {
              __global__ void __launch_bounds__(256, 2) a(const float* __restrict__ x, double* y, size_t n, P p) {}
            }
            template <typename T, int N>
            __global__ void axpy(T* y, const T* x, T alpha, unsigned long long n) {}
            __global__ void plain(void) {}
            template <int N>
            __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1) pair(float* x, int n) {}
        "#;
        let ks = parse_kernels(src);
        let names: Vec<_> = ks.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "axpy", "plain", "pair"]);
        assert_eq!(ks[3].params.len(), 2);
        assert_eq!(ks[3].params[1].kind, ParamKind::Int(32));
        assert!(ks[0].extern_c);
        assert!(!ks[1].extern_c);
        assert_eq!(ks[0].params[2].kind, ParamKind::Int(64));
        assert_eq!(ks[0].params[3].kind, ParamKind::Opaque("P".into()));
        assert_eq!(ks[1].params[2].kind, ParamKind::Template("T".into()));
        let inst = ks[1].instantiate("axpy<double, 4>");
        assert_eq!(inst.params[2].kind, ParamKind::Float(64));
        assert_eq!(
            inst.params[0].kind,
            ParamKind::Pointer {
                pointee: "double".into(),
                writable: true
            }
        );
        assert_eq!(
            inst.params[1].kind,
            ParamKind::Pointer {
                pointee: "double".into(),
                writable: false
            }
        );
        assert_eq!(inst.params[1].ty, "double*");
        assert!(ks[2].params.is_empty());
    }

    #[test]
    fn pointees_and_constness() {
        let src = r#"extern "C" __global__ void k(const float* __restrict__ a, float const* b,
            float* const c, __half* d, float** e, const unsigned int x[], long long* f) {}"#;
        let k = &parse_kernels(src)[0];
        let got: Vec<(String, bool)> = k
            .params
            .iter()
            .map(|p| match &p.kind {
                ParamKind::Pointer { pointee, writable } => (pointee.clone(), *writable),
                other => panic!("{} parsed as {other:?}", p.name),
            })
            .collect();
        let want = [
            ("float", false),
            ("float", false),
            ("float", true),
            ("__half", true),
            ("float*", true),
            ("unsigned int", false),
            ("long long", true),
        ];
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1), w);
        }
        let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "e", "x", "f"]);
    }
}
