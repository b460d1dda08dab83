//! gpukit quickstart: the first thing to read.
//!
//! Arrays on the GPU, NumPy-style operations with broadcasting, slicing, reductions, random
//! numbers, a matrix multiply, and copies to and from the host. Without a GPU it says so and
//! exits successfully.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```

use gpukit::core::{s, Device, Generator, GpuArray, Result};
use std::process::ExitCode;

fn main() -> ExitCode {
    match Device::count() {
        Ok(n) if n > 0 => {}
        Ok(_) | Err(_) => {
            println!("quickstart: no CUDA GPU on this machine (gpukit returns errors, it never panics); nothing to run.");
            return ExitCode::SUCCESS;
        }
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let dev = Device::open(0)?;
    println!(
        "device 0: {} (sm_{}{}, {} SMs, {:.0} GiB)",
        dev.name(),
        dev.compute_capability().0,
        dev.compute_capability().1,
        dev.multiprocessor_count(),
        dev.total_memory() as f64 / (1u64 << 30) as f64
    );

    // Create: zeros, ones, ranges, and arrays from host data.
    let zeros = GpuArray::<f32>::zeros(&dev, &[2, 3])?;
    let ones = GpuArray::<f32>::ones(&dev, &[2, 3])?;
    let x = GpuArray::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    let row = GpuArray::<f32>::arange(&dev, 0.0, 3.0, 1.0)?; // shape [3]

    // Operate: operators build one fused kernel, evaluated with a single `?`; broadcasting
    // ([2, 3] + [3]), scalars on either side; named methods run one built-in kernel each.
    let y = (&x + &ones + &zeros).eval()?;
    let z = (&y * &row).eval()?; // broadcast along rows
    let w = (&z * 0.5).eval()?.exp()?.log()?; // exp then log: back to z * 0.5
    println!("x + 1          =\n{y}");
    println!("(x + 1) * row  = {:?}", z.to_vec()?);
    println!("log(exp(z/2))  = {:?}", w.to_vec()?);
    println!("2 - x / 4      = {:?}", (2.0 - &x / 4.0).eval()?.to_vec()?);

    // Reduce: over everything, one axis or several (keepdims), NumPy's result types.
    println!("sum            = {}", z.sum()?.item()?);
    println!(
        "mean, std      = {}, {}",
        z.mean()?.item()?,
        z.std(None, false, 0)?.item()?
    );
    println!(
        "int32 sum      = {} (an i64, as NumPy)",
        x.astype::<i32>()?.sum()?.item()?
    );
    println!(
        "sum over axis 0 = {:?}, max over axis 1 = {:?}",
        z.sum_axis(0)?.to_vec()?,
        z.max_axis(1)?.to_vec()?
    );
    println!("argmax         = {}", z.argmax()?.item()?);

    // Compare and select.
    let mask = x.gt_scalar(3.0)?;
    let clipped = gpukit::core::where_(&mask, &GpuArray::full(&dev, &[1], 3.0f32)?, &x)?;
    println!("min(x, 3)      = {:?}", clipped.to_vec()?);

    // Views: slices with steps (no copy), new axes, setitem through a view.
    let rev = x.slice(&s![.., ..;-1])?;
    println!("x[:, ::-1]     = {:?}", rev.to_vec()?);
    let mut x2 = x.astype::<f32>()?;
    x2.fill_slice(&s![0, 1..], -1.0)?;
    println!("x2[0, 1:] = -1 -> {:?}", x2.to_vec()?);

    // Random numbers (counter-based Philox, reproducible for a seed).
    let rng = Generator::new(42);
    let r = rng.normal::<f32>(&dev, &[1_000_000], 0.0, 1.0)?;
    println!(
        "normal(0, 1)   : mean {:.4}, std {:.4}",
        r.mean()?.item()?,
        r.std(None, false, 0)?.item()?
    );

    // Types.
    let t = x.transpose();
    println!("x.T            = {:?} (shape {:?})", t.to_vec()?, t.shape());
    let ints = x.astype::<i32>()?;
    println!("x as i32       = {:?}", ints.to_vec()?);

    // Errors name what is wrong.
    let bad = GpuArray::<f32>::zeros(&dev, &[4])?;
    if let Err(e) = (&x + &bad).eval() {
        println!("x + zeros([4]) -> error: {e}");
    }
    // Matrix multiply (FP32 by default, TF32 tensor cores on request via gpukit::core::gemm).
    let xxt = x.matmul(&t)?;
    println!(
        "x @ x.T        = {:?} (shape {:?})",
        xxt.to_vec()?,
        xxt.shape()
    );
    Ok(())
}
