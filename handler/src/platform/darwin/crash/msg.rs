//! `mach_exc` exception messages: the request the kernel sends to an exception port and the reply it waits for,
//! declared by hand (the `mach2` crate lacks them) and decoded from / encoded into byte buffers, so the layout is
//! compiled and tested on every host.
//!
//! Layouts follow the MIG definitions in XNU `osfmk/mach/mach_exc.defs` (subsystem `mach_exc` 2405: routines
//! `mach_exception_raise` 2405, `mach_exception_raise_state` 2406, `mach_exception_raise_state_identity` 2407,
//! `mach_exception_raise_identity_protected` 2408, `mach_exception_raise_backtrace` 2409,
//! `mach_exception_raise_state_identity_protected` 2410; a reply's id is the request's + 100) and the message
//! primitives in `osfmk/mach/message.h` (`mach_msg_header_t`, `mach_msg_body_t`, `mach_msg_port_descriptor_t`,
//! `mach_msg_max_trailer_t`, all under `#pragma pack(4)`) and `osfmk/mach/ndr.h` (`NDR_record_t`). Ports are plain
//! `u32` names (`mach_port_name_t`) so the module compiles everywhere.
//!
//! Why `packed(4)`: MIG emits these under `#pragma pack(4)`, so the 64-bit codes sit at 4-byte-aligned offsets (68
//! in `mach_exception_raise`). A naturally aligned `#[repr(C)]` struct would insert padding before `code` and read
//! the codes from the wrong bytes (the bug Embark's crash-handling fixed in PR #47).
//!
//! Variable parts: `code` is `array[*:2]` and `old_state` is `array[*:THREAD_STATE_MAX]`, so the bytes after `code`
//! move up by 8 for each missing code and the message ends after `stateCnt` words. The structs below describe the
//! largest message (2 codes, full state) and size the receive buffer; [`parse_request`] computes the real offsets
//! from the counts and checks `msgh_size` against them.

use crate::platform::darwin::crash::macho::bytes::{i32_le, i64_le, slice, u32_le, u64_le};

use super::exc::{
    EXCEPTION_DEFAULT, EXCEPTION_IDENTITY_PROTECTED, EXCEPTION_STATE, EXCEPTION_STATE_IDENTITY,
    EXCEPTION_STATE_IDENTITY_PROTECTED, KERN_SUCCESS,
};

/// `THREAD_STATE_MAX` in 32-bit words for arm64 (`ARM_THREAD_STATE_MAX`, osfmk/mach/arm/thread_state.h, 1296 in
/// current XNU); x86's is 614 (`I386_THREAD_STATE_MAX`, osfmk/mach/i386/thread_state.h). One layout with the larger
/// value serves both: a buffer sized for it holds any request either kernel sends.
pub const THREAD_STATE_MAX: usize = 1296;

/// `EXCEPTION_CODE_MAX`: at most two codes (osfmk/mach/exception_types.h).
pub const EXCEPTION_CODE_MAX: u32 = 2;

/// `MACH_MSGH_BITS_COMPLEX`: the message carries descriptors (message.h).
pub const MACH_MSGH_BITS_COMPLEX: u32 = 0x8000_0000;
/// `MACH_MSGH_BITS_REMOTE_MASK`: disposition of the remote (reply) port in `msgh_bits` (message.h).
pub const MACH_MSGH_BITS_REMOTE_MASK: u32 = 0x0000_001f;
/// `MACH_MSG_TYPE_MOVE_SEND_ONCE` = 18 (message.h): how the kernel's reply right arrives.
pub const MACH_MSG_TYPE_MOVE_SEND_ONCE: u32 = 18;
/// `MACH_MSG_PORT_DESCRIPTOR` = 0 (message.h): `type` of a port descriptor.
pub const MACH_MSG_PORT_DESCRIPTOR: u8 = 0;

