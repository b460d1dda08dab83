//! The parameter types of a compiled kernel, read from its symbol.
//!
//! NVRTC gives every name expression (`ns::scale<float>`, `&plain`) its lowered name: the
//! symbol the module really contains, mangled by the Itanium C++ ABI, which spells out the
//! function's parameter types after the compiler resolved templates, typedefs, macros,
//! namespaces and `#if`s. Launch checks use those types ([`decode`]), so they describe exactly the
//! function that runs, never a same-named kernel elsewhere in the source.
//!
//! The decoder covers what kernel parameters are made of: builtin types, pointers, `const` /
//! `volatile` / `__restrict__`, class types (nested names, template arguments), template
//! parameters and substitutions. Anything else (function types, arrays, member pointers,
//! expressions in template arguments) makes it give up (`None`): the kernel then has no checked
//! signature and only launches through `launch_unchecked`.

use crate::signature::{classify, KernelSignature, Param, ParamKind};

/// A type as the mangling spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ty {
    /// A builtin type by its C name (`float`, `unsigned long long`, `void`).
    Builtin(&'static str),
    /// A class or enum, by its qualified name (template arguments included).
    Named(String),
    /// A pointer.
    Pointer(Box<Ty>),
    /// A reference (not allowed as a kernel parameter; decoded to refuse it).
    Reference(Box<Ty>),
    /// `const` (and `volatile` / `__restrict__`, which do not matter here) on a type.
    Qualified { konst: bool, inner: Box<Ty> },
}

impl Ty {
    fn is_const(&self) -> bool {
        matches!(self, Ty::Qualified { konst: true, .. })
    }

    fn unqualified(&self) -> &Ty {
        match self {
            Ty::Qualified { inner, .. } => inner.unqualified(),
            t => t,
        }
    }

    /// The C spelling, qualifiers dropped at this level (pointees keep theirs).
    fn c_name(&self) -> String {
        match self.unqualified() {
            Ty::Builtin(b) => b.to_string(),
            Ty::Named(n) => n.clone(),
            Ty::Pointer(p) => format!(
                "{}{}*",
                if p.is_const() { "const " } else { "" },
                p.c_name()
            ),
            Ty::Reference(r) => format!("{}&", r.c_name()),
            Ty::Qualified { .. } => unreachable!("unqualified"),
        }
    }

    fn param(&self) -> (String, ParamKind) {
        match self.unqualified() {
            Ty::Pointer(p) => {
                let pointee = p.c_name();
                (
                    self.c_name(),
                    ParamKind::Pointer {
                        pointee,
                        writable: !p.is_const(),
                    },
                )
            }
            Ty::Reference(_) => (self.c_name(), ParamKind::Opaque(self.c_name())),
            t => {
                let name = t.c_name();
                let kind = match t {
                    // `bool` is an 8-bit integer to launch checks; `long double`, `__int128` and
                    // friends are not matched by any scalar argument.
                    Ty::Builtin("bool") => ParamKind::Int(8),
                    _ => classify(&name),
                };
                (name, kind)
            }
        }
    }
}

/// A template argument: a type, or a value (`4`, or a parameter of the function template that
/// stands for one).
#[derive(Debug, Clone, PartialEq, Eq)]
enum TArg {
    Type(Ty),
    Value(String),
}

impl TArg {
    fn text(&self) -> String {
        match self {
            TArg::Type(t) => t.c_name(),
            TArg::Value(v) => v.clone(),
        }
    }
}

/// A decoded function symbol: its qualified name and parameter types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The name's components (`["ns", "scale"]`), template arguments not included.
    pub path: Vec<String>,
    /// `(type as C spells it, kind)` per parameter.
    pub params: Vec<(String, ParamKind)>,
}

impl Decoded {
    /// Whether the parsed declaration `parsed` (template arguments bound) has these parameter
    /// types.
    pub(crate) fn matches(&self, parsed: &KernelSignature) -> bool {
        parsed.params.len() == self.params.len()
            && parsed
                .params
                .iter()
                .zip(&self.params)
                .all(|(p, (_, k))| same_kind(&p.kind, k))
    }

