//! Borrowed device operands: matrices described over device memory someone else owns (a PyTorch tensor, a
//! candle or burn buffer, a cudarc slice, or sparsek's own [`DeviceMatrix`] / [`DeviceBsr`]), launched with
//! [`Gpu::spmm_raw`](super::Gpu::spmm_raw) on the caller's stream without a copy. sparsek never frees them.
//!
//! - [`DenseView`] / [`DenseViewMut`]: `rows x cols`, row- or column-major ([`Layout`]) with a leading dimension;
//!   [`DenseView::t`] is the transpose (same memory, the other layout), which is how `y = x @ W^T` becomes one
//!   launch: `B = x^T` and `C = y^T` are column-major views of the row-major `x` and `y`.
//! - [`BsrView`]: a BSR structure with 32- or 64-bit indices ([`IndexType`]; PyTorch's crow/col indices are
//!   int64, scipy's int32), read by the kernels as they are, no host round trip.
//! - [`VectorView`]: the bias of the fused epilogue.
//!
//! What is checked on the host (by the constructors, and against the [`Gpu`](super::Gpu) at launch): shapes,
//! leading dimensions, 16-byte alignment of the dense operands' start and rows, 32-bit limits, that every
//! pointer is device memory of the launch's GPU (`cuPointerGetAttributes`; for a raw view whose caller declared its
//! device with `on_device`, [`DenseView::on_device`], the ordinals are compared instead), and that C overlaps no
//! input. The safe
//! constructors (over a cudarc slice or view, or sparsek's own buffers) also check each extent's bytes, in checked
//! arithmetic, against the device allocation the driver reports for the address (`cuMemGetAddressRange`: a
//! `CudaSlice`'s own length is not trusted alone), when the view is made and again at launch; and their buffers
//! outlive the launch (see [`Gpu::spmm_raw`](super::Gpu::spmm_raw)). What cannot be checked on the host is the
//! `unsafe` constructors' contract (sizes, and that the memory stays allocated and unwritten until the kernel has
//! finished on the launch's stream); [`BsrView::from_raw_checked`] checks a structure on the device in one launch
//! for callers who cannot vouch for their indices, [`Gpu::checked_copy`](super::Gpu::checked_copy) a private copy
//! of it that later writes cannot reach.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, DevicePtr, DeviceSlice};
use sparsek_layout::Layout;

use super::buffers::{DeviceBsr, DeviceElement, DeviceMatrix, RowSchedule, SddmmTiles};
use super::driver::{allocation_of, cuda};
use crate::error::{Error, Result};

/// The device allocation a safe view's memory lies in (its first byte and size in bytes: what the driver reports,
/// or what the crate allocated) and the stream of the cudarc buffer that owns it. A launch checks the bytes it will
/// touch against the allocation, and makes that stream wait for the launch's work (so the buffer, freed in its
/// stream's order, outlives the kernel). No stream: the owner waits for the device's work itself before it frees
/// the buffer (a [`RowSchedule`]).
#[derive(Clone, Copy)]
pub(crate) struct Alloc<'a> {
    pub(crate) base: u64,
    pub(crate) bytes: u64,
    pub(crate) stream: Option<&'a Arc<CudaStream>>,
}

impl std::fmt::Debug for Alloc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Alloc({:#x}, {} bytes)", self.base, self.bytes)
    }
}

impl<'a> Alloc<'a> {
    /// The allocation of a buffer the crate made itself with `len` elements of `size` bytes at `ptr` (its length
    /// is the one it was allocated with; the product is checked all the same).
    pub(crate) fn own(
        ptr: CUdeviceptr,
        len: usize,
        size: usize,
        stream: Option<&'a Arc<CudaStream>>,
    ) -> Option<Alloc<'a>> {
        let bytes = u64::try_from(len.checked_mul(size)?).ok()?;
        Some(Alloc { base: ptr, bytes, stream })
    }

    /// The allocation the driver reports for `ptr`, checked to hold `bytes` bytes from `ptr` (the buffer's
    /// context is made current on the calling thread for the query).
    pub(crate) fn of(what: &'static str, ptr: CUdeviceptr, bytes: u64, stream: &'a Arc<CudaStream>) -> Result<Self> {
        stream.context().bind_to_thread().map_err(cuda("cuCtxSetCurrent"))?;
        let (base, size) = allocation_of(ptr)?;
        check_within(what, ptr, u128::from(bytes), (base, size))?;
        Ok(Alloc { base, bytes: size, stream: Some(stream) })
    }

    /// `Ok` when `bytes` bytes from `start` lie inside this allocation.
    pub(crate) fn holds(&self, what: &'static str, start: CUdeviceptr, bytes: u128) -> Result<()> {
        check_within(what, start, bytes, (self.base, self.bytes))
    }
}

