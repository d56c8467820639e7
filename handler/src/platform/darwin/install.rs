//! Install and uninstall of the Darwin (iOS, macOS, tvOS, watchOS, visionOS) backend, compiled only for
//! `target_vendor = "apple"`.
//!
//! **Type-checked only.** Nothing in this module has run on Apple hardware: it is built and linted with
//! `clippy -D warnings` for aarch64-apple-ios, aarch64-apple-ios-sim, x86_64-apple-ios, aarch64-apple-darwin and
//! x86_64-apple-darwin by `scripts/check-apple.sh`, and the reporter's static library for aarch64-apple-ios is
//! compiled to machine code. The pure pieces it relies on (`crate::platform::darwin::crash`, `crate::platform::darwin::crash::macho`, `crate::arch::pac`, the
//! shared `crate::crash` core and `crate::unwind`) are tested on every host.
//!
//! # Theory of operation
//!
//! **Install** ([`install`], may allocate and lock): preallocate everything the crash path touches (thread table,
//! frame buffer, section and write buffers, `__crash_info` text buffer, the list of suspended threads, the Mach
//! receive and reply buffers of both exception threads, an alternate signal stack); open the report directory;
//! start the image table ([`images`]: dyld's add/remove-image callbacks plus dyld itself from `TASK_DYLD_INFO`);
//! learn the pointer-authentication bit count from `TASK_VM_INFO.max_address` and where libdispatch keeps a queue's
//! label. Then allocate a receive right with one send right and swap it in with `task_swap_exception_ports` for
//! `EXC_BAD_ACCESS`, `EXC_BAD_INSTRUCTION`, `EXC_ARITHMETIC` and `EXC_BREAKPOINT` (`EXC_BREAKPOINT` left out when a
//! debugger is attached: `P_TRACED` from `sysctl(KERN_PROC_PID)`), with behaviour
//! `EXCEPTION_STATE_IDENTITY_PROTECTED | MACH_EXCEPTION_CODES` (iOS 18 / macOS 15 and later; no thread or task
//! control ports are handed out; the crashed thread is found by its id), falling back to
//! `EXCEPTION_IDENTITY_PROTECTED` (iOS 15–17, macOS 12–14) and then `EXCEPTION_DEFAULT` (older kernels), each with
//! `MACH_EXCEPTION_CODES` (the table is `crate::platform::darwin::crash::policy::BEHAVIOR_ATTEMPTS`). The previous handlers are kept ([`crate::platform::darwin::crash::ports::SavedPorts`]). Two exception threads start
//! ([`crash::server`]); the secondary parks itself with `thread_suspend`. Finally the signal fallback is installed
//! for `SIGABRT`, `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP` and `SIGSYS` (`SA_SIGINFO | SA_ONSTACK |
//! SA_NODEFER`), with an alternate stack for the installing thread.
//!
//! **A fault** (crash path, [`crash`]): the kernel suspends the faulting thread in exception delivery and sends the
//! request to our port. The primary thread receives it, resumes the secondary, decodes the request
//! ([`crate::platform::darwin::crash::msg::parse_request`]), takes the crash gate with the crashed thread's id, and captures: every
//! other thread is suspended (`task_threads` + `thread_suspend`; both exception threads excluded), each thread's
//! id, name (`THREAD_EXTENDED_INFO`), dispatch queue label (bounded fault-proof reads) and registers
//! (`thread_get_state` of `ARM_THREAD_STATE64` + `ARM_EXCEPTION_STATE64`, or the x86_64 pair;
//! `fp`/`lr`/`sp`/`pc` stripped of PAC bits) go into the shared thread table; the `__crash_info` messages of every image are read; the shared
//! writer walks each stack with `vm_read_overwrite` and commits the report (temporary name, `fsync`, `rename`).
//! Then the threads are resumed, every right and the thread list are released, the saved exception ports are put
//! back, the fault signals are unblocked, and the request is answered `KERN_FAILURE`. The reply does not hand the
//! crash to ReportCrash: the kernel tries the next exception level and then its exception-to-signal handler
//! (`ux_exception`) posts the signal. Our signal handler — seeing the report is written — restores the previous
//! actions and lets the fault repeat: the re-executed instruction now reaches the restored previous Mach handler
//! (on macOS the host-level port, where ReportCrash listens) and then the previous signal handler or the default
//! action. Before all of this the request is checked to be about this task: a child that inherited our ports
//! across `fork`/`exec` is answered `KERN_FAILURE` untouched (`policy::exception_is_ours`).
//!
//! **Faults the Mach path does not see** go to the signal fallback ([`crash::signals`]): `abort()` (SIGABRT), kills
//! by software, and every fault while our ports are not registered (a debugger or another library replaced them).
//! It captures on the faulting thread itself with the same `capture` (registers from the signal's `ucontext`).
//!
//! **Faults inside the handler**: a fault on the primary exception thread is raised on our own port and received by
//! the secondary, which writes a minimal report from the record the primary saved; a fault inside the signal
//! fallback is received by the primary (the owner is stopped in its exception) and gets a minimal report too.
//! Every wait is bounded.
//!
//! **Not covered**: a crash while a debugger holds the exception ports reaches us only as a signal; a stack
//! overflow on a thread without an alternate stack is caught by the Mach path only; Swift/ObjC frames without frame
//! pointers are walked by frame pointers only (no compact unwind yet); exceptions we do not register
//! (`EXC_RESOURCE`, `EXC_GUARD`, `EXC_CRASH` after `abort()`) are not captured by the Mach path.
#![allow(unsafe_code)]

