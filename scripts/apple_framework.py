#!/usr/bin/env python3
"""Wraps the reporter's static library in a static framework and checks the result (no Xcode needed).

Why a framework: Apple's documentation ("Placing content in a bundle", section "Distribute your static library with
a privacy manifest"; "Adding a privacy manifest to your app or third-party SDK") says a static library that needs a
privacy manifest ships as a static *framework* carrying the manifest, inside an XCFramework; a `PrivacyInfo.xcprivacy`
next to a bare `.a` is not read. scripts/build-xcframework.sh calls `assemble` for each slice on a Mac, then
`xcodebuild -create-xcframework -framework ...`, then `check-xcframework`; its `--cargo-only` mode (Linux CI) calls
`assemble` and `check` on the three iOS libraries it built. `self-test` exercises all of it on a fake archive.

Layout written (the module is RustCrashReporterC, what swift/Sources/RustCrashReporter imports and Package.swift's
binary target is named; the framework must carry the module's name for `import RustCrashReporterC` to find it):

  iOS device / simulator (shallow bundle):       macOS (versioned bundle, as macOS frameworks must be):
    RustCrashReporterC.framework/                  RustCrashReporterC.framework/
      RustCrashReporterC    (the static archive)     RustCrashReporterC -> Versions/Current/RustCrashReporterC
      Info.plist                                     Headers, Modules, Resources -> Versions/Current/...
      PrivacyInfo.xcprivacy                          Versions/Current -> A
      Headers/crash_reporter.h                       Versions/A/RustCrashReporterC, Headers/, Modules/,
      Modules/module.modulemap                       Versions/A/Resources/{Info.plist,PrivacyInfo.xcprivacy}

Where the manifest goes (framework root on iOS, Resources/ on macOS) follows "Adding a privacy manifest to your app
or third-party SDK". Info.plist keys are the ones Xcode writes for a framework target (CFBundleExecutable,
CFBundleIdentifier, CFBundleName, CFBundlePackageType FMWK, versions, CFBundleSupportedPlatforms, and
MinimumOSVersion on iOS / LSMinimumSystemVersion on macOS).

Usage:
  apple_framework.py assemble --platform ios|ios-simulator|macos --library LIB.a --out DIR
                              [--header H] [--privacy P] [--min-os V] [--version V] [--bundle-id ID]
  apple_framework.py check FRAMEWORK --platform ... [--library LIB.a] [--header H] [--privacy P]
  apple_framework.py check-xcframework XCFRAMEWORK [--header H] [--privacy P]
  apple_framework.py self-test
Exit status 0 when everything passed; 1 with one line naming the first problem otherwise.
"""

import argparse
import os
import pathlib
import plistlib
import re
import shutil
import struct
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
MODULE = "RustCrashReporterC"
HEADER = REPO / "reporter" / "include" / "crash_reporter.h"
PRIVACY = REPO / "apple" / "PrivacyInfo.xcprivacy"
# Placeholder reverse-DNS prefix (the same as ios-harness/project.yml's); a release passes --bundle-id or sets
# CRASH_REPORTER_BUNDLE_ID.
DEFAULT_BUNDLE_ID = "com.example.crashreporter." + MODULE

# What the Rust static library needs from the SDK (ios-harness/project.yml: `rustc --print native-static-libs`):
# declared in the module map so that clang/Swift autolink them into any target importing the module.
LINK_FRAMEWORKS = ("Security", "CoreFoundation")
LINK_LIBRARIES = ("iconv",)

PLATFORMS = {
    # platform: (CFBundleSupportedPlatforms, minimum-version key, default minimum, versioned bundle, xcframework
    # SupportedPlatform, SupportedPlatformVariant)
    "ios": ("iPhoneOS", "MinimumOSVersion", "16.0", False, "ios", None),
    "ios-simulator": ("iPhoneSimulator", "MinimumOSVersion", "16.0", False, "ios", "simulator"),
    "macos": ("MacOSX", "LSMinimumSystemVersion", "12.0", True, "macos", None),
}

