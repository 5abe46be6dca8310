//! The kernels' parameter structs (`#[repr(C)]`, passed by value as a kernel's one argument) and the index math
//! of the work decompositions they describe: split rows, the flat block list, the sm_90a virtual rows.

/// The parameters of every [`Op::BsrSpmm`](crate::Op::BsrSpmm) kernel, passed by value as the kernel's one argument (a `.param`
/// struct). Pointers are device addresses (`CUdeviceptr`); the kernel casts them to its element types.
///
/// The kernel computes `C = act(alpha * (A @ B) + bias) + beta * C` (bias per row of C, i.e. per row of A; C not
/// read when `beta == 0`), accumulating in f32.
///
/// Preconditions (the host launcher checks what it can before every launch; the rest is the contract of the
/// caller's structure): `row_ptr`/`col_idx` hold a valid BSR structure of `block_rows` block rows (32- or 64-bit
/// entries per `index64`, every value below 2^32); `row_order` is 0 or a permutation of the block rows (u32);
/// `b` and `c` are 16-byte aligned with leading dimensions that are multiples of 16 bytes, B holding `K` rows of
/// `ldb >= n` elements (row-major kernels) or `n` rows of `ldb >= K` elements (column-major kernels), C holding
/// `M` rows of `ldc >= n` (`c_col_major == 0`) or `n` rows of `ldc >= M` elements; `bias` is 0 or `M` elements of
/// the input type; `n >= 1`; the grid is 1-D with `block_rows * ceil(n / BN)` CTAs of
/// [`KernelConfig::threads`](crate::KernelConfig::threads) threads and [`KernelConfig::smem_bytes`](crate::KernelConfig::smem_bytes) of dynamic shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BsrSpmmParams {
    /// A's values: `nnzb` blocks of `bs * bs` elements of the input type, each row-major.
    pub a_values: u64,
    /// A's block-row pointers: `block_rows + 1` u32 or u64 (`index64`).
    pub row_ptr: u64,
    /// A's block-column indices: `nnzb` u32 or u64 (`index64`).
    pub col_idx: u64,
    /// Block rows in the order the CTAs take them (longest first): `block_rows` u32; 0 = natural order.
    pub row_order: u64,
    /// B: `K x n` of the input type, row-major or column-major (the kernel's [`Variant::b_layout`](crate::Variant::b_layout)).
    pub b: u64,
    /// C: `M x n` f32, f16 or bf16 (the kernel's [`OutType`](crate::OutType)), row- or column-major (`c_col_major`).
    pub c: u64,
    /// The bias: `M` elements of the input type, added per row of C; 0 = no bias.
    pub bias: u64,
    /// B's leading dimension in elements.
    pub ldb: u32,
    /// C's leading dimension in elements.
    pub ldc: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Block rows of A (`M / bs`).
    pub block_rows: u32,
    /// Rasterization group, in block rows (see [`raster`](crate::raster)).
    pub group_rows: u32,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of the old C (0: C is not read).
    pub beta: f32,
    /// 1: `row_ptr` and `col_idx` hold 64-bit entries (PyTorch's int64); 0: 32-bit.
    pub index64: u32,
    /// 1: C is column-major; 0: row-major.
    pub c_col_major: u32,
    /// The epilogue's [`Activation`](crate::Activation), as its code.
    pub activation: u32,
    /// Split rows ([`KernelConfig::splits_rows`](crate::KernelConfig::splits_rows) kernels only; 1 everywhere else): the most CTAs a block row is
    /// split into. The grid has `block_rows * split_chunks * n_tiles` CTAs; row `r` of `len` blocks is split into
    /// [`split_parts`]`(len, split_blocks, split_chunks)` equal ranges of consecutive blocks, one CTA each, and the
    /// CTAs beyond that exit at once. A row of one part is computed as without a split.
    pub split_chunks: u32,
    /// Split rows: the blocks a part should hold (at least 1).
    pub split_blocks: u32,
    /// Split rows: the partial tiles, f32, [`split_slot`] by [`KernelConfig::split_slot_bytes`](crate::KernelConfig::split_slot_bytes) bytes each, for
    /// `n_tiles` N tiles; 0 when `split_chunks` is 1.
    pub split_partials: u64,
    /// Split rows: one u32 counter per (block row, N tile), `block_rows * n_tiles`, zero before the launch; the
    /// CTA that finishes a row's tile last adds the parts in order, writes C and sets the counter back to zero.
    pub split_counters: u64,
    /// The flat block list ([`Tile::Flat`](crate::Tile::Flat) kernels only; 0 everywhere else): `G`, the CTAs per N tile. The grid
    /// has `G * n_tiles` CTAs; CTA `c` of N tile `t` (`blockIdx.x = t * G + c`) multiplies the blocks
    /// [`flat_range`]`(c)` of A's flat block list, across row boundaries, with one ring. A row cut by a range
    /// boundary is summed from its pieces through the split workspace (`split_partials`: two
    /// [`KernelConfig::split_slot_bytes`](crate::KernelConfig::split_slot_bytes) slots per CTA and N tile, [`flat_slot`]; `split_counters`: one per CTA and
    /// N tile, [`flat_counter`], zero before the launch). Needs `1 <= G <= nnzb`, so every CTA holds a block.
    pub flat_ctas: u32,
    /// A's nonzero blocks, `row_ptr[block_rows]` (the flat block list cuts it without a load).
    pub nnzb: u32,
    /// [`Op::BsrSpmmT`](crate::Op::BsrSpmmT) kernels only (0 everywhere else): the transposed index's permutation,
    /// `nnzb` u32 entries, entry `j` the stored block of A that is block `j` of A^T (whose structure `row_ptr` and
    /// `col_idx` then hold: A's block-column pointers and block rows, 32-bit).
    pub perm: u64,
    /// [`Op::Sddmm`](crate::Op::Sddmm) kernels only (0 everywhere else): K, the length of the reduced dimension (the
    /// token count of a weight gradient).
    pub k: u32,
    /// [`Op::Sddmm`](crate::Op::Sddmm) kernels only: X's leading dimension in elements (`a_values` is X there).
    pub lda: u32,
    /// The sm_90a SDDMM kernels only (0 everywhere else, and 0 there for none): the structure's tile list,
    /// `sddmm_tiles` entries of two u32 each, `(block row, g)` with bit 31 of `g` marking a row's last entry: tile
    /// `t` is the group of up to `G = bn / bs` stored blocks from the row's block `g * G` (see
    /// [`sddmm_tile_list`]). Without it the tiles are indexed by their first stored block.
    pub sddmm_list: u64,
    /// Entries of `sddmm_list` (the launch's tiles where it is set).
    pub sddmm_tiles: u32,
    /// Launch flags: [`SPMM_WAIT_FIRST`], or 0.
    pub flags: u32,
}