/// Request ids (`msgh_id`) of the `mach_exc` routines (mach_exc.defs, subsystem base 2405).
pub mod id {
    /// `mach_exception_raise` (`EXCEPTION_DEFAULT | MACH_EXCEPTION_CODES`).
    pub const RAISE: i32 = 2405;
    /// `mach_exception_raise_state` (`EXCEPTION_STATE | MACH_EXCEPTION_CODES`).
    pub const RAISE_STATE: i32 = 2406;
    /// `mach_exception_raise_state_identity` (`EXCEPTION_STATE_IDENTITY | MACH_EXCEPTION_CODES`).
    pub const RAISE_STATE_IDENTITY: i32 = 2407;
    /// `mach_exception_raise_identity_protected` (`EXCEPTION_IDENTITY_PROTECTED | MACH_EXCEPTION_CODES`).
    pub const RAISE_IDENTITY_PROTECTED: i32 = 2408;
    /// `mach_exception_raise_state_identity_protected` (`EXCEPTION_STATE_IDENTITY_PROTECTED | MACH_EXCEPTION_CODES`).
    pub const RAISE_STATE_IDENTITY_PROTECTED: i32 = 2410;
    /// A reply's `msgh_id` is the request's plus this (MIG convention).
    pub const REPLY_OFFSET: i32 = 100;
}

/// `mach_msg_header_t` (message.h): 24 bytes.
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug, Default)]
pub struct MachMsgHeader {
    /// `msgh_bits`: port dispositions and `MACH_MSGH_BITS_COMPLEX`.
    pub msgh_bits: u32,
    /// `msgh_size`: bytes, header included, trailer excluded.
    pub msgh_size: u32,
    /// `msgh_remote_port`: on a received request, the reply port.
    pub msgh_remote_port: u32,
    /// `msgh_local_port`: on a received request, the exception port it arrived on.
    pub msgh_local_port: u32,
    /// `msgh_voucher_port`.
    pub msgh_voucher_port: u32,
    /// `msgh_id`: routine id.
    pub msgh_id: i32,
}

/// `mach_msg_body_t` (message.h): 4 bytes.
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug, Default)]
pub struct MachMsgBody {
    /// `msgh_descriptor_count`.
    pub msgh_descriptor_count: u32,
}

/// `mach_msg_port_descriptor_t` as user space receives it (message.h): 12 bytes. The C bitfields
/// `pad2:16, disposition:8, type:8` share one little-endian 32-bit word.
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug, Default)]
pub struct MachMsgPortDescriptor {
    /// `name`: the port name received.
    pub name: u32,
    /// `pad1`.
    pub pad1: u32,
    /// `pad2` (16 bits).
    pub pad2: u16,
    /// `disposition` (8 bits).
    pub disposition: u8,
    /// `type` (8 bits): `MACH_MSG_PORT_DESCRIPTOR` = 0.
    pub type_: u8,
}

/// `NDR_record_t` (osfmk/mach/ndr.h): 8 bytes describing data representation (`int_rep` 1 = little-endian).
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NdrRecord(pub [u8; 8]);

/// `NDR_record`: the value MIG sends on little-endian hosts (`mig_vers` 0, `if_vers` 0, `reserved1` 0,
/// `mig_encoding` 0, `int_rep` 1, `char_rep` 0, `float_rep` 0, `reserved2` 0).
pub const NDR_RECORD: NdrRecord = NdrRecord([0, 0, 0, 0, 1, 0, 0, 0]);

/// `mach_msg_max_trailer_t` = `mach_msg_mac_trailer_t` (message.h): 68 bytes. The kernel appends (up to) this after
/// `msgh_size` bytes; a receive buffer must leave room for it (`MAX_TRAILER_SIZE`).
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug, Default)]
pub struct MachMsgMaxTrailer {
    /// `msgh_trailer_type`.
    pub msgh_trailer_type: u32,
    /// `msgh_trailer_size`, bytes.
    pub msgh_trailer_size: u32,
    /// `msgh_seqno`.
    pub msgh_seqno: u32,
    /// `msgh_sender` (`security_token_t`, 2 words).
    pub msgh_sender: [u32; 2],
    /// `msgh_audit` (`audit_token_t`, 8 words).
    pub msgh_audit: [u32; 8],
    /// `msgh_context` (`mach_port_context_t`).
    pub msgh_context: u64,
    /// `msgh_ad` (`mach_msg_filter_id`).
    pub msgh_ad: i32,
    /// `msgh_labels` (`msg_labels_t`: one port name).
    pub msgh_labels: u32,
}

