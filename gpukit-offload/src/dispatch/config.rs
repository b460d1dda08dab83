//! The dispatcher's settings: [`Config`] and the environment variables it is read from.

use crate::cpu::CpuBackend;
use crate::error::Error;
use crate::gpu::Inject;
use crate::model::DEFAULT_LEVEL;
use crate::share::SharePolicy;
use gpukit_core::HostWait;
use std::path::PathBuf;

#[cfg(test)]
mod tests {
    use super::*;

    /// `offload run`'s eager start-up reaches the process it starts; its descendants start at
    /// their first call that pays on the GPU; an eager setting of the user's own (no parent
    /// named) applies everywhere.
    #[test]
    fn eager_start_is_for_the_root_process_only() {
        use StartPolicy::*;
        assert_eq!(start_for(Eager, Some("4242"), 4242), Eager);
        assert_eq!(start_for(Eager, Some("4242"), 5151), Lazy);
        assert_eq!(start_for(Eager, None, 5151), Eager);
        assert_eq!(start_for(Lazy, Some("4242"), 5151), Lazy);
        assert_eq!(start_for(Savings, Some("4242"), 4242), Savings);
        // an unreadable mark changes nothing
        assert_eq!(start_for(Eager, Some("x"), 5151), Eager);
    }
}

/// Whether the GPU may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuMode {
    /// Use the GPU when the model says it pays.
    Auto,
    /// Never use the GPU (calls are still timed and counted: this measures the CPU-only run).
    Off,
    /// Run every call the GPU backend supports on the GPU, whatever the model predicts (for
    /// measuring the GPU side and for tests); failures still fall back to the CPU.
    Always,
}

/// What is printed to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// Nothing.
    Off,
    /// One line per routine at exit.
    Summary,
    /// One line per timed call, and the summary at exit.
    Calls,
}

/// When CUDA is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPolicy {
    /// On a background thread at the process's first BLAS or LAPACK call, of any size
    /// (`offload run`'s default for the process it starts: the user asked for offload, and a
    /// one-shot program's heavy calls come early; a process that never calls the library, a
    /// shell running a script, starts nothing).
    Eager,
    /// On a background thread at the first call the model would send to the GPU.
    Lazy,
    /// On a background thread once the savings missed by calls kept on the CPU would have paid
    /// for the start-up (the library default: a program that never needs the GPU never pays).
    Savings,
}

impl StartPolicy {
    /// `eager`, `lazy` or `savings`.
    pub fn as_str(self) -> &'static str {
        match self {
            StartPolicy::Eager => "eager",
            StartPolicy::Lazy => "lazy",
            StartPolicy::Savings => "savings",
        }
    }
}

/// Set by `offload run` to its own process id: `eager` start-up applies to the process whose
/// parent that is, not to its descendants, which start `lazy` (see [`start_for`]).
pub const EAGER_PARENT_ENV: &str = "GPUKIT_OFFLOAD_EAGER_PARENT";

/// The start policy of a process with parent `ppid`, given the configured one and
/// [`EAGER_PARENT_ENV`]: `eager` stays eager only in the direct child of the named process (or
/// when nothing is named: the user asked for it everywhere); elsewhere it becomes `lazy`: a
/// descendant (a shell's command, a pool's worker) starts CUDA at its first call that pays on
/// the GPU, never for calls that do not. Not `savings`: a pool's worker then started CUDA
/// mid-life, after several calls, and scikit-learn's loky pool restarted it for the resident
/// memory that added (more than 300 MB over what it had after its first task; a CUDA start adds
/// about 300 MB, cuSOLVER 170 MB more). Issue 22's `n_jobs` program on an H100, three rounds
/// plain / savings / lazy (process seconds, 2026-12-06): 11.01 / 11.72 / 7.85, 8.73 / 9.00 /
/// 8.46, 8.65 / 9.43 / 7.08, one restart in every savings run and none with lazy.
pub fn start_for(configured: StartPolicy, eager_parent: Option<&str>, ppid: u32) -> StartPolicy {
    match (
        configured,
        eager_parent.and_then(|p| p.trim().parse::<u32>().ok()),
    ) {
        (StartPolicy::Eager, Some(root_parent)) if root_parent != ppid => StartPolicy::Lazy,
        (s, _) => s,
    }
}

