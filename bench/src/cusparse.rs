//! The cuSPARSE baseline, through whichever entry point the installed library accepts. In the order tried
//! ([`Kind::AUTO`]):
//! 1. `bsr-spmm-f16`: the generic API, `cusparseCreateBsr` (f16 values, row-major blocks) + `cusparseSpMM`
//!    with `CUSPARSE_SPMM_BSR_ALG1`, f16 B, f32 C, f32 compute (the same precisions as sparsek);
//! 2. `bsr-spmm-f16-out16`: the same with an f16 C;
//! 3. `bsrmm-f32`: legacy `cusparseSbsrmm`, everything f32 (A and B widened exactly from f16), C column-major;
//! 4. `csr-spmm-f16`: the generic API on A converted to CSR (every element of every stored block), f32 C;
//! 5. `csr-spmm-f16-out16`: the same with an f16 C.
//!
//! A kind is skipped when a symbol is missing or the library refuses it (`CUSPARSE_STATUS_NOT_SUPPORTED` and
//! the like); the first that sets up and runs once is benchmarked, and the record names it.

use std::ffi::c_void;

use cudarc::cusparse::result::CusparseError;
use cudarc::cusparse::sys;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use half::f16;

use crate::cuda::{Library, catch, library, poison};
use crate::error::{Error, Result};
use sparsek::format::Bsr;
use sparsek::gpu::{DeviceMatrix, Gpu};
use sparsek::matrix::Matrix;

/// One way of running the product through cuSPARSE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Generic SpMM on BSR, f16 A and B, f32 compute; C in f16 when `out16`, else f32.
    BsrSpmm {
        /// C in f16.
        out16: bool,
    },
    /// Legacy `cusparseSbsrmm`, all f32.
    Bsrmm,
    /// Generic SpMM on CSR, f16 A and B, f32 compute; C in f16 when `out16`, else f32.
    CsrSpmm {
        /// C in f16.
        out16: bool,
    },
}

impl Kind {
    /// The kinds tried in order when none is forced.
    pub const AUTO: [Kind; 5] = [
        Kind::BsrSpmm { out16: false },
        Kind::BsrSpmm { out16: true },
        Kind::Bsrmm,
        Kind::CsrSpmm { out16: false },
        Kind::CsrSpmm { out16: true },
    ];

    /// The name used in the output and by `--cusparse`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::BsrSpmm { out16: false } => "bsr-spmm-f16",
            Kind::BsrSpmm { out16: true } => "bsr-spmm-f16-out16",
            Kind::Bsrmm => "bsrmm-f32",
            Kind::CsrSpmm { out16: false } => "csr-spmm-f16",
            Kind::CsrSpmm { out16: true } => "csr-spmm-f16-out16",
        }
    }

    /// The kind named `s` (see [`Kind::name`]).
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::AUTO.into_iter().find(|k| k.name() == s)
    }

    /// Whether C is f16 (its check then uses the f16 output tolerance).
    pub fn out_is_f16(self) -> bool {
        matches!(self, Kind::BsrSpmm { out16: true } | Kind::CsrSpmm { out16: true })
    }

    fn symbols(self) -> &'static [&'static str] {
        match self {
            Kind::BsrSpmm { .. } => &[
                "cusparseCreateBsr",
                "cusparseCreateDnMat",
                "cusparseSpMM_bufferSize",
                "cusparseSpMM",
                "cusparseDestroySpMat",
                "cusparseDestroyDnMat",
            ],
            Kind::CsrSpmm { .. } => &[
                "cusparseCreateCsr",
                "cusparseCreateDnMat",
                "cusparseSpMM_bufferSize",
                "cusparseSpMM",
                "cusparseDestroySpMat",
                "cusparseDestroyDnMat",
            ],
            Kind::Bsrmm => &["cusparseCreateMatDescr", "cusparseSbsrmm", "cusparseDestroyMatDescr"],
        }
    }
}

