// ResizeShortestEdge: a separable bilinear resize with antialiasing, written out rather than
// calling ATen's _upsample_bilinear2d_aa (which 1.13 and 2.x both have, with one signature), so
// that the result is the same with every LibTorch (2.x has a uint8 kernel of its own, with
// fixed-point weights) and the work stays on the calling thread (ATen's kernel splits an image
// over the intra-op pool). The weights are ATen's CPU kernel's, which torchvision's resize of a
// tensor with antialias=True calls, computed in the same types. The two passes run in the cheaper
// order (the height first when it shrinks, so that the row pass, which gathers, sees fewer rows;
// ATen always does the width first), so sums can differ from ATen's in the last bit of a float.
// uint8 images are read and written as uint8 inside the passes, with no float copy of the
// whole image.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "trainpack/detail/image_augmentors.h"
#include "trainpack/input/imgaug.h"

namespace trainpack {

namespace {

// The taps of one axis: output i reads inputs [start[i], start[i] + count[i]) with the weights
// weights[i * taps + j].
template <typename T>
struct ImgaugAxisWeights {
  std::vector<int64_t> start;
  std::vector<int64_t> count;
  std::vector<T> weights;
  int64_t taps = 0;
};

// The triangle filter (bilinear), as ATen's aa_filter.
template <typename T>
T imgaug_triangle(T x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return static_cast<T>(1.0 - x);
  return static_cast<T>(0.0);
}

// ATen's _compute_indices_weights_aa for bilinear (interp_size 2, align_corners false, no scale
// given): the filter's support is widened by the scale when shrinking. The mixed float/double
// expressions are ATen's own.
template <typename T>
ImgaugAxisWeights<T> imgaug_axis_weights(int64_t in, int64_t out) {
  const T scale = static_cast<T>(in) / static_cast<T>(out);
  const T support = (scale >= 1.0) ? static_cast<T>(1.0 * scale) : static_cast<T>(1.0);
  const T invscale = (scale >= 1.0) ? static_cast<T>(1.0 / scale) : static_cast<T>(1.0);
  ImgaugAxisWeights<T> w;
  w.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  w.start.resize(static_cast<size_t>(out));
  w.count.resize(static_cast<size_t>(out));
  w.weights.assign(static_cast<size_t>(out * w.taps), static_cast<T>(0));
  for (int64_t i = 0; i < out; ++i) {
    const T center = static_cast<T>(scale * (i + 0.5));
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    const int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    T* wt = w.weights.data() + i * w.taps;
    T total = 0;
    for (int64_t j = 0; j < xsize; ++j) {
      const T x = static_cast<T>((j + xmin - center + 0.5) * invscale);
      wt[j] = imgaug_triangle(x);
      total += wt[j];
    }
    for (int64_t j = 0; j < xsize; ++j) {
      if (total != 0.0) wt[j] /= total;
    }
    w.start[static_cast<size_t>(i)] = xmin;
    w.count[static_cast<size_t>(i)] = xsize;
  }
  return w;
}

// An uninitialised buffer of n values (a std::vector would zero it first).
template <typename T>
std::unique_ptr<T[]> imgaug_buffer(int64_t n) {
  return std::unique_ptr<T[]>(new T[static_cast<size_t>(n)]);
}

// The row pass: every row of `in` [rows, in_w] resampled to out_w values along the row, value x
// of row r given to store(r * out_w + x, value). Each output gathers its few inputs.
template <typename Acc, typename Src, typename Store>
void imgaug_resample_rows(const Src* in, int64_t rows, int64_t in_w, int64_t out_w,
                          const Store& store) {
  const ImgaugAxisWeights<Acc> w = imgaug_axis_weights<Acc>(in_w, out_w);
  for (int64_t r = 0; r < rows; ++r) {
    const Src* row = in + r * in_w;
    for (int64_t x = 0; x < out_w; ++x) {
      const Acc* wt = w.weights.data() + x * w.taps;
      const Src* first = row + w.start[static_cast<size_t>(x)];
      const int64_t n = w.count[static_cast<size_t>(x)];
      Acc sum = static_cast<Acc>(first[0]) * wt[0];
      for (int64_t j = 1; j < n; ++j) sum += static_cast<Acc>(first[j]) * wt[j];
      store(r * out_w + x, sum);
    }
  }
}

// The column pass: every plane of `in` [planes, in_h, width] resampled to out_h rows into `out`
// [planes, out_h, width]. An output row is a weighted sum of whole input rows: contiguous work
// the compiler vectorises.
template <typename Acc, typename Src>
void imgaug_resample_columns(const Src* in, int64_t planes, int64_t in_h, int64_t width,
                             int64_t out_h, Acc* out) {
  const ImgaugAxisWeights<Acc> w = imgaug_axis_weights<Acc>(in_h, out_h);
  for (int64_t p = 0; p < planes; ++p) {
    const Src* plane = in + p * in_h * width;
    for (int64_t y = 0; y < out_h; ++y) {
      Acc* dst = out + (p * out_h + y) * width;
      const Acc* wt = w.weights.data() + y * w.taps;
      const int64_t first = w.start[static_cast<size_t>(y)];
      const int64_t n = w.count[static_cast<size_t>(y)];
      const Src* line = plane + first * width;
      const Acc w0 = wt[0];
      for (int64_t k = 0; k < width; ++k) dst[k] = static_cast<Acc>(line[k]) * w0;
      for (int64_t j = 1; j < n; ++j) {
        line = plane + (first + j) * width;
        const Acc wj = wt[j];
        for (int64_t k = 0; k < width; ++k) dst[k] += static_cast<Acc>(line[k]) * wj;
      }
    }
  }
}

// [C, H, W] contiguous values of type Src resized to [C, out_h, out_w], computed in Acc, value i
// of the result given to store(i, value).
template <typename Acc, typename Src, typename Store>
void imgaug_resize_planes(const Src* src, int64_t channels, int64_t height, int64_t width,
                          int64_t out_h, int64_t out_w, const Store& store) {
  if (out_h == height) {
    imgaug_resample_rows<Acc>(src, channels * height, width, out_w, store);
    return;
  }
  if (out_h <= height) {  // the height first: the row pass then reads out_h rows, not height
    auto tmp = imgaug_buffer<Acc>(channels * out_h * width);
    imgaug_resample_columns<Acc>(src, channels, height, width, out_h, tmp.get());
    if (out_w == width) {
      for (int64_t i = 0; i < channels * out_h * width; ++i) store(i, tmp[static_cast<size_t>(i)]);
    } else {
      imgaug_resample_rows<Acc>(tmp.get(), channels * out_h, width, out_w, store);
    }
    return;
  }
  // Growing the height: the width first, on the fewer input rows.
  const Src* rows = src;
  std::unique_ptr<Acc[]> across;
  if (out_w != width) {
    across = imgaug_buffer<Acc>(channels * height * out_w);
    Acc* dst = across.get();
    imgaug_resample_rows<Acc>(src, channels * height, width, out_w,
                              [dst](int64_t i, Acc v) { dst[i] = v; });
  }
  auto tmp = imgaug_buffer<Acc>(channels * out_h * out_w);
  if (across) {
    imgaug_resample_columns<Acc>(across.get(), channels, height, out_w, out_h, tmp.get());
  } else {
    imgaug_resample_columns<Acc>(rows, channels, height, out_w, out_h, tmp.get());
  }
  for (int64_t i = 0; i < channels * out_h * out_w; ++i) store(i, tmp[static_cast<size_t>(i)]);
}

// v rounded half to even (torch.round's default) and clamped to 0..255. Adding and subtracting
// 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer in the current rounding mode
// (to nearest, ties to even), without a call to nearbyint; the weights are non-negative, so v is
// within 0..255 up to rounding and the clamp only guards the ends.
inline uint8_t imgaug_round_to_byte(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float r = (v + kMagic) - kMagic;
  return static_cast<uint8_t>(r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r));
}

// `src` (contiguous, of type Src) resized into a new tensor of dtype `out_dtype`, whose C++ type
// is Dst, computed in Acc.
template <typename Acc, typename Src, typename Dst>
at::Tensor imgaug_resize_tensor(const at::Tensor& src, int64_t out_h, int64_t out_w,
                                at::ScalarType out_dtype) {
  const int64_t channels = src.size(0), height = src.size(1), width = src.size(2);
  at::Tensor out = at::empty({channels, out_h, out_w}, src.options().dtype(out_dtype));
  Dst* dst = out.data_ptr<Dst>();
  const Src* in = src.data_ptr<Src>();
  if constexpr (std::is_same_v<Dst, uint8_t>) {
    imgaug_resize_planes<Acc>(in, channels, height, width, out_h, out_w,
                              [dst](int64_t i, Acc v) { dst[i] = imgaug_round_to_byte(v); });
  } else {
    imgaug_resize_planes<Acc>(in, channels, height, width, out_h, out_w,
                              [dst](int64_t i, Acc v) { dst[i] = static_cast<Dst>(v); });
  }
  return out;
}

}  // namespace

