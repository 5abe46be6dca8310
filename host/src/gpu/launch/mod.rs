//! One typed, validated launcher per op. Each checks everything its kernel relies on before the launch (a
//! rejected call changes nothing) and pushes the op's `#[repr(C)]` parameter struct from the layout crate as
//! the kernel's one argument.

mod backward;
mod check;
mod spmm;
pub(crate) use backward::new_structure_id;
pub use backward::{DeviceBsrTranspose, TransposeView};
pub use check::CheckedIndices;
