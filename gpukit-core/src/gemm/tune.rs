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
//!    share a class, 1025 is the next), the batch likewise, the transposes, the tensor-map
//!    alignment of A and B and the paths ([`Paths`]), on one device identity ([`DeviceKey`]:
//!    name, compute capability, SM count, driver and NVRTC versions) and one plan space
//!    ([`plan_space`]: a hash of [`PLAN_SPACE_VERSION`], every tile configuration, the split
//!    factors and the GEMM kernels' sources, so that a changed kernel never inherits a stale
//!    choice).
//! 2. **Candidates** ([`stage_one`], [`stage_two`]): the model's plan, then the model's best plan
//!    of every other tile configuration whose estimate is within [`WITHIN`] of the best (at
//!    most [`STAGE_ONE`] in all); after they are timed, the winner's neighbours (the split factors
//!    next to its own, its other operand layouts: at most [`STAGE_TWO`]).
//! 3. **Timing** ([`measure`]): each candidate runs once untimed (kernel compile and load), then
//!    [`ROUNDS`] rounds, candidates interleaved, of `reps` back-to-back runs between two CUDA
//!    events (`reps` sized so a round lasts about [`ROUND_TARGET_US`], at most [`MAX_REPS`]);
//!    a candidate's time is its best round. The model's plan is kept unless another is more than
//!    [`KEEP_MARGIN`] faster (noise never flips a choice). A candidate that fails to run (out of
//!    memory under a quota, for instance) is skipped.
//! 4. **Where it runs**: on the caller's stream, before the product itself, reading the caller's
//!    A and B (which the product reads anyway) and writing a scratch C from the device's
//!    allocator (charged to the current owner, returned in stream order): never the caller's C.
//!    The host waits for the timing events once per class. Products whose model estimate is
//!    above [`MAX_TUNED_US`] are not tuned (the model is calibrated where products are large,
//!    and one timing round would cost as much as many products); nor is a product enqueued while
//!    the stream is being captured into a CUDA graph, nor one whose scratch C cannot be
//!    allocated: those take the model's plan.
//! 5. **Cost**: at most `STAGE_ONE + STAGE_TWO` candidates x (1 + ROUNDS x reps) runs, about
//!    `12 x (1 + 2 x 2) ~ 60` products of a 250 us shape (15 ms), `12 x 3 = 36` of a 5 ms one,
//!    plus the first compile of each candidate kernel not yet in the kernel cache; paid once per
//!    class and device, then read from disk by every later process.
//! 6. **Disk**: one small text file per class under `<kernel cache dir>/gemm-tuning/` (the
//!    kernel cache's directory, `GPUKIT_CACHE_DIR`; none when `GPUKIT_CACHE=off`), written
//!    atomically (a temporary file renamed). A file is trusted only if it is a regular file
//!    (symbolic links and FIFOs are not followed or read), at most [`MAX_FILE_BYTES`], whose
//!    header, full class key and checksum match and whose plan is one of the current plan space
//!    that fits the product ([`Choice::plan_for`]); anything else is ignored (counted in
//!    [`TuneStats::rejected_files`]) and replaced by a fresh measurement. A file can at worst
//!    name a slower plan of ours, never an invalid one.
//!
//! `GPUKIT_GEMM_TUNE` ([`TUNE_ENV`]): `off` (the default: the model's plan always,
//! deterministic, no timing, no files read or written), `on` (also `auto`) or `fresh` (ignore the files,
//! measure each class again once in this process and write the result: what `gemm_bench` uses
//! so that its column reflects a measurement of its own). Any other value is an error naming the
//! variable. Tuning is off by default in this version: on the H200 its GPU test
//! (`autotuner_measures_a_class_once_and_its_choice_runs_correctly`) found the product of a
//! freshly tuned class left unwritten (the poisoned output read back as NaN); until that is
//! found and fixed, only an explicit `on` / `fresh` measures.

