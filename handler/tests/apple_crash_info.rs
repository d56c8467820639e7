//! End to end over real Mach-O files (built by `fixtures/macho/make.sh`; `src/crashy.c` defines a version-5
//! `__DATA,__crash_info` record): the image is "loaded" at a slide in a simulated address space, and the crash-time
//! path runs through read callbacks only: `macho::read_header` on the header address, the `__crash_info` section at
//! its slid address, then the message strings through `read_c_string`.

use std::path::Path;

use handler::platform::darwin::crash::crash_info::{self, CStrRead};
use handler::platform::darwin::crash::macho::{self, consts::*, MachO};

/// A loaded image: each segment's file bytes mapped at `vmaddr + slide` (the rest of vmsize reads as zero).
struct Loaded<'a> {
    file: &'a [u8],
    slide: u64,
    segs: Vec<(u64, u64, u64, u64)>, // vmaddr, vmsize, fileoff, filesize
}

impl Loaded<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> bool {
        let Some(unslid) = addr.checked_sub(self.slide) else { return false };
        for &(vmaddr, vmsize, fileoff, filesize) in &self.segs {
            if unslid >= vmaddr && unslid + out.len() as u64 <= vmaddr + vmsize {
                for (i, b) in out.iter_mut().enumerate() {
                    let off = unslid - vmaddr + i as u64;
                    *b = if off < filesize { self.file[(fileoff + off) as usize] } else { 0 };
                }
                return true;
            }
        }
        false
    }
}

fn load(file: &[u8], slide: u64) -> Loaded<'_> {
    let m = MachO::parse(file).unwrap();
    let segs = m
        .segments()
        .filter(|s| s.name() != b"__PAGEZERO")
        .map(|s| (s.vmaddr, s.vmsize, s.fileoff, s.filesize))
        .collect();
    Loaded { file, slide, segs }
}

fn check(name: &str, cpu: u32, slide: u64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/macho").join(name);
    let data = std::fs::read(&path).unwrap();
    let thin = macho::parse_any(&data, cpu, None).unwrap();
    let image = load(thin.data(), slide);
    let text_vmaddr = thin.text_vmaddr().unwrap();
    let header_addr = text_vmaddr + slide;
    let mut rd = |a: u64, o: &mut [u8]| image.read(a, o);

    // Install/crash time: only the header address is known.
    let mut hdr = [0u8; 4096];
    let m = macho::read_header(&mut rd, header_addr, &mut hdr).unwrap();
    assert_eq!(m.uuid(), thin.uuid());
    assert_eq!(m.slide(header_addr), Some(slide));
    let s = m.summary().unwrap();
    let (ci_addr, ci_size) = s.crash_info.expect("__crash_info present");
    assert_eq!(ci_size, 64);

    let ci = crash_info::read(&mut rd, ci_addr + slide, ci_size).unwrap();
    assert_eq!(ci.version, 5);
    assert_eq!(ci.abort_cause, 0x2a);
    assert_eq!((ci.signature_string, ci.backtrace, ci.thread, ci.dialog_mode), (0, 0, 0, 0));
    assert!(ci.message != 0 && ci.message2 != 0);

    // The file stores link-time pointers (dyld rebases them by the slide at load): slide them as dyld would.
    let mut out = [0u8; 128];
    let got = crash_info::read_c_string(&mut rd, ci.message + slide, &mut out).unwrap();
    assert_eq!(got, CStrRead { len: 33, complete: true });
    assert_eq!(&out[..got.len], b"fixture: crashy hit a fatal error");
    let got = crash_info::read_c_string(&mut rd, ci.message2 + slide, &mut out).unwrap();
    assert_eq!(&out[..got.len], b"second message");
    // Unslid pointers land in unmapped memory when the slide is non-zero: the reader says so instead of faulting.
    if slide != 0 {
        assert!(crash_info::read_c_string(&mut rd, ci.message, &mut out).is_none());
    }
    // A truncated output buffer.
    let mut small = [0u8; 7];
    assert_eq!(
        crash_info::read_c_string(&mut rd, ci.message + slide, &mut small),
        Some(CStrRead { len: 7, complete: false })
    );
    assert_eq!(&small, b"fixture");
}

#[test]
fn crash_info_arm64_ios_slid() {
    check("exe-arm64-ios", CPU_TYPE_ARM64, 0x4d_c000);
}

#[test]
fn crash_info_x86_64_macos_unslid_and_slid() {
    check("exe-x86_64-macos", CPU_TYPE_X86_64, 0);
    check("exe-x86_64-macos", CPU_TYPE_X86_64, 0x0e30_e000);
}

#[test]
fn crash_info_in_universal_slices() {
    check("exe-universal-macos", CPU_TYPE_ARM64, 0x1_0000);
    check("exe-universal-macos", CPU_TYPE_X86_64, 0x2_0000);
}
