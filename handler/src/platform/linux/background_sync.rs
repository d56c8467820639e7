//! Install time: the report file reserved at this launch is made durable in the background, so that a crash finds
//! its creation committed.
//!
//! A reservation created at install (`prealloc::reserve_report_file`) is not synced then: an `fsync` would add a
//! disk round trip (0.4-0.6 ms on the benchmark machine) to the launch. Until the file system commits it on its own
//! (ext4's journal every 5 s, its writeback after 30 s), a crash's `fdatasync` of the report would also commit the
//! file's inode, directory entry and block allocation. Here install submits an `fdatasync` that nobody waits for:
//! Linux AIO's `IOCB_CMD_FDSYNC` (`<linux/aio_abi.h>`), which Linux 4.18 and later run on a kernel worker. It costs
//! a first launch's install a read of `/proc/self/status`, a `dup` and two system calls (`io_setup`, `io_submit`),
//! and the kernel worker, which starts on the same CPU: 0.07 ms more at the median on the benchmark machine
//! (BENCHMARKS.md, "Issue 14: the file's time set early"). A later launch, which claims an earlier launch's file,
//! pays nothing. It leaves one AIO context, with its one-page event ring mapped as `/[aio]`, to the end of the
//! process: `io_destroy` would wait for the sync, and nothing reads the result.
//!
//! Not on Android, and not under a seccomp filter on Linux: a filter that does not allow `io_setup` may kill the
//! process (`SECCOMP_RET_KILL`), and Android runs every app under one. Where the kernel refuses (no `CONFIG_AIO`,
//! `fs.aio-max-nr` reached, qemu-user) nothing happens: the crash path's early sync (`crash::writer::set_early_sync`)
//! still commits the creation during a crash.
#![allow(unsafe_code)]

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

/// Submits an `fdatasync` of the file open as `fd` that the caller does not wait for; `None` when it was not
/// submitted (under a seccomp filter, on a big-endian machine, or refused by the kernel). It works on a descriptor
/// of its own (`F_DUPFD_CLOEXEC`, closed before it returns; the request holds the file), so the caller's may be
/// closed at any time, even during the call. Install time.
pub fn start(fd: i32) -> Option<Pending> {
    if cfg!(target_endian = "big") || under_seccomp_filter() {
        return None;
    }
    // SAFETY: duplicating a descriptor number; no memory arguments.
    let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    let fildes = u32::try_from(own).ok()?;
    let pending = submit(fildes);
    // SAFETY: closing the duplicate made above, which nothing else uses.
    unsafe { libc::close(own) };
    pending
}

/// `io_setup` and `io_submit` of one `IOCB_CMD_FDSYNC` of `fildes`.
fn submit(fildes: u32) -> Option<Pending> {
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: `ctx` is writable and zero, as io_setup requires.
    if unsafe { libc::syscall(libc::SYS_io_setup, 1, &mut ctx as *mut libc::c_ulong) } != 0 {
        return None;
    }
    let mut cb = Iocb { opcode: IOCB_CMD_FDSYNC, fildes, ..Iocb::default() };
    let mut list = [&mut cb as *mut Iocb];
    // SAFETY: one valid iocb, which the kernel copies during the call.
    if unsafe { libc::syscall(libc::SYS_io_submit, ctx, 1, list.as_mut_ptr()) } != 1 {
        // SAFETY: the context made above, with nothing in flight.
        unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
        return None;
    }
    Some(Pending { ctx })
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
        // SAFETY: `ev` has room for the one event asked for; `ts` outlives the call.
        let n = unsafe { libc::syscall(libc::SYS_io_getevents, self.ctx, 1, 1, &mut ev as *mut IoEvent, &ts) };
        (n == 1).then_some(ev.res)
    }
}

/// Whether a seccomp filter confines this process (`Seccomp:` of `/proc/self/status` is not 0; `proc(5)`). Read
/// from the file rather than asked with `prctl(PR_GET_SECCOMP)`, which a filter may itself forbid; in one `read`
/// of up to 4 KiB (the file is about 1.5 KiB; each `read` of it is a system call). `true` when it cannot be told.
fn under_seccomp_filter() -> bool {
    use std::io::Read;
    let mut buf = [0u8; 4096];
    let Ok(mut f) = std::fs::File::open("/proc/self/status") else { return true };
    let Ok(n) = f.read(&mut buf) else { return true };
    let text = buf.get(..n).unwrap_or(&[]);
    let value = text.split(|b| *b == b'\n').find_map(|l| l.strip_prefix(b"Seccomp:"));
    value.is_none_or(|v| v.trim_ascii() != b"0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// The layouts the kernel reads and writes (`<linux/aio_abi.h>`).
    #[test]
    fn the_aio_structures_have_the_kernels_sizes() {
        assert_eq!(core::mem::size_of::<Iocb>(), 64);
        assert_eq!(core::mem::size_of::<IoEvent>(), 32);
    }

    /// A sync submitted for a written file completes, successfully, without the submitter waiting for it; a bad
    /// descriptor is not submitted. qemu-user refuses AIO, so there `start` submits nothing.
    #[test]
    fn a_background_sync_of_a_written_file_completes() {
        let mut f = tempfile::tempfile().expect("temporary file");
        f.write_all(&[7u8; 65536]).expect("write");
        let Some(p) = start(f.as_raw_fd()) else {
            assert!(
                !crate::platform::linux::crash::memory::process_vm_readv_works() || under_seccomp_filter(),
                "AIO is refused only under qemu-user or a seccomp filter"
            );
            return;
        };
        assert_eq!(p.wait(10_000), Some(0), "the sync completed without an error");
        assert!(start(-1).is_none(), "a bad descriptor is not submitted");
        assert!(!under_seccomp_filter(), "the test process runs under no seccomp filter");
    }
}
