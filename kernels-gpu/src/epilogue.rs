//! The epilogue every BSR kernel shares (sm_80 and sm_90a): `C = act(alpha * acc + bias) + beta * C` from a
//! warp's accumulators in the m16n8 fragment layout (`layout::mma_c_element`: the `mma.sync` C fragment, which is
//! also each warp's slice of a `wgmma` m64nN accumulator), f32, f16 or bf16 C, row- or column-major; the input
//! element types (which `mma` a k16 step issues, how a bias element widens) and the index loads.

use crate::ptx;
use crate::tile::{AccTile, WarpTile};

/// The element type of A, B and the bias: which `mma` a k16 step issues and how a bias element widens.
pub(crate) trait Input {
    /// The warp's `d += a * b` on fragments of this type (the sm_90a kernels multiply with wgmma instead).
    #[cfg_attr(feature = "sm90", allow(dead_code))]
    fn mma(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]);
    /// One element (as bits) to f32, exactly.
    fn widen(bits: u16) -> f32;
}

/// f16 inputs.
pub(crate) struct F16In;

/// bf16 inputs (unused by the tuning module, which is f16 only).
#[cfg_attr(feature = "tune-kernels", allow(dead_code))]
pub(crate) struct Bf16In;

/// An element type the epilogue can write.
pub(crate) trait Output: Copy {
    /// Reads one element at `p`.
    ///
    /// # Safety
    /// `p` is a readable element of C.
    unsafe fn load(p: *const Self) -> f32;
    /// Writes one element at `p`.
    ///
    /// # Safety
    /// `p` is a writable element of C.
    unsafe fn store(p: *mut Self, v: f32);
    /// Writes columns (col, col + 1) of a row-major C at `p`.
    ///
    /// # Safety
    /// `p` and `p + 1` are writable elements of C, `p` aligned to two elements.
    unsafe fn store_pair(p: *mut Self, v0: f32, v1: f32);
    /// Bytes of one element.
    #[cfg_attr(not(feature = "sm90"), allow(dead_code))]
    const BYTES: u32;
    /// Writes columns (col, col + 1) of a row of a shared-memory staging tile at `addr` (the sm_90a kernels'
    /// stores through C's tensor map).
    ///
    /// # Safety
    /// `addr` is a shared address of two elements, aligned to two elements.
    #[cfg_attr(not(feature = "sm90"), allow(dead_code))]
    unsafe fn stage_pair(addr: u32, v0: f32, v1: f32);
    /// Two 16-bit elements rounded from `v0` and `v1` in one u32, the first in the low half (an `mma` C
    /// fragment's pair, for `stmatrix`). For f32, which no kernel packs, `v0`'s bits.
    #[cfg_attr(not(feature = "sm90"), allow(dead_code))]
    fn pack(v0: f32, v1: f32) -> u32;
}