use super::crash::mach::{self, FLAVORS};
use super::crash::server::{self, Role};
use super::crash::{self as crash, State, MAX_MESSAGES, MESSAGE_BYTES, STATE};
use super::{ffi, images};
use crate::arch::pac::{PacStrip, IOS_ARM64_VA_BITS, MACOS_ARM64_VA_BITS};
use crate::config::Config;
use crate::crash::actions::{SavedActions, FATAL_SIGNALS};
use crate::crash::capture::{Core, Text};
use crate::crash::images::ImageTable;
use crate::crash::raw_buf::RawBuf;
use crate::error::InstallError;
use crate::platform::darwin::crash::dyld::{
    kinfo_proc_is_traced, task_vm_info_max_address, KINFO_PROC_SIZE, TASK_VM_INFO,
};
use crate::platform::darwin::crash::exc::{
    EXC_MASK_ARITHMETIC, EXC_MASK_BAD_ACCESS, EXC_MASK_BAD_INSTRUCTION, EXC_MASK_BREAKPOINT,
};
use crate::platform::darwin::crash::msg::{REPLY_BUFFER_SIZE, REQUEST_BUFFER_SIZE};
use crate::platform::darwin::crash::policy::behavior_attempts;
use crate::platform::darwin::crash::ports::{SavedPorts, EXC_TYPES_COUNT};
use crate::prealloc::{self, leak_bytes, leak_resident, leak_zeroed};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use mach2::kern_return::KERN_SUCCESS;
use mach2::mach_port::{mach_port_allocate, mach_port_insert_right, mach_port_mod_refs};
use mach2::message::{mach_msg_type_number_t, MACH_MSG_TYPE_MAKE_SEND};
use mach2::port::{mach_port_t, MACH_PORT_NULL, MACH_PORT_RIGHT_RECEIVE};
use mach2::task::{task_info, task_swap_exception_ports};
use std::sync::Mutex;

/// Stack of each exception thread, bytes.
const EXC_THREAD_STACK: usize = 256 * 1024;

/// What install changed, so uninstall can undo it.
struct Installed {
    state: &'static State,
    old_altstack: libc::stack_t,
    installer: u32,
}

// SAFETY: `old_altstack` holds a plain pointer value that is only handed back to `sigaltstack`.
unsafe impl Send for Installed {}

static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);

fn os_err(what: &'static str, kr: i32) -> InstallError {
    InstallError::Os { what, errno: kr }
}

