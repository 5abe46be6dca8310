//! Device-resident matrices: dense ([`DeviceMatrix`]) and BSR ([`DeviceBsr`]), and the block-row schedule of a
//! BSR matrix in the caller's memory ([`RowSchedule`]).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut, DevicePtr, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

use sparsek_layout::{InType, OutType};

use super::Gpu;
use super::driver::{alloc_err, cuda};
use super::views::{Alloc, BsrShape};
use crate::error::{BsrError, Error, Result};
use crate::format::Bsr;
use crate::matrix::Matrix;
use crate::plan::SddmmTileCounts;
use crate::scalar::Scalar;

/// An element type that can live in a [`DeviceMatrix`].
pub trait DeviceElement: Scalar + DeviceRepr + ValidAsZeroBits {
    /// Elements per 16 bytes: device leading dimensions are multiples of this, so every row starts 16-byte
    /// aligned (the kernels' vector loads and stores need it).
    const ALIGN_ELEMS: usize = 16 / std::mem::size_of::<Self>();
}
impl DeviceElement for f16 {}
impl DeviceElement for bf16 {}
impl DeviceElement for f32 {}

/// An element type the SpMM kernels multiply (A's, B's and the bias's type): f16 or bf16, accumulated in f32.
pub trait InputElement: DeviceElement {
    /// The kernels' name for it (the registry key).
    const IN_TYPE: InType;
}

/// The impls of an element trait's one constant: `element_impls!(Trait::CONST: Type { rust_type => value, .. })`.
macro_rules! element_impls {
    ($trait:ident::$konst:ident: $ty:ty { $($t:ty => $v:expr),+ $(,)? }) => {
        $(impl $trait for $t {
            const $konst: $ty = $v;
        })+
    };
}
element_impls!(InputElement::IN_TYPE: InType { f16 => InType::F16, bf16 => InType::Bf16 });

/// An element type the SpMM kernels can write (C's type): f32 for any input, or the input's own 16-bit type
/// (f16 C with f16 inputs, bf16 C with bf16 inputs).
pub trait OutputElement: DeviceElement {
    /// The kernels' name for it (the registry key).
    const OUT_TYPE: OutType;
}
element_impls!(OutputElement::OUT_TYPE: OutType { f32 => OutType::F32, f16 => OutType::F16, bf16 => OutType::Bf16 });

/// A dense `rows x cols` row-major matrix in device memory with leading dimension `ld` (a multiple of 16 bytes).
///
/// `Send + Sync`: it may be shared between threads and read by launches on several streams (cudarc's event
/// tracking orders each use after the last write, whichever stream made it); writing needs `&mut`. Its buffer
/// holds `rows * ld` elements for its whole life, in bytes inside the device allocation the driver reports for it
/// (checked when it is made): no safe API can replace or shrink it behind its shape.
pub struct DeviceMatrix<T> {
    data: CudaSlice<T>,
    rows: usize,
    cols: usize,
    ld: usize,
    /// The device allocation holding `data` (first byte, bytes), as the driver reported it; `None` when the
    /// matrix holds no element (never touched).
    alloc: Option<(u64, u64)>,
}

