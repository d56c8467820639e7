//! The unwinder on synthetic processes: code bytes, `.eh_frame` written by gimli's writer with a hand-built
//! `.eh_frame_hdr`, and stacks laid out word by word. The live checks against libgcc's unwinder are in
//! `handler/tests/unwind_live.rs`; the crash matrix and the debugger oracle are in `tests/`.

use super::*;
use crate::arch::RegisterValues;
use gimli::write::{
    Address, CallFrameInstruction as I, CommonInformationEntry, EhFrame, EndianVec, FrameDescriptionEntry, FrameTable,
};
use gimli::{Encoding, Format, LittleEndian, Register, UnwindSection};
use std::collections::BTreeMap;

/// Code bytes from address 0 (the arch modules' call-recognition tests).
pub(crate) struct Code(pub Vec<u8>);

impl MemoryReader for Code {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let a = addr as usize;
        match self.0.get(a..a + buf.len()) {
            Some(s) => {
                buf.copy_from_slice(s);
                true
            }
            None => false,
        }
    }
}

#[test]
fn the_walk_needs_well_under_the_crash_stack() {
    // gimli's row storage and the CIE/FDE copy are the walk's large locals; the crash stack is 256 KiB and the
    // README says "about 13 KiB" (8.3 KiB context and a 4 KiB copy on x86-64).
    let ctx = std::mem::size_of::<cfi::Context>();
    let copy = cfi::MAX_CIE + cfi::MAX_FDE;
    // The Swift async chain's cycle check: the contexts of one chain.
    let seen = swift_async::MAX_CHAIN * 8;
    println!("STACK_USE context {ctx} bytes, CIE/FDE copy {copy} bytes, async contexts seen {seen} bytes");
    assert!(ctx + copy + seen < 24 * 1024, "context {ctx} + copy {copy} + seen {seen} bytes");
}

/// Memory as regions of bytes; reads must fall inside one region.
#[derive(Default)]
struct Proc {
    regions: BTreeMap<u64, Vec<u8>>,
    images: Vec<Module>,
    reads: usize,
}

impl MemoryReader for Proc {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        self.reads += 1;
        let Some((base, bytes)) = self.regions.range(..=addr).next_back() else { return false };
        let off = (addr - base) as usize;
        match bytes.get(off..off + buf.len()) {
            Some(s) => {
                buf.copy_from_slice(s);
                true
            }
            None => false,
        }
    }
}

impl CodeMap for Proc {
    fn module_for(&self, addr: u64) -> Option<Module> {
        self.images.iter().copied().find(|m| addr >= m.start && addr < m.end)
    }
}

