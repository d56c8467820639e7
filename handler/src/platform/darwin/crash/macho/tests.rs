//! Unit tests over synthetic images: layout decoding, every kind of truncation and corruption, fat selection, and
//! the read-callback path.

use super::*;

/// Little builder for synthetic thin images (test-only; allocates).
struct Img {
    cputype: u32,
    cpusubtype: u32,
    filetype: u32,
    cmds: Vec<Vec<u8>>,
}

fn push32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn push64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    n[..s.len()].copy_from_slice(s.as_bytes());
    n
}

impl Img {
    fn new(cputype: u32, cpusubtype: u32, filetype: u32) -> Self {
        Img { cputype, cpusubtype, filetype, cmds: Vec::new() }
    }
    fn uuid(mut self, u: [u8; 16]) -> Self {
        let mut c = Vec::new();
        push32(&mut c, LC_UUID);
        push32(&mut c, 24);
        c.extend_from_slice(&u);
        self.cmds.push(c);
        self
    }
    fn segment(mut self, name: &str, vmaddr: u64, vmsize: u64, sects: &[(&str, u64, u64)]) -> Self {
        let mut c = Vec::new();
        push32(&mut c, LC_SEGMENT_64);
        push32(&mut c, (72 + 80 * sects.len()) as u32);
        c.extend_from_slice(&name16(name));
        push64(&mut c, vmaddr);
        push64(&mut c, vmsize);
        push64(&mut c, 0x1000); // fileoff
        push64(&mut c, vmsize); // filesize
        push32(&mut c, 5);
        push32(&mut c, 5);
        push32(&mut c, sects.len() as u32);
        push32(&mut c, 0);
        for (sn, addr, size) in sects {
            c.extend_from_slice(&name16(sn));
            c.extend_from_slice(&name16(name));
            push64(&mut c, *addr);
            push64(&mut c, *size);
            push32(&mut c, 0x1234); // offset
            push32(&mut c, 3); // align
            push32(&mut c, 0);
            push32(&mut c, 0);
            push32(&mut c, 0x8000_0400); // flags
            push32(&mut c, 0);
            push32(&mut c, 0);
            push32(&mut c, 0);
        }
        self.cmds.push(c);
        self
    }
    fn id_dylib(mut self, name: &str) -> Self {
        let mut c = Vec::new();
        push32(&mut c, LC_ID_DYLIB);
        let size = (24 + name.len() + 1).div_ceil(8) * 8;
        push32(&mut c, size as u32);
        push32(&mut c, 24);
        push32(&mut c, 2);
        push32(&mut c, 0x0001_0000);
        push32(&mut c, 0x0001_0000);
        c.extend_from_slice(name.as_bytes());
        c.resize(size, 0);
        self.cmds.push(c);
        self
    }
    fn raw(mut self, c: Vec<u8>) -> Self {
        self.cmds.push(c);
        self
    }
    fn build_version(mut self, platform: u32, minos: u32, sdk: u32) -> Self {
        let mut c = Vec::new();
        push32(&mut c, LC_BUILD_VERSION);
        push32(&mut c, 24);
        push32(&mut c, platform);
        push32(&mut c, minos);
        push32(&mut c, sdk);
        push32(&mut c, 0);
        self.cmds.push(c);
        self
    }
    fn version_min(mut self, cmd: u32, v: u32, sdk: u32) -> Self {
        let mut c = Vec::new();
        push32(&mut c, cmd);
        push32(&mut c, 16);
        push32(&mut c, v);
        push32(&mut c, sdk);
        self.cmds.push(c);
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        push32(&mut v, MH_MAGIC_64);
        push32(&mut v, self.cputype);
        push32(&mut v, self.cpusubtype);
        push32(&mut v, self.filetype);
        push32(&mut v, self.cmds.len() as u32);
        push32(&mut v, self.cmds.iter().map(|c| c.len() as u32).sum());
        push32(&mut v, 0x0020_0085);
        push32(&mut v, 0);
        for c in &self.cmds {
            v.extend_from_slice(c);
        }
        v
    }
}

const UUID: [u8; 16] = [0x82, 0xd1, 0x3d, 0x98, 0x21, 0x9e, 0x30, 0x40, 0xb6, 0x2a, 0x07, 0xa2, 0x97, 0x00, 0x7a, 0x7c];

