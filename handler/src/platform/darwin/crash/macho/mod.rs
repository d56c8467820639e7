//! Bounds-checked Mach-O load-command parsing: pure, allocation-free and panic-free, so the same code runs at
//! install time (over an image header in memory), at crash time (over a header copied out of the crashed process by
//! the fault-proof reader into a preallocated buffer, see [`read_header`]) and in tests on any host.
//!
//! What it understands (every constant cites its header in [`consts`]):
//! - universal files: `fat_header` + `fat_arch`/`fat_arch_64`, big-endian, and slice selection by CPU type
//!   ([`Fat`], [`parse_any`]);
//! - thin 64-bit files: `mach_header_64` (`MH_MAGIC_64`, little-endian; 32-bit and big-endian files are rejected
//!   with [`Error::Unsupported32Bit`] / [`Error::BigEndian`]);
//! - load commands: `LC_UUID`, `LC_SEGMENT_64` and its `section_64`s, `LC_ID_DYLIB`, `LC_BUILD_VERSION`,
//!   `LC_VERSION_MIN_*`; any other command is walked over by `cmdsize`.
//!
//! Every read goes through `.get()`-based helpers and checked arithmetic; malformed input gives an [`Error`], never a
//! panic. Nothing here allocates, locks or formats.

pub(crate) mod bytes;
pub mod consts;
mod fat;

pub use fat::{Fat, FatArch, MAX_FAT_ARCHS};

use bytes::{slice, u32_le, u64_le};
use consts::*;

/// Why a buffer could not be parsed as a Mach-O image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The data ends before a structure it must contain.
    Truncated,
    /// The first four bytes are no Mach-O or fat magic; carries the little-endian `u32` read there.
    BadMagic(u32),
    /// A 32-bit Mach-O (`MH_MAGIC`/`MH_CIGAM`): not supported (no 32-bit Apple targets are shipped).
    Unsupported32Bit,
    /// A big-endian 64-bit Mach-O (`MH_CIGAM_64`): no Apple target uses it.
    BigEndian,
    /// A fat header with no slice or an implausible slice count (more than [`MAX_FAT_ARCHS`]).
    BadFatHeader,
    /// A universal file has no slice for the requested CPU type.
    NoMatchingSlice,
    /// A load command is malformed: `cmdsize` smaller than 8, not a multiple of 4, running past `sizeofcmds`, or too
    /// small for its command type. Carries the byte offset of the command from the start of the header.
    BadLoadCommand(u32),
    /// The buffer given to [`read_header`] is too small for `32 + sizeofcmds`; carries the size needed, in bytes.
    BufferTooSmall(u32),
    /// The read callback given to [`read_header`] failed (unmapped memory).
    ReadFailed,
}

/// A 16-byte name as stored in `segname`/`sectname`: the bytes up to the first NUL (all 16 when there is none).
pub fn fixed_name(raw: &[u8; 16]) -> &[u8] {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    raw.get(..end).unwrap_or(&[])
}

/// A packed `X.Y.Z` version as in `LC_BUILD_VERSION`/`LC_VERSION_MIN_*`: `xxxx.yy.zz` in nibbles, i.e.
/// major in bits 31..16, minor in 15..8, patch in 7..0 (`mach-o/loader.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32);

impl Version {
    /// Major version (bits 31..16).
    pub fn major(self) -> u32 {
        self.0 >> 16
    }
    /// Minor version (bits 15..8).
    pub fn minor(self) -> u32 {
        (self.0 >> 8) & 0xff
    }
    /// Patch version (bits 7..0).
    pub fn patch(self) -> u32 {
        self.0 & 0xff
    }
}

/// Deployment target from `LC_BUILD_VERSION` or an `LC_VERSION_MIN_*` command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildVersion {
    /// `PLATFORM_*` (see [`consts`]); for `LC_VERSION_MIN_*` the platform the command implies
    /// (`LC_VERSION_MIN_MACOSX` → `PLATFORM_MACOS`, `..._IPHONEOS` → `PLATFORM_IOS`, ...).
    pub platform: u32,
    /// Minimum OS version (`minos`, or `version` in `version_min_command`).
    pub min_os: Version,
    /// SDK version (`sdk`).
    pub sdk: Version,
    /// The load command it came from (`LC_BUILD_VERSION` or one of the `LC_VERSION_MIN_*`).
    pub cmd: u32,
}