/// `Ok` when `bytes` bytes from `start` lie inside the allocation of `alloc.1` bytes from `alloc.0` (in 128-bit
/// arithmetic: nothing wraps); no bytes always do. Else [`Error::OutsideAllocation`] with the numbers.
pub(crate) fn check_within(what: &'static str, start: u64, bytes: u128, (base, size): (u64, u64)) -> Result<()> {
    let end = u128::from(start).checked_add(bytes);
    let inside = bytes == 0 || (start >= base && end.is_some_and(|end| end <= u128::from(base) + u128::from(size)));
    if inside {
        Ok(())
    } else {
        Err(Error::OutsideAllocation { what, start, bytes, alloc_start: base, alloc_bytes: size })
    }
}

/// Bytes of `elems` elements of `size` bytes each, `None` meaning an element count that overflowed: in 128-bit
/// arithmetic, saturating (an extent that large lies in no allocation and overlaps everything after its start).
pub(crate) fn bytes_of(elems: Option<usize>, size: usize) -> u128 {
    elems.map_or(u128::MAX, |e| (e as u128).saturating_mul(size as u128))
}

/// The width of a BSR structure's `row_ptr` and `col_idx` entries on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexType {
    /// 32-bit entries (sparsek's own uploads, scipy's int32). Read as unsigned.
    U32,
    /// 64-bit entries (PyTorch's int64 `crow_indices` / `col_indices`). Every value must be below 2^32.
    I64,
}

impl IndexType {
    /// Bytes per entry.
    pub const fn bytes(self) -> usize {
        match self {
            IndexType::U32 => 4,
            IndexType::I64 => 8,
        }
    }
}

/// A dense matrix's description: `rows x cols` in `layout`, with leading dimension `ld` (elements between the
/// starts of consecutive rows, or columns when column-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DenseShape {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) ld: usize,
    pub(crate) layout: Layout,
}

/// A BSR matrix's shape: `rows x cols` in `bs x bs` blocks, `nnzb` of them stored. What an uploaded [`DeviceBsr`]
/// and a [`BsrView`] hold of it, and what the kernel choice reads of A.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BsrShape {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) bs: usize,
    pub(crate) nnzb: usize,
}

impl DenseShape {
    /// Elements the matrix spans: up to the last element of its last row (row-major) or column (column-major); 0
    /// for an empty matrix. `None`: more than `usize` counts.
    pub(crate) fn span(self) -> Option<usize> {
        let DenseShape { rows, cols, ld, layout } = self;
        let (outer, inner) = match layout {
            Layout::RowMajor => (rows, cols),
            Layout::ColMajor => (cols, rows),
        };
        if outer == 0 || inner == 0 { Some(0) } else { (outer - 1).checked_mul(ld)?.checked_add(inner) }
    }

    /// The transpose: `cols x rows` over the same memory, in the other layout.
    pub(crate) fn t(self) -> DenseShape {
        DenseShape { rows: self.cols, cols: self.rows, layout: self.layout.transposed(), ..self }
    }
}

/// Checks a dense operand's description: `ld` covers a row (row-major) or column (column-major), is a multiple of
/// 16 bytes and below 2^32, the start is 16-byte aligned, and the span's bytes fit the address space.
fn check_dense<T: DeviceElement>(what: &'static str, ptr: CUdeviceptr, shape: DenseShape) -> Result<()> {
    let DenseShape { rows, cols, ld, layout } = shape;
    let inner = if layout == Layout::RowMajor { cols } else { rows };
    let bad = |reason: String| Err(Error::InvalidMatrix { what, reason });
    if ld < inner.max(1) || !ld.is_multiple_of(T::ALIGN_ELEMS) || u32::try_from(ld).is_err() {
        let along = if layout == Layout::RowMajor { "column count" } else { "row count (column-major)" };
        return bad(format!(
            "leading dimension {ld} must be >= the {along} {inner}, a multiple of {} (16 bytes of {}) and below \
             2^32",
            T::ALIGN_ELEMS,
            T::NAME
        ));
    }
    // An empty matrix is never read or written: any address will do (PyTorch gives empty tensors address 0).
    let empty = shape.span() == Some(0);
    if !empty && (ptr == 0 || !ptr.is_multiple_of(16)) {
        return bad(format!("device address {ptr:#x} must be non-null and 16-byte aligned"));
    }
    let bytes = shape.span().and_then(|e| e.checked_mul(std::mem::size_of::<T>()));
    match bytes.and_then(|b| (ptr as usize).checked_add(b)) {
        Some(_) => Ok(()),
        None => Err(Error::TooLarge {
            what: "dense view (bytes)",
            requested: (rows as u128) * (cols.max(ld) as u128) * std::mem::size_of::<T>() as u128,
            limit: usize::MAX as u128,
        }),
    }
}

/// `Clone` and `Copy` for a view whatever `T` is (a derive would ask `T: Copy`): a view is a description of the
/// memory it borrows, not an owner.
macro_rules! copy_view {
    ($($view:ident),+) => {
        $(
            impl<T> Clone for $view<'_, T> {
                fn clone(&self) -> Self {
                    *self
                }
            }
            impl<T> Copy for $view<'_, T> {}
        )+
    };
}

