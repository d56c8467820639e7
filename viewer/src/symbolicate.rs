//! Fills the frames of a [`CrashLog`] with symbols from debug files.
//!
//! Rules (`docs/apple-crash-format.md` §1): every frame but frame 0 of a thread is looked up at `address - 1` (the
//! call instruction; a return address points after it), while the printed address and offset stay raw. Inlined
//! functions get one line each, innermost first, marked `[inlined]`. Frames that already carry a symbol (Apple's
//! `.ips` system frames) are left as they are.

use crate::crashlog::{CrashLog, FrameLog, SymbolInfo};
use crate::symbols::{DebugFile, ImageQuery, SymbolStore};
use std::collections::HashMap;
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
    // What a frame asks of its image's debug file: (image, SVMA, probe); `None` when it asks nothing.
    let images = &log.images;
    let key = |f: &FrameLog| -> Option<(usize, u64, u64)> {
        let i = f.image.filter(|_| f.symbol.is_none())?;
        let file = files.get(i)?.as_ref()?;
        let im = images.get(i)?;
        let svma = to_svma(f.address, im.base, im.slide, file);
        Some((i, svma, if f.is_return_address() { svma.wrapping_sub(1) } else { svma }))
    };
    // Each distinct question is asked once, every debug file's in one batch (threads of a report share most of
    // their frames; a batch reads each compilation unit once, see `DebugFile::lookup_batch`).
    let mut queries: Vec<Vec<(u64, u64)>> = vec![Vec::new(); images.len()];
    let mut slot: HashMap<(usize, u64, u64), usize> = HashMap::new();
    for f in log.threads.iter().flat_map(|t| &t.frames).chain(&log.last_exception_backtrace) {
        if let Some(k @ (i, svma, probe)) = key(f) {
            slot.entry(k).or_insert_with(|| {
                queries[i].push((svma, probe));
                queries[i].len() - 1
            });
        }
    }
    let answers: Vec<Vec<Vec<SymbolInfo>>> = files
        .iter()
        .zip(&queries)
        .map(|(file, q)| match file {
            Some(file) if !q.is_empty() => file.lookup_batch(q),
            _ => Vec::new(),
        })
        .collect();
    let lists = log.threads.iter_mut().map(|t| &mut t.frames).chain([&mut log.last_exception_backtrace]);
    for frames in lists {
        let old = std::mem::take(frames);
        let mut new: Vec<FrameLog> = Vec::with_capacity(old.len());
        for f in old {
            let resolved = key(&f).and_then(|k| slot.get(&k).and_then(|&n| answers[k.0].get(n)).cloned());
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
