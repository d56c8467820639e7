//! Symbolicating Apple crash text in place: the `.crash` files Xcode, TestFlight, Console and testers hand over.
//!
//! [`symbolicate_text`] reads the text line by line (bytes, so nothing is re-encoded), collects the `Binary Images:`
//! list, finds each image's debug file by UUID through a [`SymbolStore`], and rewrites only the frame lines that are
//! not symbolicated yet; every other byte is passed through as it was, including an optional JSON header line (the
//! one Xcode prepends), line endings (`\n` or `\r\n`) and lines that are not UTF-8.
//!
//! Layouts read (docs/apple-crash-format.md §1–2): modern iOS/macOS (iOS 15+/macOS 12+), legacy ReportCrash text (iOS
//! 4–14, Mac OS X 10.x–macOS 11) including the `+` marker of legacy Binary Images lines and the `(version - build)`
//! of legacy macOS ones. A frame line is `<index> <image name> <address> <symbol part>`; its symbol part is rewritten
//! when it is one of the unsymbolicated forms Apple prints: `0x<load address> + <decimal offset>`,
//! `<image name> + <decimal offset>` (legacy) or `???`. The new symbol part is Apple's `symbol + offset (file:line)`;
//! functions inlined at the address get a line each before it (innermost first, ` [inlined]`), with the same frame
//! index, so no other line changes.
//!
//! Lookup rules are the renderer's (`viewer/README.md` § Symbol lookup): frame index 0 at the address, every other
//! frame at `address - 1`; the printed address and offset stay raw; runtime to link-time address is
//! `address - image load address + the file's __TEXT vmaddr`. As in rendering, each distinct address is looked up
//! once, every debug file's addresses in one batch ([`DebugFile::lookup_batch`]). Lines that do not parse are left
//! alone, so one bad line never fails a file.

use crate::crashlog::{Flavor, FrameLog};
use crate::render::symbol_part;
use crate::symbolicate::{to_svma, Questions};
use crate::symbols::{parse_image_id, DebugFile, ImageQuery, SymbolStore};
use report_format::model::ImageId;
use std::sync::Arc;

/// One `Binary Images:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextImage {
    /// Load address (first column).
    pub base: u64,
    /// Inclusive end address (second column); `None` when Apple printed `???`.
    pub end: Option<u64>,
    /// The name column: the image name (iOS), the bundle identifier or name (macOS); without a legacy `+`.
    pub name: String,
    /// Architecture column (iOS layouts), when present.
    pub arch: Option<String>,
    /// The UUID between `<` and `>`.
    pub id: Option<ImageId>,
    /// Path (last column), when present.
    pub path: Option<String>,
}

impl TextImage {
    /// The image's file name: the last component of its path, else the name column.
    pub fn file_name(&self) -> &str {
        self.path.as_deref().and_then(|p| p.rsplit('/').next()).filter(|n| !n.is_empty()).unwrap_or(&self.name)
    }

    fn contains(&self, address: u64) -> bool {
        address >= self.base && self.end.is_none_or(|e| address <= e)
    }
}

/// Architecture names Apple prints in Binary Images lines.
const ARCHES: &[&str] =
    &["arm64", "arm64e", "arm64_32", "armv6", "armv7", "armv7s", "armv7k", "x86_64", "x86_64h", "i386", "ppc"];

fn parse_hex(t: &str) -> Option<u64> {
    let h = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"))?;
    if h.is_empty() || h.len() > 16 {
        return None;
    }
    u64::from_str_radix(h, 16).ok()
}

