//! Thin wrappers over the Mach calls the Darwin crash path makes: the fault-proof memory reader
//! (`vm_read_overwrite` only), the thread list (`task_threads`, with every right and the list itself released),
//! suspension, thread states, names and dispatch queue labels, and the exception-port calls.
//!
//! Crash path: nothing here allocates in this process's heap (the kernel maps `task_threads`'s list into the task;
//! it is released with `vm_deallocate`), takes a lock, panics or formats. **Type-checked only.**

use super::super::ffi::{vm_deallocate, vm_read_overwrite};
use crate::arch::pac::PacStrip;
use crate::arch::{aarch64, x86_64, RegisterValues};
use crate::platform::darwin::crash::crash_info;
use crate::platform::darwin::crash::ports::SavedPorts;
use crate::platform::darwin::crash::state;
use crate::unwind::MemoryReader;
use mach2::kern_return::KERN_SUCCESS;
use mach2::mach_port::mach_port_deallocate;
use mach2::mach_types::thread_act_array_t;
use mach2::message::mach_msg_type_number_t;
use mach2::port::{mach_port_t, MACH_PORT_NULL};
use mach2::task::{task_get_exception_ports, task_set_exception_ports, task_threads};
use mach2::thread_act::{thread_get_state, thread_resume, thread_suspend};
use mach2::traps::mach_task_self;
use mach2::vm_types::{vm_address_t, vm_size_t};

/// This task's port (`mach_task_self()`, a cached send right: no new reference).
pub fn task() -> mach_port_t {
    // SAFETY: no preconditions; returns the task's cached self port.
    unsafe { mach_task_self() }
}

/// Reads this task's memory with `vm_read_overwrite` (not `mach_vm_read_overwrite`: non-public on iOS, see
/// `ffi::vm_read_overwrite`): an unmapped or protected address makes the call fail
/// with an error instead of faulting (the fault-proof reader of design.md §2).
#[derive(Clone, Copy, Debug)]
pub struct TaskReader {
    task: mach_port_t,
}

impl TaskReader {
    /// A reader of this task's memory.
    pub fn new() -> Self {
        TaskReader { task: task() }
    }

    /// Reads `buf.len()` bytes at `addr`; `false` unless every byte was read.
    pub fn read_into(&self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        // Every Apple target is 64-bit: `vm_address_t`/`vm_size_t` are `usize` = u64, so no address is cut.
        let Ok(addr) = vm_address_t::try_from(addr) else { return false };
        let mut out: vm_size_t = 0;
        // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes; the kernel writes at most `size` bytes into
        // it and validates `addr` itself (returning an error for unmapped ranges).
        let kr = unsafe { vm_read_overwrite(self.task, addr, buf.len(), buf.as_mut_ptr() as vm_address_t, &mut out) };
        kr == KERN_SUCCESS && out == buf.len()
    }

    /// Reads a little-endian `u64` at `addr`.
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read_into(addr, &mut b).then(|| u64::from_le_bytes(b))
    }
}

impl Default for TaskReader {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryReader for TaskReader {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        self.read_into(addr, buf)
    }
}

/// The task's threads from `task_threads`: a kernel-allocated array of send rights. [`ThreadList::release`] drops
/// every right and unmaps the array (the suspend step must leave nothing behind).
#[derive(Debug)]
pub struct ThreadList {
    list: thread_act_array_t,
    count: usize,
}

impl ThreadList {
    /// Takes the list; `None` when `task_threads` fails.
    pub fn take() -> Option<ThreadList> {
        let mut list: thread_act_array_t = core::ptr::null_mut();
        let mut count: mach_msg_type_number_t = 0;
        // SAFETY: valid out-pointers; on success the kernel stores an array of `count` thread send rights.
        let kr = unsafe { task_threads(task(), &mut list, &mut count) };
        (kr == KERN_SUCCESS && !list.is_null()).then_some(ThreadList { list, count: count as usize })
    }

