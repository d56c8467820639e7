//! App metadata: bundle identifier and versions, from the main bundle's `Info.plist` on Apple platforms or given
//! explicitly elsewhere.

use std::path::{Path, PathBuf};

/// Who the app is. Lands in every report's META section (`SCHEMA.md` §4.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppInfo {
    /// Bundle identifier (`CFBundleIdentifier`) or an app id of your choosing.
    pub bundle_id: String,
    /// Marketing version (`CFBundleShortVersionString`).
    pub short_version: String,
    /// Build number (`CFBundleVersion`).
    pub build_version: String,
}

/// Why `Info.plist` could not be used.
#[derive(Debug)]
pub enum InfoPlistError {
    /// No `Info.plist` where a bundle keeps it.
    NotFound(PathBuf),
    /// The file is not a property list (XML or binary) with a dictionary at the top.
    Invalid(PathBuf, String),
}

impl std::fmt::Display for InfoPlistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InfoPlistError::NotFound(p) => write!(f, "no Info.plist at {}", p.display()),
            InfoPlistError::Invalid(p, e) => write!(f, "{} is not a usable Info.plist: {e}", p.display()),
        }
    }
}

impl std::error::Error for InfoPlistError {}

impl AppInfo {
    /// Reads `CFBundleIdentifier`, `CFBundleShortVersionString` and `CFBundleVersion` from an `Info.plist` (XML or
    /// binary). Missing keys give empty strings.
    ///
    /// # Errors
    /// [`InfoPlistError::NotFound`] or [`InfoPlistError::Invalid`].
    pub fn from_info_plist(path: &Path) -> Result<AppInfo, InfoPlistError> {
        if !path.is_file() {
            return Err(InfoPlistError::NotFound(path.to_owned()));
        }
        let v = plist::Value::from_file(path).map_err(|e| InfoPlistError::Invalid(path.to_owned(), e.to_string()))?;
        let d = v
            .as_dictionary()
            .ok_or_else(|| InfoPlistError::Invalid(path.to_owned(), "top level is not a dictionary".into()))?;
        let s = |k: &str| d.get(k).and_then(plist::Value::as_string).unwrap_or_default().to_owned();
        Ok(AppInfo {
            bundle_id: s("CFBundleIdentifier"),
            short_version: s("CFBundleShortVersionString"),
            build_version: s("CFBundleVersion"),
        })
    }

    /// Where the bundle of the executable at `exe` keeps its `Info.plist`: next to the executable in an iOS app
    /// bundle (`X.app/X`), in `Contents/` for a macOS bundle (`X.app/Contents/MacOS/X`).
    pub fn info_plist_path(exe: &Path) -> Option<PathBuf> {
        let dir = exe.parent()?;
        if dir.file_name().is_some_and(|n| n == "MacOS") {
            let contents = dir.parent()?;
            return Some(contents.join("Info.plist"));
        }
        Some(dir.join("Info.plist"))
    }

    /// Reads the main bundle's `Info.plist` (the bundle of the running executable).
    ///
    /// # Errors
    /// [`InfoPlistError`] when the executable is not in a bundle with a readable `Info.plist`.
    pub fn from_main_bundle() -> Result<AppInfo, InfoPlistError> {
        let exe = std::env::current_exe().map_err(|e| InfoPlistError::Invalid(PathBuf::new(), e.to_string()))?;
        let plist = Self::info_plist_path(&exe).ok_or_else(|| InfoPlistError::NotFound(exe.clone()))?;
        Self::from_info_plist(&plist)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_real_binary_info_plist() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/third_party/macsymbolicator/iOSCrashingTest-Info.plist");
        let a = AppInfo::from_info_plist(&p).expect("reads");
        assert_eq!(a.bundle_id, "jp.mahdi.iOSCrashingTest");
        assert_eq!(a.short_version, "1.0");
        assert_eq!(a.build_version, "1");
    }

    #[test]
    fn bundle_layouts() {
        assert_eq!(
            AppInfo::info_plist_path(Path::new("/b/X.app/X")).as_deref(),
            Some(Path::new("/b/X.app/Info.plist"))
        );
        assert_eq!(
            AppInfo::info_plist_path(Path::new("/Applications/X.app/Contents/MacOS/X")).as_deref(),
            Some(Path::new("/Applications/X.app/Contents/Info.plist"))
        );
    }

    #[test]
    fn errors_are_clear() {
        let e = AppInfo::from_info_plist(Path::new("/nonexistent/Info.plist")).expect_err("missing");
        assert_eq!(e.to_string(), "no Info.plist at /nonexistent/Info.plist");
        let dir = tempfile::tempdir().expect("tmp");
        let bad = dir.path().join("Info.plist");
        std::fs::write(&bad, b"not a plist").expect("write");
        assert!(AppInfo::from_info_plist(&bad)
            .expect_err("invalid")
            .to_string()
            .contains("is not a usable Info.plist"));
    }
}
