//! Environment overrides of the kernel path: `GPUKIT_GEMM_TF32`, `GPUKIT_GEMM_FP32`,
//! `GPUKIT_GEMM_TMA` and `GPUKIT_GEMM_TAIL`.
//!
//! - `GPUKIT_GEMM_TF32` = `auto` (the default: the planner decides), `mma` (`mma.sync` kernels on
//!   any GPU) or `wgmma` (the Hopper kernels; an error on devices other than compute capability
//!   9.0).
//! - `GPUKIT_GEMM_FP32` = `auto` (the default: SIMT, or 3xTF32 where [`super::plan::fp32_prefers_tf32x3`]
//!   and the planner estimates it faster), `simt` (always the FP32 SIMT kernel) or `3xtf32`
//!   (always the Hopper 3xTF32 kernel; an error elsewhere).
//! - `GPUKIT_GEMM_TMA` = `auto` (the default: the `wgmma` TF32 kernel reads aligned operands in
//!   place through tensor maps) or `off` (both operands are always packed; an escape hatch should
//!   a driver mishandle tensor maps).
//! - `GPUKIT_GEMM_TAIL` = `auto` (the default: the autotuner may cut a persistent grid's last,
//!   partial wave along K, [`super::plan::Plan::tail`]) or `off` (whole tiles only; benches
//!   compare the two in one process).
//!
//! Any other value makes the affected calls fail with [`Error::InvalidArgument`] naming the
//! variable and the values it takes. The variables are read on every call (cheap), so a test or
//! a bench may switch them.

use crate::error::{Error, Result};

/// Name of the environment variable that forces the TF32 path.
pub const TF32_PATH_ENV: &str = "GPUKIT_GEMM_TF32";
/// Name of the environment variable that forces the FP32 path.
pub const FP32_PATH_ENV: &str = "GPUKIT_GEMM_FP32";
/// Name of the environment variable that turns the tensor-map A of the `wgmma` kernel off.
pub const TMA_ENV: &str = "GPUKIT_GEMM_TMA";
/// Name of the environment variable that turns the plans with a tail off.
pub const TAIL_ENV: &str = "GPUKIT_GEMM_TAIL";

/// Which kernel family runs a TF32 product on a device that has both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tf32Path {
    /// The planner chooses (`wgmma` only on compute capability 9.0).
    #[default]
    Auto,
    /// Always `mma.sync`.
    Mma,
    /// Always `wgmma`; an error on devices other than compute capability 9.0.
    Wgmma,
}

/// Which kernel family runs an FP32-accurate ([`super::Precision::Fp32`]) product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fp32Path {
    /// The planner chooses (3xTF32 only where it is the measured default).
    #[default]
    Auto,
    /// Always the FP32 SIMT kernel.
    Simt,
    /// Always the Hopper 3xTF32 kernel; an error on devices other than compute capability 9.0.
    Tf32x3,
}

impl Tf32Path {
    /// Parses `auto`, `mma` or `wgmma` (any case, surrounding blanks ignored); `None` otherwise.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(Tf32Path::Auto),
            "mma" => Some(Tf32Path::Mma),
            "wgmma" => Some(Tf32Path::Wgmma),
            _ => None,
        }
    }
}

impl Fp32Path {
    /// Parses `auto`, `simt` or `3xtf32` (any case, surrounding blanks ignored); `None` otherwise.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(Fp32Path::Auto),
            "simt" => Some(Fp32Path::Simt),
            "3xtf32" => Some(Fp32Path::Tf32x3),
            _ => None,
        }
    }
}

/// The forced paths of both precisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Paths {
    /// TF32 products.
    pub tf32: Tf32Path,
    /// FP32-accurate products.
    pub fp32: Fp32Path,
    /// Whether the `wgmma` TF32 kernel may read operands in place through tensor maps
    /// (`GPUKIT_GEMM_TMA`).
    pub tma: bool,
    /// Whether the device's tensor copies round f32 to TF32 (round to nearest even) for a tensor
    /// map of type TFLOAT32, so that the `wgmma` kernel's shared-memory operand can be read in
    /// place too. [`paths_from_env`] sets it to [`Paths::tma`]; [`super::launch`] clears it on
    /// devices whose probe ([`super::tma`]) shows no rounding.
    pub tma_rounding: bool,
    /// Whether plans may cut a persistent grid's last wave along K (`GPUKIT_GEMM_TAIL`).
    pub tail: bool,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            tf32: Tf32Path::Auto,
            fp32: Fp32Path::Auto,
            tma: true,
            tma_rounding: true,
            tail: true,
        }
    }
}

/// Parses `auto` / `on` (true) or `off` (false) for `GPUKIT_GEMM_TMA` and `GPUKIT_GEMM_TAIL`;
/// `None` otherwise.
pub fn parse_tma(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "auto" | "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

fn read<T>(var: &str, parse: fn(&str) -> Option<T>, values: &str) -> Result<Option<T>> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    v.to_str()
        .and_then(parse)
        .map(Some)
        .ok_or_else(|| Error::invalid("gemm", format!("{var} = {v:?} is not one of {values}")))
}

/// The TF32 path requested by `GPUKIT_GEMM_TF32` ([`Tf32Path::Auto`] when unset).
pub fn tf32_path_from_env() -> Result<Tf32Path> {
    Ok(read(TF32_PATH_ENV, Tf32Path::parse, "auto, mma, wgmma")?.unwrap_or_default())
}

/// The FP32 path requested by `GPUKIT_GEMM_FP32` ([`Fp32Path::Auto`] when unset).
pub fn fp32_path_from_env() -> Result<Fp32Path> {
    Ok(read(FP32_PATH_ENV, Fp32Path::parse, "auto, simt, 3xtf32")?.unwrap_or_default())
}

/// Every override from the environment.
pub fn paths_from_env() -> Result<Paths> {
    let tma = read(TMA_ENV, parse_tma, "auto, on, off")?.unwrap_or(true);
    Ok(Paths {
        tf32: tf32_path_from_env()?,
        fp32: fp32_path_from_env()?,
        tma,
        tma_rounding: tma,
        tail: read(TAIL_ENV, parse_tma, "auto, on, off")?.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_case_and_blank_insensitively() {
        for (s, want) in [
            ("auto", Some(Tf32Path::Auto)),
            ("", Some(Tf32Path::Auto)),
            ("MMA", Some(Tf32Path::Mma)),
            (" wgmma ", Some(Tf32Path::Wgmma)),
            ("tensor", None),
        ] {
            assert_eq!(Tf32Path::parse(s), want, "{s:?}");
        }
        for (s, want) in [
            ("auto", Some(Fp32Path::Auto)),
            ("SIMT", Some(Fp32Path::Simt)),
            (" 3xTF32", Some(Fp32Path::Tf32x3)),
            ("tf32", None),
        ] {
            assert_eq!(Fp32Path::parse(s), want, "{s:?}");
        }
        assert_eq!(parse_tma("OFF"), Some(false));
        assert_eq!(parse_tma(" auto"), Some(true));
        assert_eq!(parse_tma("no"), None);
        assert!(Paths::default().tma && Paths::default().tail);
    }
}
