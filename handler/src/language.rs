//! Install time: the handlers that record why the process is about to die before it faults (`crate::crash::reason`
//! holds what they record), and the app's crash reason.
//!
//! - **Rust panics**: a panic hook, chained before the previous one (std's default prints the message), records
//!   the message and `file:line:column` with the panicking thread's kernel id. The report carries it only when
//!   that thread then dies by an abort-like signal (`panic = "abort"`, a panic while panicking, a panic that
//!   reaches an `extern "C"` boundary); a panic that unwinds and is caught leaves no report (see
//!   `handler/README.md`, "Why it crashed").
//! - **C++**: a `std::set_terminate` handler, chained to the previous one, records the current exception's type
//!   (`std::type_info::name()`, mangled) and, for a type derived from `std::exception`, `what()`. The C++ runtime
//!   is found with `dlsym` at install, so a process without one (a pure Rust app) links nothing of C++.
//! - **C library abort message**: where glibc keeps it (`__abort_msg`), for the crash path to read.
//! - **Objective-C** (Apple): the Apple backend's `NSSetUncaughtExceptionHandler` handler
//!   (`platform::darwin::objc_exception`).
//!
//! The handlers run on the thread that panics or throws, before any fault, possibly while that thread holds the
//! allocator's lock (a panic inside an allocator, `what()` of an exception thrown there): they allocate nothing
//! and take no lock themselves: the text is copied piecewise into fixed atomic storage with a writer flag taken
//! by one compare-and-swap that never waits (`crash::reason::Record::write`). Only then is the previous handler
//! called, which may allocate (std's hook formats and may capture a backtrace; libstdc++'s verbose terminate
//! handler demangles): if that deadlocks, the record is already complete, but the process then hangs rather than
//! dies, as it would without us.
#![allow(unsafe_code)]

use crate::crash::reason::{self, Fields};
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the panic hook and the C++ terminate handler once per process (a later install after `uninstall`
/// keeps them: they only record), and finds the C library's abort message.
pub(crate) fn install() {
    find_abort_msg();
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    install_panic_hook();
    install_terminate_handler();
    #[cfg(target_vendor = "apple")]
    crate::platform::darwin::objc_exception::install();
}

/// Sets the short crash reason that lands in the next crash report (MESSAGES, source `app`; Apple's Application
/// Specific Information), replacing the previous one; an empty `reason` clears it. Kept up to
/// [`MAX_APP_REASON`](crate::crash::reason::MAX_APP_REASON) bytes (512; longer text is cut). Copies into fixed
/// storage: allocates nothing, takes no lock, may be called from any thread at any time, before or after
/// install. Returns `false` when another thread was setting it at that very moment (its text is kept instead).
pub fn set_crash_reason(reason: &str) -> bool {
    reason::APP_REASON.set(reason.as_bytes())
}

/// Kernel thread id of the caller, as the crash path records the crashed thread's: Linux `gettid`, Apple
/// `pthread_threadid_np` (= `thread_identifier_info.thread_id`).
pub(crate) fn current_tid() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: `gettid` takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as u64 }
    }
    #[cfg(target_vendor = "apple")]
    {
        let mut tid = 0u64;
        // SAFETY: a null thread means the calling thread; `tid` is a valid out-pointer.
        unsafe { libc::pthread_threadid_np(0, &mut tid) };
        tid
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        0
    }
}

/// Decimal digits of `v` into `buf`; the written suffix. Allocation-free.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
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

fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        record_panic(info);
        previous(info);
    }));
}

/// Copies the panic's message and location into the panic ring. Allocation-free and lock-free (the payload is
/// what std hands the hook: a `&str` or the `String` it formatted).
fn record_panic(info: &PanicHookInfo<'_>) {
    let payload = info.payload();
    let msg: &[u8] = match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s.as_bytes(),
        (None, Some(s)) => s.as_bytes(),
        (None, None) => b"Box<dyn Any>",
    };
    let (mut l, mut c) = ([0u8; 20], [0u8; 20]);
    let (file, line, col): (&[u8], &[u8], &[u8]) = match info.location() {
        Some(loc) => {
            (loc.file().as_bytes(), decimal(u64::from(loc.line()), &mut l), decimal(u64::from(loc.column()), &mut c))
        }
        None => (b"", b"", b""),
    };
    let location: &[&[u8]] = if file.is_empty() { &[] } else { &[file, b":", line, b":", col] };
    reason::record_panic(&Fields { tid: current_tid(), reason: &[msg], location, ..Fields::default() });
}

