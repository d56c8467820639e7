//! Android's abort message: the text bionic's `android_set_abort_message` keeps for crash reporters (what
//! `__android_log_assert`, `LOG_ALWAYS_FATAL`, bionic's own `async_safe_fatal` and the Rust and C++ runtimes pass
//! before they `abort()`), read after the fault. Crash path.
//!
//! **Where it is** (bionic `libc/bionic/android_set_abort_message.cpp`): the first call `mmap`s an anonymous
//! private mapping, names it `abort message` with `prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, ..)` (so
//! `/proc/self/maps` lists it as `[anon:abort message]`), and lays it out as
//!
//! ```text
//! struct magic_abort_msg_t { uint64_t magic1; uint64_t magic2; struct abort_msg_t { size_t size; char msg[]; } }
//! ```
//!
//! with `magic1 = 0xb18e40886ac388f0`, `magic2 = 0xc6dfba755a1de0b5`, and `size` the whole allocation (the
//! header, the text and its NUL). Later calls keep the first message. debuggerd and Crashpad
//! (`snapshot/linux/process_reader_linux.cc`) find it the same way: by that mapping name, then the two magics.
//! The pointer bionic keeps (`__libc_shared_globals()->abort_msg`) is private, so the mapping name is the one
//! public way in.
//!
//! **How it is read here.** Only for a crash by `SIGABRT` (`crate::crash::reason::Snapshot::take`), and only where
//! a maps file is set ([`set_maps_path`]: `/proc/self/maps` on Android by default, nothing elsewhere): the file
//! is read with `open` / `read` / `close` into a 4 KiB stack buffer and scanned line by line ([`LineScanner`], a
//! 256-byte line buffer: the line we look for is about 100 bytes; longer lines are skipped) for a readable
//! mapping named `[anon:abort message]`. Its header and text are then read through the crash's fault-proof
//! [`MemoryReader`], never by a plain load; the magics must match and `size` must fit in the mapping
//! ([`message_len`]); the text is cut at [`MAX_ABORT_MSG`] bytes and at its first NUL, without a trailing
//! newline, like glibc's. Nothing allocates, nothing locks, nothing panics.
//!
//! Cost: reading the maps file is the kernel formatting one line per mapping (an Android app has a few thousand);
//! it is paid only on `SIGABRT` with a maps file set. With no descriptor left (`EMFILE` at the crash) the message
//! is lost, not the report.

use crate::crash::reason::MAX_ABORT_MSG;
use crate::unwind::MemoryReader;

/// bionic's first magic word (`fill_abort_message_magic`).
pub const MAGIC1: u64 = 0xb18e_4088_6ac3_88f0;
/// bionic's second magic word.
pub const MAGIC2: u64 = 0xc6df_ba75_5a1d_e0b5;
/// The mapping's name as `/proc/<pid>/maps` shows it (kernel `PR_SET_VMA_ANON_NAME` names appear as
/// `[anon:<name>]`).
pub const MAPPING_NAME: &[u8] = b"[anon:abort message]";
/// Offset of the text in the mapping: two `uint64_t` magics and the native `size_t` size (bionic asserts the same
/// layout with `static_assert`s).
pub const MSG_OFFSET: usize = 16 + core::mem::size_of::<usize>();
/// Longest maps line kept; longer ones (long file paths) cannot be ours and are skipped.
pub const LINE_MAX: usize = 256;

/// A readable mapping named [`MAPPING_NAME`] in one `/proc/<pid>/maps` line (without its newline): its
/// `[start, end)`. `None` for any other line, a malformed one, or an empty range. Pure.
///
/// Line format (`proc(5)`): `start-end perms offset dev inode`, then spaces and the name, which may itself
/// contain spaces (ours does).
pub fn abort_mapping(line: &[u8]) -> Option<(u64, u64)> {
    let mut rest = line;
    let mut fields: [&[u8]; 5] = [&[]; 5];
    for f in fields.iter_mut() {
        rest = skip_spaces(rest);
        let n = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
        let (field, tail) = rest.split_at_checked(n)?;
        *f = field;
        rest = tail;
    }
    if skip_spaces(rest) != MAPPING_NAME {
        return None;
    }
    let [range, perms, ..] = fields;
    if perms.first() != Some(&b'r') {
        return None;
    }
    let dash = range.iter().position(|b| *b == b'-')?;
    let (start, end) = range.split_at_checked(dash)?;
    let start = parse_hex(start)?;
    let end = parse_hex(end.get(1..)?)?;
    (start < end).then_some((start, end))
}