/// Parses one `Binary Images:` line in any of Apple's layouts; `None` when the line is not one.
///
/// ```text
///        0x1ad951000 -        0x1ade67fff libswiftCore.dylib arm64e  <178beeaf85dc35a7b02cb951eba169ce> /usr/lib/swift/libswiftCore.dylib
///        0x10e30e000 -        0x10e311fff CrashingTest (*) <01d2a9d5-1f8a-35c8-9228-7c7cca13c5fc> /Users/x/CrashingTest
/// 0x100f38000 - 0x100f3ffff +MyApp arm64  <3f8cc1c7ab7c3e5a8d2f2d3e1d9e8c7b> /var/containers/Bundle/Application/X/MyApp.app/MyApp
///     0x7fff2d3f1000 -     0x7fff2d8a4fff  com.apple.AppKit (6.9 - 1894.60.100) <B1D5ABE9-...> /System/Library/...
/// ```
pub fn parse_image_line(line: &str) -> Option<TextImage> {
    let t = line.trim_start();
    let (start, rest) = t.split_once(char::is_whitespace)?;
    let base = parse_hex(start)?;
    let rest = rest.trim_start().strip_prefix('-')?.trim_start();
    let (end_text, rest) = rest.split_once(char::is_whitespace)?;
    let end = if end_text == "???" { None } else { Some(parse_hex(end_text)?) };
    let rest = rest.trim_start();
    // The UUID: the last `<...>` holding only hex digits and dashes.
    let (mut name_part, id, path) = match rest.rfind('<').and_then(|lt| Some((lt, lt + rest[lt..].find('>')?))) {
        Some((lt, gt)) if rest[lt + 1..gt].bytes().all(|c| c.is_ascii_hexdigit() || c == b'-') => {
            let path = rest[gt + 1..].trim();
            (rest[..lt].trim_end(), parse_image_id(&rest[lt + 1..gt]), (!path.is_empty()).then(|| path.to_string()))
        }
        _ => (rest.trim_end(), None, None),
    };
    name_part = name_part.strip_prefix('+').unwrap_or(name_part).trim_start();
    let mut arch = None;
    if name_part.ends_with(')') {
        // macOS: `name (version)`; the name itself may hold parentheses only before that.
        if let Some(open) = name_part.rfind(" (") {
            name_part = name_part[..open].trim_end();
        }
    } else if let Some((n, a)) = name_part.rsplit_once(char::is_whitespace) {
        if ARCHES.contains(&a) {
            arch = Some(a.to_string());
            name_part = n.trim_end();
        }
    }
    if name_part.is_empty() && path.is_none() {
        return None;
    }
    Some(TextImage { base, end, name: name_part.to_string(), arch, id, path })
}

/// One frame line, split: everything up to and including the address is kept as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextFrame<'a> {
    /// Frame index (first column).
    pub index: u64,
    /// Image name column, trimmed.
    pub image: &'a str,
    /// The frame's address.
    pub address: u64,
    /// The line up to and including the address (index, padding, image name, tab, padding, address).
    pub prefix: &'a str,
    /// The symbol part after the single space that follows the address.
    pub symbol: &'a str,
}

/// Parses a frame line `<index> <image> <address> <symbol part>`; `None` when the line is not one.
pub fn parse_frame_line(line: &str) -> Option<TextFrame<'_>> {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 6 {
        return None;
    }
    let index: u64 = line[..digits].parse().ok()?;
    let after = &line[digits..];
    if !after.starts_with([' ', '\t']) {
        return None;
    }
    // The address: the first `0x…` token after a non-empty image name, followed by a space and more text.
    let mut pos = 0;
    while let Some(off) = after[pos..].find("0x") {
        let at = pos + off;
        pos = at + 2;
        let before = &after[..at];
        if !before.ends_with([' ', '\t']) || before.trim().is_empty() {
            continue;
        }
        let tok_len = after[at + 2..].bytes().take_while(u8::is_ascii_hexdigit).count();
        let tok_end = at + 2 + tok_len;
        let Some(symbol) = after[tok_end..].strip_prefix(' ') else { continue };
        if tok_len == 0 || symbol.trim().is_empty() {
            continue;
        }
        let address = parse_hex(&after[at..tok_end])?;
        return Some(TextFrame { index, image: before.trim(), address, prefix: &line[..digits + tok_end], symbol });
    }
    None
}

/// True when a frame's symbol part is one of Apple's unsymbolicated forms: `0x<hex> + <decimal>`,
/// `<image name> + <decimal>` or `???`.
pub fn is_unsymbolicated(symbol: &str, image: &str) -> bool {
    let s = symbol.trim_end();
    if s == "???" {
        return true;
    }
    let Some((left, right)) = s.rsplit_once(" + ") else { return false };
    if right.is_empty() || !right.bytes().all(|c| c.is_ascii_digit()) {
        return false;
    }
    parse_hex(left).is_some() || left == image
}

/// What [`symbolicate_text`] did.
#[derive(Clone, Debug, Default)]
pub struct TextResult {
    /// The text, every byte as it was except the rewritten frame lines (and their added inlined lines).
    pub text: Vec<u8>,
    /// Frame lines that were unsymbolicated.
    pub unsymbolicated: usize,
    /// Of those, the ones rewritten.
    pub symbolicated: usize,
    /// Images listed in `Binary Images:`.
    pub images: usize,
    /// Debug-file notes (files not used and why).
    pub notes: Vec<String>,
}

