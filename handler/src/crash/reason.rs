//! Why the process is about to die, as the language runtimes and the app tell it before the fault: fixed static
//! storage written at throw, panic or call time, copied into the report by the crash owner.
//!
//! - [`OBJC`]: the uncaught `NSException` (the Apple backend's `NSSetUncaughtExceptionHandler` handler).
//! - [`CXX`]: the uncaught C++ exception, or a `std::terminate` without one (the `std::set_terminate` handler,
//!   `crate::language`).
//! - [`PANICS`]: the last [`PANIC_SLOTS`] Rust panics, with the thread that panicked (the panic hook).
//! - [`APP_REASON`]: the short crash reason the app set (`crate::set_crash_reason`).
//! - The C library's abort message: glibc's `__abort_msg` (a failed `assert()`, `malloc` corruption, stack
//!   smashing), whose address install records in [`set_abort_msg_address`]; read at crash time through the
//!   backend's fault-proof reader, never by a plain load, because it is the C library's memory; after a `SIGABRT`
//!   without one, bionic's (`crate::crash::bionic_abort`).
//!
//! Writers run on app threads before the fault (at throw or panic time) and never wait: each record has a writer
//! flag taken with one compare-and-swap (a second writer at the same moment gives up and its record is lost) and a
//! sequence counter that is odd while the bytes change. They copy into `AtomicU8` storage, so they allocate
//! nothing and take no lock: a record is written even when the thread that throws or panics holds the allocator's
//! lock. The crash path copies a record only when its counter was even and unchanged across the copy (bounded
//! retries). No `unsafe` here; signal-safe: atomics and copies only.

use crate::unwind::MemoryReader;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use report_format::encode::{LanguageException, Message};

/// Longest exception type name kept, in bytes.
pub const MAX_TYPE: usize = 256;
/// Longest reason (`NSException.reason`, `what()`, panic message) kept, in bytes.
pub const MAX_REASON: usize = 1024;
/// Longest source location kept, in bytes.
pub const MAX_LOCATION: usize = 256;
/// Longest `userInfo` text kept, in bytes.
pub const MAX_USER_INFO: usize = 512;
/// Most throw-site return addresses kept.
pub const MAX_BACKTRACE: usize = 128;
/// Longest app-supplied crash reason, in bytes.
pub const MAX_APP_REASON: usize = 512;
/// Longest C library abort message copied, in bytes.
pub const MAX_ABORT_MSG: usize = 1024;
/// Rust panics remembered (a ring: the newest replace the oldest).
pub const PANIC_SLOTS: usize = 4;
/// Copies of one record the crash path tries before giving up on it (a writer was interrupted mid-write).
const READ_TRIES: u32 = 8;

/// Bounded text in atomic bytes.
pub struct Text<const N: usize> {
    len: AtomicUsize,
    bytes: [AtomicU8; N],
}

impl<const N: usize> Text<N> {
    const fn new() -> Self {
        Text { len: AtomicUsize::new(0), bytes: [const { AtomicU8::new(0) }; N] }
    }

    /// Stores the concatenation of `parts`, cut at `N` bytes. Caller holds the record's writer flag.
    fn store(&self, parts: &[&[u8]]) {
        let mut n = 0usize;
        for &b in parts.iter().flat_map(|p| p.iter()) {
            let Some(d) = self.bytes.get(n) else { break };
            d.store(b, Ordering::Relaxed);
            n = n.saturating_add(1);
        }
        self.len.store(n, Ordering::Relaxed);
    }

    /// Copies into `out`; returns the length.
    fn load(&self, out: &mut [u8; N]) -> usize {
        let n = self.len.load(Ordering::Relaxed).min(N);
        for (d, s) in out.iter_mut().zip(self.bytes.iter()).take(n) {
            *d = s.load(Ordering::Relaxed);
        }
        n
    }
}

/// What one writer records (borrowed input of [`Record::write`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Fields<'a> {
    /// Kernel thread id of the thread that threw or panicked.
    pub tid: u64,
    /// Type name, as parts to concatenate.
    pub type_name: &'a [&'a [u8]],
    /// Reason, as parts to concatenate.
    pub reason: &'a [&'a [u8]],
    /// Location, as parts to concatenate.
    pub location: &'a [&'a [u8]],
    /// `userInfo` text.
    pub user_info: &'a [u8],
    /// Throw-site return addresses, innermost first.
    pub backtrace: &'a [u64],
}

