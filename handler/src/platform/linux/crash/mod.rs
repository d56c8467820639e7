//! The Linux crash path: the fatal-signal handler, the stop-signal handler, and the owner's capture sequence.
//!
//! Sequence (design.md §1–§2, §4): the first-chance hook ([`crate::crash::first_chance`]) sees the signal first
//! and may declare it handled. Otherwise the first faulting thread owns the crash ([`CrashGate`]); it saves the
//! signal and its registers from the `ucontext`, switches to the preallocated crash stack, fills the thread table
//! from `/proc/self/task`, sends every other thread the reserved real-time stop signal (`rt_tgsigqueueinfo`, the
//! slot index attached), prepares the report meanwhile ([`capture::run`]), and waits (bounded) until they answer; a thread that still has not answered after [`BLOCK_PROBE_NS`] and blocks the stop
//! signal (`SigBlk`) in two reads [`BLOCK_CONFIRM_NS`] apart is given up on; then the thread list is read once more and newcomers are stopped too.
//! Each stopped thread's handler stores its own `ucontext` registers and name in its slot and waits on a futex
//! (bounded) until released; the first to get there after its answer `fdatasync`s the reserved report file first
//! (`early_sync`). The owner then walks every stack with `process_vm_readv` (the fault-proof reader,
//! `memory`) and writes the report section by section (temporary name, `fsync`, `rename`).
//!
//! Then the previous action decides. `SIG_DFL`/`SIG_IGN`: restore the previous actions, release the threads,
//! re-raise; the process dies by the owner's signal (threads that faulted meanwhile wait for that and never
//! re-raise their own). A previous handler function: release the threads and call it ourselves, with our handlers
//! still installed ([`CHAINING`]). If it gives up (installs another action and returns, or calls `abort()`, or
//! faults), the process dies as it decided and the report stands. If it returns with our handler still in place,
//! it recovered the fault: the report is renamed `<id>.recovered` (kept, never uploaded as a crash), the gate is
//! freed and the next fault is a new crash. If the very same fault then comes back at once (same thread, signal,
//! pc and address, and the previous handler had not changed the context), it had not fixed anything: the report is
//! renamed back to `<id>.crashreport` and the process dies by the default action.
//!
//! While the owner handles, every signal but the fatal ones is blocked (`sa_mask` of both handlers), so no other
//! handler (a profiler's `SIGPROF` with `SA_ONSTACK`) runs on our stacks and overwrites the live signal frame. A
//! fault inside the handler (a recursive crash) writes a minimal report and dies; an asynchronous fatal signal sent
//! to the owner (`si_code <= 0`) is ignored; a fault on another thread while a crash is handled records that
//! thread's registers and waits, boundedly, for the owner. Every wait has a timeout. Nothing here allocates, locks
//! or panics.
#![allow(unsafe_code)]

pub mod context;
pub mod elf;
pub mod link_map;
pub mod memory;
pub mod stack_switch;
pub mod sys;
pub mod tasks;

use crate::crash::actions::{self, SavedActions, FATAL_SIGNALS};
use crate::crash::capture::{self, Backend, Core, CrashRecord, Facts, NOTE_OVERFLOW};
use crate::crash::first_chance;
use crate::crash::hooks::{self, CrashEvent};
use crate::crash::images::{ImageList, ImageTable};
use crate::crash::raw_buf::RawBuf;
use crate::crash::reentrancy::{CrashGate, Entry, CAPTURING, CHAINING};
use crate::crash::threads::{SlotData, ThreadTable, CAPTURED, PENDING, WRITING};
use crate::crash::writer::{self, ReportNames};
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

/// What the owner keeps about chaining to a previous handler (Linux only; beside the shared [`CrashRecord`]).
#[derive(Clone, Copy, Debug)]
pub struct ChainRecord {
    /// Stack range `[lo, hi]` the previous handler runs in while [`CHAINING`]: a signal whose interrupted stack
    /// pointer is inside it came from within the previous handler.
    pub chain_stack: (u64, u64),
    /// A fault the previous handler returned from without changing the context: if it comes back at once, it was
    /// not fixed.
    pub suspect: Option<Suspect>,
}

impl ChainRecord {
    /// Nothing chained yet.
    pub const EMPTY: ChainRecord = ChainRecord { chain_stack: (0, 0), suspect: None };
}

/// A survived fault that left the context unchanged (the previous handler fixed memory, or did nothing).
#[derive(Clone, Copy, Debug)]
pub struct Suspect {
    /// Thread id.
    pub tid: u64,
    /// Signal number.
    pub signal: i32,
    /// Program counter of the fault.
    pub pc: u64,
    /// Fault address (`si_addr`).
    pub addr: u64,
    /// Names of its report (now `<id>.recovered`).
    pub names: ReportNames,
}

