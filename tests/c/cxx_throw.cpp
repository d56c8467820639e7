// A C++ library the crash tests build with `c++` and the crash client loads before it installs the handler
// (tests/tests/crashes.rs, triggers `cxx_runtime_error` and `cxx_non_std`). A thread it creates throws an exception
// nothing catches: the C++ runtime calls std::terminate with the throw site still on the stack.
#include <pthread.h>
#include <stdexcept>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace crashtest {
struct NotAnException {
    int code;
};
}  // namespace crashtest

extern "C" {
__attribute__((noinline)) void cxx_throw_runtime_error(void) {
    throw std::runtime_error("the widget registry is empty");
}

__attribute__((noinline)) void cxx_throw_non_std(void) {
    throw crashtest::NotAnException{42};
}
}

static void *thrower(void *arg) {
    printf("FAULT_TID %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    if (arg != nullptr) {
        cxx_throw_runtime_error();
    } else {
        cxx_throw_non_std();
    }
    return nullptr;
}

extern "C" void cxx_throw_in_thread(int std_exception) {
    pthread_t t;
    pthread_create(&t, nullptr, thrower, std_exception ? (void *)1 : nullptr);
    pthread_join(t, nullptr);
}
