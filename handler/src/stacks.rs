//! Stacks on demand: the return addresses of the current thread, or of another thread of this process, captured
//! while the process goes on, with the crash path's unwinder (DWARF CFI with its row cache, frame pointers, a
//! bounded scan; `crate::unwind`) over the handler's image table. For attributing a slow path or seeing who calls a
//! sensitive API, cheaply and often: a stack captured before costs one cache lookup per frame.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! handler::install(&handler::Config::new("/tmp/crashes"))?;
//! let mut frames = [0u64; 64];
//! let got = handler::stacks::current_stack(&mut frames)?;
//! for pc in &frames[..got.len] {
//!     println!("{pc:#x}");
//! }
//! // Another thread (a kernel thread id, as `gettid()` returns it on Linux):
//! let tid = handler::stacks::current_thread_id();
//! let got = handler::stacks::thread_stack(tid, &mut frames, std::time::Duration::from_millis(100))?;
//! # let _ = got; Ok(()) }
//! ```
//!
//! - [`current_stack`]: allocation-free, lock-free, callable from any thread and from signal handlers.
//! - [`thread_stack`]: Linux sends the thread the capture signal (`Config::capture_signal`), whose handler walks
//!   the thread's own stack and returns (the thread goes on at once); the caller waits at most the timeout given.
//!   Apple platforms suspend the thread (`thread_suspend`), read its registers (`thread_get_state`), walk it with
//!   the fault-proof reader (`vm_read_overwrite`) and resume it: **type-checked only, never run**.
//! - [`crate::symbols::SymbolCache`]: optional on-device symbolication (image, symbol, offset) from the images'
//!   own symbol tables, cached per address.
//!
//! Both need [`crate::install()`] (the image table and the preallocated walkers, `Config::capture_walkers`). The
//! image table is the install-time list: after `dlopen`, call [`crate::refresh_images()`] so that frames in the new
//! library are unwound with its tables (until then they are followed by frame pointers only).

pub use crate::ondemand::current::{current_stack, current_stack_skipping, Captured};
pub use crate::ondemand::CaptureError;
use std::time::Duration;

/// Thread `tid`'s stack (`tid`: a kernel thread id of this process: Linux `gettid()`, as `/proc/self/task` lists
/// them; Apple: the `thread_identifier_info` / `pthread_threadid_np` id), innermost first, into `out`: `out[0]` is
/// the thread's pc where it was interrupted (a system call it sleeps in, typically), then its return addresses to
/// the outermost frame, repeats of deep recursion listed in full. Waits at most `timeout` for the thread to answer
/// (Linux); never longer. The calling thread may capture itself (its pc is then inside the signal delivery).
///
/// Allocation-free and lock-free; not for signal handlers (it waits).
///
/// # Errors
/// [`CaptureError::NotInstalled`], [`CaptureError::Busy`] (every walker or request slot in use),
/// [`CaptureError::NoSuchThread`] (not a thread of this process, or it exited), [`CaptureError::Os`],
/// [`CaptureError::Timeout`] (the thread did not answer: it blocks the capture signal, sleeps uninterruptibly, or
/// is stopped by a debugger), [`CaptureError::NoRegisters`].
pub fn thread_stack(tid: u64, out: &mut [u64], timeout: Duration) -> Result<Captured, CaptureError> {
    let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        crate::ondemand::linux::thread_stack(tid, out, ns)
    }
    #[cfg(target_vendor = "apple")]
    {
        let _ = ns;
        crate::ondemand::darwin::thread_stack(tid, out)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        let _ = (tid, out, ns);
        Err(CaptureError::NotInstalled)
    }
}

/// The calling thread's id as [`thread_stack`] takes it (Linux `gettid()`; Apple `pthread_threadid_np`).
pub fn current_thread_id() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        crate::platform::linux::crash::sys::gettid()
    }
    #[cfg(target_vendor = "apple")]
    {
        let mut id = 0u64;
        // SAFETY: a null thread means the calling thread; `id` is a valid out-pointer.
        #[allow(unsafe_code)]
        unsafe {
            libc::pthread_threadid_np(0, &mut id)
        };
        id
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        0
    }
}

impl core::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CaptureError::NotInstalled => f.write_str("the crash handler is not installed (or has no capture walker)"),
            CaptureError::Busy => f.write_str("every capture walker is in use"),
            CaptureError::NoSuchThread => f.write_str("no such thread in this process"),
            CaptureError::Timeout => f.write_str("the thread did not answer the capture request in time"),
            CaptureError::Os(e) => write!(f, "the capture request failed (error {e})"),
            CaptureError::NoRegisters => f.write_str("no registers to start the walk from"),
        }
    }
}

impl std::error::Error for CaptureError {}