/// Everything the Linux crash path needs, allocated at install and never freed.
#[derive(Debug)]
pub struct State {
    /// What both backends share: report directory, thread table, META text, writer buffers, crash record.
    pub core: Core,
    /// The reserved stop signal.
    pub stop_signal: i32,
    /// The pid of the process whose crash owner sends the stop signals, stored before its first one (0 before any
    /// crash): the stop handler compares a signal's `si_pid` with it instead of asking `getpid` in every stopped
    /// thread. A forked child's owner stores its own pid.
    pub stop_sender: AtomicI32,
    /// Owner's wait for answers, in nanoseconds.
    pub stop_timeout_ns: u64,
    /// `/proc/<tid>/status` `SigBlk` shows threads' real signal masks (checked at install by
    /// `platform::linux::sigblk_is_truthful`; false under qemu-user). Only then does the owner give up early on threads
    /// that block the stop signal; otherwise it waits the whole `stop_timeout_ns` for them.
    pub sigblk_truthful: bool,
    /// No seccomp filter confines the installing thread (`platform::linux::under_seccomp_filter`): the early sync
    /// may set the file's time (`utimensat`, a call a sandbox may forbid by killing the process).
    pub unfiltered: bool,
    /// Stopped threads' wait for release, in nanoseconds.
    pub release_timeout_ns: u64,
    /// The install-time image table (`dl_iterate_phdr`; the fallback when the link map cannot be read).
    pub images: ImageTable,
    /// The crash-time image list, read from the loader's link map by the owner.
    pub crash_images: link_map::CrashImages,
    /// `getdents64` buffer.
    pub dirents: RawBuf<u8>,
    /// Block cache of the memory reader ([`memory::CACHE_BYTES`]).
    pub page: RawBuf<u8>,
    /// A non-blocking pipe `(read, write)` for the memory reader when `process_vm_readv` does not work here (where it
    /// works, each capture opens a pipe of its own for gathers: `Owner::memory`).
    pub mem_pipe: Option<(i32, i32)>,
    /// 16-aligned top of the crash stack.
    pub crash_stack_top: usize,
    /// The crash stack `(base, size)`: the owner's alternate signal stack while it captures, so a signal that
    /// reaches it meanwhile nests below its frames instead of overwriting the live frame on the thread's own
    /// alternate stack.
    pub crash_stack: (usize, usize),
    /// Actions of the fatal signals found at install.
    pub prev_fatal: SavedActions,
    /// Action of the stop signal found at install.
    pub prev_stop: libc::sigaction,
    /// Chaining state, beside the shared record.
    pub chain: UnsafeCell<ChainRecord>,
}

// SAFETY: after install the shared fields are read-only or atomics; `chain` and the `RawBuf`s are used only by the
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
const REASON_BLOCKED: &[u8] =
    b"thread blocks the stop signal (SigBlk in /proc/self/task/<tid>/status, seen twice 10 ms apart); given up";

/// How long the owner waits for answers before it looks for threads that block the stop signal (2 ms: a running
/// or sleeping thread answers in microseconds; on a loaded machine a few are still on their way, and their
/// `SigBlk` is then read, one small file each).
pub const BLOCK_PROBE_NS: u64 = 2_000_000;

/// Time between the two `SigBlk` reads; a thread is given up on only when both show the stop signal blocked.
/// glibc blocks every signal for a moment while a new thread starts (and in a few short critical sections): such a
/// thread answers once it unblocks, and must not be reported as blocking (seen: threads created just before the
/// crash, given up on after a single read, when the machine was loaded).
pub const BLOCK_CONFIRM_NS: u64 = 10_000_000;

/// Slots whose first `SigBlk` read is remembered (a bit each, on the owner's stack); threads in later slots wait
/// for the full stop timeout instead.
const BLOCK_BITS: usize = 4096;

/// Times a signal may go round the gate (a stale owner freed, a recovered crash re-armed) before it gives up.
const ENTRY_TRIES: usize = 4;

/// Stack size assumed below the previous handler's frame when it does not run on the alternate stack (the
/// nesting test of a signal raised inside it): 8 MiB, glibc's default thread stack.
const CHAIN_STACK_GUESS: u64 = 8 << 20;

/// Suffix of a report whose fault the process survived (kept aside; the reporter never uploads it as a crash).
pub const RECOVERED_SUFFIX: &[u8] = b".recovered";
const NOTE_NO_TASKS: &[u8] = b"/proc/self/task could not be read; only the crashed thread is reported";

/// Whether a signal with this `si_code` was sent by software (`kill`, `tgkill`, `sigqueue`, `abort()`): Linux
/// gives those `si_code <= 0` (`SI_USER` 0, `SI_QUEUE` -1, `SI_TKILL` -6; `<asm-generic/siginfo.h>`). Pure.
pub fn user_sent(code: i32) -> bool {
    code <= 0
}

