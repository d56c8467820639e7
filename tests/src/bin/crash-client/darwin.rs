//! The crash client (macOS): installs the handler, then crashes with one trigger per process, so the Mach
//! exception server and the signal fallback run for real. **Written on Linux and not yet run**: it is type-checked
//! here (`scripts/check-apple.sh aarch64-apple-darwin x86_64-apple-darwin`); the macOS workflow
//! (`.github/workflows/macos.yml`) runs it through `tests/tests/darwin_crashes.rs` on arm64 and x86_64 runners.
//!
//! Usage: `crash-client <trigger> <report-dir> <alloc-count-file>` (the Linux client's command line).
//!
//! Before crashing it prints `PID <pid>`, `MAIN_TID <id>`, `FAULT_TID <id>` (the faulting thread), `THREAD <id>` for
//! every thread it created that is alive at the crash, and `FAULT_ADDR <hex>` when the fault address is known, each
//! line flushed. Thread ids are `pthread_threadid_np`'s (what `thread_identifier_info` gives the handler).
//!
//! Allocations between the handler's `Start` and `BeforeReraise` events are counted by a counting global allocator
//! (Rust allocations only: a two-level-namespace Mach-O executable cannot interpose `malloc` for libSystem the way
//! the Linux client does); the crash hook writes the counts to the alloc-count file with raw `write(2)`.
//!
//! Triggers are named and built like the Linux client's (`linux.rs`) so the frames the test looks for are the same.
//! The Linux triggers left out, and why, are listed in `tests/tests/darwin_crashes.rs`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

// ---------------------------------------------------------------------------------------------------------------
// Allocation counting and the crash hook.

static COUNTING: AtomicBool = AtomicBool::new(false);
static CRASH_TID: AtomicU64 = AtomicU64::new(0);
static CRASH_THREAD_ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALL_ALLOCS: AtomicU64 = AtomicU64::new(0);
static STARTS: AtomicU64 = AtomicU64::new(0);
static ENDS: AtomicU64 = AtomicU64::new(0);
static COUNT_FD: AtomicI32 = AtomicI32::new(-1);
/// When non-zero, the crash hook lowers `RLIMIT_FSIZE` to this many bytes at crash start (SIGXFSZ ignored): report
/// writes past it fail with `EFBIG`, a stand-in for a full disk that affects nothing but the report.
static FSIZE_LIMIT: AtomicU64 = AtomicU64::new(0);

fn set_fsize_limit(bytes: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid rlimit pointers; getrlimit/setrlimit are plain system calls. The hard limit is kept.
    unsafe {
        libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim);
        lim.rlim_cur = bytes.min(lim.rlim_max);
        libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
    }
}

/// This thread's system-wide id (`pthread_threadid_np`, what the report's thread ids are).
fn gettid() -> u64 {
    let mut tid = 0u64;
    // SAFETY: a null pthread_t means the calling thread; `tid` is a valid out-pointer.
    unsafe { libc::pthread_threadid_np(0 as libc::pthread_t, &mut tid) };
    tid
}

fn count_one() {
    if COUNTING.load(Ordering::Acquire) {
        ALL_ALLOCS.fetch_add(1, Ordering::AcqRel);
        if gettid() == CRASH_TID.load(Ordering::Acquire) {
            CRASH_THREAD_ALLOCS.fetch_add(1, Ordering::AcqRel);
        }
    }
}

struct Counting;

// SAFETY: delegates every operation to `System`, only adding counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Formats `v` in decimal into `buf` without allocating; returns the digits.
fn itoa(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    &buf[i..]
}

fn raw_write(fd: i32, bytes: &[u8]) {
    // SAFETY: `bytes` is a valid slice; write(2) is async-signal-safe.
    unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
}

