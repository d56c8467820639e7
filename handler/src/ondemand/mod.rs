//! Stacks on demand: the current thread's return addresses, or another thread's, captured while the process goes
//! on, with the crash path's unwinder ([`crate::unwind`]: DWARF CFI with its row cache, frame pointers, a bounded
//! scan) over the install-time image table. The public API over this is [`crate::stacks`].
//!
//! **Crash-path rules apply here** (design.md §2): this module is declared through `crash_path_mod!`, because part
//! of it runs inside a signal handler (Linux: the thread to be captured walks its own stack in the handler of the
//! capture signal, [`linux`]), and the rest runs on threads that must not take locks another thread may hold
//! while it is stopped (Apple: the target is suspended while the caller walks its stack). Nothing here allocates,
//! takes a lock, panics or formats; every wait has a timeout; every `unsafe` says why it is sound.
//!
//! - [`pool`]: the preallocated walkers (row cache, reader block cache, frame buffer), claimed lock-free.
//! - [`reader`]: the memory reader of a walk: plain loads inside the walking thread's own live stack, the
//!   fault-proof reader for everything else.
//! - [`current`]: the calling thread's registers (a few instructions of inline assembly) and its walk.
//! - [`expand`]: repeat records expanded into a flat list of return addresses.
//! - [`fast`]: the current thread's walk when every row is cached (most captures after the first).
//! - [`linux`]: capture of another thread by signal (request slots, the signal handler).
//! - `darwin` (Apple platforms, type-checked only): capture of another thread by `thread_suspend` /
//!   `thread_get_state` / walk / `thread_resume`.
//! - [`nonfatal`]: non-fatal reports (every thread, the crash report format, written while the process goes on).
#![allow(unsafe_code)]

pub mod current;
#[cfg(target_vendor = "apple")]
pub mod darwin;
pub mod expand;
pub mod fast;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod linux;
pub mod nonfatal;
pub mod pool;
pub mod reader;

use crate::crash::images::ImageTable;
use crate::unwind::WalkOptions;
use core::sync::atomic::{AtomicPtr, Ordering};

/// Everything on-demand capture needs, set up at install (`crate::platform::*::install`) and never freed.
#[derive(Debug)]
pub struct State {
    /// The walkers captures borrow.
    pub pool: pool::Pool,
    /// The install-time image table (refreshed by `crate::refresh_images`): which image holds a pc, and where its
    /// unwind tables are.
    pub images: &'static ImageTable,
    /// Walk options (pointer-authentication stripping for this address space).
    pub opts: WalkOptions,
    /// Process id at install (the fault-proof reader's target; re-read by the Linux capture for forked children).
    pub pid: i32,
    /// The report directory (the crash path's), where non-fatal reports go too.
    pub dir_fd: i32,
    /// META text captured at install (OS, hardware, process, app).
    pub text: &'static crate::crash::capture::Text,
    /// The real-time signal that asks a thread to walk its own stack (Linux).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub signal: i32,
}

/// The installed state (null when not installed or when install set no walker up).
pub static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

/// The installed state.
pub fn state() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: a non-null STATE points to a leaked `State` that is never freed (install leaks it before publishing).
    unsafe { p.as_ref() }
}

/// Why a capture gave no stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureError {
    /// The crash handler is not installed (or was installed with no walker).
    NotInstalled,
    /// Every walker was in use for the whole wait.
    Busy,
    /// The thread is not one of this process's (or it exited).
    NoSuchThread,
    /// The thread did not answer in time (it blocks the capture signal, sits in an uninterruptible wait, or is
    /// stopped by a debugger).
    Timeout,
    /// The signal could not be sent (the `errno` of `rt_tgsigqueueinfo`), or a Mach call failed (its
    /// `kern_return_t`).
    Os(i32),
    /// The walk could not start: no usable registers.
    NoRegisters,
}
