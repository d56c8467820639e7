//! The crash-time encoder: writes a report section by section, never allocating, locking or panicking.
//!
//! Each section's MessagePack payload is built in a caller-provided scratch buffer with `rmp`'s low-level
//! `encode::write_*` functions, checksummed, and handed with its header to a [`Sink`]: a [`SliceSink`] over a
//! preallocated buffer, or the handler's raw file-descriptor writer. Running out of room is an error value, never a
//! panic. The input types borrow everything (`&[u8]` for text, `&[u64]` for frames), so the handler builds them from
//! its preallocated tables. Field keys and meanings are specified in `report-format/SCHEMA.md`.
//!
//! Signal safety: every function in this module is async-signal-safe provided the [`Sink`] is. It only computes,
//! copies into the scratch buffer, and calls the sink. Text that is not valid UTF-8 is written with each byte of an
//! invalid sequence replaced by `?`, so readers always see valid UTF-8.
//!
//! Layout, by job (the submodules are private; everything public is re-exported here):
//! - `sink`: the [`Sink`] trait, [`SinkError`], [`SliceSink`] and the launch-time `Vec<u8>` sink;
//! - `msgpack`: MessagePack primitives over the fixed scratch buffer (a cursor, maps whose entry count is patched
//!   in when they close, text made valid UTF-8);
//! - `sections`: the input types of each section ([`Meta`], [`Exception`], [`Thread`], [`Image`], [`Message`],
//!   [`KeyValue`]) and the payload each becomes;
//! - this module: [`Encoder`], which frames, checksums and emits the sections, and [`EncodeError`].

mod msgpack;
mod sections;
mod sink;

pub use sections::{
    frame_registers, Exception, Image, ImageLookup, IndexedImage, KeyValue, LanguageException, Message, Meta, NonFatal,
    Os, Process, Repeat, Thread, ID_KIND_BUILD_ID, ID_KIND_UUID, IMAGES_PER_SECTION, IMAGE_NAMES_PER_SECTION,
    LANGUAGE_CXX, LANGUAGE_OBJC, LANGUAGE_RUST, NON_FATAL_APP, NON_FATAL_HANG, NON_FATAL_MANUAL,
};
pub use sink::{Sink, SinkError, SliceSink};

use crate::framing::{self, SectionKind, SECTION_HEADER_LEN};
use msgpack::{Cursor, NoRoom};
use sections::{
    encode_end, encode_exception, encode_image_chunk, encode_messages, encode_meta, encode_name_chunk, encode_thread,
    encode_user,
};

/// Why encoding stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// One section's payload did not fit the scratch buffer.
    ScratchTooSmall(SectionKind),
    /// The sink refused the bytes.
    Sink(SinkError),
    /// A method was called after [`Encoder::finish`] failed or in the wrong state.
    Finished,
}

impl From<SinkError> for EncodeError {
    fn from(e: SinkError) -> Self {
        EncodeError::Sink(e)
    }
}

/// Writes one report: the file header at [`Encoder::begin`], sections in any order, the end marker at
/// [`Encoder::finish`]. Never allocates or panics; async-signal-safe when the sink is.
#[derive(Debug)]
pub struct Encoder<'s, S: Sink> {
    sink: S,
    scratch: &'s mut [u8],
    sections: u32,
    offset: u64,
}

