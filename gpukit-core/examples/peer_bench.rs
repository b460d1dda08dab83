//! Copies between GPUs: for every ordered pair of visible devices, the bandwidth of
//! `GpuArray::to_device` (peer to peer where the hardware allows and it is enabled, else staged
//! by the driver), beside a copy within one device. Prints the device identities and one table.
//!
//! ```text
//! cargo run --release -p gpukit-core --example peer_bench [MiB]   # default 1024 MiB
//! ```

use gpukit_core::{topology, Device, GpuArray, Result};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn gbps(src: &GpuArray<f32>, dst: &Device, bytes: usize) -> Result<f64> {
    let _ = src.to_device(dst)?; // warm-up
    dst.synchronize()?;
    let mut v = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        let c = src.to_device(dst)?;
        dst.synchronize()?;
        v.push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        drop(c);
    }
    Ok(median(v))
}

fn main() -> Result<()> {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    let n = (mib << 20) / 4;
    for d in topology::devices()? {
        println!(
            "device {}: {} {} {}",
            d.ordinal, d.name, d.uuid, d.pci_bus_id
        );
    }
    let devs: Vec<Device> = (0..Device::count()?)
        .map(Device::open)
        .collect::<Result<_>>()?;
    println!("\n| copy of {mib} MiB | peer access | GB/s |");
    println!("| --- | --- | --- |");
    for s in &devs {
        let src = GpuArray::<f32>::arange(s, 0.0, n as f32, 1.0)?;
        for d in &devs {
            let peer = if s == d {
                "same device".to_string()
            } else if s.can_access_peer(d)? {
                s.enable_peer_access(d)?;
                d.enable_peer_access(s)?;
                "enabled".to_string()
            } else {
                "none (staged)".to_string()
            };
            let r = gbps(&src, d, n * 4)?;
            println!("| {} -> {} | {peer} | {r:.1} |", s.ordinal(), d.ordinal());
        }
    }
    Ok(())
}
