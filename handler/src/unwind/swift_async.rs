//! Swift async frames (Apple arm64): the extended frame record and the async context chain it leads to.
//!
//! **The record.** A Swift `async` function (LLVM's `swiftasync` parameter, the context in `x22` on arm64: Swift
//! `docs/ABI/CallingConventionSummary.rst`) stores three words in its prologue instead of the usual frame record
//! `[fp, lr]`: `[AsyncContext*, fp | 1 << 60, lr]`, with the new `fp` pointing at the middle word (LLVM
//! `AArch64MachineFunctionInfo::HasSwiftAsyncContext`: "bit 60 of the in-memory FP will be 1"; the prologue is
//! `orr x29, x29, #0x1000000000000000; stp x29, x30, [sp, #16]; str x22, [sp, #8]; add x29, sp, #16`, and the
//! epilogue clears the bit again with `and x29, x29, #0xefffffffffffffff`). Bits 63:60 of a saved frame pointer
//! are therefore a tag on Apple platforms (Apple Libc `gen/thread_stack_pcs.c`, `__is_async_frame`): `0b0000` an
//! ordinary record, `0b0001` an extended record, `0b1111` kernel code. Only the in-memory copy carries the tag: the
//! `x29` register itself holds the untagged address, except for the two instructions of the prologue between the
//! `orr` and the `add`.
//!
//! On arm64e the context word is signed (LLVM `AArch64ExpandPseudoInsts.cpp`, `expandStoreSwiftAsyncContext`:
//! `pacdb` with the slot's address blended with the ABI constant `0xc31a`), so it is stripped before use, as the
//! Swift runtime's own backtracer does (`stdlib/public/RuntimeModule/FramePointerUnwinder.swift`).
//!
//! **The chain.** The context word is the running function's own `AsyncContext`, whose first two words are (Swift
//! `include/swift/ABI/Task.h`, `class AsyncContext`):
//!
//! | offset | field | meaning |
//! |---|---|---|
//! | 0 | `Parent` | the caller's context (signed on arm64e: `__ptrauth_swift_async_context_parent`, process-independent data key, discriminator `0xbda2`) |
//! | 8 | `ResumeParent` | the function to call to resume the caller, a "resume partial function" (signed: `__ptrauth_swift_async_context_resume`, function-pointer key, discriminator `0xd707`) |
//!
//! so the chain `ctx → ctx.Parent → …` lists the logical callers (`ResumeParent` of each context is a resume
//! point in its caller), which the OS stack no longer holds once a caller suspended: only the running partial
//! function and the executor that runs it (`swift_job_run`, the dispatch worker) are on the stack. The chain ends
//! with a null `Parent` or a null `ResumeParent`.
//!
//! **What is stored.** Each resume address is stored as `ResumeParent + 1`, exactly as Apple's
//! `thread_stack_async_pcs` does: a resume partial function's address is its entry point, and a symbolicator that
//! subtracts 1 from every caller (as ours, `atos -l` and every older decoder of our format do for return addresses)
//! would otherwise name the function before it. With `+ 1`, "address − 1" is the resume function's entry.
//!
//! **Where the walker checks, and how much it trusts.** Unlike `thread_stack_async_pcs`, which runs on its own
//! thread and also checks the Swift runtime's current-task TSD slot (`__PTK_FRAMEWORK_SWIFT_KEY3`), the crash path
//! walks other threads and cannot read their TSD cheaply; the tag is checked only where it is meaningful (Apple
//! arm64, where no user-space address has bit 60 set: [`super::WalkOptions::swift_async`]) and every pointer is
//! checked before it is used: each context must be non-null, 8-byte aligned (the two pointer reads; the runtime
//! allocates them `alignas(MaximumAlignment)`), readable through the [`MemoryReader`] (never a plain load), not
//! seen before in the same chain (a cycle ends it), and its resume function must lie inside an image of the code
//! map. A chain holds at most [`MAX_CHAIN`] frames. Pure, allocation-free, async-signal-safe when the reader is.

use super::{CodeMap, MemoryReader};
use crate::arch::pac::PacStrip;

/// Bit position of the tag in a saved frame pointer (bits 63:60).
pub const TAG_SHIFT: u32 = 60;
/// The tag value of an extended frame record `[AsyncContext*, fp, lr]` (bits 63:60 = `0b0001`).
pub const TAG_EXTENDED: u64 = 1;
/// The bit the prologue sets (`1 << 60`) and the epilogue clears.
pub const EXTENDED_BIT: u64 = 1 << TAG_SHIFT;
/// Bytes below the saved frame pointer where the context pointer is stored (`fp − 8`).
pub const CONTEXT_SLOT: u64 = 8;
/// Offset of `AsyncContext::ResumeParent` (after the 8-byte `Parent`).
pub const RESUME_OFFSET: u64 = 8;
/// Alignment a context pointer must have, bytes (mask of the low bits that must be clear: 7).
pub const CONTEXT_ALIGN_MASK: u64 = 7;
/// Most frames one async context chain contributes. A longer chain is cut there (the walk goes on with the OS
/// stack). The cycle check keeps the contexts seen in a `[u64; MAX_CHAIN]` on the stack (1 KiB).
pub const MAX_CHAIN: usize = 128;

