// C, Objective-C++ and C++ crash triggers, called from Swift through HarnessApp-Bridging-Header.h.
//
// Every function that can be on the crashed thread's stack has a stable, distinctive C name (no mangling), is
// never inlined, and makes no tail calls, so after symbolication with the app's dSYM its frame is on the crashed
// thread's backtrace under exactly this name. check_reports.py looks for these names.
#ifndef HARNESS_NATIVE_TRIGGERS_H
#define HARNESS_NATIVE_TRIGGERS_H

#ifdef __cplusplus
extern "C" {
#endif

/// The address the bad-pointer triggers write to: inside __PAGEZERO (the first 4 GiB of a 64-bit iOS process are
/// never mapped), so the write is an EXC_BAD_ACCESS / KERN_INVALID_ADDRESS at exactly this address.
#define HARNESS_BAD_ADDRESS 0xbad

/// Label of the serial queue the background-queue trigger crashes on.
#define HARNESS_CRASH_QUEUE_LABEL "com.example.crashreporter.harness.crash-queue"

/// Name of the plain pthread the exception triggers run on (see harness_run_on_plain_thread).
#define HARNESS_PLAIN_THREAD_NAME "harness.plain-thread"

/// Name of the thread that holds the malloc locks in the malloc-lock trigger.
#define HARNESS_MALLOC_LOCK_THREAD_NAME "harness.malloc-lock-holder"

/// abort() from this frame: SIGABRT (EXC_CRASH), raised on the calling thread.
void harness_trigger_abort(void);

/// Blocks the calling thread (the main thread) for `seconds` seconds in this frame (nanosleep, resumed after
/// signals): the main run loop makes no progress, which the hang watchdog reports.
void harness_trigger_hang(unsigned seconds);

/// Writes to HARNESS_BAD_ADDRESS from this frame.
void harness_trigger_bad_pointer(void);

/// Recurses through harness_stack_overflow_recurse (about 600 bytes of stack per frame) until the guard page.
void harness_trigger_stack_overflow(void);
unsigned harness_stack_overflow_recurse(unsigned depth);

/// Dispatches harness_background_queue_crash onto a new serial queue labelled HARNESS_CRASH_QUEUE_LABEL and returns;
/// the block writes to HARNESS_BAD_ADDRESS on a dispatch worker thread.
void harness_trigger_background_queue(void);
void harness_background_queue_crash(void);

/// Starts harness_hold_malloc_lock on a new thread, waits until it holds the lock of every malloc zone, then writes
/// to HARNESS_BAD_ADDRESS from this frame on the calling thread. A crash handler that calls malloc (in a zone with
/// a lock) deadlocks here and never writes the report. See README.md, "The malloc-lock trigger".
void harness_trigger_malloc_lock(void);
void *harness_hold_malloc_lock(void *unused);

/// Raises an NSException (name HarnessException, reason "harness: uncaught NSException") from this frame.
/// Defined in ExceptionTriggers.mm.
void harness_trigger_nsexception(void);

/// Throws std::runtime_error("harness: uncaught C++ exception") from this frame. Defined in ExceptionTriggers.mm.
void harness_trigger_cpp_exception(void);

/// Runs `fn` on a new pthread named HARNESS_PLAIN_THREAD_NAME and waits for it (forever, when `fn` crashes).
/// Exceptions must be thrown where no frame catches them: CFRunLoopRunSpecific and libdispatch's callouts catch
/// and rethrow (or terminate) after unwinding, which would leave the throwing frame off the crashed thread's stack.
/// A thread started with pthread_create has only _pthread_start and thread_start below `fn`, neither of which
/// catches, so an uncaught exception terminates with the thrower's frames still on the stack.
void harness_run_on_plain_thread(void (*fn)(void));

#ifdef __cplusplus
}
#endif

#endif
