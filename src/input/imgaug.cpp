// AugmentRng, the crops, Flip, Normalize, AugmentorList and AugmentImageComponent (the resize is
// in imgaug_resize.cpp). Every augmentor works on a contiguous copy with plain loops: images are
// small, and these run on dataflow threads, where LibTorch's intra-op pool would only add
// contention.
#include "trainpack/input/imgaug.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "trainpack/detail/image_augmentors.h"

namespace trainpack {

namespace {

// SplitMix64's increment and finaliser.
constexpr uint64_t kImgaugGolden = 0x9e3779b97f4a7c15ULL;

uint64_t imgaug_mix(uint64_t x) {
  x += kImgaugGolden;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string imgaug_join_doubles(const std::vector<double>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out += fmt::format("{}{}", i ? ", " : "", values[i]);
  }
  return out + "]";
}

// Copies rows [y0, y0 + h) and columns [x0, x0 + w) of a contiguous [C, H, W] image, any dtype.
at::Tensor imgaug_crop(const at::Tensor& image, int64_t y0, int64_t x0, int64_t h, int64_t w) {
  const at::Tensor src = image.contiguous();
  const int64_t channels = src.size(0), height = src.size(1), width = src.size(2);
  at::Tensor out = at::empty({channels, h, w}, src.options());
  const auto elem = static_cast<size_t>(src.element_size());
  const auto* in = static_cast<const char*>(src.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t r = 0; r < h; ++r) {
      std::memcpy(dst + static_cast<size_t>((c * h + r) * w) * elem,
                  in + static_cast<size_t>((c * height + r + y0) * width + x0) * elem,
                  static_cast<size_t>(w) * elem);
    }
  }
  return out;
}

void imgaug_check_crop(const ImageAugmentor& aug, const at::Tensor& chw, int64_t h, int64_t w) {
  if (chw.size(1) < h || chw.size(2) < w) {
    throw std::invalid_argument(fmt::format(
        "{}: the image is {}x{} (height x width, shape {}), smaller than the crop {}x{}; resize "
        "it first (e.g. ResizeShortestEdge({}) before {})",
        aug.describe(), chw.size(1), chw.size(2), detail::imgaug_shape(chw), h, w, std::max(h, w),
        aug.name()));
  }
}

void imgaug_check_dims(const char* cls, int64_t height, int64_t width) {
  if (height < 1 || width < 1) {
    throw std::invalid_argument(fmt::format(
        "{}: the crop must be at least 1x1, got height={} width={}", cls, height, width));
  }
}

// Python's round(): nearest, half to even (values here are halves of non-negative integers).
int64_t imgaug_round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

template <typename In, typename Out>
void imgaug_normalize_loop(const In* in, Out* out, int64_t channels, int64_t plane,
                           const std::vector<double>& mean, const std::vector<double>& std,
                           bool from_uint8) {
  for (int64_t c = 0; c < channels; ++c) {
    const Out m = static_cast<Out>(mean[static_cast<size_t>(c)]);
    const Out s = static_cast<Out>(std[static_cast<size_t>(c)]);
    const In* src = in + c * plane;
    Out* dst = out + c * plane;
    for (int64_t i = 0; i < plane; ++i) {
      Out v = static_cast<Out>(src[i]);
      if (from_uint8) v = v / static_cast<Out>(255);
      dst[i] = (v - m) / s;
    }
  }
}

}  // namespace

// ---- shared by the augmentors (detail/image_augmentors.h) ----

std::string detail::imgaug_shape(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

void detail::imgaug_check_image(const ImageAugmentor& aug, const at::Tensor& chw) {
  if (!chw.defined()) {
    throw std::invalid_argument(
        fmt::format("{}: the image is an undefined tensor", aug.describe()));
  }
  if (chw.dim() != 3) {
    throw std::invalid_argument(fmt::format(
        "{}: got a tensor of shape {}; augmentors take one image [C, H, W] (decoded images default "
        "to CHW; add a channel dimension to a [H, W] image with unsqueeze(0))",
        aug.describe(), detail::imgaug_shape(chw)));
  }
  if (!chw.device().is_cpu()) {
    throw std::invalid_argument(
        fmt::format("{}: the image of shape {} is on {}; augmentors run on the CPU, before the "
                    "batch is moved to the device",
                    aug.describe(), detail::imgaug_shape(chw), chw.device().str()));
  }
}

at::Tensor detail::imgaug_copy(const at::Tensor& chw) {
  const at::Tensor src = chw.contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options());
  std::memcpy(out.data_ptr(), src.data_ptr(), src.nbytes());
  return out;
}

// ---- AugmentRng ----

AugmentRng::AugmentRng(uint64_t seed, int64_t pass, int64_t position)
    : state_(imgaug_mix(imgaug_mix(imgaug_mix(seed) ^ static_cast<uint64_t>(pass)) ^
                        static_cast<uint64_t>(position))) {}

