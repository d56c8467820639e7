//! The exception-server decode path end to end, on bytes laid out as XNU sends them: a
//! `mach_exception_raise_state_identity_protected` request (id 2410) carrying `ARM_THREAD_STATE64`, decoded, turned
//! into the report's register array with PAC stripped, mapped to a Darwin signal and named; then the reply that
//! passes the exception on. Also the x86_64 `EXCEPTION_STATE_IDENTITY` variant.

use handler::arch::pac::{PacStrip, IOS_ARM64_VA_BITS};
use handler::platform::darwin::crash::exc::{self, signal, Cpu};
use handler::platform::darwin::crash::msg::{
    self, Behavior, MACH_MSGH_BITS_COMPLEX, MACH_MSG_TYPE_MOVE_SEND_ONCE, NDR_RECORD,
};
use handler::platform::darwin::crash::state;
use report_format::regs::{index_of, ARM64, X86_64};

fn le32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn le64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// Request bytes: header, body, port descriptors, NDR, [thread id], exception, codes, flavor, state, then a zeroed
/// 68-byte trailer as the kernel appends it.
fn request(
    id: i32,
    ports: &[u32],
    thread_id: Option<u64>,
    exception: i32,
    codes: [i64; 2],
    flavor: i32,
    state: &[u32],
) -> Vec<u8> {
    let mut v = Vec::new();
    le32(&mut v, MACH_MSGH_BITS_COMPLEX | MACH_MSG_TYPE_MOVE_SEND_ONCE);
    le32(&mut v, 0);
    le32(&mut v, 0x0000_1d03); // reply port
    le32(&mut v, 0x0000_2303); // our exception port
    le32(&mut v, 0);
    v.extend_from_slice(&id.to_le_bytes());
    le32(&mut v, ports.len() as u32);
    for p in ports {
        le32(&mut v, *p);
        le32(&mut v, 0);
        v.extend_from_slice(&[0, 0, 17, 0]); // pad2, disposition MOVE_SEND, type PORT_DESCRIPTOR
    }
    v.extend_from_slice(&NDR_RECORD.0);
    if let Some(t) = thread_id {
        le64(&mut v, t);
    }
    v.extend_from_slice(&exception.to_le_bytes());
    le32(&mut v, 2);
    for c in codes {
        v.extend_from_slice(&c.to_le_bytes());
    }
    v.extend_from_slice(&flavor.to_le_bytes());
    le32(&mut v, state.len() as u32);
    for w in state {
        le32(&mut v, *w);
    }
    let size = v.len() as u32;
    v[4..8].copy_from_slice(&size.to_le_bytes());
    v.resize(v.len() + msg::MAX_TRAILER_SIZE, 0);
    v
}

fn words64(vals: &[u64]) -> Vec<u32> {
    vals.iter().flat_map(|x| [*x as u32, (*x >> 32) as u32]).collect()
}

