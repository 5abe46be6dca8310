//! BSR x dense SpMM on Hopper (sm_90a): TMA + mbarrier ring + wgmma, warp-specialised. Same
//! contract as the sm_80 kernels (kernels-gpu/src/sm80/bsr.rs): `C = act(alpha * (A @ B) + bias) + beta * C`, f16 or
//! bf16 inputs, f32 accumulation, B row- or column-major (one kernel each), C row- or column-major and f32 or the
//! input's 16-bit type, 32- or 64-bit indices; parameters `layout::HopperSpmmParams` (two tensor maps, then
//! `layout::BsrSpmmParams`).
//!
//! Output tiles are the sm_80 kernels' (one block row of A by BN columns of C), ordered the same way (grouped
//! rasterization over `row_order`, longest rows first). The kernel takes any grid. With `tile_counter` set, the
//! host launches a persistent grid (one CTA per SM) and each CTA's producer takes the next tile with an atomic
//! add, so CTAs that finish early take more (the last CTA out resets the counters); without it, CTA `c` takes
//! tiles `c, c + grid, ...` and the host launches one tile per consumer set (one CTA per tile, or per two in
//! ping-pong). Either way one CTA's tiles share one
//! continuous ring. A CTA is one producer warpgroup and `warps_m * warps_n / 4` consumer warpgroups per set, one
//! set or two (`layout::Pipeline::TmaWgmma { pingpong }`):
//! - PRODUCER (one thread; its warpgroup gives its registers back with `setmaxnreg.dec`): takes a tile, publishes
//!   it with the ring position of its first k-tile in the tile queue (`layout::TILE_QUEUE` entries, each with a
//!   full and an empty mbarrier), then for every k-tile waits for the ring slot to be empty, announces the slot's
//!   bytes on the slot's full barrier and issues the TMA copies: A's (BS, 64) slice of block `blk` (rows
//!   `blk * BS ..` of the `(nnzb * BS) x BS` map, column `kk`) and B's 64 rows `col_idx[blk] * BS + kk ..` for
//!   the tile's BN columns (row-major B: BN / 64 boxes of 64 x 64; column-major B: one box of BN x 64). TMA
//!   zero-fills columns past n, so the N tail needs no code. It runs ahead into the next tile while the consumers
//!   finish the last one. Past the last tile it publishes an end entry for each set.
//! - CONSUMERS (`setmaxnreg.inc`): a set reads the queue's entries in turn (in ping-pong, set `w` reads entries
//!   `w, w + 2, ...`); for every k-tile, wait for the slot to be full, issue 4 k16 steps of one wgmma over the
//!   columns they own (`m64n128k16`, or `m64n256k16` for two pieces: A read once), commit, wait until only this
//!   group is in flight (`wait_group 1`) and release the previous k-tile's slot, so one wgmma group is always in
//!   flight. After the tile's last k-tile: `wait_group 0`, release, and the epilogue. A row-major C with beta 0
//!   (`HopperSpmmParams::c_tma`) goes through shared memory: each warpgroup writes 128 bytes of each of its 64
//!   rows at a time into a 128-byte swizzled staging buffer, and one of its threads stores the buffer through C's
//!   tensor map (`cp.async.bulk.tensor`, whole 128-byte rows; a warp's register stores write 8 rows of 32 bytes
//!   each, which cost up to half the time at short rows: docs/perf-notes.md, "Hopper", step 11). The columns past
//!   C's last whole 16 bytes are stored from the registers too (`stage_chunk`), and every other C goes through the
//!   shared epilogue (kernels-gpu/src/epilogue.rs) straight from the accumulators, whose per-warp layout is the
//!   `mma.sync` C fragment's. In ping-pong, a set starts a main loop only after the
//!   other set has passed every full barrier of its previous tile (a turn barrier per set), so one set's epilogue
//!   runs under the other's wgmmas.
//!
//! Ring: STAGES slots of (A: BS x 64, B: 64 x BN) 16-bit elements, 1024-byte aligned (128-byte swizzle atoms),
//! followed by `OUT_BUFS` staging buffers of 64 x 128 bytes per consumer warpgroup (each with a `full` barrier,
//! 128 arrivals, and a `free` barrier, one arrival by the issuing thread once the TMA has read it);
//! slot `s` has a full barrier (1 arrival + the TMA bytes) and an empty barrier (one arrival per thread of a set).
//! Both sides count k-tiles with one running counter `it`: slot `it % STAGES`, phase parity `(it / STAGES) % 2`;
//! the producer waits for the empty barrier's previous phase (parity ^ 1: a fresh barrier counts as released). A
//! parity names the phase meant only if the slot's previous phase has completed: the set's own previous k-tile,
//! or, at a tile's start, the other set's, which the turn barrier guarantees.
//!
//! bs 64 with f32 C has two kernels per type: five stages and one staging buffer per warpgroup, and for short rows
//! (`_short`, `layout::HOPPER_SHORT_CONFIGS`) four stages and two buffers; the template is the same.
//!
//! The backward products run on the same template, named by the kernel's `SRC` ([`src`]):
//! - A^T @ B (`layout::Op::BsrSpmmT`): the tiles are the forward's over A's transposed index (its block columns
//!   as rows, `row_ptr`/`col_idx` the index, `perm` the stored block of each entry); a k-tile of A^T is 64 rows
//!   of stored block `perm[blk]`, loaded as they are stored in `BS / 64` boxes of 64 x 64 (A's values map with 64-row
//!   boxes) and read by wgmma as an MN-major A (`imm-trans-a`), one box per consumer warpgroup;
//! - SDDMM (`layout::Op::Sddmm`): 256-column tiles (`layout::HOPPER_SDDMM_CONFIGS`), each a group of `G = BN /
//!   BS` consecutive stored blocks of one block row. With the structure's tile list (`sddmm_list`, made on the
//!   host with the row schedule: `layout::sddmm_tile_list`) tile `t` is entry `t`, group `g` of a block row (a
//!   row's last entry takes the row's groups past it, so a list of other row lengths still covers every block);
//!   without one, tile `t` starts at stored block `t` and has work only where `t - row_ptr[row]` is a multiple of
//!   G (its block row found by a binary search of `row_ptr`; the producer passes the others over). The producer
//!   publishes the group's first block and block count in the queue entry. At bs 64 the tile is the forward's
//!   ping-pong one (each consumer set a whole group). A is X's rows of the
//!   block row over ceil(K / 64) k-tiles (row-major X: the forward's K-major boxes; column-major X: MN-major boxes
//!   as above), B is Y^T's k-tile at each block's columns (one `BS`-row box per block of a column-major Y^T, `BS /
//!   64` 64-column boxes of a row-major one; a group of fewer than G blocks leaves the rest of the slot stale,
//!   its columns computed and not stored), and the epilogue writes block `g`'s columns to its values (rows
//!   `(t + g) * BS..` of the `(nnzb * BS) x BS` output; bs 128 staged through C's map where the plan says so).
//!
//! The files, by job: [`scheduler`] (which tiles a CTA takes, where their blocks are), [`producer`] (the TMA
//! copies), [`consumer`] (the wgmma main loop), [`split`] (a split row's hand-over), [`store`] (C's store); here
//! the shared memory's map ([`Smem`]), the launch's shape ([`Launch`]) and the kernel body that starts both roles.