/// `MAX_TRAILER_SIZE` (message.h): 68 bytes.
pub const MAX_TRAILER_SIZE: usize = core::mem::size_of::<MachMsgMaxTrailer>();

/// Request of `mach_exception_raise` (id 2405), two codes, with trailer room.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct ExceptionRaiseRequest {
    /// Header.
    pub head: MachMsgHeader,
    /// Body: 2 descriptors.
    pub body: MachMsgBody,
    /// The faulting thread's port.
    pub thread: MachMsgPortDescriptor,
    /// The task's port.
    pub task: MachMsgPortDescriptor,
    /// NDR record.
    pub ndr: NdrRecord,
    /// `exception_type_t`.
    pub exception: i32,
    /// `codeCnt` (≤ 2).
    pub code_count: u32,
    /// `code` (`mach_exception_data_type_t` = `int64_t`).
    pub code: [i64; 2],
    /// Trailer room.
    pub trailer: MachMsgMaxTrailer,
}

/// Request of `mach_exception_raise_state` (id 2406), two codes, full state, with trailer room.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct ExceptionRaiseStateRequest {
    /// Header (not complex).
    pub head: MachMsgHeader,
    /// NDR record.
    pub ndr: NdrRecord,
    /// `exception_type_t`.
    pub exception: i32,
    /// `codeCnt`.
    pub code_count: u32,
    /// `code`.
    pub code: [i64; 2],
    /// `flavor` (e.g. `ARM_THREAD_STATE64`).
    pub flavor: i32,
    /// `old_stateCnt`, 32-bit words.
    pub old_state_count: u32,
    /// `old_state`.
    pub old_state: [u32; THREAD_STATE_MAX],
    /// Trailer room.
    pub trailer: MachMsgMaxTrailer,
}

/// Request of `mach_exception_raise_state_identity` (id 2407), two codes, full state, with trailer room.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct ExceptionRaiseStateIdentityRequest {
    /// Header.
    pub head: MachMsgHeader,
    /// Body: 2 descriptors.
    pub body: MachMsgBody,
    /// The faulting thread's port.
    pub thread: MachMsgPortDescriptor,
    /// The task's port.
    pub task: MachMsgPortDescriptor,
    /// NDR record.
    pub ndr: NdrRecord,
    /// `exception_type_t`.
    pub exception: i32,
    /// `codeCnt`.
    pub code_count: u32,
    /// `code`.
    pub code: [i64; 2],
    /// `flavor`.
    pub flavor: i32,
    /// `old_stateCnt`, words.
    pub old_state_count: u32,
    /// `old_state`.
    pub old_state: [u32; THREAD_STATE_MAX],
    /// Trailer room.
    pub trailer: MachMsgMaxTrailer,
}

/// Request of `mach_exception_raise_identity_protected` (id 2408): a 64-bit thread id and a task identity token
/// port instead of thread and task ports.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct ExceptionRaiseIdentityProtectedRequest {
    /// Header.
    pub head: MachMsgHeader,
    /// Body: 1 descriptor.
    pub body: MachMsgBody,
    /// `task_id_token_t` port.
    pub task_id_token: MachMsgPortDescriptor,
    /// NDR record.
    pub ndr: NdrRecord,
    /// `thread_id` (`uint64_t`; matches `THREAD_IDENTIFIER_INFO.thread_id`).
    pub thread_id: u64,
    /// `exception_type_t`.
    pub exception: i32,
    /// `codeCnt`.
    pub code_count: u32,
    /// `code`.
    pub code: [i64; 2],
    /// Trailer room.
    pub trailer: MachMsgMaxTrailer,
}

