//! The GEMM autotuner: a measured choice of plan on first use of a shape class, cached in memory
//! and on disk beside the kernel cache (as cuBLASLt's heuristics caches and autotuners do).
//!
//! The planner's model ([`super::plan`]) ranks every plan of a product by an estimate calibrated
//! on one H200; on shapes it was not calibrated on it can be wrong by more than the gap between
//! plans (issue 23: a non-square product with K of a few hundred ran at 0.75x cuBLAS on the
//! model's plan and at 0.89x on another of ours). So on the first product of a **shape class**
//! [`sgemm`](super::sgemm) times the model's best few candidates on the GPU and keeps the fastest:
//!
//! 1. **Class**: precision, M, N and K rounded up to a quarter octave ([`bucket`]: 1000 and 1024
//!    share a class, 1025 is the next), the batch likewise, the transposes, the tensor-map and
//!    sector alignment of A and B and the paths ([`Paths`]), on one device identity
//!    ([`DeviceKey`]: name, compute capability, SM count, driver and NVRTC versions) and one
//!    plan space ([`plan_space`]: a hash of [`PLAN_SPACE_VERSION`], every tile configuration,
//!    the split factors and the GEMM kernels' sources, so that a changed kernel never inherits a
//!    stale choice).
//! 2. **Candidates** ([`stage_one`], [`stage_two`]): the model's plan, then the model's best plan
//!    of every other tile configuration whose estimate is within [`WITHIN`] of the best, for
//!    the `wgmma` tiles one with P from registers and one with P from shared memory (at most
//!    [`STAGE_ONE`] in all); after they are timed, the neighbours (the split factors next to
//!    its own, sibling tiles in its operand layout, its other operand layouts) of the winner and
//!    of a runner-up within [`RUNNER_UP`] of it: at most [`STAGE_TWO`]; and when a plan of that
//!    second stage wins, its own sibling tiles ([`siblings`], at most [`SIBLINGS`]).
//! 3. **Checking and timing** ([`measure`]): each candidate first runs once untimed (kernel
//!    compile and load) into a scratch C filled with a signalling NaN, and elements at the
//!    corners and middles of C (first and last batch entry) are read back: a candidate that left
//!    one unwritten is never chosen (counted in [`TuneStats::unwritten_candidates`]; if it was
//!    the model's plan and nothing else ran, `sgemm` returns
//!    [`crate::Error::GemmUnwritten`] instead of running it). Then
//!    [`ROUNDS`] rounds, candidates interleaved, of `reps` runs (`reps` sized so a round lasts
//!    about [`ROUND_TARGET_US`], at most [`MAX_REPS`]) between CUDA events, each run after an L2
//!    flush where A, B and C fit in twice the L2 (so that the product's operands come from
//!    memory, as among other work); a candidate's time is its best round. The choice is the
//!    fastest candidate, the model's plan kept unless another is more than [`KEEP_MARGIN`]
//!    faster (noise never flips a choice). Before that choice, the finalists (the fastest
//!    candidates within [`FINAL_WITHIN`], at most [`FINALISTS`], the model's plan among them when
//!    within reach) are timed again ([`confirm`]): [`CONFIRM_ROUNDS`] rounds, each finalist in
//!    turn, the order rotated each round, and each finalist's time is then its median round, so
//!    that one lucky round among a few near-equal candidates does not decide. A candidate that
//!    fails to run (out of memory under a quota, for instance) is skipped.
//! 4. **Where it runs**: on the caller's stream, before the product itself, reading the caller's
//!    A and B (which the product reads anyway) and writing a scratch C from the device's
//!    allocator (charged to the current owner, returned in stream order; at the caller's C's
//!    offset within 16 bytes, so that the kernels' vector stores apply as for the product):
//!    never the caller's C. Products whose model estimate is above [`MAX_TUNED_US`] are not
//!    tuned (one timing round would cost as much as many products); nor is a product enqueued
//!    while the stream is being captured into a CUDA graph, or on a green context's stream (a
//!    share of the SMs: its timings would be stored for the whole device), or under a driver
//!    older than CUDA 12.8 (no `cuEventElapsedTime_v2`, which the CUDA 13 bindings call), nor
//!    one whose scratch C cannot be allocated: those take the model's plan.
//! 5. **Cost, bounded and reported**: at most `STAGE_ONE + STAGE_TWO + SIBLINGS` = 32
//!    candidates (the last two: the siblings of a second-stage winner) x (1 +
//!    ROUNDS x reps) runs, and `FINALISTS x CONFIRM_ROUNDS x reps` more (about 190 products of
//!    a 250 us shape: 48 ms; 111 of a 5 ms one), one host wait per candidate for its check and
//!    one per timed round. Kernels not yet in the
//!    kernel cache are compiled by their first run; those runs stop once the class has taken
//!    [`WARM_BUDGET`] of host time, and such a partial measurement is kept in this
//!    process only (not written), so that a later process, with those kernels cached, measures
//!    the class in full. [`stats`] counts classes, candidates, partial measurements, the host
//!    time spent and the longest class; `gemm_bench` prints them per shape.
//! 6. **Threads and processes**: one thread measures a class at a time ([`begin`]); others
//!    asking for it wait (at most [`CLAIM_WAIT`]) and then run its choice, so every caller of a
//!    process runs the same plan. Processes sharing the tuning directory take turns with an
//!    exclusive `flock` on it ([`lock_dir`], at most [`LOCK_WAIT`]), and one that waited reads
//!    what the other measured.
//! 7. **Disk**: one small text file per class under `<kernel cache dir>/gemm-tuning/` (the
//!    kernel cache's directory, `GPUKIT_CACHE_DIR`; none when `GPUKIT_CACHE=off`), handled with
//!    the kernel cache's trust rules through gpukit-trust: the directory is reached by the
//!    link-safe walk and used only if it and every directory above it is this user's or root's
//!    and not writable by others unless sticky ([`open_dir`]); a file is read only if it is a
//!    regular file (opened without following links or blocking) of this user, writable by nobody
//!    else, at most [`MAX_FILE_BYTES`] ([`trust::own_file_refusal`], [`read_file`]); files are
//!    written under an unpredictable temporary name, created exclusively, then renamed
//!    ([`write_file`]). What is read is data to validate: its header, full class key and
//!    checksum must match and its plan must be one of the current plan space that fits the
//!    product ([`Choice::plan_for`]), the
//!    launch checks the plan against the device and the operands again, and before a process
//!    first uses a choice read from disk it runs it once through the same write check as a
//!    measured candidate (on a scratch C; a plan that fails is dropped and the class measured
//!    anew); anything else is ignored (counted in [`TuneStats::rejected_files`]) and replaced by
//!    a fresh measurement. A file can at worst name a slower plan of ours, never an invalid one.
//!
//! `GPUKIT_GEMM_TUNE` ([`TUNE_ENV`]): `on` (the default; also `auto` or empty), `off` (the
//! model's plan always: deterministic, no timing, no files read or written) or `fresh` (ignore
//! the files, measure each class again once in this process and write the result: what
//! `gemm_bench` uses so that its column reflects a measurement of its own). Any other value is
//! an error naming the variable.
//!
//! The H200 failure of 2026-12-02 that kept tuning off by default was the test's, not the
//! tuner's: `autotuner_measures_a_class_once_and_its_choice_runs_correctly` checked that tuning
//! left the caller's C alone with `assert_eq!` on a `Vec<f32>` filled with the NaN poison, which
//! can never hold (NaN != NaN) and printed both vectors (the 4 MB of NaN in the log). The test
//! now compares bits, and checks every element of the tuned products.

use super::desc::Precision;
use super::kernels;
use super::path::Paths;
use super::plan::{self, config_by_name, Operands, Plan, Problem, Source, SPLIT_CANDIDATES};
use crate::attributes::DeviceAttributes;
use crate::error::{Error, Result};
use gpukit_trust as trust;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The environment variable that switches the autotuner.
pub const TUNE_ENV: &str = "GPUKIT_GEMM_TUNE";
/// Bumped when the meaning of a stored choice changes (part of [`plan_space`]).
pub const PLAN_SPACE_VERSION: u32 = 2;
/// Most candidates of the first stage.
pub const STAGE_ONE: usize = 22;
/// Most candidates of the first stage's first pass (one per tile and source of P): the rest of
/// [`STAGE_ONE`] is the second pass's (second-best split or tail choices), which a first pass
/// of every tile in reach would otherwise crowd out (3000^3 on an H100, with the 128x192 tile
/// added: 18 first-pass plans filled the stage, and the 128x256 tile's tail plan, the fastest
/// of the shape, was never timed).
pub const FIRST_PASS: usize = 18;
/// Most candidates of the second stage.
pub const STAGE_TWO: usize = 8;
/// Most sibling tiles (other configurations in the base's operand layout) per second-stage base.
pub const SIBLINGS: usize = 2;
/// Most finalists the confirmation stage ([`confirm`]) times again.
pub const FINALISTS: usize = 3;
/// Finalists: candidates whose time is within this fraction of the fastest.
pub const FINAL_WITHIN: f64 = 0.05;
/// Rounds of the confirmation stage (the finalists in turn, the order rotated each round).
pub const CONFIRM_ROUNDS: usize = 5;
/// The second stage also explores the first stage's runner-up when it is within this fraction
/// of the winner's time.
pub const RUNNER_UP: f64 = 0.10;
/// First-stage candidates: estimates within this factor of the best.
pub const WITHIN: f64 = 3.0;
/// Timed rounds per candidate.
pub const ROUNDS: usize = 2;
/// Target length of one timed round of one candidate (microseconds).
pub const ROUND_TARGET_US: f64 = 500.0;
/// Most back-to-back runs in one timed round.
pub const MAX_REPS: u32 = 8;
/// The model's plan stays unless another candidate is faster by more than this fraction.
pub const KEEP_MARGIN: f64 = 0.01;
/// Products estimated longer than this (microseconds) are not tuned.
pub const MAX_TUNED_US: f64 = 20_000.0;
/// Host time the measurement of one class may spend before its remaining untimed first runs are
/// skipped (they compile and load the kernels not in the kernel cache yet: about a second each
/// for the `wgmma` kernels, a few milliseconds each from the disk cache). Past it the remaining
/// candidates are not run (each stage's first one always is), and the choice is kept in this
/// process only (a later process, finding those kernels cached, measures the class in full).
pub const WARM_BUDGET: Duration = Duration::from_millis(1500);
/// Longest wait for another thread's measurement of the same class (then the model's plan runs
/// this once).
pub const CLAIM_WAIT: Duration = Duration::from_secs(30);
/// Longest wait for another process's measurement (see [`lock_dir`]).
pub const LOCK_WAIT: Duration = Duration::from_secs(5);
/// Largest tuning file read.
pub const MAX_FILE_BYTES: u64 = 4096;
/// Subdirectory of the kernel cache's directory that holds the tuning files.
pub const DIR_NAME: &str = "gemm-tuning";

/// What `GPUKIT_GEMM_TUNE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TuneMode {
    /// Measured choices, read from and written to disk (the default).
    #[default]
    On,
    /// The model's plan, always.
    Off,
    /// Measure each class again once in this process (files not read; results written).
    Fresh,
}

impl TuneMode {
    /// Parses `on` / `auto` (or nothing: the default), `off` or `fresh` (any case, blanks
    /// ignored); `None` otherwise.
    pub fn parse(s: &str) -> Option<TuneMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "on" | "auto" => Some(TuneMode::On),
            "off" => Some(TuneMode::Off),
            "fresh" => Some(TuneMode::Fresh),
            _ => None,
        }
    }

    /// The mode `GPUKIT_GEMM_TUNE` asks for ([`TuneMode::On`] when unset or empty).
    pub fn from_env() -> Result<TuneMode> {
        match std::env::var_os(TUNE_ENV) {
            None => Ok(TuneMode::On),
            Some(v) => v.to_str().and_then(TuneMode::parse).ok_or_else(|| {
                Error::invalid(
                    "gemm",
                    format!("{TUNE_ENV} = {v:?} is not one of on, auto, off, fresh"),
                )
            }),
        }
    }
}

