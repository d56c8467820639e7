//! Non-fatal reports (report format 2.3, META `nf`, SCHEMA.md §4.1.1): every thread's stack captured while the
//! process goes on, written in the crash report format, atomically, into the report directory the crash path
//! writes to (a temporary name, `fsync`, `rename`, directory `fsync`: `crate::crash::writer`), so the reporter
//! uploads it the same way. Made by the hang watchdog (`crate::hangs`) once per stall, or when the app asks
//! (`crate::nonfatal`).
//!
//! **Crash-path rules apply** (design.md §2): a hang report is written while the stalled thread may hold any lock
//! of the process (the allocator's among them), so nothing here allocates or takes a lock. Every buffer is
//! allocated beforehand ([`crate::nonfatal::prepare`]: the encoder's scratch and write buffers, the thread list,
//! the used-image bitset); writers are serialized by one flag taken with a compare-and-swap (a second report at
//! the same moment is refused, not waited for). Each thread is captured on its own, with the machinery of stacks
//! on demand: Linux signals it and it walks its own stack ([`super::linux`]); Apple suspends it, walks it, resumes
//! it
//! (`super::darwin`, type-checked only). A thread that does not answer in time (it blocks the capture signal, or
//! sleeps uninterruptibly) is listed as not captured, with the reason.
#![allow(unsafe_code)]

use super::{state, CaptureError, State};
use crate::arch::MAX_REGS;
use crate::crash::images::ImageList;
use crate::crash::user_table::{self, Snapshot};
use crate::crash::writer::{self, FdSink, ReportNames, UsedImages};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use report_format::encode::{
    frame_registers, EncodeError, Encoder, Exception, IndexedImage, KeyValue, Meta, NonFatal, Os, Process, Sink, Thread,
};

/// Threads a non-fatal report lists at most (more are left out; META's note says so).
pub const MAX_THREADS: usize = 1024;
/// Bytes of the encoder's section scratch buffer (as the crash writer's).
pub const SCRATCH_BYTES: usize = 64 * 1024;
/// Bytes of the file sink's write buffer.
pub const WRITE_BUF_BYTES: usize = 64 * 1024;
/// Bytes of the `getdents64` buffer (Linux thread list).
pub const DIRENT_BYTES: usize = 16 * 1024;
/// How long the whole capture may wait for threads that do not answer, nanoseconds (each thread gets at most
/// [`THREAD_TIMEOUT_NS`] of it).
pub const CAPTURE_BUDGET_NS: u64 = 2_000_000_000;
/// How long one thread may take to answer, nanoseconds.
pub const THREAD_TIMEOUT_NS: u64 = 200_000_000;

/// META note of a report whose thread list was cut at [`MAX_THREADS`].
const NOTE_TOO_MANY: &[u8] = b"more threads than a non-fatal report lists; the rest are left out";
/// Reason of a thread that did not answer the capture.
const REASON_TIMEOUT: &[u8] =
    b"thread did not answer the capture request in time (it blocks the capture signal, or sleeps uninterruptibly)";
/// Reason of a thread that exited before it was captured.
const REASON_GONE: &[u8] = b"thread exited before it could be captured";
/// Reason of a thread whose capture failed otherwise.
const REASON_FAILED: &[u8] = b"thread could not be captured";

/// The buffers a non-fatal report is written with (allocated by [`crate::nonfatal::prepare`], never freed).
#[derive(Debug)]
pub struct Buffers {
    /// One section's payload.
    pub scratch: &'static mut [u8],
    /// The file sink's write buffer.
    pub write_buf: &'static mut [u8],
    /// `getdents64` buffer (Linux).
    pub dirents: &'static mut [u8],
    /// Thread ids, in the task's order.
    pub tids: &'static mut [u64],
    /// Used-image bitset (one bit per image of the table, 64 a word).
    pub used_images: &'static mut [u64],
}

