//! CPU-side checks of the committed PTX: it holds every kernel the host launches, the instructions the design
//! promises (mma.sync m16n8k16, ldmatrix incl. .trans, cp.async.cg with wait_group), no local memory and no
//! trap (no reachable panic path). Freshness against the kernel source is `cargo xtask build-ptx --check`.

use sparsek_layout::{
    BLOCK_SIZES, BSR_CHECK_KERNEL, BSR_TRANSPOSE_KERNEL, CONFIGS, HOPPER_CONFIGS, InType, KernelConfig, Layout, Module,
    Op, OutType, Pipeline, VARIANTS, bank_group, ldsm_a_role, ldsm_b_role, ldsm_bt_role, mma_b_element, raster,
    swizzle,
};

use std::sync::LazyLock;

/// The library's embedded modules and cubins are committed zstd-compressed (`<file>.zst`, written by `cargo xtask
/// build-ptx`): these are their decoded contents.
static PTX_SM80: LazyLock<String> = LazyLock::new(|| text(include_bytes!("../../host/ptx/sparsek_sm80.ptx.zst")));
static PTX_SM80_TUNE: LazyLock<String> =
    LazyLock::new(|| text(include_bytes!("../../host/ptx/sparsek_sm80_tune.ptx.zst")));
static PTX_SM90A: LazyLock<String> = LazyLock::new(|| text(include_bytes!("../../host/ptx/sparsek_sm90a.ptx.zst")));
const PRIMITIVES: &str = include_str!("../ptx/primitives_sm80.ptx");

/// One committed zstd frame, decoded (a panic names a corrupt file).
fn unzst(packed: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(packed)
        .expect("a committed .zst is a zstd frame (run `cargo xtask build-ptx`)")
        .read_to_end(&mut out)
        .expect("a committed .zst decodes (run `cargo xtask build-ptx`)");
    out
}

/// A committed zstd frame of PTX text, decoded.
fn text(packed: &[u8]) -> String {
    String::from_utf8(unzst(packed)).expect("PTX is UTF-8")
}

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
fn hopper_module_targets_sm90a_ptx83() {
    assert!(PTX_SM90A.contains(".version 8.3"), "PTX ISA version");
    assert!(PTX_SM90A.contains(".target sm_90a"), "target");
    assert!(PTX_SM90A.contains(".address_size 64"));
}

/// The sm_90a kernels hold what their design promises: TMA copies completing on mbarriers, parity waits, the
/// wgmma of their input type with A's and B's major orders, the register split between warpgroups, the launch bound
/// build-ptx adds and the 64-byte aligned tensor-map parameter.
#[test]
fn hopper_kernels_have_the_promised_instructions() {
    for v in VARIANTS.iter().filter(|v| v.module == Module::Hopper) {
        let (name, c) = (v.name, v.config);
        let body = entry(PTX_SM90A.as_str(), name);
        let ty = match v.input {
            InType::F16 => "f16",
            InType::Bf16 => "bf16",
        };
        let trans_b = if v.b_layout == Layout::RowMajor { 1 } else { 0 };
        // A MN-major (wgmma's transposed A): A^T @ B's stored blocks, a column-major X of the SDDMM.
        let trans_a = match v.op {
            Op::BsrSpmmT => 1,
            Op::Sddmm if v.a_layout == Layout::ColMajor => 1,
            _ => 0,
        };
        // One wgmma per k16 step over the warpgroup's columns (bs 64: 128, bs 128: 256).
        let wg_n = c.bn / c.warps_n;
        for needle in [
            format!("wgmma.mma_async.sync.aligned.m64n{wg_n}k16.f32.{ty}.{ty}"),
            format!("p, 1, 1, {trans_a}, {trans_b};"),
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes".into(),
            "mbarrier.try_wait.parity.shared::cta.b64".into(),
            "mbarrier.arrive.expect_tx.shared::cta.b64".into(),
            "mbarrier.init.shared::cta.b64".into(),
            // (LLVM prints the intrinsic's immediate after a tab: `wgmma.wait_group.sync.aligned \t1;`.)
            "wgmma.wait_group.sync.aligned \t1;".into(),
            "setmaxnreg.dec.sync.aligned.u32".into(),
            "setmaxnreg.inc.sync.aligned.u32".into(),
            format!(".maxntid {}, 1, 1", c.threads()),
            format!(".param .align 64 .b8 {name}_param_0["),
        ] {
            assert!(body.contains(&needle), "{name} lacks {needle}");
        }
        assert_eq!(
            body.matches("wgmma.mma_async").count() as u32,
            c.expected_wgmma(),
            "{name}: wgmma count (a duplicated or lost asm collective?)"
        );
        for banned in [".local", "trap", "__local_depot", "mma.sync", "cp.async.cg"] {
            assert!(!body.contains(banned), "{name} contains {banned}");
        }
        if let Some(line) = body.lines().find(|l| l.trim_start().starts_with("call")) {
            panic!("{name}: unexpected call `{}`", line.trim());
        }
    }
}

