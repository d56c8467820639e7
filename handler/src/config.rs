//! Install-time configuration.

use crate::error::InstallError;
use std::path::PathBuf;

/// Smallest thread table [`crate::install()`] accepts.
pub const MIN_THREADS: usize = 512;
/// Smallest frame buffer (frames per thread) [`crate::install()`] accepts.
pub const MIN_FRAMES: usize = 512;
/// Smallest alternate signal stack [`crate::install()`] accepts, in bytes.
pub const MIN_ALT_STACK: usize = 128 * 1024;

/// What [`crate::install()`] sets up. Build with [`Config::new`] and adjust fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Directory reports are written to; created (with parents) when missing, opened at install.
    pub report_dir: PathBuf,
    /// Application identifier stored as the bundle id (empty: left out).
    pub app_id: String,
    /// Marketing version (empty: left out).
    pub short_version: String,
    /// Build number (empty: left out).
    pub build_version: String,
    /// Threads the table holds (at least [`MIN_THREADS`]). Threads beyond it are not reported.
    pub max_threads: usize,
    /// Frames kept per thread (at least [`MIN_FRAMES`]); deeper stacks are compressed (repeats) or truncated.
    pub max_frames: usize,
    /// Images the image table holds; images beyond it are dropped (counted at install).
    pub max_images: usize,
    /// Bytes of image paths the table holds.
    pub image_path_bytes: usize,
    /// Size in bytes of the alternate signal stack installed for the installing thread and, on Linux with glibc,
    /// for every thread created after install (the `pthread_create` wrapper, `platform::linux::threads`; mapped
    /// with `MAP_NORESERVE`, so only touched pages cost memory). At least [`MIN_ALT_STACK`].
    pub alt_stack_size: usize,
    /// Bytes at the top of each of those alternate stacks (Linux) written once when it is installed (at install
    /// for the installing thread, at thread start for the others), so that the pages a stop signal's frame and
    /// the stop handler use are in memory before a crash. Rounded up to whole pages, at most `alt_stack_size`.
    /// Default 8 KiB: the signal frame takes `AT_MINSIGSTKSZ` bytes (3,376 with AVX-512 on the development
    /// machine; `getauxval(3)`; more with AMX or SVE), and the stop handler's own frame follows below it. 0: none;
    /// then every thread takes those page faults when a crash stops it (about 5 µs of CPU per thread here, about a
    /// quarter of the stop round at 256 threads: BENCHMARKS.md, "the stop round without page faults"), and each
    /// new stack keeps 8 KiB less resident.
    pub alt_stack_prefault_bytes: usize,
    /// Size in bytes of the stack the crash owner switches to for the heavy work (walk, encode, write).
    pub crash_stack_size: usize,
    /// Bytes at the top of the crash stack (Linux) written once at install, so that the owner's walk, encoding and
    /// write take no page faults on it. Rounded up to whole pages, at most `crash_stack_size`. Default 64 KiB: the
    /// owner of the benchmark's crash (`bench __crash-ours`, 300 libraries, 64 threads) reaches between 48 and 64
    /// KiB down the stack (the walk's CFI evaluation is the deepest); without the writes it takes about 16 page
    /// faults there (counted with `perf`), about 0.05 ms of its walk on the development machine (an A/B of that
    /// crash, not a run beside the peer: BENCHMARKS.md, "no page pinned, no page faulted"). 0: none, and 64 KiB
    /// less resident.
    pub crash_stack_prefault_bytes: usize,
    /// How long the crash owner waits for all threads to answer the stop signal, in milliseconds.
    pub stop_timeout_ms: u32,
    /// How long a stopped thread waits to be released before it resumes on its own, in milliseconds.
    pub release_timeout_ms: u32,
    /// The real-time signal used to stop threads (Linux); `None` picks `SIGRTMAX() - 4`.
    pub stop_signal: Option<i32>,
    /// Size in bytes of the report file reserved at install (in `report_dir`, all zeros, locked with `flock` for
    /// the life of the process; `crash::writer::take_reserved`): the unused one an earlier process of the same
    /// user left, when there is one of exactly this size, else a new one. The first crash writes its report
    /// into it: no file is created after the fault, the blocks are already allocated (the report needs no new
    /// blocks when it fits), and one `fdatasync` makes it durable. A larger report grows the file. 0: no
    /// reservation; every report file is created after the fault. Default 64 KiB (a report of 64 threads × 32
    /// frames with 300 images takes about 18 KiB).
    ///
    /// The zeros beyond the report stay in the file (format 2.4 zero padding after the end section, which readers
    /// ignore and the reporter leaves out of uploads): cutting them with `ftruncate` cost about 2 ms on ext4 on the
    /// development machine (BENCHMARKS.md), against about 0.3 ms for overwrite, `fdatasync` and `rename`, and
    /// 0.5 ms for a new file with its directory `fsync`.
    pub reserved_report_bytes: usize,
    /// Walkers preallocated for stacks on demand (`crate::stacks`), non-fatal reports and hang detection: how many
    /// captures can run at once (a capture waits up to 10 ms for a walker, then fails with `Busy`). About 90 KiB of
    /// heap each (the unwinder's 62 KiB row cache, a 12 KiB recipe cache, an 8 KiB reader block cache, a 512-frame
    /// buffer) and a walk stack (`MAP_NORESERVE`; 32 KiB, 128 KiB in debug builds). Default 1; raise it when
    /// several threads capture at once. 0 turns stacks on demand off (every capture then fails with
    /// `NotInstalled`); the crash path never uses them.
    pub capture_walkers: usize,
    /// The real-time signal that asks a thread to walk its own stack for `crate::stacks::thread_stack` (Linux);
    /// `None` picks `SIGRTMAX() - 5`. Reserved like the stop signal: the application must not use it.
    pub capture_signal: Option<i32>,
}

