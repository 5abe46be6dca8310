//! `sparsek._native`: the extension module behind the `sparsek` Python package. It takes plain integers (device
//! or host addresses, sizes, strides) that the package's Python layer (`sparsek/_ops.py`) reads off torch
//! tensors after checking their dtypes, devices and strides, so it depends on no torch version and no CUDA
//! toolkit: the GPU path is sparsek's `Gpu::spmm_raw` on the caller's stream, the CPU path sparsek's CPU backend.
//!
//! Private API: the addresses must be those of live tensors of the stated sizes (the Python layer guarantees it);
//! everything else (shapes, alignment, block sizes, the stream's context, that every device address is memory of
//! the GPU, the structure on the CPU path and, on request, on the device) is checked again here by the library.
//! Errors become `ValueError` (shapes, structure, sizes), `TypeError` (element types), `MemoryError` (out of
//! memory) or `RuntimeError` (driver, device, module), carrying the library's message.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use sparsek::gpu::{
    BsrArrays, BsrView, CUstream, DenseView, DenseViewMut, Gpu, IndexType, InputElement, OutputElement, VectorView,
};
use sparsek::plan::Policy;
use sparsek::{Activation, Bsr, BsrError, Epilogue, Error, Layout, Matrix, Scalar, bf16, f16};

/// The library's error as the Python exception a torch user expects, with the library's message.
fn to_py(e: Error) -> PyErr {
    let msg = format!("sparsek: {e}");
    match error_class(&e) {
        ErrorClass::Type => PyTypeError::new_err(msg),
        ErrorClass::Value => PyValueError::new_err(msg),
        ErrorClass::Memory => PyMemoryError::new_err(msg),
        ErrorClass::Runtime => PyRuntimeError::new_err(msg),
    }
}

/// The Python exception a library error becomes, for the PyO3 functions ([`to_py`]) and the native kernels alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ErrorClass {
    Type,
    Value,
    Memory,
    Runtime,
}

fn error_class(e: &Error) -> ErrorClass {
    match e {
        Error::InvalidArgument { name: "element types", .. } => ErrorClass::Type,
        Error::InvalidBsr(_)
        | Error::ShapeMismatch { .. }
        | Error::InvalidMatrix { .. }
        | Error::InvalidArgument { .. }
        | Error::TooLarge { .. }
        | Error::OutsideAllocation { .. }
        | Error::NonFinite { .. }
        | Error::Io { .. } => ErrorClass::Value,
        Error::OutOfMemory { .. } => ErrorClass::Memory,
        _ => ErrorClass::Runtime,
    }
}

/// Whether launches may start before the kernel ahead of them on the stream ends (`set_programmatic_launch`;
/// `Policy::programmatic`). Process-wide, off until the caller says otherwise.
static PROGRAMMATIC: AtomicBool = AtomicBool::new(false);

/// The SMs later products are planned for (`set_sm_limit`; `Policy::sm_limit`): 0 for all of them. Process-wide.
static SM_LIMIT: AtomicU32 = AtomicU32::new(0);

/// The opened `Gpu`s, keyed by (device ordinal, programmatic launch, SM limit).
type GpuKey = (usize, bool, u32);
type Gpus = Mutex<HashMap<GpuKey, Arc<Gpu>>>;
static GPUS: OnceLock<Gpus> = OnceLock::new();

/// The key of `ordinal`'s `Gpu` under the current settings.
fn gpu_key(ordinal: usize) -> GpuKey {
    (ordinal, PROGRAMMATIC.load(Ordering::Relaxed), SM_LIMIT.load(Ordering::Relaxed))
}

/// `gpu`'s `Gpu` for the current settings if it is open already (the native operators never open one).
fn opened_gpu(ordinal: usize) -> Option<Arc<Gpu>> {
    GPUS.get()?.lock().unwrap_or_else(PoisonError::into_inner).get(&gpu_key(ordinal)).cloned()
}

/// One `Gpu` per device ordinal and setting (programmatic launch, SM limit), opened on first use (the module load
/// takes about 0.4 s) and kept for the life of the process. It holds the device's primary context, the one
/// PyTorch uses.
fn gpu(py: Python<'_>, ordinal: usize) -> PyResult<Arc<Gpu>> {
    let gpus = GPUS.get_or_init(Default::default);
    let key = gpu_key(ordinal);
    if let Some(g) = gpus.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
        return Ok(g.clone());
    }
    let policy = Policy { programmatic: key.1, sm_limit: NonZeroU32::new(key.2), ..Policy::default() };
    let opened = Arc::new(py.detach(|| Gpu::new(ordinal).map(|g| g.with_policy(policy))).map_err(to_py)?);
    Ok(gpus.lock().unwrap_or_else(PoisonError::into_inner).entry(key).or_insert(opened).clone())
}

fn activation(code: u32) -> PyResult<Activation> {
    Activation::ALL.get(code as usize).copied().ok_or_else(|| {
        PyValueError::new_err(format!("sparsek: activation code {code} is not one of 0..{}", Activation::ALL.len()))
    })
}