/// Request of `mach_exception_raise_state_identity_protected` (id 2410).
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct ExceptionRaiseStateIdentityProtectedRequest {
    /// Header.
    pub head: MachMsgHeader,
    /// Body: 1 descriptor.
    pub body: MachMsgBody,
    /// `task_id_token_t` port.
    pub task_id_token: MachMsgPortDescriptor,
    /// NDR record.
    pub ndr: NdrRecord,
    /// `thread_id`.
    pub thread_id: u64,
    /// `exception_type_t`.
    pub exception: i32,
    /// `codeCnt`.
    pub code_count: u32,
    /// `code`.
    pub code: [i64; 2],
    /// `flavor`.
    pub flavor: i32,
    /// `old_stateCnt`, words.
    pub old_state_count: u32,
    /// `old_state`.
    pub old_state: [u32; THREAD_STATE_MAX],
    /// Trailer room.
    pub trailer: MachMsgMaxTrailer,
}

/// Reply of `mach_exception_raise` / `..._identity_protected`, and of every routine when `RetCode` is not
/// `KERN_SUCCESS` (MIG then sends a bare `mig_reply_error_t`): 36 bytes.
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug)]
pub struct ExceptionRaiseReply {
    /// Header: id = request id + 100.
    pub head: MachMsgHeader,
    /// NDR record.
    pub ndr: NdrRecord,
    /// `RetCode` (`kern_return_t`): `KERN_SUCCESS` = handled, resume; anything else = pass it on.
    pub ret_code: i32,
}

/// Successful reply of the state routines (2406, 2407, 2410): the new thread state.
#[repr(C, packed(4))]
#[derive(Clone, Copy)]
pub struct ExceptionRaiseStateReply {
    /// Header.
    pub head: MachMsgHeader,
    /// NDR record.
    pub ndr: NdrRecord,
    /// `RetCode`.
    pub ret_code: i32,
    /// `flavor`.
    pub flavor: i32,
    /// `new_stateCnt`, words.
    pub new_state_count: u32,
    /// `new_state`.
    pub new_state: [u32; THREAD_STATE_MAX],
}

/// Bytes a receive buffer needs for any `mach_exc` request including the largest trailer.
pub const REQUEST_BUFFER_SIZE: usize = core::mem::size_of::<ExceptionRaiseStateIdentityRequest>();
/// Bytes a reply buffer needs for any reply.
pub const REPLY_BUFFER_SIZE: usize = core::mem::size_of::<ExceptionRaiseStateReply>();

/// Which request arrived (and hence which behaviour the port was registered with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// `EXCEPTION_DEFAULT` → `mach_exception_raise`.
    Default,
    /// `EXCEPTION_STATE` → `mach_exception_raise_state`.
    State,
    /// `EXCEPTION_STATE_IDENTITY` → `mach_exception_raise_state_identity`.
    StateIdentity,
    /// `EXCEPTION_IDENTITY_PROTECTED` → `mach_exception_raise_identity_protected`.
    IdentityProtected,
    /// `EXCEPTION_STATE_IDENTITY_PROTECTED` → `mach_exception_raise_state_identity_protected`.
    StateIdentityProtected,
}

