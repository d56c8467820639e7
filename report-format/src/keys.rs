//! Every on-disk key of the format, spelled once: the section kind numbers (SCHEMA.md §3) and the MessagePack map
//! keys of each section payload (SCHEMA.md §4).
//!
//! Keys are short ASCII strings, unique within their map (the same letters mean different things in different maps:
//! `n` is a thread's name in THREAD and the section count in END). One module per map, each with the keys as
//! constants and `ALL`, every key of the map in the order the encoder writes them and SCHEMA.md lists them.
//!
//! The crash-time encoder ([`crate::encode`]) writes these constants; [`crate::framing`] maps the [`section`]
//! numbers to [`crate::framing::SectionKind`] and back. The decoder reads payloads into serde-derived structs whose
//! field names are the keys (serde needs them as identifiers, not constants); a unit test in `decode` checks that
//! each of those structs reads exactly the keys of its map here, in this order.
//!
//! `tests/keys.rs` checks the rest: the encoder writes exactly these keys in this order, every field it writes
//! decodes back unchanged, and SCHEMA.md's key tables (one per map, in [`MAPS`]'s order) and its table of section
//! kinds list exactly these keys and numbers. A key cannot change in one place only.

/// Section kind numbers: the `kind` field of a section header (SCHEMA.md §3), little-endian `u16` on disk.
pub mod section {
    /// META: report id, time, OS, hardware, process (§4.1). Once.
    pub const META: u16 = 1;
    /// EXCEPTION: Mach exception, signal, fault address, crashed thread (§4.2). Once.
    pub const EXCEPTION: u16 = 2;
    /// THREAD: one thread's registers and frames (§4.3). Once per thread.
    pub const THREAD: u16 = 3;
    /// IMAGES: a run of consecutive images (§4.4). One or more.
    pub const IMAGES: u16 = 4;
    /// MESSAGES: application-specific messages (§4.5). At most once.
    pub const MESSAGES: u16 = 5;
    /// USER: key/values the app set (§4.6). At most once.
    pub const USER: u16 = 6;
    /// IMAGE NAMES: the paths of the images nothing points into, front-coded (§4.4.1; format 2.0). Zero or more.
    pub const IMAGE_NAMES: u16 = 7;
    /// END: the end marker, last (§4.7).
    pub const END: u16 = 0xFFFF;
    /// Every section kind with its name in SCHEMA.md §3, in the table's order.
    pub const ALL: &[(&str, u16)] = &[
        ("META", META),
        ("EXCEPTION", EXCEPTION),
        ("THREAD", THREAD),
        ("IMAGES", IMAGES),
        ("MESSAGES", MESSAGES),
        ("USER", USER),
        ("IMAGE NAMES", IMAGE_NAMES),
        ("END", END),
    ];
}

/// One MessagePack map of the format and its keys (an entry of [`MAPS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyMap {
    /// The map's name as the heading or caption of its key table in SCHEMA.md gives it: `"META"`, `"Process map"`.
    pub name: &'static str,
    /// Its keys, in the order the encoder writes them and SCHEMA.md lists them (the map module's `ALL`).
    pub keys: &'static [&'static str],
}