/// The crash hook. On the Mach path it runs on the handler's exception thread (`tid` is the faulting thread's
/// id, which is suspended in its exception); on the signal fallback, on the faulting thread.
extern "C" fn hook(event: handler::test_hooks::CrashEvent, tid: u64) {
    use handler::test_hooks::CrashEvent;
    match event {
        CrashEvent::Start => {
            CRASH_TID.store(tid, Ordering::Release);
            let limit = FSIZE_LIMIT.load(Ordering::Acquire);
            if limit != 0 {
                set_fsize_limit(limit);
            }
            STARTS.fetch_add(1, Ordering::AcqRel);
            COUNTING.store(true, Ordering::Release);
        }
        CrashEvent::ThreadsStopped
        | CrashEvent::ThreadsListed
        | CrashEvent::StopDone
        | CrashEvent::ReportWritten
        | CrashEvent::EarlySync => {}
        CrashEvent::BeforeReraise => {
            COUNTING.store(false, Ordering::Release);
            if FSIZE_LIMIT.load(Ordering::Acquire) != 0 {
                set_fsize_limit(libc::RLIM_INFINITY);
            }
            ENDS.fetch_add(1, Ordering::AcqRel);
            let fd = COUNT_FD.load(Ordering::Acquire);
            if fd < 0 {
                return;
            }
            let mut b = [0u8; 20];
            for (key, v) in [
                (&b"crash_thread_allocs "[..], CRASH_THREAD_ALLOCS.load(Ordering::Acquire)),
                (b"all_allocs ", ALL_ALLOCS.load(Ordering::Acquire)),
                (b"starts ", STARTS.load(Ordering::Acquire)),
                (b"ends ", ENDS.load(Ordering::Acquire)),
                (b"handler_tid ", tid),
            ] {
                raw_write(fd, key);
                raw_write(fd, itoa(v, &mut b));
                raw_write(fd, b"\n");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Output to the test.

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

// ---------------------------------------------------------------------------------------------------------------
// Faulting primitives (inline asm, so no debug assertion or compiler reasoning intervenes).

#[inline(never)]
fn read_at(addr: usize) -> u64 {
    let v: u64;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: not sound by design: loads from `addr` to fault.
    unsafe {
        std::arch::asm!("mov {v}, qword ptr [{a}]", v = out(reg) v, a = in(reg) addr, options(nostack));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: not sound by design: loads from `addr` to fault.
    unsafe {
        std::arch::asm!("ldr {v}, [{a}]", v = out(reg) v, a = in(reg) addr, options(nostack));
    }
    v
}

#[inline(never)]
fn write_at(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: not sound by design: stores to `addr` to fault.
    unsafe {
        std::arch::asm!("mov qword ptr [{a}], {v}", a = in(reg) addr, v = in(reg) 1u64, options(nostack));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: not sound by design: stores to `addr` to fault.
    unsafe {
        std::arch::asm!("str {v}, [{a}]", a = in(reg) addr, v = in(reg) 1u64, options(nostack));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Triggers. Each `trigger_*` is what the tests look for in the crashed thread's frames.

/// A read of address 0 (`__PAGEZERO`): `EXC_BAD_ACCESS` / `KERN_INVALID_ADDRESS`, SIGSEGV.
#[inline(never)]
fn trigger_null_deref() {
    say(&format!("FAULT_TID {}", gettid()));
    say("FAULT_ADDR 0");
    black_box(read_at(black_box(0)));
}

/// An address far from every mapping but inside the user address space of both architectures (below 2^47):
/// `EXC_BAD_ACCESS` / `KERN_INVALID_ADDRESS` with the address as the subcode.
const WILD_ADDR: usize = 0x4141_4141_4000;

#[inline(never)]
fn trigger_wild_read() {
    say(&format!("FAULT_TID {}", gettid()));
    say(&format!("FAULT_ADDR {WILD_ADDR:x}"));
    black_box(read_at(black_box(WILD_ADDR)));
}

/// x86_64: a non-canonical address raises #GP, not a page fault: `EXC_BAD_ACCESS` with code `EXC_I386_GPFLT` and
/// no address (XNU `osfmk/i386/trap.c`, `user_trap`, `T_GENERAL_PROTECTION`).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn trigger_noncanonical_read() {
    say(&format!("FAULT_TID {}", gettid()));
    black_box(read_at(black_box(0xdead_0000_0000_0000)));
}

/// A write to a read-only page: `EXC_BAD_ACCESS` / `KERN_PROTECTION_FAILURE`, which Darwin turns into **SIGBUS**
/// (`bsd/uxkern/ux_exception.c`: only `KERN_INVALID_ADDRESS` is SIGSEGV), not Linux's SIGSEGV.
#[inline(never)]
fn trigger_ro_write() {
    // SAFETY: anonymous read-only mapping; checked below.
    let p =
        unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANON, -1, 0) };
    assert_ne!(p, libc::MAP_FAILED);
    say(&format!("FAULT_TID {}", gettid()));
    say(&format!("FAULT_ADDR {:x}", p as usize));
    write_at(black_box(p as usize));
}

/// A read of a page of a file mapping past the file's end (the file is empty): the pager has nothing to give,
/// `EXC_BAD_ACCESS` with a code other than `KERN_INVALID_ADDRESS`, SIGBUS.
#[inline(never)]
fn trigger_sigbus(dir: &std::path::Path) {
    let path = dir.join("sigbus-backing-file");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("create backing file");
    use std::os::fd::AsRawFd;
    // SAFETY: shared read mapping of our own file; checked below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
    assert_ne!(p, libc::MAP_FAILED);
    say(&format!("FAULT_TID {}", gettid()));
    say(&format!("FAULT_ADDR {:x}", p as usize));
    black_box(read_at(black_box(p as usize)));
}

/// An undefined instruction (`ud2` / `udf #0`): `EXC_BAD_INSTRUCTION` (code `EXC_I386_INVOP` / `EXC_ARM_UNDEFINED`,
/// both 1), SIGILL.
#[inline(never)]
fn trigger_sigill() {
    say(&format!("FAULT_TID {}", gettid()));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: not sound by design: executes an undefined instruction.
    unsafe {
        std::arch::asm!("ud2", options(nostack));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: not sound by design: executes a permanently undefined instruction.
    unsafe {
        std::arch::asm!("udf #0", options(nostack));
    }
}

/// What a Swift runtime trap (`fatalError`, a failed `!`, an overflow) compiles to: arm64 `brk #1`:
/// `EXC_BREAKPOINT`, SIGTRAP; x86_64 `ud2`: `EXC_BAD_INSTRUCTION`, SIGILL.
#[inline(never)]
fn trigger_trap() {
    say(&format!("FAULT_TID {}", gettid()));
    #[cfg(target_arch = "aarch64")]
    // SAFETY: not sound by design: a breakpoint trap.
    unsafe {
        std::arch::asm!("brk #1", options(nostack));
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: not sound by design: an undefined instruction.
    unsafe {
        std::arch::asm!("ud2", options(nostack));
    }
}

/// x86_64 `int3`: `EXC_BREAKPOINT` (code `EXC_I386_BPT`), SIGTRAP, with the pc already past the instruction, so
/// the handler re-raises SIGTRAP after the report instead of letting it repeat.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn trigger_int3() {
    say(&format!("FAULT_TID {}", gettid()));
    // SAFETY: not sound by design: a breakpoint trap.
    unsafe {
        std::arch::asm!("int3", options(nostack));
    }
}

// A true leaf: no prologue, no frame record, no unwind entry; at the fault its caller is only in LR (x30) and x29
// still points at the caller's record. Mach-O spelling (leading underscore, no `.type`/`.size`).
#[cfg(target_arch = "aarch64")]
std::arch::global_asm!(
    ".text",
    ".globl _crash_client_leaf_load",
    ".p2align 2",
    "_crash_client_leaf_load:",
    "    ldr x0, [x0]",
    "    ret",
);

#[cfg(target_arch = "aarch64")]
extern "C" {
    fn crash_client_leaf_load(addr: usize) -> u64;
}

/// Calls the frameless leaf `crash_client_leaf_load`, which faults reading address 0.
#[cfg(target_arch = "aarch64")]
#[inline(never)]
fn trigger_leaf() {
    say(&format!("FAULT_TID {}", gettid()));
    say("FAULT_ADDR 0");
    // SAFETY: not sound by design: the leaf loads from address 0 to fault.
    black_box(unsafe { crash_client_leaf_load(black_box(0)) });
}

/// x86_64: integer division by zero: `EXC_ARITHMETIC` (code `EXC_I386_DIV`), SIGFPE. arm64: integer division by
/// zero does not trap (it gives 0), so the signal is raised: no Mach exception, the signal fallback reports it.
#[inline(never)]
fn trigger_sigfpe() {
    say(&format!("FAULT_TID {}", gettid()));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: not sound by design: integer division by zero raises #DE.
    unsafe {
        std::arch::asm!(
            "xor edx, edx",
            "div {d:e}",
            d = in(reg) black_box(0u32),
            inout("eax") 1u32 => _,
            out("edx") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: raise has no memory preconditions.
    unsafe {
        libc::raise(libc::SIGFPE);
    }
}

#[inline(never)]
fn trigger_abort() {
    say(&format!("FAULT_TID {}", gettid()));
    call_abort();
}

#[inline(never)]
fn call_abort() {
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() };
}

/// A failed C `assert()`: Darwin's `<assert.h>` expands it to `__assert_rtn(function, file, line, expression)`,
/// which prints, leaves the message in libsystem_c's `__crash_info` and aborts.
#[inline(never)]
fn trigger_c_assert() {
    extern "C" {
        fn __assert_rtn(
            function: *const libc::c_char,
            file: *const libc::c_char,
            line: libc::c_int,
            expression: *const libc::c_char,
        ) -> !;
    }
    say(&format!("FAULT_TID {}", gettid()));
    // SAFETY: NUL-terminated strings; `__assert_rtn` prints, records the message and aborts.
    unsafe { __assert_rtn(c"widget_open".as_ptr(), c"widgets.c".as_ptr(), 42, c"widget != NULL".as_ptr()) }
}

/// `abort()` after the app said what it was doing (`handler::set_crash_reason`), with a user key/value set.
#[inline(never)]
fn trigger_app_reason() {
    assert!(handler::set_crash_reason("saving document 42 to disk"));
    handler::user_values::set("screen", "editor").expect("set a user value");
    say(&format!("FAULT_TID {}", gettid()));
    call_abort();
}

/// A Rust panic that kills the process: `panic = "abort"` imitated by a hook that runs the default hook and
/// aborts (what the `panic_abort` runtime does after the hooks), as in the Linux client.
#[inline(never)]
fn trigger_panic() {
    if cfg!(panic = "unwind") {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            default(info);
            std::process::abort();
        }));
    }
    say(&format!("FAULT_TID {}", gettid()));
    say(&format!("PANIC_AT {}:{}:5", file!(), line!() + 1));
    panic!("deliberate panic from the crash client");
}

/// `cxx_*` triggers: loads `<run dir>/../libcxxthrow.dylib` (built by the test with `c++ -dynamiclib`) before
/// install, so the process has a C++ runtime when install looks for `std::set_terminate`.
fn load_cxx_library(dir: &std::path::Path) -> *mut libc::c_void {
    use std::os::unix::ffi::OsStrExt;
    let lib = dir.parent().expect("run dir").join("libcxxthrow.dylib");
    let c = std::ffi::CString::new(lib.as_os_str().as_bytes()).expect("path");
    // SAFETY: a NUL-terminated path; the handle stays open until the process dies.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    h
}

/// A thread of the C++ library throws an exception nothing catches; this thread waits in `pthread_join`. The
/// thrower prints its id.
#[inline(never)]
fn trigger_cxx(lib: *mut libc::c_void, std_exception: bool) {
    // SAFETY: a NUL-terminated symbol name in a valid handle.
    let f = unsafe { libc::dlsym(lib, c"cxx_throw_in_thread".as_ptr()) };
    assert!(!f.is_null(), "cxx_throw_in_thread");
    // SAFETY: the test's C++ source defines `extern "C" void cxx_throw_in_thread(int)`.
    let f: extern "C" fn(i32) = unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn(i32)>(f) };
    f(i32::from(std_exception));
}

/// Loads `<run dir>/../libcrashme.dylib` (built by the test, after install: the dyld add-image callback must
/// register it) and calls its `crashme_write(NULL)`, which faults inside the library.
#[inline(never)]
fn trigger_dlopen(dir: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let lib = dir.parent().expect("run dir").join("libcrashme.dylib");
    let c = std::ffi::CString::new(lib.as_os_str().as_bytes()).expect("path");
    // SAFETY: a NUL-terminated path; the handle stays open until the process dies.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    // SAFETY: a NUL-terminated symbol name in a valid handle.
    let f = unsafe { libc::dlsym(h, c"crashme_write".as_ptr()) };
    assert!(!f.is_null(), "crashme_write");
    // SAFETY: the test's C source defines `void crashme_write(volatile int *)`.
    let f: extern "C" fn(*mut i32) = unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn(*mut i32)>(f) };
    say(&format!("FAULT_TID {}", gettid()));
    say("FAULT_ADDR 0");
    f(black_box(std::ptr::null_mut()));
}

#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let pad = black_box([depth; 32]);
    if black_box(depth) == u64::MAX {
        return pad[0];
    }
    recurse(depth + 1).wrapping_add(black_box(pad[1]))
}

/// Runs into the thread's stack guard. The Mach exception is handled on the handler's own exception thread, so
/// unlike a signal handler it needs no alternate signal stack on the overflowing thread.
#[inline(never)]
fn trigger_stack_overflow() {
    say(&format!("FAULT_TID {}", gettid()));
    black_box(recurse(0));
}

#[inline(never)]
fn thread_body_overflow() {
    trigger_stack_overflow();
}

#[inline(never)]
fn thread_body_crash() {
    trigger_null_deref();
}

extern "C" fn pthread_entry(_arg: *mut libc::c_void) -> *mut libc::c_void {
    thread_body_crash();
    std::ptr::null_mut()
}

extern "C" fn pthread_overflow_entry(_arg: *mut libc::c_void) -> *mut libc::c_void {
    thread_body_overflow();
    std::ptr::null_mut()
}

/// A C-style thread (raw `pthread_create`, 256 KiB stack, no alternate signal stack: Darwin has no wrapper that
/// gives it one) that overflows its stack; joined, so the process dies while it runs.
fn pthread_overflow() {
    // SAFETY: attribute object initialised before use and destroyed after; valid out-pointers; an entry point with
    // the right signature.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_attr_init(&mut attr), 0);
        assert_eq!(libc::pthread_attr_setstacksize(&mut attr, 256 * 1024), 0);
        let mut t: libc::pthread_t = std::mem::zeroed();
        assert_eq!(libc::pthread_create(&mut t, &attr, pthread_overflow_entry, std::ptr::null_mut()), 0);
        libc::pthread_attr_destroy(&mut attr);
        libc::pthread_join(t, std::ptr::null_mut());
    }
}

