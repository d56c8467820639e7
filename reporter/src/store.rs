//! The on-disk store of crash reports: where the handler writes, how a launch claims a report for upload, where
//! damaged and expired reports are set aside, and the retry state that survives relaunches.
//!
//! Layout under the report directory (directories are created `0700`, files `0600`):
//!
//! ```text
//! <root>/
//!   pending/      reports waiting for upload, <name>.crashreport, written by the handler (temporary name, fsync, rename)
//!   uploading/    reports claimed by a running process: <name>.crashreport@<pid>, moved here by an atomic rename
//!   damaged/      set aside, never uploaded, never deleted: <name>.crashreport plus <name>.crashreport.why (the reason, text)
//!   expired/      older than the maximum age and never delivered: kept, with a .why file
//!   retry/        backoff state per pending report: <name>.crashreport.json
//!   dropped.log   one line per report dropped because more than the pending limit were waiting
//! ```
//!
//! Claims: two processes that see the same pending report both try `rename(pending/X, uploading/X@pid)`; the
//! kernel lets exactly one succeed, so a report is never sent twice at once. A claim whose process is gone, or
//! that is older than [`STALE_CLAIM`], is moved back to `pending/` at the next launch: a crash during an upload
//! loses nothing.
//!
//! Temporary files the handler leaves when it dies mid-write (anything in `pending/` not ending in `.crashreport`, older
//! than [`TORN_AFTER`]) are torn reports: one that still starts with the report magic is renamed to
//! `torn-<name>.crashreport` in `pending/`, so it is uploaded (the collector stores damaged reports flagged and the
//! viewer salvages what was written); anything else is set aside as damaged. Nothing that holds a report is
//! deleted.
//!
//! Reserved report files (`.<pid>-<time>.reserved`, `handler::crash::writer::RESERVED_SUFFIX`): the handler creates
//! one at install, full of zeros and `flock`ed for the life of its process, and the first crash writes its report
//! into it and renames it; a process that ends without a crash leaves it, unused, for the next install to claim.
//! [`Store::sweep_reserved`] leaves one alone while its lock is held; once its process is gone, of those still all
//! zeros (never used) the newest stays as that spare and the others are deleted, and one holding a report (the
//! rename did not reach the disk) is cut after its end marker and kept as a pending report.

use report_format::Decoded;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// File-name suffix of a finished report (the handler's naming, `report_format::framing::FILE_SUFFIX`).
pub const REPORT_SUFFIX: &str = report_format::framing::FILE_SUFFIX;
/// A claim older than this is taken back even if its process id is alive (that id may have been reused).
pub const STALE_CLAIM: Duration = Duration::from_secs(10 * 60);
/// A temporary file in `pending/` older than this is a torn write, not one in progress.
pub const TORN_AFTER: Duration = Duration::from_secs(60);
/// File-name suffix of the report file the handler reserves at install (`handler::crash::writer::RESERVED_SUFFIX`).
pub const RESERVED_SUFFIX: &str = ".reserved";

/// What [`Store::sweep_reserved`] found in one reserved report file.
enum Reserved {
    /// Its process still holds the lock (or it could not be opened): left alone.
    Live,
    /// A report taken out of it, or set aside as damaged.
    Handled,
    /// All zeros, never used: a spare, still locked by the sweep.
    Unused(Spare),
}

/// An unused reservation found by [`Store::sweep_reserved`], locked until the sweep ends.
struct Spare {
    path: PathBuf,
    modified: SystemTime,
    #[cfg(unix)]
    _lock: nix::fcntl::Flock<fs::File>,
    #[cfg(not(unix))]
    _lock: fs::File,
}

/// A report waiting in `pending/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingReport {
    /// File name, `<name>.crashreport`.
    pub name: String,
    /// Full path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time (when the handler renamed it into place).
    pub modified: SystemTime,
}

/// Backoff state of one report, kept across launches in `retry/<name>.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryState {
    /// Failed attempts so far.
    pub attempts: u32,
    /// Earliest time of the next attempt, ms since the Unix epoch.
    pub next_attempt_ms: u64,
    /// The last failure, for diagnostics.
    pub last_error: String,
}

/// The report directory.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
}

/// A report this process has claimed for upload. Finish it with [`Claim::delivered`], [`Claim::release`] or
/// [`Claim::set_aside`]; a claim dropped unfinished stays in `uploading/` and is recovered at the next launch.
#[derive(Debug)]
pub struct Claim {
    /// The report's file name in `pending/`.
    pub name: String,
    /// Where it lies while claimed.
    pub path: PathBuf,
    store: Store,
}