/// `x` rounded up to the next quarter octave (`2^e`, `1.25 * 2^e`, `1.5 * 2^e`, `1.75 * 2^e`;
/// exact below 8): the dimension of a shape class.
pub fn bucket(x: u32) -> u32 {
    if x <= 8 {
        return x;
    }
    let e = 31 - x.leading_zeros(); // 2^e <= x < 2^(e+1)
    let base = 1u64 << e;
    for q in [4u64, 5, 6, 7, 8] {
        let b = base * q / 4;
        if b >= x as u64 {
            return b.min(u32::MAX as u64) as u32;
        }
    }
    u32::MAX
}

/// A 64-bit FNV-1a hash (file names and checksums: a garbled file must not pass, a forged one
/// can only name a plan of the current space).
pub fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The plan space's fingerprint: [`PLAN_SPACE_VERSION`], every tile configuration, the split
/// factors and the GEMM kernels' sources.
pub fn plan_space() -> u64 {
    static SPACE: OnceLock<u64> = OnceLock::new();
    *SPACE.get_or_init(|| {
        let mut text = format!("v{PLAN_SPACE_VERSION} {SPLIT_CANDIDATES:?}");
        for c in plan::all_configs() {
            text += &format!(" {c:?}");
        }
        for src in [
            kernels::COMMON_HEADER,
            kernels::WGMMA_OPS_HEADER,
            kernels::TF32_SOURCE,
            kernels::SGEMM_SOURCE,
            kernels::WGMMA_SOURCE,
            kernels::REDUCE_SOURCE,
        ] {
            text += &format!(" {:016x}", fnv64(src.as_bytes()));
        }
        fnv64(text.as_bytes())
    })
}

/// Who measured: the device and the software that built and ran the kernels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceKey {
    /// The device's name.
    pub name: String,
    /// Compute capability.
    pub compute_capability: (u32, u32),
    /// Multiprocessors.
    pub sms: u32,
    /// `cuDriverGetVersion`.
    pub driver: i32,
    /// NVRTC's version.
    pub nvrtc: (i32, i32),
}

impl DeviceKey {
    /// The key of a device with these attributes under this driver and NVRTC.
    pub fn new(attrs: &DeviceAttributes, driver: i32, nvrtc: (i32, i32)) -> DeviceKey {
        DeviceKey {
            name: attrs.name.clone(),
            compute_capability: attrs.compute_capability,
            sms: attrs.multiprocessor_count,
            driver,
            nvrtc,
        }
    }
}

/// A shape class: everything a stored choice is valid for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClassKey {
    /// The device and software.
    pub device: DeviceKey,
    /// The precision asked for.
    pub precision: Precision,
    /// The product's class: bucketed dimensions and batch, exact layout facts.
    pub problem: Problem,
    /// The paths in force.
    pub paths: Paths,
}

impl ClassKey {
    /// The class of `p` (dimensions and batch bucketed).
    pub fn new(device: DeviceKey, precision: Precision, p: &Problem, paths: &Paths) -> ClassKey {
        ClassKey {
            device,
            precision,
            problem: Problem {
                m: bucket(p.m),
                n: bucket(p.n),
                k: bucket(p.k),
                batch: bucket(p.batch),
                ..*p
            },
            paths: *paths,
        }
    }

    /// The key as one line of text (what a file must repeat exactly).
    pub fn text(&self) -> String {
        let d = &self.device;
        let p = &self.problem;
        let name: String = d
            .name
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        format!(
            "space={:016x} dev={name} cc={}.{} sms={} driver={} nvrtc={}.{} precision={:?} \
             m={} n={} k={} batch={} ta={} tb={} amap={} bmap={} asec={} bsec={} \
             paths={:?}/{:?}/{}/{}/{}",
            plan_space(),
            d.compute_capability.0,
            d.compute_capability.1,
            d.sms,
            d.driver,
            d.nvrtc.0,
            d.nvrtc.1,
            self.precision,
            p.m,
            p.n,
            p.k,
            p.batch,
            p.trans_a as u8,
            p.trans_b as u8,
            p.a_mappable as u8,
            p.b_mappable as u8,
            p.a_sectors as u8,
            p.b_sectors as u8,
            self.paths.tf32,
            self.paths.fp32,
            self.paths.tma as u8,
            self.paths.tma_rounding as u8,
            self.paths.tail as u8,
        )
    }

    /// The name of this class's file: a hash of [`ClassKey::text`].
    pub fn file_name(&self) -> String {
        format!("{:016x}.tune", fnv64(self.text().as_bytes()))
    }

    /// The file of this class in `dir`.
    pub fn file_in(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }
}

/// A measured choice, independent of the exact dimensions: materialised for each product of the
/// class by [`Choice::plan_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Choice {
    /// The tile configuration's name.
    pub config: &'static str,
    /// The split factor asked for (normalised per product).
    pub splits: u32,
    /// The `wgmma` operand layout.
    pub operands: Operands,
    /// A persistent grid where the product has more than one wave of work units.
    pub persistent: bool,
    /// The last wave's tiles cut along K ([`Plan::tail`]).
    pub tail: bool,
}

impl Choice {
    /// The choice a plan represents.
    pub fn of(plan: &Plan) -> Choice {
        Choice {
            config: plan.config.name,
            splits: plan.splits,
            operands: plan.operands,
            persistent: plan.max_blocks > 0,
            tail: plan.tail,
        }
    }

    /// The plan for product `p` under `precision` and `paths` on `dev`, or `None` when the choice
    /// is not a plan of the current plan space for it (an unknown configuration, a family the
    /// precision and paths do not use, a configuration that does not fit the device, a split
    /// factor the planner does not use, an operand layout the product's layout does not allow).
    pub fn plan_for(
        &self,
        precision: Precision,
        p: &Problem,
        dev: &DeviceAttributes,
        paths: &Paths,
    ) -> Option<Plan> {
        let config = config_by_name(self.config)?;
        if !plan::families(precision, p, dev, paths)
            .ok()?
            .contains(&config.family)
            || !SPLIT_CANDIDATES.contains(&self.splits)
            || (self.tail && !paths.tail)
            || !plan::config_operand_choices(&config, p, paths).contains(&self.operands)
        {
            return None;
        }
        let est = plan::estimate_with_tail(&config, p, self.splits, &self.operands, dev, self.tail);
        if !est.is_finite() {
            return None;
        }
        let (splits, k_per_split) = plan::normalize_split(&config, p.k, self.splits);
        Some(Plan {
            config,
            splits,
            k_per_split,
            operands: self.operands,
            max_blocks: if self.persistent {
                plan::persistent_blocks(&config, p, splits, &self.operands, dev)
            } else {
                0
            },
            tail: self.tail,
            estimate_us: est * 1e6,
        })
    }

    /// The file form: one line `choice <config> <splits> <swap> <p> <q_tma> <persistent> <tail>`.
    fn line(&self) -> String {
        format!(
            "choice {} {} {} {} {} {} {}",
            self.config,
            self.splits,
            self.operands.swap as u8,
            self.operands.p.code(),
            self.operands.q_tma as u8,
            self.persistent as u8,
            self.tail as u8
        )
    }

    fn parse(line: &str) -> Option<Choice> {
        let w: Vec<&str> = line.split(' ').collect();
        let [tag, config, splits, swap, p, q, pers, tail] = w.as_slice() else {
            return None;
        };
        let flag = |s: &str| match s {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        if *tag != "choice" {
            return None;
        }
        let config = config_by_name(config)?.name;
        let source = match *p {
            "0" => Source::Packed,
            "1" => Source::TmaKMajor,
            "2" => Source::TmaMnMajor,
            "3" => Source::TmaKMajorShared,
            _ => return None,
        };
        Some(Choice {
            config,
            splits: splits.parse().ok()?,
            operands: Operands {
                swap: flag(swap)?,
                p: source,
                q_tma: flag(q)?,
            },
            persistent: flag(pers)?,
            tail: flag(tail)?,
        })
    }
}

const HEADER: &str = "gpukit gemm tuning v2";

/// The text of a tuning file for `key` and `choice` (the candidates' times are informative).
pub fn file_text(key: &ClassKey, choice: &Choice, times: &[(String, f64)]) -> String {
    let mut body = format!("{HEADER}\nkey {}\n{}\n", key.text(), choice.line());
    for (name, us) in times {
        let name: String = name
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        body += &format!("measured {us:.3} us {name}\n");
    }
    let sum = fnv64(body.as_bytes());
    body + &format!("check {sum:016x}\n")
}

/// The choice a file's text holds for `key`, or `None` when the text is not a well-formed,
/// intact file of exactly this class.
pub fn parse_file(text: &str, key: &ClassKey) -> Option<Choice> {
    let at = text.rfind("check ")?;
    let (body, check) = text.split_at(at);
    let sum = u64::from_str_radix(check.strip_prefix("check ")?.strip_suffix('\n')?, 16).ok()?;
    if sum != fnv64(body.as_bytes()) || check.len() != "check ".len() + 17 {
        return None;
    }
    let mut lines = body.lines();
    if lines.next()? != HEADER || lines.next()? != format!("key {}", key.text()) {
        return None;
    }
    let choice = Choice::parse(lines.next()?)?;
    if !lines.all(|l| l.starts_with("measured ")) {
        return None;
    }
    Some(choice)
}

/// Opens the tuning directory `dir` with gpukit-trust's link-safe walk (every directory on the
/// way owned by this user or root and not writable by others unless sticky: the kernel cache's
/// rules), creating missing directories (mode 0700) when `create`. `None` when it is missing
/// (and not created) or not trusted (counted in [`TuneStats::untrusted_dirs`]).
pub fn open_dir(dir: &Path, create: bool) -> Option<trust::Dir> {
    let how = if create {
        trust::Walk::CREATE_PRIVATE
    } else {
        trust::Walk::EXISTING
    };
    match trust::walk(dir, how) {
        Ok(w) => Some(w.dir),
        Err(trust::Error::Untrusted { .. }) => {
            counters().untrusted_dirs.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(_) => None,
    }
}

/// Reads the tuning file `name` in `dir`: opened relative to the directory's descriptor without
/// following a link or blocking ([`trust::Dir::open_entry`]), accepted by
/// [`trust::own_file_refusal`], read with a bound ([`trust::read_bounded`]), UTF-8. `None` when absent, `Some(Err)` when something is
/// there that is not read.
pub fn read_file(dir: &trust::Dir, name: &str) -> Option<std::result::Result<String, String>> {
    let (file, meta) = match dir.open_entry(name) {
        Ok(Some(f)) => f,
        Ok(None) => return Some(Err(format!("{name} is not a regular file"))),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return None,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Some(Err(format!("{name} is a symbolic link")))
        }
        Err(e) => return Some(Err(format!("opening {name}: {e}"))),
    };
    if let Some(why) = trust::own_file_refusal(&meta, trust::euid(), MAX_FILE_BYTES) {
        return Some(Err(format!("{name}: {why}")));
    }
    match trust::read_bounded(&file, &meta, MAX_FILE_BYTES) {
        Ok(Some(bytes)) => Some(String::from_utf8(bytes).map_err(|_| format!("{name}: not UTF-8"))),
        Ok(None) => Some(Err(format!("{name} grew past {MAX_FILE_BYTES} bytes"))),
        Err(e) => Some(Err(format!("reading {name}: {e}"))),
    }
}

/// Writes `text` as `name` in `dir` atomically: a temporary file with an unpredictable name
/// ([`trust::Dir::create_temp`]), created exclusively without following links (mode 0600),
/// synced, then renamed over `name` (readers in other processes see the old file or the new one).
pub fn write_file(dir: &trust::Dir, name: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let (tmp, mut f) = dir.create_temp(name, 0o600)?;
    let result = (|| {
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        dir.rename(&tmp, name)
    })();
    if result.is_err() {
        // Best effort: the write's own error is what is reported.
        let _ = dir.unlink(&tmp);
    }
    result
}

/// Counters of the tuner (monotonic, process-wide).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TuneStats {
    /// Classes measured in this process.
    pub tuned: u64,
    /// Of those, measurements cut short by [`WARM_BUDGET`] (kept in memory, not written).
    pub partial: u64,
    /// Classes found in memory.
    pub memory_hits: u64,
    /// Classes read from disk.
    pub disk_hits: u64,
    /// Files ignored as garbled, foreign, not ours to read or naming no valid plan.
    pub rejected_files: u64,
    /// Tuning directories not used because another user could change them.
    pub untrusted_dirs: u64,
    /// Files that could not be written.
    pub write_errors: u64,
    /// Products that took the model's plan untuned (too long, stream capture, no scratch, a
    /// measurement of the class by another thread that did not end in time).
    pub untuned: u64,
    /// Candidate timings that failed (the candidate was skipped).
    pub failed_candidates: u64,
    /// Of those, candidates that left an element of the scratch C unwritten.
    pub unwritten_candidates: u64,
    /// Candidates timed in all.
    pub timed_candidates: u64,
    /// Waits for another process's measurement that ended at [`LOCK_WAIT`].
    pub lock_timeouts: u64,
    /// Host time spent measuring, all classes (microseconds: kernel compiles and loads, the
    /// timed runs, the host's waits).
    pub tuning_us: u64,
    /// The longest measurement of one class (microseconds).
    pub max_class_us: u64,
}

