//! Each routine described once: its names, precisions, cost variants, feature family, whether
//! its GPU path needs cuSOLVER, what a positive `info` means, and the size of the warm-up call
//! that loads its GPU kernels. [`Routine`]'s methods ([`Routine::stem`],
//! [`Routine::precisions`], [`Routine::family`], ...), [`crate::call::info_meaning`],
//! [`crate::gpu::needs_solver`] and the GPU warm-up read this table instead of each keeping a
//! `match` of their own.
//!
//! Still written per routine elsewhere (each in one place): the operands and LAPACK's argument
//! rules ([`crate::call::Op`], `Call::check`), the flop, byte and work formulas
//! ([`crate::ops::OpKind::flops`] and its neighbours), the Fortran prototypes and their
//! marshalling ([`crate::ffi`]), the calibration cases ([`crate::calibrate`]), the GPU launch
//! code ([`crate::gpu`]) and the embedded backend ([`crate::embedded`]).

use crate::ops::{Family, Precision, Routine, Variant};

/// What the rest of the crate needs to know of one routine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutineInfo {
    /// The routine (the table is in [`Routine::ALL`] order).
    pub routine: Routine,
    /// The name without the precision letter, as for s and d (`gemm`, `syevd`).
    pub stem: &'static str,
    /// The stem of the complex variant (`heevd`, `ungqr`; else the stem).
    pub complex_stem: &'static str,
    /// The precisions LAPACK defines it in.
    pub precisions: &'static [Precision],
    /// The variants the model distinguishes (values only, vectors, a full SVD).
    pub variants: &'static [Variant],
    /// How its shape maps to the model's features.
    pub family: Family,
    /// Its GPU path needs cuSOLVER (every LAPACK routine but trtrs, a cuBLAS trsm).
    pub solver: bool,
    /// The standard meaning of a positive `info`.
    pub info: &'static str,
    /// The features `(x1, x2)` of the warm-up call that loads its GPU kernels.
    pub warm_up: (f64, f64),
}

const ALL_P: &[Precision] = &Precision::ALL;
const COMPLEX: &[Precision] = &[Precision::C, Precision::Z];
const PLAIN: &[Variant] = &[Variant::Plain];
const EIGEN: &[Variant] = &[Variant::Plain, Variant::Vectors];
const SVD: &[Variant] = &[Variant::Plain, Variant::Vectors, Variant::Full];
const SINGULAR: &str = "U is exactly singular";
const NOT_PD: &str = "the matrix is not positive definite";
const NO_CONVERGENCE: &str = "the algorithm did not converge";
const NUMERICAL: &str = "numerical failure";
const BLAS_WARM: (f64, f64) = (256.0, 64.0);
const ORDER_WARM: (f64, f64) = (256.0, 1.0);
const VECTORS_WARM: (f64, f64) = (128.0, 2.0);

/// One row of the table (most routines have one name for every precision).
const fn row(
    routine: Routine,
    stem: &'static str,
    family: Family,
    solver: bool,
    info: &'static str,
) -> RoutineInfo {
    RoutineInfo {
        routine,
        stem,
        complex_stem: stem,
        precisions: ALL_P,
        variants: PLAIN,
        family,
        solver,
        info,
        warm_up: BLAS_WARM,
    }
}

