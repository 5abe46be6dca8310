//! The cuBLAS baseline: a dense f16 x f16 GEMM with f32 accumulation and an f32 C (`cublasGemmEx` with
//! `CUDA_R_16F` inputs, `CUDA_R_32F` output, `CUBLAS_COMPUTE_32F`), on the [`Gpu`]'s stream.
//!
//! cuBLAS is column-major and our matrices are row-major: a row-major `X (r x c, ld)` is the column-major
//! `X^T (c x r, ld)`, so `C = A @ B` is computed as `C^T = B^T @ A^T`, i.e. `gemm(n, m, k, B, ldb, A, lda, C,
//! ldc)` with no transposes.

use std::ffi::c_void;

use cudarc::cublas::{result as cublas_result, sys};
use cudarc::driver::sys::{CUdeviceptr, CUstream};
use cudarc::driver::{CudaSlice, CudaViewMut, DevicePtr, DevicePtrMut};
use half::f16;

use crate::cuda::{Library, catch, library};
use crate::error::{Error, Result};
use sparsek::gpu::Gpu;

/// What the bench names this contender.
pub const KIND: &str = "cublas-gemmex-f16-f32";

/// The workspace given to cuBLAS for launches captured into a CUDA graph ([`Cublas::bind`]): 32 MiB, cuBLAS's
/// own default on Hopper and what its documentation recommends there, so that a captured GEMM never allocates.
pub const GRAPH_WORKSPACE_BYTES: usize = 32 << 20;

/// libcublas, as cudarc opens it.
const LIB: Library = library!(sys, "libcublas", "CUDA 13: libcublas.so.13");

/// A cuBLAS handle bound to the [`Gpu`]'s stream.
pub struct Cublas {
    handle: sys::cublasHandle_t,
    version: i32,
}

impl Cublas {
    /// Loads cuBLAS and creates a handle on `gpu`'s stream, or says why it cannot (library missing from the
    /// loader's path, symbol missing, handle creation failed). cudarc panics when a library or symbol is
    /// missing; that is checked first and any remaining panic is caught.
    pub fn new(gpu: &Gpu) -> Result<Self> {
        LIB.require(&[
            "cublasCreate_v2",
            "cublasSetStream_v2",
            "cublasGemmEx",
            "cublasGetVersion_v2",
            "cublasSetWorkspace_v2",
            "cublasDestroy_v2",
        ])?;
        gpu.context().bind_to_thread().map_err(Error::driver("binding the CUDA context"))?;
        let handle =
            catch(cublas_result::create_handle)?.map_err(|source| Error::Cublas { call: "cublasCreate", source })?;
        // Owned from here on, so every early return destroys the handle exactly once.
        let mut me = Cublas { handle, version: 0 };
        // SAFETY: `handle` is a live handle and the stream belongs to the GPU's context, alive as long as `gpu`
        // (the bench drops this handle before the Gpu).
        unsafe { cublas_result::set_stream(me.handle, gpu.stream().cu_stream() as sys::cudaStream_t) }
            .map_err(|source| Error::Cublas { call: "cublasSetStream", source })?;
        // SAFETY: writes one int through a valid pointer.
        unsafe { sys::cublasGetVersion_v2(me.handle, &mut me.version) }
            .result()
            .map_err(|source| Error::Cublas { call: "cublasGetVersion", source })?;
        Ok(me)
    }

