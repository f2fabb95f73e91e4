// Image augmentors and the dataflow that applies them (tensorpack's `dataflow.imgaug`:
// ImageAugmentor, ResizeShortestEdge, RandomCrop, CenterCrop, Flip, AugmentorList, and
// AugmentImageComponent; Normalize is torchvision's ToTensor + Normalize). IMGAUG_DOCS.md shows
// them in use.
//
// Seeding: every random choice made for one datapoint comes from an AugmentRng built from
// (seed, pass, position) alone, so a resumed run (seek), or several threads augmenting datapoints
// in any order, draw exactly what one uninterrupted single-threaded run draws.
//
// Images are CPU tensors [C, H, W] (uint8 or floating; crops and flips take any dtype). The
// augmentors never modify their input, and their result never shares storage with it. Their work
// is plain loops on the calling thread: nothing is handed to LibTorch's intra-op thread pool.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/input/dataflow.h"

namespace trainpack {

// The random source of one datapoint's augmentation: a pure function of (seed, pass, position),
// the same on every compiler, standard library and LibTorch. The three are mixed into a 64-bit
// key with SplitMix64's finaliser (key = f(f(f(seed) ^ pass) ^ position), f(x) = SplitMix64
// finaliser of x + 0x9e3779b97f4a7c15), and the key starts a SplitMix64 stream. Ranges are mapped
// by hand (no std:: distribution): integers by rejection (unbiased), doubles from 53 bits.
class AugmentRng {
 public:
  AugmentRng(uint64_t seed, int64_t pass, int64_t position);
  // The next 64 random bits of the stream.
  uint64_t next_u64();
  // Uniform in [lo, hi): lo + (hi - lo) * u, u = (53 bits) / 2^53. hi < lo is
  // std::invalid_argument.
  double uniform(double lo, double hi);
  // Uniform over the integers of [lo, hi_inclusive], unbiased. hi_inclusive < lo is
  // std::invalid_argument.
  int64_t integer(int64_t lo, int64_t hi_inclusive);
  // True with probability p (uniform(0, 1) < p: one draw). p outside [0, 1] is
  // std::invalid_argument.
  bool bernoulli(double p);

 private:
  uint64_t state_;
};

// The base of every augmentor (tensorpack's imgaug.ImageAugmentor): augment() maps an image
// [C, H, W] to a new tensor, drawing any randomness from `rng` (never from a global generator),
// and never modifies its input. A tensor that is not 3-D, or not on the CPU, is
// std::invalid_argument naming the augmentor and the shape. Augmentors are immutable once built,
// and may be shared by threads.
class ImageAugmentor {
 public:
  virtual ~ImageAugmentor();
  // Class name for messages ("RandomCrop").
  virtual std::string name() const = 0;
  // The augmentor with its arguments ("RandomCrop(224x224)"). Default: name().
  virtual std::string describe() const { return name(); }
  virtual at::Tensor augment(const at::Tensor& chw, AugmentRng& rng) const = 0;
};

using ImageAugmentorPtr = std::shared_ptr<const ImageAugmentor>;

// Resizes the shorter side to `size`, keeping the aspect ratio (tensorpack's
// imgaug.ResizeShortestEdge(size), torchvision's Resize(size, antialias=True)). The longer side
// is rounded as tensorpack rounds it: int(size * long / short + 0.5) (torchvision truncates).
// Bilinear, antialiased when shrinking, as torchvision's resize of a tensor with antialias=True
// (PIL's method: a triangle filter widened by the scale factor), with pixel centres at +0.5.
// uint8 in, uint8 out: computed in float, then rounded (half to even, as torch.round) and clamped
// to [0, 255]; float32 and float64 are computed in their own type; other floating types through
// float32. Other dtypes are std::invalid_argument. An image whose sides already fit is copied.
// size < 1 is std::invalid_argument.
class ResizeShortestEdge : public ImageAugmentor {
 public:
  explicit ResizeShortestEdge(int64_t size);
  std::string name() const override { return "ResizeShortestEdge"; }
  std::string describe() const override;  // "ResizeShortestEdge(32)"
  at::Tensor augment(const at::Tensor& chw, AugmentRng& rng) const override;
  // The output (height, width) for an input of height x width.
  std::pair<int64_t, int64_t> output_size(int64_t height, int64_t width) const;

 private:
  int64_t size_;
};

// A height x width crop at a uniform offset (tensorpack's imgaug.RandomCrop): the row offset is
// rng.integer(0, H - height), then the column offset rng.integer(0, W - width). An image smaller
// than the crop is std::invalid_argument naming the augmentor, both sizes, and the fix (resize
// first). Any dtype. Dimensions < 1 are std::invalid_argument.
class RandomCrop : public ImageAugmentor {
 public:
  RandomCrop(int64_t height, int64_t width);
  std::string name() const override { return "RandomCrop"; }
  std::string describe() const override;  // "RandomCrop(224x224)"
  at::Tensor augment(const at::Tensor& chw, AugmentRng& rng) const override;