    /// Number of threads.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Thread port `i`.
    pub fn port(&self, i: usize) -> mach_port_t {
        if i >= self.count {
            return MACH_PORT_NULL;
        }
        // SAFETY: `list` holds `count` initialised entries (task_threads succeeded) and i < count.
        unsafe { *self.list.add(i) }
    }

    /// Drops every thread right and unmaps the array.
    pub fn release(self) {
        let t = task();
        for i in 0..self.count {
            // SAFETY: each entry is a send right this task received from task_threads; dropped exactly once.
            unsafe { mach_port_deallocate(t, self.port(i)) };
        }
        let bytes = self.count.saturating_mul(core::mem::size_of::<mach_port_t>());
        // SAFETY: the array was mapped into this task by the kernel for task_threads and is not used afterwards.
        unsafe { vm_deallocate(t, self.list as vm_address_t, bytes) };
    }
}

/// Suspends `port` (`thread_suspend`); `true` when it is now suspended (and must be resumed).
pub fn suspend(port: mach_port_t) -> bool {
    // SAFETY: `port` is a thread send right from task_threads; suspending another thread has no memory effects.
    unsafe { thread_suspend(port) == KERN_SUCCESS }
}

/// Resumes a thread [`suspend`] suspended.
pub fn resume(port: mach_port_t) {
    // SAFETY: as for `suspend`.
    unsafe { thread_resume(port) };
}

/// Thread id and dispatch-queue slot address of `port` (`THREAD_IDENTIFIER_INFO`).
pub fn identify(port: mach_port_t) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `thread_identifier_info` is a valid value (plain integers).
    let mut info: libc::thread_identifier_info = unsafe { core::mem::zeroed() };
    let mut count = libc::THREAD_IDENTIFIER_INFO_COUNT;
    // SAFETY: `info` is a writable buffer of `count` integers, as thread_info requires for this flavor.
    let kr = unsafe {
        libc::thread_info(
            port,
            libc::THREAD_IDENTIFIER_INFO as libc::thread_flavor_t,
            (&mut info as *mut libc::thread_identifier_info).cast(),
            &mut count,
        )
    };
    (kr == KERN_SUCCESS).then_some((info.thread_id, info.dispatch_qaddr))
}

/// Copies the thread's name (`THREAD_EXTENDED_INFO.pth_name`, at most 64 bytes) into `out`; returns its length.
pub fn name(port: mach_port_t, out: &mut [u8; 64]) -> usize {
    // SAFETY: an all-zero `thread_extended_info` is a valid value (integers and a char array).
    let mut info: libc::thread_extended_info = unsafe { core::mem::zeroed() };
    let mut count = libc::THREAD_EXTENDED_INFO_COUNT;
    // SAFETY: `info` is a writable buffer of `count` integers, as thread_info requires for this flavor.
    let kr = unsafe {
        libc::thread_info(
            port,
            libc::THREAD_EXTENDED_INFO as libc::thread_flavor_t,
            (&mut info as *mut libc::thread_extended_info).cast(),
            &mut count,
        )
    };
    if kr != KERN_SUCCESS {
        return 0;
    }
    let mut n = 0usize;
    for (dst, c) in out.iter_mut().zip(info.pth_name.iter()) {
        if *c == 0 {
            break;
        }
        *dst = *c as u8;
        n = n.saturating_add(1);
    }
    n
}

/// The dispatch queue label of a thread whose `THREAD_IDENTIFIER_INFO.dispatch_qaddr` is `qaddr`, through bounded
/// fault-proof reads only: the queue pointer stored at `qaddr`, the label pointer at `label_offset` inside the queue
/// object (learned at install), then the C string. Returns the bytes copied into `out`.
pub fn queue_label(reader: &TaskReader, qaddr: u64, label_offset: u64, out: &mut [u8]) -> usize {
    if qaddr == 0 {
        return 0;
    }
    let Some(queue) = reader.read_u64(qaddr).filter(|q| *q != 0) else { return 0 };
    let Some(label) = queue.checked_add(label_offset).and_then(|a| reader.read_u64(a)) else { return 0 };
    let mut read = |a: u64, b: &mut [u8]| reader.read_into(a, b);
    crash_info::read_c_string(&mut read, label, out).map_or(0, |r| r.len)
}