/// One recorded exception or panic (about 3 KiB of static storage).
pub struct Record {
    seq: AtomicU32,
    writer: AtomicBool,
    set: AtomicBool,
    tid: AtomicU64,
    order: AtomicU64,
    type_name: Text<MAX_TYPE>,
    reason: Text<MAX_REASON>,
    location: Text<MAX_LOCATION>,
    user_info: Text<MAX_USER_INFO>,
    bt_len: AtomicUsize,
    bt: [AtomicU64; MAX_BACKTRACE],
}

/// Orders writes across records (which panic is the newest).
static ORDER: AtomicU64 = AtomicU64::new(1);

impl Record {
    const fn new() -> Self {
        Record {
            seq: AtomicU32::new(0),
            writer: AtomicBool::new(false),
            set: AtomicBool::new(false),
            tid: AtomicU64::new(0),
            order: AtomicU64::new(0),
            type_name: Text::new(),
            reason: Text::new(),
            location: Text::new(),
            user_info: Text::new(),
            bt_len: AtomicUsize::new(0),
            bt: [const { AtomicU64::new(0) }; MAX_BACKTRACE],
        }
    }

    /// Replaces the record with `f`. Never waits: returns `false` (nothing written) when another thread is writing
    /// it at this moment. Allocation-free, lock-free.
    pub fn write(&self, f: &Fields<'_>) -> bool {
        if self.writer.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        self.seq.fetch_add(1, Ordering::AcqRel); // odd: being written
        core::sync::atomic::fence(Ordering::Release);
        self.tid.store(f.tid, Ordering::Relaxed);
        self.order.store(ORDER.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        self.type_name.store(f.type_name);
        self.reason.store(f.reason);
        self.location.store(f.location);
        self.user_info.store(&[f.user_info]);
        let mut n = 0usize;
        for (d, s) in self.bt.iter().zip(f.backtrace) {
            d.store(*s, Ordering::Relaxed);
            n = n.saturating_add(1);
        }
        self.bt_len.store(n, Ordering::Relaxed);
        self.set.store(true, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::Release); // even: consistent
        self.writer.store(false, Ordering::Release);
        true
    }

    /// Forgets the record (tests; `uninstall` leaves records alone).
    pub fn clear(&self) {
        if self.writer.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.seq.fetch_add(1, Ordering::AcqRel);
            self.set.store(false, Ordering::Relaxed);
            self.seq.fetch_add(1, Ordering::Release);
            self.writer.store(false, Ordering::Release);
        }
    }

    /// Copies a consistent record into `out`; `false` when it is empty or was never consistent in
    /// [`READ_TRIES`] tries. Signal-safe.
    fn copy(&self, out: &mut Copied) -> bool {
        for _ in 0..READ_TRIES {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                continue;
            }
            if !self.set.load(Ordering::Relaxed) {
                return false;
            }
            out.tid = self.tid.load(Ordering::Relaxed);
            out.order = self.order.load(Ordering::Relaxed);
            out.type_len = self.type_name.load(&mut out.type_name);
            out.reason_len = self.reason.load(&mut out.reason);
            out.location_len = self.location.load(&mut out.location);
            out.user_info_len = self.user_info.load(&mut out.user_info);
            let n = self.bt_len.load(Ordering::Relaxed).min(MAX_BACKTRACE);
            for (d, s) in out.bt.iter_mut().zip(self.bt.iter()).take(n) {
                *d = s.load(Ordering::Relaxed);
            }
            out.bt_len = n;
            core::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return true;
            }
        }
        false
    }

    /// Kernel thread id and write order of a consistent, set record (the crash path chooses among panics).
    fn tid_and_order(&self) -> Option<(u64, u64)> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 % 2 == 1 || !self.set.load(Ordering::Relaxed) {
            return None;
        }
        let r = (self.tid.load(Ordering::Relaxed), self.order.load(Ordering::Relaxed));
        core::sync::atomic::fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(r)
    }
}

