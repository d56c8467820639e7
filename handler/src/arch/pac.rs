//! Pointer-authentication (arm64e) stripping for return addresses and `pc`/`lr`: a small pure function, shared by
//! the arm64 Linux path ([`crate::arch::aarch64::strip_pac`], the walker's [`crate::unwind::WalkOptions::strip`]) and
//! the Apple backend (thread states from Mach, `crate::platform::darwin::crash::state`). Pure, allocation-free, async-signal-safe.
//!
//! A signed user-space pointer keeps its address in bits `0..va_bits` and carries the PAC in the bits above (up to
//! bit 54, plus the top byte 56..63 for instruction pointers, where top-byte-ignore does not apply); bit 55 selects
//! the translation table and is 0 for every user-space address. `xpaci`/`xpaclri` replace the PAC bits with copies
//! of bit 55, so for user addresses stripping is exactly "clear every bit from `va_bits` up". Everything therefore
//! hinges on the right `va_bits` (64 − `T0SZ`), which differs by platform:
//!
//! - iOS/iPadOS arm64: `MACH_VM_MAX_ADDRESS` = `0x0000000FC0000000` on most devices (XNU
//!   `osfmk/mach/arm/vm_param.h`), so 36 bits; that is where the common fixed `0x0000000FFFFFFFFF` mask comes from.
//!   Devices and processes with a larger address space (large-memory iPads, the extended-virtual-addressing
//!   entitlement) use more bits.
//! - macOS arm64: `MACH_VM_MAX_ADDRESS` = `0x00007FFFFE000000`, so 47 bits. A 36-bit mask destroys real address bits
//!   there (anything mapped above 64 GiB), which is why the fixed mask is wrong off iOS.
//! - Linux arm64 (qemu-user included): 48 bits by default (`CONFIG_ARM64_VA_BITS=48`).
//!
//! Too many bits leave PAC bits in place (garbage addresses); too few cut real address bits. The exact value for a
//! process is its VM map's upper bound: on Darwin `task_info(TASK_VM_INFO).max_address`, taken at install time
//! (see [`PacStrip::covering`]); failing that, the platform's `MACH_VM_MAX_ADDRESS`, and as a plausibility check
//! every stripped return address should fall inside an image of the image table.
//!
//! Worked example (qemu-user, `-Zbranch-protection=pac-ret`, 48-bit VA): a saved LR of `0x0029_0055_0001_cc60` has
//! PAC bits `0x29` in bits 48..55 (bit 55 itself 0); clearing bits 48..63 gives `0x0000_0055_0001_cc60`, the return
//! address inside the test binary mapped at `0x55_0000_0000`.

/// Lowest accepted `va_bits`: AArch64's largest `T0SZ` is 39 (25-bit address space).
pub const MIN_VA_BITS: u8 = 25;
/// Highest accepted `va_bits`: 52 with `FEAT_LVA`; 55 would leave nothing but bit 55 and the top byte to strip.
pub const MAX_VA_BITS: u8 = 55;
/// iOS arm64 default: `MACH_VM_MAX_ADDRESS` `0x0000000FC0000000` (XNU `osfmk/mach/arm/vm_param.h`) needs 36 bits.
pub const IOS_ARM64_VA_BITS: u8 = 36;
/// macOS arm64: `MACH_VM_MAX_ADDRESS` `0x00007FFFFE000000` (XNU `osfmk/mach/arm/vm_param.h`) needs 47 bits.
pub const MACOS_ARM64_VA_BITS: u8 = 47;
/// Linux arm64 default (`CONFIG_ARM64_VA_BITS=48`).
pub const LINUX_ARM64_VA_BITS: u8 = 48;

/// Strips PAC bits from user-space pointers given the number of virtual-address bits in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacStrip {
    va_bits: u8,
}

impl PacStrip {
    /// A stripper for `va_bits` address bits; `None` outside [`MIN_VA_BITS`]`..=`[`MAX_VA_BITS`].
    pub const fn with_va_bits(va_bits: u8) -> Option<PacStrip> {
        if va_bits < MIN_VA_BITS || va_bits > MAX_VA_BITS {
            None
        } else {
            Some(PacStrip { va_bits })
        }
    }

    /// From the translation-control `T0SZ` field: `va_bits = 64 − T0SZ`.
    pub const fn from_t0sz(t0sz: u8) -> Option<PacStrip> {
        match 64u8.checked_sub(t0sz) {
            Some(bits) => PacStrip::with_va_bits(bits),
            None => None,
        }
    }

    /// The narrowest stripper that keeps every address below `end` (an exclusive upper bound of the user address
    /// space, e.g. `TASK_VM_INFO.max_address` or `MACH_VM_MAX_ADDRESS`, or one past the highest mapped byte known).
    /// `None` when `end` is 0 or needs more than [`MAX_VA_BITS`] bits; bounds below 2^25 give [`MIN_VA_BITS`].
    pub fn covering(end: u64) -> Option<PacStrip> {
        let highest = end.checked_sub(1)?;
        let bits = 64u32.saturating_sub(highest.leading_zeros());
        let bits = u8::try_from(bits).ok()?.max(MIN_VA_BITS);
        PacStrip::with_va_bits(bits)
    }

    /// The number of address bits kept.
    pub const fn va_bits(self) -> u8 {
        self.va_bits
    }