mod consumer;
mod producer;
mod scheduler;
mod split;
mod store;

use crate::epilogue::{Bf16In, F16In, Input, Output};
use crate::layout::{
    BsrSpmmParams, HopperSpmmParams, KernelConfig, OUT_STAGE_BYTES, TILE_QUEUE, WARPGROUP_WARPS, WGMMA_N,
    hopper_virtual_rows,
};
use crate::ptx;
use crate::ptx::WgmmaAcc;

/// What a kernel multiplies (its `SRC` constant): where its A boxes come from and which tiles it has.
pub(crate) mod src {
    /// The forward product `C = act(alpha * (A @ B) + bias) + beta * C` (`layout::Op::BsrSpmm`): A's stored blocks,
    /// K-major.
    pub(crate) const FORWARD: u32 = 0;
    /// `C = alpha * (A^T @ B) + beta * C` (`layout::Op::BsrSpmmT`): the rows are A's block columns (`row_ptr` and
    /// `col_idx` hold the transposed index), and entry `blk`'s A tile is stored block `perm[blk]` transposed: its 64
    /// rows of the k-tile staged as they are (64 x 64 boxes), read MN-major.
    pub(crate) const TRANSPOSED: u32 = 1;
    /// SDDMM (`layout::Op::Sddmm`) with a row-major X: one tile per stored block, A = X's rows of the block row
    /// (K-major), B = Y^T's k-tile at the block's columns.
    pub(crate) const SDDMM_X_ROW: u32 = 2;
    /// SDDMM with a column-major X: X's k-tile staged as 64 x 64 boxes, read MN-major.
    pub(crate) const SDDMM_X_COL: u32 = 3;
    /// Whether A is staged MN-major (k rows; wgmma's transposed A).
    pub(crate) const fn a_mn_major(src: u32) -> bool {
        src == TRANSPOSED || src == SDDMM_X_COL
    }
    /// Whether the kernel is an SDDMM (one tile per stored block, K = `p.k`).
    pub(crate) const fn sddmm(src: u32) -> bool {
        src == SDDMM_X_ROW || src == SDDMM_X_COL
    }
}