// ---- C++ (Itanium C++ ABI, https://itanium-cxx-abi.github.io/cxx-abi/abi.html and abi-eh.html) ----

type TerminateHandler = unsafe extern "C" fn();
type SetTerminate = unsafe extern "C" fn(Option<TerminateHandler>) -> Option<TerminateHandler>;

/// The previous terminate handler (a function address, 0: none).
static PREV_TERMINATE: AtomicUsize = AtomicUsize::new(0);
/// `__cxa_current_exception_type` (0: not found).
static CURRENT_TYPE: AtomicUsize = AtomicUsize::new(0);
/// `__cxa_get_globals` (0: not found).
static GET_GLOBALS: AtomicUsize = AtomicUsize::new(0);
/// Addresses of the vtables of `__cxxabiv1::__si_class_type_info` and `__vmi_class_type_info` (0: not found).
static SI_VTABLE: AtomicUsize = AtomicUsize::new(0);
static VMI_VTABLE: AtomicUsize = AtomicUsize::new(0);

fn dlsym(name: &std::ffi::CStr) -> usize {
    // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the global scope; a missing symbol gives null.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// Finds the C++ runtime (if the process has one) and installs [`terminate_handler`] in front of the current
/// terminate handler.
fn install_terminate_handler() {
    let set = dlsym(c"_ZSt13set_terminatePFvvE");
    if set == 0 {
        return;
    }
    CURRENT_TYPE.store(dlsym(c"__cxa_current_exception_type"), Ordering::Relaxed);
    GET_GLOBALS.store(dlsym(c"__cxa_get_globals"), Ordering::Relaxed);
    SI_VTABLE.store(dlsym(c"_ZTVN10__cxxabiv120__si_class_type_infoE"), Ordering::Relaxed);
    VMI_VTABLE.store(dlsym(c"_ZTVN10__cxxabiv121__vmi_class_type_infoE"), Ordering::Relaxed);
    // SAFETY: `set` is the C++ runtime's `std::set_terminate(void (*)())`, which has the C calling convention on
    // the Itanium ABI; it returns the previous handler.
    let set: SetTerminate = unsafe { std::mem::transmute::<usize, SetTerminate>(set) };
    // SAFETY: as above; `terminate_handler` never returns.
    let prev = unsafe { set(Some(terminate_handler)) };
    PREV_TERMINATE.store(prev.map_or(0, |f| f as usize), Ordering::Release);
}

/// Our terminate handler: records the uncaught exception, then calls the previous handler (which aborts); aborts
/// itself when there is none or it returns.
unsafe extern "C" fn terminate_handler() {
    record_cxx_exception();
    let prev = PREV_TERMINATE.load(Ordering::Acquire);
    if prev != 0 {
        // SAFETY: `prev` is the handler `std::set_terminate` returned at install, a `void (*)()`.
        let f = unsafe { std::mem::transmute::<usize, TerminateHandler>(prev) };
        // SAFETY: calling the previous terminate handler as the runtime would.
        unsafe { f() };
    }
    // SAFETY: `abort` is always safe to call.
    unsafe { libc::abort() };
}

/// `what()` of the current exception (empty when not a `std::exception` or not found).
///
/// # Safety
/// As [`exception_what`].
#[cfg(not(target_vendor = "apple"))]
unsafe fn what_of<'a>(ti: usize) -> &'a [u8] {
    // SAFETY: the caller's guarantee.
    unsafe { exception_what(ti) }.unwrap_or(&[])
}

/// Apple: not read (libc++abi's own terminate handler puts `what()` in `__crash_info`, which the report carries).
///
/// # Safety
/// None needed; `unsafe` for the same signature as on other targets.
#[cfg(target_vendor = "apple")]
unsafe fn what_of<'a>(_ti: usize) -> &'a [u8] {
    &[]
}

/// `_Unwind_Exception::exception_class` of C++ exceptions: libstdc++ `GNUCC++\0`, libc++abi `CLNGC++\0`
/// (dependent exceptions, rethrown `std::exception_ptr`, end in `\x01`).
#[cfg(not(target_vendor = "apple"))]
const GNU_CXX: u64 = u64::from_be_bytes(*b"GNUCC++\0");
#[cfg(not(target_vendor = "apple"))]
const CLANG_CXX: u64 = u64::from_be_bytes(*b"CLNGC++\0");
/// `sizeof(_Unwind_Exception)` on 64-bit targets: class, cleanup, two private words, 16-aligned.
#[cfg(not(target_vendor = "apple"))]
const UNWIND_EXCEPTION_SIZE: usize = 32;

/// Records the current exception's type and, for a `std::exception`, `what()`, into `reason::CXX`. Reads only
/// objects the C++ runtime hands us (type_info objects, the current exception); allocates nothing.
fn record_cxx_exception() {
    let tid = current_tid();
    let current_type = CURRENT_TYPE.load(Ordering::Relaxed);
    let ti = if current_type == 0 {
        0
    } else {
        // SAFETY: `__cxa_current_exception_type()` (C linkage, no arguments) returns the current exception's
        // `std::type_info*`, or null when there is none.
        let f = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> usize>(current_type) };
        // SAFETY: as above.
        unsafe { f() }
    };
    if ti == 0 {
        reason::CXX.write(&Fields {
            tid,
            reason: &[b"terminate called without an active exception"],
            ..Fields::default()
        });
        return;
    }
    // SAFETY: `ti` is a live `std::type_info` (Itanium layout: vptr, then `const char* __name`), handed by the
    // runtime; type_info objects live as long as their image.
    let name = unsafe { type_name(ti) };
    // SAFETY: `ti` is the current exception's live type_info (above).
    let what = unsafe { what_of(ti) };
    reason::CXX.write(&Fields { tid, type_name: &[name], reason: &[what], ..Fields::default() });
}