/// The uncaught `NSException` (Apple).
pub static OBJC: Record = Record::new();
/// The uncaught C++ exception (or `std::terminate` without one).
pub static CXX: Record = Record::new();
/// The last Rust panics.
pub static PANICS: [Record; PANIC_SLOTS] = [const { Record::new() }; PANIC_SLOTS];
static NEXT_PANIC: AtomicUsize = AtomicUsize::new(0);

/// Reads the words of every record that a crash reads first (install time), so that the crash takes no page fault
/// on this static storage (a read maps the shared zero page: no memory is used). Returns a value only so the reads
/// are not optimized away.
pub(crate) fn map_in() -> u64 {
    let records = [&OBJC, &CXX].into_iter().chain(PANICS.iter());
    let words = records
        .fold(0u64, |a, r| a ^ u64::from(r.seq.load(Ordering::Relaxed)) ^ u64::from(r.set.load(Ordering::Relaxed)));
    let app = APP_REASON.seq.load(Ordering::Relaxed) as usize ^ APP_REASON.text.len.load(Ordering::Relaxed);
    words ^ app as u64 ^ ABORT_MSG_ADDR.load(Ordering::Relaxed)
}

/// Records a Rust panic in the next ring slot. Allocation-free, lock-free, never waits.
pub fn record_panic(f: &Fields<'_>) -> bool {
    let i = NEXT_PANIC.fetch_add(1, Ordering::Relaxed) % PANIC_SLOTS;
    PANICS.get(i).is_some_and(|r| r.write(f))
}

/// The app-supplied crash reason.
pub struct AppReason {
    seq: AtomicU32,
    writer: AtomicBool,
    text: Text<MAX_APP_REASON>,
}

/// The app-supplied crash reason (`crate::set_crash_reason`).
pub static APP_REASON: AppReason =
    AppReason { seq: AtomicU32::new(0), writer: AtomicBool::new(false), text: Text::new() };

impl AppReason {
    /// Replaces the reason (empty: no reason), cut at [`MAX_APP_REASON`] bytes. Never waits: `false` when another
    /// thread is setting it at this moment (its text wins). Allocation-free, lock-free.
    pub fn set(&self, text: &[u8]) -> bool {
        if self.writer.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        self.seq.fetch_add(1, Ordering::AcqRel);
        core::sync::atomic::fence(Ordering::Release);
        self.text.store(&[text]);
        self.seq.fetch_add(1, Ordering::Release);
        self.writer.store(false, Ordering::Release);
        true
    }

    fn copy(&self, out: &mut [u8; MAX_APP_REASON]) -> usize {
        for _ in 0..READ_TRIES {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                continue;
            }
            let n = self.text.load(out);
            core::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return n;
            }
        }
        0
    }
}

/// Address of glibc's `__abort_msg` variable (a `struct abort_msg_s *`), 0 when the C library has none.
static ABORT_MSG_ADDR: AtomicU64 = AtomicU64::new(0);

/// Records where the C library keeps its abort message (install time; 0: none).
pub fn set_abort_msg_address(addr: u64) {
    ABORT_MSG_ADDR.store(addr, Ordering::Relaxed);
}

/// One record copied out.
struct Copied {
    tid: u64,
    order: u64,
    type_name: [u8; MAX_TYPE],
    type_len: usize,
    reason: [u8; MAX_REASON],
    reason_len: usize,
    location: [u8; MAX_LOCATION],
    location_len: usize,
    user_info: [u8; MAX_USER_INFO],
    user_info_len: usize,
    bt: [u64; MAX_BACKTRACE],
    bt_len: usize,
}

impl Copied {
    const fn new() -> Self {
        Copied {
            tid: 0,
            order: 0,
            type_name: [0; MAX_TYPE],
            type_len: 0,
            reason: [0; MAX_REASON],
            reason_len: 0,
            location: [0; MAX_LOCATION],
            location_len: 0,
            user_info: [0; MAX_USER_INFO],
            user_info_len: 0,
            bt: [0; MAX_BACKTRACE],
            bt_len: 0,
        }
    }

    fn reason(&self) -> &[u8] {
        self.reason.get(..self.reason_len).unwrap_or(&[])
    }
}

