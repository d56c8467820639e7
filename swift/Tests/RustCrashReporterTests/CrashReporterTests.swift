// Runs with `swift test` on a Mac (macOS workflow); not run on the Linux CI. Checks the Swift layer's mapping of
// the C statuses and the calls that need no installed handler.
import XCTest
@testable import RustCrashReporter
import RustCrashReporterC

final class CrashReporterTests: XCTestCase {
    func testStatusMapping() {
        XCTAssertNil(CrashReporterError(CRASH_REPORTER_STATUS_OK))
        XCTAssertEqual(CrashReporterError(CRASH_REPORTER_STATUS_ALREADY_ENABLED), .alreadyEnabled)
        XCTAssertEqual(CrashReporterError(CRASH_REPORTER_STATUS_INSECURE_URL), .insecureURL)
        XCTAssertEqual(CrashReporterError(CRASH_REPORTER_STATUS_INTERNAL), .internal)
    }

    func testCaptureStatusesMap() {
        XCTAssertEqual(CrashReporterError(CRASH_REPORTER_STATUS_BUSY), .busy)
        XCTAssertEqual(CrashReporterError(CRASH_REPORTER_STATUS_NO_SUCH_THREAD), .noSuchThread)
        XCTAssertEqual(CrashReporterError(CRASH_REPORTER_STATUS_TIMEOUT), .timeout)
    }

    func testCallsBeforeEnable() {
        XCTAssertThrowsError(try CrashReporter.currentStack()) { error in
            XCTAssertEqual(error as? CrashReporterError, .notEnabled)
        }
        XCTAssertNotEqual(CrashReporter.currentThreadID, 0)
        XCTAssertEqual(CrashReporter.pendingCount, 0)
        XCTAssertThrowsError(try CrashReporter.uploadPending()) { error in
            XCTAssertEqual(error as? CrashReporterError, .notEnabled)
        }
    }
}
