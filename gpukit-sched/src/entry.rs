//! Driver entry points the scheduler uses that older drivers lack, found *before* use.
//!
//! cudarc binds the CUDA 13.0 driver API and loads each function on its first call, panicking
//! when the installed driver does not export it. gpukit-sched therefore looks every optional
//! entry point up in the loaded driver library first (`dlsym`, the lookup cudarc itself does)
//! and only calls those that are there:
//!
//! | feature | entry points | driver |
//! | --- | --- | --- |
//! | green contexts | `cuDeviceGetDevResource`, `cuDevSmResourceSplitByCount`, `cuDevResourceGenerateDesc`, `cuGreenCtxCreate`, `cuGreenCtxDestroy`, `cuCtxFromGreenCtx`, `cuGreenCtxGetDevResource` | 12.4 |
//! | green-context streams | `cuGreenCtxStreamCreate` | 12.5 |
//! | event timing | `cuEventElapsedTime_v2` (else `cuEventElapsedTime`) | 12.8 (any) |
//!
//! Without green contexts the scheduler runs its pacing fallback and says why
//! ([`Scheduler::mechanism`](crate::Scheduler::mechanism)); without `_v2` timing it times
//! with the older entry point. The decision is pure ([`EntryPoints::detect`]) so it is tested
//! without a driver, including drivers that lack what this machine has.

use crate::error::{Error, Result};
use cudarc::driver::sys;
use std::collections::BTreeSet;

/// The green-context entry points of CUDA 12.4.
pub const GREEN_CONTEXT: [&str; 7] = [
    "cuDeviceGetDevResource",
    "cuDevSmResourceSplitByCount",
    "cuDevResourceGenerateDesc",
    "cuGreenCtxCreate",
    "cuGreenCtxDestroy",
    "cuCtxFromGreenCtx",
    "cuGreenCtxGetDevResource",
];
/// Streams in green contexts (CUDA 12.5).
pub const GREEN_STREAM: &str = "cuGreenCtxStreamCreate";
/// Event timing as the CUDA 13.0 bindings call it (CUDA 12.8).
pub const ELAPSED_V2: &str = "cuEventElapsedTime_v2";
/// Event timing of every driver before CUDA 13.
pub const ELAPSED_V1: &str = "cuEventElapsedTime";

/// Which symbols a driver library exports.
pub trait SymbolTable {
    /// Whether `name` can be called.
    fn has(&self, name: &str) -> bool;
}

/// The loaded CUDA driver (`libcuda`).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadedDriver;

impl SymbolTable for LoadedDriver {
    fn has(&self, name: &str) -> bool {
        if !gpukit_jit::libs::driver_present() {
            return false;
        }
        // SAFETY: the driver library can be loaded (checked above), so `culib` returns it
        // instead of panicking; looking a symbol up has no side effects, and the pointer is
        // not called here.
        unsafe {
            sys::culib()
                .get::<*const std::ffi::c_void>(name.as_bytes())
                .is_ok()
        }
    }
}

/// A driver that lacks some entry points: the loaded one, with `missing` hidden (for tests
/// and for the scheduler bench's missing-entry-point row).
#[derive(Debug, Clone, Default)]
pub struct Without<T> {
    /// The real table.
    pub inner: T,
    /// Names reported missing.
    pub missing: BTreeSet<String>,
}

impl<T: SymbolTable> SymbolTable for Without<T> {
    fn has(&self, name: &str) -> bool {
        !self.missing.contains(name) && self.inner.has(name)
    }
}

/// Which event-timing entry point to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// `cuEventElapsedTime_v2` (what cudarc and gpukit-core's events call).
    V2,
    /// `cuEventElapsedTime`, called through a pointer looked up by gpukit-sched.
    V1,
    /// Neither: no GPU timing (stats report none; the pacing fallback cannot measure).
    Missing,
}

/// What the installed driver offers the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPoints {
    /// `cuDriverGetVersion` (13000 for CUDA 13.0).
    pub driver_version: i32,
    /// `Ok` when green contexts (with streams) can be used, else why not.
    pub green: std::result::Result<(), String>,
    /// How events are timed.
    pub timing: Timing,
}

fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