fn reraise(sig: i32, code: i32) {
    if actions::needs_reraise(sig, user_sent(code)) {
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
    // SAFETY: `errno_location` returns a valid pointer to this thread's errno.
    unsafe { *crate::crash::writer::errno_location() = e };
}

fn own_name(d: &mut SlotData) {
    let mut name = [0u8; 16];
    sys::thread_name(&mut name);
    d.set_name(&name);
}

/// The signal mask both handlers run with: every signal except the fatal ones (which must re-enter: a blocked
/// synchronous fault kills the process without a report). Another handler running on our stacks while we handle
/// (a profiler's `SIGPROF`/`SIGALRM` with `SA_ONSTACK`) would overwrite the live signal frame on the alternate
/// stack, since the owner runs on the crash stack and the kernel then starts at the alternate stack's top.
/// Async-signal-safe (`sigfillset`/`sigdelset`, POSIX.1-2017 §2.4.3).
pub fn handler_mask() -> libc::sigset_t {
    // SAFETY: a zeroed sigset is valid storage; sigfillset initialises it.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut set);
        for s in FATAL_SIGNALS {
            libc::sigdelset(&mut set, s);
        }
        set
    }
}

/// The handler for [`FATAL_SIGNALS`] (`SA_SIGINFO | SA_ONSTACK | SA_NODEFER`, every other signal blocked).
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
    let tid = sys::gettid();
    if first_chance::call(tid, sig, info, uc) {
        set_errno(saved_errno);
        return;
    }
    let Some(st) = state() else {
        die(sig);
        return;
    };
    // An asynchronous fatal signal sent to the owner while it captures (`kill -SEGV`, `si_code <= 0`) is not a
    // fault in the handler: ignore it rather than replace the full report with a minimal one.
    if code <= 0 && GATE.owner() == tid && GATE.phase() == CAPTURING {
        set_errno(saved_errno);
        return;
    }
    for _ in 0..ENTRY_TRIES {
        match GATE.enter(tid) {
            Entry::First => {
                let mut args = FirstArgs { st, tid, sig, code, addr, uc, chain: false };
                // SAFETY: the crash stack is reserved for the owner, mapped at install, and 16-aligned; `args`
                // outlives the call.
                unsafe {
                    stack_switch::run_on_stack(
                        st.crash_stack_top,
                        first_main,
                        &mut args as *mut FirstArgs as *mut c_void,
                    )
                };
                if args.chain {
                    chain(st, tid, sig, addr, info, uc);
                }
                break;
            }
            Entry::Recursive { depth } => {
                if GATE.phase() == CHAINING {
                    // SAFETY: the gate says this thread owns the record.
                    let (lo, hi) = unsafe { (*st.chain.get()).chain_stack };
                    // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
                    let sp = unsafe { context::registers(uc) }.walk_start().map_or(lo, |w| w.sp);
                    if (lo..=hi).contains(&sp) {
                        // Raised inside the previous handler (its `abort()`, a fault in it): it ends the process.
                        previous_gave_up(st, sig, code);
                        break;
                    }
                    // The previous handler left without returning (`longjmp`); this is a new crash.
                    GATE.reset();
                    continue;
                }
                if depth == 1 {
                    if sys::on_alt_stack().is_some_and(|(base, _)| base == st.crash_stack.0) {
                        // The fault came while capturing, with the crash stack as alternate stack: this frame is
                        // nested below the faulting ones; go on from here.
                        minimal_main(st as *const State as *mut c_void);
                    } else {
                        // SAFETY: as above; the outer use of the crash stack is abandoned (we never return to it).
                        unsafe {
                            stack_switch::run_on_stack(
                                st.crash_stack_top,
                                minimal_main,
                                st as *const State as *mut c_void,
                            )
                        };
                    }
                    // SAFETY: the record was written by this thread at first entry; it is the owner.
                    let orig = unsafe { st.core.record() }.signal;
                    die(orig);
                } else {
                    die(sig);
                }
                break;
            }
            Entry::Other { owner } => {
                // The owner's thread is not in this process: a `vfork` child that shared our memory and died, or
                // a thread that left the previous handler by `longjmp` and exited. Free the gate and retry.
                if sys::tgkill(sys::getpid(), owner, 0) == Err(libc::ESRCH) {
                    let _ = GATE.take_over(owner);
                    continue;
                }
                if GATE.phase() == CHAINING {
                    // The previous handler runs on the owner: wait until it recovered (gate freed) or the process
                    // ended.
                    if wait_for_new_owner(st, owner) {
                        continue;
                    }
                    die(sig);
                    break;
                }
                if secondary(st, tid, uc, owner) {
                    continue;
                }
                die(sig);
                break;
            }
        }
    }
    set_errno(saved_errno);
}