/// Dispatcher settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Decision level 1..=10 (see [`crate::model::LEVEL_SPEEDUP`]).
    pub level: u8,
    /// GPU use.
    pub gpu: GpuMode,
    /// Logging.
    pub log: LogMode,
    /// Profile file (`None`: [`Profile::default_path`]).
    pub profile_path: Option<PathBuf>,
    /// Write learned corrections back into the profile file at exit / on [`Dispatcher::save_learned`].
    pub persist: bool,
    /// When CUDA starts.
    pub start: StartPolicy,
    /// A GPU failure injected into every GPU call (tests).
    pub inject: Inject,
    /// How this process's threads wait for the GPU (`GPUKIT_OFFLOAD_HOST_WAIT`): see
    /// [`crate::gpu::DEFAULT_HOST_WAIT`].
    pub host_wait: HostWait,
    /// Whether `offload run` shares one GPU among the program's processes through a private
    /// MPS daemon (`GPUKIT_OFFLOAD_SHARE`, `auto` or `off`; [`crate::share`]).
    pub share: SharePolicy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            level: DEFAULT_LEVEL,
            gpu: GpuMode::Auto,
            log: LogMode::Off,
            profile_path: None,
            persist: true,
            start: StartPolicy::Savings,
            inject: Inject::None,
            host_wait: crate::gpu::DEFAULT_HOST_WAIT,
            share: SharePolicy::Auto,
        }
    }
}