impl<'s, S: Sink> Encoder<'s, S> {
    /// Starts a report: writes the file header to `sink`. `scratch` holds one section's payload at a time; 64 KiB
    /// is ample for threads of 512 frames and image chunks with 1 KiB paths.
    ///
    /// # Errors
    /// [`EncodeError::Sink`] when the sink refuses the header.
    pub fn begin(mut sink: S, scratch: &'s mut [u8]) -> Result<Self, EncodeError> {
        let h = framing::file_header();
        sink.write_all(&h)?;
        Ok(Encoder { sink, scratch, sections: 0, offset: h.len() as u64 })
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Writes the META section.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn meta(&mut self, m: &Meta<'_>) -> Result<(), EncodeError> {
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_meta(&mut w, m).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::Meta))?;
            w.pos
        };
        self.emit(SectionKind::Meta, len)
    }

    /// Writes the EXCEPTION section.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn exception(&mut self, e: &Exception<'_>) -> Result<(), EncodeError> {
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_exception(&mut w, e).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::Exception))?;
            w.pos
        };
        self.emit(SectionKind::Exception, len)
    }

    /// Writes one THREAD section. When the frames do not fit the scratch buffer, the frame list is halved until
    /// it does and the section is marked truncated, so a thread is never lost for want of room.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] when even the registers alone do not fit; [`EncodeError::Sink`].
    pub fn thread(&mut self, t: &Thread<'_>) -> Result<(), EncodeError> {
        let mut t = *t;
        loop {
            let res = {
                let mut w = Cursor::new(self.scratch);
                encode_thread(&mut w, &t).map(|()| w.pos)
            };
            match res {
                Ok(len) => return self.emit(SectionKind::Thread, len),
                Err(NoRoom) if !t.frames.is_empty() => {
                    let keep = t.frames.len() / 2;
                    t.frames = t.frames.get(..keep).unwrap_or(&[]);
                    t.trust = t.trust.get(..keep.min(t.trust.len())).unwrap_or(&[]);
                    t.frames_truncated = true;
                    t.repeats = &[];
                }
                Err(NoRoom) => return Err(EncodeError::ScratchTooSmall(SectionKind::Thread)),
            }
        }
    }

    /// Writes consecutive images as one or more IMAGES sections of at most [`IMAGES_PER_SECTION`] images, each as
    /// many as fit the scratch buffer. `first_index` is the list index of `images[0]`.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] when a single image does not fit; [`EncodeError::Sink`].
    pub fn images(&mut self, first_index: u32, images: &[Image<'_>]) -> Result<(), EncodeError> {
        let mut done = 0usize;
        while done < images.len() {
            let rest = images.get(done..).unwrap_or(&[]);
            let base = first_index.saturating_add(u32::try_from(done).unwrap_or(u32::MAX));
            let (len, n) = {
                let mut w = Cursor::new(self.scratch);
                encode_image_chunk(&mut w, rest.len(), |k| {
                    Some((base.saturating_add(u32::try_from(k).ok()?), *rest.get(k)?))
                })
            };
            done = self.emit_images(len, n, done)?;
        }
        Ok(())
    }

    /// Writes images given with their list indices (in any order; SCHEMA.md §4.4 keeps each one's index) as one or
    /// more IMAGES sections of at most [`IMAGES_PER_SECTION`] images, each as many as fit the scratch buffer.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] when a single image does not fit; [`EncodeError::Sink`].
    pub fn indexed_images(&mut self, images: &[IndexedImage<'_>]) -> Result<(), EncodeError> {
        let mut done = 0usize;
        while done < images.len() {
            let rest = images.get(done..).unwrap_or(&[]);
            let (len, n) = {
                let mut w = Cursor::new(self.scratch);
                encode_image_chunk(&mut w, rest.len(), |k| rest.get(k).map(|i| (i.index, i.image)))
            };
            done = self.emit_images(len, n, done)?;
        }
        Ok(())
    }

    fn emit_images(&mut self, len: usize, n: usize, done: usize) -> Result<usize, EncodeError> {
        if n == 0 {
            return Err(EncodeError::ScratchTooSmall(SectionKind::Images));
        }
        self.emit(SectionKind::Images, len)?;
        Ok(done.saturating_add(n))
    }

    /// Writes the paths of images that nothing points into as IMAGE NAMES sections (SCHEMA.md §4.4.1): `names`
    /// gives each image's list index and path, in ascending index order (an index at or below the previous one
    /// starts a new section). Nothing is written when `names` is empty.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] when a single path does not fit; [`EncodeError::Sink`].
    pub fn image_names<'p, I: IntoIterator<Item = (u32, &'p [u8])>>(&mut self, names: I) -> Result<(), EncodeError> {
        let mut it = names.into_iter();
        let mut next = it.next();
        while let Some(first) = next {
            let (len, left) = {
                let mut w = Cursor::new(self.scratch);
                encode_name_chunk(&mut w, first, &mut it)
                    .map_err(|_| EncodeError::ScratchTooSmall(SectionKind::ImageNames))?
            };
            self.emit(SectionKind::ImageNames, len)?;
            next = left;
        }
        Ok(())
    }

    /// Writes the MESSAGES section (nothing when `messages` is empty).
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn messages(&mut self, messages: &[Message<'_>]) -> Result<(), EncodeError> {
        if messages.is_empty() {
            return Ok(());
        }
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_messages(&mut w, messages).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::Messages))?;
            w.pos
        };
        self.emit(SectionKind::Messages, len)
    }

    /// Writes the USER section (nothing when `pairs` is empty).
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn user(&mut self, pairs: &[KeyValue<'_>]) -> Result<(), EncodeError> {
        if pairs.is_empty() {
            return Ok(());
        }
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_user(&mut w, pairs).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::User))?;
            w.pos
        };
        self.emit(SectionKind::User, len)
    }

    /// Writes a section of a kind this version does not define (for tests of forward compatibility and for
    /// experiments); readers that do not know `code` skip it.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn raw_section(&mut self, code: u16, payload: &[u8]) -> Result<(), EncodeError> {
        let kind = SectionKind::from_code(code);
        let dst = self.scratch.get_mut(..payload.len()).ok_or(EncodeError::ScratchTooSmall(kind))?;
        dst.copy_from_slice(payload);
        self.emit(kind, payload.len())
    }

    /// Writes the end marker and returns the sink.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn finish(mut self) -> Result<S, EncodeError> {
        let end_offset = self.offset;
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_end(&mut w, self.sections, end_offset)
                .map_err(|_| EncodeError::ScratchTooSmall(SectionKind::End))?;
            w.pos
        };
        self.emit(SectionKind::End, len)?;
        Ok(self.sink)
    }

    fn emit(&mut self, kind: SectionKind, len: usize) -> Result<(), EncodeError> {
        let payload = self.scratch.get(..len).ok_or(EncodeError::ScratchTooSmall(kind))?;
        let header = framing::section_header(kind, payload);
        self.sink.write_all(&header)?;
        self.sink.write_all(payload)?;
        self.offset = self.offset.saturating_add(SECTION_HEADER_LEN.saturating_add(len) as u64);
        self.sections = self.sections.saturating_add(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_room_is_an_error_not_a_panic() {
        let mut scratch = [0u8; 8];
        let mut out = [0u8; 10];
        let r = Encoder::begin(SliceSink::new(&mut out), &mut scratch);
        assert_eq!(r.err(), Some(EncodeError::Sink(SinkError::Full)));

        let mut out = [0u8; 4096];
        let mut enc = Encoder::begin(SliceSink::new(&mut out), &mut scratch).expect("header fits");
        let e = enc.meta(&Meta { handler_version: b"a long version string", ..Meta::default() });
        assert_eq!(e, Err(EncodeError::ScratchTooSmall(SectionKind::Meta)));
    }

    #[test]
    fn thread_frames_halve_until_they_fit() {
        let frames: Vec<u64> = (0..1000).map(|i| 0x1_0000_0000 + i).collect();
        let mut scratch = vec![0u8; 2048];
        let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
        enc.thread(&Thread { index: 0, captured: true, frames: &frames, ..Thread::default() }).expect("fits");
        let out = enc.finish().expect("finish");
        let d = crate::decode(&out).expect("decodes");
        let t = &d.report.threads[0];
        assert!(t.frames_truncated);
        assert!(t.frames.len() >= 100 && t.frames.len() < 1000, "{}", t.frames.len());
        assert_eq!(t.frames[..], frames[..t.frames.len()]);
    }

    #[test]
    fn images_split_into_chunks() {
        let imgs: Vec<Image<'_>> = (0..150)
            .map(|i| Image { path: b"/usr/lib/libx.so", load_address: i, size: 1, ..Image::default() })
            .collect();
        let mut scratch = vec![0u8; 65536];
        let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
        enc.images(0, &imgs).expect("images");
        let out = enc.finish().expect("finish");
        let d = crate::decode(&out).expect("decodes");
        assert!(d.is_intact(), "{:?}", d.problems);
        assert_eq!(d.sections.iter().filter(|s| s.kind == SectionKind::Images).count(), 3);
        let addrs: Vec<u64> = d.report.images.iter().map(|i| i.load_address).collect();
        assert_eq!(addrs, (0..150).collect::<Vec<u64>>());
    }
}
