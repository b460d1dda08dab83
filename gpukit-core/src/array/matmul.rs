//! `a.matmul(&b)`: NumPy's `matmul` with N-dimensional batch broadcasting, over the GEMM entry
//! points of [`crate::gemm`] (f32 with the process's default precision, f64 / f16 / bf16 through
//! cuBLAS).
//!
//! Shapes: `[..., m, k] @ [..., k, n] -> [..., m, n]` with the batch dimensions broadcast; a
//! 1-D left operand is a row (`[k] @ [..., k, n] -> [..., n]`), a 1-D right operand a column.
//! A batch that is broadcast only on one side reaches GEMM as a single matrix (no copy); one
//! broadcast on both sides is expanded first.

use super::GpuArray;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gemm;
use crate::shape;

/// `(batch shape, m, k, n, result shape)` of a product.
pub type MatmulShapes = (Vec<usize>, usize, usize, usize, Vec<usize>);

/// `(batch shape, m, k, n, result shape)` of `a @ b` for shapes `a` and `b` (NumPy's rules).
pub fn matmul_nd_shapes(a: &[usize], b: &[usize]) -> Result<MatmulShapes> {
    if a.is_empty() || b.is_empty() {
        return Err(Error::invalid(
            "matmul",
            format!("operands must have at least one dimension, got shapes {a:?} and {b:?}"),
        ));
    }
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != kb {
        return Err(Error::ShapeMismatch {
            op: "matmul (the last axis of a must match the second-to-last of b)".into(),
            lhs: a.to_vec(),
            rhs: b.to_vec(),
        });
    }
    let batch = shape::broadcast_shapes(
        "matmul (batch dimensions)",
        &a2[..a2.len() - 2],
        &b2[..b2.len() - 2],
    )
    .map_err(|_| Error::ShapeMismatch {
        op: "matmul (batch dimensions do not broadcast)".into(),
        lhs: a.to_vec(),
        rhs: b.to_vec(),
    })?;
    let mut out = batch.clone();
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok((batch, m, k, n, out))
}

impl<T: DType> GpuArray<T> {
    /// `self @ other` (see the module docs).
    pub fn matmul(&self, other: &GpuArray<T>) -> Result<GpuArray<T>> {
        let (batch, m, k, n, out_shape) = matmul_nd_shapes(&self.shape, &other.shape)?;
        let a = if self.ndim() == 1 {
            self.unsqueeze(0)?
        } else {
            self.clone()
        };
        let b = if other.ndim() == 1 {
            other.unsqueeze(-1)?
        } else {
            other.clone()
        };
        let nb: usize = batch.iter().product();
        let trivial = |x: &GpuArray<T>| x.shape[..x.ndim() - 2].iter().all(|&d| d == 1);
        let as_gemm = |x: &GpuArray<T>, rows: usize, cols: usize| -> Result<GpuArray<T>> {
            if x.ndim() == 2 {
                // GEMM reads row-major and transposed 2-D views as they are.
                return Ok(x.clone());
            }
            if trivial(x) {
                return x.reshape(&[rows, cols]);
            }
            let mut full = batch.clone();
            full.extend_from_slice(&[rows, cols]);
            if x.shape == full {
                x.reshape(&[nb, rows, cols])
            } else {
                x.broadcast_to(&full)?
                    .contiguous()?
                    .reshape(&[nb, rows, cols])
            }
        };
        let a3 = as_gemm(&a, m, k)?;
        let b3 = as_gemm(&b, k, n)?;
        let c = gemm::matmul(&a3, &b3)?;
        c.reshape(&out_shape)
    }
}

#[cfg(test)]
mod tests {
    use super::matmul_nd_shapes;

    #[test]
    fn numpy_matmul_shapes() {
        let s = |a: &[usize], b: &[usize]| matmul_nd_shapes(a, b).map(|r| r.4);
        assert_eq!(s(&[2, 3], &[3, 4]).unwrap(), vec![2, 4]);
        assert_eq!(s(&[3], &[3, 4]).unwrap(), vec![4]);
        assert_eq!(s(&[2, 3], &[3]).unwrap(), vec![2]);
        assert_eq!(s(&[3], &[3]).unwrap(), Vec::<usize>::new());
        assert_eq!(s(&[5, 1, 2, 3], &[4, 3, 6]).unwrap(), vec![5, 4, 2, 6]);
        assert_eq!(s(&[7, 2, 3], &[3, 4]).unwrap(), vec![7, 2, 4]);
        let (batch, m, k, n, _) = matmul_nd_shapes(&[2, 1, 4, 5], &[3, 5, 6]).unwrap();
        assert_eq!((batch, m, k, n), (vec![2, 3], 4, 5, 6));
        let e = s(&[2, 3], &[4, 5]).unwrap_err().to_string();
        assert!(e.contains("[2, 3]") && e.contains("[4, 5]"), "{e}");
        assert!(s(&[2, 2, 3], &[3, 3, 4]).is_err());
        assert!(s(&[], &[3]).is_err());
    }
}
