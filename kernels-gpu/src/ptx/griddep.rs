//! Programmatic dependent launch (PTX ISA §9.7.13.10 `griddepcontrol`, sm_90+), as markers in the sm_80 module.
//!
//! A grid launched with programmatic stream serialization may start while the grid before it on its stream is
//! still running. `griddepcontrol.wait` then blocks until that grid has completed and its memory operations are
//! visible; before it a kernel may only read what the preceding grid does not write. `griddepcontrol.
//! launch_dependents` tells the driver that the grid after this one may start early (once every CTA of this grid
//! has executed it or exited); it changes nothing about this grid's own results.
//!
//! Both instructions need `.target sm_90`, and the product module is sm_80 PTX, JIT-compiled on every other GPU.
//! So each wrapper emits a PTX *comment* naming its instruction, a no-op in the sm_80 PTX, and `cargo xtask
//! build-ptx` assembles the module's sm_90a cubin from the same PTX with `.target sm_90` and every marker turned
//! into its instruction (xtask/src/ptx_check.rs `programmatic_sm90`). Only kernels loaded from that cubin are ever
//! launched with programmatic serialization (the host's `Registry::programmatic`). Without that attribute both
//! instructions are no-ops on sm_90 as well.
//!
//! The markers are `asm!` without `nomem`: the compiler keeps every memory access on its side of them (a load of
//! B must not move above the wait).

use core::arch::asm;

use crate::layout::str_eq;

/// The wait's marker, as a literal for `asm!` (the same text as [`crate::layout::GRIDDEP_WAIT_MARKER`], which the
/// xtask's patch looks for).
macro_rules! wait_marker {
    () => {
        "// sparsek.griddepcontrol.wait"
    };
}

/// The trigger's marker (= [`crate::layout::GRIDDEP_LAUNCH_DEPENDENTS_MARKER`]).
macro_rules! launch_dependents_marker {
    () => {
        "// sparsek.griddepcontrol.launch_dependents"
    };
}

const _: () = {
    assert!(str_eq(wait_marker!(), crate::layout::GRIDDEP_WAIT_MARKER), "the wait's marker is layout's");
    assert!(
        str_eq(launch_dependents_marker!(), crate::layout::GRIDDEP_LAUNCH_DEPENDENTS_MARKER),
        "the trigger's marker is layout's"
    );
};

/// `griddepcontrol.wait` in the sm_90a cubin (a comment in the sm_80 PTX): from here on this thread may read
/// what the preceding grid on the stream wrote, and write what it reads. Every thread that touches B, C, the bias
/// or the split-row workspace executes it first; it is per thread (not a collective), so LLVM may duplicate it.
#[inline(always)]
pub fn griddep_wait() {
    // SAFETY: a marker with no operands; not `nomem`, so memory accesses keep their side of it.
    unsafe { asm!(wait_marker!(), options(nostack)) };
}

/// `griddepcontrol.launch_dependents` in the sm_90a cubin (a comment in the sm_80 PTX): the next grid on the
/// stream, if launched with programmatic serialization, may start once every CTA of this grid has passed here or
/// exited. Kernels call it, every thread, once they have issued their last loads of A.
#[inline(always)]
pub fn griddep_launch_dependents() {
    // SAFETY: as above.
    unsafe { asm!(launch_dependents_marker!(), options(nostack)) };
}
