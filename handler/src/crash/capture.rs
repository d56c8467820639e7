//! The crash sequence, one for both backends: what the crash owner does once it holds the crash gate
//! ([`crate::crash::reentrancy`]), and the data it does it with.
//!
//! [`run`]: reset the thread table; the backend asks every other thread to stop ([`Backend::request_stop`]); while
//! they answer, the owner takes a fresh report id, creates the temporary file and reads the messages and the images
//! the backend says are mapped; once every thread answered or was given up on ([`Backend::await_stop`]) the report
//! is written: META and EXCEPTION from the [`CrashRecord`] and the install-time [`Text`], every thread walked
//! through the backend's fault-proof memory reader, the images, END; `fsync`, `rename`, directory `fsync`
//! ([`crate::crash::writer::commit`]). Resuming the threads and the exit (re-raise, chaining to a previous
//! handler, answering the Mach request) stay with each backend, because they differ: on Linux the owner's signal
//! must decide the exit before stopped threads run again; on Apple platforms the threads are resumed before the
//! Mach reply.
//!
//! What each backend provides ([`Backend`]): how it stops threads and reads their registers (Linux: the stop
//! signal and each thread's `ucontext`; Apple: `thread_suspend` and `thread_get_state`), how it reads memory
//! (`process_vm_readv`; `vm_read_overwrite`), which images are mapped now (the loader's link map; dyld's
//! callbacks), the process facts (pid, clock, random bytes), and, on Apple platforms, the `__crash_info` messages.
//!
//! Crash path: never allocates, locks, panics or formats; every buffer is a [`RawBuf`] allocated at install
//! (`crate::prealloc`) and used only by the gate's owner.
#![allow(unsafe_code)]

use crate::arch::{RegisterValues, HOST_ARCH};
use crate::crash::hooks::{self, CrashEvent};
use crate::crash::images::ImageList;
use crate::crash::raw_buf::RawBuf;
use crate::crash::reason;
use crate::crash::threads::ThreadTable;
use crate::crash::writer::{self, FdSink, FileKind, ReportHead, ReportNames, WorkBuffers};
use crate::unwind::{MemoryReader, Repeat, RuleCache, WalkOptions};
use core::cell::UnsafeCell;
use report_format::encode::{Exception, Message, Meta, Os, Process};

/// Most `__crash_info` messages a report holds (Apple: one per image that has any, usually one).
pub const MAX_MESSAGES: usize = 8;

/// Bytes of the buffer [`join_notes`] builds a combined META note in.
pub const NOTE_BYTES: usize = 512;

/// META note of a report written after the handler itself faulted.
pub const NOTE_MINIMAL: &[u8] =
    b"the crash handler itself faulted; this minimal report holds the original exception and the crashed thread's registers";
/// META note when the thread table was too small for every thread.
pub const NOTE_OVERFLOW: &[u8] = b"some threads did not fit the thread table and are not in this report";

/// Text captured at install for the META section; every field is leaked install-time storage, empty when unknown.
#[derive(Debug, Default)]
pub struct Text {
    /// Operating system name: `Linux`, `iOS`, `macOS`, ...
    pub os_name: &'static [u8],
    /// OS version: `uname -r` on Linux, `kern.osproductversion` (`17.4`) on Apple platforms.
    pub os_version: &'static [u8],
    /// OS build: `uname -v` on Linux, `kern.osversion` (`21E219`) on Apple platforms.
    pub os_build: &'static [u8],
    /// Hardware: `uname -m` on Linux, `hw.machine` (`iPhone14,2`) on iOS, `hw.model` on macOS.
    pub hardware_model: &'static [u8],
    /// Absolute executable path.
    pub exe_path: &'static [u8],
    /// Executable file name.
    pub exe_name: &'static [u8],
    /// Parent process name.
    pub parent_name: &'static [u8],
    /// Application id (bundle id), from the configuration.
    pub app_id: &'static [u8],
    /// Marketing version, from the configuration.
    pub short_version: &'static [u8],
    /// Build number, from the configuration.
    pub build_version: &'static [u8],
}

