//! Mach-O constants, each with the header it comes from.
//!
//! Sources (Apple's open-source headers; values read there, names kept so they can be grepped):
//! - `mach-o/loader.h`: cctools `include/mach-o/loader.h`, also shipped in XNU as `EXTERNAL_HEADERS/mach-o/loader.h`.
//! - `mach-o/fat.h`: cctools `include/mach-o/fat.h`, XNU `EXTERNAL_HEADERS/mach-o/fat.h`.
//! - `mach/machine.h`: XNU `osfmk/mach/machine.h`.

// ---- magic numbers -------------------------------------------------------------------------------------------------

/// `MH_MAGIC`: 32-bit Mach-O, host byte order (`mach-o/loader.h`). Recognised only to be rejected.
pub const MH_MAGIC: u32 = 0xfeed_face;
/// `MH_CIGAM`: 32-bit Mach-O, swapped byte order (`mach-o/loader.h`).
pub const MH_CIGAM: u32 = 0xcefa_edfe;
/// `MH_MAGIC_64`: 64-bit Mach-O, host byte order (`mach-o/loader.h`). Read as a little-endian `u32`.
pub const MH_MAGIC_64: u32 = 0xfeed_facf;
/// `MH_CIGAM_64`: 64-bit Mach-O, swapped (big-endian) byte order (`mach-o/loader.h`).
pub const MH_CIGAM_64: u32 = 0xcffa_edfe;
/// `FAT_MAGIC`: universal file with 32-bit `fat_arch` entries; stored big-endian (`mach-o/fat.h`).
pub const FAT_MAGIC: u32 = 0xcafe_babe;
/// `FAT_MAGIC_64`: universal file with 64-bit `fat_arch_64` entries; stored big-endian (`mach-o/fat.h`).
pub const FAT_MAGIC_64: u32 = 0xcafe_babf;

// ---- structure sizes (bytes) ---------------------------------------------------------------------------------------

/// `sizeof(struct mach_header_64)` = 32 bytes (`mach-o/loader.h`).
pub const MACH_HEADER_64_SIZE: usize = 32;
/// `sizeof(struct mach_header)` = 28 bytes (`mach-o/loader.h`).
pub const MACH_HEADER_SIZE: usize = 28;
/// `sizeof(struct fat_header)` = 8 bytes (`mach-o/fat.h`).
pub const FAT_HEADER_SIZE: usize = 8;
/// `sizeof(struct fat_arch)` = 20 bytes (`mach-o/fat.h`).
pub const FAT_ARCH_SIZE: usize = 20;
/// `sizeof(struct fat_arch_64)` = 32 bytes (`mach-o/fat.h`).
pub const FAT_ARCH_64_SIZE: usize = 32;
/// `sizeof(struct load_command)` = 8 bytes: `cmd`, `cmdsize` (`mach-o/loader.h`).
pub const LOAD_COMMAND_SIZE: usize = 8;
/// `sizeof(struct segment_command_64)` = 72 bytes (`mach-o/loader.h`).
pub const SEGMENT_COMMAND_64_SIZE: usize = 72;
/// `sizeof(struct section_64)` = 80 bytes (`mach-o/loader.h`).
pub const SECTION_64_SIZE: usize = 80;
/// `sizeof(struct uuid_command)` = 24 bytes (`mach-o/loader.h`).
pub const UUID_COMMAND_SIZE: usize = 24;
/// `sizeof(struct dylib_command)` = 24 bytes (`mach-o/loader.h`).
pub const DYLIB_COMMAND_SIZE: usize = 24;
/// `sizeof(struct version_min_command)` = 16 bytes (`mach-o/loader.h`).
pub const VERSION_MIN_COMMAND_SIZE: usize = 16;
/// `sizeof(struct build_version_command)` = 24 bytes, not counting the `build_tool_version` entries that follow
/// (`mach-o/loader.h`).
pub const BUILD_VERSION_COMMAND_SIZE: usize = 24;

// ---- file types (mach_header.filetype, mach-o/loader.h) ------------------------------------------------------------

/// `MH_OBJECT`: relocatable object file (`mach-o/loader.h`).
pub const MH_OBJECT: u32 = 0x1;
/// `MH_EXECUTE`: demand-paged executable (`mach-o/loader.h`).
pub const MH_EXECUTE: u32 = 0x2;
/// `MH_DYLIB`: dynamically bound shared library (`mach-o/loader.h`).
pub const MH_DYLIB: u32 = 0x6;
/// `MH_DYLINKER`: the dynamic link editor, dyld (`mach-o/loader.h`).
pub const MH_DYLINKER: u32 = 0x7;
/// `MH_BUNDLE`: dynamically bound bundle (`mach-o/loader.h`).
pub const MH_BUNDLE: u32 = 0x8;
/// `MH_DSYM`: companion file with only debug sections (`mach-o/loader.h`).
pub const MH_DSYM: u32 = 0xa;

