/* Crash client in C for the frame oracle (tests/tests/oracle.rs): enables crash reporting through the reporter's
 * C ABI (reporter/include/crash_reporter.h, linked from libreporter.a), starts three helper threads that block in
 * different libc calls, then crashes with one scenario per process.
 *
 * Usage: oracle-client <scenario> <report-dir>
 * Scenarios:
 *   leaf      NULL write in the frameless leaf `leaf()`, called by `middle()`, called by `top()`, called by main.
 *   memcpy    memcpy from a bad source pointer, called by `copy_in()`, called by `do_copy()`, called by main.
 *   abort     abort() in `fail_hard()`, called by `do_abort()`, called by main.
 *   assert    a failing assert() in `check_value()`, called by `do_assert()`, called by main.
 *   thread    NULL write in `crash_on_thread()` <- `worker_step()` <- `worker_main()` on a pthread_create thread,
 *             while main waits in pthread_join.
 *   ondemand  stacks on demand first: main captures every helper thread's stack with `crash_reporter_thread_stack`
 *             and its own with `crash_reporter_current_stack` (in `capture_own()`), prints them as
 *             `ONDEMAND <tid> <hex>...` and `ONDEMAND_SELF <tid> <hex>...`, waits until the helpers are parked in
 *             their calls again, then crashes as `leaf` does. The test compares the helpers' on-demand stacks with
 *             the debugger's at the crash (the helpers have not moved), and main's own with the debugger's callers
 *             of `main`.
 *
 * Built by the test with `cc -O2 -g`, once with -fno-omit-frame-pointer and once with -fomit-frame-pointer. Every
 * function the test expects in a backtrace is `noinline, noclone` and does some work after its call, so the call
 * is neither inlined nor turned into a tail jump. `leaf()` is frameless in both builds (GCC 12 already leaves a
 * leaf without a frame at -O2; the `optimize` attribute below says so explicitly, and the test checks the
 * machine code), the case a frame-pointer walker cannot see through.
 *
 * Before crashing it prints `THREAD <role> <tid>` for every helper thread and `FAULT_TID <tid>` for the thread
 * that will crash, each line flushed. Every thread but the crashing one is blocked in its system call (checked
 * through /proc/self/task/<tid>/syscall) before the crash, so no thread moves between the debugger's stop at the
 * fatal signal and our handler's stop, and the two views must agree. */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "crash_reporter.h"

#define NOINLINE __attribute__((noinline, noclone))
#if defined(__clang__)
#define FRAMELESS
#else
#define FRAMELESS __attribute__((optimize("omit-frame-pointer")))
#endif

/* Work after a call, so the call is not a tail call. */
volatile int sink;
/* Read through volatile pointers, so the compiler cannot prove them NULL or bad and fold the fault away. */
int *volatile null_ptr;
const char *volatile bad_src = (const char *)16;
volatile size_t copy_len = 64;
volatile int assert_value = 41;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go; /* never set: the condition waiter waits forever */
static int pipe_fds[2];

static long tid(void) { return syscall(SYS_gettid); }

static void say(const char *what, long id) {
  printf("%s %ld\n", what, id);
  fflush(stdout);
}

/* ---- helper threads, each two app frames deep, then blocked in libc ---- */

NOINLINE void wait_on_cond(void) {
  pthread_mutex_lock(&mu);
  while (!go) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  sink++;
}

NOINLINE void *cond_thread(void *arg) {
  (void)arg;
  wait_on_cond();
  sink++;
  return NULL;
}

NOINLINE void sleep_long(void) {
  struct timespec ts = {100000, 0};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  sink++;
}

NOINLINE void *sleep_thread(void *arg) {
  (void)arg;
  sleep_long();
  sink++;
  return NULL;
}

NOINLINE void read_pipe(void) {
  char c;
  while (read(pipe_fds[0], &c, 1) < 0 && errno == EINTR) {
  }
  sink++;
}

NOINLINE void *pipe_thread(void *arg) {
  (void)arg;
  read_pipe();
  sink++;
  return NULL;
}

/* The blocking calls the threads park in, by the number /proc/self/task/<tid>/syscall shows for each. */
enum blocking_call { CALL_FUTEX, CALL_NANOSLEEP, CALL_READ };

/* First field of /proc/self/task/<t>/syscall, or -1 (also while it reads "running"). */
static long proc_syscall_nr(long t) {
  char path[64], buf[128];
  snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", t);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  if (strncmp(buf, "running", 7) == 0) return -1;
  return strtol(buf, NULL, 10);
}

/* The number /proc shows for `call`. Natively that is this build's SYS_ number. Under qemu-user (the arm64 suite,
 * scripts/test-arm64.sh) the file is the host kernel's, about the host thread that qemu runs the guest thread on:
 * qemu makes each blocking call on the guest's behalf with the host's number. The two are told apart by reading
 * the file for the calling thread itself, which shows the `read` in progress: this build's SYS_read natively,
 * x86_64's read (0) under qemu-user on an x86_64 host, the only host the emulated suite runs on; any other
 * numbering stops the client rather than wait for the wrong call. */
static long proc_nr(enum blocking_call call) {
  static const long native[3] = {SYS_futex, SYS_clock_nanosleep, SYS_read};
  static const long x86_64_host[3] = {202, 230, 0}; /* arch/x86/entry/syscalls/syscall_64.tbl */
  static long self_read = -2;
  if (self_read == -2) self_read = proc_syscall_nr(tid());
  if (self_read == SYS_read) return native[call];
  if (self_read == 0) return x86_64_host[call];
  fprintf(stderr, "unknown /proc syscall numbering: this thread's read shows as %ld\n", self_read);
  exit(5);
}

