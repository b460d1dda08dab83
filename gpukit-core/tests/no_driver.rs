//! Without a CUDA driver every entry point returns `Error::NoDriver` instead of panicking.
//! (On a GPU host this test checks the opposite: the same calls succeed.)

use gpukit_core::{Device, Error};

#[test]
fn entry_points_return_errors_without_a_driver() {
    if gpukit_jit::libs::driver_present() {
        // A driver is here: the same calls must work (device tests cover the rest).
        if gpukit_jit::libs::gpu_available() {
            assert!(Device::count().unwrap() >= 1);
            assert!(Device::open(0).is_ok());
        }
        return;
    }
    assert!(matches!(Device::count(), Err(Error::NoDriver)));
    assert!(matches!(Device::open(0), Err(Error::NoDriver)));
    assert!(matches!(Device::open(usize::MAX), Err(Error::NoDriver)));
    let msg = Device::open(0).unwrap_err().to_string();
    assert!(msg.contains("no CUDA driver"), "{msg}");
}
