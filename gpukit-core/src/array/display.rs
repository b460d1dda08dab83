//! `Display` for arrays in NumPy's `str()` style: nested brackets, elements aligned on the
//! decimal point, `nan` / `inf`, and arrays of more than 1000 elements summarised with `...`
//! (three elements at each edge; only those are copied to the host).

use super::GpuArray;
use crate::dtype::{DType, DTypeKind};
use crate::error::Result;
use std::fmt;

/// Arrays with more elements than this are summarised.
pub const THRESHOLD: usize = 1000;
/// Elements shown at each edge of a summarised axis.
pub const EDGE: usize = 3;
/// Lines are wrapped past this many characters (NumPy's default line width).
pub const LINE_WIDTH: usize = 75;

impl<T: DType> fmt::Display for GpuArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.render() {
            Ok(s) => f.write_str(&s),
            Err(e) => write!(
                f,
                "<GpuArray<{}> of shape {:?}: could not be read: {e}>",
                T::RUST_NAME,
                self.shape
            ),
        }
    }
}

impl<T: DType> GpuArray<T> {
    /// The text `Display` shows (an error when the elements cannot be read).
    pub fn render(&self) -> Result<String> {
        let summarize = self.len() > THRESHOLD;
        let mut small = self.clone();
        let mut gaps = vec![false; self.ndim()];
        if summarize {
            for (ax, gap) in gaps.iter_mut().enumerate() {
                let d = self.shape[ax];
                if d > 2 * EDGE {
                    let idx: Vec<i64> = (0..EDGE as i64)
                        .chain(d as i64 - EDGE as i64..d as i64)
                        .collect();
                    small = small.take_indices(ax as isize, &idx)?;
                    *gap = true;
                }
            }
        }
        let values = small.to_vec()?;
        let cells = format_cells(&values);
        Ok(layout(&small.shape, &cells, &gaps))
    }
}

/// Formats elements as NumPy does: integers right-aligned; floats with the shortest digits that
/// round-trip, integral ones with a trailing `.`, aligned on the decimal point; `nan` and `inf`
/// right-aligned.
pub fn format_cells<T: DType>(values: &[T]) -> Vec<String> {
    if T::KIND != DTypeKind::Float {
        let raw: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let w = raw.iter().map(String::len).max().unwrap_or(0);
        return raw.into_iter().map(|s| format!("{s:>w$}")).collect();
    }
    let text: Vec<Option<String>> = values
        .iter()
        .map(|v| {
            let x = v.to_f64();
            if !x.is_finite() {
                return None;
            }
            if x != 0.0 && (x.abs() >= 1e16 || x.abs() < 1e-4) {
                let rust = if std::mem::size_of::<T>() == 8 {
                    format!("{x:e}")
                } else {
                    format!("{:e}", x as f32)
                };
                return Some(scientific(&rust));
            }
            let mut s = v.to_string();
            if !s.contains('.') {
                s.push('.');
            }
            Some(s)
        })
        .collect();
    let split = |s: &str| -> (String, String) {
        match s.find('.') {
            Some(i) if !s.contains(['e', 'E']) => (s[..i].to_string(), s[i..].to_string()),
            _ => (s.to_string(), String::new()),
        }
    };
    let (mut wi, mut wf) = (0usize, 0usize);
    for s in text.iter().flatten() {
        let (i, fr) = split(s);
        wi = wi.max(i.len());
        wf = wf.max(fr.len());
    }
    let width = (wi + wf).max(3);
    values
        .iter()
        .zip(text)
        .map(|(v, t)| match t {
            Some(s) => {
                let (i, fr) = split(&s);
                let cell = format!("{i:>wi$}{fr:<wf$}");
                format!("{cell:>width$}")
            }
            None => {
                let x = v.to_f64();
                let s = if x.is_nan() {
                    "nan"
                } else if x > 0.0 {
                    "inf"
                } else {
                    "-inf"
                };
                format!("{s:>width$}")
            }
        })
        .collect()
}

/// Rust's `1.5e-7` as NumPy's `1.5e-07` (`1e20` as `1.e+20`).
fn scientific(rust: &str) -> String {
    let (m, e) = rust.split_once('e').unwrap_or((rust, "0"));
    let m = if m.contains('.') {
        m.to_string()
    } else {
        format!("{m}.")
    };
    let (sign, digits) = match e.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', e),
    };
    format!("{m}e{sign}{digits:0>2}")
}