/// The most stored blocks an SDDMM tile groups (bs 64 on a 256-column tile).
const SDDMM_GROUP_MAX: u32 = 4;
/// The tile queue's end entry of an SDDMM (whose entries name a group's first stored block, which may lie past
/// the launch's tile count).
const SDDMM_END: u32 = u32::MAX;

/// K depth of a stage: one 128-byte swizzle row of 16-bit elements.
const BK: u32 = 64;
/// Threads of a warpgroup.
const WG_THREADS: u32 = 32 * WARPGROUP_WARPS;
/// Registers per thread the producer warpgroup keeps (it holds a few indices and addresses).
const PRODUCER_REGS: u32 = 40;
/// Registers per thread a consumer warpgroup may use (up to 128 accumulators of an m64n256 tile). With two
/// consumer warpgroups: 128 * 40 + 256 * 232 = 64512 of the SM's 65536.
const CONSUMER_REGS: u32 = 232;

/// An input type the wgmma of one k16 step multiplies.
trait WgmmaInput: Input {
    /// `d += a x b` for one k16 step of an m64n128 piece (`TRANS_A`, `TRANS_B`: A's and B's major orders, see
    /// `ptx::wgmma_m64n128k16`).
    ///
    /// # Safety
    /// As `ptx::wgmma_m64n128k16`.
    unsafe fn wgmma<const TRANS_A: u32, const TRANS_B: u32>(d: &mut WgmmaAcc, a: u64, b: u64);
    /// The same over two adjacent pieces (256 columns) in one instruction.
    ///
    /// # Safety
    /// As `ptx::wgmma_m64n256k16`.
    unsafe fn wgmma2<const TRANS_A: u32, const TRANS_B: u32>(d: &mut [WgmmaAcc; 2], a: u64, b: u64);
}

/// Implements [`WgmmaInput`] for input types: `Type: bf16` (the wgmma's `BF16` flag: bf16 or f16 operands).
macro_rules! wgmma_input {
    ($($input:ty: $bf16:literal),*) => {$(
        impl WgmmaInput for $input {
            #[inline(always)]
            unsafe fn wgmma<const TRANS_A: u32, const TRANS_B: u32>(d: &mut WgmmaAcc, a: u64, b: u64) {
                // SAFETY: forwarded.
                unsafe { ptx::wgmma_m64n128k16::<$bf16, TRANS_A, TRANS_B>(d, a, b, 1) }
            }
            #[inline(always)]
            unsafe fn wgmma2<const TRANS_A: u32, const TRANS_B: u32>(d: &mut [WgmmaAcc; 2], a: u64, b: u64) {
                // SAFETY: forwarded.
                unsafe { ptx::wgmma_m64n256k16::<$bf16, TRANS_A, TRANS_B>(d, a, b, 1) }
            }
        }
    )*};
}

wgmma_input!(F16In: false, Bf16In: true);

/// The addresses of [`Smem`]'s map: `name(self, args) = address;` defines `fn name(self, args: u32) -> u32`.
macro_rules! smem_addresses {
    ($($(#[$doc:meta])* $name:ident($self:ident $(, $arg:ident)*) = $addr:expr;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        fn $name($self $(, $arg: u32)*) -> u32 {
            $addr
        }
    )*};
}

