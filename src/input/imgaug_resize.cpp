// ResizeShortestEdge: a separable bilinear resize with antialiasing, written out rather than
// calling ATen's _upsample_bilinear2d_aa (which 1.13 and 2.x both have, with one signature), so
// that the result is the same with every LibTorch (2.x has a uint8 kernel of its own, with
// fixed-point weights) and the work stays on the calling thread (ATen's kernel splits an image
// over the intra-op pool). It follows ATen's CPU kernel step by step, which torchvision's resize
// of a tensor with antialias=True calls: the same weights, computed in the same types, summed in
// the same order, the width first and then the height, a dimension that keeps its size skipped.
#include <algorithm>
#include <cmath>
#include <stdexcept>
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

// Resamples the middle axis of contiguous data [outer, in, inner] to [outer, out, inner]. Each
// output is src[first] * w[0], then += src[k] * w[k], as ATen sums it.
template <typename T>
std::vector<T> imgaug_resample(const T* src, int64_t outer, int64_t in, int64_t out,
                               int64_t inner) {
  const ImgaugAxisWeights<T> w = imgaug_axis_weights<T>(in, out);
  std::vector<T> dst(static_cast<size_t>(outer * out * inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T* plane = src + o * in * inner;
    for (int64_t i = 0; i < out; ++i) {
      T* row = dst.data() + (o * out + i) * inner;
      const T* wt = w.weights.data() + i * w.taps;
      const int64_t first = w.start[static_cast<size_t>(i)];
      const int64_t n = w.count[static_cast<size_t>(i)];
      if (inner == 1) {  // along a row: one sum in a register, in the same order as below
        T sum = plane[first] * wt[0];
        for (int64_t j = 1; j < n; ++j) sum += plane[first + j] * wt[j];
        *row = sum;
        continue;
      }
      for (int64_t k = 0; k < inner; ++k) row[k] = plane[first * inner + k] * wt[0];
      for (int64_t j = 1; j < n; ++j) {
        const T* line = plane + (first + j) * inner;
        for (int64_t k = 0; k < inner; ++k) row[k] += line[k] * wt[j];
      }
    }
  }
  return dst;
}

// [C, H, W] contiguous values of type T resized to [C, out_h, out_w]: the width first.
template <typename T>
std::vector<T> imgaug_resize_chw(std::vector<T> data, int64_t channels, int64_t height,
                                 int64_t width, int64_t out_h, int64_t out_w) {
  if (out_w != width) data = imgaug_resample<T>(data.data(), channels * height, width, out_w, 1);
  if (out_h != height) data = imgaug_resample<T>(data.data(), channels, height, out_h, out_w);
  return data;
}

template <typename T, typename Src>
std::vector<T> imgaug_values(const at::Tensor& contiguous) {
  const Src* p = contiguous.data_ptr<Src>();
  return std::vector<T>(p, p + contiguous.numel());
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
  const int64_t channels = chw.size(0), height = chw.size(1), width = chw.size(2);
  if (height < 1 || width < 1) {
    throw std::invalid_argument(
        fmt::format("{}: the image of shape {} is empty", describe(), detail::imgaug_shape(chw)));
  }
  const auto [out_h, out_w] = output_size(height, width);
  if (out_h == height && out_w == width) return detail::imgaug_copy(chw);
  const at::Tensor src = chw.contiguous();
  if (dtype == at::kDouble) {
    std::vector<double> v = imgaug_resize_chw(imgaug_values<double, double>(src), channels, height,
                                              width, out_h, out_w);
    at::Tensor out = at::empty({channels, out_h, out_w}, src.options());
    std::copy(v.begin(), v.end(), out.data_ptr<double>());
    return out;
  }
  std::vector<float> v;
  if (dtype == at::kByte) {
    v = imgaug_values<float, uint8_t>(src);
  } else if (dtype == at::kFloat) {
    v = imgaug_values<float, float>(src);
  } else {
    v = imgaug_values<float, float>(src.to(at::kFloat).contiguous());
  }
  v = imgaug_resize_chw(std::move(v), channels, height, width, out_h, out_w);
  if (dtype == at::kByte) {
    at::Tensor out = at::empty({channels, out_h, out_w}, src.options());
    uint8_t* p = out.data_ptr<uint8_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      // torch.round (half to even, the default rounding mode), then clamped.
      const float r = std::nearbyint(v[i]);
      p[i] = static_cast<uint8_t>(r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r));
    }
    return out;
  }
  at::Tensor out = at::empty({channels, out_h, out_w}, src.options().dtype(at::kFloat));
  std::copy(v.begin(), v.end(), out.data_ptr<float>());
  return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace trainpack