impl Config {
    /// Defaults: 512 threads, 512 frames, 1024 images with 128 KiB of paths, 128 KiB alternate stack (its top 8
    /// KiB written at once), 256 KiB crash stack (its top 64 KiB written at once), 1 s stop timeout, 10 s release
    /// timeout, a 64 KiB reserved report file, 1 walker for stacks on demand.
    pub fn new(report_dir: impl Into<PathBuf>) -> Self {
        Config {
            report_dir: report_dir.into(),
            app_id: String::new(),
            short_version: String::new(),
            build_version: String::new(),
            max_threads: MIN_THREADS,
            max_frames: MIN_FRAMES,
            max_images: 1024,
            image_path_bytes: 128 * 1024,
            alt_stack_size: MIN_ALT_STACK,
            alt_stack_prefault_bytes: 8 * 1024,
            crash_stack_size: 256 * 1024,
            crash_stack_prefault_bytes: 64 * 1024,
            stop_timeout_ms: 1000,
            release_timeout_ms: 10_000,
            stop_signal: None,
            reserved_report_bytes: 64 * 1024,
            capture_walkers: 1,
            capture_signal: None,
        }
    }
}

impl Config {
    /// Checks the limits every backend needs (thread table, frame buffer, alternate stack, crash stack).
    ///
    /// # Errors
    /// [`InstallError::InvalidConfig`] naming the field below its minimum.
    pub(crate) fn check(&self) -> Result<(), InstallError> {
        if self.max_threads < MIN_THREADS {
            return Err(InstallError::InvalidConfig("max_threads is below MIN_THREADS"));
        }
        if self.max_frames < MIN_FRAMES {
            return Err(InstallError::InvalidConfig("max_frames is below MIN_FRAMES"));
        }
        if self.alt_stack_size < MIN_ALT_STACK {
            return Err(InstallError::InvalidConfig("alt_stack_size is below MIN_ALT_STACK"));
        }
        if self.crash_stack_size < 64 * 1024 {
            return Err(InstallError::InvalidConfig("crash_stack_size is below 64 KiB"));
        }
        Ok(())
    }
}
