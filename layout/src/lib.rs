//! sparsek's kernel ABI and index math, shared by the GPU kernels (built for nvptx64 inside kernels-gpu) and the
//! host (the `sparsek` library and its tests): one description, compiled twice, never copied.
//!
//! - index math as plain `const fn`s with no GPU code: the swizzle, `ldmatrix` address roles, `mma` fragment
//!   maps, grouped rasterization ([`raster`]); the host tests check the same functions the kernels use;
//! - [`KernelConfig`]: a kernel's tile shape, with one [`KernelConfig::check`] used by the kernels' compile-time
//!   asserts and by the host when it loads a kernel;
//! - [`BsrSpmmParams`]: the kernel parameter struct (`#[repr(C)]`), pushed by the host as one argument;
//! - [`VARIANTS`]: every compiled kernel (entry point name, arch, op, block size, output type, configuration).
//!
//! `#![no_std]` and dependency-free, so it builds for the host and for `nvptx64-nvidia-cuda` alike.
//!
//! Vocabulary (one line each; the same names everywhere):
//! - `BS`: BSR block size (A's blocks are BS x BS).        - `BM`: output rows per CTA (= BS: one block row).
//! - `BN`: output columns per CTA.                         - `BK`: K depth of one pipeline stage (divides BS).
//! - `WARPS_M x WARPS_N`: the CTA's warp grid.             - `MI x NI`: m16 x n8 mma tiles per warp (WM = 16*MI,
//!   WN = 8*NI).                                           - `STAGES`: depth of the cp.async shared-memory ring.
#![no_std]
#![warn(missing_docs)]

mod config;
mod index;
mod params;
mod variant;

pub use config::*;
pub use index::*;
pub use params::*;
pub use variant::*;

#[cfg(test)]
mod tests {
    use super::*;

    fn v_count(op: Op) -> usize {
        VARIANTS.iter().filter(|v| v.op == op).count()
    }

    #[test]
    fn every_variant_names_the_decomposition_its_template_implements() {
        let mut counts = [0usize; 6];
        for v in VARIANTS.iter() {
            assert!(v.decomposition.fits(&v.config, v.tile), "{}", v.name);
            let i = match v.decomposition {
                Decomposition::WholeRows => 0,
                Decomposition::SplitRows => 1,
                Decomposition::FlatList => 2,
                Decomposition::DecodeSlices => 3,
                Decomposition::HopperTiles => 4,
                Decomposition::StoredBlocks => 5,
            };
            counts[i] += 1;
            // The flat kernels' names end in _flat, _flat32 or _flat64; the split rows are the tiles that split.
            assert_eq!(v.decomposition == Decomposition::FlatList, v.name.contains("_flat"), "{}", v.name);
            // (An SDDMM kernel's tile is one block: its configuration may split rows elsewhere.)
            assert_eq!(
                v.decomposition == Decomposition::SplitRows,
                v.config.splits_rows() && !v.name.contains("_flat") && v.op != Op::Sddmm
            );
        }
        // Every decomposition has kernels: 4 flat, 24 decode, 36 sm_90a tiles (20 forward, 16 A^T @ B), 96 SDDMM
        // (sm_80: 4 block sizes x 2 inputs x 2 outputs x 4 operand orders; sm_90a: 2 block sizes, the same types),
        // the rest the sm_80 template's (forward and A^T @ B).
        assert_eq!(counts[2..], [4, 24, 36, 96]);
        assert_eq!(v_count(Op::BsrSpmmT), 32 + 16);
        assert!(counts[0] > 0 && counts[1] > 0);
        // A decomposition that does not fit is refused: the flat list on a narrow tile, split rows on a wide one.
        let narrow = NARROW_CONFIGS[0];
        assert!(!Decomposition::FlatList.fits(&narrow, Tile::Narrow));
        assert!(!Decomposition::SplitRows.fits(&CONFIGS[0], Tile::Wide));
        assert!(!Decomposition::HopperTiles.fits(&CONFIGS[0], Tile::Wide));
    }

