//! The crash client (Linux): installs the handler, then crashes with one trigger per process.
//!
//! Usage: `crash-client <trigger> <report-dir> <alloc-count-file>`.
//!
//! Before crashing it prints `FAULT_TID <tid>`, `THREAD <tid>` for every thread it created that is alive at the
//! crash, and `FAULT_ADDR <hex>` when the fault address is known, each line flushed. A counting global allocator
//! and an interposed `malloc`/`calloc`/`realloc` count allocations between the handler's `Start` and
//! `BeforeReraise` events; the hook writes the counts to the alloc-count file with raw `write(2)`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

// ---------------------------------------------------------------------------------------------------------------
// Allocation counting.

static COUNTING: AtomicBool = AtomicBool::new(false);
static CRASH_TID: AtomicU64 = AtomicU64::new(0);
static CRASH_THREAD_ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALL_ALLOCS: AtomicU64 = AtomicU64::new(0);
static C_ALLOCS: AtomicU64 = AtomicU64::new(0);
static STARTS: AtomicU64 = AtomicU64::new(0);
static ENDS: AtomicU64 = AtomicU64::new(0);
static COUNT_FD: AtomicI32 = AtomicI32::new(-1);
/// When non-zero, the crash hook lowers `RLIMIT_FSIZE` to this many bytes at crash start and lifts it again
/// before writing the counts: report writes past it fail with `EFBIG` (SIGXFSZ ignored), a stand-in for a full
/// disk (`ENOSPC`) that affects nothing but the report.
static FSIZE_LIMIT: AtomicU64 = AtomicU64::new(0);

fn set_fsize_limit(bytes: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid rlimit pointers; getrlimit/setrlimit are plain system calls (test code, run from the crash
    // hook). The hard limit is kept.
    unsafe {
        libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim);
        lim.rlim_cur = bytes.min(lim.rlim_max);
        libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
    }
}

/// `CLOCK_MONOTONIC` at the hook's `Start`, in nanoseconds.
static START_NS: AtomicU64 = AtomicU64::new(0);
/// Trigger `async_segv`: the `Start` hook sends SIGSEGV to the crashing thread itself (an asynchronous fatal
/// signal arriving at the owner while it handles).
static ASYNC_SEGV: AtomicBool = AtomicBool::new(false);
/// Trigger `spawner`: set by the `ThreadsStopped` hook (the first stop round is over); the hook then waits
/// (bounded) until a thread started after that exists, so the handler's second read of the thread list must find it.
static STOPPED: AtomicBool = AtomicBool::new(false);
static WAIT_FOR_LATE: AtomicBool = AtomicBool::new(false);
/// Trigger `spawner`: ids of threads that started after the first stop round (at most [`LATE_MAX`]).
const LATE_MAX: usize = 8;
static LATE: [AtomicU64; LATE_MAX] = [const { AtomicU64::new(0) }; LATE_MAX];
static LATE_COUNT: AtomicU64 = AtomicU64::new(0);
/// Trigger `spawner`: threads listed by the first read of the thread list that exit after the first stop round
/// (they block signals, so they are not stopped), before the second read. Each exit moves the threads after it
/// one position down the kernel's list, so a second read that started where the first ended would miss the
/// newcomers; more of them than [`LATE_MAX`], so none would be found.
const LEAVERS: usize = 16;
static LEAVER_TIDS: [AtomicU64; LEAVERS] = [const { AtomicU64::new(0) }; LEAVERS];

/// Early syncs of the reserved file (`CrashEvent::EarlySync`) and the thread that made the last one.
static EARLY_SYNCS: AtomicU64 = AtomicU64::new(0);
static EARLY_SYNC_TID: AtomicU64 = AtomicU64::new(0);
/// Trigger `parked`: the `ReportWritten` hook waits (bounded) for the early sync, so that a stopped thread slow to
/// reach it (preempted on a busy machine) is still counted before the process dies.
static WAIT_FOR_EARLY: AtomicBool = AtomicBool::new(false);

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn gettid() -> u64 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

