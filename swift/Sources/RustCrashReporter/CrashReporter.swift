// The Swift API of the crash reporter: a thin layer over the C functions of crash_reporter.h (module
// RustCrashReporterC). Not yet compiled or run: there is no Swift toolchain for Apple targets on the project's CI
// machine; the macOS workflow builds it (swift build) once it runs on a Mac.

import Foundation
import RustCrashReporterC

/// Why a crash reporter call failed: one case per `CrashReporterStatus` value other than `CRASH_REPORTER_STATUS_OK`
/// (crash_reporter.h).
public enum CrashReporterError: Error, Equatable, Sendable {
    /// A required argument was empty or not UTF-8.
    case invalidArgument
    /// `CrashReporter.enable` already succeeded in this process.
    case alreadyEnabled
    /// `CrashReporter.enable` has not succeeded yet.
    case notEnabled
    /// The upload URL is not `https` (plain `http` is allowed to loopback only).
    case insecureURL
    /// The report directory could not be prepared.
    case storageError
    /// The crash handler could not be installed.
    case installFailed
    /// A key or value was refused (empty key, too long, or the table is full).
    case valueRejected
    /// No upload URL was configured.
    case noUploadURL
    /// `Info.plist` could not be read: pass `appInfo` explicitly.
    case appInfoUnavailable
    /// An unexpected internal failure.
    case `internal`
    /// Every capture walker was in use; try again.
    case busy
    /// The thread is not one of this process's, or it exited.
    case noSuchThread
    /// The thread did not answer the capture request in time.
    case timeout
    /// A status this version of the Swift layer does not know.
    case unknown(UInt32)

    init?(_ status: CrashReporterStatus) {
        switch status {
        case CRASH_REPORTER_STATUS_OK: return nil
        case CRASH_REPORTER_STATUS_INVALID_ARGUMENT: self = .invalidArgument
        case CRASH_REPORTER_STATUS_ALREADY_ENABLED: self = .alreadyEnabled
        case CRASH_REPORTER_STATUS_NOT_ENABLED: self = .notEnabled
        case CRASH_REPORTER_STATUS_INSECURE_URL: self = .insecureURL
        case CRASH_REPORTER_STATUS_STORAGE_ERROR: self = .storageError
        case CRASH_REPORTER_STATUS_INSTALL_FAILED: self = .installFailed
        case CRASH_REPORTER_STATUS_VALUE_REJECTED: self = .valueRejected
        case CRASH_REPORTER_STATUS_NO_UPLOAD_URL: self = .noUploadURL
        case CRASH_REPORTER_STATUS_APP_INFO_UNAVAILABLE: self = .appInfoUnavailable
        case CRASH_REPORTER_STATUS_INTERNAL: self = .internal
        case CRASH_REPORTER_STATUS_BUSY: self = .busy
        case CRASH_REPORTER_STATUS_NO_SUCH_THREAD: self = .noSuchThread
        case CRASH_REPORTER_STATUS_TIMEOUT: self = .timeout
        default: self = .unknown(UInt32(status.rawValue))
        }
    }
}

/// The crash reporter. Enable it once, as early as possible in app launch (e.g. in
/// `application(_:didFinishLaunchingWithOptions:)` or the `App` initializer):
///
/// ```swift
/// try CrashReporter.enable(uploadURL: URL(string: "https://crashes.example.com/upload"))
/// CrashReporter.setValue("beta", forKey: "channel")
/// ```
public enum CrashReporter {
    /// App metadata stored in every report. `nil` fields are read from the main bundle's `Info.plist`
    /// (`CFBundleIdentifier`, `CFBundleShortVersionString`, `CFBundleVersion`).
    public struct AppInfo: Equatable, Sendable {
        /// Bundle identifier.
        public var bundleID: String?
        /// Marketing version (`CFBundleShortVersionString`).
        public var shortVersion: String?
        /// Build number (`CFBundleVersion`).
        public var buildVersion: String?

