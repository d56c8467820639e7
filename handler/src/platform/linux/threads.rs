//! Every new thread gets an alternate signal stack and its stack bounds recorded: a `pthread_create` wrapper.
//!
//! Runs at install and at thread start/exit, never after a fault (it allocates and calls `dlsym`).
//!
//! **Why.** A stack overflow faults on the guard page with no stack left to run a handler on; the kernel can
//! deliver SIGSEGV only on an alternate signal stack (`sigaltstack(2)`), which is per thread and *not* inherited
//! by new threads (`clone(2)` with `CLONE_VM` clears it). Rust `std` threads get a small one from std; threads made
//! with plain `pthread_create` (C and C++ code, every thread of a host that loads us as a library) have none, so
//! their overflow killed the process without a report.
//!
//! **How** (the way Crashpad's `client/pthread_create_linux.cc` does it on Android): this module defines the
//! symbol `pthread_create`. In an executable (or a library loaded before libc) that definition interposes libc's
//! for every caller in the process, Rust std's `thread::spawn` included. The wrapper calls the real
//! `pthread_create` (found once with `dlsym(RTLD_NEXT, "pthread_create")`, at install or at the first call) with a
//! trampoline that, on the new thread, before the start routine runs:
//! 1. unless the thread already has an alternate stack (`sigaltstack(NULL, &old)` not `SS_DISABLE`), takes one of
//!    `Config::alt_stack_size` bytes from the pool of exited threads' stacks ([`StackPool`]) or maps a new one
//!    (`mmap`, `MAP_NORESERVE`, plus a `PROT_NONE` guard page below) and writes its top
//!    `Config::alt_stack_prefault_bytes` (so a crash's stop signal takes no page faults on it), and installs it;
//! 2. records the thread's stack `[lo, hi)` from `pthread_getattr_np` in [`crate::crash::stack_bounds`], which the
//!    crash path reads lock-free to bound each stack walk;
//! 3. sets a pthread key whose destructor, at thread exit, removes the bounds and hands the alternate stack to the
//!    pool, or unmaps it when the pool is full (after disabling it, if it is still the thread's current one; never
//!    while the thread runs on it).
//!
//! **The pool.** Writing a new stack's top pages costs two page faults at thread start and, more, the `munmap` of
//! populated pages at thread exit: spawning and joining a thread took about 25 µs more with them than without (a
//! temporary test, not in the tree: 256 threads, release build, the development machine; BENCHMARKS.md). Kept in
//! the pool, an exited thread's stack serves the next thread with no `mmap`, `mprotect`, page fault or `munmap`.
//! At most [`POOL_SLOTS`] stacks are kept, each with the pages that were ever touched on it still resident: the
//! prefault (8 KiB by default) and whatever signal handlers used, up to `alt_stack_size` (32 x 128 KiB = 4 MiB
//! at most at the defaults, 256 KiB when only the prefault was touched). `uninstall` empties the pool and exiting
//! threads then unmap theirs (a thread exiting at that very moment may still leave its stack in the pool, where
//! the next install's threads find it).
//! An application that installs our stack again after its thread's exit destructor ran (a saved `stack_t`
//! restored late) would now share it with another thread instead of faulting on an unmapped stack.
//!
//! **Interaction with code that sets its own alternate stack.** A thread that already has one when the trampoline
//! runs keeps it (we add none). A start routine that installs its own later replaces ours: the kernel then uses
//! theirs, ours stays mapped (unused) until the thread exits, and the destructor frees ours without touching
//! theirs. Rust std's thread start finds ours and does not map its own (std only adds one when none is set).
//! Whoever's stack is current, our handler switches to its own crash stack at once, so any size std or the app
//! chose is enough.
//!
//! **Not covered.** Threads started before `install` (including the process's existing std threads: they keep
//! std's stack; their bounds are not recorded); threads created by glibc internally (`timer_create` with
//! `SIGEV_THREAD`, POSIX AIO), which call glibc's internal entry point, not the `pthread_create` symbol; threads made
//! with raw `clone`; a library of ours that is `dlopen`ed (`RTLD_LOCAL` or not) after libc: its definition does not
//! interpose earlier lookups, so only threads the library itself creates are wrapped; statically linked programs
//! (`crt-static`, musl): the wrapper is not built there (`dlsym(RTLD_NEXT)` has no next object); Android (bionic):
//! not built there either (not tried on a device; Crashpad's wrapper shows it can be done); a stack overflow in
//! a TLS or pthread-key destructor that runs after ours at thread exit. After `uninstall`, new threads get no
//! alternate stack; the ones that have ours keep it until they exit.
#![allow(unsafe_code)]
// Without the wrapper (bionic, musl, static builds: see `WRAPPED`) the trampoline and what only it calls are unused.
#![cfg_attr(not(all(target_env = "gnu", not(target_feature = "crt-static"))), allow(dead_code))]

