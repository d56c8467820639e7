//! The client side of debug-file upload (`viewer upload-symbols`): finds debug files under the paths given,
//! zips dSYM bundles, and posts each to `POST <url>/api/v1/debug-files` with the bearer token.
//!
//! What is sent for each path: a `*.dSYM` directory is zipped (deflate) with its relative paths; another
//! directory is searched recursively for `*.dSYM` bundles and Mach-O / ELF files; a file is sent as it is when it
//! starts with Mach-O or ELF magic.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Depth limit of the directory search (guards against symlink loops).
const MAX_DEPTH: usize = 24;

/// One thing to upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upload {
    /// A `*.dSYM` bundle directory, sent zipped.
    Bundle(PathBuf),
    /// A Mach-O or ELF file, sent as it is.
    Object(PathBuf),
}

impl Upload {
    /// The path.
    pub fn path(&self) -> &Path {
        match self {
            Upload::Bundle(p) | Upload::Object(p) => p,
        }
    }
}

/// The result of one upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// What was sent.
    pub upload: Upload,
    /// HTTP status, or `None` when the request failed.
    pub status: Option<u16>,
    /// The answer's body, or the transport error.
    pub answer: String,
}

fn has_object_magic(path: &Path) -> bool {
    let mut head = [0u8; 4];
    let ok = fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok();
    ok && matches!(
        head,
        [0x7f, b'E', b'L', b'F']
            | [0xfe, 0xed, 0xfa, 0xce | 0xcf]
            | [0xce | 0xcf, 0xfa, 0xed, 0xfe]
            | [0xca, 0xfe, 0xba, 0xbe | 0xbf]
    )
}

fn is_bundle(p: &Path) -> bool {
    p.is_dir() && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("dsym"))
}

/// What would be uploaded for `paths`, in a stable order.
///
/// # Errors
/// A path that does not exist, or a file that is neither Mach-O nor ELF nor a dSYM bundle.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<Upload>, String> {
    let mut out = Vec::new();
    for p in paths {
        let md = fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if is_bundle(p) {
            out.push(Upload::Bundle(p.clone()));
        } else if md.is_dir() {
            walk(p, 0, &mut out);
        } else if has_object_magic(p) {
            out.push(Upload::Object(p.clone()));
        } else {
            return Err(format!("{}: not a Mach-O or ELF file, nor a .dSYM bundle", p.display()));
        }
    }
    Ok(out)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<Upload>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if is_bundle(&p) {
            out.push(Upload::Bundle(p));
        } else if p.is_dir() {
            walk(&p, depth + 1, out);
        } else if p.is_file() && has_object_magic(&p) {
            out.push(Upload::Object(p));
        }
    }
}

/// Zips a directory (deflate), entries named by their path relative to the directory's parent (so a
/// `MyApp.app.dSYM` bundle unpacks as `MyApp.app.dSYM/Contents/...`).
///
/// # Errors
/// I/O errors reading the files or writing the archive.
pub fn zip_dir(dir: &Path) -> io::Result<Vec<u8>> {
    let base = dir.parent().unwrap_or(Path::new(""));
    let mut files = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            continue;
        }
        for e in fs::read_dir(&d)? {
            let p = e?.path();
            if p.is_dir() {
                stack.push((p, depth + 1));
            } else if p.is_file() {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut zw = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated).large_file(true);
    for f in files {
        let rel = f.strip_prefix(base).unwrap_or(&f);
        let name: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        zw.start_file(name.join("/"), opts).map_err(io::Error::other)?;
        let mut src = fs::File::open(&f)?;
        io::copy(&mut src, &mut zw)?;
    }
    let cursor = zw.finish().map_err(io::Error::other)?;
    let mut v = cursor.into_inner();
    v.flush()?;
    Ok(v)
}

/// An HTTP agent with a whole-request timeout that returns error statuses as answers.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build().into()
}

/// The debug-file endpoint of a collector base URL (`http://host:8787` or with a trailing slash).
pub fn debug_files_url(base: &str) -> String {
    format!("{}/api/v1/debug-files", base.trim_end_matches('/'))
}

/// Uploads one debug file or bundle.
pub fn send(agent: &ureq::Agent, base_url: &str, token: &str, upload: &Upload) -> Sent {
    let body = match upload {
        Upload::Bundle(p) => zip_dir(p).map(|b| (b, "application/zip")),
        Upload::Object(p) => fs::read(p).map(|b| (b, "application/octet-stream")),
    };
    let (body, ctype) = match body {
        Ok(x) => x,
        Err(e) => return Sent { upload: upload.clone(), status: None, answer: format!("cannot read: {e}") },
    };
    let res = agent
        .post(debug_files_url(base_url))
        .header("Content-Type", ctype)
        .header("Authorization", &format!("Bearer {token}"))
        .send(&body[..]);
    match res {
        Ok(mut r) => {
            let status = r.status().as_u16();
            let answer = r.body_mut().read_to_string().unwrap_or_default();
            Sent { upload: upload.clone(), status: Some(status), answer }
        }
        Err(e) => Sent { upload: upload.clone(), status: None, answer: e.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_bundles_and_objects_and_zips_bundles() {
        let t = tempfile::tempdir().unwrap();
        let dwarf = t.path().join("A.app.dSYM/Contents/Resources/DWARF");
        fs::create_dir_all(&dwarf).unwrap();
        fs::write(dwarf.join("A"), b"\xcf\xfa\xed\xfe rest").unwrap();
        fs::write(t.path().join("lib.so"), b"\x7fELF rest").unwrap();
        fs::write(t.path().join("notes.txt"), b"hello").unwrap();
        let found = collect(&[t.path().to_path_buf()]).unwrap();
        assert_eq!(found, vec![Upload::Bundle(t.path().join("A.app.dSYM")), Upload::Object(t.path().join("lib.so"))]);
        assert!(collect(&[t.path().join("notes.txt")]).is_err());
        assert!(collect(&[t.path().join("missing")]).is_err());
        let z = zip_dir(&t.path().join("A.app.dSYM")).unwrap();
        let mut a = zip::ZipArchive::new(io::Cursor::new(z)).unwrap();
        assert_eq!(a.len(), 1);
        let mut f = a.by_index(0).unwrap();
        assert_eq!(f.name(), "A.app.dSYM/Contents/Resources/DWARF/A");
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        assert_eq!(v, b"\xcf\xfa\xed\xfe rest");
    }
}