/// [`BsrSpmmParams::flags`]: the kernel waits for the grid before it on the stream (`griddepcontrol.wait`) before
/// it reads anything, A included. A launch with programmatic serialization then only starts its CTAs under that
/// grid's tail, which needs no promise from the caller; without this flag a programmatic launch reads A's values
/// and indices before its wait (the caller promised the grid before does not write them:
/// `Policy::programmatic`). Read by the product module's forward kernels (the decode, narrow, mid, wide and
/// flat-list entry points); without programmatic serialization the wait returns at once.
pub const SPMM_WAIT_FIRST: u32 = 1;

impl BsrSpmmParams {
    /// Every address 0 (none), every count and dimension 0, alpha 1 and beta 0, no split (`split_chunks` and
    /// `split_blocks` 1): the base a launch's parameters start from (`BsrSpmmParams { a_values, .., ..NONE }`), so
    /// each launcher names only the fields its op reads.
    pub const NONE: BsrSpmmParams = BsrSpmmParams {
        a_values: 0,
        row_ptr: 0,
        col_idx: 0,
        row_order: 0,
        b: 0,
        c: 0,
        bias: 0,
        ldb: 0,
        ldc: 0,
        n: 0,
        block_rows: 0,
        group_rows: 0,
        alpha: 1.0,
        beta: 0.0,
        index64: 0,
        c_col_major: 0,
        activation: 0,
        split_chunks: 1,
        split_blocks: 1,
        split_partials: 0,
        split_counters: 0,
        flat_ctas: 0,
        nnzb: 0,
        perm: 0,
        k: 0,
        lda: 0,
        sddmm_list: 0,
        sddmm_tiles: 0,
        flags: 0,
    };
}

/// Bit 31 of an [`BsrSpmmParams::sddmm_list`] entry's group: the last entry of its block row, whose tile also
/// takes the row's groups past it (none where the list was made of this structure; a list made of other row
/// lengths of the same shape then still covers every block).
pub const SDDMM_LAST_GROUP: u32 = 1 << 31;

