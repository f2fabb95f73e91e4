// Checks of the main job's command-line values, as CLI11 validators whose messages say the bound in
// words and name the flag: "--lr: must be a finite number greater than 0, got 'nan'". CLI11's own
// Range and PositiveNumber let `nan` through (every comparison with NaN is false), print bounds
// like "0.000000 to 1797693134862315708...", and call "1e3" out of range when it is not a whole
// number; these parse the text themselves.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

namespace fashion_mnist {

// A whole number in [min, max] (decimal digits, an optional leading '-'; no exponent, no
// fraction).
inline CLI::Validator whole_number(int64_t min, int64_t max) {
  const std::string bounds =
      max == std::numeric_limits<int64_t>::max()
          ? "a whole number of at least " + std::to_string(min)
          : "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, bounds](std::string& text) -> std::string {
        const bool digits =
            !text.empty() &&
            text.find_first_not_of("0123456789", text[0] == '-' ? 1 : 0) == std::string::npos &&
            text != "-";
        if (!digits) return "must be " + bounds + ", got '" + text + "'";
        errno = 0;
        char* end = nullptr;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        if (errno == ERANGE || value < min || value > max) {
          return "must be " + bounds + ", got " + text;
        }
        return {};
      },
      "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

// A whole number from 0 to 2^64-1 (a seed): "-1" is refused, not wrapped around.
inline CLI::Validator unsigned_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::string bounds = "a whole number from 0 to 18446744073709551615";
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
          return "must be " + bounds + ", got '" + text + "'";
        }
        errno = 0;
        std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE) return "must be " + bounds + ", got " + text;
        return {};
      },
      "UINT64");
}

// A finite number above `min` (or at least `min` when `min_inclusive`) and at most `max`.
inline CLI::Validator finite_number(double min, bool min_inclusive,
                                    double max = std::numeric_limits<double>::max()) {
  std::string bounds = min_inclusive ? "a finite number of at least " : "a finite number above ";
  bounds += fmt::format("{}", min);
  if (max < std::numeric_limits<double>::max()) {
    bounds = min_inclusive ? "a finite number from " + fmt::format("{}", min) + " to " +
                                 fmt::format("{}", max)
                           : bounds + " and at most " + fmt::format("{}", max);
  }
  return CLI::Validator(
      [min, min_inclusive, max, bounds](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double value = text.empty() ? NAN : std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end != nullptr && *end == '\0';
        if (!parsed || !std::isfinite(value) || errno == ERANGE) {
          return "must be " + bounds + ", got '" + text + "'";
        }
        if (value < min || (!min_inclusive && value == min) || value > max) {
          return "must be " + bounds + ", got " + text;
        }
        return {};
      },
      "NUMBER");
}

// --profile-steps A:B: two whole numbers with 1 <= A <= B, global steps (the first step of a run is
// global step 1). parse_step_range reads a text this validator accepted.
inline CLI::Validator step_range() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::string form =
            "must be A:B, global steps from A to B inclusive with 1 <= A <= B (e.g. 100:104)";
        const size_t colon = text.find(':');
        const auto whole = [](const std::string& part) {
          return !part.empty() && part.size() <= 15 &&
                 part.find_first_not_of("0123456789") == std::string::npos;
        };
        if (colon == std::string::npos || !whole(text.substr(0, colon)) ||
            !whole(text.substr(colon + 1))) {
          return form + ", got '" + text + "'";
        }
        const long long a = std::stoll(text.substr(0, colon));
        const long long b = std::stoll(text.substr(colon + 1));
        if (a < 1) return form + "; the first step is 1, got " + text;
        if (a > b) return form + "; A is after B in " + text;
        return {};
      },
      "A:B");
}

inline std::pair<int64_t, int64_t> parse_step_range(const std::string& text) {
  const size_t colon = text.find(':');
  return {std::stoll(text.substr(0, colon)), std::stoll(text.substr(colon + 1))};
}

}  // namespace fashion_mnist
