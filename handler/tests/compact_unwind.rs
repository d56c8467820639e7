//! Apple compact unwind (`handler::unwind::compact`) on real Mach-O binaries linked by ld64.lld
//! (`fixtures/compact/make.sh`): every table entry `llvm-objdump --macho --unwind-info` lists is found at its first
//! and last byte with the same encoding, and unwind steps on synthetic stacks restore what the functions' prologues
//! (shown by `llvm-objdump -d`, quoted below) saved. The `cu19-*` fixtures (ld64.lld 19) add the x86_64 stack-indirect
//! encoding and DWARF-mode entries whose FDE offsets are real, checked against `llvm-objdump --dwarf=frames`.

use handler::platform::darwin::crash::macho::MachO;
use handler::unwind::cfi::{Context, Miss, RuleCache, Step};
use handler::unwind::compact::{self, lookup};
use handler::unwind::regs::UnwindRegs;
use handler::unwind::{aarch64, x86_64, MemoryReader, Module, UnwindSections};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Address of `__mh_execute_header` in every fixture (`llvm-nm`).
const BASE: u64 = 0x1_0000_0000;

#[derive(Default)]
struct Mem(BTreeMap<u64, Vec<u8>>);

impl MemoryReader for Mem {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let Some((base, bytes)) = self.0.range(..=addr).next_back() else { return false };
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

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/compact").join(name)
}

/// The binary mapped at its link address (file offset 0 is `__TEXT`'s start, where `__unwind_info` lives), and its
/// module with the runtime addresses of `__unwind_info` and `__eh_frame` from the crate's own Mach-O parser.
fn load(name: &str) -> (Mem, Module) {
    let bytes = std::fs::read(fixture(name)).unwrap();
    let summary = MachO::parse(&bytes).unwrap().summary().unwrap();
    assert_eq!(summary.text_vmaddr, Some(BASE));
    let compact = summary.unwind_info.expect("__unwind_info");
    let eh_frame = summary.eh_frame.unwrap_or((0, 0));
    let module = Module {
        start: BASE,
        end: BASE + summary.text_size.unwrap(),
        unwind: UnwindSections { compact, eh_frame, ..UnwindSections::default() },
    };
    let mut mem = Mem::default();
    mem.0.insert(BASE, bytes);
    (mem, module)
}

/// `(function offset, encoding)` of every second-level entry, and the sentinel's function offset, from the
/// committed `llvm-objdump --macho --unwind-info` output.
fn oracle(name: &str) -> (Vec<(u64, u32)>, u64) {
    let text = std::fs::read_to_string(fixture(&format!("{name}.unwind.txt"))).unwrap();
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
    let mut entries = Vec::new();
    let mut top = Vec::new();
    let mut second = false;
    for line in text.lines() {
        if line.contains("Second level indices") {
            second = true;
        }
        if line.contains("Second level index[") {
            continue; // the page header: "base function offset=..."
        }
        let Some(rest) = line.split("function offset=").nth(1) else { continue };
        let off = hex(&rest[..10]);
        if second {
            let enc = rest.split("]=").nth(1).expect("encoding");
            entries.push((off, hex(enc) as u32));
        } else {
            top.push(off);
        }
    }
    assert!(entries.len() >= 2, "{name}: {entries:?}");
    (entries, *top.last().unwrap())
}

#[test]
fn lookup_matches_llvm_objdump_on_every_entry() {
    for name in ["cu-arm64", "cu-arm64-nofp", "cu-x86_64", "cu19-x86_64", "cu19-arm64"] {
        let (mut mem, m) = load(name);
        let (entries, sentinel) = oracle(name);
        for (i, (off, enc)) in entries.iter().enumerate() {
            let end = entries.get(i + 1).map_or(sentinel, |e| e.0);
            for pc in [BASE + off, BASE + (off + end) / 2, BASE + end - 1] {
                let got = lookup(&mut mem, m.unwind.compact.0, m.start, pc);
                if *enc == 0 {
                    assert_eq!(got, Err(Miss::NoEntry), "{name} pc {pc:#x}: encoding 0 is no information");
                } else {
                    let e = got.unwrap_or_else(|err| panic!("{name} pc {pc:#x}: {err:?}"));
                    assert_eq!(e.encoding, *enc, "{name} pc {pc:#x}");
                    assert_eq!((e.start, e.end), (BASE + off, BASE + end), "{name} pc {pc:#x}");
                }
            }
        }
        let first = entries[0].0;
        assert_eq!(lookup(&mut mem, m.unwind.compact.0, m.start, BASE + first - 1), Err(Miss::NoEntry), "{name}");
        assert_eq!(lookup(&mut mem, m.unwind.compact.0, m.start, BASE + sentinel), Err(Miss::NoEntry), "{name}");
        assert_eq!(lookup(&mut mem, m.unwind.compact.0, m.start, BASE - 4), Err(Miss::NoEntry), "{name}");
    }
}