/// The native thread-state flavor and word count, and the exception-state flavor and word count, of this CPU.
#[cfg(target_arch = "aarch64")]
pub const FLAVORS: (i32, usize, i32, usize) = (
    state::ARM_THREAD_STATE64,
    state::ARM_THREAD_STATE64_COUNT,
    state::ARM_EXCEPTION_STATE64,
    state::ARM_EXCEPTION_STATE64_COUNT,
);
/// The native thread-state flavor and word count, and the exception-state flavor and word count, of this CPU.
#[cfg(not(target_arch = "aarch64"))]
pub const FLAVORS: (i32, usize, i32, usize) = (
    state::X86_THREAD_STATE64,
    state::X86_THREAD_STATE64_COUNT,
    state::X86_EXCEPTION_STATE64,
    state::X86_EXCEPTION_STATE64_COUNT,
);

/// Words of the largest state read here (`ARM_THREAD_STATE64_COUNT`).
pub const STATE_WORDS: usize = 68;

/// Reads state `flavor` of `port` into `out`; returns the number of words the kernel filled.
pub fn get_state(port: mach_port_t, flavor: i32, out: &mut [u32; STATE_WORDS]) -> Option<usize> {
    let mut count = STATE_WORDS as mach_msg_type_number_t;
    // SAFETY: `out` is a writable array of `count` 32-bit words, as thread_get_state requires.
    let kr = unsafe { thread_get_state(port, flavor, out.as_mut_ptr(), &mut count) };
    (kr == KERN_SUCCESS).then_some(count as usize)
}

/// Decodes native thread-state words (and optional exception-state words) into a register set; `pac` strips `fp`,
/// `lr`, `sp` and `pc` on arm64e (`crate::platform::darwin::crash::state::arm64_from_words`).
pub fn decode(thread: &[u32], exception: Option<&[u32]>, pac: Option<PacStrip>) -> Option<RegisterValues> {
    if cfg!(target_arch = "aarch64") {
        let mut out = [None; state::ARM64_REG_COUNT];
        state::arm64_from_words(thread, exception, pac, &mut out).ok()?;
        Some(RegisterValues::from_options(aarch64::SET, &out))
    } else {
        let mut out = [None; state::X86_64_REG_COUNT];
        state::x86_64_from_words(thread, exception, &mut out).ok()?;
        Some(RegisterValues::from_options(x86_64::SET, &out))
    }
}

/// Registers of a (suspended, or blocked in an exception) thread: native thread state, plus the exception state
/// when `crashed`. Only the crashed thread's exception state describes a fault: every other thread's holds its last
/// exception, usually the `svc` of the system call it is blocked in, which would show as a stale `far`/`esr`.
pub fn registers(port: mach_port_t, pac: Option<PacStrip>, crashed: bool) -> Option<RegisterValues> {
    let (flavor, words, exc_flavor, exc_words) = FLAVORS;
    let mut ts = [0u32; STATE_WORDS];
    let n = get_state(port, flavor, &mut ts)?;
    let mut es = [0u32; STATE_WORDS];
    let exc = if crashed {
        get_state(port, exc_flavor, &mut es).filter(|m| *m >= exc_words).and_then(|m| es.get(..m))
    } else {
        None
    };
    decode(ts.get(..n.min(words))?, exc, pac)
}

