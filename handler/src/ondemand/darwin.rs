//! Apple platforms: another thread's stack, captured by suspending it (`thread_suspend`), reading its registers
//! (`thread_get_state`), walking its stack with the fault-proof reader (`vm_read_overwrite`) over the dyld-fed
//! image table (compact unwind, then `__eh_frame`, frame records), and resuming it (`thread_resume`). The thread
//! never runs code of ours and is never waited for. **Type-checked only: nothing here has run on Apple hardware.**
//!
//! While the thread is suspended the caller must not take any lock the thread may hold (the allocator's, dyld's,
//! the Objective-C runtime's): the walk allocates nothing and takes no lock, and the suspension lasts only for the
//! register read and the walk (the frames land in the walker; they are copied out after the resume).
#![allow(unsafe_code)]

use super::current::{claim_walker, current_stack_skipping, Captured, FaultProof};
use super::{state, CaptureError};
use crate::platform::darwin::crash::mach;
use crate::unwind::{self, WalkBuffers};

/// Thread `tid`'s stack into `out` (see `crate::stacks::thread_stack`): its pc, then its return addresses. The
/// calling thread asking for itself gets its current stack (a thread cannot suspend itself and walk).
///
/// # Errors
/// [`CaptureError::NotInstalled`], [`CaptureError::Busy`], [`CaptureError::NoSuchThread`] (no thread of this task
/// has that id), [`CaptureError::Os`] (`task_threads` or `thread_suspend` failed), [`CaptureError::NoRegisters`].
#[inline(never)]
pub fn thread_stack(tid: u64, out: &mut [u64]) -> Result<Captured, CaptureError> {
    if tid == crate::stacks::current_thread_id() {
        return current_stack_skipping(out, 1);
    }
    capture_with(tid, &mut |w| {
        let Some(o) = w.outcome.filter(|o| o.frames > 0) else { return Err(CaptureError::NoRegisters) };
        let (len, cut) = super::expand::expand(w.frames(), w.repeats(), 0, out);
        Ok(Captured { len, truncated: cut || o.truncated })
    })
}

/// Suspends thread `tid`, walks it into a walker, resumes it, then calls `take` with the walker (after the resume:
/// `take` may do anything). The calling thread cannot be captured this way ([`CaptureError::Os`]).
///
/// # Errors
/// As [`thread_stack`]; `take`'s own error.
pub fn capture_with<R>(
    tid: u64,
    take: &mut dyn FnMut(&super::pool::Walker) -> Result<R, CaptureError>,
) -> Result<R, CaptureError> {
    if tid == crate::stacks::current_thread_id() {
        return Err(CaptureError::Os(0));
    }
    let st = state().ok_or(CaptureError::NotInstalled)?;
    let mut claim = claim_walker(st)?;
    let list = mach::ThreadList::take().ok_or(CaptureError::Os(0))?;
    let port = (0..list.len()).map(|i| list.port(i)).find(|&p| mach::identify(p).is_some_and(|(id, _)| id == tid));
    let Some(port) = port else {
        list.release();
        return Err(CaptureError::NoSuchThread);
    };
    if !mach::suspend(port) {
        list.release();
        return Err(CaptureError::Os(0));
    }
    // Suspended: from here to the resume, nothing that allocates or locks.
    let w = claim.walker();
    match mach::registers(port, st.opts.strip, false) {
        Some(regs) => {
            let images = st.images.read();
            w.sync_rules(st.images.generation());
            w.regs = regs;
            let super::pool::Walker { rules, frames, trust, repeats, blocks, pipe, .. } = w;
            let mut mem = FaultProof::new(blocks, *pipe);
            let bufs = WalkBuffers { frames, trust, repeats, rules };
            let o = unwind::walk(&regs, &mut mem, &*images, &st.opts, None, bufs);
            w.outcome = Some(o);
        }
        None => w.outcome = None,
    }
    mach::resume(port);
    list.release();
    take(w)
}
