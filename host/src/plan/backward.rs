//! The plans of the backward products (pure, like the rest of the room): `C = alpha * (A^T @ B) + beta * C`
//! ([`Op::BsrSpmmT`]) and the block SDDMM `values = alpha * (X @ Y^T) + beta * values` ([`Op::Sddmm`]). Each has one
//! kernel family today, the sm_80 template (it runs on every GPU from sm_80 on, Hopper included):
//! - A^T @ B: the forward's wide tile over the block columns of A (the block rows of A^T), whole rows, rasterized
//!   in groups as the forward's wide tile is ([`raster_group_rows`]);
//! - SDDMM: one CTA per stored block ([`Decomposition::StoredBlocks`]), in storage order.

use sparsek_layout::{InType, Layout, Op, OutType, Tile};

use super::{Decomposition, KernelRef, LaunchPlan, Loaded, Room, raster_group_rows};
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
}

/// The kernel of `p` among `list`: the [`Tile::Wide`] row of its op, block size and types.
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
    let Some((i, loaded)) = find(&room.device.product, p) else {
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
    let (rows, cols) = p.shape;
    let bs = p.bs.max(1);
    let (ctas, group_rows, decomposition) = match p.op {
        Op::Sddmm => (p.nnzb, 1, Decomposition::StoredBlocks),
        _ => {
            // The rows of A^T are A's block columns; each is a row of the forward's wide tile.
            let block_rows = cols / bs;
            let n_tiles = p.n.div_ceil(cfg.bn as usize);
            let wave = (loaded.ctas_per_sm.max(1) * room.device.sm_count) as usize;
            let a_row_bytes = p.nnzb * bs * bs * 2 / block_rows.max(1);
            let b_tile_bytes = rows * cfg.bn as usize * 2;
            let group = raster_group_rows(block_rows, n_tiles, a_row_bytes, b_tile_bytes, wave, room.device.l2_bytes);
            (block_rows * n_tiles, group, Decomposition::WholeRows)
        }
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
        longest_rows_first: false,
        group_rows,
        evict_first_bytes: None,
        c_tma: false,
        programmatic: false,
        graph_workspace: false,
    };
    Ok((plan, KernelRef::Product(i)))
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
        }
    }

    #[test]
    fn a_transposed_product_runs_the_wide_tile_over_the_block_columns() {
        let (device, policy) = (DeviceFacts::estimated(Preset::H100), Policy::default());
        let room = Room { device: &device, policy: &policy };
        for bs in [16, 32, 64, 128] {
            let (plan, _) = plan_backward(room, &problem(Op::BsrSpmmT, bs, OutType::Bf16)).unwrap();
            assert_eq!(plan.kernel, format!("sparsek_bsrt_bs{bs}_bf16_bcol_bf16"));
            let bn = sparsek_layout::variant(plan.kernel).config.bn as usize;
            assert_eq!(plan.ctas as usize, 11008 / bs * 4096usize.div_ceil(bn), "{plan}");
            assert_eq!(plan.decomposition, Decomposition::WholeRows);
            assert!(plan.group_rows >= 1);
        }
    }

    #[test]
    fn an_sddmm_runs_one_cta_per_stored_block_and_names_y_in_its_own_order() {
        let (device, policy) = (DeviceFacts::estimated(Preset::H200), Policy::default());
        let room = Room { device: &device, policy: &policy };
        let p = problem(Op::Sddmm, 64, OutType::F32);
        let (plan, _) = plan_backward(room, &p).unwrap();
        // X and Y column-major (the linear layer's dY^T and x^T): Y^T is row-major.
        assert_eq!(plan.kernel, "sparsek_sddmm_bs64_bf16_xcol_ycol_f32");
        assert_eq!((plan.ctas as usize, plan.decomposition), (p.nnzb, Decomposition::StoredBlocks));
        let rows = BackwardProblem { x_layout: Layout::RowMajor, b_layout: Layout::RowMajor, ..p };
        assert_eq!(plan_backward(room, &rows).unwrap().0.kernel, "sparsek_sddmm_bs64_bf16_xrow_yrow_f32");
        assert!(plan.to_string().contains("one CTA per stored block"), "{plan}");
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