impl<T: DeviceElement> DeviceMatrix<T> {
    /// Wraps an existing device buffer. Needs `ld >= cols`, `ld` a multiple of [`DeviceElement::ALIGN_ELEMS`]
    /// and a buffer of at least `rows * ld` elements: the last row is padded to `ld` too, because the kernels
    /// read whole 16-byte chunks (a partial chunk at the end of a row is zero-filled, but still addressed).
    ///
    /// The slice's length is not trusted alone (cudarc computes `len * size_of::<T>()` unchecked when it
    /// allocates, so a slice may claim more elements than its allocation holds): the `rows * ld` elements'
    /// bytes, computed with checked arithmetic, must also lie inside the device allocation the driver reports for
    /// the slice's address ([`Error::OutsideAllocation`]; [`Error::TooLarge`] when the bytes overflow).
    pub fn from_slice(data: CudaSlice<T>, rows: usize, cols: usize, ld: usize) -> Result<Self> {
        check_ld::<T>(cols, ld)?;
        let need = device_len(rows, ld)?;
        if data.len() < need {
            return Err(Error::InvalidMatrix {
                what: "device buffer",
                reason: format!("{rows}x{cols} with ld {ld} needs {need} elements, the buffer has {}", data.len()),
            });
        }
        let bytes = crate::alloc::bytes_of::<T>("device dense matrix (bytes)", need)?;
        let alloc = if bytes == 0 {
            None
        } else {
            let stream = data.stream();
            let (ptr, _record) = data.device_ptr(stream);
            let a = Alloc::of("device matrix", ptr, bytes as u64, stream)?;
            Some((a.base, a.bytes))
        };
        Ok(DeviceMatrix { data, rows, cols, ld, alloc })
    }

    /// The allocation holding the matrix's elements, with the buffer's stream, for its views.
    pub(crate) fn alloc(&self) -> Option<Alloc<'_>> {
        self.alloc.map(|(base, bytes)| Alloc { base, bytes, stream: Some(self.data.stream()) })
    }

    shape_getters!(rows, cols, ld);
    /// The device buffer.
    pub fn as_slice(&self) -> &CudaSlice<T> {
        &self.data
    }
    /// A mutable view of the matrix's `rows * ld` elements (checked to lie in its allocation), for writing them
    /// with other CUDA code (cuBLAS, a memset). A view cannot replace or shrink the buffer, so the matrix's shape
    /// stays true.
    pub fn as_view_mut(&mut self) -> CudaViewMut<'_, T> {
        let n = self.rows * self.ld;
        self.data.slice_mut(..n)
    }
    /// The device buffer, mutable. Crate-private: handing out `&mut CudaSlice` would let a caller replace the
    /// buffer with a smaller one behind the matrix's shape, which the launchers trust.
    pub(crate) fn as_mut_slice(&mut self) -> &mut CudaSlice<T> {
        &mut self.data
    }

    /// Copies the matrix to the host (padding between `cols` and `ld` included, with the same `ld`), waiting for
    /// the work queued on the buffer's stream.
    pub fn to_host(&self) -> Result<Matrix<T>> {
        let stream = self.data.stream();
        // Only the matrix's rows * ld elements (checked against the allocation when it was made), never the
        // slice's own length, which may claim more. A fallible host buffer: the GPU may hold more than this
        // machine's memory.
        let n = self.rows * self.ld;
        let mut v = crate::alloc::filled("dense matrix download", n, T::from_f64(0.0))?;
        if n > 0 {
            stream.memcpy_dtoh(&self.data.slice(..n), &mut v[..]).map_err(cuda("cuMemcpyDtoH"))?;
        }
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        v.truncate(Matrix::<T>::needed_len(self.rows, self.cols, self.ld).unwrap_or(v.len()));
        Matrix::from_vec(self.rows, self.cols, self.ld, v)
    }

    /// Overwrites the whole buffer (padding included) from a host matrix of the same shape and leading dimension.
    pub fn copy_from_host(&mut self, m: &Matrix<T>) -> Result<()> {
        if (m.rows(), m.cols(), m.ld()) != (self.rows, self.cols, self.ld) {
            return Err(Error::InvalidMatrix {
                what: "host matrix",
                reason: format!(
                    "shape {}x{} ld {} differs from the device matrix's {}x{} ld {}",
                    m.rows(),
                    m.cols(),
                    m.ld(),
                    self.rows,
                    self.cols,
                    self.ld
                ),
            });
        }
        let n = m.as_slice().len().min(self.rows * self.ld);
        let stream = self.data.stream().clone();
        stream.memcpy_htod(&m.as_slice()[..n], &mut self.data.slice_mut(..n)).map_err(cuda("cuMemcpyHtoD"))
    }
}