/// The prepared buffers and the flag that serializes writers.
#[derive(Debug)]
pub struct Prepared {
    busy: AtomicBool,
    bufs: UnsafeCell<Buffers>,
}

// SAFETY: `bufs` is used only by the writer that holds `busy` (taken with a compare-and-swap, given back with a
// release store), so no two threads use it at once; the slices are leaked static storage.
unsafe impl Sync for Prepared {}
// SAFETY: as above.
unsafe impl Send for Prepared {}

impl Prepared {
    /// Wraps the buffers (install or watchdog start time).
    pub fn new(bufs: Buffers) -> Prepared {
        Prepared { busy: AtomicBool::new(false), bufs: UnsafeCell::new(bufs) }
    }
}

/// The prepared buffers (null until `crate::nonfatal::prepare` ran).
pub static PREPARED: AtomicPtr<Prepared> = AtomicPtr::new(core::ptr::null_mut());

/// The prepared buffers, once `crate::nonfatal::prepare` ran.
pub fn prepared() -> Option<&'static Prepared> {
    // SAFETY: a non-null PREPARED points to a leaked `Prepared` that is never freed.
    unsafe { PREPARED.load(Ordering::Acquire).as_ref() }
}

/// Why no non-fatal report was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonFatalError {
    /// The crash handler is not installed (or has no capture walker).
    NotInstalled,
    /// The buffers were not prepared (`crate::nonfatal::prepare`).
    NotPrepared,
    /// Another non-fatal report is being written at this moment.
    Busy,
    /// The report file could not be created or committed (`errno`).
    Io(i32),
    /// The report could not be encoded (a buffer too small, or a write failed: the disk is full, or the file size
    /// limit was reached). Nothing is left in the report directory: a partial non-fatal report is not committed.
    Encode,
}

/// What a non-fatal report says about itself.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `report_format::encode::NON_FATAL_HANG`, `NON_FATAL_MANUAL` or `NON_FATAL_APP`.
    pub kind: &'a [u8],
    /// The reason in words (empty: none).
    pub reason: &'a [u8],
    /// How long the stall had lasted, nanoseconds (hangs).
    pub duration_ns: Option<u64>,
    /// The thread the report is about (its kernel id): the stalled main thread, or the thread that asked.
    pub focus_tid: u64,
}

/// The writer's flag, held: no non-fatal report is written until this is dropped ([`Prepared::try_hold`]).
#[derive(Debug)]
pub struct Held<'a>(&'a Prepared);

