//! Bounds-checked fixed-width reads from byte slices. Never panic, never allocate: every read returns `None` when
//! the requested bytes are not all inside the slice. Shared by the Mach-O parser and the Apple message decoders.

/// `N` bytes at `off`, or `None` when `off + N` overflows or runs past the end.
#[inline]
pub(crate) fn array<const N: usize>(d: &[u8], off: usize) -> Option<[u8; N]> {
    let end = off.checked_add(N)?;
    let s = d.get(off..end)?;
    let mut out = [0u8; N];
    out.copy_from_slice(s);
    Some(out)
}

/// Little-endian `u32` at byte offset `off`.
#[inline]
pub(crate) fn u32_le(d: &[u8], off: usize) -> Option<u32> {
    array::<4>(d, off).map(u32::from_le_bytes)
}

/// Little-endian `i32` at byte offset `off`.
#[inline]
pub(crate) fn i32_le(d: &[u8], off: usize) -> Option<i32> {
    array::<4>(d, off).map(i32::from_le_bytes)
}

/// Little-endian `u64` at byte offset `off`.
#[inline]
pub(crate) fn u64_le(d: &[u8], off: usize) -> Option<u64> {
    array::<8>(d, off).map(u64::from_le_bytes)
}

/// Little-endian `i64` at byte offset `off`.
#[inline]
pub(crate) fn i64_le(d: &[u8], off: usize) -> Option<i64> {
    array::<8>(d, off).map(i64::from_le_bytes)
}

/// Big-endian `u32` at byte offset `off` (fat headers are big-endian on disk).
#[inline]
pub(crate) fn u32_be(d: &[u8], off: usize) -> Option<u32> {
    array::<4>(d, off).map(u32::from_be_bytes)
}

/// Big-endian `u64` at byte offset `off`.
#[inline]
pub(crate) fn u64_be(d: &[u8], off: usize) -> Option<u64> {
    array::<8>(d, off).map(u64::from_be_bytes)
}

/// `len` bytes at `off` as a sub-slice.
#[inline]
pub(crate) fn slice(d: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    d.get(off..off.checked_add(len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_bounds_and_refuses_out_of_bounds() {
        let d = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(u32_le(&d, 0), Some(0x0403_0201));
        assert_eq!(u32_be(&d, 0), Some(0x0102_0304));
        assert_eq!(u64_le(&d, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(u64_le(&d, 2), None);
        assert_eq!(i32_le(&d, 6), None);
        assert_eq!(i64_le(&d, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(u32_le(&d, usize::MAX - 1), None);
        assert_eq!(slice(&d, 7, 2), Some(&d[7..9]));
        assert_eq!(slice(&d, 7, 3), None);
        assert_eq!(slice(&d, usize::MAX, 2), None);
    }
}
