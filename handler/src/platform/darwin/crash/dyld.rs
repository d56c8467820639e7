//! Reading dyld's and the kernel's process records from raw bytes: the `dyld_all_image_infos` header the kernel
//! points to through `task_info(TASK_DYLD_INFO)` (where dyld itself is loaded, which `_dyld_register_func_for_add_image`
//! never reports), and the `kinfo_proc` record `sysctl(KERN_PROC_PID)` returns (is a debugger attached?).
//!
//! Pure decoding over byte slices, so the offsets are tested on every host. Allocation-free and panic-free.

use crate::platform::darwin::crash::macho::bytes::{u32_le, u64_le};

/// `TASK_DYLD_ALL_IMAGE_INFO_64` (`osfmk/mach/task_info.h`): `task_dyld_info.all_image_info_format` of a 64-bit
/// process.
pub const TASK_DYLD_ALL_IMAGE_INFO_64: i32 = 1;

/// Bytes of the `dyld_all_image_infos` prefix [`parse_all_image_infos`] reads: up to and including
/// `dyldImageLoadAddress`.
pub const ALL_IMAGE_INFOS_PREFIX: usize = 40;

/// Offset of `dyldImageLoadAddress` in the 64-bit `dyld_all_image_infos` (`mach-o/dyld_images.h`):
/// `version` u32 @0, `infoArrayCount` u32 @4, `infoArray` pointer @8, `notification` pointer @16,
/// `processDetachedFromSharedRegion` bool @24, `libSystemInitialized` bool @25, then the pointer aligned to 8 @32.
const DYLD_LOAD_ADDRESS_OFFSET: usize = 32;

/// The fields of `dyld_all_image_infos` this crate uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllImageInfos {
    /// `version` (dyld increments it when it appends fields; `dyldImageLoadAddress` exists from version 2).
    pub version: u32,
    /// `infoArrayCount`: images in `infoArray`.
    pub info_array_count: u32,
    /// `infoArray`: address of the `dyld_image_info` array (may be 0 while dyld updates it).
    pub info_array: u64,
    /// `dyldImageLoadAddress`: address of dyld's own Mach-O header; `None` before version 2 or when 0.
    pub dyld_load_address: Option<u64>,
}

/// Decodes the start of a 64-bit `dyld_all_image_infos` (at least [`ALL_IMAGE_INFOS_PREFIX`] bytes, little-endian).
/// `None` when `bytes` is too short.
pub fn parse_all_image_infos(bytes: &[u8]) -> Option<AllImageInfos> {
    let version = u32_le(bytes, 0)?;
    let info_array_count = u32_le(bytes, 4)?;
    let info_array = u64_le(bytes, 8)?;
    let dyld = u64_le(bytes, DYLD_LOAD_ADDRESS_OFFSET)?;
    Some(AllImageInfos {
        version,
        info_array_count,
        info_array,
        dyld_load_address: if version >= 2 && dyld != 0 { Some(dyld) } else { None },
    })
}

/// `P_TRACED` (`bsd/sys/proc.h`): the process is being debugged (ptrace'd).
pub const P_TRACED: i32 = 0x0000_0800;

/// Size of `struct kinfo_proc` on 64-bit Darwin (`bsd/sys/sysctl.h`: `extern_proc` 296 bytes + `eproc` 352 bytes).
pub const KINFO_PROC_SIZE: usize = 648;

/// Offset of `kp_proc.p_flag` in `struct kinfo_proc` (64-bit, `bsd/sys/proc.h` `struct extern_proc`): the `p_un`
/// union (two pointers, 16 bytes) @0, `p_vmspace` pointer @16, `p_sigacts` pointer @24, `p_flag` int @32.
pub const KINFO_PROC_P_FLAG_OFFSET: usize = 32;

/// Whether a `kinfo_proc` record (from `sysctl({CTL_KERN, KERN_PROC, KERN_PROC_PID, pid})`) says a debugger is
/// attached (`P_TRACED` in `p_flag`). `None` when the record is too short.
pub fn kinfo_proc_is_traced(kinfo: &[u8]) -> Option<bool> {
    if kinfo.len() < KINFO_PROC_SIZE {
        return None;
    }
    let flag = u32_le(kinfo, KINFO_PROC_P_FLAG_OFFSET)?;
    Some(flag & (P_TRACED as u32) != 0)
}