use crate::crash::stack_bounds;
use crate::error::InstallError;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Signature of `pthread_create` (POSIX; glibc `<pthread.h>`), as the `libc` crate declares it.
type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> c_int;

/// The real `pthread_create` (0: not resolved yet).
static REAL: AtomicUsize = AtomicUsize::new(0);
/// Size in bytes of the alternate stack each new thread gets; 0 while not installed (new threads are passed
/// through untouched).
static ALT_STACK_SIZE: AtomicUsize = AtomicUsize::new(0);
/// Bytes at the top of each new alternate stack written before it is installed (`Config::alt_stack_prefault_bytes`).
static PREFAULT_BYTES: AtomicUsize = AtomicUsize::new(0);
/// An atomic `pthread_key_t`: `unsigned int` in glibc and musl, `int` in bionic.
#[cfg(not(target_os = "android"))]
type AtomicKey = core::sync::atomic::AtomicU32;
#[cfg(target_os = "android")]
type AtomicKey = core::sync::atomic::AtomicI32;
/// The pthread key whose destructor frees a thread's extras; valid once `KEY_READY` is set.
static KEY: AtomicKey = AtomicKey::new(0);
static KEY_READY: AtomicBool = AtomicBool::new(false);

/// Most alternate stacks the pool keeps.
pub const POOL_SLOTS: usize = 32;

/// Alternate stacks of exited threads, kept for the next threads: lock-free slots (thread start and exit may run
/// concurrently on any thread, and a `fork` may come at any time, so no lock), each 0 or one mapping as
/// `start | pages`: its page-aligned start (the guard page) with its length in pages in the low bits.
pub struct StackPool {
    slots: [AtomicUsize; POOL_SLOTS],
}

impl StackPool {
    /// An empty pool.
    pub const fn new() -> Self {
        StackPool { slots: [const { AtomicUsize::new(0) }; POOL_SLOTS] }
    }

