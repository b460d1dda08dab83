//! Storage for the arguments of a Fortran call made from a [`crate::call::Call`]: the values
//! Fortran takes by reference (integers in the library's width, characters, real and complex
//! scalars), pivot and count vectors converted between the caller's and the library's integer
//! width, and LAPACK workspace sized by a workspace query.
//!
//! [`crate::ffi::Marshal::fill`] asks the store for each argument; the CPU backend fills once in
//! [`Mode::Query`] (every queryable workspace length is -1), runs the query, sizes the
//! workspaces from what LAPACK wrote into their first elements, fills again in [`Mode::Run`] and
//! runs the call, then [`Store::finish`] copies converted integer outputs back.
//!
//! Every pointer the store hands out stays valid while the store lives and is not moved: values
//! live in fixed arrays of the store itself, vectors in heap buffers it owns.

use super::P;
use crate::call::{HostMat, Piv, Scalar};
use crate::cpu::FInt;
use crate::ops::Precision;

/// Query or run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Workspace lengths are -1: LAPACK only reports the sizes it wants.
    Query,
    /// Workspaces are allocated at the sizes the query reported.
    Run,
}

/// Which workspace array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WsKind {
    /// `work`: elements of the call's precision.
    Work,
    /// `rwork`: reals of the precision's real width.
    Rwork,
    /// `iwork`: integers.
    Iwork,
}

const NWS: usize = 3;

#[derive(Default)]
struct Ws {
    /// Registered in this fill.
    used: bool,
    /// Sized from the query: elements.
    len: usize,
    /// A lower bound in elements (the routine's documented minimum), used when the query
    /// reports less or nothing.
    min: usize,
    buf: Vec<u8>,
}

/// Direction of an integer vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntDir {
    /// Read by the routine (getrs's pivots).
    In,
    /// Written by the routine (getrf's pivots, counts).
    Out,
}

struct Conv<I> {
    user: Piv,
    tmp: Vec<I>,
    len: usize,
    out: bool,
}

/// See the module docs.
pub struct Store<I: FInt> {
    prec: Precision,
    mode: Mode,
    ints: [I; 32],
    nint: usize,
    chars: [u8; 8],
    nchar: usize,
    vals: [[u8; 16]; 8],
    nval: usize,
    ws: [Ws; NWS],
    query: [[u8; 32]; NWS],
    fixed: Vec<Vec<u8>>,
    convs: Vec<Conv<I>>,
    dummy: [u8; 64],
    info: I,
}

