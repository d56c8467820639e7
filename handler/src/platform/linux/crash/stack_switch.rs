//! Runs a function on another stack. The crash owner switches to its preallocated crash stack right after entering
//! the signal handler, so the heavy work (walk, encode, write) never depends on the size of the stack the signal
//! arrived on: a Rust thread's small std alternate stack, or what is left of an overflowed thread stack.
#![allow(unsafe_code)]

use core::ffi::c_void;

/// Calls `f(arg)` with the stack pointer set to `top`, then restores the stack pointer.
///
/// # Safety
/// `top` must be the 16-byte-aligned top of a mapped, writable stack region that nothing else uses while `f` runs,
/// large enough for `f`. `f` must not unwind (it is `extern "C"`, so a panic aborts).
pub unsafe fn run_on_stack(top: usize, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees `top` is a valid stack top. r12 is callee-saved, so `f` preserves the old
    // stack pointer kept there; `call` on a 16-aligned rsp gives `f` the SysV ABI alignment; clobber_abi("C")
    // tells the compiler every caller-saved register may change.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above; x20 is callee-saved (AAPCS64), so `f` preserves the old sp kept there; `blr` sets x30,
    // which clobber_abi("C") declares clobbered.
    unsafe {
        core::arch::asm!(
            "mov x20, sp",
            "mov sp, {top}",
            "blr {f}",
            "mov sp, x20",
            top = in(reg) top,
            f = in(reg) f,
            in("x0") arg,
            out("x20") _,
            clobber_abi("C"),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = top;
        f(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};

    static SEEN_SP: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn probe(arg: *mut c_void) {
        let local = 0u8;
        SEEN_SP.store(&local as *const u8 as usize, Ordering::SeqCst);
        // SAFETY: the test passes a pointer to a live usize.
        unsafe { *(arg as *mut usize) += 41 };
    }

    #[test]
    fn runs_on_the_given_stack_and_comes_back() {
        let mut stack = vec![0u128; 4096]; // 64 KiB, 16-aligned
        let lo = stack.as_mut_ptr() as usize;
        let top = lo + stack.len() * 16;
        let mut v = 1usize;
        // SAFETY: `stack` is a live, writable, 16-aligned region used only by `probe`.
        unsafe { run_on_stack(top, probe, &mut v as *mut usize as *mut c_void) };
        assert_eq!(v, 42);
        let sp = SEEN_SP.load(Ordering::SeqCst);
        assert!(sp > lo && sp < top, "{sp:#x} not in {lo:#x}..{top:#x}");
    }
}
