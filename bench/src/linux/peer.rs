//! The peer: EmbarkStudios' `crash-handler` in the crashing process and an out-of-process `minidumper` server that
//! writes the minidump with `minidump-writer`, set up as minidumper's own example does. For a like-for-like end
//! point the server makes each dump as durable as our report: `fsync` of the file, rename from a temporary name,
//! `fsync` of the directory, all before minidumper sends its acknowledgement to the crashing process.
//!
//! This lives in its own binary (`bench-peer`): crash-handler interposes `pthread_create` (to give every thread an
//! alternate signal stack), and our own crash children must not run with that.
#![allow(unsafe_code)]

use super::sys;
use super::workload::{self, CrashArgs};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

/// The crash callback: request a dump, wait for the server's acknowledgement (inside `request_dump`), then record
/// [`sys::slot::DONE`].
pub fn crash_event(client: minidumper::Client) -> Box<dyn crash_handler::CrashEvent> {
    // SAFETY: (crash-handler's contract) the closure runs in a signal handler. It only sends the crash context over
    // an already connected socket and blocks on the reply (what minidumper's example does), then does one volatile
    // store with a vDSO clock read.
    unsafe {
        crash_handler::make_crash_event(move |cc: &crash_handler::CrashContext| {
            let ok = client.request_dump(cc).is_ok();
            if ok {
                sys::store(sys::slot::DONE, sys::now_ns());
            }
            crash_handler::CrashEventResult::Handled(ok)
        })
    }
}

struct Handler {
    dir: PathBuf,
    next: AtomicU32,
    current: Mutex<Option<(PathBuf, PathBuf)>>,
}

impl minidumper::ServerHandler for Handler {
    fn create_minidump_file(&self) -> Result<(File, PathBuf), std::io::Error> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let temp = self.dir.join(format!(".dump-{n}.tmp"));
        let fin = self.dir.join(format!("dump-{n}.dmp"));
        let f = File::create(&temp)?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some((temp.clone(), fin));
        Ok((f, temp))
    }

    fn on_minidump_created(
        &self,
        result: Result<minidumper::MinidumpBinary, minidumper::Error>,
    ) -> minidumper::LoopAction {
        let names = self.current.lock().unwrap_or_else(|p| p.into_inner()).take();
        match (result, names) {
            (Ok(mut md), Some((temp, fin))) => {
                let durable = md
                    .file
                    .flush()
                    .and_then(|_| md.file.sync_all())
                    .and_then(|_| std::fs::rename(&temp, &fin))
                    .and_then(|_| File::open(&self.dir)?.sync_all());
                if let Err(e) = durable {
                    eprintln!("bench peer server: committing {}: {e}", fin.display());
                }
            }
            (Err(e), _) => eprintln!("bench peer server: minidump failed: {e}"),
            (Ok(_), None) => eprintln!("bench peer server: a dump without a file name"),
        }
        minidumper::LoopAction::Continue
    }

    fn on_message(&self, _kind: u32, _buffer: Vec<u8>) {}
}

/// Entry point of the `bench-peer` binary: `__crash-peer ARGS` (see [`CrashArgs`]) or `__peer-server SOCKET DIR`.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or(&[]);
    match args.first().map(String::as_str) {
        Some("__crash-peer") => match CrashArgs::parse(rest) {
            Ok(a) => crash_peer(&a),
            Err(e) => {
                eprintln!("bench-peer: {e}");
                ExitCode::from(2)
            }
        },
        Some("__peer-server") => server_main(rest),
        _ => {
            eprintln!("bench-peer: started by `bench` only (roles __crash-peer, __peer-server)");
            ExitCode::from(2)
        }
    }
}

/// The server process: `socket dir`. Prints `ready` once it listens, then serves until killed.
pub fn server_main(a: &[String]) -> ExitCode {
    let (Some(socket), Some(dir)) = (a.first(), a.get(1)) else {
        eprintln!("bench peer server: usage: SOCKET DIR");
        return ExitCode::from(2);
    };
    let mut server = match minidumper::Server::with_name(minidumper::SocketName::path(socket)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench peer server: {e}");
            return ExitCode::from(3);
        }
    };
    println!("ready");
    let _ = std::io::stdout().flush();
    let handler = Handler { dir: dir.into(), next: AtomicU32::new(0), current: Mutex::new(None) };
    let shutdown = AtomicBool::new(false);
    match server.run(Box::new(handler), &shutdown, None) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench peer server: {e}");
            ExitCode::from(3)
        }
    }
}

/// The peer's child: load the libraries, connect to the minidumper server, attach crash-handler (its callback asks
/// the server for a dump and waits for the acknowledgement, as in minidumper's example), park the threads, fault.
pub fn crash_peer(a: &CrashArgs) -> ExitCode {
    if let Err(e) = a.prepare() {
        eprintln!("bench child: {e}");
        return ExitCode::from(3);
    }
    let Some(socket) = a.target.to_str() else {
        eprintln!("bench child: the socket path is not UTF-8");
        return ExitCode::from(3);
    };
    let client = match minidumper::Client::with_name(minidumper::SocketName::path(socket)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench child: minidumper client: {e}");
            return ExitCode::from(3);
        }
    };
    let event = crash_event(client);
    let handler = match crash_handler::CrashHandler::attach(event) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("bench child: crash-handler attach: {e}");
            return ExitCode::from(3);
        }
    };
    handler.set_ptracer(Some(a.server_pid));
    if let Err(e) = workload::park_threads(a.threads, a.depth) {
        eprintln!("bench child: threads: {e}");
        return ExitCode::from(3);
    }
    sys::store(sys::slot::FAULT, sys::now_ns());
    sys::fault()
}
