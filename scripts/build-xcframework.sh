#!/usr/bin/env bash
# Builds the reporter static library for iOS (and, in the Mac build, macOS) and packages it as
# RustCrashReporterC.xcframework: one static framework per slice, RustCrashReporterC.framework (module
# RustCrashReporterC: the C ABI of reporter/src/ffi.rs), whose binary is the static library, with the header
# reporter/include/crash_reporter.h in Headers/, a framework module map, Info.plist and apple/PrivacyInfo.xcprivacy
# (the layout Apple documents for a static library that needs a privacy manifest; written and checked by
# scripts/apple_framework.py, which needs no Xcode). Swift apps add the package in Package.swift and
# `import RustCrashReporter` (swift/Sources/RustCrashReporter, a Swift API over the C calls).
#
# Usage:
#   scripts/build-xcframework.sh                 on a Mac: release static libraries for the three iOS targets,
#                                                simulator slices joined with lipo, one static framework per
#                                                slice, XCFramework of them in
#                                                target/ios/RustCrashReporterC.xcframework (with a macOS slice for
#                                                `swift test`); signed when CODESIGN_IDENTITY is set
#   scripts/build-xcframework.sh --cargo-only    anywhere with Debian's Rust (the Linux CI): only the cargo part,
#                                                with -Zbuild-std, in target/apple (debug profile, the same builds
#                                                as the CI step it replaces), then the checks below, then one
#                                                framework per target assembled from its library and checked in
#                                                target/apple/frameworks/<target>/ (no lipo, no XCFramework: the
#                                                framework assembly is the same code the Mac build runs)
#   --debug / --release                          profile (default: release on a Mac, debug with --cargo-only)
#   --targets "T1 T2"                            subset of the three targets (--cargo-only only; default: all three)
#
# Checks, in both modes, for every static library built:
#   - the file exists and every member is a Mach-O object for the target's CPU (ARM64 / X86_64);
#   - every object names its platform, and it is the one the target requires: iOS for aarch64-apple-ios, the iOS
#     Simulator for aarch64-apple-ios-sim (LC_BUILD_VERSION), iOS-or-simulator for x86_64-apple-ios (the linker
#     treats x86_64 iOS objects as simulator objects). A device slice in a simulator app fails to link ("building
#     for iOS Simulator, but linking in object file built for iOS");
#   - every function the header declares (crash_reporter_*) is defined and exported by the library, and the library
#     exports no crash_reporter_* function the header lacks (a stale header);
#   - no undefined symbol (nm -u) is a non-public Apple API App Store processing rejects (ITMS-90338): the
#     `_mach_vm_*` family (<mach/mach_vm.h> is #error in the iOS SDK; use vm_read_overwrite / vm_deallocate), and the
#     private symbols listed in `private_symbol_pattern` below. Applies to every iOS slice, simulator included (the
#     same objects go to the store's checks in a universal build).
#   - the framework (both modes): the binary is the library byte for byte and a static archive (or a fat file of
#     archives), Info.plist parses and has CFBundleExecutable, CFBundleIdentifier, CFBundleName, CFBundlePackageType
#     FMWK, versions, CFBundleSupportedPlatforms and MinimumOSVersion / LSMinimumSystemVersion, the module map
#     declares module RustCrashReporterC and names the header it ships, the manifest parses with only Apple's keys
#     (scripts/apple_framework.py check; `scripts/apple_framework.py self-test` tests these checks on fake archives).
#     On a Mac the same checks run over the finished XCFramework (check-xcframework).
# Whether the header matches reporter/src/ffi.rs is checked by `cargo test -p reporter --test header` (part of
# `cargo test --workspace`); this script does not repeat it.
#
# Both modes need python3 (scripts/apple_framework.py, standard library only).
# Mac requirements (full mode): Xcode 15+ (xcodebuild, lipo), rustup. The script runs
# `rustup target add aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios` when rustup is present.
# Linux requirements (--cargo-only): Debian's rustc-web cargo-web rust-web-src (see ../shared/docs/toolchain.md §1)
# and llvm (llvm-nm, llvm-objdump). Never `rustup target add` on the Linux CI machine.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
header="$repo/reporter/include/crash_reporter.h"
all_targets=(aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios)

