//! The Linux crash path: the fatal-signal handler, the stop-signal handler, and the owner's capture sequence.
//!
//! Sequence (design.md §1–§2, §4): the first faulting thread owns the crash ([`CrashGate`]); it saves the signal
//! and its registers from the `ucontext`, switches to the preallocated crash stack, fills the thread table from
//! `/proc/self/task`, sends every other thread the reserved real-time stop signal with `tgkill`, and waits (bounded)
//! until they answer. Each stopped thread's handler stores its own `ucontext` registers and name in its slot and
//! waits on a futex (bounded) until released. The owner then walks every stack with `process_vm_readv` and writes
//! the report section by section (temporary name, `fsync`, `rename`), restores the previous signal actions,
//! releases the threads and re-raises, so the process dies with the original signal and earlier handlers still run.
//!
//! A fault inside the handler (a recursive crash) writes a minimal report and dies; a fault on another thread while
//! a crash is handled records that thread's registers and waits, boundedly, for the owner. Every wait has a timeout.
//! Nothing here allocates, locks or panics.
#![allow(unsafe_code)]

pub mod context;
pub mod elf;
pub mod link_map;
pub mod memory;
pub mod stack_switch;
pub mod sys;
pub mod tasks;

use crate::arch::{RegisterValues, HOST_ARCH};
use crate::crash::hooks::{self, CrashEvent};
use crate::crash::images::ImageTable;
use crate::crash::reentrancy::{CrashGate, Entry};
use crate::crash::threads::{SlotData, ThreadTable, CAPTURED, PENDING, WRITING};
use crate::crash::writer::{self, FdSink, ReportHead, ReportNames, WorkBuffers};
use crate::unwind::{Repeat, WalkOptions};
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, Ordering};
use report_format::encode::{Exception, Meta, Os, Process};

/// The fatal signals the handler catches. Source: `signal(7)` (default action "Core").
pub const FATAL_SIGNALS: [i32; 7] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT, libc::SIGTRAP, libc::SIGSYS];

pub use crate::crash::raw_buf::RawBuf;

/// Text captured at install for the META section.
#[derive(Debug, Default)]
pub struct Text {
    /// `uname -r`.
    pub os_release: &'static [u8],
    /// `uname -v`.
    pub os_version: &'static [u8],
    /// `uname -m`.
    pub machine: &'static [u8],
    /// Absolute executable path (`/proc/self/exe`).
    pub exe_path: &'static [u8],
    /// Executable file name.
    pub exe_name: &'static [u8],
    /// Application id.
    pub app_id: &'static [u8],
    /// Marketing version.
    pub short_version: &'static [u8],
    /// Build number.
    pub build_version: &'static [u8],
}

/// What the owner saved at entry (survives a recursive crash, which overwrites the alternate stack).
#[derive(Clone, Copy, Debug)]
pub struct CrashRecord {
    /// Signal number.
    pub signal: i32,
    /// `si_code`.
    pub code: i32,
    /// Fault address (`si_addr`) for kernel-generated faults.
    pub addr: Option<u64>,
    /// Owner thread id.
    pub tid: u64,
    /// Owner registers from the `ucontext`.
    pub regs: RegisterValues,
    /// The temporary report file being written, so a recursive crash can remove it.
    pub temp: Option<ReportNames>,
}

/// Everything the crash path needs, allocated at install and never freed.
#[derive(Debug)]
pub struct State {
    /// The report directory, opened at install.
    pub dir_fd: i32,
    /// The reserved stop signal.
    pub stop_signal: i32,
    /// Owner's wait for answers, in nanoseconds.
    pub stop_timeout_ns: u64,
    /// Stopped threads' wait for release, in nanoseconds.
    pub release_timeout_ns: u64,
    /// The thread table.
    pub threads: ThreadTable,
    /// The image table.
    pub images: ImageTable,
    /// The crash-time image list, read from the loader's link map by the owner.
    pub crash_images: link_map::CrashImages,
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
    /// `getdents64` buffer.
    pub dirents: RawBuf<u8>,
    /// Page cache of the memory reader.
    pub page: RawBuf<u8>,
    /// A non-blocking pipe `(read, write)` for the memory reader when `process_vm_readv` does not work here.
    pub mem_pipe: Option<(i32, i32)>,
    /// 16-aligned top of the crash stack.
    pub crash_stack_top: usize,
    /// META text.
    pub text: Text,
    /// Actions replaced at install, in [`FATAL_SIGNALS`] order.
    pub prev_fatal: [libc::sigaction; 7],
    /// Action of the stop signal replaced at install.
    pub prev_stop: libc::sigaction,
    /// Saved at crash entry.
    pub record: UnsafeCell<CrashRecord>,
}

