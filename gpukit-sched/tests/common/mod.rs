//! Helpers shared by the CPU-only test binaries ([`Scheduler::cpu_only`]: the scheduler's
//! planner, ledger, state machine, timer and workers without a device).
#![allow(dead_code)] // each test binary uses a part

use gpukit_sched::{Scheduler, SchedulerConfig, SmLayout, TaskContext, TaskHandle, TaskSpec};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub type R<T> = gpukit_sched::Result<T>;

pub const GRACE: Duration = Duration::from_millis(150);
/// Slack for a loaded 2-core build machine on every time bound below.
pub const SLACK: Duration = Duration::from_millis(250);

pub fn layout() -> SmLayout {
    SmLayout::with_groups(132, 8, 15, true).unwrap()
}

pub fn cfg() -> SchedulerConfig {
    SchedulerConfig::default()
        .workers(3)
        .stop_grace(GRACE)
        .shutdown_timeout(Duration::from_millis(200))
}

pub fn sched_with(capacity: u64, cfg: SchedulerConfig) -> Scheduler {
    Scheduler::cpu_only(layout(), capacity, cfg).unwrap()
}

pub fn sched(spin: Duration) -> Scheduler {
    sched_with(1 << 30, cfg().worker_spin(spin))
}

pub fn spec() -> TaskSpec {
    TaskSpec::new("t")
        .memory("1MiB", "1MiB")
        .compute(0.25, 0.25)
}

pub fn gate() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// A task body that holds its worker until `g` opens.
pub fn hold(g: &Arc<AtomicBool>) -> impl FnOnce(&mut TaskContext) -> R<()> + Send + 'static {
    let g = g.clone();
    move |_: &mut TaskContext| {
        while !g.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// Polls `f` every millisecond until it holds; false when `timeout` passed first.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while !f() {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

pub fn finish<T>(h: TaskHandle<T>, bound: Duration) -> R<T> {
    match h.wait_timeout(bound) {
        Ok(r) => r,
        Err(h) => panic!("task {} had no outcome within {bound:?}", h.id()),
    }
}

/// A strict reader of the text format: returns (name, labels text, value) per sample and
/// fails on anything malformed.
pub fn parse_prometheus(text: &str) -> Vec<(String, String, f64)> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c == '_' || c == ':' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut typed = std::collections::HashSet::new();
    let mut histograms = std::collections::HashSet::new();
    let mut helped = std::collections::HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name), "{line}");
            assert!(helped.insert(name.to_string()), "second HELP: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap();
            let kind = it.next().unwrap();
            assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
            if kind == "histogram" {
                histograms.insert(name.to_string());
            }
            assert!(helped.contains(name), "TYPE before HELP: {line}");
            assert!(typed.insert(name.to_string()), "second TYPE: {line}");
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => panic!("no value: {line}"),
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| histograms.contains(*base))
            })
            .unwrap_or(name);
        assert!(
            valid_name(name) && typed.contains(family),
            "untyped or bad name: {line}"
        );
        let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
            // Labels: k="v" pairs, values with \\ \" \n escapes only.
            let mut chars = r.char_indices();
            let mut end = None;
            let mut in_value = false;
            while let Some((i, c)) = chars.next() {
                match (in_value, c) {
                    (true, '\\') => {
                        let (_, e) = chars.next().expect("escape at end");
                        assert!(['\\', '"', 'n'].contains(&e), "bad escape in {line}");
                    }
                    (true, '"') => in_value = false,
                    (false, '"') => in_value = true,
                    (false, '}') => {
                        end = Some(i);
                        break;
                    }
                    (false, c) => assert!(
                        c == '=' || c == ',' || c == '_' || c.is_ascii_alphanumeric(),
                        "{line}"
                    ),
                    _ => {}
                }
            }
            let end = end.expect("unclosed labels");
            (r[..end].to_string(), r[end + 1..].trim_start())
        } else {
            (String::new(), rest.trim_start())
        };
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        out.push((name.to_string(), labels, v));
    }
    assert!(!out.is_empty());
    out
}

pub mod kernels;
