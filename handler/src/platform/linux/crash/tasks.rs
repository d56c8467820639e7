//! Enumerates the process's threads: `/proc/self/task` read with raw `open` and `getdents64` into a preallocated
//! buffer, parsed without allocating; and tells whether a thread blocks a signal (`SigBlk:` of its
//! `/proc/self/task/<tid>/status`, read into a stack buffer).
#![allow(unsafe_code)]

/// Offset of `d_reclen` in `struct linux_dirent64` (`d_ino` u64, `d_off` i64, `d_reclen` u16, `d_type` u8,
/// `d_name[]`). Source: `getdents64(2)`, Linux `include/linux/dirent.h`.
const RECLEN_OFF: usize = 16;
/// Offset of `d_name`.
const NAME_OFF: usize = 19;

/// Calls `f` with every numeric entry name in a `getdents64` buffer. Pure; bounds-checked.
pub fn parse_dirents(buf: &[u8], f: &mut dyn FnMut(u64)) {
    // Each record: `d_reclen` at RECLEN_OFF, the NUL-terminated name from NAME_OFF to the record's end.
    let mut rest = buf;
    while rest.len() >= NAME_OFF {
        let reclen = match rest.get(RECLEN_OFF..).and_then(|r| r.first_chunk::<2>()) {
            Some(&bytes) => usize::from(u16::from_ne_bytes(bytes)),
            None => return,
        };
        if reclen < NAME_OFF {
            return;
        }
        let (Some(record), Some(next)) = (rest.get(..reclen), rest.get(reclen..)) else { return };
        let name = record.get(NAME_OFF..).unwrap_or(&[]);
        let digits = name.iter().take_while(|b| b.is_ascii_digit()).count();
        let v = name.iter().take(digits).fold(0u64, |v, b| v.saturating_mul(10).saturating_add(u64::from(b & 0x0f)));
        // Names are NUL-terminated; "." and ".." have no digits.
        if digits > 0 && name.get(digits) == Some(&0) {
            f(v);
        }
        rest = next;
    }
}

/// Directory position of the first thread in `/proc/self/task`: positions 0 and 1 are `.` and `..`, position
/// `2 + n` is the `n`-th thread of the kernel's thread list, which lists threads in creation order (new threads
/// are appended). Source: Linux `fs/proc/base.c` (`proc_task_readdir`, `first_tid`) and `kernel/fork.c`
/// (`copy_process` appends to `signal->thread_head`).
const FIRST_THREAD_POS: i64 = 2;

/// `/proc/self/task` open for one crash: [`TaskDir::list`] reads it in full; [`TaskDir::list_again`] reads it
/// once more from a little before where that listing ended, which is where threads created since then are (the
/// kernel appends them), without the cost of the entries before (procfs builds a dentry for every entry it
/// returns: about 1 µs each). Closed when dropped. Signal-safe.
#[derive(Debug)]
pub struct TaskDir {
    fd: i32,
    /// `getdents64` calls of the last listing that returned entries.
    reads: u32,
}

impl TaskDir {
    /// Opens `/proc/self/task`. Out of descriptors (`EMFILE`), a spare reserved at install is freed and the open
    /// retried ([`crate::crash::writer::open_with_spares`]).
    ///
    /// # Errors
    /// The `errno` of `open`.
    pub fn open() -> Result<TaskDir, i32> {
        crate::crash::writer::open_with_spares(open_task_dir).map(|fd| TaskDir { fd, reads: 0 })
    }

    /// Calls `f` with every thread id from the directory's current position to its end (the whole list on a
    /// fresh [`TaskDir`]). `buf` receives the raw directory entries (16 KiB reads 500+ entries per call).
    pub fn list(&mut self, buf: &mut [u8], f: &mut dyn FnMut(u64)) {
        self.reads = read_entries(self.fd, buf, f);
    }