/// `cusparseSpMM` or `cusparseSpMM_bufferSize` (`$f`) for `C = A @ B` through the generic descriptors `$a`, `$b`,
/// `$c`: no transposes, alpha 1 and beta 0 as host f32 values (the f32 compute type), algorithm `$alg`, then the
/// call's own last argument (the work buffer, or where to write its size). One argument list for both, so the
/// buffer is sized for the very call that uses it. An FFI call: the caller's `unsafe` block says why the handle,
/// the descriptors and `$last` are valid.
macro_rules! spmm {
    ($f:ident($handle:expr, $a:expr, $b:expr, $c:expr, $alg:expr, $last:expr)) => {{
        let (alpha, beta) = (1.0f32, 0.0f32);
        sys::$f(
            $handle,
            sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE,
            sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE,
            (&alpha as *const f32).cast::<c_void>(),
            $a as sys::cusparseConstSpMatDescr_t,
            $b as sys::cusparseConstDnMatDescr_t,
            (&beta as *const f32).cast::<c_void>(),
            $c,
            sys::cudaDataType_t::CUDA_R_32F,
            $alg,
            $last,
        )
    }};
}

/// A cuSPARSE handle bound to the [`Gpu`]'s stream.
pub struct Cusparse {
    handle: sys::cusparseHandle_t,
    version: i32,
}

impl Cusparse {
    /// Loads cuSPARSE and creates a handle on `gpu`'s stream, or says why it cannot.
    pub fn new(gpu: &Gpu) -> Result<Self> {
        LIB.require(&["cusparseCreate", "cusparseSetStream", "cusparseGetVersion", "cusparseDestroy"])?;
        gpu.context().bind_to_thread().map_err(Error::driver("binding the CUDA context"))?;
        let handle = catch(cudarc::cusparse::result::create)?.map_err(st("cusparseCreate"))?;
        let mut me = Cusparse { handle, version: 0 };
        // SAFETY: the handle is live; the stream belongs to the GPU's context and outlives the handle (the
        // bench drops this before the Gpu).
        unsafe { sys::cusparseSetStream(me.handle, gpu.stream().cu_stream() as sys::cudaStream_t) }
            .result()
            .map_err(st("cusparseSetStream"))?;
        // SAFETY: writes one int through a valid pointer.
        unsafe { sys::cusparseGetVersion(me.handle, &mut me.version) }.result().map_err(st("cusparseGetVersion"))?;
        Ok(me)
    }

    /// The library version (e.g. 12600 for 12.6.0).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// Why `kind` cannot be used with this library (a missing symbol), if it cannot.
    pub fn missing_symbol(&self, kind: Kind) -> Result<()> {
        LIB.require(kind.symbols())
    }

    /// Uploads one input set (A in the form `kind` needs, B, a C) and creates its descriptors and work buffer.
    pub fn upload(&self, gpu: &Gpu, host: &HostOperands<'_>) -> Result<DeviceSet> {
        let stream = gpu.stream();
        let up_i32 = |v: &[i32], what: &str| stream.clone_htod(v).map_err(Error::driver(format!("uploading {what}")));
        let Dims { kind, m, n, .. } = host.dims;
        let row_ptr = up_i32(&host.row_ptr, "row offsets")?;
        let col_idx = up_i32(&host.col_idx, "column indices")?;
        let err = |what: &'static str| Error::step::<sparsek::Error>(what);
        let (values, b, c) = match kind {
            Kind::Bsrmm => {
                let v32 = host.values_f32.as_deref().ok_or(Error::Unsupported("f32 values were not prepared"))?;
                let b32 = host.b_f32.as_ref().ok_or(Error::Unsupported("f32 B was not prepared"))?;
                let values = stream.clone_htod(v32).map_err(Error::driver("uploading A values"))?;
                // C column-major M x N is stored as a row-major N x M matrix.
                let c = gpu.zeros::<f32>(n, m).map_err(err("C"))?;
                (Buf::F32(values), Dense::F32(gpu.upload_matrix(b32).map_err(err("B"))?), Dense::F32(c))
            }
            Kind::BsrSpmm { out16 } | Kind::CsrSpmm { out16 } => {
                let values = stream.clone_htod(host.values_f16()).map_err(Error::driver("uploading A values"))?;
                let c = if out16 {
                    Dense::F16(gpu.zeros::<f16>(m, n).map_err(err("C"))?)
                } else {
                    Dense::F32(gpu.zeros::<f32>(m, n).map_err(err("C"))?)
                };
                (Buf::F16(values), Dense::F16(gpu.upload_matrix(host.b).map_err(err("B"))?), c)
            }
        };
        let mut set = DeviceSet { dims: host.dims, row_ptr, col_idx, values, b, c, descr: Descr::None, buffer: None };
        set.describe(self, gpu)?;
        Ok(set)
    }