#[test]
fn every_kernel_has_the_promised_instructions() {
    for v in VARIANTS.iter().filter(|v| v.module != Module::Hopper) {
        let ptx = match v.module {
            Module::Product => PTX_SM80.as_str(),
            Module::Tuning => PTX_SM80_TUNE.as_str(),
            Module::Hopper => unreachable!("filtered"),
        };
        {
            let name = v.name;
            let body = entry(ptx, name);
            // The epilogue's paired stores: 8-byte f32 pairs, or two f16 packed in 32 bits.
            let store = match v.out {
                OutType::F32 => "st.global.v2.f32",
                OutType::F16 | OutType::Bf16 => "st.global.u32",
            };
            assert!(body.contains(store), "{name} lacks its {:?} store {store}", v.out);
            // Every load and store names its state space: the addresses come from the parameter struct as integers,
            // and generic ld/st there measured slower (docs/perf-notes.md).
            for line in body.lines().map(str::trim) {
                let op = line.split_whitespace().next().unwrap_or("");
                if let Some(rest) = op.strip_prefix("ld.").or_else(|| op.strip_prefix("st.")) {
                    let space = rest.split('.').next().unwrap_or("");
                    assert!(
                        ["global", "shared", "param", "const"].contains(&space),
                        "{name}: generic memory access `{line}`"
                    );
                }
            }
            let mma = match v.input {
                InType::F16 => "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                InType::Bf16 => "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
            };
            if v.config.pipeline == Pipeline::Direct {
                // The decode kernels: A straight into fragments with streamed (L1-bypassing, L2 evict-first)
                // 16-byte loads, B through the read-only path (16 bytes along k when column-major), no
                // shared-memory staging, one barrier before the warps' partial sums are added.
                for needle in [
                    mma,
                    "createpolicy.fractional.L2::evict_first.b64",
                    "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32",
                    "st.shared.v4.u32",
                    "ld.shared.v4.u32",
                    "bar.sync",
                ] {
                    assert!(body.contains(needle), "{name} lacks {needle}");
                }
                let b_load = match v.b_layout {
                    Layout::ColMajor => "ld.global.nc.v4.u32",
                    Layout::RowMajor => "ld.global.nc.u16",
                };
                assert!(body.contains(b_load), "{name} lacks its B load {b_load}");
                for banned in ["cp.async", "ldmatrix"] {
                    assert!(!body.contains(banned), "{name} stages through shared memory ({banned})");
                }
            } else {
                for needle in [mma, "cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group", "bar"]
                {
                    assert!(body.contains(needle), "{name} lacks {needle}");
                }
                // A row-major B is read with ldmatrix.trans; a column-major one (k contiguous, like A) without. A is
                // read plainly, except A^T @ B's stored blocks and an SDDMM's column-major X (staged k rows first).
                let a_trans = v.op == Op::BsrSpmmT || (v.op == Op::Sddmm && v.a_layout == Layout::ColMajor);
                let trans = body.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
                let plain = body.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16");
                let what = (v.op, v.a_layout, v.b_layout);
                assert_eq!(trans, v.b_layout == Layout::RowMajor || a_trans, "{name}: ldmatrix.trans for {what:?}");
                assert_eq!(plain, v.b_layout == Layout::ColMajor || !a_trans, "{name}: plain ldmatrix for {what:?}");
            }
            for banned in [".local", "trap", "__local_depot"] {
                assert!(!body.contains(banned), "{name} contains {banned}");
            }
            // No calls: everything is inlined (no panic or formatting path, no out-of-line function).
            if let Some(line) = body.lines().find(|l| l.trim_start().starts_with("call")) {
                panic!("{name}: unexpected call `{}`", line.trim());
            }
        }
    }
}

