//! Index math shared by the kernels and the host: the shared-memory swizzle, grouped rasterization,
//! `ldmatrix` address roles and `mma` fragment maps, as plain `const fn`s that the host tests check.

/// Bytes of one 16-byte shared-memory chunk (one cp.async, one ldmatrix row).
pub const CHUNK_BYTES: u32 = 16;
/// f16 elements per chunk.
pub const CHUNK_HALVES: u32 = 8;

/// Position (in 16-byte chunks from the tile start) of chunk `chunk` of row `row` in a swizzled shared tile whose
/// rows are `chunks_per_row` chunks long (a power of two).
///
/// The XOR swizzle makes both access patterns conflict-free: eight lanes of an `ldmatrix` read the same logical
/// chunk of eight consecutive rows, and these land in eight distinct 16-byte bank groups of the 128-byte bank line.
/// For rows of >= 8 chunks the chunk index is XORed with `row % 8`; shorter rows pack `8 / chunks_per_row` rows
/// into one 128-byte line, and the XOR uses the line index instead.
#[inline(always)]
pub const fn swizzle(row: u32, chunk: u32, chunks_per_row: u32) -> u32 {
    let x = if chunks_per_row >= 8 { row % 8 } else { (row / (8 / chunks_per_row)) % chunks_per_row };
    row * chunks_per_row + (chunk ^ x)
}

/// The 128-byte-line bank group (0..8) that a swizzled chunk lands in.
pub const fn bank_group(row: u32, chunk: u32, chunks_per_row: u32) -> u32 {
    swizzle(row, chunk, chunks_per_row) % 8
}

/// Grouped rasterization: maps the linear CTA index `cta` of a 1-D grid of `block_rows * n_tiles` CTAs to
/// (position in the row order, N tile). CTAs go through groups of `group_rows` consecutive row positions; within
/// a group the row position varies fastest, then the N tile. A wave of concurrent CTAs therefore touches
/// `group_rows` block rows of A and about `wave / group_rows` column strips of B, a working set the host sizes to
/// fit in L2 (instead of all of A per wave, which is what row-major order over the whole grid does).
/// `group_rows >= block_rows` gives plain row-fastest order.
#[inline(always)]
pub const fn raster(cta: u32, block_rows: u32, n_tiles: u32, group_rows: u32) -> (u32, u32) {
    // Divisions by run-time values use checked_* so no panic path reaches the PTX; a zero divisor only arises for
    // an empty grid, where no CTA runs.
    let group_rows = if group_rows == 0 || group_rows > block_rows { block_rows } else { group_rows };
    let group_size = group_rows * n_tiles;
    let group = match cta.checked_div(group_size) {
        Some(g) => g,
        None => 0,
    };
    let first_row = group * group_rows;
    let left = block_rows.saturating_sub(first_row);
    let rows_here = if left < group_rows { left } else { group_rows };
    let within = cta - group * group_size;
    match (within.checked_rem(rows_here), within.checked_div(rows_here)) {
        (Some(r), Some(t)) => (first_row + r, t),
        _ => (0, 0),
    }
}

/// `ldmatrix` address role of lane `lane` when loading an m16 x k16 A fragment with `.x4`: (row, chunk) within
/// the 16x16 sub-tile. Lanes 0-15 address rows 0-15 of k-chunk 0, lanes 16-31 rows 0-15 of k-chunk 1, so the four
/// result registers are the mma A operands a0 (rows 0-7, k 0-7), a1 (rows 8-15, k 0-7), a2 (rows 0-7, k 8-15),
/// a3 (rows 8-15, k 8-15).
pub const fn ldsm_a_role(lane: u32) -> (u32, u32) {
    (lane % 16, lane / 16)
}

/// `ldmatrix.trans` address role of lane `lane` when loading two k16 x n8 B fragments with `.x4.trans` from a
/// row-major `[k][n]` tile: (k row, n chunk) within the 16x16 sub-tile. Registers 0 and 1 are b0, b1 of n-tile 0,
/// registers 2 and 3 are b0, b1 of n-tile 1.
pub const fn ldsm_b_role(lane: u32) -> (u32, u32) {
    ((lane % 8) + 8 * ((lane / 8) % 2), lane / 16)
}

/// `ldmatrix` (not `.trans`) address role of lane `lane` when loading two k16 x n8 B fragments with `.x4` from a
/// column-major B staged as an `[n][k]` tile (rows are columns of B, chunks run along k): (n row, k chunk) within
/// the 16x16 sub-tile. Registers 0 and 1 are b0 (k 0-7), b1 (k 8-15) of n-tile 0 (n rows 0-7), registers 2 and 3
/// the same of n-tile 1 (n rows 8-15): the same fragments as [`ldsm_b_role`] gives from a row-major tile.
pub const fn ldsm_bt_role(lane: u32) -> (u32, u32) {
    ((lane % 8) + 8 * (lane / 16), (lane / 8) % 2)
}

/// Element (row, col) of the m16 x n8 f32 accumulator that register `i` (0..4) of lane `lane` holds.
pub const fn mma_c_element(lane: u32, i: u32) -> (u32, u32) {
    (lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2)
}

/// Element (row, k) of the m16 x k16 A operand that half `h` (0..8; register h/2, low half first) of lane `lane`
/// holds.
pub const fn mma_a_element(lane: u32, h: u32) -> (u32, u32) {
    let reg = h / 2;
    (lane / 4 + 8 * (reg % 2), 2 * (lane % 4) + h % 2 + 8 * (reg / 2))
}

/// Element (k, col) of the k16 x n8 B operand that half `h` (0..4; register h/2, low half first) of lane `lane`
/// holds.
pub const fn mma_b_element(lane: u32, h: u32) -> (u32, u32) {
    (2 * (lane % 4) + h % 2 + 8 * (h / 2), lane / 4)
}