impl Proc {
    fn put_word(&mut self, addr: u64, v: u64) {
        let (base, bytes) = self.regions.range_mut(..=addr).next_back().expect("region");
        let off = (addr - base) as usize;
        bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
}

const X86_RA: Register = Register(16);
const RSP: Register = Register(7);
const RBP: Register = Register(6);
const RBX: Register = Register(3);

/// Code at 0x40_0000..0x40_5000 where every return address follows a call opcode, the tables after it, and the
/// functions:
/// - `leaf` 0x40_1000: frameless, CFA = rsp + 8;
/// - `mid` 0x40_2000: pushes rbx at +1: CFA = rsp + 16, rbx at CFA - 16;
/// - `top` 0x40_3000: push rbp; mov rbp, rsp: CFA = rbp + 16, rbp at CFA - 16;
/// - `start` 0x40_4000: the return address is undefined (the outermost frame).
fn x86_process() -> Proc {
    let encoding = Encoding { format: Format::Dwarf32, version: 1, address_size: 8 };
    let mut table = FrameTable::default();
    let mut cie = CommonInformationEntry::new(encoding, 1, -8, X86_RA);
    cie.add_instruction(I::Cfa(RSP, 8));
    cie.add_instruction(I::Offset(X86_RA, -8));
    let cie = table.add_cie(cie);
    let leaf = FrameDescriptionEntry::new(Address::Constant(0x40_1000), 0x100);
    table.add_fde(cie, leaf);
    let mut mid = FrameDescriptionEntry::new(Address::Constant(0x40_2000), 0x100);
    mid.add_instruction(1, I::CfaOffset(16));
    mid.add_instruction(1, I::Offset(RBX, -16));
    table.add_fde(cie, mid);
    let mut top = FrameDescriptionEntry::new(Address::Constant(0x40_3000), 0x100);
    top.add_instruction(1, I::CfaOffset(16));
    top.add_instruction(1, I::Offset(RBP, -16));
    top.add_instruction(4, I::CfaRegister(RBP));
    table.add_fde(cie, top);
    let mut start = FrameDescriptionEntry::new(Address::Constant(0x40_4000), 0x100);
    start.add_instruction(0, I::Undefined(X86_RA));
    table.add_fde(cie, start);
    let mut eh = EhFrame(EndianVec::new(LittleEndian));
    table.write_eh_frame(&mut eh).expect("write eh_frame");
    let eh_bytes = eh.0.into_vec();

    // Code: 0xE8 bytes, so every address is 5 bytes after a `call rel32` opcode, except the 8 bytes before each
    // function's entry (`nop`s: an entry address does not follow a call).
    let mut code = vec![0xE8u8; 0x5000];
    for f in [0x1000usize, 0x2000, 0x3000, 0x4000] {
        code[f - 8..f].fill(0x90);
    }
    let eh_addr = 0x40_6000u64;
    let hdr_addr = 0x40_5000u64;
    let hdr = eh_frame_hdr(&eh_bytes, eh_addr, hdr_addr);
    let mut p = Proc::default();
    p.regions.insert(0x40_0000, code);
    p.regions.insert(hdr_addr, hdr);
    p.regions.insert(eh_addr, eh_bytes);
    p.images.push(Module {
        start: 0x40_0000,
        end: 0x40_5000,
        unwind: UnwindSections { eh_frame_hdr: (hdr_addr, 0x1000), ..UnwindSections::default() },
    });
    p
}

/// Builds `.eh_frame_hdr` (LSB 5.0 §10.6.2) for the FDEs of `eh` placed at `eh_addr`, the header at `hdr_addr`.
fn eh_frame_hdr(eh: &[u8], eh_addr: u64, hdr_addr: u64) -> Vec<u8> {
    let section = gimli::EhFrame::new(eh, LittleEndian);
    let bases = gimli::BaseAddresses::default().set_eh_frame(eh_addr);
    let mut entries = section.entries(&bases);
    let mut rows = Vec::new();
    while let Some(e) = entries.next().expect("entry") {
        if let gimli::CieOrFde::Fde(partial) = e {
            let fde = partial.parse(|s, b, o| s.cie_from_offset(b, o)).expect("fde");
            rows.push((fde.initial_address(), eh_addr + fde.offset() as u64));
        }
    }
    rows.sort();
    let mut h = vec![1u8, 0x1b, 0x03, 0x3b];
    let ptr_field = hdr_addr + 4;
    h.extend_from_slice(&((eh_addr as i64 - ptr_field as i64) as i32).to_le_bytes());
    h.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for (loc, fde) in rows {
        h.extend_from_slice(&((loc as i64 - hdr_addr as i64) as i32).to_le_bytes());
        h.extend_from_slice(&((fde as i64 - hdr_addr as i64) as i32).to_le_bytes());
    }
    h
}

fn x86_regs(pc: u64, sp: u64, rbp: u64, rbx: u64) -> RegisterValues {
    let mut r = RegisterValues::new(crate::arch::x86_64::SET, crate::arch::x86_64::LEN);
    r.put(16, pc);
    r.put(7, sp);
    r.put(6, rbp);
    r.put(1, rbx);
    r
}

fn run(p: &mut Proc, regs: &RegisterValues, cap: usize) -> (Vec<u64>, Vec<u8>, Vec<Repeat>, WalkOutcome) {
    run_known(p, regs, cap, None)
}

fn run_known(
    p: &mut Proc,
    regs: &RegisterValues,
    cap: usize,
    known: Option<(u64, u64)>,
) -> (Vec<u64>, Vec<u8>, Vec<Repeat>, WalkOutcome) {
    run_opts(p, regs, cap, known, &WalkOptions { strip: None, swift_async: false, ..WalkOptions::host() })
}

fn run_opts(
    p: &mut Proc,
    regs: &RegisterValues,
    cap: usize,
    known: Option<(u64, u64)>,
    opts: &WalkOptions,
) -> (Vec<u64>, Vec<u8>, Vec<Repeat>, WalkOutcome) {
    let code = Proc { regions: BTreeMap::new(), images: p.images.clone(), reads: 0 };
    let mut rules = Box::new(RuleCache::EMPTY);
    // Every walk twice: with an empty rule cache, then with the rows the first walk kept (as the second thread of
    // a crash parked in the same code): the same frames, found the same way, with no more memory reads.
    let once = |p: &mut Proc, rules: &mut RuleCache| {
        let mut frames = vec![0u64; cap];
        let mut tr = vec![0u8; cap];
        let mut reps = vec![Repeat::default(); 8];
        let before = p.reads;
        let o = walk(
            regs,
            p,
            &code,
            opts,
            known,
            WalkBuffers { frames: &mut frames, trust: &mut tr, repeats: &mut reps, rules },
        );
        (frames[..o.frames].to_vec(), tr[..o.frames].to_vec(), reps[..o.repeats].to_vec(), o, p.reads - before)
    };
    let (f, t, r, o, cold_reads) = once(p, &mut rules);
    let (f2, t2, r2, o2, warm_reads) = once(p, &mut rules);
    assert_eq!((&f, &t, &r, &o), (&f2, &t2, &r2, &o2), "a walk from cached rows differs from the first walk");
    assert!(warm_reads <= cold_reads, "cached rows read more memory ({warm_reads} > {cold_reads})");
    (f, t, r, o)
}

const STACK: u64 = 0x7000_0000;

/// leaf <- mid <- top <- start, with stale function-entry addresses and a stale frame record lying around.
fn x86_chain() -> (Proc, RegisterValues) {
    let mut p = x86_process();
    p.regions.insert(STACK, vec![0u8; 0x1000]);
    let sp = STACK + 0x100;
    // leaf: [sp] = return into mid.
    p.put_word(sp, 0x40_2055);
    // mid: CFA = sp+8+16: saved rbx at sp+8, return into top at sp+16.
    p.put_word(sp + 8, 0xb0b);
    p.put_word(sp + 16, 0x40_3055);
    // top: CFA = rbp + 16 with rbp = sp + 24: saved rbp at sp+24 (a garbage value: start keeps no frame), return
    // into start at sp+32.
    p.put_word(sp + 24, 0x1234);
    p.put_word(sp + 32, 0x40_4055);
    // Beyond the real end: function entries and a call-preceded address that a scan would take for frames.
    p.put_word(sp + 40, 0x40_1000);
    p.put_word(sp + 48, 0x40_2005);
    (p, x86_regs(0x40_1010, sp, sp + 24, 0xaaa))
}

#[test]
fn cfi_walks_frameless_code_to_the_outermost_frame_and_no_further() {
    let (mut p, regs) = x86_chain();
    let (f, t, r, o) = run(&mut p, &regs, 64);
    assert_eq!(f, vec![0x40_1010, 0x40_2055, 0x40_3055, 0x40_4055]);
    assert_eq!(t, vec![trust::CONTEXT, trust::CFI, trust::CFI, trust::CFI]);
    assert!(r.is_empty());
    assert_eq!(o.stop, StopReason::End);
    assert!(!o.truncated);
}

#[test]
fn the_return_address_minus_one_selects_the_callers_fde() {
    // A call as the last instruction of `mid`: its return address is the first byte after mid's FDE range.
    let (mut p, regs) = x86_chain();
    p.put_word(STACK + 0x100, 0x40_2100);
    let (f, _, _, o) = run(&mut p, &regs, 64);
    assert_eq!(f, vec![0x40_1010, 0x40_2100, 0x40_3055, 0x40_4055], "{o:?}");
}

#[test]
fn the_stack_ends_at_its_first_unreadable_page() {
    // The same chain, but the stack mapping ends right after mid's frame: top's frame would lie beyond it (in the
    // next mapping up, another thread's stack): the walk stops instead of following it.
    let (mut p, regs) = x86_chain();
    let bytes = p.regions.remove(&STACK).expect("stack");
    p.regions.insert(STACK, bytes[..0x110].to_vec());
    p.regions.insert(STACK + 0x1000 + 0x1000, vec![0u8; 0x1000]); // the neighbour, after a guard gap
    let (f, _, _, o) = run(&mut p, &regs, 64);
    assert_eq!(f, vec![0x40_1010, 0x40_2055], "{o:?}");
    assert_ne!(o.stop, StopReason::End);
}

#[test]
fn a_recorded_stack_top_bounds_the_walk_even_where_memory_goes_on() {
    // The thread's recorded stack ends right after mid's frame (which holds the return into top); the memory
    // above is readable (another mapping directly adjacent, no guard page): top's frame there must not be used.
    let (mut p, regs) = x86_chain();
    let sp = STACK + 0x100;
    let (f, _, _, o) = run_known(&mut p, &regs, 64, Some((STACK, sp + 24)));
    assert_eq!(f, vec![0x40_1010, 0x40_2055, 0x40_3055], "{o:?}");
    assert_eq!(o.stop, StopReason::OutsideStack);
    let (f, _, _, o) = run_known(&mut p, &regs, 64, Some((STACK, STACK + 0x1000)));
    assert_eq!(f, vec![0x40_1010, 0x40_2055, 0x40_3055, 0x40_4055], "{o:?}");
    // A record that does not hold sp (an overflow's sp in the guard page, a signal stack) is not used.
    let (f, _, _, _) = run_known(&mut p, &regs, 64, Some((STACK + 0x800, STACK + 0x1000)));
    assert_eq!(f.len(), 4);
}

#[test]
fn no_unwind_info_falls_back_to_the_frame_pointer_then_a_scan_of_call_preceded_words_only() {
    let mut p = x86_process();
    p.images[0].unwind = UnwindSections::default(); // a stripped-of-everything image
    p.regions.insert(STACK, vec![0u8; 0x1000]);
    let sp = STACK + 0x100;
    // A frame record at rbp = sp + 0x40 returning into top; its saved rbp ends the chain.
    p.put_word(sp + 0x40, 0);
    p.put_word(sp + 0x48, 0x40_3055);
    let (f, t, _, o) = run(&mut p, &x86_regs(0x40_1010, sp, sp + 0x40, 0), 64);
    assert_eq!(f[..2], [0x40_1010, 0x40_3055], "{o:?}");
    assert_eq!(t[1], trust::FRAME_POINTER);

    // No frame record either: a scan finds the first call-preceded word, skipping a function entry (0x40_1000
    // follows no call: 0x40_0ffb..0x40_1000 is not `E8` + 4 bytes in this code) and values outside every image.
    let mut p = x86_process();
    p.images[0].unwind = UnwindSections::default();
    p.regions.insert(STACK, vec![0u8; 0x1000]);
    p.put_word(sp, 0x7fff_0000_0000);
    p.put_word(sp + 8, 0x40_1000);
    p.put_word(sp + 16, 0x40_2055);
    let (f, t, _, _) = run(&mut p, &x86_regs(0x40_1010, sp, 0, 0), 64);
    assert_eq!(f[..2], [0x40_1010, 0x40_2055]);
    assert_eq!(t[1], trust::SCAN);
    assert!(f.len() <= 1 + WalkOptions::host().max_scans, "scans are capped: {f:x?}");
}

#[test]
fn a_call_through_a_null_pointer_keeps_its_caller() {
    // pc = 0 (outside every image); the call pushed the return address into mid at [sp].
    let (mut p, _) = x86_chain();
    let sp = STACK + 0x100 - 8;
    p.put_word(sp, 0x40_2055);
    p.put_word(sp + 8, 0xb0b); // mid's frame starts above: mid had called through the pointer
    let regs = x86_regs(0, sp, STACK + 0x100 + 24, 0);
    let (f, t, _, o) = run(&mut p, &regs, 64);
    assert_eq!(f[..2], [0, 0x40_2055], "{o:?}");
    assert_eq!(t[1], trust::SCAN);
}

#[test]
fn deep_recursion_is_compressed_and_keeps_its_callers() {
    // `mid` calling itself 3000 times (each frame: saved rbx + return address into mid), then top, start.
    let mut p = x86_process();
    p.regions.insert(STACK, vec![0u8; 0x20000]);
    let sp = STACK + 0x100;
    let n = 3000u64;
    p.put_word(sp, 0x40_2055); // leaf returns into mid
    for k in 0..n {
        let base = sp + 8 + 16 * k;
        p.put_word(base, 0xb0b);
        p.put_word(base + 8, if k + 1 < n { 0x40_2055 } else { 0x40_3055 });
    }
    let top = sp + 8 + 16 * n;
    p.put_word(top, 0x1234);
    p.put_word(top + 8, 0x40_4055);
    let (f, _, r, o) = run(&mut p, &x86_regs(0x40_1010, sp, top, 0), 64);
    assert_eq!(o.stop, StopReason::End, "{o:?}");
    assert_eq!(f, vec![0x40_1010, 0x40_2055, 0x40_3055, 0x40_4055]);
    assert_eq!(r, vec![Repeat { start: 1, len: 1, count: (n - 1) as u32 }]);
    assert_eq!(expand(&f, &r).len() as u64, 3 + n);
}

#[test]
fn caps_and_hostile_input_end_without_panicking() {
    // Frame cap.
    let (mut p, regs) = x86_chain();
    let (f, _, _, o) = run(&mut p, &regs, 2);
    assert_eq!((f.len(), o.stop, o.truncated), (2, StopReason::FrameCap, true));
    let (f, _, _, o) = run(&mut p, &regs, 0);
    assert_eq!((f.len(), o.stop), (0, StopReason::NoRoom));
    // An unknown register set.
    let (f, _, _, o) = run(&mut p, &RegisterValues::EMPTY, 8);
    assert_eq!((f.len(), o.stop), (0, StopReason::NoRegisters));
    // Garbage tables: every byte of the header and of .eh_frame flipped in turn, and random stacks.
    let (clean, regs) = x86_chain();
    let hdr_len = clean.regions[&0x40_5000].len();
    let eh_len = clean.regions[&0x40_6000].len();
    for (region, len) in [(0x40_5000u64, hdr_len), (0x40_6000, eh_len)] {
        for i in 0..len {
            for bits in [0x01u8, 0x80, 0xff] {
                let (mut p, _) = x86_chain();
                p.regions.get_mut(&region).expect("region")[i] ^= bits;
                let (f, _, _, _) = run(&mut p, &regs, 16);
                assert!(!f.is_empty() && f.len() <= 16);
            }
        }
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        let (mut p, _) = x86_chain();
        for k in 0..64u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let v = match k % 4 {
                0 => 0x40_0000 + seed % 0x5000,
                1 => STACK + seed % 0x1000,
                _ => seed,
            };
            p.put_word(STACK + 0x100 + 8 * k, v);
        }
        let regs = x86_regs(0x40_0000 + seed % 0x5000, STACK + 0x100, STACK + (seed >> 8) % 0x1000, seed);
        let (f, _, _, _) = run(&mut p, &regs, 32);
        assert!(!f.is_empty() && f.len() <= 32);
    }
}

