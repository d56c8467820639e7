//! The Darwin crash path: what the exception server ([`server`]) and the signal fallback ([`signals`]) run after a
//! fault. Both end in [`capture`]: suspend every other thread (`task_threads` + `thread_suspend`, our exception
//! threads excluded), read each thread's registers (`thread_get_state`), name and dispatch queue label into the
//! shared thread table, read the `__crash_info` messages of every image, and write the report with the shared
//! writer (`crate::crash::writer`, walking each stack with the shared frame-pointer walker over
//! `mach_vm_read_overwrite`), then resume the threads and release every right.
//!
//! Never allocates, locks, panics or formats; every wait is bounded. **Type-checked only**: nothing here has run on
//! Apple hardware.
#![allow(unsafe_code)]

pub mod mach;
pub mod server;
pub mod signals;

use crate::apple::crash_info::{self, CrashInfoString};
use crate::apple::pac::PacStrip;
use crate::apple::ports::SavedPorts;
use crate::arch::{RegisterValues, HOST_ARCH};
use crate::crash::hooks::{self, CrashEvent};
use crate::crash::images::ImageTable;
use crate::crash::raw_buf::RawBuf;
use crate::crash::reentrancy::CrashGate;
use crate::crash::threads::{SlotData, ThreadTable, CAPTURED, NOT_CAPTURED};
use crate::crash::writer::{self, FdSink, ReportHead, ReportNames, WorkBuffers};
use crate::unwind::{Repeat, WalkOptions};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use report_format::encode::{Exception, Message, Meta, Os, Process};

/// The fatal signals the fallback handles (Darwin numbering, `<sys/signal.h>`).
pub const FATAL_SIGNALS: [i32; 7] =
    [libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS];

/// Most `__crash_info` messages kept per report.
pub const MAX_MESSAGES: usize = 8;
/// Bytes kept of one message.
pub const MESSAGE_BYTES: usize = 2048;

/// Text captured at install for the META section.
#[derive(Debug, Default)]
pub struct Text {
    /// `iOS`, `macOS`, ...
    pub os_name: &'static [u8],
    /// `kern.osproductversion` (`17.4`).
    pub os_version: &'static [u8],
    /// `kern.osversion` build (`21E219`).
    pub os_build: &'static [u8],
    /// `hw.machine` on iOS (`iPhone14,2`), `hw.model` on macOS.
    pub hardware_model: &'static [u8],
    /// Absolute executable path.
    pub exe_path: &'static [u8],
    /// Executable name.
    pub exe_name: &'static [u8],
    /// Bundle id.
    pub app_id: &'static [u8],
    /// Marketing version.
    pub short_version: &'static [u8],
    /// Build number.
    pub build_version: &'static [u8],
    /// Parent process name (empty when unknown).
    pub parent_name: &'static [u8],
}

/// What the owner saved at entry (survives a fault of the owner, which the secondary server turns into a minimal
/// report).
#[derive(Clone, Copy, Debug)]
pub struct CrashRecord {
    /// Mach exception type (0: none, a signal-only crash).
    pub exception: i32,
    /// Mach codes.
    pub codes: [i64; 2],
    /// Valid entries of `codes`.
    pub code_count: u32,
    /// Signal number (Darwin numbering) the crash is or becomes.
    pub signal: i32,
    /// `si_code` (signal path) or 0.
    pub si_code: i32,
    /// Fault address.
    pub addr: Option<u64>,
    /// Thread id (`THREAD_IDENTIFIER_INFO.thread_id`) of the crashed thread.
    pub tid: u64,
    /// Registers of the crashed thread (empty set when only `thread_get_state` can supply them).
    pub regs: RegisterValues,
    /// The temporary report file being written, so a minimal report can remove it.
    pub temp: Option<ReportNames>,
}

impl CrashRecord {
    /// An empty record.
    pub const EMPTY: CrashRecord = CrashRecord {
        exception: 0,
        codes: [0; 2],
        code_count: 0,
        signal: 0,
        si_code: 0,
        addr: None,
        tid: 0,
        regs: RegisterValues::EMPTY,
        temp: None,
    };
}

