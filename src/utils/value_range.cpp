#include "trainpack/utils/value_range.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace trainpack {

ValueRange& ValueRange::min(double v) { return set_lower(v, false); }
ValueRange& ValueRange::min_exclusive(double v) { return set_lower(v, true); }
ValueRange& ValueRange::max(double v) { return set_upper(v, false); }
ValueRange& ValueRange::max_exclusive(double v) { return set_upper(v, true); }

ValueRange& ValueRange::set_lower(double v, bool exclusive) {
  if (std::isnan(v)) throw std::invalid_argument("ValueRange: the lower bound is NaN");
  lower_ = Bound{v, exclusive};
  check_not_empty();
  return *this;
}

ValueRange& ValueRange::set_upper(double v, bool exclusive) {
  if (std::isnan(v)) throw std::invalid_argument("ValueRange: the upper bound is NaN");
  upper_ = Bound{v, exclusive};
  check_not_empty();
  return *this;
}

void ValueRange::check_not_empty() const {
  if (!lower_ || !upper_) return;
  const bool empty = lower_->value > upper_->value ||
                     (lower_->value == upper_->value && (lower_->exclusive || upper_->exclusive));
  if (empty) {
    throw std::invalid_argument(fmt::format("ValueRange: no value is {}; check the bounds", str()));
  }
}

bool ValueRange::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lower_ && (lower_->exclusive ? !(v > lower_->value) : !(v >= lower_->value))) return false;
  if (upper_ && (upper_->exclusive ? !(v < upper_->value) : !(v <= upper_->value))) return false;
  return true;
}

ValueRange ValueRange::intersect(const ValueRange& other) const {
  ValueRange out = *this;
  if (other.lower_ && (!out.lower_ || other.lower_->value > out.lower_->value ||
                       (other.lower_->value == out.lower_->value && other.lower_->exclusive))) {
    out.lower_ = other.lower_;
  }
  if (other.upper_ && (!out.upper_ || other.upper_->value < out.upper_->value ||
                       (other.upper_->value == out.upper_->value && other.upper_->exclusive))) {
    out.upper_ = other.upper_;
  }
  out.check_not_empty();
  return out;
}

std::string ValueRange::str() const {
  std::string lo, hi;
  if (lower_)
    lo = fmt::format("{} {}", lower_->exclusive ? ">" : ">=", fmt::format("{}", lower_->value));
  if (upper_)
    hi = fmt::format("{} {}", upper_->exclusive ? "<" : "<=", fmt::format("{}", upper_->value));
  if (lo.empty() && hi.empty()) return "finite";
  if (lo.empty() || hi.empty()) return "finite and " + lo + hi;
  return "finite, " + lo + " and " + hi;
}

}  // namespace trainpack