    /// Lists again from `back` positions before where the last listing ended: every thread created since then,
    /// provided at most `back` threads of the earlier listing have exited meanwhile, since each exit moves the
    /// later threads one position down. Threads already seen are listed again; the caller skips them.
    ///
    /// The whole directory is listed instead when the last listing took more than one `getdents64` call that
    /// returned entries (a full buffer, or a call cut short because the thread it stood on exited: procfs then
    /// resumes by position, and exits behind it make it skip live threads, which only a full listing finds
    /// again), or when the position cannot be had or set.
    pub fn list_again(&mut self, back: usize, buf: &mut [u8], f: &mut dyn FnMut(u64)) {
        // SAFETY: `lseek` on the directory we opened; SEEK_CUR with 0 only reads the position.
        let end = unsafe { libc::lseek(self.fd, 0, libc::SEEK_CUR) };
        let back = i64::try_from(back).unwrap_or(i64::MAX);
        let from = if end < 0 || self.reads > 1 { 0 } else { end.saturating_sub(back).max(FIRST_THREAD_POS) };
        // SAFETY: as above; `from` is 0 (the start) or a thread position at most the end of the last listing. A
        // seek that moves also drops the thread id procfs keeps to resume a listing cut short by a full buffer.
        if unsafe { libc::lseek(self.fd, from, libc::SEEK_SET) } != from {
            // SAFETY: as above.
            unsafe { libc::lseek(self.fd, 0, libc::SEEK_SET) };
        }
        self.reads = read_entries(self.fd, buf, f);
    }
}

impl Drop for TaskDir {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this value owns (async-signal-safe).
        unsafe { libc::close(self.fd) };
    }
}

/// Calls `f` with the id of every thread of the calling process, as [`TaskDir::list`] but without the crash
/// path's spare descriptors (out of descriptors it fails with `EMFILE`): for listings outside the crash path
/// (non-fatal reports), which must leave the spares to a crash.
///
/// # Errors
/// The `errno` of `open`.
pub fn for_each_thread_no_spares(buf: &mut [u8], f: &mut dyn FnMut(u64)) -> Result<(), i32> {
    let fd = open_task_dir();
    if fd < 0 {
        return Err(crate::crash::writer::errno());
    }
    TaskDir { fd, reads: 0 }.list(buf, f);
    Ok(())
}

/// `open` of `/proc/self/task`: the descriptor, or -1 with `errno`.
fn open_task_dir() -> i32 {
    // SAFETY: the path is a NUL-terminated literal.
    unsafe { libc::open(c"/proc/self/task".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) }
}

/// Reads the directory `fd` (`/proc/self/task`) from its position to its end into `buf` and calls `f` per thread;
/// returns how many `getdents64` calls returned entries.
fn read_entries(fd: i32, buf: &mut [u8], f: &mut dyn FnMut(u64)) -> u32 {
    let mut reads = 0u32;
    // Bounded: a directory of at most a few thousand entries ends in a few calls; the cap guards a broken procfs.
    for _ in 0..4096 {
        // SAFETY: `buf` is valid for writes of its length; `fd` is an open directory.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        reads = reads.saturating_add(1);
        parse_dirents(buf.get(..n as usize).unwrap_or(&[]), f);
    }
    reads
}

/// Bytes of `/proc/self/task/<tid>/status` read: `SigBlk:` is about 1 KiB into the file (line 35 of about 55
/// on Linux 6.x, `fs/proc/array.c` `proc_pid_status`); the rest is not needed.
const STATUS_BYTES: usize = 2048;

/// Whether a `/proc/<pid>/status` text says signal `sig` is blocked: the `SigBlk:` line is the blocked mask in hex,
/// most significant digit first, bit `sig - 1` for signal `sig` (`fs/proc/array.c` `render_sigset_t`). `None` when
/// the line is missing or cut, or `sig` is out of range. Pure; bounds-checked.
pub fn sigblk_has(status: &[u8], sig: i32) -> Option<bool> {
    mask_has(status, b"SigBlk:", sig)
}

