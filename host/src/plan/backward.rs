//! The plans of the backward products (pure, like the rest of the room): `C = alpha * (A^T @ B) + beta * C`
//! ([`Op::BsrSpmmT`]) and the block SDDMM `values = alpha * (X @ Y^T) + beta * values` ([`Op::Sddmm`]). Each has
//! the sm_80 template (every GPU from sm_80 on) and, where the sm_90a module is loaded and allowed
//! ([`Policy::hopper`](super::Policy::hopper)), its sm_90a kernels (TMA + wgmma) for the block sizes they serve
//! (64 and 128), which the plan takes there:
//! - A^T @ B: the forward's wide tile over the block columns of A (the block rows of A^T), whole rows, rasterized
//!   in groups as the forward's wide tile is ([`raster_group_rows`]); on sm_90a the forward's tile likewise, C
//!   stored by TMA where beta is 0 and C is row-major or column-major of 16-bit elements;
//! - SDDMM: one tile per stored block on sm_80 ([`Decomposition::StoredBlocks`]); on sm_90a
//!   ([`Decomposition::BlockGroups`]) a 256-column tile over a group of `bn / bs` consecutive blocks of a block
//!   row, the tiles the entries of the structure's tile list (rows longest first) where it has one (an uploaded
//!   matrix, a view with its row schedule), else indexed by their first block (most of them empty); the values
//!   of bs 128 stored by TMA where beta is 0.
//!
//! Every launch is one CTA per tile (per two in ping-pong). An empty product (no blocks, or an SDDMM with K = 0)
//! takes the sm_80 kernel, which writes `beta * C`.

use sparsek_layout::{HOPPER_SDDMM_CONFIGS, InType, Layout, Op, OutType, Pipeline, Tile, sddmm_tile_list_len};

use super::{Decomposition, KernelRef, LaunchPlan, Loaded, Room, c_stageable, raster_group_rows};
use crate::error::{Error, Result};

/// A backward product as the planner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardProblem {
    /// [`Op::BsrSpmmT`] or [`Op::Sddmm`].
    pub op: Op,
    /// Block size.
    pub bs: usize,
    /// Element type of the inputs.
    pub input: InType,
    /// A^T @ B: B's storage order; SDDMM: Y's (`N x K`).
    pub b_layout: Layout,
    /// SDDMM: X's storage order (`M x K`); ignored for A^T @ B.
    pub x_layout: Layout,
    /// Element type written: C's, or the SDDMM values'.
    pub output: OutType,
    /// A's (the structure's) `rows x cols`.
    pub shape: (usize, usize),
    /// Stored blocks.
    pub nnzb: usize,
    /// A^T @ B: the columns of B and C; SDDMM: K, the reduced length.
    pub n: usize,
    /// A^T @ B: C's storage order; SDDMM: the values' (row-major).
    pub c_layout: Layout,
    /// beta is 0 (the output is written without being read).
    pub beta_zero: bool,
    /// SDDMM: the entries of the structure's tile lists for the sm_90a kernels, where it has them (an uploaded
    /// matrix, a view with its [`RowSchedule`](crate::gpu::RowSchedule)); ignored for A^T @ B.
    pub sddmm_tiles: Option<SddmmTileCounts>,
}

/// The entries of a structure's sm_90a SDDMM tile lists (`sparsek_layout::sddmm_tile_list`), one list per
/// configuration of [`HOPPER_SDDMM_CONFIGS`], each for its group of `bn / bs` blocks: at least one entry per
/// block row and one per group of a row's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SddmmTileCounts {
    /// (group size, entries) per [`HOPPER_SDDMM_CONFIGS`] entry, in its order.
    pub(crate) lists: [(u32, usize); HOPPER_SDDMM_CONFIGS.len()],
}

impl SddmmTileCounts {
    /// The counts for block rows of these lengths.
    pub fn of(lengths: &[u32]) -> SddmmTileCounts {
        let group = |i: usize| HOPPER_SDDMM_CONFIGS[i].bn / HOPPER_SDDMM_CONFIGS[i].bs;
        SddmmTileCounts { lists: std::array::from_fn(|i| (group(i), sddmm_tile_list_len(lengths, group(i)))) }
    }
    /// The entries of the list for groups of `group` blocks, if there is one.
    pub fn tiles(&self, group: u32) -> Option<usize> {
        self.lists.iter().find(|l| l.0 == group).map(|l| l.1)
    }
    /// Where the list for groups of `group` blocks starts, in entries from the first list's start (the lists lie
    /// back to back in [`HOPPER_SDDMM_CONFIGS`]' order).
    pub(crate) fn offset(&self, group: u32) -> Option<usize> {
        let i = self.lists.iter().position(|l| l.0 == group)?;
        Some(self.lists[..i].iter().map(|l| l.1).sum())
    }
    /// Entries of every list together.
    pub(crate) fn total(&self) -> usize {
        self.lists.iter().map(|l| l.1).sum()
    }
}

