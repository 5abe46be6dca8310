//! The typed, validated launcher of the BSR SpMM kernels ([`Op::BsrSpmm`]).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use half::f16;
use sparsek_layout::{BsrSpmmParams, Op};

use super::SpmmArg;
use crate::Epilogue;
use crate::error::{BsrError, Error, Result};
use crate::gpu::Gpu;
use crate::gpu::buffers::{DeviceBsr, DeviceMatrix, OutputElement};
use crate::gpu::driver::cuda;
use crate::gpu::registry::Kernel;

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
        let kernel = u32::try_from(a.bs)
            .ok()
            .and_then(|bs| self.kernel(Op::BsrSpmm, bs, TC::OUT_TYPE))
            .ok_or(Error::InvalidBsr(BsrError::UnsupportedBlockSize { bs: a.bs }))?;
        self.launch_spmm(stream, kernel, a, b, c, ep, None)
    }

    /// [`Gpu::spmm`] with a kernel of the tuning module ([`Gpu::tuning_variants`]) on the default stream. The
    /// variant must be built for A's block size and for `TC`. `group_rows` overrides the rasterization group
    /// (block rows per group; `Some(u32::MAX)` is plain row-fastest order); `None` lets the launcher choose, as
    /// [`Gpu::spmm`] does.
    #[cfg(feature = "tuning")]
    #[doc(hidden)]
    pub fn spmm_variant<TC: OutputElement>(
        &self,
        variant: &crate::gpu::KernelVariant,
        a: &DeviceBsr,
        b: &DeviceMatrix<f16>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
        group_rows: Option<u32>,
    ) -> Result<()> {
        let k = &variant.0;
        let v = k.variant;
        if v.bs as usize != a.bs || v.out != TC::OUT_TYPE {
            return Err(Error::InvalidArgument {
                name: "variant",
                reason: format!(
                    "{} is for bs {} and {} output; A has bs {}, C is {}",
                    v.name,
                    v.bs,
                    v.out.name(),
                    a.bs,
                    TC::OUT_TYPE.name()
                ),
            });
        }
        let stream = self.stream().clone();
        self.launch_spmm(&stream, k, a, b, c, ep, group_rows)
    }

    /// Validates everything (shapes, contexts, sizes against the kernel's 32-bit indexing) and launches `kernel`:
    /// every public entry point comes through here.
    #[allow(clippy::too_many_arguments)]
    fn launch_spmm<TC: OutputElement>(
        &self,
        stream: &Arc<CudaStream>,
        kernel: &Kernel,
        a: &DeviceBsr,
        b: &DeviceMatrix<f16>,
        c: &mut DeviceMatrix<TC>,
        ep: Epilogue,
        group_rows: Option<u32>,
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
        let cfg = kernel.config();
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
        let block_rows = (m / a.bs) as u32;
        let n_tiles = n.div_ceil(cfg.bn as usize);
        let ctas = too_big("CTAs (M / bs * N / BN)", block_rows as usize * n_tiles, i32::MAX as usize)?;
        let group_rows = group_rows.unwrap_or_else(|| {
            // Grouping measured +5% (bs 128) and +13% (bs 64, skewed rows) but -2% (bs 32) and up to -11%
            // (bs 16) on an H100 (docs/perf-notes.md, step 3), so small blocks keep the plain order.
            if a.bs < 64 {
                return block_rows;
            }
            let wave = (kernel.ctas_per_sm.max(1) * self.info().sm_count) as usize;
            let a_row_bytes = a.nnzb * a.bs * a.bs * 2 / (block_rows as usize).max(1);
            let b_tile_bytes = k * cfg.bn as usize * 2;
            raster_group_rows(block_rows as usize, n_tiles, a_row_bytes, b_tile_bytes, wave, self.info().l2_bytes)
        });
        // DeviceMatrix guarantees 16-byte aligned rows; checked again because the kernel's cp.async and vector
        // stores would fault or corrupt otherwise.
        debug_assert!(b.ld().is_multiple_of(8) && (c.ld() * std::mem::size_of::<TC>()).is_multiple_of(16));

        let launch = LaunchConfig {
            grid_dim: (ctas, 1, 1),
            block_dim: (cfg.threads(), 1, 1),
            shared_mem_bytes: cfg.smem_bytes(),
        };
        // The device addresses; each guard records the launch on its buffer's event when dropped (after the
        // launch), so cudarc's cross-stream synchronisation sees the kernel's reads and writes.
        let (a_values, _g0) = a.values.device_ptr(stream);
        let (row_ptr, _g1) = a.row_ptr.device_ptr(stream);
        let (col_idx, _g2) = a.col_idx.device_ptr(stream);
        let (row_order, _g3) = a.row_order.device_ptr(stream);
        let (b_ptr, _g4) = b.as_slice().device_ptr(stream);
        let (c_ptr, _g5) = c.as_mut_slice().device_ptr_mut(stream);
        let params = SpmmArg(BsrSpmmParams {
            a_values,
            row_ptr,
            col_idx,
            row_order,
            b: b_ptr,
            c: c_ptr,
            ldb,
            ldc,
            n: n32,
            block_rows,
            group_rows,
            alpha: ep.alpha,
            beta: ep.beta,
            _pad: 0,
        });
        let mut builder = stream.launch_builder(&kernel.func);
        builder.arg(&params);
        // SAFETY: the kernel takes one BsrSpmmParams by value (kernels-gpu/src/bsr.rs), and its preconditions
        // hold: A's structure was validated by Bsr::try_new and uploaded whole (row_ptr has block_rows + 1
        // entries, col_idx < K / bs, values nnzb * bs^2, row_order a permutation of the block rows); B holds K
        // rows of ldb >= N elements and C holds M rows of ldc >= N elements (checked above and by DeviceMatrix,
        // whose buffer cannot be replaced from outside the crate); rows are 16-byte aligned (DeviceMatrix); all
        // buffers belong to this context (checked by the callers); grid, block and shared memory follow the
        // variant's KernelConfig, checked and given its dynamic shared memory limit when the module was loaded.
        unsafe { builder.launch(launch) }.map_err(cuda("cuLaunchKernel (sparsek_bsr)"))?;
        Ok(())
    }
}