/// The OS a crash text is from, by its `OS Version:` line (`iPhone OS`, `iOS`, `macOS`, `Mac OS X`, ...); iOS when
/// there is none.
pub fn flavor_of_text(text: &[u8]) -> Flavor {
    for line in text.split(|b| *b == b'\n') {
        if let Some(v) = line.strip_prefix(b"OS Version:") {
            let v = String::from_utf8_lossy(v);
            return if v.contains("Mac OS") || v.contains("macOS") || v.contains("OS X") {
                Flavor::Macos
            } else if v.contains("Linux") {
                Flavor::Linux
            } else {
                Flavor::Ios
            };
        }
    }
    Flavor::Ios
}

/// An unsymbolicated frame line and its question to a debug file (see [`Questions`]); `None` when nothing can be
/// asked (no image holds the address, or the image has no debug file).
type FrameLine<'a> = (TextFrame<'a>, Option<(usize, u64, u64)>);

/// Symbolicates the frame lines of Apple crash text with debug files from `store`. Never fails: lines that do not
/// parse, frames whose image is not listed or has no debug file, and frames already symbolicated are kept as they
/// are.
pub fn symbolicate_text(input: &[u8], store: &mut SymbolStore) -> TextResult {
    let lines: Vec<&[u8]> = input.split_inclusive(|b| *b == b'\n').collect();
    let images: Vec<TextImage> = lines
        .iter()
        .filter_map(|l| std::str::from_utf8(l).ok())
        .filter_map(|l| parse_image_line(l.trim_end()))
        .collect();
    let other_os = !flavor_of_text(input).is_host_os();
    let mut files: Vec<Option<Option<Arc<DebugFile>>>> = vec![None; images.len()];
    let mut out = TextResult {
        text: Vec::with_capacity(input.len() + input.len() / 4),
        images: images.len(),
        ..TextResult::default()
    };
    // First pass: each line's unsymbolicated frame and what it asks of its image's debug file.
    let mut questions = Questions::default();
    let mut frames: Vec<Option<FrameLine<'_>>> = Vec::with_capacity(lines.len());
    let mut in_images = false;
    for raw in &lines {
        let line = std::str::from_utf8(split_ending(raw).0).ok();
        if let Some(line) = line {
            if line.starts_with("Binary Images:") {
                in_images = true;
            } else if in_images && line.trim().is_empty() {
                in_images = false;
            }
        }
        let frame =
            line.filter(|_| !in_images).and_then(parse_frame_line).filter(|f| is_unsymbolicated(f.symbol, f.image));
        let Some(frame) = frame else {
            frames.push(None);
            continue;
        };
        out.unsymbolicated += 1;
        let asked = image_of(&images, &frame).and_then(|i| {
            let file = files[i]
                .get_or_insert_with(|| {
                    let im = &images[i];
                    store.find(&ImageQuery {
                        name: Some(im.file_name().to_string()),
                        path: im.path.clone(),
                        id: im.id.clone(),
                        arch: im.arch.clone(),
                        other_os,
                    })
                })
                .clone()?;
            let svma = to_svma(frame.address, images[i].base, None, &file);
            let question = (i, svma, if frame.index == 0 { svma } else { svma.wrapping_sub(1) });
            questions.ask(question);
            Some(question)
        });
        frames.push(Some((frame, asked)));
    }
    let answers = questions.answer(|i| files.get(i).cloned().flatten().flatten());
    // Second pass: the text, with the answered frame lines rewritten.
    for (raw, frame) in lines.iter().zip(frames) {
        let ending = split_ending(raw).1;
        let Some((frame, Some(question))) = frame else {
            out.text.extend_from_slice(raw);
            continue;
        };
        match answers.get(question) {
            Some(syms) if !syms.is_empty() => {
                out.symbolicated += 1;
                let count = syms.len();
                for (k, s) in syms.iter().enumerate() {
                    let f = FrameLog {
                        address: frame.address,
                        symbol: Some(s.clone()),
                        inlined: k + 1 < count,
                        ..Default::default()
                    };
                    out.text.extend_from_slice(frame.prefix.as_bytes());
                    out.text.push(b' ');
                    out.text.extend_from_slice(symbol_part(&f, None).as_bytes());
                    out.text.extend_from_slice(if ending.is_empty() && k + 1 < count { b"\n" } else { ending });
                }
            }
            _ => out.text.extend_from_slice(raw),
        }
    }
    out.notes = store.take_notes();
    out
}

