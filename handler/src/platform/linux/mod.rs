//! Linux backend: install, uninstall and image refresh (install time; these allocate and may lock), and the crash
//! path in [`crash`].
#![allow(unsafe_code)]

// Runs after a fault: no indexing, unwrapping or panicking (tests excepted). The unwinder also denies unchecked
// arithmetic; here that lint is on the modules that already meet it.
#[cfg_attr(not(test), deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic))]
pub mod crash;
pub mod images;
pub mod threads;

use self::crash::{sys, CrashRecord, RawBuf, State, Text, FATAL_SIGNALS, STATE};
use crate::config::Config;
use crate::crash::images::{ImageEntry, ImageList, ImageTable};
use crate::crash::threads::{ThreadSlot, ThreadTable};
use crate::install::{leak_bytes, leak_slice, InstallError};
use crate::unwind::Repeat;
use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

/// Bytes of one section's scratch buffer.
const SCRATCH_BYTES: usize = 64 * 1024;
/// Bytes of the file sink's write buffer.
const WRITE_BUF_BYTES: usize = 64 * 1024;
/// Bytes of the `getdents64` buffer.
const DIRENT_BYTES: usize = 16 * 1024;
/// Repeat records per thread.
const REPEATS: usize = 32;

/// What install changed, so uninstall can undo it.
struct Installed {
    state: &'static State,
    old_altstack: libc::stack_t,
    installer_tid: u64,
}

// SAFETY: `old_altstack` holds a plain pointer value that is only handed back to `sigaltstack`.
unsafe impl Send for Installed {}

static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);

/// Maps `size` bytes plus a guard page below; returns the 16-aligned top.
fn map_stack(size: usize) -> Result<(usize, usize), InstallError> {
    let page = 4096usize;
    let size = size.div_ceil(page) * page;
    // SAFETY: anonymous private mapping with no address hint; the result is checked.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            size + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(InstallError::Os {
            what: "mmap of a signal stack",
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        });
    }
    // SAFETY: the first page of our own fresh mapping becomes the guard page.
    unsafe { libc::mprotect(p, page, libc::PROT_NONE) };
    let base = p as usize + page;
    Ok((base, size))
}

fn uname_text() -> (&'static [u8], &'static [u8], &'static [u8]) {
    // SAFETY: `uname` fills the zeroed struct; the fields are NUL-terminated C strings.
    unsafe {
        let mut u: libc::utsname = core::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return (b"", b"", b"");
        }
        let f = |s: &[libc::c_char]| leak_bytes(std::ffi::CStr::from_ptr(s.as_ptr()).to_bytes());
        (f(&u.release), f(&u.version), f(&u.machine))
    }
}

/// Installs the handler. See [`crate::install`].
pub fn install(config: &Config) -> Result<(), InstallError> {
    let mut guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_some() {
        return Err(InstallError::AlreadyInstalled);
    }
    config.check()?;
    let stop_signal = config.stop_signal.unwrap_or_else(|| libc::SIGRTMAX() - 4);
    if stop_signal < libc::SIGRTMIN() || stop_signal > libc::SIGRTMAX() {
        return Err(InstallError::InvalidConfig("stop_signal is not a real-time signal"));
    }

    let dir_fd = crate::install::open_report_dir(&config.report_dir)?;

    let built = build_state(config, dir_fd, stop_signal);
    let state: &'static State = match built {
        Ok(s) => Box::leak(Box::new(s)),
        Err(e) => {
            // SAFETY: closing the descriptor we opened above.
            unsafe { libc::close(dir_fd) };
            return Err(e);
        }
    };
    let (alt_base, alt_size) = map_stack(config.alt_stack_size)?;
    // Every thread created from now on gets its own alternate stack (stack overflows on it are reported) and its
    // stack bounds recorded; see `threads`.
    if let Err(e) = threads::enable(config.alt_stack_size) {
        // SAFETY: closing the descriptor we opened above.
        unsafe { libc::close(dir_fd) };
        return Err(e);
    }

    // Publish the state before any handler can run.
    STATE.store(state as *const State as *mut State, Ordering::Release);

    // SAFETY: plain libc calls with valid in/out pointers; the handler functions have the SA_SIGINFO signature.
    unsafe {
        let mut old_alt: libc::stack_t = core::mem::zeroed();
        let new_alt = libc::stack_t { ss_sp: alt_base as *mut libc::c_void, ss_flags: 0, ss_size: alt_size };
        libc::sigaltstack(&new_alt, &mut old_alt);

        let prev = state as *const State as *mut State;
        // Stop signal: SA_RESTART so interrupted system calls of stopped threads resume. Every signal but the
        // fatal ones is blocked while a thread is stopped, so no other handler runs on it meanwhile.
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = crash::stop_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        act.sa_mask = crash::handler_mask();
        libc::sigaction(stop_signal, &act, &mut (*prev).prev_stop);

        // Fatal signals: SA_NODEFER so a fault inside the handler re-enters it (a blocked fault would kill the
        // process without a report); every other signal is blocked (the stop signal, so the owner is never
        // stopped; and any other handler, which would run on our stacks: see `crash::handler_mask`).
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = crash::fatal_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        act.sa_mask = crash::handler_mask();
        for (i, sig) in FATAL_SIGNALS.iter().enumerate() {
            let slot = (*prev).prev_fatal.as_mut_ptr().add(i);
            libc::sigaction(*sig, &act, slot);
        }
        *guard = Some(Installed { state, old_altstack: old_alt, installer_tid: sys::gettid() });
    }
    Ok(())
}