fn check_ld<T: DeviceElement>(cols: usize, ld: usize) -> Result<()> {
    if ld < cols.max(1) || !ld.is_multiple_of(T::ALIGN_ELEMS) || u32::try_from(ld).is_err() {
        return Err(Error::InvalidMatrix {
            what: "ld",
            reason: format!(
                "device leading dimension {ld} must be >= the column count {cols}, a multiple of {} ({} is 16 \
                 bytes of {}) and below 2^32",
                T::ALIGN_ELEMS,
                T::ALIGN_ELEMS,
                T::NAME
            ),
        });
    }
    Ok(())
}

/// Elements a device matrix of `rows` rows with leading dimension `ld` holds (every row padded to `ld`).
fn device_len(rows: usize, ld: usize) -> Result<usize> {
    crate::alloc::mul("device dense matrix elements (rows * ld)", rows, ld)
}

/// The smallest multiple of `T::ALIGN_ELEMS` that is >= `ld` (and >= 1).
pub(crate) fn aligned_ld<T: DeviceElement>(ld: usize) -> Result<usize> {
    ld.max(1).checked_next_multiple_of(T::ALIGN_ELEMS).ok_or(Error::TooLarge {
        what: "device leading dimension",
        requested: ld as u128 + T::ALIGN_ELEMS as u128,
        limit: usize::MAX as u128,
    })
}

/// A BSR matrix in device memory (values of `T`: f16 by default, or bf16), ready for [`Gpu::spmm`]. Also holds
/// the block-row schedule (block rows sorted by descending length, so long rows start first). Immutable after the
/// upload and `Send + Sync`: one copy can serve launches from several threads and streams at once.
pub struct DeviceBsr<T = f16> {
    pub(crate) shape: BsrShape,
    /// The block rows' lengths in `row_order`'s order (longest first).
    pub(crate) row_lengths: Vec<u32>,
    pub(crate) row_ptr: CudaSlice<u32>,
    pub(crate) col_idx: CudaSlice<u32>,
    pub(crate) values: CudaSlice<T>,
    pub(crate) row_order: CudaSlice<u32>,
    /// This upload's structure identity: a transposed index made from it carries the same
    /// ([`Gpu::transpose_index`], checked by [`Gpu::spmm_t`]).
    pub(crate) structure: u64,
    /// The sm_90a SDDMM's tile lists of the structure.
    pub(crate) sddmm_tiles: SddmmTiles,
}

/// A structure's tile lists for the sm_90a SDDMM kernels (`sparsek_layout::sddmm_tile_list`, one per
/// configuration of `HOPPER_SDDMM_CONFIGS`, back to back, its rows longest first), in device memory: made with
/// the longest-first order where the order is ([`Gpu::upload`], [`Gpu::row_schedule`]).
pub(crate) struct SddmmTiles {
    pub(crate) list: CudaSlice<u32>,
    pub(crate) counts: SddmmTileCounts,
}

impl std::fmt::Debug for SddmmTiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SddmmTiles").field("counts", &self.counts).finish()
    }
}

impl SddmmTiles {
    /// The lists of block rows `order` of these `lengths` (in the order's order), copied to the device on `stream`.
    fn new(stream: &Arc<CudaStream>, order: &[u32], lengths: &[u32]) -> Result<SddmmTiles> {
        let counts = SddmmTileCounts::of(lengths);
        // One unused entry where there are none: never a zero-length device buffer.
        let mut host = vec![[0u32; 2]; counts.total().max(1)];
        let mut at = 0;
        for &(group, len) in &counts.lists {
            at += sparsek_layout::sddmm_tile_list(order, lengths, group, &mut host[at..at + len]);
        }
        debug_assert_eq!(at, counts.total());
        let flat: Vec<u32> = host.into_iter().flatten().collect();
        Ok(SddmmTiles { list: Gpu::htod(stream, "SDDMM tile lists", &flat)?, counts })
    }
}

