import RustCrashReporterC
import SwiftUI
import UIKit

// The harness app: enables the reporter at launch (uploading to the collector given with `-collectorURL`), shows
// what happened, and, when launched with `-trigger NAME`, crashes that way a moment after launch. The UI test
// launches it once with a trigger (it crashes) and once without (the reporter uploads the report).

@main
struct CrashHarnessApp: App {
    @UIApplicationDelegateAdaptor(HarnessAppDelegate.self) private var appDelegate

    var body: some Scene {
        WindowGroup {
            HarnessView(state: HarnessState.shared)
        }
    }
}

/// What the screen shows; the UI test reads these labels by accessibility identifier.
final class HarnessState: ObservableObject {
    static let shared = HarnessState()

    /// Result of crash_reporter_enable, e.g. "OK" or "INSECURE_URL (4)".
    @Published var enableStatus = "not called"
    /// The trigger armed for this launch, or "none".
    @Published var trigger = "none"
    /// Reports waiting for upload (crash_reporter_pending_count), refreshed twice a second for a minute.
    @Published var pending = "?"
}

struct HarnessView: View {
    @ObservedObject var state: HarnessState

    var body: some View {
        VStack(alignment: .leading, spacing: 12) {
            Text("Crash reporter harness").font(.headline)
            Text("enable: \(state.enableStatus)").accessibilityIdentifier("enableStatus")
            Text("trigger: \(state.trigger)").accessibilityIdentifier("trigger")
            Text("pending: \(state.pending)").accessibilityIdentifier("pendingReports")
        }
        .padding()
    }
}

final class HarnessAppDelegate: NSObject, UIApplicationDelegate {
    func application(
        _ application: UIApplication,
        didFinishLaunchingWithOptions launchOptions: [UIApplication.LaunchOptionsKey: Any]? = nil
    ) -> Bool {
        Harness.start()
        return true
    }
}

enum Harness {
    static func start() {
        // `-name value` launch arguments are in UserDefaults' argument domain.
        let defaults = UserDefaults.standard
        let collectorURL = defaults.string(forKey: HarnessArgument.collectorURL)
        let runID = defaults.string(forKey: HarnessArgument.run)
        let triggerName = defaults.string(forKey: HarnessArgument.trigger)
        let delay = defaults.object(forKey: HarnessArgument.triggerDelay) == nil
            ? 2.0 : defaults.double(forKey: HarnessArgument.triggerDelay)
        let state = HarnessState.shared

        // Reports live in Caches/CrashReports. No bundle id is passed, so the reporter reads Info.plist itself.
        let caches = FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask)[0]
        let reportDir = caches.appendingPathComponent("CrashReports", isDirectory: true).path
        let status = reportDir.withCString { dir in
            withOptionalCString(collectorURL) { url in
                crash_reporter_enable(dir, url, nil, nil, nil)
            }
        }
        state.enableStatus = describe(status)
        print("harness: crash_reporter_enable(\(reportDir), \(collectorURL ?? "nil")) = \(describe(status))")

        if let runID {
            setValue(HarnessArgument.runKey, runID)
        }

        guard let triggerName else {
            watchPendingReports()
            return
        }
        guard let trigger = HarnessTrigger(rawValue: triggerName) else {
            state.trigger = "unknown trigger \(triggerName)"
            return
        }
        setValue(HarnessArgument.triggerKey, trigger.rawValue)
        state.trigger = trigger.rawValue
        print("harness: firing \(trigger.rawValue) in \(delay) s")
        // A run-loop timer, not a dispatch block: the main-thread triggers then run with only run-loop and UIKit
        // frames below them. The delay lets XCUIApplication.launch() finish before the app dies.
        let timer = Timer(timeInterval: delay, repeats: false) { _ in
            harnessFire(trigger)
        }
        RunLoop.main.add(timer, forMode: .common)
    }

    private static func setValue(_ key: String, _ value: String) {
        let status = key.withCString { k in value.withCString { v in crash_reporter_set_value(k, v) } }
        if status != CRASH_REPORTER_STATUS_OK {
            print("harness: crash_reporter_set_value(\(key)) = \(describe(status))")
        }
    }

    /// Shows the number of pending reports for a minute, so a person watching sees the upload happen.
    private static func watchPendingReports() {
        Thread.detachNewThread {
            for _ in 0..<120 {
                let count = crash_reporter_pending_count()
                DispatchQueue.main.async {
                    HarnessState.shared.pending = String(count)
                }
                Thread.sleep(forTimeInterval: 0.5)
            }
        }
    }

    static func describe(_ status: CrashReporterStatus) -> String {
        let names: [(CrashReporterStatus, String)] = [
            (CRASH_REPORTER_STATUS_OK, "OK"),
            (CRASH_REPORTER_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT"),
            (CRASH_REPORTER_STATUS_ALREADY_ENABLED, "ALREADY_ENABLED"),
            (CRASH_REPORTER_STATUS_NOT_ENABLED, "NOT_ENABLED"),
            (CRASH_REPORTER_STATUS_INSECURE_URL, "INSECURE_URL"),
            (CRASH_REPORTER_STATUS_STORAGE_ERROR, "STORAGE_ERROR"),
            (CRASH_REPORTER_STATUS_INSTALL_FAILED, "INSTALL_FAILED"),
            (CRASH_REPORTER_STATUS_VALUE_REJECTED, "VALUE_REJECTED"),
            (CRASH_REPORTER_STATUS_NO_UPLOAD_URL, "NO_UPLOAD_URL"),
            (CRASH_REPORTER_STATUS_APP_INFO_UNAVAILABLE, "APP_INFO_UNAVAILABLE"),
            (CRASH_REPORTER_STATUS_INTERNAL, "INTERNAL"),
        ]
        if status == CRASH_REPORTER_STATUS_OK {
            return "OK"
        }
        let name = names.first { $0.0 == status }?.1 ?? "UNKNOWN"
        return "\(name) (\(status.rawValue))"
    }
}

/// Calls `body` with a C string for `string`, or with NULL when it is nil.
func withOptionalCString<Result>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
    guard let string else {
        return body(nil)
    }
    return string.withCString { body($0) }
}
