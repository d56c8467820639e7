//! Universal ("fat") files: a big-endian `fat_header` followed by `nfat_arch` `fat_arch` (or `fat_arch_64`)
//! entries, each naming a CPU type and the file range of one thin Mach-O slice (`mach-o/fat.h`).

use super::bytes::{u32_be, u64_be};
use super::consts::{CPU_SUBTYPE_MASK, FAT_ARCH_64_SIZE, FAT_ARCH_SIZE, FAT_HEADER_SIZE, FAT_MAGIC, FAT_MAGIC_64};
use super::Error;

/// Upper bound on `nfat_arch` accepted. Real files have a handful; Java class files share `FAT_MAGIC` and are told
/// apart by their (large) version number in this position (cctools `otool` uses the same heuristic).
pub const MAX_FAT_ARCHS: u32 = 32;

/// One `fat_arch` / `fat_arch_64` entry (`mach-o/fat.h`). Offsets and sizes are in bytes from the start of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatArch {
    /// `cputype` (`cpu_type_t`, `mach/machine.h`).
    pub cputype: u32,
    /// `cpusubtype` including its capability bits (`cpu_subtype_t`, `mach/machine.h`).
    pub cpusubtype: u32,
    /// `offset`: file offset of the slice, in bytes.
    pub offset: u64,
    /// `size`: length of the slice, in bytes.
    pub size: u64,
    /// `align`: slice alignment as a power of two.
    pub align: u32,
}

/// A parsed universal header over the whole file.
#[derive(Clone, Copy, Debug)]
pub struct Fat<'a> {
    data: &'a [u8],
    is64: bool,
    count: u32,
}

impl<'a> Fat<'a> {
    /// Parses the fat header at the start of `data`. `Ok(None)` when `data` does not start with `FAT_MAGIC` or
    /// `FAT_MAGIC_64`; `Err` when it does but the header or its entry table is truncated or implausible.
    pub fn parse(data: &'a [u8]) -> Result<Option<Fat<'a>>, Error> {
        let magic = match u32_be(data, 0) {
            Some(m) => m,
            None => return Ok(None),
        };
        let is64 = match magic {
            FAT_MAGIC => false,
            FAT_MAGIC_64 => true,
            _ => return Ok(None),
        };
        let count = u32_be(data, 4).ok_or(Error::Truncated)?;
        if count == 0 || count > MAX_FAT_ARCHS {
            return Err(Error::BadFatHeader);
        }
        let entry = if is64 { FAT_ARCH_64_SIZE } else { FAT_ARCH_SIZE };
        let table = (count as usize).checked_mul(entry).and_then(|t| t.checked_add(FAT_HEADER_SIZE));
        match table {
            Some(end) if end <= data.len() => Ok(Some(Fat { data, is64, count })),
            _ => Err(Error::Truncated),
        }
    }

    /// Number of slices (`nfat_arch`).
    pub fn len(&self) -> u32 {
        self.count
    }

    /// Always false: a parsed header has at least one slice.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether the file uses 64-bit `fat_arch_64` entries (`FAT_MAGIC_64`).
    pub fn is_64(&self) -> bool {
        self.is64
    }

    /// Entry `i`, or `None` past the end.
    pub fn arch(&self, i: u32) -> Option<FatArch> {
        if i >= self.count {
            return None;
        }
        let entry = if self.is64 { FAT_ARCH_64_SIZE } else { FAT_ARCH_SIZE };
        let off = (i as usize).checked_mul(entry)?.checked_add(FAT_HEADER_SIZE)?;
        let d = self.data;
        let cputype = u32_be(d, off)?;
        let cpusubtype = u32_be(d, off.checked_add(4)?)?;
        if self.is64 {
            Some(FatArch {
                cputype,
                cpusubtype,
                offset: u64_be(d, off.checked_add(8)?)?,
                size: u64_be(d, off.checked_add(16)?)?,
                align: u32_be(d, off.checked_add(24)?)?,
            })
        } else {
            Some(FatArch {
                cputype,
                cpusubtype,
                offset: u64::from(u32_be(d, off.checked_add(8)?)?),
                size: u64::from(u32_be(d, off.checked_add(12)?)?),
                align: u32_be(d, off.checked_add(16)?)?,
            })
        }
    }

    /// The bytes of slice `arch` within the file, bounds-checked.
    pub fn slice_data(&self, arch: &FatArch) -> Result<&'a [u8], Error> {
        let start = usize::try_from(arch.offset).map_err(|_| Error::Truncated)?;
        let len = usize::try_from(arch.size).map_err(|_| Error::Truncated)?;
        super::bytes::slice(self.data, start, len).ok_or(Error::Truncated)
    }

    /// Selects the slice for `cputype`. With `cpusubtype = Some(s)`, a slice whose subtype (capability bits masked
    /// with `CPU_SUBTYPE_MASK`) equals `s & !CPU_SUBTYPE_MASK` is preferred; otherwise (or with `None`) the first
    /// slice of that CPU type is taken.
    pub fn find(&self, cputype: u32, cpusubtype: Option<u32>) -> Option<FatArch> {
        let mut first = None;
        let mut i = 0;
        while i < self.count {
            match self.arch(i) {
                Some(a) if a.cputype == cputype => {
                    if let Some(s) = cpusubtype {
                        if (a.cpusubtype & !CPU_SUBTYPE_MASK) == (s & !CPU_SUBTYPE_MASK) {
                            return Some(a);
                        }
                    }
                    if first.is_none() {
                        first = Some(a);
                    }
                }
                _ => {}
            }
            i = i.saturating_add(1);
        }
        first
    }

    /// Iterates over the entries.
    pub fn iter(&self) -> impl Iterator<Item = FatArch> + '_ {
        (0..self.count).filter_map(move |i| self.arch(i))
    }
}
