//! The app's crash reason through the C ABI: accepted before `crash_reporter_enable`, refused when NULL or not
//! UTF-8. (That it lands in a crash report is checked by the crash matrix, `crash-tests`, `app_reason`.)

#![allow(unsafe_code)] // calls the C entry point as C code would

use reporter::ffi::{crash_reporter_set_crash_reason, CrashReporterStatus};

#[test]
fn the_crash_reason_is_set_cleared_and_checked() {
    // SAFETY: NUL-terminated strings, or NULL, as the function allows.
    unsafe {
        assert_eq!(crash_reporter_set_crash_reason(c"saving the draft".as_ptr()), CrashReporterStatus::Ok);
        assert_eq!(crash_reporter_set_crash_reason(c"".as_ptr()), CrashReporterStatus::Ok);
        assert_eq!(crash_reporter_set_crash_reason(std::ptr::null()), CrashReporterStatus::InvalidArgument);
        assert_eq!(crash_reporter_set_crash_reason(c"\xff\xfe".as_ptr()), CrashReporterStatus::InvalidArgument);
    }
    assert!(reporter::set_crash_reason("from Rust"));
}
