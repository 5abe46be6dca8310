//! Kernels that drive each PTX wrapper with known inputs so the host can assert exact results
//! (tests/tests/gpu_primitives.rs). Built only with `--features test-kernels`, into tests/ptx/primitives_sm80.ptx.

use crate::layout::{ldsm_a_role, mma_a_element, mma_b_element, mma_c_element};
use crate::ptx;

/// Each thread writes `[tid.x, ctaid.x, ctaid.y, ntid.x, laneid, warp]` at `out[6 * global_thread ..]`, where
/// `global_thread = (ctaid.y * grid_x + ctaid.x) * ntid.x + tid.x`.
///
/// # Safety
/// `out` holds 6 u32 per launched thread.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn test_indices(out: *mut u32, grid_x: u32) {
    let (tid, bx, by, nt) = (ptx::thread_idx_x(), ptx::block_idx_x(), ptx::block_idx_y(), ptx::block_dim_x());
    let g = ((by * grid_x + bx) * nt + tid) as usize;
    let vals = [tid, bx, by, nt, ptx::lane_id(), ptx::warp_idx()];
    for (i, v) in vals.iter().enumerate() {
        // SAFETY: the caller sized `out`.
        unsafe { *out.add(6 * g + i) = *v };
    }
}

/// One warp. Copies 32 rows of 8 b16 (`src`, 512 bytes, 16-byte aligned) into dynamic shared memory with 16-byte
/// loads and stores, then lane `l` passes the address of row `l` (matrix l/8, row l%8) to the ldmatrix variant
/// `variant` (0: x1, 1: x2, 2: x4, 3: x1.trans, 4: x2.trans, 5: x4.trans) and writes result register j to
/// `out[4 * l + j]` (registers the variant does not produce are left untouched).
///
/// # Safety
/// Launch with 32 threads and >= 512 bytes of dynamic shared memory; `out` holds 128 u32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn test_ldmatrix(src: *const u16, out: *mut u32, variant: u32) {
    let lane = ptx::thread_idx_x();
    let smem = ptx::dynamic_smem_base();
    // SAFETY: src has 32 rows of 16 bytes; smem has 512 bytes.
    unsafe { ptx::st_shared_v4(smem + 16 * lane, ptx::ld_global_v4((src as *const u32).add(4 * lane as usize))) };
    ptx::bar_sync();
    let addr = smem + 16 * lane;
    let o = |j: usize, v: u32| unsafe { *out.add(4 * lane as usize + j) = v };
    // `variant` is a kernel parameter, so every branch is warp-uniform. Each branch stores its registers with
    // constant indices (a run-time indexed register array would go to local memory).
    // SAFETY: all lanes participate; every address is a valid 16-byte row; `out` holds 128 u32.
    unsafe {
        match variant {
            0 => o(0, ptx::ldmatrix_x1(addr)),
            1 => {
                let [r0, r1] = ptx::ldmatrix_x2(addr);
                o(0, r0);
                o(1, r1);
            }
            2 => {
                let [r0, r1, r2, r3] = ptx::ldmatrix_x4(addr);
                o(0, r0);
                o(1, r1);
                o(2, r2);
                o(3, r3);
            }
            3 => o(0, ptx::ldmatrix_x1_trans(addr)),
            4 => {
                let [r0, r1] = ptx::ldmatrix_x2_trans(addr);
                o(0, r0);
                o(1, r1);
            }
            _ => {
                let [r0, r1, r2, r3] = ptx::ldmatrix_x4_trans(addr);
                o(0, r0);
                o(1, r1);
                o(2, r2);
                o(3, r3);
            }
        }
    }
}

/// 64 threads, 128 chunks of 16 bytes in static shared memory, first poisoned with 0xA5.
/// Group 0: thread t copies chunk t of `src` with `src_bytes[t]` bytes (the rest zero-filled); group 1: chunk
/// 64 + t. After `wait_group 1` the thread stores its group-0 chunk to `out[chunk]` (group 0 must have landed),
/// after `wait_group 0` its group-1 chunk. After a barrier, thread t copies chunks written by *other* threads,
/// (t + 32) % 128 and (t + 96) % 128, to `out[128 + chunk]`.
///
/// # Safety
/// Launch with 64 threads; `src` has 2048 bytes, `src_bytes` 128 values in 0..=16, `out` 4096 bytes, all
/// 16-byte aligned.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn test_cp_async(src: *const u8, src_bytes: *const u32, out: *mut u8) {
    let smem = crate::static_smem!(TEST_CP_ASYNC_SMEM, 2048);
    let t = ptx::thread_idx_x();
    let chunk = |i: u32| smem + 16 * i;
    let g_out = |i: u32| unsafe { out.add(16 * i as usize) as *mut u32 };
    // SAFETY (whole body): all indices are < 128 chunks; see the safety contract.
    unsafe {
        ptx::st_shared_v4(chunk(t), [0xA5A5_A5A5; 4]);
        ptx::st_shared_v4(chunk(t + 64), [0xA5A5_A5A5; 4]);
        ptx::bar_sync();
        ptx::cp_async_cg_16(chunk(t), src.add(16 * t as usize), *src_bytes.add(t as usize));
        ptx::cp_async_commit();
        ptx::cp_async_cg_16(chunk(t + 64), src.add(16 * (t + 64) as usize), *src_bytes.add((t + 64) as usize));
        ptx::cp_async_commit();
        ptx::cp_async_wait::<1>();
        ptx::st_global_v4(g_out(t), ptx::ld_shared_v4(chunk(t)));
        ptx::cp_async_wait::<0>();
        ptx::st_global_v4(g_out(t + 64), ptx::ld_shared_v4(chunk(t + 64)));
        ptx::bar_sync();
        for other in [(t + 32) % 128, (t + 96) % 128] {
            ptx::st_global_v4(g_out(128 + other), ptx::ld_shared_v4(chunk(other)));
        }
    }
}

