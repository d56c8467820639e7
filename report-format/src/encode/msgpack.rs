//! MessagePack building blocks over a fixed buffer: a write cursor whose running out of room is an error value,
//! maps whose entry count is patched in at the end, and text written as valid UTF-8. Nothing here allocates.

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

    /// Overwrites one already written byte (used to patch a reserved fixmap/array16 count).
    pub(super) fn patch(&mut self, at: usize, bytes: &[u8]) -> R {
        let dst = self.buf.get_mut(at..at + bytes.len()).ok_or(NoRoom)?;
        dst.copy_from_slice(bytes);
        Ok(())
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
        mp::write_map_len(w, 0)?;
        Ok(MapW { at, n: 0 })
    }

    pub(super) fn key(&mut self, w: &mut Cursor<'_>, k: &str) -> R {
        if self.n >= 15 {
            return Err(NoRoom);
        }
        self.n += 1;
        mp::write_str(w, k)?;
        Ok(())
    }

    pub(super) fn uint(&mut self, w: &mut Cursor<'_>, k: &str, v: u64) -> R {
        self.key(w, k)?;
        mp::write_uint(w, v)?;
        Ok(())
    }

    pub(super) fn opt_uint(&mut self, w: &mut Cursor<'_>, k: &str, v: Option<u64>) -> R {
        match v {
            Some(v) => self.uint(w, k, v),
            None => Ok(()),
        }
    }

    pub(super) fn opt_sint(&mut self, w: &mut Cursor<'_>, k: &str, v: Option<i64>) -> R {
        match v {
            Some(v) => {
                self.key(w, k)?;
                mp::write_sint(w, v)?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    pub(super) fn text(&mut self, w: &mut Cursor<'_>, k: &str, v: &[u8]) -> R {
        if v.is_empty() {
            return Ok(());
        }
        self.key(w, k)?;
        write_text(w, v)
    }

    pub(super) fn bin(&mut self, w: &mut Cursor<'_>, k: &str, v: &[u8]) -> R {
        if v.is_empty() {
            return Ok(());
        }
        self.key(w, k)?;
        mp::write_bin(w, v)?;
        Ok(())
    }

    pub(super) fn flag(&mut self, w: &mut Cursor<'_>, k: &str, v: bool) -> R {
        if !v {
            return Ok(());
        }
        self.key(w, k)?;
        mp::write_bool(w, true)?;
        Ok(())
    }

    pub(super) fn close(self, w: &mut Cursor<'_>) -> R {
        w.patch(self.at, &[0x80 | self.n])
    }
}

/// Writes text as a MessagePack str, replacing each byte of an invalid UTF-8 sequence with `?`.
pub(super) fn write_text(w: &mut Cursor<'_>, v: &[u8]) -> R {
    let len = u32::try_from(v.len()).map_err(|_| NoRoom)?;
    mp::write_str_len(w, len)?;
    let mut rest = v;
    loop {
        match core::str::from_utf8(rest) {
            Ok(_) => {
                std::io::Write::write_all(w, rest)?;
                return Ok(());
            }
            Err(e) => {
                let good = e.valid_up_to();
                let bad = e.error_len().unwrap_or(rest.len() - good);
                std::io::Write::write_all(w, rest.get(..good).unwrap_or(&[]))?;
                for _ in 0..bad {
                    std::io::Write::write_all(w, b"?")?;
                }
                rest = rest.get(good + bad..).unwrap_or(&[]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_is_replaced_not_dropped() {
        let mut buf = [0u8; 64];
        let mut w = Cursor::new(&mut buf);
        write_text(&mut w, b"ab\xffc\xe2\x82").expect("fits");
        let n = w.pos;
        let s: String = rmp_serde::from_slice(&buf[..n]).expect("valid str");
        assert_eq!(s, "ab?c??");
    }
}
