//! The uncaught Objective-C exception (Apple; type-checked only, never run here): an `NSSetUncaughtExceptionHandler`
//! handler, chained in front of the previous one, records the `NSException`'s name, reason, a bounded part of its
//! `userInfo` and `callStackReturnAddresses` (the throw site's stack) into `crash::reason::OBJC`, before the
//! runtime aborts. The report shows them as Apple does (`*** Terminating app due to uncaught exception …` under
//! Application Specific Information, and `Last Exception Backtrace`).
//!
//! Foundation, CoreFoundation and the Objective-C runtime are found with `dlsym` at install: a process without
//! Foundation (a plain command-line tool) gets no handler and links nothing of it.
//!
//! **Not used: `objc_setExceptionPreprocessor`.** It runs on every `@throw`, caught or not, and frameworks throw
//! and catch exceptions in normal operation: recording there costs work on every throw and would report exceptions
//! that were handled. Its one advantage, the stack of an exception a framework catches and rethrows, is already in
//! `callStackReturnAddresses`, which the runtime fills at the first raise and keeps on a rethrow of the same
//! object. An exception a framework catches and replaces with a new one keeps only the new one's stack.
//!
//! **At throw time, not after a fault**: the handler runs on the throwing thread inside `objc_terminate`, before
//! `abort()`. It only calls getters that return the exception's own ivars (`name`, `reason`, `userInfo`,
//! `callStackReturnAddresses`) and CoreFoundation copy-out functions into stack buffers; the record is written
//! with one non-waiting compare-and-swap (`Record::write`), so it neither allocates itself nor waits for a lock.
//! Sources: Apple's Foundation `NSException.h` / `NSSetUncaughtExceptionHandler`, CoreFoundation `CFString.h`,
//! `CFArray.h`, `CFNumber.h`, `CFDictionary.h`, objc4 `runtime.h` / `message.h`.

use crate::crash::reason::{self, Fields};
use core::ffi::{c_char, c_void};
use std::sync::OnceLock;

type Id = *mut c_void;
type Sel = *const c_void;
type Handler = unsafe extern "C" fn(Id);

/// `CFRange` (`CFBase.h`): location and length in UTF-16 units.
#[repr(C)]
#[derive(Clone, Copy)]
struct CfRange {
    location: isize,
    length: isize,
}

/// The functions and selectors the handler uses, resolved at install.
struct Api {
    msg_send: unsafe extern "C" fn(Id, Sel) -> Id,
    get_class_name: unsafe extern "C" fn(Id) -> *const c_char,
    string_type: usize,
    get_type_id: unsafe extern "C" fn(Id) -> usize,
    string_length: unsafe extern "C" fn(Id) -> isize,
    string_bytes: unsafe extern "C" fn(Id, CfRange, u32, u8, u8, *mut u8, isize, *mut isize) -> isize,
    array_count: unsafe extern "C" fn(Id) -> isize,
    array_at: unsafe extern "C" fn(Id, isize) -> Id,
    number_value: unsafe extern "C" fn(Id, isize, *mut c_void) -> u8,
    dict_count: unsafe extern "C" fn(Id) -> isize,
    dict_keys_values: unsafe extern "C" fn(Id, *mut Id, *mut Id),
    sel_name: Sel,
    sel_reason: Sel,
    sel_user_info: Sel,
    sel_stack: Sel,
    previous: Option<Handler>,
}

// SAFETY: the function pointers and selectors are immutable process-wide values.
unsafe impl Sync for Api {}
// SAFETY: as above.
unsafe impl Send for Api {}

static API: OnceLock<Api> = OnceLock::new();

/// `kCFStringEncodingUTF8` (`CFString.h`).
const UTF8: u32 = 0x0800_0100;
/// `kCFNumberSInt64Type` (`CFNumber.h`).
const SINT64: isize = 4;
/// `userInfo` entries looked at (a larger dictionary is summarised by its count).
const MAX_DICT: usize = 64;
/// `userInfo` entries shown.
const SHOWN_ENTRIES: usize = 8;