    /// The signature to check launches against: these parameter types, with the parameter
    /// names of `named` (a declaration that [`matches`](Self::matches)); without one the names
    /// are empty (named arguments are then refused).
    pub(crate) fn signature(&self, named: Option<&KernelSignature>) -> KernelSignature {
        let named = named.filter(|n| self.matches(n));
        KernelSignature {
            name: self.path.last().cloned().unwrap_or_default(),
            extern_c: false,
            template_params: Vec::new(),
            params: self
                .params
                .iter()
                .enumerate()
                .map(|(i, (ty, kind))| Param {
                    name: named.map_or_else(String::new, |n| n.params[i].name.clone()),
                    ty: ty.clone(),
                    kind: kind.clone(),
                })
                .collect(),
            conditional: false,
        }
    }
}

/// Whether a parsed parameter and a decoded one are the same type for launch checks (pointees
/// compared by the element type they name when they name one).
fn same_kind(parsed: &ParamKind, decoded: &ParamKind) -> bool {
    use crate::typed::ElemType;
    match (parsed, decoded) {
        (
            ParamKind::Pointer {
                pointee: a,
                writable: wa,
            },
            ParamKind::Pointer {
                pointee: b,
                writable: wb,
            },
        ) => {
            // Pointees that name no element type (`typename Red<T, OP>::O`, structs) are
            // spelled differently by the parser and the mangling; safe launches refuse them
            // either way, so they agree for naming purposes.
            wa == wb
                && match (ElemType::from_c_name(a), ElemType::from_c_name(b)) {
                    (Some(x), Some(y)) => x == y,
                    (None, None) => true,
                    _ => false,
                }
        }
        (ParamKind::Opaque(_), ParamKind::Opaque(_)) => true,
        (a, b) => a == b,
    }
}

/// The qualified name and parameter types of the function symbol `symbol` (`_Z...`), or `None`
/// when it is not a mangled function name or uses something the decoder does not cover.
pub(crate) fn decode(symbol: &str) -> Option<Decoded> {
    let rest = symbol.strip_prefix("_Z")?;
    let mut d = Decoder {
        s: rest.as_bytes(),
        at: 0,
        subs: Vec::new(),
        template_args: Vec::new(),
    };
    let (path, templated) = d.function_name()?;
    if templated {
        // A function template's encoding spells its return type first.
        d.ty()?;
    }
    let mut params = Vec::new();
    while d.at < d.s.len() {
        if d.s[d.at] == b'.' {
            // A vendor suffix (`.clone` and the like) ends the encoding.
            break;
        }
        let t = d.ty()?;
        params.push(t);
    }
    // `f(void)` is spelled with a single `v`.
    if params.len() == 1 && params[0] == Ty::Builtin("void") {
        params.clear();
    }
    Some(Decoded {
        path,
        params: params.iter().map(Ty::param).collect(),
    })
}

struct Decoder<'a> {
    s: &'a [u8],
    at: usize,
    /// Substitution candidates in order (`S_`, `S0_`, ...).
    subs: Vec<Ty>,
    /// The function's template arguments (`T_`, `T0_`, ...).
    template_args: Vec<TArg>,
}