fn build_state(config: &Config, dir_fd: i32, stop_signal: i32) -> Result<State, InstallError> {
    let slots: &'static [ThreadSlot] = {
        let mut v = Vec::new();
        v.try_reserve_exact(config.max_threads).map_err(|_| InstallError::OutOfMemory)?;
        v.extend((0..config.max_threads).map(|_| ThreadSlot::new()));
        Vec::leak(v)
    };
    let exe = std::fs::read_link("/proc/self/exe").map(|p| p.as_os_str().as_bytes().to_vec()).unwrap_or_default();
    let exe_path = leak_bytes(&exe);
    let exe_name = leak_bytes(exe.rsplit(|b| *b == b'/').next().unwrap_or(&[]));
    let mk_list = || -> Result<ImageList, InstallError> {
        Ok(ImageList::from_parts(
            leak_slice(config.max_images, ImageEntry::default())?,
            leak_slice(config.image_path_bytes, 0u8)?,
        ))
    };
    let images = ImageTable::new(mk_list()?, mk_list()?);
    // SAFETY: the table is not shared yet; this is the only writer.
    unsafe { images.update(|l| images::snapshot(l, exe_path)) };
    let crash_images = crash::link_map::CrashImages::new(images::link_map_source(), exe_path, mk_list()?);
    let (crash_base, crash_size) = map_stack(config.crash_stack_size)?;
    let (os_release, os_version, machine) = uname_text();
    // SAFETY: an all-zero sigaction is a valid placeholder (SIG_DFL, empty mask); install overwrites them.
    let zero_action: libc::sigaction = unsafe { core::mem::zeroed() };
    Ok(State {
        dir_fd,
        stop_signal,
        stop_timeout_ns: u64::from(config.stop_timeout_ms) * 1_000_000,
        release_timeout_ns: u64::from(config.release_timeout_ms) * 1_000_000,
        threads: ThreadTable::new(slots),
        images,
        crash_images,
        scratch: RawBuf::new(leak_slice(SCRATCH_BYTES, 0u8)?),
        write_buf: RawBuf::new(leak_slice(WRITE_BUF_BYTES, 0u8)?),
        frames: RawBuf::new(leak_slice(config.max_frames, 0u64)?),
        trust: RawBuf::new(leak_slice(config.max_frames, 0u8)?),
        repeats: RawBuf::new(leak_slice(REPEATS, Repeat::default())?),
        dirents: RawBuf::new(leak_slice(DIRENT_BYTES, 0u8)?),
        page: RawBuf::new(leak_slice(crash::memory::BLOCK, 0u8)?),
        mem_pipe: if crash::memory::process_vm_readv_works() { None } else { memory_pipe() },
        crash_stack_top: (crash_base + crash_size) & !15,
        crash_stack: (crash_base, crash_size),
        text: Text {
            os_release,
            os_version,
            machine,
            exe_path,
            exe_name,
            app_id: leak_bytes(config.app_id.as_bytes()),
            short_version: leak_bytes(config.short_version.as_bytes()),
            build_version: leak_bytes(config.build_version.as_bytes()),
        },
        prev_fatal: [zero_action; 7],
        prev_stop: zero_action,
        record: UnsafeCell::new(CrashRecord::EMPTY),
    })
}

fn memory_pipe() -> Option<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: valid out-array of two ints.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    (r == 0).then_some((fds[0], fds[1]))
}

/// Uninstalls the handler. See [`crate::uninstall`].
pub fn uninstall() -> Result<(), InstallError> {
    let mut guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(inst) = guard.take() else { return Err(InstallError::NotInstalled) };
    threads::disable();
    let st = inst.state;
    // SAFETY: restoring the actions saved at install, with valid pointers.
    unsafe {
        for (sig, prev) in FATAL_SIGNALS.iter().zip(st.prev_fatal.iter()) {
            libc::sigaction(*sig, prev, core::ptr::null_mut());
        }
        libc::sigaction(st.stop_signal, &st.prev_stop, core::ptr::null_mut());
        if sys::gettid() == inst.installer_tid {
            libc::sigaltstack(&inst.old_altstack, core::ptr::null_mut());
        }
        libc::close(st.dir_fd);
    }
    STATE.store(core::ptr::null_mut(), Ordering::Release);
    Ok(())
}

/// Re-snapshots the image list. See [`crate::refresh_images`].
pub fn refresh_images() -> Result<usize, InstallError> {
    let guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(inst) = guard.as_ref() else { return Err(InstallError::NotInstalled) };
    let st = inst.state;
    // SAFETY: updates are serialized by the INSTALLED lock held here.
    unsafe { st.images.update(|l| images::snapshot(l, st.text.exe_path)) };
    Ok(st.images.current().len())
}

/// Whether the handler is installed.
pub fn is_installed() -> bool {
    INSTALLED.lock().map(|g| g.is_some()).unwrap_or(false)
}