/// The sm_90a SDDMM's tile list ([`BsrSpmmParams::sddmm_list`]) for groups of `group` blocks, written to `out`:
/// for each block row of `order` (its length the same position of `lengths`), one entry per group of its
/// blocks, `(row, g)`, at least one per row (an empty row's tile has no work), the last marked with
/// [`SDDMM_LAST_GROUP`]. Every stored block then lies in exactly one entry's group, or, for a list made of other
/// row lengths than the structure's, in a row's last entry's run of groups (the kernel takes the rest of a row
/// there), so the list affects the speed only. Returns the entries written (`out` takes
/// [`sddmm_tile_list_len`] of them).
pub fn sddmm_tile_list(order: &[u32], lengths: &[u32], group: u32, out: &mut [[u32; 2]]) -> usize {
    let mut at = 0;
    for (&row, &len) in order.iter().zip(lengths) {
        let groups = len.div_ceil(group.max(1)).max(1);
        for g in 0..groups {
            if let Some(slot) = out.get_mut(at) {
                *slot = [row, if g + 1 == groups { g | SDDMM_LAST_GROUP } else { g }];
            }
            at += 1;
        }
    }
    at
}

/// Entries of [`sddmm_tile_list`] for these row lengths and groups of `group` blocks.
pub fn sddmm_tile_list_len(lengths: &[u32], group: u32) -> usize {
    lengths.iter().map(|&len| len.div_ceil(group.max(1)).max(1) as usize).sum()
}

/// The flat block list: the blocks `[c * nnzb / ctas, (c + 1) * nnzb / ctas)` of CTA `c` of `ctas`.
#[inline(always)]
pub const fn flat_range(c: u32, ctas: u32, nnzb: u32) -> (u32, u32) {
    let (nnzb, ctas) = (nnzb as u64, ctas as u64);
    ((c as u64 * nnzb / ctas) as u32, ((c as u64 + 1) * nnzb / ctas) as u32)
}

/// The flat block list: the CTA of `ctas` whose [`flat_range`] holds block `blk` (< `nnzb`, `1 <= ctas <=
/// nnzb`): the largest `c` with `c * nnzb / ctas <= blk`, which is `ceil((blk + 1) * ctas / nnzb) - 1`.
#[inline(always)]
pub const fn flat_cta_of(blk: u32, ctas: u32, nnzb: u32) -> u32 {
    ((blk as u64 + 1) * ctas as u64).div_ceil(nnzb as u64) as u32 - 1
}

/// The flat block list: the partial-tile slot of CTA `cta`'s piece of a cut row in N tile `n_tile` of `n_tiles`:
/// `tail` for the piece that starts a row (piece 0, in the row's first CTA), else the piece that continues a row
/// begun by an earlier CTA (every CTA has at most one of each). Below `2 * ctas * n_tiles`.
#[inline(always)]
pub const fn flat_slot(cta: u32, tail: bool, n_tile: u32, n_tiles: u32) -> u64 {
    (cta as u64 * 2 + tail as u64) * n_tiles as u64 + n_tile as u64
}

/// The flat block list: the counter of the cut row whose first piece CTA `cta` holds (each CTA starts at most
/// one cut row), in N tile `n_tile` of `n_tiles`. Below `ctas * n_tiles`.
#[inline(always)]
pub const fn flat_counter(cta: u32, n_tile: u32, n_tiles: u32) -> u64 {
    cta as u64 * n_tiles as u64 + n_tile as u64
}

/// Split rows on the sm_90a kernels: the rows of tiles a launch walks, `block_rows` plus `split_chunks - 1` more for
/// each of the first `split_rows` positions of the row order ([`HopperSpmmParams::split_rows`]).
#[inline(always)]
pub const fn hopper_virtual_rows(block_rows: u32, split_rows: u32, split_chunks: u32) -> u32 {
    block_rows + split_rows * split_chunks.saturating_sub(1)
}