uint64_t AugmentRng::next_u64() {
  state_ += kImgaugGolden;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double AugmentRng::uniform(double lo, double hi) {
  if (!(lo <= hi)) {
    throw std::invalid_argument(fmt::format("AugmentRng::uniform: lo={} is above hi={}", lo, hi));
  }
  const double u = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

int64_t AugmentRng::integer(int64_t lo, int64_t hi_inclusive) {
  if (hi_inclusive < lo) {
    throw std::invalid_argument(
        fmt::format("AugmentRng::integer: lo={} is above hi_inclusive={}", lo, hi_inclusive));
  }
  const uint64_t span = static_cast<uint64_t>(hi_inclusive) - static_cast<uint64_t>(lo);
  if (span == std::numeric_limits<uint64_t>::max()) return static_cast<int64_t>(next_u64());
  const uint64_t range = span + 1;
  // 2^64 mod range: the draws below it are rejected, leaving a multiple of range values.
  const uint64_t threshold = (0 - range) % range;
  uint64_t x;
  do {
    x = next_u64();
  } while (x < threshold);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % range);
}

bool AugmentRng::bernoulli(double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument(fmt::format("AugmentRng::bernoulli: p={} is outside [0, 1]", p));
  }
  return uniform(0.0, 1.0) < p;
}

// ---- ImageAugmentor ----

ImageAugmentor::~ImageAugmentor() = default;

// ---- RandomCrop, CenterCrop ----

RandomCrop::RandomCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  imgaug_check_dims("RandomCrop", height, width);
}

std::string RandomCrop::describe() const {
  return fmt::format("RandomCrop({}x{})", height_, width_);
}

at::Tensor RandomCrop::augment(const at::Tensor& chw, AugmentRng& rng) const {
  detail::imgaug_check_image(*this, chw);
  imgaug_check_crop(*this, chw, height_, width_);
  const int64_t y0 = rng.integer(0, chw.size(1) - height_);
  const int64_t x0 = rng.integer(0, chw.size(2) - width_);
  return imgaug_crop(chw, y0, x0, height_, width_);
}

CenterCrop::CenterCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  imgaug_check_dims("CenterCrop", height, width);
}

std::string CenterCrop::describe() const {
  return fmt::format("CenterCrop({}x{})", height_, width_);
}

at::Tensor CenterCrop::augment(const at::Tensor& chw, AugmentRng&) const {
  detail::imgaug_check_image(*this, chw);
  imgaug_check_crop(*this, chw, height_, width_);
  const int64_t y0 = imgaug_round_half_even(static_cast<double>(chw.size(1) - height_) / 2.0);
  const int64_t x0 = imgaug_round_half_even(static_cast<double>(chw.size(2) - width_) / 2.0);
  return imgaug_crop(chw, y0, x0, height_, width_);
}

// ---- Flip ----

Flip::Flip(FlipOptions options) : options_(options) {
  if (options_.horizontal() == options_.vertical()) {
    throw std::invalid_argument(
        fmt::format("Flip: exactly one of horizontal and vertical must be set (got horizontal={}, "
                    "vertical={}); use two Flips to flip both ways",
                    options_.horizontal(), options_.vertical()));
  }
  if (!(options_.prob() >= 0.0 && options_.prob() <= 1.0)) {
    throw std::invalid_argument(fmt::format("Flip: prob={} is outside [0, 1]", options_.prob()));
  }
}

std::string Flip::describe() const {
  return fmt::format("Flip({}, p={})", options_.horizontal() ? "horizontal" : "vertical",
                     options_.prob());
}

at::Tensor Flip::augment(const at::Tensor& chw, AugmentRng& rng) const {
  detail::imgaug_check_image(*this, chw);
  if (!rng.bernoulli(options_.prob())) return detail::imgaug_copy(chw);
  const at::Tensor src = chw.contiguous();
  const int64_t channels = src.size(0), height = src.size(1), width = src.size(2);
  at::Tensor out = at::empty(src.sizes(), src.options());
  const auto elem = static_cast<size_t>(src.element_size());
  const auto* in = static_cast<const char*>(src.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  const size_t row_bytes = static_cast<size_t>(width) * elem;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t r = 0; r < height; ++r) {
      char* to = dst + static_cast<size_t>(c * height + r) * row_bytes;
      if (options_.vertical()) {
        std::memcpy(to, in + static_cast<size_t>(c * height + (height - 1 - r)) * row_bytes,
                    row_bytes);
        continue;
      }
      const char* from = in + static_cast<size_t>(c * height + r) * row_bytes;
      for (int64_t x = 0; x < width; ++x) {
        std::memcpy(to + static_cast<size_t>(x) * elem,
                    from + static_cast<size_t>(width - 1 - x) * elem, elem);
      }
    }
  }
  return out;
}

// ---- Normalize ----