/// Everything the crash path needs, allocated at install and never freed.
#[derive(Debug)]
pub struct State {
    /// The report directory, opened at install.
    pub dir_fd: i32,
    /// The thread table.
    pub threads: ThreadTable,
    /// The image table (filled by dyld's add-image callback).
    pub images: &'static ImageTable,
    /// Section scratch buffer.
    pub scratch: RawBuf<u8>,
    /// Write buffer of the file sink.
    pub write_buf: RawBuf<u8>,
    /// The reusable frame buffer.
    pub frames: RawBuf<u64>,
    /// How each frame was found, as long as `frames`.
    pub trust: RawBuf<u8>,
    /// Repeat records.
    pub repeats: RawBuf<Repeat>,
    /// `__crash_info` message texts, [`MAX_MESSAGES`] × [`MESSAGE_BYTES`].
    pub messages: RawBuf<u8>,
    /// Ports of the threads suspended by the owner (capacity: the thread table's).
    pub suspended: RawBuf<u32>,
    /// META text.
    pub text: Text,
    /// Pointer-authentication stripper for this task's address space (`None` on x86_64).
    pub pac: Option<PacStrip>,
    /// Offset of the label pointer inside a dispatch queue object (learned at install; `None`: no labels).
    pub queue_label_offset: Option<u64>,
    /// Our exception port (receive right + one send right); `MACH_PORT_NULL` when Mach registration failed.
    pub exc_port: u32,
    /// The exceptions registered on `exc_port` (0 when Mach registration failed).
    pub mask: u32,
    /// Handlers replaced at install, restored before the reply.
    pub saved_ports: SavedPorts,
    /// Thread port of the primary exception thread.
    pub primary_port: AtomicU32,
    /// Thread id of the primary exception thread.
    pub primary_tid: AtomicU64,
    /// Thread port of the secondary exception thread.
    pub secondary_port: AtomicU32,
    /// Signal actions replaced at install, in [`FATAL_SIGNALS`] order.
    pub prev_actions: [libc::sigaction; 7],
    /// Set once a report of this crash is on disk (the signal fallback then passes the signal through).
    pub reported: AtomicBool,
    /// Set when the owner finished (report written or given up); waiting threads stop waiting.
    pub done: AtomicBool,
    /// Saved at crash entry.
    pub record: UnsafeCell<CrashRecord>,
}

// SAFETY: after install the shared fields are read-only or atomics; `record` and the `RawBuf`s are used only by the
// crash owner (the thread that won `GATE`, or the secondary exception thread after the owner faulted, when the
// owner is stopped in its own exception), so no two threads access them at once.
unsafe impl Sync for State {}
// SAFETY: as above; raw pointers refer to leaked static storage valid on every thread.
unsafe impl Send for State {}

/// The installed state (null when not installed).
pub static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());
/// Who owns the crash (keyed by the crashed thread's id).
pub static GATE: CrashGate = CrashGate::new();

/// The installed state.
pub fn state() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: a non-null STATE points to a leaked `State` that is never freed (see `super::install`).
    unsafe { p.as_ref() }
}

const REASON_NO_STATE: &[u8] = b"thread_get_state failed for this thread";
const NOTE_OVERFLOW: &[u8] = b"some threads did not fit the thread table and are not in this report";
const NOTE_NO_THREADS: &[u8] = b"task_threads failed; only the crashed thread is reported";
const NOTE_MINIMAL: &[u8] =
    b"the crash handler itself faulted; this minimal report holds the original exception and the crashed thread's registers";

/// Monotonic-ish wall clock in nanoseconds (`clock_gettime(CLOCK_REALTIME)`, async-signal-safe per POSIX).
fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Sleeps about `ns` nanoseconds (`nanosleep`, async-signal-safe).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as _ };
    // SAFETY: valid in-pointer; a null remainder pointer is allowed.
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

/// Waits (bounded, `limit_ms` milliseconds) until the owner is done.
pub fn wait_done(st: &State, limit_ms: u32) {
    for _ in 0..limit_ms {
        if st.done.load(Ordering::Acquire) {
            return;
        }
        sleep_ns(1_000_000);
    }
}

fn report_id(tid: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    // SAFETY: `id` is a writable 16-byte buffer (getentropy accepts up to 256 bytes).
    if unsafe { libc::getentropy(id.as_mut_ptr().cast(), id.len()) } != 0 {
        let a = realtime_ns();
        // SAFETY: getpid has no preconditions.
        let b = (tid << 20) ^ u64::from(unsafe { libc::getpid() } as u32) ^ a.rotate_left(29);
        for (d, s) in id.iter_mut().zip(a.to_le_bytes().iter().chain(b.to_le_bytes().iter())) {
            *d = *s;
        }
    }
    writer::set_uuid_v4_bits(&mut id);
    id
}

