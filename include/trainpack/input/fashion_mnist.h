// Fashion-MNIST from the gzipped IDX files of Debian's `dataset-fashion-mnist` (tensorpack's
// dataset.FashionMnist, which downloads them; these are never downloaded).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/input/dataflow.h"

namespace trainpack {

// Where Debian's dataset-fashion-mnist installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct FashionMnistOptions {
  // Shuffle every pass; the order of pass k is a pure function of (seed, k) (DataFromList).
  TORCH_ARG(bool, shuffle) = false;
  TORCH_ARG(uint64_t, seed) = 0;
};

// A dataflow over one split of Fashion-MNIST, read whole into memory at construction: datapoints
// are {image float32 [28, 28] scaled to [0, 1], label int64 scalar in 0..9} (tensorpack's labels
// are int32); 60000 for "train" (train-*-ubyte.gz), 10000 for "test" (t10k-*-ubyte.gz). It is a
// DataFromList, so it seeks. Errors: an unknown split is std::invalid_argument; every problem
// with a file is a std::runtime_error naming the file: missing (naming the Debian package and how
// to install it), a wrong magic number (2051 for images, 2049 for labels, big-endian), images not
// 28x28, a truncated or corrupt file, image and label counts that differ, a label outside 0..9.
class FashionMnist : public DataFromList {
 public:
  explicit FashionMnist(const std::string& split, const std::string& dir = kFashionMnistDir,
                        FashionMnistOptions options = {});
  std::string name() const override { return "FashionMnist"; }

  // The whole split as two tensors: images float32 [N, 28, 28] in [0, 1], labels int64 [N].
  // Same checks and errors as the constructor.
  static std::pair<at::Tensor, at::Tensor> read(const std::string& split,
                                                const std::string& dir = kFashionMnistDir);
};

}  // namespace trainpack
