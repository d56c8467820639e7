//! Layout of the hand-declared `mach_exc` structs against the sizes and offsets derived from XNU's headers
//! (message.h under `#pragma pack(4)`, mach_exc.defs argument order), and decoding of hand-built requests.

use core::mem::{offset_of, size_of};

use super::*;
use crate::platform::darwin::crash::exc::{
    EXC_BAD_ACCESS, EXC_BREAKPOINT, EXC_SYSCALL, KERN_FAILURE, KERN_INVALID_ADDRESS,
};

const S: usize = THREAD_STATE_MAX * 4; // 5184 bytes of state

#[test]
fn primitive_sizes_match_message_h() {
    assert_eq!(size_of::<MachMsgHeader>(), 24);
    assert_eq!(offset_of!(MachMsgHeader, msgh_size), 4);
    assert_eq!(offset_of!(MachMsgHeader, msgh_remote_port), 8);
    assert_eq!(offset_of!(MachMsgHeader, msgh_local_port), 12);
    assert_eq!(offset_of!(MachMsgHeader, msgh_voucher_port), 16);
    assert_eq!(offset_of!(MachMsgHeader, msgh_id), 20);
    assert_eq!(size_of::<MachMsgBody>(), 4);
    assert_eq!(size_of::<MachMsgPortDescriptor>(), 12);
    assert_eq!(offset_of!(MachMsgPortDescriptor, disposition), 10);
    assert_eq!(offset_of!(MachMsgPortDescriptor, type_), 11);
    assert_eq!(size_of::<NdrRecord>(), 8);
    assert_eq!(MAX_TRAILER_SIZE, 68);
    assert_eq!(offset_of!(MachMsgMaxTrailer, msgh_audit), 20);
    assert_eq!(offset_of!(MachMsgMaxTrailer, msgh_context), 52);
    assert_eq!(offset_of!(MachMsgMaxTrailer, msgh_labels), 64);
}

#[test]
fn raise_request_layout() {
    type R = ExceptionRaiseRequest;
    assert_eq!(offset_of!(R, body), 24);
    assert_eq!(offset_of!(R, thread), 28);
    assert_eq!(offset_of!(R, task), 40);
    assert_eq!(offset_of!(R, ndr), 52);
    assert_eq!(offset_of!(R, exception), 60);
    assert_eq!(offset_of!(R, code_count), 64);
    assert_eq!(offset_of!(R, code), 68, "packed(4): the i64 codes are only 4-byte aligned");
    assert_eq!(offset_of!(R, trailer), 84, "wire size of mach_exception_raise with 2 codes");
    assert_eq!(size_of::<R>(), 84 + 68);
}

#[test]
fn state_request_layouts() {
    type A = ExceptionRaiseStateRequest;
    assert_eq!(offset_of!(A, ndr), 24);
    assert_eq!(offset_of!(A, exception), 32);
    assert_eq!(offset_of!(A, code), 40);
    assert_eq!(offset_of!(A, flavor), 56);
    assert_eq!(offset_of!(A, old_state_count), 60);
    assert_eq!(offset_of!(A, old_state), 64);
    assert_eq!(size_of::<A>(), 64 + S + 68);

    type B = ExceptionRaiseStateIdentityRequest;
    assert_eq!(offset_of!(B, thread), 28);
    assert_eq!(offset_of!(B, ndr), 52);
    assert_eq!(offset_of!(B, exception), 60);
    assert_eq!(offset_of!(B, code), 68);
    assert_eq!(offset_of!(B, flavor), 84);
    assert_eq!(offset_of!(B, old_state_count), 88);
    assert_eq!(offset_of!(B, old_state), 92);
    assert_eq!(size_of::<B>(), 92 + S + 68);
    assert_eq!(REQUEST_BUFFER_SIZE, size_of::<B>(), "the largest request sizes the receive buffer");

    type C = ExceptionRaiseStateIdentityProtectedRequest;
    assert_eq!(offset_of!(C, task_id_token), 28);
    assert_eq!(offset_of!(C, ndr), 40);
    assert_eq!(offset_of!(C, thread_id), 48);
    assert_eq!(offset_of!(C, exception), 56);
    assert_eq!(offset_of!(C, code_count), 60);
    assert_eq!(offset_of!(C, code), 64);
    assert_eq!(offset_of!(C, flavor), 80);
    assert_eq!(offset_of!(C, old_state_count), 84);
    assert_eq!(offset_of!(C, old_state), 88);
    assert_eq!(size_of::<C>(), 88 + S + 68);

    type D = ExceptionRaiseIdentityProtectedRequest;
    assert_eq!(offset_of!(D, thread_id), 48);
    assert_eq!(offset_of!(D, code), 64);
    assert_eq!(offset_of!(D, trailer), 80);
}

