//! Compilation targets: `sm_80`, `sm_90`, `sm_90a`, ...

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// A GPU architecture to compile for, written like NVRTC's `sm_XY` / `sm_XYa`.
///
/// ```
/// use gpukit_jit::Arch;
/// let a: Arch = "sm_90a".parse().unwrap();
/// assert_eq!((a.major, a.minor, a.arch_specific), (9, 0, true));
/// assert_eq!(a.to_string(), "sm_90a");
/// assert!("sm90".parse::<Arch>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// Compute capability major version.
    pub major: u32,
    /// Compute capability minor version.
    pub minor: u32,
    /// The architecture-specific variant (`sm_90a`): needed for wgmma and setmaxnreg; the
    /// resulting code runs only on exactly this architecture.
    pub arch_specific: bool,
}

impl Arch {
    /// A plain `sm_{major}{minor}` target.
    pub const fn new(major: u32, minor: u32) -> Self {
        Arch {
            major,
            minor,
            arch_specific: false,
        }
    }

    /// The same architecture, arch-specific (`sm_90` -> `sm_90a`).
    pub const fn specific(self) -> Self {
        Arch {
            arch_specific: true,
            ..self
        }
    }

    /// NVRTC's option for a real target (CUBIN): `--gpu-architecture=sm_90a`.
    pub fn sm_option(&self) -> String {
        format!("--gpu-architecture={}", self)
    }

    /// NVRTC's option for a virtual target (PTX): `--gpu-architecture=compute_90a`.
    pub fn compute_option(&self) -> String {
        format!(
            "--gpu-architecture=compute_{}{}{}",
            self.major,
            self.minor,
            if self.arch_specific { "a" } else { "" }
        )
    }

    /// The architecture of an open CUDA context (`sm_90` on the H200).
    pub fn of_context(ctx: &cudarc::driver::CudaContext) -> Result<Self> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| Error::driver("reading the device's compute capability", e))?;
        Ok(Arch::new(major as u32, minor as u32))
    }

    /// The target to use for `source` on a device of this architecture: the arch-specific
    /// variant when the source uses Hopper-only instructions (`wgmma`, `setmaxnreg`) or asks
    /// for it through `__CUDA_ARCH_FEAT_SM90_ALL`-style feature macros.
    pub fn for_source(self, source: &str) -> Self {
        if self.major >= 9 && source_needs_arch_specific(source) {
            self.specific()
        } else {
            self
        }
    }
}

/// True when the source uses instructions that exist only on an arch-specific target.
pub fn source_needs_arch_specific(source: &str) -> bool {
    ["wgmma.", "setmaxnreg", "__CUDA_ARCH_FEAT_SM"]
        .iter()
        .any(|needle| source.contains(needle))
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sm_{}{}{}",
            self.major,
            self.minor,
            if self.arch_specific { "a" } else { "" }
        )
    }
}

impl FromStr for Arch {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason: &str| Error::invalid("GPU architecture", s, reason);
        let rest = s
            .strip_prefix("sm_")
            .or_else(|| s.strip_prefix("compute_"))
            .ok_or_else(|| bad("expected `sm_XY` or `sm_XYa`, e.g. `sm_80`, `sm_90a`"))?;
        let (digits, arch_specific) = match rest.strip_suffix('a') {
            Some(d) => (d, true),
            None => (rest, false),
        };
        if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(
                "expected two or three digits after `sm_`, e.g. `sm_90`",
            ));
        }
        let (maj, min) = digits.split_at(digits.len() - 1);
        let major: u32 = maj
            .parse()
            .map_err(|_| bad("major version is not a number"))?;
        let minor: u32 = min
            .parse()
            .map_err(|_| bad("minor version is not a number"))?;
        if major < 5 {
            return Err(bad(
                "architectures before sm_50 are not supported by NVRTC 13",
            ));
        }
        Ok(Arch {
            major,
            minor,
            arch_specific,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for s in ["sm_80", "sm_86", "sm_90", "sm_90a", "sm_100a", "sm_120"] {
            assert_eq!(s.parse::<Arch>().unwrap().to_string(), s);
        }
        assert_eq!("sm_100a".parse::<Arch>().unwrap().major, 10);
        for bad in ["", "sm_", "sm_9", "90", "sm_9x", "sm_30", "sm_90b"] {
            assert!(bad.parse::<Arch>().is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn hopper_only_sources_get_the_specific_target() {
        let h = Arch::new(9, 0);
        assert_eq!(h.for_source("wgmma.mma_async.sync").to_string(), "sm_90a");
        assert_eq!(h.for_source("mma.sync.aligned").to_string(), "sm_90");
        assert_eq!(Arch::new(8, 0).for_source("wgmma.").to_string(), "sm_80");
        assert_eq!(h.compute_option(), "--gpu-architecture=compute_90");
        assert_eq!(h.specific().sm_option(), "--gpu-architecture=sm_90a");
    }
}
