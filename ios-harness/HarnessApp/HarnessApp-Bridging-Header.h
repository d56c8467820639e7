// Objective-C/C declarations visible to the app's Swift code. The reporter's C API comes in as a module instead
// (`import RustCrashReporterC`, from RustCrashReporterC.xcframework built by scripts/build-xcframework.sh).
#import "NativeTriggers.h"
