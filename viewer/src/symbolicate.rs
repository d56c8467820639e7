//! Fills the frames of a [`CrashLog`] with symbols from debug files.
//!
//! Rules (`docs/apple-crash-format.md` §1): every frame but frame 0 of a thread is looked up at `address - 1` (the
//! call instruction; a return address points after it), while the printed address and offset stay raw. Inlined
//! functions get one line each, innermost first, marked `[inlined]`. Frames that already carry a symbol (Apple's
//! `.ips` system frames) are left as they are.

use crate::crashlog::{CrashLog, FrameLog, SymbolInfo};
use crate::symbols::{DebugFile, ImageQuery, SymbolStore};
use std::collections::HashMap;
use std::sync::Arc;

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
    let files: Vec<Option<Arc<DebugFile>>> = log
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
    let mut questions = Questions::default();
    for f in log.threads.iter().flat_map(|t| &t.frames).chain(&log.last_exception_backtrace) {
        if let Some(k) = key(f) {
            questions.ask(k);
        }
    }
    let answers = questions.answer(|i| files.get(i).cloned().flatten());
    let lists = log.threads.iter_mut().map(|t| &mut t.frames).chain([&mut log.last_exception_backtrace]);
    for frames in lists {
        let old = std::mem::take(frames);
        let mut new: Vec<FrameLog> = Vec::with_capacity(old.len());
        for f in old {
            let resolved = key(&f).and_then(|k| answers.get(k)).map(<[SymbolInfo]>::to_vec);
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

/// Lookups for several images' debug files, each distinct question asked once. A question is `(image, SVMA,
/// probe)`: the image's index, the link-time address, and where to look ([`DebugFile::lookup`]). The threads of a
/// report share most of their frames, and a batch reads each compilation unit once for all of its addresses
/// ([`DebugFile::lookup_batch`]).
#[derive(Default)]
pub(crate) struct Questions {
    /// Per image, its distinct `(SVMA, probe)` pairs in the order first asked.
    per_image: Vec<Vec<(u64, u64)>>,
    /// Each question's place in its image's list.
    place: HashMap<(usize, u64, u64), usize>,
}

impl Questions {
    /// Asks `question` (once, however often it comes).
    pub(crate) fn ask(&mut self, question: (usize, u64, u64)) {
        let (i, svma, probe) = question;
        if self.per_image.len() <= i {
            self.per_image.resize_with(i + 1, Vec::new);
        }
        let list = &mut self.per_image[i];
        self.place.entry(question).or_insert_with(|| {
            list.push((svma, probe));
            list.len() - 1
        });
    }

    /// Answers every image's questions in one batch to its debug file, `file(image)` (`None`: no answers).
    pub(crate) fn answer(self, file: impl Fn(usize) -> Option<Arc<DebugFile>>) -> Answers {
        let per_image = self
            .per_image
            .iter()
            .enumerate()
            .map(|(i, q)| match file(i) {
                Some(f) if !q.is_empty() => f.lookup_batch(q),
                _ => Vec::new(),
            })
            .collect();
        Answers { per_image, place: self.place }
    }
}

/// What [`Questions::answer`] found.
pub(crate) struct Answers {
    per_image: Vec<Vec<Vec<SymbolInfo>>>,
    place: HashMap<(usize, u64, u64), usize>,
}

impl Answers {
    /// The frames found for `question`, innermost first (empty when nothing covers the address); `None` when it
    /// was not asked or its image had no debug file.
    pub(crate) fn get(&self, question: (usize, u64, u64)) -> Option<&[SymbolInfo]> {
        let n = *self.place.get(&question)?;
        self.per_image.get(question.0)?.get(n).map(Vec::as_slice)
    }
}
