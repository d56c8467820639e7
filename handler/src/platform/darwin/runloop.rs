//! Hang detection on Apple platforms: a run-loop observer on the main run loop tells the watchdog
//! (`crate::hangs`) when the main thread makes progress and when it waits. **Type-checked only: it has not run.**
//!
//! The observer (`CFRunLoopObserverCreate` with every activity, added to the main run loop in
//! `kCFRunLoopCommonModes`) calls `crate::hangs::idle` at `kCFRunLoopBeforeWaiting` (the run loop is about to
//! sleep until its next source or timer: waiting is not a hang) and `crate::hangs::heartbeat` at every other
//! activity (entering the loop, before timers, before sources, after waking, exiting). A main thread stuck in one
//! callout (a timer, a source, a UI event, a dispatch block on the main queue) sends neither, so the watchdog sees
//! the stall. Source of the API and constants: CoreFoundation `CFRunLoop.h` (`CFRunLoopActivity`:
//! `kCFRunLoopEntry` 1, `kCFRunLoopBeforeTimers` 2, `kCFRunLoopBeforeSources` 4, `kCFRunLoopBeforeWaiting` 32,
//! `kCFRunLoopAfterWaiting` 64, `kCFRunLoopExit` 128, `kCFRunLoopAllActivities` 0x0FFFFFFF). The functions are
//! resolved with `dlsym` (as `objc_exception` does), so a process without CoreFoundation gets no observer and an
//! error, not a link failure.

use core::ffi::c_void;

/// `kCFRunLoopBeforeWaiting`.
pub const BEFORE_WAITING: usize = 32;
/// `kCFRunLoopAllActivities`.
pub const ALL_ACTIVITIES: usize = 0x0FFF_FFFF;

/// `CFRunLoopObserverCallBack`: `(CFRunLoopObserverRef, CFRunLoopActivity, void *info)`.
type Callback = extern "C" fn(*mut c_void, usize, *mut c_void);

/// The observer's callout: `idle` before the run loop waits, `heartbeat` at every other activity.
extern "C" fn observe(_observer: *mut c_void, activity: usize, _info: *mut c_void) {
    if activity == BEFORE_WAITING {
        crate::hangs::idle();
    } else {
        crate::hangs::heartbeat();
    }
}

fn sym(name: &core::ffi::CStr) -> usize {
    // SAFETY: NUL-terminated name; RTLD_DEFAULT searches the global scope; a missing symbol is null.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// Adds the observer to the main run loop (once per call: call it once). `false` when CoreFoundation's functions
/// are not in the process.
pub fn observe_main_run_loop() -> bool {
    let (get_main, create, add, common) = (
        sym(c"CFRunLoopGetMain"),
        sym(c"CFRunLoopObserverCreate"),
        sym(c"CFRunLoopAddObserver"),
        sym(c"kCFRunLoopCommonModes"),
    );
    if get_main == 0 || create == 0 || add == 0 || common == 0 {
        return false;
    }
    // SAFETY: each transmute turns the address of the named CoreFoundation function into a pointer of the
    // prototype `CFRunLoop.h` declares (`CFRunLoopRef CFRunLoopGetMain(void)`; `CFRunLoopObserverRef
    // CFRunLoopObserverCreate(CFAllocatorRef, CFOptionFlags, Boolean, CFIndex, CFRunLoopObserverCallBack,
    // CFRunLoopObserverContext *)`; `void CFRunLoopAddObserver(CFRunLoopRef, CFRunLoopObserverRef, CFRunLoopMode)`),
    // and `kCFRunLoopCommonModes` is a `const CFRunLoopMode` variable whose address dlsym gave. A NULL allocator is
    // the default allocator; a NULL context is allowed. The observer is never released (it lives as long as the
    // process); CFRunLoopAddObserver retains it and may be called from any thread.
    unsafe {
        let get_main: extern "C" fn() -> *mut c_void = core::mem::transmute(get_main);
        let create: extern "C" fn(*const c_void, usize, u8, isize, Callback, *mut c_void) -> *mut c_void =
            core::mem::transmute(create);
        let add: extern "C" fn(*mut c_void, *mut c_void, *const c_void) = core::mem::transmute(add);
        let mode = *(common as *const *const c_void);
        let observer = create(core::ptr::null(), ALL_ACTIVITIES, 1, 0, observe, core::ptr::null_mut());
        if observer.is_null() {
            return false;
        }
        add(get_main(), observer, mode);
    }
    true
}
