//! The plan of one launch: which kernel runs and how its work is split, as one printable value
//! ([`LaunchPlan`]). [`plan`](super::plan) makes it; [`Gpu::plan`](crate::gpu::Gpu::plan) returns the plan a launch
//! of a product would run, and every launch executes the plan it was given.

use std::fmt;

use crate::tune::{KernelFamily, PlanSource};

/// How a launch splits its work across CTAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decomposition {
    /// One CTA per block row and N tile (the decode kernels: per 16-row slice of a block row).
    WholeRows,
    /// The narrow and mid tiles' split rows: a long block row spread over up to `chunks` CTAs of about `blocks`
    /// blocks each, the parts added in part order (same bits every run).
    SplitRows {
        /// The most parts (CTAs) per block row and N tile.
        chunks: u32,
        /// Blocks a part should hold.
        blocks: u32,
    },
    /// The flat block list: each CTA multiplies an equal share of A's blocks across row boundaries, cut rows
    /// summed in piece order.
    FlatList {
        /// CTAs per N tile.
        ctas_per_tile: u32,
    },
    /// One tile per stored block of the output structure (the sm_80 SDDMM kernels: one CTA each).
    StoredBlocks,
    /// The sm_90a SDDMM: a tile per group of up to `blocks` consecutive stored blocks of a block row, the tiles
    /// the entries of the structure's tile list (`listed`: rows longest first), else indexed by their first
    /// stored block (a tile has work only where it starts a group).
    BlockGroups {
        /// Blocks per group (the tile's columns over the block size).
        blocks: u32,
        /// The tiles are the structure's tile list's entries.
        listed: bool,
    },
    /// The sm_90a kernels' split rows: the `split_rows` longest rows' tiles cut into up to `chunks` parts of about
    /// `blocks` blocks that other CTAs take.
    HopperSplitRows {
        /// The leading positions of the row order that are split.
        split_rows: u32,
        /// The most parts per split row.
        chunks: u32,
        /// Blocks a part should hold.
        blocks: u32,
    },
}

/// Which kernel one launch runs and how: its entry point, the work decomposition, the grid, the row order and
/// rasterization, and the launch attributes. `Display` prints it on one line (`sparsek run` shows it).
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// The entry point that runs.
    pub kernel: &'static str,
    /// Its kernel family and where the choice came from, when known ([`Gpu::plan`](crate::gpu::Gpu::plan) and
    /// the launches that resolve their own kernel know it; a launch of a given kernel does not).
    pub choice: Option<(KernelFamily, PlanSource)>,
    /// bs 64's tile of 32 columns took the launch in place of its tile of 64 (one row dominates).
    pub skew_tile: bool,
    /// How the work is split.
    pub decomposition: Decomposition,
    /// The sm_90a kernels take their tiles from a counter in the workspace (a persistent grid).
    pub tile_counter: bool,
    /// CTAs in the grid.
    pub ctas: u32,
    /// Threads per CTA.
    pub threads: u32,
    /// Dynamic shared memory per CTA, in bytes.
    pub smem_bytes: u32,
    /// Block rows run longest first (`false`: in their natural order).
    pub longest_rows_first: bool,
    /// Block rows per rasterization group.
    pub group_rows: u32,
    /// A's values marked evict-first in L2 over this many bytes (an access policy window), if at all.
    pub evict_first_bytes: Option<usize>,
    /// A row-major C stored through a tensor map (the sm_90a kernels, beta 0).
    pub c_tma: bool,
    /// Launched with programmatic serialization (it may start before the kernel ahead of it ends).
    pub programmatic: bool,
    /// A programmatic launch that waits for the kernel ahead of it before it reads anything, A included
    /// ([`Policy::early_start`](crate::plan::Policy::early_start)); `false` for one that reads A first
    /// ([`Policy::programmatic`](crate::plan::Policy::programmatic)) and for a plain launch.
    pub waits_first: bool,
    /// Captured into a CUDA graph with a workspace of its own (an allocation and a free node).
    pub graph_workspace: bool,
    /// The SMs the launch was planned for where the policy's limit held it below the device's
    /// ([`Policy::sm_limit`](crate::plan::Policy::sm_limit)); `None`: every SM.
    pub sm_limit: Option<u32>,
}

impl fmt::Display for LaunchPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kernel)?;
        if let Some((family, source)) = self.choice {
            let source = match source {
                PlanSource::Tuned => "tuned plan",
                PlanSource::Heuristic => "heuristic",
            };
            write!(f, " ({family}, {source})")?;
        }
        if self.skew_tile {
            write!(f, ", the tile of 32 for a dominating row")?;
        }
        match self.decomposition {
            Decomposition::WholeRows => write!(f, "; whole rows")?,
            Decomposition::SplitRows { chunks, blocks } => {
                write!(f, "; rows split into up to {chunks} parts of ~{blocks} blocks")?
            }
            Decomposition::FlatList { ctas_per_tile } => {
                write!(f, "; a flat block list over {ctas_per_tile} CTAs per N tile")?
            }
            Decomposition::StoredBlocks => write!(f, "; one tile per stored block")?,
            Decomposition::BlockGroups { blocks, listed } => write!(
                f,
                "; a tile per group of up to {blocks} blocks of a row, {}",
                if listed { "from the structure's tile list" } else { "indexed by its first block" }
            )?,
            Decomposition::HopperSplitRows { split_rows, chunks, blocks } => {
                write!(f, "; the {split_rows} longest rows split into up to {chunks} parts of ~{blocks} blocks")?
            }
        }
        write!(f, "; {} CTAs of {} threads, {} KiB shared", self.ctas, self.threads, self.smem_bytes.div_ceil(1024))?;
        if self.tile_counter {
            write!(f, ", taking tiles from a counter")?;
        }
        write!(f, "; rows {}", if self.longest_rows_first { "longest first" } else { "in order" })?;
        write!(f, ", groups of {} rows", self.group_rows)?;
        if let Some(bytes) = self.evict_first_bytes {
            write!(f, "; A evict-first ({:.1} MB)", bytes as f64 / 1e6)?;
        }
        if self.c_tma {
            write!(f, "; C stored by TMA")?;
        }
        if self.programmatic {
            write!(f, "; programmatic launch")?;
            if self.waits_first {
                write!(f, " (waits first)")?;
            }
        }
        if self.graph_workspace {
            write!(f, "; a graph-owned workspace")?;
        }
        if let Some(sms) = self.sm_limit {
            write!(f, "; planned for {sms} SMs (limit)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_prints_every_decision_on_one_line() {
        let plan = LaunchPlan {
            kernel: "sparsek_bsr_bs64_f16_brow_f32_n16",
            choice: Some((KernelFamily::Narrow, PlanSource::Heuristic)),
            skew_tile: false,
            decomposition: Decomposition::SplitRows { chunks: 4, blocks: 12 },
            tile_counter: false,
            ctas: 528,
            threads: 128,
            smem_bytes: 40 * 1024,
            longest_rows_first: true,
            group_rows: 8,
            evict_first_bytes: Some(29_000_000),
            c_tma: false,
            programmatic: false,
            waits_first: false,
            graph_workspace: false,
            sm_limit: None,
        };
        let text = plan.to_string();
        assert_eq!(
            text,
            "sparsek_bsr_bs64_f16_brow_f32_n16 (narrow, heuristic); rows split into up to 4 parts of ~12 blocks; \
             528 CTAs of 128 threads, 40 KiB shared; rows longest first, groups of 8 rows; A evict-first (29.0 MB)"
        );
        assert!(!text.contains('\n'));
    }
}
