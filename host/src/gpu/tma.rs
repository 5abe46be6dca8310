//! Tensor maps for the sm_90a kernels (`layout::HopperSpmmParams`): encoded on the host by
//! `cuTensorMapEncodeTiled` for each launch (a map embeds the operand's address; encoding is a host-only call of
//! about a microsecond, no allocation, no synchronisation, so the launch stays graph-capturable).
//!
//! Facts (../shared/HOPPER.md): rank 2 (3 for B in 64-column chunks, 4 for C), innermost dimension first, strides
//! in bytes (multiples of 16), 128-byte swizzle (a box row is at most 128 bytes: 64 16-bit elements), boxes of at
//! most 256 rows, elements outside the tensor read as zero (loads) or not written (stores; but a store writes a
//! row's last 16-byte unit whole: `layout::c_map_columns`).

use cudarc::driver::sys::{
    CUresult, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave, CUtensorMapL2promotion,
    CUtensorMapSwizzle, cuTensorMapEncodeTiled,
};
use sparsek_layout::{InType, KernelConfig, Layout, OUT_STAGE_BYTES, OutType, TensorMap, c_map_columns};

use crate::error::{Error, Result};

/// K columns of a stage (one 128-byte swizzle row of 16-bit elements).
const BK: u64 = 64;

/// A 2-D row-major tensor of 16-bit elements: `rows x cols` at `ptr`, `ld` elements between rows, read in boxes
/// of `box_rows x box_cols`.
fn encode(
    what: &'static str,
    input: InType,
    ptr: u64,
    (rows, cols, ld): (u64, u64, u64),
    (box_rows, box_cols): (u32, u32),
) -> Result<TensorMap> {
    encode_nd(what, Element::In(input), ptr, [cols, rows, 1, 1], [ld * 2, 0, 0], [box_cols, box_rows, 1, 1], 2)
}

/// The element type of a tensor map.
#[derive(Clone, Copy)]
enum Element {
    In(InType),
    Out(OutType),
}

