// A standalone C++ program that uses the crash reporter the way a C++ app does: linked against the reporter's
// static library (libreporter.a) and enabled through its C API (reporter/include/crash_reporter.h). Built and
// crashed by tests/tests/cxx_client.rs.
//
// Usage: cxx-client <scenario> <report-dir> [<ignored>]   (the third argument is the crash harness's count file)
// Scenarios:
//   derived   throws inventory::OutOfStock (derived from std::runtime_error) from `reserve_item()`, called by
//             `place_order()`, called by main; nothing catches it, so the C++ runtime calls std::terminate with
//             the throw site still on the stack.
//   int       throws the int 42 the same way (not a std::exception: no what()).
// Before throwing it prints `FAULT_TID <tid>`, flushed.
#include <stdexcept>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "crash_reporter.h"

namespace inventory {
class OutOfStock : public std::runtime_error {
  public:
    explicit OutOfStock(const char *what) : std::runtime_error(what) {}
};
}  // namespace inventory

// Read through a volatile, so the compiler cannot see that every call throws.
volatile int throw_int = 0;
volatile int sink;

__attribute__((noinline)) static void reserve_item(int bin) {
    if (throw_int) {
        throw 42;
    }
    throw inventory::OutOfStock(bin == 7 ? "no widgets left in bin 7" : "no widgets left");
}

__attribute__((noinline)) static void place_order(int bin) {
    reserve_item(bin);
    sink = bin;  // work after the call: not a tail call
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: cxx-client <derived|int> <report-dir>\n");
        return 2;
    }
    CrashReporterStatus s = crash_reporter_enable(argv[2], nullptr, "cxx-client", "1.0", "1");
    if (s != CRASH_REPORTER_STATUS_OK) {
        fprintf(stderr, "crash_reporter_enable failed: %d\n", (int)s);
        return 3;
    }
    crash_reporter_set_value("screen", "checkout");
    if (strcmp(argv[1], "int") == 0) {
        throw_int = 1;
    } else if (strcmp(argv[1], "derived") != 0) {
        fprintf(stderr, "unknown scenario %s\n", argv[1]);
        return 2;
    }
    printf("FAULT_TID %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    place_order(7);
    printf("NO_CRASH\n");
    return 4;
}