/// A read-only dense matrix over device memory: `rows x cols` of `T`, [`Layout::RowMajor`] (element (r, c) at
/// `ptr + (r * ld + c)`) or [`Layout::ColMajor`] (at `ptr + (c * ld + r)`). `Copy`: a description, not an owner.
#[derive(Debug)]
pub struct DenseView<'a, T> {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) shape: DenseShape,
    /// Whether the pointer came from memory sparsek or cudarc allocated in a known context (not checked again
    /// at launch) or from a raw address (checked with `cuPointerGetAttribute` at launch).
    pub(crate) raw: bool,
    /// The device a raw view's caller declared its memory to be on ([`DenseView::on_device`]): the launch then
    /// compares ordinals instead of asking the driver.
    pub(crate) device: Option<usize>,
    /// The allocation of a safe constructor's buffer (`None` for a raw view, whose extent is the caller's
    /// contract, and for an empty one, which is never touched).
    pub(crate) alloc: Option<Alloc<'a>>,
    _borrow: PhantomData<&'a [T]>,
}

copy_view!(DenseView, VectorView, BsrView);

/// A writable dense matrix over device memory (see [`DenseView`]); the output C of a launch.
#[derive(Debug)]
pub struct DenseViewMut<'a, T> {
    pub(crate) view: DenseView<'a, T>,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<'a, T> DenseView<'a, T> {
    /// Whether the view spans no element (its address is never used).
    pub(crate) fn is_empty_span(&self) -> bool {
        self.shape.span() == Some(0)
    }

    /// A view of memory whose description the crate has already checked (an owned buffer's, in `alloc`).
    pub(crate) fn trusted(
        ptr: CUdeviceptr,
        (rows, cols, ld): (usize, usize, usize),
        alloc: Option<Alloc<'a>>,
    ) -> DenseView<'a, T> {
        let shape = DenseShape { rows, cols, ld, layout: Layout::RowMajor };
        DenseView { ptr, shape, raw: false, device: None, alloc, _borrow: PhantomData }
    }

    /// This trusted view of a row-major buffer read in `layout`: `ColMajor` reads the `r x c` buffer as the
    /// `c x r` column-major matrix whose storage it is (same memory, same leading dimension).
    pub(crate) fn stored(self, layout: Layout) -> DenseView<'a, T> {
        match layout {
            Layout::RowMajor => self,
            Layout::ColMajor => DenseView { shape: DenseShape { layout, ..self.shape.t() }, ..self },
        }
    }
}

impl<'a, T> BsrView<'a, T> {
    /// A view of an uploaded [`DeviceBsr`] at the given device addresses (validated structure, u32 indices, its
    /// longest-first row order and longest row).
    pub(crate) fn trusted(
        (values, row_ptr, col_idx, row_order): (CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr),
        a: &'a DeviceBsr<T>,
    ) -> BsrView<'a, T> {
        let stream = a.values.stream();
        let own = |ptr, len, size| Alloc::own(ptr, len, size, Some(stream));
        BsrView {
            allocs: BsrAllocs {
                values: own(values, a.values.len(), std::mem::size_of::<T>()),
                row_ptr: own(row_ptr, a.row_ptr.len(), 4),
                col_idx: own(col_idx, a.col_idx.len(), 4),
                row_order: own(row_order, a.row_order.len(), 4),
            },
            values,
            row_ptr,
            col_idx,
            row_order,
            max_row_blocks: Some(a.max_row_blocks()),
            schedule_ordinal: None,
            row_lengths: Some(&a.row_lengths),
            sddmm_tiles: Some(&a.sddmm_tiles),
            index: IndexType::U32,
            shape: a.shape,
            raw: false,
            device: None,
            _borrow: PhantomData,
        }
    }
}

