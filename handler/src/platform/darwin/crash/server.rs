//! The Mach exception server: a primary and a secondary thread receive `mach_exc` requests on our exception port.
//!
//! The primary handles a crash. The secondary starts suspended; the primary resumes it when a request arrives, so if
//! the primary itself faults while capturing, the kernel raises that fault on the same port and the secondary is
//! there to receive it and write a minimal report from the record the primary saved. Both threads are excluded from
//! suspension. The secondary puts the saved exception ports back before it writes anything, so a fault of its own
//! goes to the previous handler and the signal instead of waiting on a port nobody serves.
//!
//! A request is first checked to be about this task ([`crate::platform::darwin::crash::policy::exception_is_ours`]):
//! a child that inherited our ports across `fork`/`exec` gets `KERN_FAILURE` and nothing else. After the report is
//! written, the exception ports saved at install are put back, the fault signals are unblocked (a blocked one would
//! make the thread re-fault forever) and the request is answered `KERN_FAILURE`. That reply does not reach
//! ReportCrash directly: the kernel's exception delivery (`exception_triage`) tries the next level's port, and
//! when every level declined it falls back to its exception-to-signal handler (`ux_exception`), which posts the
//! signal. Our signal handler sees the crash was reported and passes the signal through; the faulting instruction
//! runs again and faults again, now delivered to the previous task-level handler we restored (and, on macOS, the
//! host-level one, where ReportCrash listens).
//!
//! Crash path: fixed buffers handed over at install, no allocation, no locks, no panics, bounded waits.
//! **Type-checked only.**

use super::mach::{self, FLAVORS};
use super::{capture, state_none, wait_done, write_minimal, Crashed, State, GATE};
use crate::crash::capture::CrashRecord;
use crate::crash::first_chance;
use crate::crash::reentrancy::Entry;
use crate::platform::darwin::crash::exc::{signal_for, Cpu, EXC_BAD_ACCESS, KERN_FAILURE};
use crate::platform::darwin::crash::msg::{encode_reply, parse_request, ExceptionRequest};
use crate::platform::darwin::crash::policy::{
    exception_is_ours, mach_server_action, MachAction, RequestIdentity, SIGNALS_TO_UNBLOCK,
};
use core::sync::atomic::Ordering;
use mach2::kern_return::KERN_SUCCESS;
use mach2::mach_port::mach_port_deallocate;
use mach2::message::{
    mach_msg, mach_msg_destroy, mach_msg_header_t, MACH_MSG_TIMEOUT_NONE, MACH_RCV_INVALID_NAME, MACH_RCV_MSG,
    MACH_RCV_PORT_DIED, MACH_SEND_MSG, MACH_SEND_TIMEOUT,
};
use mach2::port::MACH_PORT_NULL;

/// Which exception thread this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Handles crashes.
    Primary,
    /// Suspended until the primary starts handling; then catches a fault of the primary.
    Secondary,
}

/// Milliseconds a thread that is not the owner waits for the owner to finish before it answers.
const OTHER_WAIT_MS: u32 = 10_000;
/// Milliseconds the reply send may block (the kernel's reply right is send-once; this never waits in practice).
const REPLY_TIMEOUT_MS: u32 = 1_000;

fn cpu() -> Cpu {
    if cfg!(target_arch = "aarch64") {
        Cpu::Arm64
    } else {
        Cpu::X86_64
    }
}

/// This thread's port (`pthread_mach_thread_np`: no new right).
pub fn own_port() -> u32 {
    // SAFETY: pthread_self() is always valid for the calling thread.
    unsafe { libc::pthread_mach_thread_np(libc::pthread_self()) }
}