    /// The mask of address bits kept: `2^va_bits − 1`.
    pub const fn mask(self) -> u64 {
        (1u64 << self.va_bits).wrapping_sub(1)
    }

    /// The address with PAC bits (every bit from `va_bits` up) cleared. A value with bit 55 set is a kernel-half
    /// address (or not an address at all) and comes back unchanged; idempotent; an unsigned user address comes back
    /// unchanged.
    pub const fn strip(self, value: u64) -> u64 {
        if value & (1u64 << 55) != 0 {
            value
        } else {
            value & self.mask()
        }
    }

    /// Whether `value` has any bit set above the address bits (a signed pointer, or not a user address at all).
    pub const fn has_pac_bits(self, value: u64) -> bool {
        value & !self.mask() != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_pac_ret_frame_record_lr() {
        // Seen under qemu-aarch64 with -Zbranch-protection=pac-ret: PAC 0x29 in bits 48..55, 48-bit VA.
        let linux = PacStrip::with_va_bits(LINUX_ARM64_VA_BITS).unwrap();
        assert_eq!(linux.strip(0x0029_0055_0001_cc60), 0x55_0001_cc60);
        assert!(linux.has_pac_bits(0x0029_0055_0001_cc60));
        assert!(!linux.has_pac_bits(0x55_0001_cc60));
        assert_eq!(linux.strip(0x55_0001_cc60), 0x55_0001_cc60, "unsigned addresses pass unchanged");
        // A stack-region return address near the top of a 48-bit space needs all 48 bits: 39 would cut it.
        let signed_high = 0x0012_ffff_8000_1234u64;
        assert_eq!(linux.strip(signed_high), 0xffff_8000_1234);
        assert_ne!(PacStrip::with_va_bits(39).unwrap().strip(signed_high), 0xffff_8000_1234);
    }

    #[test]
    fn ios_needs_36_bits_and_47_leaves_garbage() {
        // iOS arm64e LR with PAC bits spread over 36..54 and the top byte.
        let signed = 0x4c2d_8f21_ad98_ab74u64;
        let ios = PacStrip::with_va_bits(IOS_ARM64_VA_BITS).unwrap();
        assert_eq!(ios.strip(signed), 0x1_ad98_ab74);
        assert_eq!(ios.mask(), 0x0000_000f_ffff_ffff, "the well-known iOS mask");
        let macos = PacStrip::with_va_bits(MACOS_ARM64_VA_BITS).unwrap();
        assert_eq!(macos.strip(signed), 0x0f21_ad98_ab74, "too many bits keep PAC bits: a garbage address");
    }

    #[test]
    fn fixed_ios_mask_is_wrong_on_macos() {
        // macOS arm64 maps memory above 64 GiB (e.g. JIT or large allocations at 0x6000_0000_0000).
        let addr = 0x0000_6000_0123_4560u64;
        let signed = 0x1a17_6000_0123_4560u64 & !(1 << 55);
        let macos = PacStrip::with_va_bits(MACOS_ARM64_VA_BITS).unwrap();
        assert_eq!(macos.strip(signed), addr);
        assert_ne!(PacStrip::with_va_bits(IOS_ARM64_VA_BITS).unwrap().strip(signed), addr);
    }

    #[test]
    fn derived_from_the_address_space_bound() {
        assert_eq!(PacStrip::covering(0x0000_000f_c000_0000).unwrap().va_bits(), 36, "iOS MACH_VM_MAX_ADDRESS");
        assert_eq!(PacStrip::covering(0x0000_7fff_fe00_0000).unwrap().va_bits(), 47, "macOS MACH_VM_MAX_ADDRESS");
        assert_eq!(PacStrip::covering(1 << 48).unwrap().va_bits(), 48, "exclusive bound 2^48");
        assert_eq!(PacStrip::covering((1 << 48) + 1).unwrap().va_bits(), 49);
        assert_eq!(PacStrip::covering(0x1000).unwrap().va_bits(), MIN_VA_BITS);
        assert_eq!(PacStrip::covering(0), None);
        assert_eq!(PacStrip::covering(u64::MAX), None);
        assert_eq!(PacStrip::from_t0sz(16).unwrap().va_bits(), 48);
        assert_eq!(PacStrip::from_t0sz(28).unwrap().va_bits(), 36);
        assert_eq!(PacStrip::from_t0sz(65), None);
        assert_eq!(PacStrip::with_va_bits(24), None);
        assert_eq!(PacStrip::with_va_bits(56), None);
        assert_eq!(PacStrip::with_va_bits(55).unwrap().mask(), (1 << 55) - 1);
    }

    #[test]
    fn stripping_is_idempotent() {
        let s = PacStrip::with_va_bits(40).unwrap();
        for v in [0u64, 1, 0x5e2d_beef_cafe_f00d, 0x00ff_ffff_ffff] {
            assert_eq!(s.strip(s.strip(v)), s.strip(v));
            assert!(s.strip(v) <= s.mask());
        }
        // Kernel-half values (bit 55 set) are left alone, as `xpaci` leaves them sign-extended.
        for v in [u64::MAX, 0xdead_beef_cafe_f00d, 0xffff_8000_0000_1000] {
            assert_eq!(s.strip(v), v);
        }
    }
}
