//! Our crashing child process (one per crash): installs `handler`, runs the workload, records
//! [`sys::slot::FAULT`] right before the faulting store and [`sys::slot::DONE`] (from the handler's test hook) when
//! the report is durable on disk. The peer's child is in `peer.rs`, in the separate `bench-peer` binary.

use super::sys;
use super::workload::{self, CrashArgs};
use handler::test_hooks::{set_crash_hook, CrashEvent};
use std::process::ExitCode;

extern "C" fn our_hook(event: CrashEvent, _tid: u64) {
    match event {
        CrashEvent::Start => sys::store(sys::slot::START, sys::now_ns()),
        CrashEvent::ThreadsListed => {
            sys::store(sys::slot::LISTED, sys::now_ns());
            sys::store(sys::slot::LISTED_CPU, sys::thread_cpu_ns());
        }
        CrashEvent::StopDone => {
            sys::store(sys::slot::STOPPED_CPU, sys::thread_cpu_ns());
            sys::store(sys::slot::STOPPED, sys::now_ns());
        }
        CrashEvent::ReportWritten => {
            sys::store(sys::slot::WRITTEN, sys::now_ns());
            sys::store(sys::slot::WRITTEN_CPU, sys::thread_cpu_ns());
        }
        CrashEvent::BeforeReraise => sys::store(sys::slot::DONE, sys::now_ns()),
        CrashEvent::ThreadsStopped | CrashEvent::EarlySync => {}
    }
}

/// Our child: load the libraries, install the handler (default `Config`), park the threads, fault.
pub fn crash_ours(a: &CrashArgs) -> ExitCode {
    if let Err(e) = a.prepare() {
        eprintln!("bench child: {e}");
        return ExitCode::from(3);
    }
    let mut config = handler::Config::new(&a.target);
    config.app_id = "bench.crash-child".into();
    if let Err(e) = handler::install(&config) {
        eprintln!("bench child: install: {e}");
        return ExitCode::from(3);
    }
    // `BeforeReraise` runs after the report was written, fsync'd, renamed and the directory fsync'd.
    set_crash_hook(Some(our_hook));
    if let Err(e) = workload::park_threads(a.threads, a.depth) {
        eprintln!("bench child: threads: {e}");
        return ExitCode::from(3);
    }
    sys::store(sys::slot::FAULT, sys::now_ns());
    sys::fault()
}