/// Views a word buffer as bytes (Mach messages need 4-byte alignment, which `u32` storage guarantees).
fn as_bytes(words: &mut [u32]) -> &mut [u8] {
    let len = words.len().saturating_mul(4);
    // SAFETY: a `[u32]` of n elements is valid for reads and writes of 4n bytes, and u8 has no alignment or
    // validity requirements; the returned slice borrows `words` mutably, so there is no aliasing.
    unsafe { core::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

/// The exception thread's loop; returns when our exception port is destroyed (uninstall).
pub fn run(st: &'static State, role: Role, rx: &'static mut [u32], tx: &'static mut [u32]) {
    let me = own_port();
    match role {
        Role::Primary => {
            st.primary_tid.store(mach::identify(me).map_or(0, |(t, _)| t), Ordering::Release);
            st.primary_port.store(me, Ordering::Release);
        }
        Role::Secondary => {
            st.secondary_port.store(me, Ordering::Release);
            // Parked until the primary receives an exception (see the module docs).
            mach::suspend(me);
        }
    }
    let mut secondary_resumed = false;
    let rx = as_bytes(rx);
    let tx = as_bytes(tx);
    loop {
        // SAFETY: `rx` is a writable, 4-byte-aligned buffer of `rx.len()` bytes for the received message.
        let kr = unsafe {
            mach_msg(
                rx.as_mut_ptr().cast::<mach_msg_header_t>(),
                MACH_RCV_MSG,
                0,
                rx.len() as u32,
                st.exc_port,
                MACH_MSG_TIMEOUT_NONE,
                MACH_PORT_NULL,
            )
        };
        if kr == MACH_RCV_INVALID_NAME || kr == MACH_RCV_PORT_DIED {
            return;
        }
        if kr != KERN_SUCCESS {
            continue;
        }
        let Ok(req) = parse_request(rx) else {
            // Not a request we understand: free the rights it carries and keep serving.
            // SAFETY: `rx` holds the message just received by mach_msg.
            unsafe { mach_msg_destroy(rx.as_mut_ptr().cast::<mach_msg_header_t>()) };
            continue;
        };
        let identity = RequestIdentity { task_port: req.task_port, thread_id: req.thread_id };
        let ours = exception_is_ours(identity, mach::task(), mach::thread_in_task);
        let ret = if mach_server_action(ours, first_chance::is_set()) == MachAction::Decline {
            // A child that inherited our exception ports across fork/exec crashed (not our crash), or a first-chance
            // hook is set and must see the fault first, in the signal handler. Touch nothing (no gate, no ports, no
            // `reported`); the kernel goes on to the next handler and the signal.
            if ours {
                mach::unblock_signals(&SIGNALS_TO_UNBLOCK);
            }
            KERN_FAILURE
        } else {
            if role == Role::Primary && !secondary_resumed {
                let p = st.secondary_port.load(Ordering::Acquire);
                if p != MACH_PORT_NULL {
                    mach::resume(p);
                }
                secondary_resumed = true;
            }
            let ret = handle(st, &req);
            // The kernel turns our KERN_FAILURE into a signal; a blocked one would make the thread re-execute the
            // fault forever (policy::SIGNALS_TO_UNBLOCK).
            mach::unblock_signals(&SIGNALS_TO_UNBLOCK);
            ret
        };
        if let Ok(n) = encode_reply(&req, ret, tx) {
            // SAFETY: `tx` holds a reply of `n` bytes addressed to the request's send-once reply right.
            unsafe {
                mach_msg(
                    tx.as_mut_ptr().cast::<mach_msg_header_t>(),
                    MACH_SEND_MSG | MACH_SEND_TIMEOUT,
                    n as u32,
                    0,
                    MACH_PORT_NULL,
                    REPLY_TIMEOUT_MS,
                    MACH_PORT_NULL,
                )
            };
        }
        for p in [req.thread_port, req.task_port, req.task_id_token].into_iter().flatten() {
            if p != MACH_PORT_NULL {
                // SAFETY: the request carried these send rights to us; we drop each once.
                unsafe { mach_port_deallocate(mach::task(), p) };
            }
        }
    }
}

/// The record of a Mach exception (registers are read in `capture` with `thread_get_state`; the message's own
/// state is the fallback).
fn record_from(req: &ExceptionRequest<'_>, tid: u64, st: &State) -> CrashRecord {
    let code0 = req.codes.first().copied().unwrap_or(0);
    let mut rec = CrashRecord {
        mach_exception: req.exception,
        mach_codes: req.codes,
        mach_code_count: req.code_count,
        signal: signal_for(cpu(), req.exception, code0).unwrap_or(0),
        si_code: 0,
        addr: (req.exception == EXC_BAD_ACCESS && req.code_count >= 2)
            .then(|| req.codes.get(1).copied().unwrap_or(0) as u64),
        tid,
        ..CrashRecord::EMPTY
    };
    let (flavor, words, _, _) = FLAVORS;
    if req.flavor == Some(flavor) && req.state_count() as usize >= words {
        let mut w = [0u32; mach::STATE_WORDS];
        let n = req.copy_state(&mut w);
        if let Some(r) = w.get(..n.min(words)).and_then(|ts| mach::decode(ts, None, st.pac)) {
            rec.regs = r;
        }
    }
    rec
}

/// Handles one request; returns the reply code (always `KERN_FAILURE`: we never resolve a crash).
fn handle(st: &'static State, req: &ExceptionRequest<'_>) -> i32 {
    let tid = req.thread_id.or_else(|| req.thread_port.and_then(mach::identify).map(|(t, _)| t)).unwrap_or(0).max(1);
    let primary = st.primary_tid.load(Ordering::Acquire);
    if GATE.owner() != 0 && tid == primary {
        // The primary faulted while capturing: it is stopped in its own exception, so the record is ours now.
        // The saved ports go back first: nobody is left to receive on our port, so a fault of this (secondary)
        // thread while writing must reach the previous handler and the signal, not wait forever for itself.
        mach::restore_ports(st.mask, &st.saved_ports, state_none());
        // SAFETY: the record's owner (the primary) cannot run until we reply; nobody else touches the record.
        let rec = unsafe { st.core.record() };
        let _ = write_minimal(st, rec);
        finish(st);
        return KERN_FAILURE;
    }
    match GATE.enter(tid) {
        Entry::First => {
            // SAFETY: we won the gate: the record and the buffers are ours.
            let rec = unsafe { st.core.record() };
            *rec = record_from(req, tid, st);
            let _ =
                capture(st, rec, Crashed { port: req.thread_port.unwrap_or(MACH_PORT_NULL), self_port: own_port() });
            finish(st);
        }
        Entry::Recursive { .. } => {
            // The signal fallback's owner faulted inside its handler; it waits for our reply, so the record is ours.
            // SAFETY: as above: the owner is stopped in its exception until we reply.
            let rec = unsafe { st.core.record() };
            let _ = write_minimal(st, rec);
            finish(st);
        }
        Entry::Other { .. } => wait_done(st, OTHER_WAIT_MS),
    }
    KERN_FAILURE
}

/// Puts the saved exception ports back and marks the crash handled.
fn finish(st: &State) {
    mach::restore_ports(st.mask, &st.saved_ports, state_none());
    st.done.store(true, Ordering::Release);
}
