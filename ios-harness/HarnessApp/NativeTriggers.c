// C crash triggers. See NativeTriggers.h for what each does and why the names matter.
#include "NativeTriggers.h"

#include <dispatch/dispatch.h>
#include <mach/mach.h>
#include <malloc/malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

// Never inlined, never tail-calling: the function keeps its own frame and stays on the stack below its callee.
#define HARNESS_FRAME __attribute__((noinline, disable_tail_calls))

// Always inlined, so the faulting store is in the trigger's own frame (frame 0 of the crashed thread).
static inline __attribute__((always_inline)) void harness_write_bad_address(char value) {
    // volatile: the store is neither removed nor turned into a trap instruction.
    volatile char *p = (volatile char *)(uintptr_t)HARNESS_BAD_ADDRESS;
    *p = value;
}

HARNESS_FRAME void harness_trigger_abort(void) {
    abort();
}

// Work after the sleep, so the call is not a tail call and this frame stays on the stack while it sleeps.
static volatile int harness_hang_sink;

HARNESS_FRAME void harness_trigger_hang(unsigned seconds) {
    struct timespec left = {(time_t)seconds, 0};
    while (nanosleep(&left, &left) != 0) {
    }
    harness_hang_sink++;
}

HARNESS_FRAME void harness_trigger_bad_pointer(void) {
    harness_write_bad_address(1);
}

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winfinite-recursion"
HARNESS_FRAME unsigned harness_stack_overflow_recurse(unsigned depth) {
    volatile char pad[512];
    pad[depth % sizeof pad] = (char)depth;
    // Using the result after the call keeps this from being a tail call even if the attribute were ignored.
    return harness_stack_overflow_recurse(depth + 1) + (unsigned)pad[(depth * 7u) % sizeof pad];
}
#pragma clang diagnostic pop

HARNESS_FRAME void harness_trigger_stack_overflow(void) {
    (void)harness_stack_overflow_recurse(0);
}

HARNESS_FRAME void harness_background_queue_crash(void) {
    harness_write_bad_address(2);
}

static void harness_background_queue_work(void *context) {
    (void)context;
    harness_background_queue_crash();
}

HARNESS_FRAME void harness_trigger_background_queue(void) {
    dispatch_queue_t queue = dispatch_queue_create(HARNESS_CRASH_QUEUE_LABEL, DISPATCH_QUEUE_SERIAL);
    dispatch_async_f(queue, NULL, harness_background_queue_work);
}

// --- malloc lock ---------------------------------------------------------------------------------------------------

static atomic_int harness_malloc_locked;

HARNESS_FRAME void *harness_hold_malloc_lock(void *unused) {
    (void)unused;
    pthread_setname_np(HARNESS_MALLOC_LOCK_THREAD_NAME);
    // Every registered zone, not just malloc_default_zone(): the default zone may be a wrapper, and with the nano
    // allocator the zone that has locks is the helper (scalable) zone behind it. force_lock is what fork() uses to
    // take each zone's locks; nothing here releases them. Zones without a lock (nano v2) have a no-op force_lock.
    vm_address_t *zones = NULL;
    unsigned count = 0;
    if (malloc_get_all_zones(mach_task_self(), NULL, &zones, &count) == KERN_SUCCESS && zones != NULL) {
        for (unsigned i = 0; i < count; i++) {
            malloc_zone_t *zone = (malloc_zone_t *)zones[i];
            if (zone != NULL && zone->introspect != NULL && zone->introspect->force_lock != NULL) {
                zone->introspect->force_lock(zone);
            }
        }
    }
    atomic_store(&harness_malloc_locked, 1);
    for (;;) {
        (void)pause(); // hold the locks until the process dies
    }
}

HARNESS_FRAME void harness_trigger_malloc_lock(void) {
    pthread_t holder;
    if (pthread_create(&holder, NULL, harness_hold_malloc_lock, NULL) != 0) {
        return; // no report arrives, and the UI test says so
    }
    // From here on this thread must not allocate: spin (sched_yield is a plain system call).
    while (atomic_load(&harness_malloc_locked) == 0) {
        sched_yield();
    }
    harness_write_bad_address(3);
}

// --- plain thread --------------------------------------------------------------------------------------------------

static void (*volatile harness_plain_thread_fn)(void);

static void *harness_plain_thread_main(void *unused) {
    (void)unused;
    pthread_setname_np(HARNESS_PLAIN_THREAD_NAME);
    harness_plain_thread_fn();
    return NULL;
}

void harness_run_on_plain_thread(void (*fn)(void)) {
    harness_plain_thread_fn = fn;
    pthread_t thread;
    if (pthread_create(&thread, NULL, harness_plain_thread_main, NULL) != 0) {
        return;
    }
    (void)pthread_join(thread, NULL);
}
