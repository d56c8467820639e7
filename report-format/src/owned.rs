//! Launch-time encoding of an owned [`Report`]: for tests, fixture generators and tools. Allocates; never call it
//! after a fault (the handler uses [`crate::encode`] directly on its preallocated tables).

use crate::encode::{self, EncodeError, Encoder};
use crate::model::{ImageId, Report};
use crate::regs;

/// Scratch size used for one section (1 MiB: room for any thread or image chunk a test builds).
const SCRATCH: usize = 1 << 20;

/// Encodes `report` with the crash-time encoder into a new vector. Sections are written in the handler's order:
/// META, EXCEPTION, MESSAGES, USER, threads (by index), IMAGES (every image with a load address, with its index),
/// IMAGE NAMES (images known by name only, [`crate::model::Image::name_only`]), end marker. Frames are written
/// relative to the image whose range holds them (format 2.0), so they decode back to the same addresses. Registers whose names are not in the
/// thread's register set are not written; for a set this version does not know, values are written in the order
/// given.
///
/// # Errors
/// [`EncodeError::ScratchTooSmall`] when one section exceeds 1 MiB.
pub fn to_bytes(report: &Report) -> Result<Vec<u8>, EncodeError> {
    let mut scratch = vec![0u8; SCRATCH];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch)?;
    if let Some(m) = &report.meta {
        let p = &m.process;
        enc.meta(&encode::Meta {
            report_id: m.report_id.0,
            capture_time_ns: m.capture_time_ns.unwrap_or(0),
            handler_version: b(&m.handler_version),
            arch: b(&m.arch),
            hardware_model: b(&m.hardware_model),
            os: encode::Os { name: b(&m.os.name), version: b(&m.os.version), build: b(&m.os.build) },
            process: encode::Process {
                pid: p.pid,
                parent_pid: p.parent_pid,
                name: b(&p.name),
                path: b(&p.path),
                parent_name: b(&p.parent_name),
                bundle_id: b(&p.bundle_id),
                short_version: b(&p.short_version),
                build_version: b(&p.build_version),
                launch_time_ns: p.launch_time_ns,
            },
            thread_count: m.thread_count,
            image_count: m.image_count,
            minimal: m.minimal,
            note: b(&m.note),
            non_fatal: m.non_fatal.as_ref().map(|n| encode::NonFatal {
                kind: n.kind.as_bytes(),
                reason: b(&n.reason),
                duration_ns: n.duration_ns,
                thread: n.thread,
            }),
        })?;
    }
    if let Some(e) = &report.exception {
        enc.exception(&encode::Exception {
            mach_type: e.mach_type,
            mach_codes: &e.mach_codes,
            signal: e.signal,
            si_code: e.si_code,
            fault_address: e.fault_address,
            crashed_thread: e.crashed_thread,
            language: e.language.as_ref().map(|l| encode::LanguageException {
                kind: l.kind.as_bytes(),
                type_name: b(&l.type_name),
                reason: b(&l.reason),
                location: b(&l.location),
                user_info: b(&l.user_info),
                thread_id: l.thread_id,
                backtrace: &l.backtrace,
            }),
        })?;
    }
    let msgs: Vec<encode::Message<'_>> =
        report.messages.iter().map(|m| encode::Message { source: b(&m.source), text: m.text.as_bytes() }).collect();
    enc.messages(&msgs)?;
    let kv: Vec<encode::KeyValue<'_>> =
        report.user.iter().map(|(k, v)| encode::KeyValue { key: k.as_bytes(), value: v.as_bytes() }).collect();
    enc.user(&kv)?;
    let lookup = ModelImages::new(report);
    for t in &report.threads {
        let set = t.register_set.as_deref().unwrap_or("");
        let values: Vec<Option<u64>> = match regs::names(set) {
            Some(names) => {
                let mut v = vec![None; names.len()];
                for r in &t.registers {
                    if let Some(i) = names.iter().position(|n| *n == r.name) {
                        v[i] = Some(r.value);
                    }
                }
                while v.last() == Some(&None) {
                    v.pop();
                }
                v
            }
            None => t.registers.iter().map(|r| Some(r.value)).collect(),
        };
        let repeats: Vec<encode::Repeat> =
            t.repeats.iter().map(|r| encode::Repeat { start: r.start, len: r.len, count: r.count }).collect();
        let trust: Vec<u8> = t.frame_trust.iter().map(|t| t.to_byte()).collect();
        enc.thread(&encode::Thread {
            index: t.index,
            id: t.id,
            name: b(&t.name),
            queue: b(&t.queue),
            crashed: t.crashed,
            captured: t.captured,
            reason: b(&t.not_captured_reason),
            register_set: set.as_bytes(),
            registers: &values,
            frames: &t.frames,
            frames_truncated: t.frames_truncated,
            repeats: &repeats,
            trust: &trust,
            images: Some(&lookup),
        })?;
    }
    let full: Vec<encode::IndexedImage<'_>> = report
        .images
        .iter()
        .filter(|img| !img.name_only)
        .map(|img| {
            let default_name = img.path.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
            let (id, id_kind) = match &img.id {
                Some(ImageId::Uuid(u)) => (&u[..], encode::ID_KIND_UUID),
                Some(ImageId::BuildId(v)) => (&v[..], encode::ID_KIND_BUILD_ID),
                None => (&[][..], 0),
            };
            encode::IndexedImage {
                index: img.index,
                image: encode::Image {
                    path: b(&img.path),
                    name: if default_name == Some(img.name.as_str()) { b"" } else { img.name.as_bytes() },
                    load_address: img.load_address,
                    size: img.size,
                    slide: img.slide,
                    id,
                    id_kind,
                    arch: b(&img.arch),
                },
            }
        })
        .collect();
    enc.indexed_images(&full)?;
    enc.image_names(report.images.iter().filter(|img| img.name_only).map(|img| (img.index, b(&img.path))))?;
    enc.finish()
}

fn b(s: &Option<String>) -> &[u8] {
    s.as_deref().map(str::as_bytes).unwrap_or(b"")
}

/// The model's images with a load address, by load address: the frame lookup of [`to_bytes`].
#[derive(Debug)]
struct ModelImages(Vec<(u64, u64, u32)>);

impl ModelImages {
    fn new(report: &Report) -> Self {
        let mut v: Vec<(u64, u64, u32)> =
            report.images.iter().filter(|i| !i.name_only).map(|i| (i.load_address, i.size, i.index)).collect();
        v.sort_unstable();
        ModelImages(v)
    }
}

impl encode::ImageLookup for ModelImages {
    fn image_at(&self, address: u64) -> Option<(u32, u64)> {
        let at = self.0.partition_point(|(load, _, _)| *load <= address);
        let (load, size, index) = *self.0.get(at.checked_sub(1)?)?;
        (address - load < size.max(1)).then_some((index, load))
    }
}