/// The CTA's dynamic shared memory: the ring's `STAGES` slots (A's BS x 64 slice, then B's 64 x BN), each
/// consumer warpgroup's `OUT_BUFS` staging buffers, the ring's barriers, the tile queue, the turn barriers and the
/// staging buffers' barriers (`layout::KernelConfig`'s offsets).
#[derive(Clone, Copy)]
struct Smem<const STAGES: u32, const OUT_BUFS: u32> {
    ring: u32,
    a_bytes: u32,
    stage_bytes: u32,
    bars: u32,
    queue: u32,
}

impl<const STAGES: u32, const OUT_BUFS: u32> Smem<STAGES, OUT_BUFS> {
    /// The map of a CTA of `consumer_wgs` consumer warpgroups with A slices of `a_bytes` and stages of
    /// `stage_bytes`. The ring starts at the first 1024-byte boundary of the window (the host adds 1024 bytes for
    /// it).
    #[inline(always)]
    fn new(a_bytes: u32, stage_bytes: u32, consumer_wgs: u32) -> Self {
        let ring = (ptx::dynamic_smem_base() + 1023) & !1023;
        // After the ring, each consumer warpgroup's output staging buffers (layout::KernelConfig::out_stage_offset),
        // then the ring's barriers (barrier_offset).
        let bars = ring + STAGES * stage_bytes + consumer_wgs * OUT_BUFS * OUT_STAGE_BYTES;
        // The tile queue (layout::KernelConfig::tile_queue_offset): entry j of the CTA's tiles sits in slot
        // j % TILE_QUEUE.
        let queue = bars + 16 * STAGES;
        Smem { ring, a_bytes, stage_bytes, bars, queue }
    }
    smem_addresses! {
        /// Ring slot `s`: A's slice.
        a_slot(self, s) = self.ring + s * self.stage_bytes;
        /// Ring slot `s`: B's rows.
        b_slot(self, s) = self.ring + s * self.stage_bytes + self.a_bytes;
        /// Staging buffer `b` of consumer warpgroup `cw`.
        out_stage(self, cw, b) = self.ring + STAGES * self.stage_bytes + (cw * OUT_BUFS + b) * OUT_STAGE_BYTES;
        /// Slot `s`'s full barrier (1 arrival + the TMA bytes).
        full(self, s) = self.bars + 8 * s;
        /// Slot `s`'s empty barrier (one arrival per thread of a set).
        empty(self, s) = self.bars + 8 * (STAGES + s);
        /// Queue entry `q`'s full barrier.
        q_full(self, q) = self.queue + 8 * q;
        /// Queue entry `q`'s empty barrier.
        q_empty(self, q) = self.queue + 8 * (TILE_QUEUE + q);
        /// Queue entry `q` (16 bytes: the tile, the ring position of its first k-tile).
        q_entry(self, q) = self.queue + 16 * TILE_QUEUE + 16 * q;
        /// Ping-pong: set `w` may start a tile's main loop once the other set has passed the full barriers of every
        /// k-tile of its previous tile (it arrives on `turn(w)` then): the ring's earlier phases have all completed,
        /// so each full-barrier parity names the phase meant, and the two main loops take the tensor cores in turn.
        turn(self, w) = self.queue + 32 * TILE_QUEUE + 8 * w;
        /// A staging buffer's `full` barrier (its warpgroup's 128 threads have written it), after the turn barriers
        /// (out_barrier_offset).
        out_full(self, cw, b) = self.queue + 32 * TILE_QUEUE + 16 + 16 * (cw * OUT_BUFS + b);
        /// A staging buffer's `free` barrier (the TMA store has read it).
        out_free(self, cw, b) = self.out_full(cw, b) + 8;
    }
}

/// What both roles know of the launch: its tiles (`vrows * n_tiles`), the tile scheduler's shape (`vrows`,
/// `n_tiles`, `split_rows`), the index width's shift, the consumer sets and the consumer threads of one tile.
#[derive(Clone, Copy)]
struct Launch {
    tiles: u32,
    shape: (u32, u32, u32),
    index_shift: u32,
    sets: u32,
    tile_threads: u32,
    n_tiles: u32,
}

