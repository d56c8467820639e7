//! Launches of an app that does not crash, each a real process enabling the reporter on one directory: the
//! reservation a launch leaves at its exit (unused, unlocked, all zeros) is the one the next launch's install
//! claims, after the reporter's sweep kept it as the spare; stale spares beside it are deleted. Nothing piles up.
#![cfg(unix)]

use reporter::store::Store;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The `.reserved` files in `pending/` of the store at `dir`: (name, inode).
fn reservations(dir: &Path) -> Vec<(String, u64)> {
    let pending = Store::open(dir).expect("open").pending_dir();
    let mut v: Vec<(String, u64)> = std::fs::read_dir(pending)
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".reserved"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().expect("stat").ino()))
        .collect();
    v.sort();
    v
}

/// Not a test of its own: one launch (it does nothing unless `LAUNCH_DIR` is set). Enables the reporter (no
/// upload URL), prints the name and inode of the reservation its install holds, and exits normally.
#[test]
fn launch_entry_point() {
    let Ok(dir) = std::env::var("LAUNCH_DIR") else { return };
    let _reporter = reporter::Reporter::builder(&dir).enable().expect("enable");
    for (name, ino) in reservations(Path::new(&dir)) {
        println!("RESERVED {name} {ino}");
    }
}

/// Runs one launch on `dir`; the reservations present while it ran: (name, inode). The name tells files apart
/// (a claimed file keeps its creator's name; a new one is named for the new process): the file system may give a
/// new file the inode number of one just deleted.
fn launch(dir: &Path) -> Vec<(String, u64)> {
    let exe = std::env::current_exe().expect("exe");
    let out = std::process::Command::new(exe)
        .args(["launch_entry_point", "--exact", "--nocapture", "--test-threads=1"])
        .env("LAUNCH_DIR", dir)
        .output()
        .expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "launch failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    // libtest prints `test launch_entry_point ... ` before the test's own output, on the same line.
    text.lines()
        .filter_map(|l| l.split("RESERVED ").nth(1))
        .filter_map(|r| {
            let (name, ino) = r.trim().split_once(' ')?;
            Some((name.to_string(), ino.parse().ok()?))
        })
        .collect()
}

#[test]
fn an_app_that_never_crashes_reuses_one_reservation_launch_after_launch() {
    let dir = tempfile::tempdir().expect("tmp");
    let first = launch(dir.path());
    assert_eq!(first.len(), 1, "the first launch creates one reservation: {first:?}");
    let left = reservations(dir.path());
    assert_eq!(left, first, "and leaves it at its exit");

    // A stale unused reservation of some earlier process, older than the one just left: the sweep deletes it.
    let pending = Store::open(dir.path()).expect("open").pending_dir();
    let stale = pending.join(".1-1.reserved");
    std::fs::write(&stale, vec![0u8; 64 * 1024]).expect("write");
    let f = std::fs::File::options().write(true).open(&stale).expect("open");
    f.set_modified(SystemTime::now() - Duration::from_secs(3600)).expect("mtime");
    drop(f);

    for n in 2..=4 {
        let seen = launch(dir.path());
        assert_eq!(seen, first, "launch {n} claimed the same file and created no other");
        let left = reservations(dir.path());
        assert_eq!(left, first, "launch {n} left {left:?}");
        assert!(std::fs::read(pending.join(&left[0].0)).expect("read").iter().all(|b| *b == 0), "still unused");
    }
    assert!(!stale.exists(), "the stale spare was deleted");
}
