//! [`RawBuf`]: a preallocated buffer the crash owner borrows mutably without a lock (exclusivity comes from the
//! crash gate, `crate::crash::reentrancy`). Shared by the Linux and Apple backends. Signal-safe.
#![allow(unsafe_code)]

/// A preallocated buffer owned by the crash path.
#[derive(Debug)]
pub struct RawBuf<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> RawBuf<T> {
    /// Wraps leaked, preallocated storage (install time).
    pub fn new(s: &'static mut [T]) -> Self {
        RawBuf { ptr: s.as_mut_ptr(), len: s.len() }
    }

    /// The buffer.
    ///
    /// # Safety
    /// The caller must have exclusive use of the buffer: only the crash owner (the thread that won the
    /// [`crate::crash::reentrancy::CrashGate`]) calls this.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self) -> &mut [T] {
        // SAFETY: `ptr`/`len` come from a leaked `&'static mut [T]` that is never freed; exclusivity is the
        // caller's obligation.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: the pointer refers to leaked static storage valid on every thread; access is serialized by the crash
// gate (only the owner calls `get`).
unsafe impl<T: Send> Send for RawBuf<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for RawBuf<T> {}