/// One `LC_SEGMENT_64` (`struct segment_command_64`, `mach-o/loader.h`). Addresses are unslid link-time virtual
/// addresses; sizes and offsets are in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// `segname`, raw 16 bytes (see [`Segment::name`]).
    pub segname: [u8; 16],
    /// `vmaddr`: link-time address.
    pub vmaddr: u64,
    /// `vmsize`: bytes of address space.
    pub vmsize: u64,
    /// `fileoff`: offset of the segment's bytes in the file.
    pub fileoff: u64,
    /// `filesize`: bytes mapped from the file.
    pub filesize: u64,
    /// `maxprot` (`vm_prot_t`).
    pub maxprot: u32,
    /// `initprot` (`vm_prot_t`).
    pub initprot: u32,
    /// `nsects`: number of `section_64` records that follow.
    pub nsects: u32,
    /// `flags` (`SG_*`).
    pub flags: u32,
    sections: &'a [u8],
}

impl<'a> Segment<'a> {
    /// The segment name without its NUL padding.
    pub fn name(&self) -> &[u8] {
        fixed_name(&self.segname)
    }

    /// Section `i` of this segment, or `None` past `nsects`.
    pub fn section(&self, i: u32) -> Option<Section> {
        let off = (i as usize).checked_mul(SECTION_64_SIZE)?;
        Section::parse(slice(self.sections, off, SECTION_64_SIZE)?)
    }

    /// The sections of this segment.
    pub fn sections(&self) -> impl Iterator<Item = Section> + 'a {
        let s = *self;
        (0..self.nsects).map_while(move |i| s.section(i))
    }
}

/// One `struct section_64` (`mach-o/loader.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section {
    /// `sectname`, raw 16 bytes (see [`Section::name`]).
    pub sectname: [u8; 16],
    /// `segname`, raw 16 bytes.
    pub segname: [u8; 16],
    /// `addr`: link-time virtual address.
    pub addr: u64,
    /// `size`: bytes.
    pub size: u64,
    /// `offset`: file offset, bytes.
    pub offset: u32,
    /// `align`: power of two.
    pub align: u32,
    /// `flags`: section type and attributes (`S_*`).
    pub flags: u32,
}

impl Section {
    fn parse(d: &[u8]) -> Option<Section> {
        Some(Section {
            sectname: bytes::array::<16>(d, 0)?,
            segname: bytes::array::<16>(d, 16)?,
            addr: u64_le(d, 32)?,
            size: u64_le(d, 40)?,
            offset: u32_le(d, 48)?,
            align: u32_le(d, 52)?,
            flags: u32_le(d, 64)?,
        })
    }
    /// The section name without its NUL padding.
    pub fn name(&self) -> &[u8] {
        fixed_name(&self.sectname)
    }
    /// The owning segment's name without its NUL padding.
    pub fn segment_name(&self) -> &[u8] {
        fixed_name(&self.segname)
    }
}

/// A raw load command: `cmd`, `cmdsize` and its bytes (including the 8-byte `cmd`/`cmdsize` prefix).
#[derive(Clone, Copy, Debug)]
pub struct LoadCommand<'a> {
    /// `cmd` (`LC_*`).
    pub cmd: u32,
    /// `cmdsize`, bytes.
    pub cmdsize: u32,
    /// Byte offset of the command from the start of the Mach-O header.
    pub offset: u32,
    /// The command's `cmdsize` bytes.
    pub data: &'a [u8],
}

/// Iterator over load commands; yields one `Err` and then stops on a malformed command.
#[derive(Clone, Debug)]
pub struct LoadCommands<'a> {
    data: &'a [u8],
    off: usize,
    end: usize,
    left: u32,
    failed: bool,
}

impl<'a> Iterator for LoadCommands<'a> {
    type Item = Result<LoadCommand<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.left == 0 {
            return None;
        }
        let off = self.off;
        let bad = Error::BadLoadCommand(u32::try_from(off).unwrap_or(u32::MAX));
        let parsed = (|| {
            let cmd = u32_le(self.data, off)?;
            let cmdsize = u32_le(self.data, off.checked_add(4)?)?;
            let size = cmdsize as usize;
            if size < LOAD_COMMAND_SIZE || size % 4 != 0 {
                return None;
            }
            let next = off.checked_add(size)?;
            if next > self.end {
                return None;
            }
            Some((cmd, cmdsize, slice(self.data, off, size)?, next))
        })();
        match parsed {
            Some((cmd, cmdsize, data, next)) => {
                self.off = next;
                self.left = self.left.saturating_sub(1);
                Some(Ok(LoadCommand { cmd, cmdsize, offset: u32::try_from(off).unwrap_or(u32::MAX), data }))
            }
            None => {
                self.failed = true;
                Some(Err(bad))
            }
        }
    }
}