fn step(name: &str, arch: &handler::unwind::regs::ArchSpec, regs: &UnwindRegs, pc: u64, stack: (u64, Vec<u8>)) -> Step {
    let (mut mem, m) = load(name);
    mem.0.insert(stack.0, stack.1);
    let mut ctx = Context::new_in();
    let mut cache = Box::new(RuleCache::EMPTY);
    compact::step(arch, &mut mem, &mut ctx, &mut cache, &m, regs, pc, true).unwrap()
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn x86_64_frameless_stack_immd_restores_rbx_and_returns() {
    // _frameless_with_stack (0x1000003e0), encoding 0x02160400: STACK_IMMD, 22 × 8 = 176 bytes, one register
    // (rbx). Prologue: `pushq %rbx; subq $160, %rsp`.
    let arch = &x86_64::SPEC;
    let sp = 0x7ff0_0000_1000u64;
    let mut stack = vec![0u64; 22];
    stack[20] = 0xb0b0_b0b0; // rbx, pushed right below the return address
    stack[21] = BASE + 0x470; // return address into _with_frame
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, sp);
    regs.set(arch.pc, BASE + 0x3f1);
    regs.set(6, 0x1234); // rbp: callee-saved, untouched by this function
    let Step::Caller { regs: next, cfa, .. } = step("cu-x86_64", arch, &regs, BASE + 0x3f1, (sp, words(&stack))) else {
        panic!("no caller")
    };
    assert_eq!(cfa, sp + 176);
    assert_eq!(next.get(arch.sp), Some(sp + 176));
    assert_eq!(next.get(arch.pc), Some(BASE + 0x470));
    assert_eq!(next.get(3), Some(0xb0b0_b0b0), "rbx");
    assert_eq!(next.get(6), Some(0x1234), "rbp carries over");
}

#[test]
fn x86_64_six_register_permutation() {
    // _saves_many (0x100000490), encoding 0x02081800: 64 bytes, six registers, permutation 0: lowest address
    // first rbx, r12, r13, r14, r15, rbp (pushed in the reverse order: rbp first).
    assert_eq!(compact::x86_64_permutation(6, 0), Some([1, 2, 3, 4, 5, 6]));
    let arch = &x86_64::SPEC;
    let sp = 0x7ff0_0000_2000u64;
    let mut stack = vec![0u64; 8];
    for (i, v) in [0x31, 0x32, 0x33, 0x34, 0x35, 0x36].iter().enumerate() {
        stack[1 + i] = *v;
    }
    stack[7] = BASE + 0x520;
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, sp);
    let Step::Caller { regs: next, .. } = step("cu-x86_64", arch, &regs, BASE + 0x4a0, (sp, words(&stack))) else {
        panic!("no caller")
    };
    assert_eq!(next.get(arch.pc), Some(BASE + 0x520));
    assert_eq!(next.get(arch.sp), Some(sp + 64));
    for (dwarf, v) in [(3, 0x31), (12, 0x32), (13, 0x33), (14, 0x34), (15, 0x35), (6, 0x36)] {
        assert_eq!(next.get(dwarf), Some(v), "DWARF register {dwarf}");
    }
}