mode=full
profile=""
targets=("${all_targets[@]}")
while [ "$#" -gt 0 ]; do
  case "$1" in
    --cargo-only) mode="cargo-only" ;;
    --debug) profile=debug ;;
    --release) profile=release ;;
    --targets)
      [ "$#" -ge 2 ] || { echo "build-xcframework: --targets needs a value" >&2; exit 2; }
      read -r -a targets <<<"$2"
      shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-xcframework: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for t in "${targets[@]}"; do
  case " ${all_targets[*]} " in
    *" $t "*) ;;
    *) echo "build-xcframework: unsupported target $t (one of: ${all_targets[*]})" >&2; exit 2 ;;
  esac
done
if [ "$mode" = full ] && [ "${#targets[@]}" -ne 3 ]; then
  echo "build-xcframework: --targets is for --cargo-only; the XCFramework needs all three targets" >&2
  exit 2
fi
if [ -z "$profile" ]; then
  if [ "$mode" = full ]; then profile=release; else profile=debug; fi
fi
profile_args=()
[ "$profile" = release ] && profile_args=(--release)

log() { printf '==> build-xcframework: %s\n' "$*"; }
die() { printf 'build-xcframework: %s\n' "$*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------------------------------------------
if [ "$mode" = cargo-only ]; then
  # Debian's compiler and cargo, exactly like .ci/run's Apple steps: rustup's stable rustc cannot build the std
  # source Debian ships, and -Zbuild-std needs RUSTC_BOOTSTRAP on a stable compiler (cross-target builds only).
  export PATH="/usr/bin:$PATH"
  export RUSTC=/usr/bin/rustc
  export RUSTC_BOOTSTRAP=1
  unset RUSTC_WRAPPER RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
  cargo=(/usr/bin/cargo)
  target_dir="${APPLE_TARGET_DIR:-$repo/target/apple}"
  build_std=("-Zbuild-std=std,panic_abort")
  for tool in /usr/bin/cargo /usr/bin/rustc; do
    [ -x "$tool" ] || die "$tool missing; install rustc-web cargo-web rust-web-src (Debian)"
  done
  [ -d /usr/lib/rustlib/src/rust/library ] || die "std source missing; install rust-web-src (Debian)"
  nm_tool=(llvm-nm)
  objdump_tool=(llvm-objdump)
  if ! command -v llvm-nm >/dev/null || ! command -v llvm-objdump >/dev/null; then
    die "llvm-nm or llvm-objdump missing; install llvm (Debian)"
  fi
else
  [ "$(uname -s)" = Darwin ] || die "the full build needs a Mac with Xcode; use --cargo-only elsewhere"
  command -v xcodebuild >/dev/null || die "xcodebuild missing: install Xcode and run xcode-select -s /Applications/Xcode.app"
  command -v cargo >/dev/null || die "cargo missing: install Rust with rustup (https://rustup.rs)"
  if command -v rustup >/dev/null; then
    rustup target add "${all_targets[@]}"
  else
    log "rustup not found; assuming the standard libraries for ${all_targets[*]} are installed"
  fi
  cargo=(cargo)
  target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  # Objects built for the oldest iOS the package supports (Package.swift: .iOS(.v15)), so the linker of an app with
  # that minimum does not warn about objects built for a newer iOS than the app.
  export IPHONEOS_DEPLOYMENT_TARGET="${IPHONEOS_DEPLOYMENT_TARGET:-15.0}"
  build_std=()
  # Xcode's nm and objdump are LLVM's and take the same options; prefer llvm-* when installed (e.g. Homebrew).
  if command -v llvm-nm >/dev/null && command -v llvm-objdump >/dev/null; then
    nm_tool=(llvm-nm)
    objdump_tool=(llvm-objdump)
  else
    nm_tool=(xcrun nm)
    objdump_tool=(xcrun objdump)
  fi
fi
[ -f "$header" ] || die "header missing: $header"
command -v python3 >/dev/null || die "python3 missing (scripts/apple_framework.py); install python3"
framework_tool=(python3 "$repo/scripts/apple_framework.py")

# --- checks ------------------------------------------------------------------------------------------------------
# Functions the header declares: `... crash_reporter_xxx(`.
header_functions() {
  grep -oE '\bcrash_reporter_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u
}

# Undefined symbols App Store processing rejects as non-public API (ITMS-90338), as an extended regular expression
# over `nm -u` names (Mach-O C names carry a leading underscore). `_mach_vm_*`: <mach/mach_vm.h> is #error in the
# iOS SDK and Rust-on-iOS apps were rejected for exactly these references. `_thread_set_exception_ports` and
# `_task_set_exception_ports` are public (<mach/thread_act.h>, <mach/task.h>) and are not listed.
# `_dyld_get_all_image_infos` and `__dyld_get_all_image_infos` are private dyld SPI; `_task_for_pid` is
# not available to iOS apps; `_proc_pidinfo`/`_proc_pid*` (libproc) and `_csops` are private on iOS.
private_symbol_pattern='^_(mach_vm_[a-z_]+|_?dyld_get_all_image_infos|task_for_pid|proc_pid[a-z_]*|csops)$'

check_private_symbols() { # check_private_symbols TARGET LIBRARY
  local t="$1" lib="$2" undefined bad
  undefined="$("${nm_tool[@]}" -u "$lib" 2>/dev/null | awk 'NF {print $NF}' | sort -u)"
  [ -n "$undefined" ] || die "$t: $lib: nm -u listed no undefined symbols (a std library always has some)"
  bad="$(grep -E "$private_symbol_pattern" <<<"$undefined" | tr '\n' ' ' || true)"
  [ -z "$bad" ] || die "$t: $lib references non-public API (App Store rejects it, ITMS-90338): $bad"
  log "$t: no non-public symbol referenced ($(wc -l <<<"$undefined") undefined symbols checked)"
}

check_lib() { # check_lib TARGET LIBRARY
  local t="$1" lib="$2" want_cpu allowed_platforms summary objects cpus platforms with_platform
  [ -s "$lib" ] || die "$t: $lib missing or empty"
  case "$t" in
    aarch64-*) want_cpu=ARM64 ;;
    x86_64-*) want_cpu=X86_64 ;;
  esac
  # Platform load command of each object, as llvm-objdump prints it: LC_VERSION_MIN_IPHONEOS ("ios-min": iOS, or
  # the simulator when the CPU is x86_64) or LC_BUILD_VERSION's platform ("ios", "iossimulator", or a number:
  # 2 = PLATFORM_IOS, 7 = PLATFORM_IOSSIMULATOR).
  case "$t" in
    aarch64-apple-ios) allowed_platforms="ios-min ios 2" ;;
    aarch64-apple-ios-sim) allowed_platforms="iossimulator 7" ;;
    x86_64-apple-ios) allowed_platforms="ios-min iossimulator 7" ;;
  esac

  # One pass over every member's Mach-O header and load commands.
  summary="$("${objdump_tool[@]}" --macho --private-headers "$lib" 2>&1 | awk '
    /^Mach header/ { objects++ }
    /magic +cputype/ { getline; cpu[$2]++ }
    /cmd LC_VERSION_MIN_IPHONEOS/ { platform["ios-min"]++ }
    /cmd LC_BUILD_VERSION/ { build_version = 1; next }
    build_version && /^ *platform / { platform[$2]++; build_version = 0 }
    END {
      printf "objects %d\n", objects
      for (c in cpu) printf "cpu %s %d\n", c, cpu[c]
      for (p in platform) printf "platform %s %d\n", p, platform[p]
    }')"
  objects="$(awk '$1 == "objects" {print $2}' <<<"$summary")"
  cpus="$(awk '$1 == "cpu" {print $2 "=" $3}' <<<"$summary" | tr '\n' ' ')"
  platforms="$(awk '$1 == "platform" {print $2 "=" $3}' <<<"$summary" | tr '\n' ' ')"
  [ "${objects:-0}" -gt 0 ] || die "$t: $lib: no Mach-O objects found"
  [ "$cpus" = "$want_cpu=$objects " ] || die "$t: $lib: want $objects $want_cpu objects, found: $cpus"
  with_platform=0
  while read -r kind value count; do
    [ "$kind" = platform ] || continue
    case " $allowed_platforms " in
      *" $value "*) with_platform=$((with_platform + count)) ;;
      *) die "$t: $lib: $count objects are for platform $value, want one of: $allowed_platforms" ;;
    esac
  done <<<"$summary"
  [ "$with_platform" -eq "$objects" ] || \
    die "$t: $lib: only $with_platform of $objects objects name a platform ($platforms)"

  # Symbols: the header's functions, defined and external (Mach-O C symbols carry a leading underscore).
  local defined want missing extra
  defined="$("${nm_tool[@]}" --defined-only --extern-only "$lib" 2>/dev/null \
    | awk '$2 == "T" {print $3}' | sed -n 's/^_\(crash_reporter_[a-z0-9_]*\)$/\1/p' | sort -u)"
  want="$(header_functions)"
  [ -n "$want" ] || die "no crash_reporter_* functions found in $header"
  missing="$(comm -23 <(printf '%s\n' "$want") <(printf '%s\n' "$defined") | tr '\n' ' ')"
  extra="$(comm -13 <(printf '%s\n' "$want") <(printf '%s\n' "$defined") | tr '\n' ' ')"
  [ -z "$missing" ] || die "$t: $lib does not export: $missing"
  [ -z "$extra" ] || die "$t: $lib exports functions the header lacks (stale header?): $extra"
  log "$t: ok: $(du -h "$lib" | cut -f1), $objects objects, $cpus, platform $platforms, exports $(tr '\n' ' ' <<<"$want")"
}