/// A NUL-terminated string at `p`, at most `max` bytes (plain loads of runtime-owned text).
///
/// # Safety
/// `p` is null or points to a readable NUL-terminated string (or at least `max` readable bytes).
unsafe fn c_str<'a>(p: *const u8, max: usize) -> &'a [u8] {
    if p.is_null() {
        return &[];
    }
    let mut n = 0;
    // SAFETY: the caller guarantees the bytes up to the NUL (or `max`) are readable.
    while n < max && unsafe { *p.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: the `n` bytes were just read.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// `std::type_info::name()` of `ti`: the mangled name, without the `*` libstdc++ prefixes to local types.
///
/// # Safety
/// `ti` points to a live `std::type_info`.
unsafe fn type_name<'a>(ti: usize) -> &'a [u8] {
    // SAFETY: `__name` is the second word of a type_info (Itanium ABI §2.9.5).
    let p = unsafe { *((ti + 8) as *const *const u8) };
    // SAFETY: the name is a NUL-terminated string in the image's read-only data.
    let n = unsafe { c_str(p, reason::MAX_TYPE) };
    n.strip_prefix(b"*").unwrap_or(n)
}

/// The offset of the `std::exception` subobject in an object of class `ti`, following public, non-virtual bases
/// (`__si_class_type_info` one base at offset 0; `__vmi_class_type_info` its base table), at most `depth` levels.
///
/// # Safety
/// `ti` points to a live class `std::type_info`.
#[cfg(not(target_vendor = "apple"))]
unsafe fn exception_base_offset(ti: usize, depth: u32) -> Option<isize> {
    // SAFETY: as the caller guarantees.
    if unsafe { type_name(ti) } == b"St9exception" {
        return Some(0);
    }
    if depth == 0 {
        return None;
    }
    // SAFETY: the first word of a type_info is its vptr.
    let vptr = unsafe { *(ti as *const usize) };
    // A vptr points 16 bytes into its vtable (past offset-to-top and the RTTI pointer).
    let si = SI_VTABLE.load(Ordering::Relaxed);
    let vmi = VMI_VTABLE.load(Ordering::Relaxed);
    if si != 0 && vptr == si + 16 {
        // SAFETY: `__si_class_type_info::__base_type` is the third word.
        let base = unsafe { *((ti + 16) as *const usize) };
        // SAFETY: the base is a live class type_info.
        return if base == 0 { None } else { unsafe { exception_base_offset(base, depth - 1) } };
    }
    if vmi != 0 && vptr == vmi + 16 {
        // SAFETY: `__vmi_class_type_info`: `unsigned __flags` at 16, `unsigned __base_count` at 20, then
        // `__base_class_type_info { const __class_type_info*; long __offset_flags; }` entries from 24.
        let count = unsafe { *((ti + 20) as *const u32) }.min(64) as usize;
        for k in 0..count {
            let entry = ti + 24 + 16 * k;
            // SAFETY: `entry` is inside the base table of `count` entries.
            let (base, off_flags) = unsafe { (*(entry as *const usize), *((entry + 8) as *const isize)) };
            const VIRTUAL: isize = 1;
            const PUBLIC: isize = 2;
            if base == 0 || off_flags & VIRTUAL != 0 || off_flags & PUBLIC == 0 {
                continue;
            }
            // SAFETY: the base is a live class type_info.
            if let Some(o) = unsafe { exception_base_offset(base, depth - 1) } {
                return Some((off_flags >> 8) + o);
            }
        }
    }
    None
}

/// `what()` of the current exception when its type `ti` derives from `std::exception` (publicly, not
/// virtually); `None` otherwise, or when the exception is foreign or a dependent (rethrown `exception_ptr`) one.
///
/// The current exception is the top of `__cxa_get_globals()->caughtExceptions`: both libstdc++ and libc++abi call
/// `__cxa_begin_catch` on it before `std::terminate` (a throw without a handler, a `noexcept` violation). The
/// thrown object follows its `_Unwind_Exception` header, found by its exception class.
///
/// # Safety
/// Called from the terminate handler with `ti` = `__cxa_current_exception_type()`, non-null.
#[cfg(not(target_vendor = "apple"))]
unsafe fn exception_what<'a>(ti: usize) -> Option<&'a [u8]> {
    // SAFETY: `ti` is a live class type_info (the caller's guarantee).
    let offset = unsafe { exception_base_offset(ti, 16) }?;
    let get_globals = GET_GLOBALS.load(Ordering::Relaxed);
    if get_globals == 0 {
        return None;
    }
    // SAFETY: `__cxa_get_globals()` (C linkage) returns this thread's `__cxa_eh_globals`, whose first word is
    // `caughtExceptions`, the `__cxa_exception*` of the innermost caught exception.
    let globals = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> usize>(get_globals)() };
    if globals == 0 {
        return None;
    }
    // SAFETY: as above.
    let header = unsafe { *(globals as *const usize) };
    if header == 0 {
        return None;
    }
    // The `_Unwind_Exception` is the last member of `__cxa_exception` (at most ~20 words in either runtime).
    let mut ue = None;
    for k in 0..24 {
        // SAFETY: reads inside the live `__cxa_exception` header, which is larger than the offsets scanned before
        // the class word is met.
        let w = unsafe { *((header + 8 * k) as *const u64) };
        if w == GNU_CXX || w == CLANG_CXX {
            ue = Some(header + 8 * k);
            break;
        }
        if w == GNU_CXX | 1 || w == CLANG_CXX | 1 {
            return None; // dependent exception: the object is elsewhere
        }
    }
    let object = ue? + UNWIND_EXCEPTION_SIZE;
    let base = object.checked_add_signed(offset)?;
    // SAFETY: `base` is the `std::exception` subobject of the live thrown object; its first word is the vptr, and
    // `what()` is the third vtable slot (complete and deleting destructors, then `what`: Itanium ABI §2.5.2,
    // `std::exception` declares the destructor then `what`). A member function takes `this` as its first argument.
    let what = unsafe {
        let vptr = *(base as *const *const usize);
        let f = std::mem::transmute::<usize, unsafe extern "C" fn(usize) -> *const u8>(*vptr.add(2));
        f(base)
    };
    // SAFETY: `what()` returns a NUL-terminated string that lives as long as the exception.
    Some(unsafe { c_str(what, reason::MAX_REASON) })
}

/// Records where glibc keeps its abort message (`__abort_msg`, a `GLIBC_PRIVATE` symbol) for the crash path.
fn find_abort_msg() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    reason::set_abort_msg_address(dlsym(c"__abort_msg") as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits() {
        let mut b = [0u8; 20];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(1234, &mut b), b"1234");
        assert_eq!(decimal(u64::MAX, &mut b), b"18446744073709551615");
    }
}