/// Whether `tid` is the id of a thread of this task (`task_threads` + `THREAD_IDENTIFIER_INFO`; the list and every
/// right are released again). `false` when the list cannot be taken.
pub fn thread_in_task(tid: u64) -> bool {
    let Some(list) = ThreadList::take() else { return false };
    let found = crate::platform::darwin::crash::policy::thread_id_listed(
        tid,
        (0..list.len()).filter_map(|i| identify(list.port(i)).map(|(t, _)| t)),
    );
    list.release();
    found
}

/// Unblocks `signals` (Darwin numbers) with `sigprocmask(SIG_UNBLOCK)`, which XNU applies to the whole process
/// (see `crate::platform::darwin::crash::policy::SIGNALS_TO_UNBLOCK`). Async-signal-safe.
pub fn unblock_signals(signals: &[i32]) {
    let mut set: libc::sigset_t = 0;
    // SAFETY: `set` is a valid sigset_t; sigemptyset/sigaddset only write it, and sigprocmask reads it (a null old
    // set is allowed).
    unsafe {
        libc::sigemptyset(&mut set);
        for s in signals {
            libc::sigaddset(&mut set, *s);
        }
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
    }
}

/// Exception state words of `port` (for `far`/`esr` of a crashed thread whose thread state came in the message).
pub fn exception_state(port: mach_port_t, out: &mut [u32; STATE_WORDS]) -> Option<usize> {
    let (_, _, exc_flavor, exc_words) = FLAVORS;
    get_state(port, exc_flavor, out).filter(|m| *m >= exc_words)
}

/// Sets the task's exception ports for `mask` (`task_set_exception_ports`); `true` on success.
pub fn set_ports(mask: u32, port: mach_port_t, behavior: u32, flavor: i32) -> bool {
    // SAFETY: plain values; the kernel validates the port name and behaviour.
    unsafe { task_set_exception_ports(task(), mask, port, behavior as i32, flavor) == KERN_SUCCESS }
}

/// Puts back the exception ports saved at install for the exceptions in `mask`: first clears `mask` (so no bit is
/// left pointing at our port), then re-registers every saved handler with its own behaviour and flavor.
pub fn restore_ports(mask: u32, saved: &SavedPorts, state_none: i32) {
    let _ = set_ports(mask, MACH_PORT_NULL, crate::platform::darwin::crash::exc::EXCEPTION_DEFAULT, state_none);
    for e in saved.entries() {
        let _ = set_ports(e.mask, e.port, e.behavior, e.flavor);
    }
}

/// Whether `port` is still the task's handler for every exception in `mask` (`task_get_exception_ports`; every
/// returned right is released again). `false` when the call fails or `mask` is 0.
pub fn ports_are(port: mach_port_t, mask: u32) -> bool {
    if mask == 0 {
        return false;
    }
    const N: usize = crate::platform::darwin::crash::ports::EXC_TYPES_COUNT;
    let mut masks = [0u32; N];
    let mut ports = [0u32; N];
    let mut behaviors = [0i32; N];
    let mut flavors = [0i32; N];
    let mut count = N as mach_msg_type_number_t;
    // SAFETY: four writable arrays of N entries and their count, as task_get_exception_ports requires.
    let kr = unsafe {
        task_get_exception_ports(
            task(),
            mask,
            masks.as_mut_ptr(),
            &mut count,
            ports.as_mut_ptr(),
            behaviors.as_mut_ptr(),
            flavors.as_mut_ptr(),
        )
    };
    if kr != KERN_SUCCESS {
        return false;
    }
    let n = (count as usize).min(N);
    let mut b = [0u32; N];
    for (d, s) in b.iter_mut().zip(behaviors.iter()) {
        *d = *s as u32;
    }
    let current = SavedPorts::from_arrays(&masks, &ports, &b, &flavors, n);
    for e in current.entries() {
        if e.port != MACH_PORT_NULL {
            // SAFETY: task_get_exception_ports handed us a send right for each handler; drop it once.
            unsafe { mach_port_deallocate(task(), e.port) };
        }
    }
    current.port_covers(port, mask)
}