/// Declares one module per map (its key constants and `ALL`) and [`MAPS`], so that `ALL` and `MAPS` cannot leave
/// a key or a map out.
macro_rules! key_maps {
    ($(
        $(#[$map_doc:meta])*
        $map:ident $name:literal {
            $( $(#[$key_doc:meta])* $key:ident = $spelling:literal; )*
        }
    )*) => {
        $(
            $(#[$map_doc])*
            pub mod $map {
                $( $(#[$key_doc])* pub const $key: &str = $spelling; )*
                /// Every key of this map, in the order the encoder writes them and SCHEMA.md lists them.
                pub const ALL: &[&str] = &[$($key),*];
            }
        )*

        /// Every MessagePack map of the format, in SCHEMA.md's order.
        pub const MAPS: &[KeyMap] = &[$(KeyMap { name: $name, keys: $map::ALL }),*];
    };
}

key_maps! {
    /// Keys of the META section's map (SCHEMA.md §4.1).
    meta "META" {
        /// `bin(16)`: report id, 16 random bytes (version-4 UUID layout).
        ID = "id";
        /// `uint`: capture time, nanoseconds since the Unix epoch.
        TIME = "t";
        /// `str`, opt: version of the handler that wrote the report.
        HANDLER_VERSION = "v";
        /// `str`, opt: CPU architecture of the process (`arm64`, `arm64e`, `x86_64`).
        ARCH = "arch";
        /// `str`, opt: hardware model (`iPhone14,2`; on Linux the DMI product name or `uname -m`).
        HARDWARE_MODEL = "hw";
        /// `map`: the operating system, keys in [`super::os`].
        OS = "os";
        /// `map`: the process, keys in [`super::process`].
        PROCESS = "p";
        /// `uint`, opt: number of threads the handler found, captured or not.
        THREAD_COUNT = "tc";
        /// `uint`, opt: number of images in the image list.
        IMAGE_COUNT = "ic";
        /// `bool`, opt: `true` for a minimal report written after a second fault inside the handler.
        MINIMAL = "min";
        /// `str`, opt: how the report was made.
        NOTE = "note";
        /// `map`, opt, format 2.3: present for a non-fatal report (the process went on), keys in
        /// [`super::non_fatal`].
        NON_FATAL = "nf";
    }

    /// Keys of META's `os` map (SCHEMA.md §4.1); every key optional.
    os "OS map" {
        /// `str`: OS name as Apple prints it (`iPhone OS`, `macOS`) or `Linux`.
        NAME = "n";
        /// `str`: version (`15.5`, or the Linux kernel release).
        VERSION = "v";
        /// `str`: build (`19F77`, or the Linux kernel version string).
        BUILD = "b";
    }

    /// Keys of META's `p` (process) map (SCHEMA.md §4.1); every key optional.
    process "Process map" {
        /// `uint`: process id.
        PID = "pid";
        /// `uint`: parent process id.
        PARENT_PID = "ppid";
        /// `str`: process name.
        NAME = "n";
        /// `str`: executable path.
        PATH = "path";
        /// `str`: parent process name.
        PARENT_NAME = "pn";
        /// `str`: bundle identifier (`CFBundleIdentifier`) or the app id given at install.
        BUNDLE_ID = "id";
        /// `str`: `CFBundleShortVersionString`.
        SHORT_VERSION = "sv";
        /// `str`: `CFBundleVersion`.
        BUILD_VERSION = "bv";
        /// `uint`: launch time, nanoseconds since the Unix epoch.
        LAUNCH_TIME = "lt";
    }

    /// Keys of META's `nf` map (SCHEMA.md §4.1.1; format 2.3); every key but `k` optional.
    non_fatal "Non-fatal map" {
        /// `str`: why the report was made: `hang`, `manual`, or `app`.
        KIND = "k";
        /// `str`, opt: the reason in words (the app's own text for `app` and `manual`; the stall for `hang`).
        REASON = "r";
        /// `uint`, opt: how long the stall had lasted when the threads were captured, nanoseconds (`hang`).
        DURATION = "d";
        /// `uint`, opt: index of the thread the report is about (the stalled main thread of a `hang`, the thread
        /// that asked for a `manual` or `app` report).
        THREAD = "th";
    }

    /// Keys of the EXCEPTION section's map (SCHEMA.md §4.2); every key optional.
    exception "EXCEPTION" {
        /// `uint`: Mach exception type (`exception_type_t`).
        MACH_TYPE = "mt";
        /// `array` of `int`: Mach exception codes (`mach_exception_data_type_t`).
        MACH_CODES = "mc";
        /// `int`: signal number, in the numbering of the OS named in META.
        SIGNAL = "sig";
        /// `int`: `si_code` of the signal.
        SI_CODE = "code";
        /// `uint`: fault address.
        FAULT_ADDRESS = "addr";
        /// `uint`: index of the crashed thread in the thread list.
        CRASHED_THREAD = "ct";
        /// `map`, format 2.1: the uncaught language exception or panic that ended the process (keys in
        /// [`super::language_exception`]).
        LANGUAGE_EXCEPTION = "lx";
    }

    /// Keys of EXCEPTION's `lx` map (SCHEMA.md §4.2.1; format 2.1); every key but `k` optional.
    language_exception "Language exception map" {
        /// `str`: what raised it: `objc` (an `NSException`), `c++` (a C++ exception), `rust` (a panic).
        KIND = "k";
        /// `str`: the exception's type: the `NSException` name, the C++ type as `std::type_info::name` gives it
        /// (mangled).
        TYPE = "t";
        /// `str`: the reason: `NSException.reason`, `std::exception::what()`, the panic message.
        REASON = "r";
        /// `str`: source location `file:line:column` (Rust panics).
        LOCATION = "loc";
        /// `str`: a bounded part of the `NSException`'s `userInfo`, one `key: value` line each.
        USER_INFO = "ui";
        /// `uint`: kernel thread id of the thread that threw or panicked.
        THREAD_ID = "tid";
        /// `array` of `uint`: the stack where it was thrown (return addresses, innermost first).
        BACKTRACE = "bt";
    }

    /// Keys of a THREAD section's map (SCHEMA.md §4.3).
    thread "THREAD" {
        /// `uint`: index in the report's thread list, 0-based.
        INDEX = "i";
        /// `uint`, opt: kernel thread id.
        ID = "id";
        /// `str`, opt: thread name.
        NAME = "n";
        /// `str`, opt: dispatch queue label.
        QUEUE = "q";
        /// `bool`, opt: `true` for the crashed thread.
        CRASHED = "c";
        /// `bool`, opt: `false` when the thread's state could not be captured (absent = captured).
        CAPTURED = "cap";
        /// `str`, opt: why the thread was not captured.
        NOT_CAPTURED_REASON = "why";
        /// `str`, opt: register set name (`arm64`, `x86_64`; [`crate::regs`]).
        REGISTER_SET = "rs";
        /// `array` of `uint` or `nil`, opt: register values in the set's order.
        REGISTERS = "r";
        /// `array` of `uint`: raw frame addresses, innermost first (format 1.x; 2.0 writers write
        /// [`FRAMES_RELATIVE`] instead, readers still read it).
        FRAMES = "f";
        /// `bin`, opt: how each frame was found, one byte per frame (format 1.1; replaced by [`FRAMES_RELATIVE`]
        /// in 2.0).
        FRAME_TRUST = "tr";
        /// `bin`: the frames relative to their images with their trust, LEB128-coded (format 2.0, SCHEMA.md
        /// §4.3.2).
        FRAMES_RELATIVE = "fr";
        /// `bool`, opt: `true` when the walk stopped at the frame cap.
        FRAMES_TRUNCATED = "ft";
        /// `array` of `[start, len, count]`, opt: repeating runs left out of the frames.
        REPEATS = "rep";
    }

    /// Keys of an IMAGES section's map (SCHEMA.md §4.4).
    images "IMAGES" {
        /// `uint`: list index of the first image in this section.
        FIRST_INDEX = "i";
        /// `array` of image maps (keys in [`super::image`]): consecutive images from the first index.
        LIST = "l";
    }

    /// Keys of one image's map inside IMAGES (SCHEMA.md §4.4).
    image "Image map" {
        /// `uint`: the image's list index (format 2.0; in 1.x files, the section's first index plus the position).
        INDEX = "x";
        /// `str`, opt: absolute path.
        PATH = "p";
        /// `str`, opt: name, absent when it is the last path component.
        NAME = "n";
        /// `uint`: load address.
        LOAD_ADDRESS = "b";
        /// `uint`: size in bytes of the text range starting at the load address.
        SIZE = "s";
        /// `int`, opt: slide (Mach-O) or load bias (ELF).
        SLIDE = "sl";
        /// `bin`, opt: build identity (Mach-O `LC_UUID` or GNU build ID).
        ID = "id";
        /// `uint`, opt: what the id is (`1` Mach-O UUID, `2` GNU build ID).
        ID_KIND = "k";
        /// `str`, opt: architecture when it differs from META's.
        ARCH = "a";
    }

    /// Keys of an IMAGE NAMES section's map (SCHEMA.md §4.4.1; format 2.0).
    image_names "IMAGE NAMES" {
        /// `uint`: list index of the first entry.
        FIRST_INDEX = "i";
        /// `bin`: the entries, front-coded paths with index gaps (SCHEMA.md §4.4.1).
        LIST = "l";
    }

    /// Keys of the MESSAGES section's map (SCHEMA.md §4.5).
    messages "MESSAGES" {
        /// `array` of message maps (keys in [`super::message`]).
        LIST = "l";
    }

    /// Keys of one message's map inside MESSAGES (SCHEMA.md §4.5).
    message "Message map" {
        /// `str`, opt: where the message came from (an image name, `panic`, `abort`).
        SOURCE = "s";
        /// `str`: the message text.
        TEXT = "m";
    }

    /// Keys of the USER section's map (SCHEMA.md §4.6).
    user "USER" {
        /// `map` of `str` to `str`: key/values the app set before the crash.
        VALUES = "kv";
    }

    /// Keys of the END section's map (SCHEMA.md §4.7).
    end "END" {
        /// `uint`: number of sections before this one.
        SECTION_COUNT = "n";
        /// `uint`: byte offset of this section's header.
        OFFSET = "o";
    }
}

/// Keys of format 1.x that 2.0 writers no longer write but every reader still reads: `(map name, key)`. The map
/// names are those of [`MAPS`].
pub const READ_ONLY: &[(&str, &str)] = &[("THREAD", thread::FRAMES), ("THREAD", thread::FRAME_TRUST)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_within_each_map_and_short() {
        assert_eq!(MAPS.len(), 14);
        for m in MAPS {
            assert!(!m.keys.is_empty(), "{}", m.name);
            for (i, k) in m.keys.iter().enumerate() {
                assert!(!m.keys[..i].contains(k), "{}: key {k:?} twice", m.name);
                assert!(!k.is_empty() && k.len() <= 4 && k.bytes().all(|b| b.is_ascii_lowercase()), "{k:?}");
            }
        }
    }

    #[test]
    fn section_kinds_are_unique() {
        for (i, (name, code)) in section::ALL.iter().enumerate() {
            assert!(section::ALL[..i].iter().all(|(n, c)| n != name && c != code), "{name} {code}");
        }
    }
}