#[test]
fn x86_64_permutations_decode_like_the_lehmer_code() {
    // Every permutation of every count decodes to distinct registers 1..=6, and distinct codes to distinct orders.
    for count in 1..=6u32 {
        let total: u32 = (0..count).map(|i| 6 - i).product();
        let mut seen = std::collections::HashSet::new();
        for p in 0..total {
            let order = compact::x86_64_permutation(count, p).unwrap();
            let used = &order[..count as usize];
            assert!(used.iter().all(|r| (1..=6).contains(r)));
            let set: std::collections::HashSet<_> = used.iter().collect();
            assert_eq!(set.len(), used.len());
            assert!(seen.insert(used.to_vec()));
        }
    }
    // ld64 encodes `push rbx; push r12` (rbx first, so r12 lowest) as count 2 with r12 = 2 first: digit 1 (of 6),
    // then rbx = 1: digit 0 (of the remaining 5): 1 × 5 + 0 = 5.
    assert_eq!(&compact::x86_64_permutation(2, 5).unwrap()[..2], &[2, 1]);
    assert_eq!(compact::x86_64_permutation(7, 0), None);
}

#[test]
fn arm64_frame_restores_pairs_below_the_frame_record() {
    // _saves_many (0x1000041c4), encoding 0x0400000f: FRAME with x19/x20, x21/x22, x23/x24, x25/x26 saved.
    // Prologue: stp x26, x25, [sp, #-80]!; stp x24, x23, [sp, #16]; stp x22, x21, [sp, #32];
    //           stp x20, x19, [sp, #48]; stp x29, x30, [sp, #64]; add x29, sp, #64
    let arch = &aarch64::SPEC;
    let sp = 0x16f0_0000u64;
    let fp = sp + 64;
    // sp+0: x26 x25 | +16: x24 x23 | +32: x22 x21 | +48: x20 x19 | +64: fp lr
    let stack = words(&[0x26, 0x25, 0x24, 0x23, 0x22, 0x21, 0x20, 0x19, 0xcafe_f000, BASE + 0x4250]);
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, sp);
    regs.set(arch.fp, fp);
    regs.set(arch.pc, BASE + 0x41e0);
    regs.set(arch.ra, 0xdead);
    let Step::Caller { regs: next, cfa, .. } = step("cu-arm64", arch, &regs, BASE + 0x41e0, (sp, stack)) else {
        panic!("no caller")
    };
    assert_eq!(cfa, fp + 16);
    assert_eq!(next.get(arch.sp), Some(fp + 16));
    assert_eq!(next.get(arch.fp), Some(0xcafe_f000));
    assert_eq!(next.get(arch.pc), Some(BASE + 0x4250));
    for r in 19..=26u16 {
        assert_eq!(next.get(r), Some(u64::from(r / 10 * 16 + r % 10)), "x{r}");
    }
}

#[test]
fn arm64_frameless_leaf_returns_through_lr_only_when_it_is_live() {
    // _leaf_frameless (0x100004000), encoding 0x02000000: FRAMELESS, no stack, nothing saved.
    let arch = &aarch64::SPEC;
    let (mut mem, m) = load("cu-arm64");
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, 0x16f0_1000);
    regs.set(arch.ra, BASE + 0x4100);
    let mut ctx = Context::new_in();
    let mut cache = Box::new(RuleCache::EMPTY);
    let got = compact::step(arch, &mut mem, &mut ctx, &mut cache, &m, &regs, BASE + 0x4004, true).unwrap();
    let Step::Caller { regs: next, .. } = got else { panic!("no caller") };
    assert_eq!(next.get(arch.pc), Some(BASE + 0x4100));
    assert_eq!(next.get(arch.sp), Some(0x16f0_1000));
    let stale = compact::step(arch, &mut mem, &mut ctx, &mut cache, &m, &regs, BASE + 0x4004, false);
    assert_eq!(stale, Err(Miss::Unusable), "a caller frame's lr is not known");
}

/// The FDEs `llvm-objdump --dwarf=frames` lists in `<name>.frames.txt`: (offset in `__eh_frame`, pc begin, pc end).
fn fdes(name: &str) -> Vec<(u64, u64, u64)> {
    let text = std::fs::read_to_string(fixture(&format!("{name}.frames.txt"))).unwrap();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    text.lines()
        .filter(|l| l.contains(" FDE "))
        .map(|l| {
            // "00000014 00000024 00000018 FDE cie=00000000 pc=10000400c...100004068"
            let off = hex(l.split(' ').next().unwrap());
            let (begin, end) = l.split("pc=").nth(1).unwrap().split_once("...").unwrap();
            (off, hex(begin), hex(end.trim()))
        })
        .collect()
}