impl<I: FInt> Store<I> {
    /// An empty store for a call in `prec`.
    pub fn new(prec: Precision) -> Store<I> {
        Store {
            prec,
            mode: Mode::Query,
            ints: [I::from_usize(0); 32],
            nint: 0,
            chars: [0; 8],
            nchar: 0,
            vals: [[0; 16]; 8],
            nval: 0,
            ws: Default::default(),
            query: [[0; 32]; NWS],
            fixed: Vec::new(),
            convs: Vec::new(),
            dummy: [0; 64],
            info: I::from_usize(0),
        }
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The call's precision.
    pub fn prec(&self) -> Precision {
        self.prec
    }

    /// Starts a fill: values are stored again from the beginning (workspace sizes are kept).
    pub fn begin(&mut self, mode: Mode) {
        self.mode = mode;
        self.nint = 0;
        self.nchar = 0;
        self.nval = 0;
        self.convs.clear();
        self.fixed.clear();
        for w in &mut self.ws {
            w.used = false;
        }
        self.query = [[0; 32]; NWS];
        self.info = I::from_usize(0);
    }

    /// An integer argument (saturating at the library's width).
    pub fn int(&mut self, v: usize) -> P {
        self.int_i64(v.min(i64::MAX as usize) as i64)
    }

    /// A signed integer argument.
    pub fn int_i64(&mut self, v: i64) -> P {
        let i = self.nint.min(self.ints.len() - 1);
        self.ints[i] = I::from_i64(v);
        self.nint += 1;
        &mut self.ints[i] as *mut I as P
    }

    /// A character argument (`'N'`, `'L'`, ...).
    pub fn ch(&mut self, c: u8) -> P {
        let i = self.nchar.min(self.chars.len() - 1);
        self.chars[i] = c;
        self.nchar += 1;
        &mut self.chars[i] as *mut u8 as P
    }

    fn val(&mut self, bytes: &[u8]) -> P {
        let i = self.nval.min(self.vals.len() - 1);
        let n = bytes.len().min(16);
        self.vals[i] = [0; 16];
        self.vals[i][..n].copy_from_slice(&bytes[..n]);
        self.nval += 1;
        self.vals[i].as_mut_ptr() as P
    }

    /// A scalar of the call's precision (alpha, beta), or of its real width for herk's.
    pub fn scalar(&mut self, s: &Scalar) -> P {
        self.val(&s.0)
    }

    /// A real argument (rcond, abstol, vl, vu) in the precision's real width.
    pub fn real(&mut self, v: f64) -> P {
        if self.prec.real_size() == 4 {
            self.val(&(v as f32).to_ne_bytes())
        } else {
            self.val(&v.to_ne_bytes())
        }
    }

    /// A matrix's data pointer; a small zeroed dummy when it is null (an output the job does
    /// not reference, which some libraries still want to be a valid address).
    pub fn data(&mut self, m: &HostMat) -> P {
        self.ptr(m.ptr)
    }

    /// A raw data pointer, or the dummy when null.
    pub fn ptr(&mut self, p: *mut u8) -> P {
        if p.is_null() {
            self.dummy.as_mut_ptr() as P
        } else {
            p as P
        }
    }

    /// A leading dimension (at least 1, as LAPACK requires even for unreferenced matrices).
    pub fn ld(&mut self, m: &HostMat) -> P {
        self.int(m.ld.max(1))
    }

    /// An integer vector of `len` elements in the caller's width, passed in the library's
    /// (converted through a temporary when the widths differ).
    ///
    /// # Safety
    /// `v` must point to `len` integers (readable for [`IntDir::In`], writable for
    /// [`IntDir::Out`]) that stay valid until [`Store::finish`].
    pub unsafe fn ints(&mut self, v: Piv, len: usize, dir: IntDir) -> P {
        let direct = matches!(
            (v, std::mem::size_of::<I>()),
            (Piv::I32(_), 4) | (Piv::I64(_), 8)
        );
        let raw = match v {
            Piv::I32(p) => p as P,
            Piv::I64(p) => p as P,
        };
        if direct && !raw.is_null() {
            return raw;
        }
        let mut tmp = vec![I::from_usize(0); len.max(1)];
        if dir == IntDir::In && !raw.is_null() {
            for (j, t) in tmp.iter_mut().enumerate().take(len) {
                // SAFETY: the caller guarantees `len` readable integers.
                *t = I::from_i64(unsafe {
                    match v {
                        Piv::I32(p) => *p.add(j) as i64,
                        Piv::I64(p) => *p.add(j),
                    }
                });
            }
        }
        let ptr = tmp.as_mut_ptr() as P;
        self.convs.push(Conv {
            user: v,
            tmp,
            len,
            out: dir == IntDir::Out && !raw.is_null(),
        });
        ptr
    }

    fn ws(&mut self, k: WsKind, min: usize) -> P {
        let i = k as usize;
        let w = &mut self.ws[i];
        w.used = true;
        w.min = w.min.max(min);
        match self.mode {
            Mode::Query => self.query[i].as_mut_ptr() as P,
            Mode::Run => w.buf.as_mut_ptr() as P,
        }
    }

    fn ws_len(&mut self, k: WsKind) -> P {
        let len = match self.mode {
            Mode::Query => -1,
            Mode::Run => {
                let w = &self.ws[k as usize];
                w.len.max(w.min).max(1) as i64
            }
        };
        self.int_i64(len)
    }

    /// `work` (sized by the query) and its length argument `lwork`.
    pub fn work(&mut self) -> (P, P) {
        (self.ws(WsKind::Work, 1), self.ws_len(WsKind::Work))
    }

    /// `rwork` (sized by the query) and its length argument `lrwork`.
    pub fn rwork(&mut self) -> (P, P) {
        (self.ws(WsKind::Rwork, 1), self.ws_len(WsKind::Rwork))
    }

    /// `iwork` (sized by the query) and its length argument `liwork`.
    pub fn iwork(&mut self) -> (P, P) {
        (self.ws(WsKind::Iwork, 1), self.ws_len(WsKind::Iwork))
    }

    /// `rwork` without a length argument: at least `min` reals, more if the query's first
    /// element asks for more (gelsd).
    pub fn rwork_sized(&mut self, min: usize) -> P {
        self.ws(WsKind::Rwork, min)
    }

    /// `iwork` without a length argument: at least `min` integers, more if the query asks.
    pub fn iwork_sized(&mut self, min: usize) -> P {
        self.ws(WsKind::Iwork, min)
    }

    /// A scratch array of `len` elements of `elem` bytes that needs no query (gesdd's `iwork`,
    /// the complex SVDs' `rwork`).
    pub fn fixed(&mut self, len: usize, elem: usize) -> P {
        let mut v = vec![0u8; len.max(1) * elem];
        let p = v.as_mut_ptr() as P;
        self.fixed.push(v);
        p
    }

    /// Bytes of one real of the call's precision.
    pub fn real_size(&self) -> usize {
        self.prec.real_size()
    }

    /// Bytes of one library integer.
    pub fn int_size(&self) -> usize {
        std::mem::size_of::<I>()
    }

    /// The `info` argument.
    pub fn info(&mut self) -> P {
        &mut self.info as *mut I as P
    }

    /// LAPACK's `info` after the call.
    pub fn info_value(&self) -> i64 {
        self.info.to_i64()
    }

    /// True when the fill registered a workspace, i.e. a query must run first.
    pub fn wants_query(&self) -> bool {
        self.ws.iter().any(|w| w.used)
    }

    /// After the query call: sizes every registered workspace from the first element LAPACK
    /// wrote into it (never below the routine's minimum).
    pub fn size_from_query(&mut self) {
        for (i, kind) in [WsKind::Work, WsKind::Rwork, WsKind::Iwork]
            .into_iter()
            .enumerate()
        {
            if !self.ws[i].used {
                continue;
            }
            let q = &self.query[i];
            let reported = match kind {
                WsKind::Work | WsKind::Rwork => {
                    let single = self.prec.real_size() == 4;
                    let x = if single {
                        f32::from_ne_bytes([q[0], q[1], q[2], q[3]]) as f64
                    } else {
                        f64::from_ne_bytes([q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]])
                    };
                    if x.is_finite() && x > 0.0 {
                        // LAPACK rounds sizes into floats; round up a little to be safe
                        (x * (1.0 + 1e-6)).ceil() as usize + 1
                    } else {
                        0
                    }
                }
                WsKind::Iwork => {
                    let v = if std::mem::size_of::<I>() == 4 {
                        i32::from_ne_bytes([q[0], q[1], q[2], q[3]]) as i64
                    } else {
                        i64::from_ne_bytes([q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]])
                    };
                    v.max(0) as usize
                }
            };
            let elem = match kind {
                WsKind::Work => self.prec.size(),
                WsKind::Rwork => self.prec.real_size(),
                WsKind::Iwork => std::mem::size_of::<I>(),
            };
            let w = &mut self.ws[i];
            w.len = reported.max(w.min).max(1);
            w.buf = vec![0u8; w.len * elem];
        }
    }

    /// Copies integer outputs that went through a temporary back to the caller.
    pub fn finish(&mut self) {
        for c in &self.convs {
            if !c.out {
                continue;
            }
            for (j, t) in c.tmp.iter().enumerate().take(c.len) {
                // SAFETY: `ints`' contract: the user vector holds `len` writable integers
                // until now.
                unsafe {
                    match c.user {
                        Piv::I32(p) => *p.add(j) = t.to_i64() as i32,
                        Piv::I64(p) => *p.add(j) = t.to_i64(),
                    }
                }
            }
        }
    }
}
