//! The unwinder on this very process, checked against an independent unwinder: glibc's `backtrace(3)`, which
//! walks with libgcc's DWARF unwinder (`_Unwind_Backtrace`). Our walk starts from `getcontext(3)`'s registers, reads
//! memory only through the crash path's fault-proof reader (`process_vm_readv`, or its pipe fallback under
//! qemu-user) and finds images in an install-time `dl_iterate_phdr` snapshot, as a crash does.
//!
//! Frame 0 differs by construction (ours is the return address of `getcontext`, theirs of `backtrace`, both in the
//! same function); every caller after it must be the same address in the same order, to the outermost frame
//! (`_start` for the main thread, `clone3`/`clone` for other threads). Built as users build: the workspace does
//! not force frame pointers, so most of these frames (std, glibc) have none.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use handler::crash::images::{ImageEntry, ImageList};
use handler::platform::linux::crash::{context, memory};
use handler::platform::linux::images::snapshot;
use handler::unwind::{trust, walk, Repeat, RuleCache, StopReason, WalkBuffers, WalkOptions};
use std::hint::black_box;

extern "C" {
    /// glibc `<execinfo.h>`.
    fn backtrace(buffer: *mut *mut libc::c_void, size: libc::c_int) -> libc::c_int;
}

struct Walked {
    ours: Vec<u64>,
    trust: Vec<u8>,
    stop: StopReason,
    theirs: Vec<u64>,
}

fn images() -> ImageList {
    let mut list = ImageList::from_parts(
        Vec::leak(vec![ImageEntry::default(); 512]),
        Vec::leak(vec![0u8; 1 << 17]),
        Vec::leak(vec![0u32; 512]),
    );
    let exe = std::fs::read_link("/proc/self/exe").expect("exe");
    snapshot(&mut list, exe.as_os_str().as_encoded_bytes());
    list
}

fn pipe() -> Option<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: valid out-array of two ints.
    (unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0).then_some((fds[0], fds[1]))
}

/// Captures this point with both unwinders.
#[inline(never)]
fn capture_here() -> Walked {
    // SAFETY: an all-zero ucontext_t is a valid out-parameter for getcontext.
    let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
    // SAFETY: getcontext fills `uc`; we never setcontext to it.
    assert_eq!(unsafe { libc::getcontext(&mut uc) }, 0);
    // SAFETY: `uc` was filled by getcontext, which uses the same mcontext layout as a signal's ucontext.
    let regs = unsafe { context::registers(&uc as *const libc::ucontext_t as *const libc::c_void) };
    let mut raw = [std::ptr::null_mut(); 256];
    // SAFETY: the buffer holds 256 pointers.
    let n = unsafe { backtrace(raw.as_mut_ptr(), 256) };
    let theirs = raw[..n as usize].iter().map(|p| *p as u64).collect();

    let list = images();
    let mut page = vec![0u8; memory::BLOCK];
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let pipe = if memory::process_vm_readv_works() { None } else { pipe() };
    let mut mem = memory::ProcessVmReader::new(pid, &mut page).with_pipe(pipe, memory::PipeUse::Everything);
    let mut frames = vec![0u64; 512];
    let mut tr = vec![0u8; 512];
    let mut reps = vec![Repeat::default(); 32];
    let opts = WalkOptions::host();
    let o = walk(
        &regs,
        &mut mem,
        &list,
        &opts,
        None,
        WalkBuffers { frames: &mut frames, trust: &mut tr, repeats: &mut reps, rules: &mut Box::new(RuleCache::EMPTY) },
    );
    assert_eq!(o.repeats, 0, "no recursion here");
    if let Some((r, w)) = pipe {
        // SAFETY: closing the pipe made above.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    }
    Walked { ours: frames[..o.frames].to_vec(), trust: tr[..o.frames].to_vec(), stop: o.stop, theirs }
}

#[inline(never)]
fn level3() -> Walked {
    black_box(capture_here())
}

#[inline(never)]
fn level2() -> Walked {
    let w = level3();
    black_box(&w);
    w
}

#[inline(never)]
fn level1() -> Walked {
    let w = level2();
    black_box(&w);
    w
}

fn check(w: &Walked, what: &str) {
    let show = |v: &[u64]| v.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(" ");
    let ctx =
        format!("{what}: ours {} (stop {:?}, trust {:?})\ntheirs {}", show(&w.ours), w.stop, w.trust, show(&w.theirs));
    assert!(w.theirs.len() >= 5, "{ctx}");
    // Both frame 0s are inside capture_here: within a few hundred bytes of each other.
    assert!(w.ours[0].abs_diff(w.theirs[0]) < 0x400, "{ctx}");
    assert_eq!(&w.ours[1..], &w.theirs[1..], "callers differ; {ctx}");
    assert_eq!(w.stop, StopReason::End, "{ctx}");
    assert_eq!(w.trust[0], trust::CONTEXT);
    assert!(w.trust[1..].iter().all(|t| *t == trust::CFI), "every caller from unwind tables; {ctx}");
}

#[test]
fn same_callers_as_libgcc_on_a_std_thread() {
    let w = level1();
    check(&w, "test thread");
}

#[test]
fn same_callers_as_libgcc_on_a_pthread_create_thread() {
    extern "C" fn start(out: *mut libc::c_void) -> *mut libc::c_void {
        let w = level1();
        // SAFETY: `out` is the `Option<Walked>` the creator passed, alive until join.
        unsafe { *(out as *mut Option<Walked>) = Some(w) };
        std::ptr::null_mut()
    }
    let mut result: Option<Walked> = None;
    let mut t: libc::pthread_t = 0;
    // SAFETY: default attributes; `start` matches the signature; `result` outlives the join below.
    let rc = unsafe {
        libc::pthread_create(&mut t, std::ptr::null(), start, &mut result as *mut Option<Walked> as *mut libc::c_void)
    };
    assert_eq!(rc, 0);
    // SAFETY: joining the thread created above.
    assert_eq!(unsafe { libc::pthread_join(t, std::ptr::null_mut()) }, 0);
    check(&result.expect("walked"), "pthread_create thread");
}
