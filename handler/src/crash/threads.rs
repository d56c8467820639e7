//! The preallocated thread table and its capture protocol.
//!
//! The crash owner fills one slot per thread (`tid`, state [`PENDING`]) before it asks the thread to stop; a
//! stopped thread claims its own slot (`PENDING` → [`WRITING`]), stores its registers and name, and publishes them
//! (`WRITING` → [`CAPTURED`], release ordering). A thread that does not answer in time is expired by the owner
//! (`PENDING` → [`NOT_CAPTURED`]); a slot is read only after its state said `CAPTURED` (acquire ordering), so a late
//! writer never races a reader. Platform-neutral: the Apple backend fills the same table from `thread_get_state`.
//!
//! Never allocates, locks or panics; every method is async-signal-safe.
#![allow(unsafe_code)]

use crate::arch::RegisterValues;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Slot is unused.
pub const FREE: u32 = 0;
/// The owner asked the thread to stop; waiting for its answer.
pub const PENDING: u32 = 1;
/// The thread is writing its registers into the slot.
pub const WRITING: u32 = 2;
/// Registers and name are in the slot.
pub const CAPTURED: u32 = 3;
/// The thread could not be captured; `reason` says why.
pub const NOT_CAPTURED: u32 = 4;
/// The thread was captured, then stopped waiting for release (its release timeout passed) and went on before the
/// writer walked its stack: its registers no longer describe its stack, which may change or be unmapped. Reported
/// as not captured; its stack is never read with plain loads (see [`ThreadTable::begin_walk`]).
pub const LEFT: u32 = 5;

/// Bytes of a thread name kept (Linux `TASK_COMM_LEN` is 16 including the NUL; Apple's `MAXTHREADNAMESIZE` is 64).
pub const NAME_LEN: usize = 64;

/// Bytes of a dispatch queue label kept (longer labels are cut).
pub const QUEUE_LEN: usize = 96;

/// What a captured slot holds.
#[derive(Clone, Copy, Debug)]
pub struct SlotData {
    /// Registers (empty set when not captured).
    pub regs: RegisterValues,
    /// Thread name bytes (first `name_len` are valid).
    pub name: [u8; NAME_LEN],
    /// Valid bytes in `name`.
    pub name_len: u8,
    /// Dispatch queue label bytes (Apple; first `queue_len` are valid).
    pub queue: [u8; QUEUE_LEN],
    /// Valid bytes in `queue`.
    pub queue_len: u8,
    /// Why the thread was not captured (static text; empty when captured).
    pub reason: &'static [u8],
    /// True for the thread that owns the crash.
    pub crashed: bool,
}

impl SlotData {
    /// An empty slot.
    pub const EMPTY: SlotData = SlotData {
        regs: RegisterValues::EMPTY,
        name: [0; NAME_LEN],
        name_len: 0,
        queue: [0; QUEUE_LEN],
        queue_len: 0,
        reason: b"",
        crashed: false,
    };

    /// Sets the name from bytes, cut at the first NUL or newline and at [`NAME_LEN`].
    pub fn set_name(&mut self, bytes: &[u8]) {
        self.name_len = copy_cut(&mut self.name, bytes);
    }

    /// The valid name bytes.
    pub fn name(&self) -> &[u8] {
        self.name.get(..usize::from(self.name_len)).unwrap_or(&[])
    }

    /// Sets the dispatch queue label, cut at the first NUL or newline and at [`QUEUE_LEN`].
    pub fn set_queue(&mut self, bytes: &[u8]) {
        self.queue_len = copy_cut(&mut self.queue, bytes);
    }

    /// The valid queue label bytes.
    pub fn queue(&self) -> &[u8] {
        self.queue.get(..usize::from(self.queue_len)).unwrap_or(&[])
    }
}