use super::desc::Precision;
use super::kernels;
use super::path::Paths;
use super::plan::{self, config_by_name, Operands, Plan, Problem, Source, SPLIT_CANDIDATES};
use crate::attributes::DeviceAttributes;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The environment variable that switches the autotuner.
pub const TUNE_ENV: &str = "GPUKIT_GEMM_TUNE";
/// Bumped when the meaning of a stored choice changes (part of [`plan_space`]).
pub const PLAN_SPACE_VERSION: u32 = 1;
/// Most candidates of the first stage.
pub const STAGE_ONE: usize = 8;
/// Most candidates of the second stage.
pub const STAGE_TWO: usize = 4;
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
/// Largest tuning file read.
pub const MAX_FILE_BYTES: u64 = 4096;
/// Subdirectory of the kernel cache's directory that holds the tuning files.
pub const DIR_NAME: &str = "gemm-tuning";

/// What `GPUKIT_GEMM_TUNE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TuneMode {
    /// Measured choices, read from and written to disk.
    On,
    /// The model's plan, always (the default).
    #[default]
    Off,
    /// Measure each class again once in this process (files not read; results written).
    Fresh,
}

impl TuneMode {
    /// Parses `on` / `auto`, `off` or `fresh` (any case, blanks ignored); `None` otherwise.
    pub fn parse(s: &str) -> Option<TuneMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "on" | "auto" => Some(TuneMode::On),
            "" | "off" => Some(TuneMode::Off),
            "fresh" => Some(TuneMode::Fresh),
            _ => None,
        }
    }

    /// The mode `GPUKIT_GEMM_TUNE` asks for ([`TuneMode::Off`] when unset).
    pub fn from_env() -> Result<TuneMode> {
        match std::env::var_os(TUNE_ENV) {
            None => Ok(TuneMode::Off),
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
             m={} n={} k={} batch={} ta={} tb={} amap={} bmap={} paths={:?}/{:?}/{}/{}",
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
            self.paths.tf32,
            self.paths.fp32,
            self.paths.tma as u8,
            self.paths.tma_rounding as u8,
        )
    }

    /// The file of this class in `dir`.
    pub fn file_in(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{:016x}.tune", fnv64(self.text().as_bytes())))
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
}

impl Choice {
    /// The choice a plan represents.
    pub fn of(plan: &Plan) -> Choice {
        Choice {
            config: plan.config.name,
            splits: plan.splits,
            operands: plan.operands,
            persistent: plan.max_blocks > 0,
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
            || !plan::operand_choices(config.family, p, paths).contains(&self.operands)
        {
            return None;
        }
        let est = plan::estimate(&config, p, self.splits, &self.operands, dev);
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
            estimate_us: est * 1e6,
        })
    }

    /// The file form: one line `choice <config> <splits> <swap> <p> <q_tma> <persistent>`.
    fn line(&self) -> String {
        format!(
            "choice {} {} {} {} {} {}",
            self.config,
            self.splits,
            self.operands.swap as u8,
            self.operands.p.code(),
            self.operands.q_tma as u8,
            self.persistent as u8
        )
    }

    fn parse(line: &str) -> Option<Choice> {
        let w: Vec<&str> = line.split(' ').collect();
        let [tag, config, splits, swap, p, q, pers] = w.as_slice() else {
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
        })
    }
}

const HEADER: &str = "gpukit gemm tuning v1";

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

/// Reads a tuning file: a regular file (symbolic links are not followed, FIFOs and devices are
/// not read) of at most [`MAX_FILE_BYTES`] bytes of UTF-8. `None` when absent, `Some(Err)` when
/// present but unusable.
pub fn read_file(path: &Path) -> Option<std::result::Result<String, String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(format!("opening {}: {e}", path.display()))),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Some(Err(e.to_string())),
    };
    if !meta.is_file() {
        return Some(Err(format!("{} is not a regular file", path.display())));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Some(Err(format!(
            "{} is larger than {MAX_FILE_BYTES} bytes",
            path.display()
        )));
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes) {
        return Some(Err(e.to_string()));
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Some(Err(format!(
            "{} grew past {MAX_FILE_BYTES} bytes",
            path.display()
        )));
    }
    Some(String::from_utf8(bytes).map_err(|_| "not UTF-8".to_string()))
}

