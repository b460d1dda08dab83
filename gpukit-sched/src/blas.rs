//! cuBLAS for a task: a handle created while the task's green context is current and bound
//! to the task's green-context stream, so cuBLAS kernels run on the task's SMs, with its
//! workspace set to a buffer charged to the task (so the workspace counts in the task's
//! memory quota instead of bypassing it).
//!
//! This goes once gpukit-core's shared handle cache (`gpukit_core::handles::BlasHandle`) is
//! there to use instead.

use crate::error::{Error, Result};
use cudarc::cublas::{result as cb, sys as cbsys};
use cudarc::driver::sys;

fn err(action: &str, e: impl std::fmt::Debug) -> Error {
    Error::Cublas {
        action: action.to_string(),
        message: format!("{e:?}"),
    }
}

/// A cuBLAS handle bound to one green-context stream. Destroyed on drop.
pub struct TaskBlas {
    handle: cbsys::cublasHandle_t,
}

// SAFETY: a cuBLAS handle may be moved between threads (it must not be used by two threads at
// once, which `&mut`-free use through one owner guarantees: TaskBlas is not Sync).
unsafe impl Send for TaskBlas {}

impl std::fmt::Debug for TaskBlas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TaskBlas({:p})", self.handle)
    }
}

impl TaskBlas {
    /// Creates a handle in context `ctx` (a green context's `CUcontext`) bound to `stream`,
    /// using `workspace` (device address and size in bytes) as its workspace when given.
    ///
    /// # Safety
    /// `workspace` must be a device allocation of at least that many bytes that outlives the
    /// handle and is ordered on `stream`.
    pub unsafe fn new(
        ctx: sys::CUcontext,
        stream: sys::CUstream,
        workspace: Option<(u64, usize)>,
    ) -> Result<Self> {
        if !gpukit_jit::libs::cublas_present() {
            return Err(err("loading cuBLAS", "libcublas could not be loaded"));
        }
        crate::green::make_current(ctx)?;
        let handle = cb::create_handle().map_err(|e| err("creating a handle", e))?;
        let me = TaskBlas { handle };
        // SAFETY: live handle; `stream` is a live stream of the current context.
        unsafe { cb::set_stream(me.handle, stream as cbsys::cudaStream_t) }
            .map_err(|e| err("binding the task stream", e))?;
        if let Some((ptr, bytes)) = workspace {
            // SAFETY: live handle; the caller guarantees the workspace allocation.
            let status = unsafe {
                cbsys::cublasSetWorkspace_v2(me.handle, ptr as *mut std::ffi::c_void, bytes)
            };
            if status != cbsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(err("setting the task's workspace", status));
            }
        }
        Ok(me)
    }

    /// The raw handle, for any cuBLAS call (it is bound to the task's stream).
    pub fn handle(&self) -> cbsys::cublasHandle_t {
        self.handle
    }

    /// `C = A * B` in FP32, column-major, `A` m x k, `B` k x n, `C` m x n (device pointers).
    ///
    /// # Safety
    /// `a`, `b`, `c` must be device allocations of at least m*k, k*n and m*n floats that stay
    /// alive until the stream's work is done.
    pub unsafe fn sgemm(&self, m: i32, n: i32, k: i32, a: u64, b: u64, c: u64) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the caller guarantees the pointers; the scalars live on the stack for the
        // call (host pointer mode, the default).
        unsafe {
            cb::sgemm(
                self.handle,
                cbsys::cublasOperation_t::CUBLAS_OP_N,
                cbsys::cublasOperation_t::CUBLAS_OP_N,
                m,
                n,
                k,
                &alpha,
                a as *const f32,
                m,
                b as *const f32,
                k,
                &beta,
                c as *mut f32,
                m,
            )
        }
        .map_err(|e| err("running sgemm", e))
    }
}

impl Drop for TaskBlas {
    fn drop(&mut self) {
        // SAFETY: created by cublasCreate and destroyed exactly once.
        unsafe {
            let _ = cb::destroy_handle(self.handle);
        }
    }
}
