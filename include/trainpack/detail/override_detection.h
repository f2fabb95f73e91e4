// Finding out, at run time, whether an object's class overrides a virtual member function.
//
// Why: a callback that does not override a hook must cost nothing in that hook (the per-step
// path visits only the callbacks that do something in it), so the trainer builds per-hook dispatch
// lists once, at setup. C++ has no portable way to ask "which function does this object's vtable
// slot hold?", so this reads the slot under the Itanium C++ ABI (GCC and Clang on Linux and macOS;
// the ARM variant keeps the virtual flag in the adjustment word). Elsewhere it answers
// "overridden", which is always correct, only slower.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace trainpack {
namespace detail {

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || \
                          defined(__arm__) || defined(__powerpc64__) || defined(__riscv))
#define TRAINPACK_ITANIUM_PMF 1
#endif

// The function in the vtable slot of `object` that `pmf` (a pointer to a virtual member of
// `Base`) designates, or nullptr when it cannot be determined.
template <typename Base, typename Pmf>
const void* virtual_slot(const Base& object, Pmf pmf) {
#if defined(TRAINPACK_ITANIUM_PMF)
  struct Rep {
    std::uintptr_t ptr;
    std::ptrdiff_t adj;
  };
  static_assert(sizeof(Pmf) == sizeof(Rep), "unexpected member function pointer layout");
  Rep rep;
  std::memcpy(&rep, &pmf, sizeof rep);
#if defined(__arm__) || defined(__aarch64__)
  if ((rep.adj & 1) == 0) return nullptr;  // not a virtual function
  const std::uintptr_t offset = rep.ptr;
#else
  if ((rep.ptr & 1) == 0) return nullptr;  // not a virtual function
  const std::uintptr_t offset = rep.ptr - 1;
#endif
  const char* vtable = nullptr;
  std::memcpy(&vtable, static_cast<const void*>(&object), sizeof vtable);
  const void* fn = nullptr;
  std::memcpy(&fn, vtable + offset, sizeof fn);
  return fn;
#else
  (void)object;
  (void)pmf;
  return nullptr;
#endif
}

// True unless `object` and `reference` (an object of the base class that overrides nothing)
// provably hold the same function in the slot of `pmf`.
template <typename Base, typename Pmf>
bool overrides_virtual(const Base& object, const Base& reference, Pmf pmf) {
  const void* mine = virtual_slot(object, pmf);
  const void* base = virtual_slot(reference, pmf);
  return mine == nullptr || base == nullptr || mine != base;
}

}  // namespace detail
}  // namespace trainpack