// ---- load commands (load_command.cmd, mach-o/loader.h) -------------------------------------------------------------

/// `LC_REQ_DYLD`: flag bit or-ed into commands dyld must understand (`mach-o/loader.h`).
pub const LC_REQ_DYLD: u32 = 0x8000_0000;
/// `LC_SEGMENT`: 32-bit segment (`mach-o/loader.h`).
pub const LC_SEGMENT: u32 = 0x1;
/// `LC_SYMTAB`: symbol table (`mach-o/loader.h`).
pub const LC_SYMTAB: u32 = 0x2;
/// `LC_LOAD_DYLIB`: a dylib this image links against (`mach-o/loader.h`).
pub const LC_LOAD_DYLIB: u32 = 0xc;
/// `LC_ID_DYLIB`: a dylib's own install name (`mach-o/loader.h`).
pub const LC_ID_DYLIB: u32 = 0xd;
/// `LC_ID_DYLINKER`: dyld's own name (`mach-o/loader.h`).
pub const LC_ID_DYLINKER: u32 = 0xf;
/// `LC_SEGMENT_64`: 64-bit segment (`mach-o/loader.h`).
pub const LC_SEGMENT_64: u32 = 0x19;
/// `LC_UUID`: the image's 128-bit UUID (`mach-o/loader.h`).
pub const LC_UUID: u32 = 0x1b;
/// `LC_CODE_SIGNATURE`: code signature blob (`mach-o/loader.h`).
pub const LC_CODE_SIGNATURE: u32 = 0x1d;
/// `LC_VERSION_MIN_MACOSX` (`mach-o/loader.h`).
pub const LC_VERSION_MIN_MACOSX: u32 = 0x24;
/// `LC_VERSION_MIN_IPHONEOS` (`mach-o/loader.h`).
pub const LC_VERSION_MIN_IPHONEOS: u32 = 0x25;
/// `LC_MAIN` = `0x28 | LC_REQ_DYLD`: entry point (`mach-o/loader.h`).
pub const LC_MAIN: u32 = 0x28 | LC_REQ_DYLD;
/// `LC_VERSION_MIN_TVOS` (`mach-o/loader.h`).
pub const LC_VERSION_MIN_TVOS: u32 = 0x2f;
/// `LC_VERSION_MIN_WATCHOS` (`mach-o/loader.h`).
pub const LC_VERSION_MIN_WATCHOS: u32 = 0x30;
/// `LC_BUILD_VERSION`: platform, minimum OS and SDK (`mach-o/loader.h`).
pub const LC_BUILD_VERSION: u32 = 0x32;

// ---- platforms (build_version_command.platform, mach-o/loader.h `PLATFORM_*`) -------------------------------------

/// `PLATFORM_MACOS` (`mach-o/loader.h`).
pub const PLATFORM_MACOS: u32 = 1;
/// `PLATFORM_IOS` (`mach-o/loader.h`).
pub const PLATFORM_IOS: u32 = 2;
/// `PLATFORM_TVOS` (`mach-o/loader.h`).
pub const PLATFORM_TVOS: u32 = 3;
/// `PLATFORM_WATCHOS` (`mach-o/loader.h`).
pub const PLATFORM_WATCHOS: u32 = 4;
/// `PLATFORM_BRIDGEOS` (`mach-o/loader.h`).
pub const PLATFORM_BRIDGEOS: u32 = 5;
/// `PLATFORM_MACCATALYST` (`mach-o/loader.h`).
pub const PLATFORM_MACCATALYST: u32 = 6;
/// `PLATFORM_IOSSIMULATOR` (`mach-o/loader.h`).
pub const PLATFORM_IOSSIMULATOR: u32 = 7;
/// `PLATFORM_TVOSSIMULATOR` (`mach-o/loader.h`).
pub const PLATFORM_TVOSSIMULATOR: u32 = 8;
/// `PLATFORM_WATCHOSSIMULATOR` (`mach-o/loader.h`).
pub const PLATFORM_WATCHOSSIMULATOR: u32 = 9;
/// `PLATFORM_DRIVERKIT` (`mach-o/loader.h`).
pub const PLATFORM_DRIVERKIT: u32 = 10;
/// `PLATFORM_VISIONOS` (`mach-o/loader.h`, Xcode 15+).
pub const PLATFORM_VISIONOS: u32 = 11;
/// `PLATFORM_VISIONOSSIMULATOR` (`mach-o/loader.h`, Xcode 15+).
pub const PLATFORM_VISIONOSSIMULATOR: u32 = 12;

// ---- CPU types (mach/machine.h) ------------------------------------------------------------------------------------