ResizeShortestEdge::ResizeShortestEdge(int64_t size) : size_(size) {
  if (size < 1) {
    throw std::invalid_argument(
        fmt::format("ResizeShortestEdge: size={} must be at least 1 (pixels)", size));
  }
}

std::string ResizeShortestEdge::describe() const {
  return fmt::format("ResizeShortestEdge({})", size_);
}

std::pair<int64_t, int64_t> ResizeShortestEdge::output_size(int64_t height, int64_t width) const {
  // As tensorpack: scale = size / min(h, w); the longer side int(scale * long + 0.5).
  const double scale = static_cast<double>(size_) / static_cast<double>(std::min(height, width));
  if (height < width) {
    return {size_, static_cast<int64_t>(scale * static_cast<double>(width) + 0.5)};
  }
  return {static_cast<int64_t>(scale * static_cast<double>(height) + 0.5), size_};
}

at::Tensor ResizeShortestEdge::augment(const at::Tensor& chw, AugmentRng&) const {
  detail::imgaug_check_image(*this, chw);
  const at::ScalarType dtype = chw.scalar_type();
  if (dtype != at::kByte && !at::isFloatingType(dtype)) {
    throw std::invalid_argument(
        fmt::format("{}: the image is {}; it takes uint8 or floating images", describe(),
                    c10::toString(dtype)));
  }
  const int64_t height = chw.size(1), width = chw.size(2);
  if (height < 1 || width < 1) {
    throw std::invalid_argument(
        fmt::format("{}: the image of shape {} is empty", describe(), detail::imgaug_shape(chw)));
  }
  const auto [out_h, out_w] = output_size(height, width);
  if (out_h == height && out_w == width) return detail::imgaug_copy(chw);
  const at::Tensor src = chw.contiguous();
  switch (dtype) {
    case at::kByte:
      return imgaug_resize_tensor<float, uint8_t, uint8_t>(src, out_h, out_w, at::kByte);
    case at::kFloat:
      return imgaug_resize_tensor<float, float, float>(src, out_h, out_w, at::kFloat);
    case at::kDouble:
      return imgaug_resize_tensor<double, double, double>(src, out_h, out_w, at::kDouble);
    default:  // half and bfloat16: computed in float32, returned in their type
      return imgaug_resize_tensor<float, float, float>(src.to(at::kFloat).contiguous(), out_h,
                                                       out_w, at::kFloat)
          .to(dtype);
  }
}

}  // namespace trainpack
