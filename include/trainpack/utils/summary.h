// What monitors receive besides plain scalars: TensorFlow's `Summary` and `Event`, as plain C++
// structs. Monitors::put_summary / put_image build them; TFEventWriter encodes them in the event
// file format; other monitors read what they need (JSONWriter and ScalarPrinter only scalars).
//
// Differences from tensorpack: these are not protobuf messages; they hold exactly the fields
// trainpack fills (the event writer owns the wire format).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainpack {

// An image already encoded as PNG (TensorFlow's Summary.Image).
struct SummaryImage {
  int64_t height = 0;
  int64_t width = 0;
  int64_t colorspace = 0;  // channels: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA
  std::string encoded_png;
};

// A histogram (TensorFlow's HistogramProto): bucket i counts values in
// [bucket_limit[i-1], bucket_limit[i]) (TensorFlow's upper_bound rule).
struct SummaryHistogram {
  double min = 0;
  double max = 0;
  double num = 0;
  double sum = 0;
  double sum_squares = 0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

// One tagged value of a Summary: exactly one of the kinds.
struct SummaryValue {
  enum class Kind { kScalar, kImage, kHistogram, kText };
  std::string tag;
  Kind kind = Kind::kScalar;
  double scalar = 0;  // kScalar (TensorFlow's simple_value, a float32 on the wire)
  SummaryImage image;          // kImage
  SummaryHistogram histogram;  // kHistogram
  std::string text;            // kText (a string tensor with the `text` plugin)

  static SummaryValue make_scalar(std::string tag, double value);
  static SummaryValue make_text(std::string tag, std::string text);
};

struct Summary {
  std::vector<SummaryValue> values;
};

// TensorFlow's Event: a summary (or a file_version record) at a step and a time.
struct Event {
  double wall_time = 0;  // seconds since the epoch
  int64_t step = 0;
  std::optional<Summary> summary;
  std::string file_version;  // set only on an event file's first record ("brain.Event:2")
};

}  // namespace trainpack