/// Block rows per rasterization group (see `layout::raster`). A wave of `wave` concurrent CTAs covers `R` block
/// rows and about `wave / R` N tiles, so its working set is `R * a_row_bytes + (wave / R) * b_tile_bytes`,
/// smallest at `R = sqrt(wave * b_tile_bytes / a_row_bytes)`. When the whole of A plus the B strips of a wave in
/// plain row-fastest order fit in half of L2, the plain order (one group) is kept.
pub(crate) fn raster_group_rows(
    block_rows: usize,
    n_tiles: usize,
    a_row_bytes: usize,
    b_tile_bytes: usize,
    wave: usize,
    l2_bytes: u64,
) -> u32 {
    let block_rows = block_rows.max(1);
    let plain_tiles = wave.div_ceil(block_rows).min(n_tiles.max(1));
    let plain_set = block_rows * a_row_bytes + plain_tiles * b_tile_bytes;
    if (plain_set as u64) <= l2_bytes / 2 || a_row_bytes == 0 {
        return block_rows.min(u32::MAX as usize) as u32;
    }
    let r = ((wave as f64) * (b_tile_bytes as f64) / (a_row_bytes as f64)).sqrt().round() as usize;
    r.clamp(1, block_rows).min(u32::MAX as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::raster_group_rows;

    #[test]
    fn group_rows_balance_a_and_b() {
        // 8192^3, bs 128, 22%: 64 block rows of ~14 blocks (460 KB of A each), B strips of 2 MiB, wave 264, 50 MB L2.
        let r = raster_group_rows(64, 64, 14 * 128 * 128 * 2, 8192 * 128 * 2, 264, 50 << 20);
        assert!((30..=40).contains(&r), "{r}");
        // Small problems keep the plain order.
        assert_eq!(raster_group_rows(16, 4, 64 * 1024, 1 << 20, 264, 50 << 20), 16);
        // No blocks at all: plain order.
        assert_eq!(raster_group_rows(64, 64, 0, 1 << 21, 264, 50 << 20), 64);
    }
}