impl EntryPoints {
    /// Decides from the driver's version and exported symbols.
    pub(crate) fn detect(driver_version: i32, table: &dyn SymbolTable) -> EntryPoints {
        let missing: Vec<&str> = GREEN_CONTEXT
            .iter()
            .copied()
            .chain([GREEN_STREAM])
            .filter(|n| !table.has(n))
            .collect();
        let green = if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the driver (CUDA {}) lacks {} (green contexts need CUDA 12.4, their streams 12.5)",
                version_text(driver_version),
                missing.join(", ")
            ))
        };
        let timing = if table.has(ELAPSED_V2) {
            Timing::V2
        } else if table.has(ELAPSED_V1) {
            Timing::V1
        } else {
            Timing::Missing
        };
        EntryPoints {
            driver_version,
            green,
            timing,
        }
    }

    /// Reads the loaded driver's version and symbols (`table`: [`LoadedDriver`], or a
    /// [`Without`] for simulations). [`Error::NoDevice`]-free: fails only when the driver
    /// cannot report its version.
    pub(crate) fn probe(table: &dyn SymbolTable) -> Result<EntryPoints> {
        if !gpukit_jit::libs::driver_present() {
            return Err(Error::Unsupported {
                what: "the CUDA driver".into(),
                reason: "libcuda could not be loaded".into(),
            });
        }
        let mut v = 0i32;
        // SAFETY: the driver library loads (checked above); cuDriverGetVersion exists in every
        // driver and writes one int to a valid out-pointer.
        let status = unsafe { sys::cuDriverGetVersion(&mut v) };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Driver {
                call: "cuDriverGetVersion",
                action: "reading the driver version".into(),
                source: cudarc::driver::DriverError(status),
            });
        }
        Ok(EntryPoints::detect(v, table))
    }

    /// Milliseconds from `start` to `end` (both recorded), with the entry point this driver
    /// has. Never waits: events whose work has not completed are an [`Error::Internal`]
    /// (callers ask only after they have seen them complete; the driver's timing call would
    /// wait for them, without a bound if a kernel before them never ends).
    pub(crate) fn elapsed_ms(
        &self,
        start: &gpukit_core::Event,
        end: &gpukit_core::Event,
    ) -> Result<f32> {
        if !(start.is_complete()? && end.is_complete()?) {
            return Err(Error::internal(
                "timing GPU work",
                "asked for the time between events that have not completed",
            ));
        }
        match self.timing {
            Timing::V2 => Ok(start.elapsed_ms(end)?),
            Timing::V1 => {
                start.synchronize()?;
                end.synchronize()?;
                type Elapsed =
                    unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;
                // SAFETY: `timing` is V1 only when the loaded driver exports this symbol
                // (checked in `detect`), with the CUDA 11/12 signature declared here.
                let f: Elapsed = unsafe {
                    *sys::culib()
                        .get::<Elapsed>(ELAPSED_V1.as_bytes())
                        .map_err(|e| Error::Unsupported {
                            what: "event timing".into(),
                            reason: e.to_string(),
                        })?
                };
                let mut ms = 0f32;
                // SAFETY: both events are live timing events (gpukit-core `Stream::record`)
                // that have completed; `ms` is a valid out-pointer.
                let status = unsafe { f(&mut ms, start.cuda().cu_event(), end.cuda().cu_event()) };
                if status == sys::CUresult::CUDA_SUCCESS {
                    Ok(ms)
                } else {
                    Err(Error::Driver {
                        call: "cuEventElapsedTime",
                        action: "timing a task".into(),
                        source: cudarc::driver::DriverError(status),
                    })
                }
            }
            Timing::Missing => Err(Error::Unsupported {
                what: "event timing".into(),
                reason: format!(
                    "the driver (CUDA {}) exports neither {ELAPSED_V2} nor {ELAPSED_V1}",
                    version_text(self.driver_version)
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Table(Vec<&'static str>);
    impl SymbolTable for Table {
        fn has(&self, name: &str) -> bool {
            self.0.contains(&name)
        }
    }

    fn all() -> Vec<&'static str> {
        let mut v: Vec<&str> = GREEN_CONTEXT.to_vec();
        v.extend([GREEN_STREAM, ELAPSED_V2, ELAPSED_V1]);
        v
    }

    #[test]
    fn a_13_0_driver_has_everything() {
        let e = EntryPoints::detect(13000, &Table(all()));
        assert_eq!((e.green.clone(), e.timing), (Ok(()), Timing::V2));
    }

    #[test]
    fn each_missing_entry_point_is_named() {
        for name in all() {
            let t = Table(all().into_iter().filter(|n| *n != name).collect());
            let e = EntryPoints::detect(12040, &t);
            if name == ELAPSED_V2 {
                assert_eq!((e.green.is_ok(), e.timing), (true, Timing::V1));
            } else if name == ELAPSED_V1 {
                assert_eq!((e.green.is_ok(), e.timing), (true, Timing::V2));
            } else {
                let why = e.green.expect_err(name);
                assert!(why.contains(name) && why.contains("12.4"), "{why}");
            }
        }
        let none = EntryPoints::detect(11080, &Table(Vec::new()));
        assert_eq!(none.timing, Timing::Missing);
        assert!(none.green.unwrap_err().contains("CUDA 11.8"));
    }

    #[test]
    fn without_hides_names() {
        let w = Without {
            inner: Table(all()),
            missing: [GREEN_STREAM.to_string()].into(),
        };
        assert!(!w.has(GREEN_STREAM) && w.has(ELAPSED_V2));
        assert!(EntryPoints::detect(13000, &w).green.is_err());
    }

    #[test]
    fn no_driver_here_is_an_error_not_a_panic() {
        if gpukit_jit::libs::driver_present() {
            return;
        }
        assert!(!LoadedDriver.has(ELAPSED_V2));
        assert!(matches!(
            EntryPoints::probe(&LoadedDriver),
            Err(Error::Unsupported { .. })
        ));
    }
}