    /// The library version (e.g. 130100 for 13.1.0).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// `C = A @ B` for row-major `A (m x k, lda)`, `B (k x n, ldb)` in f16 and `C (m x n, ldc)` in f32,
    /// queued on the GPU's stream.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        gpu: &Gpu,
        (m, n, k): (usize, usize, usize),
        a: &CudaSlice<f16>,
        lda: usize,
        b: &CudaSlice<f16>,
        ldb: usize,
        c: &mut CudaViewMut<'_, f32>,
        ldc: usize,
    ) -> Result<()> {
        let ((mi, ni, ki), (ldai, ldbi, ldci)) = gemm_dims((m, n, k), (lda, ldb, ldc))?;
        let need = |len: usize, rows: usize, ld: usize, cols: usize, what| {
            if rows > 0 && cols > 0 && len < (rows - 1) * ld + cols {
                Err(Error::BufferTooSmall { what, len, rows, cols, ld })
            } else {
                Ok(())
            }
        };
        need(a.len(), m, lda, k, "A")?;
        need(b.len(), k, ldb, n, "B")?;
        need(c.len(), m, ldc, n, "C")?;
        let stream = gpu.stream();
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (pc, _rc) = c.device_ptr_mut(stream);
        // SAFETY: the handle is bound to the GPU's stream (`new`, or `bind` back to it); the three buffers hold the
        // row-major matrices checked above and stay alive (and tracked by their guards) until the call returns.
        unsafe { self.gemm_ex((mi, ni, ki), (pa, ldai), (pb, ldbi), (pc, ldci)) }
    }

    /// `C = A @ B` as [`Cublas::gemm`] on raw device addresses (row-major A, B in f16 and C in f32 with their
    /// leading dimensions), queued on the stream the handle is bound to: for launches captured into a CUDA graph,
    /// where no buffer's event may be recorded or waited on.
    ///
    /// # Safety
    /// `a`, `b` and `c` must hold `m x k` (ld `lda`), `k x n` (ld `ldb`) and `m x n` (ld `ldc`) matrices of this
    /// context, alive and not written by other work until the GEMM (or a graph that captured it) has run; `lda >= k`,
    /// `ldb >= n`, `ldc >= n`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_raw(
        &self,
        (m, n, k): (usize, usize, usize),
        (a, lda): (CUdeviceptr, usize),
        (b, ldb): (CUdeviceptr, usize),
        (c, ldc): (CUdeviceptr, usize),
    ) -> Result<()> {
        let ((mi, ni, ki), (ldai, ldbi, ldci)) = gemm_dims((m, n, k), (lda, ldb, ldc))?;
        // SAFETY: the caller's contract.
        unsafe { self.gemm_ex((mi, ni, ki), (a, ldai), (b, ldbi), (c, ldci)) }
    }

    /// Binds the handle to `stream` (`cublasSetStream`), then, when `workspace` is given (its device address and
    /// size), makes that buffer cuBLAS's workspace (`cublasSetWorkspace`: a GEMM captured into a graph must not
    /// allocate one; `cublasSetStream` resets the workspace to cuBLAS's own pool, so binding back to the GPU's
    /// stream without one restores the handle as [`Cublas::new`] left it).
    ///
    /// # Safety
    /// `stream` must be a live stream of the handle's context, and `workspace` (when given) a live allocation of
    /// at least that many bytes, used by nothing else, until the handle is bound elsewhere and every GEMM queued or
    /// captured meanwhile has run.
    pub unsafe fn bind(&self, stream: CUstream, workspace: Option<(CUdeviceptr, usize)>) -> Result<()> {
        // SAFETY: the caller's contract; the handle is live.
        unsafe { cublas_result::set_stream(self.handle, stream as sys::cudaStream_t) }
            .map_err(|source| Error::Cublas { call: "cublasSetStream", source })?;
        if let Some((ptr, bytes)) = workspace {
            // SAFETY: the caller's contract.
            unsafe { sys::cublasSetWorkspace_v2(self.handle, ptr as *mut c_void, bytes) }
                .result()
                .map_err(|source| Error::Cublas { call: "cublasSetWorkspace", source })?;
        }
        Ok(())
    }

    /// `cublasGemmEx` for row-major A, B and C (computed as `C^T = B^T @ A^T`, column-major).
    ///
    /// # Safety
    /// As [`Cublas::gemm_raw`], with the dimensions already converted and checked.
    unsafe fn gemm_ex(
        &self,
        (mi, ni, ki): (i32, i32, i32),
        (pa, ldai): (CUdeviceptr, i32),
        (pb, ldbi): (CUdeviceptr, i32),
        (pc, ldci): (CUdeviceptr, i32),
    ) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the handle is live; the caller guarantees the three buffers hold the row-major matrices
        // (column-major B^T (n x k, ldb >= n), A^T (k x m, lda >= k), C^T (n x m, ldc >= n)); alpha and beta are
        // host f32 values as CUBLAS_COMPUTE_32F with the default host pointer mode needs.
        unsafe {
            sys::cublasGemmEx(
                self.handle,
                sys::cublasOperation_t::CUBLAS_OP_N,
                sys::cublasOperation_t::CUBLAS_OP_N,
                ni,
                mi,
                ki,
                (&alpha as *const f32).cast::<c_void>(),
                pb as *const c_void,
                sys::cudaDataType_t::CUDA_R_16F,
                ldbi,
                pa as *const c_void,
                sys::cudaDataType_t::CUDA_R_16F,
                ldai,
                (&beta as *const f32).cast::<c_void>(),
                pc as *mut c_void,
                sys::cudaDataType_t::CUDA_R_32F,
                ldci,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .result()
        .map_err(|source| Error::Cublas { call: "cublasGemmEx", source })
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: the handle was created by cublasCreate and is destroyed once; errors are ignored (Drop never
        // panics).
        let _ = unsafe { cublas_result::destroy_handle(self.handle) };
    }
}

/// A row-major GEMM's sizes and leading dimensions as cuBLAS's ints, each checked to fit, and the leading
/// dimensions checked against the rows they hold (`lda >= k`, `ldb >= n`, `ldc >= n`).
#[allow(clippy::type_complexity)]
fn gemm_dims(
    (m, n, k): (usize, usize, usize),
    (lda, ldb, ldc): (usize, usize, usize),
) -> Result<((i32, i32, i32), (i32, i32, i32))> {
    let int = |what, v: usize| Error::fit::<i32>(what, v as u64, "cuBLAS's int");
    let dims = (int("m", m)?, int("n", n)?, int("k", k)?);
    let lds = (int("lda", lda)?, int("ldb", ldb)?, int("ldc", ldc)?);
    if lda < k || ldb < n || ldc < n {
        return Err(Error::LeadingDimensions { lda, ldb, ldc, k, n });
    }
    Ok((dims, lds))
}