    /// Queues `C = A @ B` for one input set on the GPU's stream.
    pub fn launch(&self, gpu: &Gpu, set: &mut DeviceSet) -> Result<()> {
        let stream = gpu.stream();
        match &set.descr {
            Descr::Generic { a, b, c } => {
                let buf = set.buffer.as_ref().map_or(0, |s| s.device_ptr(stream).0);
                // SAFETY: the descriptors point into this set's live buffers (created in `describe` from them,
                // destroyed before them); the work buffer has the size cusparseSpMM_bufferSize asked for; alpha
                // and beta are host f32 values matching the f32 compute type.
                unsafe { spmm!(cusparseSpMM(self.handle, *a, *b, *c, set.dims.kind.alg(), buf as *mut c_void)) }
                    .result()
                    .map_err(st("cusparseSpMM"))
            }
            Descr::Legacy(descr) => {
                let (alpha, beta) = (1.0f32, 0.0f32);
                let int = |what, v: usize| Error::fit::<i32>(what, v as u64, "int");
                let Dims { m, n, k, bs, nnz, .. } = set.dims;
                let (mb, kb, n) = (int("mb", m / bs)?, int("kb", k / bs)?, int("n", n)?);
                let (nnzb, bs) = (int("nnzb", nnz)?, int("bs", bs)?);
                let (Buf::F32(vals), Dense::F32(b), Dense::F32(c)) = (&set.values, &set.b, &mut set.c) else {
                    return Err(Error::Unsupported("bsrmm needs f32 operands"));
                };
                let (ldb, ldc) = (int("ldb", b.ld())?, int("ldc", c.ld())?);
                let (pv, _g1) = vals.device_ptr(stream);
                let (pr, _g2) = set.row_ptr.device_ptr(stream);
                let (pc_idx, _g3) = set.col_idx.device_ptr(stream);
                let (pb, _g4) = b.as_slice().device_ptr(stream);
                let mut c_view = c.as_view_mut();
                let (pc, _g5) = c_view.device_ptr_mut(stream);
                // SAFETY: mb * bs = M, kb * bs = K; row offsets (mb + 1), column indices and values (nnzb blocks
                // of bs^2, row-major: DIRECTION_ROW) were uploaded whole from a valid Bsr; B is the row-major K x N
                // matrix, i.e. column-major N x K with ldb >= N, read transposed (op(B) = B^T, K x N); C is
                // column-major M x N with ldc >= M; alpha and beta are host f32 values.
                unsafe {
                    sys::cusparseSbsrmm(
                        self.handle,
                        sys::cusparseDirection_t::CUSPARSE_DIRECTION_ROW,
                        sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE,
                        sys::cusparseOperation_t::CUSPARSE_OPERATION_TRANSPOSE,
                        mb,
                        n,
                        kb,
                        nnzb,
                        &alpha,
                        *descr,
                        pv as *const f32,
                        pr as *const i32,
                        pc_idx as *const i32,
                        bs,
                        pb as *const f32,
                        ldb,
                        &beta,
                        pc as *mut f32,
                        ldc,
                    )
                }
                .result()
                .map_err(st("cusparseSbsrmm"))
            }
            Descr::None => Err(Error::Unsupported("descriptors were not created")),
        }
    }
}

