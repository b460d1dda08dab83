//! gpukit-sched's proof on the GPU (one table, one run): the bench lives in
//! `gpukit-sched/examples/sched_bench_core.rs` (`cargo run -p gpukit-sched --release --example
//! sched_bench_core`); this is the umbrella crate's entry point, the same bench under the name
//! `sched_bench`.
//!
//! `cargo run --release --example sched_bench`

#[path = "../gpukit-sched/examples/sched_bench_core.rs"]
mod bench;

fn main() {
    bench::main();
}