fn count_one(from_c: bool) {
    if COUNTING.load(Ordering::Acquire) {
        ALL_ALLOCS.fetch_add(1, Ordering::AcqRel);
        if from_c {
            C_ALLOCS.fetch_add(1, Ordering::AcqRel);
        }
        if gettid() == CRASH_TID.load(Ordering::Acquire) {
            CRASH_THREAD_ALLOCS.fetch_add(1, Ordering::AcqRel);
        }
    }
}

struct Counting;

// SAFETY: delegates every operation to `System`, only adding counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one(false);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one(false);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one(false);
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

// Interposed C allocator entry points (the executable's definitions win over libc's for every caller in the
// process), delegating to glibc's `__libc_*` implementations.
extern "C" {
    fn __libc_malloc(size: usize) -> *mut libc::c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut libc::c_void;
    fn __libc_realloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void;
}

/// Counting `malloc`.
///
/// # Safety
/// Same contract as `malloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut libc::c_void {
    count_one(true);
    // SAFETY: same contract as malloc.
    unsafe { __libc_malloc(size) }
}

/// Counting `calloc`.
///
/// # Safety
/// Same contract as `calloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut libc::c_void {
    count_one(true);
    // SAFETY: same contract as calloc.
    unsafe { __libc_calloc(n, size) }
}

/// Counting `realloc`.
///
/// # Safety
/// Same contract as `realloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    count_one(true);
    // SAFETY: same contract as realloc.
    unsafe { __libc_realloc(p, size) }
}

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

extern "C" fn hook(event: handler::test_hooks::CrashEvent, tid: u64) {
    use handler::test_hooks::CrashEvent;
    match event {
        CrashEvent::Start => {
            START_NS.store(monotonic_ns(), Ordering::Release);
            CRASH_TID.store(tid, Ordering::Release);
            let limit = FSIZE_LIMIT.load(Ordering::Acquire);
            if limit != 0 {
                set_fsize_limit(limit);
            }
            STARTS.fetch_add(1, Ordering::AcqRel);
            COUNTING.store(true, Ordering::Release);
            if ASYNC_SEGV.swap(false, Ordering::AcqRel) {
                // SAFETY: plain integer arguments; sends SIGSEGV (SI_TKILL) to this very thread.
                unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, libc::SIGSEGV) };
            }
        }
        CrashEvent::ThreadsStopped => {
            STOPPED.store(true, Ordering::Release);
            if WAIT_FOR_LATE.load(Ordering::Acquire) {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
                for _ in 0..2000 {
                    if LATE_COUNT.load(Ordering::Acquire) > 0 && LEAVER_TIDS.iter().all(|t| !thread_exists(t)) {
                        break;
                    }
                    // SAFETY: valid timespec; nanosleep is async-signal-safe.
                    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
                }
            }
        }
        CrashEvent::EarlySync => {
            EARLY_SYNC_TID.store(tid, Ordering::Release);
            EARLY_SYNCS.fetch_add(1, Ordering::AcqRel);
        }
        CrashEvent::ReportWritten => {
            if WAIT_FOR_EARLY.load(Ordering::Acquire) {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
                for _ in 0..2000 {
                    if EARLY_SYNCS.load(Ordering::Acquire) > 0 {
                        break;
                    }
                    // SAFETY: valid timespec; nanosleep is async-signal-safe.
                    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
                }
            }
        }
        // Phase marks, used by the benchmarks only.
        CrashEvent::ThreadsListed | CrashEvent::StopDone => {}
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
                (b"c_allocs ", C_ALLOCS.load(Ordering::Acquire)),
                (b"starts ", STARTS.load(Ordering::Acquire)),
                (b"ends ", ENDS.load(Ordering::Acquire)),
                (b"handler_tid ", tid),
                (b"crash_us ", monotonic_ns().saturating_sub(START_NS.load(Ordering::Acquire)) / 1000),
                (b"ticks ", TICKS.load(Ordering::Acquire)),
                (b"early_syncs ", EARLY_SYNCS.load(Ordering::Acquire)),
                (b"early_sync_tid ", EARLY_SYNC_TID.load(Ordering::Acquire)),
            ] {
                raw_write(fd, key);
                raw_write(fd, itoa(v, &mut b));
                raw_write(fd, b"\n");
            }
            for t in &LATE {
                let t = t.load(Ordering::Acquire);
                if t != 0 {
                    raw_write(fd, b"late_tid ");
                    raw_write(fd, itoa(t, &mut b));
                    raw_write(fd, b"\n");
                }
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

#[inline(never)]
fn trigger_null_deref() {
    say(&format!("FAULT_TID {}", gettid()));
    say("FAULT_ADDR 0");
    black_box(read_at(black_box(0)));
}

#[inline(never)]
fn trigger_ro_write() {
    // SAFETY: anonymous read-only mapping; checked below.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert_ne!(p, libc::MAP_FAILED);
    say(&format!("FAULT_TID {}", gettid()));
    say(&format!("FAULT_ADDR {:x}", p as usize));
    write_at(black_box(p as usize));
}

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
    // Two pages of a zero-length file: touching them raises SIGBUS (BUS_ADRERR).
    // SAFETY: shared read mapping of our own file; checked below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
    assert_ne!(p, libc::MAP_FAILED);
    say(&format!("FAULT_TID {}", gettid()));
    say(&format!("FAULT_ADDR {:x}", p as usize));
    black_box(read_at(black_box(p as usize)));
}

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