impl Drop for Cusparse {
    fn drop(&mut self) {
        // SAFETY: created by cusparseCreate, destroyed once; errors ignored (Drop never panics).
        let _ = unsafe { sys::cusparseDestroy(self.handle) };
    }
}

/// The error of cuSPARSE entry point `call`.
fn st(call: &'static str) -> impl FnOnce(CusparseError) -> Error {
    move |status| Error::Cusparse { call, status }
}

/// libcusparse, as cudarc opens it.
const LIB: Library = library!(sys, "libcusparse", "libcusparse.so.12 or .13");

impl Kind {
    fn alg(self) -> sys::cusparseSpMMAlg_t {
        match self {
            Kind::BsrSpmm { .. } => sys::cusparseSpMMAlg_t::CUSPARSE_SPMM_BSR_ALG1,
            _ => sys::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT,
        }
    }
}

/// The kind and the sizes of one case's operands, on the host and on the device.
#[derive(Clone, Copy, Debug)]
struct Dims {
    kind: Kind,
    m: usize,
    n: usize,
    k: usize,
    bs: usize,
    /// Stored blocks (BSR kinds) or elements (CSR).
    nnz: usize,
}

/// The host operands of one case in the form a [`Kind`] needs, built once and uploaded per input set.
pub struct HostOperands<'a> {
    dims: Dims,
    a: &'a Bsr<f16>,
    b: &'a Matrix<f16>,
    row_ptr: Vec<i32>,
    col_idx: Vec<i32>,
    csr_values: Option<Vec<f16>>,
    values_f32: Option<Vec<f32>>,
    b_f32: Option<Matrix<f32>>,
}

impl<'a> HostOperands<'a> {
    /// Converts A (and B for the f32 kind) for `kind`. Errors when A has no stored block or an index does not
    /// fit cuSPARSE's 32-bit ints.
    pub fn new(kind: Kind, a: &'a Bsr<f16>, b: &'a Matrix<f16>) -> Result<Self> {
        if a.nnzb() == 0 {
            return Err(Error::Unsupported("A has no stored block"));
        }
        let to_i32 = |v: &[u32], what| -> Result<Vec<i32>> {
            v.iter().map(|&x| Error::fit::<i32>(what, x.into(), "int")).collect()
        };
        let dims = Dims { kind, m: a.rows(), n: b.cols(), k: a.cols(), bs: a.block_size(), nnz: a.nnzb() };
        let mut h = HostOperands {
            dims,
            a,
            b,
            row_ptr: Vec::new(),
            col_idx: Vec::new(),
            csr_values: None,
            values_f32: None,
            b_f32: None,
        };
        match kind {
            Kind::BsrSpmm { .. } | Kind::Bsrmm => {
                h.row_ptr = to_i32(a.row_ptr(), "row offset")?;
                h.col_idx = to_i32(a.col_idx(), "block column")?;
                if kind == Kind::Bsrmm {
                    h.values_f32 = Some(a.values().iter().map(|v| v.to_f32()).collect());
                    h.b_f32 = Some(b.convert::<f32>()?);
                }
            }
            Kind::CsrSpmm { .. } => {
                let csr = bsr_to_csr(a)?;
                h.dims.nnz = csr.values.len();
                h.row_ptr = csr.indptr;
                h.col_idx = csr.indices;
                h.csr_values = Some(csr.values);
            }
        }
        Ok(h)
    }

    fn values_f16(&self) -> &[f16] {
        self.csr_values.as_deref().unwrap_or(self.a.values())
    }

