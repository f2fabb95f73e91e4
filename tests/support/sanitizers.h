// Test support: what a sanitizer build cannot check.
#pragma once

#include <gtest/gtest.h>

// ThreadSanitizer cannot check the tests whose processes train together: every collective hands
// tensors and c10d Work objects to the Gloo threads inside Debian's libtorch_cpu and libgloo,
// which are not instrumented, so TSan sees both ends of the hand-off but not the synchronisation
// between them (c10d's mutexes and reference counts) and reports it as a race on every run: a
// Work's condition variable destroyed after Gloo's thread signalled it, a tensor created by the
// training thread and freed by the thread that dropped the last reference, Gloo's own buffers.
// Silencing them would take suppressions on LibTorch's tensor life cycle, which would hide real
// races elsewhere; so under TSan these tests are skipped, with this message. ASan and the normal
// build run them.
#if defined(__SANITIZE_THREAD__)
#define TRAINPACK_SKIP_UNDER_TSAN()                                                      \
  GTEST_SKIP() << "not checkable under ThreadSanitizer: c10d's Gloo collectives run in " \
                  "uninstrumented libtorch_cpu/libgloo (tests/support/sanitizers.h says why)"
#else
#define TRAINPACK_SKIP_UNDER_TSAN() (void)0
#endif

// A build made without Gloo's headers has no CPU backend for a group of processes (the "gloo"
// backend says so when asked for; DistributedOptionsTest checks the message there): the tests
// whose ranks train together on the CPU are skipped, with this message. tests/CMakeLists.txt
// defines TRAINPACK_WITH_GLOO for the tests when the library has the backend.
#if defined(TRAINPACK_WITH_GLOO)
#define TRAINPACK_SKIP_WITHOUT_GLOO() (void)0
#else
#define TRAINPACK_SKIP_WITHOUT_GLOO()                                                     \
  GTEST_SKIP() << "trainpack was built without Gloo's headers (libgloo-dev): no CPU backend " \
                  "for a group of processes"
#endif

// A test that forks a child which then starts threads (a trainer with writer threads, or a death
// test) from a process that already has threads: ThreadSanitizer refuses that ("starting new
// threads after multi-threaded fork is not supported") and kills the child, so under TSan such a
// test is skipped with this message; ASan and the normal build run it.
#if defined(__SANITIZE_THREAD__)
#define TRAINPACK_SKIP_FORK_UNDER_TSAN()                                                \
  GTEST_SKIP() << "not checkable under ThreadSanitizer: the child of a multi-threaded " \
                  "fork starts threads (tests/support/sanitizers.h says why)"
#else
#define TRAINPACK_SKIP_FORK_UNDER_TSAN() (void)0
#endif
