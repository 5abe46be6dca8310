//! The device-side BSR structure check (`layout::BSR_CHECK_KERNEL`), for callers who hand sparsek index arrays
//! they cannot vouch for (a PyTorch tensor, a buffer from another library): one thread per block row, a 1-D grid
//! of `ceil(block_rows / BSR_CHECK_THREADS)` CTAs. See `layout::BsrCheckParams` for what is checked and how the
//! first violation is reported (an atomic min over `(block_row << 3) | code`, so the answer is the same whatever
//! the schedule).

use crate::layout::{BsrCheckParams, check_code};
use crate::ptx;

/// Entry `i` of an index array of 32- or 64-bit entries, widened to u64.
///
/// # Safety
/// `base` is the device address of an index array with more than `i` entries of the given width.
#[inline(always)]
unsafe fn entry(base: u64, i: u64, index64: bool) -> u64 {
    // SAFETY: forwarded.
    unsafe {
        if index64 {
            ptx::ld_global_u64((base as *const u64).add(i as usize))
        } else {
            ptx::ld_global_u32((base as *const u32).add(i as usize)) as u64
        }
    }
}

/// Checks block row `r` (and, for r == 0, `row_ptr[0]`; for the last row, `row_ptr[block_rows] == nnzb`); returns
/// the violation code, if any.
///
/// # Safety
/// `row_ptr` has `block_rows + 1` entries, `col_idx` `nnzb` entries; `r < block_rows`.
#[inline(always)]
unsafe fn check_row(p: &BsrCheckParams, r: u32) -> Option<u64> {
    let index64 = p.index64 != 0;
    let limit = u32::MAX as u64;
    // SAFETY (whole body): r < block_rows, so r + 1 <= block_rows indexes row_ptr; col_idx is read only at
    // positions in [begin, end) with end <= nnzb.
    let begin = unsafe { entry(p.row_ptr, r as u64, index64) };
    let end = unsafe { entry(p.row_ptr, r as u64 + 1, index64) };
    if r == 0 && begin != 0 {
        return Some(check_code::FIRST_NOT_ZERO);
    }
    if begin > limit || end > limit {
        return Some(check_code::TOO_LARGE);
    }
    if end < begin {
        return Some(check_code::DECREASING);
    }
    if end > p.nnzb {
        return Some(check_code::BEYOND_NNZB);
    }
    let mut prev: u64 = 0;
    let mut i = begin;
    while i < end {
        let c = unsafe { entry(p.col_idx, i, index64) };
        if c > limit {
            return Some(check_code::TOO_LARGE);
        }
        if c >= p.block_cols as u64 {
            return Some(check_code::COL_OUT_OF_RANGE);
        }
        if i > begin && c <= prev {
            return Some(check_code::COL_NOT_INCREASING);
        }
        prev = c;
        i += 1;
    }
    None
}

/// The structure check kernel; see the module docs.
///
/// # Safety
/// Launched by the host (`Gpu::check_structure`) with the grid above, `row_ptr` holding `block_rows + 1` entries
/// and `col_idx` `nnzb` entries of the given width, `result` one u64 of device memory.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sparsek_bsr_check(p: BsrCheckParams) {
    const { assert!(crate::layout::str_eq(crate::layout::BSR_CHECK_KERNEL, "sparsek_bsr_check")) };
    let r = ptx::block_idx_x() * ptx::block_dim_x() + ptx::thread_idx_x();
    if r >= p.block_rows {
        return;
    }
    let result = p.result as *mut u64;
    // SAFETY: r < block_rows; the host guarantees the array sizes.
    if let Some(code) = unsafe { check_row(&p, r) } {
        unsafe { ptx::atom_global_min_u64(result, ((r as u64) << 3) | code) };
    }
    if r + 1 == p.block_rows {
        // SAFETY: row_ptr has block_rows + 1 entries.
        let last = unsafe { entry(p.row_ptr, p.block_rows as u64, p.index64 != 0) };
        if last != p.nnzb {
            unsafe { ptx::atom_global_min_u64(result, ((p.block_rows as u64) << 3) | check_code::LAST_NOT_NNZB) };
        }
    }
}
