//! The estimate a decision uses: the model's (through a per-thread memo) with the learned
//! corrections applied, or the measured rates of a library without curves.

use super::*;

pub(super) const MEMO_SLOTS: usize = 64;

#[derive(Clone, Copy)]
pub(super) struct MemoEntry {
    pub(super) key: (u64, OpKind, Precision, Shape, LibKey),
    pub(super) estimate: Option<Estimate>,
}

impl Dispatcher {
    /// The estimate for a request with learned corrections applied; a library without curves
    /// gets its CPU time from the rates measured so far (`cpu_known` false when none was).
    pub fn estimate(&self, req: &Request) -> Option<Estimate> {
        let lib = req.lib.key_id();
        let mut e = self.model_estimate(req, lib)?;
        let (fc, fg) = self.learner.factors(
            CorrKey::new(req.kind, req.prec(), Backend::Cpu, lib, req.features),
            CorrKey::new(req.kind, req.prec(), Backend::Gpu, lib, req.features),
        );
        e.gpu_s *= fg;
        if e.cpu_known {
            e.cpu_s *= fc;
        } else if let Some(k) =
            self.learner
                .cpu_known(lib, req.kind, req.prec(), req.features, req.flops)
        {
            e.cpu_s = k.seconds;
            e.cpu_known = true;
        }
        Some(e)
    }

    /// The model's uncorrected estimate of a request, through the per-thread memo.
    pub(super) fn model_estimate(&self, req: &Request, lib: LibKey) -> Option<Estimate> {
        let (kind, prec, shape) = (req.kind, req.prec(), req.shape);
        let key = (self.id, kind, prec, shape, lib);
        let h = (shape.m ^ shape.n.rotate_left(21) ^ shape.k.rotate_left(42) ^ self.id)
            .wrapping_add(
                ((kind.routine as u64) << 3)
                    ^ ((kind.variant as u64) << 1)
                    ^ prec as u64
                    ^ ((lib.0 as u64) << 40),
            )
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (h >> 58) as usize % MEMO_SLOTS;
        let hit = MEMO.with(|m| {
            m.borrow()[slot]
                .filter(|e| e.key == key)
                .map(|e| e.estimate)
        });
        if let Some(v) = hit {
            return v;
        }
        let estimate = self.model.estimate(kind, prec, shape, lib);
        MEMO.with(|m| m.borrow_mut()[slot] = Some(MemoEntry { key, estimate }));
        estimate
    }
}