/// A thin 64-bit Mach-O image over a byte slice that holds at least the header and all load commands (a whole
/// file, a fat slice, or an in-memory header copied by [`read_header`]).
#[derive(Clone, Copy, Debug)]
pub struct MachO<'a> {
    data: &'a [u8],
    /// `cputype` (`mach/machine.h`).
    pub cputype: u32,
    /// `cpusubtype` including capability bits; see [`MachO::cpu_subtype`].
    pub cpusubtype: u32,
    /// `filetype` (`MH_EXECUTE`, `MH_DYLIB`, ...).
    pub filetype: u32,
    /// `ncmds`.
    pub ncmds: u32,
    /// `sizeofcmds`, bytes.
    pub sizeofcmds: u32,
    /// `flags` (`MH_*` flags).
    pub flags: u32,
}

/// Classifies the magic at the start of `data`, for callers that must reject early.
fn check_magic(data: &[u8]) -> Result<(), Error> {
    let magic = u32_le(data, 0).ok_or(Error::Truncated)?;
    match magic {
        MH_MAGIC_64 => Ok(()),
        MH_CIGAM_64 => Err(Error::BigEndian),
        MH_MAGIC | MH_CIGAM => Err(Error::Unsupported32Bit),
        other => Err(Error::BadMagic(other)),
    }
}

impl<'a> MachO<'a> {
    /// Parses a thin 64-bit Mach-O header at the start of `data` and checks that all `sizeofcmds` bytes of load
    /// commands are present. A fat file gives `Err(BadMagic(..))`: use [`parse_any`] for those.
    pub fn parse(data: &'a [u8]) -> Result<MachO<'a>, Error> {
        check_magic(data)?;
        let h = |off| u32_le(data, off).ok_or(Error::Truncated);
        let m = MachO {
            data,
            cputype: h(4)?,
            cpusubtype: h(8)?,
            filetype: h(12)?,
            ncmds: h(16)?,
            sizeofcmds: h(20)?,
            flags: h(24)?,
        };
        let end = MACH_HEADER_64_SIZE.checked_add(m.sizeofcmds as usize).ok_or(Error::Truncated)?;
        if end > data.len() {
            return Err(Error::Truncated);
        }
        Ok(m)
    }

    /// The bytes this image was parsed from.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// `cpusubtype` with the capability bits (`CPU_SUBTYPE_MASK`) cleared, e.g. `CPU_SUBTYPE_ARM64E` for an arm64e
    /// image whatever its pointer-authentication ABI version bits say.
    pub fn cpu_subtype(&self) -> u32 {
        self.cpusubtype & !CPU_SUBTYPE_MASK
    }

    /// Architecture name as Apple prints it (see [`arch_name`]).
    pub fn arch_name(&self) -> &'static str {
        arch_name(self.cputype, self.cpusubtype)
    }