/// What [`first_main`] works on, and what it decided.
struct FirstArgs {
    st: &'static State,
    tid: u64,
    sig: i32,
    code: i32,
    addr: u64,
    uc: *mut c_void,
    /// Set when a previous handler function is to run next ([`chain`], back on the signal stack).
    chain: bool,
}

/// The owner's sequence, on the crash stack (the signal may have arrived on a small alternate stack): capture and
/// write, then apply the previous action when it is `SIG_DFL`/`SIG_IGN`, or ask for [`chain`].
extern "C" fn first_main(arg: *mut c_void) {
    // SAFETY: `arg` is the `FirstArgs` `fatal_handler` passed, alive until we return.
    let a = unsafe { &mut *(arg as *mut FirstArgs) };
    let st = a.st;
    // Signals that reach us now (an asynchronous fatal one, a fault in the handler) nest on this stack.
    let old_alt = sys::swap_alt_stack(st.crash_stack.0, st.crash_stack.1);
    first_capture(a);
    if let Some(old) = old_alt {
        sys::restore_alt_stack(&old);
    }
}

/// The body of [`first_main`].
fn first_capture(a: &mut FirstArgs) {
    let (st, tid, sig, code, addr) = (a.st, a.tid, a.sig, a.code, a.addr);
    hooks::call(CrashEvent::Start, tid);
    // SAFETY: only the owner uses the records, and we are the owner.
    let (rec, chained) = unsafe { (st.core.record(), &mut *st.chain.get()) };
    // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
    let regs = unsafe { context::registers(a.uc) };
    let pc = regs.walk_start().map_or(0, |w| w.pc);
    if let Some(s) = chained.suspect.take() {
        if s.tid == tid && s.signal == sig && s.pc == pc && s.addr == addr && code > 0 {
            // The fault the previous handler "recovered" came straight back: it was not fixed. Its report is a
            // crash report after all; the previous handler had its chance, so die by the default action rather
            // than loop through it forever.
            let _ = rename_report(st.core.dir_fd, &recovered_name(&s.names), s.names.final_name());
            hooks::call(CrashEvent::BeforeReraise, tid);
            st.prev_fatal.restore_all();
            die(sig);
            return;
        }
    }
    *rec = CrashRecord {
        signal: sig,
        si_code: code,
        addr: actions::has_fault_address(sig, user_sent(code)).then_some(addr),
        tid,
        regs,
        ..CrashRecord::EMPTY
    };
    capture::run(&st.core, &mut Owner::new(st), rec);
    hooks::call(CrashEvent::BeforeReraise, tid);
    if st.prev_fatal.handler_function(sig).is_some() {
        a.chain = true;
        return;
    }
    // Default or ignored: the process dies by this signal. Restore its previous action (only this one: a thread
    // that faults with another signal now still enters our handler and waits for our end, never re-raising its
    // own first), release the threads, re-raise.
    st.prev_fatal.restore(sig);
    release_threads(st);
    reraise(sig, code);
}

/// Runs the previous handler function ourselves, on the signal stack (where the kernel would have run it), with
/// our handlers still installed, and acts on what it decided (see the module documentation).
#[inline(never)]
fn chain(st: &State, tid: u64, sig: i32, addr: u64, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let Some(prev) = st.prev_fatal.handler_function(sig) else { return };
    release_threads(st);
    // SAFETY: only the owner uses the records, and we are the owner.
    let (rec, chained) = unsafe { (st.core.record(), &mut *st.chain.get()) };
    let here = 0u8;
    let hi = core::hint::black_box(core::ptr::addr_of!(here)) as u64;
    let lo = match sys::on_alt_stack() {
        Some((base, _)) => base as u64,
        None => hi.saturating_sub(CHAIN_STACK_GUESS),
    };
    chained.chain_stack = (lo, hi);
    GATE.set_phase(CHAINING);
    call_previous(prev, sig, info, uc);
    let ours = actions::current(sig).is_some_and(|a| a.sa_sigaction == fatal_handler as *const () as usize);
    if !ours || sig == libc::SIGABRT {
        // It gave up: it installed another action to re-fault into (Rust std's handler, most SDKs), or this is
        // `abort()`, which ends the process after its handlers return. Leave the action it chose in place; the
        // other signals keep our handler, so a thread faulting now waits for this end.
        if ours {
            st.prev_fatal.restore(sig);
        }
        return;
    }
    // It returned and left our handler in place: it handled the signal. Keep the report aside, re-arm.
    if let Some(names) = rec.committed.take() {
        if rename_report(st.core.dir_fd, names.final_name(), &recovered_name(&names)) {
            // SAFETY: `uc` is still the kernel's ucontext of this signal (the previous handler may have changed it).
            let after = unsafe { context::registers(uc) };
            if after == rec.regs {
                let pc = after.walk_start().map_or(0, |w| w.pc);
                chained.suspect = Some(Suspect { tid, signal: sig, pc, addr, names });
            }
        }
    }
    GATE.reset();
}

