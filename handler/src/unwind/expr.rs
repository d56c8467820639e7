//! A small DWARF expression evaluator for CFI rules (`DW_CFA_def_cfa_expression`, `DW_CFA_expression`,
//! `DW_CFA_val_expression`): the operations compilers and C libraries put in `.eh_frame` (x86-64 PLT entries,
//! glibc's `__restore_rt` signal frame, stack realignment in `main`). Fixed-size stack, bounded steps, memory read
//! only through the [`MemoryReader`]. Operation codes: DWARF 5 §7.7.1, Table 7.9. Never allocates or panics.

use super::regs::UnwindRegs;
use super::MemoryReader;

/// Values the evaluation stack holds at most.
const STACK: usize = 16;
/// Operations evaluated at most (a CFI expression has a handful; this bounds hostile input).
const MAX_OPS: usize = 64;

/// Evaluates `ops` with `initial` pushed first when given (`DW_CFA_expression` pushes the CFA); the value on top
/// of the stack at the end. `None` for an operation outside the supported subset, a stack under- or overflow, an
/// unknown register, an unreadable dereference, or arithmetic overflow where DWARF does not wrap.
pub fn evaluate<M: MemoryReader + ?Sized>(
    ops: &[u8],
    regs: &UnwindRegs,
    mem: &mut M,
    initial: Option<u64>,
) -> Option<u64> {
    let mut st = Stack { v: [0; STACK], n: 0 };
    if let Some(v) = initial {
        st.push(v)?;
    }
    let mut r = Bytes { b: ops, at: 0 };
    for _ in 0..MAX_OPS {
        let Some(op) = r.u8() else { return st.pop() };
        match op {
            // DW_OP_addr
            0x03 => st.push(r.u64()?)?,
            // DW_OP_deref
            0x06 => {
                let a = st.pop()?;
                st.push(mem.read_u64(a)?)?;
            }
            // DW_OP_const1u/1s/2u/2s/4u/4s/8u/8s
            0x08 => st.push(u64::from(r.u8()?))?,
            0x09 => st.push(r.u8()? as i8 as i64 as u64)?,
            0x0a => st.push(u64::from(r.u16()?))?,
            0x0b => st.push(r.u16()? as i16 as i64 as u64)?,
            0x0c => st.push(u64::from(r.u32()?))?,
            0x0d => st.push(r.u32()? as i32 as i64 as u64)?,
            0x0e | 0x0f => st.push(r.u64()?)?,
            // DW_OP_constu / consts
            0x10 => st.push(r.uleb()?)?,
            0x11 => st.push(r.sleb()? as u64)?,
            // DW_OP_dup, drop, over, pick, swap, rot
            0x12 => st.push(st.peek(0)?)?,
            0x13 => {
                st.pop()?;
            }
            0x14 => st.push(st.peek(1)?)?,
            0x15 => {
                let i = r.u8()?;
                st.push(st.peek(usize::from(i))?)?;
            }
            0x16 => {
                let a = st.pop()?;
                let b = st.pop()?;
                st.push(a)?;
                st.push(b)?;
            }
            0x17 => {
                let a = st.pop()?;
                let b = st.pop()?;
                let c = st.pop()?;
                st.push(a)?;
                st.push(c)?;
                st.push(b)?;
            }
            // DW_OP_abs, and, div, minus, mod, mul, neg, not, or, plus, plus_uconst, shl, shr, shra, xor
            0x19 => {
                let a = st.pop()? as i64;
                st.push(a.unsigned_abs())?;
            }
            0x1a => bin(&mut st, |a, b| Some(a & b))?,
            0x1b => bin(&mut st, |a, b| (a as i64).checked_div(b as i64).map(|v| v as u64))?,
            0x1c => bin(&mut st, |a, b| Some(a.wrapping_sub(b)))?,
            0x1d => bin(&mut st, |a, b| a.checked_rem(b))?,
            0x1e => bin(&mut st, |a, b| Some(a.wrapping_mul(b)))?,
            0x1f => {
                let a = st.pop()?;
                st.push(a.wrapping_neg())?;
            }
            0x20 => {
                let a = st.pop()?;
                st.push(!a)?;
            }
            0x21 => bin(&mut st, |a, b| Some(a | b))?,
            0x22 => bin(&mut st, |a, b| Some(a.wrapping_add(b)))?,
            0x23 => {
                let a = st.pop()?;
                st.push(a.wrapping_add(r.uleb()?))?;
            }
            0x24 => bin(&mut st, |a, b| Some(if b >= 64 { 0 } else { a << b }))?,
            0x25 => bin(&mut st, |a, b| Some(if b >= 64 { 0 } else { a >> b }))?,
            0x26 => bin(&mut st, |a, b| Some(((a as i64) >> b.min(63)) as u64))?,
            0x27 => bin(&mut st, |a, b| Some(a ^ b))?,
            // DW_OP_eq, ge, gt, le, lt, ne (signed comparisons)
            0x29 => bin(&mut st, |a, b| Some(u64::from(a == b)))?,
            0x2a => bin(&mut st, |a, b| Some(u64::from(a as i64 >= b as i64)))?,
            0x2b => bin(&mut st, |a, b| Some(u64::from(a as i64 > b as i64)))?,
            0x2c => bin(&mut st, |a, b| Some(u64::from(a as i64 <= b as i64)))?,
            0x2d => bin(&mut st, |a, b| Some(u64::from((a as i64) < b as i64)))?,
            0x2e => bin(&mut st, |a, b| Some(u64::from(a != b)))?,
            // DW_OP_lit0..lit31
            0x30..=0x4f => st.push(u64::from(op.wrapping_sub(0x30)))?,
            // DW_OP_breg0..breg31
            0x70..=0x8f => {
                let off = r.sleb()?;
                let base = regs.get(u16::from(op.wrapping_sub(0x70)))?;
                st.push(base.wrapping_add(off as u64))?;
            }
            // DW_OP_bregx
            0x92 => {
                let reg = u16::try_from(r.uleb()?).ok()?;
                let off = r.sleb()?;
                st.push(regs.get(reg)?.wrapping_add(off as u64))?;
            }
            // DW_OP_nop
            0x96 => {}
            _ => return None,
        }
    }
    None
}

