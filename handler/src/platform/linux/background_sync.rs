//! Install time: the report file reserved at this launch is made durable in the background, so that a crash finds
//! its creation committed.
//!
//! A reservation created at install (`prealloc::reserve_report_file`) is not synced then: an `fsync` would add a
//! disk round trip (0.4-0.6 ms on the benchmark machine) to the launch. Until the file system commits it on its own
//! (ext4's journal every 5 s, its writeback after 30 s), a crash's `fdatasync` of the report would also commit the
//! file's inode, directory entry and block allocation. Here install submits an `fdatasync` it does not wait for:
//! Linux AIO's `IOCB_CMD_FDSYNC` (`<linux/aio_abi.h>`), which Linux 4.18 and later run on a kernel worker. It costs
//! a first launch's install two system calls (`io_setup`, `io_submit`) and the kernel worker, which starts on the
//! same CPU: 0.03-0.07 ms more at the median on the benchmark machine (BENCHMARKS.md, "Issue 14: the file's time
//! set early"). A later launch, which claims an earlier launch's file, pays nothing. It leaves one AIO context, its
//! event ring mapped as `/[aio]` (a page, or a few: the kernel sizes it by the number of possible CPUs), to the end
//! of the process: `io_destroy` would wait for the sync, and nothing reads the result. Nobody waits for the sync but
//! the process's exit: the kernel's `exit_aio` waits for the requests in flight, so a process that ends (or crashes)
//! within a millisecond or so of install ends when the sync does (as long as the disk takes).
//!
//! Not on Android, and not where a seccomp filter confines the installing thread
//! (`platform::linux::under_seccomp_filter`): a filter that does not allow `io_setup` may kill the process
//! (`SECCOMP_RET_KILL`), and Android runs every app under one. Where the kernel refuses (no `CONFIG_AIO`,
//! `fs.aio-max-nr` reached, qemu-user) nothing happens: the crash path's early sync (`crash::writer::set_early_sync`)
//! still commits the creation during a crash.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};

/// `struct iocb` of `<linux/aio_abi.h>` on a little-endian machine (`aio_key` before `aio_rw_flags`): 64 bytes.
#[repr(C)]
#[derive(Default)]
struct Iocb {
    data: u64,
    key: u32,
    rw_flags: u32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

/// `struct io_event` of `<linux/aio_abi.h>`: 32 bytes.
#[repr(C)]
#[derive(Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

/// `IOCB_CMD_FDSYNC` (`<linux/aio_abi.h>`).
const IOCB_CMD_FDSYNC: u16 = 3;

/// A submitted background sync: its AIO context. Dropping it leaves the context (and the sync) to the process's
/// end; [`Pending::wait`] is for tests.
#[derive(Debug)]
pub struct Pending {
    ctx: libc::c_ulong,
}

/// Submits an `fdatasync` of the file open as `fd` that the caller does not wait for, and closes `fd` (the request
/// holds the file); `None` when it was not submitted (on a big-endian machine, or refused by the kernel). The caller
/// checks first that no seccomp filter confines it (`platform::linux::under_seccomp_filter`): a filter may kill the
/// process at `io_setup`. Install time.
pub fn start(fd: OwnedFd) -> Option<Pending> {
    if cfg!(target_endian = "big") {
        return None;
    }
    let fildes = u32::try_from(fd.as_raw_fd()).ok()?;
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: `ctx` is writable and zero, as io_setup requires.
    if unsafe { libc::syscall(libc::SYS_io_setup, 1 as libc::c_long, &mut ctx as *mut libc::c_ulong) } != 0 {
        return None;
    }
    let mut cb = Iocb { opcode: IOCB_CMD_FDSYNC, fildes, ..Iocb::default() };
    let mut list = [&mut cb as *mut Iocb];
    // SAFETY: one valid iocb, which the kernel copies during the call.
    if unsafe { libc::syscall(libc::SYS_io_submit, ctx, 1 as libc::c_long, list.as_mut_ptr()) } != 1 {
        // SAFETY: the context made above, with nothing in flight.
        unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
        return None;
    }
    Some(Pending { ctx })
}

/// Whether the kernel gives this process an AIO context: `io_setup` probed (the context destroyed again at once).
/// `false` without `CONFIG_AIO`, at `fs.aio-max-nr`, and under qemu-user. Call it only where no seccomp filter may
/// forbid `io_setup` (`platform::linux::under_seccomp_filter`).
pub fn aio_available() -> bool {
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: `ctx` is writable and zero, as io_setup requires.
    if unsafe { libc::syscall(libc::SYS_io_setup, 1 as libc::c_long, &mut ctx as *mut libc::c_ulong) } != 0 {
        return false;
    }
    // SAFETY: the context made above, with nothing in flight.
    unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
    true
}

impl Pending {
    /// Waits up to `timeout_ms` milliseconds for the sync; its result (0, or a negative `errno`), `None` when it
    /// did not complete in time.
    pub fn wait(&self, timeout_ms: u64) -> Option<i64> {
        let mut ev = IoEvent::default();
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout_ms / 1000).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::try_from(timeout_ms % 1000 * 1_000_000).unwrap_or(0),
        };
        let (min, max) = (1 as libc::c_long, 1 as libc::c_long);
        // SAFETY: `ev` has room for the one event asked for; `ts` outlives the call.
        let n = unsafe { libc::syscall(libc::SYS_io_getevents, self.ctx, min, max, &mut ev as *mut IoEvent, &ts) };
        (n == 1).then_some(ev.res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The layouts the kernel reads and writes (`<linux/aio_abi.h>`).
    #[test]
    fn the_aio_structures_have_the_kernels_sizes() {
        assert_eq!(core::mem::size_of::<Iocb>(), 64);
        assert_eq!(core::mem::size_of::<IoEvent>(), 32);
    }

    /// A sync submitted for a written file completes, successfully, without the submitter waiting for it. Where
    /// AIO is refused (qemu-user, a kernel without it) or a seccomp filter rules it out, nothing is submitted.
    #[test]
    fn a_background_sync_of_a_written_file_completes() {
        let mut f = tempfile::tempfile().expect("temporary file");
        f.write_all(&[7u8; 65536]).expect("write");
        if crate::platform::linux::under_seccomp_filter() {
            eprintln!("not checked: a seccomp filter confines this test (install would not submit)");
            return;
        }
        let fd = OwnedFd::from(f.try_clone().expect("dup"));
        let Some(p) = start(fd) else {
            assert!(!aio_available(), "start submits wherever this kernel gives an AIO context");
            return;
        };
        assert_eq!(p.wait(10_000), Some(0), "the sync completed without an error");
    }
}