/// Spawns `n` threads that block until the process dies; returns when all are running (and announced).
fn park_threads(n: usize) {
    let barrier = Arc::new(Barrier::new(n + 1));
    for i in 0..n {
        let b = Arc::clone(&barrier);
        std::thread::Builder::new()
            .name(format!("idle-{i}"))
            .spawn(move || {
                say(&format!("THREAD {}", gettid()));
                b.wait();
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn");
    }
    barrier.wait();
}

// ---------------------------------------------------------------------------------------------------------------
// Faults survived, and signals around the crash.

/// Counts the profiler timer's signals.
static TICKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_tick(_sig: libc::c_int, _info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {
    black_box([0u8; 512]);
    TICKS.fetch_add(1, Ordering::Relaxed);
}

/// A sampling profiler: SIGPROF and SIGALRM handlers with `SA_ONSTACK`, and both interval timers firing every 50
/// µs, running while the process crashes.
fn start_profiler_timers() {
    // SAFETY: valid sigaction and itimerval structures; the handler has the SA_SIGINFO signature.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_tick as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGPROF, &act, std::ptr::null_mut()), 0);
        assert_eq!(libc::sigaction(libc::SIGALRM, &act, std::ptr::null_mut()), 0);
        let t = libc::itimerval {
            it_interval: libc::timeval { tv_sec: 0, tv_usec: 50 },
            it_value: libc::timeval { tv_sec: 0, tv_usec: 50 },
        };
        assert_eq!(libc::setitimer(libc::ITIMER_PROF, &t, std::ptr::null_mut()), 0);
        assert_eq!(libc::setitimer(libc::ITIMER_REAL, &t, std::ptr::null_mut()), 0);
    }
    let until = std::time::Instant::now() + std::time::Duration::from_millis(20);
    while std::time::Instant::now() < until {
        black_box(0);
    }
    assert!(TICKS.load(Ordering::Relaxed) > 0, "the profiler timer fires");
}

/// One `PROT_NONE` page the "runtime" knows how to recover a fault on (by making it readable).
static GUARD_PAGE: AtomicU64 = AtomicU64::new(0);
static RECOVERIES: AtomicU64 = AtomicU64::new(0);

fn map_guard_page() -> usize {
    // SAFETY: anonymous PROT_NONE mapping; checked below.
    let p =
        unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANON, -1, 0) };
    assert_ne!(p, libc::MAP_FAILED);
    GUARD_PAGE.store(p as u64, Ordering::Release);
    p as usize
}