/// arm64: `leaf` at 0x40_1000 without CFI (LR holds its caller), `mid` at 0x40_2000 with a frame record
/// (CFA = x29 + 16, x29 at CFA - 16, x30 at CFA - 8), `start` at 0x40_4000 with x30 undefined.
#[test]
fn arm64_leaf_through_lr_then_cfi_with_signed_return_addresses() {
    let encoding = Encoding { format: Format::Dwarf32, version: 1, address_size: 8 };
    let (x29, x30, sp_reg) = (Register(29), Register(30), Register(31));
    let mut table = FrameTable::default();
    let mut cie = CommonInformationEntry::new(encoding, 4, -8, x30);
    cie.add_instruction(I::Cfa(sp_reg, 0));
    let cie = table.add_cie(cie);
    let mut mid = FrameDescriptionEntry::new(Address::Constant(0x40_2000), 0x100);
    mid.add_instruction(4, I::Cfa(x29, 16));
    mid.add_instruction(4, I::Offset(x29, -16));
    mid.add_instruction(4, I::Offset(x30, -8));
    table.add_fde(cie, mid);
    let mut start = FrameDescriptionEntry::new(Address::Constant(0x40_4000), 0x100);
    start.add_instruction(0, I::Undefined(x30));
    table.add_fde(cie, start);
    let mut eh = EhFrame(EndianVec::new(LittleEndian));
    table.write_eh_frame(&mut eh).expect("write");
    let eh_bytes = eh.0.into_vec();
    let mut code = Vec::new();
    while code.len() < 0x5000 {
        code.extend_from_slice(&0x9400_0010u32.to_le_bytes()); // bl
    }
    let mut p = Proc::default();
    p.regions.insert(0x40_0000, code);
    p.regions.insert(0x40_5000, eh_frame_hdr(&eh_bytes, 0x40_6000, 0x40_5000));
    p.regions.insert(0x40_6000, eh_bytes);
    p.regions.insert(STACK, vec![0u8; 0x1000]);
    p.images.push(Module {
        start: 0x40_0000,
        end: 0x40_1100, // leaf's range has no FDE
        unwind: UnwindSections { eh_frame_hdr: (0x40_5000, 0x100), ..UnwindSections::default() },
    });
    p.images.push(Module {
        start: 0x40_2000,
        end: 0x40_5000,
        unwind: UnwindSections { eh_frame_hdr: (0x40_5000, 0x100), ..UnwindSections::default() },
    });
    let sp = STACK + 0x100;
    // mid's frame record at x29 = sp + 0x20: [caller fp, signed return address into start].
    p.put_word(sp + 0x20, 0);
    p.put_word(sp + 0x28, 0x0029_0000_0040_4058);
    let mut regs = RegisterValues::new(crate::arch::aarch64::SET, crate::arch::aarch64::LEN);
    regs.put(32, 0x40_1010); // pc in leaf
    regs.put(31, sp);
    regs.put(29, sp + 0x20);
    regs.put(30, 0x0013_0000_0040_2058); // signed LR into mid
    let mut frames = [0u64; 16];
    let mut tr = [0u8; 16];
    let mut reps = [Repeat::default(); 4];
    let opts = WalkOptions { strip: PacStrip::with_va_bits(48), ..WalkOptions::host() };
    let code = Proc { regions: BTreeMap::new(), images: p.images.clone(), reads: 0 };
    let o = walk(
        &regs,
        &mut p,
        &code,
        &opts,
        None,
        WalkBuffers { frames: &mut frames, trust: &mut tr, repeats: &mut reps, rules: &mut Box::new(RuleCache::EMPTY) },
    );
    assert_eq!(&frames[..o.frames], &[0x40_1010, 0x40_2058, 0x40_4058], "{o:?}");
    assert_eq!(&tr[..o.frames], &[trust::CONTEXT, trust::LINK_REGISTER, trust::CFI]);
    assert_eq!(o.stop, StopReason::End);
}