/// Which record became the report's language exception.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    None,
    Objc,
    Cxx,
    Rust,
}

/// The crash owner's copy of everything above, on its stack (about 7 KiB).
pub struct Snapshot {
    kind: Kind,
    main: Copied,
    /// The crashed thread's panic before the newest one (a panic while panicking, a panic that reached an
    /// `extern "C"` boundary): kept as a `panic` message.
    earlier: Copied,
    earlier_set: bool,
    app: [u8; MAX_APP_REASON],
    app_len: usize,
    abort: [u8; MAX_ABORT_MSG],
    abort_len: usize,
}

impl Snapshot {
    /// An empty snapshot.
    pub const fn new() -> Self {
        Snapshot {
            kind: Kind::None,
            main: Copied::new(),
            earlier: Copied::new(),
            earlier_set: false,
            app: [0; MAX_APP_REASON],
            app_len: 0,
            abort: [0; MAX_ABORT_MSG],
            abort_len: 0,
        }
    }

    /// Copies the records for a crash of thread `crashed_tid`: the uncaught `NSException`, else the uncaught C++
    /// exception, else, when the crash is one a panic ends the process with (`abort_like`, see
    /// [`is_abort_like`]), the crashed thread's newest Rust panic; the app's reason; the C library's abort
    /// message, read with `mem`. Signal-safe, bounded.
    ///
    /// `signal` is the crash's signal (0: none yet): after a `SIGABRT` without a glibc message, bionic's abort
    /// message is looked for too (`crate::crash::bionic_abort`; Android, or a maps file a Linux test set).
    pub fn take<M: MemoryReader>(&mut self, crashed_tid: u64, abort_like: bool, signal: i32, mem: &mut M) {
        self.kind = Kind::None;
        self.earlier_set = false;
        if OBJC.copy(&mut self.main) {
            self.kind = Kind::Objc;
        } else if CXX.copy(&mut self.main) {
            self.kind = Kind::Cxx;
        } else if abort_like {
            self.take_panics(crashed_tid);
        }
        self.app_len = APP_REASON.copy(&mut self.app);
        self.abort_len = read_abort_msg(mem, &mut self.abort);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.abort_len == 0 && signal == libc::SIGABRT {
            self.abort_len = crate::crash::bionic_abort::read_abort_message(mem, &mut self.abort);
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let _ = signal;
    }

    fn take_panics(&mut self, tid: u64) {
        // The newest and the one before it, of the crashed thread.
        let mut newest: Option<(usize, u64)> = None;
        let mut before: Option<(usize, u64)> = None;
        for (i, r) in PANICS.iter().enumerate() {
            let Some((t, order)) = r.tid_and_order() else { continue };
            if t != tid {
                continue;
            }
            match newest {
                Some((_, o)) if o >= order => {
                    if before.is_none_or(|(_, b)| order > b) {
                        before = Some((i, order));
                    }
                }
                _ => {
                    before = newest;
                    newest = Some((i, order));
                }
            }
        }
        if let Some(r) = newest.and_then(|(i, _)| PANICS.get(i)) {
            if r.copy(&mut self.main) && self.main.tid == tid {
                self.kind = Kind::Rust;
            }
        }
        if self.kind == Kind::Rust {
            if let Some(r) = before.and_then(|(i, _)| PANICS.get(i)) {
                self.earlier_set = r.copy(&mut self.earlier) && self.earlier.tid == tid;
            }
        }
    }

    /// The language exception for EXCEPTION `lx`, if any.
    pub fn language(&self) -> Option<LanguageException<'_>> {
        let kind: &[u8] = match self.kind {
            Kind::None => return None,
            Kind::Objc => report_format::encode::LANGUAGE_OBJC,
            Kind::Cxx => report_format::encode::LANGUAGE_CXX,
            Kind::Rust => report_format::encode::LANGUAGE_RUST,
        };
        let m = &self.main;
        Some(LanguageException {
            kind,
            type_name: m.type_name.get(..m.type_len).unwrap_or(&[]),
            reason: m.reason(),
            location: m.location.get(..m.location_len).unwrap_or(&[]),
            user_info: m.user_info.get(..m.user_info_len).unwrap_or(&[]),
            thread_id: (m.tid != 0).then_some(m.tid),
            backtrace: m.bt.get(..m.bt_len).unwrap_or(&[]),
        })
    }