/// The first-chance hook: a fault inside the guard page (SIGBUS on Darwin: the page is mapped, its protection
/// fails; SIGSEGV accepted too) is fixed by making the page readable. Async-signal-safe.
unsafe extern "C" fn first_chance(sig: libc::c_int, info: *mut libc::siginfo_t, _uc: *mut libc::c_void) -> bool {
    if sig != libc::SIGBUS && sig != libc::SIGSEGV {
        return false;
    }
    let page = GUARD_PAGE.load(Ordering::Acquire);
    // SAFETY: `info` is the kernel's siginfo (or null).
    let Some(i) = (unsafe { info.as_ref() }) else { return false };
    let addr = i.si_addr as u64;
    if page == 0 || addr < page || addr >= page + 4096 {
        return false;
    }
    // SAFETY: changing the protection of our own mapping; mprotect is a plain system call.
    unsafe { libc::mprotect(page as *mut libc::c_void, 4096, libc::PROT_READ) };
    RECOVERIES.fetch_add(1, Ordering::AcqRel);
    true
}

/// Reads the guard page (recovered by the first-chance hook), then crashes for real.
#[inline(never)]
fn trigger_recovered_then_real() {
    let page = map_guard_page();
    let v = read_at(black_box(page));
    assert_eq!(RECOVERIES.load(Ordering::Acquire), 1, "the fault was recovered");
    say(&format!("RECOVERED {v} {page:x}"));
    trigger_null_deref();
}