fn layout(col_major: bool) -> Layout {
    if col_major { Layout::ColMajor } else { Layout::RowMajor }
}

/// One product's description, as the Python layer read it off the tensors: `C (m x n) = act(alpha * A @ B +
/// bias) + beta * C` with A a BSR matrix (m x k, blocks of bs) and B k x n. Addresses are device addresses on
/// the GPU path and host addresses on the CPU path; `bias == 0` means no bias.
#[derive(Clone, Copy)]
struct Product {
    values: u64,
    row_ptr: u64,
    col_idx: u64,
    index64: bool,
    m: usize,
    k: usize,
    bs: usize,
    nnzb: usize,
    b: u64,
    b_ld: usize,
    b_col_major: bool,
    n: usize,
    c: u64,
    c_ld: usize,
    c_col_major: bool,
    bias: u64,
    ep: Epilogue,
}

impl Product {
    /// A structure (and values) only, without dense operands (what the CPU SDDMM and the transposed index read;
    /// the products add theirs to it).
    fn structure(
        values: u64,
        (row_ptr, col_idx, index64): (u64, u64, bool),
        (m, k, bs, nnzb): (usize, usize, usize, usize),
        ep: Epilogue,
    ) -> Product {
        Product {
            values,
            row_ptr,
            col_idx,
            index64,
            m,
            k,
            bs,
            nnzb,
            b: 0,
            b_ld: 0,
            b_col_major: false,
            n: 0,
            c: 0,
            c_ld: 0,
            c_col_major: false,
            bias: 0,
            ep,
        }
    }

    fn arrays(&self) -> BsrArrays {
        BsrArrays {
            values: self.values,
            row_ptr: self.row_ptr,
            col_idx: self.col_idx,
            index: if self.index64 { IndexType::I64 } else { IndexType::U32 },
        }
    }

    /// # Safety
    /// The addresses are live device memory of `gpu` with the sizes the description states; the structure is
    /// valid (checked on the device by `cuda_check_bsr` or known valid); `stream` is a live stream of `gpu`'s
    /// context (or 0).
    ///
    /// `schedule`, when given: the block rows' schedule made of this structure when it was checked.
    unsafe fn launch<TA: InputElement, TC: OutputElement>(
        &self,
        gpu: &Gpu,
        stream: CUstream,
        schedule: Option<&sparsek::gpu::RowSchedule>,
    ) -> sparsek::Result<()> {
        // Every address is declared memory of `gpu`'s device (the contract; the Python layer and the native ops
        // check that the tensors share one CUDA device and open that device's Gpu): the launch then skips the
        // driver's pointer queries, up to six a call (0.47-0.59 us a launch of five on an H200's host: issue 43,
        // per-call cost).
        let dev = gpu.info().ordinal;
        // SAFETY: the function's contract (the Python layer passes a live tensor's address and sizes for each, on
        // `gpu`'s device).
        let a = unsafe { BsrView::<TA>::from_raw(self.arrays(), self.m, self.k, self.bs, self.nnzb)?.on_device(dev) };
        let a = match schedule {
            Some(s) => a.with_schedule(s)?,
            None => a,
        };
        // SAFETY: as above.
        let b = unsafe {
            DenseView::<TA>::from_raw(self.b, self.k, self.n, self.b_ld, layout(self.b_col_major))?.on_device(dev)
        };
        // SAFETY: as above; the output tensor is not read or written by anything else during the launch.
        let mut c = unsafe {
            DenseViewMut::<TC>::from_raw(self.c, self.m, self.n, self.c_ld, layout(self.c_col_major))?.on_device(dev)
        };
        let bias = match self.bias {
            0 => None,
            // SAFETY: as above (m elements).
            p => Some(unsafe { VectorView::<TA>::from_raw(p, self.m)?.on_device(dev) }),
        };
        // SAFETY: as above; the stream is torch's current stream of the tensors' device.
        unsafe { gpu.spmm_raw(stream, &a, &b, &mut c, bias.as_ref(), self.ep) }
    }

