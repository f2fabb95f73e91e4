// The order in which a shuffled dataflow visits its datapoints in one pass.
#pragma once

#include <cstdint>
#include <vector>

namespace trainpack {

// The indices 0..size-1 in the order of pass `pass`: the identity without `shuffle`, else a
// Fisher-Yates shuffle drawn from std::mt19937_64 seeded from (seed, pass). A pure function of
// its arguments, the same with every compiler and standard library (no std:: distribution is
// used: their output is implementation-defined). DataFromList and ImageFolderFiles order their
// passes with it, so a resumed run (or another rank) that knows (seed, pass) knows the order.
std::vector<int64_t> pass_order(int64_t size, bool shuffle, uint64_t seed, int64_t pass);

}  // namespace trainpack
