//! The workspace's GPU test gate, in one place.
//!
//! A test that needs a GPU starts with `if !gpukit_jit::testing::gpu("test name") { return; }`:
//! where there is no usable CUDA driver it prints why and returns (the test skips), unless
//! `GPUKIT_REQUIRE_GPU=1`, in which case it panics so the test fails. [`nvrtc`] does the same
//! for NVRTC with `GPUKIT_REQUIRE_NVRTC=1` (CI sets it and installs the NVRTC wheel), and
//! [`cublas`] for cuBLAS.
//!
//! Honest counts: libtest reports a test that returned early as `ok`, so every test binary
//! that skipped something prints one summary line when it exits, after libtest's own result
//! line:
//!
//! ```text
//! test result: ok. 12 passed; 0 failed; 0 ignored; ...
//! gpukit SKIPPED 9 of these tests (no CUDA driver with a GPU; set GPUKIT_REQUIRE_GPU=1 to fail instead): add_broadcasts, ...
//! ```
//!
//! so `passed` minus `SKIPPED` is what really ran. [`skipped`] returns the names for harnesses
//! that report differently.

use crate::libs;
use parking_lot::Mutex;
use std::sync::Once;

/// (reason, test) of every skip in this process.
static SKIPS: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());

fn required(var: &str) -> bool {
    matches!(
        std::env::var(var).as_deref().map(str::trim),
        Ok("1") | Ok("true") | Ok("yes")
    )
}

extern "C" fn print_summary() {
    // Runs from `exit`: never unwind across the C boundary.
    let _ = std::panic::catch_unwind(|| {
        if let Some(line) = summary() {
            use std::io::Write;
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{line}");
            let _ = err.flush();
        }
    });
}

/// The summary line printed at exit (`None` when nothing was skipped).
pub fn summary() -> Option<String> {
    format_summary(&SKIPS.lock())
}

fn format_summary(skips: &[(&'static str, String)]) -> Option<String> {
    if skips.is_empty() {
        return None;
    }
    let mut reasons: Vec<&str> = skips.iter().map(|(r, _)| *r).collect();
    reasons.sort_unstable();
    reasons.dedup();
    let names: Vec<&str> = skips.iter().map(|(_, n)| n.as_str()).collect();
    Some(format!(
        "gpukit SKIPPED {} of these tests ({}): {}",
        skips.len(),
        reasons.join("; "),
        names.join(", ")
    ))
}

/// Names of the tests skipped so far in this process.
pub fn skipped() -> Vec<String> {
    SKIPS.lock().iter().map(|(_, n)| n.clone()).collect()
}

fn record(test: &str, reason: &'static str) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // SAFETY: `print_summary` is an `extern "C" fn()` that catches every panic and only
        // writes to stderr; registering it has no other precondition.
        unsafe {
            libc::atexit(print_summary);
        }
    });
    // A test may ask more than once (per proptest case): count it once.
    let mut skips = SKIPS.lock();
    if !skips.iter().any(|(_, n)| n == test) {
        skips.push((reason, test.to_string()));
    }
}

fn gate(test: &str, available: bool, var: &str, what: &'static str) -> bool {
    if available {
        return true;
    }
    if required(var) {
        panic!("{test}: {what} is required ({var}=1) but not available on this machine");
    }
    eprintln!("SKIPPED {test}: {what} not available on this machine (set {var}=1 to fail instead)");
    record(test, reason_for(var));
    false
}

fn reason_for(var: &str) -> &'static str {
    match var {
        "GPUKIT_REQUIRE_NVRTC" => "no NVRTC; set GPUKIT_REQUIRE_NVRTC=1 to fail instead",
        _ => "no CUDA driver with a GPU; set GPUKIT_REQUIRE_GPU=1 to fail instead",
    }
}

/// Whether a GPU test may run here. Prints the skip reason, or panics under `GPUKIT_REQUIRE_GPU=1`.
pub fn gpu(test: &str) -> bool {
    gate(
        test,
        libs::gpu_available(),
        "GPUKIT_REQUIRE_GPU",
        "a CUDA driver with a GPU",
    )
}

/// Whether an NVRTC test may run here. Prints the skip reason, or panics under
/// `GPUKIT_REQUIRE_NVRTC=1`.
pub fn nvrtc(test: &str) -> bool {
    gate(
        test,
        libs::nvrtc_present(),
        "GPUKIT_REQUIRE_NVRTC",
        "NVRTC (libnvrtc)",
    )
}

/// Whether a test that needs cuBLAS on a GPU may run here (same rules as [`gpu`]).
pub fn cublas(test: &str) -> bool {
    gate(
        test,
        libs::gpu_available() && libs::cublas_present(),
        "GPUKIT_REQUIRE_GPU",
        "a CUDA driver with a GPU and cuBLAS",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_are_counted_and_named_in_one_line() {
        assert_eq!(format_summary(&[]), None);
        let skips = vec![
            (
                reason_for("GPUKIT_REQUIRE_GPU"),
                "add_broadcasts".to_string(),
            ),
            (reason_for("GPUKIT_REQUIRE_NVRTC"), "compiles".to_string()),
            (reason_for("GPUKIT_REQUIRE_GPU"), "sum_axis".to_string()),
        ];
        let line = format_summary(&skips).unwrap();
        assert!(
            line.starts_with("gpukit SKIPPED 3 of these tests ("),
            "{line}"
        );
        assert!(
            line.ends_with("): add_broadcasts, compiles, sum_axis"),
            "{line}"
        );
        assert!(
            line.contains("GPUKIT_REQUIRE_GPU=1") && line.contains("GPUKIT_REQUIRE_NVRTC=1"),
            "{line}"
        );
        // Each reason once.
        assert_eq!(line.matches("no CUDA driver").count(), 1, "{line}");
    }
}