impl Behavior {
    /// The `exception_behavior_t` value (without `MACH_EXCEPTION_CODES`).
    pub fn raw(self) -> u32 {
        match self {
            Behavior::Default => EXCEPTION_DEFAULT,
            Behavior::State => EXCEPTION_STATE,
            Behavior::StateIdentity => EXCEPTION_STATE_IDENTITY,
            Behavior::IdentityProtected => EXCEPTION_IDENTITY_PROTECTED,
            Behavior::StateIdentityProtected => EXCEPTION_STATE_IDENTITY_PROTECTED,
        }
    }
    /// Whether the request carries a thread state.
    pub fn has_state(self) -> bool {
        matches!(self, Behavior::State | Behavior::StateIdentity | Behavior::StateIdentityProtected)
    }
    /// The request id.
    pub fn request_id(self) -> i32 {
        match self {
            Behavior::Default => id::RAISE,
            Behavior::State => id::RAISE_STATE,
            Behavior::StateIdentity => id::RAISE_STATE_IDENTITY,
            Behavior::IdentityProtected => id::RAISE_IDENTITY_PROTECTED,
            Behavior::StateIdentityProtected => id::RAISE_STATE_IDENTITY_PROTECTED,
        }
    }
    fn from_id(msgh_id: i32) -> Option<Behavior> {
        Some(match msgh_id {
            id::RAISE => Behavior::Default,
            id::RAISE_STATE => Behavior::State,
            id::RAISE_STATE_IDENTITY => Behavior::StateIdentity,
            id::RAISE_IDENTITY_PROTECTED => Behavior::IdentityProtected,
            id::RAISE_STATE_IDENTITY_PROTECTED => Behavior::StateIdentityProtected,
            _ => return None,
        })
    }
    /// (descriptor count, offset of `exception`): where the fixed part ends, per routine.
    fn layout(self) -> (u32, usize) {
        match self {
            Behavior::State => (0, 32),
            Behavior::Default | Behavior::StateIdentity => (2, 60),
            Behavior::IdentityProtected | Behavior::StateIdentityProtected => (1, 56),
        }
    }
}

/// Why a buffer is not a valid `mach_exc` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgError {
    /// Shorter than the header, or than the fields its counts announce.
    Truncated,
    /// `msgh_id` is not one of the `mach_exc` request ids (the 32-bit `exc` ids 2401–2403 included: we always
    /// register with `MACH_EXCEPTION_CODES`).
    UnknownId(i32),
    /// `msgh_size` disagrees with the size the counts imply (`declared`, `expected`), or exceeds the buffer.
    BadSize {
        /// `msgh_size`.
        declared: u32,
        /// Size computed from the routine and its counts (0 when the buffer is too short to compute it).
        expected: u32,
    },
    /// `MACH_MSGH_BITS_COMPLEX` is missing on a message with descriptors, or set on one without.
    BadComplexBit,
    /// `msgh_descriptor_count` is not the routine's.
    BadDescriptorCount(u32),
    /// A descriptor is not a port descriptor.
    BadDescriptorType(u8),
    /// `codeCnt` > 2.
    TooManyCodes(u32),
    /// `old_stateCnt` > [`THREAD_STATE_MAX`].
    StateTooLarge(u32),
    /// The reply does not fit in the output buffer.
    ReplyBufferTooSmall,
}

/// A decoded request. Borrowed from the receive buffer; nothing is copied except the scalars.
#[derive(Clone, Copy, Debug)]
pub struct ExceptionRequest<'a> {
    /// Which routine.
    pub behavior: Behavior,
    /// `msgh_bits` as received.
    pub msgh_bits: u32,
    /// `msgh_size`, bytes.
    pub msgh_size: u32,
    /// `msgh_id`.
    pub msgh_id: i32,
    /// `msgh_remote_port`: the reply port to answer on.
    pub reply_port: u32,
    /// `msgh_local_port`: the exception port the request arrived on.
    pub local_port: u32,
    /// Thread port (`EXCEPTION_DEFAULT`, `EXCEPTION_STATE_IDENTITY`); the receiver owns this send right.
    pub thread_port: Option<u32>,
    /// Task port (`EXCEPTION_DEFAULT`, `EXCEPTION_STATE_IDENTITY`).
    pub task_port: Option<u32>,
    /// Task identity token port (protected behaviours).
    pub task_id_token: Option<u32>,
    /// Thread id (protected behaviours; compare with `THREAD_IDENTIFIER_INFO.thread_id`).
    pub thread_id: Option<u64>,
    /// `exception_type_t`.
    pub exception: i32,
    /// `codeCnt` (0..=2).
    pub code_count: u32,
    /// Codes; entries beyond `code_count` are 0.
    pub codes: [i64; 2],
    /// State flavor (state behaviours).
    pub flavor: Option<i32>,
    state: &'a [u8],
}

