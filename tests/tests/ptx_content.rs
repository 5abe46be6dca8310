//! CPU-side checks of the committed PTX: it holds every kernel the host launches, the instructions the design
//! promises (mma.sync m16n8k16, ldmatrix incl. .trans, cp.async.cg with wait_group), no local memory and no
//! trap (no reachable panic path). Freshness against the kernel source is `cargo xtask build-ptx --check`.

use sparsek::gpu::PTX_SM80;
use sparsek::gpu::layout::{BLOCK_SIZES, CONFIGS, KernelConfig, bank_group, ldsm_a_role, ldsm_b_role, raster, swizzle};

const PRIMITIVES: &str = include_str!("../ptx/primitives_sm80.ptx");

/// The body of `.entry name(...) { ... }` in a PTX text.
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx.find(&format!(".entry {name}(")).unwrap_or_else(|| panic!("no .entry {name} in the PTX"));
    let rest = &ptx[start..];
    let end = rest.find("\n}\n").map(|e| e + 3).unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn product_module_targets_sm80_ptx80() {
    assert!(PTX_SM80.contains(".version 8.0"), "PTX ISA version");
    assert!(PTX_SM80.contains(".target sm_80"), "target");
    assert!(PTX_SM80.contains(".address_size 64"));
}

#[test]
fn every_kernel_has_the_promised_instructions() {
    for cfg in CONFIGS {
        for out in ["f32", "f16"] {
            let name = format!("sparsek_bsr_bs{}_{out}", cfg.bs);
            let body = entry(PTX_SM80, &name);
            for needle in [
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                "cp.async.cg.shared.global",
                "cp.async.commit_group",
                "cp.async.wait_group",
                "bar.sync",
            ] {
                assert!(body.contains(needle), "{name} lacks {needle}");
            }
            for banned in [".local", "trap", "__local_depot", "call.uni"] {
                assert!(!body.contains(banned), "{name} contains {banned}");
            }
        }
    }
}

#[test]
fn no_local_memory_or_panic_anywhere() {
    for (module, ptx) in [
        ("sparsek_sm80", PTX_SM80),
        ("primitives_sm80", PRIMITIVES),
        ("tune_sm80", include_str!("../ptx/tune_sm80.ptx")),
    ] {
        for banned in [".local", "trap;", "__local_depot"] {
            assert!(!ptx.contains(banned), "{module} contains {banned}");
        }
    }
}

#[test]
fn primitives_module_covers_every_wrapper() {
    for needle in [
        "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "cp.async.cg.shared.global",
        "cp.async.wait_group 1",
        "cp.async.wait_group 0",
        "ld.global.v4.u32",
        "st.global.v4.u32",
        "ld.shared.v4.u32",
        "st.shared.v4.u32",
        "cvt.rn.f16x2.f32",
        "%laneid",
        ".extern .shared",
        ".shared .align 128 .b8 TEST_CP_ASYNC_SMEM[2048]",
    ] {
        assert!(PRIMITIVES.contains(needle), "primitives module lacks {needle}");
    }
}

#[test]
fn configs_are_valid_and_cover_every_block_size() {
    assert_eq!(CONFIGS.iter().map(|c| c.bs).collect::<Vec<_>>(), BLOCK_SIZES.to_vec());
    for c in CONFIGS {
        assert!(c.is_valid(), "{c:?}");
        assert!(c.smem_bytes() <= 227 * 1024, "{c:?} needs more shared memory than any sm_80+ GPU has");
        assert!(c.threads() <= 1024);
        assert_eq!((c.bk * c.bn / 8) % c.threads(), 0, "{c:?}: B chunks must split evenly over the threads");
    }
    assert!(!KernelConfig { bs: 64, bn: 120, bk: 32, warps_m: 2, warps_n: 2, stages: 4, frag_db: false }.is_valid());
    assert!(!KernelConfig { bs: 16, bn: 128, bk: 16, warps_m: 1, warps_n: 4, stages: 4, frag_db: true }.is_valid());
}

/// The swizzle is a bijection on every tile shape the kernels use, and the eight rows one ldmatrix phase reads
/// (the same logical chunk of 8 consecutive rows) land in 8 distinct bank groups: no bank conflicts.
#[test]
fn swizzle_is_a_conflict_free_bijection() {
    for chunks_per_row in [2u32, 4, 8, 16, 32] {
        let rows = 64;
        let mut seen = vec![false; (rows * chunks_per_row) as usize];
        for r in 0..rows {
            for ch in 0..chunks_per_row {
                let p = swizzle(r, ch, chunks_per_row) as usize;
                assert!(p / chunks_per_row as usize == r as usize, "swizzle leaves its row");
                assert!(!std::mem::replace(&mut seen[p], true), "cpr {chunks_per_row}: ({r}, {ch}) collides");
            }
        }
        for r0 in (0..rows).step_by(8) {
            for ch in 0..chunks_per_row {
                let mut groups: Vec<u32> = (r0..r0 + 8).map(|r| bank_group(r, ch, chunks_per_row)).collect();
                groups.sort();
                groups.dedup();
                assert_eq!(groups.len(), 8, "cpr {chunks_per_row}: rows {r0}.. chunk {ch} conflict");
            }
        }
    }
}

#[test]
fn ldmatrix_roles_cover_a_16x16_tile() {
    let mut a = [[0u32; 2]; 16];
    let mut b = [[0u32; 2]; 16];
    for lane in 0..32 {
        let (r, c) = ldsm_a_role(lane);
        a[r as usize][c as usize] += 1;
        let (k, c) = ldsm_b_role(lane);
        b[k as usize][c as usize] += 1;
    }
    assert!(a.iter().flatten().all(|&n| n == 1) && b.iter().flatten().all(|&n| n == 1));
}

/// The host's copy of the layout module is the kernels' file (build-ptx --check enforces it in CI too).
#[test]
fn host_layout_copy_matches_kernels() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let src = std::fs::read_to_string(root.join("kernels-gpu/src/layout.rs")).unwrap();
    let copy = std::fs::read_to_string(root.join("host/ptx/layout.rs")).unwrap();
    assert!(copy.ends_with(&src), "host/ptx/layout.rs is stale: run cargo xtask build-ptx");
}

/// Grouped rasterization visits every (row position, N tile) exactly once, for any group size (including
/// partial last groups, one group, and 0 = one group).
#[test]
fn raster_is_a_bijection() {
    for (rows, tiles) in [(1u32, 1u32), (7, 3), (64, 64), (128, 32), (33, 5)] {
        for group in [0u32, 1, 2, 5, 8, 34, 64, 1000] {
            let mut seen = vec![false; (rows * tiles) as usize];
            for cta in 0..rows * tiles {
                let (r, t) = raster(cta, rows, tiles, group);
                assert!(r < rows && t < tiles, "rows {rows} tiles {tiles} group {group}: cta {cta} -> ({r}, {t})");
                assert!(!std::mem::replace(&mut seen[(r * tiles + t) as usize], true), "({r}, {t}) twice");
            }
            if (group == 0 || group >= rows) && rows * tiles > 1 {
                assert_eq!(raster(1, rows, tiles, group), (1 % rows, 1 / rows), "plain order is row-fastest");
            }
        }
    }
}
