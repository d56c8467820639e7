// Objective-C++ crash triggers: an uncaught NSException and an uncaught C++ exception. Both are meant to run on a
// plain pthread (harness_run_on_plain_thread), where nothing catches them, so the runtime terminates from inside
// the throw with these frames still on the stack: abort <- ... <- __cxa_throw <- (objc_exception_throw <-) here.
#import <Foundation/Foundation.h>

#include <stdexcept>

#include "NativeTriggers.h"

extern "C" __attribute__((noinline, disable_tail_calls)) void harness_trigger_nsexception(void) {
    @throw [NSException exceptionWithName:@"HarnessException" reason:@"harness: uncaught NSException" userInfo:nil];
}

extern "C" __attribute__((noinline, disable_tail_calls)) void harness_trigger_cpp_exception(void) {
    throw std::runtime_error("harness: uncaught C++ exception");
}