impl ExceptionRequest<'_> {
    /// Number of 32-bit words of thread state (0 without state).
    pub fn state_count(&self) -> u32 {
        u32::try_from(self.state.len() / 4).unwrap_or(0)
    }
    /// Word `i` of the thread state.
    pub fn state_word(&self, i: usize) -> Option<u32> {
        u32_le(self.state, i.checked_mul(4)?)
    }
    /// Copies the state words into `out`; returns how many were copied (the smaller of both lengths).
    pub fn copy_state(&self, out: &mut [u32]) -> usize {
        let mut n = 0;
        for (i, w) in out.iter_mut().enumerate() {
            match self.state_word(i) {
                Some(v) => {
                    *w = v;
                    n = i.saturating_add(1);
                }
                None => break,
            }
        }
        n
    }
    /// The raw state bytes (`4 * state_count()`).
    pub fn state_bytes(&self) -> &[u8] {
        self.state
    }
}

/// Decodes a received `mach_exc` request. Checks the id, the complex bit, the descriptor count and types, the code
/// and state counts, and that `msgh_size` equals the size these imply and fits in `buf` (the trailer after it is not
/// needed). Allocation-free and panic-free: usable on the exception thread at crash time.
pub fn parse_request(buf: &[u8]) -> Result<ExceptionRequest<'_>, MsgError> {
    let t = MsgError::Truncated;
    let bits = u32_le(buf, 0).ok_or(t)?;
    let declared = u32_le(buf, 4).ok_or(t)?;
    let remote = u32_le(buf, 8).ok_or(t)?;
    let local = u32_le(buf, 12).ok_or(t)?;
    let msgh_id = i32_le(buf, 20).ok_or(t)?;
    let behavior = Behavior::from_id(msgh_id).ok_or(MsgError::UnknownId(msgh_id))?;
    let (ndesc, exc_off) = behavior.layout();
    if (declared as usize) > buf.len() {
        return Err(MsgError::BadSize { declared, expected: 0 });
    }
    let complex = bits & MACH_MSGH_BITS_COMPLEX != 0;
    if complex != (ndesc > 0) {
        return Err(MsgError::BadComplexBit);
    }
    let mut ports = [0u32; 2];
    if ndesc > 0 {
        let count = u32_le(buf, 24).ok_or(t)?;
        if count != ndesc {
            return Err(MsgError::BadDescriptorCount(count));
        }
        for (i, port) in ports.iter_mut().enumerate().take(ndesc as usize) {
            let off = 28usize.checked_add(i.checked_mul(12).ok_or(t)?).ok_or(t)?;
            let ty = slice(buf, off.checked_add(11).ok_or(t)?, 1).and_then(|b| b.first().copied()).ok_or(t)?;
            if ty != MACH_MSG_PORT_DESCRIPTOR {
                return Err(MsgError::BadDescriptorType(ty));
            }
            *port = u32_le(buf, off).ok_or(t)?;
        }
    }
    let thread_id = match behavior {
        Behavior::IdentityProtected | Behavior::StateIdentityProtected => Some(u64_le(buf, 48).ok_or(t)?),
        _ => None,
    };
    let exception = i32_le(buf, exc_off).ok_or(t)?;
    let code_count = u32_le(buf, exc_off.checked_add(4).ok_or(t)?).ok_or(t)?;
    if code_count > EXCEPTION_CODE_MAX {
        return Err(MsgError::TooManyCodes(code_count));
    }
    let code_off = exc_off.checked_add(8).ok_or(t)?;
    let mut codes = [0i64; 2];
    for (i, c) in codes.iter_mut().enumerate().take(code_count as usize) {
        *c = i64_le(buf, code_off.checked_add(i.checked_mul(8).ok_or(t)?).ok_or(t)?).ok_or(t)?;
    }
    let mut end = code_off.checked_add((code_count as usize).checked_mul(8).ok_or(t)?).ok_or(t)?;
    let mut flavor = None;
    let mut state: &[u8] = &[];
    if behavior.has_state() {
        flavor = Some(i32_le(buf, end).ok_or(t)?);
        let count = u32_le(buf, end.checked_add(4).ok_or(t)?).ok_or(t)?;
        if count as usize > THREAD_STATE_MAX {
            return Err(MsgError::StateTooLarge(count));
        }
        let state_off = end.checked_add(8).ok_or(t)?;
        let len = (count as usize).checked_mul(4).ok_or(t)?;
        state = slice(buf, state_off, len).ok_or(t)?;
        end = state_off.checked_add(len).ok_or(t)?;
    }
    if end != declared as usize {
        return Err(MsgError::BadSize { declared, expected: u32::try_from(end).unwrap_or(u32::MAX) });
    }
    let identity = matches!(behavior, Behavior::Default | Behavior::StateIdentity);
    let protected = matches!(behavior, Behavior::IdentityProtected | Behavior::StateIdentityProtected);
    Ok(ExceptionRequest {
        behavior,
        msgh_bits: bits,
        msgh_size: declared,
        msgh_id,
        reply_port: remote,
        local_port: local,
        thread_port: if identity { ports.first().copied() } else { None },
        task_port: if identity { ports.get(1).copied() } else { None },
        task_id_token: if protected { ports.first().copied() } else { None },
        thread_id,
        exception,
        code_count,
        codes,
        flavor,
        state,
    })
}

