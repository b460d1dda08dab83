//! Non-finite checks on the device: does an operand hold NaN or infinity?
//!
//! LAPACK answers non-finite data in its own ways: `gesdd` reports `info = -4` for a NaN
//! entry, `potrf` a non-positive pivot, others propagate NaN. So that the caller always gets
//! LAPACK's answer, every LAPACK routine's GPU path checks the data the routine reads (and its
//! results) and hands the call to the CPU library when one is not finite
//! ([`crate::gpu::GpuFailKind::NonFinite`]). BLAS-3 routines are not checked: cuBLAS
//! propagates NaN and infinity as the CPU BLAS does.
//!
//! One kernel launch checks every operand of a [`FinitePlan`] (`kernels/finite.cu`, loaded by
//! [`crate::gpu::kernels`]): it reads exactly the part LAPACK reads (a dense block, a vector of
//! reals, the referenced triangle of a triangular matrix without a unit diagonal, of a
//! symmetric one, of a Hermitian one without the imaginary parts of its diagonal) and sets
//! one bit per non-finite operand in the plan's flag word among the call's status words. The
//! flag comes back with the call's other status words in its one synchronisation, so a check
//! costs a launch, not a round trip.
//!
//! Non-finite inputs never reach a GPU routine: an input plan's kernel (or, for large
//! operands, a guard launched right after it) overwrites every flagged operand on the device
//! with the identity pattern before the routine queued after it runs. The routine so runs to
//! its end on finite data (cuSOLVER's iterative eigen- and SVD solvers were not made to meet
//! NaN: numpy's suite hung in `TestCond` on such inputs), and [`crate::gpu::exec::Exec::finish`]
//! reads the input flags before anything else and fails the call as `NonFinite`: the caller's
//! buffers are untouched and the CPU library answers.

use crate::gpu::exec::Exec;
use crate::gpu::fail::{fail, GResult, GpuFailKind};
use crate::gpu::kernels::{KGroup, KOperand, MAX_OPERANDS};
use crate::gpu::layout::Layout;
use crate::gpu::phases::Phase;
use crate::ops::{Diag, Uplo};

/// One operand to check (arena offsets; device matrices are packed, `ld = rows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Every element of a packed `rows x cols` block.
    Dense {
        off: usize,
        rows: usize,
        cols: usize,
        what: &'static str,
    },
    /// `count` contiguous reals of the call's real type (eigenvalues, singular values).
    Real {
        off: usize,
        count: usize,
        what: &'static str,
    },
    /// The `uplo` triangle (with the diagonal unless `diag` is unit) of an `n x n` matrix.
    Triangle {
        off: usize,
        n: usize,
        uplo: Uplo,
        diag: Diag,
        what: &'static str,
    },
    /// The `uplo` triangle of a symmetric (or, with `hermitian`, Hermitian) `n x n` matrix.
    Symmetric {
        off: usize,
        n: usize,
        uplo: Uplo,
        hermitian: bool,
        what: &'static str,
    },
}

impl Check {
    /// The operand's name in messages.
    pub(crate) fn what(&self) -> &'static str {
        match *self {
            Check::Dense { what, .. }
            | Check::Real { what, .. }
            | Check::Triangle { what, .. }
            | Check::Symmetric { what, .. } => what,
        }
    }

    /// The kernel's view of the operand, at `base` (the arena's device address).
    fn operand(&self, base: u64) -> KOperand {
        let n = |v: usize| v as i64;
        match *self {
            Check::Dense {
                off, rows, cols, ..
            } => KOperand {
                ptr: base + off as u64,
                rows: n(rows.max(1)),
                elems: n(rows * cols),
                kind: 0,
                ..KOperand::default()
            },
            Check::Real { off, count, .. } => KOperand {
                ptr: base + off as u64,
                rows: n(count.max(1)),
                elems: n(count),
                kind: 1,
                ..KOperand::default()
            },
            Check::Triangle {
                off,
                n: o,
                uplo,
                diag,
                ..
            } => KOperand {
                ptr: base + off as u64,
                rows: n(o.max(1)),
                elems: n(o * o),
                kind: 2,
                lower: i32::from(uplo == Uplo::Lower),
                skip_diag: i32::from(diag == Diag::Unit),
                herm: 0,
            },
            Check::Symmetric {
                off,
                n: o,
                uplo,
                hermitian,
                ..
            } => KOperand {
                ptr: base + off as u64,
                rows: n(o.max(1)),
                elems: n(o * o),
                kind: 3,
                lower: i32::from(uplo == Uplo::Lower),
                skip_diag: 0,
                herm: i32::from(hermitian),
            },
        }
    }
}