/// Whether a `/proc/<pid>/task/<tid>/status` text says signal `sig` is pending for that very thread (`SigPnd:`,
/// the thread's private queue, where `tgkill` and `rt_tgsigqueueinfo` put a signal; `fs/proc/array.c`
/// `task_sig`). As [`sigblk_has`] otherwise.
pub fn sigpnd_has(status: &[u8], sig: i32) -> Option<bool> {
    mask_has(status, b"SigPnd:", sig)
}

/// Whether the signal mask on line `key` of a status text has signal `sig` (see [`sigblk_has`]).
fn mask_has(status: &[u8], key: &[u8], sig: i32) -> Option<bool> {
    let bit = usize::try_from(sig.checked_sub(1)?).ok()?;
    let mut start = 0usize;
    let line = loop {
        let rest = status.get(start..)?;
        let end = rest.iter().position(|b| *b == b'\n');
        let line = rest.get(..end.unwrap_or(rest.len()))?;
        if line.starts_with(key) {
            // A line without its newline may be cut by the read: only trust complete lines.
            end?;
            break line.get(key.len()..)?;
        }
        start = start.checked_add(end?.checked_add(1)?)?;
    };
    let digits = line.iter().position(|b| !b.is_ascii_whitespace()).and_then(|i| line.get(i..))?;
    let n = digits.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    // Digit for bits 4k..4k+3 counts from the right end.
    let pos = n.checked_sub(1)?.checked_sub(bit / 4)?;
    let d = char::from(*digits.get(pos)?).to_digit(16)?;
    Some(d & (1 << (bit % 4)) != 0)
}

/// Whether thread `tid` of this process blocks signal `sig`, from `/proc/self/task/<tid>/status`; `None` when it
/// cannot be told (the thread is gone, `/proc` is not mounted, no descriptor is free even after a spare was
/// freed). Crash path only: out of descriptors it frees a spare reserved at install
/// ([`crate::crash::writer::open_with_spares`]), since the task directory and the report file are open meanwhile.
/// Async-signal-safe: raw `open`/`read`/`close` into a 2 KiB stack buffer, no formatting.
pub fn blocks_signal(tid: u64, sig: i32) -> Option<bool> {
    let mut buf = [0u8; STATUS_BYTES];
    let got = read_status(tid, &mut buf, Spares::Use).ok()?;
    sigblk_has(buf.get(..got)?, sig)
}

/// Whether signal `sig` is pending for thread `tid` of this process (sent to it and not yet taken: it blocks the
/// signal, or has not run since), from `SigPnd:` of `/proc/self/task/<tid>/status`. `Some(false)` when the thread
/// does not exist (`ENOENT`: nothing is pending for a thread that exited, its queue went with it); `None` when it
/// cannot be told (`/proc` is not mounted, no descriptor is free). It leaves the crash path's spare descriptors
/// alone (stacks on demand use it). Async-signal-safe, as [`blocks_signal`].
pub fn signal_pending(tid: u64, sig: i32) -> Option<bool> {
    let mut buf = [0u8; STATUS_BYTES];
    match read_status(tid, &mut buf, Spares::Leave) {
        Ok(got) => sigpnd_has(buf.get(..got)?, sig),
        Err(libc::ENOENT | libc::ESRCH) => Some(false),
        Err(_) => None,
    }
}

/// Whether an `open` that fails for lack of descriptors may free one of the crash path's spares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spares {
    /// The crash path: free a spare and retry.
    Use,
    /// Anything else: fail with `EMFILE`.
    Leave,
}

