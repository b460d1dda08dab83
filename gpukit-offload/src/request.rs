//! A call described once, where it enters the dispatcher: the operands ([`Call`]) with
//! everything the estimate, the decision, the learner and the statistics read about it (kind,
//! shape, flops, bytes moved, the model's features, the CPU library it would run on). Nothing
//! downstream re-derives these.

use crate::call::Call;
use crate::library::LibId;
use crate::ops::{OpKind, Precision, Routine, Shape};
use crate::stats::slot;

/// A call and its description.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// The operands.
    pub call: Call,
    /// Routine and variant (the model's key).
    pub kind: OpKind,
    /// Sizes (see [`Shape`]).
    pub shape: Shape,
    /// Floating point operations ([`OpKind::flops`]).
    pub flops: f64,
    /// Bytes the GPU path copies in and out ([`OpKind::bytes`]).
    pub bytes: (f64, f64),
    /// The model's two shape features ([`OpKind::features`]).
    pub features: (f64, f64),
    /// The CPU library the call runs on when it stays on the CPU.
    pub lib: LibId,
    /// Statistics slot (routine x precision).
    pub(crate) slot: usize,
}

impl Request {
    /// Describes a call that would run on `lib` on the CPU.
    pub fn new(call: Call, lib: LibId) -> Request {
        let kind = call.kind();
        let shape = call.shape();
        let p = call.prec;
        Request {
            kind,
            shape,
            flops: kind.flops(p, shape),
            bytes: kind.bytes(p, shape),
            features: kind.features(shape),
            lib,
            slot: slot(kind.routine, p),
            call,
        }
    }

    /// Element type.
    #[inline]
    pub fn prec(&self) -> Precision {
        self.call.prec
    }

    /// The routine.
    #[inline]
    pub fn routine(&self) -> Routine {
        self.kind.routine
    }

    /// LAPACK name (`dgemm`).
    pub fn name(&self) -> String {
        self.kind.routine.name(self.call.prec)
    }

    /// True when the call does no arithmetic (a zero dimension).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.shape.m == 0 || self.shape.n == 0 || self.shape.k == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{HostMat, Op, Scalar};
    use crate::ops::{Trans, Variant};

    #[test]
    fn description_matches_the_catalogue() {
        let mut buf = [0.0f64; 4];
        let p = buf.as_mut_ptr() as *mut u8;
        let call = Call {
            prec: Precision::Z,
            op: Op::Gemm {
                ta: Trans::No,
                tb: Trans::Conj,
                m: 300,
                n: 20,
                k: 1000,
                alpha: Scalar::of([1.0f64, 0.0]),
                a: HostMat::new(p, 300, 1000, 300),
                b: HostMat::new(p, 20, 1000, 20),
                beta: Scalar::of([0.0f64, 0.0]),
                c: HostMat::new(p, 300, 20, 300),
            },
        };
        let r = Request::new(call, LibId::UNKNOWN);
        assert_eq!(r.kind, OpKind::new(Routine::Gemm, Variant::Plain));
        assert_eq!(r.shape, Shape::new(300, 20, 1000));
        assert_eq!(r.flops, 4.0 * 2.0 * 300.0 * 20.0 * 1000.0);
        assert_eq!(r.bytes, r.kind.bytes(Precision::Z, r.shape));
        assert_eq!(r.name(), "zgemm");
        assert!(!r.is_empty());
    }
}