    #[test]
    fn hopper_virtual_rows_cover_each_part_once() {
        for (block_rows, split_rows, chunks) in [(10u32, 3u32, 4u32), (5, 0, 1), (7, 7, 2), (1, 1, 9), (6, 2, 1)] {
            let vrows = hopper_virtual_rows(block_rows, split_rows, chunks);
            let mut seen = [[0u32; 16]; 16];
            for v in 0..vrows {
                let (pos, part, split) = hopper_virtual_row(v, split_rows, chunks);
                assert!(pos < block_rows && split == (pos < split_rows), "{v}: {pos} {part} {split}");
                seen[pos as usize][part as usize] += 1;
            }
            for pos in 0..block_rows {
                let parts = if pos < split_rows { chunks } else { 1 };
                for part in 0..16 {
                    assert_eq!(seen[pos as usize][part as usize], u32::from(part < parts), "{pos} {part}");
                }
            }
        }
        // Slots and counters: distinct and below their bounds.
        let (split_rows, chunks, n_tiles, warps) = (3u32, 4u32, 5u32, 8u32);
        let mut slots = [false; 60];
        let mut counters = [false; 120];
        for pos in 0..split_rows {
            for n_tile in 0..n_tiles {
                for part in 0..chunks {
                    let s = hopper_split_slot(pos, part, chunks, n_tile, n_tiles) as usize;
                    assert!(!slots[s]);
                    slots[s] = true;
                }
                for w in 0..warps {
                    let c = hopper_split_counter(pos, n_tile, n_tiles, w, warps) as usize;
                    assert!(!counters[c]);
                    counters[c] = true;
                }
            }
        }
        assert!(slots.iter().all(|&s| s) && counters.iter().all(|&c| c));
    }

    #[test]
    fn every_configuration_is_valid() {
        for v in VARIANTS {
            assert_eq!(v.config.check(), Ok(()), "{}", v.name);
            assert_eq!(v.bs, v.config.bs, "{}", v.name);
        }
    }

    #[test]
    fn check_names_the_broken_rule() {
        let good = CONFIGS[2];
        assert_eq!(
            KernelConfig { bn: 120, ..good }.check(),
            Err(
                "bn must be a positive multiple of 16 * warps_n (NI even: B fragments come in pairs from ldmatrix.x4.trans)"
            )
        );
        assert!(KernelConfig { bk: 16, frag_db: true, ..good }.check().unwrap_err().contains("frag_db"));
        assert!(KernelConfig { bs: 48, ..good }.check().unwrap_err().contains("bs must be"));
        assert!(KernelConfig { stages: 1, ..good }.check().unwrap_err().contains("two stages"));
        assert!(KernelConfig { warps_m: 0, ..good }.check().is_err());
        let few_b_chunks = KernelConfig {
            bs: 64,
            bn: 16,
            bk: 16,
            warps_m: 4,
            warps_n: 1,
            stages: 2,
            frag_db: false,
            k_groups: 1,
            pipeline: Pipeline::CpAsync,
        };
        assert!(few_b_chunks.check().unwrap_err().contains("B stage tile"));
    }

    #[test]
    fn k_groups_double_the_threads_and_rings() {
        let two = narrow_config_for(64).unwrap();
        let one = KernelConfig { k_groups: 1, ..two };
        assert_eq!((two.k_groups, two.check()), (2, Ok(())));
        assert_eq!((two.threads(), one.threads()), (256, 128));
        assert_eq!(two.mma_threads(), one.mma_threads());
        assert_eq!(two.smem_bytes(), 2 * one.smem_bytes());
        // The groups' hand-over adds two CTA barriers; a split part's slot is the CTA's tile, as with one group.
        assert_eq!(two.expected_barriers(), one.expected_barriers() + 2);
        assert_eq!(two.split_slot_bytes(), one.split_slot_bytes());
        for bad in [KernelConfig { k_groups: 0, ..two }, KernelConfig { k_groups: 3, ..two }] {
            assert!(bad.check().unwrap_err().contains("k_groups"), "{bad:?}");
        }
        assert!(KernelConfig { frag_db: false, ..two }.check().unwrap_err().contains("k_groups"));
        // The flat list keeps the one-group tile of five stages; the other narrow tiles have one group.
        let flat = flat_config_for(64).unwrap();
        assert_eq!((flat.k_groups, flat.stages, flat.check()), (1, 5, Ok(())));
        for bs in [16, 32, 128] {
            assert_eq!(narrow_config_for(bs).unwrap().k_groups, 1, "bs {bs}");
        }
    }

