// What the hyperparameter setters (src/callbacks/param.cpp, scheduled_param.cpp) share.
#pragma once

#include <cmath>

namespace trainpack {
namespace detail {

// numpy.isclose(a, b) with its defaults (rtol 1e-5, atol 1e-8): whether a param already holds the
// value a setter would give it.
inline bool is_close(double a, double b) { return std::fabs(a - b) <= 1e-8 + 1e-5 * std::fabs(b); }

}  // namespace detail
}  // namespace trainpack
