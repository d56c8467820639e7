import XCTest

/// The crash matrix: for each trigger, launch the app with it (the app crashes), relaunch without it (the reporter
/// uploads the report), and wait until the collector has stored one new report.
///
/// What this proves: the app died (the handler let the process terminate, no hang, in particular not in the
/// malloc-lock case); the relaunched app enabled the reporter; a report left the device and the collector accepted
/// it (the collector stores only intact reports: every CRC and the end marker). What the report says (crashed
/// thread, exception, message, trigger function after symbolication) is checked afterwards by check_reports.py,
/// which run.sh calls with the collector's store and the app's dSYM.
///
/// Configuration (xcodebuild passes TEST_RUNNER_<NAME> to this process as <NAME>):
///   HARNESS_COLLECTOR_URL  collector URL, default http://127.0.0.1:8787/ (a simulator shares the Mac's loopback)
///   HARNESS_RUN_ID         run identifier stored in each report (harness.run), default "adhoc"
final class CrashMatrixUITests: XCTestCase {
    private var collector: CollectorClient!
    private var collectorURL = ""
    private var runID = ""

    override func setUpWithError() throws {
        // true: XCTest may record the app's crash as an (expected) issue, and that must not stop the test. The test
        // returns by itself after a failure that makes the rest meaningless.
        continueAfterFailure = true
        let environment = ProcessInfo.processInfo.environment
        collectorURL = environment["HARNESS_COLLECTOR_URL"] ?? "http://127.0.0.1:8787/"
        runID = environment["HARNESS_RUN_ID"] ?? "adhoc"
        guard let url = URL(string: collectorURL) else {
            throw CollectorClient.Failure(description: "HARNESS_COLLECTOR_URL is not a URL: \(collectorURL)")
        }
        collector = CollectorClient(baseURL: url)
    }

    func testSwiftFatalError() throws { try crashAndCollect(.swiftFatalError) }
    func testForceUnwrapNil() throws { try crashAndCollect(.forceUnwrapNil) }
    func testArrayIndexOutOfRange() throws { try crashAndCollect(.arrayIndexOutOfRange) }
    func testNSException() throws { try crashAndCollect(.nsException) }
    func testCppException() throws { try crashAndCollect(.cppException) }
    func testAbort() throws { try crashAndCollect(.abortCall) }
    func testAbortWithReason() throws { try crashAndCollect(.abortWithReason) }
    func testBadPointer() throws { try crashAndCollect(.badPointer) }
    func testStackOverflow() throws { try crashAndCollect(.stackOverflow) }
    func testBackgroundQueue() throws { try crashAndCollect(.backgroundQueue) }

    /// With the nano allocator off (MallocNanoZone=0) every allocation goes through a zone whose locks the holder
    /// thread has taken, so any malloc in the crash handler deadlocks; the report arriving proves none happened.
    func testMallocLock() throws { try crashAndCollect(.mallocLock, environment: ["MallocNanoZone": "0"]) }

    /// Not a crash: the main thread hangs for 5 s with hang detection on; the app exits normally afterwards, and the
    /// relaunch uploads the one non-fatal hang report.
    func testMainThreadHang() throws { try crashAndCollect(.mainThreadHang) }

    /// The triggers the tests above cover; a trigger added to HarnessTrigger without a test fails here.
    private static let tested: [HarnessTrigger] = [
        .swiftFatalError, .forceUnwrapNil, .arrayIndexOutOfRange, .nsException, .cppException, .abortCall,
        .badPointer, .stackOverflow, .backgroundQueue, .mallocLock, .mainThreadHang,
    ]

    func testEveryTriggerHasATest() {
        XCTAssertEqual(Set(HarnessTrigger.allCases), Set(Self.tested))
    }

    private var baseArguments: [String] {
        ["-\(HarnessArgument.collectorURL)", collectorURL, "-\(HarnessArgument.run)", runID]
    }

    private func crashAndCollect(_ trigger: HarnessTrigger, environment: [String: String] = [:]) throws {
        // Fails right away, with the reason, when no collector is listening.
        let before = try collector.reportIDs()

        // 1. Launch with the trigger; the app crashes about two seconds after launch.
        let app = XCUIApplication()
        app.launchArguments = baseArguments + ["-\(HarnessArgument.trigger)", trigger.rawValue]
        app.launchEnvironment = environment
        // XCTest may record the app's death as an issue of its own; that is expected here, and only inside these
        // blocks, which hold no assertion of this test. Non-strict: no issue at all is fine too.
        let options = XCTExpectedFailure.Options()
        options.isStrict = false
        var died = false
        XCTExpectFailure("the app crashes on purpose (\(trigger.rawValue))", options: options) {
            app.launch()
            died = app.wait(for: .notRunning, timeout: 60)
        }
        guard died else {
            XCTFail("\(trigger.rawValue): the app was still running 60 s after launch (did the handler hang?)")
            app.terminate()
            return
        }

        // 2. Relaunch without a trigger: the reporter uploads the pending report.
        let relaunched = XCUIApplication()
        relaunched.launchArguments = baseArguments
        XCTExpectFailure("XCTest may still report the previous crash", options: options) {
            relaunched.launch()
        }
        let enableLabel = relaunched.staticTexts["enableStatus"]
        guard enableLabel.waitForExistence(timeout: 30) else {
            XCTFail("\(trigger.rawValue): the relaunched app shows no status")
            relaunched.terminate()
            return
        }
        XCTAssertEqual(enableLabel.label, "enable: OK", "\(trigger.rawValue): crash_reporter_enable on relaunch")

        // 3. Wait for the upload to reach the collector.
        let new = try waitForNewReports(since: before, timeout: 60)
        let pending = relaunched.staticTexts["pendingReports"].label
        relaunched.terminate()

        let summary = "\(trigger.rawValue): new report(s) \(new.sorted()) (run \(runID), app \(pending))"
        add(XCTAttachment(string: summary))
        print("harness: \(summary)")
        XCTAssertFalse(new.isEmpty, "\(trigger.rawValue): no report reached \(collectorURL) within 60 s of relaunch")
        XCTAssertEqual(new.count, 1, "\(trigger.rawValue): expected exactly one new report: \(new.sorted())")
    }

    /// Polls the collector until ids not in `before` appear, then waits two more seconds for stragglers (a second
    /// report would mean a duplicate or a stale report) and returns all new ids. Empty on timeout.
    private func waitForNewReports(since before: Set<String>, timeout: TimeInterval) throws -> Set<String> {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let new = try collector.reportIDs().subtracting(before)
            if !new.isEmpty {
                Thread.sleep(forTimeInterval: 2)
                return try collector.reportIDs().subtracting(before)
            }
            Thread.sleep(forTimeInterval: 1)
        }
        return []
    }
}
