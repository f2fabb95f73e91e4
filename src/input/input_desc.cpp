#include "trainpack/input/input_desc.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <stdexcept>

namespace trainpack {
namespace {

std::string dtype_name(at::ScalarType t) {
  std::string s = c10::toString(t);  // "Float", "Long"
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

InputDesc::InputDesc(std::string name_, std::vector<int64_t> shape_, at::ScalarType dtype_)
    : name(std::move(name_)), shape(std::move(shape_)), dtype(dtype_) {
  if (name.empty()) throw std::invalid_argument("InputDesc: the name is empty");
  for (int64_t d : shape) {
    if (d < -1) {
      throw std::invalid_argument(fmt::format(
          "InputDesc('{}'): dimension {} is invalid; use -1 for a dimension of any size", name, d));
    }
  }
}

bool InputDesc::matches(const at::Tensor& t) const {
  if (!t.defined() || t.scalar_type() != dtype) return false;
  if (t.dim() != static_cast<int64_t>(shape.size())) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != -1 && shape[i] != t.size(static_cast<int64_t>(i))) return false;
  }
  return true;
}

std::string InputDesc::to_string() const {
  return fmt::format("{}: [{}] {}", name, fmt::join(shape, ", "), dtype_name(dtype));
}

void check_inputs(const InputSignature& signature, const std::vector<at::Tensor>& batch,
                  const std::string& who) {
  if (batch.size() != signature.size()) {
    std::vector<std::string> names;
    for (const auto& d : signature) names.push_back(d.name);
    throw std::invalid_argument(fmt::format(
        "{}: the batch has {} components, but the input signature has {} ({}); the dataflow "
        "must produce one component per input, in the signature's order",
        who, batch.size(), signature.size(), fmt::join(names, ", ")));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const InputDesc& d = signature[i];
    if (d.matches(batch[i])) continue;
    if (!batch[i].defined()) {
      throw std::invalid_argument(
          fmt::format("{}: input '{}' (component {}) is an undefined tensor", who, d.name, i));
    }
    throw std::invalid_argument(
        fmt::format("{}: input '{}' (component {}) should be [{}] {}, but the batch has {} {}", who,
                    d.name, i, fmt::join(d.shape, ", "), dtype_name(d.dtype),
                    fmt::format("[{}]", fmt::join(batch[i].sizes(), ", ")),
                    dtype_name(batch[i].scalar_type())));
  }
}

}  // namespace trainpack
