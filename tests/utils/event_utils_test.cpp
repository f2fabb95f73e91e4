// CRC-32C, PNG encoding and TensorFlow histograms: the pieces of the event files.
#include <png.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/utils/crc32c.h"
#include "trainpack/utils/histogram.h"
#include "trainpack/utils/png.h"

namespace trainpack {
namespace event_utils_test {

// ---- CRC-32C ----
TEST(Crc32cTest, PublishedCheckValue) {
  EXPECT_EQ(crc32c::value("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c::value(""), 0u);
}

TEST(Crc32cTest, Rfc3720Vectors) {
  // RFC 3720 (iSCSI), appendix B.4.
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, '\0'), dec(32, '\0');
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<char>(i);
    dec[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c::value(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c::value(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c::value(inc), 0x46DD794Eu);
  EXPECT_EQ(crc32c::value(dec), 0x113FDB5Cu);
}

TEST(Crc32cTest, ExtendIsConcatenationAtEveryAlignment) {
  std::string s;
  for (int i = 0; i < 100; ++i) s.push_back(static_cast<char>(i * 7 + 3));
  const uint32_t whole = crc32c::value(s);
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    const uint32_t a = crc32c::value(s.data(), cut);
    EXPECT_EQ(crc32c::extend(a, s.data() + cut, s.size() - cut), whole) << cut;
  }
}

TEST(Crc32cTest, TfRecordMask) {
  const uint32_t crc = 0xE3069283u;
  const uint32_t expected = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  EXPECT_EQ(crc32c::mask(crc), expected);
  EXPECT_EQ(crc32c::unmask(crc32c::mask(crc)), crc);
  for (uint32_t v : {0u, 1u, 0xffffffffu, 0x12345678u})
    EXPECT_EQ(crc32c::unmask(crc32c::mask(v)), v);
}

// ---- PNG ----
// Decodes with libpng's simplified API into the image's own format.
std::vector<uint8_t> decode_png(const std::string& png, int channels, int* h, int* w) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, png.data(), png.size())) {
    throw std::runtime_error(image.message);
  }
  image.format = channels == 1   ? PNG_FORMAT_GRAY
                 : channels == 2 ? PNG_FORMAT_GA
                 : channels == 3 ? PNG_FORMAT_RGB
                                 : PNG_FORMAT_RGBA;
  std::vector<uint8_t> out(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.data(), 0, nullptr)) {
    throw std::runtime_error(image.message);
  }
  *h = static_cast<int>(image.height);
  *w = static_cast<int>(image.width);
  return out;
}

TEST(PngTest, RoundTripsEveryChannelCount) {
  for (int c = 1; c <= 4; ++c) {
    const int h = 5, w = 7;
    std::vector<uint8_t> pixels(h * w * c);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 + c);
    const std::string png = encode_png(pixels.data(), h, w, c);
    ASSERT_GE(png.size(), 8u);
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    // IHDR color type (byte 25): 0 grey, 4 grey+alpha, 2 RGB, 6 RGBA; bit depth (byte 24) 8.
    const int expected_type[] = {0, 4, 2, 6};
    EXPECT_EQ(static_cast<int>(static_cast<unsigned char>(png[25])), expected_type[c - 1]);
    EXPECT_EQ(static_cast<int>(png[24]), 8);
    int dh = 0, dw = 0;
    EXPECT_EQ(decode_png(png, c, &dh, &dw), pixels) << "channels " << c;
    EXPECT_EQ(dh, h);
    EXPECT_EQ(dw, w);
  }
}

TEST(PngTest, RejectsBadArguments) {
  const uint8_t px[16] = {0};
  EXPECT_THROW(encode_png(px, 2, 2, 0), std::invalid_argument);
  EXPECT_THROW(encode_png(px, 2, 2, 5), std::invalid_argument);
  EXPECT_THROW(encode_png(px, 0, 2, 1), std::invalid_argument);
  EXPECT_THROW(encode_png(px, 2, -1, 1), std::invalid_argument);
  EXPECT_THROW(encode_png(px, int64_t{1} << 31, 1, 1), std::invalid_argument);
  EXPECT_THROW(encode_png(nullptr, 2, 2, 1), std::invalid_argument);
}

TEST(PngTest, CompressesAtLevelNine) {
  // A constant image compresses to far less than its raw size.
  std::vector<uint8_t> flat(256 * 256 * 3, 200);
  EXPECT_LT(encode_png(flat.data(), 256, 256, 3).size(), 1000u);
}

