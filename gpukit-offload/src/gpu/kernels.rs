//! The backend's own kernels: the fused non-finite check and its guard (`kernels/finite.cu`).
//!
//! They ship as PTX (`kernels/finite.ptx`, NVRTC's output for `compute_75` made loadable by
//! drivers from CUDA 11.0 on: see [`ptx_for_old_drivers`]), loaded by the driver once per
//! backend with `cuModuleLoadData`: no NVRTC is needed where the shim runs. A test rebuilds the
//! PTX from the source with NVRTC and compares (the source and the PTX cannot drift apart), and
//! another assembles it with `ptxas` for the oldest and the newest target.

use crate::gpu::fail::{cu_ok, fail, GResult, GpuFailKind};
use cudarc::driver::sys as cu;
use std::ffi::c_void;

/// The kernel source (for the rebuild test and for readers).
pub const FINITE_CU: &str = include_str!("../../kernels/finite.cu");
/// The PTX the backend loads.
pub const FINITE_PTX: &str = include_str!("../../kernels/finite.ptx");

/// Operands one launch checks at most (`MAX_OPERANDS` in the source).
pub(crate) const MAX_OPERANDS: usize = 4;
/// Threads per block of both kernels.
pub(crate) const BLOCK: u32 = 256;
/// Up to this many elements in all, one block checks a group and guards it inline (one launch);
/// larger groups get more blocks and a separate guard launch.
pub(crate) const ONE_BLOCK_ELEMS: usize = 32 << 10;
/// The most blocks of one launch.
const MAX_BLOCKS: usize = 1024;