    /// Device bytes of one input set (A's arrays, B and C), for the rotation count.
    pub fn set_bytes(&self) -> usize {
        let Dims { kind, m, n, k, .. } = self.dims;
        let (val, b, c) = match kind {
            Kind::Bsrmm => (4 * self.a.values().len(), 4 * k * n, 4 * m * n),
            Kind::BsrSpmm { out16 } | Kind::CsrSpmm { out16 } => {
                (2 * self.values_f16().len(), 2 * k * n, if out16 { 2 } else { 4 } * m * n)
            }
        };
        val + 4 * (self.row_ptr.len() + self.col_idx.len()) + b + c
    }
}

/// A CSR matrix with 32-bit indices.
pub struct Csr {
    /// Row offsets (rows + 1).
    pub indptr: Vec<i32>,
    /// Column of each stored element, increasing within a row.
    pub indices: Vec<i32>,
    /// The stored elements.
    pub values: Vec<f16>,
}

/// A BSR matrix as CSR with every element of every stored block (zeros included).
pub fn bsr_to_csr(a: &Bsr<f16>) -> Result<Csr> {
    let bs = a.block_size();
    let nnz = a.nnzb() * bs * bs;
    if nnz > i32::MAX as usize || a.cols() > i32::MAX as usize {
        let (what, value) = if nnz > i32::MAX as usize { ("A's elements", nnz) } else { ("A's columns", a.cols()) };
        return Err(Error::TooLarge { what, value: value as u64, limit: "CSR's 32-bit indices" });
    }
    let mut indptr = Vec::with_capacity(a.rows() + 1);
    let mut indices = Vec::with_capacity(nnz);
    let mut values = Vec::with_capacity(nnz);
    indptr.push(0i32);
    for br in 0..a.block_rows() {
        let range = a.block_row_range(br);
        for rr in 0..bs {
            for i in range.clone() {
                let c0 = a.col_idx()[i] as usize * bs;
                let blk = &a.values()[i * bs * bs..(i + 1) * bs * bs];
                for (kk, &v) in blk[rr * bs..(rr + 1) * bs].iter().enumerate() {
                    indices.push((c0 + kk) as i32);
                    values.push(v);
                }
            }
            indptr.push(values.len() as i32);
        }
    }
    Ok(Csr { indptr, indices, values })
}

/// A device buffer of A's values.
enum Buf {
    F16(CudaSlice<f16>),
    F32(CudaSlice<f32>),
}

/// A dense device matrix in either precision.
enum Dense {
    F16(DeviceMatrix<f16>),
    F32(DeviceMatrix<f32>),
}

impl Dense {
    fn ptr(&self, stream: &cudarc::driver::CudaStream) -> u64 {
        match self {
            Dense::F16(m) => m.as_slice().device_ptr(stream).0,
            Dense::F32(m) => m.as_slice().device_ptr(stream).0,
        }
    }
    fn dims(&self) -> (usize, usize, usize) {
        match self {
            Dense::F16(m) => (m.rows(), m.cols(), m.ld()),
            Dense::F32(m) => (m.rows(), m.cols(), m.ld()),
        }
    }
    fn dtype(&self) -> sys::cudaDataType_t {
        match self {
            Dense::F16(_) => sys::cudaDataType_t::CUDA_R_16F,
            Dense::F32(_) => sys::cudaDataType_t::CUDA_R_32F,
        }
    }
}

enum Descr {
    None,
    Generic { a: sys::cusparseSpMatDescr_t, b: sys::cusparseDnMatDescr_t, c: sys::cusparseDnMatDescr_t },
    Legacy(sys::cusparseMatDescr_t),
}

/// C of one set, downloaded: row-major M x N, or (`transposed`) column-major, i.e. the row-major N x M C^T.
pub enum HostC {
    /// f32 C.
    F32 {
        /// The matrix as stored.
        m: Matrix<f32>,
        /// Whether `m` is C^T.
        transposed: bool,
    },
    /// f16 C (row-major).
    F16(Matrix<f16>),
}

