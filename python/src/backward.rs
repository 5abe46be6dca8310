//! The backward products on CUDA tensors (issue 44): `sparsek::bsr_mm_t` and `sparsek::sddmm`'s GPU kernels,
//! `Gpu::spmm_t_raw` and `Gpu::sddmm_raw` on torch's current stream. Like `cuda_spmm`, the functions take plain
//! integers the Python layer read off live tensors after checking them (and the structure, on the device, once).

use pyo3::prelude::*;
use sparsek::gpu::{BsrArrays, BsrView, CUstream, DenseView, DenseViewMut, Gpu, InputElement, OutputElement};
use sparsek::gpu::{IndexType, RowSchedule, TransposeView};
use sparsek::{Epilogue, Error, Layout, bf16, f16};

use crate::{BsrArgs, gpu, layout, to_py};

/// `c = alpha * A^T @ b` described as the Python layer passes it: the type names, A (values, checked row_ptr and
/// col_idx, 64-bit?, rows, cols, bs, nnzb), b (address, leading dimension, column-major?, N: `rows x N`), c
/// (address, leading dimension, column-major?: `cols x N`), alpha, and the transposed index (col_ptr, row_idx,
/// perm: int32 device tensors of the same structure).
#[derive(FromPyObject)]
pub(crate) struct TArgs((String, String), BsrArgs, (u64, usize, bool, usize), (u64, usize, bool), f32, (u64, u64, u64));

/// `values = alpha * (x @ y^T) + beta * values` at A's blocks: the type names, x (address, leading dimension,
/// column-major?: `rows x K`), y (the same: `cols x K`), K, A (the output values' address, checked row_ptr and
/// col_idx, 64-bit?, rows, cols, bs, nnzb), (alpha, beta).
#[derive(FromPyObject)]
pub(crate) struct SArgs((String, String), (u64, usize, bool), (u64, usize, bool), usize, BsrArgs, (f32, f32));

fn arrays((values, row_ptr, col_idx, index64, ..): BsrArgs) -> BsrArrays {
    BsrArrays { values, row_ptr, col_idx, index: if index64 { IndexType::I64 } else { IndexType::U32 } }
}

/// # Safety
/// The addresses are live device memory of `gpu` with the sizes the description states, the structure checked,
/// the index made of it; `stream` is a live stream of `gpu`'s context.
unsafe fn spmm_t<TA: InputElement, TC: OutputElement>(gpu: &Gpu, stream: CUstream, t: &TArgs) -> sparsek::Result<()> {
    let TArgs(_, a_args, (b, b_ld, b_col, n), (c, c_ld, c_col), alpha, index) = *t;
    let (_, _, _, _, rows, cols, bs, nnzb) = a_args;
    // Declared on `gpu`'s device, as the forward's views (lib.rs, `Product::launch`): no driver query per address.
    let dev = gpu.info().ordinal;
    // SAFETY (each view): the function's contract (every address on `gpu`'s device).
    let a = unsafe { BsrView::<TA>::from_raw(arrays(a_args), rows, cols, bs, nnzb)?.on_device(dev) };
    let at = unsafe { TransposeView::from_raw(index, cols, bs, nnzb)? };
    let b = unsafe { DenseView::<TA>::from_raw(b, rows, n, b_ld, layout(b_col))?.on_device(dev) };
    let mut c = unsafe { DenseViewMut::<TC>::from_raw(c, cols, n, c_ld, layout(c_col))?.on_device(dev) };
    // SAFETY: as above; the stream is torch's current stream of the tensors' device.
    unsafe { gpu.spmm_t_raw(stream, &a, &at, &b, &mut c, Epilogue::new(alpha, 0.0)) }
}

/// # Safety
/// As [`spmm_t`]'s.
///
/// `schedule`, when given: the block rows' schedule made of this structure when it was checked (its tile lists
/// give the sm_90a kernels one tile per group of a row's blocks).
unsafe fn sddmm<TA: InputElement, TV: OutputElement>(
    gpu: &Gpu,
    stream: CUstream,
    s: &SArgs,
    schedule: Option<&RowSchedule>,
) -> sparsek::Result<()> {
    let SArgs(_, (x, x_ld, x_col), (y, y_ld, y_col), k, a_args, (alpha, beta)) = *s;
    let (values, _, _, _, rows, cols, bs, nnzb) = a_args;
    let dev = gpu.info().ordinal;
    // SAFETY (each view): the function's contract (every address on `gpu`'s device, declared as in `spmm_t`); the
    // pattern's values are never read (they are the output).
    let pattern = unsafe { BsrView::<TA>::from_raw(arrays(a_args), rows, cols, bs, nnzb)?.on_device(dev) };
    let pattern = match schedule {
        Some(s) => pattern.with_schedule(s)?,
        None => pattern,
    };
    let x = unsafe { DenseView::<TA>::from_raw(x, rows, k, x_ld, layout(x_col))?.on_device(dev) };
    let y = unsafe { DenseView::<TA>::from_raw(y, cols, k, y_ld, layout(y_col))?.on_device(dev) };
    let rows_of_values = nnzb.checked_mul(bs).ok_or(Error::TooLarge {
        what: "SDDMM values (nnzb * bs rows)",
        requested: nnzb as u128 * bs as u128,
        limit: usize::MAX as u128,
    })?;
    let mut v =
        unsafe { DenseViewMut::<TV>::from_raw(values, rows_of_values, bs, bs, Layout::RowMajor)?.on_device(dev) };
    // SAFETY: as above.
    unsafe { gpu.sddmm_raw(stream, &x, &y, &pattern, &mut v, Epilogue::new(alpha, beta)) }
}

/// `c = alpha * A^T @ b` on GPU `device`, queued on the raw CUDA stream `stream` (torch's current stream); no
/// synchronisation, no allocation. Private: called by sparsek/_ops.py (`_bsr_mm_t_cuda`) with live tensors and a
/// structure it has checked on the device.
#[pyfunction]
pub(crate) fn cuda_spmm_t(py: Python<'_>, device: usize, stream: usize, args: TArgs) -> PyResult<()> {
    let gpu = gpu(py, device)?;
    // SAFETY: the Python layer's contract (see the function's doc).
    unsafe { by_types!(args.0.0.as_str(), args.0.1.as_str(), spmm_t(&gpu, stream as CUstream, &args)) }.map_err(to_py)
}

/// `values = alpha * (x @ y^T) + beta * values` at A's blocks on GPU `device`, on the raw CUDA stream `stream`, with
/// the block rows' schedule made of the structure when it was checked (`cuda_row_schedule`), or `None`. Private:
/// called by sparsek/_ops.py (`_sddmm_cuda`), as `cuda_spmm_t`.
#[pyfunction]
#[pyo3(signature = (device, stream, args, schedule=None))]
pub(crate) fn cuda_sddmm(
    py: Python<'_>,
    device: usize,
    stream: usize,
    args: SArgs,
    schedule: Option<PyRef<'_, crate::RowSchedule>>,
) -> PyResult<()> {
    let gpu = gpu(py, device)?;
    let schedule = schedule.as_ref().map(|s| &s.0);
    // SAFETY: as `cuda_spmm_t`.
    unsafe { by_types!(args.0.0.as_str(), args.0.1.as_str(), sddmm(&gpu, stream as CUstream, &args, schedule)) }
        .map_err(to_py)
}
