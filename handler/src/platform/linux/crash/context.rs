//! Copies a Linux `ucontext_t` into the pure register decoders of `crate::arch`.
#![allow(unsafe_code)]

use crate::arch::RegisterValues;

/// Decodes the registers of the `ucontext_t` a signal handler received.
///
/// # Safety
/// `uc` must be null or point to the `ucontext_t` the kernel passed to an `SA_SIGINFO` handler, valid for reads
/// for the duration of the call.
pub unsafe fn registers(uc: *const libc::c_void) -> RegisterValues {
    if uc.is_null() {
        return RegisterValues::EMPTY;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the caller guarantees `uc` points to a kernel-provided ucontext_t.
        let uc = unsafe { &*(uc as *const libc::ucontext_t) };
        let mut g = [0u64; crate::arch::x86_64::greg::COUNT];
        for (d, s) in g.iter_mut().zip(uc.uc_mcontext.gregs.iter()) {
            *d = *s as u64;
        }
        crate::arch::x86_64::from_gregs(&g)
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: the caller guarantees `uc` points to a kernel-provided ucontext_t.
        let uc = unsafe { &*(uc as *const libc::ucontext_t) };
        let mc = &uc.uc_mcontext;
        // `__reserved` (4096 bytes, private in the libc crate) is the tail of mcontext_t (Linux
        // arch/arm64/include/uapi/asm/sigcontext.h: `__u8 __reserved[4096] __attribute__((__aligned__(16)))`).
        const RESERVED: usize = 4096;
        const OFFSET: usize = core::mem::size_of::<libc::mcontext_t>() - RESERVED;
        // SAFETY: the last 4096 bytes of the mcontext_t are `__reserved`, inside the same live object.
        let reserved =
            unsafe { core::slice::from_raw_parts((mc as *const libc::mcontext_t as *const u8).add(OFFSET), RESERVED) };
        crate::arch::aarch64::from_sigcontext(&crate::arch::aarch64::SigContext {
            fault_address: mc.fault_address,
            regs: mc.regs,
            sp: mc.sp,
            pc: mc.pc,
            pstate: mc.pstate,
            reserved,
        })
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        RegisterValues::EMPTY
    }
}