fn sample() -> Vec<u8> {
    Img::new(CPU_TYPE_ARM64, CPU_SUBTYPE_ARM64E | CPU_SUBTYPE_PTRAUTH_ABI, MH_DYLIB)
        .segment("__TEXT", 0x1_8000_0000, 0x8000, &[("__text", 0x1_8000_1000, 0x200), ("__cstring", 0x1_8000_1200, 8)])
        .segment("__DATA", 0x1_8000_8000, 0x4000, &[("__crash_info", 0x1_8000_8040, 64)])
        .uuid(UUID)
        .id_dylib("/usr/lib/libcrashy.dylib")
        .version_min(LC_VERSION_MIN_IPHONEOS, 0x000c_0000, 0x000d_0000)
        .build_version(PLATFORM_IOS, 0x000e_0300, 0x000f_0500)
        .bytes()
}

#[test]
fn decodes_every_supported_command() {
    let d = sample();
    let m = MachO::parse(&d).unwrap();
    m.validate().unwrap();
    assert_eq!(m.cputype, CPU_TYPE_ARM64);
    assert_eq!(m.cpusubtype, 0x8000_0002);
    assert_eq!(m.cpu_subtype(), CPU_SUBTYPE_ARM64E);
    assert_eq!(m.arch_name(), "arm64e");
    assert_eq!(m.filetype, MH_DYLIB);
    assert_eq!(m.uuid(), Some(UUID));
    assert_eq!(m.install_name(), Some(&b"/usr/lib/libcrashy.dylib"[..]));
    let text = m.segment(b"__TEXT").unwrap();
    assert_eq!((text.vmaddr, text.vmsize, text.fileoff, text.nsects), (0x1_8000_0000, 0x8000, 0x1000, 2));
    let sects: Vec<Section> = text.sections().collect();
    assert_eq!(sects[0].name(), b"__text");
    assert_eq!(sects[1].name(), b"__cstring");
    assert_eq!(sects[0].segment_name(), b"__TEXT");
    assert_eq!((sects[0].addr, sects[0].size, sects[0].offset, sects[0].align), (0x1_8000_1000, 0x200, 0x1234, 3));
    assert_eq!(m.text_size(), Some(0x8000));
    assert_eq!(m.slide(0x1_8123_4000), Some(0x123_4000));
    // A slide can never be computed from an address below vmaddr in a real process; the result wraps, not panics.
    assert_eq!(m.slide(0), Some(0u64.wrapping_sub(0x1_8000_0000)));
    let ci = m.crash_info_section().unwrap();
    assert_eq!((ci.addr, ci.size), (0x1_8000_8040, 64));
    // LC_BUILD_VERSION wins over LC_VERSION_MIN_* even when it comes later.
    let bv = m.build_version().unwrap();
    assert_eq!(bv.platform, PLATFORM_IOS);
    assert_eq!(bv.cmd, LC_BUILD_VERSION);
    assert_eq!((bv.min_os.major(), bv.min_os.minor(), bv.min_os.patch()), (14, 3, 0));
    assert_eq!((bv.sdk.major(), bv.sdk.minor()), (15, 5));
    let s = m.summary().unwrap();
    assert_eq!(s.text_section, Some((0x1_8000_1000, 0x200)));
    assert_eq!(s.crash_info, Some((0x1_8000_8040, 64)));
    assert_eq!(s.text_vmaddr, Some(0x1_8000_0000));
    assert_eq!(s.cpusubtype, CPU_SUBTYPE_ARM64E);
}

#[test]
fn version_min_is_the_fallback() {
    let d = Img::new(CPU_TYPE_X86_64, CPU_SUBTYPE_X86_64_ALL | CPU_SUBTYPE_LIB64, MH_EXECUTE)
        .version_min(LC_VERSION_MIN_MACOSX, 0x000a_0f00, 0x000b_0000)
        .bytes();
    let m = MachO::parse(&d).unwrap();
    let bv = m.build_version().unwrap();
    assert_eq!((bv.platform, bv.cmd), (PLATFORM_MACOS, LC_VERSION_MIN_MACOSX));
    assert_eq!((bv.min_os.major(), bv.min_os.minor()), (10, 15));
    assert_eq!(m.arch_name(), "x86_64");
    assert_eq!(m.uuid(), None);
    assert_eq!(m.text_size(), None);
    assert_eq!(m.slide(0x1000), None);
}