/// Calls the previous handler `prev` as the kernel would: its `sa_mask` (and the signal itself, unless
/// `SA_NODEFER`) added to the blocked set, `SA_RESETHAND` honoured, three arguments for `SA_SIGINFO`.
fn call_previous(prev: &libc::sigaction, sig: i32, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let mut mask = prev.sa_mask;
    if prev.sa_flags & libc::SA_NODEFER == 0 {
        // SAFETY: `mask` is a valid sigset.
        unsafe { libc::sigaddset(&mut mask, sig) };
    }
    let old = sys::sigmask(libc::SIG_BLOCK, &mask);
    if prev.sa_flags & libc::SA_RESETHAND != 0 {
        // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
        let dfl: libc::sigaction = unsafe { core::mem::zeroed() };
        actions::set(sig, &dfl);
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the action was installed with SA_SIGINFO, so `sa_sigaction` is a three-argument handler.
        let f = unsafe {
            core::mem::transmute::<usize, extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void)>(
                prev.sa_sigaction,
            )
        };
        f(sig, info, uc);
    } else {
        // SAFETY: without SA_SIGINFO, `sa_sigaction` holds a one-argument `sa_handler` (not SIG_DFL/SIG_IGN,
        // which the caller excluded).
        let f = unsafe { core::mem::transmute::<usize, extern "C" fn(libc::c_int)>(prev.sa_sigaction) };
        f(sig);
    }
    let _ = sys::sigmask(libc::SIG_SETMASK, &old);
}

/// A signal raised inside the previous handler while chaining: it decided the process ends. Restore the previous
/// actions and let this signal take its course (the report stands).
fn previous_gave_up(st: &State, sig: i32, code: i32) {
    st.prev_fatal.restore(sig);
    reraise(sig, code);
}

/// `<hex>.recovered` from the report's names (NUL-terminated).
fn recovered_name(names: &ReportNames) -> [u8; 64] {
    let mut out = [0u8; 64];
    let fin = names.final_name();
    let stem = fin.iter().position(|b| *b == b'.' || *b == 0).unwrap_or(0);
    for (d, s) in out.iter_mut().zip(fin.iter().take(stem).chain(RECOVERED_SUFFIX.iter())) {
        *d = *s;
    }
    out
}

/// Renames a report in the report directory and makes the rename durable; `true` on success.
fn rename_report(dir_fd: i32, from: &[u8; 64], to: &[u8; 64]) -> bool {
    // SAFETY: both names are NUL-terminated fixed buffers; `dir_fd` is the report directory.
    unsafe {
        let ok = libc::renameat(dir_fd, from.as_ptr().cast(), dir_fd, to.as_ptr().cast()) == 0;
        if ok {
            libc::fsync(dir_fd);
        }
        ok
    }
}

/// Handler of the stop signal: store this thread's registers in its slot, answer, sync the reserved report file
/// early if no other thread took that job (`early_sync`), then wait (bounded) for release.
///
/// # Safety
/// Called by the kernel as an `SA_SIGINFO` handler: `uc` is null or valid.
pub unsafe extern "C" fn stop_handler(_sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let saved_errno = writer::errno();
    if let Some(st) = state() {
        let table = &st.core.threads;
        // SAFETY: `info` is the kernel's siginfo for this signal (or null).
        let hint = unsafe { sys::queued_value(info, st.stop_sender.load(Ordering::Acquire)) };
        if let Some((i, mut w)) = table.claim(sys::gettid(), hint) {
            let d = w.data();
            *d = SlotData::EMPTY;
            // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
            d.regs = unsafe { context::registers(uc) };
            own_name(d);
            // The owner releases only after every slot is final, so this is the generation before the release.
            let gen = table.release.load(Ordering::Acquire);
            w.publish(CAPTURED);
            if table.answer() {
                sys::futex_wake(&table.answers, 1);
            }
            // The release timeout counts from the answer, an early sync included.
            let release_by = sys::monotonic_ns().saturating_add(st.release_timeout_ns);
            early_sync(st);
            if !wait_release(st, gen, release_by) {
                // Going on unreleased: not while the owner reads this stack with plain loads (bounded by one
                // more release timeout; a walk only reads memory and ends within milliseconds).
                let deadline = sys::monotonic_ns().saturating_add(st.release_timeout_ns);
                while !table.leave(i) && sys::monotonic_ns() < deadline {
                    sys::sleep_ns(1_000_000);
                }
            }
        }
    }
    set_errno(saved_errno);
}