#[test]
fn no_local_memory_or_panic_anywhere() {
    for (module, ptx) in [
        ("sparsek_sm80", PTX_SM80.as_str()),
        ("primitives_sm80", PRIMITIVES),
        ("sparsek_sm80_tune", PTX_SM80_TUNE.as_str()),
        ("sparsek_sm90a", PTX_SM90A.as_str()),
    ] {
        // A mangled Rust symbol carries a crate hash that depends on the checkout's path: the PTX would differ
        // between clones and `build-ptx --check` would fail in CI (functions that are not kernels are unmangled).
        assert!(!ptx.contains("_RN"), "{module} contains a mangled Rust symbol");
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
        assert_eq!(c.check(), Ok(()), "{c:?}");
        assert!(c.smem_bytes() <= 227 * 1024, "{c:?} needs more shared memory than any sm_80+ GPU has");
        assert!(c.threads() <= 1024);
        assert_eq!((c.bk * c.bn / 8) % c.threads(), 0, "{c:?}: B chunks must split evenly over the threads");
    }
    assert!(
        KernelConfig {
            bs: 64,
            bn: 120,
            bk: 32,
            warps_m: 2,
            warps_n: 2,
            stages: 4,
            frag_db: false,
            k_groups: 1,
            pipeline: Pipeline::CpAsync
        }
        .check()
        .is_err()
    );
    assert!(
        KernelConfig {
            bs: 16,
            bn: 128,
            bk: 16,
            warps_m: 1,
            warps_n: 4,
            stages: 4,
            frag_db: true,
            k_groups: 1,
            pipeline: Pipeline::CpAsync
        }
        .check()
        .is_err()
    );
}