/// `row_ptr` as u32 entries, checked as [`Gpu::row_schedule`] says: not empty, from 0, never decreasing, every
/// entry in 0..2^32.
fn checked_row_ptr<I: Copy + TryInto<u32>>(row_ptr: &[I]) -> Result<Vec<u32>> {
    let entries = row_ptr
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            v.try_into().map_err(|_| Error::InvalidArgument {
                name: "row_ptr",
                reason: format!("entry {i} is negative or not below 2^32"),
            })
        })
        .collect::<Result<Vec<u32>>>()?;
    match entries.first() {
        None => Err(Error::InvalidArgument {
            name: "row_ptr",
            reason: "is empty: a BSR row_ptr has block_rows + 1 entries".into(),
        }),
        Some(&got) if got != 0 => Err(BsrError::RowPtrStart { got }.into()),
        Some(_) => match entries.windows(2).position(|w| w[1] < w[0]) {
            Some(block_row) => {
                Err(BsrError::RowPtrDecreasing { block_row, prev: entries[block_row], next: entries[block_row + 1] }
                    .into())
            }
            None => Ok(entries),
        },
    }
}

/// The block rows of a valid `row_ptr`, longest first (stable: equal lengths keep their order, so neighbours stay
/// neighbours; one unused entry for a matrix without block rows, never a zero-length device buffer), and their
/// lengths in that order.
fn longest_first(row_ptr: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let lengths: Vec<u32> = row_ptr.windows(2).map(|w| w[1] - w[0]).collect();
    let mut order: Vec<u32> = (0..lengths.len() as u32).collect();
    order.sort_by_key(|&r| std::cmp::Reverse(lengths[r as usize]));
    let sorted = order.iter().map(|&r| lengths[r as usize]).collect();
    if order.is_empty() {
        order.push(0);
    }
    (order, sorted)
}

/// How a BSR matrix's block rows are scheduled, for a [`BsrView`](super::BsrView) of the caller's memory: its
/// block rows longest first (in this GPU's memory, owned and freed here) and the most blocks in one row. Made by
/// [`Gpu::row_schedule`] from the matrix's `row_ptr`, attached with
/// [`BsrView::with_schedule`](super::BsrView::with_schedule). It affects only how the work is spread: a schedule
/// made from other row lengths of the same shape still gives the right product, only perhaps a slower one.
pub struct RowSchedule {
    pub(crate) order: CudaSlice<u32>,
    /// The structure's tile lists for the sm_90a SDDMM (made of the same row lengths).
    pub(crate) sddmm_tiles: SddmmTiles,
    pub(crate) block_rows: usize,
    pub(crate) nnzb: usize,
    /// The block rows' lengths in the order's order (longest first).
    pub(crate) row_lengths: Vec<u32>,
    pub(crate) ordinal: usize,
}

impl RowSchedule {
    /// Block rows of the matrix it was made for.
    pub fn block_rows(&self) -> usize {
        self.block_rows
    }
    /// Nonzero blocks of the matrix it was made for (the last `row_ptr` entry).
    pub fn nnzb(&self) -> usize {
        self.nnzb
    }
    /// The most nonzero blocks in one block row.
    pub fn max_row_blocks(&self) -> usize {
        self.row_lengths.first().map_or(0, |&l| l as usize)
    }
}

/// Waits for the device's queued work (`cuCtxSynchronize`) before the order is freed: a launch on any stream
/// may still read it (a [`BsrView::with_schedule`](super::BsrView::with_schedule) launched on the caller's
/// stream). A schedule is dropped rarely (with its weight), so the wait costs nothing per launch. Not while a
/// stream of the device is being captured into a CUDA graph (the wait would end the capture): drop it after.
impl Drop for RowSchedule {
    fn drop(&mut self) {
        // An error (a device already lost) leaves nothing better to do than free the buffer as cudarc does.
        let _ = self.order.context().synchronize();
    }
}

