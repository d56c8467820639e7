// swift-tools-version:5.9
// Swift Package Manager manifest: an app adds the crash reporter with File ▸ Add Package Dependencies (or a
// `.package(path:)` / `.package(url:)` entry) and `import RustCrashReporter`.
//
// - `RustCrashReporterC`: the binary target, an XCFramework of static frameworks (one
//   `RustCrashReporterC.framework` per slice: iOS device, iOS simulator, macOS), each with the reporter's static
//   library as its binary, the C header in Headers/, Modules/module.modulemap (`framework module RustCrashReporterC`,
//   with `link` lines for Security, CoreFoundation and libiconv, which the Rust library needs), Info.plist and
//   PrivacyInfo.xcprivacy: the layout Apple documents for a static library with a privacy manifest. Built by
//   `scripts/build-xcframework.sh` on a Mac into target/ios/ (layout written and checked by
//   scripts/apple_framework.py). (Module name chosen not to collide with PLCrashReporter's `CrashReporter`.) A
//   release published for `.package(url:)` would point at a zipped XCFramework with `url:` and `checksum:`
//   instead of `path:`.
// - `RustCrashReporter`: the Swift API over the C functions (swift/Sources/RustCrashReporter). It carries the
//   same privacy manifest as a resource (swift/Sources/RustCrashReporter/PrivacyInfo.xcprivacy, a copy of
//   apple/PrivacyInfo.xcprivacy that `scripts/apple_framework.py self-test` keeps identical): developers report
//   that SwiftPM drops the manifest inside a static binary target's framework (swift-package-manager issue 7317),
//   while a source target's resource bundle reaches the app.
//
// Not built on the Linux CI (no Swift toolchain for Apple targets there); written for Xcode 15+ and not yet run.
import PackageDescription

let package = Package(
    name: "RustCrashReporter",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [
        .library(name: "RustCrashReporter", targets: ["RustCrashReporter"]),
    ],
    targets: [
        // Development: the local build of scripts/build-xcframework.sh. A release replaces this line with
        //   .binaryTarget(name: "RustCrashReporterC", url: "<URL OF THE UPLOADED ZIP>", checksum: "<SHA-256>")
        // using target/ios/RustCrashReporterC.xcframework.zip and the checksum the script writes next to it
        // (handler/README.md, "Swift package release"; nothing is published yet, the URL is a placeholder).
        .binaryTarget(name: "RustCrashReporterC", path: "target/ios/RustCrashReporterC.xcframework"),
        .target(
            name: "RustCrashReporter",
            dependencies: ["RustCrashReporterC"],
            path: "swift/Sources/RustCrashReporter",
            resources: [.copy("PrivacyInfo.xcprivacy")],
            // Also declared by the module map's `link` lines (autolinking); stated here so that a build with
            // autolinking off still links (ios-harness/project.yml lists the same, from
            // `rustc --print native-static-libs`).
            linkerSettings: [
                .linkedFramework("Security"),
                .linkedFramework("CoreFoundation"),
                .linkedLibrary("iconv"),
            ]
        ),
        .testTarget(
            name: "RustCrashReporterTests",
            dependencies: ["RustCrashReporter"],
            path: "swift/Tests/RustCrashReporterTests"
        ),
    ]
)