    /// Keeps the mapping `[map, map + len)` (page-aligned, guard page first); `false` when the pool is full or the
    /// mapping cannot be kept (its length in pages does not fit below one page), and the caller unmaps it.
    pub fn put(&self, map: usize, len: usize) -> bool {
        let page = crate::prealloc::page_size();
        let pages = len / page;
        if map % page != 0 || len % page != 0 || pages == 0 || pages >= page {
            return false;
        }
        let entry = map | pages;
        self.slots.iter().any(|s| s.compare_exchange(0, entry, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    }

    /// A kept mapping of exactly `len` bytes (its start), taken out of the pool; kept mappings of another length
    /// (from an install with another `alt_stack_size`) met on the way are unmapped.
    pub fn take(&self, len: usize) -> Option<usize> {
        for s in &self.slots {
            let e = s.load(Ordering::Relaxed);
            if e == 0 || s.compare_exchange(e, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            let (map, bytes) = Self::entry(e);
            if bytes == len {
                return Some(map);
            }
            // SAFETY: a mapping handed to the pool by `put`, now ours alone (taken out of its slot).
            unsafe { libc::munmap(map as *mut c_void, bytes) };
        }
        None
    }

    /// Unmaps every kept mapping.
    pub fn drain(&self) {
        for s in &self.slots {
            let e = s.swap(0, Ordering::AcqRel);
            if e != 0 {
                let (map, bytes) = Self::entry(e);
                // SAFETY: a mapping handed to the pool by `put`, now ours alone (taken out of its slot).
                unsafe { libc::munmap(map as *mut c_void, bytes) };
            }
        }
    }

    /// A slot's value as `(start, length in bytes)`.
    fn entry(e: usize) -> (usize, usize) {
        let page = crate::prealloc::page_size();
        (e & !(page - 1), (e & (page - 1)).saturating_mul(page))
    }
}

impl Default for StackPool {
    fn default() -> Self {
        StackPool::new()
    }
}

/// The alternate stacks of exited wrapped threads.
static POOL: StackPool = StackPool::new();

/// What the trampoline hands the new thread.
struct Start {
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
}

/// What a wrapped thread owns until it exits (the pthread key's value).
struct Extras {
    /// Start of our alternate-stack mapping (its guard page) and its length in bytes; `len == 0`: none mapped.
    map: usize,
    len: usize,
    /// `ss_sp` we installed.
    ss_sp: usize,
    tid: u64,
}

/// The real `pthread_create`, resolved once with `dlsym(RTLD_NEXT, ...)` (install calls this first, so threads
/// created later never resolve it themselves; `dlsym` takes the loader lock, which is fine outside a handler).
fn real() -> Option<PthreadCreate> {
    let mut p = REAL.load(Ordering::Acquire);
    if p == 0 {
        // SAFETY: `dlsym` with RTLD_NEXT and a NUL-terminated name; the result is checked.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) } as usize;
        // Never ourselves (that would recurse forever), e.g. if the lookup order put this definition next.
        if p == 0 || p == pthread_create as *const () as usize {
            return None;
        }
        REAL.store(p, Ordering::Release);
    }
    // SAFETY: `p` is the address of libc's `pthread_create` (or the next interposer's), which has this signature.
    Some(unsafe { core::mem::transmute::<usize, PthreadCreate>(p) })
}

/// Whether this build interposes `pthread_create` (dynamically linked glibc only; see the module docs).
pub const WRAPPED: bool = cfg!(all(target_env = "gnu", not(target_feature = "crt-static")));

/// Install time: records the calling thread's stack bounds; where [`WRAPPED`], resolves the real `pthread_create`,
/// creates the pthread key, and from now on gives every new thread an alternate stack of `alt_stack_size` bytes
/// whose top `prefault_bytes` are written before it is installed.
///
/// # Errors
/// [`InstallError::Os`] when the real `pthread_create` cannot be found or the key cannot be created.
pub fn enable(alt_stack_size: usize, prefault_bytes: usize) -> Result<(), InstallError> {
    record_own_bounds();
    if !WRAPPED {
        return Ok(());
    }
    if real().is_none() {
        return Err(InstallError::Os { what: "dlsym(RTLD_NEXT, \"pthread_create\")", errno: libc::ENOENT });
    }
    if !KEY_READY.load(Ordering::Acquire) {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: valid out-pointer; the destructor has the required signature.
        let r = unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) };
        if r != 0 {
            return Err(InstallError::Os { what: "pthread_key_create", errno: r });
        }
        KEY.store(key, Ordering::Release);
        KEY_READY.store(true, Ordering::Release);
    }
    PREFAULT_BYTES.store(prefault_bytes, Ordering::Release);
    ALT_STACK_SIZE.store(alt_stack_size, Ordering::Release);
    Ok(())
}

/// Uninstall time: new threads are no longer given an alternate stack, and the pool's stacks are unmapped.
/// Threads that have one keep it until they exit (then it is unmapped); recorded bounds stay until then.
pub fn disable() {
    ALT_STACK_SIZE.store(0, Ordering::Release);
    POOL.drain();
}

/// Records the calling thread's stack `[lo, hi)`. Returns whether it was recorded.
///
/// Threads other than the main thread: `pthread_getattr_np` (their stack was mapped whole by `pthread_create`, so
/// it is recorded as mapped). The main thread: [`main_thread_bounds`], because for it glibc's `pthread_getattr_np`
/// reads and parses all of `/proc/self/maps`, which took about 2.7 ms of a 5.4 ms install with 300 libraries loaded
/// (1,775 mappings; `perf` on the benchmark's install probe, BENCHMARKS.md).
fn record_own_bounds() -> bool {
    let tid = crate::platform::linux::crash::sys::gettid();
    let is_main = u64::try_from(crate::platform::linux::crash::sys::getpid()).is_ok_and(|pid| pid == tid);
    if is_main {
        let here = 0u8;
        return main_thread_bounds(core::ptr::addr_of!(here) as u64)
            .is_some_and(|(lo, hi)| stack_bounds::record(tid, lo, hi, false));
    }
    // SAFETY: the attribute object is filled by pthread_getattr_np and destroyed after use; valid out-pointers.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return false;
        }
        let mut addr: *mut c_void = core::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        let lo = addr as u64;
        ok && lo.checked_add(size as u64).is_some_and(|hi| stack_bounds::record(tid, lo, hi, true))
    }
}