/// `sysctlbyname(name)` as bytes (NUL cut), empty when unavailable.
fn sysctl_text(name: &std::ffi::CStr) -> &'static [u8] {
    let mut buf = [0u8; 256];
    let mut len: libc::size_t = buf.len();
    // SAFETY: `name` is NUL-terminated; `buf`/`len` describe a writable buffer; no new value is set.
    let r = unsafe { libc::sysctlbyname(name.as_ptr(), buf.as_mut_ptr().cast(), &mut len, core::ptr::null_mut(), 0) };
    if r != 0 {
        return b"";
    }
    let s = buf.get(..len.min(buf.len())).unwrap_or(&[]);
    leak_bytes(s.split(|b| *b == 0).next().unwrap_or(&[]))
}

fn os_name() -> &'static [u8] {
    if cfg!(target_os = "ios") {
        b"iOS"
    } else if cfg!(target_os = "macos") {
        b"macOS"
    } else if cfg!(target_os = "tvos") {
        b"tvOS"
    } else if cfg!(target_os = "watchos") {
        b"watchOS"
    } else if cfg!(target_os = "visionos") {
        b"visionOS"
    } else {
        b"Darwin"
    }
}

fn text(config: &Config) -> Text {
    let exe = std::env::current_exe().map(|p| p.as_os_str().as_encoded_bytes().to_vec()).unwrap_or_default();
    let exe_path = leak_bytes(&exe);
    let model = if cfg!(target_os = "macos") { sysctl_text(c"hw.model") } else { sysctl_text(c"hw.machine") };
    Text {
        os_name: os_name(),
        os_version: sysctl_text(c"kern.osproductversion"),
        os_build: sysctl_text(c"kern.osversion"),
        hardware_model: model,
        exe_path,
        exe_name: leak_bytes(exe.rsplit(|b| *b == b'/').next().unwrap_or(&[])),
        app_id: leak_bytes(config.app_id.as_bytes()),
        short_version: leak_bytes(config.short_version.as_bytes()),
        build_version: leak_bytes(config.build_version.as_bytes()),
        parent_name: b"",
    }
}

/// PAC stripper for this task: the address-space bound from `TASK_VM_INFO`, else the platform's
/// `MACH_VM_MAX_ADDRESS`; `None` on x86_64.
fn pac_strip() -> Option<PacStrip> {
    if !cfg!(target_arch = "aarch64") {
        return None;
    }
    let mut words = [0u32; 96];
    let mut count = words.len() as mach_msg_type_number_t;
    // SAFETY: `words` is writable for `count` integers, as task_info requires.
    let kr = unsafe { task_info(mach::task(), TASK_VM_INFO, words.as_mut_ptr().cast(), &mut count) };
    let from_vm = if kr == KERN_SUCCESS { task_vm_info_max_address(&words, count as usize) } else { None };
    from_vm.and_then(PacStrip::covering).or_else(|| {
        PacStrip::with_va_bits(if cfg!(target_os = "macos") { MACOS_ARM64_VA_BITS } else { IOS_ARM64_VA_BITS })
    })
}

/// Where libdispatch keeps the label pointer inside a queue object: found on the main queue, whose label pointer
/// `dispatch_queue_get_label` tells us, by scanning the first 256 bytes of the object (fault-proof reads).
fn queue_label_offset() -> Option<u64> {
    // Only the address of libdispatch's main queue object is taken (no read), which needs no `unsafe`.
    let q = core::ptr::addr_of!(ffi::_dispatch_main_q) as u64;
    // SAFETY: a valid queue object (the main queue); the call only reads its label field.
    let label = unsafe { ffi::dispatch_queue_get_label(q as *const core::ffi::c_void) } as u64;
    if label == 0 {
        return None;
    }
    let r = mach::TaskReader::new();
    (0..32u64).map(|i| i * 8).find(|off| r.read_u64(q + off) == Some(label))
}