/// Whether a plan checks a routine's inputs (guarded: non-finite operands are overwritten
/// before the routine runs, and the flag is read first) or its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Inputs,
    Results,
}

/// Checks laid out for one call: the operands and the flag word they set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FinitePlan {
    checks: Vec<Check>,
    /// Status offset of the flag word (bit k: operand k is not finite).
    flag: usize,
    role: Role,
}

impl FinitePlan {
    /// The checks of a routine's inputs (at most four operands).
    pub(crate) fn inputs(lay: &mut Layout, checks: &[Check]) -> FinitePlan {
        FinitePlan::new(lay, checks, Role::Inputs)
    }

    /// The checks of a routine's results (at most four operands).
    pub(crate) fn results(lay: &mut Layout, checks: &[Check]) -> FinitePlan {
        FinitePlan::new(lay, checks, Role::Results)
    }

    fn new(lay: &mut Layout, checks: &[Check], role: Role) -> FinitePlan {
        debug_assert!(
            checks.len() <= MAX_OPERANDS,
            "one launch checks four operands"
        );
        FinitePlan {
            checks: checks.to_vec(),
            flag: lay.status(4),
            role,
        }
    }

    /// Queues the check (and, for inputs, the guard) on the compute stream, after the data it
    /// reads, and registers the flag with the call.
    pub(crate) fn run(&self, x: &mut Exec) -> GResult<()> {
        if self.checks.is_empty() {
            return Ok(());
        }
        if self.checks.len() > MAX_OPERANDS {
            return Err(fail(
                GpuFailKind::Error,
                "more operands in one non-finite check than its kernel takes",
            ));
        }
        x.lane.mark(Phase::Launch);
        if !x.uploads_queued() {
            return Err(fail(
                GpuFailKind::Error,
                "internal error: a non-finite check before the call's uploads were queued",
            ));
        }
        let base = x.addr(0);
        let mut g = KGroup {
            count: self.checks.len() as i32,
            complex: i32::from(x.p.is_complex()),
            guard: i32::from(self.role == Role::Inputs),
            ..KGroup::default()
        };
        for (slot, c) in g.op.iter_mut().zip(&self.checks) {
            *slot = c.operand(base);
        }
        let kernels = x.backend.check_kernels()?;
        let flag = x.status_addr(self.flag);
        // SAFETY: every operand lies in the call's arena (laid out with it) and is written by
        // work queued earlier on the compute stream; the flag word is in the status region,
        // zeroed when the call began.
        let launches = unsafe { kernels.check(x.p.real_size(), &g, flag, x.lane.compute_raw)? };
        x.lane.clock.t.own_launches += launches as u64;
        let mut names = Operands::default();
        for c in &self.checks {
            names.push(c.what());
        }
        x.finite_flag(self.flag, names, self.role == Role::Inputs);
        x.lane.mark(Phase::Check);
        Ok(())
    }
}

/// The operands of one check launch, by name (bit k of its flag word: operand k).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Operands {
    names: [&'static str; MAX_OPERANDS],
    count: usize,
}