/// The main thread's stack `[lo, hi)` as glibc's `pthread_getattr_np` defines it, without reading
/// `/proc/self/maps`: `hi` is the end of the mapped range that holds `sp` (the top of the `[stack]` mapping; found
/// with `mincore`, which fails with `ENOMEM` when a page of its range is unmapped: a doubling search upwards, then
/// a binary search, each step checking every page between the highest known mapped one and its probe, about 2 ×
/// log2(pages above `sp`) system calls), and `lo` is `hi` minus `RLIMIT_STACK` (the most the stack may grow
/// to; 0 when unlimited, where glibc would stop at the mapping below). Not recorded as mapped: the stack grows on
/// demand, so only the crash path's fault-proof reader reads it. `None` when `sp`'s own page is not mapped.
pub(crate) fn main_thread_bounds(sp: u64) -> Option<(u64, u64)> {
    let page = crate::prealloc::page_size() as u64;
    let base = sp & !(page - 1);
    // Whether every page from `from` to `to` (in pages above `base`, both included) is mapped. A range, not one
    // page: a single probe could land beyond a hole (in the next mapping up) and the search would skip the hole.
    let mapped = |from: u64, to: u64| -> bool {
        let mut vec = [0u8; 256];
        let mut at = from;
        while at <= to {
            let n = (to - at).saturating_add(1).min(vec.len() as u64);
            let Some(addr) = at.checked_mul(page).and_then(|o| base.checked_add(o)) else { return false };
            // SAFETY: `n` pages from a page-aligned address; `vec` receives one byte per page (`n` <= its
            // length). `mincore` only reports (ENOMEM when a page is unmapped) and changes nothing.
            if unsafe { libc::mincore(addr as *mut c_void, (n * page) as usize, vec.as_mut_ptr()) } != 0 {
                return false;
            }
            at = at.saturating_add(n);
        }
        true
    };
    let hi = base.checked_add(first_unmapped_page(mapped)?.checked_mul(page)?)?;
    // SAFETY: valid out-pointer.
    let mut rl: libc::rlimit = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let limit = if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) } == 0 && rl.rlim_cur != libc::RLIM_INFINITY {
        (rl.rlim_cur as u64) & !(page - 1)
    } else {
        u64::MAX
    };
    Some((hi.saturating_sub(limit), hi))
}

/// The first unmapped page above page 0, given `mapped(from, to)`: whether every page from `from` to `to` (both
/// included) is mapped. A doubling search, then a binary search, each step asking only about the pages between the
/// highest page known to be mapped and its probe, so every page below the answer was asked about. `None` when page
/// 0 is not mapped or the search overflows. Pure.
fn first_unmapped_page(mapped: impl Fn(u64, u64) -> bool) -> Option<u64> {
    if !mapped(0, 0) {
        return None;
    }
    // Every page up to `known_mapped` is mapped; the first unmapped page is above it and at most `bound`.
    let mut known_mapped = 0u64;
    let mut bound = 1u64;
    while mapped(known_mapped + 1, bound) {
        known_mapped = bound;
        bound = bound.checked_mul(2)?;
    }
    while bound - known_mapped > 1 {
        let mid = known_mapped + (bound - known_mapped) / 2;
        if mapped(known_mapped + 1, mid) {
            known_mapped = mid;
        } else {
            bound = mid;
        }
    }
    Some(bound)
}

/// An alternate stack of `size` bytes (rounded up to pages) with a guard page below: one from [`POOL`], or a new
/// one mapped with the same [`crate::prealloc::map_stack`] install uses, whose top `prefault` bytes are written.
/// Returns `(mapping, mapping_len, ss_sp)`.
fn alt_stack(size: usize, prefault: usize) -> Option<(usize, usize, usize)> {
    let page = crate::prealloc::page_size();
    let len = size.checked_next_multiple_of(page)?.checked_add(page)?;
    if let Some(map) = POOL.take(len) {
        return Some((map, len, map.checked_add(page)?));
    }
    let (base, usable) = crate::prealloc::map_stack(size).ok()?;
    // SAFETY: our fresh mapping's usable part, not installed yet.
    unsafe { crate::prealloc::prefault_top(base, usable, prefault) };
    Some((base.checked_sub(page)?, usable.checked_add(page)?, base))
}

