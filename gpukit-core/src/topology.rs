//! Several GPUs in one machine: each device's identity ([`DeviceIdentity`]: ordinal, UUID, PCI
//! bus id, name, read without creating a context), peer access between devices where the
//! hardware has it ([`Device::can_access_peer`], [`Device::enable_peer_access`]); copies of
//! arrays from one device to another are [`GpuArray::to_device`](crate::GpuArray::to_device)
//! (peer to peer when enabled, staged by the driver otherwise).
//!
//! Ordinals follow `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` as the driver applies them in
//! this process; the UUID and PCI bus id name the physical GPU (what gpukit-mutex locks and
//! what `nvidia-smi` shows).

use crate::device::Device;
use crate::error::{DriverContext, Error, Result};
use cudarc::driver::sys;

/// Who a device is, physically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// The ordinal in this process (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: usize,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as `nvidia-smi -L` prints it.
    pub uuid: String,
    /// `domain:bus:device.function`, e.g. `0000:19:00.0`.
    pub pci_bus_id: String,
    /// The product name (e.g. "NVIDIA H200").
    pub name: String,
}

/// Formats the 16 bytes of a CUDA UUID as `nvidia-smi` does.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let h: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// The identity of device `ordinal` (no context is created).
pub fn identity(ordinal: usize) -> Result<DeviceIdentity> {
    crate::device::ensure_driver()?;
    let count = Device::count()?;
    if ordinal >= count {
        return Err(Error::InvalidDevice { ordinal, count });
    }
    let dev = cudarc::driver::result::device::get(ordinal as i32).ctx("opening the device")?;
    let uuid = cudarc::driver::result::device::get_uuid(dev).ctx("reading the device UUID")?;
    // SAFETY: CUuuid is 16 bytes of `c_char`; reading them as u8 is a plain reinterpretation.
    let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
    let name = cudarc::driver::result::device::get_name(dev).ctx("reading the device name")?;
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: `buf` holds 32 bytes, the length passed; the driver writes a NUL-terminated
    // string of at most that length.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }
        .result()
        .ctx("reading the PCI bus id")?;
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    let pci_bus_id: String = buf[..end].iter().map(|&c| c as u8 as char).collect();
    Ok(DeviceIdentity {
        ordinal,
        uuid: format_uuid(&bytes),
        pci_bus_id: pci_bus_id.to_ascii_lowercase(),
        name,
    })
}

/// Every device this process sees, with its identity, in ordinal order.
pub fn devices() -> Result<Vec<DeviceIdentity>> {
    (0..Device::count()?).map(identity).collect()
}

impl Device {
    /// This device's identity.
    pub fn identity(&self) -> Result<DeviceIdentity> {
        identity(self.ordinal())
    }

    /// Whether this device can read and write `peer`'s memory directly (NVLink or PCIe peer
    /// to peer). Always true for the device itself.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        if self == peer {
            return Ok(true);
        }
        let mut v = 0;
        let (a, b) = (self.context().cu_device(), peer.context().cu_device());
        // SAFETY: `v` is a valid out-pointer; both handles are live devices of the driver.
        unsafe { sys::cuDeviceCanAccessPeer(&mut v, a, b) }
            .result()
            .ctx("asking whether peer access is possible")?;
        Ok(v != 0)
    }

    /// Lets this device's contexts access `peer`'s memory directly (idempotent). An error if
    /// the hardware cannot ([`can_access_peer`](Self::can_access_peer) is false).
    pub fn enable_peer_access(&self, peer: &Device) -> Result<()> {
        if self == peer {
            return Ok(());
        }
        if !self.can_access_peer(peer)? {
            return Err(Error::invalid(
                "enable_peer_access",
                format!(
                    "device {} cannot access device {} directly (no NVLink or PCIe peer path); \
                     copies between them go through the host",
                    self.ordinal(),
                    peer.ordinal()
                ),
            ));
        }
        self.context().bind_to_thread().ctx("binding the context")?;
        // SAFETY: the peer's context is live (held by its Device); flags must be 0.
        let r = unsafe { sys::cuCtxEnablePeerAccess(peer.context().cu_ctx(), 0) };
        match r {
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                Ok(())
            }
            other => other.result().ctx("enabling peer access"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::format_uuid;

    #[test]
    fn uuids_print_as_nvidia_smi_prints_them() {
        let b: [u8; 16] = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        assert_eq!(format_uuid(&b), "GPU-12345678-9abc-def0-0123-456789abcdef");
    }
}