/// Reads the start of `/proc/self/task/<tid>/status` into `buf`; how many bytes, or the `errno` of `open`.
fn read_status(tid: u64, buf: &mut [u8; STATUS_BYTES], spares: Spares) -> Result<usize, i32> {
    const PREFIX: &[u8] = b"/proc/self/task/";
    const SUFFIX: &[u8] = b"/status\0";
    let mut path = [0u8; 64];
    let mut digits = [0u8; 20];
    let mut v = tid;
    let mut n = 0usize;
    loop {
        let slot = digits.get_mut(n).ok_or(libc::EINVAL)?;
        // `v % 10` is below 10, so the sum is an ASCII digit.
        *slot = b'0'.wrapping_add((v % 10) as u8);
        n = n.saturating_add(1);
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let digits = digits.get(..n).ok_or(libc::EINVAL)?;
    for (i, b) in PREFIX.iter().chain(digits.iter().rev()).chain(SUFFIX.iter()).enumerate() {
        *path.get_mut(i).ok_or(libc::EINVAL)? = *b;
    }
    let open = || {
        // SAFETY: `path` is NUL-terminated (SUFFIX ends with NUL and fit in the buffer).
        unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) }
    };
    let fd = match spares {
        Spares::Use => crate::crash::writer::open_with_spares(open)?,
        Spares::Leave => match open() {
            fd if fd >= 0 => fd,
            _ => return Err(crate::crash::writer::errno()),
        },
    };
    let mut got = 0usize;
    // Bounded: procfs fills a read in one call; a few more guard short reads.
    for _ in 0..8 {
        let Some(rest) = buf.get_mut(got..) else { break };
        if rest.is_empty() {
            break;
        }
        // SAFETY: `rest` is valid for writes of its length; `fd` is the file we opened.
        let r = unsafe { libc::read(fd, rest.as_mut_ptr().cast(), rest.len()) };
        if r <= 0 {
            break;
        }
        got = got.saturating_add(r as usize);
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &[u8]) -> Vec<u8> {
        let reclen = (NAME_OFF + name.len() + 1).div_ceil(8) * 8;
        let mut e = vec![0u8; reclen];
        e[RECLEN_OFF..RECLEN_OFF + 2].copy_from_slice(&(reclen as u16).to_ne_bytes());
        e[NAME_OFF..NAME_OFF + name.len()].copy_from_slice(name);
        e
    }

    #[test]
    fn parses_numeric_names_only() {
        let buf = [entry(b"."), entry(b".."), entry(b"1234"), entry(b"99999999"), entry(b"12ab")].concat();
        let mut got = Vec::new();
        parse_dirents(&buf, &mut |t| got.push(t));
        assert_eq!(got, vec![1234, 99_999_999]);
        // Truncated or zero-length records stop the parse.
        let mut got = Vec::new();
        parse_dirents(&buf[..buf.len() - 3], &mut |t| got.push(t));
        assert_eq!(got, vec![1234, 99_999_999]);
        parse_dirents(&[0u8; 40], &mut |_| panic!("no entries"));
    }

    #[test]
    fn reads_the_pending_mask_of_the_thread() {
        let status = b"Name:\tx\nShdPnd:\t0000000000000002\nSigPnd:\t0400000000000000\nSigBlk:\t0000000000000001\n";
        assert_eq!(sigpnd_has(status, 59), Some(true), "SIGRTMAX-5 on x86_64 is 59: bit 58");
        assert_eq!(sigpnd_has(status, 2), Some(false), "the process-wide queue (ShdPnd) is not the thread's");
        assert_eq!(sigpnd_has(status, 1), Some(false));
        assert_eq!(sigpnd_has(b"SigPnd:\t04", 3), None, "a cut line is not trusted");
        // A thread that does not exist has nothing pending.
        assert_eq!(signal_pending(u64::from(u32::MAX >> 2), 10), Some(false));
    }

    #[test]
    fn reads_the_blocked_mask() {
        let status = b"Name:\tx\nSigPnd:\t0000000000000000\nSigBlk:\t0000000000000001\nSigIgn:\tffffffffffffffff\n";
        assert_eq!(sigblk_has(status, 1), Some(true));
        assert_eq!(sigblk_has(status, 2), Some(false));
        let rt = b"SigBlk:\t0800000000000000\n";
        assert_eq!(sigblk_has(rt, 60), Some(true), "SIGRTMAX-4 on x86_64 is 60: bit 59");
        assert_eq!(sigblk_has(rt, 59), Some(false));
        assert_eq!(sigblk_has(rt, 64), Some(false));
        assert_eq!(sigblk_has(rt, 65), None, "beyond the mask");
        assert_eq!(sigblk_has(rt, 0), None);
        assert_eq!(sigblk_has(b"SigBlk:\t0800", 60), None, "a cut line is not trusted");
        assert_eq!(sigblk_has(b"Name:\tx\n", 1), None);
    }

    #[test]
    fn tells_a_thread_that_blocks_a_signal_from_one_that_does_not() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // SAFETY: valid sigset; only this thread's mask changes.
            unsafe {
                let mut set: libc::sigset_t = core::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut());
            }
            tx.send(super::super::sys::gettid()).expect("send");
            done_rx.recv().ok();
        });
        let other = rx.recv().expect("tid");
        assert_eq!(blocks_signal(other, libc::SIGUSR2), Some(true));
        assert_eq!(blocks_signal(super::super::sys::gettid(), libc::SIGUSR2), Some(false));
        done_tx.send(()).expect("send");
        h.join().expect("join");
        assert_eq!(blocks_signal(u64::from(u32::MAX), libc::SIGUSR2), None, "no such thread");
    }

    #[test]
    fn the_second_listing_starts_near_the_end_of_the_first() {
        // 80 parked threads, listed; then one more thread, and the directory listed again from 64 positions back.
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let park = |tx: std::sync::mpsc::Sender<u64>, stop: std::sync::Arc<std::sync::atomic::AtomicBool>| {
            std::thread::spawn(move || {
                tx.send(super::super::sys::gettid()).expect("send");
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    std::thread::park_timeout(std::time::Duration::from_millis(5));
                }
            })
        };
        let mut parked: Vec<_> = (0..80).map(|_| park(tx.clone(), stop.clone())).collect();
        let old: Vec<u64> = (0..80).map(|_| rx.recv().expect("tid")).collect();
        let mut buf = vec![0u8; 16 * 1024];
        let mut dir = TaskDir::open().expect("readable");
        let mut first = Vec::new();
        dir.list(&mut buf, &mut |t| first.push(t));
        assert!(old.iter().all(|t| first.contains(t)), "every parked thread is in the first listing");
        parked.push(park(tx.clone(), stop.clone()));
        let newcomer = rx.recv().expect("tid");
        let mut again = Vec::new();
        dir.list_again(64, &mut buf, &mut |t| again.push(t));
        stop.store(true, std::sync::atomic::Ordering::Release);
        for h in parked {
            h.join().expect("join");
        }
        assert!(again.contains(&newcomer), "the thread created after the first listing: {again:?}");
        // The parked thread listed first is at least 80 positions before the end of the first listing (exits of
        // other tests' threads only move it further down), so a second listing that starts 64 back cannot list it.
        let earliest = first.iter().find(|t| old.contains(t)).expect("a parked thread");
        assert!(!again.contains(earliest), "the second listing read from the start: {} entries", again.len());
        // A first listing that took more than one `getdents64` call is followed by a whole one.
        let mut small = [0u8; 128];
        let mut dir = TaskDir::open().expect("readable");
        let mut cut = Vec::new();
        dir.list(&mut small, &mut |t| cut.push(t));
        let mut whole = Vec::new();
        dir.list_again(0, &mut small, &mut |t| whole.push(t));
        assert!(whole.contains(&cut[0]), "after a listing of several calls the second starts at the top");
    }

    #[test]
    fn finds_this_thread_and_a_spawned_one() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            tx.send(super::super::sys::gettid()).expect("send");
            done_rx.recv().ok();
        });
        let other = rx.recv().expect("tid");
        let mut buf = vec![0u8; 1024];
        let mut got = Vec::new();
        TaskDir::open().expect("readable").list(&mut buf, &mut |t| got.push(t));
        done_tx.send(()).expect("send");
        h.join().expect("join");
        assert!(got.contains(&super::super::sys::gettid()));
        assert!(got.contains(&other));
    }
}