impl Output for f32 {
    #[inline(always)]
    unsafe fn load(p: *const f32) -> f32 {
        // SAFETY: the caller guarantees the element is readable.
        unsafe { ptx::ld_global_f32(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: f32) {
        // SAFETY: the caller guarantees the element is writable.
        unsafe { ptx::st_global_f32(p, v) }
    }
    #[inline(always)]
    unsafe fn store_pair(p: *mut f32, v0: f32, v1: f32) {
        // SAFETY: the caller guarantees the elements are writable and 8-byte aligned.
        unsafe { ptx::st_global_v2_f32(p, v0, v1) }
    }
    const BYTES: u32 = 4;
    #[inline(always)]
    unsafe fn stage_pair(addr: u32, v0: f32, v1: f32) {
        // SAFETY: the caller guarantees the address.
        unsafe { ptx::st_shared_v2(addr, v0.to_bits(), v1.to_bits()) }
    }
    #[inline(always)]
    fn pack(v0: f32, _v1: f32) -> u32 {
        v0.to_bits()
    }
}

/// The [`Input`] and [`Output`] impls of a 16-bit float type: `$input` multiplies with `$mma`, `$t` holds the
/// type's bits in memory; `$widen` turns bits into f32 (exact), `$narrow` (`cvt.rn.<type>x2.f32`) rounds two f32
/// into one u32 of two elements, the low half the first.
macro_rules! half_float {
    (input $input:ty, output $t:ty, $mma:path, $widen:path, $narrow:path) => {
        impl Input for $input {
            #[inline(always)]
            fn mma(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
                $mma(d, a, b)
            }
            #[inline(always)]
            fn widen(bits: u16) -> f32 {
                $widen(bits)
            }
        }

        impl Output for $t {
            #[inline(always)]
            unsafe fn load(p: *const $t) -> f32 {
                // SAFETY: the caller guarantees the element is readable.
                $widen(unsafe { ptx::ld_global_u16(p.cast::<u16>()) })
            }
            #[inline(always)]
            unsafe fn store(p: *mut $t, v: f32) {
                // SAFETY: the caller guarantees the element is writable.
                unsafe { ptx::st_global_u16(p.cast::<u16>(), $narrow(v, 0.0) as u16) }
            }
            #[inline(always)]
            unsafe fn store_pair(p: *mut $t, v0: f32, v1: f32) {
                // SAFETY: the caller guarantees the elements are writable and 4-byte aligned.
                unsafe { ptx::st_global_u32(p.cast::<u32>(), $narrow(v0, v1)) }
            }
            const BYTES: u32 = 2;
            #[inline(always)]
            unsafe fn stage_pair(addr: u32, v0: f32, v1: f32) {
                // SAFETY: the caller guarantees the address.
                unsafe { ptx::st_shared_u32(addr, $narrow(v0, v1)) }
            }
            #[inline(always)]
            fn pack(v0: f32, v1: f32) -> u32 {
                $narrow(v0, v1)
            }
        }
    };
}

// f16: F16In's fragments, u16 outputs (the bits).
half_float!(input F16In, output u16, ptx::mma_m16n8k16_f32_f16, ptx::cvt_f32_f16, ptx::cvt_f16x2_f32);

/// bf16 output, as raw bits.
#[derive(Clone, Copy)]
#[repr(transparent)]
#[cfg_attr(feature = "tune-kernels", allow(dead_code))]
pub(crate) struct Bf16(u16);

half_float!(input Bf16In, output Bf16, ptx::mma_m16n8k16_f32_bf16, ptx::bf16_bits_to_f32, ptx::cvt_bf16x2_f32);

/// Entry `i` of a BSR index array whose entries are `1 << shift` bytes wide (4: u32, 8: u64), as u32. Entries are
/// little-endian and every valid value is below 2^32 (the host checks the structure's sizes), so the low 32 bits
/// of a u64 entry, at the entry's own address, are the value: one `ld.global.u32` for either width, no branch.
///
/// # Safety
/// `base` is the device address of an index array with more than `i` entries of that width.
#[inline(always)]
pub(crate) unsafe fn load_index(base: u64, i: u32, shift: u32) -> u32 {
    // SAFETY: forwarded.
    unsafe { ptx::ld_global_u32((base + ((i as u64) << shift)) as *const u32) }
}

/// The block row holding stored block `blk` (< nnzb) of a structure of `block_rows` rows: the largest `r` with
/// `row_ptr[r] <= blk` (empty rows before it share its pointer), by binary search.
///
/// # Safety
/// `row_ptr` holds `block_rows + 1` nondecreasing entries of `1 << shift` bytes, the last above `blk`.
#[inline(always)]
#[cfg_attr(feature = "tune-kernels", allow(dead_code))]
pub(crate) unsafe fn block_row_of(row_ptr: u64, block_rows: u32, blk: u32, shift: u32) -> u32 {
    // Invariant: row_ptr[lo] <= blk < row_ptr[hi].
    let (mut lo, mut hi) = (0u32, block_rows);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if unsafe { load_index(row_ptr, mid, shift) } <= blk {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// C and the epilogue: `C = act(alpha * acc + bias[row]) + beta * C`, columns >= n skipped, C not read when
/// beta == 0.
#[derive(Clone, Copy)]
pub(crate) struct Epilogue<O> {
    /// C: (M, ldc) row-major or (n, ldc) column-major.
    pub(crate) c: *mut O,
    /// C's leading dimension in elements.
    pub(crate) ldc: u32,
    /// Whether C is column-major.
    pub(crate) c_col_major: bool,
    /// Columns of C.
    pub(crate) n: u32,
    /// Scale of the product.
    pub(crate) alpha: f32,
    /// Scale of the old C (0: C is not read).
    pub(crate) beta: f32,
    /// Bias per row of C (input element type, as bits), or null.
    pub(crate) bias: *const u16,
    /// `layout::Activation` code.
    pub(crate) activation: u32,
}

impl<O> Epilogue<O> {
    /// The epilogue a kernel's parameters describe.
    #[inline(always)]
    pub(crate) fn from_params(p: &crate::layout::BsrSpmmParams) -> Self {
        Epilogue {
            c: p.c as *mut O,
            ldc: p.ldc,
            c_col_major: p.c_col_major != 0,
            n: p.n,
            alpha: p.alpha,
            beta: p.beta,
            bias: p.bias as *const u16,
            activation: p.activation,
        }
    }
}

/// log2(e), for `exp(x) = 2^(x log2 e)`.
const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// `x * sigmoid(z) = x / (1 + exp(-z))` through `ex2.approx` (relative error 2^-22) and `div.full` (2 ulp).
/// Saturates cleanly: a huge exponent gives `x / inf = -0` for very negative z, `x / 1 = x` for large z.
#[inline(always)]
fn x_sigmoid(x: f32, z: f32) -> f32 {
    ptx::div_full(x, 1.0 + ptx::ex2_approx(-LOG2_E * z))
}

/// ReLU (`layout::Activation::Relu`): NaN stays NaN.
#[inline(always)]
fn relu(x: f32) -> f32 {
    if x < 0.0 { 0.0 } else { x }
}

/// This thread's warp coordinates in the CTA's (WARPS_M, WARPS_N) warp grid, and its lane.
#[derive(Clone, Copy)]
pub(crate) struct WarpCoord {
    pub(crate) warp_m: u32,
    pub(crate) warp_n: u32,
    pub(crate) lane: u32,
}

/// GELU's (tanh approximation) sigmoid argument: `2u`, `u = sqrt(2 / pi) (x + 0.044715 x^3)`.
#[inline(always)]
fn gelu_arg(x: f32) -> f32 {
    2.0 * 0.797_884_6 * (x + 0.044_715 * x * x * x)
}

/// `act(x)` for the `layout::Activation` code `activation` (1..=3; 0 is handled by the caller), branch-free: one
/// `x * sigmoid(z)` with `z` chosen by a select (GELU: `2u`, SiLU: `x`), and ReLU selected after it, so the code
/// per element is one `ex2`, one `div.full` and a few selects, inlined (an out-of-line `.func` needs a name, and a
/// Rust function's name either carries a path-dependent crate hash or is exported).
#[inline(always)]
fn activate(x: f32, activation: u32) -> f32 {
    let z = if activation == 2 { gelu_arg(x) } else { x };
    let smooth = x_sigmoid(x, z);
    if activation == 1 { relu(x) } else { smooth }
}

/// `acc = f(alpha * acc + bias[row])` over the warp tile, `b[mi][half]` the bias of the rows `lane / 4 + 8 half`
/// of the tile's `mi`-th 16 rows.
#[inline(always)]
fn apply<const MI: usize, const NI: usize>(
    acc: &mut AccTile<MI, NI>,
    alpha: f32,
    b: &[[f32; 2]; MI],
    f: impl Fn(f32) -> f32,
) {
    for (acc_m, b_m) in acc.iter_mut().zip(b) {
        for acc_mn in acc_m.iter_mut() {
            for (i, v) in acc_mn.iter_mut().enumerate() {
                *v = f(alpha * *v + b_m[i / 2]);
            }
        }
    }
}

/// `acc = act(alpha * acc + bias[row])` for every accumulator of the warp tile (rows from `row_base`), in
/// registers. The bias rows are loaded first, then one straight loop over the elements runs, the activation
/// chosen once outside it. A choice per element (a branch around each element's activation)
/// made the unrolled epilogue a chain of short blocks whose instruction fetch stalled both warpgroups: a bias alone
/// cost sparsek.linear 31-35% at 4096 tokens (docs/perf-notes.md, "Issue 43: the bias epilogue"). The sm_90a
/// kernels run a loop per activation; in the sm_80 module that made register-tight kernels spill, so it has two
/// (none, or [`activate`]'s branch-free selects).
///
/// # Safety
/// `bias` is null or holds every row of the tile.
#[inline(always)]
pub(crate) unsafe fn scale_bias_activate<const MI: usize, const NI: usize, I: Input>(
    acc: &mut AccTile<MI, NI>,
    alpha: f32,
    bias: *const u16,
    activation: u32,
    row_base: u32,
    lane: u32,
) {
    let mut b = [[0.0f32; 2]; MI];
    if !bias.is_null() {
        for (mi, b_m) in b.iter_mut().enumerate() {
            for (half, v) in b_m.iter_mut().enumerate() {
                let row = row_base + mi as u32 * 16 + lane / 4 + 8 * half as u32;
                // SAFETY: the bias holds the tile's rows.
                *v = I::widen(unsafe { ptx::ld_global_u16(bias.add(row as usize)) });
            }
        }
    }
    if cfg!(feature = "sm90") {
        // The sm_90a kernels (registers to spare) run a loop per activation: SiLU without GELU's cubic and the
        // selects.
        match activation {
            0 => apply(acc, alpha, &b, |x| x),
            1 => apply(acc, alpha, &b, relu),
            2 => apply(acc, alpha, &b, |x| x_sigmoid(x, gelu_arg(x))),
            _ => apply(acc, alpha, &b, |x| x_sigmoid(x, x)),
        }
    } else if activation == 0 {
        apply(acc, alpha, &b, |x| x);
    } else {
        apply(acc, alpha, &b, |x| activate(x, activation));
    }
}

/// EPILOGUE (registers -> global): `C = act(alpha * acc + bias[row]) + beta * C` for the warp's (WM, WN) tile of
/// the CTA's output tile, whose first element is C's (row0, col0); columns >= n are skipped and C is not read
/// when beta == 0. First `act(alpha * acc + bias)` in registers, then the stores: a row-major C takes each lane's
/// column pair in one store; a column-major C one element at a time (the eight lanes of a column pair write eight
/// consecutive rows: 32 contiguous bytes of f32).
///
/// # Safety
/// `epi` and the CTA tile satisfy the kernel's preconditions (every row of the tile exists in C and in the bias).
#[inline(always)]
pub(crate) unsafe fn store_epilogue<const MI: usize, const NI: usize, O: Output, I: Input>(
    epi: &Epilogue<O>,
    acc: &mut AccTile<MI, NI>,
    row0: u32,
    col0: u32,
    warp: WarpCoord,
) {
    let row_base = row0 + warp.warp_m * WarpTile::<MI, NI>::WM;
    let col_base = col0 + warp.warp_n * WarpTile::<MI, NI>::WN + 2 * (warp.lane % 4);
    let (alpha, bias, lane) = (epi.alpha, epi.bias, warp.lane);
    // SAFETY (whole body): every row and column addressed below is inside C (columns < n) and the bias.
    if alpha != 1.0 || !bias.is_null() || epi.activation != 0 {
        unsafe { scale_bias_activate::<MI, NI, I>(acc, alpha, bias, epi.activation, row_base, lane) };
    }
    let (beta, ldc) = (epi.beta, epi.ldc as usize);
    if epi.c_col_major {
        for (mi, acc_m) in acc.iter().enumerate() {
            for (ni, acc_mn) in acc_m.iter().enumerate() {
                let col = col_base + ni as u32 * 8;
                for j in 0..2 {
                    if col + (j as u32) < epi.n {
                        for half in 0..2 {
                            let row = row_base + mi as u32 * 16 + lane / 4 + 8 * half as u32;
                            let p = unsafe { epi.c.add((col as usize + j) * ldc + row as usize) };
                            let mut v = acc_mn[2 * half + j];
                            if beta != 0.0 {
                                v += beta * unsafe { O::load(p) };
                            }
                            unsafe { O::store(p, v) };
                        }
                    }
                }
            }
        }
        return;
    }
    for (mi, acc_m) in acc.iter().enumerate() {
        for (ni, acc_mn) in acc_m.iter().enumerate() {
            let col = col_base + ni as u32 * 8;
            if col < epi.n {
                let two = col + 1 < epi.n;
                for half in 0..2 {
                    let row = row_base + mi as u32 * 16 + lane / 4 + 8 * half as u32;
                    let p = unsafe { epi.c.add(row as usize * ldc + col as usize) };
                    let (mut v0, mut v1) = (acc_mn[2 * half], acc_mn[2 * half + 1]);
                    if beta != 0.0 {
                        v0 += beta * unsafe { O::load(p) };
                        if two {
                            v1 += beta * unsafe { O::load(p.add(1)) };
                        }
                    }
                    if two {
                        unsafe { O::store_pair(p, v0, v1) };
                    } else {
                        unsafe { O::store(p, v0) };
                    }
                }
            }
        }
    }
}