fn mkdir(p: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    b.mode(0o700);
    b.create(p)
}

/// Writes a file atomically (temporary name, fsync, rename) with mode 0600.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut o = fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        o.mode(0o600);
        let mut f = o.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)
}

/// How much of a reserved report file is the report: up to the end of its end section when it has one, else up to
/// its last non-zero byte (a torn report; the zeros after it are the reservation's, never written).
fn reserved_report_len(bytes: &[u8]) -> u64 {
    let end = report_format::decode(bytes).ok().and_then(|d| {
        let s = d.sections.iter().rev().find(|s| s.kind == report_format::framing::SectionKind::End)?;
        s.offset.checked_add(report_format::framing::SECTION_HEADER_LEN)?.checked_add(usize::try_from(s.len).ok()?)
    });
    let len = end.unwrap_or_else(|| bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1));
    len as u64
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn pid_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = i32::try_from(pid) else { return false };
        // kill(pid, 0) checks existence without sending anything; EPERM means it exists but is not ours.
        match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
            Ok(()) => true,
            Err(e) => e == nix::errno::Errno::EPERM,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

impl Store {
    /// Opens (creating when needed) the store at `root`.
    ///
    /// # Errors
    /// Any I/O error creating the directories.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<Store> {
        let s = Store { root: root.into() };
        for d in ["pending", "uploading", "damaged", "expired", "retry"] {
            mkdir(&s.root.join(d))?;
        }
        Ok(s)
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory the handler writes new reports into.
    pub fn pending_dir(&self) -> PathBuf {
        self.root.join("pending")
    }

