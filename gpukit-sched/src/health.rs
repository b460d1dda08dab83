//! The device context's health: after a *sticky* CUDA error (an illegal address, an illegal
//! instruction, a device-side assert, a trap, an uncorrectable ECC error ...) the context is
//! corrupted, every later call in it fails, and only a new process gets a working one. The
//! scheduler watches every error a task ends with (the closure's, and its own calls at the
//! task's end); at the first sticky one it marks itself unhealthy, naming the cause: queued
//! tasks fail and new submissions are refused with [`Error::Unhealthy`](crate::Error::Unhealthy)
//! instead of starting only to fail, and stats and metrics say so.

use cudarc::driver::sys::CUresult;
use cudarc::driver::DriverError;

/// Whether a driver error leaves the context unusable (CUDA marks these "sticky": the process
/// must be restarted).
pub(crate) fn is_sticky(r: CUresult) -> bool {
    matches!(
        r,
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_EXTERNAL_DEVICE
    )
}

/// The first sticky driver error in `e`'s chain of sources, if any.
pub(crate) fn sticky_error(e: &(dyn std::error::Error + 'static)) -> Option<DriverError> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(d) = err.downcast_ref::<DriverError>() {
            if is_sticky(d.0) {
                return Some(*d);
            }
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn sticky_errors_are_found_through_every_wrapper() {
        let illegal = DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        let direct = Error::Driver {
            call: "cuStreamSynchronize",
            action: "waiting".into(),
            source: illegal,
        };
        assert_eq!(sticky_error(&direct), Some(illegal));
        // gpukit-core's error inside ours (transparent), and a closure's own error around it.
        let core = Error::Core(gpukit_core::Error::Jit(gpukit_jit::Error::Driver {
            action: "launching".into(),
            source: illegal,
        }));
        assert_eq!(sticky_error(&core), Some(illegal));
        #[derive(Debug, thiserror::Error)]
        #[error("my task failed")]
        struct Mine(#[source] Error);
        let wrapped = Error::TaskFailed {
            task: "t".into(),
            source: Box::new(Mine(core)),
        };
        assert_eq!(sticky_error(&wrapped), Some(illegal));
        // Not sticky: out of memory, an invalid value.
        for r in [
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_NOT_READY,
        ] {
            let e = Error::Driver {
                call: "x",
                action: "y".into(),
                source: DriverError(r),
            };
            assert_eq!(sticky_error(&e), None, "{r:?}");
        }
        assert_eq!(sticky_error(&Error::NoDevice), None);
    }
}