#[test]
fn reply_layouts() {
    assert_eq!(size_of::<ExceptionRaiseReply>(), 36);
    assert_eq!(offset_of!(ExceptionRaiseReply, ret_code), 32);
    type R = ExceptionRaiseStateReply;
    assert_eq!(offset_of!(R, flavor), 36);
    assert_eq!(offset_of!(R, new_state_count), 40);
    assert_eq!(offset_of!(R, new_state), 44);
    assert_eq!(REPLY_BUFFER_SIZE, 44 + S);
}

/// Builds a request the way the kernel lays it out (test-only; allocates).
struct Req {
    id: i32,
    bits: u32,
    ports: Vec<u32>,
    thread_id: Option<u64>,
    exception: i32,
    codes: Vec<i64>,
    state: Option<(i32, Vec<u32>)>,
}

impl Req {
    fn bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&self.bits.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes()); // size, patched below
        v.extend_from_slice(&0x1703u32.to_le_bytes()); // reply port
        v.extend_from_slice(&0x2b03u32.to_le_bytes()); // exception port
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&self.id.to_le_bytes());
        if !self.ports.is_empty() {
            v.extend_from_slice(&(self.ports.len() as u32).to_le_bytes());
            for p in &self.ports {
                v.extend_from_slice(&p.to_le_bytes());
                v.extend_from_slice(&[0, 0, 0, 0, 0, 0, 17, 0]); // pad1, pad2, MOVE_SEND, PORT_DESCRIPTOR
            }
        }
        v.extend_from_slice(&NDR_RECORD.0);
        if let Some(t) = self.thread_id {
            v.extend_from_slice(&t.to_le_bytes());
        }
        v.extend_from_slice(&self.exception.to_le_bytes());
        v.extend_from_slice(&(self.codes.len() as u32).to_le_bytes());
        for c in &self.codes {
            v.extend_from_slice(&c.to_le_bytes());
        }
        if let Some((flavor, words)) = &self.state {
            v.extend_from_slice(&flavor.to_le_bytes());
            v.extend_from_slice(&(words.len() as u32).to_le_bytes());
            for w in words {
                v.extend_from_slice(&w.to_le_bytes());
            }
        }
        let size = v.len() as u32;
        v[4..8].copy_from_slice(&size.to_le_bytes());
        v.extend_from_slice(&[0u8; 68]); // trailer
        v
    }
}

const COMPLEX_SEND_ONCE: u32 = MACH_MSGH_BITS_COMPLEX | MACH_MSG_TYPE_MOVE_SEND_ONCE;

fn state68() -> Vec<u32> {
    (0..68).map(|i| 0x1000 + i).collect()
}

#[test]
fn decodes_exception_raise() {
    let b = Req {
        id: 2405,
        bits: COMPLEX_SEND_ONCE,
        ports: vec![0x0a03, 0x0b03],
        thread_id: None,
        exception: EXC_BAD_ACCESS,
        codes: vec![KERN_INVALID_ADDRESS as i64, 0x0000_0001_314e_b4b8],
        state: None,
    }
    .bytes();
    assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 84);
    let r = parse_request(&b).unwrap();
    assert_eq!(r.behavior, Behavior::Default);
    assert_eq!((r.reply_port, r.local_port), (0x1703, 0x2b03));
    assert_eq!((r.thread_port, r.task_port, r.task_id_token, r.thread_id), (Some(0x0a03), Some(0x0b03), None, None));
    assert_eq!(r.exception, EXC_BAD_ACCESS);
    assert_eq!(r.code_count, 2);
    assert_eq!(r.codes, [1, 0x1_314e_b4b8]);
    assert_eq!(r.flavor, None);
    assert_eq!(r.state_count(), 0);
    // Works without the trailer too (exactly msgh_size bytes).
    assert!(parse_request(&b[..84]).is_ok());
    assert_eq!(parse_request(&b[..83]).unwrap_err(), MsgError::BadSize { declared: 84, expected: 0 });
}