// ---- histograms ----
TEST(HistogramTest, DefaultBucketLimitsAreTensorFlows) {
  const std::vector<double>& l = default_histogram_bucket_limits();
  ASSERT_EQ(l.size(), 1551u);  // 774 positive limits + DBL_MAX, mirrored, and 0
  EXPECT_EQ(l.front(), -DBL_MAX);
  EXPECT_EQ(l.back(), DBL_MAX);
  EXPECT_EQ(l[775], 0.0);
  EXPECT_EQ(l[776], 1e-12);
  EXPECT_DOUBLE_EQ(l[777], 1.1e-12);
  EXPECT_LT(l[1549], 1e20);
  EXPECT_GE(l[1549] * 1.1, 1e20);
  for (size_t i = 1; i < l.size(); ++i) ASSERT_LT(l[i - 1], l[i]) << i;
  for (size_t i = 0; i < l.size(); ++i) ASSERT_EQ(l[i], -l[l.size() - 1 - i]) << i;
}

TEST(HistogramTest, KnownTensor) {
  const at::Tensor t = at::tensor({-1.0, 0.0, 0.0, 1.0, 2.5}, at::kFloat);
  const SummaryHistogram h = make_histogram(t);
  EXPECT_EQ(h.min, -1.0);
  EXPECT_EQ(h.max, 2.5);
  EXPECT_EQ(h.num, 5.0);
  EXPECT_EQ(h.sum, 2.5);
  EXPECT_EQ(h.sum_squares, 1.0 + 1.0 + 6.25);
  // Four non-empty buckets, each between collapsed runs of empty ones:
  // [run, -1, run, 0 (x2), run, 1, run, 2.5, run].
  ASSERT_EQ(h.bucket.size(), 9u);
  ASSERT_EQ(h.bucket_limit.size(), 9u);
  const std::vector<double> counts = {0, 1, 0, 2, 0, 1, 0, 1, 0};
  EXPECT_EQ(h.bucket, counts);
  const std::vector<double>& l = default_histogram_bucket_limits();
  // A non-empty bucket's limit is the smallest default limit greater than its value.
  auto limit_of = [&](double v) {
    for (double x : l) {
      if (x > v) return x;
    }
    return DBL_MAX;
  };
  EXPECT_EQ(h.bucket_limit[1], limit_of(-1.0));
  EXPECT_EQ(h.bucket_limit[3], 1e-12);  // 0 falls in [0, 1e-12)
  EXPECT_EQ(h.bucket_limit[5], limit_of(1.0));
  EXPECT_EQ(h.bucket_limit[7], limit_of(2.5));
  EXPECT_GT(h.bucket_limit[5], 1.0);
  EXPECT_LE(h.bucket_limit[5] / 1.1, 1.0 + 1e-12);
  // The empty runs end just below the next non-empty bucket, and the last run at DBL_MAX.
  auto prev = [&](double limit) {
    for (size_t i = 1; i < l.size(); ++i) {
      if (l[i] == limit) return l[i - 1];
    }
    return std::nan("");
  };
  EXPECT_EQ(h.bucket_limit[0], prev(h.bucket_limit[1]));
  EXPECT_EQ(h.bucket_limit[2], prev(h.bucket_limit[3]));
  EXPECT_EQ(h.bucket_limit[8], DBL_MAX);
  EXPECT_LE(prev(h.bucket_limit[1]), -1.0);
  EXPECT_GT(h.bucket_limit[1], -1.0);
}

TEST(HistogramTest, ValueOnALimitGoesToTheBucketStartingThere) {
  const std::vector<double>& l = default_histogram_bucket_limits();
  const SummaryHistogram h = make_histogram(at::tensor({l[800]}, at::kDouble));
  ASSERT_EQ(h.bucket.size(), 3u);
  EXPECT_EQ(h.bucket_limit[0], l[800]);  // the empty run ends at the value itself
  EXPECT_EQ(h.bucket_limit[1], l[801]);
  EXPECT_EQ(h.bucket[1], 1.0);
}

TEST(HistogramTest, EmptyAndInvalid) {
  const SummaryHistogram e = make_histogram(at::empty({0}));
  EXPECT_EQ(e.num, 0);
  EXPECT_EQ(e.min, DBL_MAX);
  EXPECT_EQ(e.max, -DBL_MAX);
  EXPECT_EQ(e.bucket_limit, std::vector<double>{DBL_MAX});
  EXPECT_EQ(e.bucket, std::vector<double>{0.0});
  EXPECT_THROW(make_histogram(at::tensor({1.0, std::nan("")})), std::invalid_argument);
  EXPECT_THROW(make_histogram(at::tensor({INFINITY})), std::invalid_argument);
  EXPECT_THROW(make_histogram(at::ones({2}, at::kBool)), std::invalid_argument);
}

TEST(HistogramTest, IntegerAndMultiDimensional) {
  const SummaryHistogram h = make_histogram(at::arange(12, at::kInt).reshape({3, 4}));
  EXPECT_EQ(h.num, 12);
  EXPECT_EQ(h.sum, 66);
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 11);
  double total = 0;
  for (double c : h.bucket) total += c;
  EXPECT_EQ(total, 12);
}

}  // namespace event_utils_test
}  // namespace trainpack
