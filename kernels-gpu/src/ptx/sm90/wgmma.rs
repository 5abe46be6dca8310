//! Warpgroup matrix multiply-accumulate (PTX ISA §9.7.15 `wgmma`): 128 threads (4 consecutive warps, the first
//! a multiple of 4) multiply a 64 x N tile of A by an N-wide tile of B, both read from shared memory through
//! 64-bit matrix descriptors, into f32 accumulators held in registers, asynchronously.
//!
//! Accumulator layout (m64nN, f32): warp `w` of the warpgroup owns rows `16 w .. 16 w + 16`; its register
//! `4 j + r` (here `d[j][r]`, n8 tile `j`) is row `16 w + lane / 4 + 8 (r / 2)`, column `8 j + 2 (lane % 4) +
//! r % 2`: the `mma.sync.m16n8` C fragment of each n8 tile (`layout::mma_c_element`), so the epilogue of the
//! sm_80 kernels serves these accumulators unchanged.
//!
//! Every function here is a warpgroup collective (`.sync.aligned`): all 128 threads execute it, in
//! warpgroup-uniform control flow. The fence, commit and wait are NVVM intrinsics (convergent); `mma_async` is
//! asm, which rustc does not mark convergent, and build-ptx counts every one of them per kernel.

use core::arch::asm;

/// `asm!` with the templates `$template`, then the registers of the accumulator rows `$row` as `inout` operands
/// (row `i`'s four registers are operands `4 i .. 4 i + 3`, in order), then the further operands and options.
macro_rules! acc_asm {
    ($($template:expr),+; [$($row:expr),+]; $($rest:tt)*) => {
        asm!(
            $($template,)+
            $(inout(reg32) $row[0], inout(reg32) $row[1], inout(reg32) $row[2], inout(reg32) $row[3],)+
            $($rest)*
        )
    };
}

/// The accumulators of one `m64n128` piece, per thread: 16 n8 tiles of 4 f32 (the m16n8 fragment layout).
pub type WgmmaAcc = [[f32; 4]; 16];

/// One `wgmma.mma_async.sync.aligned.<shape>.f32.<t>.<t>` (`t` bf16 when `$bf16`, else f16): the accumulator rows
/// in and out (the operands `$d_list` names, from `{0}`), the descriptors `$a` and `$b`, the scale-d predicate from
/// operand `$scale` (`$scale_d`), and A's and B's major orders `$trans_a`, `$trans_b` as immediates.
macro_rules! mma_async {
    ($shape:literal, $bf16:expr, $scale:literal, $d_list:literal; [$($row:expr),+]; $($args:expr),+) => {
        if $bf16 {
            mma_async!(@ "bf16", $shape, $scale, $d_list; [$($row),+]; $($args),+)
        } else {
            mma_async!(@ "f16", $shape, $scale, $d_list; [$($row),+]; $($args),+)
        }
    };
    (@ $t:literal, $shape:literal, $scale:literal, $d_list:literal; [$($row:expr),+];
     $a:expr, $b:expr, $scale_d:expr, $trans_a:expr, $trans_b:expr) => {
        acc_asm!(
            concat!("{{ .reg .pred p; setp.ne.u32 p, {", $scale, "}, 0;"),
            concat!("wgmma.mma_async.sync.aligned.", $shape, ".f32.", $t, ".", $t, $d_list);
            [$($row),+];
            in(reg64) $a,
            in(reg64) $b,
            in(reg32) $scale_d,
            ta = const $trans_a,
            tb = const $trans_b,
            options(nostack)
        )
    };
}

