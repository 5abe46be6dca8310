//! The typed, validated launcher of the BSR SpMM kernels.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use half::f16;

use super::buffers::{DeviceBsr, DeviceMatrix, OutputElement};
use super::{Gpu, cuda};
use crate::Epilogue;
use crate::error::{Error, Result};
use crate::format::BsrError;

impl Gpu {
    /// `C = alpha * (A @ B) + beta * C` on the GPU's default stream, f16 inputs, f32 accumulation, C in f32 or
    /// f16. With `beta == 0` C is not read. Asynchronous: the call returns once the kernel is queued.
    ///
    /// Everything is checked before the launch, and a rejected call changes nothing: shapes
    /// ([`Error::ShapeMismatch`]), leading dimensions, buffers from another GPU context, sizes beyond the
    /// kernel's 32-bit indexing ([`Error::InvalidArgument`]). A launch the driver refuses returns
    /// [`Error::Cuda`]; C's contents are then unspecified.
    pub fn spmm<TC: OutputElement>(
        &self,
        a: &DeviceBsr,
        b: &DeviceMatrix<f16>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
    ) -> Result<()> {
        let stream = self.stream().clone();
        self.spmm_on(&stream, a, b, c, ep)
    }

    /// [`Gpu::spmm`] on a stream of the caller's choice (from [`Gpu::new_stream`]). Buffers used on other
    /// streams are synchronised by cudarc's event tracking.
    pub fn spmm_on<TC: OutputElement>(
        &self,
        stream: &Arc<CudaStream>,
        a: &DeviceBsr,
        b: &DeviceMatrix<f16>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
    ) -> Result<()> {
        let (m, k, n) = (a.rows(), a.cols(), b.cols());
        if b.rows() != k || c.rows() != m || c.cols() != n {
            return Err(Error::ShapeMismatch { a: (m, k), b: (b.rows(), n), c: (c.rows(), c.cols()) });
        }
        let same_ctx = |ctx: &Arc<cudarc::driver::CudaContext>| Arc::ptr_eq(ctx, self.context());
        if !same_ctx(stream.context())
            || !same_ctx(a.values.context())
            || !same_ctx(b.as_slice().context())
            || !same_ctx(c.as_slice().context())
        {
            return Err(Error::InvalidArgument {
                name: "buffers",
                reason: "A, B, C and the stream must all belong to this Gpu's context".into(),
            });
        }
        let kernel = self
            .kernel(a.bs as u32, TC::KERNEL_SUFFIX)
            .ok_or(Error::InvalidBsr(BsrError::UnsupportedBlockSize { bs: a.bs }))?;
        let cfg = kernel.config;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let too_big = |name: &'static str, v: usize, max: usize| -> Result<u32> {
            if v > max {
                Err(Error::InvalidArgument { name, reason: format!("{v} exceeds the kernel's limit of {max}") })
            } else {
                Ok(v as u32)
            }
        };
        let n32 = too_big("N", n, u32::MAX as usize)?;
        let ldb = too_big("ldb", b.ld(), u32::MAX as usize)?;
        let ldc = too_big("ldc", c.ld(), u32::MAX as usize)?;
        too_big("M", m, u32::MAX as usize)?;
        too_big("K", k, u32::MAX as usize)?;
        let n_tiles = too_big("N tiles (N / BN)", n.div_ceil(cfg.bn as usize), 65535)?;
        let block_rows = (m / a.bs) as u32;
        // DeviceMatrix guarantees 16-byte aligned rows; checked again because the kernel's cp.async and vector
        // stores would fault or corrupt otherwise.
        debug_assert!(b.ld().is_multiple_of(8) && (c.ld() * std::mem::size_of::<TC>()).is_multiple_of(16));

        let launch = LaunchConfig {
            grid_dim: (block_rows, n_tiles, 1),
            block_dim: (cfg.threads(), 1, 1),
            shared_mem_bytes: cfg.smem_bytes(),
        };
        let (alpha, beta) = (ep.alpha, ep.beta);
        let mut builder = stream.launch_builder(&kernel.func);
        builder
            .arg(&a.values)
            .arg(&a.row_ptr)
            .arg(&a.col_idx)
            .arg(&a.row_order)
            .arg(b.as_slice())
            .arg(&ldb)
            .arg(c.as_mut_slice())
            .arg(&ldc)
            .arg(&n32)
            .arg(&alpha)
            .arg(&beta);
        // SAFETY: the argument list matches the kernel's signature (kernels-gpu/src/bsr.rs: seven pointers and
        // scalars in this order); A's structure was validated by Bsr::try_new and uploaded whole (row_ptr has
        // block_rows + 1 entries, col_idx < K / bs, values nnzb * bs^2, row_order a permutation of the block
        // rows); B holds K rows of ldb >= N elements and C holds M rows of ldc >= N elements (checked above and
        // by DeviceMatrix); rows are 16-byte aligned (DeviceMatrix); grid, block and shared memory follow the
        // kernel's KernelConfig, whose dynamic shared memory limit was raised at load.
        unsafe { builder.launch(launch) }.map_err(cuda("cuLaunchKernel (sparsek_bsr)"))?;
        Ok(())
    }
}
