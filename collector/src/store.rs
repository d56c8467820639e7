//! Files on disk: report bytes under `<root>/reports/`, debug files under the debug-file root (default
//! `<root>/debug-files/`). Directories are created mode 0700 and files 0600.
//!
//! Every file name is chosen here (32 random hex digits and a fixed suffix); nothing from a request (report id,
//! zip entry name, header) ever becomes a path component. Names read back from the database are checked against
//! that shape before use ([`valid_name`]).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Suffix of stored report files.
pub const REPORT_SUFFIX: &str = ".crashreport";
/// Suffix of stored debug files.
pub const DEBUG_SUFFIX: &str = ".debug";

/// Creates a directory (and its parents) mode 0700.
///
/// # Errors
/// I/O errors.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// 16 random bytes as 32 lowercase hex digits, from the OS's random source.
///
/// # Errors
/// When the OS has no random source.
pub fn random_hex() -> io::Result<String> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(crate::analysis::hex(&b))
}

/// True for a name this module could have chosen: 32 lowercase hex digits and one of the two suffixes.
pub fn valid_name(name: &str) -> bool {
    let stem = name.strip_suffix(REPORT_SUFFIX).or_else(|| name.strip_suffix(DEBUG_SUFFIX));
    stem.is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
}

/// The two directories.
#[derive(Clone, Debug)]
pub struct FileStore {
    reports: PathBuf,
    debug: PathBuf,
}

impl FileStore {
    /// Creates (0700) and opens `<root>/reports` and the debug-file root.
    ///
    /// # Errors
    /// I/O errors creating them.
    pub fn open(root: &Path, debug_root: &Path) -> io::Result<FileStore> {
        let s = FileStore { reports: root.join("reports"), debug: debug_root.to_path_buf() };
        create_private_dir(&s.reports)?;
        create_private_dir(&s.debug)?;
        Ok(s)
    }

    /// The reports directory.
    pub fn reports_dir(&self) -> &Path {
        &self.reports
    }

    /// The debug-file root.
    pub fn debug_dir(&self) -> &Path {
        &self.debug
    }

    /// Writes report bytes under a new name (temporary file, fsync, rename; mode 0600) and returns the name.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_report(&self, bytes: &[u8]) -> io::Result<String> {
        write_new(&self.reports, REPORT_SUFFIX, bytes)
    }

    /// Writes a debug file under a new name and returns the name.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_debug(&self, bytes: &[u8]) -> io::Result<String> {
        write_new(&self.debug, DEBUG_SUFFIX, bytes)
    }

    /// The path of a stored report; `None` when `name` is not a name this store chooses.
    pub fn report_path(&self, name: &str) -> Option<PathBuf> {
        (valid_name(name) && name.ends_with(REPORT_SUFFIX)).then(|| self.reports.join(name))
    }

    /// The path of a stored debug file; `None` when `name` is not a name this store chooses.
    pub fn debug_path(&self, name: &str) -> Option<PathBuf> {
        (valid_name(name) && name.ends_with(DEBUG_SUFFIX)).then(|| self.debug.join(name))
    }
}

fn write_new(dir: &Path, suffix: &str, bytes: &[u8]) -> io::Result<String> {
    let stem = random_hex()?;
    let name = format!("{stem}{suffix}");
    let tmp = dir.join(format!(".{stem}.tmp"));
    {
        let mut o = fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    if let Err(e) = fs::rename(&tmp, dir.join(&name)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_ours_and_files_private() {
        let t = tempfile::tempdir().unwrap();
        let s = FileStore::open(&t.path().join("store"), &t.path().join("store/debug-files")).unwrap();
        let n = s.write_report(b"abc").unwrap();
        assert!(valid_name(&n), "{n}");
        let p = s.report_path(&n).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"abc");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
            assert_eq!(fs::metadata(s.reports_dir()).unwrap().permissions().mode() & 0o777, 0o700);
            assert_eq!(fs::metadata(s.debug_dir()).unwrap().permissions().mode() & 0o777, 0o700);
        }
        for bad in ["../x.crashreport", "/etc/passwd", "", "ABCDEF0123456789ABCDEF0123456789.crashreport"] {
            assert_eq!(s.report_path(bad), None, "{bad}");
        }
        assert_eq!(s.debug_path(&n), None, "a report name is not a debug-file name");
    }
}