/// A thread that blocks every signal. On Linux it never answers the stop signal; `thread_suspend` does not care
/// about signal masks, so on Darwin it must be captured like any other thread.
fn spawn_blocking_thread() {
    let started = Arc::new(Barrier::new(2));
    let s = Arc::clone(&started);
    std::thread::Builder::new()
        .name("blocker".into())
        .spawn(move || {
            // SAFETY: valid sigset; pthread_sigmask only changes this thread's mask.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut set);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            say(&format!("BLOCKER {}", gettid()));
            say(&format!("THREAD {}", gettid()));
            s.wait();
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        })
        .expect("spawn");
    started.wait();
}

/// Two threads fault at once with different exceptions (SIGSEGV and SIGILL).
fn two_signals() {
    let go = Arc::new(Barrier::new(2));
    let g = Arc::clone(&go);
    let ill = std::thread::Builder::new()
        .name("sigill".into())
        .spawn(move || {
            say(&format!("THREAD {}", gettid()));
            g.wait();
            trigger_sigill();
        })
        .expect("spawn");
    let g = Arc::clone(&go);
    let segv = std::thread::Builder::new()
        .name("sigsegv".into())
        .spawn(move || {
            say(&format!("THREAD {}", gettid()));
            g.wait();
            trigger_null_deref();
        })
        .expect("spawn");
    let _ = ill.join();
    let _ = segv.join();
}