impl Decoder<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn number(&mut self) -> Option<usize> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        std::str::from_utf8(&self.s[start..self.at])
            .ok()?
            .parse()
            .ok()
    }

    fn source_name(&mut self) -> Option<String> {
        let len = self.number()?;
        let end = self.at.checked_add(len)?;
        let id = std::str::from_utf8(self.s.get(self.at..end)?).ok()?;
        self.at = end;
        Some(id.to_string())
    }

    /// `S_`, `S<seq-id>_` (base 36) and the abbreviations for `std`.
    fn substitution(&mut self) -> Option<Ty> {
        if !self.eat(b'S') {
            return None;
        }
        let c = self.peek()?;
        let std_abbrev = |n: &str| Some(Ty::Named(n.to_string()));
        match c {
            b'_' => {
                self.at += 1;
                self.subs.first().cloned()
            }
            b't' => {
                self.at += 1;
                std_abbrev("std")
            }
            b'a' | b'b' | b's' | b'i' | b'o' | b'd' => None,
            _ => {
                let mut id = 0usize;
                loop {
                    let c = self.peek()?;
                    self.at += 1;
                    let v = match c {
                        b'0'..=b'9' => (c - b'0') as usize,
                        b'A'..=b'Z' => (c - b'A') as usize + 10,
                        b'_' => break,
                        _ => return None,
                    };
                    id = id.checked_mul(36)?.checked_add(v)?;
                }
                self.subs.get(id.checked_add(1)?).cloned()
            }
        }
    }

    /// `T_`, `T<n>_`: the function's template argument it names.
    fn template_param(&mut self) -> Option<TArg> {
        if !self.eat(b'T') {
            return None;
        }
        let idx = if self.eat(b'_') {
            0
        } else {
            let n = self.number()?;
            if !self.eat(b'_') {
                return None;
            }
            n.checked_add(1)?
        };
        self.template_args.get(idx).cloned()
    }

    /// `I <arg>+ E`: the arguments as C text, and the arguments.
    fn template_args(&mut self) -> Option<(String, Vec<TArg>)> {
        if !self.eat(b'I') {
            return None;
        }
        let mut args = Vec::new();
        while !self.eat(b'E') {
            let arg = match self.peek()? {
                b'L' => {
                    // A literal: L <type> <value> E.
                    self.at += 1;
                    self.ty()?;
                    let neg = self.eat(b'n');
                    let v = self.number()?;
                    if !self.eat(b'E') {
                        return None;
                    }
                    TArg::Value(format!("{}{v}", if neg { "-" } else { "" }))
                }
                b'X' => {
                    // An expression: only a template parameter standing for a value
                    // (`Red<T, OP>` inside `reduce<T, OP>`'s parameter types).
                    self.at += 1;
                    if self.peek() != Some(b'T') {
                        return None;
                    }
                    let v = self.template_param()?;
                    if !self.eat(b'E') {
                        return None;
                    }
                    TArg::Value(v.text())
                }
                b'J' => return None,
                _ => TArg::Type(self.ty()?),
            };
            args.push(arg);
        }
        let text = args.iter().map(TArg::text).collect::<Vec<_>>().join(", ");
        Some((text, args))
    }

    /// The function's name: `N ... E`, or an unscoped name with optional template arguments.
    /// Returns its components and whether it is a template (then the template arguments are
    /// recorded for `T_`).
    fn function_name(&mut self) -> Option<(Vec<String>, bool)> {
        if self.eat(b'N') {
            self.cv_qualifiers();
            let (path, _, args) = self.nested(false)?;
            let templated = args.is_some();
            if let Some(a) = args {
                self.template_args = a;
            }
            return Some((path, templated));
        }
        let name = if self.s[self.at..].starts_with(b"St") {
            self.at += 2;
            format!("std::{}", self.source_name()?)
        } else {
            self.source_name()?
        };
        if self.peek() == Some(b'I') {
            self.subs.push(Ty::Named(name.clone()));
            let (_, args) = self.template_args()?;
            self.template_args = args;
            return Some((vec![name], true));
        }
        Some((vec![name], false))
    }

    fn cv_qualifiers(&mut self) -> bool {
        let mut konst = false;
        loop {
            match self.peek() {
                Some(b'r') | Some(b'V') => self.at += 1,
                Some(b'K') => {
                    self.at += 1;
                    konst = true;
                }
                _ => return konst,
            }
        }
    }

    /// The components of a nested name after `N` up to its `E`. Every prefix but the whole
    /// name is a substitution candidate; `as_type` adds the whole name too (a class type).
    /// Returns the components, the C text, and the last template arguments when the name ends
    /// with them.
    fn nested(&mut self, as_type: bool) -> Option<(Vec<String>, String, Option<Vec<TArg>>)> {
        let mut path: Vec<String> = Vec::new();
        let mut text = String::new();
        let mut last_args = None;
        loop {
            if self.eat(b'E') {
                break;
            }
            match self.peek()? {
                b'S' => {
                    let t = self.substitution()?;
                    let n = t.c_name();
                    path = n.split("::").map(str::to_string).collect();
                    text = n;
                    last_args = None;
                    // A substitution is not a new candidate.
                    continue;
                }
                b'T' => return None,
                b'I' => {
                    let (text_args, args) = self.template_args()?;
                    text = format!("{text}<{text_args}>");
                    last_args = Some(args);
                }
                b'0'..=b'9' => {
                    let id = self.source_name()?;
                    text = if text.is_empty() {
                        id.clone()
                    } else {
                        format!("{text}::{id}")
                    };
                    path.push(id);
                    last_args = None;
                }
                _ => return None,
            }
            if self.peek() != Some(b'E') || as_type {
                self.subs.push(Ty::Named(text.clone()));
            }
        }
        Some((path, text, last_args))
    }

    fn ty(&mut self) -> Option<Ty> {
        let c = self.peek()?;
        let builtin = |name: &'static str| Some(Ty::Builtin(name));
        let simple = match c {
            b'v' => builtin("void"),
            b'b' => builtin("bool"),
            b'c' => builtin("char"),
            b'a' => builtin("signed char"),
            b'h' => builtin("unsigned char"),
            b's' => builtin("short"),
            b't' => builtin("unsigned short"),
            b'i' => builtin("int"),
            b'j' => builtin("unsigned int"),
            b'l' => builtin("long"),
            b'm' => builtin("unsigned long"),
            b'x' => builtin("long long"),
            b'y' => builtin("unsigned long long"),
            b'n' => builtin("__int128"),
            b'o' => builtin("unsigned __int128"),
            b'f' => builtin("float"),
            b'd' => builtin("double"),
            b'e' => builtin("long double"),
            b'w' => builtin("wchar_t"),
            _ => None,
        };
        if let Some(t) = simple {
            self.at += 1;
            return Some(t);
        }
        let t = match c {
            b'r' | b'V' | b'K' => {
                let konst = self.cv_qualifiers();
                let inner = self.ty()?;
                let t = Ty::Qualified {
                    konst,
                    inner: Box::new(inner),
                };
                self.subs.push(t.clone());
                t
            }
            b'P' | b'R' | b'O' => {
                self.at += 1;
                let inner = Box::new(self.ty()?);
                let t = if c == b'P' {
                    Ty::Pointer(inner)
                } else {
                    Ty::Reference(inner)
                };
                self.subs.push(t.clone());
                t
            }
            b'D' => {
                self.at += 1;
                let t = match self.peek()? {
                    b'h' => Ty::Builtin("_Float16"),
                    b'n' => Ty::Builtin("decltype(nullptr)"),
                    _ => return None,
                };
                self.at += 1;
                t
            }
            b'N' => {
                self.at += 1;
                if self.cv_qualifiers() {
                    return None;
                }
                let (_, text, _) = self.nested(true)?;
                Ty::Named(text)
            }
            b'0'..=b'9' => {
                let name = self.source_name()?;
                let t = Ty::Named(name);
                self.subs.push(t.clone());
                self.template_id(t)?
            }
            b'S' if self.s[self.at..].starts_with(b"St") => {
                // `St <name>`: a name in `std`.
                self.at += 2;
                let t = Ty::Named(format!("std::{}", self.source_name()?));
                self.subs.push(t.clone());
                self.template_id(t)?
            }
            b'S' => {
                let t = self.substitution()?;
                self.template_id(t)?
            }
            b'T' => {
                let TArg::Type(t) = self.template_param()? else {
                    return None;
                };
                if self.peek() == Some(b'I') {
                    return None;
                }
                self.subs.push(t.clone());
                t
            }
            _ => return None,
        };
        Some(t)
    }

    /// `t` followed by template arguments when there are some (`std::complex<float>`): the
    /// template-id is a candidate of its own.
    fn template_id(&mut self, t: Ty) -> Option<Ty> {
        if self.peek() != Some(b'I') {
            return Some(t);
        }
        let (args, _) = self.template_args()?;
        let id = Ty::Named(format!("{}<{args}>", t.c_name()));
        self.subs.push(id.clone());
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(sym: &str) -> Vec<(String, ParamKind)> {
        decode(sym)
            .unwrap_or_else(|| panic!("{sym} not decoded"))
            .params
    }

    fn ptr(pointee: &str, writable: bool) -> ParamKind {
        ParamKind::Pointer {
            pointee: pointee.into(),
            writable,
        }
    }

    // The symbols below are NVRTC 13.0's lowered names of the name expressions in the comments,
    // for kernels declared as shown.

    #[test]
    fn namespaces_and_template_parameters() {
        // namespace a { template<typename T> __global__ void k(T* x, int n); }  a::k<float>
        let d = decode("_ZN1a1kIfEEvPT_i").unwrap();
        assert_eq!(d.path, ["a", "k"]);
        assert_eq!(
            d.params,
            [
                ("float*".into(), ptr("float", true)),
                ("int".into(), ParamKind::Int(32))
            ]
        );
        // namespace b { template<typename T> __global__ void k(double* x, T n); }  b::k<int>
        let d = decode("_ZN1b1kIiEEvPdT_").unwrap();
        assert_eq!(d.path, ["b", "k"]);
        assert_eq!(
            d.params.iter().map(|p| p.1.clone()).collect::<Vec<_>>(),
            [ptr("double", true), ParamKind::Int(32)]
        );
        // a::k<unsigned long long>
        assert_eq!(
            kinds("_ZN1a1kIyEEvPT_i")[0].1,
            ptr("unsigned long long", true)
        );
    }

    #[test]
    fn substitutions_qualifiers_and_class_types() {
        // namespace c { namespace d { struct P { int q; };
        //   template<typename T, int N> __global__ void k(const T* __restrict__ x, T* y, P p,
        //       unsigned long long n, const double* z, T** pp); } }       c::d::k<float, 4>
        let d = decode("_ZN1c1d1kIfLi4EEEvPKT_PS2_NS0_1PEyPKdPS5_").unwrap();
        assert_eq!(d.path, ["c", "d", "k"]);
        let k: Vec<ParamKind> = d.params.iter().map(|p| p.1.clone()).collect();
        assert_eq!(
            k,
            [
                ptr("float", false),
                ptr("float", true),
                ParamKind::Opaque("c::d::P".into()),
                ParamKind::Int(64),
                ptr("double", false),
                ptr("float*", true),
            ]
        );
        // namespace n1 { struct S {}; template<typename T> __global__ void ss(S* a, S* b, T* c,
        //     const S* d, const S* e); }                                   n1::ss<int>
        let k = kinds("_ZN2n12ssIiEEvPNS_1SES2_PT_PKS1_S6_");
        let k: Vec<ParamKind> = k.into_iter().map(|p| p.1).collect();
        assert_eq!(
            k,
            [
                ptr("n1::S", true),
                ptr("n1::S", true),
                ptr("int", true),
                ptr("n1::S", false),
                ptr("n1::S", false),
            ]
        );
        // template<typename T> __global__ void subst(T* a, T* b, const T* c, const T* d);
        let k = kinds("_Z5substIdEvPT_S1_PKS0_S3_");
        assert_eq!(k[1].1, ptr("double", true));
        assert_eq!(k[3].1, ptr("double", false));
        let k = kinds("_Z5substI6__halfEvPT_S2_PKS1_S4_");
        assert_eq!(k[1].1, ptr("__half", true));
        assert_eq!(k[3].1, ptr("__half", false));
    }

    #[test]
    fn every_builtin_and_16_bit_floats() {
        // template<typename T> __global__ void h(T* a, const T* b, __half* c, __nv_bfloat16* d,
        //     const __half* e, float f, long l, unsigned u, char ch, signed char sc,
        //     unsigned char uc, short s, bool bo, size_t sz, void* v, const void* cv);  h<float>
        let k: Vec<ParamKind> =
            kinds("_Z1hIfEvPT_PKS0_P6__halfP13__nv_bfloat16PKS4_fljcahsbmPvPKv")
                .into_iter()
                .map(|p| p.1)
                .collect();
        assert_eq!(
            k,
            [
                ptr("float", true),
                ptr("float", false),
                ptr("__half", true),
                ptr("__nv_bfloat16", true),
                ptr("__half", false),
                ParamKind::Float(32),
                ParamKind::Int(64),
                ParamKind::Int(32),
                ParamKind::Int(8),
                ParamKind::Int(8),
                ParamKind::Int(8),
                ParamKind::Int(16),
                ParamKind::Int(8),
                ParamKind::Int(64),
                ptr("void", true),
                ptr("void", false),
            ]
        );
        // The same kernel for T = __half: the template argument is a candidate too.
        let k = kinds("_Z1hI6__halfEvPT_PKS1_PS0_P13__nv_bfloat16PKS0_fljcahsbmPvPKv");
        assert_eq!(k[0].1, ptr("__half", true));
        assert_eq!(k[1].1, ptr("__half", false));
        assert_eq!(k[2].1, ptr("__half", true));
        assert_eq!(k[4].1, ptr("__half", false));
        assert_eq!(k[5].1, ParamKind::Float(32));
        // A non-template function by address: `&plain`, __global__ void plain(float*, int).
        let d = decode("_Z5plainPfi").unwrap();
        assert_eq!(d.path, ["plain"]);
        assert_eq!(d.params[0].1, ptr("float", true));
        assert!(decode("_Z4nonev").unwrap().params.is_empty());
    }

    #[test]
    fn dependent_member_types_and_value_parameters() {
        // template <typename T, int OP> __global__ void reduce_rows(const T* in, long long r,
        //     long long inner, typename Red<T, OP>::O* out, long long ddof, int g);
        //                                                          reduce_rows<float, 0>
        let k: Vec<ParamKind> = kinds("_Z11reduce_rowsIfLi0EEvPKT_xxPN3RedIS0_XT0_EE1OExi")
            .into_iter()
            .map(|p| p.1)
            .collect();
        assert_eq!(
            k,
            [
                ptr("float", false),
                ParamKind::Int(64),
                ParamKind::Int(64),
                ptr("Red<float, 0>::O", true),
                ParamKind::Int(64),
                ParamKind::Int(32),
            ]
        );
        // reduce_finish<double, 3>(const void*, int, typename Red<T, OP>::O*, long long, long long)
        let k = kinds("_Z13reduce_finishIdLi3EEvPKviPN3RedIT_XT0_EE1OExx");
        assert_eq!(k[0].1, ptr("void", false));
        assert_eq!(k[2].1, ptr("Red<double, 3>::O", true));
        assert_eq!(k[4].1, ParamKind::Int(64));
    }

    #[test]
    fn what_is_not_covered_is_refused_not_guessed() {
        assert!(decode("plain").is_none(), "not mangled");
        assert!(decode("_Z1kPFviE").is_none(), "function pointer parameter");
        assert!(decode("_Z1kA4_i").is_none(), "array type");
        assert!(
            decode("_Z1kIXadL_Z1gvEEEvv").is_none(),
            "expression argument"
        );
        assert!(
            decode("_Z1kPS0_").is_none(),
            "substitution that does not exist"
        );
        assert!(
            decode("_Z1kT_").is_none(),
            "template parameter of a non-template"
        );
        assert!(decode("_Z1k9toolong").is_none(), "truncated name");
    }
}