fn debugger_attached() -> bool {
    let mut buf = [0u8; KINFO_PROC_SIZE];
    let mut len: libc::size_t = buf.len();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut mib = [ffi::CTL_KERN, ffi::KERN_PROC, ffi::KERN_PROC_PID, pid];
    // SAFETY: `mib` names a 4-level kinfo_proc query; `buf`/`len` describe a writable buffer of its size.
    let r = unsafe { libc::sysctl(mib.as_mut_ptr(), 4, buf.as_mut_ptr().cast(), &mut len, core::ptr::null_mut(), 0) };
    r == 0 && kinfo_proc_is_traced(&buf).unwrap_or(false)
}

/// Allocates our exception port: a receive right plus one send right.
fn allocate_port() -> Result<mach_port_t, InstallError> {
    let task = mach::task();
    let mut port: mach_port_t = MACH_PORT_NULL;
    // SAFETY: valid out-pointer.
    let kr = unsafe { mach_port_allocate(task, MACH_PORT_RIGHT_RECEIVE, &mut port) };
    if kr != KERN_SUCCESS {
        return Err(os_err("mach_port_allocate", kr));
    }
    // SAFETY: `port` names the receive right just allocated.
    let kr = unsafe { mach_port_insert_right(task, port, port, MACH_MSG_TYPE_MAKE_SEND) };
    if kr != KERN_SUCCESS {
        // SAFETY: dropping the receive right we own.
        unsafe { mach_port_mod_refs(task, port, MACH_PORT_RIGHT_RECEIVE, -1) };
        return Err(os_err("mach_port_insert_right", kr));
    }
    Ok(port)
}

/// Swaps our port in for `mask`, trying the behaviours of
/// [`crate::platform::darwin::crash::policy::BEHAVIOR_ATTEMPTS`] in order (state-identity-protected, then
/// identity-protected, then `EXCEPTION_DEFAULT`). Returns the saved previous handlers.
fn swap_ports(port: mach_port_t, mask: u32) -> Result<SavedPorts, InstallError> {
    let (native, _, _, _) = FLAVORS;
    let mut last = 0;
    for (behavior, flavor) in behavior_attempts(native, crash::state_none()) {
        let mut masks = [0u32; EXC_TYPES_COUNT];
        let mut ports = [0u32; EXC_TYPES_COUNT];
        let mut behaviors = [0i32; EXC_TYPES_COUNT];
        let mut flavors = [0i32; EXC_TYPES_COUNT];
        let mut count = EXC_TYPES_COUNT as mach_msg_type_number_t;
        // SAFETY: four writable arrays of EXC_TYPES_COUNT entries and their count, as the call requires.
        let kr = unsafe {
            task_swap_exception_ports(
                mach::task(),
                mask,
                port,
                behavior as i32,
                flavor,
                masks.as_mut_ptr(),
                &mut count,
                ports.as_mut_ptr(),
                behaviors.as_mut_ptr(),
                flavors.as_mut_ptr(),
            )
        };
        if kr == KERN_SUCCESS {
            let b: Vec<u32> = behaviors.iter().map(|v| *v as u32).collect();
            return Ok(SavedPorts::from_arrays(&masks, &ports, &b, &flavors, count as usize));
        }
        last = kr;
    }
    Err(os_err("task_swap_exception_ports", last))
}

/// Waits (at most 1 s) until the secondary exception thread has parked itself.
fn wait_secondary_parked(st: &State) {
    for _ in 0..1000 {
        let port = st.secondary_port.load(Ordering::Acquire);
        if port != MACH_PORT_NULL {
            // SAFETY: an all-zero thread_basic_info is a valid out-value.
            let mut info: libc::thread_basic_info = unsafe { core::mem::zeroed() };
            let mut count = libc::THREAD_BASIC_INFO_COUNT;
            // SAFETY: `info` is writable for `count` integers, as thread_info requires for this flavor.
            let kr = unsafe {
                libc::thread_info(
                    port,
                    libc::THREAD_BASIC_INFO as libc::thread_flavor_t,
                    (&mut info as *mut libc::thread_basic_info).cast(),
                    &mut count,
                )
            };
            if kr == KERN_SUCCESS && info.suspend_count > 0 {
                return;
            }
        }
        crash::sleep_ns(1_000_000);
    }
}