    #[test]
    fn the_narrow_tile_serves_up_to_its_threshold() {
        for n in [0, 1, 16, NARROW_MAX_N] {
            assert_eq!(Tile::for_columns(n), Tile::Narrow, "n = {n}");
        }
        for n in [NARROW_MAX_N + 1, 128, usize::MAX] {
            assert_eq!(Tile::for_columns(n), Tile::Wide, "n = {n}");
        }
        for c in NARROW_CONFIGS {
            assert!(c.check().is_ok(), "{c:?}");
            assert!(
                c.bn <= 32 && config_for(c.bs).is_some_and(|w| w.bn > c.bn),
                "{c:?} is narrower than its wide tile"
            );
        }
    }

    #[test]
    fn decode_configs_follow_their_template() {
        for c in DECODE_CONFIGS {
            assert_eq!(c.check(), Ok(()), "{c:?}");
            assert_eq!(c.pipeline, Pipeline::Direct);
            // Every warp's partial sums fit, and the expected counts follow the unrolled main loop.
            assert_eq!(c.smem_bytes(), c.warps_m * 16 * c.bn * 4);
            assert_eq!(c.expected_mma_sync(), c.stages * 2 * c.bn / 8);
            assert_eq!(c.slices(), c.bs / 16);
            assert!(c.bn as usize >= DECODE_MAX_N, "{c:?} must cover DECODE_MAX_N columns in one tile");
        }
        let good = DECODE_CONFIGS[1];
        assert!(KernelConfig { bs: 16, ..good }.check().unwrap_err().contains("bs 32, 64 and 128"));
        assert!(KernelConfig { bk: 64, ..good }.check().unwrap_err().contains("bk = 32"));
        assert!(KernelConfig { warps_n: 2, ..good }.check().unwrap_err().contains("warps_n = 1"));
        assert!(KernelConfig { bn: 24, ..good }.check().unwrap_err().contains("columns per CTA"));
        assert!(KernelConfig { stages: 0, ..good }.check().unwrap_err().contains("in flight"));
        assert!(KernelConfig { warps_m: 33, ..good }.check().unwrap_err().contains("1024 threads"));
        assert_eq!(CONFIGS[2].slices(), 1);
    }

    #[test]
    fn templates_without_frag_db_name_it_before_the_thread_count() {
        // The sm_90a and decode templates share their last rules, each naming frag_db in its own words first.
        let hopper = HOPPER_CONFIGS[0];
        assert_eq!(KernelConfig { frag_db: true, ..hopper }.check(), Err("frag_db is an sm_80 schedule"));
        let decode = DECODE_CONFIGS[1];
        assert_eq!(
            KernelConfig { frag_db: true, warps_m: 33, ..decode }.check(),
            Err("frag_db is the cp.async template's schedule")
        );
        assert_eq!(KernelConfig { warps_m: 33, ..decode }.check(), Err("more than 1024 threads per CTA"));
    }