impl<'a, T: DeviceElement> DenseView<'a, T> {
    /// Describes `rows x cols` elements of `T` at device address `ptr`.
    ///
    /// Checked here: `ld` is at least the row length (row-major: `cols`; column-major: `rows`), a multiple of
    /// 16 bytes and below 2^32; `ptr` is non-null and 16-byte aligned. Checked at launch: `ptr` is device memory
    /// of the launch's GPU.
    ///
    /// # Safety
    /// For all of `'a`: the span (`(rows - 1) * ld + cols` elements row-major, `(cols - 1) * ld + rows`
    /// column-major) lies inside one live device allocation of the GPU it will be launched on, and nothing writes
    /// it while a launch that reads it may run (the caller orders its streams). sparsek never frees it.
    pub unsafe fn from_raw(
        ptr: CUdeviceptr,
        rows: usize,
        cols: usize,
        ld: usize,
        layout: Layout,
    ) -> Result<DenseView<'a, T>> {
        let shape = DenseShape { rows, cols, ld, layout };
        check_dense::<T>("view", ptr, shape)?;
        Ok(DenseView { ptr, shape, raw: true, device: None, alloc: None, _borrow: PhantomData })
    }

    /// This raw view, its memory declared to be device memory that the CUDA device of ordinal `device` reads and
    /// writes at these addresses (a CUDA tensor's data on that device, e.g. torch's `tensor.device.index`). A
    /// launch then compares `device` with its GPU's ordinal ([`Error::InvalidArgument`] where they differ) instead
    /// of asking the driver about the address (`cuPointerGetAttributes`: a raw launch of five addresses took
    /// 0.47-0.59 us less host time declared, on an H200's host; docs/perf-notes.md, "Raw views declared on their
    /// device").
    /// A view from a safe constructor is unchanged (its memory is known).
    ///
    /// # Safety
    /// The declaration is true for all of `'a`, besides [`DenseView::from_raw`]'s contract.
    pub unsafe fn on_device(self, device: usize) -> DenseView<'a, T> {
        DenseView { device: self.raw.then_some(device), ..self }
    }

    /// Describes a cudarc view as a `rows x cols` matrix; the view must hold the whole span, and so must the
    /// device allocation it lies in, as the driver reports it (both checked: [`Error::InvalidMatrix`],
    /// [`Error::OutsideAllocation`]). The view's buffer outlives the work of every launch that reads it (the
    /// launch makes the buffer's stream wait for it).
    pub fn from_cuda_view(
        view: &'a CudaView<'_, T>,
        rows: usize,
        cols: usize,
        ld: usize,
        layout: Layout,
    ) -> Result<DenseView<'a, T>> {
        let stream: &'a Arc<CudaStream> = view.stream();
        let (ptr, _record) = view.device_ptr(stream);
        Self::over_buffer(ptr, view.len(), stream, (rows, cols, ld), layout)
    }

    /// Describes a cudarc slice as a `rows x cols` matrix; the slice must hold the whole span, and so must its
    /// device allocation, as the driver reports it (both checked: [`Error::InvalidMatrix`],
    /// [`Error::OutsideAllocation`]; a slice's length is not trusted alone). The slice outlives the work of every
    /// launch that reads it (the launch makes the slice's stream wait for it).
    pub fn from_cuda_slice(
        slice: &'a CudaSlice<T>,
        rows: usize,
        cols: usize,
        ld: usize,
        layout: Layout,
    ) -> Result<DenseView<'a, T>> {
        let (ptr, _record) = slice.device_ptr(slice.stream());
        Self::over_buffer(ptr, slice.len(), slice.stream(), (rows, cols, ld), layout)
    }

    /// A safe view over `len` elements of a cudarc buffer at `ptr` (owned by `stream`'s buffer): the span is
    /// checked against `len` and, in bytes, against the allocation the driver reports for `ptr`.
    fn over_buffer(
        ptr: CUdeviceptr,
        len: usize,
        stream: &'a Arc<CudaStream>,
        (rows, cols, ld): (usize, usize, usize),
        layout: Layout,
    ) -> Result<DenseView<'a, T>> {
        let shape = DenseShape { rows, cols, ld, layout };
        check_dense::<T>("view", ptr, shape)?;
        let need = shape.span();
        if need.is_none_or(|need| need > len) {
            return Err(Error::InvalidMatrix {
                what: "view",
                reason: format!(
                    "{rows}x{cols} {} with ld {ld} spans {} elements; the buffer has {len}",
                    layout.name(),
                    need.map_or("more than 2^64".to_string(), |n| n.to_string())
                ),
            });
        }
        let bytes = bytes_of(need, std::mem::size_of::<T>());
        // check_dense has bounded the bytes by the address space, so they fit 64 bits.
        let alloc = match u64::try_from(bytes) {
            Ok(0) => None,
            Ok(bytes) => Some(Alloc::of("view", ptr, bytes, stream)?),
            Err(_) => {
                return Err(Error::OutsideAllocation {
                    what: "view",
                    start: ptr,
                    bytes,
                    alloc_start: 0,
                    alloc_bytes: 0,
                });
            }
        };
        Ok(DenseView { ptr, shape, raw: false, device: None, alloc, _borrow: PhantomData })
    }

    shape_getters!(shape: rows, cols, ld);
    /// Storage order.
    pub fn layout(&self) -> Layout {
        self.shape.layout
    }
    /// The device address of element (0, 0).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.ptr
    }
    /// The transpose: `cols x rows` over the same memory, in the other layout.
    pub fn t(self) -> DenseView<'a, T> {
        DenseView { shape: self.shape.t(), ..self }
    }
}

