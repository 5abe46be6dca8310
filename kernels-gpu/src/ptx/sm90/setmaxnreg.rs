//! Per-warpgroup register budgets (PTX ISA §9.7.19.5 `setmaxnreg`): a producer warpgroup that only issues TMA
//! copies gives registers back, the consumer warpgroups that hold wgmma accumulators take them.

// Through LLVM's NVVM intrinsics, which LLVM declares `convergent` (inline asm is not, ../shared/HOPPER.md).
unsafe extern "C" {
    #[link_name = "llvm.nvvm.setmaxnreg.dec.sync.aligned.u32"]
    fn nvvm_setmaxnreg_dec(n: i32);
    #[link_name = "llvm.nvvm.setmaxnreg.inc.sync.aligned.u32"]
    fn nvvm_setmaxnreg_inc(n: i32);
}

/// `setmaxnreg.dec.sync.aligned.u32 N`: this warpgroup keeps at most `N` registers per thread.
/// A warpgroup collective: all 128 threads of the warpgroup execute it, in warpgroup-uniform control flow.
#[inline(always)]
pub fn setmaxnreg_dec<const N: u32>() {
    const { assert!(N >= 24 && N <= 256 && N.is_multiple_of(8), "setmaxnreg takes 24..=256 in steps of 8") };
    // SAFETY: changes this warpgroup's register budget; the uniform control flow is the caller's contract
    // (documented above); N is a constant at every call site (the intrinsic takes an immediate).
    unsafe { nvvm_setmaxnreg_dec(N as i32) };
}

/// `setmaxnreg.inc.sync.aligned.u32 N`: this warpgroup may use up to `N` registers per thread (waits until the
/// SM has them, released by other warpgroups' `dec`). Same convergence rule as [`setmaxnreg_dec`].
#[inline(always)]
pub fn setmaxnreg_inc<const N: u32>() {
    const { assert!(N >= 24 && N <= 256 && N.is_multiple_of(8), "setmaxnreg takes 24..=256 in steps of 8") };
    // SAFETY: as above.
    unsafe { nvvm_setmaxnreg_inc(N as i32) };
}