/// Writes `text` to `path` atomically (a temporary file beside it, then a rename).
pub fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("tune"),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Counters of the tuner (monotonic, process-wide).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TuneStats {
    /// Classes measured in this process.
    pub tuned: u64,
    /// Classes found in memory.
    pub memory_hits: u64,
    /// Classes read from disk.
    pub disk_hits: u64,
    /// Files ignored as garbled, foreign or naming no valid plan.
    pub rejected_files: u64,
    /// Files that could not be written.
    pub write_errors: u64,
    /// Products that took the model's plan untuned (too long, stream capture, no scratch).
    pub untuned: u64,
    /// Candidate timings that failed (the candidate was skipped).
    pub failed_candidates: u64,
    /// Candidates timed in all.
    pub timed_candidates: u64,
}

#[derive(Default)]
struct Counters {
    tuned: AtomicU64,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    rejected_files: AtomicU64,
    write_errors: AtomicU64,
    untuned: AtomicU64,
    failed_candidates: AtomicU64,
    timed_candidates: AtomicU64,
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
        memory_hits: g(&c.memory_hits),
        disk_hits: g(&c.disk_hits),
        rejected_files: g(&c.rejected_files),
        write_errors: g(&c.write_errors),
        untuned: g(&c.untuned),
        failed_candidates: g(&c.failed_candidates),
        timed_candidates: g(&c.timed_candidates),
    }
}

pub(super) fn count_untuned() {
    counters().untuned.fetch_add(1, Ordering::Relaxed);
}

/// The first stage's candidates: `model` (the planner's plan) first, then the best plan of each
/// other configuration of `all` ([`plan::enumerate`], cheapest first) within [`WITHIN`] of the
/// best estimate, at most [`STAGE_ONE`].
pub fn stage_one(model: &Plan, all: &[Plan]) -> Vec<Plan> {
    let best = all
        .first()
        .map_or(model.estimate_us, |p| p.estimate_us)
        .min(model.estimate_us);
    let mut v = vec![*model];
    for p in all {
        if v.len() >= STAGE_ONE || p.estimate_us > WITHIN * best {
            break;
        }
        if v.iter().all(|q| q.config.name != p.config.name) {
            v.push(*p);
        }
    }
    v
}

/// The second stage's candidates around the first stage's winner `w`: the plans of `all` with
/// its configuration and the split factors next to its own (same operands and grid), then its
/// configuration and split with other operand layouts; none of `timed`; at most
/// [`STAGE_TWO`].
pub fn stage_two(w: &Plan, all: &[Plan], timed: &[Plan]) -> Vec<Plan> {
    let same = |p: &Plan| p.config.name == w.config.name;
    let mut splits: Vec<u32> = all
        .iter()
        .filter(|p| same(p) && p.operands == w.operands)
        .map(|p| p.splits)
        .collect();
    splits.sort_unstable();
    splits.dedup();
    let at = splits.iter().position(|&s| s == w.splits);
    let mut want: Vec<(u32, Option<Operands>)> = Vec::new();
    if let Some(i) = at {
        if i > 0 {
            want.push((splits[i - 1], Some(w.operands)));
        }
        if i + 1 < splits.len() {
            want.push((splits[i + 1], Some(w.operands)));
        }
    }
    want.push((w.splits, None));
    let mut v: Vec<Plan> = Vec::new();
    for (s, ops) in want {
        for p in all.iter().filter(|p| {
            same(p)
                && p.splits == s
                && ops.is_none_or(|o| p.operands == o)
                && (ops.is_some() || p.operands != w.operands)
        }) {
            let seen = |q: &Plan| Choice::of(q) == Choice::of(p);
            if v.len() < STAGE_TWO && !timed.iter().any(seen) && !v.iter().any(seen) {
                v.push(*p);
            }
        }
    }
    v
}

/// Times plans on the GPU (or, in tests, a fake).
pub trait Timer {
    /// Microseconds per run of `plan` over `reps` back-to-back runs (after it ran at least once
    /// before: [`Timer::warm`]); `Err` when the plan cannot run here.
    fn time_us(&mut self, plan: &Plan, reps: u32) -> Result<f64>;
    /// Runs `plan` once, untimed (compiles and loads its kernels).
    fn warm(&mut self, plan: &Plan) -> Result<()>;
}

