//! Pointer authentication on arm64, live (qemu-user emulates FEAT_PAuth): reads this thread's own frame records,
//! where a `-Zbranch-protection=pac-ret` build stores signed return addresses, and checks that the handler's
//! `strip_pac` and its frame-pointer walker give exactly what the CPU's own `xpaclri` strip gives.
//!
//! `scripts/test-arm64.sh` runs this in both passes with `CRASH_TESTS_EXPECT_PAC=1` (pac-ret build: the saved
//! return addresses must be signed) or `=0` (plain build: they must not be). Run with `--nocapture` to see the
//! `PAC_SAMPLE` lines; the unit tests in `handler/src/arch/aarch64.rs` hold values captured that way.
#![cfg(all(target_os = "linux", target_arch = "aarch64"))]
#![allow(unsafe_code)]

use handler::arch::aarch64::{strip_pac, LINUX_USER_VA_BITS};
use handler::arch::{aarch64, RegisterValues};
use handler::crash::images::{ImageEntry, ImageList};
use handler::platform::linux::crash::memory;
use handler::platform::linux::images::snapshot;
use handler::unwind::{walk, MemoryReader, Repeat, RuleCache, WalkBuffers, WalkOptions};
use std::arch::asm;
use std::hint::black_box;

/// Strips a code pointer with the CPU's `xpaclri` (a HINT-space instruction: a no-op without FEAT_PAuth).
fn hardware_strip(v: u64) -> u64 {
    let out: u64;
    // SAFETY: only moves values through x30 (declared clobbered); `xpaclri` has no memory effects.
    unsafe {
        asm!("mov x30, {v}", "xpaclri", "mov {o}, x30", v = in(reg) v, o = lateout(reg) out, out("x30") _,
             options(nomem, nostack, preserves_flags));
    }
    out
}

/// The bounds of the calling thread's stack.
fn stack_bounds() -> (u64, u64) {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: `attr` is initialised by pthread_getattr_np before it is read and destroyed once; out-pointers are
    // valid locals.
    unsafe {
        assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()), 0);
        assert_eq!(libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size), 0);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
    }
    (addr as u64, addr as u64 + size as u64)
}

/// Reads only inside this thread's stack.
struct OwnStack {
    lo: u64,
    hi: u64,
}

impl MemoryReader for OwnStack {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(end) = addr.checked_add(buf.len() as u64) else { return false };
        if addr < self.lo || end > self.hi {
            return false;
        }
        // SAFETY: the range lies inside this thread's mapped stack (checked above).
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        true
    }
}

/// What `innermost` saw.
#[derive(Debug)]
struct Sample {
    /// Raw return addresses stored in the two innermost frame records (innermost's and middle's).
    raw: [u64; 2],
    /// The walker's frames 1 and 2 when started from innermost's own registers.
    walked: [u64; 2],
}

#[inline(never)]
fn innermost() -> Sample {
    let (fp, sp, pc): (u64, u64, u64);
    // SAFETY: reads x29, sp and the address of a local label; no memory access.
    unsafe {
        asm!("mov {fp}, x29", "mov {sp}, sp", "adr {pc}, .", fp = out(reg) fp, sp = out(reg) sp, pc = out(reg) pc,
             options(nomem, nostack, preserves_flags));
    }
    let (lo, hi) = stack_bounds();
    let mut mem = OwnStack { lo, hi };
    let rec0 = [mem.read_u64(fp).expect("own frame record"), mem.read_u64(fp + 8).expect("saved lr")];
    let rec1_ret = mem.read_u64(rec0[0] + 8).expect("caller's saved lr");
    // The walk as the crash path does it: the fault-proof reader (its pipe fallback under qemu-user) and the
    // image table with each image's unwind tables.
    let mut images = ImageList::from_parts(
        Vec::leak(vec![ImageEntry::default(); 512]),
        Vec::leak(vec![0u8; 1 << 17]),
        Vec::leak(vec![0u32; 512]),
    );
    snapshot(&mut images, b"/proc/self/exe");
    let mut page = vec![0u8; memory::BLOCK];
    let mut fds = [0i32; 2];
    // SAFETY: valid out-array of two ints.
    let pipe =
        (unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0).then_some((fds[0], fds[1]));
    // SAFETY: getpid has no preconditions.
    let mut reader =
        memory::ProcessVmReader::new(unsafe { libc::getpid() }, &mut page).with_pipe(pipe, memory::PipeUse::Everything);
    let mut regs = RegisterValues::new(aarch64::SET, aarch64::LEN);
    regs.put(32, pc);
    regs.put(31, sp);
    regs.put(29, fp);
    let mut frames = [0u64; 8];
    let mut trust = [0u8; 8];
    let mut reps = [Repeat::default(); 2];
    let mut rules = Box::new(RuleCache::EMPTY);
    let bufs = WalkBuffers { frames: &mut frames, trust: &mut trust, repeats: &mut reps, rules: &mut rules };
    let o = walk(&regs, &mut reader, &images, &WalkOptions::host(), None, bufs);
    assert!(o.frames >= 3, "walk too short: {o:?}");
    Sample { raw: [rec0[1], rec1_ret], walked: [frames[1], frames[2]] }
}

#[inline(never)]
fn middle() -> Sample {
    black_box(innermost())
}

#[inline(never)]
fn outer() -> Sample {
    black_box(middle())
}

/// Whether the code address `ret` lies just after a call inside function `f` (a few hundred bytes at most).
fn inside(ret: u64, f: u64) -> bool {
    ret > f && ret - f < 0x400
}

#[test]
fn signed_return_addresses_strip_like_the_cpu_and_the_walker_agrees() {
    let s = outer();
    let expect_pac = std::env::var("CRASH_TESTS_EXPECT_PAC").ok();
    let owners = [middle as fn() -> Sample as usize as u64, outer as fn() -> Sample as usize as u64];
    for (i, (&raw, &walked)) in s.raw.iter().zip(&s.walked).enumerate() {
        let hw = hardware_strip(raw);
        let sw = strip_pac(raw, LINUX_USER_VA_BITS);
        println!("PAC_SAMPLE raw={raw:#018x} xpaclri={hw:#018x} strip_pac={sw:#018x} walked={walked:#018x}");
        assert_eq!(sw, hw, "strip_pac disagrees with xpaclri for {raw:#x}");
        assert_eq!(walked, hw, "walker frame {} for {raw:#x}", i + 1);
        assert!(inside(hw, owners[i]), "return address {hw:#x} is not in its caller at {:#x}", owners[i]);
        match expect_pac.as_deref() {
            Some("1") => assert_ne!(raw, hw, "pac-ret build but the saved return address {raw:#x} is not signed"),
            Some("0") => assert_eq!(raw, hw, "plain build but the saved return address {raw:#x} has high bits"),
            _ => {}
        }
    }
}