/// `__unwind_info` (compact_unwind_encoding.h) with one REGULAR second-level page: `(function offset from the
/// image base, encoding)` entries, sorted, and the sentinel's function offset.
fn unwind_info_regular(entries: &[(u32, u32)], sentinel: u32) -> Vec<u8> {
    let mut t = Vec::new();
    let index_off = 28u32;
    let page_off = index_off + 2 * 12;
    for v in [1u32, index_off, 0, index_off, 0, index_off, 2] {
        t.extend_from_slice(&v.to_le_bytes());
    }
    for (func, page) in [(entries[0].0, page_off), (sentinel, 0)] {
        for v in [func, page, 0] {
            t.extend_from_slice(&v.to_le_bytes());
        }
    }
    t.extend_from_slice(&compact::SECOND_LEVEL_REGULAR.to_le_bytes());
    t.extend_from_slice(&8u16.to_le_bytes());
    t.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (func, enc) in entries {
        t.extend_from_slice(&func.to_le_bytes());
        t.extend_from_slice(&enc.to_le_bytes());
    }
    t
}

#[test]
fn compact_unwind_walks_an_apple_image_without_eh_frame_hdr() {
    // The x86 chain again, as an Apple image describes it: no `.eh_frame_hdr`, a `__unwind_info` table whose entries
    // are STACK_IMMD (leaf: 8 bytes, the return address only), DWARF mode (mid and start: their FDE's offset in
    // `__eh_frame`) and RBP_FRAME (top).
    let (mut p, regs) = x86_chain();
    let eh_addr = 0x40_6000u64;
    let eh = p.regions.get(&eh_addr).expect("eh_frame").clone();
    let section = gimli::EhFrame::new(&eh, LittleEndian);
    let bases = gimli::BaseAddresses::default().set_eh_frame(eh_addr);
    let mut fde_offset = BTreeMap::new();
    let mut entries = section.entries(&bases);
    while let Some(e) = entries.next().expect("entry") {
        if let gimli::CieOrFde::Fde(partial) = e {
            let fde = partial.parse(|s, b, o| s.cie_from_offset(b, o)).expect("fde");
            fde_offset.insert(fde.initial_address(), fde.offset() as u32);
        }
    }
    let info = unwind_info_regular(
        &[
            (0x1000, compact::X86_64_MODE_STACK_IMMD | (1 << 16)),
            (0x2000, compact::X86_64_MODE_DWARF | fde_offset[&0x40_2000]),
            (0x3000, compact::X86_64_MODE_RBP_FRAME),
            (0x4000, compact::X86_64_MODE_DWARF | fde_offset[&0x40_4000]),
        ],
        0x4100,
    );
    let info_addr = 0x40_5000u64;
    p.regions.insert(info_addr, info.clone());
    p.images[0].unwind = UnwindSections {
        compact: (info_addr, info.len() as u64),
        eh_frame: (eh_addr, eh.len() as u64),
        ..UnwindSections::default()
    };
    let (f, t, r, o) = run(&mut p, &regs, 64);
    assert_eq!(f, vec![0x40_1010, 0x40_2055, 0x40_3055, 0x40_4055], "{o:?}");
    assert_eq!(t, vec![trust::CONTEXT, trust::CFI, trust::CFI, trust::CFI]);
    assert!(r.is_empty());
    assert_eq!(o.stop, StopReason::End, "start's FDE marks the return address undefined");

    // The lookup itself: regular page entries, ends, and what lies outside.
    let m = p.images[0];
    let e = compact::lookup(&mut p, info_addr, m.start, 0x40_2fff).expect("mid");
    assert_eq!((e.start, e.end), (0x40_2000, 0x40_3000));
    assert_eq!(compact::lookup(&mut p, info_addr, m.start, 0x40_0fff), Err(cfi::Miss::NoEntry));
    assert_eq!(compact::lookup(&mut p, info_addr, m.start, 0x40_4100), Err(cfi::Miss::NoEntry));
    // A DWARF-mode entry whose offset points at the CIE (what lld 14 writes) is refused, not misread.
    let bad = unwind_info_regular(&[(0x1000, compact::X86_64_MODE_DWARF)], 0x1100);
    p.regions.insert(info_addr, bad);
    let mut ctx = cfi::Context::new_in();
    let mut rules = Box::new(RuleCache::EMPTY);
    let spec = &x86_64::SPEC;
    let ur = spec.regs_from(&regs).expect("regs");
    let got = compact::step(spec, &mut p, &mut ctx, &mut rules, &m, &ur, 0x40_1010, true);
    assert_eq!(got, Err(cfi::Miss::Bad));
}