impl<'a, T: DeviceElement> DenseViewMut<'a, T> {
    /// The writable form of [`DenseView::from_raw`].
    ///
    /// # Safety
    /// [`DenseView::from_raw`]'s contract, and for all of `'a` nothing else reads or writes the span while a
    /// launch that writes it may run.
    pub unsafe fn from_raw(
        ptr: CUdeviceptr,
        rows: usize,
        cols: usize,
        ld: usize,
        layout: Layout,
    ) -> Result<DenseViewMut<'a, T>> {
        // SAFETY: forwarded.
        let view = unsafe { DenseView::from_raw(ptr, rows, cols, ld, layout)? };
        Ok(DenseViewMut { view, _borrow: PhantomData })
    }

    /// This raw view, its memory declared to be on the CUDA device `device` ([`DenseView::on_device`]).
    ///
    /// # Safety
    /// As [`DenseView::on_device`].
    pub unsafe fn on_device(self, device: usize) -> DenseViewMut<'a, T> {
        // SAFETY: forwarded.
        DenseViewMut { view: unsafe { self.view.on_device(device) }, _borrow: PhantomData }
    }

    /// Describes a cudarc slice, borrowed mutably, as a writable `rows x cols` matrix (span checked against the
    /// slice's length and its device allocation, as [`DenseView::from_cuda_slice`] does).
    pub fn from_cuda_slice(
        slice: &'a mut CudaSlice<T>,
        rows: usize,
        cols: usize,
        ld: usize,
        layout: Layout,
    ) -> Result<DenseViewMut<'a, T>> {
        let slice: &'a CudaSlice<T> = slice;
        let (ptr, _record) = slice.device_ptr(slice.stream());
        let view = DenseView::over_buffer(ptr, slice.len(), slice.stream(), (rows, cols, ld), layout)?;
        Ok(DenseViewMut { view, _borrow: PhantomData })
    }

    shape_getters!(view.shape: rows, cols, ld);
    /// Storage order.
    pub fn layout(&self) -> Layout {
        self.view.shape.layout
    }
    /// The transpose: `cols x rows` over the same memory, in the other layout.
    pub fn t(self) -> DenseViewMut<'a, T> {
        DenseViewMut { view: self.view.t(), _borrow: PhantomData }
    }
}

impl<T: DeviceElement> DeviceMatrix<T> {
    /// A read-only view of the matrix (row-major, its leading dimension).
    pub fn view(&self) -> DenseView<'_, T> {
        let (ptr, _record) = self.as_slice().device_ptr(self.as_slice().stream());
        DenseView::trusted(ptr, (self.rows(), self.cols(), self.ld()), self.alloc())
    }

    /// A writable view of the matrix (row-major, its leading dimension).
    pub fn view_mut(&mut self) -> DenseViewMut<'_, T> {
        let this: &Self = self;
        DenseViewMut { view: this.view(), _borrow: PhantomData }
    }
}

/// A vector of `len` elements of `T` in device memory: the bias of the fused epilogue (one value per row of C).
#[derive(Debug)]
pub struct VectorView<'a, T> {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) raw: bool,
    /// The device a raw view's caller declared (see [`DenseView::on_device`]).
    pub(crate) device: Option<usize>,
    /// The allocation of a safe constructor's buffer (see [`DenseView`]).
    pub(crate) alloc: Option<Alloc<'a>>,
    _borrow: PhantomData<&'a [T]>,
}