impl Prepared {
    /// Takes the writer's flag if no report is being written (one compare-and-swap): while the returned guard
    /// lives, [`write()`] answers [`NonFatalError::Busy`]. Uninstall holds it to close the report directory.
    pub fn try_hold(&self) -> Option<Held<'_>> {
        self.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok().then(|| Held(self))
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

/// Writes a non-fatal report of every thread (see the module docs); returns its report id (16 bytes, a version-4
/// UUID). All or nothing: on `Ok` the whole report is committed; on any error no file is left (a report whose
/// encoding failed part-way is removed, not committed). Allocation-free and lock-free; waits for each thread at most [`THREAD_TIMEOUT_NS`], for all of them at
/// most [`CAPTURE_BUDGET_NS`]. Not for signal handlers.
///
/// # Errors
/// [`NonFatalError`].
pub fn write(req: &Request<'_>) -> Result<[u8; 16], NonFatalError> {
    if state().is_none() {
        return Err(NonFatalError::NotInstalled);
    }
    let prepared = prepared().ok_or(NonFatalError::NotPrepared)?;
    let Some(_held) = prepared.try_hold() else { return Err(NonFatalError::Busy) };
    // The state is read again with the flag held: uninstall unpublishes it, then takes the flag before it closes
    // the report directory, so a writer that holds the flag either sees no state or finishes before the close.
    let st = state().ok_or(NonFatalError::NotInstalled)?;
    // SAFETY: `busy` is ours until `_held` drops, so no other reference to the buffers exists.
    let bufs = unsafe { &mut *prepared.bufs.get() };
    write_with(st, bufs, req)
}

/// [`write`] with the buffers held.
fn write_with(st: &State, bufs: &mut Buffers, req: &Request<'_>) -> Result<[u8; 16], NonFatalError> {
    let Buffers { scratch, write_buf, dirents, tids, used_images } = bufs;
    let (n, overflow) = list_threads(dirents, tids);
    let tids = tids.get(..n).unwrap_or(&[]);
    let focus = tids.iter().position(|t| *t == req.focus_tid).and_then(|i| u32::try_from(i).ok());
    let id = report_id(req.focus_tid);
    let names = ReportNames::new(&id);
    // Without the crash path's spare descriptors: out of descriptors, a non-fatal report fails (EMFILE) and the
    // spares stay for a crash.
    let fd = writer::create_temp_no_spares(st.dir_fd, &names).map_err(NonFatalError::Io)?;
    // Held for the whole report (every thread's capture, the encoding): the threads' frames are matched to this
    // list's images (used-image bitset, image indices) and the images section lists it, so it must not change in
    // between. A refresh waits for it (`read_held`: without the bound `read` gives a walk).
    let images = st.images.read_held();
    let text = st.text;
    let meta = Meta {
        report_id: id,
        capture_time_ns: clock_ns(libc::CLOCK_REALTIME),
        handler_version: env!("CARGO_PKG_VERSION").as_bytes(),
        arch: crate::arch::HOST_ARCH,
        hardware_model: text.hardware_model,
        os: Os { name: text.os_name, version: text.os_version, build: text.os_build },
        process: Process {
            pid: u32::try_from(st.pid).ok(),
            name: text.exe_name,
            path: text.exe_path,
            parent_name: text.parent_name,
            bundle_id: text.app_id,
            short_version: text.short_version,
            build_version: text.build_version,
            ..Process::default()
        },
        thread_count: u32::try_from(n).ok(),
        image_count: u32::try_from(images.len()).ok(),
        minimal: false,
        note: if overflow { NOTE_TOO_MANY } else { b"" },
        non_fatal: Some(NonFatal { kind: req.kind, reason: req.reason, duration_ns: req.duration_ns, thread: focus }),
    };
    let sink = FdSink::new(fd, write_buf);
    let encoded = encode(sink, scratch, &meta, tids, &images, used_images);
    drop(images);
    let ok = match encoded {
        Ok(mut s) => s.flush().is_ok(),
        Err(_) => false,
    };
    if !ok {
        // Not committed: unlike a crash, the process goes on and the next report can be complete, and `Ok` means a
        // whole report is in the directory, `Err` that none is (the temporary file is removed).
        // SAFETY: closing our own descriptor of the temporary file, then removing it by its NUL-terminated name.
        unsafe {
            libc::close(fd);
            libc::unlinkat(st.dir_fd, names.temp().as_ptr().cast(), 0);
        }
        return Err(NonFatalError::Encode);
    }
    writer::commit(st.dir_fd, fd, &names, writer::FileKind::Created).map_err(NonFatalError::Io)?;
    Ok(id)
}

/// Encodes the report: META, an EXCEPTION without exception, USER, one THREAD per thread (each captured and
/// encoded at once), the used images in full, the others by path, END.
fn encode<S: Sink>(
    sink: S,
    scratch: &mut [u8],
    meta: &Meta<'_>,
    tids: &[u64],
    images: &ImageList,
    used_images: &mut [u64],
) -> Result<S, EncodeError> {
    let used = UsedImages::new(images, used_images);
    let mut enc = Encoder::begin(sink, scratch)?;
    enc.meta(meta)?;
    enc.exception(&Exception::default())?;
    let mut user = Snapshot::new();
    user.take();
    let mut kv = [KeyValue::default(); user_table::SLOTS];
    enc.user(user.pairs(&mut kv))?;
    let deadline = clock_ns(libc::CLOCK_MONOTONIC).saturating_add(CAPTURE_BUDGET_NS);
    for (i, &tid) in tids.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        let mut name_buf = [0u8; 64];
        let name = thread_name(tid, &mut name_buf);
        let left = deadline.saturating_sub(clock_ns(libc::CLOCK_MONOTONIC));
        let timeout = left.clamp(1_000_000, THREAD_TIMEOUT_NS);
        let mut encoded: Option<Result<(), EncodeError>> = None;
        let captured = capture(tid, timeout, &mut |w| {
            let Some(o) = w.outcome.filter(|o| o.frames > 0) else { return Err(CaptureError::NoRegisters) };
            let mut regs_buf = [None; MAX_REGS];
            let all = w.regs.to_options(&mut regs_buf).len();
            let keep = frame_registers(w.regs.set);
            let mut last = 0usize;
            for (k, r) in regs_buf.iter_mut().enumerate().take(all) {
                if !keep.contains(&k) {
                    *r = None;
                } else if r.is_some() {
                    last = k.saturating_add(1);
                }
            }
            let t = Thread {
                index,
                id: Some(tid),
                name,
                captured: true,
                register_set: w.regs.set,
                registers: regs_buf.get(..last).unwrap_or(&[]),
                frames: w.frames(),
                trust: w.trust(),
                repeats: w.repeats(),
                frames_truncated: o.truncated,
                images: Some(&used),
                ..Thread::default()
            };
            encoded = Some(enc.thread(&t));
            Ok(())
        });
        match (captured, encoded) {
            (Ok(()), Some(r)) => r?,
            (result, _) => {
                let reason = match result {
                    Err(CaptureError::Timeout) => REASON_TIMEOUT,
                    Err(CaptureError::NoSuchThread) => REASON_GONE,
                    _ => REASON_FAILED,
                };
                enc.thread(&Thread { index, id: Some(tid), name, captured: false, reason, ..Thread::default() })?;
            }
        }
    }
    write_images(&mut enc, images, &used)?;
    enc.finish()
}