/// Syncs the reserved report file early (`writer::set_early_sync`), on the first stopped thread to take the job
/// after its answer: its `fdatasync` runs while the owner stops the other threads, walks and encodes. For a file
/// created at this launch it commits the file's inode, directory entry and block allocation; for any file it
/// flushes the drive's cache after idle. The owner's own `fdatasync` then usually has only the report to write
/// (BENCHMARKS.md, "Issue 14: the report file synced early"). The owner never waits for this thread (it answered
/// already), and the report is durable by the owner's `fdatasync` only, early sync or not; a sync that has not
/// begun when the owner's commit begins is left out (`writer::early_sync_wanted`).
///
/// The stop signal usually woke this thread on the owner's CPU and preempted the owner, so it first gives the CPU
/// back (`sched_yield`): the sync's system call runs when a CPU is free, not in the owner's stop round.
///
/// Where no seccomp filter was seen at install (so not on Android, where every app runs under one), it also sets
/// the file's modification time first (`sys::touch_mtime`): the owner's `write` in the same tick of the file
/// system's clock then leaves the inode clean, so the owner's `fdatasync` writes the report's blocks alone where a
/// time change would cost an inode write (ext4 without a journal, as on the benchmark machine: BENCHMARKS.md,
/// "Issue 14: the file's time set early").
fn early_sync(st: &State) {
    let Some(fd) = writer::take_early_sync(st.stop_sender.load(Ordering::Acquire)) else { return };
    sys::sched_yield();
    if writer::early_sync_wanted() {
        // The file's time set here, so that the owner's `write` finds it current: the inode is written by this
        // sync, not by the owner's. A failure costs only that; under a seccomp filter it is not tried.
        if st.unfiltered {
            let _ = sys::touch_mtime(fd);
        }
        if sys::fdatasync(fd) {
            hooks::call(CrashEvent::EarlySync, sys::gettid());
        }
    }
    sys::close(fd);
}

/// Another thread faulted while `owner` handles a crash: record this thread, then wait until the owner is done.
/// Returns `true` when the gate was freed (the owner's crash was survived: enter again, this fault is a crash of
/// its own), `false` when the wait ran out (then die by this thread's signal). It never re-raises on its own while
/// the owner dies, so the owner's signal decides the exit.
fn secondary(st: &State, tid: u64, uc: *mut c_void, owner: u64) -> bool {
    let table = &st.core.threads;
    let deadline = sys::monotonic_ns().saturating_add(st.stop_timeout_ns);
    while !table.is_published() && GATE.owner() == owner && sys::monotonic_ns() < deadline {
        sys::sleep_ns(1_000_000);
    }
    if let Some((_, mut w)) = table.claim(tid, None) {
        let d = w.data();
        *d = SlotData::EMPTY;
        // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
        d.regs = unsafe { context::registers(uc) };
        own_name(d);
        w.publish(CAPTURED);
        if table.answer() {
            sys::futex_wake(&table.answers, 1);
        }
    }
    wait_for_new_owner(st, owner)
}

/// Waits (polling every millisecond, at most the stop plus the release timeout) until `owner` no longer owns the
/// gate; `true` when it let go, `false` on timeout. While it owns, it is writing, chaining, or dying.
fn wait_for_new_owner(st: &State, owner: u64) -> bool {
    let deadline = sys::monotonic_ns().saturating_add(st.stop_timeout_ns).saturating_add(st.release_timeout_ns);
    loop {
        if GATE.owner() != owner {
            return true;
        }
        if sys::monotonic_ns() >= deadline {
            return false;
        }
        sys::sleep_ns(1_000_000);
    }
}

/// Waits until the owner releases stopped threads (the release generation moves past `gen`) or `deadline`
/// (`CLOCK_MONOTONIC`, nanoseconds) passes; `true` when released.
fn wait_release(st: &State, gen: u32, deadline: u64) -> bool {
    let table = &st.core.threads;
    loop {
        if table.release.load(Ordering::Acquire) != gen {
            return true;
        }
        let now = sys::monotonic_ns();
        if now >= deadline {
            return false;
        }
        sys::futex_wait(&table.release, gen, deadline.saturating_sub(now).min(100_000_000));
    }
}

/// Waits until every stopped thread answered or the stop timeout passed. After [`BLOCK_PROBE_NS`] the `SigBlk` of
/// every thread still pending is read; those that block the stop signal are read again [`BLOCK_CONFIRM_NS`] later
/// and given up on if they still block it (they could never answer).
fn wait_for_answers(st: &State) {
    let table = &st.core.threads;
    let start = sys::monotonic_ns();
    let deadline = start.saturating_add(st.stop_timeout_ns);
    let first_at = start.saturating_add(BLOCK_PROBE_NS).min(deadline);
    let second_at = first_at.saturating_add(BLOCK_CONFIRM_NS).min(deadline);
    let mut blocked = [0u64; BLOCK_BITS / 64];
    // 0: before the first read; 1: between the reads; 2: after both.
    let mut phase = 0u8;
    loop {
        // Only the answer that leaves nothing outstanding wakes us (recomputed after every expiry); the deadlines
        // below bound every sleep anyway.
        let seen = table.expect_answers();
        if table.outstanding() == 0 {
            return;
        }
        let now = sys::monotonic_ns();
        if now >= deadline {
            return;
        }
        if phase == 0 && now >= first_at {
            phase = if st.sigblk_truthful && note_blockers(st, &mut blocked) { 1 } else { 2 };
            continue;
        }
        if phase == 1 && now >= second_at {
            phase = 2;
            expire_blockers(st, &blocked);
            continue;
        }
        let until = match phase {
            0 => first_at,
            1 => second_at,
            _ => deadline,
        };
        sys::futex_wait(&table.answers, seen, until.saturating_sub(now).min(20_000_000));
    }
}