/// Swift async frames ([`swift_async`]) on synthetic arm64 stacks: extended frame records, context chains on a heap,
/// and everything that can be wrong with them.
mod swift_async_chains {
    use super::*;
    use crate::unwind::swift_async::{follow, ChainEnd, MAX_CHAIN};

    const HEAP: u64 = 0x9000_0000;
    const TAG: u64 = 1 << 60;
    /// Code: `leaf` 0x40_1000, the async function `F` 0x40_2000, the executor `E` (`swift_job_run`) 0x40_3000, the
    /// thread start `S` 0x40_4000, resume partial functions `A`, `B`, `T` at 0x40_5000, 0x40_5100, 0x40_5200, and a
    /// second async function `G` at 0x40_6000.
    const LEAF_PC: u64 = 0x40_1010;
    const RET_F: u64 = 0x40_2008;
    const RET_E: u64 = 0x40_3008;
    const RET_S: u64 = 0x40_4008;
    const RET_G: u64 = 0x40_6008;
    const A: u64 = 0x40_5000;
    const B: u64 = 0x40_5100;
    const T: u64 = 0x40_5200;
    const C1: u64 = HEAP + 0x100;
    const C2: u64 = HEAP + 0x200;
    const C3: u64 = HEAP + 0x300;

    fn sp() -> u64 {
        STACK + 0x100
    }
    /// F's extended record `[ctx, fp | tag, lr]`: the frame pointer F set (`fp` of frames 0 and 1).
    fn rec_f() -> u64 {
        sp() + 0x40
    }
    fn fp_e() -> u64 {
        sp() + 0x80
    }
    fn fp_s() -> u64 {
        sp() + 0xc0
    }

    /// Every word of 0x40_0000..0x40_8000 is a `bl`, so every 4-aligned address there follows a call; no unwind
    /// tables (frame records only). A stack, and a heap for the contexts.
    ///
    /// leaf (frame 0, frameless: its caller is in `lr`) ← F (async; its record is tagged and holds `C1`) ← E ← S;
    /// the chain `C1 → C2 → C3 → null` resumes `A`, `B`, `T`.
    fn process() -> (Proc, RegisterValues) {
        let mut code = Vec::new();
        while code.len() < 0x8000 {
            code.extend_from_slice(&0x9400_0010u32.to_le_bytes());
        }
        let mut p = Proc::default();
        p.regions.insert(0x40_0000, code);
        p.regions.insert(STACK, vec![0u8; 0x1000]);
        p.regions.insert(HEAP, vec![0u8; 0x1000]);
        p.images.push(Module { start: 0x40_0000, end: 0x40_8000, unwind: UnwindSections::default() });
        p.put_word(rec_f() - 8, C1);
        p.put_word(rec_f(), fp_e() | TAG);
        p.put_word(rec_f() + 8, RET_E);
        p.put_word(fp_e(), fp_s());
        p.put_word(fp_e() + 8, RET_S);
        // S's record ends the chain: [0, 0].
        chain(&mut p, &[(C1, C2, A), (C2, C3, B), (C3, 0, T)]);
        (p, regs(LEAF_PC, sp(), rec_f(), RET_F))
    }