/// What the owner saved about the crash at entry. It lives in [`Core`] (not on a stack) so that it survives a
/// fault of the owner, after which a minimal report is written from it.
#[derive(Clone, Copy, Debug)]
pub struct CrashRecord {
    /// Kernel thread id of the crashed thread (Linux `gettid`, Apple `thread_identifier_info.thread_id`).
    pub tid: u64,
    /// Signal number the crash is or becomes (0: a Mach exception that has not become a signal yet).
    pub signal: i32,
    /// `si_code` of the signal (0 when the crash came as a Mach exception).
    pub si_code: i32,
    /// Fault address, when the signal or exception carries a meaningful one.
    pub addr: Option<u64>,
    /// Mach exception type (`EXC_BAD_ACCESS` = 1, ...; `<mach/exception_types.h>`); 0: none.
    pub mach_exception: i32,
    /// Mach exception codes (`MACH_EXCEPTION_CODES`: 64-bit each).
    pub mach_codes: [i64; 2],
    /// Valid entries of `mach_codes`.
    pub mach_code_count: u32,
    /// Registers of the crashed thread (from the signal's `ucontext` or the exception's thread state; an empty set
    /// when only `thread_get_state` can supply them).
    pub regs: RegisterValues,
    /// The temporary report file being written, so a later minimal report can remove it.
    pub temp: Option<ReportNames>,
    /// The report this crash committed.
    pub committed: Option<ReportNames>,
}

impl CrashRecord {
    /// A record of nothing (install time).
    pub const EMPTY: CrashRecord = CrashRecord {
        tid: 0,
        signal: 0,
        si_code: 0,
        addr: None,
        mach_exception: 0,
        mach_codes: [0; 2],
        mach_code_count: 0,
        regs: RegisterValues::EMPTY,
        temp: None,
        committed: None,
    };
}

/// The preallocated buffers the report writer works in (see [`WorkBuffers`]).
#[derive(Debug)]
pub struct Buffers {
    /// One section's payload.
    pub scratch: RawBuf<u8>,
    /// The file sink's write buffer.
    pub write_buf: RawBuf<u8>,
    /// The reusable frame buffer (`Config::max_frames` entries).
    pub frames: RawBuf<u64>,
    /// How each frame was found, as long as `frames`.
    pub trust: RawBuf<u8>,
    /// Repeat records of one thread.
    pub repeats: RawBuf<Repeat>,
    /// The unwind-row cache (one entry).
    pub rules: RawBuf<RuleCache>,
    /// The used-image bitset of the report writer (`Config::max_images` bits, 64 a word).
    pub used_images: RawBuf<u64>,
}

/// Everything both backends' crash paths share, allocated at install and never freed.
#[derive(Debug)]
pub struct Core {
    /// The report directory, opened at install.
    pub dir_fd: i32,
    /// The thread table.
    pub threads: ThreadTable,
    /// META text.
    pub text: Text,
    buffers: Buffers,
    record: UnsafeCell<CrashRecord>,
}

// SAFETY: after install the shared fields are read-only or atomics; `record` and `buffers` are used only by the
// crash owner (the thread that holds the crash gate, or, on Apple platforms, the secondary exception thread after
// the owner faulted, when the owner is stopped in its own exception), so no two threads access them at once.
unsafe impl Sync for Core {}
// SAFETY: as above; the raw pointers refer to leaked static storage valid on every thread.
unsafe impl Send for Core {}

impl Core {
    /// Assembles the core (install time).
    pub fn new(dir_fd: i32, threads: ThreadTable, text: Text, buffers: Buffers) -> Self {
        Core { dir_fd, threads, text, buffers, record: UnsafeCell::new(CrashRecord::EMPTY) }
    }

    /// The crash record.
    ///
    /// # Safety
    /// Only the crash owner calls this, and it holds no other reference from an earlier call (a recursive entry
    /// abandons the outer one). Signal-safe.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn record(&self) -> &mut CrashRecord {
        // SAFETY: exclusivity is the caller's obligation (the crash gate).
        unsafe { &mut *self.record.get() }
    }

    /// The writer's buffers (`None` only if install left the rule cache empty, which it never does).
    ///
    /// # Safety
    /// As [`Core::record`]: only the crash owner calls this, once per report.
    #[allow(clippy::mut_from_ref)]
    unsafe fn work(&self) -> Option<(&mut [u8], WorkBuffers<'_>)> {
        let b = &self.buffers;
        // SAFETY: the caller is the owner; the seven buffers are distinct allocations.
        let (write_buf, scratch, frames, trust, repeats, rules, used_images) = unsafe {
            (
                b.write_buf.get(),
                b.scratch.get(),
                b.frames.get(),
                b.trust.get(),
                b.repeats.get(),
                b.rules.get(),
                b.used_images.get(),
            )
        };
        Some((write_buf, WorkBuffers { scratch, frames, trust, repeats, rules: rules.first_mut()?, used_images }))
    }
}