/// Split rows on the sm_90a kernels: virtual row `vpos` (of [`hopper_virtual_rows`]) as (position in the row order,
/// part, split?): the first `split_rows * split_chunks` are `split_chunks` consecutive parts of each of the first
/// `split_rows` positions, the rest the other positions whole.
#[inline(always)]
pub const fn hopper_virtual_row(vpos: u32, split_rows: u32, split_chunks: u32) -> (u32, u32, bool) {
    let prefix = split_rows * split_chunks;
    if vpos < prefix {
        match (vpos.checked_div(split_chunks), vpos.checked_rem(split_chunks)) {
            (Some(pos), Some(part)) => (pos, part, true),
            _ => (vpos, 0, false),
        }
    } else {
        (vpos - prefix + split_rows, 0, false)
    }
}

/// Split rows on the sm_90a kernels: the counter of consumer warp `warp` (of `tile_warps`) of position `pos`'s
/// N tile `n_tile` (of `n_tiles`), below `split_rows * n_tiles * tile_warps`.
#[inline(always)]
pub const fn hopper_split_counter(pos: u32, n_tile: u32, n_tiles: u32, warp: u32, tile_warps: u32) -> u64 {
    (pos as u64 * n_tiles as u64 + n_tile as u64) * tile_warps as u64 + warp as u64
}

/// Split rows on the sm_90a kernels: the partial-tile slot of part `part` (of `split_chunks`) of position `pos` (of
/// the `split_rows` split ones) in N tile `n_tile` (of `n_tiles`), below `split_rows * split_chunks * n_tiles`.
#[inline(always)]
pub const fn hopper_split_slot(pos: u32, part: u32, split_chunks: u32, n_tile: u32, n_tiles: u32) -> u64 {
    (pos as u64 * split_chunks as u64 + part as u64) * n_tiles as u64 + n_tile as u64
}

/// Split rows: the parts of a block row of `len` blocks, `ceil(len / split_blocks)` clamped to
/// `1..=split_chunks`.
#[inline(always)]
pub const fn split_parts(len: u32, split_blocks: u32, split_chunks: u32) -> u32 {
    let parts = match len.checked_div(split_blocks) {
        Some(q) => q + !len.is_multiple_of(split_blocks) as u32,
        None => 1,
    };
    if parts < 1 {
        1
    } else if parts > split_chunks {
        split_chunks
    } else {
        parts
    }
}

/// Split rows: the partial-tile slot of part `part` of block row `block_row`, whose first block is `row_begin`,
/// in N tile `n_tile` of `n_tiles`: `(row_begin / split_blocks + block_row + part) * n_tiles + n_tile`. Distinct
/// for every (row, part, tile), and below [`split_slots`]`(nnzb, block_rows, split_blocks, n_tiles)`: a row of
/// `len` blocks has at most `ceil(len / split_blocks)` parts, and `floor((b + len) / c) - floor(b / c) + 1 >=
/// ceil(len / c)`.
#[inline(always)]
pub const fn split_slot(
    row_begin: u32,
    block_row: u32,
    part: u32,
    split_blocks: u32,
    n_tile: u32,
    n_tiles: u32,
) -> u64 {
    let base = match row_begin.checked_div(split_blocks) {
        Some(q) => q as u64,
        None => 0,
    };
    (base + block_row as u64 + part as u64) * n_tiles as u64 + n_tile as u64
}

/// Split rows: the partial-tile slots a launch needs, `(nnzb / split_blocks + block_rows) * n_tiles`.
pub const fn split_slots(nnzb: u64, block_rows: u64, split_blocks: u64, n_tiles: u64) -> u64 {
    let per_tile = match nnzb.checked_div(split_blocks) {
        Some(q) => q,
        None => 0,
    };
    (per_tile + block_rows) * n_tiles
}

/// A CUDA tensor map (`CUtensorMap`, 128 opaque bytes encoded by `cuTensorMapEncodeTiled`) passed by value in a
/// kernel's parameters. Rust cannot pass a 64-byte aligned struct by value to a kernel (rustc rejects alignments
/// above 16 there), so it is 16-byte aligned here and the PTX linker raises the alignment of the parameter that
/// holds it to 64 in the PTX, which TMA requires (../shared/HOPPER.md).
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMap(pub [u64; 16]);