/// Installs the handler. See [`crate::install()`].
pub fn install(config: &Config) -> Result<(), InstallError> {
    let mut guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_some() {
        return Err(InstallError::AlreadyInstalled);
    }
    config.check()?;
    let dir_fd = prealloc::open_report_dir(&config.report_dir, config.reserved_report_bytes)?;
    let close_dir = |e: InstallError| {
        crate::crash::writer::release_reserved(dir_fd);
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(dir_fd) };
        e
    };

    let images: &'static ImageTable = Box::leak(Box::new(ImageTable::new(
        prealloc::image_list(config).map_err(close_dir)?,
        prealloc::image_list(config).map_err(close_dir)?,
    )));
    images::start(images);

    let threads = prealloc::thread_table(config).map_err(close_dir)?;

    // Everything that can fail is allocated before our port is registered: once it is, every later error path must
    // hand the exceptions back (a registered port without a server would leave a crashing thread waiting forever).
    let writer_buffers = prealloc::writer_buffers(config).map_err(close_dir)?;
    // Written only when an image carries `__crash_info` messages: its pages may wait for their first write.
    let messages = leak_zeroed::<u8>(MAX_MESSAGES * MESSAGE_BYTES).map_err(close_dir)?;
    // Written by every crash (the threads it suspends; below, the exception request and reply): resident now.
    let suspended = leak_resident::<u32>(config.max_threads).map_err(close_dir)?;
    let words = |bytes: usize| bytes.div_ceil(4);
    let mut buffers = Vec::new();
    for _ in 0..2 {
        let rx = leak_resident::<u32>(words(REQUEST_BUFFER_SIZE)).map_err(close_dir)?;
        let tx = leak_resident::<u32>(words(REPLY_BUFFER_SIZE)).map_err(close_dir)?;
        buffers.push((rx, tx));
    }
    let (alt_base, alt_size) = prealloc::map_stack(config.alt_stack_size).map_err(close_dir)?;
    // Stacks on demand (`crate::stacks`): the walkers.
    let capture_pool = prealloc::capture_pool(config).map_err(close_dir)?;

    let mut mask = EXC_MASK_BAD_ACCESS | EXC_MASK_BAD_INSTRUCTION | EXC_MASK_ARITHMETIC | EXC_MASK_BREAKPOINT;
    if debugger_attached() {
        mask &= !EXC_MASK_BREAKPOINT;
    }
    // Mach registration failing is not fatal: the signal fallback then catches every fatal signal.
    let (exc_port, mask, saved_ports) = match allocate_port().and_then(|p| swap_ports(p, mask).map(|s| (p, s))) {
        Ok((p, s)) => (p, mask, s),
        Err(_) => (MACH_PORT_NULL, 0, SavedPorts::EMPTY),
    };

    let state = State {
        core: Core::new(dir_fd, threads, text(config), writer_buffers),
        images,
        messages: RawBuf::new(messages),
        suspended: RawBuf::new(suspended),
        pac: pac_strip(),
        queue_label_offset: queue_label_offset(),
        exc_port,
        mask,
        saved_ports,
        primary_port: AtomicU32::new(MACH_PORT_NULL),
        primary_tid: AtomicU64::new(0),
        secondary_port: AtomicU32::new(MACH_PORT_NULL),
        // Read before our handlers are set: the state is complete, and never written again, once a handler can
        // see it.
        prev_actions: SavedActions::read(),
        reported: AtomicBool::new(false),
        done: AtomicBool::new(false),
    };
    let st: &'static State = Box::leak(Box::new(state));
    STATE.store(core::ptr::from_ref(st).cast_mut(), Ordering::Release);
    let on_demand: &'static crate::ondemand::State = Box::leak(Box::new(crate::ondemand::State {
        pool: capture_pool,
        images,
        opts: crate::unwind::WalkOptions { strip: st.pac, ..crate::unwind::WalkOptions::host() },
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        dir_fd: st.core.dir_fd,
        text: &st.core.text,
    }));
    crate::ondemand::STATE.store(core::ptr::from_ref(on_demand).cast_mut(), Ordering::Release);

    if exc_port != MACH_PORT_NULL {
        for (role, (rx, tx)) in [Role::Secondary, Role::Primary].into_iter().zip(buffers) {
            let name = if role == Role::Primary { "crash-exc-primary" } else { "crash-exc-secondary" };
            let spawned = std::thread::Builder::new()
                .name(name.into())
                .stack_size(EXC_THREAD_STACK)
                .spawn(move || server::run(st, role, rx, tx));
            if spawned.is_err() {
                // No server for our port: give the exceptions back; the signal fallback then sees ports that are not
                // ours and captures every fatal signal itself.
                stop_mach(st);
                break;
            }
            if role == Role::Secondary {
                wait_secondary_parked(st);
            }
        }
    }

    // SAFETY: plain libc calls with valid in/out pointers; the handler has the SA_SIGINFO signature.
    let old_alt = unsafe {
        let mut old_alt: libc::stack_t = core::mem::zeroed();
        let new_alt = libc::stack_t { ss_sp: alt_base as *mut libc::c_void, ss_flags: 0, ss_size: alt_size };
        libc::sigaltstack(&new_alt, &mut old_alt);
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = crash::signals::fatal_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        for sig in FATAL_SIGNALS {
            libc::sigaction(sig, &act, core::ptr::null_mut());
        }
        old_alt
    };
    *guard = Some(Installed { state: st, old_altstack: old_alt, installer: server::own_port() });
    Ok(())
}

