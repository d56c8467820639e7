//! Non-fatal reports: every thread's stack, written as a report (format 2.3, META `nf`, SCHEMA.md §4.1.1) while
//! the process goes on, into the same directory as crash reports, so the reporter uploads it the same way at the
//! next launch (or at `reporter::Reporter::upload_pending`). The viewer prints it in Apple's layout with the
//! reason where a crash's exception lines are. The hang watchdog ([`crate::hangs`]) writes one per stall; the app
//! can ask for one with [`report`].
//!
//! The writer itself allocates nothing and takes no lock (see `crate::ondemand::nonfatal`): its buffers are
//! allocated by [`prepare`] (about 150 KiB plus a bit per image), which [`report`] runs at its first call and the
//! watchdog at its start.

pub use crate::ondemand::nonfatal::NonFatalError;
use crate::ondemand::nonfatal::{self, Buffers, Prepared, Request, PREPARED};
use core::sync::atomic::Ordering;
use report_format::encode::{NON_FATAL_APP, NON_FATAL_MANUAL};
use std::sync::Mutex;

/// Serializes [`prepare`] (install-time style work: it allocates).
static PREPARING: Mutex<()> = Mutex::new(());

/// Allocates the non-fatal writer's buffers once (later calls do nothing): the encoder's 64 KiB scratch and 64 KiB
/// write buffers, a 16 KiB thread-list buffer, [`nonfatal::MAX_THREADS`] thread ids, and a bit per image the
/// image table holds.
///
/// # Errors
/// [`NonFatalError::NotInstalled`] before `crate::install` (the image table's capacity sizes the bitset).
pub fn prepare() -> Result<(), NonFatalError> {
    if !PREPARED.load(Ordering::Acquire).is_null() {
        return Ok(());
    }
    let _guard = PREPARING.lock().unwrap_or_else(|e| e.into_inner());
    if !PREPARED.load(Ordering::Acquire).is_null() {
        return Ok(());
    }
    let st = crate::ondemand::state().ok_or(NonFatalError::NotInstalled)?;
    let images = st.images.read().capacity();
    let leak = |n: usize| -> &'static mut [u8] { Vec::leak(vec![0u8; n]) };
    let bufs = Buffers {
        scratch: leak(nonfatal::SCRATCH_BYTES),
        write_buf: leak(nonfatal::WRITE_BUF_BYTES),
        dirents: leak(nonfatal::DIRENT_BYTES),
        tids: Vec::leak(vec![0u64; nonfatal::MAX_THREADS]),
        used_images: Vec::leak(vec![0u64; images.div_ceil(64).max(1)]),
    };
    let p: &'static Prepared = Box::leak(Box::new(Prepared::new(bufs)));
    PREPARED.store(core::ptr::from_ref(p).cast_mut(), Ordering::Release);
    Ok(())
}

/// How long [`while_no_report_is_written`] waits for a non-fatal report under way (its captures take 2 s at most,
/// then the file is written and `fsync`ed).
const QUIESCE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Uninstall: runs `f` (which closes the report directory) once no non-fatal report is being written, holding the
/// writer's flag meanwhile; call it after the on-demand state was unpublished (a writer that takes the flag later
/// finds no state). Waits for a report under way (polling every millisecond, at most [`QUIESCE_WAIT`]); when it
/// does not finish in time, `f` is not run and this returns `false`: the caller then leaves the descriptor open
/// (leaked) rather than close it under the writer, whose next call could reach another file that reused the
/// number.
pub(crate) fn while_no_report_is_written(f: impl FnOnce()) -> bool {
    let Some(p) = nonfatal::prepared() else {
        f();
        return true;
    };
    let until = std::time::Instant::now() + QUIESCE_WAIT;
    loop {
        if let Some(_held) = p.try_hold() {
            f();
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A report's id, as its file is named (`<32 hex digits>.crashreport`) and as the viewer prints it (Incident
/// Identifier, the dashed uppercase UUID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportId(pub [u8; 16]);

impl core::fmt::Display for ReportId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        report_format::model::ReportId(self.0).fmt(f)
    }
}

/// Writes a non-fatal report now: every thread's stack, about the calling thread, with `reason` (kind `app`) or
/// without one (kind `manual`). Returns its id. Blocks while the threads are captured (each answers in
/// microseconds; one that does not answer costs at most 200 ms, all of them together at most 2 s) and the file is
/// written and made durable (`fsync`). Call it off the main thread if that matters. All or nothing: on any error
/// no report file is left in the directory.
///
/// # Errors
/// [`NonFatalError::NotInstalled`], [`NonFatalError::Busy`] (another non-fatal report is being written),
/// [`NonFatalError::Io`] (out of descriptors it fails with `EMFILE`: the crash path's spares are not used),
/// [`NonFatalError::Encode`] (the writing failed part-way; the partial file is removed).
pub fn report(reason: Option<&str>) -> Result<ReportId, NonFatalError> {
    prepare()?;
    let (kind, text) = match reason {
        Some(r) => (NON_FATAL_APP, r.as_bytes()),
        None => (NON_FATAL_MANUAL, &b""[..]),
    };
    let req = Request { kind, reason: text, duration_ns: None, focus_tid: crate::stacks::current_thread_id() };
    nonfatal::write(&req).map(ReportId)
}

impl core::fmt::Display for NonFatalError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NonFatalError::NotInstalled => f.write_str("the crash handler is not installed"),
            NonFatalError::NotPrepared => f.write_str("the non-fatal report buffers were not prepared"),
            NonFatalError::Busy => f.write_str("another non-fatal report is being written"),
            NonFatalError::Io(e) => write!(f, "the report file could not be written (error {e})"),
            NonFatalError::Encode => f.write_str("the report could not be encoded"),
        }
    }
}

impl std::error::Error for NonFatalError {}