    /// Writes contexts `(address, parent, resume)`.
    fn chain(p: &mut Proc, contexts: &[(u64, u64, u64)]) {
        for &(at, parent, resume) in contexts {
            p.put_word(at, parent);
            p.put_word(at + 8, resume);
        }
    }

    fn regs(pc: u64, sp: u64, fp: u64, lr: u64) -> RegisterValues {
        let mut r = RegisterValues::new(crate::arch::aarch64::SET, crate::arch::aarch64::LEN);
        r.put(32, pc);
        r.put(31, sp);
        r.put(29, fp);
        r.put(30, lr);
        r
    }

    fn apple() -> WalkOptions {
        WalkOptions { strip: None, swift_async: true, scan_words: 0, ..WalkOptions::host() }
    }

    fn walk_apple(p: &mut Proc, r: &RegisterValues, cap: usize) -> (Vec<u64>, Vec<u8>, WalkOutcome) {
        let (f, t, _, o) = run_opts(p, r, cap, None, &apple());
        (f, t, o)
    }

    const PHYSICAL_TAIL: [u64; 2] = [RET_E, RET_S];
    use trust::{ASYNC, CONTEXT, FRAME_POINTER as FP, LINK_REGISTER as LR};

    #[test]
    fn a_tagged_record_splices_the_context_chain_between_the_async_function_and_its_executor() {
        let (mut p, r) = process();
        let (f, t, o) = walk_apple(&mut p, &r, 64);
        assert_eq!(f, vec![LEAF_PC, RET_F, A + 1, B + 1, T + 1, RET_E, RET_S], "{o:?}");
        assert_eq!(t, vec![CONTEXT, LR, ASYNC, ASYNC, ASYNC, FP, FP]);
        assert!(!o.truncated);
    }

    #[test]
    fn off_apple_a_high_frame_pointer_bit_is_not_a_tag() {
        // Linux arm64: the same words are an ordinary record whose saved fp (bit 60 set) is no stack address.
        #[cfg(not(target_vendor = "apple"))]
        assert!(!WalkOptions::host().swift_async, "only Apple arm64 hosts interpret the tag");
        let (mut p, r) = process();
        let before = p.reads;
        let opts = WalkOptions { swift_async: false, ..apple() };
        let (f, t, _, _) = run_opts(&mut p, &r, 64, None, &opts);
        assert_eq!(f, vec![LEAF_PC, RET_F, RET_E], "no chain, and E's caller is lost behind the tagged value");
        assert!(!t.contains(&ASYNC));
        // Nothing on the heap was read.
        let _ = before;
        let mut heap_reads = CountHeap { inner: &mut p, heap: 0 };
        let code = Proc { regions: BTreeMap::new(), images: heap_reads.inner.images.clone(), reads: 0 };
        let (mut frames, mut tr, mut reps) = ([0u64; 16], [0u8; 16], [Repeat::default(); 4]);
        let mut rules = Box::new(RuleCache::EMPTY);
        let bufs = WalkBuffers { frames: &mut frames, trust: &mut tr, repeats: &mut reps, rules: &mut rules };
        walk(&r, &mut heap_reads, &code, &opts, None, bufs);
        assert_eq!(heap_reads.heap, 0);
    }

