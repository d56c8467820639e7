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

/// An unwritable report directory fails install with a clear error naming the path and the errno, instead of
/// installing and losing every report. The tests run as root, which passes every mode check, so the directories are
/// ones root cannot create files in: `/proc/self` (`faccessat` already says no) and `/sys/kernel` (`faccessat` says
/// yes for root; only the probe file finds out). Nothing is installed when install fails.
#[test]
fn install_refuses_an_unwritable_report_directory() {
    let mut dirs = vec![Path::new("/proc/self")];
    if Path::new("/sys/kernel").is_dir() {
        dirs.push(Path::new("/sys/kernel"));
    }
    for dir in dirs {
        let got = handler::install(&handler::Config::new(dir));
        if got.is_ok() {
            handler::uninstall().expect("uninstall");
        }
        match got {
            Err(e @ handler::InstallError::ReportDirNotWritable { .. }) => {
                let handler::InstallError::ReportDirNotWritable { path, errno } = &e else { unreachable!() };
                assert_eq!(path, dir);
                assert!(*errno > 0, "{e}");
                let text = e.to_string();
                assert!(text.contains(&*dir.to_string_lossy()) && text.contains("not writable"), "{text}");
            }
            other => panic!("{}: want ReportDirNotWritable, got {other:?}", dir.display()),
        }
        assert!(!handler::is_installed());
    }
}

/// A report path that names a file, not a directory, is refused too.
#[test]
fn install_refuses_a_report_path_that_is_a_file() {
    let base = tempfile::tempdir().expect("tempdir");
    let file = base.path().join("not-a-dir");
    std::fs::write(&file, b"x").expect("file");
    let got = handler::install(&handler::Config::new(&file));
    if got.is_ok() {
        handler::uninstall().expect("uninstall");
    }
    assert!(matches!(got, Err(handler::InstallError::ReportDir(_))), "{got:?}");
}