#[derive(Default)]
struct Counters {
    tuned: AtomicU64,
    partial: AtomicU64,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    rejected_files: AtomicU64,
    untrusted_dirs: AtomicU64,
    write_errors: AtomicU64,
    untuned: AtomicU64,
    failed_candidates: AtomicU64,
    unwritten_candidates: AtomicU64,
    timed_candidates: AtomicU64,
    lock_timeouts: AtomicU64,
    tuning_us: AtomicU64,
    max_class_us: AtomicU64,
}

fn counters() -> &'static Counters {
    static C: OnceLock<Counters> = OnceLock::new();
    C.get_or_init(Counters::default)
}

/// A snapshot of the tuner's counters.
pub fn stats() -> TuneStats {
    let c = counters();
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    TuneStats {
        tuned: g(&c.tuned),
        partial: g(&c.partial),
        memory_hits: g(&c.memory_hits),
        disk_hits: g(&c.disk_hits),
        rejected_files: g(&c.rejected_files),
        untrusted_dirs: g(&c.untrusted_dirs),
        write_errors: g(&c.write_errors),
        untuned: g(&c.untuned),
        failed_candidates: g(&c.failed_candidates),
        unwritten_candidates: g(&c.unwritten_candidates),
        timed_candidates: g(&c.timed_candidates),
        lock_timeouts: g(&c.lock_timeouts),
        tuning_us: g(&c.tuning_us),
        max_class_us: g(&c.max_class_us),
    }
}

