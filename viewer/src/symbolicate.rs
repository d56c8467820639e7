//! Fills the frames of a [`CrashLog`] with symbols from debug files.
//!
//! Rules (`docs/apple-crash-format.md` §1): every frame but frame 0 of a thread is looked up at `address - 1` (the
//! call instruction; a return address points after it), while the printed address and offset stay raw. Inlined
//! functions get one line each, innermost first, marked `[inlined]`. Frames that already carry a symbol (Apple's
//! `.ips` system frames) are left as they are.

use crate::crashlog::{CrashLog, FrameLog};
use crate::symbols::{DebugFile, ImageQuery, SymbolStore};
use std::rc::Rc;

/// Translates a runtime address of an image into the debug file's link-time address (SVMA): `address - slide`
/// when the report knows the slide, else `address - load address + the file's image base`.
pub fn to_svma(address: u64, image_base_runtime: u64, slide: Option<i64>, file: &DebugFile) -> u64 {
    match slide {
        Some(s) => address.wrapping_sub(s as u64),
        None => address.wrapping_sub(image_base_runtime).wrapping_add(file.image_base),
    }
}

/// Symbolicates every frame it can; debug-file notes go to [`CrashLog::symbol_notes`].
pub fn symbolicate(log: &mut CrashLog, store: &mut SymbolStore) {
    let mut needed = vec![false; log.images.len()];
    for f in log.threads.iter().flat_map(|t| &t.frames).chain(&log.last_exception_backtrace) {
        if let (None, Some(i)) = (&f.symbol, f.image) {
            if let Some(n) = needed.get_mut(i) {
                *n = true;
            }
        }
    }
    let other_os = !log.flavor.is_host_os();
    let files: Vec<Option<Rc<DebugFile>>> = log
        .images
        .iter()
        .zip(&needed)
        .map(|(im, &needed)| {
            if !needed || (im.base == 0 && im.size == 0 && im.name.is_none()) {
                return None; // Not referenced by an unsymbolicated frame, or Apple's placeholder image.
            }
            store.find(&ImageQuery {
                name: im.name.clone(),
                path: im.path.clone(),
                id: im.id.clone(),
                arch: im.arch.clone(),
                other_os,
            })
        })
        .collect();
    let lists = log.threads.iter_mut().map(|t| &mut t.frames).chain([&mut log.last_exception_backtrace]);
    for frames in lists {
        let old = std::mem::take(frames);
        let mut new: Vec<FrameLog> = Vec::with_capacity(old.len());
        for f in old {
            let resolved = match (f.symbol.is_none(), f.image) {
                (true, Some(i)) => files.get(i).and_then(|x| x.as_ref()).map(|file| {
                    let im = &log.images[i];
                    let svma = to_svma(f.address, im.base, im.slide, file);
                    let probe = if f.is_return_address() { svma.wrapping_sub(1) } else { svma };
                    file.lookup(svma, probe)
                }),
                _ => None,
            };
            match resolved {
                Some(syms) if !syms.is_empty() => {
                    let n = syms.len();
                    for (k, s) in syms.into_iter().enumerate() {
                        new.push(FrameLog { symbol: Some(s), inlined: k + 1 < n, ..f.clone() });
                    }
                }
                _ => new.push(f),
            }
        }
        *frames = new;
    }
    log.symbol_notes.extend(store.take_notes());
}
