// Shared by the app and the UI tests (both targets compile this file): the crash triggers and the launch arguments
// that select them.

/// One way to crash. The raw value is what `-trigger` takes on the command line and what the app stores under the
/// `harness.trigger` key/value before firing, so every report names the trigger that produced it.
/// `check_reports.py` keeps the same names and the expectations for each.
enum HarnessTrigger: String, CaseIterable {
    /// Swift `fatalError("harness: fatalError trigger")` on the main thread.
    case swiftFatalError
    /// Swift force-unwrap of `nil` on the main thread.
    case forceUnwrapNil
    /// Swift array subscript out of range on the main thread.
    case arrayIndexOutOfRange
    /// Uncaught Objective-C `NSException`, raised on a plain pthread (no frame that catches it).
    case nsException
    /// Uncaught C++ `std::runtime_error`, thrown on a plain pthread (no frame that catches it).
    case cppException
    /// `abort()` on the main thread.
    case abortCall
    /// `crash_reporter_set_crash_reason("harness: saving the draft")`, then `abort()` on the main thread.
    case abortWithReason
    /// A write to address 0xbad on the main thread.
    case badPointer
    /// Unbounded recursion on the main thread until the stack guard page.
    case stackOverflow
    /// A write to address 0xbad from a block on a serial background dispatch queue.
    case backgroundQueue
    /// A write to address 0xbad on the main thread while another thread holds every malloc zone's lock.
    case mallocLock
    /// Not a crash: hang detection on (2 s threshold, the main run loop observed), then the main thread blocks for
    /// 5 s inside `harness_trigger_hang()`; the watchdog writes one non-fatal `hang` report, and the app exits
    /// normally afterwards (so the matrix's relaunch uploads it).
    case mainThreadHang
}

/// Launch-argument names (`-name value` lands in UserDefaults' argument domain) and key/value names.
enum HarnessArgument {
    /// Collector URL the reporter uploads to, e.g. `http://127.0.0.1:8787/`.
    static let collectorURL = "collectorURL"
    /// Trigger to fire after launch (a `HarnessTrigger` raw value); absent on the relaunch that uploads.
    static let trigger = "trigger"
    /// Seconds between launch and firing the trigger (default 2).
    static let triggerDelay = "triggerDelay"
    /// Identifier of this test run, stored in every report so stale reports from earlier runs are told apart.
    static let run = "harnessRun"
    /// Key/value names stored in the report's USER section.
    static let runKey = "harness.run"
    static let triggerKey = "harness.trigger"
}