/// Splits a line into its text and its ending (`\r\n`, `\n` or nothing).
fn split_ending(raw: &[u8]) -> (&[u8], &[u8]) {
    if let Some(b) = raw.strip_suffix(b"\r\n") {
        (b, &raw[b.len()..])
    } else if let Some(b) = raw.strip_suffix(b"\n") {
        (b, &raw[b.len()..])
    } else {
        (raw, b"")
    }
}

/// The image a frame belongs to: the one whose range holds the address (preferring one whose name matches the
/// frame's image column), else the first with the frame's image name.
fn image_of(images: &[TextImage], f: &TextFrame<'_>) -> Option<usize> {
    let named = |im: &TextImage| im.file_name() == f.image || im.name == f.image;
    let in_range: Vec<usize> = (0..images.len()).filter(|&i| images[i].contains(f.address)).collect();
    in_range
        .iter()
        .copied()
        .find(|&i| named(&images[i]))
        .or_else(|| in_range.first().copied())
        .or_else(|| images.iter().position(named))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_lines_of_every_layout() {
        let m = parse_image_line("       0x1ad951000 -        0x1ade67fff libswiftCore.dylib arm64e  <178beeaf85dc35a7b02cb951eba169ce> /usr/lib/swift/libswiftCore.dylib").unwrap();
        assert_eq!(
            (m.base, m.end, m.name.as_str(), m.arch.as_deref()),
            (0x1ad951000, Some(0x1ade67fff), "libswiftCore.dylib", Some("arm64e"))
        );
        assert_eq!(m.id.unwrap().to_hex(), "178beeaf85dc35a7b02cb951eba169ce");
        let m = parse_image_line("       0x10e30e000 -        0x10e311fff CrashingTest (*) <01d2a9d5-1f8a-35c8-9228-7c7cca13c5fc> /Users/x/CrashingTest").unwrap();
        assert_eq!((m.name.as_str(), m.arch.as_deref(), m.file_name()), ("CrashingTest", None, "CrashingTest"));
        let m = parse_image_line(
            "0x100f38000 - 0x100f3ffff +My App arm64  <3f8cc1c7ab7c3e5a8d2f2d3e1d9e8c7b> /var/x/My App.app/My App",
        )
        .unwrap();
        assert_eq!((m.name.as_str(), m.file_name()), ("My App", "My App"));
        let m = parse_image_line("    0x7fff2d3f1000 -     0x7fff2d8a4fff  com.apple.AppKit (6.9 - 1894.60.100) <B1D5ABE9-1234-5678-9ABC-DEF012345678> /System/Library/Frameworks/AppKit.framework/Versions/C/AppKit").unwrap();
        assert_eq!((m.name.as_str(), m.file_name()), ("com.apple.AppKit", "AppKit"));
        let m = parse_image_line(
            "               0x0 - 0xffffffffffffffff ??? unknown-arch  <00000000000000000000000000000000> ???",
        )
        .unwrap();
        assert_eq!(m.end, Some(u64::MAX));
        assert!(parse_image_line("Binary Images:").is_none());
        assert!(parse_image_line("    x0: 0x0000000000000000   x1: 0x0000000000000000").is_none());
    }

    #[test]
    fn frame_lines() {
        let f = parse_frame_line("2   iOSCrashingTest               \t       0x1007da4bc 0x1007d4000 + 25788").unwrap();
        assert_eq!((f.index, f.image, f.address), (2, "iOSCrashingTest", 0x1007da4bc));
        assert_eq!(f.prefix, "2   iOSCrashingTest               \t       0x1007da4bc");
        assert!(is_unsymbolicated(f.symbol, f.image));
        let f =
            parse_frame_line("12  Google Chrome Framework       \t0x000000010f4e5a6b Google Chrome Framework + 1234")
                .unwrap();
        assert_eq!((f.image, f.address), ("Google Chrome Framework", 0x10f4e5a6b));
        assert!(is_unsymbolicated(f.symbol, f.image));
        let f = parse_frame_line(
            "0   libswiftCore.dylib            \t       0x1ad98ab74 _assertionFailure(_:_:file:line:flags:) + 308",
        )
        .unwrap();
        assert!(!is_unsymbolicated(f.symbol, f.image));
        assert!(parse_frame_line("Thread 0 Crashed:").is_none());
        assert!(parse_frame_line("2022 0x1").is_none());
        assert!(parse_frame_line("1   x\t0x").is_none());
    }
}