/// A child that inherited our exception ports crashes first; the parent waits for it and then crashes itself. The
/// exception server must decline the child's exception (not ours) and still report the parent's crash.
#[inline(never)]
fn trigger_fork_child_then_parent() {
    // SAFETY: fork in a test client; the child only calls async-signal-safe code until it crashes.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // The child: its own fault, at a different address than the parent's.
        black_box(read_at(black_box(0x8)));
        // SAFETY: not reached; _exit is async-signal-safe.
        unsafe { libc::_exit(5) };
    }
    assert!(child > 0, "fork failed");
    say(&format!("CHILD_PID {child}"));
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    unsafe { libc::waitpid(child, &mut status, 0) };
    say(&format!("CHILD_STATUS {status}"));
    say(&format!("FAULT_TID {}", gettid()));
    say("FAULT_ADDR 10");
    black_box(read_at(black_box(0x10)));
}

fn run_trigger(trigger: &str, dir: &std::path::Path) {
    match trigger {
        "null_deref" => trigger_null_deref(),
        "wild_read" => trigger_wild_read(),
        #[cfg(target_arch = "x86_64")]
        "noncanonical_read" => trigger_noncanonical_read(),
        "ro_write" => trigger_ro_write(),
        "sigbus" => trigger_sigbus(dir),
        "sigill" => trigger_sigill(),
        "trap" => trigger_trap(),
        #[cfg(target_arch = "x86_64")]
        "int3" => trigger_int3(),
        #[cfg(target_arch = "aarch64")]
        "leaf" => trigger_leaf(),
        "sigfpe" => trigger_sigfpe(),
        "abort" => trigger_abort(),
        "c_assert" => trigger_c_assert(),
        "app_reason" => trigger_app_reason(),
        "panic" => trigger_panic(),
        "dlopen" => trigger_dlopen(dir),
        "stack_overflow_main" => trigger_stack_overflow(),
        "stack_overflow_thread" => {
            let h = std::thread::Builder::new()
                .name("overflower".into())
                .stack_size(256 * 1024)
                .spawn(thread_body_overflow)
                .expect("spawn");
            let _ = h.join();
        }
        "stack_overflow_pthread" => pthread_overflow(),
        "thread_crash" => {
            let h = std::thread::Builder::new().name("crasher".into()).spawn(thread_body_crash).expect("spawn");
            let _ = h.join();
        }
        "pthread_crash" => {
            // SAFETY: valid out-pointer, default attributes, an entry point with the right signature.
            unsafe {
                let mut t: libc::pthread_t = std::mem::zeroed();
                assert_eq!(libc::pthread_create(&mut t, std::ptr::null(), pthread_entry, std::ptr::null_mut()), 0);
                libc::pthread_join(t, std::ptr::null_mut());
            }
        }
        "threads200" => {
            park_threads(200);
            trigger_null_deref();
        }
        "alloc_loop" => {
            let started = Arc::new(Barrier::new(2));
            let s = Arc::clone(&started);
            std::thread::Builder::new()
                .name("allocator".into())
                .spawn(move || {
                    say(&format!("THREAD {}", gettid()));
                    s.wait();
                    let mut keep: Vec<Vec<u8>> = Vec::new();
                    loop {
                        keep.push(vec![1u8; black_box(64)]);
                        if keep.len() > 1000 {
                            keep.clear();
                        }
                        black_box(&keep);
                    }
                })
                .expect("spawn");
            started.wait();
            std::thread::sleep(std::time::Duration::from_millis(20));
            trigger_null_deref();
        }
        // A full disk before the head sections are on disk: the report file may grow to 24 bytes only.
        "disk_full_in_head" => {
            // SAFETY: ignoring SIGXFSZ, so a write past RLIMIT_FSIZE fails with EFBIG instead of killing.
            unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
            park_threads(200);
            FSIZE_LIMIT.store(24, Ordering::Release);
            trigger_null_deref();
        }
        "emfile" => {
            // Out of file descriptors: lower the soft limit (quick), then open /dev/null until EMFILE.
            let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: valid rlimit pointers.
            unsafe {
                assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
                lim.rlim_cur = lim.rlim_cur.min(64);
                assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
            }
            let mut n = 0u32;
            loop {
                // SAFETY: NUL-terminated literal path.
                let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
                if fd < 0 {
                    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EMFILE));
                    break;
                }
                n += 1;
                assert!(n < 100_000, "no descriptor limit");
            }
            say(&format!("EMFILE after {n} more descriptors"));
            trigger_null_deref();
        }
        "handler_fault" => {
            handler::test_hooks::FAULT_IN_HANDLER.store(true, Ordering::Release);
            trigger_null_deref();
        }
        "two_threads" => {
            let go = Arc::new(Barrier::new(2));
            let mut hs = Vec::new();
            for i in 0..2 {
                let g = Arc::clone(&go);
                hs.push(
                    std::thread::Builder::new()
                        .name(format!("faulter-{i}"))
                        .spawn(move || {
                            say(&format!("THREAD {}", gettid()));
                            g.wait();
                            thread_body_crash();
                        })
                        .expect("spawn"),
                );
            }
            for h in hs {
                let _ = h.join();
            }
        }
        "profiler_timer" => {
            start_profiler_timers();
            trigger_null_deref();
        }
        "first_chance" => {
            handler::set_first_chance_handler(Some(first_chance));
            trigger_recovered_then_real();
        }
        "blocked_thread" => {
            spawn_blocking_thread();
            trigger_null_deref();
        }
        "two_signals" => two_signals(),
        "fork_child_then_parent" => trigger_fork_child_then_parent(),
        other => {
            eprintln!("unknown trigger {other}");
            std::process::exit(2);
        }
    }
}

pub fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: crash-client <trigger> <report-dir> <alloc-count-file>");
        std::process::exit(2);
    }
    let (trigger, dir, counts) = (&args[1], std::path::PathBuf::from(&args[2]), &args[3]);
    let c = std::ffi::CString::new(counts.as_bytes()).expect("path");
    // SAFETY: NUL-terminated path; the fd stays open for the life of the process.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC, 0o644) };
    COUNT_FD.store(fd, Ordering::Release);
    handler::test_hooks::set_crash_hook(Some(hook));
    let cxx = trigger.starts_with("cxx_").then(|| load_cxx_library(&dir));
    let mut config = handler::Config::new(&dir);
    config.app_id = "crash-client".into();
    if let Err(e) = handler::install(&config) {
        eprintln!("install failed: {e}");
        std::process::exit(3);
    }
    say(&format!("PID {}", std::process::id()));
    say(&format!("MAIN_TID {}", gettid()));
    match (trigger.as_str(), cxx) {
        ("cxx_runtime_error", Some(lib)) => trigger_cxx(lib, true),
        ("cxx_non_std", Some(lib)) => trigger_cxx(lib, false),
        _ => run_trigger(trigger, &dir),
    }
    say("NO_CRASH");
    std::process::exit(4);
}