/// Facts about the process read at capture time by the backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Wall-clock time of the capture, nanoseconds since the Unix epoch (`CLOCK_REALTIME`).
    pub now_ns: u64,
    /// A monotonic clock reading in nanoseconds (mixed into the report id when no random bytes are available).
    pub monotonic_ns: u64,
    /// 16 bytes from the OS's random source (`getrandom`, `getentropy`), `None` when it failed.
    pub random: Option<[u8; 16]>,
}

/// What one backend does inside the shared sequence. Every method runs on the crash path: no allocation, no lock,
/// no panic, bounded waits.
pub trait Backend {
    /// The fault-proof reader the stacks are walked with.
    type Memory: MemoryReader;

    /// Pid, clocks, random bytes.
    fn facts(&self) -> Facts;

    /// Starts stopping every other thread: lists the threads into `table` (already reset; the crashed thread
    /// included, marked `crashed`) and asks each to stop. It may return before they answered (Linux: the stop
    /// signals are sent, the answers come in meanwhile) or with every thread already stopped and read (Apple:
    /// `thread_suspend` and `thread_get_state` are synchronous). May refine `rec.regs` (Apple: the thread state of
    /// the exception).
    fn request_stop(&mut self, table: &ThreadTable, rec: &mut CrashRecord);

    /// Finishes what [`Backend::request_stop`] began: on return every slot of `table` is final (stopped, with its
    /// registers and name, or with the reason it could not be). Returns the META note ("" when none).
    fn await_stop(&mut self, table: &ThreadTable, rec: &mut CrashRecord) -> &'static [u8];

    /// The memory reader for this capture.
    fn memory(&mut self) -> Self::Memory;

    /// The images mapped now (read with `mem` where the backend reads the loader's own list), and a META note
    /// about them ("" when none).
    fn images(&mut self, mem: &mut Self::Memory) -> (&'static ImageList, &'static [u8]);

    /// The images of the install-time table, for the minimal report (no memory reads beyond the table).
    fn installed_images(&self) -> &'static ImageList;

    /// Messages the crashed process left for its crash reporter (Apple `__crash_info`), into `out`; how many.
    fn messages(&mut self, out: &mut [Message<'static>]) -> usize {
        let _ = out;
        0
    }

    /// How stacks are walked (pointer-authentication stripping on Apple arm64).
    fn walk_options(&self) -> WalkOptions {
        WalkOptions::host()
    }
}

/// The shared sequence for a crash the owner has recorded in `rec`: reset the table, ask the threads to stop, write
/// the report. Returns `true` when a report was committed (`rec.committed`). The threads stay stopped: resuming
/// them is the caller's next step. Signal-safe.
///
/// Between asking the threads to stop and waiting for their answers, the owner does everything that needs none of
/// them: the report id, the temporary file, the messages, the abort-message snapshot and the image list (the
/// loader's link map: a few hundred fault-proof reads, the largest fixed cost of a report). On Linux the answers
/// come in meanwhile, on the other core or whenever the owner's system calls let them run. The image list is then
/// read while threads that have not answered yet may still run; a library one of them loads in that window is not
/// in the list (its frames are stored as absolute addresses), as with a thread that never stops.
pub fn run<B: Backend>(core: &Core, backend: &mut B, rec: &mut CrashRecord) -> bool {
    core.threads.reset();
    backend.request_stop(&core.threads, rec);
    discard_temp(core, rec);
    let facts = backend.facts();
    let id = report_id(&facts, rec.tid);
    let (fd, names, kind) = open_report(core, &facts, &id);
    if fd.is_some() {
        rec.temp = Some(names);
    }
    let mut backend_msgs = [Message::default(); MAX_MESSAGES];
    let n_backend = backend.messages(&mut backend_msgs);
    let opts = backend.walk_options();
    let mut mem = backend.memory();
    let mut why = reason::Snapshot::new();
    why.take(rec.tid, reason::is_abort_like(rec.signal, rec.mach_exception), rec.signal, &mut mem);
    let (images, image_note) = backend.images(&mut mem);
    let stop_note = backend.await_stop(&core.threads, rec);
    hooks::call(CrashEvent::StopDone, rec.tid);
    if hooks::fault_requested() {
        hooks::deliberate_fault();
    }
    let Some(fd) = fd else { return false };
    // SAFETY: the caller is the crash owner.
    let Some((write_buf, mut bufs)) = (unsafe { core.work() }) else { return false };
    let mut msgs = [Message::default(); MAX_MESSAGES + reason::MAX_MESSAGES];
    let n_msgs = merge_messages(&mut msgs, backend_msgs.get(..n_backend).unwrap_or(&[]), &why);
    let mut note_buf = [0u8; NOTE_BYTES];
    let note = join_notes(&mut note_buf, stop_note, image_note);
    let mut h = head(&core.text, rec, id, &facts, note, msgs.get(..n_msgs).unwrap_or(&[]));
    h.exception.language = why.language();
    let sink = FdSink::new(fd, write_buf);
    // On an error the sink flushes what it has when dropped (intact sections still decode); `commit` keeps the
    // file only if its head sections (header, META, EXCEPTION) are durable.
    if let Ok(mut s) = writer::write_report(sink, &h, &core.threads, images, &mut mem, &opts, &mut bufs) {
        let _ = s.flush();
    }
    hooks::call(CrashEvent::ReportWritten, rec.tid);
    finish(core, rec, fd, names, kind)
}

/// The file for report `id`: the reservation made at install when this process still has it, else a new
/// temporary file; `None` when neither can be had. Signal-safe.
fn open_report(core: &Core, facts: &Facts, id: &[u8; 16]) -> (Option<i32>, ReportNames, FileKind) {
    let pid = i32::try_from(facts.pid).unwrap_or(-1);
    if let Some((fd, name)) = writer::take_reserved(pid) {
        return (Some(fd), ReportNames::with_temp(id, &name), FileKind::Reserved);
    }
    let names = ReportNames::new(id);
    (writer::create_temp(core.dir_fd, &names).ok(), names, FileKind::Created)
}

/// The backend's messages, then the [`reason::Snapshot`]'s, into `out`; how many. Pure.
fn merge_messages<'a>(out: &mut [Message<'a>], backend: &[Message<'a>], why: &'a reason::Snapshot) -> usize {
    let mut n = 0usize;
    for m in backend {
        let Some(slot) = out.get_mut(n) else { return n };
        *slot = *m;
        n = n.saturating_add(1);
    }
    n.saturating_add(why.messages(out.get_mut(n..).unwrap_or(&mut [])))
}