impl<'a, T: DeviceElement> VectorView<'a, T> {
    /// `len` elements of `T` at `ptr` (non-null unless `len == 0`, aligned to the element size: checked).
    ///
    /// # Safety
    /// For all of `'a`, `len` elements at `ptr` lie in one live device allocation of the launch's GPU and are not
    /// written while a launch that reads them may run.
    pub unsafe fn from_raw(ptr: CUdeviceptr, len: usize) -> Result<VectorView<'a, T>> {
        if len > 0 && (ptr == 0 || !ptr.is_multiple_of(std::mem::size_of::<T>() as u64)) {
            return Err(Error::InvalidArgument {
                name: "bias",
                reason: format!("device address {ptr:#x} must be non-null and aligned to {} bytes", T::NAME.len()),
            });
        }
        Ok(VectorView { ptr, len, raw: true, device: None, alloc: None, _borrow: PhantomData })
    }

    /// This raw view, its memory declared to be on the CUDA device `device` ([`DenseView::on_device`]).
    ///
    /// # Safety
    /// As [`DenseView::on_device`], besides [`VectorView::from_raw`]'s contract.
    pub unsafe fn on_device(self, device: usize) -> VectorView<'a, T> {
        VectorView { device: self.raw.then_some(device), ..self }
    }

    /// The whole of a cudarc slice, checked against the device allocation the driver reports for it (a slice's
    /// length is not trusted alone: [`Error::OutsideAllocation`], or [`Error::TooLarge`] for a length whose bytes
    /// overflow). The slice outlives the work of every launch that reads it.
    pub fn from_cuda_slice(slice: &'a CudaSlice<T>) -> Result<VectorView<'a, T>> {
        let (ptr, _record) = slice.device_ptr(slice.stream());
        let len = slice.len();
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or(Error::TooLarge {
            what: "bias (bytes)",
            requested: bytes_of(Some(len), std::mem::size_of::<T>()),
            limit: usize::MAX as u128,
        })?;
        let alloc = match bytes {
            0 => None,
            b => Some(Alloc::of("the bias", ptr, b as u64, slice.stream())?),
        };
        Ok(VectorView { ptr, len, raw: false, device: None, alloc, _borrow: PhantomData })
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A BSR matrix over device memory: `rows x cols` in `bs x bs` blocks, `nnzb` blocks of `bs * bs` row-major
/// values of `T`, `row_ptr` (`rows / bs + 1` entries) and `col_idx` (`nnzb` entries) of [`IndexType`] — PyTorch's
/// `sparse_bsr_tensor` layout (`values()`, `crow_indices()`, `col_indices()`), scipy's `bsr_matrix` too.
#[derive(Debug)]
pub struct BsrView<'a, T> {
    pub(crate) values: CUdeviceptr,
    pub(crate) row_ptr: CUdeviceptr,
    pub(crate) col_idx: CUdeviceptr,
    /// 0, or `rows / bs` u32: the order the block rows are scheduled in (longest first).
    pub(crate) row_order: CUdeviceptr,
    /// The most blocks in one block row, when known (an uploaded matrix's, or a [`RowSchedule`]'s): the
    /// launcher's split-row and flat-list rules and the plan key read it.
    pub(crate) max_row_blocks: Option<usize>,
    /// The device ordinal of a [`RowSchedule`]'s order, checked against the launch's GPU.
    pub(crate) schedule_ordinal: Option<usize>,
    /// The block rows' lengths in `row_order`'s order (longest first), when known: the sm_90a kernels' split rows.
    pub(crate) row_lengths: Option<&'a [u32]>,
    /// The structure's sm_90a SDDMM tile lists, when known (an uploaded matrix's, a [`RowSchedule`]'s); their
    /// address is taken by the SDDMM's launch only.
    pub(crate) sddmm_tiles: Option<&'a SddmmTiles>,
    pub(crate) index: IndexType,
    pub(crate) shape: BsrShape,
    pub(crate) raw: bool,
    /// The device a raw view's caller declared its arrays to be on (see [`DenseView::on_device`]).
    pub(crate) device: Option<usize>,
    /// The allocations of the arrays a safe constructor took from owned buffers (an uploaded [`DeviceBsr`]'s, a
    /// [`RowSchedule`]'s order); `None` for a raw view's arrays, whose extents are the caller's contract.
    pub(crate) allocs: BsrAllocs<'a>,
    _borrow: PhantomData<&'a [T]>,
}

/// The allocations of a [`BsrView`]'s arrays, where known.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BsrAllocs<'a> {
    pub(crate) values: Option<Alloc<'a>>,
    pub(crate) row_ptr: Option<Alloc<'a>>,
    pub(crate) col_idx: Option<Alloc<'a>>,
    pub(crate) row_order: Option<Alloc<'a>>,
}

/// The device arrays of a [`BsrView`]: values, `row_ptr`, `col_idx` (device addresses) and their index type.
#[derive(Clone, Copy, Debug)]
pub struct BsrArrays {
    /// `nnzb * bs * bs` values.
    pub values: CUdeviceptr,
    /// `rows / bs + 1` entries.
    pub row_ptr: CUdeviceptr,
    /// `nnzb` entries.
    pub col_idx: CUdeviceptr,
    /// Width of `row_ptr` and `col_idx` entries.
    pub index: IndexType,
}