/// One input set on the device with its descriptors. Dropping it destroys the descriptors before the buffers.
pub struct DeviceSet {
    dims: Dims,
    row_ptr: CudaSlice<i32>,
    col_idx: CudaSlice<i32>,
    values: Buf,
    b: Dense,
    c: Dense,
    descr: Descr,
    buffer: Option<CudaSlice<u8>>,
}

impl DeviceSet {
    /// Creates the descriptors (and sizes the work buffer) for this set's buffers.
    fn describe(&mut self, lib: &Cusparse, gpu: &Gpu) -> Result<()> {
        let stream = gpu.stream();
        let Dims { kind, m, k, bs, nnz, .. } = self.dims;
        if kind == Kind::Bsrmm {
            let mut d: sys::cusparseMatDescr_t = std::ptr::null_mut();
            // SAFETY: writes a new descriptor (general matrix, zero-based: the defaults bsrmm needs).
            unsafe { sys::cusparseCreateMatDescr(&mut d) }.result().map_err(st("cusparseCreateMatDescr"))?;
            self.descr = Descr::Legacy(d);
            return Ok(());
        }
        let i64_of = |v: usize| v as i64;
        // What the BSR and the CSR descriptor share: the stored entries (blocks or elements), the three arrays
        // (row offsets, column indices, f16 values), 32-bit zero-based indices.
        let (nnz, values) = (i64_of(nnz), sys::cudaDataType_t::CUDA_R_16F);
        let [pr, pc, pv] = [
            self.row_ptr.device_ptr(stream).0,
            self.col_idx.device_ptr(stream).0,
            match &self.values {
                Buf::F16(v) => v.device_ptr(stream).0,
                Buf::F32(v) => v.device_ptr(stream).0,
            },
        ]
        .map(|p| p as *mut c_void);
        let idx = sys::cusparseIndexType_t::CUSPARSE_INDEX_32I;
        let base = sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO;
        let mut a: sys::cusparseSpMatDescr_t = std::ptr::null_mut();
        // SAFETY: the arrays are this set's device buffers, which outlive the descriptor (destroyed in Drop
        // first); shapes and counts are those of the uploaded, validated matrix.
        let status = unsafe {
            match kind {
                Kind::BsrSpmm { .. } => {
                    let (mb, kb, bs) = (i64_of(m / bs), i64_of(k / bs), i64_of(bs));
                    let order = sys::cusparseOrder_t::CUSPARSE_ORDER_ROW;
                    sys::cusparseCreateBsr(&mut a, mb, kb, nnz, bs, bs, pr, pc, pv, idx, idx, base, values, order)
                }
                _ => sys::cusparseCreateCsr(&mut a, i64_of(m), i64_of(k), nnz, pr, pc, pv, idx, idx, base, values),
            }
        };
        status.result().map_err(st("cusparseCreateBsr/Csr"))?;
        // Record the descriptor at once so Drop destroys it if a later step fails.
        self.descr = Descr::Generic { a, b: std::ptr::null_mut(), c: std::ptr::null_mut() };
        let dn = |m: &Dense| -> Result<sys::cusparseDnMatDescr_t> {
            let (rows, cols, ld) = m.dims();
            let mut d: sys::cusparseDnMatDescr_t = std::ptr::null_mut();
            // SAFETY: the buffer is this set's and holds rows x cols row-major with leading dimension ld.
            unsafe {
                sys::cusparseCreateDnMat(
                    &mut d,
                    i64_of(rows),
                    i64_of(cols),
                    i64_of(ld),
                    m.ptr(stream) as *mut c_void,
                    m.dtype(),
                    sys::cusparseOrder_t::CUSPARSE_ORDER_ROW,
                )
            }
            .result()
            .map_err(st("cusparseCreateDnMat"))?;
            Ok(d)
        };
        let b = dn(&self.b)?;
        if let Descr::Generic { b: slot, .. } = &mut self.descr {
            *slot = b;
        }
        let c = dn(&self.c)?;
        if let Descr::Generic { c: slot, .. } = &mut self.descr {
            *slot = c;
        }
        let mut size = 0usize;
        // SAFETY: valid descriptors; writes one usize.
        unsafe { spmm!(cusparseSpMM_bufferSize(lib.handle, a, b, c, kind.alg(), &mut size)) }
            .result()
            .map_err(st("cusparseSpMM_bufferSize"))?;
        if size > 0 {
            self.buffer = Some(stream.alloc_zeros::<u8>(size).map_err(|source| Error::Alloc {
                what: "cuSPARSE's work buffer".into(),
                bytes: size as u64,
                source,
            })?);
        }
        Ok(())
    }