/// A shared-memory matrix descriptor with 128-byte swizzle: start address, leading byte offset (LBO) and stride
/// byte offset (SBO), each encoded as `(x & 0x3FFFF) >> 4` (bits 0-13, 16-29, 32-45); base offset 0 (stage
/// buffers are 1024-byte aligned); swizzle mode 1 (128B) in bits 62-63. Facts verified on an H100
/// (../shared/HOPPER.md):
/// - K-major tile (rows of 64 16-bit k values, 128 bytes, 8-row swizzle atoms of 1024 bytes): start = tile +
///   32 * k16 step, LBO 16 (unused), SBO 1024;
/// - MN-major B (a row-major K x N tile as TMA boxes of 64 k rows x 64 n columns, 8 KB each): start = tile +
///   2048 * k16 step, LBO 8192 (the next 64 columns), SBO 1024 (the next 8 k rows); an MN-major A (64 rows of
///   a warpgroup: one such box) the same.
#[inline(always)]
pub const fn smem_desc_128b(addr: u32, lbo: u32, sbo: u32) -> u64 {
    const fn enc(x: u32) -> u64 {
        ((x & 0x3FFFF) >> 4) as u64
    }
    enc(addr) | (enc(lbo) << 16) | (enc(sbo) << 32) | (1u64 << 62)
}

// The group collectives through LLVM's NVVM intrinsics, which LLVM declares `convergent` (inline asm is not: LLVM
// may copy an asm block into both arms of a branch, ../shared/HOPPER.md). Each is also a side effect, so it keeps its
// order with the `wgmma.mma_async` and operand-fence asm statements around it.
unsafe extern "C" {
    #[link_name = "llvm.nvvm.wgmma.fence.sync.aligned"]
    fn nvvm_wgmma_fence();
    #[link_name = "llvm.nvvm.wgmma.commit_group.sync.aligned"]
    fn nvvm_wgmma_commit_group();
    #[link_name = "llvm.nvvm.wgmma.wait_group.sync.aligned"]
    fn nvvm_wgmma_wait_group(n: i64);
}

/// `wgmma.fence.sync.aligned`: orders this warpgroup's register writes (zeroed or read accumulators) before the
/// `wgmma.mma_async` that follow; issued before the first wgmma of each k-tile.
#[inline(always)]
pub fn wgmma_fence() {
    // SAFETY: a fence; the warpgroup-uniform control flow is the caller's contract (module docs).
    unsafe { nvvm_wgmma_fence() };
}

/// `wgmma.commit_group.sync.aligned`: closes the group of this warpgroup's outstanding `wgmma.mma_async`.
#[inline(always)]
pub fn wgmma_commit_group() {
    // SAFETY: as above.
    unsafe { nvvm_wgmma_commit_group() };
}

/// `wgmma.wait_group.sync.aligned N`: waits until at most `N` of this warpgroup's committed groups are pending
/// (their shared-memory reads and accumulator writes are done for the others).
#[inline(always)]
pub fn wgmma_wait_group<const N: u32>() {
    // SAFETY: as above; N is a constant at every call site (the intrinsic takes an immediate).
    unsafe { nvvm_wgmma_wait_group(N as i64) };
}

/// Names the accumulators `d` in an (empty) asm statement after a [`wgmma_wait_group`], so the compiler reads
/// them only after the wait (asm statements keep their order): CUTLASS's `warpgroup_fence_operand`.
#[inline(always)]
pub fn wgmma_fence_operand(d: &mut WgmmaAcc) {
    // SAFETY: emits only a PTX comment.
    unsafe {
        acc_asm!(
            "// wgmma accumulators: {0} {1} {2} {3} {4} {5} {6} {7} {8} {9} {10} {11} {12} {13} {14} {15} {16} {17} {18} {19} {20} {21} {22} {23} {24} {25} {26} {27} {28} {29} {30} {31} {32} {33} {34} {35} {36} {37} {38} {39} {40} {41} {42} {43} {44} {45} {46} {47} {48} {49} {50} {51} {52} {53} {54} {55} {56} {57} {58} {59} {60} {61} {62} {63}";
            [d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]];
            options(nostack)
        )
    };
}

