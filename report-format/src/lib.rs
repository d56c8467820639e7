//! The crash report file format.
//!
//! A report is a file header (magic and format version), then length-delimited sections each with its own CRC-32,
//! then an end marker. Section payloads are MessagePack maps with short keys. `SCHEMA.md` in this crate, shown here as
//! [`schema`], specifies every byte; the modules implement it:
//!
//! - [`framing`]: header and section layout, constants, checksums (pure, allocation-free).
//! - [`keys`]: every on-disk key, spelled once: section kind numbers and the MessagePack map keys of each payload.
//! - [`encode`]: the crash-time encoder. Never allocates, locks or panics; writes into caller-provided buffers.
//! - [`decode`](mod@decode): the launch-time decoder. Recovers every intact section of a damaged file and lists what is missing.
//! - [`model`]: the decoded, owned report (also the stable JSON shape).
//! - [`regs`]: register-set names and orders.
//! - [`mach_names`]: names of the Mach codes the EXCEPTION section stores.
//! - [`owned`]: launch-time encoding of an owned [`model::Report`] (tests, tools, fixtures).
//! - [`schema`]: the format specification, `SCHEMA.md`.

pub mod decode;
// Runs after a fault: no indexing, unwrapping, panicking or unchecked arithmetic (tests excepted), the same lints
// as the handler's crash-path modules. `framing` builds the headers the encoder writes.
#[cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]
pub mod encode;
// Called by the encoder after a fault (see `encode`).
#[cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]
pub mod framing;
pub mod keys;
pub mod mach_names;
pub mod model;
pub mod owned;
pub mod regs;
pub mod transport;

// The specification itself, so `cargo doc` shows it next to the code that implements it. Its tables are checked
// against `keys` by `tests/keys.rs`.
#[doc = include_str!("../SCHEMA.md")]
pub mod schema {}

pub use decode::{decode, DecodeError, Decoded, Problem, ProblemKind, SectionInfo, SectionStatus};
pub use model::Report;
