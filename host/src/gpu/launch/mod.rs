//! One typed, validated launcher per op. Each checks everything its kernel relies on before the launch (a
//! rejected call changes nothing) and pushes the op's `#[repr(C)]` parameter struct from the layout crate as
//! the kernel's one argument.

mod spmm;

use cudarc::driver::DeviceRepr;
use sparsek_layout::BsrSpmmParams;

/// [`BsrSpmmParams`] as a kernel argument (the layout crate has no dependencies, so the cudarc trait is
/// implemented on this wrapper).
#[repr(transparent)]
pub(crate) struct SpmmArg(pub(crate) BsrSpmmParams);

// SAFETY: BsrSpmmParams is #[repr(C)], Copy, made of u64/u32/f32 fields with explicit padding: its bytes are
// exactly the kernel's `.param` struct (the kernels take the same type by value).
unsafe impl DeviceRepr for SpmmArg {}