/* Waits until thread `t` is blocked in `call` (first field of /proc/self/task/<t>/syscall). */
static void wait_blocked(long t, enum blocking_call call) {
  long nr = proc_nr(call);
  for (int i = 0; i < 10000; i++) {
    if (proc_syscall_nr(t) == nr) return;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "thread %ld never blocked in syscall %ld\n", t, nr);
  exit(5);
}

static volatile long helper_tids[3];

static void *start_helper(void *arg) {
  long i = (long)arg;
  helper_tids[i] = tid();
  if (i == 0) return cond_thread(NULL);
  if (i == 1) return sleep_thread(NULL);
  return pipe_thread(NULL);
}

static void start_helpers(void) {
  static const char *roles[3] = {"THREAD cond", "THREAD sleep", "THREAD pipe"};
  static const enum blocking_call calls[3] = {CALL_FUTEX, CALL_NANOSLEEP, CALL_READ};
  if (pipe(pipe_fds) != 0) exit(5);
  for (long i = 0; i < 3; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, start_helper, (void *)i) != 0) exit(5);
  }
  for (int i = 0; i < 3; i++) {
    while (helper_tids[i] == 0) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    wait_blocked(helper_tids[i], calls[i]);
    say(roles[i], helper_tids[i]);
  }
}

/* ---- scenarios ---- */

FRAMELESS NOINLINE int leaf(int *p) {
  *p = 42;
  return p[1];
}

NOINLINE int middle(int *p) {
  int r = leaf(p);
  sink += r;
  return r + 1;
}

NOINLINE int top(int *p) {
  int r = middle(p);
  sink += r;
  return r + 2;
}

NOINLINE void copy_in(char *dst) {
  memcpy(dst, bad_src, copy_len);
  sink += dst[0];
}

NOINLINE void do_copy(void) {
  char buf[256];
  copy_in(buf);
  sink += buf[1];
}

NOINLINE void fail_hard(void) {
  abort();
}

NOINLINE void do_abort(void) {
  fail_hard();
  sink++;
}

NOINLINE void check_value(int v) {
  assert(v == 42);
  sink += v;
}

NOINLINE void do_assert(void) {
  check_value(assert_value);
  sink++;
}

NOINLINE void crash_on_thread(void) {
  say("FAULT_TID", tid());
  *null_ptr = 7;
  sink++;
}

NOINLINE void worker_step(void) {
  crash_on_thread();
  sink++;
}

/* Prints `<tag> <tid> <hex frame>...` on one line. */
static void print_frames(const char *tag, long t, const uint64_t *frames, size_t n) {
  printf("%s %ld", tag, t);
  for (size_t i = 0; i < n; i++) printf(" %llx", (unsigned long long)frames[i]);
  printf("\n");
  fflush(stdout);
}

NOINLINE void capture_own(void) {
  uint64_t frames[256];
  size_t n = 0;
  bool cut = true;
  if (crash_reporter_current_stack(frames, 256, 0, &n, &cut) != CRASH_REPORTER_STATUS_OK || cut) exit(6);
  print_frames("ONDEMAND_SELF", tid(), frames, n);
  sink++;
}

static void capture_helpers(void) {
  static const enum blocking_call calls[3] = {CALL_FUTEX, CALL_NANOSLEEP, CALL_READ};
  for (int i = 0; i < 3; i++) {
    uint64_t frames[256];
    size_t n = 0;
    bool cut = true;
    enum CrashReporterStatus s = crash_reporter_thread_stack((uint64_t)helper_tids[i], frames, 256, 10000, &n, &cut);
    if (s != CRASH_REPORTER_STATUS_OK || cut) {
      fprintf(stderr, "crash_reporter_thread_stack(%ld) failed: %d\n", (long)helper_tids[i], (int)s);
      exit(6);
    }
    print_frames("ONDEMAND", helper_tids[i], frames, n);
  }
  /* The capture signal interrupted each helper's call; wait until every one is back in it. */
  for (int i = 0; i < 3; i++) wait_blocked(helper_tids[i], calls[i]);
}

static long main_tid;

NOINLINE void *worker_main(void *arg) {
  (void)arg;
  /* Crash only once main is blocked in pthread_join, so no thread moves between the debugger's stop and ours. */
  wait_blocked(main_tid, CALL_FUTEX);
  worker_step();
  sink++;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: oracle-client <scenario> <report-dir>\n");
    return 2;
  }
  const char *scenario = argv[1];
  enum CrashReporterStatus s = crash_reporter_enable(argv[2], NULL, "oracle-client", "1.0", "1");
  if (s != CRASH_REPORTER_STATUS_OK) {
    fprintf(stderr, "crash_reporter_enable failed: %d\n", (int)s);
    return 3;
  }
  start_helpers();
  main_tid = tid();
  say("MAIN_TID", main_tid);
  if (strcmp(scenario, "thread") != 0) say("FAULT_TID", tid());
  if (strcmp(scenario, "ondemand") == 0) {
    capture_own();
    capture_helpers();
    sink += top(null_ptr);
  } else if (strcmp(scenario, "leaf") == 0) {
    sink += top(null_ptr);
  } else if (strcmp(scenario, "memcpy") == 0) {
    do_copy();
  } else if (strcmp(scenario, "abort") == 0) {
    do_abort();
  } else if (strcmp(scenario, "assert") == 0) {
    do_assert();
  } else if (strcmp(scenario, "thread") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker_main, NULL) != 0) return 5;
    pthread_join(t, NULL);
  } else {
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  say("NO_CRASH", 0);
  return 4;
}