    /// The load commands, in file order.
    pub fn load_commands(&self) -> LoadCommands<'a> {
        LoadCommands {
            data: self.data,
            off: MACH_HEADER_64_SIZE,
            end: MACH_HEADER_64_SIZE.saturating_add(self.sizeofcmds as usize),
            left: self.ncmds,
            failed: false,
        }
    }

    /// Checks every load command's framing (`cmdsize`) and the internal layout of the ones this module decodes.
    pub fn validate(&self) -> Result<(), Error> {
        for lc in self.load_commands() {
            let lc = lc?;
            let bad = Error::BadLoadCommand(lc.offset);
            match lc.cmd {
                LC_SEGMENT_64 => {
                    segment_from(&lc).ok_or(bad)?;
                }
                LC_UUID if lc.data.len() < UUID_COMMAND_SIZE => return Err(bad),
                LC_ID_DYLIB => {
                    dylib_name(&lc).ok_or(bad)?;
                }
                LC_BUILD_VERSION
                | LC_VERSION_MIN_MACOSX
                | LC_VERSION_MIN_IPHONEOS
                | LC_VERSION_MIN_TVOS
                | LC_VERSION_MIN_WATCHOS => {
                    build_version_from(&lc).ok_or(bad)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The `LC_UUID` bytes, or `None` when the image has none (or the command is malformed).
    pub fn uuid(&self) -> Option<[u8; 16]> {
        self.load_commands()
            .map_while(Result::ok)
            .find(|lc| lc.cmd == LC_UUID)
            .and_then(|lc| bytes::array::<16>(lc.data, 8))
    }

    /// The `LC_SEGMENT_64` commands, in file order (stops at the first malformed command).
    pub fn segments(&self) -> impl Iterator<Item = Segment<'a>> + 'a {
        self.load_commands()
            .map_while(Result::ok)
            .filter(|lc| lc.cmd == LC_SEGMENT_64)
            .filter_map(|lc| segment_from(&lc))
    }

    /// The first segment named `name` (e.g. `b"__TEXT"`).
    pub fn segment(&self, name: &[u8]) -> Option<Segment<'a>> {
        self.segments().find(|s| s.name() == name)
    }

    /// The section `sect` of segment `seg` (e.g. `b"__DATA", b"__crash_info"`).
    pub fn section(&self, seg: &[u8], sect: &[u8]) -> Option<Section> {
        self.segments().filter(|s| s.name() == seg).find_map(|s| s.sections().find(|x| x.name() == sect))
    }

    /// The `__crash_info` section, looked up in `__DATA` and then `__DATA_DIRTY`.
    pub fn crash_info_section(&self) -> Option<Section> {
        self.section(SEG_DATA, SECT_CRASH_INFO).or_else(|| self.section(SEG_DATA_DIRTY, SECT_CRASH_INFO))
    }

    /// `__TEXT`'s `vmsize` in bytes: the extent Apple prints for an image in "Binary Images".
    pub fn text_size(&self) -> Option<u64> {
        self.segment(SEG_TEXT).map(|s| s.vmsize)
    }

    /// `__TEXT`'s link-time `vmaddr`.
    pub fn text_vmaddr(&self) -> Option<u64> {
        self.segment(SEG_TEXT).map(|s| s.vmaddr)
    }

    /// The ASLR slide of an image whose header was found at `header_addr` in memory: `header_addr − __TEXT.vmaddr`
    /// (the header is the first thing in `__TEXT`). Wrapping arithmetic: the slide is a displacement modulo 2^64.
    /// `None` when there is no `__TEXT` segment.
    pub fn slide(&self, header_addr: u64) -> Option<u64> {
        self.text_vmaddr().map(|v| header_addr.wrapping_sub(v))
    }

    /// The `LC_ID_DYLIB` install name (bytes up to its NUL), for dylibs.
    pub fn install_name(&self) -> Option<&'a [u8]> {
        self.load_commands().map_while(Result::ok).find(|lc| lc.cmd == LC_ID_DYLIB).and_then(|lc| dylib_name(&lc))
    }

    /// Platform and minimum OS from `LC_BUILD_VERSION`, else from the first `LC_VERSION_MIN_*`.
    pub fn build_version(&self) -> Option<BuildVersion> {
        let mut fallback = None;
        for lc in self.load_commands().map_while(Result::ok) {
            match lc.cmd {
                LC_BUILD_VERSION => return build_version_from(&lc),
                LC_VERSION_MIN_MACOSX | LC_VERSION_MIN_IPHONEOS | LC_VERSION_MIN_TVOS | LC_VERSION_MIN_WATCHOS
                    if fallback.is_none() =>
                {
                    fallback = build_version_from(&lc);
                }
                _ => {}
            }
        }
        fallback
    }
}

/// Decodes an `LC_SEGMENT_64` command, checking that its `nsects` sections fit inside `cmdsize`.
fn segment_from<'a>(lc: &LoadCommand<'a>) -> Option<Segment<'a>> {
    if lc.cmd != LC_SEGMENT_64 {
        return None;
    }
    let d = lc.data;
    let nsects = u32_le(d, 64)?;
    let sect_bytes = (nsects as usize).checked_mul(SECTION_64_SIZE)?;
    let sections = slice(d, SEGMENT_COMMAND_64_SIZE, sect_bytes)?;
    Some(Segment {
        segname: bytes::array::<16>(d, 8)?,
        vmaddr: u64_le(d, 24)?,
        vmsize: u64_le(d, 32)?,
        fileoff: u64_le(d, 40)?,
        filesize: u64_le(d, 48)?,
        maxprot: u32_le(d, 56)?,
        initprot: u32_le(d, 60)?,
        nsects,
        flags: u32_le(d, 68)?,
        sections,
    })
}