# --- cargo -------------------------------------------------------------------------------------------------------
cd "$repo"
libs=()
for t in "${targets[@]}"; do
  log "cargo build -p reporter --lib --target $t ($profile)"
  start=$(date +%s)
  "${cargo[@]}" build --locked ${build_std[@]+"${build_std[@]}"} --target "$t" --target-dir "$target_dir" \
    -p reporter --lib ${profile_args[@]+"${profile_args[@]}"}
  lib="$target_dir/$t/$profile/libreporter.a"
  log "$t built in $(( $(date +%s) - start )) s: $lib"
  check_lib "$t" "$lib"
  check_private_symbols "$t" "$lib"
  libs+=("$lib")
done

if [ "$mode" = cargo-only ]; then
  # The framework each library ships in, assembled and checked exactly as the Mac build does it, one per target
  # (single-architecture: joining the simulator targets takes lipo, which Debian's llvm does not ship).
  for i in "${!targets[@]}"; do
    t="${targets[$i]}"
    case "$t" in
      aarch64-apple-ios) fw_platform=ios ;;
      *) fw_platform=ios-simulator ;;
    esac
    "${framework_tool[@]}" assemble --platform "$fw_platform" --library "${libs[$i]}" \
      --out "$target_dir/frameworks/$t" --header "$header" --privacy "$repo/apple/PrivacyInfo.xcprivacy" \
      --min-os "${IPHONEOS_DEPLOYMENT_TARGET:-15.0}"
  done
  log "cargo-only: ${#libs[@]} static libraries built and checked, each in a checked static framework in" \
    "$target_dir/frameworks (no XCFramework: that needs Xcode)"
  exit 0
