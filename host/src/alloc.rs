//! Checked sizes and fallible allocation: every buffer whose size comes from an input goes through here, so an
//! overflowing size is [`Error::TooLarge`] and a failed allocation is [`Error::OutOfMemory`], never a panic or an
//! abort.

use crate::error::{Error, Result};

/// The largest allocation the library asks for, in bytes: `isize::MAX` (Rust's own limit for one allocation).
pub(crate) const MAX_BYTES: usize = isize::MAX as usize;

/// `a * b`, or [`Error::TooLarge`] naming `what` when it overflows `usize`.
pub(crate) fn mul(what: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(Error::TooLarge { what, requested: a as u128 * b as u128, limit: usize::MAX as u128 })
}

/// The bytes of `len` elements of `T`, checked against [`MAX_BYTES`].
pub(crate) fn bytes_of<T>(what: &'static str, len: usize) -> Result<usize> {
    let size = std::mem::size_of::<T>().max(1);
    match len.checked_mul(size) {
        Some(b) if b <= MAX_BYTES => Ok(b),
        _ => Err(Error::TooLarge { what, requested: len as u128 * size as u128, limit: MAX_BYTES as u128 }),
    }
}

/// An empty vector with room for `len` elements, or [`Error::OutOfMemory`] / [`Error::TooLarge`].
pub(crate) fn with_capacity<T>(what: &'static str, len: usize) -> Result<Vec<T>> {
    let bytes = bytes_of::<T>(what, len)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::OutOfMemory { what, bytes })?;
    Ok(v)
}

/// `vec![value; len]`, fallibly.
pub(crate) fn filled<T: Clone>(what: &'static str, len: usize, value: T) -> Result<Vec<T>> {
    let mut v = with_capacity(what, len)?;
    v.resize(len, value);
    Ok(v)
}

/// Grows `v` by `additional` elements' capacity, fallibly.
pub(crate) fn reserve<T>(what: &'static str, v: &mut Vec<T>, additional: usize) -> Result<()> {
    let bytes = bytes_of::<T>(what, v.len().saturating_add(additional))?;
    v.try_reserve(additional).map_err(|_| Error::OutOfMemory { what, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked_and_allocation_is_fallible() {
        assert!(matches!(mul("x", usize::MAX, 2), Err(Error::TooLarge { .. })));
        assert_eq!(mul("x", 3, 4).unwrap(), 12);
        assert!(matches!(bytes_of::<f32>("x", usize::MAX / 2), Err(Error::TooLarge { .. })));
        // Far beyond any machine's memory but below isize::MAX bytes: the allocator refuses, no abort.
        assert!(matches!(with_capacity::<u8>("x", 1 << 60), Err(Error::OutOfMemory { what: "x", .. })));
        assert_eq!(filled("x", 3, 7u8).unwrap(), vec![7, 7, 7]);
        let mut v = vec![1u8];
        assert!(matches!(reserve("x", &mut v, 1 << 60), Err(Error::OutOfMemory { .. })));
    }
}
