//! MessagePack building blocks over a fixed buffer: a write cursor whose running out of room is an error value,
//! the encodings of single values and headers (written by `rmp`'s low-level `encode::write_*`, which pick the
//! shortest encoding of each value), maps whose entry count is patched in at the end, and text written as valid
//! UTF-8. Nothing here allocates.

use rmp::encode as mp;

/// The scratch buffer ran out of room.
#[derive(Debug, Clone, Copy)]
pub(super) struct NoRoom;

impl<E: mp::RmpWriteErr> From<mp::ValueWriteError<E>> for NoRoom {
    fn from(_: mp::ValueWriteError<E>) -> Self {
        NoRoom
    }
}

impl From<std::io::Error> for NoRoom {
    fn from(_: std::io::Error) -> Self {
        NoRoom
    }
}

pub(super) type R = Result<(), NoRoom>;

/// A write position in a fixed buffer. Its `io::Write` error is built from an `ErrorKind`, which does not allocate.
pub(super) struct Cursor<'b> {
    buf: &'b mut [u8],
    pub(super) pos: usize,
}

impl<'b> Cursor<'b> {
    pub(super) fn new(buf: &'b mut [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Overwrites already written bytes (used to patch a reserved fixmap/array16 count).
    pub(super) fn patch(&mut self, at: usize, bytes: &[u8]) -> R {
        let end = at.checked_add(bytes.len()).ok_or(NoRoom)?;
        let dst = self.buf.get_mut(at..end).ok_or(NoRoom)?;
        dst.copy_from_slice(bytes);
        Ok(())
    }

    /// Appends bytes as they are.
    pub(super) fn raw(&mut self, bytes: &[u8]) -> R {
        std::io::Write::write_all(self, bytes)?;
        Ok(())
    }

    /// An unsigned integer in its shortest encoding.
    pub(super) fn uint(&mut self, v: u64) -> R {
        mp::write_uint(self, v)?;
        Ok(())
    }

    /// A signed integer in its shortest encoding (non-negative values as unsigned ones).
    pub(super) fn sint(&mut self, v: i64) -> R {
        mp::write_sint(self, v)?;
        Ok(())
    }

    /// `nil`.
    pub(super) fn nil(&mut self) -> R {
        mp::write_nil(self)?;
        Ok(())
    }

    /// `true` or `false`.
    pub(super) fn bool(&mut self, v: bool) -> R {
        mp::write_bool(self, v)?;
        Ok(())
    }

    /// A `bin` of these bytes.
    pub(super) fn bin(&mut self, v: &[u8]) -> R {
        mp::write_bin(self, v)?;
        Ok(())
    }

    /// A `str` of valid UTF-8 (map keys).
    pub(super) fn str(&mut self, s: &str) -> R {
        mp::write_str(self, s)?;
        Ok(())
    }

    /// The header of a `bin` of `n` bytes (shortest form); the bytes follow.
    pub(super) fn bin_len(&mut self, n: usize) -> R {
        let n = u32::try_from(n).map_err(|_| NoRoom)?;
        mp::write_bin_len(self, n)?;
        Ok(())
    }

    /// The header of a `bin` whose length is not known yet: a `bin32` with a zero length, to be set with
    /// [`Cursor::patch_bin32`]. Returns its position.
    pub(super) fn reserve_bin32(&mut self) -> Result<usize, NoRoom> {
        let at = self.pos;
        self.raw(&[0xc6, 0, 0, 0, 0])?;
        Ok(at)
    }

    /// Sets the length of the `bin32` header reserved at `at` to the bytes written since it.
    pub(super) fn patch_bin32(&mut self, at: usize) -> R {
        let start = at.checked_add(5).ok_or(NoRoom)?;
        let n = self.pos.checked_sub(start).ok_or(NoRoom)?;
        let n = u32::try_from(n).map_err(|_| NoRoom)?;
        let b = n.to_be_bytes();
        self.patch(at, &[0xc6, b[0], b[1], b[2], b[3]])
    }

    /// An unsigned LEB128 number (7 bits a byte, least significant group first, high bit set on every byte but
    /// the last), raw, inside a `bin` being written.
    pub(super) fn leb128(&mut self, v: u64) -> R {
        // Each byte computed in place: frames are a few numbers each, and copying an encoded slice (of a length not
        // known at compile time) would be a `memcpy` call per number. All or nothing, as `raw`.
        let end = self.pos.checked_add(leb128_len(v)).ok_or(NoRoom)?;
        let dst = self.buf.get_mut(self.pos..end).ok_or(NoRoom)?;
        let mut rest = v;
        for slot in dst.iter_mut() {
            let low = (rest & 0x7f) as u8;
            rest >>= 7;
            *slot = if rest == 0 { low } else { low | 0x80 };
        }
        self.pos = end;
        Ok(())
    }

    /// Text as a `str`, each byte of an invalid UTF-8 sequence replaced by `?`.
    pub(super) fn text(&mut self, v: &[u8]) -> R {
        write_text(self, v)
    }

    /// The header of an array of `n` elements; the elements follow.
    pub(super) fn array_len(&mut self, n: usize) -> R {
        let n = u32::try_from(n).map_err(|_| NoRoom)?;
        mp::write_array_len(self, n)?;
        Ok(())
    }

    /// The header of a map of `n` key/value pairs; the pairs follow.
    pub(super) fn map_len(&mut self, n: usize) -> R {
        let n = u32::try_from(n).map_err(|_| NoRoom)?;
        mp::write_map_len(self, n)?;
        Ok(())
    }

    /// The header of an array whose length is not known yet: an `array16` with a zero count, to be set with
    /// [`Cursor::patch_array16`]. Returns its position.
    pub(super) fn reserve_array16(&mut self) -> Result<usize, NoRoom> {
        let at = self.pos;
        self.raw(&[0xdc, 0, 0])?;
        Ok(at)
    }

    /// Sets the count of the `array16` header reserved at `at` (counts past 65535 are written as 65535).
    pub(super) fn patch_array16(&mut self, at: usize, n: usize) -> R {
        let count = u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes();
        self.patch(at.checked_add(1).ok_or(NoRoom)?, &count)
    }
}

impl std::io::Write for Cursor<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.write_all(bytes).map(|()| bytes.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let end = self.pos.checked_add(bytes.len()).ok_or(std::io::ErrorKind::WriteZero)?;
        let dst = self.buf.get_mut(self.pos..end).ok_or(std::io::ErrorKind::WriteZero)?;
        dst.copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A map whose entry count is patched in at the end: one reserved fixmap byte, so at most 15 entries.
pub(super) struct MapW {
    at: usize,
    n: u8,
}

impl MapW {
    pub(super) fn open(w: &mut Cursor<'_>) -> Result<Self, NoRoom> {
        let at = w.pos;
        w.map_len(0)?;
        Ok(MapW { at, n: 0 })
    }

    /// Writes key `k`; its value must follow.
    pub(super) fn key(&mut self, w: &mut Cursor<'_>, k: &str) -> R {
        self.n = self.n.checked_add(1).filter(|&n| n <= 15).ok_or(NoRoom)?;
        w.str(k)
    }

    pub(super) fn uint(&mut self, w: &mut Cursor<'_>, k: &str, v: u64) -> R {
        self.key(w, k)?;
        w.uint(v)
    }

    /// Left out when `None`.
    pub(super) fn opt_uint(&mut self, w: &mut Cursor<'_>, k: &str, v: Option<u64>) -> R {
        match v {
            Some(v) => self.uint(w, k, v),
            None => Ok(()),
        }
    }

    /// Left out when `None`.
    pub(super) fn opt_sint(&mut self, w: &mut Cursor<'_>, k: &str, v: Option<i64>) -> R {
        match v {
            Some(v) => {
                self.key(w, k)?;
                w.sint(v)
            }
            None => Ok(()),
        }
    }

    /// Left out when empty.
    pub(super) fn text(&mut self, w: &mut Cursor<'_>, k: &str, v: &[u8]) -> R {
        if v.is_empty() {
            return Ok(());
        }
        self.key(w, k)?;
        w.text(v)
    }

    /// Left out when empty.
    pub(super) fn bin(&mut self, w: &mut Cursor<'_>, k: &str, v: &[u8]) -> R {
        if v.is_empty() {
            return Ok(());
        }
        self.key(w, k)?;
        w.bin(v)
    }

    /// Left out when `false`.
    pub(super) fn flag(&mut self, w: &mut Cursor<'_>, k: &str, v: bool) -> R {
        if !v {
            return Ok(());
        }
        self.key(w, k)?;
        w.bool(true)
    }

    /// Writes the entry count into the reserved fixmap byte.
    pub(super) fn close(self, w: &mut Cursor<'_>) -> R {
        w.patch(self.at, &[0x80 | self.n])
    }
}

/// Bytes of the unsigned LEB128 encoding of `v` (1..=10): its significant bits (at least one), 7 a byte.
pub(super) fn leb128_len(v: u64) -> usize {
    let bits = 64u32.saturating_sub(v.leading_zeros()).max(1);
    bits.div_ceil(7) as usize
}

/// Writes text as a MessagePack str, replacing each byte of an invalid UTF-8 sequence with `?`.
fn write_text(w: &mut Cursor<'_>, v: &[u8]) -> R {
    let len = u32::try_from(v.len()).map_err(|_| NoRoom)?;
    mp::write_str_len(w, len)?;
    let mut rest = v;
    loop {
        match core::str::from_utf8(rest) {
            Ok(_) => {
                return w.raw(rest);
            }
            Err(e) => {
                let good = e.valid_up_to();
                // An incomplete sequence at the end (no error length) is replaced up to the end.
                let bad = e.error_len().unwrap_or(rest.len().saturating_sub(good));
                w.raw(rest.get(..good).unwrap_or(&[]))?;
                for _ in 0..bad {
                    w.raw(b"?")?;
                }
                rest = rest.get(good.saturating_add(bad)..).unwrap_or(&[]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Cursor::leb128` of `v`, as bytes.
    fn enc(v: u64) -> Vec<u8> {
        let mut b = [0u8; 10];
        let mut w = Cursor::new(&mut b);
        w.leb128(v).expect("fits in 10 bytes");
        let n = w.pos;
        b[..n].to_vec()
    }

    #[test]
    fn leb128_edges() {
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(624_485), [0xe5, 0x8e, 0x26]);
        assert_eq!(enc(u64::MAX), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(leb128_len(u64::MAX), 10);
        assert_eq!(leb128_len(1 << 63), 10);
        assert_eq!(leb128_len((1 << 63) - 1), 9);
        assert_eq!(leb128_len(0), 1);
    }

    #[test]
    fn cursor_leb128_writes_the_encoding_all_or_nothing() {
        // Every bit-length boundary: the bytes decode back, their count is `leb128_len`, and one byte less of room
        // is an error that writes nothing.
        let mut values = vec![0u64, u64::MAX];
        for k in 1..64 {
            values.extend([(1u64 << k) - 1, 1u64 << k]);
        }
        for v in values {
            let bytes = enc(v);
            assert_eq!(bytes.len(), leb128_len(v), "{v}");
            let (mut back, mut shift) = (0u64, 0u32);
            for (i, b) in bytes.iter().enumerate() {
                back |= u64::from(b & 0x7f) << shift;
                shift += 7;
                assert_eq!(b & 0x80 != 0, i + 1 < bytes.len(), "continuation bits of {v}");
            }
            assert_eq!(back, v);
            let mut buf = [0xaau8; 12];
            let mut w = Cursor::new(&mut buf);
            w.leb128(v).expect("fits");
            let n = w.pos;
            assert_eq!(buf[n], 0xaa, "nothing written past the number");
            let mut short = vec![0xaau8; bytes.len() - 1];
            let mut w = Cursor::new(&mut short);
            assert!(w.leb128(v).is_err());
            assert_eq!(w.pos, 0);
            assert!(short.iter().all(|b| *b == 0xaa));
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_not_dropped() {
        let mut buf = [0u8; 64];
        let mut w = Cursor::new(&mut buf);
        w.text(b"ab\xffc\xe2\x82").expect("fits");
        let n = w.pos;
        let s: String = rmp_serde::from_slice(&buf[..n]).expect("valid str");
        assert_eq!(s, "ab?c??");
    }
}