/// NVRTC's PTX made loadable by older drivers: the `.version` line set to 7.0 and the
/// `used_bytes_mask` pragmas (load hints that need PTX ISA 8.3) left out. Nothing else in the
/// code is newer than 7.0; `ptxas` checks that in the tests.
pub fn ptx_for_old_drivers(nvrtc_ptx: &str) -> String {
    let mut out = String::with_capacity(nvrtc_ptx.len());
    for line in nvrtc_ptx.lines() {
        if line.trim_start().starts_with(".pragma \"used_bytes_mask") {
            continue;
        }
        if line.starts_with(".version ") {
            out.push_str(".version 7.0");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// What a check reads of one operand (`Operand` in the source).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KOperand {
    /// Device address of the packed operand.
    pub(crate) ptr: u64,
    /// Rows (a vector: its length).
    pub(crate) rows: i64,
    /// Elements to scan (`rows * cols`).
    pub(crate) elems: i64,
    /// 0 dense, 1 reals of the real type, 2 triangle, 3 symmetric / Hermitian.
    pub(crate) kind: i32,
    /// The lower triangle is referenced.
    pub(crate) lower: i32,
    /// A unit triangle: the diagonal is not referenced.
    pub(crate) skip_diag: i32,
    /// Hermitian: the imaginary parts of the diagonal are not referenced.
    pub(crate) herm: i32,
}

/// One launch's operands (`Group` in the source), passed by value as the first parameter.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KGroup {
    pub(crate) op: [KOperand; MAX_OPERANDS],
    pub(crate) count: i32,
    pub(crate) complex: i32,
    pub(crate) guard: i32,
    pub(crate) pad: i32,
}

// the parameter the PTX declares: `.param .align 8 .b8 offload_finite_f32_param_0[176]`
const _: () = assert!(std::mem::size_of::<KGroup>() == 176);
const _: () = assert!(std::mem::align_of::<KGroup>() == 8);

impl KGroup {
    /// Elements the group scans in all.
    pub(crate) fn elems(&self) -> usize {
        self.op[..self.count.max(0) as usize]
            .iter()
            .map(|o| o.elems.max(0) as usize)
            .sum()
    }
}

/// Blocks of a check launch over `elems` elements (1: the launch guards inline).
pub(crate) fn blocks_for(elems: usize) -> usize {
    if elems <= ONE_BLOCK_ELEMS {
        1
    } else {
        elems.div_ceil(BLOCK as usize * 16).clamp(2, MAX_BLOCKS)
    }
}

/// The loaded module and its four functions (per backend, in its context).
pub(crate) struct CheckKernels {
    module: cu::CUmodule,
    /// `offload_finite_f32`, `offload_finite_f64`.
    finite: [cu::CUfunction; 2],
    /// `offload_guard_f32`, `offload_guard_f64`.
    guard: [cu::CUfunction; 2],
}

// SAFETY: module and function handles are context-wide driver objects, usable from any thread
// with their context current (the backend binds it before every use).
unsafe impl Send for CheckKernels {}
// SAFETY: as above; launching is thread-safe in the driver.
unsafe impl Sync for CheckKernels {}

impl CheckKernels {
    /// Loads the PTX into the current context (the backend's, bound by the caller).
    pub(crate) fn load() -> GResult<CheckKernels> {
        let image = std::ffi::CString::new(FINITE_PTX).map_err(|_| {
            fail(
                GpuFailKind::Error,
                "the check kernels' PTX holds a NUL byte",
            )
        })?;
        let mut module = std::ptr::null_mut();
        cu_ok(
            // SAFETY: a NUL-terminated PTX image; the context is current (caller).
            unsafe { cu::cuModuleLoadData(&mut module, image.as_ptr() as *const c_void) },
            "loading the non-finite check kernels",
        )?;
        let get = |name: &str| -> GResult<cu::CUfunction> {
            let c = std::ffi::CString::new(name).expect("kernel names hold no NUL");
            let mut f = std::ptr::null_mut();
            cu_ok(
                // SAFETY: a live module and a NUL-terminated name.
                unsafe { cu::cuModuleGetFunction(&mut f, module, c.as_ptr()) },
                "finding a check kernel",
            )?;
            Ok(f)
        };
        let funcs = (|| {
            Ok::<_, crate::gpu::GpuFail>((
                [get("offload_finite_f32")?, get("offload_finite_f64")?],
                [get("offload_guard_f32")?, get("offload_guard_f64")?],
            ))
        })();
        match funcs {
            Ok((finite, guard)) => Ok(CheckKernels {
                module,
                finite,
                guard,
            }),
            Err(e) => {
                // SAFETY: the module was loaded above and nothing uses it.
                unsafe { cu::cuModuleUnload(module) };
                Err(e)
            }
        }
    }

    /// Queues the check of `g` on `stream` (bits into the `u32` at `flag`), and its guard when
    /// `g.guard` asks for one and the check needs more than one block. Returns the launches.
    ///
    /// # Safety
    /// Every operand of `g` lies in device memory of the current context, readable (and
    /// writable when guarded) by `stream`'s work; `flag` is a zeroed `u32` there.
    pub(crate) unsafe fn check(
        &self,
        real_size: usize,
        g: &KGroup,
        flag: u64,
        stream: cu::CUstream,
    ) -> GResult<usize> {
        let t = usize::from(real_size == 8);
        let blocks = blocks_for(g.elems());
        let mut first = *g;
        // the check guards inline only when one block sees every element
        first.guard = i32::from(g.guard != 0 && blocks == 1);
        // SAFETY: forwarded contract.
        unsafe { launch(self.finite[t], blocks, &first, flag, stream)? };
        if g.guard != 0 && blocks > 1 {
            // SAFETY: forwarded contract; ordered after the check on the same stream.
            unsafe { launch(self.guard[t], blocks, g, flag, stream)? };
            return Ok(2);
        }
        Ok(1)
    }
}

/// Launches `f(group, flag)` with `blocks` blocks of [`BLOCK`] threads.
///
/// # Safety
/// As [`CheckKernels::check`].
unsafe fn launch(
    f: cu::CUfunction,
    blocks: usize,
    g: &KGroup,
    flag: u64,
    stream: cu::CUstream,
) -> GResult<()> {
    let mut g = *g;
    let mut flag = flag;
    let mut params = [
        &mut g as *mut KGroup as *mut c_void,
        &mut flag as *mut u64 as *mut c_void,
    ];
    cu_ok(
        // SAFETY: the parameters match the kernel's (a 176-byte group by value, a pointer);
        // the driver copies them before returning.
        unsafe {
            cu::cuLaunchKernel(
                f,
                blocks as u32,
                1,
                1,
                BLOCK,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        },
        "launching a non-finite check",
    )
}

impl Drop for CheckKernels {
    fn drop(&mut self) {
        // SAFETY: the module is ours; the backend drops it with its context bound, after its
        // lanes (and their queued work) are gone.
        unsafe { cu::cuModuleUnload(self.module) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_layout_matches_the_kernels_parameter() {
        // the PTX's first parameter is a 176-byte, 8-aligned block: the group
        for entry in [
            "offload_finite_f32",
            "offload_finite_f64",
            "offload_guard_f32",
            "offload_guard_f64",
        ] {
            let decl = format!(".param .align 8 .b8 {entry}_param_0[176]");
            assert!(FINITE_PTX.contains(&decl), "{entry}: {decl} not in the PTX");
            assert!(FINITE_PTX.contains(&format!(".visible .entry {entry}(")));
        }
        assert_eq!(std::mem::offset_of!(KGroup, count), 160);
        assert_eq!(std::mem::offset_of!(KOperand, kind), 24);
        assert!(FINITE_CU.contains(&format!("#define MAX_OPERANDS {MAX_OPERANDS}")));
    }

    #[test]
    fn the_ptx_loads_on_drivers_from_cuda_11() {
        assert!(FINITE_PTX.contains("\n.version 7.0\n"));
        assert!(FINITE_PTX.contains("\n.target sm_75\n"));
        assert!(!FINITE_PTX.contains("used_bytes_mask"));
        let src = ".version 9.0\n.target sm_75\n\t.pragma \"used_bytes_mask 15\";\n\tld.param.u32 %r1, [x];\n";
        assert_eq!(
            ptx_for_old_drivers(src),
            ".version 7.0\n.target sm_75\n\tld.param.u32 %r1, [x];\n"
        );
    }

    #[test]
    fn small_groups_take_one_block_and_large_ones_are_bounded() {
        assert_eq!(blocks_for(0), 1);
        assert_eq!(blocks_for(ONE_BLOCK_ELEMS), 1);
        assert!(blocks_for(ONE_BLOCK_ELEMS + 1) >= 2);
        assert_eq!(blocks_for(usize::MAX / 2), MAX_BLOCKS);
        let mut g = KGroup {
            count: 2,
            ..KGroup::default()
        };
        g.op[0].elems = 10;
        g.op[1].elems = 5;
        g.op[2].elems = 1000; // not counted: beyond `count`
        assert_eq!(g.elems(), 15);
    }

    /// The PTX is NVRTC's output of the source (made loadable by older drivers): rebuilt here
    /// when NVRTC 13.0 (the version that made it) is available. With
    /// `GPUKIT_OFFLOAD_WRITE_PTX=1` the rebuilt PTX is written to `kernels/finite.ptx`.
    #[test]
    fn the_ptx_is_built_from_its_source() {
        if !gpukit_jit::testing::nvrtc("the_ptx_is_built_from_its_source") {
            return;
        }
        let v = gpukit_jit::nvrtc_version().expect("NVRTC version");
        let opts = gpukit_jit::CompileOptions::new().output(gpukit_jit::Output::Ptx);
        let m = gpukit_jit::compile(FINITE_CU, "finite", gpukit_jit::Arch::new(7, 5), &opts)
            .expect("the check kernels compile");
        let ptx = ptx_for_old_drivers(
            std::str::from_utf8(&m.image)
                .expect("PTX is text")
                .trim_end_matches('\0'),
        );
        if std::env::var("GPUKIT_OFFLOAD_WRITE_PTX").as_deref() == Ok("1") {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/finite.ptx");
            std::fs::write(path, &ptx).expect("write the PTX");
        }
        if v != (13, 0) {
            println!("skipped: NVRTC {v:?} here, the PTX was made by 13.0; compiled it only");
            return;
        }
        let body = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| !l.starts_with("//"))
                .map(str::to_string)
                .collect()
        };
        assert!(
            body(&ptx) == body(FINITE_PTX),
            "kernels/finite.ptx is not the PTX of kernels/finite.cu: rebuild it with GPUKIT_OFFLOAD_WRITE_PTX=1"
        );
    }

    /// `ptxas` (from `GPUKIT_PTXAS`, else on the PATH) assembles the shipped PTX for the oldest
    /// target it names and for the H200's, with no stack frame or spills.
    #[test]
    fn ptxas_assembles_the_ptx() {
        let ptxas = std::env::var("GPUKIT_PTXAS").unwrap_or_else(|_| "ptxas".into());
        let dir = tempfile::tempdir().expect("temp dir");
        let src = dir.path().join("finite.ptx");
        std::fs::write(&src, FINITE_PTX).expect("write");
        for arch in ["sm_75", "sm_90"] {
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg("-v")
                .arg(&src)
                .arg("-o")
                .arg(dir.path().join("finite.cubin"))
                .output();
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    println!("skipped: no ptxas ({ptxas}: {e}); set GPUKIT_PTXAS");
                    return;
                }
            };
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "ptxas {arch}: {log}");
            for l in log.lines().filter(|l| l.contains("spill")) {
                assert!(
                    l.contains("0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
                    "{arch}: {l}"
                );
            }
        }
    }
}
