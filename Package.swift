// swift-tools-version:5.9
// Swift Package Manager manifest: an app adds the crash reporter with File ▸ Add Package Dependencies (or a
// `.package(path:)` / `.package(url:)` entry) and `import RustCrashReporter`.
//
// - `RustCrashReporterC`: the binary target, the reporter's static library for iOS device and simulator as an
//   XCFramework with the C header, its module map and PrivacyInfo.xcprivacy. Built by
//   `scripts/build-xcframework.sh` on a Mac into target/ios/. (Module name chosen not to collide with
//   PLCrashReporter's `CrashReporter`.) A release published for `.package(url:)` would point at a zipped
//   XCFramework with `url:` and `checksum:` instead of `path:`.
// - `RustCrashReporter`: the Swift API over the C functions (swift/Sources/RustCrashReporter).
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
            path: "swift/Sources/RustCrashReporter"
        ),
        .testTarget(
            name: "RustCrashReporterTests",
            dependencies: ["RustCrashReporter"],
            path: "swift/Tests/RustCrashReporterTests"
        ),
    ]
)