 private:
  int64_t height_;
  int64_t width_;
};

// The central height x width crop (tensorpack's imgaug.CenterCrop, torchvision's CenterCrop):
// offsets int(round((H - height) / 2.0)) and int(round((W - width) / 2.0)), Python's round (half
// to even: a difference of 1 gives 0, of 3 gives 2). Draws nothing. Smaller images and bad
// dimensions: as RandomCrop.
class CenterCrop : public ImageAugmentor {
 public:
  CenterCrop(int64_t height, int64_t width);
  std::string name() const override { return "CenterCrop"; }
  std::string describe() const override;  // "CenterCrop(224x224)"
  at::Tensor augment(const at::Tensor& chw, AugmentRng& rng) const override;

 private:
  int64_t height_;
  int64_t width_;
};

struct FlipOptions {
  // Mirror left-right (the width axis).
  TORCH_ARG(bool, horizontal) = true;
  // Mirror top-bottom (the height axis).
  TORCH_ARG(bool, vertical) = false;
  // The probability of flipping, in [0, 1].
  TORCH_ARG(double, prob) = 0.5;
};

// Flips with probability prob (tensorpack's imgaug.Flip(horiz, vert, prob)): one
// rng.bernoulli(prob) per image, drawn whatever prob is. Exactly one of horizontal and vertical
// must be set (as tensorpack; use two Flips for both), and prob must be in [0, 1]: otherwise
// std::invalid_argument. Any dtype; an image that is not flipped is copied.
class Flip : public ImageAugmentor {
 public:
  explicit Flip(FlipOptions options = {});
  std::string name() const override { return "Flip"; }
  std::string describe() const override;  // "Flip(horizontal, p=0.5)"
  at::Tensor augment(const at::Tensor& chw, AugmentRng& rng) const override;

 private:
  FlipOptions options_;
};

// Per-channel normalisation (torchvision's ToTensor + Normalize): uint8 becomes float32
// (x / 255 - mean[c]) / std[c]; a floating image is taken as already in [0, 1] and keeps its
// dtype, (x - mean[c]) / std[c]. Computed in float32 (float64 for float64 images), in that order,
// as torchvision does. mean and std have one entry per channel: an empty mean, sizes that differ,
// or a std entry of 0 is std::invalid_argument at construction; an image whose channel count
// differs is std::invalid_argument naming both counts. Draws nothing.
class Normalize : public ImageAugmentor {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  std::string name() const override { return "Normalize"; }
  // "Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])"
  std::string describe() const override;
  at::Tensor augment(const at::Tensor& chw, AugmentRng& rng) const override;

 private:
  std::vector<double> mean_;
  std::vector<double> std_;
};

// Applies augmentors in order, each to the previous one's output, all drawing from the same rng
// (tensorpack's AugmentorList). An empty list copies the image. A null augmentor is
// std::invalid_argument.
class AugmentorList : public ImageAugmentor {
 public:
  explicit AugmentorList(std::vector<ImageAugmentorPtr> augmentors);
  std::string name() const override { return "AugmentorList"; }
  // "AugmentorList([ResizeShortestEdge(32), RandomCrop(28x28)])"
  std::string describe() const override;
  at::Tensor augment(const at::Tensor& chw, AugmentRng& rng) const override;
  const std::vector<ImageAugmentorPtr>& augmentors() const { return augmentors_; }
  // "[ResizeShortestEdge(32), RandomCrop(28x28)]"
  std::string describe_items() const;

 private:
  std::vector<ImageAugmentorPtr> augmentors_;
};

struct AugmentImageComponentOptions {
  // The component of each datapoint that is the image.
  TORCH_ARG(int64_t, index) = 0;
  // With (pass, position), decides every random choice.
  TORCH_ARG(uint64_t, seed) = 0;
};

// Applies augmentors to one component of every datapoint of `ds` (tensorpack's
// AugmentImageComponent(ds, augmentors, index)); the other components pass unchanged. The
// datapoint at (pass, position) is augmented with AugmentRng(seed, pass, position), so its result
// depends on nothing else: seek() is exact (nothing is skipped or dropped, the next datapoint is
// the one an uninterrupted run would have produced there), and pass k + 1 draws anew. Seekable
// when `ds` is; reset_state(), size() and first_unseekable() are those of `ds`, as for MapData.
// A null dataflow or augmentor, or a negative index, is std::invalid_argument at construction; a
// datapoint without the component is std::invalid_argument from next().
class AugmentImageComponent : public DataFlow {
 public:
  AugmentImageComponent(DataFlowPtr ds, std::vector<ImageAugmentorPtr> augmentors,
                        AugmentImageComponentOptions options = {});
  std::string name() const override { return "AugmentImageComponent"; }
  // "AugmentImageComponent(index=0, [ResizeShortestEdge(32), RandomCrop(28x28), Flip(horizontal,
  // p=0.5)]) over <ds>", with ", seed=S" after the index when the seed is not 0.
  std::string describe() const override;
  void reset_state() override { ds_->reset_state(); }
  std::optional<int64_t> size() const override { return ds_->size(); }
  const DataFlow* first_unseekable() const override { return ds_->first_unseekable(); }

 protected:
  void _begin_pass(int64_t pass) override { ds_->begin_pass(pass); }
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override {
    ds_->seek(datapoints_consumed_in_this_pass);
  }

 private:
  DataFlowPtr ds_;
  AugmentorList augmentors_;
  AugmentImageComponentOptions options_;
};

}  // namespace trainpack