    /// Counts reads that touch the heap.
    struct CountHeap<'a> {
        inner: &'a mut Proc,
        heap: usize,
    }

    impl MemoryReader for CountHeap<'_> {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            if (HEAP..HEAP + 0x1000).contains(&addr) {
                self.heap += 1;
            }
            self.inner.read(addr, buf)
        }
    }

    #[test]
    fn compact_unwind_restores_the_tagged_fp_and_the_chain_is_found_the_same_way() {
        // The Apple image carries `__unwind_info` with FRAME entries for F, E and S (the leaf has none: its caller
        // comes from lr): the tagged fp comes back from F's record through the table, not the frame-pointer step.
        let (mut p, r) = process();
        let info = unwind_info_regular(
            &[
                (0x2000, compact::ARM64_MODE_FRAME),
                (0x3000, compact::ARM64_MODE_FRAME),
                (0x4000, compact::ARM64_MODE_FRAME),
            ],
            0x4100,
        );
        p.regions.insert(0x40_9000, info.clone());
        p.images[0].unwind = UnwindSections { compact: (0x40_9000, info.len() as u64), ..UnwindSections::default() };
        let (f, t, o) = walk_apple(&mut p, &r, 64);
        assert_eq!(f, vec![LEAF_PC, RET_F, A + 1, B + 1, T + 1, RET_E, RET_S], "{o:?}");
        assert_eq!(t, vec![CONTEXT, LR, ASYNC, ASYNC, ASYNC, trust::CFI, trust::CFI]);
        assert_eq!(o.stop, StopReason::End, "S's record [0, 0] ends the stack");
    }

    #[test]
    fn every_tagged_record_of_a_stack_gets_its_own_chain() {
        // A nested run loop: E runs F's job, E was called by the async function G, whose record holds C4 (resume X).
        let (mut p, r) = process();
        let fp_g = sp() + 0xa0;
        let x = 0x40_5300;
        p.put_word(fp_e(), fp_g);
        p.put_word(fp_e() + 8, RET_G);
        p.put_word(fp_g - 8, HEAP + 0x400);
        p.put_word(fp_g, fp_s() | TAG);
        p.put_word(fp_g + 8, RET_S);
        chain(&mut p, &[(HEAP + 0x400, 0, x)]);
        let (f, t, o) = walk_apple(&mut p, &r, 64);
        assert_eq!(f, vec![LEAF_PC, RET_F, A + 1, B + 1, T + 1, RET_E, RET_G, x + 1, RET_S], "{o:?}");
        assert_eq!(t, vec![CONTEXT, LR, ASYNC, ASYNC, ASYNC, FP, FP, ASYNC, FP]);
    }

    #[test]
    fn a_tagged_x29_register_stopped_in_the_prologue_is_untagged_and_starts_no_chain() {
        // Stopped right after `orr x29, x29, #1 << 60` in F: x29 is E's fp with the tag, lr returns into E.
        let (mut p, _) = process();
        let r = regs(0x40_2004, rec_f() + 0x10, fp_e() | TAG, RET_E);
        let (f, t, o) = walk_apple(&mut p, &r, 64);
        assert_eq!(f, vec![0x40_2004, RET_E, RET_S], "{o:?}");
        assert_eq!(t, vec![CONTEXT, LR, FP]);
    }

    #[test]
    fn cycles_end_the_chain_before_any_context_repeats_and_the_os_stack_goes_on() {
        // (Repeat records are checked too: a chain going round would otherwise hide in them.)
        let (mut p, r) = process();
        chain(&mut p, &[(C1, C2, A), (C2, C1, B)]);
        let (f, t, reps, _) = run_opts(&mut p, &r, 64, None, &apple());
        assert_eq!(f, [&[LEAF_PC, RET_F, A + 1, B + 1][..], &PHYSICAL_TAIL].concat());
        assert_eq!(t.iter().filter(|t| **t == ASYNC).count(), 2);
        assert!(reps.is_empty(), "{reps:?}");
        // A context that is its own parent.
        chain(&mut p, &[(C1, C1, A)]);
        let (f, _, reps, _) = run_opts(&mut p, &r, 64, None, &apple());
        assert_eq!(f, [&[LEAF_PC, RET_F, A + 1][..], &PHYSICAL_TAIL].concat());
        assert!(reps.is_empty(), "{reps:?}");
    }

    /// A named change to [`process`] and the async frames (resume + 1) that must survive it.
    type Damage = (&'static str, fn(&mut Proc), &'static [u64]);

    /// Points F's context slot at `at`, where a root context resuming `A` is written (unaligned bytes).
    fn misaligned(p: &mut Proc, at: u64) {
        p.put_word(rec_f() - 8, at);
        let heap = p.regions.get_mut(&HEAP).expect("heap");
        let off = (at - HEAP) as usize;
        heap[off..off + 8].copy_from_slice(&0u64.to_le_bytes());
        heap[off + 8..off + 16].copy_from_slice(&A.to_le_bytes());
    }

    #[test]
    fn null_misaligned_unmapped_and_non_code_pointers_end_the_chain_where_they_are() {
        let cases: [Damage; 8] = [
            ("null first context", |p| p.put_word(rec_f() - 8, 0), &[]),
            // Each misaligned context holds a believable one (root, resuming A): only the alignment rule refuses it.
            ("misaligned first context", |p| misaligned(p, HEAP + 0x504), &[]),
            ("odd first context", |p| misaligned(p, HEAP + 0x601), &[]),
            ("unmapped first context", |p| p.put_word(rec_f() - 8, 0xdead_0000), &[]),
            ("misaligned parent", |p| p.put_word(C1, C2 + 2), &[A + 1]),
            ("unmapped parent", |p| p.put_word(C1, 0x5555_0000), &[A + 1]),
            ("resume outside every image", |p| p.put_word(C2 + 8, 0x1234), &[A + 1]),
            ("null resume: the root", |p| p.put_word(C2 + 8, 0), &[A + 1]),
        ];
        for (what, damage, want) in cases {
            let (mut p, r) = process();
            damage(&mut p);
            let (f, t, o) = walk_apple(&mut p, &r, 64);
            assert_eq!(f, [&[LEAF_PC, RET_F][..], want, &PHYSICAL_TAIL].concat(), "{what}: {o:?}");
            assert_eq!(t.iter().filter(|t| **t == ASYNC).count(), want.len(), "{what}");
        }
        // A context at the very end of the heap: its resume word would be past the mapping.
        let (mut p, r) = process();
        p.put_word(C1, HEAP + 0xff8);
        p.put_word(HEAP + 0xff8, 0);
        let (f, _, _) = walk_apple(&mut p, &r, 64);
        assert_eq!(f, [&[LEAF_PC, RET_F, A + 1][..], &PHYSICAL_TAIL].concat());
    }

    #[test]
    fn a_context_slot_below_the_stack_pointer_is_never_read() {
        // F's record sits at sp itself (frame 0's sp): its context slot, sp - 8, is outside the proven stack (though
        // readable, and holding a good context pointer).
        let (mut p, _) = process();
        let at = sp();
        p.put_word(at - 8, C1);
        p.put_word(at, fp_e() | TAG);
        p.put_word(at + 8, RET_E);
        let r = regs(LEAF_PC, at, at, RET_F);
        let (f, t, _) = walk_apple(&mut p, &r, 64);
        assert_eq!(f, [&[LEAF_PC, RET_F][..], &PHYSICAL_TAIL].concat());
        assert!(!t.contains(&ASYNC));
    }

    #[test]
    fn signed_context_pointers_and_resume_functions_are_stripped() {
        // arm64e: the context slot is signed with the DB key (discriminator 0xc31a), `Parent` with DA (0xbda2),
        // `ResumeParent` with IA (0xd707): PAC bits in 48..54 and the top byte (bit 55 clear: user addresses).
        let (mut p, r) = process();
        p.put_word(rec_f() - 8, 0x0042_0000_0000_0000 | C1);
        chain(
            &mut p,
            &[
                (C1, 0x1a11_0000_0000_0000 | C2, 0x2c7f_0000_0000_0000 | A),
                (C2, 0x0033_0000_0000_0000 | C3, 0x0001_0000_0000_0000 | B),
                (C3, 0, 0x4d2e_0000_0000_0000 | T),
            ],
        );
        let signed = WalkOptions { strip: PacStrip::with_va_bits(48), ..apple() };
        let (f, t, _, o) = run_opts(&mut p, &r, 64, None, &signed);
        assert_eq!(f, vec![LEAF_PC, RET_F, A + 1, B + 1, T + 1, RET_E, RET_S], "{o:?}");
        assert_eq!(t.iter().filter(|t| **t == ASYNC).count(), 3);
        // Without a stripper the signed context is no address: no chain, the OS stack is still whole.
        let (f, _, _) = walk_apple(&mut p, &r, 64);
        assert_eq!(f, [&[LEAF_PC, RET_F][..], &PHYSICAL_TAIL].concat());
    }

    #[test]
    fn a_chain_stops_at_its_limit_and_the_frame_cap_stops_the_walk() {
        // 200 distinct contexts, each resuming a different function.
        let (mut p, r) = process();
        let n = 200u64;
        let ctx = |k: u64| HEAP + 16 * k;
        p.put_word(rec_f() - 8, ctx(0));
        for k in 0..n {
            chain(&mut p, &[(ctx(k), if k + 1 < n { ctx(k + 1) } else { 0 }, A + 4 * k)]);
        }
        let (f, t, o) = walk_apple(&mut p, &r, 512);
        let want: Vec<u64> = (0..MAX_CHAIN as u64).map(|k| A + 4 * k + 1).collect();
        assert_eq!(f, [&[LEAF_PC, RET_F][..], &want, &PHYSICAL_TAIL].concat(), "{o:?}");
        assert_eq!(t.iter().filter(|t| **t == ASYNC).count(), MAX_CHAIN);
        // The frame buffer fills inside the chain: the walk ends there, truncated.
        let (mut p, r) = process();
        let (f, _, o) = walk_apple(&mut p, &r, 3);
        assert_eq!(f, vec![LEAF_PC, RET_F, A + 1]);
        assert_eq!((o.stop, o.truncated), (StopReason::FrameCap, true));
    }

    #[test]
    fn a_recursive_async_function_is_compressed_like_any_recursion() {
        // 50 contexts resuming the same function (an async function awaiting itself), then the root.
        let (mut p, r) = process();
        let n = 50u64;
        let ctx = |k: u64| HEAP + 16 * k;
        p.put_word(rec_f() - 8, ctx(0));
        for k in 0..n {
            chain(&mut p, &[(ctx(k), ctx(k + 1), B)]);
        }
        chain(&mut p, &[(ctx(n), 0, T)]);
        let (f, t, reps, o) = run_opts(&mut p, &r, 64, None, &apple());
        assert_eq!(f, [&[LEAF_PC, RET_F, B + 1, T + 1][..], &PHYSICAL_TAIL].concat(), "{o:?}");
        assert_eq!(t[2..4], [ASYNC, ASYNC]);
        assert_eq!(reps, vec![Repeat { start: 2, len: 1, count: (n - 1) as u32 }]);
    }

    #[test]
    fn follow_reports_why_each_chain_ended() {
        let (mut p, _) = process();
        let code = Proc { regions: BTreeMap::new(), images: p.images.clone(), reads: 0 };
        let mut got = Vec::new();
        let run = |p: &mut Proc, got: &mut Vec<u64>| {
            got.clear();
            follow(p, &code, None, rec_f(), |v| {
                got.push(v);
                true
            })
        };
        assert_eq!(run(&mut p, &mut got), ChainEnd::Root);
        assert_eq!(got, vec![A + 1, B + 1, T + 1]);
        chain(&mut p, &[(C3, C2, T)]);
        assert_eq!(run(&mut p, &mut got), ChainEnd::Cycle);
        assert_eq!(got, vec![A + 1, B + 1, T + 1]);
        chain(&mut p, &[(C3, 0x7777_0000, T)]);
        assert_eq!(run(&mut p, &mut got), ChainEnd::BadPointer);
        let mut taken = 0;
        let end = follow(&mut p, &code, None, rec_f(), |_| {
            taken += 1;
            taken < 2
        });
        assert_eq!((end, taken), (ChainEnd::Full, 2));
        // A record at address 0..8 has no context slot.
        assert_eq!(follow(&mut p, &code, None, 4, |_| true), ChainEnd::BadPointer);
        // MAX_CHAIN distinct contexts and more: the limit.
        for k in 0..(MAX_CHAIN as u64 + 1) {
            chain(&mut p, &[(HEAP + 16 * k, HEAP + 16 * (k + 1), A)]);
        }
        p.put_word(rec_f() - 8, HEAP);
        assert_eq!(run(&mut p, &mut got), ChainEnd::Limit);
        assert_eq!(got.len(), MAX_CHAIN);
    }
}

