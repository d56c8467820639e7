//! Where encoded bytes go: the [`Sink`] trait, a fixed-buffer sink for use after a fault, and a growable one for
//! launch-time tools.

/// Where encoded bytes go. Implementations used after a fault must be async-signal-safe and must not allocate.
pub trait Sink {
    /// Appends all of `bytes`, or fails.
    ///
    /// # Errors
    /// [`SinkError::Full`] when a fixed-size destination has no room; [`SinkError::Os`] with an `errno` value
    /// when a write to a file descriptor failed.
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError>;
}

/// Why a [`Sink`] refused bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkError {
    /// The destination buffer is full.
    Full,
    /// An OS call failed with this `errno`.
    Os(i32),
}

/// A [`Sink`] that appends into a fixed buffer. Signal-safe; never allocates.
#[derive(Debug)]
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    /// An empty sink over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink { buf, len: 0 }
    }

    /// Number of bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes written so far.
    pub fn written(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl Sink for SliceSink<'_> {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        let end = self.len.checked_add(bytes.len()).ok_or(SinkError::Full)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(SinkError::Full)?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
}

/// Launch-time convenience: appends to a growable vector. Allocates; never use it after a fault.
impl Sink for Vec<u8> {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}
