//! A small piece of real Darwin FFI through `mach2`, so the Apple type-check exercises Mach types and calls.
//! **Type-checked only; never run.** Not used by the crash path yet.

use mach2::kern_return::{kern_return_t, KERN_SUCCESS};
use mach2::mach_port::mach_port_deallocate;
use mach2::mach_types::thread_act_array_t;
use mach2::message::mach_msg_type_number_t;
use mach2::port::mach_port_t;
use mach2::task::task_threads;
use mach2::traps::mach_task_self;
use mach2::vm::mach_vm_deallocate;
use mach2::vm_types::{mach_vm_address_t, mach_vm_size_t};

/// A Mach call failed; carries its `kern_return_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCountError(pub kern_return_t);

/// Number of threads in the current task (`task_threads`), releasing every thread port right and the array the
/// kernel allocated for the list (`mach_port_deallocate`, `mach_vm_deallocate`), as the suspend step must.
/// Allocates nothing in this process's heap (the kernel maps the list into the task's VM).
pub fn count_threads() -> Result<usize, ThreadCountError> {
    // SAFETY: mach_task_self() has no preconditions; it returns this task's cached send right.
    let task: mach_port_t = unsafe { mach_task_self() };
    let mut list: thread_act_array_t = core::ptr::null_mut();
    let mut count: mach_msg_type_number_t = 0;
    // SAFETY: task is a valid task port; `list` and `count` are valid out-pointers that task_threads fills with a
    // kernel-allocated array of `count` send rights.
    let kr = unsafe { task_threads(task, &mut list, &mut count) };
    if kr != KERN_SUCCESS {
        return Err(ThreadCountError(kr));
    }
    let n = count as usize;
    for i in 0..n {
        // SAFETY: task_threads succeeded, so `list` points to `count` initialised thread ports and i < count.
        let port = unsafe { *list.add(i) };
        // SAFETY: `port` is a send right this task owns (returned by task_threads); deallocating it once is correct.
        unsafe { mach_port_deallocate(task, port) };
    }
    let bytes = (n as mach_vm_size_t).saturating_mul(core::mem::size_of::<mach_port_t>() as mach_vm_size_t);
    // SAFETY: `list` was allocated by the kernel in this task's address space with `count` entries; it is not used
    // after this call.
    unsafe { mach_vm_deallocate(task, list as mach_vm_address_t, bytes) };
    Ok(n)
}
