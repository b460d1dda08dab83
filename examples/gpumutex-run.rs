//! `gpumutex-run`: run a command with exclusive use of GPU devices.
//!
//! ```text
//! gpumutex-run [--visible-devices D] [--num-devices N] [--lock-dir DIR] [--timeout SECS]
//!              [--backfill] [--status] -- CMD ARGS...
//! ```
//!
//! The whole program is [`gpukit::mutex::cli::main_with_args`] (options, exit codes, signals
//! and the subreaper are documented there); this binary only passes its arguments on and exits
//! with the code it returns.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = gpukit::mutex::cli::main_with_args(std::env::args_os());
    ExitCode::from(u8::try_from(code).unwrap_or(125))
}