#[test]
fn arm64e_protected_request_to_registers_signal_and_reply() {
    let mut regs: Vec<u64> = (0..29).map(|i| 0x100 + i).collect();
    regs.extend([0x16f6_290b0, 0x2f7c_8001_007d_a384, 0x16f6_29030, 0x5b09_0001_007d_a4bc]); // fp lr(signed) sp pc(signed)
    let mut st = words64(&regs);
    st.push(0x8000_0000); // cpsr
    st.push(0); // flags: signed pointers
    assert_eq!(st.len(), state::ARM_THREAD_STATE64_COUNT);
    let buf = request(
        msg::id::RAISE_STATE_IDENTITY_PROTECTED,
        &[0x3c03],
        Some(0x4_d2f1),
        exc::EXC_BAD_ACCESS,
        [exc::KERN_INVALID_ADDRESS as i64, 0x10],
        state::ARM_THREAD_STATE64,
        &st,
    );
    assert!(buf.len() <= msg::REQUEST_BUFFER_SIZE);
    let req = msg::parse_request(&buf).unwrap();
    assert_eq!(req.behavior, Behavior::StateIdentityProtected);
    assert_eq!(req.thread_id, Some(0x4_d2f1), "the crashed thread is found by this id, not by a port");
    assert_eq!(req.flavor, Some(state::ARM_THREAD_STATE64));

    let mut words = [0u32; msg::THREAD_STATE_MAX];
    let n = state::words_from_bytes(req.state_bytes(), &mut words);
    assert_eq!(n, 68);
    // The exception state (far/esr) comes from a separate thread_get_state(ARM_EXCEPTION_STATE64).
    let exc_state = [0x10u32, 0, 0x9200_0006, 0];
    let mut out = [None; state::ARM64_REG_COUNT];
    let strip = PacStrip::with_va_bits(IOS_ARM64_VA_BITS).unwrap();
    state::arm64_from_words(&words[..n], Some(&exc_state), Some(strip), &mut out).unwrap();
    let at = |name: &str| out[index_of(ARM64, name).unwrap()].unwrap();
    assert_eq!(at("pc"), 0x1_007d_a4bc);
    assert_eq!(at("lr"), 0x1_007d_a384);
    assert_eq!(at("sp"), 0x1_6f62_9030);
    assert_eq!(at("x28"), 0x100 + 28);
    assert_eq!(at("far"), 0x10);
    assert_eq!(at("esr"), 0x9200_0006);

    let sig = exc::signal_for(Cpu::Arm64, req.exception, req.codes[0]).unwrap();
    assert_eq!(sig, signal::SIGSEGV);
    assert_eq!(exc::exception_name(req.exception), Some("EXC_BAD_ACCESS"));
    assert_eq!(exc::signal_name(sig), Some("SIGSEGV"));
    assert_eq!(exc::bad_access_code_name(req.codes[0]), Some("KERN_INVALID_ADDRESS"));

    let mut reply = [0u8; 64];
    let len = msg::encode_reply(&req, exc::KERN_FAILURE, &mut reply).unwrap();
    assert_eq!(len, 36);
    assert_eq!(msg::reply_id(&reply), Some(2510));
    assert_eq!(u32::from_le_bytes(reply[8..12].try_into().unwrap()), 0x1d03);
}

#[test]
fn x86_64_state_identity_request() {
    let regs: Vec<u64> = (0..21).map(|i| 0x7ff7_0000_0000 + i).collect();
    let st = words64(&regs);
    assert_eq!(st.len(), state::X86_THREAD_STATE64_COUNT);
    let buf = request(
        msg::id::RAISE_STATE_IDENTITY,
        &[0x0a03, 0x0b03],
        None,
        exc::EXC_BAD_ACCESS,
        [exc::EXC_I386_GPFLT, 0],
        state::X86_THREAD_STATE64,
        &st,
    );
    let req = msg::parse_request(&buf).unwrap();
    assert_eq!((req.thread_port, req.task_port), (Some(0x0a03), Some(0x0b03)));
    let mut words = [0u32; 64];
    let n = req.copy_state(&mut words);
    let mut out = [None; state::X86_64_REG_COUNT];
    state::x86_64_from_words(&words[..n], Some(&[0x000d, 0, 0, 0]), &mut out).unwrap();
    assert_eq!(out[index_of(X86_64, "rip").unwrap()], Some(0x7ff7_0000_0010));
    assert_eq!(out[index_of(X86_64, "trapno").unwrap()], Some(13));
    assert_eq!(exc::signal_for(Cpu::X86_64, req.exception, req.codes[0]), Some(signal::SIGSEGV), "GP fault");
    // A successful reply to a state request echoes the state.
    let mut reply = [0u8; msg::REPLY_BUFFER_SIZE];
    let len = msg::encode_reply(&req, exc::KERN_SUCCESS, &mut reply).unwrap();
    assert_eq!(len, 44 + 42 * 4);
    assert_eq!(msg::reply_id(&reply), Some(2507));
}