/// The kernel of `p` among `list` (a module's kernels): the [`Tile::Wide`] row of its op, block size and types.
fn find<'a>(list: &'a [Loaded], p: &BackwardProblem) -> Option<(usize, &'a Loaded)> {
    // The variant table stores the B operand's order: for SDDMM that is Y^T's, the transpose of Y's.
    let (b_layout, a_layout) = match p.op {
        Op::Sddmm => (p.b_layout.transposed(), p.x_layout),
        _ => (p.b_layout, Layout::RowMajor),
    };
    list.iter().enumerate().find(|(_, k)| {
        let v = &k.variant;
        v.op == p.op
            && v.bs as usize == p.bs
            && v.input == p.input
            && v.b_layout == b_layout
            && v.a_layout == a_layout
            && v.out == p.output
            && v.tile == Tile::Wide
    })
}

/// The plan of a backward product and the kernel it names. Errors: [`Error::InvalidArgument`] for an op that is not
/// a backward product or a type combination no kernel serves (the output is f32 or the inputs' own type),
/// [`Error::InvalidBsr`]-free: block sizes are checked where the structure is made.
pub(crate) fn plan_backward(room: Room<'_>, p: &BackwardProblem) -> Result<(LaunchPlan, KernelRef)> {
    if !matches!(p.op, Op::BsrSpmmT | Op::Sddmm) {
        return Err(Error::InvalidArgument { name: "op", reason: format!("{:?} is not a backward product", p.op) });
    }
    // The sm_90a kernel where the module is loaded, allowed and has one for the block size and types, and the
    // product has blocks and (SDDMM) a reduced length: a TMA map cannot describe an empty operand. Else the product
    // module's (which writes beta * C for an empty product).
    let nonempty = p.nnzb > 0 && (p.op != Op::Sddmm || p.n > 0);
    let hopper =
        (room.policy.hopper && room.device.sm90a_loaded() && nonempty).then(|| find(&room.device.hopper, p)).flatten();
    let found = match hopper {
        Some((i, loaded)) => Some((KernelRef::Hopper(i), loaded)),
        None => find(&room.device.product, p).map(|(i, loaded)| (KernelRef::Product(i), loaded)),
    };
    let Some((kernel, loaded)) = found else {
        return Err(Error::InvalidArgument {
            name: "types",
            reason: format!(
                "no {:?} kernel for bs {}, {} inputs and {} output (the output is f32 or the inputs' type)",
                p.op,
                p.bs,
                p.input.name(),
                p.output.name()
            ),
        });
    };
    let cfg = loaded.variant.config;
    let sm90a = matches!(cfg.pipeline, Pipeline::TmaWgmma { .. });
    let (rows, cols) = p.shape;
    let bs = p.bs.max(1);
    let (tiles, group_rows, decomposition) = match p.op {
        Op::Sddmm if sm90a => {
            // The structure's tile list for the tile's group where it has one, else a tile per stored block
            // (most of them empty).
            let blocks = cfg.bn / cfg.bs;
            match p.sddmm_tiles.and_then(|c| c.tiles(blocks)) {
                Some(tiles) => (tiles, 1, Decomposition::BlockGroups { blocks, listed: true }),
                None => (p.nnzb, 1, Decomposition::BlockGroups { blocks, listed: false }),
            }
        }
        Op::Sddmm => (p.nnzb, 1, Decomposition::StoredBlocks),
        _ => {
            // The rows of A^T are A's block columns; each is a row of the forward's wide tile.
            let block_rows = cols / bs;
            let n_tiles = p.n.div_ceil(cfg.bn as usize);
            let wave = (loaded.ctas_per_sm.max(1) * room.sms()) as usize;
            let a_row_bytes = p.nnzb * bs * bs * 2 / block_rows.max(1);
            let b_tile_bytes = rows * cfg.bn as usize * 2;
            let group = raster_group_rows(block_rows, n_tiles, a_row_bytes, b_tile_bytes, wave, room.device.l2_bytes);
            (block_rows * n_tiles, group, Decomposition::WholeRows)
        }
    };
    // One CTA per tile (two in ping-pong, one per consumer set): the hardware hands out the next as an SM frees,
    // which balanced uneven rows better than one wave striding over the tiles or taking equal shares of them (H200,
    // docs/perf-notes.md, "Backward on sm_90a"). An sm_90a SDDMM's tiles are its tile list's entries, or indexed
    // by their first stored block (most of them are empty and exit at once).
    let sets = if cfg.pingpong() { 2 } else { 1 };
    let ctas = tiles.div_ceil(sets);
    // The sm_90a kernels store an output written without being read through a tensor map: A^T @ B's C as the
    // forward's ([`c_stageable`]), the SDDMM's row-major values at bs 128 only (a bs-64 block is half of a staged
    // piece).
    let c_tma = sm90a
        && match p.op {
            Op::BsrSpmm | Op::BsrSpmmT => c_stageable(p.beta_zero, p.c_layout, p.output, p.n),
            Op::Sddmm => p.beta_zero && cfg.bn / bs as u32 <= 2,
        };
    let ctas = u32::try_from(ctas).ok().filter(|&c| c <= i32::MAX as u32).ok_or_else(|| Error::InvalidArgument {
        name: "CTAs",
        reason: format!("{ctas} exceeds the kernel's limit of {}", i32::MAX),
    })?;
    let plan = LaunchPlan {
        kernel: loaded.variant.name,
        choice: None,
        skew_tile: false,
        decomposition,
        tile_counter: false,
        ctas,
        threads: cfg.threads(),
        smem_bytes: cfg.smem_bytes(),
        longest_rows_first: matches!(decomposition, Decomposition::BlockGroups { listed: true, .. }),
        group_rows,
        evict_first_bytes: None,
        c_tma,
        programmatic: false,
        waits_first: false,
        graph_workspace: false,
        sm_limit: super::sm_limited(room).then(|| room.sms()),
    };
    Ok((plan, kernel))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DeviceFacts, Policy, Preset};

    fn problem(op: Op, bs: usize, output: OutType) -> BackwardProblem {
        BackwardProblem {
            op,
            bs,
            input: InType::Bf16,
            b_layout: Layout::ColMajor,
            x_layout: Layout::ColMajor,
            output,
            shape: (4096, 11008),
            nnzb: 64 * 172 / 4,
            n: 4096,
            c_layout: Layout::ColMajor,
            beta_zero: true,
            sddmm_tiles: None,
        }
    }

    #[test]
    fn a_transposed_product_runs_the_wide_tile_over_the_block_columns() {
        let device = DeviceFacts::estimated(Preset::H100);
        let sm80_only = Policy { hopper: false, ..Policy::default() };
        let room = Room { device: &device, policy: &sm80_only };
        for bs in [16, 32, 64, 128] {
            let (plan, _) = plan_backward(room, &problem(Op::BsrSpmmT, bs, OutType::Bf16)).unwrap();
            assert_eq!(plan.kernel, format!("sparsek_bsrt_bs{bs}_bf16_bcol_bf16"));
            let bn = sparsek_layout::variant(plan.kernel).config.bn as usize;
            assert_eq!(plan.ctas as usize, 11008 / bs * 4096usize.div_ceil(bn), "{plan}");
            assert_eq!(plan.decomposition, Decomposition::WholeRows);
            assert!(plan.group_rows >= 1 && !plan.c_tma);
        }
    }

    #[test]
    fn on_hopper_the_transposed_product_takes_the_sm90a_tile_for_bs_64_and_128() {
        let (device, policy) = (DeviceFacts::estimated(Preset::H100), Policy::default());
        let room = Room { device: &device, policy: &policy };
        for bs in [16, 32, 64, 128] {
            let p = problem(Op::BsrSpmmT, bs, OutType::Bf16);
            let (plan, kernel) = plan_backward(room, &p).unwrap();
            if bs < 64 {
                assert_eq!((plan.kernel, kernel), (&*format!("sparsek_bsrt_bs{bs}_bf16_bcol_bf16"), kernel));
                assert!(matches!(kernel, KernelRef::Product(_)));
                continue;
            }
            assert_eq!(plan.kernel, format!("sparsek_sm90t_bs{bs}_bf16_bcol_bf16"));
            assert!(matches!(kernel, KernelRef::Hopper(_)));
            let cfg = sparsek_layout::variant(plan.kernel).config;
            let tiles = 11008 / bs * 4096usize.div_ceil(cfg.bn as usize);
            let sets = if cfg.pingpong() { 2 } else { 1 };
            // One CTA per tile (per two in ping-pong).
            assert_eq!(plan.ctas as usize, tiles.div_ceil(sets), "{plan}");
            assert!(!plan.tile_counter && plan.c_tma, "a column-major bf16 C is staged transposed: {plan}");
            let f32_out = BackwardProblem { output: OutType::F32, ..p };
            assert!(!plan_backward(room, &f32_out).unwrap().0.c_tma, "a column-major f32 C: from the registers");
            let row_major = BackwardProblem { c_layout: Layout::RowMajor, ..p };
            assert!(plan_backward(room, &row_major).unwrap().0.c_tma);
            let read = BackwardProblem { beta_zero: false, ..row_major };
            assert!(!plan_backward(room, &read).unwrap().0.c_tma, "beta != 0 reads C");
        }
    }

    #[test]
    fn an_sddmm_runs_one_tile_per_stored_block_and_names_y_in_its_own_order() {
        let device = DeviceFacts::estimated(Preset::H200);
        let sm80_only = Policy { hopper: false, ..Policy::default() };
        let room = Room { device: &device, policy: &sm80_only };
        let p = problem(Op::Sddmm, 64, OutType::F32);
        let (plan, _) = plan_backward(room, &p).unwrap();
        // X and Y column-major (the linear layer's dY^T and x^T): Y^T is row-major.
        assert_eq!(plan.kernel, "sparsek_sddmm_bs64_bf16_xcol_ycol_f32");
        assert_eq!((plan.ctas as usize, plan.decomposition), (p.nnzb, Decomposition::StoredBlocks));
        let rows = BackwardProblem { x_layout: Layout::RowMajor, b_layout: Layout::RowMajor, ..p };
        assert_eq!(plan_backward(room, &rows).unwrap().0.kernel, "sparsek_sddmm_bs64_bf16_xrow_yrow_f32");
        assert!(plan.to_string().contains("one tile per stored block"), "{plan}");
    }

    #[test]
    fn on_hopper_an_sddmm_takes_the_sm90a_group_tile() {
        let (device, policy) = (DeviceFacts::estimated(Preset::H200), Policy::default());
        let room = Room { device: &device, policy: &policy };
        for bs in [16, 32, 64, 128] {
            let p = BackwardProblem { c_layout: Layout::RowMajor, ..problem(Op::Sddmm, bs, OutType::F32) };
            let (plan, kernel) = plan_backward(room, &p).unwrap();
            if bs < 64 {
                assert_eq!(plan.kernel, format!("sparsek_sddmm_bs{bs}_bf16_xcol_ycol_f32"));
                assert!(matches!(kernel, KernelRef::Product(_)) && !plan.c_tma);
                continue;
            }
            assert_eq!(plan.kernel, format!("sparsek_sm90_sddmm_bs{bs}_bf16_xcol_ycol_f32"));
            assert!(matches!(kernel, KernelRef::Hopper(_)));
            // Without a tile list, one CTA per tile index (per two in ping-pong): a group may start at any stored
            // block.
            let blocks = 256 / bs as u32;
            let unlisted = Decomposition::BlockGroups { blocks, listed: false };
            let sets = if sparsek_layout::variant(plan.kernel).config.pingpong() { 2 } else { 1 };
            assert_eq!((plan.ctas as usize, plan.decomposition), (p.nnzb.div_ceil(sets), unlisted));
            assert!(plan.to_string().contains("indexed by its first block"), "{plan}");
            // With the structure's lists, one CTA per entry of the list for the tile's group, rows longest first.
            let lengths: Vec<u32> = (0..64u32).map(|r| (r * 7) % 23).collect();
            let counts = SddmmTileCounts::of(&lengths);
            let listed = BackwardProblem { sddmm_tiles: Some(counts), nnzb: lengths.iter().sum::<u32>() as usize, ..p };
            let (plan, _) = plan_backward(room, &listed).unwrap();
            let want: usize = lengths.iter().map(|&l| l.div_ceil(blocks).max(1) as usize).sum();
            assert_eq!(counts.tiles(blocks), Some(want));
            assert_eq!(plan.ctas as usize, want.div_ceil(sets), "{plan}");
            assert_eq!(plan.decomposition, Decomposition::BlockGroups { blocks, listed: true });
            assert!(plan.longest_rows_first && plan.to_string().contains("from the structure's tile list"), "{plan}");
            // The values staged through a tensor map at bs 128 (a piece per block), from the registers at bs 64.
            assert_eq!(plan.c_tma, bs == 128, "{plan}");
            let read = BackwardProblem { beta_zero: false, ..p };
            assert!(!plan_backward(room, &read).unwrap().0.c_tma, "beta != 0 reads the values");
            // Empty products keep the sm_80 kernel (it writes beta * values; no TMA map of an empty operand).
            for empty in [BackwardProblem { n: 0, ..p }, BackwardProblem { nnzb: 0, ..p }] {
                let (plan, kernel) = plan_backward(room, &empty).unwrap();
                assert_eq!(plan.kernel, format!("sparsek_sddmm_bs{bs}_bf16_xcol_ycol_f32"));
                assert!(matches!(kernel, KernelRef::Product(_)));
            }
            let t = BackwardProblem { nnzb: 0, ..problem(Op::BsrSpmmT, bs, OutType::F32) };
            assert!(matches!(plan_backward(room, &t).unwrap().1, KernelRef::Product(_)));
        }
    }

    /// The kernel's reading of a tile list (kernels-gpu/src/sm90/producer.rs): entry `(row, g)` is the group of up to
    /// `group` blocks from the row's block `g * group`, and a row's last entry goes on to the row's end.
    fn blocks_taken(list: &[[u32; 2]], row_ptr: &[u32], group: u32) -> Vec<u32> {
        let mut taken = vec![0u32; row_ptr[row_ptr.len() - 1] as usize];
        for &[row, g] in list {
            let (begin, end) = (row_ptr[row as usize], row_ptr[row as usize + 1]);
            let mut start = begin as u64 + (g & !sparsek_layout::SDDMM_LAST_GROUP) as u64 * group as u64;
            while start < end as u64 {
                let count = (end as u64 - start).min(group as u64);
                (start..start + count).for_each(|b| taken[b as usize] += 1);
                if g & sparsek_layout::SDDMM_LAST_GROUP == 0 {
                    break;
                }
                start += group as u64;
            }
        }
        taken
    }

    #[test]
    fn an_sddmm_tile_list_takes_every_block_once_whatever_lengths_it_was_made_of() {
        // A small LCG: row lengths 0..=20 over 1..=40 rows, the list made of the structure's own lengths (one entry
        // per group, each holding blocks) and of the same lengths shuffled (same rows and blocks).
        let mut state = 0x5eed_u64;
        let mut next = |n: u32| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) % n as u64) as u32
        };
        for _ in 0..500 {
            let rows = 1 + next(40) as usize;
            let lengths: Vec<u32> = (0..rows).map(|_| if next(4) == 0 { 0 } else { next(21) }).collect();
            let row_ptr: Vec<u32> = std::iter::once(0)
                .chain(lengths.iter().scan(0, |s, &l| {
                    *s += l;
                    Some(*s)
                }))
                .collect();
            let mut order: Vec<u32> = (0..rows as u32).collect();
            order.sort_by_key(|&r| std::cmp::Reverse(lengths[r as usize]));
            let sorted: Vec<u32> = order.iter().map(|&r| lengths[r as usize]).collect();
            let mut other = sorted.clone();
            for i in (1..other.len()).rev() {
                other.swap(i, next(i as u32 + 1) as usize);
            }
            for group in [2u32, 4] {
                for (lens, own) in [(&sorted, true), (&other, false)] {
                    let len = sparsek_layout::sddmm_tile_list_len(lens, group);
                    let mut list = vec![[u32::MAX; 2]; len];
                    assert_eq!(sparsek_layout::sddmm_tile_list(&order, lens, group, &mut list), len);
                    let taken = blocks_taken(&list, &row_ptr, group);
                    assert!(taken.iter().all(|&t| t == 1), "group {group}, lengths {lengths:?}, list of {lens:?}");
                    if own {
                        // Of its own lengths: one entry per group (an empty row's one entry aside), none beyond.
                        let groups: usize = lengths.iter().map(|&l| l.div_ceil(group) as usize).sum();
                        let empty_rows = lengths.iter().filter(|&&l| l == 0).count();
                        assert_eq!(len, groups + empty_rows);
                    }
                }
            }
        }
    }

    #[test]
    fn types_no_kernel_serves_are_refused() {
        let (device, policy) = (DeviceFacts::estimated(Preset::H100), Policy::default());
        let room = Room { device: &device, policy: &policy };
        let f16_out_of_bf16 = problem(Op::Sddmm, 32, OutType::F16);
        assert!(matches!(plan_backward(room, &f16_out_of_bf16), Err(Error::InvalidArgument { name: "types", .. })));
        let forward = problem(Op::BsrSpmm, 32, OutType::F32);
        assert!(matches!(plan_backward(room, &forward), Err(Error::InvalidArgument { name: "op", .. })));
    }
}
