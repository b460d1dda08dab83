//! Launch checks bind to the exact compiled function (issue 21: "a launch is checked against the
//! first kernel with the same bare name"): compiled with the real NVRTC, kernels of one name in
//! two namespaces, overloads, typedefs and `#if` branches each get the parameter types of the
//! function the module really contains. Runs here and in CI with NVRTC
//! (GPUKIT_REQUIRE_NVRTC=1 makes it fail instead of skipping when NVRTC is missing).

use gpukit_jit::signature::ParamKind;
use gpukit_jit::{compile, testing, Arch, CompileOptions};

const SOURCE: &str = r#"
struct __half { unsigned short bits; };
typedef double real;
#define ELEM float
namespace a { template <typename T> __global__ void k(T* x, int n) {} }
namespace b { template <typename T> __global__ void k(double* x, T n) {} }
namespace c { namespace d { struct P { int q; };
  template <typename T, int N> __global__ void k(const T* __restrict__ x, T* y, P p,
      unsigned long long n, const double* z, T** pp) {} } }
template <typename T> __global__ void over(T* x) {}
template <typename T> __global__ void over(T* x, real* y) {}
__global__ void typed(real* x, ELEM* y, const __half* h) {}
#if 1
template <typename T> __global__ void branch(double* x) {}
#else
template <typename T> __global__ void branch(float* x) {}
#endif
"#;

fn ptr(pointee: &str, writable: bool) -> ParamKind {
    ParamKind::Pointer {
        pointee: pointee.into(),
        writable,
    }
}

#[test]
fn every_instance_is_checked_against_the_function_the_module_contains() {
    if !testing::nvrtc("every_instance_is_checked_against_the_function_the_module_contains") {
        return;
    }
    let exprs = [
        "a::k<float>",
        "b::k<int>",
        "c::d::k<float, 4>",
        "(void(*)(int*, real*))over<int>",
        "&typed",
        "branch<int>",
    ];
    let mut opts = CompileOptions::new();
    for e in exprs {
        opts = opts.name_expression(e);
    }
    let m = compile(SOURCE, "sig", Arch::new(8, 0), &opts).expect("compiles");
    let kinds = |e: &str| -> Vec<ParamKind> {
        m.signature_for(e)
            .unwrap_or_else(|| panic!("{e}: no signature"))
            .params
            .into_iter()
            .map(|p| p.kind)
            .collect()
    };
    assert_eq!(
        kinds("a::k<float>"),
        [ptr("float", true), ParamKind::Int(32)]
    );
    // The first `k` of the source (a::k) bound to int would say int*: b::k writes doubles.
    assert_eq!(
        kinds("b::k<int>"),
        [ptr("double", true), ParamKind::Int(32)]
    );
    assert_eq!(
        kinds("c::d::k<float, 4>"),
        [
            ptr("float", false),
            ptr("float", true),
            ParamKind::Opaque("c::d::P".into()),
            ParamKind::Int(64),
            ptr("double", false),
            ptr("float*", true),
        ]
    );
    // The overload with two parameters, chosen by the cast.
    assert_eq!(
        kinds("(void(*)(int*, real*))over<int>"),
        [ptr("int", true), ptr("double", true)]
    );
    // Typedefs and macros are resolved by the compiler, not guessed by the parser.
    assert_eq!(
        kinds("&typed"),
        [
            ptr("double", true),
            ptr("float", true),
            ptr("__half", false)
        ]
    );
    // The branch the preprocessor kept.
    assert_eq!(kinds("branch<int>"), [ptr("double", true)]);
    // Names come from the matching declaration.
    let sig = m.signature_for("b::k<int>").unwrap();
    assert_eq!(sig.params[1].name, "n");
}

#[test]
fn extern_c_kernels_in_preprocessor_branches_are_not_launched_safely() {
    if !testing::nvrtc("extern_c_kernels_in_preprocessor_branches_are_not_launched_safely") {
        return;
    }
    let src = r#"
        #ifdef USE_DOUBLE
        extern "C" __global__ void scale(double* x, double f, int n) {}
        #else
        extern "C" __global__ void scale(float* x, float f, int n) {}
        #endif
        extern "C" __global__ void plain(float* x, int n) {}
    "#;
    let m = compile(
        src,
        "branches",
        Arch::new(8, 0),
        &CompileOptions::new().define("USE_DOUBLE", "1"),
    )
    .expect("compiles");
    assert_eq!(m.resolve("scale").unwrap(), "scale");
    assert!(
        m.signature_for("scale").is_none(),
        "which scale is compiled is unknown"
    );
    assert_eq!(m.signature_for("plain").unwrap().params.len(), 2);
}