// SAFETY: after install the shared fields are read-only or atomics; `record` and the `RawBuf`s are used only by the
// crash owner (the thread that won `GATE`), so no two threads access them at once.
unsafe impl Sync for State {}
// SAFETY: as above; the raw pointers refer to leaked static storage valid on every thread.
unsafe impl Send for State {}

/// The installed state (null when not installed).
pub static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());
/// Who owns the crash.
pub static GATE: CrashGate = CrashGate::new();

fn state() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: a non-null STATE points to a leaked `State` that is never freed (see install.rs).
    unsafe { p.as_ref() }
}

const REASON_EXITED: &[u8] = b"thread exited before it could be stopped";
const REASON_SEND_FAILED: &[u8] = b"the stop signal could not be sent";
const REASON_NO_ANSWER: &[u8] =
    b"thread did not answer the stop signal in time (it blocks the signal, or sits in an uninterruptible wait)";
const NOTE_OVERFLOW: &[u8] = b"some threads did not fit the thread table and are not in this report";
const NOTE_NO_TASKS: &[u8] = b"/proc/self/task could not be read; only the crashed thread is reported";
const NOTE_MINIMAL: &[u8] =
    b"the crash handler itself faulted; this minimal report holds the original exception and the crashed thread's registers";

/// Whether `sig` with `code` must be re-sent after the handler: user-sent signals (`si_code <= 0`, e.g. `abort()`)
/// and traps whose instruction is not re-executed on return (`SIGTRAP` after `int3`/`brk`, `SIGSYS`). Faults
/// (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE` from the kernel) re-fault on return instead. Pure.
pub fn needs_reraise(sig: i32, code: i32) -> bool {
    code <= 0 || matches!(sig, libc::SIGTRAP | libc::SIGSYS | libc::SIGABRT)
}

/// Whether `si_addr` is meaningful: a kernel-generated fault of a signal that sets it (`sigaction(2)`). Pure.
pub fn has_fault_address(sig: i32, code: i32) -> bool {
    code > 0 && matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP)
}

fn reraise(sig: i32, code: i32) {
    if needs_reraise(sig, code) {
        let _ = sys::tgkill(sys::getpid(), sys::gettid(), sig);
    }
}

/// Dies by `sig`: default action for every fatal signal, unblock, send. Returns only if the signal did not kill
/// (then the faulting instruction re-faults with the default action on return).
fn die(sig: i32) {
    for s in FATAL_SIGNALS {
        sys::reset_to_default(s);
    }
    sys::reset_to_default(sig);
    let _ = sys::tgkill(sys::getpid(), sys::gettid(), sig);
}

fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

fn own_name(d: &mut SlotData) {
    let mut name = [0u8; 16];
    sys::thread_name(&mut name);
    d.set_name(&name);
}

