//! Reserving a lane's buffers ahead of calls whose shapes are known (the dispatcher's start-up
//! thread sizes the GPU for the largest calls it had to keep on the CPU).

use crate::gpu::layout::Layout;
use crate::gpu::staging::slot_need;

/// The most pinned memory [`crate::gpu::GpuBackend::presize`] reserves ahead of a call: the
/// staging of one lane is far smaller, so this only bounds a pathological request.
pub const PRESIZE_PINNED_MAX: usize = 1 << 30;

/// What to reserve ahead for calls whose needs are `needs` (device bytes, pinned staging
/// bytes), on a lane that has `have_dev` / `have_pinned`: `(device, pinned)`, `None` where
/// nothing needs to grow. The device size is the largest need (an arena that cannot be had is
/// refused by the allocation's own free-memory check); the pinned size is the largest need that
/// is at most `pinned_max`, and nothing is reserved beyond what one of the calls needs.
pub fn presize_plan(
    needs: &[(usize, usize)],
    have_dev: usize,
    have_pinned: usize,
    pinned_max: usize,
) -> (Option<usize>, Option<usize>) {
    let dev = needs.iter().map(|n| n.0).max().unwrap_or(0);
    let pinned = needs
        .iter()
        .map(|n| n.1)
        .filter(|&o| o <= pinned_max)
        .max()
        .unwrap_or(0);
    (
        (dev > have_dev).then_some(dev),
        (pinned > have_pinned).then_some(pinned),
    )
}

/// The pinned staging (both slots) a call with this layout uses: its largest buffer decides.
pub(crate) fn staging_need(lay: &Layout) -> usize {
    2 * slot_need(lay.largest(), 0, true)
}

/// What [`crate::gpu::GpuBackend::presize`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Presized {
    /// Device bytes the calls need (largest).
    pub need_dev: usize,
    /// Pinned staging bytes the calls need (largest).
    pub need_pinned: usize,
    /// The lane's device arena afterwards.
    pub dev: usize,
    /// The lane's pinned staging afterwards.
    pub pinned: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::staging::SLOT_BYTES;

    const MIB: usize = 1 << 20;

    #[test]
    fn presize_reserves_the_largest_need_within_the_pinned_bound() {
        let gesv = (300 * MIB, 32 * MIB);
        let sgemm = (432 * MIB, 32 * MIB);
        let small = (MIB, 2 * MIB);
        assert_eq!(
            presize_plan(&[gesv, sgemm, small], 0, 0, PRESIZE_PINNED_MAX),
            (Some(432 * MIB), Some(32 * MIB))
        );
        // already large enough: nothing
        assert_eq!(
            presize_plan(&[gesv], 512 * MIB, 32 * MIB, PRESIZE_PINNED_MAX),
            (None, None)
        );
        // a need over the bound gets no pinned reservation; the device arena is still sized
        let huge = (3000 * MIB, 2000 * MIB);
        assert_eq!(
            presize_plan(&[huge], 0, 0, PRESIZE_PINNED_MAX),
            (Some(3000 * MIB), None)
        );
        assert_eq!(presize_plan(&[], 0, 0, PRESIZE_PINNED_MAX), (None, None));
    }

    #[test]
    fn staging_follows_the_largest_buffer_and_is_bounded() {
        let mut lay = Layout::default();
        lay.dev(100);
        assert_eq!(staging_need(&lay), 2 * MIB);
        lay.dev(6000 * 6000 * 8);
        assert_eq!(staging_need(&lay), 2 * SLOT_BYTES);
        assert!(staging_need(&lay) <= PRESIZE_PINNED_MAX);
    }
}