#[test]
fn dwarf_mode_entries_name_the_fde_of_their_own_function() {
    // ld64.lld 19 writes the FDE's offset into each DWARF-mode entry (lld 14 wrote 0: cu-arm64-nofp). Every one must
    // be an FDE llvm-objdump lists, starting at the entry's function and ending within it.
    for (name, dwarf_mode, want) in
        [("cu19-x86_64", compact::X86_64_MODE_DWARF, 2), ("cu19-arm64", compact::ARM64_MODE_DWARF, 3)]
    {
        let (entries, sentinel) = oracle(name);
        let fdes = fdes(name);
        let mut seen = 0;
        for (i, (off, enc)) in entries.iter().enumerate() {
            if enc & compact::MODE_MASK != dwarf_mode {
                continue;
            }
            seen += 1;
            let end = entries.get(i + 1).map_or(sentinel, |e| e.0);
            let fde = u64::from(enc & compact::DWARF_SECTION_OFFSET);
            assert_ne!(fde, 0, "{name}: entry at {off:#x}");
            let (_, begin, fde_end) =
                fdes.iter().find(|f| f.0 == fde).unwrap_or_else(|| panic!("{name}: no FDE at {fde:#x} in {fdes:x?}"));
            assert_eq!(*begin, BASE + off, "{name}: FDE {fde:#x}");
            assert!(*fde_end > *begin && *fde_end <= BASE + end, "{name}: FDE {fde:#x} ends at {fde_end:#x}");
        }
        assert_eq!(seen, want, "{name}: DWARF-mode entries");
    }
}

#[test]
fn x86_64_dwarf_mode_follows_the_cfa_through_rbx() {
    // _dwarf_only (0x1000003c0), encoding 0x04000018: DWARF, FDE at __eh_frame + 0x18. Prologue: `pushq %rbx;
    // movq %rsp, %rbx; andq $-0x40, %rsp; subq $0x40, %rsp`. llvm-objdump --dwarf=frames rows:
    //   0x1000003c1: CFA=reg7+16: reg3=[CFA-16], reg16=[CFA-8]
    //   0x1000003c4: CFA=reg3+16: reg3=[CFA-16], reg16=[CFA-8]
    let arch = &x86_64::SPEC;
    let rbx = 0x7ff0_0000_3f28u64; // rsp right after the push (not 64-byte aligned)
    let frame = words(&[0x5151_5151, BASE + 0x49c]); // saved rbx, return address into _main
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, (rbx & !0x3f) - 0x40);
    regs.set(3, rbx);
    let Step::Caller { regs: next, cfa, .. } = step("cu19-x86_64", arch, &regs, BASE + 0x3cc, (rbx, frame.clone()))
    else {
        panic!("no caller")
    };
    assert_eq!(cfa, rbx + 16);
    assert_eq!(next.get(arch.sp), Some(rbx + 16));
    assert_eq!(next.get(arch.pc), Some(BASE + 0x49c));
    assert_eq!(next.get(3), Some(0x5151_5151), "rbx");
    // One instruction earlier in the same FDE (after the push, before rbx holds the CFA) the CFA is rsp-based.
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, rbx);
    regs.set(3, 0x77);
    let Step::Caller { regs: next, cfa, .. } = step("cu19-x86_64", arch, &regs, BASE + 0x3c1, (rbx, frame)) else {
        panic!("no caller")
    };
    assert_eq!(cfa, rbx + 16);
    assert_eq!(next.get(arch.pc), Some(BASE + 0x49c));
    assert_eq!(next.get(3), Some(0x5151_5151), "rbx");
}

