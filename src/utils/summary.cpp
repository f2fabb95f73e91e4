#include "trainpack/utils/summary.h"

#include <utility>

namespace trainpack {

SummaryValue SummaryValue::make_scalar(std::string tag, double value) {
  SummaryValue v;
  v.tag = std::move(tag);
  v.kind = Kind::kScalar;
  v.scalar = value;
  return v;
}

SummaryValue SummaryValue::make_text(std::string tag, std::string text) {
  SummaryValue v;
  v.tag = std::move(tag);
  v.kind = Kind::kText;
  v.text = std::move(text);
  return v;
}

}  // namespace trainpack
