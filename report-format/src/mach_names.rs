//! Names of the Mach codes a report stores in its EXCEPTION section (`SCHEMA.md` §4.2): exception types,
//! `kern_return_t` values and the arm64 `EXC_BAD_ACCESS` codes. One table for the handler and the viewer.
//!
//! Sources: XNU `osfmk/mach/exception_types.h` (exception types), `osfmk/mach/kern_return.h` (kern_return_t),
//! `osfmk/mach/arm/exception.h` (`EXC_ARM_*`). Pure and allocation-free (signal-safe).

/// Name of a Mach exception type (`EXC_BAD_ACCESS` = 1 … `EXC_CORPSE_NOTIFY` = 13), `None` when unknown.
pub fn exception_name(exception: i64) -> Option<&'static str> {
    Some(match exception {
        1 => "EXC_BAD_ACCESS",
        2 => "EXC_BAD_INSTRUCTION",
        3 => "EXC_ARITHMETIC",
        4 => "EXC_EMULATION",
        5 => "EXC_SOFTWARE",
        6 => "EXC_BREAKPOINT",
        7 => "EXC_SYSCALL",
        8 => "EXC_MACH_SYSCALL",
        9 => "EXC_RPC_ALERT",
        10 => "EXC_CRASH",
        11 => "EXC_RESOURCE",
        12 => "EXC_GUARD",
        13 => "EXC_CORPSE_NOTIFY",
        _ => return None,
    })
}

/// `kern_return_t` names 0..=56 in order (kern_return.h).
const KERN_RETURN_NAMES: [&str; 57] = [
    "KERN_SUCCESS",
    "KERN_INVALID_ADDRESS",
    "KERN_PROTECTION_FAILURE",
    "KERN_NO_SPACE",
    "KERN_INVALID_ARGUMENT",
    "KERN_FAILURE",
    "KERN_RESOURCE_SHORTAGE",
    "KERN_NOT_RECEIVER",
    "KERN_NO_ACCESS",
    "KERN_MEMORY_FAILURE",
    "KERN_MEMORY_ERROR",
    "KERN_ALREADY_IN_SET",
    "KERN_NOT_IN_SET",
    "KERN_NAME_EXISTS",
    "KERN_ABORTED",
    "KERN_INVALID_NAME",
    "KERN_INVALID_TASK",
    "KERN_INVALID_RIGHT",
    "KERN_INVALID_VALUE",
    "KERN_UREFS_OVERFLOW",
    "KERN_INVALID_CAPABILITY",
    "KERN_RIGHT_EXISTS",
    "KERN_INVALID_HOST",
    "KERN_MEMORY_PRESENT",
    "KERN_MEMORY_DATA_MOVED",
    "KERN_MEMORY_RESTART_COPY",
    "KERN_INVALID_PROCESSOR_SET",
    "KERN_POLICY_LIMIT",
    "KERN_INVALID_POLICY",
    "KERN_INVALID_OBJECT",
    "KERN_ALREADY_WAITING",
    "KERN_DEFAULT_SET",
    "KERN_EXCEPTION_PROTECTED",
    "KERN_INVALID_LEDGER",
    "KERN_INVALID_MEMORY_CONTROL",
    "KERN_INVALID_SECURITY",
    "KERN_NOT_DEPRESSED",
    "KERN_TERMINATED",
    "KERN_LOCK_SET_DESTROYED",
    "KERN_LOCK_UNSTABLE",
    "KERN_LOCK_OWNED",
    "KERN_LOCK_OWNED_SELF",
    "KERN_SEMAPHORE_DESTROYED",
    "KERN_RPC_SERVER_TERMINATED",
    "KERN_RPC_TERMINATE_ORPHAN",
    "KERN_RPC_CONTINUE_ORPHAN",
    "KERN_NOT_SUPPORTED",
    "KERN_NODE_DOWN",
    "KERN_NOT_WAITING",
    "KERN_OPERATION_TIMED_OUT",
    "KERN_CODESIGN_ERROR",
    "KERN_POLICY_STATIC",
    "KERN_INSUFFICIENT_BUFFER_SIZE",
    "KERN_DENIED",
    "KERN_MISSING_KC",
    "KERN_INVALID_KC",
    "KERN_NOT_FOUND",
];

/// Name of a `kern_return_t`, `None` when unknown (Apple prints those as `UNKNOWN_0x<hex>`).
pub fn kern_return_name(kr: i64) -> Option<&'static str> {
    usize::try_from(kr).ok().and_then(|i| KERN_RETURN_NAMES.get(i)).copied()
}

/// Name of an `EXC_BAD_ACCESS` code (`code[0]`): the arm64 `EXC_ARM_*` names for `0x101..=0x105`
/// (`osfmk/mach/arm/exception.h`), else the `kern_return_t` name.
pub fn bad_access_code_name(code: i64) -> Option<&'static str> {
    Some(match code {
        0x101 => "EXC_ARM_DA_ALIGN",
        0x102 => "EXC_ARM_DA_DEBUG",
        0x103 => "EXC_ARM_SP_ALIGN",
        0x104 => "EXC_ARM_SWP",
        0x105 => "EXC_ARM_PAC_FAIL",
        _ => return kern_return_name(code),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_xnu_headers() {
        assert_eq!(exception_name(1), Some("EXC_BAD_ACCESS"));
        assert_eq!(exception_name(13), Some("EXC_CORPSE_NOTIFY"));
        assert_eq!(exception_name(14), None);
        assert_eq!(kern_return_name(1), Some("KERN_INVALID_ADDRESS"));
        assert_eq!(kern_return_name(50), Some("KERN_CODESIGN_ERROR"));
        assert_eq!(kern_return_name(56), Some("KERN_NOT_FOUND"));
        assert_eq!(kern_return_name(57), None);
        assert_eq!(kern_return_name(-1), None);
        assert_eq!(bad_access_code_name(0x105), Some("EXC_ARM_PAC_FAIL"));
        assert_eq!(bad_access_code_name(2), Some("KERN_PROTECTION_FAILURE"));
    }
}
