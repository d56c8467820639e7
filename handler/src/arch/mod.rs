//! Pure register decoding: turns the CPU state an OS hands to a signal handler (or a Mach thread-state call) into
//! the report's register sets (`report_format::regs`), and strips pointer-authentication bits.
//!
//! Everything here is pure, allocation-free and async-signal-safe; it takes plain arrays and byte slices, so it
//! runs and is tested on every host. The OS-specific code in `platform/` copies the values out of `ucontext_t`.

pub mod aarch64;
pub mod pac;
pub mod x86_64;

/// Largest register set this version stores (arm64: 36 values, see `report_format::regs::ARM64_NAMES`).
pub const MAX_REGS: usize = 36;

/// Register values of one thread in the storage order of a `report_format::regs` set, with a validity mask.
///
/// Fixed size and `Copy`, so thread tables can preallocate it. Signal-safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterValues {
    /// Register set name as bytes (`b"x86_64"`, `b"arm64"`); empty when nothing was captured.
    pub set: &'static [u8],
    /// Values in the set's storage order; only those whose bit is set in `valid` are meaningful.
    pub values: [u64; MAX_REGS],
    /// Bit `i` set when `values[i]` was captured.
    pub valid: u64,
    /// Number of registers in the set.
    pub len: u8,
}

impl Default for RegisterValues {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl RegisterValues {
    /// No registers.
    pub const EMPTY: RegisterValues = RegisterValues { set: b"", values: [0; MAX_REGS], valid: 0, len: 0 };

    /// An empty set named `set` holding `len` registers (none valid yet).
    pub const fn new(set: &'static [u8], len: u8) -> Self {
        RegisterValues { set, values: [0; MAX_REGS], valid: 0, len }
    }

    /// Stores a value at storage index `i` (ignored when out of range).
    pub fn put(&mut self, i: usize, v: u64) {
        if i < usize::from(self.len) {
            if let Some(slot) = self.values.get_mut(i) {
                *slot = v;
                self.valid |= 1u64 << i;
            }
        }
    }

    /// The value at storage index `i`, when captured.
    pub fn get(&self, i: usize) -> Option<u64> {
        if i < usize::from(self.len) && self.valid & (1u64 << i) != 0 {
            self.values.get(i).copied()
        } else {
            None
        }
    }

    /// A set named `set` from per-register options in its storage order (`None` = not captured); values beyond
    /// [`MAX_REGS`] are ignored. Used by the Apple backend, whose thread-state decoders produce options.
    pub fn from_options(set: &'static [u8], values: &[Option<u64>]) -> Self {
        let len = values.len().min(MAX_REGS);
        let mut r = RegisterValues::new(set, len as u8);
        for (i, v) in values.iter().enumerate().take(len) {
            if let Some(v) = v {
                r.put(i, *v);
            }
        }
        r
    }

    /// Fills `out` with `Some(value)`/`None` per register, as the report encoder wants; returns the filled prefix.
    pub fn to_options<'o>(&self, out: &'o mut [Option<u64>; MAX_REGS]) -> &'o [Option<u64>] {
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.get(i);
        }
        out.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// The registers the stack walker starts from, decoded per set. `None` for an unknown or empty set.
    pub fn walk_start(&self) -> Option<WalkRegs> {
        if self.set == x86_64::SET {
            x86_64::walk_regs(self)
        } else if self.set == aarch64::SET {
            aarch64::walk_regs(self)
        } else {
            None
        }
    }
}

/// What a frame-pointer walk starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkRegs {
    /// Program counter (frame 0).
    pub pc: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (`rbp` / `x29`).
    pub fp: u64,
    /// Link register (`x30`) on arm64: the leaf-function candidate for frame 1. `None` on x86_64.
    pub lr: Option<u64>,
}

/// The CPU architecture this handler was built for, as the report names it (`"x86_64"`, `"arm64"`).
pub const HOST_ARCH: &[u8] = if cfg!(target_arch = "aarch64") {
    b"arm64"
} else if cfg!(target_arch = "x86_64") {
    b"x86_64"
} else {
    b"unknown"
};