impl Config {
    /// Reads `GPUKIT_OFFLOAD_LEVEL` (1-10), `GPUKIT_OFFLOAD_GPU` (`auto`|`off`|`always`),
    /// `GPUKIT_OFFLOAD_LOG` (`off`|`summary`|`calls`), `GPUKIT_OFFLOAD_PROFILE` and
    /// `GPUKIT_OFFLOAD_PERSIST` (`1`|`0`), `GPUKIT_OFFLOAD_START`, `GPUKIT_OFFLOAD_HOST_WAIT`
    /// (`yield`|`block`|`spin`|`auto`), `GPUKIT_OFFLOAD_SHARE` (`auto`|`off`). A bad value keeps the default and yields a message.
    ///
    /// `eager` applies only to the process `offload run` started (whose parent is the one named
    /// by [`EAGER_PARENT_ENV`]): its descendants (shell scripts, worker pools, build tools) start
    /// CUDA by [`StartPolicy::Savings`], when their own calls pay for it.
    pub fn from_env() -> (Config, Vec<Error>) {
        let (mut c, errs) = Self::from_vars(|k| std::env::var(k).ok());
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() } as u32;
        c.start = start_for(
            c.start,
            std::env::var(EAGER_PARENT_ENV).ok().as_deref(),
            ppid,
        );
        (c, errs)
    }

    /// [`from_env`](Self::from_env) with a custom variable source (for tests and embedders).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> (Config, Vec<Error>) {
        let mut c = Config::default();
        let mut errs = Vec::new();
        let get = |k: &str| {
            var(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if let Some(v) = get("GPUKIT_OFFLOAD_LEVEL") {
            match v.parse::<u8>() {
                Ok(l) if (1..=10).contains(&l) => c.level = l,
                _ => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_LEVEL",
                    value: v,
                    msg: format!("must be an integer from 1 to 10; using {DEFAULT_LEVEL}"),
                }),
            }
        }
        if let Some(m) = choice(
            get("GPUKIT_OFFLOAD_GPU"),
            "GPUKIT_OFFLOAD_GPU",
            &[
                (&["auto", "on", "1"], GpuMode::Auto),
                (&["off", "0"], GpuMode::Off),
                (&["always"], GpuMode::Always),
            ],
            "must be auto, off or always; using auto",
            &mut errs,
        ) {
            c.gpu = m;
        }
        if let Some(m) = choice(
            get("GPUKIT_OFFLOAD_LOG"),
            "GPUKIT_OFFLOAD_LOG",
            &[
                (&["off", "none", "0"], LogMode::Off),
                (&["summary", "1"], LogMode::Summary),
                (&["calls", "debug"], LogMode::Calls),
            ],
            "must be summary, calls or off; using off",
            &mut errs,
        ) {
            c.log = m;
        }
        if let Some(v) = get("GPUKIT_OFFLOAD_PERSIST") {
            match v.as_str() {
                "1" | "on" | "yes" => c.persist = true,
                "0" | "off" | "no" => c.persist = false,
                _ => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_PERSIST",
                    value: v,
                    msg: "must be 1 or 0; using 1".into(),
                }),
            }
        }
        if let Some(p) = choice(
            get("GPUKIT_OFFLOAD_START"),
            "GPUKIT_OFFLOAD_START",
            &[
                (&["eager"], StartPolicy::Eager),
                (&["lazy"], StartPolicy::Lazy),
                (&["savings"], StartPolicy::Savings),
            ],
            "must be eager, lazy or savings; using savings",
            &mut errs,
        ) {
            c.start = p;
        }
        if let Some(v) = get("GPUKIT_OFFLOAD_INJECT_FAILURE") {
            match Inject::parse(&v) {
                Some(i) => c.inject = i,
                None => errs.push(Error::Config {
                    name: "GPUKIT_OFFLOAD_INJECT_FAILURE",
                    value: v,
                    msg: "must be oom, error, info or none (tests only); injecting nothing".into(),
                }),
            }
        }
        let fallback = format!(
            "must be yield, block, spin or auto; using {}",
            crate::gpu::host_wait_name(crate::gpu::DEFAULT_HOST_WAIT)
        );
        if let Some(w) = choice(
            get("GPUKIT_OFFLOAD_HOST_WAIT"),
            "GPUKIT_OFFLOAD_HOST_WAIT",
            &crate::gpu::HOST_WAIT_NAMES,
            &fallback,
            &mut errs,
        ) {
            c.host_wait = w;
        }
        if let Some(p) = choice(
            get("GPUKIT_OFFLOAD_SHARE"),
            "GPUKIT_OFFLOAD_SHARE",
            &[
                (&["auto", "on", "1"], SharePolicy::Auto),
                (&["off", "0", "no"], SharePolicy::Off),
            ],
            "must be auto or off; using auto",
            &mut errs,
        ) {
            c.share = p;
        }
        if let Some(v) = get(crate::cpu::CPU_LIB_ENV) {
            if let Err(e) = CpuBackend::open(&[v.as_str()]) {
                errs.push(Error::Config {
                    name: crate::cpu::CPU_LIB_ENV,
                    value: v,
                    msg: format!("{e}; the typed API and calibration refuse it, the shim runs the program's own library"),
                });
            }
        }
        c.profile_path = get(crate::profile::PROFILE_ENV).map(PathBuf::from);
        (c, errs)
    }
}

/// The option `value` (if set) names, case-insensitively, among `options`; an unknown value
/// is reported as `name=value: msg` and gives `None` (the default stays).
fn choice<T: Copy>(
    value: Option<String>,
    name: &'static str,
    options: &[(&[&str], T)],
    msg: &str,
    errs: &mut Vec<Error>,
) -> Option<T> {
    let v = value?;
    let lower = v.to_ascii_lowercase();
    let found = options
        .iter()
        .find(|(names, _)| names.contains(&lower.as_str()))
        .map(|(_, t)| *t);
    if found.is_none() {
        errs.push(Error::Config {
            name,
            value: v,
            msg: msg.into(),
        });
    }
    found
}
