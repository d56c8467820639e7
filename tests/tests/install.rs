//! Install / uninstall behaviour, in a client process (signal actions are process-wide).
#![cfg(target_os = "linux")] // the crash client runs on Linux; Apple targets only type-check this crate

use crash_tests::run;
use std::path::Path;
use std::time::Duration;

fn client() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_crash-client"))
}

#[test]
fn uninstall_restores_previous_handlers_and_reinstall_works() {
    let base = tempfile::tempdir().expect("tempdir");
    let r = run(client(), "uninstall_then_segv", base.path(), Duration::from_secs(120));
    assert!(r.stdout.contains("UNINSTALLED"), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.signal, Some(11), "dies by SIGSEGV through the previous handler: {}", r.stderr);
    assert!(r.reports.is_empty(), "no report after uninstall: {:?}", r.reports);
    assert_eq!(r.count("starts"), None, "the crash hook never ran");
}

#[test]
fn refresh_images_reports_the_loaded_images() {
    let base = tempfile::tempdir().expect("tempdir");
    let r = run(client(), "refresh_images", base.path(), Duration::from_secs(120));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let n: usize = r.out_value("IMAGES").expect("count").parse().expect("number");
    // The executable, the vDSO, libc and the dynamic loader at least.
    assert!(n >= 3, "{n}");
}