    /// The messages (earlier panic, abort message, app reason) into `out`; how many.
    pub fn messages<'a>(&'a self, out: &mut [Message<'a>]) -> usize {
        let mut n = 0usize;
        let mut push = |m: Message<'a>| {
            if let Some(slot) = out.get_mut(n) {
                *slot = m;
                n = n.saturating_add(1);
            }
        };
        if self.earlier_set {
            push(Message { source: b"panic", text: self.earlier.reason() });
        }
        if self.abort_len > 0 {
            push(Message { source: b"abort", text: self.abort.get(..self.abort_len).unwrap_or(&[]) });
        }
        if self.app_len > 0 {
            push(Message { source: b"app", text: self.app.get(..self.app_len).unwrap_or(&[]) });
        }
        n
    }
}

impl Default for Snapshot {
    fn default() -> Self {
        Self::new()
    }
}

/// Most messages [`Snapshot::messages`] gives.
pub const MAX_MESSAGES: usize = 3;

/// Whether a crash by `signal` (0: none yet) or Mach exception `mach_exception` (0: none) is one a Rust panic ends
/// the process with: `SIGABRT` (`abort()`), `SIGILL` / `SIGTRAP` (the `ud2` / `brk` of `core::intrinsics::abort`),
/// or their Mach forms `EXC_BAD_INSTRUCTION` (2), `EXC_BREAKPOINT` (6), `EXC_CRASH` (10) (XNU
/// `osfmk/mach/exception_types.h`). Signal numbers are the same on Linux and Darwin. Pure.
pub fn is_abort_like(signal: i32, mach_exception: i32) -> bool {
    signal == libc::SIGABRT || signal == libc::SIGILL || signal == libc::SIGTRAP || matches!(mach_exception, 2 | 6 | 10)
}