Normalize::Normalize(std::vector<double> mean, std::vector<double> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  if (mean_.empty()) throw std::invalid_argument("Normalize: mean is empty (one entry a channel)");
  if (mean_.size() != std_.size()) {
    throw std::invalid_argument(
        fmt::format("Normalize: mean has {} entries and std {}; give one of each per channel",
                    mean_.size(), std_.size()));
  }
  for (size_t c = 0; c < std_.size(); ++c) {
    if (std_[c] == 0.0 || !std::isfinite(std_[c])) {
      throw std::invalid_argument(
          fmt::format("Normalize: std[{}] is {}; it must be a finite non-zero number", c, std_[c]));
    }
  }
}

std::string Normalize::describe() const {
  return fmt::format("Normalize(mean={}, std={})", imgaug_join_doubles(mean_),
                     imgaug_join_doubles(std_));
}

at::Tensor Normalize::augment(const at::Tensor& chw, AugmentRng&) const {
  detail::imgaug_check_image(*this, chw);
  const int64_t channels = chw.size(0);
  if (channels != static_cast<int64_t>(mean_.size())) {
    throw std::invalid_argument(
        fmt::format("{}: the image has {} channels (shape {}), mean and std have {}", describe(),
                    channels, detail::imgaug_shape(chw), mean_.size()));
  }
  const at::ScalarType dtype = chw.scalar_type();
  const int64_t plane = chw.size(1) * chw.size(2);
  if (dtype == at::kByte) {
    const at::Tensor src = chw.contiguous();
    at::Tensor out = at::empty(src.sizes(), src.options().dtype(at::kFloat));
    imgaug_normalize_loop(src.data_ptr<uint8_t>(), out.data_ptr<float>(), channels, plane, mean_,
                          std_, true);
    return out;
  }
  if (dtype == at::kDouble) {
    const at::Tensor src = chw.contiguous();
    at::Tensor out = at::empty(src.sizes(), src.options());
    imgaug_normalize_loop(src.data_ptr<double>(), out.data_ptr<double>(), channels, plane, mean_,
                          std_, false);
    return out;
  }
  if (!at::isFloatingType(dtype)) {
    throw std::invalid_argument(
        fmt::format("{}: the image is {}; Normalize takes uint8 (0..255) or floating (0..1) images",
                    describe(), c10::toString(dtype)));
  }
  const at::Tensor src = chw.to(at::kFloat).contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options());
  imgaug_normalize_loop(src.data_ptr<float>(), out.data_ptr<float>(), channels, plane, mean_, std_,
                        false);
  return dtype == at::kFloat ? out : out.to(dtype);
}

// ---- AugmentorList ----

AugmentorList::AugmentorList(std::vector<ImageAugmentorPtr> augmentors)
    : augmentors_(std::move(augmentors)) {
  for (size_t i = 0; i < augmentors_.size(); ++i) {
    if (!augmentors_[i]) {
      throw std::invalid_argument(fmt::format("AugmentorList: augmentor {} is null", i));
    }
  }
}

std::string AugmentorList::describe_items() const {
  std::string out = "[";
  for (size_t i = 0; i < augmentors_.size(); ++i) {
    out += (i ? ", " : "") + augmentors_[i]->describe();
  }
  return out + "]";
}

std::string AugmentorList::describe() const { return "AugmentorList(" + describe_items() + ")"; }

at::Tensor AugmentorList::augment(const at::Tensor& chw, AugmentRng& rng) const {
  if (augmentors_.empty()) {
    detail::imgaug_check_image(*this, chw);
    return detail::imgaug_copy(chw);
  }
  at::Tensor image = chw;
  for (const auto& aug : augmentors_) image = aug->augment(image, rng);
  return image;
}

// ---- AugmentImageComponent ----

AugmentImageComponent::AugmentImageComponent(DataFlowPtr ds,
                                             std::vector<ImageAugmentorPtr> augmentors,
                                             AugmentImageComponentOptions options)
    : ds_(std::move(ds)), augmentors_(std::move(augmentors)), options_(options) {
  if (!ds_) throw std::invalid_argument("AugmentImageComponent: null dataflow");
  if (options_.index() < 0) {
    throw std::invalid_argument(
        fmt::format("AugmentImageComponent: index={} is negative; it is the image's component",
                    options_.index()));
  }
}

std::string AugmentImageComponent::describe() const {
  return fmt::format("AugmentImageComponent(index={}{}, {}) over {}", options_.index(),
                     options_.seed() ? fmt::format(", seed={}", options_.seed()) : "",
                     augmentors_.describe_items(), ds_->describe());
}

std::optional<Datapoint> AugmentImageComponent::_next() {
  std::optional<Datapoint> dp = ds_->next();
  if (!dp) return dp;
  const auto index = static_cast<size_t>(options_.index());
  if (index >= dp->size()) {
    throw std::invalid_argument(fmt::format(
        "AugmentImageComponent: the datapoint at position {} of pass {} of {} has {} components, "
        "so no component index={}",
        position(), pass(), ds_->name(), dp->size(), index));
  }
  AugmentRng rng(options_.seed(), pass(), position());
  (*dp)[index] = augmentors_.augment((*dp)[index], rng);
  return dp;
}

}  // namespace trainpack