/// The kernel body for one configuration (see the module docs).
///
/// # Safety
/// `p` satisfies `layout::HopperSpmmParams`'s preconditions, `tmaps` is the generic address of the kernel's
/// parameter (tensor map of A at +0, of B at +128, of C at +256), `tile_counter` and `c_tma` are the parameter's
/// (`c_tma`: C's map is valid, C row-major, beta 0), and the launch has `CFG.threads()` threads and
/// `CFG.smem_bytes()` bytes of dynamic shared memory, where `OUT_BUFS` is `CFG.out_buffers()`.
#[inline(always)]
unsafe fn hopper_spmm<
    const BS: u32,
    const BN: u32,
    const WARPS_M: u32,
    const WARPS_N: u32,
    const STAGES: u32,
    const PIECES: usize,
    const TRANS_B: u32,
    const PINGPONG: bool,
    const OUT_BUFS: u32,
    const SRC: u32,
    const TRANS_A: u32,
    I: WgmmaInput,
    O: Output,
>(
    p: &BsrSpmmParams,
    tmaps: u64,
    tile_counter: u64,
    c_tma: bool,
    split_rows: u32,
) {
    // B's order: TRANS_B = 0 for a column-major B (staged N x K, K-major), 1 for a row-major B (K x N).
    let b_col = TRANS_B == 0;
    // A row-major B whose columns are a whole number of 64-column chunks has a rank-3 tensor map (64 columns x K x
    // chunks; layout::HopperSpmmParams): one copy loads a stage's BN / 64 chunks.
    // (An SDDMM loads each block's columns on their own: 64-column boxes of a 2-D map.)
    let b_chunked = !b_col && p.n.is_multiple_of(64) && !src::sddmm(SRC);
    const {
        assert!(PIECES as u32 * WGMMA_N * WARPS_N == BN, "each consumer warpgroup owns PIECES x 128 columns");
        assert!(PIECES == 1 || PIECES == 2, "one or two m64n128 pieces per consumer warpgroup");
        assert!(WARPS_M * 16 == BS && WARPS_M.is_multiple_of(WARPGROUP_WARPS), "16 rows per warp, whole warpgroups");
        assert!(OUT_BUFS == 1 || OUT_BUFS == 2, "one or two output staging buffers per consumer warpgroup");
        assert!(TRANS_A == src::a_mn_major(SRC) as u32, "A's major order is its source's");
        assert!(!src::sddmm(SRC) || BN.is_multiple_of(BS), "an SDDMM tile is a group of whole stored blocks");
        assert!(!src::sddmm(SRC) || BN / BS <= SDDMM_GROUP_MAX, "at most SDDMM_GROUP_MAX blocks per SDDMM tile");
    }
    let a_bytes = BS * BK * 2;
    let b_bytes = BK * BN * 2;
    let stage_bytes = a_bytes + b_bytes;
    // Consumer threads of one tile, and the sets of them that take turns (two in ping-pong).
    let tile_threads = WG_THREADS * (WARPS_M / WARPGROUP_WARPS) * WARPS_N;
    let sets = if PINGPONG { 2 } else { 1 };
    let consumer_wgs = tile_threads * sets / WG_THREADS;
    let smem = Smem::<STAGES, OUT_BUFS>::new(a_bytes, stage_bytes, consumer_wgs);

    let tid = ptx::thread_idx_x();
    if tid == 0 {
        // SAFETY (whole block): the barriers lie past the ring, inside the dynamic shared memory; nobody uses them
        // before the CTA barrier below.
        for s in 0..STAGES {
            unsafe {
                ptx::mbarrier_init(smem.full(s), 1);
                ptx::mbarrier_init(smem.empty(s), tile_threads);
            }
        }
        for q in 0..TILE_QUEUE {
            unsafe {
                ptx::mbarrier_init(smem.q_full(q), 1);
                ptx::mbarrier_init(smem.q_empty(q), tile_threads);
            }
        }
        if PINGPONG {
            for w in 0..2 {
                unsafe { ptx::mbarrier_init(smem.turn(w), tile_threads) };
            }
        }
        for cw in 0..consumer_wgs {
            for b in 0..OUT_BUFS {
                unsafe {
                    ptx::mbarrier_init(smem.out_full(cw, b), WG_THREADS);
                    ptx::mbarrier_init(smem.out_free(cw, b), 1);
                }
            }
        }
        ptx::fence_mbarrier_init();
    }
    ptx::bar_sync();

    let n_tiles = p.n.div_ceil(BN);
    // Split rows: the first split_rows positions of the row order walk split_chunks virtual rows each.
    let vrows = hopper_virtual_rows(p.block_rows, split_rows, p.split_chunks);
    // An SDDMM's tiles are its tile list's entries, or without one indexed by their first stored block (most are
    // empty: see `producer`).
    let tiles = match (src::sddmm(SRC), p.sddmm_list != 0) {
        (true, true) => p.sddmm_tiles,
        (true, false) => p.nnzb,
        _ => vrows * n_tiles,
    };
    let shape = (vrows, n_tiles, split_rows);
    let index_shift = if p.index64 != 0 { 3 } else { 2 };
    let launch = Launch { tiles, shape, index_shift, sets, tile_threads, n_tiles };
    let (tmap_a, tmap_b, tmap_c) = (tmaps, tmaps + 128, tmaps + 256);

    if tid < WG_THREADS {
        // PRODUCER warpgroup: one thread takes the tiles and issues every copy; the others only return their
        // registers.
        ptx::setmaxnreg_dec::<PRODUCER_REGS>();
        if tid == 0 {
            // SAFETY: the producer thread, after the barriers' initialisation; the kernel's parameters.
            unsafe {
                producer::produce::<BS, BN, STAGES, OUT_BUFS, SRC>(
                    p,
                    smem,
                    launch,
                    (tmap_a, tmap_b),
                    (b_col, b_chunked),
                    tile_counter,
                )
            };
        }
        return;
    }
    // CONSUMER warpgroups: set `set` takes entries set, set + sets, ... of the queue.
    ptx::setmaxnreg_inc::<CONSUMER_REGS>();
    // SAFETY: every consumer thread, after the barriers' initialisation; the kernel's parameters.
    unsafe {
        consumer::consume::<BS, BN, WARPS_M, STAGES, PIECES, TRANS_B, PINGPONG, OUT_BUFS, SRC, TRANS_A, I, O>(
            p,
            smem,
            launch,
            tid - WG_THREADS,
            (tmap_c, c_tma),
        )
    };
}