/// Copies `src` into `dst` up to the first NUL or newline or `dst`'s end; returns the bytes copied (both buffers
/// are at most 255 bytes).
fn copy_cut(dst: &mut [u8], src: &[u8]) -> u8 {
    let mut n = 0u8;
    for (d, b) in dst.iter_mut().zip(src.iter()) {
        if *b == 0 || *b == b'\n' {
            break;
        }
        *d = *b;
        n = n.saturating_add(1);
    }
    n
}

/// One thread's slot.
#[derive(Debug)]
pub struct ThreadSlot {
    state: AtomicU32,
    tid: AtomicU64,
    data: UnsafeCell<SlotData>,
}

// SAFETY: `data` is only written by the party that moved `state` into WRITING (or by the owner for its own slot
// before publishing), and only read after observing CAPTURED / NOT_CAPTURED with acquire ordering; the state machine
// hands out exclusive access, so sharing slots between threads is sound.
unsafe impl Sync for ThreadSlot {}

impl Default for ThreadSlot {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadSlot {
    /// A free slot (used at install to preallocate the table).
    pub const fn new() -> Self {
        ThreadSlot { state: AtomicU32::new(FREE), tid: AtomicU64::new(0), data: UnsafeCell::new(SlotData::EMPTY) }
    }

    /// Current state (acquire).
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Kernel thread id the slot describes.
    pub fn tid(&self) -> u64 {
        self.tid.load(Ordering::Acquire)
    }

    /// The slot's data once it is final ([`CAPTURED`], [`NOT_CAPTURED`] or [`LEFT`]); `None` while anyone may
    /// write it.
    pub fn data(&self) -> Option<&SlotData> {
        match self.state() {
            // SAFETY: in a final state nobody writes `data` any more (writers only act in PENDING/WRITING, which
            // are past), and the acquire load above orders the writer's stores before this read.
            CAPTURED | NOT_CAPTURED | LEFT => Some(unsafe { &*self.data.get() }),
            _ => None,
        }
    }
}

/// Exclusive write access to one slot, handed out by the state machine; publishing consumes it.
#[derive(Debug)]
pub struct SlotWriter<'t> {
    slot: &'t ThreadSlot,
}

impl SlotWriter<'_> {
    /// The slot's data, for writing.
    pub fn data(&mut self) -> &mut SlotData {
        // SAFETY: a `SlotWriter` exists only for a slot in WRITING state that this writer moved there (or a slot
        // the owner is filling before publishing); nobody else reads or writes `data` until `publish`.
        unsafe { &mut *self.slot.data.get() }
    }

    /// Makes the data visible: state becomes `final_state` ([`CAPTURED`] or [`NOT_CAPTURED`]) with release order.
    pub fn publish(self, final_state: u32) {
        self.slot.state.store(final_state, Ordering::Release);
    }
}

/// The thread table: a fixed array of slots and the number in use.
#[derive(Debug)]
pub struct ThreadTable {
    slots: &'static [ThreadSlot],
    count: AtomicUsize,
    /// Set (release) once every slot is filled in, so threads that fault meanwhile can find their slot.
    published: AtomicU32,
    /// Incremented each time a thread publishes its slot (see [`ThreadTable::answer`]).
    pub answers: AtomicU32,
    /// The value of `answers` at which the owner wants to be woken: only the answer that reaches it wakes the owner
    /// (one wake per round instead of one per thread). Set by [`ThreadTable::expect_answers`]; `u32::MAX` until
    /// then, so the answers that arrive while the owner still prepares the report wake nobody (the owner reads
    /// `answers` before it first waits).
    wake_at: AtomicU32,
    /// Release generation: incremented (and futex-woken on Linux) each time stopped threads may resume. A stopped
    /// thread reads it before it publishes its slot and waits until it changes; [`ThreadTable::reset`] leaves it
    /// alone, so a slow waiter of one crash is never held by the next one.
    pub release: AtomicU32,
    /// Slot whose stack the owner is walking now ([`NO_WALK`] when none): see [`ThreadTable::begin_walk`].
    walking: AtomicUsize,
}

