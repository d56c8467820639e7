//! Hand-written Darwin bindings that neither `mach2` nor `libc` declares. Each cites the header it comes from.
//! **Type-checked only**: linked and called only on Apple platforms, never run on this project's CI machine.

use core::ffi::{c_char, c_void};
use mach2::kern_return::kern_return_t;
use mach2::loader::mach_header;
use mach2::vm_types::{vm_address_t, vm_map_t, vm_size_t};

/// `void (*)(const struct mach_header *mh, intptr_t vmaddr_slide)`: dyld's image notifier (`<mach-o/dyld.h>`).
pub type DyldImageCallback = extern "C" fn(mh: *const mach_header, vmaddr_slide: isize);

unsafe extern "C" {
    /// `_dyld_register_func_for_add_image` (`<mach-o/dyld.h>`): calls `func` once for every image already loaded,
    /// at once, then for every image loaded later. A callback cannot be unregistered.
    pub fn _dyld_register_func_for_add_image(func: DyldImageCallback);

    /// `_dyld_register_func_for_remove_image` (`<mach-o/dyld.h>`): calls `func` for every image unloaded.
    pub fn _dyld_register_func_for_remove_image(func: DyldImageCallback);

    /// `dispatch_queue_get_label` (`<dispatch/queue.h>`): a queue's label pointer. Called at install time only, on
    /// the main queue, to learn where libdispatch keeps the label inside a queue object.
    pub fn dispatch_queue_get_label(queue: *const c_void) -> *const c_char;

    /// `vm_read_overwrite` (`<mach/vm_map.h>`, the `vm_map` MIG subsystem): copies `size` bytes at `address` of
    /// `target_task` into `data` of this task and stores the count in `*outsize`; an unmapped or protected source
    /// range returns `KERN_INVALID_ADDRESS` / `KERN_PROTECTION_FAILURE` instead of faulting. Used instead of
    /// `mach_vm_read_overwrite`: `<mach/mach_vm.h>` is `#error` in the iOS SDK, and App Store processing rejects
    /// `_mach_vm_*` references as non-public API (ITMS-90338); KSCrash and PLCrashReporter use this call on iOS.
    /// `mach2` does not declare it.
    pub fn vm_read_overwrite(
        target_task: vm_map_t,
        address: vm_address_t,
        size: vm_size_t,
        data: vm_address_t,
        outsize: *mut vm_size_t,
    ) -> kern_return_t;

    /// `vm_deallocate` (`<mach/vm_map.h>`): unmaps `size` bytes at `address` of `target_task`. Used instead of
    /// `mach_vm_deallocate` for the same reason as [`vm_read_overwrite`]. `mach2` does not declare it.
    pub fn vm_deallocate(target_task: vm_map_t, address: vm_address_t, size: vm_size_t) -> kern_return_t;

    /// `_dispatch_main_q` (`<dispatch/queue.h>`: `dispatch_get_main_queue()` is `&_dispatch_main_q`).
    pub static _dispatch_main_q: u8;
}

/// `CTL_KERN` (`<sys/sysctl.h>`).
pub const CTL_KERN: i32 = 1;
/// `KERN_PROC` (`<sys/sysctl.h>`).
pub const KERN_PROC: i32 = 14;
/// `KERN_PROC_PID` (`<sys/sysctl.h>`).
pub const KERN_PROC_PID: i32 = 1;

/// `THREAD_STATE_NONE` (`<mach/arm/thread_status.h>` 5, `<mach/i386/thread_status.h>` 13): the flavor passed with
/// behaviours that carry no state.
#[cfg(target_arch = "aarch64")]
pub const THREAD_STATE_NONE: i32 = 5;
/// `THREAD_STATE_NONE` (`<mach/arm/thread_status.h>` 5, `<mach/i386/thread_status.h>` 13).
#[cfg(not(target_arch = "aarch64"))]
pub const THREAD_STATE_NONE: i32 = 13;