    /// A's index arrays in host memory, with the shape checks (block size, rows and cols multiples of it), read as
    /// `u32` (the structure itself is validated by whoever builds from them).
    ///
    /// # Safety
    /// `row_ptr` and `col_idx` are live host memory with the sizes the description states, aligned for their types.
    unsafe fn cpu_indices(&self) -> sparsek::Result<(Vec<u32>, Vec<u32>)> {
        if !matches!(self.bs, 16 | 32 | 64 | 128) {
            return Err(Error::InvalidBsr(BsrError::UnsupportedBlockSize { bs: self.bs }));
        }
        for (what, dim) in [("rows", self.m), ("cols", self.k)] {
            if !dim.is_multiple_of(self.bs) {
                return Err(Error::InvalidArgument {
                    name: what,
                    reason: format!("{dim} is not a multiple of the block size {}", self.bs),
                });
            }
        }
        // SAFETY (each read): the function's contract; offsets stay within the stated sizes.
        let index = |ptr: u64, len: usize, what: &'static str| -> sparsek::Result<Vec<u32>> {
            (0..len)
                .map(|i| {
                    let v: i64 = if self.index64 {
                        unsafe { *(ptr as *const i64).add(i) }
                    } else {
                        i64::from(unsafe { *(ptr as *const i32).add(i) })
                    };
                    u32::try_from(v).map_err(|_| Error::InvalidArgument {
                        name: what,
                        reason: format!("entry {i} is {v}, outside 0..2^32"),
                    })
                })
                .collect()
        };
        Ok((index(self.row_ptr, self.m / self.bs + 1, "crow_indices")?, index(self.col_idx, self.nnzb, "col_indices")?))
    }

    /// A's arrays in host memory copied into a validated `Bsr` (checked like any other); a null values address
    /// gives zeros (a pattern whose values are to be written).
    ///
    /// # Safety
    /// The addresses are live host memory with the sizes the description states, aligned for their types.
    unsafe fn cpu_bsr<TA: Scalar>(&self) -> sparsek::Result<Bsr<TA>> {
        // SAFETY: the function's contract.
        let (row_ptr, col_idx) = unsafe { self.cpu_indices() }?;
        let value_count = self.nnzb.checked_mul(self.bs * self.bs).ok_or(Error::TooLarge {
            what: "BSR values (nnzb * bs * bs)",
            requested: self.nnzb as u128 * (self.bs * self.bs) as u128,
            limit: usize::MAX as u128,
        })?;
        let values = if value_count == 0 || self.values == 0 {
            vec![TA::from_f32(0.0); value_count]
        } else {
            // SAFETY: the function's contract (nnzb * bs * bs values).
            unsafe { std::slice::from_raw_parts(self.values as *const TA, value_count) }.to_vec()
        };
        Ok(Bsr::try_new(self.m, self.k, self.bs, row_ptr, col_idx, values)?)
    }

    /// The CPU backend over host memory: the BSR arrays are copied into a validated `Bsr` (checked like any
    /// other), B into a row-major matrix, and the result written back in C's layout.
    ///
    /// # Safety
    /// The addresses are live host memory with the sizes the description states, aligned for their types, and
    /// nothing else accesses C during the call.
    unsafe fn cpu<TA: Scalar, TC: Scalar>(&self) -> sparsek::Result<()> {
        // SAFETY: the function's contract.
        let a = unsafe { self.cpu_bsr::<TA>() }?;
        // SAFETY: B is k x n, C m x n (the function's contract).
        let b = unsafe { read_dense::<TA>(self.b, self.k, self.n, self.b_ld, self.b_col_major) }?;
        let mut c = if self.ep.beta != 0.0 {
            // SAFETY: as above.
            unsafe { read_dense::<TC>(self.c, self.m, self.n, self.c_ld, self.c_col_major) }?
        } else {
            Matrix::<TC>::zeros(self.m, self.n)?
        };
        let bias = match self.bias {
            // SAFETY: m values of TA.
            p if p != 0 && self.m > 0 => Some(unsafe { std::slice::from_raw_parts(p as *const TA, self.m) }),
            _ => None,
        };
        sparsek::cpu::spmm_with_bias(&a, &b, &mut c, self.ep, bias)?;
        // SAFETY: as above; nothing else accesses C.
        unsafe { write_dense(&c, self.c, self.c_ld, self.c_col_major) };
        Ok(())
    }

    /// The CPU backend of `C = alpha * A^T @ B + beta * C` (`sparsek::cpu::spmm_t`): A `m x k` as for
    /// [`Product::cpu`], B `m x n` (at `b`, its leading dimension and layout), C `k x n`. The transposed index is
    /// built here from the validated structure (`BsrTranspose::new`, `O(nnzb)`, next to the copy of the values the
    /// call makes anyway).
    ///
    /// # Safety
    /// As [`Product::cpu`], with B `m x n` and C `k x n`.
    unsafe fn cpu_t<TA: Scalar, TC: Scalar>(&self) -> sparsek::Result<()> {
        // SAFETY: the function's contract.
        let a = unsafe { self.cpu_bsr::<TA>() }?;
        let at = sparsek::format::BsrTranspose::new(&a)?;
        // SAFETY: B is m x n, C k x n (the function's contract).
        let b = unsafe { read_dense::<TA>(self.b, self.m, self.n, self.b_ld, self.b_col_major) }?;
        let mut c = if self.ep.beta != 0.0 {
            // SAFETY: as above.
            unsafe { read_dense::<TC>(self.c, self.k, self.n, self.c_ld, self.c_col_major) }?
        } else {
            Matrix::<TC>::zeros(self.k, self.n)?
        };
        sparsek::cpu::spmm_t(&a, &at, &b, &mut c, self.ep)?;
        // SAFETY: as above; nothing else accesses C.
        unsafe { write_dense(&c, self.c, self.c_ld, self.c_col_major) };
        Ok(())
    }
}

