//! The Darwin crash path: what the exception server ([`server`]) and the signal fallback ([`signals`]) run after a
//! fault. Both end in [`capture`]: suspend every other thread (`task_threads` + `thread_suspend`, our exception
//! threads excluded), read each thread's registers (`thread_get_state`), name and dispatch queue label into the
//! shared thread table, read the `__crash_info` messages of every image, and write the report with the shared
//! writer (`crate::crash::writer`, walking each stack with the shared frame-pointer walker over
//! `vm_read_overwrite`), then resume the threads and release every right.
//!
//! Never allocates, locks, panics or formats; every wait is bounded. **Type-checked only**: nothing here has run on
//! Apple hardware.
#![allow(unsafe_code)]

use super::mach;

use crate::arch::pac::PacStrip;
use crate::crash::actions::SavedActions;
use crate::crash::capture::{self, Backend, Core, CrashRecord, Facts, NOTE_OVERFLOW};
use crate::crash::hooks::{self, CrashEvent};
use crate::crash::images::{ImageList, ImageTable};
use crate::crash::raw_buf::RawBuf;
use crate::crash::reentrancy::CrashGate;
use crate::crash::threads::{SlotData, ThreadTable, CAPTURED, NOT_CAPTURED};
use crate::platform::darwin::crash::crash_info::{self, CrashInfoString};
use crate::platform::darwin::crash::ports::SavedPorts;
use crate::unwind::WalkOptions;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use report_format::encode::Message;

pub use crate::crash::capture::MAX_MESSAGES;
/// Bytes kept of one `__crash_info` message.
pub const MESSAGE_BYTES: usize = 2048;

/// Everything the Darwin crash path needs, allocated at install and never freed.
#[derive(Debug)]
pub struct State {
    /// What both backends share: report directory, thread table, META text, writer buffers, crash record.
    pub core: Core,
    /// The image table (filled by dyld's add-image callback).
    pub images: &'static ImageTable,
    /// `__crash_info` message texts, [`MAX_MESSAGES`] × [`MESSAGE_BYTES`].
    pub messages: RawBuf<u8>,
    /// Ports of the threads suspended by the owner (capacity: the thread table's).
    pub suspended: RawBuf<u32>,
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
    /// Actions of the fatal signals found at install.
    pub prev_actions: SavedActions,
    /// Set once a report of this crash is on disk (the signal fallback then passes the signal through).
    pub reported: AtomicBool,
    /// Set when the owner finished (report written or given up); waiting threads stop waiting.
    pub done: AtomicBool,
}

// SAFETY: after install the shared fields are read-only or atomics; the `RawBuf`s (and `core`'s record and buffers)
// are used only by the crash owner (the thread that won `GATE`, or the secondary exception thread after the owner
// faulted, when the owner is stopped in its own exception), so no two threads access them at once.
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
const NOTE_NO_THREADS: &[u8] = b"task_threads failed; only the crashed thread is reported";

/// Reads clock `id` in nanoseconds (`clock_gettime`, async-signal-safe per POSIX.1-2017 §2.4.3).
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Wall-clock time in nanoseconds since the Unix epoch (`CLOCK_REALTIME`).
fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// A monotonic clock in nanoseconds (`CLOCK_MONOTONIC`).
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
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
                n = n.saturating_add(1);
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

/// The Darwin side of the shared crash sequence ([`capture::run`]): threads are suspended with `thread_suspend` and
/// read with `thread_get_state`; memory is read with the task's fault-proof reader; images come from the table
/// dyld's callbacks keep; the `__crash_info` messages are read from every image.
struct Owner {
    st: &'static State,
    who: Crashed,
    /// The task's thread list, held from [`Backend::request_stop`] until [`Owner::resume`].
    list: Option<mach::ThreadList>,
    /// How many entries of `st.suspended` hold threads suspended by this capture.
    n_suspended: usize,
    /// META note of the stop ("" when none).
    note: &'static [u8],
}

impl Owner {
    /// Resumes every thread this capture suspended and releases the thread list.
    fn resume(&mut self) {
        // SAFETY: the owner has exclusive use of the preallocated buffers (crash gate).
        let suspended = unsafe { self.st.suspended.get() };
        for port in suspended.iter().take(self.n_suspended) {
            mach::resume(*port);
        }
        self.n_suspended = 0;
        if let Some(list) = self.list.take() {
            list.release();
        }
    }
}

impl Backend for Owner {
    type Memory = mach::TaskReader;