pub(super) fn count_untuned() {
    counters().untuned.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn count_unwritten() {
    counters()
        .unwritten_candidates
        .fetch_add(1, Ordering::Relaxed);
}

/// The first stage's candidates: `model` (the planner's plan) first, then the best plan of each
/// other configuration of `all` ([`plan::enumerate`], cheapest first) within [`WITHIN`] of the
/// best estimate, at most [`STAGE_ONE`]; a `wgmma` configuration gets two, its best plan with
/// P from registers and its best with P from shared memory (packed, or through a rounding tensor
/// map: [`Source::TmaKMajorShared`]), because the model ranks those two least reliably:
/// version 10's H100 run measured the ping-pong tile at 2500x2500x500 at 93.9 TFLOP/s with P
/// from registers (the model's pick for it) and 148.5 with both operands packed, the fastest
/// plan of the shape, which the tuner then never timed. That first pass ranks whole-tile plans only ([`Plan::tail`] plans are
/// the model's guess). Slots left then go, in the same order, to each of those plans'
/// second-best split factor or tail choice (same configuration and operands): the model's
/// split choice is the other thing it ranks least reliably where a few hundred blocks meet the
/// SM count (at 192x160x32768 FP32 it put `sgemm_64x64` s64 first and s48 16 % behind; the
/// H100 ran s48 at 20.3 TFLOP/s, 17 % faster than the plan the tuner kept, and the second
/// stage, which explores split neighbours of its winner and of a runner-up within
/// [`RUNNER_UP`] only, never timed it).
pub fn stage_one(model: &Plan, all: &[Plan]) -> Vec<Plan> {
    // The first pass ranks whole-tile plans only: a tail's price is the model's guess (the
    // second pass and the second stage time the tail twins).
    let best = all
        .iter()
        .find(|p| !p.tail)
        .map_or(model.estimate_us, |p| p.estimate_us)
        .min(model.estimate_us);
    let kind = |p: &Plan| (p.config.name, p.operands.p.in_registers());
    let in_reach = |p: &Plan| p.estimate_us <= WITHIN * best;
    let mut v = vec![*model];
    for p in all.iter().filter(|p| !p.tail) {
        if v.len() >= FIRST_PASS || !in_reach(p) {
            break;
        }
        if v.iter().all(|q| kind(q) != kind(p)) {
            v.push(*p);
        }
    }
    let firsts = v.len();
    for i in 0..firsts {
        if v.len() >= STAGE_ONE {
            break;
        }
        let f = v[i];
        let second = all.iter().find(|p| {
            in_reach(p)
                && p.config.name == f.config.name
                && p.operands == f.operands
                && (p.splits, p.tail) != (f.splits, f.tail)
        });
        if let Some(p) = second {
            if v.iter().all(|q| Choice::of(q) != Choice::of(p)) {
                v.push(*p);
            }
        }
    }
    v
}

/// The second stage's candidates around the first stage's leaders `bases` (the winner, then a
/// runner-up within [`RUNNER_UP`] of it): for each, the plans of `all` with its configuration:
/// its own split and operands with the other tail choice ([`Plan::tail`]), the split
/// factors next to its own (same operands and grid), then up to [`SIBLINGS`] other
/// configurations of its family in its operand layout, split and tail, then its configuration
/// and split with other operand layouts; none of `timed`; at most [`STAGE_TWO`] in all, shared
/// equally between the bases, the winner's first.
pub fn stage_two(bases: &[Plan], all: &[Plan], timed: &[Plan]) -> Vec<Plan> {
    let mut v: Vec<Plan> = Vec::new();
    // Each base gets an equal share of the stage.
    let share = STAGE_TWO.div_ceil(bases.len().max(1));
    for (b, w) in bases.iter().enumerate() {
        let cap = (share * (b + 1)).min(STAGE_TWO);
        let same = |p: &Plan| p.config.name == w.config.name;
        let mut splits: Vec<u32> = all
            .iter()
            .filter(|p| same(p) && p.operands == w.operands)
            .map(|p| p.splits)
            .collect();
        splits.sort_unstable();
        splits.dedup();
        let at = splits.iter().position(|&s| s == w.splits);
        // First the base's twin with or without a tail (same split and operands): a tail
        // changes only the last wave, which the model prices least reliably.
        let mut want: Vec<(u32, Operands)> = vec![(w.splits, w.operands)];
        if let Some(i) = at {
            if i > 0 {
                want.push((splits[i - 1], w.operands));
            }
            if i + 1 < splits.len() {
                want.push((splits[i + 1], w.operands));
            }
        }
        let seen_in = |v: &[Plan], p: &Plan| {
            let seen = |q: &Plan| Choice::of(q) == Choice::of(p);
            timed.iter().any(seen) || v.iter().any(seen)
        };
        let take = |v: &mut Vec<Plan>, p: &Plan| {
            if v.len() < cap && !seen_in(v, p) {
                v.push(*p);
            }
        };
        for &(s, ops) in &want {
            for p in all
                .iter()
                .filter(|p| same(p) && p.splits == s && p.operands == ops)
            {
                take(&mut v, p);
            }
        }
        // Then the sibling tiles ([`siblings`]): the first stage times each configuration in
        // one layout per source of P, the model's favourite; the base's layout, which won, may
        // suit another tile better (3000x2000x300 on an H100: the first stage timed the
        // ping-pong 128x128 with P:ks Q:pack, not with both operands packed like the winner, and
        // that plan ran 7 % faster than the winner).
        let room = cap.saturating_sub(v.len()).min(SIBLINGS);
        let mut seen: Vec<Plan> = timed.to_vec();
        seen.extend_from_slice(&v);
        for p in siblings(w, all, &seen, room) {
            take(&mut v, &p);
        }
        // Last, its configuration and split in its other operand layouts.
        for p in all
            .iter()
            .filter(|p| same(p) && p.splits == w.splits && p.operands != w.operands)
        {
            take(&mut v, p);
        }
    }
    v
}

/// Up to `n` sibling tiles of `base` not in `seen`: the cheapest plans of `all` (its order) of
/// other configurations of the base's family with its operand layout, split and tail, those of
/// its tile size (its ping-pong and clustered variants) first.
pub fn siblings(base: &Plan, all: &[Plan], seen: &[Plan], n: usize) -> Vec<Plan> {
    let sibling = |p: &&Plan| {
        p.config.name != base.config.name
            && p.config.family == base.config.family
            && p.operands == base.operands
            && p.splits == base.splits
            && p.tail == base.tail
            && seen.iter().all(|q| Choice::of(q) != Choice::of(p))
    };
    let same_tile = |p: &&Plan| (p.config.bm, p.config.bn) == (base.config.bm, base.config.bn);
    let mut v: Vec<Plan> = Vec::new();
    for p in all
        .iter()
        .filter(sibling)
        .filter(same_tile)
        .chain(all.iter().filter(sibling).filter(|p| !same_tile(p)))
    {
        if v.len() == n {
            break;
        }
        if v.iter().all(|q| Choice::of(q) != Choice::of(p)) {
            v.push(*p);
        }
    }
    v
}

/// Times plans on the GPU (or, in tests, a fake).
pub trait Timer {
    /// Microseconds per run of `plan` over `reps` runs (after it ran at least once before:
    /// [`Timer::warm`]); `Err` when the plan cannot run here.
    fn time_us(&mut self, plan: &Plan, reps: u32) -> Result<f64>;
    /// Runs `plan` once, untimed (compiles and loads its kernels), and checks that it wrote
    /// what it must; `Err` when it cannot run or did not write every checked element.
    fn warm(&mut self, plan: &Plan) -> Result<()>;
}

/// Back-to-back runs per timed round for a plan estimated at `estimate_us`.
pub fn reps_for(estimate_us: f64) -> u32 {
    ((ROUND_TARGET_US / estimate_us.max(1.0)).round() as u32).clamp(1, MAX_REPS)
}

/// What [`measure`] found: each candidate's best round in microseconds per run (infinite for
/// one that failed or was not run), the first error of each failed candidate, and whether every
/// candidate ran (`false`: [`WARM_BUDGET`] was spent before the last ones were compiled).
#[derive(Debug)]
pub struct Measured {
    /// Microseconds per run, per candidate.
    pub times: Vec<f64>,
    /// The error of each candidate that failed (`None`: it ran, or was not run).
    pub errors: Vec<Option<Error>>,
    /// Every candidate ran (none was skipped for the budget).
    pub complete: bool,
}

/// Times `cands` ([`ROUNDS`] interleaved rounds after one untimed run each). The untimed runs
/// (which compile and load kernels not yet in the kernel cache) stop once they have taken
/// `warm_budget` of host time in all: the candidates after that are not run (the first, the
/// model's plan, always is).
pub fn measure(cands: &[Plan], timer: &mut dyn Timer, warm_budget: Duration) -> Measured {
    let mut t = vec![f64::INFINITY; cands.len()];
    let mut errors: Vec<Option<Error>> = (0..cands.len()).map(|_| None).collect();
    let mut ok = vec![false; cands.len()];
    let mut complete = true;
    let start = Instant::now();
    for (i, p) in cands.iter().enumerate() {
        if i > 0 && start.elapsed() > warm_budget {
            complete = false;
            break;
        }
        match timer.warm(p) {
            Ok(()) => ok[i] = true,
            Err(e) => errors[i] = Some(e),
        }
    }
    let ran: Vec<bool> = ok.clone();
    for _ in 0..ROUNDS {
        for (i, p) in cands.iter().enumerate() {
            if !ok[i] {
                continue;
            }
            match timer.time_us(p, reps_for(p.estimate_us)) {
                Ok(us) if us.is_finite() && us > 0.0 => t[i] = t[i].min(us),
                Ok(us) => {
                    ok[i] = false;
                    errors[i] = Some(Error::invalid(
                        "gemm tuning",
                        format!("a timed round measured {us} us"),
                    ));
                }
                Err(e) => {
                    ok[i] = false;
                    errors[i] = Some(e);
                }
            }
        }
    }
    for i in 0..cands.len() {
        if !ok[i] {
            t[i] = f64::INFINITY;
            if ran[i] || errors[i].is_some() {
                counters().failed_candidates.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Measured {
        times: t,
        errors,
        complete,
    }
}

/// The index of the fastest of `times`, keeping index 0 (the model's plan) unless another is
/// faster by more than [`KEEP_MARGIN`]; `None` when nothing ran.
pub fn fastest(times: &[f64]) -> Option<usize> {
    let (i, best) = times
        .iter()
        .enumerate()
        .filter(|(_, t)| t.is_finite())
        .min_by(|a, b| a.1.total_cmp(b.1))?;
    match times.first() {
        Some(t0) if t0.is_finite() && *t0 <= best * (1.0 + KEEP_MARGIN) => Some(0),
        _ => Some(i),
    }
}

/// The confirmation stage's finalists among `times` (indices): the fastest candidates within
/// [`FINAL_WITHIN`] of the fastest, at most [`FINALISTS`], fastest first, except that the
/// model's plan (index 0) comes first whenever it is within reach (taking the last place of the
/// cut if it would not have made it), so that [`fastest`]'s rule of keeping it applies to the
/// confirmed times.
pub fn finalists(times: &[f64]) -> Vec<usize> {
    let Some(best) = times
        .iter()
        .copied()
        .filter(|t| t.is_finite())
        .min_by(f64::total_cmp)
    else {
        return Vec::new();
    };
    let mut near: Vec<usize> = (0..times.len())
        .filter(|&i| times[i].is_finite() && times[i] <= best * (1.0 + FINAL_WITHIN))
        .collect();
    near.sort_by(|&a, &b| times[a].total_cmp(&times[b]).then(a.cmp(&b)));
    let model_near = near.contains(&0);
    near.retain(|&i| i != 0);
    near.truncate(if model_near { FINALISTS - 1 } else { FINALISTS });
    if model_near {
        near.insert(0, 0);
    }
    near
}

/// The confirmation stage: `plans` timed again in [`CONFIRM_ROUNDS`] rounds, one round of each
/// plan in turn and the order rotated by one each round, so that a drift of the GPU's clock
/// over the measurement (its power limit, a neighbour's load) falls on every plan alike; each
/// plan's time is the median of its rounds (infinite for one that failed). The stages before
/// keep each candidate's best of [`ROUNDS`] rounds, and among several candidates within a few
/// per cent the best round picks the luckiest: on an H100 (2026-12-07) the tuner took a plan
/// measured 1 % ahead of the 128x256 tile at 12288x12288x4096 that the bench's sweep then ran
/// 11 % behind it.
pub fn confirm(plans: &[Plan], timer: &mut dyn Timer) -> Vec<f64> {
    let n = plans.len();
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut failed = vec![false; n];
    for r in 0..CONFIRM_ROUNDS {
        for j in 0..n {
            let i = (j + r) % n;
            if failed[i] {
                continue;
            }
            match timer.time_us(&plans[i], reps_for(plans[i].estimate_us)) {
                Ok(us) if us.is_finite() && us > 0.0 => rounds[i].push(us),
                _ => failed[i] = true,
            }
        }
    }
    rounds
        .into_iter()
        .zip(failed)
        .map(|(mut v, f)| {
            if f || v.is_empty() {
                return f64::INFINITY;
            }
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect()
}

/// The outcome of tuning one product ([`tune`]).
#[derive(Debug)]
pub struct Tuned {
    /// The chosen plan (`None`: no candidate ran; see [`Tuned::model_error`]).
    pub chosen: Option<Plan>,
    /// Every candidate, with its microseconds per product (infinite: failed or not run); the
    /// model's plan first.
    pub timed: Vec<(Plan, f64)>,
    /// Why the model's plan failed to run, if it did.
    pub model_error: Option<Error>,
    /// Every candidate planned ran (the measurement was not cut short by the budget).
    pub complete: bool,
}

/// The tuning of one product: the stages ([`stage_one`], then [`stage_two`] around the winner
/// and a runner-up within [`RUNNER_UP`], then the siblings of a second-stage winner), the
/// untimed runs within `warm_budget` of host time in all (each stage gets what the ones before
/// left; the first stage's first candidate always runs), then the finalists' confirmation
/// ([`finalists`], [`confirm`]; not after a measurement cut short by the budget). The choice is
/// the fastest finalist by its confirmed time (or, with one finalist, the fastest candidate), the
/// model's plan (`model`, first) kept unless another is faster by more than [`KEEP_MARGIN`].
pub fn tune(model: &Plan, all: &[Plan], timer: &mut dyn Timer, warm_budget: Duration) -> Tuned {
    let start = Instant::now();
    let first = stage_one(model, all);
    let m1 = measure(&first, timer, warm_budget);
    let mut timed: Vec<(Plan, f64)> = first
        .iter()
        .copied()
        .zip(m1.times.iter().copied())
        .collect();
    let mut errors = m1.errors;
    let model_error = errors.first_mut().and_then(Option::take);
    let Some(w) = fastest(&m1.times) else {
        return Tuned {
            chosen: None,
            timed,
            model_error,
            complete: m1.complete,
        };
    };
    let mut complete = m1.complete;
    let mut bases = vec![first[w]];
    let runner = m1
        .times
        .iter()
        .enumerate()
        .filter(|(i, t)| *i != w && t.is_finite())
        .min_by(|a, b| a.1.total_cmp(b.1));
    if let Some((r, &tr)) = runner {
        if tr <= m1.times[w] * (1.0 + RUNNER_UP) {
            bases.push(first[r]);
        }
    }
    let plans: Vec<Plan> = timed.iter().map(|x| x.0).collect();
    let second = stage_two(&bases, all, &plans);
    if !second.is_empty() && complete {
        // What the first stage left of the budget (its timed rounds count too).
        let left = warm_budget.saturating_sub(start.elapsed());
        let m2 = measure(&second, timer, left);
        complete &= m2.complete;
        timed.extend(second.iter().copied().zip(m2.times.iter().copied()));
    }
    // Third stage: a second-stage plan that beats the first stage's has its own sibling tiles
    // timed too (3000x2000x300 on an H100: the packed layout won as the runner-up's other
    // layout, and the ping-pong tile in that layout, 7 % faster still, was never timed).
    let times: Vec<f64> = timed.iter().map(|x| x.1).collect();
    if let Some(i) = fastest(&times) {
        if i >= first.len() && complete {
            let plans: Vec<Plan> = timed.iter().map(|x| x.0).collect();
            let third = siblings(&timed[i].0, all, &plans, SIBLINGS);
            if !third.is_empty() {
                let left = warm_budget.saturating_sub(start.elapsed());
                let m3 = measure(&third, timer, left);
                complete &= m3.complete;
                timed.extend(third.iter().copied().zip(m3.times.iter().copied()));
            }
        }
    }
    let times: Vec<f64> = timed.iter().map(|x| x.1).collect();
    let mut chosen = fastest(&times).map(|i| timed[i].0);
    // Confirmation: the finalists timed again, in turn (see [`confirm`]).
    let fin = finalists(&times);
    if fin.len() > 1 && complete {
        let plans: Vec<Plan> = fin.iter().map(|&i| timed[i].0).collect();
        let medians = confirm(&plans, timer);
        // `fastest` keeps the first finalist within KEEP_MARGIN: the model's plan when it is
        // a finalist, else the stages' fastest.
        if let Some(j) = fastest(&medians) {
            chosen = Some(plans[j]);
            for (k, &i) in fin.iter().enumerate() {
                timed[i].1 = medians[k];
            }
        }
    }
    Tuned {
        chosen,
        timed,
        model_error,
        complete,
    }
}

/// A choice this process holds for a class, and whether it was checked here (measured, or run
/// once through the write check: [`mark_checked`]); a choice read from disk is not, until then.
#[derive(Debug, Clone, Copy)]
struct Held {
    choice: Choice,
    checked: bool,
}

/// The choices known in this process, by class.
fn memory() -> &'static Mutex<HashMap<ClassKey, Held>> {
    static M: OnceLock<Mutex<HashMap<ClassKey, Held>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Most classes kept in memory before the map starts over.
const MEMORY_CLASSES: usize = 4096;

/// Where the tuning files go: `<kernel cache dir>/gemm-tuning`, or `None` without a disk cache.
/// (Every use walks it with [`open_dir`]: a directory another user could change is not used.)
pub fn disk_dir() -> Option<PathBuf> {
    gpukit_jit::KernelCache::global()
        .ok()
        .and_then(|c| c.disk_dir().map(|d| d.join(DIR_NAME)))
}

/// The choice this process holds for `key`, if any.
pub fn known(key: &ClassKey) -> Option<Choice> {
    memory()
        .lock()
        .ok()
        .and_then(|m| m.get(key).map(|h| h.choice))
}

/// Whether this process holds a choice for `key` that it checked (measured it, or ran it through
/// the write check since reading it from disk).
pub fn checked(key: &ClassKey) -> bool {
    memory()
        .lock()
        .ok()
        .is_some_and(|m| m.get(key).is_some_and(|h| h.checked))
}

/// Records that the choice held for `key` passed the write check in this process.
pub fn mark_checked(key: &ClassKey) {
    if let Ok(mut m) = memory().lock() {
        if let Some(h) = m.get_mut(key) {
            h.checked = true;
        }
    }
}

/// Drops the choice held for `key` because it failed the write check (a file naming a plan that
/// left C unwritten): counted as a rejected file; the class is measured again.
pub fn reject_held(key: &ClassKey) {
    if let Ok(mut m) = memory().lock() {
        m.remove(key);
    }
    counters().rejected_files.fetch_add(1, Ordering::Relaxed);
}

/// The stored choice of `key` under `mode`, and whether it was checked in this process ([`Held`]):
/// from memory, else (mode `On`) from the file in `dir` (unchecked), validated for `p`
/// ([`Choice::plan_for`]). Files that are present but unusable are counted as rejected.
pub fn lookup(
    key: &ClassKey,
    mode: TuneMode,
    dir: Option<&Path>,
    p: &Problem,
    dev: &DeviceAttributes,
) -> Option<(Plan, bool)> {
    if mode == TuneMode::Off {
        return None;
    }
    let c = counters();
    let held = memory().lock().ok().and_then(|m| m.get(key).copied());
    if let Some(h) = held {
        if let Some(plan) = h.choice.plan_for(key.precision, p, dev, &key.paths) {
            c.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Some((plan, h.checked));
        }
    }
    if mode != TuneMode::On {
        return None;
    }
    lookup_disk(key, dir?, p, dev).map(|plan| (plan, false))
}

/// The choice of `key` in its file in `dir` (remembered in memory, unchecked, when valid for
/// `p`).
pub fn lookup_disk(
    key: &ClassKey,
    dir: &Path,
    p: &Problem,
    dev: &DeviceAttributes,
) -> Option<Plan> {
    let c = counters();
    let d = open_dir(dir, false)?;
    let text = match read_file(&d, &key.file_name())? {
        Ok(t) => t,
        Err(_) => {
            c.rejected_files.fetch_add(1, Ordering::Relaxed);
            return None;
        }
    };
    let plan = parse_file(&text, key)
        .and_then(|choice| Some((choice, choice.plan_for(key.precision, p, dev, &key.paths)?)));
    match plan {
        Some((choice, plan)) => {
            c.disk_hits.fetch_add(1, Ordering::Relaxed);
            remember(key, choice, false);
            Some(plan)
        }
        None => {
            c.rejected_files.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

fn remember(key: &ClassKey, choice: Choice, checked: bool) {
    if let Ok(mut m) = memory().lock() {
        if m.len() >= MEMORY_CLASSES {
            m.clear();
        }
        m.insert(key.clone(), Held { choice, checked });
    }
}

/// Records a measured choice: in memory, and (when the measurement was `complete` and `dir` is
/// not `None`) in its file; `host_us` is what the measurement cost (counted in [`stats`]).
pub fn store(
    key: &ClassKey,
    choice: Choice,
    times: &[(Plan, f64)],
    dir: Option<&Path>,
    complete: bool,
    host_us: u64,
) {
    let c = counters();
    c.tuned.fetch_add(1, Ordering::Relaxed);
    if !complete {
        c.partial.fetch_add(1, Ordering::Relaxed);
    }
    c.timed_candidates
        .fetch_add(times.len() as u64, Ordering::Relaxed);
    c.tuning_us.fetch_add(host_us, Ordering::Relaxed);
    c.max_class_us.fetch_max(host_us, Ordering::Relaxed);
    // Every candidate that could be chosen passed the write check in `measure`.
    remember(key, choice, true);
    let Some(dir) = dir.filter(|_| complete) else {
        return;
    };
    let named: Vec<(String, f64)> = times
        .iter()
        .map(|(p, t)| {
            (
                format!("{} s{} {}", p.config.name, p.splits, p.operands.label()),
                *t,
            )
        })
        .collect();
    let written = open_dir(dir, true)
        .map(|d| write_file(&d, &key.file_name(), &file_text(key, &choice, &named)));
    if !matches!(written, Some(Ok(()))) {
        c.write_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Forgets every choice held in memory (tests and benches that measure anew).
pub fn forget_memory() {
    if let Ok(mut m) = memory().lock() {
        m.clear();
    }
}

/// The classes being measured in this process now.
fn in_flight() -> &'static (Mutex<HashSet<ClassKey>>, Condvar) {
    static F: OnceLock<(Mutex<HashSet<ClassKey>>, Condvar)> = OnceLock::new();
    F.get_or_init(|| (Mutex::new(HashSet::new()), Condvar::new()))
}

/// This thread's right to measure one class: while it is held, other threads asking for the
/// class wait ([`begin`]); dropping it wakes them (after [`store`], they find the choice).
#[derive(Debug)]
pub struct Claim {
    key: ClassKey,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let (set, done) = in_flight();
        // A poisoned lock (a panic while holding it) leaves the class claimed; waiters give up
        // at CLAIM_WAIT.
        if let Ok(mut s) = set.lock() {
            s.remove(&self.key);
        }
        done.notify_all();
    }
}

/// What [`begin`] found.
#[derive(Debug)]
pub enum Begin {
    /// Measure the class (no other thread is; nothing is known of it, or `fresh_only`).
    Measure(Claim),
    /// The class's choice (another thread measured it meanwhile, or it was known).
    Known(Choice),
    /// Another thread's measurement of the class did not end within [`CLAIM_WAIT`].
    Busy,
}

/// Claims the measurement of `key` for this thread, waiting (at most [`CLAIM_WAIT`]) while
/// another thread measures it: one measurement per class and process, and every caller then
/// runs the same plan. With `use_known`, a choice already in memory is returned instead.
pub fn begin(key: &ClassKey, use_known: bool) -> Begin {
    let (set, done) = in_flight();
    let deadline = Instant::now() + CLAIM_WAIT;
    let Ok(mut s) = set.lock() else {
        return Begin::Busy;
    };
    loop {
        if use_known {
            if let Some(c) = known(key) {
                return Begin::Known(c);
            }
        }
        if !s.contains(key) {
            s.insert(key.clone());
            return Begin::Measure(Claim { key: key.clone() });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Begin::Busy;
        }
        s = match done.wait_timeout(s, left) {
            Ok((g, _)) => g,
            Err(_) => return Begin::Busy,
        };
    }
}

/// An exclusive `flock` on a tuning directory: the measurements of processes sharing it take
/// turns (each would slow the other's timed runs). Released when dropped (and by the kernel
/// when the process ends).
#[derive(Debug)]
pub struct DirLock {
    _fd: std::os::fd::OwnedFd,
}

/// Takes [`DirLock`] on `dir` (created if missing), waiting at most [`LOCK_WAIT`] for another
/// process's measurement to end; `None` when the directory cannot be used or the wait ran out
/// (counted in [`TuneStats::lock_timeouts`]): the measurement then goes ahead without it.
pub fn lock_dir(dir: &Path) -> Option<DirLock> {
    use std::os::fd::AsRawFd;
    let d = open_dir(dir, true)?;
    let fd = d.reopen().ok()?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: `fd` is an open descriptor owned here; flock only takes an advisory lock.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Some(DirLock { _fd: fd });
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) || Instant::now() >= deadline {
            counters().lock_timeouts.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::tests::h200;
    use crate::gemm::plan::{enumerate, Family, WGMMA_CONFIGS};

    /// The planner's TF32 plan for `p` on the H200-like device and every plan of the space
    /// ([`enumerate`]), default paths.
    fn tf32_space(p: &Problem) -> (Plan, Vec<Plan>) {
        let dev = h200();
        let all = enumerate(Precision::Tf32, p, &dev, &Paths::default()).unwrap();
        let model = plan::choose(Precision::Tf32, p, &dev, &Paths::default()).unwrap();
        (model, all)
    }

    fn device(name: &str) -> DeviceKey {
        DeviceKey::new(
            &DeviceAttributes {
                name: name.into(),
                ..h200()
            },
            13000,
            (13, 0),
        )
    }

    fn key(name: &str, p: &Problem) -> ClassKey {
        ClassKey::new(device(name), Precision::Tf32, p, &Paths::default())
    }

    fn shapes() -> Vec<Problem> {
        let mut v = vec![
            Problem::shape(1000, 1000, 1000, 1),
            Problem::shape(4096, 4096, 256, 1),
            Problem::shape(2048, 3000, 1000, 1),
            Problem::shape(128, 128, 65536, 1),
            Problem::shape(64, 64, 64, 1024),
            Problem::shape(8191, 257, 4099, 1),
        ];
        v.push(Problem {
            trans_a: true,
            trans_b: true,
            ..Problem::shape(2048, 3000, 1000, 1)
        });
        v.push(Problem {
            a_mappable: false,
            b_mappable: false,
            ..Problem::shape(1023, 1025, 1027, 1)
        });
        v
    }

    #[test]
    fn buckets_are_quarter_octaves() {
        assert_eq!(bucket(1000), 1024);
        assert_eq!(bucket(1024), 1024);
        assert_eq!(bucket(1025), 1280);
        assert_eq!(bucket(3000), 3072);
        assert_eq!(bucket(7), 7);
        assert_eq!(bucket(9), 10);
        assert_eq!(bucket(u32::MAX), u32::MAX);
        let mut last = 0;
        for x in 1..20_000u32 {
            let b = bucket(x);
            assert!(b >= x && b >= last, "{x} -> {b}");
            assert!(b as f64 <= 1.25 * x as f64 + 1.0, "{x} -> {b}");
            assert_eq!(bucket(b), b, "{x}");
            last = b;
        }
    }

    #[test]
    fn classes_are_keyed_by_device_software_plan_space_and_shape() {
        let p = Problem::shape(1000, 1000, 1000, 1);
        let k = key("H200", &p);
        assert_eq!(k, key("H200", &Problem::shape(1024, 1024, 1024, 1)));
        assert_ne!(k, key("H200", &Problem::shape(1025, 1024, 1024, 1)));
        assert_ne!(k, key("H100", &p));
        let other = |f: &dyn Fn(&mut ClassKey)| {
            let mut o = k.clone();
            f(&mut o);
            assert_ne!(o.text(), k.text());
            assert_ne!(o.file_in(Path::new("/d")), k.file_in(Path::new("/d")));
        };
        other(&|o| o.device.driver = 12080);
        other(&|o| o.device.nvrtc = (13, 1));
        other(&|o| o.device.sms = 114);
        other(&|o| o.device.compute_capability = (10, 0));
        other(&|o| o.precision = Precision::Fp32);
        other(&|o| o.problem.trans_a = true);
        other(&|o| o.problem.b_mappable = false);
        // 2500 and 2504 share a bucket; rows straddling sectors make another class.
        other(&|o| o.problem.a_sectors = false);
        other(&|o| o.problem.b_sectors = false);
        other(&|o| o.problem.batch = 2);
        other(&|o| o.paths.tma_rounding = false);
        assert!(k.text().contains(&format!("space={:016x}", plan_space())));
        // A hostile device name cannot break the one-line key.
        let evil = key("H200\ncheck 0", &p);
        assert!(!evil.text().contains('\n'));
    }

    #[test]
    fn every_planned_choice_round_trips_through_a_file() {
        let dev = h200();
        for p in shapes() {
            for precision in [Precision::Tf32, Precision::Fp32, Precision::Tf32x3] {
                let k = ClassKey::new(device("H200"), precision, &p, &Paths::default());
                for plan in enumerate(precision, &p, &dev, &Paths::default()).unwrap() {
                    let c = Choice::of(&plan);
                    let text = file_text(&k, &c, &[("a s1".into(), 12.5)]);
                    assert_eq!(parse_file(&text, &k), Some(c), "{text}");
                    let back = c.plan_for(precision, &p, &dev, &Paths::default()).unwrap();
                    assert_eq!(
                        (
                            back.config,
                            back.splits,
                            back.k_per_split,
                            back.operands,
                            back.max_blocks,
                            back.tail
                        ),
                        (
                            plan.config,
                            plan.splits,
                            plan.k_per_split,
                            plan.operands,
                            plan.max_blocks,
                            plan.tail
                        ),
                        "{p:?} {precision:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn garbled_foreign_and_invalid_files_are_rejected() {
        let dev = h200();
        let p = Problem::shape(2048, 3000, 1000, 1);
        let k = key("H200", &p);
        let model = plan::choose(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
        let c = Choice::of(&model);
        let text = file_text(&k, &c, &[]);
        assert_eq!(parse_file(&text, &k), Some(c));
        // Any one byte changed, or the text cut anywhere.
        for i in 0..text.len() {
            let mut b = text.clone().into_bytes();
            b[i] ^= 0x01;
            if let Ok(t) = String::from_utf8(b) {
                assert_eq!(parse_file(&t, &k), None, "byte {i} flipped");
            }
            assert_eq!(parse_file(&text[..i], &k), None, "cut at {i}");
        }
        // Another class's file (a name collision, another driver) is not this class's.
        assert_eq!(parse_file(&text, &key("H100", &p)), None);
        // A well-formed file whose choice is not a plan for the product.
        let forged = |line: &str| {
            let body = format!("{HEADER}\nkey {}\n{line}\n", k.text());
            let sum = fnv64(body.as_bytes());
            parse_file(&format!("{body}check {sum:016x}\n"), &k)
        };
        assert_eq!(forged("choice no_such_tile 1 0 0 0 0 0"), None);
        assert_eq!(forged("choice wgmma_128x256 1 0 4 0 0 0"), None);
        assert_eq!(forged("choice wgmma_128x256 1 0 0 0 0 0 extra"), None);
        // Version 1's lines (no tail field) and a tail flag that is not 0 or 1.
        assert_eq!(forged("choice wgmma_128x256 1 0 0 0 0"), None);
        assert_eq!(forged("choice wgmma_128x256 1 0 0 0 1 2"), None);
        let ok = forged("choice wgmma_128x256 5 0 0 0 1 0").unwrap();
        // Split 5 is not a split the planner uses; an SGEMM tile is not a TF32 plan; Q through
        // a tensor map is not possible with an unaligned B; wgmma does not run on an A100.
        assert_eq!(
            ok.plan_for(Precision::Tf32, &p, &dev, &Paths::default()),
            None
        );
        let sgemm = forged("choice sgemm_128x256 1 0 0 0 0 0").unwrap();
        assert_eq!(
            sgemm.plan_for(Precision::Tf32, &p, &dev, &Paths::default()),
            None
        );
        assert!(sgemm
            .plan_for(Precision::Fp32, &p, &dev, &Paths::default())
            .is_some());
        let tma = forged("choice wgmma_128x256 1 1 2 1 1 0").unwrap();
        assert!(tma
            .plan_for(Precision::Tf32, &p, &dev, &Paths::default())
            .is_some());
        let unaligned = Problem {
            b_mappable: false,
            ..p
        };
        assert_eq!(
            tma.plan_for(Precision::Tf32, &unaligned, &dev, &Paths::default()),
            None
        );
        let a100 = DeviceAttributes {
            compute_capability: (8, 0),
            ..h200()
        };
        assert_eq!(
            tma.plan_for(Precision::Tf32, &p, &a100, &Paths::default()),
            None
        );
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "gpukit-tune-test-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        set_mode(&d, 0o700);
        d
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);

    fn set_mode(p: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn files_are_read_only_when_regular_ours_private_small_and_utf8() {
        let d = temp_dir("read");
        let dir = open_dir(&d, false).expect("a private directory under the temp dir is trusted");
        assert!(read_file(&dir, "a.tune").is_none());
        write_file(&dir, "a.tune", "hello").unwrap();
        assert_eq!(read_file(&dir, "a.tune"), Some(Ok("hello".into())));
        write_file(&dir, "a.tune", "again").unwrap();
        assert_eq!(read_file(&dir, "a.tune"), Some(Ok("again".into())));
        // No temporary file is left behind, and the file is this user's, mode 0600 at most.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let meta = trust::lstat(&d.join("a.tune")).unwrap();
        assert_eq!(
            trust::own_file_refusal(&meta, trust::euid(), MAX_FILE_BYTES),
            None
        );
        assert_eq!(meta.mode & 0o077, 0, "{:o}", meta.mode);
        // Writable by the group or by everybody: another user could have put it there.
        for mode in [0o620, 0o602, 0o666] {
            set_mode(&d.join("a.tune"), mode);
            let got = read_file(&dir, "a.tune");
            assert!(
                matches!(&got, Some(Err(e)) if e.contains("writable by others")),
                "{mode:o}: {got:?}"
            );
        }
        // Another user's file (the rule itself: files of other uids cannot be made here).
        let other = trust::Meta {
            uid: trust::euid() + 1,
            ..meta
        };
        assert!(
            trust::own_file_refusal(&other, trust::euid(), MAX_FILE_BYTES)
                .unwrap()
                .contains("owned by uid")
        );
        std::fs::write(d.join("big.tune"), vec![b'x'; MAX_FILE_BYTES as usize + 1]).unwrap();
        set_mode(&d.join("big.tune"), 0o600);
        assert!(matches!(read_file(&dir, "big.tune"), Some(Err(e)) if e.contains("more than")));
        std::fs::write(d.join("bin.tune"), [0xff, 0xfe, 0x00]).unwrap();
        set_mode(&d.join("bin.tune"), 0o600);
        assert!(matches!(read_file(&dir, "bin.tune"), Some(Err(e)) if e.contains("UTF-8")));
        set_mode(&d.join("a.tune"), 0o600);
        std::os::unix::fs::symlink(d.join("a.tune"), d.join("link.tune")).unwrap();
        assert!(
            matches!(read_file(&dir, "link.tune"), Some(Err(e)) if e.contains("symbolic link")),
            "a symlink is not followed"
        );
        std::fs::create_dir(d.join("dir.tune")).unwrap();
        assert!(matches!(read_file(&dir, "dir.tune"), Some(Err(_))));
        // A FIFO with no writer must neither block nor be read.
        let fifo = d.join("fifo.tune");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(read_file(&dir, "fifo.tune"), Some(Err(_))));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_others_may_change_is_neither_read_nor_written() {
        let d = temp_dir("untrusted");
        let p = Problem::shape(771, 1549, 2331, 1);
        let k = key("untrusted-dir-device", &p);
        let dev = h200();
        let pick = enumerate(Precision::Tf32, &p, &dev, &Paths::default()).unwrap()[0];
        let c = Choice::of(&pick);
        // A valid file, then the directory made writable by everybody (not sticky).
        store(&k, c, &[(pick, 10.0)], Some(&d), true, 0);
        assert!(k.file_in(&d).exists());
        set_mode(&d, 0o777);
        forget_memory();
        let before = stats();
        assert_eq!(lookup(&k, TuneMode::On, Some(&d), &p, &dev), None);
        assert!(stats().untrusted_dirs > before.untrusted_dirs);
        // Nor is anything written into it, nor into a directory below it.
        let sub = d.join("sub");
        let k2 = key("untrusted-dir-device-2", &p);
        store(&k2, c, &[(pick, 10.0)], Some(&sub), true, 0);
        assert!(!k2.file_in(&d).exists() && !sub.exists());
        assert!(stats().write_errors > before.write_errors);
        // Sticky (like /tmp): trusted again.
        set_mode(&d, 0o1777);
        forget_memory();
        assert!(lookup(&k, TuneMode::On, Some(&d), &p, &dev).is_some());
        set_mode(&d, 0o700);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn lookup_reads_valid_files_and_ignores_the_rest() {
        let dev = h200();
        let d = temp_dir("lookup");
        let p = Problem::shape(777, 1555, 2333, 1);
        let k = key("lookup-test-device", &p);
        let all = enumerate(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
        let pick = all[all.len() / 2];
        let c = Choice::of(&pick);
        store(&k, c, &[(pick, 10.0)], Some(&d), true, 0);
        // In memory, checked (a measurement's choice).
        assert_eq!(
            lookup(&k, TuneMode::On, None, &p, &dev).map(|x| (Choice::of(&x.0), x.1)),
            Some((c, true))
        );
        // Off never answers.
        assert_eq!(lookup(&k, TuneMode::Off, Some(&d), &p, &dev), None);
        // From disk in a fresh process (memory forgotten); another product of the class gets the
        // same choice, materialised for its own K.
        forget_memory();
        let before = stats();
        let q = Problem::shape(770, 1540, 2300, 1);
        let (got, checked_here) = lookup(&k, TuneMode::On, Some(&d), &q, &dev).unwrap();
        assert_eq!(Choice::of(&got).config, c.config);
        // Read from disk: data to check before use, in memory as such until it passes.
        assert!(!checked_here && !checked(&k));
        assert_eq!(
            lookup(&k, TuneMode::On, None, &q, &dev).map(|x| x.1),
            Some(false)
        );
        mark_checked(&k);
        assert_eq!(
            lookup(&k, TuneMode::On, None, &q, &dev).map(|x| x.1),
            Some(true)
        );
        // A choice that failed the check is dropped and counted.
        let before_reject = stats().rejected_files;
        reject_held(&k);
        assert_eq!(known(&k), None);
        assert!(stats().rejected_files > before_reject);
        assert_eq!(
            got.k_per_split,
            plan::normalize_split(&pick.config, q.k, c.splits).1
        );
        assert!(stats().disk_hits > before.disk_hits);
        // `fresh` ignores the file.
        forget_memory();
        assert_eq!(lookup(&k, TuneMode::Fresh, Some(&d), &p, &dev), None);
        // A garbled file is rejected, and counted.
        let f = k.file_in(&d);
        let mut text = std::fs::read_to_string(&f).unwrap();
        text = text.replace("choice ", "choice  ");
        std::fs::write(&f, text).unwrap();
        let before = stats();
        assert_eq!(lookup(&k, TuneMode::On, Some(&d), &p, &dev), None);
        assert!(stats().rejected_files > before.rejected_files);
        // A partial measurement stays in memory and is not written.
        let k3 = key("lookup-test-device-partial", &p);
        store(&k3, c, &[(pick, 10.0)], Some(&d), false, 5);
        assert!(!k3.file_in(&d).exists());
        assert_eq!(known(&k3), Some(c));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Runs this test binary's test `name` as a child process with `GPUKIT_TUNE_TEST_CHILD` set
    /// to `role` (the child side of the multi-process tests), stdin and stdout piped.
    fn child(name: &str, role: &str, dir: &Path) -> std::process::Child {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads", "1"])
            .env("GPUKIT_TUNE_TEST_CHILD", role)
            .env("GPUKIT_TUNE_TEST_DIR", dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn child_role() -> Option<(String, PathBuf)> {
        Some((
            std::env::var("GPUKIT_TUNE_TEST_CHILD").ok()?,
            PathBuf::from(std::env::var_os("GPUKIT_TUNE_TEST_DIR")?),
        ))
    }

    /// Processes sharing the directory take turns measuring: another process's lock is waited
    /// for, and taken when that process lets go (here: when it ends).
    #[test]
    fn measurements_of_processes_sharing_a_directory_take_turns() {
        use std::io::{BufRead, Read};
        const NAME: &str =
            "gemm::tune::tests::measurements_of_processes_sharing_a_directory_take_turns";
        if let Some((role, d)) = child_role() {
            assert_eq!(role, "hold");
            let lock = lock_dir(&d).expect("the child takes the free lock");
            println!("locked");
            // Hold it until the parent closes our stdin.
            let mut rest = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut rest);
            drop(lock);
            return;
        }
        let d = temp_dir("lock");
        let mut holder = child(NAME, "hold", &d);
        let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("locked") {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the child ended without the lock"
            );
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = d.clone();
        let waiter = std::thread::spawn(move || {
            let l = lock_dir(&d2);
            tx.send(()).unwrap();
            l.is_some()
        });
        // While the child holds it, this process waits.
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "took a lock another process holds"
        );
        drop(holder.stdin.take());
        assert!(
            waiter.join().unwrap(),
            "the lock was not taken after the child let go"
        );
        assert!(holder.wait().unwrap().success());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Processes writing a class's file while another reads it: every read sees a complete,
    /// valid file (one writer's or the other's), never a torn one.
    #[test]
    fn concurrent_writers_in_other_processes_never_show_a_torn_file() {
        const NAME: &str =
            "gemm::tune::tests::concurrent_writers_in_other_processes_never_show_a_torn_file";
        let dev = h200();
        let p = Problem::shape(1500, 700, 450, 1);
        let k = key("torn-test-device", &p);
        let all = enumerate(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
        let (c0, c1) = (Choice::of(&all[0]), Choice::of(&all[all.len() - 1]));
        // Long files (many measured lines) so that a torn write would show.
        let times: Vec<(String, f64)> =
            (0..40).map(|i| (format!("cand{i} s1"), i as f64)).collect();
        if let Some((role, d)) = child_role() {
            let dir = open_dir(&d, false).unwrap();
            let c = if role == "w0" { c0 } else { c1 };
            for _ in 0..300 {
                write_file(&dir, &k.file_name(), &file_text(&k, &c, &times)).unwrap();
            }
            return;
        }
        let d = temp_dir("torn");
        let mut kids = [child(NAME, "w0", &d), child(NAME, "w1", &d)];
        let dir = open_dir(&d, false).unwrap();
        let (mut reads, mut seen) = (0, std::collections::HashSet::new());
        loop {
            let done = kids.iter_mut().all(|c| c.try_wait().unwrap().is_some());
            if let Some(text) = read_file(&dir, &k.file_name()) {
                let text = text.unwrap();
                let choice = parse_file(&text, &k).unwrap_or_else(|| panic!("torn: {text}"));
                assert!(choice == c0 || choice == c1);
                seen.insert(choice);
                reads += 1;
            }
            if done {
                break;
            }
        }
        for c in &mut kids {
            assert!(c.wait().unwrap().success());
        }
        assert!(reads > 0);
        // Only the final file and no temporary file remain.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn one_thread_measures_a_class_and_the_others_wait_for_its_choice() {
        let p = Problem::shape(333, 444, 555, 1);
        let k = key("claim-test-device", &p);
        let dev = h200();
        let pick = Choice::of(&enumerate(Precision::Tf32, &p, &dev, &Paths::default()).unwrap()[0]);
        let Begin::Measure(claim) = begin(&k, true) else {
            panic!("nothing measures this class yet");
        };
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let k = k.clone();
                std::thread::spawn(move || match begin(&k, true) {
                    Begin::Known(c) => Some(c),
                    _ => None,
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "a waiter did not wait"
        );
        store(&k, pick, &[], None, true, 0);
        drop(claim);
        for w in waiters {
            assert_eq!(w.join().unwrap(), Some(pick));
        }
        // `tune_now`'s claim ignores what is known, and is exclusive too.
        let Begin::Measure(again) = begin(&k, false) else {
            panic!("a known class can be measured again");
        };
        let k2 = k.clone();
        let other = std::thread::spawn(move || matches!(begin(&k2, false), Begin::Measure(_)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!other.is_finished());
        drop(again);
        assert!(other.join().unwrap());
    }

    /// The finalists: within [`FINAL_WITHIN`] of the fastest, fastest first, at most
    /// [`FINALISTS`], the model's plan (index 0) first whenever it is within reach.
    #[test]
    fn finalists_are_the_near_fastest_with_the_model_first() {
        let inf = f64::INFINITY;
        assert!(finalists(&[]).is_empty());
        assert!(finalists(&[inf, inf]).is_empty());
        assert_eq!(finalists(&[100.0, 50.0, inf]), vec![1]);
        assert_eq!(finalists(&[100.0, 99.0, 98.0, 97.0, 96.0]), vec![0, 4, 3]);
        assert_eq!(
            finalists(&[110.0, 104.0, 101.0, 100.0, 106.0]),
            vec![3, 2, 1]
        );
        assert_eq!(finalists(&[inf, 104.0, 101.0, 100.0]), vec![3, 2, 1]);
        assert_eq!(finalists(&[100.0, 100.0, 100.0, 100.0]), vec![0, 1, 2]);
    }

    /// A fake GPU whose one plan has a lucky first timed round: the stages' best round puts it
    /// ahead, the confirmation's medians do not.
    struct Lucky {
        model: Choice,
        lucky: Choice,
        rounds: HashMap<Choice, u32>,
    }

    impl Timer for Lucky {
        fn warm(&mut self, _plan: &Plan) -> Result<()> {
            Ok(())
        }
        fn time_us(&mut self, plan: &Plan, _reps: u32) -> Result<f64> {
            let c = Choice::of(plan);
            let n = self.rounds.entry(c).or_insert(0);
            *n += 1;
            Ok(if c == self.model {
                100.0
            } else if c == self.lucky {
                if *n == 1 {
                    97.0
                } else {
                    103.0
                }
            } else {
                300.0
            })
        }
    }

    #[test]
    fn a_lucky_round_does_not_outlast_the_confirmation() {
        let p = Problem::shape(2500, 2500, 500, 1);
        let (model, all) = tf32_space(&p);
        let first = stage_one(&model, &all);
        let lucky = *first.last().unwrap();
        let mut t = Lucky {
            model: Choice::of(&model),
            lucky: Choice::of(&lucky),
            rounds: HashMap::new(),
        };
        let r = tune(&model, &all, &mut t, WARM_BUDGET);
        assert_eq!(Choice::of(&r.chosen.unwrap()), Choice::of(&model));
        // Both finalists timed again, CONFIRM_ROUNDS each; their stored times are the medians.
        assert_eq!(
            t.rounds[&Choice::of(&lucky)] as usize,
            ROUNDS + CONFIRM_ROUNDS
        );
        assert_eq!(
            t.rounds[&Choice::of(&model)] as usize,
            ROUNDS + CONFIRM_ROUNDS
        );
        let stored = |c: &Plan| {
            r.timed
                .iter()
                .find(|x| Choice::of(&x.0) == Choice::of(c))
                .unwrap()
                .1
        };
        assert_eq!(stored(&lucky), 103.0);
        assert_eq!(stored(&model), 100.0);
        // Without the lucky round the confirmation has one finalist: nothing is timed again.
        let mut t = fake(priced(vec![(Choice::of(&model), 100.0)], 300.0));
        let (chosen, timed) = run(&model, &all, &mut t);
        assert_eq!(Choice::of(&chosen.unwrap()), Choice::of(&model));
        assert_eq!(t.timed.len(), ROUNDS * timed.len());
    }

    /// The first stage's second pass keeps room beside a first pass of every tile in reach.
    #[test]
    fn the_first_pass_leaves_room_for_the_second() {
        for p in shapes() {
            let (model, all) = tf32_space(&p);
            let first = stage_one(&model, &all);
            assert!(first.len() <= STAGE_ONE, "{p:?}");
            let mut kinds: Vec<(&str, bool)> = first
                .iter()
                .map(|x| (x.config.name, x.operands.p.in_registers()))
                .collect();
            kinds.sort_unstable();
            kinds.dedup();
            assert!(kinds.len() <= FIRST_PASS, "{p:?}");
        }
        // 3000^3: the model's plan's tail twin is timed in the first stage.
        let p = Problem::shape(3000, 3000, 3000, 1);
        let (model, all) = tf32_space(&p);
        let first = stage_one(&model, &all);
        assert!(
            first
                .iter()
                .any(|x| x.tail && Choice::of(&x.with_tail(false)) == Choice::of(&model)),
            "{model:?} {first:#?}"
        );
    }

    /// A fake GPU: each plan's time is a function of its configuration and split (microseconds
    /// per run), optionally failing, noisy in the first round.
    struct Fake<F: Fn(&Plan) -> Option<f64>> {
        cost: F,
        warmed: Vec<Plan>,
        timed: Vec<(Plan, u32)>,
        noise: f64,
    }

    impl<F: Fn(&Plan) -> Option<f64>> Timer for Fake<F> {
        fn warm(&mut self, plan: &Plan) -> Result<()> {
            self.warmed.push(*plan);
            (self.cost)(plan)
                .map(|_| ())
                .ok_or_else(|| Error::invalid("fake", "fails"))
        }
        fn time_us(&mut self, plan: &Plan, reps: u32) -> Result<f64> {
            let first = !self
                .timed
                .iter()
                .any(|(p, _)| Choice::of(p) == Choice::of(plan));
            self.timed.push((*plan, reps));
            let t = (self.cost)(plan).ok_or_else(|| Error::invalid("fake", "fails"))?;
            Ok(if first { t * (1.0 + self.noise) } else { t })
        }
    }

    /// [`tune`] with the real budget: the chosen plan and every candidate's time.
    fn run(model: &Plan, all: &[Plan], t: &mut dyn Timer) -> (Option<Plan>, Vec<(Plan, f64)>) {
        let r = tune(model, all, t, WARM_BUDGET);
        assert!(r.complete, "an instant fake never runs out of budget");
        (r.chosen, r.timed)
    }

    /// A cost for [`fake`]: each listed plan at its price (the last entry for a plan wins, so
    /// that a test can reprice one), every other plan at `rest` microseconds.
    fn priced(table: Vec<(Choice, f64)>, rest: f64) -> impl Fn(&Plan) -> Option<f64> {
        move |x: &Plan| {
            let c = Choice::of(x);
            Some(table.iter().rev().find(|e| e.0 == c).map_or(rest, |e| e.1))
        }
    }

    fn fake<F: Fn(&Plan) -> Option<f64>>(cost: F) -> Fake<F> {
        Fake {
            cost,
            warmed: Vec::new(),
            timed: Vec::new(),
            noise: 0.0,
        }
    }

    #[test]
    fn the_fastest_candidate_is_chosen_and_the_cost_is_bounded() {
        for p in shapes() {
            let (model, all) = tf32_space(&p);
            assert!(
                all.iter().any(|x| Choice::of(x) == Choice::of(&model)),
                "{p:?}"
            );
            let first = stage_one(&model, &all);
            assert_eq!(Choice::of(&first[0]), Choice::of(&model));
            assert!(first.len() <= STAGE_ONE);
            // The model is exact: nothing moves it, except a tail plan the model prices
            // cheaper (the model's own choice is the best whole-tile plan; tail plans are timed
            // by the first stage's second pass and the second stage): the choice is the
            // cheapest candidate timed, the model's plan or a tail plan.
            let mut t = fake(|x: &Plan| Some(x.estimate_us));
            let (chosen, timed) = run(&model, &all, &mut t);
            let chosen = chosen.unwrap();
            let cheapest = timed
                .iter()
                .map(|x| x.0.estimate_us)
                .fold(f64::INFINITY, f64::min);
            assert!(
                Choice::of(&chosen) == Choice::of(&model)
                    || (chosen.tail && chosen.estimate_us < model.estimate_us),
                "{p:?}: {chosen:?}"
            );
            assert!(
                chosen.estimate_us <= cheapest * (1.0 + KEEP_MARGIN),
                "{p:?}: {chosen:?}"
            );
            assert!(timed.len() <= STAGE_ONE + STAGE_TWO + SIBLINGS);
            assert_eq!(t.warmed.len(), timed.len());
            // Two rounds each, and the confirmation's rounds of two or three finalists.
            let confirmed = t.timed.len() - ROUNDS * timed.len();
            assert!(
                confirmed == 0 || (2..=FINALISTS).any(|k| confirmed == k * CONFIRM_ROUNDS),
                "{confirmed} timings beyond the stages' rounds"
            );
            // The model's last first-stage candidate is really 3x faster than it thinks.
            if first.len() > 1 {
                let fast = Choice::of(first.last().unwrap());
                let mut t = fake(|x: &Plan| {
                    Some(
                        x.estimate_us
                            / if Choice::of(x) == fast {
                                3.0 * WITHIN
                            } else {
                                1.0
                            },
                    )
                });
                let (chosen, _) = run(&model, &all, &mut t);
                assert_eq!(Choice::of(&chosen.unwrap()), fast, "{p:?}");
            }
        }
    }

    #[test]
    fn the_second_stage_finds_a_better_split_of_the_winner() {
        let p = Problem::shape(128, 128, 65536, 1);
        let (model, all) = tf32_space(&p);
        // Real times: the model's configuration, one split factor up, is best by far.
        let splits: Vec<u32> = {
            let mut v: Vec<u32> = all
                .iter()
                .filter(|x| x.config.name == model.config.name && x.operands == model.operands)
                .map(|x| x.splits)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let i = splits.iter().position(|&s| s == model.splits).unwrap();
        let Some(&better) = splits.get(i + 1) else {
            return;
        };
        let mut t = fake(|x: &Plan| {
            Some(
                if x.config.name == model.config.name && x.splits == better {
                    1.0
                } else {
                    x.estimate_us.max(10.0)
                },
            )
        });
        let chosen = run(&model, &all, &mut t).0.unwrap();
        assert_eq!(
            (chosen.config.name, chosen.splits),
            (model.config.name, better)
        );
    }

    #[test]
    fn noise_failures_and_margins() {
        let p = Problem::shape(2048, 3000, 1000, 1);
        let (model, all) = tf32_space(&p);
        let first = stage_one(&model, &all);
        assert!(first.len() > 2);
        let other = Choice::of(&first[1]);
        // Within the margin the model's plan stays.
        let mut t = fake(|x: &Plan| Some(if Choice::of(x) == other { 99.5 } else { 100.0 }));
        assert_eq!(
            Choice::of(&run(&model, &all, &mut t).0.unwrap()),
            Choice::of(&model)
        );
        // A candidate slow only in its first round (a cold clock) still wins on its best round.
        let mut t = fake(|x: &Plan| Some(if Choice::of(x) == other { 50.0 } else { 100.0 }));
        t.noise = 4.0;
        assert_eq!(Choice::of(&run(&model, &all, &mut t).0.unwrap()), other);
        // Failing candidates are skipped; when all fail, the model's plan stays.
        let mut t = fake(|x: &Plan| {
            if Choice::of(x) == other {
                None
            } else {
                Some(x.estimate_us)
            }
        });
        let (chosen, timed) = run(&model, &all, &mut t);
        assert_ne!(Choice::of(&chosen.unwrap()), other);
        assert!(timed
            .iter()
            .any(|(x, us)| Choice::of(x) == other && us.is_infinite()));
        // When every candidate fails nothing is chosen, and the model's own error is kept (the
        // caller then runs the model's plan, or returns that error if it left C unwritten).
        let mut t = fake(|_: &Plan| None);
        let r = tune(&model, &all, &mut t, WARM_BUDGET);
        assert!(r.chosen.is_none());
        assert!(r.model_error.unwrap().to_string().contains("fails"));
        // The model's plan failing alone: another is chosen, the error is kept.
        let m = Choice::of(&model);
        let mut t = fake(|x: &Plan| (Choice::of(x) != m).then_some(x.estimate_us));
        let r = tune(&model, &all, &mut t, WARM_BUDGET);
        assert_ne!(Choice::of(&r.chosen.unwrap()), m);
        assert!(r.model_error.is_some());
        assert_eq!(fastest(&[f64::INFINITY, f64::INFINITY]), None);
        assert_eq!(fastest(&[f64::INFINITY, 3.0, 2.0]), Some(2));
        assert_eq!(fastest(&[2.01, 3.0, 2.0]), Some(0));
    }

    /// A timer whose untimed runs take 20 ms each (kernels being compiled).
    struct Slow(Vec<Plan>);
    impl Timer for Slow {
        fn warm(&mut self, plan: &Plan) -> Result<()> {
            std::thread::sleep(Duration::from_millis(20));
            self.0.push(*plan);
            Ok(())
        }
        fn time_us(&mut self, plan: &Plan, _reps: u32) -> Result<f64> {
            Ok(plan.estimate_us)
        }
    }

    /// Each `wgmma` tile in reach (the clustered ones too) is timed with P from registers and
    /// with P from shared memory (packed or straight from the copies): at 2500x2500x500 version
    /// 10's model put every tile's register layouts first, and the fastest plan measured on the
    /// H100 was the ping-pong tile with both operands packed.
    #[test]
    fn the_first_stage_times_each_wgmma_tile_with_both_sources_of_p() {
        let p = Problem::shape(2500, 2500, 500, 1);
        let (model, all) = tf32_space(&p);
        assert!(model.operands.p.in_registers(), "{model:?}");
        let first = stage_one(&model, &all);
        assert!(first.len() <= STAGE_ONE);
        assert_eq!(Choice::of(&first[0]), Choice::of(&model));
        for name in [
            "wgmma_128x256",
            "wgmma_128x128",
            "wgmma_128x128_pp",
            "wgmma_128x256_c2",
            "wgmma_128x128_pp_c2",
        ] {
            for regs in [false, true] {
                assert!(
                    first
                        .iter()
                        .any(|x| x.config.name == name && x.operands.p.in_registers() == regs),
                    "{name} P in registers={regs}: {first:#?}"
                );
            }
        }
        // One plan per tile and source of P.
        for (i, a) in first.iter().enumerate() {
            for b in &first[i + 1..] {
                assert!(
                    a.config.name != b.config.name
                        || a.operands.p.in_registers() != b.operands.p.in_registers()
                        || (a.splits, a.tail) != (b.splits, b.tail)
                );
            }
        }
        // Rows that straddle 32-byte sectors (2500: A's 2000 bytes, B's 10000) keep the packed
        // ping-pong plan, the fastest the H100 ran there (version 15), as that tile's plan with P
        // in shared memory; 32-byte aligned rows (2504) put P:ks there instead.
        let has = |first: &[Plan], name: &str, ops: Operands| {
            first
                .iter()
                .any(|x| x.config.name == name && x.operands == ops)
        };
        assert!(
            has(&first, "wgmma_128x128_pp", Operands::PACKED),
            "{first:#?}"
        );
        let q = Problem::shape(2504, 2504, 504, 1);
        let (model, all) = tf32_space(&q);
        let aligned = stage_one(&model, &all);
        let ks = Operands {
            swap: false,
            p: Source::TmaKMajorShared,
            q_tma: false,
        };
        assert!(has(&aligned, "wgmma_128x128_pp", ks), "{aligned:#?}");
        assert!(!has(&aligned, "wgmma_128x128_pp", Operands::PACKED));
    }

    /// Where split-K decides, each configuration is timed at its two best split factors by the
    /// model: at 192x160x32768 FP32 the H100 ran `sgemm_64x64` s48 17 % faster than any plan the
    /// tuner timed, and the model puts s48 16 % behind that tile's s64.
    #[test]
    fn the_first_stage_times_a_second_split_factor_of_each_configuration() {
        let dev = h200();
        let p = Problem::shape(192, 160, 32768, 1);
        let all = enumerate(Precision::Fp32, &p, &dev, &Paths::default()).unwrap();
        let model = plan::choose(Precision::Fp32, &p, &dev, &Paths::default()).unwrap();
        let first = stage_one(&model, &all);
        assert!(first.len() <= STAGE_ONE);
        assert_eq!(Choice::of(&first[0]), Choice::of(&model));
        let splits = |name: &str| {
            let mut v: Vec<u32> = first
                .iter()
                .filter(|x| x.config.name == name)
                .map(|x| x.splits)
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(splits("sgemm_64x64"), vec![48, 64], "{first:#?}");
        // Every first-stage plan once, every configuration at most twice.
        for (i, a) in first.iter().enumerate() {
            assert!(first[i + 1..]
                .iter()
                .all(|b| Choice::of(a) != Choice::of(b)));
            assert!(
                first
                    .iter()
                    .filter(|b| b.config.name == a.config.name)
                    .count()
                    <= 2
            );
        }
        // The first pass (one plan per configuration) comes first and is unchanged.
        assert!(first[..6].iter().all(|a| first[..6]
            .iter()
            .filter(|b| b.config.name == a.config.name)
            .count()
            == 1));
    }

    #[test]
    fn the_untimed_runs_stop_at_the_budget_and_the_choice_is_partial() {
        let p = Problem::shape(2048, 3000, 1000, 1);
        let (model, all) = tf32_space(&p);
        assert!(stage_one(&model, &all).len() > 3);
        let mut t = Slow(Vec::new());
        let r = tune(&model, &all, &mut t, Duration::from_millis(30));
        assert!(!r.complete);
        // The model's plan always runs; the budget stops the untimed runs after it is spent.
        assert!((1..=2).contains(&t.0.len()), "{} run", t.0.len());
        assert_eq!(Choice::of(&t.0[0]), Choice::of(&model));
        let ran = r.timed.iter().filter(|x| x.1.is_finite()).count();
        assert_eq!(ran, t.0.len());
        assert!(t
            .0
            .iter()
            .any(|x| Choice::of(x) == Choice::of(&r.chosen.unwrap())));
        // No budget at all: the model's plan alone.
        let mut t = Slow(Vec::new());
        let r = tune(&model, &all, &mut t, Duration::ZERO);
        assert_eq!(t.0.len(), 1);
        assert_eq!(Choice::of(&r.chosen.unwrap()), Choice::of(&model));
        assert!(!r.complete);
    }

    /// The second stage times its base's twin with the other tail choice first (2500x2500x500:
    /// the ping-pong tile's last wave is 4 tiles of 400).
    #[test]
    fn the_second_stage_times_the_tail_twin_of_its_base_first() {
        let p = Problem::shape(2500, 2500, 500, 1);
        let (_, all) = tf32_space(&p);
        let base = *all
            .iter()
            .find(|x| x.config.name == "wgmma_128x128_pp" && !x.tail)
            .expect("a whole-tile ping-pong plan");
        let twin = Choice::of(&base.with_tail(true));
        assert!(all.iter().any(|x| Choice::of(x) == twin));
        let next = stage_two(&[base], &all, &[base]);
        assert_eq!(Choice::of(&next[0]), twin, "{next:#?}");
        let back = stage_two(&[base.with_tail(true)], &all, &[base.with_tail(true)]);
        assert_eq!(Choice::of(&back[0]), Choice::of(&base), "{back:#?}");
    }

    /// The second stage times the base's sibling tiles in its operand layout (3000x2000x300 on
    /// an H100: the cooperative 128x128 with both operands packed won the first stage, and the
    /// ping-pong 128x128 in that layout, which the first stage had timed only with P:ks Q:pack,
    /// ran 7 % faster).
    #[test]
    fn the_second_stage_times_sibling_tiles_in_the_winners_layout() {
        let p = Problem::shape(3000, 2000, 300, 1);
        let (model, all) = tf32_space(&p);
        let base = *all
            .iter()
            .find(|x| {
                x.config.name == "wgmma_128x128"
                    && x.operands == Operands::PACKED
                    && x.splits == 1
                    && !x.tail
            })
            .expect("the cooperative 128x128 with packed operands");
        let first = stage_one(&model, &all);
        let next = stage_two(&[base], &all, &first);
        assert!(next.len() <= STAGE_TWO);
        let pp = next
            .iter()
            .find(|x| x.config.name == "wgmma_128x128_pp")
            .unwrap_or_else(|| panic!("no ping-pong sibling: {next:#?}"));
        assert_eq!(pp.operands, base.operands);
        assert_eq!((pp.splits, pp.tail), (base.splits, base.tail));
        let siblings = next
            .iter()
            .filter(|x| x.config.name != base.config.name)
            .count();
        assert!((1..=SIBLINGS).contains(&siblings), "{next:#?}");
        // Nothing the first stage timed comes again.
        for x in &next {
            assert!(first.iter().all(|f| Choice::of(f) != Choice::of(x)));
        }
    }

    /// A second-stage plan that wins has its own sibling tiles timed in a third stage: at
    /// 3000x2000x300 a plan found only in the second stage beats the first stage, and one of its
    /// siblings, which neither stage timed, is faster still: that sibling is chosen.
    #[test]
    fn a_second_stage_winner_has_its_siblings_timed() {
        let p = Problem::shape(3000, 2000, 300, 1);
        let (model, all) = tf32_space(&p);
        let first = stage_one(&model, &all);
        let bases = [first[0], first[1]];
        let second = stage_two(&bases, &all, &first);
        let mut earlier: Vec<Plan> = first.clone();
        earlier.extend_from_slice(&second);
        // A second-stage plan with a sibling that neither stage times.
        let (y, z) = second
            .iter()
            .find_map(|y| {
                siblings(y, &all, &earlier, 1)
                    .first()
                    .map(|z| (Choice::of(y), Choice::of(z)))
            })
            .expect("a second-stage plan with an untimed sibling");
        let (w, r) = (Choice::of(&first[0]), Choice::of(&first[1]));
        let prices = vec![(w, 100.0), (r, 105.0), (y, 80.0), (z, 60.0)];
        let mut t = fake(priced(prices.clone(), 1000.0));
        let (chosen, timed) = run(&model, &all, &mut t);
        assert_eq!(Choice::of(&chosen.unwrap()), z, "{timed:#?}");
        assert!(timed.len() <= first.len() + STAGE_TWO + SIBLINGS);
        // Without a second-stage winner there is no third stage.
        let mut t = fake(priced([prices, vec![(y, 200.0)]].concat(), 1000.0));
        let (chosen, timed) = run(&model, &all, &mut t);
        assert_eq!(Choice::of(&chosen.unwrap()), w);
        assert_eq!(timed.len(), first.len() + second.len());
    }

    #[test]
    fn the_second_stage_explores_a_close_runner_up_too() {
        let p = Problem::shape(2048, 3000, 1000, 1);
        let (model, all) = tf32_space(&p);
        let first = stage_one(&model, &all);
        let (w, r) = (Choice::of(&first[0]), Choice::of(&first[1]));
        let near = stage_two(&[first[1]], &all, &first);
        assert!(!near.is_empty(), "{:?} has neighbours", first[1]);
        let best = Choice::of(&near[0]);
        // The winner at 100, the runner-up at 105 (within 10 %), its neighbour at 50.
        let prices = vec![(w, 100.0), (r, 105.0), (best, 50.0)];
        let mut t = fake(priced(prices.clone(), 1000.0));
        assert_eq!(Choice::of(&run(&model, &all, &mut t).0.unwrap()), best);
        // A runner-up 20 % behind is not explored.
        let mut t = fake(priced([prices, vec![(r, 120.0)]].concat(), 1000.0));
        assert_eq!(Choice::of(&run(&model, &all, &mut t).0.unwrap()), w);
        // Both bases share the stage.
        let two = stage_two(&[first[0], first[1]], &all, &first);
        assert!(two.len() <= STAGE_TWO);
        assert!(two.iter().any(|x| x.config.name == first[1].config.name));
    }

    #[test]
    fn repetitions_keep_rounds_short_and_modes_parse() {
        assert_eq!(reps_for(5.0), MAX_REPS);
        assert_eq!(reps_for(250.0), 2);
        assert_eq!(reps_for(5000.0), 1);
        assert_eq!(TuneMode::parse(" OFF"), Some(TuneMode::Off));
        assert_eq!(TuneMode::parse("auto"), Some(TuneMode::On));
        assert_eq!(TuneMode::parse(""), Some(TuneMode::On));
        assert_eq!(TuneMode::default(), TuneMode::On);
        assert_eq!(TuneMode::parse("Fresh"), Some(TuneMode::Fresh));
        assert_eq!(TuneMode::parse("sometimes"), None);
        // Every family the planner may use appears in some class's enumeration on an H200.
        let dev = h200();
        let fams: std::collections::HashSet<Family> = [Precision::Tf32, Precision::Fp32]
            .iter()
            .flat_map(|&pr| {
                enumerate(
                    pr,
                    &Problem::shape(4096, 4096, 4096, 1),
                    &dev,
                    &Paths::default(),
                )
                .unwrap()
            })
            .map(|x| x.config.family)
            .collect();
        assert_eq!(fams.len(), 4);
        assert!(WGMMA_CONFIGS
            .iter()
            .all(|c| plan::config_by_name(c.name).is_some()));
    }
}