/// The used images in full (IMAGES sections, chunks of 16), then the paths of the others (IMAGE NAMES).
fn write_images<S: Sink>(
    enc: &mut Encoder<'_, S>,
    images: &ImageList,
    used: &UsedImages<'_>,
) -> Result<(), EncodeError> {
    const CHUNK: usize = 16;
    let mut i = 0usize;
    while i < images.len() {
        let mut chunk = [IndexedImage::default(); CHUNK];
        let mut n = 0usize;
        while i < images.len() && n < CHUNK {
            if used.is_used(i) {
                if let (Some(img), Some(slot), Ok(index)) = (images.image(i), chunk.get_mut(n), u32::try_from(i)) {
                    *slot = IndexedImage { index, image: img };
                    n = n.saturating_add(1);
                }
            }
            i = i.saturating_add(1);
        }
        if n > 0 {
            enc.indexed_images(chunk.get(..n).unwrap_or(&[]))?;
        }
    }
    enc.image_names(
        (0..images.len()).filter(|&i| !used.is_used(i)).filter_map(|i| Some((u32::try_from(i).ok()?, images.path(i)))),
    )
}

/// Captures thread `tid` (waiting at most `timeout_ns`) and calls `f` with the walker holding its stack.
fn capture(
    tid: u64,
    timeout_ns: u64,
    f: &mut dyn FnMut(&super::pool::Walker) -> Result<(), CaptureError>,
) -> Result<(), CaptureError> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        super::linux::capture_with(tid, timeout_ns, f)
    }
    #[cfg(target_vendor = "apple")]
    {
        let _ = timeout_ns;
        super::darwin::capture_with(tid, f)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        let _ = (tid, timeout_ns, f);
        Err(CaptureError::NotInstalled)
    }
}