impl std::fmt::Debug for RowSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowSchedule")
            .field("block_rows", &self.block_rows)
            .field("nnzb", &self.nnzb)
            .field("max_row_blocks", &self.max_row_blocks())
            .field("device", &self.ordinal)
            .finish()
    }
}

impl<T> DeviceBsr<T> {
    shape_getters!(shape: rows, cols, block_size, nnzb);
    /// The most nonzero blocks in one block row.
    pub fn max_row_blocks(&self) -> usize {
        self.row_lengths.first().map_or(0, |&l| l as usize)
    }
}

impl Gpu {
    fn htod<T: DeviceRepr>(stream: &Arc<CudaStream>, what: &'static str, v: &[T]) -> Result<CudaSlice<T>> {
        stream.clone_htod(v).map_err(alloc_err(what, std::mem::size_of_val(v)))
    }

    /// Copies a BSR matrix (f16 or bf16 values) to the GPU. The structure was validated when the [`Bsr`] was
    /// built.
    pub fn upload<T: InputElement>(&self, a: &Bsr<T>) -> Result<DeviceBsr<T>> {
        let stream = self.stream();
        let (order, lengths) = longest_first(a.row_ptr());
        // Zero-length device buffers are avoided: a matrix with no blocks still gets one (unused) element.
        let col_idx = if a.col_idx().is_empty() { &[0u32][..] } else { a.col_idx() };
        let zero = [T::from_f64(0.0)];
        let values = if a.values().is_empty() { &zero[..] } else { a.values() };
        let sddmm_tiles = SddmmTiles::new(stream, &order, &lengths)?;
        Ok(DeviceBsr {
            shape: BsrShape { rows: a.rows(), cols: a.cols(), bs: a.block_size(), nnzb: a.nnzb() },
            row_lengths: lengths,
            row_ptr: Self::htod(stream, "BSR row_ptr", a.row_ptr())?,
            col_idx: Self::htod(stream, "BSR col_idx", col_idx)?,
            values: Self::htod(stream, "BSR values", values)?,
            row_order: Self::htod(stream, "BSR row order", &order)?,
            sddmm_tiles,
            structure: super::launch::new_structure_id(),
        })
    }

    /// The schedule of a BSR matrix's block rows, from its `row_ptr` (`block_rows + 1` entries: PyTorch's
    /// `crow_indices`, scipy's `indptr`, as i64, i32 or u32) read on the host: the block rows longest first, copied
    /// to this GPU, and the longest row's length. Made once for a matrix in the caller's memory (a weight, when it is
    /// loaded) and attached to its [`BsrView`](super::BsrView) with
    /// [`BsrView::with_schedule`](super::BsrView::with_schedule), it gives [`Gpu::spmm_raw`] what an uploaded
    /// [`DeviceBsr`] has: long rows start first on the sm_90a kernels' persistent grid and wherever CTAs queue for
    /// SMs, and the split-row and flat-list rules can see a skewed row and spread it over the GPU; and
    /// [`Gpu::sddmm_raw`] on the view takes one tile per group of a row's blocks from the schedule's tile lists
    /// (no empty tiles).
    ///
    /// Checked: `row_ptr` is not empty, starts at 0, never decreases and every entry is below 2^32. The copy is
    /// synchronous (it runs on this `Gpu`'s stream; a schedule is made once, not per launch).
    pub fn row_schedule<I: Copy + TryInto<u32>>(&self, row_ptr: &[I]) -> Result<RowSchedule> {
        let entries = checked_row_ptr(row_ptr)?;
        let (order, lengths) = longest_first(&entries);
        let stream = self.stream();
        let sddmm_tiles = SddmmTiles::new(stream, &order, &lengths)?;
        let order = Self::htod(stream, "BSR row order", &order)?;
        stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        Ok(RowSchedule {
            order,
            sddmm_tiles,
            block_rows: entries.len() - 1,
            nnzb: entries[entries.len() - 1] as usize,
            row_lengths: lengths,
            ordinal: self.info().ordinal,
        })
    }

