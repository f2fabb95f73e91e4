// Default runtime options of the sanitizers for the test binary (TRAINPACK_ASAN / TRAINPACK_TSAN
// builds). The runtimes call these functions at start-up, before reading ASAN_OPTIONS,
// UBSAN_OPTIONS and TSAN_OPTIONS, so a variable set by hand still wins. Compiled into
// trainpack_tests by tests/CMakeLists.txt; empty in a build without sanitizers.
//
//   ASan:  detect_stack_use_after_return catches a callback that uses a Trainer which lived on a
//          stack frame that has returned; the init-order checks catch static initialisers that
//          use another translation unit's globals.
//   UBSan: print_stacktrace says where an error is (the default prints only the header line).
//   TSan:  halt at the first report; suppressions from tests/sanitizers/tsan.supp (only for
//          uninstrumented third-party code; see that file).

// GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; Clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define TRAINPACK_HAS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINPACK_HAS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TRAINPACK_HAS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TRAINPACK_HAS_TSAN 1
#endif
#endif

#define TRAINPACK_SANITIZER_HOOK extern "C" __attribute__((visibility("default"), used))

#if defined(TRAINPACK_HAS_ASAN)
TRAINPACK_SANITIZER_HOOK const char* __asan_default_options() {
  return "detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1";
}
// TRAINPACK_ASAN builds add UndefinedBehaviorSanitizer to AddressSanitizer.
TRAINPACK_SANITIZER_HOOK const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}
#endif

#if defined(TRAINPACK_HAS_TSAN)
TRAINPACK_SANITIZER_HOOK const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1:suppressions=" TRAINPACK_TSAN_SUPPRESSIONS;
}
#endif