fi

# --- XCFramework (Mac only) --------------------------------------------------------------------------------------
# Module, framework and XCFramework are named RustCrashReporterC: `CrashReporter` is PLCrashReporter's module, and an
# app that links both (or a dependency that does) would fail to build with two modules of one name. The framework
# must carry the module's name: `import RustCrashReporterC` finds RustCrashReporterC.framework/Modules/module.modulemap
# on the framework search path.
module=RustCrashReporterC
out="$repo/target/ios"
xcf="$out/$module.xcframework"
rm -rf "$out/device" "$out/simulator" "$out/macos" "$out/headers" "$out/frameworks" "$xcf"
mkdir -p "$out/device" "$out/simulator" "$out/macos"

# A macOS slice too (arm64 + x86_64), so the Swift package builds and its tests run with `swift test` on a Mac.
# Built for the macOS that Package.swift declares (and the framework's LSMinimumSystemVersion states).
export MACOSX_DEPLOYMENT_TARGET="${MACOSX_DEPLOYMENT_TARGET:-12.0}"
mac_targets=(aarch64-apple-darwin x86_64-apple-darwin)
if command -v rustup >/dev/null; then rustup target add "${mac_targets[@]}"; fi
for t in "${mac_targets[@]}"; do
  log "cargo build -p reporter --lib --target $t ($profile)"
  "${cargo[@]}" build --locked --target "$t" --target-dir "$target_dir" -p reporter --lib \
    ${profile_args[@]+"${profile_args[@]}"}
