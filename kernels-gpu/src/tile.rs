//! Tile types. A shared-memory tile knows its shape (const generics) and owns its swizzle, so a kernel asks it for
//! an address by (row, chunk) and never writes the swizzle itself (ThunderKittens' `st` and `st::idx`). The
//! register fragments of a warp's mma tile are plain arrays, named here by their shapes (ThunderKittens' `rt`).
//!
//! Everything but a tile's base address is a compile-time constant: an address costs the swizzle's integer ops on
//! the run-time (row, chunk) and one add.

use crate::layout::{CHUNK_BYTES, CHUNK_HALVES, swizzle};

/// A (ROWS, COLS) tile of 16-bit elements (f16 or bf16) in shared memory: row-major in 16-byte chunks, each placed by [`swizzle`] so that both
/// the cp.async writes (whole rows) and the ldmatrix reads (one chunk column of eight rows) are free of bank
/// conflicts. Holds only its `u32` shared base address.
#[derive(Clone, Copy)]
pub struct SmemTile<const ROWS: u32, const COLS: u32> {
    base: u32,
}

impl<const ROWS: u32, const COLS: u32> SmemTile<ROWS, COLS> {
    /// 16-byte chunks per row.
    pub const CHUNKS_PER_ROW: u32 = COLS / CHUNK_HALVES;
    /// 16-byte chunks in the tile.
    pub const CHUNKS: u32 = ROWS * Self::CHUNKS_PER_ROW;
    /// Bytes of the tile.
    pub const BYTES: u32 = ROWS * COLS * 2;

    /// The tile at shared address `base`, which is 128-byte aligned (the swizzle works in 128-byte lines).
    #[inline(always)]
    pub const fn at(base: u32) -> Self {
        const {
            assert!(ROWS > 0, "a shared tile has at least one row");
            assert!(
                COLS.is_multiple_of(CHUNK_HALVES) && (COLS / CHUNK_HALVES).is_power_of_two(),
                "a shared tile row is a power-of-two number of 16-byte chunks (the swizzle needs it)"
            );
        }
        Self { base }
    }

    /// The same bytes seen as a (ROWS2, COLS2) tile of the same size (a ring slot holds B's (BK, BN) tile of a
    /// row-major B or its (BN, BK) tile of a column-major B).
    #[inline(always)]
    pub fn reshaped<const ROWS2: u32, const COLS2: u32>(self) -> SmemTile<ROWS2, COLS2> {
        const { assert!(ROWS2 * COLS2 == ROWS * COLS, "a reshaped tile has the same size") };
        SmemTile::at(self.base)
    }

    /// Shared address of chunk `chunk` (columns `8 * chunk .. 8 * chunk + 8`) of row `row`: `st::idx`.
    #[inline(always)]
    pub fn chunk_addr(self, row: u32, chunk: u32) -> u32 {
        self.base + swizzle(row, chunk, Self::CHUNKS_PER_ROW) * CHUNK_BYTES
    }
}

/// A pipeline ring of STAGES [`SmemTile`]s of one shape, back to back: a (ROWS, COLS, STAGES) shared buffer
/// (CuTe's `sA` of shape (BM, BK, PIPE)).
#[derive(Clone, Copy)]
pub struct SmemRing<const ROWS: u32, const COLS: u32, const STAGES: u32> {
    base: u32,
}

impl<const ROWS: u32, const COLS: u32, const STAGES: u32> SmemRing<ROWS, COLS, STAGES> {
    /// Bytes of the ring.
    pub const BYTES: u32 = STAGES * SmemTile::<ROWS, COLS>::BYTES;

    /// The ring at shared address `base`, which is 128-byte aligned (and so is every slot).
    #[inline(always)]
    pub const fn at(base: u32) -> Self {
        const {
            assert!(STAGES > 0, "a ring has at least one stage");
            assert!(
                SmemTile::<ROWS, COLS>::BYTES.is_multiple_of(128),
                "every slot of a ring starts on a 128-byte line (the swizzle works in 128-byte lines)"
            );
        }
        Self { base }
    }

    /// Slot `stage` (0..STAGES) of the ring.
    #[inline(always)]
    pub fn stage(self, stage: u32) -> SmemTile<ROWS, COLS> {
        SmemTile::at(self.base + stage * SmemTile::<ROWS, COLS>::BYTES)
    }
}

/// The extents of a warp's mma tile made of MI x NI `mma.m16n8k16` tiles (the vocabulary's WM, WN).
pub struct WarpTile<const MI: usize, const NI: usize>;

impl<const MI: usize, const NI: usize> WarpTile<MI, NI> {
    /// WM: rows of the warp tile (`16 * MI`).
    pub const WM: u32 = 16 * MI as u32;
    /// WN: columns of the warp tile (`8 * NI`).
    pub const WN: u32 = 8 * NI as u32;
}

/// A warp's A fragments for one k16 step, loaded by `ldmatrix.x4`: MI m16 x k16 tiles of 4 registers (8 f16)
/// each, (MI, 4), in the register order of `ptx::mma`.
pub type FragA<const MI: usize> = [[u32; 4]; MI];

/// A warp's B fragments for one k16 step, loaded in pairs by `ldmatrix.x4.trans`: NI k16 x n8 tiles of 2
/// registers (4 f16) each, (NI, 2).
pub type FragB<const NI: usize> = [[u32; 2]; NI];

/// A warp's f32 accumulators, the (WM, WN) = (16 * MI, 8 * NI) warp tile as MI x NI m16 x n8 tiles of 4 registers
/// each, (MI, NI, 4); register `i` of a tile holds element `layout::mma_c_element(lane, i)`.
pub type AccTile<const MI: usize, const NI: usize> = [[[f32; 4]; NI]; MI];