/// The process's threads in the task's order (Linux: `/proc/self/task`, the main thread first; Apple:
/// `task_threads`), into `tids`; how many, and whether some did not fit.
fn list_threads(dirents: &mut [u8], tids: &mut [u64]) -> (usize, bool) {
    let mut n = 0usize;
    let mut overflow = false;
    let mut add = |tid: u64| match tids.get_mut(n) {
        Some(slot) => {
            *slot = tid;
            n = n.saturating_add(1);
        }
        None => overflow = true,
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // Not the crash path's spare descriptors (see `write_with`).
        let _ = crate::platform::linux::crash::tasks::for_each_thread_no_spares(dirents, &mut add);
    }
    #[cfg(target_vendor = "apple")]
    {
        let _ = dirents;
        if let Some(list) = crate::platform::darwin::crash::mach::ThreadList::take() {
            for i in 0..list.len() {
                if let Some((id, _)) = crate::platform::darwin::crash::mach::identify(list.port(i)) {
                    add(id);
                }
            }
            list.release();
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        let _ = (dirents, &mut add);
    }
    (n, overflow)
}

/// Thread `tid`'s name into `buf` (Linux: `/proc/self/task/<tid>/comm` with raw `open`/`read`; Apple:
/// `THREAD_EXTENDED_INFO.pth_name` through the thread's port); empty when unknown.
fn thread_name(tid: u64, buf: &mut [u8; 64]) -> &[u8] {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let mut path = [0u8; 48];
        let mut at = 0usize;
        let mut put = |bytes: &[u8], at: &mut usize| {
            for b in bytes {
                if let Some(slot) = path.get_mut(*at) {
                    *slot = *b;
                    *at = at.saturating_add(1);
                }
            }
        };
        put(b"/proc/self/task/", &mut at);
        let mut digits = [0u8; 20];
        let mut d = digits.len();
        let mut v = tid;
        loop {
            d = d.saturating_sub(1);
            if let Some(slot) = digits.get_mut(d) {
                *slot = b'0'.saturating_add((v % 10) as u8);
            }
            v /= 10;
            if v == 0 || d == 0 {
                break;
            }
        }
        put(digits.get(d..).unwrap_or(&[]), &mut at);
        put(b"/comm\0", &mut at);
        // SAFETY: `path` is NUL-terminated (the buffer is large enough for the prefix, 20 digits and the suffix).
        let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return &[];
        }
        // SAFETY: reading into our own buffer of its length, then closing our descriptor.
        let got = unsafe {
            let r = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            r
        };
        let len = usize::try_from(got).unwrap_or(0);
        let name = buf.get(..len).unwrap_or(&[]);
        name.strip_suffix(b"\n").unwrap_or(name)
    }
    #[cfg(target_vendor = "apple")]
    {
        let _ = tid;
        buf.get(..0).unwrap_or(&[])
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        let _ = tid;
        buf.get(..0).unwrap_or(&[])
    }
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer (clock_gettime is async-signal-safe, POSIX.1-2017 §2.4.3).
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// A fresh report id: a version-4 UUID from the OS's random bytes, or from the clocks when there are none.
fn report_id(tid: u64) -> [u8; 16] {
    let mut random = [0u8; 16];
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let got = crate::platform::linux::crash::sys::getrandom(&mut random);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    // SAFETY: `random` is a writable buffer of 16 bytes (getentropy allows up to 256).
    let got = unsafe { libc::getentropy(random.as_mut_ptr().cast(), random.len()) } == 0;
    let facts = crate::crash::capture::Facts {
        pid: 0,
        ppid: 0,
        now_ns: clock_ns(libc::CLOCK_REALTIME),
        monotonic_ns: clock_ns(libc::CLOCK_MONOTONIC),
        random: got.then_some(random),
    };
    crate::crash::capture::report_id(&facts, tid)
}