#[test]
fn decodes_state_identity_protected() {
    let state = state68();
    let b = Req {
        id: 2410,
        bits: COMPLEX_SEND_ONCE,
        ports: vec![0x3303],
        thread_id: Some(0x0000_0000_0012_d687),
        exception: EXC_BREAKPOINT,
        codes: vec![1, 0x1_ad98_ab74],
        state: Some((6, state.clone())),
    }
    .bytes();
    let r = parse_request(&b).unwrap();
    assert_eq!(r.behavior, Behavior::StateIdentityProtected);
    assert_eq!(r.msgh_size as usize, 88 + 68 * 4);
    assert_eq!(r.thread_id, Some(0x12_d687));
    assert_eq!(r.task_id_token, Some(0x3303));
    assert_eq!((r.thread_port, r.task_port), (None, None));
    assert_eq!(r.codes, [1, 0x1_ad98_ab74]);
    assert_eq!(r.flavor, Some(6));
    assert_eq!(r.state_count(), 68);
    assert_eq!(r.state_word(67), Some(0x1000 + 67));
    assert_eq!(r.state_word(68), None);
    let mut out = [0u32; 80];
    assert_eq!(r.copy_state(&mut out), 68);
    assert_eq!(&out[..68], &state[..]);
    let mut small = [0u32; 4];
    assert_eq!(r.copy_state(&mut small), 4);
    assert_eq!(small, [0x1000, 0x1001, 0x1002, 0x1003]);
}

#[test]
fn decodes_state_and_state_identity_and_identity_protected() {
    let s = Req {
        id: 2406,
        bits: MACH_MSG_TYPE_MOVE_SEND_ONCE,
        ports: vec![],
        thread_id: None,
        exception: EXC_BAD_ACCESS,
        codes: vec![2, 0x10],
        state: Some((4, (0..42).collect())),
    }
    .bytes();
    let r = parse_request(&s).unwrap();
    assert_eq!((r.behavior, r.flavor, r.state_count(), r.msgh_size), (Behavior::State, Some(4), 42, 64 + 168));
    assert_eq!((r.thread_port, r.task_port, r.thread_id), (None, None, None));

    let si = Req {
        id: 2407,
        bits: COMPLEX_SEND_ONCE,
        ports: vec![7, 8],
        thread_id: None,
        exception: EXC_BAD_ACCESS,
        codes: vec![2, 0x10],
        state: Some((6, state68())),
    }
    .bytes();
    let r = parse_request(&si).unwrap();
    assert_eq!((r.behavior, r.thread_port, r.task_port, r.msgh_size), (Behavior::StateIdentity, Some(7), Some(8), 364));

    let ip = Req {
        id: 2408,
        bits: COMPLEX_SEND_ONCE,
        ports: vec![9],
        thread_id: Some(77),
        exception: EXC_BAD_ACCESS,
        codes: vec![1, 0],
        state: None,
    }
    .bytes();
    let r = parse_request(&ip).unwrap();
    assert_eq!(
        (r.behavior, r.thread_id, r.task_id_token, r.msgh_size),
        (Behavior::IdentityProtected, Some(77), Some(9), 80)
    );
}

/// `code` is `array[*:2]`: with one code, flavor/state move up by 8 bytes.
#[test]
fn fewer_codes_shift_the_following_fields() {
    let b = Req {
        id: 2407,
        bits: COMPLEX_SEND_ONCE,
        ports: vec![7, 8],
        thread_id: None,
        exception: EXC_SYSCALL,
        codes: vec![-26],
        state: Some((6, state68())),
    }
    .bytes();
    let r = parse_request(&b).unwrap();
    assert_eq!((r.code_count, r.codes), (1, [-26, 0]));
    assert_eq!(r.flavor, Some(6));
    assert_eq!(r.state_word(0), Some(0x1000));
    assert_eq!(r.msgh_size, 364 - 8);
}