/// One warp computes `D = A @ B + C` with one `mma.sync.m16n8k16`: A 16x16 f16 row-major, B 16x8 f16 row-major
/// ([k][n]), C and D 16x8 f32 row-major. `mode` 0 builds the fragments with plain loads following the ISA's
/// fragment maps (tests mma alone); mode 1 stages A and B in static shared memory and loads the fragments with
/// `ldmatrix.x4` (A) and `ldmatrix.x2.trans` (B), as the SpMM kernel does.
///
/// # Safety
/// Launch with 32 threads; the pointers hold the sizes above.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn test_mma(a: *const u16, b: *const u16, c: *const f32, d: *mut f32, mode: u32) {
    let lane = ptx::thread_idx_x();
    let mut a_frag = [0u32; 4];
    let mut b_frag = [0u32; 2];
    // SAFETY (whole body): all indices stay inside the 16x16, 16x8 operands and the 768-byte shared array.
    unsafe {
        if mode == 0 {
            for (reg, f) in a_frag.iter_mut().enumerate() {
                let (r0, k0) = mma_a_element(lane, 2 * reg as u32);
                let (r1, k1) = mma_a_element(lane, 2 * reg as u32 + 1);
                *f = u32::from(*a.add((16 * r0 + k0) as usize)) | u32::from(*a.add((16 * r1 + k1) as usize)) << 16;
            }
            for (reg, f) in b_frag.iter_mut().enumerate() {
                let (k0, n0) = mma_b_element(lane, 2 * reg as u32);
                let (k1, n1) = mma_b_element(lane, 2 * reg as u32 + 1);
                *f = u32::from(*b.add((8 * k0 + n0) as usize)) | u32::from(*b.add((8 * k1 + n1) as usize)) << 16;
            }
        } else {
            // A: 16 rows of 32 bytes at [0, 512); B: 16 rows of 16 bytes at [512, 768).
            let smem = crate::static_smem!(TEST_MMA_SMEM, 768);
            // A is 32 chunks of 16 bytes: one per lane.
            ptx::st_shared_v4(smem + 16 * lane, ptx::ld_global_v4((a as *const u32).add(4 * lane as usize)));
            if lane < 16 {
                ptx::st_shared_v4(smem + 512 + 16 * lane, ptx::ld_global_v4((b as *const u32).add(4 * lane as usize)));
            }
            ptx::bar_sync();
            let (row, chunk) = ldsm_a_role(lane);
            a_frag = ptx::ldmatrix_x4(smem + 32 * row + 16 * chunk);
            b_frag = ptx::ldmatrix_x2_trans(smem + 512 + 16 * (lane % 16));
        }
        let mut acc = [0.0f32; 4];
        for (i, v) in acc.iter_mut().enumerate() {
            let (r, col) = mma_c_element(lane, i as u32);
            *v = *c.add((8 * r + col) as usize);
        }
        ptx::mma_m16n8k16_f32_f16(&mut acc, a_frag, b_frag);
        for (i, v) in acc.iter().enumerate() {
            let (r, col) = mma_c_element(lane, i as u32);
            *d.add((8 * r + col) as usize) = *v;
        }
    }
}

/// Converts pairs: `out[i] = cvt.rn.f16x2.f32(inp[2i], inp[2i+1])` and `back[2i + h] = cvt.f32.f16(half h)`.
///
/// # Safety
/// One thread per pair; `inp` and `back` hold 2 * threads f32, `out` holds `threads` u32.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn test_cvt(inp: *const f32, out: *mut u32, back: *mut f32) {
    let i = ptx::thread_idx_x() as usize;
    // SAFETY: the caller sized the buffers.
    unsafe {
        let packed = ptx::cvt_f16x2_f32(*inp.add(2 * i), *inp.add(2 * i + 1));
        *out.add(i) = packed;
        *back.add(2 * i) = ptx::cvt_f32_f16(packed as u16);
        *back.add(2 * i + 1) = ptx::cvt_f32_f16((packed >> 16) as u16);
    }
}