/// Back-to-back runs per timed round for a plan estimated at `estimate_us`.
pub fn reps_for(estimate_us: f64) -> u32 {
    ((ROUND_TARGET_US / estimate_us.max(1.0)).round() as u32).clamp(1, MAX_REPS)
}

/// Times `cands` ([`ROUNDS`] interleaved rounds after one untimed run each): each candidate's
/// best round in microseconds per run, infinite for one that failed.
pub fn measure(cands: &[Plan], timer: &mut dyn Timer) -> Vec<f64> {
    let mut t = vec![f64::INFINITY; cands.len()];
    let mut ok: Vec<bool> = cands.iter().map(|p| timer.warm(p).is_ok()).collect();
    for _ in 0..ROUNDS {
        for (i, p) in cands.iter().enumerate() {
            if !ok[i] {
                continue;
            }
            match timer.time_us(p, reps_for(p.estimate_us)) {
                Ok(us) if us.is_finite() && us > 0.0 => t[i] = t[i].min(us),
                _ => ok[i] = false,
            }
        }
    }
    for (i, good) in ok.iter().enumerate() {
        if !good {
            t[i] = f64::INFINITY;
            counters().failed_candidates.fetch_add(1, Ordering::Relaxed);
        }
    }
    t
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

/// The tuning of one product: both stages. Returns the chosen plan and every timed candidate
/// with its time (microseconds; infinite for a failure). `model` must be one of `all` or not;
/// both stages draw from `all`.
pub fn tune(model: &Plan, all: &[Plan], timer: &mut dyn Timer) -> (Plan, Vec<(Plan, f64)>) {
    let first = stage_one(model, all);
    let t1 = measure(&first, timer);
    let mut timed: Vec<(Plan, f64)> = first.iter().copied().zip(t1.iter().copied()).collect();
    let Some(w) = fastest(&t1) else {
        return (*model, timed);
    };
    let winner = first[w];
    let plans: Vec<Plan> = timed.iter().map(|x| x.0).collect();
    let second = stage_two(&winner, all, &plans);
    if second.is_empty() {
        return (winner, timed);
    }
    let t2 = measure(&second, timer);
    timed.extend(second.iter().copied().zip(t2.iter().copied()));
    let best2 = t2
        .iter()
        .enumerate()
        .filter(|(_, t)| t.is_finite())
        .min_by(|a, b| a.1.total_cmp(b.1));
    match best2 {
        Some((j, &t)) if t * (1.0 + KEEP_MARGIN) < t1[w] => (second[j], timed),
        _ => (winner, timed),
    }
}

/// The choices known in this process, by class.
fn memory() -> &'static Mutex<HashMap<ClassKey, Choice>> {
    static M: OnceLock<Mutex<HashMap<ClassKey, Choice>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Most classes kept in memory before the map starts over.
const MEMORY_CLASSES: usize = 4096;

/// Where the tuning files go: `<kernel cache dir>/gemm-tuning`, or `None` without a disk cache.
pub fn disk_dir() -> Option<PathBuf> {
    gpukit_jit::KernelCache::global()
        .ok()
        .and_then(|c| c.disk_dir().map(|d| d.join(DIR_NAME)))
}

/// The stored choice of `key` under `mode`: from memory, else (mode `On`) from the file in `dir`,
/// validated for `p` ([`Choice::plan_for`]). Files that are present but unusable are counted as
/// rejected.
pub fn lookup(
    key: &ClassKey,
    mode: TuneMode,
    dir: Option<&Path>,
    p: &Problem,
    dev: &DeviceAttributes,
) -> Option<Plan> {
    if mode == TuneMode::Off {
        return None;
    }
    let c = counters();
    let known = memory().lock().ok().and_then(|m| m.get(key).copied());
    if let Some(choice) = known {
        if let Some(plan) = choice.plan_for(key.precision, p, dev, &key.paths) {
            c.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Some(plan);
        }
    }
    if mode != TuneMode::On {
        return None;
    }
    let path = key.file_in(dir?);
    let text = match read_file(&path)? {
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
            remember(key, choice);
            Some(plan)
        }
        None => {
            c.rejected_files.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

fn remember(key: &ClassKey, choice: Choice) {
    if let Ok(mut m) = memory().lock() {
        if m.len() >= MEMORY_CLASSES {
            m.clear();
        }
        m.insert(key.clone(), choice);
    }
}

/// Records a measured choice: in memory, and (unless `dir` is `None`) in its file.
pub fn store(key: &ClassKey, choice: Choice, times: &[(Plan, f64)], dir: Option<&Path>) {
    counters().tuned.fetch_add(1, Ordering::Relaxed);
    counters()
        .timed_candidates
        .fetch_add(times.len() as u64, Ordering::Relaxed);
    remember(key, choice);
    if let Some(dir) = dir {
        let named: Vec<(String, f64)> = times
            .iter()
            .map(|(p, t)| {
                (
                    format!("{} s{} {}", p.config.name, p.splits, p.operands.label()),
                    *t,
                )
            })
            .collect();
        if write_file(&key.file_in(dir), &file_text(key, &choice, &named)).is_err() {
            counters().write_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Forgets every choice held in memory (tests and benches that measure anew).
pub fn forget_memory() {
    if let Ok(mut m) = memory().lock() {
        m.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::tests::h200;
    use crate::gemm::plan::{enumerate, Family, WGMMA_CONFIGS};

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
                            back.max_blocks
                        ),
                        (
                            plan.config,
                            plan.splits,
                            plan.k_per_split,
                            plan.operands,
                            plan.max_blocks
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
        assert_eq!(forged("choice no_such_tile 1 0 0 0 0"), None);
        assert_eq!(forged("choice wgmma_128x256 1 0 3 0 0"), None);
        assert_eq!(forged("choice wgmma_128x256 1 0 0 0 0 extra"), None);
        let ok = forged("choice wgmma_128x256 5 0 0 0 1").unwrap();
        // Split 5 is not a split the planner uses; an SGEMM tile is not a TF32 plan; Q through
        // a tensor map is not possible with an unaligned B; wgmma does not run on an A100.
        assert_eq!(
            ok.plan_for(Precision::Tf32, &p, &dev, &Paths::default()),
            None
        );
        let sgemm = forged("choice sgemm_128x256 1 0 0 0 0").unwrap();
        assert_eq!(
            sgemm.plan_for(Precision::Tf32, &p, &dev, &Paths::default()),
            None
        );
        assert!(sgemm
            .plan_for(Precision::Fp32, &p, &dev, &Paths::default())
            .is_some());
        let tma = forged("choice wgmma_128x256 1 1 2 1 1").unwrap();
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
        d
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);

    #[test]
    fn files_are_read_only_when_regular_small_and_utf8() {
        let d = temp_dir("read");
        let f = d.join("a.tune");
        assert!(read_file(&f).is_none());
        write_file(&f, "hello").unwrap();
        assert_eq!(read_file(&f), Some(Ok("hello".into())));
        write_file(&f, "again").unwrap();
        assert_eq!(read_file(&f), Some(Ok("again".into())));
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        let big = d.join("big.tune");
        std::fs::write(&big, vec![b'x'; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(matches!(read_file(&big), Some(Err(_))));
        let bin = d.join("bin.tune");
        std::fs::write(&bin, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(read_file(&bin), Some(Err(_))));
        let link = d.join("link.tune");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(
            matches!(read_file(&link), Some(Err(_))),
            "a symlink is not followed"
        );
        let sub = d.join("dir.tune");
        std::fs::create_dir(&sub).unwrap();
        assert!(matches!(read_file(&sub), Some(Err(_))));
        // A FIFO with no writer must neither block nor be read.
        let fifo = d.join("fifo.tune");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(read_file(&fifo), Some(Err(_))));
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
        store(&k, c, &[(pick, 10.0)], Some(&d));
        // In memory.
        assert_eq!(
            lookup(&k, TuneMode::On, None, &p, &dev).map(|x| Choice::of(&x)),
            Some(c)
        );
        // Off never answers.
        assert_eq!(lookup(&k, TuneMode::Off, Some(&d), &p, &dev), None);
        // From disk in a fresh process (memory forgotten); another product of the class gets the
        // same choice, materialised for its own K.
        forget_memory();
        let before = stats();
        let q = Problem::shape(770, 1540, 2300, 1);
        let got = lookup(&k, TuneMode::On, Some(&d), &q, &dev).unwrap();
        assert_eq!(Choice::of(&got).config, c.config);
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
        let _ = std::fs::remove_dir_all(&d);
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
        let dev = h200();
        for p in shapes() {
            let all = enumerate(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
            let model = plan::choose(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
            assert!(
                all.iter().any(|x| Choice::of(x) == Choice::of(&model)),
                "{p:?}"
            );
            let first = stage_one(&model, &all);
            assert_eq!(Choice::of(&first[0]), Choice::of(&model));
            assert!(first.len() <= STAGE_ONE);
            // The model is exact: nothing moves it.
            let mut t = fake(|x: &Plan| Some(x.estimate_us));
            let (chosen, timed) = tune(&model, &all, &mut t);
            assert_eq!(Choice::of(&chosen), Choice::of(&model), "{p:?}");
            assert!(timed.len() <= STAGE_ONE + STAGE_TWO);
            assert_eq!(t.warmed.len(), timed.len());
            assert_eq!(t.timed.len(), ROUNDS * timed.len());
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
                let (chosen, _) = tune(&model, &all, &mut t);
                assert_eq!(Choice::of(&chosen), fast, "{p:?}");
            }
        }
    }

    #[test]
    fn the_second_stage_finds_a_better_split_of_the_winner() {
        let dev = h200();
        let p = Problem::shape(128, 128, 65536, 1);
        let all = enumerate(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
        let model = plan::choose(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
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
        let (chosen, _) = tune(&model, &all, &mut t);
        assert_eq!(
            (chosen.config.name, chosen.splits),
            (model.config.name, better)
        );
    }

    #[test]
    fn noise_failures_and_margins() {
        let dev = h200();
        let p = Problem::shape(2048, 3000, 1000, 1);
        let all = enumerate(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
        let model = plan::choose(Precision::Tf32, &p, &dev, &Paths::default()).unwrap();
        let first = stage_one(&model, &all);
        assert!(first.len() > 2);
        let other = Choice::of(&first[1]);
        // Within the margin the model's plan stays.
        let mut t = fake(|x: &Plan| Some(if Choice::of(x) == other { 99.5 } else { 100.0 }));
        assert_eq!(
            Choice::of(&tune(&model, &all, &mut t).0),
            Choice::of(&model)
        );
        // A candidate slow only in its first round (a cold clock) still wins on its best round.
        let mut t = fake(|x: &Plan| Some(if Choice::of(x) == other { 50.0 } else { 100.0 }));
        t.noise = 4.0;
        assert_eq!(Choice::of(&tune(&model, &all, &mut t).0), other);
        // Failing candidates are skipped; when all fail, the model's plan stays.
        let mut t = fake(|x: &Plan| {
            if Choice::of(x) == other {
                None
            } else {
                Some(x.estimate_us)
            }
        });
        let (chosen, timed) = tune(&model, &all, &mut t);
        assert_ne!(Choice::of(&chosen), other);
        assert!(timed
            .iter()
            .any(|(x, us)| Choice::of(x) == other && us.is_infinite()));
        let mut t = fake(|_: &Plan| None);
        assert_eq!(
            Choice::of(&tune(&model, &all, &mut t).0),
            Choice::of(&model)
        );
        assert_eq!(fastest(&[f64::INFINITY, f64::INFINITY]), None);
        assert_eq!(fastest(&[f64::INFINITY, 3.0, 2.0]), Some(2));
        assert_eq!(fastest(&[2.01, 3.0, 2.0]), Some(0));
    }

    #[test]
    fn repetitions_keep_rounds_short_and_modes_parse() {
        assert_eq!(reps_for(5.0), MAX_REPS);
        assert_eq!(reps_for(250.0), 2);
        assert_eq!(reps_for(5000.0), 1);
        assert_eq!(TuneMode::parse(" OFF"), Some(TuneMode::Off));
        assert_eq!(TuneMode::parse("auto"), Some(TuneMode::On));
        assert_eq!(TuneMode::parse(""), Some(TuneMode::Off));
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