#[test]
fn rejects_malformed_requests() {
    let good = || Req {
        id: 2407,
        bits: COMPLEX_SEND_ONCE,
        ports: vec![7, 8],
        thread_id: None,
        exception: EXC_BAD_ACCESS,
        codes: vec![1, 2],
        state: Some((6, state68())),
    };
    // unknown ids, including the 32-bit exc ones and the backtrace routine
    for bad_id in [2401, 2403, 2409, 2411, 2505, 0] {
        let mut r = good();
        r.id = bad_id;
        assert_eq!(parse_request(&r.bytes()).unwrap_err(), MsgError::UnknownId(bad_id));
    }
    // complex bit missing
    let mut r = good();
    r.bits = MACH_MSG_TYPE_MOVE_SEND_ONCE;
    assert_eq!(parse_request(&r.bytes()).unwrap_err(), MsgError::BadComplexBit);
    // descriptor count wrong
    let mut r = good();
    r.ports = vec![7];
    assert_eq!(parse_request(&r.bytes()).unwrap_err(), MsgError::BadDescriptorCount(1));
    // descriptor type wrong (an OOL descriptor, type 1)
    let mut b = good().bytes();
    b[28 + 11] = 1;
    assert_eq!(parse_request(&b).unwrap_err(), MsgError::BadDescriptorType(1));
    // too many codes
    let mut r = good();
    r.codes = vec![1, 2, 3];
    assert_eq!(parse_request(&r.bytes()).unwrap_err(), MsgError::TooManyCodes(3));
    // state count beyond THREAD_STATE_MAX
    let mut b = good().bytes();
    b[88..92].copy_from_slice(&(THREAD_STATE_MAX as u32 + 1).to_le_bytes());
    assert_eq!(parse_request(&b).unwrap_err(), MsgError::StateTooLarge(1297));
    // state count that disagrees with msgh_size
    let mut b = good().bytes();
    b[88..92].copy_from_slice(&67u32.to_le_bytes());
    assert_eq!(parse_request(&b).unwrap_err(), MsgError::BadSize { declared: 364, expected: 360 });
    // msgh_size larger than the buffer
    let mut b = good().bytes();
    b[4..8].copy_from_slice(&10_000u32.to_le_bytes());
    assert_eq!(parse_request(&b).unwrap_err(), MsgError::BadSize { declared: 10_000, expected: 0 });
    // every truncation fails without panicking
    let b = good().bytes();
    for n in 0..364 {
        assert!(parse_request(&b[..n]).is_err(), "{n}");
    }
    assert!(parse_request(&b[..364]).is_ok());
}

#[test]
fn replies() {
    let b = Req {
        id: 2407,
        bits: COMPLEX_SEND_ONCE,
        ports: vec![7, 8],
        thread_id: None,
        exception: EXC_BAD_ACCESS,
        codes: vec![1, 2],
        state: Some((6, state68())),
    }
    .bytes();
    let r = parse_request(&b).unwrap();
    let mut out = [0u8; REPLY_BUFFER_SIZE];
    // Passing the exception on: the short error form, whatever the routine.
    let n = encode_reply(&r, KERN_FAILURE, &mut out).unwrap();
    assert_eq!(n, 36);
    assert_eq!(u32::from_le_bytes(out[0..4].try_into().unwrap()), MACH_MSG_TYPE_MOVE_SEND_ONCE, "no complex bit");
    assert_eq!(u32::from_le_bytes(out[4..8].try_into().unwrap()), 36);
    assert_eq!(u32::from_le_bytes(out[8..12].try_into().unwrap()), 0x1703, "sent to the reply port");
    assert_eq!(u32::from_le_bytes(out[12..16].try_into().unwrap()), 0);
    assert_eq!(i32::from_le_bytes(out[20..24].try_into().unwrap()), 2507);
    assert_eq!(&out[24..32], &NDR_RECORD.0);
    assert_eq!(i32::from_le_bytes(out[32..36].try_into().unwrap()), KERN_FAILURE);
    // Handled: the state echoed back.
    let n = encode_reply(&r, 0, &mut out).unwrap();
    assert_eq!(n, 44 + 68 * 4);
    assert_eq!(i32::from_le_bytes(out[36..40].try_into().unwrap()), 6);
    assert_eq!(u32::from_le_bytes(out[40..44].try_into().unwrap()), 68);
    assert_eq!(u32::from_le_bytes(out[44..48].try_into().unwrap()), 0x1000);
    assert_eq!(&out[44..n], r.state_bytes());
    let mut tiny = [0u8; 35];
    assert_eq!(encode_reply(&r, KERN_FAILURE, &mut tiny).unwrap_err(), MsgError::ReplyBufferTooSmall);
    let mut mid = [0u8; 100];
    assert_eq!(encode_reply(&r, 0, &mut mid).unwrap_err(), MsgError::ReplyBufferTooSmall);
    assert_eq!(Behavior::StateIdentityProtected.request_id() + id::REPLY_OFFSET, 2510);
    assert_eq!(Behavior::Default.raw(), 1);
    assert_eq!(Behavior::StateIdentityProtected.raw(), 5);
}