/// The parameters of the sm_90a kernels ([`Module::Hopper`](crate::Module::Hopper)), passed by value as the kernel's one argument:
/// three tensor maps first (at offsets 0, 128 and 256 of a 64-byte aligned parameter), then the parameters every
/// BSR SpMM kernel takes, with the same preconditions, then the tile scheduler. Any number of CTAs from 1 to the
/// `block_rows * ceil(n / BN)` output tiles: with `tile_counter` 0 each walks the tiles `blockIdx.x, blockIdx.x +
/// gridDim.x, ...`; with counters, they share the tiles in the order they ask for them.
///
/// - `tmap_a`: A's values viewed as a row-major `(nnzb * bs) x bs` matrix of the input type, box `bs x 64`
///   (rows x columns), 128-byte swizzle.
/// - `tmap_b`: B as stored: row-major B is `K x n` with row stride `ldb`, box `64 x 64`; column-major B is
///   `n x K` with row stride `ldb`, box `BN x 64`; 128-byte swizzle, out-of-bounds elements read as zero.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HopperSpmmParams {
    /// The tensor map of A's values.
    pub tmap_a: TensorMap,
    /// The tensor map of B: row-major with `n` a multiple of 64, rank 3 (64 columns x K rows x `n / 64` chunks,
    /// boxes of 64 x 64 x BN / 64: a stage's B in one copy); other row-major B rank 2 (boxes of 64 x 64);
    /// column-major B rank 2 (boxes of 64 k x BN).
    pub tmap_b: TensorMap,
    /// The tensor map of C when `c_tma` is 1. A row-major C: its first `n` columns rounded down to whole 16 bytes
    /// (a TMA store writes whole 16-byte units, so a map ending mid-unit would write the padding after each row;
    /// the kernel stores the few columns past it from its registers) as an `m x` that matrix of the output type
    /// with row stride `ldc`, rank 4 (columns, row bit 2, row bits 0-1, row / 8: a box's rows lie in shared memory
    /// as rows 0, 4, 1, 5, 2, 6, 3, 7 of each group of 8), boxes of 64 rows x 128 bytes (32 f32 or 64 16-bit
    /// columns). A column-major C (16-bit elements only): rank 2, (rows, columns) with column stride `ldc`, boxes
    /// of 64 rows x 64 columns. 128-byte swizzle; elements outside the map are not written. Unused (any bytes)
    /// when `c_tma` is 0.
    pub tmap_c: TensorMap,
    /// Everything else, as for the sm_80 kernels.
    pub spmm: BsrSpmmParams,
    /// The tile scheduler: 0 for the static stride (CTA `c` takes tiles `c, c + gridDim.x, ...`), or the device
    /// address of two u32 counters, zero before the launch and only this launch's while it runs: the next tile,
    /// which each CTA's producer takes with an atomic add until it passes the last tile (a persistent grid whose
    /// CTAs take the next tile as they free up), and the CTAs done with that; the last CTA sets both back to zero.
    pub tile_counter: u64,
    /// 1: the consumers stage each tile of C in shared memory and store it through `tmap_c` (beta 0; row-major C
    /// with at least 16 bytes in a row, or column-major C of 16-bit elements, staged transposed); 0: they store C
    /// from their registers (beta != 0, which reads C, a row-major C of fewer than 16 bytes in a row, a
    /// column-major f32 C). A kernel with an f32 output ignores it for a column-major C.
    pub c_tma: u32,
    /// Split rows: the first `split_rows` positions of the row order (`BsrSpmmParams::row_order`, longest rows
    /// first) are split into up to `spmm.split_chunks` parts of `spmm.split_blocks` blocks each
    /// ([`hopper_virtual_row`]); 0: no row is split. Each part's consumer warps hand their f32 partial
    /// accumulators over through the split workspace (one slot per part, [`split_slot`]; one counter per warp of
    /// the tile, [`hopper_split_counter`]) and the last warp to count in adds the parts in part order.
    pub split_rows: u32,
}

/// The device-side structure check (`sparsek_bsr_check`): one thread per block row checks that `row_ptr` starts
/// at 0, never decreases and ends at `nnzb`, and that the row's `col_idx` entries are strictly increasing and below
/// `block_cols`, every value below 2^32. The smallest `(block_row << 3) | code` of a violation is folded into
/// `*result` with an atomic min (so the answer does not depend on scheduling); the host sets it to `u64::MAX`
/// first, and `u64::MAX` afterwards means valid.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BsrCheckParams {
    /// `block_rows + 1` u32 or u64.
    pub row_ptr: u64,
    /// `nnzb` u32 or u64.
    pub col_idx: u64,
    /// One u64 in device memory.
    pub result: u64,
    /// Nonzero blocks the caller declared.
    pub nnzb: u64,
    /// Block rows.
    pub block_rows: u32,
    /// Block columns (`K / bs`).
    pub block_cols: u32,
    /// 1: 64-bit entries.
    pub index64: u32,
    /// Explicit tail padding (always 0).
    pub _pad: u32,
}