/// The offset of element `(r, c)` of a dense matrix with leading dimension `ld`, row- or column-major.
fn dense_at(ld: usize, col_major: bool) -> impl Fn(usize, usize) -> usize {
    move |r, c| if col_major { c * ld + r } else { r * ld + c }
}

/// A `rows x cols` dense matrix in host memory (at `ptr`, leading dimension `ld`, row- or column-major) copied
/// into a row-major `Matrix`.
///
/// # Safety
/// `ptr` is live host memory holding the matrix so described, aligned for `T`.
unsafe fn read_dense<T: Scalar>(
    ptr: u64,
    rows: usize,
    cols: usize,
    ld: usize,
    col_major: bool,
) -> sparsek::Result<Matrix<T>> {
    let at = dense_at(ld, col_major);
    // SAFETY: (r, c) within rows x cols, so the offset is within the matrix's span.
    Matrix::<T>::from_fn(rows, cols, |r, c| unsafe { *(ptr as *const T).add(at(r, c)) })
}

/// Writes `m` into host memory at `ptr` (leading dimension `ld`, row- or column-major).
///
/// # Safety
/// `ptr` is live host memory holding an `m.rows() x m.cols()` matrix so described, aligned for `T`, that nothing
/// else accesses during the call.
unsafe fn write_dense<T: Scalar>(m: &Matrix<T>, ptr: u64, ld: usize, col_major: bool) {
    let at = dense_at(ld, col_major);
    for r in 0..m.rows() {
        for (j, v) in m.row(r).iter().enumerate() {
            // SAFETY: (r, j) within the matrix's span; nothing else accesses it.
            unsafe { *(ptr as *mut T).add(at(r, j)) = *v };
        }
    }
}

/// Dispatches `$f::<TA, TC>` on the (input, output) type names the Python layer passes.
macro_rules! by_types {
    ($dtype:expr, $out:expr, $f:ident ( $($arg:expr),* )) => {
        match ($dtype, $out) {
            ("f16", "f32") => $f::<f16, f32>($($arg),*),
            ("f16", "f16") => $f::<f16, f16>($($arg),*),
            ("bf16", "f32") => $f::<bf16, f32>($($arg),*),
            ("bf16", "bf16") => $f::<bf16, bf16>($($arg),*),
            (a, c) => Err(Error::InvalidArgument {
                name: "element types",
                reason: format!(
                    "{a} inputs with a {c} output are not supported: inputs are float16 or bfloat16, the output \
                     float32 or the inputs' own type"
                ),
            }),
        }
    };
}

impl Product {
    /// [`Product::launch`] with the element types named as the Python layer names them (`by_types!`).
    ///
    /// # Safety
    /// As [`Product::launch`].
    unsafe fn launch_named(
        &self,
        dtype: &str,
        out_dtype: &str,
        gpu: &Gpu,
        stream: CUstream,
        schedule: Option<&sparsek::gpu::RowSchedule>,
    ) -> sparsek::Result<()> {
        unsafe fn go<TA: InputElement, TC: OutputElement>(
            p: &Product,
            gpu: &Gpu,
            s: CUstream,
            schedule: Option<&sparsek::gpu::RowSchedule>,
        ) -> sparsek::Result<()> {
            // SAFETY: the caller's contract, as `launch_named`'s.
            unsafe { p.launch::<TA, TC>(gpu, s, schedule) }
        }
        // SAFETY: the function's contract.
        unsafe { by_types!(dtype, out_dtype, go(self, gpu, stream, schedule)) }
    }

    /// [`Product::cpu`] with the element types named as the Python layer names them.
    ///
    /// # Safety
    /// As [`Product::cpu`].
    unsafe fn cpu_named(&self, dtype: &str, out_dtype: &str) -> sparsek::Result<()> {
        fn go<TA: Scalar, TC: Scalar>(p: &Product) -> sparsek::Result<()> {
            // SAFETY: the caller's contract, as `cpu_named`'s.
            unsafe { p.cpu::<TA, TC>() }
        }
        by_types!(dtype, out_dtype, go(self))
    }

    /// [`Product::cpu_t`] with the element types named as the Python layer names them.
    ///
    /// # Safety
    /// As [`Product::cpu_t`].
    unsafe fn cpu_t_named(&self, dtype: &str, out_dtype: &str) -> sparsek::Result<()> {
        fn go<TA: Scalar, TC: Scalar>(p: &Product) -> sparsek::Result<()> {
            // SAFETY: the caller's contract, as `cpu_t_named`'s.
            unsafe { p.cpu_t::<TA, TC>() }
        }
        by_types!(dtype, out_dtype, go(self))
    }
}

mod backward;
mod native_ops;
mod torch_abi;

/// A product as the Python layer describes it, one tuple of five: the input and output type names (("f16" |
/// "bf16", "f32" | "f16" | "bf16")); A (values, row_ptr and col_idx addresses, 64-bit indices?, M, K, block
/// size, nnzb); B (address, leading dimension, column-major?, N); C (address, leading dimension, column-major?);
/// the epilogue (bias address or 0, alpha, beta, activation code).
#[derive(FromPyObject)]
struct Args((String, String), BsrArgs, (u64, usize, bool, usize), (u64, usize, bool), (u64, f32, f32, u32));

