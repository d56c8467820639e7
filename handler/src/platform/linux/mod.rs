//! Linux backend: install, uninstall and image refresh (install time; these allocate and may lock), and the crash
//! path in [`crash`].
#![allow(unsafe_code)]

// Runs after a fault: the crash-path lints.
crash_path_mod! { pub mod crash; }
pub mod images;
pub mod ondemand;
pub mod threads;

use self::crash::memory::PipeUse;
use self::crash::{sys, ChainRecord, State, STATE};
use crate::config::Config;
use crate::crash::actions::{SavedActions, FATAL_SIGNALS};
use crate::crash::capture::{Core, Text};
use crate::crash::images::ImageTable;
use crate::crash::raw_buf::RawBuf;
use crate::error::InstallError;
use crate::prealloc::{self, leak_bytes, leak_resident, leak_zeroed};
use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

/// Bytes of the `getdents64` buffer.
const DIRENT_BYTES: usize = 16 * 1024;

/// What install changed, so uninstall can undo it.
struct Installed {
    state: &'static State,
    old_altstack: libc::stack_t,
    installer_tid: u64,
    ondemand: ondemand::Installed,
}

// SAFETY: `old_altstack` holds a plain pointer value that is only handed back to `sigaltstack`.
unsafe impl Send for Installed {}

static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);

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

/// Installs the handler. See [`crate::install()`].
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
    let capture_signal = ondemand::capture_signal(config, stop_signal)?;

    let unfiltered = !under_seccomp_filter();
    let dir_fd = prealloc::open_report_dir(&config.report_dir, config.reserved_report_bytes)?;
    let close_dir = |e: InstallError| {
        crate::crash::writer::release_reserved(dir_fd);
        // SAFETY: closing the descriptor opened above, which nothing else uses yet.
        unsafe { libc::close(dir_fd) };
        e
    };
    // Everything is read and allocated before the first handler is set: the state is complete and never written
    // again once a handler can see it.
    let state: &'static State =
        Box::leak(Box::new(build_state(config, dir_fd, stop_signal, unfiltered).map_err(close_dir)?));
    let (alt_base, alt_size) = prealloc::map_stack(config.alt_stack_size).map_err(close_dir)?;
    // SAFETY: the stack was just mapped and is not installed yet.
    unsafe { prealloc::prefault_top(alt_base, alt_size, config.alt_stack_prefault_bytes) };
    // Every thread created from now on gets its own alternate stack (stack overflows on it are reported), its top
    // pages in memory, and its stack bounds recorded; see `threads`.
    threads::enable(config.alt_stack_size, config.alt_stack_prefault_bytes).map_err(close_dir)?;
    // Stacks on demand (`crate::stacks`): walkers and the capture signal's handler.
    let on_demand = ondemand::install(config, &state.core, &state.images, capture_signal).map_err(close_dir)?;

    // Publish the state before any handler can run.
    STATE.store(core::ptr::from_ref(state).cast_mut(), Ordering::Release);

    // SAFETY: plain libc calls with valid in/out pointers; the handler functions have the SA_SIGINFO signature.
    unsafe {
        let mut old_alt: libc::stack_t = core::mem::zeroed();
        let new_alt = libc::stack_t { ss_sp: alt_base as *mut libc::c_void, ss_flags: 0, ss_size: alt_size };
        libc::sigaltstack(&new_alt, &mut old_alt);

        // Stop signal: SA_RESTART so interrupted system calls of stopped threads resume. Every signal but the
        // fatal ones is blocked while a thread is stopped, so no other handler runs on it meanwhile.
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = crash::stop_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        act.sa_mask = crash::handler_mask();
        libc::sigaction(stop_signal, &act, core::ptr::null_mut());

        // Fatal signals: SA_NODEFER so a fault inside the handler re-enters it (a blocked fault would kill the
        // process without a report); every other signal is blocked (the stop signal, so the owner is never
        // stopped; and any other handler, which would run on our stacks: see `crash::handler_mask`).
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = crash::fatal_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        act.sa_mask = crash::handler_mask();
        for sig in FATAL_SIGNALS {
            libc::sigaction(sig, &act, core::ptr::null_mut());
        }
        *guard = Some(Installed { state, old_altstack: old_alt, installer_tid: sys::gettid(), ondemand: on_demand });
    }
    Ok(())
}

/// Whether a seccomp filter confines the calling thread (`Seccomp:` of `/proc/thread-self/status` is not 0;
/// `proc(5)`: the thread's own, since a filter can be set on one thread; `/proc/self/status` shows the main
/// thread's). Read from the file rather than asked with `prctl(PR_GET_SECCOMP)`, which a filter may itself forbid;
/// in one `read` of up to 4 KiB (the file is about 1.5 KiB; each `read` of it is a system call). `true` when it
/// cannot be told (`/proc` not mounted, Linux before 3.17). Every Android app runs under a filter. Install time.
pub fn under_seccomp_filter() -> bool {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    let Ok(mut f) = std::fs::File::open("/proc/thread-self/status") else { return true };
    let Ok(n) = f.read(&mut buf) else { return true };
    let text = buf.get(..n).unwrap_or(&[]);
    let value = text.split(|b| *b == b'\n').find_map(|l| l.strip_prefix(b"Seccomp:"));
    value.is_none_or(|v| v.trim_ascii() != b"0")
}

