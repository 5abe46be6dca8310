//! The transposed index of a BSR structure, built on the device (`layout::BSR_TRANSPOSE_KERNEL`): three launches of
//! one entry point, the phases of `layout::BsrTransposeParams` (count per block column, running sum, fill). One
//! warp per block column walks the block rows 32 at a time, each lane binary-searching one row's sorted `col_idx`
//! for the column; a ballot gives the column's blocks of those rows in row order, so the fill is deterministic and
//! the same as the host's counting sort (`format::BsrTranspose`).

use crate::layout::{BSR_TRANSPOSE_THREADS, BsrTransposeParams, transpose_phase};
use crate::ptx;

/// Entry `i` of an index array of 32- or 64-bit entries (every valid value is below 2^32).
///
/// # Safety
/// `base` is the device address of an index array with more than `i` entries of that width.
#[inline(always)]
unsafe fn entry(base: u64, i: u32, index64: bool) -> u32 {
    let shift = if index64 { 3 } else { 2 };
    // SAFETY: forwarded; little-endian, so the low 32 bits of a u64 entry are at its own address.
    unsafe { ptx::ld_global_u32((base + ((i as u64) << shift)) as *const u32) }
}

/// Where block row `r` stores block column `j`: its position among the stored blocks, if it does.
///
/// # Safety
/// `r < block_rows` of a valid structure.
#[inline(always)]
unsafe fn find(p: &BsrTransposeParams, r: u32, j: u32) -> Option<u32> {
    let index64 = p.index64 != 0;
    // SAFETY (whole body): r + 1 <= block_rows indexes row_ptr; positions searched lie in [begin, end) <= nnzb.
    let (mut lo, mut hi) = unsafe { (entry(p.row_ptr, r, index64), entry(p.row_ptr, r + 1, index64)) };
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let c = unsafe { entry(p.col_idx, mid, index64) };
        if c == j {
            return Some(mid);
        }
        if c < j {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    None
}

/// Phases 0 and 2: warp `w` takes block column `w`, its lanes rows `base + lane` for `base = 0, 32, ...`.
///
/// # Safety
/// As the kernel's.
#[inline(always)]
unsafe fn by_column(p: &BsrTransposeParams, fill: bool) {
    let lane = ptx::lane_id();
    let j = (ptx::block_idx_x() * BSR_TRANSPOSE_THREADS + ptx::thread_idx_x()) / 32;
    if j >= p.block_cols {
        return; // warp-uniform: every lane of the warp has the same j
    }
    let (col_ptr, row_idx, perm) = (p.col_ptr as *mut u32, p.row_idx as *mut u32, p.perm as *mut u32);
    // Phase 2 starts at the column's first entry.
    let mut next = if fill { unsafe { ptx::ld_global_u32(col_ptr.add(j as usize)) } } else { 0 };
    let mut base = 0;
    while base < p.block_rows {
        let r = base + lane;
        let found = if r < p.block_rows { unsafe { find(p, r, j) } } else { None };
        let mask = ptx::ballot(found.is_some());
        if let (true, Some(pos)) = (fill, found) {
            let at = next + (mask & ((1u32 << lane) - 1)).count_ones();
            // SAFETY: `at` < col_ptr[j + 1] <= nnzb: the column's blocks, counted in phase 0, in row order.
            unsafe {
                ptx::st_global_u32(row_idx.add(at as usize), r);
                ptx::st_global_u32(perm.add(at as usize), pos);
            }
        }
        next += mask.count_ones();
        base += 32;
    }
    if !fill && lane == 0 {
        // SAFETY: j + 1 <= block_cols indexes col_ptr.
        unsafe { ptx::st_global_u32(col_ptr.add(j as usize + 1), next) };
    }
}

/// Phase 1: one CTA; thread `t` sums its contiguous chunk of `col_ptr[1..=block_cols]`, thread 0 runs the sums of
/// the chunks in order, then each thread writes its chunk's running sum.
///
/// # Safety
/// As the kernel's; launched with one CTA of `BSR_TRANSPOSE_THREADS` threads and `16 * BSR_TRANSPOSE_THREADS`
/// bytes of dynamic shared memory (one 16-byte slot per thread: the shared-memory wrappers move 16 bytes).
#[inline(always)]
unsafe fn scan(p: &BsrTransposeParams) {
    let t = ptx::thread_idx_x();
    let n = p.block_cols;
    let chunk = n.div_ceil(BSR_TRANSPOSE_THREADS);
    let (lo, hi) = ((t * chunk).min(n), ((t + 1) * chunk).min(n));
    let counts = (p.col_ptr as *mut u32).wrapping_add(1);
    let mut sum = 0u32;
    let mut i = lo;
    while i < hi {
        sum += unsafe { ptx::ld_global_u32(counts.add(i as usize)) };
        i += 1;
    }
    let smem = ptx::dynamic_smem_base();
    unsafe { ptx::st_shared_v4(smem + 16 * t, [sum, 0, 0, 0]) };
    ptx::bar_sync();
    if t == 0 {
        let mut run = 0u32;
        let mut k = 0;
        while k < BSR_TRANSPOSE_THREADS {
            let v = unsafe { ptx::ld_shared_v4(smem + 16 * k) }[0];
            unsafe { ptx::st_shared_v4(smem + 16 * k, [run, 0, 0, 0]) };
            run += v;
            k += 1;
        }
    }
    ptx::bar_sync();
    let mut run = unsafe { ptx::ld_shared_v4(smem + 16 * t) }[0];
    let mut i = lo;
    while i < hi {
        // SAFETY: i < block_cols, so counts[i] = col_ptr[i + 1] exists.
        run += unsafe { ptx::ld_global_u32(counts.add(i as usize)) };
        unsafe { ptx::st_global_u32(counts.add(i as usize), run) };
        i += 1;
    }
}

/// The transposed-index kernel; see the module docs and `layout::BsrTransposeParams`.
///
/// # Safety
/// Launched by the host (`Gpu::transpose_index`) for a valid structure, with the arrays the parameters describe,
/// phases 0, 1, 2 in order on one stream, phase 1 as one CTA.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sparsek_bsr_transpose(p: BsrTransposeParams) {
    const { assert!(crate::layout::str_eq(crate::layout::BSR_TRANSPOSE_KERNEL, "sparsek_bsr_transpose")) };
    // SAFETY (each phase): the kernel's contract.
    match p.phase {
        transpose_phase::COUNT => unsafe { by_column(&p, false) },
        transpose_phase::SCAN => unsafe { scan(&p) },
        _ => unsafe { by_column(&p, true) },
    }
}