/// Nests formatted `cells` (row-major, of `shape`) in brackets, NumPy style; `gaps[d]` puts
/// `...` in the middle of axis `d` (the cells then hold `2 * EDGE` entries along it).
pub fn layout(shape: &[usize], cells: &[String], gaps: &[bool]) -> String {
    if shape.is_empty() {
        return cells.first().cloned().unwrap_or_default();
    }
    if shape.contains(&0) {
        return "[]".to_string();
    }
    let mut out = String::new();
    nest(shape, cells, gaps, 0, &mut out);
    out
}

fn nest(shape: &[usize], cells: &[String], gaps: &[bool], depth: usize, out: &mut String) {
    out.push('[');
    let d = shape[0];
    let rest = &shape[1..];
    let block: usize = rest.iter().product();
    let ndim = shape.len() + depth;
    if rest.is_empty() {
        let mut line_len = depth + 1;
        for (i, cell) in cells.iter().enumerate().take(d) {
            if i > 0 {
                out.push(' ');
                line_len += 1;
            }
            if gaps[0] && i == EDGE {
                out.push_str("... ");
                line_len += 4;
            }
            if line_len + cell.len() > LINE_WIDTH && i > 0 {
                // Wrap: drop the trailing space, continue on a new indented line.
                out.pop();
                out.push('\n');
                out.push_str(&" ".repeat(depth + 1));
                line_len = depth + 1;
            }
            out.push_str(cell);
            line_len += cell.len();
        }
    } else {
        for i in 0..d {
            if i > 0 {
                let newlines = ndim - depth - 1;
                out.push_str(&"\n".repeat(newlines));
                out.push_str(&" ".repeat(depth + 1));
            }
            if gaps[0] && i == EDGE {
                out.push_str("...");
                out.push_str(&"\n".repeat(ndim - depth - 1));
                out.push_str(&" ".repeat(depth + 1));
            }
            nest(
                rest,
                &cells[i * block..(i + 1) * block],
                &gaps[1..],
                depth + 1,
                out,
            );
        }
    }
    out.push(']');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show<T: DType>(shape: &[usize], v: &[T]) -> String {
        layout(shape, &format_cells(v), &vec![false; shape.len()])
    }

    #[test]
    fn numpy_str_of_small_arrays() {
        assert_eq!(show(&[3], &[1i32, 2, 3]), "[1 2 3]");
        assert_eq!(show(&[2, 2], &[1i32, 2, 3, 4]), "[[1 2]\n [3 4]]");
        assert_eq!(show(&[3], &[1.5f64, 2.0, 10.25]), "[ 1.5   2.   10.25]");
        assert_eq!(
            show(&[3], &[0.1f32, f32::NAN, f32::INFINITY]),
            "[0.1 nan inf]"
        );
        assert_eq!(show(&[2], &[10.25f64, f64::NAN]), "[10.25   nan]");
        assert_eq!(show(&[2], &[-1.0f64, 3.0]), "[-1.  3.]");
        assert_eq!(
            show(&[2, 2, 2], &[0u8, 1, 2, 3, 4, 5, 6, 7]),
            "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]"
        );
        assert_eq!(show::<f32>(&[], &[2.5]), "2.5");
        assert_eq!(show::<i64>(&[0], &[]), "[]");
        assert_eq!(show::<i64>(&[2, 0], &[]), "[]");
        assert_eq!(show(&[2], &[1e20f64, 1.5e-7]), "[ 1.e+20 1.5e-07]");
    }

    #[test]
    fn summaries_and_wrapping() {
        // np.arange(2000): "[   0    1    2 ...  1997 1998 1999]" in NumPy's spacing.
        let v: Vec<i64> = vec![0, 1, 2, 1997, 1998, 1999];
        let s = layout(&[6], &format_cells(&v), &[true]);
        assert_eq!(s, "[   0    1    2 ... 1997 1998 1999]");
        // np.arange(2000).reshape(1000, 2)
        let v: Vec<i64> = vec![0, 1, 2, 3, 4, 5, 1994, 1995, 1996, 1997, 1998, 1999];
        let s = layout(&[6, 2], &format_cells(&v), &[true, false]);
        assert_eq!(
            s,
            "[[   0    1]\n [   2    3]\n [   4    5]\n ...\n [1994 1995]\n [1996 1997]\n [1998 1999]]"
        );
        // 40 two-digit numbers wrap at 75 characters, continuation indented by one.
        let v: Vec<i64> = (10..50).collect();
        let s = show(&[40], &v);
        assert!(s.lines().all(|l| l.len() <= LINE_WIDTH), "{s}");
        assert!(s.lines().nth(1).is_some_and(|l| l.starts_with(' ')), "{s}");
        let joined: Vec<&str> = s.trim_matches(['[', ']']).split_whitespace().collect();
        assert_eq!(joined.len(), 40);
    }
}