/// Hands our alternate-stack mapping to [`POOL`], or unmaps it when the pool is full.
///
/// # Safety
/// `[map, map + len)` is a mapping from [`alt_stack`] that no thread has installed as its alternate stack.
unsafe fn release_alt_stack(map: usize, len: usize) {
    if ALT_STACK_SIZE.load(Ordering::Acquire) == 0 || !POOL.put(map, len) {
        // SAFETY: the caller's mapping, in use by nobody.
        unsafe { libc::munmap(map as *mut c_void, len) };
    }
}

/// On the new thread, before its start routine: alternate stack, bounds, exit destructor (see the module docs).
fn thread_start() {
    let size = ALT_STACK_SIZE.load(Ordering::Acquire);
    if size == 0 || !KEY_READY.load(Ordering::Acquire) {
        return;
    }
    let tid = crate::platform::linux::crash::sys::gettid();
    let mut extras = Extras { map: 0, len: 0, ss_sp: 0, tid };
    // SAFETY: querying the current alternate stack into a zeroed out-struct.
    let mut cur: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let queried = unsafe { libc::sigaltstack(core::ptr::null(), &mut cur) } == 0;
    if queried && cur.ss_flags & libc::SS_DISABLE != 0 {
        if let Some((map, len, ss_sp)) = alt_stack(size, PREFAULT_BYTES.load(Ordering::Acquire)) {
            let new = libc::stack_t { ss_sp: ss_sp as *mut c_void, ss_flags: 0, ss_size: len - (ss_sp - map) };
            // SAFETY: `new` describes our mapping above its guard page, which no thread uses.
            if unsafe { libc::sigaltstack(&new, core::ptr::null_mut()) } == 0 {
                extras = Extras { map, len, ss_sp, tid };
            } else {
                // SAFETY: our own mapping, never installed.
                unsafe { release_alt_stack(map, len) };
            }
        }
    }
    record_own_bounds();
    let extras = Box::into_raw(Box::new(extras));
    // SAFETY: the key was created by `enable`; the value is freed by `thread_exit` (or leaked if setting failed).
    if unsafe { libc::pthread_setspecific(KEY.load(Ordering::Acquire), extras.cast()) } != 0 {
        // SAFETY: not handed to the key: ours to release now. The thread keeps its stack until exit (leaked).
        drop(unsafe { Box::from_raw(extras) });
    }
}

/// The pthread key destructor: at thread exit, forget the bounds and give our alternate stack to the pool (or
/// free it).
extern "C" fn thread_exit(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // SAFETY: the key's value is always a `Box<Extras>` leaked by `thread_start` on this thread.
    let extras = unsafe { Box::from_raw(p.cast::<Extras>()) };
    stack_bounds::remove(extras.tid);
    if extras.len == 0 {
        return;
    }
    // SAFETY: querying the current alternate stack into a zeroed out-struct.
    let mut cur: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigaltstack(core::ptr::null(), &mut cur) } != 0 {
        return; // cannot tell whether it is in use: leak it
    }
    if cur.ss_sp as usize == extras.ss_sp && cur.ss_flags & libc::SS_DISABLE == 0 {
        if cur.ss_flags & libc::SS_ONSTACK != 0 {
            return; // exiting from a handler running on it (pthread_exit in a handler): leak rather than fault
        }
        let off = libc::stack_t { ss_sp: core::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
        // SAFETY: disabling the alternate stack of this thread, which is ours and not in use.
        if unsafe { libc::sigaltstack(&off, core::ptr::null_mut()) } != 0 {
            return;
        }
    }
    // SAFETY: our mapping, no longer this thread's alternate stack (disabled above, or replaced by the app's own).
    unsafe { release_alt_stack(extras.map, extras.len) };
}

extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the `Box<Start>` leaked by `pthread_create` below for this thread only.
    let start = unsafe { Box::from_raw(p.cast::<Start>()) };
    thread_start();
    (start.routine)(start.arg)
}