    #[test]
    fn variant_names_are_unique_and_found() {
        for (i, v) in VARIANTS.iter().enumerate() {
            assert!(VARIANTS[..i].iter().all(|w| w.name != v.name), "duplicate {}", v.name);
            assert_eq!(variant(v.name), *v);
        }
        let products = VARIANTS.iter().filter(|v| v.module == Module::Product);
        assert_eq!(
            products.count(),
            8 * (BLOCK_SIZES.len()
                + NARROW_CONFIGS.len()
                + MID_CONFIGS.len()
                + MID64_CONFIGS.len()
                + DECODE_CONFIGS.len())
                + FLAT_CONFIGS.len()
                + FLAT64_CONFIGS.len()
                + FLAT32_CONFIGS.len()
                // The backward products: A^T @ B on the wide tile (8 type combinations per block size), SDDMM (16:
                // two inputs, two outputs, four operand orders).
                + 8 * BLOCK_SIZES.len()
                + 16 * SDDMM_CONFIGS.len()
        );
        let hopper = VARIANTS.iter().filter(|v| v.module == Module::Hopper);
        // The short-row kernels: f32 C only; the backward products: A^T @ B (8 type combinations per block size)
        // and SDDMM (16).
        assert_eq!(
            hopper.count(),
            8 * HOPPER_CONFIGS.len()
                + 4 * HOPPER_SHORT_CONFIGS.len()
                + 8 * HOPPER_CONFIGS.len()
                + 16 * HOPPER_SDDMM_CONFIGS.len()
        );
        assert!(VARIANTS.iter().all(|v| v.tile != Tile::ShortRows || v.out == OutType::F32));
        // The flat block-list kernels: f16 inputs, row-major B, f32 C only.
        let flat_types = (InType::F16, Layout::RowMajor, OutType::F32);
        let flat = VARIANTS.iter().filter(|v| matches!(v.tile, Tile::Flat | Tile::Flat64 | Tile::Flat32));
        assert!(flat.clone().all(|v| (v.input, v.b_layout, v.out) == flat_types));
        assert_eq!(flat.count(), FLAT_CONFIGS.len() + FLAT32_CONFIGS.len() + FLAT64_CONFIGS.len());
        for v in VARIANTS.iter().filter(|v| v.module != Module::Tuning) {
            // Each product and sm_90a kernel runs its tile's configuration for its block size.
            let config = match (v.module, v.tile) {
                _ if v.op == Op::Sddmm && v.module == Module::Hopper => hopper_sddmm_config_for(v.bs),
                _ if v.op == Op::Sddmm => sddmm_config_for(v.bs),
                (Module::Hopper, Tile::Wide) => hopper_config_for(v.bs),
                (Module::Hopper, Tile::ShortRows) => hopper_short_config_for(v.bs),
                (Module::Hopper, _) | (_, Tile::ShortRows) => None,
                (_, Tile::Wide) => config_for(v.bs),
                (_, Tile::Narrow) => narrow_config_for(v.bs),
                (_, Tile::Mid) => mid_config_for(v.bs),
                (_, Tile::Mid64) => mid64_config_for(v.bs),
                (_, Tile::Decode) => decode_config_for(v.bs),
                (_, Tile::Flat) => flat_config_for(v.bs),
                (_, Tile::Flat64) => flat64_config_for(v.bs),
                (_, Tile::Flat32) => flat32_config_for(v.bs),
            };
            assert_eq!(Some(v.config), config, "{} runs another configuration than its tile's", v.name);
            // The 16-bit output is the input's own type.
            assert!(matches!(
                (v.input, v.out),
                (_, OutType::F32) | (InType::F16, OutType::F16) | (InType::Bf16, OutType::Bf16)
            ));
            let suffix = match v.tile {
                Tile::Wide => "",
                Tile::Narrow => "_n16",
                Tile::Mid => "_n32",
                Tile::Mid64 => "_n64",
                Tile::Decode => "_dec",
                Tile::ShortRows => "_short",
                Tile::Flat => "_flat",
                Tile::Flat64 => "_flat64",
                Tile::Flat32 => "_flat32",
            };
            // SDDMM kernels name X's and Y's orders (Y's is the transpose of the B operand's).
            let name = match v.op {
                Op::Sddmm => [v.input.name(), "_x", v.a_layout.name(), "_y", v.b_layout.transposed().name(), "_"],
                _ => [v.input.name(), "_b", v.b_layout.name(), "_", "", ""],
            };
            let name = [name[0], name[1], name[2], name[3], name[4], name[5], v.out.name(), suffix];
            let mut tail = [0u8; 32];
            let mut len = 0;
            for part in name {
                tail[len..len + part.len()].copy_from_slice(part.as_bytes());
                len += part.len();
            }
            assert!(v.name.as_bytes().ends_with(&tail[..len]), "{} is not named after its types", v.name);
        }
        let tuning = VARIANTS.iter().filter(|v| v.module == Module::Tuning).count();
        assert_eq!(tuning, TUNE_CONFIGS.len());
    }