/// [`ThreadTable`]'s `walking` value when no stack is being walked.
const NO_WALK: usize = usize::MAX;

impl ThreadTable {
    /// A table over preallocated slots (install time).
    pub const fn new(slots: &'static [ThreadSlot]) -> Self {
        ThreadTable {
            slots,
            count: AtomicUsize::new(0),
            published: AtomicU32::new(0),
            answers: AtomicU32::new(0),
            wake_at: AtomicU32::new(u32::MAX),
            release: AtomicU32::new(0),
            walking: AtomicUsize::new(NO_WALK),
        }
    }

    /// Capacity in threads.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Slots in use.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire).min(self.slots.len())
    }

    /// Whether no slot is in use.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slot `i` (in use or not).
    pub fn slot(&self, i: usize) -> Option<&ThreadSlot> {
        self.slots.get(i)
    }

    /// The slots in use.
    pub fn used(&self) -> &[ThreadSlot] {
        self.slots.get(..self.len()).unwrap_or(&[])
    }

    /// Owner: empties the table for a new capture. Only the slots the last capture used are touched (the others
    /// are still [`FREE`]).
    pub fn reset(&self) {
        let used = self.len();
        self.published.store(0, Ordering::Release);
        self.count.store(0, Ordering::Release);
        self.answers.store(0, Ordering::SeqCst);
        self.no_waiter();
        for s in self.slots.iter().take(used) {
            s.state.store(FREE, Ordering::Release);
            s.tid.store(0, Ordering::Release);
        }
    }

    /// Owner: nobody waits for answers until the next [`ThreadTable::expect_answers`], so the answers that arrive
    /// meanwhile wake nobody (no system call). [`ThreadTable::reset`] does this for a new capture; call it before
    /// asking more threads to stop in a later round.
    pub fn no_waiter(&self) {
        self.wake_at.store(u32::MAX, Ordering::SeqCst);
    }

    /// Owner: from now on, wake me (return `true` from [`ThreadTable::answer`]) when the answer that makes
    /// [`ThreadTable::outstanding`] zero arrives. Call after adding a round of pending threads and after expiring
    /// some, before waiting; returns the `answers` value it saw, for the futex wait.
    pub fn expect_answers(&self) -> u32 {
        let seen = self.answers.load(Ordering::SeqCst);
        let outstanding = u32::try_from(self.outstanding()).unwrap_or(u32::MAX);
        self.wake_at.store(seen.saturating_add(outstanding), Ordering::SeqCst);
        seen
    }

    /// A thread that published its slot counts its answer; `true` when it is the one the owner waits for (then it
    /// wakes the owner: `futex_wake(&answers)` on Linux).
    pub fn answer(&self) -> bool {
        let n = self.answers.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        n >= self.wake_at.load(Ordering::SeqCst)
    }

    /// Whether a slot in use describes thread `tid`.
    pub fn contains(&self, tid: u64) -> bool {
        self.used().iter().any(|s| s.tid() == tid)
    }

    /// Owner: lets stopped threads resume (a new release generation); no stack is being walked any more.
    pub fn release_all(&self) {
        self.walking.store(NO_WALK, Ordering::SeqCst);
        self.release.fetch_add(1, Ordering::AcqRel);
    }

    /// Owner: about to walk slot `i`'s stack. `true` when the thread is still stopped ([`CAPTURED`]) and stays so
    /// until [`ThreadTable::end_walk`]: a stopped thread whose release wait runs out meanwhile calls
    /// [`ThreadTable::leave`], which holds it while its stack is walked. Both sides store their own word, then
    /// load the other's, sequentially consistent (Dekker's pattern), so at least one of them sees the other: never
    /// a plain load from a stack whose thread has gone on. Signal-safe.
    pub fn begin_walk(&self, i: usize) -> bool {
        self.walking.store(i, Ordering::SeqCst);
        self.slots.get(i).is_some_and(|s| s.state.load(Ordering::SeqCst) == CAPTURED)
    }

    /// Owner: the walk that [`ThreadTable::begin_walk`] started is over. Signal-safe.
    pub fn end_walk(&self) {
        self.walking.store(NO_WALK, Ordering::SeqCst);
    }

    /// Stopped thread in slot `i`, whose release wait ran out: marks the slot [`LEFT`] (if it is still
    /// [`CAPTURED`]). `false` while the owner walks this slot's stack: the caller must not go on yet (it pauses and
    /// asks again; a walk only reads memory, so it ends within milliseconds). Signal-safe.
    pub fn leave(&self, i: usize) -> bool {
        if let Some(s) = self.slots.get(i) {
            let _ = s.state.compare_exchange(CAPTURED, LEFT, Ordering::SeqCst, Ordering::SeqCst);
        }
        self.walking.load(Ordering::SeqCst) != i
    }

    /// Owner: adds a thread in state [`PENDING`]; `None` when the table is full.
    pub fn add_pending(&self, tid: u64) -> Option<usize> {
        let i = self.count.load(Ordering::Acquire);
        let s = self.slots.get(i)?;
        s.tid.store(tid, Ordering::Release);
        s.state.store(PENDING, Ordering::Release);
        self.count.store(i.saturating_add(1), Ordering::Release);
        Some(i)
    }

    /// Owner: adds a thread and returns exclusive write access (state [`WRITING`]); used for the owner's own slot.
    pub fn add_owned(&self, tid: u64) -> Option<(usize, SlotWriter<'_>)> {
        let i = self.count.load(Ordering::Acquire);
        let s = self.slots.get(i)?;
        s.tid.store(tid, Ordering::Release);
        s.state.store(WRITING, Ordering::Release);
        self.count.store(i.saturating_add(1), Ordering::Release);
        Some((i, SlotWriter { slot: s }))
    }

    /// Owner: marks the table complete (release), so faulting threads can look for their slot.
    pub fn publish(&self) {
        self.published.store(1, Ordering::Release);
    }

    /// Whether the owner has published the table.
    pub fn is_published(&self) -> bool {
        self.published.load(Ordering::Acquire) != 0
    }

    /// A stopped thread: claims its own [`PENDING`] slot for writing. `hint` is the slot index the stop request
    /// carried (Linux: the `si_value` of the queued stop signal), checked first; without it, or when it does not
    /// name this thread, the used slots are searched.
    pub fn claim(&self, tid: u64, hint: Option<usize>) -> Option<(usize, SlotWriter<'_>)> {
        if let Some((i, s)) = hint.and_then(|i| Some((i, self.used().get(i)?))) {
            if s.tid() == tid && s.state.compare_exchange(PENDING, WRITING, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                return Some((i, SlotWriter { slot: s }));
            }
        }
        for (i, s) in self.used().iter().enumerate() {
            if s.tid() == tid && s.state.compare_exchange(PENDING, WRITING, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                return Some((i, SlotWriter { slot: s }));
            }
        }
        None
    }

    /// Owner: gives up on a thread that did not answer; returns `true` when the slot is now [`NOT_CAPTURED`],
    /// `false` when the thread got there first (then wait for [`CAPTURED`], boundedly).
    pub fn expire(&self, i: usize, reason: &'static [u8]) -> bool {
        let Some(s) = self.slots.get(i) else { return false };
        if s.state.compare_exchange(PENDING, WRITING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let mut w = SlotWriter { slot: s };
            let d = w.data();
            *d = SlotData::EMPTY;
            d.reason = reason;
            w.publish(NOT_CAPTURED);
            true
        } else {
            false
        }
    }

    /// Owner: marks a slot that never got a stop request (the signal could not be sent).
    pub fn fail(&self, i: usize, reason: &'static [u8]) {
        let _ = self.expire(i, reason);
    }

    /// Number of slots still [`PENDING`] or [`WRITING`].
    pub fn outstanding(&self) -> usize {
        self.used().iter().filter(|s| matches!(s.state(), PENDING | WRITING)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64;

    fn table(n: usize) -> ThreadTable {
        let slots: &'static [ThreadSlot] = Vec::leak((0..n).map(|_| ThreadSlot::new()).collect());
        ThreadTable::new(slots)
    }

    /// A stopped thread whose release wait runs out is held while the owner walks its stack, then marked LEFT;
    /// a walk that begins after it left is told so (and reads nothing with plain loads).
    #[test]
    fn a_thread_that_goes_on_is_held_during_its_walk_and_marked_left() {
        let t = table(4);
        assert_eq!(t.add_pending(101), Some(0));
        t.publish();
        let (i, w) = t.claim(101, Some(0)).expect("pending slot");
        w.publish(CAPTURED);
        assert!(t.begin_walk(i), "captured and held");
        assert!(!t.leave(i), "held while its stack is walked");
        t.end_walk();
        assert!(t.leave(i), "free to go once the walk ended");
        assert_eq!(t.slot(i).map(ThreadSlot::state), Some(LEFT));
        assert!(t.slot(i).and_then(ThreadSlot::data).is_some(), "its data stays readable");
        assert!(!t.begin_walk(i), "a walk after it left must not use plain loads");
        t.end_walk();
        // Concurrently: whichever side goes first, a held walk never overlaps a thread that went on.
        for _ in 0..200 {
            let t: &'static ThreadTable = Box::leak(Box::new(table(1)));
            assert_eq!(t.add_pending(7), Some(0));
            t.publish();
            let (_, w) = t.claim(7, Some(0)).expect("slot");
            w.publish(CAPTURED);
            let walking = std::sync::Arc::new(core::sync::atomic::AtomicBool::new(false));
            let gone = std::sync::Arc::new(core::sync::atomic::AtomicBool::new(false));
            let (wk, gn) = (walking.clone(), gone.clone());
            let h = std::thread::spawn(move || {
                while !t.leave(0) {
                    std::hint::spin_loop();
                }
                gn.store(true, Ordering::SeqCst);
                assert!(!wk.load(Ordering::SeqCst), "went on during a held walk");
            });
            if t.begin_walk(0) {
                walking.store(true, Ordering::SeqCst);
                assert!(!gone.load(Ordering::SeqCst), "held walk began after the thread went on");
                walking.store(false, Ordering::SeqCst);
            }
            t.end_walk();
            h.join().expect("thread");
        }
    }

    #[test]
    fn claim_publish_and_expire_follow_the_state_machine() {
        let t = table(4);
        let (own, mut w) = t.add_owned(100).expect("room");
        w.data().crashed = true;
        w.publish(CAPTURED);
        assert_eq!(t.add_pending(101), Some(1));
        assert_eq!(t.add_pending(102), Some(2));
        t.publish();
        assert!(t.is_published());
        assert_eq!(t.outstanding(), 2);
        // 101 answers.
        let (i, mut w) = t.claim(101, None).expect("pending slot");
        assert_eq!(i, 1);
        w.data().regs = RegisterValues::new(x86_64::SET, x86_64::LEN);
        w.data().set_name(b"worker\n");
        w.publish(CAPTURED);
        // A second claim finds nothing.
        assert!(t.claim(101, None).is_none());
        // 102 is expired; a late answer cannot claim it.
        assert!(t.expire(2, b"no answer"));
        assert!(t.claim(102, None).is_none());
        assert_eq!(t.outstanding(), 0);
        assert!(t.slot(own).and_then(|s| s.data()).expect("final").crashed);
        assert_eq!(t.slot(1).and_then(|s| s.data()).expect("final").name(), b"worker");
        assert_eq!(t.slot(2).and_then(|s| s.data()).expect("final").reason, b"no answer");
        // Expiring a captured slot does nothing.
        assert!(!t.expire(1, b"x"));
        // Full table.
        assert_eq!(t.add_pending(103), Some(3));
        assert_eq!(t.add_pending(104), None);
        assert!(t.contains(103) && t.contains(100) && !t.contains(104));
        let gen = t.release.load(Ordering::Acquire);
        t.release_all();
        t.reset();
        assert_eq!(t.release.load(Ordering::Acquire), gen.wrapping_add(1), "reset keeps the release generation");
        assert!(!t.contains(103));
        assert!(t.is_empty());
        assert!(!t.is_published());
    }

    #[test]
    fn hints_are_checked_and_only_the_last_answer_wakes() {
        let t = table(8);
        for tid in 0..4 {
            t.add_pending(500 + tid);
        }
        t.publish();
        // A hint naming another thread's slot falls back to the search; a right hint claims directly.
        assert_eq!(t.claim(500, Some(3)).map(|(i, _)| i), Some(0));
        assert_eq!(t.claim(501, Some(1)).map(|(i, _)| i), Some(1));
        assert_eq!(t.claim(502, Some(99)).map(|(i, _)| i), Some(2), "an out-of-range hint is ignored");
        for i in 0..3 {
            if let Some(s) = t.slot(i) {
                s.state.store(CAPTURED, Ordering::Release);
            }
        }
        // Three answers already counted before the owner waits (it is still preparing the report: nobody to wake);
        // one thread (503) outstanding.
        for _ in 0..3 {
            assert!(!t.answer(), "no owner waits before expect_answers: no wake-up system call");
        }
        let seen = t.expect_answers();
        assert_eq!(seen, 3);
        let (_, w) = t.claim(503, Some(3)).expect("slot 3");
        w.publish(CAPTURED);
        assert!(t.answer(), "the answer that leaves nothing outstanding wakes the owner");
        // After expect_answers, with two outstanding, the first answer does not wake.
        let t = table(8);
        t.add_pending(1);
        t.add_pending(2);
        t.expect_answers();
        let (_, w) = t.claim(1, Some(0)).expect("slot 0");
        w.publish(CAPTURED);
        assert!(!t.answer(), "one of two answers: the owner sleeps on");
        // A second round: until the owner waits again, its newcomers' answers wake nobody either.
        t.no_waiter();
        t.add_pending(3);
        let (_, w) = t.claim(2, Some(1)).expect("slot 1");
        w.publish(CAPTURED);
        let (_, w) = t.claim(3, Some(2)).expect("slot 2");
        w.publish(CAPTURED);
        assert!(!t.answer() && !t.answer(), "nobody waits: no wake-up system call");
    }

    #[test]
    fn racing_claims_and_expiry_give_each_slot_one_outcome() {
        for _ in 0..50 {
            let t: &'static ThreadTable = Box::leak(Box::new(table(64)));
            for tid in 0..64 {
                t.add_pending(1000 + tid);
            }
            let h = std::thread::spawn(move || {
                let mut n = 0;
                for tid in 0..64 {
                    let hint = (tid % 2 == 0).then_some(tid as usize);
                    if let Some((_, w)) = t.claim(1000 + tid, hint) {
                        w.publish(CAPTURED);
                        n += 1;
                    }
                }
                n
            });
            let mut expired = 0;
            for i in (0..64).rev() {
                if t.expire(i, b"late") {
                    expired += 1;
                }
            }
            let claimed = h.join().expect("join");
            assert_eq!(claimed + expired, 64);
        }
    }

    #[test]
    fn names_are_cut_at_nul_and_capacity() {
        let mut d = SlotData::EMPTY;
        d.set_name(b"abc\0def");
        assert_eq!(d.name(), b"abc");
        d.set_name(&[b'x'; 100]);
        assert_eq!(d.name().len(), NAME_LEN);
        d.set_queue(b"com.apple.main-thread\0junk");
        assert_eq!(d.queue(), b"com.apple.main-thread");
        d.set_queue(&[b'q'; 200]);
        assert_eq!(d.queue().len(), QUEUE_LEN);
    }
}