/// Writes the minimal report of `rec` (after a fault inside the handler): META, EXCEPTION, the crashed thread's
/// registers and frame 0, the install-time images; no walking, no other threads. `true` when committed.
/// Signal-safe.
pub fn write_minimal<B: Backend>(core: &Core, backend: &B, rec: &mut CrashRecord) -> bool {
    discard_temp(core, rec);
    // SAFETY: the caller is the crash owner (the outer use of the buffers is abandoned).
    let Some((write_buf, bufs)) = (unsafe { core.work() }) else { return false };
    let facts = backend.facts();
    let id = report_id(&facts, rec.tid);
    let (fd, names, kind) = open_report(core, &facts, &id);
    let Some(fd) = fd else { return false };
    rec.temp = Some(names);
    let h = head(&core.text, rec, id, &facts, NOTE_MINIMAL, &[]);
    let sink = FdSink::new(fd, write_buf);
    let images = backend.installed_images();
    if let Ok(mut s) =
        writer::write_minimal_report(sink, &h, rec.tid, &rec.regs, images, bufs.scratch, bufs.used_images)
    {
        let _ = s.flush();
    }
    finish(core, rec, fd, names, kind)
}

/// Commits `fd` under `names`; records the result in `rec`.
fn finish(core: &Core, rec: &mut CrashRecord, fd: i32, names: ReportNames, kind: FileKind) -> bool {
    let ok = writer::commit(core.dir_fd, fd, &names, kind).is_ok();
    rec.temp = None;
    if ok {
        rec.committed = Some(names);
    }
    ok
}

/// Removes the temporary file of an earlier, abandoned attempt (a fault interrupted the full report).
fn discard_temp(core: &Core, rec: &mut CrashRecord) {
    if let Some(old) = rec.temp.take() {
        // SAFETY: the name is NUL-terminated; unlinking a stale temporary file of our own (async-signal-safe).
        unsafe { libc::unlinkat(core.dir_fd, old.temp().as_ptr().cast(), 0) };
    }
}

/// A fresh report id: a version-4 UUID from `facts.random`, or, when the OS gave no random bytes, from the clocks,
/// the thread id and the pid (unique enough for file names in one directory). Pure.
pub fn report_id(facts: &Facts, tid: u64) -> [u8; 16] {
    let mut id = facts.random.unwrap_or_else(|| {
        let a = facts.now_ns ^ facts.monotonic_ns.rotate_left(17);
        let b = tid.rotate_left(32) ^ u64::from(facts.pid) ^ a.rotate_left(29);
        let mut id = [0u8; 16];
        for (d, s) in id.iter_mut().zip(a.to_le_bytes().into_iter().chain(b.to_le_bytes())) {
            *d = s;
        }
        id
    });
    writer::set_uuid_v4_bits(&mut id);
    id
}