#[test]
fn rejects_other_magics() {
    let mut d = sample();
    d[..4].copy_from_slice(&MH_MAGIC.to_le_bytes());
    assert_eq!(MachO::parse(&d).unwrap_err(), Error::Unsupported32Bit);
    d[..4].copy_from_slice(&MH_CIGAM.to_le_bytes());
    assert_eq!(MachO::parse(&d).unwrap_err(), Error::Unsupported32Bit);
    d[..4].copy_from_slice(&MH_CIGAM_64.to_le_bytes());
    assert_eq!(MachO::parse(&d).unwrap_err(), Error::BigEndian);
    d[..4].copy_from_slice(b"\x7fELF");
    assert_eq!(MachO::parse(&d).unwrap_err(), Error::BadMagic(0x464c_457f));
    assert_eq!(MachO::parse(&[]).unwrap_err(), Error::Truncated);
    assert_eq!(parse_any(&d, CPU_TYPE_ARM64, None).unwrap_err(), Error::BadMagic(0x464c_457f));
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let d = sample();
    for n in 0..d.len() {
        let r = MachO::parse(&d[..n]);
        assert!(r.is_err(), "prefix of {n} bytes parsed");
        assert!(matches!(r.unwrap_err(), Error::Truncated | Error::BadMagic(_)), "prefix {n}");
    }
    assert!(MachO::parse(&d).is_ok());
}

#[test]
fn bad_cmdsize_is_reported_with_its_offset() {
    for bad in [0u32, 4, 7, 26, 0xffff_fff8] {
        let mut c = Vec::new();
        push32(&mut c, 0x99);
        push32(&mut c, bad);
        c.resize(24, 0);
        let d = Img::new(CPU_TYPE_ARM64, 0, MH_EXECUTE).uuid(UUID).raw(c).bytes();
        let m = MachO::parse(&d).unwrap();
        assert_eq!(m.validate(), Err(Error::BadLoadCommand(32 + 24)), "cmdsize {bad}");
        // The command before the bad one is still readable.
        assert_eq!(m.uuid(), Some(UUID));
        let all: Vec<_> = m.load_commands().collect();
        assert_eq!(all.len(), 2, "iteration stops after the error");
    }
}

#[test]
fn more_ncmds_than_fit_in_sizeofcmds_is_an_error() {
    let mut d = Img::new(CPU_TYPE_ARM64, 0, MH_EXECUTE).uuid(UUID).bytes();
    d[16..20].copy_from_slice(&2u32.to_le_bytes()); // ncmds = 2, only one present
    let m = MachO::parse(&d).unwrap();
    assert_eq!(m.validate(), Err(Error::BadLoadCommand(32 + 24)));
}

#[test]
fn sections_must_fit_in_their_command() {
    let mut d = sample();
    // nsects of the first segment (at header 32 + 64) claims 3 but cmdsize only holds 2.
    d[32 + 64..32 + 68].copy_from_slice(&3u32.to_le_bytes());
    let m = MachO::parse(&d).unwrap();
    assert_eq!(m.validate(), Err(Error::BadLoadCommand(32)));
    assert!(m.segment(b"__TEXT").is_none());
    assert!(m.summary().is_err());
}

#[test]
fn install_name_must_be_terminated_inside_the_command() {
    let mut c = Vec::new();
    push32(&mut c, LC_ID_DYLIB);
    push32(&mut c, 32);
    push32(&mut c, 24);
    push32(&mut c, 0);
    push32(&mut c, 0);
    push32(&mut c, 0);
    c.extend_from_slice(b"abcdefgh"); // no NUL
    let d = Img::new(CPU_TYPE_ARM64, 0, MH_DYLIB).raw(c.clone()).bytes();
    let m = MachO::parse(&d).unwrap();
    assert_eq!(m.install_name(), None);
    assert_eq!(m.validate(), Err(Error::BadLoadCommand(32)));
    // name offset pointing outside the command
    c[8..12].copy_from_slice(&1000u32.to_le_bytes());
    let d = Img::new(CPU_TYPE_ARM64, 0, MH_DYLIB).raw(c).bytes();
    assert_eq!(MachO::parse(&d).unwrap().install_name(), None);
}