/// `TASK_VM_INFO` (`osfmk/mach/task_info.h`): the `task_info` flavor of `task_vm_info_data_t`.
pub const TASK_VM_INFO: u32 = 22;

/// `TASK_VM_INFO_REV2_COUNT` in 32-bit words: `task_vm_info_data_t` up to and including `max_address`
/// (`osfmk/mach/task_info.h`, `#pragma pack(4)`: 19 `mach_vm_size_t` fields plus two `integer_t` before
/// `phys_footprint` @144, then `min_address` @152 and `max_address` @160, so 168 bytes).
pub const TASK_VM_INFO_REV2_COUNT: usize = 42;

/// `max_address` of a `task_vm_info_data_t` returned as `count` 32-bit words: the exclusive upper bound of the
/// task's address space, from which the number of pointer-authentication-free address bits follows
/// (`crate::arch::pac::PacStrip::covering`). `None` when the kernel returned fewer than
/// [`TASK_VM_INFO_REV2_COUNT`] words (an old kernel) or the field is 0.
pub fn task_vm_info_max_address(words: &[u32], count: usize) -> Option<u64> {
    if count < TASK_VM_INFO_REV2_COUNT {
        return None;
    }
    let lo = u64::from(*words.get(40)?);
    let hi = u64::from(*words.get(41)?);
    let v = lo | (hi << 32);
    (v != 0).then_some(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn max_address_is_word_40() {
        let mut w = [0u32; 60];
        w[38] = 0x1234; // min_address: not it
        w[40] = 0xc000_0000;
        w[41] = 0xf; // iOS MACH_VM_MAX_ADDRESS 0xFC0000000
        assert_eq!(task_vm_info_max_address(&w, 42), Some(0xf_c000_0000));
        assert_eq!(task_vm_info_max_address(&w, 41), None, "rev1 kernels lack the field");
        assert_eq!(task_vm_info_max_address(&[0; 42], 42), None);
        let bits = crate::arch::pac::PacStrip::covering(0xf_c000_0000).map(|s| s.va_bits());
        assert_eq!(bits, Some(36));
    }

    use super::*;

    #[test]
    fn dyld_load_address_sits_at_32() {
        let mut b = vec![0u8; ALL_IMAGE_INFOS_PREFIX];
        b[0..4].copy_from_slice(&17u32.to_le_bytes()); // dyld 4 reports version 17
        b[4..8].copy_from_slice(&412u32.to_le_bytes());
        b[8..16].copy_from_slice(&0x1_0a00_4000u64.to_le_bytes());
        b[16..24].copy_from_slice(&0x1_8000_1234u64.to_le_bytes());
        b[24] = 0;
        b[25] = 1;
        b[32..40].copy_from_slice(&0x1_0004_0000u64.to_le_bytes());
        let i = parse_all_image_infos(&b).expect("parsed");
        assert_eq!(i.version, 17);
        assert_eq!(i.info_array_count, 412);
        assert_eq!(i.info_array, 0x1_0a00_4000);
        assert_eq!(i.dyld_load_address, Some(0x1_0004_0000));
        // Version 1 has no dyldImageLoadAddress.
        b[0..4].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(parse_all_image_infos(&b).expect("parsed").dyld_load_address, None);
        assert_eq!(parse_all_image_infos(&b[..39]), None);
    }

    #[test]
    fn traced_flag_is_read_from_p_flag() {
        let mut k = vec![0u8; KINFO_PROC_SIZE];
        // Pointers around p_flag must not matter.
        k[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        k[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(kinfo_proc_is_traced(&k), Some(false));
        k[32..36].copy_from_slice(&(0x4004 | P_TRACED as u32).to_le_bytes());
        assert_eq!(kinfo_proc_is_traced(&k), Some(true));
        assert_eq!(kinfo_proc_is_traced(&k[..100]), None);
    }
}
