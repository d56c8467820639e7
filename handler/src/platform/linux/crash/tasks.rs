//! Enumerates the process's threads: `/proc/self/task` read with raw `open` and `getdents64` into a preallocated
//! buffer, parsed without allocating.
#![allow(unsafe_code)]

/// Offset of `d_reclen` in `struct linux_dirent64` (`d_ino` u64, `d_off` i64, `d_reclen` u16, `d_type` u8,
/// `d_name[]`). Source: `getdents64(2)`, Linux `include/linux/dirent.h`.
const RECLEN_OFF: usize = 16;
/// Offset of `d_name`.
const NAME_OFF: usize = 19;

/// Calls `f` with every numeric entry name in a `getdents64` buffer. Pure; bounds-checked.
pub fn parse_dirents(buf: &[u8], f: &mut dyn FnMut(u64)) {
    let mut off = 0usize;
    while off + NAME_OFF <= buf.len() {
        let reclen = match buf.get(off + RECLEN_OFF..off + RECLEN_OFF + 2) {
            Some(b) => usize::from(u16::from_ne_bytes([b[0], b[1]])),
            None => return,
        };
        if reclen < NAME_OFF || off + reclen > buf.len() {
            return;
        }
        let name = buf.get(off + NAME_OFF..off + reclen).unwrap_or(&[]);
        let mut v: u64 = 0;
        let mut digits = 0;
        for b in name {
            match b {
                b'0'..=b'9' => {
                    v = v.saturating_mul(10).saturating_add(u64::from(b - b'0'));
                    digits += 1;
                }
                _ => break,
            }
        }
        // Names are NUL-terminated; "." and ".." have no digits.
        if digits > 0 && name.get(digits) == Some(&0) {
            f(v);
        }
        off += reclen;
    }
}

/// Calls `f` with the id of every thread of the calling process. `buf` receives the raw directory entries (16
/// KiB reads 500+ entries per call). Returns `Err(errno)` when `/proc/self/task` cannot be read.
pub fn for_each_thread(buf: &mut [u8], f: &mut dyn FnMut(u64)) -> Result<(), i32> {
    // Out of descriptors (EMFILE), a spare reserved at install is freed and the open retried.
    let fd = crate::crash::writer::open_with_spares(|| {
        // SAFETY: the path is a NUL-terminated literal.
        unsafe { libc::open(c"/proc/self/task".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) }
    })?;
    // Bounded: a directory of at most a few thousand entries ends in a few calls; the cap guards a broken procfs.
    for _ in 0..4096 {
        // SAFETY: `buf` is valid for writes of its length; `fd` is the directory we opened.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        parse_dirents(buf.get(..n as usize).unwrap_or(&[]), f);
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    Ok(())
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
        for_each_thread(&mut buf, &mut |t| got.push(t)).expect("readable");
        done_tx.send(()).expect("send");
        h.join().expect("join");
        assert!(got.contains(&super::super::sys::gettid()));
        assert!(got.contains(&other));
    }
}