done

cp "$target_dir/aarch64-apple-ios/$profile/libreporter.a" "$out/device/libreporter.a"
lipo -create \
  "$target_dir/aarch64-apple-ios-sim/$profile/libreporter.a" \
  "$target_dir/x86_64-apple-ios/$profile/libreporter.a" \
  -output "$out/simulator/libreporter.a"
lipo -create \
  "$target_dir/aarch64-apple-darwin/$profile/libreporter.a" \
  "$target_dir/x86_64-apple-darwin/$profile/libreporter.a" \
  -output "$out/macos/libreporter.a"
lipo -info "$out/simulator/libreporter.a" "$out/macos/libreporter.a"

# One static framework per slice (scripts/apple_framework.py assemble: the library as the framework's binary,
# Headers/crash_reporter.h, Modules/module.modulemap, Info.plist, PrivacyInfo.xcprivacy; checked as it is written).
# Apple's documented way to ship a static library's privacy manifest ("Placing content in a bundle", "Distribute
# your static library with a privacy manifest"); a manifest beside a bare .a in a slice is not read.
plutil -lint "$repo/apple/PrivacyInfo.xcprivacy"
for slice in device:ios simulator:ios-simulator macos:macos; do
  dir="${slice%%:*}"
  min_os="$IPHONEOS_DEPLOYMENT_TARGET"
  [ "$dir" = macos ] && min_os="$MACOSX_DEPLOYMENT_TARGET"
  "${framework_tool[@]}" assemble --platform "${slice#*:}" --library "$out/$dir/libreporter.a" \
    --out "$out/frameworks/$dir" --header "$header" --privacy "$repo/apple/PrivacyInfo.xcprivacy" --min-os "$min_os"
  # Apple's own parser too, over what was written (macOS frameworks keep both files in Resources/).
  res="$out/frameworks/$dir/$module.framework"
  [ "$dir" = macos ] && res="$res/Resources"
  plutil -lint "$res/Info.plist" "$res/PrivacyInfo.xcprivacy"
done

xcodebuild -create-xcframework \
  -framework "$out/frameworks/device/$module.framework" \
  -framework "$out/frameworks/simulator/$module.framework" \
  -framework "$out/frameworks/macos/$module.framework" \
  -output "$xcf"

# What ships, checked again: xcodebuild's Info.plist lists three framework slices (iOS, iOS simulator, macOS) and
# each is complete (the same checks as above). What cannot be checked here: whether Xcode's privacy report picks the
# manifest up; that takes an archive of an app that links it (Product > Archive, then Generate Privacy Report).
"${framework_tool[@]}" check-xcframework "$xcf" --header "$header" --privacy "$repo/apple/PrivacyInfo.xcprivacy"

# Apple asks for signed XCFrameworks from SDK vendors ("Verifying the origin of your XCFrameworks"); signed when an
# identity is given (e.g. CODESIGN_IDENTITY="Apple Distribution: ..."), unsigned otherwise (local development).
if [ -n "${CODESIGN_IDENTITY:-}" ]; then
  codesign --timestamp -v --sign "$CODESIGN_IDENTITY" "$xcf"
  codesign --verify --verbose "$xcf"
else
  log "XCFramework not signed (set CODESIGN_IDENTITY to sign it for a release)"
fi

# Release artifact for SwiftPM's `url:` + `checksum:` binary target: the XCFramework zipped with its top directory
# (`ditto --keepParent`, as Apple's docs do), and its checksum, which is the SHA-256 of the zip (what
# `swift package compute-checksum` prints).
zip="$out/$module.xcframework.zip"
rm -f "$zip"
(cd "$out" && ditto -c -k --sequesterRsrc --keepParent "$module.xcframework" "$zip")
if command -v sha256sum >/dev/null; then sum="$(sha256sum "$zip" | cut -d' ' -f1)"; else sum="$(shasum -a 256 "$zip" | cut -d' ' -f1)"; fi
printf '%s\n' "$sum" >"$zip.sha256"
log "release zip: $zip"
log "SwiftPM checksum: $sum (also in $zip.sha256)"
log "done: $xcf (C and Objective-C: import $module; Swift apps use Package.swift: import RustCrashReporter)"