/// Whether a saved frame pointer carries the extended-record tag (bits 63:60 = `0b0001`).
pub const fn is_tagged(saved_fp: u64) -> bool {
    saved_fp >> TAG_SHIFT == TAG_EXTENDED
}

/// The frame pointer a tagged saved value stands for (bit 60 cleared, as the epilogue does); any other value is
/// returned unchanged.
pub const fn untag(saved_fp: u64) -> u64 {
    if is_tagged(saved_fp) {
        saved_fp & !EXTENDED_BIT
    } else {
        saved_fp
    }
}

/// Why a chain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainEnd {
    /// A null context or a null resume function: the root of the task (its normal end).
    Root,
    /// A context was not 8-byte aligned, could not be read, or its resume function lies in no image: garbage.
    BadPointer,
    /// A context already seen in this chain.
    Cycle,
    /// [`MAX_CHAIN`] frames were produced.
    Limit,
    /// The caller's output refused a frame (its buffer is full).
    Full,
}

fn strip(pac: Option<PacStrip>, v: u64) -> u64 {
    match pac {
        Some(s) => s.strip(v),
        None => v,
    }
}

/// Follows the async context chain of the function whose extended frame record is at `record` (the address its
/// frame pointer holds; the context pointer is read from `record − 8`). Calls `emit` with each logical caller,
/// innermost first, as `ResumeParent + 1` (see the module docs); `emit` returns `false` when it cannot take more.
/// `pac` strips pointer-authentication bits from the context pointers and resume functions (`None`: used as read).
///
/// The caller checks that `record − 8 .. record + 16` lies in the thread's stack and that the word at `record` is
/// tagged; every other read goes through `mem`. Never panics or allocates; at most [`MAX_CHAIN`] frames and
/// `2 × MAX_CHAIN + 1` reads.
pub fn follow<M: MemoryReader + ?Sized, C: CodeMap + ?Sized>(
    mem: &mut M,
    code: &C,
    pac: Option<PacStrip>,
    record: u64,
    mut emit: impl FnMut(u64) -> bool,
) -> ChainEnd {
    let Some(slot) = record.checked_sub(CONTEXT_SLOT) else { return ChainEnd::BadPointer };
    let Some(first) = mem.read_u64(slot) else { return ChainEnd::BadPointer };
    let mut ctx = strip(pac, first);
    let mut seen = [0u64; MAX_CHAIN];
    for i in 0..MAX_CHAIN {
        if ctx == 0 {
            return ChainEnd::Root;
        }
        if ctx & CONTEXT_ALIGN_MASK != 0 {
            return ChainEnd::BadPointer;
        }
        if seen.iter().take(i).any(|s| *s == ctx) {
            return ChainEnd::Cycle;
        }
        if let Some(s) = seen.get_mut(i) {
            *s = ctx;
        }
        let Some(parent) = mem.read_u64(ctx) else { return ChainEnd::BadPointer };
        let Some(resume) = ctx.checked_add(RESUME_OFFSET).and_then(|a| mem.read_u64(a)) else {
            return ChainEnd::BadPointer;
        };
        let resume = strip(pac, resume);
        if resume == 0 {
            return ChainEnd::Root;
        }
        if code.module_for(resume).is_none() {
            return ChainEnd::BadPointer;
        }
        let Some(value) = resume.checked_add(1) else { return ChainEnd::BadPointer };
        if !emit(value) {
            return ChainEnd::Full;
        }
        ctx = strip(pac, parent);
    }
    ChainEnd::Limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_is_bits_63_to_60_equal_to_one() {
        assert!(is_tagged(0x1000_0001_6f62_90b0));
        assert_eq!(untag(0x1000_0001_6f62_90b0), 0x1_6f62_90b0);
        // An ordinary record, kernel code (0b1111), and other top nibbles are not extended records.
        for v in [0x1_6f62_90b0u64, 0xf000_0000_0000_1000, 0x3000_0000_0000_1000, 0x9000_0000_0000_1000] {
            assert!(!is_tagged(v));
            assert_eq!(untag(v), v, "{v:#x} is returned unchanged");
        }
    }
}