    /// Copies a dense matrix to the GPU. The device leading dimension is the host's rounded up to a multiple of 16
    /// bytes; host padding is copied, extra padding is zero.
    pub fn upload_matrix<T: DeviceElement>(&self, m: &Matrix<T>) -> Result<DeviceMatrix<T>> {
        let ld = aligned_ld::<T>(m.ld())?;
        let padded;
        let host = if ld == m.ld() {
            m
        } else {
            padded = m.with_ld(ld, T::from_f64(0.0))?;
            &padded
        };
        // Every row padded to `ld`, the last one too (see DeviceMatrix::from_slice), and never zero bytes: a
        // zeroed device buffer of that size, then the host elements copied into its start (no host copy when the
        // leading dimension is already aligned).
        let len = device_len(m.rows(), ld)?.max(1);
        let bytes = crate::alloc::bytes_of::<T>("device dense matrix (bytes)", len)?;
        let stream = self.stream();
        let mut data = stream.alloc_zeros::<T>(len).map_err(alloc_err("device dense matrix", bytes))?;
        let src = host.as_slice();
        let n = src.len().min(len);
        stream.memcpy_htod(&src[..n], &mut data.slice_mut(..n)).map_err(cuda("cuMemcpyHtoD"))?;
        DeviceMatrix::from_slice(data, m.rows(), m.cols(), ld)
    }

    /// A `rows x cols` device matrix of zeros (leading dimension `cols` rounded up to 16 bytes).
    pub fn zeros<T: DeviceElement>(&self, rows: usize, cols: usize) -> Result<DeviceMatrix<T>> {
        let ld = aligned_ld::<T>(cols)?;
        let len = device_len(rows, ld)?.max(1);
        // Checked before cudarc multiplies len by the element size (unchecked there).
        let bytes = crate::alloc::bytes_of::<T>("device dense matrix (bytes)", len)?;
        let data = self.stream().alloc_zeros::<T>(len).map_err(alloc_err("device dense matrix", bytes))?;
        DeviceMatrix::from_slice(data, rows, cols, ld)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_first_is_stable_and_finds_the_longest_row() {
        // Rows of 2, 0, 5, 2, 5 blocks: the two of 5 first (in their order), then the two of 2, then the empty one.
        let (order, lengths) = longest_first(&[0, 2, 2, 7, 9, 14]);
        assert_eq!((order, lengths), (vec![2, 4, 0, 3, 1], vec![5, 5, 2, 2, 0]));
        // No block rows: one unused entry (never a zero-length device buffer), no lengths.
        assert_eq!(longest_first(&[0]), (vec![0], vec![]));
        // Rows without blocks keep their order.
        assert_eq!(longest_first(&[0, 0, 0, 0]), (vec![0, 1, 2], vec![0, 0, 0]));
    }

    #[test]
    fn row_ptr_of_a_schedule_is_checked() {
        assert_eq!(checked_row_ptr(&[0i64, 3, 3, 8]).unwrap(), vec![0, 3, 3, 8]);
        assert_eq!(checked_row_ptr(&[0i32]).unwrap(), vec![0]);
        let err = |r: Result<Vec<u32>>| r.unwrap_err().to_string();
        assert!(err(checked_row_ptr::<u32>(&[])).contains("row_ptr: is empty"));
        assert!(err(checked_row_ptr(&[1u32, 2])).contains("row_ptr[0] = 1, expected 0"));
        assert!(err(checked_row_ptr(&[0i64, 4, 3])).contains("decreases at block row 1"));
        assert!(err(checked_row_ptr(&[0i64, -1])).contains("entry 1 is negative"));
        assert!(err(checked_row_ptr(&[0i64, 1 << 32])).contains("entry 1 is negative or not below 2^32"));
        assert!(matches!(
            checked_row_ptr(&[0u32, 2, 1]),
            Err(Error::InvalidBsr(BsrError::RowPtrDecreasing { block_row: 1, prev: 2, next: 1 }))
        ));
    }
}