fn put(out: &mut [u8], off: usize, bytes: &[u8]) -> Result<(), MsgError> {
    let end = off.checked_add(bytes.len()).ok_or(MsgError::ReplyBufferTooSmall)?;
    out.get_mut(off..end).ok_or(MsgError::ReplyBufferTooSmall)?.copy_from_slice(bytes);
    Ok(())
}

/// Encodes the reply to `req` into `out` and returns its size in bytes (the `msgh_size` to send). Header as MIG
/// builds it: `msgh_bits` = the request's remote disposition only, remote port = the request's reply port, local
/// and voucher ports 0, id = request id + 100. With `ret_code != KERN_SUCCESS`, or for a routine without state, it
/// is the 36-byte `mig_reply_error_t` form; a successful state reply echoes the request's flavor and state (the
/// thread resumes unchanged).
pub fn encode_reply(req: &ExceptionRequest<'_>, ret_code: i32, out: &mut [u8]) -> Result<usize, MsgError> {
    let with_state = ret_code == KERN_SUCCESS && req.behavior.has_state();
    let size = if with_state { 44usize.saturating_add(req.state.len()) } else { 36 };
    if out.len() < size {
        return Err(MsgError::ReplyBufferTooSmall);
    }
    let size32 = u32::try_from(size).map_err(|_| MsgError::ReplyBufferTooSmall)?;
    put(out, 0, &(req.msgh_bits & MACH_MSGH_BITS_REMOTE_MASK).to_le_bytes())?;
    put(out, 4, &size32.to_le_bytes())?;
    put(out, 8, &req.reply_port.to_le_bytes())?;
    put(out, 12, &0u32.to_le_bytes())?;
    put(out, 16, &0u32.to_le_bytes())?;
    put(out, 20, &req.msgh_id.saturating_add(id::REPLY_OFFSET).to_le_bytes())?;
    put(out, 24, &NDR_RECORD.0)?;
    put(out, 32, &ret_code.to_le_bytes())?;
    if with_state {
        put(out, 36, &req.flavor.unwrap_or(0).to_le_bytes())?;
        put(out, 40, &req.state_count().to_le_bytes())?;
        put(out, 44, req.state)?;
    }
    Ok(size)
}

/// Reads the `msgh_id` of a reply buffer (tests, diagnostics).
pub fn reply_id(buf: &[u8]) -> Option<i32> {
    i32_le(buf, 20)
}

#[cfg(test)]
mod tests;
