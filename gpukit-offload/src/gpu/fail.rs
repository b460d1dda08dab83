//! How a GPU attempt fails: [`GpuFail`], its kinds, the mapping of CUDA / cuBLAS / cuSOLVER
//! status codes onto them, and the failures tests inject ([`Inject`]).

use crate::stats::Reason;
use cudarc::cublas::sys as cb;
use cudarc::cusolver::sys as cs;
use cudarc::driver::sys as cu;

/// Why the GPU path failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuFailKind {
    /// Device or pinned memory exhausted.
    OutOfMemory,
    /// A CUDA / cuBLAS / cuSOLVER error, or a library that cannot be loaded.
    Error,
    /// The solver returned `info != 0` (singular, not positive definite, no convergence), or a
    /// result check LAPACK makes itself failed (an exactly zero pivot of a triangular factor).
    Info,
    /// An input the routine reads, or a result, holds NaN or infinity: LAPACK's own outcome for
    /// such data (an `info` code, NaN propagation, an error message) is what the caller gets,
    /// so the CPU library runs the call.
    NonFinite,
    /// Injected for testing.
    Injected,
    /// The device failed while results were being copied into the caller's buffers: some
    /// outputs are already written, so the call cannot be re-run on the CPU.
    Lost,
}

impl GpuFailKind {
    /// The statistics reason of the CPU run that follows this failure; `None` for
    /// [`GpuFailKind::Lost`], after which the CPU must not run the call (its in-place operands
    /// are partly overwritten).
    pub fn fallback_reason(self) -> Option<Reason> {
        match self {
            GpuFailKind::OutOfMemory => Some(Reason::FallbackOutOfMemory),
            GpuFailKind::Error => Some(Reason::FallbackError),
            GpuFailKind::Info => Some(Reason::FallbackInfo),
            GpuFailKind::NonFinite => Some(Reason::FallbackNonFinite),
            GpuFailKind::Injected => Some(Reason::FallbackInjected),
            GpuFailKind::Lost => None,
        }
    }
}

/// A failed GPU attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFail {
    /// The kind.
    pub kind: GpuFailKind,
    /// Details.
    pub detail: String,
}

impl std::fmt::Display for GpuFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.detail)
    }
}

/// Result of a GPU step.
pub type GResult<T> = Result<T, GpuFail>;

pub(crate) fn fail(kind: GpuFailKind, detail: impl Into<String>) -> GpuFail {
    GpuFail {
        kind,
        detail: detail.into(),
    }
}

pub(crate) fn cu_ok(r: cu::CUresult, what: &str) -> GResult<()> {
    match r {
        cu::CUresult::CUDA_SUCCESS => Ok(()),
        cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            Err(fail(GpuFailKind::OutOfMemory, what.to_string()))
        }
        e => Err(fail(GpuFailKind::Error, format!("{what}: {e:?}"))),
    }
}

pub(crate) fn cb_ok(r: cb::cublasStatus_t, what: &str) -> GResult<()> {
    match r {
        cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        cb::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED => {
            Err(fail(GpuFailKind::OutOfMemory, what.to_string()))
        }
        e => Err(fail(GpuFailKind::Error, format!("{what}: {e:?}"))),
    }
}

pub(crate) fn cs_ok(r: cs::cusolverStatus_t, what: &str) -> GResult<()> {
    match r {
        cs::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS => Ok(()),
        cs::cusolverStatus_t::CUSOLVER_STATUS_ALLOC_FAILED => {
            Err(fail(GpuFailKind::OutOfMemory, what.to_string()))
        }
        e => Err(fail(GpuFailKind::Error, format!("{what}: {e:?}"))),
    }
}

/// Failure injection points (tests): see [`crate::gpu::GpuBackend::set_inject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inject {
    /// No injection.
    None = 0,
    /// Pretend the device allocation failed.
    OutOfMemory = 1,
    /// Fail after every check passed, just before the caller's buffers are written.
    Error = 2,
    /// Pretend the solver returned `info = 1`.
    Info = 3,
    /// Fail the copy out after the first in-place operand was written ([`GpuFailKind::Lost`]).
    Lost = 4,
    /// Panic in the dispatcher's GPU start-up (before the backend starts; also where no driver
    /// is installed, so the start-up's panic handling can be tested anywhere).
    StartPanic = 5,
}

impl Inject {
    /// Parses `oom`, `error`, `info`, `lost`, `start-panic`, `none` or the empty string;
    /// anything else is `None`.
    pub fn parse(s: &str) -> Option<Inject> {
        match s.trim() {
            "oom" => Some(Inject::OutOfMemory),
            "error" => Some(Inject::Error),
            "info" => Some(Inject::Info),
            "lost" => Some(Inject::Lost),
            "start-panic" => Some(Inject::StartPanic),
            "" | "none" => Some(Inject::None),
            _ => None,
        }
    }

    pub(crate) fn from_u8(v: u8) -> Inject {
        match v {
            1 => Inject::OutOfMemory,
            2 => Inject::Error,
            3 => Inject::Info,
            4 => Inject::Lost,
            5 => Inject::StartPanic,
            _ => Inject::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_but_lost_lets_the_cpu_rerun() {
        for k in [
            GpuFailKind::OutOfMemory,
            GpuFailKind::Error,
            GpuFailKind::Info,
            GpuFailKind::NonFinite,
            GpuFailKind::Injected,
        ] {
            assert!(k.fallback_reason().is_some(), "{k:?}");
        }
        assert_eq!(GpuFailKind::Lost.fallback_reason(), None);
        assert_eq!(
            GpuFailKind::NonFinite.fallback_reason(),
            Some(Reason::FallbackNonFinite)
        );
    }

    #[test]
    fn inject_parses_and_round_trips() {
        for i in [
            Inject::None,
            Inject::OutOfMemory,
            Inject::Error,
            Inject::Info,
            Inject::Lost,
            Inject::StartPanic,
        ] {
            assert_eq!(Inject::from_u8(i as u8), i);
        }
        assert_eq!(Inject::parse(" oom "), Some(Inject::OutOfMemory));
        assert_eq!(Inject::parse("lost"), Some(Inject::Lost));
        assert_eq!(Inject::parse("start-panic"), Some(Inject::StartPanic));
        assert_eq!(Inject::parse(""), Some(Inject::None));
        assert_eq!(Inject::parse("garbage"), None);
    }

    #[test]
    fn status_codes_map_to_kinds() {
        assert!(cu_ok(cu::CUresult::CUDA_SUCCESS, "x").is_ok());
        assert_eq!(
            cu_ok(cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY, "alloc")
                .unwrap_err()
                .kind,
            GpuFailKind::OutOfMemory
        );
        let e = cb_ok(cb::cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE, "gemm").unwrap_err();
        assert_eq!(e.kind, GpuFailKind::Error);
        assert!(e.detail.contains("gemm"), "{e}");
        assert_eq!(
            cs_ok(cs::cusolverStatus_t::CUSOLVER_STATUS_ALLOC_FAILED, "ws")
                .unwrap_err()
                .kind,
            GpuFailKind::OutOfMemory
        );
    }
}