fn bin(st: &mut Stack, f: impl Fn(u64, u64) -> Option<u64>) -> Option<()> {
    let b = st.pop()?;
    let a = st.pop()?;
    st.push(f(a, b)?)
}

struct Stack {
    v: [u64; STACK],
    n: usize,
}

impl Stack {
    fn push(&mut self, x: u64) -> Option<()> {
        *self.v.get_mut(self.n)? = x;
        self.n = self.n.checked_add(1)?;
        Some(())
    }
    fn pop(&mut self) -> Option<u64> {
        self.n = self.n.checked_sub(1)?;
        self.v.get(self.n).copied()
    }
    fn peek(&self, depth: usize) -> Option<u64> {
        let i = self.n.checked_sub(1)?.checked_sub(depth)?;
        self.v.get(i).copied()
    }
}

/// A little-endian byte cursor.
struct Bytes<'a> {
    b: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let end = self.at.checked_add(N)?;
        let s: [u8; N] = self.b.get(self.at..end)?.try_into().ok()?;
        self.at = end;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn uleb(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn sleb(&mut self) -> Option<i64> {
        let mut v = 0i64;
        let mut shift = 0u32;
        loop {
            let b = self.u8()?;
            v |= i64::from(b & 0x7f) << shift;
            shift = shift.saturating_add(7);
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Some(v);
            }
            if shift >= 64 {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Words(BTreeMap<u64, u64>);
    impl MemoryReader for Words {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            match (self.0.get(&addr), buf.len()) {
                (Some(w), 8) => {
                    buf.copy_from_slice(&w.to_le_bytes());
                    true
                }
                _ => false,
            }
        }
    }

    fn regs(pairs: &[(u16, u64)]) -> UnwindRegs {
        let mut r = UnwindRegs::default();
        for (k, v) in pairs {
            r.set(*k, *v);
        }
        r
    }

    #[test]
    fn x86_64_plt_cfa_expression() {
        // .plt: DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl;
        // DW_OP_plus: CFA = rsp + 8, plus 8 more once rip is past the push in its 16-byte PLT entry.
        let ops = [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22];
        let mut m = Words(BTreeMap::new());
        assert_eq!(evaluate(&ops, &regs(&[(7, 0x7000), (16, 0x1004)]), &mut m, None), Some(0x7008));
        assert_eq!(evaluate(&ops, &regs(&[(7, 0x7000), (16, 0x100b)]), &mut m, None), Some(0x7010));
    }

    #[test]
    fn glibc_restore_rt_cfa_and_register_expressions() {
        // CFA = *(rsp + 160) (uc_mcontext.rsp); a register saved at rsp + 120: breg7 120, as DW_CFA_expression.
        let mut m = Words(BTreeMap::from([(0x7000 + 160, 0x9000)]));
        let r = regs(&[(7, 0x7000)]);
        assert_eq!(evaluate(&[0x77, 0xa0, 0x01, 0x06], &r, &mut m, None), Some(0x9000));
        assert_eq!(evaluate(&[0x77, 0xf8, 0x00], &r, &mut m, Some(0x1234)), Some(0x7000 + 120));
    }

    #[test]
    fn hostile_expressions_end_without_panicking() {
        let mut m = Words(BTreeMap::new());
        let r = regs(&[(7, 0x7000)]);
        assert_eq!(evaluate(&[0x06], &r, &mut m, None), None); // deref of nothing
        assert_eq!(evaluate(&[0x30, 0x06], &r, &mut m, None), None); // unreadable
        assert_eq!(evaluate(&[0x71, 0x00], &r, &mut m, None), None); // unknown register
        assert_eq!(evaluate(&[0xe0], &r, &mut m, None), None); // unsupported op
        assert_eq!(evaluate(&[0x10, 0xff, 0xff], &r, &mut m, None), None); // truncated LEB
        assert_eq!(evaluate(&[0x31, 0x30, 0x1b], &r, &mut m, None), None); // divide by zero
        assert_eq!(evaluate(&[0x12; 40], &r, &mut m, Some(1)), None); // stack overflow
        assert_eq!(evaluate(&[0x96; 100], &r, &mut m, Some(1)), None); // step cap
        for seed in 0..500u32 {
            let bytes: Vec<u8> =
                (0..24u32).map(|i| (seed.wrapping_mul(2654435761).rotate_left(i) & 0xff) as u8).collect();
            let _ = evaluate(&bytes, &r, &mut m, Some(5));
        }
    }
}