/// The handler for [`FATAL_SIGNALS`] (`SA_SIGINFO | SA_ONSTACK | SA_NODEFER`, stop signal blocked).
///
/// # Safety
/// Called by the kernel as an `SA_SIGINFO` handler: `info` and `uc` are null or valid.
pub unsafe extern "C" fn fatal_handler(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let saved_errno = writer::errno();
    // SAFETY: `info` is null or the kernel's siginfo for this signal.
    let (code, addr) = match unsafe { info.as_ref() } {
        // SAFETY: reading `si_addr` of a kernel siginfo is valid for every signal (it may be meaningless).
        Some(i) => (i.si_code, unsafe { i.si_addr() } as usize as u64),
        None => (0, 0),
    };
    let Some(st) = state() else {
        die(sig);
        return;
    };
    let tid = sys::gettid();
    match GATE.enter(tid) {
        Entry::First => {
            hooks::call(CrashEvent::Start, tid);
            // SAFETY: only the owner writes the record, and we are the owner.
            let rec = unsafe { &mut *st.record.get() };
            *rec = CrashRecord {
                signal: sig,
                code,
                addr: if has_fault_address(sig, code) { Some(addr) } else { None },
                tid,
                // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
                regs: unsafe { context::registers(uc) },
                temp: None,
            };
            // SAFETY: the crash stack is reserved for the owner, mapped at install, and 16-aligned.
            unsafe { stack_switch::run_on_stack(st.crash_stack_top, owner_main, st as *const State as *mut c_void) };
            reraise(sig, code);
        }
        Entry::Recursive { depth: 1 } => {
            // SAFETY: as above; the outer use of the crash stack is abandoned (we never return to it).
            unsafe { stack_switch::run_on_stack(st.crash_stack_top, minimal_main, st as *const State as *mut c_void) };
            // SAFETY: the record was written by this thread at first entry.
            let orig = unsafe { (*st.record.get()).signal };
            die(orig);
        }
        Entry::Recursive { .. } => die(sig),
        Entry::Other { .. } => secondary(st, tid, sig, code, uc),
    }
    set_errno(saved_errno);
}

/// Handler of the stop signal: store this thread's registers in its slot, then wait (bounded) for release.
///
/// # Safety
/// Called by the kernel as an `SA_SIGINFO` handler: `uc` is null or valid.
pub unsafe extern "C" fn stop_handler(_sig: libc::c_int, _info: *mut libc::siginfo_t, uc: *mut c_void) {
    let saved_errno = writer::errno();
    if let Some(st) = state() {
        let table = &st.threads;
        if let Some((_, mut w)) = table.claim(sys::gettid()) {
            let d = w.data();
            *d = SlotData::EMPTY;
            // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
            d.regs = unsafe { context::registers(uc) };
            own_name(d);
            w.publish(CAPTURED);
            table.answers.fetch_add(1, Ordering::AcqRel);
            sys::futex_wake(&table.answers, 1);
            wait_release(st);
        }
    }
    set_errno(saved_errno);
}

/// Another thread faulted while a crash is handled: record this thread, wait for the owner, then die.
fn secondary(st: &State, tid: u64, sig: i32, code: i32, uc: *mut c_void) {
    let table = &st.threads;
    let deadline = sys::monotonic_ns().saturating_add(st.stop_timeout_ns);
    while !table.is_published() && sys::monotonic_ns() < deadline {
        sys::sleep_ns(1_000_000);
    }
    if let Some((_, mut w)) = table.claim(tid) {
        let d = w.data();
        *d = SlotData::EMPTY;
        // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
        d.regs = unsafe { context::registers(uc) };
        own_name(d);
        w.publish(CAPTURED);
        table.answers.fetch_add(1, Ordering::AcqRel);
        sys::futex_wake(&table.answers, 1);
    }
    if wait_release(st) {
        reraise(sig, code);
    } else {
        die(sig);
    }
}

/// Waits until the owner releases stopped threads or the release timeout passes; `true` when released.
fn wait_release(st: &State) -> bool {
    let table = &st.threads;
    let deadline = sys::monotonic_ns().saturating_add(st.release_timeout_ns);
    loop {
        if table.release.load(Ordering::Acquire) != 0 {
            return true;
        }
        let now = sys::monotonic_ns();
        if now >= deadline {
            return false;
        }
        sys::futex_wait(&table.release, 0, (deadline - now).min(100_000_000));
    }
}

/// Waits until every stopped thread answered or the stop timeout passed.
fn wait_for_answers(st: &State) {
    let table = &st.threads;
    let deadline = sys::monotonic_ns().saturating_add(st.stop_timeout_ns);
    loop {
        let seen = table.answers.load(Ordering::Acquire);
        if table.outstanding() == 0 {
            return;
        }
        let now = sys::monotonic_ns();
        if now >= deadline {
            return;
        }
        sys::futex_wait(&table.answers, seen, (deadline - now).min(20_000_000));
    }
}

