//! gpukit-sched's proof on the GPU (one table, one run): the bench lives in
//! `gpukit-sched/examples/sched_bench.rs`; this is the umbrella crate's entry point.
//!
//! `cargo run --release --example sched_bench`

#[path = "../gpukit-sched/examples/sched_bench.rs"]
mod bench;

fn main() {
    bench::main();
}
