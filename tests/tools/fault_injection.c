/* fault_injection.c: an LD_PRELOAD library that makes the writes to chosen files fail, for the
 * main job's chaos suite (examples/fashion_mnist/chaos/): a process killed in the middle of
 * writing one particular file, or a disk that is full (or a file that is too large) for that one
 * file only, at a write that a scenario picks, which neither a signal sent from outside nor a
 * small tmpfs can aim at.
 *
 * It interposes write(), pwrite(), pwrite64() and writev() (found with dlsym(RTLD_NEXT)). Its
 * configuration comes from the environment, read once, at the first write:
 *   TRAINPACK_FAULT_PATH=<substring>  only writes to a descriptor whose path (readlink of
 *                                     /proc/self/fd/N) contains it are affected; unset or empty:
 *                                     nothing is;
 *   TRAINPACK_FAULT=kill|enospc|efbig what happens at the first matching write once
 *                                     TRAINPACK_FAULT_SKIP of them (default 0) went through:
 *                                     kill raises SIGKILL; enospc and efbig make that write and
 *                                     every later matching one fail with ENOSPC or EFBIG.
 * A write to any other descriptor goes straight to the C library, errno untouched. Calls made by
 * the C library to itself (stdio's buffered output) do not pass through here; trainpack writes its
 * files with write()/pwrite() (and libstdc++'s streams use write()/writev()), which do.
 *
 * Writes may come from several threads (the checkpoint writer, the statistics writer) and from
 * signal handlers: the matching count is an atomic, the configuration is read once before main()
 * runs, and the write path allocates nothing (a stack buffer for the path) and calls only
 * async-signal-safe functions.
 *
 * Build: gcc -shared -fPIC -O2 -o libfault.so fault_injection.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum fault { FAULT_NONE, FAULT_KILL, FAULT_ENOSPC, FAULT_EFBIG };

/* The configuration and the C library's functions are set up by the constructor, when the library
 * is loaded and before main() or any thread of the program runs, so that the write path reads
 * them without locks and never calls dlsym() (not async-signal-safe) from a signal handler. A
 * write made earlier (by the constructor of another preloaded library) sets them up itself. */
static atomic_int ready = 0;
static enum fault config_fault = FAULT_NONE;
static char config_path[1024];
static long long config_skip = 0;
/* Matching writes seen so far. */
static atomic_llong matched = 0;

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void*, size_t, off64_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);

static write_fn real_write;
static pwrite_fn real_pwrite;
static pwrite64_fn real_pwrite64;
static writev_fn real_writev;

/* A message on stderr with the raw system call: stdio, or write() itself, may be what fails. */
static void say(const char* msg) { (void)syscall(SYS_write, 2, msg, strlen(msg)); }

static void* next_symbol(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == NULL) {
    say("fault_injection: dlsym(RTLD_NEXT) found no C library write function\n");
    abort();
  }
  return fn;
}

static void read_config(void) {
  const char* fault = getenv("TRAINPACK_FAULT");
  const char* path = getenv("TRAINPACK_FAULT_PATH");
  const char* skip = getenv("TRAINPACK_FAULT_SKIP");
  if (fault == NULL || fault[0] == '\0' || path == NULL || path[0] == '\0') return;
  enum fault wanted;
  if (strcmp(fault, "kill") == 0) {
    wanted = FAULT_KILL;
  } else if (strcmp(fault, "enospc") == 0) {
    wanted = FAULT_ENOSPC;
  } else if (strcmp(fault, "efbig") == 0) {
    wanted = FAULT_EFBIG;
  } else {
    /* A typo must not pass for a run without faults that went well. */
    say("fault_injection: TRAINPACK_FAULT is not kill, enospc or efbig; no fault is injected\n");
    return;
  }
  if (strlen(path) >= sizeof config_path) {
    say("fault_injection: TRAINPACK_FAULT_PATH is too long; no fault is injected\n");
    return;
  }
  strcpy(config_path, path);
  if (skip != NULL && skip[0] != '\0') config_skip = strtoll(skip, NULL, 10);
  config_fault = wanted;
}

/* Runs once: at load time (the constructor), or at a write that comes before it, when the
 * process has a single thread still. */
static void set_up(void) {
  if (atomic_load_explicit(&ready, memory_order_acquire)) return;
  real_write = (write_fn)next_symbol("write");
  real_pwrite = (pwrite_fn)next_symbol("pwrite");
  real_pwrite64 = (pwrite64_fn)next_symbol("pwrite64");
  real_writev = (writev_fn)next_symbol("writev");
  read_config();
  atomic_store_explicit(&ready, 1, memory_order_release);
}

__attribute__((constructor)) static void fault_injection_init(void) { set_up(); }

/* "/proc/self/fd/<fd>" into buf, without snprintf (not async-signal-safe). */
static void fd_link(int fd, char* buf) {
  static const char prefix[] = "/proc/self/fd/";
  memcpy(buf, prefix, sizeof prefix - 1);
  char digits[16];
  int n = 0;
  do {
    digits[n++] = (char)('0' + fd % 10);
    fd /= 10;
  } while (fd > 0);
  char* p = buf + sizeof prefix - 1;
  while (n > 0) *p++ = digits[--n];
  *p = '\0';
}

/* Whether fd's path contains the configured substring. errno is preserved: an unmatched write
 * must look exactly like one without this library. */
static int path_matches(int fd) {
  if (fd < 0) return 0;
  const int saved = errno;
  char link[32];
  char target[4096];
  fd_link(fd, link);
  const ssize_t n = readlink(link, target, sizeof target - 1);
  errno = saved;
  if (n <= 0) return 0;
  target[n] = '\0';
  return strstr(target, config_path) != NULL;
}

/* 0: let the write through; otherwise the errno it fails with (kill does not return). */
static int fault_for(int fd) {
  set_up();
  const enum fault fault = config_fault;
  if (fault == FAULT_NONE || !path_matches(fd)) return 0;
  const long long seen = atomic_fetch_add(&matched, 1);
  if (seen < config_skip) return 0;
  switch (fault) {
    case FAULT_KILL:
      /* SIGKILL cannot be caught: the process is gone before the write happens. */
      raise(SIGKILL);
      for (;;) pause();
    case FAULT_ENOSPC:
      return ENOSPC;
    case FAULT_EFBIG:
      return EFBIG;
    case FAULT_NONE:
      break;
  }
  return 0;
}

ssize_t write(int fd, const void* buf, size_t count) {
  const int err = fault_for(fd);
  if (err != 0) {
    errno = err;
    return -1;
  }
  return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  const int err = fault_for(fd);
  if (err != 0) {
    errno = err;
    return -1;
  }
  return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off64_t offset) {
  const int err = fault_for(fd);
  if (err != 0) {
    errno = err;
    return -1;
  }
  return real_pwrite64(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  const int err = fault_for(fd);
  if (err != 0) {
    errno = err;
    return -1;
  }
  return real_writev(fd, iov, iovcnt);
}