impl Operands {
    /// Adds the next operand (at most [`MAX_OPERANDS`]: a plan checks that first).
    pub(crate) fn push(&mut self, name: &'static str) {
        if self.count < MAX_OPERANDS {
            self.names[self.count] = name;
            self.count += 1;
        }
    }
}

/// What a flag word says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flagged {
    /// Every operand is finite.
    None,
    /// The first non-finite operand.
    Operand(&'static str),
    /// Bits set for no operand of the launch: the word was not written by the check alone.
    Stray(u32),
}

/// What the flag word `flag` of a launch over `ops` says (bit k: operand k).
pub(crate) fn flagged(flag: u32, ops: &Operands) -> Flagged {
    let known = if ops.count >= 32 {
        u32::MAX
    } else {
        (1u32 << ops.count) - 1
    };
    if flag & !known != 0 {
        return Flagged::Stray(flag);
    }
    match (0..ops.count).find(|&k| flag & (1 << k) != 0) {
        Some(k) => Flagged::Operand(ops.names[k]),
        None => Flagged::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reserves_one_flag_word_and_describes_each_operand() {
        let mut lay = Layout::default();
        let a = lay.dev(100 * 100 * 16);
        let checks = [
            Check::Dense {
                off: a,
                rows: 10,
                cols: 3,
                what: "B",
            },
            Check::Symmetric {
                off: a,
                n: 100,
                uplo: Uplo::Lower,
                hermitian: true,
                what: "A",
            },
            Check::Triangle {
                off: a,
                n: 40,
                uplo: Uplo::Upper,
                diag: Diag::Unit,
                what: "T",
            },
            Check::Real {
                off: a,
                count: 7,
                what: "w",
            },
        ];
        let plan = FinitePlan::inputs(&mut lay, &checks);
        assert_eq!(lay.status_len(), 16, "one flag word per plan");
        assert_eq!(plan.flag, 0);
        let r = FinitePlan::results(&mut lay, &checks[..1]);
        assert_eq!((r.flag, r.role), (16, Role::Results));
        let base = 1 << 30;
        let d = checks[0].operand(base);
        assert_eq!(
            (d.ptr, d.rows, d.elems, d.kind),
            (base + a as u64, 10, 30, 0)
        );
        let s = checks[1].operand(base);
        assert_eq!(
            (s.rows, s.elems, s.kind, s.lower, s.herm),
            (100, 10_000, 3, 1, 1)
        );
        let t = checks[2].operand(base);
        assert_eq!((t.kind, t.lower, t.skip_diag), (2, 0, 1));
        let w = checks[3].operand(base);
        assert_eq!((w.rows, w.elems, w.kind), (7, 7, 1));
        // an empty operand scans nothing but keeps a valid row count
        let e = Check::Dense {
            off: 0,
            rows: 0,
            cols: 5,
            what: "E",
        }
        .operand(0);
        assert_eq!((e.rows, e.elems), (1, 0));
    }

    #[test]
    fn a_flag_names_its_first_operand_and_stray_bits_are_no_operand() {
        let mut ops = Operands::default();
        ops.push("A");
        ops.push("B");
        assert_eq!(flagged(0, &ops), Flagged::None);
        assert_eq!(flagged(0b10, &ops), Flagged::Operand("B"));
        assert_eq!(flagged(0b11, &ops), Flagged::Operand("A"));
        // a bit of an operand the launch did not check (getri's overwritten status words
        // read as " holds NaN or infinity" before): never a non-finite operand
        assert_eq!(flagged(0b100, &ops), Flagged::Stray(0b100));
        assert_eq!(flagged(0xdead_beef, &ops), Flagged::Stray(0xdead_beef));
        let mut full = Operands::default();
        for n in ["A", "B", "C", "D", "E"] {
            full.push(n);
        }
        assert_eq!(full.count, MAX_OPERANDS);
        assert_eq!(flagged(0b1000, &full), Flagged::Operand("D"));
        assert_eq!(flagged(0b1_0000, &full), Flagged::Stray(0b1_0000));
    }
}
