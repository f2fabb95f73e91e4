#include "trainpack/input/pass_order.h"

#include <random>
#include <utility>

namespace trainpack {

namespace {

// SplitMix64's finaliser: mixes (seed, pass) into one well-spread 64-bit seed.
uint64_t pass_order_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, bound] by rejection; written by hand because std::uniform_int_distribution's
// output is implementation-defined (the order must not change with the standard library).
uint64_t pass_order_uniform_upto(std::mt19937_64& rng, uint64_t bound) {
  if (bound == 0) return 0;
  const uint64_t range = bound + 1;  // bound < 2^63 here, no overflow
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % range;
}

}  // namespace

std::vector<int64_t> pass_order(int64_t size, bool shuffle, uint64_t seed, int64_t pass) {
  std::vector<int64_t> order(static_cast<size_t>(size > 0 ? size : 0));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (!shuffle || order.size() < 2) return order;
  std::mt19937_64 rng(pass_order_mix(seed ^ pass_order_mix(static_cast<uint64_t>(pass))));
  for (size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[pass_order_uniform_upto(rng, i)]);
  }
  return order;
}

}  // namespace trainpack