/// The walker's repeat compression ([`Out::push`]) stores exactly what the earlier search over every period
/// stored ([`Out::push_reference`]) for any frame sequence (a small alphabet, so runs and repeats of every period
/// occur, and a buffer that fills up), and loses nothing: the stored frames and repeats expand to the input.
#[test]
fn repeat_compression_agrees_with_the_search_over_every_period() {
    use proptest::prelude::*;
    let config = ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() };
    proptest!(config, |(seq in proptest::collection::vec(0u64..4, 0..200), cap in 8usize..64)| {
        let run = |reference: bool| {
            let (mut frames, mut trust, mut reps) = (vec![0u64; cap], vec![0u8; cap], vec![Repeat::default(); 32]);
            let mut out = Out {
                frames: &mut frames,
                trust: &mut trust,
                n: 0,
                repeats: &mut reps,
                nrep: 0,
                active: None,
                floor: 0,
                lost: false,
            };
            let mut pushed = 0usize;
            for &v in &seq {
                let ok = if reference { out.push_reference(v, 1) } else { out.push(v, 1) };
                if !ok {
                    break;
                }
                pushed += 1;
            }
            let (n, nrep, lost) = out.finish();
            (frames[..n].to_vec(), reps[..nrep].to_vec(), lost, pushed)
        };
        let (f, r, lost, pushed) = run(false);
        prop_assert_eq!(&(f.clone(), r.clone(), lost, pushed), &run(true));
        if !lost {
            prop_assert_eq!(expand(&f, &r), seq[..pushed].to_vec());
        }
    });
}