fn head<'a>(
    st: &'a State,
    rec: &'a CrashRecord,
    id: [u8; 16],
    note: &'a [u8],
    msgs: &'a [Message<'a>],
) -> ReportHead<'a> {
    let t = &st.text;
    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    ReportHead {
        meta: Meta {
            report_id: id,
            capture_time_ns: realtime_ns(),
            handler_version: env!("CARGO_PKG_VERSION").as_bytes(),
            arch: HOST_ARCH,
            hardware_model: t.hardware_model,
            os: Os { name: t.os_name, version: t.os_version, build: t.os_build },
            process: Process {
                pid: Some(pid as u32),
                parent_pid: Some(ppid as u32),
                name: t.exe_name,
                path: t.exe_path,
                parent_name: t.parent_name,
                bundle_id: t.app_id,
                short_version: t.short_version,
                build_version: t.build_version,
                launch_time_ns: None,
            },
            note,
            ..Meta::default()
        },
        exception: Exception {
            mach_type: (rec.exception != 0).then_some(rec.exception as u32),
            mach_codes: rec.codes.get(..rec.code_count as usize).unwrap_or(&[]),
            signal: (rec.signal != 0).then_some(rec.signal),
            si_code: (rec.exception == 0).then_some(rec.si_code),
            fault_address: rec.addr,
            ..Exception::default()
        },
        messages: msgs,
    }
}

/// Reads the `__crash_info` strings of every image into `buf` (fault-proof reads, [`MESSAGE_BYTES`] per message);
/// fills `out` and returns how many. The backtrace string is kept only when it is the first message.
fn crash_messages<'b>(st: &'b State, reader: &mach::TaskReader, buf: &'b mut [u8], out: &mut [Message<'b>]) -> usize {
    let images = st.images.current();
    let mut n = 0usize;
    let mut chunks = buf.chunks_mut(MESSAGE_BYTES);
    let mut read = |a: u64, b: &mut [u8]| reader.read_into(a, b);
    for i in 0..images.len() {
        let Some(e) = images.entry(i) else { continue };
        if e.crash_info_addr == 0 {
            continue;
        }
        let Ok(info) = crash_info::read(&mut read, e.crash_info_addr, e.crash_info_size) else { continue };
        let path = images.path(i);
        let source = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
        for (kind, ptr) in info.string_pointers() {
            if ptr == 0 || n >= out.len() || (kind == CrashInfoString::Backtrace && n > 0) {
                continue;
            }
            let Some(chunk) = chunks.next() else { return n };
            let Some(r) = crash_info::read_c_string(&mut read, ptr, chunk) else { continue };
            let text: &'b [u8] = chunk;
            if let (Some(slot), Some(text)) = (out.get_mut(n), text.get(..r.len)) {
                *slot = Message { source, text };
                n += 1;
            }
        }
    }
    n
}

/// What [`capture`] needs to know about the crashed thread.
#[derive(Clone, Copy, Debug)]
pub struct Crashed {
    /// Its thread port when known (`MACH_PORT_NULL` otherwise; then it is found by `rec.tid`).
    pub port: u32,
    /// The calling thread's own port: never suspended (the signal path runs on the crashed thread itself).
    pub self_port: u32,
}

fn is_ours(st: &State, port: u32, own: &Crashed) -> bool {
    port == own.self_port
        || port == st.primary_port.load(Ordering::Acquire)
        || port == st.secondary_port.load(Ordering::Acquire)
}

/// The owner's full capture: suspend, read every thread, write the report, resume, release. `rec` was filled by
/// the caller. Returns `true` when a report was committed.
pub fn capture(st: &State, rec: &mut CrashRecord, who: Crashed) -> bool {
    hooks::call(CrashEvent::Start, rec.tid);
    let table = &st.threads;
    table.reset();
    let reader = mach::TaskReader::new();
    // SAFETY: the owner has exclusive use of the preallocated buffers (crash gate).
    let suspended = unsafe { st.suspended.get() };
    let mut n_suspended = 0usize;
    let mut overflow = 0usize;
    let mut found_crashed = false;
    let list = mach::ThreadList::take();
    if let Some(list) = &list {
        // Stop the world first, so registers and stacks are read from threads that no longer move.
        for i in 0..list.len() {
            let port = list.port(i);
            if !is_ours(st, port, &who) && mach::suspend(port) {
                if let Some(s) = suspended.get_mut(n_suspended) {
                    *s = port;
                    n_suspended += 1;
                } else {
                    mach::resume(port);
                }
            }
        }
        for i in 0..list.len() {
            let port = list.port(i);
            let (tid, qaddr) = mach::identify(port).unwrap_or((0, 0));
            let crashed = port == who.port || (rec.tid != 0 && tid == rec.tid);
            let Some((_, mut w)) = table.add_owned(tid) else {
                overflow += 1;
                continue;
            };
            let d = w.data();
            *d = SlotData::EMPTY;
            d.crashed = crashed;
            let mut name = [0u8; 64];
            let len = mach::name(port, &mut name);
            d.set_name(name.get(..len).unwrap_or(&[]));
            if let Some(off) = st.queue_label_offset {
                let mut q = [0u8; crate::crash::threads::QUEUE_LEN];
                let len = mach::queue_label(&reader, qaddr, off, &mut q);
                d.set_queue(q.get(..len).unwrap_or(&[]));
            }
            // The crashed thread's saved state is its fault state (it waits in exception delivery), except on the
            // signal path, where the crashed thread is this one: then the signal's ucontext is the truth.
            let from_record = (crashed && !rec.regs.set.is_empty()).then_some(rec.regs);
            let regs = if port == who.self_port { from_record } else { mach::registers(port, st.pac).or(from_record) };
            found_crashed |= crashed;
            match regs {
                Some(r) => {
                    d.regs = r;
                    if crashed {
                        rec.regs = r;
                    }
                    w.publish(CAPTURED);
                }
                None => {
                    d.reason = REASON_NO_STATE;
                    w.publish(NOT_CAPTURED);
                }
            }
        }
    }
    if !found_crashed {
        if let Some((_, mut w)) = table.add_owned(rec.tid) {
            let d = w.data();
            *d = SlotData::EMPTY;
            d.crashed = true;
            d.regs = rec.regs;
            w.publish(CAPTURED);
        }
    }
    table.publish();
    if hooks::fault_requested() {
        deliberate_fault();
    }
    let note: &[u8] = if list.is_none() {
        NOTE_NO_THREADS
    } else if overflow > 0 {
        NOTE_OVERFLOW
    } else {
        b""
    };
    let committed = write(st, rec, note, false);
    for port in suspended.iter().take(n_suspended) {
        mach::resume(*port);
    }
    if let Some(list) = list {
        list.release();
    }
    hooks::call(CrashEvent::BeforeReraise, rec.tid);
    committed
}