impl<'a, T: DeviceElement> BsrView<'a, T> {
    /// Describes a BSR matrix over device arrays.
    ///
    /// Checked here: the block size is supported (16, 32, 64 or 128), `rows` and `cols` are multiples of it, the
    /// sizes fit the kernels' 32-bit indexing (block rows, block columns and `nnzb` below 2^32; values and
    /// addresses in 64-bit arithmetic), pointers are non-null and aligned (values to 16 bytes, indices to their
    /// width). Checked at launch: every pointer is device memory of the launch's GPU.
    ///
    /// # Safety
    /// For all of `'a`: `values` holds `nnzb * bs * bs` elements, `row_ptr` `rows / bs + 1` entries and `col_idx`
    /// `nnzb` entries, in live device memory of the GPU it will be launched on, not written while a launch that
    /// reads them may run; and the structure is a valid BSR: `row_ptr` starts at 0, never decreases and ends at
    /// `nnzb`, each block row's `col_idx` entries are strictly increasing and below `cols / bs` (the kernels read
    /// where the indices point). [`BsrView::from_raw_checked`] checks the structure instead of trusting it.
    pub unsafe fn from_raw(
        arrays: BsrArrays,
        rows: usize,
        cols: usize,
        bs: usize,
        nnzb: usize,
    ) -> Result<BsrView<'a, T>> {
        check_bsr_description::<T>(&arrays, rows, cols, bs, nnzb)?;
        Ok(BsrView {
            values: arrays.values,
            row_ptr: arrays.row_ptr,
            col_idx: arrays.col_idx,
            row_order: 0,
            max_row_blocks: None,
            schedule_ordinal: None,
            row_lengths: None,
            sddmm_tiles: None,
            index: arrays.index,
            shape: BsrShape { rows, cols, bs, nnzb },
            raw: true,
            device: None,
            allocs: BsrAllocs::default(),
            _borrow: PhantomData,
        })
    }

    /// This raw view, its arrays declared to be on the CUDA device `device` ([`DenseView::on_device`]).
    ///
    /// # Safety
    /// As [`DenseView::on_device`] for every array, besides [`BsrView::from_raw`]'s contract.
    pub unsafe fn on_device(self, device: usize) -> BsrView<'a, T> {
        BsrView { device: self.raw.then_some(device), ..self }
    }

    /// This view with `schedule`, the [`RowSchedule`] made from its `row_ptr` by
    /// [`Gpu::row_schedule`](super::Gpu::row_schedule): [`Gpu::spmm_raw`](super::Gpu::spmm_raw) then schedules
    /// its block rows as it does an uploaded [`DeviceBsr`]'s (longest first, long rows split or the flat block list
    /// where the rules take them). Without one, a raw view's rows run in their own order and the launcher, not
    /// knowing the longest row, splits rows only where there are fewer block rows than SMs.
    ///
    /// The sm_90a SDDMM ([`Gpu::sddmm_raw`](super::Gpu::sddmm_raw)) takes its tiles from the schedule's tile lists
    /// (groups of a row's blocks, rows longest first) instead of launching a tile per stored block.
    ///
    /// Checked: the schedule was made for as many block rows and blocks as this view has (at launch: on the
    /// launch's GPU). Its order is a permutation of the block rows by construction, and its tile lists hold every
    /// block row with the rest of a row taken by the row's last tile, so the product is right whatever lengths it
    /// was made from; only the speed depends on them matching the structure's.
    pub fn with_schedule<'s>(self, schedule: &'s RowSchedule) -> Result<BsrView<'s, T>>
    where
        'a: 's,
    {
        use crate::error::BsrError;
        let block_rows = self.shape.rows / self.shape.bs;
        if schedule.block_rows != block_rows {
            return Err(Error::InvalidBsr(BsrError::RowPtrLength {
                expected: block_rows + 1,
                got: schedule.block_rows + 1,
            }));
        }
        if schedule.nnzb != self.shape.nnzb {
            return Err(Error::InvalidBsr(BsrError::RowPtrEnd {
                expected: self.shape.nnzb,
                got: u32::try_from(schedule.nnzb).unwrap_or(u32::MAX),
            }));
        }
        let stream = schedule.order.stream();
        let (row_order, _record) = schedule.order.device_ptr(stream);
        // No stream to join: a RowSchedule waits for the device's work before it frees its order.
        let order_alloc = Alloc::own(row_order, schedule.order.len(), 4, None);
        Ok(BsrView {
            allocs: BsrAllocs { row_order: order_alloc, ..self.allocs },
            row_order,
            max_row_blocks: Some(schedule.max_row_blocks()),
            schedule_ordinal: Some(schedule.ordinal),
            row_lengths: Some(&schedule.row_lengths),
            sddmm_tiles: Some(&schedule.sddmm_tiles),
            _borrow: PhantomData,
            ..self
        })
    }

    shape_getters!(shape: rows, cols, block_size, nnzb);
    /// Width of the index entries.
    pub fn index_type(&self) -> IndexType {
        self.index
    }
}

/// The host-side checks of a BSR description (see [`BsrView::from_raw`]).
fn check_bsr_description<T: DeviceElement>(
    arrays: &BsrArrays,
    rows: usize,
    cols: usize,
    bs: usize,
    nnzb: usize,
) -> Result<()> {
    use crate::error::BsrError;
    if !matches!(bs, 16 | 32 | 64 | 128) {
        return Err(Error::InvalidBsr(BsrError::UnsupportedBlockSize { bs }));
    }
    for (dim, value) in [("rows", rows), ("cols", cols)] {
        if !value.is_multiple_of(bs) {
            return Err(Error::InvalidBsr(BsrError::NotMultiple { dim, value, bs }));
        }
    }
    let limit = u32::MAX as usize;
    for (what, value) in [("block rows", rows / bs), ("block columns", cols / bs), ("nnzb", nnzb)] {
        if value > limit {
            return Err(Error::TooLarge { what, requested: value as u128, limit: limit as u128 });
        }
    }
    if rows > limit || cols > limit {
        return Err(Error::TooLarge {
            what: "rows or columns of A",
            requested: rows.max(cols) as u128,
            limit: limit as u128,
        });
    }
    let value_bytes =
        nnzb.checked_mul(bs * bs).and_then(|e| e.checked_mul(std::mem::size_of::<T>())).ok_or(Error::TooLarge {
            what: "BSR values (bytes)",
            requested: nnzb as u128 * (bs * bs * std::mem::size_of::<T>()) as u128,
            limit: usize::MAX as u128,
        })?;
    let w = arrays.index.bytes() as u64;
    let bad = |reason: String| Err(Error::InvalidArgument { name: "BSR arrays", reason });
    // Without blocks, values and col_idx are never read: any address will do (PyTorch gives empty tensors 0).
    if nnzb > 0 && (arrays.values == 0 || !arrays.values.is_multiple_of(16)) {
        return bad(format!("values address {:#x} must be non-null and 16-byte aligned", arrays.values));
    }
    if (arrays.values as usize).checked_add(value_bytes).is_none() {
        return bad("the values run past the end of the address space".into());
    }
    for (name, p, needed) in [("row_ptr", arrays.row_ptr, true), ("col_idx", arrays.col_idx, nnzb > 0)] {
        if needed && (p == 0 || !p.is_multiple_of(w)) {
            return bad(format!("{name} address {p:#x} must be non-null and aligned to its {w}-byte entries"));
        }
    }
    Ok(())
}

