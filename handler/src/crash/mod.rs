//! The platform-neutral crash-path core: everything here runs after a fault, so it never allocates, never takes a
//! lock, never panics and calls only async-signal-safe functions (design.md §2).
//!
//! - [`capture`]: the crash sequence both backends run (stop the threads, write the report) and its data.
//! - [`actions`]: the fatal signals, the actions they had at install, the re-raise rules.
//! - [`reentrancy`]: which thread owns the crash; recursive and concurrent crashes.
//! - [`threads`]: the preallocated thread table and the capture protocol stopped threads follow.
//! - [`images`]: the preallocated image table (double-buffered for refreshes).
//! - [`writer`]: the raw-fd sink, atomic commit, and the report's section sequence (walk each thread into one
//!   reusable frame buffer, encode it at once).
//! - [`stack_bounds`]: each thread's stack extent, recorded at thread start, looked up lock-free at crash time.
//! - [`raw_buf`]: preallocated buffers the crash owner borrows without a lock.
//! - [`first_chance`]: the first-chance hook for runtimes that recover from faults.
//! - [`reason`]: why the process is dying, as the runtimes and the app said before the fault (uncaught
//!   `NSException` and C++ exception, Rust panics, the app's crash reason, the C library's abort message).
//! - [`bionic_abort`]: Android's abort message (`android_set_abort_message`), found by its mapping's name.
//! - [`hooks`]: test hooks (allocation counting, a deliberate fault inside the handler).
//!
//! The OS-specific crash-path code is in `platform/<os>/crash/`: how threads are stopped and their registers read,
//! how memory is read, which images are mapped (each implements [`capture::Backend`]), and how the process leaves
//! (re-raise, chaining to a previous handler, the Mach reply).

#[cfg(unix)]
pub mod actions;
pub mod bionic_abort;
#[cfg(unix)]
pub mod capture;
pub mod first_chance;
pub mod hooks;
pub mod images;
pub mod raw_buf;
pub mod reason;
pub mod reentrancy;
pub mod stack_bounds;
pub mod threads;
pub mod user_table;
pub mod writer;