/// Deterministic byte-flipping over a valid image: no input may panic (the module also denies indexing and
/// arithmetic overflow lints outside tests).
#[test]
fn random_corruption_never_panics() {
    let base = sample();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut ok = 0;
    for _ in 0..20_000 {
        let mut d = base.clone();
        for _ in 0..(seed % 4 + 1) {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (seed >> 33) as usize % d.len();
            d[i] = (seed >> 13) as u8;
        }
        if let Ok(m) = MachO::parse(&d) {
            let _ = m.summary();
            let _ = m.install_name();
            for s in m.segments() {
                for x in s.sections() {
                    let _ = x.name();
                }
            }
            ok += 1;
        }
    }
    assert!(ok > 1000, "most single-byte flips leave the header parseable ({ok})");
}

fn fat(is64: bool, slices: &[(u32, u32, &[u8])]) -> Vec<u8> {
    let entry = if is64 { 32 } else { 20 };
    let mut v = Vec::new();
    v.extend_from_slice(&(if is64 { FAT_MAGIC_64 } else { FAT_MAGIC }).to_be_bytes());
    v.extend_from_slice(&(slices.len() as u32).to_be_bytes());
    let mut off = (8 + entry * slices.len()).div_ceil(0x1000) * 0x1000;
    let mut placed = Vec::new();
    for (ct, st, data) in slices {
        v.extend_from_slice(&ct.to_be_bytes());
        v.extend_from_slice(&st.to_be_bytes());
        if is64 {
            v.extend_from_slice(&(off as u64).to_be_bytes());
            v.extend_from_slice(&(data.len() as u64).to_be_bytes());
            v.extend_from_slice(&12u32.to_be_bytes());
            v.extend_from_slice(&0u32.to_be_bytes());
        } else {
            v.extend_from_slice(&(off as u32).to_be_bytes());
            v.extend_from_slice(&(data.len() as u32).to_be_bytes());
            v.extend_from_slice(&12u32.to_be_bytes());
        }
        placed.push((off, *data));
        off = (off + data.len()).div_ceil(0x1000) * 0x1000;
    }
    for (o, data) in placed {
        v.resize(o, 0);
        v.extend_from_slice(data);
    }
    v
}

#[test]
fn fat_selection_by_cpu_type_and_subtype() {
    let x86 = Img::new(CPU_TYPE_X86_64, CPU_SUBTYPE_X86_64_ALL, MH_EXECUTE).uuid([1; 16]).bytes();
    let a64 = Img::new(CPU_TYPE_ARM64, CPU_SUBTYPE_ARM64_ALL, MH_EXECUTE).uuid([2; 16]).bytes();
    let a64e = Img::new(CPU_TYPE_ARM64, CPU_SUBTYPE_ARM64E | CPU_SUBTYPE_PTRAUTH_ABI, MH_EXECUTE).uuid([3; 16]).bytes();
    for is64 in [false, true] {
        let f = fat(
            is64,
            &[
                (CPU_TYPE_X86_64, CPU_SUBTYPE_X86_64_ALL, &x86),
                (CPU_TYPE_ARM64, 0, &a64),
                (CPU_TYPE_ARM64, 0x8000_0002, &a64e),
            ],
        );
        let h = Fat::parse(&f).unwrap().unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.is_64(), is64);
        assert_eq!(h.iter().count(), 3);
        assert_eq!(h.arch(1).unwrap().offset, 0x2000);
        assert!(h.arch(3).is_none());
        let pick = |ct, st| parse_any(&f, ct, st).map(|m| m.uuid().unwrap()[0]);
        assert_eq!(pick(CPU_TYPE_X86_64, None), Ok(1));
        assert_eq!(pick(CPU_TYPE_ARM64, None), Ok(2));
        assert_eq!(pick(CPU_TYPE_ARM64, Some(CPU_SUBTYPE_ARM64E)), Ok(3));
        // capability bits on the request are ignored
        assert_eq!(pick(CPU_TYPE_ARM64, Some(0x8000_0002)), Ok(3));
        // no exact subtype: first of the CPU type
        assert_eq!(pick(CPU_TYPE_ARM64, Some(CPU_SUBTYPE_ARM64_V8)), Ok(2));
        assert_eq!(pick(CPU_TYPE_ARM64_32, None), Err(Error::NoMatchingSlice));
        // every truncation of the fat file fails cleanly
        for n in 0..f.len() {
            let _ = parse_any(&f[..n], CPU_TYPE_ARM64, Some(CPU_SUBTYPE_ARM64E));
        }
        assert_eq!(
            parse_any(&f[..f.len() - 1], CPU_TYPE_ARM64, Some(CPU_SUBTYPE_ARM64E)).err(),
            Some(Error::Truncated)
        );
    }
}

