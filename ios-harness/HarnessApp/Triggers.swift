import Foundation

// Swift crash triggers. Each is a free function with a distinctive name, never inlined, so after symbolication with
// the app's dSYM its frame appears on the crashed thread as `harnessTrigger...()`; check_reports.py looks for these
// names. The trap itself happens a few frames deeper, in the Swift runtime (`_assertionFailure`), which also stores
// the message in its `__crash_info` section (the report's MESSAGES section, Apple's "Application Specific
// Information").

/// The `fatalError` message check_reports.py expects in the report's MESSAGES section.
let harnessFatalErrorMessage = "harness: fatalError trigger"

@inline(never)
func harnessTriggerFatalError() -> Never {
    fatalError(harnessFatalErrorMessage)
}

@inline(never)
func harnessTriggerForceUnwrapNil() {
    // An environment variable that is never set: nil at run time, unknown to the optimizer.
    let missing: String? = ProcessInfo.processInfo.environment["HARNESS_VARIABLE_THAT_IS_NEVER_SET"]
    harnessKeep(missing!.count)
}

@inline(never)
func harnessTriggerArrayIndexOutOfRange() {
    let values = [1, 2, 3]
    // Always past the end (arguments has at least the executable path), and not a constant.
    let index = values.count + ProcessInfo.processInfo.arguments.count
    harnessKeep(values[index])
}

/// Consumes a value so the expression that produces it is not optimized away.
@inline(never)
func harnessKeep(_ value: Int) {
    if value == Int.min {
        print("harness: \(value)")
    }
}

/// Fires `trigger`. Swift traps fire on the calling (main) thread; see NativeTriggers.h for the others.
func harnessFire(_ trigger: HarnessTrigger) {
    switch trigger {
    case .swiftFatalError:
        harnessTriggerFatalError()
    case .forceUnwrapNil:
        harnessTriggerForceUnwrapNil()
    case .arrayIndexOutOfRange:
        harnessTriggerArrayIndexOutOfRange()
    case .nsException:
        // A closure that captures nothing converts to a C function pointer.
        harness_run_on_plain_thread { harness_trigger_nsexception() }
    case .cppException:
        harness_run_on_plain_thread { harness_trigger_cpp_exception() }
    case .abortCall:
        harness_trigger_abort()
    case .abortWithReason:
        _ = crash_reporter_set_crash_reason("harness: saving the draft")
        harness_trigger_abort()
    case .badPointer:
        harness_trigger_bad_pointer()
    case .stackOverflow:
        harness_trigger_stack_overflow()
    case .backgroundQueue:
        harness_trigger_background_queue()
    case .mallocLock:
        harness_trigger_malloc_lock()
    case .mainThreadHang:
        let status = crash_reporter_start_hang_detection(2000, 0)
        print("harness: crash_reporter_start_hang_detection(2000, 0) = \(status.rawValue)")
        // Called from this run-loop timer's callout: the main run loop makes no progress for 5 s.
        harness_trigger_hang(5)
        // Waits for the watchdog (a report being written is finished), then leaves without a crash.
        crash_reporter_stop_hang_detection()
        exit(0)
    }
}
