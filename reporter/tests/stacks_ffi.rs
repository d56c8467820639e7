//! The C functions of stacks on demand (`crash_reporter_current_stack`, `crash_reporter_thread_stack`,
//! `crash_reporter_current_thread_id`), called as C code calls them.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use reporter::ffi::{
    crash_reporter_current_stack, crash_reporter_current_thread_id, crash_reporter_enable, crash_reporter_thread_stack,
    CrashReporterStatus,
};
use std::ffi::CString;
use std::hint::black_box;

#[inline(never)]
fn through_c(out: &mut [u64]) -> (CrashReporterStatus, usize, bool) {
    let (mut n, mut cut) = (0usize, false);
    // SAFETY: `out` is writable for its length; `n` and `cut` are writable.
    let s = unsafe { crash_reporter_current_stack(out.as_mut_ptr(), out.len(), 0, &mut n, &mut cut) };
    black_box(&out);
    (s, n, cut)
}

#[inline(never)]
fn through_rust(out: &mut [u64]) -> usize {
    let n = handler::stacks::current_stack(out).expect("capture").len;
    black_box(&out);
    n
}

#[test]
fn the_c_functions_capture_like_the_rust_ones() {
    let mut a = [0u64; 128];
    // Before enable: not enabled.
    assert_eq!(through_c(&mut a).0, CrashReporterStatus::NotEnabled);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = CString::new(dir.path().to_str().expect("utf-8")).expect("path");
    let id = CString::new("com.example.stacks").expect("id");
    // SAFETY: valid C strings (or NULL) for the call.
    let s =
        unsafe { crash_reporter_enable(d.as_ptr(), std::ptr::null(), id.as_ptr(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(s, CrashReporterStatus::Ok);

    let mut b = [0u64; 128];
    let mut m = 0;
    for _ in 0..2 {
        let (s, n, cut) = through_c(&mut a);
        m = through_rust(&mut b);
        assert_eq!(s, CrashReporterStatus::Ok);
        assert!(!cut);
        // Each starts with a return into its wrapper, then into this test (two call sites), then the same callers.
        assert_eq!(a[2..n], b[2..m], "{:x?}\n{:x?}", &a[..n], &b[..m]);
        let here = the_c_functions_capture_like_the_rust_ones as *const () as usize as u64;
        assert!(a[1] > here && a[1] < here + 0x10000 && b[1] > here && b[1] < here + 0x10000);
        assert!(a[0] > through_c as *const () as usize as u64 && b[0] > through_rust as *const () as usize as u64);
    }
    // A short buffer is flagged; NULL out-parameters are allowed.
    let (mut n, mut cut) = (0usize, false);
    // SAFETY: 2 writable values.
    let s = unsafe { crash_reporter_current_stack(a.as_mut_ptr(), 2, 0, &mut n, &mut cut) };
    assert_eq!(s, CrashReporterStatus::Ok);
    assert_eq!((n, cut), (2, true));
    // SAFETY: capacity 0 with NULL buffer and NULL out-parameters.
    let s =
        unsafe { crash_reporter_current_stack(std::ptr::null_mut(), 0, 0, std::ptr::null_mut(), std::ptr::null_mut()) };
    assert_eq!(s, CrashReporterStatus::Ok);

    // Another thread: this one asks about itself through the signal path, then about a thread that is gone.
    let me = crash_reporter_current_thread_id();
    assert_eq!(me, handler::stacks::current_thread_id());
    // SAFETY: `a` is writable for its length.
    let s = unsafe { crash_reporter_thread_stack(me, a.as_mut_ptr(), a.len(), 1000, &mut n, &mut cut) };
    assert_eq!(s, CrashReporterStatus::Ok);
    // It ends with the frames below this test function (the harness's), as the Rust capture above does.
    assert!(n > 3 && m > 3 && a[..n].ends_with(&b[m - 3..m]), "{:x?}\n{:x?}", &a[..n], &b[..m]);
    let gone = std::thread::spawn(|| crash_reporter_current_thread_id()).join().expect("join");
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: as above.
    let s = unsafe { crash_reporter_thread_stack(gone, a.as_mut_ptr(), a.len(), 100, &mut n, &mut cut) };
    assert_eq!(s, CrashReporterStatus::NoSuchThread);
}

/// A capacity no buffer can have (above `isize::MAX` bytes of `u64`) is refused before the buffer is touched,
/// whether or not the reporter is enabled.
#[test]
fn an_impossible_capacity_is_an_invalid_argument() {
    let mut a = [0u64; 4];
    let (mut n, mut cut) = (7usize, false);
    for capacity in [isize::MAX as usize / 8 + 1, isize::MAX as usize, usize::MAX] {
        // SAFETY: the capacity is refused before `a` is used; `n` and `cut` are writable.
        let s = unsafe { crash_reporter_current_stack(a.as_mut_ptr(), capacity, 0, &mut n, &mut cut) };
        assert_eq!(s, CrashReporterStatus::InvalidArgument, "current_stack, capacity {capacity}");
        // SAFETY: as above.
        let s = unsafe {
            crash_reporter_thread_stack(
                crash_reporter_current_thread_id(),
                a.as_mut_ptr(),
                capacity,
                10,
                &mut n,
                &mut cut,
            )
        };
        assert_eq!(s, CrashReporterStatus::InvalidArgument, "thread_stack, capacity {capacity}");
    }
    assert_eq!((n, a), (7, [0; 4]), "nothing written");
}