fn restore_previous(st: &State) {
    for (sig, prev) in FATAL_SIGNALS.iter().zip(st.prev_fatal.iter()) {
        sys::set_action(*sig, prev, None);
    }
}

fn release_threads(st: &State) {
    st.threads.release.store(1, Ordering::Release);
    sys::futex_wake(&st.threads.release, i32::MAX);
}

fn report_id(tid: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    if !sys::getrandom(&mut id) {
        let a = sys::realtime_ns() ^ sys::monotonic_ns().rotate_left(17);
        let b = (tid << 32) ^ u64::from(sys::getpid() as u32) ^ a.rotate_left(29);
        id[..8].copy_from_slice(&a.to_le_bytes());
        id[8..].copy_from_slice(&b.to_le_bytes());
    }
    writer::set_uuid_v4_bits(&mut id);
    id
}

fn head<'a>(st: &'a State, rec: &CrashRecord, id: [u8; 16], pid: i32, note: &'a [u8]) -> ReportHead<'a> {
    let t = &st.text;
    ReportHead {
        meta: Meta {
            report_id: id,
            capture_time_ns: sys::realtime_ns(),
            handler_version: env!("CARGO_PKG_VERSION").as_bytes(),
            arch: HOST_ARCH,
            hardware_model: t.machine,
            os: Os { name: b"Linux", version: t.os_release, build: t.os_version },
            process: Process {
                pid: Some(pid as u32),
                parent_pid: Some(sys::getppid() as u32),
                name: t.exe_name,
                path: t.exe_path,
                parent_name: b"",
                bundle_id: t.app_id,
                short_version: t.short_version,
                build_version: t.build_version,
                launch_time_ns: None,
            },
            note,
            ..Meta::default()
        },
        exception: Exception {
            signal: Some(rec.signal),
            si_code: Some(rec.code),
            fault_address: rec.addr,
            ..Exception::default()
        },
        messages: &[],
    }
}

/// Deliberately faults (the test switch of `crash::hooks`).
#[inline(never)]
fn deliberate_fault() {
    let p = core::hint::black_box(16usize) as *mut u8;
    // SAFETY: not sound by design: writes to an unmapped low address to fault inside the handler. Only reached
    // when a test set `hooks::FAULT_IN_HANDLER`.
    unsafe { core::ptr::write_volatile(p, 1) };
}