/// Entry point of the structure check kernel (in every product module).
pub const BSR_CHECK_KERNEL: &str = "sparsek_bsr_check";
/// Threads per CTA of the structure check kernel.
pub const BSR_CHECK_THREADS: u32 = 256;

/// The parameters of the transposed-index kernel ([`BSR_TRANSPOSE_KERNEL`]), which builds a BSR structure's
/// transposed index (`col_ptr`, `row_idx`, `perm`: the host's `format::BsrTranspose`) on the device in three
/// launches of the same entry point, on one stream:
/// - phase 0 ([`transpose_phase::COUNT`]): one warp per block column `j` (a 1-D grid of
///   `ceil(block_cols / (BSR_TRANSPOSE_THREADS / 32))` CTAs) counts the block rows that store column `j` (32 rows
///   at a time, a binary search of each row's `col_idx`, a ballot) into `col_ptr[j + 1]`;
/// - phase 1 ([`transpose_phase::SCAN`]): one CTA turns `col_ptr[1..=block_cols]` into their running sum in place
///   (`col_ptr[0]` is 0: the host zeroes the array before phase 0);
/// - phase 2 ([`transpose_phase::FILL`]): the same warps as phase 0 write each found block at `col_ptr[j]` plus its
///   rank among the column's blocks of earlier rows: `row_idx` its block row, `perm` its position among the stored
///   blocks. Rows ascend within a column, so the result is the host's, bit for bit, whatever the schedule.
///
/// Preconditions: a valid structure (`row_ptr` `block_rows + 1` entries from 0 to `nnzb`, each row's `col_idx`
/// strictly increasing and below `block_cols`; 32- or 64-bit entries per `index64`), `col_ptr` `block_cols + 1` u32
/// zeroed before phase 0, `row_idx` and `perm` `nnzb` u32.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BsrTransposeParams {
    /// `block_rows + 1` u32 or u64.
    pub row_ptr: u64,
    /// `nnzb` u32 or u64.
    pub col_idx: u64,
    /// Output: `block_cols + 1` u32.
    pub col_ptr: u64,
    /// Output: `nnzb` u32.
    pub row_idx: u64,
    /// Output: `nnzb` u32.
    pub perm: u64,
    /// Block rows.
    pub block_rows: u32,
    /// Block columns.
    pub block_cols: u32,
    /// 1: 64-bit entries.
    pub index64: u32,
    /// [`transpose_phase`]: which of the three launches this is.
    pub phase: u32,
}

/// Entry point of the transposed-index kernel (in every product module).
pub const BSR_TRANSPOSE_KERNEL: &str = "sparsek_bsr_transpose";
/// Threads per CTA of the transposed-index kernel (phase 1 runs one CTA of them).
pub const BSR_TRANSPOSE_THREADS: u32 = 256;

/// The phases of [`BsrTransposeParams::phase`].
pub mod transpose_phase {
    /// Count each block column's blocks into `col_ptr[j + 1]`.
    pub const COUNT: u32 = 0;
    /// The running sum of the counts: `col_ptr`.
    pub const SCAN: u32 = 1;
    /// Write `row_idx` and `perm`.
    pub const FILL: u32 = 2;
}

/// What a structure check found, decoded from [`BsrCheckParams::result`]'s low three bits.
pub mod check_code {
    /// `row_ptr[0] != 0`.
    pub const FIRST_NOT_ZERO: u64 = 0;
    /// `row_ptr[r + 1] < row_ptr[r]`.
    pub const DECREASING: u64 = 1;
    /// `row_ptr[r + 1] > nnzb`.
    pub const BEYOND_NNZB: u64 = 2;
    /// `row_ptr[block_rows] != nnzb` (reported at row `block_rows`).
    pub const LAST_NOT_NNZB: u64 = 3;
    /// A `col_idx` entry `>= block_cols`.
    pub const COL_OUT_OF_RANGE: u64 = 4;
    /// `col_idx` not strictly increasing within a row (unsorted or duplicate).
    pub const COL_NOT_INCREASING: u64 = 5;
    /// An index value of 2^32 or more (or a negative int64).
    pub const TOO_LARGE: u64 = 6;
}