/// glibc's abort message (`struct abort_msg_s { unsigned int size; char msg[]; }`, glibc `include/stdlib.h`;
/// `__abort_msg` points to it, set by `__assert_fail` and `__libc_message` right before `abort()`), read with `mem`
/// into `out` up to the first NUL, without a trailing newline. 0 when there is none. Signal-safe.
fn read_abort_msg<M: MemoryReader>(mem: &mut M, out: &mut [u8; MAX_ABORT_MSG]) -> usize {
    let var = ABORT_MSG_ADDR.load(Ordering::Relaxed);
    if var == 0 {
        return 0;
    }
    let Some(p) = mem.read_u64(var).filter(|p| *p != 0) else { return 0 };
    let mut size = [0u8; 4];
    if !mem.read(p, &mut size) {
        return 0;
    }
    let total = u32::from_ne_bytes(size) as usize;
    let want = total.saturating_sub(4).min(MAX_ABORT_MSG);
    let Some(buf) = out.get_mut(..want) else { return 0 };
    // The message may end before the end of the mapping; read page by page so an unreadable tail loses only itself.
    let mut got = 0usize;
    while got < want {
        let addr = p.saturating_add(4).saturating_add(got as u64);
        let page_left = 4096usize.saturating_sub((addr % 4096) as usize).max(1);
        let end = got.saturating_add(page_left).min(want);
        let Some(chunk) = buf.get_mut(got..end) else { break };
        if !mem.read(addr, chunk) {
            break;
        }
        got = end;
    }
    let mut n = buf.iter().take(got).position(|b| *b == 0).unwrap_or(got);
    while n > 0 && buf.get(n.saturating_sub(1)).is_some_and(|b| *b == b'\n') {
        n = n.saturating_sub(1);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mem(Vec<(u64, Vec<u8>)>);
    impl MemoryReader for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            for (base, bytes) in &self.0 {
                if addr >= *base && addr + buf.len() as u64 <= base + bytes.len() as u64 {
                    let o = (addr - base) as usize;
                    buf.copy_from_slice(&bytes[o..o + buf.len()]);
                    return true;
                }
            }
            false
        }
    }

    fn msgs(s: &Snapshot) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = [Message::default(); MAX_MESSAGES];
        let n = s.messages(&mut out);
        out[..n].iter().map(|m| (m.source.to_vec(), m.text.to_vec())).collect()
    }

    // One test for the shared statics, so parallel tests do not race on them.
    #[test]
    fn records_are_chosen_and_copied() {
        let mut mem = Mem(Vec::new());
        let mut s = Box::new(Snapshot::new());
        // Nothing recorded.
        s.take(7, true, 0, &mut mem);
        assert!(s.language().is_none());
        assert!(msgs(&s).is_empty());

        // Panics: only the crashed thread's, only for an abort-like signal; the newest, with the one before.
        assert!(record_panic(&Fields { tid: 7, reason: &[b"first"], location: &[b"a.rs:1:2"], ..Fields::default() }));
        assert!(record_panic(&Fields { tid: 8, reason: &[b"other thread"], ..Fields::default() }));
        assert!(record_panic(&Fields {
            tid: 7,
            reason: &[b"panic in a function ", b"that cannot unwind"],
            location: &[b"b.rs:", b"3", b":4"],
            ..Fields::default()
        }));
        s.take(7, is_abort_like(libc::SIGSEGV, 0), libc::SIGSEGV, &mut mem);
        assert!(s.language().is_none(), "a segfault is not a panic's abort");
        s.take(7, true, 0, &mut mem);
        let lx = s.language().expect("panic");
        assert_eq!(lx.kind, b"rust");
        assert_eq!(lx.reason, b"panic in a function that cannot unwind");
        assert_eq!(lx.location, b"b.rs:3:4");
        assert_eq!(lx.thread_id, Some(7));
        assert_eq!(msgs(&s), vec![(b"panic".to_vec(), b"first".to_vec())]);
        s.take(9, is_abort_like(libc::SIGABRT, 0), 0, &mut mem);
        assert!(s.language().is_none(), "another thread's panic is not this crash's");

        // C++ wins over panics, Objective-C over C++.
        let long = [b'x'; MAX_REASON + 10];
        assert!(CXX.write(&Fields {
            tid: 3,
            type_name: &[b"St13runtime_error"],
            reason: &[&long],
            ..Fields::default()
        }));
        s.take(7, true, 0, &mut mem);
        let lx = s.language().expect("c++");
        assert_eq!((lx.kind, lx.type_name, lx.reason.len()), (&b"c++"[..], &b"St13runtime_error"[..], MAX_REASON));
        assert!(OBJC.write(&Fields {
            tid: 3,
            type_name: &[b"NSInvalidArgumentException"],
            reason: &[b"bad"],
            user_info: b"k: v",
            backtrace: &[1, 2, 3],
            ..Fields::default()
        }));
        s.take(7, true, 0, &mut mem);
        let lx = s.language().expect("objc");
        assert_eq!((lx.kind, lx.backtrace, lx.user_info), (&b"objc"[..], &[1u64, 2, 3][..], &b"k: v"[..]));
        OBJC.clear();
        CXX.clear();
        for p in &PANICS {
            p.clear();
        }

        // App reason and glibc's abort message (read through the reader; trailing newline dropped).
        assert!(APP_REASON.set(b"saving the document"));
        let mut msg = 64u32.to_ne_bytes().to_vec();
        msg.extend_from_slice(b"prog: a.c:3: main: Assertion `x' failed.\n\0");
        msg.resize(64, 0);
        mem.0.push((0x1000, 0x2000u64.to_ne_bytes().to_vec()));
        mem.0.push((0x2000, msg));
        set_abort_msg_address(0x1000);
        s.take(7, true, 0, &mut mem);
        assert_eq!(
            msgs(&s),
            vec![
                (b"abort".to_vec(), b"prog: a.c:3: main: Assertion `x' failed.".to_vec()),
                (b"app".to_vec(), b"saving the document".to_vec())
            ]
        );
        // A null pointer, an unreadable one: nothing.
        mem.0[0].1 = 0u64.to_ne_bytes().to_vec();
        s.take(7, true, 0, &mut mem);
        assert_eq!(msgs(&s).len(), 1);
        set_abort_msg_address(0);
        assert!(APP_REASON.set(b""));
    }
}