/// `brk #1`: the trap Rust's `core::intrinsics::abort` and Swift's runtime failures use on arm64 (SIGTRAP).
#[cfg(target_arch = "aarch64")]
#[inline(never)]
fn trigger_brk() {
    say(&format!("FAULT_TID {}", gettid()));
    // SAFETY: not sound by design: a breakpoint trap.
    unsafe {
        std::arch::asm!("brk #1", options(nostack));
    }
}

// A true leaf: no prologue, so no frame record; at the fault its caller is only in LR (x30) and x29 still points at
// the caller's record. (A Rust function would get a frame record: the build forces frame pointers everywhere.)
#[cfg(target_arch = "aarch64")]
std::arch::global_asm!(
    ".text",
    ".globl crash_client_leaf_load",
    ".type crash_client_leaf_load, %function",
    ".p2align 2",
    "crash_client_leaf_load:",
    "    ldr x0, [x0]",
    "    ret",
    ".size crash_client_leaf_load, . - crash_client_leaf_load",
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

#[inline(never)]
fn trigger_sigfpe() {
    say(&format!("FAULT_TID {}", gettid()));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: not sound by design: integer division by zero raises #DE (SIGFPE, FPE_INTDIV).
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
    // arm64 integer division by zero does not trap (it returns 0); send the signal instead.
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

/// `cxx_*` triggers: loads `<run dir>/../libcxxthrow.so` (tests/c/cxx_throw.cpp, built by the test with `c++`)
/// before install, so the process has a C++ runtime when install looks for `std::set_terminate`.
fn load_cxx_library(dir: &std::path::Path) -> *mut libc::c_void {
    use std::os::unix::ffi::OsStrExt;
    let lib = dir.parent().expect("run dir").join("libcxxthrow.so");
    let c = std::ffi::CString::new(lib.as_os_str().as_bytes()).expect("path");
    // SAFETY: a NUL-terminated path; the handle stays open until the process dies.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!h.is_null(), "dlopen {}", lib.display());
    h
}

/// A thread of the C++ library throws an exception nothing catches (`std::runtime_error` when `std_exception`,
/// else a type not derived from `std::exception`); this thread waits in `pthread_join`. The thrower prints its tid.
#[inline(never)]
fn trigger_cxx(lib: *mut libc::c_void, std_exception: bool) {
    // SAFETY: a NUL-terminated symbol name in a valid handle.
    let f = unsafe { libc::dlsym(lib, c"cxx_throw_in_thread".as_ptr()) };
    assert!(!f.is_null(), "cxx_throw_in_thread");
    // SAFETY: tests/c/cxx_throw.cpp defines `extern "C" void cxx_throw_in_thread(int)`.
    let f: extern "C" fn(i32) = unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn(i32)>(f) };
    f(i32::from(std_exception));
}

/// A failed C `assert()`: glibc's `__assert_fail`, which the `assert` macro expands to (glibc `<assert.h>`), with
/// the text a C file would pass. glibc keeps the message in `__abort_msg` and aborts.
#[inline(never)]
fn trigger_c_assert() {
    extern "C" {
        fn __assert_fail(
            assertion: *const libc::c_char,
            file: *const libc::c_char,
            line: u32,
            function: *const libc::c_char,
        ) -> !;
    }
    say(&format!("FAULT_TID {}", gettid()));
    // SAFETY: NUL-terminated strings; `__assert_fail` prints, records the message and aborts.
    unsafe { __assert_fail(c"widget != NULL".as_ptr(), c"widgets.c".as_ptr(), 42, c"widget_open".as_ptr()) }
}

/// `abort()` after the app said what it was doing (`handler::set_crash_reason`), with a user key/value set.
#[inline(never)]
fn trigger_app_reason() {
    assert!(handler::set_crash_reason("saving document 42 to disk"));
    handler::user_values::set("screen", "editor").expect("set a user value");
    say(&format!("FAULT_TID {}", gettid()));
    call_abort();
}

/// A Rust panic that kills the process. In the ordinary (`panic = "unwind"`) build of this client, `panic = "abort"`
/// is imitated: a hook runs the default hook (prints the message), then aborts, exactly what the `panic_abort`
/// runtime does after the hook. In the `panic-abort` profile's build (Cargo.toml; `cfg(panic = "abort")`) nothing is
/// imitated: the runtime itself aborts after the hooks.
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

/// A panic inside an `extern "C"` function, which cannot unwind: with `panic = "unwind"` the panic unwinds to the
/// function's boundary, where the runtime panics again (`panic in a function that cannot unwind`, a panic that
/// cannot unwind) and aborts; with `panic = "abort"` the runtime aborts at the first panic. No hook is imitated.
#[inline(never)]
fn trigger_panic_extern_c() {
    say(&format!("FAULT_TID {}", gettid()));
    say(&format!("PANIC_AT {}:{}:9", file!(), line!() + 4));
    #[inline(never)]
    extern "C" fn panics_in_c_abi() {
        black_box(0);
        panic!("deliberate panic in an extern \"C\" function");
    }
    panics_in_c_abi();
}

/// Loads `<run dir>/libcrashme.so` (built by the test, after install) and calls its `crashme_write(NULL)`, which
/// faults inside the library: frame 0 is in an image the install snapshot never saw.
#[inline(never)]
fn trigger_dlopen(dir: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let lib = dir.parent().expect("run dir").join("libcrashme.so");
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

/// A C-style thread (raw `pthread_create`, 256 KiB stack, no alternate signal stack set by anyone but the handler's
/// `pthread_create` wrapper) that overflows its stack; joined, so the process dies while it runs.
fn pthread_overflow() {
    // SAFETY: attribute object initialised before use and destroyed after; valid out-pointers; an entry point with
    // the right signature.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_attr_init(&mut attr), 0);
        assert_eq!(libc::pthread_attr_setstacksize(&mut attr, 256 * 1024), 0);
        let mut t: libc::pthread_t = 0;
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
// Faults the process survives, and signals around the crash (issue 13, "Faults survived").

/// Counts the profiler timer's signals.
static TICKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_tick(_sig: libc::c_int, _info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {
    // Touch some of the (alternate) stack, as a sampling profiler's handler does.
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

/// One page the "runtime" (a first-chance handler, or a previous handler) knows how to recover a fault on: it is
/// mapped `PROT_NONE`, and a fault in it is fixed by making it readable (as a GC's write barrier or a wasm
/// runtime's lazily committed memory does).
static GUARD_PAGE: AtomicU64 = AtomicU64::new(0);
static RECOVERIES: AtomicU64 = AtomicU64::new(0);

fn map_guard_page() -> usize {
    // SAFETY: anonymous PROT_NONE mapping; checked below.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert_ne!(p, libc::MAP_FAILED);
    GUARD_PAGE.store(p as u64, Ordering::Release);
    p as usize
}

/// Async-signal-safe: when `info` is a fault inside the guard page, make the page readable and say so.
fn recover_guard_page_fault(info: *mut libc::siginfo_t) -> bool {
    let page = GUARD_PAGE.load(Ordering::Acquire);
    // SAFETY: `info` is the kernel's siginfo (or null).
    let Some(i) = (unsafe { info.as_ref() }) else { return false };
    // SAFETY: si_addr is readable in every siginfo the kernel builds for a fault.
    let addr = unsafe { i.si_addr() } as u64;
    if page == 0 || i.si_code <= 0 || addr < page || addr >= page + 4096 {
        return false;
    }
    // SAFETY: changing the protection of our own mapping; mprotect is a plain system call.
    unsafe { libc::mprotect(page as *mut libc::c_void, 4096, libc::PROT_READ) };
    RECOVERIES.fetch_add(1, Ordering::AcqRel);
    true
}

static FIRST_CHANCE_CALLS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn first_chance(_sig: libc::c_int, info: *mut libc::siginfo_t, _uc: *mut libc::c_void) -> bool {
    FIRST_CHANCE_CALLS.fetch_add(1, Ordering::AcqRel);
    recover_guard_page_fault(info)
}

/// A runtime's SIGSEGV handler installed before the crash handler: it recovers faults in its guard page and
/// returns; for any other fault it gives up the way most handlers do (default action back, return, re-fault).
extern "C" fn runtime_segv(_sig: libc::c_int, info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {
    if recover_guard_page_fault(info) {
        return;
    }
    // SAFETY: a zeroed sigaction with SIG_DFL is valid.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
    }
}

fn install_runtime_handler() {
    // SAFETY: valid sigaction structures; the handler has the SA_SIGINFO signature.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = runtime_segv as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut()), 0);
    }
}

/// Reads the guard page (recovered by the runtime), then crashes for real.
#[inline(never)]
fn trigger_recovered_then_real() {
    let page = map_guard_page();
    let v = read_at(black_box(page));
    assert_eq!(RECOVERIES.load(Ordering::Acquire), 1, "the fault was recovered");
    say(&format!("RECOVERED {v} {page:x}"));
    trigger_null_deref();
}

/// Blocks every signal on the calling thread.
fn block_all_signals() {
    // SAFETY: valid sigset; pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn unblock_all_signals() {
    // SAFETY: valid sigset; pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// A thread that blocks every signal (and so never answers the stop signal).
fn spawn_blocking_thread() {
    let started = Arc::new(Barrier::new(2));
    let s = Arc::clone(&started);
    std::thread::Builder::new()
        .name("blocker".into())
        .spawn(move || {
            block_all_signals();
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

/// Two threads fault at once with different signals (SIGSEGV and SIGILL).
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

/// Whether the thread whose id `tid` holds (0: none) still exists (`tgkill` with signal 0: `ESRCH` once it is
/// gone). Allocates nothing, so the crash hook can call it.
fn thread_exists(tid: &AtomicU64) -> bool {
    let t = tid.load(Ordering::Acquire);
    // SAFETY: plain integer arguments; signal 0 sends nothing, it only checks that the thread exists.
    t != 0 && unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), t as libc::pid_t, 0) } == 0
}

/// [`LEAVERS`] threads that block every signal and exit after the handler's first stop round, then a thread that
/// keeps creating threads, with every signal blocked (so it is not stopped and goes on creating threads while the
/// crash is handled). Each new thread unblocks its signals; one that starts after the handler's first stop round
/// records its id and parks (at most [`LATE_MAX`]; then the creator stops); earlier ones exit at once.
fn spawn_thread_creator() {
    let listed = Arc::new(Barrier::new(LEAVERS + 1));
    for slot in &LEAVER_TIDS {
        let l = Arc::clone(&listed);
        std::thread::Builder::new()
            .name("leaver".into())
            .spawn(move || {
                block_all_signals();
                slot.store(gettid(), Ordering::Release);
                l.wait();
                while !STOPPED.load(Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                // Ends the thread without its runtime's exit path, which frees memory: a stopped thread may hold
                // the allocator's lock until the crash is handled, and this thread must be gone before that.
                // SAFETY: `exit` ends only this thread; nothing on its stack is referenced elsewhere (its stack and
                // thread record are leaked, in a process about to die).
                unsafe { libc::syscall(libc::SYS_exit, 0) };
            })
            .expect("spawn");
    }
    listed.wait();
    let started = Arc::new(Barrier::new(2));
    let s = Arc::clone(&started);
    std::thread::Builder::new()
        .name("creator".into())
        .spawn(move || {
            block_all_signals();
            say(&format!("THREAD {}", gettid()));
            s.wait();
            while (LATE_COUNT.load(Ordering::Acquire) as usize) < LATE_MAX {
                let r = std::thread::Builder::new().name("newcomer".into()).spawn(|| {
                    unblock_all_signals();
                    if !STOPPED.load(Ordering::Acquire) {
                        return;
                    }
                    let i = LATE_COUNT.fetch_add(1, Ordering::AcqRel) as usize;
                    if let Some(slot) = LATE.get(i) {
                        slot.store(gettid(), Ordering::Release);
                    }
                    loop {
                        std::thread::park();
                    }
                });
                if let Ok(h) = r {
                    drop(h);
                }
            }
            loop {
                std::thread::park();
            }
        })
        .expect("spawn");
    started.wait();
    std::thread::sleep(std::time::Duration::from_millis(10));
}

/// `vfork` in one assembly block whose child loads from address 0 at once: the child runs on the parent's stack
/// and must touch none of it (libc's `vfork` wrapper returning in the child would clobber the parent's frames). The
/// child dies in the crash handler; the parent gets the child's pid (or a negative errno).
#[inline(never)]
fn vfork_child_faults() -> i64 {
    let r: i64;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: vfork suspends this thread until the child dies; the child only executes the faulting load (its
    // signal frames go to the alternate stack), so this thread's stack and registers are as the kernel returns.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rax, qword ptr [0]",
            "2:",
            inlateout("rax") libc::SYS_vfork => r,
            out("rcx") _,
            out("r11") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above; `clone(CLONE_VM | CLONE_VFORK | SIGCHLD, 0, ...)` is vfork (arm64 has no vfork syscall).
    unsafe {
        std::arch::asm!(
            "svc #0",
            "cbnz x0, 2f",
            "ldr x0, [x0]",
            "2:",
            inlateout("x0") (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as i64 => r,
            in("x1") 0usize,
            in("x2") 0usize,
            in("x3") 0usize,
            in("x4") 0usize,
            in("x8") libc::SYS_clone,
            options(nostack),
        );
    }
    r
}

/// A `vfork` child (sharing this process's memory, the crash handler's state included) crashes; after it died,
/// this process crashes too and must still get its report.
#[inline(never)]
fn trigger_vfork_child_then_parent() {
    let pid = vfork_child_faults();
    assert!(pid > 0, "vfork");
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    assert!(libc::WIFSIGNALED(status), "the vfork child died by a signal: {status:#x}");
    say(&format!("CHILD {pid} {}", libc::WTERMSIG(status)));
    trigger_null_deref();
}

/// Hang detection's stalls (`hang`): each blocks the event loop in its own frame without `idle()` first.
const STALL: std::time::Duration = std::time::Duration::from_millis(1500);
/// The hang threshold of `hang`: well above a loaded machine's (or qemu's) scheduling hiccups, well below STALL.
const HANG_THRESHOLD: std::time::Duration = std::time::Duration::from_millis(500);

/// A stall asleep (a blocking call in the event loop).
#[inline(never)]
fn stall_asleep() {
    std::thread::sleep(black_box(STALL));
    black_box(());
}

/// A stall busy (a long computation in the event loop).
#[inline(never)]
fn stall_busy() {
    let until = std::time::Instant::now() + STALL;
    let mut x = 0u64;
    while std::time::Instant::now() < until {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    black_box(x);
}

/// A stall longer than the slow-frame threshold, shorter than the hang threshold.
#[inline(never)]
fn stall_short() {
    std::thread::sleep(black_box(std::time::Duration::from_millis(250)));
    black_box(());
}

/// `n` turns of an event loop that waits 5 ms for each event (marked idle while it waits).
#[inline(never)]
fn event_loop(n: u32) {
    for _ in 0..n {
        handler::hangs::idle();
        std::thread::sleep(std::time::Duration::from_millis(5));
        handler::hangs::heartbeat();
        black_box(n);
    }
}

/// Trigger `hang` (no crash): hang detection on this thread (threshold HANG_THRESHOLD, slow frames at 150 ms);
/// an event loop with two stalls of STALL (`stall_asleep`, `stall_busy`), one short stall, and a long idle wait
/// (not a hang); then stops the watchdog and exits 0. Expected: exactly two hang reports, one per stall, each with
/// its stall function on this thread.
fn trigger_hangs() -> ! {
    let config = handler::hangs::HangConfig {
        threshold: HANG_THRESHOLD,
        slow_frame: Some(std::time::Duration::from_millis(150)),
        ..handler::hangs::HangConfig::default()
    };
    handler::hangs::start(&config).expect("start hang detection");
    event_loop(40);
    handler::hangs::heartbeat();
    stall_asleep();
    event_loop(40);
    handler::hangs::heartbeat();
    stall_busy();
    event_loop(40);
    handler::hangs::heartbeat();
    stall_short();
    event_loop(40);
    // Waiting for an event that takes long to come is not a hang.
    handler::hangs::idle();
    std::thread::sleep(STALL);
    handler::hangs::heartbeat();
    event_loop(10);
    handler::hangs::stop();
    let s = handler::hangs::stats();
    say(&format!("HANGS {}", s.hangs));
    say(&format!("SLOW_FRAMES {}", s.slow_frames));
    say(&format!("REPORT_FAILURES {}", s.report_failures));
    std::process::exit(0)
}

fn run_trigger(trigger: &str, dir: &std::path::Path) {
    match trigger {
        "hang" => trigger_hangs(),
        "null_deref" => trigger_null_deref(),
        "ro_write" => trigger_ro_write(),
        "sigbus" => trigger_sigbus(dir),
        "sigill" => trigger_sigill(),
        "sigfpe" => trigger_sigfpe(),
        #[cfg(target_arch = "aarch64")]
        "brk" => trigger_brk(),
        #[cfg(target_arch = "aarch64")]
        "leaf" => trigger_leaf(),
        "abort" => trigger_abort(),
        "dlopen" => trigger_dlopen(dir),
        "panic" => trigger_panic(),
        "panic_extern_c" => trigger_panic_extern_c(),
        "c_assert" => trigger_c_assert(),
        "app_reason" => trigger_app_reason(),
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
            let mut t: libc::pthread_t = 0;
            // SAFETY: valid out-pointer, default attributes, an entry point with the right signature.
            let r = unsafe { libc::pthread_create(&mut t, std::ptr::null(), pthread_entry, std::ptr::null_mut()) };
            assert_eq!(r, 0);
            // SAFETY: joining the thread created above.
            unsafe { libc::pthread_join(t, std::ptr::null_mut()) };
        }
        "threads200" => {
            park_threads(200);
            trigger_null_deref();
        }
        "parked" => {
            WAIT_FOR_EARLY.store(true, Ordering::Release);
            park_threads(2);
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
        // A full disk at crash time. `disk_full_in_head`: the report file may grow to 24 bytes only (the file header
        // and 8 bytes of META's section header); 200 parked threads make the report larger than the writer's 64 KiB
        // buffer, so the failure comes in the middle of encoding, not only at the final flush.
        // `disk_full_after_head`: 4 KiB, past META and EXCEPTION; 50 threads make a report of some 20 KiB, which
        // fails at the final flush.
        "disk_full_in_head" | "disk_full_after_head" => {
            // SAFETY: ignoring SIGXFSZ, so a write past RLIMIT_FSIZE fails with EFBIG instead of killing.
            unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
            let in_head = trigger == "disk_full_in_head";
            park_threads(if in_head { 200 } else { 50 });
            FSIZE_LIMIT.store(if in_head { 24 } else { 4096 }, Ordering::Release);
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
            // stdout is still open; the line is written from a preallocated buffer (no descriptor needed).
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
        "recovering_prev" => trigger_recovered_then_real(),
        "async_segv" => {
            ASYNC_SEGV.store(true, Ordering::Release);
            trigger_null_deref();
        }
        "blocked_thread" => {
            spawn_blocking_thread();
            trigger_null_deref();
        }
        "two_signals" => two_signals(),
        "spawner" => {
            WAIT_FOR_LATE.store(true, Ordering::Release);
            spawn_thread_creator();
            trigger_null_deref();
        }
        "vfork_crash" => trigger_vfork_child_then_parent(),
        "uninstall_then_segv" => {
            // After uninstall the previous (Rust std) action is back: the fault kills the process with no report,
            // and a fresh install works again.
            handler::uninstall().expect("uninstall");
            assert_eq!(handler::uninstall(), Err(handler::InstallError::NotInstalled));
            handler::install(&handler::Config::new(dir)).expect("install again");
            handler::uninstall().expect("uninstall again");
            say("UNINSTALLED");
            black_box(read_at(black_box(0)));
        }
        "refresh_images" => {
            let n = handler::refresh_images().expect("refresh");
            say(&format!("IMAGES {n}"));
            std::process::exit(0);
        }
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
    if trigger == "recovering_prev" {
        // The runtime's handler comes first; the crash handler chains to it.
        install_runtime_handler();
    }
    let cxx = trigger.starts_with("cxx_").then(|| load_cxx_library(&dir));
    let mut config = handler::Config::new(&dir);
    config.app_id = "crash-client".into();
    // The reserved report file (the default, set here so the crash matrix runs through it whatever the default).
    config.reserved_report_bytes = 64 * 1024;
    if let Err(e) = handler::install(&config) {
        eprintln!("install failed: {e}");
        std::process::exit(3);
    }
    // A second install is refused and changes nothing.
    assert_eq!(handler::install(&config), Err(handler::InstallError::AlreadyInstalled));
    // The report file install reserved (its inode: the first report must be written into it).
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().ends_with(".reserved") {
            use std::os::unix::fs::MetadataExt;
            say(&format!("RESERVED {}", e.metadata().map_or(0, |m| m.ino())));
        }
    }
    say(&format!("MAIN_TID {}", gettid()));
    // How this binary was built: the `panic-abort` profile's build says `abort` (the test checks it ran that one).
    say(if cfg!(panic = "abort") { "PANIC_STRATEGY abort" } else { "PANIC_STRATEGY unwind" });
    match (trigger.as_str(), cxx) {
        ("cxx_runtime_error", Some(lib)) => trigger_cxx(lib, true),
        ("cxx_non_std", Some(lib)) => trigger_cxx(lib, false),
        _ => run_trigger(trigger, &dir),
    }
    say("NO_CRASH");
    std::process::exit(4);
}