        /// Creates app metadata; `nil` fields come from `Info.plist`.
        public init(bundleID: String? = nil, shortVersion: String? = nil, buildVersion: String? = nil) {
            self.bundleID = bundleID
            self.shortVersion = shortVersion
            self.buildVersion = buildVersion
        }
    }

    /// The default report directory: `Library/Caches/CrashReports` in the app's container.
    public static var defaultReportDirectory: URL {
        let caches = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first
            ?? URL(fileURLWithPath: NSTemporaryDirectory())
        return caches.appendingPathComponent("CrashReports", isDirectory: true)
    }

    /// Installs the crash handler and starts uploading pending reports in the background.
    ///
    /// - Parameters:
    ///   - reportDirectory: where reports are kept until uploaded (created when missing).
    ///   - uploadURL: the collector; `nil` keeps reports on the device.
    ///   - appInfo: app metadata; defaults come from `Info.plist`.
    /// - Throws: `CrashReporterError` (`.alreadyEnabled` on a second call).
    public static func enable(
        reportDirectory: URL = defaultReportDirectory,
        uploadURL: URL? = nil,
        appInfo: AppInfo = AppInfo()
    ) throws {
        try FileManager.default.createDirectory(at: reportDirectory, withIntermediateDirectories: true)
        let status = reportDirectory.path.withCString { dir in
            withOptionalCString(uploadURL?.absoluteString) { url in
                withOptionalCString(appInfo.bundleID) { id in
                    withOptionalCString(appInfo.shortVersion) { short in
                        withOptionalCString(appInfo.buildVersion) { build in
                            crash_reporter_enable(dir, url, id, short, build)
                        }
                    }
                }
            }
        }
        try check(status)
    }

    /// Sets a value that lands in the next crash report (copied into preallocated storage; cheap enough to call on
    /// every screen change).
    /// - Throws: `CrashReporterError.valueRejected` for an empty key, a key or value that is too long, or a full table;
    ///   `.notEnabled` before `enable`.
    public static func setValue(_ value: String, forKey key: String) throws {
        try check(key.withCString { k in value.withCString { v in crash_reporter_set_value(k, v) } })
    }

    /// Removes a value set with `setValue(_:forKey:)`; removing a key that is not set is not an error.
    public static func removeValue(forKey key: String) throws {
        try check(key.withCString { crash_reporter_remove_value($0) })
    }

    /// Uploads pending reports now and returns how many the collector accepted. Blocks: call it off the main thread
    /// (e.g. from a `Task.detached` or a background `URLSession` callback).
    public static func uploadPending() throws -> Int {
        var delivered: UInt32 = 0
        try check(crash_reporter_upload_pending(&delivered))
        return Int(delivered)
    }

    /// Reports waiting for upload (0 before `enable` or when the store cannot be read).
    public static var pendingCount: Int {
        Int(crash_reporter_pending_count())
    }

    // MARK: Non-fatal reports and hang detection

    /// Writes a non-fatal report now: every thread's stack, in the crash report format, marked non-fatal (kind
    /// `app` with `reason`, `manual` without), uploaded like a crash report. Blocks while the threads are captured
    /// and the file is written (milliseconds); call it off the main thread if that matters.
    /// - Throws: `.busy` when another non-fatal report is being written, `.notEnabled`, `.storageError`.
    public static func reportNonFatal(reason: String? = nil) throws {
        try check(withOptionalCString(reason) { crash_reporter_report_non_fatal($0) })
    }