fn build_state(config: &Config, dir_fd: i32, stop_signal: i32, unfiltered: bool) -> Result<State, InstallError> {
    let exe = std::fs::read_link("/proc/self/exe").map(|p| p.as_os_str().as_bytes().to_vec()).unwrap_or_default();
    let exe_path = leak_bytes(&exe);
    let images = ImageTable::new(prealloc::image_list(config)?, prealloc::image_list(config)?);
    // SAFETY: the table is not shared yet; this is the only writer.
    unsafe { images.update(|l| images::snapshot(l, exe_path)) };
    let memo = crash::link_map::Memo::new(
        leak_zeroed::<u64>(config.max_images)?,
        leak_zeroed::<u64>(config.max_images.saturating_mul(4))?,
    );
    let crash_images =
        crash::link_map::CrashImages::new(images::link_map_source(), exe_path, prealloc::image_list(config)?, memo);
    // Where `process_vm_readv` cannot read this process, every read of the crash path goes through this pipe.
    let mem_pipe = if crash::memory::process_vm_readv_works() { None } else { sys::pipe_nonblocking() };
    {
        // The crash-time list, built now from the link map and remembered (`Memo`): a crash while no library was
        // loaded or unloaded since skips the walk.
        let mut cache = vec![0u8; 8 * crash::memory::BLOCK];
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let mut mem = crash::memory::ProcessVmReader::new(pid, &mut cache).with_pipe(mem_pipe, PipeUse::Everything);
        // SAFETY: install, before the fatal signal handlers are set: nothing else uses the crash-time list.
        unsafe { crash_images.prime(&mut mem, images.current()) };
    }
    let (crash_base, crash_size) = prealloc::map_stack(config.crash_stack_size)?;
    // SAFETY: the crash stack was just mapped; nothing uses it yet.
    unsafe { prealloc::prefault_top(crash_base, crash_size, config.crash_stack_prefault_bytes) };
    let (os_release, os_version, machine) = uname_text();
    let text = Text {
        os_name: b"Linux",
        os_version: os_release,
        os_build: os_version,
        hardware_model: machine,
        exe_path,
        exe_name: leak_bytes(exe.rsplit(|b| *b == b'/').next().unwrap_or(&[])),
        parent_name: b"",
        app_id: leak_bytes(config.app_id.as_bytes()),
        short_version: leak_bytes(config.short_version.as_bytes()),
        build_version: leak_bytes(config.build_version.as_bytes()),
    };
    Ok(State {
        core: Core::new(dir_fd, prealloc::thread_table(config)?, text, prealloc::writer_buffers(config)?),
        stop_signal,
        stop_sender: core::sync::atomic::AtomicI32::new(0),
        stop_timeout_ns: u64::from(config.stop_timeout_ms) * 1_000_000,
        sigblk_truthful: sigblk_is_truthful(stop_signal),
        unfiltered,
        release_timeout_ns: u64::from(config.release_timeout_ms) * 1_000_000,
        images,
        crash_images,
        dirents: RawBuf::new(leak_resident::<u8>(DIRENT_BYTES)?),
        page: RawBuf::new(leak_resident::<u8>(crash::memory::CACHE_BYTES)?),
        mem_pipe,
        crash_stack_top: (crash_base + crash_size) & !15,
        crash_stack: (crash_base, crash_size),
        prev_fatal: SavedActions::read(),
        prev_stop: crate::crash::actions::current(stop_signal)
            // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask).
            .unwrap_or_else(|| unsafe { core::mem::zeroed() }),
        chain: UnsafeCell::new(ChainRecord::EMPTY),
    })
}

/// Uninstalls the handler. See [`crate::uninstall`].
///
/// The hang watchdog is stopped first (a hang report under way is finished), and the report directory is closed
/// only once no non-fatal report is being written (`crate::nonfatal`; left open if one does not finish in 10 s).
pub fn uninstall() -> Result<(), InstallError> {
    if !is_installed() {
        return Err(InstallError::NotInstalled);
    }
    crate::hangs::stop();
    let mut guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(inst) = guard.take() else { return Err(InstallError::NotInstalled) };
    threads::disable();
    ondemand::uninstall(&inst.ondemand);
    let st = inst.state;
    // SAFETY: restoring the actions saved at install, with valid pointers.
    unsafe {
        st.prev_fatal.restore_all();
        libc::sigaction(st.stop_signal, &st.prev_stop, core::ptr::null_mut());
        if sys::gettid() == inst.installer_tid {
            libc::sigaltstack(&inst.old_altstack, core::ptr::null_mut());
        }
    }
    crate::crash::writer::release_reserved(st.core.dir_fd);
    crate::nonfatal::while_no_report_is_written(|| {
        // SAFETY: closing the directory opened at install; no non-fatal report is written meanwhile, and the
        // on-demand state that names it is unpublished.
        unsafe { libc::close(st.core.dir_fd) };
    });
    STATE.store(core::ptr::null_mut(), Ordering::Release);
    Ok(())
}

