//! Fuzzes the report decoder: any input must decode or be refused without panicking, and whatever decodes must
//! re-encode and decode again to the same report.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Give the fuzzer a head start past the magic half of the time.
    let with_header;
    let input = if data.first().is_some_and(|b| b & 1 == 1) {
        let mut v = report_format::framing::file_header().to_vec();
        v.extend_from_slice(data.get(1..).unwrap_or_default());
        with_header = v;
        &with_header[..]
    } else {
        data
    };
    if let Ok(d) = report_format::decode(input) {
        if let Ok(bytes) = report_format::owned::to_bytes(&d.report) {
            let again = report_format::decode(&bytes).expect("re-encoded report decodes");
            assert!(again.is_intact(), "{:?}", again.problems);
            assert_eq!(again.report.threads, d.report.threads);
            assert_eq!(again.report.exception, d.report.exception);
        }
    }
});