/// The owner's work, on the crash stack.
extern "C" fn owner_main(arg: *mut c_void) {
    // SAFETY: `arg` is the `&'static State` passed by `fatal_handler`.
    let st = unsafe { &*(arg as *const State) };
    // SAFETY: the owner is the only user of the record and the buffers.
    let rec = unsafe { &mut *st.record.get() };
    let pid = sys::getpid();
    let table = &st.threads;
    table.reset();
    if let Some((_, mut w)) = table.add_owned(rec.tid) {
        let d = w.data();
        *d = SlotData::EMPTY;
        d.regs = rec.regs;
        d.crashed = true;
        own_name(d);
        w.publish(CAPTURED);
    }
    let mut overflow = 0usize;
    // SAFETY: owner-only buffer.
    let dirents = unsafe { st.dirents.get() };
    let own = rec.tid;
    let enumerated = tasks::for_each_thread(dirents, &mut |t| {
        if t != own && table.add_pending(t).is_none() {
            overflow += 1;
        }
    })
    .is_ok();
    table.publish();
    for (i, s) in table.used().iter().enumerate() {
        if s.state() == PENDING {
            if let Err(e) = sys::tgkill(pid, s.tid(), st.stop_signal) {
                table.fail(i, if e == libc::ESRCH { REASON_EXITED } else { REASON_SEND_FAILED });
            }
        }
    }
    wait_for_answers(st);
    for i in 0..table.len() {
        if table.slot(i).is_some_and(|s| s.state() == PENDING) {
            table.expire(i, REASON_NO_ANSWER);
        }
    }
    // A thread caught between claiming and publishing gets a short, bounded grace period.
    for _ in 0..100 {
        if !table.used().iter().any(|s| s.state() == WRITING) {
            break;
        }
        sys::sleep_ns(100_000);
    }
    if hooks::fault_requested() {
        deliberate_fault();
    }

    let note: &[u8] = if !enumerated {
        NOTE_NO_TASKS
    } else if overflow > 0 {
        NOTE_OVERFLOW
    } else {
        b""
    };
    let id = report_id(rec.tid);
    let names = ReportNames::new(&id);
    if let Ok(fd) = writer::create_temp(st.dir_fd, &names) {
        rec.temp = Some(names);
        // SAFETY: owner-only buffers, distinct allocations.
        let (write_buf, scratch, frames, trust, repeats, page) = unsafe {
            (st.write_buf.get(), st.scratch.get(), st.frames.get(), st.trust.get(), st.repeats.get(), st.page.get())
        };
        let mut mem = memory::ProcessVmReader::new(pid, page).with_pipe(st.mem_pipe);
        // Every image mapped now, from the loader's link map (the install snapshot if it cannot be read).
        // SAFETY: the owner is the only user of the crash-time list.
        let (images, image_note) = unsafe { st.crash_images.collect(&mut mem, st.images.current()) };
        let mut note_buf = [0u8; 512];
        let h = head(st, rec, id, pid, link_map::join_notes(&mut note_buf, note, image_note));
        let mut bufs = WorkBuffers { scratch, frames, trust, repeats };
        let sink = FdSink::new(fd, write_buf);
        // On an error the sink flushes what it has when dropped; `commit` keeps the file only if its head is durable.
        if let Ok(mut s) = writer::write_report(sink, &h, table, images, &mut mem, &WalkOptions::host(), &mut bufs) {
            let _ = s.flush();
        }
        let _ = writer::commit(st.dir_fd, fd, &names);
        rec.temp = None;
    }
    hooks::call(CrashEvent::BeforeReraise, rec.tid);
    restore_previous(st);
    release_threads(st);
}

/// After a fault inside the handler: write a minimal report, on the crash stack.
extern "C" fn minimal_main(arg: *mut c_void) {
    // SAFETY: `arg` is the `&'static State` passed by `fatal_handler`.
    let st = unsafe { &*(arg as *const State) };
    // SAFETY: the recursive owner is the only user of the record and the buffers (the outer use is abandoned).
    let rec = unsafe { &mut *st.record.get() };
    if let Some(old) = rec.temp.take() {
        // SAFETY: the name is NUL-terminated; unlinking a stale temporary file of our own.
        unsafe { libc::unlinkat(st.dir_fd, old.temp().as_ptr().cast(), 0) };
    }
    let pid = sys::getpid();
    let id = report_id(rec.tid);
    let names = ReportNames::new(&id);
    if let Ok(fd) = writer::create_temp(st.dir_fd, &names) {
        let h = head(st, rec, id, pid, NOTE_MINIMAL);
        // SAFETY: owner-only buffers.
        let (write_buf, scratch) = unsafe { (st.write_buf.get(), st.scratch.get()) };
        let sink = FdSink::new(fd, write_buf);
        if let Ok(mut s) = writer::write_minimal_report(sink, &h, rec.tid, &rec.regs, st.images.current(), scratch) {
            let _ = s.flush();
        }
        let _ = writer::commit(st.dir_fd, fd, &names);
    }
    hooks::call(CrashEvent::BeforeReraise, rec.tid);
    restore_previous(st);
    release_threads(st);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reraise_rules() {
        assert!(!needs_reraise(libc::SIGSEGV, 1));
        assert!(!needs_reraise(libc::SIGFPE, 1));
        assert!(needs_reraise(libc::SIGSEGV, libc::SI_USER));
        assert!(needs_reraise(libc::SIGABRT, libc::SI_TKILL));
        assert!(needs_reraise(libc::SIGTRAP, 0x80));
        assert!(has_fault_address(libc::SIGSEGV, 2));
        assert!(!has_fault_address(libc::SIGABRT, libc::SI_TKILL));
        assert!(!has_fault_address(libc::SIGSEGV, libc::SI_USER));
    }
}