impl Args {
    fn product(&self) -> PyResult<Product> {
        let (values, row_ptr, col_idx, index64, m, k, bs, nnzb) = self.1;
        let (b, b_ld, b_col_major, n) = self.2;
        let (c, c_ld, c_col_major) = self.3;
        let (bias, alpha, beta, act) = self.4;
        let ep = Epilogue::new(alpha, beta).with_activation(activation(act)?);
        Ok(Product {
            b,
            b_ld,
            b_col_major,
            n,
            c,
            c_ld,
            c_col_major,
            bias,
            ..Product::structure(values, (row_ptr, col_idx, index64), (m, k, bs, nnzb), ep)
        })
    }

    fn types(&self) -> (&str, &str) {
        (self.0.0.as_str(), self.0.1.as_str())
    }
}

/// `C = act(alpha * A @ B + bias) + beta * C` on GPU `device`, queued on the raw CUDA stream `stream` (torch's
/// current stream of that device); no synchronisation, no allocation (CUDA-graph capturable). The structure
/// must have been checked, and A's row_ptr and col_idx addresses be the checked copy's (`cuda_check_bsr`'s
/// `CheckedStructure`). Private: called by sparsek/_ops.py with a live tensor's address and
/// sizes for each operand (`Args`), and the block rows' schedule made of the structure when it was checked
/// (`cuda_row_schedule`), or `None`.
#[pyfunction]
#[pyo3(signature = (device, stream, args, schedule=None))]
fn cuda_spmm(
    py: Python<'_>,
    device: usize,
    stream: usize,
    args: Args,
    schedule: Option<PyRef<'_, RowSchedule>>,
) -> PyResult<()> {
    let p = args.product()?;
    let gpu = gpu(py, device)?;
    let stream = stream as CUstream;
    let (dtype, out_dtype) = args.types();
    let schedule = schedule.as_ref().map(|s| &s.0);
    // SAFETY: the Python layer passes live tensors' addresses and sizes on their own device, a structure it has
    // checked on the device, and torch's current stream of that device.
    unsafe { p.launch_named(dtype, out_dtype, &gpu, stream, schedule) }.map_err(to_py)
}