/// The report's META and EXCEPTION for `rec`. Pure.
pub fn head<'a>(
    text: &'a Text,
    rec: &'a CrashRecord,
    id: [u8; 16],
    facts: &Facts,
    note: &'a [u8],
    messages: &'a [Message<'a>],
) -> ReportHead<'a> {
    let count = usize::try_from(rec.mach_code_count).unwrap_or(0);
    ReportHead {
        meta: Meta {
            report_id: id,
            capture_time_ns: facts.now_ns,
            handler_version: env!("CARGO_PKG_VERSION").as_bytes(),
            arch: HOST_ARCH,
            hardware_model: text.hardware_model,
            os: Os { name: text.os_name, version: text.os_version, build: text.os_build },
            process: Process {
                pid: Some(facts.pid),
                parent_pid: Some(facts.ppid),
                name: text.exe_name,
                path: text.exe_path,
                parent_name: text.parent_name,
                bundle_id: text.app_id,
                short_version: text.short_version,
                build_version: text.build_version,
                launch_time_ns: None,
            },
            note,
            ..Meta::default()
        },
        exception: Exception {
            mach_type: u32::try_from(rec.mach_exception).ok().filter(|t| *t != 0),
            mach_codes: rec.mach_codes.get(..count).unwrap_or(&[]),
            signal: (rec.signal != 0).then_some(rec.signal),
            si_code: (rec.mach_exception == 0).then_some(rec.si_code),
            fault_address: rec.addr,
            ..Exception::default()
        },
        messages,
    }
}

/// `a` and `b` joined by `"; "` in `buf` (cut at its end); either alone when the other is empty. Pure.
pub fn join_notes<'a>(buf: &'a mut [u8], a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    let mut n = 0usize;
    for &c in a.iter().chain(b"; ").chain(b) {
        let Some(slot) = buf.get_mut(n) else { break };
        *slot = c;
        n = n.saturating_add(1);
    }
    buf.get(..n).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_id_is_a_v4_uuid_from_random_bytes_or_clocks() {
        let f = Facts { pid: 7, ppid: 1, now_ns: 1, monotonic_ns: 2, random: Some([0xff; 16]) };
        let id = report_id(&f, 3);
        assert_eq!(id[6] >> 4, 4, "version 4");
        assert_eq!(id[8] & 0xc0, 0x80, "RFC 4122 variant");
        let a = report_id(&Facts { random: None, ..f }, 3);
        let b = report_id(&Facts { random: None, now_ns: 5, ..f }, 3);
        assert_ne!(a, b, "the clock goes into the fallback id");
        assert_eq!(a[6] >> 4, 4);
    }

    #[test]
    fn head_carries_signal_or_mach_exception() {
        let text = Text { os_name: b"Linux", ..Text::default() };
        let facts = Facts { pid: 9, ppid: 1, now_ns: 42, ..Facts::default() };
        let rec = CrashRecord { signal: 11, si_code: 1, addr: Some(0x10), ..CrashRecord::EMPTY };
        let h = head(&text, &rec, [0; 16], &facts, b"n", &[]);
        assert_eq!(h.exception.signal, Some(11));
        assert_eq!(h.exception.si_code, Some(1));
        assert_eq!(h.exception.mach_type, None);
        assert!(h.exception.mach_codes.is_empty());
        assert_eq!(h.meta.process.pid, Some(9));
        assert_eq!(h.meta.capture_time_ns, 42);
        let mach = CrashRecord { mach_exception: 1, mach_codes: [2, 0x10], mach_code_count: 2, ..rec };
        let h = head(&text, &mach, [0; 16], &facts, b"", &[]);
        assert_eq!(h.exception.mach_type, Some(1));
        assert_eq!(h.exception.mach_codes, &[2, 0x10]);
        assert_eq!(h.exception.si_code, None);
    }

    #[test]
    fn notes_join_and_cut() {
        let mut buf = [0u8; 8];
        assert_eq!(join_notes(&mut buf, b"", b"b"), b"b");
        assert_eq!(join_notes(&mut buf, b"a", b""), b"a");
        assert_eq!(join_notes(&mut buf, b"a", b"b"), b"a; b");
        assert_eq!(join_notes(&mut buf, b"abcd", b"efgh"), b"abcd; ef");
    }
}