/// Re-snapshots the image list. See [`crate::refresh_images`].
pub fn refresh_images() -> Result<usize, InstallError> {
    let guard = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(inst) = guard.as_ref() else { return Err(InstallError::NotInstalled) };
    let st = inst.state;
    // SAFETY: updates are serialized by the INSTALLED lock held here.
    unsafe { st.images.update(|l| images::snapshot(l, st.core.text.exe_path)) };
    Ok(st.images.current().len())
}

/// Whether the handler is installed.
pub fn is_installed() -> bool {
    INSTALLED.lock().map(|g| g.is_some()).unwrap_or(false)
}

/// Whether `/proc` reports the calling thread's own signal mask truthfully: with `sig` blocked (by
/// `pthread_sigmask`) its `SigBlk` line must show it, and after the mask is restored must not. Install time, on the
/// installing thread. False under qemu-user, where `/proc` shows the emulator's host mask instead of the guest's:
/// there the crash owner must not give up early on threads that seem to block the stop signal.
fn sigblk_is_truthful(sig: i32) -> bool {
    let tid = crash::sys::gettid();
    // SAFETY: zeroed sigset_t values are valid; sigemptyset/sigaddset initialize `one`.
    let (mut one, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { (core::mem::zeroed(), core::mem::zeroed()) };
    // SAFETY: valid pointers to our own sigset_t values.
    unsafe {
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, sig);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &one, &mut old) != 0 {
            return false;
        }
    }
    // SAFETY: `old` was filled by pthread_sigmask.
    let was_blocked = unsafe { libc::sigismember(&old, sig) } == 1;
    let blocked = crash::tasks::blocks_signal(tid, sig);
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    let restored = crash::tasks::blocks_signal(tid, sig);
    blocked == Some(true) && restored == Some(was_blocked)
}

#[cfg(test)]
mod state_tests {
    use crate::config::Config;
    use crate::prealloc::{page_size, resident};
    use std::os::fd::AsRawFd;

    /// `under_seccomp_filter` reads the `Seccomp:` line as `proc(5)` describes it: it agrees with the process's
    /// status read whole (this test's thread has no filter of its own). The missing-line case (a filter assumed) is
    /// not reached here.
    #[test]
    fn the_seccomp_check_agrees_with_the_status_file() {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let mode = status.lines().find_map(|l| l.strip_prefix("Seccomp:")).map(str::trim);
        assert_eq!(super::under_seccomp_filter(), mode != Some("0"), "Seccomp: {mode:?}");
    }

    /// The crash stack's top `crash_stack_prefault_bytes` are in memory once install has built its state, and
    /// nothing below them: the crash owner's walk takes no page faults there. With 0, not even the top page is.
    #[test]
    fn the_crash_stack_top_is_in_memory_after_install() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dir_fd = std::fs::File::open(dir.path()).expect("open dir");
        let page = page_size();
        for (bytes, want) in [(64 * 1024, true), (0, false)] {
            let config = Config { crash_stack_prefault_bytes: bytes, ..Config::new(dir.path()) };
            let st = super::build_state(&config, dir_fd.as_raw_fd(), libc::SIGRTMAX() - 4, true).expect("state");
            let (base, size) = st.crash_stack;
            let top = base + size;
            let pages: Vec<Option<bool>> = (1..=64 * 1024 / page).map(|i| resident(top - i * page)).collect();
            assert!(pages.iter().all(|p| *p == Some(want)), "prefault {bytes}: {pages:?}");
            assert_eq!(resident(top - (64 * 1024 + page)), Some(false), "the rest is left alone");
        }
    }
}

#[cfg(test)]
mod sigblk_tests {
    /// Natively `/proc` shows the thread's own mask, blocked and restored; the check leaves the mask as it found it.
    /// (Under qemu-user, recognised here by its missing `process_vm_readv`, `/proc` shows the emulator's host mask:
    /// the check may then say false, which only makes the owner wait longer; nothing is asserted there.)
    #[test]
    fn sigblk_reports_the_own_mask_natively() {
        let sig = libc::SIGRTMIN() + 5;
        let truthful = super::sigblk_is_truthful(sig);
        if super::crash::memory::process_vm_readv_works() {
            assert!(truthful, "/proc SigBlk does not follow pthread_sigmask on this kernel");
        } else {
            eprintln!("under an emulator: /proc SigBlk truthful = {truthful}");
        }
        // SAFETY: reading the current mask into a zeroed set.
        let mut now: libc::sigset_t = unsafe { core::mem::zeroed() };
        // SAFETY: valid out pointer; a null new set only queries.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, core::ptr::null(), &mut now) };
        // SAFETY: `now` was filled above.
        assert_eq!(unsafe { libc::sigismember(&now, sig) }, 0, "the check restored the mask");
    }
}