/// The name of a `dylib_command` (`LC_ID_DYLIB`, `LC_LOAD_DYLIB`): `lc_str.offset` from the command start, up to the
/// first NUL inside the command.
fn dylib_name<'a>(lc: &LoadCommand<'a>) -> Option<&'a [u8]> {
    if lc.data.len() < DYLIB_COMMAND_SIZE {
        return None;
    }
    let name_off = u32_le(lc.data, 8)? as usize;
    let rest = lc.data.get(name_off..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    rest.get(..end)
}

/// Decodes `LC_BUILD_VERSION` or `LC_VERSION_MIN_*`.
fn build_version_from(lc: &LoadCommand<'_>) -> Option<BuildVersion> {
    let d = lc.data;
    let (platform, min_os, sdk) = match lc.cmd {
        LC_BUILD_VERSION => {
            if d.len() < BUILD_VERSION_COMMAND_SIZE {
                return None;
            }
            (u32_le(d, 8)?, u32_le(d, 12)?, u32_le(d, 16)?)
        }
        _ => {
            if d.len() < VERSION_MIN_COMMAND_SIZE {
                return None;
            }
            let platform = match lc.cmd {
                LC_VERSION_MIN_MACOSX => PLATFORM_MACOS,
                LC_VERSION_MIN_IPHONEOS => PLATFORM_IOS,
                LC_VERSION_MIN_TVOS => PLATFORM_TVOS,
                LC_VERSION_MIN_WATCHOS => PLATFORM_WATCHOS,
                _ => return None,
            };
            (platform, u32_le(d, 8)?, u32_le(d, 12)?)
        }
    };
    Some(BuildVersion { platform, min_os: Version(min_os), sdk: Version(sdk), cmd: lc.cmd })
}

/// Architecture name for a CPU type/subtype pair, as Apple prints it in crash reports: `arm64`, `arm64e`,
/// `arm64_32`, `x86_64`, `x86_64h`; `"unknown"` otherwise. Capability bits of the subtype are masked off first.
pub fn arch_name(cputype: u32, cpusubtype: u32) -> &'static str {
    let sub = cpusubtype & !CPU_SUBTYPE_MASK;
    match (cputype, sub) {
        (CPU_TYPE_ARM64, CPU_SUBTYPE_ARM64E) => "arm64e",
        (CPU_TYPE_ARM64, _) => "arm64",
        (CPU_TYPE_ARM64_32, _) => "arm64_32",
        (CPU_TYPE_X86_64, CPU_SUBTYPE_X86_64_H) => "x86_64h",
        (CPU_TYPE_X86_64, _) => "x86_64",
        _ => "unknown",
    }
}

/// Name of a `PLATFORM_*` value (lower case, as `llvm-objdump` prints it); `None` for unknown values.
pub fn platform_name(platform: u32) -> Option<&'static str> {
    Some(match platform {
        PLATFORM_MACOS => "macos",
        PLATFORM_IOS => "ios",
        PLATFORM_TVOS => "tvos",
        PLATFORM_WATCHOS => "watchos",
        PLATFORM_BRIDGEOS => "bridgeos",
        PLATFORM_MACCATALYST => "macCatalyst",
        PLATFORM_IOSSIMULATOR => "iossim",
        PLATFORM_TVOSSIMULATOR => "tvossim",
        PLATFORM_WATCHOSSIMULATOR => "watchossim",
        PLATFORM_DRIVERKIT => "driverkit",
        PLATFORM_VISIONOS => "xros",
        PLATFORM_VISIONOSSIMULATOR => "xrsimulator",
        _ => return None,
    })
}