    /// The kind this set runs.
    pub fn kind(&self) -> Kind {
        self.dims.kind
    }

    /// Fills C with a poison pattern (see [`poison`]).
    pub fn poison_c(&mut self, gpu: &Gpu) -> Result<()> {
        match &mut self.c {
            Dense::F16(m) => poison(gpu, m.as_view_mut()),
            Dense::F32(m) => poison(gpu, m.as_view_mut()),
        }
    }

    /// Downloads C (waits for the stream).
    pub fn output(&self) -> Result<HostC> {
        let transposed = self.dims.kind == Kind::Bsrmm;
        match &self.c {
            Dense::F16(m) => m.to_host().map(HostC::F16),
            Dense::F32(m) => m.to_host().map(|m| HostC::F32 { m, transposed }),
        }
        .map_err(Error::step("downloading C"))
    }
}

impl Drop for DeviceSet {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once by cuSPARSE and is destroyed once, before the buffers it
        // points into (fields drop after this); null slots were never created. Errors are ignored.
        unsafe {
            match std::mem::replace(&mut self.descr, Descr::None) {
                Descr::None => {}
                Descr::Legacy(d) => {
                    let _ = sys::cusparseDestroyMatDescr(d);
                }
                Descr::Generic { a, b, c } => {
                    if !c.is_null() {
                        let _ = sys::cusparseDestroyDnMat(c as sys::cusparseConstDnMatDescr_t);
                    }
                    if !b.is_null() {
                        let _ = sys::cusparseDestroyDnMat(b as sys::cusparseConstDnMatDescr_t);
                    }
                    if !a.is_null() {
                        let _ = sys::cusparseDestroySpMat(a as sys::cusparseConstSpMatDescr_t);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparsek::format::{Pattern, generate};

    #[test]
    fn kinds_round_trip_by_name() {
        for k in Kind::AUTO {
            assert_eq!(Kind::parse(k.name()), Some(k));
        }
        assert_eq!(Kind::parse("nope"), None);
        assert!(Kind::BsrSpmm { out16: true }.out_is_f16() && !Kind::Bsrmm.out_is_f16());
    }

    #[test]
    fn csr_conversion_matches_dense() {
        for bs in [16, 32] {
            let a = generate::<f16>(Pattern::Skewed, 128, 96, bs, 0.4, 3).unwrap();
            let Csr { indptr, indices, values } = bsr_to_csr(&a).unwrap();
            let dense = a.to_dense().unwrap();
            assert_eq!(indptr.len(), a.rows() + 1);
            assert_eq!(values.len(), a.nnzb() * bs * bs);
            let mut seen = 0;
            for r in 0..a.rows() {
                let (s, e) = (indptr[r] as usize, indptr[r + 1] as usize);
                assert!(indices[s..e].windows(2).all(|w| w[0] < w[1]), "row {r} sorted");
                for i in s..e {
                    assert_eq!(values[i], dense.get(r, indices[i] as usize));
                    seen += 1;
                }
                // Everything outside the stored columns is zero in the dense matrix.
                let nz = (0..a.cols()).filter(|&c| dense.get(r, c) != f16::ZERO).count();
                assert!(nz <= e - s);
            }
            assert_eq!(seen, values.len());
        }
    }
}