    /// Reports in a sub-directory (`"damaged"`, `"expired"`, ...), file names sorted.
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn list(&self, sub: &str) -> io::Result<Vec<String>> {
        let mut v: Vec<String> = fs::read_dir(self.root.join(sub))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(&REPORT_SUFFIX))
            .collect();
        v.sort();
        Ok(v)
    }

    /// Finished reports in `pending/`, newest first.
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn pending(&self) -> io::Result<Vec<PendingReport>> {
        let mut v = Vec::new();
        for e in fs::read_dir(self.pending_dir())? {
            let e = e?;
            let Ok(name) = e.file_name().into_string() else { continue };
            if !name.ends_with(&REPORT_SUFFIX) || name.starts_with('.') {
                continue;
            }
            let Ok(md) = e.metadata() else { continue };
            if !md.is_file() {
                continue;
            }
            v.push(PendingReport {
                name,
                path: e.path(),
                size: md.len(),
                modified: md.modified().unwrap_or(UNIX_EPOCH),
            });
        }
        v.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| b.name.cmp(&a.name)));
        Ok(v)
    }

    /// Claims a pending report by renaming it into `uploading/`. `Ok(None)` when another process claimed it
    /// first (or it is gone).
    ///
    /// # Errors
    /// I/O errors other than the report having disappeared.
    pub fn claim(&self, r: &PendingReport) -> io::Result<Option<Claim>> {
        let dst = self.root.join("uploading").join(format!("{}@{}", r.name, std::process::id()));
        match fs::rename(&r.path, &dst) {
            Ok(()) => Ok(Some(Claim { name: r.name.clone(), path: dst, store: self.clone() })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Moves claims of dead processes (or claims older than [`STALE_CLAIM`]) back to `pending/`. Returns how many.
    ///
    /// # Errors
    /// I/O errors listing `uploading/`.
    pub fn recover_stale_claims(&self) -> io::Result<usize> {
        let mut n = 0;
        for e in fs::read_dir(self.root.join("uploading"))? {
            let e = e?;
            let Ok(file) = e.file_name().into_string() else { continue };
            let Some((name, pid)) = file.rsplit_once('@') else { continue };
            let pid: u32 = pid.parse().unwrap_or(0);
            let age = e.metadata().and_then(|m| m.modified()).ok().and_then(|m| m.elapsed().ok());
            let stale = pid == 0 || !pid_alive(pid) || age.is_some_and(|a| a > STALE_CLAIM);
            if stale && pid != std::process::id() && fs::rename(e.path(), self.pending_dir().join(name)).is_ok() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Handles torn temporary files left in `pending/` by a handler that died mid-write: those starting with the
    /// report magic become pending reports `torn-<name>.crashreport`, the rest are set aside as damaged. Returns
    /// how many were handled.
    ///
    /// # Errors
    /// I/O errors listing `pending/`.
    pub fn sweep_torn(&self) -> io::Result<usize> {
        let mut n = 0;
        for e in fs::read_dir(self.pending_dir())? {
            let e = e?;
            let Ok(name) = e.file_name().into_string() else { continue };
            if (name.ends_with(&REPORT_SUFFIX) && !name.starts_with('.')) || name.ends_with(RESERVED_SUFFIX) {
                continue;
            }
            let old = e.metadata().and_then(|m| m.modified()).ok().and_then(|m| m.elapsed().ok());
            if old.is_some_and(|a| a > TORN_AFTER) {
                let dst = format!("torn-{}{REPORT_SUFFIX}", name.trim_start_matches('.'));
                let mut head = [0u8; 4];
                let magic = fs::File::open(e.path())
                    .and_then(|mut f| io::Read::read_exact(&mut f, &mut head))
                    .is_ok_and(|()| head == report_format::framing::MAGIC[..4]);
                if magic {
                    fs::rename(e.path(), self.pending_dir().join(&dst))?;
                } else {
                    self.move_aside(&e.path(), "damaged", &dst, "torn write: the handler did not finish this report")?;
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// Handles the report files the handler reserved at install in `pending/` (see the module docs) whose process
    /// is gone, which [`Store::sweep_torn`] leaves alone. One that starts with the report magic is cut after its
    /// end marker (or after its last non-zero byte when it has none: a torn report) and becomes
    /// `pending/reserved-<name>.crashreport`; one holding anything else but zeros is set aside as damaged. Of those
    /// still all zeros (never used), the newest (modification time, then name) stays as the spare the next
    /// install claims (it skips writing a new file, and its blocks are on the disk already), and the others are
    /// deleted. A reservation whose process still holds its `flock` (that process is alive) is left alone. Returns
    /// how many were taken, set aside or deleted (not counting the spare kept).
    ///
    /// # Errors
    /// I/O errors listing `pending/` or moving a file.
    pub fn sweep_reserved(&self) -> io::Result<usize> {
        let mut n = 0;
        let mut spares = Vec::new();
        for e in fs::read_dir(self.pending_dir())? {
            let e = e?;
            let Ok(name) = e.file_name().into_string() else { continue };
            if !name.ends_with(RESERVED_SUFFIX) {
                continue;
            }
            match self.take_reserved(&e.path(), &name)? {
                Reserved::Live => {}
                Reserved::Handled => n += 1,
                Reserved::Unused(spare) => spares.push(spare),
            }
        }
        // Newest first; every spare is still locked by us here, so no install claims one being deleted.
        spares.sort_by(|a, b| (b.modified, &b.path).cmp(&(a.modified, &a.path)));
        for spare in spares.iter().skip(1) {
            fs::remove_file(&spare.path)?;
            n += 1;
        }
        Ok(n)
    }

    /// [`Store::sweep_reserved`] for one file.
    fn take_reserved(&self, path: &Path, name: &str) -> io::Result<Reserved> {
        let Ok(file) = fs::File::options().read(true).write(true).open(path) else { return Ok(Reserved::Live) };
        #[cfg(unix)]
        let file = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err(_) => return Ok(Reserved::Live),
        };
        let bytes = fs::read(path)?;
        let stem = name.trim_start_matches('.').trim_end_matches(RESERVED_SUFFIX);
        if bytes.iter().all(|b| *b == 0) {
            let modified = file.metadata().and_then(|m| m.modified()).unwrap_or(UNIX_EPOCH);
            return Ok(Reserved::Unused(Spare { path: path.to_path_buf(), modified, _lock: file }));
        } else if bytes.starts_with(&report_format::framing::MAGIC[..4]) {
            file.set_len(reserved_report_len(&bytes))?;
            file.sync_all()?;
            fs::rename(path, self.pending_dir().join(format!("reserved-{stem}{REPORT_SUFFIX}")))?;
        } else {
            let why = "a reserved report file holding neither zeros nor a report";
            self.move_aside(path, "damaged", &format!("reserved-{stem}{REPORT_SUFFIX}"), why)?;
        }
        Ok(Reserved::Handled)
    }

    /// Keeps at most `max` reports in `pending/`: the oldest beyond that are deleted, and each drop is recorded in
    /// `dropped.log` with its name, size and time. Returns the names dropped.
    ///
    /// # Errors
    /// I/O errors listing, deleting or appending to the log.
    pub fn enforce_limit(&self, max: usize) -> io::Result<Vec<String>> {
        let pending = self.pending()?;
        let mut dropped = Vec::new();
        for r in pending.iter().skip(max) {
            fs::remove_file(&r.path)?;
            let _ = fs::remove_file(self.retry_path(&r.name));
            let mut o = fs::OpenOptions::new();
            o.create(true).append(true);
            #[cfg(unix)]
            o.mode(0o600);
            let mut log = o.open(self.root.join("dropped.log"))?;
            writeln!(log, "{} dropped {} ({} bytes): more than {max} reports pending", now_ms(), r.name, r.size)?;
            dropped.push(r.name.clone());
        }
        Ok(dropped)
    }

    fn retry_path(&self, name: &str) -> PathBuf {
        self.root.join("retry").join(format!("{name}.json"))
    }

    /// The backoff state of a report (default when none is recorded or the record is unreadable).
    pub fn retry_state(&self, name: &str) -> RetryState {
        fs::read(self.retry_path(name)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// Records the backoff state of a report.
    ///
    /// # Errors
    /// I/O errors writing the record.
    pub fn set_retry_state(&self, name: &str, st: &RetryState) -> io::Result<()> {
        let bytes = serde_json::to_vec(st).map_err(io::Error::other)?;
        write_private(&self.retry_path(name), &bytes)
    }

    fn move_aside(&self, from: &Path, sub: &str, name: &str, why: &str) -> io::Result<PathBuf> {
        let dst = self.root.join(sub).join(name);
        fs::rename(from, &dst)?;
        write_private(&self.root.join(sub).join(format!("{name}.why")), why.as_bytes())?;
        let _ = fs::remove_file(self.retry_path(name));
        Ok(dst)
    }
}

impl Claim {
    /// Reads the claimed report and checks every CRC. The bytes returned are the report without the zero padding
    /// a report written into the handler's reserved file keeps after its end section (format 2.4,
    /// [`Decoded::padding`]), so uploads never carry it; the file itself is left as it is.
    ///
    /// # Errors
    /// I/O errors reading the file.
    pub fn read(&self) -> io::Result<(Vec<u8>, Result<Decoded, report_format::DecodeError>)> {
        let mut bytes = fs::read(&self.path)?;
        let d = report_format::decode(&bytes);
        if let Ok(d) = &d {
            bytes.truncate(bytes.len().saturating_sub(d.padding));
        }
        Ok((bytes, d))
    }

    /// The server has the report: delete the local copy and its retry state.
    ///
    /// # Errors
    /// I/O errors deleting the file.
    pub fn delivered(self) -> io::Result<()> {
        let _ = fs::remove_file(self.store.retry_path(&self.name));
        fs::remove_file(&self.path)
    }

    /// Records the report's backoff state (kept across launches).
    ///
    /// # Errors
    /// I/O errors writing the record.
    pub fn store_retry(&self, st: &RetryState) -> io::Result<()> {
        self.store.set_retry_state(&self.name, st)
    }

    /// Gives the report back to `pending/` for a later attempt.
    ///
    /// # Errors
    /// I/O errors renaming the file (it then stays claimed and is recovered at the next launch).
    pub fn release(self) -> io::Result<()> {
        fs::rename(&self.path, self.store.pending_dir().join(&self.name))
    }

    /// Moves the report to `damaged/` (or `expired/`) with the reason next to it. Never deletes it.
    ///
    /// # Errors
    /// I/O errors moving the file or writing the reason.
    pub fn set_aside(self, sub: Aside, why: &str) -> io::Result<PathBuf> {
        let dir = match sub {
            Aside::Damaged => "damaged",
            Aside::Expired => "expired",
        };
        self.store.move_aside(&self.path, dir, &self.name, why)
    }
}

/// Where a report that will not be uploaded goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aside {
    /// Corrupt, or refused by the server.
    Damaged,
    /// Older than the maximum age.
    Expired,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::PermissionsExt;

    fn report(store: &Store, name: &str) -> PendingReport {
        let r = report_format::Report { format_version: (1, 0), ..Default::default() };
        let bytes = report_format::owned::to_bytes(&r).expect("encodes");
        fs::write(store.pending_dir().join(name), bytes).expect("write");
        store.pending().expect("list").into_iter().find(|p| p.name == name).expect("listed")
    }

    #[test]
    fn layout_is_private_and_claims_are_exclusive() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path().join("reports")).expect("open");
        #[cfg(unix)]
        for d in ["pending", "uploading", "damaged", "expired", "retry"] {
            let mode = fs::metadata(s.root().join(d)).expect("dir").permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{d}");
        }
        let r = report(&s, "a.crashreport");
        let c = s.claim(&r).expect("claim").expect("first claim wins");
        assert!(s.claim(&r).expect("claim").is_none(), "second claim of the same report loses");
        assert!(s.pending().expect("list").is_empty());
        c.release().expect("release");
        assert_eq!(s.pending().expect("list").len(), 1);
    }

    #[test]
    fn stale_claims_of_dead_processes_come_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        // A pid that cannot exist (above the kernel's pid_max limit).
        fs::write(s.root().join("uploading/x.crashreport@4194305"), b"x").expect("write");
        fs::write(s.root().join(format!("uploading/y.crashreport@{}", std::process::id())), b"y").expect("write");
        assert_eq!(s.recover_stale_claims().expect("recover"), 1);
        assert!(s.pending_dir().join("x.crashreport").exists());
        assert!(s.root().join(format!("uploading/y.crashreport@{}", std::process::id())).exists(), "own claim kept");
    }

    #[test]
    fn limit_drops_oldest_and_records_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        for (i, n) in ["old.crashreport", "mid.crashreport", "new.crashreport"].iter().enumerate() {
            report(&s, n);
            let t = SystemTime::now() - Duration::from_secs(100 - i as u64 * 10);
            fs::File::options()
                .write(true)
                .open(s.pending_dir().join(n))
                .expect("open")
                .set_modified(t)
                .expect("mtime");
        }
        assert_eq!(s.enforce_limit(2).expect("limit"), vec!["old.crashreport".to_string()]);
        let names: Vec<String> = s.pending().expect("list").into_iter().map(|p| p.name).collect();
        assert_eq!(names, vec!["new.crashreport", "mid.crashreport"]);
        let log = fs::read_to_string(s.root().join("dropped.log")).expect("log");
        assert!(log.contains("dropped old.crashreport") && log.contains("more than 2 reports pending"), "{log}");
    }

    #[test]
    fn torn_temporaries_are_kept_for_upload_or_set_aside_never_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        let tmp = s.pending_dir().join(".abc.tmp");
        let junk = s.pending_dir().join(".junk.tmp");
        fs::write(&tmp, b"\x89CRP partial").expect("write");
        fs::write(&junk, b"zeroes").expect("write");
        fs::write(s.pending_dir().join(".fresh.tmp"), b"in progress").expect("write");
        for p in [&tmp, &junk] {
            fs::File::options()
                .write(true)
                .open(p)
                .expect("open")
                .set_modified(SystemTime::now() - Duration::from_secs(3600))
                .expect("mtime");
        }
        assert_eq!(s.sweep_torn().expect("sweep"), 2);
        let pending: Vec<String> = s.pending().expect("list").into_iter().map(|p| p.name).collect();
        assert_eq!(pending, vec!["torn-abc.tmp.crashreport".to_string()], "a torn report is uploaded");
        assert_eq!(fs::read(s.pending_dir().join("torn-abc.tmp.crashreport")).expect("read"), b"\x89CRP partial");
        assert_eq!(s.list("damaged").expect("list"), vec!["torn-junk.tmp.crashreport".to_string()]);
        let why = fs::read_to_string(s.root().join("damaged/torn-junk.tmp.crashreport.why")).expect("why");
        assert!(why.contains("torn write"));
        assert!(s.pending_dir().join(".fresh.tmp").exists(), "a write in progress is left alone");
    }

    /// A committed report that kept the reserved file's zeros (format 2.4 padding) is read for upload without
    /// them, and decodes intact; the file on disk is not rewritten.
    #[test]
    fn a_claimed_report_is_read_without_its_zero_padding() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        let report = report_format::owned::to_bytes(&report_format::Report::default()).expect("encode");
        let mut padded = report.clone();
        padded.resize(65_536, 0);
        fs::write(s.pending_dir().join("p.crashreport"), &padded).expect("write");
        let pending = s.pending().expect("list");
        let claim = s.claim(&pending[0]).expect("claim").expect("claimed");
        let (bytes, d) = claim.read().expect("read");
        assert_eq!(bytes, report, "the upload carries the report without the zeros");
        let d = d.expect("decodes");
        assert_eq!(d.padding, 65_536 - report.len());
        assert!(d.is_intact(), "{:?}", d.problems);
        assert_eq!(fs::metadata(&claim.path).expect("stat").len(), 65_536, "the file is left as it is");
    }

    /// Reservations of ended processes: of the unused ones the newest stays as the next install's spare and the
    /// others are deleted, a used one (a report and the reservation's zeros) keeps exactly the report, a torn one
    /// is cut after its last written byte, junk is set aside; one whose process holds its lock is left alone,
    /// whatever it holds.
    #[test]
    #[cfg(unix)]
    fn reserved_files_of_ended_processes_are_taken_or_deleted_and_live_ones_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        let report = report_format::owned::to_bytes(&report_format::Report::default()).expect("encode");
        let padded = |b: &[u8]| [b, &[0u8; 4096][..]].concat();
        let p = |n: &str| s.pending_dir().join(n);
        fs::write(p(".1-a.reserved"), [0u8; 65536]).expect("write");
        fs::write(p(".0-z.reserved"), [0u8; 65536]).expect("write");
        fs::write(p(".6-f.reserved"), [0u8; 65536]).expect("write");
        let age = |n: &str, secs: u64| {
            let f = fs::File::options().write(true).open(p(n)).expect("open");
            f.set_modified(SystemTime::now() - Duration::from_secs(secs)).expect("set mtime");
        };
        age(".0-z.reserved", 300);
        age(".1-a.reserved", 60);
        age(".6-f.reserved", 120);
        fs::write(p(".2-b.reserved"), padded(&report)).expect("write");
        fs::write(p(".3-c.reserved"), padded(&report[..report.len() - 30])).expect("write");
        fs::write(p(".4-d.reserved"), padded(b"junk")).expect("write");
        fs::write(p(".5-e.reserved"), padded(&report)).expect("write");
        let live = fs::File::options().read(true).write(true).open(p(".5-e.reserved")).expect("open");
        let live = nix::fcntl::Flock::lock(live, nix::fcntl::FlockArg::LockExclusiveNonblock).expect("lock");

        assert_eq!(s.sweep_reserved().expect("sweep"), 5, "3 taken or set aside, 2 deleted");
        assert_eq!(fs::read(p(".1-a.reserved")).expect("spare"), [0u8; 65536], "the newest unused one stays");
        assert!(!p(".0-z.reserved").exists() && !p(".6-f.reserved").exists(), "older unused ones are deleted");
        let spare = fs::File::open(p(".1-a.reserved")).expect("open");
        nix::fcntl::Flock::lock(spare, nix::fcntl::FlockArg::LockExclusiveNonblock).expect("the spare is unlocked");
        assert_eq!(fs::read(p("reserved-2-b.crashreport")).expect("used"), report, "the report, without the zeros");
        assert_eq!(fs::read(p("reserved-3-c.crashreport")).expect("torn"), report[..report.len() - 30]);
        assert_eq!(s.list("damaged").expect("list"), vec!["reserved-4-d.crashreport".to_string()]);
        assert_eq!(fs::read(p(".5-e.reserved")).expect("live"), padded(&report), "a live reservation is untouched");
        // sweep_torn leaves reservations to sweep_reserved, however old.
        fs::File::options()
            .write(true)
            .open(p(".5-e.reserved"))
            .expect("open")
            .set_modified(SystemTime::now() - Duration::from_secs(3600))
            .expect("mtime");
        assert_eq!(s.sweep_torn().expect("sweep"), 0);
        drop(live);
        assert_eq!(s.sweep_reserved().expect("sweep"), 1, "taken once its process is gone");
        assert!(p("reserved-5-e.crashreport").exists());
    }

    #[test]
    fn retry_state_persists_with_private_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(dir.path()).expect("open");
        assert_eq!(s.retry_state("a.crashreport"), RetryState::default());
        let st = RetryState { attempts: 3, next_attempt_ms: 42, last_error: "HTTP 503".into() };
        s.set_retry_state("a.crashreport", &st).expect("write");
        assert_eq!(Store::open(dir.path()).expect("reopen").retry_state("a.crashreport"), st);
        #[cfg(unix)]
        assert_eq!(
            fs::metadata(s.root().join("retry/a.crashreport.json")).expect("f").permissions().mode() & 0o777,
            0o600
        );
    }
}