    fn facts(&self) -> Facts {
        let mut random = [0u8; 16];
        // SAFETY: `random` is a writable 16-byte buffer (getentropy accepts up to 256 bytes); getpid and getppid
        // have no preconditions.
        let (ok, pid, ppid) = unsafe {
            (libc::getentropy(random.as_mut_ptr().cast(), random.len()) == 0, libc::getpid(), libc::getppid())
        };
        Facts {
            pid: pid as u32,
            ppid: ppid as u32,
            now_ns: realtime_ns(),
            monotonic_ns: monotonic_ns(),
            random: ok.then_some(random),
        }
    }

    fn request_stop(&mut self, table: &ThreadTable, rec: &mut CrashRecord) {
        let (st, who) = (self.st, self.who);
        let reader = mach::TaskReader::new();
        // SAFETY: the owner has exclusive use of the preallocated buffers (crash gate).
        let suspended = unsafe { st.suspended.get() };
        let mut overflow = 0usize;
        let mut found_crashed = false;
        self.list = mach::ThreadList::take();
        if let Some(list) = &self.list {
            // Stop the world first, so registers and stacks are read from threads that no longer move.
            for i in 0..list.len() {
                let port = list.port(i);
                if !is_ours(st, port, &who) && mach::suspend(port) {
                    if let Some(s) = suspended.get_mut(self.n_suspended) {
                        *s = port;
                        self.n_suspended = self.n_suspended.saturating_add(1);
                    } else {
                        mach::resume(port);
                    }
                }
            }
            hooks::call(CrashEvent::ThreadsStopped, rec.tid);
            for i in 0..list.len() {
                let port = list.port(i);
                let (tid, qaddr) = mach::identify(port).unwrap_or((0, 0));
                let crashed = port == who.port || (rec.tid != 0 && tid == rec.tid);
                let Some((_, mut w)) = table.add_owned(tid) else {
                    overflow = overflow.saturating_add(1);
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
                // The crashed thread's saved state is its fault state (it waits in exception delivery), except on
                // the signal path, where the crashed thread is this one: then the signal's ucontext is the truth.
                let from_record = (crashed && !rec.regs.set.is_empty()).then_some(rec.regs);
                let regs = if port == who.self_port {
                    from_record
                } else {
                    mach::registers(port, st.pac, crashed).or(from_record)
                };
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
        self.note = if self.list.is_none() {
            NOTE_NO_THREADS
        } else if overflow > 0 {
            NOTE_OVERFLOW
        } else {
            b""
        };
    }

    /// Every thread was suspended and read in [`Backend::request_stop`] (both are synchronous Mach calls), so the
    /// report's images and messages are read from a stopped task.
    fn await_stop(&mut self, _table: &ThreadTable, _rec: &mut CrashRecord) -> &'static [u8] {
        self.note
    }

    fn memory(&mut self) -> Self::Memory {
        mach::TaskReader::new()
    }

    fn images(&mut self, _mem: &mut Self::Memory) -> (&'static ImageList, &'static [u8]) {
        (self.st.images.current(), b"")
    }

    fn installed_images(&self) -> &'static ImageList {
        self.st.images.current()
    }

    fn messages(&mut self, out: &mut [Message<'static>]) -> usize {
        let st = self.st;
        // SAFETY: the owner has exclusive use of the preallocated buffers (crash gate).
        let buf = unsafe { st.messages.get() };
        crash_messages(st, &mach::TaskReader::new(), buf, out)
    }

    fn walk_options(&self) -> WalkOptions {
        WalkOptions { strip: self.st.pac, ..WalkOptions::host() }
    }
}

/// The owner's full capture: suspend, read every thread, write the report, resume, release. `rec` was filled by
/// the caller. Returns `true` when a report was committed.
pub fn capture(st: &'static State, rec: &mut CrashRecord, who: Crashed) -> bool {
    hooks::call(CrashEvent::Start, rec.tid);
    let mut owner = Owner { st, who, list: None, n_suspended: 0, note: b"" };
    let committed = capture::run(&st.core, &mut owner, rec);
    if committed {
        st.reported.store(true, Ordering::Release);
    }
    owner.resume();
    hooks::call(CrashEvent::BeforeReraise, rec.tid);
    committed
}

/// Writes the minimal report of `rec` (after a fault inside the handler); `true` when committed.
pub fn write_minimal(st: &'static State, rec: &mut CrashRecord) -> bool {
    let owner = Owner { st, who: Crashed { port: 0, self_port: 0 }, list: None, n_suspended: 0, note: b"" };
    let committed = capture::write_minimal(&st.core, &owner, rec);
    if committed {
        st.reported.store(true, Ordering::Release);
    }
    committed
}

/// `THREAD_STATE_NONE` of this CPU (for clearing exception ports).
pub fn state_none() -> i32 {
    super::super::ffi::THREAD_STATE_NONE
}