#[test]
fn hopper_configs_are_valid() {
    assert_eq!(HOPPER_CONFIGS.iter().map(|c| c.bs).collect::<Vec<_>>(), vec![64, 128]);
    for c in HOPPER_CONFIGS {
        assert_eq!(c.check(), Ok(()), "{c:?}");
        assert!(c.smem_bytes() <= 227 * 1024, "{c:?} needs more shared memory than an H100 has");
        // Two consumer warpgroups and a producer, whose registers fit the SM after setmaxnreg (40 + 2 x 232).
        assert_eq!(c.threads(), 384, "{c:?}");
    }
    let base = HOPPER_CONFIGS[0];
    for (bad, rule) in [
        (KernelConfig { bs: 32, warps_m: 2, ..base }, "bs 32"),
        (KernelConfig { bk: 32, ..base }, "bk 32"),
        (KernelConfig { warps_m: 8, ..base }, "warps_m != bs / 16"),
        (KernelConfig { bn: 512, warps_n: 2, ..base }, "256 columns per warpgroup, bn above a box"),
        (KernelConfig { bn: 192, warps_n: 1, ..base }, "192 columns per warpgroup"),
        (KernelConfig { stages: 1, ..base }, "one stage"),
        (KernelConfig { frag_db: true, ..base }, "frag_db"),
    ] {
        assert!(bad.check().is_err(), "{rule}: {bad:?} passed");
    }
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

/// The PTX modules define exactly the entry points of the variant table, module by module (the kernels build them
/// from the table; this catches a module that was not rebuilt after the table changed).
#[test]
fn modules_define_exactly_the_variant_table() {
    for (module, ptx) in [
        (Module::Product, PTX_SM80.as_str()),
        (Module::Tuning, PTX_SM80_TUNE.as_str()),
        (Module::Hopper, PTX_SM90A.as_str()),
    ] {
        let mut defined: Vec<&str> = ptx
            .lines()
            .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
            .map(|l| l.split('(').next().unwrap_or(l))
            .collect();
        let mut expected: Vec<&str> = VARIANTS.iter().filter(|v| v.module == module).map(|v| v.name).collect();
        if module == Module::Product {
            expected.extend([BSR_CHECK_KERNEL, BSR_TRANSPOSE_KERNEL]);
        }
        defined.sort_unstable();
        expected.sort_unstable();
        assert_eq!(defined, expected, "{module:?}");
    }
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

/// The column-major B's ldmatrix role (plain `ldmatrix.x4` of an `[n][k]` tile) yields exactly the mma B fragments
/// that `ldsm_b_role` yields with `.trans` from a `[k][n]` tile: simulate ldmatrix on both and compare.
#[test]
fn column_major_b_fragments_match_row_major() {
    // ldmatrix (non-trans) semantics: matrix j's row i address comes from lane 8j + i; lane t receives, in
    // register j, the elements (row t / 4, cols 2 (t % 4), 2 (t % 4) + 1) of matrix j. With .trans, lane t receives
    // (rows 2 (t % 4), 2 (t % 4) + 1, col t / 4).
    // Logical B sub-tile: 16 (k) x 16 (n); element value = k * 16 + n.
    for lane in 0..32u32 {
        for reg in 0..4u32 {
            for h in 0..2u32 {
                // Row-major [k][n] tile with .trans: addresses give (k row, n chunk).
                let (t, j) = (lane, reg);
                let src_lane = 8 * j + (t / 4) % 8; // not used for .trans: rows are k
                let _ = src_lane;
                let (k_row, n_chunk) = ldsm_b_role(8 * j + 2 * (t % 4) + h);
                let n = n_chunk * 8 + t / 4;
                let row_major = k_row * 16 + n;
                // Column-major [n][k] tile, plain: address of matrix j row (t / 4) gives (n row, k chunk).
                let (n_row, k_chunk) = ldsm_bt_role(8 * j + t / 4);
                let k = k_chunk * 8 + 2 * (t % 4) + h;
                let col_major = k * 16 + n_row;
                assert_eq!(row_major, col_major, "lane {lane} reg {reg} half {h}");
                // And that is the mma B element of fragment (reg / 2) of n-tile (reg / 2), half (reg % 2, h).
                let (mk, mn) = mma_b_element(lane, 2 * (reg % 2) + h);
                assert_eq!((k % 16, n_row % 8), (mk, mn), "lane {lane} reg {reg} half {h}");
            }
        }
    }
}

/// The committed cubins were assembled from the committed PTX: the manifest written by `cargo xtask build-ptx`
/// holds the FNV-1a 64 hash of the PTX they came from (a PTX change without fresh cubins would make the host load
/// SASS of other kernels). Each cubin is an ELF image that defines every product entry point.
#[test]
fn committed_cubins_come_from_the_committed_ptx() {
    let fnv = PTX_SM80.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let manifest = include_str!("../../host/ptx/sparsek_sm80.cubins.txt");
    let want = format!("ptx_fnv1a64 = {fnv:016x}");
    assert!(
        manifest.lines().any(|l| l.trim() == want),
        "host/ptx/sparsek_sm80.cubins.txt does not match the committed PTX ({want}): run `cargo xtask build-ptx`"
    );
    for cubin in [
        unzst(include_bytes!("../../host/ptx/sparsek_sm80.sm_80.cubin.zst")),
        unzst(include_bytes!("../../host/ptx/sparsek_sm80.sm_90a.cubin.zst")),
    ] {
        assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
        let has = |name: &str| {
            cubin.windows(name.len() + 1).any(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0)
        };
        for v in VARIANTS.iter().filter(|v| v.module == Module::Product) {
            assert!(has(v.name), "a cubin lacks {}", v.name);
        }
        assert!(has(BSR_CHECK_KERNEL) && has(BSR_TRANSPOSE_KERNEL));
    }
    let fnv =
        PTX_SM90A.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let manifest = include_str!("../../host/ptx/sparsek_sm90a.cubins.txt");
    assert!(
        manifest.lines().any(|l| l.trim() == format!("ptx_fnv1a64 = {fnv:016x}")),
        "host/ptx/sparsek_sm90a.cubins.txt does not match the committed PTX: run `cargo xtask build-ptx`"
    );
    let cubin = unzst(include_bytes!("../../host/ptx/sparsek_sm90a.sm_90a.cubin.zst"));
    assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
    for v in VARIANTS.iter().filter(|v| v.module == Module::Hopper) {
        let name = v.name.as_bytes();
        assert!(cubin.windows(name.len() + 1).any(|w| &w[..name.len()] == name && w[name.len()] == 0), "{}", v.name);
    }
}

/// Each embedded .zst is one frame that decodes, and compression pays: at least 4x (2.5 MB for ~50 MB in total,
/// 2026-11-27).
#[test]
fn embedded_kernels_are_compressed() {
    let files: [(&str, &[u8]); 6] = [
        ("sparsek_sm80.ptx", include_bytes!("../../host/ptx/sparsek_sm80.ptx.zst")),
        ("sparsek_sm80.sm_80.cubin", include_bytes!("../../host/ptx/sparsek_sm80.sm_80.cubin.zst")),
        ("sparsek_sm80.sm_90a.cubin", include_bytes!("../../host/ptx/sparsek_sm80.sm_90a.cubin.zst")),
        ("sparsek_sm80_tune.ptx", include_bytes!("../../host/ptx/sparsek_sm80_tune.ptx.zst")),
        ("sparsek_sm90a.ptx", include_bytes!("../../host/ptx/sparsek_sm90a.ptx.zst")),
        ("sparsek_sm90a.sm_90a.cubin", include_bytes!("../../host/ptx/sparsek_sm90a.sm_90a.cubin.zst")),
    ];
    for (name, packed) in files {
        let raw = unzst(packed);
        assert!(packed.len() * 4 < raw.len(), "{name}: {} packed bytes for {} raw", packed.len(), raw.len());
    }
}
