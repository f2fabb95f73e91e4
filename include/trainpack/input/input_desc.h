// The inputs of a model: their names, shapes and dtypes (tensorpack's `tf.TensorSpec` in
// `ModelDesc.inputs()`), and the check of a batch against them. Input sources check every batch
// they deliver; trainers and inference runners take the signature from the model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trainpack {

// One input of a model: name, shape (-1 for "any size", usually the batch dimension) and dtype.
//   InputDesc("image", {-1, 1, 28, 28}, at::kFloat), InputDesc("label", {-1}, at::kLong)
struct InputDesc {
  InputDesc(std::string name, std::vector<int64_t> shape, at::ScalarType dtype = at::kFloat);

  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;

  // True if `t` has this rank, these sizes (where not -1) and this dtype.
  bool matches(const at::Tensor& t) const;
  // "image: [-1, 1, 28, 28] float"
  std::string to_string() const;
};

using InputSignature = std::vector<InputDesc>;

// Checks a batch against the signature: the number of components, then each one's rank, sizes
// and dtype. Throws std::invalid_argument naming `who`, the input, what was expected and what
// came, e.g. "QueueInput: input 'label' should be [-1] long, but the batch has [32, 1] float".
void check_inputs(const InputSignature& signature, const std::vector<at::Tensor>& batch,
                  const std::string& who);

}  // namespace trainpack