/// The table, in [`Routine::ALL`] order (a test checks it).
pub const ROUTINES: [RoutineInfo; 24] = [
    row(Routine::Gemm, "gemm", Family::Product, false, NUMERICAL),
    row(Routine::Symm, "symm", Family::Sided, false, NUMERICAL),
    RoutineInfo {
        precisions: COMPLEX,
        ..row(Routine::Hemm, "hemm", Family::Sided, false, NUMERICAL)
    },
    row(Routine::Syrk, "syrk", Family::RankK, false, NUMERICAL),
    RoutineInfo {
        precisions: COMPLEX,
        ..row(Routine::Herk, "herk", Family::RankK, false, NUMERICAL)
    },
    row(Routine::Trsm, "trsm", Family::Sided, false, NUMERICAL),
    row(Routine::Trmm, "trmm", Family::Sided, false, NUMERICAL),
    row(Routine::Getrf, "getrf", Family::Rect, true, SINGULAR),
    row(Routine::Getrs, "getrs", Family::Solve, true, NUMERICAL),
    row(Routine::Gesv, "gesv", Family::Solve, true, SINGULAR),
    row(Routine::Getri, "getri", Family::Square, true, SINGULAR),
    RoutineInfo {
        warm_up: ORDER_WARM,
        ..row(Routine::Potrf, "potrf", Family::Square, true, NOT_PD)
    },
    row(Routine::Potrs, "potrs", Family::Solve, true, NUMERICAL),
    row(Routine::Posv, "posv", Family::Solve, true, NOT_PD),
    row(
        Routine::Potri,
        "potri",
        Family::Square,
        true,
        "a diagonal element of the Cholesky factor is zero",
    ),
    row(
        Routine::Trtrs,
        "trtrs",
        Family::Solve,
        false,
        "A has a zero diagonal element: it is singular",
    ),
    RoutineInfo {
        complex_stem: "heev",
        variants: EIGEN,
        warm_up: ORDER_WARM,
        ..row(Routine::Syev, "syev", Family::Square, true, NO_CONVERGENCE)
    },
    RoutineInfo {
        complex_stem: "heevd",
        variants: EIGEN,
        warm_up: ORDER_WARM,
        ..row(
            Routine::Syevd,
            "syevd",
            Family::Square,
            true,
            NO_CONVERGENCE,
        )
    },
    RoutineInfo {
        complex_stem: "heevr",
        variants: EIGEN,
        warm_up: VECTORS_WARM,
        ..row(
            Routine::Syevr,
            "syevr",
            Family::Square,
            true,
            NO_CONVERGENCE,
        )
    },
    RoutineInfo {
        variants: SVD,
        warm_up: VECTORS_WARM,
        ..row(Routine::Gesdd, "gesdd", Family::Rect, true, NO_CONVERGENCE)
    },
    RoutineInfo {
        variants: SVD,
        warm_up: VECTORS_WARM,
        ..row(Routine::Gesvd, "gesvd", Family::Rect, true, NO_CONVERGENCE)
    },
    row(Routine::Gelsd, "gelsd", Family::Rect, true, NO_CONVERGENCE),
    row(Routine::Geqrf, "geqrf", Family::Rect, true, NUMERICAL),
    RoutineInfo {
        complex_stem: "ungqr",
        ..row(Routine::Orgqr, "orgqr", Family::Rect, true, NUMERICAL)
    },
];

impl Routine {
    /// The routine's description.
    #[inline]
    pub fn info(self) -> &'static RoutineInfo {
        &ROUTINES[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_catalogue_order_and_names_are_unique() {
        for (i, r) in Routine::ALL.into_iter().enumerate() {
            assert_eq!(ROUTINES[i].routine, r, "row {i}");
            assert_eq!(r.info().routine, r);
        }
        let mut names: Vec<&str> = ROUTINES
            .iter()
            .flat_map(|d| [d.stem, d.complex_stem])
            .collect();
        names.sort();
        names.dedup();
        // four routines have a complex name of their own
        assert_eq!(names.len(), 24 + 4);
    }

    /// The facts read from the table, as the crate relied on before it.
    #[test]
    fn described_facts_hold() {
        for d in &ROUTINES {
            let r = d.routine;
            // vectors: the eigen- and SVD solvers; the full SVD variant: the SVDs
            assert_eq!(
                d.variants.len() > 1,
                matches!(
                    r,
                    Routine::Syev
                        | Routine::Syevd
                        | Routine::Syevr
                        | Routine::Gesdd
                        | Routine::Gesvd
                ),
                "{r:?}"
            );
            // cuSOLVER: everything after the BLAS-3 routines but trtrs
            let blas = (r as usize) < (Routine::Getrf as usize);
            assert_eq!(d.solver, !blas && r != Routine::Trtrs, "{r:?}");
            assert!(!d.info.is_empty());
            assert!(d.warm_up.0 >= 128.0 && d.warm_up.1 >= 1.0);
            assert!(d.precisions.iter().all(|p| Precision::ALL.contains(p)));
        }
        assert_eq!(Routine::Hemm.precisions(), &[Precision::C, Precision::Z]);
        assert_eq!(Routine::Orgqr.name(Precision::Z), "zungqr");
        assert_eq!(Routine::Gemm.family(), Family::Product);
    }
}
