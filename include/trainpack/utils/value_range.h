// The values a hyperparameter accepts: always a finite number, optionally bounded below and above.
// A setter that computes a value outside its param's range (a schedule, a function, hyper.txt)
// logs a warning naming where the value came from and the range, and keeps the current value.
//
//   ValueRange().min_exclusive(0)        // the learning rate: finite and > 0
//   ValueRange().min(0).max(1)           // a dropout rate: finite, >= 0 and <= 1
//   ValueRange()                         // any finite value
//
// The setters return the range, so they chain. A bound that is NaN, or bounds that leave no value
// (min above max, or equal with one of them exclusive), throw std::invalid_argument naming the
// bounds.
#pragma once

#include <optional>
#include <string>

namespace trainpack {

class ValueRange {
 public:
  // Any finite value.
  ValueRange() = default;

  // Values >= `v` (min) or > `v` (min_exclusive); a later call replaces the lower bound.
  ValueRange& min(double v);
  ValueRange& min_exclusive(double v);
  // Values <= `v` (max) or < `v` (max_exclusive); a later call replaces the upper bound.
  ValueRange& max(double v);
  ValueRange& max_exclusive(double v);

  // Whether `v` is finite and within the bounds.
  bool contains(double v) const;

  // Both ranges at once: the tighter of each bound.
  ValueRange intersect(const ValueRange& other) const;

  // "finite", "finite and > 0", "finite, >= 0 and <= 1" (numbers in their shortest form).
  std::string str() const;

 private:
  struct Bound {
    double value;
    bool exclusive;
  };
  ValueRange& set_lower(double v, bool exclusive);
  ValueRange& set_upper(double v, bool exclusive);
  void check_not_empty() const;

  std::optional<Bound> lower_;
  std::optional<Bound> upper_;
};

}  // namespace trainpack