/// A tensor of `element`s of rank `rank` (2 to 4; the arrays' entries past it are unused): `dims` elements
/// per dimension and `strides` bytes between the steps of dimensions 1.., innermost first, read or written in
/// boxes of `boxes`.
fn encode_nd(
    what: &'static str,
    element: Element,
    ptr: u64,
    dims: [u64; 4],
    strides: [u64; 3],
    boxes: [u32; 4],
    rank: u32,
) -> Result<TensorMap> {
    let invalid = |reason: String| Error::InvalidArgument { name: what, reason };
    if dims.iter().any(|&d| d == 0 || d > 1 << 32) {
        let shape = dims[..rank as usize].iter().map(u64::to_string).collect::<Vec<_>>().join(" x ");
        return Err(invalid(format!("a tensor of {shape} elements is outside what a TMA tensor map describes")));
    }
    let data_type = match element {
        Element::In(InType::F16) | Element::Out(OutType::F16) => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        Element::In(InType::Bf16) | Element::Out(OutType::Bf16) => {
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
        }
        Element::Out(OutType::F32) => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let (global_dim, global_strides, box_dim) = (dims, strides, boxes);
    let element_strides = [1u32, 1, 1, 1];
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: every array has at least the rank's length (and rank - 1 for the strides); the driver only reads
    // them and writes the 128-byte map. The address is not dereferenced here.
    let r = unsafe {
        cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            rank,
            ptr as *mut std::ffi::c_void,
            global_dim.as_ptr(),
            global_strides.as_ptr(),
            box_dim.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != CUresult::CUDA_SUCCESS {
        return Err(Error::Cuda { op: "cuTensorMapEncodeTiled", source: cudarc::driver::DriverError(r) });
    }
    // SAFETY: initialised by the successful call (and zeroed before).
    let map = unsafe { map.assume_init() };
    Ok(TensorMap(map.opaque))
}

/// The tensor map of A's values for a kernel of configuration `cfg`: the `nnzb` blocks as one row-major
/// `(nnzb * bs) x bs` matrix, boxes of `bs x 64`.
pub(crate) fn a_values_map(input: InType, values: u64, nnzb: usize, cfg: &KernelConfig) -> Result<TensorMap> {
    let bs = u64::from(cfg.bs);
    encode("A's values", input, values, ((nnzb as u64) * bs, bs, bs), (cfg.bs, BK as u32))
}

/// The tensor map of A's values for the sm_90a A^T @ B kernels: the `nnzb` blocks as one row-major `(nnzb * bs) x
/// bs` matrix, boxes of 64 rows x 64 columns (a stored block's k-tile of A^T is 64 of its rows, staged as they are
/// and read MN-major, `bs / 64` boxes).
pub(crate) fn a_values_t_map(input: InType, values: u64, nnzb: usize, bs: usize) -> Result<TensorMap> {
    let bs = bs as u64;
    encode("A's values", input, values, ((nnzb as u64) * bs, bs, bs), (BK as u32, BK as u32))
}

/// The tensor map of an sm_90a SDDMM operand: X (`m x k`) or Y (`n x k`), `rows x k` in its own storage order,
/// `ld` elements between rows (row-major) or columns (column-major), read a block's `bs` rows at a time. Row-major
/// (K-major), boxes of `bs` rows x 64 k (as A's values for the forward); column-major (stored `k x rows`), boxes of
/// 64 k x 64 rows (MN-major, `bs / 64` per block and k-tile).
pub(crate) fn dense_k_map(
    what: &'static str,
    input: InType,
    (ptr, layout, ld): (u64, Layout, usize),
    (rows, k): (usize, usize),
    bs: u32,
) -> Result<TensorMap> {
    let (rows, k, ld) = (rows as u64, k as u64, ld as u64);
    match layout {
        Layout::RowMajor => encode(what, input, ptr, (rows, k, ld), (bs, BK as u32)),
        Layout::ColMajor => encode(what, input, ptr, (k, rows, ld), (BK as u32, BK as u32)),
    }
}

/// The tensor map of B (`k x n`): row-major with `n` a multiple of 64, rank 3 (64 columns x `k` rows x `n / 64`
/// chunks of 64 columns), boxes of 64 x 64 k-rows x BN / 64 chunks, one copy per stage; other row-major B, boxes
/// of 64 k-rows x 64 columns; column-major (stored `n x k`), boxes of BN columns x 64 k. The kernel applies the
/// same rule (`layout::HopperSpmmParams::tmap_b`).
pub(crate) fn b_map(
    input: InType,
    (ptr, layout, ld): (u64, Layout, usize),
    (k, n): (usize, usize),
    cfg: &KernelConfig,
) -> Result<TensorMap> {
    let (k, n, ld) = (k as u64, n as u64, ld as u64);
    match layout {
        Layout::RowMajor if n.is_multiple_of(64) => {
            let (dims, boxes) = ([64, k, n / 64, 1], [64, BK as u32, cfg.bn / 64, 1]);
            encode_nd("B", Element::In(input), ptr, dims, [ld * 2, 128, 0], boxes, 3)
        }
        Layout::RowMajor => encode("B", input, ptr, (k, n, ld), (BK as u32, 64)),
        Layout::ColMajor => encode("B", input, ptr, (n, k, ld), (cfg.bn, BK as u32)),
    }
}

/// The tensor map of C (`m x n` in `layout`, leading dimension `ld`) of `out` elements for a launch whose plan
/// stores C by TMA (`c_tma`), or `None` where it does not or a row-major C has no whole 16 bytes in a row
/// ([`c_map`], [`c_map_col_major`]).
pub(crate) fn staged_c_map(
    c_tma: bool,
    (out, ptr, layout): (OutType, u64, Layout),
    shape: (usize, u32, usize),
) -> Result<Option<TensorMap>> {
    match (c_tma, layout) {
        (false, _) => Ok(None),
        (true, Layout::RowMajor) => c_map(out, ptr, shape),
        (true, Layout::ColMajor) => c_map_col_major(out, ptr, shape).map(Some),
    }
}

/// The tensor map of a column-major C (`m x n`, `ld` elements between columns) of 16-bit `out` elements for the
/// sm_90a kernels' transposed stores (kernels-gpu/src/sm90/store.rs `stage_chunk_t`): rank 2, (C's rows, C's
/// columns), i.e. C^T row-major, boxes of 64 rows (128 bytes) x 64 columns (one staging buffer of
/// `OUT_STAGE_BYTES`), 128-byte swizzle. Every row of a box lies in C (the kernels' tiles are whole blocks of 64 or
/// 128 rows), and its columns past `n` are not written, so every column is in the map.
fn c_map_col_major(out: OutType, ptr: u64, (m, n, ld): (usize, u32, usize)) -> Result<TensorMap> {
    debug_assert!(out != OutType::F32, "only a 16-bit column-major C is staged");
    debug_assert_eq!(OUT_STAGE_BYTES, 64 * 128);
    let (dims, strides) = ([m as u64, u64::from(n), 1, 1], [ld as u64 * 2, 0, 0]);
    encode_nd("C", Element::Out(out), ptr, dims, strides, [64, 64, 1, 1], 2)
}

/// The tensor map of a row-major C (`m x n`, `ld` elements between rows) of `out` elements for the sm_90a kernels'
/// stores (`layout::HopperSpmmParams::tmap_c`), or `None` when C has no whole 16 bytes in a row: the map covers
/// `layout::c_map_columns` columns (a TMA store writes whole 16-byte units, so a map ending mid-unit would let it
/// write the padding after a row; the kernels store the last few columns from their registers), boxes of 64 rows x
/// 128 bytes (one staging buffer of `OUT_STAGE_BYTES`), 128-byte swizzle; elements of a box outside the map are
/// not written.
///
/// Rank 4, so that a box's rows lie in shared memory in the order 0, 4, 1, 5, 2, 6, 3, 7 within each group of 8:
/// (columns, row bit 2, row bits 0-1, row / 8), strides 4 rows, 1 row, 8 rows. The kernels' 64-bit staging stores
/// are served per half-warp, whose lanes hold rows 0-3 (or 4-7) of a group; in this order those rows' swizzle
/// patterns (line mod 8: 0, 2, 4, 6 or 1, 3, 5, 7) spread each half-warp over all eight 16-byte units of a line,
/// where plain row order reached only four (two wavefronts per store instead of one: docs/perf-notes.md,
/// "Hopper", step 14).
fn c_map(out: OutType, ptr: u64, (m, n, ld): (usize, u32, usize)) -> Result<Option<TensorMap>> {
    let bytes: u64 = if out == OutType::F32 { 4 } else { 2 };
    let cols = u64::from(c_map_columns(n, bytes as u32));
    if cols == 0 {
        return Ok(None);
    }
    let row = ld as u64 * bytes;
    let box_cols = (128 / bytes) as u32;
    debug_assert_eq!(OUT_STAGE_BYTES, 64 * 128);
    debug_assert!(m.is_multiple_of(8), "C's rows are whole blocks");
    let (dims, strides) = ([cols, 2, 4, m as u64 / 8], [4 * row, row, 8 * row]);
    encode_nd("C", Element::Out(out), ptr, dims, strides, [box_cols, 2, 4, 8], 4).map(Some)
}