fn sym(name: &std::ffi::CStr) -> usize {
    // SAFETY: NUL-terminated name; RTLD_DEFAULT searches the global scope; a missing symbol is null.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// Resolves everything and installs the handler in front of the current one; does nothing without Foundation.
pub(crate) fn install() {
    let names = [
        c"NSSetUncaughtExceptionHandler",
        c"NSGetUncaughtExceptionHandler",
        c"objc_msgSend",
        c"object_getClassName",
        c"sel_registerName",
        c"CFStringGetTypeID",
        c"CFGetTypeID",
        c"CFStringGetLength",
        c"CFStringGetBytes",
        c"CFArrayGetCount",
        c"CFArrayGetValueAtIndex",
        c"CFNumberGetValue",
        c"CFDictionaryGetCount",
        c"CFDictionaryGetKeysAndValues",
    ];
    let mut a = [0usize; 14];
    for (slot, n) in a.iter_mut().zip(names) {
        *slot = sym(n);
        if *slot == 0 {
            return;
        }
    }
    // SAFETY: every transmute below turns the address of the named C function into a pointer of the prototype its
    // header (cited in the module docs) declares; the calls are those functions' documented uses.
    unsafe {
        let set: unsafe extern "C" fn(Option<Handler>) = std::mem::transmute(a[0]);
        let get: unsafe extern "C" fn() -> Option<Handler> = std::mem::transmute(a[1]);
        let sel: unsafe extern "C" fn(*const c_char) -> Sel = std::mem::transmute(a[4]);
        let string_type_id: unsafe extern "C" fn() -> usize = std::mem::transmute(a[5]);
        let api = Api {
            msg_send: std::mem::transmute::<usize, unsafe extern "C" fn(Id, Sel) -> Id>(a[2]),
            get_class_name: std::mem::transmute::<usize, unsafe extern "C" fn(Id) -> *const c_char>(a[3]),
            string_type: string_type_id(),
            get_type_id: std::mem::transmute::<usize, unsafe extern "C" fn(Id) -> usize>(a[6]),
            string_length: std::mem::transmute::<usize, unsafe extern "C" fn(Id) -> isize>(a[7]),
            string_bytes: std::mem::transmute::<
                usize,
                unsafe extern "C" fn(Id, CfRange, u32, u8, u8, *mut u8, isize, *mut isize) -> isize,
            >(a[8]),
            array_count: std::mem::transmute::<usize, unsafe extern "C" fn(Id) -> isize>(a[9]),
            array_at: std::mem::transmute::<usize, unsafe extern "C" fn(Id, isize) -> Id>(a[10]),
            number_value: std::mem::transmute::<usize, unsafe extern "C" fn(Id, isize, *mut c_void) -> u8>(a[11]),
            dict_count: std::mem::transmute::<usize, unsafe extern "C" fn(Id) -> isize>(a[12]),
            dict_keys_values: std::mem::transmute::<usize, unsafe extern "C" fn(Id, *mut Id, *mut Id)>(a[13]),
            sel_name: sel(c"name".as_ptr()),
            sel_reason: sel(c"reason".as_ptr()),
            sel_user_info: sel(c"userInfo".as_ptr()),
            sel_stack: sel(c"callStackReturnAddresses".as_ptr()),
            previous: get(),
        };
        if API.set(api).is_ok() {
            set(Some(uncaught));
        }
    }
}

/// UTF-8 of the `CFString`/`NSString` `s` into `buf` (as many whole characters as fit); the written prefix.
///
/// # Safety
/// `s` is null or a live `CFStringRef`.
unsafe fn string<'b>(api: &Api, s: Id, buf: &'b mut [u8]) -> &'b [u8] {
    // SAFETY: `s` is a live CF object (caller).
    if s.is_null() || unsafe { (api.get_type_id)(s) } != api.string_type {
        return &[];
    }
    // SAFETY: as above; `CFStringGetBytes` writes at most `buf.len()` bytes and reports how many in `used`.
    let used = unsafe {
        let len = (api.string_length)(s);
        let mut used = 0isize;
        (api.string_bytes)(
            s,
            CfRange { location: 0, length: len },
            UTF8,
            b'?',
            0,
            buf.as_mut_ptr(),
            buf.len() as isize,
            &mut used,
        );
        used
    };
    buf.get(..usize::try_from(used).unwrap_or(0)).unwrap_or(&[])
}