/// Whether slot `i`'s bit is set in `bits`.
fn bit(bits: &[u64; BLOCK_BITS / 64], i: usize) -> bool {
    bits.get(i / 64).is_some_and(|w| w & (1u64 << (i % 64)) != 0)
}

/// Remembers every pending thread whose `SigBlk` says it blocks the stop signal; `true` when there is one.
fn note_blockers(st: &State, bits: &mut [u64; BLOCK_BITS / 64]) -> bool {
    let table = &st.core.threads;
    let mut any = false;
    for i in 0..table.len().min(BLOCK_BITS) {
        let Some(s) = table.slot(i) else { continue };
        if s.state() == PENDING && tasks::blocks_signal(s.tid(), st.stop_signal) == Some(true) {
            if let Some(w) = bits.get_mut(i / 64) {
                *w |= 1u64 << (i % 64);
                any = true;
            }
        }
    }
    any
}

/// Gives up on every pending thread that blocked the stop signal at the first read and still does.
fn expire_blockers(st: &State, first: &[u64; BLOCK_BITS / 64]) {
    let table = &st.core.threads;
    for i in 0..table.len().min(BLOCK_BITS) {
        let Some(s) = table.slot(i) else { continue };
        if bit(first, i) && s.state() == PENDING && tasks::blocks_signal(s.tid(), st.stop_signal) == Some(true) {
            table.expire(i, REASON_BLOCKED);
        }
    }
}

/// Sends the stop signal to every pending thread from slot `from` on; marks those it could not reach.
fn stop_pending(st: &State, pid: i32, from: usize) {
    let table = &st.core.threads;
    let uid = sys::getuid();
    for i in from..table.len() {
        let Some(s) = table.slot(i) else { continue };
        if s.state() == PENDING {
            // The slot index travels with the signal, so the thread finds its slot without a search.
            if let Err(e) = sys::queue_to_thread(pid, uid, s.tid(), st.stop_signal, i) {
                table.fail(i, if e == libc::ESRCH { REASON_EXITED } else { REASON_SEND_FAILED });
            }
        }
    }
}

fn release_threads(st: &State) {
    st.core.threads.release_all();
    sys::futex_wake(&st.core.threads.release, i32::MAX);
}

/// The Linux side of the shared crash sequence ([`capture::run`]): threads are stopped with the stop signal and
/// answer with their own `ucontext` registers; memory is read with `process_vm_readv`; images come from the
/// loader's link map.
struct Owner {
    st: &'static State,
    pid: i32,
    /// `/proc/self/task`, open from the first listing ([`Backend::request_stop`]) to the second
    /// ([`Backend::await_stop`]); `None` when it could not be opened.
    tasks: Option<tasks::TaskDir>,
    /// Threads that did not fit the table.
    overflow: usize,
}

impl Owner {
    fn new(st: &'static State) -> Self {
        Owner { st, pid: sys::getpid(), tasks: None, overflow: 0 }
    }
}

impl Backend for Owner {
    type Memory = memory::ProcessVmReader<'static>;

    fn facts(&self) -> Facts {
        let mut random = [0u8; 16];
        Facts {
            pid: self.pid as u32,
            ppid: sys::getppid() as u32,
            now_ns: sys::realtime_ns(),
            monotonic_ns: sys::monotonic_ns(),
            random: sys::getrandom(&mut random).then_some(random),
        }
    }