# Top-level keys of a privacy manifest (Apple, "Privacy manifest files"): App Store Connect rejects manifests with
# unexpected keys, so nothing else may appear.
PRIVACY_KEYS = {
    "NSPrivacyTracking": bool,
    "NSPrivacyTrackingDomains": list,
    "NSPrivacyCollectedDataTypes": list,
    "NSPrivacyAccessedAPITypes": list,
}
REQUIRED_INFO_KEYS = (
    "CFBundleExecutable",
    "CFBundleIdentifier",
    "CFBundleName",
    "CFBundlePackageType",
    "CFBundleShortVersionString",
    "CFBundleVersion",
    "CFBundleSupportedPlatforms",
)

AR_MAGIC = b"!<arch>\n"
FAT_MAGIC = 0xCAFEBABE  # <mach-o/fat.h>: big-endian fat header, 32-bit fat_arch entries (20 bytes)
FAT_MAGIC_64 = 0xCAFEBABF  # fat_arch_64 entries (32 bytes)


class CheckError(Exception):
    """One problem found in a framework or XCFramework (the message names the file)."""


def log(msg):
    print(f"==> apple_framework: {msg}", flush=True)


def workspace_version():
    """The workspace version from Cargo.toml ([workspace.package] version), e.g. "0.1.0"."""
    text = (REPO / "Cargo.toml").read_text()
    m = re.search(r'^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    if not m:
        raise CheckError("Cargo.toml: no version in [workspace.package]")
    return m.group(1)


def bundle_version(version):
    """CFBundleVersion must be one to three period-separated integers: "0.1.0-beta.2" gives "0.1.0"."""
    m = re.match(r"^(\d+(?:\.\d+){0,2})", version)
    if not m:
        raise CheckError(f"version {version!r} does not start with a number")
    return m.group(1)


def modulemap_text(header_name):
    lines = [f"framework module {MODULE} {{", f'    header "{header_name}"', "    export *"]
    lines += [f'    link framework "{f}"' for f in LINK_FRAMEWORKS]
    lines += [f'    link "{lib}"' for lib in LINK_LIBRARIES]
    lines.append("}")
    return "\n".join(lines) + "\n"


def info_plist(platform, min_os, version, bundle_id):
    supported, min_key = PLATFORMS[platform][0], PLATFORMS[platform][1]
    return {
        "CFBundleDevelopmentRegion": "en",
        "CFBundleExecutable": MODULE,
        "CFBundleIdentifier": bundle_id,
        "CFBundleInfoDictionaryVersion": "6.0",
        "CFBundleName": MODULE,
        "CFBundlePackageType": "FMWK",
        "CFBundleShortVersionString": bundle_version(version),
        "CFBundleVersion": bundle_version(version),
        "CFBundleSupportedPlatforms": [supported],
        min_key: min_os,
    }


def assemble(platform, library, out_dir, header=HEADER, privacy=PRIVACY, min_os=None, version=None,
             bundle_id=None):
    """Writes OUT_DIR/RustCrashReporterC.framework for PLATFORM from LIBRARY; returns its path."""
    library, header, privacy = pathlib.Path(library), pathlib.Path(header), pathlib.Path(privacy)
    for f in (library, header, privacy):
        if not f.is_file():
            raise CheckError(f"{f}: missing")
    _, _, default_min, versioned, _, _ = PLATFORMS[platform]
    min_os = min_os or default_min
    version = version or workspace_version()
    bundle_id = bundle_id or os.environ.get("CRASH_REPORTER_BUNDLE_ID") or DEFAULT_BUNDLE_ID
    fw = pathlib.Path(out_dir) / f"{MODULE}.framework"
    if fw.is_symlink() or fw.is_file():
        fw.unlink()
    elif fw.exists():
        shutil.rmtree(fw)
    content = fw / "Versions" / "A" if versioned else fw
    resources = content / "Resources" if versioned else content
    for d in (content / "Headers", content / "Modules", resources):
        d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(library, content / MODULE)
    shutil.copyfile(header, content / "Headers" / header.name)
    (content / "Modules" / "module.modulemap").write_text(modulemap_text(header.name))
    (resources / "Info.plist").write_bytes(
        plistlib.dumps(info_plist(platform, min_os, version, bundle_id), fmt=plistlib.FMT_XML))
    shutil.copyfile(privacy, resources / "PrivacyInfo.xcprivacy")
    if versioned:
        os.symlink("A", fw / "Versions" / "Current")
        for name in (MODULE, "Headers", "Modules", "Resources"):
            os.symlink(f"Versions/Current/{name}", fw / name)
    return fw


# --- checks -------------------------------------------------------------------------------------------------------

def load_plist(path):
    try:
        return plistlib.loads(path.read_bytes())
    except FileNotFoundError:
        raise CheckError(f"{path}: missing") from None
    except Exception as e:  # plistlib raises several types (InvalidFileException, ExpatError, ValueError)
        raise CheckError(f"{path}: not a valid property list: {e}") from None


def check_privacy(path, source=None):
    doc = load_plist(path)
    if not isinstance(doc, dict):
        raise CheckError(f"{path}: top level is not a dictionary")
    unexpected = sorted(set(doc) - set(PRIVACY_KEYS))
    if unexpected:
        raise CheckError(f"{path}: unexpected keys (App Store Connect rejects them): {', '.join(unexpected)}")
    for key, kind in PRIVACY_KEYS.items():
        if not isinstance(doc.get(key), kind):
            raise CheckError(f"{path}: {key} missing or not a {kind.__name__}")
    for i, entry in enumerate(doc["NSPrivacyAccessedAPITypes"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("NSPrivacyAccessedAPIType"), str)
                and isinstance(entry.get("NSPrivacyAccessedAPITypeReasons"), list)
                and entry["NSPrivacyAccessedAPITypeReasons"]):
            raise CheckError(f"{path}: NSPrivacyAccessedAPITypes[{i}] needs a type and at least one reason")
    if source is not None and path.read_bytes() != pathlib.Path(source).read_bytes():
        raise CheckError(f"{path}: differs from {source}")


def check_archive(path):
    """PATH is a static archive: `!<arch>` (thin) or a fat file whose every slice is one. Returns a description."""
    data = path.read_bytes()
    if data.startswith(AR_MAGIC):
        return "static archive"
    if len(data) >= 8:
        magic, count = struct.unpack(">II", data[:8])
        if magic in (FAT_MAGIC, FAT_MAGIC_64):
            entry = 20 if magic == FAT_MAGIC else 32
            if count == 0 or 8 + count * entry > len(data):
                raise CheckError(f"{path}: fat header with {count} slices does not fit the file")
            cpus = []
            for i in range(count):
                raw = data[8 + i * entry:8 + (i + 1) * entry]
                if magic == FAT_MAGIC:
                    cputype, _, offset, size, _ = struct.unpack(">iiIII", raw)
                else:
                    cputype, _, offset, size, _, _ = struct.unpack(">iiQQII", raw)
                if offset + size > len(data) or not data[offset:offset + size].startswith(AR_MAGIC):
                    raise CheckError(f"{path}: fat slice {i} (cputype {cputype:#x}) is not a static archive")
                cpus.append(f"{cputype:#x}")
            return f"fat static archive ({count} slices, cputypes {' '.join(cpus)})"
    raise CheckError(f"{path}: not a static archive (neither `!<arch>` nor a fat file of archives)")


def parse_modulemap(path):
    text = path.read_text()
    m = re.search(r"^\s*framework\s+module\s+(\w+)\s*\{", text, re.M)
    if not m:
        raise CheckError(f"{path}: no `framework module NAME {{` declaration")
    headers = re.findall(r'^\s*(?:umbrella\s+)?header\s+"([^"]+)"', text, re.M)
    return m.group(1), headers


def check_framework(fw, platform, library=None, header=HEADER, privacy=PRIVACY):
    """Raises CheckError unless FW is a complete static framework for PLATFORM; returns a one-line summary."""
    fw = pathlib.Path(fw)
    supported, min_key, _, versioned, _, _ = PLATFORMS[platform]
    if fw.name != f"{MODULE}.framework" or not fw.is_dir():
        raise CheckError(f"{fw}: want a directory named {MODULE}.framework")
    if versioned:
        current = fw / "Versions" / "Current"
        if not current.is_symlink() or os.readlink(current) != "A":
            raise CheckError(f"{current}: want a symlink to A")
        for name in (MODULE, "Headers", "Modules", "Resources"):
            link = fw / name
            if not link.is_symlink() or os.readlink(link) != f"Versions/Current/{name}":
                raise CheckError(f"{link}: want a symlink to Versions/Current/{name}")
        expected_root = {MODULE, "Headers", "Modules", "Resources", "Versions"}
        content, resources = fw / "Versions" / "A", fw / "Versions" / "A" / "Resources"
    else:
        expected_root = {MODULE, "Headers", "Modules", "Info.plist", "PrivacyInfo.xcprivacy"}
        content = resources = fw
    root = {p.name for p in fw.iterdir()}
    if root != expected_root:
        raise CheckError(f"{fw}: entries {sorted(root)}, want {sorted(expected_root)}")

    info_path = resources / "Info.plist"
    info = load_plist(info_path)
    if not isinstance(info, dict):
        raise CheckError(f"{info_path}: top level is not a dictionary")
    for key in REQUIRED_INFO_KEYS + (min_key,):
        if key not in info:
            raise CheckError(f"{info_path}: {key} missing")
    want = {"CFBundlePackageType": "FMWK", "CFBundleExecutable": MODULE, "CFBundleName": MODULE,
            "CFBundleSupportedPlatforms": [supported]}
    for key, value in want.items():
        if info[key] != value:
            raise CheckError(f"{info_path}: {key} is {info[key]!r}, want {value!r}")
    if not re.fullmatch(r"\d+(\.\d+){0,2}", str(info["CFBundleVersion"])):
        raise CheckError(f"{info_path}: CFBundleVersion {info['CFBundleVersion']!r} is not 1-3 integers")
    if not re.fullmatch(r"\d+(\.\d+){1,2}", str(info[min_key])):
        raise CheckError(f"{info_path}: {min_key} {info[min_key]!r} is not a version")

    binary = content / info["CFBundleExecutable"]
    if not binary.is_file():
        raise CheckError(f"{binary}: the executable Info.plist names is missing")
    kind = check_archive(binary)
    if library is not None and binary.read_bytes() != pathlib.Path(library).read_bytes():
        raise CheckError(f"{binary}: differs from {library}")

    modulemap = content / "Modules" / "module.modulemap"
    if not modulemap.is_file():
        raise CheckError(f"{modulemap}: missing")
    name, headers = parse_modulemap(modulemap)
    if name != MODULE:
        raise CheckError(f"{modulemap}: declares module {name}, want {MODULE}")
    if not headers:
        raise CheckError(f"{modulemap}: names no header")
    for h in headers:
        if not (content / "Headers" / h).is_file():
            raise CheckError(f"{modulemap}: header {h} is not in {content / 'Headers'}")
    if header is not None:
        shipped = content / "Headers" / pathlib.Path(header).name
        if pathlib.Path(header).name not in headers:
            raise CheckError(f"{modulemap}: does not name {pathlib.Path(header).name}")
        if shipped.read_bytes() != pathlib.Path(header).read_bytes():
            raise CheckError(f"{shipped}: differs from {header}")

    check_privacy(resources / "PrivacyInfo.xcprivacy", privacy)
    return f"{fw}: ok ({platform}: {kind}, {info[min_key]} minimum, module {name}, headers {' '.join(headers)})"


def platform_of(entry):
    for platform, spec in PLATFORMS.items():
        if entry.get("SupportedPlatform") == spec[4] and entry.get("SupportedPlatformVariant") == spec[5]:
            return platform
    raise CheckError(f"unexpected slice platform {entry.get('SupportedPlatform')!r} "
                     f"variant {entry.get('SupportedPlatformVariant')!r}")


def check_xcframework(xcf, header=HEADER, privacy=PRIVACY, want=("ios", "ios-simulator", "macos")):
    """Checks the XCFramework's Info.plist (xcodebuild's AvailableLibraries) and every framework it lists."""
    xcf = pathlib.Path(xcf)
    info = load_plist(xcf / "Info.plist")
    libraries = info.get("AvailableLibraries") if isinstance(info, dict) else None
    if not isinstance(libraries, list) or not libraries:
        raise CheckError(f"{xcf / 'Info.plist'}: no AvailableLibraries")
    found, lines = [], []
    for entry in libraries:
        path = entry.get("LibraryPath")
        if path != f"{MODULE}.framework":
            raise CheckError(f"{xcf}: slice {entry.get('LibraryIdentifier')} ships {path!r}, want a "
                             f"{MODULE}.framework (a bare library does not carry the privacy manifest)")
        platform = platform_of(entry)
        found.append(platform)
        lines.append(check_framework(xcf / entry["LibraryIdentifier"] / path, platform, header=header,
                                     privacy=privacy))
    if sorted(found) != sorted(want):
        raise CheckError(f"{xcf}: slices for {sorted(found)}, want {sorted(want)}")
    return lines


# --- self-test ----------------------------------------------------------------------------------------------------

def fake_archive(work, symbol):
    """A real static archive made with cc and ar: one object defining SYMBOL."""
    src, obj, lib = work / f"{symbol}.c", work / f"{symbol}.o", work / f"lib{symbol}.a"
    src.write_text(f"int {symbol}(void) {{ return 0; }}\n")
    subprocess.run(["cc", "-c", str(src), "-o", str(obj)], check=True)
    subprocess.run(["ar", "rcs", str(lib), str(obj)], check=True)
    return lib


def fat_file(path, slices):
    """A fat file (FAT_MAGIC, as lipo writes) of the given (cputype, bytes) slices, each aligned to 2^14."""
    align = 14
    header = struct.pack(">II", FAT_MAGIC, len(slices))
    offset, entries, body = 1 << align, b"", b""
    for cputype, data in slices:
        pad = (-offset) % (1 << align)
        offset += pad
        entries += struct.pack(">iiIII", cputype, 0, offset, len(data), align)
        offset += len(data)
    out = bytearray(header + entries)
    out += b"\0" * ((1 << align) - len(out))
    for _, data in slices:
        out += b"\0" * ((-len(out)) % (1 << align))
        out += data
    path.write_bytes(bytes(out))
    return path


def write_xcframework_plist(xcf, slices):
    """Info.plist in the format `xcodebuild -create-xcframework` writes (XFWK, AvailableLibraries)."""
    libraries = []
    for ident, platform in slices:
        _, _, _, versioned, sup, variant = PLATFORMS[platform]
        entry = {"BinaryPath": f"{MODULE}.framework/" + (f"Versions/A/{MODULE}" if versioned else MODULE),
                 "LibraryIdentifier": ident, "LibraryPath": f"{MODULE}.framework",
                 "SupportedArchitectures": ["arm64"], "SupportedPlatform": sup}
        if variant:
            entry["SupportedPlatformVariant"] = variant
        libraries.append(entry)
    doc = {"AvailableLibraries": libraries, "CFBundlePackageType": "XFWK", "XCFrameworkFormatVersion": "1.0"}
    (xcf / "Info.plist").write_bytes(plistlib.dumps(doc, fmt=plistlib.FMT_XML))


def check_repo_consistency():
    """The module name, the Swift import, Package.swift's binary target and resources, and the manifest copy agree."""
    package = (REPO / "Package.swift").read_text()
    if f'.binaryTarget(name: "{MODULE}", path: "target/ios/{MODULE}.xcframework")' not in package:
        raise CheckError(f"Package.swift: no binaryTarget {MODULE} at target/ios/{MODULE}.xcframework")
    if '.copy("PrivacyInfo.xcprivacy")' not in package:
        raise CheckError("Package.swift: the Swift target does not copy PrivacyInfo.xcprivacy as a resource")
    swift_dir = REPO / "swift" / "Sources" / "RustCrashReporter"
    if not any(f"import {MODULE}" in p.read_text() for p in swift_dir.glob("*.swift")):
        raise CheckError(f"{swift_dir}: no Swift file imports {MODULE}")
    copy = swift_dir / "PrivacyInfo.xcprivacy"
    check_privacy(copy, PRIVACY)
    script = (REPO / "scripts" / "build-xcframework.sh").read_text()
    if f"module={MODULE}" not in script:
        raise CheckError(f"scripts/build-xcframework.sh: module is not {MODULE}")
    return f"repository: module {MODULE} in Package.swift, swift/ and build-xcframework.sh; {copy.name} copy matches"


def self_test():
    passed = 0

    def ok(msg):
        nonlocal passed
        passed += 1
        log(f"self-test ok: {msg}")

    def expect_failure(what, fn, fragment):
        nonlocal passed
        try:
            fn()
        except CheckError as e:
            if fragment not in str(e):
                raise CheckError(f"self-test: {what}: failed for another reason: {e}") from None
            passed += 1
            log(f"self-test ok: rejects {what}: {str(e).split(': ', 1)[-1]}")
            return
        raise CheckError(f"self-test: {what}: the check passed but should have failed")

    with tempfile.TemporaryDirectory(prefix="apple-framework-selftest-") as tmp:
        work = pathlib.Path(tmp)
        lib = fake_archive(work, "crash_reporter_selftest_a")
        lib2 = fake_archive(work, "crash_reporter_selftest_b")
        fat = fat_file(work / "libfat.a", [(0x0100000C, lib.read_bytes()), (0x01000007, lib2.read_bytes())])

        # Good frameworks, one per platform, then an XCFramework of them.
        xcf = work / f"{MODULE}.xcframework"
        slices = [("ios-arm64", "ios", lib), ("ios-arm64_x86_64-simulator", "ios-simulator", fat),
                  ("macos-arm64_x86_64", "macos", fat)]
        for ident, platform, library in slices:
            fw = assemble(platform, library, xcf / ident, version="0.1.0-beta.1")
            ok(check_framework(fw, platform, library=library))
        write_xcframework_plist(xcf, [(i, p) for i, p, _ in slices])
        for line in check_xcframework(xcf):
            ok(f"in the XCFramework: {line.split(': ', 1)[0].split('/', 3)[-1]}")
        info = load_plist(xcf / "ios-arm64" / f"{MODULE}.framework" / "Info.plist")
        if info["CFBundleShortVersionString"] != "0.1.0" or info["MinimumOSVersion"] != "16.0":
            raise CheckError(f"self-test: unexpected versions in Info.plist: {info}")
        ok("Info.plist versions: 0.1.0-beta.1 written as 0.1.0, MinimumOSVersion 16.0")
        mm = (xcf / "ios-arm64" / f"{MODULE}.framework" / "Modules" / "module.modulemap").read_text()
        if 'link framework "Security"' not in mm or 'link "iconv"' not in mm:
            raise CheckError(f"self-test: module map lacks the link declarations:\n{mm}")
        ok("module map declares the SDK libraries the archive needs (link framework Security, ...)")

        # Broken variants: each must be rejected with the named problem.
        def broken(platform="ios", library=lib):
            d = work / "broken"
            if d.exists():
                shutil.rmtree(d)
            d.mkdir()
            return assemble(platform, library, d)

        def mutate_plist(path, change):
            doc = load_plist(path)
            change(doc)
            path.write_bytes(plistlib.dumps(doc))

        fw = broken()
        (fw / "PrivacyInfo.xcprivacy").unlink()
        expect_failure("a framework without PrivacyInfo.xcprivacy", lambda: check_framework(fw, "ios"),
                       "entries")
        fw = broken()
        mutate_plist(fw / "PrivacyInfo.xcprivacy", lambda d: d.update(NSPrivacyColectedDataTypes=[]))
        expect_failure("a manifest with a misspelt key", lambda: check_framework(fw, "ios"), "unexpected keys")
        fw = broken()
        (fw / "PrivacyInfo.xcprivacy").write_text("<plist><dict><key>NSPrivacyTracking</key>")
        expect_failure("a manifest that does not parse", lambda: check_framework(fw, "ios"),
                       "not a valid property list")
        fw = broken()
        mutate_plist(fw / "PrivacyInfo.xcprivacy", lambda d: d.update(NSPrivacyAccessedAPITypes=[
            {"NSPrivacyAccessedAPIType": "NSPrivacyAccessedAPICategoryFileTimestamp",
             "NSPrivacyAccessedAPITypeReasons": []}]))
        expect_failure("a required-reason API without a reason", lambda: check_framework(fw, "ios"),
                       "at least one reason")
        fw = broken()
        mutate_plist(fw / "Info.plist", lambda d: d.update(CFBundlePackageType="BNDL"))
        expect_failure("CFBundlePackageType BNDL", lambda: check_framework(fw, "ios"), "CFBundlePackageType")
        fw = broken()
        mutate_plist(fw / "Info.plist", lambda d: d.pop("MinimumOSVersion"))
        expect_failure("an iOS Info.plist without MinimumOSVersion", lambda: check_framework(fw, "ios"),
                       "MinimumOSVersion missing")
        fw = broken()
        expect_failure("an iOS device framework checked as a simulator one",
                       lambda: check_framework(fw, "ios-simulator"), "CFBundleSupportedPlatforms")
        fw = broken()
        (fw / MODULE).write_bytes(b"\xcf\xfa\xed\xfe" + b"\0" * 60)  # MH_MAGIC_64: a Mach-O, not an archive
        expect_failure("a binary that is not a static archive", lambda: check_framework(fw, "ios"),
                       "not a static archive")
        fw = broken()
        expect_failure("a binary other than the library built", lambda: check_framework(fw, "ios", library=lib2),
                       "differs from")
        bad_fat = fat_file(work / "libbadfat.a", [(0x0100000C, lib.read_bytes()), (0x01000007, b"\xcf\xfa\xed\xfe")])
        fw = broken("ios-simulator", bad_fat)
        expect_failure("a fat binary with a slice that is not an archive",
                       lambda: check_framework(fw, "ios-simulator"), "is not a static archive")
        fw = broken()
        (fw / "Modules" / "module.modulemap").write_text(modulemap_text("missing.h"))
        expect_failure("a module map naming a header that is not shipped", lambda: check_framework(fw, "ios"),
                       "is not in")
        fw = broken()
        (fw / "Modules" / "module.modulemap").write_text(
            modulemap_text(HEADER.name).replace(f"module {MODULE}", "module CrashReporter"))
        expect_failure("a module map declaring another module (PLCrashReporter's name)",
                       lambda: check_framework(fw, "ios"), "declares module CrashReporter")
        fw = broken("macos", fat)
        os.unlink(fw / "Versions" / "Current")
        os.symlink("B", fw / "Versions" / "Current")
        expect_failure("a macOS framework whose Versions/Current is wrong", lambda: check_framework(fw, "macos"),
                       "want a symlink to A")
        fw = broken("macos", fat)
        shutil.move(str(fw / "Versions" / "A" / "Resources" / "PrivacyInfo.xcprivacy"),
                    str(fw / "PrivacyInfo.xcprivacy"))
        expect_failure("a macOS framework with the manifest at its root instead of Resources/",
                       lambda: check_framework(fw, "macos"), "entries")
        bare = work / "bare.xcframework"
        shutil.copytree(xcf, bare, symlinks=True)
        mutate_plist(bare / "Info.plist", lambda d: d["AvailableLibraries"][0].update(LibraryPath="libreporter.a"))
        expect_failure("an XCFramework slice that is a bare library", lambda: check_xcframework(bare),
                       "a bare library does not carry")
        short = work / "short.xcframework"
        shutil.copytree(xcf, short, symlinks=True)
        mutate_plist(short / "Info.plist", lambda d: d["AvailableLibraries"].pop())
        expect_failure("an XCFramework without its macOS slice", lambda: check_xcframework(short), "want")

    ok(check_repo_consistency())
    log(f"self-test: {passed} checks passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("assemble")
    a.add_argument("--platform", choices=sorted(PLATFORMS), required=True)
    a.add_argument("--library", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--header", default=str(HEADER))
    a.add_argument("--privacy", default=str(PRIVACY))
    a.add_argument("--min-os")
    a.add_argument("--version")
    a.add_argument("--bundle-id")
    c = sub.add_parser("check")
    c.add_argument("framework")
    c.add_argument("--platform", choices=sorted(PLATFORMS), required=True)
    c.add_argument("--library")
    c.add_argument("--header", default=str(HEADER))
    c.add_argument("--privacy", default=str(PRIVACY))
    x = sub.add_parser("check-xcframework")
    x.add_argument("xcframework")
    x.add_argument("--header", default=str(HEADER))
    x.add_argument("--privacy", default=str(PRIVACY))
    sub.add_parser("self-test")
    args = parser.parse_args()
    try:
        if args.command == "assemble":
            fw = assemble(args.platform, args.library, args.out, args.header, args.privacy, args.min_os,
                          args.version, args.bundle_id)
            log(check_framework(fw, args.platform, library=args.library, header=args.header, privacy=args.privacy))
        elif args.command == "check":
            log(check_framework(args.framework, args.platform, library=args.library, header=args.header,
                                privacy=args.privacy))
        elif args.command == "check-xcframework":
            for line in check_xcframework(args.xcframework, args.header, args.privacy):
                log(line)
        else:
            self_test()
    except CheckError as e:
        print(f"apple_framework: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