    #[test]
    fn flat_ranges_cover_the_blocks_and_find_their_cta() {
        for nnzb in [1u32, 2, 3, 7, 64, 100, 1000, 14418] {
            for ctas in [1u32, 2, 3, 5, 132, 264, 396, 528].into_iter().filter(|&g| g <= nnzb) {
                let mut next = 0;
                for c in 0..ctas {
                    let (b0, b1) = flat_range(c, ctas, nnzb);
                    assert_eq!(b0, next, "nnzb {nnzb}, ctas {ctas}: ranges are contiguous");
                    assert!(b1 > b0, "nnzb {nnzb}, ctas {ctas}: CTA {c} holds a block");
                    for blk in b0..b1 {
                        assert_eq!(flat_cta_of(blk, ctas, nnzb), c, "nnzb {nnzb}, ctas {ctas}, block {blk}");
                    }
                    assert!(flat_slot(c, true, 0, 1) < 2 * ctas as u64 && flat_counter(c, 0, 1) < ctas as u64);
                    next = b1;
                }
                assert_eq!(next, nnzb);
            }
        }
    }

    #[test]
    fn params_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<BsrSpmmParams>(), 11 * 8 + 18 * 4);
        assert_eq!(core::mem::align_of::<BsrSpmmParams>(), 8);
        assert_eq!(core::mem::size_of::<BsrCheckParams>(), 4 * 8 + 4 * 4);
        assert_eq!(core::mem::size_of::<BsrTransposeParams>(), 5 * 8 + 4 * 4);
        // Three tensor maps, the 160 bytes of BsrSpmmParams, the tile counter's address and two u32.
        assert_eq!(core::mem::size_of::<HopperSpmmParams>(), 3 * 128 + 160 + 8 + 8);
        assert_eq!(core::mem::offset_of!(HopperSpmmParams, tmap_c), 2 * 128);
        assert_eq!(core::mem::offset_of!(HopperSpmmParams, tile_counter), 3 * 128 + 160);
    }

    #[test]
    fn hopper_shared_memory_fits() {
        for c in HOPPER_CONFIGS.into_iter().chain(HOPPER_SHORT_CONFIGS) {
            assert!(c.smem_bytes() <= SMEM_LIMIT, "{c:?}: {} bytes", c.smem_bytes());
            // The queue's entries are 16-byte aligned (st.shared.v4) and its barriers 8-byte aligned; the staging
            // buffers 1024-byte aligned (128-byte swizzle).
            assert_eq!(c.tile_queue_offset() % 16, 0);
            assert_eq!(c.out_barrier_offset() % 8, 0);
            assert_eq!(c.out_stage_offset() % 1024, 0);
            assert_eq!(c.consumer_warpgroups(), 2);
        }
        // bs 128 (4 stages of 48 KB) has room for two staging buffers per warpgroup, bs 64 (5 of 40 KB) for one.
        assert_eq!((HOPPER_CONFIGS[0].out_buffers(), HOPPER_CONFIGS[1].out_buffers()), (1, 2));
        // The short-row bs 64 kernel gives a stage for the second buffer.
        assert_eq!((HOPPER_SHORT_CONFIGS[0].bs, HOPPER_SHORT_CONFIGS[0].stages), (64, 4));
        assert_eq!(HOPPER_SHORT_CONFIGS[0].out_buffers(), 2);
        // C's map ends at whole 16 bytes: 4 f32 or 8 16-bit columns.
        assert_eq!(
            (c_map_columns(65, 4), c_map_columns(3, 4), c_map_columns(129, 2), c_map_columns(8, 2)),
            (64, 0, 128, 8)
        );
        assert!(HOPPER_CONFIGS[0].pingpong() && HOPPER_CONFIGS[0].threads() == 384);
        assert!(!HOPPER_CONFIGS[1].pingpong() && HOPPER_CONFIGS[1].threads() == 384);
    }
}