/// Declares a frozen class of `sparsek._native` wrapping a library object (the tuple field): its `__repr__`
/// (`repr |wrapped| string;`) and its read-only properties, each `name: type = |wrapped| value;` (a Python
/// property, documented by its doc comment).
macro_rules! native_class {
    (
        $(#[$doc:meta])*
        struct $class:ident($wrapped:ty);
        repr |$r:ident| $repr:expr;
        $($(#[$prop_doc:meta])* $prop:ident: $t:ty = |$w:ident| $value:expr;)*
    ) => {
        $(#[$doc])*
        #[pyclass(frozen, module = "sparsek._native")]
        struct $class($wrapped);

        #[pymethods]
        impl $class {
            $(
                $(#[$prop_doc])*
                #[getter]
                fn $prop(&self) -> $t {
                    let $w = &self.0;
                    $value
                }
            )*
            fn __repr__(&self) -> String {
                let $r = &self.0;
                $repr
            }
        }
    };
}

native_class! {
    /// The schedule of a checked structure's block rows (`sparsek::gpu::RowSchedule`: longest rows first, in memory
    /// the library allocated outside torch's allocator, and the longest row's blocks), which the Python layer keeps
    /// beside the structure it was made of and passes to every `cuda_spmm` and `cuda_sddmm` of it. Freed when
    /// dropped: the Python layer synchronises the device before it drops one.
    struct RowSchedule(sparsek::gpu::RowSchedule);
    repr |s| format!(
        "RowSchedule(block_rows={}, nnzb={}, max_row_blocks={})",
        s.block_rows(),
        s.nnzb(),
        s.max_row_blocks()
    );
    /// Block rows of the structure it was made of.
    block_rows: usize = |s| s.block_rows();
    /// Its blocks.
    nnzb: usize = |s| s.nnzb();
    /// The most blocks in one block row.
    max_row_blocks: usize = |s| s.max_row_blocks();
}

/// The schedule of a structure's block rows on GPU `device` (`Gpu::row_schedule`) from its `row_ptr` in host
/// memory: `entries` int64 (`index64`) or int32 values at `row_ptr` (a contiguous CPU tensor the caller holds
/// during the call). Raises `ValueError` for a `row_ptr` that is not one. Private, as `cuda_spmm`.
#[pyfunction]
fn cuda_row_schedule(
    py: Python<'_>,
    device: usize,
    row_ptr: u64,
    entries: usize,
    index64: bool,
) -> PyResult<RowSchedule> {
    let gpu = gpu(py, device)?;
    if row_ptr == 0 || !row_ptr.is_multiple_of(if index64 { 8 } else { 4 }) {
        return Err(PyValueError::new_err(format!("sparsek: row_ptr address {row_ptr:#x} is null or misaligned")));
    }
    py.detach(|| {
        // SAFETY: the Python layer passes a live contiguous CPU tensor of `entries` values of the stated width.
        let schedule = if index64 {
            gpu.row_schedule(unsafe { std::slice::from_raw_parts(row_ptr as *const i64, entries) })
        } else {
            gpu.row_schedule(unsafe { std::slice::from_raw_parts(row_ptr as *const i32, entries) })
        };
        schedule.map(RowSchedule).map_err(to_py)
    })
}

/// A BSR matrix as `Args` describes it: values, row_ptr and col_idx addresses, 64-bit indices?, M, K, block
/// size, nnzb.
type BsrArgs = (u64, u64, u64, bool, usize, usize, usize, usize);

native_class! {
    /// A checked private copy of a BSR structure's indices on the GPU (`sparsek::gpu::CheckedIndices`: allocated by
    /// the library outside torch's allocator, so a CUDA-graph pool never holds it), made by `cuda_check_bsr`.
    /// Launches read the copy's `row_ptr` and `col_idx`, never the caller's index tensors: no write to those (in
    /// place through `.data`, DLPack, CuPy, an inference tensor's edit: none of which torch's version counter sees)
    /// can make a kernel read an unchecked structure. Freed when dropped (waiting for the device's queued work
    /// first).
    struct CheckedStructure(sparsek::gpu::CheckedIndices);
    repr |c| {
        let (m, k, bs, nnzb) = c.shape();
        format!("CheckedStructure(rows={m}, cols={k}, block_size={bs}, nnzb={nnzb})")
    };
    /// Device address of the copy's `row_ptr` (the caller's index width).
    row_ptr: u64 = |c| c.arrays(0).row_ptr;
    /// Device address of the copy's `col_idx`.
    col_idx: u64 = |c| c.arrays(0).col_idx;
    /// Device bytes the copy holds.
    nbytes: usize = |c| c.device_bytes();
}

/// Copies a BSR structure's indices on GPU `device` into memory the library owns and checks the copy there (one
/// device-to-device copy per array, one launch and an 8-byte read-back on sparsek's stream of the device, which
/// waits for it): `row_ptr` from 0 to `nnzb`, nondecreasing; `col_idx` strictly increasing per block row and in
/// range. Returns the copy (`CheckedStructure`), whose addresses the launches use in place of the tensors'. Raises
/// `ValueError` naming the first bad block row. Private, as `cuda_spmm`; `a` is the second entry of `cuda_spmm`'s
/// `Args`.
#[pyfunction]
fn cuda_check_bsr(py: Python<'_>, device: usize, dtype: &str, a: BsrArgs) -> PyResult<CheckedStructure> {
    let gpu = gpu(py, device)?;
    let (values, row_ptr, col_idx, index64, m, k, bs, nnzb) = a;
    let arrays = BsrArrays { values, row_ptr, col_idx, index: if index64 { IndexType::I64 } else { IndexType::U32 } };
    fn check<T: InputElement>(
        gpu: &Gpu,
        arrays: BsrArrays,
        (m, k, bs, nnzb): (usize, usize, usize, usize),
    ) -> PyResult<CheckedStructure> {
        // SAFETY: the Python layer passes live index tensors of the stated sizes on this device, not written while
        // the call runs (it synchronised their stream first).
        unsafe { gpu.checked_copy::<T>(arrays, m, k, bs, nnzb) }.map(CheckedStructure).map_err(to_py)
    }
    py.detach(|| match dtype {
        "f16" => check::<f16>(&gpu, arrays, (m, k, bs, nnzb)),
        "bf16" => check::<bf16>(&gpu, arrays, (m, k, bs, nnzb)),
        other => Err(PyTypeError::new_err(format!("sparsek: {other} values are not supported (float16 or bfloat16)"))),
    })
}

/// The CPU backend on host memory (torch CPU tensors), the same `Args` as `cuda_spmm`. The structure is
/// validated here (as `Bsr::try_new` does); the GIL is released while it computes.
#[pyfunction]
fn cpu_spmm(py: Python<'_>, args: Args) -> PyResult<()> {
    let p = args.product()?;
    py.detach(move || {
        let (dtype, out_dtype) = args.types();
        // SAFETY: the Python layer passes live CPU tensors' addresses and sizes, and holds them during the call.
        unsafe { p.cpu_named(dtype, out_dtype) }
    })
    .map_err(to_py)
}

/// The CPU backend of `C = alpha * A^T @ B + beta * C` (`sparsek::cpu::spmm_t`) on host memory: the same `Args`
/// as `cpu_spmm`, read as A `M x K` (the second entry), B `M x N` and C `K x N`; the bias must be 0 and the
/// activation 0 (the backward products take neither). The structure is validated here and its transposed index
/// built (`O(nnzb)`); the GIL is released while it computes. Private, called by `sparsek::bsr_mm_t`'s CPU kernel.
#[pyfunction]
fn cpu_spmm_t(py: Python<'_>, args: Args) -> PyResult<()> {
    let p = args.product()?;
    if p.bias != 0 {
        return Err(PyValueError::new_err("sparsek: A^T @ B takes no bias"));
    }
    py.detach(move || {
        let (dtype, out_dtype) = args.types();
        // SAFETY: the Python layer passes live CPU tensors' addresses and sizes, and holds them during the call.
        unsafe { p.cpu_t_named(dtype, out_dtype) }
    })
    .map_err(to_py)
}

/// What `cpu_sddmm` reads: the (input, output) type names; X (address, leading dimension, column-major?); Y
/// (the same); K; the pattern and output values (`BsrArgs`: the values' address is the output, contiguous
/// `nnzb x bs x bs` of the output type, M and N its shape); alpha, beta.
#[derive(FromPyObject)]
struct SddmmArgs((String, String), (u64, usize, bool), (u64, usize, bool), usize, BsrArgs, (f32, f32));

/// SDDMM on the CPU (`sparsek::cpu::sddmm`) on host memory: `values = alpha * (X @ Y^T) + beta * values` at the
/// stored blocks of the `M x N` structure, X `M x K`, Y `N x K` (any leading dimension, row- or column-major),
/// written in the BSR value layout (`nnzb x bs x bs`, contiguous). With `beta == 0` the old values are never
/// read. The structure is validated first (as `Bsr::try_new` does); nothing is written on an error; the GIL is
/// released while it computes. Private, called by `sparsek::sddmm`'s CPU kernel.
#[pyfunction]
fn cpu_sddmm(py: Python<'_>, args: SddmmArgs) -> PyResult<()> {
    let SddmmArgs((dtype, out_dtype), (x, x_ld, x_cm), (y, y_ld, y_cm), k, a, (alpha, beta)) = args;
    let (values, row_ptr, col_idx, index64, m, n, bs, nnzb) = a;
    let ep = Epilogue::new(alpha, beta);
    let old_values = if beta != 0.0 { values } else { 0 };
    let p = Product::structure(old_values, (row_ptr, col_idx, index64), (m, n, bs, nnzb), ep);
    /// # Safety
    /// As `cpu_sddmm`'s callers guarantee: live host memory of the stated sizes.
    unsafe fn go<TX: Scalar, TV: Scalar>(
        p: &Product,
        out: u64,
        x: (u64, usize, bool),
        y: (u64, usize, bool),
        k: usize,
    ) -> sparsek::Result<()> {
        // SAFETY (each): the function's contract.
        let mut pattern = unsafe { p.cpu_bsr::<TV>() }?;
        let x = unsafe { read_dense::<TX>(x.0, p.m, k, x.1, x.2) }?;
        let y = unsafe { read_dense::<TX>(y.0, p.k, k, y.1, y.2) }?;
        sparsek::cpu::sddmm(&x, &y, &mut pattern, p.ep)?;
        let vals = pattern.values();
        if !vals.is_empty() {
            // SAFETY: the output holds nnzb * bs * bs values of TV; nothing else accesses it during the call.
            unsafe { std::slice::from_raw_parts_mut(out as *mut TV, vals.len()) }.copy_from_slice(vals);
        }
        Ok(())
    }
    py.detach(move || {
        // SAFETY: the Python layer passes live CPU tensors' addresses and sizes, and holds them during the call.
        unsafe { by_types!(dtype.as_str(), out_dtype.as_str(), go(&p, values, (x, x_ld, x_cm), (y, y_ld, y_cm), k)) }
    })
    .map_err(to_py)
}

/// The transposed index of a BSR structure in host memory (`sparsek::format::BsrTranspose::from_structure`, which
/// validates it as `Bsr::try_new` does): `row_ptr` (`rows / bs + 1` entries) and `col_idx` (`nnzb`), int64
/// (`index64`) or int32, at the given addresses; writes `col_ptr` (`cols / bs + 1`), `row_idx` and `perm` (`nnzb`
/// each) as int32 at the three output addresses. Raises `ValueError` for an invalid structure (nothing written).
/// Private, called by `sparsek.bsr_transpose_index` on CPU tensors.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn cpu_bsr_transpose(
    py: Python<'_>,
    row_ptr: u64,
    col_idx: u64,
    index64: bool,
    shape: (usize, usize, usize, usize),
    col_ptr_out: u64,
    row_idx_out: u64,
    perm_out: u64,
) -> PyResult<()> {
    let (rows, cols, bs, nnzb) = shape;
    let p = Product::structure(0, (row_ptr, col_idx, index64), shape, Epilogue::default());
    py.detach(move || -> sparsek::Result<()> {
        // SAFETY: the Python layer passes live contiguous CPU index tensors of the stated sizes.
        let (row_ptr, col_idx) = unsafe { p.cpu_indices() }?;
        if nnzb > i32::MAX as usize || cols / bs >= i32::MAX as usize {
            return Err(Error::TooLarge {
                what: "transposed index entries (int32)",
                requested: nnzb.max(cols / bs + 1) as u128,
                limit: i32::MAX as u128,
            });
        }
        let t = sparsek::format::BsrTranspose::from_structure(rows, cols, bs, &row_ptr, &col_idx)?;
        for (dst, src) in [(col_ptr_out, t.col_ptr()), (row_idx_out, t.row_idx()), (perm_out, t.perm())] {
            if !src.is_empty() {
                // SAFETY: the output tensors are int32 of these lengths (the Python layer allocates them), not
                // accessed by anything else during the call; every entry is at most nnzb or below rows / bs, both
                // under 2^31 (checked above; a valid structure's block row count is at most its nnzb bound too).
                let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut i32, src.len()) };
                for (o, &v) in out.iter_mut().zip(src) {
                    *o = v as i32;
                }
            }
        }
        Ok(())
    })
    .map_err(to_py)
}

/// Whether a CUDA driver and at least one device are present (never raises).
#[pyfunction]
fn cuda_available() -> bool {
    sparsek::gpu::driver_present() && sparsek::gpu::device_count().is_ok_and(|n| n > 0)
}

/// What `device_info` returns: the GPU's name, compute capability, the product module's name, how it was loaded,
/// the sm_90a module's name where it is loaded, and whether the GPU can launch programmatically.
type DeviceInfoTuple = (String, (i32, i32), String, String, Option<String>, bool);

/// `(name, (major, minor), module, loaded_from, hopper_module, programmatic_available)` for GPU `device`: the
/// kernels' module, whether it came from the embedded SASS or the driver's PTX JIT, the sm_90a module on an
/// H100/H200 (else `None`), and whether products can start before the kernel ahead of them ends there
/// (`set_programmatic_launch`). Opens the device like a first product would.
#[pyfunction]
fn device_info(py: Python<'_>, device: usize) -> PyResult<DeviceInfoTuple> {
    let gpu = gpu(py, device)?;
    let info = gpu.info();
    Ok((
        info.name.clone(),
        info.compute_capability,
        gpu.module().0.to_owned(),
        gpu.module_loaded_from().to_owned(),
        gpu.hopper_module().map(|(name, _)| name.to_owned()),
        gpu.programmatic_launch_available(),
    ))
}

/// Sets whether later products may start before the kernel ahead of them on the stream ends
/// (`Policy::programmatic`, on GPUs that have it): process-wide, for every device. The caller
/// guarantees that the kernel just before each product does not write its weight (values or indices).
#[pyfunction]
fn set_programmatic_launch(enabled: bool) {
    PROGRAMMATIC.store(enabled, Ordering::Relaxed);
}

/// The setting of `set_programmatic_launch`.
#[pyfunction]
fn programmatic_launch() -> bool {
    PROGRAMMATIC.load(Ordering::Relaxed)
}

/// Plans later products for at most `sms` SMs (`Policy::sm_limit`; `None`: all of them), process-wide, for
/// every device. Errors: `ValueError` for 0.
#[pyfunction]
#[pyo3(signature = (sms))]
fn set_sm_limit(sms: Option<u32>) -> PyResult<()> {
    let value = match sms {
        None => 0,
        Some(0) => return Err(PyValueError::new_err("sparsek: an SM limit is at least 1 (None: every SM)")),
        Some(n) => n,
    };
    SM_LIMIT.store(value, Ordering::Relaxed);
    Ok(())
}

/// The setting of `set_sm_limit` (`None`: every SM).
#[pyfunction]
fn sm_limit() -> Option<u32> {
    NonZeroU32::new(SM_LIMIT.load(Ordering::Relaxed)).map(NonZeroU32::get)
}

/// The plan of the last product queued on GPU `device` under the current settings (`Gpu::last_plan`: its kernel,
/// decomposition, grid and launch attributes on one line), or `None` before the first.
#[pyfunction]
fn last_plan(device: usize) -> Option<String> {
    opened_gpu(device).and_then(|g| g.last_plan()).map(|p| p.to_string())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cuda_spmm, m)?)?;
    m.add_function(wrap_pyfunction!(backward::cuda_spmm_t, m)?)?;
    m.add_function(wrap_pyfunction!(backward::cuda_sddmm, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_check_bsr, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_row_schedule, m)?)?;
    m.add_class::<RowSchedule>()?;
    m.add_class::<CheckedStructure>()?;
    m.add_function(wrap_pyfunction!(cpu_spmm, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_spmm_t, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_sddmm, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_bsr_transpose, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    m.add_function(wrap_pyfunction!(device_info, m)?)?;
    m.add_function(wrap_pyfunction!(set_programmatic_launch, m)?)?;
    m.add_function(wrap_pyfunction!(programmatic_launch, m)?)?;
    m.add_function(wrap_pyfunction!(set_sm_limit, m)?)?;
    m.add_function(wrap_pyfunction!(sm_limit, m)?)?;
    m.add_function(wrap_pyfunction!(last_plan, m)?)?;
    native_ops::add_functions(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