/// `key: value` lines of the first [`SHOWN_ENTRIES`] string-keyed entries of `dict` into `out`; the written prefix.
///
/// # Safety
/// `dict` is null or a live `NSDictionary`.
unsafe fn user_info<'b>(api: &Api, dict: Id, out: &'b mut [u8; reason::MAX_USER_INFO]) -> &'b [u8] {
    let mut n = 0usize;
    let mut put = |bytes: &[u8], n: &mut usize| {
        for &b in bytes {
            let Some(d) = out.get_mut(*n) else { return };
            *d = b;
            *n += 1;
        }
    };
    if dict.is_null() {
        return &[];
    }
    // SAFETY: `dict` is a live dictionary (caller).
    let count = usize::try_from(unsafe { (api.dict_count)(dict) }).unwrap_or(0);
    if count == 0 {
        return &[];
    }
    if count > MAX_DICT {
        put(b"(userInfo has more than 64 entries)", &mut n);
        return out.get(..n).unwrap_or(&[]);
    }
    let mut keys = [std::ptr::null_mut::<c_void>(); MAX_DICT];
    let mut values = [std::ptr::null_mut::<c_void>(); MAX_DICT];
    // SAFETY: both arrays hold `count` <= MAX_DICT entries, as `CFDictionaryGetKeysAndValues` requires.
    unsafe { (api.dict_keys_values)(dict, keys.as_mut_ptr(), values.as_mut_ptr()) };
    let mut shown = 0;
    for (k, v) in keys.iter().zip(values.iter()).take(count) {
        let mut kb = [0u8; 128];
        let mut vb = [0u8; 256];
        // SAFETY: keys and values are live objects of the dictionary.
        let key = unsafe { string(api, *k, &mut kb) };
        if key.is_empty() || shown == SHOWN_ENTRIES {
            continue;
        }
        // SAFETY: as above; `object_getClassName` returns the class's NUL-terminated name.
        let value: &[u8] = unsafe {
            let s = string(api, *v, &mut vb);
            if !s.is_empty() || v.is_null() {
                s
            } else {
                let c = (api.get_class_name)(*v);
                if c.is_null() {
                    b"?"
                } else {
                    std::ffi::CStr::from_ptr(c).to_bytes()
                }
            }
        };
        if n > 0 {
            put(b"\n", &mut n);
        }
        put(key, &mut n);
        put(b": ", &mut n);
        put(value, &mut n);
        shown += 1;
    }
    out.get(..n).unwrap_or(&[])
}

/// The handler `NSSetUncaughtExceptionHandler` calls with the uncaught `NSException`.
unsafe extern "C" fn uncaught(exception: Id) {
    if let Some(api) = API.get() {
        if !exception.is_null() {
            let mut name_buf = [0u8; reason::MAX_TYPE];
            let mut reason_buf = [0u8; reason::MAX_REASON];
            let mut info_buf = [0u8; reason::MAX_USER_INFO];
            let mut bt = [0u64; reason::MAX_BACKTRACE];
            // SAFETY: `exception` is a live `NSException`; the getters return its ivars (an `NSString`, an
            // `NSString`, an `NSDictionary`, an `NSArray` of `NSNumber`, or nil).
            unsafe {
                let name = string(api, (api.msg_send)(exception, api.sel_name), &mut name_buf);
                let why = string(api, (api.msg_send)(exception, api.sel_reason), &mut reason_buf);
                let info = user_info(api, (api.msg_send)(exception, api.sel_user_info), &mut info_buf);
                let stack = (api.msg_send)(exception, api.sel_stack);
                let mut n = 0usize;
                if !stack.is_null() {
                    let count = usize::try_from((api.array_count)(stack)).unwrap_or(0).min(reason::MAX_BACKTRACE);
                    for (i, slot) in bt.iter_mut().enumerate().take(count) {
                        let num = (api.array_at)(stack, i as isize);
                        let mut v = 0i64;
                        if !num.is_null() && (api.number_value)(num, SINT64, (&mut v as *mut i64).cast()) != 0 {
                            *slot = v as u64;
                            n += 1;
                        }
                    }
                }
                reason::OBJC.write(&Fields {
                    tid: crate::language::current_tid(),
                    type_name: &[name],
                    reason: &[why],
                    user_info: info,
                    backtrace: bt.get(..n).unwrap_or(&[]),
                    ..Fields::default()
                });
            }
        }
        if let Some(prev) = api.previous {
            // SAFETY: the handler that was installed before ours, called as Foundation would.
            unsafe { prev(exception) };
        }
    }
}