/// Defines the sm_90a entry point `$name` from its `layout::VARIANTS` entry (which must exist, be a
/// `Pipeline::TmaWgmma` variant and have the input type, B order and output type given here); `$src` is what it
/// multiplies ([`src`]).
macro_rules! hopper_kernel {
    ($src:expr, $name:ident, $input:ty, $in_type:pat, $b_layout:pat, $b_col:expr, $out:ty, $out_type:pat) => {
        /// sm_90a entry point (forward, A^T @ B or SDDMM by `$src`); see the module docs.
        ///
        /// # Safety
        /// Launched by the host's typed launcher, which checks the preconditions of [`HopperSpmmParams`].
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(params: HopperSpmmParams) {
            const CFG: KernelConfig =
                variant_config!($name, crate::layout::Pipeline::TmaWgmma { .. }, $in_type, $b_layout, $out_type);
            let tmaps = crate::param0_address!($name);
            // SAFETY: forwarded preconditions; the tensor maps are the parameter's first 256 bytes.
            unsafe {
                hopper_spmm::<
                    { CFG.bs },
                    { CFG.bn },
                    { CFG.warps_m },
                    { CFG.warps_n },
                    { CFG.stages },
                    { (CFG.bn / CFG.warps_n / WGMMA_N) as usize },
                    { if $b_col { 0 } else { 1 } },
                    { CFG.pingpong() },
                    { CFG.out_buffers() },
                    { $src },
                    { src::a_mn_major($src) as u32 },
                    $input,
                    $out,
                >(&params.spmm, tmaps, params.tile_counter, params.c_tma != 0, params.split_rows)
            }
        }
    };
}

/// The sm_90a entry points, one per `layout::VARIANTS` row of the Hopper module, generated by build.rs from the
/// table.
mod product {
    use super::*;

    include!(concat!(env!("OUT_DIR"), "/hopper_entries.rs"));
}