/// Interposes libc's `pthread_create` (see the module docs): same contract, same results; the new thread runs
/// `start_routine(arg)` after getting an alternate signal stack and having its stack bounds recorded (only while
/// the handler is installed; otherwise it is passed through untouched). Returns `EAGAIN` if the real
/// `pthread_create` cannot be found (never on a dynamically linked glibc).
///
/// # Safety
/// Same contract as `pthread_create(3)`.
#[cfg(all(target_env = "gnu", not(target_feature = "crt-static")))]
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start_routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    let Some(real) = real() else { return libc::EAGAIN };
    if ALT_STACK_SIZE.load(Ordering::Acquire) == 0 {
        // SAFETY: the caller's arguments, forwarded unchanged to the real function.
        return unsafe { real(thread, attr, start_routine, arg) };
    }
    let start = Box::into_raw(Box::new(Start { routine: start_routine, arg }));
    // SAFETY: the caller's arguments; the trampoline takes ownership of `start` on the new thread.
    let r = unsafe { real(thread, attr, trampoline, start.cast()) };
    if r != 0 {
        // SAFETY: no thread was created, so `start` is still ours.
        drop(unsafe { Box::from_raw(start) });
    }
    r
}

/// Off glibc or in static builds there is no wrapper; `real()` still compiles against this stand-in address.
#[cfg(not(all(target_env = "gnu", not(target_feature = "crt-static"))))]
unsafe extern "C" fn pthread_create() {}

#[cfg(test)]
mod tests {
    use super::*;