/// Hands the exceptions back to the handlers saved at install and ends our exception threads (uninstall, or an
/// install that could not start them).
fn stop_mach(st: &State) {
    if st.exc_port == MACH_PORT_NULL {
        return;
    }
    mach::restore_ports(st.mask, &st.saved_ports, crash::state_none());
    // Destroying the receive right ends both exception threads' receive loops (MACH_RCV_PORT_DIED).
    // SAFETY: we own the receive right; the threads hold no other reference to it.
    unsafe { mach_port_mod_refs(mach::task(), st.exc_port, MACH_PORT_RIGHT_RECEIVE, -1) };
    let secondary = st.secondary_port.load(Ordering::Acquire);
    if secondary != MACH_PORT_NULL {
        mach::resume(secondary);
    }
}

/// Uninstalls the handler. See [`crate::uninstall`].
pub fn uninstall() -> Result<(), InstallError> {
    if !is_installed() {
        return Err(InstallError::NotInstalled);
    }
    // The hang watchdog first (a hang report under way is finished), as on Linux.
    crate::hangs::stop();
    let mut guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(inst) = guard.take() else { return Err(InstallError::NotInstalled) };
    let st = inst.state;
    // SAFETY: restoring the actions saved at install, with valid pointers.
    unsafe {
        st.prev_actions.restore_all();
        if server::own_port() == inst.installer {
            libc::sigaltstack(&inst.old_altstack, core::ptr::null_mut());
        }
    }
    stop_mach(st);
    crate::crash::writer::release_reserved(st.core.dir_fd);
    crate::ondemand::STATE.store(core::ptr::null_mut(), Ordering::Release);
    // Closed only once no non-fatal report is being written (left open if one does not finish in 10 s).
    crate::nonfatal::while_no_report_is_written(|| {
        // SAFETY: closing the directory opened at install; no non-fatal report is written meanwhile, and the
        // on-demand state that names it is unpublished.
        unsafe { libc::close(st.core.dir_fd) };
    });
    STATE.store(core::ptr::null_mut(), Ordering::Release);
    Ok(())
}

/// Re-publishes the image table. See [`crate::refresh_images`]; on Apple platforms the dyld callbacks keep the
/// table current, so this is rarely needed.
pub fn refresh_images() -> Result<usize, InstallError> {
    let guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        return Err(InstallError::NotInstalled);
    }
    Ok(images::refresh())
}

/// Whether the handler is installed.
pub fn is_installed() -> bool {
    INSTALLED.lock().map(|g| g.is_some()).unwrap_or(false)
}