#[test]
fn fat_header_sanity() {
    let mut f = Vec::new();
    f.extend_from_slice(&FAT_MAGIC.to_be_bytes());
    f.extend_from_slice(&0u32.to_be_bytes());
    assert_eq!(Fat::parse(&f).unwrap_err(), Error::BadFatHeader);
    f[4..8].copy_from_slice(&50u32.to_be_bytes()); // a Java class file's version lands here
    assert_eq!(Fat::parse(&f).unwrap_err(), Error::BadFatHeader);
    f[4..8].copy_from_slice(&2u32.to_be_bytes());
    assert_eq!(Fat::parse(&f).unwrap_err(), Error::Truncated);
    assert!(Fat::parse(&sample()).unwrap().is_none());
    assert!(Fat::parse(&[0xca]).unwrap().is_none());
}

#[test]
fn read_header_through_a_callback() {
    let d = sample();
    let base = 0x1_0450_0000u64;
    let mut calls = 0;
    let mut read = |addr: u64, out: &mut [u8]| {
        calls += 1;
        let Some(off) = addr.checked_sub(base) else { return false };
        match d.get(off as usize..off as usize + out.len()) {
            Some(s) => {
                out.copy_from_slice(s);
                true
            }
            None => false,
        }
    };
    let mut buf = [0u8; 4096];
    let m = read_header(&mut read, base, &mut buf).unwrap();
    assert_eq!(m.uuid(), Some(UUID));
    // header below the link address: the slide wraps (a negative displacement), it does not panic
    assert_eq!(m.slide(base), Some(0x1_0450_0000u64.wrapping_sub(0x1_8000_0000)));
    let mut small = [0u8; 64];
    assert_eq!(read_header(&mut read, base, &mut small).unwrap_err(), Error::BufferTooSmall(d.len() as u32));
    assert_eq!(read_header(&mut read, base - 0x10_0000, &mut buf).unwrap_err(), Error::ReadFailed);
    // two reads for the good header, one before BufferTooSmall, one failing
    assert_eq!(calls, 4);
    let mut fails_second = |addr: u64, out: &mut [u8]| {
        if addr != base {
            return false;
        }
        out.copy_from_slice(&d[..out.len()]);
        true
    };
    assert_eq!(read_header(&mut fails_second, base, &mut buf).unwrap_err(), Error::ReadFailed);
}

#[test]
fn names() {
    assert_eq!(arch_name(CPU_TYPE_ARM64, 0x8000_0002), "arm64e");
    assert_eq!(arch_name(CPU_TYPE_ARM64, 0), "arm64");
    assert_eq!(arch_name(CPU_TYPE_X86_64, 0x8000_0003), "x86_64");
    assert_eq!(arch_name(CPU_TYPE_X86_64, 8), "x86_64h");
    assert_eq!(arch_name(CPU_TYPE_ARM64_32, 1), "arm64_32");
    assert_eq!(arch_name(CPU_TYPE_ARM, 9), "unknown");
    assert_eq!(platform_name(PLATFORM_IOS), Some("ios"));
    assert_eq!(platform_name(PLATFORM_MACOS), Some("macos"));
    assert_eq!(platform_name(99), None);
    assert_eq!(fixed_name(&name16("__TEXT")), b"__TEXT");
    assert_eq!(fixed_name(b"0123456789abcdef"), b"0123456789abcdef");
}