#[test]
fn x86_64_stack_ind_reads_the_size_from_the_sub_instruction() {
    // _big_frameless (0x1000003f0), encoding 0x03044400: STACK_IND, the `subq` immediate at function + 4
    // (`48 81 ec f0 0a 00 00`: 0xaf0), stack adjust 2 (× 8: the push and the return address), one register (rbx),
    // permutation 0. Frame: 0xaf0 + 16 = 0xb00 bytes; rbx right below the return address.
    let arch = &x86_64::SPEC;
    let (mut mem, m) = load("cu19-x86_64");
    let e = lookup(&mut mem, m.unwind.compact.0, m.start, BASE + 0x464).unwrap();
    assert_eq!(e.encoding & compact::MODE_MASK, compact::X86_64_MODE_STACK_IND);
    let sp = 0x7ff0_0001_0000u64;
    let mut stack = vec![0u64; 0xb00 / 8];
    stack[0xaf0 / 8] = 0xb0b0_0001; // rbx
    stack[0xaf8 / 8] = BASE + 0x48b; // return address into _main
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, sp);
    regs.set(6, 0x4242); // rbp: callee-saved, untouched by this function
    let Step::Caller { regs: next, cfa, .. } = step("cu19-x86_64", arch, &regs, BASE + 0x464, (sp, words(&stack)))
    else {
        panic!("no caller")
    };
    assert_eq!(cfa, sp + 0xb00);
    assert_eq!(next.get(arch.sp), Some(sp + 0xb00));
    assert_eq!(next.get(arch.pc), Some(BASE + 0x48b));
    assert_eq!(next.get(3), Some(0xb0b0_0001), "rbx");
    assert_eq!(next.get(6), Some(0x4242), "rbp carries over");
}

#[test]
fn arm64_dwarf_mode_restores_what_the_fde_says() {
    // _dwarf_only (0x100004068), encoding 0x0300003c: DWARF, FDE at __eh_frame + 0x3c. Prologue:
    // `stp x20, x19, [sp, #-0x20]!; stp x29, x30, [sp, #0x10]` (no frame record: x29 is not set). Row from
    // 0x100004070: CFA=reg31+32: reg19=[CFA-24], reg20=[CFA-32], reg29=[CFA-16], reg30=[CFA-8].
    let arch = &aarch64::SPEC;
    let sp = 0x16f0_2000u64;
    let stack = words(&[0x20, 0x19, 0xf00d_0000, BASE + 0x40b0]);
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, sp);
    regs.set(arch.fp, 0xdead_0000); // the caller's fp is still in x29 but the FDE reloads it from the stack
    regs.set(arch.ra, BASE + 0x4000); // clobbered by the `bl` at 0x100004074
    let Step::Caller { regs: next, cfa, .. } = step("cu19-arm64", arch, &regs, BASE + 0x4078, (sp, stack)) else {
        panic!("no caller")
    };
    assert_eq!(cfa, sp + 32);
    assert_eq!(next.get(arch.sp), Some(sp + 32));
    assert_eq!(next.get(arch.pc), Some(BASE + 0x40b0));
    assert_eq!(next.get(arch.fp), Some(0xf00d_0000));
    assert_eq!(next.get(19), Some(0x19));
    assert_eq!(next.get(20), Some(0x20));
}

#[test]
fn arm64_dwarf_mode_large_frameless_frame() {
    // _big_frameless (0x10000400c), encoding 0x03000014: FDE at 0x14. Row from 0x100004018:
    // CFA=reg31+2832: reg19=[CFA-24], reg20=[CFA-32], reg29=[CFA-16], reg30=[CFA-8].
    let arch = &aarch64::SPEC;
    let sp = 0x16f1_0000u64;
    let mut stack = vec![0u64; 2832 / 8];
    let top = stack.len();
    stack[top - 4] = 0x2020; // x20
    stack[top - 3] = 0x1919; // x19
    stack[top - 2] = 0xfeed_0000; // x29
    stack[top - 1] = BASE + 0x40ac; // x30
    let mut regs = UnwindRegs::default();
    regs.set(arch.sp, sp);
    let Step::Caller { regs: next, cfa, .. } = step("cu19-arm64", arch, &regs, BASE + 0x4020, (sp, words(&stack)))
    else {
        panic!("no caller")
    };
    assert_eq!(cfa, sp + 2832);
    assert_eq!(next.get(arch.pc), Some(BASE + 0x40ac));
    assert_eq!(next.get(arch.fp), Some(0xfeed_0000));
    assert_eq!((next.get(19), next.get(20)), (Some(0x1919), Some(0x2020)));
}
