// Histogram summaries as TensorFlow computes them (tensorflow/core/lib/histogram/histogram.cc):
// the default bucket limits and the encoding of `tf.summary.histogram`.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "trainpack/utils/summary.h"

namespace trainpack {

// TensorFlow's default bucket limits (InitDefaultBuckets): v = 1e-12, multiplied by 1.1 while
// v < 1e20, the same values negated in increasing order, 0, the positive ones, and +-DBL_MAX at
// the ends. 1551 limits, strictly increasing.
const std::vector<double>& default_histogram_bucket_limits();

// The histogram of every element of `values` (any shape, real dtype and device; read as doubles on
// the CPU), as TensorFlow's HistogramSummary op writes it: min, max, num, sum, sum_squares; a
// value v counts in the first bucket whose limit is greater than v, so bucket i holds
// [limit[i-1], limit[i]); each run of empty buckets is one entry (the run's last limit, count 0),
// as EncodeToProto(preserve_zero_buckets=false) does; no values: min = DBL_MAX, max = -DBL_MAX,
// num = 0 and the one bucket (DBL_MAX, 0). Throws std::invalid_argument for a NaN or an infinite
// value (TensorFlow's messages: "Nan in summary histogram", ...) or a complex/bool tensor.
SummaryHistogram make_histogram(const at::Tensor& values);

}  // namespace trainpack