fn skip_spaces(s: &[u8]) -> &[u8] {
    let n = s.iter().position(|b| *b != b' ').unwrap_or(s.len());
    s.get(n..).unwrap_or(&[])
}

/// Lowercase or uppercase hex digits, 1 to 16 of them. Pure.
fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for b in s {
        let d = match b {
            b'0'..=b'9' => b.checked_sub(b'0')?,
            b'a'..=b'f' => b.checked_sub(b'a')?.checked_add(10)?,
            b'A'..=b'F' => b.checked_sub(b'A')?.checked_add(10)?,
            _ => return None,
        };
        v = v.checked_mul(16)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Splits a stream of maps-file bytes, fed in chunks of any size, into lines and finds [`abort_mapping`] among
/// them. Fixed size (a [`LINE_MAX`]-byte line buffer), no allocation. Pure.
pub struct LineScanner {
    line: [u8; LINE_MAX],
    len: usize,
    /// The current line is longer than [`LINE_MAX`]: skipped up to its newline.
    too_long: bool,
}

impl LineScanner {
    /// A scanner at the start of a file.
    pub const fn new() -> Self {
        LineScanner { line: [0; LINE_MAX], len: 0, too_long: false }
    }

    /// Feeds the next `chunk` of the file; the mapping of the first matching line it completes, if any.
    pub fn feed(&mut self, chunk: &[u8]) -> Option<(u64, u64)> {
        for &b in chunk {
            if b == b'\n' {
                let hit = self.end_line();
                if hit.is_some() {
                    return hit;
                }
                continue;
            }
            if self.too_long {
                continue;
            }
            match self.line.get_mut(self.len) {
                Some(slot) => {
                    *slot = b;
                    self.len = self.len.saturating_add(1);
                }
                None => self.too_long = true,
            }
        }
        None
    }

    /// The end of the file: the last line when it had no newline.
    pub fn finish(&mut self) -> Option<(u64, u64)> {
        self.end_line()
    }

    fn end_line(&mut self) -> Option<(u64, u64)> {
        let hit = if self.too_long { None } else { abort_mapping(self.line.get(..self.len).unwrap_or(&[])) };
        self.len = 0;
        self.too_long = false;
        hit
    }
}

impl Default for LineScanner {
    fn default() -> Self {
        Self::new()
    }
}

/// Validates the first [`MSG_OFFSET`] bytes of a mapping of `mapping_len` bytes as bionic's header: both magics,
/// and a `size` that covers the header plus at least the NUL and fits in the mapping. Returns how many bytes to
/// read after the header: `size - MSG_OFFSET` (the text, its NUL and any padding), at most [`MAX_ABORT_MSG`].
/// Pure.
pub fn message_len(header: &[u8; MSG_OFFSET], mapping_len: u64) -> Option<usize> {
    let word = |at: usize| -> Option<u64> {
        let b: [u8; 8] = header.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(u64::from_ne_bytes(b))
    };
    if word(0)? != MAGIC1 || word(8)? != MAGIC2 {
        return None;
    }
    let size_bytes: [u8; core::mem::size_of::<usize>()] = header.get(16..MSG_OFFSET)?.try_into().ok()?;
    let size = usize::from_ne_bytes(size_bytes);
    if size <= MSG_OFFSET || u64::try_from(size).ok()? > mapping_len {
        return None;
    }
    Some(size.checked_sub(MSG_OFFSET)?.min(MAX_ABORT_MSG))
}

/// Reads the abort message from the mapping `[start, end)` with `mem` into `out`: validated with
/// [`message_len`], cut at the first NUL, trailing newlines dropped. Its length; 0 when the mapping is not
/// bionic's or cannot be read. Signal-safe.
pub fn read_message<M: MemoryReader>(mem: &mut M, start: u64, end: u64, out: &mut [u8; MAX_ABORT_MSG]) -> usize {
    let mut header = [0u8; MSG_OFFSET];
    if !mem.read(start, &mut header) {
        return 0;
    }
    let Some(want) = message_len(&header, end.saturating_sub(start)) else { return 0 };
    let Some(buf) = out.get_mut(..want) else { return 0 };
    // The whole range lies inside the mapping (`message_len` checked `size` against its length).
    if !mem.read(start.saturating_add(MSG_OFFSET as u64), buf) {
        return 0;
    }
    let mut n = buf.iter().position(|b| *b == 0).unwrap_or(want);
    while n > 0 && buf.get(n.saturating_sub(1)).is_some_and(|b| *b == b'\n') {
        n = n.saturating_sub(1);
    }
    n
}

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use os::{find_mapping, maps_path, read_abort_message, set_maps_path};

#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
mod os {
    use super::{read_message, LineScanner};
    use crate::crash::reason::MAX_ABORT_MSG;
    use crate::unwind::MemoryReader;
    use core::ffi::{c_char, CStr};
    use core::sync::atomic::{AtomicPtr, Ordering};

    /// Reads of the maps file before giving up (64 MiB at 4 KiB a read: far beyond any real process).
    const MAX_READS: usize = 16 * 1024;

    /// The maps file the crash path scans (a NUL-terminated path with `'static` lifetime); null: none.
    static MAPS_PATH: AtomicPtr<c_char> = AtomicPtr::new(if cfg!(target_os = "android") {
        c"/proc/self/maps".as_ptr().cast_mut()
    } else {
        core::ptr::null_mut()
    });

    /// Sets the maps file the crash path scans for bionic's abort-message mapping after a `SIGABRT`: on Android
    /// `/proc/self/maps` by default; `None` (the default elsewhere) turns the search off. A glibc process has no
    /// such mapping unless it makes one: Linux tests turn the search on with `/proc/self/maps` (on kernels built
    /// with `CONFIG_ANON_VMA_NAME`) or with a file that lists a mapping they made under that name. Any time;
    /// the crash path reads it once, lock-free.
    pub fn set_maps_path(path: Option<&'static CStr>) {
        MAPS_PATH.store(path.map_or(core::ptr::null_mut(), |p| p.as_ptr().cast_mut()), Ordering::Release);
    }

    /// The maps file set with [`set_maps_path`], if any.
    pub fn maps_path() -> Option<&'static CStr> {
        let p = MAPS_PATH.load(Ordering::Acquire);
        // SAFETY: `MAPS_PATH` holds null or the pointer of a `&'static CStr` (`set_maps_path`, or the literal).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
    }

    /// Scans the maps file at `path` for bionic's abort-message mapping: its `[start, end)`, or `None` (no such
    /// line, the file cannot be opened or read). `open`, `read`, `close` on a 4 KiB stack buffer; signal-safe.
    pub fn find_mapping(path: &CStr) -> Option<(u64, u64)> {
        // SAFETY: `path` is NUL-terminated; plain flags.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        let mut buf = [0u8; 4096];
        let mut scanner = LineScanner::new();
        let mut found = None;
        for _ in 0..MAX_READS {
            // SAFETY: `buf` is writable for `buf.len()` bytes; `fd` is open.
            let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(r) else {
                if crate::crash::writer::errno() == libc::EINTR {
                    continue;
                }
                break;
            };
            if n == 0 {
                found = scanner.finish();
                break;
            }
            found = scanner.feed(buf.get(..n).unwrap_or(&[]));
            if found.is_some() {
                break;
            }
        }
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        found
    }

    /// bionic's abort message into `out`, read with `mem` from the mapping the maps file ([`set_maps_path`])
    /// lists; its length, 0 when there is none (no maps file set, no such mapping, not bionic's layout).
    /// Signal-safe.
    pub fn read_abort_message<M: MemoryReader>(mem: &mut M, out: &mut [u8; MAX_ABORT_MSG]) -> usize {
        let Some(path) = maps_path() else { return 0 };
        let Some((start, end)) = find_mapping(path) else { return 0 };
        read_message(mem, start, end, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &[u8] =
        b"7b1c2d3e4000-7b1c2d3e5000 rw-p 00000000 00:00 0                          [anon:abort message]";

    fn header(size: usize) -> [u8; MSG_OFFSET] {
        let mut h = [0u8; MSG_OFFSET];
        h[..8].copy_from_slice(&MAGIC1.to_ne_bytes());
        h[8..16].copy_from_slice(&MAGIC2.to_ne_bytes());
        h[16..].copy_from_slice(&size.to_ne_bytes());
        h
    }

    #[test]
    fn finds_the_abort_message_line_only() {
        assert_eq!(abort_mapping(LINE), Some((0x7b1c_2d3e_4000, 0x7b1c_2d3e_5000)));
        // Kernels pad the name to a column; any run of spaces will do, and a single one.
        assert_eq!(abort_mapping(b"1000-2000 r--p 00000000 00:00 0 [anon:abort message]"), Some((0x1000, 0x2000)));
        assert_eq!(abort_mapping(b"ABC000-ABD000 rw-p 0 00:00 0 [anon:abort message]"), Some((0xabc000, 0xabd000)));
        for other in [
            &b"1000-2000 rw-p 00000000 00:00 0                          [anon:abort message] x"[..],
            b"1000-2000 rw-p 00000000 00:00 0                          [anon:abort messag]",
            b"1000-2000 rw-p 00000000 00:00 0                          [anon:scudo:primary]",
            b"1000-2000 rw-p 00000000 00:00 0",
            b"1000-2000 r-xp 00000000 08:01 1234                       /system/lib64/libc.so",
            // Not readable, an empty or reversed range, bad numbers, missing fields.
            b"1000-2000 ---p 00000000 00:00 0 [anon:abort message]",
            b"2000-2000 rw-p 00000000 00:00 0 [anon:abort message]",
            b"3000-2000 rw-p 00000000 00:00 0 [anon:abort message]",
            b"10g0-2000 rw-p 00000000 00:00 0 [anon:abort message]",
            b"1000 rw-p 00000000 00:00 0 [anon:abort message]",
            b"-2000 rw-p 00000000 00:00 0 [anon:abort message]",
            b"1000- rw-p 00000000 00:00 0 [anon:abort message]",
            b"11112222333344445-2000 rw-p 00000000 00:00 0 [anon:abort message]",
            b"1000-2000 rw-p [anon:abort message]",
            b"[anon:abort message]",
            b"",
        ] {
            assert_eq!(abort_mapping(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn scanner_finds_the_line_across_any_chunking_and_skips_long_lines() {
        let mut file = Vec::new();
        file.extend_from_slice(b"55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 42   /usr/bin/app\n");
        file.extend_from_slice(b"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 ");
        file.extend_from_slice(&[b'x'; 3 * LINE_MAX]); // a line too long to keep
        file.extend_from_slice(b" [anon:abort message]\n");
        file.extend_from_slice(LINE);
        file.push(b'\n');
        file.extend_from_slice(b"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]\n");
        for size in [1, 2, 3, 7, 64, 100, 4096] {
            let mut s = LineScanner::new();
            let hit = file.chunks(size).find_map(|c| s.feed(c));
            assert_eq!(hit, Some((0x7b1c_2d3e_4000, 0x7b1c_2d3e_5000)), "chunks of {size}");
        }
        // The last line without a newline is seen at the end; a file without the line finds nothing.
        let mut s = LineScanner::new();
        assert_eq!(s.feed(LINE), None);
        assert_eq!(s.finish(), Some((0x7b1c_2d3e_4000, 0x7b1c_2d3e_5000)));
        let mut s = LineScanner::new();
        assert_eq!(s.feed(&file[..file.len() - LINE.len() - 200]), None);
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn header_needs_both_magics_and_a_size_inside_the_mapping() {
        // bionic's size: the header, the text, its NUL.
        let text = b"abort: the reason";
        let size = MSG_OFFSET + text.len() + 1;
        assert_eq!(message_len(&header(size), 4096), Some(text.len() + 1));
        let mut h = header(size);
        h[0] ^= 1;
        assert_eq!(message_len(&h, 4096), None, "magic1");
        let mut h = header(size);
        h[15] ^= 0x80;
        assert_eq!(message_len(&h, 4096), None, "magic2");
        assert_eq!(message_len(&header(MSG_OFFSET), 4096), None, "no room for the NUL");
        assert_eq!(message_len(&header(0), 4096), None);
        assert_eq!(message_len(&header(4097), 4096), None, "larger than the mapping");
        assert_eq!(message_len(&header(usize::MAX), u64::MAX), Some(MAX_ABORT_MSG), "bounded");
        assert_eq!(message_len(&header(MSG_OFFSET + 5000), 8192), Some(MAX_ABORT_MSG));
    }

    /// Memory of one mapping at `base`.
    struct Mem {
        base: u64,
        bytes: Vec<u8>,
    }
    impl MemoryReader for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            let Some(o) = addr.checked_sub(self.base) else { return false };
            match self.bytes.get(o as usize..o as usize + buf.len()) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    true
                }
                None => false,
            }
        }
    }

    fn mapping(text: &[u8], size_delta: isize) -> Mem {
        let size = (MSG_OFFSET + text.len() + 1).wrapping_add_signed(size_delta);
        let mut bytes = header(size).to_vec();
        bytes.extend_from_slice(text);
        bytes.resize(4096, 0);
        Mem { base: 0x10000, bytes }
    }

    #[test]
    fn reads_the_text_through_the_reader() {
        let mut out = [0u8; MAX_ABORT_MSG];
        let mut m = mapping(b"Check failed: x != nullptr\n", 0);
        let n = read_message(&mut m, 0x10000, 0x11000, &mut out);
        assert_eq!(&out[..n], b"Check failed: x != nullptr");
        // Longer than MAX_ABORT_MSG: cut there.
        let long = vec![b'y'; MAX_ABORT_MSG + 300];
        let mut m = mapping(&long, 0);
        m.bytes.resize(8192, 0);
        assert_eq!(read_message(&mut m, 0x10000, 0x12000, &mut out), MAX_ABORT_MSG);
        // A mapping the reader cannot read, a wrong layout, a size past the mapping: nothing.
        assert_eq!(read_message(&mut m, 0x20000, 0x21000, &mut out), 0);
        let mut m = mapping(b"text", 0);
        m.bytes[3] = 0;
        assert_eq!(read_message(&mut m, 0x10000, 0x11000, &mut out), 0);
        let mut m = mapping(b"text", 0);
        assert_eq!(read_message(&mut m, 0x10000, 0x10000 + MSG_OFFSET as u64 + 3, &mut out), 0);
        // A reader that fails past the header (the mapping shrank): nothing, no partial text.
        let mut m = mapping(b"text", 0);
        m.bytes.truncate(MSG_OFFSET + 2);
        assert_eq!(read_message(&mut m, 0x10000, 0x11000, &mut out), 0);
    }

    /// A real anonymous mapping laid out as bionic lays it out, named `abort message` when the kernel can
    /// (`CONFIG_ANON_VMA_NAME`; else a maps file that lists it under that name stands in for `/proc/self/maps`),
    /// found by [`find_mapping`] and read by the crash's own fault-proof reader (`process_vm_readv`).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[allow(unsafe_code)]
    #[test]
    fn finds_and_reads_a_live_mapping() {
        use crate::platform::linux::crash::memory::{PipeUse, ProcessVmReader};
        let text = b"live abort message: 42";
        let (p, len) = bionic_layout_mapping(text);
        let named = name_abort_mapping(p, len);
        let dir = tempfile::tempdir().expect("tempdir");
        let maps = dir.path().join("maps");
        let mut listing = std::fs::read("/proc/self/maps").expect("read maps");
        if !named {
            listing.extend_from_slice(
                format!("{:x}-{:x} rw-p 00000000 00:00 0      [anon:abort message]\n", p as u64, p as u64 + len as u64)
                    .as_bytes(),
            );
        }
        std::fs::write(&maps, &listing).expect("write maps");
        let path = std::ffi::CString::new(maps.to_str().expect("utf-8")).expect("path");
        let want = (p as u64, p as u64 + len as u64);
        assert_eq!(find_mapping(&path), Some(want));
        if named {
            assert_eq!(find_mapping(c"/proc/self/maps"), Some(want), "the kernel's own listing");
        }
        // Where `process_vm_readv` cannot read the own process (qemu-user), the reader copies through a pipe, as
        // the crash path's reader does there.
        let pipe = (!crate::platform::linux::crash::memory::process_vm_readv_works())
            .then(|| crate::platform::linux::crash::sys::pipe_nonblocking().expect("pipe"));
        // SAFETY: getpid has no preconditions.
        let mut mem = ProcessVmReader::new(unsafe { libc::getpid() }, &mut []).with_pipe(pipe, PipeUse::Everything);
        let mut out = [0u8; MAX_ABORT_MSG];
        let n = read_message(&mut mem, want.0, want.1, &mut out);
        assert_eq!(&out[..n], text);
        assert_eq!(find_mapping(c"/nonexistent/maps"), None);
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(p, len) };
    }

    /// `mmap`s one page and writes bionic's `magic_abort_msg_t` with `text` into it.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[allow(unsafe_code)]
    fn bionic_layout_mapping(text: &[u8]) -> (*mut libc::c_void, usize) {
        let len = 4096;
        // SAFETY: a fresh anonymous private mapping.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let mut bytes = header(MSG_OFFSET + text.len() + 1).to_vec();
        bytes.extend_from_slice(text);
        bytes.push(0);
        // SAFETY: `p` is writable for `len` bytes, more than `bytes.len()`.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len()) };
        (p, len)
    }

    /// Names `[p, p + len)` `abort message` as bionic does; `false` where the kernel cannot (`EINVAL` without
    /// `CONFIG_ANON_VMA_NAME`).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[allow(unsafe_code)]
    fn name_abort_mapping(p: *mut libc::c_void, len: usize) -> bool {
        const PR_SET_VMA: libc::c_int = 0x5356_4d41;
        const PR_SET_VMA_ANON_NAME: libc::c_ulong = 0;
        // SAFETY: naming our own mapping with a NUL-terminated literal.
        let r = unsafe {
            libc::prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, p as libc::c_ulong, len, c"abort message".as_ptr())
        };
        r == 0
    }
}
