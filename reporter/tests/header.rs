//! The committed C header is what cbindgen generates from `src/ffi.rs` today.
//! Regenerate: `UPDATE_HEADER=1 cargo test -p reporter --test header`.

use std::path::Path;

#[test]
fn c_header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/ffi.rs"))
        .generate()
        .expect("cbindgen generates")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("utf-8");
    let path = crate_dir.join("include/crash_reporter.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write header");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/crash_reporter.h is out of date; run UPDATE_HEADER=1 cargo test -p reporter --test header"
    );
    for f in [
        "crash_reporter_enable",
        "crash_reporter_set_value",
        "crash_reporter_set_crash_reason",
        "crash_reporter_remove_value",
        "crash_reporter_upload_pending",
        "crash_reporter_pending_count",
        "crash_reporter_current_stack",
        "crash_reporter_thread_stack",
        "crash_reporter_current_thread_id",
        "crash_reporter_report_non_fatal",
        "crash_reporter_start_hang_detection",
        "crash_reporter_stop_hang_detection",
        "crash_reporter_heartbeat",
        "crash_reporter_idle",
        "CRASH_REPORTER_STATUS_TIMEOUT",
        "CRASH_REPORTER_STATUS_OK",
    ] {
        assert!(generated.contains(f), "{f} missing from the header");
    }
}