/// Writes the report (full or minimal) for `rec`; `true` when committed.
pub fn write(st: &State, rec: &mut CrashRecord, note: &[u8], minimal: bool) -> bool {
    if let Some(old) = rec.temp.take() {
        // SAFETY: the name is NUL-terminated; removing a torn temporary file of our own.
        unsafe { libc::unlinkat(st.dir_fd, old.temp().as_ptr().cast(), 0) };
    }
    let reader = mach::TaskReader::new();
    // SAFETY: owner-only buffers, distinct allocations.
    let (write_buf, scratch, frames, trust, repeats, msg_buf) = unsafe {
        (st.write_buf.get(), st.scratch.get(), st.frames.get(), st.trust.get(), st.repeats.get(), st.messages.get())
    };
    let mut msgs = [Message::default(); MAX_MESSAGES];
    let n_msgs = if minimal { 0 } else { crash_messages(st, &reader, msg_buf, &mut msgs) };
    let id = report_id(rec.tid);
    let names = ReportNames::new(&id);
    let Ok(fd) = writer::create_temp(st.dir_fd, &names) else { return false };
    rec.temp = Some(names);
    let rec_copy = *rec;
    let h = head(st, &rec_copy, id, if minimal { NOTE_MINIMAL } else { note }, msgs.get(..n_msgs).unwrap_or(&[]));
    let sink = FdSink::new(fd, write_buf);
    // Flush what was encoded; `commit` keeps the file only if its head sections (header, META, EXCEPTION) are durable.
    let _ = if minimal {
        match writer::write_minimal_report(sink, &h, rec.tid, &rec.regs, st.images.current(), scratch) {
            Ok(mut s) => s.flush().is_ok(),
            Err(_) => true,
        }
    } else {
        let mut mem = reader;
        let mut bufs = WorkBuffers { scratch, frames, trust, repeats };
        let opts = WalkOptions { strip: st.pac, ..WalkOptions::host() };
        match writer::write_report(sink, &h, &st.threads, st.images.current(), &mut mem, &opts, &mut bufs) {
            Ok(mut s) => s.flush().is_ok(),
            // The sink flushes what it has when dropped: intact sections still decode.
            Err(_) => true,
        }
    };
    let ok = writer::commit(st.dir_fd, fd, &names).is_ok();
    rec.temp = None;
    if ok {
        st.reported.store(true, Ordering::Release);
    }
    ok
}

/// `THREAD_STATE_NONE` of this CPU (for clearing exception ports).
pub fn state_none() -> i32 {
    super::ffi::THREAD_STATE_NONE
}

/// Deliberately faults (the test switch of `crash::hooks`): exercises the secondary exception thread.
#[inline(never)]
fn deliberate_fault() {
    let p = core::hint::black_box(16usize) as *mut u8;
    // SAFETY: not sound by design: writes to an unmapped low address to fault inside the handler. Only reached
    // when a test set `hooks::FAULT_IN_HANDLER`.
    unsafe { core::ptr::write_volatile(p, 1) };
}