    /// Starts hang detection: a run-loop observer on the main run loop tells a watchdog thread when the main thread
    /// makes progress; a stall longer than `threshold` writes one non-fatal `hang` report with every thread's stack
    /// (the report that explains a later watchdog kill, `0x8badf00d`, or a force-quit at the next launch). Stalls
    /// longer than `slowFrame` (nil: off) are counted as slow frames.
    /// - Throws: `.alreadyEnabled` when it already runs, `.invalidArgument` for a zero threshold, `.notEnabled`.
    public static func startHangDetection(threshold: TimeInterval = 2.0, slowFrame: TimeInterval? = 0.5) throws {
        let ms = { (t: TimeInterval) in UInt32(clamping: Int((max(t, 0) * 1000).rounded())) }
        try check(crash_reporter_start_hang_detection(ms(threshold), slowFrame.map(ms) ?? 0))
    }

    /// Stops hang detection (a hang report being written is finished first).
    public static func stopHangDetection() {
        crash_reporter_stop_hang_detection()
    }

    // MARK: Stacks on demand

    /// The calling thread's return addresses, innermost first: the first one returns into the function that called
    /// `currentStack`, then its caller's, down to the thread's start (as `Thread.callStackReturnAddresses` lists
    /// them, but with the crash handler's unwinder: cheap enough to call often; a stack captured before costs a few
    /// nanoseconds per frame). At most `maxFrames` addresses. This Swift layer allocates the array; use
    /// `currentStack(into:)` where nothing may be allocated.
    /// - Throws: `CrashReporterError.notEnabled` before `enable`, `.busy` when every capture walker is in use.
    @inline(never)
    public static func currentStack(maxFrames: Int = 128) throws -> [UInt64] {
        let capacity = max(maxFrames, 0)
        let buffer = UnsafeMutablePointer<UInt64>.allocate(capacity: max(capacity, 1))
        defer { buffer.deallocate() }
        var count = 0
        // Called from this function's own body (no closure frame in between): skip 1 leaves this function out.
        try check(crash_reporter_current_stack(buffer, capacity, 1, &count, nil))
        return Array(UnsafeBufferPointer(start: buffer, count: count))
    }

    /// `currentStack` into memory the caller owns, without allocating: returns how many addresses were written.
    /// The first one returns into the function that called this one.
    /// - Throws: as `currentStack(maxFrames:)`.
    @inline(never)
    public static func currentStack(into buffer: UnsafeMutableBufferPointer<UInt64>) throws -> Int {
        var count = 0
        try check(crash_reporter_current_stack(buffer.baseAddress, buffer.count, 1, &count, nil))
        return count
    }

    /// Another thread's stack: its pc, then its return addresses. `threadID` is that thread's `currentThreadID`
    /// (`pthread_threadid_np`). The thread is suspended while it is walked (`thread_suspend`, `thread_get_state`,
    /// the walk over `vm_read_overwrite`, `thread_resume`), so this never waits for it; `timeout` bounds the wait
    /// where the platform asks the thread itself (Linux). Call it off the thread you capture.
    /// - Throws: `.noSuchThread`, `.timeout`, `.busy`, `.notEnabled`.
    public static func stack(ofThread threadID: UInt64, maxFrames: Int = 128, timeout: TimeInterval = 0.1) throws
        -> [UInt64]
    {
        let capacity = max(maxFrames, 0)
        var frames = [UInt64](repeating: 0, count: capacity)
        var count = 0
        let ms = UInt32(clamping: Int((max(timeout, 0) * 1000).rounded(.up)))
        let status = frames.withUnsafeMutableBufferPointer { buf in
            crash_reporter_thread_stack(threadID, buf.baseAddress, buf.count, ms, &count, nil)
        }
        try check(status)
        return Array(frames.prefix(count))
    }

    /// The calling thread's id, as `stack(ofThread:)` takes it.
    public static var currentThreadID: UInt64 {
        crash_reporter_current_thread_id()
    }

    private static func check(_ status: CrashReporterStatus) throws {
        if let error = CrashReporterError(status) {
            throw error
        }
    }
}

/// Calls `body` with a C string for `value`, or NULL when `value` is nil.
private func withOptionalCString<R>(_ value: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let value else { return body(nil) }
    return value.withCString { body($0) }
}