    fn alt_stack() -> libc::stack_t {
        // SAFETY: querying into a zeroed out-struct.
        let mut cur: libc::stack_t = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::sigaltstack(core::ptr::null(), &mut cur) }, 0);
        cur
    }

    /// The mapped ranges of `/proc/self/maps`, adjacent ones merged: `(start, end)`.
    fn mapped_runs() -> Vec<(u64, u64)> {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for line in maps.lines() {
            let range = line.split_whitespace().next().expect("range");
            let (a, b) = range.split_once('-').expect("a-b");
            let (a, b) = (u64::from_str_radix(a, 16).expect("hex"), u64::from_str_radix(b, 16).expect("hex"));
            match runs.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => runs.push((a, b)),
            }
        }
        runs
    }

    /// The search finds the first unmapped page for every layout of 12 pages (each mapped or not, none mapped
    /// beyond), holes followed by more mapped pages included, and asks about every page below its answer.
    #[test]
    fn the_search_stops_at_the_first_hole() {
        for layout in 0u32..(1 << 12) {
            let is_mapped = |p: u64| p < 12 && layout & (1 << p) != 0;
            let asked = std::cell::RefCell::new(Vec::new());
            let got = first_unmapped_page(|from, to| {
                asked.borrow_mut().push((from, to));
                (from..=to).all(is_mapped)
            });
            let want = (0..).find(|&p| !is_mapped(p)).filter(|&p| p > 0);
            assert_eq!(got, want, "layout {layout:012b}");
            if let Some(first) = got {
                let seen = |p: u64| asked.borrow().iter().any(|&(a, b)| a <= p && p <= b);
                assert!((0..first).all(seen), "layout {layout:012b}: every page below {first} was asked about");
            }
        }
    }

    /// `main_thread_bounds` finds the end of the mapped range holding `sp` exactly (checked against
    /// `/proc/self/maps`, for this thread's stack), and `lo` is that end minus `RLIMIT_STACK`. Other tests map and
    /// unmap memory next to this thread's stack meanwhile, so a result counts only when the maps read before and
    /// after it agree on that range.
    #[test]
    fn the_stack_top_is_found_without_reading_the_maps() {
        let local = 0u8;
        let sp = core::ptr::addr_of!(local) as u64;
        let run_of = |runs: Vec<(u64, u64)>| runs.into_iter().find(|&(a, b)| a <= sp && sp < b).expect("sp is mapped");
        let mut tries = Vec::new();
        let (lo, hi) = loop {
            let before = run_of(mapped_runs());
            let (lo, hi) = main_thread_bounds(sp).expect("bounds");
            let after = run_of(mapped_runs());
            if before == after {
                assert_eq!(hi, after.1, "top of the mapped range holding {sp:#x}: {after:x?}");
                break (lo, hi);
            }
            tries.push((before, after));
            assert!(tries.len() < 50, "the maps around this stack never held still: {tries:x?}");
        };
        // SAFETY: valid out-pointer.
        let mut rl: libc::rlimit = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) }, 0);
        if rl.rlim_cur == libc::RLIM_INFINITY {
            assert_eq!(lo, 0);
        } else {
            let page = crate::prealloc::page_size() as u64;
            assert_eq!(lo, hi.saturating_sub(rl.rlim_cur as u64 & !(page - 1)));
        }
        // An address no mapping holds has no bounds.
        assert_eq!(main_thread_bounds(8), None);
    }

    /// Whether the page at `addr` is resident (`mincore`); `None` when it is not mapped.
    fn resident(addr: usize) -> Option<bool> {
        crate::prealloc::resident(addr)
    }

    /// The wrapper is what `std::thread::spawn` reaches, and with it enabled a new thread has an alternate stack of
    /// the configured size (plus nothing: the guard page is below `ss_sp`), its top pages already in memory (the
    /// prefault, or a pooled stack that had it), and recorded bounds containing its own locals; after the thread
    /// exits, its bounds are gone.
    #[test]
    #[cfg_attr(not(all(target_env = "gnu", not(target_feature = "crt-static"))), ignore = "no wrapper here")]
    fn wrapped_threads_get_an_alternate_stack_and_bounds() {
        assert!(real().is_some());
        let page = crate::prealloc::page_size();
        enable(192 * 1024, 2 * page).expect("enable");
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            let local = 0u8;
            let here = core::ptr::addr_of!(local) as u64;
            let tid = crate::platform::linux::crash::sys::gettid();
            let st = alt_stack();
            let top = st.ss_sp as usize + st.ss_size;
            let pages: Vec<Option<bool>> = (1..=2).map(|i| resident(top - i * page)).collect();
            tx.send((st.ss_flags, st.ss_size, stack_bounds::stack_bounds(tid), here, tid, pages)).expect("send");
        });
        let (flags, size, bounds, here, tid, pages) = rx.recv().expect("recv");
        h.join().expect("join");
        assert_eq!(flags & libc::SS_DISABLE, 0, "the new thread has an alternate stack");
        assert_eq!(size, 192 * 1024);
        assert_eq!(pages, [Some(true), Some(true)], "the top two pages are in memory");
        let b = bounds.expect("bounds recorded");
        let (lo, hi) = (b.lo, b.hi);
        assert!(lo < here && here < hi, "{lo:#x} < {here:#x} < {hi:#x}");
        assert!(b.mapped, "a pthread_create stack is mapped whole");
        // The key destructor ran at exit (join waits for it).
        assert_eq!(stack_bounds::stack_bounds(tid), None);
    }

    /// The pool keeps at most `POOL_SLOTS` mappings, hands each out once and only for its own length, and unmaps
    /// a kept mapping of another length when it meets one.
    #[test]
    fn the_stack_pool_reuses_stacks_of_the_right_length_once() {
        let page = crate::prealloc::page_size();
        let pool = StackPool::new();
        let map = |size: usize| {
            let (base, usable) = crate::prealloc::map_stack(size).expect("map");
            (base - page, usable + page)
        };
        let (a, len) = map(16 * 1024);
        assert!(!pool.put(a + 1, len), "not page-aligned");
        assert!(!pool.put(a, len + 1), "not whole pages");
        assert!(pool.put(a, len));
        assert_eq!(pool.take(len + page), None, "another length is not handed out");
        assert_eq!(resident(a + page), None, "and was unmapped when met");
        let (b, len) = map(16 * 1024);
        assert!(pool.put(b, len));
        assert_eq!(pool.take(len), Some(b));
        assert_eq!(pool.take(len), None, "handed out once");
        let kept: Vec<usize> = (0..POOL_SLOTS).map(|_| map(16 * 1024).0).collect();
        for &m in &kept {
            assert!(pool.put(m, len));
        }
        assert!(!pool.put(b, len), "full");
        let mut back: Vec<usize> = (0..POOL_SLOTS).map(|_| pool.take(len).expect("kept")).collect();
        back.sort_unstable();
        let mut want = kept.clone();
        want.sort_unstable();
        assert_eq!(back, want);
        assert!(pool.put(b, len));
        pool.drain();
        assert_eq!(pool.take(len), None, "drained");
        assert_eq!(resident(b + page), None, "and unmapped");
        for m in kept {
            // SAFETY: the test's own mappings, in use by nobody.
            unsafe { libc::munmap(m as *mut c_void, len) };
        }
    }
}