    fn request_stop(&mut self, table: &ThreadTable, rec: &mut CrashRecord) {
        let (st, pid, own) = (self.st, self.pid, rec.tid);
        st.stop_sender.store(pid, Ordering::Release);
        // The crashed thread takes its place in the task's order (`/proc/self/task` lists the main thread first,
        // then the others by creation), which is Apple's thread numbering too; one slot stays reserved for it
        // until it is reached, so a full table never loses it.
        let add_own = |table: &ThreadTable| {
            if let Some((_, mut w)) = table.add_owned(own) {
                let d = w.data();
                *d = SlotData::EMPTY;
                d.regs = rec.regs;
                d.crashed = true;
                own_name(d);
                w.publish(CAPTURED);
            }
        };
        let mut own_added = false;
        let mut overflow = 0usize;
        // SAFETY: owner-only buffer.
        let dirents = unsafe { st.dirents.get() };
        self.tasks = tasks::TaskDir::open().ok();
        let mut list = |t| {
            if t == own {
                if !own_added {
                    add_own(table);
                    own_added = true;
                }
            } else if (!own_added && table.len().saturating_add(1) >= table.capacity())
                || table.add_pending(t).is_none()
            {
                overflow = overflow.saturating_add(1);
            }
        };
        if let Some(dir) = self.tasks.as_mut() {
            dir.list(dirents, &mut list);
        }
        if !own_added {
            add_own(table);
        }
        self.overflow = overflow;
        table.publish();
        hooks::call(CrashEvent::ThreadsListed, own);
        stop_pending(st, pid, 0);
    }

    fn await_stop(&mut self, table: &ThreadTable, rec: &mut CrashRecord) -> &'static [u8] {
        let (st, pid, own) = (self.st, self.pid, rec.tid);
        wait_for_answers(st);
        hooks::call(CrashEvent::ThreadsStopped, own);
        // Threads created after the list was read (by threads not stopped yet, or not stoppable): read it once
        // more and stop the newcomers. Threads created after this second read are not in the report. The kernel
        // appends new threads to the list, so the second read starts where the first ended, moved back by every
        // listed thread that may have exited since (each exit moves the later ones down a position): the threads
        // that have not answered and those that did not fit the table (stopped threads cannot exit), plus one for
        // a thread the first listing counted without listing it (procfs skips, but counts, a thread that exits
        // while the listing stands on it; that can happen once in a listing of one call).
        let mut overflow = self.overflow;
        let enumerated = self.tasks.is_some();
        if let Some(mut dir) = self.tasks.take() {
            // SAFETY: owner-only buffer.
            let dirents = unsafe { st.dirents.get() };
            let from = table.len();
            let may_have_exited = table
                .used()
                .iter()
                .filter(|s| s.state() != CAPTURED)
                .count()
                .saturating_add(overflow)
                .saturating_add(1);
            dir.list_again(may_have_exited, dirents, &mut |t| {
                if t != own && !table.contains(t) && table.add_pending(t).is_none() {
                    overflow = overflow.saturating_add(1);
                }
            });
            drop(dir);
            if table.len() > from {
                table.no_waiter();
                stop_pending(st, pid, from);
                wait_for_answers(st);
            }
        }
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
        if !enumerated {
            NOTE_NO_TASKS
        } else if overflow > 0 {
            NOTE_OVERFLOW
        } else {
            b""
        }
    }

    fn memory(&mut self) -> Self::Memory {
        // SAFETY: owner-only buffer, used by this one reader for the rest of the capture.
        let page = unsafe { self.st.page.get() };
        let reader = memory::ProcessVmReader::new(self.pid, page);
        match self.st.mem_pipe {
            // `process_vm_readv` cannot read this process: every read goes through the pipe install opened.
            Some(pipe) => reader.with_pipe(Some(pipe), memory::PipeUse::Everything),
            // Gathers (the link-map check) go through a pipe of this capture's own, closed with the reader; none
            // when it cannot be opened (out of descriptors): then `process_vm_readv` gathers.
            None => reader.with_own_pipe(sys::pipe_nonblocking(), memory::PipeUse::Gathers),
        }
    }

    fn images(&mut self, mem: &mut Self::Memory) -> (&'static ImageList, &'static [u8]) {
        // Every image mapped now, from the loader's link map (the install snapshot if it cannot be read).
        // SAFETY: the owner is the only user of the crash-time list, and collects it once per report.
        unsafe { self.st.crash_images.collect(mem, self.st.images.current()) }
    }

    fn installed_images(&self) -> &'static ImageList {
        self.st.images.current()
    }
}

/// After a fault inside the handler: write a minimal report, on the crash stack.
extern "C" fn minimal_main(arg: *mut c_void) {
    // SAFETY: `arg` is the `&'static State` passed by `fatal_handler`.
    let st: &'static State = unsafe { &*(arg as *const State) };
    // SAFETY: the recursive owner is the only user of the record and the buffers (the outer use is abandoned).
    let rec = unsafe { st.core.record() };
    let _ = capture::write_minimal(&st.core, &Owner::new(st), rec);
    hooks::call(CrashEvent::BeforeReraise, rec.tid);
    st.prev_fatal.restore_all();
    release_threads(st);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_sent_codes() {
        assert!(!user_sent(1));
        assert!(user_sent(libc::SI_USER));
        assert!(user_sent(libc::SI_TKILL));
        assert!(user_sent(libc::SI_QUEUE));
        assert!(!user_sent(0x80)); // SI_KERNEL
    }
}
