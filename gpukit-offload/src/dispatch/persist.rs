//! What a dispatcher leaves behind: its messages (once per process tree), the summary at exit,
//! and what it learned merged into the profile file.

use super::*;

/// Marks the configuration warnings a parent process printed (see
/// [`Dispatcher::report_warnings_once`]).
pub const WARNED_ENV: &str = "GPUKIT_OFFLOAD_WARNED";

/// Sets an environment variable.
///
/// # Safety
/// No other thread may read or write the environment at the same time.
pub(super) unsafe fn set_env(name: &str, value: &str) {
    // SAFETY: forwarded.
    unsafe { std::env::set_var(name, value) };
}

impl Dispatcher {
    /// Prints a message once per dispatcher (`gpukit-offload: ` is prepended).
    pub fn warn_once(&self, msg: &str) {
        let mut w = self.warned.lock();
        if w.iter().any(|m| m == msg) {
            return;
        }
        w.push(msg.to_string());
        drop(w);
        output::line(&format!("gpukit-offload: {msg}"));
    }

    /// Prints [`Dispatcher::warnings`] unless this process was started by a process that
    /// printed the same ones (the shim marks them in `GPUKIT_OFFLOAD_WARNED`, which child
    /// processes inherit), so a bad setting is named once per process tree.
    ///
    /// # Safety
    /// Sets an environment variable: no other thread may read or write the environment
    /// meanwhile (the shim calls it from its constructor, before the program's threads).
    pub unsafe fn report_warnings_once(&self) {
        if self.warnings.is_empty() {
            return;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&self.warnings, &mut h);
        let mark = format!("{:016x}", std::hash::Hasher::finish(&h));
        if std::env::var(WARNED_ENV).is_ok_and(|v| v == mark) {
            return;
        }
        for w in &self.warnings {
            self.warn_once(w);
        }
        // SAFETY: this function's contract (no concurrent use of the environment).
        unsafe { set_env(WARNED_ENV, &mark) };
    }

    /// Merges what this process learned into the profile file it loaded (see
    /// [`crate::profile::merge_learned`]): only a file that exists, only when persisting is on
    /// and the file was not corrupt. Returns the path written.
    pub fn save_learned(&self) -> Result<Option<PathBuf>> {
        if !self.config.persist || self.profile_error.is_some() || !self.learner.dirty() {
            return Ok(None);
        }
        let Some(path) = self.profile_path.clone() else {
            return Ok(None);
        };
        let learned = self.learner.learned();
        let wrote = crate::profile::merge_learned(&path, self.profile_created, &learned)?;
        self.learner.mark_saved();
        Ok(wrote.then_some(path))
    }

    /// The end-of-run work: prints the summary (per the log mode) and persists what was
    /// learned. Never panics; problems are printed.
    pub fn finish(&self) {
        // a start-up still running would race the exit (see settle_startup); it skips what is
        // left of its optional steps
        self.exiting.store(true, Relaxed);
        self.settle_startup(Duration::from_secs(10));
        self.load.leave_board();
        if self.config.log != LogMode::Off {
            for n in &self.notices {
                self.warn_once(n);
            }
            if self.is_forked_child() && self.stats().reason_count(Reason::Forked) > 0 {
                self.warn_once(
                    "this process is a fork() child of a process that had loaded CUDA, which a child cannot use: its calls that would pay on the GPU ran on the CPU (reason `forked`); start workers with spawn / forkserver to let them use the GPU",
                );
            }
            output::emit(&self.stats().summary());
        }
        if let Err(e) = self.save_learned() {
            output::line(&format!(
                "gpukit-offload: could not save what was learned: {e}"
            ));
        }
    }
}
