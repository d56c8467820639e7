//! Apple compact unwind (`handler::unwind::compact`) on real Mach-O binaries linked by ld64.lld
//! (`fixtures/compact/make.sh`): every table entry `llvm-objdump --macho --unwind-info` lists is found at its first
//! and last byte with the same encoding, and unwind steps on synthetic stacks restore what the functions' prologues
//! (shown by `llvm-objdump -d`, quoted below) saved.

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
    for name in ["cu-arm64", "cu-arm64-nofp", "cu-x86_64"] {
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
