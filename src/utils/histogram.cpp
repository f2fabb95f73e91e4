#include "trainpack/utils/histogram.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>

#include "trainpack/utils/host_read.h"

namespace trainpack {

const std::vector<double>& default_histogram_bucket_limits() {
  static const std::vector<double> limits = [] {
    // The same arithmetic as TensorFlow (repeated multiplication, not powers), so the limits
    // are bit-identical to the ones TensorBoard sees from TensorFlow.
    std::vector<double> pos;
    double v = 1.0e-12;
    while (v < 1.0e20) {
      pos.push_back(v);
      v *= 1.1;
    }
    pos.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * pos.size() + 1);
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

SummaryHistogram make_histogram(const at::Tensor& values) {
  if (values.defined() && (values.is_complex() || values.scalar_type() == at::kBool)) {
    throw std::invalid_argument("make_histogram: values must be a real tensor, got " +
                                std::string(c10::toString(values.scalar_type())));
  }
  const std::vector<double>& limits = default_histogram_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  SummaryHistogram h;
  h.min = limits.back();
  h.max = -DBL_MAX;
  if (values.defined() && values.numel() > 0) {
    const at::Tensor d = to_host(values, at::kDouble);
    const double* p = d.data_ptr<double>();
    const int64_t n = d.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double x = p[i];
      if (std::isnan(x)) throw std::invalid_argument("make_histogram: Nan in summary histogram");
      if (std::isinf(x)) {
        throw std::invalid_argument("make_histogram: Infinity in summary histogram");
      }
      // x == DBL_MAX would land past the last bucket (TensorFlow indexes out of range there);
      // it goes to the last one.
      const auto b = std::upper_bound(limits.begin(), limits.end(), x) - limits.begin();
      counts[std::min(static_cast<size_t>(b), counts.size() - 1)] += 1.0;
      h.min = std::min(h.min, x);
      h.max = std::max(h.max, x);
      h.num += 1;
      h.sum += x;
      h.sum_squares += x * x;
    }
  }
  // Histogram::EncodeToProto(preserve_zero_buckets = false).
  for (size_t i = 0; i < counts.size();) {
    double end = limits[i];
    double count = counts[i];
    ++i;
    if (count <= 0.0) {
      while (i < counts.size() && counts[i] <= 0.0) {
        end = limits[i];
        count = counts[i];
        ++i;
      }
    }
    h.bucket_limit.push_back(end);
    h.bucket.push_back(count);
  }
  return h;
}

}  // namespace trainpack