impl<T: DeviceElement> DeviceBsr<T> {
    /// A view of the uploaded matrix (32-bit indices, with its longest-first row schedule). Its structure was
    /// validated by [`Bsr::try_new`](crate::Bsr::try_new) before the upload.
    pub fn view(&self) -> BsrView<'_, T> {
        let stream = self.values.stream();
        let (values, _r0) = self.values.device_ptr(stream);
        let (row_ptr, _r1) = self.row_ptr.device_ptr(stream);
        let (col_idx, _r2) = self.col_idx.device_ptr(stream);
        let (row_order, _r3) = self.row_order.device_ptr(stream);
        BsrView::trusted((values, row_ptr, col_idx, row_order), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dense_shape_spans_to_its_last_element_and_transposes_over_the_same_memory() {
        let row = DenseShape { rows: 3, cols: 5, ld: 8, layout: Layout::RowMajor };
        assert_eq!(row.span(), Some(2 * 8 + 5));
        let col = row.t();
        assert_eq!(col, DenseShape { rows: 5, cols: 3, ld: 8, layout: Layout::ColMajor });
        assert_eq!(col.span(), row.span());
        assert_eq!(DenseShape { rows: 5, cols: 3, ld: 8, layout: Layout::ColMajor }.t(), row);
        for (rows, cols) in [(0, 5), (3, 0), (0, 0)] {
            assert_eq!(DenseShape { rows, cols, ..row }.span(), Some(0));
        }
        assert_eq!(DenseShape { rows: 3, cols: 1, ld: usize::MAX, layout: Layout::RowMajor }.span(), None);
        assert_eq!(DenseShape { rows: 1, cols: usize::MAX, ld: 1, layout: Layout::RowMajor }.span(), Some(usize::MAX));
    }

    #[test]
    fn extents_lie_inside_their_allocation_or_are_refused_with_the_numbers() {
        let alloc = (0x1000u64, 0x200u64);
        // The whole allocation, a part at its end, nothing (anywhere): inside.
        assert!(check_within("x", 0x1000, 0x200, alloc).is_ok());
        assert!(check_within("x", 0x11f0, 0x10, alloc).is_ok());
        assert!(check_within("x", 0, 0, alloc).is_ok());
        // One byte past the end, one before the start, a start past the end.
        for (start, bytes) in [(0x1000u64, 0x201u128), (0xfff, 2), (0x1200, 1)] {
            match check_within("B", start, bytes, alloc) {
                Err(Error::OutsideAllocation { what: "B", start: s, bytes: b, alloc_start, alloc_bytes }) => {
                    assert_eq!((s, b, alloc_start, alloc_bytes), (start, bytes, 0x1000, 0x200));
                }
                other => panic!("{start:#x} + {bytes}: {other:?}"),
            }
        }
        // Extents that would wrap 64 bits (a length of 2^63 elements of 2 bytes) never pass: 128-bit arithmetic.
        let huge = bytes_of(Some(1usize << 63), 2);
        assert_eq!(huge, 1u128 << 64);
        assert!(check_within("x", 0x1000, huge, alloc).is_err());
        assert!(check_within("x", u64::MAX, 2, (u64::MAX - 1, 2)).is_err());
        assert!(check_within("x", u64::MAX - 1, 2, (u64::MAX - 1, 2)).is_ok());
        // An element count that overflowed saturates: no allocation holds it.
        assert_eq!(bytes_of(None, 2), u128::MAX);
        assert!(check_within("x", 0x1000, bytes_of(None, 2), (0, u64::MAX)).is_err());
        let e = check_within("A's col_idx", 0x1100, 0x180, alloc).unwrap_err().to_string();
        assert!(
            e.contains(
                "A's col_idx: 384 bytes from 0x1100 reach outside its device allocation (512 bytes from 0x1000)"
            ),
            "{e}"
        );
    }
}