/// `CPU_ARCH_MASK`: capability bits of a `cpu_type_t` (`mach/machine.h`).
pub const CPU_ARCH_MASK: u32 = 0xff00_0000;
/// `CPU_ARCH_ABI64`: 64-bit ABI bit of a `cpu_type_t` (`mach/machine.h`).
pub const CPU_ARCH_ABI64: u32 = 0x0100_0000;
/// `CPU_ARCH_ABI64_32`: ILP32 ABI on 64-bit hardware (`mach/machine.h`).
pub const CPU_ARCH_ABI64_32: u32 = 0x0200_0000;
/// `CPU_TYPE_X86` (= `CPU_TYPE_I386`) (`mach/machine.h`).
pub const CPU_TYPE_X86: u32 = 7;
/// `CPU_TYPE_X86_64` = `CPU_TYPE_X86 | CPU_ARCH_ABI64` (`mach/machine.h`).
pub const CPU_TYPE_X86_64: u32 = CPU_TYPE_X86 | CPU_ARCH_ABI64;
/// `CPU_TYPE_ARM` (`mach/machine.h`).
pub const CPU_TYPE_ARM: u32 = 12;
/// `CPU_TYPE_ARM64` = `CPU_TYPE_ARM | CPU_ARCH_ABI64` (`mach/machine.h`).
pub const CPU_TYPE_ARM64: u32 = CPU_TYPE_ARM | CPU_ARCH_ABI64;
/// `CPU_TYPE_ARM64_32` = `CPU_TYPE_ARM | CPU_ARCH_ABI64_32` (watchOS) (`mach/machine.h`).
pub const CPU_TYPE_ARM64_32: u32 = CPU_TYPE_ARM | CPU_ARCH_ABI64_32;

/// `CPU_SUBTYPE_MASK`: capability bits of a `cpu_subtype_t`; mask them off before comparing subtypes
/// (`mach/machine.h`).
pub const CPU_SUBTYPE_MASK: u32 = 0xff00_0000;
/// `CPU_SUBTYPE_LIB64`: 64-bit libraries capability bit (x86_64 executables) (`mach/machine.h`).
pub const CPU_SUBTYPE_LIB64: u32 = 0x8000_0000;
/// `CPU_SUBTYPE_PTRAUTH_ABI`: arm64e binary built for the versioned pointer-authentication ABI (`mach/machine.h`).
pub const CPU_SUBTYPE_PTRAUTH_ABI: u32 = 0x8000_0000;
/// `CPU_SUBTYPE_ARM64_ALL` (`mach/machine.h`).
pub const CPU_SUBTYPE_ARM64_ALL: u32 = 0;
/// `CPU_SUBTYPE_ARM64_V8` (`mach/machine.h`).
pub const CPU_SUBTYPE_ARM64_V8: u32 = 1;
/// `CPU_SUBTYPE_ARM64E`: arm64 with pointer authentication (`mach/machine.h`).
pub const CPU_SUBTYPE_ARM64E: u32 = 2;
/// `CPU_SUBTYPE_X86_64_ALL` (`mach/machine.h`).
pub const CPU_SUBTYPE_X86_64_ALL: u32 = 3;
/// `CPU_SUBTYPE_X86_64_H`: Haswell and later (`mach/machine.h`).
pub const CPU_SUBTYPE_X86_64_H: u32 = 8;

// ---- segment and section names -------------------------------------------------------------------------------------

/// `SEG_TEXT` = `"__TEXT"` (`mach-o/loader.h`).
pub const SEG_TEXT: &[u8] = b"__TEXT";
/// `SEG_DATA` = `"__DATA"` (`mach-o/loader.h`).
pub const SEG_DATA: &[u8] = b"__DATA";
/// `SECT_TEXT` = `"__text"` (`mach-o/loader.h`).
pub const SECT_TEXT: &[u8] = b"__text";
/// `"__crash_info"`: the section holding `crashreporter_annotations_t` (Libc `CrashReporterClient.h`,
/// `CRASHREPORTER_ANNOTATIONS_SECTION`). Found in `__DATA` (and in `__DATA_DIRTY` in some system libraries).
pub const SECT_CRASH_INFO: &[u8] = b"__crash_info";
/// `"__DATA_DIRTY"`: segment some system libraries put `__crash_info` in.
pub const SEG_DATA_DIRTY: &[u8] = b"__DATA_DIRTY";
/// `"__unwind_info"`: Apple compact unwind tables in `__TEXT` (`mach-o/compact_unwind_encoding.h`).
pub const SECT_UNWIND_INFO: &[u8] = b"__unwind_info";
/// `"__eh_frame"`: DWARF call-frame information in `__TEXT` (the compact unwind's `UNWIND_*_MODE_DWARF` entries
/// point into it).
pub const SECT_EH_FRAME: &[u8] = b"__eh_frame";
