//! The exception ports a process had before ours: what `task_swap_exception_ports` hands back, kept in fixed arrays
//! so the exception server can restore them before it replies (the next handler, and through the re-executed fault
//! the previous task-level handler, still see the crash) and so the signal fallback can tell whether the Mach ports
//! are still ours.
//!
//! Source: XNU `osfmk/mach/task.defs` (`task_swap_exception_ports`: parallel arrays `masks`, `old_handlers`,
//! `old_behaviors`, `old_flavors` of at most `EXC_TYPES_COUNT` entries, one per distinct handler) and
//! `osfmk/mach/exception_types.h` (`EXC_TYPES_COUNT` = 14 in current XNU). Pure and allocation-free.

/// `EXC_TYPES_COUNT` (`osfmk/mach/exception_types.h`): the arrays' capacity.
pub const EXC_TYPES_COUNT: usize = 14;

/// `MACH_PORT_NULL`.
pub const MACH_PORT_NULL: u32 = 0;

/// One saved handler: the exceptions it took (`mask`), its port, behaviour and thread-state flavor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SavedHandler {
    /// `exception_mask_t`: the exceptions this handler was registered for.
    pub mask: u32,
    /// The handler's send right (`MACH_PORT_NULL`: none).
    pub port: u32,
    /// `exception_behavior_t`, with `MACH_EXCEPTION_CODES` and friends as registered.
    pub behavior: u32,
    /// `thread_state_flavor_t`.
    pub flavor: i32,
}

/// The handlers replaced at install (or read back with `task_get_exception_ports`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SavedPorts {
    entries: [SavedHandler; EXC_TYPES_COUNT],
    count: usize,
}

impl SavedPorts {
    /// No saved handlers.
    pub const EMPTY: SavedPorts =
        SavedPorts { entries: [SavedHandler { mask: 0, port: 0, behavior: 0, flavor: 0 }; EXC_TYPES_COUNT], count: 0 };

    /// From the parallel arrays `task_swap_exception_ports`/`task_get_exception_ports` filled and the count they
    /// returned (clamped to the arrays and to [`EXC_TYPES_COUNT`]).
    pub fn from_arrays(masks: &[u32], ports: &[u32], behaviors: &[u32], flavors: &[i32], count: usize) -> Self {
        let mut s = SavedPorts::EMPTY;
        let n = count.min(masks.len()).min(ports.len()).min(behaviors.len()).min(flavors.len()).min(EXC_TYPES_COUNT);
        for (i, e) in s.entries.iter_mut().enumerate().take(n) {
            *e = SavedHandler {
                mask: masks.get(i).copied().unwrap_or(0),
                port: ports.get(i).copied().unwrap_or(0),
                behavior: behaviors.get(i).copied().unwrap_or(0),
                flavor: flavors.get(i).copied().unwrap_or(0),
            };
        }
        s.count = n;
        s
    }

    /// The saved entries (including ones whose port is `MACH_PORT_NULL`: restoring those clears the mask's ports).
    pub fn entries(&self) -> &[SavedHandler] {
        self.entries.get(..self.count).unwrap_or(&[])
    }

    /// The handler that was registered for exception type `exception` (1..=13), if it had a port.
    pub fn handler_for(&self, exception: i32) -> Option<SavedHandler> {
        let bit = 1u32.checked_shl(u32::try_from(exception).ok()?)?;
        self.entries().iter().find(|e| e.mask & bit != 0 && e.port != MACH_PORT_NULL).copied()
    }

    /// Whether `port` handles every exception in `mask` (e.g. after reading the current ports back: are they
    /// still ours?).
    pub fn port_covers(&self, port: u32, mask: u32) -> bool {
        let covered =
            self.entries().iter().filter(|e| e.port == port && port != MACH_PORT_NULL).fold(0, |a, e| a | e.mask);
        mask != 0 && covered & mask == mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::darwin::crash::exc::{
        EXCEPTION_DEFAULT, EXCEPTION_STATE_IDENTITY, EXC_BAD_ACCESS, EXC_BREAKPOINT, EXC_CRASH, EXC_MASK_ARITHMETIC,
        EXC_MASK_BAD_ACCESS, EXC_MASK_BAD_INSTRUCTION, EXC_MASK_BREAKPOINT, MACH_EXCEPTION_CODES,
    };

    #[test]
    fn finds_the_previous_handler_per_exception() {
        // A debugger-like handler on BAD_ACCESS|BREAKPOINT, another on BAD_INSTRUCTION, and an empty entry.
        let masks = [EXC_MASK_BAD_ACCESS | EXC_MASK_BREAKPOINT, EXC_MASK_BAD_INSTRUCTION, EXC_MASK_ARITHMETIC, 0];
        let ports = [0x1303, 0x2207, MACH_PORT_NULL, 0];
        let behaviors = [EXCEPTION_DEFAULT | MACH_EXCEPTION_CODES, EXCEPTION_STATE_IDENTITY, EXCEPTION_DEFAULT, 0];
        let flavors = [0, 6, 0, 0];
        let s = SavedPorts::from_arrays(&masks, &ports, &behaviors, &flavors, 3);
        assert_eq!(s.entries().len(), 3);
        assert_eq!(s.handler_for(EXC_BAD_ACCESS).map(|h| h.port), Some(0x1303));
        assert_eq!(s.handler_for(EXC_BREAKPOINT).map(|h| h.behavior), Some(EXCEPTION_DEFAULT | MACH_EXCEPTION_CODES));
        assert_eq!(s.handler_for(2).map(|h| (h.port, h.flavor)), Some((0x2207, 6)));
        assert_eq!(s.handler_for(3), None, "a null port is no handler");
        assert_eq!(s.handler_for(EXC_CRASH), None);
        assert_eq!(s.handler_for(-1), None);
        assert_eq!(s.handler_for(40), None);
        assert!(s.port_covers(0x1303, EXC_MASK_BAD_ACCESS));
        assert!(!s.port_covers(0x1303, EXC_MASK_BAD_ACCESS | EXC_MASK_BAD_INSTRUCTION));
        assert!(!s.port_covers(MACH_PORT_NULL, EXC_MASK_ARITHMETIC));
    }

    #[test]
    fn counts_are_clamped() {
        let m = [1u32; 20];
        let s = SavedPorts::from_arrays(&m, &m, &m, &[0; 20], 99);
        assert_eq!(s.entries().len(), EXC_TYPES_COUNT);
        let s = SavedPorts::from_arrays(&m[..2], &m, &m, &[0; 20], 5);
        assert_eq!(s.entries().len(), 2);
    }
}