/// Parses `data` as either a thin 64-bit Mach-O or a universal file; for a universal file, selects the slice for
/// `cputype` (preferring `cpusubtype`, see [`Fat::find`]). A thin file is returned as is, whatever its CPU type.
pub fn parse_any(data: &[u8], cputype: u32, cpusubtype: Option<u32>) -> Result<MachO<'_>, Error> {
    match Fat::parse(data)? {
        Some(fat) => {
            let arch = fat.find(cputype, cpusubtype).ok_or(Error::NoMatchingSlice)?;
            MachO::parse(fat.slice_data(&arch)?)
        }
        None => MachO::parse(data),
    }
}

/// Copies an image's `mach_header_64` and load commands from memory into `buf` through a fault-proof `read`
/// callback (`read(address, destination) -> bool`, e.g. `vm_read_overwrite` on Darwin), then parses them.
/// Two reads: the 32-byte header, then `sizeofcmds` bytes. Allocation-free and usable at crash time; `buf` is
/// preallocated by the caller (a few KiB covers real images; [`Error::BufferTooSmall`] says how much is needed).
pub fn read_header<'b, R>(read: &mut R, header_addr: u64, buf: &'b mut [u8]) -> Result<MachO<'b>, Error>
where
    R: FnMut(u64, &mut [u8]) -> bool,
{
    let head = buf.get_mut(..MACH_HEADER_64_SIZE).ok_or(Error::BufferTooSmall(MACH_HEADER_64_SIZE as u32))?;
    if !read(header_addr, head) {
        return Err(Error::ReadFailed);
    }
    check_magic(head)?;
    let sizeofcmds = u32_le(head, 20).ok_or(Error::Truncated)?;
    let total = MACH_HEADER_64_SIZE.checked_add(sizeofcmds as usize).ok_or(Error::Truncated)?;
    let cmds = buf
        .get_mut(MACH_HEADER_64_SIZE..total)
        .ok_or(Error::BufferTooSmall(u32::try_from(total).unwrap_or(u32::MAX)))?;
    let cmds_addr = header_addr.checked_add(MACH_HEADER_64_SIZE as u64).ok_or(Error::ReadFailed)?;
    if !cmds.is_empty() && !read(cmds_addr, cmds) {
        return Err(Error::ReadFailed);
    }
    let filled = buf.get(..total).ok_or(Error::Truncated)?;
    MachO::parse(filled)
}

/// Everything the image table records about one image, gathered in one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSummary {
    /// `cputype`.
    pub cputype: u32,
    /// `cpusubtype` with capability bits masked.
    pub cpusubtype: u32,
    /// `filetype`.
    pub filetype: u32,
    /// `LC_UUID`, if any.
    pub uuid: Option<[u8; 16]>,
    /// `__TEXT` link-time `vmaddr`.
    pub text_vmaddr: Option<u64>,
    /// `__TEXT` `vmsize`, bytes.
    pub text_size: Option<u64>,
    /// `__TEXT,__text` section: `(addr, size)`, link-time.
    pub text_section: Option<(u64, u64)>,
    /// `__crash_info` section: `(addr, size)`, link-time (add the slide for the runtime address).
    pub crash_info: Option<(u64, u64)>,
    /// Deployment target.
    pub build: Option<BuildVersion>,
    /// `__TEXT,__unwind_info` section (compact unwind): `(addr, size)`, link-time.
    pub unwind_info: Option<(u64, u64)>,
    /// `__TEXT,__eh_frame` section: `(addr, size)`, link-time.
    pub eh_frame: Option<(u64, u64)>,
}

impl MachO<'_> {
    /// Gathers an [`ImageSummary`]; fails only if a load command is malformed.
    pub fn summary(&self) -> Result<ImageSummary, Error> {
        self.validate()?;
        let text = self.segment(SEG_TEXT);
        Ok(ImageSummary {
            cputype: self.cputype,
            cpusubtype: self.cpu_subtype(),
            filetype: self.filetype,
            uuid: self.uuid(),
            text_vmaddr: text.map(|s| s.vmaddr),
            text_size: text.map(|s| s.vmsize),
            text_section: self.section(SEG_TEXT, SECT_TEXT).map(|s| (s.addr, s.size)),
            crash_info: self.crash_info_section().map(|s| (s.addr, s.size)),
            build: self.build_version(),
            unwind_info: self.section(SEG_TEXT, SECT_UNWIND_INFO).map(|s| (s.addr, s.size)),
            eh_frame: self.section(SEG_TEXT, SECT_EH_FRAME).map(|s| (s.addr, s.size)),
        })
    }
}

#[cfg(test)]
mod tests;