/// `wgmma.mma_async.sync.aligned.m64n128k16.f32.{f16|bf16}`: `d = a x b + (scale_d != 0 ? d : 0)` for one k16
/// step, A (64 x 16) through descriptor `a`, K-major (`TRANS_A = 0`: a row-major A staged as M x K) or MN-major
/// (`TRANS_A = 1`: a column-major A staged as K x M, as 64 x 64 boxes of 64 k rows), B (16 x 128) through descriptor
/// `b`, K-major (`TRANS_B = 0`: a column-major B staged as N x K) or MN-major (`TRANS_B = 1`: a row-major B staged
/// as K x N). The transposes are the 16-bit types' (f16, bf16).
/// Asynchronous: `d` is being written until a [`wgmma_wait_group`] covers the group this joins.
///
/// # Safety
/// Warpgroup collective; the descriptors address landed shared-memory tiles of this CTA laid out as they say.
#[inline(always)]
pub unsafe fn wgmma_m64n128k16<const BF16: bool, const TRANS_A: u32, const TRANS_B: u32>(
    d: &mut WgmmaAcc,
    a: u64,
    b: u64,
    scale_d: u32,
) {
    const { assert!(TRANS_A <= 1 && TRANS_B <= 1, "imm-trans-a and imm-trans-b are 0 or 1") };
    // SAFETY: the caller guarantees the descriptors and convergence.
    unsafe {
        mma_async!(
            "m64n128k16", BF16, 66,
            " {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}, {32}, {33}, {34}, {35}, {36}, {37}, {38}, {39}, {40}, {41}, {42}, {43}, {44}, {45}, {46}, {47}, {48}, {49}, {50}, {51}, {52}, {53}, {54}, {55}, {56}, {57}, {58}, {59}, {60}, {61}, {62}, {63}}}, {64}, {65}, p, 1, 1, {ta}, {tb}; }}";
            [d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12],
             d[13], d[14], d[15]];
            a, b, scale_d, TRANS_A, TRANS_B
        )
    }
}

/// `wgmma.mma_async.sync.aligned.m64n256k16.f32.{f16|bf16}`: as [`wgmma_m64n128k16`] over 256 columns, whose
/// accumulators are the two m64n128 pieces `d[0]` (columns 0-127) and `d[1]` (128-255), in register order.
///
/// # Safety
/// As [`wgmma_m64n128k16`].
#[inline(always)]
pub unsafe fn wgmma_m64n256k16<const BF16: bool, const TRANS_A: u32, const TRANS_B: u32>(
    d: &mut [WgmmaAcc; 2],
    a: u64,
    b: u64,
    scale_d: u32,
) {
    const { assert!(TRANS_A <= 1 && TRANS_B <= 1, "imm-trans-a and imm-trans-b are 0 or 1") };
    // SAFETY: the caller guarantees the descriptors and convergence.
    unsafe {
        mma_async!(
            "m64n256k16", BF16, 130,
            " {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}, {32}, {33}, {34}, {35}, {36}, {37}, {38}, {39}, {40}, {41}, {42}, {43}, {44}, {45}, {46}, {47}, {48}, {49}, {50}, {51}, {52}, {53}, {54}, {55}, {56}, {57}, {58}, {59}, {60}, {61}, {62}, {63}, {64}, {65}, {66}, {67}, {68}, {69}, {70}, {71}, {72}, {73}, {74}, {75}, {76}, {77}, {78}, {79}, {80}, {81}, {82}, {83}, {84}, {85}, {86}, {87}, {88}, {89}, {90}, {91}, {92}, {93}, {94}, {95}, {96}, {97}, {98}, {99}, {100}, {101}, {102}, {103}, {104}, {105}, {106}, {107}, {108}, {109}, {110}, {111}, {112}, {113}, {114}, {115}, {116}, {117}, {118}, {119}, {120}, {121}, {122}, {123}, {124}, {125}, {126}, {127}}}, {128}, {129}, p, 1, 1, {ta}, {tb}; }}";
            [d[0][0], d[0][1], d[0][2], d[0][3], d[0][4], d[0][5], d[0][6], d[0][7], d[0][8], d[0][9],
             d[0][10], d[0][11], d[0][12], d[0][13], d[0][14], d[0][15], d[1][0], d[1][1], d[1][2],
             d[1][3], d[1][4], d[1][5], d[1][6], d[1][7], d[1][8], d[1][9], d[1][10], d[1][11],
             d[1][12], d[1][13], d[1][14], d[1][15]];
            a, b, scale_d, TRANS_A, TRANS_B
        )
    }
}
